// SPDX-License-Identifier: Apache-2.0
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "host/cgroup.h"

#define CONTAINER_ID_LEN 64
#define POD_UID_LEN 36

static size_t _hex_run(const char *p)
{
	size_t n = 0;

	while (isxdigit((unsigned char)p[n]) && !isupper((unsigned char)p[n]))
		n++;
	return n;
}

/* A pod uid: 8-4-4-4-12 hex digits separated by '-' or '_'. */
static bool _is_uid(const char *p)
{
	static const int groups[] = { 8, 4, 4, 4, 12 };

	for (int g = 0; g < 5; g++) {
		for (int i = 0; i < groups[g]; i++, p++)
			if (!isxdigit((unsigned char)*p))
				return false;
		if (g < 4 && *p != '-' && *p != '_')
			return false;
		if (g < 4)
			p++;
	}
	return true;
}

int cgroup__parse(const char *text, char *container, size_t container_len, char *pod,
		  size_t pod_len)
{
	const char *p;

	if (container_len)
		container[0] = '\0';
	if (pod_len)
		pod[0] = '\0';
	for (p = text; *p; p++) {
		size_t run;

		if (!strncmp(p, "pod", 3) && _is_uid(p + 3) && pod_len > POD_UID_LEN) {
			for (int i = 0; i < POD_UID_LEN; i++)
				pod[i] = p[3 + i] == '_' ? '-' : p[3 + i];
			pod[POD_UID_LEN] = '\0';
			p += 3 + POD_UID_LEN - 1;
			continue;
		}
		/* Only a run that starts at a separator counts, not the tail of a longer word. */
		if (p != text && isxdigit((unsigned char)p[-1]))
			continue;
		run = _hex_run(p);
		if (run == CONTAINER_ID_LEN && container_len > CONTAINER_ID_LEN) {
			memcpy(container, p, CONTAINER_ID_LEN);
			container[CONTAINER_ID_LEN] = '\0';
		}
		if (run)
			p += run - 1;
	}
	return 0;
}

static int _copy_field(char *dst, size_t cap, const char *p, size_t n)
{
	if (n == 0 || n >= cap || memchr(p, '/', n))
		return -ENOENT;
	memcpy(dst, p, n);
	dst[n] = '\0';
	return 0;
}

int cgroup__parse_log_name(const char *name, const char *container_id, struct cgroup_k8s *out)
{
	size_t len = strlen(name), idlen = strlen(container_id), head;
	const char *u1, *u2;

	memset(out, 0, sizeof(*out));
	/* "<pod>_<ns>_<container>" "-" id ".log" */
	if (idlen != CONTAINER_ID_LEN || len < idlen + 5 + 6 ||
	    strcmp(name + len - 4, ".log") || name[len - 4 - idlen - 1] != '-' ||
	    strncmp(name + len - 4 - idlen, container_id, idlen))
		return -ENOENT;
	head = len - 4 - idlen - 1;
	u1 = memchr(name, '_', head);
	u2 = u1 ? memchr(u1 + 1, '_', head - (u1 + 1 - name)) : NULL;
	if (!u2 || memchr(u2 + 1, '_', head - (u2 + 1 - name)) ||
	    _copy_field(out->pod, sizeof(out->pod), name, u1 - name) ||
	    _copy_field(out->ns, sizeof(out->ns), u1 + 1, u2 - u1 - 1) ||
	    _copy_field(out->container, sizeof(out->container), u2 + 1, name + head - u2 - 1)) {
		memset(out, 0, sizeof(*out));
		return -ENOENT;
	}
	return 0;
}

int cgroup__k8s_names(const char *dir, const char *container_id, struct cgroup_k8s *out)
{
	struct dirent *e;
	DIR *d;
	int ret = -ENOENT;

	memset(out, 0, sizeof(*out));
	if (strlen(container_id) != CONTAINER_ID_LEN)
		return -ENOENT;
	d = opendir(dir);
	if (!d)
		return -ENOENT;
	while ((e = readdir(d)))
		if (!cgroup__parse_log_name(e->d_name, container_id, out)) {
			ret = 0;
			break;
		}
	closedir(d);
	return ret;
}
