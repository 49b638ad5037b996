/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_HOTSPOT_VMSTRUCTS_H
#define FW_AGENT_INTERP_HOTSPOT_VMSTRUCTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * HotSpot's serviceability tables: libjvm.so exports gHotSpotVMStructs
 * (type, field, offset or address), gHotSpotVMTypes (type, size) and
 * gHotSpotVMIntConstants, plus the layout of their entries, so that a
 * debugger can learn the JVM's internals without headers. This reads the
 * entries asked for out of a live process.
 */

/* A field: its offset in its type, or for a static field its address. */
struct vm_field {
	const char *type, *field;
	uint64_t value;
	bool is_static, found;
};

struct vm_type {
	const char *type;
	uint64_t size;
	bool found;
};

struct vm_const {
	const char *name;
	int64_t value;
	bool found;
};

struct vm_want {
	struct vm_field *fields;
	size_t nfields;
	struct vm_type *types;
	size_t ntypes;
	struct vm_const *consts;
	size_t nconsts;
};

/* Reads len bytes of pid's memory at addr: 0, or -errno (-EFAULT when short). */
int vmstructs__read_mem(pid_t pid, uint64_t addr, void *buf, size_t len);

/*
 * Fills what w asks for from the tables of the libjvm.so opened as fd and
 * loaded at bias in pid. Returns 0 when the tables were read (entries not
 * in them keep found false), -ENOENT when the file exports no tables, or
 * -errno.
 */
int vmstructs__read(pid_t pid, int fd, uint64_t bias, struct vm_want *w);

#endif
