// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bpf/btf.h>
#include <linux/btf.h>

#include "agent/core_btf.h"
#include "common/elf_sections.h"
#include "common/log.h"

#define KERNEL_BTF "/sys/kernel/btf/vmlinux"

/* A raw BTF blob (header, types, strings), its types indexed by id. */
struct raw_btf {
	const uint8_t *types;
	uint32_t types_len;
	const char *strs;
	uint32_t strs_len;
	uint32_t *off;		/* id -> offset in types; off[0] unused (void) */
	uint32_t n;		/* ids 1 .. n - 1 */
};

/* Open addressing, u32 -> u32; key 0 is never stored (void, "" map to 0). */
struct u32map {
	uint32_t *keys, *vals;
	uint32_t cap, n;
};

/* The cut being written. */
struct out_btf {
	uint8_t *types;
	size_t types_len, types_cap;
	char *strs;
	size_t strs_len, strs_cap;
};

static size_t _type_size(const struct btf_type *t)
{
	size_t vlen = btf_vlen(t);

	switch (btf_kind(t)) {
	case BTF_KIND_FWD:
	case BTF_KIND_CONST:
	case BTF_KIND_VOLATILE:
	case BTF_KIND_RESTRICT:
	case BTF_KIND_PTR:
	case BTF_KIND_TYPEDEF:
	case BTF_KIND_FUNC:
	case BTF_KIND_FLOAT:
	case BTF_KIND_TYPE_TAG:
		return sizeof(*t);
	case BTF_KIND_INT:
		return sizeof(*t) + sizeof(uint32_t);
	case BTF_KIND_ARRAY:
		return sizeof(*t) + sizeof(struct btf_array);
	case BTF_KIND_STRUCT:
	case BTF_KIND_UNION:
		return sizeof(*t) + vlen * sizeof(struct btf_member);
	case BTF_KIND_ENUM:
		return sizeof(*t) + vlen * sizeof(struct btf_enum);
	case BTF_KIND_ENUM64:
		return sizeof(*t) + vlen * sizeof(struct btf_enum64);
	case BTF_KIND_FUNC_PROTO:
		return sizeof(*t) + vlen * sizeof(struct btf_param);
	case BTF_KIND_VAR:
		return sizeof(*t) + sizeof(struct btf_var);
	case BTF_KIND_DATASEC:
		return sizeof(*t) + vlen * sizeof(struct btf_var_secinfo);
	case BTF_KIND_DECL_TAG:
		return sizeof(*t) + sizeof(struct btf_decl_tag);
	default:
		return 0;	/* a kind this code does not know */
	}
}

/* Checks the header and indexes the types. Returns 0 or -EINVAL/-ENOMEM. */
static int _raw_btf__parse(struct raw_btf *b, const uint8_t *data, size_t size)
{
	const struct btf_header *h = (const void *)data;
	uint32_t cap = 1024, pos = 0;

	memset(b, 0, sizeof(*b));
	if (size < sizeof(*h) || h->magic != BTF_MAGIC || h->version != BTF_VERSION ||
	    h->hdr_len < sizeof(*h) || h->hdr_len > size ||
	    (uint64_t)h->hdr_len + h->type_off + h->type_len > size ||
	    (uint64_t)h->hdr_len + h->str_off + h->str_len > size || h->str_len == 0 ||
	    (h->type_off & 3))
		return -EINVAL;
	b->types = data + h->hdr_len + h->type_off;
	b->types_len = h->type_len;
	b->strs = (const char *)data + h->hdr_len + h->str_off;
	b->strs_len = h->str_len;
	if (b->strs[b->strs_len - 1] != '\0')
		return -EINVAL;
	b->off = malloc(cap * sizeof(*b->off));
	if (!b->off)
		return -ENOMEM;
	b->n = 1;
	while (pos < b->types_len) {
		const struct btf_type *t = (const void *)(b->types + pos);
		size_t sz;

		if (b->types_len - pos < sizeof(*t))
			goto bad;
		sz = _type_size(t);
		if (!sz || sz > b->types_len - pos)
			goto bad;
		if (b->n == cap) {
			uint32_t *o = realloc(b->off, 2 * cap * sizeof(*o));

			if (!o) {
				free(b->off);
				b->off = NULL;
				return -ENOMEM;
			}
			b->off = o;
			cap *= 2;
		}
		b->off[b->n++] = pos;
		pos += sz;
	}
	return 0;
bad:
	free(b->off);
	b->off = NULL;
	return -EINVAL;
}

static const struct btf_type *_raw_btf__type(const struct raw_btf *b, uint32_t id)
{
	return id && id < b->n ? (const void *)(b->types + b->off[id]) : NULL;
}

static const char *_raw_btf__str(const struct raw_btf *b, uint32_t off)
{
	return off < b->strs_len ? b->strs + off : NULL;
}

static uint32_t _hash(uint32_t k)
{
	k *= 0x9e3779b1u;
	return k ^ (k >> 15);
}

/* The slot of key, or of the empty slot where it would go. */
static uint32_t _u32map__slot(const struct u32map *m, uint32_t key)
{
	uint32_t i = _hash(key) & (m->cap - 1);

	while (m->keys[i] && m->keys[i] != key)
		i = (i + 1) & (m->cap - 1);
	return i;
}

static bool _u32map__get(const struct u32map *m, uint32_t key, uint32_t *val)
{
	uint32_t i;

	if (!m->cap)
		return false;
	i = _u32map__slot(m, key);
	if (!m->keys[i])
		return false;
	*val = m->vals[i];
	return true;
}

static int _u32map__put(struct u32map *m, uint32_t key, uint32_t val)
{
	if (2 * (m->n + 1) > m->cap) {
		struct u32map g = { .cap = m->cap ? 2 * m->cap : 1024 };

		g.keys = calloc(g.cap, sizeof(*g.keys));
		g.vals = calloc(g.cap, sizeof(*g.vals));
		if (!g.keys || !g.vals) {
			free(g.keys);
			free(g.vals);
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < m->cap; i++) {
			if (m->keys[i]) {
				uint32_t j = _u32map__slot(&g, m->keys[i]);

				g.keys[j] = m->keys[i];
				g.vals[j] = m->vals[i];
			}
		}
		g.n = m->n;
		free(m->keys);
		free(m->vals);
		*m = g;
	}
	{
		uint32_t i = _u32map__slot(m, key);

		if (!m->keys[i])
			m->n++;
		m->keys[i] = key;
		m->vals[i] = val;
	}
	return 0;
}

static void _u32map__free(struct u32map *m)
{
	free(m->keys);
	free(m->vals);
	memset(m, 0, sizeof(*m));
}

static int _grow(void *pp, size_t *cap, size_t need)
{
	void **p = pp;
	size_t c = *cap ? *cap : 4096;
	void *n;

	if (need <= *cap)
		return 0;
	while (c < need)
		c *= 2;
	n = realloc(*p, c);
	if (!n)
		return -ENOMEM;
	*p = n;
	*cap = c;
	return 0;
}

/* The .BTF section of a BPF object's ELF bytes. */
static int _object_btf(const void *elf, size_t size, const uint8_t **btf, size_t *btf_size)
{
	Elf *e;
	Elf_Scn *scn;
	GElf_Shdr sh;
	Elf_Data *d;
	size_t shstrndx;
	int err = -ENOENT;

	elf_version(EV_CURRENT);
	e = elf_memory((char *)elf, size);
	if (!e)
		return -EINVAL;
	if (elf_getshdrstrndx(e, &shstrndx)) {
		elf_end(e);
		return -EINVAL;
	}
	scn = elf_sections__find(e, ".BTF", &sh);
	d = scn ? elf_rawdata(scn, NULL) : NULL;
	if (d && d->d_buf && d->d_size) {
		*btf = d->d_buf;	/* points into elf: the bytes are ours */
		*btf_size = d->d_size;
		err = 0;
	}
	elf_end(e);
	return err;
}

static int _cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static bool _is_root_kind(const struct btf_type *t)
{
	switch (btf_kind(t)) {
	case BTF_KIND_STRUCT:
	case BTF_KIND_UNION:
	case BTF_KIND_ENUM:
	case BTF_KIND_ENUM64:
	case BTF_KIND_TYPEDEF:
		return true;
	default:
		return false;
	}
}

/*
 * The names the object's BTF gives its structs, unions, enums and typedefs,
 * without a CO-RE flavour suffix ("task_struct___old" -> "task_struct"),
 * sorted; *buf holds the strings. Most are the kernel's (from vmlinux.h);
 * our own (fw_sample, ...) simply match nothing.
 */
static int _root_names(const struct raw_btf *local, char ***names, size_t *n, char **buf)
{
	size_t cap = 0, len = 0, count = 0;
	char *b = NULL;
	char **v;

	for (uint32_t id = 1; id < local->n; id++) {
		const struct btf_type *t = _raw_btf__type(local, id);
		const char *name = _raw_btf__str(local, t->name_off);
		const char *flavour;
		size_t l;

		if (!_is_root_kind(t) || !name || !name[0])
			continue;
		flavour = strstr(name, "___");
		l = flavour ? (size_t)(flavour - name) : strlen(name);
		if (_grow(&b, &cap, len + l + 1)) {
			free(b);
			return -ENOMEM;
		}
		memcpy(b + len, name, l);
		b[len + l] = '\0';
		len += l + 1;
		count++;
	}
	v = calloc(count ? count : 1, sizeof(*v));
	if (!v) {
		free(b);
		return -ENOMEM;
	}
	for (size_t i = 0, pos = 0; i < count; i++) {
		v[i] = b + pos;
		pos += strlen(b + pos) + 1;
	}
	qsort(v, count, sizeof(*v), _cmp_str);
	*names = v;
	*n = count;
	*buf = b;
	return 0;
}

/* The new id of kernel type id, assigning the next one on first sight. */
static int _visit(struct u32map *ids, uint32_t **order, size_t *norder, size_t *cap,
		  uint32_t id, uint32_t *new_id)
{
	if (!id) {
		*new_id = 0;
		return 0;
	}
	if (_u32map__get(ids, id, new_id))
		return 0;
	if (_grow(order, cap, (*norder + 1) * sizeof(**order)))
		return -ENOMEM;
	(*order)[(*norder)++] = id;
	*new_id = *norder;
	return _u32map__put(ids, id, *new_id);
}

/* The offset in the cut's strings of the kernel's string off. */
static int _str(struct out_btf *o, struct u32map *strs, const struct raw_btf *k,
		uint32_t off, uint32_t *new_off)
{
	const char *s = _raw_btf__str(k, off);
	size_t l;

	if (!off || !s || !s[0]) {
		*new_off = 0;
		return 0;
	}
	if (_u32map__get(strs, off, new_off))
		return 0;
	l = strlen(s) + 1;
	if (_grow(&o->strs, &o->strs_cap, o->strs_len + l))
		return -ENOMEM;
	memcpy(o->strs + o->strs_len, s, l);
	*new_off = o->strs_len;
	o->strs_len += l;
	return _u32map__put(strs, off, *new_off);
}

/* A member's or a parameter's name and type, renumbered in place. */
static int _name_and_type(struct out_btf *o, struct u32map *strs, const struct raw_btf *k,
			  struct u32map *ids, uint32_t **order, size_t *norder, size_t *cap,
			  uint32_t *name_off, uint32_t *type)
{
	uint32_t name = 0, t = 0;
	int err = _str(o, strs, k, *name_off, &name);

	if (!err)
		err = _visit(ids, order, norder, cap, *type, &t);
	*name_off = name;
	*type = t;
	return err;
}

/*
 * Copies the kernel types reachable from the roots through embedding,
 * renumbered in the order first seen. The walk and the copy are one loop:
 * copying type i visits (numbers) the types it refers to, which the loop
 * reaches later, so each type is written once and in id order.
 */
static int _cut(const struct raw_btf *k, const uint32_t *roots, size_t nroots, struct out_btf *o,
		uint32_t *ntypes)
{
	struct u32map ids = { 0 }, strs = { 0 };
	uint32_t *order = NULL;
	size_t norder = 0, cap = 0;
	int err = 0;

	if (_grow(&o->strs, &o->strs_cap, 1))
		return -ENOMEM;
	o->strs[0] = '\0';
	o->strs_len = 1;
	for (size_t i = 0; i < nroots && !err; i++) {
		uint32_t unused;

		err = _visit(&ids, &order, &norder, &cap, roots[i], &unused);
	}
	for (size_t i = 0; i < norder && !err; i++) {
		const struct btf_type *t = _raw_btf__type(k, order[i]);
		size_t sz = _type_size(t), vlen = btf_vlen(t);
		struct btf_type *c;
		uint32_t v = 0;

		err = _grow(&o->types, &o->types_cap, o->types_len + sz);
		if (err)
			break;
		c = (void *)(o->types + o->types_len);
		memcpy(c, t, sz);
		o->types_len += sz;
		/* c stays valid: only _grow() above moves o->types. */
		err = _str(o, &strs, k, t->name_off, &v);
		c->name_off = v;
		switch (btf_kind(t)) {
		case BTF_KIND_PTR:
			c->type = 0;	/* pointers lead nowhere: see core_btf.h */
			break;
		case BTF_KIND_CONST:
		case BTF_KIND_VOLATILE:
		case BTF_KIND_RESTRICT:
		case BTF_KIND_TYPEDEF:
		case BTF_KIND_TYPE_TAG:
		case BTF_KIND_FUNC:
		case BTF_KIND_VAR:
		case BTF_KIND_DECL_TAG:
			if (!err)
				err = _visit(&ids, &order, &norder, &cap, t->type, &v);
			c->type = v;
			break;
		case BTF_KIND_ARRAY: {
			struct btf_array *a = (void *)(c + 1);
			uint32_t elem = 0, index = 0;

			if (!err)
				err = _visit(&ids, &order, &norder, &cap, a->type, &elem);
			if (!err)
				err = _visit(&ids, &order, &norder, &cap, a->index_type, &index);
			a->type = elem;
			a->index_type = index;
			break;
		}
		case BTF_KIND_STRUCT:
		case BTF_KIND_UNION: {
			struct btf_member *m = (void *)(c + 1);

			for (size_t j = 0; j < vlen && !err; j++)
				err = _name_and_type(o, &strs, k, &ids, &order, &norder, &cap,
						     &m[j].name_off, &m[j].type);
			break;
		}
		case BTF_KIND_ENUM: {
			struct btf_enum *e = (void *)(c + 1);

			for (size_t j = 0; j < vlen && !err; j++) {
				err = _str(o, &strs, k, e[j].name_off, &v);
				e[j].name_off = v;
			}
			break;
		}
		case BTF_KIND_ENUM64: {
			struct btf_enum64 *e = (void *)(c + 1);

			for (size_t j = 0; j < vlen && !err; j++) {
				err = _str(o, &strs, k, e[j].name_off, &v);
				e[j].name_off = v;
			}
			break;
		}
		case BTF_KIND_FUNC_PROTO: {
			struct btf_param *p = (void *)(c + 1);

			if (!err)
				err = _visit(&ids, &order, &norder, &cap, t->type, &v);
			c->type = v;
			for (size_t j = 0; j < vlen && !err; j++)
				err = _name_and_type(o, &strs, k, &ids, &order, &norder, &cap,
						     &p[j].name_off, &p[j].type);
			break;
		}
		case BTF_KIND_DATASEC: {
			struct btf_var_secinfo *s = (void *)(c + 1);

			for (size_t j = 0; j < vlen && !err; j++) {
				err = _visit(&ids, &order, &norder, &cap, s[j].type, &v);
				s[j].type = v;
			}
			break;
		}
		default:	/* INT, FLOAT, FWD: nothing refers onwards */
			break;
		}
	}
	*ntypes = norder;
	free(order);
	_u32map__free(&ids);
	_u32map__free(&strs);
	return err;
}

static int _write_memfd(struct core_btf *cb, const struct out_btf *o)
{
	struct btf_header h = {
		.magic = BTF_MAGIC,
		.version = BTF_VERSION,
		.hdr_len = sizeof(h),
		.type_off = 0,
		.type_len = o->types_len,
		.str_off = o->types_len,
		.str_len = o->strs_len,
	};
	const struct iovec_like { const void *p; size_t n; } parts[] = {
		{ &h, sizeof(h) }, { o->types, o->types_len }, { o->strs, o->strs_len },
	};
	int fd = memfd_create("flamewatch-core-btf", MFD_CLOEXEC);

	if (fd < 0)
		return -errno;
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
		const uint8_t *p = parts[i].p;
		size_t n = parts[i].n;

		while (n) {
			ssize_t w = write(fd, p, n);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				int err = w < 0 ? -errno : -EIO;

				close(fd);
				return err;
			}
			p += w;
			n -= w;
		}
	}
	cb->fd = fd;
	snprintf(cb->path, sizeof(cb->path), "/proc/self/fd/%d", fd);
	cb->bytes = sizeof(h) + o->types_len + o->strs_len;
	return 0;
}

/* The kernel's BTF, mapped where the kernel allows it, else read. */
static int _map_kernel_btf(const char *path, void **data, size_t *size, bool *mapped)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC), err = 0;
	void *p;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) || st.st_size <= 0) {
		err = fstat(fd, &st) ? -errno : -EINVAL;
		close(fd);
		return err;
	}
	*size = st.st_size;
	p = mmap(NULL, *size, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p != MAP_FAILED) {
		*data = p;
		*mapped = true;
		close(fd);
		return 0;
	}
	/* Before Linux 6.16 the sysfs file cannot be mapped. */
	p = malloc(*size);
	if (!p) {
		close(fd);
		return -ENOMEM;
	}
	for (size_t got = 0; got < *size;) {
		ssize_t r = pread(fd, (char *)p + got, *size - got, got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			err = r < 0 ? -errno : -EIO;
			free(p);
			close(fd);
			return err;
		}
		got += r;
	}
	close(fd);
	*data = p;
	*mapped = false;
	return 0;
}

int core_btf__open_from(struct core_btf *cb, const char *kernel_btf, const void *elf, size_t size)
{
	struct raw_btf local = { 0 }, kern = { 0 };
	struct out_btf o = { 0 };
	const uint8_t *lbtf;
	size_t lbtf_size, nnames = 0, nroots = 0;
	char **names = NULL, *namebuf = NULL;
	uint32_t *roots = NULL;
	void *kdata = NULL;
	size_t ksize = 0;
	bool mapped = false;
	int err;

	memset(cb, 0, sizeof(*cb));
	cb->fd = -1;
	err = _object_btf(elf, size, &lbtf, &lbtf_size);
	if (!err)
		err = _raw_btf__parse(&local, lbtf, lbtf_size);
	if (!err)
		err = _root_names(&local, &names, &nnames, &namebuf);
	if (!err)
		err = _map_kernel_btf(kernel_btf, &kdata, &ksize, &mapped);
	if (!err)
		err = _raw_btf__parse(&kern, kdata, ksize);
	if (!err) {
		roots = calloc(nnames ? nnames * 4 : 1, sizeof(*roots));
		if (!roots)
			err = -ENOMEM;
	}
	/* One pass over the kernel's types; a name may match several. */
	for (uint32_t id = 1; !err && id < kern.n; id++) {
		const struct btf_type *t = _raw_btf__type(&kern, id);
		const char *name = _raw_btf__str(&kern, t->name_off);

		if (!_is_root_kind(t) || !name || !name[0] ||
		    !bsearch(&name, names, nnames, sizeof(*names), _cmp_str))
			continue;
		if (nroots == nnames * 4) {
			err = -E2BIG;	/* a kernel with that many duplicates is not one we know */
			break;
		}
		roots[nroots++] = id;
	}
	if (!err)
		err = _cut(&kern, roots, nroots, &o, &cb->types);
	if (!err)
		err = _write_memfd(cb, &o);
	free(o.types);
	free(o.strs);
	free(roots);
	free(names);
	free(namebuf);
	free(local.off);
	free(kern.off);
	if (kdata) {
		if (mapped)
			munmap(kdata, ksize);
		else
			free(kdata);
	}
	if (err) {
		pr_debug("CO-RE: no cut of %s (%s); libbpf reads all of it\n", kernel_btf,
			 strerror(-err));
		core_btf__close(cb);
	}
	return err;
}

int core_btf__open(struct core_btf *cb, const void *elf, size_t size)
{
	return core_btf__open_from(cb, KERNEL_BTF, elf, size);
}

/* Whether t, a struct, has a member called member. */
static bool _has_member(const struct raw_btf *b, const struct btf_type *t, const char *member)
{
	const struct btf_member *m = (const void *)(t + 1);

	for (size_t i = 0; i < btf_vlen(t); i++) {
		const char *s = _raw_btf__str(b, m[i].name_off);

		if (s && !strcmp(s, member))
			return true;
	}
	return false;
}

/* member NULL: a type of that kind and name; else a struct with that member. */
static int _kernel_has(const char *name, int kind, const char *member)
{
	struct raw_btf kern;
	void *kdata = NULL;
	size_t ksize = 0;
	bool mapped = false;
	int ret = _map_kernel_btf(KERNEL_BTF, &kdata, &ksize, &mapped);

	if (ret)
		return ret;
	ret = _raw_btf__parse(&kern, kdata, ksize);
	for (uint32_t id = 1; !ret && id < kern.n; id++) {
		const struct btf_type *t = _raw_btf__type(&kern, id);
		const char *s = _raw_btf__str(&kern, t->name_off);

		if (btf_kind(t) == kind && s && !strcmp(s, name))
			ret = !member || _has_member(&kern, t, member);
	}
	free(kern.off);
	if (mapped)
		munmap(kdata, ksize);
	else
		free(kdata);
	return ret;
}

int core_btf__kernel_has(const char *name, int kind)
{
	return _kernel_has(name, kind, NULL);
}

int core_btf__kernel_has_member(const char *type, const char *member)
{
	return _kernel_has(type, BTF_KIND_STRUCT, member);
}

void core_btf__close(struct core_btf *cb)
{
	if (cb->fd >= 0)
		close(cb->fd);
	cb->fd = -1;
	cb->path[0] = '\0';
}
