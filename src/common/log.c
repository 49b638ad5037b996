// SPDX-License-Identifier: Apache-2.0
#include <stdio.h>

#include "log.h"

enum log_level log__level = LOG_INFO;

static const char *const _level_names[] = {
	[LOG_WARN] = "warning",
	[LOG_INFO] = "info",
	[LOG_DEBUG] = "debug",
};

void log__set_level(enum log_level level)
{
	log__level = level;
}

void log__vprintf(enum log_level level, const char *fmt, va_list ap)
{
	if (level > log__level)
		return;
	fprintf(stderr, "flamewatch: %s: ", _level_names[level]);
	vfprintf(stderr, fmt, ap);
}

void log__printf(enum log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log__vprintf(level, fmt, ap);
	va_end(ap);
}
