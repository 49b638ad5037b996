/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The routes' handlers, which server.c's route table dispatches to once a
 * request has the token and method its route needs.
 */
#ifndef FW_SERVER_ROUTES_H
#define FW_SERVER_ROUTES_H

struct request;

void routes__ingest(struct request *r);
void routes__ingest_pprof(struct request *r);
void routes__ingest_folded(struct request *r);
void routes__profile(struct request *r);
/* GPU activity intervals and the kernel table (routes_gpu_kernels.c). */
void routes__gpu_kernels(struct request *r);
void routes__gpu_kernels_top(struct request *r);
/* CPU samples of a process while its GPU was idle (routes_gpu_idle.c). */
void routes__gpu_idle(struct request *r);
void routes__flamechart(struct request *r);
void routes__series(struct request *r);
void routes__labels(struct request *r);
void routes__label_values(struct request *r, const char *name);
void routes__cpu_strips(struct request *r);

#endif
