// SPDX-License-Identifier: Apache-2.0
/*
 * A session's global ids as the batches wire__decode() hands out know
 * them: each entry goes into the session's shared dictionary when a batch
 * brings it, and the session keeps only its id there (the om tables,
 * _d_om()), not the entry's bytes a second time.
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

int64_t wire_out__stack(struct dec *d, const uint32_t *frames, size_t n)
{
	const uint32_t *om = d->s->om[K_FRAME].ids;
	size_t len = n;
	int64_t id;

	/* At least one element: an empty stack's key must not be NULL either. */
	if (_d_reserve(d, len ? len : 1, 0))
		return -ENOMEM;
	/*
	 * Deeper than the limit (runaway recursion, a bad unwind): the frames
	 * nearest the root are kept and a "[truncated]" frame marks where the
	 * rest was cut, so the flame graph shows it.
	 */
	if (len > d->lim->max_stack_depth) {
		len = d->lim->max_stack_depth ? d->lim->max_stack_depth - 1 : 0;
		id = profile__intern_named_frame(d->out->dict, FRAME_NATIVE, PROFILE_NO_MAPPING, 0,
						 "[truncated]", "", 0);
		if (id < 0)
			return id;
		d->scratch[len] = (uint32_t)id;
		for (size_t i = 0; i < len; i++)
			d->scratch[i] = om[frames[i]];
		len++;
	} else {
		for (size_t i = 0; i < len; i++)
			d->scratch[i] = om[frames[i]];
	}
	return profile__intern_stack(d->out->dict, d->scratch, (uint32_t)len);
}

int64_t wire_out__series(struct dec *d, const uint32_t *labels, size_t n)
{
	if (_d_reserve(d, 0, n))
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		d->names[i] = _d_string(d, labels[2 * i]);
		d->values[i] = _d_string(d, labels[2 * i + 1]);
	}
	return batch__intern_series(d->out, d->names, d->values, n);
}
