// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/intern.h"
#include "common/profile.h"
#include "format/pprof.h"
#include "profile.pb-c.h"

#define GZ_CHUNK (64 * 1024)

/*
 * A protobuf-c output buffer that deflates straight into the FILE, so the
 * serialized profile never has to exist in memory as a whole.
 */
struct gz_sink {
	ProtobufCBuffer base;	/* first: protobuf-c passes &base back to us */
	z_stream zs;
	gz_header hdr;		/* deflate reads it until the header is out */
	FILE *out;
	int err;
	unsigned char buf[GZ_CHUNK];
};

/* Extra strings the pprof needs that the profile may not hold. */
enum {
	S_SAMPLES, S_COUNT, S_CPU, S_NANOSECONDS, S_PID, S_TID, S_COMM,
	S_UNKNOWN, S_KERNEL, S_OFF_CPU, S_GPU_TIME, S_MAX,
};

static const char *const extra_strings[S_MAX] = {
	[S_SAMPLES] = "samples",
	[S_COUNT] = "count",
	[S_CPU] = "cpu",
	[S_NANOSECONDS] = "nanoseconds",
	[S_PID] = "pid",
	[S_TID] = "tid",
	[S_COMM] = "comm",
	[S_UNKNOWN] = "[unknown]",
	[S_KERNEL] = "[kernel.kallsyms]",
	[S_OFF_CPU] = "off_cpu",
	[S_GPU_TIME] = "gpu_time",
};

static int _sink_deflate(struct gz_sink *s, int flush)
{
	do {
		size_t have;

		s->zs.next_out = s->buf;
		s->zs.avail_out = sizeof(s->buf);
		if (deflate(&s->zs, flush) == Z_STREAM_ERROR)
			return -EIO;
		have = sizeof(s->buf) - s->zs.avail_out;
		if (have && fwrite(s->buf, 1, have, s->out) != have)
			return -EIO;
	} while (s->zs.avail_out == 0);
	return 0;
}

static void _sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
	struct gz_sink *s = (struct gz_sink *)b;

	/* avail_in is 32 bits wide; feed huge appends in slices. */
	while (!s->err && len) {
		uInt n = len > UINT32_MAX ? UINT32_MAX : (uInt)len;

		s->zs.next_in = (Bytef *)data;
		s->zs.avail_in = n;
		s->err = _sink_deflate(s, Z_NO_FLUSH);
		data += n;
		len -= n;
	}
}

/*
 * Everything except the samples, which are packed one at a time. The arrays
 * are sized by the profile's frames and mappings, not by its samples.
 */
struct pprof_tables {
	Perftools__Profiles__Profile head, tail;
	Perftools__Profiles__ValueType sample_types[2], period_type;
	Perftools__Profiles__ValueType *sample_type_ptrs[2];
	Perftools__Profiles__Mapping *mappings, **mapping_ptrs;
	Perftools__Profiles__Location *locations, **location_ptrs;
	Perftools__Profiles__Line *lines, **line_ptrs;
	Perftools__Profiles__Function *functions, **function_ptrs;
	char **strtab;
	int64_t extra_ids[S_MAX];
	uint32_t kernel_mapping;	/* index of the synthesised one, or PROFILE_NO_MAPPING */
	struct intern *function_keys;
	uint64_t *location_ids;	/* scratch for one sample, leaf first */
	uint32_t max_depth;
	/* S_OFF_CPU or S_GPU_TIME: one value, that/nanoseconds; 0: samples and cpu */
	int single;
};

static void _tables_free(struct pprof_tables *t)
{
	free(t->mappings);
	free(t->mapping_ptrs);
	free(t->locations);
	free(t->location_ptrs);
	free(t->lines);
	free(t->line_ptrs);
	free(t->functions);
	free(t->function_ptrs);
	free(t->strtab);
	free(t->location_ids);
	intern__free(t->function_keys);
}

/*
 * The string table is the profile's own (its id 0 is "" as pprof requires)
 * followed by whichever extra strings it lacks, so profile string ids are
 * pprof string indexes and nothing is copied.
 */
static int _build_strings(const struct profile *p, struct pprof_tables *t)
{
	uint32_t n = intern__count(p->strings);

	t->strtab = calloc((size_t)n + S_MAX, sizeof(*t->strtab));
	if (!t->strtab)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		t->strtab[i] = (char *)profile__string(p, i);
	for (int i = 0; i < S_MAX; i++) {
		const char *s = extra_strings[i];
		int64_t id = intern__find(p->strings, s, strlen(s) + 1);

		if (id < 0) {
			id = n++;
			t->strtab[id] = (char *)s;
		}
		t->extra_ids[i] = id;
	}
	t->tail.string_table = t->strtab;
	t->tail.n_string_table = n;
	return 0;
}

static int _build_mappings(const struct profile *p, struct pprof_tables *t)
{
	uint32_t n = p->nmappings, kernel = PROFILE_NO_MAPPING;

	for (uint32_t i = 0; i < p->nframes; i++) {
		if (p->frames[i].kind == FRAME_KERNEL && p->frames[i].mapping == PROFILE_NO_MAPPING) {
			kernel = n++;
			break;
		}
	}
	t->mappings = calloc(n ? n : 1, sizeof(*t->mappings));
	t->mapping_ptrs = calloc(n ? n : 1, sizeof(*t->mapping_ptrs));
	if (!t->mappings || !t->mapping_ptrs)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		Perftools__Profiles__Mapping *m = &t->mappings[i];

		perftools__profiles__mapping__init(m);
		m->id = i + 1;
		/*
		 * Addresses are already file-relative (or kernel addresses) and
		 * every name is resolved, so the mapping only has to contain its
		 * addresses and tell pprof not to symbolize again.
		 */
		m->has_functions = 1;
		if (i == kernel) {
			m->filename = t->extra_ids[S_KERNEL];
		} else {
			m->filename = p->mappings[i].path;
			m->build_id = p->mappings[i].build_id;
		}
		t->mapping_ptrs[i] = m;
	}
	/* memory_limit: one past the highest address seen, saturating. */
	for (uint32_t i = 0; i < p->nframes; i++) {
		const struct profile_frame *f = &p->frames[i];
		uint32_t m = f->mapping;
		uint64_t limit = f->addr == UINT64_MAX ? UINT64_MAX : f->addr + 1;

		if (m == PROFILE_NO_MAPPING && f->kind == FRAME_KERNEL)
			m = kernel;
		if (m >= n)
			continue;
		if (t->mappings[m].memory_limit < limit)
			t->mappings[m].memory_limit = limit;
	}
	t->kernel_mapping = kernel;
	t->tail.mapping = t->mapping_ptrs;
	t->tail.n_mapping = n;
	return 0;
}

/*
 * One Location per frame (id = frame id + 1) and one Function per distinct
 * (name, file): frames at different addresses in one function share it.
 */
static int _build_locations(const struct profile *p, struct pprof_tables *t)
{
	size_t n = p->nframes ? p->nframes : 1;

	t->function_keys = intern__new();
	t->locations = calloc(n, sizeof(*t->locations));
	t->location_ptrs = calloc(n, sizeof(*t->location_ptrs));
	t->lines = calloc(n, sizeof(*t->lines));
	t->line_ptrs = calloc(n, sizeof(*t->line_ptrs));
	t->functions = calloc(n, sizeof(*t->functions));
	t->function_ptrs = calloc(n, sizeof(*t->function_ptrs));
	if (!t->function_keys || !t->locations || !t->location_ptrs || !t->lines ||
	    !t->line_ptrs || !t->functions || !t->function_ptrs)
		return -ENOMEM;

	for (uint32_t i = 0; i < p->nframes; i++) {
		const struct profile_frame *f = &p->frames[i];
		Perftools__Profiles__Location *loc = &t->locations[i];
		Perftools__Profiles__Line *line = &t->lines[i];
		uint32_t key[2] = { f->function, f->file };
		bool added;
		int64_t fn = intern__add(t->function_keys, key, sizeof(key), &added);

		if (fn < 0)
			return fn;
		if (added) {
			Perftools__Profiles__Function *func = &t->functions[fn];

			perftools__profiles__function__init(func);
			func->id = fn + 1;
			func->name = f->function ? f->function : t->extra_ids[S_UNKNOWN];
			func->system_name = func->name;
			func->filename = f->file;
			t->function_ptrs[fn] = func;
		}

		perftools__profiles__line__init(line);
		line->function_id = fn + 1;
		line->line = f->line;
		t->line_ptrs[i] = line;

		perftools__profiles__location__init(loc);
		loc->id = i + 1;
		if (f->mapping != PROFILE_NO_MAPPING)
			loc->mapping_id = f->mapping + 1;
		else if (f->kind == FRAME_KERNEL)
			loc->mapping_id = (uint64_t)t->kernel_mapping + 1;
		loc->address = f->addr;
		loc->n_line = 1;
		loc->line = &t->line_ptrs[i];
		t->location_ptrs[i] = loc;
	}
	t->tail.location = t->location_ptrs;
	t->tail.n_location = p->nframes;
	t->tail.function = t->function_ptrs;
	t->tail.n_function = intern__count(t->function_keys);
	return 0;
}

static int _build(const struct profile *p, struct pprof_tables *t)
{
	uint32_t nstacks = profile__nstacks(p);
	int err;

	perftools__profiles__profile__init(&t->head);
	perftools__profiles__profile__init(&t->tail);

	err = _build_strings(p, t);
	if (!err)
		err = _build_mappings(p, t);
	if (!err)
		err = _build_locations(p, t);
	if (err)
		return err;

	for (uint32_t i = 0; i < nstacks; i++) {
		uint32_t n;

		profile__stack(p, i, &n);
		if (n > t->max_depth)
			t->max_depth = n;
	}
	t->location_ids = calloc(t->max_depth ? t->max_depth : 1, sizeof(*t->location_ids));
	if (!t->location_ids)
		return -ENOMEM;

	for (int i = 0; i < 2; i++) {
		perftools__profiles__value_type__init(&t->sample_types[i]);
		t->sample_type_ptrs[i] = &t->sample_types[i];
	}
	t->sample_types[0].type = t->extra_ids[S_SAMPLES];
	t->sample_types[0].unit = t->extra_ids[S_COUNT];
	t->sample_types[1].type = t->extra_ids[S_CPU];
	t->sample_types[1].unit = t->extra_ids[S_NANOSECONDS];
	t->head.sample_type = t->sample_type_ptrs;
	t->head.n_sample_type = 2;
	if (t->single) {
		/* A count of blocks or records would be no count of anything kept. */
		t->sample_types[0].type = t->extra_ids[t->single];
		t->sample_types[0].unit = t->extra_ids[S_NANOSECONDS];
		t->head.n_sample_type = 1;
	}

	perftools__profiles__value_type__init(&t->period_type);
	t->period_type.type = t->extra_ids[t->single ? t->single : S_CPU];
	t->period_type.unit = t->extra_ids[S_NANOSECONDS];
	t->tail.period_type = &t->period_type;
	t->tail.period = p->period_ns;
	t->tail.time_nanos = p->start_ns;
	t->tail.duration_nanos = p->duration_ns;
	/*
	 * pprof would pick the last sample type anyway; naming it makes the
	 * choice explicit and survives reordering of sample_type.
	 */
	t->tail.default_sample_type = t->extra_ids[t->single ? t->single : S_CPU];
	return 0;
}

/*
 * A serialized message followed by another one parses as their merge, with
 * repeated fields concatenated. So the Profile is written as three messages:
 * sample types, then each sample in a one-sample Profile, then everything
 * else. protobuf-c packs fields in field-number order, so the bytes equal
 * those of one packed Profile, while memory stays bounded by the deepest
 * stack rather than by the number of samples.
 */
static int _pack(const struct profile *p, struct pprof_tables *t, struct gz_sink *s)
{
	Perftools__Profiles__Profile one = PERFTOOLS__PROFILES__PROFILE__INIT;
	Perftools__Profiles__Sample sample = PERFTOOLS__PROFILES__SAMPLE__INIT;
	Perftools__Profiles__Sample *sample_ptr = &sample;
	Perftools__Profiles__Label labels[4], *label_ptrs[4];
	int64_t values[2];

	for (int i = 0; i < 4; i++) {
		perftools__profiles__label__init(&labels[i]);
		label_ptrs[i] = &labels[i];
	}
	labels[0].key = t->extra_ids[S_PID];
	labels[1].key = t->extra_ids[S_TID];
	labels[2].key = t->extra_ids[S_CPU];
	labels[3].key = t->extra_ids[S_COMM];
	/*
	 * pprof drops a numeric label whose value and unit are both 0, which
	 * would lose cpu 0 and pid 0. "count" is the unit pprof prints as a
	 * bare number.
	 */
	for (int i = 0; i < 3; i++)
		labels[i].num_unit = t->extra_ids[S_COUNT];
	sample.location_id = t->location_ids;
	sample.value = values;
	sample.n_value = t->head.n_sample_type;
	sample.label = label_ptrs;
	sample.n_label = 4;
	one.sample = &sample_ptr;
	one.n_sample = 1;

	perftools__profiles__profile__pack_to_buffer(&t->head, &s->base);
	for (uint32_t i = 0; i < p->nsamples && !s->err; i++) {
		const struct profile_sample *ps = &p->samples[i];
		const uint32_t *frames;
		uint32_t n;

		frames = profile__stack(p, ps->stack, &n);
		/* Our stacks are root first; pprof's are leaf first. */
		for (uint32_t j = 0; j < n; j++)
			t->location_ids[j] = (uint64_t)frames[n - 1 - j] + 1;
		sample.n_location_id = n;
		values[0] = t->single ? ps->count * p->period_ns : ps->count;
		values[1] = ps->count * p->period_ns;
		labels[0].num = ps->pid;
		labels[1].num = ps->tid;
		labels[2].num = ps->cpu;
		labels[3].str = ps->comm;
		perftools__profiles__profile__pack_to_buffer(&one, &s->base);
	}
	perftools__profiles__profile__pack_to_buffer(&t->tail, &s->base);
	if (!s->err)
		s->err = _sink_deflate(s, Z_FINISH);
	return s->err;
}

static int _write(const struct profile *p, int single, FILE *out)
{
	struct pprof_tables t = { .single = single };
	struct gz_sink *s;
	bool zinit = false;
	int err;

	s = calloc(1, sizeof(*s));
	if (!s) {
		err = -ENOMEM;
		goto out;
	}
	err = _build(p, &t);
	if (err)
		goto out;

	s->base.append = _sink_append;
	s->out = out;
	/* windowBits 15 + 16 selects a gzip wrapper. */
	if (deflateInit2(&s->zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		err = -ENOMEM;
		goto out;
	}
	zinit = true;
	/* mtime 0 and OS "unknown" keep the file a function of the profile. */
	s->hdr.time = 0;
	s->hdr.os = 255;
	if (deflateSetHeader(&s->zs, &s->hdr) != Z_OK) {
		err = -EIO;
		goto out;
	}

	err = _pack(p, &t, s);
	if (!err && (fflush(out) || ferror(out)))
		err = -EIO;
out:
	if (zinit)
		deflateEnd(&s->zs);
	free(s);
	_tables_free(&t);
	return err;
}

int pprof__write(const struct profile *p, FILE *out)
{
	return pprof__write_type(p, false, out);
}

int pprof__write_offcpu(const struct profile *p, FILE *out)
{
	return _write(p, S_OFF_CPU, out);
}

int pprof__write_gpu_time(const struct profile *p, FILE *out)
{
	return _write(p, S_GPU_TIME, out);
}

int pprof__write_type(const struct profile *p, bool offcpu, FILE *out)
{
	return _write(p, offcpu ? S_OFF_CPU : 0, out);
}
