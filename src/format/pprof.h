/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_PPROF_H
#define FW_FORMAT_PPROF_H

#include <stdio.h>

struct profile;

/*
 * Writes p as a gzip-compressed pprof Profile (perftools.profiles), the form
 * `go tool pprof` reads. Sample types are samples/count and cpu/nanoseconds
 * (the default), each sample labelled with pid, tid, cpu (numbers) and comm
 * (string). Every frame becomes one Location, leaf first in each sample;
 * kernel frames without a mapping share a synthesised "[kernel.kallsyms]"
 * mapping. The output depends only on p: the gzip header carries no time.
 *
 * Borrows p and out; flushes out. Returns 0, -ENOMEM, or -EIO when writing
 * or compressing fails.
 */
int pprof__write(const struct profile *p, FILE *out);

#endif
