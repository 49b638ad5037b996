// SPDX-License-Identifier: Apache-2.0
/*
 * runtime.asmcgocall (src/runtime/asm_amd64.s) runs C code on the thread's
 * g0 stack. Before it calls the C function it aligns the g0 stack pointer
 * and leaves two words there, at fixed offsets from the rsp of the call:
 *
 *   from a goroutine:   g        (the goroutine's g)
 *                       depth    (g.stack.hi - the goroutine's sp at entry)
 *   already on g0:      0        (no g was saved)
 *                       sp       (the sp at entry itself)
 *
 * The runtime saves a depth rather than the sp because a callback into Go
 * may move the goroutine's stack while C runs; g.stack.hi is the second
 * word of g (offset 8) in every Go release. asmcgocall has a zero-size
 * frame, so the sp at entry points at its return address into
 * runtime.cgocall, and rbp still holds cgocall's frame pointer.
 *
 * The offsets are read from the instructions that store the words (in Go
 * 1.19 these are 0x30(%rsp) and 0x28(%rsp) in both paths), so a release
 * that moves them keeps working as long as it stores them the same way:
 *
 *   48 89 7c 24 G    mov %rdi,G(%rsp)     save g
 *   48 8b 7f 08      mov 0x8(%rdi),%rdi   g.stack.hi
 *   48 29 d7         sub %rdx,%rdi        - sp at entry
 *   48 89 7c 24 D    mov %rdi,D(%rsp)     save depth
 *   ...              (argument moves)
 *   ff d0            call *%rax
 *
 *   48 c7 44 24 G 00 00 00 00   movq $0x0,G(%rsp)    no g
 *   48 89 54 24 D               mov %rdx,D(%rsp)     save sp at entry
 *   ...
 *   ff d0                       call *%rax
 *
 * A displacement of 0 drops the disp8 byte (mod 00 instead of 01).
 *
 * runtime.systemstack runs a function on g0 the same way, having saved the
 * goroutine's sp (pointing at systemstack's return address) in
 * curg.sched.sp. The code after its call finds it back, and so does BPF:
 *
 *   ff d7                          call *%rdi
 *   64 48 8b 04 25 f8 ff ff ff     mov %fs:-8,%rax         g0 (TLS slot of g)
 *   48 8b 58 30                    mov 0x30(%rax),%rbx     g0.m
 *   48 8b 83 C C C C               mov C(%rbx),%rax        m.curg
 *   64 48 89 04 25 f8 ff ff ff     mov %rax,%fs:-8
 *   48 8b 60 38                    mov 0x38(%rax),%rsp     curg.sched.sp
 *
 * The TLS slot, g.m and g.sched.sp are fixed by the match (BPF knows them);
 * only C, which moves whenever struct m changes, goes into the row.
 *
 * runtime.cgocallback, C calling Go, opens its frame on the g0 (C) stack,
 * saves that sp in g0.sched.sp, and calls cgocallbackg on the goroutine's
 * stack; BPF goes back to the C frames through g0.sched.sp:
 *
 *   48 83 ec F                 sub $F,%rsp             (at entry)
 *   48 89 6c 24 F-8            mov %rbp,F-8(%rsp)      the caller's rbp at CFA - 16
 *   ...
 *   48 8b 33                   mov (%rbx),%rsi         m.g0
 *   48 8b 46 38                mov 0x38(%rsi),%rax
 *   48 89 04 24                mov %rax,(%rsp)
 *   48 89 66 38                mov %rsp,0x38(%rsi)     g0.sched.sp = rsp
 *   ...
 *   48 8d 05 R R R R           lea cgocallbackg(%rip),%rax
 *   ff d0                      call *%rax
 *
 * The row holds F + 8, the frame's CFA relative to its sp.
 */
#include <stdbool.h>
#include <string.h>

#include <gelf.h>

#include "common/elf_sections.h"
#include "common/log.h"
#include "unwind/go_switch.h"

#define _REG_RDX 2
#define _REG_RDI 7
#define _CALL_WINDOW 16		/* bytes from the last store to the call */
#define _MAX_FUNC_BYTES 1024	/* asmcgocall is 174 bytes in Go 1.19 */

static const char *const _asmcgocall[] = { "runtime.asmcgocall.abi0", "runtime.asmcgocall" };
static const char *const _systemstack[] = { "runtime.systemstack.abi0", "runtime.systemstack" };
static const char *const _cgocallback[] = { "runtime.cgocallback.abi0", "runtime.cgocallback" };

/*
 * An instruction `opcode modrm(reg, [rsp + disp]) [imm]` with a 64-bit
 * operand at p: its length (0: no match) and its displacement.
 */
static size_t _rsp_operand(const uint8_t *p, size_t n, uint8_t opcode, uint8_t reg,
			   uint8_t *disp)
{
	if (n >= 5 && p[0] == 0x48 && p[1] == opcode && p[2] == (0x44 | reg << 3) && p[3] == 0x24) {
		*disp = p[4];
		return 5;
	}
	if (n >= 4 && p[0] == 0x48 && p[1] == opcode && p[2] == (0x04 | reg << 3) && p[3] == 0x24) {
		*disp = 0;
		return 4;
	}
	return 0;
}

static size_t _find_call_rax(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i + 1 < n && i < _CALL_WINDOW; i++)
		if (p[i] == 0xff && p[i + 1] == 0xd0)
			return i;
	return SIZE_MAX;
}

/* Matches one of the two store sequences at p; returns the bytes it covers, 0 if none. */
static size_t _match(const uint8_t *p, size_t n, uint8_t *g_off, uint8_t *depth_off)
{
	static const uint8_t hi_minus_sp[] = { 0x48, 0x8b, 0x7f, 0x08, 0x48, 0x29, 0xd7 };
	size_t a, b;

	/* From a goroutine. */
	a = _rsp_operand(p, n, 0x89, _REG_RDI, g_off);
	if (a && n - a >= sizeof(hi_minus_sp) && !memcmp(p + a, hi_minus_sp, sizeof(hi_minus_sp))) {
		a += sizeof(hi_minus_sp);
		b = _rsp_operand(p + a, n - a, 0x89, _REG_RDI, depth_off);
		if (b)
			return a + b;
	}
	/* Already on g0: movq $0, G(%rsp) has a 4-byte immediate of zero. */
	a = _rsp_operand(p, n, 0xc7, 0, g_off);
	if (a && n - a >= 4 && !memcmp(p + a, "\0\0\0\0", 4)) {
		a += 4;
		b = _rsp_operand(p + a, n - a, 0x89, _REG_RDX, depth_off);
		if (b)
			return a + b;
	}
	return 0;
}

/* The bytes of [lo, hi) in the executable section holding them, or NULL. */
static const uint8_t *_code(Elf *elf, uint64_t lo, uint64_t hi)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr shdr;

	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *d;

		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_PROGBITS ||
		    !(shdr.sh_flags & SHF_EXECINSTR))
			continue;
		if (lo < shdr.sh_addr || hi > shdr.sh_addr + shdr.sh_size || lo >= hi)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d || !d->d_buf || d->d_size < hi - shdr.sh_addr)
			return NULL;
		return (const uint8_t *)d->d_buf + (lo - shdr.sh_addr);
	}
	return NULL;
}

/* [lo, hi) of the function called name, from .symtab. */
static bool _symtab_func(Elf *elf, const char *name, uint64_t *lo, uint64_t *hi)
{
	Elf_Scn *scn = NULL;
	GElf_Shdr shdr;

	while ((scn = elf_nextscn(elf, scn))) {
		Elf_Data *d;
		size_t n;

		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_SYMTAB || !shdr.sh_entsize)
			continue;
		d = elf_getdata(scn, NULL);
		if (!d)
			continue;
		n = shdr.sh_size / shdr.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			const char *s;
			GElf_Sym sym;

			if (!gelf_getsym(d, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
			    !sym.st_value)
				continue;
			s = elf_strptr(elf, shdr.sh_link, sym.st_name);
			if (s && !strcmp(s, name)) {
				*lo = sym.st_value;
				*hi = sym.st_value + (sym.st_size ? sym.st_size : _MAX_FUNC_BYTES);
				return true;
			}
		}
	}
	return false;
}

static uint32_t _le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t _le64(const uint8_t *p)
{
	return (uint64_t)_le32(p) | (uint64_t)_le32(p + 4) << 32;
}

/*
 * [lo, hi) of the nth function called name, from .gopclntab, which stripped Go
 * binaries keep (the runtime needs it). Go 1.18 and later (magic
 * 0xfffffff0, 0xfffffff1): a header of eight-byte words (nfunc at 8,
 * textStart at 24, funcnameOffset at 32, pclnOffset at 64), then at
 * pclnOffset nfunc + 1 pairs {entryOff, funcOff} of u32, sorted by entry;
 * the _func at pclnOffset + funcOff starts {u32 entryOff, s32 nameOff}.
 * Older layouts are not read: those binaries are found by .symtab or not at all.
 */
static bool _pclntab_func(Elf *elf, const char *name, unsigned int nth, uint64_t *lo,
			  uint64_t *hi)
{
	uint64_t nfunc, text, names, pcln;
	size_t size, namelen = strlen(name);
	const uint8_t *p;
	GElf_Shdr shdr, tshdr;
	Elf_Data *d;
	Elf_Scn *scn;
	uint32_t magic;

	scn = elf_sections__find(elf, ".gopclntab", &shdr);
	if (!scn || shdr.sh_type != SHT_PROGBITS)
		return false;
	d = elf_getdata(scn, NULL);
	if (!d || !d->d_buf || d->d_size < 72)
		return false;
	p = d->d_buf;
	size = d->d_size;
	magic = _le32(p);
	if ((magic != 0xfffffff0 && magic != 0xfffffff1) || p[7] != 8)
		return false;
	nfunc = _le64(p + 8);
	text = _le64(p + 24);
	names = _le64(p + 32);
	pcln = _le64(p + 64);
	/* A position-independent binary leaves textStart to a relocation: .text is where it points. */
	if (!text && elf_sections__find(elf, ".text", &tshdr))
		text = tshdr.sh_addr;
	if (pcln > size || names > size || nfunc >= (size - pcln) / 8)
		return false;
	for (uint64_t i = 0; i < nfunc; i++) {
		const uint8_t *ft = p + pcln + 8 * i;
		uint64_t func = pcln + _le32(ft + 4), at;
		int32_t name_off;

		if (func > size - 8)
			return false;
		name_off = (int32_t)_le32(p + func + 4);
		if (name_off < 0)
			continue;
		at = names + (uint64_t)name_off;
		if (at > size || size - at <= namelen || memcmp(p + at, name, namelen + 1))
			continue;
		if (nth--)
			continue;
		*lo = text + _le32(ft);
		*hi = text + _le32(ft + 8);	/* the next entry (the last one ends the text) */
		return *hi > *lo;
	}
	return false;
}

/* The calls of C code in asmcgocall's code [lo, lo + n). */
static size_t _scan_asmcgocall(const uint8_t *code, size_t n, uint64_t lo, struct go_switch *out,
			       size_t max)
{
	size_t found = 0;

	for (size_t i = 0; i < n && found < max; i++) {
		uint8_t g_off, depth_off;
		size_t m = _match(code + i, n - i, &g_off, &depth_off), c;

		if (!m)
			continue;
		c = _find_call_rax(code + i + m, n - i - m);
		if (c == SIZE_MAX)
			continue;
		out[found++] = (struct go_switch){
			.pc = (uint32_t)(lo + i + m + c),
			.len = 2,
			.type = UNWIND_GO_ASMCGOCALL,
			.off1 = g_off,
			.off2 = depth_off,
		};
		i += m + c + 1;
	}
	return found;
}

/* The call on g0 in systemstack's code [lo, lo + n). */
static size_t _scan_systemstack(const uint8_t *code, size_t n, uint64_t lo, struct go_switch *out,
				size_t max)
{
	static const uint8_t call_tls[] = { 0xff, 0xd7, 0x64, 0x48, 0x8b, 0x04, 0x25,
					    0xf8, 0xff, 0xff, 0xff, 0x48, 0x8b, 0x58, 0x30 };
	static const uint8_t set_tls_sp[] = { 0x64, 0x48, 0x89, 0x04, 0x25, 0xf8, 0xff,
					      0xff, 0xff, 0x48, 0x8b, 0x60, 0x38 };
	const size_t need = sizeof(call_tls) + 7 + sizeof(set_tls_sp);

	for (size_t i = 0; max && i + need <= n; i++) {
		const uint8_t *p = code + i + sizeof(call_tls);
		uint32_t curg;
		size_t k;

		if (memcmp(code + i, call_tls, sizeof(call_tls)) || p[0] != 0x48 || p[1] != 0x8b)
			continue;
		if (p[2] == 0x83) {		/* disp32 */
			curg = (uint32_t)p[3] | (uint32_t)p[4] << 8 | (uint32_t)p[5] << 16 |
			       (uint32_t)p[6] << 24;
			k = 7;
		} else if (p[2] == 0x43) {	/* disp8 */
			curg = p[3];
			k = 4;
		} else {
			continue;
		}
		if (curg > INT16_MAX || memcmp(p + k, set_tls_sp, sizeof(set_tls_sp)))
			continue;
		out[0] = (struct go_switch){
			.pc = (uint32_t)(lo + i),
			.len = 2,
			.type = UNWIND_GO_SYSTEMSTACK,
			.off1 = (int16_t)curg,
		};
		return 1;
	}
	return 0;
}

/* The call of cgocallbackg in cgocallback's code [lo, lo + n). */
static size_t _scan_cgocallback(const uint8_t *code, size_t n, uint64_t lo, struct go_switch *out,
				size_t max)
{
	static const uint8_t save_sp[] = { 0x48, 0x8b, 0x33, 0x48, 0x8b, 0x46, 0x38, 0x48,
					   0x89, 0x04, 0x24, 0x48, 0x89, 0x66, 0x38 };
	uint8_t frame;
	size_t i;

	if (!max || n < 9 || code[0] != 0x48 || code[1] != 0x83 || code[2] != 0xec)
		return 0;
	frame = code[3];
	if (frame < 8 || frame > 0x70 || code[4] != 0x48 || code[5] != 0x89 || code[6] != 0x6c ||
	    code[7] != 0x24 || code[8] != frame - 8)
		return 0;
	for (i = 9; i + sizeof(save_sp) <= n; i++)
		if (!memcmp(code + i, save_sp, sizeof(save_sp)))
			break;
	for (i += sizeof(save_sp); i + 9 <= n; i++) {
		if (code[i] != 0x48 || code[i + 1] != 0x8d || code[i + 2] != 0x05 ||
		    code[i + 7] != 0xff || code[i + 8] != 0xd0)
			continue;
		out[0] = (struct go_switch){
			.pc = (uint32_t)(lo + i + 7),
			.len = 2,
			.type = UNWIND_GO_CGOCALLBACK,
			.off1 = (int16_t)(frame + 8),
		};
		return 1;
	}
	return 0;
}

struct _target {
	const char *const *names;
	size_t nnames;
	size_t (*scan)(const uint8_t *code, size_t n, uint64_t lo, struct go_switch *out,
		       size_t max);
};

/*
 * Every Go binary since 1.13 has .go.buildinfo, stripped and PIE ones
 * too; .gopclntab and the build id note are checked as well. Looking for
 * the runtime's functions by name in anything else read its whole .symtab
 * and .strtab for nothing (flamewatch's own binary among them), while it
 * built that binary's table.
 */
static bool _is_go(Elf *elf)
{
	GElf_Shdr shdr;

	return elf_sections__find(elf, ".go.buildinfo", &shdr) ||
	       elf_sections__find(elf, ".gopclntab", &shdr) ||
	       elf_sections__find(elf, ".note.go.buildid", &shdr);
}

size_t go_switch__find(Elf *elf, struct go_switch *out)
{
	static const struct _target targets[] = {
		{ _asmcgocall, sizeof(_asmcgocall) / sizeof(_asmcgocall[0]), _scan_asmcgocall },
		{ _systemstack, sizeof(_systemstack) / sizeof(_systemstack[0]), _scan_systemstack },
		{ _cgocallback, sizeof(_cgocallback) / sizeof(_cgocallback[0]), _scan_cgocallback },
	};
	size_t total = 0;

	if (!_is_go(elf))
		return 0;
	for (size_t t = 0; t < sizeof(targets) / sizeof(targets[0]); t++) {
		size_t found = 0;

		for (size_t k = 0; k < targets[t].nnames && !found; k++) {
			const char *name = targets[t].names[k];

			/*
			 * .gopclntab names an assembly function and its ABI
			 * wrapper alike: try every function of that name.
			 */
			for (unsigned int nth = 0; nth < 4 && !found; nth++) {
				uint64_t lo, hi;
				const uint8_t *code;
				bool named = nth == 0 && _symtab_func(elf, name, &lo, &hi);

				if (!named && !_pclntab_func(elf, name, nth, &lo, &hi))
					break;
				if (hi - lo > _MAX_FUNC_BYTES)
					hi = lo + _MAX_FUNC_BYTES;
				code = _code(elf, lo, hi);
				if (!code || hi > UINT32_MAX)
					continue;
				found = targets[t].scan(code, hi - lo, lo, out + total,
							GO_SWITCH_MAX - total);
				if (found)
					pr_debug("unwind: %s: %zu calls on the g0 stack\n", name, found);
			}
		}
		total += found;
	}
	return total;
}
