/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_WIRE_H
#define FW_FORMAT_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The agent -> server batch format (src/format/wire.proto documents the
 * bytes and the session dictionary). An agent keeps one wire_encoder per
 * server connection; the server keeps one wire_session_table for all
 * agents. Neither is thread-safe: callers serialise calls on one object.
 *
 * Errors the decoder returns, and the HTTP status a server answers with:
 *   -E2BIG            body, decompressed body or unpacked message over a limit (413)
 *   -EBADMSG          not gzip/zstd/protobuf, or truncated (400)
 *   -EPROTONOSUPPORT  a batch version this server does not know (400)
 *   -EINVAL           well-formed but invalid content: ids out of range, a
 *                     limit exceeded, a bad timestamp, ... (400)
 *   -ESTALE           the server lacks dictionary entries the batch builds
 *                     on (409): it forgot the session (budget, age, a
 *                     restart). The agent calls wire_encoder__reset() and
 *                     encodes the batch again; a batch without a base
 *                     (!wire_encoder__has_base()) cannot get this
 *   -ENOMEM           (503)
 */

enum wire_compression {
	WIRE_NONE = 0,
	WIRE_GZIP = 1,
	WIRE_ZSTD = 2,
};

#define WIRE_VERSION 1
/* Default cap on an encoder's dictionary; see wire_encoder__set_max_bytes(). */
#define WIRE_ENCODER_MAX_BYTES (8u << 20)

struct batch;
struct wire_encoder;
struct wire_session_table;

/* ---- agent side ---------------------------------------------------------- */

/*
 * Returns an encoder for a new session, or NULL with errno set. session_id
 * should be random (getrandom()): the server keys dictionaries by it.
 */
struct wire_encoder *wire_encoder__new(uint64_t session_id);
/* Accepts NULL. */
void wire_encoder__free(struct wire_encoder *e);

/*
 * Encodes b as the next batch of the session: adds what b's samples refer
 * to (and only that) to the session dictionary, then writes every
 * dictionary entry not yet acknowledged, and b's samples ordered by time.
 * b's unreferenced dictionary entries are not sent. When the dictionary
 * is over the cap before encoding, the encoder first starts a new session
 * (as wire_encoder__reset() does).
 *
 * Borrows node and b. On success *out receives an owned buffer of *out_len
 * bytes (free() it) and wire_encoder__seq() the batch's sequence number.
 * Returns 0, -EINVAL (an id in b out of range, an unknown compression),
 * -E2BIG (more than UINT32_MAX entries) or -ENOMEM.
 */
int wire_encoder__encode(struct wire_encoder *e, const char *node, const struct batch *b,
			 enum wire_compression c, void **out, size_t *out_len);

/*
 * The server accepted batch seq: it holds every dictionary entry that batch
 * carried. Later batches build on them and stop sending them. An ack of a
 * batch of an earlier session, or of one that is no longer remembered (the
 * encoder remembers the last 1024 unacknowledged batches), changes nothing.
 */
void wire_encoder__ack(struct wire_encoder *e, uint64_t seq);

/*
 * The server lost the session (it answered -ESTALE/409): forget the
 * dictionary and start a new session id (a hash of the old one), so the
 * next batch carries everything it needs. Batches encoded before the reset
 * cannot be decoded any more; encode them again. Sequence numbers go on.
 * The new session's batches name the old one (ends_session) until one is
 * acknowledged, so that the server can free it at once; the cap's resets
 * in wire_encoder__encode() do the same.
 */
void wire_encoder__reset(struct wire_encoder *e);
/*
 * True when the next batch would build on entries the server acknowledged
 * (a dictionary base), so that a server which forgot the session answers
 * it -ESTALE/409. A batch encoded without one is self-contained: a 409 for
 * it is not a lost session, and another reset would not help.
 */
bool wire_encoder__has_base(const struct wire_encoder *e);

/* Caps the dictionary's memory (default WIRE_ENCODER_MAX_BYTES). */
void wire_encoder__set_max_bytes(struct wire_encoder *e, size_t max_bytes);
uint64_t wire_encoder__session(const struct wire_encoder *e);
/* The sequence number of the last batch encoded, 0 before the first. */
uint64_t wire_encoder__seq(const struct wire_encoder *e);
/* Bytes held by the dictionary and the bookkeeping of unacked batches. */
size_t wire_encoder__memory(const struct wire_encoder *e);

/* ---- server side --------------------------------------------------------- */

struct wire_limits {
	size_t max_body;		/* compressed bytes */
	size_t max_decompressed;	/* bytes after gzip/zstd */
	size_t max_unpacked;		/* memory for the unpacked protobuf message */
	size_t max_samples;		/* per batch; also caps its metric points and CPU intervals */
	size_t max_stack_depth;		/* frames per stack; deeper ones are cut to their
					 * max_stack_depth - 1 root-most frames and a
					 * "[truncated]" leaf frame */
	size_t max_labels;		/* label pairs per series */
	size_t max_string;		/* bytes per string, and of the node name */
	int64_t max_future_ns;		/* how far past the server's clock a sample may lie */
};

/*
 * max_body 8 MiB, max_decompressed 32 MiB, max_unpacked 128 MiB,
 * max_samples 1,000,000, max_stack_depth 1024, max_labels 64,
 * max_string 16 KiB, max_future_ns 1 day. Samples before 2000-01-01 are
 * always rejected.
 */
struct wire_limits wire_limits__default(void);

/*
 * Returns an empty table that holds the dictionaries of at most
 * max_sessions sessions using at most about max_bytes, evicting the least
 * recently used session when either is exceeded (its agent then gets
 * -ESTALE and starts over); or NULL with errno set (EINVAL: max_sessions 0
 * or over 2^24). Work is never refused for the budget: a batch that fits
 * the limits is accepted, and a session alone over max_bytes is forgotten
 * right after its batch.
 */
struct wire_session_table *wire_sessions__new(size_t max_sessions, size_t max_bytes);
/* Accepts NULL. */
void wire_sessions__free(struct wire_session_table *t);
size_t wire_sessions__count(const struct wire_session_table *t);
/* Bytes held by all session dictionaries. */
size_t wire_sessions__memory(const struct wire_session_table *t);

/*
 * Forgets the sessions that no batch used for more than max_idle_ns (an
 * agent that stopped, or one that started a new session without saying
 * so). Returns how many went. Their agents, should they come back, get
 * -ESTALE and resend what they need.
 */
size_t wire_sessions__expire(struct wire_session_table *t, uint64_t max_idle_ns);

/* Why a session was forgotten. */
enum wire_forgot {
	WIRE_FORGOT_BUDGET,	/* least recently used, over max_bytes or max_sessions */
	WIRE_FORGOT_ENDED,	/* its agent started another and said so (ends_session) */
	WIRE_FORGOT_IDLE,	/* wire_sessions__expire() */
	WIRE_FORGOT_MAX,
};

struct wire_session_stats {
	size_t sessions, max_sessions;
	size_t bytes, max_bytes;
	uint64_t forgotten[WIRE_FORGOT_MAX];	/* since the table was made, by reason */
};

void wire_sessions__stats(const struct wire_session_table *t, struct wire_session_stats *out);

/*
 * Decodes one ingest body compressed with c, checking it against lim (NULL:
 * the defaults). On success *out receives an owned batch (batch__free()
 * it) whose dictionary is the session's, shared by every batch of the
 * session (struct batch's dict_id): append-only, so the batch stays valid
 * after the session is evicted or grows, but it must not be read while
 * another wire__decode() on t runs. Node receives its node name (node_len
 * bytes at most, NUL included) and *seq its sequence number; the batch's
 * dictionary additions become part of its session. On failure nothing
 * changes: no session is created, extended or evicted, *out is NULL, and
 * err (err_len bytes, may be 0) says why. Returns 0 or one of the errors
 * listed at the top of this file.
 *
 * Borrows t (modified), body, lim.
 */
int wire__decode(struct wire_session_table *t, const void *body, size_t len,
		 enum wire_compression c, const struct wire_limits *lim,
		 struct batch **out, char *node, size_t node_len, uint64_t *seq,
		 char *err, size_t err_len);

#endif
