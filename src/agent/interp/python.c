// SPDX-License-Identifier: Apache-2.0
#include <ctype.h>
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <bpf/bpf.h>

#include "agent/bpf/python.h"
#include "agent/interp/interp.h"
#include "agent/interp/interp_procs.h"
#include "agent/interp/python.h"
#include "agent/procmaps.h"
#include "agent/proc_table.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/intern.h"
#include "common/log.h"
#include "symbolize/elf_file.h"

/* Where a code object keeps what naming a frame needs. */
struct code_layout {
	uint16_t name;		/* co_qualname (3.11+) or co_name (3.10) */
	uint16_t filename;
	uint16_t firstlineno;	/* int */
	uint16_t linetable;	/* bytes */
	uint16_t code_adaptive;	/* 3.11+: first instruction */
	uint16_t ascii_size;	/* sizeof(PyASCIIObject) */
	uint16_t compact_size;	/* sizeof(PyCompactUnicodeObject) */
};

struct python_proc {
	pid_t pid;
	uint32_t minor;			/* 3.minor */
	uint64_t epoch;			/* this image's code objects in the cache */
	uint64_t eval_start, eval_end;	/* _PyEval_EvalFrameDefault */
	uint64_t code_type;		/* &PyCode_Type in the process */
	uint64_t interp_start, interp_end;	/* the interpreter binary's code */
	struct code_layout code;
	bool line_checked;		/* BPF sends co_firstlineno's low byte (FW_PY_LINE_MASK) */
};

#define CODE_CACHE_MAX 65536
/*
 * What the cache's names and line tables may hold before it starts afresh
 * (hot code objects are read again, which is cheap). Without a cap a
 * large application's thousands of code objects would grow the agent by
 * megabytes.
 * FLAMEWATCH_PY_CODE_CACHE_KB overrides it (the tests use a small one).
 */
#define CODE_CACHE_MAX_BYTES (2u << 20)
#define STR_MAX 512
#define LINETABLE_MAX 65536
/*
 * A code object that could not be read is tried again on a later sample,
 * at most this often and this many times: a read that failed once (memory
 * being reused, a page not yet mapped) must not name every later sample of
 * that code object with a placeholder for the life of the process.
 */
#define REREAD_NS 200000000ULL
#define REREADS_MAX 3

struct code_entry {
	char *function, *file;
	uint32_t firstlineno;
	uint8_t *lt;
	uint32_t ltlen;
	int err;		/* the read failed */
	uint32_t rereads;
	uint64_t failed_ns;
	int replaced_by;	/* 1 + the co_firstlineno byte that last made it read again */
};

struct python {
	int map_fd;
	int known_fd;		/* py_known: code objects read, so BPF stops waking us */
	struct proc_table *procs;
	struct interp_procs *pids;	/* pid -> struct python_proc */
	uint64_t next_epoch;
	struct intern *code_keys;	/* (epoch, code address) -> index in codes */
	struct code_entry *codes;
	uint32_t cap_codes;
	size_t code_bytes, max_code_bytes;	/* read into codes since the last clear */
	struct python_stats st;
};

struct python *python__new(int map_fd, int known_fd, struct proc_table *procs)
{
	struct python *py = calloc(1, sizeof(*py));

	if (!py)
		return NULL;
	py->max_code_bytes = env__kib("FLAMEWATCH_PY_CODE_CACHE_KB", CODE_CACHE_MAX_BYTES, 1);
	py->map_fd = map_fd;
	py->known_fd = known_fd;
	py->procs = procs;
	py->next_epoch = 1;
	py->pids = interp_procs__new();
	if (!py->pids) {
		free(py);
		return NULL;
	}
	return py;
}

static void _codes_clear(struct python *py)
{
	uint32_t n = py->code_keys ? intern__count(py->code_keys) : 0;

	for (uint32_t i = 0; i < n; i++) {
		free(py->codes[i].function);
		free(py->codes[i].file);
		free(py->codes[i].lt);
	}
	intern__free(py->code_keys);
	py->code_keys = NULL;
	free(py->codes);
	py->codes = NULL;
	py->cap_codes = 0;
	py->code_bytes = 0;
}

void python__free(struct python *py)
{
	if (!py)
		return;
	interp_procs__free(py->pids);
	_codes_clear(py);
	free(py);
}

/* ---- finding the interpreter ------------------------------------------ */

/* "libpython3.12.so.1.0", "python3.12", "libpython3.12d.so": the minor version, or -1. */
static int _minor_from_name(const char *path)
{
	const char *base = strrchr(path, '/'), *p;
	char *end;
	long minor;

	base = base ? base + 1 : path;
	if (strncmp(base, "libpython3.", 11) == 0)
		p = base + 11;
	else if (strncmp(base, "python3.", 8) == 0)
		p = base + 8;
	else
		return -1;
	if (!isdigit((unsigned char)*p))
		return -1;
	minor = strtol(p, &end, 10);
	if (*end && *end != '.' && *end != 'd' && *end != 't')
		return -1;
	return minor >= 0 && minor < 100 ? (int)minor : -1;
}

struct py_syms {
	uint64_t runtime, code_type, eval, eval_size, py_version;
	bool have_runtime, have_code_type, have_eval, have_version;
};

static void _scan_symtab(Elf *elf, Elf_Scn *scn, GElf_Shdr *sh, struct py_syms *out)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || !sh->sh_entsize)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < n; i++) {
		GElf_Sym sym;
		const char *name;

		if (!gelf_getsym(data, i, &sym) || sym.st_shndx == SHN_UNDEF || !sym.st_value)
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || (name[0] != '_' && name[0] != 'P'))
			continue;
		if (!out->have_runtime && strcmp(name, "_PyRuntime") == 0) {
			out->runtime = sym.st_value;
			out->have_runtime = true;
		} else if (!out->have_code_type && strcmp(name, "PyCode_Type") == 0) {
			out->code_type = sym.st_value;
			out->have_code_type = true;
		} else if (!out->have_eval && strcmp(name, "_PyEval_EvalFrameDefault") == 0) {
			out->eval = sym.st_value;
			out->eval_size = sym.st_size;
			out->have_eval = true;
		} else if (!out->have_version && strcmp(name, "Py_Version") == 0) {
			out->py_version = sym.st_value;
			out->have_version = true;
		}
	}
}

/* Looks the interpreter's symbols up in .dynsym, then .symtab. */
static int _find_syms(int fd, struct py_syms *out)
{
	int types[2] = { SHT_DYNSYM, SHT_SYMTAB };
	Elf *elf;

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return -EBADF;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -ENOEXEC;
	for (int t = 0; t < 2; t++) {
		Elf_Scn *scn = NULL;

		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;

			if (gelf_getshdr(scn, &sh) && sh.sh_type == (unsigned)types[t])
				_scan_symtab(elf, scn, &sh, out);
		}
	}
	elf_end(elf);
	return out->have_runtime && out->have_code_type ? 0 : -ENOENT;
}

struct find_ctx {
	struct binary *bin;
	uint64_t bias;
	int minor;
	uint64_t lo, hi;	/* the interpreter binary's executable mappings */
};

static int _find_interp(void *ctx, const struct proc_mapping *m, struct binary *b)
{
	struct find_ctx *f = ctx;
	int minor;

	if (!b || !b->elf)
		return 0;
	if (f->bin == b) {
		if (m->start < f->lo)
			f->lo = m->start;
		if (m->end > f->hi)
			f->hi = m->end;
		return 0;
	}
	minor = _minor_from_name(b->path);
	if (minor < 0)
		return 0;
	/* libpython wins over the python3.x executable that links it. */
	if (f->bin && strstr(f->bin->path, "libpython"))
		return 0;
	if (elf_file__load_bias(b->elf, m->start, m->end, m->offset, &f->bias))
		return 0;
	f->bin = b;
	f->minor = minor;
	f->lo = m->start;
	f->hi = m->end;
	return 0;
}

/* 3.10-3.12: facts from CPython's headers, checked against the builds' DWARF. */
static int _static_layout(int minor, struct fw_py_proc *bp, struct code_layout *cl,
			  uint64_t *head_off)
{
	switch (minor) {
	case 10:
		*head_off = 32;
		*bp = (struct fw_py_proc){
			.layout = FW_PY_310, .interp_threads_head = 8, .tstate_next = 8,
			.tstate_thread_id = 176, .tstate_frame = 24,
			.frame_code = 32, .frame_previous = 24, .frame_instr = 96,
		};
		*cl = (struct code_layout){ .name = 112, .filename = 104, .firstlineno = 40,
					    .linetable = 120, .ascii_size = 48, .compact_size = 72 };
		return 0;
	case 11:
		*head_off = 40;
		*bp = (struct fw_py_proc){
			.layout = FW_PY_311, .interp_threads_head = 16, .tstate_next = 8,
			.tstate_thread_id = 152, .tstate_frame = 56, .cframe_current_frame = 8,
			.frame_code = 32, .frame_previous = 48, .frame_instr = 56,
			.frame_is_entry = 68, .frame_owner = 69,
		};
		*cl = (struct code_layout){ .name = 128, .filename = 112, .firstlineno = 72,
					    .linetable = 136, .code_adaptive = 184,
					    .ascii_size = 48, .compact_size = 72 };
		return 0;
	case 12:
		*head_off = 40;
		*bp = (struct fw_py_proc){
			.layout = FW_PY_312, .interp_threads_head = 72, .tstate_next = 8,
			.tstate_thread_id = 136, .tstate_frame = 56, .cframe_current_frame = 0,
			.frame_code = 0, .frame_previous = 8, .frame_instr = 56, .frame_owner = 70,
		};
		*cl = (struct code_layout){ .name = 128, .filename = 112, .firstlineno = 68,
					    .linetable = 136, .code_adaptive = 192,
					    .ascii_size = 40, .compact_size = 56 };
		return 0;
	}
	return -ENOTSUP;
}

/*
 * 3.13+: _PyRuntime starts with _Py_DebugOffsets, which CPython publishes
 * for out-of-process tools. Field positions of that table (3.13.0).
 */
#define DBG_COOKIE "xdebugpy"
#define DBG_VERSION 8
#define DBG_FREE_THREADED 16
#define DBG_RUNTIME_INTERP_HEAD 40
#define DBG_INTERP_THREADS_HEAD 72
#define DBG_TSTATE_NEXT 168
#define DBG_TSTATE_CURRENT_FRAME 184
#define DBG_TSTATE_THREAD_ID 192
#define DBG_FRAME_PREVIOUS 232
#define DBG_FRAME_EXECUTABLE 240
#define DBG_FRAME_INSTR_PTR 248
#define DBG_FRAME_OWNER 264
#define DBG_CODE_FILENAME 280
#define DBG_CODE_QUALNAME 296
#define DBG_CODE_LINETABLE 304
#define DBG_CODE_FIRSTLINENO 312
#define DBG_CODE_ADAPTIVE 344
#define DBG_SIZE 352

static int _debug_layout(pid_t pid, uint64_t runtime, struct fw_py_proc *bp,
			 struct code_layout *cl, uint64_t *head_off)
{
	uint8_t t[DBG_SIZE];
	uint64_t v[DBG_SIZE / 8];
	int err = interp__read_mem(pid, runtime, t, sizeof(t));

	if (err)
		return err;
	if (memcmp(t, DBG_COOKIE, 8))
		return -EPROTO;
	memcpy(v, t, sizeof(v));
#define F(off) v[(off) / 8]
	/* These field positions are 3.13's; free-threaded builds lay frames out differently. */
	if (F(DBG_VERSION) >> 16 != 0x030d || F(DBG_FREE_THREADED))
		return -ENOTSUP;
	{
		/* The fields used, which must fit the 16-bit offsets BPF gets. */
		static const int used[] = {
			DBG_RUNTIME_INTERP_HEAD, DBG_INTERP_THREADS_HEAD, DBG_TSTATE_NEXT,
			DBG_TSTATE_CURRENT_FRAME, DBG_TSTATE_THREAD_ID, DBG_FRAME_PREVIOUS,
			DBG_FRAME_EXECUTABLE, DBG_FRAME_INSTR_PTR, DBG_FRAME_OWNER,
			DBG_CODE_FILENAME, DBG_CODE_QUALNAME, DBG_CODE_LINETABLE,
			DBG_CODE_FIRSTLINENO, DBG_CODE_ADAPTIVE,
		};

		for (size_t i = 0; i < sizeof(used) / sizeof(used[0]); i++)
			if (F(used[i]) > 0xffff)
				return -EPROTO;
	}
	/* Code objects are read 256 bytes at a time. */
	if (F(DBG_CODE_FILENAME) > 248 || F(DBG_CODE_QUALNAME) > 248 ||
	    F(DBG_CODE_LINETABLE) > 248 || F(DBG_CODE_FIRSTLINENO) > 252)
		return -EPROTO;
	*head_off = F(DBG_RUNTIME_INTERP_HEAD);
	*bp = (struct fw_py_proc){
		.layout = FW_PY_313,
		.interp_threads_head = F(DBG_INTERP_THREADS_HEAD),
		.tstate_next = F(DBG_TSTATE_NEXT),
		.tstate_thread_id = F(DBG_TSTATE_THREAD_ID),
		.tstate_frame = F(DBG_TSTATE_CURRENT_FRAME),
		.frame_code = F(DBG_FRAME_EXECUTABLE),
		.frame_previous = F(DBG_FRAME_PREVIOUS),
		.frame_instr = F(DBG_FRAME_INSTR_PTR),
		.frame_owner = F(DBG_FRAME_OWNER),
	};
	/* Unicode object sizes are not in the table; these hold from 3.12 on. */
	*cl = (struct code_layout){ .name = F(DBG_CODE_QUALNAME), .filename = F(DBG_CODE_FILENAME),
				    .firstlineno = F(DBG_CODE_FIRSTLINENO),
				    .linetable = F(DBG_CODE_LINETABLE),
				    .code_adaptive = F(DBG_CODE_ADAPTIVE),
				    .ascii_size = 40, .compact_size = 56 };
#undef F
	/* BPF reads 72 bytes of each frame. */
	if (bp->frame_code > 64 || bp->frame_previous > 64 || bp->frame_instr > 64 ||
	    bp->frame_owner > 71)
		return -EPROTO;
	return 0;
}

static int _describe(void *ctx, pid_t pid, void **out)
{
	struct python *py = ctx;
	struct find_ctx f = { .minor = -1 };
	struct fw_py_proc bp;
	struct code_layout cl;
	struct python_proc *pp;
	struct py_syms syms;
	uint64_t head_off = 0;
	uint32_t key = pid;
	int err, minor;

	*out = NULL;
	err = proc_table__for_each_mapping(py->procs, pid, _find_interp, &f);
	if (err)
		return err;
	if (!f.bin)
		return -ENOENT;
	err = _find_syms(f.bin->fd, &syms);
	if (err)
		return err;
	minor = f.minor;
	if (syms.have_version) {
		uint32_t hex = 0;

		/* Py_Version (3.11+) is PY_VERSION_HEX, truer than a file name. */
		if (interp__read_mem(pid, syms.py_version + f.bias, &hex, sizeof(hex)) == 0 &&
		    hex >> 24 == 3)
			minor = (hex >> 16) & 0xff;
	}
	if (minor >= 13)
		err = _debug_layout(pid, syms.runtime + f.bias, &bp, &cl, &head_off);
	else
		err = _static_layout(minor, &bp, &cl, &head_off);
	if (err) {
		pr_debug("pid %d: CPython 3.%d not supported: %s\n", pid, minor, strerror(-err));
		return err;
	}
	bp.interp_head = syms.runtime + f.bias + head_off;
	bp.code_type = syms.code_type + f.bias;
	if (cl.firstlineno && cl.firstlineno + 4 <= FW_PY_CODE_READ)
		bp.code_firstlineno = cl.firstlineno;

	pp = calloc(1, sizeof(*pp));
	if (!pp)
		return -ENOMEM;
	pp->pid = pid;
	pp->minor = minor;
	pp->epoch = py->next_epoch++;
	pp->code = cl;
	pp->code_type = bp.code_type;
	pp->line_checked = bp.code_firstlineno != 0;
	pp->interp_start = f.lo;
	pp->interp_end = f.hi;
	if (syms.have_eval) {
		pp->eval_start = syms.eval + f.bias;
		pp->eval_end = pp->eval_start + (syms.eval_size ? syms.eval_size : 1);
	}
	if (bpf_map_update_elem(py->map_fd, &key, &bp, BPF_ANY)) {
		err = -errno;
		free(pp);
		return err;
	}
	pr_debug("pid %d: CPython 3.%d in %s\n", pid, minor, f.bin->path);
	*out = pp;
	return 0;
}

void python__note_pid(struct python *py, pid_t pid)
{
	if (interp_procs__note(py->pids, pid, _describe, py))
		py->st.procs++;
}

void python__maps_changed(struct python *py, pid_t pid)
{
	if (interp_procs__maps_changed(py->pids, pid, _describe, py))
		py->st.procs++;
}

void python__forget(struct python *py, pid_t pid)
{
	struct python_proc *pp = interp_procs__forget(py->pids, pid);
	uint32_t key = pid;

	if (!pp)
		return;
	bpf_map_delete_elem(py->map_fd, &key);
	py->st.procs--;
	free(pp);
}

const struct python_proc *python__proc(struct python *py, pid_t pid)
{
	return py ? interp_procs__get(py->pids, pid) : NULL;
}

bool python__is_eval(const struct python_proc *pp, uint64_t addr)
{
	return addr >= pp->eval_start && addr < pp->eval_end;
}

bool python__in_interp(const struct python_proc *pp, uint64_t addr)
{
	return addr >= pp->interp_start && addr < pp->interp_end;
}

/* ---- code objects ------------------------------------------------------ */

static void _put_utf8(char *out, size_t *n, size_t cap, uint32_t c)
{
	char tmp[4];
	size_t k;

	/*
	 * Memory read from a process can be a str freed and reused under us:
	 * a code point no UTF-8 can hold (a surrogate, past U+10FFFF) must not
	 * put invalid UTF-8 in a profile (pprof and JSON readers refuse it).
	 */
	if ((c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff)
		c = '?';
	if (c < 0x80) {
		tmp[0] = c;
		k = 1;
	} else if (c < 0x800) {
		tmp[0] = 0xc0 | c >> 6;
		tmp[1] = 0x80 | (c & 0x3f);
		k = 2;
	} else if (c < 0x10000) {
		tmp[0] = 0xe0 | c >> 12;
		tmp[1] = 0x80 | ((c >> 6) & 0x3f);
		tmp[2] = 0x80 | (c & 0x3f);
		k = 3;
	} else {
		tmp[0] = 0xf0 | c >> 18;
		tmp[1] = 0x80 | ((c >> 12) & 0x3f);
		tmp[2] = 0x80 | ((c >> 6) & 0x3f);
		tmp[3] = 0x80 | (c & 0x3f);
		k = 4;
	}
	if (*n + k < cap) {
		memcpy(out + *n, tmp, k);
		*n += k;
	}
}

/* Reads a compact str object as UTF-8 into an owned string. */
static char *_read_str(pid_t pid, const struct code_layout *cl, uint64_t obj)
{
	uint8_t head[80], raw[STR_MAX * 4];
	uint64_t len;
	uint32_t state, kind;
	size_t n = 0;
	char *out;

	if (!obj || interp__read_mem(pid, obj, head, cl->compact_size))
		return NULL;
	memcpy(&len, head + 16, 8);
	memcpy(&state, head + 32, 4);
	kind = (state >> 2) & 7;
	if (!((state >> 5) & 1) || (kind != 1 && kind != 2 && kind != 4))
		return NULL;	/* not compact: never the case for names */
	if (len > STR_MAX)
		len = STR_MAX;
	if (len && interp__read_mem(pid, obj + (((state >> 6) & 1) ? cl->ascii_size : cl->compact_size),
			     raw, len * kind))
		return NULL;
	out = malloc(len * 4 + 1);
	if (!out)
		return NULL;
	for (uint64_t i = 0; i < len; i++) {
		uint32_t c = kind == 1 ? raw[i] : kind == 2 ? ((uint16_t *)raw)[i] : ((uint32_t *)raw)[i];

		_put_utf8(out, &n, len * 4 + 1, c ? c : '?');
	}
	out[n] = '\0';
	return out;
}

static int _read_code(pid_t pid, const struct code_layout *cl, uint64_t code_type, uint64_t code,
		      struct code_entry *ce)
{
	uint8_t obj[256];
	uint64_t name, file, lt, ltlen, type;
	int32_t first;
	int err = interp__read_mem(pid, code, obj, sizeof(obj));

	if (err)
		return err;
	memcpy(&type, obj + 8, 8);
	/* BPF checked the type at the sample; memory freed since may hold anything. */
	if (code_type && type != code_type)
		return -EINVAL;
	memcpy(&name, obj + cl->name, 8);
	memcpy(&file, obj + cl->filename, 8);
	memcpy(&first, obj + cl->firstlineno, 4);
	memcpy(&lt, obj + cl->linetable, 8);
	ce->function = _read_str(pid, cl, name);
	ce->file = _read_str(pid, cl, file);
	if (!ce->function) {
		free(ce->file);
		ce->file = NULL;
		return -EINVAL;
	}
	ce->firstlineno = first > 0 ? first : 0;
	if (lt && interp__read_mem(pid, lt + 16, &ltlen, 8) == 0 && ltlen <= LINETABLE_MAX) {
		ce->lt = malloc(ltlen + 1);
		if (ce->lt && interp__read_mem(pid, lt + 32, ce->lt, ltlen) == 0) {
			ce->ltlen = ltlen;
		} else {
			free(ce->lt);
			ce->lt = NULL;
		}
	}
	return 0;
}

/* line_byte: co_firstlineno's low byte at the sample, -1 when BPF did not read it. */
static struct code_entry *_code(struct python *py, const struct python_proc *pp, uint64_t code,
				int line_byte)
{
	struct { uint64_t epoch, code; } key = { pp->epoch, code };
	struct code_entry *ce;
	bool added;
	int64_t id;

	if (!py->code_keys || intern__count(py->code_keys) >= CODE_CACHE_MAX ||
	    py->code_bytes >= py->max_code_bytes) {
		if (py->code_keys)
			py->st.code_cache_clears++;
		_codes_clear(py);
		py->code_keys = intern__new();
		if (!py->code_keys)
			return NULL;
	}
	id = intern__add(py->code_keys, &key, sizeof(key), &added);
	if (id < 0)
		return NULL;
	if ((uint32_t)id >= py->cap_codes) {
		uint32_t cap = py->cap_codes ? py->cap_codes * 2 : 256;
		struct code_entry *c = realloc(py->codes, cap * sizeof(*c));

		if (!c) {
			_codes_clear(py);
			return NULL;
		}
		py->codes = c;
		py->cap_codes = cap;
	}
	ce = &py->codes[id];
	if (added) {
		memset(ce, 0, sizeof(*ce));
	} else if (ce->err && ce->err != -ESRCH && ce->rereads < REREADS_MAX &&
		   clock__mono_ns() - ce->failed_ns >= REREAD_NS) {
		uint32_t rereads = ce->rereads + 1;

		free(ce->lt);
		memset(ce, 0, sizeof(*ce));
		ce->rereads = rereads;
		py->st.code_rereads++;
		added = true;
	} else if (!ce->err && line_byte >= 0 && (ce->firstlineno & 0xff) != (uint32_t)line_byte &&
		   ce->replaced_by != line_byte + 1) {
		/* The code object read there was freed, another one took its memory. */
		free(ce->function);
		free(ce->file);
		free(ce->lt);
		memset(ce, 0, sizeof(*ce));
		ce->replaced_by = line_byte + 1;	/* once per change, whatever it reads */
		py->st.code_replaced++;
		added = true;
	}
	if (added) {
		struct fw_py_code_key k = { .pid = (uint32_t)pp->pid, .code = code };
		uint8_t one = 1;

		/* Read, or tried: later samples of it need not wake us. */
		if (py->known_fd >= 0)
			bpf_map_update_elem(py->known_fd, &k, &one, BPF_ANY);
		py->st.code_reads++;
		ce->err = _read_code(pp->pid, &pp->code, pp->code_type, code, ce);
		/* What the entry holds; replaced ones are not taken off: a clear comes sooner. */
		py->code_bytes += sizeof(*ce) + sizeof(key) + ce->ltlen +
				  (ce->function ? strlen(ce->function) + 1 : 0) +
				  (ce->file ? strlen(ce->file) + 1 : 0);
		if (ce->err) {
			pr_debug("pid %d: code object 0x%llx: %s\n", pp->pid, (unsigned long long)code,
				 strerror(-ce->err));
			ce->failed_ns = clock__mono_ns();
			py->st.code_read_errors++;
			if (ce->err == -ESRCH)
				py->st.code_read_gone++;
			else if (ce->err == -EINVAL)
				py->st.code_read_bad++;
			else
				py->st.code_read_fault++;
		}
	}
	return ce;
}

static uint64_t _varint(const uint8_t *t, size_t len, size_t *i)
{
	uint64_t v = 0;
	int shift = 0;

	while (*i < len) {
		uint8_t b = t[(*i)++];

		v |= (uint64_t)(b & 63) << shift;
		shift += 6;
		if (!(b & 64) || shift > 60)
			break;
	}
	return v;
}

static int64_t _svarint(const uint8_t *t, size_t len, size_t *i)
{
	uint64_t v = _varint(t, len, i);

	return v & 1 ? -(int64_t)(v >> 1) : (int64_t)(v >> 1);
}

/*
 * The 3.11+ location table: entries of one header byte (bit 7 set, a code
 * in bits 3-6, length - 1 code units in bits 0-2) and code-specific data.
 * Code 15: no location; 14: long form (signed line delta, end line, two
 * columns); 13: no columns (signed line delta); 10-12: line delta code-10
 * and two column bytes; 0-9: same line, one column byte.
 */
uint32_t python__line_311(const uint8_t *t, size_t len, uint32_t firstlineno, uint64_t unit)
{
	int64_t line = firstlineno;
	uint64_t addr = 0;
	size_t i = 0;

	while (i < len) {
		uint8_t h = t[i++];
		uint32_t code = (h >> 3) & 15, n = (h & 7) + 1;
		bool has_line = true;

		if (!(h & 0x80))
			return 0;	/* out of step: not a header */
		switch (code) {
		case 15:
			has_line = false;
			break;
		case 14:
			line += _svarint(t, len, &i);
			_varint(t, len, &i);
			_varint(t, len, &i);
			_varint(t, len, &i);
			break;
		case 13:
			line += _svarint(t, len, &i);
			break;
		case 10:
		case 11:
		case 12:
			line += code - 10;
			i += 2;
			break;
		default:
			i += 1;
			break;
		}
		if (unit >= addr && unit < addr + n)
			return has_line && line > 0 ? (uint32_t)line : 0;
		addr += n;
	}
	return 0;
}

/*
 * The 3.10 line table (PEP 626): pairs of (unsigned byte delta, signed line
 * delta); a line delta of -128 means no line for that range.
 */
uint32_t python__line_310(const uint8_t *t, size_t len, uint32_t firstlineno, uint64_t offset)
{
	int64_t line = firstlineno, cur;
	uint64_t addr = 0;

	for (size_t i = 0; i + 1 < len; i += 2) {
		uint8_t sdelta = t[i];
		int8_t ldelta = (int8_t)t[i + 1];

		if (ldelta == -128) {
			cur = -1;
		} else {
			line += ldelta;
			cur = line;
		}
		if (offset >= addr && offset < addr + sdelta)
			return cur > 0 ? (uint32_t)cur : 0;
		addr += sdelta;
	}
	return 0;
}

int python__frame(struct python *py, const struct python_proc *pp, uint64_t code,
		  uint64_t word1, const char **function, const char **file, uint32_t *line)
{
	uint64_t instr = word1 & FW_PY_INSTR_MASK;
	int line_byte = pp->line_checked ? (int)((word1 & FW_PY_LINE_MASK) >> FW_PY_LINE_SHIFT) : -1;
	struct code_entry *ce = _code(py, pp, code, line_byte);

	*function = NULL;
	*file = NULL;
	*line = 0;
	if (!ce)
		return -ENOMEM;
	if (ce->err)
		return ce->err;
	*function = ce->function;
	*file = ce->file;
	if (!ce->lt)
		return 0;
	if (pp->minor == 10) {
		*line = python__line_310(ce->lt, ce->ltlen, ce->firstlineno, instr * 2);
	} else {
		uint64_t first = code + pp->code.code_adaptive;
		uint64_t unit = instr > first ? (instr - first) / 2 : 0;

		*line = python__line_311(ce->lt, ce->ltlen, ce->firstlineno, unit);
	}
	return 0;
}

void python__stats(const struct python *py, struct python_stats *out)
{
	*out = py->st;
}

static void _ops_note_pid(void *py, pid_t pid)
{
	python__note_pid(py, pid);
}

static void _ops_maps_changed(void *py, pid_t pid)
{
	python__maps_changed(py, pid);
}

static void _ops_forget(void *py, pid_t pid)
{
	python__forget(py, pid);
}

static void _ops_report(void *py)
{
	struct python_stats ps;

	python__stats(py, &ps);
	/* Unreadable code objects are the samples' [python code 0x...] frames. */
	if (ps.code_reads)
		pr_info("python: %llu code objects read, %llu unreadable (%llu of exited "
			"processes, %llu unmapped, %llu not code objects: freed or reused), "
			"%llu read again, %llu replaced at their address; the cache started "
			"afresh %llu times\n",
			(unsigned long long)ps.code_reads, (unsigned long long)ps.code_read_errors,
			(unsigned long long)ps.code_read_gone,
			(unsigned long long)ps.code_read_fault, (unsigned long long)ps.code_read_bad,
			(unsigned long long)ps.code_rereads, (unsigned long long)ps.code_replaced,
			(unsigned long long)ps.code_cache_clears);
}

static void _ops_free(void *py)
{
	python__free(py);
}

/* An exec'd process's interpreter, if any, is another: forgotten as at exit. */
const struct interp_ops python_interp_ops = {
	.name = "python",
	.note_pid = _ops_note_pid,
	.follow = _ops_note_pid,
	.maps_changed = _ops_maps_changed,
	.exec = _ops_forget,
	.forget = _ops_forget,
	.report = _ops_report,
	.free = _ops_free,
};
