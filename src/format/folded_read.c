// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "format/folded_read.h"

#define MAX_NAME 1024
#define MAX_LABELS 64

/* Folded frames have no address: a hash of the name keeps them distinct. */
static int64_t _frame(struct batch *b, const char *name, size_t len)
{
	char buf[MAX_NAME];
	int64_t id;

	if (len >= sizeof(buf))
		len = sizeof(buf) - 1;
	memcpy(buf, name, len);
	buf[len] = '\0';
	id = profile__intern_frame(b->dict, FRAME_NATIVE, PROFILE_NO_MAPPING,
				   hash__bytes(buf, len));
	if (id >= 0 && profile__set_frame_name(b->dict, id, buf, NULL, 0))
		return -ENOMEM;
	return id;
}

/* One line, modified in place. names/values have room for n + 1 labels. */
static int _line(struct batch *b, char *line, size_t lineno, const char **names,
		 const char **values, size_t n, int64_t ts, uint32_t *frames,
		 char *err, size_t err_len)
{
	char *sp = strrchr(line, ' '), *end, *p, *semi;
	unsigned long long count;
	uint32_t depth = 0;
	int64_t series, stack;
	struct batch_sample s;

	if (!sp || sp == line) {
		snprintf(err, err_len, "line %zu: expected 'frames COUNT'", lineno);
		return -EINVAL;
	}
	errno = 0;
	count = strtoull(sp + 1, &end, 10);
	if (errno || *end || !sp[1] || sp[1] == '-' || count == 0 || count > (1ULL << 40)) {
		snprintf(err, err_len, "line %zu: '%.64s' is not a positive count", lineno, sp + 1);
		return -EINVAL;
	}
	*sp = '\0';
	semi = strchr(line, ';');
	if (!semi || semi == line) {
		snprintf(err, err_len, "line %zu: expected a process name and frames", lineno);
		return -EINVAL;
	}
	*semi = '\0';
	names[n] = "comm";
	values[n] = line;
	series = batch__intern_series(b, names, values, n + 1);
	if (series < 0) {
		snprintf(err, err_len, "line %zu: bad labels", lineno);
		return series;
	}
	for (p = semi + 1; *p; ) {
		char *next = strchr(p, ';');
		size_t len = next ? (size_t)(next - p) : strlen(p);
		int64_t f;

		/* Deeper: cut as agent batches are, root-most frames and a mark. */
		if (depth == FOLDED_MAX_DEPTH - 1 && next && next[1]) {
			f = profile__intern_named_frame(b->dict, FRAME_NATIVE, PROFILE_NO_MAPPING, 0,
							"[truncated]", "", 0);
			if (f < 0)
				return f;
			frames[depth++] = (uint32_t)f;
			break;
		}
		if (len == 0) {
			snprintf(err, err_len, "line %zu: empty frame", lineno);
			return -EINVAL;
		}
		f = _frame(b, p, len);
		if (f < 0)
			return f;
		frames[depth++] = (uint32_t)f;
		p = next ? next + 1 : p + len;
	}
	if (depth == 0) {
		snprintf(err, err_len, "line %zu: no frames after the process name", lineno);
		return -EINVAL;
	}
	stack = profile__intern_stack(b->dict, frames, depth);
	if (stack < 0)
		return stack;
	s = (struct batch_sample){
		.ts_ns = ts, .stack = (uint32_t)stack, .series = (uint32_t)series,
		.type = SAMPLE_CPU, .value = (int64_t)count,
	};
	return batch__add_sample(b, &s);
}

int folded__read(const char *text, size_t len, const char *const *names,
		 const char *const *values, size_t n, int64_t ts_ns, struct batch *b,
		 char *err, size_t err_len)
{
	const char *lnames[MAX_LABELS + 1], *lvalues[MAX_LABELS + 1];
	char *copy = NULL, *line, *save = NULL;
	uint32_t *frames = NULL;
	size_t lineno = 0, lines = 0;
	int ret = 0;

	if (n > MAX_LABELS) {
		snprintf(err, err_len, "at most %d labels", MAX_LABELS);
		return -EINVAL;
	}
	if (memchr(text, '\0', len)) {
		snprintf(err, err_len, "folded stacks are text; the body has a NUL byte");
		return -EINVAL;
	}
	/* Counted first: a batch sample is ten times the smallest line. */
	for (const char *p = text, *end = text + len; p < end;) {
		const char *nl = memchr(p, '\n', end - p);

		if (p[0] != '\n' && p[0] != '#' && ++lines > FOLDED_MAX_LINES) {
			snprintf(err, err_len, "more than %d stacks; send at most %d at a time",
				 FOLDED_MAX_LINES, FOLDED_MAX_LINES);
			return -E2BIG;
		}
		p = nl ? nl + 1 : end;
	}
	memcpy(lnames, names, n * sizeof(*names));
	memcpy(lvalues, values, n * sizeof(*values));
	copy = malloc(len + 1);
	frames = calloc(FOLDED_MAX_DEPTH, sizeof(*frames));
	if (!copy || !frames) {
		snprintf(err, err_len, "out of memory");
		ret = -ENOMEM;
		goto out;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';
	/* Lines are counted by '\n' so that messages name the line an editor shows. */
	for (line = copy; line; line = save) {
		char *nl = strchr(line, '\n');

		save = nl ? nl + 1 : NULL;
		if (nl)
			*nl = '\0';
		lineno++;
		if (nl && nl > line && nl[-1] == '\r')
			nl[-1] = '\0';
		if (!line[0] || line[0] == '#')
			continue;
		ret = _line(b, line, lineno, lnames, lvalues, n, ts_ns, frames, err, err_len);
		if (ret)
			break;
	}
out:
	if (ret) {
		if (ret == -ENOMEM)
			snprintf(err, err_len, "out of memory");
		batch__reset(b);
	}
	free(copy);
	free(frames);
	return ret;
}
