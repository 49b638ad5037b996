// SPDX-License-Identifier: GPL-2.0
/*
 * Library loads as events: tells the agent which process loads a library
 * of a given name (libflamewatch-cuda.so, which the CUDA driver dlopens at
 * cuInit, or a program links), so that it reads that process's maps once
 * instead of polling every new process for seconds.
 *
 * The hook is the dynamic loader's debugger interface: glibc's ld.so calls
 * the empty function _dl_debug_state() after every change of its list of
 * loaded objects (at start-up, in dlopen and dlclose), with _r_debug.r_state
 * saying RT_CONSISTENT once the change is complete. A uprobe on it, one per
 * loader file (containers bring their own), walks the list (_r_debug.r_map,
 * struct link_map: both public ABI, <link.h>) and compares the names of
 * the objects it has not seen before in this process with the watched one,
 * so only loads of that library reach user space. The uprobe's cookie is
 * the distance from _dl_debug_state to _r_debug in the loader file: the
 * probe's address then gives _r_debug's in the process.
 *
 * Why not a kernel function: kprobes and BPF trampolines (fentry on
 * security_mmap_file would see every loader at once) are missing on some
 * kernels, this project's CI machine among them; uprobes are what the CUDA
 * probes need anyway. Loaders without the two symbols (musl), static
 * binaries and paths longer than PATH_LEN are left to the agent's
 * periodic scan. Needs bpf_loop() (Linux 5.17+): the agent polls without.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "libwatch.h"

char LICENSE[] SEC("license") = "GPL";

/* <link.h>, x86-64: struct r_debug and struct link_map. */
#define R_DEBUG_R_MAP 8
#define R_DEBUG_R_STATE 24
#define RT_CONSISTENT 0
#define LINK_MAP_L_NAME 8
#define LINK_MAP_L_NEXT 24

/* Longest object path read; the basename is looked for in its last bytes. */
#define PATH_LEN 256

/* Set by the loader: the file name; a name.N suffix (libfoo.so.1) matches too. */
const volatile char watch_name[FW_LIBWATCH_NAME_LEN] = {};
const volatile __u32 watch_len = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 * 1024);
} lib_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_LIBWATCH_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} libwatch_stats SEC(".maps");

/*
 * Per process: how many objects of its list were looked at. The loader
 * appends new objects at the end, so a dlopen reads only the new names;
 * a dlclose shortens the list and the count with it. Whose list: an exec
 * gives the process a new mm (and, with ASLR off, maybe the same _r_debug
 * address); a pid reused by a new process has a new mm too. No exec or
 * exit hook then: an exited process's entry waits for the LRU.
 */
struct dl_seen {
	__u64 r_debug;
	__u64 mm;
	__u32 nseen;
	__u32 pad;
};

/* Preallocated (~0.6 MiB); a process evicted meanwhile compares all its names again. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, struct dl_seen);
} dl_seen SEC(".maps");

struct path_buf {
	char path[PATH_LEN];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct path_buf);
} path_scratch SEC(".maps");

static __always_inline void stat_inc(enum fw_libwatch_stat stat)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&libwatch_stats, &key);

	if (v)
		*v += 1;
}

/*
 * Whether the object at link_map l is the watched library: its path's
 * last component is watch_name, or watch_name followed by '.'. A global
 * function: the verifier checks it once, not once per step of the walk.
 */
__noinline int object_matches(__u64 l)
{
	__u32 zero = 0, n = watch_len, start = 0;
	struct path_buf *b;
	__u64 name;
	long len;
	char next;

	if (!n || n >= FW_LIBWATCH_NAME_LEN)
		return 0;
	b = bpf_map_lookup_elem(&path_scratch, &zero);
	if (!b || bpf_probe_read_user(&name, sizeof(name), (void *)(l + LINK_MAP_L_NAME)) || !name)
		return 0;
	stat_inc(FW_LIBWATCH_NAMES);
	len = bpf_probe_read_user_str(b->path, sizeof(b->path), (void *)name);
	if (len <= 1)
		return 0;
	/* The last '/' within the name's last FW_LIBWATCH_NAME_LEN bytes. */
	for (__u32 i = 1; i <= FW_LIBWATCH_NAME_LEN; i++) {
		long at = len - 1 - i;

		if (at < 0)
			break;
		if (b->path[at & (PATH_LEN - 1)] == '/') {
			start = at + 1;
			break;
		}
	}
	for (__u32 i = 0; i < FW_LIBWATCH_NAME_LEN - 1 && i < n; i++)
		if (b->path[(start + i) & (PATH_LEN - 1)] != watch_name[i])
			return 0;
	next = b->path[(start + n) & (PATH_LEN - 1)];
	return next == '\0' || next == '.';
}

struct walk {
	__u64 l;		/* the next object; 0: the end */
	__u32 nseen;		/* objects looked at before */
	__u32 n;		/* objects walked */
	bool found;
	bool fault;
};

static long walk_step(__u64 i, void *ctx)
{
	struct walk *w = ctx;

	if (!w->l)
		return 1;
	if (i >= w->nseen && !w->found && object_matches(w->l))
		w->found = true;
	w->n = i + 1;
	if (bpf_probe_read_user(&w->l, sizeof(w->l), (void *)(w->l + LINK_MAP_L_NEXT))) {
		w->fault = true;
		w->l = 0;
		return 1;
	}
	return 0;
}

SEC("uprobe")
int on_dl_debug_state(struct pt_regs *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 r = PT_REGS_IP(ctx) + bpf_get_attach_cookie(ctx);
	struct dl_seen *seen, upd = {};
	struct walk w = {};
	__u64 mm;
	int state;

	stat_inc(FW_LIBWATCH_CALLS);
	if (bpf_probe_read_user(&state, sizeof(state), (void *)(r + R_DEBUG_R_STATE)) ||
	    bpf_probe_read_user(&w.l, sizeof(w.l), (void *)(r + R_DEBUG_R_MAP))) {
		stat_inc(FW_LIBWATCH_FAULTS);
		return 0;
	}
	if (state != RT_CONSISTENT)
		return 0;
	stat_inc(FW_LIBWATCH_WALKS);
	mm = (__u64)bpf_get_current_task_btf()->mm;
	seen = bpf_map_lookup_elem(&dl_seen, &tgid);
	if (seen && seen->r_debug == r && seen->mm == mm)
		w.nseen = seen->nseen;
	/* bpf_loop(): one check of the step, whatever the length (Linux 5.17+; before, no events). */
	bpf_loop(FW_LIBWATCH_MAX_OBJECTS, walk_step, &w, 0);
	if (w.fault)
		stat_inc(FW_LIBWATCH_FAULTS);
	else if (w.l)
		stat_inc(FW_LIBWATCH_TRUNCATED);
	upd.r_debug = r;
	upd.mm = mm;
	upd.nseen = w.n;
	bpf_map_update_elem(&dl_seen, &tgid, &upd, BPF_ANY);
	if (w.found) {
		struct fw_lib_event *e = bpf_ringbuf_reserve(&lib_events, sizeof(*e), 0);

		if (!e) {
			stat_inc(FW_LIBWATCH_RINGBUF_FULL);
			return 0;
		}
		e->pid = tgid;
		e->pad = 0;
		/*
		 * A process loaded the library: rare, and the agent attaches
		 * within a second of it only if woken (its tick is slower).
		 */
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
		stat_inc(FW_LIBWATCH_EVENTS);
	}
	return 0;
}
