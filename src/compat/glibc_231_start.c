// SPDX-License-Identifier: Apache-2.0
/*
 * The executable's half of the glibc 2.31 compatibility layer (see
 * glibc_231.c): __libc_start_main@2.34 is new, the old version is the same
 * code but expects crt1.o to pass an init function that runs the
 * executable's constructors, which crt1.o of glibc >= 2.34 no longer does.
 */
#include <stddef.h>

#if defined(__x86_64__)
#define OLD "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define OLD "GLIBC_2.17"
#else
#error "glibc 2.31 compatibility: unknown architecture"
#endif

/* Program start-up: see the comment at the top. */
typedef void (*fw_init_fn)(int, char **, char **);
extern fw_init_fn __init_array_start[] __attribute__((visibility("hidden")));
extern fw_init_fn __init_array_end[] __attribute__((visibility("hidden")));
extern void _init(void);

static void _fw_init(int argc, char **argv, char **envp)
{
	_init();
	for (fw_init_fn *f = __init_array_start; f < __init_array_end; f++)
		(*f)(argc, argv, envp);
}

typedef int (*fw_main_fn)(int, char **, char **);
int fw_old_libc_start_main(fw_main_fn main, int argc, char **argv, fw_init_fn init,
			   void (*fini)(void), void (*rtld_fini)(void), void *stack_end);
__asm__(".symver fw_old_libc_start_main,__libc_start_main@" OLD);

int __wrap___libc_start_main(fw_main_fn main, int argc, char **argv, fw_init_fn init,
			     void (*fini)(void), void (*rtld_fini)(void), void *stack_end);
int __wrap___libc_start_main(fw_main_fn main, int argc, char **argv, fw_init_fn init,
			     void (*fini)(void), void (*rtld_fini)(void), void *stack_end)
{
	return fw_old_libc_start_main(main, argc, argv, init ? init : _fw_init, fini, rtld_fini,
				      stack_end);
}
