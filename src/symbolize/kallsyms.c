// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct ksym_entry {
	uint64_t addr;
	uint32_t name;		/* offset in the names blob */
};

static int _entry_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct ksym_entry *)a)->addr, y = ((const struct ksym_entry *)b)->addr;

	return x < y ? -1 : x > y;
}

int kallsyms__load(const char *path, struct kallsyms_table *t)
{
	struct ksym_entry *v = NULL;
	size_t nv = 0, cap = 0, line_cap = 0, nlen = 0, ncap = 0;
	char *line = NULL, *names = NULL;
	struct kline k;
	FILE *fp;
	int err = 0;

	memset(t, 0, sizeof(*t));
	fp = fopen(path, "re");
	if (!fp)
		return -errno;
	while (getline(&line, &line_cap, fp) > 0) {
		size_t need;

		if (!_parse_line(line, &k) || !k.addr || !(_is_text(k.type) || _is_text_end(&k)))
			continue;
		need = (size_t)k.name_len + (k.mod_len ? (size_t)k.mod_len + 3 : 0) + 1;
		if (nv == cap) {
			size_t c2 = cap ? cap * 2 : 8192;
			struct ksym_entry *vv = realloc(v, c2 * sizeof(*v));

			if (!vv) {
				err = -ENOMEM;
				goto out;
			}
			v = vv;
			cap = c2;
		}
		if (nlen + need > ncap) {
			size_t n2 = ncap ? ncap * 2 : 1 << 18;
			char *nn;

			while (n2 < nlen + need)
				n2 *= 2;
			nn = realloc(names, n2);
			if (!nn) {
				err = -ENOMEM;
				goto out;
			}
			names = nn;
			ncap = n2;
		}
		v[nv].addr = k.addr;
		v[nv].name = nlen;
		/* The end of text is an entry with an empty name: nothing resolves past it. */
		if (_is_text_end(&k)) {
			names[nlen++] = '\0';
		} else {
			memcpy(names + nlen, k.name, k.name_len);
			nlen += k.name_len;
			if (k.mod_len)
				nlen += sprintf(names + nlen, " [%.*s]", k.mod_len, k.mod);
			names[nlen++] = '\0';
		}
		nv++;
		/* Rust kernel code: demangled, as the resolver does. */
		if (k.name_len > 2 && k.name[0] == '_' && (k.name[1] == 'R' || k.name[1] == 'Z')) {
			char *dem = demangle(names + v[nv - 1].name);
			size_t dl = dem ? strlen(dem) + 1 : 0;

			/* The raw name is the last thing in the blob: replace it in place. */
			if (dem && v[nv - 1].name + dl <= ncap) {
				memcpy(names + v[nv - 1].name, dem, dl);
				nlen = v[nv - 1].name + dl;
			}
			free(dem);
		}
	}
	if (ferror(fp))
		err = -EIO;
out:
	fclose(fp);
	free(line);
	if (err || !nv) {
		free(v);
		free(names);
		return err ? err : -EPERM;
	}
	qsort(v, nv, sizeof(*v), _entry_cmp);
	/* Aliases at one address: keep the name with the fewest leading underscores. */
	{
		size_t out = 0;

		for (size_t i = 0; i < nv; i++) {
			if (out && v[out - 1].addr == v[i].addr) {
				const char *a = names + v[out - 1].name, *b = names + v[i].name;

				if (a[0] && b[0] && strspn(b, "_") < strspn(a, "_"))
					v[out - 1] = v[i];
				continue;
			}
			v[out++] = v[i];
		}
		nv = out;
	}
	t->entries = v;
	t->n = nv;
	t->names = names;
	return 0;
}

const char *kallsyms__lookup(const struct kallsyms_table *t, uint64_t addr, uint64_t *offset)
{
	const struct ksym_entry *e = t->entries;
	size_t lo = 0, hi = t->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (e[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || !t->names[e[lo - 1].name] || addr - e[lo - 1].addr >= KALLSYMS_MAX_OFFSET)
		return NULL;
	*offset = addr - e[lo - 1].addr;
	return t->names + e[lo - 1].name;
}

void kallsyms__table_free(struct kallsyms_table *t)
{
	free(t->entries);
	free(t->names);
	memset(t, 0, sizeof(*t));
}
