// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host/cgroup.h"

#define CID "4f1d2c3b4a5968778695a4b3c2d1e0f0f1e2d3c4b5a69788796a5b4c3d2e1f00"

static void check(const char *text, const char *want_container, const char *want_pod)
{
	char container[80], pod[48];

	assert_int_equal(cgroup__parse(text, container, sizeof(container), pod, sizeof(pod)), 0);
	assert_string_equal(container, want_container);
	assert_string_equal(pod, want_pod);
}

static void test_kubernetes_systemd(void **state)
{
	check("0::/kubepods.slice/kubepods-burstable.slice/"
	      "kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
	      "cri-containerd-" CID ".scope\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
}

static void test_kubernetes_cgroupfs(void **state)
{
	check("0::/kubepods/besteffort/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/" CID "\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
}

static void test_docker_and_podman(void **state)
{
	check("0::/system.slice/docker-" CID ".scope\n", CID, "");
	check("12:cpu,cpuacct:/docker/" CID "\n11:memory:/docker/" CID "\n", CID, "");
	check("0::/machine.slice/libpod-" CID ".scope/container\n", CID, "");
}

/* CRI-O names its scopes crio-<id>; kubelet's systemd and cgroupfs drivers place them differently. */
static void test_crio(void **state)
{
	check("0::/kubepods.slice/kubepods-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/"
	      "crio-" CID ".scope\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	check("0::/kubepods/burstable/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/crio-" CID "\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	/* cgroup v1: one line per controller, all naming the same container. */
	check("12:memory:/kubepods.slice/kubepods-besteffort.slice/"
	      "kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-" CID ".scope\n"
	      "11:cpu,cpuacct:/kubepods.slice/kubepods-besteffort.slice/"
	      "kubepods-besteffort-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/crio-" CID ".scope\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
}

/* Kubernetes on Docker (cri-dockerd): systemd driver docker-<id>.scope, cgroupfs bare ids. */
static void test_kubernetes_docker(void **state)
{
	check("0::/kubepods.slice/kubepods-burstable.slice/"
	      "kubepods-burstable-pod1b2c3d4e_5f60_7182_93a4_b5c6d7e8f901.slice/docker-" CID ".scope\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
	check("0::/kubepods/pod1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901/" CID "\n",
	      CID, "1b2c3d4e-5f60-7182-93a4-b5c6d7e8f901");
}

/* Docker without Kubernetes, cgroup v2 with the cgroupfs driver; containerd (nerdctl) alone. */
static void test_docker_cgroupfs_v2_and_containerd(void **state)
{
	check("0::/docker/" CID "\n", CID, "");
	check("0::/system.slice/containerd.service/default/" CID "\n", CID, "");
	check("0::/system.slice/cri-containerd-" CID ".scope\n", CID, "");
}

static void test_host_processes(void **state)
{
	check("0::/user.slice/user-0.slice/session-3.scope\n", "", "");
	check("0::/init.scope\n", "", "");
	check("", "", "");
	/* 63 or 65 hex digits are not a container id. */
	check("0::/docker/" "4f1d2c3b4a5968778695a4b3c2d1e0f0f1e2d3c4b5a69788796a5b4c3d2e1f0" "\n", "", "");
	check("0::/docker/" CID "a\n", "", "");
}

static void test_log_name(void **state)
{
	struct cgroup_k8s k;

	assert_int_equal(cgroup__parse_log_name("trainer-7d9f8-x2x_ml-team_pytorch-" CID ".log", CID, &k), 0);
	assert_string_equal(k.pod, "trainer-7d9f8-x2x");
	assert_string_equal(k.ns, "ml-team");
	assert_string_equal(k.container, "pytorch");
	/* Another container's link, a wrong suffix, too few or too many fields. */
	assert_int_equal(cgroup__parse_log_name("p_ns_c-" CID ".log",
		"0000000000000000000000000000000000000000000000000000000000000000", &k), -ENOENT);
	assert_string_equal(k.pod, "");
	assert_int_equal(cgroup__parse_log_name("p_ns_c-" CID ".txt", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("p_c-" CID ".log", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("p_ns_c_x-" CID ".log", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("_ns_c-" CID ".log", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("p__c-" CID ".log", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("p_ns_-" CID ".log", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name(CID ".log", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("", CID, &k), -ENOENT);
	assert_int_equal(cgroup__parse_log_name("p_ns_c-" CID ".log", "short", &k), -ENOENT);
}

static void test_k8s_names_from_dir(void **state)
{
	char dir[] = "/tmp/fw-test-cgroup-XXXXXX", path[256];
	const char *names[] = {
		"other_default_app-4f1d2c3b4a5968778695a4b3c2d1e0f0f1e2d3c4b5a69788796a5b4c3d2e1f01.log",
		"web-0_shop_nginx-" CID ".log",
	};
	struct cgroup_k8s k;

	assert_non_null(mkdtemp(dir));
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		assert_int_equal(symlink("/var/log/pods/nowhere/0.log", path), 0);
	}
	assert_int_equal(cgroup__k8s_names(dir, CID, &k), 0);
	assert_string_equal(k.pod, "web-0");
	assert_string_equal(k.ns, "shop");
	assert_string_equal(k.container, "nginx");
	assert_int_equal(cgroup__k8s_names(dir,
		"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", &k), -ENOENT);
	assert_string_equal(k.ns, "");
	for (size_t i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		unlink(path);
	}
	rmdir(dir);
	assert_int_equal(cgroup__k8s_names(dir, CID, &k), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kubernetes_systemd),
		cmocka_unit_test(test_kubernetes_cgroupfs),
		cmocka_unit_test(test_docker_and_podman),
		cmocka_unit_test(test_crio),
		cmocka_unit_test(test_kubernetes_docker),
		cmocka_unit_test(test_docker_cgroupfs_v2_and_containerd),
		cmocka_unit_test(test_host_processes),
		cmocka_unit_test(test_log_name),
		cmocka_unit_test(test_k8s_names_from_dir),
	};

	return cmocka_run_group_tests_name("cgroup", tests, NULL, NULL);
}
