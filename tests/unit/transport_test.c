/* The in-memory transport backend for tests (see transport_test.h). Bytes
 * fed to a connection wait in its inbound buffer and are copied, piece by
 * piece, into a scratch buffer the backend owns before each received
 * upcall; the scratch is scribbled over afterwards, so a core that kept a
 * pointer into it reads garbage (and the tests catch it). A send's ranges
 * are read when it finishes (on a later poll, or when released from a
 * hold), as a kernel reads a send's buffers while it is in flight: memory
 * the core gave back too early (a pinned extent released before its sent
 * upcall) shows up as wrong bytes. A send cut off by a close delivers
 * nothing. */
#include "transport_test.h"
#include "dataplane/req.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define TT_CONNS_MAX 256          /* connections open at once */
#define TT_SCRATCH_BYTES (1u << 20) /* the most one received upcall carries */

struct tt_conn {
	struct netcore *nc;
	struct conn *c;       /* NULL once the core was told it closed */
	uint8_t *in;          /* fed, not delivered */
	size_t in_len, in_cap, in_off;
	size_t piece;
	uint8_t *out;         /* sent by the core, not taken */
	size_t out_len, out_cap;
	size_t send_max;
	bool hold_sends, hold_closed;
	bool paused, closing, peer_closed;
	bool send_pending;    /* a send awaits its sent upcall */
	size_t send_bytes;    /* what it will report */
	struct sluice_send_range send[SLUICE_SEND_RANGES_MAX]; /* the send in flight's ranges */
	int send_n;
};

struct tt_stats tt_stats;
static struct tt_conn *conns[TT_CONNS_MAX];
static uint8_t scratch[TT_SCRATCH_BYTES];

static bool grow(uint8_t **buf, size_t *cap, size_t need)
{
	if (need <= *cap)
		return true;
	size_t want = *cap ? *cap : 4096;
	while (want < need)
		want *= 2;
	uint8_t *p = realloc(*buf, want);
	if (!p)
		return false;
	*buf = p;
	*cap = want;
	return true;
}

static int tt_init(struct netcore *nc)
{
	nc->tstate = conns;
	return 0;
}

static void tt_fini(struct netcore *nc) { nc->tstate = NULL; }

static void tt_recv_pause(struct conn *c, bool paused)
{
	struct tt_conn *t = c->tconn;
	t->paused = paused;
	if (paused)
		tt_stats.pause_calls++;
}

static int tt_send(struct conn *c, const struct sluice_send_range *r, int n)
{
	struct tt_conn *t = c->tconn;
	assert(!t->send_pending && n > 0 && n <= SLUICE_SEND_RANGES_MAX);
	tt_stats.send_calls++;
	if (t->closing)
		return -32; /* EPIPE */
	size_t total = 0;
	for (int i = 0; i < n; i++) {
		assert(r[i].base && r[i].len > 0);
		size_t take = r[i].len;
		if (t->send_max && total + take > t->send_max)
			take = t->send_max - total;
		total += take;
	}
	memcpy(t->send, r, (size_t)n * sizeof *r);
	t->send_n = n;
	t->send_pending = true;
	t->send_bytes = total;
	return 0;
}

/* The send in flight leaves: its first send_bytes bytes are read now. */
static bool send_finish(struct tt_conn *t)
{
	if (!grow(&t->out, &t->out_cap, t->out_len + t->send_bytes))
		return false;
	size_t left = t->send_bytes;
	for (int i = 0; i < t->send_n && left > 0; i++) {
		size_t take = t->send[i].len < left ? t->send[i].len : left;
		memcpy(t->out + t->out_len, t->send[i].base, take);
		t->out_len += take;
		left -= take;
	}
	return true;
}

static void tt_close(struct conn *c, bool abort)
{
	(void)abort;
	struct tt_conn *t = c->tconn;
	tt_stats.close_calls++;
	t->closing = true;
}

/* One connection's share of a poll: a finished send, then received bytes,
 * then, with nothing in flight, the close. */
static void poll_conn(struct tt_conn *t)
{
	/* A peer that closed with nothing left to deliver cuts a send off now
	 * (a held one too: nobody will read it). */
	if (!t->closing && t->peer_closed && t->in_off == t->in_len)
		t->closing = true;
	if (t->send_pending && (!t->hold_sends || t->closing)) {
		t->send_pending = false;
		tt_stats.upcalls++;
		bool ok = !t->closing && send_finish(t);
		sluice_netcore_sent(t->c, ok ? (ssize_t)t->send_bytes : t->closing ? -32 : -12 /* ENOMEM */);
		return;
	}
	if (!t->closing && !t->paused && t->in_off < t->in_len) {
		size_t n = t->in_len - t->in_off;
		if (t->piece && n > t->piece)
			n = t->piece;
		if (n > sizeof scratch)
			n = sizeof scratch;
		memcpy(scratch, t->in + t->in_off, n);
		t->in_off += n;
		tt_stats.upcalls++;
		sluice_netcore_received(t->c, scratch, n);
		memset(scratch, 0xa5, n); /* the core must have consumed or copied them */
		return;
	}
	if (!t->closing && t->peer_closed && t->in_off == t->in_len)
		t->closing = true;
	if (t->closing && !t->send_pending && !t->hold_closed) {
		struct conn *c = t->c;
		t->c = NULL;
		tt_stats.upcalls++;
		sluice_netcore_closed(c, t->peer_closed ? -104 /* ECONNRESET */ : 0);
	}
}

static void tt_poll(struct netcore *nc, int64_t wait_ms)
{
	(void)nc;
	(void)wait_ms; /* never sleeps: a test turns the core itself */
	for (int i = 0; i < TT_CONNS_MAX; i++)
		if (conns[i] && conns[i]->c)
			poll_conn(conns[i]);
}

const struct sluice_transport_ops sluice_transport_test = {
	.name = "test",
	.init = tt_init,
	.fini = tt_fini,
	.recv_pause = tt_recv_pause,
	.send = tt_send,
	.close = tt_close,
	.poll = tt_poll,
};

struct tt_conn *tt_connect(struct netcore *nc)
{
	int slot = 0;
	while (slot < TT_CONNS_MAX && conns[slot])
		slot++;
	struct tt_conn *t = slot < TT_CONNS_MAX ? calloc(1, sizeof *t) : NULL;
	if (!t)
		return NULL;
	t->nc = nc;
	tt_stats.upcalls++;
	t->c = sluice_netcore_accepted(nc, t, "127.0.0.1", 40000 + slot);
	if (!t->c) {
		free(t);
		return NULL;
	}
	assert(t->c->tconn == t);
	conns[slot] = t;
	return t;
}

struct conn *tt_core_conn(const struct tt_conn *t) { return t->c; }

void tt_feed(struct tt_conn *t, const void *bytes, size_t n)
{
	if (t->in_off == t->in_len)
		t->in_off = t->in_len = 0;
	if (!n || !grow(&t->in, &t->in_cap, t->in_len + n))
		return;
	memcpy(t->in + t->in_len, bytes, n);
	t->in_len += n;
}

void tt_set_piece(struct tt_conn *t, size_t piece_bytes) { t->piece = piece_bytes; }
void tt_hold_sends(struct tt_conn *t, bool hold) { t->hold_sends = hold; }
void tt_set_send_max(struct tt_conn *t, size_t send_max) { t->send_max = send_max; }
void tt_peer_close(struct tt_conn *t) { t->peer_closed = true; }
void tt_hold_closed(struct tt_conn *t, bool hold) { t->hold_closed = hold; }
bool tt_paused(const struct tt_conn *t) { return t->paused; }
bool tt_closing(const struct tt_conn *t) { return t->closing; }
bool tt_gone(const struct tt_conn *t) { return t->c == NULL; }
size_t tt_pending_in(const struct tt_conn *t) { return t->in_len - t->in_off; }

const uint8_t *tt_sent(const struct tt_conn *t, size_t *len)
{
	*len = t->out_len;
	return t->out;
}

void tt_sent_consume(struct tt_conn *t, size_t n)
{
	assert(n <= t->out_len);
	memmove(t->out, t->out + n, t->out_len - n);
	t->out_len -= n;
}

int tt_pump(struct netcore *nc, int max_turns)
{
	int turns = 0;
	while (turns < max_turns) {
		int64_t before = tt_stats.upcalls;
		bool waiting = sluice_netcore_replies_waiting(nc);
		sluice_netcore_turn(nc, 0);
		turns++;
		if (tt_stats.upcalls == before && !waiting)
			break;
	}
	return turns;
}

void tt_free(struct netcore *nc, struct tt_conn *t)
{
	if (!t)
		return;
	if (t->c) {
		t->hold_closed = false;
		t->hold_sends = false;
		t->peer_closed = true;
		t->in_off = t->in_len; /* what was not delivered never will be */
		tt_pump(nc, 1000);
	}
	assert(!t->c);
	for (int i = 0; i < TT_CONNS_MAX; i++)
		if (conns[i] == t)
			conns[i] = NULL;
	free(t->in);
	free(t->out);
	free(t);
}
