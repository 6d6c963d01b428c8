/* The protocol layer's dispatch and framing: one table [ApiKey] =
 * {advertised and served versions, first flexible version, start, finish},
 * the version checked against it before any handler runs, the request's
 * life (decode the header, start, lend ops to storage cores, finish when
 * they are back, free), the response's framing, ApiVersions (which answers
 * from the table itself), and the per-partition request iterator the API
 * families share (proto_internal.h). The handlers live by API family in
 * api_records.c, api_admin.c, api_logdirs.c and api_group.c. A decode
 * failure closes the connection (as Kafka does) after a log line naming
 * the API, version and byte offset. */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void proto_meta_free(void *meta);

typedef bool (*start_fn)(struct req *r, struct krd *rd);
typedef void (*finish_fn)(struct req *r);

struct api {
	int16_t adv_min, adv_max; /* advertised in ApiVersions */
	int16_t serve_min;        /* lowest version really parsed */
	int16_t flex_min;         /* first flexible version (INT16_MAX: never) */
	start_fn start;
	finish_fn finish;
	const char *name;
};

static bool api_versions_start(struct req *r, struct krd *rd);

static const struct api apis[API_KEY_MAX] = {
	[API_PRODUCE] = {0, 11, 3, 9, sluice_api_produce_start, sluice_api_produce_finish, "Produce"},
	[API_FETCH] = {4, 12, 4, 12, sluice_api_fetch_start, sluice_api_fetch_finish, "Fetch"},
	[API_LIST_OFFSETS] = {1, 7, 1, 6, sluice_api_list_offsets_start, sluice_api_list_offsets_finish, "ListOffsets"},
	[API_METADATA] = {0, 12, 0, 9, sluice_api_metadata_start, NULL, "Metadata"},
	[API_OFFSET_COMMIT] = {2, 9, 2, 8, sluice_api_group_single_start, sluice_api_group_single_finish, "OffsetCommit"},
	[API_OFFSET_FETCH] = {1, 9, 1, 6, sluice_api_group_multi_start, sluice_api_group_multi_finish, "OffsetFetch"},
	[API_FIND_COORDINATOR] = {0, 4, 0, 3, sluice_api_find_coordinator_start, NULL, "FindCoordinator"},
	[API_JOIN_GROUP] = {0, 9, 0, 6, sluice_api_group_single_start, sluice_api_group_single_finish, "JoinGroup"},
	[API_HEARTBEAT] = {0, 4, 0, 4, sluice_api_group_single_start, sluice_api_group_single_finish, "Heartbeat"},
	[API_LEAVE_GROUP] = {0, 5, 0, 4, sluice_api_group_single_start, sluice_api_group_single_finish, "LeaveGroup"},
	[API_SYNC_GROUP] = {0, 5, 0, 4, sluice_api_group_single_start, sluice_api_group_single_finish, "SyncGroup"},
	[API_DESCRIBE_GROUPS] = {0, 5, 0, 5, sluice_api_group_multi_start, sluice_api_group_multi_finish,
				 "DescribeGroups"},
	[API_LIST_GROUPS] = {0, 5, 0, 3, sluice_api_list_groups_start, sluice_api_list_groups_finish, "ListGroups"},
	[API_API_VERSIONS] = {0, 4, 0, 3, api_versions_start, NULL, "ApiVersions"},
	[API_CREATE_TOPICS] = {2, 7, 2, 5, sluice_api_create_topics_start, NULL, "CreateTopics"},
	[API_DELETE_TOPICS] = {1, 6, 1, 4, sluice_api_delete_topics_start, sluice_api_delete_topics_finish,
			       "DeleteTopics"},
	[API_DELETE_RECORDS] = {0, 2, 0, 2, sluice_api_delete_records_start, sluice_api_delete_records_finish,
				"DeleteRecords"},
	[API_INIT_PRODUCER_ID] = {0, 4, 0, 2, sluice_api_init_producer_id_start, NULL, "InitProducerId"},
	[API_OFFSET_FOR_LEADER_EPOCH] = {2, 4, 2, 4, sluice_api_offset_for_leader_epoch_start,
					 sluice_api_offset_for_leader_epoch_finish, "OffsetForLeaderEpoch"},
	[API_DESCRIBE_CONFIGS] = {1, 4, 1, 4, sluice_api_describe_configs_start, NULL, "DescribeConfigs"},
	[API_ALTER_CONFIGS] = {0, 2, 0, 2, sluice_api_alter_configs_start, NULL, "AlterConfigs"},
	/* DescribeLogDirs v5 only adds IsCordoned, but kafka-python takes a
	 * broker advertising it for Kafka 4.3+ (its version guess): up to v4,
	 * as Kafka 3.3 to 4.2 advertise. */
	[API_DESCRIBE_LOG_DIRS] = {1, 4, 1, 2, sluice_api_describe_log_dirs_start, sluice_api_describe_log_dirs_finish,
				   "DescribeLogDirs"},
	[API_CREATE_PARTITIONS] = {0, 3, 0, 2, sluice_api_create_partitions_start, NULL, "CreatePartitions"},
	[API_DELETE_GROUPS] = {0, 2, 0, 2, sluice_api_group_multi_start, sluice_api_group_multi_finish, "DeleteGroups"},
	[API_INCREMENTAL_ALTER_CONFIGS] = {0, 1, 0, 1, sluice_api_alter_configs_start, NULL, "IncrementalAlterConfigs"},
	[API_ALTER_PARTITION_REASSIGNMENTS] = {0, 1, 0, 0, sluice_api_reassignments_start, NULL,
					       "AlterPartitionReassignments"},
	[API_LIST_PARTITION_REASSIGNMENTS] = {0, 0, 0, 0, sluice_api_reassignments_start, NULL,
					      "ListPartitionReassignments"},
	[API_OFFSET_DELETE] = {0, 0, 0, INT16_MAX, sluice_api_group_single_start, sluice_api_group_single_finish,
			       "OffsetDelete"},
	[API_DESCRIBE_QUORUM] = {0, 2, 0, 0, sluice_api_describe_quorum_start, NULL, "DescribeQuorum"},
	[API_DESCRIBE_CLUSTER] = {0, 1, 0, 0, sluice_api_describe_cluster_start, NULL, "DescribeCluster"},
	[API_DESCRIBE_TOPIC_PARTITIONS] = {0, 0, 0, 0, sluice_api_describe_topic_partitions_start, NULL,
					   "DescribeTopicPartitions"},
};
_Static_assert(API_DESCRIBE_TOPIC_PARTITIONS < API_KEY_MAX, "the table holds the highest key served");

int64_t sluice_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* The clock requests are stamped with (their latency histograms): read
 * once per pass of the core's loop (runtime.h, pass), not per request (a
 * clock read per request was 5% of a DPDK network core's time); every
 * read, outside a running loop (tests). */
static int64_t pass_us(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	if (nc->rt.pass == 0)
		return now_us();
	if (ps->clock_pass != nc->rt.pass) {
		ps->clock_us = now_us();
		ps->clock_pass = nc->rt.pass;
	}
	return ps->clock_us;
}

const char *sluice_proto_api_name(int16_t key)
{
	return key >= 0 && key < API_KEY_MAX ? apis[key].name : NULL;
}

void sluice_proto_error_count(struct req *r, int16_t code)
{
	struct proto_state *ps = r->nc->state;
	sluice_metrics_error(&ps->metrics, r->api_key, code);
}

/* The APIs whose ops are the response's partitions, each answered with its
 * op's error: counted here for every handler at once. (DeleteTopics' and
 * DescribeLogDirs' ops are lookups, the group APIs' carry their answers in
 * gout: their codes are not op errors.) */
static void count_op_errors(struct req *r)
{
	int16_t k = r->api_key;
	if (k != API_PRODUCE && k != API_FETCH && k != API_LIST_OFFSETS && k != API_DELETE_RECORDS &&
	    k != API_OFFSET_FOR_LEADER_EPOCH)
		return;
	for (int32_t i = 0; i < r->nops; i++)
		sluice_proto_error_count(r, r->ops[i].error);
}

int64_t sluice_coarse_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the core's pools ------------------------------------------------------
 * Every request takes one struct req, at most one op array and one frame
 * buffer, so a core that has one of each free can always take the next
 * frame whole: the network core asks sluice_proto_has_room before cutting
 * one and otherwise stops reading (back-pressure), and nothing fails once a
 * frame is cut. Ops beyond an array's partitions and frames beyond the
 * large class come from the heap: not the hot path. */
_Static_assert(SLUICE_OBJPOOL_OBJECTS_MAX == SLUICE_CONFIG_POOL_OBJECTS_MAX, "config bounds the pools as objpool.h");
_Static_assert(SLUICE_CONN_INFLIGHT_MAX <= SLUICE_CONFIG_POOL_REQUESTS_DEFAULT,
	       "by default one connection can pipeline its whole in-flight limit");
_Static_assert(SLUICE_CONFIG_POOL_OP_ARRAY_PARTITIONS_MAX <= SLUICE_REQ_PARTITIONS_MAX,
	       "a pooled op array is never larger than a request may need");
_Static_assert((uint64_t)SLUICE_CONFIG_POOL_OP_ARRAY_PARTITIONS_MAX * sizeof(struct partop) <=
		       SLUICE_OBJPOOL_OBJECT_BYTES_MAX, "the largest op array is a poolable object");
_Static_assert(SLUICE_CONFIG_POOL_FRAME_BYTES_MAX <= SLUICE_OBJPOOL_OBJECT_BYTES_MAX,
	       "the largest frame buffer is a poolable object");

int sluice_proto_state_init(struct proto_state *ps, const struct sluice_config *cfg)
{
	assert(cfg->pool_requests > 0 && cfg->pool_op_array_partitions > 0);
	assert(cfg->pool_large_frame_bytes >= cfg->pool_frame_bytes);
	ps->op_array_n = cfg->pool_op_array_partitions;
	ps->heap_reqs = 0;
	ps->heap_reqs_max = cfg->pool_overflow_requests;
	assert(ps->heap_reqs_max >= 0);
	if (sluice_objpool_init(&ps->reqs, "requests", sizeof(struct req), (uint32_t)cfg->pool_requests) < 0 ||
	    sluice_objpool_init(&ps->op_arrays, "op arrays", (size_t)ps->op_array_n * sizeof(struct partop),
			     (uint32_t)cfg->pool_op_arrays) < 0 ||
	    sluice_objpool_init(&ps->frames, "frames", (size_t)cfg->pool_frame_bytes, (uint32_t)cfg->pool_frames) < 0 ||
	    sluice_objpool_init(&ps->frames_large, "large frames", (size_t)cfg->pool_large_frame_bytes,
			     (uint32_t)cfg->pool_large_frames) < 0) {
		SLOG_ERR("proto", "cannot reserve the network core's pools (sluice.network.pool.*)");
		return -1;
	}
	return 0;
}

static bool pools_full(const struct proto_state *ps)
{
	return ps->reqs.free_n == ps->reqs.count && ps->op_arrays.free_n == ps->op_arrays.count &&
	       ps->frames.free_n == ps->frames.count && ps->frames_large.free_n == ps->frames_large.count;
}

void sluice_proto_state_fini(struct proto_state *ps)
{
	if (!ps)
		return;
	sluice_inflater_free(&ps->inflater);
	while (ps->resp_cache_n > 0)
		free(ps->resp_cache[--ps->resp_cache_n]);
	/* A connection still busy at shutdown keeps its requests (and storage
	 * cores may still hold their ops): left to process exit, as before. */
	if (!pools_full(ps))
		return;
	sluice_objpool_fini(&ps->reqs);
	sluice_objpool_fini(&ps->op_arrays);
	sluice_objpool_fini(&ps->frames);
	sluice_objpool_fini(&ps->frames_large);
}

/* The largest frame a pool holds: above it frames come from the heap
 * (sluice.network.pool.large.frames may be 0: no large class). */
static size_t frame_pooled_bytes_max(const struct proto_state *ps)
{
	return ps->frames_large.count ? ps->frames_large.obj_bytes : ps->frames.obj_bytes;
}

static bool pools_have_room(const struct proto_state *ps, uint32_t frame_bytes)
{
	if (!sluice_objpool_available(&ps->reqs) || !sluice_objpool_available(&ps->op_arrays))
		return false;
	if (frame_bytes == 0 || frame_bytes > frame_pooled_bytes_max(ps))
		return true; /* not known yet, or from the heap */
	if (frame_bytes <= ps->frames.obj_bytes && sluice_objpool_available(&ps->frames))
		return true;
	return sluice_objpool_available(&ps->frames_large) > 0;
}

/* Room for one more request: in the pools, else on the heap within
 * sluice.network.pool.overflow.requests (each heap request may take its
 * frame and op array from the heap too). */
bool sluice_proto_has_room(const struct netcore *nc, uint32_t frame_bytes)
{
	const struct proto_state *ps = nc->state;
	assert(ps->heap_reqs >= 0 && ps->heap_reqs <= ps->heap_reqs_max);
	return pools_have_room(ps, frame_bytes) || ps->heap_reqs < ps->heap_reqs_max;
}

uint8_t *sluice_proto_frame_get(struct netcore *nc, uint32_t len)
{
	struct proto_state *ps = nc->state;
	assert(len > 0 && ps->frames.obj_bytes > 0);
	if (len <= ps->frames.obj_bytes && sluice_objpool_available(&ps->frames))
		return sluice_objpool_get(&ps->frames);
	if (len <= frame_pooled_bytes_max(ps) && sluice_objpool_available(&ps->frames_large))
		return sluice_objpool_get(&ps->frames_large);
	if (len <= frame_pooled_bytes_max(ps) && ps->heap_reqs >= ps->heap_reqs_max)
		return NULL; /* back-pressure: the caller asked sluice_proto_has_room */
	return malloc(len); /* larger than every pooled frame, or the pools are empty */
}

void sluice_proto_frame_put(struct netcore *nc, uint8_t *frame)
{
	struct proto_state *ps = nc->state;
	if (!frame)
		return;
	if (sluice_objpool_owns(&ps->frames, frame))
		sluice_objpool_put(&ps->frames, frame);
	else if (sluice_objpool_owns(&ps->frames_large, frame))
		sluice_objpool_put(&ps->frames_large, frame);
	else
		free(frame);
}

static void ops_put(struct req *r)
{
	struct proto_state *ps = r->nc->state;
	if (!r->ops)
		return;
	if (sluice_objpool_owns(&ps->op_arrays, r->ops))
		sluice_objpool_put(&ps->op_arrays, r->ops);
	else
		free(r->ops);
	r->ops = NULL;
}

void *sluice_proto_api_state(struct req *r, size_t bytes)
{
	assert(!r->api && bytes > 0);
	if (bytes <= sizeof r->api_inline) {
		memset(r->api_inline, 0, bytes);
		r->api = r->api_inline;
	} else {
		r->api = calloc(1, bytes); /* the admin APIs' larger state: not the hot path */
	}
	return r->api;
}

/* ---- response framing ----------------------------------------------------- */

#define RESP_SPARE_BYTES_MAX (16u << 20) /* largest response buffer a connection keeps */
#define RESP_HEADER_BYTES 8              /* size and correlation id */

/* A response buffer kept for reuse: the connection's spare (its last one,
 * as large as it grew), else one of the core's small cached ones, else a
 * fresh one. */
static void resp_buffer_take(struct req *r)
{
	struct proto_state *ps = r->nc->state;
	assert(!r->out.buf);
	if (r->conn && r->conn->spare) {
		r->out = (struct kwr){.buf = r->conn->spare, .cap = r->conn->spare_cap, .cap_max = (size_t)INT32_MAX};
		r->conn->spare = NULL;
	} else if (ps->resp_cache_n > 0) {
		int32_t i = --ps->resp_cache_n;
		r->out = (struct kwr){.buf = ps->resp_cache[i], .cap = ps->resp_cache_cap[i], .cap_max = (size_t)INT32_MAX};
		ps->resp_cache[i] = NULL;
	} else {
		kwr_init(&r->out, 256, (size_t)INT32_MAX);
	}
}

/* Keep r's response buffer for the next response: as the connection's
 * spare when it has none, else in the core's cache when small. */
static void resp_buffer_keep(struct req *r)
{
	struct proto_state *ps = r->nc->state;
	if (!r->out.buf)
		return;
	if (r->conn && !r->conn->spare && r->out.cap <= RESP_SPARE_BYTES_MAX) {
		r->conn->spare = r->out.buf;
		r->conn->spare_cap = r->out.cap;
		r->out.buf = NULL;
	} else if (r->out.cap <= SLUICE_PROTO_RESP_CACHE_BYTES_MAX && ps->resp_cache_n < SLUICE_PROTO_RESP_CACHE_N) {
		ps->resp_cache[ps->resp_cache_n] = r->out.buf;
		ps->resp_cache_cap[ps->resp_cache_n++] = r->out.cap;
		r->out.buf = NULL;
	}
	assert(ps->resp_cache_n <= SLUICE_PROTO_RESP_CACHE_N);
}

void sluice_proto_resp_begin(struct req *r)
{
	assert(!r->done);
	if (!r->out.buf)
		resp_buffer_take(r);
	kwr_i32(&r->out, 0); /* size, patched in resp_end */
	kwr_i32(&r->out, r->correlation_id);
	if (r->flexible && r->api_key != API_API_VERSIONS) /* ApiVersions answers with header v0 */
		kwr_tags_empty(&r->out);
}

void sluice_proto_resp_end(struct req *r)
{
	assert(!r->done);
	if (r->out.err) {
		SLOG_ERR("proto", "%s v%d: response could not be encoded (out of memory or too large)",
			 apis[r->api_key].name, r->api_version);
		r->done = true;
		r->no_response = true;
		sluice_conn_close(r->conn);
		return;
	}
	assert(r->out.len >= RESP_HEADER_BYTES);
	count_op_errors(r);
	/* The size counts the bytes spliced in from pinned extents (req.h). */
	assert(r->out.len - 4 + (size_t)r->splice_bytes <= (size_t)INT32_MAX);
	kwr_patch_i32(&r->out, 0, (int32_t)(r->out.len - 4 + (size_t)r->splice_bytes));
	r->done = true;
	sluice_conn_response_ready(r);
}



void sluice_req_free(struct req *r)
{
	assert(r->pending == 0 && !r->parked); /* no storage core holds its ops */
	struct proto_state *ps = r->nc->state;
	if (r->done) /* answered (its response sent, or none wanted), or refused: its total time */
		sluice_metrics_latency(&ps->metrics, r->api_key, pass_us(r->nc) - r->received_us);
	for (int32_t i = 0; i < r->nops; i++) {
		free(r->ops[i].rdata);
		kwr_free(&r->ops[i].gout);
	}
	ops_put(r);
	sluice_proto_frame_put(r->nc, r->frame);
	if (r->api != r->api_inline)
		free(r->api);
	proto_meta_free(r->meta);
	resp_buffer_keep(r);
	kwr_free(&r->out);
	sluice_proto_snap_put(r);
	if (sluice_objpool_owns(&ps->reqs, r)) {
		sluice_objpool_put(&ps->reqs, r);
		return;
	}
	assert(ps->heap_reqs > 0);
	ps->heap_reqs--;
	free(r);
}

/* ---- metadata snapshot ---------------------------------------------------- */

/* A request's snapshot is the one its network core holds (ps->snap_cur)
 * while that is current: asking costs a load of the metadata's current
 * pointer, and the core counts the users; no lock and no atomic shared
 * with the other cores per request (acquire takes the metadata's lock and
 * bumps a shared count: 4% of a DPDK network core's time per request).
 * A newer snapshot out, the core acquires it; the old one is released at
 * once when unused, else retired until its last request is done. With no
 * room to retire it (SLUICE_PROTO_SNAPS_RETIRED_MAX requests' snapshots
 * behind), or a backend without is_current, a request takes a reference of
 * its own, as before. */
struct sluice_meta_snapshot *sluice_proto_snap(struct req *r)
{
	if (r->snap)
		return r->snap;
	const struct sluice_meta_ops *ops = r->nc->b->meta.ops;
	void *self = r->nc->b->meta.self;
	struct proto_state *ps = r->nc->state;
	if (!ops->is_current || !ps) {
		r->snap = ops->acquire(self);
		return r->snap;
	}
	if (!ps->snap_cur.snap || !ops->is_current(self, ps->snap_cur.snap)) {
		if (ps->snap_cur.snap && ps->snap_cur.users > 0 && ps->snap_retired_n == SLUICE_PROTO_SNAPS_RETIRED_MAX) {
			r->snap = ops->acquire(self); /* nowhere to retire the old one: keep it, this request has its own */
			return r->snap;
		}
		if (ps->snap_cur.snap && ps->snap_cur.users == 0)
			ops->release(self, ps->snap_cur.snap);
		else if (ps->snap_cur.snap)
			ps->snap_retired[ps->snap_retired_n++] = ps->snap_cur;
		ps->snap_cur = (struct sluice_snap_hold){ops->acquire(self), 0};
	}
	ps->snap_cur.users++;
	r->snap = ps->snap_cur.snap;
	r->snap_core = true;
	return r->snap;
}

/* The request is done with its snapshot. */
void sluice_proto_snap_put(struct req *r)
{
	if (!r->snap)
		return;
	const struct sluice_meta_ops *ops = r->nc->b->meta.ops;
	void *self = r->nc->b->meta.self;
	struct proto_state *ps = r->nc->state;
	if (!r->snap_core) {
		ops->release(self, r->snap);
	} else if (r->snap == ps->snap_cur.snap) {
		assert(ps->snap_cur.users > 0);
		ps->snap_cur.users--;
	} else {
		int32_t i = 0;
		while (i < ps->snap_retired_n && ps->snap_retired[i].snap != r->snap)
			i++;
		assert(i < ps->snap_retired_n && ps->snap_retired[i].users > 0);
		if (--ps->snap_retired[i].users == 0) {
			ops->release(self, ps->snap_retired[i].snap);
			ps->snap_retired[i] = ps->snap_retired[--ps->snap_retired_n];
		}
	}
	r->snap = NULL;
	r->snap_core = false;
}

void sluice_proto_snap_drop_cached(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	if (!ps || !ps->snap_cur.snap || ps->snap_cur.users > 0)
		return; /* in use at shutdown: left to the process's exit, as the requests are */
	nc->b->meta.ops->release(nc->b->meta.self, ps->snap_cur.snap);
	ps->snap_cur.snap = NULL;
}

const struct sluice_config *sluice_proto_config(struct req *r)
{
	return sluice_meta_config(sluice_proto_snap(r), &r->nc->b->cfg);
}

void sluice_proto_snap_refresh(struct req *r)
{
	sluice_proto_snap_put(r);
	(void)sluice_proto_snap(r);
}

/* ---- metadata changes: submitted, completed on the network core ------------- */

/* A request's metadata batch, its completion post and its changes, in one
 * allocation owned by the request (r->meta); or a request relayed to the
 * controller (forward_done set), with the controller's answer. */
struct proto_meta {
	struct sluice_meta_batch batch;
	struct sluice_rt_post post; /* the completion, run on the request's network core */
	struct req *r;
	void (*done)(struct req *r);
	void (*forward_done)(struct req *r, int16_t error, const uint8_t *resp, size_t len);
	int16_t forward_error;
	uint8_t *forward_resp; /* the controller's response body, owned (malloc) */
	size_t forward_len;
	void *extra;   /* the handler's room after the changes */
	bool out; /* submitted, done not yet run */
	_Alignas(max_align_t) struct sluice_meta_change changes[];
};

static void proto_meta_free(void *meta)
{
	struct proto_meta *pm = meta;
	if (!pm)
		return;
	assert(!pm->out);
	free(pm->forward_resp);
	free(pm);
}

struct sluice_meta_batch *sluice_proto_meta_batch(struct req *r, uint32_t change_n, size_t extra_bytes, void **extra)
{
	struct proto_meta *pm = r->meta;
	assert(!pm || !pm->out);
	assert(change_n <= SLUICE_META_BATCH_CHANGES_MAX);
	proto_meta_free(pm);
	size_t changes_bytes = (size_t)change_n * sizeof pm->changes[0];
	changes_bytes = (changes_bytes + _Alignof(max_align_t) - 1) / _Alignof(max_align_t) * _Alignof(max_align_t);
	pm = calloc(1, sizeof *pm + changes_bytes + extra_bytes);
	r->meta = pm;
	if (!pm)
		return NULL;
	pm->r = r;
	pm->batch.changes = pm->changes;
	pm->batch.change_n = change_n;
	pm->extra = extra_bytes ? (uint8_t *)pm->changes + changes_bytes : NULL;
	if (extra)
		*extra = pm->extra;
	return &pm->batch;
}

struct sluice_meta_batch *sluice_proto_meta_current(struct req *r, void **extra)
{
	struct proto_meta *pm = r->meta;
	assert(pm && !pm->out);
	if (extra)
		*extra = pm->extra;
	return &pm->batch;
}

/* The network core: the batch is back. The request's snapshot is renewed
 * (it shows the batch) before its handler answers. */
static void meta_post_run(void *arg)
{
	struct proto_meta *pm = arg;
	struct req *r = pm->r;
	struct netcore *nc = r->nc;
	struct proto_state *ps = nc->state;
	assert(r->nc == nc && r->meta == pm && pm->out);
	assert(r->pending == 1 && !r->done && ps->meta_out > 0);
	pm->out = false;
	r->pending = 0;
	ps->meta_out--;
	if (r->snap)
		sluice_proto_snap_refresh(r);
	pm->done(r);
}

/* The metadata writer's thread: hand the request back to its core. */
static void meta_batch_done(struct sluice_meta_batch *b)
{
	struct proto_meta *pm = (struct proto_meta *)((char *)b - offsetof(struct proto_meta, batch));
	assert(pm->out && b->arg == pm);
	assert(pm->post.fn == meta_post_run && pm->post.arg == pm);
	sluice_rt_post(&pm->r->nc->rt, &pm->post);
}

enum sluice_meta_submit_result sluice_proto_meta_submit(struct req *r, void (*done)(struct req *r))
{
	struct proto_meta *pm = r->meta;
	assert(pm && !pm->out && done);
	assert(r->pending == 0 && !r->done);
	pm->batch.done = meta_batch_done;
	pm->batch.arg = pm;
	pm->post.fn = meta_post_run;
	pm->post.arg = pm;
	pm->done = done;
	/* Held like ops lent to a storage core: a connection closed meanwhile
	 * keeps the request (netcore.c drops it once done) until the batch is
	 * back, for the writer thread still points at it. */
	pm->out = true;
	r->pending = 1;
	enum sluice_meta_submit_result res = r->nc->b->meta.ops->submit(r->nc->b->meta.self, &pm->batch);
	if (res != SLUICE_META_SUBMITTED) {
		pm->out = false;
		r->pending = 0;
		return res;
	}
	((struct proto_state *)r->nc->state)->meta_out++;
	return res;
}

/* ---- requests relayed to the controller ---------------------------------------- */

/* The network core: the controller's answer (or the failure) is back. */
static void forward_post_run(void *arg)
{
	struct proto_meta *pm = arg;
	struct req *r = pm->r;
	struct proto_state *ps = r->nc->state;
	assert(r->meta == pm && pm->out && pm->forward_done);
	assert(r->pending == 1 && !r->done && ps->meta_out > 0);
	pm->out = false;
	r->pending = 0;
	ps->meta_out--;
	pm->forward_done(r, pm->forward_error, pm->forward_resp, pm->forward_len);
}

/* The backend's thread: keep a copy of the answer (resp is the backend's
 * only during the call) and hand the request back to its core. */
static void forward_backend_done(void *arg, int16_t error, const uint8_t *resp, size_t len)
{
	struct proto_meta *pm = arg;
	assert(pm->out && !pm->forward_resp);
	assert(pm->post.fn == forward_post_run && pm->post.arg == pm);
	pm->forward_error = error;
	if (!error && !resp)
		pm->forward_error = KERR_UNKNOWN_SERVER_ERROR; /* a backend bug, answered as the world's */
	if (!pm->forward_error) {
		pm->forward_resp = malloc(len ? len : 1);
		if (pm->forward_resp) {
			memcpy(pm->forward_resp, resp, len);
			pm->forward_len = len;
		} else
			pm->forward_error = KERR_REQUEST_TIMED_OUT; /* out of memory: the client retries */
	}
	sluice_rt_post(&pm->r->nc->rt, &pm->post);
}

bool sluice_proto_meta_forward_as(struct req *r, int16_t api_key, int16_t api_version, const uint8_t *body,
				  size_t len, void (*done)(struct req *r, int16_t error, const uint8_t *resp, size_t len))
{
	const struct sluice_meta *m = &r->nc->b->meta;
	assert(done && r->pending == 0 && !r->done);
	assert(body || len == 0);
	if (!m->ops->forward || !sluice_proto_meta_batch(r, 0, 0, NULL))
		return false;
	struct proto_meta *pm = r->meta;
	pm->forward_done = done;
	pm->post.fn = forward_post_run;
	pm->post.arg = pm;
	/* Held as a submitted batch is (sluice_proto_meta_submit); counted
	 * before the call, for done may be posted before it returns. */
	pm->out = true;
	r->pending = 1;
	struct proto_state *ps = r->nc->state;
	ps->meta_out++;
	if (m->ops->forward(m->self, api_key, api_version, body, len, forward_backend_done, pm) != 0) {
		pm->out = false;
		r->pending = 0;
		ps->meta_out--;
		return false;
	}
	return true;
}

bool sluice_proto_meta_forward(struct req *r, void (*done)(struct req *r, int16_t error, const uint8_t *resp,
							  size_t len))
{
	assert(r->body_off <= r->frame_len);
	return sluice_proto_meta_forward_as(r, r->api_key, r->api_version, r->frame + r->body_off,
					    r->frame_len - r->body_off, done);
}

bool sluice_proto_cluster_mode(const struct req *r)
{
	return sluice_config_cluster_mode(&r->nc->b->cfg);
}

int16_t sluice_proto_leader_check(const struct req *r, const struct sluice_topic *t, int32_t p,
				  int32_t current_leader_epoch)
{
	const struct sluice_partition_state *st = sluice_topic_partition(t, p);
	if (!st)
		return KERR_NONE;
	assert(st->replica_n >= 0 && st->replica_n <= SLUICE_REPLICAS_MAX);
	if (current_leader_epoch >= 0 && current_leader_epoch < st->leader_epoch)
		return KERR_FENCED_LEADER_EPOCH;
	if (current_leader_epoch > st->leader_epoch)
		return KERR_UNKNOWN_LEADER_EPOCH;
	return st->leader == r->nc->b->cfg.node_id ? KERR_NONE : KERR_NOT_LEADER_OR_FOLLOWER;
}

const struct sluice_topic *sluice_proto_topic_by_id(const struct sluice_meta_snapshot *s, const uint8_t id[16])
{
	for (uint32_t i = 0; i < s->topic_n; i++)
		if (memcmp(s->topics[i]->id, id, 16) == 0)
			return s->topics[i];
	return NULL;
}

/* ---- dispatch ------------------------------------------------------------- */

/* Whether this broker serves API key now: in the table, and DescribeQuorum
 * only where it can answer (single-node: this node is the quorum; cluster
 * mode: relayed to the controller, so only with a backend that forwards).
 * The reassignment APIs are the controller's: relayed in cluster mode, not
 * served by a single node (one broker has nowhere to move a partition). */
static bool api_served(const struct broker *b, int key)
{
	if (key < 0 || key >= API_KEY_MAX || !apis[key].start)
		return false;
	bool cluster = sluice_config_cluster_mode(&b->cfg);
	if (key == API_DESCRIBE_QUORUM && cluster)
		return b->meta.ops->forward != NULL;
	if (key == API_ALTER_PARTITION_REASSIGNMENTS || key == API_LIST_PARTITION_REASSIGNMENTS)
		return cluster && b->meta.ops->forward != NULL;
	return true;
}

static bool api_flexible(int16_t key, int16_t version)
{
	return key >= 0 && key < API_KEY_MAX && apis[key].start && version >= apis[key].flex_min;
}

static bool api_versions_unsupported(struct req *r)
{
	/* Kafka's rule: answer an unknown ApiVersions version with a v0 body,
	 * UNSUPPORTED_VERSION, and only ApiVersions' own range. */
	r->flexible = false;
	sluice_proto_resp_begin(r);
	kwr_i16(&r->out, KERR_UNSUPPORTED_VERSION);
	kwr_array(&r->out, false, 1);
	kwr_i16(&r->out, API_API_VERSIONS);
	kwr_i16(&r->out, apis[API_API_VERSIONS].adv_min);
	kwr_i16(&r->out, apis[API_API_VERSIONS].adv_max);
	sluice_proto_resp_end(r);
	return true;
}

/* A request for the frame, queued on c so that responses keep arrival
 * order. NULL when the core's request pool is exhausted (the network core
 * asks sluice_proto_has_room first, so only another caller sees it). */
static struct req *req_queue(struct conn *c, uint8_t *frame, uint32_t len, int16_t key, int16_t version,
			     int32_t corr)
{
	struct proto_state *ps = c->nc->state;
	struct req *r = sluice_objpool_get(&ps->reqs);
	if (!r && ps->heap_reqs < ps->heap_reqs_max && (r = malloc(sizeof *r)) != NULL)
		ps->heap_reqs++; /* the pool is empty: overflow, counted */
	if (!r)
		return NULL;
	memset(r, 0, sizeof *r);
	r->conn = c;
	r->nc = c->nc;
	r->api_key = key;
	r->api_version = version;
	r->correlation_id = corr;
	r->frame = frame;
	r->frame_len = len;
	r->received_us = pass_us(c->nc);
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	c->inflight++;
	c->refs++;
	assert(c->head && c->tail == r);
	return r;
}

/* FindCoordinator and the group APIs: as in Kafka, __consumer_offsets
 * appears when groups are first used. */
static bool api_uses_offsets_topic(int16_t key)
{
	assert(key >= 0 && key < API_KEY_MAX);
	const struct api *a = &apis[key];
	return key == API_FIND_COORDINATOR || a->start == sluice_api_group_single_start ||
	       a->start == sluice_api_group_multi_start || a->start == sluice_api_list_groups_start;
}

/* Start r now, after a metadata change it waited for (its body is decoded
 * from the frame kept in the request); a decode failure closes the
 * connection, as in sluice_proto_on_frame. A connection closed meanwhile
 * has the request dropped unstarted. r may be freed on return. */
static void start_deferred(struct req *r)
{
	assert(!r->done && r->pending == 0);
	struct conn *c = r->conn;
	if (!c->closing) {
		struct krd rd;
		krd_init(&rd, r->frame, r->frame_len);
		rd.p = r->frame + r->body_off;
		assert(rd.p <= rd.end);
		if (apis[r->api_key].start(r, &rd) && !rd.err)
			return;
		SLOG_INFO("proto", "%s: malformed %s v%d request at byte %zu (%s); closing connection", c->peer,
			  apis[r->api_key].name, r->api_version, krd_offset(&rd), rd.err_what ? rd.err_what : "invalid");
		c->refused = true;
	}
	if (!r->done) {
		r->done = true;
		r->no_response = true;
	}
	sluice_conn_close(c);
}

bool sluice_proto_on_frame(struct conn *c, uint8_t *frame, uint32_t len)
{
	struct krd rd;
	krd_init(&rd, frame, len);
	int16_t key = krd_i16(&rd), version = krd_i16(&rd);
	int32_t corr = krd_i32(&rd);
	if (rd.err) {
		SLOG_DEBUG("proto", "%s: request header shorter than 8 bytes; closing", c->peer);
		sluice_proto_frame_put(c->nc, frame);
		return false;
	}
	struct req *r = req_queue(c, frame, len, key, version, corr);
	if (!r) {
		SLOG_WARN("proto", "%s: network core %d has no request free (sluice.network.pool.requests); closing",
			  c->peer, c->nc->id);
		sluice_proto_frame_put(c->nc, frame);
		return false;
	}
	bool known = api_served(c->nc->b, key);
	if (known)
		sluice_metric_add(&((struct proto_state *)c->nc->state)->metrics.requests[key], 1);
	if (key == API_API_VERSIONS && (version < 0 || version > apis[API_API_VERSIONS].adv_max))
		return api_versions_unsupported(r);
	if (!known || version < apis[key].adv_min || version > apis[key].adv_max) {
		SLOG_INFO("proto", "%s: unsupported API key %d version %d; closing connection", c->peer, key, version);
		r->done = true;
		r->no_response = true;
		return false;
	}
	r->flexible = api_flexible(key, version);
	r->client_id = krd_string(&rd, false); /* ClientId: never compact, even in header v2 */
	if (r->flexible)
		krd_tags_skip(&rd);
	r->body_off = krd_offset(&rd);
	/* The group APIs start once __consumer_offsets exists. */
	if (!rd.err && api_uses_offsets_topic(key) && sluice_api_offsets_topic_ensure(r, start_deferred))
		return true;
	if (!rd.err && apis[key].start(r, &rd) && !rd.err)
		return true;
	SLOG_INFO("proto", "%s: malformed %s v%d request at byte %zu (%s); closing connection", c->peer,
		  apis[key].name, version, krd_offset(&rd), rd.err_what ? rd.err_what : "invalid");
	if (!r->done) {
		r->done = true;
		r->no_response = true;
	}
	return false;
}

void sluice_proto_dispatch(struct req *r)
{
	assert(r->pending == 0 && !r->done);
	assert(apis[r->api_key].finish);
	int32_t n = 0;
	for (int32_t i = 0; i < r->nops; i++)
		if (!r->ops[i].local)
			n++;
	r->pending = n;
	if (n == 0) {
		apis[r->api_key].finish(r);
		return;
	}
	for (int32_t i = 0; i < r->nops; i++)
		if (!r->ops[i].local)
			sluice_net_submit(r->nc, &r->ops[i]);
}

void sluice_proto_on_partop(struct netcore *nc, struct partop *op)
{
	struct req *r = op->req;
	(void)nc;
	assert(op >= r->ops && op < r->ops + r->nops && !op->local);
	assert(r->pending > 0 && !r->done);
	if (--r->pending == 0)
		apis[r->api_key].finish(r);
}

struct partop *sluice_proto_ops_alloc(struct req *r, int32_t n)
{
	struct proto_state *ps = r->nc->state;
	assert(!r->ops && r->nops == 0);
	if (n <= 0)
		return NULL;
	if (n <= ps->op_array_n && (r->ops = sluice_objpool_get(&ps->op_arrays)) != NULL)
		memset(r->ops, 0, (size_t)n * sizeof *r->ops);
	else
		r->ops = calloc((size_t)n, sizeof *r->ops); /* more partitions than an array holds */
	r->nops = r->ops ? n : 0;
	for (int32_t i = 0; i < r->nops; i++) {
		r->ops[i].req = r;
		r->ops[i].net_core = (uint8_t)r->nc->id;
	}
	return r->ops;
}

void sluice_proto_op_resolve(struct req *r, struct partop *op, struct kstr name)
{
	assert(op->req == r);
	op->name_ptr = name.ptr;
	op->name_len = name.len;
	const struct sluice_topic *t = name.ptr ? sluice_meta_find(sluice_proto_snap(r), name.ptr, (size_t)name.len)
						: NULL;
	if (!t || op->partition < 0 || op->partition >= t->partitions) {
		op->local = true;
		op->error = KERR_UNKNOWN_TOPIC_OR_PARTITION;
		return;
	}
	op->topic = t->name;
	op->tinfo = t;
	op->cfg = sluice_proto_config(r);
	memcpy(op->topic_id, t->id, 16);
}

/* ---- the per-partition request iterator (proto_internal.h) ---------------- */

#define TOPIC_BYTES_MIN 2 /* smallest topic entry: an empty name and an empty array */

/* Counting pass over a copy of the reader: how many partition entries the
 * topics array holds, or -1 when it is malformed (scan's error latched). */
static int32_t partitions_count(struct req *r, struct krd *scan, const struct sluice_proto_partitions *pp,
				void *ctx)
{
	bool flex = r->flexible;
	int32_t ntopics = krd_array(scan, flex, TOPIC_BYTES_MIN), total = 0;
	for (int32_t t = 0; t < ntopics && !scan->err; t++) {
		(void)krd_string(scan, flex);
		int32_t np = krd_array(scan, flex, pp->partition_bytes_min);
		for (int32_t p = 0; p < np && !scan->err; p++) {
			pp->skip(r, scan, ctx);
			if (flex)
				krd_tags_skip(scan);
			total++;
		}
		if (flex)
			krd_tags_skip(scan);
	}
	if (pp->ends_body && flex)
		krd_tags_skip(scan);
	return scan->err ? -1 : total;
}

bool sluice_proto_partitions_decode(struct req *r, struct krd *rd, const struct sluice_proto_partitions *pp,
				    void *ctx)
{
	assert(r->nops == 0 && r->pending == 0);
	bool flex = r->flexible;
	struct krd scan = *rd;
	int32_t total = partitions_count(r, &scan, pp, ctx);
	if (total < 0 || total > SLUICE_REQ_PARTITIONS_MAX) {
		*rd = scan;
		return false;
	}
	if (total > 0 && !sluice_proto_ops_alloc(r, total))
		return false;
	/* Filling pass: the same bytes the counting pass proved well-formed. */
	int32_t ntopics = krd_array(rd, flex, TOPIC_BYTES_MIN), k = 0;
	for (int32_t t = 0; t < ntopics; t++) {
		struct kstr name = krd_string(rd, flex);
		int32_t np = krd_array(rd, flex, pp->partition_bytes_min);
		for (int32_t p = 0; p < np; p++) {
			struct partop *op = &r->ops[k++];
			op->kind = pp->kind;
			op->tindex = t;
			op->leader_epoch = -1; /* decode sets the request's, where it has one */
			pp->decode(r, rd, op, ctx);
			if (flex)
				krd_tags_skip(rd);
			sluice_proto_op_resolve(r, op, name);
			if (!op->local) { /* a partition led elsewhere, or at another epoch */
				op->error = sluice_proto_leader_check(r, op->tinfo, op->partition, op->leader_epoch);
				op->local = op->error != KERR_NONE;
			}
			if (pp->admit)
				pp->admit(r, op, ctx);
		}
		if (flex)
			krd_tags_skip(rd);
	}
	if (pp->ends_body && flex)
		krd_tags_skip(rd);
	assert(k == total && r->nops == total);
	assert(!rd->err);
	return true;
}

int32_t sluice_proto_topic_run_end(const struct req *r, int32_t begin)
{
	assert(begin >= 0 && begin < r->nops);
	int32_t end = begin + 1;
	while (end < r->nops && r->ops[end].tindex == r->ops[begin].tindex)
		end++;
	return end;
}

static int32_t topic_runs(const struct req *r)
{
	int32_t n = 0;
	for (int32_t k = 0; k < r->nops; k = sluice_proto_topic_run_end(r, k))
		n++;
	return n;
}

static void partitions_encode(struct req *r, sluice_proto_partition_write_fn write, void *ctx, bool own_tags);

void sluice_proto_partitions_encode(struct req *r, sluice_proto_partition_write_fn write, void *ctx)
{
	partitions_encode(r, write, ctx, false);
}

void sluice_proto_partitions_encode_tagged(struct req *r, sluice_proto_partition_write_fn write, void *ctx)
{
	partitions_encode(r, write, ctx, true);
}

static void partitions_encode(struct req *r, sluice_proto_partition_write_fn write, void *ctx, bool own_tags)
{
	assert(!r->done && r->out.len >= RESP_HEADER_BYTES);
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	kwr_array(w, flex, topic_runs(r));
	for (int32_t k = 0, end; k < r->nops; k = end) {
		end = sluice_proto_topic_run_end(r, k);
		assert(r->ops[k].tindex >= (k ? r->ops[k - 1].tindex : 0)); /* request order */
		kwr_string(w, flex, r->ops[k].name_ptr, r->ops[k].name_len);
		kwr_array(w, flex, end - k);
		for (int32_t i = k; i < end; i++) {
			kwr_i32(w, r->ops[i].partition);
			write(r, w, &r->ops[i], ctx);
			if (flex && !own_tags)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
}

/* ---- ApiVersions (18) ------------------------------------------------------ */

static bool api_versions_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	if (r->api_version >= 3) {
		(void)krd_string(rd, true); /* ClientSoftwareName */
		(void)krd_string(rd, true); /* ClientSoftwareVersion */
		krd_tags_skip(rd);
	}
	if (rd->err)
		return false;
	sluice_proto_resp_begin(r);
	kwr_i16(&r->out, KERR_NONE);
	int32_t n = 0;
	for (int k = 0; k < API_KEY_MAX; k++)
		n += api_served(r->nc->b, k);
	kwr_array(&r->out, flex, n);
	for (int k = 0; k < API_KEY_MAX; k++) {
		if (!api_served(r->nc->b, k))
			continue;
		kwr_i16(&r->out, (int16_t)k);
		kwr_i16(&r->out, apis[k].adv_min);
		kwr_i16(&r->out, apis[k].adv_max);
		if (flex)
			kwr_tags_empty(&r->out);
	}
	if (r->api_version >= 1)
		kwr_i32(&r->out, 0); /* ThrottleTimeMs */
	if (flex)
		kwr_tags_empty(&r->out);
	sluice_proto_resp_end(r);
	return true;
}
