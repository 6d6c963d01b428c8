/* Broker configuration in Kafka's server.properties format, with Kafka's
 * property names wherever one exists. Every key has a type, a default and a
 * range; a bad value or an unreadable file is reported naming the key and the
 * caller exits non-zero. Unknown keys are warned about and ignored so that an
 * operator's existing Kafka file still loads. */
#ifndef SLUICE_CONFIG_H
#define SLUICE_CONFIG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_CONFIG_STRING_MAX 512
#define SLUICE_CONFIG_LIST_MAX 64 /* a short list value (log.cleanup.policy) */
#define SLUICE_LOG_DIRS_MAX 16
#define SLUICE_CONFIG_HOST_MAX 255   /* a host name in a listener or controller list */
#define SLUICE_CONFIG_CONTROLLERS_MAX 16 /* entries of controller.quorum.voters / .bootstrap.servers */
#define SLUICE_CONFIG_POOL_OBJECTS_MAX (1 << 20) /* objects in one per-core pool (dataplane/objpool.h) */
#define SLUICE_CONFIG_POOL_REQUESTS_DEFAULT 4096 /* sluice.network.pool.requests */
#define SLUICE_CONFIG_POOL_OP_ARRAY_PARTITIONS_MAX 1024 /* sluice.network.pool.op.array.partitions */
#define SLUICE_CONFIG_POOL_FRAME_BYTES_MAX (1 << 30)  /* sluice.network.pool.large.frame.bytes */
/* replica.selector.class: Kafka's rack-aware selector, the one served */
#define SLUICE_CONFIG_RACK_AWARE_SELECTOR "org.apache.kafka.common.replica.RackAwareReplicaSelector"
/* What a produce frame holds besides one batch of message.max.bytes: the
 * request header, client id, transactional id, topic names, and the other
 * partitions' (smaller) batches of a request that names several. */
#define SLUICE_CONFIG_FRAME_OVERHEAD_BYTES (64 << 10)
/* sluice.metrics.topics.max: topics with their own series in /metrics. */
#define SLUICE_CONFIG_METRICS_TOPICS_MAX 100000
/* The largest default.replication.factor (control/meta.h's SLUICE_REPLICAS_MAX). */
#define SLUICE_CONFIG_REPLICATION_FACTOR_MAX 16

struct sluice_config {
	int32_t node_id;
	char listeners[SLUICE_CONFIG_STRING_MAX];
	char advertised_listeners[SLUICE_CONFIG_STRING_MAX];
	char log_dirs[SLUICE_CONFIG_STRING_MAX];
	int32_t num_partitions;
	bool auto_create_topics_enable;
	bool delete_topic_enable;
	int32_t default_replication_factor;
	int32_t min_insync_replicas;
	int64_t log_segment_bytes;
	int64_t log_retention_ms;    /* derived from log.retention.{ms,minutes,hours} */
	int64_t log_retention_hours;
	int64_t log_retention_minutes;
	int64_t log_retention_ms_raw; /* -2 = not set */
	int64_t log_retention_bytes;
	int64_t log_roll_hours;
	int32_t log_index_interval_bytes;
	int32_t log_index_size_max_bytes;
	int64_t log_flush_interval_messages;
	int64_t log_flush_interval_ms; /* -1 = not set */
	int32_t message_max_bytes;
	int32_t socket_request_max_bytes;
	int32_t num_network_threads;
	int32_t storage_threads;
	bool cpu_affinity;
	int32_t connections_max;
	int64_t listener_bind_timeout_ms; /* how long a port in use is retried at start */
	char transport[32];               /* sluice.transport: the network backend, by name (dataplane/transport.h) */
	/* sluice.admin.listener: host:port of the HTTP admin listener (/metrics,
	 * /ready; docs/operations.md), "" for none; parsed by finish into
	 * admin_host and admin_port. */
	char admin_listener[SLUICE_CONFIG_STRING_MAX];
	char admin_host[SLUICE_CONFIG_HOST_MAX + 1];
	int admin_port;
	/* sluice.metrics.topics.max: topics with their own per-topic series; the
	 * rest are counted together under topic="(other)". */
	int32_t metrics_topics_max;
	/* The dpdk transport (dataplane/transport_dpdk.c; docs/dpdk.md). */
	char dpdk_eal_args[SLUICE_CONFIG_STRING_MAX];     /* sluice.dpdk.eal.args: rte_eal_init's arguments */
	char dpdk_ports[SLUICE_CONFIG_STRING_MAX];        /* sluice.dpdk.port: ethdev port indexes, "0" or "0,1" */
	char dpdk_lcores[SLUICE_CONFIG_STRING_MAX];       /* sluice.dpdk.lcores: the network cores' EAL lcores, or "" */
	char dpdk_listener[64];                           /* sluice.dpdk.listener: the listener's name */
	char dpdk_ipv4_address[SLUICE_CONFIG_STRING_MAX]; /* sluice.dpdk.ipv4.address: a.b.c.d/prefix */
	char dpdk_ipv4_gateway[SLUICE_CONFIG_STRING_MAX]; /* sluice.dpdk.ipv4.gateway: a.b.c.d, or "" */
	int32_t dpdk_mtu;                                 /* sluice.dpdk.mtu */
	int32_t dpdk_tcp_retries;                         /* sluice.dpdk.tcp.retries: retransmissions before a connection is dropped */
	bool dpdk_checksum_offload;                       /* sluice.dpdk.checksum.offload: the NIC's, when it offers them */
	bool dpdk_zero_copy;                              /* sluice.dpdk.zero.copy: cached log bytes sent by reference */
	bool dpdk_tso;                                    /* sluice.dpdk.tso: TCP segmentation offload, when offered */
	int32_t dpdk_syn_backlog;                         /* sluice.dpdk.syn.backlog: half-open connections per network core */
	bool dpdk_rx_interrupts;                          /* sluice.dpdk.rx.interrupts: idle cores sleep until a frame arrives */
	int32_t dpdk_tcp_keepalive_ms;                    /* sluice.dpdk.tcp.keepalive.ms: idle before probes; 0: off */
	int32_t dpdk_tcp_keepalive_interval_ms;           /* sluice.dpdk.tcp.keepalive.interval.ms: between probes */
	int32_t dpdk_tcp_keepalive_probes;                /* sluice.dpdk.tcp.keepalive.probes: unanswered ones */
	int64_t queued_max_request_bytes;  /* frames read, not yet served, whole broker; <= 0: no limit */
	int64_t connection_response_bytes_max; /* held per connection before it is no longer read */
	int64_t response_bytes_max;        /* held by all connections before pipelining stops */
	/* Per network core pools (dataplane/objpool.h): requests in flight, arrays of
	 * partition ops (each for up to pool_op_array_partitions), request frames
	 * up to pool_frame_bytes and up to pool_large_frame_bytes (-1 in the file:
	 * message.max.bytes plus SLUICE_CONFIG_FRAME_OVERHEAD_BYTES, set by
	 * sluice_config_finish). Exhausted, a core stops reading until objects
	 * come back. */
	int32_t pool_requests;
	/* Requests a core takes from the heap once a pool is empty (0: none,
	 * reading waits instead). A request may wait on other clients' requests
	 * (a JoinGroup is held until every member of its group has joined, up
	 * to group.max.size of them), so a core that stopped reading at a fixed
	 * pool size could wait for requests it will never read. */
	int32_t pool_overflow_requests;
	int32_t pool_op_arrays;
	int32_t pool_op_array_partitions;
	int32_t pool_frames;
	int32_t pool_frame_bytes;
	int32_t pool_large_frames;
	int32_t pool_large_frame_bytes;
	int64_t connections_max_idle_ms;   /* -1: never */
	int64_t request_receive_timeout_ms; /* first to last byte of a frame; -1: never */
	int32_t fetch_max_bytes;
	int64_t timestamp_before_max_ms;
	int64_t timestamp_after_max_ms;
	char message_timestamp_type[32]; /* log.message.timestamp.type: CreateTime or LogAppendTime */
	bool log_append_time;            /* derived: the broker default is LogAppendTime */
	/* log.cleanup.policy: the cleanup.policy of topics without their own
	 * (a list of delete and compact, as the topic config), and what it
	 * says, derived. */
	char log_cleanup_policy[SLUICE_CONFIG_LIST_MAX];
	bool log_cleanup_compact, log_cleanup_delete;
	/* compression.type: accepted and reported as the topics' default;
	 * batches are stored as the producer compressed them. */
	char compression_type[32];
	int32_t offsets_topic_partitions;
	/* __consumer_offsets' replicas in cluster mode (created only once this
	 * many brokers are active); a single node keeps one. */
	int32_t offsets_topic_replication_factor;
	int32_t group_initial_rebalance_delay_ms;
	int32_t group_min_session_timeout_ms;
	int32_t group_max_session_timeout_ms;
	int32_t offset_metadata_max_bytes;
	/* How long a group coordinator's write to __consumer_offsets (an
	 * OffsetCommit's offsets, a SyncGroup's group record) may wait for the
	 * ISR before it is answered as failed (the records stay in the log). */
	int32_t offsets_commit_timeout_ms;
	int32_t group_max_size;
	int32_t offsets_retention_minutes;
	int64_t offsets_retention_check_interval_ms;
	int64_t log_retention_check_interval_ms;
	int64_t replica_hw_checkpoint_interval_ms; /* replication-offset-checkpoint written this often */
	int64_t log_roll_ms; /* -1: from log.roll.hours */
	bool log_preallocate;
	int64_t log_cleaner_backoff_ms;
	int64_t log_cleaner_delete_retention_ms;
	int64_t cleaner_pass_bytes_max;
	int64_t log_cleaner_io_bytes_per_sec; /* compaction reads + writes, per cleaner thread */
	int64_t log_cleaner_min_compaction_lag_ms;
	int64_t log_cleaner_max_compaction_lag_ms;
	char log_cleaner_min_cleanable_ratio_s[32]; /* log.cleaner.min.cleanable.ratio as given */
	double log_cleaner_min_cleanable_ratio;
	int32_t open_files_max; /* per storage core; 0: derived from RLIMIT_NOFILE */
	int64_t cache_bytes_max; /* tail-chunk memory over all storage cores */
	char log_level[32];
	char cluster_id[64];
	bool cluster_id_set; /* cluster.id was given (required in cluster mode) */
	char broker_rack[256]; /* broker.rack; "": none */
	/* replica.selector.class: "" (Kafka's null: a leader answers consumers
	 * itself) or Kafka's RackAwareReplicaSelector, which names a replica in
	 * the consumer's rack as PreferredReadReplica (KIP-392); derived. */
	char replica_selector_class[SLUICE_CONFIG_STRING_MAX];
	bool replica_selector_rack_aware;
	/* Cluster mode (controller.quorum.voters or .bootstrap.servers set): the
	 * broker registers with sluice-controller and takes its metadata from
	 * it (control/meta.h's controller backend); unset: single-node mode. */
	char process_roles[SLUICE_CONFIG_STRING_MAX];       /* "broker", or "" (single-node) */
	char controller_quorum_voters[SLUICE_CONFIG_STRING_MAX]; /* id@host:port,... */
	char controller_quorum_bootstrap_servers[SLUICE_CONFIG_STRING_MAX]; /* host:port,... */
	char controller_listener_names[SLUICE_CONFIG_STRING_MAX];
	char metadata_log_dir[SLUICE_CONFIG_STRING_MAX]; /* accepted (a file shared with controllers) */
	int64_t broker_heartbeat_interval_ms;
	int64_t broker_session_timeout_ms;  /* the controllers' setting; accepted for a shared file */
	int32_t controller_raft_port_offset; /* the controllers' setting; accepted, unused by brokers */
	int64_t controller_wait_ms;          /* sluice.controller.wait.ms: start-up wait for the metadata */
	int64_t controller_shutdown_wait_ms; /* sluice.controller.shutdown.wait.ms: controlled shutdown */
	/* Replication (cluster mode), Kafka's keys: a follower out of the ISR
	 * after lagging this long; its fetches to the leader (wait, sizes,
	 * backoff after an error, the longest an answer may take). */
	int64_t replica_lag_time_max_ms;
	int32_t replica_fetch_wait_max_ms;
	int32_t replica_fetch_min_bytes;
	int32_t replica_fetch_max_bytes;
	int32_t replica_fetch_response_max_bytes;
	int32_t replica_fetch_backoff_ms;
	int32_t replica_socket_timeout_ms;
	/* The replication throttles' sliding window (Kafka's
	 * replication.quota.window.num windows of .size.seconds each). */
	int32_t replication_quota_window_num;
	int32_t replication_quota_window_size_seconds;
	/* parsed from listeners / advertised.listeners / log.dirs */
	char listen_host[256];
	int listen_port;
	char advertised_host[256];
	int advertised_port;
	int log_dir_count;
	char log_dir[SLUICE_LOG_DIRS_MAX][SLUICE_CONFIG_STRING_MAX];
};

void sluice_config_defaults(struct sluice_config *cfg);
/* Apply one key=value; returns 0, or -1 with a message naming the key in err. */
int sluice_config_set(struct sluice_config *cfg, const char *key, const char *value, char *err, size_t errlen);
int sluice_config_load_file(struct sluice_config *cfg, const char *path, char *err, size_t errlen);
/* Derive listener host/port, log dirs, retention; validates cross-key rules. */
int sluice_config_finish(struct sluice_config *cfg, char *err, size_t errlen);
/* The values derived from others (retention and roll times, the timestamp
 * type, the cleanup policy, the cleanable ratio), recomputed and checked:
 * the part of finish that a change at run time needs again. Idempotent.
 * Returns 0, or -1 with err naming the key. */
int sluice_config_derive(struct sluice_config *cfg, char *err, size_t errlen);
/* Set key to value on a finished configuration at run time (a dynamic
 * broker config, control/broker_config.h): the file's checks, then the
 * derived values. Returns 0, or -1 with err naming the key and cfg
 * unchanged; an unknown key is -1 too (not a warning, as in the file). */
int sluice_config_set_dynamic(struct sluice_config *cfg, const char *key, const char *value, char *err,
			      size_t errlen);
/* The default of key as the table gives it (text), or NULL for an unknown key. */
const char *sluice_config_default(const char *key);

/* Whether the configuration names controllers (cluster mode). */
bool sluice_config_cluster_mode(const struct sluice_config *cfg);

/* For DescribeConfigs: iterate over every known key with its current value
 * as text. Returns false past the end. */
bool sluice_config_entry(const struct sluice_config *cfg, size_t i, const char **name, char *value, size_t valuelen, bool *is_default);
/* The same for the key called name; false for an unknown one. */
bool sluice_config_value(const struct sluice_config *cfg, const char *name, char *value, size_t valuelen,
			 bool *is_default);

#endif
