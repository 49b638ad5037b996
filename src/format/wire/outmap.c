// SPDX-License-Identifier: Apache-2.0
/*
 * A session's global ids as the batches wire__decode() hands out know
 * them: each entry is translated into the session's shared dictionary
 * once per session, when a batch first refers to it (struct outmap).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/profile.h"
#include "format/wire.h"
#include "format/wire/wire_int.h"

/*
 * Sized per use rather than from the limits: entries the session accepted
 * earlier were checked against the limits of their own call.
 */
static int _d_reserve(struct dec *d, size_t frames, size_t labels)
{
	if (frames > d->cap_scratch) {
		uint32_t *s = realloc(d->scratch, frames * sizeof(*s));

		if (!s)
			return -ENOMEM;
		d->scratch = s;
		d->cap_scratch = frames;
	}
	if (labels > d->cap_labels) {
		const char **n = realloc(d->names, labels * sizeof(*n));

		if (!n)
			return -ENOMEM;
		d->names = n;
		n = realloc(d->values, labels * sizeof(*n));
		if (!n)
			return -ENOMEM;
		d->values = n;
		d->cap_labels = labels;
	}
	return 0;
}

int wire_outmap__grow(struct outmap *m, uint32_t n)
{
	if (n > m->cap) {
		uint32_t cap = m->cap ? m->cap : 64;
		uint32_t *l;

		while (cap < n)
			cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
		l = realloc(m->local, (size_t)cap * sizeof(*l));
		if (!l)
			return -ENOMEM;
		m->local = l;
		m->cap = cap;
	}
	for (; m->n < n; m->n++)
		m->local[m->n] = OM_UNSET;
	return 0;
}

/* 1: gid is not translated yet (m->local[*ord] is to be set), 0: it is. */
static int _om_find(struct outmap *m, uint32_t gid, int64_t *ord)
{
	*ord = gid;
	if (gid >= m->n) {
		int rc = wire_outmap__grow(m, gid + 1);

		if (rc)
			return rc;
	}
	*ord = gid;
	return m->local[gid] == OM_UNSET;
}

static int64_t _out_mapping(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_MAPPING];
	const void *key;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	key = _dtab_get(&d->s->tab[K_MAPPING], gid, &len);
	id = profile__intern_mapping(d->out->dict, _d_string(d, _u32_at(key, 0)),
				     _d_string(d, _u32_at(key, 1)));
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

static int64_t _out_frame(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_FRAME];
	struct wire_frame f;
	uint32_t mapping = PROFILE_NO_MAPPING;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	memcpy(&f, _dtab_get(&d->s->tab[K_FRAME], gid, &len), sizeof(f));
	if (f.mapping) {
		id = _out_mapping(d, f.mapping - 1);
		if (id < 0)
			return id;
		mapping = id;
	}
	id = profile__intern_named_frame(d->out->dict, f.kind, mapping, f.addr,
					 _d_string(d, f.function), _d_string(d, f.file), f.line);
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

int64_t wire_out__stack(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_STACK];
	const void *key;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	key = _dtab_get(&d->s->tab[K_STACK], gid, &len);
	len /= sizeof(uint32_t);
	/* At least one element: an empty stack's key must not be NULL either. */
	if (_d_reserve(d, len ? len : 1, 0))
		return -ENOMEM;
	/*
	 * Deeper than the limit (runaway recursion, a bad unwind): the frames
	 * nearest the root are kept and a "[truncated]" frame marks where the
	 * rest was cut, so the flame graph shows it.
	 */
	if (len > d->lim->max_stack_depth) {
		size_t keep = d->lim->max_stack_depth ? d->lim->max_stack_depth - 1 : 0;

		for (size_t i = 0; i < keep; i++) {
			id = _out_frame(d, _u32_at(key, i));
			if (id < 0)
				return id;
			d->scratch[i] = id;
		}
		id = profile__intern_named_frame(d->out->dict, FRAME_NATIVE, PROFILE_NO_MAPPING, 0,
						 "[truncated]", "", 0);
		if (id < 0)
			return id;
		d->scratch[keep] = id;
		len = keep + 1;
	} else {
		/* _out_frame() does not touch scratch, so it can be filled in place. */
		for (size_t i = 0; i < len; i++) {
			id = _out_frame(d, _u32_at(key, i));
			if (id < 0)
				return id;
			d->scratch[i] = id;
		}
	}
	id = profile__intern_stack(d->out->dict, d->scratch, len);
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

int64_t wire_out__series(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_SERIES];
	const void *key;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	key = _dtab_get(&d->s->tab[K_SERIES], gid, &len);
	len /= 2 * sizeof(uint32_t);
	if (_d_reserve(d, 0, len))
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		d->names[i] = _d_string(d, _u32_at(key, 2 * i));
		d->values[i] = _d_string(d, _u32_at(key, 2 * i + 1));
	}
	id = batch__intern_series(d->out, d->names, d->values, len);
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}
