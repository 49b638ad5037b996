// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for folded__read(): the body of POST
 * /api/v1/ingest/folded. Accepted text gives one sample per stack line with
 * a positive value and resolvable ids; refused text leaves nothing behind.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/profile.h"
#include "format/folded_read.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const names[] = { "job" };
	static const char *const values[] = { "fuzz" };
	struct batch *b = batch__new(10000000);
	char err[256] = "";

	if (!b)
		abort();
	if (folded__read((const char *)data, size, names, values, 1, 1, b, err, sizeof(err))) {
		if (b->nsamples || !err[0])
			abort();
	} else {
		for (uint32_t i = 0; i < b->nsamples; i++) {
			const struct batch_sample *s = &b->samples[i];
			uint32_t n;

			if (s->stack >= profile__nstacks(b->dict) || s->value <= 0 ||
			    s->series >= batch__nseries(b))
				abort();
			profile__stack(b->dict, s->stack, &n);
			if (n == 0 || n > FOLDED_MAX_DEPTH)
				abort();
		}
	}
	batch__free(b);
	return 0;
}
