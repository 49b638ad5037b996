// SPDX-License-Identifier: Apache-2.0
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "agent/cpu_profile.h"
#include "agent/cuda/cuda_modes.h"
#include "agent/cuda/cuda_tracker.h"
#include "agent/cuda/lib_watch.h"
#include "agent/proc_table.h"
#include "agent/procmaps.h"
#include "agent/sampler.h"
#include "common/batch.h"
#include "common/clock.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/safe_open.h"
#include "gpu/cuda_join.h"
#include "gpu/dispatch_scale.h"
#include "symbolize/demangle.h"

#define CUDA_LIB_NAME "libflamewatch-cuda.so"
#define SEC_NS 1000000000ULL
/*
 * With loader events (lib_watch.h), a process that loaded the library is
 * looked at on the next tick, and again on every tick until its maps show
 * the library, for up to this long (it may have unloaded it meanwhile).
 */
#define CANDIDATE_EVENT_NS (1ULL * SEC_NS)
/*
 * Without them (kernels without bpf_loop(), FLAMEWATCH_CUDA_WATCH=0): how
 * long after an exec a process's maps are looked at for the library:
 * every tick for the first seconds, then every half second. `import torch`
 * and cuInit() can take longer than 10 s on a cold machine, and a copy of
 * the library the agent did not attach at start is only found this way
 * (or by the periodic scan, seconds later). A busy host pays for it: every
 * process it starts has its maps read many times in its first seconds.
 */
#define CANDIDATE_WINDOW_NS (30ULL * SEC_NS)
#define CANDIDATE_FAST_NS (3ULL * SEC_NS)
#define CANDIDATE_SLOW_EVERY_NS (500ULL * 1000000ULL)
#define MAX_CANDIDATES 256
/*
 * Mount namespaces whose loader was looked for (one read of one process's
 * maps each); forgotten all at once when full. A namespace whose first
 * processes map no loader (static binaries) is looked at up to
 * MNT_NS_TRIES times.
 */
#define MAX_MNT_NS 4096
#define MNT_NS_TRIES 3
/*
 * How often every process is looked at. With events it is a safety net
 * (for loaders that cannot be hooked; an event the ring buffer could not
 * take is counted, and triggers a scan too); polling, it finds libraries
 * dlopen'd after the candidate window.
 */
#define FULL_SCAN_WATCH_NS (30ULL * SEC_NS)
#define FULL_SCAN_POLL_NS (5ULL * SEC_NS)
/* How often the hook's loss counter is read. */
#define LOST_CHECK_NS (1ULL * SEC_NS)
/* How often the join's counters are logged while records come. */
#define JOIN_LOG_NS (60ULL * SEC_NS)
/* Longest kernel name read from a process; longer mangled names are cut. */
#define MAX_NAME 4096
#define NAMECACHE_MAX 100000
/*
 * A record's name_addr, once resolved at arrival: the index of the name in
 * t->names with this bit set (user addresses never have it), so that the
 * record is named however late the join emits it.
 */
#define NAME_RESOLVED (1ULL << 63)

struct attached {
	uint64_t dev, inode;
	struct bpf_link *links[SAMPLER_CUDA_LINKS];
};

struct candidate {
	pid_t pid;
	bool until_found;		/* from an event: done once the maps show the library */
	uint32_t mnt_ns;		/* looked at once for a loader in this namespace; 0: not */
	uint64_t since_ns, until_ns, next_ns;
};

struct mnt_ns {
	uint32_t inum;
	uint8_t tries;
	bool pending;			/* a process of it waits to be looked at */
	bool done;			/* a loader was seen, or MNT_NS_TRIES looks found none */
};

/*
 * What a pending launch keeps: the placed stack and the thread's name.
 * Held by the join for the launch, and for each kind and name whose
 * records fall back to it (cuda_join.h).
 */
struct launch_payload {
	struct cpu_placed_stack *ps;
	uint32_t refs;
	char comm[FW_COMM_LEN + 1];
};

/* (pid, name address) -> index in names; id1 == 0: an empty slot. */
struct name_ent {
	uint32_t pid, id1;
	uint64_t addr;
};

struct cuda_tracker {
	struct sampler *sampler;
	struct cpu_profile *cp;
	char *proc_root;
	struct attached *att;
	uint32_t natt;
	uint64_t *failed;		/* (dev ^ inode) of files that would not attach: tried once */
	uint32_t nfailed;
	struct candidate cand[MAX_CANDIDATES];
	uint32_t ncand;
	uint64_t last_scan_ns;
	uint64_t scan_every_ns;		/* 0: only at start */
	bool scan_every_set;		/* else the default of the mode */
	bool rescan;			/* events were lost: scan on the next tick */
	struct lib_watch *watch;	/* NULL: polling */
	uint64_t last_lost_check_ns;
	struct mnt_ns *mnt;		/* MAX_MNT_NS, allocated with the watch */
	uint32_t nmnt;
	struct cuda_join *join;
	struct name_ent *ntab;		/* open addressing, a power of two */
	uint32_t ntab_cap, ntab_n;
	struct intern *names;		/* demangled names, NUL included */
	uint64_t name_errors, names_announced, add_errors, conflicts;
	uint64_t stackless_launches;	/* launches whose stack ended inside the injection */
	uint64_t timeline_spans;	/* busy and coverage spans stored */
	uint64_t join_logged_ns;	/* when the join's counters were last logged */
	uint64_t join_logged_out;	/* ... and how many records had gone out */
	void (*on_process)(void *ctx, pid_t pid);
	void *on_process_ctx;
	pid_t *seen;			/* processes handed to on_process, until they exit */
	uint32_t nseen;
	struct cuda_modes modes;	/* how each process collects its records */
	struct dispatch_scale *scale;	/* duty-cycled weights from the monitors' counts */
	struct cuda_tracker_stats stats;
};

void cuda_tracker__on_process(struct cuda_tracker *t, void (*fn)(void *ctx, pid_t pid), void *ctx)
{
	t->on_process = fn;
	t->on_process_ctx = ctx;
}

static void _seen(struct cuda_tracker *t, pid_t pid)
{
	pid_t *s;

	for (uint32_t i = 0; i < t->nseen; i++)
		if (t->seen[i] == pid)
			return;
	s = realloc(t->seen, (t->nseen + 1) * sizeof(*s));
	if (!s)
		return;
	t->seen = s;
	t->seen[t->nseen++] = pid;
	if (t->on_process)
		t->on_process(t->on_process_ctx, pid);
}

static void _unseen(struct cuda_tracker *t, pid_t pid)
{
	for (uint32_t i = 0; i < t->nseen; i++)
		if (t->seen[i] == pid) {
			t->seen[i] = t->seen[--t->nseen];
			return;
		}
}

/* ---- kernel names ---- */

static uint32_t _ntab_hash(uint32_t pid, uint64_t addr)
{
	uint64_t h = (addr ^ ((uint64_t)pid << 40)) * 0x9E3779B97F4A7C15ULL;

	return (uint32_t)(h >> 32);
}

static int64_t _ntab_find(const struct cuda_tracker *t, uint32_t pid, uint64_t addr)
{
	uint32_t mask = t->ntab_cap - 1;

	if (!t->ntab_cap)
		return -1;
	for (uint32_t i = _ntab_hash(pid, addr) & mask;; i = (i + 1) & mask) {
		const struct name_ent *e = &t->ntab[i];

		if (!e->id1)
			return -1;
		if (e->pid == pid && e->addr == addr)
			return e->id1 - 1;
	}
}

static void _ntab_insert(struct name_ent *tab, uint32_t cap, const struct name_ent *e)
{
	uint32_t mask = cap - 1, i;

	for (i = _ntab_hash(e->pid, e->addr) & mask; tab[i].id1; i = (i + 1) & mask)
		if (tab[i].pid == e->pid && tab[i].addr == e->addr)
			break;
	tab[i] = *e;
}

/* Rebuilds the table at cap slots without the entries of pid (0: none). */
static int _ntab_rebuild(struct cuda_tracker *t, uint32_t cap, uint32_t drop_pid)
{
	struct name_ent *tab = calloc(cap, sizeof(*tab));
	uint32_t n = 0;

	if (!tab)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->ntab_cap; i++)
		if (t->ntab[i].id1 && (!drop_pid || t->ntab[i].pid != drop_pid)) {
			_ntab_insert(tab, cap, &t->ntab[i]);
			n++;
		}
	free(t->ntab);
	t->ntab = tab;
	t->ntab_cap = cap;
	t->ntab_n = n;
	return 0;
}

/* Forgets the names of a process that exited or exec'd: a new one may reuse the pid. */
static void _names_forget(struct cuda_tracker *t, uint32_t pid)
{
	for (uint32_t i = 0; i < t->ntab_cap; i++)
		if (t->ntab[i].id1 && t->ntab[i].pid == pid) {
			_ntab_rebuild(t, t->ntab_cap, pid);
			return;
		}
}

/* Records the join has emitted, however. */
static uint64_t _join_out(const struct cuda_join_stats *st)
{
	uint64_t out = 0;

	for (int h = 0; h < CUDA_JOIN_HOW_MAX; h++)
		out += st->how[h];
	return out;
}

static bool _join_idle(struct cuda_tracker *t)
{
	struct cuda_join_stats st;

	cuda_join__stats(t->join, &st);
	return st.records == _join_out(&st);
}

/*
 * Keeps the mangled name raw as pid's name at addr. Returns the index of
 * its demangled form in t->names, or -errno. The tables are bounded: when
 * full they start again, but only once no record that refers to a name by
 * index is waiting in the join.
 */
static int64_t _name_put(struct cuda_tracker *t, uint32_t pid, uint64_t addr, const char *raw)
{
	struct name_ent e = { .pid = pid, .addr = addr };
	const char *name = raw;
	char *dem;
	int64_t nid;

	if (intern__count(t->names) >= NAMECACHE_MAX || t->ntab_n >= NAMECACHE_MAX) {
		if (!_join_idle(t))
			return -ENOSPC;
		intern__free(t->names);
		t->names = intern__new();
		free(t->ntab);
		t->ntab = NULL;
		t->ntab_cap = t->ntab_n = 0;
		if (!t->names)
			return -ENOMEM;
	}
	if ((t->ntab_n + 1) * 2 > t->ntab_cap &&
	    _ntab_rebuild(t, t->ntab_cap ? t->ntab_cap * 2 : 1024, 0))
		return -ENOMEM;
	dem = demangle(raw);
	if (dem)
		name = dem;
	nid = intern__add(t->names, name, strlen(name) + 1, NULL);
	free(dem);
	if (nid < 0)
		return nid;
	e.id1 = (uint32_t)nid + 1;
	_ntab_insert(t->ntab, t->ntab_cap, &e);
	t->ntab_n++;
	return nid;
}

/*
 * Reads the NUL-terminated string at addr in pid, a page at a time so that
 * a name ending just before an unmapped page is still read. Returns its
 * length or -errno.
 */
static ssize_t _read_remote_str(pid_t pid, uint64_t addr, char *buf, size_t len)
{
	size_t got = 0;

	while (got < len - 1) {
		uint64_t at = addr + got;
		size_t chunk = 4096 - (at & 4095);
		struct iovec local, remote;
		ssize_t n;
		char *nul;

		if (chunk > len - 1 - got)
			chunk = len - 1 - got;
		local = (struct iovec){ buf + got, chunk };
		remote = (struct iovec){ (void *)(uintptr_t)at, chunk };
		n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
		if (n <= 0)
			return got ? (ssize_t)got : -(errno ? errno : EFAULT);
		nul = memchr(buf + got, '\0', n);
		if (nul)
			return nul - buf;
		got += n;
	}
	buf[got] = '\0';
	return got;
}

/*
 * The index in t->names of the kernel name at addr in pid: the name the
 * library announced, else read from the process now. -errno when neither.
 */
static int64_t _kernel_name_id(struct cuda_tracker *t, uint32_t pid, uint64_t addr)
{
	char buf[MAX_NAME];
	int64_t id;
	ssize_t n;

	if (!addr)
		return -ENOENT;
	id = _ntab_find(t, pid, addr);
	if (id >= 0)
		return id;
	n = _read_remote_str(pid, addr, buf, sizeof(buf));
	if (n <= 0)
		return n < 0 ? n : -ENOENT;
	return _name_put(t, pid, addr, buf);
}

/* The name a record resolved at arrival carries. Borrowed. */
static const char *_record_name(struct cuda_tracker *t, uint64_t name_addr)
{
	const char *s = NULL;

	if (name_addr & NAME_RESOLVED)
		s = intern__key(t->names, (int64_t)(name_addr & ~NAME_RESOLVED), NULL);
	return s ? s : "[unknown kernel]";
}

/* ---- the join's output ---- */

/*
 * The frame between a fallback stack and the work: the stack is that of
 * another launch of the same kernel (or copy kind), or of the process's
 * last launch of anything.
 */
#define MARK_SAME "[launch not seen: stack of an earlier launch]"
#define MARK_OTHER "[launch not seen: stack of another launch]"

static void _emit(void *ctx, uint32_t pid, const struct fw_cuda_record *r,
		  const struct cuda_join_launch *l, enum cuda_join_how how)
{
	struct cuda_tracker *t = ctx;
	const struct launch_payload *lp = l ? l->stack : NULL;
	char copy[32];
	struct cpu_gpu_activity a = {
		.pid = pid,
		.tid = l ? l->tid : 0,
		.cpu = l ? l->cpu : 0,
		.comm = lp ? lp->comm : NULL,
		.stack = lp ? lp->ps : NULL,
		.marker = how == CUDA_JOIN_FALLBACK_SAME ? MARK_SAME :
			  how == CUDA_JOIN_FALLBACK_OTHER ? MARK_OTHER : NULL,
		.kind = r->kind < GPU_ACTIVITY_KIND_MAX ? r->kind : GPU_MEMCPY_OTHER,
		.device = r->device,
		.stream = r->stream,
		.weight = cuda_join__weight(r, l),
		.correlation = r->correlation,
		.bytes = r->bytes,
		.start_ns = (int64_t)r->start_ns,
		.end_ns = (int64_t)r->end_ns,
	};

	if (a.kind == GPU_KERNEL) {
		double f;

		a.weight = dispatch_scale__record(t->scale, pid, r->device, (int64_t)r->end_ns, a.weight,
						  cuda_modes__duty_cycled(&t->modes, pid), clock__unix_ns());
		if (dispatch_scale__news(t->scale, pid, &f))
			pr_info("pid %u: GPU time of its duty-cycled records x %.3f: the kernels its "
				"GPU's monitors counted for each launch the records stood for\n", pid, f);
		if (dispatch_scale__short(t->scale, pid, &f))
			pr_warn("pid %u: its GPU's monitors counted %.1f kernels for each launch its "
				"duty-cycled records stand for: CUPTI's records are being lost, or a "
				"client of the GPU that NVML does not list launches beside it; its GPU "
				"time is short\n", pid, f);
		a.name = _record_name(t, r->name_addr);
		/* A kernel's bytes are its graph's id (cuda/probes.h). */
		a.graph = r->bytes > UINT32_MAX ? 0 : (uint32_t)r->bytes;
		a.bytes = 0;
	} else {
		snprintf(copy, sizeof(copy), "[%s]", gpu_activity_kind__name(a.kind));
		a.name = copy;
	}
	if (cpu_profile__add_gpu(t->cp, &a))
		t->add_errors++;
}

static void _free_payload(void *ctx, void *p)
{
	struct launch_payload *lp = p;

	(void)ctx;
	if (!lp || --lp->refs)
		return;
	free(lp->ps);
	free(lp);
}

static void _hold_payload(void *ctx, void *p)
{
	struct launch_payload *lp = p;

	(void)ctx;
	lp->refs++;
}

/* ---- discovery ---- */

static bool _is_cuda_lib(const char *path)
{
	const char *base = strrchr(path, '/');
	size_t n = strlen(CUDA_LIB_NAME);

	base = base ? base + 1 : path;
	/* libflamewatch-cuda.so, or a versioned libflamewatch-cuda.so.1 */
	return !strncmp(base, CUDA_LIB_NAME, n) && (base[n] == '\0' || base[n] == '.');
}

/*
 * Whether f is in CUPTI or in this library. The launch probe fires in the
 * library, called back by CUPTI from inside the CUDA runtime or driver:
 * several such frames would sit between cudaLaunchKernel and the kernel in
 * every GPU flame graph, and they say nothing about the application.
 */
static bool _injection_frame(const struct cpu_placed_frame *f)
{
	const char *base;

	if (f->kind != ADDR_FILE || !f->bin || !f->bin->path)
		return false;
	base = strrchr(f->bin->path, '/');
	base = base ? base + 1 : f->bin->path;
	return _is_cuda_lib(base) || !strncmp(base, "libcupti.", strlen("libcupti."));
}

static bool _known(struct cuda_tracker *t, uint64_t dev, uint64_t inode)
{
	for (uint32_t i = 0; i < t->natt; i++)
		if (t->att[i].dev == dev && t->att[i].inode == inode)
			return true;
	for (uint32_t i = 0; i < t->nfailed; i++)
		if (t->failed[i] == (dev * 0x9e3779b97f4a7c15ULL ^ inode))
			return true;
	return false;
}

/*
 * Attaches to the library that mapping m of pid maps, as procmaps__open_file()
 * opens it: the kernel is given /proc/self/fd/N, the file checked, rather
 * than a path the process can point elsewhere in between.
 */
static int _attach(struct cuda_tracker *t, pid_t pid, const struct proc_mapping *m)
{
	uint64_t dev = ((uint64_t)m->dev_major << 32) | m->dev_minor;
	struct attached *a;
	char self[64];
	int fd, err;

	a = realloc(t->att, (t->natt + 1) * sizeof(*a));
	if (!a)
		return -ENOMEM;
	t->att = a;
	a = &t->att[t->natt];
	a->dev = dev;
	a->inode = m->inode;
	fd = procmaps__open_file(t->proc_root, pid, m);
	if (fd >= 0) {
		snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
		err = sampler__attach_cuda(t->sampler, self, a->links);
		close(fd);
	} else {
		err = fd;
	}
	if (err) {
		uint64_t *f = realloc(t->failed, (t->nfailed + 1) * sizeof(*f));

		pr_warn("cannot attach to the CUDA probes of %s (pid %d): %s%s\n", m->path, pid,
			strerror(-err), err == -EACCES || err == -EPERM ?
			" (uprobes need CAP_SYS_ADMIN, which `flamewatch agent` drops once "
			"started: name the library in FLAMEWATCH_CUDA_LIB so it is attached "
			"at start)" : "");
		if (f) {
			t->failed = f;
			t->failed[t->nfailed++] = dev * 0x9e3779b97f4a7c15ULL ^ m->inode;
		}
		return err;
	}
	t->natt++;
	pr_info("GPU time profiling: attached to %s (pid %d)\n", m->path, pid);
	return 1;
}

/* Hooks a dynamic loader that pid maps (lib_watch.h), once per file. */
static void _loader(struct cuda_tracker *t, pid_t pid, const struct proc_mapping *m)
{
	int err;

	err = lib_watch__add_loader(t->watch, t->proc_root, pid, m);
	if (err > 0) {
		t->stats.loaders++;
		pr_info("GPU time profiling: watching the library loads of %s (pid %d)\n", m->path,
			pid);
	} else if (err < 0) {
		pr_debug("cannot watch the library loads of %s (pid %d): %s\n", m->path, pid,
			 strerror(-err));
	}
}

/*
 * Looks for the library in one process's maps; *mapped says whether it is
 * there. Hooks the process's loader if new. Returns 1 if a new library
 * file was attached, 0 if not, -errno when the maps cannot be read (the
 * process is gone).
 */
static int _scan_pid(struct cuda_tracker *t, pid_t pid, bool *mapped, bool *loader_seen)
{
	struct safe_lines lr;
	char path[PATH_MAX], *line;
	size_t len;
	int found = 0, fd;

	*mapped = false;
	*loader_seen = false;
	snprintf(path, sizeof(path), "%s/%d/maps", t->proc_root, pid);
	t->stats.maps_reads++;
	fd = safe_open__proc(AT_FDCWD, path);
	if (fd < 0)
		return fd;
	if (safe_lines__init(&lr, fd, 0, PROCMAPS_LINE_MAX, PROCMAPS_MAX_BYTES)) {
		close(fd);
		return -ENOMEM;
	}
	while ((line = safe_lines__next(&lr, &len, NULL))) {
		bool loader = t->watch && strstr(line, "/ld-");
		struct proc_mapping m;

		if (!loader && !strstr(line, CUDA_LIB_NAME))
			continue;
		if (procmaps__parse_line(line, &m) || m.path[0] != '/' ||
		    strstr(m.path, " (deleted)"))
			continue;
		if (loader && lib_watch__is_loader(m.path)) {
			*loader_seen = true;
			_loader(t, pid, &m);
			continue;
		}
		if (!_is_cuda_lib(m.path))
			continue;
		*mapped = true;
		_seen(t, pid);
		if (_known(t, ((uint64_t)m.dev_major << 32) | m.dev_minor, m.inode))
			continue;
		if (_attach(t, pid, &m) > 0)
			found = 1;
	}
	safe_lines__release(&lr);
	close(fd);
	return found;
}

int cuda_tracker__attach_file(struct cuda_tracker *t, const char *path)
{
	struct attached *a;
	struct stat sb;
	uint64_t dev;
	int err;

	if (stat(path, &sb))
		return -errno;
	dev = ((uint64_t)major(sb.st_dev) << 32) | minor(sb.st_dev);
	if (_known(t, dev, sb.st_ino))
		return 0;
	a = realloc(t->att, (t->natt + 1) * sizeof(*a));
	if (!a)
		return -ENOMEM;
	t->att = a;
	a = &t->att[t->natt];
	a->dev = dev;
	a->inode = sb.st_ino;
	err = sampler__attach_cuda(t->sampler, path, a->links);
	if (err)
		return err;
	t->natt++;
	pr_info("GPU time profiling: attached to %s\n", path);
	return 1;
}

int cuda_tracker__default_lib(char *out, size_t size)
{
	static const char *const rel[] = { "/" CUDA_LIB_NAME, "/../lib/flamewatch/" CUDA_LIB_NAME,
					   "/../lib/" CUDA_LIB_NAME };
	char exe[PATH_MAX], cand[PATH_MAX + 64], real[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return n < 0 ? -errno : -ENOENT;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	*slash = 0;
	for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(cand, sizeof(cand), "%s%s", exe, rel[i]);
		if (access(cand, R_OK) == 0 && realpath(cand, real) && strlen(real) < size) {
			strcpy(out, real);
			return 0;
		}
	}
	return -ENOENT;
}

int cuda_tracker__scan(struct cuda_tracker *t)
{
	struct dirent *de;
	int found = 0;
	DIR *d;

	t->last_scan_ns = clock__mono_ns();
	t->stats.full_scans++;
	d = opendir(t->proc_root);
	if (!d)
		return 0;
	while ((de = readdir(d))) {
		bool mapped, loader;

		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		if (_scan_pid(t, atoi(de->d_name), &mapped, &loader) > 0)
			found++;
	}
	closedir(d);
	return found;
}

struct cuda_tracker *cuda_tracker__new(struct sampler *sampler, struct cpu_profile *cp,
				       const char *proc_root)
{
	struct cuda_tracker *t = calloc(1, sizeof(*t));
	struct cuda_join_opts jo = {
		.emit = _emit, .free_stack = _free_payload, .hold_stack = _hold_payload,
	};

	if (!t)
		return NULL;
	t->sampler = sampler;
	t->cp = cp;
	jo.ctx = t;
	t->proc_root = strdup(proc_root);
	t->join = cuda_join__new(&jo);
	t->names = intern__new();
	t->scale = dispatch_scale__new();
	if (!t->proc_root || !t->join || !t->names || !t->scale) {
		cuda_tracker__free(t);
		errno = ENOMEM;
		return NULL;
	}
	return t;
}

void cuda_tracker__free(struct cuda_tracker *t)
{
	if (!t)
		return;
	lib_watch__close(t->watch);
	free(t->mnt);
	for (uint32_t i = 0; i < t->natt; i++)
		for (int k = 0; k < SAMPLER_CUDA_LINKS; k++)
			bpf_link__destroy(t->att[i].links[k]);
	free(t->att);
	free(t->failed);
	free(t->seen);
	cuda_modes__free(&t->modes);
	dispatch_scale__free(t->scale);
	cuda_join__free(t->join);
	intern__free(t->names);
	free(t->ntab);
	free(t->proc_root);
	free(t);
}

int cuda_tracker__watch(struct cuda_tracker *t)
{
	if (t->watch)
		return 0;
	/* The walk of the loader's list needs bpf_loop() (FLAMEWATCH_NO_BPF_LOOP=1 says no too). */
	if (!sampler__use_bpf_loop())
		return -EOPNOTSUPP;
	t->mnt = calloc(MAX_MNT_NS, sizeof(*t->mnt));
	if (!t->mnt)
		return -ENOMEM;
	t->watch = lib_watch__open(CUDA_LIB_NAME);
	if (!t->watch) {
		int err = -errno;

		free(t->mnt);
		t->mnt = NULL;
		return err;
	}
	t->stats.watching = 1;
	t->last_lost_check_ns = clock__mono_ns();
	return 0;
}

void cuda_tracker__set_scan_interval(struct cuda_tracker *t, uint64_t ns)
{
	t->scan_every_ns = ns;
	t->scan_every_set = true;
}

/*
 * Looks at pid from the next tick on, for window_ns (again: from now; 0:
 * once). Returns false when the list is full: the periodic scan finds it.
 */
static bool _candidate(struct cuda_tracker *t, pid_t pid, uint64_t window_ns, bool until_found,
		       uint32_t mnt_ns)
{
	uint64_t now = clock__mono_ns();
	struct candidate c = { pid, until_found, mnt_ns, now, now + window_ns, now };

	for (uint32_t i = 0; i < t->ncand; i++)
		if (t->cand[i].pid == pid) {
			if (!c.mnt_ns)
				c.mnt_ns = t->cand[i].mnt_ns;	/* that look is still owed */
			t->cand[i] = c;
			return true;
		}
	if (t->ncand == MAX_CANDIDATES)
		return false;
	t->cand[t->ncand++] = c;
	return true;
}

/* The namespace's entry, added if new. */
static struct mnt_ns *_mnt_ns(struct cuda_tracker *t, uint32_t inum)
{
	for (uint32_t i = 0; i < t->nmnt; i++)
		if (t->mnt[i].inum == inum)
			return &t->mnt[i];
	if (t->nmnt == MAX_MNT_NS)
		t->nmnt = 0;	/* containers come and go: start again */
	t->mnt[t->nmnt] = (struct mnt_ns){ .inum = inum };
	return &t->mnt[t->nmnt++];
}

/*
 * A namespace's process was looked at (rc: _scan_pid()'s): done when its
 * maps showed a loader. A process gone before its look is no try: the
 * next exec there is looked at.
 */
static void _mnt_ns_looked(struct cuda_tracker *t, uint32_t inum, int rc, bool loader_seen)
{
	for (uint32_t i = 0; i < t->nmnt; i++)
		if (t->mnt[i].inum == inum) {
			struct mnt_ns *ns = &t->mnt[i];

			ns->pending = false;
			if (rc >= 0)
				ns->done = loader_seen || ++ns->tries >= MNT_NS_TRIES;
			return;
		}
}

void cuda_tracker__image_gone(struct cuda_tracker *t, pid_t pid)
{
	_unseen(t, pid);
	if (cuda_join__has_pid(t->join, pid))
		cuda_join__flush_pid(t->join, pid);
	_names_forget(t, pid);
}

/*
 * The old image's launches and names are forgotten at its exec mark
 * (cuda_tracker__image_gone()), not here: this event comes from the other
 * ring buffer and may be read after the new image's first names. The
 * process is handed to on_process again at its next launch, after the
 * collector dropped it from the unwinder for this exec.
 */
void cuda_tracker__exec(struct cuda_tracker *t, pid_t pid, uint32_t mnt_ns)
{
	struct mnt_ns *ns;

	_unseen(t, pid);
	if (!t->watch) {
		_candidate(t, pid, CANDIDATE_WINDOW_NS, false, 0);
		return;
	}
	/*
	 * With events, the new image's loads are reported as they happen, if
	 * its loader is hooked: the first process of a namespace shows which
	 * loader it brings (mapped by the kernel before this event).
	 */
	ns = mnt_ns ? _mnt_ns(t, mnt_ns) : NULL;
	if (ns && !ns->done && !ns->pending)
		ns->pending = _candidate(t, pid, 0, false, mnt_ns);
}

void cuda_tracker__exit(struct cuda_tracker *t, pid_t pid)
{
	/* Its records are named already (at arrival): its names can go. */
	cuda_tracker__image_gone(t, pid);
	cuda_modes__forget(&t->modes, (uint32_t)pid);
	dispatch_scale__forget(t->scale, (uint32_t)pid);
	for (uint32_t i = 0; i < t->ncand; i++)
		if (t->cand[i].pid == pid) {
			if (t->cand[i].mnt_ns)
				_mnt_ns_looked(t, t->cand[i].mnt_ns, -ESRCH, false);
			t->cand[i] = t->cand[--t->ncand];
			break;
		}
}

static void _on_lib_event(void *ctx, pid_t pid)
{
	struct cuda_tracker *t = ctx;

	t->stats.lib_events++;
	/* Once in the list, a process is read at most once a tick, however often it loads the library. */
	_candidate(t, pid, CANDIDATE_EVENT_NS, true, 0);
}

/* The processes the loaders reported; a full scan on the next tick if some were dropped. */
static void _watch_drain(struct cuda_tracker *t, uint64_t now)
{
	struct lib_watch_stats st;

	lib_watch__drain(t->watch, _on_lib_event, t);
	if (now - t->last_lost_check_ns < LOST_CHECK_NS)
		return;
	t->last_lost_check_ns = now;
	if (lib_watch__stats(t->watch, &st) || st.lost <= t->stats.lib_events_lost)
		return;
	pr_debug("GPU time: %" PRIu64 " library loads not reported (ring buffer full): "
		 "scanning every process\n", st.lost - t->stats.lib_events_lost);
	t->stats.lib_events_lost = st.lost;
	t->rescan = true;
}

/* Per mille of all, rounded down; 0 of 0. */
static unsigned _permille(uint64_t part, uint64_t all)
{
	return all ? (unsigned)((unsigned __int128)part * 1000 / all) : 0;
}

/*
 * How the records found their launches' stacks, by count and by GPU time,
 * and why those that left without their launch did: the share of GPU time
 * under a fallback stack or none says how far to trust the GPU flame graph.
 */
static void _log_join(struct cuda_tracker *t)
{
	struct cuda_join_stats st;
	uint64_t ns = 0;
	unsigned fb, none;

	cuda_join__stats(t->join, &st);
	for (int h = 0; h < CUDA_JOIN_HOW_MAX; h++)
		ns += st.how_ns[h];
	fb = _permille(st.how_ns[CUDA_JOIN_FALLBACK_SAME] + st.how_ns[CUDA_JOIN_FALLBACK_OTHER], ns);
	none = _permille(st.how_ns[CUDA_JOIN_LOST], ns);
	t->join_logged_out = _join_out(&st);
	t->join_logged_ns = clock__mono_ns();
	pr_info("GPU time join: %" PRIu64 " launches (%" PRIu64 " never matched), %" PRIu64
		" records: %" PRIu64 " joined, %" PRIu64 " joined late, %" PRIu64
		" under an earlier launch of their kernel, %" PRIu64 " under another launch, %"
		PRIu64 " without a stack; of the GPU time %u.%u%% under a stack not its own and "
		"%u.%u%% under none\n",
		st.launches, st.launches_unmatched, st.records, st.how[CUDA_JOIN_JOINED],
		st.how[CUDA_JOIN_JOINED_LATE], st.how[CUDA_JOIN_FALLBACK_SAME],
		st.how[CUDA_JOIN_FALLBACK_OTHER], st.how[CUDA_JOIN_LOST], fb / 10, fb % 10,
		none / 10, none % 10);
	if (st.how[CUDA_JOIN_FALLBACK_SAME] + st.how[CUDA_JOIN_FALLBACK_OTHER] +
	    st.how[CUDA_JOIN_LOST])
		pr_info("GPU time join: records without their launch: %" PRIu64
			" carried from launches none kept, %" PRIu64 " whose launch left or never came"
			" (ids too far behind), %" PRIu64 " waited too long, %" PRIu64
			" too many waiting, %" PRIu64 " of processes gone, %" PRIu64
			" whose launch's stack was not unwound, %" PRIu64 " out of memory\n",
			st.why[CUDA_JOIN_WHY_UNNAMED], st.why[CUDA_JOIN_WHY_DISTANCE],
			st.why[CUDA_JOIN_WHY_AGE], st.why[CUDA_JOIN_WHY_COUNT],
			st.why[CUDA_JOIN_WHY_GONE], st.why[CUDA_JOIN_WHY_NO_STACK],
			st.why[CUDA_JOIN_WHY_MEMORY]);
}

int cuda_tracker__watch_fd(const struct cuda_tracker *t)
{
	return t->watch ? lib_watch__fd(t->watch) : -1;
}

void cuda_tracker__tick(struct cuda_tracker *t)
{
	uint64_t now = clock__mono_ns();
	uint64_t every = t->scan_every_set ? t->scan_every_ns :
			 t->watch ? FULL_SCAN_WATCH_NS : FULL_SCAN_POLL_NS;

	if (t->watch) {
		_watch_drain(t, now);
		/* The loads just drained are candidates from a later now: due in this pass. */
		now = clock__mono_ns();
	}
	for (uint32_t i = 0; i < t->ncand;) {
		struct candidate *c = &t->cand[i];
		bool mapped, loader;
		int rc;

		if (now >= c->next_ns) {
			rc = _scan_pid(t, c->pid, &mapped, &loader);
			if (c->mnt_ns)
				_mnt_ns_looked(t, c->mnt_ns, rc, loader);
			if (rc < 0 || (mapped && c->until_found) || now >= c->until_ns) {
				*c = t->cand[--t->ncand];
				continue;
			}
			c->next_ns = now - c->since_ns < CANDIDATE_FAST_NS ? now
									   : now + CANDIDATE_SLOW_EVERY_NS;
		} else if (now > c->until_ns) {
			*c = t->cand[--t->ncand];
			continue;
		}
		i++;
	}
	if (t->rescan || (every && now - t->last_scan_ns >= every)) {
		t->rescan = false;
		cuda_tracker__scan(t);
	}
	cuda_join__expire(t->join, now);
	if (now - t->join_logged_ns >= JOIN_LOG_NS) {
		struct cuda_join_stats st;

		cuda_join__stats(t->join, &st);
		if (_join_out(&st) != t->join_logged_out)
			_log_join(t);
	}
}

void cuda_tracker__flush(struct cuda_tracker *t)
{
	cuda_join__flush(t->join);
}

void cuda_tracker__launch(struct cuda_tracker *t, const struct fw_cuda_launch *l)
{
	struct launch_payload *lp = calloc(1, sizeof(*lp));

	if (!lp) {
		t->add_errors++;
		return;
	}
	lp->refs = 1;
	lp->ps = cpu_profile__place(t->cp, &l->s);
	if (!lp->ps) {
		free(lp);
		t->add_errors++;
		return;
	}
	/* The launching stack ends at its last frame outside the injection (root first). */
	while (lp->ps->n > 0 && _injection_frame(&lp->ps->f[lp->ps->n - 1]))
		lp->ps->n--;
	memcpy(lp->comm, l->s.comm, FW_COMM_LEN);
	if (!lp->ps->n) {
		/*
		 * Nothing outside the injection: the walk stopped in CUDA's
		 * libraries, which have no frame pointers, before this process
		 * was described to the unwinder. Its records fall back to
		 * another launch's stack; the next launches unwind.
		 */
		_free_payload(t, lp);
		lp = NULL;
		t->stackless_launches++;
		_seen(t, (pid_t)l->s.pid);
	}
	if (cuda_join__launch(t->join, l->s.pid, l->correlation, l->s.tid, l->s.cpu, l->weight,
			      lp, clock__mono_ns()))
		t->add_errors++;
}

static void _timeline_span(struct cuda_tracker *t, uint32_t pid, const struct fw_cuda_record *r)
{
	struct cpu_gpu_activity a = {
		.pid = pid,
		.kind = r->kind == FW_CUDA_BUSY ? GPU_BUSY : GPU_COVERAGE,
		.device = r->kind == FW_CUDA_BUSY ? r->device : 0,
		.bytes = r->bytes,
		.correlation = r->kind == FW_CUDA_BUSY ? r->correlation : 0,
		.start_ns = (int64_t)r->start_ns,
		.end_ns = (int64_t)r->end_ns,
	};

	/* Values from another process: a reversed or empty span is dropped. */
	if (a.end_ns <= a.start_ns || a.start_ns <= 0) {
		t->add_errors++;
		return;
	}
	/* Idle inside a span cannot pass its length. */
	if (a.correlation > (uint64_t)(a.end_ns - a.start_ns))
		a.correlation = (uint64_t)(a.end_ns - a.start_ns);
	if (cpu_profile__add_gpu_span(t->cp, &a))
		t->add_errors++;
	else
		t->timeline_spans++;
}

void cuda_tracker__activity(struct cuda_tracker *t, const struct fw_cuda_activity *a)
{
	uint64_t now = clock__mono_ns();

	/*
	 * Kernel names are resolved now, from the name probe or else while
	 * the process surely lives: a record may wait for its launch until
	 * the process has exited.
	 */
	for (uint32_t i = 0; i < a->count && i < FW_CUDA_MAX_BATCH; i++) {
		struct fw_cuda_record r = a->recs[i];

		/* The busy timeline joins nothing: its spans are stored as they come. */
		if (r.kind == FW_CUDA_BUSY || r.kind == FW_CUDA_COVERAGE) {
			_timeline_span(t, a->pid, &r);
			continue;
		}
		if (r.kind == FW_CUDA_COLLECTION) {
			cuda_modes__update(&t->modes, a->pid, &r);
			continue;
		}
		if (r.kind == FW_CUDA_KERNEL) {
			int64_t id = _kernel_name_id(t, a->pid, r.name_addr);

			if (id < 0) {
				t->name_errors++;
				pr_debug("pid %u: kernel name at 0x%llx: %s\n", a->pid,
					 (unsigned long long)r.name_addr, strerror((int)-id));
			}
			r.name_addr = id < 0 ? 0 : NAME_RESOLVED | (uint64_t)id;
		}
		if (cuda_join__record(t->join, a->pid, &r, now))
			t->add_errors++;
	}
}

void cuda_tracker__name(struct cuda_tracker *t, const struct fw_cuda_name *n)
{
	char raw[FW_CUDA_NAME_LEN];

	/* Cut: the whole name is read from the process when a record needs it. */
	if (!memchr(n->name, '\0', sizeof(n->name)))
		return;
	memcpy(raw, n->name, sizeof(raw));
	if (_ntab_find(t, n->pid, n->addr) >= 0)
		return;
	if (_name_put(t, n->pid, n->addr, raw) < 0)
		t->name_errors++;
	else
		t->names_announced++;
}

void cuda_tracker__conflict(struct cuda_tracker *t, const struct fw_cuda_conflict *c)
{
	char what[FW_CUDA_CONFLICT_LEN + 1];

	memcpy(what, c->what, FW_CUDA_CONFLICT_LEN);
	what[FW_CUDA_CONFLICT_LEN] = '\0';
	t->conflicts++;
	pr_warn("pid %u: no GPU time: %s\n", c->pid, what[0] ? what : "another CUPTI subscriber");
}

uint32_t cuda_tracker__nattached(const struct cuda_tracker *t)
{
	return t->natt;
}

void cuda_tracker__stats(const struct cuda_tracker *t, struct cuda_tracker_stats *out)
{
	*out = t->stats;
	cuda_join__stats(t->join, &out->join);
	cuda_modes__count(&t->modes, &out->records_all, &out->records_duty_cycled);
	out->collection_switches = t->modes.switches;
	dispatch_scale__stats(t->scale, &out->scale);
}

struct dispatch_scale *cuda_tracker__dispatch_scale(struct cuda_tracker *t)
{
	return t ? t->scale : NULL;
}

bool cuda_tracker__records_complete(const struct cuda_tracker *t, uint32_t pid)
{
	return t && cuda_modes__complete(&t->modes, pid);
}

void cuda_tracker__report(struct cuda_tracker *t)
{
	uint64_t c[FW_CUDA_STAT_MAX];
	struct cuda_join_stats st;

	if (t->watch) {
		struct lib_watch_stats w;

		if (lib_watch__stats(t->watch, &w) == 0)
			pr_debug("GPU time: %u loaders watched: %" PRIu64 " loader changes, %"
				 PRIu64 " walks, %" PRIu64 " names compared, %" PRIu64
				 " loads of the library reported (%" PRIu64 " lost), %" PRIu64
				 " walks stopped by faults, %" PRIu64 " cut\n", w.loaders, w.calls,
				 w.walks, w.names, w.events, w.lost, w.faults, w.truncated);
	}
	pr_debug("GPU time: the library looked for %s: %" PRIu64 " maps read, %" PRIu64
		 " full scans\n", t->watch ? "on loader events" : "by polling",
		 t->stats.maps_reads, t->stats.full_scans);
	if (!t->natt)
		return;
	cuda_join__stats(t->join, &st);
	if (sampler__cuda_stats(t->sampler, c) == 0) {
		uint64_t lost = c[FW_CUDA_STAT_LAUNCH_RINGBUF_FULL] +
				c[FW_CUDA_STAT_ACTIVITY_RINGBUF_FULL] + c[FW_CUDA_STAT_ACTIVITY_FAULT];

		if (lost || c[FW_CUDA_STAT_ACTIVITY_TRUNCATED])
			pr_warn("GPU time: %" PRIu64 " probe events lost (ring buffer full or "
				"unreadable), %" PRIu64 " records cut from oversized batches\n",
				lost, c[FW_CUDA_STAT_ACTIVITY_TRUNCATED]);
		for (int i = 0; i < FW_CUDA_STAT_MAX; i++)
			pr_debug("bpf stat %s = %" PRIu64 "\n", fw_cuda_stat__name(i), c[i]);
	}
	if (t->add_errors)
		pr_warn("GPU time: %" PRIu64 " launches or records dropped: out of memory\n",
			t->add_errors);
	pr_info("GPU time: %u library files; %" PRIu64 " kernel names announced, %" PRIu64
		" unreadable; %" PRIu64 " busy-timeline spans; %" PRIu64 " launch stacks not "
		"unwound\n", t->natt, t->names_announced, t->name_errors, t->timeline_spans,
		t->stackless_launches);
	_log_join(t);
}
