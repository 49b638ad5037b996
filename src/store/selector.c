// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "selector.h"

struct matcher {
	struct selector_matcher pub;	/* first: public pointers cast back */
	regex_t re;
	bool has_re;
};

/*
 * Sized for the maximum up front (about 6 KiB): one allocation, and no
 * reallocation that would move the regex_t of compiled matchers.
 */
struct selector {
	size_t n;
	unsigned char order[SELECTOR_MAX_MATCHERS];	/* canonical order */
	struct matcher m[SELECTOR_MAX_MATCHERS];	/* input order */
};

#define STR_(x) #x
#define STR(x) STR_(x)

/* State of _regex_check(), which explains it. */
struct re_cost {
	size_t nodes;
	size_t loops;		/* optional or repeated parts */
};

struct re_frame {
	struct re_cost size;	/* the group so far */
	struct re_cost last;	/* the atom a quantifier would apply to */
	bool have_last;
	bool quantified;	/* last already carries a quantifier */
	bool branch_empty;	/* no atom since '(' or '|' */
};

struct re_check {
	struct re_frame st[SELECTOR_MAX_REGEX_DEPTH + 1];
	size_t depth;
	struct re_cost spent;	/* by earlier regexes of the selector */
	const char *why;
};

struct parser {
	const char *text;
	size_t pos;
	char *err;
	size_t err_len;
	char name[SELECTOR_MAX_NAME + 1];
	char value[SELECTOR_MAX_VALUE + 1];
	size_t value_len;
	struct re_check re;
};

static const char *const _op_text[] = {
	[SEL_EQ] = "=", [SEL_NE] = "!=", [SEL_RE] = "=~", [SEL_NRE] = "!~",
};

__attribute__((format(printf, 3, 4)))
static int _fail(struct parser *p, size_t at, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!p->err || !p->err_len)
		return -EINVAL;
	n = snprintf(p->err, p->err_len, "at %zu: ", at);
	if (n >= 0 && (size_t)n < p->err_len) {
		va_start(ap, fmt);
		vsnprintf(p->err + n, p->err_len - (size_t)n, fmt, ap);
		va_end(ap);
	}
	return -EINVAL;
}

/* What stands at text[at], for "found ..." in messages; buf holds >= 16. */
static const char *_describe(const char *text, size_t at, char *buf, size_t len)
{
	unsigned char c = (unsigned char)text[at];

	if (!c)
		return "end of input";
	if (c < 0x20 || c >= 0x7f)
		snprintf(buf, len, "byte 0x%02x", c);
	else
		snprintf(buf, len, "'%c'", c);
	return buf;
}

static bool _is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
	       c == '\v';
}

static bool _is_name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool _is_name_char(char c)
{
	return _is_name_start(c) || (c >= '0' && c <= '9');
}

static int _hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void _skip_space(struct parser *p)
{
	while (_is_space(p->text[p->pos]))
		p->pos++;
}

static int _parse_name(struct parser *p, bool braced)
{
	size_t start = p->pos, len;
	char what[16];

	if (!_is_name_start(p->text[start]))
		return _fail(p, start, "expected label name%s, found %s",
			     braced ? " or '}'" : "",
			     _describe(p->text, start, what, sizeof(what)));
	while (_is_name_char(p->text[p->pos]))
		p->pos++;
	len = p->pos - start;
	if (len > SELECTOR_MAX_NAME)
		return _fail(p, start, "label name longer than %d bytes",
			     SELECTOR_MAX_NAME);
	memcpy(p->name, p->text + start, len);
	p->name[len] = '\0';
	return 0;
}

static int _parse_op(struct parser *p, enum selector_op *op)
{
	const char *t = p->text + p->pos;

	if (t[0] == '=' && t[1] == '~')
		*op = SEL_RE;
	else if (t[0] == '=')
		*op = SEL_EQ;
	else if (t[0] == '!' && t[1] == '=')
		*op = SEL_NE;
	else if (t[0] == '!' && t[1] == '~')
		*op = SEL_NRE;
	else
		return _fail(p, p->pos,
			     "expected '=', '!=', '=~' or '!~' after label name \"%s\"",
			     p->name);
	p->pos += strlen(_op_text[*op]);
	return 0;
}

static int _put(struct parser *p, size_t quote_at, unsigned char c)
{
	if (p->value_len == SELECTOR_MAX_VALUE)
		return _fail(p, quote_at, "value of \"%s\" longer than %d bytes",
			     p->name, SELECTOR_MAX_VALUE);
	p->value[p->value_len++] = (char)c;
	return 0;
}

/* Reads exactly n hex digits at p->pos + 2 (after "\x" or "\u"). */
static int _hex_escape(struct parser *p, int n, unsigned *out)
{
	unsigned v = 0;
	int d;

	for (int i = 0; i < n; i++) {
		d = _hexval(p->text[p->pos + 2 + i]);
		if (d < 0)
			return _fail(p, p->pos, "\\%c needs %d hex digits",
				     p->text[p->pos + 1], n);
		v = v << 4 | (unsigned)d;
	}
	if (!v)
		return _fail(p, p->pos, "NUL is not allowed in a value");
	*out = v;
	return 0;
}

/* Unescapes one escape sequence at p->pos (a backslash) into p->value. */
static int _parse_escape(struct parser *p, size_t quote_at)
{
	char c = p->text[p->pos + 1];
	unsigned v = 0;
	int err;

	switch (c) {
	case '\\': case '"': case '\'':
		err = _put(p, quote_at, (unsigned char)c);
		p->pos += 2;
		return err;
	case 'n':
		err = _put(p, quote_at, '\n');
		p->pos += 2;
		return err;
	case 't':
		err = _put(p, quote_at, '\t');
		p->pos += 2;
		return err;
	case 'x':
		err = _hex_escape(p, 2, &v);
		if (!err)
			err = _put(p, quote_at, (unsigned char)v);
		p->pos += 4;
		return err;
	case 'u':
		err = _hex_escape(p, 4, &v);
		if (err)
			return err;
		if (v >= 0xd800 && v <= 0xdfff)
			return _fail(p, p->pos,
				     "\\u%04x is a surrogate, not a character", v);
		if (v < 0x80) {
			err = _put(p, quote_at, (unsigned char)v);
		} else if (v < 0x800) {
			err = _put(p, quote_at, (unsigned char)(0xc0 | v >> 6));
			if (!err)
				err = _put(p, quote_at, (unsigned char)(0x80 | (v & 0x3f)));
		} else {
			err = _put(p, quote_at, (unsigned char)(0xe0 | v >> 12));
			if (!err)
				err = _put(p, quote_at, (unsigned char)(0x80 | (v >> 6 & 0x3f)));
			if (!err)
				err = _put(p, quote_at, (unsigned char)(0x80 | (v & 0x3f)));
		}
		p->pos += 6;
		return err;
	case '\0':
		return _fail(p, quote_at, "unterminated string");
	default:
		if ((unsigned char)c < 0x20 || (unsigned char)c >= 0x7f)
			return _fail(p, p->pos, "unknown escape sequence '\\' + byte 0x%02x",
				     (unsigned char)c);
		/* Most often a regex escape like \. written with one backslash. */
		return _fail(p, p->pos,
			     "unknown escape sequence '\\%c' (a backslash is written \\\\)",
			     c);
	}
}

static int _parse_value(struct parser *p)
{
	size_t quote_at;
	char quote, what[16];
	unsigned char c;
	int err;

	quote_at = p->pos;
	quote = p->text[p->pos];
	if (quote != '"' && quote != '\'')
		return _fail(p, p->pos,
			     "expected a quoted value for label \"%s\", found %s",
			     p->name, _describe(p->text, p->pos, what, sizeof(what)));
	p->pos++;
	p->value_len = 0;
	for (;;) {
		c = (unsigned char)p->text[p->pos];
		if (c == (unsigned char)quote) {
			p->pos++;
			break;
		}
		if (!c)
			return _fail(p, quote_at, "unterminated string");
		if (c == '\\') {
			err = _parse_escape(p, quote_at);
			if (err)
				return err;
			continue;
		}
		if (c < 0x20 || c == 0x7f)
			return _fail(p, p->pos,
				     "control byte 0x%02x in a string; escape it (\\n, \\t, \\xHH)",
				     c);
		err = _put(p, quote_at, c);
		if (err)
			return err;
		p->pos++;
	}
	p->value[p->value_len] = '\0';
	return 0;
}

/*
 * Checks a pattern before it is compiled as ^(pattern)$. The wrapping is
 * only sound when the pattern's own groups are balanced -- glibc takes an
 * unmatched ')' as a literal, so "a)|(b" would close our group early and
 * leave "(b)$" unanchored -- and has no backreferences, whose numbers the
 * extra group shifts. RE2, which Prometheus uses, rejects both anyway.
 *
 * It also bounds glibc's work, which the fuzzer showed to be the real risk:
 * a short "p*****..." took seconds and far too much memory to compile.
 * glibc copies the operand of {m,n} max(m,n) times and of '+' twice, so
 * nested repetitions multiply; and every optional part (*, ?, the optional copies of {m,n},
 * an empty group or alternative) adds epsilon edges whose closures cost
 * time and memory quadratic in their number, at compile time and again per
 * byte matched. So the pass counts, after expansion, nodes and optional
 * parts, summed over all regexes of a selector; rejects a quantifier that
 * follows another (RE2 refuses "a**" too; glibc nests them); and limits
 * nesting. At the limits a selector stays cheap enough to compile and to
 * match against a value of SELECTOR_MAX_VALUE (realistic patterns are
 * far cheaper).
 *
 * Bracket expressions are skipped the way glibc reads them ('[' then '^',
 * then a literal ']', then [:class:], [.coll.] and [=equiv=] up to their
 * closing bracket), so a ')' inside one is not counted. Anything malformed
 * that this pass lets through is left to regcomp() to reject.
 */

/*
 * Parses {m}, {m,}, {,n}, {m,n} at re[i]: returns its length, or 0 when it
 * is not one, and sets the largest count written, the copies glibc makes
 * and how many of them are optional.
 */
static size_t _interval(const char *re, size_t i, size_t *count,
			size_t *copies, size_t *optional)
{
	size_t j = i + 1, m = 0, n = 0;
	bool have_m = false, have_n = false, comma = false;

	/* Counts saturate: anything over SELECTOR_MAX_REPEAT is refused. */
	for (; re[j] >= '0' && re[j] <= '9'; j++, have_m = true)
		m = m > 100000 ? m : m * 10 + (size_t)(re[j] - '0');
	if (re[j] == ',') {
		comma = true;
		for (j++; re[j] >= '0' && re[j] <= '9'; j++, have_n = true)
			n = n > 100000 ? n : n * 10 + (size_t)(re[j] - '0');
	}
	if (re[j] != '}' || (!have_m && !have_n))
		return 0;
	if (!comma) {
		*copies = m;
		*optional = 0;
	} else if (!have_n) {
		*copies = m + 1;	/* m copies and a starred one */
		*optional = 1;
	} else {
		*copies = m > n ? m : n;
		*optional = m < n ? n - m : 0;
	}
	*count = m > n ? m : n;
	if (*copies == 0)
		*copies = 1;
	return j + 1 - i;
}

static size_t _bracket_end(const char *re, size_t i)
{
	const char *close;
	char delim;

	i++;
	if (re[i] == '^')
		i++;
	if (re[i] == ']')
		i++;
	for (;;) {
		if (!re[i])
			return i;
		if (re[i] == ']')
			return i + 1;
		if (re[i] == '[' && (re[i + 1] == ':' || re[i + 1] == '.' ||
				     re[i + 1] == '=')) {
			delim = re[i + 1];
			for (close = re + i + 2; *close; close++)
				if (close[0] == delim && close[1] == ']')
					break;
			if (!*close)
				return strlen(re);
			i = (size_t)(close - re) + 2;
			continue;
		}
		i++;
	}
}

static void _atom(struct re_frame *f, struct re_cost c)
{
	f->size.nodes += c.nodes;
	f->size.loops += c.loops;
	f->last = c;
	f->have_last = true;
	f->quantified = false;
	f->branch_empty = false;
}

static void _end_branch(struct re_frame *f)
{
	if (f->branch_empty)
		f->size.loops++;
	f->branch_empty = true;
	f->have_last = false;
	f->quantified = false;
}

/*
 * Applies a quantifier to the last atom. Operands are bounded by the limits
 * checked after every step and copies by SELECTOR_MAX_REPEAT, so nothing
 * here can overflow.
 */
static int _quantify(struct re_check *c, size_t count, size_t copies,
		     size_t optional)
{
	struct re_frame *f = &c->st[c->depth];
	struct re_cost q;

	if (f->quantified) {
		c->why = "repetition operator follows another one";
		return -EINVAL;
	}
	if (count > SELECTOR_MAX_REPEAT) {
		c->why = "repetition count over " STR(SELECTOR_MAX_REPEAT);
		return -EINVAL;
	}
	if (!f->have_last) {
		/* Nothing to repeat: regcomp() decides; count it as an atom. */
		_atom(f, (struct re_cost){ 1, 1 });
		return 0;
	}
	q.nodes = f->last.nodes * copies;
	q.loops = f->last.loops * copies + optional;
	f->size.nodes += q.nodes - f->last.nodes;
	f->size.loops += q.loops - f->last.loops;
	f->last = q;
	f->quantified = true;
	return 0;
}

static int _check_budget(struct re_check *c)
{
	struct re_cost t = c->spent;

	for (size_t d = 0; d <= c->depth; d++) {
		t.nodes += c->st[d].size.nodes;
		t.loops += c->st[d].size.loops;
	}
	if (t.nodes > SELECTOR_MAX_REGEX_NODES) {
		c->why = "more than " STR(SELECTOR_MAX_REGEX_NODES)
			 " nodes once repetitions are expanded (all regexes of the selector)";
		return -EINVAL;
	}
	if (t.loops > SELECTOR_MAX_REGEX_LOOPS) {
		c->why = "more than " STR(SELECTOR_MAX_REGEX_LOOPS)
			 " optional or repeated parts once expanded (all regexes of the selector)";
		return -EINVAL;
	}
	return 0;
}

/* Returns 0 and adds the pattern's cost to c->spent, or -EINVAL, c->why and *at. */
static int _regex_check(struct re_check *c, const char *re, size_t *at)
{
	struct re_frame *f;
	size_t i = 0, len, count, copies, optional;
	struct re_cost inner;
	int err;

	c->depth = 0;
	memset(&c->st[0], 0, sizeof(c->st[0]));
	c->st[0].branch_empty = true;
	while (re[i]) {
		*at = i;
		f = &c->st[c->depth];
		switch (re[i]) {
		case '\\':
			if (!re[i + 1]) {
				c->why = "trailing backslash";
				return -EINVAL;
			}
			if (re[i + 1] >= '1' && re[i + 1] <= '9') {
				c->why = "backreferences are not supported";
				return -EINVAL;
			}
			_atom(f, (struct re_cost){ 1, 0 });
			i += 2;
			break;
		case '[':
			_atom(f, (struct re_cost){ 1, 0 });
			i = _bracket_end(re, i);
			break;
		case '(':
			if (c->depth == SELECTOR_MAX_REGEX_DEPTH) {
				c->why = "groups nested more than "
					 STR(SELECTOR_MAX_REGEX_DEPTH) " deep";
				return -EINVAL;
			}
			f = &c->st[++c->depth];
			memset(f, 0, sizeof(*f));
			f->branch_empty = true;
			i++;
			break;
		case ')':
			if (!c->depth) {
				c->why = "unmatched ')'";
				return -EINVAL;
			}
			_end_branch(f);
			inner = f->size;
			inner.nodes++;
			_atom(&c->st[--c->depth], inner);
			i++;
			break;
		case '|':
			_end_branch(f);
			i++;
			break;
		case '*':
		case '?':
			err = _quantify(c, 1, 1, 1);
			if (err)
				return err;
			i++;
			break;
		case '+':
			err = _quantify(c, 1, 2, 1);
			if (err)
				return err;
			i++;
			break;
		case '{':
			len = _interval(re, i, &count, &copies, &optional);
			if (len) {
				err = _quantify(c, count, copies, optional);
				if (err)
					return err;
				i += len;
				break;
			}
			/* Not an interval: glibc refuses it or takes it literally. */
			_atom(f, (struct re_cost){ 1, 0 });
			i++;
			break;
		default:
			_atom(f, (struct re_cost){ 1, 0 });
			i++;
			break;
		}
		err = _check_budget(c);
		if (err)
			return err;
	}
	*at = i;
	/* An unclosed '(' is left to regcomp(), which names it. */
	_end_branch(&c->st[c->depth]);
	err = _check_budget(c);
	if (err)
		return err;
	for (size_t d = 0; d <= c->depth; d++) {
		c->spent.nodes += c->st[d].size.nodes;
		c->spent.loops += c->st[d].size.loops;
	}
	return 0;
}

static int _compile(struct parser *p, struct matcher *m, size_t value_at)
{
	char *wrapped, msg[128];
	size_t at = 0;
	int rc;

	if (_regex_check(&p->re, m->pub.value, &at))
		return _fail(p, value_at,
			     "invalid regex for label \"%s\" at pattern offset %zu: %s",
			     p->name, at, p->re.why);
	wrapped = malloc(p->value_len + 5);
	if (!wrapped)
		return -ENOMEM;
	memcpy(wrapped, "^(", 2);
	memcpy(wrapped + 2, m->pub.value, p->value_len);
	memcpy(wrapped + 2 + p->value_len, ")$", 3);
	rc = regcomp(&m->re, wrapped, REG_EXTENDED | REG_NOSUB);
	free(wrapped);
	if (rc == REG_ESPACE)
		return -ENOMEM;
	if (rc) {
		/* glibc's regerror() reads only the code, not the failed re. */
		regerror(rc, &m->re, msg, sizeof(msg));
		return _fail(p, value_at, "invalid regex for label \"%s\": %s",
			     p->name, msg);
	}
	m->has_re = true;
	return 0;
}

static int _add_matcher(struct parser *p, struct selector *s, size_t name_at,
			enum selector_op op, size_t value_at)
{
	struct matcher *m;

	if (s->n == SELECTOR_MAX_MATCHERS)
		return _fail(p, name_at, "more than %d matchers",
			     SELECTOR_MAX_MATCHERS);
	m = &s->m[s->n];
	m->pub.op = op;
	m->pub.name = strdup(p->name);
	m->pub.value = malloc(p->value_len + 1);
	/* Counted now so that selector__free() releases what was allocated. */
	s->n++;
	if (!m->pub.name || !m->pub.value)
		return -ENOMEM;
	memcpy((char *)m->pub.value, p->value, p->value_len + 1);
	if (op == SEL_RE || op == SEL_NRE)
		return _compile(p, m, value_at);
	return 0;
}

static int _parse_matcher(struct parser *p, struct selector *s, bool braced)
{
	enum selector_op op = SEL_EQ;
	size_t name_at, value_at;
	int err;

	name_at = p->pos;
	err = _parse_name(p, braced);
	if (err)
		return err;
	_skip_space(p);
	err = _parse_op(p, &op);
	if (err)
		return err;
	_skip_space(p);
	value_at = p->pos;
	err = _parse_value(p);
	if (err)
		return err;
	return _add_matcher(p, s, name_at, op, value_at);
}

static int _cmp_matcher(const struct matcher *a, const struct matcher *b)
{
	int c = strcmp(a->pub.name, b->pub.name);

	if (c)
		return c;
	if (a->pub.op != b->pub.op)
		return a->pub.op < b->pub.op ? -1 : 1;
	return strcmp(a->pub.value, b->pub.value);
}

/* At most 64 entries: insertion sort keeps it free of qsort's context. */
static void _sort(struct selector *s)
{
	unsigned char k;
	size_t i, j;

	for (i = 0; i < s->n; i++) {
		k = (unsigned char)i;
		for (j = i; j > 0 && _cmp_matcher(&s->m[s->order[j - 1]],
						  &s->m[k]) > 0; j--)
			s->order[j] = s->order[j - 1];
		s->order[j] = k;
	}
}

static int _parse(struct parser *p, struct selector *s)
{
	bool braced = false;
	char what[16];
	int err;

	if (strnlen(p->text, SELECTOR_MAX_TEXT + 1) > SELECTOR_MAX_TEXT)
		return _fail(p, SELECTOR_MAX_TEXT, "selector longer than %d bytes",
			     SELECTOR_MAX_TEXT);
	_skip_space(p);
	if (p->text[p->pos] == '{') {
		braced = true;
		p->pos++;
	}
	for (;;) {
		_skip_space(p);
		if (braced && p->text[p->pos] == '}') {
			p->pos++;
			break;
		}
		if (!braced && !p->text[p->pos])
			break;
		err = _parse_matcher(p, s, braced);
		if (err)
			return err;
		_skip_space(p);
		if (p->text[p->pos] == ',') {
			p->pos++;
			continue;
		}
		if (braced && p->text[p->pos] == '}') {
			p->pos++;
			break;
		}
		if (!braced && !p->text[p->pos])
			break;
		return _fail(p, p->pos, "expected ',' or %s after a matcher, found %s",
			     braced ? "'}'" : "end of input",
			     _describe(p->text, p->pos, what, sizeof(what)));
	}
	_skip_space(p);
	if (p->text[p->pos])
		return _fail(p, p->pos, "unexpected %s after '}'",
			     _describe(p->text, p->pos, what, sizeof(what)));
	return 0;
}

struct selector *selector__parse(const char *text, char *err, size_t err_len)
{
	struct parser *p = NULL;
	struct selector *s = NULL;
	int ret = -EINVAL;

	if (err && err_len)
		err[0] = '\0';
	if (!text)
		goto out;
	/* The parser holds a value buffer too large for a server thread's stack. */
	p = calloc(1, sizeof(*p));
	s = calloc(1, sizeof(*s));
	if (!p || !s) {
		ret = -ENOMEM;
		goto out;
	}
	p->text = text;
	p->err = err;
	p->err_len = err_len;
	ret = _parse(p, s);
	if (!ret)
		_sort(s);
out:
	free(p);
	if (ret) {
		selector__free(s);
		errno = -ret;
		return NULL;
	}
	return s;
}

void selector__free(struct selector *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n; i++) {
		free((char *)s->m[i].pub.name);
		free((char *)s->m[i].pub.value);
		if (s->m[i].has_re)
			regfree(&s->m[i].re);
	}
	free(s);
}

size_t selector__count(const struct selector *s)
{
	return s ? s->n : 0;
}

const struct selector_matcher *selector__matcher(const struct selector *s,
						 size_t i)
{
	if (!s || i >= s->n)
		return NULL;
	return &s->m[i].pub;
}

bool selector_matcher__matches(const struct selector_matcher *pub,
			       const char *value)
{
	const struct matcher *m = (const struct matcher *)pub;

	if (!value)
		value = "";
	switch (pub->op) {
	case SEL_EQ:
		return strcmp(value, pub->value) == 0;
	case SEL_NE:
		return strcmp(value, pub->value) != 0;
	case SEL_RE:
		return regexec(&m->re, value, 0, NULL, 0) == 0;
	case SEL_NRE:
		return regexec(&m->re, value, 0, NULL, 0) != 0;
	}
	return false;
}

bool selector__matches(const struct selector *s,
		       const char *(*get)(void *ctx, const char *name),
		       void *ctx)
{
	const struct selector_matcher *m;

	if (!s)
		return true;
	for (size_t i = 0; i < s->n; i++) {
		m = &s->m[i].pub;
		if (!selector_matcher__matches(m, get(ctx, m->name)))
			return false;
	}
	return true;
}

struct out {
	char *buf;
	size_t len;
	size_t pos;
};

static void _emit(struct out *o, const char *str, size_t n)
{
	if (o->pos < o->len) {
		size_t room = o->len - o->pos;

		memcpy(o->buf + o->pos, str, n < room ? n : room);
	}
	o->pos += n;
}

static void _emit_str(struct out *o, const char *str)
{
	_emit(o, str, strlen(str));
}

static void _emit_value(struct out *o, const char *v)
{
	char hex[5];
	const char *run;

	_emit(o, "\"", 1);
	while (*v) {
		for (run = v; *v && *v != '\\' && *v != '"' &&
			      (unsigned char)*v >= 0x20 && *v != 0x7f; v++)
			;
		_emit(o, run, (size_t)(v - run));
		if (!*v)
			break;
		if (*v == '\\')
			_emit(o, "\\\\", 2);
		else if (*v == '"')
			_emit(o, "\\\"", 2);
		else if (*v == '\n')
			_emit(o, "\\n", 2);
		else if (*v == '\t')
			_emit(o, "\\t", 2);
		else {
			snprintf(hex, sizeof(hex), "\\x%02x", (unsigned char)*v);
			_emit(o, hex, 4);
		}
		v++;
	}
	_emit(o, "\"", 1);
}

int selector__format(const struct selector *s, char *buf, size_t len)
{
	struct out o = { .buf = buf, .len = len };
	const struct matcher *m, *prev = NULL;
	bool first = true;

	if (!s)
		return -EINVAL;
	/* At most 64 * (128 + 2 + 4 * 4096 + 3) + 2 bytes: well within int. */
	_emit(&o, "{", 1);
	for (size_t i = 0; i < s->n; i++) {
		m = &s->m[s->order[i]];
		if (prev && _cmp_matcher(prev, m) == 0)
			continue;
		prev = m;
		if (!first)
			_emit(&o, ",", 1);
		first = false;
		_emit_str(&o, m->pub.name);
		_emit_str(&o, _op_text[m->pub.op]);
		_emit_value(&o, m->pub.value);
	}
	_emit(&o, "}", 1);
	if (len)
		buf[o.pos < len ? o.pos : len - 1] = '\0';
	return (int)o.pos;
}
