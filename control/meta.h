/* Cluster metadata as the broker sees it: topics, their partition counts,
 * ids and config overrides, published as immutable snapshots that request
 * handlers read without locks (a reference is taken, the pointer is swapped
 * on change). Changes go through sluice_meta_ops so that the local,
 * file-backed implementation here can later be replaced by a client of the
 * sluice-controller quorum without touching the broker. Deleted topics
 * leave a tombstone (name, id, partition count) until the storage has
 * renamed their directories away, so that a directory found at start is
 * either a live topic's, provably a deleted topic's, or unknown.
 * A snapshot also says who serves what: per partition its leader, leader
 * epoch, replicas, ISR and offline replicas, and the cluster's brokers with
 * their endpoints and racks (the local backend: one node, leader of all).
 * Changes are submitted asynchronously and complete on the backend's own
 * thread once durable and published, so that no network core waits for an
 * fsync (see "asynchronous changes" below). Topic-name and topic-config
 * checks, shared by every backend, are in control/topic_config.h. */
#ifndef SLUICE_META_H
#define SLUICE_META_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "control/broker_config.h"
#include "control/topic_config.h"

#define SLUICE_TOPICS_MAX 100000
#define SLUICE_PARTITIONS_PER_TOPIC_MAX 100000
/* Replicas of one partition: the largest replication factor a backend may report. */
#define SLUICE_REPLICAS_MAX 16
_Static_assert(SLUICE_REPLICAS_MAX == SLUICE_CONFIG_REPLICATION_FACTOR_MAX, "default.replication.factor's range");
#define SLUICE_BROKER_HOST_MAX 255
#define SLUICE_BROKER_RACK_MAX 255

/* A partition's replication here is throttled (its topic's
 * leader./follower.replication.throttled.replicas name this broker's
 * replica of it, or say "*"). */
#define SLUICE_THROTTLE_LEADER 1
#define SLUICE_THROTTLE_FOLLOWER 2

/* One partition as the cluster sees it: node ids, -1 leader for none. */
struct sluice_partition_state {
	uint8_t throttle; /* SLUICE_THROTTLE_* bits for this broker's replica (controller backend) */
	int32_t leader;
	int32_t leader_epoch;
	int32_t partition_epoch; /* bumped by every change of leader, ISR or replicas (AlterPartition checks it) */
	int32_t replica_n, isr_n, offline_n;
	int32_t replicas[SLUICE_REPLICAS_MAX]; /* the assignment, preferred leader first */
	int32_t isr[SLUICE_REPLICAS_MAX];
	int32_t offline[SLUICE_REPLICAS_MAX]; /* replicas on an offline log directory */
	/* Eligible leader replicas (KIP-966: left the ISR cleanly while it was below
	 * min.insync.replicas) and the last known leader, as the controller keeps
	 * them: DescribeTopicPartitions shows them (kafka-topics --describe). */
	int32_t elr_n, last_known_elr_n;
	int32_t elr[SLUICE_REPLICAS_MAX];
	int32_t last_known_elr[SLUICE_REPLICAS_MAX];
};

/* A broker of the cluster and the endpoint clients reach it at. */
struct sluice_meta_broker {
	int32_t node_id;
	int32_t port;
	char host[SLUICE_BROKER_HOST_MAX + 1];
	char rack[SLUICE_BROKER_RACK_MAX + 1]; /* "": none (Kafka's null) */
	/* In controlled shutdown: still listed (Kafka's Metadata lists it) but
	 * no leader asks for it to join an ISR (the controller would refuse:
	 * Kafka's isReplicaIsrEligible). */
	bool shutting_down;
};

/* A snapshot's topics are allocated with room for config_n configs only
 * (configs[] is last): never copy one by value, use the fields. */
struct sluice_topic {
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	uint8_t id[16];
	int32_t partitions;
	int32_t config_n;
	struct sluice_topic_limits limits;
	/* Partition p's state is states[state_n == 1 ? 0 : p]: a backend whose
	 * partitions all look alike (the local one: leader = self) shares one
	 * entry; read it through sluice_topic_partition. Owned by the backend,
	 * valid while a snapshot holding the topic is held. */
	const struct sluice_partition_state *states;
	int32_t state_n; /* 1 or partitions */
	int refs;             /* snapshots holding this (immutable) topic; atomic */
	uint32_t stage_index; /* the metadata writer's bookkeeping while the topic is new */
	struct sluice_topic_config configs[SLUICE_TOPIC_CONFIGS_MAX];
};

struct sluice_meta_snapshot {
	uint64_t version;
	int refs; /* atomic */
	uint32_t topic_n;
	struct sluice_topic **topics; /* sorted by name */
	uint32_t broker_n;
	const struct sluice_meta_broker *brokers; /* sorted by node id, unfenced only; owned by the backend */
	/* The node Metadata names as ControllerId: the local backend this node,
	 * the controller backend the active controller's id (-1 unknown). */
	int32_t controller_id;
	/* The metadata offset this snapshot reflects (controller backend; the
	 * local backend: version). */
	int64_t metadata_offset;
	/* Cluster mode: this broker's dynamic configuration (the cluster-wide
	 * default and its own BROKER overrides over server.properties,
	 * control/broker_config.h), shared by the snapshots published while it
	 * does not change; owned by the backend. NULL: none (the local
	 * backend, or no override): server.properties applies as it is. */
	const struct sluice_broker_config *broker_config;
};

/* The broker configuration a snapshot says is in effect: its dynamic one,
 * else file (the broker's server.properties). */
static inline const struct sluice_config *sluice_meta_config(const struct sluice_meta_snapshot *s,
							      const struct sluice_config *file)
{
	return s && s->broker_config ? &s->broker_config->effective : file;
}

/* Partition p of t (0 <= p < t->partitions), or NULL if the backend has
 * not said (the local one before sluice_meta_local_set_node). */
static inline const struct sluice_partition_state *sluice_topic_partition(const struct sluice_topic *t, int32_t p)
{
	if (!t->states || p < 0 || p >= t->partitions)
		return NULL;
	return &t->states[t->state_n == 1 ? 0 : p];
}

struct sluice_topic_spec {
	const char *name;
	size_t name_len;
	int32_t partitions;        /* -1: broker default */
	int32_t replication_factor; /* -1: broker default */
	int32_t config_n;
	struct sluice_topic_config configs[SLUICE_TOPIC_CONFIGS_MAX];
	const uint8_t *id; /* NULL: a new random topic id (adoption at start passes the one found on disk) */
	/* NULL: the backend places the replicas. Else every partition's one
	 * replica is node *replica_node: adoption at start in cluster mode
	 * (the data is on this broker); the controller backend sends it as
	 * CreateTopics Assignments. The local backend has one node anyway. */
	const int32_t *replica_node;
};

/* ---- asynchronous changes ----------------------------------------------------
 *
 * A request's metadata changes are submitted together as one batch, a struct
 * the caller owns (with its changes[]) until completion. The backend checks
 * and stages every change, makes the batch durable (the local one: one
 * journal append and one fdatasync, shared with the batches queued beside
 * it), publishes the snapshot that shows it, and only then calls done(batch),
 * exactly once, on a thread of its own (never the submitter's): the caller
 * passes the result to the thread that wants it (a network core: a post to
 * its runtime). done may free the batch. A validate-only batch checks each
 * change against the current state and completes without writing anything. */
enum sluice_meta_change_kind {
	SLUICE_META_CREATE_TOPIC = 1,
	SLUICE_META_DELETE_TOPIC,       /* leaves a tombstone (see above) */
	SLUICE_META_CREATE_PARTITIONS,  /* grow to `partitions` (never shrink) */
	SLUICE_META_SET_TOPIC_CONFIGS,  /* replace the overrides by configs[0..config_n) */
	SLUICE_META_ALLOCATE_PRODUCER_ID, /* never handed out before, across restarts */
	SLUICE_META_FORGET_DELETED,     /* storage renamed every directory of topic `id` away */
};

#define SLUICE_META_MSG_MAX 200
/* The largest request body forward() relays. */
#define SLUICE_META_FORWARD_BYTES_MAX (16u << 20)
/* Changes in one batch: a CreateTopics naming every topic the broker may hold fits. */
#define SLUICE_META_BATCH_CHANGES_MAX SLUICE_TOPICS_MAX
/* Changes submitted and not yet completed, over all batches: past it a
 * submit answers SLUICE_META_BUSY. */
#define SLUICE_META_QUEUE_CHANGES_MAX (2 * SLUICE_META_BATCH_CHANGES_MAX)
_Static_assert(SLUICE_META_QUEUE_CHANGES_MAX >= SLUICE_META_BATCH_CHANGES_MAX, "a whole batch fits the queue");
_Static_assert(SLUICE_META_BATCH_CHANGES_MAX >= SLUICE_TOPICS_MAX, "one request may create every topic");

struct sluice_assignment;
struct sluice_meta_change {
	/* Inputs, set by the submitter; what they point to stays valid until done. */
	enum sluice_meta_change_kind kind;
	const char *name; /* the topic: CREATE_TOPIC, DELETE_TOPIC, CREATE_PARTITIONS, SET_TOPIC_CONFIGS */
	size_t name_len;
	int32_t partitions;         /* CREATE_TOPIC (-1: broker default); CREATE_PARTITIONS: the new count */
	int32_t replication_factor; /* CREATE_TOPIC (-1: broker default) */
	const struct sluice_topic_config *configs; /* CREATE_TOPIC, SET_TOPIC_CONFIGS */
	int32_t config_n;
	const uint8_t *id; /* CREATE_TOPIC: NULL for a new random id; FORGET_DELETED: the deleted topic's */
	const int32_t *replica_node; /* CREATE_TOPIC: NULL, or every partition's one replica (as sluice_topic_spec's) */
	/* CREATE_TOPIC (with partitions and replication_factor -1) and
	 * CREATE_PARTITIONS (one list per new partition, no indexes): NULL, or
	 * the request's manual replica assignment (control/assignment.h). The
	 * controller backend sends it as the request's Assignments; the local
	 * one checks it names only this node (Kafka's rules and messages). */
	const struct sluice_assignment *assignment;
	struct sluice_topic *topic_out; /* optional: a full copy of the resulting (or deleted) topic */
	/* Outputs, set by the backend before done. */
	int16_t error; /* Kafka error code; 0: the change happened (validate-only: would happen) */
	char msg[SLUICE_META_MSG_MAX]; /* with error */
	uint8_t topic_id[16];          /* the resulting (or deleted) topic's id and partition count */
	int32_t topic_partitions;
	int64_t producer_id; /* ALLOCATE_PRODUCER_ID; -1 on failure */
};

struct sluice_meta_batch {
	struct sluice_meta_change *changes;
	uint32_t change_n;
	bool validate_only;
	void (*done)(struct sluice_meta_batch *batch);
	void *arg; /* the submitter's */
	/* Output: the version of the snapshot that shows the batch (of the one
	 * it was checked against, if nothing changed). */
	uint64_t version;
	struct sluice_meta_batch *next; /* the backend's while queued */
};

enum sluice_meta_submit_result {
	SLUICE_META_SUBMITTED = 0, /* done will be called */
	SLUICE_META_BUSY,          /* the queue is full: nothing happened, retry later (a retriable error) */
	SLUICE_META_TOO_LARGE,     /* change_n > SLUICE_META_BATCH_CHANGES_MAX: nothing happened */
};

/* The metadata authority the broker talks to. Results are Kafka error codes.
 *
 * Only acquire, release and submit may be called on a network core (the
 * handlers submit through dataplane/proto.c and answer on completion). The
 * synchronous operations below wait for the backend's write (an fsync,
 * seconds for a large batch): they are for start-up code only. Outside batch_begin/batch_commit each is a
 * one-change batch submitted and waited for; between the two, changes are
 * staged on the calling thread, which holds the writer lock meanwhile. */
/* An ISR change a partition's leader asks the controller for (Kafka's
 * AlterPartition), and the controller's answer. The caller owns it until
 * done. */
struct sluice_meta_isr_change {
	/* Inputs. */
	uint8_t topic_id[16];
	int32_t partition;
	int32_t leader_epoch, partition_epoch; /* what the leader holds: the controller checks both */
	int32_t isr_n;
	int32_t isr[SLUICE_REPLICAS_MAX];
	void (*done)(struct sluice_meta_isr_change *c); /* once, on the backend's thread */
	void *arg;
	/* Outputs, set before done: error 0 and the partition as the controller
	 * now has it (leader, leader_epoch, partition_epoch, isr; replicas
	 * are not in the answer), or a Kafka error (INVALID_UPDATE_VERSION,
	 * FENCED_LEADER_EPOCH, NOT_LEADER_OR_FOLLOWER, INELIGIBLE_REPLICA,
	 * REQUEST_TIMED_OUT when no controller answered, ...). */
	int16_t error;
	struct sluice_partition_state result;
};

struct sluice_meta_ops {
	struct sluice_meta_snapshot *(*acquire)(void *self);
	void (*release)(void *self, struct sluice_meta_snapshot *snap);
	/* Optional: whether snap (held by the caller) is still the current
	 * snapshot; a load, no lock, so a network core can keep one snapshot
	 * for its requests and acquire again only when a newer one is out. */
	bool (*is_current)(void *self, const struct sluice_meta_snapshot *snap);
	enum sluice_meta_submit_result (*submit)(void *self, struct sluice_meta_batch *batch);
	int16_t (*create_topic)(void *self, const struct sluice_topic_spec *spec, bool validate_only,
				char *msg, size_t msglen, struct sluice_topic *out);
	int16_t (*delete_topic)(void *self, const char *name, size_t name_len, struct sluice_topic *out,
				char *msg, size_t msglen);
	/* A producer id never handed out before, across restarts; -1 on failure. */
	int64_t (*allocate_producer_id)(void *self);
	/* Grow a topic to count partitions (never shrink). */
	int16_t (*create_partitions)(void *self, const char *name, size_t name_len, int32_t count, bool validate_only,
				     char *msg, size_t msglen);
	/* Replace a topic's config overrides with configs[0..n). */
	int16_t (*set_topic_configs)(void *self, const char *name, size_t name_len,
				     const struct sluice_topic_config *configs, int32_t n, bool validate_only,
				     char *msg, size_t msglen);
	/* Group the changes this thread makes next into one durable write (one
	 * journal append, one fsync) and one published snapshot: batch_begin
	 * takes the writer lock, the changes are staged (each still answers with
	 * its own result), batch_commit persists and publishes them. A non-zero
	 * result of batch_commit (KAFKA_STORAGE_ERROR, msg set) means none of
	 * the staged changes happened. */
	void (*batch_begin)(void *self);
	int16_t (*batch_commit)(void *self, char *msg, size_t msglen);
	/* The storage renamed every directory of deleted topic id away: its
	 * tombstone is no longer needed. */
	void (*forget_deleted)(void *self, const uint8_t id[16]);
	/* Optional (NULL in the local backend): send one Kafka request body
	 * (after the header) as api_key/version to the active controller and
	 * call done on the backend's thread with the response body (after the
	 * correlation id and header tags), or with error set (no controller
	 * reachable: KERR_REQUEST_TIMED_OUT or KERR_NOT_CONTROLLER) and body
	 * NULL. The broker relays DescribeQuorum this way. body is copied; at
	 * most SLUICE_META_FORWARD_BYTES_MAX (else -1). */
	int (*forward)(void *self, int16_t api_key, int16_t api_version, const uint8_t *body, size_t len,
		       void (*done)(void *arg, int16_t error, const uint8_t *resp, size_t resp_len), void *arg);
	/* Optional (NULL in the local backend, whose ISR is this node alone):
	 * send c to the active controller as AlterPartition from this broker
	 * (its id and broker epoch) and call c->done with the answer. Returns
	 * 0, or -1 (not registered, the queue full: nothing sent, done will
	 * not be called). */
	int (*alter_partition)(void *self, struct sluice_meta_isr_change *c);
	/* Optional (NULL in the local backend: always true): whether this
	 * broker may still act on its leaderships at monotonic time now_ms,
	 * its lease from the last heartbeat the controller answered unfenced
	 * (sent less than broker.session.timeout.ms ago, so the controller
	 * cannot have fenced it yet). A broker paused past its session (SIGSTOP,
	 * a stall) finds it expired when it runs again, before any heartbeat
	 * brings the news that its leaderships moved. Any thread. */
	bool (*lease_valid)(void *self, int64_t now_ms);
};

struct sluice_meta {
	const struct sluice_meta_ops *ops;
	void *self;
};

/* Local implementation: a snapshot <dir>/sluice-topics (replaced atomically)
 * and a journal of changes since, <dir>/sluice-topics.journal. Open fails
 * (err says what was found) on a file that does not parse, never treating
 * it as empty. */
int sluice_meta_local_open(struct sluice_meta *m, const char *dir, int32_t default_partitions,
			   char *err, size_t errlen);
void sluice_meta_local_close(struct sluice_meta *m);
/* This broker, as the snapshots describe it: node id (node.id or
 * broker.id), advertised host and port, broker.rack. Every partition's
 * leader is this node, its replicas and ISR [this node], epoch 0. Call
 * once, after open and before other threads use m. */
struct sluice_config;
void sluice_meta_local_set_node(struct sluice_meta *m, const struct sluice_config *cfg);
/* Counters of the local backend's writer, for tests and diagnostics. */
struct sluice_meta_local_stats {
	uint64_t journal_appends; /* each one write and one fdatasync */
	uint64_t snapshot_writes; /* each a rewrite of sluice-topics */
	uint64_t commits;         /* groups of batches staged and committed together */
};
void sluice_meta_local_stats(const struct sluice_meta *m, struct sluice_meta_local_stats *out);
/* Whether open found metadata on disk (false on a first start). */
bool sluice_meta_local_found(const struct sluice_meta *m);
/* The tombstone of deleted topic id, or NULL. */
struct sluice_meta_tombstone {
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	uint8_t id[16];
	int32_t partitions;
};
const struct sluice_meta_tombstone *sluice_meta_local_tombstone(const struct sluice_meta *m, const uint8_t id[16]);
/* Drop every tombstone (start-up, once no directory of a deleted topic is left). */
int sluice_meta_local_forget_all(struct sluice_meta *m);

/* Controller-client implementation (cluster mode: controller.quorum.voters
 * set, process.roles=broker), control/meta_controller.c. It registers this
 * broker with the active controller (BrokerRegistration), heartbeats
 * (BrokerHeartbeat), fetches the metadata log into its own image and
 * publishes snapshots from it (leaders, replicas, ISR, unfenced brokers),
 * and sends each submitted batch's changes to the active controller
 * (CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
 * AllocateProducerIds), completing it once the local image shows the
 * result. Its snapshots also carry this broker's dynamic configuration
 * (the BROKER config records of "" and of its id over cfg, broker_config.h). dir holds its small state (the clean-shutdown epoch). Open
 * starts its threads and returns at once; wait_ready blocks until this
 * broker is registered, caught up with the metadata log and unfenced, or
 * timeout_ms passed (-1 with err saying which step is missing). */
int sluice_meta_controller_open(struct sluice_meta *m, const struct sluice_config *cfg, const char *dir, char *err,
				size_t errlen);
int sluice_meta_controller_wait_ready(struct sluice_meta *m, unsigned timeout_ms, char *err, size_t errlen);
/* Controlled shutdown: ask the controller to move this broker's
 * leadership away (BrokerHeartbeat WantShutDown) and wait until it says
 * ShouldShutDown, or timeout_ms. Returns 0 when the controller agreed. */
int sluice_meta_controller_shutdown(struct sluice_meta *m, unsigned timeout_ms);
void sluice_meta_controller_close(struct sluice_meta *m);
/* fn(arg) on the metadata thread after each snapshot it publishes: the
 * broker wakes its storage cores, which apply a snapshot's leaderships on
 * their next loop turn and would otherwise sleep through it while no
 * request comes (a follower then learns of its new leader up to a sleep
 * late, and the new leader's acks=all writes wait for it). NULL stops the
 * calls: once it returns, no call is under way. */
void sluice_meta_controller_on_publish(struct sluice_meta *m, void (*fn)(void *arg), void *arg);
/* Whether m is the controller backend. */
bool sluice_meta_is_controller(const struct sluice_meta *m);

const struct sluice_topic *sluice_meta_find(const struct sluice_meta_snapshot *s, const char *name, size_t len);
/* A topic id as Kafka prints it: URL-safe base64 without padding (22 chars). */
void sluice_topic_id_base64(const uint8_t id[16], char out[23]);
/* <dir>/partition.metadata, Kafka's "version: 0\ntopic_id: <base64>\n": the
 * topic id a partition directory belongs to. Read returns 1 (id set), 0
 * (absent) or -1 (unreadable or malformed); write replaces it atomically
 * (temp file, rename) and returns 0 or -1. */
int sluice_partition_metadata_read(const char *dir, uint8_t id[16]);
int sluice_partition_metadata_write(const char *dir, const uint8_t id[16]);

#endif
