/* The admin listener's pieces, alone: the Prometheus text writer
 * (common/prom.c) escapes label values and help text as the 0.0.4 format
 * says, writes histograms with cumulative buckets whose +Inf bucket is
 * _count, and stops at its bound; the latency buckets (dataplane/metrics.h)
 * put an observation at its bound in that bucket; sluice.admin.listener is
 * parsed or refused naming the key (common/config.c); and the HTTP server
 * (common/http.c) answers GET on its routes, 404 and 405 otherwise, and
 * refuses an oversized request head, over a real loopback socket. */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/config.h"
#include "common/http.h"
#include "common/prom.h"
#include "dataplane/metrics.h"

Test(prom, label_values_and_help_are_escaped)
{
	char out[64];
	cr_assert_eq(sluice_prom_escape("a\\b\"c\nd", out, sizeof out), 10);
	cr_assert_str_eq(out, "a\\\\b\\\"c\\nd");
	cr_assert_eq(sluice_prom_escape("plain", out, sizeof out), 5);
	cr_assert_eq(sluice_prom_escape("0123456789", out, 8), -1, "too small for the result");

	struct sluice_prom w;
	sluice_prom_init(&w, 1 << 16);
	sluice_prom_family(&w, "x_total", "counter", "a \"quoted\" back\\slash\nand line");
	struct sluice_prom_label l[] = {{"topic", "t\"1\\\n"}, {"api", "Produce"}};
	sluice_prom_u64(&w, "x_total", l, 2, 18446744073709551615ull);
	sluice_prom_f64(&w, "y", NULL, 0, 0.25);
	cr_assert(!w.err);
	cr_assert_str_eq(w.buf, "# HELP x_total a \"quoted\" back\\\\slash\\nand line\n"
				"# TYPE x_total counter\n"
				"x_total{topic=\"t\\\"1\\\\\\n\",api=\"Produce\"} 18446744073709551615\n"
				"y 0.25\n");
	sluice_prom_free(&w);
}

Test(prom, histogram_buckets_are_cumulative_and_end_in_count)
{
	struct sluice_prom w;
	sluice_prom_init(&w, 1 << 16);
	const double bounds[] = {0.0001, 0.00025, 1, 2.5};
	const uint64_t counts[] = {1, 0, 2, 3, 4}; /* the last: above 2.5 */
	struct sluice_prom_label l[] = {{"api", "Fetch"}};
	sluice_prom_histogram(&w, "d_seconds", l, 1, bounds, counts, 4, 12.5);
	cr_assert(!w.err);
	cr_assert_str_eq(w.buf, "d_seconds_bucket{api=\"Fetch\",le=\"0.0001\"} 1\n"
				"d_seconds_bucket{api=\"Fetch\",le=\"0.00025\"} 1\n"
				"d_seconds_bucket{api=\"Fetch\",le=\"1\"} 3\n"
				"d_seconds_bucket{api=\"Fetch\",le=\"2.5\"} 6\n"
				"d_seconds_bucket{api=\"Fetch\",le=\"+Inf\"} 10\n"
				"d_seconds_sum{api=\"Fetch\"} 12.5\n"
				"d_seconds_count{api=\"Fetch\"} 10\n");
	sluice_prom_free(&w);
	/* No labels of its own: le alone. */
	sluice_prom_init(&w, 1 << 16);
	sluice_prom_histogram(&w, "e", NULL, 0, bounds, (const uint64_t[]){0, 0, 0, 0, 0}, 4, 0);
	cr_assert(strstr(w.buf, "e_bucket{le=\"+Inf\"} 0\ne_sum 0\ne_count 0\n"));
	sluice_prom_free(&w);
}

Test(prom, the_bound_latches_an_error)
{
	struct sluice_prom w;
	sluice_prom_init(&w, SLUICE_PROM_BYTES_MIN);
	char help[1000];
	memset(help, 'h', sizeof help - 1);
	help[sizeof help - 1] = '\0';
	for (int i = 0; i < 10; i++)
		sluice_prom_family(&w, "f", "gauge", help);
	cr_assert(w.err, "10 KB of text does not fit 4 KB");
	cr_assert_leq(w.len, SLUICE_PROM_BYTES_MIN);
	sluice_prom_free(&w);
}

Test(prom, latency_buckets_hold_their_bound)
{
	static struct sluice_net_metrics m;
	sluice_metrics_latency(&m, 0, 100);      /* at 100 us: the 0.0001 bucket */
	sluice_metrics_latency(&m, 0, 101);      /* just above: the next */
	sluice_metrics_latency(&m, 0, -5);       /* a clock that went back counts as 0 */
	sluice_metrics_latency(&m, 0, 61000000); /* above 60 s: +Inf only */
	sluice_metrics_latency(&m, -1, 5);       /* not an ApiKey: not counted */
	cr_assert_eq(m.latency[0][0], 2);
	cr_assert_eq(m.latency[0][1], 1);
	cr_assert_eq(m.latency[0][SLUICE_METRICS_LATENCY_BUCKETS], 1);
	cr_assert_eq(m.latency_us[0], 100 + 101 + 61000000);
	cr_assert_eq(sluice_metrics_error_slot(-1), 0);
	cr_assert_eq(sluice_metrics_error_slot(6), 6);
	cr_assert_eq(sluice_metrics_error_slot(KERR_CODE_MAX + 5), KERR_CODE_MAX + 1);
}

static int finish(struct sluice_config *cfg, const char *admin, char *err, size_t errlen)
{
	sluice_config_defaults(cfg);
	cr_assert_eq(sluice_config_set(cfg, "sluice.admin.listener", admin, err, errlen), 0);
	return sluice_config_finish(cfg, err, errlen);
}

Test(prom, admin_listener_parsed_or_refused_naming_the_key)
{
	static struct sluice_config cfg;
	char err[256];
	cr_assert_eq(finish(&cfg, "", err, sizeof err), 0);
	cr_assert_eq(cfg.admin_port, 0, "unset: off");
	cr_assert_eq(finish(&cfg, "127.0.0.1:9644", err, sizeof err), 0);
	cr_assert_str_eq(cfg.admin_host, "127.0.0.1");
	cr_assert_eq(cfg.admin_port, 9644);
	cr_assert_eq(finish(&cfg, "[::1]:1", err, sizeof err), 0);
	cr_assert_str_eq(cfg.admin_host, "::1");
	cr_assert_eq(cfg.admin_port, 1);
	const char *bad[] = {"127.0.0.1", "127.0.0.1:", ":9644", "127.0.0.1:0", "127.0.0.1:65536", "h:12x",
			     "PLAINTEXT://127.0.0.1:9644", "h:99999999999999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		cr_assert_eq(finish(&cfg, bad[i], err, sizeof err), -1, "%s accepted", bad[i]);
		cr_assert(strstr(err, "sluice.admin.listener"), "%s: %s", bad[i], err);
	}
}

static void route_hello(void *arg, struct sluice_http_answer *a)
{
	a->status = *(int *)arg;
	a->content_type = SLUICE_PROM_CONTENT_TYPE;
	a->body = strdup("hello\n");
	a->len = 6;
}

/* One request to port; the whole answer (the server closes). */
static char *http_exchange(int port, const char *req, size_t req_len)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
	cr_assert_eq(send(fd, req, req_len, MSG_NOSIGNAL), (ssize_t)req_len);
	static char buf[4096];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof buf - 1 && (r = recv(fd, buf + n, sizeof buf - 1 - n, 0)) > 0)
		n += (size_t)r;
	buf[n] = '\0';
	close(fd);
	return buf;
}

Test(prom, http_get_routes_404_405_and_a_bounded_head)
{
	int status = 503;
	struct sluice_http_route routes[] = {{"/ready", route_hello, &status}};
	char err[256];
	struct sluice_http_server *s = sluice_http_start("k", "127.0.0.1", 0, routes, 1, err, sizeof err);
	cr_assert(s, "%s", err);
	int port = sluice_http_port(s);
	cr_assert_gt(port, 0);
	const char *get = "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n";
	char *a = http_exchange(port, get, strlen(get));
	cr_assert(strstr(a, "HTTP/1.1 503 Service Unavailable\r\n") == a, "%s", a);
	cr_assert(strstr(a, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
	cr_assert(strstr(a, "Content-Length: 6\r\n"));
	cr_assert(strstr(a, "\r\n\r\nhello\n"));
	const char *query = "GET /ready?x=1 HTTP/1.0\r\n\r\n";
	cr_assert(strstr(http_exchange(port, query, strlen(query)), "HTTP/1.1 503 "));
	const char *other = "GET /nope HTTP/1.1\r\n\r\n";
	cr_assert(strstr(http_exchange(port, other, strlen(other)), "HTTP/1.1 404 Not Found\r\n"));
	const char *post = "POST /ready HTTP/1.1\r\nContent-Length: 0\r\n\r\n";
	a = http_exchange(port, post, strlen(post));
	cr_assert(strstr(a, "HTTP/1.1 405 Method Not Allowed\r\n") && strstr(a, "Allow: GET\r\n"), "%s", a);
	const char *garbage = "hello\r\n\r\n";
	cr_assert(strstr(http_exchange(port, garbage, strlen(garbage)), "HTTP/1.1 400 "));
	char *big = malloc(SLUICE_HTTP_REQUEST_BYTES_MAX + 100);
	memset(big, 'a', SLUICE_HTTP_REQUEST_BYTES_MAX + 100);
	memcpy(big, "GET /ready HTTP/1.1\r\nX: ", 24);
	cr_assert(strstr(http_exchange(port, big, SLUICE_HTTP_REQUEST_BYTES_MAX - 1), "HTTP/1.1 431 "));
	free(big);
	/* The same port cannot be bound twice: the error names the key. */
	cr_assert_null(sluice_http_start("sluice.admin.listener", "127.0.0.1", port, routes, 1, err, sizeof err));
	cr_assert(strstr(err, "sluice.admin.listener: cannot listen on 127.0.0.1:") && strstr(err, "in use"), "%s",
		  err);
	sluice_http_stop(s);
}
