/*
 * nvml_memory: what each step of the agent's NVML use adds to a process's
 * memory. It loads libnvidia-ml.so.1, initialises it, opens every GPU and
 * makes each query the collector makes, one at a time, printing after each
 * the RSS, its anonymous and file-backed parts, the thread count and
 * whether libcuda is mapped; at the end, the mappings that hold the most.
 *
 *     gcc -O2 -Isrc bench/gpu/nvml_memory.c -ldl -o build/nvml_memory
 *     build/nvml_memory [--no-thp] [libnvidia-ml.so.1]
 *
 * --no-thp: prctl(PR_SET_THP_DISABLE) first, to see what transparent huge
 * pages add to NVML's anonymous memory.
 *
 * Built here and carried to the GPU node (it links only glibc).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/nvml_api.h"

static void _status(const char *key, char *out, size_t len)
{
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	snprintf(out, len, "?");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key))) {
			char *v = line + strlen(key);

			v += strspn(v, " \t");
			v[strcspn(v, " \n")] = '\0';
			snprintf(out, len, "%s", v);
		}
	fclose(f);
}

static int _libcuda_mapped(void)
{
	char line[512];
	int yes = 0;
	FILE *f = fopen("/proc/self/maps", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "libcuda.so"))
			yes = 1;
	fclose(f);
	return yes;
}

static void _step(const char *what)
{
	char rss[32], anon[32], file[32], threads[32];

	_status("VmRSS:", rss, sizeof(rss));
	_status("RssAnon:", anon, sizeof(anon));
	_status("RssFile:", file, sizeof(file));
	_status("Threads:", threads, sizeof(threads));
	printf("%-40s %8s %8s %8s %7s %7s\n", what, rss, anon, file, threads,
	       _libcuda_mapped() ? "yes" : "no");
	fflush(stdout);
}

/* The mappings holding over 256 kB of RSS, from /proc/self/smaps, with
 * their address range and how much of that is in huge pages. */
static void _top_mappings(void)
{
	char line[512], name[640] = "";
	FILE *f = fopen("/proc/self/smaps", "r");
	unsigned long kb, rss = 0;

	if (!f)
		return;
	printf("\nmappings over 256 kB RSS:\n");
	while (fgets(line, sizeof(line), f)) {
		unsigned long a, b;
		int n = 0;

		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &a, &b, &n) == 2 && n) {
			line[strcspn(line, "\n")] = '\0';
			snprintf(name, sizeof(name), "%lx-%lx %s", a, b,
				 line[n] ? line + n : "[anon]");
			rss = 0;
		} else if (sscanf(line, "Rss: %lu kB", &kb) == 1) {
			rss = kb;
		} else if (sscanf(line, "AnonHugePages: %lu kB", &kb) == 1 && rss > 256) {
			printf("  %8lu kB (huge %lu)  %s\n", rss, kb, name);
		}
	}
	fclose(f);
}

#define SYM(name) dlsym(lib, name)

int main(int argc, char **argv)
{
	int no_thp = argc > 1 && !strcmp(argv[1], "--no-thp");
	const char *path = argc > 1 + no_thp ? argv[1 + no_thp] : "libnvidia-ml.so.1";
	nvmlReturn_t (*init)(void), (*count)(unsigned int *);
	nvmlDeviceGetHandleByIndex_fn handle;
	nvmlDeviceGetString_fn get_name;
	nvmlDeviceGetUtilizationRates_fn util;
	nvmlDeviceGetSamples_fn samples;
	nvmlDeviceGetMemoryInfo_v2_fn mem;
	nvmlDeviceGetClock_fn clock, max_clock;
	nvmlDeviceGetUInt_fn power, limit, reasons_u;
	nvmlDeviceGetULL_fn reasons, energy;
	nvmlDeviceGetTemperature_fn temp;
	nvmlDeviceGetTemperatureThreshold_fn thresh;
	nvmlDeviceGetFieldValues_fn fields;
	nvmlDeviceGetMigMode_fn mig;
	nvmlDeviceGetProcessUtilization_fn putil;
	nvmlDeviceGetRunningProcesses_fn procs;
	nvmlDevice_t dev[64];
	unsigned int n = 0, v, v2;
	void *lib;

	printf("%-40s %8s %8s %8s %7s %7s\n", "after", "RSS kB", "anon", "file", "threads",
	       "libcuda");
	if (no_thp && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0))
		perror("nvml_memory: PR_SET_THP_DISABLE");
	_step("start");
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "nvml_memory: %s\n", dlerror());
		return 1;
	}
	_step("dlopen");
	init = SYM("nvmlInit_v2");
	count = SYM("nvmlDeviceGetCount_v2");
	handle = SYM("nvmlDeviceGetHandleByIndex_v2");
	get_name = SYM("nvmlDeviceGetName");
	if (!init || !count || !handle || init() != NVML_SUCCESS) {
		fprintf(stderr, "nvml_memory: nvmlInit failed\n");
		return 1;
	}
	_step("nvmlInit_v2");
	if (count(&n) != NVML_SUCCESS || n > 64)
		return 1;
	for (unsigned int i = 0; i < n; i++) {
		char name[96];

		handle(i, &dev[i]);
		get_name(dev[i], name, sizeof(name));
	}
	_step("count, handles, names");

	util = SYM("nvmlDeviceGetUtilizationRates");
	samples = SYM("nvmlDeviceGetSamples");
	mem = SYM("nvmlDeviceGetMemoryInfo_v2");
	clock = SYM("nvmlDeviceGetClockInfo");
	max_clock = SYM("nvmlDeviceGetMaxClockInfo");
	power = SYM("nvmlDeviceGetPowerUsage");
	limit = SYM("nvmlDeviceGetEnforcedPowerLimit");
	reasons = SYM("nvmlDeviceGetCurrentClocksEventReasons");
	energy = SYM("nvmlDeviceGetTotalEnergyConsumption");
	temp = SYM("nvmlDeviceGetTemperature");
	thresh = SYM("nvmlDeviceGetTemperatureThreshold");
	fields = SYM("nvmlDeviceGetFieldValues");
	mig = SYM("nvmlDeviceGetMigMode");
	putil = SYM("nvmlDeviceGetProcessUtilization");
	procs = SYM("nvmlDeviceGetComputeRunningProcesses_v3");
	(void)reasons_u;

	for (int round = 0; round < 2; round++) {
		char label[64];

		for (unsigned int i = 0; i < n; i++) {
			nvmlUtilization_t u;
			nvmlMemory_v2_t m = { .version = nvmlMemory_v2 };
			nvmlValueType_t t;
			nvmlSample_t s[128];
			unsigned int ns = 128;
			unsigned long long ull;
			nvmlFieldValue_t fv[3] = { { .fieldId = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION },
						   { .fieldId = NVML_FI_DEV_PCIE_COUNT_TX_BYTES },
						   { .fieldId = NVML_FI_DEV_PCIE_COUNT_RX_BYTES } };
			nvmlProcessUtilizationSample_t ps[64];
			nvmlProcessInfo_t pi[64];
			unsigned int np = 64;

			if (util)
				util(dev[i], &u);
			if (round == 0 && i == n - 1)
				_step("  UtilizationRates");
			if (samples)
				samples(dev[i], NVML_GPU_UTILIZATION_SAMPLES, 0, &t, &ns, s);
			if (round == 0 && i == n - 1)
				_step("  Samples");
			if (mem)
				mem(dev[i], &m);
			if (clock) {
				clock(dev[i], NVML_CLOCK_SM, &v);
				clock(dev[i], NVML_CLOCK_MEM, &v);
			}
			if (max_clock)
				max_clock(dev[i], NVML_CLOCK_SM, &v);
			if (round == 0 && i == n - 1)
				_step("  MemoryInfo_v2, clocks");
			if (power)
				power(dev[i], &v);
			if (limit)
				limit(dev[i], &v);
			if (reasons)
				reasons(dev[i], &ull);
			if (energy)
				energy(dev[i], &ull);
			if (round == 0 && i == n - 1)
				_step("  power, limit, reasons, energy");
			if (temp)
				temp(dev[i], NVML_TEMPERATURE_GPU, &v);
			if (thresh)
				thresh(dev[i], NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &v);
			if (mig)
				mig(dev[i], &v, &v2);
			if (round == 0 && i == n - 1)
				_step("  temperature, MIG mode");
			if (fields)
				fields(dev[i], 3, fv);
			if (round == 0 && i == n - 1)
				_step("  FieldValues (energy, PCIe)");
			np = 64;
			if (putil)
				putil(dev[i], ps, &np, 0);
			if (round == 0 && i == n - 1)
				_step("  ProcessUtilization");
			np = 64;
			if (procs)
				procs(dev[i], &np, pi);
			if (round == 0 && i == n - 1)
				_step("  ComputeRunningProcesses_v3");
		}
		snprintf(label, sizeof(label), "round %d done", round + 1);
		_step(label);
	}
	_top_mappings();
	return 0;
}
