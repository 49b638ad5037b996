/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_SQLITE_H
#define FW_STORE_SQLITE_H

#include "store.h"

/*
 * The embedded backend: one SQLite database in write-ahead-log mode,
 * synchronous=FULL so that a committed batch survives power loss. Samples
 * are kept as compressed blocks per (series, type, 5-minute window), plus
 * per-minute and per-hour (stack, type, sum) rollups per series. Reached
 * through store__open(); the layout is described in sqlite.c.
 */
extern const struct store_backend store_sqlite_backend;

/* Samples of one series and type are grouped into blocks of this span. */
#define STORE_SQLITE_BLOCK_SPAN_NS (300LL * 1000000000LL)

#endif
