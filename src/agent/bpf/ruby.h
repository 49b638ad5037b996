/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the BPF Ruby walker needs to know about one CRuby process, shared
 * between ruby.bpf.h and src/agent/interp/ruby.c. Fixed-width types only.
 *
 * Ruby frames travel in the sample's interpreter slots, like Python's (a
 * process runs one interpreter or the other): two words per frame, leaf
 * first, counted by fw_sample.pystack_len.
 */
#ifndef FW_AGENT_BPF_RUBY_H
#define FW_AGENT_BPF_RUBY_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* How the thread's ruby_current_ec TLS variable is found from its thread pointer. */
enum fw_rb_tls {
	FW_RB_TLS_DTV = 1,	/* *(dtv[modid].pointer + tls_off): general-dynamic TLS */
	FW_RB_TLS_TP = 2,	/* *(tp + tls_off): initial-exec or local-exec TLS */
};

/*
 * Value of the rb_procs map, keyed by thread group id. Offsets are those of
 * CRuby's internal headers (vm_core.h) for the process's version, checked
 * against the running interpreter (docs/ruby.md).
 */
struct fw_rb_proc {
	__s64 tls_off;		/* ruby_current_ec in the TLS block, or from the thread pointer */
	__u32 tls_mode;		/* enum fw_rb_tls */
	__u32 tls_modid;	/* FW_RB_TLS_DTV: the TLS module id of the binary holding it */
	__u16 ec_vm_stack;	/* rb_execution_context_t.vm_stack (VALUE *) */
	__u16 ec_vm_stack_size;	/* .vm_stack_size, in words */
	__u16 ec_cfp;		/* .cfp: the current control frame */
	__u16 cfp_size;		/* sizeof(rb_control_frame_t) */
	__u16 cfp_pc;
	__u16 cfp_iseq;
	__u16 cfp_ep;		/* ep[0] holds the frame's flags */
	__u16 pad[5];
};

_Static_assert(sizeof(struct fw_rb_proc) == 40, "fw_rb_proc is shared with BPF");

/*
 * One Ruby frame in a sample: the iseq and the pc, with FW_RB_FINISH in the
 * top byte of the second word when the frame was pushed by a C call into
 * the VM (VM_FRAME_FLAG_FINISH): it is the outermost Ruby frame of its
 * rb_vm_exec() call, so user space can tell which Ruby frames belong to
 * which native VM frame.
 */
#define FW_RB_FINISH (1ull << 56)
#define FW_RB_PC_MASK ((1ull << 56) - 1)

/* ep[0] bit of a frame entered from C (vm_core.h, VM_FRAME_FLAG_FINISH). */
#define FW_RB_FRAME_FLAG_FINISH 0x20

#endif
