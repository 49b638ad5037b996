/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_RUBY_H
#define FW_AGENT_INTERP_RUBY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * CRuby support: finds the VM in a process (libruby-3.x.so, or a ruby
 * executable that defines ruby_current_ec itself), works out where each
 * thread's ruby_current_ec TLS variable lives from the binary's TLS
 * relocations as the dynamic linker filled them in, and describes it with
 * the VM's struct layout for its version to BPF in the rb_procs map. User
 * space then names the (iseq, pc) pairs BPF reports by reading the iseqs
 * from the process. docs/ruby.md has the details and the versions covered.
 */
struct ruby;
struct proc_table;

struct ruby_stats {
	uint64_t procs;			/* CRuby processes described to BPF now */
	uint64_t iseq_reads;		/* iseqs read from processes */
	uint64_t iseq_read_errors;	/* iseqs that could not be read */
	uint64_t iseq_rereads;		/* failed or stale entries read again */
};

/* map_fd is the sampler's rb_procs map and procs the process table (both borrowed). */
struct ruby *ruby__new(int map_fd, struct proc_table *procs);
/* Accepts NULL. */
void ruby__free(struct ruby *rb);

/*
 * Looks at pid: the first time (and a few times more while it is not CRuby
 * yet, since libruby is mapped after exec) reads its mappings and, for
 * CRuby, describes it to BPF. Cheap once decided.
 */
void ruby__note_pid(struct ruby *rb, pid_t pid);
/* pid mapped new files (the unwinder re-read its maps): looks again now. */
void ruby__maps_changed(struct ruby *rb, pid_t pid);
/* The process exec'd or exited: forget it. */
void ruby__forget(struct ruby *rb, pid_t pid);

/* What one process's VM looks like; borrowed, valid until ruby__forget(). */
struct ruby_proc;
/* NULL unless pid is a CRuby process described to BPF. Accepts a NULL rb. */
const struct ruby_proc *ruby__proc(struct ruby *rb, pid_t pid);
/* addr is in rb_vm_exec(): a native frame that Ruby frames replace. */
bool ruby__is_exec(const struct ruby_proc *rp, uint64_t addr);
/* addr is in the VM's own code (libruby, or the ruby executable holding it). */
bool ruby__in_vm(const struct ruby_proc *rp, uint64_t addr);

/*
 * Names one Ruby frame from BPF (iseq address, pc without flags): *function
 * (the iseq's label: "inner", "block in outer", "<main>") and *file are
 * borrowed until the next call that may read iseqs; *line is 0 when
 * unknown. Returns 0, or -errno when the iseq cannot be read (then the
 * caller shows a placeholder).
 */
int ruby__frame(struct ruby *rb, const struct ruby_proc *rp, uint64_t iseq, uint64_t pc,
		const char **function, const char **file, uint32_t *line);

void ruby__stats(const struct ruby *rb, struct ruby_stats *out);

/* The collector's calls (agent/interp/interp.h), on a struct ruby. */
struct interp_ops;
extern const struct interp_ops ruby_interp_ops;

/*
 * Pure helper, exposed for unit tests: the instruction positions that a
 * CRuby succinct index table (iseq.c, VM_INSN_INFO_TABLE_IMPL 2) marks,
 * for an iseq of iseq_size words. table holds the table's bytes (len of
 * them). Writes up to max positions, ascending, to out; returns how many
 * it wrote, or -EINVAL when the table is too short for iseq_size.
 */
int ruby__succ_positions(const uint8_t *table, size_t len, uint32_t iseq_size,
			 uint32_t *out, uint32_t max);

#endif
