/* The controller-client metadata backend's own settings, apart from the
 * broker's whole struct sluice_config: what sluice_meta_controller_open
 * reads from it (by property name, through sluice_config_entry, so that it
 * does not depend on which fields the config struct has), and an open that
 * takes them directly, for tests that point a broker's metadata client at a
 * fake controller without a properties file. The operations themselves are
 * the ones of control/meta.h. */
#ifndef SLUICE_META_CONTROLLER_H
#define SLUICE_META_CONTROLLER_H
#include <stddef.h>
#include <stdint.h>
#include "common/config.h"
#include "control/meta.h"

#define SLUICE_META_CONTROLLER_HEARTBEAT_MS_DEFAULT 2000
#define SLUICE_META_CONTROLLER_SESSION_MS_DEFAULT 9000 /* broker.session.timeout.ms, as Kafka */
/* The ISR changes (alter_partition) one AlterPartition request carries at
 * most: the changes submitted while a request is out wait and go together
 * in the next one, up to this many (the rest in the one after). */
#define SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX 500

struct sluice_meta_controller_config {
	int32_t node_id;                                /* node.id */
	char cluster_id[64];                            /* cluster.id */
	char quorum_voters[SLUICE_CONFIG_STRING_MAX];   /* controller.quorum.voters: id@host:port,... */
	char bootstrap_servers[SLUICE_CONFIG_STRING_MAX]; /* controller.quorum.bootstrap.servers: host:port,... */
	/* advertised.listeners, else listeners: NAME://host:port,...; the first
	 * one's name selects the endpoint snapshots list for every broker. */
	char listeners[SLUICE_CONFIG_STRING_MAX];
	char rack[SLUICE_BROKER_RACK_MAX + 1];          /* broker.rack; "": none */
	int32_t heartbeat_interval_ms;                  /* broker.heartbeat.interval.ms */
	int32_t session_timeout_ms;                     /* broker.session.timeout.ms: the lease (meta.h lease_valid) */
	/* The broker's finished static configuration, which the dynamic broker
	 * configs of the quorum apply over (copied at open); NULL: the defaults. */
	const struct sluice_config *base;
};

/* The settings above as cfg holds them (absent keys: their defaults). */
void sluice_meta_controller_config_from(struct sluice_meta_controller_config *out, const struct sluice_config *cfg);
/* sluice_meta_controller_open with the settings given. */
int sluice_meta_controller_open_config(struct sluice_meta *m, const struct sluice_meta_controller_config *cc,
				       const char *dir, char *err, size_t errlen);

/* Counters, for tests and diagnostics. */
struct sluice_meta_controller_stats {
	uint64_t registrations;   /* BrokerRegistration accepted */
	uint64_t heartbeats;      /* BrokerHeartbeat answered */
	uint64_t fetches;         /* metadata Fetch responses applied */
	uint64_t snapshots_loaded; /* FetchSnapshot loads completed */
	uint64_t reconnects;      /* connections dropped: errors, garbage, NOT_CONTROLLER */
	uint64_t records_applied;
	uint64_t alter_partition_requests; /* AlterPartition requests sent (not counting resends) */
	uint64_t alter_partition_changes;  /* the ISR changes they carried */
};
void sluice_meta_controller_stats(const struct sluice_meta *m, struct sluice_meta_controller_stats *out);

#endif
