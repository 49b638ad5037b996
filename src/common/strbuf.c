// SPDX-License-Identifier: Apache-2.0
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

static bool _reserve(struct strbuf *sb, size_t more)
{
	size_t cap;
	char *p;

	if (sb->oom)
		return false;
	if (sb->len + more + 1 <= sb->cap)
		return true;
	cap = sb->cap ? sb->cap : 256;
	while (cap < sb->len + more + 1)
		cap *= 2;
	p = realloc(sb->buf, cap);
	if (!p) {
		sb->oom = true;
		return false;
	}
	sb->buf = p;
	sb->cap = cap;
	return true;
}

void strbuf__append(struct strbuf *sb, const void *data, size_t len)
{
	if (!_reserve(sb, len))
		return;
	memcpy(sb->buf + sb->len, data, len);
	sb->len += len;
	sb->buf[sb->len] = '\0';
}

void strbuf__puts(struct strbuf *sb, const char *s)
{
	strbuf__append(sb, s, strlen(s));
}

void strbuf__putc(struct strbuf *sb, char c)
{
	strbuf__append(sb, &c, 1);
}

void strbuf__printf(struct strbuf *sb, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !_reserve(sb, n))
		return;
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, n + 1, fmt, ap);
	va_end(ap);
	sb->len += n;
}

/* Length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0. */
static size_t _utf8_len(const unsigned char *p)
{
	size_t n;
	uint32_t cp;

	if (p[0] >= 0xc2 && p[0] <= 0xdf) {
		n = 2;
		cp = p[0] & 0x1f;
	} else if (p[0] >= 0xe0 && p[0] <= 0xef) {
		n = 3;
		cp = p[0] & 0x0f;
	} else if (p[0] >= 0xf0 && p[0] <= 0xf4) {
		n = 4;
		cp = p[0] & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
	}
	/* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
	if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return n;
}

void strbuf__json_string(struct strbuf *sb, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	strbuf__putc(sb, '"');
	for (; *p; p++) {
		switch (*p) {
		case '"':
			strbuf__puts(sb, "\\\"");
			break;
		case '\\':
			strbuf__puts(sb, "\\\\");
			break;
		case '\n':
			strbuf__puts(sb, "\\n");
			break;
		case '\t':
			strbuf__puts(sb, "\\t");
			break;
		case '\r':
			strbuf__puts(sb, "\\r");
			break;
		default:
			if (*p < 0x20) {
				strbuf__printf(sb, "\\u%04x", *p);
			} else if (*p < 0x80) {
				strbuf__putc(sb, *p);
			} else {
				size_t n = _utf8_len(p);

				/* Symbol names are bytes: invalid UTF-8 becomes U+FFFD. */
				if (n) {
					strbuf__append(sb, p, n);
					p += n - 1;
				} else {
					strbuf__puts(sb, "\xef\xbf\xbd");
				}
			}
		}
	}
	strbuf__putc(sb, '"');
}

void strbuf__release(struct strbuf *sb)
{
	free(sb->buf);
	*sb = (struct strbuf)STRBUF_INIT;
}

char *strbuf__detach(struct strbuf *sb, size_t *len)
{
	char *p = sb->buf;

	if (len)
		*len = sb->len;
	*sb = (struct strbuf)STRBUF_INIT;
	return p;
}
