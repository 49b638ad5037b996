// SPDX-License-Identifier: Apache-2.0
/* The collection options that `agent` and `run` share: one table, one parser. */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/continuous.h"
#include "cmd/collect_opts.h"
#include "common/timeparse.h"

enum {
	OPT_JAVA_PERFMAP = COLLECT_OPTS_FIRST, OPT_GPU_INTERVAL, OPT_GPU_PCIE, OPT_GPU_PROCESS,
	OPT_GPU_PROCESS_QUERY, OPT_NO_CPU_STRIPS, OPT_OFFCPU, OPT_NO_OFFCPU, OPT_OFFCPU_MIN,
	OPT_GPU_BUSY,
};

/* In the order of the help block; an option without help is not listed. */
static const struct {
	struct option opt;
	const char *help;
} _opts[] = {
	{ { "java-perfmap-interval", required_argument, NULL, OPT_JAVA_PERFMAP },
"  --java-perfmap-interval SEC  run `jcmd PID Compiler.perfmap` for sampled JVMs\n"
"                       this often, naming JIT-compiled Java frames (default off)\n" },
	{ { "gpu-interval", required_argument, NULL, OPT_GPU_INTERVAL },
"  --gpu-interval DUR   how often GPU metrics are read from NVML (default 1s,\n"
"                       at least 100ms; off: none)\n" },
	{ { "gpu-pcie-interval", required_argument, NULL, OPT_GPU_PCIE },
"  --gpu-pcie-interval DUR     how often the PCIe byte counters are read: costly\n"
"                       on some drivers; the rate covers the whole time (default 5s)\n" },
	{ { "gpu-process-interval", required_argument, NULL, OPT_GPU_PROCESS },
"  --gpu-process-interval DUR  how often per-process GPU utilisation is read: the\n"
"                       driver's latest sample per process (default 1s; none\n"
"                       while no process is on it)\n" },
	{ { "gpu-process-query", required_argument, NULL, OPT_GPU_PROCESS_QUERY },
"  --gpu-process-query shared|always  shared (default): the driver's per-process\n"
"                       query only while 2+ processes share a GPU; one alone gets\n"
"                       the GPU's utilisation. always: the query for one too\n" },
	{ { "gpu-busy", required_argument, NULL, OPT_GPU_BUSY },
"  --gpu-busy auto|on|off  each GPU's busy timeline from its own performance\n"
"                       monitors (CUPTI PM sampling, in a child process),\n"
"                       complete where CUDA records are duty-cycled. The\n"
"                       monitors serve one tool at a time: auto (default)\n"
"                       samples them only while a process alone on a GPU\n"
"                       does not have every CUDA record collected, and gives\n"
"                       them up while DCGM's host engine runs; on keeps them;\n"
"                       off leaves them to others (Nsight Compute)\n" },
	{ { "no-cpu-strips", no_argument, NULL, OPT_NO_CPU_STRIPS },
"  --no-cpu-strips      do not record when each CPU was busy (sched_switch)\n" },
	{ { "no-off-cpu", no_argument, NULL, OPT_NO_OFFCPU },
"  --no-off-cpu         do not record where threads block (off-CPU time, on by\n"
"                       default on Linux 6.1+; --off-cpu turns it back on). Stacks\n"
"                       are walked where a block is likely to reach --off-cpu-min;\n"
"                       the time of the others is kept under one frame,\n"
"                       [off-CPU: stack not taken]\n" },
	/* The default now; kept, unlisted, for command lines written when it was not. */
	{ { "off-cpu", no_argument, NULL, OPT_OFFCPU },
	  NULL },
	{ { "off-cpu-min", required_argument, NULL, OPT_OFFCPU_MIN },
"  --off-cpu-min DUR    shortest block recorded as off-CPU time (default 1ms,\n"
"                       at most 1s)\n" },
};

#define NOPTS (sizeof(_opts) / sizeof(_opts[0]))

int collect_opts__longopts(struct option *out, size_t cap, const struct option *a,
			   const struct option *b)
{
	size_t n = 0;

	for (; a->name; a++) {
		if (n == cap)
			return -ENOSPC;
		out[n++] = *a;
	}
	for (; b && b->name; b++) {
		if (n == cap)
			return -ENOSPC;
		out[n++] = *b;
	}
	if (cap - n < NOPTS + 1)
		return -ENOSPC;
	for (size_t i = 0; i < NOPTS; i++)
		out[n++] = _opts[i].opt;
	out[n] = (struct option){ 0 };
	return 0;
}

static int _parse_java_interval(const char *s, int64_t *ns)
{
	char *end;
	unsigned long v;

	if (duration__parse(s, ns) == 0)
		return *ns >= 1000000000LL ? 0 : -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || v < 1 || v > 86400)
		return -EINVAL;
	*ns = (int64_t)v * 1000000000LL;
	return 0;
}

int collect_opts__parse_java_interval(const char *arg, uint64_t *ns)
{
	int64_t v;

	if (_parse_java_interval(arg, &v)) {
		fprintf(stderr, "flamewatch: error: --java-perfmap-interval: '%s' is not "
			"a duration of 1s or more\n", arg);
		return -EINVAL;
	}
	*ns = v;
	return 0;
}

int collect_opts__parse_offcpu_min(const char *arg, uint64_t *ns)
{
	int64_t v;

	if (duration__parse(arg, &v) || v < COLLECT_OFFCPU_MIN_NS_LO || v > COLLECT_OFFCPU_MIN_NS_HI) {
		fprintf(stderr, "flamewatch: error: --off-cpu-min: '%s' is not a duration "
			"from 1ms to 1s\n", arg);
		return -EINVAL;
	}
	*ns = v;
	return 0;
}

int collect_opts__parse(struct continuous_opts *co, int c, const char *arg)
{
	switch (c) {
	case OPT_JAVA_PERFMAP:
		return collect_opts__parse_java_interval(arg, &co->java_perfmap_interval_ns);
	case OPT_GPU_INTERVAL:
		return continuous__parse_gpu_interval(arg, &co->gpu_interval_ns) ? -EINVAL : 0;
	case OPT_GPU_PCIE:
		return continuous__parse_gpu_costly_interval("gpu-pcie-interval", arg,
							     &co->gpu_pcie_interval_ns) ? -EINVAL : 0;
	case OPT_GPU_PROCESS:
		return continuous__parse_gpu_costly_interval("gpu-process-interval", arg,
							     &co->gpu_process_interval_ns) ? -EINVAL : 0;
	case OPT_GPU_PROCESS_QUERY:
		return continuous__parse_gpu_process_query("gpu-process-query", arg,
							    &co->gpu_process_query_always) ? -EINVAL : 0;
	case OPT_GPU_BUSY:
		if (!strcmp(arg, "auto")) {
			co->gpu_busy = CONTINUOUS_GPU_BUSY_AUTO;
		} else if (!strcmp(arg, "on")) {
			co->gpu_busy = CONTINUOUS_GPU_BUSY_ON;
		} else if (!strcmp(arg, "off")) {
			co->gpu_busy = CONTINUOUS_GPU_BUSY_OFF;
		} else {
			fprintf(stderr, "flamewatch: error: --gpu-busy: '%s' is not auto, on or off\n",
				arg);
			return -EINVAL;
		}
		return 0;
	case OPT_NO_CPU_STRIPS:
		co->no_cpu_strips = 1;
		return 0;
	case OPT_OFFCPU:
		co->no_offcpu = 0;
		return 0;
	case OPT_NO_OFFCPU:
		co->no_offcpu = 1;
		return 0;
	case OPT_OFFCPU_MIN:
		return collect_opts__parse_offcpu_min(arg, &co->offcpu_min_ns);
	}
	return 1;
}

void collect_opts__usage(FILE *out)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (_opts[i].help)
			fputs(_opts[i].help, out);
}
