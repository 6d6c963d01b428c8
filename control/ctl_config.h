/* The sluice-controller's configuration: a controller.properties file in
 * Kafka's KRaft format (process.roles=controller, node.id,
 * controller.quorum.voters, listeners=CONTROLLER://host:port,
 * controller.listener.names, metadata.log.dir, cluster.id, the election
 * and broker session timeouts, the topic defaults the controller decides
 * with) plus --override key=value pairs. Every key has a type, a default
 * and a range; a bad or missing value is reported naming the key and the
 * caller exits 1. Unknown keys are warned about and ignored, because a
 * Kafka file (or one shared with the brokers) carries broker keys. The
 * result is checked as a whole (this node's own voter entry matches
 * node.id and the listener's port; Raft ports fit) and turned into the
 * quorum's (control/quorum.h) and the decision rules' (control/ctl_logic.h)
 * configurations, so that nothing downstream parses text. */
#ifndef SLUICE_CTL_CONFIG_H
#define SLUICE_CTL_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "control/ctl_logic.h"
#include "control/quorum.h"

#define SLUICE_CTL_CONFIG_STRING_MAX 1024
#define SLUICE_CTL_CONFIG_PATH_MAX 4096
#define SLUICE_CTL_CONFIG_NAME_MAX 64 /* listener names, process.roles, log.level */
#define SLUICE_CTL_CLUSTER_ID_MAX 64

struct sluice_controller_config {
	/* As given (or defaulted). */
	char process_roles[SLUICE_CTL_CONFIG_NAME_MAX];
	int32_t node_id; /* -1: not given */
	char voters[SLUICE_CTL_CONFIG_STRING_MAX];
	char listeners[SLUICE_CTL_CONFIG_STRING_MAX];
	char listener_names[SLUICE_CTL_CONFIG_STRING_MAX];
	char metadata_log_dir[SLUICE_CTL_CONFIG_PATH_MAX];
	char log_dirs[SLUICE_CTL_CONFIG_PATH_MAX]; /* metadata.log.dir falls back to the first, as Kafka's */
	char cluster_id[SLUICE_CTL_CLUSTER_ID_MAX];
	int64_t election_timeout_ms;
	int64_t heartbeat_interval_ms; /* the brokers'; checked against the session timeout */
	int64_t session_timeout_ms;
	int32_t num_partitions;
	int32_t default_replication_factor;
	bool auto_leader_rebalance;
	int32_t raft_port_offset;
	int64_t snapshot_threshold;
	int64_t snapshot_trailing;
	char log_level[SLUICE_CTL_CONFIG_NAME_MAX];
	int32_t socket_request_max_bytes; /* the largest request frame */
	int32_t connections_max;
	/* sluice.admin.listener: host:port of the HTTP admin listener (/metrics,
	 * /ready), "" (the default) for none; parsed into admin_host and
	 * admin_port, as the broker's key. */
	char admin_listener[SLUICE_CTL_CONFIG_STRING_MAX];
	char admin_host[SLUICE_QUORUM_HOST_MAX + 1];
	int admin_port; /* 0: off */

	/* Derived by sluice_controller_config_finish. */
	char listener_name[SLUICE_CTL_CONFIG_NAME_MAX]; /* e.g. CONTROLLER */
	char listen_host[SLUICE_QUORUM_HOST_MAX + 1];
	uint16_t listen_port;
	/* voters[i]'s CONTROLLER listener port (controller.quorum.voters as
	 * written); quorum.voters[i].port is its Raft port (+ the offset). */
	uint16_t voter_listener_ports[SLUICE_QUORUM_VOTERS_MAX];
	struct sluice_quorum_config quorum; /* quorum.dir points at metadata_log_dir */
	struct sluice_ctl_config logic;
};

void sluice_controller_config_defaults(struct sluice_controller_config *cfg);
/* Apply one key=value: 0, or -1 with err naming the key. Unknown keys: a
 * warning, 0. */
int sluice_controller_config_set(struct sluice_controller_config *cfg, const char *key, const char *value, char *err,
				 size_t errlen);
/* Read a properties file (key=value or key:value lines, # and ! comments). */
int sluice_controller_config_load_file(struct sluice_controller_config *cfg, const char *path, char *err,
				       size_t errlen);
/* Check the whole and derive the listener, the quorum and logic configs,
 * and set the log level. 0, or -1 with err naming the key. */
int sluice_controller_config_finish(struct sluice_controller_config *cfg, char *err, size_t errlen);

#endif
