// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "common/hex.h"
#include "common/log.h"
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

static size_t _lower_bound(const struct kreq *r, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct kname *_find_name(struct kname *names, size_t n, uint64_t start)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (names[mid].start < start)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && names[lo].start == start ? &names[lo] : NULL;
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
		i = _lower_bound(reqs, n, k.addr);
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

	fp = fopen(path, "re");
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
		fclose(fp);
	for (size_t i = 0; names && i < nnames; i++)
		free(names[i].name);
	free(names);
	free(slots);
	free(reqs);
	return err;
}

/* The kernel's KSYM_NAME_LEN - 1: longer names cannot be in kallsyms. */
#define KSYM_NAME_MAX 511

/* One symbol while loading; names are in a blob until they are compressed. */
struct kload {
	uint64_t addr;
	uint32_t name;		/* offset in the blob */
	uint32_t rank;		/* _rank(); UINT32_MAX: end of text */
	uint32_t line;		/* file order: among equal ranks the first wins */
};

struct kallsyms_cached {
	uint32_t key;		/* entry index + 1; 0: empty slot */
	char *name;
};

static int _kload_cmp(const void *a, const void *b)
{
	const struct kload *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return x->line < y->line ? -1 : x->line > y->line;
}

/* Appends a name, in its displayed form, to the blob. Returns its offset or -ENOMEM. */
static int64_t _blob_add(char **blob, size_t *len, size_t *cap, const struct kline *k)
{
	char *dem = NULL, *nb;
	const char *name = NULL;
	size_t need, at = *len;
	int name_len = k->name_len;

	if (_is_text_end(k)) {
		name = "";
		name_len = 0;
	} else if (k->name_len > 2 && k->name[0] == '_' && (k->name[1] == 'R' || k->name[1] == 'Z')) {
		/* Rust kernel code: demangled, as the resolver does. */
		char raw[KSYM_NAME_MAX + 1];

		if (k->name_len <= KSYM_NAME_MAX) {
			memcpy(raw, k->name, k->name_len);
			raw[k->name_len] = '\0';
			dem = demangle(raw);
		}
		if (dem) {
			name = dem;
			name_len = (int)strlen(dem);
		}
	}
	if (!name)
		name = k->name;
	need = (size_t)name_len + (k->mod_len && name_len ? (size_t)k->mod_len + 3 : 0) + 1;
	if (at + need > *cap) {
		size_t c2 = *cap ? *cap * 2 : 1 << 18;

		while (c2 < at + need)
			c2 *= 2;
		nb = realloc(*blob, c2);
		if (!nb) {
			free(dem);
			return -ENOMEM;
		}
		*blob = nb;
		*cap = c2;
	}
	memcpy(*blob + at, name, name_len);
	*len = at + name_len;
	if (k->mod_len && name_len)
		*len += sprintf(*blob + *len, " [%.*s]", k->mod_len, k->mod);
	(*blob)[(*len)++] = '\0';
	free(dem);
	return (int64_t)at;
}

/*
 * Compresses the names of entries [0, n) (kept: v[i].name in blob) in
 * blocks of KALLSYMS_BLOCK_NAMES, in entry order.
 */
static int _compress_names(struct kallsyms_table *t, const struct kload *v, const char *blob)
{
	size_t zcap = 0, zlen = 0, rcap = 0;
	char *raw = NULL;
	ZSTD_CCtx *cctx;
	int err = 0;

	t->nblocks = (t->n + KALLSYMS_BLOCK_NAMES - 1) / KALLSYMS_BLOCK_NAMES;
	t->zoff = calloc(t->nblocks + 1, sizeof(*t->zoff));
	cctx = ZSTD_createCCtx();
	if (!t->zoff || !cctx) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t b = 0; b < t->nblocks; b++) {
		size_t lo = b * KALLSYMS_BLOCK_NAMES, hi = lo + KALLSYMS_BLOCK_NAMES, len = 0, bound, zn;

		if (hi > t->n)
			hi = t->n;
		for (size_t i = lo; i < hi; i++) {
			size_t l = strlen(blob + v[i].name) + 1;

			if (len + l > rcap) {
				size_t c2 = rcap ? rcap * 2 : 8192;
				char *nr;

				while (c2 < len + l)
					c2 *= 2;
				nr = realloc(raw, c2);
				if (!nr) {
					err = -ENOMEM;
					goto out;
				}
				raw = nr;
				rcap = c2;
			}
			memcpy(raw + len, blob + v[i].name, l);
			len += l;
		}
		bound = ZSTD_compressBound(len);
		if (zlen + bound > zcap) {
			size_t c2 = zcap ? zcap * 2 : 1 << 16;
			uint8_t *nz;

			while (c2 < zlen + bound)
				c2 *= 2;
			nz = realloc(t->z, c2);
			if (!nz) {
				err = -ENOMEM;
				goto out;
			}
			t->z = nz;
			zcap = c2;
		}
		zn = ZSTD_compressCCtx(cctx, t->z + zlen, bound, raw, len, 3);
		if (ZSTD_isError(zn) || zlen + zn > UINT32_MAX) {
			pr_debug("kallsyms: cannot compress names: %s\n", ZSTD_getErrorName(zn));
			err = -EINVAL;
			goto out;
		}
		t->zoff[b] = (uint32_t)zlen;
		zlen += zn;
	}
	t->zoff[t->nblocks] = (uint32_t)zlen;
	if (zlen && zlen < zcap) {
		uint8_t *nz = realloc(t->z, zlen);

		if (nz)
			t->z = nz;
	}
out:
	ZSTD_freeCCtx(cctx);
	free(raw);
	return err;
}

int kallsyms__load(const char *path, struct kallsyms_table *t)
{
	struct kload *v = NULL;
	size_t nv = 0, cap = 0, line_cap = 0, blen = 0, bcap = 0, out = 0, first = 0;
	char *line = NULL, *blob = NULL;
	uint32_t lineno = 0;
	struct kline k;
	FILE *fp;
	int err = 0;

	memset(t, 0, sizeof(*t));
	fp = fopen(path, "re");
	if (!fp)
		return -errno;
	while (getline(&line, &line_cap, fp) > 0) {
		int64_t at;

		lineno++;
		if (!_parse_line(line, &k) || !k.addr || !(_is_text(k.type) || _is_text_end(&k)))
			continue;
		if (nv == cap) {
			size_t c2 = cap ? cap * 2 : 8192;
			struct kload *vv = realloc(v, c2 * sizeof(*v));

			if (!vv) {
				err = -ENOMEM;
				goto out;
			}
			v = vv;
			cap = c2;
		}
		at = _blob_add(&blob, &blen, &bcap, &k);
		if (at < 0) {
			err = (int)at;
			goto out;
		}
		v[nv++] = (struct kload){
			.addr = k.addr,
			.name = (uint32_t)at,
			.rank = _is_text_end(&k) ? UINT32_MAX : _rank(&k),
			.line = lineno,
		};
		if (blen > UINT32_MAX) {
			err = -E2BIG;
			goto out;
		}
	}
	if (ferror(fp))
		err = -EIO;
	fclose(fp);
	fp = NULL;
	if (err || !nv) {
		err = err ? err : -EPERM;
		goto out;
	}
	qsort(v, nv, sizeof(*v), _kload_cmp);
	/* Aliases: the best-ranked name at each address, the first in the file among equals. */
	for (size_t i = 0; i < nv; i++) {
		if (out && v[out - 1].addr == v[i].addr)
			continue;
		v[out++] = v[i];
	}
	nv = out;
	/* Offsets are 32-bit: keep the top 4 GiB, where x86-64 puts all kernel text. */
	while (v[nv - 1].addr - v[first].addr > UINT32_MAX)
		first++;
	if (first)
		pr_debug("kallsyms: %zu symbols more than 4 GiB below the last one ignored\n", first);
	t->base = v[first].addr;
	t->n = nv - first;
	t->off = malloc(t->n * sizeof(*t->off));
	if (!t->off) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < t->n; i++) {
		const struct kload *e = &v[first + i];
		uint32_t *ne;

		t->off[i] = (uint32_t)(e->addr - t->base);
		if (e->rank != UINT32_MAX)
			continue;
		ne = realloc(t->ends, (t->nends + 1) * sizeof(*ne));
		if (!ne) {
			err = -ENOMEM;
			goto out;
		}
		t->ends = ne;
		t->ends[t->nends++] = t->off[i];
	}
	err = _compress_names(t, v + first, blob);
out:
	if (fp)
		fclose(fp);
	free(line);
	free(v);
	free(blob);
	if (err)
		kallsyms__table_free(t);
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
	size_t lo = 0, hi = t->n;
	uint64_t o;
	char *name;

	if (!t->n || addr < t->base || addr - t->base > UINT32_MAX)
		return NULL;
	o = addr - t->base;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->off[mid] <= o)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || o - t->off[lo - 1] >= KALLSYMS_MAX_OFFSET || _is_end(t, t->off[lo - 1]))
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
	*offset = o - t->off[lo - 1];
	return c->name;
}

size_t kallsyms__memory(const struct kallsyms_table *t)
{
	size_t bytes = t->n * sizeof(*t->off) + (t->nblocks + 1) * sizeof(*t->zoff) +
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
	free(t->off);
	free(t->zoff);
	free(t->z);
	free(t->ends);
	memset(t, 0, sizeof(*t));
}
