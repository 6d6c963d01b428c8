/* A small HTTP/1.1 server for a process's admin listener
 * (sluice.admin.listener: /metrics, /ready). It runs on its own thread,
 * off every hot path, and is bounded everywhere: at most
 * SLUICE_HTTP_CONNS_MAX connections at once (more are closed at accept),
 * a request head of at most SLUICE_HTTP_REQUEST_BYTES_MAX, and
 * SLUICE_HTTP_TIMEOUT_MS for a connection's whole life (reading the request
 * and writing the answer). GET only (405 otherwise), a fixed table of
 * paths (404 otherwise), one request per connection (Connection: close).
 * It knows nothing of what the routes answer. */
#ifndef SLUICE_HTTP_H
#define SLUICE_HTTP_H
#include <stddef.h>

#define SLUICE_HTTP_CONNS_MAX 16
#define SLUICE_HTTP_REQUEST_BYTES_MAX 8192
#define SLUICE_HTTP_TIMEOUT_MS 10000
#define SLUICE_HTTP_ROUTES_MAX 8
#define SLUICE_HTTP_BACKLOG 16

/* What a route answers: status (200, 503, ...), its content type, and a
 * body the route allocated (malloc; the server frees it), or NULL with
 * len 0. A route that cannot build its answer says 500. */
struct sluice_http_answer {
	int status;
	const char *content_type;
	char *body;
	size_t len;
};

struct sluice_http_route {
	const char *path; /* exact, without a query string ("?..." is ignored) */
	void (*fn)(void *arg, struct sluice_http_answer *a);
	void *arg;
};

struct sluice_http_server;

/* An admin listener's address as configured (key names it in err):
 * "host:port" or "[v6 address]:port", a port of 1 to 65535, no scheme (it
 * is HTTP, not a Kafka listener). "" is off: host "" and port 0. The host
 * goes into host (host_cap bytes, NUL included). 0, or -1 with err. */
int sluice_http_parse_address(const char *key, const char *v, char *host, size_t host_cap, int *port, char *err,
			      size_t errlen);

/* Bind host:port now (so a bad or busy address fails the start, err
 * naming key), then serve routes (copied; at most SLUICE_HTTP_ROUTES_MAX)
 * on a new thread. NULL after writing err. */
struct sluice_http_server *sluice_http_start(const char *key, const char *host, int port,
					     const struct sluice_http_route *routes, size_t route_n, char *err,
					     size_t errlen);
/* The port bound (the configured one, or the kernel's pick for 0). */
int sluice_http_port(const struct sluice_http_server *s);
/* Stop serving: the thread ends, open connections are closed, and no
 * route runs once this returns. NULL is fine. */
void sluice_http_stop(struct sluice_http_server *s);

#endif
