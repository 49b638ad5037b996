// SPDX-License-Identifier: Apache-2.0
/*
 * Layout of .gopclntab since Go 1.18 (runtime/symtab.go, pcHeader): a
 * header of eight-byte words after {u32 magic, u8 pad, u8 pad, u8 minLC,
 * u8 ptrSize}:
 *
 *   8 nfunc   24 textStart   32 funcnameOffset   64 pclnOffset
 *
 * At pclnOffset, nfunc + 1 pairs {u32 entryOff, u32 funcOff} sorted by
 * entryOff (the last pair only ends the text); at pclnOffset + funcOff a
 * _func that starts {u32 entryOff, s32 nameOff}; names are NUL-terminated
 * at funcnameOffset + nameOff. Entries are relative to textStart, which
 * is the start of .text; a position-independent binary leaves textStart 0
 * in the file, for a relocation to fill.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gelf.h>

#include "common/elf_sections.h"
#include "common/log.h"
#include "gopclntab.h"

#define _HEADER_SIZE 72
#define _NAME_MAX 4096		/* longer names (deep generics) are cut there */

struct gopclntab {
	int fd;
	uint64_t off, size;	/* of the section in the file */
	uint64_t nfunc, text, names, pcln;
	char name[_NAME_MAX];
};

static uint32_t _le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t _le64(const uint8_t *p)
{
	return (uint64_t)_le32(p) | (uint64_t)_le32(p + 4) << 32;
}

/* Reads len bytes at off within the section; false when out of it or short. */
static bool _read(const struct gopclntab *t, uint64_t off, void *buf, size_t len)
{
	if (off > t->size || len > t->size - off)
		return false;
	return pread(t->fd, buf, len, (off_t)(t->off + off)) == (ssize_t)len;
}

int gopclntab__open(int fd, Elf *e, struct gopclntab **out)
{
	uint8_t h[_HEADER_SIZE];
	struct gopclntab *t;
	GElf_Shdr sh, text;
	uint32_t magic;
	int err = 0;

	*out = NULL;
	if (!elf_sections__find(e, ".gopclntab", &sh) || sh.sh_type != SHT_PROGBITS ||
	    (sh.sh_flags & SHF_COMPRESSED) || sh.sh_size < _HEADER_SIZE)
		return -ENOENT;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->fd = fd;
	t->off = sh.sh_offset;
	t->size = sh.sh_size;
	if (!_read(t, 0, h, sizeof(h))) {
		err = -EIO;
		goto out;
	}
	magic = _le32(h);
	if ((magic != 0xfffffff0 && magic != 0xfffffff1) || h[4] || h[5] || h[7] != 8) {
		pr_debug("gopclntab: magic %#x, pointer size %u: not a layout we read\n", magic, h[7]);
		err = -ENOENT;
		goto out;
	}
	t->nfunc = _le64(h + 8);
	t->text = _le64(h + 24);
	t->names = _le64(h + 32);
	t->pcln = _le64(h + 64);
	if (!t->text && elf_sections__find(e, ".text", &text))
		t->text = text.sh_addr;
	if (t->pcln > t->size || t->names > t->size || !t->nfunc ||
	    t->nfunc >= (t->size - t->pcln) / 8) {
		err = -ENOENT;
		goto out;
	}
out:
	if (err) {
		free(t);
		return err;
	}
	*out = t;
	return 0;
}

/* The entry of functab slot i (0..nfunc), relative to textStart. */
static bool _entry(const struct gopclntab *t, uint64_t i, uint32_t *entry, uint32_t *func)
{
	uint8_t pair[8];

	if (!_read(t, t->pcln + 8 * i, pair, sizeof(pair)))
		return false;
	*entry = _le32(pair);
	*func = _le32(pair + 4);
	return true;
}

int gopclntab__lookup(struct gopclntab *t, uint64_t vaddr, const char **name, uint64_t *offset)
{
	uint64_t lo = 0, hi = t->nfunc, rel, at;
	uint32_t entry, func, end, unused;
	uint8_t f[8];
	int32_t name_off;
	size_t got;
	ssize_t r;

	if (vaddr < t->text || vaddr - t->text > UINT32_MAX)
		return -ENOENT;
	rel = vaddr - t->text;
	/* The last slot whose entry is <= rel. */
	while (lo < hi) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (!_entry(t, mid, &entry, &func))
			return -EIO;
		if (entry <= rel)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return -ENOENT;
	if (!_entry(t, lo - 1, &entry, &func) || !_entry(t, lo, &end, &unused))
		return -EIO;
	if (rel >= end)
		return -ENOENT;
	if (!_read(t, t->pcln + (uint64_t)func, f, sizeof(f)))
		return -EIO;
	name_off = (int32_t)_le32(f + 4);
	if (name_off < 0)
		return -ENOENT;
	at = t->names + (uint64_t)name_off;
	if (at >= t->size)
		return -EIO;
	/* Most names are short: a second, longer read only for those that are not. */
	for (size_t want = 256;; want = sizeof(t->name) - 1) {
		got = t->size - at < want ? t->size - at : want;
		r = pread(t->fd, t->name, got, (off_t)(t->off + at));
		if (r <= 0)
			return -EIO;
		t->name[r] = '\0';
		if (strlen(t->name) < (size_t)r || (size_t)r < want || want == sizeof(t->name) - 1)
			break;
	}
	if (!t->name[0])
		return -ENOENT;
	*name = t->name;
	*offset = rel - entry;
	return 0;
}

void gopclntab__close(struct gopclntab *t)
{
	free(t);
}
