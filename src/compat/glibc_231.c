// SPDX-License-Identifier: Apache-2.0
/*
 * Linked into the release binary (make dist) only, so that a binary built on
 * Debian 12 (glibc 2.36) runs on glibc 2.31 (Ubuntu 20.04, Debian 11, RHEL 9
 * has 2.34). A static archive's undefined symbols bind to the newest version
 * libc.so.6 offers at link time; the link therefore wraps (--wrap) each
 * function whose default version is newer than 2.31 and calls the older
 * version of the same function, which glibc keeps exporting for old binaries.
 * dlopen and the pthread functions lived in libdl.so.2 and libpthread.so.0
 * before 2.34: the link names those (stubs on new glibc) so that old glibc
 * finds them there. Functions that glibc 2.31 lacks altogether (arc4random)
 * are implemented here.
 *
 * Every wrapped function's old version is the same code in new glibc (an
 * alias), except:
 *  - stat and friends: before 2.33 they were inline calls of __xstat(ver, ...),
 *    which is what we call.
 *  - __libc_start_main: since 2.34 crt1.o passes no init function and the new
 *    libc runs the executable's constructors itself; the old one expects an
 *    init function that does it (glibc's own __libc_csu_init, gone from new
 *    crt files). _fw_init (glibc_231_start.c, executables only) is that
 *    function; new glibc calls it too when one is given.
 *
 * This file also links into shared libraries (libflamewatch-cuda.so), built
 * with -fPIC; see GLIBC_COMPAT_SO_LDFLAGS in the Makefile.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>
#include <sys/stat.h>

#if defined(__x86_64__)
#define OLD "GLIBC_2.2.5"
#define OLD_2_3_3 "GLIBC_2.3.3"
#define OLD_2_12 "GLIBC_2.12"
#define OLD_2_4 "GLIBC_2.4"
#define STAT_VER 1	/* _STAT_VER_LINUX: the kernel's struct stat */
#elif defined(__aarch64__)
#define OLD "GLIBC_2.17"
#define OLD_2_3_3 "GLIBC_2.17"
#define OLD_2_12 "GLIBC_2.17"
#define OLD_2_4 "GLIBC_2.17"
#define STAT_VER 0
#else
#error "glibc 2.31 compatibility: unknown architecture"
#endif

/*
 * __wrap_NAME calls NAME@VER, the version that glibc >= 2.34 aliases to the
 * same code as its default (checked with objdump -T: same address).
 */
#define FW_OLD_V(ver, ret, name, params, args)					\
	ret fw_old_##name params;						\
	__asm__(".symver fw_old_" #name "," #name "@" ver);			\
	ret __wrap_##name params;						\
	ret __wrap_##name params { return fw_old_##name args; }
#define FW_OLD(ret, name, params, args) FW_OLD_V(OLD, ret, name, params, args)

FW_OLD(void *, dlopen, (const char *file, int mode), (file, mode))
FW_OLD(int, dlclose, (void *h), (h))
FW_OLD(char *, dlerror, (void), ())
FW_OLD(void *, dlsym, (void *h, const char *name), (h, name))
FW_OLD(int, pthread_create, (pthread_t *t, const pthread_attr_t *a, void *(*fn)(void *), void *arg),
       (t, a, fn, arg))
FW_OLD(int, pthread_join, (pthread_t t, void **ret), (t, ret))
FW_OLD(int, pthread_mutex_trylock, (pthread_mutex_t *m), (m))
FW_OLD(int, pthread_mutexattr_destroy, (pthread_mutexattr_t *a), (a))
FW_OLD(int, pthread_mutexattr_init, (pthread_mutexattr_t *a), (a))
FW_OLD(int, pthread_mutexattr_settype, (pthread_mutexattr_t *a, int type), (a, type))
FW_OLD(int, pthread_rwlock_destroy, (pthread_rwlock_t *l), (l))
FW_OLD(int, pthread_rwlock_init, (pthread_rwlock_t *l, const pthread_rwlockattr_t *a), (l, a))
FW_OLD(int, pthread_rwlock_rdlock, (pthread_rwlock_t *l), (l))
FW_OLD(int, pthread_rwlock_tryrdlock, (pthread_rwlock_t *l), (l))
FW_OLD(int, pthread_rwlock_unlock, (pthread_rwlock_t *l), (l))
FW_OLD(int, pthread_rwlock_wrlock, (pthread_rwlock_t *l), (l))
/* OpenSSL's thread-local state and its error strings' dladdr. */
FW_OLD(int, dladdr, (const void *addr, Dl_info *info), (addr, info))
FW_OLD(int, pthread_once, (pthread_once_t *o, void (*fn)(void)), (o, fn))
FW_OLD(int, pthread_key_create, (pthread_key_t *k, void (*dtor)(void *)), (k, dtor))
FW_OLD(int, pthread_key_delete, (pthread_key_t k), (k))
FW_OLD(void *, pthread_getspecific, (pthread_key_t k), (k))
FW_OLD(int, pthread_setspecific, (pthread_key_t k, const void *v), (k, v))
/* libflamewatch-cuda.so's control thread and its lock. */
FW_OLD(int, pthread_attr_setstacksize, (pthread_attr_t *a, size_t n), (a, n))
FW_OLD(int, pthread_sigmask, (int how, const sigset_t *set, sigset_t *old), (how, set, old))
FW_OLD(int, pthread_mutex_timedlock, (pthread_mutex_t *m, const struct timespec *t), (m, t))
FW_OLD_V(OLD_2_12, int, pthread_setname_np, (pthread_t t, const char *name), (t, name))
FW_OLD_V(OLD_2_3_3, int, pthread_condattr_setclock, (pthread_condattr_t *a, clockid_t c), (a, c))

/* stat family: the pre-2.33 ABI. */
int fw_old_xstat(int ver, const char *path, struct stat *st);
int fw_old_lxstat(int ver, const char *path, struct stat *st);
int fw_old_fxstat(int ver, int fd, struct stat *st);
int fw_old_fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
__asm__(".symver fw_old_xstat,__xstat@" OLD);
__asm__(".symver fw_old_lxstat,__lxstat@" OLD);
__asm__(".symver fw_old_fxstat,__fxstat@" OLD);
__asm__(".symver fw_old_fxstatat,__fxstatat@" OLD_2_4);

int __wrap_stat(const char *path, struct stat *st);
int __wrap_stat64(const char *path, struct stat *st);
int __wrap_lstat(const char *path, struct stat *st);
int __wrap_lstat64(const char *path, struct stat *st);
int __wrap_fstat(int fd, struct stat *st);
int __wrap_fstat64(int fd, struct stat *st);
int __wrap_stat(const char *path, struct stat *st) { return fw_old_xstat(STAT_VER, path, st); }
int __wrap_stat64(const char *path, struct stat *st) { return fw_old_xstat(STAT_VER, path, st); }
int __wrap_lstat(const char *path, struct stat *st) { return fw_old_lxstat(STAT_VER, path, st); }
int __wrap_lstat64(const char *path, struct stat *st) { return fw_old_lxstat(STAT_VER, path, st); }
int __wrap_fstat(int fd, struct stat *st) { return fw_old_fxstat(STAT_VER, fd, st); }
int __wrap_fstat64(int fd, struct stat *st) { return fw_old_fxstat(STAT_VER, fd, st); }
int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags);
int __wrap_fstatat64(int dirfd, const char *path, struct stat *st, int flags);
int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
	return fw_old_fxstatat(STAT_VER, dirfd, path, st, flags);
}
int __wrap_fstatat64(int dirfd, const char *path, struct stat *st, int flags)
{
	return fw_old_fxstatat(STAT_VER, dirfd, path, st, flags);
}

/* arc4random (libevent's random numbers): getrandom exists since glibc 2.25. */
void __wrap_arc4random_buf(void *buf, size_t n);
uint32_t __wrap_arc4random(void);

void __wrap_arc4random_buf(void *buf, size_t n)
{
	unsigned char *p = buf;

	while (n) {
		ssize_t got = getrandom(p, n, 0);

		if (got < 0) {
			if (errno == EINTR)
				continue;
			abort();	/* what glibc's own arc4random does: no randomness, no run */
		}
		p += got;
		n -= got;
	}
}

uint32_t __wrap_arc4random(void)
{
	uint32_t v;

	__wrap_arc4random_buf(&v, sizeof(v));
	return v;
}
