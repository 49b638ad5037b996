/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_SPEEDSCOPE_H
#define FW_FORMAT_SPEEDSCOPE_H

#include <stdio.h>

struct profile;

/*
 * Writes p as a speedscope file (https://www.speedscope.app file format):
 * one "sampled" profile per process name, each sample a stack of shared
 * frame indexes (root first) weighted by its count in `unit` ("none" for
 * sample counts, "nanoseconds" for GPU time). Returns 0, -ENOMEM or -EIO.
 */
int speedscope__write(const struct profile *p, const char *unit, FILE *out);

#endif
