/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_STRBUF_H
#define FW_COMMON_STRBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

/*
 * A growable byte buffer, always NUL-terminated. An allocation failure is
 * remembered (oom) and makes later appends no-ops, so a writer can append
 * a whole document and check once at the end.
 */
struct strbuf {
	char *buf;
	size_t len, cap;
	bool oom;
};

#define STRBUF_INIT { 0 }

void strbuf__append(struct strbuf *sb, const void *data, size_t len);
void strbuf__puts(struct strbuf *sb, const char *s);
void strbuf__putc(struct strbuf *sb, char c);
void strbuf__printf(struct strbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes included. */
void strbuf__json_string(struct strbuf *sb, const char *s);
/* Frees the buffer and resets sb to empty. */
void strbuf__release(struct strbuf *sb);
/* Hands the buffer to the caller (free() it); sb becomes empty. */
char *strbuf__detach(struct strbuf *sb, size_t *len);

#endif
