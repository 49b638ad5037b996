// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <gelf.h>
#include <libelf.h>
#include <string.h>
#include <sys/uio.h>

#include "agent/interp/hotspot_vmstructs.h"

/* The exported symbols, in this order. */
enum {
	S_STRUCTS, S_S_STRIDE, S_S_TYPE, S_S_FIELD, S_S_STATIC, S_S_OFFSET, S_S_ADDRESS,
	S_TYPES, S_T_STRIDE, S_T_TYPE, S_T_SIZE,
	S_INTS, S_I_STRIDE, S_I_NAME, S_I_VALUE,
	S_MAX,
};

static const char *const sym_names[S_MAX] = {
	[S_STRUCTS] = "gHotSpotVMStructs",
	[S_S_STRIDE] = "gHotSpotVMStructEntryArrayStride",
	[S_S_TYPE] = "gHotSpotVMStructEntryTypeNameOffset",
	[S_S_FIELD] = "gHotSpotVMStructEntryFieldNameOffset",
	[S_S_STATIC] = "gHotSpotVMStructEntryIsStaticOffset",
	[S_S_OFFSET] = "gHotSpotVMStructEntryOffsetOffset",
	[S_S_ADDRESS] = "gHotSpotVMStructEntryAddressOffset",
	[S_TYPES] = "gHotSpotVMTypes",
	[S_T_STRIDE] = "gHotSpotVMTypeEntryArrayStride",
	[S_T_TYPE] = "gHotSpotVMTypeEntryTypeNameOffset",
	[S_T_SIZE] = "gHotSpotVMTypeEntrySizeOffset",
	[S_INTS] = "gHotSpotVMIntConstants",
	[S_I_STRIDE] = "gHotSpotVMIntConstantEntryArrayStride",
	[S_I_NAME] = "gHotSpotVMIntConstantEntryNameOffset",
	[S_I_VALUE] = "gHotSpotVMIntConstantEntryValueOffset",
};

/* Entries per table at most: JDK 17 has about 2,000 fields. */
#define MAX_ENTRIES 20000
#define NAME_MAX_LEN 128

int vmstructs__read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)addr, len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

/* A C string of the process; a string cut by the end of its mapping still reads. */
static int _read_name(pid_t pid, uint64_t addr, char *buf)
{
	struct iovec local = { buf, NAME_MAX_LEN - 1 }, remote = { (void *)addr, NAME_MAX_LEN - 1 };
	ssize_t n;

	if (!addr)
		return -ENOENT;
	n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
	if (n <= 0)
		return n < 0 ? -errno : -EFAULT;
	buf[n] = '\0';
	return strnlen(buf, n) < (size_t)n ? 0 : -EFAULT;
}

static int _find_syms(int fd, uint64_t out[S_MAX])
{
	Elf_Scn *scn = NULL;
	unsigned found = 0;
	Elf *elf;

	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (!elf)
		return -ENOEXEC;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !sh.sh_entsize)
			continue;
		data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			const char *name;

			if (!gelf_getsym(data, i, &sym) || sym.st_shndx == SHN_UNDEF)
				continue;
			name = elf_strptr(elf, sh.sh_link, sym.st_name);
			if (!name || strncmp(name, "gHotSpotVM", 10))
				continue;
			for (int s = 0; s < S_MAX; s++) {
				if (!(found & (1u << s)) && strcmp(name, sym_names[s]) == 0) {
					out[s] = sym.st_value;
					found |= 1u << s;
				}
			}
		}
	}
	elf_end(elf);
	return found == (1u << S_MAX) - 1 ? 0 : -ENOENT;
}

static int _read_u64(pid_t pid, uint64_t addr, uint64_t *v)
{
	return vmstructs__read_mem(pid, addr, v, sizeof(*v));
}

static int _fields(pid_t pid, const uint64_t *v, struct vm_want *w)
{
	uint8_t e[256];
	char type[NAME_MAX_LEN], field[NAME_MAX_LEN];
	uint64_t stride = v[S_S_STRIDE];

	if (!stride || stride > sizeof(e) || v[S_S_TYPE] > stride - 8 || v[S_S_FIELD] > stride - 8 ||
	    v[S_S_STATIC] > stride - 4 || v[S_S_OFFSET] > stride - 8 || v[S_S_ADDRESS] > stride - 8)
		return -EINVAL;
	for (uint64_t i = 0; i < MAX_ENTRIES; i++) {
		uint64_t tp, fp, off, addr;
		int32_t is_static;

		if (vmstructs__read_mem(pid, v[S_STRUCTS] + i * stride, e, stride))
			return -EFAULT;
		memcpy(&tp, e + v[S_S_TYPE], 8);
		if (!tp)
			return 0;	/* the table ends with an empty entry */
		memcpy(&fp, e + v[S_S_FIELD], 8);
		if (_read_name(pid, tp, type) || _read_name(pid, fp, field))
			continue;
		memcpy(&is_static, e + v[S_S_STATIC], 4);
		memcpy(&off, e + v[S_S_OFFSET], 8);
		memcpy(&addr, e + v[S_S_ADDRESS], 8);
		for (size_t k = 0; k < w->nfields; k++) {
			struct vm_field *f = &w->fields[k];

			if (f->found || strcmp(f->type, type) || strcmp(f->field, field))
				continue;
			f->is_static = is_static != 0;
			f->value = is_static ? addr : off;
			f->found = true;
		}
	}
	return -E2BIG;
}

static int _types(pid_t pid, const uint64_t *v, struct vm_want *w)
{
	uint8_t e[256];
	char type[NAME_MAX_LEN];
	uint64_t stride = v[S_T_STRIDE];

	if (!stride || stride > sizeof(e) || v[S_T_TYPE] > stride - 8 || v[S_T_SIZE] > stride - 8)
		return -EINVAL;
	for (uint64_t i = 0; i < MAX_ENTRIES; i++) {
		uint64_t tp, size;

		if (vmstructs__read_mem(pid, v[S_TYPES] + i * stride, e, stride))
			return -EFAULT;
		memcpy(&tp, e + v[S_T_TYPE], 8);
		if (!tp)
			return 0;
		if (_read_name(pid, tp, type))
			continue;
		memcpy(&size, e + v[S_T_SIZE], 8);
		for (size_t k = 0; k < w->ntypes; k++) {
			if (!w->types[k].found && strcmp(w->types[k].type, type) == 0) {
				w->types[k].size = size;
				w->types[k].found = true;
			}
		}
	}
	return -E2BIG;
}

static int _consts(pid_t pid, const uint64_t *v, struct vm_want *w)
{
	uint8_t e[256];
	char name[NAME_MAX_LEN];
	uint64_t stride = v[S_I_STRIDE];

	if (!stride || stride > sizeof(e) || v[S_I_NAME] > stride - 8 || v[S_I_VALUE] > stride - 4)
		return -EINVAL;
	for (uint64_t i = 0; i < MAX_ENTRIES; i++) {
		uint64_t np;
		int32_t value;

		if (vmstructs__read_mem(pid, v[S_INTS] + i * stride, e, stride))
			return -EFAULT;
		memcpy(&np, e + v[S_I_NAME], 8);
		if (!np)
			return 0;
		if (_read_name(pid, np, name))
			continue;
		memcpy(&value, e + v[S_I_VALUE], 4);
		for (size_t k = 0; k < w->nconsts; k++) {
			if (!w->consts[k].found && strcmp(w->consts[k].name, name) == 0) {
				w->consts[k].value = value;
				w->consts[k].found = true;
			}
		}
	}
	return -E2BIG;
}

int vmstructs__read(pid_t pid, int fd, uint64_t bias, struct vm_want *w)
{
	uint64_t sym[S_MAX], v[S_MAX];
	int err;

	if (fd < 0)
		return -EBADF;
	err = _find_syms(fd, sym);
	if (err)
		return err;
	/* Each symbol holds a value: a table's address, or an entry's stride or offset. */
	for (int s = 0; s < S_MAX; s++) {
		err = _read_u64(pid, sym[s] + bias, &v[s]);
		if (err)
			return err;
	}
	/* The entry layouts are set while the JVM starts (VMStructs::init). */
	if (!v[S_STRUCTS] || !v[S_TYPES] || !v[S_INTS] || !v[S_S_STRIDE] || !v[S_T_STRIDE] ||
	    !v[S_I_STRIDE])
		return -EAGAIN;
	err = _fields(pid, v, w);
	if (!err)
		err = _types(pid, v, w);
	if (!err)
		err = _consts(pid, v, w);
	return err;
}
