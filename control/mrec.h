/* Cluster metadata records: the subset of Apache Kafka's KRaft metadata
 * records (RegisterBrokerRecord, TopicRecord, PartitionRecord, ...) that a
 * Sluice cluster's state is made of, decoded into plain structs and encoded
 * exactly as Kafka serialises them (frame version, api key, version, the
 * fields, tagged fields). The controllers replicate lists of these records
 * through Raft; brokers receive them as an ordered log with offsets and
 * apply them to their own image (control/image.h), so one codec and one
 * apply function serve both processes. The decoder checks every length
 * against the bytes left and never trusts a count it has not bounded. */
#ifndef SLUICE_MREC_H
#define SLUICE_MREC_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/kafka/codec.h"
#include "control/meta.h"

/* Kafka's metadata record api keys (records/metadata/<Name>Record.json). */
enum sluice_mrec_type {
	SLUICE_MREC_REGISTER_BROKER = 0,
	SLUICE_MREC_UNREGISTER_BROKER = 1,
	SLUICE_MREC_TOPIC = 2,
	SLUICE_MREC_PARTITION = 3,
	SLUICE_MREC_CONFIG = 4,
	SLUICE_MREC_PARTITION_CHANGE = 5,
	SLUICE_MREC_FENCE_BROKER = 7,
	SLUICE_MREC_UNFENCE_BROKER = 8,
	SLUICE_MREC_REMOVE_TOPIC = 9,
	SLUICE_MREC_FEATURE_LEVEL = 12,
	SLUICE_MREC_PRODUCER_IDS = 15,
	SLUICE_MREC_BROKER_REGISTRATION_CHANGE = 17,
	SLUICE_MREC_NO_OP = 20,
};

#define SLUICE_MREC_LISTENERS_MAX 8
#define SLUICE_MREC_NAME_MAX 255       /* listener, config and feature names */
#define SLUICE_MREC_CONFIG_VALUE_MAX 4095
#define SLUICE_MREC_ENCODED_MAX 65536  /* one record, encoded: far above the largest (a PartitionRecord) */

/* Kafka's ConfigResource types as ConfigRecord stores them. */
#define SLUICE_MREC_RESOURCE_TOPIC 2
#define SLUICE_MREC_RESOURCE_BROKER 4 /* ResourceName "": the cluster-wide default */

struct sluice_mrec_endpoint {
	char name[SLUICE_MREC_NAME_MAX + 1]; /* the listener name, e.g. PLAINTEXT */
	char host[SLUICE_BROKER_HOST_MAX + 1];
	uint16_t port;
	int16_t security_protocol; /* Kafka's: 0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL */
};

struct sluice_mrec_register_broker {
	int32_t broker_id;
	uint8_t incarnation_id[16];
	int64_t broker_epoch;
	int32_t endpoint_n;
	struct sluice_mrec_endpoint endpoints[SLUICE_MREC_LISTENERS_MAX];
	char rack[SLUICE_BROKER_RACK_MAX + 1]; /* "": null */
	bool fenced;
	bool in_controlled_shutdown;
};

/* A replica list of a partition; n <= SLUICE_REPLICAS_MAX. */
struct sluice_mrec_ids {
	int32_t n;
	int32_t id[SLUICE_REPLICAS_MAX];
};

struct sluice_mrec_partition {
	int32_t partition_id;
	uint8_t topic_id[16];
	struct sluice_mrec_ids replicas, isr, removing, adding, elr, last_known_elr;
	int32_t leader;
	int8_t leader_recovery_state;
	int32_t leader_epoch;
	int32_t partition_epoch;
};

/* A change to a partition: only the fields marked present change. Applying
 * one bumps the partition epoch, and the leader epoch when it names a
 * leader (even the same one), exactly as Kafka's PartitionChangeRecord is
 * applied. RemovingReplicas and AddingReplicas are a reassignment's
 * (KIP-455): both empty again once it completes or is cancelled. */
struct sluice_mrec_partition_change {
	int32_t partition_id;
	uint8_t topic_id[16];
	bool has_leader, has_isr, has_replicas, has_elr, has_last_known_elr, has_leader_recovery_state;
	bool has_removing, has_adding;
	int32_t leader; /* -1: none */
	struct sluice_mrec_ids isr, replicas, elr, last_known_elr, removing, adding;
	int8_t leader_recovery_state;
};

struct sluice_mrec_config {
	int8_t resource_type; /* SLUICE_MREC_RESOURCE_* */
	char resource_name[SLUICE_TOPIC_NAME_MAX + 1];
	char name[SLUICE_MREC_NAME_MAX + 1];
	bool value_null; /* a null value deletes the override */
	char value[SLUICE_MREC_CONFIG_VALUE_MAX + 1];
};

struct sluice_mrec {
	enum sluice_mrec_type type;
	int16_t version; /* as decoded; encode writes the highest this codec knows */
	union {
		struct sluice_mrec_register_broker register_broker;
		struct { int32_t broker_id; int64_t broker_epoch; } unregister_broker;
		struct { char name[SLUICE_TOPIC_NAME_MAX + 1]; uint8_t topic_id[16]; } topic;
		struct sluice_mrec_partition partition;
		struct sluice_mrec_config config;
		struct sluice_mrec_partition_change partition_change;
		struct { int32_t id; int64_t epoch; } fence_broker, unfence_broker;
		struct { uint8_t topic_id[16]; } remove_topic;
		struct { char name[SLUICE_MREC_NAME_MAX + 1]; int16_t level; } feature_level;
		struct { int32_t broker_id; int64_t broker_epoch; int64_t next_producer_id; } producer_ids;
		struct {
			int32_t broker_id;
			int64_t broker_epoch;
			int8_t fenced;                 /* -1 unchanged, 0 unfenced, 1 fenced */
			int8_t in_controlled_shutdown; /* -1 unchanged, 0 no, 1 yes */
		} broker_registration_change;
	};
};

/* Append r's serialisation to w (Kafka's: frame version 1 as an unsigned
 * varint... exactly what Kafka's MetadataRecordSerde writes). Returns 0, or
 * -1 if r does not fit its own limits (a bug in the caller) or w failed. */
int sluice_mrec_encode(struct kwr *w, const struct sluice_mrec *r);
/* Decode one record occupying exactly p[0..len). Returns 0, or -1 with err
 * naming the api key, version, field and offset that did not parse;
 * unknown api keys and versions are errors, never skipped. */
int sluice_mrec_decode(const uint8_t *p, size_t len, struct sluice_mrec *out, char *err, size_t errlen);
const char *sluice_mrec_type_name(enum sluice_mrec_type t);

#endif
