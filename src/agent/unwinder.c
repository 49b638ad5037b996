// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "agent/bpf/sample.h"
#include "agent/bpf/unwind.h"
#include "agent/proc_table.h"
#include "agent/procmaps.h"
#include "agent/unwinder.h"
#include "common/clock.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/safe_open.h"
#include "symbolize/elf_file.h"
#include "unwind/unwind_table.h"

#define PID_BUCKETS 1024
/*
 * A process that wants a table built on demand is described again at most
 * this often: samples taken before the last description still ask.
 */
#define WANTED_REDESCRIBE_NS (100 * 1000000ULL)
#define STAGE_WINDOW (64u << 10)	/* bytes of a row array mapped at a time; whole pages */
#ifndef ENOTSUPP
#define ENOTSUPP 524		/* the kernel's "not supported", which BPF batch commands return */
#endif

/*
 * FILE_ON_DEMAND: large enough to wait for a sample that needs its table
 * (unwinder__set_on_demand()); wanted once one did, built as any other since.
 */
enum file_state { FILE_NEW, FILE_LOADED, FILE_NO_CFI, FILE_OVER_CAP, FILE_ON_DEMAND };

struct unwind_file {
	enum file_state state;
	bool wanted;
	uint32_t rows;		/* FILE_OVER_CAP: the rows it would need */
	uint32_t refs;		/* processes whose description uses this table */
	uint64_t last_used;	/* unwinder clock at the last reference */
};

/* The files a described process references, to drop on exit. */
struct unwind_pid {
	pid_t pid;
	uint64_t described_ns;	/* when its mappings were last read */
	uint32_t redescribed;	/* times its maps changed under us since exec */
	uint32_t nfiles;
	uint32_t *files;	/* file ids (index + 1 in files[]) */
	struct unwind_pid *next;
};

/*
 * A process to describe again. Only a table wanted (FW_SAMPLE_WANTS_TABLE)
 * leaves its maps as they were: the proc_table keeps them, and the
 * interpreters are not told of a change.
 */
struct pending {
	pid_t pid;
	bool maps_changed;
};

struct unwinder {
	int files_fd, procs_fd, wanted_fd;
	uint64_t on_demand_bytes;	/* 0: every table at once */
	struct proc_table *procs;
	struct intern *file_keys;	/* key -> index in files[] */
	struct unwind_file *files;
	uint32_t cap_files;
	struct unwind_pid *pids[PID_BUCKETS];
	uint64_t clock;
	uint64_t describing_since;	/* clock when the current description began */
	struct unwinder_stats stats;
	struct pending *pending;	/* processes to (re-)describe after this drain */
	uint32_t npending, cap_pending;
	struct fw_proc_mappings *scratch;	/* one process's description being built */
	uint32_t *scratch_files;
	/* Tables built for the description in progress, published together. */
	__u32 *staged_ids;
	__u32 *staged_fds;
	uint32_t nstaged, cap_staged;
	uint64_t self_dev, self_inode;	/* our own executable, as binary keys it */
};

struct unwinder *unwinder__new(int files_fd, int procs_fd, int wanted_fd,
			       struct proc_table *procs, uint64_t cap_bytes)
{
	struct unwinder *u = calloc(1, sizeof(*u));

	if (!u)
		return NULL;
	u->files_fd = files_fd;
	u->procs_fd = procs_fd;
	u->wanted_fd = wanted_fd;
	u->procs = procs;
	u->stats.cap_bytes = cap_bytes;
	u->file_keys = intern__new();
	u->scratch = calloc(1, sizeof(*u->scratch));
	u->scratch_files = calloc(FW_MAX_PROC_MAPPINGS, sizeof(*u->scratch_files));
	if (!u->file_keys || !u->scratch || !u->scratch_files) {
		unwinder__free(u);
		errno = ENOMEM;
		return NULL;
	}
	{
		struct stat st;

		if (!stat("/proc/self/exe", &st)) {
			u->self_dev = (uint64_t)major(st.st_dev) << 32 | minor(st.st_dev);
			u->self_inode = st.st_ino;
		}
	}
	return u;
}

void unwinder__set_on_demand(struct unwinder *u, uint64_t cfi_bytes)
{
	u->on_demand_bytes = cfi_bytes;
}

void unwinder__free(struct unwinder *u)
{
	if (!u)
		return;
	for (int i = 0; i < PID_BUCKETS; i++) {
		struct unwind_pid *p, *next;

		for (p = u->pids[i]; p; p = next) {
			next = p->next;
			free(p->files);
			free(p);
		}
	}
	intern__free(u->file_keys);
	free(u->pending);
	free(u->files);
	free(u->scratch);
	free(u->scratch_files);
	for (uint32_t i = 0; i < u->nstaged; i++)
		close(u->staged_fds[i]);
	free(u->staged_ids);
	free(u->staged_fds);
	free(u);
}

/* Opens the binary's separate debug file by build id, or returns -1. */
static int _open_debug_file(const struct binary *b)
{
	const struct safe_open_opts caps = { .max_size = ELF_FILE_MAX_BYTES };
	const char *bid = b->elf ? elf_file__build_id(b->elf) : "";
	char path[PATH_MAX];
	int fd;

	if (strlen(bid) < 3)
		return -1;
	snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%.2s/%s.debug", bid, bid + 2);
	fd = safe_open__in_root(b->root, path, &caps, NULL);
	return fd < 0 ? -1 : fd;
}

/*
 * The kernel memory of a table of n rows: mappable arrays (see _stage)
 * take whole pages, which the cap must count.
 */
static uint64_t _table_bytes(uint64_t n)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	return (n * sizeof(struct unwind_row) + page - 1) / page * page;
}

/*
 * Drops unreferenced tables, least recently used first, until need bytes
 * fit. Tables the description in progress already uses are not references
 * yet but must stay; and nothing is dropped when even dropping every
 * candidate would not make room.
 */
static bool _make_room(struct unwinder *u, uint64_t need)
{
	uint64_t evictable = 0;

	if (u->stats.table_bytes + need <= u->stats.cap_bytes)
		return true;
	for (uint32_t i = 0; i < intern__count(u->file_keys); i++) {
		struct unwind_file *f = &u->files[i];

		if (f->state == FILE_LOADED && !f->refs && f->last_used < u->describing_since)
			evictable += _table_bytes(f->rows);
	}
	if (u->stats.table_bytes - evictable + need > u->stats.cap_bytes)
		return false;

	while (u->stats.table_bytes + need > u->stats.cap_bytes) {
		uint32_t victim = UINT32_MAX;
		uint64_t oldest = UINT64_MAX;
		__u32 id;

		for (uint32_t i = 0; i < intern__count(u->file_keys); i++) {
			struct unwind_file *f = &u->files[i];

			if (f->state == FILE_LOADED && !f->refs &&
			    f->last_used < u->describing_since && f->last_used < oldest) {
				oldest = f->last_used;
				victim = i;
			}
		}
		if (victim == UINT32_MAX)
			return false;
		id = victim + 1;
		bpf_map_delete_elem(u->files_fd, &id);
		u->stats.table_bytes -= _table_bytes(u->files[victim].rows);
		u->stats.rows -= u->files[victim].rows;
		u->stats.files--;
		u->stats.evictions++;
		u->files[victim].state = FILE_NEW;
		u->files[victim].rows = 0;
	}
	return true;
}

/* Room for one more staged table. */
static int _stage_slot(struct unwinder *u)
{
	uint32_t cap;
	__u32 *ids, *fds;

	if (u->nstaged < u->cap_staged)
		return 0;
	cap = u->cap_staged ? u->cap_staged * 2 : 16;
	ids = realloc(u->staged_ids, cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	u->staged_ids = ids;
	fds = realloc(u->staged_fds, cap * sizeof(*fds));
	if (!fds)
		return -ENOMEM;
	u->staged_fds = fds;
	u->cap_staged = cap;
	return 0;
}

/*
 * Rows streamed into a row array, through one STAGE_WINDOW mapping at a
 * time: the whole array mapped at once would be that much more RSS.
 */
struct row_writer {
	int fd;
	size_t total, done;		/* rows */
	char *mem;			/* the window, or NULL */
	size_t mem_off, mem_len;	/* bytes into the array */
};

static int _write_rows(void *ctx, const struct unwind_row *rows, size_t n)
{
	struct row_writer *w = ctx;

	while (n) {
		size_t off = w->done * sizeof(*rows), k;

		if (w->done == w->total)
			return -ESTALE;	/* more rows than counted: the file changed */
		if (!w->mem || off >= w->mem_off + w->mem_len) {
			size_t at = off / STAGE_WINDOW * STAGE_WINDOW, len = w->total * sizeof(*rows) - at;

			if (w->mem)
				munmap(w->mem, w->mem_len);
			w->mem_len = len < STAGE_WINDOW ? len : STAGE_WINDOW;
			w->mem_off = at;
			w->mem = mmap(NULL, w->mem_len, PROT_READ | PROT_WRITE, MAP_SHARED, w->fd, at);
			if (w->mem == MAP_FAILED) {
				w->mem = NULL;
				return -errno;
			}
		}
		k = (w->mem_off + w->mem_len - off) / sizeof(*rows);
		k = k < n ? k : n;
		memcpy(w->mem + (off - w->mem_off), rows, k * sizeof(*rows));
		w->done += k;
		rows += k;
		n -= k;
	}
	return 0;
}

/*
 * Creates the file's row array of the n rows the first build counted,
 * builds the table a second time (unwind_table__stream) straight into it
 * through mappings of it, and stages it for _publish_staged() under id.
 * Neither build holds the table: collected first, a large library's rows
 * would add megabytes to the peak RSS. Mappings, not a batch update: a
 * batch update of a table the size of libpython's is slow while the first
 * samples of the process that needs them wait; memcpy()s are not.
 */
static int _stage(struct unwinder *u, uint32_t id, int fd, int debug_fd, size_t n)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_INNER_MAP | BPF_F_MMAPABLE);
	struct row_writer w = { .total = n };
	size_t got = 0;
	int err;

	err = _stage_slot(u);
	if (err)
		return err;
	w.fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "fw_unwind_rows", sizeof(__u32),
			      sizeof(struct unwind_row), n, &opts);
	if (w.fd < 0)
		return -errno;
	err = unwind_table__stream(fd, debug_fd, _write_rows, &w, &got, NULL);
	if (w.mem)
		munmap(w.mem, w.mem_len);
	if (!err && got != n)
		err = -ESTALE;
	if (err) {
		close(w.fd);
		return err;
	}
	u->staged_ids[u->nstaged] = id;
	u->staged_fds[u->nstaged] = w.fd;
	u->nstaged++;
	return 0;
}

static int _count_rows(void *ctx, const struct unwind_row *rows, size_t n)
{
	return 0;
}

/* A staged table the kernel refused: the file is left without one. */
static void _unload(struct unwinder *u, uint32_t id, int err)
{
	struct unwind_file *f = &u->files[id - 1];

	pr_warn("cannot load an unwind table (%u rows): %s\n", f->rows, strerror(-err));
	u->stats.files--;
	u->stats.rows -= f->rows;
	u->stats.table_bytes -= _table_bytes(f->rows);
	u->stats.files_without_cfi++;
	f->state = FILE_NO_CFI;
	f->rows = 0;
}

/*
 * Puts the staged tables into unwind_files in one batch. Every update of a
 * map of maps waits for an RCU grace period (the kernel makes sure no BPF
 * program still uses what it replaced), whatever the table's size. One per
 * file made describing a process with many libraries slow, and its first
 * samples lost their stacks meanwhile; a batch waits once.
 * Kernels without batch updates of maps of maps get one update per file.
 */
static void _publish_staged(struct unwinder *u)
{
	LIBBPF_OPTS(bpf_map_batch_opts, bopts);
	__u32 done = u->nstaged;

	if (!u->nstaged)
		return;
	if (bpf_map_update_batch(u->files_fd, u->staged_ids, u->staged_fds, &done, &bopts)) {
		int err = -errno;

		/* The first `done` went in; the next one failed, unless batches do not work at all. */
		if (err != -ENOTSUPP && err != -EOPNOTSUPP && err != -EINVAL && done < u->nstaged)
			_unload(u, u->staged_ids[done++], err);
		for (uint32_t i = done; i < u->nstaged; i++)
			if (bpf_map_update_elem(u->files_fd, &u->staged_ids[i], &u->staged_fds[i], BPF_ANY))
				_unload(u, u->staged_ids[i], -errno);
	}
	/* The outer map holds its own references to the arrays. */
	for (uint32_t i = 0; i < u->nstaged; i++)
		close(u->staged_fds[i]);
	u->nstaged = 0;
}

static int _load_file(struct unwinder *u, uint32_t idx, struct binary *b)
{
	struct unwind_file *f = &u->files[idx];
	struct unwind_table_stats st;
	size_t n = 0;
	uint64_t t0 = clock__mono_ns();
	int debug_fd, err;

	debug_fd = _open_debug_file(b);
	/* The first build counts: a row array's size is fixed when it is made. */
	err = unwind_table__stream(b->fd, debug_fd, _count_rows, NULL, &n, &st);
	if (err || n == 0 || n > UINT32_MAX) {
		pr_debug("no unwind table for %s: %s\n", b->path, strerror(err ? -err : ENOENT));
		f->state = FILE_NO_CFI;
		u->stats.files_without_cfi++;
		goto out;
	}
	if (!_make_room(u, _table_bytes(n))) {
		pr_debug("unwind table of %s (%zu rows) is over the cap\n", b->path, n);
		f->state = FILE_OVER_CAP;
		f->rows = n;
		u->stats.files_over_cap++;
		goto out;
	}
	err = _stage(u, idx + 1, b->fd, debug_fd, n);
	if (err) {
		pr_warn("cannot load the unwind table of %s: %s\n", b->path, strerror(-err));
		f->state = FILE_NO_CFI;
		u->stats.files_without_cfi++;
		goto out;
	}
	f->state = FILE_LOADED;
	f->rows = n;
	u->stats.files++;
	u->stats.rows += n;
	u->stats.table_bytes += _table_bytes(n);
	pr_debug("unwind table of %s: %zu rows from %zu FDEs\n", b->path, n, st.fdes);
out:
	if (debug_fd >= 0)
		close(debug_fd);
	u->stats.build_ns += clock__mono_ns() - t0;
	return 0;
}

/* The file id (index + 1) of b's table, loading it if needed; 0 when b has none. */
static uint32_t _file_for(struct unwinder *u, struct binary *b, uint32_t *rows)
{
	const char *bid = b->elf ? elf_file__build_id(b->elf) : "";
	char key[96];
	bool added;
	int64_t idx;

	*rows = 0;
	if (b->fd < 0 || !b->elf)
		return 0;
	if (bid[0])
		snprintf(key, sizeof(key), "b:%s", bid);
	else
		snprintf(key, sizeof(key), "i:%" PRIx64 ":%" PRIu64, b->dev, b->inode);
	idx = intern__add(u->file_keys, key, strlen(key), &added);
	if (idx < 0)
		return 0;
	if (idx >= u->cap_files) {
		uint32_t cap = u->cap_files ? u->cap_files * 2 : 64;
		struct unwind_file *nf = realloc(u->files, cap * sizeof(*nf));

		if (!nf)
			return 0;
		memset(nf + u->cap_files, 0, (cap - u->cap_files) * sizeof(*nf));
		u->files = nf;
		u->cap_files = cap;
	}
	/*
	 * An over-cap file is built again only once its known size fits, so
	 * that re-describing a process does not re-parse it every time.
	 */
	if (u->files[idx].state == FILE_OVER_CAP &&
	    u->stats.table_bytes + _table_bytes(u->files[idx].rows) <=
	    u->stats.cap_bytes) {
		u->stats.files_over_cap--;
		u->files[idx].state = FILE_NEW;
	}
	if (u->files[idx].state == FILE_NEW && !u->files[idx].wanted && u->on_demand_bytes &&
	    elf_file__cfi_bytes(b->elf) >= u->on_demand_bytes) {
		u->files[idx].state = FILE_ON_DEMAND;
		u->stats.files_on_demand++;
	}
	if (u->files[idx].state == FILE_NEW)
		_load_file(u, idx, b);
	/* Its id without rows: BPF walks its frames by frame pointers and asks for it. */
	if (u->files[idx].state == FILE_ON_DEMAND)
		return idx + 1;
	if (u->files[idx].state != FILE_LOADED)
		return 0;
	u->files[idx].last_used = ++u->clock;
	*rows = u->files[idx].rows;
	return idx + 1;
}

/* The files samples asked for since the last call (wanted_tables) become buildable. */
static void _take_wanted(struct unwinder *u)
{
	__u32 key, next, *prev = NULL;
	__u32 ids[64];
	uint32_t n = 0;

	if (u->wanted_fd < 0)
		return;
	/* Collected first: deleting while iterating would restart the walk. */
	while (n < sizeof(ids) / sizeof(ids[0]) && !bpf_map_get_next_key(u->wanted_fd, prev, &next)) {
		ids[n++] = next;
		key = next;
		prev = &key;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct unwind_file *f;

		bpf_map_delete_elem(u->wanted_fd, &ids[i]);
		if (!ids[i] || ids[i] > intern__count(u->file_keys))
			continue;
		f = &u->files[ids[i] - 1];
		if (f->state != FILE_ON_DEMAND)
			continue;	/* a sample taken before its process was described again */
		f->state = FILE_NEW;
		f->wanted = true;
		u->stats.files_on_demand--;
		u->stats.files_wanted++;
	}
}

static int _describe_mapping(void *ctx, const struct proc_mapping *m, struct binary *b)
{
	struct unwinder *u = ctx;
	struct fw_proc_mappings *pm = u->scratch;
	struct fw_mapping *e;
	uint64_t bias;

	if (pm->n == FW_MAX_PROC_MAPPINGS)
		return 0;
	e = &pm->m[pm->n++];
	*e = (struct fw_mapping){ .start = m->start, .end = m->end };
	/*
	 * Anonymous (JIT) and special mappings are described too, without a
	 * table, so BPF knows their pcs are expected and walks frame pointers.
	 */
	if (!b || !b->elf || elf_file__load_bias(b->elf, m->start, m->end, m->offset, &bias))
		return 0;
	/*
	 * Our own executable (the agent or record sampling itself) is walked
	 * by its frame pointers: its table, with the libraries linked in,
	 * costs more peak memory to build than the profiler's memory budget
	 * spares for its own profile.
	 */
	if (b->inode == u->self_inode && b->dev == u->self_dev)
		return 0;
	e->bias = bias;
	e->file_id = _file_for(u, b, &e->row_count);
	if (e->file_id)
		u->scratch_files[pm->n - 1] = e->file_id;
	return 0;
}

static struct unwind_pid **_pid_slot(struct unwinder *u, pid_t pid)
{
	struct unwind_pid **pp = &u->pids[(uint32_t)pid % PID_BUCKETS];

	while (*pp && (*pp)->pid != pid)
		pp = &(*pp)->next;
	return pp;
}

static void _release_files(struct unwinder *u, struct unwind_pid *p)
{
	for (uint32_t i = 0; i < p->nfiles; i++)
		if (u->files[p->files[i] - 1].refs)
			u->files[p->files[i] - 1].refs--;
	free(p->files);
	p->files = NULL;
	p->nfiles = 0;
}

int unwinder__add_pid(struct unwinder *u, pid_t pid)
{
	struct unwind_pid **pp = _pid_slot(u, pid), *p = *pp;
	__u32 key = pid;
	uint32_t nfiles = 0;
	int err;

	memset(u->scratch, 0, sizeof(*u->scratch));
	memset(u->scratch_files, 0, FW_MAX_PROC_MAPPINGS * sizeof(*u->scratch_files));
	u->describing_since = ++u->clock;
	err = proc_table__for_each_mapping(u->procs, pid, _describe_mapping, u);
	_publish_staged(u);
	if (err)
		return err;

	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return -ENOMEM;
		p->pid = pid;
		*pp = p;
		u->stats.pids++;
	} else {
		_release_files(u, p);
	}
	p->files = calloc(u->scratch->n + 1, sizeof(*p->files));
	if (!p->files)
		return -ENOMEM;
	for (uint32_t i = 0; i < u->scratch->n; i++) {
		uint32_t id = u->scratch_files[i];

		if (id) {
			u->files[id - 1].refs++;
			p->files[nfiles++] = id;
		}
	}
	p->nfiles = nfiles;
	p->described_ns = clock__mono_ns();
	if (bpf_map_update_elem(u->procs_fd, &key, u->scratch, BPF_ANY))
		return -errno;
	return 0;
}

void unwinder__remove_pid(struct unwinder *u, pid_t pid)
{
	struct unwind_pid **pp = _pid_slot(u, pid), *p = *pp;
	__u32 key = pid;

	bpf_map_delete_elem(u->procs_fd, &key);
	if (!p)
		return;
	*pp = p->next;
	_release_files(u, p);
	free(p);
	u->stats.pids--;
}

/*
 * A process whose pcs keep falling outside its known mappings (ld.so
 * mapping libraries right after exec, dlopen, a JIT that maps code all the
 * time) is re-read at once the first time, then after 100 ms, 200 ms, ...
 * up to every 5 s.
 */
static uint64_t _redescribe_interval_ns(const struct unwind_pid *p)
{
	uint32_t shift = p->redescribed < 7 ? p->redescribed : 7;
	uint64_t ns = shift ? 100000000ULL << (shift - 1) : 0;

	return ns < 5000000000ULL ? ns : 5000000000ULL;
}

static void _queue(struct unwinder *u, pid_t pid, bool maps_changed)
{
	for (uint32_t i = 0; i < u->npending; i++) {
		if (u->pending[i].pid == pid) {
			u->pending[i].maps_changed |= maps_changed;
			return;
		}
	}
	if (u->npending == u->cap_pending) {
		uint32_t cap = u->cap_pending ? u->cap_pending * 2 : 64;
		struct pending *np = realloc(u->pending, cap * sizeof(*np));

		if (!np)
			return;
		u->pending = np;
		u->cap_pending = cap;
	}
	u->pending[u->npending++] = (struct pending){ .pid = pid, .maps_changed = maps_changed };
}

void unwinder__note_sample(struct unwinder *u, pid_t pid, uint32_t flags)
{
	struct unwind_pid *p;

	if (!(flags & (FW_SAMPLE_NO_TABLES | FW_SAMPLE_UNKNOWN_MAPPING | FW_SAMPLE_WANTS_TABLE)))
		return;
	p = *_pid_slot(u, pid);
	if (p && (flags & FW_SAMPLE_WANTS_TABLE) &&
	    clock__mono_ns() - p->described_ns >= WANTED_REDESCRIBE_NS) {
		_queue(u, pid, flags & (FW_SAMPLE_NO_TABLES | FW_SAMPLE_UNKNOWN_MAPPING));
		return;
	}
	if (p && clock__mono_ns() - p->described_ns < _redescribe_interval_ns(p))
		return;
	_queue(u, pid, true);
}

void unwinder__queue(struct unwinder *u, pid_t pid)
{
	_queue(u, pid, true);
}

void unwinder__add_pending(struct unwinder *u, void (*described)(void *ctx, pid_t pid), void *ctx)
{
	if (u->npending)
		_take_wanted(u);
	for (uint32_t i = 0; i < u->npending; i++) {
		pid_t pid = u->pending[i].pid;
		bool maps_changed = u->pending[i].maps_changed;
		struct unwind_pid *p = *_pid_slot(u, pid);
		int err;

		/* Known processes come back here because their maps changed, or for a table. */
		if (p && maps_changed) {
			proc_table__exec(u->procs, pid);
			p->redescribed++;
		}
		err = unwinder__add_pid(u, pid);
		if (err && err != -ESRCH)
			pr_debug("cannot describe pid %d to the unwinder: %s\n", pid, strerror(-err));
		if (!err && described && maps_changed)
			described(ctx, pid);
	}
	u->npending = 0;
}

void unwinder__stats(const struct unwinder *u, struct unwinder_stats *out)
{
	*out = u->stats;
}
