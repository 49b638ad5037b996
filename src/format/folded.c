// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/profile.h"
#include "format/folded.h"

/* Growable byte buffer holding every line's text, NUL-terminated. */
struct text {
	char *buf;
	size_t len, cap;
};

struct line {
	const char *text;
	uint64_t count;
};

static int _text_reserve(struct text *t, size_t more)
{
	size_t cap = t->cap ? t->cap : 4096;
	char *buf;

	if (t->cap - t->len >= more)
		return 0;
	while (cap - t->len < more) {
		if (cap > SIZE_MAX / 2)
			return -ENOMEM;
		cap *= 2;
	}
	buf = realloc(t->buf, cap);
	if (!buf)
		return -ENOMEM;
	t->buf = buf;
	t->cap = cap;
	return 0;
}

/*
 * Appends a name so that it stays one field of one line: ';' separates
 * frames and '\n' separates lines, so neither may survive inside a name.
 */
static int _text_name(struct text *t, const char *s, const char *suffix)
{
	size_t n, m = strlen(suffix);

	if (!*s)
		s = "[unknown]";
	n = strlen(s);
	if (_text_reserve(t, n + m + 1))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == ';')
			c = ':';
		else if (c == '\n' || c == '\r')
			c = ' ';
		t->buf[t->len++] = c;
	}
	memcpy(t->buf + t->len, suffix, m);
	t->len += m;
	return 0;
}

static int _text_char(struct text *t, char c)
{
	if (_text_reserve(t, 1))
		return -ENOMEM;
	t->buf[t->len++] = c;
	return 0;
}

static int _line_cmp(const void *a, const void *b)
{
	/* strcmp compares as unsigned char: byte order, independent of locale. */
	return strcmp(((const struct line *)a)->text, ((const struct line *)b)->text);
}

int folded__write(const struct profile *p, FILE *out)
{
	struct intern *keys = NULL;
	struct text text = { 0 };
	uint64_t *counts = NULL;
	size_t *offsets = NULL;
	struct line *lines = NULL;
	uint32_t nkeys, nlines = 0;
	int err = 0;

	if (!p->nsamples)
		goto flush;

	/*
	 * Aggregate by (comm, stack) first so that the text of a stack is
	 * built once, not once per pid, tid and cpu that ran it.
	 */
	keys = intern__new();
	counts = calloc(p->nsamples, sizeof(*counts));
	if (!keys || !counts) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		uint32_t key[2] = { s->comm, s->stack };
		int64_t id = intern__add(keys, key, sizeof(key), NULL);

		if (id < 0) {
			err = id;
			goto out;
		}
		counts[id] += s->count;
	}

	nkeys = intern__count(keys);
	offsets = calloc(nkeys, sizeof(*offsets));
	lines = calloc(nkeys, sizeof(*lines));
	if (!offsets || !lines) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t k = 0; k < nkeys; k++) {
		const uint32_t *key = intern__key(keys, k, NULL);
		const uint32_t *frames;
		uint32_t n;

		offsets[k] = text.len;
		err = _text_name(&text, profile__string(p, key[0]), "");
		frames = profile__stack(p, key[1], &n);
		for (uint32_t i = 0; !err && i < n; i++) {
			const struct profile_frame *f = &p->frames[frames[i]];

			err = _text_char(&text, ';');
			if (!err)
				err = _text_name(&text, profile__string(p, f->function),
						 f->kind == FRAME_KERNEL ? "_[k]" : "");
		}
		if (!err)
			err = _text_char(&text, '\0');
		if (err)
			goto out;
	}

	/* Offsets, not pointers, until the buffer has stopped moving. */
	for (uint32_t k = 0; k < nkeys; k++)
		lines[k] = (struct line){ .text = text.buf + offsets[k], .count = counts[k] };
	qsort(lines, nkeys, sizeof(*lines), _line_cmp);

	/*
	 * Distinct stacks can still print the same text: frames are keyed by
	 * address, so two call sites in one function are two frames with one
	 * name. Merge them here so every line is unique, as flamegraph.pl and
	 * diff tools expect.
	 */
	for (uint32_t k = 1; k < nkeys; k++) {
		if (strcmp(lines[nlines].text, lines[k].text) == 0)
			lines[nlines].count += lines[k].count;
		else
			lines[++nlines] = lines[k];
	}
	nlines++;

	for (uint32_t k = 0; k < nlines; k++) {
		if (fprintf(out, "%s %" PRIu64 "\n", lines[k].text, lines[k].count) < 0) {
			err = -EIO;
			goto out;
		}
	}
flush:
	if (fflush(out) || ferror(out))
		err = -EIO;
out:
	free(lines);
	free(offsets);
	free(text.buf);
	free(counts);
	intern__free(keys);
	return err;
}
