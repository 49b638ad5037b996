/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_ASCII_H
#define FW_COMMON_ASCII_H

#include <stdbool.h>

/*
 * '0' to '9', for the parsers of what the API and the command line take
 * (times, durations, numbers): unlike isdigit(), no cast to unsigned char
 * is needed for a plain char.
 */
static inline bool ascii__is_digit(char c)
{
	return c >= '0' && c <= '9';
}

#endif
