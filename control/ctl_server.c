/* The sluice-controller's server: the Kafka-protocol listener on the
 * controller's one libuv loop, the requests' life, and the serialisation
 * of the quorum's proposals.
 *
 * Connections: frames are cut from a per-connection input buffer
 * (4-byte size, request header v1/v2); a connection serves one request at
 * a time, in arrival order, as Kafka does, and queues the frames it read
 * meanwhile up to a bound (then stops reading). A frame that lies about
 * its size, an unknown api key or version, or a body that does not decode
 * closes the connection after a log line naming the API, version and
 * byte; nothing a client sends can reach an assertion.
 *
 * Write requests (registration, heartbeat, the admin writes brokers
 * forward, AllocateProducerIds, AlterPartition) wait in one FIFO. Only the
 * active controller takes them: the head is decided by the rules
 * (control/ctl_logic.h) against the committed image, its records are
 * proposed as one Raft command, and the next is decided only once that
 * command is applied, so that every decision sees the image its records
 * apply to. A request whose entries do not fit one command (thousands of
 * topics) is proposed in parts, each decided after the previous one
 * committed. A decision without records (most heartbeats) is answered at
 * once. Each entry of a request carries its own outcome; a write request
 * is answered once all its parts are settled, with the offset of its
 * last record (the Sluice tag 1000, SluiceMetadataOffset) so that a
 * broker can wait until its own image shows the change.
 *
 * The metadata log (Fetch of __cluster_metadata) long-polls: a fetch with
 * nothing new is parked until the quorum applies records or its wait
 * ends. FetchSnapshot serves the image encoded as record batches, built
 * once per image offset and kept for the pages that follow. */
#include "control/ctl_server.h"
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "common/sdnotify.h"
#include "control/broker_config.h"
#include "control/ctl_logic.h"
#include "control/ctl_metrics.h"
#include "control/image.h"
#include "control/meta.h"
#include "control/mlog.h"
#include "control/quorum.h"
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Kafka's api keys served here (the numbering is Kafka's). */
enum api_key {
	API_FETCH = 1,
	API_API_VERSIONS = 18,
	API_CREATE_TOPICS = 19,
	API_DELETE_TOPICS = 20,
	API_DESCRIBE_CONFIGS = 32,
	API_ALTER_CONFIGS = 33,
	API_CREATE_PARTITIONS = 37,
	API_INCREMENTAL_ALTER_CONFIGS = 44,
	API_ALTER_PARTITION_REASSIGNMENTS = 45,
	API_LIST_PARTITION_REASSIGNMENTS = 46,
	API_DESCRIBE_QUORUM = 55,
	API_ALTER_PARTITION = 56,
	API_FETCH_SNAPSHOT = 59,
	API_DESCRIBE_CLUSTER = 60,
	API_BROKER_REGISTRATION = 62,
	API_BROKER_HEARTBEAT = 63,
	API_ALLOCATE_PRODUCER_IDS = 67,
	API_KEY_MAX = 68,
};
_Static_assert(API_KEY_MAX <= SLUICE_CTL_METRICS_API_KEYS, "every ApiKey served has its request counter");

/* ---- limits -------------------------------------------------------------- */

#define CTL_REQUEST_HEADER_BYTES_MIN 10 /* ApiKey, ApiVersion, CorrelationId, ClientId's length */
#define CTL_READ_CHUNK_BYTES 65536
#define CTL_INPUT_SPARE_BYTES_MAX (1u << 20) /* an input buffer larger than this shrinks once drained */
#define CTL_CONN_REQUESTS_MAX 64             /* read, not yet answered, on one connection: then reading stops */
#define CTL_CONN_QUEUED_BYTES_MAX (64u << 20) /* frames read, not yet answered, on one connection: idem */
#define CTL_REQUESTS_MAX 16384               /* requests read, not yet answered, over all connections */
#define CTL_BUFFERED_BYTES_MAX (1024ull << 20) /* input buffers and queued frames over all connections */
#define CTL_RESPONSE_BYTES_MAX (256u << 20)
#define CTL_FRAME_RECEIVE_TIMEOUT_MS 30000 /* first to last byte of one frame */
#define CTL_SWEEP_INTERVAL_MS 1000
#define CTL_TICK_INTERVAL_MS 100          /* the rules' periodic duties on the active controller */
#define CTL_WRITE_QUEUE_MAX 65536          /* write requests waiting for their decision */
#define CTL_PARKED_FETCHES_MAX 4096
#define CTL_FETCH_WAIT_MS_MAX 30000
#define CTL_FETCH_BYTES_MAX (8u << 20)     /* records in one Fetch response */
#define CTL_FETCH_PARTITIONS_MAX 1000      /* partitions one Fetch may name */
#define CTL_SNAPSHOT_PAGE_BYTES_MAX (8u << 20)
#define CTL_SNAPSHOT_BYTES_MAX (2048ull << 20)
#define CTL_ENTRIES_MAX SLUICE_TOPICS_MAX /* topics, resources or partitions one write request names */
#define CTL_PART_RECORDS_SOFT 4096        /* entries are packed into one command up to here */
#define CTL_CONFIGS_PER_RESOURCE_MAX 1000
#define CTL_DESCRIBE_KEYS_MAX 10000
#define CTL_LOG_LINES_PER_COMMIT_MAX 8    /* partition leader changes logged one by one up to here */
#define CTL_METADATA_TOPIC "__cluster_metadata"
#define CTL_TAG_SLUICE_METADATA_OFFSET 1000 /* response: int64, the request's last record */
#define CTL_TAG_SLUICE_TOPIC_ID 1000        /* CreateTopics request, per topic: uuid */

_Static_assert(CTL_CONN_REQUESTS_MAX <= CTL_REQUESTS_MAX, "one connection can fill its own queue");
_Static_assert(CTL_PART_RECORDS_SOFT <= SLUICE_QUORUM_COMMAND_RECORDS_MAX, "a part fits one command");
_Static_assert(CTL_CONFIGS_PER_RESOURCE_MAX + SLUICE_TOPIC_CONFIGS_MAX < SLUICE_QUORUM_COMMAND_RECORDS_MAX,
	       "one resource's changes fit one command");
_Static_assert(CTL_FETCH_BYTES_MAX <= CTL_RESPONSE_BYTES_MAX / 2, "a fetch response fits the response bound");
_Static_assert(CTL_SNAPSHOT_PAGE_BYTES_MAX <= CTL_RESPONSE_BYTES_MAX / 2, "a snapshot page fits the response bound");

/* ---- state ----------------------------------------------------------------- */

struct sluice_ctl_server;
struct ctl_req;

/* One entity of a write request (a topic, a resource, a partition, or the
 * request itself) and its outcome; every write API's entries begin with it. */
enum entry_phase { PH_UNDECIDED = 0, PH_PART, PH_DONE };
struct entry {
	int16_t err;
	uint8_t phase;
	char msg[SLUICE_CTL_MSG_MAX];
};

/* A write request's entries (entries, n of entry_size bytes each) and the
 * cursor of its decision. */
struct wstate {
	uint8_t *entries;
	size_t entry_size;
	int32_t n;
	int32_t next;         /* the first entry not yet decided */
	bool last_part;       /* the part being proposed is the request's last */
	int16_t top_err;      /* NOT_CONTROLLER and the like, for APIs answered at the top level */
	int64_t meta_offset;  /* the last record of the request's committed parts, -1 none */
};

enum req_state { RQ_QUEUED = 0, RQ_ACTIVE, RQ_FIFO, RQ_PROPOSING, RQ_PARKED, RQ_WRITING };

struct ctl_req {
	struct sluice_ctl_server *s;
	struct ctl_conn *conn; /* NULL once its connection closed (a proposal may still hold it) */
	struct ctl_req *next;  /* on its connection */
	struct ctl_req *fifo_next;
	struct ctl_req *park_prev, *park_next;
	enum req_state state;
	int16_t api_key, api_version;
	int32_t corr;
	bool flexible;
	uint8_t *frame; /* owned */
	uint32_t frame_len;
	size_t body_off;
	void *api;                 /* the API's decoded state, owned */
	void (*api_free)(void *api); /* what api holds besides itself, if anything */
	void *extra;               /* a second allocation of the API's, owned */
	struct wstate w;           /* write APIs (w.entries owned) */
	int64_t deadline_ms;       /* a parked fetch's */
	struct kwr out;
	uv_write_t wr;
};

struct ctl_conn {
	uv_tcp_t tcp;
	struct sluice_ctl_server *s;
	struct ctl_conn *prev, *next;
	char peer[64];
	uint8_t *in; /* bytes read, not yet cut into frames */
	size_t in_len, in_cap;
	int64_t frame_started_ms; /* a partial frame's first byte, -1 none */
	struct ctl_req *head, *tail;
	uint32_t req_n;
	size_t queued_bytes;
	bool reading, closing;
};

/* The last snapshot built for FetchSnapshot: the image at end_offset - 1. */
struct snapshot_cache {
	int64_t end_offset; /* -1: none */
	struct kwr bytes;
};

/* What the active controller heard from each broker's heartbeats, for
 * DescribeQuorum's observers. */
struct observer {
	int32_t id;
	int64_t offset;
	int64_t last_ms;
};

struct sluice_ctl_server {
	uv_loop_t *loop;
	struct sluice_controller_config cfg;
	uv_tcp_t listener;
	uv_timer_t tick_timer, fetch_timer, sweep_timer;
	struct sluice_image *img;
	struct sluice_mlog *mlog;
	struct sluice_quorum *q;
	struct sluice_ctl *ctl;
	struct sluice_ctl_metrics *metrics; /* published to the admin listener; NULL: none */
	struct sluice_ctl_out out; /* the proposal in flight's records */
	bool leader;
	int32_t leader_id;
	bool tick_due;
	struct ctl_req *prop_req; /* the request whose part is proposed; NULL for a tick's */
	bool prop_active;
	struct ctl_req *fifo_head, *fifo_tail;
	uint32_t fifo_n;
	struct ctl_req *parked; /* parked fetches */
	uint32_t parked_n;
	int64_t fetch_timer_due; /* -1: not armed */
	struct ctl_conn *conns;
	uint32_t conn_n;
	uint32_t req_n;
	uint64_t buffered_bytes;
	bool paused_any; /* some connection stopped reading for a global bound */
	struct snapshot_cache snap;
	struct kwr scratch; /* one partition's records while a Fetch response is written */
	struct observer *observers; /* sorted by id, up to SLUICE_IMAGE_BROKERS_MAX */
	uint32_t observer_n;
	bool stopping;
	int closing_handles;
	bool quorum_stopped;
	void (*stop_done)(void *arg);
	void *stop_arg;
	uint8_t read_chunk[CTL_READ_CHUNK_BYTES];
};

/* One API of the table: versions, first flexible version, and its handler;
 * write APIs also decide and answer through the FIFO. */
struct write_ops {
	/* Decide entries from w.next on into out; true when none is left after. */
	bool (*decide)(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out);
	void (*answer)(struct sluice_ctl_server *s, struct ctl_req *r);
};
typedef int (*start_fn)(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd);
struct api {
	int16_t min, max, flex_min;
	start_fn start;
	const struct write_ops *write;
	const char *name;
};
static const struct api *api_of(int16_t key);

static void conn_close(struct ctl_conn *c, const char *why);
static void conn_next(struct ctl_conn *c);
static void req_free(struct ctl_req *r);
static void pump(struct sluice_ctl_server *s);
static void fetch_answer(struct sluice_ctl_server *s, struct ctl_req *r);

static int64_t now_ms(const struct sluice_ctl_server *s)
{
	return (int64_t)uv_now(s->loop);
}

/* ---- small helpers --------------------------------------------------------- */

static void entry_fail(struct entry *e, int16_t err, const char *msg)
{
	e->err = err;
	e->phase = PH_DONE;
	snprintf(e->msg, sizeof e->msg, "%s", msg ? msg : "");
}

static struct entry *entry_at(struct wstate *w, int32_t i)
{
	assert(i >= 0 && i < w->n);
	return (struct entry *)(w->entries + (size_t)i * w->entry_size);
}

/* A kstr as a NUL-terminated copy, or -1 when it does not fit. */
static int kstr_copy(char *out, size_t outlen, struct kstr s)
{
	if (!s.ptr || (size_t)s.len >= outlen)
		return -1;
	memcpy(out, s.ptr, (size_t)s.len);
	out[s.len] = '\0';
	return 0;
}

static const char *not_controller_msg(const struct sluice_ctl_server *s, char *buf, size_t len)
{
	if (s->leader_id >= 0)
		snprintf(buf, len, "This node (%d) is not the active controller; node %d is.", s->cfg.node_id, s->leader_id);
	else
		snprintf(buf, len, "This node (%d) is not the active controller; none is known yet.", s->cfg.node_id);
	return buf;
}

/* s for a log line: bytes outside printable ASCII (a client's strings may
 * hold anything, newlines included) become '?'. */
#define CTL_LOG_STRING_MAX 256
static const char *printable(const char *s, char buf[CTL_LOG_STRING_MAX])
{
	size_t i = 0;
	for (; s && s[i] && i < CTL_LOG_STRING_MAX - 1; i++)
		buf[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	buf[i] = '\0';
	return buf;
}

/* A set of byte strings (duplicate detection in one request): open
 * addressing over pointers that outlive it. */
struct keyset {
	size_t cap;
	struct keyset_slot {
		const void *p;
		size_t len;
	} *slots;
};

static int keyset_init(struct keyset *k, size_t n)
{
	k->cap = 16;
	while (k->cap < 2 * n)
		k->cap *= 2;
	k->slots = calloc(k->cap, sizeof *k->slots);
	return k->slots ? 0 : -1;
}

static void keyset_free(struct keyset *k)
{
	free(k->slots);
	k->slots = NULL;
}

/* Adds p[0..len); false when an equal string is already there. */
static bool keyset_add(struct keyset *k, const void *p, size_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < len; i++)
		h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
	for (size_t i = (size_t)h & (k->cap - 1);; i = (i + 1) & (k->cap - 1)) {
		struct keyset_slot *sl = &k->slots[i];
		if (!sl->p) {
			sl->p = p ? p : "";
			sl->len = len;
			return true;
		}
		if (sl->len == len && memcmp(sl->p, p ? p : "", len) == 0)
			return false;
	}
}

/* A top-level tagged-field section holding SluiceMetadataOffset. */
static void write_tags_offset(struct kwr *w, int64_t offset)
{
	kwr_uvarint(w, 1);
	kwr_uvarint(w, CTL_TAG_SLUICE_METADATA_OFFSET);
	kwr_uvarint(w, 8);
	kwr_i64(w, offset);
}

/* The offset a write request's response carries: its last record, or the
 * image's when it changed nothing. */
static int64_t req_meta_offset(const struct sluice_ctl_server *s, const struct ctl_req *r)
{
	return r->w.meta_offset >= 0 ? r->w.meta_offset : sluice_image_offset(s->img);
}

static void write_end_tags(const struct sluice_ctl_server *s, struct ctl_req *r)
{
	if (r->flexible)
		write_tags_offset(&r->out, req_meta_offset(s, r));
}

/* ---- requests and responses -------------------------------------------------- */

static void req_free(struct ctl_req *r)
{
	struct sluice_ctl_server *s = r->s;
	assert(r->state != RQ_PARKED && r->state != RQ_FIFO && r->state != RQ_PROPOSING);
	assert(s->req_n > 0 && s->buffered_bytes >= r->frame_len);
	s->req_n--;
	s->buffered_bytes -= r->frame_len;
	if (r->api_free && r->api)
		r->api_free(r->api);
	free(r->api);
	free(r->extra);
	free(r->w.entries);
	free(r->frame);
	kwr_free(&r->out);
	free(r);
}

static void resp_begin(struct ctl_req *r)
{
	assert(!r->out.buf && r->state == RQ_ACTIVE);
	kwr_init(&r->out, 256, CTL_RESPONSE_BYTES_MAX);
	kwr_i32(&r->out, 0); /* size, patched by resp_end */
	kwr_i32(&r->out, r->corr);
	if (r->flexible && r->api_key != API_API_VERSIONS) /* ApiVersions answers with header v0 */
		kwr_tags_empty(&r->out);
}

static void on_write(uv_write_t *wr, int status)
{
	struct ctl_req *r = wr->data;
	struct ctl_conn *c = r->conn;
	assert(r->state == RQ_WRITING);
	if (!c) { /* its connection closed meanwhile */
		req_free(r);
		return;
	}
	assert(c->head == r && c->req_n > 0 && c->queued_bytes >= r->frame_len);
	c->head = r->next;
	if (!c->head)
		c->tail = NULL;
	c->req_n--;
	c->queued_bytes -= r->frame_len;
	struct sluice_ctl_server *s = c->s;
	req_free(r);
	if (status < 0) {
		conn_close(c, uv_strerror(status));
		return;
	}
	conn_next(c);
	if (s->paused_any && s->req_n < CTL_REQUESTS_MAX) {
		s->paused_any = false;
		for (struct ctl_conn *o = s->conns; o; o = o->next)
			if (o != c && !o->reading && !o->closing)
				conn_next(o);
	}
}

/* The response in r->out is complete: send it; the request is freed once
 * it is written (or at once when its connection is gone). */
static void resp_end(struct ctl_req *r)
{
	struct ctl_conn *c = r->conn;
	if (!c) {
		req_free(r);
		return;
	}
	assert(r->state == RQ_ACTIVE && c->head == r);
	if (r->out.err) {
		SLOG_ERR("controller", "%s: %s v%d response could not be encoded (too large or out of memory); closing",
			 c->peer, api_of(r->api_key)->name, r->api_version);
		conn_close(c, NULL);
		return;
	}
	assert(r->out.len >= 8 && r->out.len - 4 <= (size_t)INT32_MAX);
	kwr_patch_i32(&r->out, 0, (int32_t)(r->out.len - 4));
	r->state = RQ_WRITING;
	r->wr.data = r;
	uv_buf_t b = uv_buf_init((char *)r->out.buf, (unsigned)r->out.len);
	int rc = uv_write(&r->wr, (uv_stream_t *)&c->tcp, &b, 1, on_write);
	if (rc < 0) {
		r->state = RQ_ACTIVE;
		conn_close(c, uv_strerror(rc));
	}
}

/* ---- connections ---------------------------------------------------------------- */

static void fifo_remove(struct sluice_ctl_server *s, struct ctl_req *r);
static void park_remove(struct sluice_ctl_server *s, struct ctl_req *r);

/* A request of a closing connection: freed now, or detached when a
 * proposal or a write still holds it (freed when that ends). */
static void conn_drop_req(struct sluice_ctl_server *s, struct ctl_req *r)
{
	switch (r->state) {
	case RQ_PROPOSING:
	case RQ_WRITING:
		r->conn = NULL;
		return;
	case RQ_FIFO:
		fifo_remove(s, r);
		break;
	case RQ_PARKED:
		park_remove(s, r);
		break;
	case RQ_QUEUED:
	case RQ_ACTIVE:
		break;
	}
	r->state = RQ_ACTIVE;
	r->conn = NULL;
	req_free(r);
}

static void handle_closed(struct sluice_ctl_server *s);

static void on_conn_closed(uv_handle_t *h)
{
	struct ctl_conn *c = h->data;
	struct sluice_ctl_server *s = c->s;
	assert(c->closing && !c->head && s->conn_n > 0);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->conn_n--;
	assert(s->buffered_bytes >= c->in_cap);
	s->buffered_bytes -= c->in_cap;
	free(c->in);
	free(c);
	if (s->stopping)
		handle_closed(s);
}

static void conn_close(struct ctl_conn *c, const char *why)
{
	if (c->closing)
		return;
	c->closing = true;
	if (why)
		SLOG_INFO("controller", "%s: closing connection: %s", c->peer, why);
	struct ctl_req *r = c->head;
	c->head = c->tail = NULL;
	while (r) {
		struct ctl_req *next = r->next;
		conn_drop_req(c->s, r);
		r = next;
	}
	c->req_n = 0;
	c->queued_bytes = 0;
	if (c->s->stopping)
		c->s->closing_handles++;
	uv_close((uv_handle_t *)&c->tcp, on_conn_closed);
}

static bool conn_full(struct ctl_conn *c)
{
	if (c->req_n >= CTL_CONN_REQUESTS_MAX || c->queued_bytes >= CTL_CONN_QUEUED_BYTES_MAX)
		return true;
	if (c->s->req_n >= CTL_REQUESTS_MAX) {
		c->s->paused_any = true;
		return true;
	}
	return false;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct ctl_conn *c = h->data;
	(void)suggested;
	/* One chunk for the whole loop: on_read copies it out before the next read. */
	buf->base = (char *)c->s->read_chunk;
	buf->len = sizeof c->s->read_chunk;
}

static void conn_cut_frames(struct ctl_conn *c);

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *buf)
{
	struct ctl_conn *c = st->data;
	if (c->closing)
		return;
	if (nread < 0) {
		conn_close(c, nread == UV_EOF ? NULL : uv_strerror((int)nread));
		return;
	}
	if (nread == 0)
		return;
	struct sluice_ctl_server *s = c->s;
	size_t n = (size_t)nread, need = c->in_len + n;
	if (need > c->in_cap) {
		size_t cap = c->in_cap ? c->in_cap : CTL_READ_CHUNK_BYTES;
		while (cap < need)
			cap *= 2;
		if (s->buffered_bytes + (cap - c->in_cap) > CTL_BUFFERED_BYTES_MAX) {
			SLOG_WARN("controller", "%s: the controller holds %" PRIu64 " bytes of requests already; closing",
				  c->peer, s->buffered_bytes);
			conn_close(c, NULL);
			return;
		}
		uint8_t *in = realloc(c->in, cap);
		if (!in) {
			conn_close(c, "out of memory");
			return;
		}
		s->buffered_bytes += cap - c->in_cap;
		c->in = in;
		c->in_cap = cap;
	}
	memcpy(c->in + c->in_len, buf->base, n);
	c->in_len += n;
	conn_cut_frames(c);
}

/* A frame of len bytes at p becomes a request queued on c. -1: c closed. */
static int req_new(struct ctl_conn *c, const uint8_t *p, uint32_t len)
{
	struct sluice_ctl_server *s = c->s;
	if (s->buffered_bytes + len > CTL_BUFFERED_BYTES_MAX) {
		conn_close(c, "the controller holds too many bytes of requests");
		return -1;
	}
	struct ctl_req *r = calloc(1, sizeof *r);
	uint8_t *frame = malloc(len);
	if (!r || !frame) {
		free(r);
		free(frame);
		conn_close(c, "out of memory");
		return -1;
	}
	memcpy(frame, p, len);
	r->s = s;
	r->conn = c;
	r->frame = frame;
	r->frame_len = len;
	r->state = RQ_QUEUED;
	r->w.meta_offset = -1;
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	c->req_n++;
	c->queued_bytes += len;
	s->req_n++;
	s->buffered_bytes += len;
	return 0;
}

static void conn_reading(struct ctl_conn *c, bool on)
{
	if (c->closing || c->reading == on)
		return;
	int rc = on ? uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) : uv_read_stop((uv_stream_t *)&c->tcp);
	if (rc < 0) {
		conn_close(c, uv_strerror(rc));
		return;
	}
	c->reading = on;
	if (on && c->frame_started_ms >= 0) /* a frame's time runs only while it is read */
		c->frame_started_ms = now_ms(c->s);
}

/* Give a large input buffer back once it is drained (after a large frame). */
static void conn_input_shrink(struct ctl_conn *c)
{
	if (c->in_cap <= CTL_INPUT_SPARE_BYTES_MAX || c->in_len > CTL_READ_CHUNK_BYTES)
		return;
	uint8_t *in = realloc(c->in, CTL_READ_CHUNK_BYTES);
	if (!in)
		return;
	c->s->buffered_bytes -= c->in_cap - CTL_READ_CHUNK_BYTES;
	c->in = in;
	c->in_cap = CTL_READ_CHUNK_BYTES;
}

static void req_start(struct ctl_req *r);

/* Cut the whole frames buffered on c into requests while c has room for
 * them, then read on (or not), then start the next request. */
static void conn_cut_frames(struct ctl_conn *c)
{
	struct sluice_ctl_server *s = c->s;
	size_t off = 0;
	bool partial = false; /* the bytes left are the start of a frame still arriving */
	while (!c->closing && !conn_full(c)) {
		if (c->in_len - off < 4) {
			partial = c->in_len > off;
			break;
		}
		int32_t size = (int32_t)kbe32(c->in + off);
		if (size < CTL_REQUEST_HEADER_BYTES_MIN || size > s->cfg.socket_request_max_bytes) {
			char why[96];
			snprintf(why, sizeof why, "frame size %d outside [%d, %d] (socket.request.max.bytes)", size,
				 CTL_REQUEST_HEADER_BYTES_MIN, s->cfg.socket_request_max_bytes);
			conn_close(c, why);
			return;
		}
		if (c->in_len - off - 4 < (size_t)size) {
			partial = true;
			break;
		}
		if (req_new(c, c->in + off + 4, (uint32_t)size) < 0)
			return;
		off += 4 + (size_t)size;
		c->frame_started_ms = -1;
	}
	if (c->closing)
		return;
	memmove(c->in, c->in + off, c->in_len - off);
	c->in_len -= off;
	/* Only a frame still arriving is timed: whole frames waiting for room are not. */
	if (!partial)
		c->frame_started_ms = -1;
	else if (c->frame_started_ms < 0)
		c->frame_started_ms = now_ms(s);
	conn_input_shrink(c);
	conn_reading(c, !conn_full(c));
	if (!c->closing && c->head && c->head->state == RQ_QUEUED)
		req_start(c->head);
}

/* The head request ended, or room came back: cut what is buffered, read
 * on, start the next request. */
static void conn_next(struct ctl_conn *c)
{
	if (!c->closing)
		conn_cut_frames(c);
}

static void on_connection(uv_stream_t *server, int status)
{
	struct sluice_ctl_server *s = server->data;
	if (status < 0) {
		SLOG_WARN("controller", "accept: %s", uv_strerror(status));
		return;
	}
	struct ctl_conn *c = calloc(1, sizeof *c);
	if (!c)
		return; /* the connection waits in the backlog; accept is retried on the next one */
	c->s = s;
	c->frame_started_ms = -1;
	snprintf(c->peer, sizeof c->peer, "?");
	uv_tcp_init(s->loop, &c->tcp);
	c->tcp.data = c;
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->conn_n++;
	if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
		conn_close(c, "accept failed");
		return;
	}
	struct sockaddr_storage ss;
	int sl = sizeof ss;
	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &sl) == 0) {
		char host[48] = "?";
		int port = 0;
		if (ss.ss_family == AF_INET6) {
			uv_ip6_name((struct sockaddr_in6 *)&ss, host, sizeof host);
			port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		} else {
			uv_ip4_name((struct sockaddr_in *)&ss, host, sizeof host);
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		}
		snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
	}
	if ((int64_t)s->conn_n > s->cfg.connections_max || s->stopping) {
		SLOG_WARN("controller", "%s: refused: %u connections open (max.connections %d)", c->peer, s->conn_n - 1,
			  s->cfg.connections_max);
		conn_close(c, NULL);
		return;
	}
	uv_tcp_nodelay(&c->tcp, 1);
	conn_reading(c, true);
}

/* Connections that have sent part of a frame for too long are closed: a
 * frame's declared size is only held for the time it takes to arrive. */
static void on_sweep(uv_timer_t *t)
{
	struct sluice_ctl_server *s = t->data;
	int64_t now = now_ms(s);
	for (struct ctl_conn *c = s->conns; c; c = c->next)
		if (!c->closing && c->reading && c->frame_started_ms >= 0 &&
		    now - c->frame_started_ms > CTL_FRAME_RECEIVE_TIMEOUT_MS)
			conn_close(c, "a frame did not arrive whole within 30 s");
}

/* ---- the write FIFO and proposals ---------------------------------------------- */

static void fifo_remove(struct sluice_ctl_server *s, struct ctl_req *r)
{
	assert(r->state == RQ_FIFO && s->fifo_n > 0);
	struct ctl_req **pp = &s->fifo_head, *prev = NULL;
	while (*pp && *pp != r) {
		prev = *pp;
		pp = &(*pp)->fifo_next;
	}
	assert(*pp == r);
	*pp = r->fifo_next;
	if (s->fifo_tail == r)
		s->fifo_tail = prev;
	r->fifo_next = NULL;
	s->fifo_n--;
	r->state = RQ_ACTIVE;
}

/* Settle the entries of r's part (err 0: committed as last_offset) and,
 * on an error, every entry not decided yet too. */
static void settle(struct sluice_ctl_server *s, struct ctl_req *r, int16_t err, int64_t last_offset)
{
	struct wstate *w = &r->w;
	char buf[SLUICE_CTL_MSG_MAX];
	const char *msg = err == KERR_NOT_CONTROLLER ? not_controller_msg(s, buf, sizeof buf) : sluice_kafka_error_name(err);
	for (int32_t i = 0; i < w->n; i++) {
		struct entry *e = entry_at(w, i);
		if (e->phase == PH_PART && !err)
			e->phase = PH_DONE;
		else if (e->phase != PH_DONE && err)
			entry_fail(e, err, msg);
	}
	if (err && !w->top_err)
		w->top_err = err;
	if (!err && last_offset > w->meta_offset)
		w->meta_offset = last_offset;
}

/* Answer a settled write request (or drop it when its connection went). */
static void write_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	assert(r->state == RQ_ACTIVE);
	if (!r->conn) {
		req_free(r);
		return;
	}
	api_of(r->api_key)->write->answer(s, r);
}

/* A decoded write request: queued for its decision on the active
 * controller, refused at once elsewhere. */
static void write_submit(struct sluice_ctl_server *s, struct ctl_req *r)
{
	assert(r->state == RQ_ACTIVE && api_of(r->api_key)->write);
	if (!s->leader || s->stopping || s->fifo_n >= CTL_WRITE_QUEUE_MAX) {
		settle(s, r, s->leader && !s->stopping ? KERR_REQUEST_TIMED_OUT : KERR_NOT_CONTROLLER, -1);
		write_answer(s, r);
		return;
	}
	r->state = RQ_FIFO;
	if (s->fifo_tail)
		s->fifo_tail->fifo_next = r;
	else
		s->fifo_head = r;
	s->fifo_tail = r;
	s->fifo_n++;
	pump(s);
}

static void log_committed(struct sluice_ctl_server *s, const struct sluice_mrec *recs, size_t n, int64_t last_offset);

static void proposal_done(void *arg, int16_t error, int64_t last_offset)
{
	struct sluice_ctl_server *s = arg;
	assert(s->prop_active);
	struct ctl_req *r = s->prop_req;
	s->prop_active = false;
	s->prop_req = NULL;
	if (!error)
		log_committed(s, s->out.recs, s->out.n, last_offset);
	else if (!r)
		SLOG_INFO("controller", "periodic change of %zu records not committed: %s", s->out.n,
			  sluice_kafka_error_name(error));
	if (r) {
		assert(r->state == RQ_PROPOSING && s->fifo_head == r);
		r->state = RQ_FIFO;
		settle(s, r, error, last_offset);
		if (error || r->w.last_part || !r->conn) {
			fifo_remove(s, r);
			write_answer(s, r);
		}
	}
	/* A command of a huge topic may have grown the records: give them back. */
	if (s->out.cap > 2 * CTL_PART_RECORDS_SOFT) {
		sluice_ctl_out_free(&s->out);
		sluice_ctl_out_init(&s->out, SLUICE_QUORUM_COMMAND_RECORDS_MAX);
	}
	sluice_ctl_out_clear(&s->out);
	pump(s);
}

/* Propose s->out for r (NULL: the rules' periodic duties). */
static void propose(struct sluice_ctl_server *s, struct ctl_req *r)
{
	assert(!s->prop_active && s->out.n > 0);
	s->prop_active = true;
	s->prop_req = r;
	if (r)
		r->state = RQ_PROPOSING;
	int16_t err = sluice_quorum_propose(s->q, s->out.recs, s->out.n, proposal_done, s);
	if (!err)
		return;
	s->prop_active = false;
	s->prop_req = NULL;
	if (!r) {
		SLOG_INFO("controller", "periodic change of %zu records not proposed: %s", s->out.n,
			  sluice_kafka_error_name(err));
		return;
	}
	r->state = RQ_FIFO;
	fifo_remove(s, r);
	settle(s, r, err, -1);
	write_answer(s, r);
}

/* Decide and propose while this node leads and nothing is in flight: the
 * periodic duties first when due, then the FIFO's head. */
static void pump(struct sluice_ctl_server *s)
{
	/* s->q is NULL while sluice_quorum_start runs (it may elect a lone voter) */
	while (s->q && !s->prop_active && s->leader && !s->stopping) {
		sluice_ctl_out_clear(&s->out);
		if (s->tick_due) {
			s->tick_due = false;
			sluice_ctl_tick(s->ctl, now_ms(s), &s->out);
			if (s->out.n > 0)
				propose(s, NULL);
			continue;
		}
		struct ctl_req *r = s->fifo_head;
		if (!r)
			return;
		assert(r->state == RQ_FIFO);
		bool last = api_of(r->api_key)->write->decide(s, r, &s->out);
		if (s->out.n == 0) {
			assert(last); /* a decision stops early only to start a new command */
			fifo_remove(s, r);
			settle(s, r, KERR_NONE, -1);
			write_answer(s, r);
			continue;
		}
		r->w.last_part = last;
		propose(s, r);
	}
}

/* The values the admin listener reads (ctl_metrics.h), stored by this
 * (the loop's) thread only: from every tick and at leadership changes. */
static void metrics_publish(struct sluice_ctl_server *s)
{
	struct sluice_ctl_metrics *m = s->metrics;
	if (!m || !s->q)
		return;
	struct sluice_quorum_progress p;
	sluice_quorum_progress(s->q, &p);
	assert(p.state >= 0 && p.state < SLUICE_CTL_ROLES);
	uint32_t registered = 0, fenced = 0;
	size_t n = sluice_image_broker_count(s->img);
	for (size_t i = 0; i < n; i++) {
		bool f = sluice_image_broker_at(s->img, i)->fenced;
		fenced += f;
		registered += !f; /* disjoint: the two series sum to every broker */
	}
	assert(fenced + registered == n);
	__atomic_store_n(&m->role, p.state, __ATOMIC_RELAXED);
	__atomic_store_n(&m->leader_id, s->leader_id, __ATOMIC_RELAXED);
	__atomic_store_n(&m->term, p.term, __ATOMIC_RELAXED);
	__atomic_store_n(&m->commit_index, p.commit_index, __ATOMIC_RELAXED);
	__atomic_store_n(&m->applied_index, p.applied_index, __ATOMIC_RELAXED);
	__atomic_store_n(&m->last_index, p.last_index, __ATOMIC_RELAXED);
	__atomic_store_n(&m->metadata_offset, sluice_image_offset(s->img), __ATOMIC_RELAXED);
	__atomic_store_n(&m->brokers_registered, registered, __ATOMIC_RELAXED);
	__atomic_store_n(&m->brokers_fenced, fenced, __ATOMIC_RELAXED);
}

static void on_tick(uv_timer_t *t)
{
	struct sluice_ctl_server *s = t->data;
	metrics_publish(s);
	if (!s->leader)
		return;
	s->tick_due = true;
	pump(s);
}

/* A reassignment's steps: replicas added, completed or cancelled. */
static void log_reassignment(struct sluice_ctl_server *s, const struct sluice_mrec_partition_change *c)
{
	const struct sluice_image_topic *t = sluice_image_topic_by_id(s->img, c->topic_id);
	const struct sluice_image_partition *p =
		t && c->partition_id >= 0 && c->partition_id < t->partition_n ? &t->partitions[c->partition_id] : NULL;
	if (!p)
		return;
	char name[CTL_LOG_STRING_MAX], text[3][SLUICE_REPLICAS_MAX * 12];
	const struct sluice_mrec_ids *lists[3] = {&p->replicas, &p->adding, &p->removing};
	for (int k = 0; k < 3; k++) {
		size_t at = 0;
		text[k][0] = '\0';
		for (int32_t i = 0; i < lists[k]->n && at < sizeof text[k]; i++)
			at += (size_t)snprintf(text[k] + at, sizeof text[k] - at, "%s%d", i ? "," : "", lists[k]->id[i]);
	}
	SLOG_INFO("controller", "partition %s-%d: replicas [%s], adding [%s], removing [%s], leader %d%s",
		  printable(t->name, name), c->partition_id, text[0], text[1], text[2], p->leader,
		  sluice_ctl_reassigning(p) ? "" : " (no reassignment in progress)");
}

/* One line per broker event and per command's partition leader changes. */
static void log_committed(struct sluice_ctl_server *s, const struct sluice_mrec *recs, size_t n, int64_t last_offset)
{
	size_t leaders = 0, topics = 0, removed = 0;
	for (size_t i = 0; i < n; i++) {
		const struct sluice_mrec *m = &recs[i];
		if (m->type == SLUICE_MREC_REGISTER_BROKER) {
			const struct sluice_mrec_register_broker *b = &m->register_broker;
			char inc[23], host[CTL_LOG_STRING_MAX], rack[CTL_LOG_STRING_MAX];
			sluice_topic_id_base64(b->incarnation_id, inc);
			SLOG_INFO("controller", "broker %d registered: epoch %" PRId64 ", incarnation %s, %s:%u%s%s", b->broker_id,
				  b->broker_epoch, inc, printable(b->endpoint_n ? b->endpoints[0].host : "-", host),
				  b->endpoint_n ? b->endpoints[0].port : 0, b->rack[0] ? ", rack " : "", printable(b->rack, rack));
		} else if (m->type == SLUICE_MREC_FENCE_BROKER) {
			SLOG_INFO("controller", "broker %d fenced", m->fence_broker.id);
		} else if (m->type == SLUICE_MREC_UNFENCE_BROKER) {
			SLOG_INFO("controller", "broker %d unfenced", m->unfence_broker.id);
		} else if (m->type == SLUICE_MREC_BROKER_REGISTRATION_CHANGE) {
			int8_t f = m->broker_registration_change.fenced, cs = m->broker_registration_change.in_controlled_shutdown;
			SLOG_INFO("controller", "broker %d%s%s", m->broker_registration_change.broker_id,
				  f == 1 ? " fenced" : f == 0 ? " unfenced" : "",
				  cs == 1 ? " in controlled shutdown" : cs == 0 ? " out of controlled shutdown" : "");
		} else if (m->type == SLUICE_MREC_UNREGISTER_BROKER) {
			SLOG_INFO("controller", "broker %d unregistered", m->unregister_broker.broker_id);
		} else if (m->type == SLUICE_MREC_PARTITION_CHANGE &&
			   (m->partition_change.has_replicas || m->partition_change.has_adding)) {
			log_reassignment(s, &m->partition_change);
		} else if (m->type == SLUICE_MREC_PARTITION_CHANGE && m->partition_change.has_leader) {
			const struct sluice_image_topic *t = sluice_image_topic_by_id(s->img, m->partition_change.topic_id);
			char name[CTL_LOG_STRING_MAX];
			if (++leaders <= CTL_LOG_LINES_PER_COMMIT_MAX)
				SLOG_INFO("controller", "partition %s-%d: leader %d", printable(t ? t->name : "?", name),
					  m->partition_change.partition_id, m->partition_change.leader);
		}
		topics += m->type == SLUICE_MREC_TOPIC;
		removed += m->type == SLUICE_MREC_REMOVE_TOPIC;
	}
	if (leaders > CTL_LOG_LINES_PER_COMMIT_MAX)
		SLOG_INFO("controller", "... %zu partitions changed leader in all", leaders);
	SLOG_DEBUG("controller", "committed %zu records up to offset %" PRId64 " (%zu topics created, %zu removed)", n,
		   last_offset, topics, removed);
}

/* ---- the quorum's callbacks ------------------------------------------------------ */

static void fetch_wake(struct sluice_ctl_server *s, bool all);

static void observers_forget(struct sluice_ctl_server *s)
{
	s->observer_n = 0;
}

/* This node stopped leading: every write request not in a proposal is
 * refused (NOT_CONTROLLER), parked fetches answer (NOT_LEADER_OR_FOLLOWER). */
static void leadership_lost(struct sluice_ctl_server *s)
{
	struct ctl_req *r = s->fifo_head;
	s->fifo_head = s->fifo_tail = NULL;
	s->fifo_n = 0;
	while (r) {
		struct ctl_req *next = r->fifo_next;
		r->fifo_next = NULL;
		if (r->state == RQ_PROPOSING) { /* its done callback comes, with NOT_CONTROLLER */
			s->fifo_head = s->fifo_tail = r;
			s->fifo_n = 1;
		} else {
			r->state = RQ_ACTIVE;
			settle(s, r, KERR_NOT_CONTROLLER, -1);
			write_answer(s, r);
		}
		r = next;
	}
	fetch_wake(s, true);
	observers_forget(s);
	s->tick_due = false;
}

/* The active controller in what `systemctl status` shows (nothing is sent
 * outside systemd); once stopping, the STOPPING=1 status stays. */
static void notify_leader(const struct sluice_ctl_server *s, bool is_leader, int32_t leader_id, int64_t term)
{
	if (s->stopping)
		return;
	if (is_leader)
		sluice_sdnotify_sendf("STATUS=serving %s:%u; this node (%d) is the active controller (epoch %" PRId64 ")",
				      s->cfg.listen_host, (unsigned)s->cfg.listen_port, s->cfg.node_id, term);
	else if (leader_id >= 0)
		sluice_sdnotify_sendf("STATUS=serving %s:%u; node %d is the active controller (epoch %" PRId64 ")",
				      s->cfg.listen_host, (unsigned)s->cfg.listen_port, leader_id, term);
	else
		sluice_sdnotify_sendf("STATUS=serving %s:%u; no active controller known (an election is under way)",
				      s->cfg.listen_host, (unsigned)s->cfg.listen_port);
}

static void on_leader_changed(void *arg, bool is_leader, int32_t leader_id)
{
	struct sluice_ctl_server *s = arg;
	bool was = s->leader;
	s->leader = is_leader;
	s->leader_id = leader_id;
	int64_t term = -1;
	if (s->q) {
		struct sluice_quorum_status st;
		sluice_quorum_status(s->q, &st);
		term = st.leader_epoch;
	}
	if (is_leader)
		SLOG_INFO("controller", "this node (%d) is the active controller (epoch %" PRId64 ", metadata offset %" PRId64 ")",
			  s->cfg.node_id, term, sluice_image_offset(s->img));
	else if (leader_id >= 0)
		SLOG_INFO("controller", "node %d is the active controller (epoch %" PRId64 ")", leader_id, term);
	else
		SLOG_INFO("controller", "no active controller known (an election is under way)");
	notify_leader(s, is_leader, leader_id, term);
	metrics_publish(s);
	if (is_leader && !was) {
		sluice_ctl_became_leader(s->ctl, now_ms(s));
		observers_forget(s);
		pump(s);
	} else if (!is_leader && was) {
		leadership_lost(s);
	}
}

static void on_applied(void *arg, int64_t first_offset, size_t n)
{
	struct sluice_ctl_server *s = arg;
	(void)first_offset;
	(void)n;
	fetch_wake(s, false);
}

static void on_restored(void *arg, int64_t offset)
{
	struct sluice_ctl_server *s = arg;
	SLOG_INFO("controller", "image restored from a snapshot at metadata offset %" PRId64, offset);
	fetch_wake(s, false);
}

/* ---- Fetch (1) v12: the metadata log, long-polled -------------------------------- */

struct fetch_part {
	int32_t partition;
	int64_t offset;
	int32_t max_bytes;
};

struct fetch_topic {
	struct kstr name;
	bool metadata; /* __cluster_metadata */
	int32_t first, n; /* its partitions in the request's parts (r->extra) */
};

struct fetch_state {
	int32_t max_bytes;
	int32_t topic_n, part_n;
	struct fetch_topic topics[];
};

static struct fetch_part *fetch_parts(struct ctl_req *r)
{
	return r->extra;
}

static int fetch_decode_topic(struct ctl_req *r, struct krd *rd, struct fetch_state *f, struct fetch_topic *t)
{
	t->name = krd_string(rd, true);
	t->metadata = kstr_eq(t->name, CTL_METADATA_TOPIC);
	int32_t pn = krd_array(rd, true, 33); /* the smallest partition: 32 bytes and its tags */
	if (pn > CTL_FETCH_PARTITIONS_MAX - f->part_n) {
		krd_fail(rd, "too many partitions");
		return -1;
	}
	t->first = f->part_n;
	t->n = pn > 0 ? pn : 0;
	for (int32_t i = 0; i < t->n && !rd->err; i++) {
		struct fetch_part *p = &fetch_parts(r)[f->part_n++];
		p->partition = krd_i32(rd);
		(void)krd_i32(rd); /* CurrentLeaderEpoch */
		p->offset = krd_i64(rd);
		(void)krd_i32(rd); /* LastFetchedEpoch */
		(void)krd_i64(rd); /* LogStartOffset */
		p->max_bytes = krd_i32(rd);
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	return rd->err ? -1 : 0;
}

/* Whether the answer is ready: this node does not lead, a partition is in
 * error, or the log holds something past a fetch offset. */
static bool fetch_ready(const struct sluice_ctl_server *s, struct ctl_req *r)
{
	const struct fetch_state *f = r->api;
	if (!s->leader)
		return true;
	int64_t end = sluice_mlog_end(s->mlog);
	for (int32_t t = 0; t < f->topic_n; t++)
		for (int32_t i = 0; i < f->topics[t].n; i++) {
			const struct fetch_part *p = &fetch_parts(r)[f->topics[t].first + i];
			if (!f->topics[t].metadata || p->partition != 0 || p->offset != end)
				return true;
		}
	return false;
}

static void fetch_timer_arm(struct sluice_ctl_server *s);

static void park_remove(struct sluice_ctl_server *s, struct ctl_req *r)
{
	assert(r->state == RQ_PARKED && s->parked_n > 0);
	if (r->park_prev)
		r->park_prev->park_next = r->park_next;
	else
		s->parked = r->park_next;
	if (r->park_next)
		r->park_next->park_prev = r->park_prev;
	r->park_prev = r->park_next = NULL;
	s->parked_n--;
	r->state = RQ_ACTIVE;
}

static int fetch_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	(void)krd_i32(rd); /* ReplicaId */
	int32_t max_wait_ms = krd_i32(rd);
	(void)krd_i32(rd); /* MinBytes: any record is enough */
	int32_t max_bytes = krd_i32(rd);
	(void)krd_i8(rd);  /* IsolationLevel */
	(void)krd_i32(rd); /* SessionId */
	(void)krd_i32(rd); /* SessionEpoch */
	int32_t tn = krd_array(rd, true, 3);
	if (rd->err || tn > CTL_FETCH_PARTITIONS_MAX)
		return krd_fail(rd, "topic count"), -1;
	struct fetch_state *f = calloc(1, sizeof *f + (size_t)(tn > 0 ? tn : 0) * sizeof f->topics[0]);
	r->api = f;
	r->extra = malloc(CTL_FETCH_PARTITIONS_MAX * sizeof(struct fetch_part));
	if (!f || !r->extra)
		return krd_fail(rd, "out of memory"), -1;
	f->max_bytes = max_bytes;
	f->topic_n = tn > 0 ? tn : 0;
	for (int32_t t = 0; t < f->topic_n; t++)
		if (fetch_decode_topic(r, rd, f, &f->topics[t]) < 0)
			return -1;
	int32_t forgotten = krd_array(rd, true, 3);
	for (int32_t i = 0; i < forgotten && !rd->err; i++) {
		(void)krd_string(rd, true);
		int32_t np = krd_array(rd, true, 4);
		krd_skip(rd, np > 0 ? (size_t)np * 4 : 0);
		krd_tags_skip(rd);
	}
	(void)krd_string(rd, true); /* RackId */
	krd_tags_skip(rd);
	if (rd->err)
		return -1;
	if (max_wait_ms <= 0 || fetch_ready(s, r) || s->parked_n >= CTL_PARKED_FETCHES_MAX) {
		fetch_answer(s, r);
		return 0;
	}
	r->deadline_ms = now_ms(s) + (max_wait_ms < CTL_FETCH_WAIT_MS_MAX ? max_wait_ms : CTL_FETCH_WAIT_MS_MAX);
	r->state = RQ_PARKED;
	r->park_prev = NULL;
	r->park_next = s->parked;
	if (s->parked)
		s->parked->park_prev = r;
	s->parked = r;
	s->parked_n++;
	fetch_timer_arm(s);
	return 0;
}

/* The CurrentLeader tagged field of a partition this node does not lead. */
static void fetch_write_leader_tag(struct sluice_ctl_server *s, struct kwr *w)
{
	struct sluice_quorum_status st;
	sluice_quorum_status(s->q, &st);
	kwr_uvarint(w, 1);
	kwr_uvarint(w, 1); /* tag 1: CurrentLeader */
	kwr_uvarint(w, 9); /* LeaderId, LeaderEpoch, empty tags */
	kwr_i32(w, s->leader_id);
	kwr_i32(w, st.leader_epoch > INT32_MAX ? INT32_MAX : (int32_t)st.leader_epoch);
	kwr_tags_empty(w);
}

/* One partition of the response; *budget: record bytes left for the response. */
static void fetch_write_part(struct sluice_ctl_server *s, struct kwr *w, const struct fetch_topic *t,
			     const struct fetch_part *p, size_t *budget)
{
	int16_t err = KERR_NONE;
	int64_t start = sluice_mlog_start(s->mlog), end = sluice_mlog_end(s->mlog);
	kwr_reset(&s->scratch);
	if (!t->metadata || p->partition != 0)
		err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
	else if (!s->leader)
		err = KERR_NOT_LEADER_OR_FOLLOWER;
	else if (p->offset < start || p->offset > end)
		err = KERR_OFFSET_OUT_OF_RANGE;
	else if (p->offset < end && *budget > 0 && p->max_bytes > 0) {
		size_t max = (size_t)p->max_bytes < *budget ? (size_t)p->max_bytes : *budget;
		if (sluice_mlog_read(s->mlog, p->offset, max, &s->scratch) < 0 || s->scratch.err) {
			kwr_reset(&s->scratch);
			err = KERR_OFFSET_OUT_OF_RANGE;
		}
		*budget -= s->scratch.len < *budget ? s->scratch.len : *budget;
	}
	bool known = !err || err == KERR_OFFSET_OUT_OF_RANGE;
	kwr_i32(w, p->partition);
	kwr_i16(w, err);
	kwr_i64(w, known ? end : -1); /* HighWatermark: the next offset */
	kwr_i64(w, known ? end : -1); /* LastStableOffset */
	kwr_i64(w, known ? start : -1);
	kwr_array(w, true, -1);      /* AbortedTransactions */
	kwr_i32(w, -1);              /* PreferredReadReplica */
	kwr_bytes(w, true, s->scratch.len ? s->scratch.buf : (const uint8_t *)"", (int32_t)s->scratch.len);
	if (err == KERR_NOT_LEADER_OR_FOLLOWER)
		fetch_write_leader_tag(s, w);
	else
		kwr_tags_empty(w);
}

static void fetch_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	const struct fetch_state *f = r->api;
	size_t budget = f->max_bytes > 0 ? (size_t)f->max_bytes : 0;
	if (budget > CTL_FETCH_BYTES_MAX)
		budget = CTL_FETCH_BYTES_MAX;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0); /* ThrottleTimeMs */
	kwr_i16(w, KERR_NONE);
	kwr_i32(w, 0); /* SessionId: no sessions */
	kwr_array(w, true, f->topic_n);
	for (int32_t t = 0; t < f->topic_n; t++) {
		const struct fetch_topic *ft = &f->topics[t];
		kwr_string(w, true, ft->name.ptr ? ft->name.ptr : "", ft->name.ptr ? ft->name.len : 0);
		kwr_array(w, true, ft->n);
		for (int32_t i = 0; i < ft->n; i++)
			fetch_write_part(s, w, ft, &fetch_parts(r)[ft->first + i], &budget);
		kwr_tags_empty(w);
	}
	kwr_tags_empty(w);
	resp_end(r);
}

/* Answer the parked fetches that are ready (all of them when all). */
static void fetch_wake(struct sluice_ctl_server *s, bool all)
{
	struct ctl_req *r = s->parked;
	bool any = false;
	while (r) {
		struct ctl_req *next = r->park_next;
		if (all || fetch_ready(s, r)) {
			park_remove(s, r);
			fetch_answer(s, r);
			any = true;
		}
		r = next;
	}
	if (any)
		fetch_timer_arm(s);
}

static void on_fetch_timer(uv_timer_t *t)
{
	struct sluice_ctl_server *s = t->data;
	int64_t now = now_ms(s);
	s->fetch_timer_due = -1;
	struct ctl_req *r = s->parked;
	while (r) {
		struct ctl_req *next = r->park_next;
		if (r->deadline_ms <= now) {
			park_remove(s, r);
			fetch_answer(s, r);
		}
		r = next;
	}
	fetch_timer_arm(s);
}

/* The timer at the earliest parked deadline (stopped when none is parked). */
static void fetch_timer_arm(struct sluice_ctl_server *s)
{
	if (s->stopping)
		return;
	int64_t due = -1;
	for (const struct ctl_req *r = s->parked; r; r = r->park_next)
		if (due < 0 || r->deadline_ms < due)
			due = r->deadline_ms;
	if (due == s->fetch_timer_due)
		return;
	s->fetch_timer_due = due;
	if (due < 0) {
		uv_timer_stop(&s->fetch_timer);
		return;
	}
	int64_t wait = due - now_ms(s);
	uv_timer_start(&s->fetch_timer, on_fetch_timer, (uint64_t)(wait > 0 ? wait : 0), 0);
}

/* ---- ApiVersions (18) ---------------------------------------------------------- */

static const struct api apis[API_KEY_MAX];

static int api_versions_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	(void)s;
	if (r->flexible) {
		(void)krd_string(rd, true); /* ClientSoftwareName */
		(void)krd_string(rd, true); /* ClientSoftwareVersion */
		krd_tags_skip(rd);
	}
	if (rd->err)
		return -1;
	bool flex = r->flexible;
	int32_t n = 0;
	for (int k = 0; k < API_KEY_MAX; k++)
		n += apis[k].start != NULL;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i16(w, KERR_NONE);
	kwr_array(w, flex, n);
	for (int k = 0; k < API_KEY_MAX; k++) {
		if (!apis[k].start)
			continue;
		kwr_i16(w, (int16_t)k);
		kwr_i16(w, apis[k].min);
		kwr_i16(w, apis[k].max);
		if (flex)
			kwr_tags_empty(w);
	}
	if (r->api_version >= 1)
		kwr_i32(w, 0); /* ThrottleTimeMs */
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
	return 0;
}

/* Kafka's rule: an ApiVersions of a version it does not know is answered
 * with a v0 body, UNSUPPORTED_VERSION and ApiVersions' own range. */
static void api_versions_unsupported(struct ctl_req *r)
{
	r->flexible = false;
	resp_begin(r);
	kwr_i16(&r->out, KERR_UNSUPPORTED_VERSION);
	kwr_array(&r->out, false, 1);
	kwr_i16(&r->out, API_API_VERSIONS);
	kwr_i16(&r->out, apis[API_API_VERSIONS].min);
	kwr_i16(&r->out, apis[API_API_VERSIONS].max);
	resp_end(r);
}

/* ---- DescribeQuorum (55) v0-2 ----------------------------------------------------- */

/* Whether the request names exactly __cluster_metadata partition 0. */
static int dq_decode(struct krd *rd, bool *metadata)
{
	int32_t tn = krd_array(rd, true, 3);
	int32_t named = 0;
	*metadata = false;
	for (int32_t t = 0; t < tn && !rd->err; t++) {
		struct kstr name = krd_string(rd, true);
		int32_t pn = krd_array(rd, true, 5);
		for (int32_t p = 0; p < pn && !rd->err; p++) {
			int32_t idx = krd_i32(rd);
			krd_tags_skip(rd);
			named++;
			*metadata = named == 1 && idx == 0 && kstr_eq(name, CTL_METADATA_TOPIC);
		}
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	if (named != 1)
		*metadata = false;
	return rd->err ? -1 : 0;
}

static void dq_write_replica(struct kwr *w, int16_t v, int32_t id, int64_t end, int64_t fetch_ms, int64_t caught_ms)
{
	static const uint8_t no_dir[16];
	kwr_i32(w, id);
	if (v >= 2)
		kwr_uuid(w, no_dir); /* ReplicaDirectoryId */
	kwr_i64(w, end);
	if (v >= 1) {
		kwr_i64(w, fetch_ms);
		kwr_i64(w, caught_ms);
	}
	kwr_tags_empty(w);
}

static void dq_write_partition(struct sluice_ctl_server *s, struct ctl_req *r, int16_t err,
			       const struct sluice_quorum_status *st)
{
	struct kwr *w = &r->out;
	int16_t v = r->api_version;
	kwr_i32(w, 0); /* PartitionIndex */
	kwr_i16(w, err);
	if (v >= 2)
		kwr_cstr(w, true, err ? sluice_kafka_error_name(err) : NULL);
	/* A follower answers NOT_LEADER_OR_FOLLOWER, as Kafka does, but with
	 * its own view filled in (the leader it knows, what it applied). */
	kwr_i32(w, st->leader_id);
	kwr_i32(w, st->leader_epoch > INT32_MAX ? INT32_MAX : (int32_t)st->leader_epoch);
	/* Offsets as Kafka gives them: the next offset (the quorum's are the
	 * last record's), -1 where unknown. */
	kwr_i64(w, st->high_watermark + 1);
	kwr_array(w, true, st->voter_n);
	for (int32_t i = 0; i < st->voter_n; i++)
		dq_write_replica(w, v, st->voters[i].id,
				 st->voters[i].log_end_offset >= 0 ? st->voters[i].log_end_offset + 1 : -1,
				 st->voters[i].last_fetch_ms, st->voters[i].last_caught_up_ms);
	uint32_t on = s->leader ? s->observer_n : 0;
	kwr_array(w, true, (int32_t)on);
	for (uint32_t i = 0; i < on; i++) {
		const struct observer *o = &s->observers[i];
		dq_write_replica(w, v, o->id, o->offset >= 0 ? o->offset + 1 : -1, -1, -1);
	}
	kwr_tags_empty(w);
}

/* v2: every voter's CONTROLLER listener. */
static void dq_write_nodes(struct sluice_ctl_server *s, struct kwr *w)
{
	const struct sluice_quorum_config *q = &s->cfg.quorum;
	kwr_array(w, true, q->voter_n);
	for (int32_t i = 0; i < q->voter_n; i++) {
		kwr_i32(w, q->voters[i].id);
		kwr_array(w, true, 1);
		kwr_cstr(w, true, s->cfg.listener_name);
		kwr_cstr(w, true, q->voters[i].host);
		kwr_i16(w, (int16_t)s->cfg.voter_listener_ports[i]); /* uint16 on the wire */
		kwr_tags_empty(w);
		kwr_tags_empty(w);
	}
}

static int describe_quorum_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	bool metadata;
	if (dq_decode(rd, &metadata) < 0)
		return -1;
	struct sluice_quorum_status st;
	sluice_quorum_status(s->q, &st);
	int16_t err = !metadata ? KERR_UNKNOWN_TOPIC_OR_PARTITION : !s->leader ? KERR_NOT_LEADER_OR_FOLLOWER : KERR_NONE;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i16(w, KERR_NONE);
	if (r->api_version >= 2)
		kwr_cstr(w, true, NULL);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, CTL_METADATA_TOPIC);
	kwr_array(w, true, 1);
	dq_write_partition(s, r, err, &st);
	kwr_tags_empty(w);
	if (r->api_version >= 2)
		dq_write_nodes(s, w);
	kwr_tags_empty(w);
	resp_end(r);
	return 0;
}

/* ---- DescribeCluster (60) v0-2 ---------------------------------------------------- */

enum { ENDPOINT_BROKERS = 1, ENDPOINT_CONTROLLERS = 2 };

static void dc_write_controllers(struct sluice_ctl_server *s, struct kwr *w, int16_t v)
{
	const struct sluice_quorum_config *q = &s->cfg.quorum;
	kwr_array(w, true, q->voter_n);
	for (int32_t i = 0; i < q->voter_n; i++) {
		kwr_i32(w, q->voters[i].id);
		kwr_cstr(w, true, q->voters[i].host);
		kwr_i32(w, s->cfg.voter_listener_ports[i]);
		kwr_cstr(w, true, NULL); /* Rack */
		if (v >= 2)
			kwr_bool(w, false);
		kwr_tags_empty(w);
	}
}

static void dc_write_brokers(struct sluice_ctl_server *s, struct kwr *w, int16_t v, bool fenced_too)
{
	size_t n = sluice_image_broker_count(s->img);
	int32_t count = 0;
	for (size_t i = 0; i < n; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(s->img, i);
		count += (fenced_too || !b->fenced) && b->endpoint_n > 0;
	}
	kwr_array(w, true, count);
	for (size_t i = 0; i < n; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(s->img, i);
		if ((!fenced_too && b->fenced) || b->endpoint_n == 0)
			continue;
		kwr_i32(w, b->id);
		kwr_cstr(w, true, b->endpoints[0].host);
		kwr_i32(w, b->endpoints[0].port);
		kwr_cstr(w, true, b->rack[0] ? b->rack : NULL);
		if (v >= 2)
			kwr_bool(w, b->fenced);
		kwr_tags_empty(w);
	}
}

static int describe_cluster_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	int16_t v = r->api_version;
	(void)krd_bool(rd); /* IncludeClusterAuthorizedOperations */
	int8_t type = v >= 1 ? krd_i8(rd) : ENDPOINT_BROKERS;
	bool fenced_too = v >= 2 ? krd_bool(rd) : false;
	krd_tags_skip(rd);
	if (rd->err)
		return -1;
	int16_t err = type == ENDPOINT_BROKERS || type == ENDPOINT_CONTROLLERS ? KERR_NONE : KERR_UNSUPPORTED_ENDPOINT_TYPE;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_i16(w, err);
	kwr_cstr(w, true, err ? "Unsupported endpoint type" : NULL);
	if (v >= 1)
		kwr_i8(w, type);
	kwr_cstr(w, true, s->cfg.cluster_id);
	kwr_i32(w, s->leader_id);
	if (err)
		kwr_array(w, true, 0);
	else if (type == ENDPOINT_CONTROLLERS)
		dc_write_controllers(s, w, v);
	else
		dc_write_brokers(s, w, v, fenced_too);
	kwr_i32(w, INT32_MIN); /* ClusterAuthorizedOperations: not asked */
	kwr_tags_empty(w);
	resp_end(r);
	return 0;
}

/* ---- DescribeConfigs (32) v1-4: TOPIC and BROKER resources from the image ----------- */

enum { SRC_DYNAMIC_TOPIC = 1, SRC_DYNAMIC_BROKER = 2, SRC_DYNAMIC_DEFAULT_BROKER = 3 };
enum { CONFIG_TYPE_STRING = 2 };

struct dcfg_walk {
	struct kwr *w;
	bool flex, synonyms;
	int16_t v;
	int8_t source;
	struct kstr *keys;
	int32_t nkeys; /* -1: every key */
	int32_t count;
	bool write;
};

static bool dcfg_wanted(const struct dcfg_walk *d, const char *name)
{
	if (d->nkeys < 0)
		return true;
	for (int32_t i = 0; i < d->nkeys; i++)
		if (kstr_eq(d->keys[i], name))
			return true;
	return false;
}

static int dcfg_entry(void *arg, const char *name, const char *value)
{
	struct dcfg_walk *d = arg;
	if (!dcfg_wanted(d, name))
		return 0;
	d->count++;
	if (!d->write)
		return 0;
	struct kwr *w = d->w;
	bool per_broker;
	const struct sluice_broker_key *bk =
		d->source == SRC_DYNAMIC_TOPIC ? NULL : sluice_broker_key_find(name, &per_broker);
	bool sensitive = bk && bk->type == 'p'; /* passwords are never described, as in Kafka */
	if (sensitive)
		value = NULL;
	kwr_cstr(w, d->flex, name);
	kwr_cstr(w, d->flex, value);
	kwr_bool(w, false); /* ReadOnly */
	kwr_i8(w, d->source);
	kwr_bool(w, sensitive);
	kwr_array(w, d->flex, d->synonyms ? 1 : 0);
	if (d->synonyms) {
		kwr_cstr(w, d->flex, name);
		kwr_cstr(w, d->flex, value);
		kwr_i8(w, d->source);
		if (d->flex)
			kwr_tags_empty(w);
	}
	if (d->v >= 3) {
		kwr_i8(w, CONFIG_TYPE_STRING);
		kwr_cstr(w, d->flex, NULL); /* Documentation */
	}
	if (d->flex)
		kwr_tags_empty(w);
	return 0;
}

/* One resource: its error, then (when none) its configs. */
static void dcfg_write_resource(struct sluice_ctl_server *s, struct ctl_req *r, int8_t type, struct kstr name,
				struct dcfg_walk *d)
{
	struct kwr *w = &r->out;
	char cname[SLUICE_TOPIC_NAME_MAX + 1], buf[SLUICE_CTL_MSG_MAX];
	int16_t err = KERR_NONE;
	const char *msg = NULL;
	if (!s->leader) {
		err = KERR_NOT_CONTROLLER;
		msg = not_controller_msg(s, buf, sizeof buf);
	} else if ((type != SLUICE_MREC_RESOURCE_TOPIC && type != SLUICE_MREC_RESOURCE_BROKER) ||
		   kstr_copy(cname, sizeof cname, name) < 0) {
		err = KERR_INVALID_REQUEST;
		msg = "Unsupported resource type or name";
	} else if (type == SLUICE_MREC_RESOURCE_TOPIC && !sluice_image_topic_by_name(s->img, cname, strlen(cname))) {
		err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
		msg = "The topic does not exist.";
	}
	kwr_i16(w, err);
	kwr_cstr(w, d->flex, msg);
	kwr_i8(w, type);
	kwr_string(w, d->flex, name.ptr ? name.ptr : "", name.ptr ? name.len : 0);
	if (err) {
		kwr_array(w, d->flex, 0);
	} else {
		d->source = type == SLUICE_MREC_RESOURCE_TOPIC ? SRC_DYNAMIC_TOPIC :
			    cname[0] ? SRC_DYNAMIC_BROKER : SRC_DYNAMIC_DEFAULT_BROKER;
		d->count = 0;
		d->write = false;
		(void)sluice_image_configs(s->img, type, cname, dcfg_entry, d);
		kwr_array(w, d->flex, d->count);
		d->write = true;
		(void)sluice_image_configs(s->img, type, cname, dcfg_entry, d);
	}
	if (d->flex)
		kwr_tags_empty(w);
}

static int describe_configs_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, flex ? 4 : 7);
	struct kstr *keys = calloc(CTL_DESCRIBE_KEYS_MAX, sizeof *keys);
	r->extra = keys;
	if (rd->err || !keys)
		return -1;
	/* Validate the whole body first; the answer reads it again. */
	struct krd body = *rd;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		(void)krd_i8(rd);
		(void)krd_string(rd, flex);
		int32_t nk = krd_array(rd, flex, 1);
		if (nk > CTL_DESCRIBE_KEYS_MAX)
			return krd_fail(rd, "too many configuration keys"), -1;
		for (int32_t k = 0; k < nk && !rd->err; k++)
			(void)krd_string(rd, flex);
		if (flex)
			krd_tags_skip(rd);
	}
	struct dcfg_walk d = {.w = &r->out, .flex = flex, .v = r->api_version, .keys = keys};
	d.synonyms = krd_bool(rd);
	if (r->api_version >= 3)
		(void)krd_bool(rd); /* IncludeDocumentation */
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return -1;
	resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_array(&r->out, flex, n);
	for (int32_t i = 0; i < n; i++) {
		int8_t type = krd_i8(&body);
		struct kstr name = krd_string(&body, flex);
		d.nkeys = krd_array(&body, flex, 1);
		for (int32_t k = 0; k < d.nkeys; k++)
			keys[k] = krd_string(&body, flex);
		if (flex)
			krd_tags_skip(&body);
		dcfg_write_resource(s, r, type, name, &d);
	}
	assert(!body.err);
	if (flex)
		kwr_tags_empty(&r->out);
	resp_end(r);
	return 0;
}

/* ---- FetchSnapshot (59) v0-1: the image as record batches --------------------------- */

/* The image's records are appended to a small metadata log window and
 * read back as batches every SNAPSHOT_CHUNK_RECORDS: the same batch format
 * as the log's, whatever the image's size. */
#define SNAPSHOT_CHUNK_RECORDS 256
_Static_assert(SNAPSHOT_CHUNK_RECORDS <= SLUICE_MLOG_RECORDS_MAX, "a chunk fits a window's records");
_Static_assert((uint64_t)SNAPSHOT_CHUNK_RECORDS * SLUICE_MREC_ENCODED_MAX <= SLUICE_MLOG_BYTES_MAX,
	       "a chunk of the largest records fits a window's bytes: nothing is dropped");

struct snap_fill {
	struct sluice_mlog *mlog;
	struct kwr *out;
	int64_t next; /* the next record's offset inside the snapshot */
};

/* Move the window's records into out as batches, then empty it. */
static int snap_flush(struct snap_fill *f)
{
	int64_t from = sluice_mlog_start(f->mlog), end = sluice_mlog_end(f->mlog);
	assert(end == f->next && (from == end || from == (f->next - 1) / SNAPSHOT_CHUNK_RECORDS * SNAPSHOT_CHUNK_RECORDS));
	while (from < end) {
		int64_t k = sluice_mlog_read(f->mlog, from, CTL_SNAPSHOT_PAGE_BYTES_MAX, f->out);
		if (k <= 0 || f->out->err)
			return -1;
		from += k;
	}
	sluice_mlog_reset(f->mlog);
	return 0;
}

static int snap_append(void *arg, const struct sluice_mrec *m)
{
	struct snap_fill *f = arg;
	if (sluice_mlog_append(f->mlog, f->next++, m) < 0)
		return -1;
	if (f->next % SNAPSHOT_CHUNK_RECORDS == 0)
		return snap_flush(f);
	return 0;
}

/* The image's records as batches (record offsets 0..n-1), in the cache
 * for end offset image offset + 1 unless they are there already. */
static int snapshot_build(struct sluice_ctl_server *s)
{
	int64_t end = sluice_image_offset(s->img) + 1;
	if (s->snap.end_offset == end)
		return 0;
	s->snap.end_offset = -1;
	kwr_reset(&s->snap.bytes);
	struct snap_fill f = {.mlog = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX),
			      .out = &s->snap.bytes};
	if (!f.mlog)
		return -1;
	sluice_mlog_reset(f.mlog);
	int rc = sluice_image_encode(s->img, snap_append, &f);
	if (rc == 0)
		rc = snap_flush(&f);
	sluice_mlog_free(f.mlog);
	if (rc != 0) {
		SLOG_ERR("controller", "the image at offset %" PRId64 " could not be encoded as a snapshot (at record %" PRId64 ")",
			 end - 1, f.next);
		kwr_reset(&s->snap.bytes);
		return -1;
	}
	s->snap.end_offset = end;
	SLOG_INFO("controller", "snapshot of the image at metadata offset %" PRId64 " built for FetchSnapshot: %" PRId64 " records, %zu bytes",
		  end - 1, f.next, s->snap.bytes.len);
	return 0;
}

struct fs_part {
	int32_t partition;
	int64_t end_offset;
	int64_t position;
};

/* Validate the request; count its partitions. */
static int fs_decode(struct krd *rd, int32_t *max_bytes)
{
	(void)krd_i32(rd); /* ReplicaId */
	*max_bytes = krd_i32(rd);
	int32_t tn = krd_array(rd, true, 3);
	for (int32_t t = 0; t < tn && !rd->err; t++) {
		(void)krd_string(rd, true);
		int32_t pn = krd_array(rd, true, 30);
		for (int32_t p = 0; p < pn && !rd->err; p++) {
			(void)krd_i32(rd); /* Partition */
			(void)krd_i32(rd); /* CurrentLeaderEpoch */
			(void)krd_i64(rd); /* SnapshotId.EndOffset */
			(void)krd_i32(rd); /* SnapshotId.Epoch */
			krd_tags_skip(rd);
			(void)krd_i64(rd); /* Position */
			krd_tags_skip(rd);
		}
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	return rd->err ? -1 : 0;
}

static void fs_write_part(struct sluice_ctl_server *s, struct kwr *w, bool metadata, const struct fs_part *p,
			  size_t *budget)
{
	int16_t err = KERR_NONE;
	if (!metadata || p->partition != 0)
		err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
	else if (!s->leader)
		err = KERR_NOT_LEADER_OR_FOLLOWER;
	else if (p->end_offset < 0 && snapshot_build(s) < 0)
		err = KERR_UNKNOWN_SERVER_ERROR;
	else if (p->end_offset >= 0 && p->end_offset != s->snap.end_offset)
		err = KERR_SNAPSHOT_NOT_FOUND;
	else if (p->position < 0 || (uint64_t)p->position > s->snap.bytes.len)
		err = KERR_INVALID_REQUEST; /* Kafka's POSITION_OUT_OF_RANGE */
	struct sluice_quorum_status st;
	sluice_quorum_status(s->q, &st);
	size_t size = err ? 0 : s->snap.bytes.len, pos = err ? 0 : (size_t)p->position;
	size_t len = size - pos < *budget ? size - pos : *budget;
	*budget -= len;
	kwr_i32(w, p->partition);
	kwr_i16(w, err);
	kwr_i64(w, err ? -1 : s->snap.end_offset); /* SnapshotId */
	kwr_i32(w, st.leader_epoch > INT32_MAX ? INT32_MAX : (int32_t)st.leader_epoch);
	kwr_tags_empty(w);
	kwr_i64(w, err ? -1 : (int64_t)size);
	kwr_i64(w, err ? -1 : (int64_t)pos);
	kwr_bytes(w, true, len ? s->snap.bytes.buf + pos : (const uint8_t *)"", (int32_t)len);
	kwr_tags_empty(w);
}

static int fetch_snapshot_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	struct krd body = *rd;
	int32_t max_bytes;
	if (fs_decode(rd, &max_bytes) < 0)
		return -1;
	size_t budget = max_bytes > 0 ? (size_t)max_bytes : 0;
	if (budget > CTL_SNAPSHOT_PAGE_BYTES_MAX)
		budget = CTL_SNAPSHOT_PAGE_BYTES_MAX;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_i16(w, KERR_NONE);
	(void)krd_i32(&body);
	(void)krd_i32(&body);
	int32_t tn = krd_array(&body, true, 3);
	kwr_array(w, true, tn);
	for (int32_t t = 0; t < tn; t++) {
		struct kstr name = krd_string(&body, true);
		kwr_string(w, true, name.ptr ? name.ptr : "", name.ptr ? name.len : 0);
		int32_t pn = krd_array(&body, true, 30);
		kwr_array(w, true, pn);
		for (int32_t p = 0; p < pn; p++) {
			struct fs_part fp;
			fp.partition = krd_i32(&body);
			(void)krd_i32(&body);
			fp.end_offset = krd_i64(&body);
			(void)krd_i32(&body);
			krd_tags_skip(&body);
			fp.position = krd_i64(&body);
			krd_tags_skip(&body);
			fs_write_part(s, w, kstr_eq(name, CTL_METADATA_TOPIC), &fp, &budget);
		}
		krd_tags_skip(&body);
		kwr_tags_empty(w);
	}
	assert(!body.err);
	kwr_tags_empty(w);
	resp_end(r);
	return 0;
}

/* ---- write requests: common ------------------------------------------------------- */

/* n entries of size bytes (zeroed) as r's write state; false when out of memory. */
static bool entries_alloc(struct ctl_req *r, int32_t n, size_t size)
{
	assert(size >= sizeof(struct entry) && n >= 0 && !r->w.entries);
	r->w.entry_size = size;
	r->w.n = n;
	r->w.next = 0;
	r->w.entries = calloc(n > 0 ? (size_t)n : 1, size);
	return r->w.entries != NULL;
}

/* An entry decided: refused (its records dropped from out), or its
 * records (if any) in the part being built. */
static void entry_decided(struct entry *e, struct sluice_ctl_out *out, size_t before, int16_t err)
{
	assert(out->n >= before);
	if (err) {
		out->n = before;
		e->err = err;
		e->phase = PH_DONE;
		if (!e->msg[0])
			snprintf(e->msg, sizeof e->msg, "%s", sluice_kafka_error_name(err));
		return;
	}
	e->msg[0] = '\0';
	e->phase = out->n > before ? PH_PART : PH_DONE;
}

static const char *peer_of(const struct ctl_req *r)
{
	return r->conn ? r->conn->peer : "?";
}

/* ---- BrokerRegistration (62) v0-4 ---------------------------------------------------- */

struct reg_entry {
	struct entry e;
	struct sluice_ctl_registration reg;
	char cluster_id[SLUICE_CTL_CLUSTER_ID_MAX];
	char rack[SLUICE_BROKER_RACK_MAX + 1];
};

static void reg_decode_listener(struct krd *rd, struct reg_entry *re, int32_t i)
{
	struct kstr name = krd_string(rd, true), host = krd_string(rd, true);
	uint16_t port = (uint16_t)krd_i16(rd);
	int16_t protocol = krd_i16(rd);
	krd_tags_skip(rd);
	if (rd->err || re->e.phase == PH_DONE)
		return;
	if (i >= SLUICE_MREC_LISTENERS_MAX) {
		entry_fail(&re->e, KERR_INVALID_REQUEST, "Too many listeners.");
		return;
	}
	struct sluice_mrec_endpoint *ep = &re->reg.endpoints[i];
	if (kstr_copy(ep->name, sizeof ep->name, name) < 0 || kstr_copy(ep->host, sizeof ep->host, host) < 0) {
		entry_fail(&re->e, KERR_INVALID_REQUEST, "A listener's name or host is null or too long.");
		return;
	}
	ep->port = port;
	ep->security_protocol = protocol;
	re->reg.endpoint_n = i + 1;
}

/* The registration's fields that the rules do not check themselves. */
static void reg_check(struct reg_entry *re, struct kstr cluster, struct kstr rack, int32_t listeners)
{
	re->reg.cluster_id = re->cluster_id;
	re->reg.rack = NULL;
	if (re->e.phase == PH_DONE)
		return;
	if (re->reg.broker_id < 0)
		entry_fail(&re->e, KERR_INVALID_REQUEST, "Negative broker id.");
	else if (kstr_copy(re->cluster_id, sizeof re->cluster_id, cluster) < 0)
		entry_fail(&re->e, KERR_INCONSISTENT_CLUSTER_ID, "The cluster id is not this cluster's.");
	else if (rack.ptr && kstr_copy(re->rack, sizeof re->rack, rack) < 0)
		entry_fail(&re->e, KERR_INVALID_REQUEST, "The rack name is too long.");
	else if (listeners <= 0)
		entry_fail(&re->e, KERR_INVALID_REQUEST, "A broker registers at least one listener.");
	if (re->rack[0])
		re->reg.rack = re->rack;
}

static int registration_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	int16_t v = r->api_version;
	if (!entries_alloc(r, 1, sizeof(struct reg_entry)))
		return krd_fail(rd, "out of memory"), -1;
	struct reg_entry *re = (struct reg_entry *)entry_at(&r->w, 0);
	re->reg.broker_id = krd_i32(rd);
	struct kstr cluster = krd_string(rd, true);
	krd_uuid(rd, re->reg.incarnation_id);
	int32_t ln = krd_array(rd, true, 7);
	for (int32_t i = 0; i < ln && !rd->err; i++)
		reg_decode_listener(rd, re, i);
	int32_t fn = krd_array(rd, true, 6);
	for (int32_t i = 0; i < fn && !rd->err; i++) { /* Features: nothing is gated on them yet */
		(void)krd_string(rd, true);
		(void)krd_i16(rd);
		(void)krd_i16(rd);
		krd_tags_skip(rd);
	}
	struct kstr rack = krd_string(rd, true);
	if (v >= 1)
		(void)krd_bool(rd); /* IsMigratingZkBroker */
	if (v >= 2) {
		int32_t dirs = krd_array(rd, true, 16);
		krd_skip(rd, dirs > 0 ? (size_t)dirs * 16 : 0);
	}
	re->reg.previous_broker_epoch = v >= 3 ? krd_i64(rd) : -1;
	krd_tags_skip(rd);
	if (rd->err)
		return -1;
	reg_check(re, cluster, rack, ln);
	write_submit(s, r);
	return 0;
}

static bool registration_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	struct reg_entry *re = (struct reg_entry *)entry_at(&r->w, 0);
	r->w.next = 1;
	if (re->e.phase != PH_UNDECIDED)
		return true;
	int64_t epoch = -1;
	int16_t err = sluice_ctl_register(s->ctl, &re->reg, s->cfg.cluster_id, now_ms(s), out, &epoch, re->e.msg,
					  sizeof re->e.msg);
	entry_decided(&re->e, out, 0, err);
	return true;
}

static void registration_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	struct reg_entry *re = (struct reg_entry *)entry_at(&r->w, 0);
	int64_t epoch = -1;
	if (!re->e.err) {
		/* The epoch is the offset of the RegisterBrokerRecord: the image has it. */
		const struct sluice_image_broker *b = sluice_image_broker(s->img, re->reg.broker_id);
		epoch = b ? b->epoch : -1;
	} else if (re->e.err != KERR_NOT_CONTROLLER) {
		char msg[CTL_LOG_STRING_MAX];
		SLOG_INFO("controller", "%s: registration of broker %d refused: %s (%s)", peer_of(r), re->reg.broker_id,
			  sluice_kafka_error_name(re->e.err), printable(re->e.msg, msg));
	}
	resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_i16(&r->out, re->e.err);
	kwr_i64(&r->out, epoch);
	kwr_tags_empty(&r->out);
	resp_end(r);
}

static const struct write_ops registration_ops = {registration_decide, registration_answer};

/* ---- BrokerHeartbeat (63) v0-1 ---------------------------------------------------------- */

struct hb_entry {
	struct entry e;
	struct sluice_ctl_heartbeat hb;
	struct sluice_ctl_heartbeat_result res;
};

static int heartbeat_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	if (!entries_alloc(r, 1, sizeof(struct hb_entry)))
		return krd_fail(rd, "out of memory"), -1;
	struct hb_entry *he = (struct hb_entry *)entry_at(&r->w, 0);
	he->hb.broker_id = krd_i32(rd);
	he->hb.broker_epoch = krd_i64(rd);
	he->hb.metadata_offset = krd_i64(rd);
	he->hb.want_fence = krd_bool(rd);
	he->hb.want_shutdown = krd_bool(rd);
	krd_tags_skip(rd); /* v1: OfflineLogDirs (tag 0) */
	if (rd->err)
		return -1;
	write_submit(s, r);
	return 0;
}

/* A broker's last heartbeat, kept for DescribeQuorum's observers (sorted by id). */
static void observer_note(struct sluice_ctl_server *s, int32_t id, int64_t offset)
{
	uint32_t lo = 0, hi = s->observer_n;
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		if (s->observers[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == s->observer_n || s->observers[lo].id != id) {
		if (s->observer_n >= SLUICE_IMAGE_BROKERS_MAX)
			return;
		memmove(&s->observers[lo + 1], &s->observers[lo], (s->observer_n - lo) * sizeof *s->observers);
		s->observer_n++;
		s->observers[lo].id = id;
	}
	s->observers[lo].offset = offset;
	s->observers[lo].last_ms = now_ms(s);
}

static bool heartbeat_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	struct hb_entry *he = (struct hb_entry *)entry_at(&r->w, 0);
	r->w.next = 1;
	if (he->e.phase != PH_UNDECIDED)
		return true;
	int16_t err = sluice_ctl_heartbeat(s->ctl, &he->hb, now_ms(s), out, &he->res);
	if (!err)
		observer_note(s, he->hb.broker_id, he->hb.metadata_offset);
	entry_decided(&he->e, out, 0, err);
	return true;
}

static void heartbeat_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	(void)s;
	const struct hb_entry *he = (const struct hb_entry *)entry_at(&r->w, 0);
	bool ok = !he->e.err;
	resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_i16(&r->out, he->e.err);
	kwr_bool(&r->out, ok && he->res.is_caught_up);
	kwr_bool(&r->out, !ok || he->res.is_fenced);
	kwr_bool(&r->out, ok && he->res.should_shutdown);
	kwr_tags_empty(&r->out);
	resp_end(r);
}

static const struct write_ops heartbeat_ops = {heartbeat_decide, heartbeat_answer};

/* ---- AllocateProducerIds (67) v0 ---------------------------------------------------------- */

struct pid_entry {
	struct entry e;
	int32_t broker_id;
	int64_t broker_epoch;
	int64_t start;
	int32_t len;
};

static int allocate_producer_ids_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	if (!entries_alloc(r, 1, sizeof(struct pid_entry)))
		return krd_fail(rd, "out of memory"), -1;
	struct pid_entry *pe = (struct pid_entry *)entry_at(&r->w, 0);
	pe->broker_id = krd_i32(rd);
	pe->broker_epoch = krd_i64(rd);
	krd_tags_skip(rd);
	if (rd->err)
		return -1;
	write_submit(s, r);
	return 0;
}

static bool allocate_producer_ids_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	struct pid_entry *pe = (struct pid_entry *)entry_at(&r->w, 0);
	r->w.next = 1;
	if (pe->e.phase != PH_UNDECIDED)
		return true;
	int16_t err = sluice_ctl_allocate_producer_ids(s->ctl, pe->broker_id, pe->broker_epoch, out, &pe->start, &pe->len);
	entry_decided(&pe->e, out, 0, err);
	return true;
}

static void allocate_producer_ids_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	const struct pid_entry *pe = (const struct pid_entry *)entry_at(&r->w, 0);
	resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_i16(&r->out, pe->e.err);
	kwr_i64(&r->out, pe->e.err ? -1 : pe->start);
	kwr_i32(&r->out, pe->e.err ? 0 : pe->len);
	write_end_tags(s, r);
	resp_end(r);
}

static const struct write_ops allocate_producer_ids_ops = {allocate_producer_ids_decide, allocate_producer_ids_answer};

/* ---- AlterPartition (56) v2-3 ----------------------------------------------------------------- */

struct ap_entry {
	struct entry e;
	struct sluice_ctl_alter_partition a;
	uint8_t key[20]; /* topic id and partition: duplicates are refused */
};

struct ap_topic {
	uint8_t id[16];
	int32_t first, n;
};

struct ap_state {
	int32_t topic_n;
	struct ap_topic topics[];
};

static void ap_decode_partition(struct krd *rd, int16_t v, struct ap_entry *pe)
{
	int32_t partition = krd_i32(rd), leader_epoch = krd_i32(rd);
	struct sluice_mrec_ids isr = {0};
	bool too_many = false;
	int32_t n = krd_array(rd, true, v >= 3 ? 13 : 4);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		int32_t id = krd_i32(rd);
		if (v >= 3) {
			(void)krd_i64(rd); /* the replica's broker epoch */
			krd_tags_skip(rd);
		}
		if (isr.n < SLUICE_REPLICAS_MAX)
			isr.id[isr.n++] = id;
		else
			too_many = true;
	}
	(void)krd_i8(rd); /* LeaderRecoveryState */
	int32_t partition_epoch = krd_i32(rd);
	krd_tags_skip(rd);
	if (!pe || rd->err)
		return;
	pe->a.partition = partition;
	pe->a.leader_epoch = leader_epoch;
	pe->a.partition_epoch = partition_epoch;
	pe->a.new_isr = isr;
	memcpy(pe->key, pe->a.topic_id, 16);
	kput32(pe->key + 16, (uint32_t)partition);
	if (too_many)
		entry_fail(&pe->e, KERR_INVALID_REQUEST, "The new ISR is larger than any replica set.");
}

/* Topics and their partitions; with st NULL only counts them (*tn, *pn). */
static void ap_decode(struct ctl_req *r, struct krd *rd, struct ap_state *st, int32_t *tn, int32_t *pn)
{
	int32_t broker_id = krd_i32(rd);
	int64_t broker_epoch = krd_i64(rd);
	int32_t topics = krd_array(rd, true, 18);
	*tn = topics > 0 ? topics : 0;
	*pn = 0;
	for (int32_t t = 0; t < topics && !rd->err; t++) {
		uint8_t id[16];
		krd_uuid(rd, id);
		int32_t n = krd_array(rd, true, 11);
		if (st) {
			memcpy(st->topics[t].id, id, 16);
			st->topics[t].first = *pn;
			st->topics[t].n = n > 0 ? n : 0;
		}
		for (int32_t p = 0; p < n && !rd->err; p++) {
			struct ap_entry *pe = st ? (struct ap_entry *)entry_at(&r->w, *pn) : NULL;
			if (pe) {
				memcpy(pe->a.topic_id, id, 16);
				pe->a.broker_id = broker_id;
				pe->a.broker_epoch = broker_epoch;
			}
			ap_decode_partition(rd, r->api_version, pe);
			(*pn)++;
		}
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
}

static int alter_partition_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	struct krd count = *rd;
	int32_t tn, pn;
	ap_decode(r, &count, NULL, &tn, &pn);
	if (count.err) {
		*rd = count;
		return -1;
	}
	if (pn > CTL_ENTRIES_MAX)
		return krd_fail(rd, "too many partitions"), -1;
	struct ap_state *st = calloc(1, sizeof *st + (size_t)tn * sizeof st->topics[0]);
	r->api = st;
	struct keyset seen = {0};
	if (!st || !entries_alloc(r, pn, sizeof(struct ap_entry)) || keyset_init(&seen, (size_t)pn) < 0)
		return krd_fail(rd, "out of memory"), -1;
	st->topic_n = tn;
	ap_decode(r, rd, st, &tn, &pn);
	assert(!rd->err && pn == r->w.n);
	for (int32_t i = 0; i < pn; i++) {
		struct ap_entry *pe = (struct ap_entry *)entry_at(&r->w, i);
		if (!keyset_add(&seen, pe->key, sizeof pe->key) && pe->e.phase != PH_DONE)
			entry_fail(&pe->e, KERR_INVALID_REQUEST, "Duplicate partition in the request.");
	}
	keyset_free(&seen);
	write_submit(s, r);
	return 0;
}

static bool alter_partition_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	for (; r->w.next < r->w.n; r->w.next++) {
		struct ap_entry *pe = (struct ap_entry *)entry_at(&r->w, r->w.next);
		if (pe->e.phase != PH_UNDECIDED)
			continue;
		if (out->n > 0 && out->n + 1 > CTL_PART_RECORDS_SOFT)
			return false;
		size_t before = out->n;
		entry_decided(&pe->e, out, before, sluice_ctl_alter_partition(s->ctl, &pe->a, out));
		if (pe->e.err)
			SLOG_DEBUG("controller", "%s: AlterPartition of partition %d from broker %d refused: %s", peer_of(r),
				   pe->a.partition, pe->a.broker_id, sluice_kafka_error_name(pe->e.err));
	}
	return true;
}

static void ap_write_partition(struct sluice_ctl_server *s, struct kwr *w, const struct ap_entry *pe)
{
	const struct sluice_image_topic *t = sluice_image_topic_by_id(s->img, pe->a.topic_id);
	const struct sluice_image_partition *p =
		t && pe->a.partition >= 0 && pe->a.partition < t->partition_n ? &t->partitions[pe->a.partition] : NULL;
	/* A change that completed a reassignment may have moved the leadership
	 * away from the sender (Kafka: NEW_LEADER_ELECTED, the change made). */
	if (!pe->e.err && p && p->leader != pe->a.broker_id) {
		kwr_i32(w, pe->a.partition);
		kwr_i16(w, KERR_NEW_LEADER_ELECTED);
		kwr_i32(w, -1);
		kwr_i32(w, -1);
		kwr_array(w, true, 0);
		kwr_i8(w, 0);
		kwr_i32(w, -1);
		kwr_tags_empty(w);
		return;
	}
	kwr_i32(w, pe->a.partition);
	kwr_i16(w, pe->e.err);
	kwr_i32(w, p ? p->leader : -1);
	kwr_i32(w, p ? p->leader_epoch : -1);
	kwr_array(w, true, p ? p->isr.n : 0);
	for (int32_t i = 0; p && i < p->isr.n; i++)
		kwr_i32(w, p->isr.id[i]);
	kwr_i8(w, p ? p->leader_recovery_state : 0);
	kwr_i32(w, p ? p->partition_epoch : -1);
	kwr_tags_empty(w);
}

static void alter_partition_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	const struct ap_state *st = r->api;
	struct kwr *w = &r->out;
	bool top = r->w.top_err == KERR_NOT_CONTROLLER;
	resp_begin(r);
	kwr_i32(w, 0);
	kwr_i16(w, top ? r->w.top_err : KERR_NONE);
	kwr_array(w, true, top ? 0 : st->topic_n);
	for (int32_t t = 0; !top && t < st->topic_n; t++) {
		kwr_uuid(w, st->topics[t].id);
		kwr_array(w, true, st->topics[t].n);
		for (int32_t i = 0; i < st->topics[t].n; i++)
			ap_write_partition(s, w, (const struct ap_entry *)entry_at(&r->w, st->topics[t].first + i));
		kwr_tags_empty(w);
	}
	kwr_tags_empty(w);
	resp_end(r);
}

static const struct write_ops alter_partition_ops = {alter_partition_decide, alter_partition_answer};

/* ---- AlterPartitionReassignments (45) v0-1 ------------------------------------------------------- */

/* One partition of the request: its target (cancel: Replicas null). */
struct ra_entry {
	struct entry e;
	int32_t partition;
	bool cancel;
	struct sluice_mrec_ids target;
};

struct ra_topic {
	struct kstr name; /* in the frame */
	int32_t first, n; /* its entries */
};

struct ra_state {
	bool allow_rf_change;
	int32_t topic_n;
	struct ra_topic topics[];
};

static void ra_decode_partition(struct krd *rd, struct ra_entry *pe)
{
	int32_t partition = krd_i32(rd);
	int32_t n = krd_array(rd, true, 4);
	struct sluice_mrec_ids target = {0};
	bool too_many = false;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		int32_t id = krd_i32(rd);
		if (target.n < SLUICE_REPLICAS_MAX)
			target.id[target.n++] = id;
		else
			too_many = true;
	}
	krd_tags_skip(rd);
	if (!pe || rd->err)
		return;
	pe->partition = partition;
	pe->cancel = n < 0;
	pe->target = target;
	if (too_many)
		entry_fail(&pe->e, KERR_INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment names more replicas "
			   "than a partition may have (16).");
}

/* Topics and their partitions; with st NULL only counts them (*tn, *pn). */
static void ra_decode(struct ctl_req *r, struct krd *rd, struct ra_state *st, int32_t *tn, int32_t *pn)
{
	(void)krd_i32(rd); /* TimeoutMs: answered once committed, well within it */
	bool allow = r->api_version >= 1 ? krd_bool(rd) : true;
	int32_t topics = krd_array(rd, true, 3);
	*tn = topics > 0 ? topics : 0;
	*pn = 0;
	if (st)
		st->allow_rf_change = allow;
	for (int32_t t = 0; t < topics && !rd->err; t++) {
		struct kstr name = krd_string(rd, true);
		int32_t n = krd_array(rd, true, 6);
		if (st) {
			st->topics[t] = (struct ra_topic){name, *pn, n > 0 ? n : 0};
		}
		for (int32_t p = 0; p < n && !rd->err; p++) {
			struct ra_entry *pe = st ? (struct ra_entry *)entry_at(&r->w, *pn) : NULL;
			ra_decode_partition(rd, pe);
			if (pe && !rd->err && !name.ptr)
				entry_fail(&pe->e, KERR_INVALID_REQUEST, "A topic name is null.");
			(*pn)++;
		}
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
}

static int alter_reassignments_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	struct krd count = *rd;
	int32_t tn, pn;
	ra_decode(r, &count, NULL, &tn, &pn);
	if (count.err) {
		*rd = count;
		return -1;
	}
	if (pn > CTL_ENTRIES_MAX)
		return krd_fail(rd, "too many partitions"), -1;
	struct ra_state *st = calloc(1, sizeof *st + (size_t)tn * sizeof st->topics[0]);
	r->api = st;
	if (!st || !entries_alloc(r, pn, sizeof(struct ra_entry)))
		return krd_fail(rd, "out of memory"), -1;
	st->topic_n = tn;
	ra_decode(r, rd, st, &tn, &pn);
	assert(!rd->err && pn == r->w.n);
	write_submit(s, r);
	return 0;
}

static bool alter_reassignments_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	const struct ra_state *st = r->api;
	int32_t t = 0;
	for (; r->w.next < r->w.n; r->w.next++) {
		struct ra_entry *pe = (struct ra_entry *)entry_at(&r->w, r->w.next);
		if (pe->e.phase != PH_UNDECIDED)
			continue;
		if (out->n > 0 && out->n + 1 > CTL_PART_RECORDS_SOFT)
			return false;
		while (t < st->topic_n && r->w.next >= st->topics[t].first + st->topics[t].n)
			t++; /* the topics' entries are consecutive, in request order */
		assert(t < st->topic_n && r->w.next >= st->topics[t].first);
		struct kstr name = st->topics[t].name;
		size_t before = out->n;
		int16_t err = sluice_ctl_reassign(s->ctl, name.ptr, (size_t)name.len, pe->partition,
						  pe->cancel ? NULL : &pe->target, st->allow_rf_change, out, pe->e.msg,
						  sizeof pe->e.msg);
		entry_decided(&pe->e, out, before, err);
		if (err)
			SLOG_INFO("controller", "%s: reassignment of %.*s-%d refused: %s: %s", peer_of(r),
				  (int)(name.len < 64 ? name.len : 64), name.ptr, pe->partition, sluice_kafka_error_name(err),
				  pe->e.msg);
	}
	return true;
}

static void alter_reassignments_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	const struct ra_state *st = r->api;
	struct kwr *w = &r->out;
	bool top = r->w.top_err == KERR_NOT_CONTROLLER;
	resp_begin(r);
	kwr_i32(w, 0);
	if (r->api_version >= 1)
		kwr_bool(w, st->allow_rf_change);
	kwr_i16(w, top ? r->w.top_err : KERR_NONE);
	kwr_cstr(w, true, top ? "This controller is not the active one." : NULL);
	kwr_array(w, true, st->topic_n);
	for (int32_t t = 0; t < st->topic_n; t++) {
		const struct ra_topic *rt = &st->topics[t];
		kwr_string(w, true, rt->name.ptr ? rt->name.ptr : "", rt->name.ptr ? rt->name.len : 0);
		kwr_array(w, true, rt->n);
		for (int32_t i = rt->first; i < rt->first + rt->n; i++) {
			const struct ra_entry *pe = (const struct ra_entry *)entry_at(&r->w, i);
			kwr_i32(w, pe->partition);
			kwr_i16(w, pe->e.err);
			kwr_cstr(w, true, pe->e.err ? pe->e.msg : NULL);
			kwr_tags_empty(w);
		}
		kwr_tags_empty(w);
	}
	write_end_tags(s, r);
	resp_end(r);
}

static const struct write_ops alter_reassignments_ops = {alter_reassignments_decide, alter_reassignments_answer};

/* ---- ListPartitionReassignments (46) v0: from the committed image -------------------------------- */

static void lr_write_partition(struct kwr *w, int32_t index, const struct sluice_image_partition *p)
{
	kwr_i32(w, index);
	const struct sluice_mrec_ids *lists[3] = {&p->replicas, &p->adding, &p->removing};
	for (int k = 0; k < 3; k++) {
		kwr_array(w, true, lists[k]->n);
		for (int32_t i = 0; i < lists[k]->n; i++)
			kwr_i32(w, lists[k]->id[i]);
	}
	kwr_tags_empty(w);
}

/* Topic t's partitions being reassigned: all of them (idx NULL), or those
 * of the request's PartitionIndexes at idx (n of them, validated). */
static int32_t lr_write_topic(struct kwr *w, const struct sluice_image_topic *t, struct krd *idx, int32_t n)
{
	int32_t count = 0;
	struct krd scan = idx ? *idx : (struct krd){0};
	for (int32_t k = 0; k < (idx ? n : t->partition_n); k++) {
		int32_t pi = idx ? krd_i32(&scan) : k;
		count += pi >= 0 && pi < t->partition_n && sluice_ctl_reassigning(&t->partitions[pi]);
	}
	if (!count || !w)
		return count;
	kwr_cstr(w, true, t->name);
	kwr_array(w, true, count);
	scan = idx ? *idx : (struct krd){0};
	for (int32_t k = 0; k < (idx ? n : t->partition_n); k++) {
		int32_t pi = idx ? krd_i32(&scan) : k;
		if (pi >= 0 && pi < t->partition_n && sluice_ctl_reassigning(&t->partitions[pi]))
			lr_write_partition(w, pi, &t->partitions[pi]);
	}
	kwr_tags_empty(w);
	return count;
}

/* Every topic with a partition being reassigned (Topics null), or the
 * request's topics (unknown ones left out, as Kafka does); with w NULL
 * only counts the topics the answer lists. */
static int32_t lr_write_topics(struct sluice_ctl_server *s, struct kwr *w, struct krd body, int32_t topics)
{
	int32_t listed = 0;
	if (topics < 0) {
		size_t tn = sluice_image_topic_count(s->img);
		for (size_t i = 0; i < tn; i++)
			listed += lr_write_topic(w, sluice_image_topic_at(s->img, i), NULL, 0) > 0;
		return listed;
	}
	for (int32_t i = 0; i < topics; i++) {
		struct kstr name = krd_string(&body, true);
		int32_t n = krd_array(&body, true, 4);
		struct krd idx = body;
		krd_skip(&body, n > 0 ? (size_t)n * 4 : 0);
		krd_tags_skip(&body);
		const struct sluice_image_topic *t =
			name.ptr ? sluice_image_topic_by_name(s->img, name.ptr, (size_t)name.len) : NULL;
		if (t)
			listed += lr_write_topic(w, t, &idx, n) > 0;
	}
	assert(!body.err);
	return listed;
}

static int list_reassignments_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	(void)krd_i32(rd); /* TimeoutMs */
	int32_t topics = krd_array(rd, true, 3);
	struct krd body = *rd; /* validated below, read again by the answer */
	for (int32_t i = 0; i < topics && !rd->err; i++) {
		(void)krd_string(rd, true);
		int32_t n = krd_array(rd, true, 4);
		if (n < 0 && !rd->err)
			krd_fail(rd, "null PartitionIndexes");
		krd_skip(rd, n > 0 ? (size_t)n * 4 : 0);
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	if (rd->err)
		return -1;
	struct kwr *w = &r->out;
	resp_begin(r);
	kwr_i32(w, 0);
	if (!s->leader) {
		kwr_i16(w, KERR_NOT_CONTROLLER);
		kwr_cstr(w, true, "This controller is not the active one.");
		kwr_array(w, true, 0);
	} else {
		kwr_i16(w, KERR_NONE);
		kwr_cstr(w, true, NULL);
		kwr_array(w, true, lr_write_topics(s, NULL, body, topics));
		(void)lr_write_topics(s, w, body, topics);
	}
	kwr_tags_empty(w);
	resp_end(r);
	return 0;
}

/* ---- manual replica assignments (CreateTopics, CreatePartitions) --------------------------- */

/* An assignment decoded (control/assignment.h), with the arrays it owns. */
struct asg_buf {
	struct sluice_assignment a;
	int32_t *partition, *first, *ids;
};

static void asg_free(struct asg_buf *b)
{
	free(b->partition);
	free(b->first);
	free(b->ids);
	memset(b, 0, sizeof *b);
}

/* The Assignments scanned into ref (end: the frame's end) decoded into b;
 * b->a.n == 0 when there are none. -1 when out of memory. */
static int asg_decode(const struct sluice_assignment_ref *ref, const uint8_t *end, bool flex, bool with_index,
		      struct asg_buf *b)
{
	memset(b, 0, sizeof *b);
	if (ref->n == 0)
		return 0;
	assert(ref->n <= SLUICE_ASSIGNMENT_LISTS_MAX && ref->ids >= 0);
	b->partition = with_index ? malloc((size_t)ref->n * sizeof *b->partition) : NULL;
	b->first = malloc(((size_t)ref->n + 1) * sizeof *b->first);
	b->ids = malloc(((size_t)ref->ids + 1) * sizeof *b->ids);
	if ((with_index && !b->partition) || !b->first || !b->ids) {
		asg_free(b);
		return -1;
	}
	sluice_assignment_decode(ref, end, flex, with_index, b->partition, b->first, b->ids, &b->a);
	return 0;
}

/* ---- CreateTopics (19) v2-7 --------------------------------------------------------------- */

struct ct_entry {
	struct entry e;
	struct kstr name;
	int32_t partitions;
	int16_t rf;
	struct sluice_assignment_ref asg;
	int32_t cfg_n;
	const uint8_t *cfg_at; /* its Configs in the frame, decoded again when needed */
	bool has_id;           /* the Sluice tag 1000: the id found on disk (adoption) */
	uint8_t id[16];
	int32_t parts_out;
};

struct ct_state {
	bool validate_only;
};

/* A topic's tagged fields: SluiceTopicId (tag 1000) is read, others skipped. */
static void ct_decode_tags(struct krd *rd, struct ct_entry *ce)
{
	uint32_t count = krd_uvarint(rd);
	if (count > SLUICE_KAFKA_TAGGED_FIELDS_MAX) {
		krd_fail(rd, "tagged field count");
		return;
	}
	for (uint32_t i = 0; i < count && !rd->err; i++) {
		uint32_t tag = krd_uvarint(rd), size = krd_uvarint(rd);
		if (tag != CTL_TAG_SLUICE_TOPIC_ID) {
			krd_skip(rd, size);
			continue;
		}
		if (size != 16) {
			krd_fail(rd, "SluiceTopicId is not 16 bytes");
			return;
		}
		krd_uuid(rd, ce->id);
		ce->has_id = true;
	}
}

static void ct_decode_topic(struct krd *rd, bool flex, struct ct_entry *ce)
{
	ce->name = krd_string(rd, flex);
	ce->partitions = krd_i32(rd);
	ce->rf = krd_i16(rd);
	char asg_msg[SLUICE_CTL_MSG_MAX];
	int16_t asg_err = sluice_assignment_scan(rd, flex, true, &ce->asg, asg_msg, sizeof asg_msg);
	ce->cfg_at = rd->p;
	int32_t nc = krd_array(rd, flex, flex ? 2 : 4);
	ce->cfg_n = nc > 0 ? nc : 0;
	bool bad = nc > SLUICE_TOPIC_CONFIGS_MAX;
	for (int32_t c = 0; c < nc && !rd->err; c++) {
		struct kstr key = krd_string(rd, flex), val = krd_string(rd, flex);
		if (flex)
			krd_tags_skip(rd);
		bad |= !key.ptr || key.len >= SLUICE_TOPIC_CONFIG_KEY_MAX || (val.ptr && val.len >= SLUICE_TOPIC_CONFIG_VALUE_MAX);
	}
	if (flex)
		ct_decode_tags(rd, ce);
	if (rd->err)
		return;
	if (!ce->name.ptr)
		entry_fail(&ce->e, KERR_INVALID_TOPIC_EXCEPTION, "A topic name is null.");
	else if (asg_err)
		entry_fail(&ce->e, asg_err, asg_msg);
	else if (bad)
		entry_fail(&ce->e, KERR_INVALID_CONFIG, "Too many, null or too long topic configs.");
}

/* Its configs decoded again from the frame into out (null values skipped). */
static int32_t ct_configs(const struct ct_entry *ce, bool flex, const uint8_t *end, struct sluice_topic_config *out)
{
	struct krd cr;
	krd_init(&cr, ce->cfg_at, (size_t)(end - ce->cfg_at));
	(void)krd_array(&cr, flex, 0);
	int32_t n = 0;
	for (int32_t c = 0; c < ce->cfg_n && !cr.err; c++) {
		struct kstr key = krd_string(&cr, flex), val = krd_string(&cr, flex);
		if (flex)
			krd_tags_skip(&cr);
		if (!val.ptr)
			continue;
		assert(n < SLUICE_TOPIC_CONFIGS_MAX && key.ptr); /* checked at decode */
		memset(&out[n], 0, sizeof out[n]);
		memcpy(out[n].key, key.ptr, (size_t)key.len);
		memcpy(out[n].value, val.ptr, (size_t)val.len);
		n++;
	}
	assert(!cr.err);
	return n;
}

static int create_topics_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, flex ? 10 : 16);
	if (rd->err || n > CTL_ENTRIES_MAX)
		return krd_fail(rd, "topic count"), -1;
	struct ct_state *cs = calloc(1, sizeof *cs);
	r->api = cs;
	struct keyset seen = {0};
	if (!cs || !entries_alloc(r, n > 0 ? n : 0, sizeof(struct ct_entry)) || keyset_init(&seen, (size_t)r->w.n) < 0)
		return krd_fail(rd, "out of memory"), -1;
	for (int32_t i = 0; i < r->w.n && !rd->err; i++)
		ct_decode_topic(rd, flex, (struct ct_entry *)entry_at(&r->w, i));
	(void)krd_i32(rd); /* timeoutMs */
	cs->validate_only = r->api_version >= 1 ? krd_bool(rd) : false;
	if (flex)
		krd_tags_skip(rd);
	for (int32_t i = 0; i < r->w.n && !rd->err; i++) {
		struct ct_entry *ce = (struct ct_entry *)entry_at(&r->w, i);
		if (ce->name.ptr && !keyset_add(&seen, ce->name.ptr, (size_t)ce->name.len) && ce->e.phase != PH_DONE)
			entry_fail(&ce->e, KERR_INVALID_REQUEST, "Create topics request from client contains a duplicate topic.");
	}
	keyset_free(&seen);
	if (rd->err)
		return -1;
	write_submit(s, r);
	return 0;
}

static bool create_topics_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	const struct ct_state *cs = r->api;
	const uint8_t *end = r->frame + r->frame_len;
	for (; r->w.next < r->w.n; r->w.next++) {
		struct ct_entry *ce = (struct ct_entry *)entry_at(&r->w, r->w.next);
		if (ce->e.phase != PH_UNDECIDED)
			continue;
		int32_t parts = ce->asg.n > 0 ? ce->asg.n : ce->partitions > 0 ? ce->partitions : s->cfg.num_partitions;
		size_t need = (size_t)parts + 1 + (size_t)ce->cfg_n;
		if (out->n > 0 && out->n + need > CTL_PART_RECORDS_SOFT)
			return false;
		struct asg_buf asg;
		if (asg_decode(&ce->asg, end, r->flexible, true, &asg) < 0) {
			entry_fail(&ce->e, KERR_UNKNOWN_SERVER_ERROR, "out of memory");
			continue;
		}
		struct sluice_topic_config cfgs[SLUICE_TOPIC_CONFIGS_MAX];
		const struct sluice_ctl_new_topic nt = {
			.name = ce->name.ptr, .name_len = (size_t)ce->name.len, .partitions = ce->partitions,
			.replication_factor = ce->rf, .assignment = asg.a.n > 0 ? &asg.a : NULL, .configs = cfgs,
			.config_n = ct_configs(ce, r->flexible, end, cfgs), .id = ce->has_id ? ce->id : NULL};
		size_t before = out->n;
		int16_t err = sluice_ctl_create_topic_spec(s->ctl, &nt, cs->validate_only, out, ce->id, &ce->parts_out,
							   ce->e.msg, sizeof ce->e.msg);
		asg_free(&asg);
		entry_decided(&ce->e, out, before, err);
	}
	return true;
}

/* A created topic's Configs (v5+): echoed as given. */
static void ct_write_configs(struct kwr *w, const struct ct_entry *ce, const uint8_t *end)
{
	struct sluice_topic_config cfgs[SLUICE_TOPIC_CONFIGS_MAX];
	int32_t n = ct_configs(ce, true, end, cfgs);
	kwr_array(w, true, n);
	for (int32_t c = 0; c < n; c++) {
		kwr_cstr(w, true, cfgs[c].key);
		kwr_cstr(w, true, cfgs[c].value);
		kwr_bool(w, false); /* ReadOnly */
		kwr_i8(w, SRC_DYNAMIC_TOPIC);
		kwr_bool(w, false); /* IsSensitive */
		kwr_tags_empty(w);
	}
}

static void ct_write_topic(struct sluice_ctl_server *s, struct ctl_req *r, const struct ct_entry *ce)
{
	static const uint8_t zero_id[16];
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	const struct sluice_image_topic *t = ce->e.err ? NULL : sluice_image_topic_by_id(s->img, ce->id);
	int16_t rf = t && t->partition_n > 0 ? (int16_t)t->partitions[0].replicas.n :
		     ce->asg.n > 0 ? (int16_t)ce->asg.rf :
		     ce->rf > 0 ? ce->rf : (int16_t)s->cfg.default_replication_factor;
	kwr_string(w, flex, ce->name.ptr ? ce->name.ptr : "", ce->name.ptr ? ce->name.len : 0);
	if (v >= 7)
		kwr_uuid(w, ce->e.err ? zero_id : ce->id);
	kwr_i16(w, ce->e.err);
	kwr_cstr(w, flex, ce->e.err ? ce->e.msg : NULL);
	if (v >= 5) {
		kwr_i32(w, ce->e.err ? -1 : t ? t->partition_n : ce->parts_out);
		kwr_i16(w, ce->e.err ? -1 : rf);
		if (ce->e.err)
			kwr_array(w, true, -1);
		else
			ct_write_configs(w, ce, r->frame + r->frame_len);
	}
	if (flex)
		kwr_tags_empty(w);
}

static void create_topics_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_array(&r->out, r->flexible, r->w.n);
	for (int32_t i = 0; i < r->w.n; i++)
		ct_write_topic(s, r, (const struct ct_entry *)entry_at(&r->w, i));
	write_end_tags(s, r);
	resp_end(r);
}

static const struct write_ops create_topics_ops = {create_topics_decide, create_topics_answer};

/* ---- DeleteTopics (20) v1-6 ------------------------------------------------------------------ */

struct dt_entry {
	struct entry e;
	struct kstr name; /* ptr NULL: by id (v6) */
	uint8_t id[16];
	char resolved[SLUICE_TOPIC_NAME_MAX + 1]; /* the deleted topic's name */
};

struct dt_state {
	struct keyset ids; /* topics deleted by the request so far: each once */
};

static void dt_state_free(void *api)
{
	keyset_free(&((struct dt_state *)api)->ids);
}

static int delete_topics_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	bool flex = r->flexible, v6 = r->api_version >= 6;
	int32_t n = krd_array(rd, flex, v6 ? 18 : flex ? 1 : 2);
	if (rd->err || n > CTL_ENTRIES_MAX)
		return krd_fail(rd, "topic count"), -1;
	struct dt_state *ds = calloc(1, sizeof *ds);
	r->api = ds;
	r->api_free = dt_state_free;
	if (!ds || !entries_alloc(r, n > 0 ? n : 0, sizeof(struct dt_entry)) || keyset_init(&ds->ids, (size_t)r->w.n) < 0)
		return krd_fail(rd, "out of memory"), -1;
	for (int32_t i = 0; i < r->w.n && !rd->err; i++) {
		struct dt_entry *de = (struct dt_entry *)entry_at(&r->w, i);
		de->name = krd_string(rd, flex);
		if (v6) {
			krd_uuid(rd, de->id);
			krd_tags_skip(rd);
		} else if (!de->name.ptr && !rd->err) {
			entry_fail(&de->e, KERR_INVALID_REQUEST, "A topic name is null.");
		}
	}
	(void)krd_i32(rd); /* TimeoutMs */
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return -1;
	write_submit(s, r);
	return 0;
}

static bool delete_topics_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	struct dt_state *ds = r->api;
	for (; r->w.next < r->w.n; r->w.next++) {
		struct dt_entry *de = (struct dt_entry *)entry_at(&r->w, r->w.next);
		if (de->e.phase != PH_UNDECIDED)
			continue;
		/* its RemoveTopicRecord, and room for what the rules add with it */
		if (out->n > 0 && out->n + 1 + SLUICE_TOPIC_CONFIGS_MAX > CTL_PART_RECORDS_SOFT)
			return false;
		size_t before = out->n;
		const char *name = de->name.ptr;
		int16_t err = sluice_ctl_delete_topic(s->ctl, name, name ? (size_t)de->name.len : 0, name ? NULL : de->id,
						      out, de->id, de->e.msg, sizeof de->e.msg);
		if (!err && !keyset_add(&ds->ids, de->id, 16)) {
			err = KERR_INVALID_REQUEST;
			snprintf(de->e.msg, sizeof de->e.msg, "The topic is named twice in the request.");
		}
		const struct sluice_image_topic *t = err ? NULL : sluice_image_topic_by_id(s->img, de->id);
		if (t)
			snprintf(de->resolved, sizeof de->resolved, "%s", t->name);
		entry_decided(&de->e, out, before, err);
	}
	return true;
}

static void delete_topics_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct kwr *w = &r->out;
	resp_begin(r);
	kwr_i32(w, 0);
	kwr_array(w, flex, r->w.n);
	for (int32_t i = 0; i < r->w.n; i++) {
		const struct dt_entry *de = (const struct dt_entry *)entry_at(&r->w, i);
		if (de->name.ptr)
			kwr_string(w, flex, de->name.ptr, de->name.len);
		else
			kwr_cstr(w, flex, de->resolved[0] || v < 6 ? de->resolved : NULL);
		if (v >= 6)
			kwr_uuid(w, de->id);
		kwr_i16(w, de->e.err);
		if (v >= 5)
			kwr_cstr(w, flex, de->e.err ? de->e.msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	write_end_tags(s, r);
	resp_end(r);
}

static const struct write_ops delete_topics_ops = {delete_topics_decide, delete_topics_answer};

/* ---- CreatePartitions (37) v0-3 ---------------------------------------------------------------- */

struct cp_entry {
	struct entry e;
	struct kstr name;
	int32_t count;
	struct sluice_assignment_ref asg;
};

struct cp_state {
	bool validate_only;
};

static void cp_decode_topic(struct krd *rd, bool flex, struct cp_entry *ce)
{
	ce->name = krd_string(rd, flex);
	ce->count = krd_i32(rd);
	char asg_msg[SLUICE_CTL_MSG_MAX];
	int16_t asg_err = sluice_assignment_scan(rd, flex, false, &ce->asg, asg_msg, sizeof asg_msg);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return;
	if (!ce->name.ptr)
		entry_fail(&ce->e, KERR_INVALID_REQUEST, "A topic name is null.");
	else if (asg_err)
		entry_fail(&ce->e, asg_err, asg_msg);
}

static int create_partitions_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, flex ? 7 : 10);
	if (rd->err || n > CTL_ENTRIES_MAX)
		return krd_fail(rd, "topic count"), -1;
	struct cp_state *cs = calloc(1, sizeof *cs);
	r->api = cs;
	struct keyset seen = {0};
	if (!cs || !entries_alloc(r, n > 0 ? n : 0, sizeof(struct cp_entry)) || keyset_init(&seen, (size_t)r->w.n) < 0)
		return krd_fail(rd, "out of memory"), -1;
	for (int32_t i = 0; i < r->w.n && !rd->err; i++)
		cp_decode_topic(rd, flex, (struct cp_entry *)entry_at(&r->w, i));
	(void)krd_i32(rd); /* TimeoutMs */
	cs->validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	for (int32_t i = 0; i < r->w.n && !rd->err; i++) {
		struct cp_entry *ce = (struct cp_entry *)entry_at(&r->w, i);
		if (ce->name.ptr && !keyset_add(&seen, ce->name.ptr, (size_t)ce->name.len) && ce->e.phase != PH_DONE)
			entry_fail(&ce->e, KERR_INVALID_REQUEST, "Duplicate topic in request.");
	}
	keyset_free(&seen);
	if (rd->err)
		return -1;
	write_submit(s, r);
	return 0;
}

static bool create_partitions_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	const struct cp_state *cs = r->api;
	for (; r->w.next < r->w.n; r->w.next++) {
		struct cp_entry *ce = (struct cp_entry *)entry_at(&r->w, r->w.next);
		if (ce->e.phase != PH_UNDECIDED)
			continue;
		const struct sluice_image_topic *t = sluice_image_topic_by_name(s->img, ce->name.ptr, (size_t)ce->name.len);
		size_t need = 1 + (t && ce->count > t->partition_n ? (size_t)(ce->count - t->partition_n) : 0);
		if (out->n > 0 && out->n + need > CTL_PART_RECORDS_SOFT)
			return false;
		struct asg_buf asg;
		if (asg_decode(&ce->asg, r->frame + r->frame_len, r->flexible, false, &asg) < 0) {
			entry_fail(&ce->e, KERR_UNKNOWN_SERVER_ERROR, "out of memory");
			continue;
		}
		size_t before = out->n;
		int16_t err = sluice_ctl_create_partitions_assigned(s->ctl, ce->name.ptr, (size_t)ce->name.len, ce->count,
								    asg.a.n > 0 ? &asg.a : NULL, cs->validate_only, out,
								    ce->e.msg, sizeof ce->e.msg);
		asg_free(&asg);
		entry_decided(&ce->e, out, before, err);
	}
	return true;
}

static void create_partitions_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	bool flex = r->flexible;
	struct kwr *w = &r->out;
	resp_begin(r);
	kwr_i32(w, 0);
	kwr_array(w, flex, r->w.n);
	for (int32_t i = 0; i < r->w.n; i++) {
		const struct cp_entry *ce = (const struct cp_entry *)entry_at(&r->w, i);
		kwr_string(w, flex, ce->name.ptr ? ce->name.ptr : "", ce->name.ptr ? ce->name.len : 0);
		kwr_i16(w, ce->e.err);
		kwr_cstr(w, flex, ce->e.err ? ce->e.msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	write_end_tags(s, r);
	resp_end(r);
}

static const struct write_ops create_partitions_ops = {create_partitions_decide, create_partitions_answer};

/* ---- AlterConfigs (33) v0-2 and IncrementalAlterConfigs (44) v0-1 ------------------------------- */

struct ac_entry {
	struct entry e;
	int8_t type;
	struct kstr name;
	int32_t change_n;
	const uint8_t *cfg_at;  /* its Configs in the frame, decoded again when decided */
	size_t strings_bytes;   /* its names and values as C strings */
	uint8_t key[1 + SLUICE_TOPIC_NAME_MAX]; /* type and name: duplicates are refused */
	size_t key_len;
};

struct ac_state {
	bool validate_only, incremental;
};

static void ac_decode_resource(struct krd *rd, bool flex, bool incremental, struct ac_entry *ae)
{
	ae->type = krd_i8(rd);
	ae->name = krd_string(rd, flex);
	ae->cfg_at = rd->p;
	int32_t nc = krd_array(rd, flex, flex ? 3 : 4);
	ae->change_n = nc > 0 ? nc : 0;
	const char *bad = NULL;
	int16_t bad_err = KERR_INVALID_CONFIG;
	for (int32_t c = 0; c < nc && !rd->err; c++) {
		struct kstr key = krd_string(rd, flex);
		int8_t op = incremental ? krd_i8(rd) : SLUICE_CTL_SET;
		struct kstr val = krd_string(rd, flex);
		if (flex)
			krd_tags_skip(rd);
		if (!key.ptr || key.len > SLUICE_MREC_NAME_MAX || (val.ptr && val.len > SLUICE_MREC_CONFIG_VALUE_MAX))
			bad = "A config name is null, or a name or value is too long.";
		else if (op < SLUICE_CTL_SET || op > SLUICE_CTL_SUBTRACT)
			bad = "Unknown config operation.", bad_err = KERR_INVALID_REQUEST;
		else if (!val.ptr && op != SLUICE_CTL_DELETE)
			bad = "A null value is only allowed with DELETE.", bad_err = KERR_INVALID_REQUEST;
		ae->strings_bytes += (size_t)(key.ptr ? key.len : 0) + 1 + (size_t)(val.ptr ? val.len : 0) + 1;
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return;
	if (ae->type != SLUICE_MREC_RESOURCE_TOPIC && ae->type != SLUICE_MREC_RESOURCE_BROKER)
		entry_fail(&ae->e, KERR_INVALID_REQUEST, "Unsupported resource type (TOPIC and BROKER are).");
	else if (!ae->name.ptr || ae->name.len > SLUICE_TOPIC_NAME_MAX)
		entry_fail(&ae->e, KERR_INVALID_REQUEST, "The resource name is null or too long.");
	else if (nc > CTL_CONFIGS_PER_RESOURCE_MAX)
		entry_fail(&ae->e, KERR_INVALID_REQUEST, "Too many configs for one resource.");
	else if (bad)
		entry_fail(&ae->e, bad_err, bad);
	if (ae->name.ptr && ae->name.len <= SLUICE_TOPIC_NAME_MAX) {
		ae->key[0] = (uint8_t)ae->type;
		memcpy(ae->key + 1, ae->name.ptr, (size_t)ae->name.len);
		ae->key_len = 1 + (size_t)ae->name.len;
	}
}

static int alter_configs_start(struct sluice_ctl_server *s, struct ctl_req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, flex ? 4 : 7);
	if (rd->err || n > CTL_ENTRIES_MAX)
		return krd_fail(rd, "resource count"), -1;
	struct ac_state *as = calloc(1, sizeof *as);
	r->api = as;
	struct keyset seen = {0};
	if (!as || !entries_alloc(r, n > 0 ? n : 0, sizeof(struct ac_entry)) || keyset_init(&seen, (size_t)r->w.n) < 0)
		return krd_fail(rd, "out of memory"), -1;
	as->incremental = r->api_key == API_INCREMENTAL_ALTER_CONFIGS;
	for (int32_t i = 0; i < r->w.n && !rd->err; i++)
		ac_decode_resource(rd, flex, as->incremental, (struct ac_entry *)entry_at(&r->w, i));
	as->validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	for (int32_t i = 0; i < r->w.n && !rd->err; i++) {
		struct ac_entry *ae = (struct ac_entry *)entry_at(&r->w, i);
		if (ae->key_len && !keyset_add(&seen, ae->key, ae->key_len) && ae->e.phase != PH_DONE)
			entry_fail(&ae->e, KERR_INVALID_REQUEST, "Duplicate resource in the request.");
	}
	keyset_free(&seen);
	if (rd->err)
		return -1;
	write_submit(s, r);
	return 0;
}

static char *ac_strdup(char **pool, struct kstr s)
{
	if (!s.ptr)
		return NULL;
	char *p = *pool;
	memcpy(p, s.ptr, (size_t)s.len);
	p[s.len] = '\0';
	*pool += s.len + 1;
	return p;
}

static int ac_count_config(void *arg, const char *name, const char *value)
{
	(void)name;
	(void)value;
	(*(size_t *)arg)++;
	return 0;
}

/* One resource decided: its changes decoded again from the frame. */
static int16_t ac_decide_resource(struct sluice_ctl_server *s, struct ctl_req *r, struct ac_entry *ae,
				  struct sluice_ctl_out *out)
{
	const struct ac_state *as = r->api;
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	int rc = kstr_copy(name, sizeof name, ae->name);
	assert(rc == 0); /* checked at decode */
	(void)rc;
	struct sluice_ctl_config_change *ch = malloc((size_t)ae->change_n * sizeof *ch + ae->strings_bytes + 1);
	if (!ch)
		return KERR_UNKNOWN_SERVER_ERROR;
	char *pool = (char *)(ch + ae->change_n);
	struct krd cr;
	krd_init(&cr, ae->cfg_at, (size_t)(r->frame + r->frame_len - ae->cfg_at));
	(void)krd_array(&cr, r->flexible, 0);
	for (int32_t c = 0; c < ae->change_n; c++) {
		ch[c].name = ac_strdup(&pool, krd_string(&cr, r->flexible));
		ch[c].op = as->incremental ? (enum sluice_ctl_config_op)krd_i8(&cr) : SLUICE_CTL_SET;
		ch[c].value = ac_strdup(&pool, krd_string(&cr, r->flexible));
		if (r->flexible)
			krd_tags_skip(&cr);
	}
	assert(!cr.err);
	int16_t err = sluice_ctl_alter_configs(s->ctl, ae->type, name, ch, ae->change_n, !as->incremental,
					       as->validate_only, out, ae->e.msg, sizeof ae->e.msg);
	free(ch);
	return err;
}

static bool alter_configs_decide(struct sluice_ctl_server *s, struct ctl_req *r, struct sluice_ctl_out *out)
{
	const struct ac_state *as = r->api;
	for (; r->w.next < r->w.n; r->w.next++) {
		struct ac_entry *ae = (struct ac_entry *)entry_at(&r->w, r->w.next);
		if (ae->e.phase != PH_UNDECIDED)
			continue;
		size_t need = (size_t)ae->change_n + 1;
		if (!as->incremental) { /* replacing: every override not named is deleted */
			char name[SLUICE_TOPIC_NAME_MAX + 1];
			if (kstr_copy(name, sizeof name, ae->name) == 0)
				(void)sluice_image_configs(s->img, ae->type, name, ac_count_config, &need);
		}
		if (out->n > 0 && out->n + need > CTL_PART_RECORDS_SOFT)
			return false;
		size_t before = out->n;
		entry_decided(&ae->e, out, before, ac_decide_resource(s, r, ae, out));
	}
	return true;
}

static void alter_configs_answer(struct sluice_ctl_server *s, struct ctl_req *r)
{
	bool flex = r->flexible;
	struct kwr *w = &r->out;
	resp_begin(r);
	kwr_i32(w, 0);
	kwr_array(w, flex, r->w.n);
	for (int32_t i = 0; i < r->w.n; i++) {
		const struct ac_entry *ae = (const struct ac_entry *)entry_at(&r->w, i);
		kwr_i16(w, ae->e.err);
		kwr_cstr(w, flex, ae->e.err ? ae->e.msg : NULL);
		kwr_i8(w, ae->type);
		kwr_string(w, flex, ae->name.ptr ? ae->name.ptr : "", ae->name.ptr ? ae->name.len : 0);
		if (flex)
			kwr_tags_empty(w);
	}
	write_end_tags(s, r);
	resp_end(r);
}

static const struct write_ops alter_configs_ops = {alter_configs_decide, alter_configs_answer};

/* ---- dispatch ------------------------------------------------------------------------------ */

static const struct api apis[API_KEY_MAX] = {
	[API_FETCH] = {12, 12, 12, fetch_start, NULL, "Fetch"},
	[API_API_VERSIONS] = {0, 3, 3, api_versions_start, NULL, "ApiVersions"},
	[API_CREATE_TOPICS] = {2, 7, 5, create_topics_start, &create_topics_ops, "CreateTopics"},
	[API_DELETE_TOPICS] = {1, 6, 4, delete_topics_start, &delete_topics_ops, "DeleteTopics"},
	[API_DESCRIBE_CONFIGS] = {1, 4, 4, describe_configs_start, NULL, "DescribeConfigs"},
	[API_ALTER_CONFIGS] = {0, 2, 2, alter_configs_start, &alter_configs_ops, "AlterConfigs"},
	[API_CREATE_PARTITIONS] = {0, 3, 2, create_partitions_start, &create_partitions_ops, "CreatePartitions"},
	[API_INCREMENTAL_ALTER_CONFIGS] = {0, 1, 1, alter_configs_start, &alter_configs_ops, "IncrementalAlterConfigs"},
	[API_ALTER_PARTITION_REASSIGNMENTS] = {0, 1, 0, alter_reassignments_start, &alter_reassignments_ops,
					       "AlterPartitionReassignments"},
	[API_LIST_PARTITION_REASSIGNMENTS] = {0, 0, 0, list_reassignments_start, NULL, "ListPartitionReassignments"},
	[API_DESCRIBE_QUORUM] = {0, 2, 0, describe_quorum_start, NULL, "DescribeQuorum"},
	[API_ALTER_PARTITION] = {2, 3, 0, alter_partition_start, &alter_partition_ops, "AlterPartition"},
	[API_FETCH_SNAPSHOT] = {0, 1, 0, fetch_snapshot_start, NULL, "FetchSnapshot"},
	[API_DESCRIBE_CLUSTER] = {0, 2, 0, describe_cluster_start, NULL, "DescribeCluster"},
	[API_BROKER_REGISTRATION] = {0, 4, 0, registration_start, &registration_ops, "BrokerRegistration"},
	[API_BROKER_HEARTBEAT] = {0, 1, 0, heartbeat_start, &heartbeat_ops, "BrokerHeartbeat"},
	[API_ALLOCATE_PRODUCER_IDS] = {0, 0, 0, allocate_producer_ids_start, &allocate_producer_ids_ops,
				       "AllocateProducerIds"},
};

static const struct api *api_of(int16_t key)
{
	return key >= 0 && key < API_KEY_MAX && apis[key].start ? &apis[key] : NULL;
}

const char *sluice_ctl_server_api_name(int16_t key)
{
	const struct api *a = api_of(key);
	return a ? a->name : NULL;
}

/* The connection's head request: its header checked against the table,
 * then its API's start. A header or body that does not decode, an unknown
 * api key or an unsupported version closes the connection, as Kafka does
 * (ApiVersions excepted: it answers UNSUPPORTED_VERSION). */
static void req_start(struct ctl_req *r)
{
	struct ctl_conn *c = r->conn;
	struct krd rd;
	krd_init(&rd, r->frame, r->frame_len);
	r->api_key = krd_i16(&rd);
	r->api_version = krd_i16(&rd);
	r->corr = krd_i32(&rd);
	r->state = RQ_ACTIVE;
	const struct api *a = api_of(r->api_key);
	char why[160];
	if (!a) {
		snprintf(why, sizeof why, "unknown api key %d", r->api_key);
		conn_close(c, why);
		return;
	}
	if (r->api_key == API_API_VERSIONS && (r->api_version < 0 || r->api_version > a->max)) {
		api_versions_unsupported(r);
		return;
	}
	if (r->api_version < a->min || r->api_version > a->max) {
		snprintf(why, sizeof why, "%s v%d is not supported (v%d-%d are)", a->name, r->api_version, a->min, a->max);
		conn_close(c, why);
		return;
	}
	r->flexible = r->api_version >= a->flex_min;
	sluice_ctl_metrics_request(r->s->metrics, r->api_key);
	(void)krd_string(&rd, false); /* ClientId: never compact, even in header v2 */
	if (r->flexible)
		krd_tags_skip(&rd);
	r->body_off = krd_offset(&rd);
	if (!rd.err && a->start(r->s, r, &rd) == 0)
		return;
	snprintf(why, sizeof why, "malformed %s v%d request at byte %zu (%s)", a->name, r->api_version, krd_offset(&rd),
		 rd.err_what ? rd.err_what : "invalid");
	conn_close(c, why);
}

/* ---- start and stop ------------------------------------------------------------------------- */

/* mkdir -p: metadata.log.dir may not exist yet on a first start. */
static int make_dirs(const char *path, char *err, size_t errlen)
{
	char p[SLUICE_CTL_CONFIG_PATH_MAX];
	snprintf(p, sizeof p, "%s", path);
	for (char *q = p + 1;; q++) {
		if (*q != '/' && *q != '\0')
			continue;
		char ch = *q;
		*q = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST) {
			snprintf(err, errlen, "metadata.log.dir: cannot create %s: %s", p, strerror(errno));
			return -1;
		}
		*q = ch;
		if (ch == '\0')
			return 0;
	}
}

static int listen_on(struct sluice_ctl_server *s, char *err, size_t errlen)
{
	const struct sluice_controller_config *cfg = &s->cfg;
	char port[8];
	snprintf(port, sizeof port, "%u", cfg->listen_port);
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
	uv_getaddrinfo_t gai;
	int rc = uv_getaddrinfo(s->loop, &gai, NULL, cfg->listen_host[0] ? cfg->listen_host : NULL, port, &hints);
	if (rc < 0) {
		snprintf(err, errlen, "listeners: cannot resolve '%s': %s", cfg->listen_host, uv_strerror(rc));
		return -1;
	}
	uv_tcp_init(s->loop, &s->listener);
	s->listener.data = s;
	rc = uv_tcp_bind(&s->listener, gai.addrinfo->ai_addr, 0);
	uv_freeaddrinfo(gai.addrinfo);
	if (rc == 0)
		rc = uv_listen((uv_stream_t *)&s->listener, SOMAXCONN, on_connection);
	if (rc < 0) {
		snprintf(err, errlen, "listeners: cannot listen on %s:%u: %s", cfg->listen_host, cfg->listen_port,
			 uv_strerror(rc));
		return -1;
	}
	return 0;
}

static void handle_closed(struct sluice_ctl_server *s)
{
	assert(s->stopping && s->closing_handles > 0);
	if (--s->closing_handles == 0 && s->stop_done)
		s->stop_done(s->stop_arg);
}

static void on_handle_closed(uv_handle_t *h)
{
	handle_closed(h->data);
}

static void on_quorum_stopped(void *arg)
{
	struct sluice_ctl_server *s = arg;
	s->quorum_stopped = true;
	s->q = NULL;
	SLOG_INFO("controller", "quorum stopped at metadata offset %" PRId64, sluice_image_offset(s->img));
	handle_closed(s);
}

static int server_init(struct sluice_ctl_server *s, char *err, size_t errlen)
{
	s->cfg.quorum.dir = s->cfg.metadata_log_dir; /* into this copy */
	s->leader_id = -1;
	s->fetch_timer_due = -1;
	s->snap.end_offset = -1;
	kwr_init(&s->snap.bytes, 0, CTL_SNAPSHOT_BYTES_MAX);
	/* one record past the budget: a read returns at least one */
	kwr_init(&s->scratch, 0, CTL_FETCH_BYTES_MAX + 2 * SLUICE_MREC_ENCODED_MAX);
	s->observers = calloc(SLUICE_IMAGE_BROKERS_MAX, sizeof *s->observers);
	s->img = sluice_image_new();
	s->mlog = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX);
	s->ctl = s->img ? sluice_ctl_new(&s->cfg.logic, s->img) : NULL;
	sluice_ctl_out_init(&s->out, SLUICE_QUORUM_COMMAND_RECORDS_MAX);
	if (!s->observers || !s->img || !s->mlog || !s->ctl) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	return make_dirs(s->cfg.metadata_log_dir, err, errlen);
}

/* Close what start opened, running the loop until it is closed. */
static void server_abort(struct sluice_ctl_server *s, int handles)
{
	s->stopping = true;
	s->closing_handles = handles;
	uv_handle_t *hs[] = {(uv_handle_t *)&s->listener, (uv_handle_t *)&s->tick_timer, (uv_handle_t *)&s->fetch_timer,
			     (uv_handle_t *)&s->sweep_timer};
	for (int i = 0; i < handles; i++)
		uv_close(hs[i], on_handle_closed);
	uv_run(s->loop, UV_RUN_DEFAULT);
	sluice_ctl_server_free(s);
}

int sluice_ctl_server_start(struct sluice_ctl_server **out, uv_loop_t *loop, const struct sluice_controller_config *cfg,
			    struct sluice_ctl_metrics *metrics, char *err, size_t errlen)
{
	struct sluice_ctl_server *s = calloc(1, sizeof *s);
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	s->loop = loop;
	s->cfg = *cfg;
	s->metrics = metrics;
	if (server_init(s, err, errlen) < 0) {
		server_abort(s, 0);
		return -1;
	}
	if (listen_on(s, err, errlen) < 0) {
		server_abort(s, 1);
		return -1;
	}
	uv_timer_t *timers[] = {&s->tick_timer, &s->fetch_timer, &s->sweep_timer};
	for (int i = 0; i < 3; i++) {
		uv_timer_init(loop, timers[i]);
		timers[i]->data = s;
	}
	uv_timer_start(&s->tick_timer, on_tick, CTL_TICK_INTERVAL_MS, CTL_TICK_INTERVAL_MS);
	uv_timer_start(&s->sweep_timer, on_sweep, CTL_SWEEP_INTERVAL_MS, CTL_SWEEP_INTERVAL_MS);
	static const struct sluice_quorum_callbacks cbs = {on_applied, on_leader_changed, on_restored};
	char qerr[256];
	struct sluice_quorum *q = NULL;
	if (sluice_quorum_start(&q, loop, &s->cfg.quorum, s->img, s->mlog, &cbs, s, qerr, sizeof qerr) < 0) {
		snprintf(err, errlen, "quorum: %s", qerr);
		server_abort(s, 4);
		return -1;
	}
	s->q = q;
	metrics_publish(s);
	SLOG_INFO("controller", "node %d serving %s://%s:%u (cluster %s, voters %s, Raft port offset %d, metadata in %s, "
		  "image at offset %" PRId64 ")",
		  s->cfg.node_id, s->cfg.listener_name, s->cfg.listen_host, s->cfg.listen_port, s->cfg.cluster_id,
		  s->cfg.voters, s->cfg.raft_port_offset, s->cfg.metadata_log_dir, sluice_image_offset(s->img));
	pump(s); /* a lone voter may have been elected inside sluice_quorum_start */
	*out = s;
	return 0;
}

void sluice_ctl_server_stop(struct sluice_ctl_server *s, void (*done)(void *arg), void *arg)
{
	assert(!s->stopping && s->q);
	SLOG_INFO("controller", "stopping: closing the listener and %u connections, then the quorum", s->conn_n);
	s->stopping = true;
	s->stop_done = done;
	s->stop_arg = arg;
	/* the listener, three timers, the quorum, and every connection already
	 * closing (its close callback is still to come); conn_close below counts
	 * each connection it closes itself, so none is counted twice (which kept
	 * the process up after SIGTERM while brokers were connected) */
	s->closing_handles = 4 + 1;
	for (struct ctl_conn *c = s->conns; c; c = c->next)
		s->closing_handles += c->closing;
	uv_close((uv_handle_t *)&s->listener, on_handle_closed);
	uv_close((uv_handle_t *)&s->tick_timer, on_handle_closed);
	uv_close((uv_handle_t *)&s->fetch_timer, on_handle_closed);
	uv_close((uv_handle_t *)&s->sweep_timer, on_handle_closed);
	for (struct ctl_conn *c = s->conns; c; c = c->next)
		conn_close(c, NULL);
	sluice_quorum_stop(s->q, on_quorum_stopped, s);
}

void sluice_ctl_server_free(struct sluice_ctl_server *s)
{
	if (!s)
		return;
	assert(!s->conns && !s->fifo_head && !s->parked);
	sluice_ctl_out_free(&s->out);
	if (s->ctl)
		sluice_ctl_free(s->ctl);
	if (s->mlog)
		sluice_mlog_free(s->mlog);
	if (s->img)
		sluice_image_free(s->img);
	kwr_free(&s->snap.bytes);
	kwr_free(&s->scratch);
	free(s->observers);
	free(s);
}
