// SPDX-License-Identifier: Apache-2.0
/*
 * The write side of the API: agent batches, and folded stacks from other
 * tools. Nothing is stored unless the whole request is valid; the reply is
 * sent only once the store has made the data durable.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "common/batch.h"
#include "common/decompress.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/folded_read.h"
#include "format/pprof_read.h"
#include "format/wire.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

#define MAX_LABELS 32
#define MAX_FOLDED_BYTES (64u << 20)	/* decompressed */
#define BODY_TRIM_BYTES (1u << 20)
/*
 * A session no batch used for this long is forgotten: its agent stopped,
 * or lost its connection for longer than a resend of its dictionary costs.
 */
#define SESSION_MAX_IDLE_NS (3600ull * 1000000000ull)
/* At most one line a minute about sessions forgotten for the budget. */
#define SESSION_LOG_EVERY_S 60

static int _body(struct request *r, const void **data, size_t *len)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(r->req);

	*len = evbuffer_get_length(in);
	*data = *len ? (const void *)evbuffer_pullup(in, -1) : (const void *)"";
	if (!*data) {
		request__error(r, 500, "out of memory");
		return -1;
	}
	/*
	 * The copy freed the chains the body was read into, scattered through
	 * the heap: give their pages back, or each large body leaves its size
	 * behind in the server's RSS.
	 */
	if (*len >= BODY_TRIM_BYTES)
		malloc_trim(0);
	return 0;
}

static int _compression(struct request *r, enum wire_compression *c)
{
	const char *enc = evhttp_find_header(evhttp_request_get_input_headers(r->req),
					     "Content-Encoding");

	if (!enc || !strcmp(enc, "identity"))
		*c = WIRE_NONE;
	else if (!strcmp(enc, "gzip"))
		*c = WIRE_GZIP;
	else if (!strcmp(enc, "zstd"))
		*c = WIRE_ZSTD;
	else {
		request__error(r, 415, "Content-Encoding '%s' is not one of gzip, zstd, identity", enc);
		return -1;
	}
	return 0;
}

static int _store(struct request *r, const char *node, const struct batch *b, size_t body_len)
{
	/*
	 * Metric points first: their write is idempotent, so when the samples
	 * then fail and the agent sends the batch again nothing is doubled.
	 */
	int err = store__write_metrics(r->srv->store, node, b);

	if (err) {
		pr_warn("store: cannot write %u metric points from %s: %s\n", b->nmetrics, node,
			strerror(-err));
		request__error(r, err == -ENOSPC ? 507 : 503, "store: %s", strerror(-err));
		return -1;
	}
	err = store__write(r->srv->store, node, b);

	if (err) {
		pr_warn("store: cannot write a batch of %u samples from %s: %s\n", b->nsamples,
			node, strerror(-err));
		request__error(r, err == -ENOSPC ? 507 : 503, "store: %s", strerror(-err));
		return -1;
	}
	r->srv->metrics.ingest_bytes += body_len;
	r->srv->metrics.ingest_samples += b->nsamples;
	r->srv->metrics.ingest_batches++;
	return 0;
}

/*
 * Sessions forgotten for the budget cost their agents a resend of their
 * dictionaries: say so, with what would stop it, but not once per batch.
 */
static void _log_sessions(struct server *srv)
{
	struct wire_session_stats st;
	struct timespec now;
	uint64_t n;

	wire_sessions__stats(srv->sessions, &st);
	n = st.forgotten[WIRE_FORGOT_BUDGET] - srv->sessions_logged;
	if (!n)
		return;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (srv->sessions_log_s && now.tv_sec - srv->sessions_log_s < SESSION_LOG_EVERY_S)
		return;
	pr_warn("ingest: forgot %llu agent session%s to keep session dictionaries within "
		"--max-session-memory (%.1f of %.1f MiB held, %zu sessions); their agents send "
		"their dictionaries again; raise --max-session-memory if this goes on\n",
		(unsigned long long)n, n == 1 ? "" : "s", st.bytes / 1048576.0,
		st.max_bytes / 1048576.0, st.sessions);
	srv->sessions_logged = st.forgotten[WIRE_FORGOT_BUDGET];
	srv->sessions_log_s = now.tv_sec ? now.tv_sec : 1;
}

/*
 * The agent recognises a lost session by the 409 itself (for a batch that
 * built on a dictionary base); "session": "unknown" says it to anyone else
 * reading the answer.
 */
static void _reply_stale(struct request *r, const char *err)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf__puts(&sb, "{\"error\":");
	strbuf__json_string(&sb, err);
	strbuf__puts(&sb, ",\"session\":\"unknown\"}\n");
	request__reply_json(r, 409, &sb);
	strbuf__release(&sb);
}

void routes__ingest(struct request *r)
{
	struct wire_limits lim = wire_limits__default();
	enum wire_compression comp;
	struct batch *b = NULL;
	struct strbuf sb = STRBUF_INIT;
	char node[256], err[256];
	const void *body;
	uint64_t seq = 0;
	size_t len;
	int ret;

	if (_compression(r, &comp) || _body(r, &body, &len))
		return;
	lim.max_body = r->srv->max_body;
	wire_sessions__expire(r->srv->sessions, SESSION_MAX_IDLE_NS);
	ret = wire__decode(r->srv->sessions, body, len, comp, &lim, &b, node, sizeof(node), &seq,
			   err, sizeof(err));
	if (ret) {
		if (ret == -E2BIG) {
			r->srv->metrics.ingest_rejected_limits++;
			request__error(r, 413, "%s", err);
		} else if (ret == -ESTALE) {
			r->srv->metrics.ingest_session_unknown++;
			_reply_stale(r, err);
		} else if (ret == -ENOMEM) {
			/* Ours, not the agent's: it should try again later. */
			request__error(r, 503, "%s", err);
		} else {
			r->srv->metrics.ingest_rejected_invalid++;
			request__error(r, 400, "%s", err);
		}
		return;
	}
	_log_sessions(r->srv);
	if (_store(r, node, b, len) == 0) {
		strbuf__printf(&sb, "{\"seq\":%llu,\"samples\":%u}\n", (unsigned long long)seq,
			       b->nsamples);
		request__reply_json(r, 200, &sb);
	}
	strbuf__release(&sb);
	batch__free(b);
}

/*
 * ?labels={service="api",region="eu"}: the series every ingested sample
 * belongs to. Only equality matchers make sense here.
 */
static int _labels(struct request *r, const char **names, const char **values, size_t *n,
		   struct selector **sel)
{
	const char *text = evhttp_find_header(&r->params, "labels");
	char err[256];

	*n = 0;
	*sel = NULL;
	if (!text)
		return 0;
	*sel = selector__parse(text, err, sizeof(err));
	if (!*sel) {
		request__error(r, 400, "labels: %s", err);
		return -1;
	}
	if (selector__count(*sel) > MAX_LABELS - 2) {
		request__error(r, 400, "labels: at most %d labels", MAX_LABELS - 2);
		return -1;
	}
	for (size_t i = 0; i < selector__count(*sel); i++) {
		const struct selector_matcher *m = selector__matcher(*sel, i);

		if (m->op != SEL_EQ) {
			request__error(r, 400, "labels: only name=\"value\" pairs, not matchers");
			return -1;
		}
		if (!strcmp(m->name, "comm") || !strcmp(m->name, "node")) {
			request__error(r, 400, "labels: '%s' is set by the server", m->name);
			return -1;
		}
		names[*n] = m->name;
		values[*n] = m->value;
		(*n)++;
	}
	return 0;
}

void routes__ingest_folded(struct request *r)
{
	const char *names[MAX_LABELS], *values[MAX_LABELS];
	const char *node;
	struct selector *sel = NULL;
	struct strbuf sb = STRBUF_INIT;
	struct batch *b = NULL;
	char err[256];
	enum wire_compression comp;
	uint8_t *plain = NULL;
	const void *body;
	size_t len, nlabels;
	struct timespec now;
	int ret;

	if (request__text_param(r, "node", PARAM_MAX_NODE_LEN, &node) ||
	    _labels(r, names, values, &nlabels, &sel) || _compression(r, &comp) ||
	    _body(r, &body, &len))
		goto out;
	if (comp != WIRE_NONE) {
		ret = comp == WIRE_GZIP ?
		      decompress__gzip(body, len, MAX_FOLDED_BYTES, &plain, &len, err, sizeof(err)) :
		      decompress__zstd(body, len, MAX_FOLDED_BYTES, &plain, &len, err, sizeof(err));
		if (ret) {
			r->srv->metrics.ingest_rejected_limits += ret == -E2BIG;
			request__error(r, ret == -E2BIG ? 413 : 400, "%s", err);
			goto out;
		}
		body = plain;
	}
	b = batch__new(1000000000ULL / 19);
	if (!b) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	ret = folded__read(body, len, names, values, nlabels,
			   (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec, b, err, sizeof(err));
	if (ret) {
		r->srv->metrics.ingest_rejected_invalid += ret != -ENOMEM && ret != -E2BIG;
		r->srv->metrics.ingest_rejected_limits += ret == -E2BIG;
		request__error(r, ret == -ENOMEM ? 503 : ret == -E2BIG ? 413 : 400, "%s", err);
		goto out;
	}
	if (_store(r, node && node[0] ? node : "folded", b, len) == 0) {
		strbuf__printf(&sb, "{\"samples\":%u}\n", b->nsamples);
		request__reply_json(r, 200, &sb);
	}
out:
	strbuf__release(&sb);
	selector__free(sel);
	batch__free(b);
	free(plain);
}

void routes__ingest_pprof(struct request *r)
{
	const char *names[MAX_LABELS], *values[MAX_LABELS];
	const char *node;
	struct pprof_read_limits lim = pprof_read_limits__default();
	struct selector *sel = NULL;
	struct strbuf sb = STRBUF_INIT;
	struct batch *b = NULL;
	struct timespec now;
	char err[256];
	const void *body;
	size_t len, nlabels;
	int ret;

	if (request__text_param(r, "node", PARAM_MAX_NODE_LEN, &node) ||
	    _labels(r, names, values, &nlabels, &sel) || _body(r, &body, &len))
		goto out;
	b = batch__new(1000000000ULL / 19);
	if (!b) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	ret = pprof__read(body, len, &lim, names, values, nlabels,
			  (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec, b, err, sizeof(err));
	if (ret) {
		if (ret == -E2BIG)
			r->srv->metrics.ingest_rejected_limits++;
		else
			r->srv->metrics.ingest_rejected_invalid++;
		request__error(r, ret == -E2BIG ? 413 : ret == -ENOMEM ? 503 : 400, "%s", err);
		goto out;
	}
	if (_store(r, node && node[0] ? node : "pprof", b, len) == 0) {
		strbuf__printf(&sb, "{\"samples\":%u}\n", b->nsamples);
		request__reply_json(r, 200, &sb);
	}
out:
	strbuf__release(&sb);
	selector__free(sel);
	batch__free(b);
}
