// SPDX-License-Identifier: Apache-2.0
/*
 * A session's global ids as the batches wire__decode() hands out know
 * them: each entry is translated into the session's shared dictionary
 * once per session, when a batch first refers to it (the session's om
 * tables, common/dict_xlate.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/dict_xlate.h"
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

/*
 * Frames refer to their names by these ids: a name shared by many frames
 * (a function's call sites, a file's functions) is hashed once per session
 * rather than once per frame.
 */
static int64_t _out_string(struct dict_xlate *x, uint32_t gid)
{
	struct dec *d = x->ctx;

	return profile__intern_string(d->out->dict, _d_string(d, gid));
}

static int64_t _out_mapping(struct dict_xlate *x, uint32_t gid)
{
	struct dec *d = x->ctx;
	const void *key;
	size_t len;

	key = _dtab_get(&d->s->tab[K_MAPPING], gid, &len);
	return profile__intern_mapping(d->out->dict, _d_string(d, _u32_at(key, 0)),
				       _d_string(d, _u32_at(key, 1)));
}

static int64_t _out_frame(struct dict_xlate *x, uint32_t gid)
{
	struct dec *d = x->ctx;
	struct wire_frame f;
	uint32_t mapping = PROFILE_NO_MAPPING;
	int64_t id, fn, file;
	size_t len;

	memcpy(&f, _dtab_get(&d->s->tab[K_FRAME], gid, &len), sizeof(f));
	if (f.mapping) {
		id = dict_xlate__id(x, K_MAPPING, f.mapping - 1);
		if (id < 0)
			return id;
		mapping = id;
	}
	if ((fn = dict_xlate__id(x, K_STRING, f.function)) < 0)
		return fn;
	if ((file = dict_xlate__id(x, K_STRING, f.file)) < 0)
		return file;
	return profile__intern_frame_ids(d->out->dict, f.kind, mapping, f.addr, (uint32_t)fn,
					 (uint32_t)file, f.line);
}

static int64_t _out_stack(struct dict_xlate *x, uint32_t gid)
{
	struct dec *d = x->ctx;
	const void *key;
	int64_t id;
	size_t len;
	int err;

	key = _dtab_get(&d->s->tab[K_STACK], gid, &len);
	len /= sizeof(uint32_t);
	/* At least one element: an empty stack's key must not be NULL either. */
	if (_d_reserve(d, len ? len : 1, 0))
		return -ENOMEM;
	/*
	 * Deeper than the limit (runaway recursion, a bad unwind): the frames
	 * nearest the root are kept and a "[truncated]" frame marks where the
	 * rest was cut, so the flame graph shows it. Translating a frame does
	 * not touch scratch, so it can be filled in place.
	 */
	if (len > d->lim->max_stack_depth) {
		size_t keep = d->lim->max_stack_depth ? d->lim->max_stack_depth - 1 : 0;

		err = dict_xlate__ids(x, K_FRAME, key, keep, d->scratch);
		if (err)
			return err;
		id = profile__intern_named_frame(d->out->dict, FRAME_NATIVE, PROFILE_NO_MAPPING, 0,
						 "[truncated]", "", 0);
		if (id < 0)
			return id;
		d->scratch[keep] = id;
		len = keep + 1;
	} else {
		err = dict_xlate__ids(x, K_FRAME, key, len, d->scratch);
		if (err)
			return err;
	}
	return profile__intern_stack(d->out->dict, d->scratch, len);
}

static int64_t _out_series(struct dict_xlate *x, uint32_t gid)
{
	struct dec *d = x->ctx;
	const void *key;
	size_t len;

	key = _dtab_get(&d->s->tab[K_SERIES], gid, &len);
	len /= 2 * sizeof(uint32_t);
	if (_d_reserve(d, 0, len))
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		d->names[i] = _d_string(d, _u32_at(key, 2 * i));
		d->values[i] = _d_string(d, _u32_at(key, 2 * i + 1));
	}
	return batch__intern_series(d->out, d->names, d->values, len);
}

static const dict_xlate_fn _out_fns[K_MAX] = {
	[K_STRING] = _out_string, [K_MAPPING] = _out_mapping, [K_FRAME] = _out_frame,
	[K_STACK] = _out_stack, [K_SERIES] = _out_series,
};

int wire_out__begin(struct dec *d)
{
	d->x = (struct dict_xlate){ .ids = d->s->om, .fn = _out_fns, .ctx = d };
	for (int k = 0; k < K_MAX; k++) {
		if (dict_ids__grow(&d->s->om[k], d->s->tab[k].n))
			return -ENOMEM;
		d->x.n[k] = d->s->tab[k].n;
	}
	return 0;
}
