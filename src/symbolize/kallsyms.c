// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <zstd.h>

#include "common/heapsort.h"
#include "common/hex.h"
#include "common/log.h"
#include "common/lower_bound.h"
#include "demangle.h"
#include "kallsyms.h"

enum kind {
	KIND_NONE = 0,
	KIND_END,	/* a data symbol or _etext: text stops here */
	KIND_TEXT,
};

struct kreq {
	uint64_t addr;
	size_t index;
	uint64_t start;		/* nearest text symbol, valid when found */
	bool found;
};

/* Pass-1 slot, see the prefix-maximum note at _pass1(). */
struct kslot {
	uint64_t start;
	enum kind kind;
};

/* One symbol whose name pass 2 fetches. */
struct kname {
	uint64_t start;
	char *name;		/* owned; final form after _finish_names() */
	unsigned int rank;
};

struct kline {
	uint64_t addr;
	char type;
	const char *name, *mod;
	int name_len, mod_len;	/* mod_len 0: core kernel */
};

/*
 * /proc/kallsyms reports a 1 KiB block size, so stdio would read its
 * megabytes in thousands of read()s a pass; 64 KiB reads cut the syscalls 64-fold (record -a
 * spent most of its steady-state CPU in those reads). glibc ignores the
 * size of a buffer it is not given: *buf is ours, freed by _close_kallsyms().
 */
#define KALLSYMS_READ (64u << 10)

static FILE *_open_kallsyms(const char *path, char **buf)
{
	FILE *fp = fopen(path, "re");

	*buf = NULL;
	if (fp && (*buf = malloc(KALLSYMS_READ)))
		setvbuf(fp, *buf, _IOFBF, KALLSYMS_READ);
	return fp;
}

static void _close_kallsyms(FILE *fp, char *buf)
{
	fclose(fp);
	free(buf);
}

static bool _warned_zero;

/* "ADDR TYPE NAME" or "ADDR TYPE NAME\t[MODULE]", newline optional. */
static bool _parse_line(const char *line, struct kline *k)
{
	const char *p = hex__parse_u64(line, &k->addr), *q;

	if (!p || p[0] != ' ' || !p[1] || p[2] != ' ')
		return false;
	k->type = p[1];
	k->name = p + 3;
	k->name_len = (int)strcspn(k->name, " \t\r\n");
	if (!k->name_len)
		return false;
	k->mod = NULL;
	k->mod_len = 0;
	p = k->name + k->name_len;
	p += strspn(p, " \t");
	if (*p == '[' && (q = strchr(p, ']')) && q > p + 1) {
		k->mod = p + 1;
		k->mod_len = (int)(q - p - 1);
	}
	return true;
}

static bool _is_text(char t)
{
	return t == 't' || t == 'T' || t == 'w' || t == 'W';
}

static bool _is_data(char t)
{
	return t && strchr("bBdDrRgGsSvV", t);
}

static bool _is_text_end(const struct kline *k)
{
	return (k->name_len == 6 && !memcmp(k->name, "_etext", 6)) ||
	       (k->name_len == 10 && !memcmp(k->name, "_einittext", 10));
}

static int _kreq_cmp(const void *a, const void *b)
{
	const struct kreq *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static struct kname *_find_name(struct kname *names, size_t n, uint64_t start)
{
	size_t i = lower_bound__u64(names, n, sizeof(*names), offsetof(struct kname, start), start);

	return i < n && names[i].start == start ? &names[i] : NULL;
}

/*
 * Pass 1. A symbol at address v can be the nearest one below every request
 * from lower_bound(v) upwards, so it only updates that one slot (keeping the
 * highest start, text before an end marker at the same address); a prefix
 * maximum over the slots then gives every request its nearest symbol without
 * sorting or keeping the table. Returns the number of text lines and sets
 * *nonzero when any of them has a real address.
 */
static size_t _pass1(FILE *fp, struct kreq *reqs, size_t n, struct kslot *slots,
		     bool *nonzero)
{
	size_t cap = 0, ntext = 0;
	char *line = NULL;
	struct kline k;

	*nonzero = false;
	while (getline(&line, &cap, fp) > 0) {
		enum kind kind;
		size_t i;

		if (!_parse_line(line, &k))
			continue;
		if (_is_text(k.type)) {
			ntext++;
			*nonzero |= k.addr != 0;
			kind = _is_text_end(&k) ? KIND_END : KIND_TEXT;
		} else if (_is_data(k.type)) {
			kind = KIND_END;
		} else {
			continue;
		}
		if (!k.addr)
			continue;
		i = lower_bound__u64(reqs, n, sizeof(*reqs), offsetof(struct kreq, addr), k.addr);
		if (i == n)
			continue;
		if (k.addr > slots[i].start ||
		    (k.addr == slots[i].start && kind > slots[i].kind)) {
			slots[i].start = k.addr;
			slots[i].kind = kind;
		}
	}
	free(line);
	return ntext;
}

/* Fewest leading underscores first ("abort", not "__pfx_abort"), then global. */
static unsigned int _rank(const struct kline *k)
{
	unsigned int us = 0;

	while (us < (unsigned int)k->name_len && k->name[us] == '_')
		us++;
	return us << 1 | (k->type == 't' || k->type == 'w');
}

/* Pass 2: copies the best name for every start in names (sorted, unique). */
static int _pass2(FILE *fp, struct kname *names, size_t nnames)
{
	size_t cap = 0;
	char *line = NULL;
	struct kline k;
	int err = 0;

	while (getline(&line, &cap, fp) > 0) {
		struct kname *kn;
		unsigned int rank;
		char *s;

		if (!_parse_line(line, &k) || !_is_text(k.type) || _is_text_end(&k))
			continue;
		kn = _find_name(names, nnames, k.addr);
		if (!kn)
			continue;
		rank = _rank(&k);
		if (kn->name && kn->rank <= rank)
			continue;
		/* Name and module side by side, "name\0mod\0", until _finish_names(). */
		s = malloc((size_t)k.name_len + (size_t)k.mod_len + 2);
		if (!s) {
			err = -ENOMEM;
			break;
		}
		memcpy(s, k.name, (size_t)k.name_len);
		s[k.name_len] = '\0';
		memcpy(s + k.name_len + 1, k.mod ? k.mod : "", (size_t)k.mod_len);
		s[k.name_len + 1 + k.mod_len] = '\0';
		free(kn->name);
		kn->name = s;
		kn->rank = rank;
	}
	free(line);
	return err;
}

/* Turns "name\0mod\0" into the displayed "demangled [mod]". */
static int _finish_names(struct kname *names, size_t nnames)
{
	for (size_t i = 0; i < nnames; i++) {
		char *raw = names[i].name, *dem, *out;
		const char *mod;

		if (!raw)
			continue;
		mod = raw + strlen(raw) + 1;
		dem = demangle(raw);
		if (!dem && !*mod)
			continue;
		if (*mod) {
			if (asprintf(&out, "%s [%s]", dem ? dem : raw, mod) < 0)
				out = NULL;
			free(dem);
			if (!out)
				return -ENOMEM;
		} else {
			out = dem;
		}
		free(raw);
		names[i].name = out;
	}
	return 0;
}

int kallsyms__resolve(const char *path, const uint64_t *addrs, size_t n,
		      symbol_cb cb, void *ctx)
{
	struct kreq *reqs = NULL;
	struct kslot *slots = NULL;
	struct kname *names = NULL;
	size_t nnames = 0;
	struct kslot best = { 0 };
	FILE *fp = NULL;
	char *fp_buf = NULL;
	bool nonzero;
	int err = 0;

	if (!path || !cb || (n && !addrs))
		return -EINVAL;
	if (!n)
		return 0;

	reqs = malloc(n * sizeof(*reqs));
	slots = calloc(n, sizeof(*slots));
	if (!reqs || !slots) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		reqs[i] = (struct kreq){ .addr = addrs[i], .index = i };
	qsort(reqs, n, sizeof(*reqs), _kreq_cmp);

	fp = _open_kallsyms(path, &fp_buf);
	if (!fp) {
		err = -errno;
		pr_debug("kallsyms: cannot open %s: %s\n", path, strerror(-err));
		goto out;
	}
	if (_pass1(fp, reqs, n, slots, &nonzero) && !nonzero) {
		if (!__atomic_exchange_n(&_warned_zero, true, __ATOMIC_RELAXED))
			pr_warn("kallsyms: %s lists only zero addresses "
				"(kernel.kptr_restrict set, or no CAP_SYSLOG); "
				"kernel frames stay unresolved\n", path);
		err = -EPERM;
		goto out;
	}
	if (ferror(fp)) {
		err = -EIO;
		goto out;
	}

	names = calloc(n, sizeof(*names));
	if (!names) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t j = 0; j < n; j++) {
		struct kreq *r = &reqs[j];

		if (slots[j].kind && (slots[j].start > best.start ||
				      (slots[j].start == best.start && slots[j].kind > best.kind)))
			best = slots[j];
		if (best.kind != KIND_TEXT || r->addr - best.start >= KALLSYMS_MAX_OFFSET)
			continue;
		r->found = true;
		r->start = best.start;
		/* Requests are sorted, so starts come in order: dedupe as we go. */
		if (!nnames || names[nnames - 1].start != best.start)
			names[nnames++].start = best.start;
	}
	if (nnames) {
		rewind(fp);
		err = _pass2(fp, names, nnames);
		if (!err && ferror(fp))
			err = -EIO;
		if (!err)
			err = _finish_names(names, nnames);
		if (err)
			goto out;
	}

	for (size_t j = 0; j < n; j++) {
		struct kreq *r = &reqs[j];
		struct kname *kn;

		if (!r->found)
			continue;
		kn = _find_name(names, nnames, r->start);
		if (!kn || !kn->name) {
			r->found = false;
			continue;
		}
		cb(ctx, r->index, kn->name, r->addr - r->start);
	}
out:
	if (reqs && !err) {
		for (size_t j = 0; j < n; j++) {
			if (!reqs[j].found)
				cb(ctx, reqs[j].index, NULL, 0);
		}
	} else {
		for (size_t i = 0; i < n; i++)
			cb(ctx, i, NULL, 0);
	}
	if (fp)
		_close_kallsyms(fp, fp_buf);
	for (size_t i = 0; names && i < nnames; i++)
		free(names[i].name);
	free(names);
	free(slots);
	free(reqs);
	return err;
}

/* The kernel's KSYM_NAME_LEN - 1: longer names cannot be in kallsyms. */
#define KSYM_NAME_MAX 511

/*
 * Loading keeps memory small (the agent's budget is 8 MB, the table ~120k
 * symbols with ~3 MB of names): pass 1 reads addresses only, into a
 * struct kload array that grows by mremap() (no second copy while it
 * grows) and is sorted in place (glibc's qsort() would allocate a copy);
 * pass 2 reads the file again and hands the names over one at a time, in
 * file order, to be compressed in address order. The file lists the core
 * kernel in address order, so names mostly arrive in the order they are
 * compressed in; the few that arrive early (modules, BPF programs) wait in
 * a small heap. Peak: 8 bytes per symbol for a moment, not ~70.
 *
 * 8 bytes, because x86-64 keeps all kernel text, modules and BPF programs
 * in the top 2 GiB: an address is a 32-bit offset from KTEXT_BASE, and
 * what decides among aliases (rank, then line) fits in the other 32 bits.
 */
#define KTEXT_BASE	0xffffffff00000000ULL
#define KLOAD_LINE_BITS	26			/* 67M lines; kallsyms has ~120k-300k */
#define KLOAD_RANK_MAX	((1u << (32 - KLOAD_LINE_BITS)) - 1)	/* end of text */

struct kload {
	uint32_t off;		/* address - KTEXT_BASE */
	uint32_t key;		/* rank << KLOAD_LINE_BITS | line: among aliases the lowest wins */
};

/* After pass 1: a kept symbol's line and its index in address order. */
#define KPOS_RELEASE_BYTES (64u << 10)	/* pass 2 gives back pos a whole number of pages at a time */
struct kpos {
	uint32_t line;
	uint32_t index;
};

/* A name that arrived before its turn in pass 2. */
struct kearly {
	uint32_t index;
	char *name;
};

struct kallsyms_cached {
	uint32_t key;		/* entry index + 1; 0: empty slot */
	char *name;
};

/* Names of entries in address order, compressed block by block. */
struct kpacker {
	struct kallsyms_table *t;
	ZSTD_CCtx *cctx;
	size_t next;			/* the entry whose name goes in next */
	char raw[KALLSYMS_BLOCK_NAMES * (KSYM_NAME_MAX + 80)];
	size_t raw_len, raw_names;
	size_t zlen, zcap;
	struct kearly *early;		/* min-heap on index */
	size_t nearly, early_cap;
};

#define KLOAD_LESS(x, y) ((x)->off != (y)->off ? (x)->off < (y)->off : (x)->key < (y)->key)
#define KPOS_LESS(x, y) ((x)->line < (y)->line)
DEFINE_HEAPSORT(_sort_kload, struct kload, KLOAD_LESS)
DEFINE_HEAPSORT(_sort_kpos, struct kpos, KPOS_LESS)

/* Appends to an array in a mapping of its own; growing moves pages, copies nothing. */
static int _kload_push(struct kload **v, size_t *n, size_t *cap, const struct kload *e)
{
	if (*n == *cap) {
		size_t c2 = *cap ? *cap * 2 : 16384;
		void *p = *cap ? mremap(*v, *cap * sizeof(**v), c2 * sizeof(**v), MREMAP_MAYMOVE) :
				 mmap(NULL, c2 * sizeof(**v), PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED)
			return -ENOMEM;
		*v = p;
		*cap = c2;
	}
	(*v)[(*n)++] = *e;
	return 0;
}

/*
 * The name a kernel frame shows: demangled (Rust in the kernel), with its
 * module ("foo [mod]"); "" for an end of text. Returns its length.
 */
static size_t _display_name(const struct kline *k, char *out, size_t cap)
{
	char *dem = NULL;
	const char *name = k->name;
	int name_len = k->name_len;
	size_t len;

	if (_is_text_end(k)) {
		out[0] = '\0';
		return 0;
	}
	if (k->name_len > 2 && k->name[0] == '_' && (k->name[1] == 'R' || k->name[1] == 'Z') &&
	    k->name_len <= KSYM_NAME_MAX) {
		char raw[KSYM_NAME_MAX + 1];

		memcpy(raw, k->name, k->name_len);
		raw[k->name_len] = '\0';
		dem = demangle(raw);
		if (dem) {
			name = dem;
			name_len = (int)strlen(dem);
		}
	}
	if (k->mod_len)
		len = snprintf(out, cap, "%.*s [%.*s]", name_len, name, k->mod_len, k->mod);
	else
		len = snprintf(out, cap, "%.*s", name_len, name);
	free(dem);
	return len < cap ? len : cap - 1;
}

static int _pack_flush(struct kpacker *p)
{
	struct kallsyms_table *t = p->t;
	size_t b = (p->next - 1) / KALLSYMS_BLOCK_NAMES;
	size_t bound = ZSTD_compressBound(p->raw_len), zn;

	if (p->zlen + bound > p->zcap) {
		size_t c2 = p->zcap ? p->zcap * 2 : 1 << 16;
		uint8_t *nz;

		while (c2 < p->zlen + bound)
			c2 *= 2;
		nz = realloc(t->z, c2);
		if (!nz)
			return -ENOMEM;
		t->z = nz;
		p->zcap = c2;
	}
	zn = ZSTD_compressCCtx(p->cctx, t->z + p->zlen, bound, p->raw, p->raw_len, 3);
	if (ZSTD_isError(zn) || p->zlen + zn > UINT32_MAX) {
		pr_debug("kallsyms: cannot compress names: %s\n", ZSTD_getErrorName(zn));
		return -EINVAL;
	}
	t->zoff[b] = (uint32_t)p->zlen;
	p->zlen += zn;
	t->zoff[b + 1] = (uint32_t)p->zlen;
	p->raw_len = 0;
	p->raw_names = 0;
	return 0;
}

/* Entry p->next's name. */
static int _pack_append(struct kpacker *p, const char *name)
{
	size_t l = strlen(name) + 1;

	if (l > sizeof(p->raw) - p->raw_len)
		return -E2BIG;	/* cannot happen: names are at most KSYM_NAME_MAX */
	memcpy(p->raw + p->raw_len, name, l);
	p->raw_len += l;
	p->raw_names++;
	p->next++;
	if (p->raw_names == KALLSYMS_BLOCK_NAMES || p->next == p->t->n)
		return _pack_flush(p);
	return 0;
}

static void _early_sift_down(struct kearly *h, size_t n, size_t i)
{
	for (;;) {
		size_t c = 2 * i + 1;
		struct kearly tmp;

		if (c >= n)
			return;
		if (c + 1 < n && h[c + 1].index < h[c].index)
			c++;
		if (h[i].index <= h[c].index)
			return;
		tmp = h[i], h[i] = h[c], h[c] = tmp;
		i = c;
	}
}

/* Entry index's name, in whatever order pass 2 finds them. */
static int _pack(struct kpacker *p, uint32_t index, const char *name)
{
	int err;

	if (index != p->next) {
		struct kearly *h = p->early;
		size_t i = p->nearly;

		if (p->nearly == p->early_cap) {
			size_t c2 = p->early_cap ? p->early_cap * 2 : 256;

			h = realloc(p->early, c2 * sizeof(*h));
			if (!h)
				return -ENOMEM;
			p->early = h;
			p->early_cap = c2;
		}
		h[i].index = index;
		h[i].name = strdup(name);
		if (!h[i].name)
			return -ENOMEM;
		p->nearly++;
		for (; i && h[(i - 1) / 2].index > h[i].index; i = (i - 1) / 2) {
			struct kearly tmp = h[i];

			h[i] = h[(i - 1) / 2];
			h[(i - 1) / 2] = tmp;
		}
		return 0;
	}
	err = _pack_append(p, name);
	while (!err && p->nearly && p->early[0].index == p->next) {
		char *early = p->early[0].name;

		p->early[0] = p->early[--p->nearly];
		_early_sift_down(p->early, p->nearly, 0);
		err = _pack_append(p, early);
		free(early);
	}
	return err;
}

/*
 * Pass 2: every kept symbol's name, by line. A symbol whose address is not
 * the one pass 1 read on that line means the table changed in between (a
 * module or BPF program came or went): -EAGAIN, and the caller reads again.
 */
/* Unsigned LEB128, 32 bits at most. */
static uint8_t *_leb_put(uint8_t *p, uint32_t v)
{
	do {
		uint8_t b = v & 0x7f;

		v >>= 7;
		*p++ = b | (v ? 0x80 : 0);
	} while (v);
	return p;
}

static uint32_t _leb_get(const uint8_t **p)
{
	uint32_t v = 0;

	for (int shift = 0; shift < 35; shift += 7) {
		uint8_t b = *(*p)++;

		v |= (uint32_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	return v;
}

/* Entry i's offset from base: its block's first, plus the deltas up to it. */
static uint32_t _off_at(const struct kallsyms_table *t, size_t i)
{
	size_t b = i / KALLSYMS_BLOCK_NAMES;
	const uint8_t *p = t->d + t->dpos[b];
	uint32_t o = t->boff[b];

	for (size_t k = i % KALLSYMS_BLOCK_NAMES; k; k--)
		o += _leb_get(&p);
	return o;
}

static int _load_names(FILE *fp, struct kallsyms_table *t, const struct kpos *pos)
{
	struct kpacker *p = calloc(1, sizeof(*p));
	size_t line_cap = 0, j = 0, released = 0;
	uint32_t lineno = 0;
	char *line = NULL, name[KSYM_NAME_MAX + 80];
	struct kline k;
	int err = 0;

	t->zoff = calloc(t->nblocks + 1, sizeof(*t->zoff));
	if (!p || !t->zoff || !(p->cctx = ZSTD_createCCtx())) {
		err = -ENOMEM;
		goto out;
	}
	p->t = t;
	/*
	 * Room for 16 bytes a name, where ~6 are used (zstd), allocated at
	 * once: pages never written cost no memory, and the buffer does not
	 * double on the way (where realloc works on the heap it copies, and
	 * both copies are held for a moment).
	 * Trimmed below.
	 */
	p->zcap = t->n * 16 + (64u << 10);
	t->z = malloc(p->zcap);
	if (!t->z) {
		err = -ENOMEM;
		goto out;
	}
	while (j < t->n && getline(&line, &line_cap, fp) > 0) {
		/*
		 * pos is read front to back: its pages behind j go back to the
		 * kernel as the compressed names grow, so the two never add
		 * up.
		 */
		if ((j - released) * sizeof(*pos) >= KPOS_RELEASE_BYTES) {
			madvise((char *)pos + released * sizeof(*pos), KPOS_RELEASE_BYTES, MADV_DONTNEED);
			released += KPOS_RELEASE_BYTES / sizeof(*pos);
		}
		if (++lineno != pos[j].line)
			continue;
		if (!_parse_line(line, &k) || k.addr - t->base != _off_at(t, pos[j].index)) {
			err = -EAGAIN;
			goto out;
		}
		_display_name(&k, name, sizeof(name));
		err = _pack(p, pos[j].index, name);
		if (err)
			goto out;
		j++;
	}
	if (ferror(fp))
		err = -EIO;
	else if (j < t->n || p->next < t->n)
		err = -EAGAIN;
	if (!err && p->zlen < p->zcap) {
		uint8_t *nz = realloc(t->z, p->zlen ? p->zlen : 1);

		if (nz)
			t->z = nz;
	}
out:
	if (p) {
		ZSTD_freeCCtx(p->cctx);
		for (size_t i = 0; i < p->nearly; i++)
			free(p->early[i].name);
		free(p->early);
		free(p);
	}
	free(line);
	return err;
}

/* A symbol's place among its aliases: _rank() (capped), the end-of-text mark last. */
static uint32_t _kload_key(const struct kline *k, uint32_t line)
{
	uint32_t rank = KLOAD_RANK_MAX;

	if (!_is_text_end(k)) {
		rank = _rank(k);
		if (rank > KLOAD_RANK_MAX - 1)	/* 31 leading underscores and more: alike */
			rank = KLOAD_RANK_MAX - 1;
	}
	return rank << KLOAD_LINE_BITS | line;
}

/*
 * Pass 1: the addresses of the text symbols, sorted, one per address (the
 * best-ranked alias), in the top 4 GiB; fills t->base, t->n, t->nblocks,
 * t->boff, t->dpos, t->d, t->ends and *pos (each kept symbol's line, in
 * file order; munmap() *pos_bytes when done).
 */
static int _load_addresses(FILE *fp, struct kallsyms_table *t, struct kpos **pos,
			   size_t *pos_bytes)
{
	struct kload *v = NULL;
	size_t nv = 0, cap = 0, line_cap = 0, out = 0, below = 0;
	char *line = NULL;
	uint32_t lineno = 0;
	struct kline k;
	struct kpos *kp;
	int err = 0;

	while (getline(&line, &line_cap, fp) > 0) {
		struct kload e;

		if (++lineno >= 1u << KLOAD_LINE_BITS) {
			err = -E2BIG;
			goto out;
		}
		if (!_parse_line(line, &k) || !k.addr || !(_is_text(k.type) || _is_text_end(&k)))
			continue;
		if (k.addr < KTEXT_BASE) {
			below++;
			continue;
		}
		e = (struct kload){ .off = (uint32_t)(k.addr - KTEXT_BASE), .key = _kload_key(&k, lineno) };
		err = _kload_push(&v, &nv, &cap, &e);
		if (err)
			goto out;
	}
	free(line);
	line = NULL;
	if (ferror(fp))
		err = -EIO;
	if (err || !nv) {
		err = err ? err : -EPERM;
		goto out;
	}
	if (below)
		pr_debug("kallsyms: %zu text symbols below %#llx ignored\n", below, KTEXT_BASE);
	_sort_kload(v, nv);
	/* Aliases: the best-ranked name at each address, the first in the file among equals. */
	for (size_t i = 0; i < nv; i++) {
		if (out && v[out - 1].off == v[i].off)
			continue;
		v[out++] = v[i];
	}
	nv = out;
	t->base = KTEXT_BASE + v[0].off;
	t->n = nv;
	t->nblocks = (t->n + KALLSYMS_BLOCK_NAMES - 1) / KALLSYMS_BLOCK_NAMES;
	t->boff = malloc(t->nblocks * sizeof(*t->boff));
	t->dpos = malloc((t->nblocks + 1) * sizeof(*t->dpos));
	/* 5 bytes a delta at most; the pages never written cost nothing, and are trimmed. */
	t->d = malloc(t->n * 5);
	if (!t->boff || !t->dpos || !t->d) {
		err = -ENOMEM;
		goto out;
	}
	{
		uint8_t *p = t->d, *nd;

		for (size_t i = 0; i < t->n; i++) {
			uint32_t o = v[i].off - v[0].off, *ne;

			if (i % KALLSYMS_BLOCK_NAMES == 0) {
				t->boff[i / KALLSYMS_BLOCK_NAMES] = o;
				t->dpos[i / KALLSYMS_BLOCK_NAMES] = (uint32_t)(p - t->d);
			} else {
				p = _leb_put(p, o - (v[i - 1].off - v[0].off));
			}
			if (v[i].key >> KLOAD_LINE_BITS != KLOAD_RANK_MAX)
				continue;
			ne = realloc(t->ends, (t->nends + 1) * sizeof(*ne));
			if (!ne) {
				err = -ENOMEM;
				goto out;
			}
			t->ends = ne;
			t->ends[t->nends++] = o;
		}
		t->dpos[t->nblocks] = (uint32_t)(p - t->d);
		nd = realloc(t->d, p > t->d ? (size_t)(p - t->d) : 1);
		if (nd)
			t->d = nd;
	}
	/* The same mapping, the same size per entry: kpos i takes kload i's place. */
	_Static_assert(sizeof(struct kpos) == sizeof(struct kload), "kpos reuses kload's slots");
	kp = (struct kpos *)v;
	for (size_t i = 0; i < t->n; i++) {
		uint32_t line_of = v[i].key & ((1u << KLOAD_LINE_BITS) - 1);

		kp[i] = (struct kpos){ .line = line_of, .index = (uint32_t)i };
	}
	_sort_kpos(kp, t->n);
	*pos = kp;
	*pos_bytes = cap * sizeof(*v);
	return 0;
out:
	free(line);
	if (cap)
		munmap(v, cap * sizeof(*v));
	return err;
}

int kallsyms__load(const char *path, struct kallsyms_table *t)
{
	int err = -EAGAIN;

	/* Modules and BPF programs come and go between two reads: try thrice. */
	for (int attempt = 0; attempt < 3 && err == -EAGAIN; attempt++) {
		struct kpos *pos = NULL;
		size_t pos_bytes = 0;
		char *fp_buf;
		FILE *fp;

		memset(t, 0, sizeof(*t));
		fp = _open_kallsyms(path, &fp_buf);
		if (!fp)
			return -errno;
		err = _load_addresses(fp, t, &pos, &pos_bytes);
		if (!err) {
			rewind(fp);
			err = _load_names(fp, t, pos);
			munmap(pos, pos_bytes);
		}
		_close_kallsyms(fp, fp_buf);
		if (err)
			kallsyms__table_free(t);
	}
	return err;
}

static bool _is_end(const struct kallsyms_table *t, uint32_t off)
{
	for (size_t i = 0; i < t->nends; i++) {
		if (t->ends[i] == off)
			return true;
	}
	return false;
}

static struct kallsyms_cached *_cache_slot(const struct kallsyms_table *t, uint32_t key)
{
	size_t mask = t->cache_cap - 1, i = (key * 2654435761u) & mask;

	while (t->cache[i].key && t->cache[i].key != key)
		i = (i + 1) & mask;
	return &t->cache[i];
}

static int _cache_grow(struct kallsyms_table *t)
{
	size_t cap = t->cache_cap ? t->cache_cap * 2 : 256;
	struct kallsyms_cached *old = t->cache, *nc = calloc(cap, sizeof(*nc));
	size_t old_cap = t->cache_cap;

	if (!nc)
		return -ENOMEM;
	t->cache = nc;
	t->cache_cap = cap;
	for (size_t i = 0; i < old_cap; i++) {
		if (old[i].key)
			*_cache_slot(t, old[i].key) = old[i];
	}
	free(old);
	return 0;
}

/* Expands the name of entry i from its block. Returns an owned string or NULL. */
static char *_expand(const struct kallsyms_table *t, size_t i)
{
	size_t b = i / KALLSYMS_BLOCK_NAMES, skip = i % KALLSYMS_BLOCK_NAMES;
	const uint8_t *z = t->z + t->zoff[b];
	size_t zn = t->zoff[b + 1] - t->zoff[b];
	unsigned long long len = ZSTD_getFrameContentSize(z, zn);
	char *raw, *p, *end, *name = NULL;
	size_t got;

	if (len == ZSTD_CONTENTSIZE_ERROR || len == ZSTD_CONTENTSIZE_UNKNOWN || len > (1u << 24))
		return NULL;
	raw = malloc(len + 1);
	if (!raw)
		return NULL;
	/* A context per call: misses are rare once the kernel's hot functions are named. */
	got = ZSTD_decompress(raw, len, z, zn);
	if (ZSTD_isError(got) || got != len)
		goto out;
	raw[len] = '\0';
	for (p = raw, end = raw + len; skip && p < end; skip--)
		p += strlen(p) + 1;
	if (p < end)
		name = strdup(p);
out:
	free(raw);
	return name;
}

const char *kallsyms__lookup(struct kallsyms_table *t, uint64_t addr, uint64_t *offset)
{
	struct kallsyms_cached *c;
	size_t lo = 0, hi = t->nblocks, b;
	const uint8_t *p, *end;
	uint32_t at;
	uint64_t o;
	char *name;

	if (!t->n || addr < t->base || addr - t->base > UINT32_MAX)
		return NULL;
	o = addr - t->base;
	/* The last block starting at or below o, then its last entry at or below o. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->boff[mid] <= o)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo)
		return NULL;
	b = lo - 1;
	at = t->boff[b];
	lo = b * KALLSYMS_BLOCK_NAMES + 1;	/* entries at or below o, so far */
	for (p = t->d + t->dpos[b], end = t->d + t->dpos[b + 1]; p < end; lo++) {
		uint32_t next = at + _leb_get(&p);

		if (next > o)
			break;
		at = next;
	}
	if (o - at >= KALLSYMS_MAX_OFFSET || _is_end(t, at))
		return NULL;
	if ((t->cache_n + 1) * 2 > t->cache_cap && _cache_grow(t))
		return NULL;
	c = _cache_slot(t, (uint32_t)lo);
	if (!c->key) {
		name = _expand(t, lo - 1);
		if (!name)
			return NULL;
		c->key = (uint32_t)lo;
		c->name = name;
		t->cache_n++;
	}
	*offset = o - at;
	return c->name;
}

size_t kallsyms__memory(const struct kallsyms_table *t)
{
	size_t bytes = t->nblocks * sizeof(*t->boff) + (t->nblocks + 1) * sizeof(*t->dpos) +
		       (t->nblocks ? t->dpos[t->nblocks] : 0) + (t->nblocks + 1) * sizeof(*t->zoff) +
		       (t->nblocks ? t->zoff[t->nblocks] : 0) + t->nends * sizeof(*t->ends) +
		       t->cache_cap * sizeof(*t->cache);

	for (size_t i = 0; i < t->cache_cap; i++) {
		if (t->cache[i].key)
			bytes += strlen(t->cache[i].name) + 1;
	}
	return bytes;
}

void kallsyms__table_free(struct kallsyms_table *t)
{
	for (size_t i = 0; i < t->cache_cap; i++)
		free(t->cache[i].name);
	free(t->cache);
	free(t->boff);
	free(t->dpos);
	free(t->d);
	free(t->zoff);
	free(t->z);
	free(t->ends);
	memset(t, 0, sizeof(*t));
}
