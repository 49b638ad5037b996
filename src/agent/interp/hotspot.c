// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/bpf/hotspot.h"
#include "agent/interp/hotspot.h"
#include "agent/interp/hotspot_vmstructs.h"
#include "agent/interp/interp.h"
#include "agent/procmaps.h"
#include "agent/proc_table.h"
#include "common/clock.h"
#include "common/intern.h"
#include "common/log.h"
#include "symbolize/elf_file.h"

/* What naming frames needs of one JVM, from its vmStructs. */
struct hotspot_layout {
	uint16_t blob_name, blob_code_begin;
	uint16_t cm_method, cm_scopes_data;	/* CompiledMethod::_method, _scopes_data_begin */
	uint16_t nm_metadata, nm_scopes_pcs, nm_deps;	/* nmethod::_*_offset (int) */
	uint16_t nm_size;			/* sizeof(nmethod) */
	uint16_t pc_size, pc_offset, pc_scope;	/* PcDesc */
	uint16_t method_const;
	uint16_t cm_constants, cm_flags, cm_code_size, cm_name_index, cm_size_words;
	uint16_t const_size;			/* sizeof(ConstMethod) */
	uint16_t cp_holder, cp_source_index, cp_size;
	uint16_t klass_name, sym_length, sym_body;
	uint32_t has_lines;			/* ConstMethod::_has_linenumber_table */
};

struct hotspot_proc {
	pid_t pid;
	uint64_t epoch;		/* this image's entries in the caches */
	struct fw_hs_proc bpf;	/* as described to BPF: code cache, heaps */
	struct hotspot_layout l;
};

struct vm_tables;

struct pid_entry {
	pid_t pid;
	uint8_t checks;
	uint64_t first_ns, next_check_ns;
	struct vm_tables *tables;	/* read once, while the JVM starts */
	struct hotspot_proc *proc;
	struct pid_entry *next;
};

#define PID_BUCKETS 1024
/*
 * A process with neither libjvm.so nor the java launcher's libjli.so
 * mapped after MAX_CHECKS_NO_JVM looks (40, 80, 160 ms apart) is not a JVM.
 * A JVM still starting is looked at again every STARTING_NS, for up to
 * STARTING_MAX_NS: its Java code runs (and is sampled) as soon as its code
 * cache exists, and after its vmStructs were read once a look costs a few
 * reads.
 */
#define MAX_CHECKS 255
#define MAX_CHECKS_NO_JVM 4
#define STARTING_NS (20ULL * 1000000ULL)
#define STARTING_MAX_NS (60ULL * 1000000000ULL)
#define METHOD_CACHE_MAX 65536
#define PC_CACHE_MAX 16384
/* Compiled code moves: names found for a pc are trusted this long. */
#define PC_CACHE_NS (10ULL * 1000000000ULL)
#define LINES_MAX 65536
#define NMETHOD_DEBUG_MAX (4u << 20)

/* A Method*, named. */
struct method_entry {
	char *function, *file;
	uint8_t *lines;		/* compressed line number table, or NULL */
	uint32_t nlines;
};

/* A compiled pc: the methods it runs, leaf (innermost inlined) first. */
struct pc_entry {
	uint8_t n;
	uint32_t method[HOTSPOT_MAX_INLINE];	/* index in methods, or UINT32_MAX */
	uint32_t bci[HOTSPOT_MAX_INLINE];
	char *stub;				/* not an nmethod: the blob's name */
};

struct hotspot {
	int map_fd, stats_fd;
	struct proc_table *procs;
	struct pid_entry *pids[PID_BUCKETS];
	uint64_t next_epoch;
	struct intern *method_keys;	/* (epoch, Method*) -> index in methods */
	struct method_entry *methods;
	uint32_t cap_methods;
	struct intern *pc_keys;		/* (epoch, pc) -> index in pcs */
	struct pc_entry *pcs;
	uint32_t cap_pcs;
	uint64_t pcs_since_ns;
	char name[1024];		/* scratch for placeholders */
	char names[HOTSPOT_MAX_INLINE][64];
	struct hotspot_stats st;
};

struct hotspot *hotspot__new(int map_fd, int stats_fd, struct proc_table *procs)
{
	struct hotspot *hs = calloc(1, sizeof(*hs));

	if (!hs)
		return NULL;
	hs->map_fd = map_fd;
	hs->stats_fd = stats_fd;
	hs->procs = procs;
	hs->next_epoch = 1;
	return hs;
}

static void _methods_clear(struct hotspot *hs)
{
	uint32_t n = hs->method_keys ? intern__count(hs->method_keys) : 0;

	for (uint32_t i = 0; i < n; i++) {
		free(hs->methods[i].function);
		free(hs->methods[i].file);
		free(hs->methods[i].lines);
	}
	intern__free(hs->method_keys);
	hs->method_keys = NULL;
	free(hs->methods);
	hs->methods = NULL;
	hs->cap_methods = 0;
}

static void _pcs_clear(struct hotspot *hs)
{
	uint32_t n = hs->pc_keys ? intern__count(hs->pc_keys) : 0;

	for (uint32_t i = 0; i < n; i++)
		free(hs->pcs[i].stub);
	intern__free(hs->pc_keys);
	hs->pc_keys = NULL;
	free(hs->pcs);
	hs->pcs = NULL;
	hs->cap_pcs = 0;
}

void hotspot__free(struct hotspot *hs)
{
	if (!hs)
		return;
	for (int i = 0; i < PID_BUCKETS; i++) {
		struct pid_entry *e = hs->pids[i], *next;

		for (; e; e = next) {
			next = e->next;
			free(e->tables);
			free(e->proc);
			free(e);
		}
	}
	_methods_clear(hs);
	_pcs_clear(hs);
	free(hs);
}

static struct pid_entry **_slot(struct hotspot *hs, pid_t pid)
{
	struct pid_entry **pe = &hs->pids[(uint32_t)pid % PID_BUCKETS];

	while (*pe && (*pe)->pid != pid)
		pe = &(*pe)->next;
	return pe;
}

/* ---- finding the JVM ---------------------------------------------------- */

struct find_ctx {
	struct binary *bin;
	uint64_t bias;
	bool launcher;		/* libjli.so: a java launcher, which maps libjvm.so next */
};

static int _find_jvm(void *ctx, const struct proc_mapping *m, struct binary *b)
{
	struct find_ctx *f = ctx;
	const char *base;

	if (f->bin || !b || !b->elf)
		return 0;
	base = strrchr(b->path, '/');
	base = base ? base + 1 : b->path;
	if (strcmp(base, "libjli.so") == 0)
		f->launcher = true;
	if (strcmp(base, "libjvm.so"))
		return 0;
	if (elf_file__load_bias(b->elf, m->start, m->end, m->offset, &f->bias))
		return 0;
	f->bin = b;
	return 0;
}

enum {
	F_HEAPS, F_LOW_BOUND, F_HIGH_BOUND, F_GA_LEN, F_GA_DATA,
	F_HEAP_MEMORY, F_HEAP_SEGMAP, F_HEAP_LOG2, F_VS_LOW, F_VS_HIGH, F_HB_USED,
	F_INTERP_CODE, F_SQ_BUFFER, F_SQ_LIMIT,
	F_BLOB_NAME, F_BLOB_COMPLETE, F_BLOB_FRAME_SIZE, F_BLOB_CODE_BEGIN,
	F_CM_METHOD, F_CM_SCOPES_DATA, F_NM_METADATA, F_NM_SCOPES_PCS, F_NM_DEPS,
	F_PC_OFFSET, F_PC_SCOPE,
	F_METHOD_CONST, F_CONST_CONSTANTS, F_CONST_FLAGS, F_CONST_CODE_SIZE,
	F_CONST_NAME_INDEX, F_CONST_SIZE_WORDS,
	F_CP_HOLDER, F_CP_SOURCE, F_KLASS_NAME, F_SYM_LENGTH, F_SYM_BODY,
	F_MAX,
};

static const struct vm_field want_fields[F_MAX] = {
	[F_HEAPS] = { "CodeCache", "_heaps" },
	[F_LOW_BOUND] = { "CodeCache", "_low_bound" },
	[F_HIGH_BOUND] = { "CodeCache", "_high_bound" },
	[F_GA_LEN] = { "GrowableArrayBase", "_len" },
	[F_GA_DATA] = { "GrowableArray<int>", "_data" },
	[F_HEAP_MEMORY] = { "CodeHeap", "_memory" },
	[F_HEAP_SEGMAP] = { "CodeHeap", "_segmap" },
	[F_HEAP_LOG2] = { "CodeHeap", "_log2_segment_size" },
	[F_VS_LOW] = { "VirtualSpace", "_low_boundary" },
	[F_VS_HIGH] = { "VirtualSpace", "_high_boundary" },
	[F_HB_USED] = { "HeapBlock::Header", "_used" },
	[F_INTERP_CODE] = { "AbstractInterpreter", "_code" },
	[F_SQ_BUFFER] = { "StubQueue", "_stub_buffer" },
	[F_SQ_LIMIT] = { "StubQueue", "_buffer_limit" },
	[F_BLOB_NAME] = { "CodeBlob", "_name" },
	[F_BLOB_COMPLETE] = { "CodeBlob", "_frame_complete_offset" },
	[F_BLOB_FRAME_SIZE] = { "CodeBlob", "_frame_size" },
	[F_BLOB_CODE_BEGIN] = { "CodeBlob", "_code_begin" },
	[F_CM_METHOD] = { "CompiledMethod", "_method" },
	[F_CM_SCOPES_DATA] = { "CompiledMethod", "_scopes_data_begin" },
	[F_NM_METADATA] = { "nmethod", "_metadata_offset" },
	[F_NM_SCOPES_PCS] = { "nmethod", "_scopes_pcs_offset" },
	[F_NM_DEPS] = { "nmethod", "_dependencies_offset" },
	[F_PC_OFFSET] = { "PcDesc", "_pc_offset" },
	[F_PC_SCOPE] = { "PcDesc", "_scope_decode_offset" },
	[F_METHOD_CONST] = { "Method", "_constMethod" },
	[F_CONST_CONSTANTS] = { "ConstMethod", "_constants" },
	[F_CONST_FLAGS] = { "ConstMethod", "_flags" },
	[F_CONST_CODE_SIZE] = { "ConstMethod", "_code_size" },
	[F_CONST_NAME_INDEX] = { "ConstMethod", "_name_index" },
	[F_CONST_SIZE_WORDS] = { "ConstMethod", "_constMethod_size" },
	[F_CP_HOLDER] = { "ConstantPool", "_pool_holder" },
	[F_CP_SOURCE] = { "ConstantPool", "_source_file_name_index" },
	[F_KLASS_NAME] = { "Klass", "_name" },
	[F_SYM_LENGTH] = { "Symbol", "_length" },
	[F_SYM_BODY] = { "Symbol", "_body" },
};

enum { T_HEAPBLOCK, T_NMETHOD, T_PCDESC, T_CONSTMETHOD, T_CONSTANTPOOL, T_MAX };

static const struct vm_type want_types[T_MAX] = {
	[T_HEAPBLOCK] = { "HeapBlock" },
	[T_NMETHOD] = { "nmethod" },
	[T_PCDESC] = { "PcDesc" },
	[T_CONSTMETHOD] = { "ConstMethod" },
	[T_CONSTANTPOOL] = { "ConstantPool" },
};

static int _read_u64(pid_t pid, uint64_t addr, void *v)
{
	return vmstructs__read_mem(pid, addr, v, sizeof(uint64_t));
}

/* The code heaps, from CodeCache::_heaps: a GrowableArray<CodeHeap*>. */
static int _heaps(pid_t pid, const struct vm_field *f, struct fw_hs_proc *bp)
{
	uint64_t array, data, heaps[FW_HS_MAX_HEAPS];
	int32_t len = 0;

	if (_read_u64(pid, f[F_HEAPS].value, &array) || !array)
		return -EAGAIN;
	if (vmstructs__read_mem(pid, array + f[F_GA_LEN].value, &len, sizeof(len)) ||
	    _read_u64(pid, array + f[F_GA_DATA].value, &data) || len <= 0 || !data)
		return -EAGAIN;
	if (len > FW_HS_MAX_HEAPS)
		return -E2BIG;
	if (vmstructs__read_mem(pid, data, heaps, len * sizeof(heaps[0])))
		return -EFAULT;
	for (int i = 0; i < len; i++) {
		struct fw_hs_heap *h = &bp->heaps[i];
		uint64_t mem = heaps[i] + f[F_HEAP_MEMORY].value, seg = heaps[i] + f[F_HEAP_SEGMAP].value;
		int32_t log2 = 0;

		if (_read_u64(pid, mem + f[F_VS_LOW].value, &h->lo) ||
		    _read_u64(pid, mem + f[F_VS_HIGH].value, &h->hi) ||
		    _read_u64(pid, seg + f[F_VS_LOW].value, &h->segmap) ||
		    vmstructs__read_mem(pid, heaps[i] + f[F_HEAP_LOG2].value, &log2, sizeof(log2)))
			return -EFAULT;
		if (log2 <= 0 || log2 > 20 || h->hi <= h->lo || !h->segmap)
			return -EAGAIN;	/* being set up */
		h->log2_seg = log2;
	}
	bp->nheaps = len;
	return 0;
}

struct vm_tables {
	struct vm_field f[F_MAX];
	struct vm_type t[T_MAX];
	struct vm_const c[1];
};

/* The vmStructs entries we use, read from the process the first time. */
static int _tables(pid_t pid, const struct find_ctx *fc, struct vm_tables **out)
{
	struct vm_tables *vt;
	struct vm_want w;
	int err;

	if (*out)
		return 0;
	vt = calloc(1, sizeof(*vt));
	if (!vt)
		return -ENOMEM;
	memcpy(vt->f, want_fields, sizeof(vt->f));
	memcpy(vt->t, want_types, sizeof(vt->t));
	vt->c[0].name = "ConstMethod::_has_linenumber_table";
	w = (struct vm_want){ vt->f, F_MAX, vt->t, T_MAX, vt->c, 1 };
	err = vmstructs__read(pid, fc->bin->fd, fc->bias, &w);
	for (int i = 0; !err && i < F_MAX; i++) {
		if (!vt->f[i].found || vt->f[i].value > (vt->f[i].is_static ? UINT64_MAX : 0xffff)) {
			pr_debug("pid %d: vmStructs lacks %s::%s\n", pid, vt->f[i].type, vt->f[i].field);
			err = -ENOTSUP;
		}
	}
	for (int i = 0; !err && i < T_MAX; i++)
		if (!vt->t[i].found || vt->t[i].size > 0xffff)
			err = -ENOTSUP;
	if (err) {
		free(vt);
		return err;
	}
	*out = vt;
	return 0;
}

static int _describe(struct hotspot *hs, struct pid_entry *e, struct hotspot_proc **out)
{
	pid_t pid = e->pid;
	const struct vm_field *f;
	const struct vm_type *t;
	const struct vm_const *c;
	struct find_ctx fc = { 0 };
	struct fw_hs_proc bp;
	struct hotspot_layout l;
	struct hotspot_proc *hp;
	uint64_t queue, buffer;
	int32_t limit = 0;
	uint32_t key = pid;
	int err;

	*out = NULL;
	err = proc_table__for_each_mapping(hs->procs, pid, _find_jvm, &fc);
	if (err)
		return err;
	if (!fc.bin)
		return fc.launcher ? -EAGAIN : -ENOENT;
	err = _tables(pid, &fc, &e->tables);
	if (err)
		return err;
	f = e->tables->f;
	t = e->tables->t;
	c = e->tables->c;

	memset(&bp, 0, sizeof(bp));
	if (_read_u64(pid, f[F_LOW_BOUND].value, &bp.cc_lo) ||
	    _read_u64(pid, f[F_HIGH_BOUND].value, &bp.cc_hi) || !bp.cc_lo || bp.cc_hi <= bp.cc_lo)
		return -EAGAIN;	/* the code cache is not set up yet */
	err = _heaps(pid, f, &bp);
	if (err)
		return err;
	if (_read_u64(pid, f[F_INTERP_CODE].value, &queue) || !queue ||
	    _read_u64(pid, queue + f[F_SQ_BUFFER].value, &buffer) ||
	    vmstructs__read_mem(pid, queue + f[F_SQ_LIMIT].value, &limit, sizeof(limit)) ||
	    !buffer || limit <= 0)
		return -EAGAIN;	/* the interpreter is not generated yet */
	bp.interp_lo = buffer;
	bp.interp_hi = buffer + limit;
	bp.block_size = t[T_HEAPBLOCK].size;
	bp.block_used = f[F_HB_USED].value;
	bp.blob_frame_complete = f[F_BLOB_COMPLETE].value;
	bp.blob_frame_size = f[F_BLOB_FRAME_SIZE].value;
	bp.blob_code_begin = f[F_BLOB_CODE_BEGIN].value;
	bp.method_const = f[F_METHOD_CONST].value;
	bp.const_size = t[T_CONSTMETHOD].size;

	l = (struct hotspot_layout){
		.blob_name = f[F_BLOB_NAME].value,
		.blob_code_begin = f[F_BLOB_CODE_BEGIN].value,
		.cm_method = f[F_CM_METHOD].value,
		.cm_scopes_data = f[F_CM_SCOPES_DATA].value,
		.nm_metadata = f[F_NM_METADATA].value,
		.nm_scopes_pcs = f[F_NM_SCOPES_PCS].value,
		.nm_deps = f[F_NM_DEPS].value,
		.nm_size = t[T_NMETHOD].size,
		.pc_size = t[T_PCDESC].size,
		.pc_offset = f[F_PC_OFFSET].value,
		.pc_scope = f[F_PC_SCOPE].value,
		.method_const = f[F_METHOD_CONST].value,
		.cm_constants = f[F_CONST_CONSTANTS].value,
		.cm_flags = f[F_CONST_FLAGS].value,
		.cm_code_size = f[F_CONST_CODE_SIZE].value,
		.cm_name_index = f[F_CONST_NAME_INDEX].value,
		.cm_size_words = f[F_CONST_SIZE_WORDS].value,
		.const_size = t[T_CONSTMETHOD].size,
		.cp_holder = f[F_CP_HOLDER].value,
		.cp_source_index = f[F_CP_SOURCE].value,
		.cp_size = t[T_CONSTANTPOOL].size,
		.klass_name = f[F_KLASS_NAME].value,
		.sym_length = f[F_SYM_LENGTH].value,
		.sym_body = f[F_SYM_BODY].value,
		.has_lines = c[0].found ? (uint32_t)c[0].value : 1,
	};
	if (l.pc_size < 8 || l.nm_size < 64 || l.cp_size == 0)
		return -ENOTSUP;

	hp = calloc(1, sizeof(*hp));
	if (!hp)
		return -ENOMEM;
	hp->pid = pid;
	hp->epoch = hs->next_epoch++;
	hp->bpf = bp;
	hp->l = l;
	if (bpf_map_update_elem(hs->map_fd, &key, &bp, BPF_ANY)) {
		err = -errno;
		free(hp);
		return err;
	}
	pr_debug("pid %d: HotSpot JVM, code cache %#llx-%#llx in %u heaps\n", pid,
		 (unsigned long long)bp.cc_lo, (unsigned long long)bp.cc_hi, bp.nheaps);
	*out = hp;
	return 0;
}

void hotspot__note_pid(struct hotspot *hs, pid_t pid)
{
	struct pid_entry **pe = _slot(hs, pid), *e = *pe;
	uint64_t now;
	int err;

	if (e && (e->proc || e->checks >= MAX_CHECKS))
		return;
	now = clock__mono_ns();
	if (e && now < e->next_check_ns)
		return;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e)
			return;
		e->pid = pid;
		e->first_ns = now;
		*pe = e;
	}
	e->checks++;
	err = _describe(hs, e, &e->proc);
	if (!err) {
		hs->st.procs++;
	} else if (err == -EAGAIN && now - e->first_ns < STARTING_MAX_NS) {
		e->next_check_ns = now + STARTING_NS;
	} else if (err == -ENOENT && e->checks < MAX_CHECKS_NO_JVM) {
		e->next_check_ns = now + (20000000ULL << e->checks);
	} else {
		if (err != -ENOENT && err != -ESRCH)
			pr_debug("pid %d: HotSpot not supported: %s\n", pid, strerror(-err));
		e->checks = MAX_CHECKS;	/* not a JVM, or not one we can read: stop looking */
	}
	if (e->proc || e->checks >= MAX_CHECKS) {
		free(e->tables);
		e->tables = NULL;
	}
}

void hotspot__forget(struct hotspot *hs, pid_t pid)
{
	struct pid_entry **pe = _slot(hs, pid), *e = *pe;
	uint32_t key = pid;

	if (!e)
		return;
	if (e->proc) {
		bpf_map_delete_elem(hs->map_fd, &key);
		hs->st.procs--;
	}
	*pe = e->next;
	free(e->tables);
	free(e->proc);
	free(e);
}

const struct hotspot_proc *hotspot__proc(struct hotspot *hs, pid_t pid)
{
	struct pid_entry *e = hs ? *_slot(hs, pid) : NULL;

	return e ? e->proc : NULL;
}

/* ---- decoding ------------------------------------------------------------ */

/*
 * CompressedReadStream::read_int: a byte below 192 ends the number; each
 * byte from 192 up adds the next one, weighted by 64 more, up to 5 bytes.
 */
int64_t hotspot__read_int(const uint8_t *buf, size_t len, size_t *pos)
{
	uint32_t sum, shift = 6;
	size_t i = *pos;

	if (i >= len)
		return -1;
	sum = buf[i++];
	if (sum >= 192) {
		for (int k = 1; k <= 4; k++, shift += 6) {
			uint32_t b;

			if (i >= len)
				return -1;
			b = buf[i++];
			sum += b << shift;
			if (b < 192)
				break;
		}
	}
	*pos = i;
	return sum;
}

/* A signed int: zigzag-coded (v << 1 ^ v >> 31). False when the stream is torn. */
static bool _read_signed(const uint8_t *buf, size_t len, size_t *pos, int64_t *out)
{
	int64_t raw = hotspot__read_int(buf, len, pos);
	uint32_t v = (uint32_t)raw;

	if (raw < 0)
		return false;
	*out = (int32_t)((v >> 1) ^ -(v & 1));
	return true;
}

/*
 * CompressedLineNumberReadStream: pairs of (bci, line) deltas, one byte
 * (bci delta << 3 | line delta) when both fit, else 0xFF and two signed
 * ints; a 0 byte ends the table. A bci's line is that of the last pair at
 * or below it.
 */
uint32_t hotspot__line(const uint8_t *t, size_t len, uint32_t bci)
{
	int64_t cur_bci = 0, cur_line = 0;
	uint32_t best = 0;
	size_t i = 0;

	while (i < len) {
		uint8_t b = t[i++];

		if (b == 0)
			break;
		if (b == 0xff) {
			int64_t db, dl;

			if (!_read_signed(t, len, &i, &db) || !_read_signed(t, len, &i, &dl))
				break;
			cur_bci += db;
			cur_line += dl;
		} else {
			cur_bci += b >> 3;
			cur_line += b & 7;
		}
		if (cur_bci > bci)
			break;
		best = cur_line > 0 ? (uint32_t)cur_line : 0;
	}
	return best;
}

/* ---- naming methods ------------------------------------------------------ */

/* A Symbol's text; '/' becomes '.' when dots is set. */
static char *_symbol(pid_t pid, const struct hotspot_layout *l, uint64_t sym, bool dots)
{
	uint16_t len = 0;
	char *s;

	if (!sym || vmstructs__read_mem(pid, sym + l->sym_length, &len, sizeof(len)))
		return NULL;
	s = malloc(len + 1);
	if (!s)
		return NULL;
	if (len && vmstructs__read_mem(pid, sym + l->sym_body, s, len)) {
		free(s);
		return NULL;
	}
	s[len] = '\0';
	for (uint16_t i = 0; dots && i < len; i++)
		if (s[i] == '/')
			s[i] = '.';
	return s;
}

static uint64_t _cp_symbol(pid_t pid, const struct hotspot_layout *l, uint64_t cp, uint16_t index)
{
	uint64_t sym = 0;

	if (!index || _read_u64(pid, cp + l->cp_size + 8ull * index, &sym))
		return 0;
	return sym;
}

static int _read_method(pid_t pid, const struct hotspot_layout *l, uint64_t method,
			struct method_entry *me)
{
	uint8_t head[256];
	uint64_t cm, cp, holder, klass_sym;
	uint16_t flags, code_size, name_index, source_index = 0;
	int32_t words;
	char *klass, *name;
	size_t fl;

	if (!method || _read_u64(pid, method + l->method_const, &cm) || !cm ||
	    l->const_size > sizeof(head) || vmstructs__read_mem(pid, cm, head, l->const_size))
		return -EFAULT;
	memcpy(&cp, head + l->cm_constants, 8);
	memcpy(&flags, head + l->cm_flags, 2);
	memcpy(&code_size, head + l->cm_code_size, 2);
	memcpy(&name_index, head + l->cm_name_index, 2);
	memcpy(&words, head + l->cm_size_words, 4);
	if (!cp || _read_u64(pid, cp + l->cp_holder, &holder) || !holder ||
	    _read_u64(pid, holder + l->klass_name, &klass_sym))
		return -EFAULT;
	vmstructs__read_mem(pid, cp + l->cp_source_index, &source_index, sizeof(source_index));
	klass = _symbol(pid, l, klass_sym, true);
	name = _symbol(pid, l, _cp_symbol(pid, l, cp, name_index), false);
	if (!klass || !name) {
		free(klass);
		free(name);
		return -EFAULT;
	}
	fl = strlen(klass) + strlen(name) + 2;
	me->function = malloc(fl);
	if (me->function)
		snprintf(me->function, fl, "%s.%s", klass, name);
	free(klass);
	free(name);
	if (!me->function)
		return -ENOMEM;
	me->file = _symbol(pid, l, _cp_symbol(pid, l, cp, source_index), false);
	/* The line table follows the bytecodes, up to the end of the ConstMethod. */
	if ((flags & l->has_lines) && words > 0) {
		uint64_t start = l->const_size + code_size, end = (uint64_t)words * 8;

		if (end > start && end - start <= LINES_MAX) {
			me->lines = malloc(end - start);
			if (me->lines && vmstructs__read_mem(pid, cm + start, me->lines, end - start) == 0) {
				me->nlines = end - start;
			} else {
				free(me->lines);
				me->lines = NULL;
			}
		}
	}
	return 0;
}

/* The cached entry of a Method*, read the first time; UINT32_MAX when unreadable. */
static uint32_t _method(struct hotspot *hs, const struct hotspot_proc *hp, uint64_t method)
{
	struct { uint64_t epoch, method; } key = { hp->epoch, method };
	struct method_entry *me;
	bool added;
	int64_t id;

	if (!hs->method_keys) {
		hs->method_keys = intern__new();
		if (!hs->method_keys)
			return UINT32_MAX;
	}
	id = intern__add(hs->method_keys, &key, sizeof(key), &added);
	if (id < 0)
		return UINT32_MAX;
	if ((uint32_t)id >= hs->cap_methods) {
		uint32_t cap = hs->cap_methods ? hs->cap_methods * 2 : 256;
		struct method_entry *m = realloc(hs->methods, cap * sizeof(*m));

		if (!m)
			return UINT32_MAX;
		hs->methods = m;
		hs->cap_methods = cap;
	}
	me = &hs->methods[id];
	if (added) {
		memset(me, 0, sizeof(*me));
		hs->st.method_reads++;
		if (_read_method(hp->pid, &hp->l, method, me)) {
			hs->st.method_read_errors++;
			free(me->function);
			me->function = NULL;
		}
	}
	return me->function ? (uint32_t)id : UINT32_MAX;
}

static void _name_method(struct hotspot *hs, uint32_t m, uint32_t bci, uint64_t method,
			 int slot, struct hotspot_frame *out)
{
	const struct method_entry *me = m != UINT32_MAX ? &hs->methods[m] : NULL;

	if (!me) {
		snprintf(hs->names[slot], sizeof(hs->names[slot]), "[java method 0x%llx]",
			 (unsigned long long)method);
		*out = (struct hotspot_frame){ hs->names[slot], NULL, 0 };
		return;
	}
	*out = (struct hotspot_frame){
		me->function, me->file,
		me->lines && bci != FW_HS_BCI_NONE ? hotspot__line(me->lines, me->nlines, bci) : 0,
	};
}

/* ---- compiled code ------------------------------------------------------- */

/* CodeHeap::find_blob_unsafe, in user space: the blob holding pc, or 0. */
static uint64_t _find_blob(const struct hotspot_proc *hp, uint64_t pc)
{
	for (uint32_t h = 0; h < hp->bpf.nheaps; h++) {
		const struct fw_hs_heap *heap = &hp->bpf.heaps[h];
		uint64_t seg, block;
		uint8_t hop = 0, used = 0;

		if (pc < heap->lo || pc >= heap->hi)
			continue;
		seg = (pc - heap->lo) >> heap->log2_seg;
		for (int i = 0; i < 4096; i++) {
			if (vmstructs__read_mem(hp->pid, heap->segmap + seg, &hop, 1) || hop == 0xff)
				return 0;
			if (hop == 0 || seg < hop)
				break;
			seg -= hop;
		}
		if (hop)
			return 0;
		block = heap->lo + (seg << heap->log2_seg);
		if (vmstructs__read_mem(hp->pid, block + hp->bpf.block_used, &used, 1) || !used)
			return 0;
		return block + hp->bpf.block_size;
	}
	return 0;
}

/*
 * The scopes recorded for the PcDesc of pc in an nmethod: innermost
 * (inlined deepest) first. The PcDesc is the first one at or after pc,
 * as for a return address it is exact and for an interrupted instruction
 * it is the next safepoint of the same code.
 */
static int _nmethod_scopes(struct hotspot *hs, const struct hotspot_proc *hp, uint64_t nm,
			   uint64_t pc, struct pc_entry *pe)
{
	const struct hotspot_layout *l = &hp->l;
	uint8_t head[1024], *debug = NULL;
	uint64_t method, scopes, code;
	int32_t meta_off, pcs_off, deps_off, best_scope = -1;
	int64_t want, best_pc = INT64_MAX;
	uint32_t dlen;
	int err = -EFAULT;

	if (l->nm_size > sizeof(head) || vmstructs__read_mem(hp->pid, nm, head, l->nm_size))
		return -EFAULT;
	memcpy(&method, head + l->cm_method, 8);
	memcpy(&scopes, head + l->cm_scopes_data, 8);
	memcpy(&code, head + l->blob_code_begin, 8);
	memcpy(&meta_off, head + l->nm_metadata, 4);
	memcpy(&pcs_off, head + l->nm_scopes_pcs, 4);
	memcpy(&deps_off, head + l->nm_deps, 4);
	pe->n = 1;
	pe->method[0] = method ? _method(hs, hp, method) : UINT32_MAX;
	pe->bci[0] = FW_HS_BCI_NONE;
	/* metadata, scopes data and PcDescs lie in this order, in one piece. */
	if (meta_off <= 0 || pcs_off <= meta_off || deps_off < pcs_off ||
	    scopes < nm + meta_off || scopes > nm + pcs_off ||
	    (uint32_t)(deps_off - meta_off) > NMETHOD_DEBUG_MAX)
		return 0;
	dlen = deps_off - meta_off;
	debug = malloc(dlen);
	if (!debug || vmstructs__read_mem(hp->pid, nm + meta_off, debug, dlen))
		goto out;
	want = (int64_t)(pc - code);
	for (uint32_t off = pcs_off - meta_off; off + l->pc_size <= dlen; off += l->pc_size) {
		int32_t pco, sco;

		memcpy(&pco, debug + off + l->pc_offset, 4);
		memcpy(&sco, debug + off + l->pc_scope, 4);
		if (pco >= want && pco < best_pc) {
			best_pc = pco;
			best_scope = sco;
		}
	}
	err = 0;
	if (best_scope <= 0)
		goto out;	/* no debug info here: the nmethod's own method */
	{
		uint64_t sbase = scopes - (nm + meta_off);
		size_t slen = dlen - sbase, pos;
		int32_t decode = best_scope;
		uint8_t n = 0;

		/* ScopeDesc: sender's decode offset, metadata index of its Method*, bci + 1. */
		for (; decode > 0 && n < HOTSPOT_MAX_INLINE; n++) {
			int64_t sender, index, bci;
			uint64_t m = 0;

			pos = decode;
			sender = hotspot__read_int(debug + sbase, slen, &pos);
			index = hotspot__read_int(debug + sbase, slen, &pos);
			bci = hotspot__read_int(debug + sbase, slen, &pos);
			if (sender < 0 || index <= 0 || bci < 0 ||
			    (uint64_t)index * 8 > sbase)
				break;
			memcpy(&m, debug + (index - 1) * 8, 8);
			pe->method[n] = _method(hs, hp, m);
			pe->bci[n] = bci ? (uint32_t)(bci - 1) : FW_HS_BCI_NONE;
			decode = (int32_t)sender;
		}
		if (n)
			pe->n = n;
	}
out:
	free(debug);
	return err;
}

static struct pc_entry *_pc(struct hotspot *hs, const struct hotspot_proc *hp, uint64_t pc)
{
	struct { uint64_t epoch, pc; } key = { hp->epoch, pc };
	struct pc_entry *pe;
	uint64_t now = clock__mono_ns(), blob;
	char name[32];
	bool added;
	int64_t id;

	if (!hs->pc_keys || intern__count(hs->pc_keys) >= PC_CACHE_MAX ||
	    now - hs->pcs_since_ns > PC_CACHE_NS) {
		_pcs_clear(hs);
		hs->pc_keys = intern__new();
		hs->pcs_since_ns = now;
		if (!hs->pc_keys)
			return NULL;
	}
	id = intern__add(hs->pc_keys, &key, sizeof(key), &added);
	if (id < 0)
		return NULL;
	if ((uint32_t)id >= hs->cap_pcs) {
		uint32_t cap = hs->cap_pcs ? hs->cap_pcs * 2 : 256;
		struct pc_entry *p = realloc(hs->pcs, cap * sizeof(*p));

		if (!p)
			return NULL;
		hs->pcs = p;
		hs->cap_pcs = cap;
	}
	pe = &hs->pcs[id];
	if (!added)
		return pe;
	memset(pe, 0, sizeof(*pe));
	hs->st.nmethod_reads++;
	blob = _find_blob(hp, pc);
	name[0] = '\0';
	if (blob) {
		uint64_t np = 0;

		if (_read_u64(hp->pid, blob + hp->l.blob_name, &np) == 0 && np &&
		    vmstructs__read_mem(hp->pid, np, name, sizeof(name) - 1) == 0)
			name[sizeof(name) - 1] = '\0';
		else
			name[0] = '\0';
	}
	/* nmethods are "nmethod" (Java) and "native nmethod" (JNI wrappers). */
	if (strcmp(name, "nmethod") == 0 || strcmp(name, "native nmethod") == 0) {
		if (_nmethod_scopes(hs, hp, blob, pc, pe) == 0 && pe->n)
			return pe;
		hs->st.nmethod_read_errors++;
	}
	pe->n = 0;
	if (!name[0])
		snprintf(name, sizeof(name), "code cache");
	pe->stub = malloc(strlen(name) + 8);
	if (pe->stub)
		sprintf(pe->stub, "[jvm %s]", name);
	return pe;
}

int hotspot__frames(struct hotspot *hs, const struct hotspot_proc *hp, uint64_t word,
		    bool is_return, struct hotspot_frame *out)
{
	const struct pc_entry *pe;
	uint64_t pc;

	if (!hs || !hp)
		return 0;
	if (hs->method_keys && intern__count(hs->method_keys) >= METHOD_CACHE_MAX) {
		_pcs_clear(hs);		/* its entries point into the methods */
		_methods_clear(hs);
	}
	if (word & FW_HS_INTERP) {
		uint64_t method = word & FW_HS_METHOD_MASK;
		uint32_t bci = (word >> FW_HS_BCI_SHIFT) & 0xffff;

		_name_method(hs, _method(hs, hp, method), bci, method, 0, out);
		return 1;
	}
	pc = is_return && word ? word - 1 : word;
	if (pc < hp->bpf.cc_lo || pc >= hp->bpf.cc_hi)
		return 0;
	if (pc >= hp->bpf.interp_lo && pc < hp->bpf.interp_hi) {
		/* The walk could not name this frame (no frame built yet). */
		*out = (struct hotspot_frame){ "[jvm interpreter]", NULL, 0 };
		return 1;
	}
	pe = _pc(hs, hp, pc);
	if (!pe || !pe->n) {
		*out = (struct hotspot_frame){ pe && pe->stub ? pe->stub : "[jvm code cache]", NULL, 0 };
		return 1;
	}
	for (uint8_t i = 0; i < pe->n; i++)
		_name_method(hs, pe->method[i], pe->bci[i], 0, i, &out[i]);
	return pe->n;
}

void hotspot__stats(const struct hotspot *hs, struct hotspot_stats *out)
{
	uint64_t *dst[FW_HS_STAT_MAX] = {
		[FW_HS_STAT_INTERP_FRAMES] = &out->interp_frames,
		[FW_HS_STAT_COMPILED_FRAMES] = &out->compiled_frames,
		[FW_HS_STAT_STUB_FRAMES] = &out->stub_frames,
		[FW_HS_STAT_NO_BLOB] = &out->no_blob,
		[FW_HS_STAT_FAULT] = &out->faults,
	};
	int ncpus = libbpf_num_possible_cpus();
	uint64_t *values;

	*out = hs->st;
	if (ncpus <= 0)
		return;
	values = calloc(ncpus, sizeof(*values));
	for (uint32_t key = 0; values && key < FW_HS_STAT_MAX; key++) {
		if (bpf_map_lookup_elem(hs->stats_fd, &key, values))
			continue;
		for (int cpu = 0; cpu < ncpus; cpu++)
			*dst[key] += values[cpu];
	}
	free(values);
}

static void _ops_note_pid(void *hs, pid_t pid)
{
	hotspot__note_pid(hs, pid);
}

static void _ops_forget(void *hs, pid_t pid)
{
	hotspot__forget(hs, pid);
}

static void _ops_report(void *obj)
{
	struct hotspot_stats hs;

	hotspot__stats(obj, &hs);
	pr_debug("hotspot: %llu JVMs; %llu interpreted, %llu compiled, %llu stub frames walked, "
		 "%llu pcs outside blobs, %llu faults; %llu methods read (%llu unreadable), "
		 "%llu compiled pcs resolved (%llu not)\n",
		 (unsigned long long)hs.procs, (unsigned long long)hs.interp_frames,
		 (unsigned long long)hs.compiled_frames, (unsigned long long)hs.stub_frames,
		 (unsigned long long)hs.no_blob, (unsigned long long)hs.faults,
		 (unsigned long long)hs.method_reads, (unsigned long long)hs.method_read_errors,
		 (unsigned long long)hs.nmethod_reads, (unsigned long long)hs.nmethod_read_errors);
}

static void _ops_free(void *hs)
{
	hotspot__free(hs);
}

/*
 * No maps_changed: a process not yet a JVM is looked at again on its own
 * backoff as its samples come. An exec'd process's JVM, if any, is
 * another: forgotten as at exit.
 */
const struct interp_ops hotspot_interp_ops = {
	.name = "hotspot",
	.note_pid = _ops_note_pid,
	.follow = _ops_note_pid,
	.exec = _ops_forget,
	.forget = _ops_forget,
	.report = _ops_report,
	.free = _ops_free,
};
