/* The `sluice` command-line tool's pieces: what `sluice cluster status`
 * learns from a cluster (controllers, brokers, partition health), the Kafka
 * requests it sends and the decoders of their answers (cli_wire.c: pure
 * functions over bytes, with the project's bounds-checked codec), a blocking
 * client connection with time-outs (cli_net.c), and the status command
 * itself (cli_status.c). The tool is a client of both the brokers and the
 * controllers, so it lives beside them (tools/) and links only common/.
 * Every count read from the wire is bounded by a named maximum below. */
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
	SLUICE_CLI_API_METADATA = 3,
	SLUICE_CLI_API_API_VERSIONS = 18,
	SLUICE_CLI_API_DESCRIBE_QUORUM = 55,
	SLUICE_CLI_API_DESCRIBE_CLUSTER = 60,
};

/* The versions this tool can write and read, per API. */
#define SLUICE_CLI_METADATA_MIN 1
#define SLUICE_CLI_METADATA_MAX 12
#define SLUICE_CLI_METADATA_FLEX_MIN 9
#define SLUICE_CLI_DESCRIBE_QUORUM_MAX 2   /* flexible from 0 */
#define SLUICE_CLI_DESCRIBE_CLUSTER_MAX 2  /* flexible from 0 */

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

/* Connects and asks ApiVersions v0. -1 with err set when the server cannot
 * be reached or does not answer properly. */
int sluice_cli_open(struct sluice_cli_conn *c, const struct sluice_cli_endpoint *ep, int timeout_ms, char *err,
		    size_t errlen);
void sluice_cli_close(struct sluice_cli_conn *c);
/* Sends the request body under a header and returns the answer's body
 * (after its header) in *resp (malloc'd, the caller frees; *body points
 * into it). -1 with err set on any failure. */
int sluice_cli_call(struct sluice_cli_conn *c, int16_t key, int16_t version, bool flexible, const struct kwr *body,
		    uint8_t **resp, const uint8_t **resp_body, size_t *resp_body_len, char *err, size_t errlen);

/* ---- cli_status.c: `sluice cluster status` ---------------------------------- */

struct sluice_cli_options {
	struct sluice_cli_endpoint servers[SLUICE_CLI_SERVERS_MAX];
	int server_n;
	bool controllers; /* --bootstrap-controller: the servers are controllers */
	bool json;
	int timeout_ms;
};

/* Everything the status shows, gathered once. */
struct sluice_cli_status {
	struct sluice_cli_quorum quorum;
	struct sluice_cli_brokers brokers;
	struct sluice_cli_partitions partitions;
};

/* Runs the command; returns the process exit status (0 or 1). Messages
 * about failures go to errout, the status to out. */
int sluice_cli_cluster_status(const struct sluice_cli_options *o, FILE *out, FILE *errout);
/* The two renderings of a gathered status. */
void sluice_cli_print_status_json(const struct sluice_cli_status *s, FILE *out);
void sluice_cli_print_status_table(const struct sluice_cli_status *s, FILE *out);

#endif
