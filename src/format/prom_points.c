// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/strbuf.h"
#include "format/prom_points.h"

/*
 * Keyed by "name\0labels", labels rendered once at put time in canonical
 * (sorted, escaped) form, so that writing is sorting and copying.
 */
struct entry {
	int64_t ts;
	double value;
	uint32_t name_len;	/* key = name, NUL, rendered labels */
	bool live;
};

struct prom_points {
	struct intern *keys;
	struct entry *e;
	uint32_t cap;
	uint32_t live;
};

struct prom_points *prom_points__new(void)
{
	struct prom_points *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->keys = intern__new();
	if (!p->keys) {
		free(p);
		return NULL;
	}
	return p;
}

void prom_points__free(struct prom_points *p)
{
	if (!p)
		return;
	intern__free(p->keys);
	free(p->e);
	free(p);
}

size_t prom_points__count(const struct prom_points *p)
{
	return p ? p->live : 0;
}

static void _escaped(struct strbuf *sb, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\')
			strbuf__puts(sb, "\\\\");
		else if (*s == '"')
			strbuf__puts(sb, "\\\"");
		else if (*s == '\n')
			strbuf__puts(sb, "\\n");
		else
			strbuf__putc(sb, *s);
	}
}

int prom_points__put(struct prom_points *p, const char *name, const char *const *lnames,
		     const char *const *lvalues, size_t n, const char *skip, int64_t ts,
		     double value)
{
	struct strbuf key = STRBUF_INIT;
	size_t order[64], k = 0;
	bool added;
	int64_t id;
	int err = 0;

	if (n > 64)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		size_t j;

		if (skip && !strcmp(lnames[i], skip))
			continue;
		for (j = k; j > 0 && strcmp(lnames[order[j - 1]], lnames[i]) > 0; j--)
			order[j] = order[j - 1];
		order[j] = i;
		k++;
	}
	strbuf__puts(&key, name);
	strbuf__putc(&key, '\0');
	for (size_t j = 0; j < k; j++) {
		if (j)
			strbuf__putc(&key, ',');
		strbuf__puts(&key, lnames[order[j]]);
		strbuf__puts(&key, "=\"");
		_escaped(&key, lvalues[order[j]]);
		strbuf__putc(&key, '"');
	}
	if (key.oom) {
		err = -ENOMEM;
		goto out;
	}
	id = intern__add(p->keys, key.buf, key.len, &added);
	if (id < 0) {
		err = (int)id;
		goto out;
	}
	if ((uint32_t)id >= p->cap) {
		uint32_t cap = p->cap ? 2 * p->cap : 64;
		struct entry *e = realloc(p->e, cap * sizeof(*e));

		if (!e) {
			err = -ENOMEM;
			goto out;
		}
		p->e = e;
		p->cap = cap;
	}
	if (added)
		p->e[id] = (struct entry){ .name_len = (uint32_t)strlen(name) };
	if (!p->e[id].live || ts >= p->e[id].ts) {
		if (!p->e[id].live)
			p->live++;
		p->e[id].live = true;
		p->e[id].ts = ts;
		p->e[id].value = value;
	}
out:
	strbuf__release(&key);
	return err;
}

int prom_points__expire(struct prom_points *p, int64_t before)
{
	struct intern *keys;
	struct entry *e;
	uint32_t n = intern__count(p->keys), k = 0;
	bool any = false;

	for (uint32_t i = 0; i < n; i++)
		any |= p->e[i].live && p->e[i].ts < before;
	if (!any)
		return 0;
	/* Rebuilt, so that the keys of processes long gone do not pile up. */
	keys = intern__new();
	e = malloc((n ? n : 1) * sizeof(*e));
	if (!keys || !e) {
		intern__free(keys);
		free(e);
		return -ENOMEM;
	}
	for (uint32_t i = 0; i < n; i++) {
		const void *key;
		size_t len;

		if (!p->e[i].live || p->e[i].ts < before)
			continue;
		key = intern__key(p->keys, i, &len);
		if (intern__add(keys, key, len, NULL) < 0) {
			intern__free(keys);
			free(e);
			return -ENOMEM;
		}
		e[k++] = p->e[i];
	}
	intern__free(p->keys);
	free(p->e);
	p->keys = keys;
	p->e = e;
	p->cap = n ? n : 1;
	p->live = k;
	return 0;
}

/* The shortest text that reads back as exactly v (15 to 17 digits). */
static void _shortest(struct strbuf *sb, double v)
{
	char buf[32];

	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	strbuf__puts(sb, buf);
}

static const struct prom_points *_sort_p;

static int _by_key(const void *a, const void *b)
{
	size_t la, lb;
	const char *ka = intern__key(_sort_p->keys, *(const uint32_t *)a, &la);
	const char *kb = intern__key(_sort_p->keys, *(const uint32_t *)b, &lb);
	int c = strcmp(ka, kb);

	if (c)
		return c;
	c = memcmp(ka, kb, la < lb ? la : lb);
	return c ? c : (la > lb) - (la < lb);
}

void prom_points__write(const struct prom_points *p, struct strbuf *out,
			const char *(*help)(const char *name), const char *(*type)(const char *name))
{
	uint32_t n = intern__count(p->keys), k = 0;
	uint32_t *idx = malloc((n ? n : 1) * sizeof(*idx));
	const char *prev = NULL;

	if (!idx) {
		out->oom = true;
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		if (p->e[i].live)
			idx[k++] = i;
	_sort_p = p;
	qsort(idx, k, sizeof(*idx), _by_key);
	for (uint32_t j = 0; j < k; j++) {
		const struct entry *e = &p->e[idx[j]];
		size_t len;
		const char *key = intern__key(p->keys, idx[j], &len);
		const char *labels = key + e->name_len + 1;

		if (!prev || strcmp(prev, key)) {
			strbuf__printf(out, "# HELP %s %s\n# TYPE %s %s\n", key, help(key), key,
				       type(key));
			prev = key;
		}
		strbuf__puts(out, key);
		if (len > e->name_len + 1) {
			strbuf__putc(out, '{');
			strbuf__append(out, labels, len - e->name_len - 1);
			strbuf__putc(out, '}');
		}
		if (isfinite(e->value)) {
			strbuf__putc(out, ' ');
			_shortest(out, e->value);
			strbuf__putc(out, '\n');
		}
		else
			strbuf__puts(out, isnan(e->value) ? " NaN\n" : e->value > 0 ? " +Inf\n" : " -Inf\n");
	}
	free(idx);
}
