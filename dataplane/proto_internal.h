/* What the protocol layer's files share, and nobody else: dispatch and
 * framing (proto.c) and the API families (api_records.c: Produce, Fetch,
 * ListOffsets, DeleteRecords; api_admin.c: Metadata and the admin APIs;
 * api_logdirs.c: DescribeLogDirs; api_group.c: the group APIs, forwarded
 * to the coordinator). The transport
 * sees only req.h. Here are the API keys, the handler prototypes the api
 * table in proto.c points at, the response helpers, and the per-partition
 * request iterator that every API naming topics and partitions (Produce,
 * Fetch, ListOffsets, DeleteRecords, and DeleteTopics' answer) walks with:
 * one walk for the request's topics array, one for the response's. Not
 * included outside dataplane/. */
#ifndef SLUICE_PROTO_INTERNAL_H
#define SLUICE_PROTO_INTERNAL_H
#include "dataplane/req.h"

/* Kafka's ApiKey of every API this broker serves. */
enum sluice_api_key {
	API_PRODUCE = 0,
	API_FETCH = 1,
	API_LIST_OFFSETS = 2,
	API_METADATA = 3,
	API_OFFSET_COMMIT = 8,
	API_OFFSET_FETCH = 9,
	API_FIND_COORDINATOR = 10,
	API_JOIN_GROUP = 11,
	API_HEARTBEAT = 12,
	API_LEAVE_GROUP = 13,
	API_SYNC_GROUP = 14,
	API_DESCRIBE_GROUPS = 15,
	API_LIST_GROUPS = 16,
	API_API_VERSIONS = 18,
	API_CREATE_TOPICS = 19,
	API_DELETE_TOPICS = 20,
	API_DELETE_RECORDS = 21,
	API_INIT_PRODUCER_ID = 22,
	API_OFFSET_FOR_LEADER_EPOCH = 23,
	API_DESCRIBE_CONFIGS = 32,
	API_ALTER_CONFIGS = 33,
	API_DESCRIBE_LOG_DIRS = 35,
	API_CREATE_PARTITIONS = 37,
	API_DELETE_GROUPS = 42,
	API_INCREMENTAL_ALTER_CONFIGS = 44,
	API_ALTER_PARTITION_REASSIGNMENTS = 45,
	API_LIST_PARTITION_REASSIGNMENTS = 46,
	API_OFFSET_DELETE = 47,
	API_DESCRIBE_QUORUM = 55,
	API_DESCRIBE_CLUSTER = 60,
	API_DESCRIBE_TOPIC_PARTITIONS = 75,
	API_KEY_MAX = 76, /* size of the api table: one past the highest key served */
};

/* Kafka's name of an API this broker serves ("Produce"), from the api
 * table; NULL for a key it does not have. */
const char *sluice_proto_api_name(int16_t key);
/* An error code r answers with (a top-level or partition error; KERR_NONE
 * is not counted), for sluice_request_errors_total. Partition ops' errors
 * are counted by the protocol layer itself (proto.c, resp_end); a handler
 * calls this for the codes it writes otherwise. */
void sluice_proto_error_count(struct req *r, int16_t code);

/* ---- handlers (the api table's entries) ------------------------------------------
 * start decodes the body with the bounds-checked reader and either answers
 * at once (resp_begin ... resp_end), lends ops to storage cores
 * (sluice_proto_dispatch) or submits a metadata batch
 * (sluice_proto_meta_submit); false (or a latched reader error) closes the
 * connection. finish encodes the answer once every op is back. */

/* api_records.c */
bool sluice_api_produce_start(struct req *r, struct krd *rd);
void sluice_api_produce_finish(struct req *r);
bool sluice_api_fetch_start(struct req *r, struct krd *rd);
void sluice_api_fetch_finish(struct req *r);
bool sluice_api_list_offsets_start(struct req *r, struct krd *rd);
void sluice_api_list_offsets_finish(struct req *r);
bool sluice_api_delete_records_start(struct req *r, struct krd *rd);
void sluice_api_delete_records_finish(struct req *r);
bool sluice_api_offset_for_leader_epoch_start(struct req *r, struct krd *rd);
void sluice_api_offset_for_leader_epoch_finish(struct req *r);

/* api_admin.c */
bool sluice_api_metadata_start(struct req *r, struct krd *rd);
bool sluice_api_create_topics_start(struct req *r, struct krd *rd);
bool sluice_api_delete_topics_start(struct req *r, struct krd *rd);
void sluice_api_delete_topics_finish(struct req *r);
bool sluice_api_describe_configs_start(struct req *r, struct krd *rd);
bool sluice_api_alter_configs_start(struct req *r, struct krd *rd);
bool sluice_api_create_partitions_start(struct req *r, struct krd *rd);
bool sluice_api_describe_cluster_start(struct req *r, struct krd *rd);
bool sluice_api_describe_topic_partitions_start(struct req *r, struct krd *rd);
bool sluice_api_find_coordinator_start(struct req *r, struct krd *rd);
bool sluice_api_describe_quorum_start(struct req *r, struct krd *rd);
bool sluice_api_reassignments_start(struct req *r, struct krd *rd);
bool sluice_api_init_producer_id_start(struct req *r, struct krd *rd);

/* api_logdirs.c */
bool sluice_api_describe_log_dirs_start(struct req *r, struct krd *rd);
void sluice_api_describe_log_dirs_finish(struct req *r);

/* api_group.c */
bool sluice_api_group_single_start(struct req *r, struct krd *rd);
void sluice_api_group_single_finish(struct req *r);
bool sluice_api_group_multi_start(struct req *r, struct krd *rd);
void sluice_api_group_multi_finish(struct req *r);
bool sluice_api_list_groups_start(struct req *r, struct krd *rd);
void sluice_api_list_groups_finish(struct req *r);
/* As in Kafka, __consumer_offsets appears when groups are first used
 * (FindCoordinator, or any group request: proto.c asks before starting
 * them). Returns true when the topic is being created: then runs on the
 * network core once it is (or could not be); false when it exists, or
 * cannot be created now (the request starts at once and its group ops find
 * the coordinator unavailable, which clients retry). */
bool sluice_api_offsets_topic_ensure(struct req *r, void (*then)(struct req *r));

/* ---- proto.c: responses, snapshot, ops ------------------------------------------- */

/* Start r's response in r->out: size placeholder, correlation id, header
 * tags when flexible. Then the handler writes the body, and resp_end
 * patches the size and hands the response to the transport (or closes the
 * connection when it could not be encoded). */
void sluice_proto_resp_begin(struct req *r);
void sluice_proto_resp_end(struct req *r);

/* The request's metadata snapshot, acquired on first use and held until
 * the request is freed; refresh takes a newer one (after a change). */
struct sluice_meta_snapshot *sluice_proto_snap(struct req *r);
void sluice_proto_snap_refresh(struct req *r);
/* The request is done with its snapshot (its own reference, or one of the core's users). */
void sluice_proto_snap_put(struct req *r);
/* The broker configuration in effect for r: its snapshot's dynamic one
 * (cluster mode, control/broker_config.h), else server.properties. Topic
 * overrides still come first where a topic has them. */
const struct sluice_config *sluice_proto_config(struct req *r);
const struct sluice_topic *sluice_proto_topic_by_id(const struct sluice_meta_snapshot *s, const uint8_t id[16]);

/* Metadata changes (control/meta.h's asynchronous interface). A handler
 * gets a batch of change_n zeroed changes, with extra_bytes of zeroed room
 * after them (*extra) for what the changes point at, all owned by r and
 * freed with it (NULL when out of memory; a batch r had before is freed).
 * It fills the changes and submits: the request is then held (pending,
 * like ops lent to a storage core, so that a connection closed meanwhile
 * does not free it under the metadata writer) until the batch is durable
 * and published; done then runs on r's network core, with r's snapshot
 * renewed to one that shows the batch, and answers. Any result but
 * SLUICE_META_SUBMITTED means nothing happened and done will not run: the
 * handler answers at once (BUSY with a retriable error). */
struct sluice_meta_batch *sluice_proto_meta_batch(struct req *r, uint32_t change_n, size_t extra_bytes, void **extra);
enum sluice_meta_submit_result sluice_proto_meta_submit(struct req *r, void (*done)(struct req *r));
/* r's batch (not out), with its results once done runs; *extra as given. */
struct sluice_meta_batch *sluice_proto_meta_current(struct req *r, void **extra);

/* Relay r's body to the active controller through the backend's forward
 * (control/meta.h), as r's ApiKey and version. The request is held like a
 * submitted batch; done then runs on r's network core with the
 * controller's response body (after its header), or with error set and
 * resp NULL (no controller answered). resp stays valid until r is freed.
 * False when the backend has no forward or refused it: nothing is out and
 * done will not run. */
bool sluice_proto_meta_forward(struct req *r, void (*done)(struct req *r, int16_t error, const uint8_t *resp,
							  size_t len));
/* The same with a body of the handler's own (copied before this returns),
 * sent as api_key/api_version: a request rewritten for the controller. */
bool sluice_proto_meta_forward_as(struct req *r, int16_t api_key, int16_t api_version, const uint8_t *body,
				  size_t len, void (*done)(struct req *r, int16_t error, const uint8_t *resp, size_t len));
/* Whether this broker takes its metadata from controllers (cluster mode). */
bool sluice_proto_cluster_mode(const struct req *r);

/* Whether this broker may serve partition p of t to a client now: the
 * snapshot's leader is this node, and a CurrentLeaderEpoch the request
 * named (-1: none) is the snapshot's. Returns KERR_NONE or the error to
 * answer: FENCED_LEADER_EPOCH (the client's epoch is older),
 * UNKNOWN_LEADER_EPOCH (newer: this broker lags), NOT_LEADER_OR_FOLLOWER.
 * A backend that has not said who leads (no state) leaves it served. */
int16_t sluice_proto_leader_check(const struct req *r, const struct sluice_topic *t, int32_t p,
				  int32_t current_leader_epoch);

/* n zeroed ops owned by r, each pointing back at r (NULL when n <= 0 or out
 * of memory; r->nops says how many there are). Up to
 * sluice.network.pool.op.array.partitions they are one of the core's pooled
 * arrays (sluice_proto_has_room keeps one free for each request read); a
 * request naming more partitions allocates them (not the hot path). */
struct partop *sluice_proto_ops_alloc(struct req *r, int32_t n);
/* bytes of zeroed handler state for r, set as r->api: inside the request
 * when it fits SLUICE_REQ_API_INLINE_BYTES (no allocation: Fetch), else from
 * the heap (NULL when out of memory). Freed with the request. */
void *sluice_proto_api_state(struct req *r, size_t bytes);
/* Resolve a data op's topic by name in r's snapshot; an unknown topic or
 * partition makes the op local with UNKNOWN_TOPIC_OR_PARTITION. */
void sluice_proto_op_resolve(struct req *r, struct partop *op, struct kstr name);
/* Lend every op that is not answered locally to its storage core; with
 * none to lend, finish at once. */
void sluice_proto_dispatch(struct req *r);

/* ---- the per-partition request iterator ------------------------------------------
 * Produce, Fetch, ListOffsets and DeleteRecords share one request shape:
 * an array of topics, each a name and an array of partition entries (with
 * tagged fields after each entry and each topic in flexible versions). The
 * iterator decodes it in two passes: the first counts the entries (and
 * proves the array well-formed, bounding it by SLUICE_REQ_PARTITIONS_MAX),
 * the second fills one op per entry in request order, with the topic's
 * index in tindex, and resolves its topic. The API says how an entry is
 * laid out and which ops it refuses before storage sees them. */
struct sluice_proto_partitions {
	uint8_t kind;               /* enum partop_kind of every op */
	size_t partition_bytes_min; /* smallest partition entry: caps a count by the bytes left */
	/* The topics array ends the body (Produce): the counting pass checks
	 * the body's tagged fields too, so that the filling pass cannot fail
	 * once ops exist. */
	bool ends_body;
	/* Counting pass: step over one partition entry; may note what holds
	 * for the whole request in ctx. */
	void (*skip)(struct req *r, struct krd *rd, void *ctx);
	/* Filling pass: decode one partition entry into op (kind and tindex
	 * are set already; the topic is resolved after). */
	void (*decode)(struct req *r, struct krd *rd, struct partop *op, void *ctx);
	/* After resolution (op->local and op->error set for an unknown topic
	 * or partition): refuse the op (local, error) or leave it for its
	 * storage core. NULL: nothing more to refuse. */
	void (*admit)(struct req *r, struct partop *op, void *ctx);
};

/* Decode the topics array at rd into r->ops. False on a malformed or
 * oversized array (rd's error latched, nothing lent yet); rd is left after
 * the array (after the body's tagged fields with ends_body). */
bool sluice_proto_partitions_decode(struct req *r, struct krd *rd, const struct sluice_proto_partitions *pp,
				    void *ctx);

/* The response side: r->ops are in request order, grouped by tindex. A run
 * is one topic's ops: the run starting at op begin ends before the op this
 * returns. */
int32_t sluice_proto_topic_run_end(const struct req *r, int32_t begin);
/* One partition's fields of a response, between its partition index and
 * its tagged fields (which the iterator writes). */
typedef void (*sluice_proto_partition_write_fn)(struct req *r, struct kwr *w, const struct partop *op, void *ctx);
/* Write the response's topics array: the topics that have partitions to
 * answer (Kafka builds these responses from their partitions, so a topic
 * listed with none is left out: checked against Kafka 4.1 for ListOffsets
 * in bad_input.py), each with its name, its partitions through write, and
 * tagged fields where flexible. */
void sluice_proto_partitions_encode(struct req *r, sluice_proto_partition_write_fn write, void *ctx);
/* The same where write also writes each partition's tagged fields (Fetch's DivergingEpoch). */
void sluice_proto_partitions_encode_tagged(struct req *r, sluice_proto_partition_write_fn write, void *ctx);

#endif
