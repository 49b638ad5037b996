// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "intern.h"
#include "profile.h"
#include "strbuf.h"

struct profile *profile__new(uint64_t period_ns, uint64_t start_ns)
{
	struct profile *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->period_ns = period_ns;
	p->start_ns = start_ns;
	p->strings = intern__new();
	p->mapping_keys = intern__new();
	p->frame_keys = intern__new();
	p->stacks = intern__new();
	p->sample_keys = intern__new();
	if (!p->strings || !p->mapping_keys || !p->frame_keys || !p->stacks ||
	    !p->sample_keys || profile__intern_string(p, "") != 0) {
		profile__free(p);
		errno = ENOMEM;
		return NULL;
	}
	return p;
}

void profile__free(struct profile *p)
{
	if (!p)
		return;
	intern__free(p->strings);
	intern__free(p->mapping_keys);
	intern__free(p->frame_keys);
	intern__free(p->stacks);
	intern__free(p->sample_keys);
	free(p->mappings);
	free(p->frames);
	free(p->samples);
	free(p);
}

/* Makes room for one more element in a growable array of elem_size items. */
static int _reserve(void **arr, uint32_t *cap, uint32_t n, size_t elem_size)
{
	uint32_t ncap;
	void *a;

	if (n < *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 64;
	a = realloc(*arr, (size_t)ncap * elem_size);
	if (!a)
		return -ENOMEM;
	*arr = a;
	*cap = ncap;
	return 0;
}

int64_t profile__intern_string(struct profile *p, const char *s)
{
	return intern__add(p->strings, s, strlen(s) + 1, NULL);
}

const char *profile__string(const struct profile *p, uint32_t id)
{
	return intern__key(p->strings, id, NULL);
}

int64_t profile__intern_mapping(struct profile *p, const char *path, const char *build_id)
{
	int64_t path_id = profile__intern_string(p, path);
	int64_t bid_id = profile__intern_string(p, build_id ? build_id : "");
	uint32_t key[2];
	bool added;
	int64_t id;

	if (path_id < 0 || bid_id < 0)
		return -ENOMEM;
	key[0] = path_id;
	key[1] = bid_id;
	if (_reserve((void **)&p->mappings, &p->cap_mappings, p->nmappings, sizeof(*p->mappings)))
		return -ENOMEM;
	id = intern__add(p->mapping_keys, key, sizeof(key), &added);
	if (id >= 0 && added) {
		p->mappings[id] = (struct profile_mapping){ .path = key[0], .build_id = key[1] };
		p->nmappings++;
	}
	return id;
}

int64_t profile__intern_frame(struct profile *p, enum frame_kind kind,
			      uint32_t mapping, uint64_t addr)
{
	struct { uint32_t kind, mapping; uint64_t addr; } key = { kind, mapping, addr };
	bool added;
	int64_t id;

	if (_reserve((void **)&p->frames, &p->cap_frames, p->nframes, sizeof(*p->frames)))
		return -ENOMEM;
	id = intern__add(p->frame_keys, &key, sizeof(key), &added);
	if (id >= 0 && added) {
		p->frames[id] = (struct profile_frame){
			.kind = kind, .mapping = mapping, .addr = addr,
		};
		p->nframes++;
	}
	return id;
}

int64_t profile__intern_named_frame(struct profile *p, enum frame_kind kind, uint32_t mapping,
				    uint64_t addr, const char *function, const char *file,
				    uint32_t line)
{
	int64_t fn = profile__intern_string(p, function);
	int64_t fl = profile__intern_string(p, file ? file : "");

	if (fn < 0 || fl < 0)
		return -ENOMEM;
	return profile__intern_frame_ids(p, kind, mapping, addr, (uint32_t)fn, (uint32_t)fl, line);
}

int64_t profile__intern_frame_ids(struct profile *p, enum frame_kind kind, uint32_t mapping,
				  uint64_t addr, uint32_t function, uint32_t file, uint32_t line)
{
	/* A different size from the unnamed key, so the two never collide. */
	struct { uint32_t kind, mapping; uint64_t addr; uint32_t function, file, line, pad; } key;
	bool added;
	int64_t id;

	memset(&key, 0, sizeof(key));
	key.kind = kind;
	key.mapping = mapping;
	key.addr = addr;
	key.function = function;
	key.file = file;
	key.line = line;
	if (_reserve((void **)&p->frames, &p->cap_frames, p->nframes, sizeof(*p->frames)))
		return -ENOMEM;
	id = intern__add(p->frame_keys, &key, sizeof(key), &added);
	if (id >= 0 && added) {
		p->frames[id] = (struct profile_frame){
			.kind = kind, .mapping = mapping, .addr = addr,
			.function = function, .file = file, .line = line,
		};
		p->nframes++;
	}
	return id;
}

int profile__set_frame_name(struct profile *p, uint32_t frame, const char *function,
			    const char *file, uint32_t line)
{
	int64_t fn = profile__intern_string(p, function);
	int64_t fl = profile__intern_string(p, file ? file : "");

	if (fn < 0 || fl < 0)
		return -ENOMEM;
	p->frames[frame].function = fn;
	p->frames[frame].file = fl;
	p->frames[frame].line = line;
	return 0;
}

int64_t profile__intern_stack(struct profile *p, const uint32_t *frames, uint32_t n)
{
	return intern__add(p->stacks, frames, (size_t)n * sizeof(*frames), NULL);
}

const uint32_t *profile__stack(const struct profile *p, uint32_t stack, uint32_t *n)
{
	size_t len;
	const uint32_t *frames = intern__key(p->stacks, stack, &len);

	*n = len / sizeof(uint32_t);
	return frames;
}

uint32_t profile__nstacks(const struct profile *p)
{
	return intern__count(p->stacks);
}

int profile__add_sample(struct profile *p, uint32_t stack, uint32_t pid, uint32_t tid,
			uint32_t cpu, uint32_t comm, uint64_t count)
{
	uint32_t key[5] = { stack, pid, tid, cpu, comm };
	bool added;
	int64_t id;

	if (_reserve((void **)&p->samples, &p->cap_samples, p->nsamples, sizeof(*p->samples)))
		return -ENOMEM;
	id = intern__add(p->sample_keys, key, sizeof(key), &added);
	if (id < 0)
		return id;
	if (added) {
		p->samples[id] = (struct profile_sample){
			.stack = stack, .pid = pid, .tid = tid, .cpu = cpu, .comm = comm,
		};
		p->nsamples++;
	}
	p->samples[id].count += count;
	return 0;
}

uint64_t profile__total(const struct profile *p)
{
	uint64_t total = 0;

	for (uint32_t i = 0; i < p->nsamples; i++)
		total += p->samples[i].count;
	return total;
}

const char *frame_kind__name(enum frame_kind kind)
{
	static const char *const names[FRAME_KIND_MAX] = {
		[FRAME_NATIVE] = "native",
		[FRAME_KERNEL] = "kernel",
		[FRAME_JIT] = "jit",
		[FRAME_PYTHON] = "python",
		[FRAME_CUDA_KERNEL] = "cuda-kernel",
		[FRAME_RUBY] = "ruby",
	};

	return kind < FRAME_KIND_MAX ? names[kind] : "unknown";
}

void profile__write_stacks_json(const struct profile *p, uint32_t nstacks, struct strbuf *sb)
{
	strbuf__puts(sb, "\"stacks\":[");
	for (uint32_t i = 0; i < nstacks; i++) {
		uint32_t n;
		const uint32_t *fr = profile__stack(p, i, &n);

		strbuf__puts(sb, i ? ",[" : "[");
		for (uint32_t k = 0; k < n; k++)
			strbuf__printf(sb, "%s%u", k ? "," : "", fr[k]);
		strbuf__putc(sb, ']');
	}
	strbuf__putc(sb, ']');
}
