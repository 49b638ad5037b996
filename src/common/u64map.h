/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Open addressing from u64 keys to u64 values, half full at most: the
 * small map both stores use for ids (a series' open window, a frame
 * hash's place in a reply).
 */
#ifndef FW_COMMON_U64MAP_H
#define FW_COMMON_U64MAP_H

#include <stdbool.h>
#include <stdint.h>

struct u64map {
	struct u64slot { uint64_t key, val; bool used; } *slots;
	uint32_t cap, count;
};

/* Empties m; it may be used again. */
void u64map__free(struct u64map *m);
/* The value slot of key, or NULL when absent. */
uint64_t *u64map__get(const struct u64map *m, uint64_t key);
/* The value slot of key, inserted with value 0 if new (*added, may be NULL); NULL for ENOMEM. */
uint64_t *u64map__upsert(struct u64map *m, uint64_t key, bool *added);

#endif
