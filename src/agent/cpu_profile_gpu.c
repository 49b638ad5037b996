// SPDX-License-Identifier: Apache-2.0
/*
 * GPU time: CUDA activity under the CPU stack that launched it. A
 * launch's user stack is placed in its binaries while the process is
 * alive (cpu_profile__place()); its kernel's record, which may come
 * batches later, becomes a gpu_time sample on that stack and a GPU
 * interval (cpu_profile__add_gpu()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cpu_profile.h"
#include "agent/cpu_profile_impl.h"
#include "agent/interp/python.h"
#include "agent/proc_table.h"
#include "common/batch.h"
#include "common/profile.h"

/*
 * One entry of a mixed stack: native frame j of the walk, Python frame pos,
 * or (j == MIXED_MARKER) the frame between a launch's own native stack and
 * the Python stack it borrowed from another thread.
 */
struct mixed_item {
	int32_t j;		/* -1 for a Python frame */
	uint32_t pos;
};

#define MIXED_MARKER INT32_MIN

/*
 * The order _mixed_user_stack() gives, leaf first, without interning
 * anything: Python frames in place of the interpreter loop's frames.
 * Borrowed Python frames (FW_SAMPLE_PY_BORROWED) belong to no frame of this
 * walk: they go above all of it, below a marker.
 */
static uint32_t _mixed_order(const struct fw_sample *s, const struct python_proc *pp,
			     struct mixed_item *items)
{
	const __u64 *ustack = s->addrs + s->kstack_len, *pyw = ustack + s->ustack_len;
	uint32_t np = pp ? s->pystack_len : 0, pos = 0, n = 0;

	if (np && (s->flags & FW_SAMPLE_PY_BORROWED)) {
		for (uint32_t j = 0; j < s->ustack_len; j++)
			items[n++] = (struct mixed_item){ (int32_t)j, 0 };
		items[n++] = (struct mixed_item){ MIXED_MARKER, 0 };
		for (; pos < np; pos++)
			items[n++] = (struct mixed_item){ -1, pos };
		return n;
	}
	for (uint32_t j = 0; j < s->ustack_len; j++) {
		uint64_t pc = j ? ustack[j] - 1 : ustack[j];

		if (pos < np && python__is_eval(pp, pc)) {
			do
				items[n++] = (struct mixed_item){ -1, pos };
			while (!(pyw[2 * pos++ + 1] & FW_PY_ENTRY) && pos < np);
			continue;
		}
		if (pos > 0 && pos < np && python__in_interp(pp, pc))
			continue;
		items[n++] = (struct mixed_item){ (int32_t)j, 0 };
	}
	for (; pos < np; pos++)
		items[n++] = (struct mixed_item){ -1, pos };
	return n;
}

struct cpu_placed_stack *cpu_profile__place(struct cpu_profile *cp, const struct fw_sample *s)
{
	const __u64 *ustack = s->addrs + s->kstack_len, *pyw = ustack + s->ustack_len;
	const struct python_proc *pp = s->pystack_len && cp->py ? python__proc(cp->py, s->pid) : NULL;
	struct mixed_item items[FW_MAX_USTACK + FW_MAX_PYFRAMES + 1];
	uint32_t nitems = _mixed_order(s, pp, items), n = 0;
	size_t text_len = 0, text_off;
	struct cpu_placed_stack *ps;
	char *text = NULL, *dst;

	/*
	 * Python frames are named now, while their code objects are alive: the
	 * GPU record they join with may come much later. Their names go in the
	 * same allocation as the frames.
	 */
	for (uint32_t i = 0; i < nitems; i++) {
		const char *function = NULL, *file = NULL;
		char placeholder[48];
		uint32_t line = 0;
		size_t fl, il;
		char *nt;

		if (items[i].j >= 0)
			continue;
		if (items[i].j == MIXED_MARKER) {
			/* Whose Python stack it is: named by the launching thread. */
			snprintf(placeholder, sizeof(placeholder), "[from thread %.16s]",
				 s->comm);
			function = placeholder;
		} else if (python__frame(cp->py, pp, pyw[2 * items[i].pos],
				  pyw[2 * items[i].pos + 1], &function, &file,
				  &line) || !function) {
			snprintf(placeholder, sizeof(placeholder), "[python code 0x%llx]",
				 (unsigned long long)pyw[2 * items[i].pos]);
			function = placeholder;
			file = NULL;
			line = 0;
		}
		fl = strlen(function) + 1;
		il = (file ? strlen(file) : 0) + 1;
		nt = realloc(text, text_len + fl + il);
		if (!nt) {
			free(text);
			return NULL;
		}
		text = nt;
		memcpy(text + text_len, function, fl);
		memcpy(text + text_len + fl, file ? file : "", il);
		/* Until the stack exists, pos holds the offset and j the line. */
		items[i].pos = (uint32_t)text_len;
		if (items[i].j != MIXED_MARKER)
			items[i].j = -1 - (int32_t)line;
		text_len += fl + il;
	}
	text_off = sizeof(*ps) + (size_t)nitems * sizeof(ps->f[0]);
	ps = malloc(text_off + text_len + 1);
	if (!ps) {
		free(text);
		return NULL;
	}
	dst = (char *)ps + text_off;
	if (text_len)
		memcpy(dst, text, text_len);
	free(text);
	ps->flags = s->flags;
	for (int i = (int)nitems - 1; i >= 0; i--) {
		struct cpu_placed_frame *f = &ps->f[n++];
		struct addr_info info;
		uint64_t addr;
		int32_t j = items[i].j;

		memset(f, 0, sizeof(*f));
		if (j == MIXED_MARKER) {
			f->kind = CPU_PLACED_MARKER;
			f->py = dst + items[i].pos;
			continue;
		}
		if (j < 0) {
			f->kind = CPU_PLACED_PYTHON;
			f->addr = (uint64_t)(-1 - j);
			f->py = dst + items[i].pos;
			continue;
		}
		/* As in _user_frame(): a return address names the call before it. */
		addr = ustack[j];
		if (j > 0 && addr)
			addr--;
		proc_table__lookup(cp->procs, s->pid, addr, &info);
		f->kind = info.kind;
		f->addr = addr;
		switch (info.kind) {
		case ADDR_FILE:
			f->bin = info.bin;
			f->addr = info.vaddr;
			break;
		case ADDR_SPECIAL:
			f->addr = info.vaddr;
			snprintf(f->special, sizeof(f->special), "%s", info.name ? info.name : "");
			break;
		default:
			break;
		}
	}
	ps->n = n;
	return ps;
}

static int64_t _placed_frame(struct cpu_profile *cp, pid_t pid, const struct cpu_placed_frame *f)
{
	int64_t mapping;

	if (f->kind == CPU_PLACED_MARKER)
		return profile__intern_named_frame(cp->p, FRAME_NATIVE, PROFILE_NO_MAPPING, 0,
						   f->py, NULL, 0);
	if (f->kind == CPU_PLACED_PYTHON) {
		mapping = profile__intern_mapping(cp->p, "[python]", NULL);
		if (mapping < 0)
			return mapping;
		return profile__intern_named_frame(cp->p, FRAME_PYTHON, mapping, 0, f->py,
						   f->py + strlen(f->py) + 1, (uint32_t)f->addr);
	}
	switch (f->kind) {
	case ADDR_FILE:
		mapping = cp__binary_mapping(cp, f->bin);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_NATIVE, mapping, f->addr);
	case ADDR_ANON:
		mapping = cp__jit_mapping(cp, pid);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_JIT, mapping, f->addr);
	case ADDR_SPECIAL:
		mapping = profile__intern_mapping(cp->p, f->special, NULL);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_NATIVE, mapping, f->addr);
	default:
		mapping = profile__intern_mapping(cp->p, "[unknown]", NULL);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_NATIVE, mapping, f->addr);
	}
}

/* The process's labels (as for its CPU samples) plus device, stream and graph. */
static int64_t _gpu_series(struct cpu_profile *cp, const struct cpu_gpu_activity *a)
{
	const char *names[8] = { "pid", "comm", "exe", "device", "stream" };
	const char *values[8];
	const struct proc_info *info = proc_table__info(cp->procs, a->pid);
	char pid[16], dev[16], stream[16], graph[16];
	size_t n = 5;

	snprintf(pid, sizeof(pid), "%u", a->pid);
	snprintf(dev, sizeof(dev), "%u", a->device);
	snprintf(stream, sizeof(stream), "%u", a->stream);
	values[0] = pid;
	values[1] = info && info->comm[0] ? info->comm : a->comm ? a->comm : "";
	values[2] = info ? info->exe : "";
	values[3] = dev;
	values[4] = stream;
	if (info && info->container[0]) {
		names[n] = "container";
		values[n++] = info->container;
	}
	if (info && info->pod[0]) {
		names[n] = "pod";
		values[n++] = info->pod;
	}
	if (a->graph) {
		snprintf(graph, sizeof(graph), "%u", a->graph);
		names[n] = "graph";
		values[n++] = graph;
	}
	return batch__intern_series(cp->batch, names, values, n);
}

int cpu_profile__add_gpu_span(struct cpu_profile *cp, const struct cpu_gpu_activity *a)
{
	struct batch_gpu_interval iv;
	int64_t series, name;

	if (!cp->batch || (a->kind != GPU_BUSY && a->kind != GPU_COVERAGE) ||
	    a->end_ns <= a->start_ns)
		return -EINVAL;
	name = profile__intern_string(cp->p, a->name ? a->name :
					 a->kind == GPU_BUSY ? GPU_BUSY_NAME : GPU_COVERAGE_NAME);
	series = _gpu_series(cp, a);
	if (name < 0)
		return -ENOMEM;
	if (series < 0)
		return series;
	iv = (struct batch_gpu_interval){
		.start_ns = a->start_ns, .end_ns = a->end_ns, .series = series,
		.device = a->device, .kind = a->kind, .name = name, .stack = BATCH_NO_STACK,
		.bytes = a->bytes, .weight = 1,
		.correlation = a->kind == GPU_BUSY ? a->correlation : 0,
	};
	return batch__add_gpu_interval(cp->batch, &iv);
}

int cpu_profile__add_gpu(struct cpu_profile *cp, const struct cpu_gpu_activity *a)
{
	const struct cpu_placed_stack *ps = a->stack;
	struct batch_gpu_interval iv;
	struct batch_sample bs;
	int64_t id, series, name, leaf, stack, stack_iv = BATCH_NO_STACK;
	uint32_t n = 0;
	uint64_t dur;
	int err;

	if (!cp->batch)
		return -EINVAL;
	if (ps && ps->n > FW_MAX_FRAMES - 1)
		return -EINVAL;
	for (uint32_t i = 0; ps && i < ps->n; i++) {
		id = _placed_frame(cp, a->pid, &ps->f[i]);
		if (id < 0)
			return id;
		cp->frames[n++] = id;
	}
	if (ps && a->marker) {
		/* Whose stack this is: not the work's own launch. */
		id = profile__intern_named_frame(cp->p, FRAME_CUDA_KERNEL, PROFILE_NO_MAPPING, 0,
						 a->marker, NULL, 0);
		if (id < 0)
			return id;
		cp->frames[n++] = id;
	}
	if (ps) {
		/* The interval keeps the launching stack itself, without the leaf. */
		stack_iv = profile__intern_stack(cp->p, cp->frames, n);
		if (stack_iv < 0)
			return -ENOMEM;
	}
	leaf = profile__intern_named_frame(cp->p, FRAME_CUDA_KERNEL, PROFILE_NO_MAPPING, 0,
					   a->name && a->name[0] ? a->name : "[unknown kernel]",
					   NULL, 0);
	if (leaf < 0)
		return leaf;
	cp->frames[n++] = leaf;
	stack = profile__intern_stack(cp->p, cp->frames, n);
	name = profile__intern_string(cp->p, a->name && a->name[0] ? a->name : "[unknown kernel]");
	series = _gpu_series(cp, a);
	if (stack < 0 || name < 0)
		return -ENOMEM;
	if (series < 0)
		return series;

	dur = a->end_ns > a->start_ns ? (uint64_t)(a->end_ns - a->start_ns) : 0;
	bs = (struct batch_sample){
		.ts_ns = a->start_ns, .stack = stack, .series = series, .tid = a->tid,
		.cpu = a->cpu, .type = SAMPLE_GPU_TIME,
		.value = (int64_t)(dur * (a->weight ? a->weight : 1)),
	};
	iv = (struct batch_gpu_interval){
		.start_ns = a->start_ns, .end_ns = a->end_ns, .series = series,
		.device = a->device, .stream = a->stream, .kind = a->kind, .name = name,
		.stack = stack_iv, .correlation = a->correlation, .bytes = a->bytes,
		.weight = a->weight ? a->weight : 1,
	};
	err = batch__add_sample(cp->batch, &bs);
	if (!err)
		err = batch__add_gpu_interval(cp->batch, &iv);
	return err;
}
