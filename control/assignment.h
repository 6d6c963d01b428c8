/* Manual replica assignments: the Assignments of CreateTopics (each list
 * with its PartitionIndex) and of CreatePartitions (one list per new
 * partition, in order), and Kafka's rules for them (its controller's
 * ReplicationControlManager: createTopic, createPartitions and
 * validateManualPartitionAssignment). Shared by the controller's decisions
 * (control/ctl_logic.c), the broker that forwards them to it
 * (control/meta_controller.c) and the single-node broker
 * (dataplane/api_admin.c), so that every mode refuses the same assignments
 * with the same errors and messages. Pure: the brokers' state is asked
 * through callbacks. */
#ifndef SLUICE_ASSIGNMENT_H
#define SLUICE_ASSIGNMENT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/kafka/codec.h"
#include "control/meta.h"

/* Lists one assignment may hold: one per partition of a topic. */
#define SLUICE_ASSIGNMENT_LISTS_MAX SLUICE_PARTITIONS_PER_TOPIC_MAX

/* As the request gave it. The arrays belong to whoever fills the struct. */
struct sluice_assignment {
	int32_t n;                /* lists; 0: none (the controller places the partitions) */
	const int32_t *partition; /* [n] CreateTopics' PartitionIndex; NULL: list i is the i-th (new) partition */
	const int32_t *first;     /* [n + 1]: list i is ids[first[i] .. first[i + 1]), first[0] == 0 */
	const int32_t *ids;       /* [first[n]] broker ids, the preferred leader first in each list */
};

static inline int32_t sluice_assignment_len(const struct sluice_assignment *a, int32_t i)
{
	return a->first[i + 1] - a->first[i];
}

static inline const int32_t *sluice_assignment_list(const struct sluice_assignment *a, int32_t i)
{
	return a->ids + a->first[i];
}

/* A request's Assignments, found in its frame when the request is decoded
 * (counted and bounded then) and decoded again when the topic is handled,
 * as Configs are. */
struct sluice_assignment_ref {
	const uint8_t *at; /* the array's length */
	int32_t n;         /* lists; 0: none (a null or empty array) */
	int32_t ids;       /* broker ids over all lists (a frame holds fewer than 2^31) */
	int32_t rf;        /* the first list's length */
};

/* The Assignments at rd (with_index: CreateTopics' PartitionIndex before
 * each list; flex: a flexible version), counted into ref. Returns 0, or
 * for the topic's answer the error of a bound passed (more lists than
 * SLUICE_ASSIGNMENT_LISTS_MAX: INVALID_PARTITIONS; a list longer than
 * SLUICE_REPLICAS_MAX: INVALID_REPLICATION_FACTOR) with msg. A malformed
 * array fails rd (ref then means nothing). */
int16_t sluice_assignment_scan(struct krd *rd, bool flex, bool with_index, struct sluice_assignment_ref *ref, char *msg,
			       size_t msglen);

/* The lists scanned into ref (end: the end of the same bytes) decoded into
 * out, over the caller's arrays sized from ref: partition[ref->n] (with
 * index), first[ref->n + 1], ids[ref->ids]. */
void sluice_assignment_decode(const struct sluice_assignment_ref *ref, const uint8_t *end, bool flex, bool with_index,
			      int32_t *partition, int32_t *first, int32_t *ids, struct sluice_assignment *out);

/* What the checks ask about a broker. */
struct sluice_assignment_brokers {
	bool (*registered)(const void *arg, int32_t id);
	bool (*active)(const void *arg, int32_t id); /* Kafka's isActive: unfenced and not shutting down */
	const void *arg;
};

/* CreateTopics: a topic giving Assignments gives NumPartitions and
 * ReplicationFactor -1 (else INVALID_REQUEST, with Kafka's message). */
int16_t sluice_assignment_check_counts(int32_t num_partitions, int32_t replication_factor, char *msg, size_t msglen);

/* Kafka's rules for the lists (a->n >= 1): every list non-empty, of at
 * most SLUICE_REPLICAS_MAX brokers (else INVALID_REPLICATION_FACTOR), each
 * broker registered and named once, all lists of rf brokers (rf -1: of the
 * first list's length, as CreateTopics; CreatePartitions passes the
 * topic's), at least one active broker in each (fenced ones may be named,
 * as in Kafka), and with PartitionIndex given, the indexes 0..n-1 each
 * once. first_partition numbers the lists' partitions in messages when
 * a->partition is NULL (CreatePartitions: the current count). order[n],
 * the caller's, receives for each partition 0..n-1 the index of the list
 * assigning it. Returns 0, or INVALID_REPLICA_ASSIGNMENT (or
 * INVALID_REPLICATION_FACTOR) with msg. */
int16_t sluice_assignment_check(const struct sluice_assignment *a, int32_t rf, int32_t first_partition,
				const struct sluice_assignment_brokers *b, int32_t *order, char *msg, size_t msglen);

#endif
