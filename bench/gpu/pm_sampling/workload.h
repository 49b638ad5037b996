// SPDX-License-Identifier: Apache-2.0
/*
 * The probe's GPU work, with its own truth: every spin kernel records, in
 * a slot, the GPU's %globaltimer when its first block started and its last
 * block ended, so busy intervals are known on the GPU's clock without any
 * tracing. Fixed-work kernels (fma, tiny) serve the cost runs, where a
 * kernel that spins for a set time would hide a slowdown.
 * Functions return 0 or -1 (wl_error() says why).
 */
#ifndef WORKLOAD_H
#define WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

int wl_driver_init(void);                    /* cuInit only: no context yet */
int wl_init(int device, int slots);          /* context, slot arrays */
int wl_sm_count(void);
int wl_reset(void);                          /* clears every slot */
int wl_spin(int blocks, uint64_t ns, int slot); /* async; slot < slots */
int wl_sync(void);
int wl_fetch(uint64_t *start, uint64_t *end, int n);
int wl_clock(uint64_t *gpu_ns);              /* %globaltimer, read by a kernel */
int wl_fma(int blocks, int iters);           /* fixed work, async */
int wl_tiny(void);                           /* fixed small work, async */
int wl_copy_init(size_t bytes);              /* pinned host + device buffers */
int wl_copy(int to_device, float *ms);       /* one copy, synchronous; CUDA events time it */
int wl_mem(size_t *free_b, size_t *total_b);
const char *wl_error(void);

#ifdef __cplusplus
}
#endif
#endif
