// SPDX-License-Identifier: Apache-2.0
/*
 * .eh_frame/.debug_frame → unwind_row tables.
 *
 * libdw splits the sections into CIEs and FDEs (dwarf_next_cfi); the build
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
 * building the agent's main CPU cost and, for a large library, most of its
 * peak memory. The rules (unwind_cfa.c) are the ones the libdw
 * version accepted; tests/unit/test_unwind_table.c checks the tables
 * against readelf's interpretation.
 *
 * unwind_fde.c finds the FDEs (unwind_table_impl.h's spans), unwind_cfa.c
 * runs their CFA programs, and this file keeps the rows they emit and
 * drives the build.
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
#include "unwind/unwind_table_impl.h"

/* Drops the whole pages inside [p, p + len) from a read-only file mapping. */
void ut__drop_range(const void *p, size_t len)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = (uintptr_t)p, hi = lo + len;

	/* Whole pages inside the section only: its neighbours may be in use. */
	lo = (lo + page - 1) & ~(page - 1);
	hi &= ~(page - 1);
	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

void ut__drop_pages(const struct ut_source *srcs, size_t nsrc)
{
	for (size_t i = 0; i < nsrc; i++)
		if (srcs[i].mapped)
			ut__drop_range(srcs[i].data->d_buf, srcs[i].data->d_size);
}

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
static int _flush(struct ut_builder *b, size_t n)
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
int ut__emit(struct ut_builder *b, uint64_t pc, uint8_t type, int16_t cfa_offset,
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

/* A total order, so that the (unstable) heapsort gives one result. */
static bool _span_less(const struct ut_span *x, const struct ut_span *y)
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
DEFINE_HEAPSORT(_sort_spans, struct ut_span, _span_less)

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
static int _splice_go_switch(struct ut_builder *b, const struct go_switch *sw)
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
static int _build(int fd, int debug_fd, struct ut_builder *b, struct unwind_table_stats *st)
{
	struct go_switch go[GO_SWITCH_MAX];
	struct ut_source srcs[UT_MAX_SOURCES];
	struct ut_cie *cies = NULL;
	struct ut_spans sp = { 0 };
	struct ut_hdr_table hdr;
	struct ut_span next_hdr;
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

	ut__add_source(elf, true, ".eh_frame", srcs, &nsrc);
	main_eh = nsrc > 0;
	ut__add_source(elf, false, ".debug_frame", srcs, &nsrc);
	if (debug_fd >= 0) {
		/* A broken debug file costs its CFI, not the table. */
		if (_open_elf(debug_fd, &delf) == 0) {
			ut__add_source(delf, false, ".debug_frame (debug file)", srcs, &nsrc);
			if (!main_eh)
				ut__add_source(delf, true, ".eh_frame (debug file)", srcs, &nsrc);
		} else {
			pr_debug("unwind: debug file is not x86-64 ELF, ignored\n");
		}
	}

	/* The main file's .eh_frame (source 0) through its .eh_frame_hdr, where it has one. */
	use_hdr = main_eh && have_phdrs && ut__hdr_open(elf, fd, &srcs[0], !b->ranged, &hdr);
	for (size_t i = use_hdr; i < nsrc; i++) {
		err = ut__collect_fdes(&srcs[i], (uint8_t)i, limit, have_phdrs, &sp);
		if (err)
			goto out;
	}
	ut__drop_pages(srcs, nsrc);
	if (use_hdr && b->ranged)
		ut__hdr_seek(&hdr, b->range_lo);
	more_hdr = use_hdr && ut__hdr_next(&hdr, limit, &next_hdr);
	ngo = go_switch__find(elf, go);
	b->go = ngo > 0;
	/* A range past the last FDE of a file with CFI is a range without it, not an error. */
	if (sp.n == 0 && !more_hdr && !ngo && !(b->ranged && use_hdr && hdr.n)) {
		err = -ENOENT;
		goto out;
	}
	err = ut__add_plt_spans(elf, limit, &sp, use_hdr ? &hdr : NULL);
	if (err)
		goto out;
	if (sp.n)	/* a Go binary without CFI has no spans */
		_sort_spans(sp.v, sp.n);
	/*
	 * A range's build reads a few FDEs; the headers, section table and
	 * names read to find them are 64 KiB each of the file's pages by
	 * then (fault-around), most of the build's peak: dropped, they come
	 * back from the page cache if read again.
	 */
	if (b->ranged) {
		size_t size = 0;
		const char *map = elf_rawfile(elf, &size);

		if (map && size)
			ut__drop_range(map, size);
	}
	cies = ut__cie_cache_new();
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
		struct ut_span span;
		const struct ut_span *s = &span;
		uint64_t lo;

		if (more_hdr && (ilist == sp.n || _span_less(&next_hdr, &sp.v[ilist]))) {
			span = next_hdr;
			more_hdr = ut__hdr_next(&hdr, limit, &next_hdr);
		} else if (ilist < sp.n) {
			span = sp.v[ilist++];
		} else {
			break;
		}
		if (b->ranged && s->lo >= b->range_hi)
			break;	/* spans come by start address: the rest lie beyond too */
		if (b->ranged && s->hi <= b->range_lo) {
			covered = s->hi > covered ? s->hi : covered;
			continue;
		}
		lo = s->lo > covered ? s->lo : covered;

		if (lo >= s->hi)
			continue;
		if ((b->n || b->flushed) && lo > covered) {
			err = ut__emit(b, covered, UNWIND_NO_CFI, 0, 0);
			if (err)
				goto out;
		}
		err = ut__fill_span(b, s, lo, srcs, cies);
		if (err)
			goto out;
		covered = s->hi;
		st->fdes++;
		if (st->fdes % UT_DROP_SPANS == 0) {
			ut__drop_pages(srcs, nsrc);
			if (use_hdr && hdr.mapped)
				ut__drop_range(hdr.buf, hdr.size);
		}
	}
	st->hdr_fdes = use_hdr ? hdr.found : 0;
	if (use_hdr)
		pr_debug("unwind: .eh_frame: %zu FDEs (through .eh_frame_hdr; %zu entries skipped)\n",
			 hdr.found, hdr.skipped);
	err = ut__emit(b, covered, UNWIND_NO_CFI, 0, 0);
	if (err)
		goto out;
	/* Without CFI, b holds one UNWIND_NO_CFI row at 0: frame pointers around the Go rows. */
	for (size_t i = 0; i < ngo; i++) {
		if (go[i].pc + go[i].len > limit)
			continue;
		/* A range's rows do not hold the rule after a switch outside it. */
		if (b->ranged && (go[i].pc + go[i].len <= b->range_lo || go[i].pc >= b->range_hi))
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
	struct ut_builder b = { 0 };
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
	struct ut_builder b = { .fn = fn, .ctx = ctx };
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

/*
 * Cuts b's rows to [lo, hi): the rule in force at lo starts there (no CFI
 * when none is), and rows at or past hi go. Adjacent equal rules merge.
 */
static void _clip(struct ut_builder *b, uint64_t lo, uint64_t hi)
{
	struct unwind_row first = { .pc = (__u32)lo, .cfa_type = UNWIND_NO_CFI };
	size_t k = 0, out = 1;

	while (k < b->n && b->rows[k].pc <= lo)
		k++;
	if (k) {
		first = b->rows[k - 1];
		first.pc = (__u32)lo;
	}
	/* first becomes rows[0] over the rows below lo; with none there, room is made. */
	if (!k) {
		if (b->n == b->cap)
			return;	/* cannot happen: unwind_table__build_range() made room */
		memmove(b->rows + 1, b->rows, b->n * sizeof(*b->rows));
		b->n++;
		k = 1;
	}
	b->rows[0] = first;
	for (size_t i = k; i < b->n && b->rows[i].pc < hi; i++) {
		if (_same_rule(&b->rows[out - 1], &b->rows[i]))
			continue;
		b->rows[out++] = b->rows[i];
	}
	b->n = out;
}

int unwind_table__build_range(int fd, int debug_fd, uint64_t lo, uint64_t hi,
			      struct unwind_row **rows, size_t *nrows,
			      struct unwind_table_stats *stats)
{
	struct unwind_table_stats st = { 0 };
	struct ut_builder b = { .ranged = true, .range_lo = lo, .range_hi = hi };
	int err;

	*rows = NULL;
	*nrows = 0;
	if (stats)
		memset(stats, 0, sizeof(*stats));
	if (lo >= hi || hi > (uint64_t)UINT32_MAX + 1)
		return -EINVAL;
	err = _build(fd, debug_fd, &b, &st);
	if (!err && b.n == b.cap) {
		struct unwind_row *v = realloc(b.rows, (b.cap + 1) * sizeof(*v));

		if (!v) {
			err = -ENOMEM;
		} else {
			b.rows = v;
			b.cap++;
		}
	}
	if (err) {
		free(b.rows);
		return err;
	}
	_clip(&b, lo, hi);
	st.rows = b.n;
	_count_kinds(&st, b.rows, b.n);
	*rows = b.rows;
	*nrows = b.n;
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
