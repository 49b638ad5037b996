/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_UNWIND_GO_SWITCH_H
#define FW_UNWIND_GO_SWITCH_H

/*
 * Where a Go binary's runtime leaves the goroutine stack for the thread's
 * system (g0) stack to call C, and how to get back. Internal to
 * src/unwind: unwind_table__build() turns what this finds into
 * UNWIND_GO_ASMCGOCALL rows.
 */
#include <stddef.h>
#include <stdint.h>

#include <libelf.h>

#include "unwind/unwind_table.h"

/*
 * asmcgocall has two calls of C code (after the switch, and already on
 * g0), systemstack one call on g0, cgocallback one call of Go for C.
 */
#define GO_SWITCH_MAX 5

struct go_switch {
	uint32_t pc;		/* ELF virtual address of the call */
	uint8_t len;		/* its length in bytes */
	uint8_t type;		/* UNWIND_GO_* */
	int16_t off1;		/* asmcgocall: rsp + off1 holds the goroutine's g, or 0;
				   systemstack: offset of curg in m;
				   cgocallback: its g0 frame's CFA - g0.sched.sp */
	uint8_t off2;		/* asmcgocall: rsp + off2 holds stack.hi - sp, or sp when g is 0 */
};

/*
 * Finds the calls in runtime.asmcgocall, runtime.systemstack and
 * runtime.cgocallback of elf (borrowed) that switch stacks: by name in .symtab, or in
 * .gopclntab when the binary is stripped. Fills at most GO_SWITCH_MAX
 * entries of out and returns how many, 0 when elf is not a Go binary or
 * its runtime does not have a code layout we know.
 */
size_t go_switch__find(Elf *elf, struct go_switch *out);

#endif
