/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_FLAMETREE_H
#define FW_COMMON_FLAMETREE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The merged call tree of a flame graph, cut to its heaviest nodes without
 * making the others. Callers give aggregated paths (a process, then frame
 * ids root first, and a count) and a merge key per frame id; nodes merge
 * where their keys agree level by level. Level 0 of the tree is the root
 * "all", level 1 the process (its comm), level l + 1 a path's frame l.
 *
 * The caller owns the ids: a frame id indexes fkey and is handed back as a
 * kept node's ref (the frame of some path through that node), so it may be
 * a profile's frame id or a store's; comm is handed back as the ref of a
 * process node.
 */

struct flametree_path {
	uint32_t comm;			/* process key; also its node's ref */
	uint32_t n;			/* frames */
	const uint32_t *frames;		/* frame ids, root first; borrowed */
	uint64_t count;
};

#define FLAMETREE_NONE UINT32_MAX

struct flametree_node {
	uint32_t parent;		/* FLAMETREE_NONE for the root (node 0) */
	uint32_t depth;			/* 0 root, 1 process, 2.. frames */
	uint32_t ref;			/* depth 1: comm; deeper: a frame id; root: 0 */
	uint64_t total, self;
	uint32_t first_child, next_sibling;	/* FLAMETREE_NONE: none */
};

struct flametree {
	struct flametree_node *nodes;	/* kept nodes; node 0 is the root */
	uint32_t n, cap;
	uint64_t nodes_all;		/* nodes of the whole merged tree, the root included */
	uint64_t trimmed_value;		/* sum of the totals of cut nodes under kept parents */
};

/*
 * Keeps the heaviest nodes, at most max_nodes (>= 1) of them with the root,
 * and every kept node's parent with it (a child never outweighs its
 * parent). Nodes whose total ties at the cut are all cut, so the count
 * never exceeds max_nodes. Reorders paths; overwrites t (release it
 * after). Returns 0 or -ENOMEM (t then holds nothing).
 */
int flametree__build(struct flametree *t, struct flametree_path *paths, uint32_t npaths,
		     const uint32_t *fkey, size_t max_nodes);

struct profile;

/*
 * flametree__build() over p's samples, frames merged by (function, binary
 * path, kind): refs are p's ids (comm string ids, frame ids). p is
 * borrowed. Returns 0 or -ENOMEM.
 */
int flametree__build_profile(struct flametree *t, const struct profile *p, size_t max_nodes);

/* Frees t's nodes and zeroes it. */
void flametree__release(struct flametree *t);

#endif
