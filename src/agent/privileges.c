// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent/privileges.h"
#include "common/log.h"

/* Older headers may lack the newest capabilities; their numbers are ABI. */
#ifndef CAP_PERFMON
#define CAP_PERFMON 38
#endif
#ifndef CAP_BPF
#define CAP_BPF 39
#endif
#ifndef CAP_CHECKPOINT_RESTORE
#define CAP_CHECKPOINT_RESTORE 40
#endif

#define BIT(c) (1ull << (c))

uint64_t privileges__agent_set(void)
{
	return BIT(CAP_BPF) | BIT(CAP_PERFMON) | BIT(CAP_SYSLOG) | BIT(CAP_SYS_PTRACE) |
	       BIT(CAP_DAC_READ_SEARCH) | BIT(CAP_CHECKPOINT_RESTORE);
}

static int _last_cap(void)
{
	int last = CAP_LAST_CAP;

	/* The running kernel may know more capabilities than our headers. */
	while (prctl(PR_CAPBSET_READ, last + 1, 0, 0, 0) >= 0)
		last++;
	return last;
}

int privileges__drop(uint64_t keep)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = {};
	int last = _last_cap();

	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) && errno != EINVAL)
		return -errno;
	/* The bounding set first: dropping from it needs CAP_SETPCAP, which goes next. */
	for (int c = 0; c <= last; c++) {
		if (c < 64 && (keep & BIT(c)))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) && errno != EINVAL && errno != EPERM)
			return -errno;
	}
	if (syscall(SYS_capget, &hdr, data))
		return -errno;
	for (int w = 0; w < 2; w++) {
		uint32_t k = (uint32_t)(keep >> (32 * w));

		data[w].effective &= k;
		data[w].permitted &= k;
		data[w].inheritable = 0;
	}
	if (syscall(SYS_capset, &hdr, data))
		return -errno;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -errno;
	return 0;
}
