/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_SELECTOR_H
#define FW_STORE_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Prometheus-style label selectors, as the query API takes them:
 *
 *	{node="a",comm=~"python.*",pid="42",container!="",exe!~".*test.*"}
 *
 * Braces are optional; an empty or blank string and "{}" select everything.
 * Matchers are NAME OP "VALUE", separated by commas (a trailing comma is
 * allowed), with whitespace anywhere between tokens. NAME is
 * [a-zA-Z_][a-zA-Z0-9_]*. VALUE is double- or single-quoted with the escapes
 * \\ \" \' \n \t \xHH \uHHHH; raw control characters and NUL (also escaped)
 * are rejected, so the canonical text always fits on one line.
 *
 * Regexes (=~, !~) are POSIX extended and fully anchored, as in Prometheus:
 * =~"py" does not match "python". Backreferences and an unmatched ')' are
 * rejected (RE2, which Prometheus uses, has neither), and so is a
 * quantifier after a quantifier: "a**", and "a*?", whose laziness means
 * nothing when the whole value must match. Selectors come from HTTP
 * clients and glibc's compile and match cost
 * grows fast with nested repetition and optional parts, so the limits below
 * bound the expanded patterns (e.g. (a{100}){101}, (((a+)+)+...) or 300
 * times "a?" are refused). Values are compared as bytes; regex character
 * classes follow the process's LC_CTYPE.
 */
#define SELECTOR_MAX_MATCHERS	64
#define SELECTOR_MAX_NAME	128	/* bytes */
#define SELECTOR_MAX_VALUE	4096	/* bytes, after unescaping */
#define SELECTOR_MAX_TEXT	16384	/* bytes of input */
/* Regex limits; NODES and LOOPS count all regexes of a selector, expanded */
#define SELECTOR_MAX_REPEAT	1000	/* largest {m,n} count, as RE2 */
#define SELECTOR_MAX_REGEX_NODES 10000	/* characters, classes, groups */
#define SELECTOR_MAX_REGEX_LOOPS 256	/* optional or repeated parts */
#define SELECTOR_MAX_REGEX_DEPTH 32	/* group nesting */

enum selector_op {
	SEL_EQ,		/* =  */
	SEL_NE,		/* != */
	SEL_RE,		/* =~ */
	SEL_NRE,	/* !~ */
};

/* Owned by its selector; the compiled regex is private. */
struct selector_matcher {
	const char *name;
	enum selector_op op;
	const char *value;	/* unescaped; the pattern itself for =~ and !~ */
};

struct selector;

/*
 * Parses text (borrowed). Returns an owned selector, or NULL with errno set:
 * EINVAL for a syntax error, an invalid or too costly regex, or a limit
 * exceeded, in which case a one-line message with the 0-based byte offset
 * is written to err (when err_len > 0), e.g.
 *	at 14: expected '=', '!=', '=~' or '!~' after label name "comm"
 * ENOMEM otherwise.
 */
struct selector *selector__parse(const char *text, char *err, size_t err_len);

/* Frees s and its matchers; accepts NULL. */
void selector__free(struct selector *s);

/* The number of matchers, duplicates included; 0 selects everything. */
size_t selector__count(const struct selector *s);

/* Matcher i in input order, borrowed from s; NULL when i is out of range. */
const struct selector_matcher *selector__matcher(const struct selector *s,
						 size_t i);

/*
 * Matching does not change s, so one selector may be matched from several
 * threads at once (glibc's regexec() takes a lock of its own).
 *
 * Does a label set match every matcher? get(ctx, name) returns the label's
 * value (borrowed, read during the call only) or NULL when absent; an absent
 * label matches as "", as in Prometheus, so {container=""} selects series
 * without the label and {container!=""} those with a non-empty one.
 */
bool selector__matches(const struct selector *s,
		       const char *(*get)(void *ctx, const char *name),
		       void *ctx);

/*
 * Does one matcher match value (borrowed; NULL is absent and matches as "")?
 * m must come from selector__matcher(): a matcher built by hand has no
 * compiled regex.
 */
bool selector_matcher__matches(const struct selector_matcher *m,
			       const char *value);

/*
 * Writes the canonical text into buf (borrowed, always NUL-terminated when
 * len > 0): braces, matchers sorted by name, then op in enum order, then
 * value, exact duplicates dropped, no whitespace, values double-quoted with
 * \\ \" \n \t and \xHH for other control bytes. Selectors that match the same
 * way up to order and duplicates get the same text, so it serves as a cache
 * key, and it parses back to the same text -- unless it grew past
 * SELECTOR_MAX_TEXT, which only an input near that size can make it do (by
 * leaving out the braces, or holding many '"' in single quotes). Returns
 * the length of the whole text like snprintf(), or -EINVAL when s is NULL.
 */
int selector__format(const struct selector *s, char *buf, size_t len);

#endif
