/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Internals of libflamewatch-cuda.so that do not touch CUPTI or USDT
 * directly, so that the unit tests can drive them: launch sampling, the
 * correlation -> weight table, kernel name interning and the conversion of
 * CUPTI activity records into struct fw_cuda_record batches.
 *
 * Everything here has hidden visibility (the library is built with
 * -fvisibility=hidden and a version script): the fwc_ prefix only keeps the
 * names apart from the application's.
 */
#ifndef FW_CUDA_FWC_H
#define FW_CUDA_FWC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "cuda/probes.h"

/* ---- launch sampling ------------------------------------------------------ */

/* What a launch API call is: the classes are sampled separately, so that a
 * sampled copy never stands for kernels and the other way round. */
enum fwc_class {
	FWC_NONE = 0,
	FWC_KERNEL,	/* kernel, cooperative and graph launches */
	FWC_MEMCPY,
	FWC_MEMSET,
	FWC_NCLASS,
};

/*
 * Per-thread sampling state. A launch is kept with probability p (Bernoulli,
 * so no launch pattern aliases with the sampling); a kept launch carries the
 * number of launches of its class seen by this thread since the previous kept
 * one, itself included. The weights of the kept launches then add up exactly
 * to the number of launches up to the last kept one, and weight x duration
 * is an unbiased estimate of the GPU time of the launches it stands for.
 */
struct fwc_thread_sampler {
	uint64_t rng;
	uint32_t gap[FWC_NCLASS];
};

void fwc_sampler_seed(struct fwc_thread_sampler *s, uint64_t seed);
/* p_fixed: keep probability in 1/2^32 (UINT32_MAX or more: keep all).
 * multiplier: the duty-cycle divisor (launches in the off windows are not
 * seen; each window stands for `multiplier` windows). Returns the weight of
 * this launch, or 0 if it is not kept. */
uint32_t fwc_sampler_take(struct fwc_thread_sampler *s, enum fwc_class cls, uint64_t p_fixed,
			  uint32_t multiplier);

/* Keep probability (in 1/2^32) so that `quota` of `expected` launches are kept. */
uint64_t fwc_sampler_probability(uint64_t quota, uint64_t expected);

/*
 * Which kernels (CUPTI's symbol name pointer) and copy or set calls (callback
 * id and direction) had a launch kept lately. A launch in a window whose slot
 * has had no launch kept for FWC_FRESH_NS is kept whatever the sampling says:
 * a kernel launched rarely among many frequent ones would otherwise seldom
 * be kept, and the GPU time carried to it (below) would have no launch of
 * its own to go under. Which launches are kept does not change GPU time
 * (the carry makes it up), so this biases nothing. Direct-mapped and racy
 * on purpose: keys sharing a slot share its period, so there is at most one
 * forced keep per slot per period.
 */
#define FWC_FRESH_SLOTS 4096
#define FWC_FRESH_NS 5000000000LL

struct fwc_fresh {
	_Atomic int64_t at[FWC_FRESH_SLOTS];	/* when a launch of the slot was kept */
};

int fwc_fresh_due(struct fwc_fresh *f, uint64_t key, int64_t now_ns);
void fwc_fresh_mark(struct fwc_fresh *f, uint64_t key, int64_t now_ns);

/* ---- correlation -> weight ------------------------------------------------ */

/*
 * Direct-mapped, lock-free: written on the launching thread at API entry
 * (before the work can complete), read when the activity record arrives.
 * A record whose correlation is not here belongs to a launch that was not
 * kept, and is dropped. Entries are never removed: a graph launch produces
 * many records with one correlation, and a later correlation that maps to
 * the same slot overwrites it. `canonical` is the correlation the launch
 * probe reported (the runtime call's when a runtime call wraps the driver
 * call whose id the record may carry). A slot is lost when a kept launch's
 * id 2^18 ids later lands on it before the record came: 4 MiB of table
 * (touched only as ids advance) cover ~0.5 s of lag at 500k API calls/s.
 */
#define FWC_WEIGHT_SLOTS (1u << 18)

struct fwc_weight_slot {
	_Atomic uint64_t key;	/* correlation + 1; 0 while being written */
	_Atomic uint64_t val;	/* canonical << 32 | weight */
};

struct fwc_weights {
	struct fwc_weight_slot slot[FWC_WEIGHT_SLOTS];
};

/* weight 0: a launch seen in a collecting window but not kept (FWC_UNKEPT). */
#define FWC_UNKEPT 0
void fwc_weights_put(struct fwc_weights *w, uint32_t corr, uint32_t canonical, uint32_t weight);
/* Returns the weight (0: not found, or not kept) and sets *canonical. */
uint32_t fwc_weights_get(struct fwc_weights *w, uint32_t corr, uint32_t *canonical);
/* Returns 1 and sets *canonical and *weight (FWC_UNKEPT too) when corr is there, else 0. */
int fwc_weights_find(struct fwc_weights *w, uint32_t corr, uint32_t *canonical, uint32_t *weight);

/*
 * GPU time of recorded work whose launch was seen but not kept: carried to
 * the next kept record of the same kernel name (of the same kind, for
 * copies and sets) by raising that record's weight, so that duration x
 * weight over the emitted records adds up to the GPU time of every record
 * CUPTI delivered, not to an estimate from the kept launches' durations
 * (heavy-tailed: a few long GEMMs among many short kernels, where the
 * estimate is off by tens of percent in a short run). The remainder below
 * one duration stays for the next one. The last record carried stands in
 * for whatever is left at exit (fwc_carry_flush()).
 */
struct fwc_carry {
	uint64_t ns;			/* GPU ns x multiplier not yet carried */
	uint64_t start, end, bytes;	/* the last record carried, CUPTI's clock */
	uint32_t device, stream;
	uint32_t has_last;
	/*
	 * The correlation of the last kept record of this name or kind: what
	 * is left at a flush goes out under its launch's stack, where the
	 * carried time before it went, rather than under no stack at all.
	 */
	uint32_t anchor;
};

/* ---- kernel names --------------------------------------------------------- */

/*
 * Interned copies of kernel names, owned by the library and never freed (the
 * agent may read them from the process by address, at any later time). Callers
 * serialise (the record path holds one lock). Bounded: past the cap every new
 * name maps to one fixed string.
 *
 * Each name is announced (the flamewatch:name probe) before the first record
 * that carries it, so that the agent has it even when the records reach it
 * after the process exited; fwc_names_reannounce() makes every name due
 * again (a tracer attached anew and knows none of them).
 */
/* Announces s (the library's copy); returns nonzero if a tracer got it. */
typedef int (*fwc_announce_fn)(void *ctx, const char *s);
/* Stored before each interned copy (8-byte aligned). */
struct fwc_name_hdr {
	uint32_t epoch;			/* announced in this epoch + 1 (0: never) */
	uint32_t pad;
	struct fwc_carry carry;
};

#define FWC_NAME_SLOTS (1u << 14)
#define FWC_NAME_BYTES_MAX (8u << 20)

struct fwc_names {
	const char *by_ptr_key[FWC_NAME_SLOTS];	/* CUPTI's pointer -> ours */
	const char *by_ptr_val[FWC_NAME_SLOTS];
	const char *by_text[FWC_NAME_SLOTS];	/* open addressing on the text */
	uint32_t count;
	size_t bytes;
	char *chunk;
	size_t chunk_left;
	uint32_t epoch;			/* names announced in another epoch are due */
	struct fwc_name_hdr fixed_hdr[2];	/* for fwc_name_full and fwc_name_unknown */
	fwc_announce_fn announce;	/* NULL: names are never announced */
	void *announce_ctx;
};

extern const char fwc_name_full[];
extern const char fwc_name_unknown[];
/* Returns the library's copy of name (never NULL). */
const char *fwc_names_intern(struct fwc_names *n, const char *name);
/* Announces s (returned by fwc_names_intern) unless it was in this epoch. */
void fwc_names_announce(struct fwc_names *n, const char *s);
void fwc_names_reannounce(struct fwc_names *n);
/* The carry of name s (returned by fwc_names_intern). */
struct fwc_carry *fwc_names_carry(struct fwc_names *n, const char *s);

/* ---- the busy timeline ---------------------------------------------------- */

/*
 * When each device ran kernels of this process, from every kernel record
 * read (kept, carried or outside any window alike): the launch budget and
 * the duty cycle thin attribution, never this. Records closer than the
 * merge gap coalesce into one span. The gap starts at FWC_BUSY_GAP_MIN_NS
 * and doubles while a device closes more than FWC_BUSY_PERIOD_SPANS spans
 * in a period (a launch-bound loop of tiny kernels would otherwise ship one
 * span a kernel), halving again once it is quiet: about a thousand spans a
 * second at most, and the gap each was merged with goes with it
 * (fw_cuda_record.bytes), with the idle time the merged gaps add up to
 * (fw_cuda_record.correlation). Records of several streams arrive a little
 * out of order: the last FWC_BUSY_GAPS gaps of the open span are kept so
 * that a late record landing in one takes its part back out of the idle.
 */
#define FWC_BUSY_DEVICES	16
#define FWC_BUSY_GAP_MIN_NS	5000ull
#define FWC_BUSY_GAP_MAX_NS	1000000ull
#define FWC_BUSY_PERIOD_NS	100000000ull
#define FWC_BUSY_PERIOD_SPANS	100u
#define FWC_BUSY_GAPS		4

struct fwc_busy {
	uint64_t start, end;	/* the open span, CUPTI's clock; end 0: none */
	uint64_t idle;		/* ns of the open span's gaps that were merged into it */
	uint64_t gap;		/* merge gap now, ns (0: FWC_BUSY_GAP_MIN_NS) */
	uint64_t period;	/* start of the period whose spans are counted */
	uint32_t spans;		/* spans closed in that period */
	uint32_t next_gap;	/* where the next merged gap goes in gaps[] */
	uint64_t gaps[FWC_BUSY_GAPS][2];	/* recent merged gaps [a, b); a == b: none */
};

/* ---- what collecting records costs the process ---------------------------- */

/*
 * The cost of CUPTI's activity records, measured in the process, so that
 * the library collects every record only where that is cheap (inject.c,
 * _choose_activity). Most of it is paid inside the launching call: the
 * durations of kernel launch calls are kept in two histograms, one for
 * calls made while the activity kinds were on, one for calls made while
 * they were off (probe windows), and the difference of their medians is
 * what a record costs a launch. Medians, not means: a call that waits for
 * room in a full launch queue takes as long as the GPU makes it, whatever
 * CUPTI does. The library's own handling of each record (on CUPTI's
 * thread) is timed directly and added.
 */
#define FWC_COST_BUCKET_NS	32u
#define FWC_COST_BUCKETS	640u	/* up to 20 us; the last bucket holds longer calls */
#define FWC_COST_MIN_CALLS	64u	/* per histogram, before a median is trusted */
#define FWC_COST_DECAY_CALLS	8192u	/* a histogram past this is halved: recent calls weigh most */

struct fwc_cost {
	_Atomic uint32_t calls[2][FWC_COST_BUCKETS];	/* [activity on] */
	_Atomic uint32_t total[2];
	uint64_t own_ns, own_records;			/* the library's record handling */
};

/* A launch call of `ns` made with the activity kinds on (1) or off (0). */
void fwc_cost_call(struct fwc_cost *c, int activity_on, uint64_t ns);
/* `ns` of thread CPU time spent converting `records` records. */
void fwc_cost_own(struct fwc_cost *c, uint64_t ns, uint64_t records);
/* Halves the histograms past FWC_COST_DECAY_CALLS (the control thread). */
void fwc_cost_decay(struct fwc_cost *c);
/* The median launch call with the activity kinds on (1) or off (0), in ns
 * (the middle of its bucket); -1 until it holds FWC_COST_MIN_CALLS calls. */
int64_t fwc_cost_median(const struct fwc_cost *c, int activity_on);
/* The library's own handling of a record, in ns of CPU time (0: none yet). */
static inline int64_t fwc_cost_own_per_record(const struct fwc_cost *c)
{
	return c->own_records ? (int64_t)(c->own_ns / c->own_records) : 0;
}
/* What one record costs the process in ns, the launch call's share and the
 * library's; -1 until both histograms hold FWC_COST_MIN_CALLS calls. */
int64_t fwc_cost_per_record(const struct fwc_cost *c, int64_t *in_call_ns, int64_t *own_ns);

/* ---- records -------------------------------------------------------------- */

#define FWC_SCALE_ONE	(1ull << 16)

typedef void (*fwc_emit_fn)(const struct fw_cuda_record *recs, uint32_t count, void *ctx);

struct fwc_batch {
	struct fw_cuda_record recs[FW_CUDA_MAX_BATCH];
	uint32_t n;
	fwc_emit_fn emit;
	void *ctx;
	/*
	 * What each launch seen in a window stands for, per enum fwc_class,
	 * x FWC_SCALE_ONE (0: 1): D, or with FLAMEWATCH_CUDA_COUNT_ALL every
	 * launch counted over those seen in windows.
	 */
	uint64_t scale[FWC_NCLASS];
	/*
	 * FLAMEWATCH_CUDA_ACTIVITY_ALL: activity is recorded between windows
	 * too, so a record whose launch no window saw is real GPU time, not
	 * a stranger: it is carried (x 1) to the next kept record of its name
	 * instead of dropped, and the scale is 1.
	 */
	int carry_unseen;
	struct fwc_carry kind_carry[6];	/* copies and sets, per FW_CUDA_* kind */
	struct fwc_busy busy[FWC_BUSY_DEVICES];	/* per device id */
};

/* Totals of what the record path saw, for the summary and the tests. */
struct fwc_stats {
	uint64_t records;		/* activity records read */
	uint64_t kept;			/* converted and emitted */
	uint64_t unsampled;		/* dropped: their launch was not seen in a window */
	uint64_t carried;		/* not kept: their GPU time carried to a kept one */
	uint64_t outside;		/* carried too: launched outside a window (carry_unseen) */
	uint64_t untimed;		/* dropped: CUPTI had no timestamps */
	uint64_t other;			/* kinds we do not convert */
	uint64_t cupti_dropped;		/* records CUPTI could not store */
	uint64_t weighted_ns[6];	/* sum of duration x weight per FW_CUDA_* kind */
	uint64_t weighted_count[6];	/* sum of weight per kind */
	uint64_t busy_spans;		/* FW_CUDA_BUSY records emitted */
	uint64_t busy_untracked;	/* kernel records of a device id past FWC_BUSY_DEVICES */
};

/* Converts one CUPTI activity record (borrowed) and appends it to b, emitting
 * full batches. offset_ns turns CUPTI timestamps into Unix ns. */
void fwc_record_add(const void *cupti_record, struct fwc_weights *w, struct fwc_names *names,
		    int64_t offset_ns, struct fwc_batch *b, struct fwc_stats *st);
/*
 * A kernel, copy or set record's correlation id and start (Unix ns, from
 * offset_ns): 1, or 0 for the other kinds and for records without a start.
 * For telling when GPU work launched after some point began (inject.c's
 * coverage fence).
 */
int fwc_record_start(const void *cupti_record, int64_t offset_ns, uint32_t *corr, int64_t *start_ns);
/* Emits what b holds. */
void fwc_batch_flush(struct fwc_batch *b);
/*
 * Closes every open busy span into b (as the records read so far leave
 * them): called once a buffer of records has been read, so that spans
 * reach the agent within a buffer's latency. A span cut here that the
 * next buffer continues is continued as a new span; the two touch.
 */
void fwc_busy_flush(struct fwc_batch *b, int64_t offset_ns, struct fwc_stats *st);
/* Appends a FW_CUDA_COVERAGE record for [start_ns, end_ns) (Unix ns). */
void fwc_coverage_add(struct fwc_batch *b, int64_t start_ns, int64_t end_ns);
/* Appends a FW_CUDA_COLLECTION record (probes.h); cost_* < 0: not known. */
void fwc_collection_add(struct fwc_batch *b, int64_t now_ns, int all, int64_t cost_ppm,
			int64_t cost_ns, uint32_t max_ppm, int by_rate, uint64_t rate);
/*
 * At exit (and, with carry_unseen, every few seconds, for names no window
 * sees): emits, for each name and kind with GPU time still carried, its
 * last carried record standing for it, under the correlation of the last
 * kept launch of that name or kind (0 when none was kept), then flushes b.
 * Within one duration per name of exact.
 */
void fwc_carry_flush(struct fwc_names *n, struct fwc_batch *b, int64_t offset_ns,
		     struct fwc_stats *st);

#endif
