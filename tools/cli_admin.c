/* `sluice logger` and `sluice topic ...`: a broker's log levels and the
 * topics of a cluster, asked of the first bootstrap broker that takes a
 * connection, with the requests Apache Kafka's own tools send (so that the
 * same commands work against Kafka 4.x):
 * - logger: DescribeConfigs of the BROKER_LOGGER resource named by the
 *   broker's id (found in Metadata's broker list by the endpoint the tool is
 *   connected to, or given with --broker-id), IncrementalAlterConfigs v1
 *   SET or DELETE (the inherited level again);
 * - topic list/describe: Metadata (and DescribeConfigs for the overrides,
 *   as kafka-topics --describe prints them); create: CreateTopics; delete:
 *   DeleteTopics; alter-config: IncrementalAlterConfigs SET/DELETE.
 * A refusal is printed as Kafka's error name and the server's message on
 * stderr, exit 1; no server reachable: exit 3. */
#include "tools/cli.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/kafka/errors.h"


/* ---- asking ---------------------------------------------------------------------------- */

/* The first server of the list that takes a connection and answers
 * ApiVersions; else the exit status (3: none took a connection). */
int sluice_cli_session_open(struct sluice_cli_session *s)
{
	char err[SLUICE_CLI_ERR_MAX] = "";
	bool reached = false;
	for (int i = 0; i < s->o->server_n; i++) {
		int rc = sluice_cli_open(&s->c, &s->o->servers[i], s->o->timeout_ms, err, sizeof err);
		if (rc == 0)
			return 0;
		reached |= rc != -2;
	}
	fprintf(s->errout, "sluice: %s: %s\n", s->what, err);
	return reached ? SLUICE_CLI_EXIT_ERROR : SLUICE_CLI_EXIT_UNREACHABLE;
}

/* The version to write of an API, or -1 with a message. */
int16_t sluice_cli_session_pick(struct sluice_cli_session *s, int16_t key, int16_t ours_min, int16_t ours_max,
				const char *api)
{
	const struct sluice_cli_versions *vs = &s->c.versions;
	assert(key >= 0 && key < SLUICE_CLI_API_KEYS_MAX);
	int16_t v = sluice_cli_pick_version(vs->served[key], vs->min[key], vs->max[key], ours_min, ours_max);
	if (v < 0)
		fprintf(s->errout, "sluice: %s: %s:%d does not serve %s v%d-%d\n", s->what, s->c.peer.host,
			(int)s->c.peer.port, api, ours_min, ours_max);
	return v;
}

/* Sends w and returns the answer (free *resp); -1 with a message. */
int sluice_cli_session_call(struct sluice_cli_session *s, int16_t key, int16_t v, bool flex, struct kwr *w,
			    uint8_t **resp,
		const uint8_t **body, size_t *len)
{
	char err[SLUICE_CLI_ERR_MAX];
	int rc = w->err ? -1 : sluice_cli_call(&s->c, key, v, flex, w, resp, body, len, err, sizeof err);
	if (w->err)
		snprintf(err, sizeof err, "the request does not fit in %u bytes", SLUICE_CLI_REQUEST_MAX);
	kwr_free(w);
	if (rc < 0)
		fprintf(s->errout, "sluice: %s: %s\n", s->what, err);
	return rc;
}

/* A decoder's failure, with the server's name in front. */
int sluice_cli_session_malformed(struct sluice_cli_session *s, const char *why)
{
	fprintf(s->errout, "sluice: %s: %s:%d: %s\n", s->what, s->c.peer.host, (int)s->c.peer.port, why);
	return SLUICE_CLI_EXIT_ERROR;
}

/* A refusal: Kafka's error name and the server's message. */
int sluice_cli_session_refused(struct sluice_cli_session *s, int16_t error, const char *message)
{
	fprintf(s->errout, "sluice: %s: %s%s%s\n", s->what, sluice_kafka_error_name(error), message[0] ? ": " : "",
		message);
	return SLUICE_CLI_EXIT_ERROR;
}

/* Metadata of the named topics (n -1: all); 0 or the exit status. */
int sluice_cli_session_metadata(struct sluice_cli_session *s, const char *const *names, int32_t n,
				struct sluice_cli_metadata *m)
{
	int16_t v = sluice_cli_session_pick(s, SLUICE_CLI_API_METADATA, SLUICE_CLI_METADATA_MIN, SLUICE_CLI_METADATA_MAX,
					    "Metadata");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_metadata_topics(&w, v, names, n);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	bool flex = sluice_cli_metadata_flexible(v);
	if (sluice_cli_session_call(s, SLUICE_CLI_API_METADATA, v, flex, &w, &resp, &body, &len) < 0)
		return SLUICE_CLI_EXIT_ERROR;
	char why[SLUICE_CLI_WHY_MAX];
	int rc = sluice_cli_decode_metadata_full(body, len, v, m, why, sizeof why);
	free(resp);
	return rc < 0 ? sluice_cli_session_malformed(s, why) : 0;
}

/* DescribeConfigs of one resource (key NULL: all of its configs); a
 * refusal is reported here. 0 or the exit status. */
static int ask_configs(struct sluice_cli_session *s, int8_t type, const char *name, const char *key,
		       struct sluice_cli_configs *c)
{
	int16_t v = sluice_cli_session_pick(s, SLUICE_CLI_API_DESCRIBE_CONFIGS, SLUICE_CLI_DESCRIBE_CONFIGS_MIN,
					    SLUICE_CLI_DESCRIBE_CONFIGS_MAX, "DescribeConfigs");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_describe_configs(&w, v, type, name, key);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	bool flex = sluice_cli_describe_configs_flexible(v);
	if (sluice_cli_session_call(s, SLUICE_CLI_API_DESCRIBE_CONFIGS, v, flex, &w, &resp, &body, &len) < 0)
		return SLUICE_CLI_EXIT_ERROR;
	char why[SLUICE_CLI_WHY_MAX];
	int rc = sluice_cli_decode_describe_configs(body, len, v, c, why, sizeof why);
	free(resp);
	if (rc < 0)
		return sluice_cli_session_malformed(s, why);
	if (c->error != KERR_NONE) {
		sluice_cli_configs_free(c);
		return sluice_cli_session_refused(s, c->error, c->message);
	}
	return 0;
}

/* IncrementalAlterConfigs v1 of one resource; 0 or the exit status. */
static int alter_configs(struct sluice_cli_session *s, int8_t type, const char *name, const struct sluice_cli_alter *a,
			 int32_t n)
{
	const int16_t v = SLUICE_CLI_ALTER_CONFIGS_VERSION;
	if (sluice_cli_session_pick(s, SLUICE_CLI_API_INCREMENTAL_ALTER_CONFIGS, v, v, "IncrementalAlterConfigs") < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_alter_configs(&w, type, name, a, n);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	if (sluice_cli_session_call(s, SLUICE_CLI_API_INCREMENTAL_ALTER_CONFIGS, v, true, &w, &resp, &body, &len) < 0)
		return SLUICE_CLI_EXIT_ERROR;
	char why[SLUICE_CLI_WHY_MAX];
	struct sluice_cli_result r;
	int rc = sluice_cli_decode_alter_configs(body, len, &r, why, sizeof why);
	free(resp);
	if (rc < 0)
		return sluice_cli_session_malformed(s, why);
	return r.error != KERR_NONE ? sluice_cli_session_refused(s, r.error, r.message) : 0;
}

int sluice_cli_session_finish(struct sluice_cli_session *s)
{
	if (fflush(s->out) == 0 && !ferror(s->out))
		return SLUICE_CLI_EXIT_OK;
	fprintf(s->errout, "sluice: %s: cannot write the output\n", s->what);
	return SLUICE_CLI_EXIT_ERROR;
}

/* ---- logger ---------------------------------------------------------------------------- */

/* The id of the broker the tool is connected to: --broker-id, else the
 * broker of Metadata's list with the endpoint connected to (by host and
 * port, else by port alone when one broker has it), else the only one. */
static int logger_broker_id(struct sluice_cli_session *s, int32_t *id)
{
	if (s->o->broker_id >= 0) {
		*id = s->o->broker_id;
		return 0;
	}
	struct sluice_cli_metadata m;
	int rc = sluice_cli_session_metadata(s, NULL, 0, &m);
	if (rc)
		return rc;
	int32_t exact = -1, by_port = -1, ports = 0;
	for (int32_t i = 0; i < m.broker_n; i++) {
		const struct sluice_cli_md_broker *b = &m.brokers[i];
		if (b->endpoint.port != s->c.peer.port)
			continue;
		ports++;
		by_port = b->id;
		if (strcmp(b->endpoint.host, s->c.peer.host) == 0)
			exact = b->id;
	}
	*id = exact >= 0 ? exact : ports == 1 ? by_port : m.broker_n == 1 ? m.brokers[0].id : -1;
	sluice_cli_metadata_free(&m);
	if (*id >= 0)
		return 0;
	fprintf(s->errout, "sluice: %s: cannot tell which broker %s:%d is from its Metadata; give --broker-id\n",
		s->what,
		s->c.peer.host, (int)s->c.peer.port);
	return SLUICE_CLI_EXIT_ERROR;
}

static void logger_print(struct sluice_cli_session *s, int32_t id, const struct sluice_cli_configs *c)
{
	if (s->o->json) {
		fprintf(s->out, "{\"broker_id\":%d,\"loggers\":[", id);
		for (int32_t i = 0; i < c->config_n; i++) {
			fputs(i ? ",{\"name\":" : "{\"name\":", s->out);
			sluice_cli_json_string(s->out, c->configs[i].name);
			fputs(",\"level\":", s->out);
			if (c->configs[i].value)
				sluice_cli_json_string(s->out, c->configs[i].value);
			else
				fputs("null", s->out);
			fputc('}', s->out);
		}
		fputs("]}\n", s->out);
		return;
	}
	fprintf(s->out, "%-40s %s\n", "LOGGER", "LEVEL");
	for (int32_t i = 0; i < c->config_n; i++)
		fprintf(s->out, "%-40s %s\n", c->configs[i].name, c->configs[i].value ? c->configs[i].value : "-");
}

/* Lists the loggers (name NULL: all), once set or deleted if asked. */
static int logger_run(struct sluice_cli_session *s)
{
	const struct sluice_cli_options *o = s->o;
	const char *name = o->word_n > 1 ? o->words[1] : NULL, *level = o->word_n > 2 ? o->words[2] : NULL;
	int32_t id;
	int rc = logger_broker_id(s, &id);
	if (rc)
		return rc;
	char resource[16];
	snprintf(resource, sizeof resource, "%d", (int)id);
	if (level || o->delete_flag) {
		struct sluice_cli_alter a = {name, level, o->delete_flag ? SLUICE_CLI_OP_DELETE : SLUICE_CLI_OP_SET};
		if ((rc = alter_configs(s, SLUICE_CLI_RESOURCE_BROKER_LOGGER, resource, &a, 1)))
			return rc;
	}
	struct sluice_cli_configs c;
	if ((rc = ask_configs(s, SLUICE_CLI_RESOURCE_BROKER_LOGGER, resource, name, &c)))
		return rc;
	if (name && c.config_n == 0) {
		sluice_cli_configs_free(&c);
		fprintf(s->errout, "sluice: %s: broker %d has no logger %s\n", s->what, (int)id, name);
		return SLUICE_CLI_EXIT_ERROR;
	}
	logger_print(s, id, &c);
	sluice_cli_configs_free(&c);
	return sluice_cli_session_finish(s);
}

int sluice_cli_logger(const struct sluice_cli_options *o, FILE *out, FILE *errout)
{
	assert(o->word_n >= 1 && o->word_n <= 3);
	struct sluice_cli_session s = {.o = o, .out = out, .errout = errout, .what = "logger"};
	int rc = sluice_cli_session_open(&s);
	if (rc)
		return rc;
	rc = logger_run(&s);
	sluice_cli_close(&s.c);
	return rc;
}

/* ---- topic list / describe ----------------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int topic_list(struct sluice_cli_session *s)
{
	struct sluice_cli_metadata m;
	int rc = sluice_cli_session_metadata(s, NULL, -1, &m);
	if (rc)
		return rc;
	const char **names = calloc((size_t)m.topic_n + 1, sizeof *names);
	if (!names) {
		sluice_cli_metadata_free(&m);
		fprintf(s->errout, "sluice: %s: out of memory\n", s->what);
		return SLUICE_CLI_EXIT_ERROR;
	}
	for (int32_t i = 0; i < m.topic_n; i++)
		names[i] = m.topics[i].name;
	qsort(names, (size_t)m.topic_n, sizeof *names, by_name);
	if (s->o->json)
		fputs("{\"topics\":[", s->out);
	for (int32_t i = 0; i < m.topic_n; i++) {
		if (s->o->json) {
			fputs(i ? "," : "", s->out);
			sluice_cli_json_string(s->out, names[i]);
		} else {
			fprintf(s->out, "%s\n", names[i]);
		}
	}
	if (s->o->json)
		fputs("]}\n", s->out);
	free(names);
	sluice_cli_metadata_free(&m);
	return sluice_cli_session_finish(s);
}

/* "1,2,3" (Kafka's way) or a JSON array of ids. */
static void print_ids(FILE *out, const int32_t *ids, int32_t n, bool json)
{
	fputs(json ? "[" : "", out);
	for (int32_t i = 0; i < n; i++)
		fprintf(out, "%s%d", i ? "," : "", ids[i]);
	fputs(json ? "]" : "", out);
}

/* Overrides as kafka-topics --describe prints them: every config whose
 * source is not the default, "k=v,k=v". */
static void print_overrides(FILE *out, const struct sluice_cli_configs *c, bool json)
{
	bool first = true;
	for (int32_t i = 0; i < c->config_n; i++) {
		const struct sluice_cli_config *e = &c->configs[i];
		if (e->source == SLUICE_CLI_SOURCE_DEFAULT)
			continue;
		if (json) {
			fputs(first ? "" : ",", out);
			sluice_cli_json_string(out, e->name);
			fputc(':', out);
			if (e->value)
				sluice_cli_json_string(out, e->value);
			else
				fputs("null", out);
		} else {
			fprintf(out, "%s%s=%s", first ? "" : ",", e->name, e->value ? e->value : "null");
		}
		first = false;
	}
}

static void describe_json(struct sluice_cli_session *s, const struct sluice_cli_metadata *m,
			  const struct sluice_cli_md_topic *t,
			  const struct sluice_cli_configs *c, const char *id, int32_t rf)
{
	FILE *out = s->out;
	fputs("{\"topic\":", out);
	sluice_cli_json_string(out, t->name);
	fprintf(out, ",\"topic_id\":\"%s\",\"internal\":%s,\"partition_count\":%d,\"replication_factor\":%d,\"configs\":{",
		id, t->internal ? "true" : "false", t->partition_n, rf);
	print_overrides(out, c, true);
	fputs("},\"partitions\":[", out);
	for (int32_t i = 0; i < t->partition_n; i++) {
		const struct sluice_cli_md_partition *p = &m->partitions[t->partition_at + i];
		fprintf(out, "%s{\"partition\":%d,\"leader\":%d,\"replicas\":", i ? "," : "", p->index, p->leader);
		print_ids(out, m->ids + p->replica_at, p->replica_n, true);
		fputs(",\"isr\":", out);
		print_ids(out, m->ids + p->isr_at, p->isr_n, true);
		fputs(",\"offline_replicas\":", out);
		print_ids(out, m->ids + p->offline_at, p->offline_n, true);
		fputc('}', out);
	}
	fputs("]}\n", out);
}

/* As Kafka 4.x's kafka-topics --describe prints it (without the ELR columns). */
static void describe_text(struct sluice_cli_session *s, const struct sluice_cli_metadata *m,
			  const struct sluice_cli_md_topic *t,
			  const struct sluice_cli_configs *c, const char *id, int32_t rf)
{
	FILE *out = s->out;
	fprintf(out, "Topic: %s\tTopicId: %s\tPartitionCount: %d\tReplicationFactor: %d\tConfigs: ", t->name, id,
		t->partition_n, rf);
	print_overrides(out, c, false);
	fputc('\n', out);
	for (int32_t i = 0; i < t->partition_n; i++) {
		const struct sluice_cli_md_partition *p = &m->partitions[t->partition_at + i];
		fprintf(out, "\tTopic: %s\tPartition: %d\tLeader: ", t->name, p->index);
		if (p->leader >= 0)
			fprintf(out, "%d", p->leader);
		else
			fputs("none", out);
		fputs("\tReplicas: ", out);
		print_ids(out, m->ids + p->replica_at, p->replica_n, false);
		fputs("\tIsr: ", out);
		print_ids(out, m->ids + p->isr_at, p->isr_n, false);
		if (p->offline_n > 0) {
			fputs("\tOffline: ", out);
			print_ids(out, m->ids + p->offline_at, p->offline_n, false);
		}
		fputc('\n', out);
	}
}

static int by_partition(const void *a, const void *b)
{
	int32_t x = ((const struct sluice_cli_md_partition *)a)->index;
	int32_t y = ((const struct sluice_cli_md_partition *)b)->index;
	return (x > y) - (x < y);
}

static int topic_describe(struct sluice_cli_session *s, const char *topic)
{
	struct sluice_cli_metadata m;
	int rc = sluice_cli_session_metadata(s, &topic, 1, &m);
	if (rc)
		return rc;
	bool found = m.topic_n == 1 && strcmp(m.topics[0].name, topic) == 0;
	const struct sluice_cli_md_topic *t = found ? &m.topics[0] : NULL;
	struct sluice_cli_configs c = {0};
	if (!t)
		rc = sluice_cli_session_malformed(s, "Metadata did not answer for the topic asked about");
	else if (t->error != KERR_NONE)
		rc = sluice_cli_session_refused(s, t->error,
						t->error == KERR_UNKNOWN_TOPIC_OR_PARTITION ? "the topic does not exist" : "");
	else
		rc = ask_configs(s, SLUICE_CLI_RESOURCE_TOPIC, topic, NULL, &c);
	if (rc == 0) {
		qsort(m.partitions + t->partition_at, (size_t)t->partition_n, sizeof *m.partitions, by_partition);
		char id[23];
		sluice_cli_topic_id_text(t->id, id);
		int32_t rf = t->partition_n > 0 ? m.partitions[t->partition_at].replica_n : 0; /* as Kafka counts it */
		if (s->o->json)
			describe_json(s, &m, t, &c, id, rf);
		else
			describe_text(s, &m, t, &c, id, rf);
		rc = sluice_cli_session_finish(s);
	}
	sluice_cli_configs_free(&c);
	sluice_cli_metadata_free(&m);
	return rc;
}

/* ---- topic create / delete / alter-config ----------------------------------------------------- */

static int topic_create(struct sluice_cli_session *s, const char *topic)
{
	const struct sluice_cli_options *o = s->o;
	int16_t v = sluice_cli_session_pick(s, SLUICE_CLI_API_CREATE_TOPICS, SLUICE_CLI_CREATE_TOPICS_MIN,
					    SLUICE_CLI_CREATE_TOPICS_MAX,
			 "CreateTopics");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	const char *kv[2 * SLUICE_CLI_CONFIG_ARGS_MAX];
	char keys[SLUICE_CLI_CONFIG_ARGS_MAX][SLUICE_CLI_TOPIC_NAME_MAX];
	for (int i = 0; i < o->config_n; i++) {
		const char *eq = strchr(o->configs[i], '='); /* checked by the argument parser */
		assert(eq && (size_t)(eq - o->configs[i]) < sizeof keys[i]);
		snprintf(keys[i], sizeof keys[i], "%.*s", (int)(eq - o->configs[i]), o->configs[i]);
		kv[2 * i] = keys[i];
		kv[2 * i + 1] = eq + 1;
	}
	struct kwr w;
	kwr_init(&w, 128, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_create_topic(&w, v, topic, o->partitions, o->replication_factor, kv, o->config_n,
				       o->timeout_ms);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	if (sluice_cli_session_call(s, SLUICE_CLI_API_CREATE_TOPICS, v, true, &w, &resp, &body, &len) < 0)
		return SLUICE_CLI_EXIT_ERROR;
	char why[SLUICE_CLI_WHY_MAX];
	struct sluice_cli_result r;
	int rc = sluice_cli_decode_create_topics(body, len, v, &r, why, sizeof why);
	free(resp);
	if (rc < 0)
		return sluice_cli_session_malformed(s, why);
	if (r.error != KERR_NONE)
		return sluice_cli_session_refused(s, r.error, r.message);
	char id[23];
	sluice_cli_topic_id_text(r.topic_id, id);
	if (o->json) {
		fputs("{\"topic\":", s->out);
		sluice_cli_json_string(s->out, topic);
		fprintf(s->out, ",\"topic_id\":");
		fprintf(s->out, v >= 7 ? "\"%s\"" : "null", id);
		fprintf(s->out, ",\"partitions\":%d,\"replication_factor\":%d}\n", r.partitions, r.replication_factor);
	} else {
		fprintf(s->out, "Created topic %s.\n", topic);
	}
	return sluice_cli_session_finish(s);
}

static int topic_delete(struct sluice_cli_session *s, const char *topic)
{
	int16_t v = sluice_cli_session_pick(s, SLUICE_CLI_API_DELETE_TOPICS, SLUICE_CLI_DELETE_TOPICS_MIN,
					    SLUICE_CLI_DELETE_TOPICS_MAX,
			 "DeleteTopics");
	if (v < 0)
		return SLUICE_CLI_EXIT_ERROR;
	struct kwr w;
	kwr_init(&w, 64, SLUICE_CLI_REQUEST_MAX);
	sluice_cli_encode_delete_topic(&w, v, topic, s->o->timeout_ms);
	uint8_t *resp;
	const uint8_t *body;
	size_t len;
	if (sluice_cli_session_call(s, SLUICE_CLI_API_DELETE_TOPICS, v, true, &w, &resp, &body, &len) < 0)
		return SLUICE_CLI_EXIT_ERROR;
	char why[SLUICE_CLI_WHY_MAX];
	struct sluice_cli_result r;
	int rc = sluice_cli_decode_delete_topics(body, len, v, &r, why, sizeof why);
	free(resp);
	if (rc < 0)
		return sluice_cli_session_malformed(s, why);
	if (r.error != KERR_NONE)
		return sluice_cli_session_refused(s, r.error, r.message);
	if (s->o->json) {
		fputs("{\"topic\":", s->out);
		sluice_cli_json_string(s->out, topic);
		fputs(",\"deleted\":true}\n", s->out);
	} else {
		fprintf(s->out, "Deleted topic %s.\n", topic);
	}
	return sluice_cli_session_finish(s);
}

static int topic_alter_config(struct sluice_cli_session *s, const char *topic)
{
	const struct sluice_cli_options *o = s->o;
	int rc = alter_configs(s, SLUICE_CLI_RESOURCE_TOPIC, topic, o->alters, o->alter_n);
	if (rc)
		return rc;
	if (!o->json) {
		fprintf(s->out, "Updated the configs of topic %s.\n", topic);
		return sluice_cli_session_finish(s);
	}
	fputs("{\"topic\":", s->out);
	sluice_cli_json_string(s->out, topic);
	fputs(",\"set\":{", s->out);
	bool first = true;
	for (int i = 0; i < o->alter_n; i++)
		if (o->alters[i].op == SLUICE_CLI_OP_SET) {
			fputs(first ? "" : ",", s->out);
			sluice_cli_json_string(s->out, o->alters[i].key);
			fputc(':', s->out);
			sluice_cli_json_string(s->out, o->alters[i].value);
			first = false;
		}
	fputs("},\"deleted\":[", s->out);
	first = true;
	for (int i = 0; i < o->alter_n; i++)
		if (o->alters[i].op == SLUICE_CLI_OP_DELETE) {
			fputs(first ? "" : ",", s->out);
			sluice_cli_json_string(s->out, o->alters[i].key);
			first = false;
		}
	fputs("]}\n", s->out);
	return sluice_cli_session_finish(s);
}

int sluice_cli_topic(const struct sluice_cli_options *o, FILE *out, FILE *errout)
{
	assert(o->word_n >= 2);
	const char *cmd = o->words[1], *topic = o->word_n > 2 ? o->words[2] : NULL;
	char what[64];
	snprintf(what, sizeof what, "topic %s", cmd);
	struct sluice_cli_session s = {.o = o, .out = out, .errout = errout, .what = what};
	int rc = sluice_cli_session_open(&s);
	if (rc)
		return rc;
	if (strcmp(cmd, "list") == 0)
		rc = topic_list(&s);
	else if (strcmp(cmd, "describe") == 0)
		rc = topic_describe(&s, topic);
	else if (strcmp(cmd, "create") == 0)
		rc = topic_create(&s, topic);
	else if (strcmp(cmd, "delete") == 0)
		rc = topic_delete(&s, topic);
	else
		rc = topic_alter_config(&s, topic);
	sluice_cli_close(&s.c);
	return rc;
}
