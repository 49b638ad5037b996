/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_LOG_H
#define FW_COMMON_LOG_H

#include <stdarg.h>

/*
 * One logging family for the whole program. The level is checked before any
 * formatting happens, so pr_debug() in a hot path costs one comparison when
 * debugging is off. Messages go to stderr, prefixed with the level.
 */
enum log_level {
	LOG_WARN = 0,
	LOG_INFO = 1,
	LOG_DEBUG = 2,
};

extern enum log_level log__level;

void log__set_level(enum log_level level);
void log__printf(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void log__vprintf(enum log_level level, const char *fmt, va_list ap);

#define pr_warn(...)  do { log__printf(LOG_WARN, __VA_ARGS__); } while (0)
#define pr_info(...)  do { if (log__level >= LOG_INFO) log__printf(LOG_INFO, __VA_ARGS__); } while (0)
#define pr_debug(...) do { if (log__level >= LOG_DEBUG) log__printf(LOG_DEBUG, __VA_ARGS__); } while (0)

#endif
