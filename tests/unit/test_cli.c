/* The `sluice` tool's wire code alone (tools/cli_wire.c) and its two
 * renderings (tools/cli_status.c), with no sockets: answers written here as
 * Kafka's schemas lay them out decode into what they were written with
 * (DescribeQuorum v0-2 with Nodes, DescribeCluster v0-2 with IsFenced,
 * Metadata v1-12 counted into offline and under-replicated partitions,
 * ApiVersions v0); every cut short of the end and every byte left over is
 * refused as malformed, as are counts beyond the tool's maxima and lengths
 * beyond the frame; the requests carry what the servers need (EndpointType
 * brokers, IncludeFencedBrokers, all topics); the JSON output is valid
 * whatever bytes a host holds; HOST:PORT parsing and version choice. The admin
 * answers (Metadata kept whole, DescribeConfigs v1-4, IncrementalAlterConfigs v1,
 * CreateTopics v5-7, DeleteTopics v4-6) decode what they were written with and
 * refuse every cut; their requests are laid out as the schemas say. */
#include "tools/cli.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "common/kafka/errors.h"

static char why[SLUICE_CLI_WHY_MAX];

/* ---- answers written as the schemas say -------------------------------------------- */

struct voter {
	int32_t id;
	int64_t end;
	const char *host;
	int32_t port;
};

static void w_replica(struct kwr *w, int16_t v, int32_t id, int64_t end)
{
	static const uint8_t dir[16];
	kwr_i32(w, id);
	if (v >= 2)
		kwr_uuid(w, dir);
	kwr_i64(w, end);
	if (v >= 1) {
		kwr_i64(w, -1);
		kwr_i64(w, -1);
	}
	kwr_tags_empty(w);
}

static void w_quorum(struct kwr *w, int16_t v, int16_t perr, int32_t leader, const struct voter *vs, int n,
		     int observers)
{
	kwr_i16(w, 0);
	if (v >= 2)
		kwr_cstr(w, true, NULL);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, "__cluster_metadata");
	kwr_array(w, true, 1);
	kwr_i32(w, 0);
	kwr_i16(w, perr);
	if (v >= 2)
		kwr_cstr(w, true, NULL);
	kwr_i32(w, leader);
	kwr_i32(w, 7);
	kwr_i64(w, 99);
	kwr_array(w, true, n);
	for (int i = 0; i < n; i++)
		w_replica(w, v, vs[i].id, vs[i].end);
	kwr_array(w, true, observers);
	for (int i = 0; i < observers; i++)
		w_replica(w, v, 100 + i, 5);
	kwr_tags_empty(w);
	kwr_tags_empty(w);
	if (v >= 2) {
		kwr_array(w, true, n);
		for (int i = 0; i < n; i++) {
			kwr_i32(w, vs[i].id);
			kwr_array(w, true, 2); /* the first listener is taken */
			kwr_cstr(w, true, "CONTROLLER");
			kwr_cstr(w, true, vs[i].host);
			kwr_i16(w, (int16_t)(uint16_t)vs[i].port);
			kwr_tags_empty(w);
			kwr_cstr(w, true, "OTHER");
			kwr_cstr(w, true, "elsewhere");
			kwr_i16(w, 1);
			kwr_tags_empty(w);
			kwr_tags_empty(w);
		}
	}
	kwr_tags_empty(w);
}

struct broker {
	int32_t id;
	const char *host;
	int32_t port;
	const char *rack;
	bool fenced;
};

static void w_cluster(struct kwr *w, int16_t v, int8_t type, const struct broker *bs, int n)
{
	kwr_i32(w, 0);
	kwr_i16(w, 0);
	kwr_cstr(w, true, NULL);
	if (v >= 1)
		kwr_i8(w, type);
	kwr_cstr(w, true, "cluster-x");
	kwr_i32(w, 1);
	kwr_array(w, true, n);
	for (int i = 0; i < n; i++) {
		kwr_i32(w, bs[i].id);
		kwr_cstr(w, true, bs[i].host);
		kwr_i32(w, bs[i].port);
		kwr_cstr(w, true, bs[i].rack);
		if (v >= 2)
			kwr_bool(w, bs[i].fenced);
		kwr_tags_empty(w);
	}
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
}

struct part {
	int32_t leader;
	int replicas, isr;
};

static void w_ints(struct kwr *w, bool flex, int n)
{
	kwr_array(w, flex, n);
	for (int i = 0; i < n; i++)
		kwr_i32(w, 101 + i);
}

static void w_metadata(struct kwr *w, int16_t v, const struct part *ps, int n)
{
	bool flex = v >= 9;
	if (v >= 3)
		kwr_i32(w, 0);
	kwr_array(w, flex, 1); /* one broker */
	kwr_i32(w, 101);
	kwr_cstr(w, flex, "127.0.0.1");
	kwr_i32(w, 9092);
	kwr_cstr(w, flex, NULL);
	if (flex)
		kwr_tags_empty(w);
	if (v >= 2)
		kwr_cstr(w, flex, "cluster-x");
	kwr_i32(w, 101);
	kwr_array(w, flex, 2); /* two topics: the partitions, then an empty one */
	for (int t = 0; t < 2; t++) {
		kwr_i16(w, 0);
		kwr_cstr(w, flex, t ? "empty" : "t");
		if (v >= 10)
			kwr_uuid(w, (const uint8_t[16]){1});
		kwr_bool(w, false);
		kwr_array(w, flex, t ? 0 : n);
		for (int i = 0; !t && i < n; i++) {
			kwr_i16(w, ps[i].leader < 0 ? KERR_LEADER_NOT_AVAILABLE : 0);
			kwr_i32(w, i);
			kwr_i32(w, ps[i].leader);
			if (v >= 7)
				kwr_i32(w, 3);
			w_ints(w, flex, ps[i].replicas);
			w_ints(w, flex, ps[i].isr);
			if (v >= 5)
				w_ints(w, flex, 0);
			if (flex)
				kwr_tags_empty(w);
		}
		if (v >= 8)
			kwr_i32(w, INT32_MIN);
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 8 && v <= 10)
		kwr_i32(w, INT32_MIN);
	if (flex)
		kwr_tags_empty(w);
}

/* ---- cuts and leftovers ---------------------------------------------------------------- */

typedef int (*decode_fn)(const uint8_t *body, size_t len, int16_t v, void *out);
static int dq(const uint8_t *b, size_t n, int16_t v, void *o)
{
	return sluice_cli_decode_describe_quorum(b, n, v, o, why, sizeof why);
}
static int dc(const uint8_t *b, size_t n, int16_t v, void *o)
{
	return sluice_cli_decode_describe_cluster(b, n, v, o, why, sizeof why);
}
static int md(const uint8_t *b, size_t n, int16_t v, void *o)
{
	return sluice_cli_decode_metadata(b, n, v, o, why, sizeof why);
}

/* Every cut short of the end, and one byte too many, are refused. */
static void cuts_refused(const struct kwr *w, int16_t v, decode_fn decode, void *out)
{
	for (size_t n = 0; n < w->len; n++)
		cr_assert_eq(decode(w->buf, n, v, out), -1, "a cut at %zu of %zu bytes (v%d) was accepted", n, w->len, v);
	uint8_t *more = malloc(w->len + 1);
	cr_assert_not_null(more);
	memcpy(more, w->buf, w->len);
	more[w->len] = 0;
	cr_assert_eq(decode(more, w->len + 1, v, out), -1);
	cr_assert(strstr(why, "left over"), "%s", why);
	free(more);
}

/* ---- DescribeQuorum -------------------------------------------------------------------- */

Test(cli, describe_quorum_all_versions)
{
	static const struct voter vs[] = {{3, 40, "c3.example", 9093}, {1, 42, "127.0.0.1", 9091}, {2, -1, "::1", 65535}};
	static struct sluice_cli_quorum q;
	for (int16_t v = 0; v <= SLUICE_CLI_DESCRIBE_QUORUM_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1 << 20);
		w_quorum(&w, v, 0, 1, vs, 3, 2);
		cr_assert_eq(sluice_cli_decode_describe_quorum(w.buf, w.len, v, &q, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(q.error, 0);
		cr_assert_eq(q.leader_id, 1);
		cr_assert_eq(q.leader_epoch, 7);
		cr_assert_eq(q.high_watermark, 99);
		cr_assert_eq(q.voter_n, 3, "observers are not voters");
		for (int i = 0; i < 3; i++) {
			cr_assert_eq(q.voters[i].id, vs[i].id);
			cr_assert_eq(q.voters[i].log_end_offset, vs[i].end);
			cr_assert_eq(q.voters[i].has_endpoint, v >= 2);
			if (v >= 2) {
				cr_assert_str_eq(q.voters[i].endpoint.host, vs[i].host);
				cr_assert_eq(q.voters[i].endpoint.port, vs[i].port, "Port is uint16: 65535 stays 65535");
			}
		}
		cuts_refused(&w, v, dq, &q);
		kwr_free(&w);
	}
}

Test(cli, describe_quorum_errors_and_limits)
{
	static struct sluice_cli_quorum q;
	static struct voter many[SLUICE_CLI_CONTROLLERS_MAX + 1];
	for (int i = 0; i <= SLUICE_CLI_CONTROLLERS_MAX; i++)
		many[i] = (struct voter){i, 1, "h", 1};
	struct kwr w;
	kwr_init(&w, 0, 1 << 20);
	/* a follower's answer: decoded, its error kept for the caller */
	w_quorum(&w, 2, KERR_NOT_LEADER_OR_FOLLOWER, 2, many, 2, 0);
	cr_assert_eq(sluice_cli_decode_describe_quorum(w.buf, w.len, 2, &q, why, sizeof why), 0, "%s", why);
	cr_assert_eq(q.error, KERR_NOT_LEADER_OR_FOLLOWER);
	cr_assert_eq(q.leader_id, 2);
	/* one voter more than kept */
	kwr_reset(&w);
	w_quorum(&w, 2, 0, 1, many, SLUICE_CLI_CONTROLLERS_MAX + 1, 0);
	cr_assert_eq(sluice_cli_decode_describe_quorum(w.buf, w.len, 2, &q, why, sizeof why), -1);
	cr_assert(strstr(why, "more voters"), "%s", why);
	/* a top-level error with no topics */
	kwr_reset(&w);
	kwr_i16(&w, KERR_REQUEST_TIMED_OUT);
	kwr_cstr(&w, true, "no active controller answered");
	kwr_array(&w, true, 0);
	kwr_array(&w, true, 0);
	kwr_tags_empty(&w);
	cr_assert_eq(sluice_cli_decode_describe_quorum(w.buf, w.len, 2, &q, why, sizeof why), 0, "%s", why);
	cr_assert_eq(q.error, KERR_REQUEST_TIMED_OUT);
	/* no error but no __cluster_metadata partition: malformed */
	kwr_reset(&w);
	kwr_i16(&w, 0);
	kwr_array(&w, true, 0);
	kwr_tags_empty(&w);
	cr_assert_eq(sluice_cli_decode_describe_quorum(w.buf, w.len, 0, &q, why, sizeof why), -1);
	cr_assert(strstr(why, "__cluster_metadata"), "%s", why);
	/* an array count beyond the frame: refused before anything is read */
	kwr_reset(&w);
	kwr_i16(&w, 0);
	kwr_uvarint(&w, 1000001);
	kwr_tags_empty(&w);
	cr_assert_eq(sluice_cli_decode_describe_quorum(w.buf, w.len, 0, &q, why, sizeof why), -1);
	cr_assert(strstr(why, "DescribeQuorum v0") && strstr(why, "byte"), "%s", why);
	kwr_free(&w);
}

/* ---- DescribeCluster ------------------------------------------------------------------- */

Test(cli, describe_cluster_all_versions)
{
	static const struct broker bs[] = {
		{101, "127.0.0.1", 9092, NULL, false}, {102, "b2.example", 19092, "rack-a", true}};
	static struct sluice_cli_brokers out;
	for (int16_t v = 0; v <= SLUICE_CLI_DESCRIBE_CLUSTER_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1 << 20);
		w_cluster(&w, v, 1, bs, 2);
		cr_assert_eq(sluice_cli_decode_describe_cluster(w.buf, w.len, v, &out, why, sizeof why), 0, "v%d: %s", v,
			     why);
		cr_assert_eq(out.error, 0);
		cr_assert_eq(out.controller_id, 1);
		cr_assert_eq(out.broker_n, 2);
		cr_assert_eq(out.fenced_known, v >= 2);
		cr_assert_eq(out.brokers[0].id, 101);
		cr_assert_str_eq(out.brokers[0].endpoint.host, "127.0.0.1");
		cr_assert_eq(out.brokers[0].endpoint.port, 9092);
		cr_assert_not(out.brokers[0].has_rack);
		cr_assert_not(out.brokers[0].fenced);
		cr_assert(out.brokers[1].has_rack);
		cr_assert_str_eq(out.brokers[1].rack, "rack-a");
		cr_assert_eq(out.brokers[1].fenced, v >= 2, "IsFenced is read from v2 only");
		cuts_refused(&w, v, dc, &out);
		/* controller endpoints are not brokers */
		if (v >= 1) {
			kwr_reset(&w);
			w_cluster(&w, v, 2, bs, 2);
			cr_assert_eq(sluice_cli_decode_describe_cluster(w.buf, w.len, v, &out, why, sizeof why), -1);
		}
		kwr_free(&w);
	}
}

Test(cli, describe_cluster_refusals)
{
	static struct sluice_cli_brokers out;
	char long_host[SLUICE_CLI_HOST_MAX + 1];
	memset(long_host, 'h', sizeof long_host - 1);
	long_host[sizeof long_host - 1] = '\0';
	const struct broker bad[] = {{1, NULL, 9092, NULL, false}, {1, long_host, 9092, NULL, false},
				     {1, "h", 70000, NULL, false}, {1, "h", -2, NULL, false}};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		struct kwr w;
		kwr_init(&w, 0, 1 << 20);
		w_cluster(&w, 2, 1, &bad[i], 1);
		cr_assert_eq(sluice_cli_decode_describe_cluster(w.buf, w.len, 2, &out, why, sizeof why), -1, "case %zu", i);
		kwr_free(&w);
	}
	/* more brokers than kept */
	static struct broker many[SLUICE_CLI_BROKERS_MAX + 1];
	for (int i = 0; i <= SLUICE_CLI_BROKERS_MAX; i++)
		many[i] = (struct broker){i, "h", 1, NULL, false};
	struct kwr w;
	kwr_init(&w, 0, 1 << 22);
	w_cluster(&w, 2, 1, many, SLUICE_CLI_BROKERS_MAX);
	cr_assert_eq(sluice_cli_decode_describe_cluster(w.buf, w.len, 2, &out, why, sizeof why), 0, "%s", why);
	cr_assert_eq(out.broker_n, SLUICE_CLI_BROKERS_MAX);
	kwr_reset(&w);
	w_cluster(&w, 2, 1, many, SLUICE_CLI_BROKERS_MAX + 1);
	cr_assert_eq(sluice_cli_decode_describe_cluster(w.buf, w.len, 2, &out, why, sizeof why), -1);
	cr_assert(strstr(why, "more brokers"), "%s", why);
	kwr_free(&w);
}

Test(cli, describe_cluster_request)
{
	/* v2: IncludeClusterAuthorizedOperations false, EndpointType 1, IncludeFencedBrokers true, no tags */
	struct kwr w;
	kwr_init(&w, 0, 1024);
	sluice_cli_encode_describe_cluster(&w, 2);
	cr_assert_eq(w.len, 4);
	cr_assert(memcmp(w.buf, "\x00\x01\x01\x00", 4) == 0);
	kwr_reset(&w);
	sluice_cli_encode_describe_cluster(&w, 0);
	cr_assert_eq(w.len, 2);
	kwr_free(&w);
}

/* ---- Metadata ------------------------------------------------------------------------ */

Test(cli, metadata_counts_all_versions)
{
	static const struct part ps[] = {
		{101, 1, 1}, /* healthy */
		{-1, 1, 0},  /* offline, and its ISR is short too */
		{102, 3, 2}, /* under-replicated */
		{-1, 1, 1},  /* offline with its last ISR member kept */
		{101, 3, 3},
	};
	static struct sluice_cli_partitions out;
	for (int16_t v = SLUICE_CLI_METADATA_MIN; v <= SLUICE_CLI_METADATA_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1 << 20);
		w_metadata(&w, v, ps, 5);
		cr_assert_eq(sluice_cli_decode_metadata(w.buf, w.len, v, &out, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(out.topics, 2, "v%d", v);
		cr_assert_eq(out.partitions, 5);
		cr_assert_eq(out.offline, 2);
		cr_assert_eq(out.under_replicated, 2);
		cuts_refused(&w, v, md, &out);
		kwr_free(&w);
	}
}

Test(cli, metadata_request)
{
	struct kwr w;
	kwr_init(&w, 0, 1024);
	sluice_cli_encode_metadata(&w, 1); /* null topics: all */
	cr_assert_eq(w.len, 4);
	cr_assert(memcmp(w.buf, "\xff\xff\xff\xff", 4) == 0);
	kwr_reset(&w);
	sluice_cli_encode_metadata(&w, 12); /* compact null, no auto-creation, no authorized operations, tags */
	cr_assert_eq(w.len, 4);
	cr_assert(memcmp(w.buf, "\x00\x00\x00\x00", 4) == 0);
	kwr_free(&w);
}

/* ---- ApiVersions, versions, endpoints ------------------------------------------------------- */

Test(cli, api_versions)
{
	struct sluice_cli_versions vs;
	struct kwr w;
	kwr_init(&w, 0, 1024);
	kwr_i16(&w, 0);
	kwr_array(&w, false, 3);
	const int16_t keys[3][3] = {{3, 0, 12}, {55, 0, 2}, {60, 0, 1}};
	for (int i = 0; i < 3; i++)
		for (int k = 0; k < 3; k++)
			kwr_i16(&w, keys[i][k]);
	cr_assert_eq(sluice_cli_decode_api_versions(w.buf, w.len, &vs, why, sizeof why), 0, "%s", why);
	cr_assert(vs.metadata && vs.describe_quorum && vs.describe_cluster);
	cr_assert_eq(vs.metadata_max, 12);
	cr_assert_eq(vs.describe_cluster_max, 1);
	for (size_t n = 0; n < w.len; n++)
		cr_assert_eq(sluice_cli_decode_api_versions(w.buf, n, &vs, why, sizeof why), -1);
	kwr_reset(&w);
	kwr_i16(&w, KERR_UNSUPPORTED_VERSION);
	kwr_array(&w, false, 0);
	cr_assert_eq(sluice_cli_decode_api_versions(w.buf, w.len, &vs, why, sizeof why), -1);
	cr_assert(strstr(why, "UNSUPPORTED_VERSION"), "%s", why);
	kwr_free(&w);
}

Test(cli, pick_version)
{
	cr_assert_eq(sluice_cli_pick_version(false, 0, 5, 0, 2), -1);
	cr_assert_eq(sluice_cli_pick_version(true, 0, 5, 0, 2), 2);
	cr_assert_eq(sluice_cli_pick_version(true, 0, 1, 0, 2), 1);
	cr_assert_eq(sluice_cli_pick_version(true, 4, 13, 1, 12), 12);
	cr_assert_eq(sluice_cli_pick_version(true, 0, 0, 1, 12), -1);
	cr_assert_eq(sluice_cli_pick_version(true, 3, 2, 0, 2), -1);
}

Test(cli, parse_endpoint)
{
	struct sluice_cli_endpoint ep;
#define OK(s, h, p)                                                                    \
	do {                                                                               \
		cr_assert_eq(sluice_cli_parse_endpoint(s, strlen(s), &ep), 0, "%s", s);    \
		cr_assert_str_eq(ep.host, h);                                              \
		cr_assert_eq(ep.port, p);                                                  \
	} while (0)
	OK("127.0.0.1:9092", "127.0.0.1", 9092);
	OK("broker-1.example:1", "broker-1.example", 1);
	OK("[::1]:65535", "::1", 65535);
#undef OK
	const char *bad[] = {"", "host", "host:", ":9092", "host:0", "host:65536", "host:12a", "::1:9092", "[::1]9092",
			     "[::1]:", "host:123456"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_assert_eq(sluice_cli_parse_endpoint(bad[i], strlen(bad[i]), &ep), -1, "%s", bad[i]);
}

/* ---- output ------------------------------------------------------------------------- */

Test(cli, json_and_table)
{
	static struct sluice_cli_status s;
	memset(&s, 0, sizeof s);
	s.quorum.leader_id = 2;
	s.quorum.voter_n = 2;
	s.quorum.voters[0] = (struct sluice_cli_controller){.id = 1, .log_end_offset = 10};
	s.quorum.voters[1] = (struct sluice_cli_controller){.id = 2, .log_end_offset = 11, .has_endpoint = true};
	strcpy(s.quorum.voters[1].endpoint.host, "127.0.0.1");
	s.quorum.voters[1].endpoint.port = 9093;
	s.brokers.broker_n = 2;
	s.brokers.brokers[0] = (struct sluice_cli_broker){.id = 101, .fenced = true, .has_rack = true};
	strcpy(s.brokers.brokers[0].endpoint.host, "a\"b\\c\n\xff");
	strcpy(s.brokers.brokers[0].rack, "r1");
	s.brokers.brokers[0].endpoint.port = 9092;
	s.brokers.brokers[1] = (struct sluice_cli_broker){.id = 102};
	strcpy(s.brokers.brokers[1].endpoint.host, "h");
	s.brokers.brokers[1].endpoint.port = 1;
	s.partitions.offline = 3;
	s.partitions.under_replicated = 4;
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	cr_assert_not_null(f);
	sluice_cli_print_status_json(&s, f);
	fclose(f);
	cr_assert_str_eq(text,
			 "{\"controllers\":[{\"id\":1,\"role\":\"follower\",\"last_applied_offset\":10,\"host\":null,"
			 "\"port\":null},{\"id\":2,\"role\":\"leader\",\"last_applied_offset\":11,\"host\":\"127.0.0.1\","
			 "\"port\":9093}],\"brokers\":[{\"id\":101,\"host\":\"a\\\"b\\\\c\\u000a\\u00ff\",\"port\":9092,"
			 "\"rack\":\"r1\",\"fenced\":true},{\"id\":102,\"host\":\"h\",\"port\":1,\"rack\":null,"
			 "\"fenced\":false}],\"offline_partitions\":3,\"under_replicated_partitions\":4}\n");
	free(text);
	f = open_memstream(&text, &len);
	cr_assert_not_null(f);
	sluice_cli_print_status_table(&s, f);
	fclose(f);
	cr_assert(strstr(text, "Controllers (leader 2"), "%s", text);
	cr_assert(strstr(text, "  101    a\"b\\c??"), "%s", text);
	cr_assert(strstr(text, "yes"), "%s", text);
	cr_assert(strstr(text, "Offline partitions: 3   Under-replicated partitions: 4"), "%s", text);
	free(text);
}

/* ---- the admin answers (cli_admin_wire.c) --------------------------------------------------- */

static int md_full(const uint8_t *b, size_t n, int16_t v, void *o)
{
	int rc = sluice_cli_decode_metadata_full(b, n, v, o, why, sizeof why);
	if (rc == 0)
		sluice_cli_metadata_free(o);
	return rc;
}

Test(cli, metadata_full_all_versions)
{
	static const struct part ps[] = {{101, 1, 1}, {-1, 1, 0}, {102, 3, 2}};
	struct sluice_cli_metadata m;
	for (int16_t v = SLUICE_CLI_METADATA_MIN; v <= SLUICE_CLI_METADATA_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1 << 20);
		w_metadata(&w, v, ps, 3);
		cr_assert_eq(sluice_cli_decode_metadata_full(w.buf, w.len, v, &m, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(m.broker_n, 1);
		cr_assert_eq(m.brokers[0].id, 101);
		cr_assert_str_eq(m.brokers[0].endpoint.host, "127.0.0.1");
		cr_assert_eq(m.brokers[0].endpoint.port, 9092);
		cr_assert_eq(m.topic_n, 2);
		cr_assert_str_eq(m.topics[0].name, "t");
		cr_assert_eq(m.topics[0].partition_n, 3);
		cr_assert_str_eq(m.topics[1].name, "empty");
		cr_assert_eq(m.topics[1].partition_n, 0);
		const struct sluice_cli_md_partition *p = &m.partitions[m.topics[0].partition_at + 2];
		cr_assert_eq(p->index, 2);
		cr_assert_eq(p->leader, 102);
		cr_assert_eq(p->replica_n, 3);
		cr_assert_eq(p->isr_n, 2);
		cr_assert_eq(m.ids[p->replica_at + 2], 103);
		cr_assert_eq(m.ids[p->isr_at + 1], 102);
		cr_assert_eq(m.partitions[1].leader, -1);
		cr_assert_eq(m.topics[0].id[0], v >= 10 ? 1 : 0);
		sluice_cli_metadata_free(&m);
		cuts_refused(&w, v, md_full, &m);
		kwr_free(&w);
	}
}

Test(cli, metadata_topics_request)
{
	const char *names[] = {"ab"};
	struct kwr w;
	kwr_init(&w, 0, 1024);
	sluice_cli_encode_metadata_topics(&w, 4, names, 1); /* [ "ab" ], no auto-creation */
	cr_assert_eq(w.len, 4 + 2 + 2 + 1);
	cr_assert(memcmp(w.buf, "\x00\x00\x00\x01\x00\x02" "ab\x00", 9) == 0);
	kwr_reset(&w);
	sluice_cli_encode_metadata_topics(&w, 12, names, 1); /* compact [ {zero id, "ab", tags} ], flags, tags */
	cr_assert_eq(w.len, 1 + 16 + 3 + 1 + 2 + 1);
	kwr_reset(&w);
	sluice_cli_encode_metadata_topics(&w, 12, NULL, 0); /* an empty list: no topics, brokers only */
	cr_assert_eq(w.buf[0], 1);
	kwr_free(&w);
}

static void w_describe_configs(struct kwr *w, int16_t v, int16_t err, const char *msg, int resources)
{
	bool flex = v >= 4;
	kwr_i32(w, 0);
	kwr_array(w, flex, resources);
	for (int r = 0; r < resources; r++) {
		kwr_i16(w, err);
		kwr_cstr(w, flex, msg);
		kwr_i8(w, 8);
		kwr_cstr(w, flex, "1");
		kwr_array(w, flex, err ? 0 : 2);
		for (int i = 0; !err && i < 2; i++) {
			kwr_cstr(w, flex, i ? "storage" : "root");
			kwr_cstr(w, flex, i ? NULL : "INFO");
			kwr_bool(w, false);
			kwr_i8(w, 6);
			kwr_bool(w, i == 1);
			kwr_array(w, flex, 1); /* one synonym */
			kwr_cstr(w, flex, "s");
			kwr_cstr(w, flex, "v");
			kwr_i8(w, 5);
			if (flex)
				kwr_tags_empty(w);
			if (v >= 3) {
				kwr_i8(w, 2);
				kwr_cstr(w, flex, "doc");
			}
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
}

static int dcf(const uint8_t *b, size_t n, int16_t v, void *o)
{
	int rc = sluice_cli_decode_describe_configs(b, n, v, o, why, sizeof why);
	if (rc == 0)
		sluice_cli_configs_free(o);
	return rc;
}

Test(cli, describe_configs_all_versions)
{
	struct sluice_cli_configs c;
	for (int16_t v = SLUICE_CLI_DESCRIBE_CONFIGS_MIN; v <= SLUICE_CLI_DESCRIBE_CONFIGS_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1 << 16);
		w_describe_configs(&w, v, 0, NULL, 1);
		cr_assert_eq(sluice_cli_decode_describe_configs(w.buf, w.len, v, &c, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(c.error, 0);
		cr_assert_eq(c.config_n, 2);
		cr_assert_str_eq(c.configs[0].name, "root");
		cr_assert_str_eq(c.configs[0].value, "INFO");
		cr_assert_eq(c.configs[0].source, 6);
		cr_assert_null(c.configs[1].value);
		cr_assert(c.configs[1].sensitive);
		sluice_cli_configs_free(&c);
		cuts_refused(&w, v, dcf, &c);
		kwr_reset(&w);
		w_describe_configs(&w, v, KERR_INVALID_REQUEST, "Unexpected broker id\n", 1);
		cr_assert_eq(sluice_cli_decode_describe_configs(w.buf, w.len, v, &c, why, sizeof why), 0, "%s", why);
		cr_assert_eq(c.error, KERR_INVALID_REQUEST);
		cr_assert_str_eq(c.message, "Unexpected broker id?"); /* control bytes shown as '?' */
		kwr_reset(&w);
		w_describe_configs(&w, v, 0, NULL, 2);
		cr_assert_eq(sluice_cli_decode_describe_configs(w.buf, w.len, v, &c, why, sizeof why), -1);
		cr_assert(strstr(why, "not one resource"), "%s", why);
		kwr_free(&w);
	}
}

Test(cli, describe_configs_request)
{
	struct kwr w;
	kwr_init(&w, 0, 1024);
	/* v4: [ {8, "1", ["storage"], tags} ], IncludeSynonyms false, IncludeDocumentation false, tags */
	sluice_cli_encode_describe_configs(&w, 4, 8, "1", "storage");
	static const uint8_t want[] = {2, 8, 2, '1', 2, 8, 's', 't', 'o', 'r', 'a', 'g', 'e', 0, 0, 0, 0};
	cr_assert_eq(w.len, sizeof want);
	cr_assert(memcmp(w.buf, want, sizeof want) == 0);
	kwr_reset(&w);
	sluice_cli_encode_describe_configs(&w, 1, 2, "t", NULL); /* keys null: -1 */
	static const uint8_t want1[] = {0, 0, 0, 1, 2, 0, 1, 't', 0xff, 0xff, 0xff, 0xff, 0};
	cr_assert_eq(w.len, sizeof want1);
	cr_assert(memcmp(w.buf, want1, sizeof want1) == 0);
	kwr_free(&w);
}

static int iac(const uint8_t *b, size_t n, int16_t v, void *o)
{
	(void)v;
	return sluice_cli_decode_alter_configs(b, n, o, why, sizeof why);
}

Test(cli, alter_configs)
{
	struct kwr w;
	kwr_init(&w, 0, 1024);
	kwr_i32(&w, 0);
	kwr_array(&w, true, 1);
	kwr_i16(&w, KERR_INVALID_CONFIG);
	kwr_cstr(&w, true, "Logger x does not exist!");
	kwr_i8(&w, 8);
	kwr_cstr(&w, true, "1");
	kwr_tags_empty(&w);
	kwr_tags_empty(&w);
	struct sluice_cli_result r;
	cr_assert_eq(sluice_cli_decode_alter_configs(w.buf, w.len, &r, why, sizeof why), 0, "%s", why);
	cr_assert_eq(r.error, KERR_INVALID_CONFIG);
	cr_assert_str_eq(r.message, "Logger x does not exist!");
	cuts_refused(&w, 1, iac, &r);
	kwr_reset(&w);
	/* the request: [ {8, "1", [ {"storage", DELETE, null, tags} ], tags} ], ValidateOnly false, tags */
	const struct sluice_cli_alter a = {"storage", NULL, SLUICE_CLI_OP_DELETE};
	sluice_cli_encode_alter_configs(&w, 8, "1", &a, 1);
	static const uint8_t want[] = {2, 8, 2, '1', 2, 8, 's', 't', 'o', 'r', 'a', 'g', 'e', 1, 0, 0, 0, 0, 0};
	cr_assert_eq(w.len, sizeof want);
	cr_assert(memcmp(w.buf, want, sizeof want) == 0);
	kwr_free(&w);
}

static int ct(const uint8_t *b, size_t n, int16_t v, void *o)
{
	return sluice_cli_decode_create_topics(b, n, v, o, why, sizeof why);
}

Test(cli, create_topics_all_versions)
{
	for (int16_t v = SLUICE_CLI_CREATE_TOPICS_MIN; v <= SLUICE_CLI_CREATE_TOPICS_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1024);
		kwr_i32(&w, 0);
		kwr_array(&w, true, 1);
		kwr_cstr(&w, true, "t");
		if (v >= 7)
			kwr_uuid(&w, (const uint8_t[16]){7, 6});
		kwr_i16(&w, 0);
		kwr_cstr(&w, true, NULL);
		kwr_i32(&w, 3);
		kwr_i16(&w, 1);
		kwr_array(&w, true, 1);
		kwr_cstr(&w, true, "retention.ms");
		kwr_cstr(&w, true, "1000");
		kwr_bool(&w, false);
		kwr_i8(&w, 1);
		kwr_bool(&w, false);
		kwr_tags_empty(&w);
		kwr_tags_empty(&w);
		kwr_tags_empty(&w);
		struct sluice_cli_result r;
		cr_assert_eq(sluice_cli_decode_create_topics(w.buf, w.len, v, &r, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(r.error, 0);
		cr_assert_eq(r.partitions, 3);
		cr_assert_eq(r.replication_factor, 1);
		cr_assert_eq(r.topic_id[0], v >= 7 ? 7 : 0);
		cr_assert_str_eq(r.message, "");
		cuts_refused(&w, v, ct, &r);
		kwr_free(&w);
	}
	/* the request: one topic, its configs as pairs */
	const char *kv[] = {"retention.ms", "1000"};
	struct kwr w;
	kwr_init(&w, 0, 1024);
	sluice_cli_encode_create_topic(&w, 7, "t", 3, -1, kv, 1, 30000);
	cr_assert_eq(w.len, 1 + 2 + 4 + 2 + 1 + 1 + 13 + 5 + 1 + 1 + 4 + 1 + 1);
	kwr_free(&w);
}

static int dt(const uint8_t *b, size_t n, int16_t v, void *o)
{
	return sluice_cli_decode_delete_topics(b, n, v, o, why, sizeof why);
}

Test(cli, delete_topics_all_versions)
{
	for (int16_t v = SLUICE_CLI_DELETE_TOPICS_MIN; v <= SLUICE_CLI_DELETE_TOPICS_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1024);
		kwr_i32(&w, 0);
		kwr_array(&w, true, 1);
		kwr_cstr(&w, true, "t");
		if (v >= 6)
			kwr_uuid(&w, (const uint8_t[16]){0});
		kwr_i16(&w, KERR_UNKNOWN_TOPIC_OR_PARTITION);
		if (v >= 5)
			kwr_cstr(&w, true, "no such topic");
		kwr_tags_empty(&w);
		kwr_tags_empty(&w);
		struct sluice_cli_result r;
		cr_assert_eq(sluice_cli_decode_delete_topics(w.buf, w.len, v, &r, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(r.error, KERR_UNKNOWN_TOPIC_OR_PARTITION);
		cr_assert_str_eq(r.message, v >= 5 ? "no such topic" : "");
		cuts_refused(&w, v, dt, &r);
		kwr_reset(&w);
		sluice_cli_encode_delete_topic(&w, v, "t", 1000);
		cr_assert_eq(w.len, v >= 6 ? 1 + 2 + 16 + 1 + 4 + 1 : 1 + 2 + 4 + 1);
		kwr_free(&w);
	}
}

Test(cli, topic_id_text)
{
	char out[23];
	sluice_cli_topic_id_text((const uint8_t[16]){0}, out);
	cr_assert_str_eq(out, "AAAAAAAAAAAAAAAAAAAAAA");
	const uint8_t id[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0xff};
	sluice_cli_topic_id_text(id, out);
	cr_assert_str_eq(out, "AAECAwQFBgcICQoLDA0O_w"); /* URL-safe alphabet, no padding */
}

/* ---- consumer groups ------------------------------------------------------------------------ */

static int lg(const uint8_t *b, size_t n, int16_t v, void *o)
{
	int rc = sluice_cli_decode_list_groups(b, n, v, o, why, sizeof why);
	if (rc == 0)
		sluice_cli_group_list_free(o);
	return rc;
}

Test(cli, list_groups_all_versions)
{
	struct sluice_cli_group_list l;
	for (int16_t v = SLUICE_CLI_LIST_GROUPS_MIN; v <= SLUICE_CLI_LIST_GROUPS_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1024);
		kwr_i32(&w, 0);
		kwr_i16(&w, 0);
		kwr_array(&w, true, 2);
		for (int i = 0; i < 2; i++) {
			kwr_cstr(&w, true, i ? "g2" : "g1");
			kwr_cstr(&w, true, "consumer");
			if (v >= 4)
				kwr_cstr(&w, true, i ? "Empty" : "Stable");
			if (v >= 5)
				kwr_cstr(&w, true, "classic");
			kwr_tags_empty(&w);
		}
		kwr_tags_empty(&w);
		cr_assert_eq(sluice_cli_decode_list_groups(w.buf, w.len, v, &l, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(l.n, 2);
		cr_assert_str_eq(l.groups[1].group_id, "g2");
		cr_assert_str_eq(l.groups[0].protocol_type, "consumer");
		cr_assert_str_eq(l.groups[0].state, v >= 4 ? "Stable" : "");
		sluice_cli_group_list_free(&l);
		cuts_refused(&w, v, lg, &l);
		kwr_free(&w);
	}
}

static int fc(const uint8_t *b, size_t n, int16_t v, void *o)
{
	return sluice_cli_decode_find_coordinator(b, n, v, o, why, sizeof why);
}

Test(cli, find_coordinator_all_versions)
{
	struct sluice_cli_coordinator co;
	for (int16_t v = SLUICE_CLI_FIND_COORDINATOR_MIN; v <= SLUICE_CLI_FIND_COORDINATOR_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1024);
		kwr_i32(&w, 0);
		if (v >= 4) {
			kwr_array(&w, true, 1);
			kwr_cstr(&w, true, "g");
		} else {
			kwr_i16(&w, 0);
			kwr_cstr(&w, true, NULL);
		}
		kwr_i32(&w, 7);
		kwr_cstr(&w, true, "127.0.0.1");
		kwr_i32(&w, 9092);
		if (v >= 4) {
			kwr_i16(&w, 0);
			kwr_cstr(&w, true, NULL);
			kwr_tags_empty(&w);
		}
		kwr_tags_empty(&w);
		cr_assert_eq(sluice_cli_decode_find_coordinator(w.buf, w.len, v, &co, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(co.node_id, 7);
		cr_assert_str_eq(co.endpoint.host, "127.0.0.1");
		cr_assert_eq(co.endpoint.port, 9092);
		cuts_refused(&w, v, fc, &co);
		kwr_reset(&w);
		sluice_cli_encode_find_coordinator(&w, v, "g");
		cr_assert_eq(w.len, v >= 4 ? 1 + 1 + 2 + 1 : 2 + 1 + 1);
		kwr_free(&w);
	}
}

/* A ConsumerProtocolAssignment v0: [t: 2, 0], no user data. */
static void w_assignment(struct kwr *a)
{
	kwr_i16(a, 0);
	kwr_array(a, false, 1);
	kwr_cstr(a, false, "t");
	kwr_array(a, false, 2);
	kwr_i32(a, 2);
	kwr_i32(a, 0);
	kwr_bytes(a, false, NULL, -1);
}

static void w_group(struct kwr *w, int16_t v, const char *protocol_type, const struct kwr *assignment)
{
	kwr_i32(w, 0);
	kwr_array(w, true, 1);
	kwr_i16(w, 0);
	if (v >= 6)
		kwr_cstr(w, true, NULL);
	kwr_cstr(w, true, "g");
	kwr_cstr(w, true, "Stable");
	kwr_cstr(w, true, protocol_type);
	kwr_cstr(w, true, "range");
	kwr_array(w, true, 1);
	kwr_cstr(w, true, "m-1");
	kwr_cstr(w, true, NULL);
	kwr_cstr(w, true, "client");
	kwr_cstr(w, true, "/127.0.0.1");
	kwr_bytes(w, true, "", 0);
	kwr_bytes(w, true, assignment->buf, (int32_t)assignment->len);
	kwr_tags_empty(w);
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
	kwr_tags_empty(w);
}

static int dgr(const uint8_t *b, size_t n, int16_t v, void *o)
{
	int rc = sluice_cli_decode_describe_group(b, n, v, o, why, sizeof why);
	if (rc == 0)
		sluice_cli_group_free(o);
	return rc;
}

Test(cli, describe_group_all_versions)
{
	struct kwr a;
	kwr_init(&a, 0, 1024);
	w_assignment(&a);
	struct sluice_cli_group g;
	for (int16_t v = SLUICE_CLI_DESCRIBE_GROUPS_MIN; v <= SLUICE_CLI_DESCRIBE_GROUPS_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 4096);
		w_group(&w, v, "consumer", &a);
		cr_assert_eq(sluice_cli_decode_describe_group(w.buf, w.len, v, &g, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_str_eq(g.state, "Stable");
		cr_assert_str_eq(g.protocol, "range");
		cr_assert_eq(g.member_n, 1);
		cr_assert_str_eq(g.members[0].member_id, "m-1");
		cr_assert_null(g.members[0].instance_id);
		cr_assert_str_eq(g.members[0].client_host, "/127.0.0.1");
		cr_assert_eq(g.members[0].assigned_n, 2);
		cr_assert_str_eq(g.assigned.v[0].topic, "t");
		cr_assert_eq(g.assigned.v[0].partition, 2);
		cr_assert_not(g.members[0].assignment_unreadable);
		sluice_cli_group_free(&g);
		cuts_refused(&w, v, dgr, &g);
		/* a cut assignment, or another protocol type: unreadable, not malformed */
		for (int k = 0; k < 2; k++) {
			struct kwr cut = a;
			cut.len = k ? a.len : a.len - 9; /* the user data and the last partition gone */
			kwr_reset(&w);
			w_group(&w, v, k ? "connect" : "consumer", &cut);
			cr_assert_eq(sluice_cli_decode_describe_group(w.buf, w.len, v, &g, why, sizeof why), 0, "%s", why);
			cr_assert(g.members[0].assignment_unreadable);
			cr_assert_eq(g.members[0].assigned_n, 0);
			sluice_cli_group_free(&g);
		}
		kwr_free(&w);
	}
	kwr_free(&a);
}

static int of(const uint8_t *b, size_t n, int16_t v, void *o)
{
	(void)v;
	int rc = sluice_cli_decode_offset_fetch(b, n, o, why, sizeof why);
	if (rc == 0)
		sluice_cli_tps_free(o);
	return rc;
}

Test(cli, offset_fetch)
{
	struct kwr w;
	kwr_init(&w, 0, 1024);
	kwr_i32(&w, 0);
	kwr_array(&w, true, 1);
	kwr_cstr(&w, true, "g");
	kwr_array(&w, true, 1);
	kwr_cstr(&w, true, "t");
	kwr_array(&w, true, 2);
	for (int p = 0; p < 2; p++) {
		kwr_i32(&w, p);
		kwr_i64(&w, p ? -1 : 42);
		kwr_i32(&w, -1);
		kwr_cstr(&w, true, "");
		kwr_i16(&w, 0);
		kwr_tags_empty(&w);
	}
	kwr_tags_empty(&w);
	kwr_i16(&w, 0);
	kwr_tags_empty(&w);
	kwr_tags_empty(&w);
	struct sluice_cli_tps t;
	cr_assert_eq(sluice_cli_decode_offset_fetch(w.buf, w.len, &t, why, sizeof why), 0, "%s", why);
	cr_assert_eq(t.n, 2);
	cr_assert_str_eq(t.v[0].topic, "t");
	cr_assert_eq(t.v[0].offset, 42);
	cr_assert_eq(t.v[1].offset, -1);
	sluice_cli_tps_free(&t);
	cuts_refused(&w, 8, of, &t);
	kwr_reset(&w);
	sluice_cli_encode_offset_fetch(&w, "g"); /* [ {"g", null topics, tags} ], RequireStable false, tags */
	static const uint8_t want[] = {2, 2, 'g', 0, 0, 0, 0};
	cr_assert_eq(w.len, sizeof want);
	cr_assert(memcmp(w.buf, want, sizeof want) == 0);
	kwr_free(&w);
}

static int lo(const uint8_t *b, size_t n, int16_t v, void *o)
{
	int rc = sluice_cli_decode_list_offsets(b, n, v, o, why, sizeof why);
	if (rc == 0)
		sluice_cli_tps_free(o);
	return rc;
}

Test(cli, list_offsets_all_versions)
{
	for (int16_t v = SLUICE_CLI_LIST_OFFSETS_MIN; v <= SLUICE_CLI_LIST_OFFSETS_MAX; v++) {
		struct kwr w;
		kwr_init(&w, 0, 1024);
		kwr_i32(&w, 0);
		kwr_array(&w, true, 1);
		kwr_cstr(&w, true, "t");
		kwr_array(&w, true, 1);
		kwr_i32(&w, 3);
		kwr_i16(&w, 0);
		kwr_i64(&w, -1);
		kwr_i64(&w, 1234);
		kwr_i32(&w, 5);
		kwr_tags_empty(&w);
		kwr_tags_empty(&w);
		kwr_tags_empty(&w);
		struct sluice_cli_tps t;
		cr_assert_eq(sluice_cli_decode_list_offsets(w.buf, w.len, v, &t, why, sizeof why), 0, "v%d: %s", v, why);
		cr_assert_eq(t.n, 1);
		cr_assert_eq(t.v[0].partition, 3);
		cr_assert_eq(t.v[0].offset, 1234);
		sluice_cli_tps_free(&t);
		cuts_refused(&w, v, lo, &t);
		kwr_free(&w);
	}
	/* the request groups partitions by topic: t [0, 1], u [0] */
	struct sluice_cli_tps ask = {0};
	cr_assert(sluice_cli_tps_add(&ask, "t", 0, 0, 0) && sluice_cli_tps_add(&ask, "t", 1, 0, 0) &&
		  sluice_cli_tps_add(&ask, "u", 0, 0, 0));
	struct kwr w;
	kwr_init(&w, 0, 1024);
	sluice_cli_encode_list_offsets(&w, 7, ask.v, ask.n);
	cr_assert_eq(w.buf[5], 3); /* after ReplicaId and IsolationLevel: two topics */
	cr_assert_eq(w.len, 4 + 1 + 1 + 2 * (2 + 1 + 1) + 3 * (4 + 4 + 8 + 1) + 1);
	kwr_free(&w);
	sluice_cli_tps_free(&ask);
}
