/* File-backed local metadata authority (see meta.h). Writers serialise on a
 * mutex, build a new snapshot, persist it (write temp, fsync, rename) and
 * publish it with an atomic pointer swap; readers hold references. */
#include "control/meta.h"
#include "common/log.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

struct meta_local {
	pthread_mutex_t lock;
	struct sluice_meta_snapshot *current;
	char path[1024];
	int32_t default_partitions;
	/* Producer ids are handed out from blocks whose end is persisted
	 * before any id in them is used, so a restart never repeats one. */
	int64_t pid_next, pid_block_end;
	char pid_path[1100];
};

#define PRODUCER_ID_BLOCK 1000

static const char *const topic_config_keys[] = {
	"cleanup.policy", "compression.type", "delete.retention.ms", "file.delete.delay.ms",
	"flush.messages", "flush.ms", "index.interval.bytes", "max.compaction.lag.ms",
	"max.message.bytes", "message.timestamp.difference.max.ms", "message.timestamp.type",
	"min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
	"retention.bytes", "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms",
	"segment.ms", "unclean.leader.election.enable", "message.downconversion.enable",
	"message.timestamp.before.max.ms", "message.timestamp.after.max.ms", "local.retention.ms",
	"local.retention.bytes", "remote.storage.enable",
};

bool sluice_topic_config_known(const char *key)
{
	for (size_t i = 0; i < sizeof topic_config_keys / sizeof *topic_config_keys; i++)
		if (strcmp(key, topic_config_keys[i]) == 0)
			return true;
	return false;
}

/* Value types of the topic configs whose values are checked. */
static const struct {
	const char *key;
	char type; /* 'l' long, 'b' boolean, 'p' cleanup policy list, 't' timestamp type */
	int64_t min;
} config_types[] = {
	{"cleanup.policy", 'p', 0}, {"delete.retention.ms", 'l', 0}, {"file.delete.delay.ms", 'l', 0},
	{"flush.messages", 'l', 1}, {"flush.ms", 'l', 0}, {"index.interval.bytes", 'l', 0},
	{"max.compaction.lag.ms", 'l', 1}, {"max.message.bytes", 'l', 0},
	{"message.timestamp.difference.max.ms", 'l', 0}, {"min.compaction.lag.ms", 'l', 0},
	{"min.insync.replicas", 'l', 1}, {"preallocate", 'b', 0}, {"retention.bytes", 'l', -1},
	{"retention.ms", 'l', -1}, {"segment.bytes", 'l', 14}, {"segment.index.bytes", 'l', 4},
	{"segment.jitter.ms", 'l', 0}, {"segment.ms", 'l', 1}, {"unclean.leader.election.enable", 'b', 0},
	{"message.timestamp.before.max.ms", 'l', 0}, {"message.timestamp.after.max.ms", 'l', 0},
	{"local.retention.ms", 'l', -2}, {"local.retention.bytes", 'l', -2},
	{"message.timestamp.type", 't', 0}, {"min.cleanable.dirty.ratio", 'r', 0},
};

int16_t sluice_topic_config_check(const char *key, const char *value, char *msg, size_t msglen)
{
	if (!sluice_topic_config_known(key)) {
		snprintf(msg, msglen, "Unknown topic config name: %s", key);
		return 40;
	}
	for (size_t i = 0; i < sizeof config_types / sizeof *config_types; i++) {
		if (strcmp(config_types[i].key, key) != 0)
			continue;
		bool ok = true;
		if (config_types[i].type == 'l') {
			char *end;
			errno = 0;
			long long v = strtoll(value, &end, 10);
			ok = *value && !*end && !errno && v >= config_types[i].min;
		} else if (config_types[i].type == 'b') {
			ok = !strcmp(value, "true") || !strcmp(value, "false");
		} else if (config_types[i].type == 'p') {
			ok = !strcmp(value, "delete") || !strcmp(value, "compact") || !strcmp(value, "compact,delete") ||
			     !strcmp(value, "delete,compact") || !strcmp(value, "");
		} else if (config_types[i].type == 't') {
			ok = !strcmp(value, "CreateTime") || !strcmp(value, "LogAppendTime");
		} else if (config_types[i].type == 'r') {
			char *end;
			double d = strtod(value, &end);
			ok = *value && !*end && d >= 0 && d <= 1;
		}
		if (!ok) {
			snprintf(msg, msglen, "Invalid value %s for configuration %s", value, key);
			return 40;
		}
	}
	if (!strcmp(key, "segment.bytes")) {
		long long v = atoll(value);
		if (v < 1048576 || v > INT32_MAX) {
			snprintf(msg, msglen, "Invalid value %s for configuration segment.bytes: must be in [1048576, %d]", value, INT32_MAX);
			return 40;
		}
	}
	return 0;
}

void sluice_topic_limits_parse(struct sluice_topic *t)
{
	struct sluice_topic_limits *l = &t->limits;
	l->segment_bytes = l->max_message_bytes = l->retention_ms = l->retention_bytes = SLUICE_LIMIT_UNSET;
	l->flush_messages = l->min_insync_replicas = l->segment_ms = SLUICE_LIMIT_UNSET;
	l->cleanup_compact = -1;
	l->cleanup_delete = true;
	l->delete_retention_ms = SLUICE_LIMIT_UNSET;
	l->log_append_time = -1;
	l->min_compaction_lag_ms = l->max_compaction_lag_ms = SLUICE_LIMIT_UNSET;
	l->min_cleanable_dirty_ratio = -1;
	for (int32_t i = 0; i < t->config_n; i++) {
		const char *k = t->configs[i].key, *v = t->configs[i].value;
		if (!strcmp(k, "segment.bytes"))
			l->segment_bytes = atoll(v);
		else if (!strcmp(k, "max.message.bytes"))
			l->max_message_bytes = atoll(v);
		else if (!strcmp(k, "retention.ms"))
			l->retention_ms = atoll(v);
		else if (!strcmp(k, "retention.bytes"))
			l->retention_bytes = atoll(v);
		else if (!strcmp(k, "flush.messages"))
			l->flush_messages = atoll(v);
		else if (!strcmp(k, "segment.ms"))
			l->segment_ms = atoll(v);
		else if (!strcmp(k, "min.insync.replicas"))
			l->min_insync_replicas = atoll(v);
		else if (!strcmp(k, "cleanup.policy")) {
			l->cleanup_compact = strstr(v, "compact") != NULL;
			l->cleanup_delete = strstr(v, "delete") != NULL;
		} else if (!strcmp(k, "delete.retention.ms"))
			l->delete_retention_ms = atoll(v);
		else if (!strcmp(k, "message.timestamp.type"))
			l->log_append_time = !strcmp(v, "LogAppendTime");
		else if (!strcmp(k, "min.compaction.lag.ms"))
			l->min_compaction_lag_ms = atoll(v);
		else if (!strcmp(k, "max.compaction.lag.ms"))
			l->max_compaction_lag_ms = atoll(v);
		else if (!strcmp(k, "min.cleanable.dirty.ratio"))
			l->min_cleanable_dirty_ratio = strtod(v, NULL);
	}
}

bool sluice_topic_name_valid(const char *name, size_t len)
{
	if (len == 0 || len > SLUICE_TOPIC_NAME_MAX)
		return false;
	if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
		return false;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
		      c == '_' || c == '-'))
			return false;
	}
	return true;
}

static int cmp_name(const char *a, size_t alen, const char *b)
{
	size_t blen = strlen(b);
	int c = memcmp(a, b, alen < blen ? alen : blen);
	if (c)
		return c;
	return alen < blen ? -1 : alen > blen;
}

const struct sluice_topic *sluice_meta_find(const struct sluice_meta_snapshot *s, const char *name, size_t len)
{
	size_t lo = 0, hi = s->topic_n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = cmp_name(name, len, s->topics[mid]->name);
		if (c == 0)
			return s->topics[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Topics are immutable and shared between snapshots by reference count, so
 * a new snapshot costs one pointer per topic, not a copy of each topic. */
static void topic_unref(struct sluice_topic *t)
{
	if (t && __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL) == 0)
		free(t);
}

static void snap_free(struct sluice_meta_snapshot *s)
{
	for (uint32_t i = 0; i < s->topic_n; i++)
		topic_unref(s->topics[i]);
	free(s->topics);
	free(s);
}

static struct sluice_meta_snapshot *ml_acquire(void *self)
{
	struct meta_local *m = self;
	pthread_mutex_lock(&m->lock);
	struct sluice_meta_snapshot *s = m->current;
	__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&m->lock);
	return s;
}

static void ml_release(void *self, struct sluice_meta_snapshot *s)
{
	(void)self;
	if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
		snap_free(s);
}

/* Copy the current snapshot with room for one more topic. */
static struct sluice_meta_snapshot *snap_clone(const struct sluice_meta_snapshot *cur, uint32_t extra)
{
	struct sluice_meta_snapshot *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->topics = calloc(cur->topic_n + extra + 1, sizeof *s->topics);
	if (!s->topics) {
		free(s);
		return NULL;
	}
	for (uint32_t i = 0; i < cur->topic_n; i++) {
		s->topics[i] = cur->topics[i];
		__atomic_add_fetch(&s->topics[i]->refs, 1, __ATOMIC_ACQ_REL);
	}
	s->topic_n = cur->topic_n;
	s->version = cur->version + 1;
	s->refs = 1;
	return s;
}

static void hex16(const uint8_t id[16], char out[33])
{
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", id[i]);
}

static int persist(struct meta_local *m, const struct sluice_meta_snapshot *s)
{
	char tmp[1100];
	snprintf(tmp, sizeof tmp, "%s.tmp", m->path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	fprintf(f, "# sluice topic metadata v1: topic <name> <partitions> <id> [key=value ...]\n");
	for (uint32_t i = 0; i < s->topic_n; i++) {
		const struct sluice_topic *t = s->topics[i];
		char id[33];
		hex16(t->id, id);
		fprintf(f, "topic %s %d %s", t->name, t->partitions, id);
		for (int32_t c = 0; c < t->config_n; c++) {
			/* values are percent-encoded so spaces and newlines survive */
			fprintf(f, " %s=", t->configs[c].key);
			for (const char *v = t->configs[c].value; *v; v++) {
				if (*v == ' ' || *v == '%' || *v == '\n' || *v == '\r' || *v == '\t')
					fprintf(f, "%%%02X", (unsigned char)*v);
				else
					fputc(*v, f);
			}
		}
		fputc('\n', f);
	}
	int rc = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -1;
	fclose(f);
	if (rc == 0 && rename(tmp, m->path) < 0)
		rc = -1;
	return rc;
}

static void publish(struct meta_local *m, struct sluice_meta_snapshot *s)
{
	struct sluice_meta_snapshot *old = m->current;
	m->current = s;
	ml_release(m, old);
}

/* Kafka rejects names that collide once '.' and '_' are treated alike. */
static bool collides(const struct sluice_meta_snapshot *s, const char *name, size_t len)
{
	for (uint32_t i = 0; i < s->topic_n; i++) {
		const char *o = s->topics[i]->name;
		if (strlen(o) != len)
			continue;
		size_t k = 0;
		for (; k < len; k++) {
			char a = name[k] == '.' ? '_' : name[k], b = o[k] == '.' ? '_' : o[k];
			if (a != b)
				break;
		}
		if (k == len)
			return true;
	}
	return false;
}

static int16_t ml_create(void *self, const struct sluice_topic_spec *spec, bool validate_only, char *msg,
			 size_t msglen, struct sluice_topic *out)
{
	struct meta_local *m = self;
	if (!sluice_topic_name_valid(spec->name, spec->name_len)) {
		snprintf(msg, msglen, "Topic name is invalid: '%.*s' (legal characters are [a-zA-Z0-9._-], length 1-249)",
			 (int)(spec->name_len > 249 ? 249 : spec->name_len), spec->name);
		return 17; /* INVALID_TOPIC_EXCEPTION */
	}
	int32_t parts = spec->partitions == -1 ? m->default_partitions : spec->partitions;
	if (parts <= 0 || parts > SLUICE_PARTITIONS_PER_TOPIC_MAX) {
		snprintf(msg, msglen, "Number of partitions was set to an invalid non-positive value.");
		if (parts > 0)
			snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", parts, SLUICE_PARTITIONS_PER_TOPIC_MAX);
		return 37; /* INVALID_PARTITIONS */
	}
	if (spec->replication_factor != -1 && spec->replication_factor != 1) {
		if (spec->replication_factor <= 0)
			snprintf(msg, msglen, "Replication factor must be larger than 0, or -1 to use the default value.");
		else
			snprintf(msg, msglen, "Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only 1 broker(s) are registered.",
				 spec->replication_factor, spec->replication_factor);
		return 38; /* INVALID_REPLICATION_FACTOR */
	}
	for (int32_t i = 0; i < spec->config_n; i++) {
		int16_t e = sluice_topic_config_check(spec->configs[i].key, spec->configs[i].value, msg, msglen);
		if (e)
			return e;
	}
	pthread_mutex_lock(&m->lock);
	int16_t code = 0;
	struct sluice_meta_snapshot *cur = m->current;
	if (sluice_meta_find(cur, spec->name, spec->name_len)) {
		snprintf(msg, msglen, "Topic '%.*s' already exists.", (int)spec->name_len, spec->name);
		code = 36; /* TOPIC_ALREADY_EXISTS */
	} else if (collides(cur, spec->name, spec->name_len)) {
		snprintf(msg, msglen, "Topic '%.*s' collides with an existing topic ('.' and '_' are treated alike).",
			 (int)spec->name_len, spec->name);
		code = 17;
	} else if (cur->topic_n >= SLUICE_TOPICS_MAX) {
		snprintf(msg, msglen, "Topic limit %d reached.", SLUICE_TOPICS_MAX);
		code = 37;
	}
	if (code || validate_only) {
		if (!code && out) {
			memset(out, 0, sizeof *out);
			memcpy(out->name, spec->name, spec->name_len);
			out->partitions = parts;
		}
		pthread_mutex_unlock(&m->lock);
		return code;
	}
	struct sluice_meta_snapshot *s = snap_clone(cur, 1);
	struct sluice_topic *t = s ? calloc(1, sizeof *t) : NULL;
	if (!t) {
		if (s)
			snap_free(s);
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, msglen, "out of memory");
		return -1;
	}
	memcpy(t->name, spec->name, spec->name_len);
	t->partitions = parts;
	t->refs = 1;
	if (getrandom(t->id, sizeof t->id, 0) != (ssize_t)sizeof t->id)
		memset(t->id, 0x5a, sizeof t->id);
	t->id[6] = (uint8_t)((t->id[6] & 0x0f) | 0x40);
	t->id[8] = (uint8_t)((t->id[8] & 0x3f) | 0x80);
	t->config_n = spec->config_n;
	memcpy(t->configs, spec->configs, sizeof t->configs[0] * (size_t)spec->config_n);
	sluice_topic_limits_parse(t);
	uint32_t pos = 0;
	while (pos < s->topic_n && cmp_name(spec->name, spec->name_len, s->topics[pos]->name) > 0)
		pos++;
	memmove(&s->topics[pos + 1], &s->topics[pos], (s->topic_n - pos) * sizeof *s->topics);
	s->topics[pos] = t;
	s->topic_n++;
	if (persist(m, s) < 0) {
		snap_free(s);
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, msglen, "cannot persist topic metadata: %s", strerror(errno));
		return 56; /* KAFKA_STORAGE_ERROR */
	}
	if (out)
		*out = *t;
	publish(m, s);
	pthread_mutex_unlock(&m->lock);
	SLOG_INFO("meta", "created topic %s with %d partition(s)", t->name, parts);
	return 0;
}

static int16_t ml_delete(void *self, const char *name, size_t len, struct sluice_topic *out, char *msg, size_t msglen)
{
	struct meta_local *m = self;
	pthread_mutex_lock(&m->lock);
	const struct sluice_topic *t = sluice_meta_find(m->current, name, len);
	if (!t) {
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, msglen, "This server does not host this topic-partition.");
		return 3; /* UNKNOWN_TOPIC_OR_PARTITION */
	}
	struct sluice_meta_snapshot *s = snap_clone(m->current, 0);
	if (!s) {
		pthread_mutex_unlock(&m->lock);
		return -1;
	}
	uint32_t k = 0;
	for (uint32_t i = 0; i < s->topic_n; i++) {
		if (cmp_name(name, len, s->topics[i]->name) == 0) {
			if (out)
				*out = *s->topics[i];
			topic_unref(s->topics[i]);
			continue;
		}
		s->topics[k++] = s->topics[i];
	}
	s->topic_n = k;
	if (persist(m, s) < 0) {
		snap_free(s);
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, msglen, "cannot persist topic metadata");
		return 56;
	}
	publish(m, s);
	pthread_mutex_unlock(&m->lock);
	SLOG_INFO("meta", "deleted topic %.*s", (int)len, name);
	return 0;
}

static int64_t ml_allocate_producer_id(void *self)
{
	struct meta_local *m = self;
	pthread_mutex_lock(&m->lock);
	if (m->pid_next >= m->pid_block_end) {
		int64_t end = m->pid_block_end + PRODUCER_ID_BLOCK;
		char tmp[1200];
		snprintf(tmp, sizeof tmp, "%s.tmp", m->pid_path);
		FILE *f = fopen(tmp, "w");
		int ok = f && fprintf(f, "%lld\n", (long long)end) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
		if (f)
			fclose(f);
		if (!ok || rename(tmp, m->pid_path) < 0) {
			pthread_mutex_unlock(&m->lock);
			SLOG_ERR("meta", "cannot persist the producer id block: %s", strerror(errno));
			return -1;
		}
		m->pid_next = m->pid_block_end;
		m->pid_block_end = end;
	}
	int64_t id = m->pid_next++;
	pthread_mutex_unlock(&m->lock);
	return id;
}

/* Apply fn to a copy of the named topic in a new snapshot, persist, publish. */
static int16_t modify_topic(struct meta_local *m, const char *name, size_t len, bool validate_only,
			    int16_t (*fn)(struct sluice_topic *t, const void *arg, char *msg, size_t msglen),
			    const void *arg, char *msg, size_t msglen)
{
	pthread_mutex_lock(&m->lock);
	const struct sluice_topic *cur = sluice_meta_find(m->current, name, len);
	if (!cur) {
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, msglen, "Topic '%.*s' does not exist.", (int)(len > 249 ? 249 : len), name);
		return 3;
	}
	struct sluice_topic probe = *cur;
	int16_t e = fn(&probe, arg, msg, msglen);
	if (e || validate_only) {
		pthread_mutex_unlock(&m->lock);
		return e;
	}
	struct sluice_meta_snapshot *s = snap_clone(m->current, 0);
	if (!s) {
		pthread_mutex_unlock(&m->lock);
		return -1;
	}
	for (uint32_t i = 0; i < s->topic_n; i++)
		if (cmp_name(name, len, s->topics[i]->name) == 0) {
			struct sluice_topic *nt = malloc(sizeof *nt);
			if (!nt) {
				snap_free(s);
				pthread_mutex_unlock(&m->lock);
				return -1;
			}
			*nt = probe;
			nt->refs = 1;
			topic_unref(s->topics[i]);
			s->topics[i] = nt;
		}
	if (persist(m, s) < 0) {
		snap_free(s);
		pthread_mutex_unlock(&m->lock);
		snprintf(msg, msglen, "cannot persist topic metadata");
		return 56;
	}
	publish(m, s);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int16_t grow_partitions(struct sluice_topic *t, const void *arg, char *msg, size_t msglen)
{
	int32_t count = *(const int32_t *)arg;
	if (count <= t->partitions) {
		snprintf(msg, msglen, "Topic currently has %d partitions, which is higher than the requested %d.",
			 t->partitions, count);
		if (count == t->partitions)
			snprintf(msg, msglen, "Topic already has %d partitions.", t->partitions);
		return 37; /* INVALID_PARTITIONS */
	}
	if (count > SLUICE_PARTITIONS_PER_TOPIC_MAX) {
		snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", count, SLUICE_PARTITIONS_PER_TOPIC_MAX);
		return 37;
	}
	t->partitions = count;
	return 0;
}

static int16_t ml_create_partitions(void *self, const char *name, size_t len, int32_t count, bool validate_only,
				    char *msg, size_t msglen)
{
	int16_t e = modify_topic(self, name, len, validate_only, grow_partitions, &count, msg, msglen);
	if (!e && !validate_only)
		SLOG_INFO("meta", "topic %.*s now has %d partition(s)", (int)len, name, count);
	return e;
}

struct config_set {
	const struct sluice_topic_config *configs;
	int32_t n;
};

static int16_t replace_configs(struct sluice_topic *t, const void *arg, char *msg, size_t msglen)
{
	const struct config_set *cs = arg;
	if (cs->n > SLUICE_TOPIC_CONFIGS_MAX) {
		snprintf(msg, msglen, "More than %d topic config overrides.", SLUICE_TOPIC_CONFIGS_MAX);
		return 40;
	}
	for (int32_t i = 0; i < cs->n; i++) {
		int16_t e = sluice_topic_config_check(cs->configs[i].key, cs->configs[i].value, msg, msglen);
		if (e)
			return e;
	}
	t->config_n = cs->n;
	memcpy(t->configs, cs->configs, sizeof *cs->configs * (size_t)cs->n);
	sluice_topic_limits_parse(t);
	return 0;
}

static int16_t ml_set_topic_configs(void *self, const char *name, size_t len, const struct sluice_topic_config *configs,
				    int32_t n, bool validate_only, char *msg, size_t msglen)
{
	struct config_set cs = {configs, n};
	int16_t e = modify_topic(self, name, len, validate_only, replace_configs, &cs, msg, msglen);
	if (!e && !validate_only)
		SLOG_INFO("meta", "topic %.*s configs updated (%d override(s))", (int)len, name, n);
	return e;
}

static const struct sluice_meta_ops local_ops = {ml_acquire, ml_release, ml_create, ml_delete,
						 ml_allocate_producer_id, ml_create_partitions,
						 ml_set_topic_configs};

static int parse_hex16(const char *h, uint8_t out[16])
{
	if (strlen(h) != 32)
		return -1;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return -1;
		out[i] = (uint8_t)v;
	}
	return 0;
}

static int load(struct meta_local *m, struct sluice_meta_snapshot *s, char *err, size_t errlen)
{
	FILE *f = fopen(m->path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -1;
	char line[16384];
	int lineno = 0;
	while (fgets(line, sizeof line, f)) {
		lineno++;
		if (line[0] == '#' || line[0] == '\n')
			continue;
		struct sluice_topic *t = calloc(1, sizeof *t);
		char *save = NULL, *tok = strtok_r(line, " \n", &save);
		char *name = strtok_r(NULL, " \n", &save), *parts = strtok_r(NULL, " \n", &save),
		     *id = strtok_r(NULL, " \n", &save);
		if (!t || !tok || strcmp(tok, "topic") || !name || !parts || !id ||
		    !sluice_topic_name_valid(name, strlen(name)) || atoi(parts) <= 0 || parse_hex16(id, t->id) < 0 ||
		    s->topic_n >= SLUICE_TOPICS_MAX) {
			snprintf(err, errlen, "%s:%d: malformed topic line", m->path, lineno);
			free(t);
			fclose(f);
			return -1;
		}
		snprintf(t->name, sizeof t->name, "%s", name);
		t->partitions = atoi(parts);
		t->refs = 1;
		(void)0;
		for (char *kv; (kv = strtok_r(NULL, " \n", &save)) && t->config_n < SLUICE_TOPIC_CONFIGS_MAX;) {
			char *eq = strchr(kv, '=');
			if (!eq)
				continue;
			*eq = '\0';
			snprintf(t->configs[t->config_n].key, SLUICE_TOPIC_CONFIG_KEY_MAX, "%s", kv);
			char *dst = t->configs[t->config_n].value;
			size_t n = 0;
			for (const char *v = eq + 1; *v && n + 1 < SLUICE_TOPIC_CONFIG_VALUE_MAX; v++) {
				unsigned x;
				if (*v == '%' && sscanf(v + 1, "%2X", &x) == 1 && v[1] && v[2]) {
					dst[n++] = (char)x;
					v += 2;
				} else
					dst[n++] = *v;
			}
			dst[n] = '\0';
			t->config_n++;
		}
		sluice_topic_limits_parse(t);
		struct sluice_topic **nt = realloc(s->topics, (s->topic_n + 1) * sizeof *nt);
		if (!nt) {
			free(t);
			fclose(f);
			return -1;
		}
		s->topics = nt;
		uint32_t pos = 0;
		while (pos < s->topic_n && strcmp(t->name, s->topics[pos]->name) > 0)
			pos++;
		memmove(&s->topics[pos + 1], &s->topics[pos], (s->topic_n - pos) * sizeof *s->topics);
		s->topics[pos] = t;
		s->topic_n++;
	}
	fclose(f);
	return 0;
}

int sluice_meta_local_open(struct sluice_meta *out, const char *dir, int32_t default_partitions, char *err,
			   size_t errlen)
{
	struct meta_local *m = calloc(1, sizeof *m);
	struct sluice_meta_snapshot *s = calloc(1, sizeof *s);
	if (!m || !s) {
		free(m);
		free(s);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	pthread_mutex_init(&m->lock, NULL);
	snprintf(m->path, sizeof m->path, "%.1000s/sluice-topics", dir);
	m->default_partitions = default_partitions;
	snprintf(m->pid_path, sizeof m->pid_path, "%.1000s/sluice-producer-ids", dir);
	FILE *pf = fopen(m->pid_path, "r");
	if (pf) {
		long long end = 0;
		if (fscanf(pf, "%lld", &end) == 1 && end > 0)
			m->pid_next = m->pid_block_end = end;
		fclose(pf);
	}
	s->refs = 1;
	s->version = 1;
	if (load(m, s, err, errlen) < 0) {
		if (!err[0])
			snprintf(err, errlen, "cannot read %s: %s", m->path, strerror(errno));
		snap_free(s);
		free(m);
		return -1;
	}
	m->current = s;
	out->ops = &local_ops;
	out->self = m;
	return 0;
}

void sluice_meta_local_close(struct sluice_meta *mm)
{
	struct meta_local *m = mm->self;
	if (!m)
		return;
	ml_release(m, m->current);
	pthread_mutex_destroy(&m->lock);
	free(m);
	mm->self = NULL;
}
