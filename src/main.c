// SPDX-License-Identifier: Apache-2.0
/* flamewatch: command dispatch only; each subcommand lives in src/cmd/. */
#include <stdio.h>
#include <string.h>

#include "cmd/cmd.h"

#ifndef FW_VERSION
#define FW_VERSION "0.1.0-dev"
#endif

static const struct {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *help;
	int hidden;	/* run by other commands, not by people: left out of the list */
} _commands[] = {
	{ "run", cmd_run, "profile this host continuously and serve the UI on localhost" },
	{ "agent", cmd_agent, "profile this host continuously and ship to a server" },
	{ "record", cmd_record, "profile a command, processes or the whole host; write pprof or folded stacks" },
	{ "server", cmd_server, "store what agents send; serve the query API and /metrics" },
	{ "gpu", cmd_gpu, "read GPU metrics from NVML once (or N times) and print them" },
	{ "cuda", cmd_cuda, "run a CUDA command with GPU time profiling enabled" },
	{ "check", cmd_check, "say whether this kernel and these privileges can run the sampler" },
	{ "gpu-busy", cmd_gpu_busy, "GPU busy timeline from CUPTI PM sampling, for the agent", 1 },
};

static void _usage(FILE *out)
{
	fprintf(out, "usage: flamewatch <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(_commands) / sizeof(_commands[0]); i++)
		if (!_commands[i].hidden)
			fprintf(out, "  %-8s %s\n", _commands[i].name, _commands[i].help);
	fprintf(out, "\n`flamewatch <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
		_usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
		printf("flamewatch %s\n", FW_VERSION);
		return 0;
	}
	for (size_t i = 0; i < sizeof(_commands) / sizeof(_commands[0]); i++)
		if (!strcmp(argv[1], _commands[i].name))
			return _commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "flamewatch: unknown command '%s'\n\n", argv[1]);
	_usage(stderr);
	return 2;
}
