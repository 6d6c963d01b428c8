/* Kafka's rules for manual replica assignments (control/assignment.h), in
 * the order its controller applies them, so that the first error a
 * request meets is the one Kafka would answer, with Kafka's message. */
#include "control/assignment.h"
#include "common/kafka/errors.h"
#include <assert.h>
#include <stdio.h>

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
