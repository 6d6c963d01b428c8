/* The group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
 * OffsetCommit, OffsetFetch, OffsetDelete, DescribeGroups, DeleteGroups,
 * ListGroups): the network core does not decode them. It routes each
 * group's part of the request to the storage core that coordinates the
 * group (by the group's __consumer_offsets partition, as Kafka places
 * groups) as a PARTOP_GROUP op; the coordinator (group.c) decodes that part
 * and encodes its answer, which is framed here. A group whose partition
 * another broker leads (cluster mode) is answered here at once, as Kafka
 * answers it: NOT_COORDINATOR (COORDINATOR_NOT_AVAILABLE while the
 * partition has no leader, or while __consumer_offsets does not exist),
 * and the client finds its coordinator again.
 *
 * __consumer_offsets is created here when a group request or
 * FindCoordinator finds it missing, as Kafka's broker creates it: in
 * cluster mode with offsets.topic.replication.factor replicas, which the
 * controller places only once that many brokers are active (until then the
 * creation fails, and is tried again by a later request once the metadata
 * changed, or OFFSETS_CREATE_RETRY_MS later); on a single node with one. */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/group.h"
#include "dataplane/group_internal.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A failed creation of __consumer_offsets is not tried again for this
 * long while the metadata stays as it was (a broker unfenced since may
 * make it succeed): clients ask FindCoordinator every retry.backoff.ms,
 * and each try is a round trip to the controller. */
#define OFFSETS_CREATE_RETRY_MS 1000

/* What ensure keeps in the batch's room: the topic's one config and
 * whom to call once it exists. */
struct offsets_create {
	struct sluice_topic_config config;
	void (*then)(struct req *r);
	int64_t metadata_offset; /* of the snapshot that found the topic missing */
};

/* Whether a creation failed lately with the metadata as snap has it. */
static bool offsets_create_failed_lately(struct req *r, const struct sluice_meta_snapshot *snap)
{
	const struct broker *b = r->nc->b;
	int64_t at = __atomic_load_n(&b->offsets_create_failed_offset, __ATOMIC_RELAXED);
	int64_t ms = __atomic_load_n(&b->offsets_create_failed_ms, __ATOMIC_RELAXED);
	return ms > 0 && at == snap->metadata_offset && sluice_now_ms() - ms < OFFSETS_CREATE_RETRY_MS;
}

static void offsets_topic_created(struct req *r)
{
	struct offsets_create *oc;
	const struct sluice_meta_batch *b = sluice_proto_meta_current(r, (void **)&oc);
	assert(b->change_n == 1 && oc && oc->then);
	const struct sluice_meta_change *c = &b->changes[0];
	struct broker *br = r->nc->b;
	if (c->error && c->error != KERR_TOPIC_ALREADY_EXISTS) {
		/* Remembered (the metadata as the request saw it before the try),
		 * so that requests do not try again until it changes. */
		int64_t at = __atomic_load_n(&br->offsets_create_failed_offset, __ATOMIC_RELAXED);
		bool again = at == oc->metadata_offset;
		__atomic_store_n(&br->offsets_create_failed_offset, oc->metadata_offset, __ATOMIC_RELAXED);
		__atomic_store_n(&br->offsets_create_failed_ms, sluice_now_ms(), __ATOMIC_RELAXED);
		if (again)
			SLOG_DEBUG("group", "cannot create %s yet: %s", SLUICE_OFFSETS_TOPIC, c->msg);
		else
			SLOG_WARN("group", "cannot create %s yet (groups answer COORDINATOR_NOT_AVAILABLE until it "
				  "exists): %s", SLUICE_OFFSETS_TOPIC, c->msg);
	}
	oc->then(r);
}

bool sluice_api_offsets_topic_ensure(struct req *r, void (*then)(struct req *r))
{
	assert(then && !r->done);
	const struct sluice_meta_snapshot *snap = sluice_proto_snap(r);
	if (sluice_meta_find(snap, SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC)))
		return false;
	if (offsets_create_failed_lately(r, snap))
		return false; /* answered as before it exists: COORDINATOR_NOT_AVAILABLE */
	const struct sluice_config *cfg = &r->nc->b->cfg;
	struct offsets_create *oc;
	struct sluice_meta_batch *b = sluice_proto_meta_batch(r, 1, sizeof *oc, (void **)&oc);
	if (!b)
		return false;
	snprintf(oc->config.key, sizeof oc->config.key, "cleanup.policy");
	snprintf(oc->config.value, sizeof oc->config.value, "compact");
	oc->then = then;
	oc->metadata_offset = snap->metadata_offset;
	b->changes[0] = (struct sluice_meta_change){
		.kind = SLUICE_META_CREATE_TOPIC,
		.name = SLUICE_OFFSETS_TOPIC,
		.name_len = strlen(SLUICE_OFFSETS_TOPIC),
		.partitions = cfg->offsets_topic_partitions,
		/* a single node keeps its one replica (its backend's default) */
		.replication_factor = sluice_proto_cluster_mode(r) ? cfg->offsets_topic_replication_factor : -1,
		.configs = &oc->config,
		.config_n = 1,
	};
	enum sluice_meta_submit_result res = sluice_proto_meta_submit(r, offsets_topic_created);
	if (res != SLUICE_META_SUBMITTED)
		SLOG_WARN("group", "cannot create %s now: the metadata queue is %s", SLUICE_OFFSETS_TOPIC,
			  res == SLUICE_META_BUSY ? "full" : "refusing the batch");
	return res == SLUICE_META_SUBMITTED;
}

/* Whether this broker coordinates the groups of __consumer_offsets
 * partition p: it leads it in the snapshot (the storage core checks again
 * by the leader epoch: its word may be newer). Before the topic exists
 * (its creation failed) a cluster has no coordinator; a single node's
 * local coordinator answers, as before (it finds the partition's log
 * itself). */
static int16_t group_coordinator_error(struct req *r, int32_t p)
{
	const struct sluice_topic *t = sluice_meta_find(sluice_proto_snap(r), SLUICE_OFFSETS_TOPIC,
							strlen(SLUICE_OFFSETS_TOPIC));
	const struct sluice_partition_state *st = t ? sluice_topic_partition(t, p) : NULL;
	if (!st)
		return sluice_proto_cluster_mode(r) ? KERR_COORDINATOR_NOT_AVAILABLE : KERR_NONE;
	/* Paused past its session (SIGSTOP, a stall), this broker may have been
	 * replaced as coordinator without knowing it yet: it answers nothing
	 * from groups it may no longer hold (a stale OffsetFetch would show
	 * committed offsets going back) until a heartbeat renews its lease. */
	const struct sluice_meta *m = &r->nc->b->meta;
	if (st->leader == r->nc->b->cfg.node_id && m->ops->lease_valid &&
	    !m->ops->lease_valid(m->self, sluice_now_ms()))
		return KERR_NOT_COORDINATOR;
	if (st->leader == r->nc->b->cfg.node_id)
		return KERR_NONE;
	return st->leader < 0 ? KERR_COORDINATOR_NOT_AVAILABLE : KERR_NOT_COORDINATOR;
}

/* A group op another broker coordinates: answered locally with its error
 * (an answer that does not decode is left empty: the connection closes, as
 * when the coordinator finds the body malformed). */
static void group_op_refuse(struct partop *op, int16_t error)
{
	assert(op->kind == PARTOP_GROUP && error != KERR_NONE);
	struct group_wire wi = {op->api_key, op->api_version, op->flex};
	op->local = true;
	if (!sluice_group_error_answer(&op->gout, wi, op->data, op->len, error))
		kwr_free(&op->gout);
}

static void group_op_init(struct req *r, struct partop *op, struct kstr group, const uint8_t *data, size_t len)
{
	assert(op->req == r && op >= r->ops && op < r->ops + r->nops);
	op->kind = PARTOP_GROUP;
	op->topic = SLUICE_OFFSETS_TOPIC;
	op->partition = sluice_group_partition(group.ptr ? group.ptr : "", group.ptr ? (size_t)group.len : 0,
					       r->nc->b->cfg.offsets_topic_partitions);
	op->api_key = r->api_key;
	op->api_version = r->api_version;
	op->flex = r->flexible;
	op->gname = group;
	/* OffsetCommit checks its topics against the request's snapshot, held
	 * until the request is freed (a one-op request: only it gets one). */
	op->gsnap = r->api_key == API_OFFSET_COMMIT ? sluice_proto_snap(r) : NULL;
	/* The request's word on __consumer_offsets (the storage core applies it
	 * when newer than its own) and the min.insync.replicas its records are
	 * held to (the topic's, else the broker's in effect). */
	op->tinfo = sluice_meta_find(sluice_proto_snap(r), SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC));
	op->cfg = sluice_proto_config(r);
	op->client_id = r->client_id;
	op->client_host = r->conn->host;
	op->data = data;
	op->len = (uint32_t)len;
	int16_t e = r->api_key == API_LIST_GROUPS ? KERR_NONE : group_coordinator_error(r, op->partition);
	if (e)
		group_op_refuse(op, e);
}

/* JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetDelete,
 * OffsetFetch v1-7: one group, named first in the body. The coordinator
 * decodes the whole body and encodes the whole response body. */
bool sluice_api_group_single_start(struct req *r, struct krd *rd)
{
	struct krd peek = *rd;
	struct kstr group = krd_string(&peek, r->flexible);
	if (peek.err)
		return *rd = peek, false;
	if (!sluice_proto_ops_alloc(r, 1))
		return false;
	group_op_init(r, &r->ops[0], group, rd->p, krd_left(rd));
	rd->p = rd->end;
	sluice_proto_dispatch(r);
	return true;
}

void sluice_api_group_single_finish(struct req *r)
{
	assert(r->nops == 1 && r->pending == 0);
	struct partop *op = &r->ops[0];
	if (op->gout.len == 0 || op->gout.err) {
		/* the coordinator could not answer: Kafka would drop the connection */
		r->done = true;
		r->no_response = true;
		sluice_conn_close(r->conn);
		return;
	}
	sluice_proto_resp_begin(r);
	kwr_raw(&r->out, op->gout.buf, op->gout.len);
	sluice_proto_resp_end(r);
}

/* DescribeGroups, DeleteGroups, OffsetFetch v8+: one op per group, each
 * answering one element of the response array. */
bool sluice_api_group_multi_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	if (r->api_key == API_OFFSET_FETCH && v < 8)
		return sluice_api_group_single_start(r, rd);
	struct krd scan = *rd;
	int32_t n = krd_array(&scan, flex, 1);
	if (scan.err || n > SLUICE_REQ_PARTITIONS_MAX)
		return *rd = scan, false;
	if (n > 0 && !sluice_proto_ops_alloc(r, n))
		return false;
	(void)krd_array(rd, flex, 1);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		const uint8_t *start = rd->p;
		struct kstr group = krd_string(rd, flex);
		if (r->api_key == API_OFFSET_FETCH) { /* skip the rest of this group's element */
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
	if (r->api_key == API_DESCRIBE_GROUPS && v >= 3)
		(void)krd_bool(rd);
	if (r->api_key == API_OFFSET_FETCH)
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
	sluice_proto_dispatch(r);
	return true;
}

void sluice_api_group_multi_finish(struct req *r)
{
	if (r->api_key == API_OFFSET_FETCH && r->api_version < 8) {
		sluice_api_group_single_finish(r); /* OffsetFetch v1-7 names one group */
		return;
	}
	bool flex = r->flexible;
	int32_t n = *(int32_t *)r->api;
	assert(n == r->nops && r->pending == 0);
	for (int32_t i = 0; i < n; i++)
		if (r->ops[i].gout.len == 0 || r->ops[i].gout.err) {
			/* a group's part did not decode, or could not be answered */
			r->done = true;
			r->no_response = true;
			sluice_conn_close(r->conn);
			return;
		}
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	if (r->api_key == API_DELETE_GROUPS || r->api_version >= 1 || r->api_key == API_OFFSET_FETCH)
		kwr_i32(w, 0); /* ThrottleTimeMs */
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++)
		kwr_raw(w, r->ops[i].gout.buf, r->ops[i].gout.len);
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

/* ListGroups: every storage core lists the groups it coordinates. */
bool sluice_api_list_groups_start(struct req *r, struct krd *rd)
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
	if (!sluice_proto_ops_alloc(r, n))
		return false;
	for (int32_t i = 0; i < n; i++) {
		group_op_init(r, &r->ops[i], (struct kstr){"", 0}, rd->p, krd_left(rd));
		r->ops[i].core_plus1 = (int16_t)(i + 1);
	}
	rd->p = rd->end;
	sluice_proto_dispatch(r);
	return true;
}

void sluice_api_list_groups_finish(struct req *r)
{
	assert(r->nops == r->nc->b->store_n && r->pending == 0); /* one op per storage core */
	bool flex = r->flexible;
	sluice_proto_resp_begin(r);
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
	sluice_proto_resp_end(r);
}

