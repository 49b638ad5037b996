/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_HOST_CGROUP_H
#define FW_HOST_CGROUP_H

#include <stddef.h>

/*
 * Finds the container id and Kubernetes pod uid in the text of
 * /proc/PID/cgroup. Runtimes name cgroups differently:
 *   0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1b2c_..._9.slice/cri-containerd-<64 hex>.scope
 *   0::/kubepods/burstable/pod1b2c-...-9/<64 hex>
 *   0::/system.slice/docker-<64 hex>.scope
 *   12:cpu,cpuacct:/docker/<64 hex>
 *   0::/machine.slice/libpod-<64 hex>.scope
 * The container id is the last run of 64 hex digits; the pod uid follows
 * "pod" and is written with dashes (systemd's underscores are converted).
 * Either is "" when absent. Always returns 0.
 */
int cgroup__parse(const char *text, char *container, size_t container_len, char *pod,
		  size_t pod_len);

/*
 * Kubernetes names of a container: kubelet keeps, for every container on
 * the node whatever the runtime, a log link named
 *   /var/log/containers/<pod name>_<namespace>_<container name>-<64 hex id>.log
 * (none of the names may hold '_'). cgroup__parse_log_name() splits one such
 * file name if it is container_id's: 0, or -ENOENT. cgroup__k8s_names() looks
 * for container_id's link in dir: 0, -ENOENT (not found, or no such dir).
 * Outputs are "" on failure.
 */
struct cgroup_k8s {
	char ns[64];
	char pod[254];
	char container[64];
};

int cgroup__parse_log_name(const char *name, const char *container_id, struct cgroup_k8s *out);
int cgroup__k8s_names(const char *dir, const char *container_id, struct cgroup_k8s *out);

#endif
