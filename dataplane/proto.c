/* The protocol layer's dispatch and framing: one table [ApiKey] =
 * {advertised and served versions, first flexible version, start, finish},
 * the version checked against it before any handler runs, the request's
 * life (decode the header, start, lend ops to storage cores, finish when
 * they are back, free), the response's framing, ApiVersions (which answers
 * from the table itself), and the per-partition request iterator the API
 * families share (proto_internal.h). The handlers live by API family in
 * api_records.c, api_admin.c and api_group.c. A decode failure closes the
 * connection (as Kafka does) after a log line naming the API, version and
 * byte offset. */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
	[API_DESCRIBE_CONFIGS] = {1, 4, 1, 4, sluice_api_describe_configs_start, NULL, "DescribeConfigs"},
	[API_ALTER_CONFIGS] = {0, 2, 0, 2, sluice_api_alter_configs_start, NULL, "AlterConfigs"},
	[API_CREATE_PARTITIONS] = {0, 3, 0, 2, sluice_api_create_partitions_start, NULL, "CreatePartitions"},
	[API_DELETE_GROUPS] = {0, 2, 0, 2, sluice_api_group_multi_start, sluice_api_group_multi_finish, "DeleteGroups"},
	[API_INCREMENTAL_ALTER_CONFIGS] = {0, 1, 0, 1, sluice_api_alter_configs_start, NULL, "IncrementalAlterConfigs"},
	[API_OFFSET_DELETE] = {0, 0, 0, INT16_MAX, sluice_api_group_single_start, sluice_api_group_single_finish,
			       "OffsetDelete"},
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

void sluice_proto_state_fini(struct proto_state *ps)
{
	if (ps)
		sluice_inflater_free(&ps->inflater);
}

/* ---- response framing ----------------------------------------------------- */

#define RESP_SPARE_BYTES_MAX (16u << 20) /* largest response buffer a connection keeps */
#define RESP_HEADER_BYTES 8              /* size and correlation id */

void sluice_proto_resp_begin(struct req *r)
{
	assert(!r->done);
	if (r->conn && r->conn->spare && !r->out.buf) {
		r->out = (struct kwr){.buf = r->conn->spare, .cap = r->conn->spare_cap, .cap_max = (size_t)INT32_MAX};
		r->conn->spare = NULL;
	} else {
		kwr_init(&r->out, 256, (size_t)INT32_MAX);
	}
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
	/* The size counts the bytes spliced in from pinned extents (req.h). */
	assert(r->out.len - 4 + (size_t)r->splice_bytes <= (size_t)INT32_MAX);
	kwr_patch_i32(&r->out, 0, (int32_t)(r->out.len - 4 + (size_t)r->splice_bytes));
	r->done = true;
	sluice_conn_response_ready(r);
}

void sluice_req_free(struct req *r)
{
	assert(r->pending == 0 && !r->parked); /* no storage core holds its ops */
	for (int32_t i = 0; i < r->nops; i++) {
		free(r->ops[i].rdata);
		kwr_free(&r->ops[i].gout);
	}
	free(r->ops);
	free(r->frame);
	free(r->api);
	if (r->conn && !r->conn->spare && r->out.buf && r->out.cap <= RESP_SPARE_BYTES_MAX) {
		r->conn->spare = r->out.buf;
		r->conn->spare_cap = r->out.cap;
		r->out.buf = NULL;
	}
	kwr_free(&r->out);
	if (r->snap)
		r->nc->b->meta.ops->release(r->nc->b->meta.self, r->snap);
	free(r);
}

/* ---- metadata snapshot ---------------------------------------------------- */

struct sluice_meta_snapshot *sluice_proto_snap(struct req *r)
{
	if (!r->snap)
		r->snap = r->nc->b->meta.ops->acquire(r->nc->b->meta.self);
	return r->snap;
}

void sluice_proto_snap_refresh(struct req *r)
{
	if (r->snap)
		r->nc->b->meta.ops->release(r->nc->b->meta.self, r->snap);
	r->snap = NULL;
	(void)sluice_proto_snap(r);
}

const struct sluice_topic *sluice_proto_topic_by_id(const struct sluice_meta_snapshot *s, const uint8_t id[16])
{
	for (uint32_t i = 0; i < s->topic_n; i++)
		if (memcmp(s->topics[i]->id, id, 16) == 0)
			return s->topics[i];
	return NULL;
}

/* ---- dispatch ------------------------------------------------------------- */

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
 * order. NULL when out of memory. */
static struct req *req_queue(struct conn *c, uint8_t *frame, uint32_t len, int16_t key, int16_t version,
			     int32_t corr)
{
	struct req *r = calloc(1, sizeof *r);
	if (!r)
		return NULL;
	r->conn = c;
	r->nc = c->nc;
	r->api_key = key;
	r->api_version = version;
	r->correlation_id = corr;
	r->frame = frame;
	r->frame_len = len;
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

bool sluice_proto_on_frame(struct conn *c, uint8_t *frame, uint32_t len)
{
	struct krd rd;
	krd_init(&rd, frame, len);
	int16_t key = krd_i16(&rd), version = krd_i16(&rd);
	int32_t corr = krd_i32(&rd);
	if (rd.err) {
		SLOG_DEBUG("proto", "%s: request header shorter than 8 bytes; closing", c->peer);
		free(frame);
		return false;
	}
	struct req *r = req_queue(c, frame, len, key, version, corr);
	if (!r) {
		free(frame);
		return false;
	}
	bool known = key >= 0 && key < API_KEY_MAX && apis[key].start;
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
	assert(!r->ops && r->nops == 0);
	if (n <= 0)
		return NULL;
	r->ops = calloc((size_t)n, sizeof *r->ops);
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
			pp->decode(r, rd, op, ctx);
			if (flex)
				krd_tags_skip(rd);
			sluice_proto_op_resolve(r, op, name);
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

void sluice_proto_partitions_encode(struct req *r, sluice_proto_partition_write_fn write, void *ctx)
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
			if (flex)
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
		n += apis[k].start != NULL;
	kwr_array(&r->out, flex, n);
	for (int k = 0; k < API_KEY_MAX; k++) {
		if (!apis[k].start)
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
