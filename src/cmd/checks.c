// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <linux/capability.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "store/timeparse.h"

#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif

static int _has_cap(const struct __user_cap_data_struct *data, int cap)
{
	return !!(data[cap / 32].effective & (1u << (cap % 32)));
}

int cmd__check_bpf_privileges(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = {};

	if (geteuid() == 0)
		return 0;
	if (syscall(SYS_capget, &hdr, data) == 0 &&
	    ((_has_cap(data, CAP_BPF) && _has_cap(data, CAP_PERFMON)) ||
	     _has_cap(data, CAP_SYS_ADMIN)))
		return 0;
	fprintf(stderr,
		"flamewatch: error: loading BPF programs needs root, or the CAP_BPF and "
		"CAP_PERFMON capabilities.\n"
		"  Run it with sudo, or grant them: sudo setcap cap_bpf,cap_perfmon,"
		"cap_sys_resource,cap_sys_ptrace,cap_dac_read_search+ep %s\n",
		"./build/flamewatch");
	return -1;
}

int cmd__check_btf(void)
{
	if (access("/sys/kernel/btf/vmlinux", R_OK) == 0)
		return 0;
	fprintf(stderr,
		"flamewatch: error: this kernel has no BTF type information "
		"(/sys/kernel/btf/vmlinux is missing).\n"
		"  flamewatch needs a kernel built with CONFIG_DEBUG_INFO_BTF=y "
		"(the default on Debian 11+, Ubuntu 20.10+, RHEL 8.2+).\n");
	return -1;
}

int cmd__parse_java_interval(const char *s, int64_t *ns)
{
	char *end;
	unsigned long v;

	if (duration__parse(s, ns) == 0)
		return *ns >= 1000000000LL ? 0 : -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 86400)
		return -EINVAL;
	*ns = (int64_t)v * 1000000000LL;
	return 0;
}
