/* sd_notify(3)'s datagram protocol (see sdnotify.h), written out rather than
 * linked from libsystemd: it is one sendto(), and the binaries then depend on
 * nothing of systemd's (containers, hosts without it). A fresh socket per
 * notification: a process sends a handful in its life. */
#include "common/sdnotify.h"
#include "common/log.h"
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int failure_logged; /* atomic: the first failure is logged, the rest are not */

int sluice_sdnotify_address(const char *value, struct sockaddr_un *addr, const char **why)
{
	assert(value && addr && why);
	size_t len = strlen(value);
	memset(addr, 0, sizeof *addr);
	addr->sun_family = AF_UNIX;
	if (value[0] != '/' && value[0] != '@') {
		*why = "neither a path nor an abstract socket name ('@...')";
		return -1;
	}
	if (len < 2) {
		*why = "empty socket name";
		return -1;
	}
	/* A path needs room for its NUL; an abstract name has none (its '@'
	 * becomes the leading NUL and the length says where it ends). */
	if (len + (value[0] == '/') > sizeof addr->sun_path) {
		*why = "longer than a socket address holds";
		return -1;
	}
	memcpy(addr->sun_path, value, len);
	if (value[0] == '@')
		addr->sun_path[0] = '\0';
	size_t addrlen = offsetof(struct sockaddr_un, sun_path) + len + (value[0] == '/');
	assert(addrlen <= sizeof *addr);
	return (int)addrlen;
}

static void failed(const char *socket_name, const char *what)
{
	if (__atomic_exchange_n(&failure_logged, 1, __ATOMIC_RELAXED))
		return;
	SLOG_WARN("systemd", "cannot notify the service manager at NOTIFY_SOCKET=%s: %s (readiness and status are not "
		  "reported; serving goes on; further failures are not logged)", socket_name, what);
}

int sluice_sdnotify_send(const char *state)
{
	assert(state);
	const char *name = getenv("NOTIFY_SOCKET");
	if (!name || !name[0])
		return 0;
	size_t len = strlen(state);
	if (len == 0 || len >= SLUICE_SDNOTIFY_BYTES_MAX) {
		failed(name, "notification empty or too long");
		return -1;
	}
	struct sockaddr_un addr;
	const char *why = NULL;
	int addrlen = sluice_sdnotify_address(name, &addr, &why);
	if (addrlen < 0) {
		failed(name, why);
		return -1;
	}
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		failed(name, strerror(errno));
		return -1;
	}
	ssize_t n = sendto(fd, state, len, MSG_NOSIGNAL, (struct sockaddr *)&addr, (socklen_t)addrlen);
	int err = errno;
	close(fd);
	/* A datagram goes whole or not at all: a short count would be a kernel bug. */
	assert(n < 0 || (size_t)n == len);
	if (n < 0) {
		failed(name, strerror(err));
		return -1;
	}
	return 1;
}

int sluice_sdnotify_sendf(const char *fmt, ...)
{
	char buf[SLUICE_SDNOTIFY_BYTES_MAX];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	const char *name = getenv("NOTIFY_SOCKET");
	if (!name || !name[0])
		return 0;
	if (n < 0 || (size_t)n >= sizeof buf) {
		failed(name, "notification longer than SLUICE_SDNOTIFY_BYTES_MAX");
		return -1;
	}
	return sluice_sdnotify_send(buf);
}
