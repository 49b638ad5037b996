/* SPDX-License-Identifier: Apache-2.0 */
/*
 * HOST:PORT as the --listen options take it (the server's and the agent's
 * metrics server), and whether a host is reachable from this machine only.
 */
#ifndef FW_COMMON_HOSTPORT_H
#define FW_COMMON_HOSTPORT_H

#include <stddef.h>
#include <stdint.h>

/* Splits "HOST:PORT" ("[v6]:PORT" too). Returns 0 or -EINVAL. */
int hostport__parse(const char *listen, char *host, size_t host_len, uint16_t *port);
/* True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost). */
int hostport__is_loopback(const char *host);

#endif
