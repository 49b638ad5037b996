// SPDX-License-Identifier: Apache-2.0
/*
 * Running the CFA programs of the FDEs, for unwind_table.c: a CIE's
 * initial instructions once (its decoding is cached), then each FDE's own
 * from its start to its end, emitting a row whenever the location advances.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <dwarf.h>
#include <elfutils/libdw.h>

#include "common/log.h"
#include "unwind/unwind_table_impl.h"

/* DWARF register numbers from the x86-64 psABI. */
#define _REG_RBP 6
#define _REG_RSP 7
#define _REG_RA 16

/*
 * A read fault on a file mapping maps the 64 KiB around it (the kernel's
 * fault_around_bytes). The walk visits FDEs by address, which hops across
 * .eh_frame, so a large library's first FDEs faulted in far more than was
 * read. The 64 KiB an FDE lay in are therefore dropped as soon as the walk
 * reads an FDE in other ones (_leave_chunk): a lower peak at no CPU cost.
 */
#define _CFI_CHUNK ((uintptr_t)64 << 10)

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

/* How one column (the return address, rbp) is recovered. */
enum _reg_kind {
	_REG_SAME,	/* same value: keeps what it holds (also what nothing mentions) */
	_REG_UNDEF,	/* undefined */
	_REG_OFFSET,	/* saved at CFA + off */
	_REG_OTHER,	/* anything else: register, expression, val_*: no row expresses it */
};

enum _cfa_kind {
	_CFA_REG,	/* reg + off */
	_CFA_PLT,	/* binutils' lazy PLT expression */
	_CFA_OTHER,
};

struct _rules {
	uint8_t cfa, ra, rbp;	/* enum _cfa_kind, enum _reg_kind x 2 */
	uint32_t cfa_reg;
	int64_t cfa_off, ra_off, rbp_off;
};

/* A CIE as its FDEs need it: decoded once, kept in a small cache. */
struct ut_cie {
	bool used, ok;
	uint8_t src;
	Dwarf_Off off;
	uint8_t enc;		/* FDE address encoding */
	bool z, signal;		/* augmentation 'z' (FDEs have augmentation data), 'S' */
	uint64_t caf;		/* code alignment factor */
	int64_t daf;		/* data alignment factor */
	struct _rules init;	/* after the initial instructions */
};

#define _CIE_CACHE 64
#define _STATE_STACK 16

/* The CIE cache of one build. */
struct ut_cie *ut__cie_cache_new(void)
{
	return calloc(_CIE_CACHE, sizeof(struct ut_cie));
}

/* Where one FDE's rows go. */
struct _walk {
	struct ut_builder *b;
	const struct ut_source *src;
	uint64_t loc, lo, hi;	/* current location; rows are kept within [lo, hi) */
	bool signal;
};

static bool _uleb(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
	return ut__read_value(pp, end, DW_EH_PE_uleb128, v);
}

static bool _sleb(const uint8_t **pp, const uint8_t *end, int64_t *v)
{
	return ut__read_value(pp, end, DW_EH_PE_sleb128, (uint64_t *)v);
}

/*
 * Decodes a DWARF expression into ops, for the two shapes a row can use:
 * one register plus offset, and the PLT expression. Returns the number of
 * ops, or 0 for anything else (an unknown op, or more than max).
 */
static size_t _parse_expr(const uint8_t *p, const uint8_t *end, Dwarf_Op *ops, size_t max)
{
	size_t n = 0;

	while (p < end) {
		Dwarf_Op *op = &ops[n];
		uint8_t atom = *p++;

		if (n == max)
			return 0;
		memset(op, 0, sizeof(*op));
		op->atom = atom;
		if (atom >= DW_OP_breg0 && atom <= DW_OP_breg31) {
			if (!_sleb(&p, end, (int64_t *)&op->number))
				return 0;
		} else if (atom == DW_OP_bregx) {
			if (!_uleb(&p, end, &op->number) || !_sleb(&p, end, (int64_t *)&op->number2))
				return 0;
		} else if (atom == DW_OP_plus_uconst) {
			if (!_uleb(&p, end, &op->number))
				return 0;
		} else if (!((atom >= DW_OP_lit0 && atom <= DW_OP_lit31) || atom == DW_OP_and ||
			     atom == DW_OP_ge || atom == DW_OP_shl || atom == DW_OP_plus)) {
			return 0;
		}
		n++;
	}
	return n;
}

/* DW_CFA_def_cfa_expression: a register plus offset, the PLT rule, or other. */
static void _cfa_expr(struct _rules *r, const uint8_t *p, const uint8_t *end)
{
	Dwarf_Op ops[9];
	size_t n = _parse_expr(p, end, ops, 9);
	unsigned int reg;
	int64_t off;

	r->cfa = _CFA_OTHER;
	if (n == 1 && _op_breg(&ops[0], &reg, &off)) {
		r->cfa = _CFA_REG;
		r->cfa_reg = reg;
		r->cfa_off = off;
	} else if (_is_plt_expression(ops, n)) {
		r->cfa = _CFA_PLT;
	}
}

/* Sets the rule of column reg, if it is one we follow. */
static void _set_reg(struct _rules *r, uint64_t reg, uint8_t kind, int64_t off)
{
	if (reg == _REG_RA) {
		r->ra = kind;
		r->ra_off = off;
	} else if (reg == _REG_RBP) {
		r->rbp = kind;
		r->rbp_off = off;
	}
}

static void _restore_reg(struct _rules *r, uint64_t reg, const struct _rules *init)
{
	if (reg == _REG_RA)
		_set_reg(r, reg, init->ra, init->ra_off);
	else if (reg == _REG_RBP)
		_set_reg(r, reg, init->rbp, init->rbp_off);
}

/*
 * The row for a set of rules (all fields but pc). Returns false when no row
 * can express them; the row is then UNWIND_NO_CFI.
 */
static bool _rules_row(const struct _rules *r, bool signal, struct unwind_row *row)
{
	memset(row, 0, sizeof(*row));
	row->cfa_type = UNWIND_NO_CFI;
	if (signal) {
		/* The rules are expressions into the ucontext; BPF knows its layout. */
		row->cfa_type = UNWIND_CFA_SIGNAL;
		return true;
	}
	if (r->ra == _REG_UNDEF) {
		row->cfa_type = UNWIND_END;
		return true;
	}
	if (r->ra != _REG_OFFSET || r->ra_off != -8)
		return false;
	if (r->cfa == _CFA_REG && (r->cfa_reg == _REG_RSP || r->cfa_reg == _REG_RBP)) {
		if (r->cfa_off < INT16_MIN || r->cfa_off > INT16_MAX)
			return false;
		row->cfa_type = r->cfa_reg == _REG_RSP ? UNWIND_CFA_RSP : UNWIND_CFA_RBP;
		row->cfa_offset = (int16_t)r->cfa_off;
	} else if (r->cfa == _CFA_PLT) {
		row->cfa_type = UNWIND_CFA_PLT;
	} else {
		return false;
	}
	if (r->rbp == _REG_SAME || r->rbp == _REG_UNDEF)
		return true;	/* keep what rbp holds */
	if (r->rbp != _REG_OFFSET || r->rbp_off >= 0 || r->rbp_off % 8 != 0 ||
	    -r->rbp_off / 8 > UINT8_MAX || row->cfa_type == UNWIND_CFA_PLT) {
		memset(row, 0, sizeof(*row));
		row->cfa_type = UNWIND_NO_CFI;
		return false;
	}
	row->rbp_slot = (uint8_t)(-r->rbp_off / 8);
	return true;
}

/* The rules r hold from w->loc to next: emits their row for the part within [lo, hi). */
static int _walk_to(struct _walk *w, const struct _rules *r, uint64_t next)
{
	struct unwind_row row;
	uint64_t at = w->loc > w->lo ? w->loc : w->lo;
	int err = 0;

	if (next > w->lo && at < w->hi && at < next) {
		if (!_rules_row(r, w->signal, &row))
			w->b->unsupported++;
		/*
		 * Go's linker writes .debug_frame without rbp rules, but every
		 * Go function with a frame keeps its caller's rbp right below
		 * the return address (the amd64 frame-pointer layout since Go
		 * 1.7). Saying so lets rbp follow Go frames unwound by their
		 * CFI, which the frames after them need when they find their
		 * CFA through rbp (C called back from Go) or use frame pointers.
		 */
		if (w->b->go && !w->src->eh_frame && row.cfa_type == UNWIND_CFA_RSP &&
		    row.cfa_offset > 8 && !row.rbp_slot)
			row.rbp_slot = 2;
		err = ut__emit(w->b, at, row.cfa_type, row.cfa_offset, row.rbp_slot);
	}
	w->loc = next;
	return err;
}

/*
 * Runs CFA instructions [p, end) on r. With w (an FDE's instructions),
 * every advance of the location emits the row of the rules that held
 * before it; without (a CIE's initial instructions) an advance is an error.
 * init is the CIE's state for DW_CFA_restore. Returns 0, -EBADMSG for a
 * malformed or unknown instruction, or an error of ut__emit().
 */
static int _run_cfa(const uint8_t *p, const uint8_t *end, const struct ut_cie *cie,
		    struct _rules *r, const struct _rules *init, struct _walk *w)
{
	struct _rules stack[_STATE_STACK];
	unsigned int depth = 0;
	int err;

	while (p < end) {
		uint8_t op = *p++, low = op & 0x3f;
		uint64_t reg, u, delta = 0;
		int64_t sv;
		bool advance = false;

		switch (op >> 6 ? op & 0xc0 : op) {
		case DW_CFA_advance_loc:
			delta = low;
			advance = true;
			break;
		case DW_CFA_offset:
			if (!_uleb(&p, end, &u))
				return -EBADMSG;
			_set_reg(r, low, _REG_OFFSET, (int64_t)u * cie->daf);
			break;
		case DW_CFA_restore:
			_restore_reg(r, low, init);
			break;
		case DW_CFA_nop:
			break;
		case DW_CFA_set_loc: {
			uint64_t loc;

			if (!w || !ut__read_address(w->src, &p, end, cie->enc, &loc) || loc < w->loc)
				return -EBADMSG;
			if ((err = _walk_to(w, r, loc)))
				return err;
			break;
		}
		case DW_CFA_advance_loc1:
		case DW_CFA_advance_loc2:
		case DW_CFA_advance_loc4: {
			unsigned int size = op == DW_CFA_advance_loc1 ? 1 : op == DW_CFA_advance_loc2 ? 2 : 4;

			if (end - p < (ptrdiff_t)size)
				return -EBADMSG;
			for (unsigned int i = 0; i < size; i++)
				delta |= (uint64_t)p[i] << (8 * i);
			p += size;
			advance = true;
			break;
		}
		case DW_CFA_offset_extended:
			if (!_uleb(&p, end, &reg) || !_uleb(&p, end, &u))
				return -EBADMSG;
			_set_reg(r, reg, _REG_OFFSET, (int64_t)u * cie->daf);
			break;
		case DW_CFA_offset_extended_sf:
			if (!_uleb(&p, end, &reg) || !_sleb(&p, end, &sv))
				return -EBADMSG;
			_set_reg(r, reg, _REG_OFFSET, sv * cie->daf);
			break;
		case DW_CFA_GNU_negative_offset_extended:
			if (!_uleb(&p, end, &reg) || !_uleb(&p, end, &u))
				return -EBADMSG;
			_set_reg(r, reg, _REG_OFFSET, -(int64_t)u * cie->daf);
			break;
		case DW_CFA_restore_extended:
			if (!_uleb(&p, end, &reg))
				return -EBADMSG;
			_restore_reg(r, reg, init);
			break;
		case DW_CFA_undefined:
		case DW_CFA_same_value:
			if (!_uleb(&p, end, &reg))
				return -EBADMSG;
			_set_reg(r, reg, op == DW_CFA_undefined ? _REG_UNDEF : _REG_SAME, 0);
			break;
		case DW_CFA_register:
		case DW_CFA_val_offset:
			if (!_uleb(&p, end, &reg) || !_uleb(&p, end, &u))
				return -EBADMSG;
			_set_reg(r, reg, _REG_OTHER, 0);
			break;
		case DW_CFA_val_offset_sf:
			if (!_uleb(&p, end, &reg) || !_sleb(&p, end, &sv))
				return -EBADMSG;
			_set_reg(r, reg, _REG_OTHER, 0);
			break;
		case DW_CFA_expression:
		case DW_CFA_val_expression:
			if (!_uleb(&p, end, &reg) || !_uleb(&p, end, &u) || u > (uint64_t)(end - p))
				return -EBADMSG;
			p += u;
			_set_reg(r, reg, _REG_OTHER, 0);
			break;
		case DW_CFA_remember_state:
			if (depth == _STATE_STACK)
				return -EBADMSG;
			stack[depth++] = *r;
			break;
		case DW_CFA_restore_state:
			if (!depth)
				return -EBADMSG;
			*r = stack[--depth];
			break;
		case DW_CFA_def_cfa:
			if (!_uleb(&p, end, &reg) || !_uleb(&p, end, &u))
				return -EBADMSG;
			r->cfa = _CFA_REG;
			r->cfa_reg = (uint32_t)reg;
			r->cfa_off = (int64_t)u;
			break;
		case DW_CFA_def_cfa_sf:
			if (!_uleb(&p, end, &reg) || !_sleb(&p, end, &sv))
				return -EBADMSG;
			r->cfa = _CFA_REG;
			r->cfa_reg = (uint32_t)reg;
			r->cfa_off = sv * cie->daf;
			break;
		case DW_CFA_def_cfa_register:
			if (!_uleb(&p, end, &reg))
				return -EBADMSG;
			/* Only a register rule has an offset to keep. */
			if (r->cfa != _CFA_REG)
				r->cfa = _CFA_OTHER;
			r->cfa_reg = (uint32_t)reg;
			break;
		case DW_CFA_def_cfa_offset:
			if (!_uleb(&p, end, &u))
				return -EBADMSG;
			if (r->cfa != _CFA_REG)
				r->cfa = _CFA_OTHER;
			r->cfa_off = (int64_t)u;
			break;
		case DW_CFA_def_cfa_offset_sf:
			if (!_sleb(&p, end, &sv))
				return -EBADMSG;
			if (r->cfa != _CFA_REG)
				r->cfa = _CFA_OTHER;
			r->cfa_off = sv * cie->daf;
			break;
		case DW_CFA_def_cfa_expression:
			if (!_uleb(&p, end, &u) || u > (uint64_t)(end - p))
				return -EBADMSG;
			_cfa_expr(r, p, p + u);
			p += u;
			break;
		case DW_CFA_GNU_args_size:
			if (!_uleb(&p, end, &u))
				return -EBADMSG;
			break;
		default:
			return -EBADMSG;
		}
		if (advance) {
			if (!w)
				return -EBADMSG;
			if ((err = _walk_to(w, r, w->loc + delta * cie->caf)))
				return err;
		}
	}
	return 0;
}

/* The CIE at off in src, decoded (or found in the cache). NULL when unusable. */
static const struct ut_cie *_get_cie(const struct ut_source *src, uint8_t idx, Dwarf_Off off,
				   struct ut_cie *cache)
{
	struct ut_cie *c = &cache[(off * 2654435761u + idx) % _CIE_CACHE];
	Dwarf_CFI_Entry e;
	Dwarf_Off next;

	if (c->used && c->off == off && c->src == idx)
		return c->ok ? c : NULL;
	memset(c, 0, sizeof(*c));
	c->used = true;
	c->off = off;
	c->src = idx;
	if (dwarf_next_cfi(src->ident, src->data, src->eh_frame, off, &next, &e) != 0 ||
	    !dwarf_cfi_cie_p(&e) || !ut__cie_fde_encoding(src, off, &c->enc))
		return NULL;
	c->z = e.cie.augmentation[0] == 'z';
	c->signal = strchr(e.cie.augmentation, 'S') != NULL;
	c->caf = e.cie.code_alignment_factor;
	c->daf = e.cie.data_alignment_factor;
	/* What x86-64 code starts with, before the CIE says anything. */
	c->init = (struct _rules){ .cfa = _CFA_OTHER, .ra = _REG_UNDEF, .rbp = _REG_SAME };
	if (_run_cfa(e.cie.initial_instructions, e.cie.initial_instructions_end, c, &c->init,
		     &c->init, NULL))
		return NULL;
	c->ok = true;
	return c;
}

/* Drops the chunk the last FDE lay in when fde lies in another (see _CFI_CHUNK). */
static void _leave_chunk(struct ut_builder *b, const struct ut_source *src, const void *fde)
{
	uintptr_t chunk = (uintptr_t)fde & ~(_CFI_CHUNK - 1);

	if (chunk == b->chunk)
		return;
	if (b->chunk_src && b->chunk_src->mapped) {
		uintptr_t lo = (uintptr_t)b->chunk_src->data->d_buf;
		uintptr_t hi = lo + b->chunk_src->data->d_size;
		uintptr_t from = b->chunk > lo ? b->chunk : lo;
		uintptr_t to = b->chunk + _CFI_CHUNK < hi ? b->chunk + _CFI_CHUNK : hi;

		if (to > from)
			ut__drop_range((const void *)from, to - from);
	}
	b->chunk = chunk;
	b->chunk_src = src;
}

/* Emits the rows of one span from lo (>= span->lo, where overlap cut it) to span->hi. */
int ut__fill_span(struct ut_builder *b, const struct ut_span *span, uint64_t lo,
		  const struct ut_source *srcs, struct ut_cie *cies)
{
	const struct ut_source *src = &srcs[span->src < UT_MAX_SOURCES ? span->src : 0];
	struct _walk w = { .b = b, .src = src, .lo = lo, .hi = span->hi };
	const struct ut_cie *cie;
	struct _rules r;
	const uint8_t *p;
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	uint64_t start, len, aug;
	uint64_t addr = lo;
	int err;

	switch (span->kind) {
	case UT_SPAN_PLT_LAZY:
		/*
		 * The first 16 bytes are PLT0: entered with the relocation index
		 * pushed on top of the return address, and it pushes one more
		 * word at +6. The entries after it follow the PLT rule.
		 */
		if (span->hi - span->lo >= 16 && lo == span->lo) {
			if ((err = ut__emit(b, lo, UNWIND_CFA_RSP, 16, 0)) ||
			    (err = ut__emit(b, lo + 6, UNWIND_CFA_RSP, 24, 0)))
				return err;
			addr = lo + 16;
		}
		return ut__emit(b, addr, UNWIND_CFA_PLT, 0, 0);
	case UT_SPAN_PLT_NOLAZY:
		/* Entries only jump through the GOT: nothing is pushed. */
		return ut__emit(b, lo, UNWIND_CFA_RSP, 8, 0);
	}

	/* ut__collect_fdes() read this FDE already: it and its CIE decode. */
	if (dwarf_next_cfi(src->ident, src->data, src->eh_frame, span->fde_off, &next, &e) != 0 ||
	    dwarf_cfi_cie_p(&e) || !(cie = _get_cie(src, span->src, e.fde.CIE_pointer, cies)))
		goto bad;
	_leave_chunk(b, src, e.fde.start);
	p = e.fde.start;
	if (!ut__read_address(src, &p, e.fde.end, cie->enc, &start) ||
	    !ut__read_value(&p, e.fde.end, cie->enc & 0x0f, &len))
		goto bad;
	if (cie->z) {
		if (!_uleb(&p, e.fde.end, &aug) || aug > (uint64_t)(e.fde.end - p))
			goto bad;
		p += aug;
	}
	w.loc = start;
	w.signal = cie->signal;
	r = cie->init;
	err = _run_cfa(p, e.fde.end, cie, &r, &cie->init, &w);
	if (err == -EBADMSG) {
		/* The rows before the bad instruction stand; the rest has no rules. */
		pr_debug("unwind: %s: bad CFA instruction in the FDE at %#lx\n", src->what,
			 (unsigned long)span->fde_off);
		b->unsupported++;
		return w.loc < span->hi ? ut__emit(b, w.loc > lo ? w.loc : lo, UNWIND_NO_CFI, 0, 0) : 0;
	}
	if (err)
		return err;
	return _walk_to(&w, &r, span->hi);
bad:
	pr_debug("unwind: %s: cannot read the FDE at %#lx again\n", src->what,
		 (unsigned long)span->fde_off);
	b->unsupported++;
	return ut__emit(b, lo, UNWIND_NO_CFI, 0, 0);
}
