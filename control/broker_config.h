/* Dynamic broker configs (cluster mode): the keys Kafka lets
 * IncrementalAlterConfigs change on a BROKER resource, with their types and
 * the checks a value must pass, shared by the controller (which checks a
 * change before it goes into the quorum) and the broker (which describes
 * them); and the broker's effective configuration: server.properties with
 * the cluster-wide default overrides (resource name "") and then its own
 * (resource name "<node id>") applied for the keys Sluice uses at run time.
 * The broker's metadata backend builds one such immutable object whenever
 * the BROKER config records for "" or its id change and publishes it in
 * its snapshots (control/meta.h); topic overrides still beat it. Pure
 * functions over their inputs. */
#ifndef SLUICE_BROKER_CONFIG_H
#define SLUICE_BROKER_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "common/config.h"

/* Overrides one BROKER resource may hold (the controller refuses more; a
 * broker keeps at most this many of each level). */
#define SLUICE_BROKER_DYNAMIC_CONFIGS_MAX 1024
#define SLUICE_BROKER_CONFIG_NAME_MAX 255   /* as a config record's name (SLUICE_MREC_NAME_MAX) */
#define SLUICE_BROKER_CONFIG_VALUE_MAX 4095 /* as a config record's value (SLUICE_MREC_CONFIG_VALUE_MAX) */
/* Names one key goes by, itself first (log.retention.ms, .minutes, .hours). */
#define SLUICE_BROKER_SYNONYMS_MAX 3

/* A dynamic key. Types: 'i' int, 'l' long, 'd' double, 'b' boolean, 's'
 * string, 'L' list (APPEND/SUBTRACT allowed), 'p' password (sensitive:
 * never described). per_broker: only a broker id's resource may set it
 * (listeners, SSL, SASL), never the cluster-wide default. */
struct sluice_broker_key {
	const char *name;
	char type;
	int64_t min;
	bool per_broker;
	const char *list_default; /* 'L': the value APPEND/SUBTRACT start from without an override */
};

/* The key name is (Kafka's names, and `listener.name.<l>.<key>` for a
 * listener's own copy of the listener-level ones), or NULL when Kafka does
 * not change it at run time. *per_broker: whether the cluster-wide default
 * refuses it. */
const struct sluice_broker_key *sluice_broker_key_find(const char *name, bool *per_broker);
/* Check value for key k (found for name): Kafka's type and minimum, then,
 * for a key of server.properties, the broker's own range and checks
 * (common/config.c), so that whatever the quorum holds a broker can apply.
 * Returns 0 or KERR_INVALID_CONFIG with msg naming the key and value. */
int16_t sluice_broker_config_check(const struct sluice_broker_key *k, const char *name, const char *value, char *msg,
				   size_t msglen);
/* Whether the broker applies key at run time (the rest are kept and shown). */
bool sluice_broker_config_applied(const char *name);
/* The names name goes by, itself first; returns how many (1 when none else). */
size_t sluice_broker_config_synonyms(const char *name, const char *out[SLUICE_BROKER_SYNONYMS_MAX]);

/* One dynamic override as the quorum holds it. */
struct sluice_broker_dynamic {
	const char *name;
	const char *value;
};

/* A broker's dynamic configuration: immutable once built, reference
 * counted (every snapshot holding it, and whoever else took a reference:
 * a storage core), one allocation. */
struct sluice_broker_config {
	int refs; /* atomic */
	int32_t node_id;
	/* The overrides in effect, each level sorted by name: this broker's
	 * own ("<node id>") and the cluster-wide default (""). A value the
	 * broker could not apply is left out (and logged when built). */
	uint32_t own_n, default_n;
	const struct sluice_broker_dynamic *own, *defaults;
	/* server.properties with the applied keys set: defaults first, then own. */
	struct sluice_config effective;
	/* leader.replication.throttled.rate and follower.replication.throttled.rate
	 * (dynamic only, as in Kafka): bytes per second, own level first;
	 * INT64_MAX when neither level sets one (Kafka's unlimited default). */
	int64_t leader_throttled_rate, follower_throttled_rate;
};

/* Build from base (the broker's finished static configuration; NULL: the
 * defaults) and the overrides of both levels (any order; at most
 * SLUICE_BROKER_DYNAMIC_CONFIGS_MAX each, names and values within the
 * maxima above, else refused). The strings are copied. Returns the object
 * with one reference, or NULL (out of memory, or counts beyond the limits). */
struct sluice_broker_config *sluice_broker_config_build(const struct sluice_config *base, int32_t node_id,
							const struct sluice_broker_dynamic *defaults, uint32_t default_n,
							const struct sluice_broker_dynamic *own, uint32_t own_n);
void sluice_broker_config_ref(const struct sluice_broker_config *bc);
void sluice_broker_config_unref(const struct sluice_broker_config *bc);
/* The override of name at one level (own: this broker's; else the
 * cluster-wide default), or NULL. */
const char *sluice_broker_config_get(const struct sluice_broker_config *bc, bool own, const char *name);

#endif
