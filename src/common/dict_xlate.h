/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_DICT_XLATE_H
#define FW_COMMON_DICT_XLATE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Translating the ids of one dictionary into another's: a batch's into its
 * agent's wire session (format/wire/encode.c), a session's into the
 * dictionary the server's decoded batches share (format/wire/outmap.c), a
 * batch's into a store's (store/sqlite/dict.c, store/clickhouse/write.c).
 *
 * Each kind refers only to kinds before it: a mapping to strings, a frame
 * to a mapping and strings, a stack to frames, a series to strings. An
 * entry is translated when first asked for, by the caller's function for
 * its kind, which asks dict_xlate__id() for the entries it refers to; so
 * the walk goes down to what is translated already and comes back up in
 * dependency order. What each target does with an entry (intern it,
 * insert a row, hash it) stays in those functions. Translations are kept
 * in one table per kind, for one batch or, for batches that share a
 * dictionary (struct batch's dict_id), across them.
 */
enum dict_kind {
	DICT_STRING,
	DICT_MAPPING,
	DICT_FRAME,
	DICT_STACK,
	DICT_SERIES,
	DICT_NKINDS,
};

/* Not translated yet. A target id of UINT32_MAX is valid, but not remembered. */
#define DICT_UNSET UINT32_MAX

/* One kind's translations: ids[source id] is the target id or DICT_UNSET. */
struct dict_ids {
	uint32_t *ids;
	uint32_t n, cap;
};

/*
 * For a table kept across batches: makes ids below n addressable, the new
 * ones DICT_UNSET; the capacity starts at 64 and doubles. 0 or -ENOMEM.
 */
int dict_ids__grow(struct dict_ids *m, uint32_t n);
/* For a table of one batch: exactly n ids (room for one when n is 0), all DICT_UNSET. */
int dict_ids__alloc(struct dict_ids *m, uint32_t n);
/* Frees the table; it becomes empty. Accepts an empty one. */
void dict_ids__release(struct dict_ids *m);

struct dict_xlate;

/*
 * Translates source entry id, which is in range and not translated yet:
 * returns its target id, or -errno.
 */
typedef int64_t (*dict_xlate_fn)(struct dict_xlate *x, uint32_t id);

struct dict_xlate {
	uint32_t n[DICT_NKINDS];	/* source ids below n[k] can be translated; 0 for
					 * a kind that is not */
	struct dict_ids *ids;		/* DICT_NKINDS tables, ids[k] holding n[k] ids at least */
	const dict_xlate_fn *fn;	/* DICT_NKINDS functions, the caller's */
	void *ctx;			/* the caller's */
};

/*
 * The target id of source entry id of kind k, translated on first use:
 * >= 0, -EINVAL for an id out of range, or what the kind's function returned.
 */
static inline int64_t dict_xlate__id(struct dict_xlate *x, enum dict_kind k, uint32_t id)
{
	int64_t t;

	if (id >= x->n[k])
		return -EINVAL;
	if (x->ids[k].ids[id] != DICT_UNSET)
		return x->ids[k].ids[id];
	t = x->fn[k](x, id);
	if (t >= 0)
		x->ids[k].ids[id] = (uint32_t)t;
	return t;
}

/*
 * Translates the n source ids of kind k at src (need not be aligned: they
 * may come from a byte arena) into out, in order: a stack's frames, a
 * series' label strings. Returns 0 or the first error.
 */
int dict_xlate__ids(struct dict_xlate *x, enum dict_kind k, const void *src, size_t n,
		    uint32_t *out);

struct batch;

/* Sets n to the number of entries of each kind in b's dictionary. */
void dict_xlate__batch_counts(struct dict_xlate *x, const struct batch *b);

#endif
