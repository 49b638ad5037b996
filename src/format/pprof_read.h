/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_PPROF_READ_H
#define FW_FORMAT_PPROF_READ_H

#include <stddef.h>
#include <stdint.h>

struct batch;

struct pprof_read_limits {
	size_t max_decompressed;	/* bytes after gunzip */
	size_t max_unpacked;		/* memory for the unpacked message */
	size_t max_samples;
	size_t max_stack_depth;
};

/*
 * 32 MiB decompressed, 128 MiB unpacked, 1,000,000 samples, 1024 frames a
 * stack: room for the largest profiles Go writes, not for a bomb.
 */
struct pprof_read_limits pprof_read_limits__default(void);

/*
 * Reads a pprof profile (profile.proto, gzipped or not), as Go's
 * net/http/pprof and other tools write it, into b: one batch sample per
 * pprof sample, stamped with the profile's time (or now_ns when it has
 * none), its stack root first with inlined functions expanded, in the
 * series given by the n labels plus `comm` (the sample's "comm" or
 * "thread_name" string label, else the main mapping's file name). The
 * value is the sample count: the "samples" value if present, else the
 * CPU time divided by the period. b should be fresh: on error it is
 * emptied, so nothing half-read is ever stored. Counts and the memory
 * the unpacked message takes are checked before it is unpacked.
 * Returns 0 or -EINVAL / -E2BIG / -ENOMEM with a message in err.
 */
int pprof__read(const void *data, size_t len, const struct pprof_read_limits *lim,
		const char *const *names, const char *const *values, size_t n, int64_t now_ns,
		struct batch *b, char *err, size_t err_len);

#endif
