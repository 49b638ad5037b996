// SPDX-License-Identifier: Apache-2.0
/*
 * .eh_frame/.debug_frame → unwind_row tables.
 *
 * libdw splits the sections into CIEs and FDEs (dwarf_next_cfi); this file
 * visits the FDEs by address (through .eh_frame_hdr's sorted table where
 * the file has one, else from a list of its own), runs each FDE's CFA
 * program once, from its start to its end, emitting a row whenever the
 * location advances, and maps every row onto the handful of rules the BPF
 * unwinder implements. Only three columns matter (the CFA, the return
 * address and rbp), so the state is three rules, not a register file.
 *
 * libdw's own interpreter (dwarf_cfi_addrframe) answers one address at a
 * time: asked for every row, it re-ran each FDE's program from the start
 * for each of its rows and cached every FDE it had seen, which made table
 * building the agent's main CPU cost and, for a library with 100k FDEs,
 * ~10 MiB of its peak memory. The rules below are the ones the libdw
 * version accepted; tests/unit/test_unwind_table.c checks the tables
 * against readelf's interpretation.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

#include "common/heapsort.h"
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
	Elf_Data *data;		/* raw section bytes, for dwarf_next_cfi() */
	const unsigned char *ident;
	uint64_t sh_addr;	/* base for pc-relative FDE addresses */
	bool eh_frame;
	bool mapped;		/* data lies in libelf's read-only map of the file */
};

/*
 * The CFI sections are read in place, in libelf's read-only mapping of the
 * file, and every page read stayed resident until the build ended: a large
 * library's .eh_frame (libLLVM-14's 4.8 MB) at once in the agent's RSS.
 * The pages are dropped from the mapping after the FDE scan and then every
 * _DROP_SPANS spans (a file mapping's pages come back from the page cache
 * when read again: CIEs, mostly), so a build holds a window of them.
 */
#define _DROP_SPANS 128
/*
 * A read fault on a file mapping maps the 64 KiB around it (the kernel's
 * fault_around_bytes). The walk visits FDEs by address, which hops across
 * .eh_frame: libLLVM-14's first 128 FDEs so faulted in 1 MB. The 64 KiB an
 * FDE lay in are therefore dropped as soon as the walk reads an FDE in
 * other ones (_leave_chunk): its build's peak 3.2 -> 2.1 MB, same CPU.
 */
#define _CFI_CHUNK ((uintptr_t)64 << 10)

/* Drops the whole pages inside [p, p + len) from a read-only file mapping. */
static void _drop_range(const void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p, hi = lo + len;

	/* Whole pages inside the section only: its neighbours may be in use. */
	lo = (lo + page - 1) & ~(page - 1);
	hi &= ~(page - 1);
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static void _drop_pages(const struct _source *srcs, size_t nsrc)
{
	for (size_t i = 0; i < nsrc; i++)
		if (srcs[i].mapped)
			_drop_range(srcs[i].data->d_buf, srcs[i].data->d_size);
}

enum _span_kind {
	_SPAN_FDE,
	_SPAN_PLT_LAZY,		/* .plt without an FDE */
	_SPAN_PLT_NOLAZY,	/* .plt.sec or .plt.got without an FDE */
};

/* One FDE (or synthesized PLT range). Every address fits u32 by then. */
struct _span {
	uint32_t lo, hi;
	uint32_t fde_off;	/* _SPAN_FDE: the FDE's offset in its section */
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
	/*
	 * A Go binary: its .debug_frame is Go's (see _walk_to), and its stack
	 * switches are spliced into the whole table, so a stream keeps its
	 * rows until the end.
	 */
	bool go;
	/*
	 * unwind_table__stream(): rows leave through fn whenever the buffer
	 * is full, all but the last two, which _emit() may still replace or
	 * compare with.
	 */
	unwind_rows_fn fn;
	void *ctx;
	size_t flushed;
	struct unwind_table_stats *kinds;	/* counts per row type, as rows leave */
	/* The _CFI_CHUNK the last FDE read lay in, and its source. */
	uintptr_t chunk;
	const struct _source *chunk_src;
};

#define _STREAM_ROWS 1024	/* the buffer of a streamed table: 8 KiB */

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

static void _count_kinds(struct unwind_table_stats *st, const struct unwind_row *rows, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		st->no_cfi_rows += rows[i].cfa_type == UNWIND_NO_CFI;
		st->signal_rows += rows[i].cfa_type == UNWIND_CFA_SIGNAL;
		st->plt_rows += rows[i].cfa_type == UNWIND_CFA_PLT;
		st->go_rows += rows[i].cfa_type >= UNWIND_GO_ASMCGOCALL &&
			       rows[i].cfa_type <= UNWIND_GO_CGOCALLBACK;
	}
}

/* Hands the first n buffered rows to the stream's fn; the rest move up. */
static int _flush(struct _builder *b, size_t n)
{
	int err;

	if (!n)
		return 0;
	_count_kinds(b->kinds, b->rows, n);
	err = b->fn(b->ctx, b->rows, n);
	if (err)
		return err;
	b->flushed += n;
	memmove(b->rows, b->rows + n, (b->n - n) * sizeof(*b->rows));
	b->n -= n;
	return 0;
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
	if (b->n == b->cap && b->fn && !b->go && b->n > 2) {
		int err = _flush(b, b->n - 2);

		if (err)
			return err;
	}
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : _STREAM_ROWS;
		struct unwind_row *v = realloc(b->rows, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		b->rows = v;
		b->cap = cap;
	}
	b->rows[b->n++] = row;
	return 0;
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

static int _spans_push(struct _spans *sp, uint64_t lo, uint64_t hi, uint8_t kind, uint8_t src,
		       Dwarf_Off fde_off)
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
					 .fde_off = (uint32_t)fde_off, .kind = kind, .src = src };
	return 0;
}

/* The FDE address encoding of the CIE last asked about. */
struct _fde_enc {
	Dwarf_Off cie_off;
	bool ok;
	uint8_t enc;
};

/*
 * The code range [*lo, *lo + *len) of the FDE e of src. Returns 1, 0 for an
 * FDE of code the linker discarded (address 0 or a tombstone in
 * .debug_frame, or no length), -1 when it cannot be decoded.
 */
static int _fde_range(const struct _source *src, const Dwarf_CFI_Entry *e, struct _fde_enc *c,
		      uint64_t *lo, uint64_t *len)
{
	const uint8_t *p = e->fde.start;

	if (!c->ok || e->fde.CIE_pointer != c->cie_off) {
		c->cie_off = e->fde.CIE_pointer;
		c->ok = _cie_fde_encoding(src, c->cie_off, &c->enc);
	}
	if (!c->ok || !_read_address(src, &p, e->fde.end, c->enc, lo) ||
	    !_read_value(&p, e->fde.end, c->enc & 0x0f, len))
		return -1;
	return *lo != 0 && *len != 0 && *lo + *len > *lo;
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
	Dwarf_Off off = 0, next;
	size_t skipped = 0, found = 0, entries = 0;
	struct _fde_enc enc = { 0 };
	int err = 0, r;

	for (;;) {
		Dwarf_Off entry_off = off;
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
		if (++entries % (4 * _DROP_SPANS) == 0)
			_drop_pages(src, 1);	/* behind us: the scan reads the section in order */
		if (dwarf_cfi_cie_p(&e))
			continue;
		r = _fde_range(src, &e, &enc, &lo, &len);
		if (r < 0)
			skipped++;
		if (r <= 0)
			continue;
		if (lo + len > max_vaddr) {
			if (!have_phdrs) {
				err = -E2BIG;
				goto out;
			}
			continue;
		}
		err = _spans_push(sp, lo, lo + len, _SPAN_FDE, idx, entry_off);
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
 * Whether data lies in libelf's read-only map of the file (ELF_C_READ_MMAP),
 * not in a copy on the heap: only the map's pages may be dropped.
 */
static bool _in_file_map(Elf *elf, const Elf_Data *data)
{
	size_t size = 0;
	const char *file = elf_rawfile(elf, &size);
	const char *buf = data->d_buf;

	return file && buf >= file && buf + data->d_size <= file + size;
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
	if (!s->data || !s->data->d_buf || s->data->d_size == 0 || s->data->d_size > UINT32_MAX)
		return;
	s->what = what;
	s->ident = (const unsigned char *)elf_getident(elf, NULL);
	s->sh_addr = shdr.sh_addr;
	s->eh_frame = eh_frame;
	/*
	 * Not a decompressed copy on the heap: only bytes of the file's map
	 * may be dropped (ELF_C_READ_MMAP maps it read-only and private).
	 */
	s->mapped = !(shdr.sh_flags & SHF_COMPRESSED) && _in_file_map(elf, s->data);
	(*nsrc)++;
}

/*
 * .eh_frame_hdr's search table: one (initial location, FDE address) pair
 * for every FDE of .eh_frame, sorted by location, which the linker writes
 * for the runtime's unwinder. Where a file has a sound one, the build walks
 * it in place instead of listing .eh_frame's FDEs itself: the list took 16
 * bytes an FDE (1.5 MB for libLLVM-14's 95k) at the peak of the build, and
 * its scan read all of .eh_frame once more.
 */
struct _hdr_table {
	const struct _source *eh;	/* the file's .eh_frame, which the table indexes */
	const uint8_t *v;		/* n entries of two datarel sdata4 values */
	size_t n, next;
	uint64_t base;			/* .eh_frame_hdr's address: the values' base */
	const void *buf;		/* the section, for _drop_range() */
	size_t size;
	bool mapped;
	struct _fde_enc enc;
	size_t found, skipped;
};

/*
 * Column col of entry i (0: the location, 1: the FDE's address); _hdr_open()
 * checked the bounds. Decoded here, not by _read_value(): every entry is
 * read at least twice, and its switch cost libLLVM-14's build 3 of 33 ms.
 */
static uint64_t _hdr_value(const struct _hdr_table *h, size_t i, unsigned int col)
{
	const uint8_t *p = h->v + 8 * i + 4 * col;

	return h->base + (uint64_t)(int64_t)(int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
						      (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/*
 * Finds elf's .eh_frame_hdr and checks that its table indexes eh (version 1,
 * the eh_frame pointer equal to eh's address, 8-byte datarel entries, sorted
 * by location); false means the FDEs are listed from .eh_frame instead.
 */
static bool _hdr_open(Elf *elf, const struct _source *eh, struct _hdr_table *h)
{
	struct _source hs = { 0 };
	const uint8_t *p, *end;
	uint64_t eh_ptr, count;
	uint8_t ptr_enc, count_enc;
	GElf_Shdr shdr;
	Elf_Scn *scn;

	memset(h, 0, sizeof(*h));
	scn = _find_section(elf, ".eh_frame_hdr", &shdr);
	/* lld types it SHT_X86_64_UNWIND too. */
	if (!scn || !(shdr.sh_type == SHT_PROGBITS || shdr.sh_type == SHT_X86_64_UNWIND) ||
	    (shdr.sh_flags & SHF_COMPRESSED) ||
	    !(hs.data = elf_getdata(scn, NULL)) || !hs.data->d_buf || hs.data->d_size < 4)
		return false;
	hs.sh_addr = shdr.sh_addr;
	p = hs.data->d_buf;
	end = p + hs.data->d_size;
	/* version, eh_frame_ptr's encoding, fde_count's, the table's */
	if (p[0] != 1 || (p[2] & 0x70) != DW_EH_PE_absptr ||
	    p[3] != (DW_EH_PE_datarel | DW_EH_PE_sdata4))
		return false;
	ptr_enc = p[1];
	count_enc = p[2];
	p += 4;
	if (!_read_address(&hs, &p, end, ptr_enc, &eh_ptr) || eh_ptr != eh->sh_addr ||
	    !_read_value(&p, end, count_enc & 0x0f, &count) || count > (uint64_t)(end - p) / 8)
		return false;
	h->eh = eh;
	h->v = p;
	h->n = count;
	h->base = shdr.sh_addr;
	h->buf = hs.data->d_buf;
	h->size = hs.data->d_size;
	h->mapped = _in_file_map(elf, hs.data);
	for (size_t i = 1; i < h->n; i++) {
		if (_hdr_value(h, i, 0) < _hdr_value(h, i - 1, 0)) {
			pr_debug("unwind: .eh_frame_hdr: table not sorted at entry %zu: not used\n", i);
			return false;
		}
		/* What is behind, 64 KiB at a time: libLLVM's table is 760 KB. */
		if (h->mapped && i % 8192 == 0)
			_drop_range(h->buf, (size_t)(h->v + 8 * i - (const uint8_t *)h->buf));
	}
	if (h->mapped)
		_drop_range(h->buf, h->size);
	return true;
}

/*
 * Entry i as a span, when its FDE decodes, starts where the table says and
 * describes loaded code (below limit). Returns 1, 0 to skip it quietly, -1
 * for an entry that is not sound.
 */
static int _hdr_span(struct _hdr_table *h, size_t i, uint64_t limit, struct _span *out)
{
	const struct _source *eh = h->eh;
	uint64_t loc = _hdr_value(h, i, 0), fde = _hdr_value(h, i, 1), lo, len;
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	int r;

	if (fde < eh->sh_addr || fde - eh->sh_addr >= eh->data->d_size ||
	    dwarf_next_cfi(eh->ident, eh->data, true, fde - eh->sh_addr, &next, &e) != 0 ||
	    dwarf_cfi_cie_p(&e))
		return -1;
	r = _fde_range(eh, &e, &h->enc, &lo, &len);
	if (r <= 0)
		return r;
	if (lo != loc)
		return -1;
	if (lo + len > limit)
		return 0;
	*out = (struct _span){ .lo = (uint32_t)lo, .hi = (uint32_t)(lo + len),
			       .fde_off = (uint32_t)(fde - eh->sh_addr), .kind = _SPAN_FDE };
	return 1;
}

/* The next span of the table, in address order; false at its end. */
static bool _hdr_next(struct _hdr_table *h, uint64_t limit, struct _span *out)
{
	while (h->next < h->n) {
		int r = _hdr_span(h, h->next++, limit, out);

		if (r > 0) {
			h->found++;
			return true;
		}
		h->skipped += r < 0;
	}
	return false;
}

/* Whether an FDE of the table overlaps [lo, hi). */
static bool _hdr_covers(struct _hdr_table *h, uint64_t lo, uint64_t hi, uint64_t limit)
{
	size_t a = 0, b = h->n;
	struct _span s;

	/* The last FDE to start below hi: FDEs do not nest. */
	while (a < b) {
		size_t mid = a + (b - a) / 2;

		if (_hdr_value(h, mid, 0) < hi)
			a = mid + 1;
		else
			b = mid;
	}
	return a && _hdr_span(h, a - 1, limit, &s) > 0 && s.lo < hi && lo < s.hi;
}

/*
 * PLT sections no FDE covers (lld emits none, nor does ld with
 * --no-ld-generated-unwind-info) get rows synthesized from the known entry
 * layouts.
 */
static int _add_plt_spans(Elf *elf, uint64_t max_vaddr, struct _spans *sp,
			  struct _hdr_table *hdr)
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
		covered = hdr && _hdr_covers(hdr, lo, hi, max_vaddr);
		for (size_t j = 0; j < nfde && !covered; j++)
			covered = sp->v[j].lo < hi && lo < sp->v[j].hi;
		if (covered)
			continue;
		pr_debug("unwind: %s [%#lx, %#lx) has no FDE: synthesized rows\n", names[i],
			 (unsigned long)lo, (unsigned long)hi);
		err = _spans_push(sp, lo, hi, i == 0 ? _SPAN_PLT_LAZY : _SPAN_PLT_NOLAZY, 0,
				  _MAX_SOURCES);
		if (err)
			return err;
	}
	return 0;
}

/* A total order, so that the (unstable) heapsort gives one result. */
static bool _span_less(const struct _span *x, const struct _span *y)
{
	if (x->lo != y->lo)
		return x->lo < y->lo;
	if (x->src != y->src)
		return x->src < y->src;
	if (x->hi != y->hi)
		return x->hi < y->hi;
	if (x->fde_off != y->fde_off)
		return x->fde_off < y->fde_off;
	return x->kind < y->kind;
}

/* In place: libLLVM has ~95k spans, which qsort() would copy first. */
DEFINE_HEAPSORT(_sort_spans, struct _span, _span_less)

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
struct _cie {
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

/* Where one FDE's rows go. */
struct _walk {
	struct _builder *b;
	const struct _source *src;
	uint64_t loc, lo, hi;	/* current location; rows are kept within [lo, hi) */
	bool signal;
};

static bool _uleb(const uint8_t **pp, const uint8_t *end, uint64_t *v)
{
	return _read_value(pp, end, DW_EH_PE_uleb128, v);
}

static bool _sleb(const uint8_t **pp, const uint8_t *end, int64_t *v)
{
	return _read_value(pp, end, DW_EH_PE_sleb128, (uint64_t *)v);
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
		err = _emit(w->b, at, row.cfa_type, row.cfa_offset, row.rbp_slot);
	}
	w->loc = next;
	return err;
}

/*
 * Runs CFA instructions [p, end) on r. With w (an FDE's instructions),
 * every advance of the location emits the row of the rules that held
 * before it; without (a CIE's initial instructions) an advance is an error.
 * init is the CIE's state for DW_CFA_restore. Returns 0, -EBADMSG for a
 * malformed or unknown instruction, or an error of _emit().
 */
static int _run_cfa(const uint8_t *p, const uint8_t *end, const struct _cie *cie,
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

			if (!w || !_read_address(w->src, &p, end, cie->enc, &loc) || loc < w->loc)
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
static const struct _cie *_get_cie(const struct _source *src, uint8_t idx, Dwarf_Off off,
				   struct _cie *cache)
{
	struct _cie *c = &cache[(off * 2654435761u + idx) % _CIE_CACHE];
	Dwarf_CFI_Entry e;
	Dwarf_Off next;

	if (c->used && c->off == off && c->src == idx)
		return c->ok ? c : NULL;
	memset(c, 0, sizeof(*c));
	c->used = true;
	c->off = off;
	c->src = idx;
	if (dwarf_next_cfi(src->ident, src->data, src->eh_frame, off, &next, &e) != 0 ||
	    !dwarf_cfi_cie_p(&e) || !_cie_fde_encoding(src, off, &c->enc))
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
static void _leave_chunk(struct _builder *b, const struct _source *src, const void *fde)
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
			_drop_range((const void *)from, to - from);
	}
	b->chunk = chunk;
	b->chunk_src = src;
}

/* Emits the rows of one span from lo (>= span->lo, where overlap cut it) to span->hi. */
static int _fill_span(struct _builder *b, const struct _span *span, uint64_t lo,
		      const struct _source *srcs, struct _cie *cies)
{
	const struct _source *src = &srcs[span->src < _MAX_SOURCES ? span->src : 0];
	struct _walk w = { .b = b, .src = src, .lo = lo, .hi = span->hi };
	const struct _cie *cie;
	struct _rules r;
	const uint8_t *p;
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	uint64_t start, len, aug;
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

	/* _collect_fdes() read this FDE already: it and its CIE decode. */
	if (dwarf_next_cfi(src->ident, src->data, src->eh_frame, span->fde_off, &next, &e) != 0 ||
	    dwarf_cfi_cie_p(&e) || !(cie = _get_cie(src, span->src, e.fde.CIE_pointer, cies)))
		goto bad;
	_leave_chunk(b, src, e.fde.start);
	p = e.fde.start;
	if (!_read_address(src, &p, e.fde.end, cie->enc, &start) ||
	    !_read_value(&p, e.fde.end, cie->enc & 0x0f, &len))
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
		return w.loc < span->hi ? _emit(b, w.loc > lo ? w.loc : lo, UNWIND_NO_CFI, 0, 0) : 0;
	}
	if (err)
		return err;
	return _walk_to(&w, &r, span->hi);
bad:
	pr_debug("unwind: %s: cannot read the FDE at %#lx again\n", src->what,
		 (unsigned long)span->fde_off);
	b->unsupported++;
	return _emit(b, lo, UNWIND_NO_CFI, 0, 0);
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

/*
 * Builds the table into b (its rows, or its stream) and st. On success b
 * holds the rows not yet streamed: all of them without a stream.
 */
static int _build(int fd, int debug_fd, struct _builder *b, struct unwind_table_stats *st)
{
	struct go_switch go[GO_SWITCH_MAX];
	struct _source srcs[_MAX_SOURCES];
	struct _cie *cies = NULL;
	struct _spans sp = { 0 };
	struct _hdr_table hdr;
	struct _span next_hdr;
	Elf *elf = NULL, *delf = NULL;
	uint64_t max_vaddr, covered = 0, limit;
	bool have_phdrs, main_eh, use_hdr, more_hdr;
	size_t nsrc = 0, ngo, ilist = 0;
	int err;

	b->kinds = st;
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

	/* The main file's .eh_frame (source 0) through its .eh_frame_hdr, where it has one. */
	use_hdr = main_eh && have_phdrs && _hdr_open(elf, &srcs[0], &hdr);
	for (size_t i = use_hdr; i < nsrc; i++) {
		err = _collect_fdes(&srcs[i], (uint8_t)i, limit, have_phdrs, &sp);
		if (err)
			goto out;
	}
	_drop_pages(srcs, nsrc);
	more_hdr = use_hdr && _hdr_next(&hdr, limit, &next_hdr);
	ngo = go_switch__find(elf, go);
	b->go = ngo > 0;
	if (sp.n == 0 && !more_hdr && !ngo) {
		err = -ENOENT;
		goto out;
	}
	err = _add_plt_spans(elf, limit, &sp, use_hdr ? &hdr : NULL);
	if (err)
		goto out;
	if (sp.n)	/* a Go binary without CFI has no spans */
		_sort_spans(sp.v, sp.n);
	cies = calloc(_CIE_CACHE, sizeof(*cies));
	if (!cies) {
		err = -ENOMEM;
		goto out;
	}

	/*
	 * Spans are visited by start address, the table's merged with the
	 * list's; where they overlap (the same code in .eh_frame and
	 * .debug_frame), the part already covered keeps the rows of the span
	 * that covered it first.
	 */
	for (;;) {
		struct _span span;
		const struct _span *s = &span;
		uint64_t lo;

		if (more_hdr && (ilist == sp.n || _span_less(&next_hdr, &sp.v[ilist]))) {
			span = next_hdr;
			more_hdr = _hdr_next(&hdr, limit, &next_hdr);
		} else if (ilist < sp.n) {
			span = sp.v[ilist++];
		} else {
			break;
		}
		lo = s->lo > covered ? s->lo : covered;

		if (lo >= s->hi)
			continue;
		if ((b->n || b->flushed) && lo > covered) {
			err = _emit(b, covered, UNWIND_NO_CFI, 0, 0);
			if (err)
				goto out;
		}
		err = _fill_span(b, s, lo, srcs, cies);
		if (err)
			goto out;
		covered = s->hi;
		st->fdes++;
		if (st->fdes % _DROP_SPANS == 0) {
			_drop_pages(srcs, nsrc);
			if (use_hdr && hdr.mapped)
				_drop_range(hdr.buf, hdr.size);
		}
	}
	st->hdr_fdes = use_hdr ? hdr.found : 0;
	if (use_hdr)
		pr_debug("unwind: .eh_frame: %zu FDEs (through .eh_frame_hdr; %zu entries skipped)\n",
			 hdr.found, hdr.skipped);
	err = _emit(b, covered, UNWIND_NO_CFI, 0, 0);
	if (err)
		goto out;
	/* Without CFI, b holds one UNWIND_NO_CFI row at 0: frame pointers around the Go rows. */
	for (size_t i = 0; i < ngo; i++) {
		if (go[i].pc + go[i].len > limit)
			continue;
		err = _splice_go_switch(b, &go[i]);
		if (err)
			goto out;
	}

	st->rows_raw = b->rows_raw;
	st->unsupported_rows = b->unsupported;
out:
	free(cies);
	free(sp.v);
	elf_end(delf);
	elf_end(elf);
	return err;
}

int unwind_table__build(int fd, int debug_fd, struct unwind_row **rows, size_t *nrows,
			struct unwind_table_stats *stats)
{
	struct unwind_table_stats st = { 0 };
	struct _builder b = { 0 };
	int err;

	*rows = NULL;
	*nrows = 0;
	if (stats)
		memset(stats, 0, sizeof(*stats));
	err = _build(fd, debug_fd, &b, &st);
	if (err) {
		free(b.rows);
		return err;
	}
	st.rows = b.n;
	_count_kinds(&st, b.rows, b.n);
	if (b.n < b.cap) {
		struct unwind_row *v = realloc(b.rows, b.n * sizeof(*v));

		if (v)
			b.rows = v;
	}
	*rows = b.rows;
	*nrows = b.n;
	if (stats)
		*stats = st;
	return 0;
}

int unwind_table__stream(int fd, int debug_fd, unwind_rows_fn fn, void *ctx, size_t *nrows,
			 struct unwind_table_stats *stats)
{
	struct unwind_table_stats st = { 0 };
	struct _builder b = { .fn = fn, .ctx = ctx };
	int err;

	*nrows = 0;
	if (stats)
		memset(stats, 0, sizeof(*stats));
	err = _build(fd, debug_fd, &b, &st);
	if (!err)
		err = _flush(&b, b.n);
	free(b.rows);
	if (err)
		return err;
	st.rows = b.flushed;
	*nrows = b.flushed;
	if (stats)
		*stats = st;
	return 0;
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
