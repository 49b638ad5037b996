/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_TIMEPARSE_H
#define FW_COMMON_TIMEPARSE_H

#include <stdint.h>

/*
 * Times and durations as the query API and the command line take them.
 * Everything is Unix nanoseconds in an int64_t, so valid times run from
 * 1970-01-01T00:00:00Z to 2262-04-11T23:47:16.854775807Z; anything outside,
 * or anything that would overflow on the way, is -EINVAL rather than
 * wrapped or clamped. No leading or trailing blanks are accepted.
 */

/* Nanoseconds in a second, for callers that convert to and from seconds. */
#define NS_PER_S 1000000000LL

/*
 * Parses s (borrowed) into *unix_ns. Accepts:
 *   - Unix seconds with up to 9 fractional digits: 1700000000, 1700000000.25
 *     (no sign, no exponent; a millisecond timestamp is out of range);
 *   - RFC 3339 with seconds: 2026-12-02T11:20:09Z,
 *     2026-12-02t11:20:09.123456789+01:00, -00:00 meaning UTC; up to 9
 *     fractional digits; second 60 (a leap second) is rejected because Unix
 *     time cannot name it;
 *   - now, now-DURATION, now+DURATION with DURATION as duration__parse()
 *     takes it: now-15m, now-1h30m, now-7d.
 * Returns 0, or -EINVAL leaving *unix_ns untouched.
 */
int time__parse(const char *s, int64_t *unix_ns);

/* time__parse() with "now" fixed at now_ns (for tests and for one query). */
int time__parse_at(const char *s, int64_t now_ns, int64_t *unix_ns);

/*
 * Parses a duration such as 7d, 36h, 90s, 1h30m, 500ms into *ns: one or
 * more non-negative integer counts, each followed by a unit -- w, d, h, m,
 * s, ms -- in strictly decreasing order ("30m1h" and "1h1h" are rejected as
 * likely typos). A bare number, a fraction, a sign, an empty string and
 * overflow are -EINVAL, leaving *ns untouched. "0s" is 0: callers that need
 * a positive duration (retention, step) check for it.
 */
int duration__parse(const char *s, int64_t *ns);

#endif
