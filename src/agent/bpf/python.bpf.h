/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The CPython frame walk, included by sample.bpf.c after its maps and
 * helpers. For a process user space has described in py_procs, it finds the
 * sampled thread's PyThreadState, follows the interpreter's frame chain from
 * the current frame outwards and appends (code object, instruction) per
 * Python frame to the sample; user space names them and splices them into
 * the native stack.
 *
 * The thread state is found by its thread_id, which CPython sets to
 * pthread_self(): on x86-64 that is the thread's TCB, whose address the
 * kernel keeps as the task's fs base. That works for every thread, holding
 * the GIL or not, with no TLS layout to know. The list walk is cached per
 * thread and revalidated with one read.
 */
#include "python.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct fw_py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct fw_py_code_key);
	__type(value, __u8);
} py_known SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);		/* tid */
	__type(value, __u64);		/* its PyThreadState */
} py_tstates SEC(".maps");

/* The first bytes of one frame, read at once; fields are taken at their offsets. */
#define FW_PY_FRAME_READ 128

struct fw_py_buf {
	__u8 b[FW_PY_FRAME_READ];
};

/* One per scratch slot: a CPU sample may interrupt a CUDA launch's walk. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct fw_py_buf);
} py_scratch SEC(".maps");

struct fw_py_walk {
	struct fw_py_proc *pp;
	__u64 frame;
	__u32 base;	/* index in addrs of the first Python word */
	__u32 n;
	__u32 fault;
	__u32 slot;	/* the scratch slot s lives in: 1 for a CUDA launch */
	__u32 tgid;
};

static __always_inline __u64 py_u64(struct fw_py_buf *buf, __u32 off)
{
	__u64 v = 0;

	if (off > FW_PY_FRAME_READ - 8)
		return 0;
	__builtin_memcpy(&v, &buf->b[off], 8);
	return v;
}

static __always_inline __u8 py_u8(struct fw_py_buf *buf, __u32 off)
{
	if (off > FW_PY_FRAME_READ - 1)
		return 0;
	return buf->b[off];
}

static __always_inline long py_frame(struct fw_py_walk *w, struct fw_py_proc *pp)
{
	__u64 code, prev, instr, type = 0, line = 0, *slot;
	struct fw_py_buf *buf;
	struct fw_sample *s;
	__u32 idx, layout, rd;
	bool entry = false;

	if (!w->frame)
		return 1;
	s = bpf_map_lookup_elem(&scratch, &w->slot);
	buf = bpf_map_lookup_elem(&py_scratch, &w->slot);
	if (!s || !buf)
		return 1;
	layout = pp->layout;
	/* 3.10's f_lasti sits past 96; later frames fit in 72 bytes. */
	rd = layout == FW_PY_310 ? FW_PY_FRAME_READ : 72;
	if (bpf_probe_read_user(buf->b, rd, (void *)w->frame)) {
		w->fault = 1;
		return 1;
	}
	code = py_u64(buf, pp->frame_code);
	prev = py_u64(buf, pp->frame_previous);
	w->frame = prev;
	if (layout >= FW_PY_312 &&
	    py_u8(buf, pp->frame_owner) == FW_PY_FRAME_OWNED_BY_CSTACK) {
		/* A shim: the frame below it was the first of its eval call. */
		if (w->n) {
			idx = w->base + 2 * (w->n - 1) + 1;
			if (idx < FW_MAX_FRAMES + 2 * FW_MAX_PYFRAMES)
				s->addrs[idx] |= FW_PY_ENTRY;
		}
		return 0;
	}
	if (layout == FW_PY_310) {
		__u32 lasti = 0;

		if (pp->frame_instr <= FW_PY_FRAME_READ - 4)
			__builtin_memcpy(&lasti, &buf->b[pp->frame_instr & (FW_PY_FRAME_READ - 1)], 4);
		instr = lasti;
		entry = true;	/* every 3.10 frame has an eval call of its own */
	} else {
		instr = py_u64(buf, pp->frame_instr);
		if (layout == FW_PY_311)
			entry = py_u8(buf, pp->frame_is_entry);
	}
	/* 3.13 frames may run things other than code objects: skip those. */
	if (!code || bpf_probe_read_user(buf->b, FW_PY_CODE_READ, (void *)code))
		return 0;
	type = py_u64(buf, 8);
	if (type != pp->code_type)
		return 0;
	/* (byte 0 where user space gave no offset: it does not check then) */
	line = py_u8(buf, pp->code_firstlineno);
	if (w->n >= FW_MAX_PYFRAMES) {
		stat_inc(FW_STAT_PY_TRUNCATED);
		return 1;
	}
	idx = w->base + 2 * w->n;
	if (idx >= FW_MAX_FRAMES + 2 * FW_MAX_PYFRAMES - 1)
		return 1;
	slot = &s->addrs[idx];
	slot[0] = code;
	slot[1] = (instr & FW_PY_INSTR_MASK) | line << FW_PY_LINE_SHIFT | (entry ? FW_PY_ENTRY : 0);
	w->n++;
	return 0;
}

struct fw_py_known_walk {
	__u32 base, n, pid, unknown, slot;
};

/* Is frame i's code object one user space has read? */
static long py_known_step(__u32 i, void *ctx)
{
	struct fw_py_known_walk *k = ctx;
	struct fw_py_code_key key = { .pid = k->pid };
	struct fw_sample *s;
	__u32 idx;

	if (i >= k->n)
		return 1;
	s = bpf_map_lookup_elem(&scratch, &k->slot);
	if (!s)
		return 1;
	idx = k->base + 2 * i;
	if (idx >= FW_MAX_FRAMES + 2 * FW_MAX_PYFRAMES)
		return 1;
	key.code = s->addrs[idx];
	if (!bpf_map_lookup_elem(&py_known, &key)) {
		k->unknown = 1;
		return 1;
	}
	return 0;
}

/* As py_frame_noloop(), for the check of code objects user space has read. */
__noinline int py_known_noloop(struct fw_py_known_walk *k, __u32 i)
{
	if (!k)
		return 1;
	return py_known_step(i, k);
}

static long py_step(__u32 i, void *ctx)
{
	struct fw_py_walk *w = ctx;

	return py_frame(w, w->pp);
}

/* As unwind_frame_noloop(), for kernels without bpf_loop(). */
__noinline int py_frame_noloop(struct fw_py_walk *w)
{
	struct fw_py_proc *pp;
	__u32 tgid;

	if (!w)
		return 1;
	tgid = w->tgid;
	pp = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!pp)
		return 1;
	return py_frame(w, pp);
}

static __always_inline __u64 py_find_tstate(struct fw_py_proc *pp, __u32 tid, __u64 tcb)
{
	__u64 interp = 0, ts = 0, id = 0, *cached;

	cached = bpf_map_lookup_elem(&py_tstates, &tid);
	if (cached) {
		ts = *cached;
		if (ts && !bpf_probe_read_user(&id, sizeof(id), (void *)(ts + pp->tstate_thread_id)) &&
		    id == tcb)
			return ts;
	}
	if (bpf_probe_read_user(&interp, sizeof(interp), (void *)pp->interp_head) || !interp ||
	    bpf_probe_read_user(&ts, sizeof(ts), (void *)(interp + pp->interp_threads_head)))
		return 0;
	for (int i = 0; i < FW_PY_MAX_THREADS && ts; i++) {
		if (bpf_probe_read_user(&id, sizeof(id), (void *)(ts + pp->tstate_thread_id)))
			return 0;
		if (id == tcb) {
			bpf_map_update_elem(&py_tstates, &tid, &ts, BPF_ANY);
			return ts;
		}
		if (bpf_probe_read_user(&ts, sizeof(ts), (void *)(ts + pp->tstate_next)))
			return 0;
	}
	return 0;
}

/*
 * Appends the Python frames of thread tid (its TCB tcb), if its process is
 * CPython, to s, which is scratch slot `slot` (the walk's callbacks find it
 * there, as the native unwinder's do). Returns the ring buffer flag for the sample: a wakeup when one
 * of its code objects is new to user space.
 */
static __always_inline __u64 python_walk_tcb(struct fw_sample *s, __u32 slot, __u32 tgid,
					     __u32 tid, __u64 tcb)
{
	struct fw_py_walk w = { .base = (__u32)s->kstack_len + s->ustack_len, .slot = slot };
	struct fw_py_proc *pp;
	__u64 ts, frame = 0;

	pp = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!pp)
		return BPF_RB_NO_WAKEUP;
	ts = py_find_tstate(pp, tid, tcb);
	if (!ts) {
		/* Threads that never ran Python have no thread state: not a failure of ours. */
		stat_inc(FW_STAT_PY_NO_THREAD);
		return BPF_RB_NO_WAKEUP;
	}
	if (bpf_probe_read_user(&frame, sizeof(frame), (void *)(ts + pp->tstate_frame)))
		goto fault;
	if ((pp->layout == FW_PY_311 || pp->layout == FW_PY_312) && frame &&
	    bpf_probe_read_user(&frame, sizeof(frame), (void *)(frame + pp->cframe_current_frame)))
		goto fault;
	if (!frame)
		return BPF_RB_NO_WAKEUP;
	w.pp = pp;
	w.frame = frame;
	w.tgid = tgid;
	if (have_bpf_loop) {
		bpf_loop(FW_MAX_PYFRAMES + 16, py_step, &w, 0);	/* + shim frames */
	} else {
		for (__u32 i = 0; i < FW_MAX_PYFRAMES + 16; i++)
			if (py_frame_noloop(&w))
				break;
	}
	if (w.fault)
		stat_inc(FW_STAT_PY_FAULT);
	if (!w.n)
		return BPF_RB_NO_WAKEUP;
	s->pystack_len = w.n;
	stat_inc(FW_STAT_PY_SAMPLES);
	{
		__u32 key = FW_STAT_PY_FRAMES;
		__u64 *v = bpf_map_lookup_elem(&stats, &key);

		if (v)
			*v += w.n;
	}
	{
		struct fw_py_known_walk k = { .base = w.base, .n = w.n, .pid = tgid, .slot = slot };

		if (have_bpf_loop) {
			bpf_loop(FW_MAX_PYFRAMES, py_known_step, &k, 0);
		} else {
			for (__u32 i = 0; i < FW_MAX_PYFRAMES; i++)
				if (py_known_noloop(&k, i))
					break;
		}
		if (k.unknown) {
			stat_inc(FW_STAT_PY_WAKEUPS);
			return BPF_RB_FORCE_WAKEUP;
		}
	}
	return BPF_RB_NO_WAKEUP;
fault:
	stat_inc(FW_STAT_PY_FAULT);
	return BPF_RB_NO_WAKEUP;
}

/* The same for the sampled thread, task. */
static __always_inline __u64 python_walk(struct fw_sample *s, __u32 slot, __u32 tgid, __u32 tid,
					 struct task_struct *task)
{
	return python_walk_tcb(s, slot, tgid, tid, BPF_CORE_READ(task, thread.fsbase));
}
