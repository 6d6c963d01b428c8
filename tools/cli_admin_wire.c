/* The admin requests of `sluice logger` and `sluice topic` and the decoders
 * of their answers: Metadata v1-12 kept whole (brokers, topics, partitions
 * with their replica lists), DescribeConfigs v1-4, IncrementalAlterConfigs
 * v1, CreateTopics v5-7 and DeleteTopics v4-6. Pure functions over bytes,
 * as in cli_wire.c, so that the unit tests can feed them every cut: every
 * length and count is checked against the bytes left before it is used
 * (common/kafka/codec.h caps a count by the bytes left over the smallest
 * element), so every allocation here is bounded by the answer's size, and
 * a failure names the API, version and byte offset. */
#include "tools/cli.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ---- shared helpers ------------------------------------------------------------------ */

/* A server's message for display: cut to the buffer, NULs and control bytes as '?'. */
static void copy_message(struct kstr s, char *out, size_t cap)
{
	assert(cap > 0);
	size_t n = s.ptr ? (size_t)s.len : 0;
	if (n >= cap)
		n = cap - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = (unsigned char)s.ptr[i] < 0x20 ? '?' : s.ptr[i];
	out[n] = '\0';
}

/* A non-null name without NULs that fits the buffer. */
static bool copy_name(struct krd *rd, struct kstr s, char *out, size_t cap, const char *what)
{
	if (rd->err)
		return false;
	if (!s.ptr || (size_t)s.len >= cap || memchr(s.ptr, '\0', (size_t)s.len))
		return krd_fail(rd, what);
	memcpy(out, s.ptr, (size_t)s.len);
	out[s.len] = '\0';
	return true;
}

/* A malloc'd copy (NULL for a null string); NULs inside are refused. */
static char *dup_string(struct krd *rd, struct kstr s, bool nullable, const char *what)
{
	if (rd->err)
		return NULL;
	if (!s.ptr) {
		if (!nullable)
			krd_fail(rd, what);
		return NULL;
	}
	if (memchr(s.ptr, '\0', (size_t)s.len)) {
		krd_fail(rd, what);
		return NULL;
	}
	char *p = malloc((size_t)s.len + 1);
	if (!p) {
		krd_fail(rd, "out of memory");
		return NULL;
	}
	memcpy(p, s.ptr, (size_t)s.len);
	p[s.len] = '\0';
	return p;
}

/* Grows *arr (of elem bytes) to hold need elements; need is bounded by
 * the answer's size, since every count was checked against it. */
static bool grow(struct krd *rd, void **arr, int32_t *cap, int32_t need, size_t elem)
{
	if (need <= *cap)
		return true;
	int32_t n = *cap ? *cap : 16;
	while (n < need)
		n = n > INT32_MAX / 2 ? need : n * 2;
	void *p = realloc(*arr, (size_t)n * elem);
	if (!p)
		return krd_fail(rd, "out of memory");
	*arr = p;
	*cap = n;
	return true;
}

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void sluice_cli_topic_id_text(const uint8_t id[16], char out[23])
{
	int o = 0;
	for (int i = 0; i < 16; i += 3) {
		uint32_t v = (uint32_t)id[i] << 16 | (i + 1 < 16 ? (uint32_t)id[i + 1] << 8 : 0) |
			     (i + 2 < 16 ? id[i + 2] : 0);
		int chars = i + 2 < 16 ? 4 : i + 1 < 16 ? 3 : 2;
		for (int k = 0; k < chars; k++)
			out[o++] = b64url[(v >> (18 - 6 * k)) & 63];
	}
	assert(o == 22);
	out[o] = '\0';
}

/* ---- Metadata v1-12, whole ------------------------------------------------------------- */

void sluice_cli_encode_metadata_topics(struct kwr *w, int16_t v, const char *const *names, int32_t n)
{
	assert(v >= SLUICE_CLI_METADATA_MIN && v <= SLUICE_CLI_METADATA_MAX && n >= -1);
	bool flex = sluice_cli_metadata_flexible(v);
	static const uint8_t zero_id[16];
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		if (v >= 10)
			kwr_uuid(w, zero_id);
		kwr_cstr(w, flex, names[i]);
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 4)
		kwr_bool(w, false); /* AllowAutoTopicCreation */
	if (v >= 8 && v <= 10)
		kwr_bool(w, false); /* IncludeClusterAuthorizedOperations */
	if (v >= 8)
		kwr_bool(w, false); /* IncludeTopicAuthorizedOperations */
	if (flex)
		kwr_tags_empty(w);
}

struct md_caps {
	int32_t topics, partitions, ids;
};

/* An int32 array appended to the ids pool: its start and count. */
static void md_ids(struct krd *rd, bool flex, struct sluice_cli_metadata *m, struct md_caps *caps, int32_t *at,
		   int32_t *n)
{
	int32_t k = krd_array(rd, flex, 4);
	*at = m->id_n;
	*n = 0;
	if (k <= 0 || !grow(rd, (void **)&m->ids, &caps->ids, m->id_n + k, sizeof *m->ids))
		return;
	for (int32_t i = 0; i < k && !rd->err; i++)
		m->ids[m->id_n++] = krd_i32(rd);
	*n = rd->err ? 0 : k;
}

static void md_partition(struct krd *rd, int16_t v, bool flex, struct sluice_cli_metadata *m, struct md_caps *caps)
{
	if (!grow(rd, (void **)&m->partitions, &caps->partitions, m->partition_n + 1, sizeof *m->partitions))
		return;
	struct sluice_cli_md_partition *p = &m->partitions[m->partition_n];
	memset(p, 0, sizeof *p);
	p->error = krd_i16(rd);
	p->index = krd_i32(rd);
	p->leader = krd_i32(rd);
	if (v >= 7)
		(void)krd_i32(rd); /* LeaderEpoch */
	md_ids(rd, flex, m, caps, &p->replica_at, &p->replica_n);
	md_ids(rd, flex, m, caps, &p->isr_at, &p->isr_n);
	if (v >= 5)
		md_ids(rd, flex, m, caps, &p->offline_at, &p->offline_n);
	else
		p->offline_at = m->id_n;
	if (flex)
		krd_tags_skip(rd);
	if (!rd->err)
		m->partition_n++;
}

static void md_topic(struct krd *rd, int16_t v, bool flex, struct sluice_cli_metadata *m, struct md_caps *caps)
{
	struct sluice_cli_md_topic *t = &m->topics[m->topic_n];
	memset(t, 0, sizeof *t);
	t->error = krd_i16(rd);
	struct kstr name = krd_string(rd, flex);
	if (v >= 10)
		krd_uuid(rd, t->id);
	t->internal = krd_bool(rd);
	if (!rd->err && name.ptr && !copy_name(rd, name, t->name, sizeof t->name, "topic name"))
		return;
	size_t part_min = 2 + 4 + 4 + (v >= 7 ? 4 : 0) + (flex ? 1 : 4) * (v >= 5 ? 3 : 2) + (flex ? 1 : 0);
	int32_t n = krd_array(rd, flex, part_min);
	t->partition_at = m->partition_n;
	for (int32_t i = 0; i < n && !rd->err; i++)
		md_partition(rd, v, flex, m, caps);
	t->partition_n = m->partition_n - t->partition_at;
	if (v >= 8)
		(void)krd_i32(rd); /* TopicAuthorizedOperations */
	if (flex)
		krd_tags_skip(rd);
	if (!rd->err)
		m->topic_n++;
}

static void md_brokers(struct krd *rd, bool flex, struct sluice_cli_metadata *m)
{
	int32_t n = krd_array(rd, flex, flex ? 11 : 12);
	if (n <= 0)
		return;
	m->brokers = calloc((size_t)n, sizeof *m->brokers);
	if (!m->brokers) {
		krd_fail(rd, "out of memory");
		return;
	}
	for (int32_t i = 0; i < n && !rd->err; i++) {
		struct sluice_cli_md_broker *b = &m->brokers[i];
		b->id = krd_i32(rd);
		struct kstr host = krd_string(rd, flex);
		b->endpoint.port = krd_i32(rd);
		(void)krd_string(rd, flex); /* Rack */
		if (flex)
			krd_tags_skip(rd);
		if (copy_name(rd, host, b->endpoint.host, sizeof b->endpoint.host, "broker host"))
			m->broker_n++;
	}
}

int sluice_cli_decode_metadata_full(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_metadata *out,
				    char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_METADATA_MIN && v <= SLUICE_CLI_METADATA_MAX);
	bool flex = sluice_cli_metadata_flexible(v);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	struct md_caps caps = {0, 0, 0};
	if (v >= 3)
		(void)krd_i32(&rd); /* ThrottleTimeMs */
	md_brokers(&rd, flex, out);
	if (v >= 2)
		(void)krd_string(&rd, flex); /* ClusterId */
	out->controller_id = krd_i32(&rd);
	size_t topic_min = 2 + (flex ? 1 : 2) + (v >= 10 ? 16 : 0) + 1 + (flex ? 1 : 4) + (v >= 8 ? 4 : 0) + (flex ? 1 : 0);
	int32_t n = krd_array(&rd, flex, topic_min);
	if (n > 0 && !(out->topics = calloc((size_t)n, sizeof *out->topics)))
		krd_fail(&rd, "out of memory");
	for (int32_t i = 0; i < n && !rd.err; i++)
		md_topic(&rd, v, flex, out, &caps);
	if (v >= 8 && v <= 10)
		(void)krd_i32(&rd); /* ClusterAuthorizedOperations */
	if (flex)
		krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "Metadata", v, err, errlen) < 0) {
		sluice_cli_metadata_free(out);
		return -1;
	}
	return 0;
}

void sluice_cli_metadata_free(struct sluice_cli_metadata *m)
{
	free(m->brokers);
	free(m->topics);
	free(m->partitions);
	free(m->ids);
	memset(m, 0, sizeof *m);
}

/* ---- DescribeConfigs v1-4 --------------------------------------------------------------- */

bool sluice_cli_describe_configs_flexible(int16_t v) { return v >= SLUICE_CLI_DESCRIBE_CONFIGS_FLEX_MIN; }

void sluice_cli_encode_describe_configs(struct kwr *w, int16_t v, int8_t type, const char *name, const char *key)
{
	assert(v >= SLUICE_CLI_DESCRIBE_CONFIGS_MIN && v <= SLUICE_CLI_DESCRIBE_CONFIGS_MAX && name);
	bool flex = sluice_cli_describe_configs_flexible(v);
	kwr_array(w, flex, 1);
	kwr_i8(w, type);
	kwr_cstr(w, flex, name);
	kwr_array(w, flex, key ? 1 : -1); /* ConfigurationKeys: null, all of them */
	if (key)
		kwr_cstr(w, flex, key);
	if (flex)
		kwr_tags_empty(w);
	kwr_bool(w, false); /* IncludeSynonyms */
	if (v >= 3)
		kwr_bool(w, false); /* IncludeDocumentation */
	if (flex)
		kwr_tags_empty(w);
}

static void dc_config(struct krd *rd, int16_t v, bool flex, struct sluice_cli_configs *out)
{
	struct sluice_cli_config *c = &out->configs[out->config_n];
	memset(c, 0, sizeof *c);
	struct kstr name = krd_string(rd, flex), value = krd_string(rd, flex);
	c->read_only = krd_bool(rd);
	c->source = krd_i8(rd);
	c->sensitive = krd_bool(rd);
	int32_t sn = krd_array(rd, flex, flex ? 4 : 5); /* Synonyms, skipped */
	for (int32_t i = 0; i < sn && !rd->err; i++) {
		(void)krd_string(rd, flex);
		(void)krd_string(rd, flex);
		(void)krd_i8(rd);
		if (flex)
			krd_tags_skip(rd);
	}
	if (v >= 3) {
		(void)krd_i8(rd);           /* ConfigType */
		(void)krd_string(rd, flex); /* Documentation */
	}
	if (flex)
		krd_tags_skip(rd);
	c->name = dup_string(rd, name, false, "config name");
	c->value = dup_string(rd, value, true, "config value");
	if (rd->err) {
		free(c->name);
		free(c->value);
		return;
	}
	out->config_n++;
}

int sluice_cli_decode_describe_configs(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_configs *out,
				       char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_DESCRIBE_CONFIGS_MIN && v <= SLUICE_CLI_DESCRIBE_CONFIGS_MAX);
	bool flex = sluice_cli_describe_configs_flexible(v);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t rn = krd_array(&rd, flex, 2 + 1 + 1 + 1 + 1 + (flex ? 1 : 0));
	if (!rd.err && rn != 1)
		return cli_wire_fail(&rd, "DescribeConfigs", v, "not one resource in the answer", err, errlen);
	out->error = krd_i16(&rd);
	copy_message(krd_string(&rd, flex), out->message, sizeof out->message);
	(void)krd_i8(&rd);           /* ResourceType */
	(void)krd_string(&rd, flex); /* ResourceName */
	size_t config_min = (flex ? 1 : 2) * 2 + 3 + (flex ? 1 : 4) + (v >= 3 ? 1 + (flex ? 1 : 2) : 0) + (flex ? 1 : 0);
	int32_t n = krd_array(&rd, flex, config_min);
	if (n > 0 && !(out->configs = calloc((size_t)n, sizeof *out->configs)))
		krd_fail(&rd, "out of memory");
	for (int32_t i = 0; i < n && !rd.err; i++)
		dc_config(&rd, v, flex, out);
	if (flex) {
		krd_tags_skip(&rd); /* the resource's */
		krd_tags_skip(&rd);
	}
	if (cli_wire_finish(&rd, "DescribeConfigs", v, err, errlen) < 0) {
		sluice_cli_configs_free(out);
		return -1;
	}
	return 0;
}

void sluice_cli_configs_free(struct sluice_cli_configs *c)
{
	for (int32_t i = 0; i < c->config_n; i++) {
		free(c->configs[i].name);
		free(c->configs[i].value);
	}
	free(c->configs);
	c->configs = NULL;
	c->config_n = 0;
}

/* ---- IncrementalAlterConfigs v1 -------------------------------------------------------- */

void sluice_cli_encode_alter_configs(struct kwr *w, int8_t type, const char *name, const struct sluice_cli_alter *a,
				     int32_t n)
{
	assert(name && n >= 0);
	kwr_array(w, true, 1);
	kwr_i8(w, type);
	kwr_cstr(w, true, name);
	kwr_array(w, true, n);
	for (int32_t i = 0; i < n; i++) {
		assert(a[i].op == SLUICE_CLI_OP_SET || a[i].op == SLUICE_CLI_OP_DELETE);
		kwr_cstr(w, true, a[i].key);
		kwr_i8(w, a[i].op);
		kwr_cstr(w, true, a[i].op == SLUICE_CLI_OP_SET ? a[i].value : NULL);
		kwr_tags_empty(w);
	}
	kwr_tags_empty(w);
	kwr_bool(w, false); /* ValidateOnly */
	kwr_tags_empty(w);
}

static void result_init(struct sluice_cli_result *out)
{
	memset(out, 0, sizeof *out);
	out->partitions = -1;
	out->replication_factor = -1;
}

int sluice_cli_decode_alter_configs(const uint8_t *body, size_t len, struct sluice_cli_result *out, char *err,
				    size_t errlen)
{
	const int16_t v = SLUICE_CLI_ALTER_CONFIGS_VERSION;
	struct krd rd;
	krd_init(&rd, body, len);
	result_init(out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t n = krd_array(&rd, true, 2 + 1 + 1 + 1 + 1);
	if (!rd.err && n != 1)
		return cli_wire_fail(&rd, "IncrementalAlterConfigs", v, "not one resource in the answer", err, errlen);
	out->error = krd_i16(&rd);
	copy_message(krd_string(&rd, true), out->message, sizeof out->message);
	(void)krd_i8(&rd);           /* ResourceType */
	(void)krd_string(&rd, true); /* ResourceName */
	krd_tags_skip(&rd);
	krd_tags_skip(&rd);
	return cli_wire_finish(&rd, "IncrementalAlterConfigs", v, err, errlen);
}

/* ---- CreateTopics v5-7 ----------------------------------------------------------------- */

void sluice_cli_encode_create_topic(struct kwr *w, int16_t v, const char *name, int32_t partitions,
				    int16_t replication_factor, const char *const *configs, int32_t config_n,
				    int32_t timeout_ms)
{
	assert(v >= SLUICE_CLI_CREATE_TOPICS_MIN && v <= SLUICE_CLI_CREATE_TOPICS_MAX && config_n >= 0);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, name);
	kwr_i32(w, partitions);
	kwr_i16(w, replication_factor);
	kwr_array(w, true, 0); /* Assignments */
	kwr_array(w, true, config_n);
	for (int32_t i = 0; i < config_n; i++) {
		kwr_cstr(w, true, configs[2 * i]);
		kwr_cstr(w, true, configs[2 * i + 1]);
		kwr_tags_empty(w);
	}
	kwr_tags_empty(w);
	kwr_i32(w, timeout_ms);
	kwr_bool(w, false); /* ValidateOnly */
	kwr_tags_empty(w);
}

int sluice_cli_decode_create_topics(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_result *out,
				    char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_CREATE_TOPICS_MIN && v <= SLUICE_CLI_CREATE_TOPICS_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	result_init(out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t n = krd_array(&rd, true, 1 + (v >= 7 ? 16 : 0) + 2 + 1 + 4 + 2 + 1 + 1);
	if (!rd.err && n != 1)
		return cli_wire_fail(&rd, "CreateTopics", v, "not one topic in the answer", err, errlen);
	(void)krd_string(&rd, true); /* Name */
	if (v >= 7)
		krd_uuid(&rd, out->topic_id);
	out->error = krd_i16(&rd);
	copy_message(krd_string(&rd, true), out->message, sizeof out->message);
	out->partitions = krd_i32(&rd);
	out->replication_factor = krd_i16(&rd);
	int32_t cn = krd_array(&rd, true, 1 + 1 + 3 + 1 + 1); /* Configs (nullable), skipped */
	for (int32_t i = 0; i < cn && !rd.err; i++) {
		(void)krd_string(&rd, true);
		(void)krd_string(&rd, true);
		krd_skip(&rd, 3); /* ReadOnly, ConfigSource, IsSensitive */
		krd_tags_skip(&rd);
	}
	krd_tags_skip(&rd); /* the topic's (TopicConfigErrorCode is tagged) */
	krd_tags_skip(&rd);
	return cli_wire_finish(&rd, "CreateTopics", v, err, errlen);
}

/* ---- DeleteTopics v4-6 ----------------------------------------------------------------- */

void sluice_cli_encode_delete_topic(struct kwr *w, int16_t v, const char *name, int32_t timeout_ms)
{
	assert(v >= SLUICE_CLI_DELETE_TOPICS_MIN && v <= SLUICE_CLI_DELETE_TOPICS_MAX && name);
	static const uint8_t zero_id[16];
	kwr_array(w, true, 1);
	kwr_cstr(w, true, name);
	if (v >= 6) {
		kwr_uuid(w, zero_id);
		kwr_tags_empty(w);
	}
	kwr_i32(w, timeout_ms);
	kwr_tags_empty(w);
}

int sluice_cli_decode_delete_topics(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_result *out,
				    char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_DELETE_TOPICS_MIN && v <= SLUICE_CLI_DELETE_TOPICS_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	result_init(out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t n = krd_array(&rd, true, 1 + (v >= 6 ? 16 : 0) + 2 + (v >= 5 ? 1 : 0) + 1);
	if (!rd.err && n != 1)
		return cli_wire_fail(&rd, "DeleteTopics", v, "not one topic in the answer", err, errlen);
	(void)krd_string(&rd, true); /* Name */
	if (v >= 6)
		krd_uuid(&rd, out->topic_id);
	out->error = krd_i16(&rd);
	if (v >= 5)
		copy_message(krd_string(&rd, true), out->message, sizeof out->message);
	krd_tags_skip(&rd);
	krd_tags_skip(&rd);
	return cli_wire_finish(&rd, "DeleteTopics", v, err, errlen);
}

/* ---- consumer groups ------------------------------------------------------------------- */

bool sluice_cli_tps_add(struct sluice_cli_tps *t, const char *topic, int32_t partition, int64_t offset, int16_t error)
{
	if (t->n == t->cap) {
		int32_t cap = t->cap ? t->cap * 2 : 16;
		struct sluice_cli_tp *v = cap > t->cap ? realloc(t->v, (size_t)cap * sizeof *v) : NULL;
		if (!v)
			return false;
		t->v = v;
		t->cap = cap;
	}
	struct sluice_cli_tp *e = &t->v[t->n++];
	snprintf(e->topic, sizeof e->topic, "%s", topic);
	e->partition = partition;
	e->offset = offset;
	e->error = error;
	return true;
}

void sluice_cli_tps_free(struct sluice_cli_tps *t)
{
	free(t->v);
	memset(t, 0, sizeof *t);
}

/* A topic name from the wire into a bounded buffer, then the entry added. */
static void tps_add_wire(struct krd *rd, struct sluice_cli_tps *t, const char *topic, int32_t partition,
			 int64_t offset, int16_t error)
{
	if (!rd->err && !sluice_cli_tps_add(t, topic, partition, offset, error))
		krd_fail(rd, "out of memory");
}

void sluice_cli_encode_list_groups(struct kwr *w, int16_t v)
{
	assert(v >= SLUICE_CLI_LIST_GROUPS_MIN && v <= SLUICE_CLI_LIST_GROUPS_MAX);
	if (v >= 4)
		kwr_array(w, true, 0); /* StatesFilter: every state */
	if (v >= 5)
		kwr_array(w, true, 0); /* TypesFilter: every type */
	kwr_tags_empty(w);
}

int sluice_cli_decode_list_groups(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_group_list *out,
				  char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_LIST_GROUPS_MIN && v <= SLUICE_CLI_LIST_GROUPS_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	out->error = krd_i16(&rd);
	int32_t n = krd_array(&rd, true, 3 + (v >= 4 ? 1 : 0) + (v >= 5 ? 1 : 0));
	if (n > 0 && !(out->groups = calloc((size_t)n, sizeof *out->groups)))
		krd_fail(&rd, "out of memory");
	for (int32_t i = 0; i < n && !rd.err; i++) {
		struct sluice_cli_group_listing *g = &out->groups[i];
		struct kstr id = krd_string(&rd, true);
		copy_message(krd_string(&rd, true), g->protocol_type, sizeof g->protocol_type);
		if (v >= 4)
			copy_message(krd_string(&rd, true), g->state, sizeof g->state);
		if (v >= 5)
			(void)krd_string(&rd, true); /* GroupType */
		krd_tags_skip(&rd);
		g->group_id = dup_string(&rd, id, false, "group id");
		out->n += !rd.err;
	}
	krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "ListGroups", v, err, errlen) < 0) {
		sluice_cli_group_list_free(out);
		return -1;
	}
	return 0;
}

void sluice_cli_group_list_free(struct sluice_cli_group_list *l)
{
	for (int32_t i = 0; i < l->n; i++)
		free(l->groups[i].group_id);
	free(l->groups);
	memset(l, 0, sizeof *l);
}

void sluice_cli_encode_find_coordinator(struct kwr *w, int16_t v, const char *group)
{
	assert(v >= SLUICE_CLI_FIND_COORDINATOR_MIN && v <= SLUICE_CLI_FIND_COORDINATOR_MAX && group);
	if (v >= 4) {
		kwr_i8(w, 0); /* KeyType: group */
		kwr_array(w, true, 1);
		kwr_cstr(w, true, group);
	} else {
		kwr_cstr(w, true, group);
		kwr_i8(w, 0);
	}
	kwr_tags_empty(w);
}

static void fc_endpoint(struct krd *rd, struct sluice_cli_coordinator *out)
{
	out->node_id = krd_i32(rd);
	struct kstr host = krd_string(rd, true);
	out->endpoint.port = krd_i32(rd);
	if (!rd->err && out->node_id >= 0 &&
	    (!copy_name(rd, host, out->endpoint.host, sizeof out->endpoint.host, "coordinator host") ||
	     out->endpoint.port < 1 || out->endpoint.port > 65535))
		krd_fail(rd, "coordinator endpoint");
}

int sluice_cli_decode_find_coordinator(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_coordinator *out,
				       char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_FIND_COORDINATOR_MIN && v <= SLUICE_CLI_FIND_COORDINATOR_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	if (v >= 4) {
		int32_t n = krd_array(&rd, true, 1 + 4 + 1 + 4 + 2 + 1 + 1);
		if (!rd.err && n != 1)
			return cli_wire_fail(&rd, "FindCoordinator", v, "not one coordinator in the answer", err, errlen);
		(void)krd_string(&rd, true); /* Key */
		fc_endpoint(&rd, out);
		out->error = krd_i16(&rd);
		copy_message(krd_string(&rd, true), out->message, sizeof out->message);
		krd_tags_skip(&rd);
	} else {
		out->error = krd_i16(&rd);
		copy_message(krd_string(&rd, true), out->message, sizeof out->message);
		fc_endpoint(&rd, out);
	}
	krd_tags_skip(&rd);
	return cli_wire_finish(&rd, "FindCoordinator", v, err, errlen);
}

void sluice_cli_encode_describe_group(struct kwr *w, int16_t v, const char *group)
{
	assert(v >= SLUICE_CLI_DESCRIBE_GROUPS_MIN && v <= SLUICE_CLI_DESCRIBE_GROUPS_MAX && group);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, group);
	kwr_bool(w, false); /* IncludeAuthorizedOperations */
	kwr_tags_empty(w);
}

/* The consumer protocol's assignment (ConsumerProtocolAssignment v0-3, not
 * flexible): Version, [Topic, [Partition]], UserData. false when the bytes
 * are not laid out so (another protocol type): shown as unreadable. */
static bool dg_assignment(const uint8_t *p, int32_t len, struct sluice_cli_tps *out)
{
	struct krd rd;
	krd_init(&rd, p, (size_t)len);
	int32_t start = out->n;
	(void)krd_i16(&rd); /* Version */
	int32_t tn = krd_array(&rd, false, 2 + 4);
	for (int32_t t = 0; t < tn && !rd.err; t++) {
		char topic[SLUICE_CLI_TOPIC_NAME_MAX];
		bool named = copy_name(&rd, krd_string(&rd, false), topic, sizeof topic, "assigned topic");
		int32_t pn = krd_array(&rd, false, 4);
		for (int32_t i = 0; i < pn && named && !rd.err; i++) {
			int32_t partition = krd_i32(&rd);
			tps_add_wire(&rd, out, topic, partition, -1, 0);
		}
	}
	/* UserData (and later versions' fields) are not needed */
	if (rd.err)
		out->n = start;
	return !rd.err;
}

static void dg_member(struct krd *rd, bool consumer, struct sluice_cli_group *g)
{
	struct sluice_cli_member *m = &g->members[g->member_n];
	memset(m, 0, sizeof *m);
	struct kstr id = krd_string(rd, true), instance = krd_string(rd, true);
	struct kstr client = krd_string(rd, true), host = krd_string(rd, true);
	const uint8_t *meta, *assignment;
	(void)krd_bytes(rd, true, &meta);
	int32_t alen = krd_bytes(rd, true, &assignment);
	krd_tags_skip(rd);
	m->member_id = dup_string(rd, id, false, "member id");
	m->instance_id = dup_string(rd, instance, true, "group instance id");
	m->client_id = dup_string(rd, client, false, "client id");
	m->client_host = dup_string(rd, host, false, "client host");
	m->assigned_at = g->assigned.n;
	if (!rd->err && alen > 0)
		m->assignment_unreadable = !consumer || !dg_assignment(assignment, alen, &g->assigned);
	m->assigned_n = g->assigned.n - m->assigned_at;
	g->member_n++; /* freed with the group even when cut short */
}

int sluice_cli_decode_describe_group(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_group *out,
				     char *err, size_t errlen)
{
	assert(v >= SLUICE_CLI_DESCRIBE_GROUPS_MIN && v <= SLUICE_CLI_DESCRIBE_GROUPS_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t n = krd_array(&rd, true, 2 + (v >= 6 ? 1 : 0) + 4 + 1 + 4 + 1);
	if (!rd.err && n != 1)
		return cli_wire_fail(&rd, "DescribeGroups", v, "not one group in the answer", err, errlen);
	out->error = krd_i16(&rd);
	if (v >= 6)
		copy_message(krd_string(&rd, true), out->message, sizeof out->message);
	(void)krd_string(&rd, true); /* GroupId */
	copy_message(krd_string(&rd, true), out->state, sizeof out->state);
	copy_message(krd_string(&rd, true), out->protocol_type, sizeof out->protocol_type);
	copy_message(krd_string(&rd, true), out->protocol, sizeof out->protocol);
	int32_t mn = krd_array(&rd, true, 1 + 1 + 1 + 1 + 1 + 1 + 1);
	if (mn > 0 && !(out->members = calloc((size_t)mn, sizeof *out->members)))
		krd_fail(&rd, "out of memory");
	bool consumer = strcmp(out->protocol_type, "consumer") == 0;
	for (int32_t i = 0; i < mn && !rd.err; i++)
		dg_member(&rd, consumer, out);
	(void)krd_i32(&rd); /* AuthorizedOperations */
	krd_tags_skip(&rd);
	krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "DescribeGroups", v, err, errlen) < 0) {
		sluice_cli_group_free(out);
		return -1;
	}
	return 0;
}

void sluice_cli_group_free(struct sluice_cli_group *g)
{
	for (int32_t i = 0; i < g->member_n; i++) {
		free(g->members[i].member_id);
		free(g->members[i].instance_id);
		free(g->members[i].client_id);
		free(g->members[i].client_host);
	}
	free(g->members);
	sluice_cli_tps_free(&g->assigned);
	g->members = NULL;
	g->member_n = 0;
}

void sluice_cli_encode_offset_fetch(struct kwr *w, const char *group)
{
	assert(group);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, group);
	kwr_array(w, true, -1); /* Topics: null, every committed one */
	kwr_tags_empty(w);
	kwr_bool(w, false); /* RequireStable */
	kwr_tags_empty(w);
}

/* Partitions of one topic of an OffsetFetch or ListOffsets answer. */
static void offsets_topic(struct krd *rd, bool list_offsets, struct sluice_cli_tps *out)
{
	char topic[SLUICE_CLI_TOPIC_NAME_MAX];
	bool named = copy_name(rd, krd_string(rd, true), topic, sizeof topic, "topic name");
	int32_t pn = krd_array(rd, true, list_offsets ? 4 + 2 + 8 + 8 + 4 + 1 : 4 + 8 + 4 + 1 + 2 + 1);
	for (int32_t i = 0; i < pn && named && !rd->err; i++) {
		int32_t partition = krd_i32(rd);
		int16_t error = 0;
		int64_t offset;
		if (list_offsets) {
			error = krd_i16(rd);
			(void)krd_i64(rd); /* Timestamp */
			offset = krd_i64(rd);
			(void)krd_i32(rd); /* LeaderEpoch */
		} else {
			offset = krd_i64(rd);
			(void)krd_i32(rd);          /* CommittedLeaderEpoch */
			(void)krd_string(rd, true); /* Metadata */
			error = krd_i16(rd);
		}
		krd_tags_skip(rd);
		tps_add_wire(rd, out, topic, partition, offset, error);
	}
	krd_tags_skip(rd);
}

int sluice_cli_decode_offset_fetch(const uint8_t *body, size_t len, struct sluice_cli_tps *out, char *err,
				   size_t errlen)
{
	const int16_t v = SLUICE_CLI_OFFSET_FETCH_VERSION;
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t n = krd_array(&rd, true, 1 + 1 + 2 + 1);
	if (!rd.err && n != 1)
		return cli_wire_fail(&rd, "OffsetFetch", v, "not one group in the answer", err, errlen);
	(void)krd_string(&rd, true); /* GroupId */
	int32_t tn = krd_array(&rd, true, 1 + 1 + 1);
	for (int32_t t = 0; t < tn && !rd.err; t++)
		offsets_topic(&rd, false, out);
	out->error = krd_i16(&rd);
	krd_tags_skip(&rd);
	krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "OffsetFetch", v, err, errlen) < 0) {
		sluice_cli_tps_free(out);
		return -1;
	}
	return 0;
}

bool sluice_cli_list_offsets_flexible(int16_t v) { return v >= 6; }

void sluice_cli_encode_list_offsets(struct kwr *w, int16_t v, const struct sluice_cli_tp *tps, int32_t n)
{
	assert(v >= SLUICE_CLI_LIST_OFFSETS_MIN && v <= SLUICE_CLI_LIST_OFFSETS_MAX && n >= 0);
	kwr_i32(w, -1); /* ReplicaId: a client */
	kwr_i8(w, 0);   /* IsolationLevel: read_uncommitted, the log end offset */
	int32_t topics = 0;
	for (int32_t i = 0; i < n; i++)
		topics += i == 0 || strcmp(tps[i].topic, tps[i - 1].topic) != 0;
	kwr_array(w, true, topics);
	for (int32_t i = 0; i < n;) {
		int32_t j = i;
		while (j < n && strcmp(tps[j].topic, tps[i].topic) == 0)
			j++;
		kwr_cstr(w, true, tps[i].topic);
		kwr_array(w, true, j - i);
		for (int32_t k = i; k < j; k++) {
			kwr_i32(w, tps[k].partition);
			kwr_i32(w, -1); /* CurrentLeaderEpoch */
			kwr_i64(w, -1); /* Timestamp: latest */
			kwr_tags_empty(w);
		}
		kwr_tags_empty(w);
		i = j;
	}
	kwr_tags_empty(w);
}

int sluice_cli_decode_list_offsets(const uint8_t *body, size_t len, int16_t v, struct sluice_cli_tps *out, char *err,
				   size_t errlen)
{
	assert(v >= SLUICE_CLI_LIST_OFFSETS_MIN && v <= SLUICE_CLI_LIST_OFFSETS_MAX);
	struct krd rd;
	krd_init(&rd, body, len);
	memset(out, 0, sizeof *out);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t tn = krd_array(&rd, true, 1 + 1 + 1);
	for (int32_t t = 0; t < tn && !rd.err; t++)
		offsets_topic(&rd, true, out);
	krd_tags_skip(&rd);
	if (cli_wire_finish(&rd, "ListOffsets", v, err, errlen) < 0) {
		sluice_cli_tps_free(out);
		return -1;
	}
	return 0;
}
