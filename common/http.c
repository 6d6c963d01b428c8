/* The admin listener's HTTP/1.1 server (http.h): one thread, poll over
 * the listening socket, a stop eventfd and at most SLUICE_HTTP_CONNS_MAX
 * non-blocking connections. A connection reads its request head into a
 * fixed buffer, is answered whole (head and body in one buffer) and
 * closed once written; one that outlives SLUICE_HTTP_TIMEOUT_MS is closed
 * unanswered. Parsing is deliberately narrow: the request line only
 * (method, target, version); headers are read past, never interpreted. */
#include "common/http.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HTTP_HEAD_BYTES_MAX 256 /* the status line and our few headers */
#define HTTP_POLL_MS_MAX 1000

struct http_conn {
	int fd;              /* -1: the slot is free */
	int64_t deadline_ms; /* monotonic: closed unanswered after it */
	char in[SLUICE_HTTP_REQUEST_BYTES_MAX];
	size_t in_len;
	char *out; /* the whole answer once the request is read (owned), else NULL */
	size_t out_len, out_off;
};

struct sluice_http_server {
	int listen_fd, stop_fd, port;
	pthread_t thread;
	struct sluice_http_route routes[SLUICE_HTTP_ROUTES_MAX];
	size_t route_n;
	struct http_conn conns[SLUICE_HTTP_CONNS_MAX];
};

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 503: return "Service Unavailable";
	default: return "Unknown";
	}
}

int sluice_http_parse_address(const char *key, const char *v, char *host, size_t host_cap, int *port, char *err,
			      size_t errlen)
{
	assert(host_cap > 0);
	const char *colon = strrchr(v, ':'), *h = v;
	host[0] = '\0';
	*port = 0;
	if (!v[0])
		return 0;
	size_t hl = colon ? (size_t)(colon - v) : 0;
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
		h++;
		hl -= 2;
	}
	long p = 0;
	const char *d = colon ? colon + 1 : "";
	for (; *d >= '0' && *d <= '9' && p <= 65535; d++)
		p = p * 10 + (*d - '0');
	if (!colon || hl == 0 || hl >= host_cap || memchr(h, '/', hl) || *d || colon[1] == '\0' || p < 1 || p > 65535) {
		snprintf(err, errlen, "%s: '%s' is not host:port (for example 127.0.0.1:9644; a port of 1 to 65535)",
			 key, v);
		return -1;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = (int)p;
	assert(*port >= 1 && strlen(host) == hl);
	return 0;
}

static void conn_close(struct http_conn *c)
{
	assert(c->fd >= 0);
	close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
	c->in_len = c->out_len = c->out_off = 0;
}

/* The answer into c->out: head and body together. A body that cannot be
 * copied (out of memory) becomes a bodiless 500. */
static void conn_answer(struct http_conn *c, const struct sluice_http_answer *a)
{
	assert(!c->out && a->status >= 100 && a->status <= 599);
	char head[HTTP_HEAD_BYTES_MAX];
	int hl = snprintf(head, sizeof head, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
			  "Connection: close\r\n\r\n", a->status, reason(a->status),
			  a->content_type ? a->content_type : "text/plain; charset=utf-8", a->len,
			  a->status == 405 ? "Allow: GET\r\n" : "");
	assert(hl > 0 && (size_t)hl < sizeof head);
	c->out = malloc((size_t)hl + a->len);
	if (!c->out) {
		shutdown(c->fd, SHUT_RDWR);
		return; /* closed by the next poll's error, or its deadline */
	}
	memcpy(c->out, head, (size_t)hl);
	if (a->len)
		memcpy(c->out + hl, a->body, a->len);
	c->out_len = (size_t)hl + a->len;
	c->out_off = 0;
}

static void answer_text(struct http_conn *c, int status, const char *text)
{
	struct sluice_http_answer a = {.status = status, .body = (char *)text, .len = strlen(text)};
	conn_answer(c, &a);
}

/* The request line "METHOD SP target SP HTTP/1.x", once the head is in. */
static void conn_route(struct sluice_http_server *s, struct http_conn *c)
{
	char *eol = memchr(c->in, '\n', c->in_len);
	assert(eol);
	*eol = '\0';
	char *sp1 = strchr(c->in, ' ');
	char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || sp1[1] != '/' || strncmp(sp2 + 1, "HTTP/1.", 7) != 0) {
		answer_text(c, 400, "bad request\n");
		return;
	}
	*sp1 = *sp2 = '\0';
	char *target = sp1 + 1, *q = strchr(target, '?');
	if (q)
		*q = '\0';
	const struct sluice_http_route *r = NULL;
	for (size_t i = 0; i < s->route_n && !r; i++)
		if (!strcmp(s->routes[i].path, target))
			r = &s->routes[i];
	if (!r) {
		answer_text(c, 404, "not found\n");
		return;
	}
	if (strcmp(c->in, "GET") != 0) {
		answer_text(c, 405, "method not allowed: GET only\n");
		return;
	}
	struct sluice_http_answer a = {.status = 500};
	r->fn(r->arg, &a);
	conn_answer(c, &a);
	free(a.body);
}

/* Read what came; route once the head is whole (an empty line). */
static void conn_read(struct sluice_http_server *s, struct http_conn *c)
{
	assert(c->in_len < sizeof c->in);
	ssize_t n = recv(c->fd, c->in + c->in_len, sizeof c->in - 1 - c->in_len, 0);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	c->in_len += (size_t)n;
	c->in[c->in_len] = '\0';
	if (strstr(c->in, "\r\n\r\n") || strstr(c->in, "\n\n"))
		conn_route(s, c);
	else if (c->in_len == sizeof c->in - 1)
		answer_text(c, 431, "request head too large\n");
}

static void conn_write(struct http_conn *c)
{
	assert(c->out && c->out_off < c->out_len);
	ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	c->out_off += (size_t)n;
	if (c->out_off == c->out_len)
		conn_close(c); /* Connection: close */
}

static void accept_one(struct sluice_http_server *s)
{
	int fd = accept4(s->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	for (size_t i = 0; i < SLUICE_HTTP_CONNS_MAX; i++)
		if (s->conns[i].fd < 0) {
			s->conns[i].fd = fd;
			s->conns[i].deadline_ms = mono_ms() + SLUICE_HTTP_TIMEOUT_MS;
			return;
		}
	close(fd); /* SLUICE_HTTP_CONNS_MAX busy: refused */
}

static void *serve(void *arg)
{
	struct sluice_http_server *s = arg;
	struct pollfd pfd[2 + SLUICE_HTTP_CONNS_MAX];
	struct http_conn *who[2 + SLUICE_HTTP_CONNS_MAX];
	for (;;) {
		int64_t now = mono_ms(), wait = HTTP_POLL_MS_MAX;
		nfds_t n = 0;
		pfd[n++] = (struct pollfd){.fd = s->stop_fd, .events = POLLIN};
		pfd[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
		for (size_t i = 0; i < SLUICE_HTTP_CONNS_MAX; i++) {
			struct http_conn *c = &s->conns[i];
			if (c->fd >= 0 && now >= c->deadline_ms)
				conn_close(c); /* too slow: read or write timed out */
			if (c->fd < 0)
				continue;
			wait = c->deadline_ms - now < wait ? c->deadline_ms - now : wait;
			who[n] = c;
			pfd[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
		}
		assert(n <= 2 + SLUICE_HTTP_CONNS_MAX && wait >= 0);
		if (poll(pfd, n, (int)wait) < 0 && errno != EINTR)
			break;
		if (pfd[0].revents)
			break; /* sluice_http_stop */
		for (nfds_t i = 2; i < n; i++) {
			if (!pfd[i].revents || who[i]->fd < 0)
				continue;
			if (who[i]->out)
				conn_write(who[i]);
			else
				conn_read(s, who[i]);
		}
		if (pfd[1].revents & POLLIN)
			accept_one(s);
	}
	for (size_t i = 0; i < SLUICE_HTTP_CONNS_MAX; i++)
		if (s->conns[i].fd >= 0)
			conn_close(&s->conns[i]);
	return NULL;
}

/* The listening socket for host:port, or -1 after writing err. */
static int listen_on(const char *key, const char *host, int port, char *err, size_t errlen)
{
	char service[16];
	snprintf(service, sizeof service, "%d", port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *res = NULL;
	int rc = getaddrinfo(host, service, &hints, &res);
	if (rc != 0) {
		snprintf(err, errlen, "%s: cannot resolve '%s': %s", key, host, gai_strerror(rc));
		return -1;
	}
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, SLUICE_HTTP_BACKLOG) < 0) {
		snprintf(err, errlen, "%s: cannot listen on %s:%d: %s", key, host, port, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

struct sluice_http_server *sluice_http_start(const char *key, const char *host, int port,
					     const struct sluice_http_route *routes, size_t route_n, char *err,
					     size_t errlen)
{
	assert(route_n > 0 && route_n <= SLUICE_HTTP_ROUTES_MAX);
	assert(port >= 0 && port <= 65535);
	struct sluice_http_server *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "%s: out of memory", key);
		return NULL;
	}
	memcpy(s->routes, routes, route_n * sizeof *routes);
	s->route_n = route_n;
	for (size_t i = 0; i < SLUICE_HTTP_CONNS_MAX; i++)
		s->conns[i].fd = -1;
	s->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	int stop_errno = errno;
	s->listen_fd = s->stop_fd < 0 ? -1 : listen_on(key, host, port, err, errlen);
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	if (s->listen_fd >= 0 && getsockname(s->listen_fd, (struct sockaddr *)&ss, &sl) == 0)
		s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
						   : ((struct sockaddr_in *)&ss)->sin_port);
	/* The thread takes no process signal (SIGTERM, SIGINT are the main
	 * thread's to wait for): it is created with every signal blocked. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = s->listen_fd >= 0 ? pthread_create(&s->thread, NULL, serve, s) : -1;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		return s;
	if (s->stop_fd < 0)
		snprintf(err, errlen, "%s: cannot create an eventfd: %s", key, strerror(stop_errno));
	else if (s->listen_fd >= 0)
		snprintf(err, errlen, "%s: cannot start the admin listener's thread: %s", key, strerror(rc));
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->stop_fd >= 0)
		close(s->stop_fd);
	free(s);
	return NULL;
}

int sluice_http_port(const struct sluice_http_server *s) { return s->port; }

void sluice_http_stop(struct sluice_http_server *s)
{
	if (!s)
		return;
	uint64_t one = 1;
	ssize_t n = write(s->stop_fd, &one, sizeof one);
	assert(n == (ssize_t)sizeof one);
	(void)n;
	pthread_join(s->thread, NULL);
	close(s->listen_fd);
	close(s->stop_fd);
	free(s);
}
