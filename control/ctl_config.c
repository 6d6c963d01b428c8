/* controller.properties parsing: a table of known keys (name, type, field,
 * range, default) drives parsing and defaults, so adding a key is one
 * line; sluice_controller_config_finish then checks the keys that only
 * make sense together and derives what the quorum and the decision rules
 * take. */
#include "control/ctl_config.h"
#include "common/http.h"
#include "common/log.h"
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum key_type { KEY_INT, KEY_LONG, KEY_BOOL, KEY_STRING };

struct key {
	const char *name;
	enum key_type type;
	size_t offset, size; /* size: the field's (strings: its capacity) */
	int64_t min, max;
	const char *def;
};

#define F(field) offsetof(struct sluice_controller_config, field), sizeof(((struct sluice_controller_config *)0)->field)
#define ELECTION_TIMEOUT_MS_MIN 100 /* below it Raft's heartbeat (a tenth) is too short to matter */
#define RAFT_PORT_OFFSET_MAX 1000

static const struct key keys[] = {
	{"process.roles", KEY_STRING, F(process_roles), 0, 0, ""},
	{"node.id", KEY_INT, F(node_id), 0, INT32_MAX, "-1"},
	{"controller.quorum.voters", KEY_STRING, F(voters), 0, 0, ""},
	{"listeners", KEY_STRING, F(listeners), 0, 0, ""},
	{"controller.listener.names", KEY_STRING, F(listener_names), 0, 0, "CONTROLLER"},
	{"metadata.log.dir", KEY_STRING, F(metadata_log_dir), 0, 0, ""},
	{"log.dirs", KEY_STRING, F(log_dirs), 0, 0, ""},
	{"cluster.id", KEY_STRING, F(cluster_id), 0, 0, ""},
	{"controller.quorum.election.timeout.ms", KEY_LONG, F(election_timeout_ms), ELECTION_TIMEOUT_MS_MIN, 3600000,
	 "1000"},
	{"broker.heartbeat.interval.ms", KEY_LONG, F(heartbeat_interval_ms), 1, 3600000, "2000"},
	{"broker.session.timeout.ms", KEY_LONG, F(session_timeout_ms), 1, 3600000, "9000"},
	{"num.partitions", KEY_INT, F(num_partitions), 1, SLUICE_PARTITIONS_PER_TOPIC_MAX, "1"},
	{"default.replication.factor", KEY_INT, F(default_replication_factor), 1, SLUICE_REPLICAS_MAX, "1"},
	{"auto.leader.rebalance.enable", KEY_BOOL, F(auto_leader_rebalance), 0, 1, "true"},
	{"sluice.controller.raft.port.offset", KEY_INT, F(raft_port_offset), 1, RAFT_PORT_OFFSET_MAX, "1"},
	{"sluice.controller.snapshot.threshold", KEY_LONG, F(snapshot_threshold), 1, UINT32_MAX, "1024"},
	{"sluice.controller.snapshot.trailing", KEY_LONG, F(snapshot_trailing), 0, UINT32_MAX, "2048"},
	{"log.level", KEY_STRING, F(log_level), 0, 0, "INFO"},
	{"socket.request.max.bytes", KEY_INT, F(socket_request_max_bytes), 1024, INT32_MAX, "104857600"},
	{"max.connections", KEY_INT, F(connections_max), 1, 65536, "1024"},
	{"sluice.admin.listener", KEY_STRING, F(admin_listener), 0, 0, ""},
};
#define KEY_COUNT (sizeof keys / sizeof keys[0])

static const struct key *key_find(const char *name)
{
	for (size_t i = 0; i < KEY_COUNT; i++)
		if (strcmp(keys[i].name, name) == 0)
			return &keys[i];
	if (strcmp(name, "log.dir") == 0)
		return key_find("log.dirs");
	return NULL;
}

static int set_integer(struct sluice_controller_config *cfg, const struct key *k, const char *value, char *err,
		       size_t errlen)
{
	char *base = (char *)cfg + k->offset;
	errno = 0;
	char *end = NULL;
	long long v = strtoll(value, &end, 10);
	if (errno || end == value || *end != '\0') {
		snprintf(err, errlen, "%s: '%s' is not an integer", k->name, value);
		return -1;
	}
	/* node.id's default -1 means "not given": only the file's value is ranged. */
	if (v < k->min || v > k->max) {
		snprintf(err, errlen, "%s: %lld is out of range [%" PRId64 ", %" PRId64 "]", k->name, v, k->min, k->max);
		return -1;
	}
	if (k->type == KEY_INT) {
		assert(k->size == sizeof(int32_t));
		*(int32_t *)base = (int32_t)v;
	} else {
		assert(k->size == sizeof(int64_t));
		*(int64_t *)base = v;
	}
	return 0;
}

static int set_typed(struct sluice_controller_config *cfg, const struct key *k, const char *value, char *err,
		     size_t errlen)
{
	char *base = (char *)cfg + k->offset;
	if (k->type == KEY_STRING) {
		size_t n = strlen(value);
		if (n >= k->size) {
			snprintf(err, errlen, "%s: value is longer than %zu bytes", k->name, k->size - 1);
			return -1;
		}
		memcpy(base, value, n + 1);
		return 0;
	}
	if (k->type == KEY_BOOL) {
		assert(k->size == sizeof(bool));
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
	return set_integer(cfg, k, value, err, errlen);
}

void sluice_controller_config_defaults(struct sluice_controller_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	for (size_t i = 0; i < KEY_COUNT; i++) {
		if (strcmp(keys[i].name, "node.id") == 0) {
			cfg->node_id = -1; /* below the key's range on purpose: "not given" */
			continue;
		}
		char err[256];
		int rc = set_typed(cfg, &keys[i], keys[i].def, err, sizeof err);
		assert(rc == 0); /* the table's defaults are in range */
		(void)rc;
	}
	assert(cfg->node_id == -1 && cfg->election_timeout_ms == 1000);
}

int sluice_controller_config_set(struct sluice_controller_config *cfg, const char *key, const char *value, char *err,
				 size_t errlen)
{
	const struct key *k = key_find(key);
	if (!k) {
		SLOG_WARN("config", "unknown property '%s' ignored", key);
		return 0;
	}
	return set_typed(cfg, k, value, err, errlen);
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

#define LINE_BYTES_MAX 8192

int sluice_controller_config_load_file(struct sluice_controller_config *cfg, const char *path, char *err,
				       size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "cannot read configuration file %s: %s", path, strerror(errno));
		return -1;
	}
	char line[LINE_BYTES_MAX];
	int lineno = 0, rc = 0;
	while (rc == 0 && fgets(line, sizeof line, f)) {
		lineno++;
		if (!strchr(line, '\n') && !feof(f)) {
			snprintf(err, errlen, "%s:%d: line longer than %d bytes", path, lineno, LINE_BYTES_MAX - 2);
			rc = -1;
			break;
		}
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
		rc = sluice_controller_config_set(cfg, trim(s), trim(eq + 1), err, errlen);
	}
	if (rc == 0 && ferror(f)) {
		snprintf(err, errlen, "cannot read configuration file %s", path);
		rc = -1;
	}
	fclose(f);
	return rc;
}

/* ---- whole-file checks and derived values ---------------------------------- */

/* The first item of a comma-separated list, trimmed, into out. */
static int list_item(const char *list, size_t index, char *out, size_t outlen)
{
	const char *p = list;
	for (size_t i = 0; i < index; i++) {
		p = strchr(p, ',');
		if (!p)
			return -1;
		p++;
	}
	while (*p == ' ' || *p == '\t')
		p++;
	const char *end = strchr(p, ',');
	size_t n = end ? (size_t)(end - p) : strlen(p);
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
		n--;
	if (n >= outlen)
		return -1;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

static bool name_listed(const char *list, const char *name)
{
	char item[SLUICE_CTL_CONFIG_NAME_MAX];
	for (size_t i = 0; list_item(list, i, item, sizeof item) == 0; i++)
		if (strcmp(item, name) == 0)
			return true;
	return false;
}

/* One listener "NAME://host:port" into name, host and port. */
static int parse_listener(const char *text, char *name, size_t namelen, char *host, size_t hostlen, uint16_t *port)
{
	const char *sep = strstr(text, "://");
	if (!sep || sep == text || (size_t)(sep - text) >= namelen)
		return -1;
	memcpy(name, text, (size_t)(sep - text));
	name[sep - text] = '\0';
	const char *h = sep + 3;
	const char *colon = strrchr(h, ':');
	if (!colon || (size_t)(colon - h) >= hostlen)
		return -1;
	size_t hl = (size_t)(colon - h);
	if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') { /* [::1] */
		h++;
		hl -= 2;
	}
	memcpy(host, h, hl);
	host[hl] = '\0';
	char *end;
	errno = 0;
	long v = strtol(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || v < 1 || v > 65535)
		return -1;
	*port = (uint16_t)v;
	return 0;
}

/* listeners: the entry whose name is controller.listener.names' first. */
static int finish_listener(struct sluice_controller_config *cfg, char *err, size_t errlen)
{
	char want[SLUICE_CTL_CONFIG_NAME_MAX];
	if (list_item(cfg->listener_names, 0, want, sizeof want) < 0 || !want[0]) {
		snprintf(err, errlen, "controller.listener.names: no listener name given");
		return -1;
	}
	if (!cfg->listeners[0]) {
		snprintf(err, errlen, "listeners: required (e.g. listeners=%s://127.0.0.1:9093)", want);
		return -1;
	}
	char item[SLUICE_CTL_CONFIG_STRING_MAX];
	for (size_t i = 0; list_item(cfg->listeners, i, item, sizeof item) == 0; i++) {
		char name[SLUICE_CTL_CONFIG_NAME_MAX];
		if (parse_listener(item, name, sizeof name, cfg->listen_host, sizeof cfg->listen_host, &cfg->listen_port) < 0) {
			snprintf(err, errlen, "listeners: '%s' is not of the form NAME://host:port", item);
			return -1;
		}
		if (!name_listed(cfg->listener_names, name)) {
			snprintf(err, errlen, "listeners: '%s' is not named in controller.listener.names (%s)", name,
				 cfg->listener_names);
			return -1;
		}
		if (strcmp(name, want) == 0) {
			snprintf(cfg->listener_name, sizeof cfg->listener_name, "%s", name);
			return 0;
		}
	}
	snprintf(err, errlen, "listeners: no %s:// listener (controller.listener.names=%s)", want, cfg->listener_names);
	return -1;
}

/* controller.quorum.voters: parsed by the quorum; this node's entry must
 * be its node.id at its listener's port; Raft ports are the listener
 * ports plus sluice.controller.raft.port.offset. */
static int finish_voters(struct sluice_controller_config *cfg, char *err, size_t errlen)
{
	if (!cfg->voters[0]) {
		snprintf(err, errlen, "controller.quorum.voters: required (e.g. 1@127.0.0.1:9093,2@127.0.0.1:9095)");
		return -1;
	}
	char qerr[200];
	memset(&cfg->quorum, 0, sizeof cfg->quorum);
	if (sluice_quorum_parse_voters(cfg->voters, &cfg->quorum, qerr, sizeof qerr) < 0) {
		/* the quorum's messages mostly name the key already */
		if (strncmp(qerr, "controller.quorum.voters", 24) == 0)
			snprintf(err, errlen, "%s", qerr);
		else
			snprintf(err, errlen, "controller.quorum.voters: %s", qerr);
		return -1;
	}
	assert(cfg->quorum.voter_n >= 1 && cfg->quorum.voter_n <= SLUICE_QUORUM_VOTERS_MAX);
	bool self = false;
	for (int32_t i = 0; i < cfg->quorum.voter_n; i++) {
		struct sluice_quorum_voter *v = &cfg->quorum.voters[i];
		if ((uint32_t)v->port + (uint32_t)cfg->raft_port_offset > 65535) {
			snprintf(err, errlen, "controller.quorum.voters: voter %d's Raft port %u + %d is above 65535", v->id,
				 v->port, cfg->raft_port_offset);
			return -1;
		}
		if (v->id == cfg->node_id) {
			if (v->port != cfg->listen_port) {
				snprintf(err, errlen,
					 "controller.quorum.voters: this node's entry (%d@%s:%u) does not name the port of "
					 "listeners (%u)",
					 v->id, v->host, v->port, cfg->listen_port);
				return -1;
			}
			self = true;
		}
		cfg->voter_listener_ports[i] = v->port;
		v->port = (uint16_t)(v->port + cfg->raft_port_offset);
	}
	if (!self) {
		snprintf(err, errlen, "controller.quorum.voters: node.id %d is not one of the voters", cfg->node_id);
		return -1;
	}
	return 0;
}

static int finish_required(struct sluice_controller_config *cfg, char *err, size_t errlen)
{
	if (strcmp(cfg->process_roles, "controller") != 0) {
		snprintf(err, errlen, "process.roles: must be exactly 'controller' for sluice-controller (got '%s')",
			 cfg->process_roles);
		return -1;
	}
	if (cfg->node_id < 0) {
		snprintf(err, errlen, "node.id: required");
		return -1;
	}
	if (!cfg->cluster_id[0]) {
		snprintf(err, errlen, "cluster.id: required (the same on every controller and broker of the cluster)");
		return -1;
	}
	if (!cfg->metadata_log_dir[0] && list_item(cfg->log_dirs, 0, cfg->metadata_log_dir,
						       sizeof cfg->metadata_log_dir) < 0)
		cfg->metadata_log_dir[0] = '\0';
	if (!cfg->metadata_log_dir[0]) {
		snprintf(err, errlen, "metadata.log.dir: required (the directory of the quorum's log and snapshots)");
		return -1;
	}
	if (cfg->session_timeout_ms <= cfg->heartbeat_interval_ms) {
		snprintf(err, errlen, "broker.session.timeout.ms: %" PRId64 " must be above broker.heartbeat.interval.ms (%" PRId64 ")",
			 cfg->session_timeout_ms, cfg->heartbeat_interval_ms);
		return -1;
	}
	int lvl = sluice_log_level_parse(cfg->log_level);
	if (lvl < 0) {
		snprintf(err, errlen, "log.level: '%s' is not one of ERROR, WARN, INFO, DEBUG, TRACE", cfg->log_level);
		return -1;
	}
	sluice_log_set_level(lvl);
	return 0;
}

int sluice_controller_config_finish(struct sluice_controller_config *cfg, char *err, size_t errlen)
{
	if (finish_required(cfg, err, errlen) < 0 || finish_listener(cfg, err, errlen) < 0 ||
	    finish_voters(cfg, err, errlen) < 0 ||
	    sluice_http_parse_address("sluice.admin.listener", cfg->admin_listener, cfg->admin_host,
				      sizeof cfg->admin_host, &cfg->admin_port, err, errlen) < 0)
		return -1;
	struct sluice_quorum_config *q = &cfg->quorum;
	q->node_id = cfg->node_id;
	q->dir = cfg->metadata_log_dir;
	q->election_timeout_ms = (unsigned)cfg->election_timeout_ms;
	q->heartbeat_timeout_ms = (unsigned)(cfg->election_timeout_ms / 10);
	q->snapshot_threshold = (unsigned)cfg->snapshot_threshold;
	q->snapshot_trailing = (unsigned)cfg->snapshot_trailing;
	struct sluice_ctl_config *l = &cfg->logic;
	l->session_timeout_ms = cfg->session_timeout_ms;
	l->default_partitions = cfg->num_partitions;
	l->default_replication_factor = (int16_t)cfg->default_replication_factor;
	l->auto_leader_rebalance = cfg->auto_leader_rebalance;
	assert(q->heartbeat_timeout_ms > 0 && l->default_partitions > 0);
	return 0;
}
