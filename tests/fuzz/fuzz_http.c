// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for the HTTP side of the server: each input is the raw
 * bytes a client sends (request line, headers, body; several pipelined
 * requests are fine). It goes over a loopback TCP connection to a real
 * server (evhttp, the routes, a SQLite store in a temporary directory) and
 * the answer is read until the server closes the connection. Whatever the
 * bytes, the server must answer or close, never crash or leak, and keep
 * serving: /healthz is asked after every input.
 *
 * Seed inputs in tests/fuzz/corpus/http are plain text requests.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/log.h"
#include "server/server.h"
#include "store/store.h"

static struct event_base *base;
static struct server *srv;
static uint16_t port;
static char dir[] = "/tmp/fw-fuzz-http-XXXXXX";

static int _rm(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	return remove(path);
}

static void _cleanup(void)
{
	nftw(dir, _rm, 16, FTW_DEPTH | FTW_PHYS);
}

static void _setup(void)
{
	char err[256];
	struct server_opts o = { .listen = "127.0.0.1:0", .max_body = 1 << 20, .default_hz = 19 };
	struct store *st;

	log__set_level(LOG_WARN);
	if (!mkdtemp(dir))
		abort();
	atexit(_cleanup);
	st = store__open(dir, err, sizeof(err));
	base = event_base_new();
	if (!st || !base)
		abort();
	srv = server__new(base, st, &o, err, sizeof(err));
	if (!srv)
		abort();
	port = server__port(srv);
}

/* Sends data, half-closes, and runs the loop until the server closes. */
static size_t _exchange(const void *data, size_t size, char *reply, size_t reply_len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	size_t got = 0, sent = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || (connect(fd, (void *)&a, sizeof(a)) && errno != EINPROGRESS))
		abort();
	for (int spins = 0; spins < 100000; spins++) {
		char buf[4096];
		ssize_t n;

		if (sent < size) {
			n = send(fd, (const char *)data + sent, size - sent, MSG_NOSIGNAL);
			if (n > 0)
				sent += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != ENOTCONN)
				sent = size;	/* the server closed early: fine */
			if (sent == size)
				shutdown(fd, SHUT_WR);
		} else if (spins == 0) {
			shutdown(fd, SHUT_WR);
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			break;
		if (n > 0) {
			size_t keep = got < reply_len ? reply_len - got : 0;

			memcpy(reply + got, buf, (size_t)n < keep ? (size_t)n : keep);
			got += (size_t)n < keep ? (size_t)n : keep;
		}
	}
	close(fd);
	return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char health[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char reply[8192];
	size_t n;

	if (!srv)
		_setup();
	_exchange(data, size, reply, sizeof(reply) - 1);
	n = _exchange(health, sizeof(health) - 1, reply, sizeof(reply) - 1);
	reply[n] = '\0';
	if (strncmp(reply, "HTTP/1.1 200", 12))
		abort();
	return 0;
}
