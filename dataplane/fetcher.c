/* The follower fetcher: a service of each storage core (service.h) that
 * keeps the partitions this core holds as followers up to date with their
 * leaders, as Kafka's ReplicaFetcherThread does. One connection per leader
 * broker per storage core, on kernel sockets driven through the core's own
 * io_uring (user_data: fetcher.h), carries Kafka replica Fetch requests
 * (v12: ReplicaId = this broker, and per partition CurrentLeaderEpoch,
 * FetchOffset = the follower's log end, LastFetchedEpoch) for every
 * partition this core follows from that leader. Each answer's batches are
 * appended verbatim, the leader's high watermark learned, a divergence
 * handed to the storage core to truncate, and the next request sent at
 * once: the leader holds it until data arrives (replica.fetch.wait.max.ms),
 * and its FetchOffsets are the positions that advance the leader's high
 * watermark.
 *
 * Completions only record what happened; the tick, once per loop turn,
 * moves every connection on (a completion may be reaped inside a log's
 * wait for its write, where no log may be touched). A connection's buffers
 * are sized once, when it is created, from replica.fetch.*: nothing is
 * allocated per request or per batch. A failed connection (refused, reset,
 * an answer that does not parse, no answer within
 * replica.socket.timeout.ms past the wait) is closed and tried again after
 * replica.fetch.backoff.ms; a partition whose answer carries an error
 * waits that long before it is asked for again.
 *
 * A partition that starts following a leader whose connection has a
 * request out would wait for that request's answer, which the leader holds
 * up to replica.fetch.wait.max.ms when the partitions it names are quiet:
 * while it does, the new partition's acks=all writes wait too (the new
 * leader's high watermark needs this follower). So the connection is
 * started over at once instead (the request abandoned, no backoff), and
 * the next request names the partition (conn_rejoin). For the same
 * reason a request asks the leader to hold it no longer than until the
 * first of its connection's partitions waiting out a backoff may be asked
 * for again; and a leader that does not know yet that it leads a partition
 * (it learns from the same metadata as this follower, maybe later) is asked
 * again after FETCH_LEADER_BEHIND_RETRY_MS, not replica.fetch.backoff.ms. */
#include "dataplane/fetcher.h"
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/service.h"
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Partitions one request names at most; the rest of a leader's wait for
 * the next round (the list rotates, so each gets its turn). */
#define FETCH_REQUEST_PARTITIONS_MAX 1024
/* A partition entry of a request: name (once per topic run), index,
 * epochs, offsets, sizes and tags. */
#define FETCH_REQUEST_ENTRY_BYTES (SLUICE_TOPIC_NAME_MAX + 64)
#define FETCH_REQUEST_BYTES_MAX (FETCH_REQUEST_PARTITIONS_MAX * FETCH_REQUEST_ENTRY_BYTES + 512)
/* An answer's bytes besides its records: per partition its name, offsets,
 * error, tags; and the frame's headers. */
#define FETCH_ANSWER_FRAMING_BYTES (FETCH_REQUEST_PARTITIONS_MAX * (SLUICE_TOPIC_NAME_MAX + 128) + 4096)
#define FETCH_API_KEY 1
#define FETCH_API_VERSION 12 /* flexible, LastFetchedEpoch and DivergingEpoch; names, not topic ids */
#define FETCH_TAG_DIVERGING_EPOCH 0
/* A leader not (yet) leading a partition at this follower's epoch: asked
 * again this soon, or after replica.fetch.backoff.ms if that is shorter. */
#define FETCH_LEADER_BEHIND_RETRY_MS 10
_Static_assert(FETCH_REQUEST_PARTITIONS_MAX <= UINT16_MAX, "a request's partition count");

enum { UD_CONNECT, UD_SEND, UD_RECV };
_Static_assert(UD_RECV < SLUICE_FETCHER_UD_KINDS, "every kind has a user_data value");

struct fconn;

struct sluice_follow {
	struct spart *p;
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	int32_t partition, leader, epoch;
	struct fconn *conn;                /* the leader's connection it is listed on, or NULL */
	struct sluice_follow *next, *prev; /* that list */
	int64_t retry_ms;                  /* not asked for before this (an error's backoff) */
	bool inflight;                     /* named by conn's request in flight (req_forget undoes it) */
};

enum conn_state { C_IDLE, C_CONNECTING, C_READY, C_SENDING, C_RECEIVING, C_CLOSING };

/* One leader's connection. Its buffers: out (a request, at most
 * FETCH_REQUEST_BYTES_MAX) and in (an answer, replica.fetch.response.max.bytes
 * of records beside the framing), allocated with the connection. */
struct fconn {
	int32_t leader; /* -1: a free slot */
	uint32_t slot;
	int fd;
	enum conn_state state;
	uint8_t ops;                          /* io_uring operations in flight */
	bool done[SLUICE_FETCHER_UD_KINDS];   /* completions recorded, not yet acted on */
	int32_t res[SLUICE_FETCHER_UD_KINDS];
	bool failing;                         /* failed since the last answer: log no more */
	bool rejoin;                          /* a partition joined with a request out: start over */
	struct sockaddr_in addr;              /* what connect points at while in flight */
	int64_t deadline_ms;                  /* the operation in flight must complete by then */
	int64_t retry_ms;                     /* IDLE: connect again not before this */
	int64_t wake_ms;                      /* READY, nothing asked: the first partition's backoff ends */
	int32_t correlation_id;
	struct kwr out;
	size_t sent;
	uint8_t *in;
	size_t in_len, in_cap;
	struct sluice_follow *head; /* the partitions following this leader */
	uint32_t n;
	/* The request in flight's partitions, in order; NULL for one that left
	 * (unfollowed, or moved to another leader) before the answer came. */
	struct sluice_follow *req[FETCH_REQUEST_PARTITIONS_MAX];
	uint32_t req_n;
	int32_t req_epoch[FETCH_REQUEST_PARTITIONS_MAX];      /* CurrentLeaderEpoch asked with */
	int64_t req_offset[FETCH_REQUEST_PARTITIONS_MAX];     /* FetchOffset */
	int64_t req_log_start[FETCH_REQUEST_PARTITIONS_MAX];
	int32_t req_last_epoch[FETCH_REQUEST_PARTITIONS_MAX]; /* LastFetchedEpoch */
};

struct fetcher {
	struct fconn *conns[SLUICE_FETCHER_LEADERS_MAX];
	uint32_t conn_n;            /* slots in use */
	bool pending;               /* completions recorded since the last tick */
	char client_id[48];
};

static struct fetcher *fetcher_of(struct storecore *sc) { return sc->fetcher; }

static const struct sluice_config *cfg_of(const struct storecore *sc) { return &sc->b->cfg; }

/* ---- follows --------------------------------------------------------------- */

/* f leaves its connection's request in flight: the answer's entry for it
 * is dropped, and it may be asked for elsewhere (a new leader) at once. */
static void req_forget(struct fconn *c, struct sluice_follow *f)
{
	for (uint32_t i = 0; f->inflight && i < c->req_n; i++)
		if (c->req[i] == f) {
			c->req[i] = NULL;
			f->inflight = false;
		}
	assert(!f->inflight);
}

static void list_remove(struct sluice_follow *f)
{
	struct fconn *c = f->conn;
	if (!c)
		return;
	if (f->inflight)
		req_forget(c, f);
	if (f->prev)
		f->prev->next = f->next;
	else
		c->head = f->next;
	if (f->next)
		f->next->prev = f->prev;
	f->next = f->prev = NULL;
	f->conn = NULL;
	assert(c->n > 0);
	c->n--;
}

static void list_add(struct fconn *c, struct sluice_follow *f)
{
	assert(!f->conn);
	f->conn = c;
	f->prev = NULL;
	f->next = c->head;
	if (c->head)
		c->head->prev = f;
	c->head = f;
	c->n++;
}

/* The connection slot for leader, created (with its buffers) when absent;
 * NULL when every slot is taken or memory is short (the partition waits). */
static struct fconn *conn_for(struct storecore *sc, int32_t leader)
{
	struct fetcher *ft = fetcher_of(sc);
	int free_slot = -1;
	for (int i = 0; i < SLUICE_FETCHER_LEADERS_MAX; i++) {
		if (ft->conns[i] && ft->conns[i]->leader == leader)
			return ft->conns[i];
		if (free_slot < 0 && !ft->conns[i])
			free_slot = i;
	}
	if (free_slot < 0)
		return NULL;
	const struct sluice_config *cfg = cfg_of(sc);
	size_t records = (size_t)cfg->replica_fetch_response_max_bytes;
	size_t batch = (size_t)(cfg->message_max_bytes > cfg->replica_fetch_max_bytes ? cfg->message_max_bytes
										 : cfg->replica_fetch_max_bytes);
	struct fconn *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	/* The leader may exceed the records' limit by one batch (the first is
	 * always whole), itself at most message.max.bytes. */
	c->in_cap = records + batch + FETCH_ANSWER_FRAMING_BYTES;
	c->in = malloc(c->in_cap);
	kwr_init(&c->out, FETCH_REQUEST_BYTES_MAX, FETCH_REQUEST_BYTES_MAX);
	if (!c->in || c->out.err) {
		free(c->in);
		kwr_free(&c->out);
		free(c);
		return NULL;
	}
	c->leader = leader;
	c->slot = (uint32_t)free_slot;
	c->fd = -1;
	c->state = C_IDLE;
	c->wake_ms = INT64_MAX;
	ft->conns[free_slot] = c;
	ft->conn_n++;
	return c;
}

void sluice_fetcher_follow(struct storecore *sc, struct sluice_follow **fp, struct spart *p, const char *topic,
			   int32_t partition, int32_t leader, int32_t epoch)
{
	struct sluice_follow *f = *fp;
	if (!f) {
		f = calloc(1, sizeof *f);
		if (!f) {
			SLOG_ERR("replication", "%s-%d: out of memory: not following", topic, partition);
			return;
		}
		f->p = p;
		snprintf(f->topic, sizeof f->topic, "%s", topic);
		f->partition = partition;
		f->leader = -1;
		*fp = f;
	}
	assert(f->p == p && f->partition == partition);
	f->epoch = epoch;
	f->retry_ms = 0;
	if (f->leader == leader && (f->conn || leader < 0))
		return;
	list_remove(f);
	f->leader = leader;
	if (leader < 0 || leader == sc->b->cfg.node_id)
		return;
	struct fconn *c = conn_for(sc, leader);
	if (!c) {
		SLOG_ERR("replication", "%s-%d: no connection to leader %d (%d leaders at most per storage core, or out "
			 "of memory): not following", topic, partition, leader, SLUICE_FETCHER_LEADERS_MAX);
		return;
	}
	list_add(c, f);
	/* The request out does not name it: the next tick, at once, starts over. */
	if (c->state == C_SENDING || c->state == C_RECEIVING)
		c->rejoin = fetcher_of(sc)->pending = true;
}

void sluice_fetcher_unfollow(struct storecore *sc, struct sluice_follow **fp)
{
	(void)sc;
	struct sluice_follow *f = *fp;
	if (!f)
		return;
	*fp = NULL;
	list_remove(f); /* and out of the request in flight */
	assert(!f->inflight);
	free(f);
}

/* ---- io_uring ---------------------------------------------------------------- */

void sluice_fetcher_complete(struct storecore *sc, uint64_t ud, int res)
{
	struct fetcher *ft = fetcher_of(sc);
	assert(ud >= SLUICE_FETCHER_UD_MIN && ud < SLUICE_FETCHER_UD_END);
	uint64_t i = (ud - SLUICE_FETCHER_UD_MIN) / SLUICE_FETCHER_UD_KINDS;
	int kind = (int)((ud - SLUICE_FETCHER_UD_MIN) % SLUICE_FETCHER_UD_KINDS);
	struct fconn *c = i < SLUICE_FETCHER_LEADERS_MAX ? ft->conns[i] : NULL;
	assert(c && c->ops > 0 && !c->done[kind]);
	c->ops--;
	c->done[kind] = true;
	c->res[kind] = res;
	ft->pending = true;
}

static struct io_uring_sqe *sqe_get(struct storecore *sc)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&sc->ring);
	if (!sqe) {
		io_uring_submit(&sc->ring);
		sqe = io_uring_get_sqe(&sc->ring);
	}
	return sqe;
}

static uint64_t ud_of(const struct fconn *c, int kind)
{
	return SLUICE_FETCHER_UD_MIN + (uint64_t)c->slot * SLUICE_FETCHER_UD_KINDS + (uint64_t)kind;
}

/* Queue one operation; false when the ring has no room even after a submit. */
static bool submit(struct storecore *sc, struct fconn *c, int kind)
{
	struct io_uring_sqe *sqe = sqe_get(sc);
	if (!sqe)
		return false;
	switch (kind) {
	case UD_CONNECT:
		io_uring_prep_connect(sqe, c->fd, (const struct sockaddr *)&c->addr, sizeof c->addr);
		break;
	case UD_SEND:
		assert(c->sent < c->out.len);
		io_uring_prep_send(sqe, c->fd, c->out.buf + c->sent, c->out.len - c->sent, MSG_NOSIGNAL);
		break;
	default:
		assert(kind == UD_RECV && c->in_len < c->in_cap);
		io_uring_prep_recv(sqe, c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		break;
	}
	io_uring_sqe_set_data64(sqe, ud_of(c, kind));
	c->done[kind] = false;
	c->ops++;
	return true;
}

/* ---- the connection's life --------------------------------------------------- */

/* The requests' partitions are free to be asked for again. */
static void req_release(struct fconn *c)
{
	for (uint32_t i = 0; i < c->req_n; i++)
		if (c->req[i])
			c->req[i]->inflight = false;
	c->req_n = 0;
}

/* Give up the connection: what is in flight is cancelled, the socket shut
 * down, and once every operation has completed it is closed (the tick);
 * the next connect waits replica.fetch.backoff.ms. */
static void conn_fail(struct storecore *sc, struct fconn *c, const char *why, int err)
{
	if (!c->failing)
		SLOG_WARN("replication", "fetching from broker %d: %s%s%s; retrying in %d ms", c->leader, why,
			  err ? ": " : "", err ? strerror(err) : "", cfg_of(sc)->replica_fetch_backoff_ms);
	c->failing = true;
	req_release(c);
	c->retry_ms = sluice_now_ms() + cfg_of(sc)->replica_fetch_backoff_ms;
	if (c->fd >= 0 && c->ops > 0) {
		for (int k = 0; k < SLUICE_FETCHER_UD_KINDS; k++) {
			struct io_uring_sqe *sqe = sqe_get(sc);
			if (!sqe)
				break;
			io_uring_prep_cancel64(sqe, ud_of(c, k), 0);
			io_uring_sqe_set_data64(sqe, 0); /* the cancel's own completion is ignored */
		}
		(void)shutdown(c->fd, SHUT_RDWR);
		c->state = C_CLOSING;
		return;
	}
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = C_IDLE;
}

/* A partition joined c while its request was out: the request is
 * abandoned and the connection started over with no backoff (the leader is
 * well: this is no failure), so that the next request, which names the
 * partition, goes out as soon as the new connection is up instead of after
 * the old request's answer (up to replica.fetch.wait.max.ms). */
static void conn_rejoin(struct storecore *sc, struct fconn *c, int64_t now)
{
	c->rejoin = false;
	if (c->state != C_SENDING && c->state != C_RECEIVING)
		return; /* the answer came meanwhile: the next request names it */
	SLOG_DEBUG("replication", "fetching from broker %d: partitions joined; starting the connection over", c->leader);
	bool failing = c->failing;
	c->failing = true; /* conn_fail says nothing: nothing failed */
	conn_fail(sc, c, "restart", 0);
	c->failing = failing;
	c->retry_ms = now;
}

/* The leader's endpoint from the metadata (an unfenced broker's). */
static bool leader_address(struct storecore *sc, int32_t leader, struct sockaddr_in *out)
{
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	bool found = false;
	memset(out, 0, sizeof *out);
	for (uint32_t i = 0; i < snap->broker_n && !found; i++) {
		const struct sluice_meta_broker *mb = &snap->brokers[i];
		if (mb->node_id != leader)
			continue;
		out->sin_family = AF_INET;
		out->sin_port = htons((uint16_t)mb->port);
		found = inet_pton(AF_INET, mb->host, &out->sin_addr) == 1;
		if (!found) {
			/* A name: resolved here, on the core (once per connect; a
			 * local cluster's names come from /etc/hosts). */
			struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *ai = NULL;
			if (getaddrinfo(mb->host, NULL, &hints, &ai) == 0 && ai) {
				out->sin_addr = ((struct sockaddr_in *)(void *)ai->ai_addr)->sin_addr;
				found = true;
			}
			if (ai)
				freeaddrinfo(ai);
		}
	}
	b->meta.ops->release(b->meta.self, snap);
	return found;
}

static void conn_connect(struct storecore *sc, struct fconn *c, int64_t now)
{
	assert(c->state == C_IDLE && c->fd < 0);
	if (!leader_address(sc, c->leader, &c->addr)) {
		c->retry_ms = now + cfg_of(sc)->replica_fetch_backoff_ms; /* fenced or unknown: the metadata will say */
		return;
	}
	c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (c->fd < 0) {
		conn_fail(sc, c, "socket", errno);
		return;
	}
	int one = 1;
	(void)setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->in_len = 0;
	c->state = C_CONNECTING;
	c->deadline_ms = now + cfg_of(sc)->replica_socket_timeout_ms;
	if (!submit(sc, c, UD_CONNECT))
		conn_fail(sc, c, "no room in the storage core's ring", 0);
}

/* ---- the request ------------------------------------------------------------- */

/* Whether f may be asked for now; its position in *offset, *last_epoch,
 * *log_start. */
static bool follow_ready(struct storecore *sc, const struct fconn *c, const struct sluice_follow *f, int64_t now,
			 int64_t *offset, int32_t *last_epoch, int64_t *log_start)
{
	if (f->inflight || now < f->retry_ms || !sluice_store_follows(f->p, c->leader, f->epoch))
		return false;
	if (sluice_store_follower_throttled(sc, f->p, now))
		return false; /* asked again on a later turn, once the rate allows */
	return sluice_store_follower_position(f->p, offset, last_epoch, log_start);
}

/* Topics of req[] in order: runs of one name (a topic's partitions share
 * its entry when they are neighbours in the list). */
static int32_t topic_runs(const struct fconn *c)
{
	int32_t n = 0;
	for (uint32_t i = 0; i < c->req_n; i++)
		n += i == 0 || strcmp(c->req[i]->topic, c->req[i - 1]->topic) != 0;
	return n;
}

/* The request's body after its header: Kafka's FetchRequest v12 as a
 * replica sends it (no session, no rack). */
static void request_body(struct storecore *sc, struct fconn *c, int32_t max_wait_ms, const int64_t *offsets,
			 const int32_t *last_epochs, const int64_t *log_starts)
{
	const struct sluice_config *cfg = cfg_of(sc);
	struct kwr *w = &c->out;
	kwr_i32(w, cfg->node_id); /* ReplicaId */
	kwr_i32(w, max_wait_ms);
	kwr_i32(w, cfg->replica_fetch_min_bytes);
	kwr_i32(w, cfg->replica_fetch_response_max_bytes);
	kwr_i8(w, 0);  /* IsolationLevel: READ_UNCOMMITTED, as replicas */
	kwr_i32(w, 0); /* SessionId */
	kwr_i32(w, -1); /* SessionEpoch: FINAL, no session */
	kwr_array(w, true, topic_runs(c));
	for (uint32_t i = 0, end; i < c->req_n; i = end) {
		end = i + 1;
		while (end < c->req_n && strcmp(c->req[end]->topic, c->req[i]->topic) == 0)
			end++;
		kwr_string(w, true, c->req[i]->topic, (int32_t)strlen(c->req[i]->topic));
		kwr_array(w, true, (int32_t)(end - i));
		for (uint32_t k = i; k < end; k++) {
			kwr_i32(w, c->req[k]->partition);
			kwr_i32(w, c->req_epoch[k]); /* CurrentLeaderEpoch */
			kwr_i64(w, offsets[k]);      /* FetchOffset: the log end */
			kwr_i32(w, last_epochs[k]);  /* LastFetchedEpoch */
			kwr_i64(w, log_starts[k]);
			kwr_i32(w, cfg->replica_fetch_max_bytes);
			kwr_tags_empty(w);
		}
		kwr_tags_empty(w);
	}
	kwr_array(w, true, 0);      /* ForgottenTopicsData */
	kwr_string(w, true, "", 0); /* RackId */
	kwr_tags_empty(w);
}

/* Pick the partitions to ask for (from the head of the list, which then
 * rotates past them) and send the request; nothing to ask for: stay
 * READY until a backoff ends or a partition joins. */
static void conn_request(struct storecore *sc, struct fconn *c, int64_t now)
{
	int64_t *offsets = c->req_offset, *log_starts = c->req_log_start;
	int32_t *last_epochs = c->req_last_epoch;
	assert(c->state == C_READY && c->req_n == 0);
	c->wake_ms = INT64_MAX;
	/* The FetchOffsets are this replica's positions, which the leader
	 * counts as replicated (acks=all): the previous answer's records must
	 * be written first (their writes went out with this turn's group
	 * commits; the completions bring the core back here). */
	for (struct sluice_follow *g = c->head; g; g = g->next)
		if (sluice_store_follower_unwritten(g->p))
			return;
	struct sluice_follow *f = c->head, *last = NULL;
	for (; f && c->req_n < FETCH_REQUEST_PARTITIONS_MAX; f = f->next) {
		uint32_t k = c->req_n;
		if (!follow_ready(sc, c, f, now, &offsets[k], &last_epochs[k], &log_starts[k]))
			continue;
		c->req[k] = f;
		c->req_epoch[k] = f->epoch;
		c->req_n++;
		last = f;
	}
	/* The first backoff of a partition left out to end: nothing asked,
	 * the core wakes then (fetcher_next_deadline); else the leader holds
	 * the request no longer than until then. */
	int64_t next_retry = INT64_MAX;
	for (struct sluice_follow *g = c->head; g; g = g->next)
		if (!g->inflight && g->retry_ms > now && g->retry_ms < next_retry)
			next_retry = g->retry_ms;
	if (c->req_n == 0) {
		c->wake_ms = next_retry;
		return;
	}
	int64_t max_wait = cfg_of(sc)->replica_fetch_wait_max_ms;
	if (next_retry - now < max_wait)
		max_wait = next_retry - now;
	/* Fairness: the partitions after the last one asked for go first next time. */
	if (last && last->next) {
		struct sluice_follow *first = c->head, *tail = last->next;
		while (tail->next)
			tail = tail->next;
		c->head = last->next;
		c->head->prev = NULL;
		last->next = NULL;
		tail->next = first;
		first->prev = tail;
	}
	struct kwr *w = &c->out;
	kwr_reset(w);
	kwr_i32(w, 0); /* size, patched */
	kwr_i16(w, FETCH_API_KEY);
	kwr_i16(w, FETCH_API_VERSION);
	kwr_i32(w, ++c->correlation_id);
	kwr_string(w, false, fetcher_of(sc)->client_id, (int32_t)strlen(fetcher_of(sc)->client_id));
	kwr_tags_empty(w);
	request_body(sc, c, (int32_t)max_wait, offsets, last_epochs, log_starts);
	if (w->err) {
		req_release(c);
		conn_fail(sc, c, "request larger than its buffer", 0);
		return;
	}
	kwr_patch_i32(w, 0, (int32_t)(w->len - 4));
	for (uint32_t i = 0; i < c->req_n; i++)
		c->req[i]->inflight = true;
	c->sent = 0;
	c->in_len = 0;
	c->state = C_SENDING;
	c->deadline_ms = now + cfg_of(sc)->replica_fetch_wait_max_ms + cfg_of(sc)->replica_socket_timeout_ms;
	if (!submit(sc, c, UD_SEND))
		conn_fail(sc, c, "no room in the storage core's ring", 0);
}

/* ---- the answer ---------------------------------------------------------------- */

/* One partition of a FetchResponse v12 (Kafka's PartitionData). */
struct fetch_answer {
	int32_t partition;
	int16_t error;
	int64_t high_watermark;
	int64_t log_start;
	const uint8_t *records;
	int32_t records_len; /* -1: null */
	int32_t diverging_epoch; /* -1: none */
	int64_t diverging_end;
};

/* The partition's tagged fields: DivergingEpoch (tag 0) read, the rest skipped. */
static void answer_tags(struct krd *rd, struct fetch_answer *a)
{
	uint32_t n = krd_uvarint(rd);
	if (n > SLUICE_KAFKA_TAGGED_FIELDS_MAX) {
		krd_fail(rd, "tagged field count");
		return;
	}
	for (uint32_t i = 0; i < n && !rd->err; i++) {
		uint32_t tag = krd_uvarint(rd), size = krd_uvarint(rd);
		if (rd->err || size > krd_left(rd)) {
			krd_fail(rd, "tagged field size");
			return;
		}
		if (tag == FETCH_TAG_DIVERGING_EPOCH) {
			struct krd sub;
			krd_init(&sub, rd->p, size);
			a->diverging_epoch = krd_i32(&sub);
			a->diverging_end = krd_i64(&sub);
			krd_tags_skip(&sub);
			if (sub.err || a->diverging_end < 0) {
				krd_fail(rd, "DivergingEpoch");
				return;
			}
		}
		krd_skip(rd, size);
	}
}

static bool answer_partition(struct krd *rd, struct fetch_answer *a)
{
	memset(a, 0, sizeof *a);
	a->diverging_epoch = -1;
	a->partition = krd_i32(rd);
	a->error = krd_i16(rd);
	a->high_watermark = krd_i64(rd);
	(void)krd_i64(rd); /* LastStableOffset */
	a->log_start = krd_i64(rd);
	int32_t aborted = krd_array(rd, true, 17); /* ProducerId, FirstOffset, tags */
	for (int32_t i = 0; i < aborted && !rd->err; i++) {
		krd_skip(rd, 16);
		krd_tags_skip(rd);
	}
	(void)krd_i32(rd); /* PreferredReadReplica */
	a->records_len = krd_bytes(rd, true, &a->records);
	answer_tags(rd, a);
	return !rd->err;
}

/* The request's entry for topic/partition, or -1; answers come in request
 * order, so the search starts after the last one found. */
static int32_t req_find(const struct fconn *c, uint32_t *cursor, struct kstr topic, int32_t partition)
{
	for (uint32_t k = 0; k < c->req_n; k++) {
		uint32_t i = (*cursor + k) % c->req_n;
		const struct sluice_follow *f = c->req[i];
		if (f && f->partition == partition && topic.ptr && strlen(f->topic) == (size_t)topic.len &&
		    memcmp(f->topic, topic.ptr, (size_t)topic.len) == 0) {
			*cursor = i + 1;
			return (int32_t)i;
		}
	}
	return -1;
}

/* What the leader answered for request entry i: its records appended, or
 * the log truncated where it diverged, or (an error) the partition left
 * alone for replica.fetch.backoff.ms. An answer for a partition that has
 * been unfollowed, or follows another leader or epoch since, is dropped. */
static void answer_apply(struct storecore *sc, struct fconn *c, uint32_t i, const struct fetch_answer *a, int64_t now)
{
	struct sluice_follow *f = c->req[i];
	int32_t backoff = cfg_of(sc)->replica_fetch_backoff_ms;
	assert(f && f->conn == c);
	if (!sluice_store_follows(f->p, c->leader, c->req_epoch[i]))
		return; /* another leader or epoch since the request */
	int16_t e = a->error;
	if (!e && a->diverging_epoch >= 0) {
		if (sluice_store_follower_diverged(sc, f->p, a->diverging_epoch, a->diverging_end) < 0)
			f->retry_ms = now + backoff;
		return;
	}
	if (!e) {
		size_t len = a->records_len > 0 ? (size_t)a->records_len : 0;
		sluice_store_follower_fetched(sc, f->p, len, now);
		e = sluice_store_follower_append(sc, f->p, a->records, len, a->high_watermark, a->log_start);
	}
	/* Out of range: below the leader's log start (retention went past this
	 * replica) start over there, as Kafka's truncateFullyAndStartAt; past
	 * its end, truncate by epoch (sluice_store_follower_out_of_range). Only
	 * when nothing changed does it back off: retrying as it is would get
	 * the same answer for ever. */
	if (e == KERR_OFFSET_OUT_OF_RANGE &&
	    sluice_store_follower_out_of_range(sc, f->p, c->req_offset[i], c->req_last_epoch[i], a->log_start) == 0)
		return;
	if (!e)
		return;
	bool leader_behind = e == KERR_NOT_LEADER_OR_FOLLOWER || e == KERR_UNKNOWN_LEADER_EPOCH ||
			     e == KERR_UNKNOWN_TOPIC_OR_PARTITION;
	f->retry_ms = now + (leader_behind && backoff > FETCH_LEADER_BEHIND_RETRY_MS ? FETCH_LEADER_BEHIND_RETRY_MS
										 : backoff);
	if (leader_behind || e == KERR_FENCED_LEADER_EPOCH)
		SLOG_DEBUG("replication", "%s-%d: broker %d answered %s (metadata to follow)", f->topic, f->partition,
			   c->leader, sluice_kafka_error_name(e));
	else
		SLOG_WARN("replication", "%s-%d: fetch at %" PRId64 " from broker %d: %s; retrying in %d ms", f->topic,
			  f->partition, c->req_offset[i], c->leader, sluice_kafka_error_name(e), backoff);
}

/* A whole answer in c->in (after its size): false when it does not parse
 * (what parsed before the fault is applied: each partition stands alone). */
static bool answer_handle(struct storecore *sc, struct fconn *c, size_t size, int64_t now)
{
	struct krd rd;
	krd_init(&rd, c->in + 4, size);
	int32_t corr = krd_i32(&rd);
	krd_tags_skip(&rd);
	if (rd.err || corr != c->correlation_id)
		return false;
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int16_t top = krd_i16(&rd);
	(void)krd_i32(&rd); /* SessionId */
	int32_t topics = krd_array(&rd, true, 2);
	uint32_t cursor = 0;
	for (int32_t t = 0; t < topics && !rd.err; t++) {
		struct kstr name = krd_string(&rd, true);
		int32_t parts = krd_array(&rd, true, 37);
		for (int32_t k = 0; k < parts && !rd.err; k++) {
			struct fetch_answer a;
			if (!answer_partition(&rd, &a))
				break;
			if (top)
				a.error = top;
			int32_t i = req_find(c, &cursor, name, a.partition);
			if (i >= 0)
				answer_apply(sc, c, (uint32_t)i, &a, now);
		}
		krd_tags_skip(&rd);
	}
	krd_tags_skip(&rd);
	if (top && !rd.err && topics <= 0) /* a request-level error names no partition */
		for (uint32_t i = 0; i < c->req_n; i++)
			if (c->req[i])
				c->req[i]->retry_ms = now + cfg_of(sc)->replica_fetch_backoff_ms;
	return !rd.err && krd_left(&rd) == 0;
}

/* Bytes received: a whole answer is handled and the next request goes out
 * on the next step; else receive more. */
static void conn_received(struct storecore *sc, struct fconn *c, int64_t now)
{
	if (c->in_len >= 4) {
		uint32_t size = kbe32(c->in);
		if (size < 8 || size > c->in_cap - 4) {
			conn_fail(sc, c, "answer larger than replica.fetch.response.max.bytes allows", 0);
			return;
		}
		if (c->in_len >= 4 + (size_t)size) {
			bool ok = c->in_len == 4 + (size_t)size && answer_handle(sc, c, size, now);
			req_release(c);
			if (!ok) {
				conn_fail(sc, c, "malformed answer", 0);
				return;
			}
			c->failing = false;
			c->state = C_READY;
			return;
		}
	}
	if (!submit(sc, c, UD_RECV))
		conn_fail(sc, c, "no room in the storage core's ring", 0);
}

/* ---- the tick ---------------------------------------------------------------------- */

/* Act on the completions recorded for c. */
static void conn_completions(struct storecore *sc, struct fconn *c, int64_t now)
{
	if (c->done[UD_CONNECT]) {
		c->done[UD_CONNECT] = false;
		if (c->state == C_CONNECTING && c->res[UD_CONNECT] < 0)
			conn_fail(sc, c, "connect", -c->res[UD_CONNECT]);
		else if (c->state == C_CONNECTING)
			c->state = C_READY;
	}
	if (c->done[UD_SEND]) {
		c->done[UD_SEND] = false;
		int res = c->res[UD_SEND];
		if (c->state == C_SENDING && res <= 0) {
			conn_fail(sc, c, "send", res < 0 ? -res : 0);
		} else if (c->state == C_SENDING) {
			c->sent += (size_t)res;
			c->state = c->sent < c->out.len ? C_SENDING : C_RECEIVING;
			if (!submit(sc, c, c->state == C_SENDING ? UD_SEND : UD_RECV))
				conn_fail(sc, c, "no room in the storage core's ring", 0);
		}
	}
	if (c->done[UD_RECV]) {
		c->done[UD_RECV] = false;
		int res = c->res[UD_RECV];
		if (c->state != C_RECEIVING)
			return;
		if (res == -EINTR || res == -EAGAIN) {
			if (!submit(sc, c, UD_RECV))
				conn_fail(sc, c, "no room in the storage core's ring", 0);
		} else if (res <= 0) {
			conn_fail(sc, c, res == 0 ? "the leader closed the connection" : "receive", res < 0 ? -res : 0);
		} else {
			c->in_len += (size_t)res;
			assert(c->in_len <= c->in_cap);
			conn_received(sc, c, now);
		}
	}
}

/* Free an idle connection nobody follows through any more. */
static void conn_free(struct fetcher *ft, struct fconn *c)
{
	assert(c->n == 0 && c->ops == 0 && c->req_n == 0);
	if (c->fd >= 0)
		close(c->fd);
	ft->conns[c->slot] = NULL;
	assert(ft->conn_n > 0);
	ft->conn_n--;
	free(c->in);
	kwr_free(&c->out);
	free(c);
}

static void conn_step(struct storecore *sc, struct fconn *c, int64_t now)
{
	if (c->state == C_CLOSING) {
		if (c->ops > 0)
			return;
		close(c->fd);
		c->fd = -1;
		memset(c->done, 0, sizeof c->done);
		c->state = C_IDLE;
	}
	conn_completions(sc, c, now);
	if (c->rejoin)
		conn_rejoin(sc, c, now);
	bool waiting = c->state == C_CONNECTING || c->state == C_SENDING || c->state == C_RECEIVING;
	if (waiting && now >= c->deadline_ms)
		conn_fail(sc, c, "no answer in time", ETIMEDOUT);
	if (c->n == 0 && (c->state == C_IDLE || c->state == C_READY) && c->ops == 0) {
		conn_free(fetcher_of(sc), c);
		return;
	}
	if (c->state == C_IDLE && now >= c->retry_ms)
		conn_connect(sc, c, now);
	if (c->state == C_READY)
		conn_request(sc, c, now);
}

static void fetcher_tick(struct storecore *sc, int64_t now_ms)
{
	struct fetcher *ft = fetcher_of(sc);
	ft->pending = false;
	for (int i = 0; i < SLUICE_FETCHER_LEADERS_MAX && ft->conn_n > 0; i++)
		if (ft->conns[i])
			conn_step(sc, ft->conns[i], now_ms);
}

/* Completions waiting: now; else the soonest deadline of an operation in
 * flight, of a connect waiting out its backoff, or of a partition's
 * backoff on a connection that has nothing else to ask (a leader that did
 * not know yet that it leads is asked again FETCH_LEADER_BEHIND_RETRY_MS
 * later, not at the core's next idle turn, up to STORE_SLEEP_MS_MAX away). */
static int64_t fetcher_next_deadline(struct storecore *sc)
{
	struct fetcher *ft = fetcher_of(sc);
	if (ft->pending)
		return 0;
	int64_t d = INT64_MAX;
	for (int i = 0; i < SLUICE_FETCHER_LEADERS_MAX && ft->conn_n > 0; i++) {
		const struct fconn *c = ft->conns[i];
		if (!c)
			continue;
		if (c->state == C_CONNECTING || c->state == C_SENDING || c->state == C_RECEIVING)
			d = c->deadline_ms < d ? c->deadline_ms : d;
		else if (c->state == C_IDLE && c->n > 0)
			d = c->retry_ms < d ? c->retry_ms : d;
		else if (c->state == C_READY && c->n > 0)
			d = c->wake_ms < d ? c->wake_ms : d;
	}
	return d;
}

/* ---- the service ------------------------------------------------------------------- */

static int fetcher_init(struct storecore *sc)
{
	struct fetcher *ft = calloc(1, sizeof *ft);
	if (!ft)
		return -1;
	snprintf(ft->client_id, sizeof ft->client_id, "sluice-broker-%d-fetcher-%d", sc->b->cfg.node_id, sc->id);
	sc->fetcher = ft;
	return 0;
}

/* At the core's stop (its ring is drained and about to go): sockets
 * closed, every follow freed (the partitions are closing too). */
static void fetcher_fini(struct storecore *sc)
{
	struct fetcher *ft = fetcher_of(sc);
	if (!ft)
		return;
	for (int i = 0; i < SLUICE_FETCHER_LEADERS_MAX; i++) {
		struct fconn *c = ft->conns[i];
		if (!c)
			continue;
		for (struct sluice_follow *f = c->head, *next; f; f = next) {
			next = f->next;
			free(f); /* the partitions' pointers to them are not used again */
		}
		if (c->fd >= 0)
			close(c->fd);
		free(c->in);
		kwr_free(&c->out);
		free(c);
	}
	free(ft);
	sc->fetcher = NULL;
}

static void fetcher_handle(struct storecore *sc, struct partop *op)
{
	(void)sc;
	(void)op;
	assert(!"the fetcher takes no partition operations");
}

static void fetcher_written(struct storecore *sc, struct partop *op, bool ok)
{
	(void)sc;
	(void)op;
	(void)ok;
}

const struct sluice_store_service_ops sluice_fetcher_service = {
	.name = "fetcher",
	.partop_kind = 0, /* none: every partop kind is 1 or more */
	.init = fetcher_init,
	.fini = fetcher_fini,
	.handle = fetcher_handle,
	.tick = fetcher_tick,
	.next_deadline = fetcher_next_deadline,
	.written = fetcher_written,
};
