/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_RINGBUF_H
#define FW_AGENT_RINGBUF_H

#include <stddef.h>
#include <stdint.h>

/*
 * The consumer side of a BPF ring buffer (BPF_MAP_TYPE_RINGBUF), with its
 * data pages mapped once.
 *
 * libbpf's ring_buffer maps the data area twice, back to back, so that a
 * record that wraps past the end reads as one piece; the kernel allows it
 * by mapping the same pages twice. RSS then counts every data page twice:
 * 2 MiB for a 1 MiB ring, of memory that exists once. Here the data is
 * mapped once, and the few records that wrap are copied into a buffer of
 * the ring's own (records are 8-byte aligned and their 8-byte headers
 * never wrap, only their bodies do).
 *
 * The protocol, as the kernel writes it (kernel/bpf/ringbuf.c): page 0
 * holds the consumer position (ours to write), page 1 the producer
 * position, the data follows; positions only grow, and the offset in the
 * data is the position modulo the size. A record is an 8-byte header
 * (length with a busy and a discard bit, then a page offset the kernel
 * uses) and its body, padded to 8 bytes. A record still busy is being
 * written: reading stops there, and the producer's commit wakes the
 * consumer again once it has read up to it.
 */

/* One record; a negative return stops the reading and is returned. */
typedef int (*ringbuf_fn)(void *ctx, void *data, size_t size);

struct ringbuf;

/* Maps the ring of map_fd; NULL with errno set on failure. */
struct ringbuf *ringbuf__new(int map_fd, ringbuf_fn fn, void *ctx);
void ringbuf__free(struct ringbuf *rb);
/* Reads every committed record: how many, or a negative errno. */
int ringbuf__consume(struct ringbuf *rb);
/* The map's fd: it polls readable when records are there (epoll). */
int ringbuf__fd(const struct ringbuf *rb);

/*
 * The ring as the reader sees it, apart from the mapping: what
 * ringbuf__consume() works on, and what the unit test lays out in plain
 * memory.
 */
struct ringbuf_view {
	uint64_t *consumer_pos;
	const uint64_t *producer_pos;
	const uint8_t *data;
	uint64_t mask;		/* data size - 1, a power of two */
	uint8_t *bounce;	/* wrapped bodies are copied here */
	size_t bounce_cap;
};

int ringbuf_view__consume(struct ringbuf_view *v, ringbuf_fn fn, void *ctx);

#endif
