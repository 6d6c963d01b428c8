/* The metadata and admin APIs: Metadata, CreateTopics, DeleteTopics,
 * CreatePartitions, DescribeConfigs, AlterConfigs and
 * IncrementalAlterConfigs, DescribeCluster, DescribeTopicPartitions,
 * FindCoordinator and InitProducerId. They read the request's metadata
 * snapshot or change the metadata through the broker's metadata backend
 * (control/meta.h), each request's changes in one batch (one journal
 * write and fsync), and answer at once, except DeleteTopics, which has
 * the storage cores rename the deleted partitions' directories away
 * first. A single broker: it is every partition's leader, every group's
 * coordinator, and the only replica. */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/group.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A partition in a failed data directory shows as offline. */
static bool partition_offline(struct req *r, uint32_t offline, const char *topic, int32_t p)
{
	if (!offline)
		return false;
	char path[900];
	int d = sluice_partition_dir(r->nc->b, topic, p, false, path, sizeof path);
	return d >= 0 && (offline & (1u << d));
}

static const uint8_t uuid_zero[16];

/* ---- Metadata (3) ----------------------------------------------------------- */

struct md_topic {
	struct kstr name;
	uint8_t id[16];
	bool by_id;
};

/* One topic of the response; t is NULL for a topic not found. */
static void md_write_topic(struct req *r, const struct sluice_topic *t, struct kstr name, const uint8_t *id,
			   int16_t error)
{
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	kwr_i16(w, error);
	if (t)
		kwr_cstr(w, flex, t->name);
	else if (!name.ptr && v < 12)
		kwr_string(w, flex, "", 0); /* Name is nullable only from v12 */
	else
		kwr_string(w, flex, name.ptr, name.len);
	if (v >= 10)
		kwr_uuid(w, t ? t->id : id ? id : uuid_zero);
	if (v >= 1)
		kwr_bool(w, t && !strcmp(t->name, SLUICE_OFFSETS_TOPIC)); /* IsInternal */
	int32_t parts = t && error == KERR_NONE ? t->partitions : 0;
	kwr_array(w, flex, parts);
	int32_t node = r->nc->b->cfg.node_id;
	uint32_t offline = __atomic_load_n(&r->nc->b->offline_dirs, __ATOMIC_ACQUIRE);
	for (int32_t p = 0; p < parts; p++) {
		bool down = partition_offline(r, offline, t->name, p);
		kwr_i16(w, down ? KERR_KAFKA_STORAGE_ERROR : KERR_NONE);
		kwr_i32(w, p);
		kwr_i32(w, down ? -1 : node);
		if (v >= 7)
			kwr_i32(w, 0); /* LeaderEpoch */
		kwr_array(w, flex, 1);
		kwr_i32(w, node);
		kwr_array(w, flex, down ? 0 : 1);
		if (!down)
			kwr_i32(w, node);
		if (v >= 5) {
			kwr_array(w, flex, down ? 1 : 0);
			if (down)
				kwr_i32(w, node);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 8)
		kwr_i32(w, INT32_MIN); /* TopicAuthorizedOperations: not computed */
	if (flex)
		kwr_tags_empty(w);
}

/* The topics named (n of them, or -1 for all) into r->api; false on a
 * decode error or out of memory. */
static bool md_decode(struct req *r, struct krd *rd, int32_t *n, bool *allow_auto)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	*n = krd_array(rd, flex, v >= 10 ? 17 : 2);
	if (rd->err)
		return false;
	struct md_topic *ts = *n > 0 ? calloc((size_t)*n, sizeof *ts) : NULL;
	if (*n > 0 && !ts)
		return false;
	r->api = ts;
	for (int32_t i = 0; i < *n; i++) {
		if (v >= 10)
			krd_uuid(rd, ts[i].id);
		ts[i].name = krd_string(rd, flex);
		ts[i].by_id = v >= 10 && !ts[i].name.ptr;
		if (flex)
			krd_tags_skip(rd);
	}
	*allow_auto = v >= 4 ? krd_bool(rd) : true;
	if (v >= 8 && v <= 10)
		(void)krd_bool(rd); /* IncludeClusterAuthorizedOperations */
	if (v >= 8)
		(void)krd_bool(rd); /* IncludeTopicAuthorizedOperations */
	if (flex)
		krd_tags_skip(rd);
	return !rd->err;
}

/* Create the topics named that do not exist, in one metadata batch, so
 * that the response shows them. */
static void md_auto_create(struct req *r, const struct md_topic *ts, int32_t n)
{
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	bool created = false, batch = false;
	for (int32_t i = 0; i < n; i++) {
		if (ts[i].by_id || !ts[i].name.ptr ||
		    sluice_meta_find(sluice_proto_snap(r), ts[i].name.ptr, (size_t)ts[i].name.len))
			continue;
		if (!sluice_topic_name_valid(ts[i].name.ptr, (size_t)ts[i].name.len))
			continue;
		if (!batch) /* one metadata write for all the topics created here */
			mo->batch_begin(ms);
		batch = true;
		struct sluice_topic_spec spec = {ts[i].name.ptr, (size_t)ts[i].name.len, -1, -1, 0, {{{0}, {0}}}};
		char msg[256];
		if (mo->create_topic(ms, &spec, false, msg, sizeof msg, NULL) == 0)
			created = true;
	}
	char msg[256];
	if (batch && mo->batch_commit(ms, msg, sizeof msg) != 0)
		created = false;
	if (created)
		sluice_proto_snap_refresh(r);
}

/* A named topic in the snapshot, with the error to answer when absent. */
static const struct sluice_topic *md_lookup(const struct sluice_meta_snapshot *s, const struct md_topic *mt,
					    int16_t *err)
{
	const struct sluice_topic *t;
	*err = KERR_NONE;
	if (mt->by_id) {
		t = sluice_proto_topic_by_id(s, mt->id);
		if (!t)
			*err = KERR_UNKNOWN_TOPIC_ID;
		return t;
	}
	t = mt->name.ptr ? sluice_meta_find(s, mt->name.ptr, (size_t)mt->name.len) : NULL;
	if (!t)
		*err = mt->name.ptr && !sluice_topic_name_valid(mt->name.ptr, (size_t)mt->name.len)
			       ? KERR_INVALID_TOPIC_EXCEPTION : KERR_UNKNOWN_TOPIC_OR_PARTITION;
	return t;
}

/* ThrottleTimeMs, Brokers (this one), ClusterId, ControllerId. */
static void md_write_cluster(struct req *r)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	if (v >= 3)
		kwr_i32(w, 0);
	kwr_array(w, flex, 1);
	kwr_i32(w, cfg->node_id);
	kwr_cstr(w, flex, cfg->advertised_host);
	kwr_i32(w, cfg->advertised_port);
	if (v >= 1)
		kwr_cstr(w, flex, NULL); /* Rack */
	if (flex)
		kwr_tags_empty(w);
	if (v >= 2)
		kwr_cstr(w, flex, cfg->cluster_id);
	if (v >= 1)
		kwr_i32(w, cfg->node_id); /* ControllerId */
}

bool sluice_api_metadata_start(struct req *r, struct krd *rd)
{
	int32_t n;
	bool allow_auto;
	if (!md_decode(r, rd, &n, &allow_auto))
		return false;
	const struct md_topic *ts = r->api;
	assert(n <= 0 || ts);
	bool all = n < 0 || (r->api_version == 0 && n == 0);
	/* Auto-create first so the response shows the new topics. */
	if (!all && allow_auto && r->nc->b->cfg.auto_create_topics_enable)
		md_auto_create(r, ts, n);
	struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	bool flex = r->flexible;
	int16_t v = r->api_version;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	md_write_cluster(r);
	if (all) {
		kwr_array(w, flex, (int32_t)s->topic_n);
		for (uint32_t i = 0; i < s->topic_n; i++)
			md_write_topic(r, s->topics[i], (struct kstr){0}, NULL, KERR_NONE);
	} else {
		kwr_array(w, flex, n);
		for (int32_t i = 0; i < n; i++) {
			int16_t err;
			const struct sluice_topic *t = md_lookup(s, &ts[i], &err);
			md_write_topic(r, t, ts[i].name, ts[i].by_id ? ts[i].id : NULL, err);
		}
	}
	if (v >= 8 && v <= 10)
		kwr_i32(w, INT32_MIN); /* ClusterAuthorizedOperations */
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
	return true;
}

/* ---- CreateTopics (19) -------------------------------------------------------------- */

/* Duplicate names in one request: sorted once, so many topics cost n log n. */
struct name_ref {
	const char *ptr;
	int32_t len;
	int32_t idx;
};

static int cmp_name_ref(const void *a, const void *b)
{
	const struct name_ref *x = a, *y = b;
	int32_t m = x->len < y->len ? x->len : y->len;
	int c = m > 0 ? memcmp(x->ptr, y->ptr, (size_t)m) : 0;
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return x->idx - y->idx;
}

/* Marks dup[i] for every entry whose name an earlier entry already used. */
static bool find_duplicates(const struct kstr *names, int32_t n, bool *dup)
{
	struct name_ref *refs = n > 0 ? malloc((size_t)n * sizeof *refs) : NULL;
	if (n > 0 && !refs)
		return false;
	int32_t k = 0;
	for (int32_t i = 0; i < n; i++)
		if (names[i].ptr)
			refs[k++] = (struct name_ref){names[i].ptr, names[i].len, i};
	if (k > 1)
		qsort(refs, (size_t)k, sizeof *refs, cmp_name_ref);
	for (int32_t i = 1; i < k; i++)
		if (refs[i].len == refs[i - 1].len &&
		    (refs[i].len == 0 || memcmp(refs[i].ptr, refs[i - 1].ptr, (size_t)refs[i].len) == 0))
			dup[refs[i].idx] = true;
	free(refs);
	return true;
}


#define CREATE_TOPICS_PER_REQUEST_MAX 100000
#define CREATE_TOPICS_MESSAGE_BYTES 200

/* One topic of a CreateTopics request. Configs stay in the frame (cfg_at)
 * and are decoded again where needed. */
struct ct {
	struct kstr name;
	int32_t partitions;
	int16_t rf;
	int16_t err;
	int32_t cfg_n;
	const uint8_t *cfg_at;
	uint8_t id[16];
	int32_t parts;
	bool created; /* staged in this request's metadata batch */
	char msg[CREATE_TOPICS_MESSAGE_BYTES];
};

static void ct_fail(struct ct *ct, int16_t err, const char *msg)
{
	ct->err = err;
	snprintf(ct->msg, sizeof ct->msg, "%s", msg);
}

/* Assignments: each partition's replicas must be this broker; a topic
 * that gives them gives neither a count nor a replication factor. */
static void ct_decode_assignments(struct req *r, struct krd *rd, struct ct *ct)
{
	bool flex = r->flexible;
	int32_t na = krd_array(rd, flex, flex ? 6 : 8);
	for (int32_t a = 0; a < na && !rd->err; a++) {
		(void)krd_i32(rd); /* PartitionIndex */
		int32_t nb = krd_array(rd, flex, 4);
		for (int32_t b = 0; b < nb && !rd->err; b++)
			if (krd_i32(rd) != r->nc->b->cfg.node_id && !ct->err)
				ct_fail(ct, KERR_INVALID_REPLICA_ASSIGNMENT,
					"Replica assignment names a broker that does not exist.");
		if (flex)
			krd_tags_skip(rd);
	}
	if (na > 0 && !ct->err) {
		if (ct->partitions != -1 || ct->rf != -1)
			ct_fail(ct, KERR_INVALID_REQUEST,
				"Both numPartitions or replicationFactor and replicasAssignments were set.");
		ct->partitions = na;
		ct->rf = -1;
	}
}

static void ct_decode_topic(struct req *r, struct krd *rd, struct ct *ct)
{
	bool flex = r->flexible;
	ct->name = krd_string(rd, flex);
	ct->partitions = krd_i32(rd);
	ct->rf = krd_i16(rd);
	ct_decode_assignments(r, rd, ct);
	ct->cfg_at = rd->p;
	int32_t nc = krd_array(rd, flex, 3);
	ct->cfg_n = nc;
	for (int32_t c = 0; c < nc && !rd->err; c++) {
		struct kstr key = krd_string(rd, flex), val = krd_string(rd, flex);
		if (flex)
			krd_tags_skip(rd);
		if (ct->err || !key.ptr)
			continue;
		if (c >= SLUICE_TOPIC_CONFIGS_MAX || key.len >= SLUICE_TOPIC_CONFIG_KEY_MAX ||
		    (val.ptr && val.len >= SLUICE_TOPIC_CONFIG_VALUE_MAX))
			ct_fail(ct, KERR_INVALID_CONFIG, "Too many or too long topic configs.");
	}
	if (flex)
		krd_tags_skip(rd);
}

/* Marks dup[i] for every topic whose name an earlier one used (a null name
 * counts as the empty one). */
static bool ct_duplicates(const struct ct *cts, int32_t n, bool *dup)
{
	struct kstr *names = n > 0 ? malloc((size_t)n * sizeof *names) : NULL;
	if (n > 0 && !names)
		return false;
	for (int32_t i = 0; i < n; i++)
		names[i] = cts[i].name.ptr ? cts[i].name : (struct kstr){"", 0};
	bool ok = find_duplicates(names, n, dup);
	free(names);
	return ok;
}

/* The topic's spec for the metadata backend, configs decoded again from
 * the frame (end: the end of the body). */
static void ct_spec_fill(struct sluice_topic_spec *spec, const struct ct *ct, bool flex, const uint8_t *end)
{
	memset(spec, 0, sizeof *spec);
	spec->name = ct->name.ptr ? ct->name.ptr : "";
	spec->name_len = ct->name.ptr ? (size_t)ct->name.len : 0;
	spec->partitions = ct->partitions;
	spec->replication_factor = ct->rf;
	struct krd cr;
	krd_init(&cr, ct->cfg_at, (size_t)(end - ct->cfg_at));
	(void)krd_array(&cr, flex, 3);
	for (int32_t c = 0; c < ct->cfg_n && c < SLUICE_TOPIC_CONFIGS_MAX && !cr.err; c++) {
		struct kstr key = krd_string(&cr, flex), val = krd_string(&cr, flex);
		if (flex)
			krd_tags_skip(&cr);
		if (!key.ptr)
			continue;
		struct sluice_topic_config *tc = &spec->configs[spec->config_n++];
		memcpy(tc->key, key.ptr, (size_t)key.len);
		if (val.ptr)
			memcpy(tc->value, val.ptr, (size_t)val.len);
	}
	assert(spec->config_n <= SLUICE_TOPIC_CONFIGS_MAX);
}

/* Create (or with validate_only, check) every topic without an error yet,
 * in one metadata batch: one journal append and one fsync, however many
 * topics the request creates. */
static bool ct_create_all(struct req *r, struct ct *cts, int32_t n, bool validate_only, const uint8_t *end)
{
	bool *dup = n > 0 ? calloc((size_t)n, sizeof *dup) : NULL;
	struct sluice_topic_spec *spec = malloc(sizeof *spec);
	if ((n > 0 && !dup) || !spec || !ct_duplicates(cts, n, dup)) {
		free(dup);
		free(spec);
		return false;
	}
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	if (!validate_only && n > 0)
		mo->batch_begin(ms);
	for (int32_t i = 0; i < n; i++) {
		if (cts[i].err)
			continue;
		if (dup[i]) {
			ct_fail(&cts[i], KERR_INVALID_REQUEST, "Create topics request from client contains a duplicate topic.");
			continue;
		}
		ct_spec_fill(spec, &cts[i], r->flexible, end);
		struct sluice_topic out;
		cts[i].err = mo->create_topic(ms, spec, validate_only, cts[i].msg, sizeof cts[i].msg, &out);
		if (!cts[i].err) {
			memcpy(cts[i].id, out.id, 16);
			cts[i].parts = out.partitions;
			cts[i].created = !validate_only;
		}
	}
	if (!validate_only && n > 0) {
		char msg[CREATE_TOPICS_MESSAGE_BYTES];
		int16_t e = mo->batch_commit(ms, msg, sizeof msg);
		for (int32_t i = 0; e && i < n; i++)
			if (cts[i].created)
				ct_fail(&cts[i], e, msg);
	}
	free(dup);
	free(spec);
	return true;
}

/* A created topic's Configs (v5+): echoed as given, decoded again from the
 * frame. */
static void ct_write_configs(struct kwr *w, bool flex, const struct ct *ct, const uint8_t *end)
{
	struct krd cr;
	krd_init(&cr, ct->cfg_at, (size_t)(end - ct->cfg_at));
	int32_t nc = krd_array(&cr, flex, 3);
	kwr_array(w, flex, nc > 0 ? nc : 0);
	for (int32_t c = 0; c < nc && !cr.err; c++) {
		struct kstr key = krd_string(&cr, flex), val = krd_string(&cr, flex);
		if (flex)
			krd_tags_skip(&cr);
		kwr_string(w, flex, key.ptr ? key.ptr : "", key.ptr ? key.len : 0);
		kwr_string(w, flex, val.ptr, val.len);
		kwr_bool(w, false); /* ReadOnly */
		kwr_i8(w, 1);       /* ConfigSource: DYNAMIC_TOPIC_CONFIG */
		kwr_bool(w, false); /* IsSensitive */
		kwr_tags_empty(w);
	}
}

static void ct_write_response(struct req *r, const struct ct *cts, int32_t n, const uint8_t *end)
{
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	if (v >= 2)
		kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		const struct ct *ct = &cts[i];
		kwr_string(w, flex, ct->name.ptr ? ct->name.ptr : "", ct->name.ptr ? ct->name.len : 0);
		if (v >= 7)
			kwr_uuid(w, ct->id);
		kwr_i16(w, ct->err);
		if (v >= 1)
			kwr_cstr(w, flex, ct->err ? ct->msg : NULL);
		if (v >= 5) {
			kwr_i32(w, ct->err ? -1 : ct->parts);
			kwr_i16(w, (int16_t)(ct->err ? -1 : 1));
			if (ct->err)
				kwr_array(w, flex, -1);
			else
				ct_write_configs(w, flex, ct, end);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
}

bool sluice_api_create_topics_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	struct krd scan = *rd;
	/* smallest topic entry: empty name, counts, empty arrays (and tags) */
	size_t topic_min = flex ? 10 : 16;
	int32_t n = krd_array(&scan, flex, topic_min);
	if (scan.err || n > CREATE_TOPICS_PER_REQUEST_MAX)
		return *rd = scan, false;
	/* Decode everything first (the request is all-or-nothing on syntax). */
	struct ct *cts = n > 0 ? calloc((size_t)n, sizeof *cts) : NULL;
	if (n > 0 && !cts)
		return false;
	r->api = cts;
	(void)krd_array(rd, flex, topic_min);
	for (int32_t i = 0; i < n && !rd->err; i++)
		ct_decode_topic(r, rd, &cts[i]);
	(void)krd_i32(rd); /* timeoutMs */
	bool validate_only = r->api_version >= 1 ? krd_bool(rd) : false;
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	assert(n <= 0 || r->api == cts);
	if (!ct_create_all(r, cts, n, validate_only, rd->end))
		return false;
	sluice_proto_resp_begin(r);
	ct_write_response(r, cts, n, rd->end);
	sluice_proto_resp_end(r);
	return true;
}

/* ---- DeleteTopics (20) -------------------------------------------------------------- */

#define DELETE_TOPICS_MESSAGE_BYTES 128

struct dt {
	struct kstr name;
	uint8_t id[16];
	int16_t err;
	int32_t parts; /* partitions whose directories the storage cores rename away */
	char msg[DELETE_TOPICS_MESSAGE_BYTES];
	char deleted_name[SLUICE_TOPIC_NAME_MAX + 1];
};

/* One allocation (r->api) holds the whole state, so every exit path,
 * including a decode error, frees it with the request. */
struct dt_state {
	int32_t n;
	struct dt topics[];
};

static void dt_fail(struct dt *d, int16_t err, const char *msg)
{
	d->err = err;
	snprintf(d->msg, sizeof d->msg, "%s", msg);
}

static struct dt_state *dt_decode(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = krd_array(rd, flex, v >= 6 ? 17 : 1);
	if (rd->err)
		return NULL;
	int32_t cnt = n > 0 ? n : 0;
	struct dt_state *ds = calloc(1, sizeof *ds + (size_t)cnt * sizeof ds->topics[0]);
	if (!ds)
		return NULL;
	r->api = ds;
	ds->n = cnt;
	for (int32_t i = 0; i < ds->n && !rd->err; i++) {
		ds->topics[i].name = krd_string(rd, flex);
		if (v >= 6) {
			krd_uuid(rd, ds->topics[i].id);
			if (flex)
				krd_tags_skip(rd);
		}
	}
	(void)krd_i32(rd); /* TimeoutMs */
	if (flex)
		krd_tags_skip(rd);
	return rd->err ? NULL : ds;
}

/* Stage one topic's deletion in the metadata batch; gone receives what the
 * topic was. */
static void dt_delete_one(struct req *r, struct dt *d, struct sluice_topic *gone)
{
	if (!r->nc->b->cfg.delete_topic_enable) {
		dt_fail(d, KERR_TOPIC_DELETION_DISABLED, "Topic deletion is disabled.");
		return;
	}
	if (!d->name.ptr) {
		const struct sluice_topic *t = sluice_proto_topic_by_id(sluice_proto_snap(r), d->id);
		if (!t) {
			dt_fail(d, KERR_UNKNOWN_TOPIC_ID, "This server does not host this topic ID.");
			return;
		}
		snprintf(d->deleted_name, sizeof d->deleted_name, "%s", t->name);
	} else if (d->name.len > SLUICE_TOPIC_NAME_MAX) {
		/* never truncate: that would name another topic */
		dt_fail(d, KERR_UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.");
		return;
	} else
		snprintf(d->deleted_name, sizeof d->deleted_name, "%.*s", d->name.len, d->name.ptr);
	d->err = r->nc->b->meta.ops->delete_topic(r->nc->b->meta.self, d->deleted_name, strlen(d->deleted_name), gone,
						  d->msg, sizeof d->msg);
	if (!d->err) {
		memcpy(d->id, gone->id, 16);
		d->parts = gone->partitions;
	}
}

/* One metadata batch: one journal append and one fsync for all topics.
 * The deletion leaves a tombstone with the topic id, so that directories a
 * crash leaves behind are provably the deleted topic's. Returns how many
 * partition directories the storage cores are to rename away, or -1 when
 * out of memory. */
static int32_t dt_delete_all(struct req *r, struct dt_state *ds)
{
	struct sluice_topic *gone = calloc((size_t)(ds->n ? ds->n : 1), sizeof *gone);
	if (!gone)
		return -1;
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	mo->batch_begin(ms);
	for (int32_t i = 0; i < ds->n; i++)
		dt_delete_one(r, &ds->topics[i], &gone[i]);
	free(gone);
	char cmsg[DELETE_TOPICS_MESSAGE_BYTES];
	int16_t ce = mo->batch_commit(ms, cmsg, sizeof cmsg);
	int32_t total_parts = 0;
	for (int32_t i = 0; i < ds->n; i++) {
		struct dt *d = &ds->topics[i];
		if (!d->err && ce) {
			dt_fail(d, ce, cmsg);
			d->parts = 0;
		}
		total_parts += d->err ? 0 : d->parts;
	}
	return total_parts;
}

/* One PARTOP_DELETE per partition of each deleted topic, grouped by the
 * topic's index in the request (tindex), as the iterator's runs. */
static void dt_ops_fill(struct req *r, const struct dt_state *ds)
{
	int32_t k = 0;
	for (int32_t i = 0; i < ds->n; i++) {
		if (ds->topics[i].err)
			continue;
		for (int32_t p = 0; p < ds->topics[i].parts; p++) {
			struct partop *op = &r->ops[k++];
			op->kind = PARTOP_DELETE;
			op->tindex = i;
			op->topic = ds->topics[i].deleted_name;
			op->partition = p;
			memcpy(op->topic_id, ds->topics[i].id, 16);
		}
	}
	assert(k == r->nops);
}

bool sluice_api_delete_topics_start(struct req *r, struct krd *rd)
{
	struct dt_state *ds = dt_decode(r, rd);
	if (!ds)
		return false;
	/* Delete in the metadata, then have the storage cores drop the logs. */
	int32_t total_parts = dt_delete_all(r, ds);
	if (total_parts < 0)
		return false;
	if (total_parts > 0 && sluice_proto_ops_alloc(r, total_parts))
		dt_ops_fill(r, ds);
	sluice_proto_dispatch(r);
	return true;
}

void sluice_api_delete_topics_finish(struct req *r)
{
	const struct dt_state *ds = r->api;
	assert(ds && r->pending == 0);
	bool flex = r->flexible;
	int16_t v = r->api_version;
	/* A topic whose every partition directory was renamed away (or never
	 * existed) needs its tombstone no more. Every topic deleted has
	 * partitions (the metadata refuses a topic without), so one run of
	 * ops each. */
	for (int32_t k = 0, end; k < r->nops; k = end) {
		end = sluice_proto_topic_run_end(r, k);
		const struct dt *d = &ds->topics[r->ops[k].tindex];
		assert(!d->err && d->parts == end - k);
		bool all = true;
		for (int32_t i = k; i < end; i++)
			all &= r->ops[i].error == 0;
		if (all)
			r->nc->b->meta.ops->forget_deleted(r->nc->b->meta.self, d->id);
	}
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 1)
		kwr_i32(w, 0);
	kwr_array(w, flex, ds->n);
	for (int32_t i = 0; i < ds->n; i++) {
		const struct dt *d = &ds->topics[i];
		if (d->name.ptr)
			kwr_string(w, flex, d->name.ptr, d->name.len);
		else
			kwr_cstr(w, flex, d->deleted_name[0] ? d->deleted_name : NULL);
		if (v >= 6)
			kwr_uuid(w, d->id);
		kwr_i16(w, d->err);
		if (v >= 5)
			kwr_cstr(w, flex, d->err ? d->msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}
/* ---- DescribeConfigs (32) ------------------------------------------------------------- */

enum { SRC_DYNAMIC_TOPIC = 1, SRC_STATIC_BROKER = 4, SRC_DEFAULT = 5 };
enum { CT_BOOLEAN = 1, CT_STRING = 2, CT_INT = 3, CT_LONG = 5, CT_DOUBLE = 6, CT_LIST = 7 };

/* Topic config keys with the broker setting that supplies their default. */
struct topic_default {
	const char *key;
	int8_t type;
	const char *fixed; /* NULL: computed from the broker config */
};
static const struct topic_default topic_defaults[] = {
	{"cleanup.policy", CT_LIST, "delete"},
	{"compression.type", CT_STRING, "producer"},
	{"delete.retention.ms", CT_LONG, "86400000"},
	{"file.delete.delay.ms", CT_LONG, "60000"},
	{"flush.messages", CT_LONG, NULL},
	{"flush.ms", CT_LONG, NULL},
	{"index.interval.bytes", CT_INT, NULL},
	{"max.compaction.lag.ms", CT_LONG, NULL},
	{"max.message.bytes", CT_INT, NULL},
	{"message.timestamp.type", CT_STRING, NULL},
	{"min.cleanable.dirty.ratio", CT_DOUBLE, NULL},
	{"min.compaction.lag.ms", CT_LONG, NULL},
	{"min.insync.replicas", CT_INT, NULL},
	{"preallocate", CT_BOOLEAN, "false"},
	{"retention.bytes", CT_LONG, NULL},
	{"retention.ms", CT_LONG, NULL},
	{"segment.bytes", CT_INT, NULL},
	{"segment.ms", CT_LONG, NULL},
	{"unclean.leader.election.enable", CT_BOOLEAN, "false"},
};

static void topic_default_value(const struct sluice_config *c, const char *key, char *out, size_t len)
{
	if (!strcmp(key, "message.timestamp.type"))
		snprintf(out, len, "%s", c->message_timestamp_type);
	else if (!strcmp(key, "min.cleanable.dirty.ratio"))
		snprintf(out, len, "%s", c->log_cleaner_min_cleanable_ratio_s);
	else if (!strcmp(key, "min.compaction.lag.ms"))
		snprintf(out, len, "%" PRId64, c->log_cleaner_min_compaction_lag_ms);
	else if (!strcmp(key, "max.compaction.lag.ms"))
		snprintf(out, len, "%" PRId64, c->log_cleaner_max_compaction_lag_ms);
	else if (!strcmp(key, "flush.messages"))
		snprintf(out, len, "%" PRId64, c->log_flush_interval_messages);
	else if (!strcmp(key, "flush.ms"))
		snprintf(out, len, "%" PRId64, c->log_flush_interval_ms < 0 ? INT64_MAX : c->log_flush_interval_ms);
	else if (!strcmp(key, "index.interval.bytes"))
		snprintf(out, len, "%d", c->log_index_interval_bytes);
	else if (!strcmp(key, "max.message.bytes"))
		snprintf(out, len, "%d", c->message_max_bytes);
	else if (!strcmp(key, "min.insync.replicas"))
		snprintf(out, len, "%d", c->min_insync_replicas);
	else if (!strcmp(key, "retention.bytes"))
		snprintf(out, len, "%" PRId64, c->log_retention_bytes);
	else if (!strcmp(key, "retention.ms"))
		snprintf(out, len, "%" PRId64, c->log_retention_ms);
	else if (!strcmp(key, "segment.bytes"))
		snprintf(out, len, "%" PRId64, c->log_segment_bytes);
	else if (!strcmp(key, "segment.ms"))
		snprintf(out, len, "%" PRId64, c->log_roll_hours * 3600000);
	else
		out[0] = '\0';
}

static bool key_wanted(struct kstr *keys, int32_t nkeys, const char *name)
{
	if (nkeys < 0)
		return true;
	for (int32_t i = 0; i < nkeys; i++)
		if (kstr_eq(keys[i], name))
			return true;
	return false;
}

static void dc_entry(struct req *r, const char *name, const char *value, bool read_only, int8_t source,
		     int8_t type, bool synonyms)
{
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	kwr_cstr(w, flex, name);
	kwr_cstr(w, flex, value);
	kwr_bool(w, read_only);
	if (v == 0)
		kwr_bool(w, source == SRC_DEFAULT);
	else
		kwr_i8(w, source);
	kwr_bool(w, false); /* IsSensitive */
	if (v >= 1) {
		if (synonyms) {
			kwr_array(w, flex, 1);
			kwr_cstr(w, flex, name);
			kwr_cstr(w, flex, value);
			kwr_i8(w, source);
			if (flex)
				kwr_tags_empty(w);
		} else
			kwr_array(w, flex, 0);
	}
	if (v >= 3) {
		kwr_i8(w, type);
		kwr_cstr(w, flex, NULL);
	}
	if (flex)
		kwr_tags_empty(w);
}


/* A resource of a DescribeConfigs request. */
struct dres {
	int8_t type;
	struct kstr name;
	int32_t nkeys; /* -1: every key */
	struct kstr *keys;
};

/* What describe_configs_start keeps for the request (r->api): the
 * resources and one array of every key they name. */
struct dc_state {
	int32_t n;        /* as the request gave it: -1 (null) is answered as null */
	struct kstr *keys; /* owned: freed once the response is written, or on a decode error */
	struct dres res[];
};

static struct dc_state *dc_decode(struct req *r, struct krd *rd, bool *synonyms)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = krd_array(rd, flex, 4);
	if (rd->err)
		return NULL;
	int32_t cnt = n > 0 ? n : 0;
	struct dc_state *ds = calloc(1, sizeof *ds + (size_t)cnt * sizeof ds->res[0]);
	if (!ds)
		return NULL;
	r->api = ds;
	ds->n = n;
	size_t keys_n = 0;
	for (int32_t i = 0; i < cnt && !rd->err; i++) {
		struct dres *d = &ds->res[i];
		d->type = krd_i8(rd);
		d->name = krd_string(rd, flex);
		d->nkeys = krd_array(rd, flex, 1);
		if (d->nkeys > 0) {
			struct kstr *nk = realloc(ds->keys, (keys_n + (size_t)d->nkeys) * sizeof *nk);
			if (!nk)
				goto fail;
			ds->keys = nk;
			for (int32_t k = 0; k < d->nkeys && !rd->err; k++)
				ds->keys[keys_n + (size_t)k] = krd_string(rd, flex);
			keys_n += (size_t)d->nkeys;
		}
		if (flex)
			krd_tags_skip(rd);
	}
	*synonyms = v >= 1 ? krd_bool(rd) : false;
	if (v >= 3)
		(void)krd_bool(rd); /* IncludeDocumentation */
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		goto fail;
	/* The keys array is final now: point each resource into it. */
	size_t kpos = 0;
	for (int32_t i = 0; i < cnt; i++)
		if (ds->res[i].nkeys > 0) {
			ds->res[i].keys = ds->keys + kpos;
			kpos += (size_t)ds->res[i].nkeys;
		}
	assert(kpos == keys_n);
	return ds;
fail:
	free(ds->keys);
	ds->keys = NULL;
	return NULL;
}

/* The error (and message) a resource is answered with, its topic if it is
 * one. */
static int16_t dc_resource_check(struct req *r, const struct dres *d, const struct sluice_topic **t, const char **msg)
{
	char node[16];
	snprintf(node, sizeof node, "%d", r->nc->b->cfg.node_id);
	*t = NULL;
	*msg = NULL;
	if (d->type == 2) {
		*t = d->name.ptr ? sluice_meta_find(sluice_proto_snap(r), d->name.ptr, (size_t)d->name.len) : NULL;
		if (!*t) {
			*msg = "The topic does not exist.";
			return KERR_UNKNOWN_TOPIC_OR_PARTITION;
		}
	} else if (d->type == 4) {
		if (d->name.ptr && d->name.len > 0 && !kstr_eq(d->name, node)) {
			*msg = "Unexpected broker id";
			return KERR_INVALID_REQUEST;
		}
	} else if (d->type != 8) {
		*msg = "Unsupported resource type";
		return KERR_INVALID_REQUEST;
	}
	return KERR_NONE;
}

#define TOPIC_DEFAULTS_N (sizeof topic_defaults / sizeof *topic_defaults)

/* A topic's configs: every key with its default, or the topic's override. */
static void dc_write_topic(struct req *r, const struct dres *d, const struct sluice_topic *t, bool synonyms)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	int32_t count = 0;
	/* Count first so the array header has the right size. */
	for (size_t k = 0; k < TOPIC_DEFAULTS_N; k++)
		count += key_wanted(d->keys, d->nkeys, topic_defaults[k].key);
	kwr_array(&r->out, r->flexible, count);
	for (size_t k = 0; k < TOPIC_DEFAULTS_N; k++) {
		const struct topic_default *td = &topic_defaults[k];
		if (!key_wanted(d->keys, d->nkeys, td->key))
			continue;
		char val[SLUICE_TOPIC_CONFIG_VALUE_MAX];
		int8_t src = SRC_DEFAULT;
		if (td->fixed)
			snprintf(val, sizeof val, "%s", td->fixed);
		else
			topic_default_value(cfg, td->key, val, sizeof val);
		for (int32_t c = 0; c < t->config_n; c++)
			if (!strcmp(t->configs[c].key, td->key)) {
				snprintf(val, sizeof val, "%s", t->configs[c].value);
				src = SRC_DYNAMIC_TOPIC;
			}
		dc_entry(r, td->key, val, false, src, td->type, synonyms);
	}
}

/* Broker loggers: one today, every area follows the root level. */
static void dc_write_loggers(struct req *r, const struct dres *d)
{
	static const char *const names[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
	int lvl = __atomic_load_n(&sluice_log_level_current, __ATOMIC_RELAXED);
	assert(lvl >= 0 && lvl < (int)(sizeof names / sizeof *names));
	bool want = key_wanted(d->keys, d->nkeys, "root");
	kwr_array(&r->out, r->flexible, want ? 1 : 0);
	if (want)
		dc_entry(r, "root", names[lvl], false, SRC_DEFAULT, CT_STRING, false);
}

/* The broker's own configuration (read-only). */
static void dc_write_broker(struct req *r, const struct dres *d, bool synonyms)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	int32_t count = 0;
	const char *name;
	char val[SLUICE_CONFIG_STRING_MAX];
	bool is_def;
	for (size_t k = 0; sluice_config_entry(cfg, k, &name, val, sizeof val, &is_def); k++)
		count += key_wanted(d->keys, d->nkeys, name);
	kwr_array(&r->out, r->flexible, count);
	for (size_t k = 0; sluice_config_entry(cfg, k, &name, val, sizeof val, &is_def); k++)
		if (key_wanted(d->keys, d->nkeys, name))
			dc_entry(r, name, val, true, is_def ? SRC_DEFAULT : SRC_STATIC_BROKER, CT_STRING, synonyms);
}

bool sluice_api_describe_configs_start(struct req *r, struct krd *rd)
{
	bool synonyms = false;
	struct dc_state *ds = dc_decode(r, rd, &synonyms);
	if (!ds)
		return false;
	bool flex = r->flexible;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, ds->n);
	for (int32_t i = 0; i < ds->n; i++) {
		const struct dres *d = &ds->res[i];
		const struct sluice_topic *t;
		const char *msg;
		int16_t err = dc_resource_check(r, d, &t, &msg);
		kwr_i16(w, err);
		kwr_cstr(w, flex, msg);
		kwr_i8(w, d->type);
		kwr_string(w, flex, d->name.ptr ? d->name.ptr : "", d->name.ptr ? d->name.len : 0);
		if (err)
			kwr_array(w, flex, 0);
		else if (d->type == 2)
			dc_write_topic(r, d, t, synonyms);
		else if (d->type == 8)
			dc_write_loggers(r, d);
		else
			dc_write_broker(r, d, synonyms);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	free(ds->keys);
	ds->keys = NULL;
	sluice_proto_resp_end(r);
	return true;
}

/* ---- FindCoordinator (10) ------------------------------------------------------ */

/* A single broker coordinates every group and transactional id itself. */
bool sluice_api_find_coordinator_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	const struct sluice_config *cfg = &r->nc->b->cfg;
	struct kstr *keys = NULL;
	int32_t n = 0;
	if (v <= 3) {
		(void)krd_string(rd, flex);
		if (v >= 1)
			(void)krd_i8(rd);
	} else {
		(void)krd_i8(rd);
		n = krd_array(rd, flex, 1);
		if (n > 0 && !rd->err) {
			keys = calloc((size_t)n, sizeof *keys);
			if (!keys)
				return false;
			r->api = keys;
			for (int32_t i = 0; i < n && !rd->err; i++)
				keys[i] = krd_string(rd, flex);
		}
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	sluice_api_offsets_topic_ensure(r);
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	if (v >= 1)
		kwr_i32(w, 0);
	if (v <= 3) {
		kwr_i16(w, KERR_NONE);
		if (v >= 1)
			kwr_cstr(w, flex, NULL);
		kwr_i32(w, cfg->node_id);
		kwr_cstr(w, flex, cfg->advertised_host);
		kwr_i32(w, cfg->advertised_port);
	} else {
		kwr_array(w, flex, n > 0 ? n : 0);
		for (int32_t i = 0; i < n; i++) {
			kwr_string(w, flex, keys[i].ptr ? keys[i].ptr : "", keys[i].ptr ? keys[i].len : 0);
			kwr_i32(w, cfg->node_id);
			kwr_cstr(w, flex, cfg->advertised_host);
			kwr_i32(w, cfg->advertised_port);
			kwr_i16(w, KERR_NONE);
			kwr_cstr(w, flex, NULL);
			kwr_tags_empty(w);
		}
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
	return true;
}

/* ---- InitProducerId (22) -------------------------------------------------------- */

/* Idempotent producers only: a fresh id at epoch 0, or, when the client
 * names its current id and epoch (v3+), the same id one epoch on. */
bool sluice_api_init_producer_id_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct kstr txn = krd_string(rd, flex);
	(void)krd_i32(rd);
	int64_t pid = -1;
	int16_t epoch = -1;
	if (v >= 3) {
		pid = krd_i64(rd);
		epoch = krd_i16(rd);
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	int16_t err = KERR_NONE;
	if (txn.ptr) {
		err = KERR_INVALID_REQUEST; /* transactions are not supported yet */
		pid = -1;
		epoch = -1;
	} else if (pid >= 0 && epoch >= 0 && epoch < INT16_MAX - 1) {
		epoch++;
	} else {
		pid = r->nc->b->meta.ops->allocate_producer_id(r->nc->b->meta.self);
		epoch = 0;
		if (pid < 0) {
			err = KERR_KAFKA_STORAGE_ERROR;
			epoch = -1;
		}
	}
	sluice_proto_resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_i16(&r->out, err);
	kwr_i64(&r->out, pid);
	kwr_i16(&r->out, epoch);
	if (flex)
		kwr_tags_empty(&r->out);
	sluice_proto_resp_end(r);
	return true;
}

/* ---- CreatePartitions (37) ------------------------------------------------------- */

#define CREATE_PARTITIONS_MESSAGE_BYTES 200

struct cp {
	struct kstr name;
	int32_t count;
	int16_t err;
	char msg[CREATE_PARTITIONS_MESSAGE_BYTES];
};

static void cp_fail(struct cp *cp, int16_t err, const char *msg)
{
	cp->err = err;
	snprintf(cp->msg, sizeof cp->msg, "%s", msg);
}

/* One topic: Name, Count, Assignments (each replica must be this broker). */
static void cp_decode_topic(struct req *r, struct krd *rd, struct cp *cp)
{
	bool flex = r->flexible;
	cp->name = krd_string(rd, flex);
	cp->count = krd_i32(rd);
	int32_t na = krd_array(rd, flex, 1);
	for (int32_t a = 0; a < na && !rd->err; a++) {
		int32_t nb = krd_array(rd, flex, 4);
		for (int32_t b = 0; b < nb && !rd->err; b++)
			if (krd_i32(rd) != r->nc->b->cfg.node_id && !cp->err)
				cp_fail(cp, KERR_INVALID_REPLICA_ASSIGNMENT, "Replica assignment names a broker that does not exist.");
		if (flex)
			krd_tags_skip(rd);
	}
	if (flex)
		krd_tags_skip(rd);
}

/* Grow every topic without an error yet, in one metadata batch (one
 * journal write and fsync) for the request. */
static bool cp_apply_all(struct req *r, struct cp *cps, int32_t n, bool validate_only)
{
	struct kstr *names = n > 0 ? malloc((size_t)n * sizeof *names) : NULL;
	bool *dup = n > 0 ? calloc((size_t)n, sizeof *dup) : NULL;
	if (n > 0 && (!names || !dup)) {
		free(names);
		free(dup);
		return false;
	}
	for (int32_t i = 0; i < n; i++)
		names[i] = cps[i].name;
	bool ok = find_duplicates(names, n, dup);
	free(names);
	if (!ok) {
		free(dup);
		return false;
	}
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	mo->batch_begin(ms);
	for (int32_t i = 0; i < n; i++) {
		struct cp *cp = &cps[i];
		if (cp->err)
			continue;
		if (dup[i]) {
			cp_fail(cp, KERR_INVALID_REQUEST, "Duplicate topic in request.");
			continue;
		}
		if (!cp->name.ptr) {
			cp->err = KERR_INVALID_REQUEST;
			continue;
		}
		cp->err = mo->create_partitions(ms, cp->name.ptr, (size_t)cp->name.len, cp->count, validate_only, cp->msg,
						sizeof cp->msg);
		if (cp->err == KERR_UNKNOWN_TOPIC_OR_PARTITION)
			snprintf(cp->msg, sizeof cp->msg, "The topic '%.*s' does not exist.",
				 cp->name.len > 200 ? 200 : cp->name.len, cp->name.ptr);
	}
	char bmsg[CREATE_PARTITIONS_MESSAGE_BYTES];
	int16_t be = mo->batch_commit(ms, bmsg, sizeof bmsg);
	for (int32_t i = 0; be && i < n; i++)
		if (!cps[i].err)
			cp_fail(&cps[i], be, bmsg);
	free(dup);
	return true;
}

bool sluice_api_create_partitions_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, 7);
	if (rd->err)
		return false;
	struct cp *cps = n > 0 ? calloc((size_t)n, sizeof *cps) : NULL;
	if (n > 0 && !cps)
		return false;
	r->api = cps;
	for (int32_t i = 0; i < n && !rd->err; i++)
		cp_decode_topic(r, rd, &cps[i]);
	(void)krd_i32(rd); /* TimeoutMs */
	bool validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err || !cp_apply_all(r, cps, n, validate_only))
		return false;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		kwr_string(w, flex, cps[i].name.ptr ? cps[i].name.ptr : "", cps[i].name.ptr ? cps[i].name.len : 0);
		kwr_i16(w, cps[i].err);
		kwr_cstr(w, flex, cps[i].err ? cps[i].msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
	return true;
}

/* ---- AlterConfigs (33) and IncrementalAlterConfigs (44) ------------------------------ */

enum { OP_SET = 0, OP_DELETE = 1, OP_APPEND = 2, OP_SUBTRACT = 3 };

static struct sluice_topic_config *cfg_find(struct sluice_topic_config *c, int32_t n, const char *key)
{
	for (int32_t i = 0; i < n; i++)
		if (!strcmp(c[i].key, key))
			return &c[i];
	return NULL;
}

/* Apply one incremental operation to a working copy of a topic's overrides. */
static int16_t cfg_apply(struct sluice_topic_config *c, int32_t *n, int8_t op, const char *key, const char *value,
			 char *msg, size_t msglen)
{
	struct sluice_topic_config *e = cfg_find(c, *n, key);
	if (op == OP_DELETE) {
		if (e) {
			*e = c[*n - 1];
			(*n)--;
		}
		return 0;
	}
	if (!value) {
		snprintf(msg, msglen, "Null value not supported for %s", key);
		return KERR_INVALID_REQUEST;
	}
	char merged[SLUICE_TOPIC_CONFIG_VALUE_MAX];
	if (op == OP_APPEND || op == OP_SUBTRACT) {
		if (strcmp(key, "cleanup.policy") != 0) {
			snprintf(msg, msglen, "Config value append or subtract is not allowed for config key %s", key);
			return KERR_INVALID_CONFIG;
		}
		bool has_del = false, has_comp = false;
		const char *curv = e ? e->value : "delete";
		has_del = strstr(curv, "delete") != NULL;
		has_comp = strstr(curv, "compact") != NULL;
		bool v_del = strstr(value, "delete") != NULL, v_comp = strstr(value, "compact") != NULL;
		if (op == OP_APPEND) {
			has_del |= v_del;
			has_comp |= v_comp;
		} else {
			has_del &= !v_del;
			has_comp &= !v_comp;
		}
		snprintf(merged, sizeof merged, "%s%s%s", has_comp ? "compact" : "", has_comp && has_del ? "," : "",
			 has_del ? "delete" : "");
		value = merged;
	} else if (op != OP_SET) {
		snprintf(msg, msglen, "Unknown config operation %d", op);
		return KERR_INVALID_REQUEST;
	}
	int16_t err = sluice_topic_config_check(key, value, msg, msglen);
	if (err)
		return err;
	if (strlen(key) >= SLUICE_TOPIC_CONFIG_KEY_MAX || strlen(value) >= SLUICE_TOPIC_CONFIG_VALUE_MAX) {
		snprintf(msg, msglen, "Config key or value too long");
		return KERR_INVALID_CONFIG;
	}
	if (!e) {
		if (*n >= SLUICE_TOPIC_CONFIGS_MAX) {
			snprintf(msg, msglen, "Too many topic config overrides");
			return KERR_INVALID_CONFIG;
		}
		e = &c[(*n)++];
		snprintf(e->key, sizeof e->key, "%s", key);
	}
	snprintf(e->value, sizeof e->value, "%s", value);
	return 0;
}

/* Broker loggers (resource type 8): levels change at run time. */
static int16_t logger_apply(const char *value, char *msg, size_t msglen)
{
	int lvl = value ? sluice_log_level_parse(value) : SLUICE_LOG_INFO;
	if (lvl < 0) {
		snprintf(msg, msglen, "Invalid log level %s", value);
		return KERR_INVALID_CONFIG;
	}
	sluice_log_set_level(lvl);
	SLOG_INFO("broker", "log level set to %s", value ? value : "INFO");
	return 0;
}


#define ALTER_CONFIGS_RESOURCES_MAX 10000
#define ALTER_CONFIGS_MESSAGE_BYTES 256

/* A resource of an (Incremental)AlterConfigs request, with the working
 * copy of its topic overrides (c, in the request's pool) or the logger
 * level it sets. */
struct ar {
	int8_t type;
	struct kstr name;
	int16_t err;
	char msg[ALTER_CONFIGS_MESSAGE_BYTES];
	int32_t cn;
	struct sluice_topic_config *c;
	bool logger;
	char level[16];
};

/* What the resource is: a topic (its overrides copied when the change is
 * incremental), the broker's loggers, or refused. */
static void ar_resolve(struct req *r, struct ar *a, bool incremental)
{
	if (a->type == 2) {
		const struct sluice_topic *t =
			a->name.ptr ? sluice_meta_find(sluice_proto_snap(r), a->name.ptr, (size_t)a->name.len) : NULL;
		if (!t) {
			a->err = KERR_UNKNOWN_TOPIC_OR_PARTITION;
			snprintf(a->msg, sizeof a->msg, "The topic does not exist.");
		} else if (incremental) {
			assert(t->config_n <= SLUICE_TOPIC_CONFIGS_MAX);
			a->cn = t->config_n;
			memcpy(a->c, t->configs, sizeof *t->configs * (size_t)t->config_n);
		}
	} else if (a->type == 8) {
		a->logger = true;
	} else if (a->type == 4) {
		a->err = KERR_INVALID_REQUEST;
		snprintf(a->msg, sizeof a->msg, "Broker configs are read-only in this release (set them in server.properties)");
	} else {
		a->err = KERR_INVALID_REQUEST;
		snprintf(a->msg, sizeof a->msg, "Unsupported resource type %d", a->type);
	}
}

/* Apply one config entry (key, op, value as C strings; value NULL for a
 * null) to the resource's working copy or logger level. */
static void ar_apply_entry(struct ar *a, int8_t op, const char *key, const char *value)
{
	if (!a->logger) {
		a->err = cfg_apply(a->c, &a->cn, op, key, value, a->msg, sizeof a->msg);
		return;
	}
	int lvl = value ? sluice_log_level_parse(value) : SLUICE_LOG_INFO;
	if (lvl < 0) {
		a->err = KERR_INVALID_CONFIG;
		snprintf(a->msg, sizeof a->msg, "Invalid log level %.32s for logger %.64s", value, key);
	} else
		snprintf(a->level, sizeof a->level, "%.15s", value && op != OP_DELETE ? value : "INFO");
}

/* One config entry: Name, ConfigOperation (incremental), Value. */
static void ar_decode_entry(struct req *r, struct krd *rd, struct ar *a, bool incremental)
{
	bool flex = r->flexible;
	struct kstr key = krd_string(rd, flex);
	int8_t op = incremental ? krd_i8(rd) : OP_SET;
	struct kstr val = krd_string(rd, flex);
	if (flex)
		krd_tags_skip(rd);
	if (a->err || rd->err || !key.ptr)
		return;
	char kbuf[SLUICE_TOPIC_CONFIG_KEY_MAX], vbuf[SLUICE_TOPIC_CONFIG_VALUE_MAX];
	if (key.len >= (int32_t)sizeof kbuf || (val.ptr && val.len >= (int32_t)sizeof vbuf)) {
		a->err = KERR_INVALID_CONFIG;
		snprintf(a->msg, sizeof a->msg, "Config key or value too long");
		return;
	}
	memcpy(kbuf, key.ptr, (size_t)key.len);
	kbuf[key.len] = '\0';
	if (val.ptr) {
		memcpy(vbuf, val.ptr, (size_t)val.len);
		vbuf[val.len] = '\0';
	}
	ar_apply_entry(a, op, kbuf, val.ptr ? vbuf : NULL);
}

/* Change every resource without an error, in one metadata batch (one
 * journal write and fsync); loggers change at once. */
static void ar_commit(struct req *r, struct ar *ars, int32_t n, bool validate_only)
{
	const struct sluice_meta_ops *mo = r->nc->b->meta.ops;
	void *ms = r->nc->b->meta.self;
	mo->batch_begin(ms);
	for (int32_t i = 0; i < n; i++) {
		struct ar *a = &ars[i];
		if (a->err || validate_only)
			continue;
		if (a->logger) {
			if (a->level[0])
				a->err = logger_apply(a->level, a->msg, sizeof a->msg);
			continue;
		}
		a->err = mo->set_topic_configs(ms, a->name.ptr, (size_t)a->name.len, a->c, a->cn, false, a->msg,
					       sizeof a->msg);
	}
	char bmsg[200];
	int16_t be = mo->batch_commit(ms, bmsg, sizeof bmsg);
	for (int32_t i = 0; be && !validate_only && i < n; i++)
		if (!ars[i].err && !ars[i].logger) {
			ars[i].err = be;
			snprintf(ars[i].msg, sizeof ars[i].msg, "%s", bmsg);
		}
}

bool sluice_api_alter_configs_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible, incremental = r->api_key == API_INCREMENTAL_ALTER_CONFIGS;
	int32_t n = krd_array(rd, flex, 4);
	/* Each resource gets a working copy of up to 32 overrides (10 KB):
	 * bound how many one request may name. */
	if (rd->err || n > ALTER_CONFIGS_RESOURCES_MAX)
		return false;
	struct ar *ars = n > 0 ? calloc((size_t)n, sizeof *ars) : NULL;
	if (n > 0 && !ars)
		return false;
	r->api = ars;
	/* Decode first: one allocation holds every working copy. */
	struct sluice_topic_config *pool = n > 0 ? calloc((size_t)n * SLUICE_TOPIC_CONFIGS_MAX, sizeof *pool) : NULL;
	if (n > 0 && !pool)
		return false;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		struct ar *a = &ars[i];
		a->type = krd_i8(rd);
		a->name = krd_string(rd, flex);
		a->c = pool + (size_t)i * SLUICE_TOPIC_CONFIGS_MAX;
		ar_resolve(r, a, incremental);
		int32_t nc = krd_array(rd, flex, 3);
		for (int32_t k = 0; k < nc && !rd->err; k++)
			ar_decode_entry(r, rd, a, incremental);
		if (flex)
			krd_tags_skip(rd);
	}
	bool validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (!rd->err)
		ar_commit(r, ars, n, validate_only);
	free(pool);
	if (rd->err)
		return false;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++) {
		kwr_i16(w, ars[i].err);
		kwr_cstr(w, flex, ars[i].err ? ars[i].msg : NULL);
		kwr_i8(w, ars[i].type);
		kwr_string(w, flex, ars[i].name.ptr ? ars[i].name.ptr : "", ars[i].name.ptr ? ars[i].name.len : 0);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
	return true;
}

/* ---- DescribeCluster (60) ------------------------------------------------------------ */

bool sluice_api_describe_cluster_start(struct req *r, struct krd *rd)
{
	int16_t v = r->api_version;
	(void)krd_bool(rd);
	int8_t endpoint_type = v >= 1 ? krd_i8(rd) : 1;
	krd_tags_skip(rd);
	if (rd->err)
		return false;
	const struct sluice_config *cfg = &r->nc->b->cfg;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	int16_t err = endpoint_type == 1 ? KERR_NONE : KERR_MISMATCHED_ENDPOINT_TYPE;
	kwr_i16(w, err);
	kwr_cstr(w, true, err ? "Only broker endpoints are served" : NULL);
	if (v >= 1)
		kwr_i8(w, endpoint_type);
	kwr_cstr(w, true, cfg->cluster_id);
	kwr_i32(w, cfg->node_id);
	kwr_array(w, true, err ? 0 : 1);
	if (!err) {
		kwr_i32(w, cfg->node_id);
		kwr_cstr(w, true, cfg->advertised_host);
		kwr_i32(w, cfg->advertised_port);
		kwr_cstr(w, true, NULL);
		kwr_tags_empty(w);
	}
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
	sluice_proto_resp_end(r);
	return true;
}


/* ---- DescribeTopicPartitions (75) ----------------------------------------------- */

/* What kafka-topics --describe uses since Kafka 3.9: Metadata's partition
 * view with paging (ResponsePartitionLimit, Cursor) and the ELR fields,
 * which a single broker has none of (empty lists, as Kafka shows them). */

#define DTP_PARTITIONS_MAX 2000 /* Kafka's default and largest ResponsePartitionLimit */

struct dtp_request {
	struct kstr *names; /* r->api */
	int32_t n;          /* topics named; <= 0: all */
	int32_t limit;      /* partitions per response */
	struct kstr cursor_topic; /* ptr NULL: from the start */
	int32_t cursor_partition;
};

static bool dtp_decode(struct req *r, struct krd *rd, struct dtp_request *q)
{
	q->n = krd_array(rd, true, 2);
	if (rd->err)
		return false;
	q->names = q->n > 0 ? calloc((size_t)q->n, sizeof *q->names) : NULL;
	if (q->n > 0 && !q->names)
		return false;
	r->api = q->names;
	for (int32_t i = 0; i < q->n && !rd->err; i++) {
		q->names[i] = krd_string(rd, true);
		krd_tags_skip(rd);
	}
	q->limit = krd_i32(rd);
	if (krd_i8(rd) >= 0) { /* nullable struct: -1 null, 1 present */
		q->cursor_topic = krd_string(rd, true);
		q->cursor_partition = krd_i32(rd);
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	if (q->limit <= 0 || q->limit > DTP_PARTITIONS_MAX)
		q->limit = DTP_PARTITIONS_MAX;
	return !rd->err;
}

/* Whether topic t is in the answer: named (or all asked for), and not
 * before the cursor. */
static bool dtp_wanted(const struct dtp_request *q, const struct sluice_topic *t)
{
	bool want = q->n <= 0;
	for (int32_t i = 0; i < q->n && !want; i++)
		want = kstr_eq(q->names[i], t->name);
	if (!want)
		return false;
	if (q->cursor_topic.ptr) { /* resume at the cursor: skip topics before it */
		size_t tl = strlen(t->name), cl = (size_t)q->cursor_topic.len;
		int c = memcmp(t->name, q->cursor_topic.ptr, tl < cl ? tl : cl);
		if (c < 0 || (c == 0 && tl < cl))
			return false;
	}
	return true;
}

/* Partitions [first, last) of topic t. */
static void dtp_write_topic(struct req *r, const struct sluice_topic *t, int32_t first, int32_t last,
			    uint32_t offline)
{
	assert(first <= last);
	struct kwr *w = &r->out;
	int32_t node = r->nc->b->cfg.node_id;
	kwr_i16(w, KERR_NONE);
	kwr_cstr(w, true, t->name);
	kwr_uuid(w, t->id);
	kwr_bool(w, !strcmp(t->name, SLUICE_OFFSETS_TOPIC));
	kwr_array(w, true, last - first);
	for (int32_t p = first; p < last; p++) {
		bool down = partition_offline(r, offline, t->name, p);
		kwr_i16(w, down ? KERR_KAFKA_STORAGE_ERROR : KERR_NONE);
		kwr_i32(w, p);
		kwr_i32(w, down ? -1 : node);
		kwr_i32(w, 0);
		kwr_array(w, true, 1);
		kwr_i32(w, node);
		kwr_array(w, true, down ? 0 : 1);
		if (!down)
			kwr_i32(w, node);
		kwr_array(w, true, 0); /* EligibleLeaderReplicas */
		kwr_array(w, true, 0); /* LastKnownElr */
		kwr_array(w, true, down ? 1 : 0);
		if (down)
			kwr_i32(w, node);
		kwr_tags_empty(w);
	}
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
}

static void dtp_write_unknown(struct kwr *w, struct kstr name)
{
	kwr_i16(w, KERR_UNKNOWN_TOPIC_OR_PARTITION);
	kwr_string(w, true, name.ptr, name.len);
	kwr_uuid(w, uuid_zero);
	kwr_bool(w, false);
	kwr_array(w, true, 0);
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
}

/* The topic count is a varint written before the topics were counted:
 * rewrite it in place at its real size. */
static void dtp_patch_count(struct kwr *w, size_t count_pos, size_t after_count, int32_t topics)
{
	uint8_t tmp[8];
	size_t len = 0;
	uint32_t v = (uint32_t)topics + 1;
	while (v >= 0x80) {
		tmp[len++] = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	tmp[len++] = (uint8_t)v;
	size_t old = after_count - count_pos;
	assert(len <= old && after_count <= w->len);
	memmove(w->buf + count_pos + len, w->buf + after_count, w->len - after_count);
	memcpy(w->buf + count_pos, tmp, len);
	w->len = w->len - old + len;
}

/* Topics in name order (the snapshot's order), requested ones or all, up
 * to the partition limit; then the requested topics that do not exist.
 * Returns how many topics were written; sets *next_topic and *next_part
 * where the next page starts, when the limit cut the answer. */
static int32_t dtp_write_topics(struct req *r, const struct dtp_request *q, const char **next_topic,
				int32_t *next_part)
{
	struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	uint32_t offline = __atomic_load_n(&r->nc->b->offline_dirs, __ATOMIC_ACQUIRE);
	int32_t topics = 0, budget = q->limit;
	for (uint32_t ti = 0; ti < s->topic_n && !*next_topic; ti++) {
		const struct sluice_topic *t = s->topics[ti];
		if (!dtp_wanted(q, t))
			continue;
		int32_t first = q->cursor_topic.ptr && kstr_eq(q->cursor_topic, t->name) ? q->cursor_partition : 0;
		int32_t last = t->partitions;
		if (last - first > budget) {
			last = first + budget;
			*next_topic = t->name;
			*next_part = last;
		}
		budget -= last - first;
		topics++;
		dtp_write_topic(r, t, first, last, offline);
	}
	for (int32_t i = 0; i < q->n && !*next_topic; i++) {
		if (!q->names[i].ptr || sluice_meta_find(s, q->names[i].ptr, (size_t)q->names[i].len))
			continue;
		topics++;
		dtp_write_unknown(&r->out, q->names[i]);
	}
	return topics;
}

bool sluice_api_describe_topic_partitions_start(struct req *r, struct krd *rd)
{
	struct dtp_request q = {0};
	if (!dtp_decode(r, rd, &q))
		return false;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	size_t count_pos = w->len;
	kwr_uvarint(w, 0x7fffffff); /* placeholder, rewritten below */
	size_t after_count = w->len;
	const char *next_topic = NULL;
	int32_t next_part = -1;
	int32_t topics = dtp_write_topics(r, &q, &next_topic, &next_part);
	if (next_topic) {
		kwr_i8(w, 1);
		kwr_cstr(w, true, next_topic);
		kwr_i32(w, next_part);
		kwr_tags_empty(w);
	} else
		kwr_i8(w, -1);
	kwr_tags_empty(w);
	if (!w->err)
		dtp_patch_count(w, count_pos, after_count, topics);
	sluice_proto_resp_end(r);
	return true;
}
