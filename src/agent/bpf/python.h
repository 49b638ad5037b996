/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the BPF Python walker needs to know about one CPython process,
 * shared between python.bpf.h and src/agent/interp/python.c. Fixed-width types only.
 */
#ifndef FW_AGENT_BPF_PYTHON_H
#define FW_AGENT_BPF_PYTHON_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Python frames per sample; deeper stacks keep their leaf-most frames. */
#define FW_MAX_PYFRAMES 64
/* Thread states searched for the sampled thread. */
#define FW_PY_MAX_THREADS 32

/* How the current frame hangs off the thread state. */
enum fw_py_layout {
	FW_PY_310 = 1,		/* tstate->frame: PyFrameObject, f_back, int f_lasti */
	FW_PY_311 = 2,		/* tstate->cframe->current_frame, is_entry marks C entry */
	FW_PY_312 = 3,		/* tstate->cframe->current_frame, shim frames owned by the C stack */
	FW_PY_313 = 4,		/* tstate->current_frame, shim frames owned by the C stack */
};

/*
 * Value of the py_procs map, keyed by thread group id. Addresses are in the
 * process; offsets come from CPython's headers (3.10-3.12) or from the
 * _Py_DebugOffsets table the runtime publishes (3.13+).
 */
/*
 * py_known's key: a code object user space has read (or tried to). A
 * sample with a Python frame whose code object is not there wakes the
 * agent at once instead of waiting for its 100 ms drain: short-lived code
 * objects (exec'd .pth lines, generated functions, a script's own at exit)
 * are read while they still exist. Old entries fall out (LRU).
 */
struct fw_py_code_key {
	__u32 pid;
	__u32 pad;
	__u64 code;
};

struct fw_py_proc {
	__u64 interp_head;	/* address of _PyRuntime.interpreters.head */
	__u64 code_type;	/* address of PyCode_Type: frames whose code is not one are skipped */
	__u32 layout;		/* enum fw_py_layout */
	__u16 interp_threads_head;
	__u16 tstate_next;
	__u16 tstate_thread_id;	/* pthread_self() of the thread: the TCB, = fsbase on x86-64 */
	__u16 tstate_frame;	/* frame, cframe or current_frame */
	__u16 cframe_current_frame;
	__u16 frame_code;	/* f_code / f_executable */
	__u16 frame_previous;	/* f_back / previous */
	__u16 frame_instr;	/* f_lasti (int) / prev_instr / instr_ptr */
	__u16 frame_owner;	/* 3.12+: owner (char) */
	__u16 frame_is_entry;	/* 3.11: is_entry (bool) */
	__u16 code_firstlineno;	/* co_firstlineno (int); 0: not checked */
	__u16 pad[3];
};

_Static_assert(sizeof(struct fw_py_proc) == 48, "fw_py_proc is shared with BPF");

/*
 * One Python frame in a sample: two addresses after the native ones, the
 * code object and the instruction (3.10: f_lasti, an index; later: the
 * instruction pointer), with FW_PY_ENTRY in the top byte of the second
 * when the frame is the first one run by its _PyEval_EvalFrameDefault call,
 * so user space can tell which Python frames belong to which native
 * interpreter frame.
 */
#define FW_PY_ENTRY (1ull << 56)
/*
 * Bits 48-55 of the second: the low byte of the code object's
 * co_firstlineno at the sample. User space names a code object by its
 * address, and CPython reuses the memory of code it frees (the modules run
 * at start-up) for code it makes next: an entry read when another code
 * object lived there is known stale by this byte, and read again.
 */
#define FW_PY_LINE_SHIFT 48
#define FW_PY_LINE_MASK (0xffull << FW_PY_LINE_SHIFT)
#define FW_PY_INSTR_MASK ((1ull << FW_PY_LINE_SHIFT) - 1)
/* The bytes of a code object BPF reads: ob_type and co_firstlineno lie within. */
#define FW_PY_CODE_READ 96

/* 3.12+: owner of a shim frame pushed by a C entry into the interpreter. */
#define FW_PY_FRAME_OWNED_BY_CSTACK 3

#endif
