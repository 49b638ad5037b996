// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "agent/bpf/libwatch.h"
#include "agent/core_btf.h"
#include "agent/ringbuf.h"
#include "agent/skel_bytes.h"
#include "agent/cuda/lib_watch.h"
#include "agent/procmaps.h"
#include "bpf/libwatch.skel.h"
#include "common/log.h"

/* A loader file, hooked (link) or not (tried once). */
struct loader {
	uint64_t dev, ino;
	struct bpf_link *link;
};

struct lib_watch {
	struct libwatch_bpf *skel;
	struct ringbuf *rb;
	struct loader *loaders;
	uint32_t nloaders, nhooked;
	void (*fn)(void *ctx, pid_t pid);	/* during lib_watch__drain() */
	void *ctx;
};

static int _on_record(void *ctx, void *data, size_t size)
{
	struct lib_watch *w = ctx;
	const struct fw_lib_event *e = data;

	if (size >= sizeof(*e) && w->fn)
		w->fn(w->ctx, (pid_t)e->pid);
	return 0;
}

struct lib_watch *lib_watch__open(const char *name)
{
	size_t len = strlen(name);
	struct core_btf btf = { .fd = -1 };
	struct lib_watch *w;
	int err;

	if (!len || len >= FW_LIBWATCH_NAME_LEN) {
		errno = EINVAL;
		return NULL;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	{
		size_t size;
		const void *elf = libwatch_bpf__elf_bytes(&size);

		core_btf__open(&btf, elf, size);
	}
	{
		LIBBPF_OPTS(bpf_object_open_opts, oo, .btf_custom_path = btf.path[0] ? btf.path : NULL);

		w->skel = libwatch_bpf__open_opts(&oo);
	}
	skel_bytes__release(libwatch_bpf__elf_bytes);
	if (!w->skel) {
		err = -errno;
		goto fail;
	}
	/* Attached per loader file by lib_watch__add_loader(). */
	bpf_program__set_autoattach(w->skel->progs.on_dl_debug_state, false);
	memcpy((char *)w->skel->rodata->watch_name, name, len);
	w->skel->rodata->watch_len = len;
	err = libwatch_bpf__load(w->skel);
	core_btf__close(&btf);
	if (err)
		goto fail;
	w->rb = ringbuf__new(bpf_map__fd(w->skel->maps.lib_events), _on_record, w);
	if (!w->rb) {
		err = -errno;
		goto fail;
	}
	return w;
fail:
	core_btf__close(&btf);
	lib_watch__close(w);
	errno = err ? -err : EINVAL;
	return NULL;
}

void lib_watch__close(struct lib_watch *w)
{
	if (!w)
		return;
	for (uint32_t i = 0; i < w->nloaders; i++)
		bpf_link__destroy(w->loaders[i].link);
	free(w->loaders);
	ringbuf__free(w->rb);
	libwatch_bpf__destroy(w->skel);
	free(w);
}

bool lib_watch__is_loader(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	/* ld-linux-x86-64.so.2, ld-2.31.so (older glibc), ld-musl-x86_64.so.1 */
	return !strncmp(base, "ld-", 3) && strstr(base, ".so");
}

/* The file offset of the code at vaddr, through the PT_LOAD segment holding it. */
static int _vaddr_to_offset(Elf *elf, uint64_t vaddr, uint64_t *off)
{
	size_t n;

	if (elf_getphdrnum(elf, &n))
		return -ENOEXEC;
	for (size_t i = 0; i < n; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
			*off = vaddr - ph.p_vaddr + ph.p_offset;
			return 0;
		}
	}
	return -ENOENT;
}

/*
 * Where to probe in the loader at fd (a file offset) and how far _r_debug
 * lies from there. Only x86-64 loaders: the BPF side reads <link.h>'s
 * structures with x86-64 offsets.
 */
static int _loader_syms(int fd, uint64_t *probe_off, int64_t *to_r_debug)
{
	uint64_t state = 0, r_debug = 0;
	Elf_Scn *scn = NULL;
	GElf_Ehdr eh;
	int err = -ENOENT;
	Elf *elf;

	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -ENOEXEC;
	if (!gelf_getehdr(elf, &eh) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_machine != EM_X86_64) {
		err = -ENOEXEC;
		goto out;
	}
	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *data;
		GElf_Shdr sh;
		size_t n;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		n = data ? sh.sh_size / sh.sh_entsize : 0;
		for (size_t i = 0; i < n; i++) {
			const char *name;
			GElf_Sym sym;

			if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (name && !strcmp(name, "_dl_debug_state"))
				state = sym.st_value;
			else if (name && !strcmp(name, "_r_debug"))
				r_debug = sym.st_value;
		}
	}
	if (!state || !r_debug)
		goto out;
	err = _vaddr_to_offset(elf, state, probe_off);
	*to_r_debug = (int64_t)(r_debug - state);
out:
	elf_end(elf);
	return err;
}

int lib_watch__add_loader(struct lib_watch *w, const char *proc_root, pid_t pid,
			  const struct proc_mapping *m)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts);
	uint64_t dev = ((uint64_t)m->dev_major << 32) | m->dev_minor;
	char self[64];
	struct loader *l;
	uint64_t off = 0;
	int64_t delta = 0;
	int fd, err;

	for (uint32_t i = 0; i < w->nloaders; i++)
		if (w->loaders[i].dev == dev && w->loaders[i].ino == m->inode)
			return 0;
	l = realloc(w->loaders, (w->nloaders + 1) * sizeof(*l));
	if (!l)
		return -ENOMEM;
	w->loaders = l;
	l = &w->loaders[w->nloaders++];
	*l = (struct loader){ .dev = dev, .ino = m->inode };
	fd = procmaps__open_file(proc_root, pid, m);
	if (fd < 0)
		return fd;
	err = _loader_syms(fd, &off, &delta);
	if (err)
		goto out;
	opts.bpf_cookie = (uint64_t)delta;
	/*
	 * pid -1: every process mapping the file, including later ones. The
	 * kernel resolves the path itself: /proc/self/fd names the file we
	 * checked, not whatever the process's path leads to by then.
	 */
	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	l->link = bpf_program__attach_uprobe_opts(w->skel->progs.on_dl_debug_state, -1, self,
						  off, &opts);
	if (!l->link) {
		err = -errno;
		goto out;
	}
	w->nhooked++;
	err = 1;
out:
	close(fd);
	return err;
}

int lib_watch__drain(struct lib_watch *w, void (*fn)(void *ctx, pid_t pid), void *ctx)
{
	int n;

	w->fn = fn;
	w->ctx = ctx;
	n = ringbuf__consume(w->rb);
	w->fn = NULL;
	w->ctx = NULL;
	return n;
}

int lib_watch__fd(const struct lib_watch *w)
{
	return ringbuf__fd(w->rb);
}

int lib_watch__stats(struct lib_watch *w, struct lib_watch_stats *out)
{
	int ncpus = libbpf_num_possible_cpus();
	uint64_t sum[FW_LIBWATCH_STAT_MAX] = { 0 };
	__u64 *values;

	memset(out, 0, sizeof(*out));
	out->loaders = w->nhooked;
	if (ncpus < 0)
		return ncpus;
	values = calloc(ncpus, sizeof(*values));
	if (!values)
		return -ENOMEM;
	for (__u32 key = 0; key < FW_LIBWATCH_STAT_MAX; key++) {
		if (bpf_map__lookup_elem(w->skel->maps.libwatch_stats, &key, sizeof(key), values,
					 ncpus * sizeof(*values), 0))
			continue;
		for (int cpu = 0; cpu < ncpus; cpu++)
			sum[key] += values[cpu];
	}
	free(values);
	out->calls = sum[FW_LIBWATCH_CALLS];
	out->walks = sum[FW_LIBWATCH_WALKS];
	out->names = sum[FW_LIBWATCH_NAMES];
	out->events = sum[FW_LIBWATCH_EVENTS];
	out->lost = sum[FW_LIBWATCH_RINGBUF_FULL];
	out->faults = sum[FW_LIBWATCH_FAULTS];
	out->truncated = sum[FW_LIBWATCH_TRUNCATED];
	return 0;
}
