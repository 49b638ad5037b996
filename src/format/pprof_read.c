// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/decompress.h"
#include "common/intern.h"
#include "common/profile.h"
#include "format/pb_alloc.h"
#include "format/pprof_read.h"
#include "profile.pb-c.h"

typedef Perftools__Profiles__Profile Profile;
typedef Perftools__Profiles__Location Location;
typedef Perftools__Profiles__Function Function;

/* pprof writers put a few values and labels on a sample. */
#define MAX_SAMPLE_VALUES 64
#define MAX_SAMPLE_LABELS 64

struct pprof_read_limits pprof_read_limits__default(void)
{
	return (struct pprof_read_limits){
		.max_decompressed = 32u << 20,
		.max_unpacked = 128u << 20,
		.max_samples = 1000000,
		.max_stack_depth = 1024,
	};
}

struct reader {
	const Profile *pb;
	struct batch *b;
	char *err;
	size_t err_len;
	const char *const *names;
	const char *const *values;
	size_t nlabels;
};

__attribute__((format(printf, 3, 4)))
static int _fail(struct reader *r, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(r->err, r->err_len, fmt, ap);
	va_end(ap);
	return code;
}

static const char *_str(const struct reader *r, int64_t i)
{
	return i >= 0 && (size_t)i < r->pb->n_string_table ? r->pb->string_table[i] : NULL;
}

/* pprof ids are arbitrary: look them up by scanning once into sorted order. */
static int _by_loc_id(const void *a, const void *b)
{
	uint64_t x = (*(Location *const *)a)->id, y = (*(Location *const *)b)->id;

	return x < y ? -1 : x > y;
}

static int _by_fn_id(const void *a, const void *b)
{
	uint64_t x = (*(Function *const *)a)->id, y = (*(Function *const *)b)->id;

	return x < y ? -1 : x > y;
}

static const Location *_location(Location **sorted, size_t n, uint64_t id)
{
	Location key = { .id = id }, *kp = &key, **hit;

	hit = bsearch(&kp, sorted, n, sizeof(*sorted), _by_loc_id);
	return hit ? *hit : NULL;
}

static const Function *_function(Function **sorted, size_t n, uint64_t id)
{
	Function key = { .id = id }, *kp = &key, **hit;

	hit = bsearch(&kp, sorted, n, sizeof(*sorted), _by_fn_id);
	return hit ? *hit : NULL;
}

static uint64_t _frame_key(const char *name, const char *file)
{
	uint64_t h = hash__bytes(name, strlen(name));

	return file ? h ^ (hash__bytes(file, strlen(file)) * 31) : h;
}

/* Which value is the sample count, and what to divide it by. */
static int _value_index(struct reader *r, int64_t *divisor)
{
	const Profile *pb = r->pb;

	*divisor = 1;
	for (size_t i = 0; i < pb->n_sample_type; i++) {
		const char *t = _str(r, pb->sample_type[i]->type);

		if (t && !strcmp(t, "samples"))
			return i;
	}
	for (size_t i = 0; i < pb->n_sample_type; i++) {
		const char *t = _str(r, pb->sample_type[i]->type);
		const char *u = _str(r, pb->sample_type[i]->unit);

		if (t && u && !strcmp(t, "cpu") && !strcmp(u, "nanoseconds") && pb->period > 0) {
			*divisor = pb->period;
			return i;
		}
	}
	if (!pb->n_sample_type)
		return _fail(r, -EINVAL, "the profile has no sample types");
	return 0;
}

static const char *_comm(struct reader *r, const Perftools__Profiles__Sample *s,
			 const char *fallback)
{
	for (size_t i = 0; i < s->n_label; i++) {
		const char *k = _str(r, s->label[i]->key), *v = _str(r, s->label[i]->str);

		if (k && v && v[0] && (!strcmp(k, "comm") || !strcmp(k, "thread_name")))
			return v;
	}
	return fallback;
}

static int _read(struct reader *r, const struct pprof_read_limits *lim, int64_t now_ns)
{
	const Profile *pb = r->pb;
	Location **locs = NULL;
	Function **fns = NULL;
	uint32_t *frames = NULL;
	const char **names = NULL, **values = NULL;
	const char *fallback = "pprof";
	int64_t divisor, ts = pb->time_nanos > 0 ? pb->time_nanos : now_ns;
	int vi, err = -ENOMEM;

	if (pb->n_string_table == 0 || pb->string_table[0][0])
		return _fail(r, -EINVAL, "string_table[0] must be \"\"");
	if (pb->n_sample > lim->max_samples)
		return _fail(r, -E2BIG, "%zu samples; at most %zu", pb->n_sample, lim->max_samples);
	vi = _value_index(r, &divisor);
	if (vi < 0)
		return vi;
	if (pb->n_mapping && _str(r, pb->mapping[0]->filename) &&
	    _str(r, pb->mapping[0]->filename)[0]) {
		const char *f = _str(r, pb->mapping[0]->filename), *slash = strrchr(f, '/');

		fallback = slash ? slash + 1 : f;
	}

	locs = malloc((pb->n_location + 1) * sizeof(*locs));
	fns = malloc((pb->n_function + 1) * sizeof(*fns));
	frames = malloc((lim->max_stack_depth + 1) * sizeof(*frames));
	names = calloc(r->nlabels + 1, sizeof(*names));
	values = calloc(r->nlabels + 1, sizeof(*values));
	if (!locs || !fns || !frames || !names || !values)
		goto out;
	if (pb->n_location)
		memcpy(locs, pb->location, pb->n_location * sizeof(*locs));
	if (pb->n_function)
		memcpy(fns, pb->function, pb->n_function * sizeof(*fns));
	qsort(locs, pb->n_location, sizeof(*locs), _by_loc_id);
	qsort(fns, pb->n_function, sizeof(*fns), _by_fn_id);
	for (size_t i = 0; i < r->nlabels; i++) {
		names[i] = r->names[i];
		values[i] = r->values[i];
	}
	names[r->nlabels] = "comm";

	for (size_t i = 0; i < pb->n_sample; i++) {
		const Perftools__Profiles__Sample *s = pb->sample[i];
		struct batch_sample bs = { .ts_ns = ts, .type = SAMPLE_CPU };
		uint32_t depth = 0;
		int64_t id;

		if ((size_t)vi >= s->n_value) {
			err = _fail(r, -EINVAL, "sample %zu has %zu values; sample_type has %zu", i,
				    s->n_value, pb->n_sample_type);
			goto out;
		}
		if (s->value[vi] <= 0)
			continue;
		/* pprof lists locations leaf first, and a location's lines innermost first. */
		for (size_t l = s->n_location_id; l-- > 0;) {
			const Location *loc = _location(locs, pb->n_location, s->location_id[l]);

			if (!loc) {
				err = _fail(r, -EINVAL, "sample %zu: no location %llu", i,
					    (unsigned long long)s->location_id[l]);
				goto out;
			}
			for (size_t k = loc->n_line ? loc->n_line : 1; k-- > 0;) {
				const Function *fn = loc->n_line ?
					_function(fns, pb->n_function, loc->line[k]->function_id) : NULL;
				const char *name = fn ? _str(r, fn->name) : NULL;
				char addr[32];

				if (loc->n_line && (!fn || !name)) {
					err = _fail(r, -EINVAL, "location %llu: bad function",
						    (unsigned long long)loc->id);
					goto out;
				}
				if (depth == lim->max_stack_depth) {
					err = _fail(r, -E2BIG, "sample %zu is deeper than %zu frames", i,
						    lim->max_stack_depth);
					goto out;
				}
				if (!name) {
					snprintf(addr, sizeof(addr), "0x%llx",
						 (unsigned long long)loc->address);
					name = addr;
				}
				/* Frames carry no address: key them by name and file. */
				id = profile__intern_frame(r->b->dict, FRAME_NATIVE, PROFILE_NO_MAPPING,
							   _frame_key(name, fn ? _str(r, fn->filename) : NULL));
				if (id < 0 || profile__set_frame_name(r->b->dict, id, name,
						fn ? _str(r, fn->filename) : NULL,
						loc->n_line ? (uint32_t)loc->line[k]->line : 0))
					goto out;
				frames[depth++] = id;
			}
		}
		values[r->nlabels] = _comm(r, s, fallback);
		id = batch__intern_series(r->b, names, values, r->nlabels + 1);
		if (id < 0) {
			err = id == -EINVAL ? _fail(r, -EINVAL, "bad labels") : (int)id;
			goto out;
		}
		bs.series = id;
		id = profile__intern_stack(r->b->dict, frames, depth);
		if (id < 0)
			goto out;
		bs.stack = id;
		bs.value = s->value[vi] / divisor ? s->value[vi] / divisor : 1;
		if (batch__add_sample(r->b, &bs))
			goto out;
	}
	err = 0;
out:
	if (err == -ENOMEM)
		_fail(r, -ENOMEM, "out of memory");
	free(locs);
	free(fns);
	free(frames);
	free(names);
	free(values);
	return err;
}

int pprof__read(const void *data, size_t len, const struct pprof_read_limits *lim,
		const char *const *names, const char *const *values, size_t n, int64_t now_ns,
		struct batch *b, char *err, size_t err_len)
{
	const uint8_t *raw = data;
	uint8_t *plain = NULL;
	size_t plain_len = len;
	struct pb_capped_alloc ca = { .max = lim->max_unpacked };
	ProtobufCAllocator pa = pb_capped_alloc__allocator(&ca);
	struct reader r = {
		.b = b, .err = err, .err_len = err_len,
		.names = names, .values = values, .nlabels = n,
	};
	const struct pb_cap caps[] = {
		{ &perftools__profiles__profile__descriptor, 2, lim->max_samples, "samples" },
		{ &perftools__profiles__sample__descriptor, 1, lim->max_stack_depth,
		  "locations in one sample" },
		{ &perftools__profiles__sample__descriptor, 2, MAX_SAMPLE_VALUES,
		  "values in one sample" },
		{ &perftools__profiles__sample__descriptor, 3, MAX_SAMPLE_LABELS,
		  "labels in one sample" },
		{ &perftools__profiles__location__descriptor, 4, lim->max_stack_depth,
		  "lines in one location" },
	};
	char why[192];
	Profile *pb;
	int ret;

	if (len >= 2 && raw[0] == 0x1f && raw[1] == 0x8b) {
		ret = decompress__gzip(raw, len, lim->max_decompressed, &plain, &plain_len, err,
				       err_len);
		if (ret)
			return ret;
		raw = plain;
	} else if (len > lim->max_decompressed) {
		snprintf(err, err_len, "profile exceeds %zu bytes", lim->max_decompressed);
		return -E2BIG;
	}
	ret = pb_capped_alloc__check(&perftools__profiles__profile__descriptor, raw, plain_len,
				     lim->max_unpacked, caps, sizeof(caps) / sizeof(caps[0]),
				     why, sizeof(why));
	if (ret) {
		free(plain);
		if (ret == -E2BIG) {
			snprintf(err, err_len, "profile: %s", why);
			return -E2BIG;
		}
		snprintf(err, err_len, "not a pprof profile (profile.proto does not parse: %s)", why);
		return -EINVAL;
	}
	pb = perftools__profiles__profile__unpack(&pa, plain_len, raw);
	free(plain);
	if (!pb) {
		if (ca.over) {
			snprintf(err, err_len, "profile unpacks to more than %zu bytes",
				 lim->max_unpacked);
			return -E2BIG;
		}
		snprintf(err, err_len, "not a pprof profile (profile.proto does not parse)");
		return -EINVAL;
	}
	r.pb = pb;
	ret = _read(&r, lim, now_ns);
	perftools__profiles__profile__free_unpacked(pb, &pa);
	if (ret)
		batch__reset(b);
	return ret;
}
