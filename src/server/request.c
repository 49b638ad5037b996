// SPDX-License-Identifier: Apache-2.0
/*
 * The helpers every route uses to read its request and reply: kept apart
 * from server.c, which dispatches to the routes, so that the routes depend
 * on this file and not on the server that calls them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "common/batch.h"
#include "common/strbuf.h"
#include "server/request.h"
#include "store/selector.h"

void request__reply(struct request *r, int status, const char *content_type,
		    const void *body, size_t len)
{
	struct evbuffer *buf = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);

	r->status = status;
	if (content_type)
		evhttp_add_header(h, "Content-Type", content_type);
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (buf && len)
		evbuffer_add(buf, body, len);
	evhttp_send_reply(r->req, status, NULL, buf);
	if (buf)
		evbuffer_free(buf);
}

void request__reply_json(struct request *r, int status, struct strbuf *body)
{
	if (body->oom) {
		request__error(r, 500, "out of memory");
		return;
	}
	request__reply(r, status, "application/json", body->buf, body->len);
}

void request__error(struct request *r, int status, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	strbuf__puts(&sb, "{\"error\":");
	strbuf__json_string(&sb, msg);
	strbuf__puts(&sb, "}\n");
	request__reply(r, status, "application/json", sb.buf, sb.len);
	strbuf__release(&sb);
}

const char *request__param(struct request *r, const char *name)
{
	return evhttp_find_header(&r->params, name);
}

int request__selector(struct request *r, struct selector **sel)
{
	const char *q = request__param(r, "query");
	char err[256];

	*sel = NULL;
	if (!q || !q[0])
		return 0;
	*sel = selector__parse(q, err, sizeof(err));
	if (!*sel) {
		request__error(r, 400, "query: %s", err);
		return -1;
	}
	return 0;
}

int request__type(struct request *r, uint32_t *type)
{
	const char *t = request__param(r, "type");

	if (!t || !strcmp(t, "cpu")) {
		*type = SAMPLE_CPU;
	} else if (!strcmp(t, "gpu_time")) {
		*type = SAMPLE_GPU_TIME;
	} else if (!strcmp(t, "offcpu")) {
		*type = SAMPLE_OFFCPU;
	} else {
		request__error(r, 400, "type: '%.64s' is not one of cpu, gpu_time, offcpu", t);
		return -1;
	}
	return 0;
}

int request__window(struct request *r, int64_t *from, int64_t *to)
{
	const char *f = request__param(r, "from"), *t = request__param(r, "to");

	if (param__parse_time(t ? t : "now", to)) {
		request__error(r, 400, "to: '%.64s' is not a time up to 2200-01-01 (Unix seconds, "
			       "RFC 3339 or now-1h)", t ? t : "now");
		return -1;
	}
	if (f) {
		if (param__parse_time(f, from)) {
			request__error(r, 400, "from: '%.64s' is not a time up to 2200-01-01 (Unix "
				       "seconds, RFC 3339 or now-1h)", f);
			return -1;
		}
	} else {
		*from = *to > 3600LL * 1000000000LL ? *to - 3600LL * 1000000000LL : 0;
	}
	if (*from >= *to) {
		request__error(r, 400, "from must be before to");
		return -1;
	}
	return 0;
}
