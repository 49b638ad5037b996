/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_ROUTES_GPU_H
#define FW_SERVER_ROUTES_GPU_H

struct request;
struct store;
struct strbuf;

/*
 * GET /api/v1/gpu/metrics?from=&to=&query=&step=: every metric series in
 * the window matching query, as
 *   {"from","to","step","aggregation":{"points":"avg","max":"max"},
 *    "series":[{"metric":NAME,"labels":{...},"points":[[ts_ns,avg],...],
 *               "max":[max,...]}]}
 * with one point per step bucket that holds data (ts: the bucket start),
 * or every raw point with step=0 (avg = max = the value).
 */
void routes__gpu_metrics(struct request *r);
/* The newest value of each GPU metric series as Prometheus text (for /metrics). */
void routes__gpu_prometheus(struct store *store, struct strbuf *out);

#endif
