/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_ENV_H
#define FW_COMMON_ENV_H

#include <stdint.h>

/*
 * A size in KiB from the environment variable name, in bytes: dflt_bytes
 * when it is unset or empty. A value that is not a plain decimal number of
 * at least min_kib KiB (a sign, a unit, trailing text, an overflow) is
 * refused with one warning naming it, and dflt_bytes is used: a testing
 * knob mistyped must not change behaviour without a word.
 */
uint64_t env__kib(const char *name, uint64_t dflt_bytes, uint64_t min_kib);

#endif
