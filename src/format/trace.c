// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "common/profile.h"
#include "common/strbuf.h"
#include "format/trace.h"

/* A frame open on the lane's current stack since `since`. */
struct open_frame {
	uint32_t frame;
	int64_t since;
};

static void _emit(struct strbuf *out, const struct profile *d, const struct trace_lane *l,
		  uint32_t frame, int64_t start, int64_t end, int64_t origin, bool *first)
{
	const struct profile_frame *f = &d->frames[frame];
	const char *name = profile__string(d, f->function);

	strbuf__puts(out, *first ? "{\"name\":" : ",{\"name\":");
	strbuf__json_string(out, name[0] ? name : "[unknown]");
	strbuf__printf(out, ",\"cat\":\"%s\",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,"
		       "\"pid\":%u,\"tid\":%u}", frame_kind__name(f->kind),
		       (start - origin) / 1e3, (end - start) / 1e3, l->pid, l->tid);
	*first = false;
}

static void _emit_blocked(struct strbuf *out, const struct trace_lane *l,
			  const struct trace_event *ev, int64_t origin, bool *first)
{
	strbuf__printf(out, "%s{\"name\":\"off-CPU\",\"cat\":\"offcpu\",\"ph\":\"X\",\"ts\":%.3f,"
		       "\"dur\":%.3f,\"pid\":%u,\"tid\":%u}", *first ? "" : ",",
		       (ev->start - origin) / 1e3, (ev->end - ev->start) / 1e3, l->pid, l->tid);
	*first = false;
}

int trace__write_json(const struct profile *d, const struct trace_lane *lanes, size_t n,
		      struct strbuf *out)
{
	struct open_frame *open = NULL;
	size_t cap = 0;
	int64_t origin = INT64_MAX;
	bool first = true;

	for (size_t i = 0; i < n; i++)
		if (lanes[i].nevents && lanes[i].events[0].start < origin)
			origin = lanes[i].events[0].start;
	if (origin == INT64_MAX)
		origin = 0;

	strbuf__puts(out, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"exporter\":\"flamewatch\"},"
			  "\"traceEvents\":[");
	for (size_t i = 0; i < n; i++) {
		const struct trace_lane *l = &lanes[i];
		size_t depth = 0;
		int64_t last_end = 0;

		strbuf__printf(out, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%u,\"tid\":%u,"
			       "\"args\":{\"name\":", first ? "" : ",", l->pid, l->tid);
		strbuf__json_string(out, l->comm);
		strbuf__puts(out, "}}");
		first = false;

		for (size_t e = 0; e < l->nevents; e++) {
			const struct trace_event *ev = &l->events[e];
			uint32_t sdepth;
			const uint32_t *st = profile__stack(d, ev->stack, &sdepth);
			size_t keep = 0;

			/* Frames stay open across events only when time is contiguous. */
			if (ev->start == last_end)
				while (keep < depth && keep < sdepth && open[keep].frame == st[keep])
					keep++;
			while (depth > keep) {
				depth--;
				_emit(out, d, l, open[depth].frame, open[depth].since, last_end,
				      origin, &first);
			}
			if (sdepth > cap) {
				struct open_frame *no = realloc(open, sdepth * sizeof(*no));

				if (!no) {
					free(open);
					return -ENOMEM;
				}
				open = no;
				cap = sdepth;
			}
			for (; depth < sdepth; depth++)
				open[depth] = (struct open_frame){ st[depth], ev->start };
			if (ev->flags & TRACE_BLOCKED)
				_emit_blocked(out, l, ev, origin, &first);
			last_end = ev->end;
		}
		while (depth > 0) {
			depth--;
			_emit(out, d, l, open[depth].frame, open[depth].since, last_end, origin, &first);
		}
	}
	strbuf__puts(out, "]}\n");
	free(open);
	return out->oom ? -ENOMEM : 0;
}
