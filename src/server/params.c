// SPDX-License-Identifier: Apache-2.0
/*
 * Query parameters: every number and duration a request carries is checked
 * here, where it is parsed, against the range its route can take, so that
 * no route divides by a zero, wraps an int64 or hands the store a value it
 * refuses (which would read as the server's fault, a 500). A bad value is
 * a 400 naming the parameter and what it takes.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/ascii.h"
#include "common/timeparse.h"
#include "server/request.h"

int param__parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;

	if (!s || !ascii__is_digit(*s))
		return -EINVAL;
	for (; ascii__is_digit(*s); s++)
		if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *s - '0', &v))
			return -ERANGE;
	if (*s)
		return -EINVAL;
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int param__parse_duration(const char *s, unsigned int flags, int64_t min, int64_t max,
			  int64_t *out)
{
	uint64_t n;
	int64_t v;
	int err;

	if (!s || !*s)
		return -EINVAL;
	if (duration__parse(s, &v)) {
		if (!(flags & PARAM_BARE_NS))
			return -EINVAL;
		err = param__parse_uint(s, 0, INT64_MAX, &n);
		if (err)
			return err;
		v = (int64_t)n;
	}
	if (v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int param__parse_double(const char *s, double min, double max, double *out)
{
	const char *p = s;
	char *end;
	size_t digits = 0;
	double v;

	/*
	 * Decimal only: strtod() would also take blanks, hex floats, "nan"
	 * and "infinity", none of which a client means as a number here.
	 */
	if (!s)
		return -EINVAL;
	if (*p == '-')
		p++;
	for (; ascii__is_digit(*p); p++)
		digits++;
	if (*p == '.')
		for (p++; ascii__is_digit(*p); p++)
			digits++;
	if (!digits)
		return -EINVAL;
	if (*p == 'e' || *p == 'E') {
		p++;
		if (*p == '+' || *p == '-')
			p++;
		if (!ascii__is_digit(*p))
			return -EINVAL;
		while (ascii__is_digit(*p))
			p++;
	}
	if (*p)
		return -EINVAL;
	/* Past DBL_MAX is HUGE_VAL, not finite; an underflow is 0, a fine number. */
	v = strtod(s, &end);
	if (*end)
		return -EINVAL;
	if (!isfinite(v) || v < min || v > max)
		return -ERANGE;
	*out = v;
	return 0;
}

int param__parse_time(const char *s, int64_t *out)
{
	int64_t t;

	if (!s || time__parse(s, &t))
		return -EINVAL;
	if (t > PARAM_MAX_TIME_NS)
		return -ERANGE;
	*out = t;
	return 0;
}

/* A duration as the API writes them: the largest unit that divides it. */
static void _fmt_duration(char *buf, size_t len, int64_t ns)
{
	static const struct {
		const char *name;
		int64_t ns;
	} units[] = {
		{ "d", 86400 * NS_PER_S }, { "h", 3600 * NS_PER_S }, { "m", 60 * NS_PER_S },
		{ "s", NS_PER_S }, { "ms", 1000000 },
	};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (ns && ns % units[i].ns == 0) {
			snprintf(buf, len, "%" PRId64 "%s", ns / units[i].ns, units[i].name);
			return;
		}
	}
	snprintf(buf, len, "%" PRId64 "ns", ns);
}

int request__uint_param(struct request *r, const char *name, uint64_t def, uint64_t min,
			uint64_t max, uint64_t *out)
{
	const char *v = request__param(r, name);

	*out = def;
	if (!v || !param__parse_uint(v, min, max, out))
		return 0;
	request__error(r, 400, "%s: '%.64s' is not a whole number from %" PRIu64 " to %" PRIu64,
		       name, v, min, max);
	return -1;
}

int request__duration_param(struct request *r, const char *name, unsigned int flags,
			    int64_t def, int64_t min, int64_t max, int64_t *out)
{
	const char *v = request__param(r, name);
	char lo[32], hi[32];

	*out = def;
	if (!v || !param__parse_duration(v, flags, min, max, out))
		return 0;
	_fmt_duration(lo, sizeof(lo), min);
	_fmt_duration(hi, sizeof(hi), max);
	request__error(r, 400, "%s: '%.64s' is not a duration from %s to %s (500ms, 10s, 1m30s)%s",
		       name, v, min ? lo : "0s", hi,
		       flags & PARAM_BARE_NS ? " or a number of nanoseconds" : "");
	return -1;
}

int request__double_param(struct request *r, const char *name, double def, double min,
			  double max, double *out)
{
	const char *v = request__param(r, name);

	*out = def;
	if (!v || !param__parse_double(v, min, max, out))
		return 0;
	request__error(r, 400, "%s: '%.64s' is not a number from %g to %g", name, v, min, max);
	return -1;
}

int request__bool_param(struct request *r, const char *name, bool def, bool *out)
{
	const char *v = request__param(r, name);

	*out = def;
	if (!v)
		return 0;
	if (!strcmp(v, "1") || !strcmp(v, "true")) {
		*out = true;
		return 0;
	}
	if (!strcmp(v, "0") || !strcmp(v, "false")) {
		*out = false;
		return 0;
	}
	request__error(r, 400, "%s: '%.64s' is not one of 0, 1, false, true", name, v);
	return -1;
}

int request__text_param(struct request *r, const char *name, size_t max_len, const char **out)
{
	const char *v = request__param(r, name);
	size_t len;

	*out = v;
	if (!v)
		return 0;
	len = strlen(v);
	if (len > max_len) {
		request__error(r, 400, "%s: %zu bytes, longer than %zu", name, len, max_len);
		return -1;
	}
	for (size_t i = 0; i < len; i++) {
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f) {
			request__error(r, 400, "%s: '%.64s' holds a control character", name, v);
			return -1;
		}
	}
	return 0;
}
