/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_PPROF_H
#define FW_FORMAT_PPROF_H

#include <stdbool.h>
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
/*
 * pprof__write() for a profile of off-CPU time (counts are nanoseconds
 * blocked, period_ns 1): one sample type, off_cpu/nanoseconds.
 */
int pprof__write_offcpu(const struct profile *p, FILE *out);
/* Likewise for GPU time (counts are GPU nanoseconds): gpu_time/nanoseconds. */
int pprof__write_gpu_time(const struct profile *p, FILE *out);
/* pprof__write() or pprof__write_offcpu(), as offcpu says. */
int pprof__write_type(const struct profile *p, bool offcpu, FILE *out);

#endif
