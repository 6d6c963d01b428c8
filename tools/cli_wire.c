/* The requests `sluice` sends and the decoders of their answers
 * (ApiVersions v0, DescribeQuorum v0-2, DescribeCluster v0-2, Metadata
 * v1-12), as pure functions over bytes so that the unit tests can feed them
 * every cut and lie. Built on common/kafka/codec.h: every length and count
 * is checked against the bytes left before it is used, every count that
 * sizes what is kept is checked against the named maxima of cli.h, and a
 * failure reports the API, version and byte offset. */
#include "tools/cli.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "common/kafka/errors.h"

#define CLI_CLIENT_ID "sluice"
#define CLI_METADATA_TOPIC "__cluster_metadata"
#define CLI_ENDPOINT_BROKERS 1

void sluice_cli_encode_header(struct kwr *w, int16_t key, int16_t version, int32_t correlation_id, bool flexible)
{
	assert(key >= 0 && version >= 0);
	kwr_i16(w, key);
	kwr_i16(w, version);
	kwr_i32(w, correlation_id);
	kwr_cstr(w, false, CLI_CLIENT_ID); /* the header's client id is never compact */
	if (flexible)
		kwr_tags_empty(w);
}

void sluice_cli_encode_describe_quorum(struct kwr *w, int16_t version)
{
	assert(version >= 0 && version <= SLUICE_CLI_DESCRIBE_QUORUM_MAX);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, CLI_METADATA_TOPIC);
	kwr_array(w, true, 1);
	kwr_i32(w, 0); /* PartitionIndex */
	kwr_tags_empty(w);
	kwr_tags_empty(w);
	kwr_tags_empty(w);
}

void sluice_cli_encode_describe_cluster(struct kwr *w, int16_t version)
{
	assert(version >= 0 && version <= SLUICE_CLI_DESCRIBE_CLUSTER_MAX);
	kwr_bool(w, false); /* IncludeClusterAuthorizedOperations */
	if (version >= 1)
		kwr_i8(w, CLI_ENDPOINT_BROKERS);
	if (version >= 2)
		kwr_bool(w, true); /* IncludeFencedBrokers */
	kwr_tags_empty(w);
}

bool sluice_cli_metadata_flexible(int16_t version) { return version >= SLUICE_CLI_METADATA_FLEX_MIN; }

void sluice_cli_encode_metadata(struct kwr *w, int16_t version)
{
	assert(version >= SLUICE_CLI_METADATA_MIN && version <= SLUICE_CLI_METADATA_MAX);
	bool flex = sluice_cli_metadata_flexible(version);
	kwr_array(w, flex, -1); /* Topics: null, all of them */
	if (version >= 4)
		kwr_bool(w, false); /* AllowAutoTopicCreation */
	if (version >= 8 && version <= 10)
		kwr_bool(w, false); /* IncludeClusterAuthorizedOperations */
	if (version >= 8)
		kwr_bool(w, false); /* IncludeTopicAuthorizedOperations */
	if (flex)
		kwr_tags_empty(w);
}

int16_t sluice_cli_pick_version(bool served, int16_t theirs_min, int16_t theirs_max, int16_t ours_min,
				int16_t ours_max)
{
	if (!served)
		return -1;
	int16_t v = theirs_max < ours_max ? theirs_max : ours_max;
	return v >= ours_min && v >= theirs_min ? v : -1;
}

int sluice_cli_parse_endpoint(const char *text, size_t len, struct sluice_cli_endpoint *ep)
{
	const char *host = text, *colon;
	size_t host_len;
	if (len > 0 && text[0] == '[') { /* [v6]:port */
		const char *close = memchr(text, ']', len);
		if (!close || close + 1 >= text + len || close[1] != ':')
			return -1;
		host = text + 1;
		host_len = (size_t)(close - host);
		colon = close + 1;
	} else {
		colon = NULL;
		for (size_t i = 0; i < len; i++)
			if (text[i] == ':')
				colon = text + i;
		if (!colon || memchr(text, ':', (size_t)(colon - text)))
			return -1; /* none, or an unbracketed IPv6 address */
		host_len = (size_t)(colon - text);
	}
	size_t port_len = len - (size_t)(colon + 1 - text);
	if (host_len == 0 || host_len >= sizeof ep->host || memchr(host, '\0', host_len) || port_len == 0 ||
	    port_len > 5)
		return -1;
	int32_t port = 0;
	for (size_t i = 0; i < port_len; i++) {
		char d = colon[1 + i];
		if (d < '0' || d > '9')
			return -1;
		port = port * 10 + (d - '0');
	}
	if (port < 1 || port > 65535)
		return -1;
	memcpy(ep->host, host, host_len);
	ep->host[host_len] = '\0';
	ep->port = port;
	return 0;
}

/* ---- shared decoding helpers ---------------------------------------------------- */

/* The one failure path of every decoder: API, version, offset and why. */
int cli_wire_fail(const struct krd *rd, const char *api, int16_t version, const char *why, char *err, size_t errlen)
{
	snprintf(err, errlen, "%s v%d: malformed answer: %s at byte %zu", api, version,
		 why ? why : rd->err_what ? rd->err_what : "cut short", krd_offset(rd));
	return -1;
}

/* A decoded body must end exactly where the frame does. */
int cli_wire_finish(struct krd *rd, const char *api, int16_t version, char *err, size_t errlen)
{
	if (rd->err)
		return cli_wire_fail(rd, api, version, NULL, err, errlen);
	if (krd_left(rd) != 0)
		return cli_wire_fail(rd, api, version, "bytes left over after the answer", err, errlen);
	return 0;
}

/* A non-null string without NULs into a fixed buffer. */
static bool copy_string(struct krd *rd, struct kstr s, char *out, size_t cap, const char *what)
{
	if (rd->err)
		return false;
	if (!s.ptr || (size_t)s.len >= cap || memchr(s.ptr, '\0', (size_t)s.len))
		return krd_fail(rd, what);
	memcpy(out, s.ptr, (size_t)s.len);
	out[s.len] = '\0';
	return true;
}

/* ---- ApiVersions v0 -------------------------------------------------------------- */

static void versions_note(struct sluice_cli_versions *out, int16_t key, int16_t min, int16_t max)
{
	if (key >= 0 && key < SLUICE_CLI_API_KEYS_MAX) {
		out->served[key] = true;
		out->min[key] = min, out->max[key] = max;
	}
	if (key == SLUICE_CLI_API_METADATA) {
		out->metadata = true;
		out->metadata_min = min, out->metadata_max = max;
	} else if (key == SLUICE_CLI_API_DESCRIBE_QUORUM) {
		out->describe_quorum = true;
		out->describe_quorum_min = min, out->describe_quorum_max = max;
	} else if (key == SLUICE_CLI_API_DESCRIBE_CLUSTER) {
		out->describe_cluster = true;
		out->describe_cluster_min = min, out->describe_cluster_max = max;
	}
}

int sluice_cli_decode_api_versions(const uint8_t *body, size_t len, struct sluice_cli_versions *out, char *err,
				   size_t errlen)
{
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	int16_t error = krd_i16(&rd);
	int32_t n = krd_array(&rd, false, 6);
	for (int32_t i = 0; i < n && !rd.err; i++) {
		int16_t key = krd_i16(&rd), min = krd_i16(&rd), max = krd_i16(&rd);
		if (!rd.err && (min < 0 || max < min))
			return cli_wire_fail(&rd, "ApiVersions", 0, "a version range upside down", err, errlen);
		versions_note(out, key, min, max);
	}
	if (cli_wire_finish(&rd, "ApiVersions", 0, err, errlen) < 0)
		return -1;
	if (error != KERR_NONE) {
		snprintf(err, errlen, "ApiVersions v0: error %s", sluice_kafka_error_name(error));
		return -1;
	}
	return 0;
}

/* ---- DescribeQuorum v0-2 ----------------------------------------------------------- */

/* One ReplicaState; voters are kept (bounded), observers skipped. */
static void dq_replica(struct krd *rd, int16_t v, struct sluice_cli_quorum *out, bool keep)
{
	int32_t id = krd_i32(rd);
	if (v >= 2)
		krd_skip(rd, 16); /* ReplicaDirectoryId */
	int64_t end = krd_i64(rd);
	if (v >= 1)
		krd_skip(rd, 16); /* LastFetchTimestamp, LastCaughtUpTimestamp */
	krd_tags_skip(rd);
	if (!keep || rd->err)
		return;
	if (out->voter_n >= SLUICE_CLI_CONTROLLERS_MAX) {
		krd_fail(rd, "more voters than the tool keeps (64)");
		return;
	}
	struct sluice_cli_controller *c = &out->voters[out->voter_n++];
	memset(c, 0, sizeof *c);
	c->id = id;
	c->log_end_offset = end;
}

static void dq_partition(struct krd *rd, int16_t v, struct sluice_cli_quorum *out, bool wanted, bool *found)
{
	int32_t index = krd_i32(rd);
	int16_t error = krd_i16(rd);
	if (v >= 2)
		(void)krd_string(rd, true); /* ErrorMessage */
	int32_t leader = krd_i32(rd), epoch = krd_i32(rd);
	int64_t hw = krd_i64(rd);
	bool keep = wanted && index == 0 && !*found;
	if (keep) {
		*found = true;
		out->error = error;
		out->leader_id = leader;
		out->leader_epoch = epoch;
		out->high_watermark = hw;
		out->voter_n = 0;
	}
	size_t replica_min = 13 + (v >= 1 ? 16 : 0) + (v >= 2 ? 16 : 0);
	for (int pass = 0; pass < 2 && !rd->err; pass++) { /* CurrentVoters, then Observers */
		int32_t n = krd_array(rd, true, replica_min);
		for (int32_t i = 0; i < n && !rd->err; i++)
			dq_replica(rd, v, out, keep && pass == 0);
	}
	krd_tags_skip(rd);
}

/* v2 Nodes: the first listener of each voter becomes its endpoint. */
static void dq_nodes(struct krd *rd, struct sluice_cli_quorum *out)
{
	int32_t n = krd_array(rd, true, 6);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		int32_t id = krd_i32(rd);
		struct sluice_cli_controller *c = NULL;
		for (int32_t k = 0; k < out->voter_n; k++)
			if (out->voters[k].id == id)
				c = &out->voters[k];
		int32_t ln = krd_array(rd, true, 5);
		if (ln > SLUICE_CLI_LISTENERS_MAX)
			krd_fail(rd, "more listeners than the tool reads (64)");
		for (int32_t l = 0; l < ln && !rd->err; l++) {
			(void)krd_string(rd, true); /* Name */
			struct kstr host = krd_string(rd, true);
			int32_t port = (uint16_t)krd_i16(rd);
			krd_tags_skip(rd);
			if (c && !c->has_endpoint && !rd->err) {
				if (!copy_string(rd, host, c->endpoint.host, sizeof c->endpoint.host, "listener host"))
					break;
				c->endpoint.port = port;
				c->has_endpoint = port > 0;
			}
		}
		krd_tags_skip(rd);
	}
}

int sluice_cli_decode_describe_quorum(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_quorum *out,
				      char *err, size_t errlen)
{
	assert(v >= 0 && v <= SLUICE_CLI_DESCRIBE_QUORUM_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	out->leader_id = -1;
	int16_t top = krd_i16(&rd);
	if (v >= 2)
		(void)krd_string(&rd, true);
	bool found = false;
	int32_t tn = krd_array(&rd, true, 3);
	for (int32_t t = 0; t < tn && !rd.err; t++) {
		bool wanted = kstr_eq(krd_string(&rd, true), CLI_METADATA_TOPIC);
		int32_t pn = krd_array(&rd, true, 25);
		for (int32_t p = 0; p < pn && !rd.err; p++)
			dq_partition(&rd, v, out, wanted, &found);
		krd_tags_skip(&rd);
	}
	if (v >= 2)
		dq_nodes(&rd, out);
	krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "DescribeQuorum", v, err, errlen) < 0)
		return -1;
	if (top != KERR_NONE) {
		out->error = top;
		return 0;
	}
	if (!found)
		return cli_wire_fail(&rd, "DescribeQuorum", v, "no __cluster_metadata partition 0", err, errlen);
	return 0;
}

/* ---- DescribeCluster v0-2 ---------------------------------------------------------- */

static void dc_broker(struct krd *rd, int16_t v, struct sluice_cli_brokers *out)
{
	if (out->broker_n >= SLUICE_CLI_BROKERS_MAX) {
		krd_fail(rd, "more brokers than the tool keeps (4096)");
		return;
	}
	struct sluice_cli_broker *b = &out->brokers[out->broker_n];
	memset(b, 0, sizeof *b);
	b->id = krd_i32(rd);
	struct kstr host = krd_string(rd, true);
	b->endpoint.port = krd_i32(rd);
	struct kstr rack = krd_string(rd, true);
	b->fenced = v >= 2 ? krd_bool(rd) : false;
	krd_tags_skip(rd);
	if (!copy_string(rd, host, b->endpoint.host, sizeof b->endpoint.host, "broker host"))
		return;
	if (b->endpoint.port < 0 || b->endpoint.port > 65535) {
		krd_fail(rd, "broker port out of range");
		return;
	}
	b->has_rack = rack.ptr != NULL;
	if (b->has_rack && !copy_string(rd, rack, b->rack, sizeof b->rack, "broker rack"))
		return;
	out->broker_n++;
}

int sluice_cli_decode_describe_cluster(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_brokers *out,
				       char *err, size_t errlen)
{
	assert(v >= 0 && v <= SLUICE_CLI_DESCRIBE_CLUSTER_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	out->error = KERR_NONE;
	out->broker_n = 0;
	out->fenced_known = v >= 2;
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int16_t error = krd_i16(&rd);
	(void)krd_string(&rd, true); /* ErrorMessage */
	int8_t type = v >= 1 ? krd_i8(&rd) : CLI_ENDPOINT_BROKERS;
	(void)krd_string(&rd, true); /* ClusterId */
	out->controller_id = krd_i32(&rd);
	int32_t n = krd_array(&rd, true, v >= 2 ? 12 : 11);
	for (int32_t i = 0; i < n && !rd.err; i++)
		dc_broker(&rd, v, out);
	(void)krd_i32(&rd); /* ClusterAuthorizedOperations */
	krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "DescribeCluster", v, err, errlen) < 0)
		return -1;
	out->error = error;
	if (error == KERR_NONE && type != CLI_ENDPOINT_BROKERS)
		return cli_wire_fail(&rd, "DescribeCluster", v, "endpoints of another type than brokers", err, errlen);
	return 0;
}

/* ---- Metadata v1-12 ----------------------------------------------------------------- */

/* An int32 array's count, its elements skipped. */
static int32_t md_int_array(struct krd *rd, bool flex)
{
	int32_t n = krd_array(rd, flex, 4);
	if (n > 0)
		krd_skip(rd, (size_t)n * 4);
	return n < 0 ? 0 : n;
}

static void md_partition(struct krd *rd, int16_t v, bool flex, struct sluice_cli_partitions *out)
{
	(void)krd_i16(rd); /* ErrorCode: LEADER_NOT_AVAILABLE goes with LeaderId -1 */
	(void)krd_i32(rd); /* PartitionIndex */
	int32_t leader = krd_i32(rd);
	if (v >= 7)
		(void)krd_i32(rd); /* LeaderEpoch */
	int32_t replicas = md_int_array(rd, flex);
	int32_t isr = md_int_array(rd, flex);
	if (v >= 5)
		(void)md_int_array(rd, flex); /* OfflineReplicas */
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return;
	out->partitions++;
	out->offline += leader < 0;
	out->under_replicated += isr < replicas;
}

static void md_topic(struct krd *rd, int16_t v, bool flex, struct sluice_cli_partitions *out)
{
	(void)krd_i16(rd);            /* ErrorCode */
	(void)krd_string(rd, flex);   /* Name (nullable from v12) */
	if (v >= 10)
		krd_skip(rd, 16);     /* TopicId */
	(void)krd_bool(rd);           /* IsInternal */
	size_t part_min = 2 + 4 + 4 + (v >= 7 ? 4 : 0) + (flex ? 1 : 4) * (v >= 5 ? 3 : 2) + (flex ? 1 : 0);
	int32_t n = krd_array(rd, flex, part_min);
	for (int32_t i = 0; i < n && !rd->err; i++)
		md_partition(rd, v, flex, out);
	if (v >= 8)
		(void)krd_i32(rd); /* TopicAuthorizedOperations */
	if (flex)
		krd_tags_skip(rd);
	out->topics += !rd->err;
}

static void md_brokers(struct krd *rd, bool flex)
{
	int32_t n = krd_array(rd, flex, flex ? 11 : 12);
	for (int32_t i = 0; i < n && !rd->err; i++) {
		(void)krd_i32(rd);          /* NodeId */
		(void)krd_string(rd, flex); /* Host */
		(void)krd_i32(rd);          /* Port */
		(void)krd_string(rd, flex); /* Rack */
		if (flex)
			krd_tags_skip(rd);
	}
}

int sluice_cli_decode_metadata(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_partitions *out,
			       char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_METADATA_MIN && v <= SLUICE_CLI_METADATA_MAX);
	bool flex = sluice_cli_metadata_flexible(v);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	if (v >= 3)
		(void)krd_i32(&rd); /* ThrottleTimeMs */
	md_brokers(&rd, flex);
	if (v >= 2)
		(void)krd_string(&rd, flex); /* ClusterId */
	(void)krd_i32(&rd); /* ControllerId */
	size_t topic_min = 2 + (flex ? 1 : 2) + (v >= 10 ? 16 : 0) + 1 + (flex ? 1 : 4) + (v >= 8 ? 4 : 0) +
			   (flex ? 1 : 0);
	int32_t n = krd_array(&rd, flex, topic_min);
	for (int32_t i = 0; i < n && !rd.err; i++)
		md_topic(&rd, v, flex, out);
	if (v >= 8 && v <= 10)
		(void)krd_i32(&rd); /* ClusterAuthorizedOperations */
	if (flex)
		krd_tags_skip(&rd);
	return cli_wire_finish(&rd, "Metadata", v, err, errlen);
}
