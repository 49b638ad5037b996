// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/core_btf.h"
#include "agent/ringbuf.h"
#include "agent/skel_bytes.h"
#include "agent/cpu_profile.h"
#include "agent/cpu_strips.h"
#include "bpf/strips.skel.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/safe_open.h"

/* The part of a long run on one CPU already reported, boot clock. */
struct split {
	uint64_t start, upto;	/* the run's start (its key), reported until upto */
};

struct cpu_strips {
	struct strips_bpf *skel;
	struct ringbuf *rb;
	struct split *splits;	/* per possible CPU */
	int ncpus;
	char *state_vals;	/* scratch: one state per CPU */
	/* for the drain in progress */
	struct cpu_profile *cp;
	int64_t boot_to_unix;
	uint64_t intervals, dropped;
	int err;
	bool chained;		/* the program tail-calls off-CPU time's */
};

static const char *const _stat_names[FW_STRIP_STAT_MAX] = {
	[FW_STRIP_SWITCHES] = "switches",
	[FW_STRIP_EMITTED] = "emitted",
	[FW_STRIP_COALESCED_IN] = "coalesced_in",
	[FW_STRIP_RINGBUF_FULL] = "ringbuf_full",
};

const char *fw_strip_stat__name(enum fw_strip_stat stat)
{
	return stat < FW_STRIP_STAT_MAX ? _stat_names[stat] : "unknown";
}

static int64_t _boot_to_unix(void)
{
	struct timespec rt, bt;

	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_BOOTTIME, &bt);
	return ((int64_t)rt.tv_sec - bt.tv_sec) * 1000000000LL + (rt.tv_nsec - bt.tv_nsec);
}

static int _add(struct cpu_strips *s, struct batch *b, uint32_t cpu, uint32_t pid, uint32_t tid,
		const char *comm, uint64_t start_boot, uint64_t end_boot);

static int _on_record(void *ctx, void *data, size_t size)
{
	struct cpu_strips *s = ctx;
	const struct fw_cpu_interval *r = data;
	struct batch *b = cpu_profile__batch(s->cp);
	char comm[FW_STRIP_COMM_LEN + 1];

	uint64_t start;

	if (size < sizeof(*r) || r->end_ns < r->start_ns || !r->pid || !b) {
		s->dropped++;
		return 0;
	}
	start = r->start_ns;
	if (!(r->flags & FW_STRIP_COALESCED) && (int)r->cpu < s->ncpus &&
	    s->splits[r->cpu].start == r->start_ns) {
		/* The end of a run reported in pieces: only what is left. */
		start = s->splits[r->cpu].upto;
		s->splits[r->cpu].start = 0;
		if (start >= r->end_ns)
			return 0;
	}
	memcpy(comm, r->comm, FW_STRIP_COMM_LEN);
	comm[FW_STRIP_COMM_LEN] = '\0';
	_add(s, b, r->cpu, r->pid, r->tid, comm, start, r->end_ns);
	return 0;	/* a record that cannot be added is counted, not retried */
}

static int _add(struct cpu_strips *s, struct batch *b, uint32_t cpu, uint32_t pid, uint32_t tid,
		const char *comm, uint64_t start_boot, uint64_t end_boot)
{
	struct batch_cpu_interval iv;
	int64_t series, cid;

	series = cpu_profile__series(s->cp, pid, comm);
	cid = series < 0 ? series : profile__intern_string(b->dict, comm);
	if (cid < 0) {
		s->dropped++;
		return -ENOMEM;
	}
	iv = (struct batch_cpu_interval){
		.start_ns = (int64_t)start_boot + s->boot_to_unix,
		.end_ns = (int64_t)end_boot + s->boot_to_unix,
		.series = (uint32_t)series, .cpu = cpu, .tid = tid, .comm = (uint32_t)cid,
	};
	if (batch__add_cpu_interval(b, &iv)) {
		s->dropped++;
		return -ENOMEM;
	}
	s->intervals++;
	return 0;
}

/*
 * Half a second of the worst case (strips.bpf.c) for every CPU, a power of
 * two, 64 KiB at least: 1 MiB on 16 CPUs, 128 KiB on 2 (of RSS too: its
 * data is mapped once, see ringbuf.h). Threads that switch as fast as they
 * can (the pingpong workload) write about half the worst case: the ring
 * then lasts a second without a drain, two of the agent's ticks, and it
 * wakes the agent at a quarter full whatever the rate.
 */
static uint32_t _ringbuf_size(uint64_t min_ns, uint64_t window_ns, int ncpus)
{
	uint64_t per_cpu = 1000000000ULL / (min_ns < window_ns ? min_ns : window_ns);
	uint64_t want = per_cpu * (BPF_RINGBUF_HDR_SZ + sizeof(struct fw_cpu_interval)) *
			(ncpus > 0 ? ncpus : 1);
	uint32_t size = 64 * 1024;

	while (size < want && size < (1u << 30))
		size <<= 1;
	return size;
}

struct cpu_strips *cpu_strips__open(const struct cpu_strips_opts *o)
{
	struct cpu_strips *s = calloc(1, sizeof(*s));
	uint64_t min_ns = o && o->min_ns ? o->min_ns : 1000000;
	uint64_t window_ns = o && o->window_ns ? o->window_ns : 1000000;
	struct core_btf btf = { .fd = -1 };
	int err;

	if (!s)
		return NULL;
	{
		size_t size;
		const void *elf = strips_bpf__elf_bytes(&size);

		core_btf__open(&btf, elf, size);
	}
	{
		LIBBPF_OPTS(bpf_object_open_opts, oo, .btf_custom_path = btf.path[0] ? btf.path : NULL);

		s->skel = strips_bpf__open_opts(&oo);
	}
	skel_bytes__release(strips_bpf__elf_bytes);
	if (!s->skel) {
		err = errno;
		pr_warn("cpu strips: cannot open the BPF object: %s\n", strerror(err));
		goto fail;
	}
	s->skel->rodata->min_ns = min_ns;
	s->skel->rodata->window_ns = window_ns;
	{
		uint32_t size = _ringbuf_size(min_ns, window_ns, libbpf_num_possible_cpus());

		bpf_map__set_max_entries(s->skel->maps.strips, size);
		s->skel->rodata->wakeup_bytes = size / 4;
	}
	err = strips_bpf__load(s->skel);
	core_btf__close(&btf);
	if (!err && o && o->chain) {
		__u32 key = 0, fd = o->chain_fd;

		s->chained = !bpf_map__update_elem(s->skel->maps.chain, &key, sizeof(key), &fd,
						   sizeof(fd), BPF_ANY);
		if (!s->chained)
			pr_warn("cpu strips: cannot chain the off-CPU handler: %s\n", strerror(errno));
	}
	if (!err)
		err = strips_bpf__attach(s->skel);
	if (err) {
		err = -err;
		pr_warn("cpu strips: cannot load or attach the sched_switch program: %s\n",
			strerror(err));
		goto fail;
	}
	s->ncpus = libbpf_num_possible_cpus();
	s->splits = s->ncpus > 0 ? calloc(s->ncpus, sizeof(*s->splits)) : NULL;
	s->state_vals = s->ncpus > 0 ? calloc(s->ncpus, bpf_map__value_size(s->skel->maps.state)) :
				       NULL;
	if (!s->splits || !s->state_vals) {
		err = s->ncpus > 0 ? ENOMEM : -s->ncpus;
		goto fail;
	}
	s->rb = ringbuf__new(bpf_map__fd(s->skel->maps.strips), _on_record, s);
	if (!s->rb) {
		err = errno;
		pr_warn("cpu strips: cannot map the ring buffer: %s\n", strerror(err));
		goto fail;
	}
	return s;
fail:
	core_btf__close(&btf);
	cpu_strips__close(s);
	errno = err;
	return NULL;
}

int cpu_strips__fd(const struct cpu_strips *s)
{
	return s && s->rb ? ringbuf__fd(s->rb) : -1;
}

bool cpu_strips__chained(const struct cpu_strips *s)
{
	return s && s->chained;
}

void cpu_strips__close(struct cpu_strips *s)
{
	if (!s)
		return;
	ringbuf__free(s->rb);
	strips_bpf__destroy(s->skel);
	free(s->splits);
	free(s->state_vals);
	free(s);
}

/* The head of struct cpu_state in strips.bpf.c, as user space reads it. */
struct _state_head {
	__u64 switches, coalesced;
	__u64 start;
	__u32 cur_pid, cur_tid;
};

static void _thread_comm(uint32_t pid, uint32_t tid, char *comm)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%u/task/%u/comm", pid, tid);
	n = safe_open__read_proc(AT_FDCWD, path, comm, FW_STRIP_COMM_LEN + 1);
	if (n < 0)
		n = 0;
	while (n && (comm[n - 1] == '\n' || !comm[n - 1]))
		n--;
	comm[n] = '\0';
}

/*
 * Runs longer than SPLIT_NS that are still going are reported up to now, so
 * that a CPU held by one task shows as busy while it is, not only once the
 * task lets go. Called right after the ring buffer was consumed: a run that
 * ended before has its record in hand, one that ends later gets trimmed.
 */
#define SPLIT_NS 1000000000ULL

static void _report_running(struct cpu_strips *s, struct batch *b)
{
	size_t vsize = bpf_map__value_size(s->skel->maps.state);
	struct timespec bt;
	uint64_t now;
	__u32 k = 0;

	/*
	 * The clock first: a run that ends after this instant ends after the
	 * piece reported now, and one that ended before shows in the state as
	 * a newer start. A state read torn by a switch in progress has a start
	 * too fresh to pass the SPLIT_NS test.
	 */
	clock_gettime(CLOCK_BOOTTIME, &bt);
	now = (uint64_t)bt.tv_sec * 1000000000ULL + bt.tv_nsec;
	if (!b || bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.state), &k, s->state_vals))
		return;
	for (int c = 0; c < s->ncpus; c++) {
		struct _state_head h;
		struct split *sp = &s->splits[c];
		char comm[FW_STRIP_COMM_LEN + 1];
		uint64_t from;

		memcpy(&h, s->state_vals + (size_t)c * vsize, sizeof(h));
		if (!h.cur_tid || !h.cur_pid || !h.start || now <= h.start || now - h.start < SPLIT_NS)
			continue;
		from = sp->start == h.start ? sp->upto : h.start;
		if (from >= now)
			continue;
		_thread_comm(h.cur_pid, h.cur_tid, comm);
		if (!comm[0])
			continue;	/* gone: its record is on the way */
		if (_add(s, b, (uint32_t)c, h.cur_pid, h.cur_tid, comm, from, now))
			continue;
		sp->start = h.start;
		sp->upto = now;
	}
}

int cpu_strips__drain(struct cpu_strips *s, struct cpu_profile *cp)
{
	uint64_t before = s->intervals;
	int64_t offset;
	int rc;

	s->cp = cp;
	/*
	 * Measuring the offset jitters by some ns from drain to drain; keeping
	 * it until it really moves (NTP, suspend) keeps back-to-back intervals
	 * of different drains from overlapping.
	 */
	offset = _boot_to_unix();
	if (!s->boot_to_unix || llabs(offset - s->boot_to_unix) > 1000)
		s->boot_to_unix = offset;
	rc = ringbuf__consume(s->rb);
	if (rc >= 0)
		_report_running(s, cpu_profile__batch(cp));
	s->cp = NULL;
	if (rc < 0)
		return rc;
	return (int)(s->intervals - before);
}

static int _state_counts(struct cpu_strips *s, int ncpus, struct cpu_strips_stats *out)
{
	size_t vsize = bpf_map__value_size(s->skel->maps.state);
	char *vals = calloc(ncpus, vsize);
	__u32 k = 0;
	int err = 0;

	if (!vals)
		return -ENOMEM;
	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.state), &k, vals)) {
		err = -errno;
	} else {
		for (int c = 0; c < ncpus; c++) {
			struct _state_head h;

			memcpy(&h, vals + (size_t)c * vsize, sizeof(h));
			out->bpf[FW_STRIP_SWITCHES] += h.switches;
			out->bpf[FW_STRIP_COALESCED_IN] += h.coalesced;
		}
	}
	free(vals);
	return err;
}

int cpu_strips__stats(struct cpu_strips *s, struct cpu_strips_stats *out)
{
	int ncpus = libbpf_num_possible_cpus();
	__u64 *vals;
	int err = 0;

	memset(out, 0, sizeof(*out));
	out->intervals = s->intervals;
	out->dropped = s->dropped;
	if (ncpus <= 0)
		return ncpus ? ncpus : -EINVAL;
	vals = calloc(ncpus, sizeof(*vals));
	if (!vals)
		return -ENOMEM;
	for (__u32 k = 0; k < FW_STRIP_STAT_MAX; k++) {
		if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.strip_stats), &k, vals)) {
			err = -errno;
			break;
		}
		for (int c = 0; c < ncpus; c++)
			out->bpf[k] += vals[c];
	}
	free(vals);
	if (!err)
		err = _state_counts(s, ncpus, out);
	return err;
}

void cpu_strips__report(struct cpu_strips *s)
{
	struct cpu_strips_stats st;

	if (!s || cpu_strips__stats(s, &st))
		return;
	if (st.bpf[FW_STRIP_RINGBUF_FULL] || st.dropped)
		pr_warn("cpu strips: %llu intervals lost (ring buffer full), %llu dropped\n",
			(unsigned long long)st.bpf[FW_STRIP_RINGBUF_FULL],
			(unsigned long long)st.dropped);
	pr_info("cpu strips: %llu switches, %llu records (%llu short intervals coalesced), "
		"%llu intervals batched\n",
		(unsigned long long)st.bpf[FW_STRIP_SWITCHES],
		(unsigned long long)st.bpf[FW_STRIP_EMITTED],
		(unsigned long long)st.bpf[FW_STRIP_COALESCED_IN],
		(unsigned long long)st.intervals);
}
