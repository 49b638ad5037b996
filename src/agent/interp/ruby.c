// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "agent/bpf/ruby.h"
#include "agent/interp/interp.h"
#include "agent/interp/interp_procs.h"
#include "agent/interp/ruby.h"
#include "agent/procmaps.h"
#include "agent/proc_table.h"
#include "common/clock.h"
#include "common/intern.h"
#include "common/log.h"
#include "symbolize/elf_file.h"

/* Where an iseq and its body keep what naming a frame needs. */
struct iseq_layout {
	uint16_t body;		/* rb_iseq_t.body */
	uint16_t size;		/* body->iseq_size (unsigned int, words) */
	uint16_t encoded;	/* body->iseq_encoded: pc 0 */
	uint16_t pathobj;	/* body->location.pathobj: String, or [path, realpath] */
	uint16_t label;		/* body->location.label */
	uint16_t first_lineno;	/* body->location.first_lineno (Fixnum) */
	uint16_t insns_body;	/* body->insns_info.body: iseq_insn_info_entry[size] */
	uint16_t insns_positions;	/* body->insns_info.positions, or NULL */
	uint16_t insns_size;	/* body->insns_info.size (unsigned int) */
	uint16_t insns_succ;	/* body->insns_info.succ_index_table, or NULL */
	uint16_t entry_size;	/* sizeof(struct iseq_insn_info_entry); line_no first */
	uint16_t body_read;	/* bytes of the body that hold all of the above */
};

struct ruby_proc {
	pid_t pid;
	uint64_t epoch;			/* this image's iseqs in the cache */
	uint64_t exec_start, exec_end;	/* rb_vm_exec */
	uint64_t vm_start, vm_end;	/* the VM binary's code */
	struct iseq_layout iseq;
};

#define ISEQ_CACHE_MAX 65536
#define STR_MAX 512
#define LINES_MAX 65536		/* instruction info entries read per iseq */
#define SUCC_MAX (1 << 20)	/* bytes of a succinct index table read per iseq */

/*
 * Ruby's GC frees iseqs (the gems' code run at start-up) and gives their
 * slots to the next ones, so an entry cached by address can be of an iseq
 * that is gone: one whose read failed, or one whose instructions do not
 * hold the pc of a sample. Such an entry is read again, at most this often.
 */
#define REREAD_NS 200000000ULL

struct iseq_entry {
	char *function, *file;
	uint32_t first_lineno;
	uint64_t encoded;
	uint32_t size;		/* VALUEs at encoded */
	uint32_t nlines;
	uint32_t *pos, *line;	/* nlines instruction positions and their lines */
	int err;		/* the read failed */
	uint64_t read_ns;
};

struct ruby {
	int map_fd;
	struct proc_table *procs;
	struct interp_procs *pids;	/* pid -> struct ruby_proc */
	uint64_t next_epoch;
	struct intern *iseq_keys;	/* (epoch, iseq address) -> index in iseqs */
	struct iseq_entry *iseqs;
	uint32_t cap_iseqs;
	struct ruby_stats st;
};

struct ruby *ruby__new(int map_fd, struct proc_table *procs)
{
	struct ruby *rb = calloc(1, sizeof(*rb));

	if (!rb)
		return NULL;
	rb->map_fd = map_fd;
	rb->procs = procs;
	rb->next_epoch = 1;
	rb->pids = interp_procs__new();
	if (!rb->pids) {
		free(rb);
		return NULL;
	}
	return rb;
}

static void _iseqs_clear(struct ruby *rb)
{
	uint32_t n = rb->iseq_keys ? intern__count(rb->iseq_keys) : 0;

	for (uint32_t i = 0; i < n; i++) {
		free(rb->iseqs[i].function);
		free(rb->iseqs[i].file);
		free(rb->iseqs[i].pos);
		free(rb->iseqs[i].line);
	}
	intern__free(rb->iseq_keys);
	rb->iseq_keys = NULL;
	free(rb->iseqs);
	rb->iseqs = NULL;
	rb->cap_iseqs = 0;
}

void ruby__free(struct ruby *rb)
{
	if (!rb)
		return;
	interp_procs__free(rb->pids);
	_iseqs_clear(rb);
	free(rb);
}

/* ---- finding the VM ---------------------------------------------------- */

/* "libruby-3.1.so.3.1.2", "libruby.so.3.1", "ruby", "ruby3.1": a VM candidate. */
static bool _is_ruby_name(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return strncmp(base, "libruby", 7) == 0 || strncmp(base, "ruby", 4) == 0;
}

struct rb_syms {
	uint64_t ec_tls;		/* ruby_current_ec: offset in the binary's TLS block */
	uint64_t version;		/* ruby_version: "3.1.2" */
	uint64_t exec, exec_size;	/* rb_vm_exec */
	uint32_t ec_sym;		/* its index in .dynsym, for the relocations */
	bool have_ec, have_version, have_exec, ec_dynamic;
	/* What the relocations against ruby_current_ec say. */
	uint64_t got_modid;		/* R_X86_64_DTPMOD64: the slot ld.so fills with the module id */
	uint64_t got_tpoff;		/* R_X86_64_TPOFF64: the slot ld.so fills with the tp offset */
	bool have_modid, have_tpoff;
};

static void _scan_symtab(Elf *elf, Elf_Scn *scn, GElf_Shdr *sh, struct rb_syms *out)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || !sh->sh_entsize)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < n; i++) {
		GElf_Sym sym;
		const char *name;

		if (!gelf_getsym(data, i, &sym) || sym.st_shndx == SHN_UNDEF)
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || (name[0] != 'r'))
			continue;
		if (!out->have_ec && strcmp(name, "ruby_current_ec") == 0 &&
		    GELF_ST_TYPE(sym.st_info) == STT_TLS) {
			out->ec_tls = sym.st_value;
			out->have_ec = true;
			if (sh->sh_type == SHT_DYNSYM) {
				out->ec_sym = i;
				out->ec_dynamic = true;
			}
		} else if (!out->have_version && sym.st_value && strcmp(name, "ruby_version") == 0) {
			out->version = sym.st_value;
			out->have_version = true;
		} else if (!out->have_exec && sym.st_value && strcmp(name, "rb_vm_exec") == 0) {
			out->exec = sym.st_value;
			out->exec_size = sym.st_size;
			out->have_exec = true;
		}
	}
}

/* The dynamic relocations that tell where the linker put ruby_current_ec. */
static void _scan_relocs(Elf_Scn *scn, GElf_Shdr *sh, struct rb_syms *out)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t n;

	if (!data || !sh->sh_entsize)
		return;
	n = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < n; i++) {
		GElf_Rela r;

		if (!gelf_getrela(data, i, &r) || GELF_R_SYM(r.r_info) != out->ec_sym)
			continue;
		switch (GELF_R_TYPE(r.r_info)) {
		case R_X86_64_DTPMOD64:
			out->got_modid = r.r_offset;
			out->have_modid = true;
			break;
		case R_X86_64_TPOFF64:
			out->got_tpoff = r.r_offset;
			out->have_tpoff = true;
			break;
		}
	}
}

static int _find_syms(int fd, struct rb_syms *out)
{
	int types[2] = { SHT_DYNSYM, SHT_SYMTAB };
	Elf_Scn *scn = NULL;
	Elf *elf;

	memset(out, 0, sizeof(*out));
	if (fd < 0)
		return -EBADF;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -ENOEXEC;
	for (int t = 0; t < 2; t++) {
		scn = NULL;
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;

			if (gelf_getshdr(scn, &sh) && sh.sh_type == (unsigned)types[t])
				_scan_symtab(elf, scn, &sh, out);
		}
	}
	scn = NULL;
	while (out->ec_dynamic && (scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;

		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_RELA)
			_scan_relocs(scn, &sh, out);
	}
	elf_end(elf);
	return out->have_ec && out->have_version ? 0 : -ENOENT;
}

struct find_ctx {
	struct binary *bin;
	uint64_t bias;
	uint64_t lo, hi;	/* the VM binary's executable mappings */
};

static int _find_vm(void *ctx, const struct proc_mapping *m, struct binary *b)
{
	struct find_ctx *f = ctx;

	if (!b || !b->elf)
		return 0;
	if (f->bin == b) {
		if (m->start < f->lo)
			f->lo = m->start;
		if (m->end > f->hi)
			f->hi = m->end;
		return 0;
	}
	if (!_is_ruby_name(b->path))
		return 0;
	/* libruby wins over the ruby executable that links it. */
	if (f->bin && strstr(f->bin->path, "libruby"))
		return 0;
	if (elf_file__load_bias(b->elf, m->start, m->end, m->offset, &f->bias))
		return 0;
	f->bin = b;
	f->lo = m->start;
	f->hi = m->end;
	return 0;
}

/*
 * Struct layouts by version: facts of CRuby's vm_core.h, iseq.h and
 * ruby/internal/core (3.1.x), checked against Debian's ruby 3.1.2 by
 * walking a live process with a debugger (docs/ruby.md).
 */
static int _layout(const char *version, struct fw_rb_proc *bp, struct iseq_layout *il)
{
	if (strncmp(version, "3.1.", 4) != 0)
		return -ENOTSUP;
	*bp = (struct fw_rb_proc){
		.ec_vm_stack = 0, .ec_vm_stack_size = 8, .ec_cfp = 16,
		.cfp_size = 64, .cfp_pc = 0, .cfp_iseq = 16, .cfp_ep = 32,
	};
	*il = (struct iseq_layout){
		.body = 16, .size = 4, .encoded = 8, .pathobj = 64, .label = 80,
		.first_lineno = 88, .insns_body = 120, .insns_positions = 128,
		.insns_size = 136, .insns_succ = 144, .entry_size = 12, .body_read = 152,
	};
	return 0;
}

static int _describe(void *ctx, pid_t pid, void **out)
{
	struct ruby *rb = ctx;
	struct find_ctx f = { 0 };
	struct fw_rb_proc bp;
	struct iseq_layout il;
	struct ruby_proc *rp;
	struct rb_syms syms;
	char version[16] = "";
	uint32_t key = pid;
	int err;

	*out = NULL;
	err = proc_table__for_each_mapping(rb->procs, pid, _find_vm, &f);
	if (err)
		return err;
	if (!f.bin)
		return -ENOENT;
	err = _find_syms(f.bin->fd, &syms);
	if (err)
		return err;
	err = interp__read_mem(pid, syms.version + f.bias, version, sizeof(version) - 1);
	if (err)
		return err;
	err = _layout(version, &bp, &il);
	if (err) {
		pr_debug("pid %d: Ruby %.15s not supported\n", pid, version);
		return err;
	}
	if (syms.have_modid) {
		uint64_t modid = 0;

		/* The module id ld.so gave the binary: same for every thread. */
		err = interp__read_mem(pid, syms.got_modid + f.bias, &modid, sizeof(modid));
		if (err)
			return err;
		if (!modid || modid > 0xffff)
			return -EPROTO;	/* not relocated yet: look again later */
		bp.tls_mode = FW_RB_TLS_DTV;
		bp.tls_modid = modid;
		bp.tls_off = syms.ec_tls;
	} else if (syms.have_tpoff) {
		uint64_t off = 0;

		err = interp__read_mem(pid, syms.got_tpoff + f.bias, &off, sizeof(off));
		if (err)
			return err;
		if (!off)
			return -EPROTO;
		bp.tls_mode = FW_RB_TLS_TP;
		bp.tls_off = (int64_t)off;
	} else {
		/* Local-exec TLS in a static executable: the offset is in its code. */
		pr_debug("pid %d: no TLS relocation for ruby_current_ec in %s\n", pid, f.bin->path);
		return -ENOTSUP;
	}

	rp = calloc(1, sizeof(*rp));
	if (!rp)
		return -ENOMEM;
	rp->pid = pid;
	rp->epoch = rb->next_epoch++;
	rp->iseq = il;
	rp->vm_start = f.lo;
	rp->vm_end = f.hi;
	if (syms.have_exec) {
		rp->exec_start = syms.exec + f.bias;
		rp->exec_end = rp->exec_start + (syms.exec_size ? syms.exec_size : 1);
	}
	if (bpf_map_update_elem(rb->map_fd, &key, &bp, BPF_ANY)) {
		err = -errno;
		free(rp);
		return err;
	}
	pr_debug("pid %d: Ruby %.15s in %s, TLS module %u\n", pid, version, f.bin->path,
		 bp.tls_modid);
	*out = rp;
	return 0;
}

void ruby__note_pid(struct ruby *rb, pid_t pid)
{
	if (interp_procs__note(rb->pids, pid, _describe, rb))
		rb->st.procs++;
}

void ruby__maps_changed(struct ruby *rb, pid_t pid)
{
	if (interp_procs__maps_changed(rb->pids, pid, _describe, rb))
		rb->st.procs++;
}

void ruby__forget(struct ruby *rb, pid_t pid)
{
	struct ruby_proc *rp = interp_procs__forget(rb->pids, pid);
	uint32_t key = pid;

	if (!rp)
		return;
	bpf_map_delete_elem(rb->map_fd, &key);
	rb->st.procs--;
	free(rp);
}

const struct ruby_proc *ruby__proc(struct ruby *rb, pid_t pid)
{
	return rb ? interp_procs__get(rb->pids, pid) : NULL;
}

bool ruby__is_exec(const struct ruby_proc *rp, uint64_t addr)
{
	return addr >= rp->exec_start && addr < rp->exec_end;
}

bool ruby__in_vm(const struct ruby_proc *rp, uint64_t addr)
{
	return addr >= rp->vm_start && addr < rp->vm_end;
}

/* ---- iseqs ------------------------------------------------------------- */

/* Object type bits of RBasic.flags (ruby/internal/value_type.h). */
#define T_MASK 0x1f
#define T_STRING 0x05
#define T_ARRAY 0x07
#define T_IMEMO 0x1a
#define FL_USHIFT 12
#define IMEMO_ISEQ 7
/* 3.1: strings with FL_USER1 live out of line; embedded ones keep their length in flags. */
#define FL_USER1 (1ull << (FL_USHIFT + 1))
#define STR_EMBED_LEN_SHIFT (FL_USHIFT + 2)
#define STR_EMBED_LEN_MASK 0x1f

/* Reads a String object into an owned C string, unprintable bytes as '?'. */
static char *_read_str(pid_t pid, uint64_t obj)
{
	uint64_t head[4], len, ptr;
	char *out;

	if (!obj || obj & 7 || interp__read_mem(pid, obj, head, sizeof(head)))
		return NULL;
	if ((head[0] & T_MASK) != T_STRING)
		return NULL;
	if (head[0] & FL_USER1) {
		len = head[2];
		ptr = head[3];
	} else {
		len = (head[0] >> STR_EMBED_LEN_SHIFT) & STR_EMBED_LEN_MASK;
		ptr = obj + 16;
	}
	if (len > STR_MAX)
		len = STR_MAX;
	out = malloc(len + 1);
	if (!out)
		return NULL;
	if (len && interp__read_mem(pid, ptr, out, len)) {
		free(out);
		return NULL;
	}
	/*
	 * Ruby strings carry their encoding; labels and paths are nearly always
	 * ASCII. Anything else is masked rather than risk invalid UTF-8 in a
	 * profile, which pprof and JSON readers refuse.
	 */
	for (uint64_t i = 0; i < len; i++)
		if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f)
			out[i] = '?';
	out[len] = '\0';
	return out;
}

/* A path object: a String, or an Array whose first element is the path. */
static char *_read_path(pid_t pid, uint64_t obj)
{
	uint64_t head[5], first;

	if (!obj || obj & 7 || interp__read_mem(pid, obj, head, sizeof(head)))
		return NULL;
	if ((head[0] & T_MASK) != T_ARRAY)
		return _read_str(pid, obj);
	/* For arrays FL_USER1 means embedded: the elements follow the header. */
	if (head[0] & FL_USER1) {
		first = head[2];
	} else if (!head[2] || interp__read_mem(pid, head[4], &first, sizeof(first))) {
		return NULL;
	}
	return _read_str(pid, first);
}

static uint64_t _u64(const uint8_t *b, uint16_t off)
{
	uint64_t v;

	memcpy(&v, b + off, 8);
	return v;
}

static uint32_t _u32(const uint8_t *b, uint16_t off)
{
	uint32_t v;

	memcpy(&v, b + off, 4);
	return v;
}

/* Succinct index table geometry (iseq.c): 54 positions ranked 9 to a word, then 512-bit blocks. */
#define SUCC_IMM 54
#define SUCC_BLOCK_BYTES 80	/* unsigned rank, padding, 9-bit small ranks, 8 words of bits */

static size_t _succ_len(uint32_t iseq_size)
{
	size_t imm = (iseq_size < SUCC_IMM ? iseq_size + 8 : SUCC_IMM) / 9;
	size_t blocks = iseq_size < SUCC_IMM ? 0 : (iseq_size - SUCC_IMM + 511) / 512;

	return imm * 8 + blocks * SUCC_BLOCK_BYTES;
}

int ruby__succ_positions(const uint8_t *t, size_t len, uint32_t iseq_size, uint32_t *out,
			 uint32_t max)
{
	size_t imm = (iseq_size < SUCC_IMM ? iseq_size + 8 : SUCC_IMM) / 9;
	size_t blocks = iseq_size < SUCC_IMM ? 0 : (iseq_size - SUCC_IMM + 511) / 512;
	uint32_t n = 0;
	int rank = 0;

	if (len < _succ_len(iseq_size))
		return -EINVAL;
	/* The immediate part keeps the rank (positions so far) at each index: a rise marks one. */
	for (size_t j = 0; j < imm; j++) {
		uint64_t w;

		memcpy(&w, t + 8 * j, 8);
		for (int i = 0; i < 9; i++) {
			int r = (int)((w >> (7 * i)) & 0x7f);

			if (r != rank && n < max)
				out[n++] = (uint32_t)(j * 9 + i);
			rank = r;
		}
	}
	/* The blocks keep plain bits: one per position. */
	for (size_t k = 0; k < blocks; k++) {
		const uint8_t *b = t + imm * 8 + k * SUCC_BLOCK_BYTES;

		for (int j = 0; j < 8; j++) {
			uint64_t bits;

			memcpy(&bits, b + 16 + 8 * j, 8);
			for (int i = 0; i < 64; i++)
				if (bits & (1ull << i) && n < max)
					out[n++] = (uint32_t)(SUCC_IMM + k * 512 + j * 64 + i);
		}
	}
	return (int)n;
}

/* Reads the (position, line) table of an iseq body into ie. */
static int _read_lines(pid_t pid, const struct iseq_layout *il, const uint8_t *body,
		       struct iseq_entry *ie)
{
	uint64_t entries = _u64(body, il->insns_body), positions = _u64(body, il->insns_positions);
	uint64_t succ = _u64(body, il->insns_succ);
	uint32_t n = _u32(body, il->insns_size), iseq_size = _u32(body, il->size);
	uint8_t *raw = NULL;
	int err = -ENOMEM, got;

	if (!n || !entries || n > LINES_MAX)
		return 0;
	ie->pos = calloc(n, sizeof(*ie->pos));
	ie->line = calloc(n, sizeof(*ie->line));
	raw = malloc((size_t)n * il->entry_size);
	if (!ie->pos || !ie->line || !raw)
		goto out;
	err = interp__read_mem(pid, entries, raw, (size_t)n * il->entry_size);
	if (err)
		goto out;
	for (uint32_t i = 0; i < n; i++)
		ie->line[i] = _u32(raw, i * il->entry_size);
	free(raw);
	raw = NULL;
	if (n == 1) {
		got = 1;	/* one entry covers the whole iseq: no table */
	} else if (positions) {
		err = interp__read_mem(pid, positions, ie->pos, (size_t)n * sizeof(*ie->pos));
		if (err)
			goto out;
		got = n;
	} else if (succ) {
		size_t len = _succ_len(iseq_size);

		err = -E2BIG;
		if (len > SUCC_MAX)
			goto out;
		err = -ENOMEM;
		raw = malloc(len);
		if (!raw)
			goto out;
		err = interp__read_mem(pid, succ, raw, len);
		if (err)
			goto out;
		got = ruby__succ_positions(raw, len, iseq_size, ie->pos, n);
		err = got < 0 ? got : 0;
		if (err)
			goto out;
	} else {
		err = 0;
		goto out;
	}
	ie->nlines = (uint32_t)got;
	err = 0;
out:
	free(raw);
	if (err || !ie->nlines) {
		free(ie->pos);
		free(ie->line);
		ie->pos = ie->line = NULL;
	}
	return err;
}

static int _read_iseq(pid_t pid, const struct iseq_layout *il, uint64_t iseq,
		      struct iseq_entry *ie)
{
	uint64_t head[3], body_addr, lineno;
	uint8_t body[256];
	int err;

	if (il->body_read > sizeof(body))
		return -EINVAL;
	err = interp__read_mem(pid, iseq, head, sizeof(head));
	if (err)
		return err;
	/* Only instruction sequences have pcs; anything else here is a race. */
	if ((head[0] & T_MASK) != T_IMEMO || ((head[0] >> FL_USHIFT) & 0xf) != IMEMO_ISEQ) {
		pr_debug("pid %d: 0x%llx is no iseq (flags 0x%llx)\n", pid, (unsigned long long)iseq,
			 (unsigned long long)head[0]);
		return -EPROTO;
	}
	body_addr = head[il->body / 8];
	err = interp__read_mem(pid, body_addr, body, il->body_read);
	if (err)
		return err;
	ie->function = _read_str(pid, _u64(body, il->label));
	if (!ie->function)
		return -EFAULT;
	ie->file = _read_path(pid, _u64(body, il->pathobj));
	ie->encoded = _u64(body, il->encoded);
	ie->size = _u32(body, il->size);
	lineno = _u64(body, il->first_lineno);
	ie->first_lineno = lineno & 1 && (int64_t)lineno > 0 ? (uint32_t)(lineno >> 1) : 0;
	/* Without its line table the frame is still named, with its first line. */
	(void)_read_lines(pid, il, body, ie);
	return 0;
}

/* Whether entry ie, read at this address before, cannot be the iseq that ran pc. */
static bool _stale(const struct iseq_entry *ie, uint64_t pc)
{
	if (ie->err)
		return ie->err != -ESRCH;
	return pc && ie->encoded && ie->size &&
	       (pc < ie->encoded || pc > ie->encoded + (uint64_t)ie->size * 8);
}

static struct iseq_entry *_iseq(struct ruby *rb, const struct ruby_proc *rp, uint64_t iseq,
				uint64_t pc)
{
	struct { uint64_t epoch, iseq; } key = { rp->epoch, iseq };
	struct iseq_entry *ie;
	bool added;
	int64_t id;

	if (!rb->iseq_keys || intern__count(rb->iseq_keys) >= ISEQ_CACHE_MAX) {
		_iseqs_clear(rb);
		rb->iseq_keys = intern__new();
		if (!rb->iseq_keys)
			return NULL;
	}
	id = intern__add(rb->iseq_keys, &key, sizeof(key), &added);
	if (id < 0)
		return NULL;
	if ((uint32_t)id >= rb->cap_iseqs) {
		uint32_t cap = rb->cap_iseqs ? rb->cap_iseqs * 2 : 256;
		struct iseq_entry *c = realloc(rb->iseqs, cap * sizeof(*c));

		if (!c) {
			_iseqs_clear(rb);
			return NULL;
		}
		rb->iseqs = c;
		rb->cap_iseqs = cap;
	}
	ie = &rb->iseqs[id];
	if (!added && _stale(ie, pc) && clock__mono_ns() - ie->read_ns >= REREAD_NS) {
		free(ie->function);
		free(ie->file);
		free(ie->pos);
		free(ie->line);
		rb->st.iseq_rereads++;
		added = true;
	}
	if (added) {
		memset(ie, 0, sizeof(*ie));
		ie->read_ns = clock__mono_ns();
		rb->st.iseq_reads++;
		ie->err = _read_iseq(rp->pid, &rp->iseq, iseq, ie);
		if (ie->err) {
			rb->st.iseq_read_errors++;
			pr_debug("pid %d: cannot read iseq 0x%llx: %s\n", rp->pid,
				 (unsigned long long)iseq, strerror(-ie->err));
		}
	}
	return ie;
}

/*
 * The line of the instruction before pc: a frame's pc points past the
 * instruction it runs (iseq.c does the same), and the entry covering a
 * position is the last one at or before it.
 */
static uint32_t _line(const struct iseq_entry *ie, uint64_t pc)
{
	uint64_t pos;
	uint32_t lo = 0, hi = ie->nlines;

	if (!ie->nlines || pc < ie->encoded)
		return ie->first_lineno;
	pos = (pc - ie->encoded) / 8;
	if (pos)
		pos--;
	if (ie->nlines == 1)
		return ie->line[0];
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (ie->pos[mid] <= pos)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? ie->line[lo - 1] : ie->first_lineno;
}

int ruby__frame(struct ruby *rb, const struct ruby_proc *rp, uint64_t iseq, uint64_t pc,
		const char **function, const char **file, uint32_t *line)
{
	struct iseq_entry *ie = _iseq(rb, rp, iseq, pc);

	*function = NULL;
	*file = NULL;
	*line = 0;
	if (!ie)
		return -ENOMEM;
	if (ie->err)
		return ie->err;
	*function = ie->function;
	*file = ie->file;
	*line = _line(ie, pc);
	return 0;
}

void ruby__stats(const struct ruby *rb, struct ruby_stats *out)
{
	*out = rb->st;
}

static void _ops_note_pid(void *rb, pid_t pid)
{
	ruby__note_pid(rb, pid);
}

static void _ops_maps_changed(void *rb, pid_t pid)
{
	ruby__maps_changed(rb, pid);
}

static void _ops_forget(void *rb, pid_t pid)
{
	ruby__forget(rb, pid);
}

static void _ops_report(void *rb)
{
	struct ruby_stats rs;

	ruby__stats(rb, &rs);
	pr_debug("ruby: %llu processes, %llu iseqs read, %llu unreadable, %llu read again\n",
		 (unsigned long long)rs.procs, (unsigned long long)rs.iseq_reads,
		 (unsigned long long)rs.iseq_read_errors, (unsigned long long)rs.iseq_rereads);
}

static void _ops_free(void *rb)
{
	ruby__free(rb);
}

/* An exec'd process's VM, if any, is another: forgotten as at exit. */
const struct interp_ops ruby_interp_ops = {
	.name = "ruby",
	.note_pid = _ops_note_pid,
	.follow = _ops_note_pid,
	.maps_changed = _ops_maps_changed,
	.exec = _ops_forget,
	.forget = _ops_forget,
	.report = _ops_report,
	.free = _ops_free,
};
