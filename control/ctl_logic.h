/* The active controller's decisions, as pure functions of the committed
 * image (control/image.h), the brokers' heartbeat sessions and the clock:
 * each request either is refused with a Kafka error and a message, or
 * yields the metadata records (control/mrec.h) that carry it out, which
 * the server proposes to the quorum as one command. Nothing here does I/O
 * or keeps time itself, so the rules (registration and incarnations,
 * fencing after broker.session.timeout.ms, unfencing once caught up,
 * leader election from the ISR, then the eligible leader replicas, then,
 * only where the topic allows unclean election, any live replica; replica
 * placement over brokers and racks; preferred-leader rebalancing;
 * controlled shutdown; partition-epoch checks of AlterPartition; producer
 * id blocks) are unit-tested deterministically.
 *
 * The server serialises: it waits for one proposal to commit before it
 * asks for the next decision, so that every decision is taken against the
 * image its records will apply to. Records appended to `out` will take
 * offsets sluice_image_offset(img) + 1 + their index in out, which is how
 * a RegisterBrokerRecord's BrokerEpoch is chosen (as in Kafka: the offset
 * of the record). */
#ifndef SLUICE_CTL_LOGIC_H
#define SLUICE_CTL_LOGIC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "control/assignment.h"
#include "control/image.h"
#include "control/mrec.h"

#define SLUICE_CTL_MSG_MAX 200
#define SLUICE_CTL_PRODUCER_ID_BLOCK 1000 /* ids per AllocateProducerIds, as Kafka */

struct sluice_ctl_config {
	int64_t session_timeout_ms;  /* broker.session.timeout.ms (Kafka: 9000) */
	int32_t default_partitions;  /* num.partitions */
	int16_t default_replication_factor; /* default.replication.factor */
	bool auto_leader_rebalance;  /* auto.leader.rebalance.enable */
};

/* Records to propose; grows up to cap_max (SLUICE_QUORUM_COMMAND_RECORDS_MAX). */
struct sluice_ctl_out {
	struct sluice_mrec *recs;
	size_t n, cap, cap_max;
};
void sluice_ctl_out_init(struct sluice_ctl_out *o, size_t cap_max);
void sluice_ctl_out_free(struct sluice_ctl_out *o);
void sluice_ctl_out_clear(struct sluice_ctl_out *o);
/* A slot for one more record (zeroed), or NULL when cap_max is reached or memory is short. */
struct sluice_mrec *sluice_ctl_out_add(struct sluice_ctl_out *o);

struct sluice_ctl;

struct sluice_ctl *sluice_ctl_new(const struct sluice_ctl_config *cfg, const struct sluice_image *img);
void sluice_ctl_free(struct sluice_ctl *c);

/* This node became the active controller at now_ms: every registered
 * broker gets a fresh session (as if it had just heartbeated), so that
 * nobody is fenced for the election's gap. Sessions are leader-only,
 * in-memory state: a follower keeps none. */
void sluice_ctl_became_leader(struct sluice_ctl *c, int64_t now_ms);

struct sluice_ctl_registration {
	int32_t broker_id;
	const char *cluster_id; /* checked against the controller's: INCONSISTENT_CLUSTER_ID */
	uint8_t incarnation_id[16];
	int32_t endpoint_n;
	struct sluice_mrec_endpoint endpoints[SLUICE_MREC_LISTENERS_MAX];
	const char *rack; /* NULL: none */
	int64_t previous_broker_epoch; /* -1: none; the epoch of a clean shutdown otherwise */
};
/* BrokerRegistration: a new broker, or a known one returning. A different
 * incarnation while the old one's session is alive answers
 * DUPLICATE_BROKER_REGISTRATION, unless previous_broker_epoch equals the
 * registered epoch (the old one shut down cleanly). The broker registers
 * fenced; *epoch_out is its new epoch. */
int16_t sluice_ctl_register(struct sluice_ctl *c, const struct sluice_ctl_registration *r, const char *cluster_id,
			    int64_t now_ms, struct sluice_ctl_out *out, int64_t *epoch_out, char *msg, size_t msglen);

struct sluice_ctl_heartbeat {
	int32_t broker_id;
	int64_t broker_epoch;
	int64_t metadata_offset; /* CurrentMetadataOffset */
	bool want_fence, want_shutdown;
};
struct sluice_ctl_heartbeat_result {
	bool is_caught_up, is_fenced, should_shutdown;
};
/* BrokerHeartbeat: renews the session; unfences a fenced broker whose
 * metadata offset reached its registration (UnfenceBrokerRecord);
 * want_shutdown moves every partition it leads to another ISR member
 * (or marks them leaderless) and sets InControlledShutdown, and answers
 * should_shutdown once it leads nothing. Stale epoch: STALE_BROKER_EPOCH;
 * unknown broker: BROKER_ID_NOT_REGISTERED. */
int16_t sluice_ctl_heartbeat(struct sluice_ctl *c, const struct sluice_ctl_heartbeat *h, int64_t now_ms,
			     struct sluice_ctl_out *out, struct sluice_ctl_heartbeat_result *res);

/* Periodic duties at now_ms (the server calls this every few hundred ms
 * while leader and nothing is in flight): fence brokers whose session
 * expired (FenceBrokerRecord, or BrokerRegistrationChangeRecord) and elect
 * new leaders for what they led; restore preferred leaders of brokers back
 * in service when auto_leader_rebalance. Appends nothing when all is well. */
void sluice_ctl_tick(struct sluice_ctl *c, int64_t now_ms, struct sluice_ctl_out *out);

/* The milliseconds until the next tick has work (a session expiring), or -1. */
int64_t sluice_ctl_next_deadline_ms(const struct sluice_ctl *c, int64_t now_ms);

/* CreateTopics, one topic. */
struct sluice_ctl_new_topic {
	const char *name;
	size_t name_len;
	int32_t partitions;         /* -1: the default */
	int32_t replication_factor; /* -1: the default */
	/* NULL (or no lists): the controller places the partitions. Else
	 * Kafka's manual assignment (control/assignment.h): partitions and
	 * replication_factor must be -1, partition p gets the replicas its
	 * list names (fenced brokers allowed, one active needed), its ISR the
	 * active ones, its leader the first active one. */
	const struct sluice_assignment *assignment;
	const struct sluice_topic_config *configs;
	int32_t config_n;
	const uint8_t *id; /* NULL: a new random id (adoption passes the one found on disk) */
};
/* Placement spreads replicas and leaders over unfenced brokers and racks
 * (Kafka's rack-aware assignment); fewer unfenced brokers than the factor
 * answers INVALID_REPLICATION_FACTOR, as does a factor above
 * SLUICE_REPLICAS_MAX (message saying why; for a manual assignment,
 * lists longer than that). Config names and values are checked with
 * control/topic_config.h. validate_only appends nothing. */
int16_t sluice_ctl_create_topic_spec(struct sluice_ctl *c, const struct sluice_ctl_new_topic *t, bool validate_only,
				     struct sluice_ctl_out *out, uint8_t id_out[16], int32_t *partitions_out, char *msg,
				     size_t msglen);
/* The same without an assignment. */
int16_t sluice_ctl_create_topic(struct sluice_ctl *c, const char *name, size_t name_len, int32_t partitions,
				int32_t replication_factor, const struct sluice_topic_config *configs, int32_t config_n,
				const uint8_t *id, bool validate_only, struct sluice_ctl_out *out, uint8_t id_out[16],
				int32_t *partitions_out, char *msg, size_t msglen);
int16_t sluice_ctl_delete_topic(struct sluice_ctl *c, const char *name, size_t name_len, const uint8_t *id,
				struct sluice_ctl_out *out, uint8_t id_out[16], char *msg, size_t msglen);
/* CreatePartitions: grow to count. assignment NULL (or no lists): the
 * controller places the new partitions; else one list per new partition
 * (a->partition NULL), each of the topic's replication factor, checked as
 * for CreateTopics. */
int16_t sluice_ctl_create_partitions_assigned(struct sluice_ctl *c, const char *name, size_t name_len, int32_t count,
					      const struct sluice_assignment *assignment, bool validate_only,
					      struct sluice_ctl_out *out, char *msg, size_t msglen);
int16_t sluice_ctl_create_partitions(struct sluice_ctl *c, const char *name, size_t name_len, int32_t count,
				     bool validate_only, struct sluice_ctl_out *out, char *msg, size_t msglen);

/* IncrementalAlterConfigs ops (Kafka's numbering). */
enum sluice_ctl_config_op { SLUICE_CTL_SET = 0, SLUICE_CTL_DELETE = 1, SLUICE_CTL_APPEND = 2, SLUICE_CTL_SUBTRACT = 3 };
struct sluice_ctl_config_change {
	const char *name;
	const char *value; /* NULL for DELETE */
	enum sluice_ctl_config_op op;
};
/* A TOPIC resource (name: the topic) or a BROKER resource (name: a broker
 * id, or "" for the cluster-wide default); broker keys that Kafka allows
 * to change dynamically are accepted, others answer INVALID_CONFIG naming
 * the key. `replace` (the old AlterConfigs) drops the overrides not named. */
int16_t sluice_ctl_alter_configs(struct sluice_ctl *c, int8_t resource_type, const char *resource_name,
				 const struct sluice_ctl_config_change *changes, int32_t n, bool replace,
				 bool validate_only, struct sluice_ctl_out *out, char *msg, size_t msglen);

/* AllocateProducerIds: the next block of SLUICE_CTL_PRODUCER_ID_BLOCK ids for
 * a registered, current broker (ProducerIdsRecord). */
int16_t sluice_ctl_allocate_producer_ids(struct sluice_ctl *c, int32_t broker_id, int64_t broker_epoch,
					 struct sluice_ctl_out *out, int64_t *start_out, int32_t *len_out);

/* AlterPartition from a partition's leader: accepted only from the current
 * leader at the current leader epoch (else FENCED_LEADER_EPOCH /
 * NOT_LEADER_OR_FOLLOWER) and the current partition epoch (else
 * INVALID_UPDATE_VERSION); the new ISR must be replicas of the partition
 * and unfenced (else INELIGIBLE_REPLICA). Yields a PartitionChangeRecord. */
struct sluice_ctl_alter_partition {
	int32_t broker_id;
	int64_t broker_epoch;
	uint8_t topic_id[16];
	int32_t partition;
	int32_t leader_epoch;
	int32_t partition_epoch;
	struct sluice_mrec_ids new_isr;
};
int16_t sluice_ctl_alter_partition(struct sluice_ctl *c, const struct sluice_ctl_alter_partition *a,
				   struct sluice_ctl_out *out);

/* AlterPartitionReassignments, one partition (KIP-455, as Kafka's
 * ReplicationControlManager.alterPartitionReassignment). target non-NULL:
 * the replicas the partition should end on, checked as a manual
 * assignment (non-empty, registered brokers, each once:
 * INVALID_REPLICA_ASSIGNMENT) and, without allow_rf_change, of the length
 * the partition is headed for (INVALID_REPLICATION_FACTOR). The targets
 * not yet replicas join the replica list as AddingReplicas and fetch from
 * the leader; the replicas not among the targets stay as RemovingReplicas
 * until every target is in the ISR, when the reassignment completes in
 * the record that says so (an AlterPartition's, usually): the removed
 * replicas go, the leader too if it was one of them, and AddingReplicas
 * and RemovingReplicas are empty again. A reassignment already complete
 * (only the order changes, or every target in the ISR) completes at once.
 * target NULL: cancel the reassignment in progress (none:
 * NO_REASSIGNMENT_IN_PROGRESS): the adding replicas leave the replicas and
 * the ISR; an ISR left empty would need an unclean election, refused
 * unless the topic allows it (INVALID_REPLICA_ASSIGNMENT). Unknown topic
 * or partition: UNKNOWN_TOPIC_OR_PARTITION. Yields at most one
 * PartitionChangeRecord; none when nothing changes. */
int16_t sluice_ctl_reassign(struct sluice_ctl *c, const char *topic, size_t topic_len, int32_t partition,
			    const struct sluice_mrec_ids *target, bool allow_rf_change, struct sluice_ctl_out *out,
			    char *msg, size_t msglen);
/* Whether a reassignment of p is in progress (AddingReplicas or RemovingReplicas not empty). */
bool sluice_ctl_reassigning(const struct sluice_image_partition *p);

#endif
