/* Requests and connections as the protocol layer sees them. A connection
 * keeps its requests in arrival order; each request is decoded, dispatched
 * (possibly to storage cores), and its response encoded when complete.
 * Responses leave in request order, as Kafka requires. The network core
 * (netcore.c) owns the connection; its backend (transport.h) owns the
 * socket; the protocol layer touches neither directly. */
#ifndef SLUICE_REQ_H
#define SLUICE_REQ_H
#include "common/kafka/compress.h"
#include "dataplane/core.h"
#include "dataplane/metrics.h"
#include "dataplane/objpool.h"
#include "dataplane/transport.h"

struct conn;

/* Handler state that lives inside the request (Fetch's), so the hot APIs
 * allocate none; a handler with more takes it from the heap (r->api). */
#define SLUICE_REQ_API_INLINE_BYTES 64

/* A request comes from its network core's pool (proto_state.reqs), its
 * frame from one of the core's frame pools (or the heap above the large
 * class), its ops from the core's op-array pool (or the heap above
 * sluice.network.pool.op.array.partitions), all given back by
 * sluice_req_free. */
struct req {
	struct conn *conn;
	struct netcore *nc;
	int16_t api_key, api_version;
	int32_t correlation_id;
	struct kstr client_id;  /* points into frame */
	bool flexible;      /* request body uses the flexible encoding */
	bool done;          /* response (if any) is ready in out */
	bool no_response;   /* acks=0 produce */
	bool parked;        /* long-polling fetch */
	uint8_t *frame;     /* the request bytes (header + body), owned: sluice_proto_frame_get */
	uint32_t frame_len;
	size_t body_off;    /* where the body starts in frame */
	struct kwr out;     /* size prefix + response header + body */
	/* Splices into out (a Fetch's records by reference): the table is the
	 * handler's (below), the pins the network core's to release;
	 * splice_done counts those released, splice_bytes their total (the
	 * response is out.len + splice_bytes long). */
	struct sluice_resp_splice *splice;
	int32_t nsplice, splice_done;
	int64_t splice_bytes;
	struct sluice_meta_snapshot *snap;
	bool snap_core;     /* snap is one the network core holds for its requests (proto.c): counted, not referenced */
	struct partop *ops; /* partition operations, owned */
	int32_t nops;
	int32_t pending;    /* ops lent to storage cores */
	int64_t deadline_ms;
	int64_t received_us; /* monotonic: its frame was read (sluice_request_duration_seconds) */
	/* Budgets (netcore.c): the most bytes this request's response (and
	 * the data read for it) may take, set by the handler when it can be
	 * large (Fetch); the frame bytes counted in the broker's queue until
	 * served; the bytes counted in its connection's held_bytes. */
	int64_t resp_bytes_max;
	int64_t queued_bytes;
	int64_t held_bytes;
	void *api;          /* handler-specific decoded request, owned: api_inline or the heap */
	void *meta;         /* its metadata batch (proto.c), owned; out while pending counts it */
	struct req *next;   /* connection queue */
	struct req *park_next;
	_Alignas(16) uint8_t api_inline[SLUICE_REQ_API_INLINE_BYTES];
};

struct conn {
	struct netcore *nc;
	void *tconn;        /* the backend's state; NULL once it reported closed */
	const struct sluice_conn_stage *stage; /* between the backend and framing */
	void *stage_state;  /* the stage's (TLS session, SASL state); NULL for plaintext */
	int refs;           /* own, the backend's, one per request, throttled list */
	bool closing;
	bool send_armed;    /* a send is in flight on the backend */
	bool recv_paused;   /* the backend was told to stop reading */
	bool parsing;       /* inside conn_parse: not re-entered */
	bool refused;       /* a frame was refused (size, stage gate, protocol layer): why it closed */
	/* An incomplete frame (bytes that came before the rest of their frame,
	 * or frames a budget held back), allocated when first needed. */
	uint8_t *in;
	size_t in_len, in_cap;
	struct req *head, *tail; /* requests in arrival order */
	int32_t inflight;
	size_t sent;
	struct conn *all_prev, *all_next; /* the network core's list of connections */
	int64_t held_bytes;       /* frames and responses of requests in flight */
	int64_t pinned_bytes;     /* of them, cache extents pinned by responses (splices) */
	int64_t last_active_ms;   /* last bytes received or sent */
	int64_t frame_start_ms;   /* first bytes of an incomplete frame came, or 0 */
	bool paused;              /* not read: a budget holds the next frame back */
	bool throttled;           /* on the core's list waiting for queue room */
	struct conn *throttle_next;
	char peer[64];
	char host[64];      /* "/address", as Kafka shows a client's host */
	/* The last response buffer sent, kept for the next response: a fetch
	 * answer is megabytes, and a fresh allocation of that size faults in
	 * every page again (measured: 335,000 page faults reading 1.5 GB). */
	uint8_t *spare;
	size_t spare_cap;
	size_t spare_counted; /* of it, in the network core's broker-wide total */
};

/* Bytes sent inside a response without being copied into it: the ranges
 * of a read's pins go out after out.buf[0..at) (and after the splices
 * before it). Splices are in order of at; the network core releases each
 * one's pins once the sends cover it, or when the response is dropped, and
 * from then on never reads them (their storage core reuses them). A
 * handler keeps the table in its response buffer past out.len (api_records.c),
 * so it costs no allocation and lives as long as the response. */
struct sluice_resp_splice {
	uint32_t at;
	uint32_t bytes; /* the pins' bytes, kept here: released pins are not read again */
	struct sluice_read_pins *pins;
};

/* Protocol layer entry points, called by the transport. */
/* Decode a frame (without the 4-byte size) into a request and start it.
 * The frame comes from sluice_proto_frame_get and is the request's (or
 * given back) from here on. Returns false when the connection must be
 * closed. */
bool sluice_proto_on_frame(struct conn *c, uint8_t *frame, uint32_t len);
/* Whether the core's pools can take one more request with a frame of
 * frame_bytes (0: size not known yet; only the request and op pools are
 * asked). False: the caller stops reading until objects come back (they
 * come back on this core only: when one of its requests is freed). */
bool sluice_proto_has_room(const struct netcore *nc, uint32_t frame_bytes);
/* A buffer for a frame of len bytes: pooled up to the large class, from
 * the heap above it; NULL when its pool is exhausted (sluice_proto_has_room
 * said no) or out of memory. Given back with sluice_proto_frame_put (or by
 * sluice_req_free once a request owns it). */
uint8_t *sluice_proto_frame_get(struct netcore *nc, uint32_t len);
void sluice_proto_frame_put(struct netcore *nc, uint8_t *frame);
/* A storage core handed an op back. */
void sluice_proto_on_partop(struct netcore *nc, struct partop *op);
/* Parked fetches: retry (data may have arrived) or expire. */
void sluice_proto_retry_parked(struct netcore *nc, int64_t now_ms, bool all);
int64_t sluice_proto_next_deadline(struct netcore *nc);
void sluice_req_free(struct req *r);
int64_t sluice_now_ms(void);
/* The same clock read coarsely (CLOCK_MONOTONIC_COARSE: a memory read, at
 * most a scheduler tick behind sluice_now_ms): for the per-request stamps
 * that only timeouts of seconds compare (a connection's last activity, a
 * frame's first byte). */
int64_t sluice_coarse_ms(void);

/* Transport services the protocol layer uses. */
/* r's response is ready in r->out (or r->no_response): send it in turn. */
void sluice_conn_response_ready(struct req *r);
void sluice_conn_close(struct conn *c);
/* Whether c may send `bytes` more straight from pinned cache extents (the
 * connection's and the broker's budgets, netcore.c); true reserves them,
 * given back as the network core releases the splice holding them. */
bool sluice_conn_pin(struct conn *c, int64_t bytes);
/* Give back a reservation no splice came of. */
void sluice_conn_unpin(struct conn *c, int64_t bytes);
/* Bytes pinned by every connection's responses (for the tests). */
int64_t sluice_netcore_pinned_bytes(void);
/* r (a Fetch) starts or stops waiting for data: while parked it holds only
 * its frame, not the reads it may make when retried. */
void sluice_conn_request_parked(struct req *r, bool parked);

/* Whether work other threads posted to nc (sluice_rt_post: the metadata
 * writer completing a request's batch) waits to run; nc's thread only. */
static inline bool sluice_netcore_posts_waiting(const struct netcore *nc)
{
	return __atomic_load_n(&nc->rt.posts, __ATOMIC_ACQUIRE) != NULL || nc->rt.taken != NULL;
}

/* Per network core protocol state. */
#define SLUICE_PROTO_RESP_CACHE_N 256              /* small response buffers a core keeps */
#define SLUICE_PROTO_SNAPS_RETIRED_MAX 8            /* older snapshots a core keeps for requests still using them */
#define SLUICE_PROTO_RESP_CACHE_BYTES_MAX (16u << 10) /* the largest it keeps: at most 4 MiB a core */
_Static_assert(SLUICE_PROTO_RESP_CACHE_N >= SLUICE_CONN_INFLIGHT_MAX,
	       "one connection's pipelined responses find buffers");
struct proto_state {
	struct sluice_read_pins *release_head, *release_tail; /* pins whose release found a full ring */
	struct req *parked_head;
	int32_t parked_n;
	struct partop *refused; /* ops the runtime's backlog refused, answered by the next drain (net_rings.c) */
	int32_t meta_out; /* requests whose metadata batch is out (proto.c) */
	uint64_t clock_pass; /* the loop pass clock_us was read in (proto.c, pass_us) */
	/* The metadata snapshot the core's requests share (proto.c,
	 * sluice_proto_snap): one reference held by the core, its users
	 * counted here, none of it shared with another core; older ones still
	 * in use by requests wait in retired until their last user is done. */
	struct sluice_snap_hold {
		struct sluice_meta_snapshot *snap;
		int32_t users;
	} snap_cur, snap_retired[SLUICE_PROTO_SNAPS_RETIRED_MAX];
	int32_t snap_retired_n;
	int64_t clock_us;
	struct sluice_inflater inflater; /* decompresses produced batches to validate them */
	/* The core's pools (sizes: sluice.network.pool.*), used by this core only. */
	struct sluice_objpool reqs;         /* struct req */
	int32_t heap_reqs, heap_reqs_max;   /* requests from the heap (pools empty), and their limit */
	struct sluice_objpool op_arrays;    /* struct partop[op_array_n] */
	int32_t op_array_n;
	struct sluice_objpool frames;       /* frames up to sluice.network.pool.frame.bytes */
	struct sluice_objpool frames_large; /* up to sluice.network.pool.large.frame.bytes */
	/* Small response buffers (heap, so a response may still grow) kept for
	 * a connection whose own spare is in use: pipelined Produce answers. */
	uint8_t *resp_cache[SLUICE_PROTO_RESP_CACHE_N];
	size_t resp_cache_cap[SLUICE_PROTO_RESP_CACHE_N];
	int32_t resp_cache_n;
	/* This core's counters (metrics.h): written by this core only, read by
	 * the admin listener's scrape. */
	struct sluice_net_metrics metrics;
};
/* Reserve the core's pools from the configuration: 0, or -1 (logged). */
int sluice_proto_state_init(struct proto_state *ps, const struct sluice_config *cfg);
/* Release what the protocol layer keeps in a core's state (the network
 * core calls it before freeing the state, once every request is freed). */
void sluice_proto_state_fini(struct proto_state *ps);
/* Release the snapshot the core kept for its requests (sluice_proto_snap),
 * unless a request still uses it; before the pools go, at shutdown. */
void sluice_proto_snap_drop_cached(struct netcore *nc);

#endif
