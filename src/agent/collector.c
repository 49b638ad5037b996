// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <malloc.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "agent/collector.h"
#include "agent/cpu_profile.h"
#include "agent/cuda/cuda_tracker.h"
#include "agent/interp/hotspot.h"
#include "agent/interp/interp.h"
#include "agent/interp/java_perfmap.h"
#include "agent/interp/python.h"
#include "agent/interp/ruby.h"
#include "agent/proc_table.h"
#include "agent/sampler.h"
#include "agent/unwinder.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/timeparse.h"

/* python, ruby, hotspot and java_perfmap (when asked for), in that order. */
#define COLLECTOR_MAX_INTERPS 4

struct collector_interp {
	const struct interp_ops *ops;
	void *obj;			/* owned */
};

struct collector {
	struct collector_opts opts;
	struct sampler *sampler;
	struct proc_table *procs;
	struct unwinder *unwinder;
	struct cpu_profile *cp;
	struct collector_interp interps[COLLECTOR_MAX_INTERPS];
	uint32_t ninterps;
	/*
	 * Also in interps[] (which owns it): a CUDA launch notes Python alone,
	 * since launch stacks get Python frames and no other language's
	 * (cpu_profile__place()).
	 */
	struct python *py;
	struct cuda_tracker *cuda;	/* timed mode only: GPU time needs a batch */
	uint64_t add_errors;
	uint64_t next_sweep_ns;		/* CLOCK_MONOTONIC */
	uint64_t swept;			/* processes forgotten by the sweep */
};

/* How often known processes are checked for being gone (proc_table__sweep). */
#define SWEEP_INTERVAL_NS (5 * 1000000000ULL)

static void _on_cuda_launch(void *ctx, const struct fw_cuda_launch *l)
{
	struct collector *c = ctx;

	if (!c->cuda)
		return;
	/* A process that launches before its first CPU sample gets its Python frames too. */
	python__note_pid(c->py, l->s.pid);
	cuda_tracker__launch(c->cuda, l);
	/* As for CPU samples: a process BPF could not fully walk gets its tables. */
	unwinder__note_sample(c->unwinder, l->s.pid, l->s.flags);
}

/*
 * Libraries named in FLAMEWATCH_CUDA_LIB (colon-separated paths) are
 * attached at start, before `flamewatch agent` drops the capabilities
 * that creating uprobes needs; the kernel then arms them in every process
 * that maps them later.
 */
static void _cuda_attach_named(struct cuda_tracker *t)
{
	const char *env = getenv("FLAMEWATCH_CUDA_LIB");
	char *list, *p, *save = NULL, own[PATH_MAX];

	/*
	 * The copy `flamewatch cuda` injects (beside this binary) too: a
	 * process that loads it is then armed as it maps it, instead of when
	 * a scan finds it, which may be after a short run is over.
	 */
	if (cuda_tracker__default_lib(own, sizeof(own)) == 0 &&
	    cuda_tracker__attach_file(t, own) < 0)
		pr_debug("cannot attach to %s at start\n", own);
	if (!env || !env[0])
		return;
	list = strdup(env);
	if (!list)
		return;
	for (p = strtok_r(list, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
		int err = cuda_tracker__attach_file(t, p);

		if (err < 0)
			pr_warn("FLAMEWATCH_CUDA_LIB: cannot attach to %s: %s\n", p, strerror(-err));
	}
	free(list);
}

/*
 * How the library is found after the first scan: from the dynamic
 * loaders' events (FLAMEWATCH_CUDA_WATCH=0 polls instead, to compare or to
 * work around a problem), and every FLAMEWATCH_CUDA_SCAN_INTERVAL (a
 * duration, or off) in every process.
 */
static void _cuda_discovery(struct cuda_tracker *t)
{
	const char *watch = getenv("FLAMEWATCH_CUDA_WATCH");
	const char *every = getenv("FLAMEWATCH_CUDA_SCAN_INTERVAL");
	int64_t ns;
	int err;

	if (watch && !strcmp(watch, "0"))
		pr_info("FLAMEWATCH_CUDA_WATCH=0: new processes are polled for %s\n",
			"libflamewatch-cuda.so");
	else if ((err = cuda_tracker__watch(t)))
		pr_info("cannot watch library loads (%s): new processes are polled for %s\n",
			err == -EOPNOTSUPP ? "no bpf_loop()" : strerror(-err), "libflamewatch-cuda.so");
	if (!every || !every[0])
		return;
	if (!strcmp(every, "off") || !strcmp(every, "0"))
		cuda_tracker__set_scan_interval(t, 0);
	else if (duration__parse(every, &ns) == 0 && ns >= 1000000000LL)
		cuda_tracker__set_scan_interval(t, (uint64_t)ns);
	else
		pr_warn("FLAMEWATCH_CUDA_SCAN_INTERVAL: '%s' is not a duration of 1s or more, "
			"nor off: the default is kept\n", every);
}

static void _cuda_process(void *ctx, pid_t pid)
{
	struct collector *c = ctx;

	unwinder__add_pid(c->unwinder, pid);
}

static void _on_cuda_name(void *ctx, const struct fw_cuda_name *n)
{
	struct collector *c = ctx;

	if (c->cuda)
		cuda_tracker__name(c->cuda, n);
}

static void _on_cuda_exec(void *ctx, const struct fw_cuda_exec *x)
{
	struct collector *c = ctx;

	if (c->cuda)
		cuda_tracker__image_gone(c->cuda, x->pid);
}

static void _on_cuda_activity(void *ctx, const struct fw_cuda_activity *a)
{
	struct collector *c = ctx;

	if (c->cuda)
		cuda_tracker__activity(c->cuda, a);
}

static void _on_cuda_conflict(void *ctx, const struct fw_cuda_conflict *e)
{
	struct collector *c = ctx;

	if (c->cuda)
		cuda_tracker__conflict(c->cuda, e);
}

/*
 * The unwinder read pid's maps anew because BPF met code outside them: an
 * interpreter library ld.so or dlopen() has just mapped is looked for now,
 * not when the last look's backoff ends (100 ms to 3.2 s later).
 */
static void _described(void *ctx, pid_t pid)
{
	struct collector *c = ctx;

	for (uint32_t i = 0; i < c->ninterps; i++)
		if (c->interps[i].ops->maps_changed)
			c->interps[i].ops->maps_changed(c->interps[i].obj, pid);
}

static void _on_sample(void *ctx, const struct fw_sample *s)
{
	struct collector *c = ctx;

	for (uint32_t i = 0; i < c->ninterps; i++)
		if (c->interps[i].ops->note_pid)
			c->interps[i].ops->note_pid(c->interps[i].obj, s->pid);
	if (cpu_profile__add(c->cp, s, sampler__boot_to_unix_ns(s->boot_ns)))
		c->add_errors++;
	unwinder__note_sample(c->unwinder, s->pid, s->flags);
}

static void _on_offcpu(void *ctx, const struct fw_offcpu *o)
{
	struct collector *c = ctx;

	if (cpu_profile__add_offcpu(c->cp, o, sampler__boot_to_unix_ns(o->s.boot_ns)))
		c->add_errors++;
	unwinder__note_sample(c->unwinder, o->s.pid, o->s.flags);
}

/* What every per-process table but the proc_table holds about pid: gone. */
static void _forget(struct collector *c, pid_t pid)
{
	for (uint32_t i = 0; i < c->ninterps; i++)
		if (c->interps[i].ops->forget)
			c->interps[i].ops->forget(c->interps[i].obj, pid);
	if (c->cuda)
		cuda_tracker__exit(c->cuda, pid);
	unwinder__remove_pid(c->unwinder, pid);
}

static void _swept(void *ctx, pid_t pid)
{
	struct collector *c = ctx;

	_forget(c, pid);
	c->swept++;
}

static void _on_proc(void *ctx, const struct fw_proc_event *e)
{
	struct collector *c = ctx;

	switch (e->type) {
	case FW_EVENT_EXEC:
		for (uint32_t i = 0; i < c->ninterps; i++)
			if (c->interps[i].ops->exec)
				c->interps[i].ops->exec(c->interps[i].obj, e->pid);
		proc_table__exec(c->procs, e->pid);
		if (c->cuda)
			cuda_tracker__exec(c->cuda, e->pid, e->mnt_ns);
		unwinder__remove_pid(c->unwinder, e->pid);
		if (c->opts.follow_only)
			unwinder__queue(c->unwinder, e->pid);
		break;
	case FW_EVENT_EXIT:
		_forget(c, e->pid);
		proc_table__exit(c->procs, e->pid);
		if (c->opts.follow_only) {
			sampler__unfollow(c->sampler, e->pid);
			if (c->opts.on_followed_exit)
				c->opts.on_followed_exit(c->opts.ctx, e->pid);
		}
		break;
	}
}

/* Takes obj (NULL: nothing to add): the collector frees it. */
static void _add_interp(struct collector *c, const struct interp_ops *ops, void *obj)
{
	if (!obj)
		return;
	if (c->ninterps == COLLECTOR_MAX_INTERPS) {
		ops->free(obj);
		return;
	}
	c->interps[c->ninterps++] = (struct collector_interp){ .ops = ops, .obj = obj };
}

struct collector *collector__new(const struct collector_opts *o, uint64_t start_unix_ns)
{
	struct collector *c = calloc(1, sizeof(*c));
	struct sampler_opts so = {
		.freq_hz = o->freq_hz,
		.follow_only = o->follow_only,
		.follow_children = o->follow_children,
		/* Followed processes are few: waking for their execs is cheap. */
		.wakeup_on_exec = o->follow_only,
		.on_sample = _on_sample,
		.on_proc = _on_proc,
		/* GPU time goes into batches: timed mode only. */
		.on_cuda_launch = o->timed ? _on_cuda_launch : NULL,
		.on_cuda_activity = o->timed ? _on_cuda_activity : NULL,
		.on_cuda_conflict = o->timed ? _on_cuda_conflict : NULL,
		.on_cuda_name = o->timed ? _on_cuda_name : NULL,
		.on_cuda_exec = o->timed ? _on_cuda_exec : NULL,
		.on_offcpu = o->offcpu_min_ns ? _on_offcpu : NULL,
		.offcpu_min_ns = o->offcpu_min_ns,
		.offcpu_walk_all = o->offcpu_walk_all,
		.offcpu_skip_pid = o->offcpu_skip_self ? getpid() : 0,
		.offcpu_no_attach = o->offcpu_no_attach,
	};
	struct unwinder_maps um;
	int hs_fd, hs_stats_fd, err;
	struct java_perfmap *java;
	struct hotspot *hs;
	struct ruby *rb;

	if (!c)
		return NULL;
	c->opts = *o;
	so.ctx = c;
	c->procs = proc_table__new("/proc");
	c->cp = c->procs ? cpu_profile__new(c->procs, 1000000000ULL / o->freq_hz, start_unix_ns,
					    o->timed) : NULL;
	if (!c->procs || !c->cp) {
		err = ENOMEM;
		goto fail;
	}
	if (!o->timed && cpu_profile__set_aggregate(c->cp, o->aggregate_type)) {
		err = EINVAL;
		goto fail;
	}
	c->sampler = sampler__open(&so);
	if (!c->sampler) {
		err = errno;
		goto fail;
	}
	sampler__unwind_maps(c->sampler, &um);
	c->unwinder = unwinder__new(&um, c->procs,
				    (uint64_t)o->unwind_mb << 20);
	if (c->unwinder)
		unwinder__set_on_demand(c->unwinder, o->unwind_on_demand_bytes);
	c->py = python__new(sampler__python_fd(c->sampler), sampler__python_known_fd(c->sampler),
			    c->procs);
	rb = ruby__new(sampler__ruby_fd(c->sampler), c->procs);
	sampler__hotspot_fds(c->sampler, &hs_fd, &hs_stats_fd);
	hs = hotspot__new(hs_fd, hs_stats_fd, c->procs);
	_add_interp(c, &python_interp_ops, c->py);
	_add_interp(c, &ruby_interp_ops, rb);
	_add_interp(c, &hotspot_interp_ops, hs);
	if (!c->unwinder || !c->py || !rb || !hs) {
		err = ENOMEM;
		goto fail;
	}
	cpu_profile__set_interps(c->cp,
				 &(struct cpu_profile_interps){ .py = c->py, .rb = rb, .hs = hs });
	if (o->java_perfmap_interval_ns) {
		java = java_perfmap__new(o->java_perfmap_interval_ns, c->procs);
		if (!java) {
			err = ENOMEM;
			goto fail;
		}
		_add_interp(c, &java_perfmap_interp_ops, java);
	}
	/*
	 * libbpf parsed the kernel's BTF (megabytes) to load the programs and
	 * freed it; hand those pages back instead of keeping them resident.
	 */
	malloc_trim(0);
	if (o->timed) {
		c->cuda = cuda_tracker__new(c->sampler, c->cp, "/proc");
		if (!c->cuda) {
			err = ENOMEM;
			goto fail;
		}
		cuda_tracker__on_process(c->cuda, _cuda_process, c);
		_cuda_attach_named(c->cuda);
		/* Hooked before the scan: a process mapping the library meanwhile is not missed. */
		_cuda_discovery(c->cuda);
		cuda_tracker__scan(c->cuda);
	}
	return c;
fail:
	collector__free(c);
	errno = err;
	return NULL;
}

void collector__stop(struct collector *c)
{
	if (!c->sampler)
		return;
	collector__tick(c);
	if (c->cuda) {
		/* Records still waiting for a launch count all the same. */
		cuda_tracker__flush(c->cuda);
		cuda_tracker__report(c->cuda);
		cuda_tracker__free(c->cuda);
		c->cuda = NULL;
	}
	sampler__close(c->sampler);
	c->sampler = NULL;
	unwinder__free(c->unwinder);
	c->unwinder = NULL;
}

void collector__free(struct collector *c)
{
	if (!c)
		return;
	cuda_tracker__free(c->cuda);
	sampler__close(c->sampler);
	unwinder__free(c->unwinder);
	cpu_profile__free(c->cp);
	for (uint32_t i = 0; i < c->ninterps; i++)
		c->interps[i].ops->free(c->interps[i].obj);
	proc_table__free(c->procs);
	free(c);
}

int collector__follow(struct collector *c, pid_t pid)
{
	int err = sampler__follow(c->sampler, pid);

	if (err)
		return err;
	/*
	 * Describe it now so that even the first samples unwind fully. Python
	 * first: it takes milliseconds, building unwind tables can take far
	 * longer, and samples in between still get their Python frames.
	 */
	for (uint32_t i = 0; i < c->ninterps; i++)
		if (c->interps[i].ops->follow)
			c->interps[i].ops->follow(c->interps[i].obj, pid);
	unwinder__add_pid(c->unwinder, pid);
	return 0;
}

int collector__follow_before_exec(struct collector *c, pid_t pid)
{
	return sampler__follow(c->sampler, pid);
}

void collector__wait(struct collector *c, int timeout_ms)
{
	/*
	 * Most samples never wake us. Exec events of followed processes do,
	 * and so do samples BPF could not walk for want of a description (a
	 * new process, a library just mapped): their tables load at once.
	 * Everything else waits for the tick.
	 */
	sampler__poll(c->sampler, timeout_ms);
	unwinder__add_pending(c->unwinder, _described, c);
}

void collector__tick(struct collector *c)
{
	if (!c->sampler)
		return;
	proc_table__next_round(c->procs);
	sampler__drain(c->sampler);
	unwinder__add_pending(c->unwinder, _described, c);
	for (uint32_t i = 0; i < c->ninterps; i++)
		if (c->interps[i].ops->tick)
			c->interps[i].ops->tick(c->interps[i].obj);
	if (c->cuda)
		cuda_tracker__tick(c->cuda);
	cpu_profile__symbolize_jit(c->cp);
	{
		struct timespec now;
		uint64_t ns;

		clock_gettime(CLOCK_MONOTONIC, &now);
		ns = (uint64_t)now.tv_sec * 1000000000ULL + now.tv_nsec;
		if (ns >= c->next_sweep_ns) {
			c->next_sweep_ns = ns + SWEEP_INTERVAL_NS;
			proc_table__sweep(c->procs, _swept, c);
		}
	}
}

struct batch *collector__take_batch(struct collector *c)
{
	struct batch *b = cpu_profile__batch(c->cp);
	struct timespec now;

	if (!b || batch__empty(b))
		return NULL;
	if (cpu_profile__symbolize(c->cp))
		return NULL;
	clock_gettime(CLOCK_REALTIME, &now);
	b = cpu_profile__take_batch(c->cp, (uint64_t)now.tv_sec * 1000000000ULL + now.tv_nsec);
	/* Naming read symbol tables through short-lived buffers: return their pages. */
	malloc_trim(0);
	return b;
}

struct cpu_profile *collector__profile(struct collector *c)
{
	return c->cp;
}

int collector__cuda_stats(struct collector *c, struct cuda_tracker_stats *out)
{
	if (!c || !c->cuda)
		return -ENOENT;
	cuda_tracker__stats(c->cuda, out);
	return 0;
}

bool collector__cuda_records_complete(struct collector *c, uint32_t pid)
{
	return c && c->cuda && cuda_tracker__records_complete(c->cuda, pid);
}

struct dispatch_scale *collector__dispatch_scale(struct collector *c)
{
	return c ? cuda_tracker__dispatch_scale(c->cuda) : NULL;
}

int collector__offcpu_prog_fd(struct collector *c)
{
	return c->sampler ? sampler__offcpu_prog_fd(c->sampler) : -1;
}

int collector__offcpu_attach(struct collector *c)
{
	return c->sampler ? sampler__offcpu_attach(c->sampler) : 0;
}

int collector__offcpu_stats(struct collector *c, struct collector_offcpu_stats *out)
{
	struct sampler_stats st;
	int err;

	if (!c || !c->sampler || !sampler__offcpu_on(c->sampler))
		return -ENOENT;
	err = sampler__stats(c->sampler, &st);
	if (err)
		return err;
	*out = (struct collector_offcpu_stats){
		.taken = st.counters[FW_STAT_OFFCPU_TAKEN],
		.taken_ns = st.counters[FW_STAT_OFFCPU_TAKEN_NS],
		.not_taken = st.counters[FW_STAT_OFFCPU_NOT_TAKEN],
		.not_taken_ns = st.counters[FW_STAT_OFFCPU_NOT_TAKEN_NS],
		.walks_short = st.counters[FW_STAT_OFFCPU_WALKS_SHORT],
		.lost_ringbuf = st.counters[FW_STAT_OFFCPU_RINGBUF_FULL],
		.lost_thread = st.counters[FW_STAT_OFFCPU_NO_THREAD],
		.lost_unseen = st.counters[FW_STAT_OFFCPU_UNSEEN],
	};
	return 0;
}

void collector__report(struct collector *c)
{
	struct sampler_stats st;
	struct unwinder_stats u;

	if (c->sampler && sampler__stats(c->sampler, &st) == 0) {
		uint64_t lost = st.counters[FW_STAT_RINGBUF_FULL] +
				st.counters[FW_STAT_PROC_RINGBUF_FULL];

		if (lost || st.decode_errors)
			pr_warn("%llu samples lost: the ring buffer was full "
				"(%llu undecodable records)\n",
				(unsigned long long)lost, (unsigned long long)st.decode_errors);
		for (int i = 0; i < FW_STAT_MAX; i++)
			pr_debug("bpf stat %s = %llu\n", fw_stat__name(i),
				 (unsigned long long)st.counters[i]);
	}
	if (c->add_errors)
		pr_warn("%llu samples dropped: out of memory\n", (unsigned long long)c->add_errors);
	if (c->cp) {
		struct cpu_profile_counts pc;

		cpu_profile__counts(c->cp, &pc);
		pr_info("symbols: %llu frames named from the cache, %llu symbol-table reads\n",
			(unsigned long long)pc.frames_named_cached,
			(unsigned long long)pc.symbol_reads);
	}
	pr_debug("processes: %u known, %llu forgotten by the sweep\n",
		 proc_table__nprocs(c->procs), (unsigned long long)c->swept);
	for (uint32_t i = 0; i < c->ninterps; i++)
		if (c->interps[i].ops->report)
			c->interps[i].ops->report(c->interps[i].obj);
	if (!c->unwinder)
		return;
	unwinder__stats(c->unwinder, &u);
	pr_info("unwind tables: %llu files, %llu rows, %.1f KiB of BPF maps "
		"(cap %llu MiB); %llu files without CFI, %llu chunks put off for room; built in %.0f ms\n",
		(unsigned long long)u.files, (unsigned long long)u.rows, u.table_bytes / 1024.0,
		(unsigned long long)(u.cap_bytes >> 20), (unsigned long long)u.files_without_cfi,
		(unsigned long long)u.chunks_no_room, u.build_ns / 1e6);
	if (u.files_chunked)
		pr_info("unwind tables by chunk: %llu files, %llu of them needed by samples; "
			"%llu chunks loaded, %llu built, %llu evicted\n",
			(unsigned long long)u.files_chunked, (unsigned long long)u.files_chunk_used,
			(unsigned long long)u.chunks, (unsigned long long)u.chunk_builds,
			(unsigned long long)u.chunk_evictions);
}

int collector__fd(struct collector *c)
{
	return c->sampler ? sampler__fd(c->sampler) : -1;
}

int collector__cuda_fd(struct collector *c)
{
	return c->cuda ? cuda_tracker__watch_fd(c->cuda) : -1;
}

void collector__cuda_ready(struct collector *c)
{
	if (c->cuda)
		cuda_tracker__tick(c->cuda);
}

void collector__drain(struct collector *c)
{
	if (!c->sampler)
		return;
	sampler__drain(c->sampler);
	/* The wakeup may have been BPF asking for a process's description. */
	unwinder__add_pending(c->unwinder, _described, c);
}
