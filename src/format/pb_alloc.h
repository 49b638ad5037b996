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

/*
 * A limit on the elements of one repeated field in any one message of
 * type msg (all of them in a top-level message): "at most 1024 location
 * ids in a sample".
 */
struct pb_cap {
	const ProtobufCMessageDescriptor *msg;
	unsigned field;		/* field number */
	size_t max;
	const char *what;	/* for the message: "samples", "locations in a sample" */
};

/*
 * Walks a serialized message of type d without allocating, before it is
 * unpacked: the capped allocator alone only stops an unpack once it has
 * taken max bytes. Returns -E2BIG with a message in err when unpacking
 * would take more than max_bytes through pb_capped_alloc__allocator()
 * (counted as protobuf-c allocates: structs, arrays, strings, unknown
 * fields and its scan tables) or a field of caps would hold more than its
 * max elements; -EBADMSG when the bytes are not a message it could walk
 * (the unpack would refuse them too); 0 otherwise. Borrows everything.
 */
int pb_capped_alloc__check(const ProtobufCMessageDescriptor *d, const void *data, size_t len,
			   size_t max_bytes, const struct pb_cap *caps, size_t ncaps,
			   char *err, size_t err_len);

#endif
