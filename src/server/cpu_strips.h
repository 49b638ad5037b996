/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_CPU_STRIPS_H
#define FW_SERVER_CPU_STRIPS_H

#include <stdint.h>

/*
 * Per-bucket busy time of one CPU for GET /api/v1/cpu/strips: buckets
 * [from + i * res, from + (i + 1) * res) clipped to [from, to); each keeps
 * its busy nanoseconds and the busy time of each comm, so that the dominant
 * one (most busy time; ties: the smaller name in byte order) can be named.
 */
struct strip_buckets;

#define STRIP_MAX_BUCKETS 100000

/* NULL with errno set: EINVAL (from >= to, res <= 0, over STRIP_MAX_BUCKETS), ENOMEM. */
struct strip_buckets *strip_buckets__new(int64_t from, int64_t to, int64_t res);
void strip_buckets__free(struct strip_buckets *b);
/* Adds busy time [start, end) of comm (borrowed); clipped to the window. 0 or -ENOMEM. */
int strip_buckets__add(struct strip_buckets *b, int64_t start, int64_t end, const char *comm);
uint32_t strip_buckets__count(const struct strip_buckets *b);
/*
 * Bucket i: its start, its busy fraction (busy ns / bucket length, at most
 * 1) and its dominant comm (borrowed; NULL when the bucket saw no busy time).
 */
void strip_buckets__get(const struct strip_buckets *b, uint32_t i, int64_t *start,
			double *fraction, const char **dominant);
/* Forgets every busy time (for the next CPU), keeping the window. */
void strip_buckets__clear(struct strip_buckets *b);

#endif
