// SPDX-License-Identifier: Apache-2.0
/*
 * Ingest benchmark over HTTP: a fleet of simulated agents sends wire batches
 * to a real `flamewatch server` on loopback, then the query API is timed.
 * Where bench/store_bench.c calls the store directly, this one pays for
 * everything an agent batch costs the server: HTTP, zstd, protobuf, the
 * session dictionary, the store, and the fsync of every batch.
 *
 * Measures samples ingested, wall time, the server process's CPU time
 * (utime + stime from /proc/PID/stat), bytes on the wire and on disk per
 * sample, and query latencies. See bench/INGEST.md.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "agent/shipper.h"
#include "common/tls.h"
#include "format/wire.h"

#define SEC		1000000000LL
#define MAX_PROCS	64
#define MAX_STACKS	16384
#define MAX_DEPTH	64
#define NSERVICES	16	/* service kinds in the fleet; a node runs PROCS of them */
#define SVC_FUNCS	700	/* functions of a service's own code */
#define LIB_FUNCS	500	/* shared-library functions (libc, libstdc++, ...) */
#define KERN_FUNCS	120
#define NLIBS		14
#define ADDR_VARIANTS	4	/* call sites per function: distinct return addresses */

static struct {
	const char *url, *server, *data, *tmp, *cpu_list, *store;
	const char *tls_cert, *tls_key, *tls_ca;	/* HTTPS: the server's files, the client's CA */
	const char *session_memory;			/* the server's --max-session-memory */
	double hours, busy, dict_mib;
	int nodes, cpus, hz, procs, stacks, batch_s, conns, rate_div, reps;
	int depth_min, depth_max, jitter_us;
	double pid_life_min, deploy_min;	/* churn: 0 = none */
	pid_t pid;
	bool keep, pregen, fresh_dict;
} opt = {
	.server = "build/flamewatch", .tmp = "/var/tmp", .hours = 1, .busy = 1.0,
	.nodes = 20, .cpus = 8, .hz = 19, .procs = 10, .stacks = 3125, .batch_s = 10,
	.conns = 2, .rate_div = 1, .reps = 3, .depth_min = 20, .depth_max = 60, .jitter_us = 50,
	.pid_life_min = 30, .deploy_min = 240,
	.dict_mib = SHIPPER_DICT_MAX_BYTES / 1048576.0,
};

/* ---- helpers ---------------------------------------------------------------- */

static double _now(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline uint64_t _mix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static inline uint64_t _h3(uint64_t a, uint64_t b, uint64_t c)
{
	return _mix(a * 0x100000001b3ULL ^ _mix(b * 31 + _mix(c)));
}

static inline uint64_t _rand(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

static inline double _u01(uint64_t *s)
{
	return (double)(_rand(s) >> 11) / 9007199254740992.0;
}

/* Zipf: a cumulative table over [0, n) with p(k) ~ 1/(k+1)^s. */
struct zipf {
	double *cdf;
	uint32_t n;
};

static int _zipf_init(struct zipf *z, uint32_t n, double s)
{
	double sum = 0;

	z->n = n;
	z->cdf = malloc(n * sizeof(double));
	if (!z->cdf)
		return -ENOMEM;
	for (uint32_t k = 0; k < n; k++)
		z->cdf[k] = (sum += 1.0 / pow(k + 1.0, s));
	for (uint32_t k = 0; k < n; k++)
		z->cdf[k] /= sum;
	return 0;
}

static uint32_t _zipf(const struct zipf *z, uint64_t *rng)
{
	double u = _u01(rng);
	uint32_t lo = 0, hi = z->n - 1;

	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;

		if (z->cdf[mid] < u)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* ---- the simulated fleet's code ---------------------------------------------- */

/*
 * One global table of frames: (kind, mapping, address) with a demangled
 * C++-like name of 60-100 characters. A service's stacks form a tree: the
 * first frames are shared by all its stacks, deeper frames by fewer, and
 * the leaves are library or kernel code shared by every service.
 */
struct gframe {
	uint32_t kind, mapping, line;
	uint64_t addr;
	char *name, *file;
};

struct gmapping {
	char path[96], build_id[48];
};

static struct {
	struct gframe *frames;
	uint32_t nframes;
	struct gmapping maps[NSERVICES + NLIBS];
	uint32_t nmaps;
	/* [service * opt.stacks + stack]: global frame ids, root first */
	uint32_t (*stack_frames)[MAX_DEPTH];
	uint8_t *stack_depth;
	struct zipf zproc, zstack;
	uint64_t bytes_of_names;
} fleet;

static const char *const _ns1[] = {
	"flamewatch", "storage", "rpc", "net", "absl", "folly", "grpc", "tensorflow",
	"torch", "cache", "search", "ads", "billing", "media", "ml", "infra",
};
static const char *const _ns2[] = {
	"detail", "internal", "impl", "v2", "core", "io", "exec", "util",
};
static const char *const _cls[] = {
	"ConnectionPool", "RequestHandler", "BlockCompressor", "ShardRouter", "ThreadPoolExecutor",
	"HashTable", "QueryPlanner", "ColumnReader", "SessionManager", "RateLimiter",
	"FutureCallback", "MessageDecoder", "TensorIterator", "KernelLauncher", "IndexBuilder",
	"BufferedWriter", "LRUCache", "RetryPolicy", "TimerWheel", "EventLoop",
};
static const char *const _targ[] = {
	"std::basic_string<char, std::char_traits<char>, std::allocator<char> >",
	"std::unique_ptr<Request, std::default_delete<Request> >",
	"std::vector<int, std::allocator<int> >", "unsigned long", "Slice",
	"std::shared_ptr<Buffer>", "float", "Options",
};
static const char *const _meth[] = {
	"run", "process", "dispatch", "encode", "decode", "lookup", "insert", "flush",
	"operator()", "handle", "schedule", "poll", "compute", "merge", "visit", "~Impl",
};
static const char *const _args[] = {
	"int", "const Slice&", "std::string_view", "unsigned long", "void*", "Context*",
	"const Options&", "bool", "std::chrono::nanoseconds", "Status*",
};
static const char *const _libs[NLIBS] = {
	"libc.so.6", "libstdc++.so.6", "libm.so.6", "libssl.so.3", "libcrypto.so.3",
	"libprotobuf.so.32", "libzstd.so.1", "libz.so.1", "libtcmalloc.so.4",
	"libgrpc++.so.1.51", "libtorch_cpu.so", "libcudart.so.12", "libpthread.so.0",
	"libabsl_hash.so",
};
static const char *const _kern[] = {
	"entry_SYSCALL_64_after_hwframe", "do_syscall_64", "__x64_sys_write", "ksys_write",
	"vfs_write", "tcp_sendmsg", "tcp_sendmsg_locked", "__tcp_push_pending_frames",
	"tcp_write_xmit", "__ip_queue_xmit", "__x64_sys_futex", "do_futex", "futex_wait",
	"schedule", "__schedule", "asm_exc_page_fault", "exc_page_fault", "handle_mm_fault",
	"__handle_mm_fault", "copy_user_enhanced_fast_string", "__x64_sys_epoll_wait",
	"do_epoll_wait", "ep_poll", "schedule_hrtimeout_range",
};

static char *_fmt_name(uint64_t h, uint32_t kind, bool lib, uint32_t svc)
{
	char buf[256];
	size_t len;
	uint32_t want = 60 + (uint32_t)(h % 41);
	int n;

	if (kind == FRAME_KERNEL)
		return strdup(_kern[h % (sizeof(_kern) / sizeof(_kern[0]))]);
	n = snprintf(buf, sizeof(buf), "%s::%s::%s%u<%s>::%s(",
		     lib ? "std" : _ns1[svc % 16], _ns2[(h >> 8) % 8],
		     _cls[(h >> 12) % 20], (unsigned)((h >> 20) % 100), _targ[(h >> 28) % 8],
		     _meth[(h >> 32) % 16]);
	len = (size_t)n;
	/* Grow with arguments to the length wanted, then clip to 100. */
	for (int a = 0; len + 2 < want && len < 200; a++) {
		n = snprintf(buf + len, sizeof(buf) - len, "%s%s", a ? ", " : "",
			     _args[(h >> (36 + a % 7 * 4)) % 10]);
		len += (size_t)n;
	}
	if (len + 1 > 100)
		len = 99;
	buf[len++] = ')';
	buf[len] = '\0';
	return strdup(buf);
}

/* Function f of a pool: frame base id (ADDR_VARIANTS frames per function). */
enum pool { POOL_SVC, POOL_LIB, POOL_KERN };

static uint32_t _pool_base(enum pool p, uint32_t svc)
{
	switch (p) {
	case POOL_SVC:
		return svc * SVC_FUNCS * ADDR_VARIANTS;
	case POOL_LIB:
		return NSERVICES * SVC_FUNCS * ADDR_VARIANTS;
	default:
		return (NSERVICES * SVC_FUNCS + LIB_FUNCS) * ADDR_VARIANTS;
	}
}

static int _fleet_init(void)
{
	uint32_t nf = (NSERVICES * SVC_FUNCS + LIB_FUNCS + KERN_FUNCS) * ADDR_VARIANTS;

	fleet.frames = calloc(nf, sizeof(*fleet.frames));
	fleet.stack_frames = calloc((size_t)NSERVICES * opt.stacks, sizeof(*fleet.stack_frames));
	fleet.stack_depth = calloc((size_t)NSERVICES * opt.stacks, sizeof(*fleet.stack_depth));
	if (!fleet.frames || !fleet.stack_frames || !fleet.stack_depth)
		return -ENOMEM;
	fleet.nframes = nf;
	for (uint32_t i = 0; i < NSERVICES; i++) {
		snprintf(fleet.maps[i].path, sizeof(fleet.maps[i].path), "/usr/bin/%s-server",
			 _ns1[i]);
		snprintf(fleet.maps[i].build_id, sizeof(fleet.maps[i].build_id), "%016llx%016llx%08x",
			 (unsigned long long)_mix(i), (unsigned long long)_mix(i + 100),
			 (unsigned)_mix(i + 200));
	}
	for (uint32_t i = 0; i < NLIBS; i++) {
		struct gmapping *m = &fleet.maps[NSERVICES + i];

		snprintf(m->path, sizeof(m->path), "/usr/lib/x86_64-linux-gnu/%s", _libs[i]);
		snprintf(m->build_id, sizeof(m->build_id), "%016llx%016llx%08x",
			 (unsigned long long)_mix(i + 300), (unsigned long long)_mix(i + 400),
			 (unsigned)_mix(i + 500));
	}
	fleet.nmaps = NSERVICES + NLIBS;
	for (uint32_t f = 0; f < nf; f++) {
		uint32_t fn = f / ADDR_VARIANTS, var = f % ADDR_VARIANTS;
		struct gframe *g = &fleet.frames[f];
		uint64_t h = _mix(fn * 7 + 1);
		uint32_t svc = 0, kind;
		char file[128];

		if (fn < NSERVICES * SVC_FUNCS) {
			svc = fn / SVC_FUNCS;
			kind = FRAME_NATIVE;
			g->mapping = svc;
		} else if (fn < NSERVICES * SVC_FUNCS + LIB_FUNCS) {
			kind = FRAME_NATIVE;
			g->mapping = NSERVICES + (uint32_t)(h % NLIBS);
		} else {
			kind = FRAME_KERNEL;
			g->mapping = PROFILE_NO_MAPPING;
		}
		g->kind = kind;
		g->addr = kind == FRAME_KERNEL ? 0xffffffff81000000ULL + fn * 0x400 + var * 0x10 :
			  0x401000 + (uint64_t)(fn % SVC_FUNCS) * 0x300 + var * 0x18 + (h >> 50) % 0x100;
		if (var == 0) {
			g->name = _fmt_name(h, kind, kind == FRAME_NATIVE && g->mapping >= NSERVICES,
					    svc);
			if (kind == FRAME_NATIVE) {
				snprintf(file, sizeof(file), "src/%s/%s/%s.cc", _ns1[svc % 16],
					 _ns2[(h >> 8) % 8], _cls[(h >> 12) % 20]);
				g->file = strdup(file);
			} else {
				g->file = strdup("");
			}
			g->line = kind == FRAME_NATIVE ? 20 + (uint32_t)(h % 2000) : 0;
			if (!g->name || !g->file)
				return -ENOMEM;
			fleet.bytes_of_names += strlen(g->name);
		} else {
			g->name = fleet.frames[f - var].name;
			g->file = fleet.frames[f - var].file;
			g->line = fleet.frames[f - var].line + var;
		}
	}
	/*
	 * Stack s of service v: --depth frames (15-40). Frame j depends on (v, group of
	 * s at depth j, j), the groups getting finer with depth, so stacks
	 * share prefixes as real call trees do. The last 1-4 frames are
	 * library code; one stack in four ends in 3-6 kernel frames.
	 */
	for (uint32_t v = 0; v < NSERVICES; v++) {
		for (uint32_t s = 0; s < (uint32_t)opt.stacks; s++) {
			uint64_t hs = _h3(v, s, 99);
			uint32_t d = (uint32_t)opt.depth_min +
				     (uint32_t)(hs % (uint32_t)(opt.depth_max - opt.depth_min + 1));
			uint32_t nk = (s % 4 == 0) ? 3 + (uint32_t)((hs >> 8) % 4) : 0;
			uint32_t nl = 1 + (uint32_t)((hs >> 12) % 4);
			uint32_t prev = 0;

			for (uint32_t j = 0; j < d; j++) {
				uint32_t group = j < 4 ? 0 : j < 9 ? s / 25 + 1 : j < 15 ? s / 5 + 100 :
						 s + 1000;
				uint64_t h = _h3(v, group, j);
				uint32_t fn, base;

				if (j >= d - nk) {
					base = _pool_base(POOL_KERN, v);
					fn = (uint32_t)(h % KERN_FUNCS);
				} else if (j >= d - nk - nl) {
					base = _pool_base(POOL_LIB, v);
					fn = (uint32_t)(h % LIB_FUNCS);
				} else {
					base = _pool_base(POOL_SVC, v);
					fn = j == 0 ? 0 : j == 2 ? 1 : 2 + (uint32_t)(h % (SVC_FUNCS - 2));
				}
				/* The return address depends on the caller. */
				prev = base + fn * ADDR_VARIANTS + (uint32_t)(_mix(prev) % ADDR_VARIANTS);
				fleet.stack_frames[v * opt.stacks + s][j] = prev;
			}
			fleet.stack_depth[v * opt.stacks + s] = (uint8_t)d;
		}
	}
	if (_zipf_init(&fleet.zproc, (uint32_t)opt.procs, 1.0) ||
	    _zipf_init(&fleet.zstack, (uint32_t)opt.stacks, 1.1))
		return -ENOMEM;
	return 0;
}

/* ---- one simulated agent --------------------------------------------------- */

struct agent {
	uint32_t node;
	uint64_t sent, sent_last_hour;	/* samples accepted */
	char name[32];
	struct wire_encoder *enc;
	uint64_t rng;
	uint32_t svc[MAX_PROCS];
	uint32_t pid[MAX_PROCS];	/* the process's pid in the batch being built */
	uint32_t ver[NSERVICES];	/* the version of each service's code it runs */
	/*
	 * Local ids in dict, -1 when not yet interned. The dictionary lives as
	 * long as the agent (unless --fresh-dict): the encoder sends only what
	 * a batch's samples refer to, so the server sees the same thing, and
	 * building batches costs the client much less.
	 */
	struct profile *dict;
	int32_t *lframe;	/* by global frame */
	int32_t lmap[NSERVICES + NLIBS];
	int32_t *lstack;	/* [proc * opt.stacks + stack] */
	int32_t lseries[MAX_PROCS];
};

/*
 * A service's executable changes with each version (a deploy): a new build
 * id, so every frame in it and every stack through it is new to the store.
 * Libraries keep theirs.
 */
static void _build_id(uint32_t mapping, const struct agent *a, char *out, size_t size)
{
	uint32_t ver = mapping < NSERVICES ? a->ver[mapping] : 0;

	if (mapping >= NSERVICES) {
		snprintf(out, size, "%s", fleet.maps[mapping].build_id);
		return;
	}
	snprintf(out, size, "%016llx%016llx%08x",
		 (unsigned long long)_mix(mapping * 1000003ULL + ver),
		 (unsigned long long)_mix(mapping + 100 + ver * 7919ULL),
		 (unsigned)_mix(mapping + 200 + ver * 104729ULL));
}

/*
 * Churn at simulated time t, as a fleet has it: each process restarts every
 * --pid-life-min minutes with a new pid (a new series), each service is
 * deployed every --deploy-min minutes (new frames and stacks). Both are
 * staggered, by process and by service, so churn is spread over the run,
 * and every node runs the same version of a service at the same time
 * (both follow the simulated clock, not the run's start).
 */
static void _churn(struct agent *a, int64_t t)
{
	for (int p = 0; p < opt.procs; p++) {
		uint64_t gen = 0;

		if (opt.pid_life_min > 0) {
			int64_t life = (int64_t)(opt.pid_life_min * 60 * SEC);
			int64_t phase = (int64_t)(_mix((uint64_t)a->node * 64 + (uint64_t)p) %
						  (uint64_t)life);

			gen = (uint64_t)((t + phase) / life);
		}
		a->pid[p] = 1000 + (uint32_t)(_mix((uint64_t)a->node * 64 + (uint64_t)p +
						   gen * 0x10000) % 3000000);
	}
	for (uint32_t v = 0; v < NSERVICES; v++) {
		uint32_t ver = 0, base = _pool_base(POOL_SVC, v);

		if (opt.deploy_min > 0) {
			int64_t period = (int64_t)(opt.deploy_min * 60 * SEC);

			ver = (uint32_t)((t + period * v / NSERVICES) / period);
		}
		if (ver == a->ver[v])
			continue;
		a->ver[v] = ver;
		a->lmap[v] = -1;
		for (uint32_t f = 0; f < SVC_FUNCS * ADDR_VARIANTS; f++)
			a->lframe[base + f] = -1;
		for (int p = 0; p < opt.procs; p++)
			if (a->svc[p] == v)
				memset(&a->lstack[p * opt.stacks], 0xff,
				       (size_t)opt.stacks * sizeof(*a->lstack));
	}
}

static int64_t _intern_stack(struct agent *a, struct batch *b, uint32_t p)
{
	uint32_t s = _zipf(&fleet.zstack, &a->rng), v = a->svc[p];
	const uint32_t *frames = fleet.stack_frames[v * opt.stacks + s];
	uint32_t ids[MAX_DEPTH], d = fleet.stack_depth[v * opt.stacks + s];
	int32_t *lstack = &a->lstack[p * opt.stacks + s];

	if (*lstack >= 0)
		return *lstack;
	for (uint32_t j = 0; j < d; j++) {
		uint32_t gf = frames[j];
		const struct gframe *g = &fleet.frames[gf];
		int64_t id, m = PROFILE_NO_MAPPING;

		if (a->lframe[gf] < 0) {
			if (g->mapping != PROFILE_NO_MAPPING) {
				if (a->lmap[g->mapping] < 0) {
					char bid[48];

					_build_id(g->mapping, a, bid, sizeof(bid));
					a->lmap[g->mapping] = (int32_t)profile__intern_mapping(
						b->dict, fleet.maps[g->mapping].path, bid);
				}
				m = a->lmap[g->mapping];
				if (m < 0)
					return m;
			}
			id = profile__intern_frame(b->dict, g->kind, (uint32_t)m, g->addr);
			if (id < 0 || profile__set_frame_name(b->dict, (uint32_t)id, g->name,
							      g->file[0] ? g->file : NULL, g->line))
				return -ENOMEM;
			a->lframe[gf] = (int32_t)id;
		}
		ids[j] = (uint32_t)a->lframe[gf];
	}
	return *lstack = (int32_t)profile__intern_stack(b->dict, ids, d);
}

static int64_t _intern_series(struct agent *a, struct batch *b, uint32_t p)
{
	const char *names[] = { "pid", "comm", "exe", "container", "pod" };
	char pid[16], comm[32], exe[96], container[32], pod[64];
	const char *values[] = { pid, comm, exe, container, pod };
	uint32_t v = a->svc[p];

	snprintf(pid, sizeof(pid), "%u", a->pid[p]);
	snprintf(comm, sizeof(comm), "%.10s-server", _ns1[v]);
	snprintf(exe, sizeof(exe), "%s", fleet.maps[v].path);
	snprintf(container, sizeof(container), "%.12s", _ns1[v]);
	snprintf(pod, sizeof(pod), "%s-%08x-%05x", _ns1[v], (unsigned)(_mix(a->node) & 0xffffffff),
		 (unsigned)(_mix(a->node * 100 + p) & 0xfffff));
	return batch__intern_series(b, names, values, 5);
}

/* Frees a batch but not the agent's dictionary it borrows. */
static void _batch_free(struct batch *b)
{
	if (b && !opt.fresh_dict)
		b->dict = NULL;
	batch__free(b);
}

/*
 * The batch of [t, t + batch_s): every CPU ticks at hz with a per-CPU phase
 * and some jitter, and is busy with probability busy; the process and the
 * stack are drawn Zipf-like. rate_div > 1 keeps one tick in rate_div.
 */
static struct batch *_make_batch(struct agent *a, int64_t t)
{
	int64_t period = SEC / opt.hz, len = (int64_t)opt.batch_s * SEC;
	int64_t jitter = (int64_t)opt.jitter_us * 1000 + 1;
	int64_t nticks = (int64_t)opt.batch_s * opt.hz, first = t / len * nticks;
	struct batch *b = batch__new((uint64_t)period);

	if (!b)
		return NULL;
	if (opt.fresh_dict || !a->dict) {
		memset(a->lframe, 0xff, fleet.nframes * sizeof(*a->lframe));
		memset(a->lmap, 0xff, sizeof(a->lmap));
		memset(a->lstack, 0xff, (size_t)opt.procs * opt.stacks * sizeof(*a->lstack));
	}
	_churn(a, t);
	if (!opt.fresh_dict) {
		if (!a->dict)
			a->dict = b->dict;
		else
			profile__free(b->dict);
		b->dict = a->dict;
	}
	memset(a->lseries, 0xff, sizeof(a->lseries));
	for (int64_t tick = 0; tick < nticks; tick++) {
		if (opt.rate_div > 1 && (first + tick) % opt.rate_div)
			continue;
		for (int cpu = 0; cpu < opt.cpus; cpu++) {
			int64_t ts = t + tick * len / nticks +
				     (int64_t)(a->node * 7919 + cpu * 104729) % (period - jitter) +
				     (int64_t)(_rand(&a->rng) % (uint64_t)jitter);
			struct batch_sample bs;
			uint32_t p;
			int64_t stack;

			if (opt.busy < 1 && _u01(&a->rng) >= opt.busy)
				continue;
			p = _zipf(&fleet.zproc, &a->rng);
			if (a->lseries[p] < 0)
				a->lseries[p] = (int32_t)_intern_series(a, b, p);
			stack = _intern_stack(a, b, p);
			if (a->lseries[p] < 0 || stack < 0)
				goto err;
			bs = (struct batch_sample){
				.ts_ns = ts, .stack = (uint32_t)stack, .series = (uint32_t)a->lseries[p],
				.tid = a->pid[p] + (uint32_t)(_rand(&a->rng) % 6),
				.cpu = (uint32_t)cpu, .type = SAMPLE_CPU, .value = 1,
			};
			if (batch__add_sample(b, &bs))
				goto err;
		}
	}
	return b;
err:
	_batch_free(b);
	return NULL;
}

/* ---- a plain blocking HTTP/1.1 client, over TLS with --tls-ca ----------------- */

/* The client side of --tls-ca: common/tls.c's context, as the agent's. */
static SSL_CTX *client_tls;

struct conn {
	int fd;
	SSL *ssl;
	char host[128];
	uint16_t port;
	char *rbuf;
	size_t rlen, rpos, rcap;
};

struct reply {
	int status;
	char *body;
	size_t len, cap;
};

static int _conn_open(struct conn *c)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(c->port) };
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	int one = 1;

	if (getaddrinfo(c->host, NULL, &hints, &ai))
		return -EHOSTUNREACH;
	sa.sin_addr = ((struct sockaddr_in *)ai->ai_addr)->sin_addr;
	freeaddrinfo(ai);
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0)
		return -errno;
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int err = -errno;

		close(c->fd);
		c->fd = -1;
		return err;
	}
	c->rlen = c->rpos = 0;
	if (client_tls) {
		char err[512];

		c->ssl = tls__client_ssl(client_tls, c->host[0] ? c->host : "127.0.0.1", err,
					 sizeof(err));
		if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1 || SSL_connect(c->ssl) != 1) {
			tls__explain(c->ssl, opt.tls_ca, tls__first_error(), "handshake failed", err,
				     sizeof(err));
			fprintf(stderr, "ingest_bench: TLS: %s\n", err);
			SSL_free(c->ssl);
			c->ssl = NULL;
			close(c->fd);
			c->fd = -1;
			return -EPROTO;
		}
	}
	return 0;
}

static void _conn_close(struct conn *c)
{
	SSL_free(c->ssl);
	c->ssl = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->rlen = c->rpos = 0;
}

static int _fill(struct conn *c)
{
	ssize_t n;

	if (c->rpos == c->rlen)
		c->rpos = c->rlen = 0;
	if (c->rlen == c->rcap) {
		if (c->rpos) {
			memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
			c->rlen -= c->rpos;
			c->rpos = 0;
		} else {
			char *nb = realloc(c->rbuf, c->rcap ? c->rcap * 2 : 65536);

			if (!nb)
				return -ENOMEM;
			c->rbuf = nb;
			c->rcap = c->rcap ? c->rcap * 2 : 65536;
		}
	}
	if (c->ssl) {
		size_t got = 0;

		/* A close without close_notify is an end like any other here. */
		n = SSL_read_ex(c->ssl, c->rbuf + c->rlen, c->rcap - c->rlen, &got) == 1 ?
		    (ssize_t)got : 0;
	} else {
		do
			n = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
		while (n < 0 && errno == EINTR);
	}
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	c->rlen += (size_t)n;
	return 0;
}

/* One line without its CRLF, NUL-terminated in place. */
static int _line(struct conn *c, char **line)
{
	for (;;) {
		char *p = memchr(c->rbuf + c->rpos, '\n', c->rlen - c->rpos);
		int err;

		if (p) {
			*line = c->rbuf + c->rpos;
			c->rpos = (size_t)(p - c->rbuf) + 1;
			*p = '\0';
			if (p > *line && p[-1] == '\r')
				p[-1] = '\0';
			return 0;
		}
		if ((err = _fill(c)))
			return err;
	}
}

static int _body_add(struct reply *r, const char *p, size_t n)
{
	if (r->len + n + 1 > r->cap) {
		size_t cap = r->cap ? r->cap : 4096;
		char *nb;

		while (cap < r->len + n + 1)
			cap *= 2;
		nb = realloc(r->body, cap);
		if (!nb)
			return -ENOMEM;
		r->body = nb;
		r->cap = cap;
	}
	memcpy(r->body + r->len, p, n);
	r->len += n;
	r->body[r->len] = '\0';
	return 0;
}

static int _read_n(struct conn *c, struct reply *r, size_t n)
{
	while (n) {
		size_t have = c->rlen - c->rpos;
		int err;

		if (!have) {
			if ((err = _fill(c)))
				return err;
			continue;
		}
		if (have > n)
			have = n;
		if ((err = _body_add(r, c->rbuf + c->rpos, have)))
			return err;
		c->rpos += have;
		n -= have;
	}
	return 0;
}

static int _write_all(int fd, SSL *ssl, struct iovec *iov, int n)
{
	/* One TLS record stream: each part in turn, as evbuffer chains go out. */
	for (; ssl && n; iov++, n--) {
		size_t done = 0;

		if (iov->iov_len && SSL_write_ex(ssl, iov->iov_base, iov->iov_len, &done) != 1)
			return -EPIPE;
	}
	while (n) {
		ssize_t w = writev(fd, iov, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		while (n && (size_t)w >= iov->iov_len) {
			w -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n) {
			iov->iov_base = (char *)iov->iov_base + w;
			iov->iov_len -= (size_t)w;
		}
	}
	return 0;
}

static int _request_once(struct conn *c, const char *method, const char *path, const char *extra,
			 const void *body, size_t len, struct reply *r, size_t *wire_bytes)
{
	char head[2048], *line;
	struct iovec iov[2];
	long long clen = -1;
	bool chunked = false, close_after = false;
	int n, err;

	n = snprintf(head, sizeof(head), "%s %s HTTP/1.1\r\nHost: %s:%u\r\n%sContent-Length: %zu\r\n\r\n",
		     method, path, c->host, c->port, extra ? extra : "", len);
	if (n < 0 || (size_t)n >= sizeof(head))
		return -E2BIG;
	if (c->fd < 0 && (err = _conn_open(c)))
		return err;
	iov[0] = (struct iovec){ head, (size_t)n };
	iov[1] = (struct iovec){ (void *)body, len };
	if ((err = _write_all(c->fd, c->ssl, iov, len ? 2 : 1)))
		return err;
	if (wire_bytes)
		*wire_bytes = (size_t)n + len;
	r->len = 0;
	if ((err = _line(c, &line)))
		return err;
	if (sscanf(line, "HTTP/1.%*d %d", &r->status) != 1)
		return -EPROTO;
	for (;;) {
		if ((err = _line(c, &line)))
			return err;
		if (!line[0])
			break;
		if (!strncasecmp(line, "Content-Length:", 15))
			clen = atoll(line + 15);
		else if (!strncasecmp(line, "Transfer-Encoding:", 18) && strcasestr(line, "chunked"))
			chunked = true;
		else if (!strncasecmp(line, "Connection:", 11) && strcasestr(line, "close"))
			close_after = true;
	}
	if (chunked) {
		for (;;) {
			unsigned long sz;

			if ((err = _line(c, &line)))
				return err;
			sz = strtoul(line, NULL, 16);
			if (sz == 0) {
				do {
					if ((err = _line(c, &line)))
						return err;
				} while (line[0]);
				break;
			}
			if ((err = _read_n(c, r, sz)) || (err = _line(c, &line)))
				return err;
		}
	} else if (clen >= 0) {
		if ((err = _read_n(c, r, (size_t)clen)))
			return err;
	} else {
		while ((err = _fill(c)) == 0) {
			_body_add(r, c->rbuf + c->rpos, c->rlen - c->rpos);
			c->rpos = c->rlen;
		}
		close_after = true;
	}
	if (!r->body && _body_add(r, "", 0))
		return -ENOMEM;
	if (close_after)
		_conn_close(c);
	return 0;
}

/* A request, reconnecting once when a kept-alive connection was closed under us. */
static int _request(struct conn *c, const char *method, const char *path, const char *extra,
		    const void *body, size_t len, struct reply *r, size_t *wire_bytes)
{
	bool fresh = c->fd < 0;
	int err = _request_once(c, method, path, extra, body, len, r, wire_bytes);

	if (err && !fresh && (err == -ECONNRESET || err == -EPIPE)) {
		_conn_close(c);
		err = _request_once(c, method, path, extra, body, len, r, wire_bytes);
	}
	if (err)
		_conn_close(c);
	return err;
}

/* ---- the server process -------------------------------------------------- */

static struct {
	char host[128];
	uint16_t port;
	pid_t pid;
	bool spawned;
	char tmpdir[512], datadir[600], log[600];
} srv;

static int _parse_url(const char *url)
{
	const char *p = url, *colon, *slash;

	if (!strncmp(p, "http://", 7))
		p += 7;
	colon = strrchr(p, ':');
	slash = strchr(p, '/');
	if (!colon || (slash && slash < colon) || (size_t)(colon - p) >= sizeof(srv.host))
		return -EINVAL;
	memcpy(srv.host, p, (size_t)(colon - p));
	srv.host[colon - p] = '\0';
	srv.port = (uint16_t)atoi(colon + 1);
	return srv.port ? 0 : -EINVAL;
}

static int _free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

static int _spawn_server(void)
{
	char listen[64];
	int port = _free_port();
	pid_t pid;

	snprintf(srv.tmpdir, sizeof(srv.tmpdir), "%s/fw-ingest-bench-XXXXXX", opt.tmp);
	if (port < 0 || !mkdtemp(srv.tmpdir)) {
		perror("ingest_bench: temp dir or port");
		return -1;
	}
	snprintf(srv.datadir, sizeof(srv.datadir), "%s/data", srv.tmpdir);
	snprintf(srv.log, sizeof(srv.log), "%s/server.log", srv.tmpdir);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(srv.host, sizeof(srv.host), "127.0.0.1");
	srv.port = (uint16_t)port;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		int fd = open(srv.log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
		/* --store URI (ClickHouse) instead of the data directory. */
		const char *where = opt.store ? "--store" : "--data";
		const char *what = opt.store ? opt.store : srv.datadir;

		const char *argv[20];
		int n = 0;

		/* taskset-like pinning without a dependency: exec through taskset. */
		if (opt.cpu_list) {
			argv[n++] = "taskset";
			argv[n++] = "-c";
			argv[n++] = opt.cpu_list;
		}
		argv[n++] = opt.server;
		argv[n++] = "server";
		argv[n++] = "--listen";
		argv[n++] = listen;
		argv[n++] = where;
		argv[n++] = what;
		if (opt.tls_cert) {
			argv[n++] = "--tls-cert";
			argv[n++] = opt.tls_cert;
			argv[n++] = "--tls-key";
			argv[n++] = opt.tls_key;
		}
		if (opt.session_memory) {
			argv[n++] = "--max-session-memory";
			argv[n++] = opt.session_memory;
		}
		argv[n] = NULL;
		execvp(argv[0], (char *const *)argv);
		_exit(127);
	}
	srv.pid = pid;
	srv.spawned = true;
	/* Ready when /healthz answers. */
	for (int i = 0; i < 200; i++) {
		struct conn c = { .fd = -1, .port = srv.port };
		struct reply r = { 0 };
		int status;

		snprintf(c.host, sizeof(c.host), "%s", srv.host);
		if (waitpid(pid, &status, WNOHANG) == pid) {
			fprintf(stderr, "ingest_bench: the server exited; see %s\n", srv.log);
			return -1;
		}
		if (_request(&c, "GET", "/healthz", NULL, NULL, 0, &r, NULL) == 0 && r.status == 200) {
			_conn_close(&c);
			free(c.rbuf);
			free(r.body);
			return 0;
		}
		_conn_close(&c);
		free(c.rbuf);
		free(r.body);
		usleep(50000);
	}
	fprintf(stderr, "ingest_bench: the server did not come up; see %s\n", srv.log);
	return -1;
}

/* utime + stime of a process in seconds, or -1. */
static double _proc_cpu(pid_t pid)
{
	char path[64], buf[4096], *p;
	unsigned long long ut, st;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');
	/* After ") ": state(3) ... utime is field 14, stime 15. */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return -1;
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* A field of /proc/PID/io ("wchar", "write_bytes"), or -1. */
static double _proc_io(pid_t pid, const char *key)
{
	char path[64], line[128];
	size_t kl = strlen(key);
	double v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/io", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			v = atof(line + kl + 1);
			break;
		}
	fclose(f);
	return v;
}

/* Seconds the main thread of pid has waited on a run queue (runnable, not running), or -1. */
static double _proc_runq_wait(pid_t pid)
{
	char path[64];
	unsigned long long on, wait;
	FILE *f;
	int n;

	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	n = fscanf(f, "%llu %llu", &on, &wait);
	fclose(f);
	return n == 2 ? (double)wait / 1e9 : -1;
}

static long _proc_status_kb(pid_t pid, const char *key)
{
	char path[64], line[256];
	size_t kl = strlen(key);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, kl) && line[kl] == ':') {
			v = atol(line + kl + 1);
			break;
		}
	fclose(f);
	return v;
}

static uint64_t _du_bytes;

static uint64_t _dir_bytes(const char *dir, int depth)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	uint64_t sum = 0;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		char path[4096];
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (lstat(path, &st))
			continue;
		if (S_ISDIR(st.st_mode) && depth < 8)
			sum += _dir_bytes(path, depth + 1);
		else if (S_ISREG(st.st_mode)) {
			sum += (uint64_t)st.st_size;
			_du_bytes += (uint64_t)st.st_blocks * 512;
		}
	}
	closedir(d);
	return sum;
}

static void _rm_rf(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[4096];
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode))
			_rm_rf(path);
		else
			unlink(path);
	}
	closedir(d);
	rmdir(dir);
}

/* ---- ingest ------------------------------------------------------------------ */

struct body {
	void *data;
	size_t len;
	uint32_t nsamples;
	struct agent *a;
	int64_t t;
};

struct worker {
	pthread_t th;
	int idx;
	struct agent *agents;	/* nodes idx, idx + conns, ... */
	int nagents;
	struct conn c;
	struct body *bodies;	/* --pregen: every batch, encoded in advance */
	uint64_t nbodies;
	float *lat;		/* seconds per POST */
	uint64_t nlat;
	/* results */
	uint64_t samples, batches, body_bytes, wire_bytes, errors, resets;
	uint64_t cap_sessions;	/* sessions the encoders started for their dictionary cap */
	uint64_t dict_stacks, dict_frames, dict_strings, built;
	double client_cpu, gen_s, enc_s, http_s;
	int failed;
	bool joined;
};

static struct {
	int64_t start_ns, end_ns;
	int64_t nwindows;
	volatile int64_t progress;	/* windows done by worker 0 */
	pthread_barrier_t ready;	/* --pregen: all bodies built */
	volatile int pregen_done;
} run;

static void *_pregen_progress(void *arg)
{
	double t0 = _now(CLOCK_MONOTONIC);

	for (;;) {
		for (int i = 0; i < 300 && !run.pregen_done; i++)
			usleep(100000);
		if (run.pregen_done)
			return NULL;
		fprintf(stderr, "  built %.1f%% of windows after %.0f s\n",
			100.0 * (double)run.progress / (double)run.nwindows, _now(CLOCK_MONOTONIC) - t0);
	}
}

/* What the batch's samples refer to: the dictionary an agent's batch of them holds. */
static void _count_refs(struct worker *w, const struct batch *b)
{
	uint32_t ns = profile__nstacks(b->dict), nf = b->dict->nframes;
	uint8_t *seen_s = calloc(ns + 1, 1), *seen_f = calloc(nf + 1, 1), *seen_str;
	uint32_t nstr = intern__count(b->dict->strings);

	seen_str = calloc(nstr + 1, 1);
	if (!seen_s || !seen_f || !seen_str)
		goto out;
	for (uint32_t i = 0; i < b->nsamples; i++) {
		uint32_t st = b->samples[i].stack, n;
		const uint32_t *fr;

		if (seen_s[st])
			continue;
		seen_s[st] = 1;
		w->dict_stacks++;
		fr = profile__stack(b->dict, st, &n);
		for (uint32_t j = 0; j < n; j++) {
			const struct profile_frame *f = &b->dict->frames[fr[j]];

			if (seen_f[fr[j]])
				continue;
			seen_f[fr[j]] = 1;
			w->dict_frames++;
			if (!seen_str[f->function]) {
				seen_str[f->function] = 1;
				w->dict_strings++;
			}
			if (!seen_str[f->file]) {
				seen_str[f->file] = 1;
				w->dict_strings++;
			}
		}
	}
out:
	free(seen_s);
	free(seen_f);
	free(seen_str);
}

static struct batch *_build(struct worker *w, struct agent *a, int64_t t)
{
	double t0 = _now(CLOCK_MONOTONIC);
	struct batch *b = _make_batch(a, t);

	w->gen_s += _now(CLOCK_MONOTONIC) - t0;
	if (!b) {
		fprintf(stderr, "ingest_bench: cannot build a batch\n");
		w->failed = 1;
		return NULL;
	}
	_count_refs(w, b);
	w->built++;
	return b;
}

static int _encode(struct worker *w, struct agent *a, struct batch *b, void **body, size_t *len)
{
	double t0 = _now(CLOCK_MONOTONIC);
	uint64_t session = wire_encoder__session(a->enc);
	int err = wire_encoder__encode(a->enc, a->name, b, WIRE_ZSTD, body, len);

	w->enc_s += _now(CLOCK_MONOTONIC) - t0;
	/* After a 409 the caller resets first: a change here is the agent's cap. */
	if (wire_encoder__session(a->enc) != session)
		w->cap_sessions++;
	if (err) {
		fprintf(stderr, "ingest_bench: encode: %s\n", strerror(-err));
		w->failed = 1;
	}
	return err;
}

/* POSTs one body; returns the HTTP status, or -1 when the connection failed. */
static int _post(struct worker *w, struct agent *a, int64_t t, const void *body, size_t len,
		 uint32_t nsamples, struct reply *r)
{
	double t0 = _now(CLOCK_MONOTONIC), dt;
	size_t wire = 0;
	int err = _request(&w->c, "POST", "/api/v1/ingest",
			   "Content-Type: application/x-protobuf\r\nContent-Encoding: zstd\r\n",
			   body, len, r, &wire);

	dt = _now(CLOCK_MONOTONIC) - t0;
	w->http_s += dt;
	if (err) {
		fprintf(stderr, "ingest_bench: POST: %s\n", strerror(-err));
		w->failed = 1;
		return -1;
	}
	if (r->status == 200) {
		w->lat[w->nlat++] = (float)dt;
		w->samples += nsamples;
		w->batches++;
		a->sent += nsamples;
		if (t >= run.end_ns - 3600 * SEC)
			a->sent_last_hour += nsamples;
		w->body_bytes += len;
		w->wire_bytes += wire;
	} else if (r->status != 409) {
		fprintf(stderr, "ingest_bench: POST %s: HTTP %d: %.300s\n", a->name, r->status,
			r->body ? r->body : "");
		if (++w->errors > 10)
			w->failed = 1;
	}
	return r->status;
}

/*
 * --pregen: build and encode every batch first, acknowledging each as it is
 * encoded (as if the server had accepted it at once), so that the timed
 * phase is sending alone and the client takes no CPU from the server. The
 * server sees the same bytes as in the interleaved mode as long as every
 * batch is accepted.
 */
static void _pregen(struct worker *w)
{
	uint64_t n = 0;

	w->bodies = calloc((size_t)(run.nwindows * w->nagents), sizeof(*w->bodies));
	if (!w->bodies) {
		w->failed = 1;
		return;
	}
	for (int64_t k = 0; k < run.nwindows && !w->failed; k++) {
		int64_t t = run.start_ns + k * (int64_t)opt.batch_s * SEC;

		for (int i = 0; i < w->nagents && !w->failed; i++) {
			struct agent *a = &w->agents[i];
			struct batch *b = _build(w, a, t);
			struct body *bd = &w->bodies[n];

			if (!b)
				break;
			if (_encode(w, a, b, &bd->data, &bd->len) == 0) {
				/* The encoder's buffer is the compression bound: keep only the bytes. */
				void *shrunk = realloc(bd->data, bd->len ? bd->len : 1);

				if (shrunk)
					bd->data = shrunk;
				wire_encoder__ack(a->enc, wire_encoder__seq(a->enc));
				bd->nsamples = b->nsamples;
				bd->a = a;
				bd->t = t;
				n++;
			}
			_batch_free(b);
		}
		if (w->idx == 0)
			run.progress = k + 1;
	}
	w->nbodies = n;
}

static void *_worker(void *arg)
{
	struct worker *w = arg;
	struct reply r = { 0 };
	double c0;

	w->lat = malloc((size_t)(run.nwindows * w->nagents + 1) * sizeof(*w->lat));
	if (!w->lat)
		w->failed = 1;
	if (opt.pregen) {
		if (!w->failed)
			_pregen(w);
		pthread_barrier_wait(&run.ready);
		c0 = _now(CLOCK_THREAD_CPUTIME_ID);
		for (uint64_t k = 0; k < w->nbodies && !w->failed; k++) {
			struct body *bd = &w->bodies[k];

			if (_post(w, bd->a, bd->t, bd->data, bd->len, bd->nsamples, &r) == 409)
				w->resets++;
			free(bd->data);
			bd->data = NULL;
			if (w->idx == 0 && (k + 1) % (uint64_t)w->nagents == 0)
				run.progress = (int64_t)((k + 1) / (uint64_t)w->nagents);
		}
		goto out;
	}
	c0 = _now(CLOCK_THREAD_CPUTIME_ID);
	for (int64_t k = 0; k < run.nwindows && !w->failed; k++) {
		int64_t t = run.start_ns + k * (int64_t)opt.batch_s * SEC;

		for (int i = 0; i < w->nagents && !w->failed; i++) {
			struct agent *a = &w->agents[i];
			struct batch *b = _build(w, a, t);
			int tries = 0, status;

			if (!b)
				break;
			do {
				void *body = NULL;
				size_t len = 0;

				if (_encode(w, a, b, &body, &len))
					break;
				status = _post(w, a, t, body, len, b->nsamples, &r);
				free(body);
				if (status == 200)
					wire_encoder__ack(a->enc, wire_encoder__seq(a->enc));
				if (status != 409)
					break;
				/* The server lost our session: start over, as the agent does. */
				w->resets++;
				wire_encoder__reset(a->enc);
			} while (tries++ < 2);
			_batch_free(b);
		}
		if (w->idx == 0)
			run.progress = k + 1;
	}
out:
	w->client_cpu = _now(CLOCK_THREAD_CPUTIME_ID) - c0;
	_conn_close(&w->c);
	free(w->c.rbuf);
	free(r.body);
	return NULL;
}

/* A counter or gauge from /metrics, or -1. */
static double _metric(const char *name);

/* The most the server's session dictionaries held, sampled while sending. */
static double peak_session_bytes = -1;

static void _sample_sessions(void)
{
	double v = _metric("flamewatch_ingest_session_bytes");

	if (v > peak_session_bytes)
		peak_session_bytes = v;
}

/* A counter or gauge from /metrics, or -1. */
static double _metric(const char *name)
{
	struct conn c = { .fd = -1, .port = srv.port };
	struct reply r = { 0 };
	double v = -1;

	snprintf(c.host, sizeof(c.host), "%s", srv.host);
	if (_request(&c, "GET", "/metrics", NULL, NULL, 0, &r, NULL) == 0 && r.status == 200) {
		size_t nl = strlen(name);

		for (char *p = r.body; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
			if (!strncmp(p, name, nl) && p[nl] == ' ') {
				v = atof(p + nl + 1);
				break;
			}
	}
	_conn_close(&c);
	free(c.rbuf);
	free(r.body);
	return v;
}

static int _cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

/* ---- queries ---------------------------------------------------------------- */

struct qres {
	char label[96];
	double t[16];
	int n;
	int status;
	size_t bytes;
	double min, med;
	long long total, want;	/* samples in the reply, and sent; -1: unknown */
};

/* Samples a reply accounts for: a flame graph's "total", or a series' sum of points. */
static long long _reply_total(const char *body)
{
	const char *p = strstr(body, "\"total\":");
	long long sum = 0, a, b;

	if (p)
		return atoll(p + 8);
	p = strstr(body, "\"series\":");
	if (!p)
		return -1;
	for (; (p = strchr(p, '[')); p++)
		if (sscanf(p, "[%lld,%lld]", &a, &b) == 2)
			sum += b;
	return sum;
}

static int _cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void _url_escape(const char *in, char *out, size_t cap)
{
	size_t o = 0;

	for (; *in && o + 4 < cap; in++) {
		unsigned char ch = (unsigned char)*in;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '_' || ch == '.')
			out[o++] = (char)ch;
		else
			o += (size_t)snprintf(out + o, cap - o, "%%%02X", ch);
	}
	out[o] = '\0';
}

static void _time_query(struct qres *q, const char *label, const char *path, int reps,
			long long want)
{
	struct conn c = { .fd = -1, .port = srv.port };
	struct reply r = { 0 };

	snprintf(c.host, sizeof(c.host), "%s", srv.host);
	snprintf(q->label, sizeof(q->label), "%s", label);
	q->n = 0;
	for (int i = 0; i < reps && i < 16; i++) {
		double t0 = _now(CLOCK_MONOTONIC);
		int err = _request(&c, "GET", path, NULL, NULL, 0, &r, NULL);

		q->t[q->n++] = _now(CLOCK_MONOTONIC) - t0;
		q->status = err ? -1 : r.status;
		q->bytes = err ? 0 : r.len;
		if (err || r.status != 200) {
			fprintf(stderr, "ingest_bench: GET %s: %s %.300s\n", path,
				err ? strerror(-err) : "HTTP error", err ? "" : r.body);
			break;
		}
	}
	q->want = want;
	q->total = q->status == 200 ? _reply_total(r.body) : -1;
	qsort(q->t, (size_t)q->n, sizeof(double), _cmp_d);
	q->min = q->t[0];
	q->med = q->n % 2 ? q->t[q->n / 2] : (q->t[q->n / 2 - 1] + q->t[q->n / 2]) / 2;
	_conn_close(&c);
	free(c.rbuf);
	free(r.body);
}

/*
 * The store's goals (issue 28) against this run. Write amplification is
 * the bytes the server wrote while ingesting over the bytes it kept; the
 * flame graph goals are the 1 h and 24 h windows' warm medians.
 */
static void _goals(uint64_t samples, uint64_t rejected, double cpu_s, double kept,
		   double written, const struct qres *q, int nq)
{
	double rate = cpu_s > 0 ? (double)samples / cpu_s : -1;
	double per = kept > 0 && samples ? kept / (double)samples : -1;
	double amp = written > 0 && kept > 0 ? written / kept : -1;
	double h1 = -1, h24 = -1;

	for (int i = 0; i < nq; i++) {
		if (!strcmp(q[i].label, "profile json, last 1 h, all nodes"))
			h1 = q[i].med;
		else if (!strcmp(q[i].label, "profile json, last 24 h, all nodes"))
			h24 = q[i].med;
	}
	printf("\n| goal | this run | met |\n|---|---|---|\n");
	printf("| >= 1,000,000 samples per server CPU-second | %.0f | %s |\n", rate,
	       rate < 0 ? "?" : rate >= 1e6 ? "yes" : "**no**");
	printf("| <= 4 bytes per sample kept (rollups included) | %.2f | %s |\n", per,
	       per < 0 ? "?" : per <= 4 ? "yes" : "**no**");
	printf("| write amplification <= 3x (written / kept) | %.1fx | %s |\n", amp,
	       amp < 0 ? "?" : amp <= 3 ? "yes" : "**no**");
	printf("| 1 h flame graph < 0.3 s warm (median) | %.3f s | %s |\n", h1,
	       h1 < 0 ? "?" : h1 < 0.3 ? "yes" : "**no**");
	printf("| 24 h flame graph < 0.3 s warm (median) | %.3f s | %s |\n", h24,
	       h24 < 0 ? "?" : h24 < 0.3 ? "yes" : "**no**");
	printf("| no rejected batches (409 included) | %llu | %s |\n", (unsigned long long)rejected,
	       rejected ? "**no**" : "yes");
}

/* ---- main ---------------------------------------------------------------------- */

static void _usage(FILE *f, const char *argv0)
{
	fprintf(f,
"usage: %s [options]\n"
"  --hours H         simulated time to ingest, ending now (default 1)\n"
"  --nodes N         agents (default 20)          --cpus C   CPUs per node (default 8)\n"
"  --hz HZ           sampling rate (default 19)   --batch S  seconds per batch (default 10)\n"
"  --procs P         processes per node (10)      --stacks S stacks per service (3125;\n"
"                    16 services: 16 x S distinct stacks in the fleet)\n"
"  --depth MIN-MAX   frames per stack (default 20-60)\n"
"  --jitter-us J     sampling jitter (default 50)\n"
"  --pid-life-min M  each process restarts with a new pid every M minutes (default 30;\n"
"                    0: never)\n"
"  --deploy-min M    each service is deployed every M minutes: a new build id, so new\n"
"                    frames and stacks (default 240, staggered by service; 0: never)\n"
"  --session-memory BYTES  the started server's --max-session-memory\n"
"  --dict-mib M      each agent's cap on its session dictionary, after which it starts a\n"
"                    new session (default: the agent's, SHIPPER_DICT_MAX_BYTES)\n"
"  --busy F          fraction of ticks that find a CPU busy (default 1.0)\n"
"  --rate-div K      keep one sampling tick in K (a reduced-rate run; default 1)\n"
"  --conns C         client threads/connections, nodes split among them (default 2)\n"
"  --reps R          repetitions of each query (default 3)\n"
"  --url HOST:PORT   use a running server instead of starting one\n"
"  --pid PID         with --url: the server's pid, to read its CPU time\n"
"  --data DIR        with --url: its data directory, to measure (not stopped first)\n"
"  --server PATH     flamewatch binary (default build/flamewatch)\n"
"  --tmp DIR         where the temporary data directory goes (default /var/tmp)\n"
"  --server-cpus L   pin the started server with taskset -c L (e.g. 1)\n"
"  --pregen          build and encode every batch before sending any (memory: about\n"
"                    13 KB per batch), so the client takes no CPU while the server is timed\n"
"  --fresh-dict      a new dictionary for every batch, as the agent builds them (slower\n"
"                    client; the server receives the same)\n"
"  --keep            keep the data directory\n"
"  --store URI       start the server with --store URI (e.g. clickhouse://127.0.0.1:8123/bench)\n"
"                    instead of a data directory; disk bytes then come from the store's\n"
"                    own figure (its /metrics flamewatch_store_bytes)\n"
"  --tls-cert FILE --tls-key FILE  start the server with HTTPS (its --tls-cert/--tls-key)\n"
"  --tls-ca FILE     speak HTTPS to the server, trusting this CA (needed with --tls-cert;\n"
"                    the certificate must name 127.0.0.1 or --url's host)\n", argv0);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "hours", required_argument, NULL, 'H' }, { "nodes", required_argument, NULL, 'n' },
		{ "cpus", required_argument, NULL, 'c' }, { "hz", required_argument, NULL, 'z' },
		{ "batch", required_argument, NULL, 'b' }, { "procs", required_argument, NULL, 'p' },
		{ "stacks", required_argument, NULL, 's' }, { "busy", required_argument, NULL, 'B' },
		{ "rate-div", required_argument, NULL, 'r' }, { "conns", required_argument, NULL, 'C' },
		{ "reps", required_argument, NULL, 'R' }, { "url", required_argument, NULL, 'u' },
		{ "pid", required_argument, NULL, 'P' }, { "data", required_argument, NULL, 'd' },
		{ "server", required_argument, NULL, 'S' }, { "tmp", required_argument, NULL, 't' },
		{ "server-cpus", required_argument, NULL, 'A' }, { "keep", no_argument, NULL, 'k' },
		{ "pregen", no_argument, NULL, 'G' }, { "fresh-dict", no_argument, NULL, 'F' },
		{ "store", required_argument, NULL, 'U' },
		{ "tls-cert", required_argument, NULL, 'T' }, { "tls-key", required_argument, NULL, 'K' },
		{ "tls-ca", required_argument, NULL, 'Q' },
		{ "depth", required_argument, NULL, 'D' }, { "jitter-us", required_argument, NULL, 'J' },
		{ "dict-mib", required_argument, NULL, 'M' },
		{ "session-memory", required_argument, NULL, 'm' },
		{ "pid-life-min", required_argument, NULL, 'L' },
		{ "deploy-min", required_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' }, {}
	};
	struct worker *workers;
	double wall0, wall, cpu0 = -1, cpu1 = -1, qcpu0, qcpu1, qcpu = -1, last = 0;
	uint64_t samples = 0, batches = 0, body = 0, wire = 0, errors = 0, resets = 0;
	uint64_t cap_sessions = 0;
	double m_sessions, m_session_bytes, m_session_max, m_unknown, m_forgot[3];
	double last_sessions = 0;
	double client_cpu = 0, gen_s = 0, enc_s = 0, http_s = 0;
	uint64_t disk_live = 0, disk = 0, disk_alloc = 0;
	uint64_t d_stacks = 0, d_frames = 0, d_strings = 0, built = 0, nlat = 0;
	double wchar0 = -1, wchar1 = -1, wbytes0 = -1, wbytes1 = -1;
	double rq0 = -1, rq1 = -1, m_ingest0, m_ingest1, m_stacks, m_frames, m_series;
	double m_store_bytes = -1;
	float *lat = NULL;
	long hwm_kb = -1;
	struct qres q[8];
	int nq = 0, c, rc = 0;

	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'H': opt.hours = atof(optarg); break;
		case 'n': opt.nodes = atoi(optarg); break;
		case 'c': opt.cpus = atoi(optarg); break;
		case 'z': opt.hz = atoi(optarg); break;
		case 'b': opt.batch_s = atoi(optarg); break;
		case 'p': opt.procs = atoi(optarg); break;
		case 's': opt.stacks = atoi(optarg); break;
		case 'B': opt.busy = atof(optarg); break;
		case 'r': opt.rate_div = atoi(optarg); break;
		case 'C': opt.conns = atoi(optarg); break;
		case 'R': opt.reps = atoi(optarg); break;
		case 'u': opt.url = optarg; break;
		case 'P': opt.pid = (pid_t)atoi(optarg); break;
		case 'd': opt.data = optarg; break;
		case 'S': opt.server = optarg; break;
		case 't': opt.tmp = optarg; break;
		case 'A': opt.cpu_list = optarg; break;
		case 'k': opt.keep = true; break;
		case 'G': opt.pregen = true; break;
		case 'F': opt.fresh_dict = true; break;
		case 'U': opt.store = optarg; break;
		case 'T': opt.tls_cert = optarg; break;
		case 'K': opt.tls_key = optarg; break;
		case 'Q': opt.tls_ca = optarg; break;
		case 'D':
			if (sscanf(optarg, "%d-%d", &opt.depth_min, &opt.depth_max) != 2)
				opt.depth_min = 0;
			break;
		case 'J': opt.jitter_us = atoi(optarg); break;
		case 'M': opt.dict_mib = atof(optarg); break;
		case 'm': opt.session_memory = optarg; break;
		case 'L': opt.pid_life_min = atof(optarg); break;
		case 'V': opt.deploy_min = atof(optarg); break;
		case 'h': _usage(stdout, argv[0]); return 0;
		default: _usage(stderr, argv[0]); return 2;
		}
	}
	if (opt.procs < 1 || opt.procs > MAX_PROCS || opt.stacks < 1 || opt.stacks > MAX_STACKS ||
	    opt.nodes < 1 || opt.cpus < 1 || opt.hz < 1 || opt.batch_s < 1 || opt.conns < 1 ||
	    opt.hours <= 0 || opt.hours > 160 || opt.rate_div < 1 || opt.reps < 1 || opt.reps > 16 ||
	    opt.depth_min < 8 || opt.depth_max < opt.depth_min || opt.depth_max > MAX_DEPTH ||
	    opt.jitter_us < 0 || (int64_t)opt.jitter_us * 1000 >= SEC / opt.hz / 2 ||
	    opt.dict_mib <= 0 || !(opt.pid_life_min >= 0) || !(opt.deploy_min >= 0)) {
		fprintf(stderr, "ingest_bench: an option is out of range (procs <= %d, stacks <= %d, "
			"depth 8-%d, hours <= 160: the store keeps 7 days)\n", MAX_PROCS, MAX_STACKS,
			MAX_DEPTH);
		return 2;
	}
	if (opt.conns > opt.nodes)
		opt.conns = opt.nodes;
	if (!opt.tls_cert != !opt.tls_key || (opt.tls_cert && !opt.tls_ca)) {
		fprintf(stderr, "ingest_bench: --tls-cert, --tls-key and --tls-ca go together\n");
		return 2;
	}
	if (opt.tls_ca) {
		char err[512];

		client_tls = tls__client_ctx(opt.tls_ca, err, sizeof(err));
		if (!client_tls) {
			fprintf(stderr, "ingest_bench: %s\n", err);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (_fleet_init()) {
		fprintf(stderr, "ingest_bench: out of memory\n");
		return 1;
	}

	/* Time: whole batches ending at the last batch boundary before now. */
	{
		struct timespec now;
		int64_t step = (int64_t)opt.batch_s * SEC;

		clock_gettime(CLOCK_REALTIME, &now);
		run.end_ns = ((int64_t)now.tv_sec * SEC + now.tv_nsec) / step * step;
		run.nwindows = (int64_t)(opt.hours * 3600 / opt.batch_s + 0.5);
		run.start_ns = run.end_ns - run.nwindows * step;
	}

	if (opt.url) {
		if (_parse_url(opt.url)) {
			fprintf(stderr, "ingest_bench: --url: '%s' is not HOST:PORT\n", opt.url);
			return 2;
		}
		srv.pid = opt.pid;
	} else if (_spawn_server()) {
		rc = 1;
		goto out;
	}

	workers = calloc((size_t)opt.conns, sizeof(*workers));
	if (!workers)
		return 1;
	/* Nodes are interleaved over workers: worker i has nodes i, i + conns, ... */
	for (int w = 0; w < opt.conns; w++) {
		workers[w].idx = w;
		workers[w].agents = calloc((size_t)opt.nodes, sizeof(struct agent));
		if (!workers[w].agents)
			return 1;
		workers[w].c = (struct conn){ .fd = -1, .port = srv.port };
		snprintf(workers[w].c.host, sizeof(workers[w].c.host), "%s", srv.host);
	}
	for (int n = 0; n < opt.nodes; n++) {
		struct worker *w = &workers[n % opt.conns];
		struct agent *a = &w->agents[w->nagents++];

		a->node = (uint32_t)n + 1;
		snprintf(a->name, sizeof(a->name), "n%d", n + 1);
		a->enc = wire_encoder__new(_mix((uint64_t)n * 0x1234567 + (uint64_t)run.end_ns));
		a->rng = _mix((uint64_t)n + 42) | 1;
		a->lframe = malloc(fleet.nframes * sizeof(*a->lframe));
		a->lstack = malloc((size_t)opt.procs * opt.stacks * sizeof(*a->lstack));
		if (!a->enc || !a->lframe || !a->lstack)
			return 1;
		wire_encoder__set_max_bytes(a->enc, (size_t)(opt.dict_mib * 1048576));
		for (int p = 0; p < opt.procs; p++) {
			a->svc[p] = (uint32_t)(n + p) % NSERVICES;
		}
	}

	fprintf(stderr, "ingest_bench: %d nodes x %d CPUs x %d Hz%s, %g h = %lld batches per node, "
		"server pid %d on %s:%u%s%s\n",
		opt.nodes, opt.cpus, opt.hz, opt.rate_div > 1 ? " (reduced rate)" : "", opt.hours,
		(long long)run.nwindows, (int)srv.pid, srv.host, srv.port,
		srv.spawned ? ", data in " : "", srv.spawned ? srv.datadir : "");

	pthread_barrier_init(&run.ready, NULL, (unsigned)opt.conns + 1);
	for (int w = 0; w < opt.conns; w++)
		pthread_create(&workers[w].th, NULL, _worker, &workers[w]);
	if (opt.pregen) {
		double p0 = _now(CLOCK_MONOTONIC);

		fprintf(stderr, "ingest_bench: building and encoding every batch first (--pregen)\n");
		/* The barrier waits for every worker; report progress meanwhile from a helper. */
		{
			pthread_t pt;

			if (pthread_create(&pt, NULL, _pregen_progress, NULL) == 0)
				pthread_detach(pt);
		}
		pthread_barrier_wait(&run.ready);
		run.pregen_done = 1;
		run.progress = 0;
		fprintf(stderr, "ingest_bench: built in %.1f s; sending\n", _now(CLOCK_MONOTONIC) - p0);
	}
	if (srv.pid > 0) {
		cpu0 = _proc_cpu(srv.pid);
		rq0 = _proc_runq_wait(srv.pid);
		wchar0 = _proc_io(srv.pid, "wchar");
		wbytes0 = _proc_io(srv.pid, "write_bytes");
	}
	m_ingest0 = _metric("flamewatch_http_request_seconds_total{route=\"ingest\"}");
	wall0 = _now(CLOCK_MONOTONIC);
	/* Progress, every 10 s. */
	for (int joined = 0; joined < opt.conns;) {
		for (int w = 0; w < opt.conns; w++)
			if (!workers[w].joined && pthread_tryjoin_np(workers[w].th, NULL) == 0) {
				workers[w].joined = true;
				joined++;
			}
		if (joined == opt.conns)
			break;
		usleep(100000);
		if (_now(CLOCK_MONOTONIC) - last_sessions >= 2) {
			last_sessions = _now(CLOCK_MONOTONIC);
			_sample_sessions();
		}
		if (_now(CLOCK_MONOTONIC) - last >= 10) {
			double el = _now(CLOCK_MONOTONIC) - wall0;
			double sc = srv.pid > 0 ? _proc_cpu(srv.pid) - cpu0 : 0;

			last = _now(CLOCK_MONOTONIC);
			if (el > 1)
				fprintf(stderr, "  %.1f%% of windows after %.0f s (server CPU %.0f s, %.0f%% busy)\n",
					100.0 * (double)run.progress / (double)run.nwindows, el, sc,
					100 * sc / el);
		}
	}
	wall = _now(CLOCK_MONOTONIC) - wall0;
	if (srv.pid > 0) {
		cpu1 = _proc_cpu(srv.pid);
		rq1 = _proc_runq_wait(srv.pid);
		wchar1 = _proc_io(srv.pid, "wchar");
		wbytes1 = _proc_io(srv.pid, "write_bytes");
		hwm_kb = _proc_status_kb(srv.pid, "VmHWM");
	}
	m_ingest1 = _metric("flamewatch_http_request_seconds_total{route=\"ingest\"}");
	_sample_sessions();
	m_sessions = _metric("flamewatch_ingest_sessions");
	m_session_bytes = _metric("flamewatch_ingest_session_bytes");
	m_session_max = _metric("flamewatch_ingest_session_max_bytes");
	m_unknown = _metric("flamewatch_ingest_session_unknown_total");
	m_forgot[0] = _metric("flamewatch_ingest_sessions_forgotten_total{reason=\"budget\"}");
	m_forgot[1] = _metric("flamewatch_ingest_sessions_forgotten_total{reason=\"ended\"}");
	m_forgot[2] = _metric("flamewatch_ingest_sessions_forgotten_total{reason=\"idle\"}");
	m_stacks = _metric("flamewatch_store_stacks");
	if (opt.store)
		m_store_bytes = _metric("flamewatch_store_bytes");
	m_frames = _metric("flamewatch_store_frames");
	m_series = _metric("flamewatch_store_series");
	for (int w = 0; w < opt.conns; w++) {
		struct worker *wk = &workers[w];

		samples += wk->samples;
		batches += wk->batches;
		body += wk->body_bytes;
		wire += wk->wire_bytes;
		errors += wk->errors;
		resets += wk->resets;
		cap_sessions += wk->cap_sessions;
		client_cpu += wk->client_cpu;
		gen_s += wk->gen_s;
		enc_s += wk->enc_s;
		http_s += wk->http_s;
		d_stacks += wk->dict_stacks;
		d_frames += wk->dict_frames;
		d_strings += wk->dict_strings;
		built += wk->built;
		if (wk->failed)
			rc = 1;
		nlat += wk->nlat;
	}
	lat = malloc((nlat + 1) * sizeof(*lat));
	if (lat) {
		uint64_t k = 0;

		for (int w = 0; w < opt.conns; w++) {
			memcpy(lat + k, workers[w].lat, workers[w].nlat * sizeof(*lat));
			k += workers[w].nlat;
		}
		qsort(lat, nlat, sizeof(*lat), _cmp_f);
	}
	if (!samples) {
		fprintf(stderr, "ingest_bench: nothing was ingested\n");
		rc = 1;
		goto stop;
	}

	/* Queries. */
	{
		char path[1024], sel[128], lab[96];
		long long e = (run.end_ns + SEC - 1) / SEC, st = run.start_ns / SEC;
		long long h1 = e - 3600 > st ? e - 3600 : st;
		long long all_h = 0, n3 = 0, n3_h = 0;

		for (int w = 0; w < opt.conns; w++)
			for (int i = 0; i < workers[w].nagents; i++) {
				const struct agent *ag = &workers[w].agents[i];

				all_h += (long long)ag->sent_last_hour;
				if (ag->node == 3) {
					n3 = (long long)ag->sent;
					n3_h = (long long)ag->sent_last_hour;
				}
			}
		_url_escape("{node=\"n3\"}", sel, sizeof(sel));
		qcpu0 = srv.pid > 0 ? _proc_cpu(srv.pid) : 0;
		snprintf(path, sizeof(path), "/api/v1/profile?from=%lld&to=%lld&format=json", h1, e);
		_time_query(&q[nq++], "profile json, last 1 h, all nodes", path, opt.reps, all_h);
		snprintf(path, sizeof(path), "/api/v1/profile?from=%lld&to=%lld&format=json&query=%s",
			 h1, e, sel);
		_time_query(&q[nq++], "profile json, last 1 h, node n3", path, opt.reps, n3_h);
		/* A day's window, whatever was simulated: what a dashboard asks for. */
		snprintf(path, sizeof(path), "/api/v1/profile?from=%lld&to=%lld&format=json",
			 e - 86400, e);
		_time_query(&q[nq++], "profile json, last 24 h, all nodes", path, opt.reps,
			    opt.hours <= 24 ? (long long)samples : -1);
		snprintf(lab, sizeof(lab), "profile json, all %g h, all nodes", opt.hours);
		snprintf(path, sizeof(path), "/api/v1/profile?from=%lld&to=%lld&format=json", st, e);
		_time_query(&q[nq++], lab, path, opt.reps, (long long)samples);
		snprintf(lab, sizeof(lab), "profile json, all %g h, node n3", opt.hours);
		snprintf(path, sizeof(path), "/api/v1/profile?from=%lld&to=%lld&format=json&query=%s",
			 st, e, sel);
		_time_query(&q[nq++], lab, path, opt.reps, n3);
		/*
		 * Series over the whole range twice: buckets from a whole minute can
		 * be summed from minute rollups; buckets 30 s off the minute cannot.
		 * Both windows start before the first sample, so totals are the same.
		 */
		snprintf(lab, sizeof(lab), "series step=60s by=node, all %g h, from 30 s off a minute",
			 opt.hours);
		snprintf(path, sizeof(path), "/api/v1/series?from=%lld&to=%lld&step=60s&by=node",
			 st / 60 * 60 - 30, e);
		_time_query(&q[nq++], lab, path, opt.reps, (long long)samples);
		snprintf(lab, sizeof(lab), "series step=60s by=node, all %g h, from on a minute",
			 opt.hours);
		snprintf(path, sizeof(path), "/api/v1/series?from=%lld&to=%lld&step=60s&by=node",
			 st / 60 * 60, e);
		_time_query(&q[nq++], lab, path, opt.reps, (long long)samples);
		qcpu1 = srv.pid > 0 ? _proc_cpu(srv.pid) : 0;
		qcpu = qcpu1 - qcpu0;
	}

stop:
	if (srv.spawned) {
		int status;

		disk_live = _dir_bytes(srv.datadir, 0);
		kill(srv.pid, SIGTERM);
		waitpid(srv.pid, &status, 0);
		if (!WIFEXITED(status) || WEXITSTATUS(status))
			fprintf(stderr, "ingest_bench: the server exited with status %d; see %s\n",
				status, srv.log);
		_du_bytes = 0;
		disk = _dir_bytes(srv.datadir, 0);
		disk_alloc = _du_bytes;
	} else if (opt.data) {
		disk = disk_live = _dir_bytes(opt.data, 0);
		disk_alloc = _du_bytes;
	}

	/* Report. */
	printf("\n%d nodes x %d CPUs x %d Hz%s, %d processes per node, %d stacks (%d x %d) of "
	       "%d-%d frames, %d us jitter, %d s batches, %g h simulated, %d connection%s, "
	       "agent dictionary cap %g MiB%s; a new pid every %g min, a deploy every %g min\n\n",
	       opt.nodes, opt.cpus, opt.hz, opt.rate_div > 1 ? " (1 tick in rate-div kept)" : "",
	       opt.procs, NSERVICES * opt.stacks, NSERVICES, opt.stacks, opt.depth_min,
	       opt.depth_max, opt.jitter_us, opt.batch_s, opt.hours, opt.conns,
	       opt.conns > 1 ? "s" : "", opt.dict_mib, opt.pregen ? ", --pregen" : "",
	       opt.pid_life_min, opt.deploy_min);
	if (opt.rate_div > 1)
		printf("reduced rate: one sampling tick in %d kept\n\n", opt.rate_div);
	printf("| ingest | value |\n|---|---|\n");
	printf("| samples ingested | %llu (%llu batches, %llu rejected, %llu answered 409%s) |\n",
	       (unsigned long long)samples, (unsigned long long)batches,
	       (unsigned long long)errors, (unsigned long long)resets,
	       !resets ? "" : opt.pregen ? ": lost, --pregen cannot encode them again" :
	       ": sent again in a new session, as the agent does");
	{
		size_t enc_bytes = 0;

		for (int w = 0; w < opt.conns; w++)
			for (int i = 0; i < workers[w].nagents; i++)
				enc_bytes += wire_encoder__memory(workers[w].agents[i].enc);
		printf("| agent sessions | %llu started for the dictionary cap (%g MiB), %llu after "
		       "a 409; %.1f batches per session; the agents' dictionaries at the end: %.1f MB "
		       "(%.2f MB each) |\n", (unsigned long long)cap_sessions, opt.dict_mib,
		       (unsigned long long)resets,
		       (double)(batches + resets) / (double)(opt.nodes + cap_sessions + resets),
		       enc_bytes / 1e6, enc_bytes / 1e6 / opt.nodes);
	}
	if (m_sessions >= 0 && m_session_bytes >= 0)
		printf("| server session dictionaries | %.0f sessions, %.1f MB at the end (%.1f MB "
		       "each), peak %.1f MB, budget %.0f MB; forgotten: %.0f for the budget, %.0f "
		       "ended by their agent, %.0f idle; %.0f batches answered 409 |\n",
		       m_sessions, m_session_bytes / 1e6,
		       m_sessions > 0 ? m_session_bytes / m_sessions / 1e6 : 0,
		       peak_session_bytes / 1e6, m_session_max / 1e6, m_forgot[0], m_forgot[1],
		       m_forgot[2], m_unknown);
	printf("| samples per batch | %.0f |\n", (double)samples / (double)batches);
	printf("| wall time | %.1f s (%.0f samples/s, %.1f batches/s) |\n", wall,
	       (double)samples / wall, (double)batches / wall);
	if (cpu0 >= 0 && cpu1 >= 0)
		printf("| server CPU (utime+stime) | %.1f s = %.0f%% of one core; **%.0f samples/s per "
		       "server core**, %.0f us per batch |\n",
		       cpu1 - cpu0, 100 * (cpu1 - cpu0) / wall, (double)samples / (cpu1 - cpu0),
		       1e6 * (cpu1 - cpu0) / (double)batches);
	if (m_ingest0 >= 0 && m_ingest1 >= 0)
		printf("| server time in ingest handler (its /metrics) | %.1f s = %.0f us per batch "
		       "(CPU, I/O waits, and waits for a CPU) |\n", m_ingest1 - m_ingest0,
		       1e6 * (m_ingest1 - m_ingest0) / (double)batches);
	if (rq0 >= 0 && rq1 >= 0)
		printf("| server waiting for a CPU (runnable, /proc/PID/schedstat) | %.1f s = %.0f us "
		       "per batch (other load on this machine) |\n", rq1 - rq0,
		       1e6 * (rq1 - rq0) / (double)batches);
	if (lat && nlat)
		printf("| POST latency (client) | p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms |\n",
		       1e3 * lat[nlat / 2], 1e3 * lat[nlat * 9 / 10], 1e3 * lat[nlat * 99 / 100],
		       1e3 * lat[nlat - 1]);
	printf("| client CPU (sending threads, timed phase) | %.1f s; building batches %.1f s, "
	       "encoding %.1f s (wall, %s) |\n", client_cpu, gen_s, enc_s,
	       opt.pregen ? "before the timed phase" : "inside the timed phase");
	if (built)
		printf("| dictionary a batch refers to | %.0f stacks, %.0f frames, "
		       "%.0f function and file names |\n", (double)d_stacks / (double)built,
		       (double)d_frames / (double)built, (double)d_strings / (double)built);
	if (m_stacks >= 0)
		printf("| store dictionary after ingest | %.0f series, %.0f stacks, %.0f frames |\n",
		       m_series, m_stacks, m_frames);
	printf("| wire bytes per sample | %.2f body (%.2f with HTTP request headers); %.0f bytes "
	       "per batch |\n", (double)body / (double)samples, (double)wire / (double)samples,
	       (double)body / (double)batches);
	if (opt.store && m_store_bytes >= 0)
		printf("| store bytes per sample | **%.2f** (%.1f MB: the store's own count, e.g."
		       " ClickHouse system.parts bytes_on_disk, right after ingest) |\n",
		       m_store_bytes / (double)samples, m_store_bytes / 1e6);
	if (disk && !opt.store) {
		printf("| disk bytes per sample | **%.2f** after SIGTERM (%.1f MB; %.1f MB "
		       "allocated); %.2f while running (with WAL) |\n",
		       (double)disk / (double)samples, disk / 1e6, disk_alloc / 1e6,
		       (double)disk_live / (double)samples);
	}
	if (wchar0 >= 0 && wchar1 >= 0 && wbytes0 >= 0 && wbytes1 >= 0)
		printf("| server writes during ingest (/proc/PID/io) | %.1f bytes per sample written "
		       "(wchar: WAL and checkpoints, sockets included), %.1f reached the block device |\n",
		       (wchar1 - wchar0) / (double)samples, (wbytes1 - wbytes0) / (double)samples);
	if (hwm_kb > 0)
		printf("| server peak RSS | %.1f MB |\n", hwm_kb / 1024.0);
	if (nq) {
		printf("\n| query (x%d) | min | median | reply bytes | HTTP | samples in reply / sent |\n"
		       "|---|---|---|---|---|---|\n", opt.reps);
		for (int i = 0; i < nq; i++)
			printf("| %s | %.3f s | %.3f s | %zu | %d | %lld / %lld%s |\n", q[i].label,
			       q[i].min, q[i].med, q[i].bytes, q[i].status, q[i].total, q[i].want,
			       q[i].total == q[i].want ? "" : " **MISMATCH**");
		if (srv.pid > 0 && qcpu >= 0)
			printf("\nserver CPU for all %d queries x %d: %.2f s\n", nq, opt.reps, qcpu);
	}
	_goals(samples, errors + resets, cpu0 >= 0 && cpu1 >= 0 ? cpu1 - cpu0 : -1,
	       opt.store ? m_store_bytes : disk ? (double)disk : -1,
	       /* With --store the writes are the database's, which /proc of the
		* server does not see. */
	       !opt.store && wchar0 >= 0 && wchar1 >= 0 ? wchar1 - wchar0 : -1, q, nq);
	fflush(stdout);
	free(lat);
out:
	if (srv.spawned) {
		if (!opt.keep)
			_rm_rf(srv.tmpdir);
		else
			fprintf(stderr, "ingest_bench: kept %s\n", srv.tmpdir);
	}
	return rc;
}
