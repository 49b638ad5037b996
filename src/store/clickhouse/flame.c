// SPDX-License-Identifier: Apache-2.0
/*
 * ClickHouse backend: store__flamegraph(). The window is read from hour
 * rollups where it can be (see _window()). ClickHouse sums it by
 * (process key, stack), the process key being a hash of the series'
 * comm and period joined from the series table, so that one row comes
 * back per stack and process rather than per stack and series. The tree
 * is cut on cached stack shapes (frames merged by function, binary path
 * and kind) before anything is named; only the frames of kept nodes go
 * into out. Naming every frame of every stack of a window first, most of
 * them cut afterwards, was most of the query.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/flametree.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "clickhouse_impl.h"

/*
 * The cache grows with the fleet's distinct stacks, not with time; past
 * this it is dropped whole before a query, so that pathological
 * dictionaries cost reads again rather than the server's memory.
 */
#define SHAPES_MAX_BYTES (256u << 20)

/* The process key of a series, in ClickHouse: what profiles sum by besides the stack. */
#define TAG_SQL "cityHash64(vals[indexOf(names, 'comm')], period)"

void ch__shapes_free(struct ch_shapes *sh)
{
	u64map__free(&sh->sidx);
	u64map__free(&sh->fidx);
	free(sh->soff);
	free(sh->slen);
	free(sh->arena);
	free(sh->frames);
	free(sh->fhash);
	free(sh->fkey);
	intern__free(sh->strs);
	intern__free(sh->keys);
	memset(sh, 0, sizeof(*sh));
}

static size_t _bytes(const struct ch_shapes *sh)
{
	return ((size_t)sh->sidx.cap + sh->fidx.cap) * sizeof(struct u64slot) +
	       (size_t)sh->cap_stack * (sizeof(*sh->soff) + sizeof(*sh->slen)) +
	       sh->cap_arena * sizeof(*sh->arena) +
	       (size_t)sh->cap_frames * (sizeof(*sh->frames) + sizeof(*sh->fhash) +
					 sizeof(*sh->fkey)) +
	       (sh->strs ? intern__memory(sh->strs) : 0) + (sh->keys ? intern__memory(sh->keys) : 0);
}

static int _grow(void **a, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t c = *cap ? *cap : 1024;
	void *p;

	if (need <= *cap)
		return 0;
	while (c < need) {
		if (c > UINT32_MAX / 2)
			return -ENOMEM;		/* the doubling would wrap, and never end */
		c *= 2;
	}
	p = realloc(*a, (size_t)c * size);
	if (!p)
		return -ENOMEM;
	*a = p;
	*cap = c;
	return 0;
}

/* The index of frame hash fh, added unread when new. */
static int64_t _frame(struct ch_shapes *sh, uint64_t fh)
{
	bool added;
	uint64_t *slot = u64map__upsert(&sh->fidx, fh, &added);
	uint32_t cap = sh->cap_frames;

	if (!slot)
		return -ENOMEM;
	if (!added)
		return (int64_t)*slot;
	if (_grow((void **)&sh->frames, &cap, sh->nframes + 1, sizeof(*sh->frames)) ||
	    _grow((void **)&sh->fhash, &(uint32_t){ sh->cap_frames }, sh->nframes + 1,
		  sizeof(*sh->fhash)) ||
	    _grow((void **)&sh->fkey, &(uint32_t){ sh->cap_frames }, sh->nframes + 1,
		  sizeof(*sh->fkey))) {
		return -ENOMEM;	/* the caller drops the cache */
	}
	sh->cap_frames = cap;
	memset(&sh->frames[sh->nframes], 0, sizeof(*sh->frames));
	sh->fhash[sh->nframes] = fh;
	sh->fkey[sh->nframes] = 0;
	*slot = sh->nframes;
	return sh->nframes++;
}

/* Reads the stacks of want[] (hashes the cache lacks), with every row a scan brings. */
static int _load_stacks(struct ch_store *st, const uint64_t *want, uint32_t n)
{
	struct ch_shapes *sh = &st->shapes;
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	struct rbr r;
	int err;

	strbuf__printf(&sql, "SELECT id, frames FROM %s.stacks", st->db);
	err = ch__where_ids(st, "stacks", want, n, &sql);
	strbuf__puts(&sql, " FORMAT RowBinary");
	err = err ?: sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = ch__reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t h = rbr__u64(&r), nf = rbr__varint(&r);
		bool added;
		uint64_t *slot;
		uint32_t cap;

		if (r.bad || nf > UINT32_MAX / 2)
			break;
		slot = u64map__upsert(&sh->sidx, h, &added);
		if (!slot) {
			err = -ENOMEM;
			break;
		}
		if (!added) {	/* a copy ReplacingMergeTree has not folded yet */
			for (uint64_t i = 0; i < nf; i++)
				rbr__u64(&r);
			continue;
		}
		cap = sh->cap_stack;
		if (_grow((void **)&sh->soff, &cap, sh->nstack + 1, sizeof(*sh->soff)) ||
		    _grow((void **)&sh->slen, &(uint32_t){ sh->cap_stack }, sh->nstack + 1,
			  sizeof(*sh->slen))) {
			err = -ENOMEM;
			break;
		}
		sh->cap_stack = cap;
		if (sh->narena + nf > sh->cap_arena) {
			size_t c = sh->cap_arena ? sh->cap_arena : 65536;
			uint32_t *a;

			while (c < sh->narena + nf)
				c *= 2;
			a = realloc(sh->arena, c * sizeof(*a));
			if (!a) {
				err = -ENOMEM;
				break;
			}
			sh->arena = a;
			sh->cap_arena = c;
		}
		*slot = sh->nstack;
		sh->soff[sh->nstack] = sh->narena;
		sh->slen[sh->nstack++] = (uint32_t)nf;
		for (uint64_t i = 0; i < nf && !err; i++) {
			int64_t f = _frame(sh, rbr__u64(&r));

			if (f < 0)
				err = (int)f;
			else
				sh->arena[sh->narena++] = (uint32_t)f;
		}
	}
	if (!err && r.bad)
		err = -EIO;
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

static int64_t _str(struct ch_shapes *sh, const char *s)
{
	return intern__add(sh->strs, s, strlen(s) + 1, NULL);
}

/* Reads the frames the cache knows of but has not read. */
static int _load_frames(struct ch_store *st)
{
	struct ch_shapes *sh = &st->shapes;
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	uint64_t *want = NULL;
	uint32_t n = 0;
	struct rbr r;
	int err = 0;

	for (uint32_t i = 0; i < sh->nframes; i++)
		if (!sh->fkey[i]) {
			if (!want && !(want = malloc(((size_t)sh->nframes + 1) * sizeof(*want))))
				return -ENOMEM;
			want[n++] = sh->fhash[i];
		}
	if (!n)
		return 0;
	if ((!sh->strs && !(sh->strs = intern__new())) || (!sh->keys && !(sh->keys = intern__new()))) {
		err = -ENOMEM;
		goto out;
	}
	strbuf__printf(&sql, "SELECT id, kind, has_mapping, path, build_id, addr, function, file,"
		       " line FROM %s.frames", st->db);
	err = ch__where_ids(st, "frames", want, n, &sql);
	strbuf__puts(&sql, " FORMAT RowBinary");
	err = err ?: sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = ch__reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t fh = rbr__u64(&r);
		uint8_t kind = rbr__u8(&r), has_map = rbr__u8(&r);
		const char *path = rbr__str(&r), *bid = rbr__str(&r);
		uint64_t addr = rbr__u64(&r);
		const char *fn = rbr__str(&r), *file = rbr__str(&r);
		uint32_t line = rbr__u32(&r);
		const uint64_t *slot = u64map__get(&sh->fidx, fh);
		struct ch_frame *f;
		struct { uint32_t function, path, kind; } key;
		int64_t a, b, c, d, k;

		if (r.bad || kind >= FRAME_KIND_MAX) {
			err = -EIO;
			break;
		}
		if (!slot || sh->fkey[*slot])
			continue;	/* not asked for, or a copy not folded yet */
		a = _str(sh, has_map ? path : "");
		b = _str(sh, bid);
		c = _str(sh, fn);
		d = _str(sh, file);
		if (a < 0 || b < 0 || c < 0 || d < 0) {
			err = -ENOMEM;
			break;
		}
		/* What flametree__build_profile() merges by; no mapping is path "". */
		key.function = (uint32_t)c;
		key.path = (uint32_t)a;
		key.kind = kind;
		k = intern__add(sh->keys, &key, sizeof(key), NULL);
		if (k < 0) {
			err = (int)k;
			break;
		}
		f = &sh->frames[*slot];
		*f = (struct ch_frame){ .addr = addr, .path = (uint32_t)a, .build_id = (uint32_t)b,
					.function = (uint32_t)c, .file = (uint32_t)d, .line = line,
					.key = (uint32_t)k + 1, .kind = kind, .has_mapping = has_map };
		sh->fkey[*slot] = (uint32_t)k + 1;
	}
	if (!err && r.bad)
		err = -EIO;
	for (uint32_t i = 0; !err && i < sh->nframes; i++)
		if (!sh->fkey[i]) {
			pr_warn("store: clickhouse: frame %016llx is missing\n",
				(unsigned long long)sh->fhash[i]);
			err = -EIO;
		}
out:
	free(want);
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

/* Copies cached frame f into out; its id there. */
static int64_t _name(struct ch_shapes *sh, struct profile *out, uint32_t f)
{
	const struct ch_frame *fr = &sh->frames[f];
	uint32_t mapping = PROFILE_NO_MAPPING;
	int64_t id;

	if (fr->has_mapping) {
		id = profile__intern_mapping(out, intern__key(sh->strs, fr->path, NULL),
					     intern__key(sh->strs, fr->build_id, NULL));
		if (id < 0)
			return id;
		mapping = (uint32_t)id;
	}
	return profile__intern_named_frame(out, (enum frame_kind)fr->kind, mapping, fr->addr,
					   intern__key(sh->strs, fr->function, NULL),
					   intern__key(sh->strs, fr->file, NULL), fr->line);
}

/* A process key: comm (a string id of out) and, for CPU, the period. */
struct ftag {
	uint32_t comm, pad;
	uint64_t period;
};

/*
 * Process key hashes (TAG_SQL) -> index in tags (+ 1), through one series
 * of each key: ClickHouse hashes, this side names.
 */
static int _tags(struct ch_store *st, uint32_t type, struct profile *out, struct u64map *tmap,
		 struct intern *tags)
{
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	struct rbr r;
	int err;

	strbuf__printf(&sql, "SELECT " TAG_SQL " AS t, any(id) FROM %s.series GROUP BY t"
		       " FORMAT RowBinary", st->db);
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = ch__reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t h = rbr__u64(&r), id = rbr__u64(&r), *slot;
		const struct ch_series *s;
		struct ftag tag = { 0 };
		int64_t comm, i;

		if (r.bad)
			break;
		slot = u64map__get(tmap, h);
		if (!slot || *slot)
			continue;	/* not in the answer */
		err = ch__series(st, id, &s);
		if (err)
			break;
		comm = profile__intern_string(out, s->comm);
		if (comm < 0) {
			err = (int)comm;
			break;
		}
		tag.comm = (uint32_t)comm;
		if (type == SAMPLE_CPU)
			tag.period = s->period_ns ? s->period_ns : out->period_ns;
		i = intern__add(tags, &tag, sizeof(tag), NULL);
		if (i < 0) {
			err = (int)i;
			break;
		}
		*slot = (uint64_t)i + 1;
	}
	if (!err && r.bad)
		err = -EIO;
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

static inline int64_t _floor(int64_t t, int64_t unit) { return t / unit * unit; }
static inline int64_t _ceil(int64_t t, int64_t unit) { return _floor(t + unit - 1, unit); }

/*
 * Where [from, to) may be widened for free: to a whole hour or minute at
 * either end when no sample lies between the edge and the widened edge
 * (sample_spans says so, where it is whole: from rfrom on). A window that
 * starts before its first sample or ends after its newest (the last hour,
 * the last day) then reads no raw samples and, in whole hours, the hour
 * rollups: the raw samples sort by hour, not by time within it, so the
 * few of a window's edge minute cost a read of its whole hour.
 */
static int _widen(struct ch_store *st, uint32_t type, int64_t low, int64_t rfrom,
		  int64_t *from, int64_t *to)
{
	int64_t fh = _floor(*from, STORE_NS_HOUR), fm = _floor(*from, STORE_NS_MIN);
	int64_t th = _ceil(*to, STORE_NS_HOUR), tm = _ceil(*to, STORE_NS_MIN);
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	uint64_t n[4];
	struct rbr r;
	int err;

	if (fh == *from && th == *to)
		return 0;
	if (low < rfrom)
		low = rfrom;
	strbuf__printf(&sql, "SELECT countIf(tmax >= %1$" PRId64 " AND tmin < %2$" PRId64 "),"
		       " countIf(tmax >= %3$" PRId64 " AND tmin < %2$" PRId64 "),"
		       " countIf(tmax >= %4$" PRId64 " AND tmin < %5$" PRId64 "),"
		       " countIf(tmax >= %4$" PRId64 " AND tmin < %6$" PRId64 ")"
		       " FROM %7$s.sample_spans WHERE type = %8$u AND tmax >= %1$" PRId64
		       " FORMAT RowBinary", fh, *from, fm, *to, th, tm, st->db, type);
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = ch__reader(&resp);
	for (int i = 0; i < 4; i++)
		n[i] = rbr__u64(&r);
	if (!err && r.bad)
		err = -EIO;
	if (!err) {
		if (fh >= low && !n[0])
			*from = fh;
		else if (fm >= low && !n[1])
			*from = fm;
		if (*to >= rfrom && !n[2])
			*to = th;
		else if (*to >= rfrom && !n[3])
			*to = tm;
	}
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

/*
 * Appends to sql the rows of [from, to) of type (after retention: w),
 * as "SELECT series, stack, value ... UNION ALL ...": whole hours from
 * samples_1h where it is whole, other whole minutes from samples_1m, the
 * rest from samples. Each sample is counted once, so the sums are those
 * of the raw samples.
 */
static int _window(struct ch_store *st, uint32_t type, int64_t w, int64_t from, int64_t to,
		   const char *filter, struct strbuf *sql)
{
	int64_t rfrom, a, b, ha, hb;
	const char *sep = "";
	int err;

	err = ch__rollups_from(st, &rfrom);
	if (!err && rfrom != INT64_MAX)
		err = _widen(st, type, w, rfrom, &from, &to);
	if (err)
		return err;
	a = _ceil(from, STORE_NS_MIN);
	b = _floor(to, STORE_NS_MIN);
	if (a >= b) {
		strbuf__printf(sql, "SELECT series, stack, value FROM %s.samples WHERE type = %u"
			       " AND ts >= %" PRId64 " AND ts < %" PRId64 "%s", st->db, type, from,
			       to, filter);
		return sql->oom ? -ENOMEM : 0;
	}
	ha = _ceil(a, STORE_NS_HOUR);
	if (ha < rfrom)
		ha = rfrom;
	hb = _floor(b, STORE_NS_HOUR);
	if (rfrom == INT64_MAX || ha >= hb)
		ha = hb = b;	/* no whole hour: minutes [a, b) */
	if (ha < hb) {
		strbuf__printf(sql, "SELECT series, stack, value FROM %s.samples_1h WHERE type = %u"
			       " AND hour >= %" PRId64 " AND hour < %" PRId64 "%s", st->db, type,
			       ha, hb, filter);
		sep = " UNION ALL ";
	}
	if (a < ha || hb < b) {
		strbuf__printf(sql, "%sSELECT series, stack, value FROM %s.samples_1m WHERE type = %u"
			       " AND ((minute >= %" PRId64 " AND minute < %" PRId64 ") OR"
			       " (minute >= %" PRId64 " AND minute < %" PRId64 "))%s", sep, st->db,
			       type, a, ha, hb, b, filter);
		sep = " UNION ALL ";
	}
	/* The partial minutes at the edges; the last condition lets ClickHouse skip hours. */
	if (from < a || b < to)
		strbuf__printf(sql, "%sSELECT series, stack, value FROM %s.samples WHERE type = %u"
			       " AND ts >= %" PRId64 " AND ts < %" PRId64 " AND (ts < %" PRId64
			       " OR ts >= %" PRId64 ")%s", sep, st->db, type, from, to, a, b, filter);
	return sql->oom ? -ENOMEM : 0;
}

struct frow {
	uint64_t tag, stack;
	int64_t sum;
};

/*
 * The window's sums by (process key, stack), inner being the rows with
 * their key t (a FROM clause without its opening parenthesis). ClickHouse
 * groups by one 64-bit key several times faster than by two, so it
 * groups by stack XOR t and says which t each group saw: one t, and the
 * stack is the key XOR t; two, and two pairs share a key (as likely as
 * two stacks sharing an id): -EAGAIN, and by_pair asks again by the pair.
 */
static int _sums(struct ch_store *st, const char *inner, bool by_pair, struct frow **rows,
		 uint32_t *nrows, struct u64map *tmap)
{
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	uint32_t cap = 0;
	struct rbr r;
	int err;

	*nrows = 0;
	if (by_pair)
		strbuf__printf(&sql, "SELECT t, t, stack, toInt64(sum(value)) FROM (%s"
			       " GROUP BY t, stack FORMAT RowBinary", inner);
	else
		strbuf__printf(&sql, "SELECT min(t), max(t), bitXor(stack, t) AS k,"
			       " toInt64(sum(value)) FROM (%s GROUP BY k FORMAT RowBinary", inner);
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = ch__reader(&resp);
	while (!err && rbr__more(&r)) {
		struct frow row;
		uint64_t t2;

		row.tag = rbr__u64(&r);
		t2 = rbr__u64(&r);
		row.stack = rbr__u64(&r);
		row.sum = rbr__i64(&r);
		if (r.bad)
			break;
		if (t2 != row.tag) {
			err = -EAGAIN;
			break;
		}
		if (!by_pair)
			row.stack ^= row.tag;
		if (!row.sum)
			continue;
		if (_grow((void **)rows, &cap, *nrows + 1, sizeof(**rows)) ||
		    !u64map__upsert(tmap, row.tag, NULL)) {
			err = -ENOMEM;
			break;
		}
		(*rows)[(*nrows)++] = row;
	}
	if (!err && r.bad)
		err = -EIO;
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

int ch__flamegraph(void *impl, int64_t from, int64_t to, const struct selector *sel,
		   uint32_t type, size_t max_nodes, struct profile *out, struct flametree *t)
{
	struct ch_store *st = impl;
	struct ch_shapes *sh = &st->shapes;
	struct strbuf filter = STRBUF_INIT, inner = STRBUF_INIT;
	struct u64map tmap = { 0 }, agg = { 0 };
	struct intern *tags = intern__new();
	struct flametree_path *paths = NULL;
	struct frow *rows = NULL;
	uint64_t *want = NULL, period = 0;
	uint32_t nrows = 0, nwant = 0, npaths = 0;
	bool none = false, any = false, mixed = false;
	int64_t w;
	int err;

	memset(t, 0, sizeof(*t));
	if (!tags)
		return -ENOMEM;
	if (_bytes(sh) > SHAPES_MAX_BYTES)
		ch__shapes_free(sh);
	err = ch__watermark(st, "samples", &w);
	if (err)
		goto out;
	if (!ch__clamp(&from, &to) || (from < w && (from = w) >= to))
		none = true;
	else
		err = ch__series_filter(st, sel, &filter, &none);
	if (err || none)
		goto build;
	err = _window(st, type, w, from, to, filter.buf ? filter.buf : "", &inner);
	if (err)
		goto out;
	strbuf__printf(&inner, ") ANY LEFT JOIN (SELECT id AS series, " TAG_SQL " AS t FROM %s.series)"
		       " USING series", st->db);
	err = inner.oom ? -ENOMEM : _sums(st, inner.buf, false, &rows,
								  &nrows, &tmap);
	if (err == -EAGAIN)
		err = _sums(st, inner.buf, true, &rows, &nrows, &tmap);
	if (err || !nrows)
		goto build;
	err = _tags(st, type, out, &tmap, tags);
	/* The stacks the cache lacks, then the frames it has not read. */
	for (uint32_t i = 0; !err && i < nrows; i++) {
		if (u64map__get(&sh->sidx, rows[i].stack))
			continue;
		if (!want && !(want = malloc((size_t)nrows * sizeof(*want))))
			err = -ENOMEM;
		else
			want[nwant++] = rows[i].stack;
	}
	if (!err && nwant)
		err = _load_stacks(st, want, nwant);
	err = err ?: _load_frames(st);
	/* Sums by (stack, process key), as SQLite's store tags them. */
	for (uint32_t i = 0; !err && i < nrows; i++) {
		const uint64_t *s = u64map__get(&sh->sidx, rows[i].stack);
		const uint64_t *tg = u64map__get(&tmap, rows[i].tag);
		uint64_t *slot;

		if (!s) {
			pr_warn("store: clickhouse: stack %016llx is missing\n",
				(unsigned long long)rows[i].stack);
			err = -EIO;
		} else if (!tg || !*tg) {
			pr_warn("store: clickhouse: no series for process key %016llx\n",
				(unsigned long long)rows[i].tag);
			err = -EIO;
		} else if (!(slot = u64map__upsert(&agg, *s << 32 | (*tg - 1), NULL))) {
			err = -ENOMEM;
		} else {
			*slot += (uint64_t)rows[i].sum;
		}
	}
	if (!err && !(paths = malloc(((size_t)agg.count + 1) * sizeof(*paths))))
		err = -ENOMEM;
	for (uint32_t i = 0; !err && i < agg.cap; i++) {
		const struct u64slot *slot = &agg.slots[i];
		const struct ftag *tag;

		if (!slot->used || !slot->val)
			continue;
		tag = intern__key(tags, (uint32_t)slot->key, NULL);
		if (!any) {
			period = tag->period;
			any = true;
		} else if (tag->period != period) {
			mixed = true;
		}
	}
	for (uint32_t i = 0; !err && i < agg.cap; i++) {
		const struct u64slot *slot = &agg.slots[i];
		const struct ftag *tag;
		uint32_t s = (uint32_t)(slot->key >> 32);
		uint64_t v = slot->val;

		if (!slot->used || !v)
			continue;
		tag = intern__key(tags, (uint32_t)slot->key, NULL);
		if (mixed && __builtin_mul_overflow(v, tag->period, &v))
			v = UINT64_MAX;
		paths[npaths++] = (struct flametree_path){
			.comm = tag->comm, .n = sh->slen[s], .frames = sh->arena + sh->soff[s],
			.count = v,
		};
	}
build:
	if (!err)
		err = flametree__build(t, paths, npaths, sh->fkey, max_nodes);
	/* Only now are frames named: those of kept nodes. */
	if (!err && npaths) {
		struct u64map named = { 0 };

		for (uint32_t i = 1; !err && i < t->n; i++) {
			uint64_t *slot;
			bool added;
			int64_t f;

			if (t->nodes[i].depth < 2)
				continue;
			slot = u64map__upsert(&named, t->nodes[i].ref, &added);
			if (!slot) {
				err = -ENOMEM;
				break;
			}
			if (added) {
				f = _name(sh, out, t->nodes[i].ref);
				if (f < 0) {
					err = (int)f;
					break;
				}
				*slot = (uint64_t)f;
			}
			t->nodes[i].ref = (uint32_t)*slot;
		}
		u64map__free(&named);
	}
	if (!err && type == SAMPLE_CPU && any)
		out->period_ns = mixed ? 1 : period;
	if (err)
		flametree__release(t);
out:
	/* A failure part way through a load can leave the cache half made. */
	if (err)
		ch__shapes_free(sh);
	free(paths);
	free(rows);
	free(want);
	u64map__free(&tmap);
	u64map__free(&agg);
	intern__free(tags);
	strbuf__release(&filter);
	strbuf__release(&inner);
	return err;
}
