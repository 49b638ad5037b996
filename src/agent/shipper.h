/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_SHIPPER_H
#define FW_AGENT_SHIPPER_H

#include <stddef.h>
#include <stdint.h>

/*
 * Ships batches to a server (POST /api/v1/ingest, zstd, bearer token), one
 * request at a time, oldest first. Batches wait in memory in their decoded
 * form, so that they can be encoded again after the server has lost our
 * session (a restart): nothing kept is ever made unreadable. They are
 * compacted when queued and count against the cap by the bytes they then
 * hold. While the server is unreachable the queue grows up to its cap,
 * then the oldest batches are dropped, counted and logged; retries back
 * off from 1 s to 60 s.
 * Over https:// the server's certificate must chain to the CA file (or the
 * system's trust store) and name the URL's host; a failed check is a
 * failed delivery like any other, so batches wait for a fixed setup.
 */
struct batch;
struct event_base;
struct shipper;

/*
 * The session dictionary grows with every process that is sampled (its
 * series: pid, comm, exe) and every new stack; past this cap the next
 * batch starts a new session and re-sends only what it refers to. The
 * encoder keeps what the server acknowledged as hashes, not keys
 * (format/wire/keys.c), so the cap counts entries, not their text; it
 * bounds the agent's memory whatever the fleet. A larger one makes resets
 * rarer where nodes run many distinct stacks, but the server holds
 * several times an agent's bytes per session, so it fills the server's
 * session budget with fewer agents (bench/README.md, issue 28).
 * Public so that bench/ingest_bench.c plays agents with the same cap.
 */
#define SHIPPER_DICT_MAX_BYTES (2u << 20)

struct shipper_opts {
	const char *url;	/* http[s]://HOST:PORT (a path prefix is allowed) */
	const char *ca_file;	/* https: trusted CAs (PEM); NULL: the system's store */
	const char *token;	/* NULL: no Authorization header */
	const char *node;
	size_t max_buffer;	/* bytes of queued batches */
};

struct shipper_stats {
	uint64_t batches_sent, samples_sent, bytes_sent;
	uint64_t batches_dropped, samples_dropped;	/* over the buffer cap */
	uint64_t batches_rejected;			/* the server refused them (4xx) */
	uint64_t failures;				/* requests that will be retried */
	uint64_t sessions_reset;
	uint64_t queued_batches, queued_samples, queued_bytes;
	uint64_t max_bytes;				/* the cap on queued_bytes */
};

/* Borrows base. Returns NULL with errno set and a message in err. */
struct shipper *shipper__new(struct event_base *base, const struct shipper_opts *o,
			     char *err, size_t err_len);
/* Drops whatever is still queued. Accepts NULL. */
void shipper__free(struct shipper *s);
/* Consumes b: queues it and sends when the connection is free. */
void shipper__push(struct shipper *s, struct batch *b);
/* True when nothing is queued or in flight. */
int shipper__idle(const struct shipper *s);
/*
 * For a stop: from now on the queue goes out at once, batch after batch,
 * without waiting out the backoff. An answer that asks to come back later
 * (5xx, 408, 429) is tried again after a short pause; no answer twice in a
 * row (connection refused, reset, a failed TLS check), or one that trying
 * again cannot change (401, 403, ...), ends the drain: the rest cannot be
 * delivered in the little time a stop has. When the drain is over, all
 * delivered or given up, it breaks the event loop: the caller dispatches
 * until then or until its own deadline.
 */
void shipper__drain(struct shipper *s);
/* Why the drain gave up, or NULL (it goes on, or everything was delivered). Borrowed. */
const char *shipper__gave_up(const struct shipper *s);
void shipper__stats(const struct shipper *s, struct shipper_stats *out);

#endif
