/* Topic names and topic-level configs (see topic_config.h): the tables of
 * Kafka's topic config keys and of the value types checked, shared by every
 * metadata backend. */
#include "control/topic_config.h"
#include "common/kafka/errors.h"
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const topic_config_keys[] = {
	"cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms",
	"flush.messages", "flush.ms", "index.interval.bytes", "max.compaction.lag.ms",
	"max.message.bytes", "message.timestamp.difference.max.ms", "message.timestamp.type",
	"min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
	"retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
	"segment.ms", "unclean.leader.election.enable", "message.downconversion.enable",
	"message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "local.retention.ms",
	"local.retention.bytes", "remote.storage.enable", SLUICE_TOPIC_LEADER_THROTTLED, SLUICE_TOPIC_FOLLOWER_THROTTLED,
};

bool sluice_topic_config_known(const char *key)
{
	for (size_t i = 0; i < sizeof topic_config_keys / sizeof *topic_config_keys; i++)
		if (strcmp(key, topic_config_keys[i]) == 0)
			return true;
	return false;
}

/* Value types of the topic configs whose values are checked. */
static const struct {
	const char *key;
	char type; /* 'l' long, 'b' boolean, 'p' cleanup policy list, 't' timestamp type, 'r' ratio, 'T' throttled replica list */
	int64_t min;
} config_types[] = {
	{"cleanup.policy", 'p', 0}, {"delete.retention.ms", 'l', 0}, {"file.delete.delay.ms", 'l', 0},
	{"flush.messages", 'l', 1}, {"flush.ms", 'l', 0}, {"index.interval.bytes", 'l', 0},
	{"max.compaction.lag.ms", 'l', 1}, {"max.message.bytes", 'l', 0},
	{"message.timestamp.difference.max.ms", 'l', 0}, {"min.compaction.lag.ms", 'l', 0},
	{"min.insync.replicas", 'l', 1}, {"preallocate", 'b', 0}, {"retention.bytes", 'l', -1},
	{"retention.ms", 'l', -1}, {"segment.bytes", 'l', 14}, {"segment.index.bytes", 'l', 4},
	{"segment.jitter.ms", 'l', 0}, {"segment.ms", 'l', 1}, {"unclean.leader.election.enable", 'b', 0},
	{"message.timestamp.before.max.ms", 'l', 0}, {"message.timestamp.after.max.ms", 'l', 0},
	{"local.retention.ms", 'l', -2}, {"local.retention.bytes", 'l', -2},
	{"message.timestamp.type", 't', 0}, {"min.cleanable.dirty.ratio", 'r', 0},
	{SLUICE_TOPIC_LEADER_THROTTLED, 'T', 0}, {SLUICE_TOPIC_FOLLOWER_THROTTLED, 'T', 0},
};

/* One item of a throttled replica list, trimmed: [start, end). */
static void trim_span(const char **start, const char **end)
{
	while (*start < *end && (**start == ' ' || **start == '\t'))
		(*start)++;
	while (*end > *start && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
		(*end)--;
}

/* Kafka's ThrottledReplicaListValidator: every comma-separated item,
 * trimmed, is empty or digits:digits; or the items joined are "*". */
static bool throttled_ok(const char *value)
{
	bool items_ok = true;
	size_t stars = 0, other = 0;
	for (const char *p = value;;) {
		const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p), *a = p;
		trim_span(&a, &end);
		size_t digits1 = 0, digits2 = 0;
		const char *c = a;
		while (c < end && *c >= '0' && *c <= '9')
			c++, digits1++;
		bool colon = c < end && *c == ':';
		if (colon)
			c++;
		while (c < end && *c >= '0' && *c <= '9')
			c++, digits2++;
		items_ok &= a == end || (digits1 && colon && digits2 && c == end);
		for (const char *x = a; x < end; x++)
			*x == '*' ? stars++ : other++;
		if (!comma)
			break;
		p = comma + 1;
	}
	return items_ok || (stars == 1 && other == 0);
}

void sluice_topic_throttled_mark(const char *value, int32_t broker, int32_t partitions, uint8_t *flags, uint8_t bit)
{
	assert(value && partitions >= 0 && (flags || partitions == 0));
	if (!throttled_ok(value))
		return;
	for (const char *p = value;;) {
		const char *comma = strchr(p, ','), *end = comma ? comma : p + strlen(p), *a = p;
		trim_span(&a, &end);
		if (end - a == 1 && *a == '*') {
			for (int32_t i = 0; i < partitions; i++)
				flags[i] |= bit;
			return;
		}
		char *colon;
		errno = 0;
		long long part = a < end ? strtoll(a, &colon, 10) : -1;
		long long node = part >= 0 && *colon == ':' ? strtoll(colon + 1, NULL, 10) : -1;
		if (!errno && part >= 0 && part < partitions && node == broker)
			flags[part] |= bit;
		if (!comma)
			return;
		p = comma + 1;
	}
}

/* Whether value is of the type config_types[i] names. */
static bool value_ok(size_t i, const char *value)
{
	assert(i < sizeof config_types / sizeof *config_types);
	switch (config_types[i].type) {
	case 'l': {
		char *end;
		errno = 0;
		long long v = strtoll(value, &end, 10);
		return *value && !*end && !errno && v >= config_types[i].min;
	}
	case 'b':
		return !strcmp(value, "true") || !strcmp(value, "false");
	case 'p':
		return !strcmp(value, "delete") || !strcmp(value, "compact") || !strcmp(value, "compact,delete") ||
		       !strcmp(value, "delete,compact") || !strcmp(value, "");
	case 't':
		return !strcmp(value, "CreateTime") || !strcmp(value, "LogAppendTime");
	case 'r': {
		char *end;
		double d = strtod(value, &end);
		return *value && !*end && d >= 0 && d <= 1;
	}
	case 'T':
		return throttled_ok(value);
	}
	assert(!"a config type is handled");
	return false;
}

int16_t sluice_topic_config_check(const char *key, const char *value, char *msg, size_t msglen)
{
	assert(key && value);
	if (!sluice_topic_config_known(key)) {
		snprintf(msg, msglen, "Unknown topic config name: %s", key);
		return KERR_INVALID_CONFIG;
	}
	for (size_t i = 0; i < sizeof config_types / sizeof *config_types; i++) {
		if (strcmp(config_types[i].key, key) == 0 && !value_ok(i, value)) {
			if (config_types[i].type == 'T')
				snprintf(msg, msglen, "Invalid value %s for configuration %s: %s must be the literal '*' or a "
					 "list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:"
					 "[brokerId],...", value, key, key);
			else
				snprintf(msg, msglen, "Invalid value %s for configuration %s", value, key);
			return KERR_INVALID_CONFIG;
		}
	}
	if (!strcmp(key, "segment.bytes")) {
		long long v = atoll(value);
		if (v < 1048576 || v > INT32_MAX) {
			snprintf(msg, msglen, "Invalid value %s for configuration segment.bytes: must be in [1048576, %d]", value, INT32_MAX);
			return KERR_INVALID_CONFIG;
		}
	}
	return 0;
}

int16_t sluice_topic_configs_check(const struct sluice_topic_config *configs, int32_t n, char *msg, size_t msglen)
{
	assert(n >= 0 && (configs || n == 0));
	if (n > SLUICE_TOPIC_CONFIGS_MAX) {
		snprintf(msg, msglen, "More than %d topic config overrides.", SLUICE_TOPIC_CONFIGS_MAX);
		return KERR_INVALID_CONFIG;
	}
	for (int32_t i = 0; i < n; i++) {
		int16_t e = sluice_topic_config_check(configs[i].key, configs[i].value, msg, msglen);
		if (e)
			return e;
	}
	return 0;
}

void sluice_topic_limits_parse(struct sluice_topic_limits *l, const struct sluice_topic_config *configs, int32_t n)
{
	assert(l && (configs || n == 0));
	assert(n >= 0 && n <= SLUICE_TOPIC_CONFIGS_MAX);
	l->segment_bytes = l->max_message_bytes = l->retention_ms = l->retention_bytes = SLUICE_LIMIT_UNSET;
	l->flush_messages = l->min_insync_replicas = l->segment_ms = SLUICE_LIMIT_UNSET;
	l->cleanup_compact = -1;
	l->cleanup_delete = true;
	l->delete_retention_ms = SLUICE_LIMIT_UNSET;
	l->log_append_time = -1;
	l->min_compaction_lag_ms = l->max_compaction_lag_ms = SLUICE_LIMIT_UNSET;
	l->min_cleanable_dirty_ratio = -1;
	for (int32_t i = 0; i < n; i++) {
		const char *k = configs[i].key, *v = configs[i].value;
		if (!strcmp(k, "segment.bytes"))
			l->segment_bytes = atoll(v);
		else if (!strcmp(k, "max.message.bytes"))
			l->max_message_bytes = atoll(v);
		else if (!strcmp(k, "retention.ms"))
			l->retention_ms = atoll(v);
		else if (!strcmp(k, "retention.bytes"))
			l->retention_bytes = atoll(v);
		else if (!strcmp(k, "flush.messages"))
			l->flush_messages = atoll(v);
		else if (!strcmp(k, "segment.ms"))
			l->segment_ms = atoll(v);
		else if (!strcmp(k, "min.insync.replicas"))
			l->min_insync_replicas = atoll(v);
		else if (!strcmp(k, "cleanup.policy")) {
			l->cleanup_compact = strstr(v, "compact") != NULL;
			l->cleanup_delete = strstr(v, "delete") != NULL;
		} else if (!strcmp(k, "delete.retention.ms"))
			l->delete_retention_ms = atoll(v);
		else if (!strcmp(k, "message.timestamp.type"))
			l->log_append_time = !strcmp(v, "LogAppendTime");
		else if (!strcmp(k, "min.compaction.lag.ms"))
			l->min_compaction_lag_ms = atoll(v);
		else if (!strcmp(k, "max.compaction.lag.ms"))
			l->max_compaction_lag_ms = atoll(v);
		else if (!strcmp(k, "min.cleanable.dirty.ratio"))
			l->min_cleanable_dirty_ratio = strtod(v, NULL);
	}
}

bool sluice_topic_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > SLUICE_TOPIC_NAME_MAX)
		return false;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}
