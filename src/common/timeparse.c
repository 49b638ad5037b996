// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ascii.h"
#include "timeparse.h"

#define YEAR_MIN	1970
#define YEAR_MAX	2262

/* Reads exactly n digits; false when any is missing. */
static bool _fixed(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!ascii__is_digit((*p)[i]))
			return false;
		v = v * 10 + ((*p)[i] - '0');
	}
	*p += n;
	*out = v;
	return true;
}

/* Reads one or more digits into an int64_t; false when none or overflow. */
static bool _count(const char **p, int64_t *out)
{
	const char *s = *p;
	int64_t v = 0;

	if (!ascii__is_digit(*s))
		return false;
	for (; ascii__is_digit(*s); s++)
		if (__builtin_mul_overflow(v, 10, &v) ||
		    __builtin_add_overflow(v, *s - '0', &v))
			return false;
	*p = s;
	*out = v;
	return true;
}

/* Reads '.' and 1 to 9 digits, scaled to nanoseconds; absent is 0. */
static bool _fraction(const char **p, int64_t *ns)
{
	const char *s = *p;
	int64_t v = 0, scale = NS_PER_S;
	int n = 0;

	*ns = 0;
	if (*s != '.')
		return true;
	for (s++; ascii__is_digit(*s); s++, n++) {
		if (n == 9)
			return false;
		scale /= 10;
		v += (*s - '0') * scale;
	}
	if (!n)
		return false;
	*p = s;
	*ns = v;
	return true;
}

static bool _is_leap(int y)
{
	return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static int _days_in_month(int y, int m)
{
	static const int days[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

	return m == 2 && _is_leap(y) ? 29 : days[m - 1];
}

/* Leap years in [1, y]. */
static int64_t _leaps(int64_t y)
{
	return y / 4 - y / 100 + y / 400;
}

/*
 * Days since 1970-01-01 for a valid date from 1970 on. Computed here rather
 * than with timegm(), which goes through time_t and struct tm and accepts
 * out-of-range fields by normalising them.
 */
static int64_t _days_since_epoch(int y, int m, int d)
{
	static const int before[12] = {
		0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334,
	};
	int64_t days;

	days = 365 * (int64_t)(y - 1970) + _leaps(y - 1) - _leaps(1969);
	days += before[m - 1] + (m > 2 && _is_leap(y));
	return days + d - 1;
}

static int _rfc3339(const char *s, int64_t *out)
{
	int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
	int64_t frac, secs, ns;

	if (!_fixed(&s, 4, &y) || *s++ != '-' || !_fixed(&s, 2, &mo) ||
	    *s++ != '-' || !_fixed(&s, 2, &d) || (*s != 'T' && *s != 't'))
		return -EINVAL;
	s++;
	if (!_fixed(&s, 2, &h) || *s++ != ':' || !_fixed(&s, 2, &mi) ||
	    *s++ != ':' || !_fixed(&s, 2, &sec) || !_fraction(&s, &frac))
		return -EINVAL;
	if (*s == 'Z' || *s == 'z') {
		s++;
	} else if (*s == '+' || *s == '-') {
		sign = *s++ == '+' ? 1 : -1;
		if (!_fixed(&s, 2, &oh) || *s++ != ':' || !_fixed(&s, 2, &om))
			return -EINVAL;
	} else {
		return -EINVAL;
	}
	if (*s)
		return -EINVAL;
	if (y < YEAR_MIN || y > YEAR_MAX || mo < 1 || mo > 12 || d < 1 ||
	    d > _days_in_month(y, mo) || h > 23 || mi > 59 || sec > 59 ||
	    oh > 23 || om > 59)
		return -EINVAL;
	/* Local time minus its offset from UTC; years <= 2262 cannot overflow. */
	secs = _days_since_epoch(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec -
	       sign * (oh * 3600 + om * 60);
	if (secs < 0 || __builtin_mul_overflow(secs, NS_PER_S, &ns) ||
	    __builtin_add_overflow(ns, frac, &ns))
		return -EINVAL;
	*out = ns;
	return 0;
}

static int _unix_seconds(const char *s, int64_t *out)
{
	int64_t secs, frac, ns;

	if (!_count(&s, &secs) || !_fraction(&s, &frac) || *s)
		return -EINVAL;
	if (__builtin_mul_overflow(secs, NS_PER_S, &ns) ||
	    __builtin_add_overflow(ns, frac, &ns))
		return -EINVAL;
	*out = ns;
	return 0;
}

static int _relative(const char *s, int64_t now_ns, int64_t *out)
{
	int64_t d, t;
	int err;

	if (now_ns < 0)
		return -EINVAL;
	if (!*s) {
		*out = now_ns;
		return 0;
	}
	if (*s != '-' && *s != '+')
		return -EINVAL;
	err = duration__parse(s + 1, &d);
	if (err)
		return err;
	if (*s == '-' ? __builtin_sub_overflow(now_ns, d, &t) :
			__builtin_add_overflow(now_ns, d, &t))
		return -EINVAL;
	if (t < 0)
		return -EINVAL;
	*out = t;
	return 0;
}

int time__parse_at(const char *s, int64_t now_ns, int64_t *unix_ns)
{
	if (!s || !unix_ns)
		return -EINVAL;
	if (!strncmp(s, "now", 3))
		return _relative(s + 3, now_ns, unix_ns);
	/* Four digits and '-' cannot start Unix seconds, which take no sign. */
	if (ascii__is_digit(s[0]) && ascii__is_digit(s[1]) && ascii__is_digit(s[2]) &&
	    ascii__is_digit(s[3]) && s[4] == '-')
		return _rfc3339(s, unix_ns);
	return _unix_seconds(s, unix_ns);
}

int time__parse(const char *s, int64_t *unix_ns)
{
	struct timespec ts;
	int64_t now = 0;

	/* The clock is read only when needed: it is the common path's cost. */
	if (s && !strncmp(s, "now", 3)) {
		if (clock_gettime(CLOCK_REALTIME, &ts))
			return -errno;
		now = (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
	}
	return time__parse_at(s, now, unix_ns);
}

int duration__parse(const char *s, int64_t *ns)
{
	static const struct {
		const char *name;
		int64_t ns;
	} units[] = {	/* longest name first where one prefixes another */
		{ "w", 7 * 86400 * NS_PER_S },
		{ "d", 86400 * NS_PER_S },
		{ "h", 3600 * NS_PER_S },
		{ "ms", 1000000 },
		{ "m", 60 * NS_PER_S },
		{ "s", NS_PER_S },
	};
	int64_t total = 0, n, part, last_unit = INT64_MAX;
	size_t u, len;

	if (!s || !ns || !*s)
		return -EINVAL;
	while (*s) {
		if (!_count(&s, &n))
			return -EINVAL;
		for (u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
			len = strlen(units[u].name);
			if (!strncmp(s, units[u].name, len))
				break;
		}
		if (u == sizeof(units) / sizeof(units[0]) ||
		    units[u].ns >= last_unit)
			return -EINVAL;
		s += len;
		last_unit = units[u].ns;
		if (__builtin_mul_overflow(n, units[u].ns, &part) ||
		    __builtin_add_overflow(total, part, &total))
			return -EINVAL;
	}
	*ns = total;
	return 0;
}
