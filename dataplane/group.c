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
 * answered once committed: once the partition's high watermark passes the
 * records (every ISR member has them, as a producer's acks=all), with
 * Kafka's coordinator errors when that fails (NOT_COORDINATOR: this broker
 * stopped leading, or its log failed; COORDINATOR_NOT_AVAILABLE: the ISR
 * is below min.insync.replicas).
 *
 * Leadership: the groups of a __consumer_offsets partition live here only
 * while this broker leads it, and are keyed by the leader epoch they were
 * read at. When the controller makes this broker the partition's leader
 * (the storage core's leadership hook, or the first op for it), its log is
 * read back: offsets resume; groups come back at their last stored
 * generation, Stable with the members and assignments that record names
 * (their sessions restart now), or Empty. When it stops leading, or leads
 * again at a new epoch, its groups are dropped from memory (held JoinGroup
 * and SyncGroup answered NOT_COORDINATOR) and, leading again, read back
 * afresh: what another leader wrote meanwhile is what counts. Followers
 * replicate the partition like any other and keep no group state from it.
 *
 * Strings: every string the coordinator keeps (group, member and instance
 * ids, client ids, protocol type and names, topic names, commit metadata) is
 * Kafka's string, bytes with a length that may contain NULs, and is kept,
 * compared, answered and written as such (struct gstr), never as a C string.
 *
 * Requests: the Kafka codec (group_codec.c, through group_internal.h)
 * decodes each whole body into a plain struct before anything changes here,
 * and encodes the answers from plain results; this file never reads or
 * writes the wire. A body that does not decode is answered with nothing,
 * and the network core closes the connection, as Kafka does with a request
 * it cannot parse. The coordinator is a storage-core service
 * (sluice_group_service, dataplane/service.h). */
#include "dataplane/group.h"
#include "dataplane/group_internal.h"
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
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
/* Kafka's record schemas for __consumer_offsets give strings an int16
 * length: longer group ids, protocol names or metadata cannot be written. */
#define GROUP_STRING_MAX INT16_MAX
/* A generated member id: up to this much of the client id, '-', a UUID. */
#define MEMBER_ID_CLIENT_MAX 100
#define MEMBER_ID_MAX (MEMBER_ID_CLIENT_MAX + 1 + 36)
#define ID_TABLE_MIN 16
_Static_assert(MEMBER_ID_MAX <= GROUP_STRING_MAX, "a generated member id fits the group record's strings");
_Static_assert((ID_TABLE_MIN & (ID_TABLE_MIN - 1)) == 0, "id tables are powers of two (masks)");

enum { G_EMPTY, G_PREPARING, G_COMPLETING, G_STABLE, G_DEAD };
static const char *const state_names[] = {"Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"};


/* A Kafka string (or bytes) owned by the struct holding it: len bytes at
 * ptr, NULs allowed (a NUL is kept after them for log lines only); ptr NULL
 * is Kafka's null. */
struct gstr {
	char *ptr;
	int32_t len;
};

struct protocol {
	struct gstr name;
	uint8_t *meta;
	int32_t meta_len;
};

struct member {
	struct gstr id, instance_id, client_id, client_host;
	int32_t session_timeout_ms, rebalance_timeout_ms;
	int32_t nprot;
	struct protocol prot[SLUICE_GROUP_PROTOCOLS_MAX];
	uint8_t *assignment;
	int32_t assignment_len;
	struct partop *join_op, *sync_op;
	int64_t last_seen_ms;
	struct member *next;
};

/* An index of ids: open addressing, linear probing, backward-shift
 * deletion (no tombstones, no rebuild). The members index borrows each
 * member's id; the pending-ids table owns its ids. */
struct idslot {
	struct gstr id; /* ptr NULL: free slot */
	uint32_t hash;
	struct member *m;  /* members index */
	int64_t expire_ms; /* pending ids: forgotten then (monotonic) */
};

struct idtab {
	struct idslot *s;
	uint32_t cap, n;
};

struct offset_entry {
	struct gstr topic; /* ptr NULL: free slot */
	uint32_t hash;
	int32_t partition;
	int64_t offset;
	int32_t leader_epoch;
	struct gstr metadata;
	int64_t commit_ts;
};

struct group {
	struct gstr id;
	int32_t partition; /* of __consumer_offsets */
	int state;
	int32_t generation;
	int32_t storing_generation; /* the generation the leader's SyncGroup is writing, or -1 */
	struct gstr protocol_type, protocol, leader;
	struct member *members, *members_tail;
	int32_t nmembers;
	struct idtab member_ix;
	/* Member ids handed out with MEMBER_ID_REQUIRED (KIP-394) and not yet
	 * used: at most group.max.size, each forgotten after the session
	 * timeout its JoinGroup asked for, as Kafka expires a pending member. */
	struct idtab pending;
	int64_t pending_next_expiry_ms; /* earliest expire_ms in pending, or INT64_MAX */
	int64_t rebalance_deadline_ms;
	int64_t empty_since_ms; /* monotonic; when the group last became Empty */
	bool initial_delay;
	int64_t initial_end_ms; /* the initial delay is extended at most until then */
	struct offset_entry *offsets; /* open addressing, backward-shift deletion */
	uint32_t off_cap, off_n;
	struct group *next;
};

struct gcoord {
	struct group **table; /* chained hash by group id */
	uint32_t cap, count;
	int32_t *loaded_epoch; /* per offsets partition: the leader epoch its groups were read at, -1: not here */
	int32_t partitions;
	int64_t last_tick_ms;
	int64_t next_expiry_ms;
	int64_t next_join_deadline_ms; /* earliest join-phase deadline (may be stale: early) */
	struct kwr scratch;
};

/* ---- small helpers -------------------------------------------------------- */

static struct kstr gk(struct gstr s) { return (struct kstr){s.ptr, s.len}; }

/* d = a copy of s (null stays null). False when memory runs out (d null). */
static bool gstr_copy(struct gstr *d, struct kstr s)
{
	d->ptr = NULL;
	d->len = 0;
	if (!s.ptr)
		return true;
	assert(s.len >= 0);
	char *p = malloc((size_t)s.len + 1);
	if (!p)
		return false;
	memcpy(p, s.ptr, (size_t)s.len);
	p[s.len] = '\0';
	d->ptr = p;
	d->len = s.len;
	return true;
}

static void gstr_free(struct gstr *s)
{
	free(s->ptr);
	s->ptr = NULL;
	s->len = 0;
}

/* Replace d by a copy of s; d is left as it was when memory runs out. */
static bool gstr_replace(struct gstr *d, struct kstr s)
{
	struct gstr n;
	if (!gstr_copy(&n, s))
		return false;
	gstr_free(d);
	*d = n;
	return true;
}

/* Equal as Kafka strings: same bytes and length, or both null. */
static bool kstr_same(struct kstr a, struct kstr b)
{
	if (!a.ptr || !b.ptr)
		return !a.ptr && !b.ptr;
	return a.len == b.len && memcmp(a.ptr, b.ptr, (size_t)a.len) == 0;
}

static bool gstr_same(struct gstr a, struct gstr b) { return kstr_same(gk(a), gk(b)); }

static void kwr_gstr(struct kwr *w, bool flex, struct gstr s) { kwr_string(w, flex, s.ptr, s.len); }

/* A non-nullable string field: null is written as "". */
static void kwr_gstr_nn(struct kwr *w, bool flex, struct gstr s) { kwr_string(w, flex, s.ptr ? s.ptr : "", s.len); }

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

/* ---- id tables -------------------------------------------------------------- */

static struct idslot *idtab_find(const struct idtab *t, struct kstr id)
{
	if (!t->cap || !id.ptr)
		return NULL;
	uint32_t mask = t->cap - 1, h = hash_str(id.ptr, (size_t)id.len);
	for (uint32_t i = h & mask;; i = (i + 1) & mask) {
		struct idslot *s = &t->s[i];
		if (!s->id.ptr)
			return NULL;
		if (s->hash == h && kstr_same(gk(s->id), id))
			return s;
	}
}

static bool idtab_grow(struct idtab *t)
{
	uint32_t cap = t->cap ? t->cap * 2 : ID_TABLE_MIN;
	struct idslot *s = calloc(cap, sizeof *s);
	if (!s)
		return false;
	for (uint32_t i = 0; i < t->cap; i++) {
		if (!t->s[i].id.ptr)
			continue;
		uint32_t j = t->s[i].hash & (cap - 1);
		while (s[j].id.ptr)
			j = (j + 1) & (cap - 1);
		s[j] = t->s[i];
	}
	free(t->s);
	t->s = s;
	t->cap = cap;
	return true;
}

/* A slot holding id (not yet present; owned or borrowed as the table
 * says). NULL when memory runs out. */
static struct idslot *idtab_add(struct idtab *t, struct gstr id)
{
	assert(id.ptr && !idtab_find(t, gk(id)));
	if ((t->n + 1) * 2 > t->cap && !idtab_grow(t))
		return NULL;
	uint32_t mask = t->cap - 1, h = hash_str(id.ptr, (size_t)id.len), i = h & mask;
	while (t->s[i].id.ptr)
		i = (i + 1) & mask;
	t->s[i] = (struct idslot){.id = id, .hash = h};
	t->n++;
	return &t->s[i];
}

/* Remove slot s (its id is not freed here) and shift the rest of its
 * probe run back so every entry stays reachable from its home slot. */
static void idtab_del(struct idtab *t, struct idslot *s)
{
	uint32_t mask = t->cap - 1, i = (uint32_t)(s - t->s);
	assert(i < t->cap && s->id.ptr && t->n > 0);
	for (uint32_t j = (i + 1) & mask; t->s[j].id.ptr; j = (j + 1) & mask) {
		uint32_t k = t->s[j].hash & mask;
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		t->s[i] = t->s[j];
		i = j;
	}
	t->s[i] = (struct idslot){0};
	t->n--;
}

static void idtab_free(struct idtab *t, bool owned)
{
	for (uint32_t i = 0; owned && i < t->cap; i++)
		gstr_free(&t->s[i].id);
	free(t->s);
	t->s = NULL;
	t->cap = t->n = 0;
}

/* ---- groups, members, offsets ------------------------------------------------- */

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
	gc->loaded_epoch = malloc((size_t)gc->partitions * sizeof *gc->loaded_epoch);
	assert(gc->table && gc->loaded_epoch);
	for (int32_t i = 0; i < gc->partitions; i++)
		gc->loaded_epoch[i] = -1;
	kwr_init(&gc->scratch, 4096, 64u << 20);
	gc->next_join_deadline_ms = INT64_MAX;
	sc->groups = gc;
	return gc;
}

static struct group *group_find(struct gcoord *gc, struct kstr id)
{
	if (!id.ptr)
		return NULL;
	for (struct group *g = gc->table[hash_str(id.ptr, (size_t)id.len) & (gc->cap - 1)]; g; g = g->next)
		if (kstr_same(gk(g->id), id))
			return g;
	return NULL;
}

static struct group *group_get(struct gcoord *gc, struct kstr id, int32_t partition)
{
	assert(id.ptr);
	struct group *g = group_find(gc, id);
	if (g || gc->count >= GROUPS_PER_CORE_MAX)
		return g;
	g = calloc(1, sizeof *g);
	if (!g || !gstr_copy(&g->id, id)) {
		free(g);
		return NULL;
	}
	g->partition = partition;
	g->state = G_EMPTY;
	g->storing_generation = -1;
	g->empty_since_ms = sluice_now_ms();
	g->pending_next_expiry_ms = INT64_MAX;
	uint32_t b = hash_str(id.ptr, (size_t)id.len) & (gc->cap - 1);
	g->next = gc->table[b];
	gc->table[b] = g;
	gc->count++;
	return g;
}

static void member_free(struct member *m)
{
	gstr_free(&m->id);
	gstr_free(&m->instance_id);
	gstr_free(&m->client_id);
	gstr_free(&m->client_host);
	for (int32_t i = 0; i < m->nprot; i++) {
		gstr_free(&m->prot[i].name);
		free(m->prot[i].meta);
	}
	free(m->assignment);
	free(m);
}

static void offsets_clear(struct group *g)
{
	for (uint32_t i = 0; i < g->off_cap; i++) {
		gstr_free(&g->offsets[i].topic);
		gstr_free(&g->offsets[i].metadata);
	}
	free(g->offsets);
	g->offsets = NULL;
	g->off_cap = g->off_n = 0;
}

static void group_remove(struct gcoord *gc, struct group *g)
{
	uint32_t b = hash_str(g->id.ptr, (size_t)g->id.len) & (gc->cap - 1);
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
	idtab_free(&g->member_ix, false);
	idtab_free(&g->pending, true);
	offsets_clear(g);
	gstr_free(&g->protocol_type);
	gstr_free(&g->protocol);
	gstr_free(&g->leader);
	gstr_free(&g->id);
	free(g);
	gc->count--;
}

static uint32_t offset_hash(struct kstr topic, int32_t partition)
{
	return hash_str(topic.ptr, (size_t)topic.len) ^ (uint32_t)partition * 2654435761u;
}

static struct offset_entry *offset_find(const struct group *g, struct kstr topic, int32_t partition)
{
	if (!g || !g->off_cap || !topic.ptr)
		return NULL;
	uint32_t mask = g->off_cap - 1, h = offset_hash(topic, partition);
	for (uint32_t i = h & mask;; i = (i + 1) & mask) {
		struct offset_entry *e = &g->offsets[i];
		if (!e->topic.ptr)
			return NULL;
		if (e->hash == h && e->partition == partition && kstr_same(gk(e->topic), topic))
			return e;
	}
}

/* Move every entry into a table twice the size; entries keep their strings. */
static bool offsets_grow(struct group *g)
{
	uint32_t cap = g->off_cap ? g->off_cap * 2 : 64, mask = cap - 1;
	struct offset_entry *t = calloc(cap, sizeof *t);
	if (!t)
		return false;
	for (uint32_t i = 0; i < g->off_cap; i++) {
		if (!g->offsets[i].topic.ptr)
			continue;
		uint32_t j = g->offsets[i].hash & mask;
		while (t[j].topic.ptr)
			j = (j + 1) & mask;
		t[j] = g->offsets[i];
	}
	free(g->offsets);
	g->offsets = t;
	g->off_cap = cap;
	return true;
}

/* The entry of (topic, partition), added (offset -1, topic copied) when
 * absent. NULL when the group holds OFFSETS_PER_GROUP_MAX or memory runs out. */
static struct offset_entry *offset_get(struct group *g, struct kstr topic, int32_t partition)
{
	struct offset_entry *e = offset_find(g, topic, partition);
	if (e || !topic.ptr || g->off_n >= OFFSETS_PER_GROUP_MAX)
		return e;
	if ((g->off_n + 1) * 2 > g->off_cap && !offsets_grow(g))
		return NULL;
	struct gstr copy;
	if (!gstr_copy(&copy, topic))
		return NULL;
	uint32_t mask = g->off_cap - 1, h = offset_hash(topic, partition), i = h & mask;
	while (g->offsets[i].topic.ptr)
		i = (i + 1) & mask;
	e = &g->offsets[i];
	*e = (struct offset_entry){.topic = copy, .hash = h, .partition = partition, .offset = -1, .leader_epoch = -1};
	g->off_n++;
	return e;
}

/* Drop one entry: its strings are freed and the rest of its probe run is
 * shifted back (pointers to other entries are invalid afterwards). */
static void offset_remove(struct group *g, struct offset_entry *e)
{
	uint32_t mask = g->off_cap - 1, i = (uint32_t)(e - g->offsets);
	assert(i < g->off_cap && e->topic.ptr && g->off_n > 0);
	gstr_free(&e->topic);
	gstr_free(&e->metadata);
	for (uint32_t j = (i + 1) & mask; g->offsets[j].topic.ptr; j = (j + 1) & mask) {
		uint32_t k = g->offsets[j].hash & mask;
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		g->offsets[i] = g->offsets[j];
		i = j;
	}
	g->offsets[i] = (struct offset_entry){0};
	g->off_n--;
}

static struct member *member_find(struct group *g, struct kstr id)
{
	struct idslot *s = idtab_find(&g->member_ix, id);
	return s ? s->m : NULL;
}

static struct member *member_by_instance(struct group *g, struct kstr inst)
{
	if (!inst.ptr)
		return NULL;
	for (struct member *m = g->members; m; m = m->next)
		if (m->instance_id.ptr && kstr_same(inst, gk(m->instance_id)))
			return m;
	return NULL;
}

/* Give member m the id id (copied), keeping the index right. */
static bool member_set_id(struct group *g, struct member *m, struct kstr id)
{
	struct gstr n;
	if (!gstr_copy(&n, id))
		return false;
	struct idslot *old = m->id.ptr ? idtab_find(&g->member_ix, gk(m->id)) : NULL;
	if (old)
		idtab_del(&g->member_ix, old);
	struct idslot *s = idtab_add(&g->member_ix, n);
	if (!s) {
		if (old)
			(idtab_add(&g->member_ix, m->id))->m = m; /* the table had room for it */
		gstr_free(&n);
		return false;
	}
	s->m = m;
	gstr_free(&m->id);
	m->id = n;
	return true;
}

/* Validate a member id (and static instance id) against the group. */
static int16_t member_check(struct group *g, struct kstr id, struct kstr inst, struct member **out)
{
	*out = NULL;
	struct member *bi = member_by_instance(g, inst);
	if (bi && !kstr_same(id, gk(bi->id)))
		return KERR_FENCED_INSTANCE_ID;
	struct member *m = member_find(g, id);
	if (!m)
		return KERR_UNKNOWN_MEMBER_ID;
	*out = m;
	return KERR_NONE;
}

static bool pending_take(struct group *g, struct kstr id)
{
	struct idslot *s = idtab_find(&g->pending, id);
	if (!s)
		return false;
	struct gstr owned = s->id;
	idtab_del(&g->pending, s);
	gstr_free(&owned);
	return true;
}

/* Forget the pending ids whose session timeout passed. */
static void pending_expire(struct group *g, int64_t now)
{
	if (now < g->pending_next_expiry_ms)
		return;
	int64_t next = INT64_MAX;
	for (uint32_t i = 0; i < g->pending.cap;) {
		struct idslot *s = &g->pending.s[i];
		if (s->id.ptr && s->expire_ms <= now) {
			struct gstr owned = s->id;
			idtab_del(&g->pending, s);
			gstr_free(&owned);
			continue; /* slot i now holds a shifted entry (or is free) */
		}
		if (s->id.ptr && s->expire_ms < next)
			next = s->expire_ms;
		i++;
	}
	g->pending_next_expiry_ms = next;
}

/* ---- durable records -------------------------------------------------------- */

static void key_offset(struct kwr *w, const struct group *g, const struct offset_entry *e)
{
	kwr_i16(w, 1);
	kwr_gstr(w, false, g->id);
	kwr_gstr(w, false, e->topic);
	kwr_i32(w, e->partition);
}

static void value_offset(struct kwr *w, const struct offset_entry *e)
{
	kwr_i16(w, 3);
	kwr_i64(w, e->offset);
	kwr_i32(w, e->leader_epoch);
	kwr_gstr_nn(w, false, e->metadata);
	kwr_i64(w, e->commit_ts);
}

static void key_group(struct kwr *w, const struct group *g)
{
	kwr_i16(w, 2);
	kwr_gstr(w, false, g->id);
}

static const struct protocol *member_protocol(const struct member *m, struct gstr name)
{
	for (int32_t i = 0; name.ptr && i < m->nprot; i++)
		if (gstr_same(m->prot[i].name, name))
			return &m->prot[i];
	return NULL;
}

static void value_group(struct kwr *w, const struct group *g, int64_t now)
{
	kwr_i16(w, 3);
	kwr_gstr_nn(w, false, g->protocol_type);
	kwr_i32(w, g->generation);
	kwr_gstr(w, false, g->protocol);
	kwr_gstr(w, false, g->leader);
	kwr_i64(w, now);
	kwr_i32(w, g->nmembers);
	for (struct member *m = g->members; m; m = m->next) {
		kwr_gstr(w, false, m->id);
		kwr_gstr(w, false, m->instance_id);
		kwr_gstr_nn(w, false, m->client_id);
		kwr_gstr_nn(w, false, m->client_host);
		kwr_i32(w, m->rebalance_timeout_ms);
		kwr_i32(w, m->session_timeout_ms);
		const struct protocol *p = member_protocol(m, g->protocol);
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

/* An offset record; a tombstone (null value) when value is false. */
static void recset_offset(struct recset *rs, const struct group *g, const struct offset_entry *e, bool value)
{
	struct recspan *sp = recset_next(rs);
	if (!sp)
		return;
	sp->koff = rs->kv.len;
	key_offset(&rs->kv, g, e);
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
	key_group(&rs->kv, g);
	sp->klen = rs->kv.len - sp->koff;
	sp->voff = rs->kv.len;
	sp->vlen = -1;
	if (value) {
		value_group(&rs->kv, g, sluice_now_ms());
		sp->vlen = (int64_t)(rs->kv.len - sp->voff);
	}
}

/* Append the set as one batch to the group's partition. wait_op, when
 * given, is answered once it is committed (sluice_store_append). Returns
 * KERR_NONE, or the error the append was refused with (nothing written,
 * wait_op not taken; COORDINATOR_NOT_AVAILABLE when memory ran out). */
static int16_t recset_write(struct storecore *sc, struct group *g, struct recset *rs, struct partop *wait_op)
{
	if (rs->n == 0)
		return wait_op ? KERR_COORDINATOR_NOT_AVAILABLE : KERR_NONE;
	if (rs->err || rs->kv.err)
		return KERR_COORDINATOR_NOT_AVAILABLE;
	struct sluice_record_kv *recs = calloc((size_t)rs->n, sizeof *recs);
	if (!recs)
		return KERR_COORDINATOR_NOT_AVAILABLE;
	for (int32_t i = 0; i < rs->n; i++) {
		recs[i].key = rs->kv.buf + rs->s[i].koff;
		recs[i].key_len = (int32_t)rs->s[i].klen;
		recs[i].value = rs->s[i].vlen < 0 ? NULL : rs->kv.buf + rs->s[i].voff;
		recs[i].value_len = rs->s[i].vlen < 0 ? -1 : (int32_t)rs->s[i].vlen;
	}
	struct kwr batch;
	kwr_init(&batch, 256, 64u << 20);
	int16_t err = KERR_COORDINATOR_NOT_AVAILABLE;
	if (sluice_batch_build(&batch, recs, rs->n, sluice_now_ms()) >= 0) {
		struct spart *p = sluice_store_partition(sc, SLUICE_OFFSETS_TOPIC, g->partition, &err);
		if (p)
			err = sluice_store_append(sc, p, batch.buf, batch.len, wait_op);
	}
	kwr_free(&batch);
	free(recs);
	if (err)
		SLOG_INFO("group", "group %s: %d record(s) not written to %s-%d: %s", g->id.ptr, rs->n,
			  SLUICE_OFFSETS_TOPIC, g->partition, sluice_kafka_error_name(err));
	return err;
}

/* Persist the group's current generation (or its deletion). */
static int16_t write_group(struct storecore *sc, struct group *g, bool tombstone, struct partop *wait_op)
{
	struct recset rs;
	recset_init(&rs);
	recset_group(&rs, g, !tombstone);
	int16_t err = recset_write(sc, g, &rs, wait_op);
	recset_free(&rs);
	return err;
}

/* What a coordinator answers for an error its records' write met, as
 * Kafka's (GroupCoordinatorService.handleOperationException): the client
 * finds its coordinator again (NOT_COORDINATOR) or retries it
 * (COORDINATOR_NOT_AVAILABLE); nothing unwritten was ever visible. */
static int16_t coordinator_error(int16_t write_error)
{
	switch (write_error) {
	case KERR_UNKNOWN_TOPIC_OR_PARTITION:
	case KERR_NOT_ENOUGH_REPLICAS:
	case KERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
	case KERR_REQUEST_TIMED_OUT:
		return KERR_COORDINATOR_NOT_AVAILABLE;
	case KERR_NOT_LEADER_OR_FOLLOWER:
	case KERR_KAFKA_STORAGE_ERROR:
		return KERR_NOT_COORDINATOR;
	case KERR_MESSAGE_TOO_LARGE:
	case KERR_RECORD_LIST_TOO_LARGE:
		return KERR_UNKNOWN_SERVER_ERROR;
	default:
		return write_error;
	}
}

/* Replay one offset record (key v0/v1) of __consumer_offsets. */
static void replay_offset(struct gcoord *gc, struct group *g, struct krd *r, const uint8_t *val, int32_t vlen)
{
	struct kstr topic = krd_string(r, false);
	int32_t part = krd_i32(r);
	if (r->err || !topic.ptr)
		return;
	if (!val) {
		struct offset_entry *e = offset_find(g, topic, part);
		if (e)
			offset_remove(g, e);
		if (!g->off_n && !g->members && !g->generation && !g->protocol_type.ptr)
			group_remove(gc, g); /* nothing left of it */
		return;
	}
	struct krd v;
	krd_init(&v, val, (size_t)vlen);
	int16_t vver = krd_i16(&v);
	int64_t off = krd_i64(&v);
	int32_t epoch = vver >= 3 ? krd_i32(&v) : -1;
	struct kstr meta = krd_string(&v, false);
	int64_t ts = krd_i64(&v);
	struct gstr m;
	if (v.err || !gstr_copy(&m, meta))
		return;
	struct offset_entry *e = offset_get(g, topic, part);
	if (!e) {
		gstr_free(&m);
		return;
	}
	e->offset = off;
	e->leader_epoch = epoch;
	gstr_free(&e->metadata);
	e->metadata = m;
	e->commit_ts = ts;
}

static struct member *member_add(struct storecore *sc, struct group *g, struct kstr id, struct kstr inst, int16_t *err);

/* Forget a loading group's members (no answer is held during a load). */
static void members_clear(struct group *g)
{
	while (g->members) {
		struct member *m = g->members;
		assert(!m->join_op && !m->sync_op);
		g->members = m->next;
		member_free(m);
	}
	g->members_tail = NULL;
	g->nmembers = 0;
	idtab_free(&g->member_ix, false);
}

/* One member of a group record (GroupMetadataValue v0-3), with its
 * subscription to the group's protocol and its assignment: false when it
 * does not decode or cannot be kept. */
static bool replay_member(struct storecore *sc, struct group *g, struct krd *v, int16_t vver, int64_t now)
{
	struct kstr id = krd_string(v, false), inst = {NULL, 0};
	if (vver >= 3)
		inst = krd_string(v, false);
	struct kstr client = krd_string(v, false), host = krd_string(v, false);
	int32_t rebalance_ms = vver >= 1 ? krd_i32(v) : -1, session_ms = krd_i32(v);
	const uint8_t *sub, *asg;
	int32_t sub_len = krd_bytes(v, false, &sub), asg_len = krd_bytes(v, false, &asg);
	int16_t err;
	if (v->err || !id.ptr || id.len == 0 || member_find(g, id) || sub_len < 0 || !g->protocol.ptr)
		return false;
	struct member *m = member_add(sc, g, id, inst, &err);
	if (!m)
		return false;
	m->session_timeout_ms = session_ms;
	m->rebalance_timeout_ms = rebalance_ms >= 0 ? rebalance_ms : session_ms;
	m->last_seen_ms = now; /* its session restarts with the load, as in Kafka */
	bool ok = gstr_copy(&m->client_id, client.ptr ? client : (struct kstr){"", 0}) &&
		  gstr_copy(&m->client_host, host.ptr ? host : (struct kstr){"", 0}) &&
		  gstr_copy(&m->prot[0].name, gk(g->protocol));
	if (ok) { /* from here member_free frees what prot[0] holds */
		m->nprot = 1;
		m->prot[0].meta = malloc((size_t)sub_len + 1);
		ok = m->prot[0].meta != NULL;
	}
	if (ok) {
		if (sub_len > 0)
			memcpy(m->prot[0].meta, sub, (size_t)sub_len);
		m->prot[0].meta_len = sub_len;
	}
	if (ok && asg_len > 0 && (m->assignment = malloc((size_t)asg_len)) != NULL) {
		memcpy(m->assignment, asg, (size_t)asg_len);
		m->assignment_len = asg_len;
	}
	return ok && (asg_len <= 0 || m->assignment);
}

/* A group record (key v2): its generation, protocol, leader and members
 * as the record names them (GroupMetadataValue v0-3; other versions are
 * not Kafka's classic groups' and are skipped). The group is Stable with
 * those members, else Empty, as Kafka loads it. */
static void replay_group(struct storecore *sc, struct gcoord *gc, struct group *g, const uint8_t *val, int32_t vlen)
{
	if (!val) { /* deleted: what is left is its offsets, if any */
		members_clear(g);
		gstr_free(&g->protocol_type);
		gstr_free(&g->protocol);
		gstr_free(&g->leader);
		g->generation = 0;
		g->state = G_EMPTY;
		if (!g->off_n)
			group_remove(gc, g);
		return;
	}
	struct krd v;
	krd_init(&v, val, (size_t)vlen);
	int16_t vver = krd_i16(&v);
	struct kstr ptype = krd_string(&v, false);
	int32_t gen = krd_i32(&v);
	struct kstr proto = krd_string(&v, false), leader = krd_string(&v, false);
	if (vver >= 2)
		(void)krd_i64(&v); /* currentStateTimestamp */
	int32_t n = krd_i32(&v);
	if (v.err || vver < 0 || vver > 3)
		return;
	struct gstr t, p, l;
	if (!gstr_copy(&t, ptype))
		return;
	if (!gstr_copy(&p, proto) || !gstr_copy(&l, leader)) {
		gstr_free(&t);
		gstr_free(&p);
		return;
	}
	gstr_free(&g->protocol_type);
	g->protocol_type = t;
	gstr_free(&g->protocol);
	g->protocol = p;
	gstr_free(&g->leader);
	g->leader = l;
	g->generation = gen;
	members_clear(g);
	int64_t now = sluice_now_ms();
	bool ok = n >= 0 && n <= sc->b->cfg.group_max_size;
	for (int32_t i = 0; ok && i < n; i++)
		ok = replay_member(sc, g, &v, vver, now);
	if (!ok || !member_find(g, gk(g->leader)))
		members_clear(g); /* a record it cannot use whole: its members rejoin */
	/* A load, not a transition: the state is what the record says. */
	g->state = g->members ? G_STABLE : G_EMPTY;
	if (!g->members)
		g->empty_since_ms = now;
}

/* Replay one record of __consumer_offsets into memory. */
static void replay(struct storecore *sc, struct gcoord *gc, int32_t partition, const uint8_t *key, int32_t klen,
		   const uint8_t *val, int32_t vlen)
{
	struct krd r;
	krd_init(&r, key, (size_t)klen);
	int16_t kver = krd_i16(&r);
	struct kstr gid = krd_string(&r, false);
	if (r.err || !gid.ptr || kver < 0 || kver > 2)
		return;
	struct group *g = val ? group_get(gc, gid, partition) : group_find(gc, gid);
	if (!g || g->partition != partition)
		return; /* a record in a partition its group does not map to (another partition count) */
	if (kver <= 1)
		replay_offset(gc, g, &r, val, vlen);
	else
		replay_group(sc, gc, g, val, vlen);
}

struct load_ctx {
	struct gcoord *gc;
	int32_t partition;
};

/* Replay the records of one batch (uncompressed: the coordinator writes
 * none other) at buf; returns how many it replayed. */
static int64_t replay_batch(struct storecore *sc, struct gcoord *gc, int32_t partition, const uint8_t *buf,
			    const struct sluice_batch *b)
{
	struct krd r;
	krd_init(&r, buf + SLUICE_BATCH_HEADER_BYTES, (size_t)sluice_batch_total_bytes(b) - SLUICE_BATCH_HEADER_BYTES);
	int64_t records = 0;
	for (int32_t i = 0; i < b->records_count && !r.err && !(b->attributes & SLUICE_BATCH_ATTR_CODEC_MASK); i++) {
		int32_t rlen = krd_varint(&r);
		const uint8_t *start = r.p;
		if (r.err || rlen < 0 || (size_t)rlen > krd_left(&r))
			break;
		(void)krd_i8(&r);      /* attributes */
		(void)krd_varlong(&r); /* timestamp delta */
		(void)krd_varint(&r);  /* offset delta */
		int32_t kl = krd_varint(&r);
		const uint8_t *k = r.p;
		if (kl > 0)
			krd_skip(&r, (size_t)kl);
		int32_t vl = krd_varint(&r);
		const uint8_t *v = r.p;
		if (vl > 0)
			krd_skip(&r, (size_t)vl);
		if (!r.err && kl > 0) {
			replay(sc, gc, partition, k, kl, vl >= 0 ? v : NULL, vl);
			records++;
		}
		r.err = false;
		r.p = start + rlen;
	}
	assert(records <= b->records_count);
	return records;
}

/* Read every record of __consumer_offsets partition p back, as its leader
 * at epoch: false (nothing read) while records appended to it are not all
 * written yet (a follower's fetch just before it was made leader): they
 * are read once they are. */
static bool load_partition(struct storecore *sc, struct gcoord *gc, struct spart *p, int32_t partition, int32_t epoch)
{
	assert(partition >= 0 && partition < gc->partitions && gc->loaded_epoch[partition] < 0 && epoch >= 0);
	struct sluice_plog *l = sluice_store_log(p);
	int64_t off = sluice_plog_log_start(l), end = sluice_plog_written_end(l), records = 0;
	if (end < sluice_plog_log_end(l))
		return false;
	while (off < end) {
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, off, 1 << 20, true, &buf);
		if (n <= 0) {
			free(buf);
			if (n < 0)
				SLOG_ERR("group", "%s-%d: reading offset %" PRId64 " failed (%d): the groups are loaded "
					 "without what follows", SLUICE_OFFSETS_TOPIC, partition, off, n);
			break;
		}
		size_t pos = 0;
		while (pos < (size_t)n) {
			struct sluice_batch b;
			if (sluice_batch_parse(buf + pos, (size_t)n - pos, &b) != SLUICE_BATCH_OK)
				break;
			records += replay_batch(sc, gc, partition, buf + pos, &b);
			off = b.base_offset + b.last_offset_delta + 1;
			pos += (size_t)sluice_batch_total_bytes(&b);
		}
		free(buf);
	}
	gc->loaded_epoch[partition] = epoch;
	if (records || sluice_config_cluster_mode(&sc->b->cfg))
		SLOG_INFO("group", "%s-%d: coordinator at leader epoch %d, loaded %" PRId64 " records", SLUICE_OFFSETS_TOPIC,
			  partition, epoch, records);
	return true;
}

static void join_response(struct partop *op, int16_t err, const struct group *g, const struct member *m, bool leader_view);
static void sync_response(struct partop *op, int16_t err, const struct group *g, const struct member *m);

/* This broker no longer coordinates the groups of partition (it stopped
 * leading it, or leads it at a new epoch): they leave memory, their held
 * JoinGroup and SyncGroup answered NOT_COORDINATOR (the clients find the
 * new coordinator). Ops waiting for a write are answered by the storage
 * core (sluice_group_written), by the group's name. */
static void unload_partition(struct storecore *sc, struct gcoord *gc, int32_t partition)
{
	assert(partition >= 0 && partition < gc->partitions);
	if (gc->loaded_epoch[partition] < 0)
		return;
	int32_t n = 0;
	for (uint32_t b = 0; b < gc->cap; b++)
		for (struct group *g = gc->table[b], *next; g; g = next) {
			next = g->next;
			if (g->partition != partition)
				continue;
			for (struct member *m = g->members; m; m = m->next) {
				if (m->join_op) {
					join_response(m->join_op, KERR_NOT_COORDINATOR, g, NULL, false);
					sluice_store_done(sc, m->join_op);
					m->join_op = NULL;
				}
				if (m->sync_op) {
					sync_response(m->sync_op, KERR_NOT_COORDINATOR, g, NULL);
					sluice_store_done(sc, m->sync_op);
					m->sync_op = NULL;
				}
			}
			group_remove(gc, g);
			n++;
		}
	SLOG_INFO("group", "%s-%d: coordinator at leader epoch %d unloaded %d group(s)", SLUICE_OFFSETS_TOPIC, partition,
		  gc->loaded_epoch[partition], n);
	gc->loaded_epoch[partition] = -1;
}

/* The groups of partition p are in memory, read at the epoch this broker
 * leads it at: KERR_NONE; else the error a group op gets (NOT_COORDINATOR:
 * it does not lead; COORDINATOR_LOAD_IN_PROGRESS: it cannot read the log
 * back yet). Groups read at another epoch are dropped and read afresh. */
static int16_t groups_ready(struct storecore *sc, struct gcoord *gc, struct spart *p, int32_t partition)
{
	int32_t epoch;
	if (!sluice_store_leads(sc, p, &epoch)) {
		unload_partition(sc, gc, partition);
		return KERR_NOT_COORDINATOR;
	}
	if (gc->loaded_epoch[partition] == epoch)
		return KERR_NONE;
	unload_partition(sc, gc, partition);
	return load_partition(sc, gc, p, partition, epoch) ? KERR_NONE : KERR_COORDINATOR_LOAD_IN_PROGRESS;
}

/* The error a group op gets before its group is looked at (KERR_NONE: its
 * partition's groups are ready): its request's word on the partition
 * applied first (it may be newer than this core's). */
static int16_t op_ready(struct storecore *sc, struct gcoord *gc, const struct partop *op)
{
	int16_t err = KERR_NONE;
	struct spart *p = sluice_store_partition(sc, SLUICE_OFFSETS_TOPIC, op->partition, &err);
	if (!p)
		return coordinator_error(err ? err : KERR_KAFKA_STORAGE_ERROR);
	sluice_store_apply_word(sc, p, op);
	return groups_ready(sc, gc, p, op->partition);
}

/* The opening of most group APIs: the group named, or NULL when there is
 * none or the id is null (op_ready has read its partition back). */
static struct group *group_open(struct gcoord *gc, struct kstr id)
{
	return id.ptr ? group_find(gc, id) : NULL;
}

/* ---- answers and state ---------------------------------------------------------- */

static void reply(struct storecore *sc, struct partop *op) { sluice_store_done(sc, op); }

static struct group_wire wire_of(const struct partop *op)
{
	return (struct group_wire){op->api_key, op->api_version, op->flex};
}

/* A body that does not decode: nothing was changed; answer nothing, and
 * the network core closes the connection (group_single_finish). */
static void malformed(struct storecore *sc, struct partop *op, const struct krd *rd)
{
	assert(rd->err);
	SLOG_INFO("group", "malformed %s v%d request body at byte %zu (%s); closing the connection",
		  sluice_group_api_name(op->api_key), op->api_version, krd_offset(rd),
		  rd->err_what ? rd->err_what : "invalid");
	kwr_free(&op->gout);
	reply(sc, op);
}

/* The group state machine's edges, as Kafka's GroupMetadata allows them
 * for the classic protocol: [from][to]. Empty -> Empty is a group whose
 * last member left or expired while it was empty (a member that failed to
 * join); every state but Dead can lose its last member. */
static const bool state_edges[G_DEAD + 1][G_DEAD + 1] = {
	[G_EMPTY] = {[G_EMPTY] = true, [G_PREPARING] = true},
	[G_PREPARING] = {[G_COMPLETING] = true, [G_EMPTY] = true},
	[G_COMPLETING] = {[G_PREPARING] = true, [G_STABLE] = true, [G_EMPTY] = true},
	[G_STABLE] = {[G_PREPARING] = true, [G_EMPTY] = true},
};

static void group_set_state(struct group *g, int to)
{
	assert(g->state >= G_EMPTY && g->state <= G_DEAD && to >= G_EMPTY && to <= G_DEAD);
	assert(state_edges[g->state][to]);
	assert(to != G_COMPLETING && to != G_STABLE ? true : g->nmembers > 0 && g->members);
	g->state = to;
	if (to == G_EMPTY)
		g->empty_since_ms = sluice_now_ms();
}

static void join_response(struct partop *op, int16_t err, const struct group *g, const struct member *m, bool leader_view)
{
	struct group_wire wi = wire_of(op);
	struct group_join_result r = {.error = err, .member_id = m ? gk(m->id) : (struct kstr){"", 0}};
	if (!err) {
		r.generation = g->generation;
		r.protocol_type = gk(g->protocol_type);
		r.protocol = gk(g->protocol);
		r.leader = gk(g->leader);
		r.nmembers = leader_view ? g->nmembers : 0;
	}
	sluice_group_join_encode(&op->gout, wi, &r);
	int32_t written = 0;
	for (const struct member *x = r.nmembers ? g->members : NULL; x; x = x->next, written++) {
		const struct protocol *p = member_protocol(x, g->protocol);
		struct group_join_member jm = {gk(x->id), gk(x->instance_id), p ? p->meta : NULL, p ? p->meta_len : 0};
		sluice_group_join_member_encode(&op->gout, wi, &jm);
	}
	assert(written == r.nmembers);
	sluice_group_join_end(&op->gout, wi);
}

static void sync_response(struct partop *op, int16_t err, const struct group *g, const struct member *m)
{
	struct group_sync_result r = {.error = err};
	if (!err) {
		r.protocol_type = gk(g->protocol_type);
		r.protocol = gk(g->protocol);
	}
	if (!err && m) {
		r.assignment = m->assignment;
		r.assignment_len = m->assignment_len;
	}
	sluice_group_sync_encode(&op->gout, wire_of(op), &r);
}

static void fail_pending_syncs(struct storecore *sc, struct group *g, int16_t err)
{
	assert(err != KERR_NONE);
	for (struct member *m = g->members; m; m = m->next)
		if (m->sync_op) {
			sync_response(m->sync_op, err, g, m);
			reply(sc, m->sync_op);
			m->sync_op = NULL;
		}
}

/* ---- rebalancing ------------------------------------------------------------- */

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
	fail_pending_syncs(sc, g, KERR_REBALANCE_IN_PROGRESS);
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
	group_set_state(g, G_PREPARING);
	g->rebalance_deadline_ms = now + timeout;
	if (g->rebalance_deadline_ms <= now)
		g->rebalance_deadline_ms = now;
	join_deadline_note(sc, g->rebalance_deadline_ms);
}

static void remove_member(struct group *g, struct member *m)
{
	assert(g->nmembers > 0 && g->members);
	struct member *prev = NULL;
	for (struct member **pp = &g->members; *pp; prev = *pp, pp = &(*pp)->next)
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	if (g->members_tail == m)
		g->members_tail = prev;
	struct idslot *s = idtab_find(&g->member_ix, gk(m->id));
	assert(s && s->m == m);
	idtab_del(&g->member_ix, s);
	g->nmembers--;
	assert((g->nmembers == 0) == (g->members == NULL));
	member_free(m);
}

static struct gstr choose_protocol(struct group *g)
{
	struct member *first = g->members;
	for (int32_t i = 0; first && i < first->nprot; i++) {
		struct gstr name = first->prot[i].name;
		bool all = true;
		for (struct member *m = first->next; m && all; m = m->next)
			all = member_protocol(m, name) != NULL;
		if (all)
			return name;
	}
	return (struct gstr){NULL, 0};
}

/* The new generation's members get their JoinGroup answers. */
static void complete_join_answer(struct storecore *sc, struct group *g)
{
	int64_t now = sluice_now_ms();
	for (struct member *m = g->members; m; m = m->next) {
		struct partop *op = m->join_op;
		assert(op);
		m->join_op = NULL;
		m->last_seen_ms = now;
		free(m->assignment);
		m->assignment = NULL;
		m->assignment_len = 0;
		bool leader = gstr_same(m->id, g->leader);
		join_response(op, g->protocol.ptr ? KERR_NONE : KERR_INCONSISTENT_GROUP_PROTOCOL, g, m, leader);
		reply(sc, op);
	}
}

static void complete_join(struct storecore *sc, struct group *g)
{
	assert(g->state == G_PREPARING);
	/* Members that did not rejoin in time are dropped. Member ids still
	 * pending stay valid until their own session timeout, as in Kafka:
	 * such a member joins the next generation. */
	for (struct member *m = g->members, *next; m; m = next) {
		next = m->next;
		if (!m->join_op)
			remove_member(g, m);
	}
	g->generation++;
	gstr_free(&g->protocol);
	g->initial_delay = false;
	if (!g->members) {
		group_set_state(g, G_EMPTY);
		gstr_free(&g->leader);
		(void)write_group(sc, g, false, NULL);
		return;
	}
	(void)gstr_copy(&g->protocol, gk(choose_protocol(g))); /* NULL (out of memory) answers INCONSISTENT */
	if (!member_find(g, gk(g->leader)))
		(void)gstr_replace(&g->leader, gk(g->members->id));
	if (!member_find(g, gk(g->leader))) /* out of memory: no leader, nobody can sync */
		gstr_free(&g->protocol);
	group_set_state(g, G_COMPLETING);
	g->rebalance_deadline_ms = sluice_now_ms() + (g->members->rebalance_timeout_ms > 0 ? g->members->rebalance_timeout_ms : 60000);
	complete_join_answer(sc, g);
	SLOG_DEBUG("group", "group %s generation %d: %d member(s), protocol %s, leader %s", g->id.ptr, g->generation,
		   g->nmembers, g->protocol.ptr ? g->protocol.ptr : "-", g->leader.ptr ? g->leader.ptr : "-");
}

static void maybe_complete_join(struct storecore *sc, struct group *g, int64_t now)
{
	if (g->state != G_PREPARING)
		return;
	bool all = true;
	for (struct member *m = g->members; m && all; m = m->next)
		all = m->join_op != NULL;
	/* Everyone known has rejoined: done, unless the group is in its initial
	 * delay (started from empty), which waits for more members to arrive. */
	if ((all && g->pending.n == 0 && !g->initial_delay) || now >= g->rebalance_deadline_ms)
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
			SLOG_INFO("group", "group %s expired after %d minutes empty", g->id.ptr,
				  sc->b->cfg.offsets_retention_minutes);
			delete_group_records(sc, g);
			group_remove(gc, g);
		}
}

/* Members silent past their session timeout leave; the group rebalances
 * (or becomes Empty when none is left). */
static void expire_members(struct storecore *sc, struct group *g, int64_t now)
{
	bool changed = false;
	for (struct member *m = g->members, *next; m; m = next) {
		next = m->next;
		if (m->join_op || m->sync_op || now - m->last_seen_ms <= m->session_timeout_ms)
			continue;
		SLOG_INFO("group", "group %s: member %s session expired", g->id.ptr, m->id.ptr);
		remove_member(g, m);
		changed = true;
	}
	if (!changed || !(g->state == G_STABLE || g->state == G_COMPLETING || g->state == G_EMPTY))
		return;
	if (g->members) {
		prepare_rebalance(sc, g, now);
		return;
	}
	group_set_state(g, G_EMPTY);
	fail_pending_syncs(sc, g, KERR_REBALANCE_IN_PROGRESS);
}

/* One group's timers: pending ids, sessions, the join and sync phases. */
static void group_tick(struct storecore *sc, struct group *g, int64_t now)
{
	pending_expire(g, now);
	expire_members(sc, g, now);
	if (g->state == G_COMPLETING && now >= g->rebalance_deadline_ms)
		prepare_rebalance(sc, g, now); /* the leader never synced: start over */
	maybe_complete_join(sc, g, now);
	if (g->state == G_PREPARING || g->state == G_COMPLETING)
		join_deadline_note(sc, g->rebalance_deadline_ms);
	if (g->pending.n)
		join_deadline_note(sc, g->pending_next_expiry_ms);
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
		for (struct group *g = gc->table[b]; g; g = g->next)
			group_tick(sc, g, now);
}

/* ---- JoinGroup (11) -------------------------------------------------------- */

/* clientId-UUID, as Kafka names a member (the client id cut to
 * MEMBER_ID_CLIENT_MAX bytes, kept byte for byte). Returns its length. */
static int32_t new_member_id(struct kstr client_id, char out[MEMBER_ID_MAX])
{
	uint8_t r[16];
	if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
		memset(r, 7, sizeof r);
	char hex[33];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", r[i]);
	int32_t n = client_id.ptr ? (client_id.len > MEMBER_ID_CLIENT_MAX ? MEMBER_ID_CLIENT_MAX : client_id.len) : 0;
	if (n)
		memcpy(out, client_id.ptr, (size_t)n);
	char uuid[40];
	int u = snprintf(uuid, sizeof uuid, "-%.8s-%.4s-%.4s-%.4s-%.12s", hex, hex + 8, hex + 12, hex + 16, hex + 20);
	assert(u == 37 && n + u <= MEMBER_ID_MAX);
	memcpy(out + n, uuid, (size_t)u);
	return n + u;
}

/* Errors a JoinGroup gets before the group is looked at. */
static int16_t join_check(const struct sluice_config *cfg, const struct group_join_req *q)
{
	if (!q->group_id.ptr || q->group_id.len == 0 || q->group_id.len > GROUP_STRING_MAX)
		return KERR_INVALID_GROUP_ID;
	if (q->session_timeout_ms < cfg->group_min_session_timeout_ms ||
	    q->session_timeout_ms > cfg->group_max_session_timeout_ms)
		return KERR_INVALID_SESSION_TIMEOUT;
	if (q->nprot == 0 || !q->protocol_type.ptr || q->protocol_type.len == 0)
		return KERR_INCONSISTENT_GROUP_PROTOCOL;
	/* Strings the group's record keeps must fit its int16 lengths. */
	bool long_str = q->protocol_type.len > GROUP_STRING_MAX ||
			(q->instance_id.ptr && q->instance_id.len > GROUP_STRING_MAX);
	for (int32_t i = 0; i < q->nprot; i++)
		long_str |= q->prot[i].name.len > GROUP_STRING_MAX;
	return long_str ? KERR_INVALID_REQUEST : KERR_NONE;
}

/* KIP-394: hand out a member id (kept pending) and ask the member to come
 * back with it. Answers op. */
static void join_member_id_required(struct storecore *sc, struct group *g, struct partop *op,
				    const struct group_join_req *q)
{
	const struct sluice_config *cfg = &sc->b->cfg;
	char idbuf[MEMBER_ID_MAX];
	struct kstr id = {idbuf, new_member_id(op->client_id, idbuf)};
	int64_t now = sluice_now_ms();
	/* Kafka accepts a new member into an Empty or rebalancing group and
	 * checks the size when it rejoins; a settled group that is full
	 * refuses it now. Pending ids are bounded by group.max.size. */
	bool settled = g->state == G_STABLE || g->state == G_COMPLETING;
	if ((settled && g->nmembers >= cfg->group_max_size) || g->pending.n >= (uint32_t)cfg->group_max_size) {
		join_response(op, KERR_GROUP_MAX_SIZE_REACHED, g, NULL, false);
		reply(sc, op);
		return;
	}
	struct gstr owned;
	struct idslot *s = gstr_copy(&owned, id) ? idtab_add(&g->pending, owned) : NULL;
	if (!s) {
		gstr_free(&owned);
		join_response(op, KERR_COORDINATOR_NOT_AVAILABLE, g, NULL, false);
		reply(sc, op);
		return;
	}
	assert(g->pending.n <= (uint32_t)cfg->group_max_size);
	s->expire_ms = now + q->session_timeout_ms;
	if (s->expire_ms < g->pending_next_expiry_ms)
		g->pending_next_expiry_ms = s->expire_ms;
	initial_delay_extend(sc, g, now);
	struct group_join_result r = {.error = KERR_MEMBER_ID_REQUIRED, .member_id = id};
	sluice_group_join_encode(&op->gout, wire_of(op), &r);
	sluice_group_join_end(&op->gout, wire_of(op));
	reply(sc, op);
}

/* A new member with id id: added at the end of the list, or NULL with
 * *err set (group full, out of memory). */
static struct member *member_add(struct storecore *sc, struct group *g, struct kstr id, struct kstr inst, int16_t *err)
{
	if (g->nmembers >= sc->b->cfg.group_max_size) {
		*err = KERR_GROUP_MAX_SIZE_REACHED;
		return NULL;
	}
	struct member *m = calloc(1, sizeof *m);
	if (!m || !gstr_copy(&m->instance_id, inst) || !member_set_id(g, m, id)) {
		if (m)
			member_free(m);
		*err = KERR_COORDINATOR_NOT_AVAILABLE;
		return NULL;
	}
	if (g->members_tail)
		g->members_tail->next = m;
	else
		g->members = m;
	g->members_tail = m;
	g->nmembers++;
	assert(g->nmembers <= sc->b->cfg.group_max_size && g->member_ix.n == (uint32_t)g->nmembers);
	return m;
}

static void protocols_free(struct protocol *prot, int32_t n)
{
	for (int32_t i = 0; i < n; i++) {
		gstr_free(&prot[i].name);
		free(prot[i].meta);
	}
}

/* Copies of the protocols a JoinGroup names, into prot; false when memory
 * runs out (nothing kept). */
static bool protocols_copy(struct protocol prot[SLUICE_GROUP_PROTOCOLS_MAX], const struct group_join_req *q)
{
	assert(q->nprot <= SLUICE_GROUP_PROTOCOLS_MAX);
	for (int32_t n = 0; n < q->nprot; n++) {
		prot[n].meta = malloc((size_t)q->prot[n].meta_len + 1);
		prot[n].meta_len = q->prot[n].meta_len;
		if (prot[n].meta && q->prot[n].meta_len)
			memcpy(prot[n].meta, q->prot[n].meta, (size_t)q->prot[n].meta_len);
		if (!prot[n].meta || !gstr_copy(&prot[n].name, q->prot[n].name)) {
			free(prot[n].meta);
			protocols_free(prot, n);
			return false;
		}
	}
	return true;
}

/* Record what the member supports and who it is; false when memory runs
 * out (the member keeps what it had). */
static bool member_update(struct member *m, const struct partop *op, const struct group_join_req *q)
{
	struct protocol prot[SLUICE_GROUP_PROTOCOLS_MAX];
	struct gstr client_id = {NULL, 0}, host = {NULL, 0};
	bool ok = gstr_copy(&client_id, op->client_id.ptr ? op->client_id : (struct kstr){"", 0});
	ok = ok && gstr_copy(&host, (struct kstr){op->client_host ? op->client_host : "",
						  op->client_host ? (int32_t)strlen(op->client_host) : 0});
	if (!ok || !protocols_copy(prot, q)) {
		gstr_free(&client_id);
		gstr_free(&host);
		return false;
	}
	protocols_free(m->prot, m->nprot);
	memcpy(m->prot, prot, (size_t)q->nprot * sizeof prot[0]);
	m->nprot = q->nprot;
	gstr_free(&m->client_id);
	m->client_id = client_id;
	gstr_free(&m->client_host);
	m->client_host = host;
	m->session_timeout_ms = q->session_timeout_ms;
	m->rebalance_timeout_ms = q->rebalance_timeout_ms;
	return true;
}

/* A static member (instance id known) is back without its member id: it
 * gets a new one and the old is fenced. NULL with *err set: answer that;
 * NULL with no error: op was answered here. */
static struct member *join_static_rejoin(struct storecore *sc, struct group *g, struct member *bi, struct partop *op,
					 const struct group_join_req *q, int16_t *err)
{
	char idbuf[MEMBER_ID_MAX];
	struct kstr id = {idbuf, new_member_id(op->client_id, idbuf)};
	bool was_leader = gstr_same(g->leader, bi->id);
	if (!member_set_id(g, bi, id) || (was_leader && !gstr_replace(&g->leader, id))) {
		*err = KERR_COORDINATOR_NOT_AVAILABLE;
		return NULL;
	}
	assert(member_find(g, id) == bi);
	/* KIP-345: a follower coming back to a stable group keeps its
	 * assignment, no rebalance; its SyncGroup returns what it had. */
	if (g->state == G_STABLE && !was_leader && !bi->join_op && !bi->sync_op) {
		bi->last_seen_ms = sluice_now_ms();
		bi->session_timeout_ms = q->session_timeout_ms;
		bi->rebalance_timeout_ms = q->rebalance_timeout_ms;
		join_response(op, KERR_NONE, g, bi, false);
		reply(sc, op);
		return NULL;
	}
	return bi;
}

/* The member a JoinGroup is for, by member id or static instance id: an
 * existing one, or one added now (*added). NULL with *err set: answer that;
 * NULL with no error: op was answered here. */
static struct member *join_member(struct storecore *sc, struct group *g, struct partop *op,
				  const struct group_join_req *q, bool *added, int16_t *err)
{
	*added = false;
	*err = KERR_NONE;
	if (q->member_id.len > 0) {
		struct member *m = member_find(g, q->member_id);
		if (m)
			return m;
		if (!idtab_find(&g->pending, q->member_id)) {
			*err = member_by_instance(g, q->instance_id) ? KERR_FENCED_INSTANCE_ID : KERR_UNKNOWN_MEMBER_ID;
			return NULL;
		}
		m = member_add(sc, g, q->member_id, q->instance_id, err);
		(void)pending_take(g, q->member_id); /* the id is used now, or refused (group full) */
		*added = m != NULL;
		return m;
	}
	struct member *bi = member_by_instance(g, q->instance_id);
	if (bi)
		return join_static_rejoin(sc, g, bi, op, q, err);
	if (op->api_version >= 4 && !q->instance_id.ptr) {
		join_member_id_required(sc, g, op, q);
		return NULL;
	}
	char idbuf[MEMBER_ID_MAX];
	struct kstr id = {idbuf, new_member_id(op->client_id, idbuf)};
	struct member *m = member_add(sc, g, id, q->instance_id, err);
	*added = m != NULL;
	return m;
}

/* The group a JoinGroup is for and the member it speaks of; NULL member
 * with *err set, or with no error when op was answered. */
static struct member *join_lookup(struct storecore *sc, struct gcoord *gc, struct partop *op,
				  const struct group_join_req *q, struct group **g, bool *added, int16_t *err)
{
	*g = NULL;
	*added = false;
	*err = join_check(&sc->b->cfg, q);
	if (*err)
		return NULL;
	*g = group_get(gc, q->group_id, op->partition);
	if (!*g)
		*err = KERR_COORDINATOR_NOT_AVAILABLE;
	else if ((*g)->members && (*g)->protocol_type.ptr && !kstr_same(q->protocol_type, gk((*g)->protocol_type)))
		*err = KERR_INCONSISTENT_GROUP_PROTOCOL;
	if (*err)
		return NULL;
	struct member *m = join_member(sc, *g, op, q, added, err);
	if (m && !member_update(m, op, q)) {
		*err = KERR_COORDINATOR_NOT_AVAILABLE;
		return NULL;
	}
	return m;
}

static void join_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_join_req q;
	if (!sluice_group_join_decode(&rd, wire_of(op), &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct group *g;
	bool added;
	int16_t err;
	struct member *m = join_lookup(sc, gc, op, &q, &g, &added, &err);
	if (err) {
		join_response(op, err, g, NULL, false);
		reply(sc, op);
		return;
	}
	if (!m)
		return; /* answered */
	int64_t now = sluice_now_ms();
	if (added)
		initial_delay_extend(sc, g, now);
	if (m->join_op) { /* a duplicate join replaces the older one */
		join_response(m->join_op, KERR_REBALANCE_IN_PROGRESS, g, NULL, false);
		reply(sc, m->join_op);
	}
	m->last_seen_ms = now;
	m->join_op = op;
	if (!g->protocol_type.ptr)
		(void)gstr_copy(&g->protocol_type, q.protocol_type);
	prepare_rebalance(sc, g, now);
	maybe_complete_join(sc, g, now);
	assert(g->state == G_PREPARING || g->state == G_COMPLETING || g->state == G_EMPTY);
}

/* ---- SyncGroup (14), Heartbeat (12), LeaveGroup (13) ------------------------------- */

/* The leader's assignments (the decode checked them whole). */
static void sync_apply_assignments(struct group *g, struct group_sync_req *q)
{
	struct group_assignment a;
	while (sluice_group_sync_next(q, &a)) {
		struct member *x = member_find(g, a.member_id);
		if (!x)
			continue;
		free(x->assignment);
		x->assignment = malloc((size_t)a.assignment_len + 1);
		x->assignment_len = 0;
		if (x->assignment && a.assignment_len > 0) {
			memcpy(x->assignment, a.assignment, (size_t)a.assignment_len);
			x->assignment_len = a.assignment_len;
		}
	}
	assert(!q->assignments.err && q->nassign == 0);
}

/* The error a SyncGroup gets before anything changes, with its group and member. */
static int16_t sync_check(struct storecore *sc, struct gcoord *gc, struct partop *op, const struct group_sync_req *q,
			  struct group **g, struct member **m)
{
	*g = NULL;
	*m = NULL;
	if (!q->group_id.ptr)
		return KERR_INVALID_GROUP_ID;
	*g = group_open(gc, q->group_id);
	int16_t err = *g ? member_check(*g, q->member_id, q->instance_id, m) : KERR_UNKNOWN_MEMBER_ID;
	if (!err && q->generation != (*g)->generation)
		err = KERR_ILLEGAL_GENERATION;
	if (!err && (*g)->state == G_PREPARING)
		err = KERR_REBALANCE_IN_PROGRESS;
	if (!err && ((*g)->state == G_EMPTY || (*g)->state == G_DEAD))
		err = KERR_UNKNOWN_MEMBER_ID;
	return err;
}

/* Whether the group's generation is being stored (the leader's SyncGroup
 * waits for its write): every SyncGroup of it is held until then. */
static bool storing(const struct group *g)
{
	return g->state == G_COMPLETING && g->storing_generation == g->generation;
}

/* The leader's SyncGroup in CompletingRebalance: the new generation and its
 * assignments are stored, and only once that write is committed does the
 * group become Stable and every member get its assignment
 * (sync_written), as Kafka's storeGroup callback: an assignment is never
 * handed out that a new coordinator would not know. */
static void sync_leader(struct storecore *sc, struct group *g, struct member *leader, struct group_sync_req *q,
			struct partop *op)
{
	assert(g->state == G_COMPLETING && leader->sync_op == op && !storing(g));
	sync_apply_assignments(g, q);
	leader->sync_op = NULL; /* the write holds it from here */
	g->storing_generation = g->generation;
	int16_t err = write_group(sc, g, false, op);
	if (err) {
		op->error = err;
		sluice_group_written(sc, op, false);
		reply(sc, op);
	}
}

/* The leader's SyncGroup's write ended (err: the coordinator's error, or
 * KERR_NONE). Still the generation stored: Stable, and every member held
 * gets its assignment; the write failed: every held SyncGroup gets the
 * error and the group rebalances (Kafka's resetAndPropagateAssignmentError).
 * The group moved on meanwhile (a member left, its partition unloaded):
 * the leader is answered as a rebalance would have answered it. */
static void sync_written(struct storecore *sc, struct partop *op, int16_t err)
{
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_sync_req q;
	bool decoded = sluice_group_sync_decode(&rd, wire_of(op), &q);
	assert(decoded); /* it did when it came */
	(void)decoded;
	struct gcoord *gc = sc->groups;
	struct group *g = gc ? group_find(gc, q.group_id) : NULL;
	bool current = g && storing(g) && g->generation == q.generation;
	if (current)
		g->storing_generation = -1;
	kwr_free(&op->gout);
	if (!err && current) {
		group_set_state(g, G_STABLE);
		for (struct member *x = g->members; x; x = x->next) {
			if (!x->sync_op)
				continue;
			sync_response(x->sync_op, KERR_NONE, g, x);
			reply(sc, x->sync_op);
			x->sync_op = NULL;
		}
		struct member *m = member_find(g, q.member_id);
		sync_response(op, m ? KERR_NONE : KERR_UNKNOWN_MEMBER_ID, g, m);
		return;
	}
	if (!err)
		err = g ? KERR_REBALANCE_IN_PROGRESS : KERR_NOT_COORDINATOR;
	sync_response(op, err, g, NULL);
	if (!current)
		return;
	SLOG_INFO("group", "group %s generation %d: not stored (%s); rebalancing", g->id.ptr, g->generation,
		  sluice_kafka_error_name(err));
	fail_pending_syncs(sc, g, err);
	for (struct member *x = g->members; x; x = x->next) {
		free(x->assignment);
		x->assignment = NULL;
		x->assignment_len = 0;
	}
	prepare_rebalance(sc, g, sluice_now_ms());
}

static void sync_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_sync_req q;
	if (!sluice_group_sync_decode(&rd, wire_of(op), &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct group *g;
	struct member *m;
	int16_t err = sync_check(sc, gc, op, &q, &g, &m);
	if (err) {
		sync_response(op, err, g, NULL);
		reply(sc, op);
		return;
	}
	m->last_seen_ms = sluice_now_ms();
	if (g->state == G_STABLE) {
		sync_response(op, KERR_NONE, g, m);
		reply(sc, op);
		return;
	}
	assert(g->state == G_COMPLETING);
	if (m->sync_op) {
		sync_response(m->sync_op, KERR_REBALANCE_IN_PROGRESS, g, NULL);
		reply(sc, m->sync_op);
	}
	m->sync_op = op;
	if (gstr_same(m->id, g->leader) && !storing(g))
		sync_leader(sc, g, m, &q, op);
	/* else it waits for the leader's assignment, stored */
}

static void heartbeat(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_heartbeat_req q;
	if (!sluice_group_heartbeat_decode(&rd, wire_of(op), &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct group *g = NULL;
	struct member *m = NULL;
	int16_t err = !q.group_id.ptr ? KERR_INVALID_GROUP_ID : KERR_NONE;
	if (!err) {
		g = group_open(gc, q.group_id);
		err = g ? member_check(g, q.member_id, q.instance_id, &m) : KERR_UNKNOWN_MEMBER_ID;
	}
	if (!err) {
		m->last_seen_ms = sluice_now_ms();
		if (g->state == G_PREPARING)
			err = KERR_REBALANCE_IN_PROGRESS;
		else if (q.generation != g->generation)
			err = KERR_ILLEGAL_GENERATION;
	}
	sluice_group_heartbeat_encode(&op->gout, wire_of(op), err);
	reply(sc, op);
}

/* Member m leaves: its held JoinGroup and SyncGroup are answered. */
static void member_leave(struct storecore *sc, struct group *g, struct member *m)
{
	if (m->join_op) {
		join_response(m->join_op, KERR_UNKNOWN_MEMBER_ID, g, NULL, false);
		reply(sc, m->join_op);
	}
	if (m->sync_op) {
		sync_response(m->sync_op, KERR_UNKNOWN_MEMBER_ID, g, NULL);
		reply(sc, m->sync_op);
	}
	remove_member(g, m);
}

/* LeaveGroup v3+: each member named leaves, and is answered for. */
static bool leave_members(struct storecore *sc, struct group *g, struct group_leave_req *q, struct kwr *w)
{
	bool left = false;
	struct group_leave_member lm;
	while (sluice_group_leave_next(q, &lm)) {
		struct member *m = NULL;
		int16_t e = KERR_UNKNOWN_MEMBER_ID;
		if (g) {
			if (lm.member_id.len == 0 && lm.instance_id.ptr)
				m = member_by_instance(g, lm.instance_id);
			else
				e = member_check(g, lm.member_id, lm.instance_id, &m);
			if (m)
				e = KERR_NONE;
		}
		sluice_group_leave_member_encode(w, q->wire, &lm, e);
		if (m) {
			member_leave(sc, g, m);
			left = true;
		}
	}
	assert(!q->members.err && q->nmembers == 0);
	return left;
}

/* Members left: the group rebalances, or is Empty in a new generation. */
static void group_after_leave(struct storecore *sc, struct group *g)
{
	int64_t now = sluice_now_ms();
	if (g->members) {
		prepare_rebalance(sc, g, now);
	} else {
		fail_pending_syncs(sc, g, KERR_REBALANCE_IN_PROGRESS);
		group_set_state(g, G_EMPTY);
		g->generation++;
		gstr_free(&g->leader);
		(void)write_group(sc, g, false, NULL);
	}
	maybe_complete_join(sc, g, now);
}

static void leave_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group_wire wi = wire_of(op);
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_leave_req q;
	if (!sluice_group_leave_decode(&rd, wi, &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct group *g = group_open(gc, q.group_id);
	struct kwr *w = &op->gout;
	bool left = false;
	if (wi.version <= 2) {
		struct member *m = g ? member_find(g, q.member_id) : NULL;
		sluice_group_leave_encode(w, wi, m ? KERR_NONE : KERR_UNKNOWN_MEMBER_ID, 0);
		if (m) {
			member_leave(sc, g, m);
			left = true;
		}
	} else {
		sluice_group_leave_encode(w, wi, KERR_NONE, q.nmembers);
		left = leave_members(sc, g, &q, w);
	}
	sluice_group_leave_end(w, wi);
	if (left)
		group_after_leave(sc, g);
	reply(sc, op);
}

/* ---- OffsetCommit (8), OffsetFetch (9), OffsetDelete (47) -------------------------- */

/* Offset commits or deletions waiting for their __consumer_offsets write:
 * what to apply to the group then, and where each partition's ErrorCode
 * sits in the encoded answer (turned to NOT_COORDINATOR, as Kafka answers a
 * storage error, when the write fails: the client finds the coordinator
 * again and retries, and nothing unwritten was ever visible). */
struct pending_item {
	struct offset_entry e; /* topic and metadata owned */
	bool del;
	size_t err_pos;
};

struct pending_offsets {
	struct gstr group;
	struct pending_item *it;
	int32_t n, cap;
	bool top_error; /* OffsetDelete: the answer starts with a group ErrorCode */
};

static bool pending_add(struct pending_offsets *pc, struct kstr topic, int32_t partition, const struct offset_entry *val,
			struct kstr meta)
{
	if (pc->n == pc->cap) {
		int32_t cap = pc->cap ? 2 * pc->cap : 8;
		struct pending_item *it = realloc(pc->it, (size_t)cap * sizeof *it);
		if (!it)
			return false;
		pc->it = it;
		pc->cap = cap;
	}
	struct pending_item *d = &pc->it[pc->n];
	memset(d, 0, sizeof *d);
	if (val)
		d->e = *val;
	d->e.partition = partition;
	d->del = !val;
	if (!gstr_copy(&d->e.topic, topic) || !gstr_copy(&d->e.metadata, meta)) {
		gstr_free(&d->e.topic);
		return false;
	}
	pc->n++;
	assert(pc->n <= pc->cap);
	return true;
}

static void pending_fail(const struct pending_offsets *pc, struct kwr *w, int16_t err)
{
	assert(err != KERR_NONE);
	for (int32_t i = 0; i < pc->n; i++)
		sluice_group_error_patch(w, pc->it[i].err_pos, err);
	if (pc->top_error)
		sluice_group_error_patch(w, SLUICE_GROUP_OFFSET_DELETE_ERROR_POS, err);
}

static void pending_free(struct pending_offsets *pc)
{
	for (int32_t i = 0; i < pc->n; i++) {
		gstr_free(&pc->it[i].e.topic);
		gstr_free(&pc->it[i].e.metadata);
	}
	free(pc->it);
	gstr_free(&pc->group);
	memset(pc, 0, sizeof *pc);
}

/* Hand pc to op until its records are written (sluice_group_written), or
 * fail it now. Returns whether op waits. */
static bool pending_write(struct storecore *sc, struct group *g, struct partop *op, struct pending_offsets *pc,
			  struct recset *rs)
{
	assert(!op->gpending && pc->n > 0);
	struct pending_offsets *pp = malloc(sizeof *pp);
	int16_t err = KERR_COORDINATOR_NOT_AVAILABLE;
	if (pp && gstr_copy(&pc->group, gk(g->id))) {
		*pp = *pc;
		memset(pc, 0, sizeof *pc);
		op->gpending = pp;
		err = recset_write(sc, g, rs, op);
		if (!err)
			return true;
	} else {
		free(pp);
		pending_fail(pc, &op->gout, err);
		pending_free(pc);
	}
	op->error = err; /* refused before the append: answered as when it fails after */
	sluice_group_written(sc, op, false);
	assert(!op->gpending);
	return false;
}

/* What an OffsetCommit's walk over its topics needs. */
struct commit_walk {
	struct storecore *sc;
	struct group *g;
	const struct sluice_meta_snapshot *snap;
	int16_t gerr;
	int64_t now_wall;
	struct kwr *w;
	struct recset *rs;
	struct pending_offsets *pc;
};

/* The ErrorCode of one partition of an OffsetCommit; gathers its record. */
static int16_t commit_partition(struct commit_walk *cw, const struct sluice_topic *t, struct kstr topic,
				const struct group_partition *p)
{
	int32_t meta_max = cw->sc->b->cfg.offset_metadata_max_bytes;
	if (meta_max > GROUP_STRING_MAX) /* the record's string has an int16 length */
		meta_max = GROUP_STRING_MAX;
	if (!t || p->partition < 0 || p->partition >= t->partitions)
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	if (cw->gerr)
		return cw->gerr;
	if (p->metadata.ptr && p->metadata.len > meta_max)
		return KERR_OFFSET_METADATA_TOO_LARGE;
	if (!offset_find(cw->g, topic, p->partition) && cw->g->off_n + (uint32_t)cw->pc->n >= OFFSETS_PER_GROUP_MAX)
		return KERR_COORDINATOR_NOT_AVAILABLE;
	/* Applied to the group only once the record is written. */
	struct offset_entry val = {.offset = p->offset, .leader_epoch = p->leader_epoch, .commit_ts = cw->now_wall};
	if (!pending_add(cw->pc, topic, p->partition, &val, p->metadata.ptr ? p->metadata : (struct kstr){"", 0}))
		return KERR_COORDINATOR_NOT_AVAILABLE;
	recset_offset(cw->rs, cw->g, &cw->pc->it[cw->pc->n - 1].e, true);
	return KERR_NONE;
}

/* Answer each partition of an OffsetCommit, gathering what to write. */
static void commit_walk_topics(struct commit_walk *cw, struct group_topics *it)
{
	struct group_wire wi = it->wire;
	sluice_group_topics_encode(cw->w, wi, it->count > 0 ? it->count : 0);
	struct kstr topic;
	int32_t np;
	while (sluice_group_topics_next(it, &topic, &np)) {
		const struct sluice_topic *ti = topic.ptr ? sluice_meta_find(cw->snap, topic.ptr, (size_t)topic.len) : NULL;
		sluice_group_topic_encode(cw->w, wi, topic, np);
		struct group_partition p;
		while (sluice_group_topics_partition(it, &p)) {
			int32_t before = cw->pc->n;
			int16_t err = commit_partition(cw, ti, topic, &p);
			size_t pos = sluice_group_partition_error_encode(cw->w, wi, p.partition, err);
			if (cw->pc->n > before)
				cw->pc->it[cw->pc->n - 1].err_pos = pos;
		}
		sluice_group_topic_end(cw->w, wi);
	}
	assert(!it->rd.err && it->topics_left == 0);
}

/* The group-level error of an OffsetCommit (and the group, created for a
 * standalone consumer's first commit). */
static int16_t commit_group_check(struct storecore *sc, struct gcoord *gc, struct partop *op,
				  const struct group_commit_req *q, struct group **out)
{
	*out = NULL;
	if (!q->group_id.ptr || q->group_id.len == 0 || q->group_id.len > GROUP_STRING_MAX)
		return KERR_INVALID_GROUP_ID;
	struct group *g = group_get(gc, q->group_id, op->partition);
	if (!g)
		return KERR_COORDINATOR_NOT_AVAILABLE;
	*out = g;
	if (q->generation < 0 && g->state == G_EMPTY && !g->members)
		return KERR_NONE; /* a standalone consumer committing without group membership */
	struct member *m;
	int16_t err = member_check(g, q->member_id, q->instance_id, &m);
	if (!err && q->generation != g->generation)
		err = KERR_ILLEGAL_GENERATION;
	if (!err && g->state == G_COMPLETING)
		err = KERR_REBALANCE_IN_PROGRESS;
	if (!err)
		m->last_seen_ms = sluice_now_ms();
	return err;
}

static int64_t wall_clock_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void offset_commit(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group_wire wi = wire_of(op);
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_commit_req q;
	/* Decode everything first: a cut request commits nothing. */
	if (!sluice_group_commit_decode(&rd, wi, &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct recset rs;
	struct pending_offsets pc = {0};
	struct commit_walk cw = {.sc = sc, .snap = op->gsnap, .now_wall = wall_clock_ms(), .w = &op->gout, .rs = &rs,
				 .pc = &pc};
	assert(cw.snap);
	cw.gerr = commit_group_check(sc, gc, op, &q, &cw.g);
	recset_init(&rs);
	sluice_group_commit_encode(cw.w, wi);
	commit_walk_topics(&cw, &q.topics);
	sluice_group_offsets_end(cw.w, wi, KERR_NONE);
	bool waiting = pc.n > 0 && pending_write(sc, cw.g, op, &pc, &rs);
	pending_free(&pc);
	recset_free(&rs);
	if (!waiting)
		reply(sc, op);
}

/* Apply one written commit or deletion to the group. */
static void pending_apply(struct group *g, struct pending_item *it)
{
	if (it->del) {
		struct offset_entry *oe = offset_find(g, gk(it->e.topic), it->e.partition);
		if (oe)
			offset_remove(g, oe);
		return;
	}
	struct offset_entry *oe = offset_get(g, gk(it->e.topic), it->e.partition);
	if (!oe)
		return; /* full: written, so it is back after a restart */
	oe->offset = it->e.offset;
	oe->leader_epoch = it->e.leader_epoch;
	gstr_free(&oe->metadata);
	oe->metadata = it->e.metadata;
	it->e.metadata = (struct gstr){NULL, 0};
	oe->commit_ts = it->e.commit_ts;
}

/* An OffsetCommit's or OffsetDelete's records were committed (err
 * KERR_NONE: applied to the group now) or not (each partition answers
 * err). */
static void offsets_written(struct storecore *sc, struct partop *op, int16_t err)
{
	struct pending_offsets *pc = op->gpending;
	if (!pc)
		return;
	assert(pc->n > 0 && pc->group.ptr);
	op->gpending = NULL;
	struct gcoord *gc = sc->groups;
	struct group *g = gc ? group_find(gc, gk(pc->group)) : NULL;
	if (!err && !g)
		SLOG_WARN("group", "group %s went away before its offset records were written", pc->group.ptr);
	for (int32_t i = 0; !err && g && i < pc->n; i++)
		pending_apply(g, &pc->it[i]);
	if (err)
		pending_fail(pc, &op->gout, err);
	pending_free(pc);
	free(pc);
}

void sluice_group_written(struct storecore *sc, struct partop *op, bool ok)
{
	/* The storage core's reason (a producer's acks=all errors), as a
	 * coordinator answers it; a failure without one is the log's. */
	int16_t err = ok ? KERR_NONE : coordinator_error(op->error ? op->error : KERR_KAFKA_STORAGE_ERROR);
	assert(ok || err != KERR_NONE);
	op->error = KERR_NONE; /* the answer is in gout */
	op->error_message = NULL;
	switch (op->api_key) {
	case SLUICE_API_SYNC_GROUP:
		sync_written(sc, op, err);
		break;
	case SLUICE_API_DELETE_GROUPS:
		if (err) {
			kwr_free(&op->gout);
			sluice_group_delete_encode(&op->gout, wire_of(op), op->gname, err);
		}
		break;
	default:
		offsets_written(sc, op, err);
	}
}

/* One committed offset (or none), as OffsetFetch answers a partition. */
static void fetch_partition(struct kwr *w, struct group_wire wi, const struct offset_entry *e, int32_t part)
{
	struct group_offset_result r = {.partition = part, .offset = -1, .leader_epoch = -1, .metadata = {"", 0}};
	if (e) {
		r.offset = e->offset;
		r.leader_epoch = e->leader_epoch;
		r.metadata = gk(e->metadata);
	}
	sluice_group_fetch_partition_encode(w, wi, &r);
}

/* OffsetFetch's topics: every committed offset of the group when the
 * request names none (null), else those it names. */
static void fetch_offsets(struct kwr *w, const struct group *g, struct group_topics *it)
{
	struct group_wire wi = it->wire;
	if (it->count < 0) {
		/* one topic entry per committed partition keeps this simple and valid */
		sluice_group_topics_encode(w, wi, g ? (int32_t)g->off_n : 0);
		for (uint32_t i = 0; g && i < g->off_cap; i++) {
			const struct offset_entry *e = &g->offsets[i];
			if (!e->topic.ptr)
				continue;
			sluice_group_topic_encode(w, wi, gk(e->topic), 1);
			fetch_partition(w, wi, e, e->partition);
			sluice_group_topic_end(w, wi);
		}
		return;
	}
	sluice_group_topics_encode(w, wi, it->count);
	struct kstr topic;
	int32_t np;
	while (sluice_group_topics_next(it, &topic, &np)) {
		sluice_group_topic_encode(w, wi, topic, np);
		struct group_partition p;
		while (sluice_group_topics_partition(it, &p))
			fetch_partition(w, wi, offset_find(g, topic, p.partition), p.partition);
		sluice_group_topic_end(w, wi);
	}
	assert(!it->rd.err && it->topics_left == 0);
}

static void offset_fetch(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group_wire wi = wire_of(op);
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_fetch_req q;
	if (!sluice_group_fetch_decode(&rd, wi, &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct group *g = group_open(gc, q.group_id);
	/* v8+: one element of Groups, as data holds this group's part of the request */
	sluice_group_fetch_encode(&op->gout, wi, q.group_id);
	fetch_offsets(&op->gout, g, &q.topics);
	sluice_group_offsets_end(&op->gout, wi, KERR_NONE);
	reply(sc, op);
}

/* Answer each partition of an OffsetDelete and gather the tombstones of
 * the offsets the group has. */
static void delete_walk(struct group *g, struct group_topics *it, struct kwr *w, struct recset *rs,
			struct pending_offsets *pc)
{
	struct group_wire wi = it->wire;
	sluice_group_topics_encode(w, wi, it->count < 0 ? 0 : it->count);
	struct kstr topic;
	int32_t np;
	while (sluice_group_topics_next(it, &topic, &np)) {
		sluice_group_topic_encode(w, wi, topic, np);
		struct group_partition p;
		while (sluice_group_topics_partition(it, &p)) {
			int16_t e = g->members ? KERR_GROUP_SUBSCRIBED_TO_TOPIC : KERR_NONE;
			struct offset_entry *oe = e ? NULL : offset_find(g, topic, p.partition);
			int32_t before = pc->n;
			if (oe && !pending_add(pc, topic, p.partition, NULL, (struct kstr){NULL, 0}))
				e = KERR_COORDINATOR_NOT_AVAILABLE;
			else if (oe)
				recset_offset(rs, g, oe, false);
			size_t pos = sluice_group_partition_error_encode(w, wi, p.partition, e);
			if (pc->n > before)
				pc->it[pc->n - 1].err_pos = pos;
		}
		sluice_group_topic_end(w, wi);
	}
	assert(!it->rd.err && it->topics_left == 0);
}

static void offset_delete_api(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group_wire wi = wire_of(op);
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_offset_delete_req q;
	if (!sluice_group_offset_delete_decode(&rd, wi, &q)) {
		malformed(sc, op, &rd);
		return;
	}
	struct group *g = group_open(gc, q.group_id);
	struct kwr *w = &op->gout;
	sluice_group_offset_delete_encode(w, wi, g ? KERR_NONE : KERR_GROUP_ID_NOT_FOUND);
	if (!g) {
		sluice_group_topics_encode(w, wi, 0);
		reply(sc, op);
		return;
	}
	struct recset rs;
	recset_init(&rs);
	struct pending_offsets pc = {.top_error = true};
	delete_walk(g, &q.topics, w, &rs, &pc);
	sluice_group_offsets_end(w, wi, KERR_NONE);
	/* Removed from the group once the tombstones are written. */
	bool waiting = pc.n > 0 && pending_write(sc, g, op, &pc, &rs);
	pending_free(&pc);
	recset_free(&rs);
	if (!waiting)
		reply(sc, op);
}

/* ---- DescribeGroups (15), DeleteGroups (42), ListGroups (16) --------------------- */

/* Tombstones for every offset of the group and the group itself; wait_op
 * (if any) is answered once they are committed. Returns KERR_NONE or the
 * error the write was refused with (recset_write). */
static int16_t delete_group_records_wait(struct storecore *sc, struct group *g, struct partop *wait_op)
{
	struct recset rs;
	recset_init(&rs);
	for (uint32_t k = 0; k < g->off_cap; k++)
		if (g->offsets[k].topic.ptr)
			recset_offset(&rs, g, &g->offsets[k], false);
	recset_group(&rs, g, false);
	assert(rs.n == (int32_t)g->off_n + 1 || rs.err);
	int16_t err = recset_write(sc, g, &rs, wait_op);
	recset_free(&rs);
	return err;
}

static void delete_group_records(struct storecore *sc, struct group *g)
{
	(void)delete_group_records_wait(sc, g, NULL);
}

static void describe_member(struct kwr *w, struct group_wire wi, const struct group *g, const struct member *m)
{
	const struct protocol *p = member_protocol(m, g->protocol);
	bool stable = g->state == G_STABLE;
	struct group_describe_member dm = {
		.member_id = gk(m->id),
		.instance_id = gk(m->instance_id),
		.client_id = gk(m->client_id),
		.client_host = gk(m->client_host),
		.meta = p ? p->meta : NULL,
		.meta_len = p ? p->meta_len : 0,
		.assignment = stable ? m->assignment : NULL,
		.assignment_len = stable ? m->assignment_len : 0,
	};
	sluice_group_describe_member_encode(w, wi, &dm);
}

static void describe_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group_wire wi = wire_of(op);
	const struct group *g = group_find(gc, op->gname);
	bool members = g && (g->state == G_STABLE || g->state == G_COMPLETING || g->state == G_PREPARING);
	struct group_describe_result r = {
		.group_id = op->gname,
		.state = g ? state_names[g->state] : "Dead",
		.protocol_type = g ? gk(g->protocol_type) : (struct kstr){NULL, 0},
		.protocol = g && g->state == G_STABLE ? gk(g->protocol) : (struct kstr){NULL, 0},
		.nmembers = members ? g->nmembers : 0,
	};
	sluice_group_describe_encode(&op->gout, wi, &r);
	int32_t n = 0;
	for (const struct member *m = members ? g->members : NULL; m; m = m->next, n++)
		describe_member(&op->gout, wi, g, m);
	assert(n == r.nmembers);
	sluice_group_describe_end(&op->gout, wi);
	reply(sc, op);
}

static void delete_group(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group *g = group_find(gc, op->gname);
	int16_t err = !g ? KERR_GROUP_ID_NOT_FOUND : g->members ? KERR_NON_EMPTY_GROUP : KERR_NONE;
	sluice_group_delete_encode(&op->gout, wire_of(op), op->gname, err);
	if (err) {
		reply(sc, op);
		return;
	}
	assert(g->nmembers == 0);
	err = delete_group_records_wait(sc, g, op);
	if (err) { /* refused: the group stays, as its records say */
		kwr_free(&op->gout);
		sluice_group_delete_encode(&op->gout, wire_of(op), op->gname, coordinator_error(err));
		reply(sc, op);
		return;
	}
	group_remove(gc, g); /* answered once its tombstones are committed */
}

static bool list_match(const struct group_list_req *q, const struct group *g)
{
	if (q->nstates <= 0)
		return true;
	bool match = false;
	for (int32_t i = 0; i < q->nstates; i++)
		match |= q->states[i].ptr && kstr_eq(q->states[i], state_names[g->state]);
	return match;
}

/* ListGroups, with its StatesFilter (v4+); the network core decoded the
 * body whole before it sent it (list_groups_start). */
static void list_groups(struct storecore *sc, struct gcoord *gc, struct partop *op)
{
	struct group_wire wi = wire_of(op);
	struct krd rd;
	krd_init(&rd, op->data, op->len);
	struct group_list_req q;
	if (!sluice_group_list_decode(&rd, wi, &q)) {
		malformed(sc, op, &rd);
		return;
	}
	assert(q.nstates <= SLUICE_GROUP_LIST_STATES_MAX);
	/* Every offsets partition this core owns and leads is read back first
	 * (in a cluster only those this broker holds: none is created here). */
	bool cluster = sluice_config_cluster_mode(&sc->b->cfg);
	for (int32_t i = 0; i < gc->partitions; i++) {
		if (sluice_store_core_for(sc->b, SLUICE_OFFSETS_TOPIC, i) != sc->id)
			continue;
		int16_t err = 0;
		struct spart *p = cluster ? sluice_store_partition_open(sc, SLUICE_OFFSETS_TOPIC, i)
					  : sluice_store_partition(sc, SLUICE_OFFSETS_TOPIC, i, &err);
		if (p)
			(void)groups_ready(sc, gc, p, i);
	}
	sluice_group_list_encode(&op->gout, wi);
	op->gcount = 0;
	for (uint32_t b = 0; b < gc->cap; b++)
		for (struct group *g = gc->table[b]; g; g = g->next) {
			if (!list_match(&q, g))
				continue;
			struct group_list_entry e = {gk(g->id), gk(g->protocol_type), state_names[g->state]};
			sluice_group_list_entry_encode(&op->gout, wi, &e);
			op->gcount++;
		}
	reply(sc, op);
}

/* A group op refused before its group is looked at (this broker does not
 * coordinate its partition now): answered whole with error, as the
 * network core answers for another broker's groups. */
static void refuse(struct storecore *sc, struct partop *op, int16_t error)
{
	assert(error != KERR_NONE && op->api_key != SLUICE_API_LIST_GROUPS);
	kwr_free(&op->gout);
	if (!sluice_group_error_answer(&op->gout, wire_of(op), op->data, op->len, error))
		kwr_free(&op->gout); /* it does not decode: the connection closes */
	reply(sc, op);
}

void sluice_group_handle(struct storecore *sc, struct partop *op)
{
	assert(op->kind == PARTOP_GROUP && !op->gpending);
	struct gcoord *gc = coord(sc);
	if (op->partition < 0 || op->partition >= gc->partitions) {
		op->error = KERR_COORDINATOR_NOT_AVAILABLE;
		reply(sc, op);
		return;
	}
	int16_t err = op->api_key == SLUICE_API_LIST_GROUPS ? KERR_NONE : op_ready(sc, gc, op);
	if (err) {
		refuse(sc, op, err);
		return;
	}
	switch (op->api_key) {
	case SLUICE_API_OFFSET_COMMIT: offset_commit(sc, gc, op); break;
	case SLUICE_API_OFFSET_FETCH: offset_fetch(sc, gc, op); break;
	case SLUICE_API_JOIN_GROUP: join_group(sc, gc, op); break;
	case SLUICE_API_HEARTBEAT: heartbeat(sc, gc, op); break;
	case SLUICE_API_LEAVE_GROUP: leave_group(sc, gc, op); break;
	case SLUICE_API_SYNC_GROUP: sync_group(sc, gc, op); break;
	case SLUICE_API_DESCRIBE_GROUPS: describe_group(sc, gc, op); break;
	case SLUICE_API_LIST_GROUPS: list_groups(sc, gc, op); break;
	case SLUICE_API_DELETE_GROUPS: delete_group(sc, gc, op); break;
	case SLUICE_API_OFFSET_DELETE: offset_delete_api(sc, gc, op); break;
	default:
		op->error = KERR_UNKNOWN_SERVER_ERROR;
		reply(sc, op);
	}
}

/* ---- the storage-core service ------------------------------------------------------ */

/* The controller's word on a partition changed its role here: a
 * __consumer_offsets partition this broker now leads is read back at once
 * (as Kafka's coordinator loads on election), one it no longer leads (or
 * leads at a new epoch) has its groups dropped. */
static void group_service_leadership(struct storecore *sc, struct spart *p, const char *topic, int32_t partition)
{
	struct gcoord *gc = sc->groups;
	if (!gc || strcmp(topic, SLUICE_OFFSETS_TOPIC) != 0 || partition < 0 || partition >= gc->partitions)
		return;
	(void)groups_ready(sc, gc, p, partition);
}

static int group_service_init(struct storecore *sc)
{
	assert(!sc->groups);
	return coord(sc) ? 0 : -1;
}

/* Everything the coordinator holds; ops it held are dropped with the
 * network cores that own them. */
static void group_service_fini(struct storecore *sc)
{
	struct gcoord *gc = sc->groups;
	if (!gc)
		return;
	for (uint32_t b = 0; b < gc->cap; b++)
		while (gc->table[b])
			group_remove(gc, gc->table[b]);
	assert(gc->count == 0);
	free(gc->table);
	free(gc->loaded_epoch);
	kwr_free(&gc->scratch);
	free(gc);
	sc->groups = NULL;
}

const struct sluice_store_service_ops sluice_group_service = {
	.name = "group",
	.partop_kind = PARTOP_GROUP,
	.init = group_service_init,
	.fini = group_service_fini,
	.handle = sluice_group_handle,
	.tick = sluice_group_tick,
	.next_deadline = sluice_group_next_deadline,
	.written = sluice_group_written,
	.leadership = group_service_leadership,
};
