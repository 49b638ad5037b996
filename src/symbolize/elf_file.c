// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/lower_bound.h"
#include "common/safe_open.h"
#include "demangle.h"
#include "elf_file.h"
#include "gopclntab.h"

/*
 * Build ids are 20 bytes (SHA-1) from GNU ld and gold, 16 (MD5) or 8 (xxhash)
 * from some linkers, and can be longer with --build-id=0x<hex>. Anything past
 * 64 bytes is treated as no build id rather than truncated, because a
 * truncated id would name the wrong debug file.
 */
#define BUILD_ID_MAX 64

struct elf_segment {
	uint64_t offset, vaddr, filesz, memsz;
	uint32_t flags;
};

struct elf_file {
	int fd;
	int type;
	dev_t dev;
	ino_t ino;
	size_t nsegs;
	struct elf_segment *segs;	/* PT_LOAD only */
	char *debuglink;		/* NULL when absent */
	uint64_t cfi_bytes;		/* .eh_frame and .debug_frame, as the headers say */
	char *debug_root;
	char *path;			/* inside debug_root; NULL until set */
	char build_id[2 * BUILD_ID_MAX + 1];
};

/*
 * ELF_C_READ_MMAP lets libelf serve headers, notes and .gnu_debuglink from a
 * private file mapping, touching only those pages, where ELF_C_READ would
 * copy whole sections into malloc'd memory. Symbol tables do not go through
 * libelf at all (see "resolving" below).
 */
static int _elf_begin(int fd, Elf **out)
{
	Elf *e;

	*out = NULL;
	if (elf_version(EV_CURRENT) == EV_NONE) {
		pr_warn("elf: libelf is too old: %s\n", elf_errmsg(-1));
		return -ENOSYS;
	}
	e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!e) {
		pr_debug("elf: cannot read fd %d: %s\n", fd, elf_errmsg(-1));
		return -ENOEXEC;
	}
	if (elf_kind(e) != ELF_K_ELF) {
		elf_end(e);
		return -ENOEXEC;
	}
	*out = e;
	return 0;
}

static bool _note_build_id(Elf_Data *d, char *out)
{
	static const char hex[] = "0123456789abcdef";
	size_t off = 0, next, name_off, desc_off;
	GElf_Nhdr nh;

	if (!d)
		return false;
	while ((next = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
		const uint8_t *desc = (const uint8_t *)d->d_buf + desc_off;

		off = next;
		if (nh.n_type != NT_GNU_BUILD_ID ||
		    nh.n_namesz != sizeof(ELF_NOTE_GNU) ||
		    memcmp((const char *)d->d_buf + name_off, ELF_NOTE_GNU,
			   sizeof(ELF_NOTE_GNU)) != 0)
			continue;
		if (nh.n_descsz == 0 || nh.n_descsz > BUILD_ID_MAX)
			return false;
		for (size_t i = 0; i < nh.n_descsz; i++) {
			out[2 * i] = hex[desc[i] >> 4];
			out[2 * i + 1] = hex[desc[i] & 0xf];
		}
		out[2 * nh.n_descsz] = '\0';
		return true;
	}
	return false;
}

/*
 * Sections first: objcopy --only-keep-debug copies the program headers of the
 * original, whose PT_NOTE offsets need not match the debug file's layout, but
 * it keeps the note sections. PT_NOTE covers binaries without section headers.
 */
static void _read_build_id(Elf *e, char *out)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	GElf_Phdr ph;
	size_t nph;

	out[0] = '\0';
	while ((scn = elf_nextscn(e, scn))) {
		if (gelf_getshdr(scn, &sh) && sh.sh_type == SHT_NOTE &&
		    _note_build_id(elf_getdata(scn, NULL), out))
			return;
	}
	if (elf_getphdrnum(e, &nph))
		return;
	for (size_t i = 0; i < nph; i++) {
		if (!gelf_getphdr(e, i, &ph) || ph.p_type != PT_NOTE)
			continue;
		if (_note_build_id(elf_getdata_rawchunk(e, ph.p_offset, ph.p_filesz,
				   ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR), out))
			return;
	}
}

/*
 * .gnu_debuglink holds a NUL-terminated file name, padding and a CRC32 of the
 * debug file. Only the name is kept: it is a base name by definition, so one
 * containing '/' is refused rather than followed somewhere else.
 */
static char *_debuglink(Elf_Scn *scn)
{
	Elf_Data *d = elf_getdata(scn, NULL);
	size_t len;

	if (!d || !d->d_buf || !d->d_size)
		return NULL;
	len = strnlen(d->d_buf, d->d_size);
	if (len == 0 || len == d->d_size || memchr(d->d_buf, '/', len))
		return NULL;
	return strndup(d->d_buf, len);
}

/* The section headers' part: the debug link and the size of the CFI. */
static void _read_sections(Elf *e, struct elf_file *f)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;
	size_t shstrndx;

	if (elf_getshdrstrndx(e, &shstrndx))
		return;
	while ((scn = elf_nextscn(e, scn))) {
		const char *name;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(e, shstrndx, sh.sh_name);
		if (!name)
			continue;
		if (!strcmp(name, ".eh_frame") || !strcmp(name, ".debug_frame"))
			f->cfi_bytes += sh.sh_size;
		else if (!strcmp(name, ".gnu_debuglink") && !f->debuglink)
			f->debuglink = _debuglink(scn);
	}
}

static int _read_segments(Elf *e, struct elf_file *f)
{
	size_t nph, n = 0;
	GElf_Phdr ph;

	if (elf_getphdrnum(e, &nph) || nph == 0)
		return 0;
	f->segs = calloc(nph, sizeof(*f->segs));
	if (!f->segs)
		return -ENOMEM;
	for (size_t i = 0; i < nph; i++) {
		if (!gelf_getphdr(e, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		f->segs[n++] = (struct elf_segment){
			.offset = ph.p_offset, .vaddr = ph.p_vaddr,
			.filesz = ph.p_filesz, .memsz = ph.p_memsz,
			.flags = ph.p_flags,
		};
	}
	f->nsegs = n;
	return 0;
}

struct elf_file *elf_file__open(int fd, const char *debug_root)
{
	struct elf_file *f = NULL;
	Elf *e = NULL;
	GElf_Ehdr eh;
	struct stat st;
	int err;

	if (fd < 0) {
		err = -EBADF;
		goto out;
	}
	f = calloc(1, sizeof(*f));
	if (!f) {
		err = -ENOMEM;
		goto out;
	}
	f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (f->fd < 0 || fstat(f->fd, &st)) {
		err = -errno;
		goto out;
	}
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->debug_root = strdup(debug_root ? debug_root : "");
	if (!f->debug_root) {
		err = -ENOMEM;
		goto out;
	}
	err = _elf_begin(f->fd, &e);
	if (err)
		goto out;
	if (!gelf_getehdr(e, &eh)) {
		err = -ENOEXEC;
		goto out;
	}
	f->type = eh.e_type;
	err = _read_segments(e, f);
	if (err)
		goto out;
	_read_build_id(e, f->build_id);
	_read_sections(e, f);
out:
	elf_end(e);
	if (err) {
		if (err == -ENOEXEC)
			pr_debug("elf: fd %d is not an ELF file\n", fd);
		elf_file__close(f);
		errno = -err;
		return NULL;
	}
	return f;
}

void elf_file__close(struct elf_file *f)
{
	if (!f)
		return;
	if (f->fd >= 0)
		close(f->fd);
	free(f->segs);
	free(f->debuglink);
	free(f->debug_root);
	free(f->path);
	free(f);
}

int elf_file__set_path(struct elf_file *f, const char *path_in_root)
{
	char *p;

	if (!f || !path_in_root || path_in_root[0] != '/')
		return -EINVAL;
	p = strdup(path_in_root);
	if (!p)
		return -ENOMEM;
	free(f->path);
	f->path = p;
	return 0;
}

const char *elf_file__build_id(const struct elf_file *f)
{
	return f->build_id;
}

int elf_file__type(const struct elf_file *f)
{
	return f->type;
}

uint64_t elf_file__cfi_bytes(const struct elf_file *f)
{
	return f->cfi_bytes;
}

const char *elf_file__debuglink(const struct elf_file *f)
{
	return f->debuglink;
}

int elf_file__offset_to_vaddr(const struct elf_file *f, uint64_t file_offset,
			      uint64_t *vaddr)
{
	const struct elf_segment *hit = NULL;

	/*
	 * Segments can share a file page (the offset of one ends where the next
	 * begins), so an executable segment wins: samples land in code.
	 */
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct elf_segment *s = &f->segs[i];

		if (file_offset < s->offset || file_offset - s->offset >= s->filesz)
			continue;
		if (!hit || (!(hit->flags & PF_X) && (s->flags & PF_X)))
			hit = s;
	}
	if (!hit)
		return -ENOENT;
	*vaddr = file_offset - hit->offset + hit->vaddr;
	return 0;
}

int elf_file__load_bias(const struct elf_file *f, uint64_t map_start, uint64_t map_end,
			uint64_t map_offset, uint64_t *bias)
{
	const struct elf_segment *hit = NULL;
	uint64_t map_len = map_end - map_start;

	/*
	 * The mapping starts at a page boundary, which may lie in the segment
	 * before the code (lld leaves no gap between them): pick the segment
	 * whose bytes the mapping holds, the executable one first.
	 */
	for (size_t i = 0; i < f->nsegs; i++) {
		const struct elf_segment *s = &f->segs[i];

		if (s->offset + s->filesz <= map_offset || s->offset >= map_offset + map_len)
			continue;
		if (!hit || (!(hit->flags & PF_X) && (s->flags & PF_X)))
			hit = s;
	}
	if (!hit)
		return -ENOENT;
	*bias = map_start - map_offset + hit->offset - hit->vaddr;
	return 0;
}

/* ---- resolving ------------------------------------------------------------ */

/*
 * Symbol tables are read with pread() in small chunks, and names one at a
 * time when they are needed, instead of through libelf's section data: a
 * large library has tens of MB of .symtab and .strtab, and even a private file mapping of them would count against
 * RSS while it is touched. libelf is used only for headers.
 */
#define SYM_CHUNK 512			/* symbols per pread() */
#define NAME_MAX_LEN (64 * 1024)	/* longer names are cut there */

struct symsrc {
	int fd;
	Elf *elf;
	int cls;			/* ELFCLASS32 or ELFCLASS64 */
	uint64_t sym_off, sym_count, entsize;
	uint64_t str_off, str_size;
	void *raw, *conv;		/* one chunk, file and host layout */
};

struct namebuf {
	char *buf;
	size_t cap;
};

struct req {
	uint64_t addr;
	size_t index;
	/*
	 * elf_file__resolve_ranges(): [lo, hi) around addr holds no symbol's
	 * start and no symbol's extent, in every table scanned so far: an
	 * address there that none names names none in the whole range.
	 */
	uint64_t lo, hi;
};

struct cand {
	uint64_t start;
	uint64_t end;		/* start + size, or the section end if size is 0 */
	uint32_t st_name;	/* 0: no candidate (unnamed symbols are skipped) */
	uint8_t typed;		/* STT_FUNC or STT_GNU_IFUNC, not an untyped label */
	uint8_t bind;
	int16_t us;		/* leading underscores, -1 until a tie needs them */
};

/*
 * Finding, for every requested address, the nearest symbol at or below it
 * without sorting the symbol table: a symbol starting at v is a candidate for
 * every request from lower_bound(v) upwards, so each symbol only updates the
 * slot at lower_bound(v) (keeping the highest start), and a prefix maximum
 * over the slots afterwards gives each request its nearest symbol. Cost is
 * O(symbols * log n + n) time and O(n) memory. Sized and size-0 symbols are
 * tracked separately because a sized symbol containing the address beats a
 * size-0 one that starts closer (a label inside a function).
 */
struct search {
	struct req *reqs;	/* sorted by addr; unresolved ones after emit */
	size_t n;
	struct cand *sized, *unsized;
	struct namebuf nb;
	struct range_sink *ranges;	/* elf_file__resolve_ranges(): the cb's ctx */
	/*
	 * With ranges, per slot as the candidates: the lowest symbol start
	 * above the slot's address (kept at the slot just below the symbol),
	 * and the highest end of a symbol starting at or below it (kept at
	 * the symbol's own slot); _search_emit() turns them into req.lo/hi.
	 */
	uint64_t *next_start, *below_end;
};

/*
 * elf_file__resolve_ranges() runs the search with _as_range() as its
 * symbol_cb and this as the ctx; _search_emit() calls the range callback
 * itself, where it knows the symbol's extent.
 */
struct range_sink {
	symbol_range_cb cb;
	void *ctx;
	const uint64_t *vaddrs;
};

/* Names found elsewhere (gopclntab) or none: a point, no extent known. */
static void _as_range(void *ctx, size_t index, const char *name, uint64_t offset)
{
	struct range_sink *r = ctx;
	uint64_t start = r->vaddrs[index] - offset;

	r->cb(r->ctx, index, name, start, start);
}

static int _req_cmp(const void *a, const void *b)
{
	const struct req *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

static void _gaps_reset(struct search *s)
{
	for (size_t i = 0; i < s->n; i++) {
		s->next_start[i] = UINT64_MAX;
		s->below_end[i] = 0;
	}
}

static int _search_init(struct search *s, const uint64_t *vaddrs, size_t n)
{
	s->reqs = malloc(n * sizeof(*s->reqs));
	s->sized = calloc(n, sizeof(*s->sized));
	s->unsized = calloc(n, sizeof(*s->unsized));
	if (!s->reqs || !s->sized || !s->unsized)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		s->reqs[i] = (struct req){ .addr = vaddrs[i], .index = i, .hi = UINT64_MAX };
	qsort(s->reqs, n, sizeof(*s->reqs), _req_cmp);
	s->n = n;
	if (s->ranges) {
		s->next_start = malloc(n * sizeof(*s->next_start));
		s->below_end = malloc(n * sizeof(*s->below_end));
		if (!s->next_start || !s->below_end)
			return -ENOMEM;
		_gaps_reset(s);
	}
	return 0;
}

static void _search_free(struct search *s)
{
	free(s->reqs);
	free(s->sized);
	free(s->unsized);
	free(s->next_start);
	free(s->below_end);
	free(s->nb.buf);
}

static Elf_Scn *_find_symtab(Elf *e, uint32_t type)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr sh;

	while ((scn = elf_nextscn(e, scn))) {
		if (gelf_getshdr(scn, &sh) && sh.sh_type == type &&
		    sh.sh_entsize && sh.sh_size / sh.sh_entsize > 1)
			return scn;
	}
	return NULL;
}

/* Prepares reading the symbol table of the given type; -ENOENT if none. */
static int _symsrc_open(struct symsrc *src, int fd, Elf *e, uint32_t type)
{
	Elf_Scn *scn = _find_symtab(e, type), *strscn;
	GElf_Shdr sh, strsh;
	size_t want;

	memset(src, 0, sizeof(*src));
	if (!scn || !gelf_getshdr(scn, &sh) || (sh.sh_flags & SHF_COMPRESSED))
		return -ENOENT;
	src->cls = gelf_getclass(e);
	want = src->cls == ELFCLASS64 ? sizeof(Elf64_Sym) : sizeof(Elf32_Sym);
	strscn = elf_getscn(e, sh.sh_link);
	if (sh.sh_entsize != want || !strscn || !gelf_getshdr(strscn, &strsh) ||
	    strsh.sh_type != SHT_STRTAB || (strsh.sh_flags & SHF_COMPRESSED))
		return -ENOENT;
	src->fd = fd;
	src->elf = e;
	src->sym_off = sh.sh_offset;
	src->sym_count = sh.sh_size / sh.sh_entsize;
	src->entsize = sh.sh_entsize;
	src->str_off = strsh.sh_offset;
	src->str_size = strsh.sh_size;
	src->raw = malloc(SYM_CHUNK * want);
	src->conv = malloc(SYM_CHUNK * want);
	if (!src->raw || !src->conv) {
		free(src->raw);
		free(src->conv);
		src->raw = src->conv = NULL;
		return -ENOMEM;
	}
	return 0;
}

static void _symsrc_close(struct symsrc *src)
{
	free(src->raw);
	free(src->conv);
	src->raw = src->conv = NULL;
}

/*
 * Reads the NUL-terminated name at idx of the string table into nb. The
 * returned pointer is valid until the next read into nb. NULL when the index
 * is out of range or the file cannot be read.
 */
/*
 * Cuts a symbol version ("clock_gettime@@GLIBC_2.17" in a debug file's
 * .symtab): users know the function by its plain name. buf is the
 * writable buffer name points into.
 */
static void _strip_version(char *buf, const char *name)
{
	char *at;

	if (!name || name != buf)
		return;
	at = strchr(buf, '@');
	if (at && at != buf)
		*at = '\0';
}

static const char *_read_name(const struct symsrc *src, uint32_t idx, struct namebuf *nb)
{
	size_t len = 0;

	if (idx >= src->str_size)
		return NULL;
	for (;;) {
		uint64_t left = src->str_size - idx - len;
		size_t want;
		ssize_t got;
		char *z;

		if (nb->cap - len < 128) {
			size_t cap = nb->cap ? nb->cap * 2 : 256;
			char *p = realloc(nb->buf, cap);

			if (!p)
				return NULL;
			nb->buf = p;
			nb->cap = cap;
		}
		if (!left)
			return NULL;	/* unterminated table */
		want = nb->cap - len - 1 < left ? nb->cap - len - 1 : left;
		got = pread(src->fd, nb->buf + len, want, (off_t)(src->str_off + idx + len));
		if (got <= 0)
			return NULL;
		z = memchr(nb->buf + len, '\0', (size_t)got);
		len += (size_t)got;
		if (z)
			return nb->buf;
		if (len >= NAME_MAX_LEN) {
			nb->buf[len] = '\0';
			return nb->buf;
		}
	}
}

/*
 * glibc marks its internal alias of every public function with "__GI_"; such
 * a name is never the one to show, however few underscores follow it.
 */
static unsigned int _underscores(const char *name)
{
	unsigned int us = 0;

	if (!name || !strncmp(name, "__GI_", 5))
		return INT16_MAX;
	while (name[us] == '_' && us < INT16_MAX)
		us++;
	return us;
}

static unsigned int _bind_rank(unsigned int bind)
{
	return bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
}

/*
 * Alias preference at one address: typed functions over untyped labels, then
 * the fewest leading underscores (glibc's "malloc" over "__libc_malloc"),
 * then global over weak over local binding. Names are
 * read only here, on a tie, so most symbols never have theirs read.
 */
static bool _better(const struct symsrc *src, struct namebuf *nb, struct cand *cur,
		    struct cand *new)
{
	if (new->typed != cur->typed)
		return new->typed;
	if (cur->us < 0)
		cur->us = (int16_t)_underscores(_read_name(src, cur->st_name, nb));
	if (new->us < 0)
		new->us = (int16_t)_underscores(_read_name(src, new->st_name, nb));
	if (new->us != cur->us)
		return new->us < cur->us;
	return _bind_rank(new->bind) < _bind_rank(cur->bind);
}

static bool _in_exec_section(Elf *e, size_t shndx)
{
	Elf_Scn *scn;
	GElf_Shdr sh;

	if (shndx == SHN_UNDEF || shndx >= SHN_LORESERVE)
		return false;
	scn = elf_getscn(e, shndx);
	return scn && gelf_getshdr(scn, &sh) && (sh.sh_flags & SHF_EXECINSTR);
}

/*
 * A size-0 symbol reaches up to the next symbol, but not out of its section:
 * crti.o's _fini has size 0 and is the last symbol of the text segment.
 */
static uint64_t _section_end(Elf *e, size_t shndx, uint64_t start)
{
	Elf_Scn *scn;
	GElf_Shdr sh;

	if (shndx == SHN_UNDEF || shndx >= SHN_LORESERVE)
		return UINT64_MAX;
	scn = elf_getscn(e, shndx);
	if (!scn || !gelf_getshdr(scn, &sh) || sh.sh_addr + sh.sh_size < start)
		return UINT64_MAX;
	return sh.sh_addr + sh.sh_size;
}

/* Symbol i of the current chunk, in host layout, as GElf_Sym. */
static void _chunk_sym(const struct symsrc *src, size_t i, GElf_Sym *sym)
{
	if (src->cls == ELFCLASS64) {
		*sym = ((const Elf64_Sym *)src->conv)[i];
	} else {
		const Elf32_Sym *s = &((const Elf32_Sym *)src->conv)[i];

		*sym = (GElf_Sym){
			.st_name = s->st_name, .st_info = s->st_info,
			.st_other = s->st_other, .st_shndx = s->st_shndx,
			.st_value = s->st_value, .st_size = s->st_size,
		};
	}
}

/*
 * For the gaps, every symbol that could name code counts, named or not: it
 * starts above the requests before slot, and covers up to its end (an
 * unsized one: its section's end, as far as it could name) from slot on.
 */
static void _note_extent(struct search *s, size_t slot, const struct symsrc *src,
			 const GElf_Sym *sym)
{
	uint64_t start = sym->st_value, end;

	if (slot > 0 && start < s->next_start[slot - 1])
		s->next_start[slot - 1] = start;
	if (slot == s->n)
		return;
	end = !sym->st_size ? _section_end(src->elf, sym->st_shndx, start) :
	      start + sym->st_size < start ? UINT64_MAX : start + sym->st_size;
	if (end <= start)
		end = start + 1;
	if (end > s->below_end[slot])
		s->below_end[slot] = end;
}

static void _consider(struct search *s, const struct symsrc *src, const GElf_Sym *sym)
{
	unsigned int type = GELF_ST_TYPE(sym->st_info);
	struct cand new, *c;
	size_t slot;
	bool typed;

	if (sym->st_shndx == SHN_UNDEF || sym->st_value == 0 || sym->st_name == 0)
		return;
	typed = type == STT_FUNC || type == STT_GNU_IFUNC;
	if (!typed && type != STT_NOTYPE)
		return;
	slot = lower_bound__u64(s->reqs, s->n, sizeof(*s->reqs), offsetof(struct req, addr),
				sym->st_value);
	if (s->next_start)
		_note_extent(s, slot, src, sym);
	if (slot == s->n)
		return;
	c = sym->st_size ? &s->sized[slot] : &s->unsized[slot];
	/* Cheap rejection first: most symbols lose here. */
	if (c->st_name && c->start > sym->st_value)
		return;
	if (!typed) {
		const char *name;

		if (!_in_exec_section(src->elf, sym->st_shndx))
			return;
		/* "$x"/"$d" are ARM mapping symbols, not functions. */
		name = _read_name(src, sym->st_name, &s->nb);
		if (!name || !name[0] || name[0] == '$')
			return;
	}
	new = (struct cand){
		.start = sym->st_value,
		.end = !sym->st_size ? _section_end(src->elf, sym->st_shndx, sym->st_value) :
		       sym->st_value + sym->st_size < sym->st_value ? UINT64_MAX :
		       sym->st_value + sym->st_size,
		.st_name = sym->st_name,
		.typed = typed,
		.bind = GELF_ST_BIND(sym->st_info),
		.us = -1,
	};
	if (c->st_name && c->start == new.start && !_better(src, &s->nb, c, &new))
		return;
	*c = new;
}

static int _search_scan(struct search *s, const struct symsrc *src)
{
	const size_t esz = src->entsize;

	for (uint64_t first = 0; first < src->sym_count; first += SYM_CHUNK) {
		size_t cnt = src->sym_count - first < SYM_CHUNK ? src->sym_count - first : SYM_CHUNK;
		Elf_Data in = { .d_buf = src->raw, .d_type = ELF_T_SYM,
				.d_size = cnt * esz, .d_version = EV_CURRENT };
		Elf_Data out = { .d_buf = src->conv, .d_type = ELF_T_SYM,
				 .d_size = cnt * esz, .d_version = EV_CURRENT };
		ssize_t got;

		got = pread(src->fd, src->raw, cnt * esz, (off_t)(src->sym_off + first * esz));
		if (got < 0)
			return -errno;
		if ((size_t)got != cnt * esz)
			return -EIO;
		if (!gelf_xlatetom(src->elf, &out, &in, elf_getident(src->elf, NULL)[EI_DATA]))
			return -EIO;
		/* Symbol 0 is the reserved null symbol. */
		for (size_t i = first ? 0 : 1; i < cnt; i++) {
			GElf_Sym sym;

			_chunk_sym(src, i, &sym);
			_consider(s, src, &sym);
		}
	}
	return 0;
}

/* Narrows every request's gap by what this scan saw (prefix max, suffix min over slots). */
static void _search_gaps(struct search *s)
{
	uint64_t below = 0, next = UINT64_MAX;

	for (size_t j = 0; j < s->n; j++) {
		if (s->below_end[j] > below)
			below = s->below_end[j];
		if (below > s->reqs[j].lo)
			s->reqs[j].lo = below;
	}
	for (size_t j = s->n; j-- > 0;) {
		if (s->next_start[j] < next)
			next = s->next_start[j];
		if (next < s->reqs[j].hi)
			s->reqs[j].hi = next;
	}
	_gaps_reset(s);
}

/*
 * Answers every request the last scan resolved, then compacts the rest to the
 * front of reqs (still sorted) and clears the slots for another scan. Names
 * are read and demangled once per run of requests that share a symbol.
 */
static void _search_emit(struct search *s, const struct symsrc *src, symbol_cb cb, void *ctx)
{
	struct cand best_s = { 0 }, best_u = { 0 };
	const char *name = NULL;
	uint32_t last = 0;
	char *dem = NULL;
	size_t left = 0;

	if (s->next_start)
		_search_gaps(s);

	for (size_t j = 0; j < s->n; j++) {
		const struct req r = s->reqs[j];
		const struct cand *hit = NULL;

		if (s->sized[j].st_name && (!best_s.st_name || s->sized[j].start > best_s.start))
			best_s = s->sized[j];
		if (s->unsized[j].st_name && (!best_u.st_name || s->unsized[j].start > best_u.start))
			best_u = s->unsized[j];

		if (best_s.st_name && r.addr < best_s.end)
			hit = &best_s;
		else if (best_u.st_name && r.addr < best_u.end &&
			 (!best_s.st_name || best_u.start > best_s.start))
			hit = &best_u;
		if (hit && hit->st_name != last) {
			free(dem);
			name = _read_name(src, hit->st_name, &s->nb);
			_strip_version(s->nb.buf, name);
			dem = demangle(name);
			last = hit->st_name;
		}
		/* A hostile or broken table can name a symbol "": no name at all. */
		if (!hit || !name || !name[0]) {
			s->reqs[left++] = r;
			continue;
		}
		if (s->ranges)	/* an unsized symbol's end is its section's: no extent */
			s->ranges->cb(s->ranges->ctx, r.index, dem ? dem : name, hit->start,
				      hit == &best_s ? hit->end : hit->start);
		else
			cb(ctx, r.index, dem ? dem : name, r.addr - hit->start);
	}
	free(dem);
	s->n = left;
	memset(s->sized, 0, left * sizeof(*s->sized));
	memset(s->unsized, 0, left * sizeof(*s->unsized));
}

/* Scans one symbol table and answers what it resolves. */
static int _resolve_from(struct search *s, int fd, Elf *e, uint32_t type,
			 symbol_cb cb, void *ctx)
{
	struct symsrc src;
	int err;

	err = _symsrc_open(&src, fd, e, type);
	if (err)
		return err;
	err = _search_scan(s, &src);
	if (!err)
		_search_emit(s, &src, cb, ctx);
	_symsrc_close(&src);
	return err;
}

/*
 * A debug file must hold a .symtab, must not be the binary itself (a
 * debuglink candidate next to the binary can be), and must carry the
 * binary's build id when both have one.
 */
static int _open_debug(const struct elf_file *f, const char *path, int *fdp, Elf **ep)
{
	const struct safe_open_opts caps = { .max_size = ELF_FILE_MAX_BYTES };
	char id[sizeof(f->build_id)];
	struct stat st;
	Elf *e = NULL;
	int fd, err;

	/* The path is below the process's root and names its files: never a link. */
	fd = safe_open__in_root(f->debug_root, path, &caps, &st);
	if (fd < 0)
		return fd;
	if (st.st_dev == f->dev && st.st_ino == f->ino) {
		err = -ENOENT;
		goto out;
	}
	err = _elf_begin(fd, &e);
	if (err)
		goto out;
	if (f->build_id[0]) {
		_read_build_id(e, id);
		if (id[0] && strcmp(id, f->build_id) != 0) {
			pr_debug("elf: %s has build id %s, want %s\n", path, id, f->build_id);
			err = -ESTALE;
			goto out;
		}
	}
	if (!_find_symtab(e, SHT_SYMTAB)) {
		err = -ENOENT;
		goto out;
	}
	pr_debug("elf: symbols from %s\n", path);
out:
	if (err) {
		elf_end(e);
		close(fd);
		return err;
	}
	*fdp = fd;
	*ep = e;
	return 0;
}

/*
 * Tries the build-id path, then the debuglink paths gdb uses, in gdb's
 * order. The paths are inside debug_root.
 */
static int _find_debug_file(const struct elf_file *f, int *fdp, Elf **ep)
{
	const char *name = f->debuglink;
	char path[PATH_MAX], dir[PATH_MAX];
	const char *slash;
	int len;

	if (strlen(f->build_id) > 2) {
		len = snprintf(path, sizeof(path), "/usr/lib/debug/.build-id/%.2s/%s.debug",
			       f->build_id, f->build_id + 2);
		if (len > 0 && (size_t)len < sizeof(path) && !_open_debug(f, path, fdp, ep))
			return 0;
	}
	if (!name || !f->path)
		return -ENOENT;
	slash = strrchr(f->path, '/');
	len = snprintf(dir, sizeof(dir), "%.*s", (int)(slash - f->path), f->path);
	if (len < 0 || (size_t)len >= sizeof(dir))
		return -ENAMETOOLONG;

	len = snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (len > 0 && (size_t)len < sizeof(path) && !_open_debug(f, path, fdp, ep))
		return 0;
	len = snprintf(path, sizeof(path), "%s/.debug/%s", dir, name);
	if (len > 0 && (size_t)len < sizeof(path) && !_open_debug(f, path, fdp, ep))
		return 0;
	len = snprintf(path, sizeof(path), "/usr/lib/debug%s/%s", dir, name);
	if (len > 0 && (size_t)len < sizeof(path) && !_open_debug(f, path, fdp, ep))
		return 0;
	return -ENOENT;
}

/*
 * Answers what the symbol tables left from a Go binary's .gopclntab: all
 * of a stripped Go binary, nothing of any other file.
 */
static int _resolve_gopclntab(struct search *s, int fd, Elf *e, symbol_cb cb, void *ctx,
			      bool *found)
{
	struct gopclntab *t;
	size_t left = 0;
	int err;

	err = gopclntab__open(fd, e, &t);
	*found = err != -ENOENT;
	if (err)
		return err == -ENOENT ? 0 : err;
	for (size_t j = 0; j < s->n; j++) {
		const char *name;
		uint64_t off;

		if (gopclntab__lookup(t, s->reqs[j].addr, &name, &off)) {
			s->reqs[left++] = s->reqs[j];
			continue;
		}
		cb(ctx, s->reqs[j].index, name, off);
	}
	s->n = left;
	gopclntab__close(t);
	return 0;
}

static int _resolve(struct elf_file *f, const uint64_t *vaddrs, size_t n, symbol_cb cb, void *ctx,
		    struct range_sink *ranges)
{
	struct search s = { .ranges = ranges };
	Elf *main_elf = NULL, *dbg_elf = NULL;
	bool dynsym_done = false, ready = false, gaps = true;
	int dbg_fd = -1, err;

	if (!f || !cb || (n && !vaddrs))
		return -EINVAL;
	if (!n)
		return 0;

	err = _search_init(&s, vaddrs, n);
	if (err)
		goto out;
	ready = true;
	err = _elf_begin(f->fd, &main_elf);
	if (err)
		goto out;

	if (!_find_debug_file(f, &dbg_fd, &dbg_elf)) {
		err = _resolve_from(&s, dbg_fd, dbg_elf, SHT_SYMTAB, cb, ctx);
	} else {
		err = _resolve_from(&s, f->fd, main_elf, SHT_SYMTAB, cb, ctx);
		if (err == -ENOENT) {
			err = _resolve_from(&s, f->fd, main_elf, SHT_DYNSYM, cb, ctx);
			dynsym_done = true;
		}
	}
	/* No symbol table at all (a fully stripped binary) is no error. */
	if (err == -ENOENT)
		err = 0;
	if (err)
		goto out;

	/*
	 * A debug file or .symtab can still lack a symbol the dynamic table has,
	 * e.g. when a debug package is older than the library it describes.
	 */
	if (s.n && !dynsym_done) {
		err = _resolve_from(&s, f->fd, main_elf, SHT_DYNSYM, cb, ctx);
		if (err == -ENOENT)
			err = 0;
		if (err)
			goto out;
	}
	if (s.n) {
		bool go;

		err = _resolve_gopclntab(&s, f->fd, main_elf, cb, ctx, &go);
		gaps = !go;	/* Go functions have no symbols to bound a gap by */
	}
out:
	if (ready) {
		for (size_t j = 0; j < s.n; j++) {
			const struct req *r = &s.reqs[j];

			if (ranges && gaps && !err && r->lo <= r->addr && r->addr < r->hi)
				ranges->cb(ranges->ctx, r->index, NULL, r->lo, r->hi);
			else
				cb(ctx, r->index, NULL, 0);
		}
	} else {
		for (size_t i = 0; i < n; i++)
			cb(ctx, i, NULL, 0);
	}
	_search_free(&s);
	elf_end(dbg_elf);
	if (dbg_fd >= 0)
		close(dbg_fd);
	elf_end(main_elf);
	return err;
}

int elf_file__resolve(struct elf_file *f, const uint64_t *vaddrs, size_t n,
		      symbol_cb cb, void *ctx)
{
	return _resolve(f, vaddrs, n, cb, ctx, NULL);
}

int elf_file__resolve_ranges(struct elf_file *f, const uint64_t *vaddrs, size_t n,
			     symbol_range_cb cb, void *ctx)
{
	struct range_sink r = { cb, ctx, vaddrs };

	if (!cb)
		return -EINVAL;
	return _resolve(f, vaddrs, n, _as_range, &r, &r);
}
