/*
 * Source of the fuzz seeds tests/fuzz/corpus/elf/tiny_go and tiny_go_stripped:
 * the byte patterns src/unwind/go_switch.c looks for in runtime.asmcgocall,
 * runtime.systemstack and runtime.cgocallback, and a Go 1.20-style .gopclntab
 * naming them, so that the fuzzer starts from inputs that reach the Go code
 * paths.
 *
 *   gcc -nostdlib -static -Wl,--build-id=none -Wl,-z,max-page-size=0x1000 \
 *       -Wl,-z,noseparate-code -o tiny_go tiny_go.s
 *   strip -s -o tiny_go_stripped tiny_go
 */
	.text
	.globl _start
_start:
"runtime.asmcgocall.abi0":
	.byte 0x48,0x89,0x7c,0x24,0x30, 0x48,0x8b,0x7f,0x08, 0x48,0x29,0xd7, 0x48,0x89,0x7c,0x24,0x28
	.byte 0x48,0x89,0xdf, 0xff,0xd0
	.byte 0x48,0xc7,0x44,0x24,0x30,0,0,0,0, 0x48,0x89,0x54,0x24,0x28, 0xff,0xd0, 0xc3
	.size "runtime.asmcgocall.abi0", .-"runtime.asmcgocall.abi0"
	.type "runtime.asmcgocall.abi0", @function
"runtime.systemstack.abi0":
	.byte 0xff,0xd7, 0x64,0x48,0x8b,0x04,0x25,0xf8,0xff,0xff,0xff, 0x48,0x8b,0x58,0x30
	.byte 0x48,0x8b,0x83,0xc0,0,0,0, 0x64,0x48,0x89,0x04,0x25,0xf8,0xff,0xff,0xff, 0x48,0x8b,0x60,0x38, 0xc3
	.size "runtime.systemstack.abi0", .-"runtime.systemstack.abi0"
	.type "runtime.systemstack.abi0", @function
"runtime.cgocallback.abi0":
	.byte 0x48,0x83,0xec,0x20, 0x48,0x89,0x6c,0x24,0x18
	.byte 0x48,0x8b,0x33, 0x48,0x8b,0x46,0x38, 0x48,0x89,0x04,0x24, 0x48,0x89,0x66,0x38
	.byte 0x48,0x8d,0x05,0,0,0,0, 0xff,0xd0, 0xc3
	.size "runtime.cgocallback.abi0", .-"runtime.cgocallback.abi0"
	.type "runtime.cgocallback.abi0", @function
text_end:

	.section .gopclntab,"a"
hdr:
	.long 0xfffffff1
	.byte 0, 0, 1, 8
	.quad 3			/* nfunc */
	.quad 0			/* nfiles */
	.quad 0			/* textStart: 0, so .text's address */
	.quad names - hdr	/* funcnameOffset */
	.quad 0, 0, 0		/* cu, filetab, pctab */
	.quad pcln - hdr	/* pclnOffset */
names:
	.asciz "runtime.asmcgocall"
	.asciz "runtime.systemstack"
	.asciz "runtime.cgocallback"
	.balign 4
pcln:
	.long 0, f1 - pcln
	.long "runtime.systemstack.abi0" - _start, f2 - pcln
	.long "runtime.cgocallback.abi0" - _start, f3 - pcln
	.long text_end - _start, 0
f1:	.long 0, 0
f2:	.long "runtime.systemstack.abi0" - _start, 19
f3:	.long "runtime.cgocallback.abi0" - _start, 39
