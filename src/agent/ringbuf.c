// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <linux/bpf.h>

#include "ringbuf.h"

struct ringbuf {
	int map_fd;
	ringbuf_fn fn;
	void *ctx;
	void *consumer_page;		/* page 0, read-write */
	void *producer_area;		/* page 1 and the data after it, read-only */
	size_t producer_len;
	size_t page;
	struct ringbuf_view v;
};

/* A record's body at pos: in place, or copied into the bounce buffer where it wraps. */
static const void *_body(struct ringbuf_view *v, uint64_t pos, uint32_t size)
{
	uint64_t off = pos & v->mask, first = v->mask + 1 - off;

	if (size <= first)
		return v->data + off;
	if (size > v->bounce_cap) {
		uint8_t *b = realloc(v->bounce, size);

		if (!b)
			return NULL;
		v->bounce = b;
		v->bounce_cap = size;
	}
	memcpy(v->bounce, v->data + off, first);
	memcpy(v->bounce + first, v->data, size - first);
	return v->bounce;
}

int ringbuf_view__consume(struct ringbuf_view *v, ringbuf_fn fn, void *ctx)
{
	uint64_t cons = __atomic_load_n(v->consumer_pos, __ATOMIC_RELAXED);
	int n = 0;
	bool more;

	do {
		/* Pairs with the producer's release: records up to prod are committed or busy. */
		uint64_t prod = __atomic_load_n(v->producer_pos, __ATOMIC_ACQUIRE);

		more = false;
		while (cons < prod) {
			const uint32_t *hdr = (const uint32_t *)(v->data + (cons & v->mask));
			/* Pairs with the commit that clears the busy bit: the body is written. */
			uint32_t len = __atomic_load_n(hdr, __ATOMIC_ACQUIRE);
			uint32_t size = len & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT);
			const void *body = NULL;
			int err = 0;

			if (len & BPF_RINGBUF_BUSY_BIT)
				return n;	/* its commit wakes us again */
			if ((uint64_t)size + BPF_RINGBUF_HDR_SZ > v->mask + 1)
				return -EINVAL;	/* not the kernel's layout */
			if (!(len & BPF_RINGBUF_DISCARD_BIT)) {
				body = _body(v, cons + BPF_RINGBUF_HDR_SZ, size);
				if (!body)
					err = -ENOMEM;
			}
			/* Consumed whatever the callback says, as libbpf does: a bad record is not read twice. */
			cons += (BPF_RINGBUF_HDR_SZ + size + 7) & ~7ULL;
			if (body) {
				err = fn(ctx, (void *)body, size);
				n++;
			}
			/* Per record: the kernel wakes us when a commit lands where we stand. */
			__atomic_store_n(v->consumer_pos, cons, __ATOMIC_RELEASE);
			if (err < 0)
				return err;
			more = true;
		}
	} while (more);
	return n;
}

struct ringbuf *ringbuf__new(int map_fd, ringbuf_fn fn, void *ctx)
{
	struct bpf_map_info info;
	__u32 info_len = sizeof(info);
	struct ringbuf *rb;
	int err;

	memset(&info, 0, sizeof(info));
	err = bpf_obj_get_info_by_fd(map_fd, &info, &info_len);
	if (err) {
		errno = -err;
		return NULL;
	}
	if (info.type != BPF_MAP_TYPE_RINGBUF || !info.max_entries ||
	    (info.max_entries & (info.max_entries - 1))) {
		errno = EINVAL;
		return NULL;
	}
	rb = calloc(1, sizeof(*rb));
	if (!rb)
		return NULL;
	rb->map_fd = map_fd;
	rb->fn = fn;
	rb->ctx = ctx;
	rb->page = (size_t)sysconf(_SC_PAGESIZE);
	rb->producer_len = rb->page + info.max_entries;
	rb->consumer_page = mmap(NULL, rb->page, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
	rb->producer_area = mmap(NULL, rb->producer_len, PROT_READ, MAP_SHARED, map_fd,
				 (off_t)rb->page);
	if (rb->consumer_page == MAP_FAILED || rb->producer_area == MAP_FAILED) {
		err = errno;
		ringbuf__free(rb);
		errno = err;
		return NULL;
	}
	rb->v.consumer_pos = rb->consumer_page;
	rb->v.producer_pos = rb->producer_area;
	rb->v.data = (const uint8_t *)rb->producer_area + rb->page;
	rb->v.mask = info.max_entries - 1;
	return rb;
}

void ringbuf__free(struct ringbuf *rb)
{
	if (!rb)
		return;
	if (rb->consumer_page && rb->consumer_page != MAP_FAILED)
		munmap(rb->consumer_page, rb->page);
	if (rb->producer_area && rb->producer_area != MAP_FAILED)
		munmap(rb->producer_area, rb->producer_len);
	free(rb->v.bounce);
	free(rb);
}

int ringbuf__consume(struct ringbuf *rb)
{
	return ringbuf_view__consume(&rb->v, rb->fn, rb->ctx);
}

int ringbuf__fd(const struct ringbuf *rb)
{
	return rb->map_fd;
}
