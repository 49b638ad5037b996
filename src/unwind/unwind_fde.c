// SPDX-License-Identifier: Apache-2.0
/*
 * Where the FDEs are, for unwind_table.c: the CFI sections of a file (its
 * sources), the FDEs each of them lists, .eh_frame_hdr's sorted table of
 * .eh_frame's FDEs, and the PLT sections no FDE covers, as spans.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <gelf.h>
#include <libelf.h>

#include "common/elf_sections.h"
#include "common/log.h"
#include "unwind/unwind_table_impl.h"

/* Reads one value of a DW_EH_PE_* format (the low 4 bits of an encoding). */
bool ut__read_value(const uint8_t **pp, const uint8_t *end, uint8_t format, uint64_t *val)
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
bool ut__read_address(const struct ut_source *src, const uint8_t **pp, const uint8_t *end,
		      uint8_t enc, uint64_t *val)
{
	uint64_t field = src->sh_addr + (uint64_t)(*pp - (const uint8_t *)src->data->d_buf);

	if (enc == DW_EH_PE_omit || (enc & DW_EH_PE_indirect))
		return false;
	if (!ut__read_value(pp, end, enc & 0x0f, val))
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
bool ut__cie_fde_encoding(const struct ut_source *src, Dwarf_Off cie_off, uint8_t *enc)
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
			    !ut__read_value(&p, end, penc & 0x0f, &skip))
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

static int _spans_push(struct ut_spans *sp, uint64_t lo, uint64_t hi, uint8_t kind, uint8_t src,
		       Dwarf_Off fde_off)
{
	if (sp->n == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 256;
		struct ut_span *v = realloc(sp->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		sp->v = v;
		sp->cap = cap;
	}
	sp->v[sp->n++] = (struct ut_span){ .lo = (uint32_t)lo, .hi = (uint32_t)hi,
					 .fde_off = (uint32_t)fde_off, .kind = kind, .src = src };
	return 0;
}

/*
 * The code range [*lo, *lo + *len) of the FDE e of src. Returns 1, 0 for an
 * FDE of code the linker discarded (address 0 or a tombstone in
 * .debug_frame, or no length), -1 when it cannot be decoded.
 */
static int _fde_range(const struct ut_source *src, const Dwarf_CFI_Entry *e, struct ut_fde_enc *c,
		      uint64_t *lo, uint64_t *len)
{
	const uint8_t *p = e->fde.start;

	if (!c->ok || e->fde.CIE_pointer != c->cie_off) {
		c->cie_off = e->fde.CIE_pointer;
		c->ok = ut__cie_fde_encoding(src, c->cie_off, &c->enc);
	}
	if (!c->ok || !ut__read_address(src, &p, e->fde.end, c->enc, lo) ||
	    !ut__read_value(&p, e->fde.end, c->enc & 0x0f, len))
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
int ut__collect_fdes(const struct ut_source *src, uint8_t idx, uint64_t max_vaddr,
		     bool have_phdrs, struct ut_spans *sp)
{
	Dwarf_Off off = 0, next;
	size_t skipped = 0, found = 0, entries = 0;
	struct ut_fde_enc enc = { 0 };
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
		if (++entries % (4 * UT_DROP_SPANS) == 0)
			ut__drop_pages(src, 1);	/* behind us: the scan reads the section in order */
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
		err = _spans_push(sp, lo, lo + len, UT_SPAN_FDE, idx, entry_off);
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
void ut__add_source(Elf *elf, bool eh_frame, const char *what, struct ut_source *srcs,
		    size_t *nsrc)
{
	struct ut_source *s = &srcs[*nsrc];
	GElf_Shdr shdr;
	Elf_Scn *scn;

	/* lld types .eh_frame SHT_X86_64_UNWIND, as the psABI says. */
	scn = elf_sections__find(elf, eh_frame ? ".eh_frame" : ".debug_frame", &shdr);
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
 * Column col of entry i (0: the location, 1: the FDE's address); ut__hdr_open()
 * checked the bounds. Decoded here, not by ut__read_value(): every entry is
 * read at least twice, and its switch was a sizeable share of a large
 * library's build.
 */
static uint64_t _hdr_value(const struct ut_hdr_table *h, size_t i, unsigned int col)
{
	const uint8_t *p = h->v + 8 * i + 4 * col;

	return h->base + (uint64_t)(int64_t)(int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
						      (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/*
 * Finds elf's .eh_frame_hdr and checks that its table indexes eh (version 1,
 * the eh_frame pointer equal to eh's address, 8-byte datarel entries, sorted
 * by location); false means the FDEs are listed from .eh_frame instead.
 * Without check_order (a build of one range) the order is not checked
 * here, which read the whole table (a third of a 64-KiB chunk's build on
 * libLLVM): ut__hdr_next() skips entries out of order as it goes, and a
 * search in an unsorted table finds wrong FDEs, never bytes outside it.
 */
bool ut__hdr_open(Elf *elf, int fd, const struct ut_source *eh, bool check_order,
		  struct ut_hdr_table *h)
{
	struct ut_source hs = { 0 };
	const uint8_t *p, *end;
	uint64_t eh_ptr, count;
	uint8_t ptr_enc, count_enc;
	GElf_Shdr shdr;
	Elf_Scn *scn;

	memset(h, 0, sizeof(*h));
	scn = elf_sections__find(elf, ".eh_frame_hdr", &shdr);
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
	if (!ut__read_address(&hs, &p, end, ptr_enc, &eh_ptr) || eh_ptr != eh->sh_addr ||
	    !ut__read_value(&p, end, count_enc & 0x0f, &count) || count > (uint64_t)(end - p) / 8)
		return false;
	h->eh = eh;
	h->v = p;
	h->n = count;
	h->base = shdr.sh_addr;
	h->buf = hs.data->d_buf;
	h->size = hs.data->d_size;
	h->mapped = _in_file_map(elf, hs.data);
	h->fd = h->mapped ? fd : -1;
	h->file_off = shdr.sh_offset + (uint64_t)(h->v - (const uint8_t *)h->buf);
	for (size_t i = 1; i < h->n && check_order; i++) {
		if (_hdr_value(h, i, 0) < _hdr_value(h, i - 1, 0)) {
			pr_debug("unwind: .eh_frame_hdr: table not sorted at entry %zu: not used\n", i);
			return false;
		}
		/* What is behind, 64 KiB at a time: a large library's table is hundreds of KB. */
		if (h->mapped && i % 8192 == 0)
			ut__drop_range(h->buf, (size_t)(h->v + 8 * i - (const uint8_t *)h->buf));
	}
	if (h->mapped)
		ut__drop_range(h->buf, h->size);
	return true;
}

/*
 * Entry i as a span, when its FDE decodes, starts where the table says and
 * describes loaded code (below limit). Returns 1, 0 to skip it quietly, -1
 * for an entry that is not sound.
 */
static int _hdr_span(struct ut_hdr_table *h, size_t i, uint64_t limit, struct ut_span *out)
{
	const struct ut_source *eh = h->eh;
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
	*out = (struct ut_span){ .lo = (uint32_t)lo, .hi = (uint32_t)(lo + len),
			       .fde_off = (uint32_t)(fde - eh->sh_addr), .kind = UT_SPAN_FDE };
	return 1;
}

/* The next span of the table, in address order; false at its end. */
bool ut__hdr_next(struct ut_hdr_table *h, uint64_t limit, struct ut_span *out)
{
	while (h->next < h->n) {
		uint64_t loc = _hdr_value(h, h->next, 0);
		int r;

		if (loc < h->last_loc) {	/* out of order: only where the order was not checked */
			h->next++;
			h->skipped++;
			continue;
		}
		h->last_loc = loc;
		r = _hdr_span(h, h->next++, limit, out);

		if (r > 0) {
			h->found++;
			return true;
		}
		h->skipped += r < 0;
	}
	return false;
}

/*
 * Entry i's location, read from the file: a search's probes through the
 * map faulted in 64 KiB around each (fault-around), ~1 MB of libLLVM's
 * table at once for a chunk's build, where a few bytes are needed.
 */
static uint64_t _hdr_loc_read(const struct ut_hdr_table *h, size_t i)
{
	uint8_t p[4];

	if (h->fd < 0 || pread(h->fd, p, sizeof(p), (off_t)(h->file_off + 8 * i)) != sizeof(p))
		return _hdr_value(h, i, 0);
	return h->base + (uint64_t)(int64_t)(int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 |
						      (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* The index of the last entry that starts at or below pc, 0 when none does. */
static size_t _hdr_last_at_or_below(const struct ut_hdr_table *h, uint64_t pc)
{
	size_t a = 0, b = h->n;

	while (a < b) {
		size_t mid = a + (b - a) / 2;

		if (_hdr_loc_read(h, mid) <= pc)
			a = mid + 1;
		else
			b = mid;
	}
	return a ? a - 1 : 0;
}

/*
 * Makes ut__hdr_next() start at the FDE that covers pc (the last to start
 * at or below it: FDEs do not nest), skipping those wholly below. A build
 * of one range then decodes only the FDEs in it.
 */
void ut__hdr_seek(struct ut_hdr_table *h, uint64_t pc)
{
	h->next = _hdr_last_at_or_below(h, pc);
}

/* Whether an FDE of the table overlaps [lo, hi). */
static bool _hdr_covers(struct ut_hdr_table *h, uint64_t lo, uint64_t hi, uint64_t limit)
{
	size_t a = 0, b = h->n;
	struct ut_span s;

	/* The last FDE to start below hi: FDEs do not nest. */
	while (a < b) {
		size_t mid = a + (b - a) / 2;

		if (_hdr_loc_read(h, mid) < hi)
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
int ut__add_plt_spans(Elf *elf, uint64_t max_vaddr, struct ut_spans *sp,
		      struct ut_hdr_table *hdr)
{
	static const char *const names[] = { ".plt", ".plt.sec", ".plt.got" };
	size_t nfde = sp->n;
	int err;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		GElf_Shdr shdr;
		uint64_t lo, hi;
		bool covered = false;

		if (!elf_sections__find(elf, names[i], &shdr) || shdr.sh_type != SHT_PROGBITS ||
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
		err = _spans_push(sp, lo, hi, i == 0 ? UT_SPAN_PLT_LAZY : UT_SPAN_PLT_NOLAZY, 0,
				  UT_MAX_SOURCES);
		if (err)
			return err;
	}
	return 0;
}
