/* The `sluice` command-line tool's pieces: what `sluice cluster status`
 * learns from a cluster (controllers, brokers, partition health), the Kafka
 * requests it sends and the decoders of their answers (cli_wire.c: pure
 * functions over bytes, with the project's bounds-checked codec), a blocking
 * client connection with time-outs (cli_net.c), and the status command
 * itself (cli_status.c); the admin requests and their decoders
 * (cli_admin_wire.c) and the logger, topic (cli_admin.c) and group
 * (cli_group.c) commands. The tool is a client of both the brokers and the
 * controllers, so it lives beside them (tools/) and links only common/.
 * Every count read from the wire that sizes what is kept is bounded by a
 * named maximum below or by the answer's own size (SLUICE_CLI_FRAME_MAX). */
#ifndef SLUICE_TOOLS_CLI_H
#define SLUICE_TOOLS_CLI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/kafka/codec.h"

#define SLUICE_CLI_HOST_MAX 256          /* a DNS name is at most 253 bytes; with the NUL */
#define SLUICE_CLI_RACK_MAX 256
#define SLUICE_CLI_CONTROLLERS_MAX 64    /* voters in a quorum (Kafka's practical limit is far lower) */
#define SLUICE_CLI_BROKERS_MAX 4096
#define SLUICE_CLI_LISTENERS_MAX 64      /* listeners of one controller in DescribeQuorum v2 Nodes */
#define SLUICE_CLI_SERVERS_MAX 16        /* HOST:PORT entries of --bootstrap-server/-controller */
#define SLUICE_CLI_FRAME_MAX (64u << 20) /* largest answer read (Metadata of ~1M partitions) */
#define SLUICE_CLI_REQUEST_MAX (64u << 10)
#define SLUICE_CLI_ERR_MAX 1024 /* a failure with the server's name in front */
#define SLUICE_CLI_WHY_MAX 256  /* a decoder's own sentence */
#define SLUICE_CLI_TIMEOUT_MS_DEFAULT 5000
#define SLUICE_CLI_TIMEOUT_MS_MAX 600000

/* Kafka API keys the tool speaks. */
enum {
	SLUICE_CLI_API_LIST_OFFSETS = 2,
	SLUICE_CLI_API_METADATA = 3,
	SLUICE_CLI_API_OFFSET_FETCH = 9,
	SLUICE_CLI_API_FIND_COORDINATOR = 10,
	SLUICE_CLI_API_DESCRIBE_GROUPS = 15,
	SLUICE_CLI_API_LIST_GROUPS = 16,
	SLUICE_CLI_API_API_VERSIONS = 18,
	SLUICE_CLI_API_CREATE_TOPICS = 19,
	SLUICE_CLI_API_DELETE_TOPICS = 20,
	SLUICE_CLI_API_DESCRIBE_CONFIGS = 32,
	SLUICE_CLI_API_INCREMENTAL_ALTER_CONFIGS = 44,
	SLUICE_CLI_API_DESCRIBE_QUORUM = 55,
	SLUICE_CLI_API_DESCRIBE_CLUSTER = 60,
	SLUICE_CLI_API_KEYS_MAX = 128, /* ApiVersions entries above are ignored */
};

/* Exit status of every command, for scripts. */
enum {
	SLUICE_CLI_EXIT_OK = 0,
	SLUICE_CLI_EXIT_ERROR = 1,       /* a refusal or error from the server, or a malformed answer */
	SLUICE_CLI_EXIT_USAGE = 2,
	SLUICE_CLI_EXIT_UNREACHABLE = 3, /* no server of the list could be connected to */
};

/* The versions this tool can write and read, per API. */
#define SLUICE_CLI_METADATA_MIN 1
#define SLUICE_CLI_METADATA_MAX 12
#define SLUICE_CLI_METADATA_FLEX_MIN 9
#define SLUICE_CLI_DESCRIBE_QUORUM_MAX 2   /* flexible from 0 */
#define SLUICE_CLI_DESCRIBE_CLUSTER_MAX 2  /* flexible from 0 */
/* The admin requests are written only in their flexible versions, which
 * Sluice and Apache Kafka 4.x both serve. */
#define SLUICE_CLI_DESCRIBE_CONFIGS_MIN 1
#define SLUICE_CLI_DESCRIBE_CONFIGS_MAX 4
#define SLUICE_CLI_DESCRIBE_CONFIGS_FLEX_MIN 4
#define SLUICE_CLI_ALTER_CONFIGS_VERSION 1 /* IncrementalAlterConfigs v1, flexible */
#define SLUICE_CLI_CREATE_TOPICS_MIN 5
#define SLUICE_CLI_CREATE_TOPICS_MAX 7
#define SLUICE_CLI_DELETE_TOPICS_MIN 4
#define SLUICE_CLI_DELETE_TOPICS_MAX 6

#define SLUICE_CLI_LIST_OFFSETS_MIN 6
#define SLUICE_CLI_LIST_OFFSETS_MAX 7
#define SLUICE_CLI_OFFSET_FETCH_VERSION 8 /* the Groups array; v9 only adds the new protocol's member */
#define SLUICE_CLI_FIND_COORDINATOR_MIN 3
#define SLUICE_CLI_FIND_COORDINATOR_MAX 4
#define SLUICE_CLI_DESCRIBE_GROUPS_MIN 5
#define SLUICE_CLI_DESCRIBE_GROUPS_MAX 6
#define SLUICE_CLI_LIST_GROUPS_MIN 3
#define SLUICE_CLI_LIST_GROUPS_MAX 5

#define SLUICE_CLI_TOPIC_NAME_MAX 256  /* Kafka's limit is 249 bytes; with the NUL */
#define SLUICE_CLI_MESSAGE_MAX 512     /* a server's ErrorMessage as kept (longer ones are cut) */
#define SLUICE_CLI_CONFIG_ARGS_MAX 64  /* --config/--set/--delete of one command */

/* Resource types of DescribeConfigs and IncrementalAlterConfigs. */
enum { SLUICE_CLI_RESOURCE_TOPIC = 2, SLUICE_CLI_RESOURCE_BROKER_LOGGER = 8 };
/* IncrementalAlterConfigs' ConfigOperation. */
enum { SLUICE_CLI_OP_SET = 0, SLUICE_CLI_OP_DELETE = 1 };
/* DescribeConfigs' ConfigSource of a value that is the default. */
#define SLUICE_CLI_SOURCE_DEFAULT 5

struct sluice_cli_endpoint {
	char host[SLUICE_CLI_HOST_MAX];
	int32_t port;
};

/* What ApiVersions v0 said about the keys the tool uses. */
struct sluice_cli_versions {
	bool metadata, describe_quorum, describe_cluster; /* served at all */
	int16_t metadata_min, metadata_max;
	int16_t describe_quorum_min, describe_quorum_max;
	int16_t describe_cluster_min, describe_cluster_max;
	/* every key below SLUICE_CLI_API_KEYS_MAX, for the other commands */
	bool served[SLUICE_CLI_API_KEYS_MAX];
	int16_t min[SLUICE_CLI_API_KEYS_MAX], max[SLUICE_CLI_API_KEYS_MAX];
};

struct sluice_cli_controller {
	int32_t id;
	int64_t log_end_offset; /* as DescribeQuorum gives it; -1 unknown */
	bool has_endpoint;      /* from DescribeQuorum v2 Nodes (its first listener) */
	struct sluice_cli_endpoint endpoint;
};

/* DescribeQuorum's answer for __cluster_metadata partition 0. */
struct sluice_cli_quorum {
	int16_t error;      /* the top-level error, else the partition's */
	int32_t leader_id;  /* -1: no leader known */
	int32_t leader_epoch;
	int64_t high_watermark;
	int32_t voter_n;
	struct sluice_cli_controller voters[SLUICE_CLI_CONTROLLERS_MAX];
};

struct sluice_cli_broker {
	int32_t id;
	struct sluice_cli_endpoint endpoint;
	bool has_rack;
	char rack[SLUICE_CLI_RACK_MAX];
	bool fenced;
};

/* DescribeCluster's brokers. fenced_known: the answer was v2 asked with
 * IncludeFencedBrokers, so fenced brokers are listed and flagged; below v2
 * only unfenced brokers are listed. */
struct sluice_cli_brokers {
	int16_t error;
	int32_t controller_id;
	bool fenced_known;
	int32_t broker_n;
	struct sluice_cli_broker brokers[SLUICE_CLI_BROKERS_MAX];
};

/* Metadata for all topics, counted (nothing is kept per partition). */
struct sluice_cli_partitions {
	int64_t topics, partitions;
	int64_t offline;          /* LeaderId -1 */
	int64_t under_replicated; /* fewer ISR members than replicas */
};

/* Metadata kept whole (cli_admin_wire.c), for the topic and logger
 * commands. Arrays are malloc'd and sized by counts already checked against
 * the bytes of the answer; the replica lists of every partition share ids. */
struct sluice_cli_md_broker {
	int32_t id;
	struct sluice_cli_endpoint endpoint;
};

struct sluice_cli_md_partition {
	int16_t error;
	int32_t index, leader;
	int32_t replica_at, replica_n, isr_at, isr_n, offline_at, offline_n; /* into ids */
};

struct sluice_cli_md_topic {
	int16_t error;
	char name[SLUICE_CLI_TOPIC_NAME_MAX];
	uint8_t id[16];
	bool internal;
	int32_t partition_at, partition_n; /* into partitions */
};

struct sluice_cli_metadata {
	int32_t controller_id;
	int32_t broker_n, topic_n, partition_n, id_n;
	struct sluice_cli_md_broker *brokers;
	struct sluice_cli_md_topic *topics;
	struct sluice_cli_md_partition *partitions;
	int32_t *ids;
};

/* One config entry of a DescribeConfigs answer (strings malloc'd). */
struct sluice_cli_config {
	char *name;
	char *value; /* NULL: a null value (a sensitive one) */
	int8_t source;
	bool read_only, sensitive;
};

/* DescribeConfigs' answer for the one resource asked about. */
struct sluice_cli_configs {
	int16_t error;
	char message[SLUICE_CLI_MESSAGE_MAX];
	int32_t config_n;
	struct sluice_cli_config *configs;
};

/* The answer for one resource or topic of IncrementalAlterConfigs,
 * CreateTopics or DeleteTopics. */
struct sluice_cli_result {
	int16_t error;
	char message[SLUICE_CLI_MESSAGE_MAX]; /* "" when the server gave none */
	uint8_t topic_id[16];                 /* CreateTopics v7, DeleteTopics v6 */
	int32_t partitions;                   /* CreateTopics: -1 unknown */
	int16_t replication_factor;
};

/* ---- consumer groups (cli_admin_wire.c) ---- */

#define SLUICE_CLI_WORD_MAX 64 /* a group's state, protocol type or protocol, as kept (cut) */

struct sluice_cli_group_listing {
	char *group_id; /* malloc'd */
	char protocol_type[SLUICE_CLI_WORD_MAX];
	char state[SLUICE_CLI_WORD_MAX]; /* "" below ListGroups v4 */
};

struct sluice_cli_group_list {
	int16_t error;
	int32_t n;
	struct sluice_cli_group_listing *groups;
};

struct sluice_cli_coordinator {
	int16_t error;
	char message[SLUICE_CLI_MESSAGE_MAX];
	int32_t node_id;
	struct sluice_cli_endpoint endpoint;
};

/* A topic partition and an offset: a committed one (OffsetFetch, -1 none),
 * a log end offset (ListOffsets), or an assignment (offset unused). */
struct sluice_cli_tp {
	char topic[SLUICE_CLI_TOPIC_NAME_MAX];
	int32_t partition;
	int64_t offset;
	int16_t error;
};

struct sluice_cli_tps {
	int16_t error; /* the group's or the request's */
	int32_t n, cap;
	struct sluice_cli_tp *v;
};

struct sluice_cli_member {
	char *member_id, *instance_id, *client_id, *client_host; /* malloc'd; instance_id may be NULL */
	int32_t assigned_at, assigned_n; /* into the group's assigned */
	bool assignment_unreadable;      /* not the consumer protocol's layout */
};

struct sluice_cli_group {
	int16_t error;
	char message[SLUICE_CLI_MESSAGE_MAX];
	char state[SLUICE_CLI_WORD_MAX], protocol_type[SLUICE_CLI_WORD_MAX], protocol[SLUICE_CLI_WORD_MAX];
	int32_t member_n;
	struct sluice_cli_member *members;
	struct sluice_cli_tps assigned;
};

/* A config change: key and value (value NULL for DELETE). */
struct sluice_cli_alter {
	const char *key, *value;
	int8_t op;
};

/* ---- cli_wire.c: requests and answers ---------------------------------------- */

/* The request header (v1, or v2 for a flexible request) with client id "sluice". */
void sluice_cli_encode_header(struct kwr *w, int16_t key, int16_t version, int32_t correlation_id, bool flexible);
void sluice_cli_encode_describe_quorum(struct kwr *w, int16_t version);
/* EndpointType 1 (brokers) and, from v2, IncludeFencedBrokers true. */
void sluice_cli_encode_describe_cluster(struct kwr *w, int16_t version);
/* All topics, none created, no authorized operations. */
void sluice_cli_encode_metadata(struct kwr *w, int16_t version);
bool sluice_cli_metadata_flexible(int16_t version);

/* Each decoder reads one whole response body (after the response header),
 * checks every length against what is left and that nothing is left over,
 * and returns 0, or -1 with a sentence in err naming the API, version and
 * offset. */
int sluice_cli_decode_api_versions(const uint8_t *body, size_t len, struct sluice_cli_versions *out, char *err,
				   size_t errlen);
int sluice_cli_decode_describe_quorum(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_quorum *out,
				      char *err, size_t errlen);
int sluice_cli_decode_describe_cluster(const uint8_t *body, size_t len, int16_t version,
				       struct sluice_cli_brokers *out, char *err, size_t errlen);
int sluice_cli_decode_metadata(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_partitions *out,
			       char *err, size_t errlen);

/* ---- cli_admin_wire.c: the admin requests and their answers ------------------ */

/* Metadata of the named topics (n >= 0; n -1: all of them), none created. */
void sluice_cli_encode_metadata_topics(struct kwr *w, int16_t version, const char *const *names, int32_t n);
int sluice_cli_decode_metadata_full(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_metadata *out,
				    char *err, size_t errlen);
void sluice_cli_metadata_free(struct sluice_cli_metadata *m);

bool sluice_cli_describe_configs_flexible(int16_t version);
/* One resource; key NULL: every config of it. */
void sluice_cli_encode_describe_configs(struct kwr *w, int16_t version, int8_t type, const char *name, const char *key);
/* The one resource's answer; more than one resource is malformed. */
int sluice_cli_decode_describe_configs(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_configs *out,
				       char *err, size_t errlen);
void sluice_cli_configs_free(struct sluice_cli_configs *c);

/* IncrementalAlterConfigs v1: one resource, its changes. */
void sluice_cli_encode_alter_configs(struct kwr *w, int8_t type, const char *name, const struct sluice_cli_alter *a,
				     int32_t n);
int sluice_cli_decode_alter_configs(const uint8_t *body, size_t len, struct sluice_cli_result *out, char *err,
				    size_t errlen);

/* CreateTopics v5-7: one topic; configs as alternating key, value. */
void sluice_cli_encode_create_topic(struct kwr *w, int16_t version, const char *name, int32_t partitions,
				    int16_t replication_factor, const char *const *configs, int32_t config_n,
				    int32_t timeout_ms);
int sluice_cli_decode_create_topics(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_result *out,
				    char *err, size_t errlen);
/* DeleteTopics v4-6: one topic by name. */
void sluice_cli_encode_delete_topic(struct kwr *w, int16_t version, const char *name, int32_t timeout_ms);
int sluice_cli_decode_delete_topics(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_result *out,
				    char *err, size_t errlen);

/* ---- cli_admin_wire.c: consumer groups ----------------------------------------- */

bool sluice_cli_list_offsets_flexible(int16_t version);
void sluice_cli_encode_list_groups(struct kwr *w, int16_t version);
int sluice_cli_decode_list_groups(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_group_list *out,
				  char *err, size_t errlen);
void sluice_cli_group_list_free(struct sluice_cli_group_list *l);
/* FindCoordinator of a group (KeyType 0). */
void sluice_cli_encode_find_coordinator(struct kwr *w, int16_t version, const char *group);
int sluice_cli_decode_find_coordinator(const uint8_t *body, size_t len, int16_t version,
				       struct sluice_cli_coordinator *out, char *err, size_t errlen);
void sluice_cli_encode_describe_group(struct kwr *w, int16_t version, const char *group);
int sluice_cli_decode_describe_group(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_group *out,
				     char *err, size_t errlen);
void sluice_cli_group_free(struct sluice_cli_group *g);
/* OffsetFetch v8 of every topic of one group. */
void sluice_cli_encode_offset_fetch(struct kwr *w, const char *group);
int sluice_cli_decode_offset_fetch(const uint8_t *body, size_t len, struct sluice_cli_tps *out, char *err,
				   size_t errlen);
/* ListOffsets (latest) of the partitions in tps (sorted by topic). */
void sluice_cli_encode_list_offsets(struct kwr *w, int16_t version, const struct sluice_cli_tp *tps, int32_t n);
int sluice_cli_decode_list_offsets(const uint8_t *body, size_t len, int16_t version, struct sluice_cli_tps *out,
				   char *err, size_t errlen);
void sluice_cli_tps_free(struct sluice_cli_tps *t);
/* Appends (topic, partition, offset, error) to t, growing it; false when out of memory. */
bool sluice_cli_tps_add(struct sluice_cli_tps *t, const char *topic, int32_t partition, int64_t offset, int16_t error);

/* Kafka's text form of a topic id: URL-safe base64 without padding (22 chars). */
void sluice_cli_topic_id_text(const uint8_t id[16], char out[23]);

/* The highest version both sides speak in [ours_min, ours_max], or -1. */
int16_t sluice_cli_pick_version(bool served, int16_t theirs_min, int16_t theirs_max, int16_t ours_min,
				int16_t ours_max);

/* "HOST:PORT" or "[V6ADDR]:PORT" into ep; -1 when malformed. */
int sluice_cli_parse_endpoint(const char *text, size_t len, struct sluice_cli_endpoint *ep);

/* ---- cli_net.c: one blocking connection ------------------------------------- */

struct sluice_cli_conn {
	int fd;
	int timeout_ms; /* for the connect and for each whole request */
	int32_t correlation_id;
	struct sluice_cli_endpoint peer;
	struct sluice_cli_versions versions;
};

/* Connects and asks ApiVersions v0. With err set: -2 when no connection
 * could be made (SLUICE_CLI_EXIT_UNREACHABLE), -1 when the server does not
 * answer properly. */
int sluice_cli_open(struct sluice_cli_conn *c, const struct sluice_cli_endpoint *ep, int timeout_ms, char *err,
		    size_t errlen);
void sluice_cli_close(struct sluice_cli_conn *c);
/* Sends the request body under a header and returns the answer's body
 * (after its header) in *resp (malloc'd, the caller frees; *body points
 * into it). -1 with err set on any failure. */
int sluice_cli_call(struct sluice_cli_conn *c, int16_t key, int16_t version, bool flexible, const struct kwr *body,
		    uint8_t **resp, const uint8_t **resp_body, size_t *resp_body_len, char *err, size_t errlen);

/* ---- cli_status.c: `sluice cluster status` ---------------------------------- */

#define SLUICE_CLI_WORDS_MAX 4 /* group, command, and up to two arguments */

struct sluice_cli_options {
	struct sluice_cli_endpoint servers[SLUICE_CLI_SERVERS_MAX];
	int server_n;
	bool controllers; /* --bootstrap-controller: the servers are controllers */
	bool json;
	int timeout_ms;
	/* the command and its own options */
	const char *words[SLUICE_CLI_WORDS_MAX];
	int word_n;
	int32_t broker_id;          /* --broker-id, -1 when not given */
	bool delete_flag;           /* logger NAME --delete */
	int32_t partitions;         /* topic create --partitions, -1 not given */
	int16_t replication_factor; /* --replication-factor, -1: the broker's default */
	const char *configs[SLUICE_CLI_CONFIG_ARGS_MAX]; /* topic create --config k=v */
	int config_n;
	struct sluice_cli_alter alters[SLUICE_CLI_CONFIG_ARGS_MAX]; /* alter-config --set/--delete */
	int alter_n;
	char alter_keys[SLUICE_CLI_CONFIG_ARGS_MAX][SLUICE_CLI_TOPIC_NAME_MAX]; /* the keys of --set k=v */
};

/* Everything the status shows, gathered once. */
struct sluice_cli_status {
	struct sluice_cli_quorum quorum;
	struct sluice_cli_brokers brokers;
	struct sluice_cli_partitions partitions;
};

/* Runs the command; returns the process exit status (0, 1, or 3 when no server took a connection). Messages
 * about failures go to errout, the status to out. */
int sluice_cli_cluster_status(const struct sluice_cli_options *o, FILE *out, FILE *errout);
/* The two renderings of a gathered status. */
void sluice_cli_print_status_json(const struct sluice_cli_status *s, FILE *out);
void sluice_cli_print_status_table(const struct sluice_cli_status *s, FILE *out);

/* ---- cli_admin.c: `sluice logger` and `sluice topic ...` ---------------------- */

/* One command's connection and where it reports. */
struct sluice_cli_session {
	const struct sluice_cli_options *o;
	struct sluice_cli_conn c;
	FILE *out, *errout;
	const char *what; /* "logger", "topic describe", ... for messages */
};

/* The first server of the list that answers ApiVersions; else the exit
 * status (3: none took a connection), with a message. */
int sluice_cli_session_open(struct sluice_cli_session *s);
/* The version to write of an API, or -1 with a message. */
int16_t sluice_cli_session_pick(struct sluice_cli_session *s, int16_t key, int16_t ours_min, int16_t ours_max,
				const char *api);
/* Sends w (freed here) and returns the answer (free *resp); -1 with a message. */
int sluice_cli_session_call(struct sluice_cli_session *s, int16_t key, int16_t v, bool flex, struct kwr *w,
			    uint8_t **resp, const uint8_t **body, size_t *len);
/* Reports a decoder's failure or a refusal (Kafka's error name, the
 * server's message); both return SLUICE_CLI_EXIT_ERROR. */
int sluice_cli_session_malformed(struct sluice_cli_session *s, const char *why);
int sluice_cli_session_refused(struct sluice_cli_session *s, int16_t error, const char *message);
/* Metadata of the named topics (n -1: all, 0: brokers only); 0 or the exit status. */
int sluice_cli_session_metadata(struct sluice_cli_session *s, const char *const *names, int32_t n,
				struct sluice_cli_metadata *m);
/* Flushes the output: 0, or 1 with a message when it could not be written. */
int sluice_cli_session_finish(struct sluice_cli_session *s);

int sluice_cli_logger(const struct sluice_cli_options *o, FILE *out, FILE *errout);
int sluice_cli_topic(const struct sluice_cli_options *o, FILE *out, FILE *errout);
/* ---- cli_group.c: `sluice group list|describe|lag` ---- */
int sluice_cli_group(const struct sluice_cli_options *o, FILE *out, FILE *errout);
/* A JSON string: quotes, backslashes and every byte outside printable ASCII escaped. */
void sluice_cli_json_string(FILE *out, const char *s);

/* Shared by the decoders (cli_wire.c, cli_admin_wire.c): a malformed
 * answer said as "API vN: malformed answer: why at byte K" (-1), and the
 * check that a decoded body ends exactly where the frame does (0 or -1). */
struct krd;
int cli_wire_fail(const struct krd *rd, const char *api, int16_t version, const char *why, char *err, size_t errlen);
int cli_wire_finish(struct krd *rd, const char *api, int16_t version, char *err, size_t errlen);

#endif
