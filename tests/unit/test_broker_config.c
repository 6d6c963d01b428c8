/* Dynamic broker configs (control/broker_config.c) and the run-time setter
 * of common/config.c they rest on. Proves that a value set at run time
 * passes the file's checks and updates what derives from it (retention and
 * roll times, the timestamp type, the cleanup policy), leaving the
 * configuration unchanged when refused; that the dynamic keys are Kafka's
 * (listener copies included) with Kafka's types and the broker's ranges;
 * and that the effective configuration is server.properties, then the
 * cluster-wide default, then this broker's own overrides, a value the
 * broker cannot take left out, each level sorted for lookup, the object
 * reference counted and bounded. */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "control/broker_config.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void finished(struct sluice_config *c, const char *const *kv)
{
	char err[256] = "";
	sluice_config_defaults(c);
	for (; kv && kv[0]; kv += 2)
		cr_assert_eq(sluice_config_set(c, kv[0], kv[1], err, sizeof err), 0, "%s", err);
	sluice_log_set_level(SLUICE_LOG_ERROR);
	cr_assert_eq(sluice_config_finish(c, err, sizeof err), 0, "%s", err);
	sluice_log_set_level(SLUICE_LOG_ERROR);
}

/* Proves the run-time setter: derived values follow, a refusal names the
 * key and changes nothing, an unknown key is refused (not warned about). */
Test(config_dynamic, set_at_run_time_derives_and_refuses)
{
	static struct sluice_config c;
	finished(&c, NULL);
	char err[256] = "";
	cr_assert_eq(c.log_retention_ms, 168LL * 3600000);
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.retention.ms", "5000", err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.log_retention_ms, 5000);
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.retention.ms", "-1", err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.log_retention_ms, -1, "keep forever");
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.roll.ms", "60000", err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.log_roll_ms, 60000);
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.roll.ms", "-1", err, sizeof err), -1, "-1 is the file's 'unset'");
	cr_assert_eq(c.log_roll_ms, 60000);
	cr_assert(c.log_cleanup_delete && !c.log_cleanup_compact, "default: delete");
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.cleanup.policy", "compact, delete", err, sizeof err), 0, "%s", err);
	cr_assert(c.log_cleanup_delete && c.log_cleanup_compact);
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.cleanup.policy", "compact", err, sizeof err), 0, "%s", err);
	cr_assert(!c.log_cleanup_delete && c.log_cleanup_compact);
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.cleanup.policy", "compact,", err, sizeof err), -1);
	cr_assert(strstr(err, "log.cleanup.policy"), "%s", err);
	cr_assert(!c.log_cleanup_delete && c.log_cleanup_compact, "unchanged after a refusal");
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.message.timestamp.type", "LogAppendTime", err, sizeof err), 0);
	cr_assert(c.log_append_time);
	cr_assert_eq(sluice_config_set_dynamic(&c, "log.message.timestamp.type", "Later", err, sizeof err), -1);
	cr_assert(c.log_append_time && !strcmp(c.message_timestamp_type, "LogAppendTime"));
	cr_assert_eq(sluice_config_set_dynamic(&c, "message.max.bytes", "-5", err, sizeof err), -1);
	cr_assert(strstr(err, "message.max.bytes") && strstr(err, "out of range"), "%s", err);
	cr_assert_eq(c.message_max_bytes, 1048588);
	cr_assert_eq(sluice_config_set_dynamic(&c, "compression.type", "gzip", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set_dynamic(&c, "compression.type", "brotli", err, sizeof err), -1);
	cr_assert_str_eq(c.compression_type, "gzip");
	cr_assert_eq(sluice_config_set_dynamic(&c, "no.such.key", "1", err, sizeof err), -1);
	cr_assert(strstr(err, "no.such.key"), "%s", err);
	int32_t frames = c.pool_large_frame_bytes;
	cr_assert_eq(sluice_config_set_dynamic(&c, "message.max.bytes", "5000000", err, sizeof err), 0, "%s", err);
	cr_assert_eq(c.pool_large_frame_bytes, frames, "pools are sized at start only");
	cr_assert_str_eq(sluice_config_default("log.cleanup.policy"), "delete");
	cr_assert_null(sluice_config_default("no.such.key"));
}

static int16_t check(const char *name, const char *value, char *msg, size_t len)
{
	bool per_broker;
	const struct sluice_broker_key *k = sluice_broker_key_find(name, &per_broker);
	if (!k)
		return -1;
	return sluice_broker_config_check(k, name, value, msg, len);
}

/* Proves the table of dynamic keys and the value checks: Kafka's keys,
 * listener copies of the per-broker and listener-level ones only, Kafka's
 * types, then the broker's ranges for its own properties; which keys take
 * effect; the synonyms. */
Test(broker_config, keys_and_checks)
{
	bool pb;
	cr_assert_not_null(sluice_broker_key_find("message.max.bytes", &pb));
	cr_assert(!pb);
	cr_assert_not_null(sluice_broker_key_find("ssl.keystore.location", &pb));
	cr_assert(pb, "SSL settings belong to one broker");
	cr_assert_not_null(sluice_broker_key_find("listener.name.internal.max.connections", &pb));
	cr_assert(!pb, "a listener's connection quota may be cluster-wide");
	cr_assert_null(sluice_broker_key_find("listener.name.internal.message.max.bytes", &pb));
	cr_assert_null(sluice_broker_key_find("log.dirs", &pb));
	cr_assert_null(sluice_broker_key_find("listener.name..ssl.key.password", &pb));
	cr_assert_eq(sluice_broker_key_find("ssl.key.password", &pb)->type, 'p');
	char msg[512];
	cr_assert_eq(check("message.max.bytes", "2000", msg, sizeof msg), 0, "%s", msg);
	cr_assert_eq(check("message.max.bytes", "2k", msg, sizeof msg), KERR_INVALID_CONFIG);
	cr_assert(strstr(msg, "Invalid value 2k for configuration message.max.bytes"), "%s", msg);
	cr_assert_eq(check("log.segment.bytes", "100000", msg, sizeof msg), KERR_INVALID_CONFIG, "Sluice's 1 MiB minimum");
	cr_assert(strstr(msg, "log.segment.bytes") && strstr(msg, "out of range"), "%s", msg);
	cr_assert_eq(check("log.flush.interval.ms", "-1", msg, sizeof msg), KERR_INVALID_CONFIG, "Kafka's minimum 0");
	cr_assert_eq(check("log.preallocate", "TRUE", msg, sizeof msg), 0, "%s", msg);
	cr_assert_eq(check("num.io.threads", "8", msg, sizeof msg), 0, "not a Sluice property: Kafka's check: %s", msg);
	cr_assert_eq(check("log.cleaner.min.cleanable.ratio", "0.25", msg, sizeof msg), 0, "%s", msg);
	cr_assert_eq(check("log.cleaner.min.cleanable.ratio", "2", msg, sizeof msg), KERR_INVALID_CONFIG);
	cr_assert(sluice_broker_config_applied("message.max.bytes"));
	cr_assert(sluice_broker_config_applied("log.cleanup.policy"));
	cr_assert(!sluice_broker_config_applied("num.io.threads"));
	cr_assert(!sluice_broker_config_applied("leader.replication.throttled.rate"));
	const char *syn[SLUICE_BROKER_SYNONYMS_MAX];
	cr_assert_eq(sluice_broker_config_synonyms("log.retention.ms", syn), 3);
	cr_assert(!strcmp(syn[0], "log.retention.ms") && !strcmp(syn[2], "log.retention.hours"));
	cr_assert_eq(sluice_broker_config_synonyms("log.retention.minutes", syn), 2);
	cr_assert_str_eq(syn[1], "log.retention.hours");
	cr_assert_eq(sluice_broker_config_synonyms("log.roll.ms", syn), 2);
	cr_assert_eq(sluice_broker_config_synonyms("message.max.bytes", syn), 1);
	cr_assert_str_eq(syn[0], "message.max.bytes");
}

/* Proves the effective configuration: this broker's override beats the
 * cluster-wide default, which beats the file; keys the broker does not
 * apply are kept (and found) but change nothing; a value the broker cannot
 * take is left out; lookups find each level's values; references count;
 * NULL base means the defaults; bounds are refused. */
Test(broker_config, effective_configuration)
{
	static struct sluice_config base;
	const char *file[] = {"message.max.bytes", "1500000", "min.insync.replicas", "2", NULL};
	finished(&base, file);
	const struct sluice_broker_dynamic defaults[] = {
		{"message.max.bytes", "3000"},
		{"log.retention.bytes", "999999"},
		{"num.io.threads", "16"},
		{"log.segment.bytes", "10"}, /* below the broker's minimum: not applied, left out */
	};
	const struct sluice_broker_dynamic own[] = {
		{"message.max.bytes", "2000"},
		{"log.cleanup.policy", "compact"},
	};
	struct sluice_broker_config *bc = sluice_broker_config_build(&base, 7, defaults, 4, own, 2);
	cr_assert_not_null(bc);
	cr_assert_eq(bc->node_id, 7);
	cr_assert_eq(bc->effective.message_max_bytes, 2000, "own beats the default");
	cr_assert_eq(bc->effective.log_retention_bytes, 999999, "the default beats the file");
	cr_assert_eq(bc->effective.min_insync_replicas, 2, "the file where nothing overrides");
	cr_assert_eq(bc->effective.log_segment_bytes, base.log_segment_bytes);
	cr_assert(bc->effective.log_cleanup_compact && !bc->effective.log_cleanup_delete);
	cr_assert_eq(bc->default_n, 3);
	cr_assert_eq(bc->own_n, 2);
	cr_assert_str_eq(sluice_broker_config_get(bc, false, "num.io.threads"), "16");
	cr_assert_null(sluice_broker_config_get(bc, false, "log.segment.bytes"));
	cr_assert_str_eq(sluice_broker_config_get(bc, true, "message.max.bytes"), "2000");
	cr_assert_str_eq(sluice_broker_config_get(bc, false, "message.max.bytes"), "3000");
	cr_assert_null(sluice_broker_config_get(bc, true, "num.io.threads"));
	for (uint32_t i = 1; i < bc->default_n; i++)
		cr_assert_lt(strcmp(bc->defaults[i - 1].name, bc->defaults[i].name), 0, "sorted");
	cr_assert_eq(base.message_max_bytes, 1500000, "the base is not touched");
	sluice_broker_config_ref(bc);
	cr_assert_eq(bc->refs, 2);
	sluice_broker_config_unref(bc);
	sluice_broker_config_unref(bc);
	sluice_broker_config_unref(NULL);

	bc = sluice_broker_config_build(NULL, 1, NULL, 0, own, 1);
	cr_assert_not_null(bc);
	cr_assert_eq(bc->effective.message_max_bytes, 2000);
	cr_assert_eq(bc->effective.log_retention_ms, 168LL * 3600000, "the defaults, derived");
	sluice_broker_config_unref(bc);

	static struct sluice_broker_dynamic many[SLUICE_BROKER_DYNAMIC_CONFIGS_MAX + 1];
	for (size_t i = 0; i < sizeof many / sizeof *many; i++)
		many[i] = (struct sluice_broker_dynamic){"num.io.threads", "1"};
	cr_assert_null(sluice_broker_config_build(&base, 1, many, SLUICE_BROKER_DYNAMIC_CONFIGS_MAX + 1, NULL, 0));
	static char long_value[SLUICE_BROKER_CONFIG_VALUE_MAX + 2];
	memset(long_value, 'x', sizeof long_value - 1);
	const struct sluice_broker_dynamic too_long[] = {{"ssl.cipher.suites", long_value}};
	cr_assert_null(sluice_broker_config_build(&base, 1, NULL, 0, too_long, 1));
}
