/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_FOLDED_H
#define FW_FORMAT_FOLDED_H

#include <stdio.h>

struct profile;

/*
 * Writes p as FlameGraph collapsed stacks: one line per distinct text
 * "comm;root;...;leaf COUNT", counts summed over pid, tid and cpu, lines in
 * byte order so that equal profiles give equal files. Kernel frames get the
 * "_[k]" suffix that flamegraph.pl colours; unnamed frames print as
 * "[unknown]". ';' in a name becomes ':' and a line break becomes ' ', so a
 * name can never split a frame or a line.
 *
 * Borrows p and out; flushes out. Returns 0, -ENOMEM, or -EIO when writing
 * fails.
 */
int folded__write(const struct profile *p, FILE *out);

#endif
