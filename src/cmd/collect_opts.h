/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_CMD_COLLECT_OPTS_H
#define FW_CMD_COLLECT_OPTS_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * The collection options that `agent` and `run` both take, declared once:
 * their long options, their help lines and what each sets in struct
 * continuous_opts. -F, --node and --interval stay each command's own: their
 * errors, help or destination differ between the two.
 */

struct continuous_opts;

/*
 * getopt values of the collection options start here, above any letter and
 * any number a command gives its own long options.
 */
#define COLLECT_OPTS_FIRST 0x1000

/*
 * Copies the long options of a, then those of b (NULL: none), then the
 * collection options and a zero entry into out, which holds cap entries.
 * a and b end with a zero entry. Returns 0 or -ENOSPC.
 */
int collect_opts__longopts(struct option *out, size_t cap, const struct option *a,
			   const struct option *b);
/*
 * Applies one getopt result to co. Returns 0, -EINVAL on a bad value
 * (message printed) or 1 when c is not a collection option.
 */
int collect_opts__parse(struct continuous_opts *co, int c, const char *arg);
/* Prints the collection options' help lines, in agent's and run's columns. */
void collect_opts__usage(FILE *out);
/*
 * --java-perfmap-interval, which `record` takes too: a duration ("30s",
 * "2m") or plain seconds, at least one second. Returns 0 or -EINVAL
 * (message printed).
 */
int collect_opts__parse_java_interval(const char *arg, uint64_t *ns);
/*
 * --off-cpu-min, which `record` takes too: a duration ("1ms", "20ms")
 * between the two bounds. Returns 0 or -EINVAL (message printed).
 */
#define COLLECT_OFFCPU_MIN_NS_LO 1000000LL
#define COLLECT_OFFCPU_MIN_NS_HI 1000000000LL
int collect_opts__parse_offcpu_min(const char *arg, uint64_t *ns);

#endif
