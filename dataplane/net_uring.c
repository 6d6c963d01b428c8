/* The default network transport: kernel TCP driven through one io_uring per
 * network core. The cores share one listening socket (bound once, by core
 * 0's init), each keeping an accept armed on it, so a connection goes to
 * whichever core takes it first. The loop accepts, receives into a
 * per-connection buffer, cuts Kafka frames (4-byte size prefix) and hands
 * them to the protocol layer, sends responses in request order, takes
 * storage-core replies from its rings, and sleeps in io_uring_enter when idle.
 *
 * Lifetime: a connection is reference-counted: its own reference (dropped
 * at close), one per recv or send in flight, one per request it holds, one
 * while on the throttled list. A closing connection frees each request once
 * nothing else points at it (a storage core, the parked list, a send in
 * flight) and is freed by the last put, never inside a walk of its own
 * requests. Reading is bounded by budgets (see "budgets" below), and a sweep
 * closes idle and trickling connections.
 *
 * user_data encoding: a pointer with the low 3 bits as the operation:
 * 1 accept (no pointer), 2 recv (conn), 3 send (conn), 4 eventfd read. */
#include "common/log.h"
#include "dataplane/req.h"
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

enum { UD_ACCEPT = 1, UD_RECV = 2, UD_SEND = 3, UD_EVENTFD = 4 };

#define SLUICE_NET_SHUTDOWN_DRAIN_MS 5000 /* how long shutdown waits for busy connections */
#define SLUICE_LISTEN_BACKLOG 1024        /* connections the kernel queues before accept */
#define SLUICE_LISTEN_RETRY_MS 50         /* pause between binds of a port in use */
#define SLUICE_NET_SWEEP_MS_MIN 10        /* idle and slow connections are looked for at most */
#define SLUICE_NET_SWEEP_MS_MAX 1000      /* this often, and at least this often */
#define SLUICE_NET_THROTTLE_POLL_MS 10    /* how often a throttled core looks for queue room */

struct nstate {
	struct proto_state proto; /* first: the protocol layer's view of nc->state */
	int32_t conns;
	struct conn *all;       /* every connection of this core, for sweeps and shutdown */
	struct conn *throttled; /* waiting for room under queued.max.request.bytes */
	int64_t next_sweep_ms;
	bool accept_armed;
	uint64_t efd_buf;
	bool efd_armed;
	struct sockaddr_storage accept_addr;
	socklen_t accept_len;
};

/* Broker-wide, over every network core (atomics): bytes of request frames
 * read and not yet served, bounded by queued.max.request.bytes; bytes held
 * for requests in flight, bounded by sluice.response.bytes.max; open
 * connections, bounded by max.connections. */
static int64_t queued_request_bytes;
static int64_t held_bytes_total; /* the sum of every connection's held_bytes */
static int64_t spare_bytes_total; /* response buffers kept for reuse (conn_spare_sync) */
static int32_t conns_open;

static struct io_uring_sqe *sqe_get(struct netcore *nc)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&nc->ring);
	if (!sqe) {
		io_uring_submit(&nc->ring);
		sqe = io_uring_get_sqe(&nc->ring);
	}
	assert(sqe); /* the ring was just emptied */
	return sqe;
}

static void conn_put(struct conn *c)
{
	assert(c->refs > 0);
	if (--c->refs > 0)
		return;
	struct nstate *ns = c->nc->state;
	assert(c->closing && !c->head && c->held_bytes == 0 && !c->throttled);
	if (c->all_prev)
		c->all_prev->all_next = c->all_next;
	else
		ns->all = c->all_next;
	if (c->all_next)
		c->all_next->all_prev = c->all_prev;
	close(c->fd);
	free(c->in);
	__atomic_sub_fetch(&spare_bytes_total, (int64_t)c->spare_counted, __ATOMIC_RELAXED);
	free(c->spare);
	free(c);
	ns->conns--;
	__atomic_sub_fetch(&conns_open, 1, __ATOMIC_RELAXED);
}

static void conn_reap_closing(struct conn *c);
static void conn_parse(struct conn *c);

/* ---- budgets -------------------------------------------------------------
 * A connection holds bytes for each request it has in flight: the frame, and
 * the response (built, or for a Fetch in progress reserved at the most its
 * data can take: r->resp_bytes_max). While they reach
 * sluice.connection.response.bytes.max no further request is read from it
 * (Kafka mutes a channel whose response is unsent): a client that does not
 * read its responses stops being read. One request is always allowed. And
 * while the frames read but not yet served, over all connections, reach
 * queued.max.request.bytes, no connection is read (the bytes wait in the
 * kernel; nothing is dropped) until they fall. While the bytes held by all
 * connections together reach sluice.response.bytes.max, only a connection
 * with nothing in flight is read (one request each still moves: a consumer
 * fetching one request at a time is served; pipelining waits). */

static bool queue_has_room(const struct netcore *nc)
{
	int64_t max = nc->b->cfg.queued_max_request_bytes;
	return max <= 0 || __atomic_load_n(&queued_request_bytes, __ATOMIC_RELAXED) < max;
}

/* The broker-wide budgets allow reading another request from c. */
static bool broker_has_room(const struct conn *c)
{
	if (!queue_has_room(c->nc))
		return false;
	return c->inflight == 0 ||
	       __atomic_load_n(&held_bytes_total, __ATOMIC_RELAXED) < c->nc->b->cfg.response_bytes_max;
}

static bool conn_under_budget(const struct conn *c)
{
	if (c->inflight >= SLUICE_CONN_INFLIGHT_MAX)
		return false;
	return c->inflight == 0 || c->held_bytes < c->nc->b->cfg.connection_response_bytes_max;
}

/* A request's share of its connection's held bytes becomes n. */
static void req_hold(struct conn *c, struct req *r, int64_t n)
{
	int64_t delta = n - r->held_bytes;
	if (delta == 0)
		return;
	c->held_bytes += delta;
	r->held_bytes = n;
	assert(c->held_bytes >= 0);
	int64_t total = __atomic_add_fetch(&held_bytes_total, delta, __ATOMIC_RELAXED);
	assert(total >= 0);
}

static void req_unqueue(struct req *r)
{
	if (r->queued_bytes == 0)
		return;
	int64_t left = __atomic_sub_fetch(&queued_request_bytes, r->queued_bytes, __ATOMIC_RELAXED);
	assert(left >= 0);
	r->queued_bytes = 0;
}

/* A connection keeps its last response buffer (up to 16 MiB, handlers.c)
 * to build the next one without faulting in fresh pages; all connections
 * together keep at most a quarter of sluice.response.bytes.max so, or
 * thousands of quiet connections would hold gigabytes. Counted here when
 * the transport sees the spare change (after a request is freed). */
static void conn_spare_sync(struct conn *c)
{
	size_t have = c->spare ? c->spare_cap : 0;
	if (have == c->spare_counted)
		return;
	int64_t total = __atomic_add_fetch(&spare_bytes_total, (int64_t)have - (int64_t)c->spare_counted,
					   __ATOMIC_RELAXED);
	c->spare_counted = have;
	if (have && total > c->nc->b->cfg.response_bytes_max / 4) {
		free(c->spare);
		c->spare = NULL;
		c->spare_cap = 0;
		__atomic_sub_fetch(&spare_bytes_total, (int64_t)have, __ATOMIC_RELAXED);
		c->spare_counted = 0;
	}
}

/* Free a request the caller has unlinked; the caller drops its reference. */
static void req_drop(struct conn *c, struct req *r)
{
	req_unqueue(r);
	req_hold(c, r, 0);
	c->inflight--;
	sluice_req_free(r);
	conn_spare_sync(c);
}

/* A connection stopped by a broker-wide budget waits on its core's list
 * (holding a reference) until there is room again: the bytes are released
 * on any network core, so the list is polled. */
static void conn_throttle(struct conn *c)
{
	struct nstate *ns = c->nc->state;
	if (c->throttled)
		return;
	c->throttled = true;
	c->refs++;
	c->throttle_next = ns->throttled;
	ns->throttled = c;
}

static void arm_recv(struct conn *c);

/* Read on where a budget stopped: frames already in the buffer, then the socket. */
static void conn_resume(struct conn *c)
{
	if (c->closing || c->parsing)
		return;
	c->refs++; /* parsing may close the connection */
	if (c->in_len >= 4)
		conn_parse(c);
	arm_recv(c);
	conn_put(c);
}

/* Throttled connections read on once the broker has room; closed ones leave
 * the list at once (their reference would keep them alive). */
static void resume_throttled(struct netcore *nc)
{
	struct nstate *ns = nc->state;
	struct conn *list = ns->throttled;
	ns->throttled = NULL;
	while (list) {
		struct conn *c = list;
		list = c->throttle_next;
		if (!broker_has_room(c) && !c->closing) {
			c->throttle_next = ns->throttled;
			ns->throttled = c;
			continue;
		}
		c->throttled = false;
		conn_resume(c); /* may throttle it again, on the fresh list */
		conn_put(c);
	}
}

static void arm_recv(struct conn *c)
{
	if (c->closing || c->recv_armed || c->parsing)
		return;
	if (!conn_under_budget(c) || !broker_has_room(c)) {
		if (conn_under_budget(c))
			conn_throttle(c);
		c->paused = true; /* the broker, not the peer, holds the next frame back */
		return;
	}
	if (c->paused) {
		c->paused = false;
		if (c->frame_start_ms)
			c->frame_start_ms = sluice_now_ms();
	}
	if (c->in_cap - c->in_len < 4096) {
		/* Grow by doubling as bytes arrive, never to a size a peer merely
		 * declared: a frame header claiming 100 MB costs nothing until the
		 * bytes are really here. Frame sizes are checked in conn_parse. */
		size_t want = c->in_cap * 2;
		if (c->in_len >= 4) {
			size_t need = (size_t)kbe32(c->in) + 4u;
			if (need > c->in_cap && need < want)
				want = need;
		}
		uint8_t *n = realloc(c->in, want);
		if (!n) {
			sluice_conn_close(c);
			return;
		}
		c->in = n;
		c->in_cap = want;
	}
	struct io_uring_sqe *sqe = sqe_get(c->nc);
	io_uring_prep_recv(sqe, c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | UD_RECV);
	c->recv_armed = true;
	c->refs++;
}

static void arm_send(struct conn *c)
{
	if (c->send_armed || c->closing)
		return;
	/* Drop finished requests that send nothing (acks=0), then send the head. */
	while (c->head && c->head->done && c->head->no_response) {
		struct req *r = c->head;
		c->head = r->next;
		if (!c->head)
			c->tail = NULL;
		req_drop(c, r);
		conn_put(c);
	}
	struct req *r = c->head;
	if (!r || !r->done)
		return;
	struct io_uring_sqe *sqe = sqe_get(c->nc);
	io_uring_prep_send(sqe, c->fd, r->out.buf + c->sent, r->out.len - c->sent, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)c | UD_SEND);
	c->send_armed = true;
	c->refs++;
}

void sluice_conn_response_ready(struct req *r)
{
	struct conn *c = r->conn;
	assert(r->done);
	/* Served: its frame leaves the broker's queue; what the connection holds
	 * for it is now the response as built (and the frame, freed with it). */
	req_unqueue(r);
	req_hold(c, r, r->no_response ? 0 : (int64_t)(r->out.cap + r->frame_len) + 4);
	if (c->closing) {
		conn_reap_closing(c);
		return;
	}
	arm_send(c);
	conn_resume(c); /* a slot may have freed */
}

/* Whether a closing connection may free a request now: its response is
 * built (or will never be) and nothing else still points at it: no storage
 * core holds its ops, it is not on the parked list, and the kernel is not
 * reading its response buffer for a send in flight. */
static bool req_droppable(const struct conn *c, const struct req *r)
{
	if (r->parked || (!r->done && r->pending > 0))
		return false;
	return !(c->send_armed && r == c->head);
}

/* Free every request a closing connection may drop. The caller's reference
 * and the one taken here keep the connection alive through the walk: it is
 * freed, at the earliest, by the conn_put at the end (a request's put inside
 * the loop must never free it, or the next step would read freed memory). */
static void conn_reap_closing(struct conn *c)
{
	assert(c->closing);
	c->refs++;
	struct req **pp = &c->head;
	c->tail = NULL;
	while (*pp) {
		struct req *r = *pp;
		if (req_droppable(c, r)) {
			*pp = r->next;
			req_drop(c, r);
			c->refs--; /* the request's reference; the walk's own keeps c */
			assert(c->refs > 0);
			continue;
		}
		c->tail = r;
		pp = &r->next;
	}
	conn_put(c);
}

void sluice_conn_close(struct conn *c)
{
	if (c->closing) {
		/* A request that finished on a closing connection (or gave up on
		 * it) is dropped here. */
		conn_reap_closing(c);
		return;
	}
	c->closing = true;
	shutdown(c->fd, SHUT_RDWR); /* completes outstanding recv/send */
	/* Requests still lent to storage cores, parked, or being sent keep the
	 * connection alive; the others go now. */
	conn_reap_closing(c);
	conn_put(c); /* the connection's own reference */
}

void sluice_conn_request_parked(struct req *r, bool parked)
{
	int64_t frame = (int64_t)r->frame_len + 4;
	req_hold(r->conn, r, parked ? frame : frame + (r->resp_bytes_max > 0 ? r->resp_bytes_max : 0));
}

/* A frame just handed to the protocol layer, still in progress: it counts
 * in the broker's queue until served, and the connection holds its bytes
 * and the most its response may take. (One answered at once is already
 * accounted by sluice_conn_response_ready.) */
static void req_account(struct conn *c, struct req *r, uint32_t size)
{
	if (r->done)
		return;
	assert(r->queued_bytes == 0);
	r->queued_bytes = (int64_t)size + 4;
	__atomic_add_fetch(&queued_request_bytes, r->queued_bytes, __ATOMIC_RELAXED);
	/* (A Fetch naming no partition parks at once, holding only its frame.) */
	req_hold(c, r, r->queued_bytes + (!r->parked && r->resp_bytes_max > 0 ? r->resp_bytes_max : 0));
}

/* When the bytes left in the buffer are the start of a frame, the time its
 * first bytes came (a frame trickled slower than
 * sluice.request.receive.timeout.ms closes the connection); 0 otherwise. */
static void frame_clock(struct conn *c, bool consumed)
{
	bool partial = c->in_len > 0 && (c->in_len < 4 || c->in_len - 4 < (size_t)kbe32(c->in));
	if (!partial)
		c->frame_start_ms = 0;
	else if (consumed || !c->frame_start_ms)
		c->frame_start_ms = sluice_now_ms();
}

/* Cut complete frames out of the input buffer, as far as the budgets allow. */
static void conn_parse(struct conn *c)
{
	const uint32_t max = (uint32_t)c->nc->b->cfg.socket_request_max_bytes;
	size_t off = 0;
	c->parsing = true;
	while (!c->closing && c->in_len - off >= 4 && conn_under_budget(c)) {
		if (!broker_has_room(c)) {
			conn_throttle(c);
			break;
		}
		int32_t size = (int32_t)kbe32(c->in + off);
		if (size < 8 || (uint32_t)size > max) {
			SLOG_INFO("net", "%s: frame size %d outside [8, %u]; closing connection", c->peer, size, max);
			c->parsing = false;
			sluice_conn_close(c);
			return;
		}
		if (c->in_len - off - 4 < (size_t)size)
			break;
		uint8_t *frame = malloc((size_t)size);
		if (!frame) {
			c->parsing = false;
			sluice_conn_close(c);
			return;
		}
		memcpy(frame, c->in + off + 4, (size_t)size);
		off += 4 + (size_t)size;
		struct req *before = c->tail;
		if (!sluice_proto_on_frame(c, frame, (uint32_t)size)) {
			c->parsing = false;
			sluice_conn_close(c);
			return;
		}
		/* The new request is the tail, unless it is already gone (an
		 * acks=0 produce answered at once) or the connection closed. */
		if (!c->closing && c->tail && c->tail != before)
			req_account(c, c->tail, (uint32_t)size);
	}
	c->parsing = false;
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	frame_clock(c, off > 0);
	/* Shrink a buffer that grew for one large frame. */
	if (c->in_cap > SLUICE_CONN_RECV_BYTES && c->in_len < SLUICE_CONN_RECV_BYTES / 2) {
		uint8_t *n = realloc(c->in, SLUICE_CONN_RECV_BYTES);
		if (n) {
			c->in = n;
			c->in_cap = SLUICE_CONN_RECV_BYTES;
	c->last_active_ms = sluice_now_ms();
		}
	}
}

static void on_recv(struct conn *c, int res)
{
	c->recv_armed = false;
	if (res <= 0 || c->closing) {
		if (res < 0 && res != -ECONNRESET && !c->closing)
			SLOG_DEBUG("net", "%s: recv: %s", c->peer, strerror(-res));
		sluice_conn_close(c);
		conn_put(c);
		return;
	}
	c->in_len += (size_t)res;
	c->last_active_ms = sluice_now_ms();
	conn_parse(c);
	arm_recv(c);
	conn_put(c);
}

static void on_send(struct conn *c, int res)
{
	c->send_armed = false;
	if (res <= 0 || c->closing) {
		sluice_conn_close(c);
		conn_put(c);
		return;
	}
	struct req *r = c->head;
	assert(r && r->done);
	c->sent += (size_t)res;
	c->last_active_ms = sluice_now_ms();
	if (c->sent == r->out.len) {
		c->sent = 0;
		c->head = r->next;
		if (!c->head)
			c->tail = NULL;
		req_drop(c, r);
		c->refs--; /* the request's reference; the send's is dropped below */
		conn_resume(c); /* frames held back by the in-flight limit or budget */
	}
	arm_send(c);
	conn_put(c);
}

/* Connections idle for connections.max.idle.ms (nothing received or sent,
 * no request waiting on the broker) and frames arriving slower than
 * sluice.request.receive.timeout.ms are closed. */
static bool conn_waits_on_broker(const struct conn *c)
{
	for (const struct req *r = c->head; r; r = r->next)
		if (!r->done)
			return true;
	return false;
}

/* Close with a reset rather than a FIN: a peer that stopped reading would
 * otherwise keep the kernel's send buffer (megabytes) for minutes after the
 * close, behind a FIN it never takes. */
static void conn_abort(struct conn *c)
{
	struct linger lg = {1, 0};
	(void)setsockopt(c->fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
	sluice_conn_close(c);
}

/* A tenth of the shorter time-out, within [10 ms, 1 s]: at most 10% late,
 * and a core with 10,000 connections walks them once a second by default. */
static int64_t sweep_interval_ms(const struct sluice_config *cfg)
{
	int64_t t = SLUICE_NET_SWEEP_MS_MAX * 10;
	if (cfg->connections_max_idle_ms > 0 && cfg->connections_max_idle_ms < t)
		t = cfg->connections_max_idle_ms;
	if (cfg->request_receive_timeout_ms > 0 && cfg->request_receive_timeout_ms < t)
		t = cfg->request_receive_timeout_ms;
	t /= 10;
	return t < SLUICE_NET_SWEEP_MS_MIN ? SLUICE_NET_SWEEP_MS_MIN : t;
}

static void sweep(struct netcore *nc, int64_t now)
{
	struct nstate *ns = nc->state;
	const struct sluice_config *cfg = &nc->b->cfg;
	if (now < ns->next_sweep_ms)
		return;
	ns->next_sweep_ms = now + sweep_interval_ms(cfg);
	for (struct conn *c = ns->all, *next; c; c = next) {
		next = c->all_next; /* closing may free c, never another connection */
		if (c->closing)
			continue;
		if (cfg->request_receive_timeout_ms > 0 && c->frame_start_ms && !c->paused &&
		    now - c->frame_start_ms > cfg->request_receive_timeout_ms) {
			SLOG_INFO("net", "%s: request frame incomplete after %" PRId64
				  " ms (sluice.request.receive.timeout.ms); closing connection", c->peer,
				  now - c->frame_start_ms);
			conn_abort(c);
		} else if (cfg->connections_max_idle_ms > 0 && now - c->last_active_ms > cfg->connections_max_idle_ms &&
			   !conn_waits_on_broker(c)) {
			SLOG_INFO("net", "%s: idle for %" PRId64 " ms (connections.max.idle.ms); closing connection",
				  c->peer, now - c->last_active_ms);
			conn_abort(c);
		}
	}
}

static void arm_accept(struct netcore *nc)
{
	struct nstate *ns = nc->state;
	if (ns->accept_armed || __atomic_load_n(&nc->b->stopping, __ATOMIC_ACQUIRE))
		return;
	struct io_uring_sqe *sqe = sqe_get(nc);
	ns->accept_len = sizeof ns->accept_addr;
	io_uring_prep_accept(sqe, nc->listen_fd, (struct sockaddr *)&ns->accept_addr, &ns->accept_len, SOCK_CLOEXEC);
	io_uring_sqe_set_data64(sqe, UD_ACCEPT);
	ns->accept_armed = true;
}

static void on_accept(struct netcore *nc, int res)
{
	struct nstate *ns = nc->state;
	ns->accept_armed = false;
	if (res < 0) {
		if (res != -EINTR && res != -ECANCELED)
			SLOG_WARN("net", "accept: %s", strerror(-res));
		arm_accept(nc);
		return;
	}
	if (__atomic_load_n(&nc->b->stopping, __ATOMIC_ACQUIRE)) {
		close(res); /* shutting down: accepted just before the listener closed */
		return;
	}
	if (__atomic_add_fetch(&conns_open, 1, __ATOMIC_RELAXED) > nc->b->cfg.connections_max) {
		__atomic_sub_fetch(&conns_open, 1, __ATOMIC_RELAXED);
		SLOG_WARN("net", "connection limit %d reached (max.connections); refusing", nc->b->cfg.connections_max);
		close(res);
		arm_accept(nc);
		return;
	}
	struct conn *c = calloc(1, sizeof *c);
	if (c)
		c->in = malloc(SLUICE_CONN_RECV_BYTES);
	if (!c || !c->in) {
		if (c)
			free(c);
		__atomic_sub_fetch(&conns_open, 1, __ATOMIC_RELAXED);
		close(res);
		arm_accept(nc);
		return;
	}
	int one = 1;
	setsockopt(res, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->nc = nc;
	c->fd = res;
	c->refs = 1; /* the connection's own reference, dropped at close */
	c->in_cap = SLUICE_CONN_RECV_BYTES;
	c->last_active_ms = sluice_now_ms();
	char host[INET6_ADDRSTRLEN] = "?";
	int port = 0;
	if (ns->accept_addr.ss_family == AF_INET) {
		struct sockaddr_in *a = (struct sockaddr_in *)&ns->accept_addr;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
		port = ntohs(a->sin_port);
	} else if (ns->accept_addr.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ns->accept_addr;
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
		port = ntohs(a->sin6_port);
	}
	snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
	snprintf(c->host, sizeof c->host, "/%s", host);
	ns->conns++;
	c->all_next = ns->all;
	if (ns->all)
		ns->all->all_prev = c;
	ns->all = c;
	arm_recv(c);
	arm_accept(nc);
}

/* Ops that found their storage ring full wait here, in order. */
static int op_core(const struct netcore *nc, const struct partop *op)
{
	return op->core_plus1 > 0 ? op->core_plus1 - 1 : sluice_store_core_for(nc->b, op->topic, op->partition);
}

void sluice_net_submit(struct netcore *nc, struct partop *op)
{
	struct proto_state *ps = nc->state;
	int sc = op_core(nc, op);
	struct storecore *s = &nc->b->store[sc];
	op->next = NULL;
	if (!ps->backlog_head && sluice_ring_push(&s->in[nc->id], (struct sluice_msg){MSG_PARTOP, (uint32_t)nc->id, op})) {
		sluice_core_wake(&s->sleeping, s->efd);
		return;
	}
	if (ps->backlog_tail)
		ps->backlog_tail->next = op;
	else
		ps->backlog_head = op;
	ps->backlog_tail = op;
}

static void flush_backlog(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	while (ps->backlog_head) {
		struct partop *op = ps->backlog_head;
		int sc = op_core(nc, op);
		struct storecore *s = &nc->b->store[sc];
		if (!sluice_ring_push(&s->in[nc->id], (struct sluice_msg){MSG_PARTOP, (uint32_t)nc->id, op}))
			break;
		sluice_core_wake(&s->sleeping, s->efd);
		ps->backlog_head = op->next;
		if (!ps->backlog_head)
			ps->backlog_tail = NULL;
	}
}

static bool drain_replies(struct netcore *nc)
{
	bool any = false, wake = false;
	for (int s = 0; s < nc->b->store_n; s++) {
		struct sluice_msg m;
		for (int k = 0; k < 4096 && sluice_ring_pop(&nc->b->store[s].out[nc->id], &m); k++) {
			any = true;
			if (m.type == MSG_WAKE_FETCHES)
				wake = true;
			else
				sluice_proto_on_partop(nc, m.ptr);
		}
	}
	if (wake)
		sluice_proto_retry_parked(nc, sluice_now_ms(), true);
	return any;
}

static bool rings_nonempty(struct netcore *nc)
{
	for (int s = 0; s < nc->b->store_n; s++) {
		struct sluice_ring *r = &nc->b->store[s].out[nc->id];
		if (__atomic_load_n(&r->head, __ATOMIC_ACQUIRE) != r->tail)
			return true;
	}
	return false;
}

static void dispatch(struct netcore *nc, struct io_uring_cqe *cqe)
{
	struct nstate *ns = nc->state;
	uintptr_t ud = (uintptr_t)io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&nc->ring, cqe);
	struct conn *c = (struct conn *)(ud & ~(uintptr_t)7);
	switch (ud & 7) {
	case UD_ACCEPT: on_accept(nc, res); break;
	case UD_RECV: on_recv(c, res); break;
	case UD_SEND: on_send(c, res); break;
	case UD_EVENTFD: ns->efd_armed = false; break;
	default: break;
	}
}

/* One turn of a network core's loop: storage replies, parked fetches, then
 * I/O completions, sleeping in the kernel at most wait_max_ms. */
static void loop_once(struct netcore *nc, int64_t wait_max_ms)
{
	struct nstate *ns = nc->state;
	drain_replies(nc);
	flush_backlog(nc);
	int64_t now = sluice_now_ms();
	if (ns->proto.parked_n)
		sluice_proto_retry_parked(nc, now, false);
	resume_throttled(nc);
	sweep(nc, now);
	if (ns->throttled && wait_max_ms > SLUICE_NET_THROTTLE_POLL_MS)
		wait_max_ms = SLUICE_NET_THROTTLE_POLL_MS; /* room is made on other cores too */
	else if (ns->conns > 0 && wait_max_ms > sweep_interval_ms(&nc->b->cfg))
		wait_max_ms = sweep_interval_ms(&nc->b->cfg);
	if (!ns->efd_armed) {
		struct io_uring_sqe *sqe = sqe_get(nc);
		io_uring_prep_read(sqe, nc->efd, &ns->efd_buf, sizeof ns->efd_buf, 0);
		io_uring_sqe_set_data64(sqe, UD_EVENTFD);
		ns->efd_armed = true;
	}
	__atomic_store_n(&nc->sleeping, 1, __ATOMIC_SEQ_CST);
	struct io_uring_cqe *cqe;
	if (rings_nonempty(nc) || ns->proto.backlog_head) {
		__atomic_store_n(&nc->sleeping, 0, __ATOMIC_SEQ_CST);
		io_uring_submit(&nc->ring);
	} else {
		int64_t deadline = sluice_proto_next_deadline(nc);
		int64_t wait_ms = deadline == INT64_MAX ? wait_max_ms : deadline - now;
		if (wait_ms < 0)
			wait_ms = 0;
		if (wait_ms > wait_max_ms)
			wait_ms = wait_max_ms;
		struct __kernel_timespec ts = {wait_ms / 1000, (wait_ms % 1000) * 1000000};
		io_uring_submit_and_wait_timeout(&nc->ring, &cqe, 1, &ts, NULL);
		__atomic_store_n(&nc->sleeping, 0, __ATOMIC_SEQ_CST);
	}
	for (int i = 0; i < 1024 && io_uring_peek_cqe(&nc->ring, &cqe) == 0; i++)
		dispatch(nc, cqe);
}

/* At shutdown every connection is closed and the loop keeps turning until
 * each is freed: its I/O completed, its ops back from the storage cores
 * (which run until the network cores are joined), its parked fetches
 * dropped. A connection still busy after the limit is left to process exit. */
static void close_all(struct netcore *nc)
{
	struct nstate *ns = nc->state;
	for (struct conn *c = ns->all, *next; c; c = next) {
		next = c->all_next; /* closing may free c, never another connection */
		sluice_conn_close(c);
	}
	int64_t until = sluice_now_ms() + SLUICE_NET_SHUTDOWN_DRAIN_MS;
	while (ns->conns > 0 && sluice_now_ms() < until)
		loop_once(nc, 10);
	if (ns->conns > 0)
		SLOG_WARN("net", "network core %d: %d connection(s) still busy after %d ms of shutdown", nc->id,
			  ns->conns, SLUICE_NET_SHUTDOWN_DRAIN_MS);
}

static void *uring_run(void *arg)
{
	struct netcore *nc = arg;
	char name[16];
	snprintf(name, sizeof name, "sluice-net%d", nc->id);
	pthread_setname_np(pthread_self(), name);
	arm_accept(nc);
	while (!__atomic_load_n(&nc->b->stopping, __ATOMIC_ACQUIRE))
		loop_once(nc, 500);
	close_all(nc);
	return NULL;
}

/* The broker's one listening socket, shared by every network core's accept.
 * SO_REUSEADDR only, never SO_REUSEPORT: a killed broker's io_uring can keep
 * its listener open for a moment after the process is gone, and with
 * SO_REUSEPORT a new broker would bind beside it while the kernel still hands
 * connections to the dead one. So the port is taken alone or not at all: a
 * bind that finds it in use is retried for sluice.listener.bind.timeout.ms,
 * then the broker fails naming the address. */
static int listener_try(const struct addrinfo *ai, int *err)
{
	int one = 1;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SLUICE_LISTEN_BACKLOG) < 0) {
		*err = errno;
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int listener_open(const struct sluice_config *cfg)
{
	struct addrinfo hints = {0}, *ai = NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	char port[16];
	snprintf(port, sizeof port, "%d", cfg->listen_port);
	const char *host = cfg->listen_host[0] ? cfg->listen_host : NULL;
	int rc = getaddrinfo(host, port, &hints, &ai);
	if (rc != 0) {
		SLOG_ERR("net", "listeners: cannot resolve %s: %s", cfg->listen_host, gai_strerror(rc));
		return -1;
	}
	int64_t start = sluice_now_ms(), until = start + cfg->listener_bind_timeout_ms;
	int fd, err = 0;
	bool told = false;
	while ((fd = listener_try(ai, &err)) < 0 && err == EADDRINUSE && sluice_now_ms() < until) {
		if (!told)
			SLOG_WARN("net", "listeners: %s:%d is in use; retrying for up to %" PRId64 " ms",
				  cfg->listen_host, cfg->listen_port, cfg->listener_bind_timeout_ms);
		told = true;
		usleep(SLUICE_LISTEN_RETRY_MS * 1000);
	}
	freeaddrinfo(ai);
	if (fd < 0 && err == EADDRINUSE)
		SLOG_ERR("net", "listeners: %s:%d is in use by another process (still after %" PRId64
			 " ms, sluice.listener.bind.timeout.ms)", cfg->listen_host, cfg->listen_port,
			 sluice_now_ms() - start);
	else if (fd < 0)
		SLOG_ERR("net", "listeners: cannot listen on %s:%d: %s", cfg->listen_host, cfg->listen_port,
			 strerror(err));
	else if (told)
		SLOG_INFO("net", "listeners: %s:%d is ours after %" PRId64 " ms", cfg->listen_host, cfg->listen_port,
			  sluice_now_ms() - start);
	return fd;
}

static int uring_init(struct netcore *nc)
{
	struct nstate *ns = calloc(1, sizeof *ns);
	if (!ns)
		return -1;
	nc->state = ns;
	nc->efd = eventfd(0, EFD_CLOEXEC);
	if (nc->efd < 0)
		return -1;
	int rc = io_uring_queue_init(SLUICE_URING_ENTRIES, &nc->ring, 0);
	if (rc < 0) {
		SLOG_ERR("net", "io_uring_queue_init: %s", strerror(-rc));
		return -1;
	}
	if (nc->id > 0) {
		nc->listen_fd = nc->b->net[0].listen_fd; /* one listener, shared */
		return 0;
	}
	nc->listen_fd = listener_open(&nc->b->cfg);
	return nc->listen_fd < 0 ? -1 : 0;
}

static void uring_fini(struct netcore *nc)
{
	if (nc->id == 0)
		close(nc->listen_fd); /* main stops every network core before any fini */
	io_uring_queue_exit(&nc->ring);
	close(nc->efd);
	sluice_proto_state_fini(nc->state);
	free(nc->state);
	nc->state = NULL;
}

const struct sluice_transport_ops sluice_transport_uring = {"uring", uring_init, uring_run, uring_fini};
