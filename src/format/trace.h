/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_TRACE_H
#define FW_FORMAT_TRACE_H

#include <stddef.h>
#include <stdint.h>

struct profile;
struct strbuf;

/* One stretch of time a thread spent in one stack. */
struct trace_event {
	int64_t start, end;	/* Unix ns */
	uint32_t stack;		/* stack id in the dictionary */
	uint32_t flags;		/* TRACE_* */
};

/* The thread was off CPU, blocked in the stack, for the whole event. */
#define TRACE_BLOCKED 1u

/* A thread's events, in time order, not overlapping. */
struct trace_lane {
	uint32_t pid, tid;
	const char *comm;
	const struct trace_event *events;
	size_t nevents;
};

/*
 * Writes a flame chart as Chrome trace event JSON (what Perfetto and
 * chrome://tracing open): a complete ("X") event per frame per stretch
 * during which the frame stayed on the thread's stack, nested by time,
 * and a thread_name metadata event per lane. A TRACE_BLOCKED event gets one
 * more, innermost slice, "off-CPU" (category "offcpu"), so that blocked time
 * reads as such under the stack it blocked in. Timestamps are microseconds
 * from the first event, so that the numbers stay exact in doubles.
 * Returns 0 or -ENOMEM.
 */
int trace__write_json(const struct profile *dict, const struct trace_lane *lanes, size_t n,
		      struct strbuf *out);

#endif
