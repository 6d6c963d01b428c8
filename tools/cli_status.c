/* `sluice cluster status`: who the controllers are and which leads, which
 * brokers are registered and which are fenced, how many partitions have no
 * leader and how many have fewer in-sync replicas than replicas.
 *
 * Three questions, each asked of the first server that answers:
 * - DescribeQuorum (55) of the bootstrap servers: a controller answers for
 *   itself (a follower's view is replaced by the leader's when the leader's
 *   endpoint is known), a broker relays the active controller's answer. v2
 *   also gives every controller's endpoint (Nodes).
 * - DescribeCluster (60) v2 with IncludeFencedBrokers of the controllers
 *   (the leader first): only the controllers know the fenced brokers (a
 *   broker's own answer lists the live ones). With no endpoints known
 *   (DescribeQuorum below v2) the bootstrap servers are asked instead. A
 *   single-node broker is its own quorum and answers as its controller.
 * - Metadata (3) for all topics of a broker: the bootstrap broker, else the
 *   unfenced brokers in turn (--bootstrap-controller: a controller has no
 *   Metadata).
 * Controllers' "last applied offset" is DescribeQuorum's LogEndOffset of
 * each voter, as the leader knows it. */
#include "tools/cli.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/kafka/errors.h"

struct gather {
	const struct sluice_cli_options *o;
	struct sluice_cli_status *s;
	struct sluice_cli_conn boot; /* --bootstrap-server: the broker that answered, for Metadata */
	struct sluice_cli_quorum follower_view; /* a follower's answer, kept until the leader's comes */
	struct sluice_cli_endpoint follower;    /* who gave it */
	bool from_follower;                     /* the status shows a follower's view */
	char leader_err[SLUICE_CLI_ERR_MAX];    /* why the leader's view could not be had */
	char err[SLUICE_CLI_ERR_MAX];           /* the last failure, reported when nothing answers */
	bool reached;                           /* a bootstrap server took the connection */
};

/* ---- the questions ----------------------------------------------------------------- */

static int ask_quorum(struct sluice_cli_conn *c, struct sluice_cli_quorum *q, char *err, size_t errlen)
{
	const struct sluice_cli_versions *vs = &c->versions;
	int16_t v = sluice_cli_pick_version(vs->describe_quorum, vs->describe_quorum_min, vs->describe_quorum_max, 0,
					    SLUICE_CLI_DESCRIBE_QUORUM_MAX);
	if (v < 0) {
		snprintf(err, errlen, "%s:%d does not serve DescribeQuorum v0-%d", c->peer.host, (int)c->peer.port,
			 SLUICE_CLI_DESCRIBE_QUORUM_MAX);
		return -1;
	}
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_describe_quorum(&w, v);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	int rc = sluice_cli_call(c, SLUICE_CLI_API_DESCRIBE_QUORUM, v, true, &w, &resp, &body, &len, err, errlen);
	kwr_free(&w);
	if (rc < 0)
		return -1;
	char why[SLUICE_CLI_WHY_MAX];
	rc = sluice_cli_decode_describe_quorum(body, len, v, q, why, sizeof why);
	free(resp);
	if (rc < 0)
		snprintf(err, errlen, "%s:%d: %s", c->peer.host, (int)c->peer.port, why);
	return rc;
}

static int ask_brokers(struct sluice_cli_conn *c, struct sluice_cli_brokers *out, char *err, size_t errlen)
{
	const struct sluice_cli_versions *vs = &c->versions;
	int16_t v = sluice_cli_pick_version(vs->describe_cluster, vs->describe_cluster_min, vs->describe_cluster_max, 0,
					    SLUICE_CLI_DESCRIBE_CLUSTER_MAX);
	if (v < 0) {
		snprintf(err, errlen, "%s:%d does not serve DescribeCluster v0-%d", c->peer.host, (int)c->peer.port,
			 SLUICE_CLI_DESCRIBE_CLUSTER_MAX);
		return -1;
	}
	struct kwr w;
	kwr_init(&w, 16, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_describe_cluster(&w, v);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	int rc = sluice_cli_call(c, SLUICE_CLI_API_DESCRIBE_CLUSTER, v, true, &w, &resp, &body, &len, err, errlen);
	kwr_free(&w);
	if (rc < 0)
		return -1;
	char why[SLUICE_CLI_WHY_MAX];
	rc = sluice_cli_decode_describe_cluster(body, len, v, out, why, sizeof why);
	free(resp);
	if (rc < 0)
		snprintf(err, errlen, "%s:%d: %s", c->peer.host, (int)c->peer.port, why);
	else if (out->error != KERR_NONE) {
		snprintf(err, errlen, "%s:%d: DescribeCluster: error %s", c->peer.host, (int)c->peer.port,
			 sluice_kafka_error_name(out->error));
		rc = -1;
	}
	return rc;
}

static int ask_partitions(struct sluice_cli_conn *c, struct sluice_cli_partitions *out, char *err, size_t errlen)
{
	const struct sluice_cli_versions *vs = &c->versions;
	int16_t v = sluice_cli_pick_version(vs->metadata, vs->metadata_min, vs->metadata_max, SLUICE_CLI_METADATA_MIN,
					    SLUICE_CLI_METADATA_MAX);
	if (v < 0) {
		snprintf(err, errlen, "%s:%d does not serve Metadata v%d-%d", c->peer.host, (int)c->peer.port,
			 SLUICE_CLI_METADATA_MIN, SLUICE_CLI_METADATA_MAX);
		return -1;
	}
	struct kwr w;
	kwr_init(&w, 16, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_metadata(&w, v);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	int rc = sluice_cli_call(c, SLUICE_CLI_API_METADATA, v, sluice_cli_metadata_flexible(v), &w, &resp, &body, &len,
				 err, errlen);
	kwr_free(&w);
	if (rc < 0)
		return -1;
	char why[SLUICE_CLI_WHY_MAX];
	rc = sluice_cli_decode_metadata(body, len, v, out, why, sizeof why);
	free(resp);
	if (rc < 0)
		snprintf(err, errlen, "%s:%d: %s", c->peer.host, (int)c->peer.port, why);
	return rc;
}

/* ---- who answers ------------------------------------------------------------------ */

static const struct sluice_cli_controller *leader_of(const struct sluice_cli_quorum *q)
{
	for (int32_t i = 0; i < q->voter_n; i++)
		if (q->voters[i].id == q->leader_id)
			return &q->voters[i];
	return NULL;
}

/* A controller that is not the leader answers NOT_LEADER_OR_FOLLOWER with
 * its own view; the leader's view (every voter's offset) is asked for when
 * its endpoint is known. 0: g->s->quorum holds the leader's answer. */
static int quorum_from_leader(struct gather *g, const struct sluice_cli_quorum *view)
{
	const struct sluice_cli_controller *l = leader_of(view);
	if (!l || !l->has_endpoint)
		return -1;
	struct sluice_cli_conn c;
	if (sluice_cli_open(&c, &l->endpoint, g->o->timeout_ms, g->err, sizeof g->err) < 0)
		return -1;
	int rc = ask_quorum(&c, &g->s->quorum, g->err, sizeof g->err);
	sluice_cli_close(&c);
	return rc == 0 && g->s->quorum.error == KERR_NONE ? 0 : -1;
}

static int gather_quorum(struct gather *g)
{
	struct sluice_cli_quorum *q = &g->s->quorum;
	bool have_view = false;
	for (int i = 0; i < g->o->server_n; i++) {
		struct sluice_cli_conn c;
		int open_rc = sluice_cli_open(&c, &g->o->servers[i], g->o->timeout_ms, g->err, sizeof g->err);
		g->reached |= open_rc != -2;
		if (open_rc < 0)
			continue;
		int rc = ask_quorum(&c, q, g->err, sizeof g->err);
		if (rc == 0 && q->error == KERR_NONE) {
			if (g->o->controllers)
				sluice_cli_close(&c);
			else
				g->boot = c;
			return 0;
		}
		sluice_cli_close(&c);
		if (rc < 0)
			continue;
		snprintf(g->err, sizeof g->err, "%s:%d: DescribeQuorum: error %s", c.peer.host, (int)c.peer.port,
			 sluice_kafka_error_name(q->error));
		if (q->error == KERR_NOT_LEADER_OR_FOLLOWER && q->voter_n > 0 && !have_view) {
			g->follower_view = *q;
			g->follower = c.peer;
			have_view = true;
			if (quorum_from_leader(g, &g->follower_view) == 0)
				return 0;
			memcpy(g->leader_err, g->err, sizeof g->err);
		}
	}
	if (!have_view)
		return -1;
	*q = g->follower_view; /* the leader is unreachable or unknown: a follower's view, roles from it */
	g->from_follower = true;
	return 0;
}

static int gather_brokers(struct gather *g)
{
	const struct sluice_cli_quorum *q = &g->s->quorum;
	const struct sluice_cli_endpoint *cand[SLUICE_CLI_CONTROLLERS_MAX + SLUICE_CLI_SERVERS_MAX];
	int n = 0;
	const struct sluice_cli_controller *l = leader_of(q);
	if (l && l->has_endpoint)
		cand[n++] = &l->endpoint;
	for (int32_t i = 0; i < q->voter_n; i++)
		if (q->voters[i].has_endpoint && &q->voters[i] != l)
			cand[n++] = &q->voters[i].endpoint;
	if (n == 0) /* no endpoints in the answer: the servers we were given */
		for (int i = 0; i < g->o->server_n; i++)
			cand[n++] = &g->o->servers[i];
	for (int i = 0; i < n; i++) {
		struct sluice_cli_conn c;
		if (sluice_cli_open(&c, cand[i], g->o->timeout_ms, g->err, sizeof g->err) < 0)
			continue;
		int rc = ask_brokers(&c, &g->s->brokers, g->err, sizeof g->err);
		sluice_cli_close(&c);
		if (rc == 0)
			return 0;
	}
	return -1;
}

static int gather_partitions(struct gather *g)
{
	if (g->boot.fd >= 0 && ask_partitions(&g->boot, &g->s->partitions, g->err, sizeof g->err) == 0)
		return 0;
	bool any = false;
	const struct sluice_cli_brokers *bs = &g->s->brokers;
	for (int32_t i = 0; i < bs->broker_n; i++) {
		if (bs->brokers[i].fenced)
			continue;
		any = true;
		struct sluice_cli_conn c;
		if (sluice_cli_open(&c, &bs->brokers[i].endpoint, g->o->timeout_ms, g->err, sizeof g->err) < 0)
			continue;
		int rc = ask_partitions(&c, &g->s->partitions, g->err, sizeof g->err);
		sluice_cli_close(&c);
		if (rc == 0)
			return 0;
	}
	if (!any && g->boot.fd < 0)
		snprintf(g->err, sizeof g->err, "no unfenced broker to ask for the partitions (Metadata)");
	return -1;
}

static int by_controller_id(const void *a, const void *b)
{
	int32_t x = ((const struct sluice_cli_controller *)a)->id, y = ((const struct sluice_cli_controller *)b)->id;
	return (x > y) - (x < y);
}

static int by_broker_id(const void *a, const void *b)
{
	int32_t x = ((const struct sluice_cli_broker *)a)->id, y = ((const struct sluice_cli_broker *)b)->id;
	return (x > y) - (x < y);
}

int sluice_cli_cluster_status(const struct sluice_cli_options *o, FILE *out, FILE *errout)
{
	assert(o->server_n > 0 && o->server_n <= SLUICE_CLI_SERVERS_MAX);
	struct gather *g = calloc(1, sizeof *g);
	struct sluice_cli_status *s = calloc(1, sizeof *s);
	int status = 1;
	if (!g || !s) {
		fprintf(errout, "sluice: out of memory\n");
		goto done;
	}
	g->o = o;
	g->s = s;
	g->boot.fd = -1;
	const char *step = "no server answered DescribeQuorum";
	if (gather_quorum(g) < 0) {
		if (!g->reached)
			status = SLUICE_CLI_EXIT_UNREACHABLE;
		goto fail;
	}
	step = "no controller answered DescribeCluster";
	if (gather_brokers(g) < 0)
		goto fail;
	step = "no broker answered Metadata";
	if (gather_partitions(g) < 0)
		goto fail;
	if (g->from_follower && s->quorum.leader_id >= 0)
		fprintf(errout, "sluice: warning: the quorum as %s:%d reports it (a follower's view): its leader %d did not "
			"answer (%s)\n", g->follower.host, (int)g->follower.port, s->quorum.leader_id, g->leader_err);
	else if (g->from_follower)
		fprintf(errout, "sluice: warning: the quorum as %s:%d reports it (a follower's view): no leader is known "
			"(an election is under way, or too few controllers are up)\n", g->follower.host, (int)g->follower.port);
	qsort(s->quorum.voters, (size_t)s->quorum.voter_n, sizeof s->quorum.voters[0], by_controller_id);
	qsort(s->brokers.brokers, (size_t)s->brokers.broker_n, sizeof s->brokers.brokers[0], by_broker_id);
	if (o->json)
		sluice_cli_print_status_json(s, out);
	else
		sluice_cli_print_status_table(s, out);
	status = fflush(out) == 0 && !ferror(out) ? 0 : 1;
	if (status)
		fprintf(errout, "sluice: cannot write the status\n");
	goto done;
fail:
	fprintf(errout, "sluice: cluster status: %s (last error: %s)\n", step, g->err[0] ? g->err : "none");
done:
	if (g && g->boot.fd >= 0)
		sluice_cli_close(&g->boot);
	free(g);
	free(s);
	return status;
}

/* ---- output ------------------------------------------------------------------------ */

/* A JSON string: quotes, backslashes and every byte outside printable
 * ASCII escaped (\u00XX), so the output is valid JSON whatever the wire held. */
void sluice_cli_json_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			fprintf(out, "\\u%04x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}

static const char *role_of(const struct sluice_cli_quorum *q, int32_t id)
{
	return q->leader_id >= 0 && id == q->leader_id ? "leader" : "follower";
}

void sluice_cli_print_status_json(const struct sluice_cli_status *s, FILE *out)
{
	const struct sluice_cli_quorum *q = &s->quorum;
	fputs("{\"controllers\":[", out);
	for (int32_t i = 0; i < q->voter_n; i++) {
		const struct sluice_cli_controller *c = &q->voters[i];
		fprintf(out, "%s{\"id\":%d,\"role\":\"%s\",\"last_applied_offset\":%lld,\"host\":", i ? "," : "", c->id,
			role_of(q, c->id), (long long)c->log_end_offset);
		if (c->has_endpoint) {
			sluice_cli_json_string(out, c->endpoint.host);
			fprintf(out, ",\"port\":%d}", c->endpoint.port);
		} else {
			fputs("null,\"port\":null}", out);
		}
	}
	fputs("],\"brokers\":[", out);
	for (int32_t i = 0; i < s->brokers.broker_n; i++) {
		const struct sluice_cli_broker *b = &s->brokers.brokers[i];
		fprintf(out, "%s{\"id\":%d,\"host\":", i ? "," : "", b->id);
		sluice_cli_json_string(out, b->endpoint.host);
		fprintf(out, ",\"port\":%d,\"rack\":", b->endpoint.port);
		if (b->has_rack)
			sluice_cli_json_string(out, b->rack);
		else
			fputs("null", out);
		fprintf(out, ",\"fenced\":%s}", b->fenced ? "true" : "false");
	}
	fprintf(out, "],\"offline_partitions\":%lld,\"under_replicated_partitions\":%lld}\n",
		(long long)s->partitions.offline, (long long)s->partitions.under_replicated);
}

/* Text from the wire for a terminal: unprintable bytes become '?'. */
static void printable(char *out, size_t cap, const char *s)
{
	size_t i = 0;
	for (; s[i] && i + 1 < cap; i++)
		out[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
	out[i] = '\0';
}

static void endpoint_text(char *out, size_t cap, const struct sluice_cli_endpoint *ep)
{
	char host[SLUICE_CLI_HOST_MAX];
	printable(host, sizeof host, ep->host);
	snprintf(out, cap, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, (int)ep->port);
}

void sluice_cli_print_status_table(const struct sluice_cli_status *s, FILE *out)
{
	const struct sluice_cli_quorum *q = &s->quorum;
	char ep[SLUICE_CLI_HOST_MAX + 16], rack[SLUICE_CLI_RACK_MAX];
	if (q->leader_id >= 0)
		fprintf(out, "Controllers (leader %d, epoch %d):\n", q->leader_id, q->leader_epoch);
	else
		fprintf(out, "Controllers (no leader):\n");
	fprintf(out, "  %-6s %-9s %-20s %s\n", "ID", "ROLE", "LAST_APPLIED_OFFSET", "ENDPOINT");
	for (int32_t i = 0; i < q->voter_n; i++) {
		const struct sluice_cli_controller *c = &q->voters[i];
		if (c->has_endpoint)
			endpoint_text(ep, sizeof ep, &c->endpoint);
		else
			snprintf(ep, sizeof ep, "-");
		fprintf(out, "  %-6d %-9s %-20lld %s\n", c->id, role_of(q, c->id), (long long)c->log_end_offset, ep);
	}
	fprintf(out, "Brokers:\n  %-6s %-24s %-12s %s\n", "ID", "ENDPOINT", "RACK", "FENCED");
	for (int32_t i = 0; i < s->brokers.broker_n; i++) {
		const struct sluice_cli_broker *b = &s->brokers.brokers[i];
		endpoint_text(ep, sizeof ep, &b->endpoint);
		printable(rack, sizeof rack, b->has_rack ? b->rack : "-");
		fprintf(out, "  %-6d %-24s %-12s %s\n", b->id, ep, rack, b->fenced ? "yes" : "no");
	}
	fprintf(out, "Offline partitions: %lld   Under-replicated partitions: %lld   (of %lld in %lld topics)\n",
		(long long)s->partitions.offline, (long long)s->partitions.under_replicated,
		(long long)s->partitions.partitions, (long long)s->partitions.topics);
}
