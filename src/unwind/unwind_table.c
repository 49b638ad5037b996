// SPDX-License-Identifier: Apache-2.0
/*
 * .eh_frame/.debug_frame → unwind_row tables.
 *
 * libdw interprets the CFI (dwarf_cfi_addrframe gives the rules that hold at
 * an address, and the pc range over which they hold); this file only lists
 * the FDEs, walks each FDE's rows through libdw and maps every row onto the
 * handful of rules the BPF unwinder implements. How libdw 0.188 spells the
 * rules was established by experiment on libc and -O2 programs:
 *
 *   CFA = reg + off            dwarf_frame_cfa: one DW_OP_bregx(reg, off)
 *   CFA = expression           dwarf_frame_cfa: the expression's own ops
 *   reg same value             dwarf_frame_register: nops 0, ops NULL
 *                              (also what x86-64 callee-saved registers the
 *                              FDE never mentions get, from libdw's ABI CFI)
 *   reg undefined              nops 0, ops == ops_mem
 *   reg offset(N)              ops == ops_mem: DW_OP_call_frame_cfa,
 *                              DW_OP_plus_uconst N (N as two's complement;
 *                              the second op is absent when N is 0)
 *   reg expression(E)          ops points into libdw (not ops_mem):
 *                              DW_OP_call_frame_cfa, then E
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

#include "common/log.h"
#include "unwind/go_switch.h"
#include "unwind/unwind_table.h"

/* DWARF register numbers from the x86-64 psABI. */
#define _REG_RBP 6
#define _REG_RSP 7
#define _REG_RA 16

/*
 * CFI sources in priority order: where two of them describe the same code,
 * the earlier one wins. At most: the file's .eh_frame and .debug_frame, the
 * debug file's .debug_frame and .eh_frame.
 */
#define _MAX_SOURCES 4

struct _source {
	const char *what;	/* for log messages */
	Dwarf_CFI *cfi;		/* owned, unless dwarf owns it */
	Dwarf *dwarf;		/* owned; set for .debug_frame only */
	Elf_Data *data;		/* raw section bytes, for dwarf_next_cfi() */
	const unsigned char *ident;
	uint64_t sh_addr;	/* base for pc-relative FDE addresses */
	bool eh_frame;
};

enum _span_kind {
	_SPAN_FDE,
	_SPAN_PLT_LAZY,		/* .plt without an FDE */
	_SPAN_PLT_NOLAZY,	/* .plt.sec or .plt.got without an FDE */
};

/* One FDE (or synthesized PLT range). Every address fits u32 by then. */
struct _span {
	uint32_t lo, hi;
	uint8_t kind;
	uint8_t src;		/* index into the sources: the priority */
};

struct _spans {
	struct _span *v;
	size_t n, cap;
};

struct _builder {
	struct unwind_row *rows;
	size_t n, cap;
	size_t rows_raw;
	size_t unsupported;
	bool go;		/* a Go binary: its .debug_frame is Go's (see _fill_span) */
};

const char *unwind_cfa_type__name(unsigned int type)
{
	switch (type) {
	case UNWIND_CFA_RSP: return "rsp";
	case UNWIND_CFA_RBP: return "rbp";
	case UNWIND_CFA_PLT: return "plt";
	case UNWIND_CFA_SIGNAL: return "signal";
	case UNWIND_NO_CFI: return "no-cfi";
	case UNWIND_END: return "end";
	case UNWIND_GO_ASMCGOCALL: return "go-asmcgocall";
	case UNWIND_GO_SYSTEMSTACK: return "go-systemstack";
	case UNWIND_GO_CGOCALLBACK: return "go-cgocallback";
	default: return "?";
	}
}

static bool _same_rule(const struct unwind_row *a, const struct unwind_row *b)
{
	return a->cfa_type == b->cfa_type && a->cfa_offset == b->cfa_offset &&
	       a->rbp_slot == b->rbp_slot;
}

/*
 * Appends the row that starts at pc. A row at the pc of the previous row
 * replaces it (the previous one would cover zero bytes); a row with the
 * previous row's rule is dropped, which is all the merging there is.
 */
static int _emit(struct _builder *b, uint64_t pc, uint8_t type, int16_t cfa_offset,
		 uint8_t rbp_slot)
{
	struct unwind_row row = {
		.pc = (__u32)pc,
		.cfa_offset = cfa_offset,
		.cfa_type = type,
		.rbp_slot = rbp_slot,
	};

	if (pc > UINT32_MAX)
		return -E2BIG;
	b->rows_raw++;
	if (b->n && b->rows[b->n - 1].pc >= pc) {
		if (b->rows[b->n - 1].pc > pc)
			return -EINVAL;	/* spans are sorted: cannot happen */
		b->n--;
	}
	if (b->n && _same_rule(&b->rows[b->n - 1], &row))
		return 0;
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 1024;
		struct unwind_row *v = realloc(b->rows, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		b->rows = v;
		b->cap = cap;
	}
	b->rows[b->n++] = row;
	return 0;
}

/* libdw's "offset(N)" rule: the register is saved at CFA + N. */
static bool _rule_saved_at_cfa(const Dwarf_Op *ops, size_t nops, const Dwarf_Op *ops_mem,
			       int64_t *n)
{
	/* Rules written as expressions live in libdw's memory, never in ops_mem. */
	if (ops != ops_mem || nops == 0 || ops[0].atom != DW_OP_call_frame_cfa)
		return false;
	if (nops == 1) {
		*n = 0;
		return true;
	}
	if (nops == 2 && ops[1].atom == DW_OP_plus_uconst) {
		*n = (int64_t)ops[1].number;
		return true;
	}
	return false;
}

static bool _op_breg(const Dwarf_Op *op, unsigned int *reg, int64_t *off)
{
	if (op->atom >= DW_OP_breg0 && op->atom <= DW_OP_breg31) {
		*reg = op->atom - DW_OP_breg0;
		*off = (int64_t)op->number;
		return true;
	}
	if (op->atom == DW_OP_bregx) {
		*reg = (unsigned int)op->number;
		*off = (int64_t)op->number2;
		return true;
	}
	return false;
}

/*
 * binutils' CFA expression for lazy .plt entries:
 *   rsp + 8 + (((rip & 15) >= 11) << 3)
 * i.e. 8 more once the entry's push has run. The IBT flavour compares with
 * 10 instead; no instruction of either entry layout starts at offset 10, so
 * at every pc a sample can have both agree with the ">= 11" of
 * UNWIND_CFA_PLT.
 */
static bool _is_plt_expression(const Dwarf_Op *ops, size_t nops)
{
	unsigned int reg;
	int64_t off;

	if (nops != 9)
		return false;
	if (!_op_breg(&ops[0], &reg, &off) || reg != _REG_RSP || off != 8)
		return false;
	if (!_op_breg(&ops[1], &reg, &off) || reg != _REG_RA || off != 0)
		return false;
	return ops[2].atom == DW_OP_lit15 && ops[3].atom == DW_OP_and &&
	       (ops[4].atom == DW_OP_lit11 || ops[4].atom == DW_OP_lit10) &&
	       ops[5].atom == DW_OP_ge && ops[6].atom == DW_OP_lit3 &&
	       ops[7].atom == DW_OP_shl && ops[8].atom == DW_OP_plus;
}

/*
 * Maps libdw's rules for one pc range onto a row (all fields but pc).
 * Returns false when a row cannot express them; row is then NO_CFI.
 */
static bool _translate(Dwarf_Frame *frame, bool signalp, struct unwind_row *row)
{
	Dwarf_Op ops_mem[3], *ops;
	size_t nops;
	unsigned int reg;
	int64_t off, n;

	memset(row, 0, sizeof(*row));
	row->cfa_type = UNWIND_NO_CFI;
	if (signalp) {
		/* The rules are expressions into the ucontext; BPF knows its layout. */
		row->cfa_type = UNWIND_CFA_SIGNAL;
		return true;
	}

	if (dwarf_frame_register(frame, _REG_RA, ops_mem, &ops, &nops) != 0)
		return false;
	if (nops == 0 && ops == ops_mem) {
		row->cfa_type = UNWIND_END;
		return true;
	}
	if (!_rule_saved_at_cfa(ops, nops, ops_mem, &n) || n != -8)
		return false;

	if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops == 0)
		return false;
	if (nops == 1 && _op_breg(&ops[0], &reg, &off) &&
	    (reg == _REG_RSP || reg == _REG_RBP)) {
		if (off < INT16_MIN || off > INT16_MAX)
			return false;
		row->cfa_type = reg == _REG_RSP ? UNWIND_CFA_RSP : UNWIND_CFA_RBP;
		row->cfa_offset = (int16_t)off;
	} else if (_is_plt_expression(ops, nops)) {
		row->cfa_type = UNWIND_CFA_PLT;
	} else {
		return false;
	}

	if (dwarf_frame_register(frame, _REG_RBP, ops_mem, &ops, &nops) != 0)
		goto unsupported;
	if (nops == 0)
		return true;	/* same value, or undefined: keep what rbp holds */
	if (!_rule_saved_at_cfa(ops, nops, ops_mem, &n) || n >= 0 || n % 8 != 0 ||
	    -n / 8 > UINT8_MAX || row->cfa_type == UNWIND_CFA_PLT)
		goto unsupported;
	row->rbp_slot = (uint8_t)(-n / 8);
	return true;

unsupported:
	memset(row, 0, sizeof(*row));
	row->cfa_type = UNWIND_NO_CFI;
	return false;
}

/* Reads one value of a DW_EH_PE_* format (the low 4 bits of an encoding). */
static bool _read_value(const uint8_t **pp, const uint8_t *end, uint8_t format, uint64_t *val)
{
	const uint8_t *p = *pp;
	unsigned int size, shift = 0;
	uint64_t v = 0;
	uint8_t byte;

	switch (format) {
	case DW_EH_PE_absptr:
	case DW_EH_PE_udata8:
	case DW_EH_PE_sdata8:
		size = 8;
		break;
	case DW_EH_PE_udata4:
	case DW_EH_PE_sdata4:
		size = 4;
		break;
	case DW_EH_PE_udata2:
	case DW_EH_PE_sdata2:
		size = 2;
		break;
	case DW_EH_PE_uleb128:
	case DW_EH_PE_sleb128:
		do {
			if (p >= end || shift >= 64)
				return false;
			byte = *p++;
			v |= (uint64_t)(byte & 0x7f) << shift;
			shift += 7;
		} while (byte & 0x80);
		if (format == DW_EH_PE_sleb128 && shift < 64 && (byte & 0x40))
			v |= ~(uint64_t)0 << shift;
		goto out;
	default:
		return false;
	}
	if (end - p < (ptrdiff_t)size)
		return false;
	for (unsigned int i = 0; i < size; i++)
		v |= (uint64_t)p[i] << (8 * i);	/* x86-64 CFI is little-endian */
	p += size;
	if ((format & DW_EH_PE_signed) && size < 8 && (v >> (8 * size - 1)) & 1)
		v |= ~(uint64_t)0 << (8 * size);
out:
	*val = v;
	*pp = p;
	return true;
}

/* Reads an encoded FDE address: absolute or pc-relative are all FDEs use. */
static bool _read_address(const struct _source *src, const uint8_t **pp, const uint8_t *end,
			  uint8_t enc, uint64_t *val)
{
	uint64_t field = src->sh_addr + (uint64_t)(*pp - (const uint8_t *)src->data->d_buf);

	if (enc == DW_EH_PE_omit || (enc & DW_EH_PE_indirect))
		return false;
	if (!_read_value(pp, end, enc & 0x0f, val))
		return false;
	switch (enc & 0x70) {
	case DW_EH_PE_absptr:
		return true;
	case DW_EH_PE_pcrel:
		*val += field;
		return true;
	default:
		return false;
	}
}

/*
 * The encoding of the addresses in the FDEs of the CIE at cie_off, from the
 * CIE's augmentation ("zR", "zPLR", ...). libdw decodes CIEs but leaves FDE
 * addresses to us.
 */
static bool _cie_fde_encoding(const struct _source *src, Dwarf_Off cie_off, uint8_t *enc)
{
	const uint8_t *p, *end;
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	uint64_t skip;
	uint8_t penc;

	if (dwarf_next_cfi(src->ident, src->data, src->eh_frame, cie_off, &next, &e) != 0 ||
	    !dwarf_cfi_cie_p(&e))
		return false;
	*enc = DW_EH_PE_absptr;
	if (e.cie.augmentation[0] == '\0')
		return true;
	if (e.cie.augmentation[0] != 'z' || !e.cie.augmentation_data)
		return false;
	p = e.cie.augmentation_data;
	end = p + e.cie.augmentation_data_size;
	for (const char *a = e.cie.augmentation + 1; *a; a++) {
		switch (*a) {
		case 'R':
			if (p >= end)
				return false;
			*enc = *p;
			/* The letters after R cannot change where its byte was. */
			return true;
		case 'L':
			if (p++ >= end)
				return false;
			break;
		case 'P':
			/* Skip the personality routine's pointer, in its own encoding. */
			if (p >= end)
				return false;
			penc = *p++;
			if ((penc & 0x70) == DW_EH_PE_aligned ||
			    !_read_value(&p, end, penc & 0x0f, &skip))
				return false;
			break;
		case 'S':
		case 'B':
			break;
		default:
			return false;
		}
	}
	return true;
}

static int _spans_push(struct _spans *sp, uint64_t lo, uint64_t hi, uint8_t kind, uint8_t src)
{
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 256;
		struct _span *v = realloc(sp->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		sp->v = v;
		sp->cap = cap;
	}
	sp->v[sp->n++] = (struct _span){ .lo = (uint32_t)lo, .hi = (uint32_t)hi,
					 .kind = kind, .src = src };
	return 0;
}

/*
 * Lists the FDEs of one CFI section. FDEs for code the linker discarded
 * (address 0 or a tombstone in .debug_frame) and FDEs we cannot decode are
 * skipped. max_vaddr bounds the loaded image; FDEs beyond it describe no
 * loaded code, except in a file without program headers, where they make
 * the table impossible (-E2BIG).
 */
static int _collect_fdes(const struct _source *src, uint8_t idx, uint64_t max_vaddr,
			 bool have_phdrs, struct _spans *sp)
{
	Dwarf_Off off = 0, next, cie_off = (Dwarf_Off)-1;
	size_t skipped = 0, found = 0;
	bool enc_ok = false;
	uint8_t enc = 0;
	int err = 0, r;

	for (;;) {
		const uint8_t *p;
		uint64_t lo, len;
		Dwarf_CFI_Entry e;

		next = (Dwarf_Off)-1;
		r = dwarf_next_cfi(src->ident, src->data, src->eh_frame, off, &next, &e);
		if (r > 0)
			break;
		if (r < 0) {
			/* Some malformed entries can be stepped over; others end the walk. */
			skipped++;
			if (next == (Dwarf_Off)-1 || next <= off)
				break;
			off = next;
			continue;
		}
		off = next;
		if (dwarf_cfi_cie_p(&e))
			continue;
		if (e.fde.CIE_pointer != cie_off) {
			cie_off = e.fde.CIE_pointer;
			enc_ok = _cie_fde_encoding(src, cie_off, &enc);
		}
		p = e.fde.start;
		if (!enc_ok || !_read_address(src, &p, e.fde.end, enc, &lo) ||
		    !_read_value(&p, e.fde.end, enc & 0x0f, &len)) {
			skipped++;
			continue;
		}
		if (lo == 0 || len == 0 || lo + len < lo)
			continue;
		if (lo + len > max_vaddr) {
			if (!have_phdrs) {
				err = -E2BIG;
				goto out;
			}
			continue;
		}
		err = _spans_push(sp, lo, lo + len, _SPAN_FDE, idx);
		if (err)
			goto out;
		found++;
	}
out:
	if (skipped)
		pr_debug("unwind: %s: %zu CFI entries skipped (unreadable or unknown encoding)\n",
			 src->what, skipped);
	pr_debug("unwind: %s: %zu FDEs\n", src->what, found);
	return err;
}

static Elf_Scn *_find_section(Elf *elf, const char *name, GElf_Shdr *shdr)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx) != 0)
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *n;

		if (!gelf_getshdr(scn, shdr))
			continue;
		n = elf_strptr(elf, shstrndx, shdr->sh_name);
		if (n && !strcmp(n, name))
			return scn;
	}
	return NULL;
}

/*
 * Adds the .eh_frame or .debug_frame of elf as a source, if it has one with
 * contents (a debug file's .eh_frame is usually NOBITS).
 */
static void _add_source(Elf *elf, bool eh_frame, const char *what, struct _source *srcs,
			size_t *nsrc)
{
	struct _source *s = &srcs[*nsrc];
	GElf_Shdr shdr;
	Elf_Scn *scn;

	/* lld types .eh_frame SHT_X86_64_UNWIND, as the psABI says. */
	scn = _find_section(elf, eh_frame ? ".eh_frame" : ".debug_frame", &shdr);
	if (!scn || shdr.sh_size == 0 ||
	    !(shdr.sh_type == SHT_PROGBITS || (eh_frame && shdr.sh_type == SHT_X86_64_UNWIND)))
		return;
	memset(s, 0, sizeof(*s));
	/* Read the bytes uncompressed, and before libdw would decompress them itself. */
	if ((shdr.sh_flags & SHF_COMPRESSED) && elf_compress(scn, 0, 0) < 0) {
		pr_debug("unwind: %s: cannot decompress: %s\n", what, elf_errmsg(-1));
		return;
	}
	s->data = elf_getdata(scn, NULL);
	if (!s->data || !s->data->d_buf || s->data->d_size == 0)
		return;
	if (eh_frame) {
		s->cfi = dwarf_getcfi_elf(elf);
	} else {
		s->dwarf = dwarf_begin_elf(elf, DWARF_C_READ, NULL);
		s->cfi = s->dwarf ? dwarf_getcfi(s->dwarf) : NULL;
	}
	if (!s->cfi) {
		pr_debug("unwind: %s: libdw cannot read it: %s\n", what, dwarf_errmsg(-1));
		if (s->dwarf)
			dwarf_end(s->dwarf);
		memset(s, 0, sizeof(*s));
		return;
	}
	s->what = what;
	s->ident = (const unsigned char *)elf_getident(elf, NULL);
	s->sh_addr = shdr.sh_addr;
	s->eh_frame = eh_frame;
	(*nsrc)++;
}

static void _sources_free(struct _source *srcs, size_t nsrc)
{
	for (size_t i = 0; i < nsrc; i++) {
		if (srcs[i].dwarf)
			dwarf_end(srcs[i].dwarf);	/* also frees its cfi */
		else if (srcs[i].cfi)
			dwarf_cfi_end(srcs[i].cfi);
	}
}

/*
 * PLT sections no FDE covers (lld emits none, nor does ld with
 * --no-ld-generated-unwind-info) get rows synthesized from the known entry
 * layouts.
 */
static int _add_plt_spans(Elf *elf, uint64_t max_vaddr, struct _spans *sp)
{
	static const char *const names[] = { ".plt", ".plt.sec", ".plt.got" };
	size_t nfde = sp->n;
	int err;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		GElf_Shdr shdr;
		uint64_t lo, hi;
		bool covered = false;

		if (!_find_section(elf, names[i], &shdr) || shdr.sh_type != SHT_PROGBITS ||
		    !(shdr.sh_flags & SHF_EXECINSTR) || shdr.sh_size == 0)
			continue;
		lo = shdr.sh_addr;
		hi = lo + shdr.sh_size;
		if (lo == 0 || hi > max_vaddr)
			continue;
		for (size_t j = 0; j < nfde && !covered; j++)
			covered = sp->v[j].lo < hi && lo < sp->v[j].hi;
		if (covered)
			continue;
		pr_debug("unwind: %s [%#lx, %#lx) has no FDE: synthesized rows\n", names[i],
			 (unsigned long)lo, (unsigned long)hi);
		err = _spans_push(sp, lo, hi, i == 0 ? _SPAN_PLT_LAZY : _SPAN_PLT_NOLAZY,
				  _MAX_SOURCES);
		if (err)
			return err;
	}
	return 0;
}

static int _span_cmp(const void *a, const void *b)
{
	const struct _span *x = a, *y = b;

	if (x->lo != y->lo)
		return x->lo < y->lo ? -1 : 1;
	if (x->src != y->src)
		return x->src < y->src ? -1 : 1;
	return x->hi < y->hi ? -1 : x->hi > y->hi;
}

/* Emits the rows of one span from lo (>= span->lo, where overlap cut it) to span->hi. */
static int _fill_span(struct _builder *b, const struct _span *span, uint64_t lo,
		      const struct _source *srcs)
{
	Dwarf_CFI *cfi = srcs[span->src < _MAX_SOURCES ? span->src : 0].cfi;
	uint64_t addr = lo;
	int err;

	switch (span->kind) {
	case _SPAN_PLT_LAZY:
		/*
		 * The first 16 bytes are PLT0: entered with the relocation index
		 * pushed on top of the return address, and it pushes one more
		 * word at +6. The entries after it follow the PLT rule.
		 */
		if (span->hi - span->lo >= 16 && lo == span->lo) {
			if ((err = _emit(b, lo, UNWIND_CFA_RSP, 16, 0)) ||
			    (err = _emit(b, lo + 6, UNWIND_CFA_RSP, 24, 0)))
				return err;
			addr = lo + 16;
		}
		return _emit(b, addr, UNWIND_CFA_PLT, 0, 0);
	case _SPAN_PLT_NOLAZY:
		/* Entries only jump through the GOT: nothing is pushed. */
		return _emit(b, lo, UNWIND_CFA_RSP, 8, 0);
	}

	while (addr < span->hi) {
		Dwarf_Frame *frame = NULL;
		struct unwind_row row;
		Dwarf_Addr start, end;
		bool signalp = false;

		if (dwarf_cfi_addrframe(cfi, addr, &frame) != 0) {
			pr_debug("unwind: no CFI rules at %#lx: %s\n", (unsigned long)addr,
				 dwarf_errmsg(-1));
			b->unsupported++;
			return _emit(b, addr, UNWIND_NO_CFI, 0, 0);
		}
		if (dwarf_frame_info(frame, &start, &end, &signalp) < 0)
			end = span->hi;
		if (!_translate(frame, signalp, &row)) {
			pr_debug("unwind: rules at [%#lx, %#lx) not expressible as a row\n",
				 (unsigned long)addr, (unsigned long)end);
			b->unsupported++;
		}
		free(frame);
		/*
		 * Go's linker writes .debug_frame without rbp rules, but every
		 * Go function with a frame keeps its caller's rbp right below
		 * the return address (the amd64 frame-pointer layout since Go
		 * 1.7). Saying so lets rbp follow Go frames unwound by their
		 * CFI, which the frames after them need when they find their
		 * CFA through rbp (C called back from Go) or use frame pointers.
		 */
		if (b->go && !srcs[span->src].eh_frame && row.cfa_type == UNWIND_CFA_RSP &&
		    row.cfa_offset > 8 && !row.rbp_slot)
			row.rbp_slot = 2;
		err = _emit(b, addr, row.cfa_type, row.cfa_offset, row.rbp_slot);
		if (err)
			return err;
		addr = end > addr && end < span->hi ? end : span->hi;
	}
	return 0;
}

/* The end of the highest PT_LOAD; 0 when the file has no program headers. */
static int _max_vaddr(Elf *elf, uint64_t *max)
{
	size_t phnum;

	*max = 0;
	if (elf_getphdrnum(elf, &phnum) != 0)
		return -EIO;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr phdr;

		if (!gelf_getphdr(elf, (int)i, &phdr))
			return -EIO;
		if (phdr.p_type == PT_LOAD && phdr.p_vaddr + phdr.p_memsz > *max)
			*max = phdr.p_vaddr + phdr.p_memsz;
	}
	return 0;
}

/* Opens fd as an x86-64 ELF64 file: 0, -EBADF, -ENOEXEC, -ENOTSUP or -EIO. */
static int _open_elf(int fd, Elf **elfp)
{
	GElf_Ehdr ehdr;
	struct stat st;
	Elf *elf;
	int err = 0;

	*elfp = NULL;
	if (fd < 0 || fstat(fd, &st) != 0)
		return -EBADF;
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return S_ISREG(st.st_mode) && st.st_size == 0 ? -ENOEXEC : -EIO;
	if (elf_kind(elf) != ELF_K_ELF) {
		err = -ENOEXEC;
		goto out;
	}
	if (!gelf_getehdr(elf, &ehdr)) {
		err = -ENOEXEC;
		goto out;
	}
	if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_machine != EM_X86_64) {
		err = -ENOTSUP;
		goto out;
	}
	*elfp = elf;
	elf = NULL;
out:
	elf_end(elf);
	return err;
}

/*
 * Overrides the rows over [sw->pc, sw->pc + sw->len) with the Go stack
 * switch's rule; the rule that held at the end of the range holds again
 * from there. b keeps its invariants (sorted, no empty or repeated rows).
 */
static int _splice_go_switch(struct _builder *b, const struct go_switch *sw)
{
	uint32_t lo = sw->pc, hi = sw->pc + sw->len;
	struct unwind_row after = { .pc = hi, .cfa_type = UNWIND_NO_CFI };
	const struct unwind_row *r = unwind_table__find(b->rows, b->n, hi);
	struct unwind_row *v;
	size_t k = 0;

	if (r) {
		after = *r;
		after.pc = hi;
	}
	v = malloc((b->n + 2) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < b->n && b->rows[i].pc < lo; i++)
		v[k++] = b->rows[i];
	v[k++] = (struct unwind_row){
		.pc = lo,
		.cfa_offset = sw->off1,
		.cfa_type = sw->type,
		.rbp_slot = sw->off2,
	};
	v[k++] = after;
	for (size_t i = 0; i < b->n; i++)
		if (b->rows[i].pc > hi)
			v[k++] = b->rows[i];
	free(b->rows);
	b->rows = v;
	b->n = k;
	b->cap = b->n + 2;
	return 0;
}

int unwind_table__build(int fd, int debug_fd, struct unwind_row **rows, size_t *nrows,
			struct unwind_table_stats *stats)
{
	struct go_switch go[GO_SWITCH_MAX];
	struct _source srcs[_MAX_SOURCES];
	struct unwind_table_stats st = { 0 };
	struct _spans sp = { 0 };
	struct _builder b = { 0 };
	Elf *elf = NULL, *delf = NULL;
	uint64_t max_vaddr, covered = 0, limit;
	bool have_phdrs, main_eh;
	size_t nsrc = 0, ngo;
	int err;

	*rows = NULL;
	*nrows = 0;
	if (stats)
		memset(stats, 0, sizeof(*stats));
	elf_version(EV_CURRENT);

	err = _open_elf(fd, &elf);
	if (err)
		goto out;
	err = _max_vaddr(elf, &max_vaddr);
	if (err)
		goto out;
	have_phdrs = max_vaddr != 0;
	/* The last FDE's end becomes a row pc, so it must fit too. */
	if (max_vaddr > UINT32_MAX) {
		err = -E2BIG;
		goto out;
	}
	limit = have_phdrs ? max_vaddr : UINT32_MAX;

	_add_source(elf, true, ".eh_frame", srcs, &nsrc);
	main_eh = nsrc > 0;
	_add_source(elf, false, ".debug_frame", srcs, &nsrc);
	if (debug_fd >= 0) {
		/* A broken debug file costs its CFI, not the table. */
		if (_open_elf(debug_fd, &delf) == 0) {
			_add_source(delf, false, ".debug_frame (debug file)", srcs, &nsrc);
			if (!main_eh)
				_add_source(delf, true, ".eh_frame (debug file)", srcs, &nsrc);
		} else {
			pr_debug("unwind: debug file is not x86-64 ELF, ignored\n");
		}
	}

	for (size_t i = 0; i < nsrc; i++) {
		err = _collect_fdes(&srcs[i], (uint8_t)i, limit, have_phdrs, &sp);
		if (err)
			goto out;
	}
	ngo = go_switch__find(elf, go);
	b.go = ngo > 0;
	if (sp.n == 0 && !ngo) {
		err = -ENOENT;
		goto out;
	}
	err = _add_plt_spans(elf, limit, &sp);
	if (err)
		goto out;
	if (sp.n)	/* a Go binary without CFI has no spans */
		qsort(sp.v, sp.n, sizeof(*sp.v), _span_cmp);

	/*
	 * Spans are visited by start address; where they overlap (the same
	 * code in .eh_frame and .debug_frame), the part already covered keeps
	 * the rows of the span that covered it first.
	 */
	for (size_t i = 0; i < sp.n; i++) {
		const struct _span *s = &sp.v[i];
		uint64_t lo = s->lo > covered ? s->lo : covered;

		if (lo >= s->hi)
			continue;
		if (b.n && lo > covered) {
			err = _emit(&b, covered, UNWIND_NO_CFI, 0, 0);
			if (err)
				goto out;
		}
		err = _fill_span(&b, s, lo, srcs);
		if (err)
			goto out;
		covered = s->hi;
		st.fdes++;
	}
	err = _emit(&b, covered, UNWIND_NO_CFI, 0, 0);
	if (err)
		goto out;
	/* Without CFI, b holds one UNWIND_NO_CFI row at 0: frame pointers around the Go rows. */
	for (size_t i = 0; i < ngo; i++) {
		if (go[i].pc + go[i].len > limit)
			continue;
		err = _splice_go_switch(&b, &go[i]);
		if (err)
			goto out;
	}

	st.rows_raw = b.rows_raw;
	st.rows = b.n;
	st.unsupported_rows = b.unsupported;
	for (size_t i = 0; i < b.n; i++) {
		st.no_cfi_rows += b.rows[i].cfa_type == UNWIND_NO_CFI;
		st.signal_rows += b.rows[i].cfa_type == UNWIND_CFA_SIGNAL;
		st.plt_rows += b.rows[i].cfa_type == UNWIND_CFA_PLT;
		st.go_rows += b.rows[i].cfa_type >= UNWIND_GO_ASMCGOCALL &&
			      b.rows[i].cfa_type <= UNWIND_GO_CGOCALLBACK;
	}
	if (b.n < b.cap) {
		struct unwind_row *v = realloc(b.rows, b.n * sizeof(*v));

		if (v)
			b.rows = v;
	}
	*rows = b.rows;
	*nrows = b.n;
	b.rows = NULL;
	if (stats)
		*stats = st;
out:
	free(b.rows);
	free(sp.v);
	_sources_free(srcs, nsrc);
	elf_end(delf);
	elf_end(elf);
	return err;
}

const struct unwind_row *unwind_table__find(const struct unwind_row *rows, size_t nrows,
					    uint64_t pc)
{
	size_t lo = 0, hi = nrows;

	if (!nrows || pc < rows[0].pc)
		return NULL;
	/* Invariant: rows[lo].pc <= pc, and every row at or after hi starts above pc. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (rows[mid].pc <= pc)
			lo = mid;
		else
			hi = mid;
	}
	return &rows[lo];
}
