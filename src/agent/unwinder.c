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
 * Chunks built per drain at most (a millisecond or two each on libLLVM);
 * more wait for the next drain, 100 ms later.
 */
#define WANTED_PER_ROUND 128
/*
 * Whole tables may fill this much of the cap (in quarters) and no more:
 * the rest is kept for chunks, so that the large file a process runs gets
 * its chunks however many small libraries it maps.
 */
#define WHOLE_CAP_QUARTERS 3
/* sizeof(struct bpf_array), the kernel's header of an array map: 312 bytes on 6.18. */
#define ARRAY_HEADER_BYTES 320
#define STAGE_WINDOW (64u << 10)	/* bytes of a row array mapped at a time; whole pages */
#ifndef ENOTSUPP
#define ENOTSUPP 524		/* the kernel's "not supported", which BPF batch commands return */
#endif

/*
 * FILE_CHUNKED: rows built a chunk at a time where samples land (see
 * fw_mapping): a large file (unwinder__set_on_demand()), or one whose
 * whole table would not fit beside the others. No file is refused for its
 * size: its chunks compete for the cap with the other tables instead.
 */
enum file_state { FILE_NEW, FILE_LOADED, FILE_NO_CFI, FILE_CHUNKED };

struct unwind_file {
	enum file_state state;
	bool chunk_used;	/* FILE_CHUNKED: a sample has needed a chunk of it */
	uint32_t rows;		/* FILE_LOADED: its table's */
	uint32_t refs;		/* processes whose description uses this table */
	uint64_t last_used;	/* unwinder clock at the last reference */
	/*
	 * FILE_CHUNKED while a process maps it: the file and its debug file
	 * (or -1), kept open to build chunks from as samples ask for them.
	 */
	int fd, debug_fd;
};

/* A loaded chunk of a FILE_CHUNKED file's rows. */
struct unwind_chunk {
	struct fw_chunk_key key;
	uint32_t rows;
	uint64_t last_used;	/* unwinder clock when built or last asked for */
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


struct unwinder {
	int files_fd, chunks_fd, rules_fd, procs_fd, wanted_fd;
	struct intern *rule_keys;	/* rule (type, offset, rbp slot) -> its index in unwind_rules */
	uint64_t on_demand_bytes;	/* 0: every table at once */
	struct proc_table *procs;
	struct intern *file_keys;	/* key -> index in files[] */
	struct unwind_file *files;
	uint32_t cap_files;
	struct unwind_pid *pids[PID_BUCKETS];
	uint64_t clock;
	uint64_t describing_since;	/* clock when the current description began */
	struct unwinder_stats stats;
	pid_t *pending;			/* processes to (re-)describe after this drain */
	uint32_t npending, cap_pending;
	struct fw_proc_mappings *scratch;	/* one process's description being built */
	uint32_t *scratch_files;
	/*
	 * Tables built for the description in progress (under staged_ids),
	 * or chunks built in this round (under staged_keys), published
	 * together.
	 */
	__u32 *staged_ids;
	struct fw_chunk_key *staged_keys;
	__u32 *staged_fds;
	uint32_t nstaged, cap_staged;
	/* Loaded chunks, unordered; at most FW_MAX_CHUNKS. */
	struct unwind_chunk *chunks;
	uint32_t nchunks;
	/* Chunks evicted, to delete from unwind_chunks in one batch (_delete_evicted()). */
	struct fw_chunk_key *evicted;
	uint32_t nevicted, cap_evicted;
	bool chunks_wanted;		/* a sample asked for a chunk since the last drain */
	uint64_t whole_bytes;		/* the part of stats.table_bytes in whole tables */
	uint64_t self_dev, self_inode;	/* our own executable, as binary keys it */
};

/*
 * The index of rule r (its pc ignored) in unwind_rules, added there when
 * new; 0, UNWIND_NO_CFI's (added first), when the map is full.
 */
static uint16_t _rule_id(struct unwinder *u, const struct unwind_row *r)
{
	uint8_t key[4] = { r->cfa_type, r->rbp_slot, (uint8_t)r->cfa_offset,
			   (uint8_t)((uint16_t)r->cfa_offset >> 8) };
	struct unwind_row rule = *r;
	bool added;
	int64_t id = intern__add(u->rule_keys, key, sizeof(key), &added);
	__u32 k = (__u32)id;

	if (id < 0 || id >= FW_MAX_RULES)
		return 0;
	if (added) {
		rule.pc = 0;
		if (bpf_map_update_elem(u->rules_fd, &k, &rule, BPF_ANY))
			return 0;	/* the rule stays unwritten: its rows walk by frame pointers */
		u->stats.rules++;
	}
	return (uint16_t)id;
}

/*
 * The kernel memory of a chunk of n rows (struct fw_chunk_row, two an
 * element, after the count's): an array that is not mappable is one
 * kmalloc() of its header and elements up to 32 KiB, a power of two
 * (slab classes, then whole pages), and page-rounded vmalloc() beyond.
 */
static uint64_t _chunk_bytes(uint64_t n)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t size = ARRAY_HEADER_BYTES + 8 * (1 + (n + 1) / 2), b = 8;

	if (size > 8 * page)
		return (size + page - 1) / page * page;
	while (b < size)
		b *= 2;
	return b;
}

struct unwinder *unwinder__new(const struct unwinder_maps *maps, struct proc_table *procs,
			       uint64_t cap_bytes)
{
	struct unwinder *u = calloc(1, sizeof(*u));

	if (!u)
		return NULL;
	u->files_fd = maps->files_fd;
	u->chunks_fd = maps->chunks_fd;
	u->rules_fd = maps->rules_fd;
	u->procs_fd = maps->procs_fd;
	u->wanted_fd = maps->wanted_fd;
	u->procs = procs;
	u->stats.cap_bytes = cap_bytes;
	/* unwind_rules is allocated whole at load: it counts against the cap from the start. */
	u->stats.table_bytes = (uint64_t)FW_MAX_RULES * sizeof(struct unwind_row) + ARRAY_HEADER_BYTES;
	u->rule_keys = intern__new();
	u->file_keys = intern__new();
	u->scratch = calloc(1, sizeof(*u->scratch));
	u->scratch_files = calloc(FW_MAX_PROC_MAPPINGS, sizeof(*u->scratch_files));
	u->chunks = calloc(FW_MAX_CHUNKS, sizeof(*u->chunks));
	if (!u->file_keys || !u->rule_keys || !u->scratch || !u->scratch_files || !u->chunks ||
	    _rule_id(u, &(struct unwind_row){ .cfa_type = UNWIND_NO_CFI }) != 0) {
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

static void _close_file_fds(struct unwind_file *f)
{
	if (f->fd >= 0)
		close(f->fd);
	if (f->debug_fd >= 0)
		close(f->debug_fd);
	f->fd = f->debug_fd = -1;
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
	for (uint32_t i = 0; u->files && i < intern__count(u->file_keys); i++)
		_close_file_fds(&u->files[i]);
	intern__free(u->file_keys);
	intern__free(u->rule_keys);
	free(u->pending);
	free(u->files);
	free(u->chunks);
	free(u->evicted);
	free(u->scratch);
	free(u->scratch_files);
	for (uint32_t i = 0; i < u->nstaged; i++)
		close(u->staged_fds[i]);
	free(u->staged_ids);
	free(u->staged_keys);
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
 * The kernel memory of a whole table of n rows: a mappable array (see
 * _stage) takes whole pages, and one more for its header (the rows must
 * start on a page), which the cap must count.
 */
static uint64_t _table_bytes(uint64_t n)
{
	uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);

	return page + (n * sizeof(struct unwind_row) + page - 1) / page * page;
}

/* The index of key in u->chunks, or UINT32_MAX. */
static uint32_t _chunk_index(const struct unwinder *u, const struct fw_chunk_key *key)
{
	for (uint32_t i = 0; i < u->nchunks; i++)
		if (u->chunks[i].key.file_id == key->file_id && u->chunks[i].key.chunk == key->chunk)
			return i;
	return UINT32_MAX;
}

/*
 * Deletes the evicted chunks from unwind_chunks. Each delete from a map of
 * maps waits for an RCU grace period (8-25 ms), as an update does: one
 * batch waits once. Called before the round's new chunks are published,
 * so that a chunk evicted and built again in one round stays.
 */
static void _delete_evicted(struct unwinder *u)
{
	LIBBPF_OPTS(bpf_map_batch_opts, bopts);
	__u32 done = u->nevicted;

	if (!u->nevicted)
		return;
	if (bpf_map_delete_batch(u->chunks_fd, u->evicted, &done, &bopts))
		for (uint32_t i = done; i < u->nevicted; i++)
			bpf_map_delete_elem(u->chunks_fd, &u->evicted[i]);
	u->nevicted = 0;
}

static void _drop_chunk(struct unwinder *u, uint32_t i)
{
	struct unwind_chunk *c = &u->chunks[i];

	if (u->nevicted == u->cap_evicted) {
		uint32_t cap = u->cap_evicted ? u->cap_evicted * 2 : 64;
		struct fw_chunk_key *v = realloc(u->evicted, cap * sizeof(*v));

		if (v) {
			u->evicted = v;
			u->cap_evicted = cap;
		}
	}
	if (u->nevicted < u->cap_evicted)
		u->evicted[u->nevicted++] = c->key;
	else
		bpf_map_delete_elem(u->chunks_fd, &c->key);
	u->stats.table_bytes -= _chunk_bytes(c->rows);
	u->stats.rows -= c->rows;
	u->stats.chunks--;
	u->stats.chunk_evictions++;
	*c = u->chunks[--u->nchunks];
}

/* Whether need more bytes fit: under the cap, and for a whole table under its share. */
static bool _fits(const struct unwinder *u, uint64_t need, bool whole)
{
	return u->stats.table_bytes + need <= u->stats.cap_bytes &&
	       (!whole || u->whole_bytes + need <= u->stats.cap_bytes / 4 * WHOLE_CAP_QUARTERS);
}

/*
 * The least recently used table that may go: a whole table no process
 * references, or a chunk (one still in use comes back when a sample asks
 * for it again); only whole tables when whole_only, only chunks when
 * chunk_only. Tables used since
 * `since` (the description or the chunk round in progress) stay. Sets
 * *chunk when the victim is a chunk; false when there is none.
 */
static bool _victim(const struct unwinder *u, uint64_t since, bool whole_only, bool chunk_only,
		    uint32_t *idx, bool *chunk)
{
	uint64_t oldest = UINT64_MAX;

	for (uint32_t i = 0; i < intern__count(u->file_keys) && !chunk_only; i++) {
		const struct unwind_file *f = &u->files[i];

		if (f->state == FILE_LOADED && !f->refs && f->last_used < since &&
		    f->last_used < oldest) {
			oldest = f->last_used;
			*idx = i;
			*chunk = false;
		}
	}
	for (uint32_t i = 0; i < u->nchunks && !whole_only; i++) {
		if (u->chunks[i].last_used < since && u->chunks[i].last_used < oldest) {
			oldest = u->chunks[i].last_used;
			*idx = i;
			*chunk = true;
		}
	}
	return oldest != UINT64_MAX;
}

static void _drop_whole(struct unwinder *u, uint32_t i)
{
	__u32 id = i + 1;

	bpf_map_delete_elem(u->files_fd, &id);
	u->stats.table_bytes -= _table_bytes(u->files[i].rows);
	u->whole_bytes -= _table_bytes(u->files[i].rows);
	u->stats.rows -= u->files[i].rows;
	u->stats.files--;
	u->stats.evictions++;
	u->files[i].state = FILE_NEW;
	u->files[i].rows = 0;
}

/*
 * Drops tables, least recently used first (see _victim()), until need
 * more bytes fit (_fits()); nothing is dropped when even dropping every
 * candidate would not make room.
 */
static bool _make_room(struct unwinder *u, uint64_t need, uint64_t since, bool whole)
{
	uint64_t all = 0, wholes = 0;

	if (_fits(u, need, whole))
		return true;
	for (uint32_t i = 0; i < intern__count(u->file_keys); i++) {
		struct unwind_file *f = &u->files[i];

		if (f->state == FILE_LOADED && !f->refs && f->last_used < since)
			wholes += _table_bytes(f->rows);
	}
	all = wholes;
	for (uint32_t i = 0; i < u->nchunks; i++)
		if (u->chunks[i].last_used < since)
			all += _chunk_bytes(u->chunks[i].rows);
	if (u->stats.table_bytes - all + need > u->stats.cap_bytes ||
	    (whole && u->whole_bytes - wholes + need > u->stats.cap_bytes / 4 * WHOLE_CAP_QUARTERS))
		return false;

	while (!_fits(u, need, whole)) {
		bool over_share = whole && !_fits(u, need, true) && _fits(u, need, false);
		bool chunk;
		uint32_t i;

		if (!_victim(u, since, over_share, false, &i, &chunk))
			return false;
		if (chunk)
			_drop_chunk(u, i);
		else
			_drop_whole(u, i);
	}
	return true;
}

/* Room for one more staged table. */
static int _stage_slot(struct unwinder *u)
{
	struct fw_chunk_key *keys;
	uint32_t cap;
	__u32 *ids, *fds;

	if (u->nstaged < u->cap_staged)
		return 0;
	cap = u->cap_staged ? u->cap_staged * 2 : 16;
	ids = realloc(u->staged_ids, cap * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	u->staged_ids = ids;
	keys = realloc(u->staged_keys, cap * sizeof(*keys));
	if (!keys)
		return -ENOMEM;
	u->staged_keys = keys;
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

/* A staged table the kernel refused: the file (or chunk) is left without one. */
static void _unload(struct unwinder *u, uint32_t k, int err)
{
	struct unwind_file *f = &u->files[u->staged_ids[k] - 1];
	uint32_t i = _chunk_index(u, &u->staged_keys[k]);

	if (f->state == FILE_CHUNKED) {
		pr_warn("cannot load an unwind chunk: %s\n", strerror(-err));
		if (i == UINT32_MAX)
			return;
		u->stats.rows -= u->chunks[i].rows;
		u->stats.table_bytes -= _chunk_bytes(u->chunks[i].rows);
		u->stats.chunks--;
		u->chunks[i] = u->chunks[--u->nchunks];
		return;
	}

	pr_warn("cannot load an unwind table (%u rows): %s\n", f->rows, strerror(-err));
	u->stats.files--;
	u->stats.rows -= f->rows;
	u->stats.table_bytes -= _table_bytes(f->rows);
	u->whole_bytes -= _table_bytes(f->rows);
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
static void _publish_staged(struct unwinder *u, bool chunks)
{
	LIBBPF_OPTS(bpf_map_batch_opts, bopts);
	int map = chunks ? u->chunks_fd : u->files_fd;
	__u32 done = u->nstaged;
	void *keys = chunks ? (void *)u->staged_keys : (void *)u->staged_ids;
	size_t key_size = chunks ? sizeof(*u->staged_keys) : sizeof(*u->staged_ids);

	if (!u->nstaged)
		return;
	if (bpf_map_update_batch(map, keys, u->staged_fds, &done, &bopts)) {
		int err = -errno;

		/* The first `done` went in; the next one failed, unless batches do not work at all. */
		if (err != -ENOTSUPP && err != -EOPNOTSUPP && err != -EINVAL && done < u->nstaged)
			_unload(u, done++, err);
		for (uint32_t i = done; i < u->nstaged; i++)
			if (bpf_map_update_elem(map, (char *)keys + i * key_size, &u->staged_fds[i],
						BPF_ANY))
				_unload(u, i, -errno);
	}
	/* The outer map holds its own references to the arrays. */
	for (uint32_t i = 0; i < u->nstaged; i++)
		close(u->staged_fds[i]);
	u->nstaged = 0;
}

/*
 * Makes the file's rows come a chunk at a time: its table is not built,
 * only the file kept open to build chunks from.
 */
static void _chunk_file(struct unwinder *u, uint32_t idx, struct binary *b)
{
	struct unwind_file *f = &u->files[idx];

	if (f->state != FILE_CHUNKED) {
		f->state = FILE_CHUNKED;
		u->stats.files_chunked++;
	}
	if (f->fd < 0) {
		f->fd = fcntl(b->fd, F_DUPFD_CLOEXEC, 3);
		f->debug_fd = _open_debug_file(b);
	}
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
	if (!_make_room(u, _table_bytes(n), u->describing_since, true)) {
		pr_debug("unwind table of %s (%zu rows) does not fit beside the others: "
			 "built a chunk at a time\n", b->path, n);
		_chunk_file(u, idx, b);
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
	u->whole_bytes += _table_bytes(n);
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
		for (uint32_t i = u->cap_files; i < cap; i++)
			nf[i].fd = nf[i].debug_fd = -1;
		u->files = nf;
		u->cap_files = cap;
	}
	if (u->files[idx].state == FILE_NEW && u->on_demand_bytes &&
	    elf_file__cfi_bytes(b->elf) >= u->on_demand_bytes)
		_chunk_file(u, idx, b);
	if (u->files[idx].state == FILE_NEW)
		_load_file(u, idx, b);
	/* Its id without rows: BPF looks its chunks up, and asks for those not built. */
	if (u->files[idx].state == FILE_CHUNKED) {
		_chunk_file(u, idx, b);	/* opens it again if no process mapped it for a while */
		u->files[idx].last_used = ++u->clock;
		return idx + 1;
	}
	if (u->files[idx].state != FILE_LOADED)
		return 0;
	u->files[idx].last_used = ++u->clock;
	*rows = u->files[idx].rows;
	return idx + 1;
}

/*
 * The chunk array of the n rows starting at the chunk's address lo (struct
 * fw_chunk_row): its fd, or -errno.
 */
static int _chunk_map(struct unwinder *u, const struct unwind_row *rows, size_t n, uint64_t lo)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_INNER_MAP);
	LIBBPF_OPTS(bpf_map_batch_opts, bopts);
	uint32_t m = 1 + (uint32_t)(n + 1) / 2, done = m;
	struct fw_chunk_elem *v = calloc(m, sizeof(*v));
	__u32 *keys = calloc(m, sizeof(*keys));
	int fd = -ENOMEM;

	if (!v || !keys)
		goto out;
	memcpy(&v[0], &(uint64_t){ n }, sizeof(v[0]));
	for (size_t i = 0; i < n; i++) {
		struct fw_chunk_row *r = &v[1 + i / 2].r[i & 1];

		r->pc_off = (__u16)(rows[i].pc - lo);
		r->rule = _rule_id(u, &rows[i]);
		u->stats.rules_full += !r->rule && rows[i].cfa_type != UNWIND_NO_CFI;
	}
	for (uint32_t i = 0; i < m; i++)
		keys[i] = i;
	fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "fw_unwind_chunk", sizeof(__u32), sizeof(*v), m, &opts);
	if (fd < 0) {
		fd = -errno;
		goto out;
	}
	/* One call for the whole array; one a row where batches are not there (before 5.6). */
	if (bpf_map_update_batch(fd, keys, v, &done, &bopts)) {
		for (uint32_t i = 0; i < m; i++) {
			if (bpf_map_update_elem(fd, &keys[i], &v[i], BPF_ANY)) {
				int err = -errno;

				close(fd);
				fd = err;
				break;
			}
		}
	}
out:
	free(v);
	free(keys);
	return fd;
}

/*
 * Builds the chunk a sample asked for and stages it for _publish_staged().
 * A chunk the file has no CFI for (or that cannot be read) gets one
 * UNWIND_NO_CFI row, so that BPF stops asking and walks it by frame
 * pointers. Chunks used since `since` (this round's) stay.
 */
static void _load_chunk(struct unwinder *u, const struct fw_chunk_key *key, uint64_t since)
{
	uint64_t lo = (uint64_t)key->chunk << FW_CHUNK_SHIFT, t0 = clock__mono_ns();
	struct unwind_row none = { .pc = (__u32)lo, .cfa_type = UNWIND_NO_CFI };
	struct unwind_row *rows = NULL;
	const struct unwind_row *v = &none;
	struct unwind_file *f;
	bool chunk_victim;
	uint32_t i;
	size_t n = 1;
	int fd, err;

	if (!key->file_id || key->file_id > intern__count(u->file_keys))
		return;
	f = &u->files[key->file_id - 1];
	if (f->state != FILE_CHUNKED || f->fd < 0 || key->chunk > (UINT32_MAX >> FW_CHUNK_SHIFT))
		return;	/* asked for before its process went */
	i = _chunk_index(u, key);
	if (i != UINT32_MAX) {
		u->chunks[i].last_used = ++u->clock;	/* asked for before it was published */
		return;
	}
	err = unwind_table__build_range(f->fd, f->debug_fd, lo, lo + FW_CHUNK_BYTES, &rows, &n, NULL);
	if (err) {
		pr_debug("unwind chunk %u:%#" PRIx64 ": %s: walked by frame pointers\n",
			 key->file_id, lo, strerror(-err));
		n = 1;
	} else {
		v = rows;
	}
	u->stats.build_ns += clock__mono_ns() - t0;
	if (u->nchunks == FW_MAX_CHUNKS && _victim(u, since, false, true, &i, &chunk_victim))
		_drop_chunk(u, i);
	if (u->nchunks == FW_MAX_CHUNKS || !_make_room(u, _chunk_bytes(n), since, false) ||
	    _stage_slot(u)) {
		u->stats.chunks_no_room++;	/* asked for again by the next sample there */
		goto out;
	}
	fd = _chunk_map(u, v, n, lo);
	if (fd < 0) {
		pr_warn("cannot load an unwind chunk (%zu rows): %s\n", n, strerror(-fd));
		goto out;
	}
	u->staged_ids[u->nstaged] = key->file_id;
	u->staged_keys[u->nstaged] = *key;
	u->staged_fds[u->nstaged++] = fd;
	u->chunks[u->nchunks++] = (struct unwind_chunk){ .key = *key, .rows = (uint32_t)n,
							  .last_used = ++u->clock };
	u->stats.chunks++;
	u->stats.chunk_builds++;
	u->stats.rows += n;
	u->stats.table_bytes += _chunk_bytes(n);
	if (!f->chunk_used)
		u->stats.files_chunk_used++;
	f->chunk_used = true;
	pr_debug("unwind chunk %u:%#" PRIx64 ": %zu rows\n", key->file_id, lo, n);
out:
	free(rows);
}

/* Builds the chunks samples asked for since the last call (wanted_chunks). */
static void _take_wanted(struct unwinder *u)
{
	struct fw_chunk_key keys[WANTED_PER_ROUND], key, next, *prev = NULL;
	uint64_t since = ++u->clock;
	uint32_t n = 0;

	if (u->wanted_fd < 0)
		return;
	/* Collected first: deleting while iterating would restart the walk. */
	while (n < WANTED_PER_ROUND && !bpf_map_get_next_key(u->wanted_fd, prev, &next)) {
		keys[n++] = next;
		key = next;
		prev = &key;
	}
	/* Deleted before the build: a sample that asks meanwhile asks again. */
	for (uint32_t i = 0; i < n; i++)
		bpf_map_delete_elem(u->wanted_fd, &keys[i]);
	for (uint32_t i = 0; i < n; i++)
		_load_chunk(u, &keys[i], since);
	_delete_evicted(u);
	_publish_staged(u, true);
	u->chunks_wanted = n == WANTED_PER_ROUND;
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

/*
 * Drops the references of a process's old description: taken after its
 * new one's, so that a file both use keeps its fds. A chunked file no
 * process maps any more is closed (its chunks stay until evicted).
 */
static void _release_files(struct unwinder *u, uint32_t *files, uint32_t nfiles)
{
	for (uint32_t i = 0; i < nfiles; i++) {
		struct unwind_file *f = &u->files[files[i] - 1];

		if (f->refs)
			f->refs--;
		if (!f->refs)
			_close_file_fds(f);
	}
	free(files);
}

int unwinder__add_pid(struct unwinder *u, pid_t pid)
{
	struct unwind_pid **pp = _pid_slot(u, pid), *p = *pp;
	__u32 key = pid;
	uint32_t nfiles = 0, old_n, *old;
	int err;

	memset(u->scratch, 0, sizeof(*u->scratch));
	memset(u->scratch_files, 0, FW_MAX_PROC_MAPPINGS * sizeof(*u->scratch_files));
	u->describing_since = ++u->clock;
	err = proc_table__for_each_mapping(u->procs, pid, _describe_mapping, u);
	_delete_evicted(u);
	_publish_staged(u, false);
	if (err)
		return err;

	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return -ENOMEM;
		p->pid = pid;
		*pp = p;
		u->stats.pids++;
	}
	old = p->files;
	old_n = p->nfiles;
	p->files = calloc(u->scratch->n + 1, sizeof(*p->files));
	if (!p->files) {
		p->files = old;
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < u->scratch->n; i++) {
		uint32_t id = u->scratch_files[i];

		if (id) {
			u->files[id - 1].refs++;
			p->files[nfiles++] = id;
		}
	}
	p->nfiles = nfiles;
	_release_files(u, old, old_n);
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
	_release_files(u, p->files, p->nfiles);
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

static void _queue(struct unwinder *u, pid_t pid)
{
	for (uint32_t i = 0; i < u->npending; i++)
		if (u->pending[i] == pid)
			return;
	if (u->npending == u->cap_pending) {
		uint32_t cap = u->cap_pending ? u->cap_pending * 2 : 64;
		pid_t *np = realloc(u->pending, cap * sizeof(*np));

		if (!np)
			return;
		u->pending = np;
		u->cap_pending = cap;
	}
	u->pending[u->npending++] = pid;
}

void unwinder__note_sample(struct unwinder *u, pid_t pid, uint32_t flags)
{
	struct unwind_pid *p;

	/* A chunk to build: the process's description stays as it is. */
	if (flags & FW_SAMPLE_WANTS_TABLE)
		u->chunks_wanted = true;
	if (!(flags & (FW_SAMPLE_NO_TABLES | FW_SAMPLE_UNKNOWN_MAPPING)))
		return;
	p = *_pid_slot(u, pid);
	if (p && clock__mono_ns() - p->described_ns < _redescribe_interval_ns(p))
		return;
	_queue(u, pid);
}

void unwinder__queue(struct unwinder *u, pid_t pid)
{
	_queue(u, pid);
}

void unwinder__add_pending(struct unwinder *u, void (*described)(void *ctx, pid_t pid), void *ctx)
{
	if (u->chunks_wanted)
		_take_wanted(u);
	for (uint32_t i = 0; i < u->npending; i++) {
		pid_t pid = u->pending[i];
		struct unwind_pid *p = *_pid_slot(u, pid);
		int err;

		/* Known processes come back here because their maps changed. */
		if (p) {
			proc_table__exec(u->procs, pid);
			p->redescribed++;
		}
		err = unwinder__add_pid(u, pid);
		if (err && err != -ESRCH)
			pr_debug("cannot describe pid %d to the unwinder: %s\n", pid, strerror(-err));
		if (!err && described)
			described(ctx, pid);
	}
	u->npending = 0;
}

void unwinder__stats(const struct unwinder *u, struct unwinder_stats *out)
{
	*out = u->stats;
}
