/* Kafka request handlers: one table [ApiKey] = {advertised and served
 * versions, first flexible version, start, finish}. A handler decodes with
 * the bounds-checked reader, answers at once or lends partition operations
 * to storage cores and encodes its response in finish() when they are all
 * back. A decode failure closes the connection (as Kafka does) after a log
 * line naming the API, version and byte offset. */
#include "common/kafka/batch.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/group.h"
#include "dataplane/req.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
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

static bool produce_start(struct req *r, struct krd *rd);
static void produce_finish(struct req *r);
static bool fetch_start(struct req *r, struct krd *rd);
static void fetch_finish(struct req *r);
static bool list_offsets_start(struct req *r, struct krd *rd);
static void list_offsets_finish(struct req *r);
static bool metadata_start(struct req *r, struct krd *rd);
static bool api_versions_start(struct req *r, struct krd *rd);
static bool create_topics_start(struct req *r, struct krd *rd);
static bool delete_topics_start(struct req *r, struct krd *rd);
static void delete_topics_finish(struct req *r);
static bool describe_configs_start(struct req *r, struct krd *rd);
static bool find_coordinator_start(struct req *r, struct krd *rd);
static void ensure_offsets_topic(struct req *r);
static bool init_producer_id_start(struct req *r, struct krd *rd);
static bool create_partitions_start(struct req *r, struct krd *rd);
static bool alter_configs_start(struct req *r, struct krd *rd);
static bool delete_records_start(struct req *r, struct krd *rd);
static void delete_records_finish(struct req *r);
static bool describe_cluster_start(struct req *r, struct krd *rd);
static bool describe_topic_partitions_start(struct req *r, struct krd *rd);
static bool group_single_start(struct req *r, struct krd *rd);
static void group_single_finish(struct req *r);
static bool group_multi_start(struct req *r, struct krd *rd);
static void group_multi_finish(struct req *r);
static bool list_groups_start(struct req *r, struct krd *rd);
static void list_groups_finish(struct req *r);

#define API_KEY_MAX 76
static const struct api apis[API_KEY_MAX] = {
	[0] = {0, 11, 3, 9, produce_start, produce_finish, "Produce"},
	[1] = {4, 12, 4, 12, fetch_start, fetch_finish, "Fetch"},
	[2] = {1, 7, 1, 6, list_offsets_start, list_offsets_finish, "ListOffsets"},
	[3] = {0, 12, 0, 9, metadata_start, NULL, "Metadata"},
	[8] = {2, 9, 2, 8, group_single_start, group_single_finish, "OffsetCommit"},
	[9] = {1, 9, 1, 6, group_multi_start, group_multi_finish, "OffsetFetch"},
	[10] = {0, 4, 0, 3, find_coordinator_start, NULL, "FindCoordinator"},
	[11] = {0, 9, 0, 6, group_single_start, group_single_finish, "JoinGroup"},
	[12] = {0, 4, 0, 4, group_single_start, group_single_finish, "Heartbeat"},
	[13] = {0, 5, 0, 4, group_single_start, group_single_finish, "LeaveGroup"},
	[14] = {0, 5, 0, 4, group_single_start, group_single_finish, "SyncGroup"},
	[15] = {0, 5, 0, 5, group_multi_start, group_multi_finish, "DescribeGroups"},
	[16] = {0, 5, 0, 3, list_groups_start, list_groups_finish, "ListGroups"},
	[18] = {0, 4, 0, 3, api_versions_start, NULL, "ApiVersions"},
	[19] = {2, 7, 2, 5, create_topics_start, NULL, "CreateTopics"},
	[20] = {1, 6, 1, 4, delete_topics_start, delete_topics_finish, "DeleteTopics"},
	[21] = {0, 2, 0, 2, delete_records_start, delete_records_finish, "DeleteRecords"},
	[22] = {0, 4, 0, 2, init_producer_id_start, NULL, "InitProducerId"},
	[32] = {1, 4, 1, 4, describe_configs_start, NULL, "DescribeConfigs"},
	[33] = {0, 2, 0, 2, alter_configs_start, NULL, "AlterConfigs"},
	[37] = {0, 3, 0, 2, create_partitions_start, NULL, "CreatePartitions"},
	[42] = {0, 2, 0, 2, group_multi_start, group_multi_finish, "DeleteGroups"},
	[44] = {0, 1, 0, 1, alter_configs_start, NULL, "IncrementalAlterConfigs"},
	[47] = {0, 0, 0, INT16_MAX, group_single_start, group_single_finish, "OffsetDelete"},
	[60] = {0, 1, 0, 0, describe_cluster_start, NULL, "DescribeCluster"},
	[75] = {0, 0, 0, 0, describe_topic_partitions_start, NULL, "DescribeTopicPartitions"},
};

int64_t sluice_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- response framing ----------------------------------------------------- */

#define RESP_SPARE_BYTES_MAX (16u << 20) /* largest response buffer a connection keeps */

static void resp_begin(struct req *r)
{
	if (r->conn && r->conn->spare && !r->out.buf) {
		r->out = (struct kwr){.buf = r->conn->spare, .cap = r->conn->spare_cap, .cap_max = (size_t)INT32_MAX};
		r->conn->spare = NULL;
	} else {
		kwr_init(&r->out, 256, (size_t)INT32_MAX);
	}
	kwr_i32(&r->out, 0); /* size, patched in resp_end */
	kwr_i32(&r->out, r->correlation_id);
	if (r->flexible && r->api_key != 18) /* ApiVersions answers with header v0 */
		kwr_tags_empty(&r->out);
}

static void resp_end(struct req *r)
{
	if (r->out.err) {
		SLOG_ERR("proto", "%s v%d: response could not be encoded (out of memory or too large)",
			 apis[r->api_key].name, r->api_version);
		r->done = true;
		r->no_response = true;
		sluice_conn_close(r->conn);
		return;
	}
	kwr_patch_i32(&r->out, 0, (int32_t)(r->out.len - 4));
	r->done = true;
	sluice_conn_response_ready(r);
}

void sluice_req_free(struct req *r)
{
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

static struct sluice_meta_snapshot *snap(struct req *r)
{
	if (!r->snap)
		r->snap = r->nc->b->meta.ops->acquire(r->nc->b->meta.self);
	return r->snap;
}

static void refresh_snap(struct req *r)
{
	if (r->snap)
		r->nc->b->meta.ops->release(r->nc->b->meta.self, r->snap);
	r->snap = NULL;
	(void)snap(r);
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
	resp_begin(r);
	kwr_i16(&r->out, KERR_UNSUPPORTED_VERSION);
	kwr_array(&r->out, false, 1);
	kwr_i16(&r->out, 18);
	kwr_i16(&r->out, apis[18].adv_min);
	kwr_i16(&r->out, apis[18].adv_max);
	resp_end(r);
	return true;
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
	struct req *r = calloc(1, sizeof *r);
	if (!r) {
		free(frame);
		return false;
	}
	r->conn = c;
	r->nc = c->nc;
	r->api_key = key;
	r->api_version = version;
	r->correlation_id = corr;
	r->frame = frame;
	r->frame_len = len;
	/* Queue first so responses keep arrival order. */
	if (c->tail)
		c->tail->next = r;
	else
		c->head = r;
	c->tail = r;
	c->inflight++;
	c->refs++;
	bool known = key >= 0 && key < API_KEY_MAX && apis[key].start;
	if (key == 18 && (version < 0 || version > apis[18].adv_max))
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

/* Lend every op that is not answered locally to its storage core. */
static void dispatch_ops(struct req *r)
{
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
	assert(r->pending > 0);
	if (--r->pending == 0)
		apis[r->api_key].finish(r);
}

static struct partop *ops_alloc(struct req *r, int32_t n)
{
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

/* Resolve a topic partition for a data op; sets local + error when unknown. */
static void op_resolve(struct req *r, struct partop *op, struct kstr name)
{
	op->name_ptr = name.ptr;
	op->name_len = name.len;
	const struct sluice_topic *t = name.ptr ? sluice_meta_find(snap(r), name.ptr, (size_t)name.len) : NULL;
	if (!t || op->partition < 0 || op->partition >= t->partitions) {
		op->local = true;
		op->error = KERR_UNKNOWN_TOPIC_OR_PARTITION;
		return;
	}
	op->topic = t->name;
	op->tinfo = t;
	memcpy(op->topic_id, t->id, 16);
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
	resp_begin(r);
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
	resp_end(r);
	return true;
}

/* ---- Metadata (3) ----------------------------------------------------------- */

struct md_topic {
	struct kstr name;
	uint8_t id[16];
	bool by_id;
};

static void md_write_topic(struct req *r, const struct sluice_topic *t, struct kstr name, const uint8_t *id,
			   int16_t error)
{
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	kwr_i16(w, error);
	if (t)
		kwr_cstr(w, flex, t->name);
	else if (!name.ptr && v < 12)
		kwr_string(w, flex, "", 0); /* Name is nullable only from v12 */
	else
		kwr_string(w, flex, name.ptr, name.len);
	if (v >= 10) {
		static const uint8_t zero[16];
		kwr_uuid(w, t ? t->id : id ? id : zero);
	}
	if (v >= 1)
		kwr_bool(w, t && !strcmp(t->name, SLUICE_OFFSETS_TOPIC)); /* IsInternal */
	int32_t parts = t && error == KERR_NONE ? t->partitions : 0;
	kwr_array(w, flex, parts);
	int32_t node = r->nc->b->cfg.node_id;
	uint32_t offline = __atomic_load_n(&r->nc->b->offline_dirs, __ATOMIC_ACQUIRE);
	for (int32_t p = 0; p < parts; p++) {
		/* A partition in a failed data directory shows as offline. */
		bool down = false;
		if (offline) {
			char path[900];
			int d = sluice_partition_dir(r->nc->b, t->name, p, false, path, sizeof path);
			down = d >= 0 && (offline & (1u << d));
		}
		kwr_i16(w, down ? KERR_KAFKA_STORAGE_ERROR : KERR_NONE);
		kwr_i32(w, p);
		kwr_i32(w, down ? -1 : node);
		if (v >= 7)
			kwr_i32(w, 0); /* LeaderEpoch */
		kwr_array(w, flex, 1);
		kwr_i32(w, node);
		kwr_array(w, flex, down ? 0 : 1);
		if (!down)
			kwr_i32(w, node);
		if (v >= 5) {
			kwr_array(w, flex, down ? 1 : 0);
			if (down)
				kwr_i32(w, node);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 8)
		kwr_i32(w, INT32_MIN); /* TopicAuthorizedOperations: not computed */
	if (flex)
		kwr_tags_empty(w);
}

static const struct sluice_topic *find_by_id(const struct sluice_meta_snapshot *s, const uint8_t id[16])
{
	for (uint32_t i = 0; i < s->topic_n; i++)
		if (memcmp(s->topics[i]->id, id, 16) == 0)
			return s->topics[i];
	return NULL;
}

static bool metadata_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = krd_array(rd, flex, v >= 10 ? 17 : 2);
	if (rd->err)
		return false;
	struct md_topic *ts = n > 0 ? calloc((size_t)n, sizeof *ts) : NULL;
	if (n > 0 && !ts)
		return false;
	r->api = ts;
	for (int32_t i = 0; i < n; i++) {
		if (v >= 10)
			krd_uuid(rd, ts[i].id);
		ts[i].name = krd_string(rd, flex);
		ts[i].by_id = v >= 10 && !ts[i].name.ptr;
		if (flex)
			krd_tags_skip(rd);
	}
	bool allow_auto = true;
	if (v >= 4)
		allow_auto = krd_bool(rd);
	if (v >= 8 && v <= 10)
		(void)krd_bool(rd);
	if (v >= 8)
		(void)krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	bool all = n < 0 || (v == 0 && n == 0);
	const struct sluice_config *cfg = &r->nc->b->cfg;
	/* Auto-create first so the response shows the new topics. */
	if (!all && allow_auto && cfg->auto_create_topics_enable) {
		bool created = false, batch = false;
		for (int32_t i = 0; i < n; i++) {
			if (ts[i].by_id || !ts[i].name.ptr || sluice_meta_find(snap(r), ts[i].name.ptr, (size_t)ts[i].name.len))
				continue;
			if (!sluice_topic_name_valid(ts[i].name.ptr, (size_t)ts[i].name.len))
				continue;
			if (!batch) /* one metadata write for all the topics created here */
				r->nc->b->meta.ops->batch_begin(r->nc->b->meta.self);
			batch = true;
			struct sluice_topic_spec spec = {ts[i].name.ptr, (size_t)ts[i].name.len, -1, -1, 0, {{{0}, {0}}}};
			char msg[256];
			if (r->nc->b->meta.ops->create_topic(r->nc->b->meta.self, &spec, false, msg, sizeof msg, NULL) == 0)
				created = true;
		}
		char msg[256];
		if (batch && r->nc->b->meta.ops->batch_commit(r->nc->b->meta.self, msg, sizeof msg) != 0)
			created = false;
		if (created)
			refresh_snap(r);
	}
	struct sluice_meta_snapshot *s = snap(r);
	resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 3)
		kwr_i32(w, 0);
	kwr_array(w, flex, 1);
	kwr_i32(w, cfg->node_id);
	kwr_cstr(w, flex, cfg->advertised_host);
	kwr_i32(w, cfg->advertised_port);
	if (v >= 1)
		kwr_cstr(w, flex, NULL); /* Rack */
	if (flex)
		kwr_tags_empty(w);
	if (v >= 2)
		kwr_cstr(w, flex, cfg->cluster_id);
	if (v >= 1)
		kwr_i32(w, cfg->node_id); /* ControllerId */
	if (all) {
		kwr_array(w, flex, (int32_t)s->topic_n);
		for (uint32_t i = 0; i < s->topic_n; i++)
			md_write_topic(r, s->topics[i], (struct kstr){0}, NULL, KERR_NONE);
	} else {
		kwr_array(w, flex, n);
		for (int32_t i = 0; i < n; i++) {
			const struct sluice_topic *t;
			int16_t err = KERR_NONE;
			if (ts[i].by_id) {
				t = find_by_id(s, ts[i].id);
				if (!t)
					err = KERR_UNKNOWN_TOPIC_ID;
			} else {
				t = ts[i].name.ptr ? sluice_meta_find(s, ts[i].name.ptr, (size_t)ts[i].name.len) : NULL;
				if (!t)
					err = ts[i].name.ptr && !sluice_topic_name_valid(ts[i].name.ptr, (size_t)ts[i].name.len)
						      ? KERR_INVALID_TOPIC_EXCEPTION : KERR_UNKNOWN_TOPIC_OR_PARTITION;
			}
			md_write_topic(r, t, ts[i].name, ts[i].by_id ? ts[i].id : NULL, err);
		}
	}
	if (v >= 8 && v <= 10)
		kwr_i32(w, INT32_MIN);
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
	return true;
}

/* Responses of per-partition APIs: ops are in request order, grouped by the
 * topic's index in the request. Writes topic t's name and partition count and
 * returns the first op of the topic; *k moves past its last. */
/* Topics of the request that have partitions to answer: Kafka builds these
 * responses from their partitions, so a topic listed with none is left out
 * (checked against Kafka 4.1 for ListOffsets in bad_input.py). */
static int32_t topics_answered(const struct req *r)
{
	int32_t n = 0;
	for (int32_t i = 0; i < r->nops; i++)
		n += i == 0 || r->ops[i].tindex != r->ops[i - 1].tindex;
	return n;
}

/* Write topic t's name and partition count; -1 (nothing written) when the
 * request gave it no partitions. */
static int32_t topic_ops_begin(struct req *r, struct kwr *w, int32_t t, int32_t *k)
{
	int32_t start = *k;
	while (*k < r->nops && r->ops[*k].tindex == t)
		(*k)++;
	if (start == *k)
		return -1;
	kwr_string(w, r->flexible, r->ops[start].name_ptr, r->ops[start].name_len);
	kwr_array(w, r->flexible, *k - start);
	return start;
}

/* ---- Produce (0) ------------------------------------------------------------ */

struct produce_state {
	int16_t acks;
	int32_t ntopics;
};

/* Produce validation follows Kafka's order and codes (ProduceRequest's
 * checks, then UnifiedLog's, then LogValidator's): one v2 batch, within the
 * size limit, intact CRC, a count that matches LastOffsetDelta, no control
 * batch, a sequence for an idempotent producer; then every record is decoded
 * (compressed batches are decompressed into the core's scratch buffer), so
 * that a batch whose records do not add up to what it claims is refused
 * before it burns offsets or stalls a consumer. Kafka gives structural
 * faults no ErrorMessage; Sluice names the fault, in Kafka's words where
 * Kafka has some. Record-level faults (a null key on a compacted topic, a
 * timestamp out of range) are answered as Kafka does: one RecordErrors entry
 * per record and Kafka's ErrorMessage. */
#define PRODUCE_INFLATE_BYTES_MAX (64u << 20) /* decompression-bomb cap, as storage's readers */
_Static_assert(SLUICE_INFLATER_KEEP_BYTES_DEFAULT <= PRODUCE_INFLATE_BYTES_MAX,
	       "the per-core buffer kept between batches is within what one batch may inflate to");

static const char msg_invalid_ts[] = "One or more records have been rejected due to invalid timestamp";

/* A produce op refused for record-level faults keeps them for the response
 * in its rdata (freed with the request, as every op's rdata). */
struct produce_record_errors {
	int32_t n;              /* all found; e[] holds the first SLUICE_BATCH_RECORD_ERRORS_MAX */
	int64_t ts_min, ts_max; /* the window the timestamps missed */
	struct sluice_record_error e[SLUICE_BATCH_RECORD_ERRORS_MAX];
};

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static bool log_append_time(const struct sluice_config *cfg, const struct sluice_topic_limits *lim)
{
	return lim->log_append_time >= 0 ? lim->log_append_time : cfg->log_append_time;
}

void sluice_proto_state_fini(struct proto_state *ps)
{
	if (ps)
		sluice_inflater_free(&ps->inflater);
}

/* The header checks, before any record is decoded. */
static int16_t validate_header(const struct req *r, int64_t max_bytes, const uint8_t *p, int32_t len,
			       struct sluice_batch *b, const char **msg)
{
	if (!p || len <= 0)
		return KERR_INVALID_RECORD;
	enum sluice_batch_result res = sluice_batch_check(p, (size_t)len, b);
	switch (res) {
	case SLUICE_BATCH_OK: break;
	case SLUICE_BATCH_BAD_MAGIC: return KERR_INVALID_RECORD;
	case SLUICE_BATCH_BAD_COUNT: return KERR_INVALID_RECORD;
	default: return KERR_CORRUPT_MESSAGE;
	}
	if (sluice_batch_total_bytes(b) != len)
		return KERR_INVALID_RECORD; /* more than one batch, or trailing bytes */
	if (b->base_offset != 0) {
		*msg = "The baseOffset of a record batch from a client should be 0";
		return KERR_INVALID_RECORD;
	}
	if (len > max_bytes)
		return KERR_MESSAGE_TOO_LARGE;
	if ((b->attributes & SLUICE_BATCH_ATTR_CODEC_MASK) == SLUICE_CODEC_ZSTD && r->api_version < 7) {
		*msg = "Produce requests with version below 7 are not allowed to use ZStandard compression";
		return KERR_UNSUPPORTED_COMPRESSION_TYPE;
	}
	if (b->attributes & SLUICE_BATCH_ATTR_CONTROL) {
		*msg = "Clients are not allowed to write control records";
		return KERR_INVALID_RECORD;
	}
	if (b->producer_id >= 0 && b->base_sequence < 0) {
		*msg = "Invalid sequence number in a record batch with a producer id";
		return KERR_INVALID_RECORD;
	}
	if (b->attributes & SLUICE_BATCH_ATTR_TRANSACTIONAL) {
		*msg = "Transactions are not supported by this broker";
		return KERR_INVALID_RECORD;
	}
	return KERR_NONE;
}

static int16_t verify_fault(enum sluice_batch_result res, const char **msg)
{
	switch (res) {
	case SLUICE_BATCH_BAD_CODEC: *msg = "Unknown compression codec"; return KERR_INVALID_RECORD;
	case SLUICE_BATCH_BAD_PAYLOAD: *msg = "Failed to decompress record stream"; return KERR_INVALID_RECORD;
	case SLUICE_BATCH_TOO_BIG_INFLATED:
		*msg = "The record batch decompresses to more than 64 MiB";
		return KERR_MESSAGE_TOO_LARGE;
	case SLUICE_BATCH_FEWER_RECORDS:
		*msg = "Incorrect declared batch size, premature EOF reached";
		return KERR_INVALID_RECORD;
	case SLUICE_BATCH_EXTRA_BYTES:
		*msg = "Incorrect declared batch size, records still remaining in file";
		return KERR_INVALID_RECORD;
	case SLUICE_BATCH_BAD_DELTA:
		*msg = "Record offset deltas must be 0, 1, 2, ... in order";
		return KERR_INVALID_RECORD;
	default:
		*msg = "Invalid record size or structure";
		return KERR_INVALID_RECORD;
	}
}

static int64_t sat_add(int64_t a, int64_t b)
{
	int64_t s;
	return __builtin_add_overflow(a, b, &s) ? (b > 0 ? INT64_MAX : INT64_MIN) : s;
}

/* Validate one partition's records (see above). On record-level faults the
 * op keeps them in rdata for produce_finish. */
static int16_t validate_records(struct req *r, struct partop *op, int64_t max_bytes, const uint8_t *p, int32_t len)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	const struct sluice_topic_limits *lim = &op->tinfo->limits;
	struct sluice_batch b;
	int16_t e = validate_header(r, max_bytes, p, len, &b, &op->error_message);
	if (e)
		return e;
	struct sluice_batch_verify v;
	bool create_time = !log_append_time(cfg, lim);
	v.need_key = lim->cleanup_compact == 1;
	v.check_timestamps = create_time;
	v.ts_min = INT64_MIN;
	v.ts_max = INT64_MAX;
	int64_t window_min = INT64_MIN; /* as Kafka prints it: now - before.max.ms */
	if (v.check_timestamps) {
		int64_t now = wall_ms();
		window_min = sat_add(now, -cfg->timestamp_before_max_ms);
		/* Kafka's test, now - ts > before.max.ms, never fires at Long.MAX_VALUE */
		v.ts_min = cfg->timestamp_before_max_ms == INT64_MAX ? INT64_MIN : window_min;
		v.ts_max = sat_add(now, cfg->timestamp_after_max_ms);
	}
	struct proto_state *ps = r->nc->state;
	enum sluice_batch_result res = sluice_batch_verify(p, &b, &ps->inflater, PRODUCE_INFLATE_BYTES_MAX, &v);
	sluice_inflater_trim(&ps->inflater);
	if (res != SLUICE_BATCH_OK)
		return verify_fault(res, &op->error_message);
	if (v.nerrors == 0) {
		/* Kafka sets a CreateTime batch's MaxTimestamp to its records' (the
		 * time index and retention read it): rewrite it if it lies. The
		 * batch lies in the request's frame, which the request owns. */
		if (create_time && !(b.attributes & SLUICE_BATCH_ATTR_TS_LOG_APPEND) && v.max_timestamp != b.max_timestamp)
			sluice_batch_set_max_timestamp((uint8_t *)(uintptr_t)p, v.max_timestamp);
		return KERR_NONE;
	}
	int32_t kept = v.nerrors < SLUICE_BATCH_RECORD_ERRORS_MAX ? v.nerrors : SLUICE_BATCH_RECORD_ERRORS_MAX;
	bool any_ts = false;
	for (int32_t i = 0; i < kept; i++)
		any_ts |= v.errors[i].fault == SLUICE_RECORD_TIMESTAMP;
	struct produce_record_errors *pe = malloc(sizeof *pe); /* error path: allocating is fine */
	if (pe) {
		pe->n = v.nerrors;
		pe->ts_min = window_min;
		pe->ts_max = v.ts_max;
		memcpy(pe->e, v.errors, (size_t)kept * sizeof pe->e[0]);
		assert(!op->rdata);
		op->rdata = (uint8_t *)pe;
	}
	/* INVALID_RECORD's text lists the errors: produce_finish writes it. */
	op->error_message = any_ts ? msg_invalid_ts : NULL;
	return any_ts ? KERR_INVALID_TIMESTAMP : KERR_INVALID_RECORD;
}

/* Kafka refuses a whole request that carries a transactional batch without
 * a TransactionalId (TRANSACTIONAL_ID_AUTHORIZATION_FAILED). */
static bool has_transactional_batch(const uint8_t *recs, int32_t len)
{
	return recs && len >= SLUICE_BATCH_HEADER_BYTES && recs[SLUICE_BATCH_OFF_MAGIC] == 2 &&
	       (kbe16(recs + SLUICE_BATCH_OFF_ATTRIBUTES) & SLUICE_BATCH_ATTR_TRANSACTIONAL);
}

static bool produce_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct kstr txn_id = {0};
	if (v >= 3)
		txn_id = krd_string(rd, flex); /* TransactionalId */
	int16_t acks = krd_i16(rd);
	(void)krd_i32(rd); /* TimeoutMs */
	/* Pass 1: count partitions, checking structure. */
	struct krd scan = *rd;
	int32_t ntopics = krd_array(&scan, flex, 2), total = 0;
	bool txn_denied = false;
	for (int32_t t = 0; t < ntopics && !scan.err; t++) {
		(void)krd_string(&scan, flex);
		int32_t np = krd_array(&scan, flex, 5);
		for (int32_t p = 0; p < np && !scan.err; p++) {
			(void)krd_i32(&scan);
			const uint8_t *recs;
			int32_t len = krd_bytes(&scan, flex, &recs);
			txn_denied |= !txn_id.ptr && has_transactional_batch(recs, len);
			if (flex)
				krd_tags_skip(&scan);
			total++;
		}
		if (flex)
			krd_tags_skip(&scan);
	}
	if (flex)
		krd_tags_skip(&scan);
	if (scan.err || total > SLUICE_REQ_PARTITIONS_MAX) {
		*rd = scan;
		return false;
	}
	struct produce_state *ps = calloc(1, sizeof *ps);
	if (!ps || (total > 0 && !ops_alloc(r, total)))
		return free(ps), false;
	r->api = ps;
	ps->acks = acks;
	ps->ntopics = ntopics;
	r->no_response = acks == 0;
	/* Pass 2: fill ops. */
	int32_t k = 0;
	(void)krd_array(rd, flex, 2);
	const struct sluice_config *cfg = &r->nc->b->cfg;
	for (int32_t t = 0; t < ntopics; t++) {
		struct kstr name = krd_string(rd, flex);
		int32_t np = krd_array(rd, flex, 5);
		for (int32_t p = 0; p < np; p++) {
			struct partop *op = &r->ops[k++];
			op->kind = PARTOP_APPEND;
			op->tindex = t;
			op->partition = krd_i32(rd);
			const uint8_t *recs;
			int32_t len = krd_bytes(rd, flex, &recs);
			if (flex)
				krd_tags_skip(rd);
			op->acks = acks;
			op->base_offset = -1;
			op_resolve(r, op, name);
			if (txn_denied) { /* the whole request, as Kafka */
				op->local = true;
				op->error = KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
				op->error_message = NULL;
				continue;
			}
			if (op->local)
				continue;
			const struct sluice_topic_limits *lim = &op->tinfo->limits;
			int64_t max_bytes = lim->max_message_bytes >= 0 ? lim->max_message_bytes : cfg->message_max_bytes;
			int64_t min_isr = lim->min_insync_replicas > 0 ? lim->min_insync_replicas : cfg->min_insync_replicas;
			int16_t e = v < 3 ? KERR_UNSUPPORTED_VERSION
				  : !strcmp(op->topic, SLUICE_OFFSETS_TOPIC) ? KERR_INVALID_TOPIC_EXCEPTION
				  : acks != 0 && acks != 1 && acks != -1 ? KERR_INVALID_REQUIRED_ACKS
				  : validate_records(r, op, max_bytes, recs, len);
			if (!e && acks == -1 && min_isr > 1) {
				/* One broker: the in-sync replica set is just this one. */
				e = KERR_NOT_ENOUGH_REPLICAS;
				op->error_message = "The size of the current ISR is less than min.insync.replicas";
			}
			if (e) {
				op->local = true;
				op->error = e;
				continue;
			}
			op->data = recs;
			op->len = (uint32_t)len;
		}
		if (flex)
			krd_tags_skip(rd);
	}
	if (flex)
		krd_tags_skip(rd);
	assert(k == total);
	dispatch_ops(r);
	return true;
}

/* One RecordErrors entry's message, as Kafka words it. */
static void record_error_text(char *buf, size_t cap, const struct partop *op, const struct produce_record_errors *pe,
			      const struct sluice_record_error *e)
{
	if (e->fault == SLUICE_RECORD_NO_KEY)
		snprintf(buf, cap, "Compacted topic cannot accept message without key in topic partition %s-%" PRId32,
			 op->topic, op->partition);
	else
		snprintf(buf, cap,
			 "Timestamp %" PRId64 " of message with offset %" PRId32 " is out of range. The timestamp should "
			 "be within [%" PRId64 ", %" PRId64 "]", e->timestamp, e->index, pe->ts_min, pe->ts_max);
}

#define RECORD_ERROR_TEXT_BYTES (SLUICE_TOPIC_NAME_MAX + 160)
#define RECORD_ERRORS_SHOWN 3 /* Kafka's ErrorMessage quotes the first three */
#define RECORDS_ERRORS_SHOWN_BYTES (RECORD_ERRORS_SHOWN * (RECORD_ERROR_TEXT_BYTES + 48))
_Static_assert(RECORD_ERRORS_SHOWN <= SLUICE_BATCH_RECORD_ERRORS_MAX, "the errors quoted are among those kept");

/* RecordErrors and ErrorMessage (v8+) of one partition. */
static void produce_write_errors(struct kwr *w, bool flex, const struct partop *op)
{
	const struct produce_record_errors *pe = op->error ? (const struct produce_record_errors *)op->rdata : NULL;
	char text[RECORD_ERROR_TEXT_BYTES];
	if (!pe) {
		kwr_array(w, flex, 0);
		kwr_cstr(w, flex, op->error ? op->error_message : NULL);
		return;
	}
	int32_t kept = pe->n < SLUICE_BATCH_RECORD_ERRORS_MAX ? pe->n : SLUICE_BATCH_RECORD_ERRORS_MAX;
	kwr_array(w, flex, kept);
	for (int32_t i = 0; i < kept; i++) {
		kwr_i32(w, pe->e[i].index);
		record_error_text(text, sizeof text, op, pe, &pe->e[i]);
		kwr_cstr(w, flex, text);
		if (flex)
			kwr_tags_empty(w);
	}
	if (op->error_message) { /* INVALID_TIMESTAMP's fixed text */
		kwr_cstr(w, flex, op->error_message);
		return;
	}
	char msg[160 + RECORDS_ERRORS_SHOWN_BYTES];
	size_t n = (size_t)snprintf(msg, sizeof msg,
				    "One or more records have been rejected due to %" PRId32 " record errors in total, and "
				    "only showing the first three errors at most: [", pe->n);
	for (int32_t i = 0; i < kept && i < RECORD_ERRORS_SHOWN && n < sizeof msg; i++) {
		record_error_text(text, sizeof text, op, pe, &pe->e[i]);
		n += (size_t)snprintf(msg + n, sizeof msg - n, "%sRecordError(batchIndex=%" PRId32 ", message='%s')",
				      i ? ", " : "", pe->e[i].index, text);
	}
	if (n < sizeof msg)
		snprintf(msg + n, sizeof msg - n, "]");
	kwr_cstr(w, flex, msg);
}

static void produce_finish(struct req *r)
{
	if (r->no_response) {
		r->done = true;
		sluice_conn_response_ready(r);
		return;
	}
	struct produce_state *ps = r->api;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_array(w, flex, topics_answered(r));
	int32_t k = 0;
	for (int32_t t = 0; t < ps->ntopics; t++) {
		int32_t start = topic_ops_begin(r, w, t, &k);
		if (start < 0)
			continue;
		for (int32_t i = start; i < k; i++) {
			struct partop *op = &r->ops[i];
			kwr_i32(w, op->partition);
			kwr_i16(w, op->error);
			kwr_i64(w, op->error ? -1 : op->base_offset);
			if (v >= 2) /* LogAppendTimeMs: -1 for CreateTime topics */
				kwr_i64(w, op->error || op->timestamp <= 0 ? -1 : op->timestamp);
			if (v >= 5)
				kwr_i64(w, op->error ? -1 : op->log_start);
			if (v >= 8)
				produce_write_errors(w, flex, op);
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 1)
		kwr_i32(w, 0);
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
}

/* ---- Fetch (1) ---------------------------------------------------------------- */

struct fetch_state {
	int32_t max_wait_ms, min_bytes, max_bytes;
	int32_t ntopics;
	bool final;
	/* What the request's reads may still take, shared by its ops on every
	 * storage core (atomic): a Fetch naming many partitions, or one
	 * partition many times, reads about MaxBytes, not each partition's
	 * limit over again. Reset at each issue. */
	int64_t read_budget;
};

static void fetch_issue(struct req *r)
{
	struct fetch_state *fs = r->api;
	for (int32_t i = 0; i < r->nops; i++) {
		struct partop *op = &r->ops[i];
		free(op->rdata);
		op->rdata = NULL;
		op->rlen = 0;
		if (op->local)
			continue;
		op->error = 0;
		op->watch = !fs->final && fs->max_wait_ms > 0 && fs->min_bytes > 0;
		op->read_budget = &fs->read_budget;
	}
	__atomic_store_n(&fs->read_budget, (int64_t)fs->max_bytes, __ATOMIC_RELAXED);
	dispatch_ops(r);
}

static bool fetch_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct fetch_state *fs = calloc(1, sizeof *fs);
	if (!fs)
		return false;
	r->api = fs;
	(void)krd_i32(rd); /* ReplicaId */
	fs->max_wait_ms = krd_i32(rd);
	fs->min_bytes = krd_i32(rd);
	fs->max_bytes = krd_i32(rd);
	(void)krd_i8(rd); /* IsolationLevel: no transactions, so LSO == HW */
	if (v >= 7) {
		(void)krd_i32(rd); /* SessionId: sessions are not kept; we answer 0 */
		(void)krd_i32(rd);
	}
	struct krd scan = *rd;
	int32_t ntopics = krd_array(&scan, flex, 2), total = 0;
	for (int32_t t = 0; t < ntopics && !scan.err; t++) {
		(void)krd_string(&scan, flex);
		int32_t np = krd_array(&scan, flex, 16);
		for (int32_t p = 0; p < np && !scan.err; p++) {
			krd_skip(&scan, 4 + (v >= 9 ? 4 : 0) + 8 + (v >= 12 ? 4 : 0) + (v >= 5 ? 8 : 0) + 4);
			if (flex)
				krd_tags_skip(&scan);
			total++;
		}
		if (flex)
			krd_tags_skip(&scan);
	}
	if (scan.err || total > SLUICE_REQ_PARTITIONS_MAX) {
		*rd = scan;
		return false;
	}
	if (total > 0 && !ops_alloc(r, total))
		return false;
	fs->ntopics = ntopics;
	if (fs->max_bytes <= 0 || fs->max_bytes > r->nc->b->cfg.fetch_max_bytes)
		fs->max_bytes = r->nc->b->cfg.fetch_max_bytes;
	(void)krd_array(rd, flex, 2);
	int32_t k = 0;
	for (int32_t t = 0; t < ntopics; t++) {
		struct kstr name = krd_string(rd, flex);
		int32_t np = krd_array(rd, flex, 16);
		for (int32_t p = 0; p < np; p++) {
			struct partop *op = &r->ops[k++];
			op->kind = PARTOP_READ;
			op->tindex = t;
			op->partition = krd_i32(rd);
			if (v >= 9)
				(void)krd_i32(rd);
			op->offset = krd_i64(rd);
			if (v >= 12)
				(void)krd_i32(rd);
			if (v >= 5)
				(void)krd_i64(rd);
			int32_t pmax = krd_i32(rd);
			if (flex)
				krd_tags_skip(rd);
			op->max_bytes = pmax < fs->max_bytes ? pmax : fs->max_bytes;
			if (op->max_bytes < 0)
				op->max_bytes = 0;
			op->min_one = true;
			op->high_watermark = op->log_start = -1;
			op_resolve(r, op, name);
		}
		if (flex)
			krd_tags_skip(rd);
	}
	if (v >= 7) { /* ForgottenTopicsData */
		int32_t nf = krd_array(rd, flex, 2);
		for (int32_t i = 0; i < nf && !rd->err; i++) {
			(void)krd_string(rd, flex);
			int32_t np = krd_array(rd, flex, 4);
			krd_skip(rd, (size_t)(np > 0 ? np : 0) * 4);
			if (flex)
				krd_tags_skip(rd);
		}
	}
	if (v >= 11)
		(void)krd_string(rd, flex); /* RackId */
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	r->deadline_ms = sluice_now_ms() + (fs->max_wait_ms > 0 ? fs->max_wait_ms : 0);
	/* What the connection must budget for this fetch: the reads (MaxBytes,
	 * the shared read budget), then the response (the data again, and its
	 * framing). */
	r->resp_bytes_max = 2 * (int64_t)fs->max_bytes + (int64_t)r->nops * 128 + 256;
	fetch_issue(r);
	return true;
}

static void park(struct req *r)
{
	struct proto_state *ps = r->nc->state;
	/* What was read is too little and is read again when the fetch is
	 * retried: free it, so a waiting fetch holds only its frame. */
	for (int32_t i = 0; i < r->nops; i++) {
		free(r->ops[i].rdata);
		r->ops[i].rdata = NULL;
		r->ops[i].rlen = 0;
	}
	sluice_conn_request_parked(r, true);
	r->parked = true;
	r->park_next = ps->parked_head;
	ps->parked_head = r;
	ps->parked_n++;
}

void sluice_proto_retry_parked(struct netcore *nc, int64_t now_ms, bool all)
{
	struct proto_state *ps = nc->state;
	struct req **pp = &ps->parked_head;
	while (*pp) {
		struct req *r = *pp;
		bool expired = now_ms >= r->deadline_ms;
		if (all || expired || r->conn->closing) {
			*pp = r->park_next;
			ps->parked_n--;
			r->parked = false;
			if (r->conn->closing) {
				/* Nobody will read the answer: drop the request (this
				 * may free the connection; r is off the list already). */
				r->done = true;
				r->no_response = true;
				sluice_conn_response_ready(r);
				continue;
			}
			((struct fetch_state *)r->api)->final = expired;
			sluice_conn_request_parked(r, false);
			fetch_issue(r);
			continue;
		}
		pp = &r->park_next;
	}
}

int64_t sluice_proto_next_deadline(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	int64_t d = INT64_MAX;
	for (struct req *r = ps->parked_head; r; r = r->park_next)
		if (r->deadline_ms < d)
			d = r->deadline_ms;
	return d;
}

static void fetch_finish(struct req *r)
{
	struct fetch_state *fs = r->api;
	if (r->conn->closing) {
		/* The client is gone: build nothing, let the transport drop it. */
		r->done = true;
		r->no_response = true;
		sluice_conn_response_ready(r);
		return;
	}
	int64_t bytes = 0;
	bool errors = false;
	for (int32_t i = 0; i < r->nops; i++) {
		bytes += r->ops[i].rlen;
		errors |= r->ops[i].error != 0;
	}
	if (!fs->final && !errors && bytes < fs->min_bytes && sluice_now_ms() < r->deadline_ms) {
		park(r);
		return;
	}
	bool flex = r->flexible;
	int16_t v = r->api_version;
	resp_begin(r);
	struct kwr *w = &r->out;
	/* One allocation for the whole answer, not a chain of reallocations
	 * (each a copy, and page faults on fresh memory, for a response of
	 * megabytes): the records plus a generous bound on the framing. */
	size_t at = w->len;
	if (kwr_reserve(w, (size_t)bytes + (size_t)r->nops * 128 + 256))
		w->len = at;
	kwr_i32(w, 0); /* ThrottleTimeMs */
	if (v >= 7) {
		kwr_i16(w, KERR_NONE);
		kwr_i32(w, 0); /* SessionId: no incremental sessions */
	}
	kwr_array(w, flex, topics_answered(r));
	int64_t budget = fs->max_bytes;
	bool any = false;
	int32_t k = 0;
	for (int32_t t = 0; t < fs->ntopics; t++) {
		int32_t start = topic_ops_begin(r, w, t, &k);
		if (start < 0)
			continue;
		for (int32_t i = start; i < k; i++) {
			struct partop *op = &r->ops[i];
			int32_t n = op->rlen;
			/* Whole stored batches only; past the request's byte budget a
			 * partition answers empty and the client asks again. */
			if (n > budget && any)
				n = 0;
			if (n > 0) {
				budget -= n;
				any = true;
			}
			kwr_i32(w, op->partition);
			kwr_i16(w, op->error);
			kwr_i64(w, op->error == KERR_UNKNOWN_TOPIC_OR_PARTITION ? -1 : op->high_watermark);
			kwr_i64(w, op->error == KERR_UNKNOWN_TOPIC_OR_PARTITION ? -1 : op->high_watermark); /* LSO */
			if (v >= 5)
				kwr_i64(w, op->error == KERR_UNKNOWN_TOPIC_OR_PARTITION ? -1 : op->log_start);
			kwr_array(w, flex, flex ? 0 : 0); /* AbortedTransactions: none */
			if (v >= 11)
				kwr_i32(w, -1); /* PreferredReadReplica */
			kwr_bytes(w, flex, n > 0 ? op->rdata : (const uint8_t *)"", n > 0 ? n : 0);
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	/* The records are in the response now: free the reads before it waits
	 * to be sent (it may wait long for a slow client). */
	for (int32_t i = 0; i < r->nops; i++) {
		free(r->ops[i].rdata);
		r->ops[i].rdata = NULL;
	}
	resp_end(r);
}

/* ---- ListOffsets (2) ------------------------------------------------------------- */

static bool list_offsets_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	(void)krd_i32(rd); /* ReplicaId */
	if (v >= 2)
		(void)krd_i8(rd);
	struct krd scan = *rd;
	int32_t ntopics = krd_array(&scan, flex, 2), total = 0;
	for (int32_t t = 0; t < ntopics && !scan.err; t++) {
		(void)krd_string(&scan, flex);
		int32_t np = krd_array(&scan, flex, 12);
		for (int32_t p = 0; p < np && !scan.err; p++) {
			krd_skip(&scan, 4 + (v >= 4 ? 4 : 0) + 8);
			if (flex)
				krd_tags_skip(&scan);
			total++;
		}
		if (flex)
			krd_tags_skip(&scan);
	}
	if (scan.err || total > SLUICE_REQ_PARTITIONS_MAX) {
		*rd = scan;
		return false;
	}
	if (total > 0 && !ops_alloc(r, total))
		return false;
	int32_t *nt = malloc(sizeof *nt);
	if (!nt)
		return false;
	*nt = ntopics;
	r->api = nt;
	(void)krd_array(rd, flex, 2);
	int32_t k = 0;
	for (int32_t t = 0; t < ntopics; t++) {
		struct kstr name = krd_string(rd, flex);
		int32_t np = krd_array(rd, flex, 12);
		for (int32_t p = 0; p < np; p++) {
			struct partop *op = &r->ops[k++];
			op->kind = PARTOP_LIST_OFFSETS;
			op->tindex = t;
			op->partition = krd_i32(rd);
			if (v >= 4)
				(void)krd_i32(rd);
			op->offset = krd_i64(rd);
			if (flex)
				krd_tags_skip(rd);
			op_resolve(r, op, name);
		}
		if (flex)
			krd_tags_skip(rd);
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	dispatch_ops(r);
	return true;
}

static void list_offsets_finish(struct req *r)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t ntopics = *(int32_t *)r->api;
	resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 2)
		kwr_i32(w, 0);
	kwr_array(w, flex, topics_answered(r));
	int32_t k = 0;
	for (int32_t t = 0; t < ntopics; t++) {
		int32_t start = topic_ops_begin(r, w, t, &k);
		if (start < 0)
			continue;
		for (int32_t i = start; i < k; i++) {
			struct partop *op = &r->ops[i];
			kwr_i32(w, op->partition);
			kwr_i16(w, op->error);
			kwr_i64(w, op->error ? -1 : op->timestamp);
			kwr_i64(w, op->error ? -1 : op->base_offset);
			if (v >= 4)
				kwr_i32(w, op->error || op->base_offset < 0 ? -1 : 0);
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
}

/* ---- CreateTopics (19) -------------------------------------------------------------- */

/* Duplicate names in one request: sorted once, so many topics cost n log n. */
struct name_ref {
	const char *ptr;
	int32_t len;
	int32_t idx;
};

static int cmp_name_ref(const void *a, const void *b)
{
	const struct name_ref *x = a, *y = b;
	int32_t m = x->len < y->len ? x->len : y->len;
	int c = m > 0 ? memcmp(x->ptr, y->ptr, (size_t)m) : 0;
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->idx - y->idx;
}

/* Marks dup[i] for every entry whose name an earlier entry already used. */
static bool find_duplicates(const struct kstr *names, int32_t n, bool *dup)
{
	struct name_ref *refs = n > 0 ? malloc((size_t)n * sizeof *refs) : NULL;
	if (n > 0 && !refs)
		return false;
	int32_t k = 0;
	for (int32_t i = 0; i < n; i++)
		if (names[i].ptr)
			refs[k++] = (struct name_ref){names[i].ptr, names[i].len, i};
	if (k > 1)
		qsort(refs, (size_t)k, sizeof *refs, cmp_name_ref);
	for (int32_t i = 1; i < k; i++)
		if (refs[i].len == refs[i - 1].len &&
		    (refs[i].len == 0 || memcmp(refs[i].ptr, refs[i - 1].ptr, (size_t)refs[i].len) == 0))
			dup[refs[i].idx] = true;
	free(refs);
	return true;
}

#define CREATE_TOPICS_PER_REQUEST_MAX 100000

static bool create_topics_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct krd scan = *rd;
	/* smallest topic entry: empty name, counts, empty arrays (and tags) */
	size_t topic_min = flex ? 10 : 16;
	int32_t n = krd_array(&scan, flex, topic_min);
	if (scan.err || n > CREATE_TOPICS_PER_REQUEST_MAX)
		return *rd = scan, false;
	/* Decode everything first (the request is all-or-nothing on syntax).
	 * Configs stay in the frame and are decoded again per topic. */
	struct ct {
		struct kstr name;
		int32_t partitions;
		int16_t rf;
		int16_t err;
		int32_t cfg_n;
		const uint8_t *cfg_at;
		uint8_t id[16];
		int32_t parts;
		bool created; /* staged in this request's metadata batch */
		char msg[200];
	} *cts = n > 0 ? calloc((size_t)n, sizeof *cts) : NULL;
	if (n > 0 && !cts)
		return false;
	r->api = cts;
	(void)krd_array(rd, flex, topic_min);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		struct kstr name = krd_string(rd, flex);
		cts[i].name = name;
		cts[i].partitions = krd_i32(rd);
		cts[i].rf = krd_i16(rd);
		int32_t na = krd_array(rd, flex, flex ? 6 : 8);
		for (int32_t a = 0; a < na && !rd->err; a++) {
			(void)krd_i32(rd);
			int32_t nb = krd_array(rd, flex, 4);
			for (int32_t b = 0; b < nb && !rd->err; b++)
				if (krd_i32(rd) != r->nc->b->cfg.node_id && !cts[i].err) {
					cts[i].err = KERR_INVALID_REPLICA_ASSIGNMENT;
					snprintf(cts[i].msg, sizeof cts[i].msg, "Replica assignment names a broker that does not exist.");
				}
			if (flex)
				krd_tags_skip(rd);
		}
		if (na > 0 && !cts[i].err) {
			if (cts[i].partitions != -1 || cts[i].rf != -1) {
				cts[i].err = KERR_INVALID_REQUEST;
				snprintf(cts[i].msg, sizeof cts[i].msg,
					 "Both numPartitions or replicationFactor and replicasAssignments were set.");
			}
			cts[i].partitions = na;
			cts[i].rf = -1;
		}
		cts[i].cfg_at = rd->p;
		int32_t nc = krd_array(rd, flex, 3);
		cts[i].cfg_n = nc;
		for (int32_t c = 0; c < nc && !rd->err; c++) {
			struct kstr key = krd_string(rd, flex), val = krd_string(rd, flex);
			if (flex)
				krd_tags_skip(rd);
			if (cts[i].err || !key.ptr)
				continue;
			if (c >= SLUICE_TOPIC_CONFIGS_MAX || key.len >= SLUICE_TOPIC_CONFIG_KEY_MAX ||
			    (val.ptr && val.len >= SLUICE_TOPIC_CONFIG_VALUE_MAX)) {
				cts[i].err = KERR_INVALID_CONFIG;
				snprintf(cts[i].msg, sizeof cts[i].msg, "Too many or too long topic configs.");
			}
		}
		if (flex)
			krd_tags_skip(rd);
	}
	(void)krd_i32(rd); /* timeoutMs */
	bool validate_only = v >= 1 ? krd_bool(rd) : false;
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	struct kstr *names = n > 0 ? malloc((size_t)n * sizeof *names) : NULL;
	bool *dup = n > 0 ? calloc((size_t)n, sizeof *dup) : NULL;
	if (n > 0 && (!names || !dup)) {
		free(names);
		free(dup);
		return false;
	}
	for (int32_t i = 0; i < n; i++)
		names[i] = cts[i].name.ptr ? cts[i].name : (struct kstr){"", 0};
	bool ok = find_duplicates(names, n, dup);
	free(names);
	if (!ok) {
		free(dup);
		return false;
	}
	struct sluice_topic_spec *spec = malloc(sizeof *spec);
	if (!spec) {
		free(dup);
		return false;
	}
	/* One metadata batch for the whole request: one journal append and one
	 * fsync, however many topics it creates. */
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	if (!validate_only && n > 0)
		mo->batch_begin(ms);
	for (int32_t i = 0; i < n; i++) {
		if (cts[i].err)
			continue;
		if (dup[i]) {
			cts[i].err = KERR_INVALID_REQUEST;
			snprintf(cts[i].msg, sizeof cts[i].msg, "Create topics request from client contains a duplicate topic.");
			continue;
		}
		memset(spec, 0, sizeof *spec);
		spec->name = cts[i].name.ptr ? cts[i].name.ptr : "";
		spec->name_len = cts[i].name.ptr ? (size_t)cts[i].name.len : 0;
		spec->partitions = cts[i].partitions;
		spec->replication_factor = cts[i].rf;
		struct krd cr;
		krd_init(&cr, cts[i].cfg_at, (size_t)(rd->end - cts[i].cfg_at));
		(void)krd_array(&cr, flex, 3);
		for (int32_t c = 0; c < cts[i].cfg_n && c < SLUICE_TOPIC_CONFIGS_MAX && !cr.err; c++) {
			struct kstr key = krd_string(&cr, flex), val = krd_string(&cr, flex);
			if (flex)
				krd_tags_skip(&cr);
			if (!key.ptr)
				continue;
			struct sluice_topic_config *tc = &spec->configs[spec->config_n++];
			memcpy(tc->key, key.ptr, (size_t)key.len);
			if (val.ptr)
				memcpy(tc->value, val.ptr, (size_t)val.len);
		}
		struct sluice_topic out;
		cts[i].err = mo->create_topic(ms, spec, validate_only, cts[i].msg, sizeof cts[i].msg, &out);
		if (!cts[i].err) {
			memcpy(cts[i].id, out.id, 16);
			cts[i].parts = out.partitions;
			cts[i].created = !validate_only;
		}
	}
	if (!validate_only && n > 0) {
		char msg[200];
		int16_t e = mo->batch_commit(ms, msg, sizeof msg);
		for (int32_t i = 0; e && i < n; i++)
			if (cts[i].created) {
				cts[i].err = e;
				snprintf(cts[i].msg, sizeof cts[i].msg, "%s", msg);
			}
	}
	free(dup);
	resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 2)
		kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		kwr_string(w, flex, cts[i].name.ptr ? cts[i].name.ptr : "", cts[i].name.ptr ? cts[i].name.len : 0);
		if (v >= 7)
			kwr_uuid(w, cts[i].id);
		kwr_i16(w, cts[i].err);
		if (v >= 1)
			kwr_cstr(w, flex, cts[i].err ? cts[i].msg : NULL);
		if (v >= 5) {
			kwr_i32(w, cts[i].err ? -1 : cts[i].parts);
			kwr_i16(w, (int16_t)(cts[i].err ? -1 : 1));
			if (cts[i].err)
				kwr_array(w, flex, -1);
			else {
				/* echo the configs as given (decoded again from the frame) */
				struct krd cr;
				krd_init(&cr, cts[i].cfg_at, (size_t)(rd->end - cts[i].cfg_at));
				int32_t nc = krd_array(&cr, flex, 3);
				kwr_array(w, flex, nc > 0 ? nc : 0);
				for (int32_t c = 0; c < nc && !cr.err; c++) {
					struct kstr key = krd_string(&cr, flex), val = krd_string(&cr, flex);
					if (flex)
						krd_tags_skip(&cr);
					kwr_string(w, flex, key.ptr ? key.ptr : "", key.ptr ? key.len : 0);
					kwr_string(w, flex, val.ptr, val.len);
					kwr_bool(w, false);
					kwr_i8(w, 1); /* DYNAMIC_TOPIC_CONFIG */
					kwr_bool(w, false);
					kwr_tags_empty(w);
				}
			}
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	free(spec);
	resp_end(r);
	return true;
}

/* ---- DeleteTopics (20) -------------------------------------------------------------- */

struct dt {
	struct kstr name;
	uint8_t id[16];
	int16_t err;
	int32_t parts; /* partitions whose directories the storage cores rename away */
	char msg[128];
	char deleted_name[SLUICE_TOPIC_NAME_MAX + 1];
};

/* One allocation (r->api) holds the whole state, so every exit path,
 * including a decode error, frees it with the request. */
struct dt_state {
	int32_t n;
	struct dt topics[];
};

static bool delete_topics_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = krd_array(rd, flex, v >= 6 ? 17 : 1);
	if (rd->err)
		return false;
	int32_t cnt = n > 0 ? n : 0;
	struct dt_state *ds = calloc(1, sizeof *ds + (size_t)cnt * sizeof ds->topics[0]);
	if (!ds)
		return false;
	r->api = ds;
	ds->n = cnt;
	for (int32_t i = 0; i < ds->n && !rd->err; i++) {
		if (v >= 6) {
			ds->topics[i].name = krd_string(rd, flex);
			krd_uuid(rd, ds->topics[i].id);
			if (flex)
				krd_tags_skip(rd);
		} else
			ds->topics[i].name = krd_string(rd, flex);
	}
	(void)krd_i32(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	/* Delete in the metadata, then have the storage cores drop the logs. */
	int32_t total_parts = 0;
	struct sluice_topic *gone = calloc((size_t)(ds->n ? ds->n : 1), sizeof *gone);
	if (!gone)
		return false;
	/* One metadata batch: one journal append and one fsync for all topics.
	 * The deletion leaves a tombstone with the topic id, so that directories
	 * a crash leaves behind are provably the deleted topic's. */
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	mo->batch_begin(ms);
	for (int32_t i = 0; i < ds->n; i++) {
		struct dt *d = &ds->topics[i];
		if (!r->nc->b->cfg.delete_topic_enable) {
			d->err = KERR_TOPIC_DELETION_DISABLED;
			snprintf(d->msg, sizeof d->msg, "Topic deletion is disabled.");
			continue;
		}
		if (!d->name.ptr) {
			const struct sluice_topic *t = find_by_id(snap(r), d->id);
			if (!t) {
				d->err = KERR_UNKNOWN_TOPIC_ID;
				snprintf(d->msg, sizeof d->msg, "This server does not host this topic ID.");
				continue;
			}
			snprintf(d->deleted_name, sizeof d->deleted_name, "%s", t->name);
		} else if (d->name.len > SLUICE_TOPIC_NAME_MAX) {
			/* never truncate: that would name another topic */
			d->err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
			snprintf(d->msg, sizeof d->msg, "This server does not host this topic-partition.");
			continue;
		} else
			snprintf(d->deleted_name, sizeof d->deleted_name, "%.*s", d->name.len, d->name.ptr);
		d->err = mo->delete_topic(ms, d->deleted_name, strlen(d->deleted_name), &gone[i], d->msg, sizeof d->msg);
		if (!d->err) {
			memcpy(d->id, gone[i].id, 16);
			d->parts = gone[i].partitions;
		}
	}
	char cmsg[128];
	int16_t ce = mo->batch_commit(ms, cmsg, sizeof cmsg);
	for (int32_t i = 0; i < ds->n; i++) {
		struct dt *d = &ds->topics[i];
		if (!d->err && ce) {
			d->err = ce;
			d->parts = 0;
			snprintf(d->msg, sizeof d->msg, "%s", cmsg);
		}
		total_parts += d->err ? 0 : d->parts;
	}
	if (total_parts > 0 && ops_alloc(r, total_parts)) {
		int32_t k = 0;
		for (int32_t i = 0; i < ds->n; i++) {
			if (ds->topics[i].err)
				continue;
			for (int32_t p = 0; p < ds->topics[i].parts; p++) {
				struct partop *op = &r->ops[k++];
				op->kind = PARTOP_DELETE;
				op->topic = ds->topics[i].deleted_name;
				op->partition = p;
				memcpy(op->topic_id, ds->topics[i].id, 16);
			}
		}
	}
	free(gone);
	dispatch_ops(r);
	return true;
}

static void delete_topics_finish(struct req *r)
{
	struct dt_state *ds = r->api;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	/* A topic whose every partition directory was renamed away (or never
	 * existed) needs its tombstone no more. The ops are in topic order. */
	int32_t k = 0;
	for (int32_t i = 0; i < ds->n && r->nops > 0; i++) {
		struct dt *d = &ds->topics[i];
		if (d->err)
			continue;
		bool all = true;
		for (int32_t p = 0; p < d->parts; p++, k++) {
			assert(k < r->nops && r->ops[k].kind == PARTOP_DELETE);
			all &= r->ops[k].error == 0;
		}
		if (all)
			r->nc->b->meta.ops->forget_deleted(r->nc->b->meta.self, d->id);
	}
	resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 1)
		kwr_i32(w, 0);
	kwr_array(w, flex, ds->n);
	for (int32_t i = 0; i < ds->n; i++) {
		struct dt *d = &ds->topics[i];
		if (d->name.ptr)
			kwr_string(w, flex, d->name.ptr, d->name.len);
		else
			kwr_cstr(w, flex, d->deleted_name[0] ? d->deleted_name : NULL);
		if (v >= 6)
			kwr_uuid(w, d->id);
		kwr_i16(w, d->err);
		if (v >= 5)
			kwr_cstr(w, flex, d->err ? d->msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
}

/* ---- DescribeConfigs (32) ------------------------------------------------------------- */

enum { SRC_DYNAMIC_TOPIC = 1, SRC_STATIC_BROKER = 4, SRC_DEFAULT = 5 };
enum { CT_BOOLEAN = 1, CT_STRING = 2, CT_INT = 3, CT_LONG = 5, CT_DOUBLE = 6, CT_LIST = 7 };

/* Topic config keys with the broker setting that supplies their default. */
struct topic_default {
	const char *key;
	int8_t type;
	const char *fixed; /* NULL: computed from the broker config */
};
static const struct topic_default topic_defaults[] = {
	{"cleanup.policy", CT_LIST, "delete"},
	{"compression.type", CT_STRING, "producer"},
	{"delete.retention.ms", CT_LONG, "86400000"},
	{"file.delete.delay.ms", CT_LONG, "60000"},
	{"flush.messages", CT_LONG, NULL},
	{"flush.ms", CT_LONG, NULL},
	{"index.interval.bytes", CT_INT, NULL},
	{"max.compaction.lag.ms", CT_LONG, NULL},
	{"max.message.bytes", CT_INT, NULL},
	{"message.timestamp.type", CT_STRING, NULL},
	{"min.cleanable.dirty.ratio", CT_DOUBLE, NULL},
	{"min.compaction.lag.ms", CT_LONG, NULL},
	{"min.insync.replicas", CT_INT, NULL},
	{"preallocate", CT_BOOLEAN, "false"},
	{"retention.bytes", CT_LONG, NULL},
	{"retention.ms", CT_LONG, NULL},
	{"segment.bytes", CT_INT, NULL},
	{"segment.ms", CT_LONG, NULL},
	{"unclean.leader.election.enable", CT_BOOLEAN, "false"},
};

static void topic_default_value(const struct sluice_config *c, const char *key, char *out, size_t len)
{
	if (!strcmp(key, "message.timestamp.type"))
		snprintf(out, len, "%s", c->message_timestamp_type);
	else if (!strcmp(key, "min.cleanable.dirty.ratio"))
		snprintf(out, len, "%s", c->log_cleaner_min_cleanable_ratio_s);
	else if (!strcmp(key, "min.compaction.lag.ms"))
		snprintf(out, len, "%" PRId64, c->log_cleaner_min_compaction_lag_ms);
	else if (!strcmp(key, "max.compaction.lag.ms"))
		snprintf(out, len, "%" PRId64, c->log_cleaner_max_compaction_lag_ms);
	else if (!strcmp(key, "flush.messages"))
		snprintf(out, len, "%" PRId64, c->log_flush_interval_messages);
	else if (!strcmp(key, "flush.ms"))
		snprintf(out, len, "%" PRId64, c->log_flush_interval_ms < 0 ? INT64_MAX : c->log_flush_interval_ms);
	else if (!strcmp(key, "index.interval.bytes"))
		snprintf(out, len, "%d", c->log_index_interval_bytes);
	else if (!strcmp(key, "max.message.bytes"))
		snprintf(out, len, "%d", c->message_max_bytes);
	else if (!strcmp(key, "min.insync.replicas"))
		snprintf(out, len, "%d", c->min_insync_replicas);
	else if (!strcmp(key, "retention.bytes"))
		snprintf(out, len, "%" PRId64, c->log_retention_bytes);
	else if (!strcmp(key, "retention.ms"))
		snprintf(out, len, "%" PRId64, c->log_retention_ms);
	else if (!strcmp(key, "segment.bytes"))
		snprintf(out, len, "%" PRId64, c->log_segment_bytes);
	else if (!strcmp(key, "segment.ms"))
		snprintf(out, len, "%" PRId64, c->log_roll_hours * 3600000);
	else
		out[0] = '\0';
}

static bool key_wanted(struct kstr *keys, int32_t nkeys, const char *name)
{
	if (nkeys < 0)
		return true;
	for (int32_t i = 0; i < nkeys; i++)
		if (kstr_eq(keys[i], name))
			return true;
	return false;
}

static void dc_entry(struct req *r, const char *name, const char *value, bool read_only, int8_t source,
		     int8_t type, bool synonyms)
{
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	kwr_cstr(w, flex, name);
	kwr_cstr(w, flex, value);
	kwr_bool(w, read_only);
	if (v == 0)
		kwr_bool(w, source == SRC_DEFAULT);
	else
		kwr_i8(w, source);
	kwr_bool(w, false); /* IsSensitive */
	if (v >= 1) {
		if (synonyms) {
			kwr_array(w, flex, 1);
			kwr_cstr(w, flex, name);
			kwr_cstr(w, flex, value);
			kwr_i8(w, source);
			if (flex)
				kwr_tags_empty(w);
		} else
			kwr_array(w, flex, 0);
	}
	if (v >= 3) {
		kwr_i8(w, type);
		kwr_cstr(w, flex, NULL);
	}
	if (flex)
		kwr_tags_empty(w);
}

static bool describe_configs_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = krd_array(rd, flex, 4);
	if (rd->err)
		return false;
	struct dres {
		int8_t type;
		struct kstr name;
		int32_t nkeys;
		struct kstr *keys;
	} *res = n > 0 ? calloc((size_t)n, sizeof *res) : NULL;
	if (n > 0 && !res)
		return false;
	r->api = res;
	struct kstr *allkeys = NULL;
	size_t allkeys_n = 0;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		res[i].type = krd_i8(rd);
		res[i].name = krd_string(rd, flex);
		res[i].nkeys = krd_array(rd, flex, 1);
		if (res[i].nkeys > 0) {
			struct kstr *nk = realloc(allkeys, (allkeys_n + (size_t)res[i].nkeys) * sizeof *nk);
			if (!nk) {
				free(allkeys);
				return false;
			}
			allkeys = nk;
			for (int32_t k = 0; k < res[i].nkeys && !rd->err; k++)
				allkeys[allkeys_n + (size_t)k] = krd_string(rd, flex);
			allkeys_n += (size_t)res[i].nkeys;
		}
		if (flex)
			krd_tags_skip(rd);
	}
	bool synonyms = v >= 1 ? krd_bool(rd) : false;
	if (v >= 3)
		(void)krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err) {
		free(allkeys);
		return false;
	}
	size_t kpos = 0;
	for (int32_t i = 0; i < n; i++) {
		if (res[i].nkeys > 0) {
			res[i].keys = allkeys + kpos;
			kpos += (size_t)res[i].nkeys;
		}
	}
	const struct sluice_config *cfg = &r->nc->b->cfg;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		struct dres *d = &res[i];
		const struct sluice_topic *t = NULL;
		int16_t err = KERR_NONE;
		const char *msg = NULL;
		char node[16];
		snprintf(node, sizeof node, "%d", cfg->node_id);
		if (d->type == 2) {
			t = d->name.ptr ? sluice_meta_find(snap(r), d->name.ptr, (size_t)d->name.len) : NULL;
			if (!t) {
				err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
				msg = "The topic does not exist.";
			}
		} else if (d->type == 4) {
			if (d->name.ptr && d->name.len > 0 && !kstr_eq(d->name, node)) {
				err = KERR_INVALID_REQUEST;
				msg = "Unexpected broker id";
			}
		} else if (d->type != 8) {
			err = KERR_INVALID_REQUEST;
			msg = "Unsupported resource type";
		}
		kwr_i16(w, err);
		kwr_cstr(w, flex, msg);
		kwr_i8(w, d->type);
		kwr_string(w, flex, d->name.ptr ? d->name.ptr : "", d->name.ptr ? d->name.len : 0);
		if (err) {
			kwr_array(w, flex, 0);
		} else if (d->type == 2) {
			int32_t count = 0;
			/* Count first so the array header has the right size. */
			for (size_t k = 0; k < sizeof topic_defaults / sizeof *topic_defaults; k++)
				count += key_wanted(d->keys, d->nkeys, topic_defaults[k].key);
			kwr_array(w, flex, count);
			for (size_t k = 0; k < sizeof topic_defaults / sizeof *topic_defaults; k++) {
				const struct topic_default *td = &topic_defaults[k];
				if (!key_wanted(d->keys, d->nkeys, td->key))
					continue;
				char val[SLUICE_TOPIC_CONFIG_VALUE_MAX];
				int8_t src = SRC_DEFAULT;
				if (td->fixed)
					snprintf(val, sizeof val, "%s", td->fixed);
				else
					topic_default_value(cfg, td->key, val, sizeof val);
				for (int32_t c = 0; c < t->config_n; c++)
					if (!strcmp(t->configs[c].key, td->key)) {
						snprintf(val, sizeof val, "%s", t->configs[c].value);
						src = SRC_DYNAMIC_TOPIC;
					}
				dc_entry(r, td->key, val, false, src, td->type, synonyms);
			}
		} else if (d->type == 8) {
			/* One logger today: every area follows the root level. */
			static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
			int lvl = __atomic_load_n(&sluice_log_level_current, __ATOMIC_RELAXED);
			bool want = key_wanted(d->keys, d->nkeys, "root");
			kwr_array(w, flex, want ? 1 : 0);
			if (want)
				dc_entry(r, "root", names[lvl], false, SRC_DEFAULT, CT_STRING, false);
		} else {
			int32_t count = 0;
			const char *name;
			char val[SLUICE_CONFIG_STRING_MAX];
			bool is_def;
			for (size_t k = 0; sluice_config_entry(cfg, k, &name, val, sizeof val, &is_def); k++)
				count += key_wanted(d->keys, d->nkeys, name);
			kwr_array(w, flex, count);
			for (size_t k = 0; sluice_config_entry(cfg, k, &name, val, sizeof val, &is_def); k++)
				if (key_wanted(d->keys, d->nkeys, name))
					dc_entry(r, name, val, true, is_def ? SRC_DEFAULT : SRC_STATIC_BROKER, CT_STRING,
						 synonyms);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	free(allkeys);
	resp_end(r);
	return true;
}

/* ---- FindCoordinator (10) ------------------------------------------------------ */

/* A single broker coordinates every group and transactional id itself. */
static bool find_coordinator_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	const struct sluice_config *cfg = &r->nc->b->cfg;
	struct kstr *keys = NULL;
	int32_t n = 0;
	if (v <= 3) {
		(void)krd_string(rd, flex);
		if (v >= 1)
			(void)krd_i8(rd);
	} else {
		(void)krd_i8(rd);
		n = krd_array(rd, flex, 1);
		if (n > 0 && !rd->err) {
			keys = calloc((size_t)n, sizeof *keys);
			if (!keys)
				return false;
			r->api = keys;
			for (int32_t i = 0; i < n && !rd->err; i++)
				keys[i] = krd_string(rd, flex);
		}
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	ensure_offsets_topic(r);
	resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 1)
		kwr_i32(w, 0);
	if (v <= 3) {
		kwr_i16(w, KERR_NONE);
		if (v >= 1)
			kwr_cstr(w, flex, NULL);
		kwr_i32(w, cfg->node_id);
		kwr_cstr(w, flex, cfg->advertised_host);
		kwr_i32(w, cfg->advertised_port);
	} else {
		kwr_array(w, flex, n > 0 ? n : 0);
		for (int32_t i = 0; i < n; i++) {
			kwr_string(w, flex, keys[i].ptr ? keys[i].ptr : "", keys[i].ptr ? keys[i].len : 0);
			kwr_i32(w, cfg->node_id);
			kwr_cstr(w, flex, cfg->advertised_host);
			kwr_i32(w, cfg->advertised_port);
			kwr_i16(w, KERR_NONE);
			kwr_cstr(w, flex, NULL);
			kwr_tags_empty(w);
		}
	}
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
	return true;
}

/* ---- InitProducerId (22) -------------------------------------------------------- */

/* Idempotent producers only: a fresh id at epoch 0, or, when the client
 * names its current id and epoch (v3+), the same id one epoch on. */
static bool init_producer_id_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct kstr txn = krd_string(rd, flex);
	(void)krd_i32(rd);
	int64_t pid = -1;
	int16_t epoch = -1;
	if (v >= 3) {
		pid = krd_i64(rd);
		epoch = krd_i16(rd);
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	int16_t err = KERR_NONE;
	if (txn.ptr) {
		err = KERR_INVALID_REQUEST; /* transactions are not supported yet */
		pid = -1;
		epoch = -1;
	} else if (pid >= 0 && epoch >= 0 && epoch < INT16_MAX - 1) {
		epoch++;
	} else {
		pid = r->nc->b->meta.ops->allocate_producer_id(r->nc->b->meta.self);
		epoch = 0;
		if (pid < 0) {
			err = KERR_KAFKA_STORAGE_ERROR;
			epoch = -1;
		}
	}
	resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_i16(&r->out, err);
	kwr_i64(&r->out, pid);
	kwr_i16(&r->out, epoch);
	if (flex)
		kwr_tags_empty(&r->out);
	resp_end(r);
	return true;
}

/* ---- CreatePartitions (37) ------------------------------------------------------- */

static bool create_partitions_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, 7);
	if (rd->err)
		return false;
	struct cp {
		struct kstr name;
		int32_t count;
		int16_t err;
		char msg[200];
	} *cps = n > 0 ? calloc((size_t)n, sizeof *cps) : NULL;
	if (n > 0 && !cps)
		return false;
	r->api = cps;
	int32_t node = r->nc->b->cfg.node_id;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		cps[i].name = krd_string(rd, flex);
		cps[i].count = krd_i32(rd);
		int32_t na = krd_array(rd, flex, 1);
		for (int32_t a = 0; a < na && !rd->err; a++) {
			int32_t nb = krd_array(rd, flex, 4);
			for (int32_t b = 0; b < nb && !rd->err; b++)
				if (krd_i32(rd) != node && !cps[i].err) {
					cps[i].err = KERR_INVALID_REPLICA_ASSIGNMENT;
					snprintf(cps[i].msg, sizeof cps[i].msg, "Replica assignment names a broker that does not exist.");
				}
			if (flex)
				krd_tags_skip(rd);
		}
		if (flex)
			krd_tags_skip(rd);
	}
	(void)krd_i32(rd);
	bool validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	struct kstr *names = n > 0 ? malloc((size_t)n * sizeof *names) : NULL;
	bool *dup = n > 0 ? calloc((size_t)n, sizeof *dup) : NULL;
	if (n > 0 && (!names || !dup)) {
		free(names);
		free(dup);
		return false;
	}
	for (int32_t i = 0; i < n; i++)
		names[i] = cps[i].name;
	bool ok = find_duplicates(names, n, dup);
	free(names);
	if (!ok) {
		free(dup);
		return false;
	}
	/* One metadata batch (one journal write and fsync) for the request. */
	r->nc->b->meta.ops->batch_begin(r->nc->b->meta.self);
	for (int32_t i = 0; i < n; i++) {
		if (cps[i].err)
			continue;
		if (dup[i]) {
			cps[i].err = KERR_INVALID_REQUEST;
			snprintf(cps[i].msg, sizeof cps[i].msg, "Duplicate topic in request.");
			continue;
		}
		if (!cps[i].name.ptr) {
			cps[i].err = KERR_INVALID_REQUEST;
			continue;
		}
		cps[i].err = r->nc->b->meta.ops->create_partitions(r->nc->b->meta.self, cps[i].name.ptr, (size_t)cps[i].name.len,
								   cps[i].count, validate_only, cps[i].msg, sizeof cps[i].msg);
		if (cps[i].err == KERR_UNKNOWN_TOPIC_OR_PARTITION)
			snprintf(cps[i].msg, sizeof cps[i].msg, "The topic '%.*s' does not exist.",
				 cps[i].name.len > 200 ? 200 : cps[i].name.len, cps[i].name.ptr);
	}
	char bmsg[200];
	int16_t be = r->nc->b->meta.ops->batch_commit(r->nc->b->meta.self, bmsg, sizeof bmsg);
	for (int32_t i = 0; be && i < n; i++)
		if (!cps[i].err) {
			cps[i].err = be;
			snprintf(cps[i].msg, sizeof cps[i].msg, "%s", bmsg);
		}
	free(dup);
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		kwr_string(w, flex, cps[i].name.ptr ? cps[i].name.ptr : "", cps[i].name.ptr ? cps[i].name.len : 0);
		kwr_i16(w, cps[i].err);
		kwr_cstr(w, flex, cps[i].err ? cps[i].msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
	return true;
}

/* ---- AlterConfigs (33) and IncrementalAlterConfigs (44) ------------------------------ */

enum { OP_SET = 0, OP_DELETE = 1, OP_APPEND = 2, OP_SUBTRACT = 3 };

static struct sluice_topic_config *cfg_find(struct sluice_topic_config *c, int32_t n, const char *key)
{
	for (int32_t i = 0; i < n; i++)
		if (!strcmp(c[i].key, key))
			return &c[i];
	return NULL;
}

/* Apply one incremental operation to a working copy of a topic's overrides. */
static int16_t cfg_apply(struct sluice_topic_config *c, int32_t *n, int8_t op, const char *key, const char *value,
			 char *msg, size_t msglen)
{
	struct sluice_topic_config *e = cfg_find(c, *n, key);
	if (op == OP_DELETE) {
		if (e) {
			*e = c[*n - 1];
			(*n)--;
		}
		return 0;
	}
	if (!value) {
		snprintf(msg, msglen, "Null value not supported for %s", key);
		return KERR_INVALID_REQUEST;
	}
	char merged[SLUICE_TOPIC_CONFIG_VALUE_MAX];
	if (op == OP_APPEND || op == OP_SUBTRACT) {
		if (strcmp(key, "cleanup.policy") != 0) {
			snprintf(msg, msglen, "Config value append or subtract is not allowed for config key %s", key);
			return KERR_INVALID_CONFIG;
		}
		bool has_del = false, has_comp = false;
		const char *curv = e ? e->value : "delete";
		has_del = strstr(curv, "delete") != NULL;
		has_comp = strstr(curv, "compact") != NULL;
		bool v_del = strstr(value, "delete") != NULL, v_comp = strstr(value, "compact") != NULL;
		if (op == OP_APPEND) {
			has_del |= v_del;
			has_comp |= v_comp;
		} else {
			has_del &= !v_del;
			has_comp &= !v_comp;
		}
		snprintf(merged, sizeof merged, "%s%s%s", has_comp ? "compact" : "", has_comp && has_del ? "," : "",
			 has_del ? "delete" : "");
		value = merged;
	} else if (op != OP_SET) {
		snprintf(msg, msglen, "Unknown config operation %d", op);
		return KERR_INVALID_REQUEST;
	}
	int16_t err = sluice_topic_config_check(key, value, msg, msglen);
	if (err)
		return err;
	if (strlen(key) >= SLUICE_TOPIC_CONFIG_KEY_MAX || strlen(value) >= SLUICE_TOPIC_CONFIG_VALUE_MAX) {
		snprintf(msg, msglen, "Config key or value too long");
		return KERR_INVALID_CONFIG;
	}
	if (!e) {
		if (*n >= SLUICE_TOPIC_CONFIGS_MAX) {
			snprintf(msg, msglen, "Too many topic config overrides");
			return KERR_INVALID_CONFIG;
		}
		e = &c[(*n)++];
		snprintf(e->key, sizeof e->key, "%s", key);
	}
	snprintf(e->value, sizeof e->value, "%s", value);
	return 0;
}

/* Broker loggers (resource type 8): levels change at run time. */
static int16_t logger_apply(const char *value, char *msg, size_t msglen)
{
	int lvl = value ? sluice_log_level_parse(value) : SLUICE_LOG_INFO;
	if (lvl < 0) {
		snprintf(msg, msglen, "Invalid log level %s", value);
		return KERR_INVALID_CONFIG;
	}
	sluice_log_set_level(lvl);
	SLOG_INFO("broker", "log level set to %s", value ? value : "INFO");
	return 0;
}

#define ALTER_CONFIGS_RESOURCES_MAX 10000

static bool alter_configs_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible, incremental = r->api_key == 44;
	int32_t n = krd_array(rd, flex, 4);
	/* Each resource gets a working copy of up to 32 overrides (10 KB):
	 * bound how many one request may name. */
	if (rd->err || n > ALTER_CONFIGS_RESOURCES_MAX)
		return false;
	struct ar {
		int8_t type;
		struct kstr name;
		int16_t err;
		char msg[256];
		int32_t cn;
		struct sluice_topic_config *c;
		bool logger;
		char level[16];
	} *ars = n > 0 ? calloc((size_t)n, sizeof *ars) : NULL;
	if (n > 0 && !ars)
		return false;
	r->api = ars;
	/* Decode first: one allocation holds every working copy. */
	struct sluice_topic_config *pool = n > 0 ? calloc((size_t)n * SLUICE_TOPIC_CONFIGS_MAX, sizeof *pool) : NULL;
	if (n > 0 && !pool)
		return false;
	char node[16];
	snprintf(node, sizeof node, "%d", r->nc->b->cfg.node_id);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		struct ar *a = &ars[i];
		a->type = krd_i8(rd);
		a->name = krd_string(rd, flex);
		a->c = pool + (size_t)i * SLUICE_TOPIC_CONFIGS_MAX;
		const struct sluice_topic *t = NULL;
		if (a->type == 2) {
			t = a->name.ptr ? sluice_meta_find(snap(r), a->name.ptr, (size_t)a->name.len) : NULL;
			if (!t) {
				a->err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
				snprintf(a->msg, sizeof a->msg, "The topic does not exist.");
			} else if (incremental) {
				a->cn = t->config_n;
				memcpy(a->c, t->configs, sizeof *t->configs * (size_t)t->config_n);
			}
		} else if (a->type == 8) {
			a->logger = true;
		} else if (a->type == 4) {
			a->err = KERR_INVALID_REQUEST;
			snprintf(a->msg, sizeof a->msg, "Broker configs are read-only in this release (set them in server.properties)");
		} else {
			a->err = KERR_INVALID_REQUEST;
			snprintf(a->msg, sizeof a->msg, "Unsupported resource type %d", a->type);
		}
		int32_t nc = krd_array(rd, flex, 3);
		for (int32_t k = 0; k < nc && !rd->err; k++) {
			struct kstr key = krd_string(rd, flex);
			int8_t op = incremental ? krd_i8(rd) : OP_SET;
			struct kstr val = krd_string(rd, flex);
			if (flex)
				krd_tags_skip(rd);
			if (a->err || rd->err || !key.ptr)
				continue;
			char kbuf[SLUICE_TOPIC_CONFIG_KEY_MAX], vbuf[SLUICE_TOPIC_CONFIG_VALUE_MAX];
			if (key.len >= (int32_t)sizeof kbuf || (val.ptr && val.len >= (int32_t)sizeof vbuf)) {
				a->err = KERR_INVALID_CONFIG;
				snprintf(a->msg, sizeof a->msg, "Config key or value too long");
				continue;
			}
			memcpy(kbuf, key.ptr, (size_t)key.len);
			kbuf[key.len] = '\0';
			if (val.ptr) {
				memcpy(vbuf, val.ptr, (size_t)val.len);
				vbuf[val.len] = '\0';
			}
			if (a->logger) {
				int lvl = val.ptr ? sluice_log_level_parse(vbuf) : SLUICE_LOG_INFO;
				if (lvl < 0) {
					a->err = KERR_INVALID_CONFIG;
					snprintf(a->msg, sizeof a->msg, "Invalid log level %.32s for logger %.64s", vbuf, kbuf);
				} else
					snprintf(a->level, sizeof a->level, "%.15s", val.ptr && op != OP_DELETE ? vbuf : "INFO");
				continue;
			}
			a->err = cfg_apply(a->c, &a->cn, op, kbuf, val.ptr ? vbuf : NULL, a->msg, sizeof a->msg);
		}
		if (flex)
			krd_tags_skip(rd);
	}
	bool validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err) {
		free(pool);
		return false;
	}
	r->nc->b->meta.ops->batch_begin(r->nc->b->meta.self); /* one journal write and fsync */
	for (int32_t i = 0; i < n; i++) {
		struct ar *a = &ars[i];
		if (a->err || validate_only)
			continue;
		if (a->logger) {
			if (a->level[0])
				a->err = logger_apply(a->level, a->msg, sizeof a->msg);
			continue;
		}
		a->err = r->nc->b->meta.ops->set_topic_configs(r->nc->b->meta.self, a->name.ptr, (size_t)a->name.len, a->c,
							       a->cn, false, a->msg, sizeof a->msg);
	}
	char bmsg[200];
	int16_t be = r->nc->b->meta.ops->batch_commit(r->nc->b->meta.self, bmsg, sizeof bmsg);
	for (int32_t i = 0; be && !validate_only && i < n; i++)
		if (!ars[i].err && !ars[i].logger) {
			ars[i].err = be;
			snprintf(ars[i].msg, sizeof ars[i].msg, "%s", bmsg);
		}
	free(pool);
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		kwr_i16(w, ars[i].err);
		kwr_cstr(w, flex, ars[i].err ? ars[i].msg : NULL);
		kwr_i8(w, ars[i].type);
		kwr_string(w, flex, ars[i].name.ptr ? ars[i].name.ptr : "", ars[i].name.ptr ? ars[i].name.len : 0);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
	return true;
}

/* ---- DeleteRecords (21) ------------------------------------------------------------ */

static bool delete_records_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	struct krd scan = *rd;
	int32_t ntopics = krd_array(&scan, flex, 2), total = 0;
	for (int32_t t = 0; t < ntopics && !scan.err; t++) {
		(void)krd_string(&scan, flex);
		int32_t np = krd_array(&scan, flex, 12);
		for (int32_t p = 0; p < np && !scan.err; p++) {
			krd_skip(&scan, 12);
			if (flex)
				krd_tags_skip(&scan);
			total++;
		}
		if (flex)
			krd_tags_skip(&scan);
	}
	if (scan.err || total > SLUICE_REQ_PARTITIONS_MAX) {
		*rd = scan;
		return false;
	}
	if (total > 0 && !ops_alloc(r, total))
		return false;
	int32_t *nt = malloc(sizeof *nt);
	if (!nt)
		return false;
	*nt = ntopics;
	r->api = nt;
	(void)krd_array(rd, flex, 2);
	int32_t k = 0;
	for (int32_t t = 0; t < ntopics; t++) {
		struct kstr name = krd_string(rd, flex);
		int32_t np = krd_array(rd, flex, 12);
		for (int32_t p = 0; p < np; p++) {
			struct partop *op = &r->ops[k++];
			op->kind = PARTOP_DELETE_RECORDS;
			op->tindex = t;
			op->partition = krd_i32(rd);
			op->offset = krd_i64(rd);
			if (flex)
				krd_tags_skip(rd);
			op_resolve(r, op, name);
			if (!op->local && op->offset < -1) {
				op->local = true;
				op->error = KERR_OFFSET_OUT_OF_RANGE;
			}
		}
		if (flex)
			krd_tags_skip(rd);
	}
	(void)krd_i32(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	dispatch_ops(r);
	return true;
}

static void delete_records_finish(struct req *r)
{
	bool flex = r->flexible;
	int32_t ntopics = *(int32_t *)r->api;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, topics_answered(r));
	int32_t k = 0;
	for (int32_t t = 0; t < ntopics; t++) {
		int32_t start = topic_ops_begin(r, w, t, &k);
		if (start < 0)
			continue;
		for (int32_t i = start; i < k; i++) {
			struct partop *op = &r->ops[i];
			kwr_i32(w, op->partition);
			kwr_i64(w, op->error ? -1 : op->log_start);
			kwr_i16(w, op->error);
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
}

/* ---- DescribeCluster (60) ------------------------------------------------------------ */

static bool describe_cluster_start(struct req *r, struct krd *rd)
{
	int16_t v = r->api_version;
	(void)krd_bool(rd);
	int8_t endpoint_type = v >= 1 ? krd_i8(rd) : 1;
	krd_tags_skip(rd);
	if (rd->err)
		return false;
	const struct sluice_config *cfg = &r->nc->b->cfg;
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	int16_t err = endpoint_type == 1 ? KERR_NONE : 114; /* UNSUPPORTED_ENDPOINT_TYPE */
	kwr_i16(w, err);
	kwr_cstr(w, true, err ? "Only broker endpoints are served" : NULL);
	if (v >= 1)
		kwr_i8(w, endpoint_type);
	kwr_cstr(w, true, cfg->cluster_id);
	kwr_i32(w, cfg->node_id);
	kwr_array(w, true, err ? 0 : 1);
	if (!err) {
		kwr_i32(w, cfg->node_id);
		kwr_cstr(w, true, cfg->advertised_host);
		kwr_i32(w, cfg->advertised_port);
		kwr_cstr(w, true, NULL);
		kwr_tags_empty(w);
	}
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
	resp_end(r);
	return true;
}

/* ---- consumer groups: routing to the coordinating storage core --------------------- */

/* As in Kafka, __consumer_offsets appears when groups are first used. */
static void ensure_offsets_topic(struct req *r)
{
	if (sluice_meta_find(snap(r), SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC)))
		return;
	struct sluice_topic_spec spec = {SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC),
					 r->nc->b->cfg.offsets_topic_partitions, -1, 1, {{"cleanup.policy", "compact"}}};
	char msg[256];
	int16_t e = r->nc->b->meta.ops->create_topic(r->nc->b->meta.self, &spec, false, msg, sizeof msg, NULL);
	if (e && e != 36)
		SLOG_ERR("group", "cannot create %s: %s", SLUICE_OFFSETS_TOPIC, msg);
	refresh_snap(r);
}

static void group_op_init(struct req *r, struct partop *op, struct kstr group, const uint8_t *data, size_t len)
{
	ensure_offsets_topic(r);
	op->kind = PARTOP_GROUP;
	op->topic = SLUICE_OFFSETS_TOPIC;
	op->partition = sluice_group_partition(group.ptr ? group.ptr : "", group.ptr ? (size_t)group.len : 0,
					       r->nc->b->cfg.offsets_topic_partitions);
	op->api_key = r->api_key;
	op->api_version = r->api_version;
	op->flex = r->flexible;
	op->gname = group;
	/* OffsetCommit checks its topics against the request's snapshot, held
	 * until the request is freed. Only a one-op request gets it: a later
	 * ensure_offsets_topic of a multi-group request may replace it. */
	op->gsnap = r->api_key == 8 ? snap(r) : NULL;
	op->client_id = r->client_id;
	op->client_host = r->conn->host;
	op->data = data;
	op->len = (uint32_t)len;
}

/* JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetDelete,
 * OffsetFetch v1-7: one group, named first in the body. The coordinator
 * decodes the whole body and encodes the whole response body. */
static bool group_single_start(struct req *r, struct krd *rd)
{
	struct krd peek = *rd;
	struct kstr group = krd_string(&peek, r->flexible);
	if (peek.err)
		return *rd = peek, false;
	if (!ops_alloc(r, 1))
		return false;
	group_op_init(r, &r->ops[0], group, rd->p, krd_left(rd));
	rd->p = rd->end;
	dispatch_ops(r);
	return true;
}

static void group_single_finish(struct req *r)
{
	struct partop *op = &r->ops[0];
	if (op->gout.len == 0 || op->gout.err) {
		/* the coordinator could not answer: Kafka would drop the connection */
		r->done = true;
		r->no_response = true;
		sluice_conn_close(r->conn);
		return;
	}
	resp_begin(r);
	kwr_raw(&r->out, op->gout.buf, op->gout.len);
	resp_end(r);
}

/* DescribeGroups, DeleteGroups, OffsetFetch v8+: one op per group, each
 * answering one element of the response array. */
static bool group_multi_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	if (r->api_key == 9 && v < 8)
		return group_single_start(r, rd);
	struct krd scan = *rd;
	int32_t n = krd_array(&scan, flex, 1);
	if (scan.err || n > SLUICE_REQ_PARTITIONS_MAX)
		return *rd = scan, false;
	if (n > 0 && !ops_alloc(r, n))
		return false;
	(void)krd_array(rd, flex, 1);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		const uint8_t *start = rd->p;
		struct kstr group = krd_string(rd, flex);
		if (r->api_key == 9) { /* skip the rest of this group's element */
			if (v >= 9) {
				(void)krd_string(rd, flex);
				(void)krd_i32(rd);
			}
			int32_t nt = krd_array(rd, flex, 2);
			for (int32_t t = 0; t < nt && !rd->err; t++) {
				(void)krd_string(rd, flex);
				int32_t np = krd_array(rd, flex, 4);
				krd_skip(rd, (size_t)(np > 0 ? np : 0) * 4);
				if (flex)
					krd_tags_skip(rd);
			}
			if (flex)
				krd_tags_skip(rd);
		}
		group_op_init(r, &r->ops[i], group, start, (size_t)(rd->p - start));
	}
	if (r->api_key == 15 && v >= 3)
		(void)krd_bool(rd);
	if (r->api_key == 9)
		(void)krd_bool(rd); /* RequireStable */
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	int32_t *nn = malloc(sizeof *nn);
	if (!nn)
		return false;
	*nn = n > 0 ? n : 0;
	r->api = nn;
	dispatch_ops(r);
	return true;
}

static void group_multi_finish(struct req *r)
{
	if (r->api_key == 9 && r->api_version < 8) {
		group_single_finish(r); /* OffsetFetch v1-7 names one group */
		return;
	}
	bool flex = r->flexible;
	int32_t n = *(int32_t *)r->api;
	for (int32_t i = 0; i < n; i++)
		if (r->ops[i].gout.len == 0 || r->ops[i].gout.err) {
			/* a group's part did not decode, or could not be answered */
			r->done = true;
			r->no_response = true;
			sluice_conn_close(r->conn);
			return;
		}
	resp_begin(r);
	struct kwr *w = &r->out;
	if (r->api_key == 42 || r->api_version >= 1 || r->api_key == 9)
		kwr_i32(w, 0); /* ThrottleTimeMs */
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++)
		kwr_raw(w, r->ops[i].gout.buf, r->ops[i].gout.len);
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
}

/* ListGroups: every storage core lists the groups it coordinates. */
static bool list_groups_start(struct req *r, struct krd *rd)
{
	/* Decode the whole body first: StatesFilter (v4+), TypesFilter (v5+). */
	struct krd scan = *rd;
	bool flex = r->flexible;
	for (int16_t f = 4; f <= 5 && r->api_version >= f && !scan.err; f++) {
		int32_t k = krd_array(&scan, flex, 1);
		for (int32_t i = 0; i < k && !scan.err; i++)
			(void)krd_string(&scan, flex);
	}
	if (flex)
		krd_tags_skip(&scan);
	if (scan.err)
		return *rd = scan, false;
	int32_t n = r->nc->b->store_n;
	if (!ops_alloc(r, n))
		return false;
	for (int32_t i = 0; i < n; i++) {
		group_op_init(r, &r->ops[i], (struct kstr){"", 0}, rd->p, krd_left(rd));
		r->ops[i].core_plus1 = (int16_t)(i + 1);
	}
	rd->p = rd->end;
	dispatch_ops(r);
	return true;
}

static void list_groups_finish(struct req *r)
{
	bool flex = r->flexible;
	resp_begin(r);
	struct kwr *w = &r->out;
	if (r->api_version >= 1)
		kwr_i32(w, 0);
	kwr_i16(w, KERR_NONE);
	int32_t total = 0;
	for (int32_t i = 0; i < r->nops; i++)
		total += r->ops[i].gcount;
	kwr_array(w, flex, total);
	for (int32_t i = 0; i < r->nops; i++)
		kwr_raw(w, r->ops[i].gout.buf, r->ops[i].gout.len);
	if (flex)
		kwr_tags_empty(w);
	resp_end(r);
}

/* ---- DescribeTopicPartitions (75) ----------------------------------------------- */

/* What kafka-topics --describe uses since Kafka 3.9: Metadata's partition
 * view with paging (ResponsePartitionLimit, Cursor) and the ELR fields,
 * which a single broker has none of (empty lists, as Kafka shows them). */
static bool describe_topic_partitions_start(struct req *r, struct krd *rd)
{
	int32_t n = krd_array(rd, true, 2);
	if (rd->err)
		return false;
	struct kstr *names = n > 0 ? calloc((size_t)n, sizeof *names) : NULL;
	if (n > 0 && !names)
		return false;
	r->api = names;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		names[i] = krd_string(rd, true);
		krd_tags_skip(rd);
	}
	int32_t limit = krd_i32(rd);
	struct kstr cur_topic = {NULL, 0};
	int32_t cur_part = 0;
	if (krd_i8(rd) >= 0) { /* nullable struct: -1 null, 1 present */
		cur_topic = krd_string(rd, true);
		cur_part = krd_i32(rd);
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	if (rd->err)
		return false;
	if (limit <= 0 || limit > 2000)
		limit = 2000;
	struct sluice_meta_snapshot *s = snap(r);
	int32_t node = r->nc->b->cfg.node_id;
	uint32_t offline = __atomic_load_n(&r->nc->b->offline_dirs, __ATOMIC_ACQUIRE);
	resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	/* Topics in name order (the snapshot's order); requested ones, or all. */
	size_t count_pos = w->len;
	kwr_uvarint(w, 0x7fffffff); /* placeholder, rewritten below */
	size_t after_count = w->len;
	int32_t topics = 0, budget = limit;
	const char *next_topic = NULL;
	int32_t next_part = -1;
	for (uint32_t ti = 0; ti < s->topic_n && !next_topic; ti++) {
		const struct sluice_topic *t = s->topics[ti];
		bool want = n <= 0;
		for (int32_t i = 0; i < n && !want; i++)
			want = kstr_eq(names[i], t->name);
		if (!want)
			continue;
		if (cur_topic.ptr) { /* resume at the cursor: skip topics before it */
			size_t tl = strlen(t->name), cl = (size_t)cur_topic.len;
			int c = memcmp(t->name, cur_topic.ptr, tl < cl ? tl : cl);
			if (c < 0 || (c == 0 && tl < cl))
				continue;
		}
		int32_t first = cur_topic.ptr && kstr_eq(cur_topic, t->name) ? cur_part : 0;
		int32_t last = t->partitions;
		if (last - first > budget) {
			last = first + budget;
			next_topic = t->name;
			next_part = last;
		}
		budget -= last - first;
		topics++;
		kwr_i16(w, KERR_NONE);
		kwr_cstr(w, true, t->name);
		kwr_uuid(w, t->id);
		kwr_bool(w, !strcmp(t->name, SLUICE_OFFSETS_TOPIC));
		kwr_array(w, true, last - first);
		for (int32_t p = first; p < last; p++) {
			bool down = false;
			if (offline) {
				char path[900];
				int d = sluice_partition_dir(r->nc->b, t->name, p, false, path, sizeof path);
				down = d >= 0 && (offline & (1u << d));
			}
			kwr_i16(w, down ? KERR_KAFKA_STORAGE_ERROR : KERR_NONE);
			kwr_i32(w, p);
			kwr_i32(w, down ? -1 : node);
			kwr_i32(w, 0);
			kwr_array(w, true, 1);
			kwr_i32(w, node);
			kwr_array(w, true, down ? 0 : 1);
			if (!down)
				kwr_i32(w, node);
			kwr_array(w, true, 0); /* EligibleLeaderReplicas */
			kwr_array(w, true, 0); /* LastKnownElr */
			kwr_array(w, true, down ? 1 : 0);
			if (down)
				kwr_i32(w, node);
			kwr_tags_empty(w);
		}
		kwr_i32(w, INT32_MIN);
		kwr_tags_empty(w);
	}
	/* Requested topics that do not exist answer UNKNOWN_TOPIC_OR_PARTITION. */
	for (int32_t i = 0; i < n && !next_topic; i++) {
		if (!names[i].ptr || sluice_meta_find(s, names[i].ptr, (size_t)names[i].len))
			continue;
		topics++;
		kwr_i16(w, KERR_UNKNOWN_TOPIC_OR_PARTITION);
		kwr_string(w, true, names[i].ptr, names[i].len);
		static const uint8_t zero[16];
		kwr_uuid(w, zero);
		kwr_bool(w, false);
		kwr_array(w, true, 0);
		kwr_i32(w, INT32_MIN);
		kwr_tags_empty(w);
	}
	if (next_topic) {
		kwr_i8(w, 1);
		kwr_cstr(w, true, next_topic);
		kwr_i32(w, next_part);
		kwr_tags_empty(w);
	} else
		kwr_i8(w, -1);
	kwr_tags_empty(w);
	if (!w->err) {
		/* The topic count is a varint: rewrite it in place at its real size. */
		uint8_t tmp[8];
		size_t len = 0;
		uint32_t v = (uint32_t)topics + 1;
		while (v >= 0x80) {
			tmp[len++] = (uint8_t)(v | 0x80);
			v >>= 7;
		}
		tmp[len++] = (uint8_t)v;
		size_t old = after_count - count_pos;
		memmove(w->buf + count_pos + len, w->buf + after_count, w->len - after_count);
		memcpy(w->buf + count_pos, tmp, len);
		w->len = w->len - old + len;
	}
	resp_end(r);
	return true;
}
