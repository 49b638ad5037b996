// SPDX-License-Identifier: GPL-2.0
/*
 * CPU sampling: a perf_event program on a cpu-clock event per CPU records the
 * kernel stack and the frame-pointer user stack of whatever was running, and
 * tracepoints report exec/exit/fork so user space can keep its view of each
 * process's address space current.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sample.h"
#include "unwind.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load. */
const volatile bool follow_only = false;	/* sample only tgids in `followed` */
const volatile bool follow_children = false;	/* add forked children of followed tgids */
const volatile bool wakeup_on_exec = false;	/* wake user space for exec events */
/*
 * False on kernels without bpf_loop() (before 5.17): the walks then step
 * through global functions from bounded loops instead (see unwind_frame_noloop).
 */
const volatile bool have_bpf_loop = true;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);	/* resized by the loader */
} events SEC(".maps");

/*
 * CUDA launches and activity records: bursts of any size, so a buffer of
 * their own (2 MiB, sized by the loader). The agent maps it only once it
 * attaches to a CUDA process, so a host without one pays no memory for it.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);	/* resized by the loader */
} cuda_events SEC(".maps");

/* Set once a CUDA probe has fired for a followed process: map cuda_events now. */
__u32 cuda_seen = 0;

/*
 * The first time, user space has not mapped cuda_events yet and no wakeup
 * of it reaches anyone: a record in the samples' buffer wakes the agent,
 * which maps it before a launch burst fills it (at one drain per 100 ms,
 * the burst of a short process did, and part of its GPU time was lost).
 */
static __always_inline void cuda_note_seen(void)
{
	__u32 *e;

	if (cuda_seen)
		return;
	cuda_seen = 1;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return;
	*e = FW_EVENT_CUDA_SEEN;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

/*
 * Slot 0: CPU samples. Slot 1: CUDA launch stacks, whose uprobe program a
 * CPU sample's timer interrupt can interrupt half way through the walk.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct fw_sample);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void stat_inc(enum fw_stat stat)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&stats, &key);

	if (v)
		*v += 1;
}

static __always_inline bool is_followed(__u32 tgid)
{
	return !follow_only || bpf_map_lookup_elem(&followed, &tgid);
}

/*
 * The unwinder's view of processes: each file's rows live once, in an
 * array map of exactly their size under the file's id, and each process's
 * executable mappings point at them. BPF_F_INNER_MAP lets the inner arrays
 * differ in size from this template; BPF_F_MMAPABLE lets user space fill
 * them with one memcpy (the kernel 5.8 the ring buffer needs has it).
 */
struct unwind_rows {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	__type(key, __u32);
	/*
	 * struct unwind_row; declared by size because clang emits a struct
	 * reached only through an inner map's definition as a forward
	 * declaration, which libbpf cannot size.
	 */
	__type(value, __u64);
};

_Static_assert(sizeof(struct unwind_row) == sizeof(__u64), "inner map value is an unwind_row");

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__array(values, struct unwind_rows);
} unwind_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct fw_proc_mappings);
} proc_mappings SEC(".maps");

/*
 * Rows of large files, a chunk of their code at a time (see fw_mapping):
 * a PyTorch process maps 8 million rows' worth, most of it never run.
 * Chunk arrays are not mappable: a mappable array starts its values on a
 * page of their own, a 4-KiB header for a chunk of ~5 KiB (struct
 * fw_chunk_row).
 */
struct unwind_chunk_rows {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_INNER_MAP);
	__type(key, __u32);
	__type(value, __u64);	/* the row count in element 0, then struct fw_chunk_elem */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
	__uint(max_entries, FW_MAX_CHUNKS);
	__uint(map_flags, BPF_F_NO_PREALLOC);	/* 8,192 elements preallocated: 0.5 MiB for nothing */
	__type(key, struct fw_chunk_key);
	__array(values, struct unwind_chunk_rows);
} unwind_chunks SEC(".maps");

/* The rules chunk rows index (struct fw_chunk_row). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FW_MAX_RULES);
	__type(key, __u32);
	__type(value, struct unwind_row);
} unwind_rules SEC(".maps");

/*
 * Chunks a frame landed in before they were built. That frame is walked
 * by frame pointers; the agent takes the keys, builds the chunks and adds
 * them to unwind_chunks, where the next samples find them: the process
 * needs no new description.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct fw_chunk_key);
	__type(value, __u8);
} wanted_chunks SEC(".maps");

#include "python.bpf.h"
#include "ruby.bpf.h"

/*
 * A sample the unwinder could not walk for want of a description (a new
 * process; a library ld.so or dlopen() just mapped) wakes user space, so
 * that the next samples walk fully: waiting for its 100 ms drain (longer on
 * a loaded host) left many of the samples in a library just dlopen()ed
 * without their callers (test_late_dlopen_unwinds_at_once). Per
 * process the wakeups back off as user space's re-descriptions do (10 ms,
 * then 100 ms doubling up to 5 s: a JIT maps code all the time), and the
 * host has at most one every DESCRIBE_WAKE_GAP_NS.
 */
#define DESCRIBE_WAKE_GAP_NS	(10 * 1000000ULL)
#define DESCRIBE_WAKE_MAX_NS	(5000 * 1000000ULL)

struct describe_wake {
	__u64 next_ns;		/* boot ns before which this process does not wake us */
	__u32 wakeups;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct describe_wake);
} describe_wakes SEC(".maps");

__u64 last_describe_wake_ns;

/*
 * Ring buffer bytes pending above which a record wakes the agent (0:
 * never). Records wait for the agent's timer otherwise; off-CPU records
 * come in bursts of any size, and a timer slow enough to cost next to
 * nothing leaves even samples little room at high rates.
 */
const volatile __u64 events_wakeup_bytes = 0;

static __always_inline __u64 fill_wakeup(void)
{
	return events_wakeup_bytes &&
	       bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) > events_wakeup_bytes ?
	       BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

static __always_inline __u64 describe_wakeup(__u32 tgid, __u32 flags)
{
	struct describe_wake *w, nw = {};
	__u64 now, gap;

	if (!(flags & (FW_SAMPLE_NO_TABLES | FW_SAMPLE_UNKNOWN_MAPPING | FW_SAMPLE_WANTS_TABLE)))
		return BPF_RB_NO_WAKEUP;
	now = bpf_ktime_get_boot_ns();
	if (now - last_describe_wake_ns < DESCRIBE_WAKE_GAP_NS)
		return BPF_RB_NO_WAKEUP;
	w = bpf_map_lookup_elem(&describe_wakes, &tgid);
	if (w && now < w->next_ns)
		return BPF_RB_NO_WAKEUP;
	nw.wakeups = w ? w->wakeups + 1 : 1;
	gap = nw.wakeups < 2 ? DESCRIBE_WAKE_GAP_NS :
	      nw.wakeups < 8 ? (100 * 1000000ULL) << (nw.wakeups - 2) : DESCRIBE_WAKE_MAX_NS;
	nw.next_ns = now + gap;
	bpf_map_update_elem(&describe_wakes, &tgid, &nw, BPF_ANY);
	last_describe_wake_ns = now;
	stat_inc(FW_STAT_DESCRIBE_WAKEUPS);
	return BPF_RB_FORCE_WAKEUP;
}

/* Where the x86-64 signal frame keeps the interrupted registers, from rsp at __restore_rt. */
#define UCONTEXT_MCONTEXT 40
#define SIGCONTEXT_RBP (UCONTEXT_MCONTEXT + 10 * 8)
#define SIGCONTEXT_RSP (UCONTEXT_MCONTEXT + 15 * 8)
#define SIGCONTEXT_RIP (UCONTEXT_MCONTEXT + 16 * 8)

struct fw_unwind_state {
	__u64 ip, sp, bp;
	struct fw_proc_mappings *procmaps;	/* NULL: frame pointers only */
	struct fw_hs_proc *hs;			/* a JVM's code cache, or NULL */
	__u32 n;				/* user frames written */
	__u32 k;				/* kernel frames before them */
	__u32 exact_ip;				/* ip is not a return address (leaf, signal) */
	__u32 flags;
	__u32 slot;				/* scratch slot being filled */
	__u32 tgid;
	__u64 miss_sp;				/* sp of the first frame whose chunk was not built */
};

static __always_inline void want_chunk(struct fw_unwind_state *st, __u32 file_id, __u32 pc)
{
	struct fw_chunk_key key = { .file_id = file_id, .chunk = pc >> FW_CHUNK_SHIFT };
	__u8 one = 1;

	st->flags |= FW_SAMPLE_WANTS_TABLE;
	stat_inc(FW_STAT_UNWIND_WANTED);
	bpf_map_update_elem(&wanted_chunks, &key, &one, BPF_NOEXIST);
}

static __always_inline struct fw_mapping *find_mapping(struct fw_proc_mappings *pm, __u64 pc)
{
	__u32 lo = 0, hi = pm->n;

	if (hi > FW_MAX_PROC_MAPPINGS)
		return NULL;
	for (int i = 0; i < 9 && lo < hi; i++) {	/* 2^9 > FW_MAX_PROC_MAPPINGS */
		__u32 mid = (lo + hi) / 2;
		struct fw_mapping *m = &pm->m[mid & (FW_MAX_PROC_MAPPINGS - 1)];

		if (pc < m->start)
			hi = mid;
		else if (pc >= m->end)
			lo = mid + 1;
		else
			return m;
	}
	return NULL;
}

/*
 * Copies to *out the last row at or below pc among the count rows of a
 * file's table; 0 if there is one, -1 if not. A global function, so the
 * verifier checks its loop once, on its own: inlined into the stack walk's
 * step, the 25 rounds were explored again for every state the step was
 * entered with (most of the sampler's load time). A global
 * function cannot return a map value's address, so the row (8 bytes) is
 * copied out rather than looked up again from the file's id.
 */
__noinline int find_row(__u32 file_id, __u32 count, __u32 pc, struct unwind_row *out)
{
	__u32 lo = 0, hi = count, idx;
	struct unwind_row *r = NULL;
	void *rows;

	if (!out)	/* the verifier takes a global function's pointer as nullable */
		return -1;
	rows = bpf_map_lookup_elem(&unwind_files, &file_id);
	if (!rows)
		return -1;
	for (int i = 0; i < 25 && lo < hi; i++) {	/* tables up to 2^24 rows */
		idx = (lo + hi) / 2;
		r = bpf_map_lookup_elem(rows, &idx);
		if (!r)
			return -1;
		if (r->pc <= pc)
			lo = idx + 1;
		else
			hi = idx;
	}
	if (lo == 0 || lo < hi)
		return -1;
	/* The row last probed is the answer when the search ended past it (lo = idx + 1). */
	if (!r || idx != lo - 1) {
		idx = lo - 1;
		r = bpf_map_lookup_elem(rows, &idx);
		if (!r)
			return -1;
	}
	*out = *r;
	return 0;
}

/* Row idx of a chunk's array (struct fw_chunk_row), or NULL. */
static __always_inline struct fw_chunk_row *chunk_row(void *rows, __u32 idx)
{
	__u32 elem = 1 + idx / 2;
	struct fw_chunk_elem *e = bpf_map_lookup_elem(rows, &elem);

	return e ? &e->r[idx & 1] : NULL;
}

/*
 * Copies to *out the rule for pc in its chunk of file_id's rows: 0 if
 * there is one, -1 if not, -2 when the chunk is not built.
 */
__noinline int find_chunk_row(__u32 file_id, __u32 pc, struct unwind_row *out)
{
	struct fw_chunk_key key = { .file_id = file_id, .chunk = pc >> FW_CHUNK_SHIFT };
	__u32 lo = 0, hi, idx, zero = 0, rule, off = pc & (FW_CHUNK_BYTES - 1);
	struct fw_chunk_row *r = NULL;
	struct unwind_row *rr;
	__u64 *count;
	void *rows;

	if (!out)
		return -1;
	rows = bpf_map_lookup_elem(&unwind_chunks, &key);
	if (!rows)
		return -2;
	count = bpf_map_lookup_elem(rows, &zero);
	if (!count)
		return -1;
	/* Returned, not clamped: a constant bound would have the verifier walk every path. */
	if (*count > FW_CHUNK_BYTES)
		return -1;
	hi = (__u32)*count;
	for (int i = 0; i <= FW_CHUNK_SHIFT && lo < hi; i++) {
		idx = (lo + hi) / 2;
		r = chunk_row(rows, idx);
		if (!r)
			return -1;
		if (r->pc_off <= off)
			lo = idx + 1;
		else
			hi = idx;
	}
	if (lo == 0 || lo < hi)
		return -1;
	r = chunk_row(rows, lo - 1);
	if (!r)
		return -1;
	rule = r->rule;
	rr = bpf_map_lookup_elem(&unwind_rules, &rule);
	if (!rr)
		return -1;
	*out = *rr;
	return 0;
}

/*
 * The rows of the call sites walked lately, per CPU, direct-mapped by
 * (file, pc). A row's search costs a map lookup per step (an inner map's
 * lookups are calls, never inlined), ~20 for a large library; a process
 * that runs for days walks the same few hundred return addresses in every
 * sample and block, so most frames cost one lookup here instead. A file id
 * always names the same file (unwinder.c keys ids by build id, or device
 * and inode), so an entry never goes stale; a slot taken by another site
 * is overwritten.
 */
#define ROW_CACHE_SLOTS 2048	/* 16 bytes each: 32 KiB, the most a per-CPU value may hold */

struct row_cache {
	struct {
		__u32 file_id;	/* 0: empty (no file has id 0) */
		__u32 pc;
		struct unwind_row row;
	} e[ROW_CACHE_SLOTS];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct row_cache);
} row_cache SEC(".maps");

/*
 * As find_row() or find_chunk_row(), through the row cache: 0, -1, or -2
 * (chunk not built). Global, like them: inlined, the stack walk's step
 * grew past what the verifier will explore.
 */
__noinline int cached_row(__u32 file_id, __u32 row_count, __u32 pc, struct unwind_row *out)
{
	__u32 zero = 0, slot = ((pc ^ (file_id << 20)) * 0x9e3779b1u) >> 21;
	struct row_cache *c;
	int r;

	if (!out)	/* the verifier takes a global function's pointer as nullable */
		return -1;
	c = bpf_map_lookup_elem(&row_cache, &zero);
	slot &= ROW_CACHE_SLOTS - 1;
	if (c && c->e[slot].file_id == file_id && c->e[slot].pc == pc) {
		*out = c->e[slot].row;
		stat_inc(FW_STAT_UNWIND_ROW_CACHED);
		return 0;
	}
	r = row_count ? find_row(file_id, row_count, pc, out) : find_chunk_row(file_id, pc, out);
	if (!r && c) {
		c->e[slot].file_id = file_id;
		c->e[slot].pc = pc;
		c->e[slot].row = *out;
	}
	return r;
}

static __always_inline int read_user_u64(__u64 *dst, __u64 addr)
{
	return bpf_probe_read_user(dst, sizeof(*dst), (void *)addr);
}

#include "go.bpf.h"
#include "hotspot.bpf.h"

/*
 * One frame: records ip, then computes the caller's ip, sp and bp from the
 * row covering ip in its file's table, or from the frame pointer chain when
 * there is no table or no rule for this code. pm is the process's
 * mappings, NULL for frame pointers only. Returns 1 to stop.
 */
static __always_inline long unwind_frame(struct fw_unwind_state *st, struct fw_proc_mappings *pm,
					 struct fw_hs_proc *hp, __u32 n)
{
	__u64 pc, cfa, ip = 0, sp, bp = st->bp;
	struct unwind_row *row = NULL, found = {};
	struct fw_mapping *m = NULL;
	struct fw_sample *s;
	__u32 slot = st->slot, idx;

	s = bpf_map_lookup_elem(&scratch, &slot);
	if (!s)
		return 1;
	idx = st->k + n;
	if (idx >= FW_MAX_FRAMES || n >= FW_MAX_USTACK) {
		st->flags |= FW_SAMPLE_USTACK_TRUNCATED;
		stat_inc(FW_STAT_USTACK_TRUNCATED);
		return 1;
	}
	s->addrs[idx] = st->ip;
	st->n = n + 1;

	/* A return address is one past the call; the call is what we must look up. */
	pc = st->exact_ip ? st->ip : st->ip - 1;
	st->exact_ip = 0;
	if (hp) {
		/* JIT code and the interpreter live outside every file mapping. */
		long r = hotspot_step(st, hp, s, idx, pc);

		if (r >= 0)
			return r;
	}
	if (pm) {
		m = find_mapping(pm, pc);
		if (!m)
			st->flags |= FW_SAMPLE_UNKNOWN_MAPPING;
		else if (m->file_id && pc - m->bias <= 0xffffffffULL) {
			int r = cached_row(m->file_id, m->row_count, pc - m->bias, &found);

			if (!r) {
				row = &found;
			} else if (r == -2) {
				want_chunk(st, m->file_id, pc - m->bias);
				if (!st->miss_sp)
					st->miss_sp = st->sp;
			} else {
				stat_inc(FW_STAT_UNWIND_ROW_MISS);
			}
		}
	}

	if (!row || row->cfa_type == UNWIND_NO_CFI) {
		__u64 frame[2];		/* saved bp, return address */

		if (!st->bp)
			return 1;
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)st->bp))
			goto fault;
		stat_inc(FW_STAT_UNWIND_FP_FRAMES);
		ip = frame[1];
		bp = frame[0];
		sp = st->bp + 16;
		/* Frame pointers must climb the stack, or this is not a frame chain. */
		if (bp && bp <= st->bp)
			bp = 0;
		goto next;
	}

	stat_inc(FW_STAT_UNWIND_CFI_FRAMES);
	switch (row->cfa_type) {
	case UNWIND_END:
		return 1;
	case UNWIND_CFA_RSP:
		cfa = st->sp + row->cfa_offset;
		break;
	case UNWIND_CFA_RBP:
		cfa = st->bp + row->cfa_offset;
		break;
	case UNWIND_CFA_PLT:
		cfa = st->sp + 8 + ((st->ip & 15) >= 11 ? 8 : 0);
		break;
	case UNWIND_GO_ASMCGOCALL:
	case UNWIND_GO_SYSTEMSTACK:
	case UNWIND_GO_CGOCALLBACK:
		switch (row->cfa_type == UNWIND_GO_ASMCGOCALL ? go_leave_g0(st, row) :
			row->cfa_type == UNWIND_GO_SYSTEMSTACK ? go_leave_systemstack(st, row) :
			go_leave_cgocallback(st, row)) {
		case 0:
			return 0;
		case 1:
			return 1;
		default:
			goto fault;
		}
	case UNWIND_CFA_SIGNAL:
		if (read_user_u64(&ip, st->sp + SIGCONTEXT_RIP) ||
		    read_user_u64(&sp, st->sp + SIGCONTEXT_RSP) ||
		    read_user_u64(&bp, st->sp + SIGCONTEXT_RBP))
			goto fault;
		/* The interrupted instruction itself, not a return address. */
		st->exact_ip = 1;
		st->ip = ip;
		st->sp = sp;
		st->bp = bp;
		return ip ? 0 : 1;
	default:
		return 1;
	}
	if (read_user_u64(&ip, cfa - 8))
		goto fault;
	if (row->rbp_slot && read_user_u64(&bp, cfa - 8 * (__u64)row->rbp_slot))
		goto fault;
	sp = cfa;

next:
	if (!ip)
		return 1;
	/* Callers live higher on the stack; anything else would loop. */
	if (sp <= st->sp) {
		stat_inc(FW_STAT_UNWIND_BAD_FRAME);
		return 1;
	}
	st->ip = ip;
	st->sp = sp;
	st->bp = bp;
	return 0;

fault:
	st->flags |= FW_SAMPLE_USTACK_FAULT;
	stat_inc(FW_STAT_USTACK_FAULT);
	return 1;
}

static long unwind_step(__u32 i, void *ctx)
{
	struct fw_unwind_state *st = ctx;

	return unwind_frame(st, st->procmaps, st->hs, i);
}

/*
 * The step for kernels without bpf_loop(), called from a bounded loop. A
 * global function is verified once, on its own, rather than once per
 * iteration of the loop, which keeps 127 frames far below the verifier's
 * limits. It cannot trust pointers kept in *st, so it looks the process's
 * mappings (and its JVM's description) up again: a hash lookup per frame.
 */
__noinline int unwind_frame_noloop(struct fw_unwind_state *st)
{
	struct fw_proc_mappings *pm = NULL;
	struct fw_hs_proc *hp = NULL;
	__u32 tgid;

	if (!st)
		return 1;
	tgid = st->tgid;
	if (st->procmaps)
		pm = bpf_map_lookup_elem(&proc_mappings, &tgid);
	if (st->hs)
		hp = bpf_map_lookup_elem(&hs_procs, &tgid);
	return unwind_frame(st, pm, hp, st->n);
}

/*
 * A frame in a chunk not built yet ends the walk there (frame pointers
 * go nowhere in code built without them), so its callers' chunks would
 * be asked for one sample at a time: a stack through k new chunks took k
 * samples to come out whole. Instead the stack above the frame is
 * scanned for words that point into chunked files' code, likely return
 * addresses, and their chunks are asked for at once. A word that only
 * looks like one costs a chunk built for nothing, nothing else.
 */
#define PREFETCH_BLOCKS 64	/* of 8 words: 4 KiB of stack */

struct prefetch_state {
	struct fw_proc_mappings *pm;
	__u64 sp;
};

static long prefetch_step(__u32 i, void *ctx)
{
	struct prefetch_state *ps = ctx;
	__u64 words[8];
	__u8 one = 1;

	if (bpf_probe_read_user(words, sizeof(words), (void *)(ps->sp + i * sizeof(words))))
		return 1;
	for (int k = 0; k < 8; k++) {
		struct fw_chunk_key key;
		struct fw_mapping *m = find_mapping(ps->pm, words[k]);

		if (!m || m->row_count || !m->file_id || words[k] - m->bias > 0xffffffffULL)
			continue;
		key.file_id = m->file_id;
		key.chunk = (words[k] - m->bias) >> FW_CHUNK_SHIFT;
		if (!bpf_map_lookup_elem(&unwind_chunks, &key) &&
		    !bpf_map_update_elem(&wanted_chunks, &key, &one, BPF_NOEXIST))
			stat_inc(FW_STAT_UNWIND_PREFETCHED);
	}
	return 0;
}

/*
 * Walks the user stack into s through scratch slot `slot`: 0 for CPU
 * samples, 1 for launch probes, which a sample's timer interrupt can
 * interrupt.
 */
static __always_inline void walk_user_stack(struct fw_sample *s, __u32 tgid,
					    __u64 ip, __u64 sp, __u64 bp, __u32 slot)
{
	struct fw_unwind_state st = {
		.ip = ip, .sp = sp, .bp = bp,
		.k = s->kstack_len,
		.exact_ip = 1,
		.slot = slot,
		.tgid = tgid,
	};

	st.procmaps = bpf_map_lookup_elem(&proc_mappings, &tgid);
	if (!st.procmaps) {
		st.flags |= FW_SAMPLE_NO_TABLES;
		stat_inc(FW_STAT_UNWIND_NO_TABLES);
	}
	st.hs = bpf_map_lookup_elem(&hs_procs, &tgid);
	if (have_bpf_loop) {
		bpf_loop(FW_MAX_USTACK, unwind_step, &st, 0);
		if (st.miss_sp && st.procmaps) {
			struct prefetch_state ps = { .pm = st.procmaps, .sp = st.miss_sp };

			bpf_loop(PREFETCH_BLOCKS, prefetch_step, &ps, 0);
		}
	} else {
		for (__u32 i = 0; i < FW_MAX_USTACK; i++)
			if (unwind_frame_noloop(&st))
				break;
	}
	s->ustack_len = st.n;
	s->flags |= st.flags;
}

/*
 * What a CPU sample and an off-CPU block share: the header and the kernel
 * stack of the current task (ctx: the program's own). The user and
 * interpreter stacks follow.
 */
static __always_inline void sample_begin(void *ctx, struct fw_sample *s, __u32 type, __u32 tgid,
					 __u32 tid, __u64 boot_ns)
{
	long n;

	s->type = type;
	s->pid = tgid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->boot_ns = boot_ns;
	s->flags = 0;
	s->ustack_len = 0;
	s->pystack_len = 0;
	s->pad16 = 0;
	s->pad32 = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	n = bpf_get_stack(ctx, s->addrs, FW_MAX_KSTACK * sizeof(__u64), 0);
	if (n < 0) {
		stat_inc(FW_STAT_KSTACK_ERROR);
		n = 0;
	}
	s->kstack_len = n / sizeof(__u64);
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id, zero = 0;
	struct task_struct *task;
	struct pt_regs *regs;
	struct fw_sample *s;
	__u64 wake = BPF_RB_NO_WAKEUP;
	bool user;
	__u64 size;

	if (tid == 0) {
		stat_inc(FW_STAT_IDLE);
		return 0;
	}
	if (!is_followed(tgid)) {
		stat_inc(FW_STAT_FILTERED);
		return 0;
	}
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s) {
		stat_inc(FW_STAT_NO_SCRATCH);
		return 0;
	}

	sample_begin(ctx, s, FW_EVENT_SAMPLE, tgid, tid, bpf_ktime_get_boot_ns());

	/*
	 * When the sample interrupted the kernel, ctx->regs are kernel
	 * registers; the user registers are the ones saved on kernel entry.
	 * Kernel text lives in the upper half of the address space, which is
	 * a cheaper test than the code segment's privilege level.
	 *
	 * mm is read once, and not through the BTF pointer: the verifier looks
	 * up whether a pointer loaded from a trusted one is trusted by the
	 * name of its type, a linear search of the kernel's BTF, on every path
	 * it explores (a large share of record's CPU).
	 */
	task = bpf_get_current_task_btf();
	user = BPF_CORE_READ(task, mm) != NULL;
	if (!user) {
		s->flags |= FW_SAMPLE_KERNEL_THREAD;
	} else if ((__s64)ctx->regs.ip >= 0) {
		walk_user_stack(s, tgid, ctx->regs.ip, ctx->regs.sp, ctx->regs.bp, 0);
	} else {
		regs = (struct pt_regs *)bpf_task_pt_regs(task);
		walk_user_stack(s, tgid, BPF_CORE_READ(regs, ip), BPF_CORE_READ(regs, sp),
				BPF_CORE_READ(regs, bp), 0);
	}
	if (user) {
		wake = python_walk(s, 0, tgid, tid, task);
		if (!s->pystack_len)
			ruby_walk(s, tgid, task);
		if (wake != BPF_RB_FORCE_WAKEUP)
			wake = describe_wakeup(tgid, s->flags);
	}
	if (wake != BPF_RB_FORCE_WAKEUP)
		wake = fill_wakeup();

	size = offsetof(struct fw_sample, addrs) +
	       ((__u64)s->kstack_len + s->ustack_len + 2 * (__u64)s->pystack_len) * sizeof(__u64);
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (bpf_ringbuf_output(&events, s, size, wake)) {
		stat_inc(FW_STAT_RINGBUF_FULL);
		return 0;
	}
	stat_inc(FW_STAT_SAMPLES);
	return 0;
}

/*
 * Off-CPU time. When a followed thread blocks (leaves the CPU sleeping,
 * not preempted), the time until it runs again is charged to the stack it
 * blocked in if it reaches offcpu_min_ns. The stack has to be taken at
 * switch-out: at switch-in the thread is not current, and its user memory
 * cannot be read from another address space without sleeping.
 *
 * A walk costs far more than the rest of a switch, and most blocks of a
 * busy host are shorter than the minimum, so a block is walked only where
 * a long one is likely (offcpu_predict). A block that reaches the minimum
 * without a walk is charged all the same, without frames
 * (FW_SAMPLE_OFFCPU_NO_STACK): its time is never lost, only its stack.
 *
 * The block is settled when the thread next leaves the CPU (or exits),
 * not when it comes back: at switch-in only a raw pointer to it is at
 * hand, and its task storage wants a trusted one. Its times are the
 * scheduler's own, read from the task, never a clock helper: a clock
 * read at every switch cost more than all the rest of it. It began when
 * its runqueue's clock said as it left (rq->clock, updated at the top
 * of __schedule()), it ended when the scheduler noted its arrival
 * (sched_info.last_arrival, the same clock). Both need the kernel's
 * CONFIG_SCHED_INFO and CONFIG_FAIR_GROUP_SCHED (for the way from a task
 * to its runqueue), which distributions enable; without them every
 * block counts as unseen (FW_STAT_OFFCPU_UNSEEN).
 *
 * sched_switch runs with interrupts off, so a CPU sample's timer cannot
 * interrupt it (nor it a sample): both can walk through scratch slot 0.
 * offcpu_pending holds one entry per walked block not yet settled,
 * allocated as they block (BPF_F_NO_PREALLOC: the BPF allocator, safe
 * under the runqueue lock since Linux 6.1; off-CPU is off before).
 */
const volatile bool offcpu_on = false;
const volatile __u64 offcpu_min_ns = 1000000;
/* record --off-cpu: every block is walked, predicted or not. */
const volatile bool offcpu_walk_all = false;
/*
 * Per-thread state in task storage (offcpu_tls), or, where creating task
 * storage under the runqueue lock would call kmalloc() (Linux before 6.4),
 * in a preallocated table by tid (offcpu_threads), emptied at thread exit.
 */
const volatile bool offcpu_task_storage = true;
/*
 * The kernel's .sched.text (from kallsyms; 0: unknown), where __schedule()
 * lives. The kernel stack of a block starts in this program, the
 * tracepoint's iterator and bpf_trace_run4(): frames of ours, as many as
 * the tracepoint's static call makes them, which the record says to skip.
 */
const volatile __u64 sched_text_start = 0;
/*
 * The agent's own process (0: none): its blocks are its idle waits for
 * the next tick, known in advance and of no use to anyone, and walking
 * each of them (with the record it makes) was a steady share of its cost.
 */
const volatile __u32 offcpu_skip_tgid = 0;
const volatile __u64 sched_text_end = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u32);
	__type(value, struct fw_offcpu);
} offcpu_pending SEC(".maps");

/* The record being built: a hash value is copied in whole, so it is built here first. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_offcpu);
} offcpu_scratch SEC(".maps");

/*
 * Where a thread blocks says more about how long it will block than
 * anything else at hand: a mutex is short, a queue or a read from a
 * network filesystem long. A site is the system call and the user address
 * it was made from (the libc wrapper), hashed; a thread keeps its last
 * OFFCPU_SITES sites, each with the outcome of its last blocks.
 */
#define OFFCPU_SITES	4
#define OFFCPU_HISTORY	0xf	/* the last four blocks */

struct offcpu_thread {
	__u64 off_rq;			/* when its pending block began, rq clock; 0: none */
	__u32 site[OFFCPU_SITES];	/* 0: free */
	__u8 site_hist[OFFCPU_SITES];	/* a bit a block, newest lowest: it reached the minimum */
	__u8 hist;			/* the same over all its sites */
	__u8 known;			/* it blocked before */
	__u8 slot;			/* the pending block's site */
	__u8 walked;			/* the pending block's stack waits in offcpu_pending */
	__u8 victim;			/* the site slot a new site takes */
	__u8 pad[3];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_thread);
} offcpu_tls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);	/* 1 where offcpu_tls is used */
	__type(key, __u32);
	__type(value, struct offcpu_thread);
} offcpu_threads SEC(".maps");

#define FW_TASK_INTERRUPTIBLE	0x1
#define FW_TASK_UNINTERRUPTIBLE	0x2
#define FW_PF_KTHREAD		0x00200000

static __always_inline void stat_add(enum fw_stat stat, __u64 n)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&stats, &key);

	if (v)
		*v += n;
}

static __always_inline struct offcpu_thread *offcpu_thread(struct task_struct *task, __u32 tid,
							   bool create)
{
	struct offcpu_thread *t, zero = {};

	if (offcpu_task_storage) {
		t = bpf_task_storage_get(&offcpu_tls, task, 0,
					 create ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	} else {
		t = bpf_map_lookup_elem(&offcpu_threads, &tid);
		if (!t && create) {
			bpf_map_update_elem(&offcpu_threads, &tid, &zero, BPF_NOEXIST);
			t = bpf_map_lookup_elem(&offcpu_threads, &tid);
		}
	}
	if (!t && create)
		stat_inc(FW_STAT_OFFCPU_NO_THREAD);
	return t;
}

/*
 * Whether to walk a block at site: where the thread's last blocks at the
 * same site reached the minimum, so that a long block at a site costs at
 * most four wasted walks after it. A site new to the thread goes by its
 * blocks anywhere, and a thread's first block is walked: nothing is known
 * of it yet. Sets *slot to the site's slot.
 */
static __always_inline bool offcpu_predict(struct offcpu_thread *t, __u32 site, __u32 *slot)
{
	__u32 i;

	for (i = 0; i < OFFCPU_SITES; i++) {
		if (t->site[i] == site) {
			*slot = i;
			return t->site_hist[i] & OFFCPU_HISTORY;
		}
	}
	i = t->victim++ & (OFFCPU_SITES - 1);
	t->site[i] = site;
	t->site_hist[i] = 0;
	*slot = i;
	return !t->known || (t->hist & OFFCPU_HISTORY);
}

/* Walks the stack prev blocked in into offcpu_pending; false where it could not. */
static __always_inline bool offcpu_walk(void *ctx, struct task_struct *task, struct pt_regs *regs,
					__u32 tgid, __u32 tid, __u64 now)
{
	struct fw_offcpu *o;
	struct fw_sample *s;
	__u32 zero = 0;
	__u64 size;

	s = bpf_map_lookup_elem(&scratch, &zero);
	o = bpf_map_lookup_elem(&offcpu_scratch, &zero);
	if (!s || !o) {
		stat_inc(FW_STAT_NO_SCRATCH);
		return false;
	}
	/* prev is current here: its kernel stack ends in __schedule(). */
	sample_begin(ctx, s, FW_EVENT_OFFCPU, tgid, tid, now);
	o->kskip = 0;
	for (__u32 i = 0; i < 8 && i < s->kstack_len; i++) {
		if (s->addrs[i] >= sched_text_start && s->addrs[i] < sched_text_end) {
			o->kskip = i;
			break;
		}
	}

	/* A thread blocks in the kernel: its user registers are those saved on entry. */
	walk_user_stack(s, tgid, BPF_CORE_READ(regs, ip), BPF_CORE_READ(regs, sp),
			BPF_CORE_READ(regs, bp), 0);
	o->wakeup = python_walk(s, 0, tgid, tid, task) == BPF_RB_FORCE_WAKEUP;
	if (!s->pystack_len)
		ruby_walk(s, tgid, task);

	size = offsetof(struct fw_sample, addrs) +
	       ((__u64)s->kstack_len + s->ustack_len + 2 * (__u64)s->pystack_len) * sizeof(__u64);
	barrier_var(size);
	if (size > sizeof(*s))
		size = sizeof(*s);
	o->type = FW_EVENT_OFFCPU;
	o->blocked_ns = 0;
	if (bpf_probe_read_kernel(&o->s, size, s))
		return false;
	if (bpf_map_update_elem(&offcpu_pending, &tid, o, BPF_ANY)) {
		stat_inc(FW_STAT_OFFCPU_MAP_FULL);
		return false;
	}
	stat_inc(FW_STAT_OFFCPU_WALKS);
	return true;
}

/* Python code objects to read, or a buffer filling up: the agent drains now. */
static __always_inline __u64 offcpu_wake(bool python)
{
	return python ? BPF_RB_FORCE_WAKEUP : fill_wakeup();
}

/*
 * The record of a process the unwinder has no description of yet also
 * asks for one (describe_wakeup): a process that mostly blocks may have
 * met no CPU sample, and its next walks would go by frame pointers.
 */
static __always_inline void offcpu_emit_walked(__u32 tgid, __u32 tid, __u64 blocked_ns,
					       bool reached)
{
	struct fw_offcpu *o = bpf_map_lookup_elem(&offcpu_pending, &tid);
	__u64 size, wake;

	if (!o)
		return;
	if (!reached) {
		stat_inc(FW_STAT_OFFCPU_WALKS_SHORT);
		goto out;
	}
	stat_inc(FW_STAT_OFFCPU_TAKEN);
	stat_add(FW_STAT_OFFCPU_TAKEN_NS, blocked_ns);
	o->blocked_ns = blocked_ns;
	size = offsetof(struct fw_offcpu, s.addrs) +
	       ((__u64)o->s.kstack_len + o->s.ustack_len + 2 * (__u64)o->s.pystack_len) *
	       sizeof(__u64);
	barrier_var(size);
	if (size > sizeof(*o))
		size = sizeof(*o);
	wake = offcpu_wake(o->wakeup);
	if (wake != BPF_RB_FORCE_WAKEUP)
		wake = describe_wakeup(tgid, o->s.flags);
	o->wakeup = 0;
	if (bpf_ringbuf_output(&events, o, size, wake))
		stat_inc(FW_STAT_OFFCPU_RINGBUF_FULL);
	else
		stat_inc(FW_STAT_OFFCPU_SAMPLES);
out:
	bpf_map_delete_elem(&offcpu_pending, &tid);
}

/* The runqueue clock of task's CPU, updated as __schedule() began; 0: unknown. */
static __always_inline __u64 offcpu_rq_clock(struct task_struct *task)
{
	if (!bpf_core_field_exists(task->se.cfs_rq))
		return 0;
	return task->se.cfs_rq->rq->clock;
}

/* When task last came onto a CPU, on the same clock; 0: unknown. */
static __always_inline __u64 offcpu_arrival(struct task_struct *task)
{
	if (!bpf_core_field_exists(task->sched_info))
		return 0;
	return task->sched_info.last_arrival;
}

/*
 * A long block without its stack: the time, under the thread alone. Where
 * the unwinder does not know the process, the record says so: its next
 * walks need the description.
 */
static __always_inline void offcpu_emit_bare(__u32 tgid, __u32 tid, __u64 boot_ns,
					     __u64 blocked_ns)
{
	struct fw_offcpu *o;
	__u32 flags = FW_SAMPLE_OFFCPU_NO_STACK;
	__u64 wake;

	stat_inc(FW_STAT_OFFCPU_NOT_TAKEN);
	stat_add(FW_STAT_OFFCPU_NOT_TAKEN_NS, blocked_ns);
	o = bpf_ringbuf_reserve(&events, offsetof(struct fw_offcpu, s.addrs), 0);
	if (!o) {
		stat_inc(FW_STAT_OFFCPU_RINGBUF_FULL);
		return;
	}
	o->type = FW_EVENT_OFFCPU;
	o->wakeup = 0;
	o->kskip = 0;
	o->blocked_ns = blocked_ns;
	o->s.type = FW_EVENT_OFFCPU;
	o->s.pid = tgid;
	o->s.tid = tid;
	o->s.cpu = bpf_get_smp_processor_id();
	o->s.boot_ns = boot_ns;
	bpf_get_current_comm(o->s.comm, sizeof(o->s.comm));
	o->s.kstack_len = 0;
	o->s.ustack_len = 0;
	if (!bpf_map_lookup_elem(&proc_mappings, &tgid))
		flags |= FW_SAMPLE_NO_TABLES;
	o->s.flags = flags;
	o->s.pystack_len = 0;
	o->s.pad16 = 0;
	o->s.pad32 = 0;
	wake = offcpu_wake(false);
	if (wake != BPF_RB_FORCE_WAKEUP)
		wake = describe_wakeup(tgid, flags);
	bpf_ringbuf_submit(o, wake);
	stat_inc(FW_STAT_OFFCPU_SAMPLES);
}

/*
 * task, current again, has run since its pending block ended: charge the
 * block, and remember whether it reached the minimum.
 */
static __always_inline void offcpu_settle(struct offcpu_thread *t, struct task_struct *task,
					  __u32 tgid, __u32 tid)
{
	__u64 off_rq = t->off_rq, in_rq = offcpu_arrival(task), blocked_ns = in_rq - off_rq;
	__u32 slot = t->slot & (OFFCPU_SITES - 1);
	bool walked = t->walked, reached;

	t->off_rq = 0;
	t->walked = 0;
	if (in_rq < off_rq) {
		stat_inc(FW_STAT_OFFCPU_UNSEEN);
		if (walked)
			bpf_map_delete_elem(&offcpu_pending, &tid);
		return;
	}
	reached = blocked_ns >= offcpu_min_ns;
	t->hist = t->hist << 1 | reached;
	t->site_hist[slot] = t->site_hist[slot] << 1 | reached;
	if (walked)
		offcpu_emit_walked(tgid, tid, blocked_ns, reached);
	else if (reached)
		/* When it began, on the boot clock records carry: now, less the time since. */
		offcpu_emit_bare(tgid, tid, bpf_ktime_get_boot_ns() - (offcpu_rq_clock(task) - off_rq),
				 blocked_ns);
	else
		stat_inc(FW_STAT_OFFCPU_SHORT);
}

/*
 * The current task leaves the CPU (preempt: still runnable), or exits
 * (exiting): settle its last block, and note a new one if it blocks.
 */
static __always_inline void offcpu_leave(void *ctx, bool preempt, bool exiting)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 tgid = task->tgid, tid = task->pid, site, slot;
	struct offcpu_thread *t;
	struct pt_regs *regs;
	bool blocking, walk;
	__u64 ip, nr;

	if (!tid || tgid == offcpu_skip_tgid || (task->flags & FW_PF_KTHREAD) || !is_followed(tgid))
		return;
	blocking = !preempt && !exiting &&
		   (task->__state & (FW_TASK_INTERRUPTIBLE | FW_TASK_UNINTERRUPTIBLE));
	t = offcpu_thread(task, tid, blocking);
	if (!t)
		return;
	if (t->off_rq)
		offcpu_settle(t, task, tgid, tid);
	if (exiting && !offcpu_task_storage)
		bpf_map_delete_elem(&offcpu_threads, &tid);
	if (!blocking)
		return;
	t->off_rq = offcpu_rq_clock(task);
	if (!t->off_rq) {
		stat_inc(FW_STAT_OFFCPU_UNSEEN);
		return;
	}

	/* Loads, not bpf_probe_read_kernel() calls: this runs at every block. */
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	ip = regs->ip;
	nr = regs->orig_ax;
	site = ((__u32)ip ^ (__u32)(ip >> 32)) * 0x9e3779b1u ^ (__u32)nr;
	site |= !site;
	walk = offcpu_predict(t, site, &slot) || offcpu_walk_all;
	t->known = 1;
	t->slot = slot;
	t->walked = walk && offcpu_walk(ctx, task, regs, tgid, tid, bpf_ktime_get_boot_ns());
}

/*
 * Not in the CPU strips' object (strips.bpf.c): the stack walk needs this
 * object's unwinder maps. With strips on, their program tail-calls this
 * one; attached alone otherwise. Only the task leaving matters: a switch
 * that walks nothing costs loads from it and, for a followed thread, a
 * task storage lookup (and bpf_task_pt_regs() if it blocks).
 */
SEC("raw_tp/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	offcpu_leave(ctx, preempt, false);
	return 0;
}

static __always_inline void emit_proc_event(__u32 type, struct task_struct *p, __u32 ppid,
					    __u64 submit_flags)
{
	struct fw_proc_event *e;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(FW_STAT_PROC_RINGBUF_FULL);
		return;
	}
	e->type = type;
	e->pid = BPF_CORE_READ(p, tgid);
	e->ppid = ppid;
	e->mnt_ns = type == FW_EVENT_EXEC ? BPF_CORE_READ(p, nsproxy, mnt_ns, ns.inum) : 0;
	e->boot_ns = bpf_ktime_get_boot_ns();
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), p->comm);
	bpf_ringbuf_submit(e, submit_flags);
	stat_inc(FW_STAT_PROC_EVENTS);
}

static __always_inline void cuda_stat_add(enum fw_cuda_stat stat, __u64 n);

/* The exec mark of the CUDA ring buffer (FW_EVENT_CUDA_EXEC in sample.h). */
static __always_inline void cuda_mark_exec(__u32 tgid)
{
	struct fw_cuda_exec *e;

	if (!cuda_seen)
		return;		/* no CUDA record yet: none of an old image to tell apart */
	e = bpf_ringbuf_reserve(&cuda_events, sizeof(*e), 0);
	if (!e) {
		cuda_stat_add(FW_CUDA_STAT_EXEC_LOST, 1);
		return;
	}
	e->type = FW_EVENT_CUDA_EXEC;
	e->pid = tgid;
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/*
 * raw_tp, not tp_btf: a tp_btf program makes libbpf load the kernel's whole
 * BTF for its attach id, which the agent's memory budget cannot afford
 * (see agent/core_btf.h); the task is read through BPF_CORE_READ instead.
 */
SEC("raw_tp/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (!is_followed(tgid))
		return 0;
	/*
	 * Waking user space lets it describe the new image to the unwinder
	 * within milliseconds instead of at the next drain, so a profiled
	 * command's first samples unwind fully too.
	 */
	emit_proc_event(FW_EVENT_EXEC, p, 0, wakeup_on_exec ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	cuda_mark_exec(tgid);
	/* A new image: user space describes it from scratch, its backoff too. */
	bpf_map_delete_elem(&describe_wakes, &tgid);
	return 0;
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	/*
	 * p is current. Its last block is settled now, while the agent still
	 * knows the process: at its final switch it would come after the exit.
	 */
	if (offcpu_on)
		offcpu_leave(ctx, false, true);
	/* Only the thread group leader's exit ends the process's address space. */
	if (BPF_CORE_READ(p, pid) != tgid)
		return 0;
	bpf_map_delete_elem(&describe_wakes, &tgid);
	if (is_followed(tgid))
		emit_proc_event(FW_EVENT_EXIT, p, 0, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("raw_tp/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid), ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	/* New threads join their group, which is already followed or not. */
	if (!follow_only || !follow_children || ptgid == ctgid)
		return 0;
	if (!bpf_map_lookup_elem(&followed, &ptgid))
		return 0;
	if (bpf_map_update_elem(&followed, &ctgid, &one, BPF_ANY)) {
		stat_inc(FW_STAT_FOLLOW_FULL);
		return 0;
	}
	emit_proc_event(FW_EVENT_FORK, child, ptgid, BPF_RB_NO_WAKEUP);
	return 0;
}

/*
 * CUDA: the USDT probes of libflamewatch-cuda.so (src/cuda/probes.h). The
 * agent attaches these to every copy of the library it finds; they share
 * the ring buffer and the unwinder with the CPU sampler, so a launch's
 * stack is walked exactly like a CPU sample's.
 */
#include <bpf/usdt.bpf.h>

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_cuda_launch);
} cuda_launch_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_cuda_activity);
} cuda_activity_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_CUDA_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} cuda_stats SEC(".maps");

/* Set by the loader: ring buffer bytes pending above which a CUDA record wakes the agent. */
const volatile __u64 cuda_wakeup_bytes = 0;
/*
 * Set by the loader: pending bytes above which launches are dropped, so
 * that the rest of the buffer stays for activity records. A record without
 * its launch still counts its GPU time (under the kernel alone); a lost
 * record loses it.
 */
const volatile __u64 cuda_launch_max_bytes = 0;

/*
 * CPU samples wake the agent only once their buffer is a quarter full: it
 * drains on a timer, and their rate is fixed. Launches and records come in
 * bursts of any size, and a lost record is lost GPU time, so they wake it
 * once their own buffer fills up.
 */
static __always_inline __u64 cuda_submit_flags(void)
{
	if (cuda_wakeup_bytes && bpf_ringbuf_query(&cuda_events, BPF_RB_AVAIL_DATA) > cuda_wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void cuda_stat_add(enum fw_cuda_stat stat, __u64 n)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&cuda_stats, &key);

	if (v)
		*v += n;
}

/*
 * The Python thread of each process that last launched GPU work with
 * Python frames on its stack: PyTorch runs backward passes on native
 * threads of its own (and NCCL hooks on those), while the Python thread
 * that called backward() waits. Their launches borrow that thread's
 * Python stack as it is at the launch, so the work reaches the Python
 * function that caused it.
 */
struct fw_py_launcher {
	__u32 tid;
	__u32 pad;
	__u64 tcb;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);		/* tgid */
	__type(value, struct fw_py_launcher);
} py_launchers SEC(".maps");

static __always_inline __u64 cuda_launch_python(struct fw_sample *s, __u32 tgid, __u32 tid,
						__u64 tcb, __u64 wake)
{
	struct fw_py_launcher *last, now = { .tid = tid, .tcb = tcb };

	last = bpf_map_lookup_elem(&py_launchers, &tgid);
	if (s->pystack_len) {
		if (!last || last->tid != tid || last->tcb != tcb)
			bpf_map_update_elem(&py_launchers, &tgid, &now, BPF_ANY);
		return wake;
	}
	/* Without bpf_loop the second walk would not fit the verifier's budget. */
	if (!have_bpf_loop || !last || last->tid == tid)
		return wake;
	now = *last;
	wake = python_walk_tcb(s, 1, tgid, now.tid, now.tcb);
	if (s->pystack_len)
		s->flags |= FW_SAMPLE_PY_BORROWED;
	return wake;
}

SEC("usdt")
int BPF_USDT(on_cuda_launch, __u64 correlation, __u32 weight)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, zero = 0, one = 1;
	struct fw_cuda_launch *l;
	struct fw_sample *s;
	__u64 size, wake, tcb;

	if (!is_followed(tgid)) {
		cuda_stat_add(FW_CUDA_STAT_FILTERED, 1);
		return 0;
	}
	cuda_note_seen();
	if (cuda_launch_max_bytes &&
	    bpf_ringbuf_query(&cuda_events, BPF_RB_AVAIL_DATA) > cuda_launch_max_bytes) {
		cuda_stat_add(FW_CUDA_STAT_LAUNCH_RINGBUF_FULL, 1);
		return 0;
	}
	s = bpf_map_lookup_elem(&scratch, &one);
	l = bpf_map_lookup_elem(&cuda_launch_scratch, &zero);
	if (!s || !l) {
		stat_inc(FW_STAT_NO_SCRATCH);
		return 0;
	}
	s->type = FW_EVENT_CUDA_LAUNCH;
	s->pid = tgid;
	s->tid = (__u32)id;
	s->cpu = bpf_get_smp_processor_id();
	s->boot_ns = bpf_ktime_get_boot_ns();
	s->flags = 0;
	s->kstack_len = 0;
	s->ustack_len = 0;
	s->pystack_len = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));
	/* A uprobe runs on the user registers at the probe: its ip is the probe site. */
	walk_user_stack(s, tgid, PT_REGS_IP(ctx), PT_REGS_SP(ctx), PT_REGS_FP(ctx), 1);
	/* The Python code that launched the work (train_step, forward, ...). */
	tcb = BPF_CORE_READ(bpf_get_current_task_btf(), thread.fsbase);
	wake = python_walk_tcb(s, 1, tgid, (__u32)id, tcb);
	wake = cuda_launch_python(s, tgid, (__u32)id, tcb, wake);

	size = offsetof(struct fw_sample, addrs) +
	       ((__u64)s->ustack_len + 2 * (__u64)s->pystack_len) * sizeof(__u64);
	barrier_var(size);
	if (size > sizeof(*s))
		size = sizeof(*s);
	l->type = FW_EVENT_CUDA_LAUNCH;
	l->weight = weight;
	l->correlation = correlation;
	if (bpf_probe_read_kernel(&l->s, size, s))
		return 0;
	if (bpf_ringbuf_output(&cuda_events, l, offsetof(struct fw_cuda_launch, s) + size,
			       wake == BPF_RB_FORCE_WAKEUP ? wake : cuda_submit_flags())) {
		cuda_stat_add(FW_CUDA_STAT_LAUNCH_RINGBUF_FULL, 1);
		return 0;
	}
	cuda_stat_add(FW_CUDA_STAT_LAUNCHES, 1);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_cuda_activity, const void *recs, __u32 count)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, zero = 0;
	struct fw_cuda_activity *a;
	__u64 size;

	if (!is_followed(tgid)) {
		cuda_stat_add(FW_CUDA_STAT_FILTERED, 1);
		return 0;
	}
	cuda_note_seen();
	if (count == 0)
		return 0;
	if (count > FW_CUDA_MAX_BATCH) {
		cuda_stat_add(FW_CUDA_STAT_ACTIVITY_TRUNCATED, count - FW_CUDA_MAX_BATCH);
		count = FW_CUDA_MAX_BATCH;
	}
	a = bpf_map_lookup_elem(&cuda_activity_scratch, &zero);
	if (!a) {
		stat_inc(FW_STAT_NO_SCRATCH);
		return 0;
	}
	a->type = FW_EVENT_CUDA_ACTIVITY;
	a->pid = tgid;
	a->count = count;
	a->pad = 0;
	a->boot_ns = bpf_ktime_get_boot_ns();
	size = (__u64)count * sizeof(struct fw_cuda_record);
	/* Keep the clamp: clang drops it as redundant, but the verifier needs it. */
	barrier_var(size);
	if (size > sizeof(a->recs))
		size = sizeof(a->recs);
	if (bpf_probe_read_user(a->recs, size, recs)) {
		cuda_stat_add(FW_CUDA_STAT_ACTIVITY_FAULT, 1);
		return 0;
	}
	if (bpf_ringbuf_output(&cuda_events, a, offsetof(struct fw_cuda_activity, recs) + size,
			       cuda_submit_flags())) {
		cuda_stat_add(FW_CUDA_STAT_ACTIVITY_RINGBUF_FULL, 1);
		return 0;
	}
	cuda_stat_add(FW_CUDA_STAT_ACTIVITIES, 1);
	cuda_stat_add(FW_CUDA_STAT_RECORDS, count);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_cuda_conflict, const char *what)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct fw_cuda_conflict *c;

	cuda_stat_add(FW_CUDA_STAT_CONFLICTS, 1);
	if (!is_followed(tgid))
		return 0;
	cuda_note_seen();
	c = bpf_ringbuf_reserve(&cuda_events, sizeof(*c), 0);
	if (!c)
		return 0;
	c->type = FW_EVENT_CUDA_CONFLICT;
	c->pid = tgid;
	if (bpf_probe_read_user_str(c->what, sizeof(c->what), what) < 0)
		c->what[0] = '\0';
	bpf_ringbuf_submit(c, 0);
	return 0;
}

SEC("usdt")
int BPF_USDT(on_cuda_name, __u64 addr, const char *name)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct fw_cuda_name *n;

	if (!is_followed(tgid)) {
		cuda_stat_add(FW_CUDA_STAT_FILTERED, 1);
		return 0;
	}
	cuda_note_seen();
	n = bpf_ringbuf_reserve(&cuda_events, sizeof(*n), 0);
	if (!n) {
		cuda_stat_add(FW_CUDA_STAT_NAME_LOST, 1);
		return 0;
	}
	n->type = FW_EVENT_CUDA_NAME;
	n->pid = tgid;
	n->addr = addr;
	if (bpf_probe_read_user_str(n->name, sizeof(n->name), name) <= 0) {
		bpf_ringbuf_discard(n, 0);
		cuda_stat_add(FW_CUDA_STAT_NAME_LOST, 1);
		return 0;
	}
	bpf_ringbuf_submit(n, 0);
	cuda_stat_add(FW_CUDA_STAT_NAMES, 1);
	return 0;
}
