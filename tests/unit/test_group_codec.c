/* The group coordinator's Kafka codec alone (dataplane/group_codec.c), with
 * no coordinator and no storage: each group API's request, written here at
 * the lowest and the highest version the broker serves, decodes into the
 * fields it was written with (repeated parts walked with the iterators), and
 * every cut of it short of its end is refused as malformed. A few answers
 * are checked byte for byte against what Kafka's schema says, including the
 * ErrorCode patch a failed offset write uses. */
#include "common/kafka/codec.h"
#include "dataplane/group_internal.h"
#include <criterion/criterion.h>
#include <string.h>

#define KS(s) ((struct kstr){(s), (int32_t)(sizeof(s) - 1)})

static struct group_wire W(int16_t key, int16_t v, bool flex) { return (struct group_wire){key, v, flex}; }

static void str_is(struct kstr got, const char *want)
{
	if (!want) {
		cr_assert_null(got.ptr);
		return;
	}
	cr_assert_not_null(got.ptr);
	cr_assert_eq(got.len, (int32_t)strlen(want));
	cr_assert(memcmp(got.ptr, want, strlen(want)) == 0, "got %.*s, want %s", got.len, got.ptr, want);
}

static void tags(struct kwr *w, bool flex)
{
	if (flex)
		kwr_tags_empty(w);
}

/* Every cut of body short of its end fails to decode. */
typedef bool (*decode_fn)(struct krd *rd, struct group_wire wi, void *q);
static void cuts_refused(const struct kwr *body, struct group_wire wi, decode_fn decode, void *q)
{
	for (size_t n = 0; n < body->len; n++) {
		struct krd rd;
		krd_init(&rd, body->buf, n);
		cr_assert_not(decode(&rd, wi, q), "api %d v%d: a body cut at %zu of %zu decoded", wi.api_key, wi.version, n,
			      body->len);
		cr_assert(rd.err);
	}
	struct krd rd;
	krd_init(&rd, body->buf, body->len);
	cr_assert(decode(&rd, wi, q), "api %d v%d: the whole body did not decode", wi.api_key, wi.version);
}

/* The decoders through one signature, for cuts_refused. */
static bool any_commit(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_commit_decode(rd, wi, (struct group_commit_req *)q);
}
static bool any_fetch(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_fetch_decode(rd, wi, (struct group_fetch_req *)q);
}
static bool any_heartbeat(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_heartbeat_decode(rd, wi, (struct group_heartbeat_req *)q);
}
static bool any_join(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_join_decode(rd, wi, (struct group_join_req *)q);
}
static bool any_leave(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_leave_decode(rd, wi, (struct group_leave_req *)q);
}
static bool any_list(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_list_decode(rd, wi, (struct group_list_req *)q);
}
static bool any_offset_delete(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_offset_delete_decode(rd, wi, (struct group_offset_delete_req *)q);
}
static bool any_sync(struct krd *rd, struct group_wire wi, void *q)
{
	return sluice_group_sync_decode(rd, wi, (struct group_sync_req *)q);
}

/* ---- JoinGroup: v0 and v9 ---------------------------------------------------------- */

static void join_body(struct kwr *w, int16_t v, bool flex)
{
	kwr_init(w, 256, 1 << 20);
	kwr_cstr(w, flex, "grp");
	kwr_i32(w, 30000);
	if (v >= 1)
		kwr_i32(w, 60000);
	kwr_cstr(w, flex, "");
	if (v >= 5)
		kwr_cstr(w, flex, "inst-1");
	kwr_cstr(w, flex, "consumer");
	kwr_array(w, flex, 2);
	kwr_cstr(w, flex, "range");
	kwr_bytes(w, flex, "\x01\x02", 2);
	tags(w, flex);
	kwr_cstr(w, flex, "roundrobin");
	kwr_bytes(w, flex, NULL, -1);
	tags(w, flex);
	if (v >= 8)
		kwr_cstr(w, flex, "why not");
	tags(w, flex);
}

static void join_check_version(int16_t v, bool flex)
{
	struct kwr body;
	join_body(&body, v, flex);
	struct group_join_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_join_decode(&rd, W(SLUICE_API_JOIN_GROUP, v, flex), &q));
	cr_assert_eq(krd_left(&rd), 0);
	str_is(q.group_id, "grp");
	cr_assert_eq(q.session_timeout_ms, 30000);
	cr_assert_eq(q.rebalance_timeout_ms, v >= 1 ? 60000 : 30000);
	str_is(q.member_id, "");
	str_is(q.instance_id, v >= 5 ? "inst-1" : NULL);
	str_is(q.protocol_type, "consumer");
	cr_assert_eq(q.nprot, 2);
	str_is(q.prot[0].name, "range");
	cr_assert_eq(q.prot[0].meta_len, 2);
	cr_assert(memcmp(q.prot[0].meta, "\x01\x02", 2) == 0);
	str_is(q.prot[1].name, "roundrobin");
	cr_assert_eq(q.prot[1].meta_len, 0); /* null metadata is kept as empty */
	cuts_refused(&body, W(SLUICE_API_JOIN_GROUP, v, flex), any_join, &q);
	kwr_free(&body);
}

Test(group_codec, join_lowest_and_highest) { join_check_version(0, false), join_check_version(9, true); }

/* ---- SyncGroup: v0 and v5 ---------------------------------------------------------- */

static void sync_body(struct kwr *w, int16_t v, bool flex)
{
	kwr_init(w, 256, 1 << 20);
	kwr_cstr(w, flex, "grp");
	kwr_i32(w, 7);
	kwr_cstr(w, flex, "m-1");
	if (v >= 3)
		kwr_cstr(w, flex, NULL);
	if (v >= 5) {
		kwr_cstr(w, flex, "consumer");
		kwr_cstr(w, flex, "range");
	}
	kwr_array(w, flex, 2);
	kwr_cstr(w, flex, "m-1");
	kwr_bytes(w, flex, "abc", 3);
	tags(w, flex);
	kwr_cstr(w, flex, "m-2");
	kwr_bytes(w, flex, "", 0);
	tags(w, flex);
	tags(w, flex);
}

static void sync_check_version(int16_t v, bool flex)
{
	struct kwr body;
	sync_body(&body, v, flex);
	struct group_sync_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_sync_decode(&rd, W(SLUICE_API_SYNC_GROUP, v, flex), &q));
	cr_assert_eq(krd_left(&rd), 0);
	str_is(q.group_id, "grp");
	cr_assert_eq(q.generation, 7);
	str_is(q.member_id, "m-1");
	str_is(q.instance_id, NULL);
	cr_assert_eq(q.nassign, 2);
	struct group_assignment a;
	cr_assert(sluice_group_sync_next(&q, &a));
	str_is(a.member_id, "m-1");
	cr_assert(a.assignment_len == 3 && memcmp(a.assignment, "abc", 3) == 0);
	cr_assert(sluice_group_sync_next(&q, &a));
	str_is(a.member_id, "m-2");
	cr_assert_eq(a.assignment_len, 0);
	cr_assert_not(sluice_group_sync_next(&q, &a));
	cuts_refused(&body, W(SLUICE_API_SYNC_GROUP, v, flex), any_sync, &q);
	kwr_free(&body);
}

Test(group_codec, sync_lowest_and_highest) { sync_check_version(0, false), sync_check_version(5, true); }

/* ---- Heartbeat: v0 and v4 ---------------------------------------------------------- */

static void heartbeat_check_version(int16_t v, bool flex)
{
	struct kwr body;
	kwr_init(&body, 64, 1 << 20);
	kwr_cstr(&body, flex, "grp");
	kwr_i32(&body, 3);
	kwr_cstr(&body, flex, "m-1");
	if (v >= 3)
		kwr_cstr(&body, flex, "inst");
	tags(&body, flex);
	struct group_heartbeat_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_heartbeat_decode(&rd, W(SLUICE_API_HEARTBEAT, v, flex), &q));
	str_is(q.group_id, "grp");
	cr_assert_eq(q.generation, 3);
	str_is(q.member_id, "m-1");
	str_is(q.instance_id, v >= 3 ? "inst" : NULL);
	cuts_refused(&body, W(SLUICE_API_HEARTBEAT, v, flex), any_heartbeat, &q);
	kwr_free(&body);
}

Test(group_codec, heartbeat_lowest_and_highest) { heartbeat_check_version(0, false), heartbeat_check_version(4, true); }

/* ---- LeaveGroup: v0 and v5 --------------------------------------------------------- */

Test(group_codec, leave_lowest_and_highest)
{
	struct kwr body;
	kwr_init(&body, 64, 1 << 20);
	kwr_cstr(&body, false, "grp");
	kwr_cstr(&body, false, "m-1");
	struct group_leave_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_leave_decode(&rd, W(SLUICE_API_LEAVE_GROUP, 0, false), &q));
	str_is(q.group_id, "grp");
	str_is(q.member_id, "m-1");
	cr_assert_eq(q.nmembers, 0);
	cuts_refused(&body, W(SLUICE_API_LEAVE_GROUP, 0, false), any_leave, &q);
	kwr_free(&body);

	kwr_init(&body, 64, 1 << 20);
	kwr_cstr(&body, true, "grp");
	kwr_array(&body, true, 2);
	kwr_cstr(&body, true, "m-1");
	kwr_cstr(&body, true, NULL);
	kwr_cstr(&body, true, "done");
	kwr_tags_empty(&body);
	kwr_cstr(&body, true, "");
	kwr_cstr(&body, true, "inst-2");
	kwr_cstr(&body, true, NULL);
	kwr_tags_empty(&body);
	kwr_tags_empty(&body);
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_leave_decode(&rd, W(SLUICE_API_LEAVE_GROUP, 5, true), &q));
	cr_assert_eq(krd_left(&rd), 0);
	str_is(q.group_id, "grp");
	cr_assert_eq(q.nmembers, 2);
	struct group_leave_member m;
	cr_assert(sluice_group_leave_next(&q, &m));
	str_is(m.member_id, "m-1");
	str_is(m.instance_id, NULL);
	cr_assert(sluice_group_leave_next(&q, &m));
	str_is(m.member_id, "");
	str_is(m.instance_id, "inst-2");
	cr_assert_not(sluice_group_leave_next(&q, &m));
	cuts_refused(&body, W(SLUICE_API_LEAVE_GROUP, 5, true), any_leave, &q);
	kwr_free(&body);
}

/* ---- OffsetCommit: v2 and v9 ------------------------------------------------------- */

static void commit_body(struct kwr *w, int16_t v, bool flex)
{
	kwr_init(w, 256, 1 << 20);
	kwr_cstr(w, flex, "grp");
	kwr_i32(w, 4);
	kwr_cstr(w, flex, "m-1");
	if (v >= 7)
		kwr_cstr(w, flex, "inst");
	if (v >= 2 && v <= 4)
		kwr_i64(w, -1);
	kwr_array(w, flex, 2);
	kwr_cstr(w, flex, "t1");
	kwr_array(w, flex, 2);
	for (int32_t p = 0; p < 2; p++) {
		kwr_i32(w, p);
		kwr_i64(w, 100 + p);
		if (v >= 6)
			kwr_i32(w, 5);
		kwr_cstr(w, flex, p ? NULL : "meta");
		tags(w, flex);
	}
	tags(w, flex);
	kwr_cstr(w, flex, "t2");
	kwr_array(w, flex, 0);
	tags(w, flex);
	tags(w, flex);
}

static void commit_check_version(int16_t v, bool flex)
{
	struct kwr body;
	commit_body(&body, v, flex);
	struct group_wire wi = W(SLUICE_API_OFFSET_COMMIT, v, flex);
	struct group_commit_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_commit_decode(&rd, wi, &q));
	cr_assert_eq(krd_left(&rd), 0);
	str_is(q.group_id, "grp");
	cr_assert_eq(q.generation, 4);
	str_is(q.member_id, "m-1");
	str_is(q.instance_id, v >= 7 ? "inst" : NULL);
	cr_assert_eq(q.topics.count, 2);
	struct kstr topic;
	int32_t np;
	struct group_partition p;
	cr_assert(sluice_group_topics_next(&q.topics, &topic, &np));
	str_is(topic, "t1");
	cr_assert_eq(np, 2);
	for (int32_t i = 0; i < 2; i++) {
		cr_assert(sluice_group_topics_partition(&q.topics, &p));
		cr_assert_eq(p.partition, i);
		cr_assert_eq(p.offset, 100 + i);
		cr_assert_eq(p.leader_epoch, v >= 6 ? 5 : -1);
		str_is(p.metadata, i ? NULL : "meta");
	}
	cr_assert_not(sluice_group_topics_partition(&q.topics, &p));
	cr_assert(sluice_group_topics_next(&q.topics, &topic, &np));
	str_is(topic, "t2");
	cr_assert_eq(np, 0);
	cr_assert_not(sluice_group_topics_next(&q.topics, &topic, &np));
	cr_assert_not(q.topics.rd.err);
	cuts_refused(&body, wi, any_commit, &q);
	kwr_free(&body);
}

Test(group_codec, commit_lowest_and_highest) { commit_check_version(2, false), commit_check_version(9, true); }

/* ---- OffsetFetch: v1 and v9 (one group's part of the request) ------------------------- */

static void fetch_body(struct kwr *w, int16_t v, bool flex, bool all)
{
	kwr_init(w, 256, 1 << 20);
	kwr_cstr(w, flex, "grp");
	if (v >= 9) {
		kwr_cstr(w, flex, "m-1");
		kwr_i32(w, 2);
	}
	if (all) {
		kwr_array(w, flex, -1);
	} else {
		kwr_array(w, flex, 1);
		kwr_cstr(w, flex, "t1");
		kwr_array(w, flex, 3);
		for (int32_t p = 0; p < 3; p++)
			kwr_i32(w, p * 2);
		tags(w, flex);
	}
	if (v == 7)
		kwr_bool(w, true);
	tags(w, flex);
}

static void fetch_check_version(int16_t v, bool flex)
{
	struct kwr body;
	fetch_body(&body, v, flex, false);
	struct group_wire wi = W(SLUICE_API_OFFSET_FETCH, v, flex);
	struct group_fetch_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_fetch_decode(&rd, wi, &q));
	cr_assert_eq(krd_left(&rd), 0);
	str_is(q.group_id, "grp");
	struct kstr topic;
	int32_t np;
	struct group_partition p;
	cr_assert(sluice_group_topics_next(&q.topics, &topic, &np));
	str_is(topic, "t1");
	cr_assert_eq(np, 3);
	for (int32_t i = 0; i < 3; i++) {
		cr_assert(sluice_group_topics_partition(&q.topics, &p));
		cr_assert_eq(p.partition, i * 2);
	}
	cr_assert_not(sluice_group_topics_next(&q.topics, &topic, &np));
	cuts_refused(&body, wi, any_fetch, &q);
	kwr_free(&body);
	if (!flex)
		return;
	/* null Topics: every committed offset */
	fetch_body(&body, v, flex, true);
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_fetch_decode(&rd, wi, &q));
	cr_assert_eq(q.topics.count, -1);
	cr_assert_not(sluice_group_topics_next(&q.topics, &topic, &np));
	kwr_free(&body);
}

Test(group_codec, fetch_lowest_and_highest)
{
	fetch_check_version(1, false);
	fetch_check_version(7, true);
	fetch_check_version(9, true);
}

/* ---- OffsetDelete: v0 only; ListGroups: v0 and v5 ------------------------------------- */

Test(group_codec, offset_delete_v0)
{
	struct kwr body;
	kwr_init(&body, 64, 1 << 20);
	kwr_cstr(&body, false, "grp");
	kwr_array(&body, false, 1);
	kwr_cstr(&body, false, "t1");
	kwr_array(&body, false, 1);
	kwr_i32(&body, 9);
	struct group_wire wi = W(SLUICE_API_OFFSET_DELETE, 0, false);
	struct group_offset_delete_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_offset_delete_decode(&rd, wi, &q));
	str_is(q.group_id, "grp");
	struct kstr topic;
	int32_t np;
	struct group_partition p;
	cr_assert(sluice_group_topics_next(&q.topics, &topic, &np));
	str_is(topic, "t1");
	cr_assert(np == 1 && sluice_group_topics_partition(&q.topics, &p) && p.partition == 9);
	cuts_refused(&body, wi, any_offset_delete, &q);
	kwr_free(&body);
}

Test(group_codec, list_lowest_and_highest)
{
	struct group_list_req q;
	struct krd rd;
	krd_init(&rd, "", 0);
	cr_assert(sluice_group_list_decode(&rd, W(SLUICE_API_LIST_GROUPS, 0, false), &q));
	cr_assert_eq(q.nstates, -1);
	struct kwr body;
	kwr_init(&body, 64, 1 << 20);
	kwr_array(&body, true, 2);
	kwr_cstr(&body, true, "Stable");
	kwr_cstr(&body, true, "Empty");
	krd_init(&rd, body.buf, body.len);
	cr_assert(sluice_group_list_decode(&rd, W(SLUICE_API_LIST_GROUPS, 5, true), &q));
	cr_assert_eq(q.nstates, 2);
	str_is(q.states[0], "Stable");
	str_is(q.states[1], "Empty");
	cuts_refused(&body, W(SLUICE_API_LIST_GROUPS, 5, true), any_list, &q);
	kwr_free(&body);
}

/* A count that promises more than the body holds is refused before any
 * element is read (no walk over what is not there). */
Test(group_codec, hostile_counts_refused)
{
	struct kwr body;
	kwr_init(&body, 64, 1 << 20);
	kwr_cstr(&body, false, "grp");
	kwr_i32(&body, 1);
	kwr_cstr(&body, false, "m");
	kwr_i64(&body, -1);
	kwr_i32(&body, INT32_MAX); /* Topics */
	struct group_commit_req q;
	struct krd rd;
	krd_init(&rd, body.buf, body.len);
	cr_assert_not(sluice_group_commit_decode(&rd, W(SLUICE_API_OFFSET_COMMIT, 2, false), &q));
	kwr_free(&body);
	kwr_init(&body, 64, 1 << 20);
	kwr_cstr(&body, false, "grp");
	kwr_i32(&body, -2); /* a negative count other than null */
	struct group_offset_delete_req d;
	krd_init(&rd, body.buf, body.len);
	cr_assert_not(sluice_group_offset_delete_decode(&rd, W(SLUICE_API_OFFSET_DELETE, 0, false), &d));
	kwr_free(&body);
}

/* ---- answers ------------------------------------------------------------------ */

/* JoinGroup v0 with an error: Kafka's defaults, no members, byte for byte;
 * v7+ sends null ProtocolType and ProtocolName instead. */
Test(group_codec, join_error_answer_bytes)
{
	struct kwr w;
	struct group_join_result r = {.error = 79, .generation = 5, .member_id = KS("m-1"), .nmembers = 3};
	sluice_group_join_encode(&w, W(SLUICE_API_JOIN_GROUP, 0, false), &r);
	sluice_group_join_end(&w, W(SLUICE_API_JOIN_GROUP, 0, false));
	static const uint8_t v0[] = {0, 79, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 3, 'm', '-', '1', 0, 0, 0, 0};
	cr_assert_eq(w.len, sizeof v0);
	cr_assert(memcmp(w.buf, v0, sizeof v0) == 0);
	kwr_free(&w);
	sluice_group_join_encode(&w, W(SLUICE_API_JOIN_GROUP, 9, true), &r);
	sluice_group_join_end(&w, W(SLUICE_API_JOIN_GROUP, 9, true));
	static const uint8_t v9[] = {0, 0, 0, 0, 0, 79, 0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0, 4, 'm', '-', '1', 1, 0};
	cr_assert_eq(w.len, sizeof v9);
	cr_assert(memcmp(w.buf, v9, sizeof v9) == 0);
	kwr_free(&w);
}

/* An OffsetCommit answer's partition ErrorCode is where the encoder says,
 * and a failed write turns it into NOT_COORDINATOR (16) there. */
Test(group_codec, commit_answer_error_patch)
{
	struct group_wire wi = W(SLUICE_API_OFFSET_COMMIT, 9, true);
	struct kwr w;
	sluice_group_commit_encode(&w, wi);
	sluice_group_topics_encode(&w, wi, 1);
	sluice_group_topic_encode(&w, wi, KS("t"), 1);
	size_t pos = sluice_group_partition_error_encode(&w, wi, 3, 0);
	sluice_group_topic_end(&w, wi);
	sluice_group_offsets_end(&w, wi, 0);
	static const uint8_t want[] = {0, 0, 0, 0, 2, 2, 't', 2, 0, 0, 0, 3, 0, 0, 0, 0, 0};
	cr_assert_eq(w.len, sizeof want);
	cr_assert(memcmp(w.buf, want, sizeof want) == 0);
	cr_assert_eq(pos, 12);
	sluice_group_error_patch(&w, pos, 16);
	cr_assert_eq(kbe16(w.buf + pos), 16);
	sluice_group_error_patch(&w, w.len, 16); /* past the end: left alone */
	cr_assert_eq(w.len, sizeof want);
	kwr_free(&w);
}
