/* memif-load: the Kafka producer load generator of the kernel-free DPDK
 * benchmark (issue 14, perf/dpdk-memif.sh). It keeps N connections to one
 * broker, each with K single-record Produce requests outstanding (v3, acks
 * as asked, one uncompressed batch of one record: the broker checks its
 * CRC-32C and copies it once, into a storage core's extent), and counts
 * answered requests, their latency and their error codes. With --fetch B
 * it is a consumer instead: K Fetch requests (v4, from offset 0, at most B
 * bytes) outstanding per connection, each on its own partition, reading
 * the same cached bytes again and again; it counts the record bytes the
 * responses carry (the responses are read as they stream, not kept).
 *
 * Two transports, the same requests:
 *   memif   DPDK (a net_memif client port: shared-memory frames, no system
 *           call per frame) and Sluice's own TCP/IP stack (dataplane/stack,
 *           active open), so that neither side of the broker's DPDK
 *           transport crosses the kernel;
 *   kernel  ordinary non-blocking sockets (poll), against the io_uring
 *           transport over loopback or anything else that speaks Kafka.
 * One thread, one core. Metadata v4 (allowing auto-creation) goes first on
 * each connection; retriable errors before the measurement starts are
 * counted apart. The result is one JSON object on stdout. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/crc32c.h"
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "perf/perf-histogram.h"

#ifdef SLUICE_HAVE_DPDK
#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include "dataplane/stack/arp.h"
#include "dataplane/stack/tcp.h"
#include "dataplane/stack/wire.h"
#endif

#define CONNS_MAX 256
#define INFLIGHT_MAX 256           /* requests outstanding per connection */
#define REQ_MAX 65536              /* one request's bytes */
#define RBUF_BYTES (256 * 1024)    /* one connection's unparsed response bytes */
#define RESPONSE_MAX (64 * 1024)   /* a response larger than this is a protocol error here */
#define ERR_CODES 128
#define TAG_LEN 17                 /* "c0001s0000000042." at the start of each value */
#define CLIENT_ID "memif-load"
#define API_PRODUCE 0
#define API_FETCH 1
#define API_METADATA 3
#define FETCH_HEAD 256             /* a Fetch response's first bytes, kept to parse; the rest is counted */
#define FETCH_RESPONSE_MAX (64 << 20)

struct lconn {
	int id;
	int partition;
	bool up, ready, dead;
	uint32_t corr_next;             /* the next request's correlation id */
	uint32_t answered;              /* responses taken (in order) */
	uint64_t sent_ns[INFLIGHT_MAX]; /* by correlation id % INFLIGHT_MAX */
	uint8_t req[REQ_MAX];           /* this connection's Produce request; the correlation id patched */
	size_t req_len;
	size_t batch_off, value_off;    /* where its record batch and the record's value start in req */
	uint32_t seq;                   /* the next record's number on this connection (in its value) */
	uint8_t rbuf[RBUF_BYTES];
	size_t rlen;
	uint32_t resp_len, resp_left;   /* --fetch: the response streaming in, and what is still to come */
	/* kernel */
	int fd;
	uint8_t *wbuf;
	size_t wlen, woff, wcap;        /* wcap: K requests and the Metadata one (kernel_run) */
#ifdef SLUICE_HAVE_DPDK
	struct sluice_tcp_tcb tcb;
	uint16_t lport;
	uint8_t *snd_buf, *ooo_buf;
#endif
};

static struct {
	const char *transport, *eal, *address, *broker, *topic;
	int conns, inflight, partitions, record_size, acks, duration_s, warmup_s, connect_s, fetch_bytes;
	uint32_t broker_ip;
	uint16_t broker_port;
	struct lconn *c;
	int64_t t_measure_ns, t_end_ns;
	bool measuring;
	uint64_t ok, errors, warm_ok, warm_errors, err_codes[ERR_CODES];
	uint64_t requests_sent, acked; /* Produce requests sent, and answered without error (any time) */
	uint64_t fetched, fetch_empty; /* --fetch: record bytes the measured responses carried; responses with none */
	struct perf_hist hist;
	volatile sig_atomic_t stop;
	const char *failure;
} g = {
	.transport = "kernel", .topic = "memif-load", .conns = 4, .inflight = 1, .partitions = 4, .record_size = 100,
	.acks = 1, .duration_s = 20, .warmup_s = 3, .connect_s = 20,
};

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...);
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "memif-load: ");
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

/* ---- Kafka requests and responses ---------------------------------------- */

static size_t metadata_request(uint8_t *out, size_t cap, uint32_t corr)
{
	struct kwr w;
	kwr_init(&w, 256, 4096);
	kwr_i32(&w, 0);
	kwr_i16(&w, API_METADATA);
	kwr_i16(&w, 4);
	kwr_i32(&w, (int32_t)corr);
	kwr_cstr(&w, false, CLIENT_ID);
	kwr_array(&w, false, 1);
	kwr_cstr(&w, false, g.topic);
	kwr_bool(&w, true); /* allow_auto_topic_creation */
	kwr_patch_i32(&w, 0, (int32_t)(w.len - 4));
	size_t n = w.err || w.len > cap ? 0 : w.len;
	if (n)
		memcpy(out, w.buf, n);
	kwr_free(&w);
	return n;
}

static void produce_request(struct lconn *c)
{
	uint8_t *value = malloc((size_t)g.record_size);
	if (!value)
		die("%s", "out of memory");
	for (int i = 0; i < g.record_size; i++)
		value[i] = (uint8_t)('a' + i % 26);
	struct kwr b;
	kwr_init(&b, 256, REQ_MAX);
	struct sluice_record_kv kv = {.key = NULL, .key_len = -1, .value = value, .value_len = g.record_size};
	if (sluice_batch_build(&b, &kv, 1, (int64_t)time(NULL) * 1000) < 0)
		die("%s", "cannot build the record batch");
	struct kwr w;
	kwr_init(&w, 512, REQ_MAX);
	kwr_i32(&w, 0);
	kwr_i16(&w, API_PRODUCE);
	kwr_i16(&w, 3);
	kwr_i32(&w, 0); /* correlation id, patched per request */
	kwr_cstr(&w, false, CLIENT_ID);
	kwr_string(&w, false, NULL, -1); /* transactional_id */
	kwr_i16(&w, (int16_t)g.acks);
	kwr_i32(&w, 30000);
	kwr_array(&w, false, 1);
	kwr_cstr(&w, false, g.topic);
	kwr_array(&w, false, 1);
	kwr_i32(&w, c->partition);
	kwr_bytes(&w, false, b.buf, (int32_t)b.len);
	c->batch_off = w.len - b.len;
	c->value_off = w.len - 1 - (size_t)g.record_size; /* the value is last but the headers' count (0) */
	kwr_patch_i32(&w, 0, (int32_t)(w.len - 4));
	if (w.err || w.len > REQ_MAX)
		die("%s", "the request does not fit (--record-size)");
	memcpy(c->req, w.buf, w.len);
	c->req_len = w.len;
	kwr_free(&w);
	kwr_free(&b);
	free(value);
}

/* --fetch: Fetch v4 of the connection's partition from offset 0. */
static void fetch_request(struct lconn *c)
{
	struct kwr w;
	kwr_init(&w, 256, REQ_MAX);
	kwr_i32(&w, 0);
	kwr_i16(&w, API_FETCH);
	kwr_i16(&w, 4);
	kwr_i32(&w, 0); /* correlation id, patched per request */
	kwr_cstr(&w, false, CLIENT_ID);
	kwr_i32(&w, -1); /* replica_id: a consumer */
	kwr_i32(&w, 0);  /* max_wait_ms */
	kwr_i32(&w, 1);  /* min_bytes */
	kwr_i32(&w, g.fetch_bytes);
	kwr_i8(&w, 0); /* read_uncommitted */
	kwr_array(&w, false, 1);
	kwr_cstr(&w, false, g.topic);
	kwr_array(&w, false, 1);
	kwr_i32(&w, c->partition);
	kwr_i64(&w, 0);
	kwr_i32(&w, g.fetch_bytes);
	kwr_patch_i32(&w, 0, (int32_t)(w.len - 4));
	if (w.err || w.len > REQ_MAX)
		die("%s", "the Fetch request does not fit");
	memcpy(c->req, w.buf, w.len);
	c->req_len = w.len;
	kwr_free(&w);
}

static void transport_send(struct lconn *c, const uint8_t *p, size_t n);

/* The measurement's edges, said on stderr at once, so a driver samples the
 * broker's CPU time over the same window. */
static void measuring(int64_t t)
{
	if (!g.measuring && t >= g.t_measure_ns) {
		g.measuring = true;
		fprintf(stderr, "memif-load: measuring\n");
		fflush(stderr);
	}
}

static void measured(void)
{
	fprintf(stderr, "memif-load: measured\n");
	fflush(stderr);
}

static bool can_send(const struct lconn *c);

/* Each record's value starts with "c<connection>s<number>." (when it is
 * long enough), so a reader can check every acknowledged record is in the
 * log once and in order; the batch's CRC-32C is computed again for it. */
static void tag_record(struct lconn *c)
{
	char tag[TAG_LEN + 1];
	snprintf(tag, sizeof tag, "c%04us%010u.", (unsigned)c->id % 10000u, c->seq++);
	memcpy(c->req + c->value_off, tag, TAG_LEN);
	uint8_t *batch = c->req + c->batch_off;
	uint32_t crc = sluice_crc32c(0, batch + 21, c->req_len - c->batch_off - 21);
	batch[17] = (uint8_t)(crc >> 24), batch[18] = (uint8_t)(crc >> 16);
	batch[19] = (uint8_t)(crc >> 8), batch[20] = (uint8_t)crc;
}

static void send_produce(struct lconn *c)
{
	if (!g.fetch_bytes && g.record_size >= TAG_LEN)
		tag_record(c); /* a Fetch goes again as it is */
	uint32_t corr = c->corr_next++;
	c->req[8] = (uint8_t)(corr >> 24), c->req[9] = (uint8_t)(corr >> 16);
	c->req[10] = (uint8_t)(corr >> 8), c->req[11] = (uint8_t)corr;
	c->sent_ns[corr % INFLIGHT_MAX] = now_ns();
	g.requests_sent++;
	transport_send(c, c->req, c->req_len);
}

static void fill(struct lconn *c)
{
	if (g.stop || !c->ready || c->dead)
		return;
	while (c->corr_next - c->answered < (uint32_t)g.inflight && can_send(c))
		send_produce(c);
}

/* Produce v3's answer: [topic [partition error_code ...]] throttle. */
static int produce_error(const uint8_t *body, size_t n)
{
	struct krd r;
	krd_init(&r, body, n);
	int32_t topics = krd_i32(&r);
	(void)krd_string(&r, false);
	int32_t parts = krd_i32(&r);
	(void)krd_i32(&r);
	int16_t err = krd_i16(&r);
	if (r.err || topics != 1 || parts != 1)
		return -1;
	return err;
}

static void response(struct lconn *c, const uint8_t *p, size_t n)
{
	if (n < 4) {
		g.failure = "a response shorter than its correlation id";
		c->dead = true;
		return;
	}
	uint32_t corr = kbe32(p);
	if (corr != c->answered) {
		g.failure = "a response out of order (correlation id)";
		c->dead = true;
		return;
	}
	c->answered++;
	if (!c->ready) { /* the Metadata answer: produce from now on */
		c->ready = true;
		c->corr_next = c->answered;
		return;
	}
	int err = produce_error(p + 4, n - 4);
	int64_t t = now_ns();
	if (err < 0) {
		g.failure = "a Produce response that does not parse";
		c->dead = true;
		return;
	}
	if (err == 0)
		g.acked++;
	if (g.measuring && t <= g.t_end_ns) {
		if (err == 0) {
			g.ok++;
			perf_hist_record(&g.hist, (uint64_t)(t - (int64_t)c->sent_ns[corr % INFLIGHT_MAX]));
		} else {
			g.errors++;
		}
		if (err > 0 && err < ERR_CODES)
			g.err_codes[err]++;
	} else if (!g.measuring) {
		if (err == 0)
			g.warm_ok++;
		else
			g.warm_errors++;
	}
}

/* Fetch v4's answer (its first hn bytes, after the correlation id):
 * throttle [topic [partition error_code hw lso [aborted] records]]; the
 * error code and the records' size, or -1 when it does not parse. */
static int fetch_error(const uint8_t *body, size_t hn, int32_t *records)
{
	struct krd r;
	krd_init(&r, body, hn);
	(void)krd_i32(&r);
	int32_t topics = krd_i32(&r);
	(void)krd_string(&r, false);
	int32_t parts = krd_i32(&r);
	(void)krd_i32(&r);
	int16_t err = krd_i16(&r);
	(void)krd_i64(&r);
	(void)krd_i64(&r);
	int32_t aborted = krd_i32(&r);
	for (int32_t i = 0; i < aborted && !r.err; i++) {
		(void)krd_i64(&r);
		(void)krd_i64(&r);
	}
	*records = krd_i32(&r);
	if (r.err || topics != 1 || parts != 1 || *records < -1)
		return -1;
	return err;
}

/* --fetch: a whole response has streamed in (its first bytes in c->rbuf). */
static void fetch_response(struct lconn *c, size_t hn)
{
	uint32_t corr = kbe32(c->rbuf);
	if (corr != c->answered) {
		g.failure = "a response out of order (correlation id)";
		c->dead = true;
		return;
	}
	c->answered++;
	if (!c->ready) { /* the Metadata answer: fetch from now on */
		c->ready = true;
		c->corr_next = c->answered;
		return;
	}
	int32_t records = 0;
	int err = fetch_error(c->rbuf + 4, hn - 4, &records);
	int64_t t = now_ns();
	if (err < 0) {
		g.failure = "a Fetch response that does not parse";
		c->dead = true;
		return;
	}
	bool ok = err == 0 && records > 0;
	if (g.measuring && t <= g.t_end_ns) {
		if (ok) {
			g.ok++;
			g.fetched += (uint64_t)records;
			perf_hist_record(&g.hist, (uint64_t)(t - (int64_t)c->sent_ns[corr % INFLIGHT_MAX]));
		} else if (err == 0) {
			g.fetch_empty++;
		} else {
			g.errors++;
		}
		if (err > 0 && err < ERR_CODES)
			g.err_codes[err]++;
	} else if (!g.measuring) {
		if (ok)
			g.warm_ok++;
		else
			g.warm_errors++;
	}
}

/* --fetch: responses read as they stream in, only their first bytes kept. */
static void fetch_received(struct lconn *c, const uint8_t *p, size_t n)
{
	while (n > 0 && !c->dead) {
		if (c->resp_left == 0) { /* the size */
			size_t take = n < 4 - c->rlen ? n : 4 - c->rlen;
			memcpy(c->rbuf + c->rlen, p, take);
			c->rlen += take, p += take, n -= take;
			if (c->rlen < 4)
				break;
			uint32_t len = kbe32(c->rbuf);
			if (len < 4 || len > FETCH_RESPONSE_MAX) {
				g.failure = "a response of an unexpected size";
				c->dead = true;
				return;
			}
			c->resp_len = c->resp_left = len;
			c->rlen = 0;
			continue;
		}
		size_t take = n < c->resp_left ? n : c->resp_left;
		if (c->rlen < FETCH_HEAD) {
			size_t k = take < FETCH_HEAD - c->rlen ? take : FETCH_HEAD - c->rlen;
			memcpy(c->rbuf + c->rlen, p, k);
			c->rlen += k;
		}
		c->resp_left -= (uint32_t)take, p += take, n -= take;
		if (c->resp_left == 0) {
			size_t hn = c->rlen;
			c->rlen = 0;
			fetch_response(c, hn);
		}
	}
}

/* Stream bytes in: whole responses are taken as they complete. */
static void received(struct lconn *c, const uint8_t *p, size_t n)
{
	if (g.fetch_bytes) {
		fetch_received(c, p, n);
		fill(c);
		return;
	}
	while (n > 0 && !c->dead) {
		size_t take = n < RBUF_BYTES - c->rlen ? n : RBUF_BYTES - c->rlen;
		memcpy(c->rbuf + c->rlen, p, take);
		c->rlen += take, p += take, n -= take;
		size_t off = 0;
		while (c->rlen - off >= 4) {
			uint32_t len = kbe32(c->rbuf + off);
			if (len > RESPONSE_MAX) {
				g.failure = "a response larger than expected";
				c->dead = true;
				return;
			}
			if (c->rlen - off < 4 + (size_t)len)
				break;
			response(c, c->rbuf + off + 4, len);
			off += 4 + len;
		}
		memmove(c->rbuf, c->rbuf + off, c->rlen - off);
		c->rlen -= off;
	}
	fill(c);
}

static void connected(struct lconn *c)
{
	c->up = true;
	uint8_t m[4096];
	size_t n = metadata_request(m, sizeof m, c->corr_next++);
	if (n == 0)
		die("%s", "cannot build the Metadata request");
	transport_send(c, m, n);
}

/* ---- kernel sockets ------------------------------------------------------ */

static void kernel_flush(struct lconn *c)
{
	while (c->woff < c->wlen) {
		ssize_t w = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			g.failure = "send failed";
			c->dead = true;
			return;
		}
		c->woff += (size_t)w;
	}
	if (c->woff == c->wlen)
		c->woff = c->wlen = 0;
}

static void kernel_send(struct lconn *c, const uint8_t *p, size_t n)
{
	if (c->woff > 0 && c->wlen + n > c->wcap) { /* what was sent makes room */
		memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
		c->wlen -= c->woff;
		c->woff = 0;
	}
	if (c->wlen + n > c->wcap) {
		g.failure = "send buffer overflow";
		c->dead = true;
		return;
	}
	memcpy(c->wbuf + c->wlen, p, n);
	c->wlen += n;
	kernel_flush(c);
}

static void kernel_run(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(g.broker_port),
				 .sin_addr.s_addr = htonl(g.broker_ip)};
	struct pollfd pf[CONNS_MAX];
	for (int i = 0; i < g.conns; i++) {
		struct lconn *c = &g.c[i];
		c->wcap = (size_t)(g.inflight + 1) * (c->req_len > 4096 ? c->req_len : 4096);
		c->wbuf = malloc(c->wcap);
		c->fd = socket(AF_INET, SOCK_STREAM, 0);
		int one = 1;
		setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		if (!c->wbuf || c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof sa) < 0)
			die("cannot connect to %s", g.broker);
		fcntl(c->fd, F_SETFL, O_NONBLOCK);
		connected(c);
	}
	static uint8_t buf[256 * 1024];
	while (!g.stop && now_ns() < g.t_end_ns) {
		for (int i = 0; i < g.conns; i++) {
			pf[i].fd = g.c[i].dead ? -1 : g.c[i].fd;
			pf[i].events = POLLIN | (g.c[i].wlen > g.c[i].woff ? POLLOUT : 0);
			pf[i].revents = 0;
		}
		if (poll(pf, (nfds_t)g.conns, 100) < 0 && errno != EINTR)
			break;
		measuring(now_ns());
		for (int i = 0; i < g.conns; i++) {
			struct lconn *c = &g.c[i];
			if (c->dead)
				continue;
			if (pf[i].revents & POLLOUT)
				kernel_flush(c);
			if (pf[i].revents & (POLLIN | POLLHUP | POLLERR)) {
				ssize_t r = recv(c->fd, buf, sizeof buf, 0);
				if (r <= 0 && !(r < 0 && (errno == EAGAIN || errno == EINTR))) {
					g.failure = "the broker closed a connection";
					c->dead = true;
					continue;
				}
				if (r > 0)
					received(c, buf, (size_t)r);
			}
		}
	}
	measured();
	for (int i = 0; i < g.conns; i++) {
		close(g.c[i].fd);
		free(g.c[i].wbuf);
	}
}

/* ---- DPDK over net_memif, with Sluice's own stack ------------------------ */

#ifdef SLUICE_HAVE_DPDK
#define BURST 32
#define SND_BUF (256 * 1024)
#define OOO_BUF (256 * 1024)
#define RCV_SPACE (256 * 1024)
#define LPORT_BASE 40000

static struct {
	uint16_t port;
	struct rte_mempool *pool;
	struct sluice_eth_addr mac, broker_mac;
	bool broker_mac_known;
	uint32_t ip;
	uint16_t ip_id;
	struct rte_mbuf *tx[BURST];
	uint16_t tx_n;
	uint64_t rx_frames, tx_frames, tx_drops, drops, retransmits;
} d;

static void d_flush(void)
{
	uint16_t sent = d.tx_n ? rte_eth_tx_burst(d.port, 0, d.tx, d.tx_n) : 0;
	for (uint16_t i = sent; i < d.tx_n; i++)
		rte_pktmbuf_free(d.tx[i]);
	d.tx_drops += d.tx_n - sent;
	d.tx_frames += sent;
	d.tx_n = 0;
}

static uint8_t *d_frame(struct rte_mbuf **m, size_t *cap)
{
	*m = rte_pktmbuf_alloc(d.pool);
	if (!*m) {
		d.tx_drops++;
		return NULL;
	}
	*cap = rte_pktmbuf_tailroom(*m);
	return rte_pktmbuf_mtod(*m, uint8_t *);
}

static void d_queue(struct rte_mbuf *m, size_t len)
{
	if (len == 0) {
		rte_pktmbuf_free(m);
		return;
	}
	m->data_len = m->pkt_len = (uint32_t)len;
	d.tx[d.tx_n++] = m;
	if (d.tx_n == BURST)
		d_flush();
}

static void on_emit(void *arg, const struct sluice_tcp_seg *seg)
{
	(void)arg;
	struct rte_mbuf *m;
	size_t cap;
	uint8_t *p = d_frame(&m, &cap);
	if (p)
		d_queue(m, sluice_wire_tcp_frame_build(p, cap, &d.broker_mac, &d.mac, d.ip_id++, seg));
}

static void on_deliver(void *arg, const uint8_t *bytes, uint32_t n)
{
	struct lconn *c = arg;
	received(c, bytes, n);
	sluice_tcp_set_rcv_space(&c->tcb, RCV_SPACE);
}

static void on_established(void *arg) { connected(arg); }

static void on_closed(void *arg, enum sluice_tcp_close_reason reason)
{
	struct lconn *c = arg;
	if (!g.stop && now_ns() < g.t_end_ns) {
		fprintf(stderr, "memif-load: connection %d ended: %s\n", c->id, sluice_tcp_reason_name(reason));
		g.failure = "a connection ended early";
	}
	c->dead = true;
	d.retransmits += c->tcb.counters.retransmits + c->tcb.counters.fast_retransmits;
}

static void on_peer_fin(void *arg)
{
	struct lconn *c = arg;
	(void)sluice_tcp_close(&c->tcb, (uint64_t)(now_ns() / 1000000));
}

static void transport_send_memif(struct lconn *c, const uint8_t *p, size_t n)
{
	if (sluice_tcp_send(&c->tcb, p, (uint32_t)n) != n) {
		g.failure = "the send ring is full (raise SND_BUF or lower --inflight)";
		c->dead = true;
	}
}

static void d_arp_request(void)
{
	struct rte_mbuf *m;
	size_t cap;
	uint8_t *p = d_frame(&m, &cap);
	if (p)
		d_queue(m, sluice_wire_arp_frame_request(p, cap, &d.mac, d.ip, g.broker_ip, NULL));
}

static void d_frame_in(struct rte_mbuf *m, uint64_t now_ms)
{
	struct sluice_wire_pkt pkt;
	switch (sluice_wire_classify(rte_pktmbuf_mtod(m, const uint8_t *), rte_pktmbuf_data_len(m), &pkt)) {
	case SLUICE_WIRE_ARP:
		if (pkt.arp.spa == g.broker_ip && !sluice_eth_addr_is_group(&pkt.arp.sha)) {
			d.broker_mac = pkt.arp.sha;
			d.broker_mac_known = true;
		}
		if (pkt.arp.op == SLUICE_ARP_OP_REQUEST && pkt.arp.tpa == d.ip) {
			struct rte_mbuf *o;
			size_t cap;
			uint8_t *p = d_frame(&o, &cap);
			if (p)
				d_queue(o, sluice_wire_arp_frame_reply(p, cap, &d.mac, d.ip, &pkt.arp));
		}
		break;
	case SLUICE_WIRE_TCP: {
		const struct sluice_tcp_seg *s = &pkt.tcp;
		int i = (int)s->dport - LPORT_BASE;
		if (s->daddr == d.ip && s->saddr == g.broker_ip && s->sport == g.broker_port && i >= 0 && i < g.conns &&
		    !g.c[i].dead)
			sluice_tcp_input(&g.c[i].tcb, s, now_ms);
		else
			d.drops++;
		break;
	}
	default:
		d.drops++;
		break;
	}
	rte_pktmbuf_free(m);
}

static void memif_run(void)
{
	char *args = strdup(g.eal);
	char *argv[64];
	int argc = 0;
	argv[argc++] = "memif-load";
	for (char *s = strtok(args, " "); s && argc < 63; s = strtok(NULL, " "))
		argv[argc++] = s;
	argv[argc] = NULL;
	if (rte_eal_init(argc, argv) < 0)
		die("EAL: %s (--eal)", rte_strerror(rte_errno));
	if (rte_eth_dev_count_avail() < 1)
		die("%s", "no DPDK port (--eal needs --vdev=net_memif0,role=client,...)");
	d.port = 0;
	d.pool = rte_pktmbuf_pool_create("memif_load", 8191, 256, 0, RTE_MBUF_DEFAULT_BUF_SIZE, (int)rte_socket_id());
	if (!d.pool)
		die("mbuf pool: %s", rte_strerror(rte_errno));
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof conf);
	if (rte_eth_dev_configure(d.port, 1, 1, &conf) < 0 ||
	    rte_eth_rx_queue_setup(d.port, 0, 1024, (unsigned)rte_eth_dev_socket_id(d.port), NULL, d.pool) < 0 ||
	    rte_eth_tx_queue_setup(d.port, 0, 1024, (unsigned)rte_eth_dev_socket_id(d.port), NULL) < 0 ||
	    rte_eth_dev_start(d.port) < 0)
		die("cannot start port 0: %s", rte_strerror(rte_errno));
	struct rte_ether_addr mac;
	rte_eth_macaddr_get(d.port, &mac);
	memcpy(d.mac.b, mac.addr_bytes, 6);
	int64_t deadline = now_ns() + (int64_t)g.connect_s * 1000000000;
	/* The link (the broker's memif server accepts us), then the broker's MAC. */
	int64_t next_arp = 0;
	while (!d.broker_mac_known) {
		if (now_ns() > deadline)
			die("%s", "the broker did not answer ARP (is its memif port up, the address right?)");
		struct rte_eth_link link;
		if (rte_eth_link_get_nowait(d.port, &link) == 0 && link.link_status && now_ns() >= next_arp) {
			d_arp_request();
			d_flush();
			next_arp = now_ns() + 100000000;
		}
		struct rte_mbuf *m[BURST];
		uint16_t n = rte_eth_rx_burst(d.port, 0, m, BURST);
		for (uint16_t i = 0; i < n; i++)
			d_frame_in(m[i], (uint64_t)(now_ns() / 1000000));
		d_flush();
		if (n == 0)
			usleep(1000);
	}
	/* The warmup and the measurement start now, EAL and ARP behind us. */
	g.t_measure_ns = now_ns() + (int64_t)g.warmup_s * 1000000000;
	g.t_end_ns = g.t_measure_ns + (int64_t)g.duration_s * 1000000000;
	struct sluice_tcp_config cfg;
	sluice_tcp_config_default(&cfg);
	cfg.ops = (struct sluice_tcp_ops){.emit = on_emit, .deliver = on_deliver, .established = on_established,
					  .peer_fin = on_peer_fin, .closed = on_closed};
	cfg.snd_buf_bytes = SND_BUF;
	cfg.ooo_buf_bytes = OOO_BUF;
	cfg.rcv_space = RCV_SPACE;
	uint64_t now_ms = (uint64_t)(now_ns() / 1000000);
	for (int i = 0; i < g.conns; i++) {
		struct lconn *c = &g.c[i];
		c->snd_buf = malloc(SND_BUF);
		c->ooo_buf = malloc(OOO_BUF);
		if (!c->snd_buf || !c->ooo_buf)
			die("%s", "out of memory");
		cfg.arg = c;
		cfg.snd_buf = c->snd_buf;
		cfg.ooo_buf = c->ooo_buf;
		c->lport = (uint16_t)(LPORT_BASE + i);
		sluice_tcp_connect(&c->tcb, &cfg, d.ip, c->lport, g.broker_ip, g.broker_port,
				   (uint32_t)now_ns() * 2654435761u, now_ms);
	}
	d_flush();
	uint64_t last_timers = 0;
	while (!g.stop) {
		struct rte_mbuf *m[BURST];
		uint16_t n = rte_eth_rx_burst(d.port, 0, m, BURST);
		int64_t t = now_ns();
		now_ms = (uint64_t)(t / 1000000);
		measuring(t);
		if (t >= g.t_end_ns)
			break;
		for (uint16_t i = 0; i < n; i++)
			d_frame_in(m[i], now_ms);
		d.rx_frames += n;
		for (int i = 0; i < g.conns; i++)
			if (!g.c[i].dead && g.c[i].tcb.state != SLUICE_TCP_CLOSED)
				sluice_tcp_output(&g.c[i].tcb, now_ms);
		if (now_ms != last_timers) {
			last_timers = now_ms;
			for (int i = 0; i < g.conns; i++) {
				struct lconn *c = &g.c[i];
				if (!c->dead && c->tcb.state != SLUICE_TCP_CLOSED && sluice_tcp_next_timer(&c->tcb) <= now_ms)
					sluice_tcp_on_timer(&c->tcb, now_ms);
			}
		}
		d_flush();
	}
	measured();
	/* Reset the connections so the broker frees its side at once. */
	g.stop = 1;
	for (int i = 0; i < g.conns; i++)
		if (!g.c[i].dead && g.c[i].tcb.state != SLUICE_TCP_CLOSED)
			sluice_tcp_abort(&g.c[i].tcb, now_ms);
	d_flush();
	/* Linger a little, taking what still comes, so the peer reads the
	 * resets from the rings before the link goes down with them. */
	for (int64_t until = now_ns() + 200000000; now_ns() < until;) {
		struct rte_mbuf *m[BURST];
		uint16_t n = rte_eth_rx_burst(d.port, 0, m, BURST);
		for (uint16_t i = 0; i < n; i++)
			rte_pktmbuf_free(m[i]);
		if (n == 0)
			usleep(1000);
	}
	for (int i = 0; i < g.conns; i++)
		if (g.c[i].tcb.state != SLUICE_TCP_CLOSED)
			d.retransmits += g.c[i].tcb.counters.retransmits + g.c[i].tcb.counters.fast_retransmits;
	rte_eth_dev_stop(d.port);
	rte_eth_dev_close(d.port);
	rte_eal_cleanup();
	free(args);
}

static bool can_send_memif(const struct lconn *c) { return sluice_tcp_send_space(&c->tcb) >= c->req_len; }
#endif

static void transport_send(struct lconn *c, const uint8_t *p, size_t n)
{
#ifdef SLUICE_HAVE_DPDK
	if (strcmp(g.transport, "memif") == 0) {
		transport_send_memif(c, p, n);
		return;
	}
#endif
	kernel_send(c, p, n);
}

static bool can_send(const struct lconn *c)
{
#ifdef SLUICE_HAVE_DPDK
	if (strcmp(g.transport, "memif") == 0)
		return can_send_memif(c);
#endif
	return c->wcap - (c->wlen - c->woff) >= c->req_len;
}

/* ---- main ------------------------------------------------------------------ */

static void on_signal(int sig)
{
	(void)sig;
	g.stop = 1;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: memif-load --broker IP:PORT [--transport kernel|memif] [--eal 'EAL ARGS'] [--address IP]\n"
		"                  [--connections N] [--inflight K] [--partitions P] [--topic T] [--record-size B]\n"
		"                  [--acks A] [--warmup S] [--duration S] [--fetch BYTES]\n");
	exit(2);
}

static int parse_int(const char *s, int lo, int hi, const char *what)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (*s == 0 || *end != 0 || v < lo || v > hi)
		die("bad %s", what);
	return (int)v;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"transport", 1, 0, 't'}, {"eal", 1, 0, 'e'},	   {"address", 1, 0, 'a'},  {"broker", 1, 0, 'b'},
		{"connections", 1, 0, 'c'}, {"inflight", 1, 0, 'k'}, {"partitions", 1, 0, 'p'}, {"topic", 1, 0, 'T'},
		{"record-size", 1, 0, 's'}, {"acks", 1, 0, 'A'},    {"warmup", 1, 0, 'w'},   {"duration", 1, 0, 'd'},
		{"fetch", 1, 0, 'f'},	    {0, 0, 0, 0}};
	int o;
	while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (o) {
		case 't': g.transport = optarg; break;
		case 'e': g.eal = optarg; break;
		case 'a': g.address = optarg; break;
		case 'b': g.broker = optarg; break;
		case 'c': g.conns = parse_int(optarg, 1, CONNS_MAX, "--connections"); break;
		case 'k': g.inflight = parse_int(optarg, 1, INFLIGHT_MAX, "--inflight"); break;
		case 'p': g.partitions = parse_int(optarg, 1, 100000, "--partitions"); break;
		case 'T': g.topic = optarg; break;
		case 's': g.record_size = parse_int(optarg, 0, 60000, "--record-size"); break;
		case 'A': g.acks = parse_int(optarg, -1, 1, "--acks"); break;
		case 'w': g.warmup_s = parse_int(optarg, 0, 3600, "--warmup"); break;
		case 'd': g.duration_s = parse_int(optarg, 1, 36000, "--duration"); break;
		case 'f': g.fetch_bytes = parse_int(optarg, 1, 16 << 20, "--fetch"); break;
		default: usage();
		}
	}
	if (!g.broker || g.acks == 0)
		usage(); /* acks=0 has no answers to count */
	char host[64];
	const char *colon = strrchr(g.broker, ':');
	if (!colon || (size_t)(colon - g.broker) >= sizeof host)
		die("bad --broker %s (IP:PORT)", g.broker);
	memcpy(host, g.broker, (size_t)(colon - g.broker));
	host[colon - g.broker] = 0;
	struct in_addr ia;
	if (inet_pton(AF_INET, host, &ia) != 1)
		die("bad --broker %s (an IPv4 address)", g.broker);
	g.broker_ip = ntohl(ia.s_addr);
	g.broker_port = (uint16_t)parse_int(colon + 1, 1, 65535, "--broker port");
	bool memif = strcmp(g.transport, "memif") == 0;
	if (!memif && strcmp(g.transport, "kernel") != 0)
		die("unknown --transport %s", g.transport);
#ifndef SLUICE_HAVE_DPDK
	if (memif)
		die("%s", "built without DPDK: --transport memif is not available");
#else
	if (memif) {
		if (!g.eal || !g.address || inet_pton(AF_INET, g.address, &ia) != 1)
			die("%s", "--transport memif needs --eal and --address (this side's IPv4 address)");
		d.ip = ntohl(ia.s_addr);
	}
#endif
	g.c = calloc((size_t)g.conns, sizeof *g.c);
	if (!g.c)
		die("%s", "out of memory");
	perf_hist_reset(&g.hist);
	for (int i = 0; i < g.conns; i++) {
		g.c[i].id = i;
		g.c[i].partition = i % g.partitions;
		if (g.fetch_bytes)
			fetch_request(&g.c[i]);
		else
			produce_request(&g.c[i]);
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	int64_t t0 = now_ns();
	g.t_measure_ns = t0 + (int64_t)g.warmup_s * 1000000000;
	g.t_end_ns = g.t_measure_ns + (int64_t)g.duration_s * 1000000000;
	struct rusage ru0, ru1;
	getrusage(RUSAGE_SELF, &ru0);
#ifdef SLUICE_HAVE_DPDK
	if (memif) {
		memif_run();
	} else
#endif
		kernel_run();
	getrusage(RUSAGE_SELF, &ru1);
	double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
		     (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) /
			     1e6;
	double pct[] = {50, 99, 99.9};
	uint64_t q[3];
	perf_hist_quantiles(&g.hist, pct, 3, q);
	printf("{\"transport\": \"%s\", \"connections\": %d, \"inflight\": %d, \"record_size\": %d, \"acks\": %d, "
	       "\"duration_s\": %d, \"ok\": %llu, \"errors\": %llu, \"requests_per_s\": %.1f, "
	       "\"warmup_ok\": %llu, \"warmup_errors\": %llu, \"p50_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, "
	       "\"generator_cpu_s\": %.3f, \"sent\": %llu, \"acked\": %llu, \"fetch_bytes\": %d, \"fetched_bytes\": %llu, "
	       "\"fetched_mb_per_s\": %.1f, \"fetch_empty\": %llu",
	       g.transport, g.conns, g.inflight, g.record_size, g.acks, g.duration_s, (unsigned long long)g.ok,
	       (unsigned long long)g.errors, (double)g.ok / g.duration_s, (unsigned long long)g.warm_ok,
	       (unsigned long long)g.warm_errors, q[0] / 1e3, q[1] / 1e3, q[2] / 1e3, cpu,
	       (unsigned long long)g.requests_sent, (unsigned long long)g.acked, g.fetch_bytes,
	       (unsigned long long)g.fetched, (double)g.fetched / 1e6 / g.duration_s, (unsigned long long)g.fetch_empty);
#ifdef SLUICE_HAVE_DPDK
	if (memif)
		printf(", \"rx_frames\": %llu, \"tx_frames\": %llu, \"tx_drops\": %llu, \"drops\": %llu, "
		       "\"retransmits\": %llu",
		       (unsigned long long)d.rx_frames, (unsigned long long)d.tx_frames, (unsigned long long)d.tx_drops,
		       (unsigned long long)d.drops, (unsigned long long)d.retransmits);
#endif
	printf(", \"error_codes\": {");
	bool first = true;
	for (int i = 0; i < ERR_CODES; i++)
		if (g.err_codes[i]) {
			printf("%s\"%d\": %llu", first ? "" : ", ", i, (unsigned long long)g.err_codes[i]);
			first = false;
		}
	printf("}, \"failure\": %s%s%s}\n", g.failure ? "\"" : "", g.failure ? g.failure : "null", g.failure ? "\"" : "");
	if (g.failure)
		fprintf(stderr, "memif-load: %s\n", g.failure);
	return g.failure || g.ok == 0 ? 1 : 0;
}
