/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the files of src/format/wire share and nothing outside uses: the
 * dictionary kinds and frame key both ends agree on (encode.c, decode*.c),
 * a session as the server keeps it (session.c) and the decoder's state
 * (decode.c, and outmap.c for the ids of the batches it builds). The
 * public API is format/wire.h.
 */
#ifndef FW_FORMAT_WIRE_INT_H
#define FW_FORMAT_WIRE_INT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/batch.h"
#include "common/dict_xlate.h"
#include "common/profile.h"
#include "format/wire.h"
#include "wire.pb-c.h"


/*
 * The five dictionary kinds, in the order a batch lists them: each may only
 * refer to kinds before it. They are common/dict_xlate.h's, with which the
 * encoder and outmap.c translate ids.
 */
#define K_STRING	DICT_STRING
#define K_MAPPING	DICT_MAPPING
#define K_FRAME		DICT_FRAME
#define K_STACK		DICT_STACK
#define K_SERIES	DICT_SERIES
#define K_MAX		DICT_NKINDS

/*
 * A frame as both ends key and keep it. The name is part of the key: a JIT
 * can put another function at the same address later, and that must become
 * another global frame rather than rename the old one under the server.
 */
struct wire_frame {
	uint32_t kind;
	uint32_t mapping;	/* mapping id + 1; 0: none */
	uint64_t addr;
	uint32_t function, file, line, pad;
};

/* Keys come out of byte arenas that do not keep them aligned. */
static inline uint32_t _u32_at(const void *p, size_t i)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)p + i * sizeof(v), sizeof(v));
	return v;
}

/* ---- encoder (keys.c, compress.c) ---------------------------------------- */

/*
 * One kind of the encoder's session dictionary: keys to dense ids 0, 1,
 * ... in insertion order, each entry known by a 128-bit keyed hash of its
 * key, with the key bytes kept only for ids from first on (those the
 * server has not acknowledged, which batches still send). keys.c says why.
 */
struct wire_hash {
	uint64_t lo, hi;
};

struct wire_keys {
	uint64_t sip[2];		/* SipHash key */
	struct wire_hash *h;		/* per id */
	uint32_t n, cap;
	uint32_t *slots;		/* id + 1, 0: empty; open addressing */
	uint32_t nslots;		/* a power of two */
	uint32_t first;			/* first id whose key is held */
	uint8_t *bytes;			/* keys of ids first.. n - 1, back to back */
	size_t len, cap_bytes;
	size_t *end;			/* end[id - first]: offset just past its key */
	size_t cap_end;
};

/* SipHash-2-4 with 128 bits of output, as its authors define it. */
void wire__siphash128(const uint64_t key[2], const void *data, size_t len, uint64_t out[2]);

/* sip_key NULL: a random one. 0 or -ENOMEM. */
int wire_keys__init(struct wire_keys *t, const uint64_t *sip_key);
void wire_keys__release(struct wire_keys *t);
/* The id of key, added if it is new. -E2BIG (UINT32_MAX - 1 entries) or -ENOMEM. */
int64_t wire_keys__add(struct wire_keys *t, const void *key, size_t len);
/* Borrows the key of id (first <= id < n) until the next add or forget. */
const void *wire_keys__key(const struct wire_keys *t, uint32_t id, size_t *len);
/* Drops the keys of ids below upto (the server holds them). */
void wire_keys__forget(struct wire_keys *t, uint32_t upto);
size_t wire_keys__memory(const struct wire_keys *t);

static inline uint32_t wire_keys__count(const struct wire_keys *t)
{
	return t->n;
}

/* Consumes in; on success *out is in itself (WIRE_NONE) or a new buffer. */
int wire__compress(enum wire_compression c, uint8_t *in, size_t len, void **out, size_t *out_len);

/* ---- session table (session.c) ------------------------------------------- */

/*
 * The session's dictionary as a struct profile and series table, which the
 * batches handed out share (struct batch's dict_id): translating an entry
 * costs once per session instead of once per batch, and a store can keep
 * its own translation by dict_id. Reference counted, because a batch may
 * outlive its session's eviction.
 */
struct wire_sdict {
	unsigned refs;
	uint64_t id;
	struct batch *b;	/* owns dict and series; holds no records */
};

/* A new shared dictionary with one reference, or NULL. */
struct wire_sdict *wire_sdict__new(void);
/* Drops a reference (owner: a struct wire_sdict); the last one frees it. */
void wire_sdict__unref(void *owner);

/*
 * A session on the server: its entries are in the shared dictionary sd,
 * and om maps each kind's session ids (0, 1, ... as the agent numbered
 * them) to ids there; om[k].n is how many entries of kind k it holds. A
 * batch refused half way is forgotten by cutting om back.
 */
struct wire_session {
	uint64_t id;
	char *node;
	struct wire_sdict *sd;
	struct dict_ids om[K_MAX];
	size_t bytes;			/* as counted in the table's total */
	uint64_t used_ns;		/* CLOCK_MONOTONIC of the last batch accepted */
	struct wire_session *newer, *older;
	struct wire_session *hnext;
};

/* The session with id, or NULL. Borrowed. */
struct wire_session *wire_sessions__find(struct wire_session_table *t, uint64_t id);
/*
 * Called once a batch is accepted. The session just used goes last: it is
 * only evicted when it alone is over max_bytes, and then its agent starts a
 * smaller session after the next -ESTALE.
 */
void wire_sessions__commit(struct wire_session_table *t, struct wire_session *s, bool is_new);
/*
 * The agent of node says it gave session id up (Batch.ends_session): it is
 * forgotten now rather than when the budget or age would push it out.
 * Another node's session with that id is left alone. True when one went.
 */
bool wire_sessions__end(struct wire_session_table *t, uint64_t id, const char *node);
/* Frees a session that is not in a table. Accepts NULL. */
void wire_session__free(struct wire_session *s);

/* ---- decoder (decode.c, outmap.c) ---------------------------------------- */

struct dec {
	const struct wire_limits *lim;
	char *err;
	size_t err_len;
	const Flamewatch__Wire__Batch *m;
	struct wire_session *s;
	struct batch *out;
	uint32_t *scratch;
	const char **names, **values;
	size_t cap_scratch, cap_labels;
};

/*
 * The id in the shared dictionary (d->out->dict) of the session's entry
 * gid of kind k, or -EINVAL past the entries the session holds.
 */
static inline int64_t _d_om(const struct dec *d, int k, uint32_t gid)
{
	return gid < d->s->om[k].n ? (int64_t)d->s->om[k].ids[gid] : -EINVAL;
}

/* The id in the shared dictionary of session string gid (< om[K_STRING].n). */
static inline uint32_t _d_om_string(const struct dec *d, uint32_t gid)
{
	return d->s->om[K_STRING].ids[gid];
}

/* The text of session string gid (< om[K_STRING].n). */
static inline const char *_d_string(struct dec *d, uint32_t gid)
{
	return profile__string(d->out->dict, _d_om_string(d, gid));
}

/*
 * A stack of n session frame ids, and a series of n (name, value) pairs of
 * session string ids, put into the shared dictionary: their ids there, or
 * -ENOMEM. Frames past the limit's depth become one "[truncated]" frame.
 */
int64_t wire_out__stack(struct dec *d, const uint32_t *frames, size_t n);
int64_t wire_out__series(struct dec *d, const uint32_t *labels, size_t n);

#endif
