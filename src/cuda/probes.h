/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The contract between libflamewatch-cuda.so (which fires these USDT probes
 * inside a CUDA application) and the agent (whose BPF programs attach to
 * them). Fixed-width types only: the BPF side includes this file too. It is
 * a stable contract: add fields only at the end of a record, in a new
 * FW_CUDA_ABI version.
 *
 * USDT provider "flamewatch", every probe with a semaphore, so that with no
 * agent attached the library does no work beyond CUPTI's own:
 *
 *   flamewatch:launch(u64 correlation, u32 weight)
 *     Fired on the entry of an API call that puts work on the GPU (kernel,
 *     cooperative and graph launches, copies and sets in every form;
 *     runtime or driver, counted once when one wraps the other), in the
 *     launching thread, so the CPU stack at the probe is the stack that
 *     launched the work. On entry, because the exit of a long call (a
 *     synchronous copy) may never be seen. weight: this launch stands for
 *     `weight` launches (1 unless launches are being sampled or
 *     duty-cycled).
 *
 *   flamewatch:activity(const struct fw_cuda_record *recs, u32 count)
 *     A batch of completed GPU work, count <= FW_CUDA_MAX_BATCH. The
 *     records live in the library's memory only for the duration of the
 *     probe: the BPF program copies them.
 *
 *   flamewatch:name(u64 addr, const char *name)
 *     The NUL-terminated mangled kernel name at addr, fired before the
 *     first activity probe whose records carry that name_addr, and again
 *     for each name once a tracer attaches anew. The agent keeps the name
 *     by (pid, addr), so records that reach it after the process exited
 *     (the final flush at exit) are still named. Names longer than the
 *     agent copies are read from the process by address, as without it.
 *
 *   flamewatch:conflict(const char *what)
 *     Another CUPTI subscriber holds the process (torch.profiler, Nsight):
 *     GPU time is not collected; what says so in one NUL-terminated line.
 *
 * A record's correlation matches the launch probe's: the agent joins the
 * two per pid, either may arrive first. A record standing for GPU time
 * carried from launches that were not kept carries the correlation of the
 * last kept launch of its kernel (or copy kind), or 0 when there was none.
 */
#ifndef FW_CUDA_PROBES_H
#define FW_CUDA_PROBES_H

#ifndef __VMLINUX_H__
#include <linux/types.h>	/* BPF programs get these types from vmlinux.h */
#endif

#define FW_CUDA_ABI 1
#define FW_CUDA_MAX_BATCH 64
#define FW_CUDA_PROVIDER "flamewatch"

/* fw_cuda_record.kind: the values of enum gpu_activity_kind (common/batch.h). */
#define FW_CUDA_KERNEL       0
#define FW_CUDA_MEMCPY_HTOD  1
#define FW_CUDA_MEMCPY_DTOH  2
#define FW_CUDA_MEMCPY_DTOD  3
#define FW_CUDA_MEMCPY_OTHER 4
#define FW_CUDA_MEMSET       5
/*
 * Not work of its own (weight 0, correlation 0, never GPU time): the
 * busy timeline, complete where the library read every kernel record.
 *   BUSY: the device ran kernels of this process throughout
 *     [start_ns, end_ns), coalesced from every kernel record the library
 *     read, whether or not its launch was kept; bytes holds the merge gap
 *     in ns (idle gaps shorter than it were merged into the span) and
 *     correlation the sum of those merged gaps: the idle time inside.
 *   COVERAGE: the library read every kernel record of work launched in
 *     [start_ns, end_ns) (activity on throughout): there, the BUSY spans are
 *     the whole truth and their gaps are idle time. device is unused.
 */
#define FW_CUDA_BUSY         6
#define FW_CUDA_COVERAGE     7
/*
 *   COLLECTION: how the library collects records from start_ns on, sent
 *     when that changes and every few seconds. weight: 1 every record
 *     (exact totals, complete busy timeline), 0 duty-cycled with the
 *     windows. bytes: what every record would cost the process, in
 *     millionths of its time, as measured (UINT64_MAX: not yet known).
 *     correlation: that cost per record in ns (0: not known). stream:
 *     the limit in millionths above which records are duty-cycled.
 *     device: what duty-cycled them, FW_CUDA_BY_COST or FW_CUDA_BY_RATE
 *     (launches a second over the library's ceiling, whatever the cost).
 *     name_addr: launches a second in the library's windows.
 */
#define FW_CUDA_COLLECTION   8
#define FW_CUDA_BY_COST      0
#define FW_CUDA_BY_RATE      1

struct fw_cuda_record {
	__u64 correlation;	/* CUPTI correlation id of the launching API call; see BUSY */
	__u64 start_ns;		/* Unix ns: the library converts CUPTI's clock */
	__u64 end_ns;
	/*
	 * Copies and sets: bytes. Kernels: the id of the CUDA graph the
	 * kernel ran in, 0 outside graphs. BUSY: the merge gap.
	 */
	__u64 bytes;
	/*
	 * Kernels: address in the application of the NUL-terminated mangled
	 * name, owned by the library and never freed while it is loaded (the
	 * agent reads it with process_vm_readv and caches it by (pid, address)).
	 * 0 for copies and sets.
	 */
	__u64 name_addr;
	__u32 device;
	__u32 stream;
	__u32 kind;		/* FW_CUDA_* */
	/*
	 * Duration x weight is the GPU time this record stands for: its own
	 * x the duty cycle, plus that of records of its kernel whose launches
	 * were not kept (docs/gpu-time.md, "Weights"). About the number of
	 * launches of this kernel it stands for; 1 unless sampled.
	 */
	__u32 weight;
};

_Static_assert(sizeof(struct fw_cuda_record) == 56, "fw_cuda_record is part of the ABI");

#endif
