/* The group coordinator's Kafka codec: the request bodies of JoinGroup,
 * SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete,
 * DescribeGroups, DeleteGroups and ListGroups decoded into plain structs,
 * and their answers encoded from plain results, for every version the
 * broker serves (proto.c's table). It exists so the state machine in
 * group.c never reads or writes the wire, and so the codec can be tested on
 * its own (tests/unit/test_group_codec.c). See group_internal.h for the
 * contract: a decode reads the whole body or fails; the iterators over the
 * repeated parts then cannot fail; nothing is allocated here but the
 * answer's buffer. */
#include "dataplane/group_internal.h"
#include <assert.h>

/* Answer buffers: a hint to start with, and the most one may grow to. */
#define ANSWER_HINT_BYTES 256
#define ANSWER_MAX_BYTES (64u << 20)

const char *sluice_group_api_name(int16_t api_key)
{
	switch (api_key) {
	case SLUICE_API_OFFSET_COMMIT: return "OffsetCommit";
	case SLUICE_API_OFFSET_FETCH: return "OffsetFetch";
	case SLUICE_API_JOIN_GROUP: return "JoinGroup";
	case SLUICE_API_HEARTBEAT: return "Heartbeat";
	case SLUICE_API_LEAVE_GROUP: return "LeaveGroup";
	case SLUICE_API_SYNC_GROUP: return "SyncGroup";
	case SLUICE_API_LIST_GROUPS: return "ListGroups";
	case SLUICE_API_OFFSET_DELETE: return "OffsetDelete";
	default: return "group request";
	}
}

/* A non-nullable string field: null is written as "". */
static void put_str_nn(struct kwr *w, bool flex, struct kstr s)
{
	kwr_string(w, flex, s.ptr ? s.ptr : "", s.ptr ? s.len : 0);
}

static void put_bytes_nn(struct kwr *w, bool flex, const uint8_t *p, int32_t len)
{
	kwr_bytes(w, flex, p ? p : (const uint8_t *)"", p ? len : 0);
}

static void answer_init(struct kwr *w)
{
	kwr_init(w, ANSWER_HINT_BYTES, ANSWER_MAX_BYTES);
	assert(w->len == 0);
}

/* ---- topics and partitions ------------------------------------------------------ */

/* The least bytes one partition of the API's request takes. */
static size_t partition_bytes_min(int16_t api_key)
{
	return api_key == SLUICE_API_OFFSET_COMMIT ? 12 : 4;
}

static void topics_start(struct group_topics *it, struct krd *rd, struct group_wire wi)
{
	it->wire = wi;
	it->count = krd_array(rd, wi.flex, 2);
	it->topics_left = it->count > 0 ? it->count : 0;
	it->parts_left = 0;
	it->rd = *rd;
}

bool sluice_group_topics_next(struct group_topics *it, struct kstr *topic, int32_t *nparts)
{
	assert(it->parts_left == 0); /* the last topic's partitions were all read */
	if (it->topics_left == 0 || it->rd.err)
		return false;
	bool flex = it->wire.flex;
	*topic = krd_string(&it->rd, flex);
	int32_t np = krd_array(&it->rd, flex, partition_bytes_min(it->wire.api_key));
	it->topics_left--;
	it->parts_left = np > 0 ? np : 0;
	*nparts = it->parts_left;
	if (it->parts_left == 0 && flex)
		krd_tags_skip(&it->rd); /* the topic's tags */
	if (it->rd.err)
		it->parts_left = it->topics_left = 0;
	return !it->rd.err;
}

bool sluice_group_topics_partition(struct group_topics *it, struct group_partition *p)
{
	if (it->parts_left == 0 || it->rd.err)
		return false;
	struct krd *rd = &it->rd;
	bool flex = it->wire.flex;
	int16_t v = it->wire.version;
	*p = (struct group_partition){.partition = krd_i32(rd), .leader_epoch = -1};
	if (it->wire.api_key == SLUICE_API_OFFSET_COMMIT) {
		p->offset = krd_i64(rd);
		if (v >= 6)
			p->leader_epoch = krd_i32(rd);
		if (v == 1)
			(void)krd_i64(rd); /* CommitTimestamp */
		p->metadata = krd_string(rd, flex);
		if (flex)
			krd_tags_skip(rd);
	}
	if (--it->parts_left == 0 && flex)
		krd_tags_skip(rd); /* the topic's tags */
	if (rd->err)
		it->parts_left = it->topics_left = 0;
	return !rd->err;
}

/* Check the topics part whole (rd is left after it), keeping a walk over
 * it in *it. */
static bool topics_decode(struct krd *rd, struct group_wire wi, struct group_topics *it)
{
	topics_start(it, rd, wi);
	struct group_topics walk = *it;
	struct kstr topic;
	int32_t np;
	struct group_partition p;
	while (sluice_group_topics_next(&walk, &topic, &np))
		while (sluice_group_topics_partition(&walk, &p))
			;
	*rd = walk.rd;
	assert(rd->err || (walk.topics_left == 0 && walk.parts_left == 0));
	return !rd->err;
}

/* ---- requests ---------------------------------------------------------------- */

bool sluice_group_join_decode(struct krd *rd, struct group_wire wi, struct group_join_req *q)
{
	bool flex = wi.flex;
	int16_t v = wi.version;
	q->group_id = krd_string(rd, flex);
	q->session_timeout_ms = krd_i32(rd);
	q->rebalance_timeout_ms = v >= 1 ? krd_i32(rd) : q->session_timeout_ms;
	q->member_id = krd_string(rd, flex);
	q->instance_id = v >= 5 ? krd_string(rd, flex) : (struct kstr){NULL, 0};
	q->protocol_type = krd_string(rd, flex);
	int32_t np = krd_array(rd, flex, 2);
	q->nprot = 0;
	for (int32_t i = 0; i < np && !rd->err; i++) {
		struct kstr name = krd_string(rd, flex);
		const uint8_t *meta;
		int32_t ml = krd_bytes(rd, flex, &meta);
		if (flex)
			krd_tags_skip(rd);
		if (q->nprot < SLUICE_GROUP_PROTOCOLS_MAX && name.ptr) {
			q->prot[q->nprot].name = name;
			q->prot[q->nprot].meta = meta;
			q->prot[q->nprot].meta_len = ml < 0 ? 0 : ml;
			q->nprot++;
		}
	}
	if (v >= 8)
		(void)krd_string(rd, flex); /* Reason */
	if (flex)
		krd_tags_skip(rd);
	assert(q->nprot >= 0 && q->nprot <= SLUICE_GROUP_PROTOCOLS_MAX);
	return !rd->err;
}

bool sluice_group_sync_next(struct group_sync_req *q, struct group_assignment *a)
{
	if (q->nassign == 0 || q->assignments.err)
		return false;
	a->member_id = krd_string(&q->assignments, q->flex);
	a->assignment_len = krd_bytes(&q->assignments, q->flex, &a->assignment);
	if (a->assignment_len < 0)
		a->assignment_len = 0;
	if (q->flex)
		krd_tags_skip(&q->assignments);
	q->nassign--;
	return !q->assignments.err;
}

bool sluice_group_sync_decode(struct krd *rd, struct group_wire wi, struct group_sync_req *q)
{
	bool flex = wi.flex;
	int16_t v = wi.version;
	q->group_id = krd_string(rd, flex);
	q->generation = krd_i32(rd);
	q->member_id = krd_string(rd, flex);
	q->instance_id = v >= 3 ? krd_string(rd, flex) : (struct kstr){NULL, 0};
	if (v >= 5) {
		(void)krd_string(rd, flex); /* ProtocolType */
		(void)krd_string(rd, flex); /* ProtocolName */
	}
	int32_t n = krd_array(rd, flex, 2);
	q->flex = flex;
	q->nassign = n > 0 ? n : 0;
	q->assignments = *rd;
	struct group_sync_req walk = *q;
	struct group_assignment a;
	while (sluice_group_sync_next(&walk, &a))
		;
	*rd = walk.assignments;
	q->assignments.end = rd->p; /* the walk reads exactly the assignments */
	if (flex)
		krd_tags_skip(rd);
	assert(rd->err || walk.nassign == 0);
	return !rd->err;
}

bool sluice_group_heartbeat_decode(struct krd *rd, struct group_wire wi, struct group_heartbeat_req *q)
{
	bool flex = wi.flex;
	q->group_id = krd_string(rd, flex);
	q->generation = krd_i32(rd);
	q->member_id = krd_string(rd, flex);
	q->instance_id = wi.version >= 3 ? krd_string(rd, flex) : (struct kstr){NULL, 0};
	if (flex)
		krd_tags_skip(rd);
	return !rd->err;
}

bool sluice_group_leave_next(struct group_leave_req *q, struct group_leave_member *m)
{
	if (q->nmembers == 0 || q->members.err)
		return false;
	bool flex = q->wire.flex;
	m->member_id = krd_string(&q->members, flex);
	m->instance_id = krd_string(&q->members, flex);
	if (q->wire.version >= 5)
		(void)krd_string(&q->members, flex); /* Reason */
	if (flex)
		krd_tags_skip(&q->members);
	q->nmembers--;
	return !q->members.err;
}

bool sluice_group_leave_decode(struct krd *rd, struct group_wire wi, struct group_leave_req *q)
{
	bool flex = wi.flex;
	*q = (struct group_leave_req){.wire = wi};
	q->group_id = krd_string(rd, flex);
	if (wi.version <= 2) {
		q->member_id = krd_string(rd, flex);
		if (flex)
			krd_tags_skip(rd);
		return !rd->err;
	}
	int32_t n = krd_array(rd, flex, 2);
	q->nmembers = n > 0 ? n : 0;
	q->members = *rd;
	struct group_leave_req walk = *q;
	struct group_leave_member m;
	while (sluice_group_leave_next(&walk, &m))
		;
	*rd = walk.members;
	if (flex)
		krd_tags_skip(rd);
	assert(rd->err || walk.nmembers == 0);
	return !rd->err;
}

bool sluice_group_commit_decode(struct krd *rd, struct group_wire wi, struct group_commit_req *q)
{
	bool flex = wi.flex;
	int16_t v = wi.version;
	assert(wi.api_key == SLUICE_API_OFFSET_COMMIT);
	q->group_id = krd_string(rd, flex);
	q->generation = v >= 1 ? krd_i32(rd) : -1;
	q->member_id = v >= 1 ? krd_string(rd, flex) : (struct kstr){"", 0};
	q->instance_id = v >= 7 ? krd_string(rd, flex) : (struct kstr){NULL, 0};
	if (v >= 2 && v <= 4)
		(void)krd_i64(rd); /* RetentionTimeMs */
	if (!topics_decode(rd, wi, &q->topics))
		return false;
	if (flex)
		krd_tags_skip(rd);
	return !rd->err;
}

bool sluice_group_fetch_decode(struct krd *rd, struct group_wire wi, struct group_fetch_req *q)
{
	bool flex = wi.flex;
	int16_t v = wi.version;
	assert(wi.api_key == SLUICE_API_OFFSET_FETCH);
	q->group_id = krd_string(rd, flex);
	if (v >= 9) { /* MemberId, MemberEpoch of this Groups element */
		(void)krd_string(rd, flex);
		(void)krd_i32(rd);
	}
	if (!topics_decode(rd, wi, &q->topics))
		return false;
	/* v8+: the body is one element of Groups, ending with its tags. */
	if (v == 7)
		(void)krd_bool(rd); /* RequireStable */
	if (flex)
		krd_tags_skip(rd);
	return !rd->err;
}

bool sluice_group_offset_delete_decode(struct krd *rd, struct group_wire wi, struct group_offset_delete_req *q)
{
	assert(wi.api_key == SLUICE_API_OFFSET_DELETE && !wi.flex);
	q->group_id = krd_string(rd, false);
	return topics_decode(rd, wi, &q->topics);
}

bool sluice_group_list_decode(struct krd *rd, struct group_wire wi, struct group_list_req *q)
{
	q->nstates = wi.version >= 4 ? krd_array(rd, wi.flex, 1) : -1;
	for (int32_t i = 0; i < q->nstates && !rd->err; i++) {
		struct kstr s = krd_string(rd, wi.flex);
		if (i < SLUICE_GROUP_LIST_STATES_MAX)
			q->states[i] = s;
	}
	if (q->nstates > SLUICE_GROUP_LIST_STATES_MAX)
		q->nstates = SLUICE_GROUP_LIST_STATES_MAX;
	return !rd->err;
}

/* ---- JoinGroup, SyncGroup, Heartbeat, LeaveGroup answers ----------------------------- */

void sluice_group_join_encode(struct kwr *w, struct group_wire wi, const struct group_join_result *r)
{
	bool flex = wi.flex, err = r->error != 0;
	int16_t v = wi.version;
	answer_init(w);
	if (v >= 2)
		kwr_i32(w, 0); /* ThrottleTimeMs */
	kwr_i16(w, r->error);
	kwr_i32(w, err ? -1 : r->generation);
	if (v >= 7)
		kwr_string(w, flex, err ? NULL : r->protocol_type.ptr, err ? 0 : r->protocol_type.len);
	if (err)
		kwr_cstr(w, flex, v >= 7 ? NULL : ""); /* ProtocolName: nullable since v7 */
	else
		put_str_nn(w, flex, r->protocol);
	put_str_nn(w, flex, err ? (struct kstr){"", 0} : r->leader);
	if (v >= 9)
		kwr_bool(w, false); /* SkipAssignment */
	kwr_string(w, flex, r->member_id.ptr, r->member_id.len);
	assert(r->nmembers >= 0);
	kwr_array(w, flex, err ? 0 : r->nmembers);
}

void sluice_group_join_member_encode(struct kwr *w, struct group_wire wi, const struct group_join_member *m)
{
	bool flex = wi.flex;
	kwr_string(w, flex, m->member_id.ptr, m->member_id.len);
	if (wi.version >= 5)
		kwr_string(w, flex, m->instance_id.ptr, m->instance_id.len);
	put_bytes_nn(w, flex, m->meta, m->meta_len);
	if (flex)
		kwr_tags_empty(w);
}

void sluice_group_join_end(struct kwr *w, struct group_wire wi)
{
	if (wi.flex)
		kwr_tags_empty(w);
}

void sluice_group_sync_encode(struct kwr *w, struct group_wire wi, const struct group_sync_result *r)
{
	bool flex = wi.flex, err = r->error != 0;
	answer_init(w);
	if (wi.version >= 1)
		kwr_i32(w, 0);
	kwr_i16(w, r->error);
	if (wi.version >= 5) {
		kwr_string(w, flex, err ? NULL : r->protocol_type.ptr, err ? 0 : r->protocol_type.len);
		kwr_string(w, flex, err ? NULL : r->protocol.ptr, err ? 0 : r->protocol.len);
	}
	put_bytes_nn(w, flex, err ? NULL : r->assignment, r->assignment_len);
	if (flex)
		kwr_tags_empty(w);
}

void sluice_group_heartbeat_encode(struct kwr *w, struct group_wire wi, int16_t error)
{
	answer_init(w);
	if (wi.version >= 1)
		kwr_i32(w, 0);
	kwr_i16(w, error);
	if (wi.flex)
		kwr_tags_empty(w);
}

void sluice_group_leave_encode(struct kwr *w, struct group_wire wi, int16_t error, int32_t nmembers)
{
	assert(wi.version >= 3 ? error == 0 : nmembers == 0);
	answer_init(w);
	if (wi.version >= 1)
		kwr_i32(w, 0);
	kwr_i16(w, error);
	if (wi.version >= 3)
		kwr_array(w, wi.flex, nmembers);
}

void sluice_group_leave_member_encode(struct kwr *w, struct group_wire wi, const struct group_leave_member *m,
				      int16_t error)
{
	bool flex = wi.flex;
	assert(wi.version >= 3);
	put_str_nn(w, flex, m->member_id);
	kwr_string(w, flex, m->instance_id.ptr, m->instance_id.len);
	kwr_i16(w, error);
	if (flex)
		kwr_tags_empty(w);
}

void sluice_group_leave_end(struct kwr *w, struct group_wire wi)
{
	if (wi.flex)
		kwr_tags_empty(w);
}

/* ---- OffsetCommit, OffsetFetch, OffsetDelete answers --------------------------------- */

void sluice_group_commit_encode(struct kwr *w, struct group_wire wi)
{
	assert(wi.api_key == SLUICE_API_OFFSET_COMMIT);
	answer_init(w);
	if (wi.version >= 3)
		kwr_i32(w, 0);
}

void sluice_group_offset_delete_encode(struct kwr *w, struct group_wire wi, int16_t error)
{
	assert(wi.api_key == SLUICE_API_OFFSET_DELETE);
	answer_init(w);
	kwr_i16(w, error);
	kwr_i32(w, 0);
	assert(w->err || w->len == SLUICE_GROUP_OFFSET_DELETE_ERROR_POS + 6);
}

void sluice_group_fetch_encode(struct kwr *w, struct group_wire wi, struct kstr group_id)
{
	assert(wi.api_key == SLUICE_API_OFFSET_FETCH);
	answer_init(w);
	if (wi.version >= 8)
		put_str_nn(w, wi.flex, group_id);
	else if (wi.version >= 3)
		kwr_i32(w, 0);
}

void sluice_group_topics_encode(struct kwr *w, struct group_wire wi, int32_t count)
{
	assert(count >= 0);
	kwr_array(w, wi.flex, count);
}

void sluice_group_topic_encode(struct kwr *w, struct group_wire wi, struct kstr topic, int32_t nparts)
{
	assert(nparts >= 0);
	put_str_nn(w, wi.flex, topic);
	kwr_array(w, wi.flex, nparts);
}

void sluice_group_topic_end(struct kwr *w, struct group_wire wi)
{
	if (wi.flex)
		kwr_tags_empty(w);
}

size_t sluice_group_partition_error_encode(struct kwr *w, struct group_wire wi, int32_t partition, int16_t error)
{
	assert(wi.api_key == SLUICE_API_OFFSET_COMMIT || wi.api_key == SLUICE_API_OFFSET_DELETE);
	kwr_i32(w, partition);
	size_t pos = w->len;
	kwr_i16(w, error);
	if (wi.flex)
		kwr_tags_empty(w);
	return pos;
}

void sluice_group_fetch_partition_encode(struct kwr *w, struct group_wire wi, const struct group_offset_result *r)
{
	bool flex = wi.flex;
	kwr_i32(w, r->partition);
	kwr_i64(w, r->offset);
	if (wi.version >= 5)
		kwr_i32(w, r->leader_epoch);
	put_str_nn(w, flex, r->metadata);
	kwr_i16(w, r->error);
	if (flex)
		kwr_tags_empty(w);
}

void sluice_group_offsets_end(struct kwr *w, struct group_wire wi, int16_t error)
{
	if (wi.api_key == SLUICE_API_OFFSET_FETCH && wi.version >= 2)
		kwr_i16(w, error);
	else
		assert(error == 0); /* the other answers carry no error here */
	if (wi.flex)
		kwr_tags_empty(w);
}

void sluice_group_error_patch(struct kwr *w, size_t pos, int16_t error)
{
	if (w->err || pos + 2 > w->len)
		return; /* the answer was never whole: it is not sent */
	w->buf[pos] = (uint8_t)((uint16_t)error >> 8);
	w->buf[pos + 1] = (uint8_t)error;
	assert(kbe16(w->buf + pos) == (uint16_t)error);
}

/* ---- DescribeGroups, DeleteGroups, ListGroups answers ---------------------------------- */

void sluice_group_describe_encode(struct kwr *w, struct group_wire wi, const struct group_describe_result *r)
{
	bool flex = wi.flex;
	assert(r->state && r->nmembers >= 0);
	answer_init(w);
	kwr_i16(w, 0);
	put_str_nn(w, flex, r->group_id);
	kwr_cstr(w, flex, r->state);
	put_str_nn(w, flex, r->protocol_type);
	put_str_nn(w, flex, r->protocol);
	kwr_array(w, flex, r->nmembers);
}

void sluice_group_describe_member_encode(struct kwr *w, struct group_wire wi, const struct group_describe_member *m)
{
	bool flex = wi.flex;
	kwr_string(w, flex, m->member_id.ptr, m->member_id.len);
	if (wi.version >= 4)
		kwr_string(w, flex, m->instance_id.ptr, m->instance_id.len);
	put_str_nn(w, flex, m->client_id);
	put_str_nn(w, flex, m->client_host);
	put_bytes_nn(w, flex, m->meta, m->meta_len);
	put_bytes_nn(w, flex, m->assignment, m->assignment_len);
	if (flex)
		kwr_tags_empty(w);
}

void sluice_group_describe_end(struct kwr *w, struct group_wire wi)
{
	if (wi.version >= 3)
		kwr_i32(w, INT32_MIN); /* AuthorizedOperations: not asked for */
	if (wi.flex)
		kwr_tags_empty(w);
}

void sluice_group_delete_encode(struct kwr *w, struct group_wire wi, struct kstr group_id, int16_t error)
{
	answer_init(w);
	put_str_nn(w, wi.flex, group_id);
	kwr_i16(w, error);
	if (wi.flex)
		kwr_tags_empty(w);
}

void sluice_group_list_encode(struct kwr *w, struct group_wire wi)
{
	assert(wi.api_key == SLUICE_API_LIST_GROUPS);
	answer_init(w);
}

void sluice_group_list_entry_encode(struct kwr *w, struct group_wire wi, const struct group_list_entry *e)
{
	bool flex = wi.flex;
	assert(e->state);
	kwr_string(w, flex, e->group_id.ptr, e->group_id.len);
	put_str_nn(w, flex, e->protocol_type);
	if (wi.version >= 4)
		kwr_cstr(w, flex, e->state);
	if (wi.version >= 5)
		kwr_cstr(w, flex, "classic");
	if (flex)
		kwr_tags_empty(w);
}

/* ---- a refusal without a group: NOT_COORDINATOR and the like -------------------------- */

/* OffsetCommit (every partition) and OffsetFetch v1 (every partition,
 * there is no group error before v2) carry the error per partition. */
static void error_partitions(struct kwr *w, struct group_wire wi, struct group_topics *it, int16_t error)
{
	struct kstr topic;
	int32_t np;
	sluice_group_topics_encode(w, wi, it->count > 0 ? it->count : 0);
	while (sluice_group_topics_next(it, &topic, &np)) {
		sluice_group_topic_encode(w, wi, topic, np);
		struct group_partition p;
		while (sluice_group_topics_partition(it, &p)) {
			if (wi.api_key == SLUICE_API_OFFSET_COMMIT) {
				(void)sluice_group_partition_error_encode(w, wi, p.partition, error);
				continue;
			}
			struct group_offset_result r = {p.partition, -1, -1, {"", 0}, error};
			sluice_group_fetch_partition_encode(w, wi, &r);
		}
		sluice_group_topic_end(w, wi);
	}
}

/* The answers of the requests that name one group in their body. */
static bool error_answer_single(struct kwr *w, struct group_wire wi, struct krd *rd, int16_t error)
{
	union {
		struct group_join_req join;
		struct group_sync_req sync;
		struct group_heartbeat_req hb;
		struct group_leave_req leave;
		struct group_commit_req commit;
		struct group_fetch_req fetch;
		struct group_offset_delete_req del;
	} q;
	switch (wi.api_key) {
	case SLUICE_API_JOIN_GROUP:
		if (!sluice_group_join_decode(rd, wi, &q.join))
			return false;
		sluice_group_join_encode(w, wi, &(struct group_join_result){.error = error, .member_id = q.join.member_id});
		sluice_group_join_end(w, wi);
		return true;
	case SLUICE_API_SYNC_GROUP:
		if (!sluice_group_sync_decode(rd, wi, &q.sync))
			return false;
		sluice_group_sync_encode(w, wi, &(struct group_sync_result){.error = error});
		return true;
	case SLUICE_API_HEARTBEAT:
		if (!sluice_group_heartbeat_decode(rd, wi, &q.hb))
			return false;
		sluice_group_heartbeat_encode(w, wi, error);
		return true;
	case SLUICE_API_LEAVE_GROUP:
		if (!sluice_group_leave_decode(rd, wi, &q.leave))
			return false;
		answer_init(w);
		if (wi.version >= 1)
			kwr_i32(w, 0);
		kwr_i16(w, error); /* v3+: the group's error, and no member answered */
		if (wi.version >= 3)
			kwr_array(w, wi.flex, 0);
		sluice_group_leave_end(w, wi);
		return true;
	case SLUICE_API_OFFSET_COMMIT:
		if (!sluice_group_commit_decode(rd, wi, &q.commit))
			return false;
		sluice_group_commit_encode(w, wi);
		error_partitions(w, wi, &q.commit.topics, error);
		sluice_group_offsets_end(w, wi, 0);
		return true;
	case SLUICE_API_OFFSET_FETCH: /* v1-7 here; v8+ names each group in its own part */
		if (!sluice_group_fetch_decode(rd, wi, &q.fetch))
			return false;
		sluice_group_fetch_encode(w, wi, q.fetch.group_id);
		if (wi.version < 2)
			error_partitions(w, wi, &q.fetch.topics, error);
		else
			sluice_group_topics_encode(w, wi, 0);
		sluice_group_offsets_end(w, wi, wi.version >= 2 ? error : 0);
		return true;
	case SLUICE_API_OFFSET_DELETE:
		if (!sluice_group_offset_delete_decode(rd, wi, &q.del))
			return false;
		sluice_group_offset_delete_encode(w, wi, error);
		sluice_group_topics_encode(w, wi, 0);
		sluice_group_offsets_end(w, wi, 0);
		return true;
	default:
		return false;
	}
}

bool sluice_group_error_answer(struct kwr *w, struct group_wire wi, const uint8_t *body, size_t len, int16_t error)
{
	assert(error != 0 && w->len == 0);
	struct krd rd;
	krd_init(&rd, body, len);
	bool multi = wi.api_key == SLUICE_API_DESCRIBE_GROUPS || wi.api_key == SLUICE_API_DELETE_GROUPS ||
		     (wi.api_key == SLUICE_API_OFFSET_FETCH && wi.version >= 8);
	if (!multi)
		return error_answer_single(w, wi, &rd, error);
	if (wi.api_key == SLUICE_API_OFFSET_FETCH) { /* one element of Groups */
		struct group_fetch_req q;
		if (!sluice_group_fetch_decode(&rd, wi, &q))
			return false;
		sluice_group_fetch_encode(w, wi, q.group_id);
		sluice_group_topics_encode(w, wi, 0);
		sluice_group_offsets_end(w, wi, error);
		return true;
	}
	struct kstr group = krd_string(&rd, wi.flex); /* one element of Groups / GroupsNames */
	if (rd.err)
		return false;
	if (wi.api_key == SLUICE_API_DELETE_GROUPS) {
		sluice_group_delete_encode(w, wi, group, error);
		return true;
	}
	answer_init(w);
	kwr_i16(w, error);
	put_str_nn(w, wi.flex, group);
	kwr_cstr(w, wi.flex, ""); /* GroupState, ProtocolType, ProtocolData: Kafka's empty */
	kwr_cstr(w, wi.flex, "");
	kwr_cstr(w, wi.flex, "");
	kwr_array(w, wi.flex, 0);
	sluice_group_describe_end(w, wi);
	return true;
}
