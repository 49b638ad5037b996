// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for pprof__read(): the body of POST /api/v1/ingest/pprof,
 * gzipped or not. What is accepted must be a batch whose ids all resolve;
 * what is refused must leave the batch empty and say why. `make fuzz` builds
 * and runs it; `make test` replays tests/fuzz/corpus/pprof.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "format/pprof_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "job" };
	static const char *const values[] = { "fuzz" };
	/* Small enough that every limit is reachable by the fuzzer. */
	struct pprof_read_limits lim = {
		.max_decompressed = 1 << 20,
		.max_unpacked = 16 << 20,
		.max_samples = 5000,
		.max_stack_depth = 64,
	};
	struct batch *b = batch__new(10000000);
	char err[256] = "";
	uint32_t nstacks, nseries;

	if (!b)
		abort();
	if (pprof__read(data, size, &lim, names, values, 1, 1, b, err, sizeof(err))) {
		if (b->nsamples || !err[0])
			abort();
		batch__free(b);
		return 0;
	}
	nstacks = profile__nstacks(b->dict);
	nseries = batch__nseries(b);
	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *s = &b->samples[i];
		uint32_t n;

		if (s->stack >= nstacks || s->series >= nseries || s->value < 0)
			abort();
		profile__stack(b->dict, s->stack, &n);
		if (n > lim.max_stack_depth * 64)	/* inlined frames expand a location */
			abort();
		if (!batch__series_label(b, s->series, "comm"))
			abort();
	}
	if (b->nsamples > lim.max_samples)
		abort();
	batch__free(b);
	return 0;
}
