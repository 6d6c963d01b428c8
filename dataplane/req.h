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
#include "dataplane/transport.h"

struct conn;

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
	uint8_t *frame;     /* the request bytes (header + body), owned */
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
	struct partop *ops; /* partition operations, owned */
	int32_t nops;
	int32_t pending;    /* ops lent to storage cores */
	int64_t deadline_ms;
	/* Budgets (netcore.c): the most bytes this request's response (and
	 * the data read for it) may take, set by the handler when it can be
	 * large (Fetch); the frame bytes counted in the broker's queue until
	 * served; the bytes counted in its connection's held_bytes. */
	int64_t resp_bytes_max;
	int64_t queued_bytes;
	int64_t held_bytes;
	void *api;          /* handler-specific decoded request, owned */
	struct req *next;   /* connection queue */
	struct req *park_next;
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
 * Returns false when the connection must be closed. */
bool sluice_proto_on_frame(struct conn *c, uint8_t *frame, uint32_t len);
/* A storage core handed an op back. */
void sluice_proto_on_partop(struct netcore *nc, struct partop *op);
/* Parked fetches: retry (data may have arrived) or expire. */
void sluice_proto_retry_parked(struct netcore *nc, int64_t now_ms, bool all);
int64_t sluice_proto_next_deadline(struct netcore *nc);
void sluice_req_free(struct req *r);
int64_t sluice_now_ms(void);

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

/* Per network core protocol state. */
struct proto_state {
	struct sluice_read_pins *release_head, *release_tail; /* pins whose release found a full ring */
	struct req *parked_head;
	int32_t parked_n;
	struct partop *backlog_head, *backlog_tail; /* ops that found a full ring */
	struct sluice_inflater inflater; /* decompresses produced batches to validate them */
};
/* Release what the protocol layer keeps in a core's state (the network
 * core calls it before freeing the state). */
void sluice_proto_state_fini(struct proto_state *ps);

#endif
