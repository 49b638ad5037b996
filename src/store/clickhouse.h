/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_CLICKHOUSE_H
#define FW_STORE_CLICKHOUSE_H

#include "store.h"

/* "clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DB][?OPTIONS]": docs/clickhouse.md. */
extern const struct store_backend store_clickhouse_backend;

#endif
