// SPDX-License-Identifier: Apache-2.0
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "agent/proc_table.h"
#include "agent/procmaps.h"
#include "common/log.h"
#include "common/safe_open.h"
#include "host/cgroup.h"
#include "symbolize/elf_file.h"

#define PROC_BUCKETS 1024
#define BIN_BUCKETS 256

struct proc {
	pid_t pid;
	struct proc_maps *maps;	/* NULL until read, or after exec */
	struct proc_info *info;	/* NULL until read, or after exec */
	uint64_t refreshed_round;
	bool gone;		/* its procfs directory was gone at the last sweep */
	struct proc *next;
};

struct proc_table {
	char *proc_root;
	struct binary *vdso;	/* this kernel's vDSO image, shared by every process */
	bool vdso_tried;
	struct proc *procs[PROC_BUCKETS];
	struct binary *bins[BIN_BUCKETS];
	uint64_t round;
	uint32_t nprocs;
};

struct proc_table *proc_table__new(const char *proc_root)
{
	struct proc_table *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->proc_root = strdup(proc_root);
	if (!t->proc_root) {
		free(t);
		errno = ENOMEM;
		return NULL;
	}
	t->round = 1;
	return t;
}


static void _info_free(struct proc_info *info)
{
	if (info)
		free(info->k8s);
	free(info);
}
static void _binary_free(struct binary *b)
{
	elf_file__close(b->elf);
	if (b->fd >= 0)
		close(b->fd);
	free(b->path);
	free(b->root);
	free(b);
}

void proc_table__free(struct proc_table *t)
{
	if (!t)
		return;
	for (int i = 0; i < PROC_BUCKETS; i++) {
		struct proc *p, *next;

		for (p = t->procs[i]; p; p = next) {
			next = p->next;
			free(p->maps);
			_info_free(p->info);
			free(p);
		}
	}
	for (int i = 0; i < BIN_BUCKETS; i++) {
		struct binary *b, *next;

		for (b = t->bins[i]; b; b = next) {
			next = b->next;
			_binary_free(b);
		}
	}
	if (t->vdso)
		_binary_free(t->vdso);
	free(t->proc_root);
	free(t);
}

static struct proc **_proc_slot(struct proc_table *t, pid_t pid)
{
	struct proc **pp = &t->procs[(uint32_t)pid % PROC_BUCKETS];

	while (*pp && (*pp)->pid != pid)
		pp = &(*pp)->next;
	return pp;
}

static struct proc *_proc_get(struct proc_table *t, pid_t pid)
{
	struct proc **pp = _proc_slot(t, pid);

	if (!*pp) {
		*pp = calloc(1, sizeof(**pp));
		if (!*pp)
			return NULL;
		(*pp)->pid = pid;
		t->nprocs++;
	}
	return *pp;
}

static void _proc_refresh(struct proc_table *t, struct proc *p)
{
	char path[PATH_MAX];

	if (p->refreshed_round == t->round)
		return;
	p->refreshed_round = t->round;
	snprintf(path, sizeof(path), "%s/%d/maps", t->proc_root, p->pid);
	free(p->maps);
	p->maps = procmaps__read(path);
	if (!p->maps)
		pr_debug("cannot read %s: %s\n", path, strerror(errno));
}

/*
 * The root directory to look for a binary's debug files under. A process
 * that shares the host's root gets "", so its symbols still resolve after
 * it has exited and /proc/PID/root has gone with it.
 */
static void _debug_root(struct proc_table *t, pid_t pid, char *buf, size_t len)
{
	struct stat host, proc;

	snprintf(buf, len, "%s/%d/root", t->proc_root, pid);
	if (stat("/", &host) == 0 && stat(buf, &proc) == 0 &&
	    host.st_dev == proc.st_dev && host.st_ino == proc.st_ino)
		buf[0] = '\0';
}

static struct binary *_binary_get(struct proc_table *t, pid_t pid, const struct proc_mapping *m)
{
	uint64_t dev = ((uint64_t)m->dev_major << 32) | m->dev_minor;
	struct binary **bb = &t->bins[(dev ^ m->inode) % BIN_BUCKETS];
	struct binary *b;
	char root[64];

	for (b = *bb; b; b = b->next)
		if (b->dev == dev && b->inode == m->inode)
			return b;

	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	_debug_root(t, pid, root, sizeof(root));
	b->dev = dev;
	b->inode = m->inode;
	b->user_id = -1;
	b->path = strdup(m->path);
	b->root = strdup(root);
	if (!b->path || !b->root) {
		_binary_free(b);
		return NULL;
	}
	b->fd = procmaps__open_file(t->proc_root, pid, m);
	if (b->fd < 0) {
		pr_debug("cannot open %s of pid %d: %s\n", m->path, pid, strerror(-b->fd));
		b->fd = -1;
	} else {
		b->elf = elf_file__open(b->fd, b->root);
		if (!b->elf)
			pr_debug("cannot read %s as ELF: %s\n", m->path, strerror(errno));
		else if (elf_file__set_path(b->elf, b->path))
			pr_debug("no debug-file lookup by debuglink for %s\n", m->path);
	}
	b->next = *bb;
	*bb = b;
	return b;
}

/*
 * Every process maps the same vDSO, the kernel's, and ours is readable at
 * AT_SYSINFO_EHDR. A copy in a memfd makes it a binary like any other, so
 * its frames get names (__vdso_clock_gettime) and unwind through its own
 * .eh_frame instead of losing their caller.
 */
static struct binary *_vdso(struct proc_table *t)
{
	const unsigned char *image = (const void *)getauxval(AT_SYSINFO_EHDR);
	const Elf64_Ehdr *eh = (const void *)image;
	struct binary *b;
	size_t size = 0;
	int fd;

	if (t->vdso || t->vdso_tried)
		return t->vdso;
	t->vdso_tried = true;
	if (!image || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64)
		return NULL;
	/* The image is the span of its section headers: they come last. */
	size = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	if (size > (1 << 20))
		return NULL;
	fd = memfd_create("fw-vdso", MFD_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (write(fd, image, size) != (ssize_t)size) {
		close(fd);
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		close(fd);
		return NULL;
	}
	b->fd = fd;
	b->user_id = -1;
	b->path = strdup("[vdso]");
	b->root = strdup("");
	b->elf = elf_file__open(fd, "");
	if (!b->path || !b->root || !b->elf) {
		_binary_free(b);
		return NULL;
	}
	t->vdso = b;
	return b;
}

static bool _is_vdso(const struct proc_mapping *m)
{
	return !strcmp(m->path, "[vdso]");
}

void proc_table__lookup(struct proc_table *t, pid_t pid, uint64_t addr, struct addr_info *out)
{
	const struct proc_mapping *m = NULL;
	struct proc *p = _proc_get(t, pid);

	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	if (p->maps)
		m = procmaps__find(p->maps, addr);
	if (!m) {
		_proc_refresh(t, p);
		if (p->maps)
			m = procmaps__find(p->maps, addr);
	}
	if (!m)
		return;

	if (_is_vdso(m) && _vdso(t)) {
		out->kind = ADDR_FILE;
		out->bin = t->vdso;
		out->vaddr = addr - m->start;
		elf_file__offset_to_vaddr(out->bin->elf, addr - m->start, &out->vaddr);
		return;
	}
	if (m->path[0] == '[') {
		out->kind = ADDR_SPECIAL;
		out->name = m->path;
		out->vaddr = addr - m->start;
		return;
	}
	if (m->inode == 0) {
		out->kind = ADDR_ANON;
		return;
	}
	out->kind = ADDR_FILE;
	out->bin = _binary_get(t, pid, m);
	if (!out->bin) {
		out->kind = ADDR_UNKNOWN;
		return;
	}
	/* Without ELF program headers, the file offset is the best address we have. */
	out->vaddr = addr - m->start + m->offset;
	if (out->bin->elf)
		elf_file__offset_to_vaddr(out->bin->elf, addr - m->start + m->offset, &out->vaddr);
}

int proc_table__for_each_mapping(struct proc_table *t, pid_t pid,
				 int (*fn)(void *ctx, const struct proc_mapping *m,
					   struct binary *b),
				 void *ctx)
{
	struct proc *p = _proc_get(t, pid);

	if (!p)
		return -ENOMEM;
	if (!p->maps)
		_proc_refresh(t, p);
	if (!p->maps)
		return -ESRCH;
	for (size_t i = 0; i < p->maps->n; i++) {
		const struct proc_mapping *m = &p->maps->m[i];
		struct binary *b = NULL;
		int ret;

		if (m->inode && m->path[0] != '[')
			b = _binary_get(t, pid, m);
		else if (_is_vdso(m))
			b = _vdso(t);
		ret = fn(ctx, m, b);
		if (ret)
			return ret;
	}
	return 0;
}

void proc_table__exec(struct proc_table *t, pid_t pid)
{
	struct proc *p = *_proc_slot(t, pid);

	if (p) {
		free(p->maps);
		p->maps = NULL;
		_info_free(p->info);
		p->info = NULL;
		p->refreshed_round = 0;
	}
}

void proc_table__exit(struct proc_table *t, pid_t pid)
{
	struct proc **pp = _proc_slot(t, pid), *p = *pp;

	if (!p)
		return;
	*pp = p->next;
	free(p->maps);
	_info_free(p->info);
	free(p);
	t->nprocs--;
}

void proc_table__next_round(struct proc_table *t)
{
	t->round++;
}

unsigned int proc_table__sweep(struct proc_table *t, void (*gone)(void *ctx, pid_t pid),
			       void *ctx)
{
	char path[PATH_MAX];
	unsigned int n = 0;
	struct stat st;

	for (int i = 0; i < PROC_BUCKETS; i++) {
		struct proc **pp = &t->procs[i];

		while (*pp) {
			struct proc *p = *pp;
			bool was_gone = p->gone;

			snprintf(path, sizeof(path), "%s/%d", t->proc_root, p->pid);
			p->gone = stat(path, &st) != 0 && errno == ENOENT;
			if (!p->gone || !was_gone) {
				pp = &p->next;
				continue;
			}
			if (gone)
				gone(ctx, p->pid);
			*pp = p->next;
			free(p->maps);
			_info_free(p->info);
			free(p);
			t->nprocs--;
			n++;
		}
	}
	return n;
}

/* Reads a small /proc file into buf, NUL-terminated, newline cut. Returns its length or -1. */
static ssize_t _read_small(const char *path, char *buf, size_t len)
{
	ssize_t n = safe_open__read_proc(AT_FDCWD, path, buf, len);

	if (n < 0)
		buf[0] = '\0';
	return n < 0 ? -1 : n;
}

const struct proc_info *proc_table__info(struct proc_table *t, pid_t pid)
{
	struct proc *p = _proc_get(t, pid);
	char path[PATH_MAX], cgroup[4096];
	ssize_t n;

	if (!p)
		return NULL;
	if (p->info)
		return p->info;
	p->info = calloc(1, sizeof(*p->info));
	if (!p->info)
		return NULL;
	snprintf(path, sizeof(path), "%s/%d/comm", t->proc_root, pid);
	_read_small(path, p->info->comm, sizeof(p->info->comm));
	snprintf(path, sizeof(path), "%s/%d/exe", t->proc_root, pid);
	n = readlink(path, p->info->exe, sizeof(p->info->exe) - 1);
	p->info->exe[n > 0 ? n : 0] = '\0';
	snprintf(path, sizeof(path), "%s/%d/cgroup", t->proc_root, pid);
	if (_read_small(path, cgroup, sizeof(cgroup)) > 0)
		cgroup__parse(cgroup, p->info->container, sizeof(p->info->container),
			      p->info->pod, sizeof(p->info->pod));
	/*
	 * The names come from the host's kubelet log links: ours when the agent
	 * runs on the host (or the directory is mounted), else through pid 1's
	 * root, so that an agent in a container (hostPID) needs no extra mount.
	 */
	if (p->info->pod[0] && p->info->container[0]) {
		struct cgroup_k8s k;

		snprintf(path, sizeof(path), "%s/1/root/var/log/containers", t->proc_root);
		if (!cgroup__k8s_names("/var/log/containers", p->info->container, &k) ||
		    !cgroup__k8s_names(path, p->info->container, &k)) {
			p->info->k8s = malloc(sizeof(k));
			if (p->info->k8s)
				*p->info->k8s = k;
		}
	}
	return p->info;
}

/*
 * From /proc/PID/status: the process's uids (real, effective, saved, file
 * system) and its pid in its own pid namespace, which the JIT names its
 * perf map with. Returns 0 or -errno.
 */
static int _status_ids(int piddir, uid_t uids[4], pid_t *nspid)
{
	struct safe_lines lr;
	bool have_uids = false;
	char *line;
	size_t len;
	int fd, err;

	fd = safe_open__proc(piddir, "status");
	if (fd < 0)
		return fd;
	/* Lines are short but for Groups:, which can be skipped. */
	err = safe_lines__init(&lr, fd, 0, 4096, 1 << 20);
	if (err)
		goto out;
	while ((line = safe_lines__next(&lr, &len, NULL))) {
		unsigned int u[4];
		char *last;

		if (!strncmp(line, "Uid:", 4) &&
		    sscanf(line + 4, "%u %u %u %u", &u[0], &u[1], &u[2], &u[3]) == 4) {
			for (int i = 0; i < 4; i++)
				uids[i] = u[i];
			have_uids = true;
		} else if (!strncmp(line, "NSpid:", 6)) {
			last = strrchr(line, '\t');
			if (last)
				*nspid = atoi(last + 1);
			break;
		}
	}
	err = lr.err ? lr.err : have_uids ? 0 : -ENODATA;
	safe_lines__release(&lr);
out:
	close(fd);
	return err;
}

static const char *_refusal(int err)
{
	switch (err) {
	case -ELOOP:
		return "a symbolic link (not followed)";
	case -EINVAL:
		return "not a regular file";
	case -EISDIR:
		return "a directory";
	case -EPERM:
		return "not owned by the process's user";
	default:
		return strerror(-err);
	}
}

int proc_table__open_perfmap(struct proc_table *t, pid_t pid)
{
	char path[PATH_MAX];
	struct safe_open_opts o = { .n_uids = 4 };
	uid_t uids[4];
	pid_t nspid = pid;
	int piddir, rootfd, fd;

	/* One directory descriptor: status and root are the same process's, even if pid is reused. */
	snprintf(path, sizeof(path), "%s/%d", t->proc_root, pid);
	piddir = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (piddir < 0)
		return -errno;
	fd = _status_ids(piddir, uids, &nspid);
	if (fd < 0)
		goto out;
	rootfd = openat(piddir, "root", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0) {
		fd = -errno;
		goto out;
	}
	/*
	 * perf's rule, made for a reader running as root: the map must be
	 * the process's own, as a JIT writes it. A map of another owner
	 * (root's included, unless the process runs as root) may be
	 * someone else's file put or mounted there.
	 */
	o.uids = uids;
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", nspid);
	fd = safe_open__at(rootfd, path, &o, NULL);
	close(rootfd);
	if (fd < 0 && fd != -ENOENT)
		pr_debug("perf map %s of pid %d: %s\n", path, pid, _refusal(fd));
out:
	close(piddir);
	return fd;
}

void proc_table__for_each_binary(struct proc_table *t, void (*fn)(void *ctx, struct binary *b),
				 void *ctx)
{
	for (int i = 0; i < BIN_BUCKETS; i++)
		for (struct binary *b = t->bins[i]; b; b = b->next)
			fn(ctx, b);
	if (t->vdso)
		fn(ctx, t->vdso);
}

uint32_t proc_table__nprocs(const struct proc_table *t)
{
	return t->nprocs;
}
