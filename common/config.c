/* server.properties parsing: a table of known keys (name, type, field,
 * range, default) drives parsing, validation and DescribeConfigs output, so
 * adding a key is one line. */
#include "common/config.h"
#include "common/http.h"
#include "common/log.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum cfg_type { CFG_INT, CFG_LONG, CFG_BOOL, CFG_STRING };

struct cfg_key {
	const char *name;
	enum cfg_type type;
	size_t offset;
	int64_t min, max;
	const char *def;
};

#define F(field) offsetof(struct sluice_config, field)
#define CFG_STR_(x) #x
#define CFG_STR(x) CFG_STR_(x) /* a numeric default named in config.h, as text */
static const struct cfg_key keys[] = {
	{"node.id", CFG_INT, F(node_id), 0, INT32_MAX, "1"},
	{"listeners", CFG_STRING, F(listeners), 0, 0, "PLAINTEXT://127.0.0.1:9092"},
	{"advertised.listeners", CFG_STRING, F(advertised_listeners), 0, 0, ""},
	{"log.dirs", CFG_STRING, F(log_dirs), 0, 0, "/tmp/sluice-logs"},
	{"num.partitions", CFG_INT, F(num_partitions), 1, 100000, "1"},
	{"auto.create.topics.enable", CFG_BOOL, F(auto_create_topics_enable), 0, 1, "true"},
	{"delete.topic.enable", CFG_BOOL, F(delete_topic_enable), 0, 1, "true"},
	{"default.replication.factor", CFG_INT, F(default_replication_factor), 1, SLUICE_CONFIG_REPLICATION_FACTOR_MAX, "1"},
	{"min.insync.replicas", CFG_INT, F(min_insync_replicas), 1, INT32_MAX, "1"},
	{"log.segment.bytes", CFG_LONG, F(log_segment_bytes), 1048576, INT32_MAX, "1073741824"},
	{"log.retention.hours", CFG_LONG, F(log_retention_hours), -1, INT32_MAX, "168"},
	{"log.retention.minutes", CFG_LONG, F(log_retention_minutes), -2, INT32_MAX, "-2"},
	{"log.retention.ms", CFG_LONG, F(log_retention_ms_raw), -2, INT64_MAX, "-2"},
	{"log.retention.bytes", CFG_LONG, F(log_retention_bytes), -1, INT64_MAX, "-1"},
	{"log.roll.hours", CFG_LONG, F(log_roll_hours), 1, INT32_MAX, "168"},
	{"log.index.interval.bytes", CFG_INT, F(log_index_interval_bytes), 0, INT32_MAX, "4096"},
	{"log.index.size.max.bytes", CFG_INT, F(log_index_size_max_bytes), 4096, INT32_MAX, "10485760"},
	{"log.flush.interval.messages", CFG_LONG, F(log_flush_interval_messages), 1, INT64_MAX, "9223372036854775807"},
	{"log.flush.interval.ms", CFG_LONG, F(log_flush_interval_ms), -1, INT64_MAX, "-1"},
	{"message.max.bytes", CFG_INT, F(message_max_bytes), 0, INT32_MAX, "1048588"},
	{"socket.request.max.bytes", CFG_INT, F(socket_request_max_bytes), 1024, INT32_MAX, "104857600"},
	{"num.network.threads", CFG_INT, F(num_network_threads), 1, 64, "1"},
	{"sluice.storage.threads", CFG_INT, F(storage_threads), 1, 64, "1"},
	{"sluice.cpu.affinity", CFG_BOOL, F(cpu_affinity), 0, 1, "true"},
	{"max.connections", CFG_INT, F(connections_max), 1, 1000000, "10000"},
	{"sluice.listener.bind.timeout.ms", CFG_LONG, F(listener_bind_timeout_ms), 0, 3600000, "30000"},
	{"sluice.transport", CFG_STRING, F(transport), 0, 0, "uring"},
	{"sluice.admin.listener", CFG_STRING, F(admin_listener), 0, 0, ""},
	{"sluice.metrics.topics.max", CFG_INT, F(metrics_topics_max), 0, SLUICE_CONFIG_METRICS_TOPICS_MAX, "1000"},
	{"sluice.dpdk.eal.args", CFG_STRING, F(dpdk_eal_args), 0, 0, ""},
	{"sluice.dpdk.port", CFG_STRING, F(dpdk_ports), 0, 0, "0"},
	{"sluice.dpdk.lcores", CFG_STRING, F(dpdk_lcores), 0, 0, ""},
	{"sluice.dpdk.listener", CFG_STRING, F(dpdk_listener), 0, 0, "PLAINTEXT"},
	{"sluice.dpdk.ipv4.address", CFG_STRING, F(dpdk_ipv4_address), 0, 0, ""},
	{"sluice.dpdk.ipv4.gateway", CFG_STRING, F(dpdk_ipv4_gateway), 0, 0, ""},
	{"sluice.dpdk.mtu", CFG_INT, F(dpdk_mtu), 576, 9000, "1500"},
	{"sluice.dpdk.tcp.retries", CFG_INT, F(dpdk_tcp_retries), 1, 30, "12"},
	{"sluice.dpdk.checksum.offload", CFG_BOOL, F(dpdk_checksum_offload), 0, 1, "true"},
	{"sluice.dpdk.zero.copy", CFG_BOOL, F(dpdk_zero_copy), 0, 1, "true"},
	{"sluice.dpdk.tso", CFG_BOOL, F(dpdk_tso), 0, 1, "true"},
	{"sluice.dpdk.syn.backlog", CFG_INT, F(dpdk_syn_backlog), 1, 4096, "1024"},
	{"sluice.dpdk.rx.interrupts", CFG_BOOL, F(dpdk_rx_interrupts), 0, 1, "true"},
	{"sluice.dpdk.tcp.keepalive.ms", CFG_INT, F(dpdk_tcp_keepalive_ms), 0, 32767000, "7200000"},
	{"sluice.dpdk.tcp.keepalive.interval.ms", CFG_INT, F(dpdk_tcp_keepalive_interval_ms), 1, 32767000, "75000"},
	{"sluice.dpdk.tcp.keepalive.probes", CFG_INT, F(dpdk_tcp_keepalive_probes), 1, 127, "9"},
	{"queued.max.request.bytes", CFG_LONG, F(queued_max_request_bytes), -1, INT64_MAX, "536870912"},
	{"sluice.connection.response.bytes.max", CFG_LONG, F(connection_response_bytes_max), 1024, INT64_MAX, "134217728"},
	{"sluice.response.bytes.max", CFG_LONG, F(response_bytes_max), 1024, INT64_MAX, "1073741824"},
	{"sluice.network.pool.requests", CFG_INT, F(pool_requests), 1, SLUICE_CONFIG_POOL_OBJECTS_MAX,
	 CFG_STR(SLUICE_CONFIG_POOL_REQUESTS_DEFAULT)},
	{"sluice.network.pool.overflow.requests", CFG_INT, F(pool_overflow_requests), 0, SLUICE_CONFIG_POOL_OBJECTS_MAX, "65536"},
	{"sluice.network.pool.op.arrays", CFG_INT, F(pool_op_arrays), 1, SLUICE_CONFIG_POOL_OBJECTS_MAX, "1024"},
	{"sluice.network.pool.op.array.partitions", CFG_INT, F(pool_op_array_partitions), 1, SLUICE_CONFIG_POOL_OP_ARRAY_PARTITIONS_MAX, "16"},
	{"sluice.network.pool.frames", CFG_INT, F(pool_frames), 1, SLUICE_CONFIG_POOL_OBJECTS_MAX, "1024"},
	{"sluice.network.pool.frame.bytes", CFG_INT, F(pool_frame_bytes), 64, 1048576, "16384"},
	{"sluice.network.pool.large.frames", CFG_INT, F(pool_large_frames), 0, 65536, "16"},
	{"sluice.network.pool.large.frame.bytes", CFG_INT, F(pool_large_frame_bytes), -1, SLUICE_CONFIG_POOL_FRAME_BYTES_MAX, "-1"},
	{"connections.max.idle.ms", CFG_LONG, F(connections_max_idle_ms), -1, INT64_MAX, "600000"},
	{"sluice.request.receive.timeout.ms", CFG_LONG, F(request_receive_timeout_ms), -1, INT64_MAX, "60000"},
	{"fetch.max.bytes", CFG_INT, F(fetch_max_bytes), 1024, INT32_MAX, "57671680"},
	{"log.message.timestamp.before.max.ms", CFG_LONG, F(timestamp_before_max_ms), 0, INT64_MAX, "9223372036854775807"},
	{"log.message.timestamp.after.max.ms", CFG_LONG, F(timestamp_after_max_ms), 0, INT64_MAX, "3600000"},
	{"log.message.timestamp.type", CFG_STRING, F(message_timestamp_type), 0, 0, "CreateTime"},
	{"log.cleanup.policy", CFG_STRING, F(log_cleanup_policy), 0, 0, "delete"},
	{"compression.type", CFG_STRING, F(compression_type), 0, 0, "producer"},
	{"offsets.topic.num.partitions", CFG_INT, F(offsets_topic_partitions), 1, 1000, "50"},
	{"offsets.topic.replication.factor", CFG_INT, F(offsets_topic_replication_factor), 1,
	 SLUICE_CONFIG_REPLICATION_FACTOR_MAX, "3"},
	{"group.initial.rebalance.delay.ms", CFG_INT, F(group_initial_rebalance_delay_ms), 0, INT32_MAX, "3000"},
	{"group.min.session.timeout.ms", CFG_INT, F(group_min_session_timeout_ms), 0, INT32_MAX, "6000"},
	{"group.max.session.timeout.ms", CFG_INT, F(group_max_session_timeout_ms), 0, INT32_MAX, "1800000"},
	{"offset.metadata.max.bytes", CFG_INT, F(offset_metadata_max_bytes), 0, INT32_MAX, "4096"},
	{"offsets.commit.timeout.ms", CFG_INT, F(offsets_commit_timeout_ms), 1, INT32_MAX, "5000"},
	{"offsets.retention.minutes", CFG_INT, F(offsets_retention_minutes), 1, INT32_MAX, "10080"},
	{"offsets.retention.check.interval.ms", CFG_LONG, F(offsets_retention_check_interval_ms), 1, INT64_MAX, "600000"},
	{"group.max.size", CFG_INT, F(group_max_size), 1, 100000, "10000"},
	{"log.retention.check.interval.ms", CFG_LONG, F(log_retention_check_interval_ms), 1, INT64_MAX, "300000"},
	{"replica.high.watermark.checkpoint.interval.ms", CFG_LONG, F(replica_hw_checkpoint_interval_ms), 1, INT64_MAX, "5000"},
	{"log.roll.ms", CFG_LONG, F(log_roll_ms), -1, INT64_MAX, "-1"},
	{"log.preallocate", CFG_BOOL, F(log_preallocate), 0, 1, "false"},
	{"log.cleaner.backoff.ms", CFG_LONG, F(log_cleaner_backoff_ms), 0, INT64_MAX, "15000"},
	{"log.cleaner.delete.retention.ms", CFG_LONG, F(log_cleaner_delete_retention_ms), 0, INT64_MAX, "86400000"},
	{"sluice.cleaner.pass.bytes.max", CFG_LONG, F(cleaner_pass_bytes_max), 1048576, INT64_MAX, "268435456"},
	{"log.cleaner.io.max.bytes.per.second", CFG_LONG, F(log_cleaner_io_bytes_per_sec), 1, INT64_MAX, "9223372036854775807"},
	{"log.cleaner.min.compaction.lag.ms", CFG_LONG, F(log_cleaner_min_compaction_lag_ms), 0, INT64_MAX, "0"},
	{"log.cleaner.max.compaction.lag.ms", CFG_LONG, F(log_cleaner_max_compaction_lag_ms), 1, INT64_MAX, "9223372036854775807"},
	{"log.cleaner.min.cleanable.ratio", CFG_STRING, F(log_cleaner_min_cleanable_ratio_s), 0, 0, "0.5"},
	{"sluice.open.files.max", CFG_INT, F(open_files_max), 0, INT32_MAX, "0"},
	{"sluice.cache.bytes.max", CFG_LONG, F(cache_bytes_max), 1048576, INT64_MAX, "1073741824"},
	{"log.level", CFG_STRING, F(log_level), 0, 0, "INFO"},
	{"cluster.id", CFG_STRING, F(cluster_id), 0, 0, "sluice-local-cluster0"},
	{"broker.rack", CFG_STRING, F(broker_rack), 0, 0, ""},
	{"replica.selector.class", CFG_STRING, F(replica_selector_class), 0, 0, ""},
	/* cluster mode */
	{"process.roles", CFG_STRING, F(process_roles), 0, 0, ""},
	{"controller.quorum.voters", CFG_STRING, F(controller_quorum_voters), 0, 0, ""},
	{"controller.quorum.bootstrap.servers", CFG_STRING, F(controller_quorum_bootstrap_servers), 0, 0, ""},
	{"controller.listener.names", CFG_STRING, F(controller_listener_names), 0, 0, "CONTROLLER"},
	{"metadata.log.dir", CFG_STRING, F(metadata_log_dir), 0, 0, ""},
	{"broker.heartbeat.interval.ms", CFG_LONG, F(broker_heartbeat_interval_ms), 1, 3600000, "2000"},
	{"broker.session.timeout.ms", CFG_LONG, F(broker_session_timeout_ms), 1, 3600000, "9000"},
	{"sluice.controller.raft.port.offset", CFG_INT, F(controller_raft_port_offset), 1, 65535, "1"},
	{"sluice.controller.wait.ms", CFG_LONG, F(controller_wait_ms), 0, 86400000, "60000"},
	{"sluice.controller.shutdown.wait.ms", CFG_LONG, F(controller_shutdown_wait_ms), 0, 86400000, "30000"},
	{"replica.lag.time.max.ms", CFG_LONG, F(replica_lag_time_max_ms), 1, INT32_MAX, "30000"},
	{"replica.fetch.wait.max.ms", CFG_INT, F(replica_fetch_wait_max_ms), 0, INT32_MAX, "500"},
	{"replica.fetch.min.bytes", CFG_INT, F(replica_fetch_min_bytes), 1, INT32_MAX, "1"},
	{"replica.fetch.max.bytes", CFG_INT, F(replica_fetch_max_bytes), 0, INT32_MAX, "1048576"},
	{"replica.fetch.response.max.bytes", CFG_INT, F(replica_fetch_response_max_bytes), 0, 1 << 30, "10485760"},
	{"replica.fetch.backoff.ms", CFG_INT, F(replica_fetch_backoff_ms), 0, INT32_MAX, "1000"},
	{"replica.socket.timeout.ms", CFG_INT, F(replica_socket_timeout_ms), 1, INT32_MAX, "30000"},
	{"replication.quota.window.num", CFG_INT, F(replication_quota_window_num), 1, 100, "11"},
	{"replication.quota.window.size.seconds", CFG_INT, F(replication_quota_window_size_seconds), 1, 3600, "1"},
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])

static const struct cfg_key *key_find(const char *name)
{
	for (size_t i = 0; i < KEY_COUNT; i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	return NULL;
}

static int set_typed(struct sluice_config *cfg, const struct cfg_key *k, const char *value,
		     char *err, size_t errlen)
{
	char *base = (char *)cfg + k->offset;
	if (k->type == CFG_STRING) {
		size_t n = strlen(value);
		size_t cap = strcmp(k->name, "log.level") == 0 || strcmp(k->name, "log.message.timestamp.type") == 0 ||
				     strcmp(k->name, "log.cleaner.min.cleanable.ratio") == 0 ||
				     strcmp(k->name, "sluice.transport") == 0 || strcmp(k->name, "compression.type") == 0 ? 32 :
			     strcmp(k->name, "cluster.id") == 0 || strcmp(k->name, "sluice.dpdk.listener") == 0 ? 64 :
			     strcmp(k->name, "log.cleanup.policy") == 0 ? SLUICE_CONFIG_LIST_MAX :
			     strcmp(k->name, "broker.rack") == 0 ? sizeof cfg->broker_rack : SLUICE_CONFIG_STRING_MAX;
		if (n >= cap) {
			snprintf(err, errlen, "%s: value is longer than %zu bytes", k->name, cap - 1);
			return -1;
		}
		memcpy(base, value, n + 1);
		return 0;
	}
	if (k->type == CFG_BOOL) {
		if (strcasecmp(value, "true") == 0)
			*(bool *)base = true;
		else if (strcasecmp(value, "false") == 0)
			*(bool *)base = false;
		else {
			snprintf(err, errlen, "%s: '%s' is not a boolean (true or false)", k->name, value);
			return -1;
		}
		return 0;
	}
	errno = 0;
	char *end = NULL;
	long long v = strtoll(value, &end, 10);
	if (errno || end == value || *end != '\0') {
		snprintf(err, errlen, "%s: '%s' is not an integer", k->name, value);
		return -1;
	}
	if (v < k->min || v > k->max) {
		snprintf(err, errlen, "%s: %lld is out of range [%lld, %lld]", k->name, v,
			 (long long)k->min, (long long)k->max);
		return -1;
	}
	if (k->type == CFG_INT)
		*(int32_t *)base = (int32_t)v;
	else
		*(int64_t *)base = v;
	return 0;
}

void sluice_config_defaults(struct sluice_config *cfg)
{
	char err[256];
	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < KEY_COUNT; i++) {
		int rc = set_typed(cfg, &keys[i], keys[i].def, err, sizeof err);
		(void)rc;
	}
}

int sluice_config_set(struct sluice_config *cfg, const char *key, const char *value, char *err, size_t errlen)
{
	const struct cfg_key *k = key_find(key);
	if (!k) {
		if (strcmp(key, "log.dir") == 0)
			k = key_find("log.dirs");
		else if (strcmp(key, "broker.id") == 0) /* its name before KRaft */
			k = key_find("node.id");
		else {
			SLOG_WARN("config", "unknown property '%s' ignored", key);
			return 0;
		}
	}
	int rc = set_typed(cfg, k, value, err, errlen);
	if (rc == 0 && k->offset == F(cluster_id))
		cfg->cluster_id_set = true;
	return rc;
}

static char *trim(char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	size_t n = strlen(s);
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		s[--n] = '\0';
	return s;
}

int sluice_config_load_file(struct sluice_config *cfg, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "cannot read configuration file %s: %s", path, strerror(errno));
		return -1;
	}
	char line[2048];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		char *s = trim(line);
		if (*s == '\0' || *s == '#' || *s == '!')
			continue;
		char *eq = strpbrk(s, "=:");
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected key=value", path, lineno);
			rc = -1;
			break;
		}
		*eq = '\0';
		char *key = trim(s), *value = trim(eq + 1);
		if (sluice_config_set(cfg, key, value, err, errlen) < 0) {
			rc = -1;
			break;
		}
	}
	fclose(f);
	return rc;
}

/* "PLAINTEXT://host:port" (first entry only for now; one listener). */
static int parse_listener(const char *key, const char *text, char *host, size_t hostlen, int *port,
			  char *err, size_t errlen)
{
	const char *p = strstr(text, "://");
	p = p ? p + 3 : text;
	const char *comma = strchr(p, ',');
	size_t len = comma ? (size_t)(comma - p) : strlen(p);
	const char *colon = NULL;
	for (size_t i = 0; i < len; i++)
		if (p[i] == ':')
			colon = p + i;
	if (!colon) {
		snprintf(err, errlen, "%s: '%s' is not of the form PLAINTEXT://host:port", key, text);
		return -1;
	}
	size_t hl = (size_t)(colon - p);
	if (hl >= hostlen) {
		snprintf(err, errlen, "%s: host name too long", key);
		return -1;
	}
	memcpy(host, p, hl);
	host[hl] = '\0';
	char portbuf[16];
	size_t pl = len - hl - 1;
	if (pl == 0 || pl >= sizeof portbuf) {
		snprintf(err, errlen, "%s: bad port in '%s'", key, text);
		return -1;
	}
	memcpy(portbuf, colon + 1, pl);
	portbuf[pl] = '\0';
	char *end;
	long v = strtol(portbuf, &end, 10);
	if (*end || v < 0 || v > 65535) {
		snprintf(err, errlen, "%s: bad port '%s'", key, portbuf);
		return -1;
	}
	*port = (int)v;
	return 0;
}

/* sluice.admin.listener: see sluice_http_parse_address (the controller's
 * key has the same syntax and refusals). */
static int parse_admin_listener(struct sluice_config *cfg, char *err, size_t errlen)
{
	return sluice_http_parse_address("sluice.admin.listener", cfg->admin_listener, cfg->admin_host,
					 sizeof cfg->admin_host, &cfg->admin_port, err, errlen);
}

bool sluice_config_cluster_mode(const struct sluice_config *cfg)
{
	return cfg->controller_quorum_voters[0] != '\0' || cfg->controller_quorum_bootstrap_servers[0] != '\0';
}

/* One "[id@]host:port" entry of a controller list, len bytes at p. */
static bool endpoint_valid(const char *p, size_t len, bool with_id)
{
	if (with_id) {
		size_t digits = 0;
		while (digits < len && p[digits] >= '0' && p[digits] <= '9')
			digits++;
		if (digits == 0 || digits > 9 || digits >= len || p[digits] != '@')
			return false;
		p += digits + 1;
		len -= digits + 1;
	}
	size_t colon = len;
	for (size_t i = 0; i < len; i++)
		if (p[i] == ':')
			colon = i;
	if (colon == 0 || colon >= len - 1 || colon > SLUICE_CONFIG_HOST_MAX || len - colon - 1 > 5 || memchr(p, '@', colon))
		return false;
	long port = 0;
	for (size_t i = colon + 1; i < len; i++) {
		if (p[i] < '0' || p[i] > '9')
			return false;
		port = port * 10 + (p[i] - '0');
	}
	return port >= 1 && port <= 65535;
}

/* controller.quorum.voters ("id@host:port,...") or
 * controller.quorum.bootstrap.servers ("host:port,..."). */
static int check_endpoints(const char *key, const char *text, bool with_id, char *err, size_t errlen)
{
	int n = 0;
	for (const char *p = text; *p;) {
		while (*p == ' ' || *p == '\t')
			p++;
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (!endpoint_valid(p, len, with_id) || ++n > SLUICE_CONFIG_CONTROLLERS_MAX) {
			snprintf(err, errlen, "%s: '%s' is not a list of at most %d %s", key, text, SLUICE_CONFIG_CONTROLLERS_MAX,
				 with_id ? "id@host:port" : "host:port");
			return -1;
		}
		p = comma ? comma + 1 : p + len;
	}
	return 0;
}

/* process.roles and the keys of cluster mode (config.h). */
static int cluster_finish(const struct sluice_config *cfg, char *err, size_t errlen)
{
	const char *roles = cfg->process_roles;
	if (roles[0] && strcmp(roles, "broker") != 0) {
		if (strstr(roles, "controller"))
			snprintf(err, errlen, "process.roles: '%s': sluice-broker is a broker only; the controller is the "
				 "separate sluice-controller binary (process.roles=controller in its own properties file)", roles);
		else
			snprintf(err, errlen, "process.roles: '%s' is not 'broker'", roles);
		return -1;
	}
	if (cfg->controller_quorum_voters[0] &&
	    check_endpoints("controller.quorum.voters", cfg->controller_quorum_voters, true, err, errlen) < 0)
		return -1;
	if (cfg->controller_quorum_bootstrap_servers[0] &&
	    check_endpoints("controller.quorum.bootstrap.servers", cfg->controller_quorum_bootstrap_servers, false, err,
			    errlen) < 0)
		return -1;
	if (!sluice_config_cluster_mode(cfg)) {
		if (roles[0]) {
			snprintf(err, errlen, "process.roles=broker: controller.quorum.voters (or "
				 "controller.quorum.bootstrap.servers) must name the controllers; leave process.roles unset "
				 "for a single-node broker");
			return -1;
		}
		return 0;
	}
	if (!cfg->cluster_id_set || !cfg->cluster_id[0]) {
		snprintf(err, errlen, "cluster.id: required in cluster mode (controllers named by controller.quorum.voters): the id the "
			 "controllers were given");
		return -1;
	}
	return 0;
}

/* log.cleanup.policy: a list of delete and compact (spaces around items
 * allowed, empty allowed: neither); *compact and *del say which. */
static bool cleanup_policy_parse(const char *v, bool *compact, bool *del)
{
	*compact = *del = false;
	for (const char *p = v; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		while (len && *p == ' ') {
			p++;
			len--;
		}
		while (len && p[len - 1] == ' ')
			len--;
		if (len == 7 && !memcmp(p, "compact", 7))
			*compact = true;
		else if (len == 6 && !memcmp(p, "delete", 6))
			*del = true;
		else if (len || e) /* an empty item between commas is as bad as an unknown one */
			return false;
		p = e ? e + 1 : p + len;
		if (e && !*p)
			return false; /* a trailing comma */
	}
	return true;
}

static bool compression_type_valid(const char *v)
{
	static const char *const names[] = {"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"};
	for (size_t i = 0; i < sizeof names / sizeof *names; i++)
		if (!strcmp(v, names[i]))
			return true;
	return false;
}

int sluice_config_derive(struct sluice_config *cfg, char *err, size_t errlen)
{
	if (cfg->log_retention_ms_raw != -2)
		cfg->log_retention_ms = cfg->log_retention_ms_raw;
	else if (cfg->log_retention_minutes != -2)
		cfg->log_retention_ms = cfg->log_retention_minutes * 60000;
	else
		cfg->log_retention_ms = cfg->log_retention_hours < 0 ? -1 : cfg->log_retention_hours * 3600000;
	if (cfg->log_roll_ms < 0)
		cfg->log_roll_ms = cfg->log_roll_hours * 3600000;
	if (strcmp(cfg->message_timestamp_type, "CreateTime") != 0 &&
	    strcmp(cfg->message_timestamp_type, "LogAppendTime") != 0) {
		snprintf(err, errlen, "log.message.timestamp.type: '%s' is not CreateTime or LogAppendTime",
			 cfg->message_timestamp_type);
		return -1;
	}
	cfg->log_append_time = strcmp(cfg->message_timestamp_type, "LogAppendTime") == 0;
	if (!cleanup_policy_parse(cfg->log_cleanup_policy, &cfg->log_cleanup_compact, &cfg->log_cleanup_delete)) {
		snprintf(err, errlen, "log.cleanup.policy: '%s' is not a list of delete and compact", cfg->log_cleanup_policy);
		return -1;
	}
	if (!compression_type_valid(cfg->compression_type)) {
		snprintf(err, errlen, "compression.type: '%s' is not one of uncompressed, zstd, lz4, snappy, gzip, producer",
			 cfg->compression_type);
		return -1;
	}
	if (cfg->pool_large_frame_bytes < 0) {
		int64_t b = (int64_t)cfg->message_max_bytes + SLUICE_CONFIG_FRAME_OVERHEAD_BYTES;
		cfg->pool_large_frame_bytes = (int32_t)(b < SLUICE_CONFIG_POOL_FRAME_BYTES_MAX ? b : SLUICE_CONFIG_POOL_FRAME_BYTES_MAX);
	}
	if (cfg->pool_large_frame_bytes < cfg->pool_frame_bytes)
		cfg->pool_large_frame_bytes = cfg->pool_frame_bytes; /* the large class is never the smaller */
	char *end;
	double r = strtod(cfg->log_cleaner_min_cleanable_ratio_s, &end);
	if (!cfg->log_cleaner_min_cleanable_ratio_s[0] || *end || !(r >= 0 && r <= 1)) {
		snprintf(err, errlen, "log.cleaner.min.cleanable.ratio: '%s' is not a number in [0, 1]",
			 cfg->log_cleaner_min_cleanable_ratio_s);
		return -1;
	}
	cfg->log_cleaner_min_cleanable_ratio = r;
	/* Kafka loads the class by name; the one selector it ships (and the
	 * only one Sluice has) picks a replica in the consumer's rack. */
	cfg->replica_selector_rack_aware = !strcmp(cfg->replica_selector_class, SLUICE_CONFIG_RACK_AWARE_SELECTOR);
	if (cfg->replica_selector_class[0] && !cfg->replica_selector_rack_aware) {
		snprintf(err, errlen, "replica.selector.class: '%s' is not " SLUICE_CONFIG_RACK_AWARE_SELECTOR
			 " (the only replica selector served; empty: consumers read from leaders only)",
			 cfg->replica_selector_class);
		return -1;
	}
	return 0;
}

int sluice_config_set_dynamic(struct sluice_config *cfg, const char *key, const char *value, char *err,
			      size_t errlen)
{
	const struct cfg_key *k = key_find(key);
	if (!k) {
		snprintf(err, errlen, "%s: not a broker property", key);
		return -1;
	}
	struct sluice_config *tmp = malloc(sizeof *tmp);
	if (!tmp) {
		snprintf(err, errlen, "%s: out of memory", key);
		return -1;
	}
	*tmp = *cfg;
	int rc = set_typed(tmp, k, value, err, errlen);
	if (rc == 0 && k->offset == F(log_roll_ms) && tmp->log_roll_ms < 0) {
		snprintf(err, errlen, "%s: %s is out of range [1, %lld]", key, value, (long long)INT64_MAX);
		rc = -1; /* -1 means "from log.roll.hours" only in the file */
	}
	if (rc == 0)
		rc = sluice_config_derive(tmp, err, errlen);
	if (rc == 0)
		*cfg = *tmp;
	free(tmp);
	return rc;
}

const char *sluice_config_default(const char *key)
{
	const struct cfg_key *k = key_find(key);
	return k ? k->def : NULL;
}

int sluice_config_finish(struct sluice_config *cfg, char *err, size_t errlen)
{
	if (cluster_finish(cfg, err, errlen) < 0)
		return -1;
	if (parse_listener("listeners", cfg->listeners, cfg->listen_host, sizeof cfg->listen_host,
			   &cfg->listen_port, err, errlen) < 0)
		return -1;
	if (cfg->advertised_listeners[0] == '\0') {
		memcpy(cfg->advertised_host, cfg->listen_host, sizeof cfg->advertised_host);
		cfg->advertised_port = cfg->listen_port;
		if (cfg->advertised_host[0] == '\0' || strcmp(cfg->advertised_host, "0.0.0.0") == 0)
			snprintf(cfg->advertised_host, sizeof cfg->advertised_host, "localhost");
	} else if (parse_listener("advertised.listeners", cfg->advertised_listeners, cfg->advertised_host,
				  sizeof cfg->advertised_host, &cfg->advertised_port, err, errlen) < 0)
		return -1;
	cfg->log_dir_count = 0;
	char tmp[SLUICE_CONFIG_STRING_MAX];
	memcpy(tmp, cfg->log_dirs, sizeof tmp);
	char *save = NULL;
	for (char *d = strtok_r(tmp, ",", &save); d; d = strtok_r(NULL, ",", &save)) {
		d = trim(d);
		if (!*d)
			continue;
		if (cfg->log_dir_count == SLUICE_LOG_DIRS_MAX) {
			snprintf(err, errlen, "log.dirs: more than %d directories", SLUICE_LOG_DIRS_MAX);
			return -1;
		}
		snprintf(cfg->log_dir[cfg->log_dir_count++], SLUICE_CONFIG_STRING_MAX, "%s", d);
	}
	if (cfg->log_dir_count == 0) {
		snprintf(err, errlen, "log.dirs: no directory given");
		return -1;
	}
	if (sluice_config_derive(cfg, err, errlen) < 0)
		return -1;
	if (parse_admin_listener(cfg, err, errlen) < 0)
		return -1;
	int lvl = sluice_log_level_parse(cfg->log_level);
	if (lvl < 0) {
		snprintf(err, errlen, "log.level: '%s' is not one of ERROR, WARN, INFO, DEBUG, TRACE", cfg->log_level);
		return -1;
	}
	sluice_log_set_level(lvl);
	return 0;
}

/* The value of k in cfg as text, and whether it is the default's. */
static bool key_value(const struct sluice_config *cfg, const struct cfg_key *k, char *value, size_t valuelen)
{
	const char *base = (const char *)cfg + k->offset;
	switch (k->type) {
	case CFG_INT: snprintf(value, valuelen, "%d", *(const int32_t *)base); break;
	case CFG_LONG: snprintf(value, valuelen, "%lld", (long long)*(const int64_t *)base); break;
	case CFG_BOOL: snprintf(value, valuelen, "%s", *(const bool *)base ? "true" : "false"); break;
	case CFG_STRING: snprintf(value, valuelen, "%s", base); break;
	}
	return strcmp(value, k->def) == 0;
}

bool sluice_config_entry(const struct sluice_config *cfg, size_t i, const char **name, char *value,
			 size_t valuelen, bool *is_default)
{
	if (i >= KEY_COUNT)
		return false;
	*name = keys[i].name;
	*is_default = key_value(cfg, &keys[i], value, valuelen);
	return true;
}

bool sluice_config_value(const struct sluice_config *cfg, const char *name, char *value, size_t valuelen,
			 bool *is_default)
{
	const struct cfg_key *k = key_find(name);
	if (!k)
		return false;
	*is_default = key_value(cfg, k, value, valuelen);
	return true;
}
