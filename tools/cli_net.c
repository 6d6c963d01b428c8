/* One blocking Kafka client connection for the `sluice` tool: a
 * non-blocking socket driven by poll(2) so that the connect and each whole
 * request (send and answer) have a deadline, one request in flight at a
 * time, answers matched by correlation id and bounded by
 * SLUICE_CLI_FRAME_MAX. The tool asks a handful of questions per run, so a
 * socket per server and no pipelining is all it needs. */
#include "tools/cli.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline: 1 ready, 0 timed out, -1 error. */
static int wait_fd(int fd, short events, int64_t deadline_ms)
{
	for (;;) {
		int64_t left = deadline_ms - now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n;
		return 1; /* readable, writable, or an error the next call reports */
	}
}

/* One address: a non-blocking connect finished within the deadline. */
static int connect_one(const struct addrinfo *ai, int64_t deadline_ms, int *err_no)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
	if (fd < 0) {
		*err_no = errno;
		return -1;
	}
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
		return fd;
	if (errno != EINPROGRESS) {
		*err_no = errno;
		close(fd);
		return -1;
	}
	int ready = wait_fd(fd, POLLOUT, deadline_ms);
	int so_error = 0;
	socklen_t sl = sizeof so_error;
	if (ready == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &sl) == 0 && so_error == 0)
		return fd;
	*err_no = ready == 0 ? ETIMEDOUT : so_error ? so_error : errno;
	close(fd);
	return -1;
}

static int connect_endpoint(const struct sluice_cli_endpoint *ep, int timeout_ms, char *err, size_t errlen)
{
	char port[8];
	snprintf(port, sizeof port, "%d", (int)ep->port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
	int rc = getaddrinfo(ep->host, port, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "%s:%d: cannot resolve: %s", ep->host, (int)ep->port, gai_strerror(rc));
		return -1;
	}
	int64_t deadline = now_ms() + timeout_ms;
	int fd = -1, err_no = 0;
	for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
		fd = connect_one(ai, deadline, &err_no);
	freeaddrinfo(res);
	if (fd < 0)
		snprintf(err, errlen, "%s:%d: cannot connect: %s", ep->host, (int)ep->port,
			 err_no == ETIMEDOUT ? "timed out" : strerror(err_no));
	return fd;
}

/* 0 done, -1 error, -2 timed out. */
static int send_all(int fd, const uint8_t *p, size_t n, int64_t deadline_ms)
{
	while (n > 0) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k > 0) {
			p += k, n -= (size_t)k;
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int ready = wait_fd(fd, POLLOUT, deadline_ms);
			if (ready == 1)
				continue;
			if (ready == 0)
				return -2;
		}
		return -1;
	}
	return 0;
}

/* 0 done, -1 error or closed (errno 0 for a close), -2 timed out. */
static int recv_all(int fd, uint8_t *p, size_t n, int64_t deadline_ms)
{
	while (n > 0) {
		ssize_t k = recv(fd, p, n, 0);
		if (k > 0) {
			p += k, n -= (size_t)k;
			continue;
		}
		if (k == 0) {
			errno = 0;
			return -1;
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return -1;
		int ready = wait_fd(fd, POLLIN, deadline_ms);
		if (ready == 0)
			return -2;
		if (ready < 0)
			return -1;
	}
	return 0;
}

static const char *recv_failure(int rc)
{
	return rc == -2 ? "timed out waiting for the answer" : errno == 0 ? "the server closed the connection" :
		strerror(errno);
}

/* Reads one answer frame: its size checked before the allocation. */
static int read_frame(struct sluice_cli_conn *c, int64_t deadline, uint8_t **out, size_t *out_len, char *err,
		      size_t errlen)
{
	uint8_t size_be[4];
	int rc = recv_all(c->fd, size_be, 4, deadline);
	if (rc < 0) {
		snprintf(err, errlen, "%s:%d: %s", c->peer.host, (int)c->peer.port, recv_failure(rc));
		return -1;
	}
	uint32_t size = kbe32(size_be);
	if (size < 4 || size > SLUICE_CLI_FRAME_MAX) {
		snprintf(err, errlen, "%s:%d: malformed answer: frame size %u (at most %u)", c->peer.host, (int)c->peer.port,
			 size, SLUICE_CLI_FRAME_MAX);
		return -1;
	}
	uint8_t *buf = malloc(size);
	if (!buf) {
		snprintf(err, errlen, "out of memory for a %u-byte answer", size);
		return -1;
	}
	rc = recv_all(c->fd, buf, size, deadline);
	if (rc < 0) {
		snprintf(err, errlen, "%s:%d: %s", c->peer.host, (int)c->peer.port, recv_failure(rc));
		free(buf);
		return -1;
	}
	*out = buf;
	*out_len = size;
	return 0;
}

int sluice_cli_call(struct sluice_cli_conn *c, int16_t key, int16_t version, bool flexible, const struct kwr *body,
		    uint8_t **resp, const uint8_t **resp_body, size_t *resp_body_len, char *err, size_t errlen)
{
	assert(c->fd >= 0 && body && !body->err);
	*resp = NULL;
	int32_t corr = ++c->correlation_id;
	struct kwr w;
	kwr_init(&w, 64 + body->len, SLUICE_CLI_REQUEST_MAX);
	kwr_i32(&w, 0); /* size, patched below */
	sluice_cli_encode_header(&w, key, version, corr, flexible);
	kwr_raw(&w, body->buf, body->len);
	if (w.err) {
		kwr_free(&w);
		snprintf(err, errlen, "request %d v%d does not fit in %u bytes", key, version, SLUICE_CLI_REQUEST_MAX);
		return -1;
	}
	kwr_patch_i32(&w, 0, (int32_t)(w.len - 4));
	int64_t deadline = now_ms() + c->timeout_ms;
	int rc = send_all(c->fd, w.buf, w.len, deadline);
	kwr_free(&w);
	if (rc < 0) {
		snprintf(err, errlen, "%s:%d: cannot send: %s", c->peer.host, (int)c->peer.port,
			 rc == -2 ? "timed out" : strerror(errno));
		return -1;
	}
	uint8_t *frame;
	size_t len;
	if (read_frame(c, deadline, &frame, &len, err, errlen) < 0)
		return -1;
	struct krd rd;
	krd_init(&rd, frame, len);
	int32_t got = krd_i32(&rd);
	if (flexible && key != SLUICE_CLI_API_API_VERSIONS) /* ApiVersions answers with header v0 always */
		krd_tags_skip(&rd);
	if (rd.err || got != corr) {
		snprintf(err, errlen, "%s:%d: malformed answer to API %d v%d: %s", c->peer.host, (int)c->peer.port, key,
			 version, rd.err ? "bad response header" : "wrong correlation id");
		free(frame);
		return -1;
	}
	*resp = frame;
	*resp_body = rd.p;
	*resp_body_len = krd_left(&rd);
	return 0;
}

int sluice_cli_open(struct sluice_cli_conn *c, const struct sluice_cli_endpoint *ep, int timeout_ms, char *err,
		    size_t errlen)
{
	assert(timeout_ms > 0);
	memset(c, 0, sizeof *c);
	c->peer = *ep;
	c->timeout_ms = timeout_ms;
	c->fd = connect_endpoint(ep, timeout_ms, err, errlen);
	if (c->fd < 0)
		return -2;
	struct kwr body;
	kwr_init(&body, 0, SLUICE_CLI_REQUEST_MAX); /* ApiVersions v0 has an empty body */
	uint8_t *resp;
	const uint8_t *p;
	size_t n;
	int rc = sluice_cli_call(c, SLUICE_CLI_API_API_VERSIONS, 0, false, &body, &resp, &p, &n, err, errlen);
	kwr_free(&body);
	if (rc == 0) {
		char why[SLUICE_CLI_WHY_MAX];
		rc = sluice_cli_decode_api_versions(p, n, &c->versions, why, sizeof why);
		if (rc < 0)
			snprintf(err, errlen, "%s:%d: %s", ep->host, (int)ep->port, why);
		free(resp);
	}
	if (rc < 0)
		sluice_cli_close(c);
	return rc;
}

void sluice_cli_close(struct sluice_cli_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
}
