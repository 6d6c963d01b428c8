/* `sluice group list|describe|lag`: consumer groups as Kafka's
 * kafka-consumer-groups shows them, with the requests it sends:
 * - list: ListGroups of every broker (each coordinator knows its own
 *   groups), the brokers from Metadata;
 * - describe: FindCoordinator, then DescribeGroups of the coordinator: the
 *   state, protocol and members, each member's assignment read from the
 *   consumer protocol's bytes;
 * - lag: the committed offsets (OffsetFetch v8 of the coordinator), the
 *   members owning each partition (DescribeGroups), the log end offsets
 *   (ListOffsets latest, of each partition's leader as Metadata names it),
 *   and their difference.
 * Refusals exit 1 with Kafka's error name; see cli_admin.c for the rest. */
#include "tools/cli.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/kafka/errors.h"

#define COORDINATOR_TRIES 20 /* FindCoordinator while the group's coordinator is loading or being chosen */
#define COORDINATOR_RETRY_MS 250

static bool same_endpoint(const struct sluice_cli_endpoint *a, const struct sluice_cli_endpoint *b)
{
	return a->port == b->port && strcmp(a->host, b->host) == 0;
}

/* A second connection (another broker) named in a session's messages. */
static int open_other(struct sluice_cli_session *s, const struct sluice_cli_endpoint *ep, struct sluice_cli_conn *c)
{
	char err[SLUICE_CLI_ERR_MAX];
	if (sluice_cli_open(c, ep, s->o->timeout_ms, err, sizeof err) == 0)
		return 0;
	fprintf(s->errout, "sluice: %s: %s\n", s->what, err);
	return SLUICE_CLI_EXIT_ERROR;
}

/* Runs one request on conn c (the session's, or another) and decodes it. */
typedef int (*decode_fn)(const uint8_t *body, size_t len, int16_t v, void *out, char *err, size_t errlen);
static int ask_on(struct sluice_cli_session *s, struct sluice_cli_conn *c, int16_t key, int16_t v, bool flex,
		  struct kwr *w, decode_fn decode, void *out)
{
	struct sluice_cli_conn saved = s->c;
	s->c = *c;
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	int rc = sluice_cli_session_call(s, key, v, flex, w, &resp, &body, &len);
	*c = s->c; /* its correlation id moved on */
	s->c = saved;
	if (rc < 0)
		return SLUICE_CLI_EXIT_ERROR;
	char why[SLUICE_CLI_WHY_MAX];
	rc = decode(body, len, v, out, why, sizeof why);
	free(resp);
	return rc < 0 ? sluice_cli_session_malformed(s, why) : 0;
}

static int16_t pick_on(struct sluice_cli_session *s, struct sluice_cli_conn *c, int16_t key, int16_t lo, int16_t hi,
		       const char *api)
{
	struct sluice_cli_conn saved = s->c;
	s->c = *c;
	int16_t v = sluice_cli_session_pick(s, key, lo, hi, api);
	s->c = saved;
	return v;
}

/* ---- the decoders with the signature ask_on takes ------------------------------------------ */

static int dec_list(const uint8_t *b, size_t n, int16_t v, void *o, char *e, size_t el)
{
	return sluice_cli_decode_list_groups(b, n, v, o, e, el);
}
static int dec_coordinator(const uint8_t *b, size_t n, int16_t v, void *o, char *e, size_t el)
{
	return sluice_cli_decode_find_coordinator(b, n, v, o, e, el);
}
static int dec_group(const uint8_t *b, size_t n, int16_t v, void *o, char *e, size_t el)
{
	return sluice_cli_decode_describe_group(b, n, v, o, e, el);
}
static int dec_offset_fetch(const uint8_t *b, size_t n, int16_t v, void *o, char *e, size_t el)
{
	(void)v;
	return sluice_cli_decode_offset_fetch(b, n, o, e, el);
}
static int dec_list_offsets(const uint8_t *b, size_t n, int16_t v, void *o, char *e, size_t el)
{
	return sluice_cli_decode_list_offsets(b, n, v, o, e, el);
}

/* ---- list ------------------------------------------------------------------------------------ */

static int by_group_id(const void *a, const void *b)
{
	return strcmp(((const struct sluice_cli_group_listing *)a)->group_id,
		      ((const struct sluice_cli_group_listing *)b)->group_id);
}

/* ListGroups of one broker, its groups appended to all. */
static int list_one(struct sluice_cli_session *s, struct sluice_cli_conn *c, struct sluice_cli_group_list *all)
{
	int16_t v = pick_on(s, c, SLUICE_CLI_API_LIST_GROUPS, SLUICE_CLI_LIST_GROUPS_MIN, SLUICE_CLI_LIST_GROUPS_MAX,
			    "ListGroups");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 16, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_list_groups(&w, v);
	struct sluice_cli_group_list l;
	int rc = ask_on(s, c, SLUICE_CLI_API_LIST_GROUPS, v, true, &w, dec_list, &l);
	if (rc)
		return rc;
	if (l.error != KERR_NONE) {
		sluice_cli_group_list_free(&l);
		return sluice_cli_session_refused(s, l.error, "");
	}
	struct sluice_cli_group_listing *g = realloc(all->groups, (size_t)(all->n + l.n + 1) * sizeof *g);
	if (!g) {
		sluice_cli_group_list_free(&l);
		return sluice_cli_session_malformed(s, "out of memory");
	}
	all->groups = g;
	memcpy(all->groups + all->n, l.groups, (size_t)l.n * sizeof *g); /* the ids move to all */
	all->n += l.n;
	free(l.groups);
	return 0;
}

static void list_print(struct sluice_cli_session *s, const struct sluice_cli_group_list *all)
{
	if (!s->o->json) {
		for (int32_t i = 0; i < all->n; i++)
			fprintf(s->out, "%s\n", all->groups[i].group_id);
		return;
	}
	fputs("{\"groups\":[", s->out);
	for (int32_t i = 0; i < all->n; i++) {
		const struct sluice_cli_group_listing *g = &all->groups[i];
		fputs(i ? ",{\"group\":" : "{\"group\":", s->out);
		sluice_cli_json_string(s->out, g->group_id);
		fputs(",\"protocol_type\":", s->out);
		sluice_cli_json_string(s->out, g->protocol_type);
		fputs(",\"state\":", s->out);
		if (g->state[0])
			sluice_cli_json_string(s->out, g->state);
		else
			fputs("null", s->out);
		fputc('}', s->out);
	}
	fputs("]}\n", s->out);
}

static int group_list(struct sluice_cli_session *s)
{
	struct sluice_cli_metadata m;
	int rc = sluice_cli_session_metadata(s, NULL, 0, &m);
	if (rc)
		return rc;
	struct sluice_cli_group_list all = {0};
	for (int32_t i = 0; i < m.broker_n && rc == 0; i++) {
		if (same_endpoint(&m.brokers[i].endpoint, &s->c.peer)) {
			rc = list_one(s, &s->c, &all);
			continue;
		}
		struct sluice_cli_conn c;
		if ((rc = open_other(s, &m.brokers[i].endpoint, &c)) == 0) {
			rc = list_one(s, &c, &all);
			sluice_cli_close(&c);
		}
	}
	if (m.broker_n == 0)
		rc = list_one(s, &s->c, &all);
	sluice_cli_metadata_free(&m);
	if (rc == 0) {
		qsort(all.groups, (size_t)all.n, sizeof *all.groups, by_group_id);
		list_print(s, &all);
		rc = sluice_cli_session_finish(s);
	}
	sluice_cli_group_list_free(&all);
	return rc;
}

/* ---- the coordinator --------------------------------------------------------------------------- */

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* FindCoordinator, retried while the coordinator is not yet available. */
static int find_coordinator(struct sluice_cli_session *s, const char *group, struct sluice_cli_coordinator *co)
{
	int16_t v = sluice_cli_session_pick(s, SLUICE_CLI_API_FIND_COORDINATOR, SLUICE_CLI_FIND_COORDINATOR_MIN,
					    SLUICE_CLI_FIND_COORDINATOR_MAX, "FindCoordinator");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	for (int t = 0;; t++) {
		struct kwr w;
		kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
		sluice_cli_encode_find_coordinator(&w, v, group);
		int rc = ask_on(s, &s->c, SLUICE_CLI_API_FIND_COORDINATOR, v, true, &w, dec_coordinator, co);
		if (rc)
			return rc;
		bool retriable =
			co->error == KERR_COORDINATOR_NOT_AVAILABLE || co->error == KERR_COORDINATOR_LOAD_IN_PROGRESS;
		if (co->error == KERR_NONE)
			return 0;
		if (!retriable || t + 1 >= COORDINATOR_TRIES)
			return sluice_cli_session_refused(s, co->error, co->message);
		sleep_ms(COORDINATOR_RETRY_MS);
	}
}

/* The coordinator's connection: the session's own when it is the same
 * broker (*other false), else a new one the caller closes. */
static int coordinator_conn(struct sluice_cli_session *s, const struct sluice_cli_coordinator *co,
			    struct sluice_cli_conn *c, bool *other)
{
	*other = !same_endpoint(&co->endpoint, &s->c.peer);
	if (!*other) {
		*c = s->c;
		return 0;
	}
	return open_other(s, &co->endpoint, c);
}

/* DescribeGroups of the coordinator; a Dead group is one that does not exist. */
static int describe_group(struct sluice_cli_session *s, struct sluice_cli_conn *c, const char *group,
			  struct sluice_cli_group *g)
{
	int16_t v = pick_on(s, c, SLUICE_CLI_API_DESCRIBE_GROUPS, SLUICE_CLI_DESCRIBE_GROUPS_MIN,
			    SLUICE_CLI_DESCRIBE_GROUPS_MAX, "DescribeGroups");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_describe_group(&w, v, group);
	int rc = ask_on(s, c, SLUICE_CLI_API_DESCRIBE_GROUPS, v, true, &w, dec_group, g);
	if (rc)
		return rc;
	if (g->error != KERR_NONE || strcmp(g->state, "Dead") == 0) {
		int16_t e = g->error ? g->error : KERR_GROUP_ID_NOT_FOUND;
		char msg[SLUICE_CLI_MESSAGE_MAX];
		snprintf(msg, sizeof msg, "%s", g->error ? g->message : "the group does not exist");
		sluice_cli_group_free(g);
		return sluice_cli_session_refused(s, e, msg);
	}
	return 0;
}

/* ---- describe ------------------------------------------------------------------------------------ */

/* "t:0,1;u:2" as Kafka 4's kafka-consumer-groups --members --verbose prints
 * an assignment; "-" when empty, "?" when not in the consumer protocol's layout. */
static void print_assignment(FILE *out, const struct sluice_cli_group *g, const struct sluice_cli_member *m)
{
	if (m->assigned_n == 0) {
		fputs(m->assignment_unreadable ? "?" : "-", out);
		return;
	}
	const struct sluice_cli_tp *a = g->assigned.v + m->assigned_at;
	for (int32_t i = 0; i < m->assigned_n; i++) {
		bool new_topic = i == 0 || strcmp(a[i].topic, a[i - 1].topic) != 0;
		if (new_topic)
			fprintf(out, "%s%s:", i ? ";" : "", a[i].topic);
		fprintf(out, "%s%d", new_topic ? "" : ",", a[i].partition);
	}
}

static void describe_json(struct sluice_cli_session *s, const char *group, const struct sluice_cli_coordinator *co,
			  const struct sluice_cli_group *g)
{
	FILE *out = s->out;
	fputs("{\"group\":", out);
	sluice_cli_json_string(out, group);
	fputs(",\"state\":", out);
	sluice_cli_json_string(out, g->state);
	fputs(",\"protocol_type\":", out);
	sluice_cli_json_string(out, g->protocol_type);
	fputs(",\"protocol\":", out);
	sluice_cli_json_string(out, g->protocol);
	fprintf(out, ",\"coordinator\":{\"id\":%d,\"host\":", co->node_id);
	sluice_cli_json_string(out, co->endpoint.host);
	fprintf(out, ",\"port\":%d},\"members\":[", co->endpoint.port);
	for (int32_t i = 0; i < g->member_n; i++) {
		const struct sluice_cli_member *m = &g->members[i];
		fputs(i ? ",{\"member_id\":" : "{\"member_id\":", out);
		sluice_cli_json_string(out, m->member_id);
		fputs(",\"group_instance_id\":", out);
		if (m->instance_id)
			sluice_cli_json_string(out, m->instance_id);
		else
			fputs("null", out);
		fputs(",\"client_id\":", out);
		sluice_cli_json_string(out, m->client_id);
		fputs(",\"host\":", out);
		sluice_cli_json_string(out, m->client_host);
		fputs(",\"assignment\":", out);
		if (m->assignment_unreadable)
			fputs("null", out);
		else
			fputc('[', out);
		for (int32_t k = 0; k < m->assigned_n; k++) {
			const struct sluice_cli_tp *a = &g->assigned.v[m->assigned_at + k];
			fputs(k ? ",{\"topic\":" : "{\"topic\":", out);
			sluice_cli_json_string(out, a->topic);
			fprintf(out, ",\"partition\":%d}", a->partition);
		}
		fputs(m->assignment_unreadable ? "}" : "]}", out);
	}
	fputs("]}\n", out);
}

static void describe_text(struct sluice_cli_session *s, const char *group, const struct sluice_cli_coordinator *co,
			  const struct sluice_cli_group *g)
{
	FILE *out = s->out;
	fprintf(out, "Group %s: state %s, protocol %s/%s, coordinator %d (%s:%d), %d member%s\n", group, g->state,
		g->protocol_type, g->protocol[0] ? g->protocol : "-", co->node_id, co->endpoint.host, co->endpoint.port,
		g->member_n, g->member_n == 1 ? "" : "s");
	if (g->member_n == 0)
		return;
	fprintf(out, "%-24s %-48s %-20s %-24s %-12s %s\n", "GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
		"ASSIGNMENT");
	for (int32_t i = 0; i < g->member_n; i++) {
		const struct sluice_cli_member *m = &g->members[i];
		fprintf(out, "%-24s %-48s %-20s %-24s %-12d ", group, m->member_id, m->client_host, m->client_id,
			m->assigned_n);
		print_assignment(out, g, m);
		fputc('\n', out);
	}
}

static int by_tp(const void *a, const void *b)
{
	const struct sluice_cli_tp *x = a, *y = b;
	int c = strcmp(x->topic, y->topic);
	return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

static int group_describe(struct sluice_cli_session *s, const char *group)
{
	struct sluice_cli_coordinator co;
	int rc = find_coordinator(s, group, &co);
	if (rc)
		return rc;
	struct sluice_cli_conn c;
	bool other;
	if ((rc = coordinator_conn(s, &co, &c, &other)))
		return rc;
	struct sluice_cli_group g;
	rc = describe_group(s, &c, group, &g);
	if (other)
		sluice_cli_close(&c);
	else
		s->c = c;
	if (rc)
		return rc;
	for (int32_t i = 0; i < g.member_n; i++)
		qsort(g.assigned.v + g.members[i].assigned_at, (size_t)g.members[i].assigned_n, sizeof *g.assigned.v,
		      by_tp);
	if (s->o->json)
		describe_json(s, group, &co, &g);
	else
		describe_text(s, group, &co, &g);
	sluice_cli_group_free(&g);
	return sluice_cli_session_finish(s);
}

/* ---- lag --------------------------------------------------------------------------------------- */

/* One row of `group lag`: a partition with a committed offset or an owner. */
struct lag_row {
	struct sluice_cli_tp tp; /* offset: the committed one, -1 none */
	int64_t end;             /* the log end offset, -1 unknown */
	int32_t leader;
	const struct sluice_cli_member *owner;
};

struct lag {
	struct sluice_cli_group g;
	bool have_group;
	struct lag_row *rows;
	int32_t n;
};

static int lag_row_cmp(const void *a, const void *b)
{
	return by_tp(&((const struct lag_row *)a)->tp, &((const struct lag_row *)b)->tp);
}

static struct lag_row *lag_find(struct lag *l, const char *topic, int32_t partition)
{
	struct lag_row key = {.tp.partition = partition};
	snprintf(key.tp.topic, sizeof key.tp.topic, "%s", topic);
	return bsearch(&key, l->rows, (size_t)l->n, sizeof *l->rows, lag_row_cmp);
}

/* The rows: committed partitions, then assigned ones not committed yet. */
static int lag_rows(struct sluice_cli_session *s, struct lag *l, const struct sluice_cli_tps *committed)
{
	int32_t cap = committed->n + (l->have_group ? l->g.assigned.n : 0);
	l->rows = calloc((size_t)cap + 1, sizeof *l->rows);
	if (!l->rows)
		return sluice_cli_session_malformed(s, "out of memory");
	for (int32_t i = 0; i < committed->n; i++)
		if (committed->v[i].error == KERR_NONE)
			l->rows[l->n++] = (struct lag_row){.tp = committed->v[i], .end = -1, .leader = -1};
	qsort(l->rows, (size_t)l->n, sizeof *l->rows, lag_row_cmp);
	for (int32_t m = 0; l->have_group && m < l->g.member_n; m++) {
		const struct sluice_cli_member *mb = &l->g.members[m];
		for (int32_t k = 0; k < mb->assigned_n; k++) {
			const struct sluice_cli_tp *a = &l->g.assigned.v[mb->assigned_at + k];
			struct lag_row *r = lag_find(l, a->topic, a->partition);
			if (r) {
				r->owner = mb;
				continue;
			}
			l->rows[l->n] = (struct lag_row){.tp = *a, .end = -1, .leader = -1, .owner = mb};
			l->rows[l->n++].tp.offset = -1;
			qsort(l->rows, (size_t)l->n, sizeof *l->rows, lag_row_cmp);
		}
	}
	return 0;
}

/* The leaders of the rows' partitions (Metadata of their topics). */
static int lag_leaders(struct sluice_cli_session *s, struct lag *l, struct sluice_cli_metadata *m)
{
	const char **names = calloc((size_t)l->n + 1, sizeof *names);
	if (!names)
		return sluice_cli_session_malformed(s, "out of memory");
	int32_t n = 0;
	for (int32_t i = 0; i < l->n; i++)
		if (i == 0 || strcmp(l->rows[i].tp.topic, l->rows[i - 1].tp.topic) != 0)
			names[n++] = l->rows[i].tp.topic;
	int rc = n ? sluice_cli_session_metadata(s, names, n, m) : 0;
	free(names);
	if (rc || n == 0)
		return rc;
	for (int32_t t = 0; t < m->topic_n; t++)
		for (int32_t p = 0; p < m->topics[t].partition_n; p++) {
			const struct sluice_cli_md_partition *mp = &m->partitions[m->topics[t].partition_at + p];
			struct lag_row *r = lag_find(l, m->topics[t].name, mp->index);
			if (r)
				r->leader = mp->leader;
		}
	return 0;
}

/* ListOffsets (latest) of every row led by `leader`, asked of it. */
static int lag_ends_of(struct sluice_cli_session *s, struct lag *l, const struct sluice_cli_metadata *m, int32_t leader)
{
	const struct sluice_cli_endpoint *ep = NULL;
	for (int32_t i = 0; i < m->broker_n; i++)
		if (m->brokers[i].id == leader)
			ep = &m->brokers[i].endpoint;
	if (!ep)
		return 0; /* a leader Metadata does not list: its log end offsets stay unknown */
	struct sluice_cli_conn c;
	bool other = !same_endpoint(ep, &s->c.peer);
	int rc = other ? open_other(s, ep, &c) : 0;
	if (rc)
		return rc;
	if (!other)
		c = s->c;
	struct sluice_cli_tps ask = {0}, got;
	for (int32_t i = 0; i < l->n && rc == 0; i++) {
		const struct lag_row *r = &l->rows[i];
		if (r->leader == leader && !sluice_cli_tps_add(&ask, r->tp.topic, r->tp.partition, 0, 0))
			rc = sluice_cli_session_malformed(s, "out of memory");
	}
	int16_t v = rc ? -1 : pick_on(s, &c, SLUICE_CLI_API_LIST_OFFSETS, SLUICE_CLI_LIST_OFFSETS_MIN,
				      SLUICE_CLI_LIST_OFFSETS_MAX, "ListOffsets");
	if (!rc && v < 0)
		rc = SLUICE_CLI_EXIT_ERROR;
	if (!rc) {
		struct kwr w;
		kwr_init(&w, 256, SLUICE_CLI_FRAME_MAX);
		sluice_cli_encode_list_offsets(&w, v, ask.v, ask.n);
		rc = ask_on(s, &c, SLUICE_CLI_API_LIST_OFFSETS, v, sluice_cli_list_offsets_flexible(v), &w,
			    dec_list_offsets, &got);
	}
	for (int32_t i = 0; !rc && i < got.n; i++) {
		struct lag_row *r = lag_find(l, got.v[i].topic, got.v[i].partition);
		if (r && got.v[i].error == KERR_NONE)
			r->end = got.v[i].offset;
	}
	if (!rc)
		sluice_cli_tps_free(&got);
	if (other)
		sluice_cli_close(&c);
	else
		s->c = c;
	sluice_cli_tps_free(&ask);
	return rc;
}

static int lag_ends(struct sluice_cli_session *s, struct lag *l)
{
	struct sluice_cli_metadata m = {0};
	int rc = lag_leaders(s, l, &m);
	for (int32_t i = 0; rc == 0 && i < l->n; i++) {
		int32_t leader = l->rows[i].leader;
		bool first = leader >= 0;
		for (int32_t k = 0; first && k < i; k++)
			first = l->rows[k].leader != leader;
		if (first)
			rc = lag_ends_of(s, l, &m, leader);
	}
	sluice_cli_metadata_free(&m);
	return rc;
}

static void lag_print(struct sluice_cli_session *s, const char *group, const struct lag *l)
{
	FILE *out = s->out;
	int64_t total = 0;
	if (s->o->json)
		fputs("{\"group\":", out), sluice_cli_json_string(out, group), fputs(",\"partitions\":[", out);
	else
		fprintf(out, "%-24s %-24s %-10s %-15s %-15s %-10s %-48s %-20s %s\n", "GROUP", "TOPIC", "PARTITION",
			"CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID");
	for (int32_t i = 0; i < l->n; i++) {
		const struct lag_row *r = &l->rows[i];
		bool known = r->tp.offset >= 0 && r->end >= 0;
		int64_t lag = known ? (r->end > r->tp.offset ? r->end - r->tp.offset : 0) : -1;
		total += known ? lag : 0;
		char cur[24] = "-", end[24] = "-", lg[24] = "-";
		if (r->tp.offset >= 0)
			snprintf(cur, sizeof cur, "%lld", (long long)r->tp.offset);
		if (r->end >= 0)
			snprintf(end, sizeof end, "%lld", (long long)r->end);
		if (known)
			snprintf(lg, sizeof lg, "%lld", (long long)lag);
		if (!s->o->json) {
			const struct sluice_cli_member *m = r->owner;
			fprintf(out, "%-24s %-24s %-10d %-15s %-15s %-10s %-48s %-20s %s\n", group, r->tp.topic,
				r->tp.partition, cur, end, lg, m ? m->member_id : "-", m ? m->client_host : "-",
				m ? m->client_id : "-");
			continue;
		}
		fputs(i ? ",{\"topic\":" : "{\"topic\":", out);
		sluice_cli_json_string(out, r->tp.topic);
		fprintf(out, ",\"partition\":%d,\"committed_offset\":%s,\"log_end_offset\":%s,\"lag\":%s",
			r->tp.partition, r->tp.offset >= 0 ? cur : "null", r->end >= 0 ? end : "null", known ? lg : "null");
		fputs(",\"member_id\":", out);
		if (r->owner)
			sluice_cli_json_string(out, r->owner->member_id);
		else
			fputs("null", out);
		fputc('}', out);
	}
	if (s->o->json)
		fprintf(out, "],\"total_lag\":%lld}\n", (long long)total);
}

/* OffsetFetch v8 of the group's committed offsets, on the coordinator. */
static int committed_offsets(struct sluice_cli_session *s, struct sluice_cli_conn *c, const char *group,
			     struct sluice_cli_tps *out)
{
	const int16_t v = SLUICE_CLI_OFFSET_FETCH_VERSION;
	if (pick_on(s, c, SLUICE_CLI_API_OFFSET_FETCH, v, v, "OffsetFetch") < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_offset_fetch(&w, group);
	int rc = ask_on(s, c, SLUICE_CLI_API_OFFSET_FETCH, v, true, &w, dec_offset_fetch, out);
	if (rc == 0 && out->error != KERR_NONE) {
		rc = sluice_cli_session_refused(s, out->error, "");
		sluice_cli_tps_free(out);
	}
	return rc;
}

static int group_lag(struct sluice_cli_session *s, const char *group)
{
	struct sluice_cli_coordinator co;
	int rc = find_coordinator(s, group, &co);
	if (rc)
		return rc;
	struct sluice_cli_conn c;
	bool other;
	if ((rc = coordinator_conn(s, &co, &c, &other)))
		return rc;
	struct lag l = {0};
	struct sluice_cli_tps committed = {0};
	rc = committed_offsets(s, &c, group, &committed);
	if (rc == 0)
		rc = describe_group(s, &c, group, &l.g);
	if (other)
		sluice_cli_close(&c);
	else
		s->c = c;
	l.have_group = rc == 0;
	if (rc == 0)
		rc = lag_rows(s, &l, &committed);
	if (rc == 0)
		rc = lag_ends(s, &l);
	if (rc == 0) {
		lag_print(s, group, &l);
		rc = sluice_cli_session_finish(s);
	}
	sluice_cli_tps_free(&committed);
	if (l.have_group)
		sluice_cli_group_free(&l.g);
	free(l.rows);
	return rc;
}

int sluice_cli_group(const struct sluice_cli_options *o, FILE *out, FILE *errout)
{
	assert(o->word_n >= 2);
	const char *cmd = o->words[1], *group = o->word_n > 2 ? o->words[2] : NULL;
	char what[64];
	snprintf(what, sizeof what, "group %s", cmd);
	struct sluice_cli_session s = {.o = o, .out = out, .errout = errout, .what = what};
	int rc = sluice_cli_session_open(&s);
	if (rc)
		return rc;
	if (strcmp(cmd, "list") == 0)
		rc = group_list(&s);
	else if (strcmp(cmd, "describe") == 0)
		rc = group_describe(&s, group);
	else
		rc = group_lag(&s, group);
	sluice_cli_close(&s.c);
	return rc;
}
