/* The metadata and admin APIs: Metadata, CreateTopics, DeleteTopics,
 * CreatePartitions, DescribeConfigs, AlterConfigs and
 * IncrementalAlterConfigs, DescribeCluster, DescribeTopicPartitions,
 * FindCoordinator and InitProducerId. They read the request's metadata
 * snapshot (leaders, replicas, ISR and brokers as the backend describes
 * them) or change the metadata through the broker's metadata backend
 * (control/meta.h): each request's changes go out as one batch (one
 * journal write and fsync) and the answer is written when the batch comes
 * back to the network core (proto.c), which never waits for it; a full
 * metadata queue is answered with an error the clients retry. DeleteTopics
 * then has the storage cores rename the deleted partitions' directories
 * away. A group's coordinator is the leader of its __consumer_offsets
 * partition (single-node: this broker). DescribeQuorum is relayed to the
 * active controller in cluster mode; a single-node broker describes itself
 * as a one-voter quorum. In cluster mode broker configs are dynamic: an
 * (Incremental)AlterConfigs naming a BROKER resource is relayed to the
 * controller, and DescribeConfigs reports each level's value
 * (control/broker_config.h). */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "control/assignment.h"
#include "dataplane/group.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Partition p of t as the snapshot describes it (leader, epoch, replicas,
 * ISR, offline replicas), with this broker's failed data directories
 * applied: where the partition's directory failed here, this broker leads
 * it no more, leaves its ISR and counts among its offline replicas. */
struct partition_view {
	bool down; /* its directory failed on this broker */
	int32_t leader, leader_epoch;
	int32_t replica_n, isr_n, offline_n;
	const int32_t *replicas;
	const struct sluice_partition_state *st; /* what the view was made from (its ELR lists) */
	int32_t isr[SLUICE_REPLICAS_MAX];
	int32_t offline[SLUICE_REPLICAS_MAX + 1];
};

static void partition_view(struct req *r, const struct sluice_topic *t, int32_t p, uint32_t offline_dirs,
			   struct partition_view *v)
{
	int32_t self = r->nc->b->cfg.node_id;
	const struct sluice_partition_state *st = sluice_topic_partition(t, p);
	static const struct sluice_partition_state none = {.leader = -1};
	if (!st) /* the backend has not said (main.c always sets the node) */
		st = &none;
	assert(st->replica_n <= SLUICE_REPLICAS_MAX && st->isr_n <= SLUICE_REPLICAS_MAX);
	v->down = partition_offline(r, offline_dirs, t->name, p);
	v->leader = v->down && st->leader == self ? -1 : st->leader;
	v->leader_epoch = st->leader_epoch;
	v->st = st;
	v->replicas = st->replicas;
	v->replica_n = st->replica_n;
	v->isr_n = v->offline_n = 0;
	for (int32_t i = 0; i < st->isr_n; i++)
		if (!v->down || st->isr[i] != self)
			v->isr[v->isr_n++] = st->isr[i];
	bool self_listed = false;
	for (int32_t i = 0; i < st->offline_n && i < SLUICE_REPLICAS_MAX; i++) {
		self_listed |= st->offline[i] == self;
		v->offline[v->offline_n++] = st->offline[i];
	}
	if (v->down && !self_listed)
		v->offline[v->offline_n++] = self;
	assert(v->offline_n <= SLUICE_REPLICAS_MAX + 1);
}

/* A partition's ErrorCode in Metadata and DescribeTopicPartitions. */
static int16_t partition_error(const struct partition_view *v)
{
	return v->down ? KERR_KAFKA_STORAGE_ERROR : v->leader < 0 ? KERR_LEADER_NOT_AVAILABLE : KERR_NONE;
}

static void write_nodes(struct kwr *w, bool flex, const int32_t *nodes, int32_t n)
{
	kwr_array(w, flex, n);
	for (int32_t i = 0; i < n; i++)
		kwr_i32(w, nodes[i]);
}

/* The snapshot's brokers; a backend that lists none: this broker alone. */
static const struct sluice_meta_broker *brokers_of(struct req *r, uint32_t *n, struct sluice_meta_broker *self)
{
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	if (s->broker_n > 0 && s->brokers) {
		*n = s->broker_n;
		return s->brokers;
	}
	const struct sluice_config *cfg = &r->nc->b->cfg;
	memset(self, 0, sizeof *self);
	self->node_id = cfg->node_id;
	self->port = cfg->advertised_port;
	snprintf(self->host, sizeof self->host, "%s", cfg->advertised_host);
	*n = 1;
	return self;
}

/* The ControllerId clients are given (Metadata, DescribeCluster's broker
 * endpoints): the snapshot's when it is one of the brokers (single-node:
 * this broker). In cluster mode the active controller is not a broker
 * clients can reach, and Kafka's admin client sends CreateTopics and the
 * other controller-bound requests to the ControllerId it finds among the
 * brokers (none found: it waits for ever). Kafka's brokers answer a random
 * live broker (which forwards); Sluice answers the lowest-numbered live
 * broker, so that every broker's answer is the same. */
static int32_t controller_for_clients(struct req *r)
{
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	struct sluice_meta_broker self;
	uint32_t n;
	const struct sluice_meta_broker *bs = brokers_of(r, &n, &self);
	assert(n > 0);
	for (uint32_t i = 0; i < n; i++)
		if (bs[i].node_id == s->controller_id)
			return s->controller_id;
	return bs[0].node_id; /* sorted by node id (meta.h) */
}

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
	uint32_t offline = __atomic_load_n(&r->nc->b->offline_dirs, __ATOMIC_ACQUIRE);
	for (int32_t p = 0; p < parts; p++) {
		struct partition_view pv;
		partition_view(r, t, p, offline, &pv);
		int16_t perr = partition_error(&pv);
		sluice_proto_error_count(r, perr);
		kwr_i16(w, perr);
		kwr_i32(w, p);
		kwr_i32(w, pv.leader);
		if (v >= 7)
			kwr_i32(w, pv.leader_epoch);
		write_nodes(w, flex, pv.replicas, pv.replica_n);
		write_nodes(w, flex, pv.isr, pv.isr_n);
		if (v >= 5)
			write_nodes(w, flex, pv.offline, pv.offline_n);
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 8)
		kwr_i32(w, INT32_MIN); /* TopicAuthorizedOperations: not computed */
	if (flex)
		kwr_tags_empty(w);
}

/* What Metadata keeps for the request (r->api): the topics named (n of
 * them, or -1 for all), for the answer it may write after creating some. */
struct md_state {
	int32_t n;
	bool all;
	struct md_topic ts[];
};

/* The request into r->api; NULL on a decode error or out of memory. */
static struct md_state *md_decode(struct req *r, struct krd *rd, bool *allow_auto)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = krd_array(rd, flex, v >= 10 ? 17 : 2);
	if (rd->err)
		return NULL;
	struct md_state *ms = calloc(1, sizeof *ms + (size_t)(n > 0 ? n : 0) * sizeof ms->ts[0]);
	if (!ms)
		return NULL;
	r->api = ms;
	ms->n = n;
	ms->all = n < 0 || (v == 0 && n == 0);
	for (int32_t i = 0; i < n; i++) {
		struct md_topic *mt = &ms->ts[i];
		if (v >= 10)
			krd_uuid(rd, mt->id);
		mt->name = krd_string(rd, flex);
		mt->by_id = v >= 10 && !mt->name.ptr;
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
	return rd->err ? NULL : ms;
}

static void md_answer(struct req *r);

/* Create the topics named that do not exist, in one metadata batch, so
 * that the answer (md_answer, once the batch is back) shows them. False
 * when there is nothing to create, or it cannot be now (out of memory, the
 * queue full): the answer then shows them unknown, which clients retry. */
static bool md_auto_create(struct req *r, const struct md_state *ms)
{
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	/* As Kafka's auto-creation: this broker's default.replication.factor
	 * (single-node mode: the local backend's one replica). */
	int32_t rf = sluice_proto_cluster_mode(r) ? sluice_proto_config(r)->default_replication_factor : -1;
	uint32_t k = 0;
	for (int32_t pass = 0; pass < 2; pass++) {
		struct sluice_meta_batch *b = pass ? sluice_proto_meta_batch(r, k, 0, NULL) : NULL;
		if (pass && !b)
			return false;
		uint32_t j = 0;
		for (int32_t i = 0; i < ms->n; i++) {
			const struct md_topic *mt = &ms->ts[i];
			if (mt->by_id || !mt->name.ptr || sluice_meta_find(s, mt->name.ptr, (size_t)mt->name.len) ||
			    !sluice_topic_name_valid(mt->name.ptr, (size_t)mt->name.len))
				continue;
			if (pass)
				b->changes[j] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_TOPIC,
									    .name = mt->name.ptr,
									    .name_len = (size_t)mt->name.len,
									    .partitions = -1,
									    .replication_factor = rf};
			j++;
		}
		k = j;
		if (k == 0)
			return false;
	}
	return sluice_proto_meta_submit(r, md_answer) == SLUICE_META_SUBMITTED;
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

/* ThrottleTimeMs, Brokers (the snapshot's), ClusterId, ControllerId. */
static void md_write_cluster(struct req *r)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	if (v >= 3)
		kwr_i32(w, 0);
	struct sluice_meta_broker self;
	uint32_t n;
	const struct sluice_meta_broker *bs = brokers_of(r, &n, &self);
	kwr_array(w, flex, (int32_t)n);
	for (uint32_t i = 0; i < n; i++) {
		kwr_i32(w, bs[i].node_id);
		kwr_cstr(w, flex, bs[i].host);
		kwr_i32(w, bs[i].port);
		if (v >= 1)
			kwr_cstr(w, flex, bs[i].rack[0] ? bs[i].rack : NULL); /* Rack */
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 2)
		kwr_cstr(w, flex, cfg->cluster_id);
	if (v >= 1)
		kwr_i32(w, controller_for_clients(r)); /* ControllerId */
}

/* The answer, from the request's snapshot (renewed after a creation). */
static void md_answer(struct req *r)
{
	const struct md_state *ms = r->api;
	assert(ms);
	struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	bool flex = r->flexible;
	int16_t v = r->api_version;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	md_write_cluster(r);
	if (ms->all) {
		kwr_array(w, flex, (int32_t)s->topic_n);
		for (uint32_t i = 0; i < s->topic_n; i++)
			md_write_topic(r, s->topics[i], (struct kstr){0}, NULL, KERR_NONE);
	} else {
		kwr_array(w, flex, ms->n);
		for (int32_t i = 0; i < ms->n; i++) {
			int16_t err;
			const struct sluice_topic *t = md_lookup(s, &ms->ts[i], &err);
			sluice_proto_error_count(r, err);
			md_write_topic(r, t, ms->ts[i].name, ms->ts[i].by_id ? ms->ts[i].id : NULL, err);
		}
	}
	if (v >= 8 && v <= 10)
		kwr_i32(w, INT32_MIN); /* ClusterAuthorizedOperations */
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

bool sluice_api_metadata_start(struct req *r, struct krd *rd)
{
	bool allow_auto;
	const struct md_state *ms = md_decode(r, rd, &allow_auto);
	if (!ms)
		return false;
	/* Auto-create first so the answer shows the new topics. */
	if (!ms->all && allow_auto && r->nc->b->cfg.auto_create_topics_enable && md_auto_create(r, ms))
		return true;
	md_answer(r);
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
	struct sluice_assignment_ref asg; /* its Assignments in the frame, decoded again into its change */
	uint8_t id[16];
	int32_t parts;
	int32_t change; /* its change in the request's metadata batch, or -1 */
	char msg[CREATE_TOPICS_MESSAGE_BYTES];
};

/* The request (r->api). */
struct ct_state {
	int32_t n; /* as the request gave it */
	struct ct cts[];
};

/* Topic configs one CreateTopics request may give in all: they are kept
 * until the metadata batch is back (32 of them for each of 100,000 topics
 * would be a gigabyte). A topic past the bound is refused. */
#define CREATE_TOPICS_CONFIGS_PER_REQUEST_MAX 65536
_Static_assert(CREATE_TOPICS_CONFIGS_PER_REQUEST_MAX >= 64 * SLUICE_TOPIC_CONFIGS_MAX,
	       "many topics with every config fit one request");

/* Manual replica assignments one CreateTopics or CreatePartitions request
 * may give in all, in the int32s their change holds (each list's index and
 * start, each broker id): kept until the batch is back, as configs are. A
 * topic past the bound is refused. */
#define ASSIGNMENT_INTS_PER_REQUEST_MAX (1 << 22)
_Static_assert(ASSIGNMENT_INTS_PER_REQUEST_MAX >= SLUICE_ASSIGNMENT_LISTS_MAX * (2 + SLUICE_REPLICAS_MAX) + 1,
	       "a topic with the largest assignment fits one request");

/* The int32s a change holds for an assignment (control/assignment.h). */
static size_t assignment_ints(const struct sluice_assignment_ref *a)
{
	return a->n > 0 ? 2 * (size_t)a->n + 1 + (size_t)a->ids : 0;
}

/* What a request's changes hold beside themselves, in the batch's extra bytes. */
struct change_extra {
	size_t cfgs;        /* topic configs */
	size_t assignments; /* struct sluice_assignment */
	size_t ints;        /* their arrays */
};

static size_t change_extra_bytes(const struct change_extra *x)
{
	return x->assignments * sizeof(struct sluice_assignment) + x->ints * sizeof(int32_t) +
	       x->cfgs * sizeof(struct sluice_topic_config);
}

/* The batch's extra bytes cut as change_extra_bytes counts them. */
struct change_extra_at {
	struct sluice_assignment *assignments;
	int32_t *ints;
	struct sluice_topic_config *cfgs;
};

static struct change_extra_at change_extra_cut(void *extra, const struct change_extra *x)
{
	_Static_assert(sizeof(struct sluice_assignment) % _Alignof(int32_t) == 0, "the int32s after them are aligned");
	struct change_extra_at at = {0};
	if (!extra)
		return at; /* nothing beside the changes */
	uint8_t *p = extra;
	at.assignments = x->assignments ? (struct sluice_assignment *)(void *)p : NULL;
	p += x->assignments * sizeof(struct sluice_assignment);
	at.ints = x->ints ? (int32_t *)(void *)p : NULL;
	p += x->ints * sizeof(int32_t);
	at.cfgs = x->cfgs ? (struct sluice_topic_config *)p : NULL;
	return at;
}

/* The Assignments scanned into ref decoded into a change's own struct and
 * arrays taken from at (advanced past them). */
static const struct sluice_assignment *change_assignment(const struct sluice_assignment_ref *ref, const uint8_t *end,
							 bool flex, bool with_index, struct change_extra_at *at)
{
	assert(ref->n > 0 && at->assignments && at->ints);
	int32_t *partition = at->ints, *first = partition + ref->n, *ids = first + ref->n + 1;
	struct sluice_assignment *a = at->assignments++;
	sluice_assignment_decode(ref, end, flex, with_index, partition, first, ids, a);
	at->ints += assignment_ints(ref);
	return a;
}

static void ct_fail(struct ct *ct, int16_t err, const char *msg)
{
	ct->err = err;
	snprintf(ct->msg, sizeof ct->msg, "%s", msg);
}

/* Assignments: counted and bounded here, decoded again into the topic's
 * change; the metadata backend applies Kafka's rules to them (the local
 * one: this broker is the only one; the controller's: the cluster's). */
static void ct_decode_assignments(struct req *r, struct krd *rd, struct ct *ct)
{
	char msg[CREATE_TOPICS_MESSAGE_BYTES];
	int16_t e = sluice_assignment_scan(rd, r->flexible, true, &ct->asg, msg, sizeof msg);
	if (e && !rd->err && !ct->err)
		ct_fail(ct, e, msg);
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

/* The topic's configs decoded again from the frame (end: the end of the
 * body) into out; returns how many. */
static int32_t ct_configs_fill(struct sluice_topic_config *out, const struct ct *ct, bool flex, const uint8_t *end)
{
	struct krd cr;
	krd_init(&cr, ct->cfg_at, (size_t)(end - ct->cfg_at));
	(void)krd_array(&cr, flex, 3);
	int32_t n = 0;
	for (int32_t c = 0; c < ct->cfg_n && c < SLUICE_TOPIC_CONFIGS_MAX && !cr.err; c++) {
		struct kstr key = krd_string(&cr, flex), val = krd_string(&cr, flex);
		if (flex)
			krd_tags_skip(&cr);
		if (!key.ptr)
			continue;
		struct sluice_topic_config *tc = &out[n++];
		memcpy(tc->key, key.ptr, (size_t)key.len);
		if (val.ptr)
			memcpy(tc->value, val.ptr, (size_t)val.len);
	}
	assert(n <= SLUICE_TOPIC_CONFIGS_MAX && n <= (ct->cfg_n > 0 ? ct->cfg_n : 0)); /* cfg_n -1: a null array */
	return n;
}

/* Refuse duplicates and topics past the configs or assignments bound;
 * number the others' changes. Returns how many changes, and what they hold
 * in *x; -1 when out of memory. */
static int32_t ct_plan(struct ct *cts, int32_t n, struct change_extra *x)
{
	bool *dup = n > 0 ? calloc((size_t)n, sizeof *dup) : NULL;
	if ((n > 0 && !dup) || !ct_duplicates(cts, n, dup)) {
		free(dup);
		return -1;
	}
	int32_t k = 0;
	memset(x, 0, sizeof *x);
	for (int32_t i = 0; i < n; i++) {
		cts[i].change = -1;
		if (cts[i].err)
			continue;
		if (dup[i]) {
			ct_fail(&cts[i], KERR_INVALID_REQUEST, "Create topics request from client contains a duplicate topic.");
			continue;
		}
		size_t cn = cts[i].cfg_n > 0 ? (size_t)cts[i].cfg_n : 0;
		if (x->cfgs + cn > CREATE_TOPICS_CONFIGS_PER_REQUEST_MAX) {
			ct_fail(&cts[i], KERR_INVALID_CONFIG, "Too many topic configs in one request.");
			continue;
		}
		size_t an = assignment_ints(&cts[i].asg);
		if (x->ints + an > ASSIGNMENT_INTS_PER_REQUEST_MAX) {
			ct_fail(&cts[i], KERR_INVALID_REPLICA_ASSIGNMENT, "Too many replica assignments in one request.");
			continue;
		}
		x->cfgs += cn;
		x->ints += an;
		x->assignments += an > 0;
		cts[i].change = k++;
	}
	free(dup);
	return k;
}

static void ct_answer(struct req *r);
static void ct_write_response(struct req *r, const struct ct *cts, int32_t n, const uint8_t *end);

/* Create (or with validate_only, check) every topic without an error yet,
 * in one metadata batch: one journal append and one fsync, however many
 * topics the request creates. True when the batch is out (ct_answer runs
 * once it is back); false when out of memory. With nothing to create, or
 * the metadata queue full, the answer is written at once. */
static bool ct_create_all(struct req *r, struct ct_state *cs, bool validate_only)
{
	const uint8_t *end = r->frame + r->frame_len;
	struct change_extra x;
	int32_t k = ct_plan(cs->cts, cs->n, &x);
	if (k < 0)
		return false;
	if (k == 0) {
		ct_answer(r);
		return true;
	}
	void *extra;
	struct sluice_meta_batch *b = sluice_proto_meta_batch(r, (uint32_t)k, change_extra_bytes(&x), &extra);
	if (!b)
		return false;
	b->validate_only = validate_only;
	struct change_extra_at at = change_extra_cut(extra, &x);
	struct sluice_topic_config *cfgs = at.cfgs;
	size_t cfg_total = x.cfgs, used = 0;
	for (int32_t i = 0; i < cs->n; i++) {
		const struct ct *ct = &cs->cts[i];
		if (ct->change < 0)
			continue;
		struct sluice_meta_change *c = &b->changes[ct->change];
		c->kind = SLUICE_META_CREATE_TOPIC;
		c->name = ct->name.ptr ? ct->name.ptr : "";
		c->name_len = ct->name.ptr ? (size_t)ct->name.len : 0;
		c->partitions = ct->partitions;
		c->replication_factor = ct->rf;
		c->configs = cfgs ? cfgs + used : NULL;
		c->config_n = cfgs ? ct_configs_fill(cfgs + used, ct, r->flexible, end) : 0;
		used += (size_t)c->config_n;
		if (ct->asg.n > 0)
			c->assignment = change_assignment(&ct->asg, end, r->flexible, true, &at);
	}
	assert(used <= cfg_total);
	enum sluice_meta_submit_result res = sluice_proto_meta_submit(r, ct_answer);
	if (res == SLUICE_META_SUBMITTED)
		return true;
	/* THROTTLING_QUOTA_EXCEEDED, Kafka's answer when topic mutations come
	 * faster than the controller takes them: Kafka's admin client retries
	 * exactly those topics by itself (REQUEST_TIMED_OUT would end the call
	 * with a TimeoutException for the application to retry). */
	for (int32_t i = 0; i < cs->n; i++)
		if (cs->cts[i].change >= 0) {
			ct_fail(&cs->cts[i], KERR_THROTTLING_QUOTA_EXCEEDED,
				"The metadata queue is full; retry later.");
			cs->cts[i].change = -1;
		}
	ct_answer(r);
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

/* The results of the batch (if one went out) into the topics, then the
 * answer. */
static void ct_answer(struct req *r)
{
	struct ct_state *cs = r->api;
	assert(cs);
	const struct sluice_meta_batch *b = r->meta ? sluice_proto_meta_current(r, NULL) : NULL;
	for (int32_t i = 0; i < cs->n; i++) {
		struct ct *ct = &cs->cts[i];
		if (ct->change < 0)
			continue;
		assert(b && (uint32_t)ct->change < b->change_n);
		const struct sluice_meta_change *c = &b->changes[ct->change];
		if (c->error) {
			ct_fail(ct, c->error, c->msg);
			continue;
		}
		memcpy(ct->id, c->topic_id, 16);
		ct->parts = c->topic_partitions;
	}
	sluice_proto_resp_begin(r);
	ct_write_response(r, cs->cts, cs->n, r->frame + r->frame_len);
	sluice_proto_resp_end(r);
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
		sluice_proto_error_count(r, ct->err);
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
	struct ct_state *cs = calloc(1, sizeof *cs + (size_t)(n > 0 ? n : 0) * sizeof cs->cts[0]);
	if (!cs)
		return false;
	r->api = cs;
	cs->n = n; /* -1 (null) is answered as null */
	(void)krd_array(rd, flex, topic_min);
	for (int32_t i = 0; i < cs->n && !rd->err; i++)
		ct_decode_topic(r, rd, &cs->cts[i]);
	(void)krd_i32(rd); /* timeoutMs */
	bool validate_only = r->api_version >= 1 ? krd_bool(rd) : false;
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	assert(rd->end == r->frame + r->frame_len); /* the answer decodes configs again up to there */
	return ct_create_all(r, cs, validate_only);
}

/* ---- DeleteTopics (20) -------------------------------------------------------------- */

#define DELETE_TOPICS_MESSAGE_BYTES SLUICE_META_MSG_MAX

struct dt {
	struct kstr name;
	uint8_t id[16];
	int16_t err;
	int32_t parts; /* partitions whose directories the storage cores rename away */
	int32_t change; /* its change in the request's metadata batch, or -1 */
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

/* Whether one topic may be deleted (its name then in deleted_name), or
 * the error it is answered with. */
static bool dt_check(struct req *r, struct dt *d)
{
	if (!r->nc->b->cfg.delete_topic_enable) {
		dt_fail(d, KERR_TOPIC_DELETION_DISABLED, "Topic deletion is disabled.");
		return false;
	}
	if (!d->name.ptr) {
		const struct sluice_topic *t = sluice_proto_topic_by_id(sluice_proto_snap(r), d->id);
		if (!t) {
			dt_fail(d, KERR_UNKNOWN_TOPIC_ID, "This server does not host this topic ID.");
			return false;
		}
		snprintf(d->deleted_name, sizeof d->deleted_name, "%s", t->name);
	} else if (d->name.len > SLUICE_TOPIC_NAME_MAX) {
		/* never truncate: that would name another topic */
		dt_fail(d, KERR_UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic-partition.");
		return false;
	} else
		snprintf(d->deleted_name, sizeof d->deleted_name, "%.*s", d->name.len, d->name.ptr);
	return true;
}

static void dt_deleted(struct req *r);

/* One metadata batch: one journal append and one fsync for all topics.
 * The deletion leaves a tombstone with the topic id, so that directories a
 * crash leaves behind are provably the deleted topic's. dt_deleted runs
 * once the batch is back (at once when nothing is deleted or the metadata
 * queue is full). False when out of memory. */
static bool dt_delete_all(struct req *r, struct dt_state *ds)
{
	int32_t k = 0;
	for (int32_t i = 0; i < ds->n; i++)
		ds->topics[i].change = dt_check(r, &ds->topics[i]) ? k++ : -1;
	if (k == 0) {
		dt_deleted(r);
		return true;
	}
	struct sluice_meta_batch *b = sluice_proto_meta_batch(r, (uint32_t)k, 0, NULL);
	if (!b)
		return false;
	for (int32_t i = 0; i < ds->n; i++) {
		const struct dt *d = &ds->topics[i];
		if (d->change >= 0)
			b->changes[d->change] = (struct sluice_meta_change){.kind = SLUICE_META_DELETE_TOPIC,
									    .name = d->deleted_name,
									    .name_len = strlen(d->deleted_name)};
	}
	if (sluice_proto_meta_submit(r, dt_deleted) == SLUICE_META_SUBMITTED)
		return true;
	/* Kafka's answer to topic mutations faster than the controller takes
	 * them, which its admin client retries by itself (see CreateTopics). */
	for (int32_t i = 0; i < ds->n; i++)
		if (ds->topics[i].change >= 0) {
			dt_fail(&ds->topics[i], KERR_THROTTLING_QUOTA_EXCEEDED, "The metadata queue is full; retry later.");
			ds->topics[i].change = -1;
		}
	dt_deleted(r);
	return true;
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

/* The metadata batch is back (or none went out): the storage cores drop
 * the deleted topics' logs, then the finish answers. */
static void dt_deleted(struct req *r)
{
	struct dt_state *ds = r->api;
	assert(ds && r->nops == 0);
	const struct sluice_meta_batch *b = r->meta ? sluice_proto_meta_current(r, NULL) : NULL;
	int32_t total_parts = 0;
	for (int32_t i = 0; i < ds->n; i++) {
		struct dt *d = &ds->topics[i];
		if (d->change < 0)
			continue;
		assert(b && (uint32_t)d->change < b->change_n);
		const struct sluice_meta_change *c = &b->changes[d->change];
		if (c->error) {
			dt_fail(d, c->error, c->msg);
			continue;
		}
		memcpy(d->id, c->topic_id, 16);
		d->parts = c->topic_partitions;
		total_parts += d->parts;
	}
	if (total_parts > 0 && sluice_proto_ops_alloc(r, total_parts))
		dt_ops_fill(r, ds);
	sluice_proto_dispatch(r);
}

bool sluice_api_delete_topics_start(struct req *r, struct krd *rd)
{
	struct dt_state *ds = dt_decode(r, rd);
	if (!ds)
		return false;
	/* Delete in the metadata, then have the storage cores drop the logs. */
	return dt_delete_all(r, ds);
}

static void dt_answer(struct req *r);

/* A topic whose every partition directory was renamed away (or never
 * existed) needs its tombstone no more: forgotten in one batch, answered
 * when it is back (or at once: a tombstone left is only kept until the
 * next start). Every topic deleted has partitions (the metadata refuses a
 * topic without), so one run of ops each. */
static void dt_forget(struct req *r)
{
	const struct dt_state *ds = r->api;
	uint32_t k = 0;
	struct sluice_meta_batch *b = NULL;
	for (int32_t pass = 0; pass < 2; pass++) {
		if (pass && (k == 0 || !(b = sluice_proto_meta_batch(r, k, 0, NULL))))
			break;
		k = 0;
		for (int32_t i = 0, end; i < r->nops; i = end) {
			end = sluice_proto_topic_run_end(r, i);
			const struct dt *d = &ds->topics[r->ops[i].tindex];
			assert(!d->err && d->parts == end - i);
			bool all = true;
			for (int32_t j = i; j < end; j++)
				all &= r->ops[j].error == 0;
			if (all && pass)
				b->changes[k] = (struct sluice_meta_change){.kind = SLUICE_META_FORGET_DELETED, .id = d->id};
			k += all;
		}
	}
	if (!b || sluice_proto_meta_submit(r, dt_answer) != SLUICE_META_SUBMITTED)
		dt_answer(r);
}

void sluice_api_delete_topics_finish(struct req *r)
{
	assert(r->api && r->pending == 0);
	dt_forget(r);
}

static void dt_answer(struct req *r)
{
	const struct dt_state *ds = r->api;
	assert(ds && r->pending == 0);
	bool flex = r->flexible;
	int16_t v = r->api_version;
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
		sluice_proto_error_count(r, d->err);
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

enum {
	SRC_DYNAMIC_TOPIC = 1,
	SRC_DYNAMIC_BROKER = 2,
	SRC_DYNAMIC_DEFAULT_BROKER = 3,
	SRC_STATIC_BROKER = 4,
	SRC_DEFAULT = 5,
	SRC_DYNAMIC_BROKER_LOGGER = 6, /* every broker logger, as Kafka answers */
};
enum { CT_BOOLEAN = 1, CT_STRING = 2, CT_INT = 3, CT_LONG = 5, CT_DOUBLE = 6, CT_LIST = 7, CT_PASSWORD = 8 };

/* Topic config keys with the broker setting that supplies their default. */
struct topic_default {
	const char *key;
	int8_t type;
	const char *fixed; /* NULL: computed from the broker config */
};
static const struct topic_default topic_defaults[] = {
	{"cleanup.policy", CT_LIST, NULL},
	{"compression.type", CT_STRING, NULL},
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
	{"leader.replication.throttled.replicas", CT_LIST, ""},
	{"follower.replication.throttled.replicas", CT_LIST, ""},
};

static void topic_default_value(const struct sluice_config *c, const char *key, char *out, size_t len)
{
	if (!strcmp(key, "cleanup.policy"))
		snprintf(out, len, "%s", c->log_cleanup_policy);
	else if (!strcmp(key, "compression.type"))
		snprintf(out, len, "%s", c->compression_type);
	else if (!strcmp(key, "message.timestamp.type"))
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

/* One synonym of a config entry: a name it goes by, its value there, and
 * where that value comes from. */
struct dc_syn {
	const char *name;
	const char *value; /* NULL: null (a sensitive one) */
	int8_t source;
};

/* One entry: name, value (NULL: null), read-only, source, sensitive, and
 * synonyms (v1+, when asked; each level's value in precedence order). */
static void dc_entry_syn(struct req *r, const char *name, const char *value, bool read_only, int8_t source,
			 bool sensitive, int8_t type, const struct dc_syn *syn, int nsyn)
{
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t v = r->api_version;
	assert(nsyn >= 0 && (syn || nsyn == 0));
	kwr_cstr(w, flex, name);
	kwr_cstr(w, flex, value);
	kwr_bool(w, read_only);
	if (v == 0)
		kwr_bool(w, source == SRC_DEFAULT);
	else
		kwr_i8(w, source);
	kwr_bool(w, sensitive);
	if (v >= 1) {
		kwr_array(w, flex, nsyn);
		for (int i = 0; i < nsyn; i++) {
			kwr_cstr(w, flex, syn[i].name);
			kwr_cstr(w, flex, syn[i].value);
			kwr_i8(w, syn[i].source);
			if (flex)
				kwr_tags_empty(w);
		}
	}
	if (v >= 3) {
		kwr_i8(w, type);
		kwr_cstr(w, flex, NULL);
	}
	if (flex)
		kwr_tags_empty(w);
}

/* An entry whose only synonym (when asked) is itself. */
static void dc_entry(struct req *r, const char *name, const char *value, bool read_only, int8_t source,
		     int8_t type, bool synonyms)
{
	struct dc_syn self = {name, value, source};
	dc_entry_syn(r, name, value, read_only, source, false, type, &self, synonyms ? 1 : 0);
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
/* A BROKER_LOGGER resource names this broker's id, as Kafka requires (its
 * loggers are the process's own: the admin client sends each broker's to
 * it); else INVALID_REQUEST with Kafka's message, in msg. */
static int16_t logger_resource_check(struct req *r, struct kstr name, char *msg, size_t cap)
{
	int32_t id = r->nc->b->cfg.node_id;
	if (!name.ptr || name.len <= 0) {
		snprintf(msg, cap, "Broker id must not be empty");
		return KERR_INVALID_REQUEST;
	}
	char text[16];
	bool digits = name.len < (int32_t)sizeof text;
	for (int32_t i = 0; digits && i < name.len; i++)
		digits = (name.ptr[i] >= '0' && name.ptr[i] <= '9') || (i == 0 && name.ptr[i] == '-' && name.len > 1);
	if (!digits) {
		snprintf(msg, cap, "Broker id must be an integer, but it is: %.*s", name.len > 200 ? 200 : (int)name.len,
			 name.ptr);
		return KERR_INVALID_REQUEST;
	}
	memcpy(text, name.ptr, (size_t)name.len);
	text[name.len] = 0;
	if (strtol(text, NULL, 10) != id) {
		snprintf(msg, cap, "Unexpected broker id, expected %d but received %s", (int)id, text);
		return KERR_INVALID_REQUEST;
	}
	return KERR_NONE;
}

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
			/* Kafka answers for itself and the cluster-wide default only
			 * (its admin client sends a broker's resource to that broker) */
			*msg = "Unexpected broker id: this broker answers for its own id or the empty name (the "
			       "cluster-wide default) only";
			return KERR_INVALID_REQUEST;
		}
	} else if (d->type == 8) {
		static _Thread_local char why[256];
		int16_t err = logger_resource_check(r, d->name, why, sizeof why);
		*msg = err ? why : NULL;
		return err;
	} else {
		*msg = "Unsupported resource type";
		return KERR_INVALID_REQUEST;
	}
	return KERR_NONE;
}

#define TOPIC_DEFAULTS_N (sizeof topic_defaults / sizeof *topic_defaults)

/* A topic's configs: every key with its default, or the topic's override. */
static void dc_write_topic(struct req *r, const struct dres *d, const struct sluice_topic *t, bool synonyms)
{
	const struct sluice_config *cfg = sluice_proto_config(r);
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

/* Broker loggers: root and one per area (common/log.h), each with the
 * level in effect, its own or the root's; Kafka lists every logger with
 * source DYNAMIC_BROKER_LOGGER_CONFIG, which kafka-configs.sh relies on
 * (it lists, and lets an operator set, only the loggers so described). */
static void dc_write_loggers(struct req *r, const struct dres *d)
{
	int n = sluice_log_logger_count(), want = 0;
	for (int i = 0; i < n; i++)
		want += key_wanted(d->keys, d->nkeys, sluice_log_logger_name(i));
	kwr_array(&r->out, r->flexible, want);
	for (int i = 0; i < n; i++)
		if (key_wanted(d->keys, d->nkeys, sluice_log_logger_name(i)))
			dc_entry(r, sluice_log_logger_name(i), sluice_log_level_name(sluice_log_logger_level(i)), false,
				 SRC_DYNAMIC_BROKER_LOGGER, CT_STRING, false);
}

/* ---- broker configs: static, and dynamic in cluster mode --------------------------------- */

static int8_t dc_broker_type(const struct sluice_broker_key *k)
{
	switch (k ? k->type : 's') {
	case 'i': return CT_INT;
	case 'l': return CT_LONG;
	case 'd': return CT_DOUBLE;
	case 'b': return CT_BOOLEAN;
	case 'L': return CT_LIST;
	case 'p': return CT_PASSWORD;
	default: return CT_STRING;
	}
}

#define DC_SYNONYMS_MAX (4 * SLUICE_BROKER_SYNONYMS_MAX) /* four levels of each name */

/* One broker config key resolved as Kafka's ConfigHelper does: every
 * level's value of the key and of its synonyms, in precedence order (this
 * broker's dynamic, the cluster-wide dynamic default, server.properties,
 * the default), those before the key's own name dropped; the first gives
 * the value and the source. */
struct dc_key {
	struct dc_syn syn[DC_SYNONYMS_MAX];
	int nsyn;
	char statics[SLUICE_BROKER_SYNONYMS_MAX][SLUICE_CONFIG_STRING_MAX];
	bool sensitive;
	int8_t type;
	bool dynamic; /* Kafka changes it at run time */
};

static void dc_key_add(struct dc_key *k, const char *name, const char *value, int8_t source)
{
	assert(k->nsyn < DC_SYNONYMS_MAX);
	k->syn[k->nsyn++] = (struct dc_syn){name, k->sensitive ? NULL : value, source};
}

/* per_broker: the resource is this broker's id (every level); else the
 * cluster-wide default (its level only). bc may be NULL (no dynamic config). */
static void dc_key_resolve(struct dc_key *k, const char *name, const struct sluice_broker_config *bc,
			   const struct sluice_config *file, bool per_broker)
{
	const char *names[SLUICE_BROKER_SYNONYMS_MAX];
	size_t nn = sluice_broker_config_synonyms(name, names);
	bool per_broker_key;
	const struct sluice_broker_key *bk = sluice_broker_key_find(name, &per_broker_key);
	k->nsyn = 0;
	k->sensitive = bk && bk->type == 'p';
	k->type = dc_broker_type(bk);
	k->dynamic = bk != NULL;
	for (int level = per_broker ? 0 : 1; level < 2 && bc; level++)
		for (size_t i = 0; i < nn; i++) {
			const char *v = sluice_broker_config_get(bc, level == 0, names[i]);
			if (v)
				dc_key_add(k, names[i], v, level == 0 ? SRC_DYNAMIC_BROKER : SRC_DYNAMIC_DEFAULT_BROKER);
		}
	for (size_t i = 0; per_broker && i < nn; i++) {
		bool is_def;
		if (sluice_config_value(file, names[i], k->statics[i], sizeof k->statics[i], &is_def) && !is_def)
			dc_key_add(k, names[i], k->statics[i], SRC_STATIC_BROKER);
	}
	for (size_t i = 0; per_broker && i < nn; i++) {
		const char *def = sluice_config_default(names[i]);
		if (def)
			dc_key_add(k, names[i], def, SRC_DEFAULT);
	}
	int drop = 0; /* e.g. log.retention.hours set when describing log.retention.ms */
	while (drop < k->nsyn && strcmp(k->syn[drop].name, name) != 0)
		drop++;
	memmove(k->syn, k->syn + drop, (size_t)(k->nsyn - drop) * sizeof k->syn[0]);
	k->nsyn -= drop;
}

static void dc_write_key(struct req *r, const char *name, const struct sluice_broker_config *bc, bool per_broker,
			 bool synonyms)
{
	struct dc_key k;
	dc_key_resolve(&k, name, bc, &r->nc->b->cfg, per_broker);
	bool cluster = sluice_proto_cluster_mode(r);
	const char *value = k.nsyn ? k.syn[0].value : NULL;
	int8_t source = k.nsyn ? k.syn[0].source : SRC_DEFAULT;
	dc_entry_syn(r, name, value, !(cluster && k.dynamic), source, k.sensitive, k.type, k.syn, synonyms ? k.nsyn : 0);
}

/* Whether a dynamic-only key (not of server.properties) at `level` is
 * listed: not shadowed by the same name listed before it. */
static bool dc_dynamic_listed(const struct sluice_broker_config *bc, bool own_level, const char *name)
{
	if (sluice_config_default(name))
		return false; /* listed with server.properties' keys */
	return own_level || !sluice_broker_config_get(bc, true, name);
}

/* This broker's configuration: every key of server.properties, then the
 * dynamic keys Sluice has no property of (as the quorum holds them). */
static void dc_write_broker(struct req *r, const struct dres *d, bool synonyms)
{
	const struct sluice_config *file = &r->nc->b->cfg;
	const struct sluice_broker_config *bc = sluice_proto_snap(r)->broker_config;
	int32_t count = 0;
	const char *name;
	char val[SLUICE_CONFIG_STRING_MAX];
	bool is_def;
	for (int pass = 0; pass < 2; pass++) {
		if (pass == 1)
			kwr_array(&r->out, r->flexible, count);
		for (size_t k = 0; sluice_config_entry(file, k, &name, val, sizeof val, &is_def); k++) {
			if (!key_wanted(d->keys, d->nkeys, name))
				continue;
			if (pass == 0)
				count++;
			else
				dc_write_key(r, name, bc, true, synonyms);
		}
		for (int level = 0; level < 2 && bc; level++) {
			const struct sluice_broker_dynamic *v = level == 0 ? bc->own : bc->defaults;
			uint32_t n = level == 0 ? bc->own_n : bc->default_n;
			for (uint32_t i = 0; i < n; i++) {
				if (!dc_dynamic_listed(bc, level == 0, v[i].name) || !key_wanted(d->keys, d->nkeys, v[i].name))
					continue;
				if (pass == 0)
					count++;
				else
					dc_write_key(r, v[i].name, bc, true, synonyms);
			}
		}
	}
}

/* Cluster mode, the empty name: the cluster-wide default overrides only,
 * as Kafka answers it. */
static void dc_write_broker_default(struct req *r, const struct dres *d, bool synonyms)
{
	const struct sluice_broker_config *bc = sluice_proto_snap(r)->broker_config;
	uint32_t n = bc ? bc->default_n : 0;
	int32_t count = 0;
	for (uint32_t i = 0; i < n; i++)
		count += key_wanted(d->keys, d->nkeys, bc->defaults[i].name);
	kwr_array(&r->out, r->flexible, count);
	for (uint32_t i = 0; i < n; i++)
		if (key_wanted(d->keys, d->nkeys, bc->defaults[i].name))
			dc_write_key(r, bc->defaults[i].name, bc, false, synonyms);
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
		sluice_proto_error_count(r, err);
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
		else if (sluice_proto_cluster_mode(r) && (!d->name.ptr || d->name.len == 0))
			dc_write_broker_default(r, d, synonyms);
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

/* The coordinator of a group (or transactional id): the leader of its
 * __consumer_offsets partition (Kafka's placement, as the group requests
 * are routed), with its endpoint from the snapshot's brokers. proto.c has
 * the topic created first; where it still does not exist, this broker
 * answers for itself in single-node mode (its coordinator then finds the
 * partition unavailable, which clients retry) and COORDINATOR_NOT_AVAILABLE
 * in cluster mode. Returns the error to answer, else sets *node. */
static int16_t coordinator_find(struct req *r, struct kstr key, struct sluice_meta_broker *self,
				const struct sluice_meta_broker **node)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	uint32_t n;
	const struct sluice_meta_broker *bs = brokers_of(r, &n, self);
	const struct sluice_topic *t = sluice_meta_find(sluice_proto_snap(r), SLUICE_OFFSETS_TOPIC,
							strlen(SLUICE_OFFSETS_TOPIC));
	int32_t p = sluice_group_partition(key.ptr ? key.ptr : "", key.ptr ? (size_t)key.len : 0,
					   cfg->offsets_topic_partitions);
	const struct sluice_partition_state *st = t ? sluice_topic_partition(t, p) : NULL;
	int32_t leader = st ? st->leader : sluice_proto_cluster_mode(r) ? -1 : cfg->node_id;
	*node = NULL;
	for (uint32_t i = 0; leader >= 0 && i < n && !*node; i++)
		if (bs[i].node_id == leader)
			*node = &bs[i];
	return *node ? KERR_NONE : KERR_COORDINATOR_NOT_AVAILABLE; /* leaderless, or its broker is fenced */
}

/* NodeId, Host, Port of a coordinator, or Kafka's -1, "", -1 with an error. */
static void coordinator_write(struct kwr *w, bool flex, const struct sluice_meta_broker *node)
{
	kwr_i32(w, node ? node->node_id : -1);
	kwr_cstr(w, flex, node ? node->host : "");
	kwr_i32(w, node ? node->port : -1);
}

/* The keys of the request: v0-3 one (*single), v4 an array (r->api). */
static int32_t find_coordinator_decode(struct req *r, struct krd *rd, struct kstr *single, struct kstr **keys)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	int32_t n = 0;
	*keys = NULL;
	if (v <= 3) {
		*single = krd_string(rd, flex);
		if (v >= 1)
			(void)krd_i8(rd); /* KeyType: transactional ids are placed as groups are */
	} else {
		(void)krd_i8(rd);
		n = krd_array(rd, flex, 1);
		if (n > 0 && !rd->err) {
			*keys = calloc((size_t)n, sizeof **keys);
			if (!*keys)
				return -1;
			r->api = *keys;
			for (int32_t i = 0; i < n && !rd->err; i++)
				(*keys)[i] = krd_string(rd, flex);
		}
	}
	if (flex)
		krd_tags_skip(rd);
	return rd->err ? -1 : n;
}

bool sluice_api_find_coordinator_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct kstr single = {0}, *keys;
	int32_t n = find_coordinator_decode(r, rd, &single, &keys);
	if (n < 0)
		return false;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	struct sluice_meta_broker self;
	const struct sluice_meta_broker *node;
	if (v >= 1)
		kwr_i32(w, 0);
	if (v <= 3) {
		int16_t e = coordinator_find(r, single, &self, &node);
		sluice_proto_error_count(r, e);
		kwr_i16(w, e);
		if (v >= 1)
			kwr_cstr(w, flex, NULL);
		coordinator_write(w, flex, node);
	} else {
		kwr_array(w, flex, n > 0 ? n : 0);
		for (int32_t i = 0; i < n; i++) {
			int16_t e = coordinator_find(r, keys[i], &self, &node);
			kwr_string(w, flex, keys[i].ptr ? keys[i].ptr : "", keys[i].ptr ? keys[i].len : 0);
			coordinator_write(w, flex, node);
			sluice_proto_error_count(r, e);
			kwr_i16(w, e);
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

/* What InitProducerId answers (r->api). */
struct ip_answer {
	bool fresh; /* a fresh id was asked of the metadata */
	int16_t err;
	int16_t epoch;
	int64_t pid;
};

static void ip_answer(struct req *r)
{
	struct ip_answer *a = r->api;
	assert(a);
	if (a->fresh) {
		const struct sluice_meta_batch *b = sluice_proto_meta_current(r, NULL);
		assert(b->change_n == 1 && b->changes[0].kind == SLUICE_META_ALLOCATE_PRODUCER_ID);
		a->pid = b->changes[0].producer_id;
		a->epoch = 0;
		if (a->pid < 0) {
			a->err = KERR_KAFKA_STORAGE_ERROR;
			a->epoch = -1;
		}
	}
	sluice_proto_resp_begin(r);
	kwr_i32(&r->out, 0);
	kwr_i16(&r->out, a->err);
	kwr_i64(&r->out, a->pid);
	kwr_i16(&r->out, a->epoch);
	if (r->flexible)
		kwr_tags_empty(&r->out);
	sluice_proto_resp_end(r);
}

/* Idempotent producers only: a fresh id at epoch 0 (from the metadata,
 * answered once it is durable), or, when the client names its current id
 * and epoch (v3+), the same id one epoch on. */
bool sluice_api_init_producer_id_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int16_t v = r->api_version;
	struct kstr txn = krd_string(rd, flex);
	(void)krd_i32(rd);
	struct ip_answer *a = calloc(1, sizeof *a);
	if (!a)
		return false;
	r->api = a;
	a->pid = -1;
	a->epoch = -1;
	if (v >= 3) {
		a->pid = krd_i64(rd);
		a->epoch = krd_i16(rd);
	}
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	if (txn.ptr) {
		a->err = KERR_INVALID_REQUEST; /* transactions are not supported yet */
		a->pid = -1;
		a->epoch = -1;
	} else if (a->pid >= 0 && a->epoch >= 0 && a->epoch < INT16_MAX - 1) {
		a->epoch++;
	} else {
		struct sluice_meta_batch *b = sluice_proto_meta_batch(r, 1, 0, NULL);
		if (!b)
			return false;
		b->changes[0].kind = SLUICE_META_ALLOCATE_PRODUCER_ID;
		a->fresh = true;
		if (sluice_proto_meta_submit(r, ip_answer) == SLUICE_META_SUBMITTED)
			return true;
		a->fresh = false;
		/* The metadata queue is full: COORDINATOR_LOAD_IN_PROGRESS is an
		 * error Kafka's producer (and librdkafka) retries InitProducerId on
		 * by itself; REQUEST_TIMED_OUT would be fatal to Kafka's. */
		a->err = KERR_COORDINATOR_LOAD_IN_PROGRESS;
		a->pid = -1;
		a->epoch = -1;
	}
	ip_answer(r);
	return true;
}

/* ---- CreatePartitions (37) ------------------------------------------------------- */

#define CREATE_PARTITIONS_MESSAGE_BYTES 200

struct cp {
	struct kstr name;
	int32_t count;
	struct sluice_assignment_ref asg; /* its Assignments in the frame, decoded again into its change */
	int32_t change; /* its change in the request's metadata batch, or -1 */
	int16_t err;
	char msg[CREATE_PARTITIONS_MESSAGE_BYTES];
};

static void cp_fail(struct cp *cp, int16_t err, const char *msg)
{
	cp->err = err;
	snprintf(cp->msg, sizeof cp->msg, "%s", msg);
}

/* One topic: Name, Count, Assignments (counted and bounded here, checked
 * by the metadata backend, as CreateTopics' are). */
static void cp_decode_topic(struct req *r, struct krd *rd, struct cp *cp)
{
	bool flex = r->flexible;
	cp->name = krd_string(rd, flex);
	cp->count = krd_i32(rd);
	char msg[CREATE_PARTITIONS_MESSAGE_BYTES];
	int16_t e = sluice_assignment_scan(rd, flex, false, &cp->asg, msg, sizeof msg);
	if (e && !rd->err)
		cp_fail(cp, e, msg);
	if (flex)
		krd_tags_skip(rd);
}

/* The request (r->api). */
struct cp_state {
	int32_t n; /* as the request gave it */
	struct cp cps[];
};

/* Refuse duplicates, nameless topics and those past the assignments
 * bound; number the others' changes. Returns how many (and what they hold
 * in *x), or -1 when out of memory. */
static int32_t cp_plan(struct cp_state *cs, struct change_extra *x)
{
	int32_t n = cs->n;
	struct kstr *names = n > 0 ? malloc((size_t)n * sizeof *names) : NULL;
	bool *dup = n > 0 ? calloc((size_t)n, sizeof *dup) : NULL;
	bool ok = n <= 0 || (names && dup);
	for (int32_t i = 0; ok && i < n; i++)
		names[i] = cs->cps[i].name;
	ok = ok && find_duplicates(names, n, dup);
	free(names);
	int32_t k = 0;
	for (int32_t i = 0; ok && i < n; i++) {
		struct cp *cp = &cs->cps[i];
		cp->change = -1;
		if (cp->err)
			continue;
		size_t an = assignment_ints(&cp->asg);
		if (dup[i]) {
			cp_fail(cp, KERR_INVALID_REQUEST, "Duplicate topic in request.");
		} else if (!cp->name.ptr) {
			cp->err = KERR_INVALID_REQUEST;
		} else if (x->ints + an > ASSIGNMENT_INTS_PER_REQUEST_MAX) {
			cp_fail(cp, KERR_INVALID_REPLICA_ASSIGNMENT, "Too many replica assignments in one request.");
		} else {
			x->ints += an;
			x->assignments += an > 0;
			cp->change = k++;
		}
	}
	free(dup);
	return ok ? k : -1;
}

static void cp_answer(struct req *r);

/* Grow every topic without an error yet, in one metadata batch (one
 * journal write and fsync) for the request; cp_answer runs once it is
 * back (at once with nothing to grow or the metadata queue full). False
 * when out of memory. */
static bool cp_apply_all(struct req *r, struct cp_state *cs, bool validate_only)
{
	struct change_extra x = {0};
	int32_t k = cp_plan(cs, &x);
	if (k < 0)
		return false;
	if (k == 0) {
		cp_answer(r);
		return true;
	}
	void *extra;
	struct sluice_meta_batch *b = sluice_proto_meta_batch(r, (uint32_t)k, change_extra_bytes(&x), &extra);
	if (!b)
		return false;
	b->validate_only = validate_only;
	struct change_extra_at at = change_extra_cut(extra, &x);
	for (int32_t i = 0; i < cs->n; i++) {
		const struct cp *cp = &cs->cps[i];
		if (cp->change < 0)
			continue;
		b->changes[cp->change] = (struct sluice_meta_change){
			.kind = SLUICE_META_CREATE_PARTITIONS, .name = cp->name.ptr, .name_len = (size_t)cp->name.len,
			.partitions = cp->count,
			.assignment = cp->asg.n > 0 ? change_assignment(&cp->asg, r->frame + r->frame_len, r->flexible,
									 false, &at)
						    : NULL};
	}
	if (sluice_proto_meta_submit(r, cp_answer) == SLUICE_META_SUBMITTED)
		return true;
	/* Kafka's answer to topic mutations faster than the controller takes
	 * them, which its admin client retries by itself (see CreateTopics). */
	for (int32_t i = 0; i < cs->n; i++)
		if (cs->cps[i].change >= 0) {
			cp_fail(&cs->cps[i], KERR_THROTTLING_QUOTA_EXCEEDED, "The metadata queue is full; retry later.");
			cs->cps[i].change = -1;
		}
	cp_answer(r);
	return true;
}

static void cp_answer(struct req *r)
{
	struct cp_state *cs = r->api;
	assert(cs);
	const struct sluice_meta_batch *b = r->meta ? sluice_proto_meta_current(r, NULL) : NULL;
	bool flex = r->flexible;
	for (int32_t i = 0; i < cs->n; i++) {
		struct cp *cp = &cs->cps[i];
		if (cp->change < 0)
			continue;
		assert(b && (uint32_t)cp->change < b->change_n);
		const struct sluice_meta_change *c = &b->changes[cp->change];
		if (c->error == KERR_UNKNOWN_TOPIC_OR_PARTITION)
			cp_fail(cp, c->error, "");
		else if (c->error)
			cp_fail(cp, c->error, c->msg);
		if (cp->err == KERR_UNKNOWN_TOPIC_OR_PARTITION)
			snprintf(cp->msg, sizeof cp->msg, "The topic '%.*s' does not exist.",
				 cp->name.len > 200 ? 200 : cp->name.len, cp->name.ptr);
	}
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, cs->n);
	for (int32_t i = 0; i < cs->n; i++) {
		const struct cp *cp = &cs->cps[i];
		kwr_string(w, flex, cp->name.ptr ? cp->name.ptr : "", cp->name.ptr ? cp->name.len : 0);
		sluice_proto_error_count(r, cp->err);
		kwr_i16(w, cp->err);
		kwr_cstr(w, flex, cp->err ? cp->msg : NULL);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

bool sluice_api_create_partitions_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, 7);
	if (rd->err)
		return false;
	struct cp_state *cs = calloc(1, sizeof *cs + (size_t)(n > 0 ? n : 0) * sizeof cs->cps[0]);
	if (!cs)
		return false;
	r->api = cs;
	cs->n = n;
	for (int32_t i = 0; i < n && !rd->err; i++)
		cp_decode_topic(r, rd, &cs->cps[i]);
	(void)krd_i32(rd); /* TimeoutMs */
	bool validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	return cp_apply_all(r, cs, validate_only);
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

/* Broker loggers (resource type 8): a resource's changes, checked as its
 * entries are decoded and applied together once all of them passed. */
#define LOGGER_UNCHANGED (-2)
_Static_assert(LOGGER_UNCHANGED != SLUICE_LOG_INHERIT && LOGGER_UNCHANGED < SLUICE_LOG_ERROR, "a distinct mark");
static void logger_apply(int8_t *levels)
{
	for (int i = 0; i < sluice_log_logger_count(); i++)
		if (levels[i] != LOGGER_UNCHANGED) {
			int rc = sluice_log_logger_set(i, levels[i]);
			assert(rc == 0); /* checked when decoded */
			(void)rc;
			SLOG_INFO("broker", "logger %s: %s", sluice_log_logger_name(i),
				  levels[i] == SLUICE_LOG_INHERIT ? "the root logger's level again" : sluice_log_level_name(levels[i]));
		}
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
	int32_t change; /* its change in the request's metadata batch, or -1 */
	bool logger;
	bool logger_changes;   /* levels holds a change */
	int8_t levels[SLUICE_LOG_LOGGERS_MAX]; /* per logger: a level, SLUICE_LOG_INHERIT, or LOGGER_UNCHANGED */
	bool forward;          /* cluster mode: decided by the controller */
	const uint8_t *cfg_at; /* its Configs array in the frame (forwarded: encoded again from there) */
};

/* The request (r->api). */
struct ar_state {
	int32_t n;
	bool validate_only;
	struct ar ars[];
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
		a->err = logger_resource_check(r, a->name, a->msg, sizeof a->msg);
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
	/* Kafka's checks and messages (its ConfigAdminManager), for SET and
	 * DELETE; a level Kafka takes that Sluice has not (OFF, FATAL, ALL) is
	 * refused as unsupported. */
	if (!a->logger_changes) {
		memset(a->levels, LOGGER_UNCHANGED, sizeof a->levels);
		a->logger_changes = true;
	}
	int i = sluice_log_logger_find(key);
	if (i < 0) {
		a->err = KERR_INVALID_CONFIG;
		snprintf(a->msg, sizeof a->msg, "Logger %.64s does not exist!", key);
		return;
	}
	if (op == OP_DELETE) {
		if (i == 0) {
			a->err = KERR_INVALID_REQUEST;
			snprintf(a->msg, sizeof a->msg, "Removing the log level of the root logger is not allowed");
		} else
			a->levels[i] = SLUICE_LOG_INHERIT;
		return;
	}
	if (op != OP_SET) {
		a->err = KERR_INVALID_REQUEST;
		snprintf(a->msg, sizeof a->msg, "Operation %s is not supported for broker loggers",
			 op == OP_APPEND ? "APPEND" : op == OP_SUBTRACT ? "SUBTRACT" : "unknown");
		return;
	}
	int lvl = value ? sluice_log_level_parse(value) : -1;
	if (lvl < 0) {
		a->err = KERR_INVALID_CONFIG;
		snprintf(a->msg, sizeof a->msg,
			 "Cannot set the log level of %.64s to %.32s as it is not a supported log level. "
			 "Valid levels are ERROR, WARN, INFO, DEBUG, TRACE",
			 key, value ? value : "null");
		return;
	}
	a->levels[i] = (int8_t)lvl;
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
	if (a->err || rd->err || !key.ptr || a->forward)
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

static void ar_answer(struct req *r);

/* Change every topic resource without an error, in one metadata batch
 * (one journal write and fsync; its changes were allocated with room for
 * one per resource); loggers change at once. ar_answer runs once the batch
 * is back, or at once with nothing to change or the metadata queue full. */
static void ar_commit(struct req *r, struct ar_state *as, bool validate_only)
{
	struct sluice_meta_batch *b = sluice_proto_meta_current(r, NULL);
	assert(b->change_n == (uint32_t)(as->n > 0 ? as->n : 0));
	uint32_t k = 0;
	for (int32_t i = 0; i < as->n; i++) {
		struct ar *a = &as->ars[i];
		a->change = -1;
		if (a->err || validate_only)
			continue;
		if (a->logger) {
			if (a->logger_changes)
				logger_apply(a->levels);
			continue;
		}
		a->change = (int32_t)k;
		b->changes[k++] = (struct sluice_meta_change){.kind = SLUICE_META_SET_TOPIC_CONFIGS,
							      .name = a->name.ptr,
							      .name_len = (size_t)a->name.len,
							      .configs = a->c,
							      .config_n = a->cn};
	}
	b->change_n = k;
	if (k > 0 && sluice_proto_meta_submit(r, ar_answer) == SLUICE_META_SUBMITTED)
		return;
	/* The metadata queue full: REQUEST_TIMED_OUT, a retriable error
	 * (Kafka's TimeoutException) of the kind Kafka answers when its
	 * controller does not take a change in time; AlterConfigs has no
	 * throttling error of its own. */
	for (int32_t i = 0; i < as->n; i++)
		if (as->ars[i].change >= 0) {
			as->ars[i].err = KERR_REQUEST_TIMED_OUT;
			snprintf(as->ars[i].msg, sizeof as->ars[i].msg, "The metadata queue is full; retry later.");
			as->ars[i].change = -1;
		}
	ar_answer(r);
}

static void ar_answer(struct req *r)
{
	struct ar_state *as = r->api;
	assert(as);
	bool flex = r->flexible;
	for (int32_t i = 0; i < as->n; i++) {
		struct ar *a = &as->ars[i];
		if (a->change < 0)
			continue;
		const struct sluice_meta_batch *b = sluice_proto_meta_current(r, NULL);
		assert((uint32_t)a->change < b->change_n);
		const struct sluice_meta_change *c = &b->changes[a->change];
		a->err = c->error;
		if (c->error)
			snprintf(a->msg, sizeof a->msg, "%s", c->msg);
	}
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0);
	kwr_array(w, flex, as->n);
	for (int32_t i = 0; i < as->n; i++) {
		const struct ar *a = &as->ars[i];
		sluice_proto_error_count(r, a->err);
		kwr_i16(w, a->err);
		kwr_cstr(w, flex, a->err ? a->msg : NULL);
		kwr_i8(w, a->type);
		kwr_string(w, flex, a->name.ptr ? a->name.ptr : "", a->name.ptr ? a->name.len : 0);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

/* ---- cluster mode: broker configs are the controller's ----
 *
 * As a Kafka broker in KRaft mode does, a request naming a BROKER resource
 * goes to the active controller, which checks the changes and stores them
 * in the quorum (the per-broker ones of any broker id, and the
 * cluster-wide default, resource name ""); every broker then applies them
 * from its metadata (control/broker_config.h). The whole request is
 * relayed, its TOPIC resources included (the controller decides those
 * too); only BROKER_LOGGER resources, this process's log level, are
 * handled here, and the answers are merged in request order. It goes out
 * at the flexible version whatever the client's (IncrementalAlterConfigs
 * v1, AlterConfigs v2), rewritten from the frame, and the backend answers
 * once this broker's metadata shows the change. */

#define AF_INCREMENTAL_VERSION 1
#define AF_ALTER_VERSION 2
#define AF_ENTRY_BYTES_MIN 6 /* a flexible response entry: error, null message, type, empty name, tags */

/* Whether the request (at rd, not consumed) names a BROKER resource. */
static bool ar_names_broker(struct req *r, struct krd scan, bool incremental)
{
	bool flex = r->flexible;
	int32_t n = krd_array(&scan, flex, 4);
	for (int32_t i = 0; i < n && !scan.err; i++) {
		if (krd_i8(&scan) == 4)
			return true;
		(void)krd_string(&scan, flex);
		int32_t nc = krd_array(&scan, flex, 3);
		for (int32_t k = 0; k < nc && !scan.err; k++) {
			(void)krd_string(&scan, flex);
			if (incremental)
				(void)krd_i8(&scan);
			(void)krd_string(&scan, flex);
			if (flex)
				krd_tags_skip(&scan);
		}
		if (flex)
			krd_tags_skip(&scan);
	}
	return false;
}

/* The forwarded resources as the controller's request, in w. */
static void af_encode(struct req *r, const struct ar_state *as, bool incremental, struct kwr *w)
{
	bool flex = r->flexible;
	int32_t n = 0;
	for (int32_t i = 0; i < as->n; i++)
		n += as->ars[i].forward;
	kwr_array(w, true, n);
	for (int32_t i = 0; i < as->n; i++) {
		const struct ar *a = &as->ars[i];
		if (!a->forward)
			continue;
		kwr_i8(w, a->type);
		kwr_string(w, true, a->name.ptr, a->name.len);
		struct krd cr;
		krd_init(&cr, a->cfg_at, (size_t)(r->frame + r->frame_len - a->cfg_at));
		int32_t nc = krd_array(&cr, flex, 3);
		kwr_array(w, true, nc);
		for (int32_t k = 0; k < nc && !cr.err; k++) {
			struct kstr key = krd_string(&cr, flex);
			int8_t op = incremental ? krd_i8(&cr) : 0;
			struct kstr val = krd_string(&cr, flex);
			if (flex)
				krd_tags_skip(&cr);
			kwr_string(w, true, key.ptr, key.ptr ? key.len : -1);
			if (incremental)
				kwr_i8(w, op);
			kwr_string(w, true, val.ptr, val.ptr ? val.len : -1);
			kwr_tags_empty(w);
		}
		assert(!cr.err); /* the frame was decoded once already */
		kwr_tags_empty(w);
	}
	kwr_bool(w, as->validate_only);
	kwr_tags_empty(w);
}

static void af_fail_forwarded(struct ar_state *as, int16_t err, const char *msg)
{
	for (int32_t i = 0; i < as->n; i++)
		if (as->ars[i].forward) {
			as->ars[i].err = err;
			snprintf(as->ars[i].msg, sizeof as->ars[i].msg, "%s", msg);
		}
}

/* The controller's answer into the forwarded resources; false when it does
 * not decode or does not name them in order. */
static bool af_take_answer(struct ar_state *as, const uint8_t *resp, size_t len)
{
	struct krd rd;
	krd_init(&rd, resp, len);
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	int32_t n = krd_array(&rd, true, AF_ENTRY_BYTES_MIN), k = 0;
	for (int32_t i = 0; i < as->n && !rd.err; i++) {
		struct ar *a = &as->ars[i];
		if (!a->forward)
			continue;
		if (k++ >= n)
			return false;
		int16_t err = krd_i16(&rd);
		struct kstr msg = krd_string(&rd, true);
		int8_t type = krd_i8(&rd);
		struct kstr name = krd_string(&rd, true);
		krd_tags_skip(&rd);
		int32_t want_len = a->name.ptr ? a->name.len : 0; /* a null name comes back empty */
		if (rd.err || type != a->type || !name.ptr || name.len != want_len ||
		    (name.len && memcmp(name.ptr, a->name.ptr, (size_t)name.len)))
			return false;
		a->err = err;
		snprintf(a->msg, sizeof a->msg, "%.*s", msg.ptr ? (int)msg.len : 0, msg.ptr ? msg.ptr : "");
	}
	krd_tags_skip(&rd); /* SluiceMetadataOffset among them: not the client's */
	return !rd.err && k == n && krd_left(&rd) == 0;
}

static void af_answered(struct req *r, int16_t error, const uint8_t *resp, size_t len)
{
	struct ar_state *as = r->api;
	assert(as && (error || resp));
	if (error)
		af_fail_forwarded(as, error, "No active controller answered; retry later.");
	else if (!af_take_answer(as, resp, len)) {
		SLOG_WARN("admin", "the controller's answer to a relayed %s does not decode (%zu bytes)",
			  r->api_key == API_INCREMENTAL_ALTER_CONFIGS ? "IncrementalAlterConfigs" : "AlterConfigs", len);
		af_fail_forwarded(as, KERR_UNKNOWN_SERVER_ERROR, "The controller's answer does not decode.");
	}
	ar_answer(r);
}

/* Decode every resource (BROKER_LOGGER ones applied here), then relay the
 * rest. False: a malformed request (the connection closes). */
static bool af_start(struct req *r, struct krd *rd, bool incremental)
{
	bool flex = r->flexible;
	int32_t n = krd_array(rd, flex, 4);
	if (rd->err || n > ALTER_CONFIGS_RESOURCES_MAX)
		return false;
	int32_t cnt = n > 0 ? n : 0;
	struct ar_state *as = calloc(1, sizeof *as + (size_t)cnt * sizeof as->ars[0]);
	if (!as)
		return false;
	r->api = as;
	as->n = n;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		struct ar *a = &as->ars[i];
		a->type = krd_i8(rd);
		a->name = krd_string(rd, flex);
		a->change = -1;
		a->logger = a->type == 8;
		a->forward = !a->logger;
		a->cfg_at = rd->p;
		int32_t nc = krd_array(rd, flex, 3);
		for (int32_t k = 0; k < nc && !rd->err; k++)
			ar_decode_entry(r, rd, a, incremental);
		if (flex)
			krd_tags_skip(rd);
	}
	as->validate_only = krd_bool(rd);
	if (flex)
		krd_tags_skip(rd);
	if (rd->err)
		return false;
	for (int32_t i = 0; i < n; i++) {
		struct ar *a = &as->ars[i];
		if (a->logger && !a->err && !as->validate_only && a->logger_changes)
			logger_apply(a->levels);
	}
	struct kwr w;
	/* flexible lengths take at most twice the bytes; the margin covers the
	 * reserve of the first 256 (kwr_init) */
	size_t cap = 2 * (size_t)r->frame_len + 1024;
	kwr_init(&w, 256, cap < SLUICE_META_FORWARD_BYTES_MAX ? cap : SLUICE_META_FORWARD_BYTES_MAX);
	af_encode(r, as, incremental, &w);
	bool sent = !w.err && sluice_proto_meta_forward_as(r, r->api_key,
							   incremental ? AF_INCREMENTAL_VERSION : AF_ALTER_VERSION,
							   w.buf, w.len, af_answered);
	if (!sent)
		af_fail_forwarded(as, w.err ? KERR_INVALID_REQUEST : KERR_REQUEST_TIMED_OUT,
				  w.err ? "The request is too large to relay to the controller."
					: "The controller cannot be reached now; retry later.");
	kwr_free(&w);
	if (!sent)
		ar_answer(r);
	return true;
}

bool sluice_api_alter_configs_start(struct req *r, struct krd *rd)
{
	bool flex = r->flexible, incremental = r->api_key == API_INCREMENTAL_ALTER_CONFIGS;
	if (sluice_proto_cluster_mode(r) && ar_names_broker(r, *rd, incremental))
		return af_start(r, rd, incremental);
	int32_t n = krd_array(rd, flex, 4);
	/* Each resource gets a working copy of up to 32 overrides (10 KB):
	 * bound how many one request may name. */
	if (rd->err || n > ALTER_CONFIGS_RESOURCES_MAX)
		return false;
	int32_t cnt = n > 0 ? n : 0;
	struct ar_state *as = calloc(1, sizeof *as + (size_t)cnt * sizeof as->ars[0]);
	if (!as)
		return false;
	r->api = as;
	as->n = n;
	/* One allocation, kept until the batch is back, holds a change and the
	 * working copy of the overrides for each resource. */
	struct sluice_topic_config *pool;
	if (!sluice_proto_meta_batch(r, (uint32_t)cnt, (size_t)cnt * SLUICE_TOPIC_CONFIGS_MAX * sizeof *pool,
				     (void **)&pool))
		return false;
	for (int32_t i = 0; i < n && !rd->err; i++) {
		struct ar *a = &as->ars[i];
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
	if (rd->err)
		return false;
	ar_commit(r, as, validate_only);
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
	kwr_i32(w, controller_for_clients(r)); /* ControllerId */
	struct sluice_meta_broker self;
	uint32_t n;
	const struct sluice_meta_broker *bs = brokers_of(r, &n, &self);
	kwr_array(w, true, err ? 0 : (int32_t)n);
	for (uint32_t i = 0; !err && i < n; i++) {
		kwr_i32(w, bs[i].node_id);
		kwr_cstr(w, true, bs[i].host);
		kwr_i32(w, bs[i].port);
		kwr_cstr(w, true, bs[i].rack[0] ? bs[i].rack : NULL);
		kwr_tags_empty(w);
	}
	kwr_i32(w, INT32_MIN);
	kwr_tags_empty(w);
	sluice_proto_resp_end(r);
	return true;
}


/* ---- DescribeQuorum (55) ----------------------------------------------------- */

/* What kafka-metadata-quorum.sh describe --status / --replication asks a
 * broker (--bootstrap-server). In cluster mode the request is relayed to
 * the active controller and its answer returned as it is (Kafka's brokers
 * forward it too). A single-node broker is its own metadata authority: it
 * answers as a quorum of one voter, itself, leading since its start, with
 * its metadata version as the high watermark. */

#define DQ_TOPIC "__cluster_metadata"
#define DQ_LOCAL_LEADER_EPOCH 1 /* a single node is elected once */
#define DQ_LISTENER_NAME_MAX 64

/* The whole body, and whether it asks exactly for __cluster_metadata
 * partition 0 (as Kafka's controllers require, else UNKNOWN_TOPIC_OR_PARTITION). */
static bool dq_decode(struct krd *rd, bool *valid)
{
	int32_t nt = krd_array(rd, true, 3);
	*valid = nt == 1;
	for (int32_t t = 0; t < nt && !rd->err; t++) {
		struct kstr name = krd_string(rd, true);
		int32_t np = krd_array(rd, true, 5);
		*valid = *valid && np == 1 && kstr_eq(name, DQ_TOPIC);
		for (int32_t p = 0; p < np && !rd->err; p++) {
			*valid = krd_i32(rd) == 0 && *valid;
			krd_tags_skip(rd);
		}
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	return !rd->err;
}

static int64_t dq_wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The name of the first listener ("PLAINTEXT" when listeners names none). */
static void dq_listener_name(const struct sluice_config *cfg, char out[DQ_LISTENER_NAME_MAX])
{
	const char *sep = strstr(cfg->listeners, "://");
	size_t n = sep ? (size_t)(sep - cfg->listeners) : 0;
	if (n == 0 || n >= DQ_LISTENER_NAME_MAX || memchr(cfg->listeners, ',', n))
		snprintf(out, DQ_LISTENER_NAME_MAX, "PLAINTEXT");
	else
		snprintf(out, DQ_LISTENER_NAME_MAX, "%.*s", (int)n, cfg->listeners);
}

/* The one partition: this node leads and is the only voter. */
static void dq_write_local_partition(struct req *r, bool valid)
{
	struct kwr *w = &r->out;
	int16_t v = r->api_version;
	int32_t self = r->nc->b->cfg.node_id;
	int64_t hw = sluice_proto_snap(r)->metadata_offset, now = dq_wall_ms();
	kwr_i32(w, 0);
	kwr_i16(w, valid ? KERR_NONE : KERR_UNKNOWN_TOPIC_OR_PARTITION);
	if (v >= 2)
		kwr_cstr(w, true, NULL);
	kwr_i32(w, valid ? self : -1);
	kwr_i32(w, valid ? DQ_LOCAL_LEADER_EPOCH : -1);
	kwr_i64(w, valid ? hw : -1);
	kwr_array(w, true, valid ? 1 : 0); /* CurrentVoters */
	if (valid) {
		kwr_i32(w, self);
		if (v >= 2)
			kwr_uuid(w, uuid_zero); /* ReplicaDirectoryId: none */
		kwr_i64(w, hw);
		if (v >= 1) {
			kwr_i64(w, now); /* LastFetchTimestamp, LastCaughtUpTimestamp: the leader's are now */
			kwr_i64(w, now);
		}
		kwr_tags_empty(w);
	}
	kwr_array(w, true, 0); /* Observers */
	kwr_tags_empty(w);
}

static void dq_answer_local(struct req *r, bool valid)
{
	const struct sluice_config *cfg = &r->nc->b->cfg;
	int16_t v = r->api_version;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i16(w, KERR_NONE);
	if (v >= 2)
		kwr_cstr(w, true, NULL);
	kwr_array(w, true, 1);
	kwr_cstr(w, true, DQ_TOPIC);
	kwr_array(w, true, 1);
	dq_write_local_partition(r, valid);
	kwr_tags_empty(w);
	if (v >= 2) { /* Nodes: this one, at its advertised endpoint */
		char name[DQ_LISTENER_NAME_MAX];
		dq_listener_name(cfg, name);
		kwr_array(w, true, 1);
		kwr_i32(w, cfg->node_id);
		kwr_array(w, true, 1);
		kwr_cstr(w, true, name);
		kwr_cstr(w, true, cfg->advertised_host);
		kwr_i16(w, (int16_t)(uint16_t)cfg->advertised_port);
		kwr_tags_empty(w);
		kwr_tags_empty(w);
	}
	kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

/* The controller's answer relayed, or the error when none came. */
static void dq_forwarded(struct req *r, int16_t error, const uint8_t *resp, size_t len)
{
	assert(error || resp);
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	if (!error) {
		kwr_raw(w, resp, len);
		sluice_proto_resp_end(r);
		return;
	}
	kwr_i16(w, error);
	if (r->api_version >= 2)
		kwr_cstr(w, true, "no active controller answered");
	kwr_array(w, true, 0); /* Topics */
	if (r->api_version >= 2)
		kwr_array(w, true, 0); /* Nodes */
	kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

bool sluice_api_describe_quorum_start(struct req *r, struct krd *rd)
{
	bool valid;
	if (!dq_decode(rd, &valid))
		return false;
	/* A backend that forwards has controllers to ask (proto.c serves
	 * DescribeQuorum in cluster mode only then); the local one is alone. */
	if (!r->nc->b->meta.ops->forward) {
		dq_answer_local(r, valid);
		return true;
	}
	if (!sluice_proto_meta_forward(r, dq_forwarded))
		dq_forwarded(r, KERR_REQUEST_TIMED_OUT, NULL, 0); /* the backend refused it now: retriable */
	return true;
}

/* ---- AlterPartitionReassignments (45), ListPartitionReassignments (46) ------------
 *
 * Reassignments are the controller's, as in Kafka's KRaft mode: a broker
 * checks that the request decodes and relays its body to the active
 * controller (control/meta.h forward), which decides and answers once the
 * change is committed; the backend answers an AlterPartitionReassignments
 * only once this broker's metadata shows it. The answer goes back to the
 * client as the controller wrote it, without the controller's own tagged
 * field (SluiceMetadataOffset). api_served() offers both APIs in cluster
 * mode only. */

#define RA_PARTITION_BYTES_MIN 6 /* PartitionIndex, Replicas (null: 1 byte), tags */

/* The whole body of either request: false when it does not decode. */
static bool ra_decode(struct req *r, struct krd *rd)
{
	(void)krd_i32(rd); /* TimeoutMs */
	bool alter = r->api_key == API_ALTER_PARTITION_REASSIGNMENTS;
	if (alter && r->api_version >= 1)
		(void)krd_bool(rd); /* AllowReplicationFactorChange */
	int32_t topics = krd_array(rd, true, 3);
	if (alter && topics < 0)
		krd_fail(rd, "null Topics");
	for (int32_t t = 0; t < topics && !rd->err; t++) {
		struct kstr name = krd_string(rd, true);
		if (!name.ptr && !rd->err)
			krd_fail(rd, "null topic name");
		int32_t n = krd_array(rd, true, alter ? RA_PARTITION_BYTES_MIN : 4);
		if (n < 0 && !rd->err)
			krd_fail(rd, "null partitions");
		for (int32_t p = 0; p < n && !rd->err; p++) {
			(void)krd_i32(rd); /* PartitionIndex */
			if (!alter)
				continue;
			int32_t replicas = krd_array(rd, true, 4); /* null: cancel */
			krd_skip(rd, replicas > 0 ? (size_t)replicas * 4 : 0);
			krd_tags_skip(rd);
		}
		krd_tags_skip(rd);
	}
	krd_tags_skip(rd);
	return !rd->err;
}

/* The error answer when no controller answered: every partition of an
 * AlterPartitionReassignments gets it too (Kafka's getErrorResponse). */
static void ra_answer_error(struct req *r, int16_t error, const char *msg)
{
	struct kwr *w = &r->out;
	bool alter = r->api_key == API_ALTER_PARTITION_REASSIGNMENTS;
	sluice_proto_resp_begin(r);
	kwr_i32(w, 0); /* ThrottleTimeMs */
	if (alter && r->api_version >= 1)
		kwr_bool(w, true);
	kwr_i16(w, error);
	kwr_cstr(w, true, msg);
	if (!alter) {
		kwr_array(w, true, 0);
		kwr_tags_empty(w);
		sluice_proto_resp_end(r);
		return;
	}
	struct krd rd;
	krd_init(&rd, r->frame + r->body_off, r->frame_len - r->body_off);
	(void)krd_i32(&rd);
	if (r->api_version >= 1)
		(void)krd_bool(&rd);
	int32_t topics = krd_array(&rd, true, 3);
	kwr_array(w, true, topics);
	for (int32_t t = 0; t < topics; t++) {
		struct kstr name = krd_string(&rd, true);
		int32_t n = krd_array(&rd, true, RA_PARTITION_BYTES_MIN);
		kwr_string(w, true, name.ptr, name.len);
		kwr_array(w, true, n);
		for (int32_t p = 0; p < n; p++) {
			kwr_i32(w, krd_i32(&rd));
			int32_t replicas = krd_array(&rd, true, 4);
			krd_skip(&rd, replicas > 0 ? (size_t)replicas * 4 : 0);
			krd_tags_skip(&rd);
			kwr_i16(w, error);
			kwr_cstr(w, true, msg);
			kwr_tags_empty(w);
		}
		krd_tags_skip(&rd);
		kwr_tags_empty(w);
	}
	assert(!rd.err); /* decoded once already */
	kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

/* Where the top-level tagged fields of the controller's answer start, or 0
 * when it does not decode as the API's response. */
static size_t ra_answer_body_end(const struct req *r, const uint8_t *resp, size_t len)
{
	struct krd rd;
	krd_init(&rd, resp, len);
	bool alter = r->api_key == API_ALTER_PARTITION_REASSIGNMENTS;
	(void)krd_i32(&rd); /* ThrottleTimeMs */
	if (alter && r->api_version >= 1)
		(void)krd_bool(&rd);
	(void)krd_i16(&rd);
	(void)krd_string(&rd, true);
	int32_t topics = krd_array(&rd, true, 3);
	for (int32_t t = 0; t < topics && !rd.err; t++) {
		(void)krd_string(&rd, true);
		int32_t n = krd_array(&rd, true, 8); /* the smallest partition entry of either */
		for (int32_t p = 0; p < n && !rd.err; p++) {
			(void)krd_i32(&rd);
			if (alter) {
				(void)krd_i16(&rd);
				(void)krd_string(&rd, true);
			} else {
				for (int k = 0; k < 3 && !rd.err; k++) { /* Replicas, AddingReplicas, RemovingReplicas */
					int32_t ids = krd_array(&rd, true, 4);
					krd_skip(&rd, ids > 0 ? (size_t)ids * 4 : 0);
				}
			}
			krd_tags_skip(&rd);
		}
		krd_tags_skip(&rd);
	}
	size_t end = (size_t)(rd.p - resp);
	krd_tags_skip(&rd);
	return rd.err || krd_left(&rd) ? 0 : end;
}

static void ra_answered(struct req *r, int16_t error, const uint8_t *resp, size_t len)
{
	assert(error || resp);
	size_t end = error ? 0 : ra_answer_body_end(r, resp, len);
	if (error || end == 0) {
		if (!error)
			SLOG_WARN("admin", "the controller's answer to a relayed %s does not decode (%zu bytes)",
				  r->api_key == API_ALTER_PARTITION_REASSIGNMENTS ? "AlterPartitionReassignments"
										  : "ListPartitionReassignments", len);
		ra_answer_error(r, error ? error : KERR_UNKNOWN_SERVER_ERROR,
				error ? "No active controller answered; retry later." : "The controller's answer does not decode.");
		return;
	}
	sluice_proto_resp_begin(r);
	kwr_raw(&r->out, resp, end);
	kwr_tags_empty(&r->out); /* the controller's SluiceMetadataOffset is not the client's */
	sluice_proto_resp_end(r);
}

bool sluice_api_reassignments_start(struct req *r, struct krd *rd)
{
	if (!ra_decode(r, rd))
		return false;
	if (!sluice_proto_meta_forward(r, ra_answered))
		ra_answer_error(r, KERR_REQUEST_TIMED_OUT, "The controller cannot be reached now; retry later.");
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
	kwr_i16(w, KERR_NONE);
	kwr_cstr(w, true, t->name);
	kwr_uuid(w, t->id);
	kwr_bool(w, !strcmp(t->name, SLUICE_OFFSETS_TOPIC));
	kwr_array(w, true, last - first);
	for (int32_t p = first; p < last; p++) {
		struct partition_view pv;
		partition_view(r, t, p, offline, &pv);
		kwr_i16(w, partition_error(&pv));
		kwr_i32(w, p);
		kwr_i32(w, pv.leader);
		kwr_i32(w, pv.leader_epoch);
		write_nodes(w, true, pv.replicas, pv.replica_n);
		write_nodes(w, true, pv.isr, pv.isr_n);
		assert(pv.st->elr_n <= SLUICE_REPLICAS_MAX && pv.st->last_known_elr_n <= SLUICE_REPLICAS_MAX);
		write_nodes(w, true, pv.st->elr, pv.st->elr_n);                       /* EligibleLeaderReplicas */
		write_nodes(w, true, pv.st->last_known_elr, pv.st->last_known_elr_n); /* LastKnownElr */
		write_nodes(w, true, pv.offline, pv.offline_n);
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
		/* The cursor is the client's: partitions from its index on, as
		 * Kafka does (none past the last, all from a negative one). */
		first = first < 0 ? 0 : first > last ? last : first;
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
