// SPDX-License-Identifier: Apache-2.0
/*
 * flamewatch cuda: runs a command with GPU time profiling enabled, i.e.
 * with CUDA_INJECTION64_PATH naming libflamewatch-cuda.so. The command
 * replaces this process (exec), so its exit status, signals and terminal
 * are the command's own.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/cuda/cuda_tracker.h"
#include "cmd/cmd.h"

#define LIB_NAME "libflamewatch-cuda.so"

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch cuda [--lib PATH] [--] CMD ARGS...\n"
"\n"
"Runs CMD with GPU time profiling enabled: CUDA loads " LIB_NAME "\n"
"(through CUDA_INJECTION64_PATH), whose probes a running `flamewatch agent` or\n"
"`flamewatch run` attaches to. Without an agent the library stays idle.\n"
"\n"
"  --lib PATH   the library to inject (default: next to the flamewatch binary,\n"
"               else ../lib/flamewatch/ beside it)\n"
"\n"
"Environment read by the library:\n"
"  FLAMEWATCH_CUPTI_PATH          CUPTI to load (default libcupti.so.13, libcupti.so)\n"
"  FLAMEWATCH_CUDA_DUTY_CYCLE     collect one window in N (default 30; 1 = always)\n"
"  FLAMEWATCH_CUDA_WINDOW_MS      window length (default 10)\n"
"  FLAMEWATCH_CUDA_LAUNCH_BUDGET  launches reported per second of collecting window before\n"
"                                 sampling (default 500)\n"
"  FLAMEWATCH_CUDA_SUMMARY        collect without an agent; append totals to this file at exit\n");
}

int cmd_cuda(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "lib", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	char lib[PATH_MAX];
	const char *lib_arg = NULL, *old;
	int c;

	/* '+': options end at the command's name, as with `--`. */
	while ((c = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
		switch (c) {
		case 'l':
			lib_arg = optarg;
			break;
		case 'h':
			_usage(stdout);
			return 0;
		default:
			_usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		fprintf(stderr, "flamewatch cuda: no command given\n\n");
		_usage(stderr);
		return 2;
	}
	if (lib_arg) {
		if (!realpath(lib_arg, lib)) {
			fprintf(stderr, "flamewatch cuda: --lib %s: %s\n", lib_arg, strerror(errno));
			return 2;
		}
	} else if (cuda_tracker__default_lib(lib, sizeof(lib))) {
		fprintf(stderr, "flamewatch cuda: cannot find " LIB_NAME " next to this binary; "
				"give its path with --lib\n");
		return 2;
	}
	old = getenv("CUDA_INJECTION64_PATH");
	if (old && *old && strcmp(old, lib))
		fprintf(stderr, "flamewatch cuda: replacing CUDA_INJECTION64_PATH=%s\n", old);
	if (setenv("CUDA_INJECTION64_PATH", lib, 1)) {
		fprintf(stderr, "flamewatch cuda: %s\n", strerror(errno));
		return 2;
	}
	execvp(argv[optind], argv + optind);
	c = errno;
	fprintf(stderr, "flamewatch cuda: cannot run %s: %s\n", argv[optind], strerror(c));
	return c == ENOENT ? 127 : 126;
}
