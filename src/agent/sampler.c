// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/core_btf.h"
#include "agent/ringbuf.h"
#include "agent/skel_bytes.h"
#include "agent/sampler.h"
#include "agent/unwinder.h"
#include "bpf/sample.skel.h"
#include "common/log.h"

#define FW_MAX_CPUS 8192

struct sampler {
	struct sample_bpf *skel;
	struct ringbuf *rb;
	struct bpf_link **links;	/* one per CPU; own the perf event fds */
	int nlinks;
	struct ringbuf *cuda_rb;	/* cuda_events, once a CUDA probe fired; see below */
	int epfd;			/* both rings' map fds: what callers wait on */
	uint64_t decode_errors;
	sampler_sample_fn on_sample;
	sampler_proc_fn on_proc;
	void *ctx;
	sampler_cuda_launch_fn on_cuda_launch;
	sampler_cuda_activity_fn on_cuda_activity;
	sampler_cuda_conflict_fn on_cuda_conflict;
	sampler_cuda_name_fn on_cuda_name;
	sampler_cuda_exec_fn on_cuda_exec;
	sampler_offcpu_fn on_offcpu;
	struct bpf_link *offcpu_link;	/* sampler__offcpu_attach()'s */
};

static const char *const _stat_names[FW_STAT_MAX] = {
	[FW_STAT_SAMPLES] = "samples",
	[FW_STAT_IDLE] = "idle_skipped",
	[FW_STAT_FILTERED] = "filtered",
	[FW_STAT_RINGBUF_FULL] = "ringbuf_full",
	[FW_STAT_KSTACK_ERROR] = "kernel_stack_errors",
	[FW_STAT_USTACK_TRUNCATED] = "user_stack_truncated",
	[FW_STAT_USTACK_FAULT] = "user_stack_faults",
	[FW_STAT_NO_SCRATCH] = "no_scratch",
	[FW_STAT_PROC_EVENTS] = "proc_events",
	[FW_STAT_PROC_RINGBUF_FULL] = "proc_ringbuf_full",
	[FW_STAT_FOLLOW_FULL] = "follow_map_full",
	[FW_STAT_UNWIND_NO_TABLES] = "unwind_no_tables",
	[FW_STAT_UNWIND_FP_FRAMES] = "unwind_fp_frames",
	[FW_STAT_UNWIND_CFI_FRAMES] = "unwind_cfi_frames",
	[FW_STAT_UNWIND_ROW_MISS] = "unwind_row_miss",
	[FW_STAT_UNWIND_BAD_FRAME] = "unwind_bad_frame",
	[FW_STAT_PY_SAMPLES] = "python_samples",
	[FW_STAT_PY_NO_THREAD] = "python_no_thread",
	[FW_STAT_PY_FAULT] = "python_faults",
	[FW_STAT_PY_TRUNCATED] = "python_truncated",
	[FW_STAT_PY_FRAMES] = "python_frames",
	[FW_STAT_RB_SAMPLES] = "ruby_samples",
	[FW_STAT_RB_NO_EC] = "ruby_no_ec",
	[FW_STAT_RB_FAULT] = "ruby_faults",
	[FW_STAT_RB_TRUNCATED] = "ruby_truncated",
	[FW_STAT_RB_FRAMES] = "ruby_frames",
	[FW_STAT_PY_WAKEUPS] = "python_wakeups",
	[FW_STAT_UNWIND_GO_SWITCH] = "unwind_go_switches",
	[FW_STAT_DESCRIBE_WAKEUPS] = "describe_wakeups",
	[FW_STAT_UNWIND_WANTED] = "unwind_chunks_wanted",
	[FW_STAT_UNWIND_PREFETCHED] = "unwind_chunks_prefetched",
	[FW_STAT_OFFCPU_WALKS] = "offcpu_walks",
	[FW_STAT_OFFCPU_SAMPLES] = "offcpu_samples",
	[FW_STAT_OFFCPU_SHORT] = "offcpu_short",
	[FW_STAT_OFFCPU_MAP_FULL] = "offcpu_map_full",
	[FW_STAT_OFFCPU_RINGBUF_FULL] = "offcpu_ringbuf_full",
	[FW_STAT_OFFCPU_TAKEN] = "offcpu_taken",
	[FW_STAT_OFFCPU_TAKEN_NS] = "offcpu_taken_ns",
	[FW_STAT_OFFCPU_NOT_TAKEN] = "offcpu_not_taken",
	[FW_STAT_OFFCPU_NOT_TAKEN_NS] = "offcpu_not_taken_ns",
	[FW_STAT_OFFCPU_WALKS_SHORT] = "offcpu_walks_short",
	[FW_STAT_OFFCPU_NO_THREAD] = "offcpu_no_thread",
	[FW_STAT_OFFCPU_UNSEEN] = "offcpu_unseen",
	[FW_STAT_UNWIND_ROW_CACHED] = "unwind_rows_cached",
};

bool sampler__use_bpf_loop(void)
{
	const char *force = getenv("FLAMEWATCH_NO_BPF_LOOP");

	if (force && force[0] && strcmp(force, "0"))
		return false;
	return libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, BPF_FUNC_loop, NULL) == 1;
}

const char *fw_stat__name(enum fw_stat stat)
{
	return stat < FW_STAT_MAX ? _stat_names[stat] : "unknown";
}

static int _libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	enum log_level l = level == LIBBPF_WARN ? LOG_WARN :
			   level == LIBBPF_INFO ? LOG_DEBUG : LOG_DEBUG + 1;

	if (l <= log__level)
		log__vprintf(l, fmt, ap);
	return 0;
}

uint64_t sampler__boot_to_unix_ns(uint64_t boot_ns)
{
	struct timespec rt, bt;

	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_BOOTTIME, &bt);
	return boot_ns + ((uint64_t)rt.tv_sec * 1000000000ULL + rt.tv_nsec) -
	       ((uint64_t)bt.tv_sec * 1000000000ULL + bt.tv_nsec);
}

static void _map_cuda_when_seen(struct sampler *s);

static int _on_record(void *ctx, void *data, size_t size)
{
	struct sampler *s = ctx;
	uint32_t type;

	if (size < sizeof(type)) {
		s->decode_errors++;
		return 0;
	}
	memcpy(&type, data, sizeof(type));
	switch (type) {
	case FW_EVENT_CUDA_SEEN:
		break;	/* a wakeup: sampler__drain() maps the CUDA buffer */
	case FW_EVENT_SAMPLE: {
		const struct fw_sample *smp = data;

		if (size < offsetof(struct fw_sample, addrs) ||
		    smp->kstack_len > FW_MAX_KSTACK || smp->ustack_len > FW_MAX_USTACK ||
		    smp->pystack_len > FW_MAX_PYFRAMES ||
		    size < offsetof(struct fw_sample, addrs) +
			   (smp->kstack_len + smp->ustack_len + 2 * smp->pystack_len) *
			   sizeof(__u64)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_sample)
			s->on_sample(s->ctx, smp);
		break;
	}
	case FW_EVENT_EXEC:
	case FW_EVENT_EXIT:
	case FW_EVENT_FORK:
		if (size < sizeof(struct fw_proc_event)) {
			s->decode_errors++;
			return 0;
		}
		/*
		 * A process's last CUDA records (its exit flush) were committed
		 * to the CUDA buffer before its exit event was written here, but
		 * maybe after that buffer was drained: read them now, while the
		 * agent still knows the process's kernel names and mappings.
		 */
		if (type == FW_EVENT_EXIT) {
			_map_cuda_when_seen(s);
			if (s->cuda_rb && ringbuf__consume(s->cuda_rb) < 0)
				s->decode_errors++;
		}
		if (s->on_proc)
			s->on_proc(s->ctx, data);
		break;
	case FW_EVENT_OFFCPU: {
		const struct fw_offcpu *o = data;

		if (size < offsetof(struct fw_offcpu, s.addrs) ||
		    o->s.kstack_len > FW_MAX_KSTACK || o->s.ustack_len > FW_MAX_USTACK ||
		    o->s.pystack_len > FW_MAX_PYFRAMES || o->kskip > o->s.kstack_len ||
		    size < offsetof(struct fw_offcpu, s.addrs) +
			   (o->s.kstack_len + o->s.ustack_len + 2 * o->s.pystack_len) *
			   sizeof(__u64)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_offcpu)
			s->on_offcpu(s->ctx, o);
		break;
	}
	case FW_EVENT_CUDA_LAUNCH: {
		const struct fw_cuda_launch *l = data;

		if (size < offsetof(struct fw_cuda_launch, s.addrs) || l->s.kstack_len ||
		    l->s.ustack_len > FW_MAX_USTACK || l->s.pystack_len > FW_MAX_PYFRAMES ||
		    size < offsetof(struct fw_cuda_launch, s.addrs) +
			   (l->s.ustack_len + 2 * l->s.pystack_len) * sizeof(__u64)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_cuda_launch)
			s->on_cuda_launch(s->ctx, l);
		break;
	}
	case FW_EVENT_CUDA_ACTIVITY: {
		const struct fw_cuda_activity *a = data;

		if (size < offsetof(struct fw_cuda_activity, recs) ||
		    a->count > FW_CUDA_MAX_BATCH ||
		    size < offsetof(struct fw_cuda_activity, recs) +
			   a->count * sizeof(struct fw_cuda_record)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_cuda_activity)
			s->on_cuda_activity(s->ctx, a);
		break;
	}
	case FW_EVENT_CUDA_CONFLICT:
		if (size < sizeof(struct fw_cuda_conflict)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_cuda_conflict)
			s->on_cuda_conflict(s->ctx, data);
		break;
	case FW_EVENT_CUDA_NAME:
		if (size < sizeof(struct fw_cuda_name)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_cuda_name)
			s->on_cuda_name(s->ctx, data);
		break;
	case FW_EVENT_CUDA_EXEC:
		if (size < sizeof(struct fw_cuda_exec)) {
			s->decode_errors++;
			return 0;
		}
		if (s->on_cuda_exec)
			s->on_cuda_exec(s->ctx, data);
		break;
	default:
		s->decode_errors++;
	}
	return 0;
}

/*
 * Sizes the ring buffer for a second of samples at the worst case of
 * full-depth stacks (several seconds of typical ones), so that the agent
 * can stall for a while (1,000 new processes a second to read the maps
 * of) without losing samples or process events: a quarter of that lost
 * samples under test_process_churn_memory_flat at 99 Hz.
 */
static uint32_t _ringbuf_size(unsigned int freq_hz, int ncpus, bool offcpu)
{
	uint64_t want = (uint64_t)freq_hz * ncpus * sizeof(struct fw_sample);
	/* Off-CPU records have no fixed rate: room for a burst before the wakeup lands. */
	uint32_t size = offcpu ? 256 * 1024 : 64 * 1024;

	/* 2 MiB at most (of RSS too, see ringbuf.h); 999 Hz loses samples in a stall. */
	while (size < want && size < (2u << 20))
		size <<= 1;
	return size;
}

/*
 * Off-CPU's maps allocate under the runqueue lock held around
 * sched_switch, where kmalloc() must not run: it can wake kswapd, which
 * takes a runqueue lock. Hash maps allocate from the BPF allocator since
 * Linux 6.1, task storage since 6.4.
 */
static bool _kernel_at_least(int major, int minor)
{
	struct utsname u;
	int ma, mi;

	if (uname(&u) || sscanf(u.release, "%d.%d", &ma, &mi) != 2)
		return false;
	return ma > major || (ma == major && mi >= minor);
}

enum sampler_offcpu sampler__offcpu_support(void)
{
	const char *force = getenv("FLAMEWATCH_OFFCPU_THREAD_TABLE");

	if (!_kernel_at_least(6, 1))
		return SAMPLER_OFFCPU_NONE;
	if ((force && force[0] && strcmp(force, "0")) || !_kernel_at_least(6, 4))
		return SAMPLER_OFFCPU_TABLE;
	return SAMPLER_OFFCPU_TASK_STORAGE;
}

const char *sampler__offcpu_missing(void)
{
	/* Two passes over the kernel's BTF: once a process is enough. */
	static char text[160];
	static bool done;
	int info, fair;

	if (done)
		return text;
	done = true;
	info = core_btf__kernel_has_member("task_struct", "sched_info");
	fair = core_btf__kernel_has_member("sched_entity", "cfs_rq");
	if (info < 0 || fair < 0)
		snprintf(text, sizeof(text), "the kernel's BTF could not be read to check "
			 "CONFIG_SCHED_INFO and CONFIG_FAIR_GROUP_SCHED");
	else if (!info || !fair)
		snprintf(text, sizeof(text), "%s%s%s (block times come from the scheduler; "
			 "without %s every block is counted as lost)",
			 info ? "" : "CONFIG_SCHED_INFO", !info && !fair ? " and " : "",
			 fair ? "" : "CONFIG_FAIR_GROUP_SCHED", !info && !fair ? "them" : "it");
	return text;
}

/*
 * Where the kernel's .sched.text lies, for off-CPU stacks to start at
 * __schedule(); both 0 when kallsyms hides its addresses.
 */
static void _sched_text(__u64 *start, __u64 *end)
{
	FILE *f = fopen("/proc/kallsyms", "re");
	unsigned long long addr;
	char line[256], name[128];

	*start = *end = 0;
	if (!f)
		return;
	while ((!*start || !*end) && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx %*c %127s", &addr, name) != 2)
			continue;
		if (!strcmp(name, "__sched_text_start"))
			*start = addr;
		else if (!strcmp(name, "__sched_text_end"))
			*end = addr;
	}
	fclose(f);
	if (*start >= *end)
		*start = *end = 0;
}

/*
 * Reads a CPU list such as "0-3,8,10-11" (the format of
 * /sys/devices/system/cpu/online) into a bitmap of *n entries.
 */
static int _read_cpu_list(const char *path, bool **mask, int *n)
{
	char buf[4096], *p = buf, *end;
	bool *m = NULL;
	int max = -1;
	ssize_t len;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return -errno;
	len = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	if (len <= 0)
		return -EINVAL;
	buf[len] = '\0';

	m = calloc(FW_MAX_CPUS, sizeof(*m));
	if (!m)
		return -ENOMEM;
	while (*p && *p != '\n') {
		long lo = strtol(p, &end, 10), hi = lo;

		if (end == p)
			goto bad;
		if (*end == '-') {
			p = end + 1;
			hi = strtol(p, &end, 10);
			if (end == p)
				goto bad;
		}
		if (lo < 0 || hi < lo || hi >= FW_MAX_CPUS)
			goto bad;
		for (long c = lo; c <= hi; c++)
			m[c] = true;
		if (hi > max)
			max = hi;
		p = end;
		if (*p == ',')
			p++;
	}
	*mask = m;
	*n = max + 1;
	return 0;
bad:
	free(m);
	return -EINVAL;
}

static int _open_cpu_event(unsigned int freq_hz, int cpu)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.size = sizeof(attr),
		.freq = 1,
		.sample_freq = freq_hz,
	};

	return syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

struct sampler *sampler__open(const struct sampler_opts *opts)
{
	int ncpus = libbpf_num_possible_cpus();
	bool *online = NULL;
	int nonline = 0, err = 0;
	struct core_btf btf = { .fd = -1 };
	enum sampler_offcpu offcpu;
	uint32_t ringbuf_size;
	struct sampler *s;

	libbpf_set_print(_libbpf_print);
	if (ncpus < 0) {
		errno = -ncpus;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->epfd = -1;
	s->on_sample = opts->on_sample;
	s->on_proc = opts->on_proc;
	s->ctx = opts->ctx;
	s->on_cuda_launch = opts->on_cuda_launch;
	s->on_cuda_activity = opts->on_cuda_activity;
	s->on_cuda_conflict = opts->on_cuda_conflict;
	s->on_cuda_name = opts->on_cuda_name;
	s->on_cuda_exec = opts->on_cuda_exec;
	s->on_offcpu = opts->on_offcpu;

	{
		size_t size;
		const void *elf = sample_bpf__elf_bytes(&size);

		core_btf__open(&btf, elf, size);
	}
	{
		LIBBPF_OPTS(bpf_object_open_opts, oo, .btf_custom_path = btf.path[0] ? btf.path : NULL);

		s->skel = sample_bpf__open_opts(&oo);
	}
	skel_bytes__release(sample_bpf__elf_bytes);
	if (!s->skel) {
		err = -errno;
		pr_warn("cannot open the BPF object: %s\n", strerror(errno));
		goto fail;
	}
	{
		struct bpf_program *cuda[] = {
			s->skel->progs.on_cuda_launch, s->skel->progs.on_cuda_activity,
			s->skel->progs.on_cuda_conflict, s->skel->progs.on_cuda_name,
		};

		/*
		 * USDT programs are attached per library file by
		 * sampler__attach_cuda(). Without a taker of their records
		 * (record) they are not even loaded: the launch probe walks
		 * stacks like on_cpu_sample, and verifying it is half of the
		 * object's load time.
		 */
		for (size_t i = 0; i < sizeof(cuda) / sizeof(cuda[0]); i++) {
			bpf_program__set_autoattach(cuda[i], false);
			if (!opts->on_cuda_launch)
				bpf_program__set_autoload(cuda[i], false);
		}
	}
	s->skel->rodata->follow_only = opts->follow_only;
	s->skel->rodata->follow_children = opts->follow_children;
	s->skel->rodata->wakeup_on_exec = opts->wakeup_on_exec;
	s->skel->rodata->have_bpf_loop = sampler__use_bpf_loop();
	if (!s->skel->rodata->have_bpf_loop)
		pr_info("no bpf_loop(): stack walks use bounded loops (kernels before 5.17)\n");
	ringbuf_size = _ringbuf_size(opts->freq_hz, ncpus, opts->on_offcpu != NULL);
	bpf_map__set_max_entries(s->skel->maps.events, ringbuf_size);
	/* Wake the agent at a quarter full, whatever its timer. */
	s->skel->rodata->events_wakeup_bytes = ringbuf_size / 4;
	offcpu = opts->on_offcpu ? sampler__offcpu_support() : SAMPLER_OFFCPU_NONE;
	if (opts->on_offcpu && offcpu == SAMPLER_OFFCPU_NONE) {
		pr_info("off-CPU profiles are off: Linux 6.1 or later is needed\n");
		s->on_offcpu = NULL;
	}
	if (offcpu == SAMPLER_OFFCPU_TABLE)
		pr_info("off-CPU: per-thread state in a table of %d threads (Linux before 6.4)\n",
			SAMPLER_OFFCPU_THREADS);
	if (s->on_offcpu) {
		const char *missing = sampler__offcpu_missing();

		if (*missing)
			pr_warn("off-CPU: this kernel lacks %s\n", missing);
	}
	if (s->on_offcpu) {
		_sched_text(&s->skel->rodata->sched_text_start, &s->skel->rodata->sched_text_end);
		s->skel->rodata->offcpu_on = true;
		s->skel->rodata->offcpu_min_ns = opts->offcpu_min_ns;
		s->skel->rodata->offcpu_walk_all = opts->offcpu_walk_all;
		s->skel->rodata->offcpu_skip_tgid = opts->offcpu_skip_pid;
		s->skel->rodata->offcpu_task_storage = offcpu == SAMPLER_OFFCPU_TASK_STORAGE;
		if (opts->offcpu_no_attach)
			bpf_program__set_autoattach(s->skel->progs.on_sched_switch, false);
	} else {
		bpf_program__set_autoload(s->skel->progs.on_sched_switch, false);
		bpf_map__set_max_entries(s->skel->maps.offcpu_pending, 1);
	}
	bpf_map__set_max_entries(s->skel->maps.offcpu_threads,
				 offcpu == SAMPLER_OFFCPU_TABLE ? SAMPLER_OFFCPU_THREADS : 1);
	if (opts->on_cuda_launch) {
		/*
		 * CUDA launch bursts: records wake the agent once a quarter
		 * of the buffer is pending (see cuda_submit_flags() in
		 * sample.bpf.c). The kernel allocates the buffer now; it
		 * costs the agent's memory only once mapped, on the first
		 * sampler__attach_cuda().
		 */
		uint32_t size = 2u << 20;

		s->skel->rodata->cuda_wakeup_bytes = size / 4;
		s->skel->rodata->cuda_launch_max_bytes = size / 2;
		bpf_map__set_max_entries(s->skel->maps.cuda_events, size);
	}
	if (!opts->follow_only) {
		/* The followed map is unused: don't pay for it. */
		bpf_map__set_max_entries(s->skel->maps.followed, 1);
	}

	err = sample_bpf__load(s->skel);
	core_btf__close(&btf);
	if (err) {
		pr_warn("cannot load the BPF programs: %s\n", strerror(-err));
		goto fail;
	}

	err = _read_cpu_list("/sys/devices/system/cpu/online", &online, &nonline);
	if (err) {
		pr_warn("cannot read the online CPUs: %s\n", strerror(-err));
		goto fail;
	}
	s->links = calloc(nonline, sizeof(*s->links));
	if (!s->links) {
		err = -ENOMEM;
		goto fail;
	}
	for (int cpu = 0; cpu < nonline; cpu++) {
		int fd;

		if (!online[cpu])
			continue;
		fd = _open_cpu_event(opts->freq_hz, cpu);
		if (fd < 0) {
			err = -errno;
			pr_warn("cannot open a cpu-clock perf event on CPU %d: %s\n",
				cpu, strerror(errno));
			goto fail;
		}
		s->links[s->nlinks] = bpf_program__attach_perf_event(s->skel->progs.on_cpu_sample, fd);
		if (!s->links[s->nlinks]) {
			err = -errno;
			close(fd);
			pr_warn("cannot attach the sampler on CPU %d: %s\n", cpu, strerror(errno));
			goto fail;
		}
		s->nlinks++;
	}

	err = sample_bpf__attach(s->skel);
	if (err) {
		pr_warn("cannot attach the process tracepoints: %s\n", strerror(-err));
		goto fail;
	}
	s->rb = ringbuf__new(bpf_map__fd(s->skel->maps.events), _on_record, s);
	s->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (!s->rb || s->epfd < 0 ||
	    epoll_ctl(s->epfd, EPOLL_CTL_ADD, ringbuf__fd(s->rb),
		      &(struct epoll_event){ .events = EPOLLIN })) {
		err = -errno;
		pr_warn("cannot map the ring buffer: %s\n", strerror(errno));
		goto fail;
	}
	free(online);
	return s;

fail:
	core_btf__close(&btf);
	free(online);
	sampler__close(s);
	errno = err ? -err : EINVAL;
	return NULL;
}

void sampler__close(struct sampler *s)
{
	if (!s)
		return;
	ringbuf__free(s->cuda_rb);
	ringbuf__free(s->rb);
	if (s->epfd >= 0)
		close(s->epfd);
	for (int i = 0; i < s->nlinks; i++)
		bpf_link__destroy(s->links[i]);
	free(s->links);
	bpf_link__destroy(s->offcpu_link);
	sample_bpf__destroy(s->skel);
	free(s);
}

int sampler__follow(struct sampler *s, pid_t tgid)
{
	__u32 key = tgid;
	__u8 one = 1;

	if (bpf_map__update_elem(s->skel->maps.followed, &key, sizeof(key), &one,
				 sizeof(one), BPF_ANY))
		return -errno;
	return 0;
}

void sampler__unfollow(struct sampler *s, pid_t tgid)
{
	__u32 key = tgid;

	bpf_map__delete_elem(s->skel->maps.followed, &key, sizeof(key), 0);
}

int sampler__python_fd(struct sampler *s)
{
	return bpf_map__fd(s->skel->maps.py_procs);
}

int sampler__ruby_fd(struct sampler *s)
{
	return bpf_map__fd(s->skel->maps.rb_procs);
}

int sampler__python_known_fd(struct sampler *s)
{
	return bpf_map__fd(s->skel->maps.py_known);
}

void sampler__hotspot_fds(struct sampler *s, int *procs_fd, int *stats_fd)
{
	*procs_fd = bpf_map__fd(s->skel->maps.hs_procs);
	*stats_fd = bpf_map__fd(s->skel->maps.hs_stats);
}

void sampler__unwind_maps(struct sampler *s, struct unwinder_maps *out)
{
	out->files_fd = bpf_map__fd(s->skel->maps.unwind_files);
	out->chunks_fd = bpf_map__fd(s->skel->maps.unwind_chunks);
	out->rules_fd = bpf_map__fd(s->skel->maps.unwind_rules);
	out->procs_fd = bpf_map__fd(s->skel->maps.proc_mappings);
	out->wanted_fd = bpf_map__fd(s->skel->maps.wanted_chunks);
}

/*
 * The CUDA ring buffer (2 MiB of the agent's RSS once mapped) is mapped
 * when a followed process first fires a CUDA probe, not when the probes
 * are attached: the agent attaches to its own library at start, on hosts
 * that may never run CUDA. What the probes wrote before stays in the
 * buffer and is read now.
 *
 * It is a ring of its own, drained before the samples' one and again at
 * each process's exit event: a process's launches and its exit flush must
 * be handled before its exit event (in the other ring) makes the agent
 * forget its mappings and kernel names, as they were when both shared one
 * ring (the order the records were written in). Both rings' fds are in the
 * epoll set callers wait on; sampler__poll() drains both whichever woke.
 */
static void _map_cuda_when_seen(struct sampler *s)
{
	struct ringbuf *rb;
	int err;

	if (s->cuda_rb || !s->skel->bss->cuda_seen)
		return;
	rb = ringbuf__new(bpf_map__fd(s->skel->maps.cuda_events), _on_record, s);
	if (!rb || epoll_ctl(s->epfd, EPOLL_CTL_ADD, ringbuf__fd(rb),
			     &(struct epoll_event){ .events = EPOLLIN })) {
		err = errno;
		ringbuf__free(rb);
		pr_warn("cannot map the CUDA ring buffer: %s\n", strerror(err));
		s->skel->bss->cuda_seen = 0;	/* tried again when the next probe fires */
		return;
	}
	s->cuda_rb = rb;
}

int sampler__drain(struct sampler *s)
{
	int n = 0, m;

	_map_cuda_when_seen(s);
	if (s->cuda_rb) {
		n = ringbuf__consume(s->cuda_rb);
		if (n < 0)
			return n;
	}
	m = ringbuf__consume(s->rb);
	return m < 0 ? m : n + m;
}

int sampler__poll(struct sampler *s, int timeout_ms)
{
	struct epoll_event ev[2];
	int n;

	_map_cuda_when_seen(s);
	n = epoll_wait(s->epfd, ev, 2, timeout_ms);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	return sampler__drain(s);
}

bool sampler__offcpu_on(const struct sampler *s)
{
	return s->on_offcpu != NULL;
}

int sampler__offcpu_prog_fd(const struct sampler *s)
{
	return s->on_offcpu ? bpf_program__fd(s->skel->progs.on_sched_switch) : -1;
}

int sampler__offcpu_attach(struct sampler *s)
{
	if (!s->on_offcpu || s->offcpu_link)
		return 0;
	s->offcpu_link = bpf_program__attach(s->skel->progs.on_sched_switch);
	return s->offcpu_link ? 0 : -errno;
}

int sampler__stats(struct sampler *s, struct sampler_stats *out)
{
	int ncpus = libbpf_num_possible_cpus();
	__u64 *values;

	memset(out, 0, sizeof(*out));
	out->decode_errors = s->decode_errors;
	values = calloc(ncpus, sizeof(*values));
	if (!values)
		return -ENOMEM;
	for (__u32 key = 0; key < FW_STAT_MAX; key++) {
		if (bpf_map__lookup_elem(s->skel->maps.stats, &key, sizeof(key), values,
					 ncpus * sizeof(*values), 0))
			continue;
		for (int cpu = 0; cpu < ncpus; cpu++)
			out->counters[key] += values[cpu];
	}
	free(values);
	return 0;
}

static const char *const _cuda_stat_names[FW_CUDA_STAT_MAX] = {
	[FW_CUDA_STAT_LAUNCHES] = "cuda_launches",
	[FW_CUDA_STAT_LAUNCH_RINGBUF_FULL] = "cuda_launch_ringbuf_full",
	[FW_CUDA_STAT_ACTIVITIES] = "cuda_activity_batches",
	[FW_CUDA_STAT_RECORDS] = "cuda_records",
	[FW_CUDA_STAT_ACTIVITY_RINGBUF_FULL] = "cuda_activity_ringbuf_full",
	[FW_CUDA_STAT_ACTIVITY_FAULT] = "cuda_activity_faults",
	[FW_CUDA_STAT_ACTIVITY_TRUNCATED] = "cuda_records_truncated",
	[FW_CUDA_STAT_CONFLICTS] = "cuda_conflicts",
	[FW_CUDA_STAT_FILTERED] = "cuda_filtered",
	[FW_CUDA_STAT_NAMES] = "cuda_names",
	[FW_CUDA_STAT_NAME_LOST] = "cuda_names_lost",
	[FW_CUDA_STAT_EXEC_LOST] = "cuda_exec_marks_lost",
};

const char *fw_cuda_stat__name(enum fw_cuda_stat stat)
{
	return stat < FW_CUDA_STAT_MAX ? _cuda_stat_names[stat] : "unknown";
}

int sampler__attach_cuda(struct sampler *s, const char *path,
			 struct bpf_link *links[SAMPLER_CUDA_LINKS])
{
	/*
	 * The activity probe last: its semaphore is what makes the library
	 * collect (cuda/inject.c, _listening), and by then the names, the
	 * launches and the conflicts are attached too.
	 */
	struct bpf_program *progs[SAMPLER_CUDA_LINKS] = {
		s->skel->progs.on_cuda_name,
		s->skel->progs.on_cuda_conflict,
		s->skel->progs.on_cuda_launch,
		s->skel->progs.on_cuda_activity,
	};
	static const char *const names[SAMPLER_CUDA_LINKS] = { "name", "conflict", "launch",
							       "activity" };
	int err = 0;

	memset(links, 0, SAMPLER_CUDA_LINKS * sizeof(*links));
	if (!s->on_cuda_launch)
		return -EINVAL;		/* the programs were not loaded */
	for (int i = 0; i < SAMPLER_CUDA_LINKS; i++) {
		/* pid -1: every process mapping the file, including later ones. */
		links[i] = bpf_program__attach_usdt(progs[i], -1, path, FW_CUDA_PROVIDER,
						    names[i], NULL);
		if (links[i])
			continue;
		err = -errno;
		/* Only launch and activity are needed; an old library may lack the others. */
		if (i < 2) {
			pr_debug("%s: no %s:%s probe: %s\n", path, FW_CUDA_PROVIDER, names[i],
				 strerror(-err));
			continue;
		}
		goto fail;
	}
	return 0;
fail:
	for (int i = 0; i < SAMPLER_CUDA_LINKS; i++) {
		bpf_link__destroy(links[i]);
		links[i] = NULL;
	}
	return err ? err : -ENOENT;
}

int sampler__cuda_stats(struct sampler *s, uint64_t counters[FW_CUDA_STAT_MAX])
{
	int ncpus = libbpf_num_possible_cpus();
	__u64 *values;

	memset(counters, 0, FW_CUDA_STAT_MAX * sizeof(*counters));
	if (ncpus < 0)
		return ncpus;
	values = calloc(ncpus, sizeof(*values));
	if (!values)
		return -ENOMEM;
	for (__u32 key = 0; key < FW_CUDA_STAT_MAX; key++) {
		if (bpf_map__lookup_elem(s->skel->maps.cuda_stats, &key, sizeof(key), values,
					 ncpus * sizeof(*values), 0))
			continue;
		for (int cpu = 0; cpu < ncpus; cpu++)
			counters[key] += values[cpu];
	}
	free(values);
	return 0;
}

int sampler__fd(struct sampler *s)
{
	return s->epfd;
}
