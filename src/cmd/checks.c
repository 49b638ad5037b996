// SPDX-License-Identifier: Apache-2.0
/*
 * What the kernel and the process must offer before BPF is loaded. libbpf's
 * own failure ("Operation not permitted" while loading a skeleton) does not
 * say which of a dozen things is missing; these checks do, each with its fix,
 * and report every missing thing at once rather than the first.
 */
#include <errno.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "agent/core_btf.h"
#include "agent/sampler.h"
#include "cmd/cmd.h"

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
#ifndef CAP_CHECKPOINT_RESTORE
#define CAP_CHECKPOINT_RESTORE 40
#endif

#define BTF_PATH "/sys/kernel/btf/vmlinux"

static int _has_cap(const struct __user_cap_data_struct *data, int cap)
{
	return !!(data[cap / 32].effective & (1u << (cap % 32)));
}

static int _read_sysctl(const char *path, long *v)
{
	FILE *f = fopen(path, "re");
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%ld", v) == 1;
	fclose(f);
	return ok ? 0 : -1;
}

/* Capabilities, with what each one buys. Required ones fail the check. */
static const struct {
	int cap;
	const char *name;
	bool required;
	const char *why;
} _caps[] = {
	{ CAP_BPF, "CAP_BPF", true, "load the BPF programs and maps" },
	{ CAP_PERFMON, "CAP_PERFMON", true,
	  "open the cpu-clock perf events of every CPU and attach BPF to them" },
	{ CAP_SYS_PTRACE, "CAP_SYS_PTRACE", false,
	  "read /proc/PID/maps and /proc/PID/root of other users' and more privileged "
	  "processes (without it their frames stay unsymbolized addresses)" },
	{ CAP_SYSLOG, "CAP_SYSLOG", false,
	  "read kernel addresses from /proc/kallsyms (without it kernel frames stay "
	  "addresses)" },
	{ CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH", false,
	  "read binaries that only their owner may read, for symbols and unwind tables" },
	{ CAP_CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE", false,
	  "open /proc/PID/map_files, for binaries deleted or replaced while they run, "
	  "and for every binary on btrfs and on overlayfs before Linux 6.8" },
};

int cmd__check_bpf_privileges(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = {};
	bool sys_admin, fatal = false;
	long kptr = 0, paranoid = 2;

	if (syscall(SYS_capget, &hdr, data)) {
		fprintf(stderr, "flamewatch: warning: cannot read this process's capabilities: %s\n",
			strerror(errno));
		return 0;
	}
	/* Before 5.8 (no CAP_BPF, CAP_PERFMON) CAP_SYS_ADMIN covers both. */
	sys_admin = _has_cap(data, CAP_SYS_ADMIN);
	_read_sysctl("/proc/sys/kernel/kptr_restrict", &kptr);
	_read_sysctl("/proc/sys/kernel/perf_event_paranoid", &paranoid);
	for (size_t i = 0; i < sizeof(_caps) / sizeof(_caps[0]); i++) {
		if (_has_cap(data, _caps[i].cap) || ((_caps[i].required ||
		     _caps[i].cap == CAP_CHECKPOINT_RESTORE) && sys_admin))
			continue;
		/* kallsyms shows addresses to anyone while both sysctls are this lax. */
		if (_caps[i].cap == CAP_SYSLOG && kptr == 0 && paranoid <= 1)
			continue;
		if (_caps[i].required)
			fatal = true;
		fprintf(stderr, "flamewatch: %s: missing %s: needed to %s\n",
			_caps[i].required ? "error" : "warning", _caps[i].name, _caps[i].why);
	}
	if (fatal)
		fprintf(stderr,
			"  Run it as root, or grant the capabilities: sudo setcap "
			"cap_bpf,cap_perfmon,cap_sys_ptrace,cap_syslog,cap_dac_read_search,"
			"cap_checkpoint_restore+ep "
			"/path/to/flamewatch\n"
			"  (systemd: AmbientCapabilities=; Docker/Kubernetes: --cap-add / "
			"securityContext.capabilities.add; see docs/install.md)\n");
	return fatal ? -1 : 0;
}

int cmd__check_btf(void)
{
	if (access(BTF_PATH, R_OK) == 0)
		return 0;
	fprintf(stderr,
		"flamewatch: error: this kernel has no BTF type information "
		"(" BTF_PATH " is missing%s).\n"
		"  flamewatch needs a kernel built with CONFIG_DEBUG_INFO_BTF=y "
		"(the default on Debian 11+, Ubuntu 20.10+, RHEL 8.2+)%s.\n",
		errno == ENOENT ? "" : ": not readable",
		errno == ENOENT ? "; in a container, mount /sys/kernel/btf from the host" : "");
	return -1;
}

static int _missing(const char *what, const char *fix)
{
	fprintf(stderr, "flamewatch: error: %s\n  %s\n", what, fix);
	return -1;
}

/* The BPF syscall itself: ENOSYS means a kernel without CONFIG_BPF_SYSCALL. */
static int _check_bpf_syscall(void)
{
	long disabled;
	int fd;

	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, NULL, 4, 4, 1, NULL);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno == ENOSYS)
		return _missing("this kernel has no bpf() system call",
				"flamewatch needs a kernel built with CONFIG_BPF_SYSCALL=y; in a "
				"container, the seccomp profile must allow bpf() (docker run "
				"--security-opt seccomp=unconfined, or a profile allowing bpf)");
	if (errno == EPERM && !_read_sysctl("/proc/sys/kernel/unprivileged_bpf_disabled", &disabled))
		return _missing("bpf() is not permitted to this process",
				"grant CAP_BPF (see above); a container's seccomp profile or an LSM "
				"(SELinux, AppArmor) may also block bpf()");
	fprintf(stderr, "flamewatch: error: bpf() fails: %s\n", strerror(errno));
	return -1;
}

/* A cpu-clock software event on CPU 0 for every task, as the sampler opens them. */
static int _check_perf_event(void)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.sample_freq = 19,
		.freq = 1,
		.disabled = 1,
	};
	char fix[512];
	long paranoid = -1;
	int fd;

	fd = syscall(__NR_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 0;
	}
	if (errno == ENOSYS)
		return _missing("this kernel has no perf_event_open() system call",
				"flamewatch needs CONFIG_PERF_EVENTS=y; in a container, the seccomp "
				"profile must allow perf_event_open");
	if (errno == ENOENT || errno == EOPNOTSUPP)
		return _missing("this kernel has no cpu-clock software perf event",
				"flamewatch samples with PERF_COUNT_SW_CPU_CLOCK (CONFIG_PERF_EVENTS)");
	if (errno == EACCES || errno == EPERM) {
		_read_sysctl("/proc/sys/kernel/perf_event_paranoid", &paranoid);
		snprintf(fix, sizeof(fix),
			 "kernel.perf_event_paranoid is %ld; system-wide sampling needs CAP_PERFMON "
			 "(or CAP_SYS_ADMIN), or perf_event_paranoid <= 0", paranoid);
		return _missing("opening a system-wide cpu-clock perf event is not permitted", fix);
	}
	fprintf(stderr, "flamewatch: error: perf_event_open(cpu-clock) fails: %s\n",
		strerror(errno));
	return -1;
}

/*
 * Program, map and helper support, probed by loading tiny programs. A probe
 * answers 0 for "not supported", < 0 when it could not tell (no permission).
 */
static int _check_bpf_features(void)
{
	static const struct {
		enum bpf_func_id id;
		const char *name, *since;
	} helpers[] = {
		{ BPF_FUNC_task_pt_regs, "bpf_task_pt_regs", "5.15" },
		{ BPF_FUNC_get_stack, "bpf_get_stack", "4.18" },
		{ BPF_FUNC_ringbuf_reserve, "bpf_ringbuf_reserve", "5.8" },
		{ BPF_FUNC_get_current_task_btf, "bpf_get_current_task_btf", "5.11" },
	};
	char what[256], fix[256];
	int ret = 0, r;

	r = libbpf_probe_bpf_prog_type(BPF_PROG_TYPE_PERF_EVENT, NULL);
	if (r == 0)
		ret = _missing("this kernel cannot run perf_event BPF programs",
			       "flamewatch needs CONFIG_BPF_EVENTS=y");
	r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL);
	if (r == 0)
		ret = _missing("this kernel has no BPF ring buffer map (BPF_MAP_TYPE_RINGBUF)",
			       "flamewatch needs Linux 5.8 or newer");
	r = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_HASH_OF_MAPS, NULL);
	if (r == 0)
		ret = _missing("this kernel has no BPF hash-of-maps (BPF_MAP_TYPE_HASH_OF_MAPS)",
			       "flamewatch needs Linux 4.12 or newer");
	for (size_t i = 0; i < sizeof(helpers) / sizeof(helpers[0]); i++) {
		r = libbpf_probe_bpf_helper(BPF_PROG_TYPE_PERF_EVENT, helpers[i].id, NULL);
		if (r != 0)
			continue;
		snprintf(what, sizeof(what), "this kernel lacks the BPF helper %s() for "
			 "perf_event programs", helpers[i].name);
		snprintf(fix, sizeof(fix), "%s() came with Linux %s; flamewatch needs Linux 5.15 "
			 "or newer", helpers[i].name, helpers[i].since);
		ret = _missing(what, fix);
	}
	return ret;
}

/*
 * The tracepoints the sampler attaches to, as the kernel's BTF names them
 * (read without libbpf, which would hold all of it, megabytes, in memory).
 */
static int _check_tracepoints(void)
{
	static const char *const tps[] = {
		"sched_process_exec", "sched_process_exit", "sched_process_fork",
	};
	char name[128];
	int ret = 0;

	for (size_t i = 0; i < sizeof(tps) / sizeof(tps[0]); i++) {
		int has;

		snprintf(name, sizeof(name), "btf_trace_%s", tps[i]);
		has = core_btf__kernel_has(name, BTF_KIND_TYPEDEF);
		if (has < 0)
			return _missing("cannot parse the kernel's BTF (" BTF_PATH ")",
					strerror(-has));
		if (has)
			continue;
		snprintf(name, sizeof(name), "this kernel has no tracepoint sched:%s", tps[i]);
		ret = _missing(name, "flamewatch follows processes through raw tracepoints "
			       "(Linux 4.17+, CONFIG_TRACEPOINTS)");
	}
	return ret;
}

static int _silent_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	return 0;
}

int cmd__check_kernel(void)
{
	libbpf_print_fn_t old;
	struct utsname u;
	int ret = 0;

	if (cmd__check_bpf_privileges())
		return -1;	/* every probe below would only say "not permitted" */
	if (cmd__check_btf())
		ret = -1;
	if (_check_bpf_syscall())
		return -1;
	if (_check_perf_event())
		ret = -1;
	/* The probes' own libbpf messages would only repeat ours. */
	old = libbpf_set_print(_silent_print);
	if (_check_bpf_features())
		ret = -1;
	libbpf_set_print(old);
	if (ret == 0 && _check_tracepoints())
		ret = -1;
	if (ret && uname(&u) == 0)
		fprintf(stderr, "  (this kernel: %s %s; flamewatch needs Linux 5.15+ with BTF, "
			"see docs/install.md)\n", u.sysname, u.release);
	return ret;
}

int cmd_check(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: flamewatch check\n\n"
		       "Checks that this kernel and this process have everything the sampler needs\n"
		       "(capabilities, BTF, bpf(), perf events, BPF map types and helpers,\n"
		       "tracepoints) and says what is missing. Exit status 0 when nothing is.\n");
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "flamewatch: error: check takes no arguments\n");
		return 2;
	}
	if (cmd__check_kernel())
		return 1;
	printf("flamewatch: this kernel and these privileges have everything the sampler needs\n");
	/* Not a failure either way: which of the two stack walks this kernel runs. */
	if (sampler__use_bpf_loop())
		printf("flamewatch: stack walks: bpf_loop() (Linux 5.17+)\n");
	else
		printf("flamewatch: stack walks: bounded loops (no bpf_loop(): Linux before 5.17, "
		       "or FLAMEWATCH_NO_BPF_LOOP is set)\n");
	switch (sampler__offcpu_support()) {
	case SAMPLER_OFFCPU_TASK_STORAGE:
		printf("flamewatch: off-CPU time: on, per-thread state in task storage "
		       "(Linux 6.4+)\n");
		break;
	case SAMPLER_OFFCPU_TABLE:
		printf("flamewatch: off-CPU time: on, per-thread state in a table of %d threads "
		       "(Linux 6.1 to 6.3, or FLAMEWATCH_OFFCPU_THREAD_TABLE is set)\n",
		       SAMPLER_OFFCPU_THREADS);
		break;
	case SAMPLER_OFFCPU_NONE:
		printf("flamewatch: off-CPU time: off (Linux 6.1 or later is needed)\n");
		break;
	}
	if (sampler__offcpu_support() != SAMPLER_OFFCPU_NONE) {
		const char *missing = sampler__offcpu_missing();

		if (*missing)
			printf("flamewatch: off-CPU time: this kernel lacks %s\n", missing);
	}
	return 0;
}
