/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_UNWIND_UNWIND_TABLE_IMPL_H
#define FW_UNWIND_UNWIND_TABLE_IMPL_H

/*
 * Private to the table builder: unwind_table.c (rows, the build and the
 * public calls), unwind_fde.c (where the FDEs are) and unwind_cfa.c
 * (running their CFA programs). unwind_table.c says how they fit.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <elfutils/libdw.h>
#include <libelf.h>

#include "unwind/unwind_table.h"

/*
 * CFI sources in priority order: where two of them describe the same code,
 * the earlier one wins. At most: the file's .eh_frame and .debug_frame, the
 * debug file's .debug_frame and .eh_frame.
 */
#define UT_MAX_SOURCES 4

struct ut_source {
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
 * library's .eh_frame (megabytes) at once in the agent's RSS.
 * The pages are dropped from the mapping after the FDE scan and then every
 * UT_DROP_SPANS spans (a file mapping's pages come back from the page cache
 * when read again: CIEs, mostly), so a build holds a window of them.
 */
#define UT_DROP_SPANS 128

enum ut_span_kind {
	UT_SPAN_FDE,
	UT_SPAN_PLT_LAZY,	/* .plt without an FDE */
	UT_SPAN_PLT_NOLAZY,	/* .plt.sec or .plt.got without an FDE */
};

/* One FDE (or synthesized PLT range). Every address fits u32 by then. */
struct ut_span {
	uint32_t lo, hi;
	uint32_t fde_off;	/* UT_SPAN_FDE: the FDE's offset in its section */
	uint8_t kind;
	uint8_t src;		/* index into the sources: the priority */
};

struct ut_spans {
	struct ut_span *v;
	size_t n, cap;
};

struct ut_builder {
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
	 * is full, all but the last two, which ut__emit() may still replace or
	 * compare with.
	 */
	unwind_rows_fn fn;
	void *ctx;
	size_t flushed;
	struct unwind_table_stats *kinds;	/* counts per row type, as rows leave */
	/* The _CFI_CHUNK the last FDE read lay in, and its source. */
	uintptr_t chunk;
	const struct ut_source *chunk_src;
	/*
	 * unwind_table__build_range(): only the spans that overlap [lo, hi)
	 * are run; the rows are cut to the range afterwards.
	 */
	bool ranged;
	uint64_t range_lo, range_hi;
};

/* The FDE address encoding of the CIE last asked about. */
struct ut_fde_enc {
	Dwarf_Off cie_off;
	bool ok;
	uint8_t enc;
};

/*
 * .eh_frame_hdr's search table: one (initial location, FDE address) pair
 * for every FDE of .eh_frame, sorted by location, which the linker writes
 * for the runtime's unwinder. Where a file has a sound one, the build walks
 * it in place instead of listing .eh_frame's FDEs itself: the list took 16
 * bytes an FDE at the peak of the build, and its scan read all of .eh_frame
 * once more.
 */
struct ut_hdr_table {
	const struct ut_source *eh;	/* the file's .eh_frame, which the table indexes */
	const uint8_t *v;		/* n entries of two datarel sdata4 values */
	size_t n, next;
	uint64_t base;			/* .eh_frame_hdr's address: the values' base */
	const void *buf;		/* the section, for ut__drop_range() */
	size_t size;
	bool mapped;
	struct ut_fde_enc enc;
	size_t found, skipped;
	uint64_t last_loc;		/* of the entry ut__hdr_next() read last */
	int fd;				/* the file, for ut__hdr_seek(); -1: read the map */
	uint64_t file_off;		/* of entry 0 in the file */
};

/* unwind_table.c */
void ut__drop_range(const void *p, size_t len);
void ut__drop_pages(const struct ut_source *srcs, size_t nsrc);
int ut__emit(struct ut_builder *b, uint64_t pc, uint8_t type, int16_t cfa_offset,
	     uint8_t rbp_slot);

/* unwind_fde.c */
bool ut__read_value(const uint8_t **pp, const uint8_t *end, uint8_t format, uint64_t *val);
bool ut__read_address(const struct ut_source *src, const uint8_t **pp, const uint8_t *end,
		      uint8_t enc, uint64_t *val);
bool ut__cie_fde_encoding(const struct ut_source *src, Dwarf_Off cie_off, uint8_t *enc);
void ut__add_source(Elf *elf, bool eh_frame, const char *what, struct ut_source *srcs,
		    size_t *nsrc);
int ut__collect_fdes(const struct ut_source *src, uint8_t idx, uint64_t max_vaddr,
		     bool have_phdrs, struct ut_spans *sp);
bool ut__hdr_open(Elf *elf, int fd, const struct ut_source *eh, bool check_order,
		  struct ut_hdr_table *h);
bool ut__hdr_next(struct ut_hdr_table *h, uint64_t limit, struct ut_span *out);
void ut__hdr_seek(struct ut_hdr_table *h, uint64_t pc);
int ut__add_plt_spans(Elf *elf, uint64_t max_vaddr, struct ut_spans *sp,
		      struct ut_hdr_table *hdr);

/* unwind_cfa.c */
struct ut_cie;
/* The CIE cache of one build (calloc'd, free() it), NULL without memory. */
struct ut_cie *ut__cie_cache_new(void);
int ut__fill_span(struct ut_builder *b, const struct ut_span *span, uint64_t lo,
		  const struct ut_source *srcs, struct ut_cie *cies);

#endif
