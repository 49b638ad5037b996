// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/cpu_profile.h"
#include "agent/cpu_profile_impl.h"
#include "agent/interp/hotspot.h"
#include "agent/interp/python.h"
#include "agent/interp/ruby.h"
#include "agent/proc_table.h"
#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "host/cgroup.h"
#include "symbolize/elf_file.h"
#include "symbolize/kallsyms.h"
#include "symbolize/perfmap.h"

/* What a profile mapping stands for, indexed by mapping id. */
struct mapping_source {
	struct binary *bin;	/* file-backed code, or NULL */
	pid_t jit_pid;		/* JIT code: the process whose perf map names it, or 0 */
};

/* Starts a fresh dictionary (and batch); the caller has dropped the old one. */
static int _start(struct cpu_profile *cp, uint64_t period_ns, uint64_t start_ns)
{
	if (cp->timed) {
		if (!cp->batch)
			cp->batch = batch__new(period_ns);
		else if (batch__reset(cp->batch))
			return -ENOMEM;
		if (!cp->batch)
			return -ENOMEM;
		cp->p = cp->batch->dict;
		cp->p->start_ns = start_ns;
		intern__free(cp->pids);
		cp->pids = intern__new();
		if (!cp->pids)
			return -ENOMEM;
	} else {
		cp->p = profile__new(cp->aggregate_type == SAMPLE_OFFCPU ? 1 : period_ns, start_ns);
		if (!cp->p)
			return -ENOMEM;
	}
	cp->kernel_mapping = profile__intern_mapping(cp->p, "[kernel.kallsyms]", NULL);
	return cp->kernel_mapping < 0 ? -ENOMEM : 0;
}

struct cpu_profile *cpu_profile__new(struct proc_table *procs, uint64_t period_ns,
				     uint64_t start_ns, bool timed)
{
	struct cpu_profile *cp = calloc(1, sizeof(*cp));

	if (!cp)
		return NULL;
	cp->procs = procs;
	cp->frames = calloc(FW_MAX_FRAMES + FW_MAX_PYFRAMES, sizeof(*cp->frames));
	cp->leaf = calloc(FW_MAX_USTACK + FW_MAX_PYFRAMES, sizeof(*cp->leaf));
	if (!cp->frames || !cp->leaf)
		goto fail;
	cp->timed = timed;
	cp->period_ns = period_ns;
	if (_start(cp, period_ns, start_ns))
		goto fail;
	return cp;
fail:
	cpu_profile__free(cp);
	errno = ENOMEM;
	return NULL;
}

static void _forget_mapping_id(void *ctx, struct binary *b)
{
	(void)ctx;
	b->user_id = -1;
}

static void _forget_dictionary(struct cpu_profile *cp)
{
	free(cp->sources);
	cp->sources = NULL;
	cp->nsources = 0;
	cp->jit_named_upto = 0;
	/* Binaries cache their mapping id in the old dictionary. */
	proc_table__for_each_binary(cp->procs, _forget_mapping_id, NULL);
}

struct batch *cpu_profile__take_batch(struct cpu_profile *cp, uint64_t start_ns)
{
	struct batch *b = cp->batch;

	_forget_dictionary(cp);
	cp->batch = NULL;
	cp->p = NULL;
	if (_start(cp, cp->period_ns, start_ns)) {
		/* Keep filling the old batch rather than lose samples. */
		batch__free(cp->batch);
		cp->batch = b;
		cp->p = b->dict;
		errno = ENOMEM;
		return NULL;
	}
	return b;
}

int cpu_profile__reset(struct cpu_profile *cp, uint64_t start_ns)
{
	_forget_dictionary(cp);
	if (!cp->timed)
		profile__free(cp->p);
	cp->p = NULL;
	return _start(cp, cp->period_ns, start_ns);
}

struct batch *cpu_profile__batch(struct cpu_profile *cp)
{
	return cp->batch;
}

void cpu_profile__free(struct cpu_profile *cp)
{
	if (!cp)
		return;
	free(cp->sources);
	free(cp->frames);
	free(cp->leaf);
	if (cp->batch)
		batch__free(cp->batch);
	else
		profile__free(cp->p);
	intern__free(cp->pids);
	free(cp->pid_series);
	intern__free(cp->sym_keys);
	intern__free(cp->sym_names);
	free(cp->sym_name_of);
	free(cp->ranges);
	kallsyms__table_free(&cp->ksyms);
	free(cp);
}

struct profile *cpu_profile__profile(struct cpu_profile *cp)
{
	return cp->p;
}

/* Returns the source slot of a mapping id, growing the table as needed. */
static struct mapping_source *_source(struct cpu_profile *cp, uint32_t mapping)
{
	if (mapping >= cp->nsources) {
		uint32_t n = mapping + 16;
		struct mapping_source *s = realloc(cp->sources, n * sizeof(*s));

		if (!s)
			return NULL;
		memset(s + cp->nsources, 0, (n - cp->nsources) * sizeof(*s));
		cp->sources = s;
		cp->nsources = n;
	}
	return &cp->sources[mapping];
}

int64_t cp__binary_mapping(struct cpu_profile *cp, struct binary *bin)
{
	struct mapping_source *src;
	int64_t id;

	if (bin->user_id >= 0)
		return bin->user_id;
	id = profile__intern_mapping(cp->p, bin->path,
				     bin->elf ? elf_file__build_id(bin->elf) : NULL);
	if (id < 0)
		return id;
	src = _source(cp, id);
	if (!src)
		return -ENOMEM;
	src->bin = bin;
	bin->user_id = id;
	return id;
}

int64_t cp__jit_mapping(struct cpu_profile *cp, pid_t pid)
{
	struct mapping_source *src;
	char name[32];
	int64_t id;

	snprintf(name, sizeof(name), "[jit pid %d]", pid);
	id = profile__intern_mapping(cp->p, name, NULL);
	if (id < 0)
		return id;
	src = _source(cp, id);
	if (!src)
		return -ENOMEM;
	src->jit_pid = pid;
	return id;
}

/*
 * Places one user address. Return addresses point after the call; the call
 * instruction itself is one byte earlier, and that is the address whose
 * function and line the user wants to see.
 */
static int64_t _user_frame(struct cpu_profile *cp, pid_t pid, uint64_t addr, bool is_return)
{
	struct addr_info info;
	int64_t mapping;

	if (is_return && addr)
		addr--;
	proc_table__lookup(cp->procs, pid, addr, &info);
	switch (info.kind) {
	case ADDR_FILE:
		mapping = cp__binary_mapping(cp, info.bin);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_NATIVE, mapping, info.vaddr);
	case ADDR_ANON:
		mapping = cp__jit_mapping(cp, pid);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_JIT, mapping, addr);
	case ADDR_SPECIAL:
		mapping = profile__intern_mapping(cp->p, info.name, NULL);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_NATIVE, mapping, info.vaddr);
	case ADDR_UNKNOWN:
	default:
		mapping = profile__intern_mapping(cp->p, "[unknown]", NULL);
		if (mapping < 0)
			return mapping;
		return profile__intern_frame(cp->p, FRAME_NATIVE, mapping, addr);
	}
}

/*
 * The series of a process: its labels, read once per batch. A process that
 * is already gone is labelled from the sample itself.
 */
static int64_t _series_of(struct cpu_profile *cp, const struct fw_sample *s, const char *comm)
{
	const char *names[8] = { "pid", "comm", "exe", "container", "pod" };
	const char *values[8];
	const struct proc_info *info;
	uint32_t key = s->pid;
	char pid[16];
	bool added;
	int64_t idx, series;
	size_t n = 3;

	idx = intern__add(cp->pids, &key, sizeof(key), &added);
	if (idx < 0)
		return idx;
	if (!added)
		return cp->pid_series[idx];
	if ((uint32_t)idx >= cp->cap_pid_series) {
		uint32_t cap = cp->cap_pid_series ? cp->cap_pid_series * 2 : 64;
		uint32_t *ns = realloc(cp->pid_series, cap * sizeof(*ns));

		if (!ns)
			return -ENOMEM;
		cp->pid_series = ns;
		cp->cap_pid_series = cap;
	}
	info = proc_table__info(cp->procs, s->pid);
	snprintf(pid, sizeof(pid), "%u", s->pid);
	values[0] = pid;
	values[1] = info && info->comm[0] ? info->comm : comm;
	values[2] = info ? info->exe : "";
	if (info && info->container[0])
		values[n++] = info->container;
	if (info && info->pod[0]) {
		names[n] = "pod";
		values[n++] = info->pod;
	}
	if (info && info->k8s) {
		names[n] = "namespace";
		values[n++] = info->k8s->ns;
		names[n] = "pod_name";
		values[n++] = info->k8s->pod;
		names[n] = "container_name";
		values[n++] = info->k8s->container;
	}
	series = batch__intern_series(cp->batch, names, values, n);
	if (series < 0)
		return series;
	cp->pid_series[idx] = series;
	return series;
}

static int _add_timed(struct cpu_profile *cp, const struct fw_sample *s, const char *comm,
		      uint32_t stack, uint64_t unix_ns, uint32_t type, int64_t value)
{
	int64_t series = _series_of(cp, s, comm);
	struct batch_sample bs;

	if (series < 0)
		return series;
	bs = (struct batch_sample){
		.ts_ns = unix_ns, .stack = stack, .series = series, .tid = s->tid,
		.cpu = s->cpu, .type = type, .value = value,
	};
	return batch__add_sample(cp->batch, &bs);
}

void cpu_profile__set_interps(struct cpu_profile *cp, const struct cpu_profile_interps *in)
{
	cp->py = in->py;
	cp->rb = in->rb;
	cp->hs = in->hs;
}

#define LEAF_MAX (FW_MAX_USTACK + FW_MAX_PYFRAMES)

/*
 * A JVM's user stack, leaf first into cp->leaf: each word the walk left
 * for JVM code becomes its Java frames (a compiled frame, the methods
 * inlined into it first), the others stay native. Returns its length or
 * -errno.
 */
static int _java_user_stack(struct cpu_profile *cp, const struct fw_sample *s,
			    const struct hotspot_proc *hp)
{
	const __u64 *ustack = s->addrs + s->kstack_len;
	struct hotspot_frame jf[HOTSPOT_MAX_INLINE];
	int64_t id, mapping = -1;
	uint32_t n = 0;

	for (uint32_t j = 0; j < s->ustack_len && n < LEAF_MAX; j++) {
		int nj = hotspot__frames(cp->hs, hp, ustack[j], j > 0, jf);

		if (nj == 0) {
			id = _user_frame(cp, s->pid, ustack[j], j > 0);
			if (id < 0)
				return id;
			cp->leaf[n++] = id;
			continue;
		}
		if (mapping < 0) {
			mapping = profile__intern_mapping(cp->p, "[java]", NULL);
			if (mapping < 0)
				return mapping;
		}
		for (int i = 0; i < nj && n < LEAF_MAX; i++) {
			id = profile__intern_named_frame(cp->p, FRAME_JIT, mapping, 0, jf[i].function,
							 jf[i].file, jf[i].line);
			if (id < 0)
				return id;
			cp->leaf[n++] = id;
		}
	}
	return n;
}

static int64_t _python_frame(struct cpu_profile *cp, const struct python_proc *pp,
			     const __u64 *word)
{
	const char *function, *file;
	char placeholder[48];
	uint32_t line;
	int64_t mapping = profile__intern_mapping(cp->p, "[python]", NULL);

	if (mapping < 0)
		return mapping;
	if (python__frame(cp->py, pp, word[0], word[1], &function, &file,
			  &line) || !function) {
		snprintf(placeholder, sizeof(placeholder), "[python code 0x%llx]",
			 (unsigned long long)word[0]);
		function = placeholder;
		file = NULL;
		line = 0;
	}
	return profile__intern_named_frame(cp->p, FRAME_PYTHON, mapping, 0, function, file, line);
}

/*
 * Mixed stacks: walking the native frames leaf first, each
 * _PyEval_EvalFrameDefault frame is replaced by the Python frames it was
 * running (up to and including the entry frame of that call), and the
 * interpreter's own call machinery between two such frames is dropped, so
 * Python callers read as direct parents of their callees. Native frames
 * leafward of the first Python frame (a C extension, ctypes into libc) and
 * rootward of the last (main, Py_RunMain) stay. Python frames the native
 * walk could not place (it stopped early) go on the root side. Writes the
 * stack leaf first into cp->leaf; returns its length or -errno.
 */
static int _mixed_user_stack(struct cpu_profile *cp, const struct fw_sample *s,
			     const struct python_proc *pp)
{
	const __u64 *ustack = s->addrs + s->kstack_len;
	const __u64 *pyw = ustack + s->ustack_len;
	uint32_t np = s->pystack_len, pos = 0, n = 0;
	int64_t id;

	for (uint32_t j = 0; j < s->ustack_len; j++) {
		uint64_t pc = j ? ustack[j] - 1 : ustack[j];

		if (pos < np && python__is_eval(pp, pc)) {
			do {
				id = _python_frame(cp, pp, pyw + 2 * pos);
				if (id < 0)
					return id;
				cp->leaf[n++] = id;
			} while (!(pyw[2 * pos++ + 1] & FW_PY_ENTRY) && pos < np);
			continue;
		}
		if (pos > 0 && pos < np && python__in_interp(pp, pc))
			continue;
		id = _user_frame(cp, s->pid, ustack[j], j > 0);
		if (id < 0)
			return id;
		cp->leaf[n++] = id;
	}
	for (; pos < np; pos++) {
		id = _python_frame(cp, pp, pyw + 2 * pos);
		if (id < 0)
			return id;
		cp->leaf[n++] = id;
	}
	return n;
}

static int64_t _ruby_frame(struct cpu_profile *cp, const struct ruby_proc *rp, const __u64 *word)
{
	const char *function, *file;
	char placeholder[48];
	uint32_t line;
	int64_t mapping = profile__intern_mapping(cp->p, "[ruby]", NULL);

	if (mapping < 0)
		return mapping;
	if (ruby__frame(cp->rb, rp, word[0], word[1] & FW_RB_PC_MASK, &function, &file, &line) ||
	    !function) {
		snprintf(placeholder, sizeof(placeholder), "[ruby iseq 0x%llx]",
			 (unsigned long long)word[0]);
		function = placeholder;
		file = NULL;
		line = 0;
	}
	return profile__intern_named_frame(cp->p, FRAME_RUBY, mapping, 0, function, file, line);
}

/*
 * Ruby's mixed stacks, as _mixed_user_stack() does Python's: each
 * rb_vm_exec() frame is replaced by the Ruby frames it was running, up to
 * and including the one a C call pushed (FW_RB_FINISH), and the VM's own
 * frames between two such groups are dropped. rb_vm_exec() runs the
 * bytecode in vm_exec_core(), a static function no symbol table names:
 * the VM frame directly leafward of it is that loop, and goes with it.
 * Native frames leafward of the first Ruby frame (C methods, the C
 * functions they call) and rootward of the last (main, ruby_run_node)
 * stay. Writes the stack leaf first into cp->leaf; returns its length or
 * -errno.
 */
static int _ruby_user_stack(struct cpu_profile *cp, const struct fw_sample *s,
			    const struct ruby_proc *rp)
{
	const __u64 *ustack = s->addrs + s->kstack_len;
	const __u64 *rbw = ustack + s->ustack_len;
	uint32_t np = s->pystack_len, pos = 0, n = 0;
	int64_t id, last_j = -1;

	for (uint32_t j = 0; j < s->ustack_len; j++) {
		uint64_t pc = j ? ustack[j] - 1 : ustack[j];

		if (pos < np && ruby__is_exec(rp, pc)) {
			uint64_t callee = j > 1 ? ustack[j - 1] - 1 : ustack[0];

			if (n && last_j == (int64_t)j - 1 && ruby__in_vm(rp, callee))
				n--;
			do {
				id = _ruby_frame(cp, rp, rbw + 2 * pos);
				if (id < 0)
					return id;
				cp->leaf[n++] = id;
			} while (!(rbw[2 * pos++ + 1] & FW_RB_FINISH) && pos < np);
			continue;
		}
		if (pos > 0 && pos < np && ruby__in_vm(rp, pc))
			continue;
		id = _user_frame(cp, s->pid, ustack[j], j > 0);
		if (id < 0)
			return id;
		cp->leaf[n++] = id;
		last_j = j;
	}
	for (; pos < np; pos++) {
		id = _ruby_frame(cp, rp, rbw + 2 * pos);
		if (id < 0)
			return id;
		cp->leaf[n++] = id;
	}
	return n;
}

/* One sample of type (enum sample_type) worth value, at unix_ns. */
static int _add(struct cpu_profile *cp, const struct fw_sample *s, uint32_t kskip,
		uint64_t unix_ns, uint32_t type, int64_t value)
{
	const __u64 *kstack = s->addrs, *ustack = s->addrs + s->kstack_len;
	const struct python_proc *pp = s->pystack_len ? python__proc(cp->py, s->pid) : NULL;
	const struct ruby_proc *rp = s->pystack_len && !pp ? ruby__proc(cp->rb, s->pid) : NULL;
	const struct hotspot_proc *hp = !pp && !rp && s->ustack_len ?
					hotspot__proc(cp->hs, s->pid) : NULL;
	char comm[FW_COMM_LEN + 1];
	uint32_t n = 0;
	int64_t id, comm_id;

	/* Root first: the user stack from its outermost frame, then the kernel's. */
	if (pp || rp || hp) {
		int len = pp ? _mixed_user_stack(cp, s, pp) :
			  rp ? _ruby_user_stack(cp, s, rp) : _java_user_stack(cp, s, hp);

		if (len < 0)
			return len;
		for (int i = len - 1; i >= 0; i--)
			cp->frames[n++] = cp->leaf[i];
	}
	for (int i = pp || rp || hp ? -1 : s->ustack_len - 1; i >= 0; i--) {
		id = _user_frame(cp, s->pid, ustack[i], i > 0);
		if (id < 0)
			return id;
		cp->frames[n++] = id;
	}
	for (int i = s->kstack_len - 1; i >= (int)kskip; i--) {
		id = profile__intern_frame(cp->p, FRAME_KERNEL, cp->kernel_mapping,
					   i > 0 ? kstack[i] - 1 : kstack[i]);
		if (id < 0)
			return id;
		cp->frames[n++] = id;
	}
	/*
	 * A block BPF did not walk (it predicted a short one): its time stays
	 * the thread's, under one frame that says why there is no stack.
	 */
	if (s->flags & FW_SAMPLE_OFFCPU_NO_STACK) {
		id = profile__intern_named_frame(cp->p, FRAME_KERNEL, cp->kernel_mapping, 0,
						 CPU_PROFILE_OFFCPU_NO_STACK, NULL, 0);
		if (id < 0)
			return id;
		cp->frames[n++] = id;
	}

	memcpy(comm, s->comm, FW_COMM_LEN);
	comm[FW_COMM_LEN] = '\0';
	id = profile__intern_stack(cp->p, cp->frames, n);
	if (id < 0)
		return -ENOMEM;
	cp->samples++;
	if (cp->batch)
		return _add_timed(cp, s, comm, id, unix_ns, type, value);
	comm_id = profile__intern_string(cp->p, comm);
	if (comm_id < 0)
		return -ENOMEM;
	return profile__add_sample(cp->p, id, s->pid, s->tid, s->cpu, comm_id, value);
}

int cpu_profile__add(struct cpu_profile *cp, const struct fw_sample *s, uint64_t unix_ns)
{
	if (!cp->batch && cp->aggregate_type != SAMPLE_CPU)
		return 0;
	return _add(cp, s, 0, unix_ns, SAMPLE_CPU, 1);
}

int cpu_profile__add_offcpu(struct cpu_profile *cp, const struct fw_offcpu *o, uint64_t unix_ns)
{
	if (!cp->batch && cp->aggregate_type != SAMPLE_OFFCPU)
		return 0;
	if (o->blocked_ns > INT64_MAX)
		return -EINVAL;
	if (o->kskip > o->s.kstack_len)
		return -EINVAL;
	return _add(cp, &o->s, o->kskip, unix_ns, SAMPLE_OFFCPU, (int64_t)o->blocked_ns);
}

int cpu_profile__set_aggregate(struct cpu_profile *cp, uint32_t type)
{
	if (cp->batch || (type != SAMPLE_CPU && type != SAMPLE_OFFCPU))
		return -EINVAL;
	cp->aggregate_type = type;
	/* An off-CPU sample's count is nanoseconds already. */
	cp->p->period_ns = type == SAMPLE_CPU ? cp->period_ns : 1;
	return 0;
}

/* The frames of one mapping that still need a name, and their addresses. */
struct name_batch {
	struct cpu_profile *cp;
	const void *owner;	/* symbol cache owner of these addresses, or NULL */
	uint32_t *frames;
	uint64_t *addrs;
	size_t n;
};

/*
 * Names found in earlier batches, by (binary, address): an agent names the
 * same hot frames every 10 s, and reading symbol tables again each time
 * would cost most of its CPU. JIT frames are not cached: their code is
 * replaced under the same addresses. Kernel frames need no cache: the
 * kernel's symbols are held in memory. The cache
 * is dropped whole when it grows past SYMCACHE_MAX entries.
 */
#define SYMCACHE_MAX 200000
#define SYMCACHE_UNRESOLVED UINT32_MAX
/*
 * Functions are cached whole as well, [start, end) from their symbol's
 * size: a new call site in a function named before then costs no read of
 * the symbol tables. Every batch brought a few such in large libraries,
 * and each one meant scanning the library's whole table again: most of
 * the agent's CPU on a node training a model.
 */
#define SYMCACHE_MAX_RANGES 65536

struct symcache_key {
	const void *owner;
	uint64_t addr;
};

struct sym_range {
	const void *owner;
	uint64_t start, end;
	uint32_t name;		/* in sym_names; SYMCACHE_UNRESOLVED: a gap no symbol names */
};

static int _symcache_init(struct cpu_profile *cp)
{
	intern__free(cp->sym_keys);
	intern__free(cp->sym_names);
	free(cp->sym_name_of);
	cp->sym_keys = intern__new();
	cp->sym_names = intern__new();
	cp->sym_name_of = NULL;
	cp->sym_cap = 0;
	cp->nranges = cp->nsorted = 0;
	return cp->sym_keys && cp->sym_names ? 0 : -ENOMEM;
}

static int _range_cmp(const void *a, const void *b)
{
	const struct sym_range *x = a, *y = b;

	if (x->owner != y->owner)
		return (uintptr_t)x->owner < (uintptr_t)y->owner ? -1 : 1;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* The cached function of owner holding addr, or NULL. */
static const struct sym_range *_range_get(const struct cpu_profile *cp, const void *owner,
					  uint64_t addr)
{
	const struct sym_range *r = cp->ranges;
	uint32_t lo = 0, hi = cp->nsorted;

	/* The last sorted range at or below (owner, addr)... */
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if ((uintptr_t)r[mid].owner < (uintptr_t)owner ||
		    (r[mid].owner == owner && r[mid].start <= addr))
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo && r[lo - 1].owner == owner && addr < r[lo - 1].end)
		return &r[lo - 1];
	/* ... else those added since the last sort. */
	for (uint32_t i = cp->nsorted; i < cp->nranges; i++)
		if (r[i].owner == owner && r[i].start <= addr && addr < r[i].end)
			return &r[i];
	return NULL;
}

static void _range_put(struct cpu_profile *cp, const void *owner, uint64_t start, uint64_t end,
		       const char *name)
{
	int64_t nid;

	if (!cp->sym_names || cp->nranges >= SYMCACHE_MAX_RANGES) {
		if (_symcache_init(cp))
			return;
	}
	if (cp->nranges == cp->cap_ranges) {
		uint32_t cap = cp->cap_ranges ? cp->cap_ranges * 2 : 1024;
		struct sym_range *r = realloc(cp->ranges, cap * sizeof(*r));

		if (!r)
			return;
		cp->ranges = r;
		cp->cap_ranges = cap;
	}
	nid = name ? intern__add(cp->sym_names, name, strlen(name) + 1, NULL) : SYMCACHE_UNRESOLVED;
	if (nid < 0)
		return;
	cp->ranges[cp->nranges++] = (struct sym_range){ owner, start, end, (uint32_t)nid };
}

/* Sorts what the last naming added into place and drops repeats. */
static void _ranges_sort(struct cpu_profile *cp)
{
	uint32_t n = 0;

	if (cp->nsorted == cp->nranges)
		return;
	qsort(cp->ranges, cp->nranges, sizeof(*cp->ranges), _range_cmp);
	for (uint32_t i = 0; i < cp->nranges; i++)
		if (!n || _range_cmp(&cp->ranges[n - 1], &cp->ranges[i]))
			cp->ranges[n++] = cp->ranges[i];
	cp->nranges = cp->nsorted = n;
}

/* The cached name of (owner, addr): NULL if not cached; *unresolved if known to have none. */
static const char *_symcache_get(struct cpu_profile *cp, const void *owner, uint64_t addr,
				 bool *unresolved)
{
	struct symcache_key key = { owner, addr };
	int64_t id;

	*unresolved = false;
	if (!cp->sym_keys)
		return NULL;
	id = intern__find(cp->sym_keys, &key, sizeof(key));
	if (id < 0)
		return NULL;
	if (cp->sym_name_of[id] == SYMCACHE_UNRESOLVED) {
		*unresolved = true;
		return NULL;
	}
	return intern__key(cp->sym_names, cp->sym_name_of[id], NULL);
}

static void _symcache_put(struct cpu_profile *cp, const void *owner, uint64_t addr,
			  const char *name)
{
	struct symcache_key key = { owner, addr };
	bool added;
	int64_t id, nid = SYMCACHE_UNRESOLVED;

	if (!cp->sym_keys || intern__count(cp->sym_keys) >= SYMCACHE_MAX) {
		if (_symcache_init(cp))
			return;
	}
	if (name) {
		nid = intern__add(cp->sym_names, name, strlen(name) + 1, NULL);
		if (nid < 0)
			return;
	}
	id = intern__add(cp->sym_keys, &key, sizeof(key), &added);
	if (id < 0 || !added)
		return;
	if ((uint32_t)id >= cp->sym_cap) {
		uint32_t cap = cp->sym_cap ? cp->sym_cap * 2 : 1024;
		uint32_t *n = realloc(cp->sym_name_of, cap * sizeof(*n));

		if (!n) {
			_symcache_init(cp);
			return;
		}
		cp->sym_name_of = n;
		cp->sym_cap = cap;
	}
	cp->sym_name_of[id] = nid;
}

static void _name_frame(void *ctx, size_t i, const char *name, uint64_t offset);

/*
 * elf_file__resolve_ranges()'s callback: a function's extent, or a gap no
 * symbol names, goes to the range cache.
 */
static void _name_frame_range(void *ctx, size_t i, const char *name, uint64_t start,
			      uint64_t end)
{
	struct name_batch *b = ctx;

	if (end <= start || !b->owner) {
		_name_frame(ctx, i, name, name ? b->addrs[i] - start : 0);
		return;
	}
	if (name)
		profile__set_frame_name(b->cp->p, b->frames[i], name, NULL, 0);
	_range_put(b->cp, b->owner, start, end, name);
}

static void _name_frame(void *ctx, size_t i, const char *name, uint64_t offset)
{
	struct name_batch *b = ctx;
	struct profile *p = b->cp->p;
	uint32_t frame = b->frames[i];

	(void)offset;
	if (name)
		profile__set_frame_name(p, frame, name, NULL, 0);
	if (b->owner)
		_symcache_put(b->cp, b->owner, b->addrs[i], name);
}

/* Unresolved frames read `binary+0xaddr`: they never disappear. */
static void _name_unresolved(struct cpu_profile *cp, uint32_t frame)
{
	const struct profile_frame *f = &cp->p->frames[frame];
	const char *path = "[unknown]", *base;
	char name[PATH_MAX + 32];

	if (f->mapping != PROFILE_NO_MAPPING)
		path = profile__string(cp->p, cp->p->mappings[f->mapping].path);
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	snprintf(name, sizeof(name), "%s+0x%" PRIx64, base, f->addr);
	profile__set_frame_name(cp->p, frame, name, NULL, 0);
	cp->unresolved++;
}

/* Sorts frame ids by mapping so that each mapping's frames form one run. */
static int _by_mapping(const void *a, const void *b, void *profile)
{
	const struct profile *p = profile;
	const struct profile_frame *x = &p->frames[*(const uint32_t *)a];
	const struct profile_frame *y = &p->frames[*(const uint32_t *)b];

	return x->mapping < y->mapping ? -1 : x->mapping > y->mapping;
}

/* Whose symbols a mapping's frames are, for the cache: NULL for JIT code. */
static const void *_cache_owner(struct cpu_profile *cp, uint32_t m)
{
	struct mapping_source *src = m < cp->nsources ? &cp->sources[m] : NULL;

	return m != cp->kernel_mapping && src && src->bin && src->bin->elf ? src->bin : NULL;
}

static void _resolve_mapping(struct cpu_profile *cp, uint32_t m, struct name_batch *b)
{
	struct profile *p = cp->p;
	struct mapping_source *src = m < cp->nsources ? &cp->sources[m] : NULL;
	int ret = 0;

	b->owner = _cache_owner(cp, m);
	if (m == cp->kernel_mapping && !cp->timed) {
		/*
		 * record names its frames once, at the end: two reads of the
		 * file for just these addresses. The table an agent keeps
		 * would raise `record -a`'s peak memory by well over a third.
		 */
		ret = kallsyms__resolve("/proc/kallsyms", b->addrs, b->n, _name_frame, b);
	} else if (m == cp->kernel_mapping) {
		/*
		 * The kernel's text symbols are kept in memory: an agent names
		 * kernel frames every batch, and reading /proc/kallsyms (the
		 * kernel formats every line) each time was most of its CPU.
		 */
		if (!cp->ksyms_tried) {
			cp->ksyms_tried = true;
			ret = kallsyms__load("/proc/kallsyms", &cp->ksyms);
		}
		for (size_t i = 0; i < b->n && cp->ksyms.n; i++) {
			uint64_t off;
			const char *name = kallsyms__lookup(&cp->ksyms, b->addrs[i], &off);

			if (name)
				profile__set_frame_name(p, b->frames[i], name, NULL, 0);
		}
	} else if (src && src->bin && src->bin->elf) {
		cp->symbol_reads++;
		pr_debug("symbols: reading %s for %zu new addresses\n", src->bin->path, b->n);
		ret = elf_file__resolve_ranges(src->bin->elf, b->addrs, b->n, _name_frame_range, b);
	} else if (src && src->jit_pid) {
		int fd = proc_table__open_perfmap(cp->procs, src->jit_pid);

		/* A map that is missing or refused names nothing: the frames stay unnamed. */
		if (fd >= 0) {
			ret = perfmap__resolve_fd(fd, b->addrs, b->n, _name_frame, b);
			close(fd);
		}
	}
	if (ret < 0)
		pr_debug("cannot symbolize %s: %s\n",
			 profile__string(p, p->mappings[m].path), strerror(-ret));
}

/*
 * Names the unnamed frames among [first, nframes) whose kind is in kinds (a
 * bit mask of 1 << FRAME_*), one batch per mapping. With final set, frames
 * left unresolved get their `binary+0xaddr` name.
 */
static int _symbolize(struct cpu_profile *cp, uint32_t first, uint32_t kinds, bool final)
{
	struct profile *p = cp->p;
	struct name_batch b = { .cp = cp };
	uint32_t *order, *pending = NULL, n = 0;
	int err = 0;

	order = malloc((size_t)(p->nframes - first) * sizeof(*order) + 1);
	pending = malloc((size_t)(p->nframes - first) * sizeof(*pending) + 1);
	b.addrs = malloc((size_t)(p->nframes - first) * sizeof(*b.addrs) + 1);
	if (!order || !pending || !b.addrs) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t f = first; f < p->nframes; f++)
		if (!p->frames[f].function && (kinds & (1u << p->frames[f].kind)))
			order[n++] = f;
	qsort_r(order, n, sizeof(*order), _by_mapping, p);

	for (uint32_t i = 0, j; i < n; i = j) {
		uint32_t m = p->frames[order[i]].mapping;
		const void *owner = _cache_owner(cp, m);

		/* Names cached from earlier batches first; the rest in one batch. */
		b.n = 0;
		for (j = i; j < n && p->frames[order[j]].mapping == m; j++) {
			uint32_t f = order[j];
			bool unresolved = false;
			const struct sym_range *r = owner ? _range_get(cp, owner, p->frames[f].addr) :
							    NULL;
			const char *name = NULL;

			if (r && r->name == SYMCACHE_UNRESOLVED)
				unresolved = true;
			else if (r)
				name = intern__key(cp->sym_names, r->name, NULL);
			else if (owner)
				name = _symcache_get(cp, owner, p->frames[f].addr, &unresolved);

			if (name) {
				profile__set_frame_name(p, f, name, NULL, 0);
				cp->named_cached++;
			} else if (!unresolved) {
				b.addrs[b.n] = p->frames[f].addr;
				pending[b.n++] = f;
			}
		}
		if (b.n) {
			b.frames = pending;
			_resolve_mapping(cp, m, &b);
		}
	}
	_ranges_sort(cp);
	if (final)
		for (uint32_t i = 0; i < n; i++)
			if (!p->frames[order[i]].function)
				_name_unresolved(cp, order[i]);
out:
	free(order);
	free(pending);
	free(b.addrs);
	return err;
}

int cpu_profile__symbolize(struct cpu_profile *cp)
{
	return _symbolize(cp, 0, ~0u, true);
}

int cpu_profile__symbolize_jit(struct cpu_profile *cp)
{
	uint32_t first = cp->jit_named_upto;
	struct timespec ts;
	uint64_t now;
	int err;

	/*
	 * Once a second (whatever the caller's tick), frames still unnamed are
	 * tried again: JVMs asked for their map with jcmd write it after their
	 * code first ran, and a process that has exited by the final naming
	 * can no longer be read.
	 */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
	if (now - cp->jit_retry_ns >= 1000000000ULL) {
		cp->jit_retry_ns = now;
		first = 0;
	}
	if (first == cp->p->nframes)
		return 0;
	err = _symbolize(cp, first, 1u << FRAME_JIT, false);
	if (!err)
		cp->jit_named_upto = cp->p->nframes;
	return err;
}

void cpu_profile__counts(const struct cpu_profile *cp, struct cpu_profile_counts *out)
{
	out->samples = cp->samples;
	out->frames_unresolved = cp->unresolved;
	out->frames_named_cached = cp->named_cached;
	out->symbol_reads = cp->symbol_reads;
	out->pids = proc_table__nprocs(cp->procs);
}

int64_t cpu_profile__series(struct cpu_profile *cp, uint32_t pid, const char *comm)
{
	struct fw_sample s = { .pid = pid };

	if (!cp->timed)
		return -EINVAL;
	return _series_of(cp, &s, comm);
}
