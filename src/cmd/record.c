// SPDX-License-Identifier: Apache-2.0
/*
 * flamewatch record: a one-shot CPU profile of a command, some processes or
 * the whole host, written as pprof or folded stacks.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/collector.h"
#include "agent/cpu_profile.h"
#include "cmd/cmd.h"
#include "cmd/collect_opts.h"
#include "agent/continuous.h"
#include "common/batch.h"
#include "common/env.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/timeparse.h"
#include "format/folded.h"
#include "format/pprof.h"

#define MAX_PIDS 1024

enum out_format { OUT_AUTO, OUT_PPROF, OUT_FOLDED };

struct record_opts {
	unsigned int freq_hz;
	double duration_s;		/* 0: until the command exits or a signal */
	pid_t pids[MAX_PIDS];
	int npids;
	bool all;
	const char *output;
	enum out_format format;
	bool quiet;
	unsigned long unwind_mb;	/* cap on the unwind tables loaded into BPF */
	uint64_t java_perfmap_ns;	/* 0: do not ask JVMs for perf maps */
	bool offcpu;			/* write off-CPU time instead of CPU samples */
	uint64_t offcpu_min_ns;
	char **cmd;			/* NULL-terminated, or NULL */
};

struct record {
	struct record_opts opts;
	struct collector *collector;
	struct cpu_profile *cp;		/* the collector's */
	pid_t child;
	int child_status;
	bool child_done;
	int followed_alive;		/* -p mode: processes still running */
};

static volatile sig_atomic_t _stop_signal;

static void _on_signal(int sig)
{
	_stop_signal = sig;
}

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch record [-F HZ] [-d SECONDS] [-p PID[,PID...]] [-a] [-o FILE]\n"
"                         [--format pprof|folded] [--off-cpu] [--quiet] [-- CMD ARGS...]\n"
"\n"
"Samples CPU stacks (kernel and user) with eBPF and writes a profile.\n"
"\n"
"  -F, --freq HZ        samples per second per CPU (default 19)\n"
"  -d, --duration SEC   stop after SEC seconds (default: until CMD exits or Ctrl-C)\n"
"  -p, --pid PIDS       profile these processes and all their threads\n"
"  -a, --all            profile the whole host (the default without -p or CMD)\n"
"  -o, --output FILE    where to write the profile (default profile.pb.gz; - for stdout)\n"
"      --format FMT     pprof (gzipped profile.proto) or folded (FlameGraph's collapsed\n"
"                       stacks); by default from FILE's extension (.folded, .txt), else pprof\n"
"      --off-cpu        write where threads blocked instead: nanoseconds off the CPU\n"
"                       under the stack they blocked in (pprof type off_cpu); every\n"
"                       block's stack is walked, not only those likely to be long\n"
"      --off-cpu-min DUR  shortest block counted with --off-cpu (default 1ms)\n"
"  -q, --quiet          no progress line\n"
"      --java-perfmap-interval SEC  run `jcmd PID Compiler.perfmap` for every sampled\n"
"                       JVM this often, so JIT-compiled Java frames get names (default off)\n"
"      --unwind-table-mb N  cap on the unwind tables loaded into the kernel\n"
"                       (default 64 MiB; files that do not fit get their\n"
"                       rows a 64-KiB chunk of code at a time, where samples land)\n"
"  -v, --verbose        debug messages\n"
"  -- CMD ARGS...       start CMD and profile it and its children until it exits\n");
}

static int _parse_uint(const char *s, unsigned long max, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (!*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v == 0 || v > max)
		return -1;
	*out = v;
	return 0;
}

static unsigned long _max_sample_rate(void)
{
	unsigned long rate = 100000;
	FILE *f = fopen("/proc/sys/kernel/perf_event_max_sample_rate", "re");

	if (f) {
		if (fscanf(f, "%lu", &rate) != 1)
			rate = 100000;
		fclose(f);
	}
	return rate;
}

static int _parse_pids(struct record_opts *o, const char *arg)
{
	char *copy = strdup(arg), *tok, *save = NULL;
	int ret = 0;

	if (!copy)
		return -1;
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		unsigned long pid;
		char path[32];

		if (_parse_uint(tok, INT_MAX, &pid)) {
			fprintf(stderr, "flamewatch: error: -p: '%s' is not a process id\n", tok);
			ret = -1;
			break;
		}
		snprintf(path, sizeof(path), "/proc/%lu", pid);
		if (access(path, F_OK)) {
			fprintf(stderr, "flamewatch: error: -p: no process with id %lu\n", pid);
			ret = -1;
			break;
		}
		if (o->npids == MAX_PIDS) {
			fprintf(stderr, "flamewatch: error: -p: at most %d processes\n", MAX_PIDS);
			ret = -1;
			break;
		}
		o->pids[o->npids++] = pid;
	}
	free(copy);
	return ret;
}

static int _parse_args(struct record_opts *o, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "freq", required_argument, NULL, 'F' },
		{ "duration", required_argument, NULL, 'd' },
		{ "pid", required_argument, NULL, 'p' },
		{ "all", no_argument, NULL, 'a' },
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, 'f' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "unwind-table-mb", required_argument, NULL, 'U' },
		{ "java-perfmap-interval", required_argument, NULL, 'J' },
		{ "off-cpu", no_argument, NULL, 'O' },
		{ "off-cpu-min", required_argument, NULL, 'M' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	unsigned long v;
	char *end;
	int c;

	o->freq_hz = 19;
	o->unwind_mb = 64;
	o->offcpu_min_ns = CONTINUOUS_OFFCPU_MIN_NS;
	o->output = "profile.pb.gz";
	optind = 1;
	/* '+': stop at the first non-option, so the command's own flags stay its own. */
	while ((c = getopt_long(argc, argv, "+F:d:p:ao:qvh", longopts, NULL)) != -1) {
		switch (c) {
		case 'F':
			if (_parse_uint(optarg, _max_sample_rate(), &v)) {
				fprintf(stderr, "flamewatch: error: -F: '%s' is not a frequency "
					"between 1 and %lu Hz (kernel.perf_event_max_sample_rate)\n",
					optarg, _max_sample_rate());
				return -1;
			}
			o->freq_hz = v;
			break;
		case 'd':
			errno = 0;
			o->duration_s = strtod(optarg, &end);
			if (errno || *end || !(o->duration_s > 0) || o->duration_s > 1e7) {
				fprintf(stderr, "flamewatch: error: -d: '%s' is not a positive "
					"number of seconds\n", optarg);
				return -1;
			}
			break;
		case 'p':
			if (_parse_pids(o, optarg))
				return -1;
			break;
		case 'a':
			o->all = true;
			break;
		case 'o':
			o->output = optarg;
			break;
		case 'f':
			if (!strcmp(optarg, "pprof")) {
				o->format = OUT_PPROF;
			} else if (!strcmp(optarg, "folded")) {
				o->format = OUT_FOLDED;
			} else {
				fprintf(stderr, "flamewatch: error: --format: '%s' is not one of "
					"pprof, folded\n", optarg);
				return -1;
			}
			break;
		case 'q':
			o->quiet = true;
			log__set_level(LOG_WARN);
			break;
		case 'J':
			if (collect_opts__parse_java_interval(optarg, &o->java_perfmap_ns))
				return -1;
			break;
		case 'O':
			o->offcpu = true;
			break;
		case 'M':
			if (collect_opts__parse_offcpu_min(optarg, &o->offcpu_min_ns))
				return -1;
			break;
		case 'U':
			if (_parse_uint(optarg, 1 << 20, &o->unwind_mb)) {
				fprintf(stderr, "flamewatch: error: --unwind-table-mb: '%s' is not "
					"a size in MiB\n", optarg);
				return -1;
			}
			break;
		case 'v':
			log__set_level(LOG_DEBUG);
			break;
		case 'h':
			_usage(stdout);
			exit(0);
		default:
			_usage(stderr);
			return -1;
		}
	}
	if (optind < argc)
		o->cmd = argv + optind;
	if (o->cmd && (o->npids || o->all)) {
		fprintf(stderr, "flamewatch: error: give a command, -p or -a, not several\n");
		return -1;
	}
	if (o->npids && o->all) {
		fprintf(stderr, "flamewatch: error: -p and -a exclude each other\n");
		return -1;
	}
	if (!o->cmd && !o->npids)
		o->all = true;
	if (o->format == OUT_AUTO) {
		const char *dot = strrchr(o->output, '.');

		o->format = dot && (!strcmp(dot, ".folded") || !strcmp(dot, ".txt")) ?
			    OUT_FOLDED : OUT_PPROF;
	}
	return 0;
}

/*
 * The output is written to a temporary file next to the target and renamed
 * over it at the end: an interrupted run never leaves half a profile, and an
 * unwritable destination is reported before profiling starts.
 */
struct output {
	FILE *f;
	char tmp[PATH_MAX];
	const char *path;
};

static int _output_open(struct output *out, const char *path)
{
	int fd;

	out->path = path;
	if (!strcmp(path, "-")) {
		out->f = stdout;
		out->tmp[0] = '\0';
		return 0;
	}
	if (snprintf(out->tmp, sizeof(out->tmp), "%s.tmp.XXXXXX", path) >= (int)sizeof(out->tmp)) {
		fprintf(stderr, "flamewatch: error: output path too long: %s\n", path);
		return -1;
	}
	fd = mkstemp(out->tmp);
	if (fd < 0) {
		fprintf(stderr, "flamewatch: error: cannot write the output file %s: %s\n",
			path, strerror(errno));
		return -1;
	}
	fchmod(fd, 0644);
	out->f = fdopen(fd, "w");
	if (!out->f) {
		close(fd);
		unlink(out->tmp);
		return -1;
	}
	return 0;
}

static void _output_abort(struct output *out)
{
	if (!out->f || !out->tmp[0])
		return;
	fclose(out->f);
	unlink(out->tmp);
	out->f = NULL;
}

static int _output_commit(struct output *out)
{
	int err = 0;

	if (!out->tmp[0])
		return fflush(out->f) ? -1 : 0;
	if (fflush(out->f) || fsync(fileno(out->f)))
		err = -errno;
	if (fclose(out->f) && !err)
		err = -errno;
	out->f = NULL;
	if (!err && rename(out->tmp, out->path))
		err = -errno;
	if (err) {
		fprintf(stderr, "flamewatch: error: cannot write %s: %s\n", out->path,
			strerror(-err));
		unlink(out->tmp);
		return -1;
	}
	return 0;
}

static void _on_followed_exit(void *ctx, pid_t pid)
{
	struct record *r = ctx;

	(void)pid;
	r->followed_alive--;
}

/*
 * Starts the command stopped at a gate: it execs only once the sampler
 * follows its pid, so its first instructions are profiled too. An exec
 * failure comes back through a close-on-exec pipe.
 */
static int _spawn(struct record *r, int *gate_fd)
{
	int gate[2], report[2], err;
	char c;

	if (pipe2(gate, O_CLOEXEC) || pipe2(report, O_CLOEXEC))
		return -1;
	r->child = fork();
	if (r->child < 0)
		return -1;
	if (r->child == 0) {
		close(gate[1]);
		close(report[0]);
		if (read(gate[0], &c, 1) != 1)
			_exit(127);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		execvp(r->opts.cmd[0], r->opts.cmd);
		err = errno;
		if (write(report[1], &err, sizeof(err)) < 0)
			_exit(127);
		_exit(127);
	}
	close(gate[0]);
	close(report[1]);
	*gate_fd = gate[1];
	return report[0];
}

static int _release(struct record *r, int gate_fd, int report_fd)
{
	int err = 0;
	ssize_t n;

	if (write(gate_fd, "g", 1) != 1)
		err = errno;
	close(gate_fd);
	n = read(report_fd, &err, sizeof(err));
	close(report_fd);
	if (n == sizeof(err) && err) {
		fprintf(stderr, "flamewatch: error: cannot run %s: %s\n", r->opts.cmd[0],
			strerror(err));
		waitpid(r->child, NULL, 0);
		r->child = 0;
		return -1;
	}
	return 0;
}

static uint64_t _now_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void _progress(struct record *r, double elapsed, bool final)
{
	struct cpu_profile_counts c;

	cpu_profile__counts(r->cp, &c);
	fprintf(stderr, "\r\033[Kflamewatch: recording %.1fs, %llu samples, %llu processes%s",
		elapsed, (unsigned long long)c.samples, (unsigned long long)c.pids,
		final ? "\n" : "");
}

static bool _should_stop(struct record *r, double elapsed)
{
	if (_stop_signal)
		return true;
	if (r->opts.duration_s && elapsed >= r->opts.duration_s)
		return true;
	if (r->child && !r->child_done) {
		pid_t w = waitpid(r->child, &r->child_status, WNOHANG);

		if (w == r->child) {
			r->child_done = true;
			return true;
		}
	}
	if (r->opts.npids && r->followed_alive <= 0) {
		pr_info("every profiled process has exited\n");
		return true;
	}
	return false;
}

int cmd_record(int argc, char **argv)
{
	struct record r = { 0 };
	struct output out = { 0 };
	struct sigaction sa = { .sa_handler = _on_signal };
	struct collector_opts co = { 0 };
	struct cpu_profile_counts counts;
	uint64_t start_mono, next_tick;
	int gate_fd = -1, report_fd = -1, ret = 1, err;
	bool progress;
	double elapsed = 0;

	if (_parse_args(&r.opts, argc, argv))
		return 2;
	if (cmd__check_kernel())
		return 1;
	if (_output_open(&out, r.opts.output))
		return 1;
	progress = !r.opts.quiet && isatty(STDERR_FILENO);

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);

	if (r.opts.cmd) {
		report_fd = _spawn(&r, &gate_fd);
		if (report_fd < 0) {
			fprintf(stderr, "flamewatch: error: cannot start %s: %s\n",
				r.opts.cmd[0], strerror(errno));
			goto out;
		}
	}

	co.freq_hz = r.opts.freq_hz;
	co.follow_only = !r.opts.all;
	co.follow_children = r.opts.cmd != NULL;
	co.unwind_mb = r.opts.unwind_mb;
	/* Every table at once by default: a recording is short and its first samples count. */
	co.unwind_on_demand_bytes = env__kib("FLAMEWATCH_UNWIND_ON_DEMAND_KB", 0, 0);
	co.java_perfmap_interval_ns = r.opts.java_perfmap_ns;
	co.offcpu_min_ns = r.opts.offcpu ? r.opts.offcpu_min_ns : 0;
	co.offcpu_walk_all = true;
	co.aggregate_type = r.opts.offcpu ? SAMPLE_OFFCPU : SAMPLE_CPU;
	co.on_followed_exit = _on_followed_exit;
	co.ctx = &r;
	r.collector = collector__new(&co, _now_ns(CLOCK_REALTIME));
	if (!r.collector) {
		fprintf(stderr, "flamewatch: error: cannot start the BPF sampler: %s\n",
			strerror(errno));
		goto out;
	}
	r.cp = collector__profile(r.collector);
	for (int i = 0; i < r.opts.npids; i++) {
		err = collector__follow(r.collector, r.opts.pids[i]);
		if (err) {
			fprintf(stderr, "flamewatch: error: cannot follow pid %d: %s\n",
				r.opts.pids[i], strerror(-err));
			goto out;
		}
		r.followed_alive++;
	}
	if (r.opts.cmd) {
		err = collector__follow_before_exec(r.collector, r.child);
		if (err) {
			fprintf(stderr, "flamewatch: error: cannot follow pid %d: %s\n",
				r.child, strerror(-err));
			goto out;
		}
		if (_release(&r, gate_fd, report_fd))
			goto out;
		gate_fd = report_fd = -1;
	}

	/* Loading the BPF programs takes seconds: say when sampling has begun. */
	if (!r.opts.quiet && !progress)
		fprintf(stderr, "flamewatch: sampling at %u Hz\n", r.opts.freq_hz);
	start_mono = _now_ns(CLOCK_MONOTONIC);
	next_tick = start_mono + COLLECTOR_TICK_MS * 1000000ULL;
	for (;;) {
		uint64_t now = _now_ns(CLOCK_MONOTONIC);

		if (now < next_tick && !_stop_signal) {
			collector__wait(r.collector, (next_tick - now + 999999) / 1000000);
			continue;
		}
		next_tick += COLLECTOR_TICK_MS * 1000000ULL;
		if (next_tick < now)
			next_tick = now + COLLECTOR_TICK_MS * 1000000ULL;
		collector__tick(r.collector);
		elapsed = (now - start_mono) / 1e9;
		if (progress)
			_progress(&r, elapsed, false);
		if (_should_stop(&r, elapsed))
			break;
	}
	collector__tick(r.collector);
	if (progress)
		_progress(&r, elapsed, true);
	collector__report(r.collector);
	collector__stop(r.collector);

	cpu_profile__profile(r.cp)->duration_ns = (uint64_t)(elapsed * 1e9);
	if (cpu_profile__symbolize(r.cp)) {
		fprintf(stderr, "flamewatch: error: out of memory while symbolizing\n");
		goto out;
	}
	err = r.opts.format == OUT_FOLDED ?
	      folded__write(cpu_profile__profile(r.cp), out.f) :
	      pprof__write_type(cpu_profile__profile(r.cp), r.opts.offcpu, out.f);
	if (err) {
		fprintf(stderr, "flamewatch: error: cannot write %s: %s\n", out.path,
			strerror(-err));
		goto out;
	}
	if (_output_commit(&out))
		goto out;
	out.f = NULL;

	cpu_profile__counts(r.cp, &counts);
	if (!r.opts.quiet)
		fprintf(stderr, "flamewatch: %llu samples in %.1fs written to %s (%s)\n",
			(unsigned long long)counts.samples, elapsed,
			strcmp(out.path, "-") ? out.path : "stdout",
			r.opts.format == OUT_FOLDED ? "folded" : "pprof");
	ret = 0;
out:
	if (gate_fd >= 0)
		close(gate_fd);
	if (report_fd >= 0)
		close(report_fd);
	if (r.child > 0 && !r.child_done && ret) {
		/* We are giving up on the command: don't leave it waiting at the gate. */
		kill(r.child, SIGKILL);
		waitpid(r.child, &r.child_status, 0);
	}
	_output_abort(&out);
	collector__free(r.collector);
	return ret;
}
