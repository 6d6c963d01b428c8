/* The network core, independent of how bytes move: it takes what a
 * transport backend (transport.h) receives, passes it through the
 * connection's stage (plaintext today, TLS later), cuts Kafka frames
 * (4-byte size prefix) and hands them to the protocol layer, sends the
 * responses in request order, bounds what a connection and the broker may
 * hold (budgets, below), sweeps idle and trickling connections, and drains
 * everything at shutdown. It calls the backend only through its ops, so the
 * io_uring backend, a DPDK one, and the tests' in-memory one are alike here.
 *
 * Lifetime: a connection is reference-counted: its own reference (dropped
 * at close), the backend's (dropped by the closed upcall, the backend's
 * last word about it), one per request it holds, one while on the
 * throttled list. A closing connection frees each request once nothing
 * else points at it (a storage core, the parked list, a send in flight) and
 * is freed by the last put, never inside a walk of its own requests. */
#include "common/log.h"
#include "dataplane/req.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SLUICE_NET_SHUTDOWN_DRAIN_MS 5000 /* how long shutdown waits for busy connections */
#define SLUICE_NET_SWEEP_MS_MIN 10        /* idle and slow connections are looked for at most */
#define SLUICE_NET_SWEEP_MS_MAX 1000      /* this often, and at least this often */
#define SLUICE_NET_THROTTLE_POLL_MS 10    /* how often a throttled core looks for queue room */
#define SLUICE_NET_IDLE_WAIT_MS 500       /* the longest a turn waits with nothing due */
#define SLUICE_NET_SHUTDOWN_TURN_MS 10    /* the longest a shutdown turn waits */
#define SLUICE_CONN_IN_BYTES_MIN 4096     /* first allocation of a connection's frame buffer */
#define SLUICE_FRAME_BYTES_MIN 8          /* ApiKey, ApiVersion, CorrelationId */
_Static_assert(SLUICE_NET_SWEEP_MS_MIN < SLUICE_NET_SWEEP_MS_MAX, "sweep interval range");
_Static_assert(SLUICE_NET_THROTTLE_POLL_MS <= SLUICE_NET_IDLE_WAIT_MS, "throttled cores poll sooner than idle ones");
_Static_assert(SLUICE_NET_IDLE_WAIT_MS <= SLUICE_RT_SLEEP_MS_MAX, "the runtime bounds every sleep");
_Static_assert(SLUICE_NET_SHUTDOWN_TURN_MS < SLUICE_NET_SHUTDOWN_DRAIN_MS, "shutdown turns many times");
_Static_assert(SLUICE_CONN_IN_BYTES_MIN <= SLUICE_CONN_RECV_BYTES / 2, "a small buffer is never shrunk");

struct nstate {
	struct proto_state proto; /* first: the protocol layer's view of nc->state */
	int32_t conns;
	struct conn *all;       /* every connection of this core, for sweeps and shutdown */
	struct conn *throttled; /* waiting for room under queued.max.request.bytes */
	struct sluice_rt_timer sweep; /* armed while connections are open, every sweep_interval_ms */
};

/* Broker-wide, over every network core (atomics): bytes of request frames
 * read and not yet served, bounded by queued.max.request.bytes; bytes held
 * for requests in flight, bounded by sluice.response.bytes.max; open
 * connections, bounded by max.connections. */
static int64_t queued_request_bytes;
static int64_t held_bytes_total; /* the sum of every connection's held_bytes */
static int64_t spare_bytes_total; /* response buffers kept for reuse (conn_spare_sync) */
static int64_t pinned_bytes_total; /* cache extents pinned by responses (sluice_conn_pin) */
static int32_t conns_open;

#ifdef SLUICE_HAVE_DPDK
static const struct sluice_transport_ops *const backends[] = {&sluice_transport_uring, &sluice_transport_dpdk};
#define BACKEND_NAMES "uring, dpdk"
#else
static const struct sluice_transport_ops *const backends[] = {&sluice_transport_uring};
#define BACKEND_NAMES "uring (dpdk: built without libdpdk)"
#endif

static void conn_put(struct conn *c)
{
	assert(c->refs > 0);
	if (--c->refs > 0)
		return;
	struct nstate *ns = c->nc->state;
	assert(c->closing && !c->head && c->held_bytes == 0 && !c->throttled && !c->tconn);
	assert(c->pinned_bytes == 0); /* every splice was released with its request */
	if (c->all_prev)
		c->all_prev->all_next = c->all_next;
	else
		ns->all = c->all_next;
	if (c->all_next)
		c->all_next->all_prev = c->all_prev;
	free(c->in);
	__atomic_sub_fetch(&spare_bytes_total, (int64_t)c->spare_counted, __ATOMIC_RELAXED);
	free(c->spare);
	free(c);
	ns->conns--;
	sluice_metric_add(&ns->proto.metrics.conns_closed, 1);
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

/* The broker-wide budgets allow reading another request from c, and the
 * core's backlog of ops waiting for full storage rings is short enough to
 * take all of one more request's (storage is behind: wait for it). */
static bool broker_has_room(const struct conn *c)
{
	if (!queue_has_room(c->nc) || sluice_rt_backlog_n(&c->nc->rt) >= SLUICE_NET_BACKLOG_PAUSE)
		return false;
	return c->inflight == 0 ||
	       __atomic_load_n(&held_bytes_total, __ATOMIC_RELAXED) < c->nc->b->cfg.response_bytes_max;
}

/* The core's pools (proto.c) can take c's next request: its frame's size is
 * known once its first 4 bytes are buffered. Objects come back only on this
 * core, when one of its requests is freed; a connection waiting for them
 * waits on the throttled list like one stopped by a broker-wide budget. */
static bool pools_have_room(const struct conn *c)
{
	uint32_t next = c->in_len >= 4 ? kbe32(c->in) : 0;
	return sluice_proto_has_room(c->nc, next);
}

/* Every budget and pool outside the connection allows reading from it. */
static bool core_has_room(const struct conn *c)
{
	return broker_has_room(c) && pools_have_room(c);
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

/* A connection keeps its last response buffer (up to 16 MiB, api_records.c)
 * to build the next one without faulting in fresh pages; all connections
 * together keep at most a quarter of sluice.response.bytes.max so, or
 * thousands of quiet connections would hold gigabytes. Counted here when
 * the core sees the spare change (after a request is freed). */
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

/* ---- pinned extents ------------------------------------------------------
 * A Fetch may send its records straight out of the storage cores' cache
 * extents (req.h's splices) instead of copying them into the response.
 * Those extents stay pinned until sent, so pinned bytes count like the
 * response's own (in held_bytes, through sluice_conn_response_ready) and
 * are bounded on their own too: a connection may pin at most
 * sluice.connection.response.bytes.max, all connections together at most
 * sluice.response.bytes.max; past that the handler copies (and releases
 * the pins at once), so one slow reader never holds the whole cache. */

bool sluice_conn_pin(struct conn *c, int64_t bytes)
{
	const struct sluice_config *cfg = &c->nc->b->cfg;
	assert(bytes >= 0);
	if (c->pinned_bytes + bytes > cfg->connection_response_bytes_max)
		return false;
	int64_t total = __atomic_add_fetch(&pinned_bytes_total, bytes, __ATOMIC_RELAXED);
	if (total > cfg->response_bytes_max) {
		__atomic_sub_fetch(&pinned_bytes_total, bytes, __ATOMIC_RELAXED);
		return false;
	}
	c->pinned_bytes += bytes;
	return true;
}

void sluice_conn_unpin(struct conn *c, int64_t bytes)
{
	assert(bytes >= 0 && bytes <= c->pinned_bytes);
	c->pinned_bytes -= bytes;
	int64_t total = __atomic_sub_fetch(&pinned_bytes_total, bytes, __ATOMIC_RELAXED);
	assert(total >= 0);
	(void)total;
}

int64_t sluice_netcore_pinned_bytes(void) { return __atomic_load_n(&pinned_bytes_total, __ATOMIC_RELAXED); }

/* Give back splice i's pins (once: splices are released in order). */
static void splice_release(struct conn *c, struct req *r)
{
	assert(r->splice_done < r->nsplice);
	struct sluice_read_pins *pins = r->splice[r->splice_done].pins;
	int64_t bytes = r->splice[r->splice_done++].bytes;
	assert(pins->bytes == bytes);
	sluice_conn_unpin(c, bytes);
	sluice_pin_put(&pins->pin);
}

/* Release the splices the sends have covered: those ending at or before
 * byte `sent` of the response. */
static void splices_sent(struct conn *c, struct req *r, size_t sent)
{
	int64_t before = 0; /* spliced bytes ahead of splice_done's */
	for (int32_t i = 0; i < r->splice_done; i++)
		before += r->splice[i].bytes;
	while (r->splice_done < r->nsplice) {
		const struct sluice_resp_splice *sp = &r->splice[r->splice_done];
		int64_t end = (int64_t)sp->at + before + sp->bytes;
		if (end > (int64_t)sent)
			break;
		before += sp->bytes;
		splice_release(c, r);
	}
}

/* Free a request the caller has unlinked; the caller drops its reference. */
static void req_drop(struct conn *c, struct req *r)
{
	assert(c->inflight > 0);
	/* Pins not sent yet (a closed connection, a dropped response) go back. */
	while (r->splice_done < r->nsplice)
		splice_release(c, r);
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

/* Tell the backend whether to read from c, as the budgets say: a connection
 * over its own budget is paused until a response leaves; one stopped by a
 * broker-wide budget also waits on the throttled list. */
static void recv_update(struct conn *c)
{
	if (c->closing || c->parsing || !c->tconn)
		return;
	bool want = conn_under_budget(c) && core_has_room(c);
	if (!want) {
		if (conn_under_budget(c))
			conn_throttle(c);
		c->paused = true; /* the broker, not the peer, holds the next frame back */
	} else if (c->paused) {
		c->paused = false;
		if (c->frame_start_ms)
			c->frame_start_ms = sluice_coarse_ms();
	}
	if (c->recv_paused == !want)
		return;
	c->recv_paused = !want;
	c->nc->tops->recv_pause(c, !want);
}

/* Read on where a budget stopped: frames already buffered, then the peer. */
static void conn_resume(struct conn *c)
{
	if (c->closing || c->parsing)
		return;
	c->refs++; /* parsing may close the connection */
	if (c->in_len >= 4)
		conn_parse(c);
	recv_update(c);
	conn_put(c);
}

void sluice_netcore_resume_throttled(struct netcore *nc)
{
	struct nstate *ns = nc->state;
	struct conn *list = ns->throttled;
	ns->throttled = NULL;
	while (list) {
		struct conn *c = list;
		list = c->throttle_next;
		assert(c->throttled);
		/* Closed ones leave the list at once (the reference would keep
		 * them alive). */
		if (!core_has_room(c) && !c->closing) {
			c->throttle_next = ns->throttled;
			ns->throttled = c;
			continue;
		}
		c->throttled = false;
		conn_resume(c); /* may throttle it again, on the fresh list */
		conn_put(c);
	}
}

/* ---- sending ---------------------------------------------------------- */

static size_t resp_len(const struct req *r) { return r->out.len + (size_t)r->splice_bytes; }

/* Append [base, base + len) to out[0..n) as the bytes at *pos of the
 * response, minus what lies before byte `from`. */
static int range_add(struct sluice_send_range *out, int n, const uint8_t *base, size_t len, struct sluice_pin *pin,
		     size_t *pos, size_t from)
{
	size_t start = *pos;
	*pos += len;
	if (len == 0 || *pos <= from)
		return n;
	size_t skip = from > start ? from - start : 0;
	out[n] = (struct sluice_send_range){base + skip, len - skip, pin};
	return n + 1;
}

/* The ranges of r's response from byte `from` on, at most max: slices of
 * out.buf with the splices' extent ranges between them. */
static int resp_ranges(const struct req *r, size_t from, struct sluice_send_range *out, int max)
{
	int n = 0;
	size_t pos = 0, buf_at = 0;
	assert(from < resp_len(r) && max > 0);
	for (int32_t i = 0; i <= r->nsplice && n < max; i++) {
		size_t end = i < r->nsplice ? r->splice[i].at : r->out.len;
		assert(end >= buf_at && end <= r->out.len);
		n = range_add(out, n, r->out.buf + buf_at, end - buf_at, NULL, &pos, from);
		buf_at = end;
		if (i == r->nsplice)
			break;
		if (i < r->splice_done) { /* sent and released: its pins are gone */
			pos += r->splice[i].bytes;
			assert(pos <= from);
			continue;
		}
		struct sluice_read_pins *p = r->splice[i].pins;
		assert(p->bytes == (int32_t)r->splice[i].bytes);
		for (uint32_t k = 0; k < p->n && n < max; k++)
			n = range_add(out, n, p->range[k].base, p->range[k].len, &p->pin, &pos, from);
	}
	assert(n > 0);
	return n;
}

/* Send the head request's response (what is left of it), after dropping
 * finished requests that send nothing (acks=0). */
static void arm_send(struct conn *c)
{
	if (c->send_armed || c->closing || !c->tconn)
		return;
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
	assert(c->sent < resp_len(r));
	/* The buffer, with the pinned extents of its splices between its
	 * slices; their pins are released as sent covers them (transport.h). */
	struct sluice_send_range plain[SLUICE_SEND_RANGES_MAX];
	int np = resp_ranges(r, c->sent, plain, SLUICE_SEND_RANGES_MAX);
	struct sluice_send_range wire[SLUICE_SEND_RANGES_MAX];
	int n = c->stage->outbound(c, plain, np, wire, SLUICE_SEND_RANGES_MAX);
	if (n <= 0 || c->nc->tops->send(c, wire, n) < 0) {
		sluice_conn_close(c);
		return;
	}
	c->send_armed = true;
}

void sluice_netcore_sent(struct conn *c, ssize_t res)
{
	assert(c->send_armed);
	c->send_armed = false;
	if (res <= 0 || c->closing) {
		sluice_conn_close(c); /* or, closing already, drop what it may */
		return;
	}
	struct req *r = c->head;
	assert(r && r->done && c->sent + (size_t)res <= resp_len(r));
	c->refs++; /* dropping the request and resuming may close c */
	c->sent += (size_t)res;
	c->last_active_ms = sluice_coarse_ms();
	splices_sent(c, r, c->sent);
	if (c->sent == resp_len(r)) {
		c->sent = 0;
		c->head = r->next;
		if (!c->head)
			c->tail = NULL;
		req_drop(c, r);
		c->refs--; /* the request's reference; ours is dropped below */
		conn_resume(c); /* frames held back by the in-flight limit or budget */
	}
	arm_send(c);
	conn_put(c);
}

void sluice_conn_response_ready(struct req *r)
{
	struct conn *c = r->conn;
	assert(r->done);
	/* Served: its frame leaves the broker's queue; what the connection holds
	 * for it is now the response as built (and the frame, freed with it). */
	req_unqueue(r);
	req_hold(c, r, r->no_response ? 0 : (int64_t)(r->out.cap + r->frame_len) + 4 + r->splice_bytes);
	if (c->closing) {
		conn_reap_closing(c);
		return;
	}
	arm_send(c);
	conn_resume(c); /* a slot may have freed */
}

/* ---- closing ---------------------------------------------------------- */

/* Whether a closing connection may free a request now: its response is
 * built (or will never be) and nothing else still points at it: no storage
 * core holds its ops, it is not on the parked list, and the backend is not
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

static void conn_close(struct conn *c, bool abort)
{
	if (c->closing) {
		/* A request that finished on a closing connection (or gave up on
		 * it) is dropped here. */
		conn_reap_closing(c);
		return;
	}
	c->closing = true;
	if (c->tconn)
		c->nc->tops->close(c, abort); /* ends a send in flight; closed follows */
	/* Requests still lent to storage cores, parked, or being sent keep the
	 * connection alive; the others go now. */
	conn_reap_closing(c);
	conn_put(c); /* the connection's own reference */
}

void sluice_conn_close(struct conn *c) { conn_close(c, false); }

void sluice_netcore_closed(struct conn *c, int error)
{
	assert(c->tconn && !c->send_armed);
	if (error < 0 && !c->closing)
		SLOG_DEBUG("net", "%s: %s", c->peer, strerror(-error));
	else
		SLOG_DEBUG("net", "%s: connection closed (network core %d)", c->peer, c->nc->id);
	c->tconn = NULL; /* the backend holds nothing of c any more */
	sluice_conn_close(c); /* closes it, or (closing already) drops what it may */
	conn_put(c); /* the backend's reference */
}

void sluice_conn_request_parked(struct req *r, bool parked)
{
	int64_t frame = (int64_t)r->frame_len + 4;
	req_hold(r->conn, r, parked ? frame : frame + (r->resp_bytes_max > 0 ? r->resp_bytes_max : 0));
}

/* ---- framing ---------------------------------------------------------- */

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

/* Hand one whole frame (size prefix cut) to the protocol layer, through the
 * stage's gate. False: the connection must close. */
static bool frame_start(struct conn *c, const uint8_t *bytes, uint32_t size)
{
	int16_t api_key = (int16_t)(bytes[0] << 8 | bytes[1]);
	if (!c->stage->allowed(c, api_key)) {
		SLOG_INFO("net", "%s: API key %d not allowed before authentication; closing connection", c->peer,
			  api_key);
		return false;
	}
	/* The frame outlives the bytes it is cut from (the backend's buffer,
	 * or the connection's): copied into a pooled buffer (parse_bytes made
	 * sure one is free), from the heap only above the pooled sizes. */
	uint8_t *frame = sluice_proto_frame_get(c->nc, size);
	if (!frame)
		return false;
	memcpy(frame, bytes, size);
	struct req *before = c->tail;
	if (!sluice_proto_on_frame(c, frame, size))
		return false;
	/* The new request is the tail, unless it is already gone (an acks=0
	 * produce answered at once) or the connection closed. */
	if (!c->closing && c->tail && c->tail != before)
		req_account(c, c->tail, size);
	return true;
}

/* Cut complete frames from bytes[0..len), as far as the budgets allow.
 * Returns the bytes consumed; on a bad frame the connection is closed. */
static size_t parse_bytes(struct conn *c, const uint8_t *bytes, size_t len)
{
	const uint32_t max = (uint32_t)c->nc->b->cfg.socket_request_max_bytes;
	size_t off = 0;
	bool bad = false;
	assert(!c->parsing);
	c->parsing = true;
	while (!c->closing && !bad && len - off >= 4 && conn_under_budget(c)) {
		if (!broker_has_room(c)) {
			conn_throttle(c);
			break;
		}
		int32_t size = (int32_t)kbe32(bytes + off);
		if (size < SLUICE_FRAME_BYTES_MIN || (uint32_t)size > max) {
			SLOG_INFO("net", "%s: frame size %d outside [%d, %u]; closing connection", c->peer, size,
				  SLUICE_FRAME_BYTES_MIN, max);
			bad = true;
			break;
		}
		if (len - off - 4 < (size_t)size)
			break;
		if (!sluice_proto_has_room(c->nc, (uint32_t)size)) {
			conn_throttle(c); /* the core's pools are exhausted: back-pressure */
			break;
		}
		bad = !frame_start(c, bytes + off + 4, (uint32_t)size);
		off += 4 + (size_t)size;
	}
	c->parsing = false;
	if (bad) {
		c->refused = true;
		sluice_conn_close(c);
	}
	assert(off <= len);
	return off;
}

/* When the bytes buffered are the start of a frame, the time its first
 * bytes came (a frame trickled slower than sluice.request.receive.timeout.ms
 * closes the connection); 0 otherwise. */
static void frame_clock(struct conn *c, bool consumed)
{
	bool partial = c->in_len > 0 && (c->in_len < 4 || c->in_len - 4 < (size_t)kbe32(c->in));
	if (!partial)
		c->frame_start_ms = 0;
	else if (consumed || !c->frame_start_ms)
		c->frame_start_ms = sluice_coarse_ms();
}

/* Cut frames out of the connection's buffer. */
static void conn_parse(struct conn *c)
{
	size_t off = parse_bytes(c, c->in, c->in_len);
	if (c->closing)
		return;
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
	frame_clock(c, off > 0);
}

/* Shrink a buffer that grew for large frames once the connection has been
 * quiet for a sweep interval (the sweep calls it): a producer sending
 * megabyte frames keeps its buffer rather than reallocate it per frame. */
static void conn_in_trim(struct conn *c, int64_t now, int64_t quiet_ms)
{
	if (c->in_cap <= SLUICE_CONN_RECV_BYTES || c->in_len >= SLUICE_CONN_RECV_BYTES / 2 ||
	    now - c->last_active_ms < quiet_ms)
		return;
	uint8_t *n = realloc(c->in, SLUICE_CONN_RECV_BYTES);
	if (n) {
		c->in = n;
		c->in_cap = SLUICE_CONN_RECV_BYTES;
	}
	assert(c->in_len <= c->in_cap);
}

/* Keep n more bytes in the connection's buffer. It grows by doubling as
 * bytes arrive, never to a size a peer merely declared: a frame header
 * claiming 100 MB costs nothing until the bytes are really here. */
static bool conn_keep(struct conn *c, const uint8_t *bytes, size_t n)
{
	if (c->in_cap - c->in_len < n) {
		size_t want = c->in_cap ? c->in_cap : SLUICE_CONN_IN_BYTES_MIN;
		while (want - c->in_len < n)
			want *= 2;
		uint8_t *p = realloc(c->in, want);
		if (!p)
			return false;
		c->in = p;
		c->in_cap = want;
	}
	memcpy(c->in + c->in_len, bytes, n);
	c->in_len += n;
	assert(c->in_len <= c->in_cap);
	return true;
}

void sluice_netcore_received(struct conn *c, const uint8_t *bytes, size_t n)
{
	assert(c->tconn && n > 0);
	if (c->closing)
		return;
	c->last_active_ms = sluice_coarse_ms();
	const uint8_t *plain;
	size_t plain_n;
	if (!c->stage->inbound(c, bytes, n, &plain, &plain_n)) {
		sluice_conn_close(c);
		return;
	}
	c->refs++; /* parsing may close the connection */
	size_t used = 0;
	bool before = c->in_len > 0;
	/* Frames wholly inside the backend's buffer go straight to the
	 * protocol layer; only a remainder is copied. */
	if (!before)
		used = parse_bytes(c, plain, plain_n);
	if (!c->closing && used < plain_n && !conn_keep(c, plain + used, plain_n - used))
		sluice_conn_close(c);
	if (!c->closing) {
		if (before)
			conn_parse(c);
		else
			frame_clock(c, used > 0);
		recv_update(c);
	}
	conn_put(c);
}

/* ---- the sweep -------------------------------------------------------- */

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

void sluice_netcore_sweep(struct netcore *nc, int64_t now)
{
	struct nstate *ns = nc->state;
	const struct sluice_config *cfg = &nc->b->cfg;
	assert(ns->conns >= 0);
	for (struct conn *c = ns->all, *next; c; c = next) {
		next = c->all_next; /* closing may free c, never another connection */
		if (c->closing)
			continue;
		conn_in_trim(c, now, sweep_interval_ms(cfg));
		/* Closed with a reset rather than a FIN (see transport.h). */
		if (cfg->request_receive_timeout_ms > 0 && c->frame_start_ms && !c->paused &&
		    now - c->frame_start_ms > cfg->request_receive_timeout_ms) {
			SLOG_INFO("net", "%s: request frame incomplete after %" PRId64
				  " ms (sluice.request.receive.timeout.ms); closing connection", c->peer,
				  now - c->frame_start_ms);
			conn_close(c, true);
		} else if (cfg->connections_max_idle_ms > 0 && now - c->last_active_ms > cfg->connections_max_idle_ms &&
			   !conn_waits_on_broker(c)) {
			SLOG_INFO("net", "%s: idle for %" PRId64 " ms (connections.max.idle.ms); closing connection",
				  c->peer, now - c->last_active_ms);
			conn_close(c, true);
		}
	}
}

/* ---- accepting -------------------------------------------------------- */

/* max.connections as in effect now: a dynamic broker config (cluster
 * mode) changes it at run time; connections over a lowered limit stay,
 * new ones wait for room, as in Kafka. */
static int32_t connections_max(struct netcore *nc)
{
	const struct sluice_meta *m = &nc->b->meta;
	struct sluice_meta_snapshot *s = m->ops->acquire(m->self);
	int32_t max = sluice_meta_config(s, &nc->b->cfg)->connections_max;
	m->ops->release(m->self, s);
	assert(max >= 1);
	return max;
}

struct conn *sluice_netcore_accepted(struct netcore *nc, void *t, const char *host, int port)
{
	struct nstate *ns = nc->state;
	assert(t);
	if (__atomic_load_n(&nc->b->stopping, __ATOMIC_ACQUIRE))
		return NULL; /* shutting down: accepted just before the listener closed */
	int32_t max = connections_max(nc);
	if (__atomic_add_fetch(&conns_open, 1, __ATOMIC_RELAXED) > max) {
		__atomic_sub_fetch(&conns_open, 1, __ATOMIC_RELAXED);
		SLOG_WARN("net", "connection limit %d reached (max.connections); refusing", max);
		return NULL;
	}
	struct conn *c = calloc(1, sizeof *c);
	if (!c) {
		__atomic_sub_fetch(&conns_open, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	c->nc = nc;
	c->tconn = t;
	c->stage = &sluice_stage_plaintext;
	c->refs = 2; /* the connection's own (dropped at close) and the backend's */
	c->last_active_ms = sluice_coarse_ms();
	snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
	snprintf(c->host, sizeof c->host, "/%s", host);
	SLOG_DEBUG("net", "%s: connection accepted (network core %d)", c->peer, nc->id);
	ns->conns++;
	sluice_metric_add(&ns->proto.metrics.conns_accepted, 1);
	c->all_next = ns->all;
	if (ns->all)
		ns->all->all_prev = c;
	ns->all = c;
	recv_update(c);
	return c;
}

int32_t sluice_netcore_conns(const struct netcore *nc)
{
	const struct nstate *ns = nc->state;
	return ns->conns;
}

/* ---- the loop --------------------------------------------------------- */

/* The network core runs on the core runtime (runtime.h), which owns the
 * loop: each turn takes the storage cores' replies (net_rings.c), runs
 * posts and due timers (the sweep), the work below, and flushes the
 * backlog of ops that found a ring full; then it sleeps in the backend's
 * poll until the next timer, the deadline below or a wake. */

static bool net_drain(void *core)
{
	return sluice_netcore_drain_replies(core);
}

/* The sweep, a timer on the core's runtime, armed while connections are
 * open (an idle core is not woken for it). */
static void sweep_arm(struct netcore *nc, int64_t now)
{
	struct nstate *ns = nc->state;
	int armed = sluice_rt_timer_add(&nc->rt, &ns->sweep, now + sweep_interval_ms(&nc->b->cfg));
	assert(armed == 0); /* the core's only timer: never refused */
	(void)armed;
	assert(ns->sweep.slot != SLUICE_RT_TIMER_IDLE);
}

static void sweep_fire(void *arg)
{
	struct netcore *nc = arg;
	struct nstate *ns = nc->state;
	int64_t now = sluice_rt_now_ms();
	sluice_netcore_sweep(nc, now);
	if (ns->conns > 0)
		sweep_arm(nc, now);
}

/* Parked fetches whose deadline passed answer now; throttled connections
 * read on if room was made (on any core); the sweep starts with the first
 * connection. */
static void net_work(void *core, int64_t now)
{
	struct netcore *nc = core;
	struct nstate *ns = nc->state;
	assert(ns->proto.parked_n >= 0 && ns->conns >= 0);
	if (ns->proto.parked_n)
		sluice_proto_retry_parked(nc, now, false);
	sluice_netcore_resume_throttled(nc);
	if (ns->conns > 0 && ns->sweep.slot == SLUICE_RT_TIMER_IDLE)
		sweep_arm(nc, now);
}

static bool net_pending(void *core)
{
	return sluice_netcore_replies_waiting(core);
}

/* The earliest parked fetch's deadline; soon while connections wait for
 * room made on other cores, which wake nobody when they release it. */
static int64_t net_deadline(void *core, int64_t now)
{
	struct netcore *nc = core;
	struct nstate *ns = nc->state;
	int64_t d = ns->proto.parked_n ? sluice_proto_next_deadline(nc) : INT64_MAX;
	if (ns->throttled && now + SLUICE_NET_THROTTLE_POLL_MS < d)
		d = now + SLUICE_NET_THROTTLE_POLL_MS;
	assert((ns->proto.parked_n == 0) == (ns->proto.parked_head == NULL));
	return d;
}

/* The backend's poll is the core's sleep: io_uring waits in the kernel with
 * a read armed on rt.efd (the runtime's wake); DPDK will busy-poll. */
static void net_poll(void *core, int64_t wait_ms)
{
	struct netcore *nc = core;
	assert(wait_ms >= 0 && wait_ms <= SLUICE_RT_SLEEP_MS_MAX);
	nc->tops->poll(nc, wait_ms);
}

static void net_end(void *core)
{
	sluice_netcore_close_all(core);
}

static const struct sluice_rt_hooks netcore_hooks = {
	.end = net_end,
	.drain = net_drain,
	.work = net_work,
	.pending = net_pending,
	.deadline = net_deadline,
	.poll = net_poll,
	.sleep_max_ms = SLUICE_NET_IDLE_WAIT_MS,
};

void sluice_netcore_turn(struct netcore *nc, int64_t wait_max_ms)
{
	assert(wait_max_ms >= 0);
	sluice_rt_turn(&nc->rt, &netcore_hooks, nc, wait_max_ms);
}

/* At shutdown (the runtime's end hook, after the loop's last turn) every
 * connection is closed and the core keeps turning until each is freed: its
 * I/O completed, its ops back from the storage cores (which run until the
 * network cores are joined), its parked fetches dropped. A connection still
 * busy after the limit is left to process exit. */
void sluice_netcore_close_all(struct netcore *nc)
{
	struct nstate *ns = nc->state;
	for (struct conn *c = ns->all, *next; c; c = next) {
		next = c->all_next; /* closing may free c, never another connection */
		sluice_conn_close(c);
	}
	int64_t until = sluice_rt_now_ms() + SLUICE_NET_SHUTDOWN_DRAIN_MS;
	while (ns->conns > 0 && sluice_rt_now_ms() < until)
		sluice_rt_turn(&nc->rt, &netcore_hooks, nc, SLUICE_NET_SHUTDOWN_TURN_MS);
	if (ns->conns > 0)
		SLOG_WARN("net", "network core %d: %d connection(s) still busy after %d ms of shutdown", nc->id,
			  ns->conns, SLUICE_NET_SHUTDOWN_DRAIN_MS);
	assert(ns->conns >= 0);
}

/* ---- start and stop --------------------------------------------------- */

int sluice_netcore_init_with(struct netcore *nc, const struct sluice_transport_ops *tops)
{
	assert(tops && !nc->state);
	assert(nc->id >= 0 && nc->id < SLUICE_CORES_MAX);
	if (sluice_rt_init(&nc->rt, nc->b, SLUICE_RT_NET, nc->id) < 0)
		return -1;
	struct nstate *ns = calloc(1, sizeof *ns);
	if (!ns)
		return -1;
	nc->state = ns;
	if (sluice_proto_state_init(&ns->proto, &nc->b->cfg) < 0)
		return -1;
	nc->tops = tops;
	sluice_rt_timer_init(&ns->sweep, sweep_fire, nc);
	return tops->init(nc);
}

static const struct sluice_transport_ops *backend_named(const char *name)
{
	for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
		if (strcmp(backends[i]->name, name) == 0)
			return backends[i];
	SLOG_ERR("net", "sluice.transport: unknown transport '%s' (this broker has: " BACKEND_NAMES ")", name);
	return NULL;
}

int sluice_netcore_prepare(struct broker *b)
{
	const struct sluice_transport_ops *tops = backend_named(b->cfg.transport);
	if (!tops)
		return -1;
	if (!tops->prepare)
		return b->cfg.num_network_threads;
	int n = tops->prepare(b);
	assert(n < 0 || (n > 0 && n <= SLUICE_CORES_MAX));
	return n;
}

int sluice_netcore_init(struct netcore *nc)
{
	const struct sluice_transport_ops *tops = backend_named(nc->b->cfg.transport);
	return tops ? sluice_netcore_init_with(nc, tops) : -1;
}

int sluice_netcore_start(struct netcore *nc)
{
	assert(nc->state && nc->tops && nc->rt.id == nc->id);
	return sluice_rt_start(&nc->rt, &netcore_hooks, nc);
}

/* After every network core's sluice_rt_join (they share the backend's
 * listener, which core 0's fini closes). */
void sluice_netcore_fini(struct netcore *nc)
{
	if (nc->tops)
		nc->tops->fini(nc);
	sluice_rt_fini(&nc->rt);
	sluice_proto_snap_drop_cached(nc);
	sluice_proto_state_fini(nc->state);
	free(nc->state);
	nc->state = NULL;
}

/* ---- the plaintext stage ---------------------------------------------- */

static bool plain_inbound(struct conn *c, const uint8_t *wire, size_t n, const uint8_t **plain, size_t *plain_n)
{
	(void)c;
	*plain = wire;
	*plain_n = n;
	return true;
}

static int plain_outbound(struct conn *c, const struct sluice_send_range *plain, int n,
			  struct sluice_send_range *out, int out_max)
{
	(void)c;
	int k = n < out_max ? n : out_max;
	memcpy(out, plain, (size_t)k * sizeof *out);
	return k;
}

/* No SASL is configured (a later issue adds it): every API is allowed. */
static bool plain_allowed(const struct conn *c, int16_t api_key)
{
	(void)c;
	(void)api_key;
	return true;
}

const struct sluice_conn_stage sluice_stage_plaintext = {"plaintext", plain_inbound, plain_outbound, plain_allowed};
