/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_INTERN_H
#define FW_COMMON_INTERN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * An intern table maps byte strings to dense ids 0, 1, 2, ... in insertion
 * order. Strings, frames, stacks and sample keys are all deduplicated through
 * it by serialising them to bytes first. Keys are copied into the table; the
 * pointers intern__key() returns stay valid until intern__free() or
 * intern__compact().
 */
struct intern;

/* Returns a new, empty table, or NULL with errno set. */
struct intern *intern__new(void);
/* Frees the table and every key it holds. Accepts NULL. */
void intern__free(struct intern *t);

/*
 * Returns the id of key, copying it in if it is new (then *added is set when
 * added is not NULL), or -ENOMEM.
 */
int64_t intern__add(struct intern *t, const void *key, size_t len, bool *added);
/* Returns the id of key, or -ENOENT. */
int64_t intern__find(const struct intern *t, const void *key, size_t len);
/* Borrows the key with this id; id must be below intern__count(). */
const void *intern__key(const struct intern *t, uint32_t id, size_t *len);
uint32_t intern__count(const struct intern *t);
/* Bytes held by the table: keys, index and bookkeeping. */
size_t intern__memory(const struct intern *t);

/*
 * Moves every key into one arena sized to fit and trims the index and the
 * entry array to the count, for a table that is done growing but kept a
 * while (a batch waiting to be shipped): the arena grows by 64 KiB chunks,
 * far more than a small table holds. Invalidates every pointer
 * intern__key() returned before. Adding keys afterwards works as before.
 * Returns 0, or -ENOMEM with the table whole (and maybe partly compacted).
 */
int intern__compact(struct intern *t);

/* 64-bit FNV-1a followed by a final mix; good enough for hash tables. */
uint64_t hash__bytes(const void *data, size_t len);

#endif
