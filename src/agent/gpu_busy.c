// SPDX-License-Identifier: Apache-2.0
/*
 * The agent's side of `flamewatch gpu-busy` (gpu_busy.h): start the child,
 * read its lines (src/cmd/gpu_busy.c defines them), merge each device's
 * spans, and hand them to the process alone on that GPU.
 *
 * The child cuts spans at every decode (100 ms), so a GPU busy for an hour
 * would send 36,000 touching spans: they are merged here, and a merged
 * span goes out once it ends or is SPLIT_NS long, which bounds both the
 * rows stored and how late the timeline is.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <dirent.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent/cpu_profile.h"
#include "agent/gpu_busy.h"
#include "common/batch.h"
#include "common/clock.h"
#include "common/log.h"
#include "gpu/dispatch_scale.h"
#include "gpu/nvml.h"
#include "gpu/poller.h"

extern char **environ;

#define MAX_DEVICES 64
#define LINE_MAX_LEN 512
#define SPLIT_NS (2LL * 1000000000LL)
/* Spans wait this long for NVML to name the GPU's process, then are dropped. */
#define OWNER_WAIT_NS (5LL * 1000000000LL)
/* NVML's lists older than this no longer name the GPU's process. */
#define LISTS_FRESH_NS (3LL * 1000000000LL)
#define RESPAWN_S 30
/* Not needed this long, the child stops: a process's records may change mode meanwhile. */
#define PARK_AFTER_NS (30LL * 1000000000LL)
#define DCGM_CHECK_S 30
#define MAX_PENDING 4096
/* A span from the child further than this from now is not believed. */
#define SKEW_MAX_NS (24LL * 3600 * 1000000000LL)

/* A coverage span's dispatches where any of its decodes did not count them. */
#define NOT_COUNTED UINT64_MAX

struct span {
	int64_t start, end;
	uint32_t kind;		/* GPU_BUSY or GPU_COVERAGE */
	uint64_t idle;		/* busy: ns idle inside (sub-sample, and gaps merged) */
	uint64_t dispatches;	/* coverage: kernels dispatched inside, or NOT_COUNTED */
};

struct busy_dev {
	bool known, running;
	char uuid[96];
	char chip[32];
	uint64_t interval_ns;
	char error[160];
	struct span open[2];	/* [0] busy, [1] coverage; end == 0: none */
	int64_t last_end[2];	/* of the last span of each kind that went out */
	struct span *pending;	/* ended, waiting for their process */
	size_t npending, cap;
	/* The child's running counts at its last stats line: a new child starts at 0. */
	uint64_t seen_dispatches, seen_decode_cpu_ns;
};

struct gpu_busy {
	struct event_base *base;
	char *exe;
	char **argv;
	pid_t child;
	int in_fd, out_fd;		/* the child's stdin (ours to write), its stdout */
	struct event *read_ev, *respawn_ev;
	char line[LINE_MAX_LEN];
	size_t len;
	bool overlong;			/* the current line is past LINE_MAX_LEN: skipped */
	bool gave_up;
	bool give_way;			/* to DCGM's host engine (--gpu-busy auto) */
	bool yielding;			/* stopped, or not started, for it */
	bool on_demand;			/* run only while a GPU's sole process needs it */
	bool parked;			/* stopped, or not started: none needs it */
	int64_t unneeded_since;		/* Unix ns; 0: needed now (or never decided) */
	int64_t park_after_ns;
	struct event *dcgm_ev;
	struct busy_dev dev[MAX_DEVICES];
	struct gpu_busy_stats st;
};

static void _push(struct busy_dev *d, const struct span *s, struct gpu_busy_stats *st)
{
	if (d->npending == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		struct span *p;

		if (cap > MAX_PENDING || !(p = realloc(d->pending, cap * sizeof(*p)))) {
			st->unowned_spans++;
			return;
		}
		d->pending = p;
		d->cap = cap;
	}
	d->pending[d->npending++] = *s;
}

/*
 * Adds [start, end) to the open span of its kind: extended when it touches
 * (within one sampling interval), else the open one ends and this opens.
 * idle: the idle time inside [start, end); a gap merged over is idle too.
 * dispatches: of a coverage span, or NOT_COUNTED.
 */
static void _merge(struct busy_dev *d, uint32_t kind, int64_t start, int64_t end, uint64_t idle,
		   uint64_t dispatches, struct gpu_busy_stats *st)
{
	struct span *o = &d->open[kind == GPU_BUSY ? 0 : 1];
	int64_t slack = (int64_t)(d->interval_ns ? d->interval_ns : 100000);

	int64_t *last = &d->last_end[kind == GPU_BUSY ? 0 : 1];

	if (o->end && start <= o->end + slack && end >= o->start) {
		if (start > o->end)
			o->idle += (uint64_t)(start - o->end);
		if (end > o->end)
			o->end = end;
		o->idle += idle;
		if (o->dispatches != NOT_COUNTED)
			o->dispatches = dispatches == NOT_COUNTED ? NOT_COUNTED : o->dispatches + dispatches;
	} else {
		if (o->end) {
			_push(d, o, st);
			*last = o->end;
		}
		/*
		 * The child measures its clock offset at every decode, so spans
		 * of one run meet with a gap of a few hundred ns: closed here,
		 * or the store would hold slivers of unknown time between them.
		 */
		if (*last && start > *last && start <= *last + slack)
			start = *last;
		*o = (struct span){ start, end, kind, idle, dispatches };
	}
	if (o->end - o->start >= SPLIT_NS) {
		_push(d, o, st);
		*last = o->end;
		o->end = 0;
	}
}

/*
 * Coverage up to end: a busy run that did not reach it has ended, since
 * every sample up to end has been seen.
 */
static void _covered(struct busy_dev *d, int64_t start, int64_t end, uint64_t dispatches,
		     struct gpu_busy_stats *st)
{
	struct span *b = &d->open[0];
	int64_t slack = (int64_t)(d->interval_ns ? d->interval_ns : 100000);

	_merge(d, GPU_COVERAGE, start, end, 0, dispatches, st);
	if (b->end && b->end + slack < end) {
		_push(d, b, st);
		d->last_end[0] = b->end;
		b->end = 0;
	}
}

static bool _parse_u64(const char *s, uint64_t *v)
{
	char *end;

	if (!s || *s < '0' || *s > '9')
		return false;
	errno = 0;
	*v = strtoull(s, &end, 10);
	return !errno && *end == '\0';
}

/* The counter of a stats line's "key=value" tokens, added as it grew. */
static void _stats_count(char **tok, size_t n, const char *key, uint64_t *seen, uint64_t *total)
{
	size_t klen = strlen(key);
	uint64_t v;

	for (size_t i = 0; i < n; i++) {
		if (strncmp(tok[i], key, klen) || tok[i][klen] != '=' || !_parse_u64(tok[i] + klen + 1, &v))
			continue;
		/* Smaller than last time: counting from 0 again (a new session). */
		*total += v >= *seen ? v - *seen : v;
		*seen = v;
		return;
	}
}

static void _stats_line(struct busy_dev *d, char **tok, size_t n, struct gpu_busy_stats *st)
{
	_stats_count(tok, n, "dispatches", &d->seen_dispatches, &st->dispatches);
	_stats_count(tok, n, "decode_cpu_ns", &d->seen_decode_cpu_ns, &st->decode_cpu_ns);
}

static struct busy_dev *_device(struct gpu_busy *g, const char *idx)
{
	uint64_t i;

	if (!_parse_u64(idx, &i) || i >= MAX_DEVICES)
		return NULL;
	return &g->dev[i];
}

/* One line of the child's, which is checked as any input: numbers in range. */
static void _line(struct gpu_busy *g, char *line)
{
	char *tok[8] = { 0 }, *save = NULL, *rest = NULL;
	int64_t now = clock__unix_ns();
	struct busy_dev *d;
	uint64_t a, b, idle, disp;
	size_t n = 0;

	g->st.lines++;
	for (char *t = strtok_r(line, " ", &save); t && n < 8; t = strtok_r(NULL, " ", &save)) {
		tok[n++] = t;
		if (!strcmp(tok[0], "error") && n == 4) {
			rest = save;	/* the message: the rest of the line */
			break;
		}
	}
	if (n < 2)
		goto bad;
	if (!strcmp(tok[0], "error")) {
		if (n < 4)
			goto bad;
		d = strcmp(tok[1], "-") ? _device(g, tok[1]) : NULL;
		if (strcmp(tok[1], "-") && !d)
			goto bad;
		if (d) {
			d->running = false;
			snprintf(d->error, sizeof(d->error), "%s failed: %s", tok[2],
				 rest && *rest ? rest : tok[3]);
		}
		pr_info("GPU busy timeline: %s%s: %s failed (%s): %s\n", d ? "device " : "all GPUs",
			d ? tok[1] : "", tok[2], tok[3], rest && *rest ? rest : "");
		return;
	}
	d = _device(g, tok[1]);
	if (!d)
		goto bad;
	if (!strcmp(tok[0], "device")) {
		if (n != 5 || !_parse_u64(tok[4], &a) || !a || a > 1000000000ULL)
			goto bad;
		d->known = d->running = true;
		d->interval_ns = a;
		d->error[0] = '\0';
		snprintf(d->uuid, sizeof(d->uuid), "%s", tok[2]);
		snprintf(d->chip, sizeof(d->chip), "%s", tok[3]);
		pr_info("GPU busy timeline: device %s (%s, %s): the GPU's own monitors every %" PRIu64
			" us\n", tok[1], d->uuid, d->chip, a / 1000);
		return;
	}
	if (!strcmp(tok[0], "stats")) {
		_stats_line(d, tok + 2, n - 2, &g->st);
		return;
	}
	/*
	 * busy lines carry the idle time inside the span, covered lines the
	 * kernels dispatched in it where the chip counts them (more than ten
	 * a µs is not believed).
	 */
	idle = 0;
	disp = NOT_COUNTED;
	if (n < 4 || n > 5 || !_parse_u64(tok[2], &a) ||
	    !_parse_u64(tok[3], &b) || b <= a || a > INT64_MAX || b > INT64_MAX ||
	    (int64_t)a < now - SKEW_MAX_NS || (int64_t)b > now + SKEW_MAX_NS || !d->running)
		goto bad;
	if (!strcmp(tok[0], "busy")) {
		if (n == 5 && (!_parse_u64(tok[4], &idle) || idle > b - a))
			goto bad;
		_merge(d, GPU_BUSY, (int64_t)a, (int64_t)b, idle, NOT_COUNTED, &g->st);
	} else if (!strcmp(tok[0], "covered")) {
		if (n == 5 && (!_parse_u64(tok[4], &disp) || disp > (b - a) / 100))
			goto bad;
		_covered(d, (int64_t)a, (int64_t)b, disp, &g->st);
	} else {
		goto bad;
	}
	return;
bad:
	g->st.bad_lines++;
}

static void _child_gone(struct gpu_busy *g);

static void _on_read(evutil_socket_t fd, short what, void *arg)
{
	struct gpu_busy *g = arg;
	char buf[4096];
	ssize_t r;

	(void)what;
	for (;;) {
		r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			_child_gone(g);
			return;
		}
		for (ssize_t i = 0; i < r; i++) {
			if (buf[i] != '\n') {
				if (g->len < sizeof(g->line) - 1)
					g->line[g->len++] = buf[i];
				else
					g->overlong = true;
				continue;
			}
			g->line[g->len] = '\0';
			if (g->overlong)
				g->st.bad_lines++;
			else if (g->len)
				_line(g, g->line);
			g->len = 0;
			g->overlong = false;
		}
	}
}

static int _spawn(struct gpu_busy *g)
{
	posix_spawn_file_actions_t fa;
	int in[2], out[2], err;

	if (pipe2(in, O_CLOEXEC))
		return -errno;
	if (pipe2(out, O_CLOEXEC)) {
		err = -errno;
		close(in[0]);
		close(in[1]);
		return err;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	err = -posix_spawn(&g->child, g->exe, &fa, NULL, g->argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(in[0]);
	close(out[1]);
	if (err) {
		close(in[1]);
		close(out[0]);
		return err;
	}
	fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
	g->in_fd = in[1];
	g->out_fd = out[0];
	/* A child that died mid-line left part of it: the new one starts afresh. */
	g->len = 0;
	g->overlong = false;
	g->read_ev = event_new(g->base, g->out_fd, EV_READ | EV_PERSIST, _on_read, g);
	if (!g->read_ev || event_add(g->read_ev, NULL))
		return -ENOMEM;
	g->st.starts++;
	for (size_t i = 0; i < MAX_DEVICES; i++)	/* its counts start from 0 */
		g->dev[i].seen_dispatches = g->dev[i].seen_decode_cpu_ns = 0;
	return 0;
}

static void _on_respawn(evutil_socket_t fd, short what, void *arg)
{
	struct gpu_busy *g = arg;
	int err;

	(void)fd;
	(void)what;
	if (g->parked || g->yielding || g->gave_up || g->child > 0)
		return;
	err = _spawn(g);
	if (err)
		pr_warn("GPU busy timeline: cannot start %s gpu-busy again: %s\n", g->exe,
			strerror(-err));
}

/*
 * EOF from the child. Exit status 1 means nothing can be sampled on this
 * node (no CUPTI, no driver, no GPU that supports it): it is not started
 * again. Anything else (a crash) is retried every RESPAWN_S.
 */
static void _child_gone(struct gpu_busy *g)
{
	struct timeval later = { RESPAWN_S, 0 };
	int status = 0;

	if (g->read_ev) {
		event_free(g->read_ev);
		g->read_ev = NULL;
	}
	if (g->out_fd >= 0)
		close(g->out_fd);
	if (g->in_fd >= 0)
		close(g->in_fd);
	g->out_fd = g->in_fd = -1;
	if (g->child > 0 && waitpid(g->child, &status, 0) < 0)
		status = 0;
	g->child = 0;
	g->st.exits++;
	for (size_t i = 0; i < MAX_DEVICES; i++)
		g->dev[i].running = false;
	if (g->gave_up)
		return;		/* gpu_busy__stop() */
	if (g->parked) {
		pr_info("GPU busy timeline: gpu-busy stopped: no GPU's sole process needs the "
			"monitors (its records are all collected, or no process is alone on a GPU)\n");
		return;
	}
	if (g->yielding) {
		pr_info("GPU busy timeline: gpu-busy stopped: the GPUs' monitors are DCGM's while "
			"its host engine runs (--gpu-busy on keeps them)\n");
		return;
	}
	/* 2 is gpu-busy's usage error: the arguments, not the node, are at fault. */
	if (WIFEXITED(status) && WEXITSTATUS(status) == 2) {
		pr_warn("GPU busy timeline: gpu-busy refused its arguments (see its error above; "
			"FLAMEWATCH_GPU_BUSY_ARGS?); busy time comes from CUDA activity records "
			"and NVML only\n");
		g->gave_up = true;
		return;
	}
	if (WIFEXITED(status) && WEXITSTATUS(status) == 1) {
		pr_info("GPU busy timeline: no GPU's monitors can be sampled here; busy time comes "
			"from CUDA activity records and NVML only\n");
		g->gave_up = true;
		return;
	}
	pr_warn("GPU busy timeline: gpu-busy ended (%s %d); starting it again in %d s\n",
		WIFSIGNALED(status) ? "signal" : "status",
		WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), RESPAWN_S);
	if (g->respawn_ev)
		event_add(g->respawn_ev, &later);
}

/*
 * Whether DCGM's host engine runs on this node (the agent sees the host's
 * processes). Its profiling metrics (DCGM_FI_PROF_*) need the same
 * monitors, which serve one client at a time: first come, first served,
 * and the loser fails. A fleet that runs DCGM chose it, so the timeline
 * gives way to it rather than break its metrics.
 */
static bool _dcgm_running(void)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	bool found = false;

	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		char path[64], comm[32] = "";
		FILE *f;

		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%.20s/comm", e->d_name);
		f = fopen(path, "re");
		if (!f)
			continue;
		if (fgets(comm, sizeof(comm), f))
			found = !strcmp(comm, "nv-hostengine\n");
		fclose(f);
	}
	closedir(d);
	return found;
}

static void _on_dcgm_check(evutil_socket_t fd, short what, void *arg)
{
	struct gpu_busy *g = arg;
	bool dcgm = _dcgm_running();
	int err;

	(void)fd;
	(void)what;
	if (dcgm && !g->yielding) {
		g->yielding = true;
		if (g->in_fd >= 0) {
			close(g->in_fd);	/* EOF: the child stops; _child_gone() reaps it */
			g->in_fd = -1;
		}
		if (g->respawn_ev)
			event_del(g->respawn_ev);
	} else if (!dcgm && g->yielding && !g->gave_up && g->child <= 0) {
		g->yielding = false;
		if (g->parked) {
			pr_info("GPU busy timeline: DCGM's host engine is gone: the GPUs' monitors "
				"are taken when a process needs them\n");
			return;
		}
		pr_info("GPU busy timeline: DCGM's host engine is gone: taking the GPUs' monitors\n");
		err = _spawn(g);
		if (err)
			pr_warn("GPU busy timeline: cannot start gpu-busy: %s\n", strerror(-err));
	}
}

struct gpu_busy *gpu_busy__start(struct event_base *base, const char *exe,
				 const char *const *args, bool give_way, bool on_demand)
{
	struct gpu_busy *g = calloc(1, sizeof(*g));
	size_t nargs = 0;
	int err = ENOMEM;

	if (!g)
		goto fail;
	g->base = base;
	g->in_fd = g->out_fd = -1;
	while (args && args[nargs])
		nargs++;
	g->exe = strdup(exe ? exe : "/proc/self/exe");
	g->argv = calloc(nargs + 3, sizeof(*g->argv));
	if (!g->exe || !g->argv)
		goto fail;
	g->argv[0] = "flamewatch";
	g->argv[1] = "gpu-busy";
	for (size_t i = 0; i < nargs; i++)
		if (!(g->argv[2 + i] = strdup(args[i])))
			goto fail;
	g->respawn_ev = evtimer_new(base, _on_respawn, g);
	if (!g->respawn_ev)
		goto fail;
	g->give_way = give_way;
	if (give_way) {
		struct timeval every = { DCGM_CHECK_S, 0 };
		const char *ms = getenv("FLAMEWATCH_GPU_BUSY_DCGM_CHECK_MS");

		/* A testing knob: the tests cannot wait 30 s for each check. */
		if (ms && atoi(ms) >= 100)
			every = (struct timeval){ atoi(ms) / 1000, (atoi(ms) % 1000) * 1000 };

		g->dcgm_ev = event_new(base, -1, EV_PERSIST, _on_dcgm_check, g);
		if (!g->dcgm_ev || event_add(g->dcgm_ev, &every))
			goto fail;
		g->yielding = _dcgm_running();
	}
	if (g->yielding) {
		pr_info("GPU busy timeline: not started: DCGM's host engine runs, and its profiling "
			"metrics need the GPUs' monitors (--gpu-busy on takes them anyway)\n");
		return g;
	}
	g->on_demand = g->parked = on_demand;
	g->park_after_ns = PARK_AFTER_NS;
	/* A testing knob, as for DCGM's checks. */
	if (getenv("FLAMEWATCH_GPU_BUSY_PARK_MS") && atoi(getenv("FLAMEWATCH_GPU_BUSY_PARK_MS")) > 0)
		g->park_after_ns = atoi(getenv("FLAMEWATCH_GPU_BUSY_PARK_MS")) * 1000000LL;
	if (on_demand)
		return g;	/* gpu_busy__steer() starts it */
	err = -_spawn(g);
	if (err)
		goto fail;
	return g;
fail:
	gpu_busy__free(g);
	errno = err;
	return NULL;
}

/* Whether NVML's lists of the GPU still say who is on it. */
static bool _fresh(const struct nvml_occupant *occ, int64_t now)
{
	return occ->lists_ns && now - occ->lists_ns <= LISTS_FRESH_NS;
}

/* The process alone on the GPU named uuid, per NVML's fresh lists; 0: none. */
static unsigned int _owner(const struct nvml_occupant *occ, size_t nocc, const char *uuid,
			   int64_t now)
{
	for (size_t i = 0; i < nocc; i++)
		if (!strcmp(occ[i].uuid, uuid))
			return _fresh(&occ[i], now) ? occ[i].sole_pid : 0;
	return 0;
}

/*
 * The first GPU whose sole process needs the monitors: its records are
 * not all collected (duty-cycled, or no library to collect them), so its
 * busy timeline and its kernels' count must come from the GPU. A shared
 * GPU's spans go to no one: it needs nothing. Returns its pid, or 0.
 */
static unsigned int _needed(const struct nvml_occupant *occ, size_t nocc,
			    bool (*complete)(void *ctx, uint32_t pid), void *ctx, int64_t now,
			    unsigned int *gpu)
{
	for (size_t i = 0; i < nocc; i++) {
		if (!occ[i].sole_pid || !_fresh(&occ[i], now))
			continue;
		if (!complete || !complete(ctx, occ[i].sole_pid)) {
			*gpu = occ[i].index;
			return occ[i].sole_pid;
		}
	}
	return 0;
}

void gpu_busy__steer(struct gpu_busy *g, struct gpu_poller *poller,
		     bool (*complete)(void *ctx, uint32_t pid), void *ctx, int64_t now_ns)
{
	struct nvml_occupant occ[MAX_DEVICES];
	unsigned int pid, gpu = 0;
	int err;

	if (!g || !g->on_demand || g->gave_up)
		return;
	pid = _needed(occ, gpu_poller__occupants(poller, occ, MAX_DEVICES), complete, ctx, now_ns,
		      &gpu);
	if (pid) {
		g->unneeded_since = 0;
		if (!g->parked)
			return;
		g->parked = false;
		if (g->yielding || g->child > 0)
			return;
		pr_info("GPU busy timeline: starting gpu-busy: pid %u, alone on GPU %u, does not "
			"collect every CUDA record\n", pid, gpu);
		err = _spawn(g);
		if (err)
			pr_warn("GPU busy timeline: cannot start gpu-busy: %s\n", strerror(-err));
		return;
	}
	if (g->parked)
		return;
	if (!g->unneeded_since) {
		g->unneeded_since = now_ns;
		return;
	}
	if (now_ns - g->unneeded_since < g->park_after_ns)
		return;
	g->parked = true;
	g->st.parks++;
	if (g->respawn_ev)
		event_del(g->respawn_ev);
	if (g->in_fd >= 0) {
		close(g->in_fd);	/* EOF: the child stops; _child_gone() reaps it */
		g->in_fd = -1;
	}
}

void gpu_busy__drain(struct gpu_busy *g, struct cpu_profile *cp, struct gpu_poller *poller,
		     struct dispatch_scale *scale, int64_t now_ns, bool final)
{
	struct nvml_occupant occ[MAX_DEVICES];
	size_t nocc;

	if (!g)
		return;
	nocc = gpu_poller__occupants(poller, occ, MAX_DEVICES);
	for (size_t i = 0; i < MAX_DEVICES; i++) {
		struct busy_dev *d = &g->dev[i];
		unsigned int pid;
		size_t keep = 0;

		for (int k = 0; final && k < 2; k++) {
			if (d->open[k].end)
				_push(d, &d->open[k], &g->st);
			d->open[k].end = 0;
		}
		pid = d->npending ? _owner(occ, nocc, d->uuid, now_ns) : 0;

		for (size_t k = 0; k < d->npending; k++) {
			const struct span *s = &d->pending[k];
			struct cpu_gpu_activity a = {
				.pid = pid, .kind = s->kind, .device = (uint32_t)i,
				.bytes = d->interval_ns, .start_ns = s->start, .end_ns = s->end,
				.correlation = s->kind == GPU_BUSY ? s->idle : 0,
				.name = s->kind == GPU_BUSY ? GPU_BUSY_NAME_MONITORS :
							      GPU_COVERAGE_NAME_MONITORS,
			};

			if (!pid) {
				/* NVML may not have read the lists yet: wait a while. */
				if (!final && now_ns - s->end < OWNER_WAIT_NS)
					d->pending[keep++] = *s;
				else
					g->st.unowned_spans++;
				continue;
			}
			if (cpu_profile__add_gpu_span(cp, &a))
				g->st.unowned_spans++;
			else if (s->kind == GPU_BUSY)
				g->st.busy_spans++;
			else
				g->st.cover_spans++;
			if (s->kind == GPU_COVERAGE && s->dispatches != NOT_COUNTED)
				dispatch_scale__counted(scale, pid, (uint32_t)i, s->start, s->end,
							s->dispatches, now_ns);
		}
		d->npending = keep;
	}
}

void gpu_busy__stop(struct gpu_busy *g)
{
	struct pollfd pfd;
	int status;

	if (!g)
		return;
	g->gave_up = true;	/* no respawn from here on */
	if (g->respawn_ev)
		event_del(g->respawn_ev);
	if (g->dcgm_ev)
		event_del(g->dcgm_ev);
	if (g->in_fd >= 0) {
		close(g->in_fd);	/* EOF on its stdin: the child stops */
		g->in_fd = -1;
	}
	/* Its last lines, up to 2 s for CUPTI to stop and disable sampling. */
	for (int i = 0; g->out_fd >= 0 && i < 20; i++) {
		pfd = (struct pollfd){ .fd = g->out_fd, .events = POLLIN };
		if (i == 10 && g->child > 0)
			kill(g->child, SIGTERM);
		if (poll(&pfd, 1, 100) > 0)
			_on_read(g->out_fd, EV_READ, g);	/* at EOF: _child_gone() */
	}
	if (g->child > 0) {
		kill(g->child, SIGKILL);
		waitpid(g->child, &status, 0);
		g->child = 0;
	}
}

void gpu_busy__free(struct gpu_busy *g)
{
	if (!g)
		return;
	gpu_busy__stop(g);
	if (g->respawn_ev)
		event_free(g->respawn_ev);
	if (g->dcgm_ev)
		event_free(g->dcgm_ev);
	if (g->read_ev)
		event_free(g->read_ev);
	if (g->out_fd >= 0)
		close(g->out_fd);
	for (size_t i = 0; i < MAX_DEVICES; i++)
		free(g->dev[i].pending);
	for (size_t i = 2; g->argv && g->argv[i]; i++)
		free(g->argv[i]);
	free(g->argv);
	free(g->exe);
	free(g);
}

void gpu_busy__stats(const struct gpu_busy *g, struct gpu_busy_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!g)
		return;
	*out = g->st;
	out->yielding = g->yielding;
	out->parked = g->parked;
	for (size_t i = 0; i < MAX_DEVICES; i++)
		out->devices += g->dev[i].running;
}

size_t gpu_busy__describe(const struct gpu_busy *g, char *buf, size_t len)
{
	size_t n = 0, off = 0;

	if (len)
		buf[0] = '\0';
	for (size_t i = 0; g && i < MAX_DEVICES; i++) {
		const struct busy_dev *d = &g->dev[i];
		int w;

		if (!d->known && !d->error[0])
			continue;
		if (d->running)
			w = snprintf(buf + off, len - off, "%sdevice %zu %s: GPU monitors every %" PRIu64
				     " us", n ? "; " : "", i, d->uuid, d->interval_ns / 1000);
		else
			w = snprintf(buf + off, len - off, "%sdevice %zu: %s", n ? "; " : "", i,
				     d->error[0] ? d->error : "stopped");
		if (w < 0 || (size_t)w >= len - off)
			break;
		off += (size_t)w;
		n++;
	}
	return n;
}
