/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_PROM_POINTS_H
#define FW_FORMAT_PROM_POINTS_H

#include <stddef.h>
#include <stdint.h>

/*
 * The newest value of each metric series, written as Prometheus text
 * exposition (version 0.0.4): one HELP and TYPE per metric name, then its
 * series sorted by labels. Used for the GPU metrics at /metrics on the
 * server, `run` and the agent. Not thread-safe.
 */
struct prom_points;
struct strbuf;

/* Returns an empty table, or NULL (ENOMEM). */
struct prom_points *prom_points__new(void);
/* Accepts NULL. */
void prom_points__free(struct prom_points *p);

/*
 * Sets the value of series (name, labels) unless it holds a newer one.
 * Labels are n pairs (borrowed, copied), in any order; names must be
 * valid Prometheus label names, values any text (escaped on output).
 * A label named by skip (may be NULL) is left out. Returns 0 or -ENOMEM.
 */
int prom_points__put(struct prom_points *p, const char *name, const char *const *lnames,
		     const char *const *lvalues, size_t n, const char *skip, int64_t ts,
		     double value);
/* Forgets the series whose newest value is older than before (a process that left). */
int prom_points__expire(struct prom_points *p, int64_t before);
size_t prom_points__count(const struct prom_points *p);

/*
 * Appends every series to out. help(name) and type(name) ("gauge",
 * "counter") describe each metric name.
 */
void prom_points__write(const struct prom_points *p, struct strbuf *out,
			const char *(*help)(const char *name), const char *(*type)(const char *name));

#endif
