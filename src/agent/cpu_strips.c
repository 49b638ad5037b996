// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/cpu_profile.h"
#include "agent/cpu_strips.h"
#include "bpf/strips.skel.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/profile.h"

struct cpu_strips {
	struct strips_bpf *skel;
	struct ring_buffer *rb;
	/* for the drain in progress */
	struct cpu_profile *cp;
	int64_t boot_to_unix;
	uint64_t intervals, dropped;
	int err;
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

static int _on_record(void *ctx, void *data, size_t size)
{
	struct cpu_strips *s = ctx;
	const struct fw_cpu_interval *r = data;
	struct batch *b = cpu_profile__batch(s->cp);
	struct batch_cpu_interval iv;
	char comm[FW_STRIP_COMM_LEN + 1];
	int64_t series, cid;

	if (size < sizeof(*r) || r->end_ns < r->start_ns || !r->pid || !b) {
		s->dropped++;
		return 0;
	}
	memcpy(comm, r->comm, FW_STRIP_COMM_LEN);
	comm[FW_STRIP_COMM_LEN] = '\0';
	series = cpu_profile__series(s->cp, r->pid, comm);
	cid = series < 0 ? series : profile__intern_string(b->dict, comm);
	if (cid < 0) {
		s->dropped++;
		return 0;
	}
	iv = (struct batch_cpu_interval){
		.start_ns = (int64_t)r->start_ns + s->boot_to_unix,
		.end_ns = (int64_t)r->end_ns + s->boot_to_unix,
		.series = (uint32_t)series, .cpu = r->cpu, .tid = r->tid, .comm = (uint32_t)cid,
	};
	if (batch__add_cpu_interval(b, &iv)) {
		s->dropped++;
		return 0;
	}
	s->intervals++;
	return 0;
}

/* One second of the worst case (strips.bpf.c) for every CPU, a power of two. */
static uint32_t _ringbuf_size(uint64_t min_ns, uint64_t window_ns, int ncpus)
{
	uint64_t per_cpu = 2 * 1000000000ULL / (min_ns < window_ns ? min_ns : window_ns);
	uint64_t want = per_cpu * sizeof(struct fw_cpu_interval) * (ncpus > 0 ? ncpus : 1);
	uint32_t size = 256 * 1024;

	while (size < want && size < (1u << 30))
		size <<= 1;
	return size;
}

struct cpu_strips *cpu_strips__open(const struct cpu_strips_opts *o)
{
	struct cpu_strips *s = calloc(1, sizeof(*s));
	uint64_t min_ns = o && o->min_ns ? o->min_ns : 1000000;
	uint64_t window_ns = o && o->window_ns ? o->window_ns : 1000000;
	int err;

	if (!s)
		return NULL;
	s->skel = strips_bpf__open();
	if (!s->skel) {
		err = errno;
		pr_warn("cpu strips: cannot open the BPF object: %s\n", strerror(err));
		goto fail;
	}
	s->skel->rodata->min_ns = min_ns;
	s->skel->rodata->window_ns = window_ns;
	bpf_map__set_max_entries(s->skel->maps.strips,
				 _ringbuf_size(min_ns, window_ns, libbpf_num_possible_cpus()));
	err = strips_bpf__load(s->skel);
	if (!err)
		err = strips_bpf__attach(s->skel);
	if (err) {
		err = -err;
		pr_warn("cpu strips: cannot load or attach the sched_switch program: %s\n",
			strerror(err));
		goto fail;
	}
	s->rb = ring_buffer__new(bpf_map__fd(s->skel->maps.strips), _on_record, s, NULL);
	if (!s->rb) {
		err = errno;
		pr_warn("cpu strips: cannot map the ring buffer: %s\n", strerror(err));
		goto fail;
	}
	return s;
fail:
	cpu_strips__close(s);
	errno = err;
	return NULL;
}

void cpu_strips__close(struct cpu_strips *s)
{
	if (!s)
		return;
	ring_buffer__free(s->rb);
	strips_bpf__destroy(s->skel);
	free(s);
}

int cpu_strips__drain(struct cpu_strips *s, struct cpu_profile *cp)
{
	uint64_t before = s->intervals;
	int rc;

	s->cp = cp;
	s->boot_to_unix = _boot_to_unix();
	rc = ring_buffer__consume(s->rb);
	s->cp = NULL;
	if (rc < 0)
		return rc;
	return (int)(s->intervals - before);
}

/* The two counters the program keeps in its per-CPU state (strips.bpf.c says why). */
struct _state_head {
	__u64 switches, coalesced;
};

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
