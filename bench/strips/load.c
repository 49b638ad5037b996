// SPDX-License-Identifier: Apache-2.0
/* Loads and attaches every program of a BPF object, then sleeps argv[2] seconds. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <bpf/libbpf.h>

int main(int argc, char **argv)
{
	struct bpf_object *obj;
	struct bpf_program *p;

	if (argc < 3)
		return 2;
	obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj))
		return 1;
	bpf_object__for_each_program(p, obj)
		if (!bpf_program__attach(p))
			return 1;
	sleep(atoi(argv[2]));
	bpf_object__close(obj);
	return 0;
}
