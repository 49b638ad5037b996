/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_FOLDED_READ_H
#define FW_FORMAT_FOLDED_READ_H

#include <stddef.h>
#include <stdint.h>

struct batch;

#define FOLDED_MAX_DEPTH 1024
/* Each line is a sample of some 40 bytes, from as few as 4 bytes of text. */
#define FOLDED_MAX_LINES 1000000

/*
 * Reads FlameGraph's collapsed stacks ("comm;root;...;leaf COUNT" per line;
 * blank lines and lines starting with '#' are skipped) into b: one sample of
 * value COUNT per line, stamped ts_ns, in the series given by the n labels
 * plus comm = the line's first field. Frames have no address: each distinct
 * name is one frame. Names longer than 1023 bytes are cut; stacks deeper
 * than FOLDED_MAX_DEPTH keep their FOLDED_MAX_DEPTH - 1 root-most frames
 * and end in a "[truncated]" frame, as agent batches do.
 *
 * Borrows text (len bytes, need not be NUL-terminated), the labels and b.
 * All or nothing: on error b holds no sample (it is reset) and err says
 * which line was wrong. Returns 0, -EINVAL (malformed line, a NUL byte, bad
 * labels), -E2BIG (more than FOLDED_MAX_LINES stacks, counted before any is
 * read) or -ENOMEM.
 */
int folded__read(const char *text, size_t len, const char *const *names,
		 const char *const *values, size_t n, int64_t ts_ns, struct batch *b,
		 char *err, size_t err_len);

#endif
