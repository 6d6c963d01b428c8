/* The record APIs: Produce (with the validation Kafka does before a batch
 * is appended), Fetch (with long polling: a fetch that finds too little
 * parks until data arrives or its wait ends), ListOffsets and
 * DeleteRecords, OffsetForLeaderEpoch. Each names topics and partitions; the shared iterator of
 * proto.c decodes them into one op per partition, which storage cores
 * answer, and writes the per-topic answer back. What is here is only what
 * differs: how a partition entry is laid out, what is refused before
 * storage sees it, and what a partition's answer holds. A partition this
 * broker does not lead (in cluster mode, the snapshot names another
 * leader, or a CurrentLeaderEpoch other than its own) is refused by the
 * iterator before any of it (proto.c's sluice_proto_leader_check). */
#include "common/kafka/batch.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/group.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- Produce (0) ------------------------------------------------------------ */

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
	const struct sluice_config *cfg = sluice_proto_config(r);
	const struct sluice_topic_limits *lim = &op->tinfo->limits;
	struct sluice_batch b;
	int16_t e = validate_header(r, max_bytes, p, len, &b, &op->error_message);
	if (e)
		return e;
	struct sluice_batch_verify v;
	bool create_time = !log_append_time(cfg, lim);
	v.need_key = sluice_topic_limits_compact(lim, cfg->log_cleanup_compact);
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


/* What Produce's partition entries share while the iterator walks them. */
struct produce_walk {
	struct kstr txn_id;
	int16_t acks;
	int32_t timeout_ms;   /* TimeoutMs: how long acks=all may wait for the ISR */
	bool txn_denied;      /* a transactional batch without a TransactionalId: the whole request */
	const uint8_t *recs;  /* the entry just decoded, for produce_admit */
	int32_t recs_len;
};

static void produce_skip(struct req *r, struct krd *rd, void *ctx)
{
	struct produce_walk *pw = ctx;
	(void)krd_i32(rd); /* PartitionIndex */
	const uint8_t *recs;
	int32_t len = krd_bytes(rd, r->flexible, &recs);
	pw->txn_denied |= !pw->txn_id.ptr && has_transactional_batch(recs, len);
}

static void produce_decode(struct req *r, struct krd *rd, struct partop *op, void *ctx)
{
	struct produce_walk *pw = ctx;
	op->partition = krd_i32(rd);
	pw->recs_len = krd_bytes(rd, r->flexible, &pw->recs);
	op->acks = pw->acks;
	op->timeout_ms = pw->timeout_ms;
	op->base_offset = -1;
}

/* The error a partition's records are refused with, or KERR_NONE. */
static int16_t produce_check(struct req *r, struct partop *op, int16_t acks, const uint8_t *recs, int32_t len)
{
	assert(!op->local && op->tinfo);
	const struct sluice_config *cfg = sluice_proto_config(r);
	const struct sluice_topic_limits *lim = &op->tinfo->limits;
	int64_t max_bytes = lim->max_message_bytes >= 0 ? lim->max_message_bytes : cfg->message_max_bytes;
	int64_t min_isr = lim->min_insync_replicas > 0 ? lim->min_insync_replicas : cfg->min_insync_replicas;
	int16_t e = r->api_version < 3 ? KERR_UNSUPPORTED_VERSION
		  : !strcmp(op->topic, SLUICE_OFFSETS_TOPIC) ? KERR_INVALID_TOPIC_EXCEPTION
		  : acks != 0 && acks != 1 && acks != -1 ? KERR_INVALID_REQUIRED_ACKS
		  : validate_records(r, op, max_bytes, recs, len);
	const struct sluice_partition_state *st = sluice_topic_partition(op->tinfo, op->partition);
	int32_t isr = st ? st->isr_n : 1; /* the snapshot's ISR (single-node: this broker alone) */
	if (!e && acks == -1 && min_isr > isr) {
		e = KERR_NOT_ENOUGH_REPLICAS;
		op->error_message = "The size of the current ISR is less than min.insync.replicas";
	}
	return e;
}

static void produce_admit(struct req *r, struct partop *op, void *ctx)
{
	struct produce_walk *pw = ctx;
	if (pw->txn_denied) { /* the whole request, as Kafka */
		op->local = true;
		op->error = KERR_TRANSACTIONAL_ID_AUTHORIZATION_FAILED;
		op->error_message = NULL;
		return;
	}
	if (op->local)
		return;
	int16_t e = produce_check(r, op, pw->acks, pw->recs, pw->recs_len);
	if (e) {
		op->local = true;
		op->error = e;
		return;
	}
	op->data = pw->recs;
	op->len = (uint32_t)pw->recs_len;
}

/* Partition entry: PartitionIndex, Records. */
static const struct sluice_proto_partitions produce_partitions = {
	.kind = PARTOP_APPEND,
	.partition_bytes_min = 5,
	.ends_body = true,
	.skip = produce_skip,
	.decode = produce_decode,
	.admit = produce_admit,
};

bool sluice_api_produce_start(struct req *r, struct krd *rd)
{
	struct produce_walk pw = {0};
	if (r->api_version >= 3)
		pw.txn_id = krd_string(rd, r->flexible); /* TransactionalId */
	pw.acks = krd_i16(rd);
	pw.timeout_ms = krd_i32(rd);
	if (!sluice_proto_partitions_decode(r, rd, &produce_partitions, &pw))
		return false;
	r->no_response = pw.acks == 0;
	sluice_proto_dispatch(r);
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


/* A partition refused answers -1 for its offsets; one that timed out
 * waiting for the ISR (REQUEST_TIMED_OUT) was appended, and Kafka's answer
 * keeps where (its DelayedProduce only sets the error). */
static void produce_write_partition(struct req *r, struct kwr *w, const struct partop *op, void *ctx)
{
	int16_t v = r->api_version;
	bool appended = !op->error || op->error == KERR_REQUEST_TIMED_OUT;
	(void)ctx;
	kwr_i16(w, op->error);
	kwr_i64(w, appended ? op->base_offset : -1);
	if (v >= 2) /* LogAppendTimeMs: -1 for CreateTime topics */
		kwr_i64(w, !appended || op->timestamp <= 0 ? -1 : op->timestamp);
	if (v >= 5)
		kwr_i64(w, appended ? op->log_start : -1);
	if (v >= 8)
		produce_write_errors(w, r->flexible, op);
}

void sluice_api_produce_finish(struct req *r)
{
	assert(r->pending == 0 && !r->done);
	if (r->no_response) {
		r->done = true;
		sluice_conn_response_ready(r);
		return;
	}
	sluice_proto_resp_begin(r);
	sluice_proto_partitions_encode(r, produce_write_partition, NULL);
	if (r->api_version >= 1)
		kwr_i32(&r->out, 0); /* ThrottleTimeMs */
	if (r->flexible)
		kwr_tags_empty(&r->out);
	sluice_proto_resp_end(r);
}

/* ---- Fetch (1) ---------------------------------------------------------------- */

/* A partition read by reference (op->pins) is sent straight from the
 * storage core's cache extents, spliced between slices of the response
 * buffer, unless it is small (a copy costs less than a send range), the
 * response already has FETCH_SPLICES_MAX splices, or the connection or the
 * broker has pinned as much as its budget allows (sluice_conn_pin): those
 * are copied and their pins given back at once. */
#define FETCH_SPLICES_MAX 1024
#define FETCH_SPLICE_BYTES_MIN 8192
_Static_assert(FETCH_SPLICES_MAX <= SLUICE_REQ_PARTITIONS_MAX, "splices are partitions of the request");
_Static_assert((uint64_t)FETCH_SPLICES_MAX * sizeof(struct sluice_resp_splice) <= (1u << 20),
	       "the splice table is a small part of a response buffer");

/* Drop what a READ op brought back: its copy, or its pins (back to their
 * storage core). */
static void fetch_op_clear(struct partop *op)
{
	free(op->rdata);
	op->rdata = NULL;
	if (op->pins) {
		assert(op->pins->pin.release && op->pins->bytes == op->rlen);
		sluice_pin_put(&op->pins->pin);
		op->pins = NULL;
	}
	op->splice_at = 0;
	op->rlen = 0;
}

struct fetch_state {
	int32_t max_wait_ms, min_bytes, max_bytes;
	int32_t replica_id; /* ReplicaId: a follower broker's id, or -1 (a consumer) */
	bool final;
	struct kstr rack; /* RackId (v11+): the consumer's client.rack, in the frame */
	/* What the request's reads may still take, shared by its ops on every
	 * storage core (atomic): a Fetch naming many partitions, or one
	 * partition many times, reads about MaxBytes, not each partition's
	 * limit over again. Reset at each issue. */
	int64_t read_budget;
};

_Static_assert(sizeof(struct fetch_state) <= SLUICE_REQ_API_INLINE_BYTES, "a Fetch's state lives in its request");

static void fetch_issue(struct req *r)
{
	struct fetch_state *fs = r->api;
	assert(fs && r->pending == 0);
	for (int32_t i = 0; i < r->nops; i++) {
		struct partop *op = &r->ops[i];
		fetch_op_clear(op);
		if (op->local)
			continue;
		op->error = 0;
		op->preferred_read_replica = -1;
		op->hw_news = false;
		op->watch = !fs->final && fs->max_wait_ms > 0 && fs->min_bytes > 0;
		op->read_budget = &fs->read_budget;
	}
	__atomic_store_n(&fs->read_budget, (int64_t)fs->max_bytes, __ATOMIC_RELAXED);
	sluice_proto_dispatch(r);
}

/* Bytes of a Fetch partition entry: PartitionIndex, CurrentLeaderEpoch
 * (v9+), FetchOffset, LastFetchedEpoch (v12+), LogStartOffset (v5+),
 * PartitionMaxBytes. */
static size_t fetch_partition_bytes(int16_t v)
{
	return 4 + (v >= 9 ? 4 : 0) + 8 + (v >= 12 ? 4 : 0) + (v >= 5 ? 8 : 0) + 4;
}

static void fetch_skip(struct req *r, struct krd *rd, void *ctx)
{
	(void)ctx;
	krd_skip(rd, fetch_partition_bytes(r->api_version));
}

static void fetch_decode(struct req *r, struct krd *rd, struct partop *op, void *ctx)
{
	const struct fetch_state *fs = ctx;
	int16_t v = r->api_version;
	op->partition = krd_i32(rd);
	if (v >= 9)
		op->leader_epoch = krd_i32(rd); /* CurrentLeaderEpoch */
	op->offset = krd_i64(rd);
	op->last_fetched_epoch = v >= 12 ? krd_i32(rd) : -1;
	/* LogStartOffset: a follower's, which the leader's replica selector
	 * checks (moving this log's start up with it is not done) */
	op->replica_log_start = v >= 5 ? krd_i64(rd) : -1;
	op->from_replica = fs->replica_id >= 0;
	op->replica_id = fs->replica_id;
	op->follower_read = !op->from_replica && v >= 11; /* KIP-392 */
	op->diverging_epoch = -1;
	op->preferred_read_replica = -1;
	int32_t pmax = krd_i32(rd);
	op->max_bytes = pmax < fs->max_bytes ? pmax : fs->max_bytes;
	if (op->max_bytes < 0)
		op->max_bytes = 0;
	op->min_one = true;
	op->high_watermark = op->log_start = -1;
}

/* Whether this broker holds a replica of op's partition (its snapshot's word). */
static bool replica_here(struct req *r, const struct partop *op)
{
	const struct sluice_partition_state *st = sluice_topic_partition(op->tinfo, op->partition);
	int32_t self = r->nc->b->cfg.node_id;
	for (int32_t i = 0; st && i < st->replica_n; i++)
		if (st->replicas[i] == self)
			return true;
	return false;
}

/* A consumer's Fetch v11+ may be served by a follower (KIP-392: Kafka's
 * fetchOnlyLeader is false for it): a partition the leader check refused
 * only because another broker leads it goes to storage after all when this
 * broker holds a replica; the epoch checks stand (a follower checks the
 * CurrentLeaderEpoch against the epoch it knows, as Kafka's does). */
static void fetch_admit(struct req *r, struct partop *op, void *ctx)
{
	(void)ctx;
	if (op->local && op->error == KERR_NOT_LEADER_OR_FOLLOWER && op->follower_read && op->tinfo &&
	    replica_here(r, op)) {
		op->local = false;
		op->error = KERR_NONE;
	}
}

static const struct sluice_proto_partitions fetch_partitions = {
	.kind = PARTOP_READ,
	.partition_bytes_min = 16,
	.skip = fetch_skip,
	.decode = fetch_decode,
	.admit = fetch_admit,
};

/* The rack of broker id in snap, or NULL when it is not among the
 * unfenced brokers (Kafka's selector sees only replicas it can name an
 * endpoint for). */
static const char *broker_rack(const struct sluice_meta_snapshot *snap, int32_t id)
{
	uint32_t lo = 0, hi = snap->broker_n;
	while (lo < hi) { /* brokers are sorted by node id */
		uint32_t mid = lo + (hi - lo) / 2;
		if (snap->brokers[mid].node_id == id)
			return snap->brokers[mid].rack;
		if (snap->brokers[mid].node_id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static bool rack_is(const char *rack, struct kstr want)
{
	return rack && want.len > 0 && strlen(rack) == (size_t)want.len && !memcmp(rack, want.ptr, (size_t)want.len);
}

/* Kafka's RackAwareReplicaSelector, the part the snapshot decides: a
 * consumer that names a rack (client.rack) is better served by a replica
 * in that rack, unless the leader is in it. op's rack_replicas: those
 * replicas (the storage core then keeps the in-sync ones that hold the
 * offset and picks the most caught up). */
static void fetch_rack_replicas(struct req *r, const struct fetch_state *fs)
{
	const struct sluice_config *cfg = sluice_proto_config(r);
	if (!cfg->replica_selector_rack_aware || fs->rack.len <= 0 || fs->replica_id >= 0)
		return;
	const struct sluice_meta_snapshot *snap = sluice_proto_snap(r);
	int32_t self = cfg->node_id;
	const char *own = broker_rack(snap, self);
	if (rack_is(own ? own : cfg->broker_rack, fs->rack))
		return; /* the leader is in the consumer's rack: it serves */
	for (int32_t i = 0; i < r->nops; i++) {
		struct partop *op = &r->ops[i];
		const struct sluice_partition_state *st = op->local ? NULL : sluice_topic_partition(op->tinfo, op->partition);
		op->rack_replicas = 0;
		if (!st || st->leader != self)
			continue;
		assert(st->replica_n <= SLUICE_REPLICAS_MAX);
		for (int32_t k = 0; k < st->replica_n; k++)
			if (st->replicas[k] != self && rack_is(broker_rack(snap, st->replicas[k]), fs->rack))
				op->rack_replicas |= (uint16_t)(1u << k);
	}
}

/* What follows the topics: ForgottenTopicsData (v7+, sessions are not kept,
 * so only stepped over), RackId (v11+), tagged fields. */
static void fetch_decode_tail(struct req *r, struct krd *rd, struct fetch_state *fs)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	if (v >= 7) {
		int32_t nf = krd_array(rd, flex, 2);
		for (int32_t i = 0; i < nf && !rd->err; i++) {
			(void)krd_string(rd, flex);
			int32_t np = krd_array(rd, flex, 4);
			krd_skip(rd, (size_t)(np > 0 ? np : 0) * 4);
			if (flex)
				krd_tags_skip(rd);
		}
	}
	fs->rack = v >= 11 ? krd_string(rd, flex) : (struct kstr){0};
	if (flex)
		krd_tags_skip(rd);
}

bool sluice_api_fetch_start(struct req *r, struct krd *rd)
{
	struct fetch_state *fs = sluice_proto_api_state(r, sizeof *fs); /* inside the request */
	assert(fs == (void *)r->api_inline);
	fs->replica_id = krd_i32(rd); /* >= 0: a follower fetching (v15+'s ReplicaState is not served) */
	fs->max_wait_ms = krd_i32(rd);
	fs->min_bytes = krd_i32(rd);
	fs->max_bytes = krd_i32(rd);
	(void)krd_i8(rd); /* IsolationLevel: no transactions, so LSO == HW */
	if (r->api_version >= 7) {
		(void)krd_i32(rd); /* SessionId: sessions are not kept; we answer 0 */
		(void)krd_i32(rd);
	}
	if (fs->max_bytes <= 0 || fs->max_bytes > r->nc->b->cfg.fetch_max_bytes)
		fs->max_bytes = r->nc->b->cfg.fetch_max_bytes;
	if (!sluice_proto_partitions_decode(r, rd, &fetch_partitions, fs))
		return false;
	fetch_decode_tail(r, rd, fs);
	if (rd->err)
		return false;
	fetch_rack_replicas(r, fs);
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
	assert(!r->parked && r->pending == 0);
	/* What was read is too little and is read again when the fetch is
	 * retried: free it, so a waiting fetch holds only its frame. */
	for (int32_t i = 0; i < r->nops; i++)
		fetch_op_clear(&r->ops[i]);
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
		assert(r->parked && r->api_key == API_FETCH);
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


/* The response's byte budget, spent partition by partition. */
struct fetch_fill {
	int64_t budget;
	bool any; /* some partition answers records */
};

/* A partition's records from its pins: spliced in by reference (the
 * request then owns the pins until sent) or copied (and released now). */
static void fetch_write_pinned(struct req *r, struct kwr *w, struct partop *op, int32_t n, struct fetch_fill *ff)
{
	struct sluice_read_pins *pins = op->pins;
	assert(pins && pins->bytes == op->rlen && n == op->rlen);
	if (r->flexible)
		kwr_uvarint(w, (uint32_t)n + 1);
	else
		kwr_i32(w, n);
	(void)ff;
	assert(op->splice_at == 0);
	if (r->nsplice < FETCH_SPLICES_MAX && n >= FETCH_SPLICE_BYTES_MIN && !w->err && sluice_conn_pin(r->conn, n)) {
		op->splice_at = (uint32_t)w->len; /* the table is written once the buffer stops moving */
		r->nsplice++;
		r->splice_bytes += n;
		return;
	}
	op->pins = NULL;
	for (uint32_t k = 0; k < pins->n; k++)
		kwr_raw(w, pins->range[k].base, pins->range[k].len);
	sluice_pin_put(&pins->pin);
}

/* The splice table, past the response's last byte (out.len stays): one
 * entry per op whose records are spliced, in op order (which is response
 * order); the request owns their pins from here on. False when the buffer
 * cannot grow (the response then fails to encode, releasing nothing twice:
 * the pins stay with the ops and fetch_op_clear releases them). */
static bool fetch_splice_table(struct req *r)
{
	struct kwr *w = &r->out;
	size_t len = w->len, at = (len + 15) & ~(size_t)15; /* malloc'd buffers are 16-aligned */
	if (r->nsplice == 0)
		return true;
	if (!kwr_reserve(w, at - len + (size_t)r->nsplice * sizeof(struct sluice_resp_splice))) {
		for (int32_t i = 0; i < r->nops; i++)
			r->ops[i].splice_at = 0;
		sluice_conn_unpin(r->conn, r->splice_bytes);
		r->nsplice = 0;
		r->splice_bytes = 0;
		return false;
	}
	w->len = len;
	struct sluice_resp_splice *t = (struct sluice_resp_splice *)(void *)(w->buf + at);
	assert(((uintptr_t)t & (_Alignof(struct sluice_resp_splice) - 1)) == 0);
	int32_t k = 0;
	for (int32_t i = 0; i < r->nops; i++) {
		struct partop *op = &r->ops[i];
		if (!op->splice_at)
			continue;
		assert(op->pins && k < r->nsplice);
		t[k++] = (struct sluice_resp_splice){op->splice_at, (uint32_t)op->rlen, op->pins};
		op->pins = NULL;
		op->splice_at = 0;
	}
	assert(k == r->nsplice);
	r->splice = t;
	return true;
}

static void fetch_write_partition(struct req *r, struct kwr *w, const struct partop *op, void *ctx)
{
	struct fetch_fill *ff = ctx;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = op->rlen;
	assert(!op->pins || !op->rdata);
	/* Whole stored batches only; past the request's byte budget a
	 * partition answers empty and the client asks again. */
	if (n > ff->budget && ff->any)
		n = 0;
	if (n > 0) {
		ff->budget -= n;
		ff->any = true;
		if (!op->from_replica)
			sluice_metrics_topic_out(r->nc->b->metrics, r->nc->id, op->metrics_topic, (uint64_t)n);
	}
	bool unknown = op->error == KERR_UNKNOWN_TOPIC_OR_PARTITION;
	kwr_i16(w, op->error);
	kwr_i64(w, unknown ? -1 : op->high_watermark);
	kwr_i64(w, unknown ? -1 : op->high_watermark); /* LastStableOffset */
	if (v >= 5)
		kwr_i64(w, unknown ? -1 : op->log_start);
	kwr_array(w, flex, 0); /* AbortedTransactions: none */
	if (v >= 11)
		kwr_i32(w, op->preferred_read_replica); /* KIP-392 (-1: none) */
	struct partop *mop = &r->ops[op - r->ops]; /* the request's own op: its pins move on */
	if (n > 0 && mop->pins)
		fetch_write_pinned(r, w, mop, n, ff);
	else
		kwr_bytes(w, flex, n > 0 ? op->rdata : (const uint8_t *)"", n > 0 ? n : 0);
	if (!flex)
		return;
	/* Tagged fields: DivergingEpoch (tag 0) for a follower whose log
	 * diverged: Epoch, EndOffset, its own (empty) tags. */
	bool diverged = op->from_replica && !op->local && !op->error && op->diverging_epoch >= 0;
	if (!diverged) {
		kwr_tags_empty(w);
		return;
	}
	kwr_uvarint(w, 1);
	kwr_uvarint(w, 0);
	kwr_uvarint(w, 4 + 8 + 1);
	kwr_i32(w, op->diverging_epoch);
	kwr_i64(w, op->diverging_end);
	kwr_tags_empty(w);
}

/* Whether the fetch should wait for more data rather than answer now. */
static bool fetch_should_park(const struct req *r, const struct fetch_state *fs, int64_t *bytes,
			      int64_t *copied)
{
	bool errors = false;
	*bytes = *copied = 0;
	for (int32_t i = 0; i < r->nops; i++) {
		*bytes += r->ops[i].rlen;
		*copied += r->ops[i].pins ? 0 : r->ops[i].rlen;
		/* A follower told where its log diverged, or of a higher high
		 * watermark, learns it at once; a consumer sent to another
		 * replica goes there at once (Kafka answers both without
		 * waiting). */
		const struct partop *op = &r->ops[i];
		errors |= op->error != 0 || (op->from_replica && (op->diverging_epoch >= 0 || op->hw_news)) ||
			  op->preferred_read_replica >= 0;
	}
	return !fs->final && !errors && *bytes < fs->min_bytes && sluice_now_ms() < r->deadline_ms;
}

void sluice_api_fetch_finish(struct req *r)
{
	struct fetch_state *fs = r->api;
	assert(fs && r->pending == 0 && !r->parked);
	if (r->conn->closing) {
		/* The client is gone: build nothing, let the transport drop it. */
		for (int32_t i = 0; i < r->nops; i++)
			fetch_op_clear(&r->ops[i]);
		r->done = true;
		r->no_response = true;
		sluice_conn_response_ready(r);
		return;
	}
	int64_t bytes, copied;
	if (fetch_should_park(r, fs, &bytes, &copied)) {
		park(r);
		return;
	}
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	/* One allocation for the whole answer, not a chain of reallocations
	 * (each a copy, and page faults on fresh memory, for a response of
	 * megabytes): the records copied plus a generous bound on the framing
	 * (records by reference are mostly spliced in, not copied). */
	size_t at = w->len;
	if (kwr_reserve(w, (size_t)copied + (size_t)r->nops * 128 + 256))
		w->len = at;
	kwr_i32(w, 0); /* ThrottleTimeMs */
	if (r->api_version >= 7) {
		kwr_i16(w, KERR_NONE);
		kwr_i32(w, 0); /* SessionId: no incremental sessions */
	}
	struct fetch_fill ff = {.budget = fs->max_bytes};
	assert(r->nsplice == 0 && r->splice_bytes == 0);
	sluice_proto_partitions_encode_tagged(r, fetch_write_partition, &ff);
	if (r->flexible)
		kwr_tags_empty(w);
	if (!fetch_splice_table(r))
		w->err = true; /* resp_end reports it and closes */
	/* The records are in the response now (copied, or spliced with their
	 * pins): free the reads, and release the pins of partitions past the
	 * budget, before it waits to be sent (it may wait long for a slow
	 * client). */
	for (int32_t i = 0; i < r->nops; i++)
		fetch_op_clear(&r->ops[i]);
	sluice_proto_resp_end(r);
}

/* ---- ListOffsets (2) ------------------------------------------------------------- */

/* Partition entry: PartitionIndex, CurrentLeaderEpoch (v4+), Timestamp. */
static void list_offsets_skip(struct req *r, struct krd *rd, void *ctx)
{
	(void)ctx;
	krd_skip(rd, 4 + (r->api_version >= 4 ? 4 : 0) + 8);
}

static void list_offsets_decode(struct req *r, struct krd *rd, struct partop *op, void *ctx)
{
	(void)ctx;
	op->partition = krd_i32(rd);
	if (r->api_version >= 4)
		op->leader_epoch = krd_i32(rd); /* CurrentLeaderEpoch */
	op->offset = krd_i64(rd);
}

static const struct sluice_proto_partitions list_offsets_partitions = {
	.kind = PARTOP_LIST_OFFSETS,
	.partition_bytes_min = 12,
	.skip = list_offsets_skip,
	.decode = list_offsets_decode,
};

bool sluice_api_list_offsets_start(struct req *r, struct krd *rd)
{
	(void)krd_i32(rd); /* ReplicaId */
	if (r->api_version >= 2)
		(void)krd_i8(rd); /* IsolationLevel */
	if (!sluice_proto_partitions_decode(r, rd, &list_offsets_partitions, NULL))
		return false;
	if (r->flexible)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	sluice_proto_dispatch(r);
	return true;
}

static void list_offsets_write_partition(struct req *r, struct kwr *w, const struct partop *op, void *ctx)
{
	(void)ctx;
	kwr_i16(w, op->error);
	kwr_i64(w, op->error ? -1 : op->timestamp);
	kwr_i64(w, op->error ? -1 : op->base_offset);
	if (r->api_version >= 4) { /* LeaderEpoch: the partition's (records carry no other yet) */
		const struct sluice_partition_state *st = op->tinfo ? sluice_topic_partition(op->tinfo, op->partition) : NULL;
		kwr_i32(w, op->error || op->base_offset < 0 ? -1 : st ? st->leader_epoch : 0);
	}
}

void sluice_api_list_offsets_finish(struct req *r)
{
	assert(r->pending == 0 && !r->done);
	sluice_proto_resp_begin(r);
	if (r->api_version >= 2)
		kwr_i32(&r->out, 0); /* ThrottleTimeMs */
	sluice_proto_partitions_encode(r, list_offsets_write_partition, NULL);
	if (r->flexible)
		kwr_tags_empty(&r->out);
	sluice_proto_resp_end(r);
}

/* ---- DeleteRecords (21) ------------------------------------------------------------ */

/* Partition entry: PartitionIndex, Offset. */
static void delete_records_skip(struct req *r, struct krd *rd, void *ctx)
{
	(void)r;
	(void)ctx;
	krd_skip(rd, 12);
}

static void delete_records_decode(struct req *r, struct krd *rd, struct partop *op, void *ctx)
{
	(void)r;
	(void)ctx;
	op->partition = krd_i32(rd);
	op->offset = krd_i64(rd);
}

static void delete_records_admit(struct req *r, struct partop *op, void *ctx)
{
	(void)r;
	(void)ctx;
	if (!op->local && op->offset < -1) {
		op->local = true;
		op->error = KERR_OFFSET_OUT_OF_RANGE;
	}
}

static const struct sluice_proto_partitions delete_records_partitions = {
	.kind = PARTOP_DELETE_RECORDS,
	.partition_bytes_min = 12,
	.skip = delete_records_skip,
	.decode = delete_records_decode,
	.admit = delete_records_admit,
};

bool sluice_api_delete_records_start(struct req *r, struct krd *rd)
{
	if (!sluice_proto_partitions_decode(r, rd, &delete_records_partitions, NULL))
		return false;
	int32_t timeout_ms = krd_i32(rd); /* how long to wait for the replicas' log starts */
	if (r->flexible)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	for (int32_t i = 0; i < r->nops; i++)
		r->ops[i].timeout_ms = timeout_ms;
	sluice_proto_dispatch(r);
	return true;
}

static void delete_records_write_partition(struct req *r, struct kwr *w, const struct partop *op, void *ctx)
{
	(void)r;
	(void)ctx;
	/* LowWatermark: -1 with an error, but for REQUEST_TIMED_OUT (the
	 * records were deleted on the leader): then the one Kafka gives, the
	 * low watermark at the deletion. */
	kwr_i64(w, op->error && op->error != KERR_REQUEST_TIMED_OUT ? -1 : op->log_start);
	kwr_i16(w, op->error);
}

void sluice_api_delete_records_finish(struct req *r)
{
	assert(r->pending == 0 && !r->done);
	sluice_proto_resp_begin(r);
	kwr_i32(&r->out, 0); /* ThrottleTimeMs */
	sluice_proto_partitions_encode(r, delete_records_write_partition, NULL);
	if (r->flexible)
		kwr_tags_empty(&r->out);
	sluice_proto_resp_end(r);
}

/* ---- OffsetForLeaderEpoch (23) ------------------------------------------------------- */

/* KIP-101/KIP-320: where a leader epoch ends in the leader's log, so a
 * follower (or a consumer validating its position after a leader change)
 * can find where its log diverged. Versions 2-4: every partition entry
 * names CurrentLeaderEpoch (the iterator's leader check answers
 * FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH or NOT_LEADER_OR_FOLLOWER, -1
 * skipping the epoch check) and LeaderEpoch; ReplicaId (v3+) is -1 for a
 * consumer, -2 for a debugging tool, a broker id for a follower: everyone
 * gets the same answer, from the leader only, as Kafka's
 * ReplicaManager.lastOffsetForLeaderEpoch (fetchOnlyFromLeader). The
 * storage core owning the partition answers from its epoch cache
 * (PARTOP_EPOCH_END). */

/* Partition entry: Partition, CurrentLeaderEpoch, LeaderEpoch. */
#define EPOCH_PARTITION_BYTES 12

static void offset_for_epoch_skip(struct req *r, struct krd *rd, void *ctx)
{
	(void)r;
	(void)ctx;
	krd_skip(rd, EPOCH_PARTITION_BYTES);
}

static void offset_for_epoch_decode(struct req *r, struct krd *rd, struct partop *op, void *ctx)
{
	(void)r;
	(void)ctx;
	op->partition = krd_i32(rd);
	op->leader_epoch = krd_i32(rd); /* CurrentLeaderEpoch */
	op->offset = krd_i32(rd);       /* LeaderEpoch: the one asked about */
}

static const struct sluice_proto_partitions offset_for_epoch_partitions = {
	.kind = PARTOP_EPOCH_END,
	.partition_bytes_min = EPOCH_PARTITION_BYTES,
	.skip = offset_for_epoch_skip,
	.decode = offset_for_epoch_decode,
};

bool sluice_api_offset_for_leader_epoch_start(struct req *r, struct krd *rd)
{
	if (r->api_version >= 3)
		(void)krd_i32(rd); /* ReplicaId: the same answer for all */
	if (!sluice_proto_partitions_decode(r, rd, &offset_for_epoch_partitions, NULL))
		return false;
	if (r->flexible)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	sluice_proto_dispatch(r);
	return true;
}

/* EpochEndOffset: ErrorCode, Partition, LeaderEpoch, EndOffset. The error
 * comes before the partition index here, unlike the other record APIs, so
 * the topics are written here rather than by sluice_proto_partitions_encode
 * (the same layout otherwise: the topics with partitions to answer, in
 * request order). */
static void offset_for_epoch_write_partition(struct kwr *w, const struct partop *op, bool flex)
{
	bool known = !op->error && op->base_offset >= 0;
	kwr_i16(w, op->error);
	kwr_i32(w, op->partition);
	kwr_i32(w, known ? (int32_t)op->last_offset : -1);
	kwr_i64(w, known ? op->base_offset : -1);
	if (flex)
		kwr_tags_empty(w);
}

void sluice_api_offset_for_leader_epoch_finish(struct req *r)
{
	assert(r->pending == 0 && !r->done);
	bool flex = r->flexible;
	struct kwr *w = &r->out;
	sluice_proto_resp_begin(r);
	kwr_i32(w, 0); /* ThrottleTimeMs */
	int32_t topics = 0;
	for (int32_t k = 0; k < r->nops; k = sluice_proto_topic_run_end(r, k))
		topics++;
	kwr_array(w, flex, topics);
	for (int32_t k = 0, end; k < r->nops; k = end) {
		end = sluice_proto_topic_run_end(r, k);
		kwr_string(w, flex, r->ops[k].name_ptr, r->ops[k].name_len);
		kwr_array(w, flex, end - k);
		for (int32_t i = k; i < end; i++)
			offset_for_epoch_write_partition(w, &r->ops[i], flex);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}
