/* Between the group coordinator's Kafka codec (group_codec.c) and its state
 * machine (group.c): requests decoded into plain structs, answers encoded
 * from plain results. The codec knows the wire (versions, flexible
 * encodings, which fields a version carries) and nothing of groups; the
 * state machine knows groups and nothing of the wire.
 *
 * Decoding: each decode function reads a whole request body and returns
 * false when it does not decode (rd then says where and why, for the one
 * log line). Repeated parts that may be large (an OffsetCommit's
 * partitions, a LeaveGroup's members) are not copied: the request keeps a
 * reader over them, checked whole by the decode, and the state machine
 * walks it with the iterators below, which cannot fail on a body that
 * decoded. Strings point into the request body (struct kstr, NULs allowed,
 * ptr NULL for Kafka's null); nothing is allocated.
 *
 * Encoding: answers are written in order into the op's buffer, a head,
 * then the repeated elements one by one, then the end, so a large answer
 * needs no table of results first. */
#ifndef SLUICE_GROUP_INTERNAL_H
#define SLUICE_GROUP_INTERNAL_H
#include "common/kafka/codec.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Protocols one JoinGroup may name: more are ignored (read, not kept). */
#define SLUICE_GROUP_PROTOCOLS_MAX 32
/* ListGroups' StatesFilter entries looked at (more are read, not used). */
#define SLUICE_GROUP_LIST_STATES_MAX 8

enum {
	SLUICE_API_OFFSET_COMMIT = 8,
	SLUICE_API_OFFSET_FETCH = 9,
	SLUICE_API_JOIN_GROUP = 11,
	SLUICE_API_HEARTBEAT = 12,
	SLUICE_API_LEAVE_GROUP = 13,
	SLUICE_API_SYNC_GROUP = 14,
	SLUICE_API_DESCRIBE_GROUPS = 15,
	SLUICE_API_LIST_GROUPS = 16,
	SLUICE_API_DELETE_GROUPS = 42,
	SLUICE_API_OFFSET_DELETE = 47,
};

/* How a request came and its answer goes. */
struct group_wire {
	int16_t api_key, version;
	bool flex;
};

const char *sluice_group_api_name(int16_t api_key);

/* ---- repeated parts ------------------------------------------------------------ */

/* A walk over a request's topics and their partitions (OffsetCommit,
 * OffsetFetch, OffsetDelete): next_topic, then next_partition nparts
 * times, then next_topic again. */
struct group_topics {
	struct krd rd;
	struct group_wire wire;
	int32_t count;       /* topics in the request; -1: null (OffsetFetch: every offset) */
	int32_t topics_left, parts_left;
};

struct group_partition {
	int32_t partition;
	int64_t offset;       /* OffsetCommit */
	int32_t leader_epoch; /* OffsetCommit v6+, else -1 */
	struct kstr metadata; /* OffsetCommit */
};

bool sluice_group_topics_next(struct group_topics *it, struct kstr *topic, int32_t *nparts);
bool sluice_group_topics_partition(struct group_topics *it, struct group_partition *p);

/* ---- requests ---------------------------------------------------------------- */

struct group_join_req {
	struct kstr group_id, member_id, instance_id, protocol_type;
	int32_t session_timeout_ms, rebalance_timeout_ms;
	int32_t nprot;
	struct {
		struct kstr name;
		const uint8_t *meta;
		int32_t meta_len;
	} prot[SLUICE_GROUP_PROTOCOLS_MAX];
};

struct group_assignment {
	struct kstr member_id;
	const uint8_t *assignment;
	int32_t assignment_len;
};

struct group_sync_req {
	struct kstr group_id, member_id, instance_id;
	int32_t generation;
	int32_t nassign;
	struct krd assignments; /* the leader's Assignments, nassign of them */
	bool flex;
};

struct group_heartbeat_req {
	struct kstr group_id, member_id, instance_id;
	int32_t generation;
};

struct group_leave_member {
	struct kstr member_id, instance_id;
};

struct group_leave_req {
	struct kstr group_id;
	struct kstr member_id; /* v0-2 */
	int32_t nmembers;      /* v3+ */
	struct krd members;
	struct group_wire wire;
};

struct group_commit_req {
	struct kstr group_id, member_id, instance_id;
	int32_t generation; /* -1 before v1 */
	struct group_topics topics;
};

struct group_fetch_req {
	struct kstr group_id;
	struct group_topics topics;
};

struct group_offset_delete_req {
	struct kstr group_id;
	struct group_topics topics;
};

struct group_list_req {
	int32_t nstates; /* -1: no filter (before v4) */
	struct kstr states[SLUICE_GROUP_LIST_STATES_MAX];
};

bool sluice_group_join_decode(struct krd *rd, struct group_wire wi, struct group_join_req *q);
bool sluice_group_sync_decode(struct krd *rd, struct group_wire wi, struct group_sync_req *q);
bool sluice_group_sync_next(struct group_sync_req *q, struct group_assignment *a);
bool sluice_group_heartbeat_decode(struct krd *rd, struct group_wire wi, struct group_heartbeat_req *q);
bool sluice_group_leave_decode(struct krd *rd, struct group_wire wi, struct group_leave_req *q);
bool sluice_group_leave_next(struct group_leave_req *q, struct group_leave_member *m);
bool sluice_group_commit_decode(struct krd *rd, struct group_wire wi, struct group_commit_req *q);
bool sluice_group_fetch_decode(struct krd *rd, struct group_wire wi, struct group_fetch_req *q);
bool sluice_group_offset_delete_decode(struct krd *rd, struct group_wire wi, struct group_offset_delete_req *q);
bool sluice_group_list_decode(struct krd *rd, struct group_wire wi, struct group_list_req *q);

/* ---- answers ----------------------------------------------------------------- */

/* JoinGroup: the head, then (leader's view, no error) nmembers members,
 * then the end. With an error, generation, protocols and leader are not
 * sent (Kafka's defaults are) and no member follows. */
struct group_join_result {
	int16_t error;
	int32_t generation;
	struct kstr protocol_type, protocol, leader, member_id;
	int32_t nmembers;
};

struct group_join_member {
	struct kstr member_id, instance_id;
	const uint8_t *meta;
	int32_t meta_len;
};

void sluice_group_join_encode(struct kwr *w, struct group_wire wi, const struct group_join_result *r);
void sluice_group_join_member_encode(struct kwr *w, struct group_wire wi, const struct group_join_member *m);
void sluice_group_join_end(struct kwr *w, struct group_wire wi);

struct group_sync_result {
	int16_t error;
	struct kstr protocol_type, protocol;
	const uint8_t *assignment; /* NULL: empty */
	int32_t assignment_len;
};

void sluice_group_sync_encode(struct kwr *w, struct group_wire wi, const struct group_sync_result *r);
void sluice_group_heartbeat_encode(struct kwr *w, struct group_wire wi, int16_t error);

/* LeaveGroup: v0-2 carry error only; v3+ error NONE and nmembers members. */
void sluice_group_leave_encode(struct kwr *w, struct group_wire wi, int16_t error, int32_t nmembers);
void sluice_group_leave_member_encode(struct kwr *w, struct group_wire wi, const struct group_leave_member *m,
				      int16_t error);
void sluice_group_leave_end(struct kwr *w, struct group_wire wi);

/* OffsetCommit, OffsetFetch and OffsetDelete answers share their topic
 * layout: topics_encode (count), then per topic topic_encode and its
 * partitions, then topic_end. */
void sluice_group_commit_encode(struct kwr *w, struct group_wire wi);
void sluice_group_offset_delete_encode(struct kwr *w, struct group_wire wi, int16_t error);
/* OffsetFetch v8+ answers one group: its id comes first. */
void sluice_group_fetch_encode(struct kwr *w, struct group_wire wi, struct kstr group_id);
void sluice_group_topics_encode(struct kwr *w, struct group_wire wi, int32_t count);
void sluice_group_topic_encode(struct kwr *w, struct group_wire wi, struct kstr topic, int32_t nparts);
void sluice_group_topic_end(struct kwr *w, struct group_wire wi);
/* One partition's ErrorCode (OffsetCommit, OffsetDelete): returns where
 * the ErrorCode sits, for sluice_group_error_patch. */
size_t sluice_group_partition_error_encode(struct kwr *w, struct group_wire wi, int32_t partition, int16_t error);

struct group_offset_result {
	int32_t partition;
	int64_t offset; /* -1: none committed */
	int32_t leader_epoch;
	struct kstr metadata;
	int16_t error;
};

void sluice_group_fetch_partition_encode(struct kwr *w, struct group_wire wi, const struct group_offset_result *r);
/* The end of OffsetCommit, OffsetFetch (with its group error) and OffsetDelete. */
void sluice_group_offsets_end(struct kwr *w, struct group_wire wi, int16_t error);
/* Overwrite an ErrorCode already written at pos (a write failed). */
void sluice_group_error_patch(struct kwr *w, size_t pos, int16_t error);
/* Where OffsetDelete's group ErrorCode sits. */
#define SLUICE_GROUP_OFFSET_DELETE_ERROR_POS 0

struct group_describe_result {
	struct kstr group_id, protocol_type, protocol;
	const char *state;
	int32_t nmembers;
};

struct group_describe_member {
	struct kstr member_id, instance_id, client_id, client_host;
	const uint8_t *meta, *assignment; /* NULL: empty */
	int32_t meta_len, assignment_len;
};

void sluice_group_describe_encode(struct kwr *w, struct group_wire wi, const struct group_describe_result *r);
void sluice_group_describe_member_encode(struct kwr *w, struct group_wire wi, const struct group_describe_member *m);
void sluice_group_describe_end(struct kwr *w, struct group_wire wi);

void sluice_group_delete_encode(struct kwr *w, struct group_wire wi, struct kstr group_id, int16_t error);

struct group_list_entry {
	struct kstr group_id, protocol_type;
	const char *state;
};

void sluice_group_list_encode(struct kwr *w, struct group_wire wi);
void sluice_group_list_entry_encode(struct kwr *w, struct group_wire wi, const struct group_list_entry *e);

/* The whole answer to a group request refused before any group is looked
 * at, with error for the group (NOT_COORDINATOR: another broker leads its
 * __consumer_offsets partition; COORDINATOR_NOT_AVAILABLE: none does), as
 * Kafka answers it: body is what a coordinator op carries (the request
 * body, or one group's element of DescribeGroups, DeleteGroups and
 * OffsetFetch v8+). ListGroups is not for a group and is not answered
 * here. False when body does not decode (nothing useful written). */
bool sluice_group_error_answer(struct kwr *w, struct group_wire wi, const uint8_t *body, size_t len, int16_t error);

#endif
