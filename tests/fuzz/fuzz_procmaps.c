// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for the /proc/PID/maps reader: each input line goes to
 * procmaps__parse_line(), and the whole input, as a file, to
 * procmaps__read(), whose result must be sorted and findable.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "agent/procmaps.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *copy = malloc(size + 1), *line, *save = NULL, path[64];
	struct proc_maps *maps;
	struct proc_mapping m;
	int fd;

	if (!copy)
		abort();
	memcpy(copy, data, size);
	copy[size] = '\0';
	for (line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (procmaps__parse_line(line, &m) == 0 && !m.path)
			abort();
	free(copy);

	fd = memfd_create("maps", 0);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	maps = procmaps__read(path);
	if (maps) {
		for (size_t i = 0; i < maps->n; i++) {
			if (i && maps->m[i - 1].start > maps->m[i].start)
				abort();
			if (maps->m[i].start < maps->m[i].end &&
			    !procmaps__find(maps, maps->m[i].start))
				abort();
		}
		free(maps);
	}
	close(fd);
	return 0;
}
