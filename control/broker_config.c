/* Dynamic broker configs (see broker_config.h): Kafka's table of the keys
 * that change at run time, the value checks, and the effective
 * configuration a broker builds from the two levels of overrides. */
#include "control/broker_config.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

_Static_assert(SLUICE_BROKER_CONFIG_NAME_MAX < SLUICE_CONFIG_STRING_MAX, "a name fits an error message's room");

/* ---- the keys ------------------------------------------------------------------------------ */

/* Kafka 4's DynamicBrokerConfig.AllDynamicConfigs plus the replication
 * throttles of DynamicConfig.Broker; any other key is refused naming it.
 * per_broker: listener, SSL and SASL settings belong to one broker. */
static const struct sluice_broker_key broker_keys[] = {
	/* log defaults (the topic configs' server synonyms, DynamicLogConfig) */
	{"log.segment.bytes", 'i', 14, false, NULL}, {"log.roll.ms", 'l', 1, false, NULL},
	{"log.roll.jitter.ms", 'l', 0, false, NULL}, {"log.index.size.max.bytes", 'i', 4, false, NULL},
	{"log.flush.interval.messages", 'l', 1, false, NULL}, {"log.flush.interval.ms", 'l', 0, false, NULL},
	{"log.retention.bytes", 'l', -1, false, NULL}, {"log.retention.ms", 'l', -1, false, NULL},
	{"message.max.bytes", 'i', 0, false, NULL}, {"log.index.interval.bytes", 'i', 0, false, NULL},
	{"log.cleaner.delete.retention.ms", 'l', 0, false, NULL},
	{"log.cleaner.min.compaction.lag.ms", 'l', 0, false, NULL},
	{"log.cleaner.max.compaction.lag.ms", 'l', 1, false, NULL},
	{"log.segment.delete.delay.ms", 'l', 0, false, NULL}, {"log.cleaner.min.cleanable.ratio", 'd', 0, false, NULL},
	{"log.cleanup.policy", 'L', 0, false, "delete"}, {"unclean.leader.election.enable", 'b', 0, false, NULL},
	{"min.insync.replicas", 'i', 1, false, NULL}, {"compression.type", 's', 0, false, NULL},
	{"compression.gzip.level", 'i', -1, false, NULL}, {"compression.lz4.level", 'i', 1, false, NULL},
	{"compression.zstd.level", 'i', -131072, false, NULL}, {"log.preallocate", 'b', 0, false, NULL},
	{"log.message.timestamp.type", 's', 0, false, NULL},
	{"log.message.timestamp.difference.max.ms", 'l', 0, false, NULL},
	{"log.message.timestamp.before.max.ms", 'l', 0, false, NULL},
	{"log.message.timestamp.after.max.ms", 'l', 0, false, NULL},
	{"log.message.downconversion.enable", 'b', 0, false, NULL}, {"log.local.retention.ms", 'l', -2, false, NULL},
	{"log.local.retention.bytes", 'l', -2, false, NULL},
	/* log cleaner */
	{"log.cleaner.threads", 'i', 0, false, NULL}, {"log.cleaner.dedupe.buffer.size", 'l', 0, false, NULL},
	{"log.cleaner.io.buffer.load.factor", 'd', 0, false, NULL}, {"log.cleaner.io.buffer.size", 'i', 0, false, NULL},
	{"log.cleaner.io.max.bytes.per.second", 'd', 0, false, NULL}, {"log.cleaner.backoff.ms", 'l', 0, false, NULL},
	/* thread pools */
	{"num.io.threads", 'i', 1, false, NULL}, {"num.replica.fetchers", 'i', 1, false, NULL},
	{"num.recovery.threads.per.data.dir", 'i', 1, false, NULL}, {"background.threads", 'i', 1, false, NULL},
	{"num.network.threads", 'i', 1, false, NULL},
	{"metric.reporters", 'L', 0, false, ""},
	/* connection quotas */
	{"max.connections", 'i', 0, false, NULL}, {"max.connection.creation.rate", 'i', 0, false, NULL},
	{"max.connections.per.ip", 'i', 0, false, NULL}, {"max.connections.per.ip.overrides", 's', 0, false, NULL},
	/* producer state */
	{"producer.id.expiration.ms", 'i', 1, false, NULL},
	{"transaction.partition.verification.enable", 'b', 0, false, NULL},
	/* remote storage */
	{"remote.log.index.file.cache.total.size.bytes", 'l', 1, false, NULL},
	{"remote.fetch.max.wait.ms", 'i', 1, false, NULL},
	{"remote.log.manager.copy.max.bytes.per.second", 'l', 1, false, NULL},
	{"remote.log.manager.fetch.max.bytes.per.second", 'l', 1, false, NULL},
	{"remote.list.offsets.request.timeout.ms", 'l', 1, false, NULL},
	/* replication throttles (DynamicConfig.Broker) */
	{"leader.replication.throttled.rate", 'l', 0, false, NULL},
	{"follower.replication.throttled.rate", 'l', 0, false, NULL},
	{"replica.alter.log.dirs.io.max.bytes.per.second", 'l', 0, false, NULL},
	/* listeners, SSL (keystore reload) and SASL: per broker */
	{"listeners", 'L', 0, true, ""}, {"advertised.listeners", 'L', 0, true, ""},
	{"listener.security.protocol.map", 'L', 0, true, ""}, {"principal.builder.class", 's', 0, true, NULL},
	{"ssl.protocol", 's', 0, true, NULL}, {"ssl.provider", 's', 0, true, NULL},
	{"ssl.cipher.suites", 'L', 0, true, ""}, {"ssl.enabled.protocols", 'L', 0, true, ""},
	{"ssl.keystore.type", 's', 0, true, NULL}, {"ssl.keystore.location", 's', 0, true, NULL},
	{"ssl.keystore.password", 'p', 0, true, NULL}, {"ssl.key.password", 'p', 0, true, NULL},
	{"ssl.keystore.certificate.chain", 'p', 0, true, NULL}, {"ssl.keystore.key", 'p', 0, true, NULL},
	{"ssl.truststore.type", 's', 0, true, NULL}, {"ssl.truststore.location", 's', 0, true, NULL},
	{"ssl.truststore.password", 'p', 0, true, NULL}, {"ssl.truststore.certificates", 'p', 0, true, NULL},
	{"ssl.keymanager.algorithm", 's', 0, true, NULL}, {"ssl.trustmanager.algorithm", 's', 0, true, NULL},
	{"ssl.endpoint.identification.algorithm", 's', 0, true, NULL},
	{"ssl.secure.random.implementation", 's', 0, true, NULL}, {"ssl.client.auth", 's', 0, true, NULL},
	{"ssl.engine.factory.class", 's', 0, true, NULL},
	{"sasl.mechanism.inter.broker.protocol", 's', 0, true, NULL}, {"sasl.jaas.config", 'p', 0, true, NULL},
	{"sasl.enabled.mechanisms", 'L', 0, true, ""}, {"sasl.kerberos.service.name", 's', 0, true, NULL},
	{"sasl.kerberos.kinit.cmd", 's', 0, true, NULL}, {"sasl.kerberos.ticket.renew.window.factor", 'd', 0, true, NULL},
	{"sasl.kerberos.ticket.renew.jitter", 'd', 0, true, NULL},
	{"sasl.kerberos.min.time.before.relogin", 'l', 0, true, NULL},
	{"sasl.kerberos.principal.to.local.rules", 'L', 0, true, ""},
	{"sasl.login.refresh.window.factor", 'd', 0, true, NULL}, {"sasl.login.refresh.window.jitter", 'd', 0, true, NULL},
	{"sasl.login.refresh.min.period.seconds", 'i', 0, true, NULL},
	{"sasl.login.refresh.buffer.seconds", 'i', 0, true, NULL},
};

static const struct sluice_broker_key *broker_key_exact(const char *name)
{
	for (size_t i = 0; i < sizeof broker_keys / sizeof *broker_keys; i++)
		if (!strcmp(broker_keys[i].name, name))
			return &broker_keys[i];
	return NULL;
}

/* `listener.name.<listener>.<key>` (and `listener.name.<listener>.<mechanism>.sasl.*`)
 * set one listener's copy of the per-broker keys and of the listener-level
 * connection quotas. */
const struct sluice_broker_key *sluice_broker_key_find(const char *name, bool *per_broker)
{
	static const char prefix[] = "listener.name.";
	assert(name && per_broker);
	const struct sluice_broker_key *k = broker_key_exact(name);
	if (k) {
		*per_broker = k->per_broker;
		return k;
	}
	if (strncmp(name, prefix, sizeof prefix - 1) != 0)
		return NULL;
	const char *rest = strchr(name + sizeof prefix - 1, '.');
	if (!rest || rest == name + sizeof prefix - 1)
		return NULL;
	k = broker_key_exact(++rest);
	const char *dot = strchr(rest, '.');
	if (!k && dot && !strncmp(dot + 1, "sasl.", 5))
		k = broker_key_exact(dot + 1);
	bool listener_level = k && (!strcmp(k->name, "max.connections") || !strcmp(k->name, "max.connection.creation.rate"));
	if (!k || !(k->per_broker || listener_level))
		return NULL;
	*per_broker = !listener_level;
	return k;
}

static bool parse_int64(const char *v, int64_t *out)
{
	char *end;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	*out = x;
	return *v && !*end && !errno;
}

/* Kafka's type and minimum of k. */
static bool kafka_type_ok(const struct sluice_broker_key *k, const char *value)
{
	int64_t x = 0;
	switch (k->type) {
	case 'i':
		return parse_int64(value, &x) && x >= k->min && x <= INT32_MAX;
	case 'l':
		return parse_int64(value, &x) && x >= k->min;
	case 'd': {
		char *end;
		double d = strtod(value, &end);
		return *value && !*end && d >= (double)k->min;
	}
	case 'b':
		return !strcasecmp(value, "true") || !strcasecmp(value, "false");
	default:
		return true;
	}
}

int16_t sluice_broker_config_check(const struct sluice_broker_key *k, const char *name, const char *value, char *msg,
				   size_t msglen)
{
	assert(k && name && value && msg);
	if (!kafka_type_ok(k, value)) {
		snprintf(msg, msglen, "Invalid value %s for configuration %s", value, name);
		return KERR_INVALID_CONFIG;
	}
	if (!sluice_config_default(k->name))
		return 0; /* not a key of server.properties: Kafka's check is all there is */
	/* The broker's own range and checks, on a scratch configuration: a
	 * value the quorum takes is one every broker can apply. */
	struct sluice_config *scratch = malloc(sizeof *scratch);
	if (!scratch) {
		snprintf(msg, msglen, "out of memory checking %s", name);
		return KERR_INVALID_CONFIG;
	}
	sluice_config_defaults(scratch);
	char err[SLUICE_CONFIG_STRING_MAX];
	int16_t e = 0;
	if (sluice_config_derive(scratch, err, sizeof err) < 0 ||
	    sluice_config_set_dynamic(scratch, k->name, value, err, sizeof err) < 0) {
		size_t kl = strlen(k->name);
		const char *why = !strncmp(err, k->name, kl) && err[kl] == ':' ? err + kl + 1 : err; /* named already */
		snprintf(msg, msglen, "Invalid value %s for configuration %s:%s%s", value, name, why == err ? " " : "", why);
		e = KERR_INVALID_CONFIG;
	}
	free(scratch);
	return e;
}

/* The keys a broker applies at run time, each read where it is used from
 * the effective configuration of the request's (or the storage core's)
 * snapshot; docs/configuration.md lists them. */
static const char *const applied_keys[] = {
	"message.max.bytes", "min.insync.replicas", "log.segment.bytes", "log.roll.ms",
	"log.flush.interval.messages", "log.flush.interval.ms", "log.retention.ms", "log.retention.bytes",
	"log.cleanup.policy", "compression.type", "log.message.timestamp.type",
	"log.message.timestamp.before.max.ms", "log.message.timestamp.after.max.ms",
	"log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
	"log.cleaner.min.cleanable.ratio", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
	"max.connections",
};

bool sluice_broker_config_applied(const char *name)
{
	for (size_t i = 0; i < sizeof applied_keys / sizeof *applied_keys; i++)
		if (!strcmp(applied_keys[i], name))
			return true;
	return false;
}

/* Kafka's synonyms (DynamicBrokerConfig.brokerConfigSynonyms) of the keys
 * Sluice has: the more precise name first. */
static const char *const synonym_sets[][SLUICE_BROKER_SYNONYMS_MAX] = {
	{"log.retention.ms", "log.retention.minutes", "log.retention.hours"},
	{"log.roll.ms", "log.roll.hours", NULL},
};

size_t sluice_broker_config_synonyms(const char *name, const char *out[SLUICE_BROKER_SYNONYMS_MAX])
{
	assert(name && out);
	for (size_t s = 0; s < sizeof synonym_sets / sizeof *synonym_sets; s++) {
		for (size_t i = 0; i < SLUICE_BROKER_SYNONYMS_MAX && synonym_sets[s][i]; i++) {
			if (strcmp(synonym_sets[s][i], name) != 0)
				continue;
			/* name first, then the less precise ones after it (Kafka lists
			 * the synonyms a key takes precedence over) */
			size_t n = 0;
			for (size_t j = i; j < SLUICE_BROKER_SYNONYMS_MAX && synonym_sets[s][j]; j++)
				out[n++] = synonym_sets[s][j];
			return n;
		}
	}
	out[0] = name;
	return 1;
}

/* ---- the effective configuration ---------------------------------------------------------- */

static int cmp_dynamic(const void *a, const void *b)
{
	return strcmp(((const struct sluice_broker_dynamic *)a)->name, ((const struct sluice_broker_dynamic *)b)->name);
}

/* Bytes of the strings of v[0..n), NULs included; SIZE_MAX past the maxima. */
static size_t strings_bytes(const struct sluice_broker_dynamic *v, uint32_t n)
{
	size_t total = 0;
	for (uint32_t i = 0; i < n; i++) {
		size_t nl = strnlen(v[i].name, SLUICE_BROKER_CONFIG_NAME_MAX + 1);
		size_t vl = strnlen(v[i].value, SLUICE_BROKER_CONFIG_VALUE_MAX + 1);
		if (nl == 0 || nl > SLUICE_BROKER_CONFIG_NAME_MAX || vl > SLUICE_BROKER_CONFIG_VALUE_MAX)
			return SIZE_MAX;
		total += nl + vl + 2;
	}
	return total;
}

/* Copy v[0..n) into dst and its strings into *pool, sorted; returns how many. */
static uint32_t level_copy(struct sluice_broker_dynamic *dst, const struct sluice_broker_dynamic *v, uint32_t n,
			   char **pool)
{
	for (uint32_t i = 0; i < n; i++) {
		size_t nl = strlen(v[i].name) + 1, vl = strlen(v[i].value) + 1;
		memcpy(*pool, v[i].name, nl);
		dst[i].name = *pool;
		*pool += nl;
		memcpy(*pool, v[i].value, vl);
		dst[i].value = *pool;
		*pool += vl;
	}
	qsort(dst, n, sizeof *dst, cmp_dynamic);
	return n;
}

/* Apply one level's applied keys to the effective configuration; a value
 * this broker cannot take is dropped from the level (and logged). */
static uint32_t level_apply(struct sluice_broker_config *bc, struct sluice_broker_dynamic *v, uint32_t n,
			    const char *level)
{
	uint32_t kept = 0;
	for (uint32_t i = 0; i < n; i++) {
		char err[SLUICE_CONFIG_STRING_MAX];
		if (sluice_broker_config_applied(v[i].name) &&
		    sluice_config_set_dynamic(&bc->effective, v[i].name, v[i].value, err, sizeof err) < 0) {
			SLOG_WARN("config", "dynamic broker config %s=%s (%s) not applied: %s", v[i].name, v[i].value, level,
				  err);
			continue;
		}
		v[kept++] = v[i];
	}
	return kept;
}

/* A throttle rate (bytes/s) as the levels set it: this broker's, else the
 * cluster-wide default, else unlimited (INT64_MAX). */
static int64_t throttle_rate(const struct sluice_broker_config *bc, const char *name)
{
	const char *v = sluice_broker_config_get(bc, true, name);
	if (!v)
		v = sluice_broker_config_get(bc, false, name);
	int64_t x;
	if (!v)
		return INT64_MAX;
	if (!parse_int64(v, &x) || x < 0) {
		SLOG_WARN("config", "dynamic broker config %s=%s is not a rate in bytes/s; not applied", name, v);
		return INT64_MAX;
	}
	return x;
}

struct sluice_broker_config *sluice_broker_config_build(const struct sluice_config *base, int32_t node_id,
							const struct sluice_broker_dynamic *defaults, uint32_t default_n,
							const struct sluice_broker_dynamic *own, uint32_t own_n)
{
	assert((defaults || default_n == 0) && (own || own_n == 0));
	if (default_n > SLUICE_BROKER_DYNAMIC_CONFIGS_MAX || own_n > SLUICE_BROKER_DYNAMIC_CONFIGS_MAX)
		return NULL;
	size_t sd = strings_bytes(defaults, default_n), so = strings_bytes(own, own_n);
	if (sd == SIZE_MAX || so == SIZE_MAX)
		return NULL;
	size_t head = sizeof(struct sluice_broker_config);
	size_t arrays = ((size_t)default_n + own_n) * sizeof(struct sluice_broker_dynamic);
	struct sluice_broker_config *bc = malloc(head + arrays + sd + so);
	if (!bc)
		return NULL;
	memset(bc, 0, head);
	struct sluice_broker_dynamic *dv = (struct sluice_broker_dynamic *)(void *)((char *)bc + head);
	struct sluice_broker_dynamic *ov = dv + default_n;
	char *pool = (char *)(ov + own_n);
	if (base)
		bc->effective = *base;
	else
		sluice_config_defaults(&bc->effective);
	char err[SLUICE_CONFIG_STRING_MAX];
	if (sluice_config_derive(&bc->effective, err, sizeof err) < 0)
		SLOG_WARN("config", "the static configuration does not derive: %s", err); /* finished before: a bug */
	level_copy(dv, defaults, default_n, &pool);
	level_copy(ov, own, own_n, &pool);
	assert(pool == (char *)bc + head + arrays + sd + so);
	bc->default_n = level_apply(bc, dv, default_n, "cluster-wide default");
	bc->own_n = level_apply(bc, ov, own_n, "this broker's");
	bc->defaults = dv;
	bc->own = ov;
	bc->node_id = node_id;
	bc->refs = 1;
	bc->leader_throttled_rate = throttle_rate(bc, "leader.replication.throttled.rate");
	bc->follower_throttled_rate = throttle_rate(bc, "follower.replication.throttled.rate");
	return bc;
}

void sluice_broker_config_ref(const struct sluice_broker_config *bc)
{
	struct sluice_broker_config *m = (struct sluice_broker_config *)(uintptr_t)bc;
	int refs = __atomic_add_fetch(&m->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 2); /* the caller held one */
}

void sluice_broker_config_unref(const struct sluice_broker_config *bc)
{
	if (!bc)
		return;
	struct sluice_broker_config *m = (struct sluice_broker_config *)(uintptr_t)bc;
	int refs = __atomic_sub_fetch(&m->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 0); /* one unref per reference */
	if (refs == 0)
		free(m);
}

const char *sluice_broker_config_get(const struct sluice_broker_config *bc, bool own, const char *name)
{
	assert(bc && name);
	struct sluice_broker_dynamic key = {.name = name};
	const struct sluice_broker_dynamic *v = own ? bc->own : bc->defaults;
	uint32_t n = own ? bc->own_n : bc->default_n;
	const struct sluice_broker_dynamic *hit = n ? bsearch(&key, v, n, sizeof *v, cmp_dynamic) : NULL;
	return hit ? hit->value : NULL;
}
