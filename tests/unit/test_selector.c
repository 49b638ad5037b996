// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "store/selector.h"

/* A label set: NULL-terminated name/value pairs. */
struct labels {
	const char *kv[16];
	int gets;
};

static const char *labels_get(void *ctx, const char *name)
{
	struct labels *l = ctx;

	l->gets++;
	for (size_t i = 0; l->kv[i]; i += 2)
		if (!strcmp(l->kv[i], name))
			return l->kv[i + 1];
	return NULL;
}

static struct selector *parse_ok(const char *text)
{
	char err[256] = "";
	struct selector *s = selector__parse(text, err, sizeof(err));

	if (!s)
		fail_msg("parse(%s): %s", text, err);
	return s;
}

/* Parses text expecting failure with exactly msg (or, with prefix, a start). */
static void parse_fails(const char *text, const char *msg, bool prefix)
{
	char err[512] = "sentinel";
	struct selector *s;

	errno = 0;
	s = selector__parse(text, err, sizeof(err));
	if (s)
		fail_msg("parse(%s) succeeded, expected \"%s\"", text, msg);
	assert_int_equal(errno, EINVAL);
	if (prefix ? strncmp(err, msg, strlen(msg)) : strcmp(err, msg))
		fail_msg("parse(%s):\n  got  %s\n  want %s%s", text, err, msg,
			 prefix ? "..." : "");
}

static bool matches(const char *text, struct labels *l)
{
	struct selector *s = parse_ok(text);
	bool r = selector__matches(s, labels_get, l);

	selector__free(s);
	return r;
}

/* Canonical text of text; caller frees. */
static char *canon(const char *text)
{
	struct selector *s = parse_ok(text);
	int n = selector__format(s, NULL, 0);
	char *buf;

	assert_true(n > 0);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(selector__format(s, buf, (size_t)n + 1), n);
	assert_int_equal(strlen(buf), n);
	selector__free(s);
	return buf;
}

static void assert_canon(const char *text, const char *want)
{
	char *got = canon(text), *again = canon(got);

	if (strcmp(got, want))
		fail_msg("format(%s):\n  got  %s\n  want %s", text, got, want);
	/* The canonical form is a fixed point: format(parse(format(x))). */
	assert_string_equal(again, got);
	free(again);
	free(got);
}

static void test_operators(void **state)
{
	struct selector *s = parse_ok(
		"{node=\"a\",comm=~\"python.*\",pid=\"42\",container!=\"\",exe!~\".*test.*\"}");
	const struct selector_matcher *m;
	struct labels l = { .kv = { "node", "a", "comm", "python3", "pid", "42",
				    "container", "c1", "exe", "/usr/bin/python3", NULL } };

	assert_int_equal(selector__count(s), 5);
	m = selector__matcher(s, 0);
	assert_string_equal(m->name, "node");
	assert_int_equal(m->op, SEL_EQ);
	assert_string_equal(m->value, "a");
	m = selector__matcher(s, 1);
	assert_string_equal(m->name, "comm");
	assert_int_equal(m->op, SEL_RE);
	assert_string_equal(m->value, "python.*");
	m = selector__matcher(s, 3);
	assert_string_equal(m->name, "container");
	assert_int_equal(m->op, SEL_NE);
	assert_string_equal(m->value, "");
	m = selector__matcher(s, 4);
	assert_int_equal(m->op, SEL_NRE);
	assert_string_equal(m->value, ".*test.*");
	assert_null(selector__matcher(s, 5));

	assert_true(selector__matches(s, labels_get, &l));
	l.kv[1] = "b";				/* node="a" fails */
	assert_false(selector__matches(s, labels_get, &l));
	l.kv[1] = "a";
	l.kv[3] = "ruby";			/* comm=~ fails */
	assert_false(selector__matches(s, labels_get, &l));
	l.kv[3] = "python";
	l.kv[7] = "";				/* container!="" fails */
	assert_false(selector__matches(s, labels_get, &l));
	l.kv[7] = "c1";
	l.kv[9] = "/opt/unittest";		/* exe!~ fails */
	assert_false(selector__matches(s, labels_get, &l));
	l.kv[9] = "/opt/run";
	assert_true(selector__matches(s, labels_get, &l));
	selector__free(s);
}

static void test_matcher_direct(void **state)
{
	struct selector *s = parse_ok("a=\"x\", a!=\"x\", a=~\"x|y\", a!~\"x|y\"");
	const struct selector_matcher *eq = selector__matcher(s, 0),
				      *ne = selector__matcher(s, 1),
				      *re = selector__matcher(s, 2),
				      *nre = selector__matcher(s, 3);

	assert_true(selector_matcher__matches(eq, "x"));
	assert_false(selector_matcher__matches(eq, "xx"));
	assert_false(selector_matcher__matches(eq, NULL));
	assert_false(selector_matcher__matches(ne, "x"));
	assert_true(selector_matcher__matches(ne, "X"));
	assert_true(selector_matcher__matches(ne, NULL));
	assert_true(selector_matcher__matches(re, "y"));
	assert_false(selector_matcher__matches(re, "xy"));
	assert_false(selector_matcher__matches(re, NULL));
	assert_false(selector_matcher__matches(nre, "x"));
	assert_true(selector_matcher__matches(nre, "z"));
	assert_true(selector_matcher__matches(nre, NULL));
	selector__free(s);
}

/* Prometheus semantics: the whole value must match, every alternative too. */
static void test_anchoring(void **state)
{
	struct selector *s = parse_ok("{comm=~\"py\"}");
	const struct selector_matcher *m = selector__matcher(s, 0);

	assert_true(selector_matcher__matches(m, "py"));
	assert_false(selector_matcher__matches(m, "python"));
	assert_false(selector_matcher__matches(m, "cpy"));
	selector__free(s);

	s = parse_ok("{comm=~\"a|b\"}");
	m = selector__matcher(s, 0);
	assert_true(selector_matcher__matches(m, "a"));
	assert_true(selector_matcher__matches(m, "b"));
	assert_false(selector_matcher__matches(m, "ab"));
	assert_false(selector_matcher__matches(m, "xa"));
	assert_false(selector_matcher__matches(m, "bx"));
	selector__free(s);

	s = parse_ok("{comm!~\"py\"}");
	assert_true(selector_matcher__matches(selector__matcher(s, 0), "python"));
	selector__free(s);

	/* Anchors written by the user are harmless. */
	s = parse_ok("{comm=~\"^py.*$\"}");
	assert_true(selector_matcher__matches(selector__matcher(s, 0), "python"));
	selector__free(s);

	/* '.' crosses newlines, as Prometheus's (?s). */
	s = parse_ok("{v=~\"a.b\"}");
	assert_true(selector_matcher__matches(selector__matcher(s, 0), "a\nb"));
	selector__free(s);

	/* The empty pattern matches only the empty (or absent) value. */
	s = parse_ok("{v=~\"\"}");
	assert_true(selector_matcher__matches(selector__matcher(s, 0), ""));
	assert_true(selector_matcher__matches(selector__matcher(s, 0), NULL));
	assert_false(selector_matcher__matches(selector__matcher(s, 0), "a"));
	selector__free(s);
}

/* Parentheses that are not groups must not upset the ^( )$ wrapping. */
static void test_regex_parens(void **state)
{
	static const struct {
		const char *sel, *yes, *no;
	} cases[] = {
		{ "{v=~\"[)]\"}", ")", "a" },
		{ "{v=~\"[]a)]+\"}", "]a)", "b" },
		{ "{v=~\"[^])]x\"}", "ax", ")x" },
		{ "{v=~\"[[:digit:])]+\"}", "1)2", "a" },
		{ "{v=~\"[[.).]]\"}", ")", "a" },
		{ "{v=~\"\\\\)|\\\\(\"}", ")", "a)" },
		{ "{v=~\"(a|b)+c?\"}", "abac", "abcc" },
		{ "{v=~\"(a(b)(c|d))e\"}", "abde", "abd" },
		{ "{v=~\"x{2,3}\"}", "xxx", "xxxx" },
		{ "{v=~\"x{,2}\"}", "", "xxx" },
		{ "{v=~\"a\\\\{\"}", "a{", "a" },
	};
	struct selector *s;
	const struct selector_matcher *m;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		s = parse_ok(cases[i].sel);
		m = selector__matcher(s, 0);
		if (!selector_matcher__matches(m, cases[i].yes))
			fail_msg("%s should match \"%s\"", cases[i].sel, cases[i].yes);
		if (selector_matcher__matches(m, cases[i].no))
			fail_msg("%s should not match \"%s\"", cases[i].sel, cases[i].no);
		selector__free(s);
	}
}

static void test_escapes(void **state)
{
	struct selector *s;

	s = parse_ok("{a=\"q\\\"u\\\\o\\n\\t\\'\\x41\\u00e9\\u20ac\\x7f\"}");
	assert_string_equal(selector__matcher(s, 0)->value,
			    "q\"u\\o\n\t'A\xc3\xa9\xe2\x82\xac\x7f");
	selector__free(s);

	/* Single quotes: '"' needs no escape, '\'' does. */
	s = parse_ok("{a='it\\'s \"x\"'}");
	assert_string_equal(selector__matcher(s, 0)->value, "it's \"x\"");
	selector__free(s);

	/* Raw UTF-8 passes through. */
	s = parse_ok("{a=\"h\xc3\xa9\"}");
	assert_string_equal(selector__matcher(s, 0)->value, "h\xc3\xa9");
	selector__free(s);

	/* A regex escape needs a doubled backslash. */
	s = parse_ok("{a=~\"a\\\\.b\"}");
	assert_string_equal(selector__matcher(s, 0)->value, "a\\.b");
	assert_true(selector_matcher__matches(selector__matcher(s, 0), "a.b"));
	assert_false(selector_matcher__matches(selector__matcher(s, 0), "axb"));
	selector__free(s);
}

static void test_whitespace(void **state)
{
	struct selector *s;

	s = parse_ok(" \t{ \n a \t= \"x\" ,\r\n b =~ 'y' , c\n!=\"\" ,\n } \n");
	assert_int_equal(selector__count(s), 3);
	assert_string_equal(selector__matcher(s, 0)->name, "a");
	assert_string_equal(selector__matcher(s, 1)->value, "y");
	assert_int_equal(selector__matcher(s, 2)->op, SEL_NE);
	selector__free(s);

	/* Spaces inside the quotes are part of the value. */
	s = parse_ok("a=\" x \"");
	assert_string_equal(selector__matcher(s, 0)->value, " x ");
	selector__free(s);
}

static void test_empty(void **state)
{
	static const char *const empty[] = { "", "   ", "{}", " { \n } " };
	struct labels l = { .kv = { "a", "b", NULL } };
	struct selector *s;
	char buf[8];

	for (size_t i = 0; i < sizeof(empty) / sizeof(empty[0]); i++) {
		s = parse_ok(empty[i]);
		assert_int_equal(selector__count(s), 0);
		assert_null(selector__matcher(s, 0));
		assert_true(selector__matches(s, labels_get, &l));
		assert_int_equal(selector__format(s, buf, sizeof(buf)), 2);
		assert_string_equal(buf, "{}");
		selector__free(s);
	}
	assert_int_equal(l.gets, 0);
	selector__free(NULL);
	assert_int_equal(selector__count(NULL), 0);
	assert_null(selector__matcher(NULL, 0));
	assert_int_equal(selector__format(NULL, buf, sizeof(buf)), -EINVAL);
}

static void test_trailing_comma_and_no_braces(void **state)
{
	struct selector *s;

	s = parse_ok("{a=\"x\",}");
	assert_int_equal(selector__count(s), 1);
	selector__free(s);
	s = parse_ok("a=\"x\", b!~\"y\",");
	assert_int_equal(selector__count(s), 2);
	selector__free(s);
	parse_fails("{,}", "at 1: expected label name or '}', found ','", false);
	parse_fails("{a=\"x\",,}", "at 7: expected label name or '}', found ','", false);
	parse_fails(",", "at 0: expected label name, found ','", false);
}

/* An absent label matches as "", as in Prometheus. */
static void test_absent_labels(void **state)
{
	struct labels none = { .kv = { "other", "v", NULL } };
	struct labels empty = { .kv = { "container", "", NULL } };
	struct labels some = { .kv = { "container", "c1", NULL } };

	assert_true(matches("{container=\"\"}", &none));
	assert_true(matches("{container=\"\"}", &empty));
	assert_false(matches("{container=\"\"}", &some));
	assert_false(matches("{container!=\"\"}", &none));
	assert_true(matches("{container!=\"\"}", &some));
	assert_true(matches("{container=~\".*\"}", &none));
	assert_false(matches("{container=~\".+\"}", &none));
	assert_true(matches("{container!~\".+\"}", &none));
	assert_false(matches("{container=\"c1\"}", &none));
	assert_true(matches("{container!=\"c1\"}", &none));
}

#define NODES "more than 10000 nodes once repetitions are expanded (all regexes of the selector)"
#define LOOPS "more than 256 optional or repeated parts once expanded (all regexes of the selector)"

static void test_errors(void **state)
{
	static const struct {
		const char *text, *msg;
	} cases[] = {
		/* bad op */
		{ "{node=\"a\",comm}",
		  "at 14: expected '=', '!=', '=~' or '!~' after label name \"comm\"" },
		{ "{a~\"x\"}", "at 2: expected '=', '!=', '=~' or '!~' after label name \"a\"" },
		{ "{a!\"x\"}", "at 2: expected '=', '!=', '=~' or '!~' after label name \"a\"" },
		{ "{a:b=\"x\"}", "at 2: expected '=', '!=', '=~' or '!~' after label name \"a\"" },
		{ "{a==\"x\"}", "at 3: expected a quoted value for label \"a\", found '='" },
		{ "{a= ~\"x\"}", "at 4: expected a quoted value for label \"a\", found '~'" },
		{ "{a=x}", "at 3: expected a quoted value for label \"a\", found 'x'" },
		{ "{a=`x`}", "at 3: expected a quoted value for label \"a\", found '`'" },
		{ "{a=", "at 3: expected a quoted value for label \"a\", found end of input" },
		/* names */
		{ "{1a=\"x\"}", "at 1: expected label name or '}', found '1'" },
		{ "}", "at 0: expected label name, found '}'" },
		{ "{\xc3\xa9=\"x\"}", "at 1: expected label name or '}', found byte 0xc3" },
		/* unterminated strings */
		{ "{a=\"xyz", "at 3: unterminated string" },
		{ "{a=\"xyz\\", "at 3: unterminated string" },
		{ "{a='x\"}", "at 3: unterminated string" },
		{ "{a=\"x\\\"}", "at 3: unterminated string" },
		/* escapes and bytes */
		{ "{a=\"\\q\"}",
		  "at 4: unknown escape sequence '\\q' (a backslash is written \\\\)" },
		{ "{a=~\"a\\.b\"}",
		  "at 6: unknown escape sequence '\\.' (a backslash is written \\\\)" },
		{ "{a=\"\\x4g\"}", "at 4: \\x needs 2 hex digits" },
		{ "{a=\"\\u12\"}", "at 4: \\u needs 4 hex digits" },
		{ "{a=\"\\x00\"}", "at 4: NUL is not allowed in a value" },
		{ "{a=\"\\u0000\"}", "at 4: NUL is not allowed in a value" },
		{ "{a=\"\\ud800\"}", "at 4: \\ud800 is a surrogate, not a character" },
		{ "{a=\"x\ny\"}",
		  "at 5: control byte 0x0a in a string; escape it (\\n, \\t, \\xHH)" },
		{ "{a=\"\x7f\"}",
		  "at 4: control byte 0x7f in a string; escape it (\\n, \\t, \\xHH)" },
		/* separators */
		{ "{a=\"x\" b=\"y\"}",
		  "at 7: expected ',' or '}' after a matcher, found 'b'" },
		{ "a=\"x\" b=\"y\"",
		  "at 6: expected ',' or end of input after a matcher, found 'b'" },
		{ "a=\"x\"}", "at 5: expected ',' or end of input after a matcher, found '}'" },
		{ "{a=\"x\"", "at 6: expected ',' or '}' after a matcher, found end of input" },
		{ "{a=\"x\",", "at 7: expected label name or '}', found end of input" },
		{ "{", "at 1: expected label name or '}', found end of input" },
		{ "{a=\"x\"} x", "at 8: unexpected 'x' after '}'" },
		{ "{}{}", "at 2: unexpected '{' after '}'" },
		/* regexes */
		{ "{a=~\"a)|(b\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 1: unmatched ')'" },
		{ "{a=~\"(a)\\\\1\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 3: backreferences are not supported" },
		{ "{a=~\"a\\\\\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 1: trailing backslash" },
		{ "{a=~\"x{1001}\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 1: repetition count over 1000" },
		{ "{a=~\"(x{100}){101}\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 8: " NODES },
		{ "{a!~\"((((((((((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 37: " LOOPS },
		/* Quantifiers on quantifiers: glibc nests them, at a steep cost. */
		{ "{a=~\"p**\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 2: repetition operator follows another one" },
		{ "{a=~\".*?\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 2: repetition operator follows another one" },
		{ "{a=~\"(x){2}{3}\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 6: repetition operator follows another one" },
		{ "{a=~\"x{0,257}\"}",
		  "at 4: invalid regex for label \"a\" at pattern offset 1: " LOOPS },
		/* The budget is shared by all regexes of a selector. */
		{ "{a=~\"x{0,200}\",b!~\"y{0,57}\"}",
		  "at 18: invalid regex for label \"b\" at pattern offset 1: " LOOPS },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		parse_fails(cases[i].text, cases[i].msg, false);
}

/* regcomp()'s own message is passed on. */
static void test_regerror_text(void **state)
{
	static const char *const bad[] = { "(", "*", "[a", "a{2,1}", "[[:nope:]]", "a{" };
	char want[256], msg[128], sel[64];
	regex_t re;
	int rc;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(want, sizeof(want), "^(%s)$", bad[i]);
		rc = regcomp(&re, want, REG_EXTENDED | REG_NOSUB);
		assert_int_not_equal(rc, 0);
		regerror(rc, &re, msg, sizeof(msg));
		snprintf(want, sizeof(want), "at 7: invalid regex for label \"comm\": %s",
			 msg);
		snprintf(sel, sizeof(sel), "{comm=~\"%s\"}", bad[i]);
		parse_fails(sel, want, false);
	}
}

static void repeat(char *p, const char *unit, int n, const char *tail)
{
	for (int i = 0; i < n; i++)
		p = stpcpy(p, unit);
	strcpy(p, tail);
}

/* Bounds on glibc's work: the shapes the fuzzer and benchmarks found slow. */
static void test_regex_cost(void **state)
{
	char sel[8192], want[256], *p = sel + 5;

	strcpy(sel, "{a=~\"");
	/* Groups nest 32 deep, not 33. */
	repeat(p, "(", 32, "");
	repeat(p + 32, ")*", 32, "\"}");
	selector__free(parse_ok(sel));
	repeat(p, "(", 33, "");
	repeat(p + 33, ")", 33, "\"}");
	parse_fails(sel, "at 4: invalid regex for label \"a\" at pattern offset 32: groups nested more than 32 deep", false);

	/* 256 optional parts pass, 257 do not, however they are written. */
	repeat(p, "a?", 256, "\"}");
	selector__free(parse_ok(sel));
	repeat(p, "a?", 257, "\"}");
	snprintf(want, sizeof(want), "at 4: invalid regex for label \"a\" at pattern offset 513: %s", LOOPS);
	parse_fails(sel, want, false);
	repeat(p, "()", 256, "\"}");
	selector__free(parse_ok(sel));
	repeat(p, "()", 257, "\"}");
	parse_fails(sel, want, false);
	repeat(p, "(a|)", 257, "\"}");
	snprintf(want, sizeof(want), "at 4: invalid regex for label \"a\" at pattern offset 1027: %s", LOOPS);
	parse_fails(sel, want, false);

	/* Alternatives without empty branches are cheap: a long host list. */
	p = sel + 5;
	for (int i = 0; i < 300; i++)
		p += sprintf(p, "%shost%d", i ? "|" : "", i);
	strcpy(p, "\"}");
	selector__free(parse_ok(sel));

	/* Counted repetitions multiply. */
	selector__free(parse_ok("{a=~\"(.{99}){100}\"}"));
	selector__free(parse_ok("{a=~\"x{1000}\"}"));
	selector__free(parse_ok("{a=~\"x{1000,}\"}"));
	selector__free(parse_ok("{a=~\"[0-9]{1,3}(\\\\.[0-9]{1,3}){3}\"}"));
}

static void test_limits(void **state)
{
	char *buf = malloc(SELECTOR_MAX_TEXT + 64), *p;
	struct selector *s;
	char name[SELECTOR_MAX_NAME + 2], want[64];

	assert_non_null(buf);

	/* 64 matchers are allowed, the 65th is not. */
	p = buf;
	*p++ = '{';
	for (int i = 0; i < SELECTOR_MAX_MATCHERS; i++)
		p += sprintf(p, "l%d=\"v\",", i);
	strcpy(p, "}");
	s = parse_ok(buf);
	assert_int_equal(selector__count(s), SELECTOR_MAX_MATCHERS);
	selector__free(s);
	strcpy(p, "x=\"v\"}");
	snprintf(want, sizeof(want), "at %td: more than 64 matchers", p - buf);
	parse_fails(buf, want, false);

	/* Names: 128 bytes are allowed. */
	memset(name, 'n', sizeof(name));
	name[SELECTOR_MAX_NAME] = '\0';
	snprintf(buf, SELECTOR_MAX_TEXT, "{%s=\"v\"}", name);
	selector__free(parse_ok(buf));
	name[SELECTOR_MAX_NAME] = 'n';
	name[SELECTOR_MAX_NAME + 1] = '\0';
	snprintf(buf, SELECTOR_MAX_TEXT, "{%s=\"v\"}", name);
	parse_fails(buf, "at 1: label name longer than 128 bytes", false);

	/* Values: 4096 bytes after unescaping. */
	p = buf + sprintf(buf, "{a=\"");
	memset(p, 'v', SELECTOR_MAX_VALUE);
	strcpy(p + SELECTOR_MAX_VALUE, "\"}");
	s = parse_ok(buf);
	assert_int_equal(strlen(selector__matcher(s, 0)->value), SELECTOR_MAX_VALUE);
	selector__free(s);
	strcpy(p + SELECTOR_MAX_VALUE, "v\"}");
	parse_fails(buf, "at 3: value of \"a\" longer than 4096 bytes", false);
	for (int i = 0; i < SELECTOR_MAX_VALUE; i++)
		memcpy(p + 2 * i, "\\\\", 2);
	strcpy(p + 2 * SELECTOR_MAX_VALUE, "\"}");
	s = parse_ok(buf);
	assert_int_equal(strlen(selector__matcher(s, 0)->value), SELECTOR_MAX_VALUE);
	selector__free(s);
	strcpy(p + 2 * SELECTOR_MAX_VALUE, "\\u00e9\"}");
	parse_fails(buf, "at 3: value of \"a\" longer than 4096 bytes", false);

	/* The whole input: 16 KiB, blanks included. */
	memset(buf, ' ', SELECTOR_MAX_TEXT);
	memcpy(buf, "{a=\"x\"}", 7);
	buf[SELECTOR_MAX_TEXT] = '\0';
	selector__free(parse_ok(buf));
	buf[SELECTOR_MAX_TEXT] = ' ';
	buf[SELECTOR_MAX_TEXT + 1] = '\0';
	parse_fails(buf, "at 16384: selector longer than 16384 bytes", false);
	free(buf);
}

static void test_err_buffer(void **state)
{
	char small[8];

	/* NULL or short buffers are fine; the message is cut, not overrun. */
	errno = 0;
	assert_null(selector__parse("{a}", NULL, 0));
	assert_int_equal(errno, EINVAL);
	memset(small, 'x', sizeof(small));
	assert_null(selector__parse("{a}", small, sizeof(small)));
	assert_string_equal(small, "at 2: e");
	memset(small, 'x', sizeof(small));
	assert_null(selector__parse("{a}", small, 3));
	assert_string_equal(small, "at");
	errno = 0;
	assert_null(selector__parse(NULL, small, sizeof(small)));
	assert_int_equal(errno, EINVAL);

	/* Success clears err. */
	strcpy(small, "old");
	selector__free(selector__parse("{}", small, sizeof(small)));
	assert_string_equal(small, "");
}

static void test_format(void **state)
{
	assert_canon("{ b =~ 'y' , a=\"x\", a!=\"x\", a=\"w\", a=\"x\", a!~'z', a=~\"z\" }",
		     "{a=\"w\",a=\"x\",a!=\"x\",a=~\"z\",a!~\"z\",b=~\"y\"}");
	assert_canon("", "{}");
	assert_canon("x=\"1\"", "{x=\"1\"}");
	/* Values re-escaped, always in double quotes. */
	assert_canon("{v='\"\\\\\\n\\t\\x01\\x7f\\u00e9\\''}",
		     "{v=\"\\\"\\\\\\n\\t\\x01\\x7f\xc3\xa9'\"}");
	assert_canon("{v=~\"a\\\\.b\"}", "{v=~\"a\\\\.b\"}");
	/* Names sort bytewise: upper case and '_' before lower case. */
	assert_canon("{b=\"\",a=\"\",_=\"\",B=\"\"}", "{B=\"\",_=\"\",a=\"\",b=\"\"}");
}

static void test_format_buffer(void **state)
{
	struct selector *s = parse_ok("{b=\"2\",a=\"1\"}");
	char buf[32];

	assert_int_equal(selector__format(s, NULL, 0), 13);
	memset(buf, 'x', sizeof(buf));
	assert_int_equal(selector__format(s, buf, 6), 13);
	assert_string_equal(buf, "{a=\"1");
	assert_int_equal(buf[6], 'x');
	assert_int_equal(selector__format(s, buf, 13), 13);
	assert_string_equal(buf, "{a=\"1\",b=\"2\"");
	assert_int_equal(selector__format(s, buf, 14), 13);
	assert_string_equal(buf, "{a=\"1\",b=\"2\"}");
	/* Input order is kept for selector__matcher(). */
	assert_string_equal(selector__matcher(s, 0)->name, "b");
	selector__free(s);
}

/* format(parse(format(parse(x)))) == format(parse(x)) across many shapes. */
static void test_round_trip(void **state)
{
	static const char *const inputs[] = {
		"{node=\"a\",comm=~\"python.*\",pid=\"42\",container!=\"\",exe!~\".*test.*\"}",
		"  z!~'[)]' , y=~\"(a|b){2,3}\" , x!=\"\\u20ac\" ",
		"{q=\"\\\\\\\\\\\"\\\"\",q=\"\",q!=\"\"}",
		"{a=\"\\x1f\\x80\\xff\"}",
		"{_=\"'\\\"'\",}",
	};
	char *a, *b;

	for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
		a = canon(inputs[i]);
		b = canon(a);
		assert_string_equal(a, b);
		free(a);
		free(b);
	}
}

static void test_get_called_per_matcher(void **state)
{
	struct labels l = { .kv = { "a", "1", "b", "2", NULL } };

	/* Stops at the first failing matcher. */
	assert_false(matches("{a=\"0\",b=\"2\"}", &l));
	assert_int_equal(l.gets, 1);
	l.gets = 0;
	assert_true(matches("{a=\"1\",b=\"2\"}", &l));
	assert_int_equal(l.gets, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_operators),
		cmocka_unit_test(test_matcher_direct),
		cmocka_unit_test(test_anchoring),
		cmocka_unit_test(test_regex_parens),
		cmocka_unit_test(test_escapes),
		cmocka_unit_test(test_whitespace),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_trailing_comma_and_no_braces),
		cmocka_unit_test(test_absent_labels),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_regerror_text),
		cmocka_unit_test(test_regex_cost),
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_err_buffer),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_format_buffer),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_get_called_per_matcher),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
