/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_CMD_CMD_H
#define FW_CMD_CMD_H

/* Subcommands: each parses its own arguments (argv[0] is the subcommand) and returns an exit status. */
int cmd_record(int argc, char **argv);

/* Checks shared by every subcommand that loads BPF; print an actionable error and return -1 on failure. */
int cmd__check_bpf_privileges(void);
int cmd__check_btf(void);

#endif
