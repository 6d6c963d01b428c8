/* Group coordinator for the classic consumer-group protocol (see group.h).
 *
 * State machine per group, as in Kafka: Empty -> PreparingRebalance (a
 * member joined or left; wait until every known member rejoins or the
 * rebalance timeout passes) -> CompletingRebalance (a new generation; the
 * leader got every member's subscription and computes the assignment) ->
 * Stable (the leader's SyncGroup delivered everyone's assignment). Members
 * that stop heartbeating within their session timeout are removed and the
 * group rebalances. JoinGroup and SyncGroup answers are held (the partop stays
 * with the member) until the state machine releases them.
 *
 * Durability: every offset commit and every new generation is appended to
 * the group's __consumer_offsets partition in Kafka's record formats (offset
 * key v1 / value v3, group key v2 / value v3, null values for deletions) and
 * answered once committed. On first use of a partition its records are read
 * back: offsets resume; groups come back Empty at their last generation, and
 * their members rejoin. */
#include "dataplane/group.h"
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/log.h"
#include "storage/plog.h"
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define GROUPS_PER_CORE_MAX 100000
#define OFFSETS_PER_GROUP_MAX 1000000
#define PROTOCOLS_MAX 32
#define PENDING_IDS_MAX 1024

enum { G_EMPTY, G_PREPARING, G_COMPLETING, G_STABLE, G_DEAD };
static const char *const state_names[] = {"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"};

enum {
	E_NONE = 0, E_UNKNOWN_TOPIC_OR_PARTITION = 3, E_OFFSET_METADATA_TOO_LARGE = 12, E_COORDINATOR_NOT_AVAILABLE = 15,
	E_NOT_COORDINATOR = 16,
	E_ILLEGAL_GENERATION = 22, E_INCONSISTENT_GROUP_PROTOCOL = 23, E_INVALID_GROUP_ID = 24, E_UNKNOWN_MEMBER_ID = 25,
	E_INVALID_SESSION_TIMEOUT = 26, E_REBALANCE_IN_PROGRESS = 27, E_KAFKA_STORAGE_ERROR = 56,
	E_NON_EMPTY_GROUP = 68, E_GROUP_ID_NOT_FOUND = 69, E_MEMBER_ID_REQUIRED = 79, E_FENCED_INSTANCE_ID = 82,
	E_GROUP_MAX_SIZE_REACHED = 81, E_GROUP_SUBSCRIBED_TO_TOPIC = 86, E_UNKNOWN_SERVER_ERROR = -1,
};

struct protocol {
	char *name;
	uint8_t *meta;
	int32_t meta_len;
};

struct member {
	char *id, *instance_id, *client_id, *client_host;
	int32_t session_timeout_ms, rebalance_timeout_ms;
	int32_t nprot;
	struct protocol prot[PROTOCOLS_MAX];
	uint8_t *assignment;
	int32_t assignment_len;
	struct partop *join_op, *sync_op;
	int64_t last_seen_ms;
	struct member *next;
};

struct offset_entry {
	char *topic; /* NULL: free slot */
	int32_t partition;
	int64_t offset;
	int32_t leader_epoch;
	char *metadata;
	int64_t commit_ts;
};

struct group {
	char *id;
	int32_t partition; /* of __consumer_offsets */
	int state;
	int32_t generation;
	char *protocol_type, *protocol, *leader;
	struct member *members;
	int32_t nmembers;
	int64_t rebalance_deadline_ms;
	int64_t empty_since_ms; /* monotonic; when the group last became Empty */
	bool initial_delay;
	int64_t initial_end_ms; /* the initial delay is extended at most until then */
	char *pending_ids[PENDING_IDS_MAX]; /* handed out with MEMBER_ID_REQUIRED */
	int32_t npending;
	struct offset_entry *offsets; /* open addressing */
	uint32_t off_cap, off_n;
	struct group *next;
};

struct gcoord {
	struct group **table; /* chained hash by group id */
	uint32_t cap, count;
	uint8_t *loaded;      /* per offsets partition */
	int32_t partitions;
	int64_t last_tick_ms;
	int64_t next_expiry_ms;
	int64_t next_join_deadline_ms; /* earliest join-phase deadline (may be stale: early) */
	struct kwr scratch;
};

/* ---- small helpers -------------------------------------------------------- */

static char *kstrdup(struct kstr s)
{
	if (!s.ptr)
		return NULL;
	char *d = malloc((size_t)s.len + 1);
	if (d) {
		memcpy(d, s.ptr, (size_t)s.len);
		d[s.len] = '\0';
	}
	return d;
}

static bool kstr_is(struct kstr s, const char *c)
{
	if (!c)
		return !s.ptr;
	return kstr_eq(s, c);
}

static uint32_t hash_str(const char *p, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)p[i]) * 16777619u;
	return h;
}

int32_t sluice_group_partition(const char *group, size_t len, int32_t partitions)
{
	/* Java's String.hashCode over UTF-16 units; group ids here are bytes,
	 * which matches Java for ASCII ids. Utils.abs maps MIN to 0. */
	int32_t h = 0;
	for (size_t i = 0; i < len; i++)
		h = (int32_t)(31u * (uint32_t)h + (uint8_t)group[i]);
	int32_t a = h == INT32_MIN ? 0 : (h < 0 ? -h : h);
	return a % partitions;
}

static struct gcoord *coord(struct storecore *sc)
{
	struct gcoord *gc = sc->groups;
	if (gc)
		return gc;
	gc = calloc(1, sizeof *gc);
	assert(gc);
	gc->cap = 1024;
	gc->table = calloc(gc->cap, sizeof *gc->table);
	gc->partitions = sc->b->cfg.offsets_topic_partitions;
	gc->loaded = calloc((size_t)gc->partitions, 1);
	assert(gc->table && gc->loaded);
	kwr_init(&gc->scratch, 4096, 64u << 20);
	gc->next_join_deadline_ms = INT64_MAX;
	sc->groups = gc;
	return gc;
}

static struct group *group_find(struct gcoord *gc, const char *id, size_t len)
{
	for (struct group *g = gc->table[hash_str(id, len) & (gc->cap - 1)]; g; g = g->next)
		if (strlen(g->id) == len && memcmp(g->id, id, len) == 0)
			return g;
	return NULL;
}

static struct group *group_get(struct gcoord *gc, const char *id, size_t len, int32_t partition)
{
	struct group *g = group_find(gc, id, len);
	if (g || gc->count >= GROUPS_PER_CORE_MAX)
		return g;
	g = calloc(1, sizeof *g);
	if (!g || !(g->id = malloc(len + 1))) {
		free(g);
		return NULL;
	}
	memcpy(g->id, id, len);
	g->id[len] = '\0';
	g->partition = partition;
	g->state = G_EMPTY;
	g->empty_since_ms = sluice_now_ms();
	uint32_t b = hash_str(id, len) & (gc->cap - 1);
	g->next = gc->table[b];
	gc->table[b] = g;
	gc->count++;
	return g;
}

static void member_free(struct member *m)
{
	free(m->id);
	free(m->instance_id);
	free(m->client_id);
	free(m->client_host);
	for (int32_t i = 0; i < m->nprot; i++) {
		free(m->prot[i].name);
		free(m->prot[i].meta);
	}
	free(m->assignment);
	free(m);
}

static void offsets_clear(struct group *g)
{
	for (uint32_t i = 0; i < g->off_cap; i++) {
		free(g->offsets[i].topic);
		free(g->offsets[i].metadata);
	}
	free(g->offsets);
	g->offsets = NULL;
	g->off_cap = g->off_n = 0;
}

static void group_remove(struct gcoord *gc, struct group *g)
{
	uint32_t b = hash_str(g->id, strlen(g->id)) & (gc->cap - 1);
	for (struct group **pp = &gc->table[b]; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	while (g->members) {
		struct member *m = g->members;
		g->members = m->next;
		member_free(m);
	}
	for (int32_t i = 0; i < g->npending; i++)
		free(g->pending_ids[i]);
	offsets_clear(g);
	free(g->protocol_type);
	free(g->protocol);
	free(g->leader);
	free(g->id);
	free(g);
	gc->count--;
}

static struct offset_entry *offset_slot(struct group *g, const char *topic, size_t tlen, int32_t partition, bool create)
{
	if (create && (g->off_n + 1) * 2 > g->off_cap) {
		if (g->off_n >= OFFSETS_PER_GROUP_MAX)
			return NULL;
		uint32_t old_cap = g->off_cap;
		struct offset_entry *old = g->offsets;
		g->off_cap = old_cap ? old_cap * 2 : 64;
		g->offsets = calloc(g->off_cap, sizeof *g->offsets);
		if (!g->offsets) {
			g->offsets = old;
			g->off_cap = old_cap;
			return NULL;
		}
		g->off_n = 0;
		for (uint32_t i = 0; i < old_cap; i++) {
			if (!old[i].topic)
				continue;
			struct offset_entry *e = offset_slot(g, old[i].topic, strlen(old[i].topic), old[i].partition, true);
			*e = old[i];
		}
		free(old);
	}
	if (!g->off_cap)
		return NULL;
	uint32_t mask = g->off_cap - 1;
	for (uint32_t i = (hash_str(topic, tlen) ^ (uint32_t)partition * 2654435761u) & mask;; i = (i + 1) & mask) {
		struct offset_entry *e = &g->offsets[i];
		if (!e->topic) {
			if (!create)
				return NULL;
			e->topic = malloc(tlen + 1);
			if (!e->topic)
				return NULL;
			memcpy(e->topic, topic, tlen);
			e->topic[tlen] = '\0';
			e->partition = partition;
			e->offset = -1;
			e->leader_epoch = -1;
			g->off_n++;
			return e;
		}
		if (e->partition == partition && strlen(e->topic) == tlen && memcmp(e->topic, topic, tlen) == 0)
			return e;
	}
}

static void offset_delete(struct group *g, struct offset_entry *e)
{
	/* Rebuild the table without e: deletion in open addressing. */
	free(e->topic);
	free(e->metadata);
	e->topic = NULL;
	e->metadata = NULL;
	uint32_t old_cap = g->off_cap;
	struct offset_entry *old = g->offsets;
	g->offsets = NULL;
	g->off_cap = g->off_n = 0;
	for (uint32_t i = 0; i < old_cap; i++)
		if (old[i].topic) {
			struct offset_entry *n = offset_slot(g, old[i].topic, strlen(old[i].topic), old[i].partition, true);
			if (n) {
				free(n->topic);
				*n = old[i];
			}
		}
	free(old);
}

static struct member *member_find(struct group *g, struct kstr id)
{
	for (struct member *m = g->members; m; m = m->next)
		if (kstr_is(id, m->id))
			return m;
	return NULL;
}

static struct member *member_by_instance(struct group *g, struct kstr inst)
{
	if (!inst.ptr)
		return NULL;
	for (struct member *m = g->members; m; m = m->next)
		if (m->instance_id && kstr_is(inst, m->instance_id))
			return m;
	return NULL;
}

/* Validate a member id (and static instance id) against the group. */
static int16_t member_check(struct group *g, struct kstr id, struct kstr inst, struct member **out)
{
	*out = NULL;
	struct member *bi = member_by_instance(g, inst);
	if (bi && !kstr_is(id, bi->id))
		return E_FENCED_INSTANCE_ID;
	struct member *m = member_find(g, id);
	if (!m)
		return E_UNKNOWN_MEMBER_ID;
	*out = m;
	return E_NONE;
}

/* ---- durable records -------------------------------------------------------- */

static void key_offset(struct kwr *w, const char *group, const char *topic, int32_t partition)
{
	kwr_i16(w, 1);
	kwr_cstr(w, false, group);
	kwr_cstr(w, false, topic);
	kwr_i32(w, partition);
}

static void value_offset(struct kwr *w, const struct offset_entry *e)
{
	kwr_i16(w, 3);
	kwr_i64(w, e->offset);
	kwr_i32(w, e->leader_epoch);
	kwr_cstr(w, false, e->metadata ? e->metadata : "");
	kwr_i64(w, e->commit_ts);
}

static void key_group(struct kwr *w, const char *group)
{
	kwr_i16(w, 2);
	kwr_cstr(w, false, group);
}

static void value_group(struct kwr *w, const struct group *g, int64_t now)
{
	kwr_i16(w, 3);
	kwr_cstr(w, false, g->protocol_type ? g->protocol_type : "");
	kwr_i32(w, g->generation);
	kwr_cstr(w, false, g->protocol);
	kwr_cstr(w, false, g->leader);
	kwr_i64(w, now);
	kwr_i32(w, g->nmembers);
	for (struct member *m = g->members; m; m = m->next) {
		kwr_cstr(w, false, m->id);
		kwr_cstr(w, false, m->instance_id);
		kwr_cstr(w, false, m->client_id ? m->client_id : "");
		kwr_cstr(w, false, m->client_host ? m->client_host : "");
		kwr_i32(w, m->rebalance_timeout_ms);
		kwr_i32(w, m->session_timeout_ms);
		const struct protocol *p = NULL;
		for (int32_t i = 0; i < m->nprot; i++)
			if (g->protocol && !strcmp(m->prot[i].name, g->protocol))
				p = &m->prot[i];
		kwr_bytes(w, false, p ? p->meta : (const uint8_t *)"", p ? p->meta_len : 0);
		kwr_bytes(w, false, m->assignment ? m->assignment : (const uint8_t *)"", m->assignment_len);
	}
}

/* Records for __consumer_offsets, keys and values encoded back to back in
 * one buffer; every writer (commits, deletions, group metadata) fills one
 * and appends it as a single batch. A failed allocation latches err. */
struct recspan {
	size_t koff, klen, voff;
	int64_t vlen; /* -1: tombstone */
};

struct recset {
	struct kwr kv;
	struct recspan *s;
	int32_t n, cap;
	bool err;
};

static void recset_init(struct recset *rs)
{
	memset(rs, 0, sizeof *rs);
	kwr_init(&rs->kv, 1024, 64u << 20);
}

static void recset_free(struct recset *rs)
{
	kwr_free(&rs->kv);
	free(rs->s);
}

static struct recspan *recset_next(struct recset *rs)
{
	if (rs->n == rs->cap) {
		int32_t cap = rs->cap ? rs->cap * 2 : 16;
		struct recspan *n = realloc(rs->s, (size_t)cap * sizeof *n);
		if (!n) {
			rs->err = true;
			return NULL;
		}
		rs->s = n;
		rs->cap = cap;
	}
	return &rs->s[rs->n++];
}

/* An offset record; e NULL-valued (tombstone) when value is false. */
static void recset_offset(struct recset *rs, const struct group *g, const struct offset_entry *e, bool value)
{
	struct recspan *sp = recset_next(rs);
	if (!sp)
		return;
	sp->koff = rs->kv.len;
	key_offset(&rs->kv, g->id, e->topic, e->partition);
	sp->klen = rs->kv.len - sp->koff;
	sp->voff = rs->kv.len;
	sp->vlen = -1;
	if (value) {
		value_offset(&rs->kv, e);
		sp->vlen = (int64_t)(rs->kv.len - sp->voff);
	}
}

static void recset_group(struct recset *rs, const struct group *g, bool value)
{
	struct recspan *sp = recset_next(rs);
	if (!sp)
		return;
	sp->koff = rs->kv.len;
	key_group(&rs->kv, g->id);
	sp->klen = rs->kv.len - sp->koff;
	sp->voff = rs->kv.len;
	sp->vlen = -1;
	if (value) {
		value_group(&rs->kv, g, sluice_now_ms());
		sp->vlen = (int64_t)(rs->kv.len - sp->voff);
	}
}

/* Append the set as one batch to the group's partition. wait_op, when
 * given, is answered once it is committed. Returns 0, or -1 (nothing
 * written, wait_op not taken). */
static int recset_write(struct storecore *sc, struct group *g, struct recset *rs, struct partop *wait_op)
{
	if (rs->n == 0)
		return wait_op ? -1 : 0;
	if (rs->err || rs->kv.err)
		return -1;
	struct sluice_record_kv *recs = calloc((size_t)rs->n, sizeof *recs);
	if (!recs)
		return -1;
	for (int32_t i = 0; i < rs->n; i++) {
		recs[i].key = rs->kv.buf + rs->s[i].koff;
		recs[i].key_len = (int32_t)rs->s[i].klen;
		recs[i].value = rs->s[i].vlen < 0 ? NULL : rs->kv.buf + rs->s[i].voff;
		recs[i].value_len = rs->s[i].vlen < 0 ? -1 : (int32_t)rs->s[i].vlen;
	}
	struct kwr batch;
	kwr_init(&batch, 256, 64u << 20);
	int rc = -1;
	int16_t err = 0;
	if (sluice_batch_build(&batch, recs, rs->n, sluice_now_ms()) >= 0) {
		struct spart *p = sluice_store_partition(sc, SLUICE_OFFSETS_TOPIC, g->partition, &err);
		if (p)
			rc = sluice_store_append(sc, p, batch.buf, batch.len, wait_op);
	}
	kwr_free(&batch);
	free(recs);
	return rc;
}

/* Persist the group's current generation (or its deletion). */
static int write_group(struct storecore *sc, struct group *g, bool tombstone, struct partop *wait_op)
{
	struct recset rs;
	recset_init(&rs);
	recset_group(&rs, g, !tombstone);
	int rc = recset_write(sc, g, &rs, wait_op);
	recset_free(&rs);
	return rc;
}

/* Replay one record of __consumer_offsets into memory. */
static void replay(struct gcoord *gc, int32_t partition, const uint8_t *key, int32_t klen, const uint8_t *val,
		   int32_t vlen)
{
	struct krd r;
	krd_init(&r, key, (size_t)klen);
	int16_t kver = krd_i16(&r);
	struct kstr gid = krd_string(&r, false);
	if (r.err || !gid.ptr)
		return;
	struct group *g = group_get(gc, gid.ptr, (size_t)gid.len, partition);
	if (!g)
		return;
	if (kver <= 1) {
		struct kstr topic = krd_string(&r, false);
		int32_t part = krd_i32(&r);
		if (r.err || !topic.ptr)
			return;
		if (!val) {
			struct offset_entry *e = offset_slot(g, topic.ptr, (size_t)topic.len, part, false);
			if (e)
				offset_delete(g, e);
			return;
		}
		struct krd v;
		krd_init(&v, val, (size_t)vlen);
		int16_t vver = krd_i16(&v);
		int64_t off = krd_i64(&v);
		int32_t epoch = vver >= 3 ? krd_i32(&v) : -1;
		struct kstr meta = krd_string(&v, false);
		int64_t ts = krd_i64(&v);
		if (v.err)
			return;
		struct offset_entry *e = offset_slot(g, topic.ptr, (size_t)topic.len, part, true);
		if (!e)
			return;
		e->offset = off;
		e->leader_epoch = epoch;
		free(e->metadata);
		e->metadata = kstrdup(meta);
		e->commit_ts = ts;
	} else if (kver == 2) {
		if (!val) {
			if (!g->members) {
				offsets_clear(g);
				group_remove(gc, g);
			}
			return;
		}
		struct krd v;
		krd_init(&v, val, (size_t)vlen);
		(void)krd_i16(&v);
		struct kstr ptype = krd_string(&v, false);
		int32_t gen = krd_i32(&v);
		struct kstr proto = krd_string(&v, false);
		if (v.err)
			return;
		free(g->protocol_type);
		g->protocol_type = kstrdup(ptype);
		free(g->protocol);
		g->protocol = kstrdup(proto);
		g->generation = gen;
	}
}

struct load_ctx {
	struct gcoord *gc;
	int32_t partition;
};

/* Read every record of one __consumer_offsets partition back. */
static void load_partition(struct storecore *sc, struct gcoord *gc, int32_t partition)
{
	if (gc->loaded[partition])
		return;
	gc->loaded[partition] = 1;
	int16_t err = 0;
	struct spart *p = sluice_store_partition(sc, SLUICE_OFFSETS_TOPIC, partition, &err);
	if (!p)
		return;
	struct sluice_plog *l = sluice_store_log(p);
	int64_t off = sluice_plog_log_start(l), hw = sluice_plog_high_watermark(l), records = 0;
	while (off < hw) {
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, off, 1 << 20, true, &buf);
		if (n <= 0) {
			free(buf);
			break;
		}
		size_t pos = 0;
		while (pos < (size_t)n) {
			struct sluice_batch b;
			if (sluice_batch_parse(buf + pos, (size_t)n - pos, &b) != SLUICE_BATCH_OK)
				break;
			struct krd r;
			krd_init(&r, buf + pos + SLUICE_BATCH_HEADER_BYTES, (size_t)sluice_batch_total_bytes(&b) - SLUICE_BATCH_HEADER_BYTES);
			for (int32_t i = 0; i < b.records_count && !r.err && !(b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK); i++) {
				int32_t rlen = krd_varint(&r);
				const uint8_t *start = r.p;
				if (r.err || rlen < 0 || (size_t)rlen > krd_left(&r))
					break;
				(void)krd_i8(&r);
				(void)krd_varlong(&r);
				(void)krd_varint(&r);
				int32_t kl = krd_varint(&r);
				const uint8_t *k = r.p;
				if (kl > 0)
					krd_skip(&r, (size_t)kl);
				int32_t vl = krd_varint(&r);
				const uint8_t *v = r.p;
				if (vl > 0)
					krd_skip(&r, (size_t)vl);
				if (!r.err && kl > 0) {
					replay(gc, partition, k, kl, vl >= 0 ? v : NULL, vl);
					records++;
				}
				r.err = false;
				r.p = start + rlen;
			}
			off = b.base_offset + b.last_offset_delta + 1;
			pos += (size_t)sluice_batch_total_bytes(&b);
		}
		free(buf);
	}
	if (records)
		SLOG_INFO("group", "loaded %" PRId64 " records from %s-%d", records, SLUICE_OFFSETS_TOPIC, partition);
}

/* ---- rebalancing ------------------------------------------------------------- */

static void reply(struct storecore *sc, struct partop *op) { sluice_store_done(sc, op); }

static void join_response(struct partop *op, int16_t err, const struct group *g, const struct member *m, bool leader_view)
{
	struct kwr *w = &op->gout;
	bool flex = op->flex;
	int16_t v = op->api_version;
	kwr_init(w, 256, 64u << 20);
	if (v >= 2)
		kwr_i32(w, 0);
	kwr_i16(w, err);
	kwr_i32(w, err ? -1 : g->generation);
	if (v >= 7)
		kwr_cstr(w, flex, err ? NULL : g->protocol_type);
	kwr_cstr(w, flex, err ? (v >= 7 ? NULL : "") : g->protocol);
	kwr_cstr(w, flex, err || !g->leader ? "" : g->leader);
	if (v >= 9)
		kwr_bool(w, false);
	kwr_cstr(w, flex, m ? m->id : "");
	if (!leader_view || err) {
		kwr_array(w, flex, 0);
	} else {
		kwr_array(w, flex, g->nmembers);
		for (const struct member *x = g->members; x; x = x->next) {
			kwr_cstr(w, flex, x->id);
			if (v >= 5)
				kwr_cstr(w, flex, x->instance_id);
			const struct protocol *p = NULL;
			for (int32_t i = 0; i < x->nprot; i++)
				if (!strcmp(x->prot[i].name, g->protocol))
					p = &x->prot[i];
			kwr_bytes(w, flex, p ? p->meta : (const uint8_t *)"", p ? p->meta_len : 0);
			if (flex)
				kwr_tags_empty(w);
		}
	}
	if (flex)
		kwr_tags_empty(w);
}

static void sync_response(struct partop *op, int16_t err, const struct group *g, const struct member *m)
{
	struct kwr *w = &op->gout;
	bool flex = op->flex;
	int16_t v = op->api_version;
	kwr_init(w, 128, 64u << 20);
	if (v >= 1)
		kwr_i32(w, 0);
	kwr_i16(w, err);
	if (v >= 5) {
		kwr_cstr(w, flex, err ? NULL : g->protocol_type);
		kwr_cstr(w, flex, err ? NULL : g->protocol);
	}
	kwr_bytes(w, flex, !err && m && m->assignment ? m->assignment : (const uint8_t *)"",
		  !err && m ? m->assignment_len : 0);
	if (flex)
		kwr_tags_empty(w);
}

static void fail_pending_syncs(struct storecore *sc, struct group *g, int16_t err)
{
	for (struct member *m = g->members; m; m = m->next)
		if (m->sync_op) {
			sync_response(m->sync_op, err, g, m);
			reply(sc, m->sync_op);
			m->sync_op = NULL;
		}
}

/* group.initial.rebalance.delay.ms, but at least GROUP_INITIAL_SETTLE_MS:
 * with 0, Kafka still takes into the first generation the members whose
 * joins it is already processing (its join completes from a timer, and
 * every member added meanwhile re-arms it); members started together by a
 * client arrive some milliseconds apart, each first asking for a member id
 * (KIP-394), and would otherwise find the first alone in generation 1 and
 * wait out a heartbeat interval for the next. */
#define GROUP_INITIAL_SETTLE_MS 30
static int32_t initial_delay_ms(const struct storecore *sc)
{
	int32_t delay = sc->b->cfg.group_initial_rebalance_delay_ms;
	return delay > GROUP_INITIAL_SETTLE_MS ? delay : GROUP_INITIAL_SETTLE_MS;
}

/* A member arrived (or was handed a member id) during the initial delay:
 * wait another delay for the next, as Kafka does. */
static void initial_delay_extend(struct storecore *sc, struct group *g, int64_t now)
{
	if (g->state != G_PREPARING || !g->initial_delay)
		return;
	int64_t until = now + initial_delay_ms(sc);
	if (until > g->initial_end_ms)
		until = g->initial_end_ms;
	if (until > g->rebalance_deadline_ms)
		g->rebalance_deadline_ms = until;
}

/* The tick must look again by this time (a join phase ends). */
static void join_deadline_note(struct storecore *sc, int64_t deadline_ms)
{
	struct gcoord *gc = sc->groups;
	if (gc && deadline_ms < gc->next_join_deadline_ms)
		gc->next_join_deadline_ms = deadline_ms;
}

int64_t sluice_group_next_deadline(struct storecore *sc)
{
	struct gcoord *gc = sc->groups;
	return gc ? gc->next_join_deadline_ms : INT64_MAX;
}

static void prepare_rebalance(struct storecore *sc, struct group *g, int64_t now)
{
	if (g->state == G_PREPARING)
		return;
	fail_pending_syncs(sc, g, E_REBALANCE_IN_PROGRESS);
	int32_t timeout = 0;
	for (struct member *m = g->members; m; m = m->next)
		if (m->rebalance_timeout_ms > timeout)
			timeout = m->rebalance_timeout_ms;
	/* A group starting from empty waits a little for more members (Kafka's
	 * group.initial.rebalance.delay.ms, extended while members keep
	 * arriving, up to the rebalance timeout); otherwise up to the rebalance
	 * timeout. */
	g->initial_delay = false;
	if (g->state == G_EMPTY) {
		int32_t delay = initial_delay_ms(sc);
		g->initial_end_ms = now + (timeout > delay ? timeout : delay);
		timeout = delay;
		g->initial_delay = true;
	}
	g->state = G_PREPARING;
	g->rebalance_deadline_ms = now + timeout;
	if (g->rebalance_deadline_ms <= now && g->state == G_PREPARING)
		g->rebalance_deadline_ms = now;
	join_deadline_note(sc, g->rebalance_deadline_ms);
}

static void remove_member(struct group *g, struct member *m)
{
	for (struct member **pp = &g->members; *pp; pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	g->nmembers--;
	member_free(m);
}

static const char *choose_protocol(struct group *g)
{
	struct member *first = g->members;
	if (!first)
		return NULL;
	for (int32_t i = 0; i < first->nprot; i++) {
		const char *name = first->prot[i].name;
		bool all = true;
		for (struct member *m = first->next; m && all; m = m->next) {
			bool has = false;
			for (int32_t k = 0; k < m->nprot; k++)
				has |= !strcmp(m->prot[k].name, name);
			all = has;
		}
		if (all)
			return name;
	}
	return NULL;
}

static void complete_join(struct storecore *sc, struct group *g)
{
	/* Members that did not rejoin in time are dropped. */
	for (struct member *m = g->members, *next; m; m = next) {
		next = m->next;
		if (!m->join_op)
			remove_member(g, m);
	}
	g->generation++;
	free(g->protocol);
	g->protocol = NULL;
	for (int32_t i = 0; i < g->npending; i++)
		free(g->pending_ids[i]);
	g->npending = 0;
	g->initial_delay = false;
	if (!g->members) {
		g->state = G_EMPTY;
		g->empty_since_ms = sluice_now_ms();
		free(g->leader);
		g->leader = NULL;
		(void)write_group(sc, g, false, NULL);
		return;
	}
	const char *proto = choose_protocol(g);
	g->protocol = proto ? strdup(proto) : NULL;
	bool leader_present = false;
	for (struct member *m = g->members; m; m = m->next)
		leader_present |= g->leader && !strcmp(g->leader, m->id);
	if (!leader_present) {
		free(g->leader);
		g->leader = strdup(g->members->id);
	}
	g->state = G_COMPLETING;
	g->rebalance_deadline_ms = sluice_now_ms() + (g->members->rebalance_timeout_ms > 0 ? g->members->rebalance_timeout_ms : 60000);
	int64_t now = sluice_now_ms();
	for (struct member *m = g->members; m; m = m->next) {
		struct partop *op = m->join_op;
		m->join_op = NULL;
		m->last_seen_ms = now;
		free(m->assignment);
		m->assignment = NULL;
		m->assignment_len = 0;
		bool leader = !strcmp(m->id, g->leader);
		join_response(op, g->protocol ? E_NONE : E_INCONSISTENT_GROUP_PROTOCOL, g, m, leader);
		reply(sc, op);
	}
	SLOG_DEBUG("group", "group %s generation %d: %d member(s), protocol %s, leader %s", g->id, g->generation,
		   g->nmembers, g->protocol ? g->protocol : "-", g->leader);
}

static void maybe_complete_join(struct storecore *sc, struct group *g, int64_t now)
{
	if (g->state != G_PREPARING)
		return;
	bool all = true;
	for (struct member *m = g->members; m; m = m->next)
		all &= m->join_op != NULL;
	/* Everyone known has rejoined: done, unless the group is in its initial
	 * delay (started from empty), which waits for more members to arrive. */
	if ((all && g->npending == 0 && !g->initial_delay) || now >= g->rebalance_deadline_ms)
		complete_join(sc, g);
}

static void delete_group_records(struct storecore *sc, struct group *g);

/* Groups that stayed Empty for offsets.retention.minutes lose their
 * offsets and metadata (tombstones written), as in Kafka since KIP-211. */
static void expire_groups(struct storecore *sc, struct gcoord *gc, int64_t now)
{
	int64_t keep_ms = (int64_t)sc->b->cfg.offsets_retention_minutes * 60000;
	for (uint32_t b = 0; b < gc->cap; b++)
		for (struct group *g = gc->table[b], *next; g; g = next) {
			next = g->next;
			if (g->state != G_EMPTY || g->members || now - g->empty_since_ms < keep_ms)
				continue;
			SLOG_INFO("group", "group %s expired after %d minutes empty", g->id,
				  sc->b->cfg.offsets_retention_minutes);
			delete_group_records(sc, g);
			group_remove(gc, g);
		}
}

void sluice_group_tick(struct storecore *sc, int64_t now)
{
	struct gcoord *gc = sc->groups;
	if (!gc || (now - gc->last_tick_ms < 50 && now < gc->next_join_deadline_ms))
		return;
	gc->last_tick_ms = now;
	gc->next_join_deadline_ms = INT64_MAX; /* recomputed below */
	if (now >= gc->next_expiry_ms) {
		gc->next_expiry_ms = now + sc->b->cfg.offsets_retention_check_interval_ms;
		expire_groups(sc, gc, now);
	}
	for (uint32_t b = 0; b < gc->cap; b++)
		for (struct group *g = gc->table[b]; g; g = g->next) {
			/* Session expiry: a member silent past its timeout leaves. */
			bool changed = false;
			for (struct member *m = g->members, *next; m; m = next) {
				next = m->next;
				if (m->join_op || m->sync_op || now - m->last_seen_ms <= m->session_timeout_ms)
					continue;
				SLOG_INFO("group", "group %s: member %s session expired", g->id, m->id);
				remove_member(g, m);
				changed = true;
			}
			if (changed && (g->state == G_STABLE || g->state == G_COMPLETING || g->state == G_EMPTY)) {
				if (g->members)
					prepare_rebalance(sc, g, now);
				else {
					g->state = G_EMPTY;
					g->empty_since_ms = sluice_now_ms();
					fail_pending_syncs(sc, g, E_REBALANCE_IN_PROGRESS);
				}
			}
			if (g->state == G_COMPLETING && now >= g->rebalance_deadline_ms) {
				/* The leader never synced: start over. */
				prepare_rebalance(sc, g, now);
			}
			maybe_complete_join(sc, g, now);
			if (g->state == G_PREPARING || g->state == G_COMPLETING)
				join_deadline_note(sc, g->rebalance_deadline_ms);
		}
}

/* ---- JoinGroup (11) -------------------------------------------------------- */

static void new_member_id(struct kstr client_id, char *out, size_t len)
{
	uint8_t r[16];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		memset(r, 7, sizeof r);
	char hex[33];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", r[i]);
	snprintf(out, len, "%.*s-%.8s-%.4s-%.4s-%.4s-%.12s", client_id.ptr ? (client_id.len > 100 ? 100 : client_id.len) : 0,
		 client_id.ptr ? client_id.ptr : "", hex, hex + 8, hex + 12, hex + 16, hex + 20);
}

static bool pending_take(struct group *g, struct kstr id)
{
	for (int32_t i = 0; i < g->npending; i++)
		if (kstr_is(id, g->pending_ids[i])) {
			free(g->pending_ids[i]);
			g->pending_ids[i] = g->pending_ids[--g->npending];
			return true;
		}
	return false;
}

static void join_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, flex);
	int32_t session = krd_i32(&rd);
	int32_t rebalance = v >= 1 ? krd_i32(&rd) : session;
	struct kstr mid = krd_string(&rd, flex);
	struct kstr inst = {NULL, 0};
	if (v >= 5)
		inst = krd_string(&rd, flex);
	struct kstr ptype = krd_string(&rd, flex);
	int32_t np = krd_array(&rd, flex, 2);
	struct {
		struct kstr name;
		const uint8_t *meta;
		int32_t len;
	} prot[PROTOCOLS_MAX];
	int32_t nprot = 0;
	for (int32_t i = 0; i < np && !rd.err; i++) {
		struct kstr name = krd_string(&rd, flex);
		const uint8_t *meta;
		int32_t ml = krd_bytes(&rd, flex, &meta);
		if (flex)
			krd_tags_skip(&rd);
		if (nprot < PROTOCOLS_MAX && name.ptr) {
			prot[nprot].name = name;
			prot[nprot].meta = meta;
			prot[nprot].len = ml < 0 ? 0 : ml;
			nprot++;
		}
	}
	int16_t err = E_NONE;
	const struct sluice_config *cfg = &sc->b->cfg;
	if (rd.err || !gid.ptr || gid.len == 0)
		err = E_INVALID_GROUP_ID;
	else if (session < cfg->group_min_session_timeout_ms || session > cfg->group_max_session_timeout_ms)
		err = E_INVALID_SESSION_TIMEOUT;
	else if (nprot == 0 || !ptype.ptr || ptype.len == 0)
		err = E_INCONSISTENT_GROUP_PROTOCOL;
	struct group *g = NULL;
	if (!err) {
		load_partition(sc, gc, op->partition);
		g = group_get(gc, gid.ptr, (size_t)gid.len, op->partition);
		if (!g)
			err = E_COORDINATOR_NOT_AVAILABLE;
	}
	if (!err && g->members && g->protocol_type && !kstr_is(ptype, g->protocol_type))
		err = E_INCONSISTENT_GROUP_PROTOCOL;
	if (err) {
		join_response(op, err, g, NULL, false);
		reply(sc, op);
		return;
	}
	int64_t now = sluice_now_ms();
	struct member *m = NULL;
	char idbuf[256];
	if (mid.len == 0) {
		struct member *bi = member_by_instance(g, inst);
		new_member_id(op->client_id, idbuf, sizeof idbuf);
		if (bi) {
			/* Static member back under a new id: the old id is fenced. */
			bool was_leader = g->leader && !strcmp(g->leader, bi->id);
			if (was_leader) {
				free(g->leader);
				g->leader = strdup(idbuf);
			}
			free(bi->id);
			bi->id = strdup(idbuf);
			m = bi;
			/* KIP-345: a follower coming back to a stable group keeps its
			 * assignment, no rebalance; its SyncGroup returns what it had. */
			if (g->state == G_STABLE && !was_leader && !m->join_op && !m->sync_op) {
				m->last_seen_ms = sluice_now_ms();
				m->session_timeout_ms = session;
				m->rebalance_timeout_ms = rebalance;
				join_response(op, E_NONE, g, m, false);
				reply(sc, op);
				return;
			}
		} else if (v >= 4 && !inst.ptr) {
			/* KIP-394: hand out an id and ask the member to come back with it. */
			if (g->npending < PENDING_IDS_MAX)
				g->pending_ids[g->npending++] = strdup(idbuf);
			initial_delay_extend(sc, g, sluice_now_ms());
			struct kwr *w = &op->gout;
			kwr_init(w, 128, 1 << 20);
			if (v >= 2)
				kwr_i32(w, 0);
			kwr_i16(w, E_MEMBER_ID_REQUIRED);
			kwr_i32(w, -1);
			if (v >= 7)
				kwr_cstr(w, flex, NULL);
			kwr_cstr(w, flex, v >= 7 ? NULL : "");
			kwr_cstr(w, flex, "");
			if (v >= 9)
				kwr_bool(w, false);
			kwr_cstr(w, flex, idbuf);
			kwr_array(w, flex, 0);
			if (flex)
				kwr_tags_empty(w);
			reply(sc, op);
			return;
		}
	} else {
		m = member_find(g, mid);
		if (!m && !pending_take(g, mid)) {
			struct member *bi = member_by_instance(g, inst);
			join_response(op, bi ? E_FENCED_INSTANCE_ID : E_UNKNOWN_MEMBER_ID, g, NULL, false);
			reply(sc, op);
			return;
		}
		if (!m)
			snprintf(idbuf, sizeof idbuf, "%.*s", mid.len > 255 ? 255 : mid.len, mid.ptr);
	}
	if (!m) {
		if (g->nmembers >= cfg->group_max_size) {
			join_response(op, E_GROUP_MAX_SIZE_REACHED, g, NULL, false);
			reply(sc, op);
			return;
		}
		m = calloc(1, sizeof *m);
		if (!m) {
			join_response(op, E_COORDINATOR_NOT_AVAILABLE, g, NULL, false);
			reply(sc, op);
			return;
		}
		m->id = strdup(idbuf);
		m->instance_id = kstrdup(inst);
		m->next = NULL;
		struct member **tail = &g->members;
		while (*tail)
			tail = &(*tail)->next;
		*tail = m;
		g->nmembers++;
		initial_delay_extend(sc, g, now);
	}
	/* (Re)record what the member supports. */
	if (m->join_op) { /* a duplicate join replaces the older one */
		join_response(m->join_op, E_REBALANCE_IN_PROGRESS, g, NULL, false);
		reply(sc, m->join_op);
	}
	for (int32_t i = 0; i < m->nprot; i++) {
		free(m->prot[i].name);
		free(m->prot[i].meta);
	}
	m->nprot = 0;
	for (int32_t i = 0; i < nprot; i++) {
		m->prot[i].name = kstrdup(prot[i].name);
		m->prot[i].meta = malloc((size_t)prot[i].len + 1);
		if (m->prot[i].meta && prot[i].len)
			memcpy(m->prot[i].meta, prot[i].meta, (size_t)prot[i].len);
		m->prot[i].meta_len = prot[i].len;
		m->nprot++;
	}
	free(m->client_id);
	m->client_id = kstrdup(op->client_id);
	if (!m->client_id)
		m->client_id = strdup("");
	free(m->client_host);
	m->client_host = strdup(op->client_host ? op->client_host : "");
	m->session_timeout_ms = session;
	m->rebalance_timeout_ms = rebalance;
	m->last_seen_ms = now;
	m->join_op = op;
	if (!g->protocol_type)
		g->protocol_type = kstrdup(ptype);
	prepare_rebalance(sc, g, now);
	maybe_complete_join(sc, g, now);
}

/* ---- SyncGroup (14), Heartbeat (12), LeaveGroup (13) ------------------------------- */

static void sync_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, flex);
	int32_t gen = krd_i32(&rd);
	struct kstr mid = krd_string(&rd, flex);
	struct kstr inst = {NULL, 0};
	if (v >= 3)
		inst = krd_string(&rd, flex);
	if (v >= 5) {
		(void)krd_string(&rd, flex);
		(void)krd_string(&rd, flex);
	}
	int32_t na = krd_array(&rd, flex, 2);
	const uint8_t *assign_start = rd.p;
	for (int32_t i = 0; i < na && !rd.err; i++) {
		(void)krd_string(&rd, flex);
		const uint8_t *b;
		(void)krd_bytes(&rd, flex, &b);
		if (flex)
			krd_tags_skip(&rd);
	}
	struct group *g = NULL;
	struct member *m = NULL;
	int16_t err = rd.err || !gid.ptr ? E_INVALID_GROUP_ID : E_NONE;
	if (!err) {
		load_partition(sc, gc, op->partition);
		g = group_find(gc, gid.ptr, (size_t)gid.len);
		err = g ? member_check(g, mid, inst, &m) : E_UNKNOWN_MEMBER_ID;
	}
	if (!err && gen != g->generation)
		err = E_ILLEGAL_GENERATION;
	if (!err && g->state == G_PREPARING)
		err = E_REBALANCE_IN_PROGRESS;
	if (!err && (g->state == G_EMPTY || g->state == G_DEAD))
		err = E_UNKNOWN_MEMBER_ID;
	if (err) {
		sync_response(op, err, g, NULL);
		reply(sc, op);
		return;
	}
	m->last_seen_ms = sluice_now_ms();
	if (g->state == G_STABLE) {
		sync_response(op, E_NONE, g, m);
		reply(sc, op);
		return;
	}
	/* CompletingRebalance */
	if (m->sync_op) {
		sync_response(m->sync_op, E_REBALANCE_IN_PROGRESS, g, NULL);
		reply(sc, m->sync_op);
	}
	m->sync_op = op;
	if (strcmp(m->id, g->leader) != 0)
		return; /* followers wait for the leader's assignment */
	struct krd ar;
	krd_init(&ar, assign_start, (size_t)(rd.p - assign_start));
	for (int32_t i = 0; i < na && !ar.err; i++) {
		struct kstr who = krd_string(&ar, flex);
		const uint8_t *b;
		int32_t bl = krd_bytes(&ar, flex, &b);
		if (flex)
			krd_tags_skip(&ar);
		struct member *x = member_find(g, who);
		if (!x)
			continue;
		free(x->assignment);
		x->assignment = malloc((size_t)(bl > 0 ? bl : 0) + 1);
		x->assignment_len = 0;
		if (x->assignment && bl > 0) {
			memcpy(x->assignment, b, (size_t)bl);
			x->assignment_len = bl;
		}
	}
	g->state = G_STABLE;
	/* Followers get their assignment now; the leader once the new
	 * generation is durable. */
	for (struct member *x = g->members; x; x = x->next) {
		if (!x->sync_op || x == m)
			continue;
		sync_response(x->sync_op, E_NONE, g, x);
		reply(sc, x->sync_op);
		x->sync_op = NULL;
	}
	m->sync_op = NULL;
	sync_response(op, E_NONE, g, m);
	if (write_group(sc, g, false, op) < 0)
		reply(sc, op);
}

static void heartbeat(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, flex);
	int32_t gen = krd_i32(&rd);
	struct kstr mid = krd_string(&rd, flex);
	struct kstr inst = {NULL, 0};
	if (v >= 3)
		inst = krd_string(&rd, flex);
	struct group *g = NULL;
	struct member *m = NULL;
	int16_t err = rd.err || !gid.ptr ? E_INVALID_GROUP_ID : E_NONE;
	if (!err) {
		load_partition(sc, gc, op->partition);
		g = group_find(gc, gid.ptr, (size_t)gid.len);
		err = g ? member_check(g, mid, inst, &m) : E_UNKNOWN_MEMBER_ID;
	}
	if (!err) {
		m->last_seen_ms = sluice_now_ms();
		if (g->state == G_PREPARING)
			err = E_REBALANCE_IN_PROGRESS;
		else if (gen != g->generation)
			err = E_ILLEGAL_GENERATION;
	}
	struct kwr *w = &op->gout;
	kwr_init(w, 16, 1024);
	if (v >= 1)
		kwr_i32(w, 0);
	kwr_i16(w, err);
	if (flex)
		kwr_tags_empty(w);
	reply(sc, op);
}

static void leave_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, flex);
	struct group *g = NULL;
	if (gid.ptr && !rd.err) {
		load_partition(sc, gc, op->partition);
		g = group_find(gc, gid.ptr, (size_t)gid.len);
	}
	struct kwr *w = &op->gout;
	kwr_init(w, 64, 1 << 20);
	if (v >= 1)
		kwr_i32(w, 0);
	bool left = false;
	if (v <= 2) {
		struct kstr mid = krd_string(&rd, flex);
		struct member *m = g && !rd.err ? member_find(g, mid) : NULL;
		kwr_i16(w, m ? E_NONE : E_UNKNOWN_MEMBER_ID);
		if (m) {
			if (m->join_op) {
				join_response(m->join_op, E_UNKNOWN_MEMBER_ID, g, NULL, false);
				reply(sc, m->join_op);
			}
			if (m->sync_op) {
				sync_response(m->sync_op, E_UNKNOWN_MEMBER_ID, g, NULL);
				reply(sc, m->sync_op);
			}
			remove_member(g, m);
			left = true;
		}
	} else {
		int32_t n = krd_array(&rd, flex, 2);
		kwr_i16(w, rd.err ? E_INVALID_GROUP_ID : E_NONE);
		kwr_array(w, flex, n > 0 ? n : 0);
		for (int32_t i = 0; i < n && !rd.err; i++) {
			struct kstr mid = krd_string(&rd, flex);
			struct kstr inst = krd_string(&rd, flex);
			if (v >= 5)
				(void)krd_string(&rd, flex);
			if (flex)
				krd_tags_skip(&rd);
			struct member *m = NULL;
			int16_t e = E_UNKNOWN_MEMBER_ID;
			if (g) {
				if (mid.len == 0 && inst.ptr)
					m = member_by_instance(g, inst);
				else
					e = member_check(g, mid, inst, &m);
				if (m)
					e = E_NONE;
			}
			kwr_string(w, flex, mid.ptr ? mid.ptr : "", mid.ptr ? mid.len : 0);
			kwr_string(w, flex, inst.ptr, inst.len);
			kwr_i16(w, e);
			if (flex)
				kwr_tags_empty(w);
			if (m) {
				if (m->join_op) {
					join_response(m->join_op, E_UNKNOWN_MEMBER_ID, g, NULL, false);
					reply(sc, m->join_op);
				}
				if (m->sync_op) {
					sync_response(m->sync_op, E_UNKNOWN_MEMBER_ID, g, NULL);
					reply(sc, m->sync_op);
				}
				remove_member(g, m);
				left = true;
			}
		}
	}
	if (flex)
		kwr_tags_empty(w);
	if (left) {
		int64_t now = sluice_now_ms();
		if (g->members)
			prepare_rebalance(sc, g, now);
		else {
			fail_pending_syncs(sc, g, E_REBALANCE_IN_PROGRESS);
			g->state = G_EMPTY;
			g->empty_since_ms = sluice_now_ms();
			g->generation++;
			free(g->leader);
			g->leader = NULL;
			(void)write_group(sc, g, false, NULL);
		}
		maybe_complete_join(sc, g, now);
	}
	reply(sc, op);
}

/* ---- OffsetCommit (8), OffsetFetch (9), OffsetDelete (47) -------------------------- */

/* An offset commit waiting for its __consumer_offsets write: the offsets
 * to apply to the group then, and where each partition's ErrorCode sits in
 * the encoded answer (turned to NOT_COORDINATOR, as Kafka answers a storage
 * error, when the write fails: the client finds the coordinator again and
 * retries, and nothing unwritten was ever visible). */
struct pending_commit {
	char *group;
	struct offset_entry *e;
	size_t *err_pos;
	int32_t n, cap;
};

static bool pending_add(struct pending_commit *pc, const struct offset_entry *ne, size_t err_pos)
{
	if (pc->n == pc->cap) {
		int32_t cap = pc->cap ? 2 * pc->cap : 8;
		struct offset_entry *e = realloc(pc->e, (size_t)cap * sizeof *e);
		if (e)
			pc->e = e;
		size_t *pos = e ? realloc(pc->err_pos, (size_t)cap * sizeof *pos) : NULL;
		if (pos)
			pc->err_pos = pos;
		if (!e || !pos)
			return false;
		pc->cap = cap;
	}
	struct offset_entry *d = &pc->e[pc->n];
	*d = *ne;
	d->topic = strdup(ne->topic);
	d->metadata = strdup(ne->metadata);
	if (!d->topic || !d->metadata) {
		free(d->topic);
		free(d->metadata);
		return false;
	}
	pc->err_pos[pc->n++] = err_pos;
	return true;
}

static void pending_fail(const struct pending_commit *pc, struct kwr *w)
{
	for (int32_t i = 0; i < pc->n; i++)
		if (pc->err_pos[i] + 2 <= w->len)
		{
			w->buf[pc->err_pos[i]] = 0;
			w->buf[pc->err_pos[i] + 1] = (uint8_t)E_NOT_COORDINATOR;
		}
}

static void pending_free(struct pending_commit *pc)
{
	for (int32_t i = 0; i < pc->n; i++) {
		free(pc->e[i].topic);
		free(pc->e[i].metadata);
	}
	free(pc->e);
	free(pc->err_pos);
	free(pc->group);
	memset(pc, 0, sizeof *pc);
}

static void offset_commit(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, flex);
	int32_t gen = v >= 1 ? krd_i32(&rd) : -1;
	struct kstr mid = v >= 1 ? krd_string(&rd, flex) : (struct kstr){"", 0};
	struct kstr inst = {NULL, 0};
	if (v >= 7)
		inst = krd_string(&rd, flex);
	if (v >= 2 && v <= 4)
		(void)krd_i64(&rd);
	int16_t gerr = rd.err || !gid.ptr || gid.len == 0 ? E_INVALID_GROUP_ID : E_NONE;
	struct group *g = NULL;
	if (!gerr) {
		load_partition(sc, gc, op->partition);
		g = group_get(gc, gid.ptr, (size_t)gid.len, op->partition);
		if (!g)
			gerr = E_COORDINATOR_NOT_AVAILABLE;
	}
	if (!gerr) {
		if (gen < 0 && g->state == G_EMPTY && !g->members) {
			/* a standalone consumer committing without group membership */
		} else {
			struct member *m;
			gerr = member_check(g, mid, inst, &m);
			if (!gerr && gen != g->generation)
				gerr = E_ILLEGAL_GENERATION;
			if (!gerr && g->state == G_COMPLETING)
				gerr = E_REBALANCE_IN_PROGRESS;
			if (!gerr && m)
				m->last_seen_ms = sluice_now_ms();
		}
	}
	/* Walk the topics: answer per partition, gather the records to write. */
	struct kwr *w = &op->gout;
	kwr_init(w, 256, 64u << 20);
	struct recset rs;
	recset_init(&rs);
	struct pending_commit pc = {0};
	if (v >= 3)
		kwr_i32(w, 0);
	int32_t nt = krd_array(&rd, flex, 2);
	kwr_array(w, flex, nt > 0 ? nt : 0);
	int64_t now_wall = 0;
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		now_wall = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	}
	for (int32_t t = 0; t < nt && !rd.err; t++) {
		struct kstr topic = krd_string(&rd, flex);
		kwr_string(w, flex, topic.ptr ? topic.ptr : "", topic.ptr ? topic.len : 0);
		int32_t np = krd_array(&rd, flex, 12);
		kwr_array(w, flex, np > 0 ? np : 0);
		for (int32_t p = 0; p < np && !rd.err; p++) {
			int32_t part = krd_i32(&rd);
			int64_t off = krd_i64(&rd);
			int32_t epoch = v >= 6 ? krd_i32(&rd) : -1;
			if (v == 1)
				(void)krd_i64(&rd);
			struct kstr meta = krd_string(&rd, flex);
			if (flex)
				krd_tags_skip(&rd);
			int16_t e = gerr;
			if (!e && meta.ptr && meta.len > sc->b->cfg.offset_metadata_max_bytes)
				e = E_OFFSET_METADATA_TOO_LARGE;
			if (!e && !topic.ptr)
				e = E_UNKNOWN_TOPIC_OR_PARTITION;
			struct offset_entry *oe = NULL;
			if (!e && !(oe = offset_slot(g, topic.ptr, (size_t)topic.len, part, false)) &&
			    g->off_n >= OFFSETS_PER_GROUP_MAX)
				e = E_COORDINATOR_NOT_AVAILABLE;
			kwr_i32(w, part);
			if (!e) {
				/* Applied to the group only once the record is written. */
				struct offset_entry ne = {.topic = oe ? oe->topic : kstrdup(topic), .partition = part,
							  .offset = off, .leader_epoch = epoch,
							  .metadata = meta.ptr ? kstrdup(meta) : strdup(""),
							  .commit_ts = now_wall};
				if (!ne.topic || !ne.metadata || !pending_add(&pc, &ne, w->len))
					e = E_COORDINATOR_NOT_AVAILABLE;
				else
					recset_offset(&rs, g, &ne, true);
				if (oe)
					ne.topic = NULL; /* the group's own string */
				free(ne.topic);
				free(ne.metadata);
			}
			kwr_i16(w, e);
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			krd_tags_skip(&rd);
		if (flex)
			kwr_tags_empty(w);
	}
	if (flex)
		kwr_tags_empty(w);
	bool waiting = false;
	if (rs.n > 0) {
		pc.group = strdup(g->id);
		struct pending_commit *pp = malloc(sizeof *pp);
		if (pp && pc.group) {
			*pp = pc;
			op->gpending = pp;
			waiting = recset_write(sc, g, &rs, op) == 0;
		} else {
			free(pp);
			op->gpending = NULL;
			pending_fail(&pc, w);
			pending_free(&pc);
		}
		if (!waiting) {
			SLOG_ERR("group", "group %s: offset commit could not be written to %s-%d", g->id,
				 SLUICE_OFFSETS_TOPIC, g->partition);
			sluice_group_written(sc, op, false);
		}
	} else {
		pending_free(&pc);
	}
	recset_free(&rs);
	if (!waiting)
		reply(sc, op);
}

void sluice_group_written(struct storecore *sc, struct partop *op, bool ok)
{
	struct pending_commit *pc = op->gpending;
	if (!pc)
		return;
	op->gpending = NULL;
	struct gcoord *gc = sc->groups;
	struct group *g = gc ? group_find(gc, pc->group, strlen(pc->group)) : NULL;
	if (ok && !g)
		SLOG_WARN("group", "group %s went away before its offset commit was written", pc->group);
	for (int32_t i = 0; ok && g && i < pc->n; i++) {
		struct offset_entry *ne = &pc->e[i];
		struct offset_entry *oe = offset_slot(g, ne->topic, strlen(ne->topic), ne->partition, true);
		if (!oe)
			continue; /* full: written, so it is back after a restart */
		oe->offset = ne->offset;
		oe->leader_epoch = ne->leader_epoch;
		free(oe->metadata);
		oe->metadata = ne->metadata;
		ne->metadata = NULL;
		oe->commit_ts = ne->commit_ts;
	}
	if (!ok)
		pending_fail(pc, &op->gout);
	pending_free(pc);
	free(pc);
}

/* Encode the topics part of an OffsetFetch answer for one group. */
static void fetch_offsets_encode(struct kwr *w, struct group *g, struct krd *rd, bool flex, int16_t v, bool v8,
				 int16_t gerr)
{
	int32_t nt = krd_array(rd, flex, 2);
	if (nt < 0) { /* all committed offsets of the group */
		uint32_t topics = 0;
		/* one topic entry per committed partition keeps this simple and valid */
		for (uint32_t i = 0; g && i < g->off_cap; i++)
			topics += g->offsets[i].topic != NULL;
		kwr_array(w, flex, (int32_t)topics);
		for (uint32_t i = 0; g && i < g->off_cap; i++) {
			struct offset_entry *e = &g->offsets[i];
			if (!e->topic)
				continue;
			kwr_cstr(w, flex, e->topic);
			kwr_array(w, flex, 1);
			kwr_i32(w, e->partition);
			kwr_i64(w, e->offset);
			if (v >= 5 || v8)
				kwr_i32(w, e->leader_epoch);
			kwr_cstr(w, flex, e->metadata ? e->metadata : "");
			kwr_i16(w, E_NONE);
			if (flex) {
				kwr_tags_empty(w);
				kwr_tags_empty(w);
			}
		}
		return;
	}
	kwr_array(w, flex, nt);
	for (int32_t t = 0; t < nt && !rd->err; t++) {
		struct kstr topic = krd_string(rd, flex);
		kwr_string(w, flex, topic.ptr ? topic.ptr : "", topic.ptr ? topic.len : 0);
		int32_t np = krd_array(rd, flex, 4);
		kwr_array(w, flex, np > 0 ? np : 0);
		for (int32_t p = 0; p < np && !rd->err; p++) {
			int32_t part = krd_i32(rd);
			struct offset_entry *e = g && topic.ptr ? offset_slot(g, topic.ptr, (size_t)topic.len, part, false) : NULL;
			kwr_i32(w, part);
			kwr_i64(w, e ? e->offset : -1);
			if (v >= 5 || v8)
				kwr_i32(w, e ? e->leader_epoch : -1);
			kwr_cstr(w, flex, e && e->metadata ? e->metadata : "");
			kwr_i16(w, v <= 1 ? gerr : E_NONE);
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex) {
			krd_tags_skip(rd);
			kwr_tags_empty(w);
		}
	}
}

static void offset_fetch(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, flex);
	struct group *g = NULL;
	if (gid.ptr && !rd.err) {
		load_partition(sc, gc, op->partition);
		g = group_find(gc, gid.ptr, (size_t)gid.len);
	}
	struct kwr *w = &op->gout;
	kwr_init(w, 256, 64u << 20);
	if (v >= 8) {
		/* one element of Groups: data holds this group's part of the request */
		if (v >= 9) {
			(void)krd_string(&rd, flex);
			(void)krd_i32(&rd);
		}
		kwr_string(w, flex, gid.ptr ? gid.ptr : "", gid.ptr ? gid.len : 0);
		fetch_offsets_encode(w, g, &rd, flex, v, true, E_NONE);
		kwr_i16(w, E_NONE);
		if (flex)
			kwr_tags_empty(w);
		reply(sc, op);
		return;
	}
	if (v >= 3)
		kwr_i32(w, 0);
	fetch_offsets_encode(w, g, &rd, flex, v, false, E_NONE);
	if (v >= 2)
		kwr_i16(w, E_NONE);
	if (flex)
		kwr_tags_empty(w);
	reply(sc, op);
}

static void offset_delete_api(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr gid = krd_string(&rd, false);
	struct group *g = NULL;
	if (gid.ptr && !rd.err) {
		load_partition(sc, gc, op->partition);
		g = group_find(gc, gid.ptr, (size_t)gid.len);
	}
	int16_t gerr = !g ? E_GROUP_ID_NOT_FOUND : E_NONE;
	struct kwr *w = &op->gout;
	kwr_init(w, 128, 64u << 20);
	kwr_i16(w, gerr);
	kwr_i32(w, 0);
	struct recset rs;
	recset_init(&rs);
	int32_t nt = krd_array(&rd, false, 2);
	kwr_array(w, false, gerr || nt < 0 ? 0 : nt);
	for (int32_t t = 0; !gerr && t < nt && !rd.err; t++) {
		struct kstr topic = krd_string(&rd, false);
		kwr_string(w, false, topic.ptr ? topic.ptr : "", topic.ptr ? topic.len : 0);
		int32_t np = krd_array(&rd, false, 4);
		kwr_array(w, false, np > 0 ? np : 0);
		for (int32_t p = 0; p < np && !rd.err; p++) {
			int32_t part = krd_i32(&rd);
			int16_t e = g->members ? E_GROUP_SUBSCRIBED_TO_TOPIC : E_NONE;
			struct offset_entry *oe = !e && topic.ptr ? offset_slot(g, topic.ptr, (size_t)topic.len, part, false) : NULL;
			if (oe) {
				recset_offset(&rs, g, oe, false);
				offset_delete(g, oe);
			}
			kwr_i32(w, part);
			kwr_i16(w, e);
		}
	}
	bool waiting = rs.n > 0 && recset_write(sc, g, &rs, op) == 0;
	recset_free(&rs);
	if (!waiting)
		reply(sc, op);
}

/* ---- DescribeGroups (15), DeleteGroups (42), ListGroups (16) --------------------- */

/* Tombstones for every offset of the group and the group itself; wait_op
 * (if any) is answered once they are committed. Returns whether it waits. */
static bool delete_group_records_wait(struct storecore *sc, struct group *g, struct partop *wait_op)
{
	struct recset rs;
	recset_init(&rs);
	for (uint32_t k = 0; k < g->off_cap; k++)
		if (g->offsets[k].topic)
			recset_offset(&rs, g, &g->offsets[k], false);
	recset_group(&rs, g, false);
	bool waiting = recset_write(sc, g, &rs, wait_op) == 0 && wait_op;
	recset_free(&rs);
	return waiting;
}

static void delete_group_records(struct storecore *sc, struct group *g)
{
	(void)delete_group_records_wait(sc, g, NULL);
}

static void describe_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	load_partition(sc, gc, op->partition);
	struct group *g = op->gname.ptr ? group_find(gc, op->gname.ptr, (size_t)op->gname.len) : NULL;
	struct kwr *w = &op->gout;
	kwr_init(w, 256, 64u << 20);
	kwr_i16(w, E_NONE);
	kwr_string(w, flex, op->gname.ptr ? op->gname.ptr : "", op->gname.ptr ? op->gname.len : 0);
	kwr_cstr(w, flex, g ? state_names[g->state] : "Dead");
	kwr_cstr(w, flex, g && g->protocol_type ? g->protocol_type : "");
	kwr_cstr(w, flex, g && g->protocol && g->state == G_STABLE ? g->protocol : "");
	int32_t nm = g && (g->state == G_STABLE || g->state == G_COMPLETING || g->state == G_PREPARING) ? g->nmembers : 0;
	kwr_array(w, flex, nm);
	for (struct member *m = nm ? g->members : NULL; m; m = m->next) {
		kwr_cstr(w, flex, m->id);
		if (v >= 4)
			kwr_cstr(w, flex, m->instance_id);
		kwr_cstr(w, flex, m->client_id ? m->client_id : "");
		kwr_cstr(w, flex, m->client_host ? m->client_host : "");
		const struct protocol *p = NULL;
		for (int32_t i = 0; i < m->nprot && g->protocol; i++)
			if (!strcmp(m->prot[i].name, g->protocol))
				p = &m->prot[i];
		kwr_bytes(w, flex, p ? p->meta : (const uint8_t *)"", p ? p->meta_len : 0);
		bool stable = g->state == G_STABLE;
		kwr_bytes(w, flex, stable && m->assignment ? m->assignment : (const uint8_t *)"",
			  stable ? m->assignment_len : 0);
		if (flex)
			kwr_tags_empty(w);
	}
	if (v >= 3)
		kwr_i32(w, INT32_MIN);
	if (flex)
		kwr_tags_empty(w);
	reply(sc, op);
}

static void delete_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	load_partition(sc, gc, op->partition);
	struct group *g = op->gname.ptr ? group_find(gc, op->gname.ptr, (size_t)op->gname.len) : NULL;
	int16_t err = !g ? E_GROUP_ID_NOT_FOUND : g->members ? E_NON_EMPTY_GROUP : E_NONE;
	struct kwr *w = &op->gout;
	kwr_init(w, 64, 1 << 20);
	kwr_string(w, flex, op->gname.ptr ? op->gname.ptr : "", op->gname.ptr ? op->gname.len : 0);
	kwr_i16(w, err);
	if (flex)
		kwr_tags_empty(w);
	if (err) {
		reply(sc, op);
		return;
	}
	bool waiting = delete_group_records_wait(sc, g, op);
	group_remove(gc, g);
	if (!waiting)
		reply(sc, op);
}

static void list_groups(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	bool flex = op->flex;
	int16_t v = op->api_version;
	/* Every offsets partition this core owns is loaded first. */
	for (int32_t p = 0; p < gc->partitions; p++)
		if (sluice_store_core_for(sc->b, SLUICE_OFFSETS_TOPIC, p) == sc->id)
			load_partition(sc, gc, p);
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct kstr states[8];
	int32_t ns = v >= 4 ? krd_array(&rd, flex, 1) : -1;
	for (int32_t i = 0; i < ns && i < 8 && !rd.err; i++)
		states[i] = krd_string(&rd, flex);
	struct kwr *w = &op->gout;
	kwr_init(w, 256, 64u << 20);
	op->gcount = 0;
	for (uint32_t b = 0; b < gc->cap; b++)
		for (struct group *g = gc->table[b]; g; g = g->next) {
			if (ns > 0) {
				bool match = false;
				for (int32_t i = 0; i < ns && i < 8; i++)
					match |= states[i].ptr && kstr_eq(states[i], state_names[g->state]);
				if (!match)
					continue;
			}
			kwr_cstr(w, flex, g->id);
			kwr_cstr(w, flex, g->protocol_type ? g->protocol_type : "");
			if (v >= 4)
				kwr_cstr(w, flex, state_names[g->state]);
			if (v >= 5)
				kwr_cstr(w, flex, "classic");
			if (flex)
				kwr_tags_empty(w);
			op->gcount++;
		}
	reply(sc, op);
}

void sluice_group_handle(struct storecore *sc, struct partop *op)
{
	struct gcoord *gc = coord(sc);
	if (op->partition < 0 || op->partition >= gc->partitions) {
		op->error = E_COORDINATOR_NOT_AVAILABLE;
		reply(sc, op);
		return;
	}
	switch (op->api_key) {
	case 8: offset_commit(sc, gc, op); break;
	case 9: offset_fetch(sc, gc, op); break;
	case 11: join_group(sc, gc, op); break;
	case 12: heartbeat(sc, gc, op); break;
	case 13: leave_group(sc, gc, op); break;
	case 14: sync_group(sc, gc, op); break;
	case 15: describe_group(sc, gc, op); break;
	case 16: list_groups(sc, gc, op); break;
	case 42: delete_group(sc, gc, op); break;
	case 47: offset_delete_api(sc, gc, op); break;
	default:
		op->error = E_UNKNOWN_SERVER_ERROR;
		reply(sc, op);
	}
}
