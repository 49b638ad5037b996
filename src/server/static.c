// SPDX-License-Identifier: Apache-2.0
/*
 * The web UI's files at / and /ui/NAME, from the table compiled into the
 * binary. Only names in that table exist: nothing is read from disk, so no
 * path can reach outside it, and anything that looks like an attempt
 * (dot segments, escapes, subdirectories) gets a plain 400.
 */
#include <string.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "server/request.h"
#include "server/ui_assets.h"
#include "server/static.h"

bool static__is_ui_path(const char *path)
{
	return !strcmp(path, "/") || !strcmp(path, "/ui") || !strncmp(path, "/ui/", 4) ||
	       !strcmp(path, "/favicon.ico");
}

static const struct ui_asset *_find(const char *name)
{
	for (unsigned int i = 0; i < ui_nassets; i++)
		if (!strcmp(ui_assets[i].name, name))
			return &ui_assets[i];
	return NULL;
}

/* True when the Accept-Encoding list names gzip with a non-zero q. */
static bool _accepts_gzip(struct evhttp_request *req)
{
	const char *ae = evhttp_find_header(evhttp_request_get_input_headers(req),
					    "Accept-Encoding");
	const char *g;

	if (!ae)
		return false;
	for (g = strstr(ae, "gzip"); g; g = strstr(g + 4, "gzip")) {
		const char *end = strchr(g, ',');
		const char *q = strstr(g, "q=");

		if (q && (!end || q < end) && strspn(q + 2, "0.") == strcspn(q + 2, ", ;"))
			continue;	/* gzip;q=0 */
		return true;
	}
	return false;
}

void static__serve(struct request *r, const char *path)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);
	const char *name, *inm;
	const struct ui_asset *a;
	struct evbuffer *buf;
	bool gz;

	if (!strcmp(path, "/") || !strcmp(path, "/ui") || !strcmp(path, "/ui/"))
		name = "index.html";
	else if (!strcmp(path, "/favicon.ico"))
		name = "favicon.svg";
	else
		name = path + 4;
	if (strstr(name, "..") || strchr(name, '/') || strchr(name, '%') || strchr(name, '\\')) {
		request__error(r, 400, "bad UI path: %s", path);
		return;
	}
	a = _find(name);
	if (!a) {
		request__error(r, 404, "no such UI file: %s", path);
		return;
	}
	evhttp_add_header(h, "ETag", a->etag);
	/* Hashed names never change their bytes; index.html must be revalidated. */
	evhttp_add_header(h, "Cache-Control", a->immutable ? "public, max-age=31536000, immutable" :
			  "no-cache");
	evhttp_add_header(h, "Vary", "Accept-Encoding");
	evhttp_add_header(h, "X-Content-Type-Options", "nosniff");
	inm = evhttp_find_header(evhttp_request_get_input_headers(r->req), "If-None-Match");
	if (inm && !strcmp(inm, a->etag)) {
		r->status = 304;
		evhttp_send_reply(r->req, 304, "Not Modified", NULL);
		return;
	}
	evhttp_add_header(h, "Content-Type", a->content_type);
	gz = _accepts_gzip(r->req);
	if (gz)
		evhttp_add_header(h, "Content-Encoding", "gzip");
	buf = evbuffer_new();
	if (!buf) {
		request__error(r, 500, "out of memory");
		return;
	}
	/* The bytes live in the binary for good: no copy needed. */
	evbuffer_add_reference(buf, gz ? a->gzip : a->data, gz ? a->gzip_len : a->len, NULL, NULL);
	r->status = 200;
	evhttp_send_reply(r->req, 200, "OK", buf);
	evbuffer_free(buf);
}
