/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_PB_ALLOC_H
#define FW_FORMAT_PB_ALLOC_H

#include <stdbool.h>
#include <stddef.h>

#include <protobuf-c/protobuf-c.h>

/*
 * protobuf-c allocates per element and per submessage, so a small message
 * can unpack into many times its size: 2 bytes of an empty submessage
 * become a 48-byte struct and a pointer. An allocator that counts bounds
 * that whatever an untrusted message holds: set max, unpack with
 * pb_capped_alloc__allocator(), and read `over` when unpacking fails.
 */
struct pb_capped_alloc {
	size_t used, max;
	bool over;	/* an allocation was refused for the cap */
};

/* Borrows a for as long as the allocator is used. */
ProtobufCAllocator pb_capped_alloc__allocator(struct pb_capped_alloc *a);

#endif
