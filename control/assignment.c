/* Manual replica assignments (control/assignment.h): their wire form in
 * CreateTopics and CreatePartitions, and Kafka's rules, in the order its
 * controller applies them, so that the first error a request meets is the
 * one Kafka would answer, with Kafka's message. */
#include "control/assignment.h"
#include "common/kafka/errors.h"
#include <assert.h>
#include <stdio.h>
#include <string.h>

int16_t sluice_assignment_scan(struct krd *rd, bool flex, bool with_index, struct sluice_assignment_ref *ref, char *msg,
			       size_t msglen)
{
	assert(rd && ref && msg);
	memset(ref, 0, sizeof *ref);
	ref->at = rd->p;
	/* a list's least bytes: its index, an empty array and (flexible) its tags */
	int32_t na = krd_array(rd, flex, (with_index ? 4u : 0u) + (flex ? 2u : 4u));
	int32_t longest = 0;
	for (int32_t a = 0; a < na && !rd->err; a++) {
		if (with_index)
			(void)krd_i32(rd); /* PartitionIndex */
		int32_t nb = krd_array(rd, flex, 4);
		krd_skip(rd, nb > 0 ? (size_t)nb * 4 : 0);
		if (flex)
			krd_tags_skip(rd);
		if (nb > 0)
			ref->ids += nb; /* each took 4 bytes of the frame: no overflow */
		if (a == 0)
			ref->rf = nb > 0 ? nb : 0;
		if (nb > longest)
			longest = nb;
	}
	if (rd->err)
		return 0;
	ref->n = na > 0 ? na : 0;
	if (na > SLUICE_ASSIGNMENT_LISTS_MAX) {
		snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", na, SLUICE_ASSIGNMENT_LISTS_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	if (longest > SLUICE_REPLICAS_MAX) {
		snprintf(msg, msglen, "Replication factor %d is above the limit %d.", longest, SLUICE_REPLICAS_MAX);
		return KERR_INVALID_REPLICATION_FACTOR;
	}
	return 0;
}

void sluice_assignment_decode(const struct sluice_assignment_ref *ref, const uint8_t *end, bool flex, bool with_index,
			      int32_t *partition, int32_t *first, int32_t *ids, struct sluice_assignment *out)
{
	assert(ref && ref->n >= 1 && ref->ids >= 0 && end >= ref->at && first && ids && out);
	assert(partition || !with_index);
	struct krd rd;
	krd_init(&rd, ref->at, (size_t)(end - ref->at));
	int32_t na = krd_array(&rd, flex, 0), k = 0;
	assert(na == ref->n);
	for (int32_t a = 0; a < na && !rd.err; a++) {
		if (with_index)
			partition[a] = krd_i32(&rd);
		first[a] = k;
		int32_t nb = krd_array(&rd, flex, 4);
		for (int32_t i = 0; i < nb && !rd.err; i++) {
			assert(k < ref->ids);
			ids[k++] = krd_i32(&rd);
		}
		if (flex)
			krd_tags_skip(&rd);
	}
	assert(!rd.err && k == ref->ids); /* the bytes scanned before */
	first[na] = k;
	*out = (struct sluice_assignment){.n = na, .partition = with_index ? partition : NULL, .first = first, .ids = ids};
}

int16_t sluice_assignment_check_counts(int32_t num_partitions, int32_t replication_factor, char *msg, size_t msglen)
{
	if (replication_factor != -1) {
		snprintf(msg, msglen, "A manual partition assignment was specified, but replication factor was not set "
			 "to -1.");
		return KERR_INVALID_REQUEST;
	}
	if (num_partitions != -1) {
		snprintf(msg, msglen, "A manual partition assignment was specified, but numPartitions was not set to -1.");
		return KERR_INVALID_REQUEST;
	}
	return 0;
}

/* One list: Kafka's validateManualPartitionAssignment, then the rule that
 * an active broker must be among them. partition: its number, for messages. */
static int16_t check_list(const int32_t *ids, int32_t len, int32_t rf, int32_t partition,
			  const struct sluice_assignment_brokers *b, char *msg, size_t msglen)
{
	if (len <= 0) {
		snprintf(msg, msglen, "The manual partition assignment includes an empty replica list.");
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	if (len > SLUICE_REPLICAS_MAX) {
		snprintf(msg, msglen, "Replication factor %d is above the limit %d.", len, SLUICE_REPLICAS_MAX);
		return KERR_INVALID_REPLICATION_FACTOR;
	}
	/* Sorted, as Kafka checks them: the lowest unknown or repeated id is named. */
	int32_t sorted[SLUICE_REPLICAS_MAX];
	for (int32_t i = 0; i < len; i++) {
		int32_t v = ids[i], j = i;
		for (; j > 0 && sorted[j - 1] > v; j--)
			sorted[j] = sorted[j - 1];
		sorted[j] = v;
	}
	for (int32_t i = 0; i < len; i++) {
		if (!b->registered(b->arg, sorted[i])) {
			snprintf(msg, msglen, "The manual partition assignment includes broker %d, but no such broker is "
				 "registered.", sorted[i]);
			return KERR_INVALID_REPLICA_ASSIGNMENT;
		}
		if (i > 0 && sorted[i] == sorted[i - 1]) {
			snprintf(msg, msglen, "The manual partition assignment includes the broker %d more than once.",
				 sorted[i]);
			return KERR_INVALID_REPLICA_ASSIGNMENT;
		}
	}
	if (rf != -1 && len != rf) {
		snprintf(msg, msglen, "The manual partition assignment includes a partition with %d replica(s), but this is "
			 "not consistent with previous partitions, which have %d replica(s).", len, rf);
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	bool any_active = false;
	for (int32_t i = 0; i < len && !any_active; i++)
		any_active = b->active(b->arg, ids[i]);
	if (!any_active) {
		snprintf(msg, msglen, "All brokers specified in the manual partition assignment for partition %d are "
			 "fenced or in controlled shutdown.", partition);
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	return 0;
}

int16_t sluice_assignment_check(const struct sluice_assignment *a, int32_t rf, int32_t first_partition,
				const struct sluice_assignment_brokers *b, int32_t *order, char *msg, size_t msglen)
{
	assert(a && b && order && msg);
	assert(a->n >= 1 && a->n <= SLUICE_ASSIGNMENT_LISTS_MAX && a->first[0] == 0);
	for (int32_t p = 0; p < a->n; p++)
		order[p] = -1;
	bool outside = false; /* an index past 0..n-1: some partition has no list */
	for (int32_t i = 0; i < a->n; i++) {
		int32_t p = a->partition ? a->partition[i] : i;
		if (p >= 0 && p < a->n) {
			if (order[p] >= 0) {
				snprintf(msg, msglen, "Found multiple manual partition assignments for partition %d", p);
				return KERR_INVALID_REPLICA_ASSIGNMENT;
			}
			order[p] = i;
		} else {
			outside = true;
		}
		int32_t len = sluice_assignment_len(a, i);
		int32_t named = a->partition ? p : first_partition + i;
		int16_t e = check_list(sluice_assignment_list(a, i), len, rf, named, b, msg, msglen);
		if (e)
			return e;
		if (rf == -1)
			rf = len;
	}
	if (outside) {
		snprintf(msg, msglen, "partitions should be a consecutive 0-based integer sequence");
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	for (int32_t p = 0; p < a->n; p++)
		assert(order[p] >= 0); /* n lists, no index twice, none outside: each partition has one */
	return 0;
}
