/* Topic names and topic-level configs as Kafka defines them: which names are
 * legal, which config keys exist, which values each accepts, and the
 * overrides parsed into the limits the storage applies. Kept apart from any
 * metadata backend so that the local, file-backed authority and the client
 * of the sluice-controller quorum answer CreateTopics and AlterConfigs with
 * the same checks and the same messages. Pure functions over their inputs. */
#ifndef SLUICE_TOPIC_CONFIG_H
#define SLUICE_TOPIC_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_TOPIC_NAME_MAX 249
#define SLUICE_TOPIC_CONFIGS_MAX 32
#define SLUICE_TOPIC_CONFIG_KEY_MAX 64
#define SLUICE_TOPIC_CONFIG_VALUE_MAX 256

struct sluice_topic_config {
	char key[SLUICE_TOPIC_CONFIG_KEY_MAX];
	char value[SLUICE_TOPIC_CONFIG_VALUE_MAX];
};

/* Topic-level overrides parsed from configs[]; SLUICE_LIMIT_UNSET means
 * "broker default" (-1 is a real value: retention.ms=-1 keeps forever). */
#define SLUICE_LIMIT_UNSET INT64_MIN
struct sluice_topic_limits {
	int64_t segment_bytes;
	int64_t max_message_bytes;
	int64_t retention_ms;
	int64_t retention_bytes;
	int64_t flush_messages;
	int64_t min_insync_replicas;
	int64_t segment_ms;
	int8_t cleanup_compact; /* -1 default (delete), 0 delete, 1 compact */
	bool cleanup_delete;    /* retention applies ("delete" or "compact,delete") */
	int64_t delete_retention_ms;
	int8_t log_append_time; /* message.timestamp.type: -1 broker default, 0 CreateTime, 1 LogAppendTime */
	int64_t min_compaction_lag_ms;
	int64_t max_compaction_lag_ms;
	double min_cleanable_dirty_ratio; /* < 0: unset */
};

/* The topic's cleanup.policy, else the broker's log.cleanup.policy (given
 * as what it says): whether compaction passes run, whether retention does. */
static inline bool sluice_topic_limits_compact(const struct sluice_topic_limits *l, bool broker_compact)
{
	return l->cleanup_compact >= 0 ? l->cleanup_compact == 1 : broker_compact;
}
static inline bool sluice_topic_limits_delete(const struct sluice_topic_limits *l, bool broker_delete)
{
	return l->cleanup_compact >= 0 ? l->cleanup_delete : broker_delete;
}

/* Kafka's throttled replica lists (QuotaConfig): the replicas whose
 * replication traffic the leader, or the follower, limits to the broker's
 * leader.replication.throttled.rate / follower.replication.throttled.rate. */
#define SLUICE_TOPIC_LEADER_THROTTLED "leader.replication.throttled.replicas"
#define SLUICE_TOPIC_FOLLOWER_THROTTLED "follower.replication.throttled.replicas"
/* In value (checked: "*" or "partition:broker,..."), the partitions below
 * partitions that name broker get bit set in flags[partition] ("*": all of
 * them). */
void sluice_topic_throttled_mark(const char *value, int32_t broker, int32_t partitions, uint8_t *flags, uint8_t bit);

/* Kafka's topic-name rule: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
bool sluice_topic_name_valid(const char *name, size_t len);
/* Topic config keys accepted at creation (Kafka's names). */
bool sluice_topic_config_known(const char *key);
/* Check one topic config value; returns 0 or KERR_INVALID_CONFIG with msg. */
int16_t sluice_topic_config_check(const char *key, const char *value, char *msg, size_t msglen);
/* Check configs[0..n): at most SLUICE_TOPIC_CONFIGS_MAX, each known and
 * valid; returns 0 or KERR_INVALID_CONFIG with msg naming the first bad one. */
int16_t sluice_topic_configs_check(const struct sluice_topic_config *configs, int32_t n, char *msg, size_t msglen);
/* Parse a topic's overrides configs[0..n) (already checked) into limits. */
void sluice_topic_limits_parse(struct sluice_topic_limits *limits, const struct sluice_topic_config *configs, int32_t n);

#endif
