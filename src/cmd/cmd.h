/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_CMD_CMD_H
#define FW_CMD_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <getopt.h>

/* Subcommands: each parses its own arguments (argv[0] is the subcommand) and returns an exit status. */
int cmd_record(int argc, char **argv);
int cmd_server(int argc, char **argv);
int cmd_agent(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_gpu(int argc, char **argv);
int cmd_cuda(int argc, char **argv);
int cmd_check(int argc, char **argv);
/* Hidden: the agent's child process for the PM sampling busy timeline. */
int cmd_gpu_busy(int argc, char **argv);

/* The server options shared by `server` and `run`. */
struct cmd_server_opts {
	const char *listen;
	const char *data_dir;
	const char *store_uri;
	const char *write_token, *read_token;
	int64_t retention_ns;
	size_t max_body;
	size_t max_connections;		/* 0: the server's default */
	size_t max_body_memory;		/* 0: 4 x max_body */
	size_t max_session_memory;	/* 0: the server's default */
	unsigned int hz;	/* the agents' sampling rate, for CPU time in exports */
	bool insecure;
	const char *tls_cert, *tls_key;	/* serve HTTPS */
};

struct event_base;
struct server;
struct store;

extern const struct option cmd__server_longopts[];
void cmd__server_defaults(struct cmd_server_opts *o, const char *data_dir);
/* Applies one getopt result; returns 0, -1 on a bad value (message printed), 1 if not ours. */
int cmd__parse_server_opt(struct cmd_server_opts *o, int c, const char *arg);
/* Opens the store and starts the HTTP server on base. Prints errors. */
int cmd__serve(const struct cmd_server_opts *o, struct event_base *base, struct store **store,
	       struct server **server);
/* The host part of --listen, for printing URLs. Borrowed, static. */
const char *cmd__listen_host(const struct cmd_server_opts *o);
/* "https" with --tls-cert, else "http". */
const char *cmd__scheme(const struct cmd_server_opts *o);
/*
 * Runs base until SIGINT/SIGTERM, applying retention every minute. On return
 * both signals are ignored, so that the caller's stop runs to its end.
 */
int cmd__run_loop(struct event_base *base, struct store *store, int64_t retention_ns);

/* Checks shared by every subcommand that loads BPF; print an actionable error and return -1 on failure. */
int cmd__check_bpf_privileges(void);
int cmd__check_btf(void);
/* All of the above, plus the bpf() and perf_event_open() syscalls, the BPF program and map
 * types, helpers and tracepoints the sampler uses: prints each missing one, returns -1 if any. */
int cmd__check_kernel(void);

#endif
