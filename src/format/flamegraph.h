/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_FLAMEGRAPH_H
#define FW_FORMAT_FLAMEGRAPH_H

#include <stddef.h>
#include <stdint.h>

struct flametree;
struct profile;
struct strbuf;

/*
 * Writes the merged flame graph of p (root "all", then the process name,
 * then frames root to leaf, merged by function name and binary) as compact
 * JSON: parallel arrays in preorder, names and binaries interned once.
 *
 *   {"version":1,"unit":"samples","total":N,
 *    "names":["all","python","main",...],"binaries":["","/usr/bin/python3.11",...],
 *    "nodes":{"n":[name],"b":[binary],"k":[kind],"v":[total],"s":[self],"d":[depth]},
 *    "trimmed":{"nodes":K,"value":V}}
 *
 * At most max_nodes nodes are written: the heaviest, which keeps every
 * kept node's parent too (a child never outweighs its parent). What was
 * cut is counted in "trimmed". kind is the frame kind (enum frame_kind), or
 * -1 for the root and -2 for process nodes. Returns 0 or -ENOMEM.
 */
int flamegraph__write_json(const struct profile *p, const char *unit, size_t max_nodes,
			   struct strbuf *out);

/*
 * The same reply for a tree already cut (common/flametree.h) whose refs
 * are p's ids: a process node's is its comm string id, a frame node's a
 * frame id whose function, binary and kind name the node. For producers
 * that cut before naming (store__flamegraph()). Returns 0, -EINVAL for a
 * tree without its root, or -ENOMEM.
 */
int flamegraph__write_tree_json(const struct profile *p, const struct flametree *t,
				const char *unit, struct strbuf *out);

#endif
