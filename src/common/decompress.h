/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_DECOMPRESS_H
#define FW_COMMON_DECOMPRESS_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decompress an untrusted body, never producing more than cap bytes: a
 * compression bomb costs at most cap + 1 bytes of memory and the time to
 * produce them. On success *out is an owned buffer (free() it) of *out_len
 * bytes. Errors: -E2BIG (over cap), -EBADMSG (corrupt or truncated
 * stream), -ENOMEM; a message goes to err.
 */
int decompress__gzip(const uint8_t *in, size_t len, size_t cap, uint8_t **out,
		     size_t *out_len, char *err, size_t err_len);
int decompress__zstd(const uint8_t *in, size_t len, size_t cap, uint8_t **out,
		     size_t *out_len, char *err, size_t err_len);

#endif
