/* Cluster metadata as the broker sees it: topics, their partition counts,
 * ids and config overrides, published as immutable snapshots that request
 * handlers read without locks (a reference is taken, the pointer is swapped
 * on change). Changes go through sluice_meta_ops so that the local,
 * file-backed implementation here can later be replaced by a client of the
 * sluice-controller quorum without touching the broker. Deleted topics
 * leave a tombstone (name, id, partition count) until the storage has
 * renamed their directories away, so that a directory found at start is
 * either a live topic's, provably a deleted topic's, or unknown. */
#ifndef SLUICE_META_H
#define SLUICE_META_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_TOPIC_NAME_MAX 249
#define SLUICE_TOPIC_CONFIGS_MAX 32
#define SLUICE_TOPIC_CONFIG_KEY_MAX 64
#define SLUICE_TOPIC_CONFIG_VALUE_MAX 256
#define SLUICE_TOPICS_MAX 100000
#define SLUICE_PARTITIONS_PER_TOPIC_MAX 100000

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

/* A snapshot's topics are allocated with room for config_n configs only
 * (configs[] is last): never copy one by value, use the fields. */
struct sluice_topic {
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	uint8_t id[16];
	int32_t partitions;
	int32_t config_n;
	struct sluice_topic_limits limits;
	int refs;             /* snapshots holding this (immutable) topic; atomic */
	uint32_t stage_index; /* the metadata writer's bookkeeping while the topic is new */
	struct sluice_topic_config configs[SLUICE_TOPIC_CONFIGS_MAX];
};

struct sluice_meta_snapshot {
	uint64_t version;
	int refs; /* atomic */
	uint32_t topic_n;
	struct sluice_topic **topics; /* sorted by name */
};

struct sluice_topic_spec {
	const char *name;
	size_t name_len;
	int32_t partitions;        /* -1: broker default */
	int32_t replication_factor; /* -1: broker default */
	int32_t config_n;
	struct sluice_topic_config configs[SLUICE_TOPIC_CONFIGS_MAX];
	const uint8_t *id; /* NULL: a new random topic id (adoption at start passes the one found on disk) */
};

/* The metadata authority the broker talks to. Results are Kafka error codes. */
struct sluice_meta_ops {
	struct sluice_meta_snapshot *(*acquire)(void *self);
	void (*release)(void *self, struct sluice_meta_snapshot *snap);
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

const struct sluice_topic *sluice_meta_find(const struct sluice_meta_snapshot *s, const char *name, size_t len);
/* Kafka's topic-name rule: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
bool sluice_topic_name_valid(const char *name, size_t len);
/* Topic config keys accepted at creation (Kafka's names). */
bool sluice_topic_config_known(const char *key);
/* Check one topic config value; returns 0 or INVALID_CONFIG (40) with msg. */
int16_t sluice_topic_config_check(const char *key, const char *value, char *msg, size_t msglen);
/* Parse a topic's overrides into limits. */
void sluice_topic_limits_parse(struct sluice_topic *t);

/* A topic id as Kafka prints it: URL-safe base64 without padding (22 chars). */
void sluice_topic_id_base64(const uint8_t id[16], char out[23]);
/* <dir>/partition.metadata, Kafka's "version: 0\ntopic_id: <base64>\n": the
 * topic id a partition directory belongs to. Read returns 1 (id set), 0
 * (absent) or -1 (unreadable or malformed); write replaces it atomically
 * (temp file, rename) and returns 0 or -1. */
int sluice_partition_metadata_read(const char *dir, uint8_t id[16]);
int sluice_partition_metadata_write(const char *dir, const uint8_t id[16]);

#endif
