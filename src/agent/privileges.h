/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_PRIVILEGES_H
#define FW_AGENT_PRIVILEGES_H

#include <stdint.h>

/*
 * What a running agent still needs once its BPF programs are loaded and
 * attached, as a capability mask: CAP_BPF (new unwind-table maps, later
 * USDT programs), CAP_PERFMON (uprobe perf events, real kernel addresses),
 * CAP_SYSLOG (/proc/kallsyms addresses), CAP_SYS_PTRACE (/proc/PID/maps,
 * /proc/PID/root, reading a process's memory), CAP_DAC_READ_SEARCH (the
 * binaries of every user and container) and CAP_CHECKPOINT_RESTORE
 * (/proc/PID/map_files for deleted binaries).
 */
uint64_t privileges__agent_set(void);

/*
 * Drops every capability outside keep from the effective, permitted,
 * inheritable, ambient and bounding sets, and sets no_new_privs, so that
 * nothing the process runs later can regain them. Capabilities the process
 * does not hold stay absent. Returns 0 or -errno.
 */
int privileges__drop(uint64_t keep);

#endif
