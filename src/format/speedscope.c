// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/speedscope.h"

/* speedscope frames are (name, file); ours map onto them many to one. */
static int64_t _frame_index(struct intern *frames, struct strbuf *list, const char *name,
			    const char *file)
{
	struct strbuf key = STRBUF_INIT;
	bool added;
	int64_t id;

	strbuf__puts(&key, name);
	strbuf__putc(&key, '\0');
	strbuf__puts(&key, file);
	if (key.oom)
		return -ENOMEM;
	id = intern__add(frames, key.buf, key.len, &added);
	strbuf__release(&key);
	if (id >= 0 && added) {
		strbuf__puts(list, id ? ",{\"name\":" : "{\"name\":");
		strbuf__json_string(list, name[0] ? name : "[unknown]");
		if (file[0]) {
			strbuf__puts(list, ",\"file\":");
			strbuf__json_string(list, file);
		}
		strbuf__putc(list, '}');
	}
	return id;
}

static int _by_comm(const void *a, const void *b, void *profile)
{
	const struct profile *p = profile;
	uint32_t x = p->samples[*(const uint32_t *)a].comm;
	uint32_t y = p->samples[*(const uint32_t *)b].comm;

	return x < y ? -1 : x > y;
}

/* Appends one sampled profile: the samples order[from, to), all of one process. */
static int _write_profile(const struct profile *p, const char *unit, const uint32_t *order,
			  uint32_t from, uint32_t to, struct intern *frames,
			  struct strbuf *frame_list, struct strbuf *doc)
{
	struct strbuf samples = STRBUF_INIT, weights = STRBUF_INIT;
	const char *comm = profile__string(p, p->samples[order[from]].comm);
	uint64_t total = 0;
	int err = 0;

	for (uint32_t i = from; i < to && !err; i++) {
		const struct profile_sample *s = &p->samples[order[i]];
		uint32_t depth;
		const uint32_t *st = profile__stack(p, s->stack, &depth);

		strbuf__puts(&samples, i > from ? ",[" : "[");
		for (uint32_t d = 0; d < depth; d++) {
			const struct profile_frame *f = &p->frames[st[d]];
			int64_t idx = _frame_index(frames, frame_list, profile__string(p, f->function),
						   profile__string(p, f->file));

			if (idx < 0) {
				err = -ENOMEM;
				break;
			}
			strbuf__printf(&samples, "%s%lld", d ? "," : "", (long long)idx);
		}
		strbuf__putc(&samples, ']');
		strbuf__printf(&weights, "%s%llu", i > from ? "," : "", (unsigned long long)s->count);
		total += s->count;
	}
	strbuf__puts(doc, from ? ",{\"type\":\"sampled\",\"name\":" :
		     "{\"type\":\"sampled\",\"name\":");
	strbuf__json_string(doc, comm[0] ? comm : "[unknown]");
	strbuf__printf(doc, ",\"unit\":\"%s\",\"startValue\":0,\"endValue\":%llu,"
		       "\"samples\":[%s],\"weights\":[%s]}", unit, (unsigned long long)total,
		       samples.buf ? samples.buf : "", weights.buf ? weights.buf : "");
	if (samples.oom || weights.oom)
		err = -ENOMEM;
	strbuf__release(&samples);
	strbuf__release(&weights);
	return err;
}

int speedscope__write(const struct profile *p, const char *unit, FILE *out)
{
	struct intern *frames = intern__new();
	struct strbuf frame_list = STRBUF_INIT, doc = STRBUF_INIT;
	uint32_t *order = malloc(((size_t)p->nsamples + 1) * sizeof(*order));
	int err = -ENOMEM;

	if (!frames || !order)
		goto out;
	/* One profile per process name, as speedscope lists them. */
	for (uint32_t i = 0; i < p->nsamples; i++)
		order[i] = i;
	qsort_r(order, p->nsamples, sizeof(*order), _by_comm, (void *)p);
	strbuf__puts(&doc, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\","
			   "\"exporter\":\"flamewatch\",\"name\":\"flamewatch\","
			   "\"activeProfileIndex\":0,\"profiles\":[");
	for (uint32_t i = 0, j; i < p->nsamples; i = j) {
		for (j = i; j < p->nsamples && p->samples[order[j]].comm == p->samples[order[i]].comm; j++)
			;
		err = _write_profile(p, unit, order, i, j, frames, &frame_list, &doc);
		if (err)
			goto out;
	}
	strbuf__printf(&doc, "],\"shared\":{\"frames\":[%s]}}\n",
		       frame_list.buf ? frame_list.buf : "");
	err = -ENOMEM;
	if (doc.oom || frame_list.oom)
		goto out;
	err = fwrite(doc.buf, 1, doc.len, out) == doc.len && fflush(out) == 0 ? 0 : -EIO;
out:
	free(order);
	intern__free(frames);
	strbuf__release(&frame_list);
	strbuf__release(&doc);
	return err;
}
