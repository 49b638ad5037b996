// SPDX-License-Identifier: Apache-2.0
/* HOST:PORT as --listen takes it, and whether a host is this machine only. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>

#include "common/hostport.h"

int hostport__parse(const char *listen, char *host, size_t host_len, uint16_t *port)
{
	const char *colon;
	size_t hl;
	char *end;
	unsigned long p;

	if (listen[0] == '[') {
		const char *close = strchr(listen, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		hl = close - listen - 1;
		listen++;
		colon = close + 1;
	} else {
		colon = strrchr(listen, ':');
		if (!colon)
			return -EINVAL;
		hl = colon - listen;
	}
	if (hl == 0 || hl >= host_len)
		return -EINVAL;
	memcpy(host, listen, hl);
	host[hl] = '\0';
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || *end || !colon[1] || p > 65535)
		return -EINVAL;
	*port = p;
	return 0;
}

int hostport__is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!strcmp(host, "localhost"))
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return 0;
}
