/* The active controller's decision rules (control/ctl_logic.h): Kafka's
 * ClusterControlManager, ReplicationControlManager, ConfigurationControlManager
 * and ProducerIdControlManager reduced to pure functions of the committed
 * image, the heartbeat sessions this node keeps while it is the active
 * controller, and the time the caller passes. A decision reads the image,
 * builds a view of the brokers as its own records will leave them (fenced,
 * unfenced, in controlled shutdown, registered after an unclean shutdown),
 * appends the broker records, and then reconciles every partition against
 * that view with one builder (Kafka's PartitionChangeBuilder with eligible
 * leader replicas enabled): fencing, unfencing, controlled shutdown,
 * unclean-shutdown cleanup, preferred-leader rebalancing and AlterPartition
 * all choose leaders, ISR and ELR the same way. Whatever a decision could not
 * fit into one command is left for the next tick, which repairs what the
 * image still shows wrong; running a decision again on its own result yields
 * nothing (the rules are a fixed point), which the unit tests check. */
#include "control/ctl_logic.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "control/broker_config.h"
#include "control/topic_config.h"
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#define CTL_NO_LEADER (-1)
#define CTL_RECOVERED 0  /* LeaderRecoveryState */
#define CTL_RECOVERING 1
#define CTL_MIN_ISR_DEFAULT 1 /* min.insync.replicas, Kafka's default */
/* leader.imbalance.check.interval.seconds (Kafka's default, 300): preferred
 * leaders are also restored at once when a broker is unfenced or an ISR grows. */
#define CTL_IMBALANCE_CHECK_INTERVAL_MS (300 * 1000)
#define CTL_CONFIG_CHANGES_MAX 1000 /* config changes to one resource in one request */
#define CTL_PENDING_SLOTS_MIN 64
#define CTL_TOPIC_ID_TRIES_MAX 16
#define CTL_METADATA_TOPIC "__cluster_metadata"
_Static_assert(SLUICE_CTL_PRODUCER_ID_BLOCK > 0, "a block holds ids");
_Static_assert(SLUICE_IMAGE_BROKERS_MAX < INT32_MAX / 2, "broker counts fit an int32");

/* A broker's heartbeat session: leader-only, in memory (as Kafka's BrokerHeartbeatManager). */
struct ctl_session {
	int32_t id;
	int64_t epoch;           /* the registration the session belongs to */
	int64_t last_contact_ms;
	int64_t metadata_offset; /* CurrentMetadataOffset of its last heartbeat, -1 before one */
	int64_t shutdown_offset; /* controlled shutdown: the last record moving its leaderships away, -1 */
};

/* A broker as the decision being taken will leave it. */
struct ctl_bview {
	int32_t id;
	bool fenced, in_cs;
	bool unclean; /* registering after an unclean shutdown: out of every ISR and ELR */
	const char *rack;
};

/* Records earlier calls appended to the same out, which the image does not
 * show yet: the keys of topics created or removed, partitions grown or
 * changed, so that two changes in one command never contradict each other. */
enum pend_kind { PEND_NAME = 1, PEND_TOPIC_ID, PEND_REMOVED, PEND_GROWN, PEND_CHANGED };
struct pend_slot {
	uint64_t hash; /* of kind and key; 0: empty */
	uint32_t idx;  /* the record's index in out */
};
struct pending {
	const struct sluice_ctl_out *out;
	size_t n; /* out->n after the last append: fewer means out was cleared */
	struct pend_slot *slots;
	size_t slot_n, used; /* slot_n a power of two, used <= slot_n / 2 */
	int64_t partitions;  /* added by pending TopicRecords and growths */
	int32_t topics;
	size_t pid_idx; /* the last ProducerIdsRecord appended, SIZE_MAX none */
	uint32_t *broker_idx; /* broker records appended (registrations, fencing): the view shows them */
	size_t broker_n, broker_cap;
};

/* Facts of the image recomputed when its offset moves: totals for the
 * limits and the topic names with '.' and '_' treated alike (Kafka refuses
 * names that collide so, as metric names would). */
struct image_cache {
	int64_t offset;
	bool valid;
	int64_t partitions;
	uint32_t *slots; /* topic index + 1, 0 empty */
	size_t slot_n;
};

/* Scratch of the replica placer, sized for every broker at start. */
struct pl_entry {
	const char *rack;
	int32_t id;
};
struct placer {
	int32_t broker_n, rack_n;
	struct pl_entry *ent; /* active brokers by rack name, ids ascending inside each rack */
	int32_t *rack_first, *rack_len, *rack_start, *visits;
	int32_t rack_offset;
};

struct sluice_ctl {
	struct sluice_ctl_config cfg;
	const struct sluice_image *img;
	struct ctl_session *sessions; /* sorted by id */
	size_t session_n;
	struct ctl_bview *view; /* sorted by id */
	size_t view_n;
	bool repair_due;    /* a scan was cut short: the next tick finishes it */
	bool rebalance_due; /* a broker returned or an ISR grew: restore preferred leaders */
	int64_t rebalance_last_ms;
	struct pending pend;
	struct image_cache cache;
	struct placer pl;
	int32_t *order; /* [SLUICE_ASSIGNMENT_LISTS_MAX]: a manual assignment's list of each partition */
};

/* ---- records out ------------------------------------------------------------------ */

void sluice_ctl_out_init(struct sluice_ctl_out *o, size_t cap_max)
{
	assert(o && cap_max > 0);
	memset(o, 0, sizeof *o);
	o->cap_max = cap_max;
}

void sluice_ctl_out_free(struct sluice_ctl_out *o)
{
	assert(o);
	free(o->recs);
	memset(o, 0, sizeof *o);
}

void sluice_ctl_out_clear(struct sluice_ctl_out *o)
{
	assert(o && o->n <= o->cap);
	o->n = 0;
}

struct sluice_mrec *sluice_ctl_out_add(struct sluice_ctl_out *o)
{
	assert(o && o->n <= o->cap && o->cap <= o->cap_max);
	if (o->n == o->cap_max)
		return NULL;
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 16;
		if (cap > o->cap_max)
			cap = o->cap_max;
		struct sluice_mrec *recs = realloc(o->recs, cap * sizeof *recs);
		if (!recs)
			return NULL;
		o->recs = recs;
		o->cap = cap;
	}
	struct sluice_mrec *r = &o->recs[o->n++];
	memset(r, 0, sizeof *r);
	return r;
}

/* The metadata offset the next record appended to out will take. */
static int64_t next_offset(const struct sluice_ctl *c, const struct sluice_ctl_out *out)
{
	return sluice_image_offset(c->img) + 1 + (int64_t)out->n;
}

/* ---- small sets of broker ids -------------------------------------------------------- */

static bool ids_has(const struct sluice_mrec_ids *s, int32_t id)
{
	assert(s->n >= 0 && s->n <= SLUICE_REPLICAS_MAX);
	for (int32_t i = 0; i < s->n; i++)
		if (s->id[i] == id)
			return true;
	return false;
}

static void ids_add(struct sluice_mrec_ids *s, int32_t id)
{
	if (ids_has(s, id))
		return;
	assert(s->n < SLUICE_REPLICAS_MAX);
	s->id[s->n++] = id;
}

static void ids_remove(struct sluice_mrec_ids *s, int32_t id)
{
	int32_t k = 0;
	for (int32_t i = 0; i < s->n; i++)
		if (s->id[i] != id)
			s->id[k++] = s->id[i];
	s->n = k;
}

static void ids_sort(struct sluice_mrec_ids *s)
{
	for (int32_t i = 1; i < s->n; i++)
		for (int32_t j = i; j > 0 && s->id[j - 1] > s->id[j]; j--) {
			int32_t t = s->id[j];
			s->id[j] = s->id[j - 1];
			s->id[j - 1] = t;
		}
}

/* Same members in the same order (an ISR's order is kept, as Kafka's lists). */
static bool ids_equal(const struct sluice_mrec_ids *a, const struct sluice_mrec_ids *b)
{
	return a->n == b->n && (a->n == 0 || memcmp(a->id, b->id, sizeof a->id[0] * (size_t)a->n) == 0);
}

static bool ids_same_set(const struct sluice_mrec_ids *a, const struct sluice_mrec_ids *b)
{
	if (a->n != b->n)
		return false;
	for (int32_t i = 0; i < a->n; i++)
		if (!ids_has(b, a->id[i]))
			return false;
	return true;
}

static struct sluice_mrec_ids ids_one(int32_t id)
{
	struct sluice_mrec_ids s = {.n = 1};
	s.id[0] = id;
	return s;
}

/* ---- hashing ---------------------------------------------------------------------------- */

static uint64_t fnv_add(uint64_t h, const void *p, size_t len)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 1099511628211ull;
	}
	return h;
}

/* A topic name with '.' as '_': names equal so collide in Kafka. */
static uint64_t name_hash(const char *name, size_t len)
{
	uint64_t h = 14695981039346656037ull;
	for (size_t i = 0; i < len; i++) {
		uint8_t ch = name[i] == '.' ? '_' : (uint8_t)name[i];
		h = fnv_add(h, &ch, 1);
	}
	return h ? h : 1;
}

static bool names_collide(const char *a, size_t alen, const char *b, size_t blen)
{
	if (alen != blen)
		return false;
	for (size_t i = 0; i < alen; i++) {
		char x = a[i] == '.' ? '_' : a[i], y = b[i] == '.' ? '_' : b[i];
		if (x != y)
			return false;
	}
	return true;
}

static uint64_t key_hash(enum pend_kind kind, const uint8_t id[16], int32_t partition)
{
	uint8_t k = (uint8_t)kind;
	uint64_t h = fnv_add(14695981039346656037ull, &k, 1);
	h = fnv_add(h, id, 16);
	h = fnv_add(h, &partition, sizeof partition);
	return h ? h : 1;
}

/* ---- the image cache ---------------------------------------------------------------------- */

static int cache_refresh(struct sluice_ctl *c)
{
	int64_t off = sluice_image_offset(c->img);
	if (c->cache.valid && c->cache.offset == off)
		return 0;
	size_t tn = sluice_image_topic_count(c->img);
	size_t want = CTL_PENDING_SLOTS_MIN;
	while (want < tn * 2)
		want *= 2;
	if (want != c->cache.slot_n) {
		uint32_t *s = realloc(c->cache.slots, want * sizeof *s);
		if (!s)
			return -1;
		c->cache.slots = s;
		c->cache.slot_n = want;
	}
	memset(c->cache.slots, 0, c->cache.slot_n * sizeof *c->cache.slots);
	c->cache.partitions = 0;
	for (size_t i = 0; i < tn; i++) {
		const struct sluice_image_topic *t = sluice_image_topic_at(c->img, i);
		c->cache.partitions += t->partition_n;
		size_t slot = name_hash(t->name, strlen(t->name)) & (c->cache.slot_n - 1);
		while (c->cache.slots[slot])
			slot = (slot + 1) & (c->cache.slot_n - 1);
		c->cache.slots[slot] = (uint32_t)i + 1;
	}
	c->cache.offset = off;
	c->cache.valid = true;
	return 0;
}

/* An existing topic whose name collides with name (itself included), or NULL. */
static const struct sluice_image_topic *cache_colliding(const struct sluice_ctl *c, const char *name, size_t len)
{
	assert(c->cache.valid && c->cache.slot_n);
	size_t slot = name_hash(name, len) & (c->cache.slot_n - 1);
	for (; c->cache.slots[slot]; slot = (slot + 1) & (c->cache.slot_n - 1)) {
		const struct sluice_image_topic *t = sluice_image_topic_at(c->img, c->cache.slots[slot] - 1);
		if (names_collide(name, len, t->name, strlen(t->name)))
			return t;
	}
	return NULL;
}

/* ---- pending records of the same out --------------------------------------------------- */

static void pending_reset(struct pending *p, const struct sluice_ctl_out *out)
{
	p->out = out;
	p->n = out->n;
	if (p->used)
		memset(p->slots, 0, p->slot_n * sizeof *p->slots);
	p->used = 0;
	p->partitions = 0;
	p->topics = 0;
	p->pid_idx = SIZE_MAX;
	p->broker_n = 0;
}

static bool broker_record(enum sluice_mrec_type t)
{
	return t == SLUICE_MREC_REGISTER_BROKER || t == SLUICE_MREC_BROKER_REGISTRATION_CHANGE ||
	       t == SLUICE_MREC_FENCE_BROKER || t == SLUICE_MREC_UNFENCE_BROKER;
}

/* Remember a broker record; memory short: forgotten (the view then lags
 * this command, which the next tick repairs). */
static void pending_broker(struct pending *p, size_t idx)
{
	if (p->broker_n == p->broker_cap) {
		size_t cap = p->broker_cap ? 2 * p->broker_cap : 8;
		uint32_t *v = realloc(p->broker_idx, cap * sizeof *v);
		if (!v)
			return;
		p->broker_idx = v;
		p->broker_cap = cap;
	}
	p->broker_idx[p->broker_n++] = (uint32_t)idx;
}

/* Called first by every decision that appends: forget what a cleared or other out held. */
static void pending_sync(struct sluice_ctl *c, const struct sluice_ctl_out *out)
{
	if (c->pend.out != out || out->n < c->pend.n || out->n == 0)
		pending_reset(&c->pend, out);
}

static bool pend_matches(const struct sluice_ctl_out *out, uint32_t idx, enum pend_kind kind, const char *name,
			 size_t len, const uint8_t id[16], int32_t partition)
{
	if (idx >= out->n)
		return false;
	const struct sluice_mrec *r = &out->recs[idx];
	switch (kind) {
	case PEND_NAME:
		return r->type == SLUICE_MREC_TOPIC && names_collide(name, len, r->topic.name, strlen(r->topic.name));
	case PEND_TOPIC_ID:
		return r->type == SLUICE_MREC_TOPIC && !memcmp(r->topic.topic_id, id, 16);
	case PEND_REMOVED:
		return r->type == SLUICE_MREC_REMOVE_TOPIC && !memcmp(r->remove_topic.topic_id, id, 16);
	case PEND_GROWN:
		return r->type == SLUICE_MREC_PARTITION && !memcmp(r->partition.topic_id, id, 16);
	case PEND_CHANGED:
		return r->type == SLUICE_MREC_PARTITION_CHANGE && !memcmp(r->partition_change.topic_id, id, 16) &&
		       r->partition_change.partition_id == partition;
	}
	assert(!"a pending kind is handled");
	return false;
}

static uint64_t pend_hash(enum pend_kind kind, const char *name, size_t len, const uint8_t id[16], int32_t partition)
{
	if (kind == PEND_NAME)
		return name_hash(name, len);
	return key_hash(kind, id, kind == PEND_CHANGED ? partition : 0);
}

/* Whether a record of kind with this key is in out (appended by an earlier call). */
static bool pending_has(const struct sluice_ctl *c, const struct sluice_ctl_out *out, enum pend_kind kind,
			const char *name, size_t len, const uint8_t id[16], int32_t partition)
{
	const struct pending *p = &c->pend;
	if (!p->used)
		return false;
	assert(p->out == out);
	uint64_t h = pend_hash(kind, name, len, id, partition);
	for (size_t s = h & (p->slot_n - 1); p->slots[s].hash; s = (s + 1) & (p->slot_n - 1))
		if (p->slots[s].hash == h && pend_matches(out, p->slots[s].idx, kind, name, len, id, partition))
			return true;
	return false;
}

static int pending_grow(struct pending *p)
{
	size_t n = p->slot_n ? p->slot_n * 2 : CTL_PENDING_SLOTS_MIN;
	struct pend_slot *s = calloc(n, sizeof *s);
	if (!s)
		return -1;
	for (size_t i = 0; i < p->slot_n; i++) {
		if (!p->slots[i].hash)
			continue;
		size_t k = p->slots[i].hash & (n - 1);
		while (s[k].hash)
			k = (k + 1) & (n - 1);
		s[k] = p->slots[i];
	}
	free(p->slots);
	p->slots = s;
	p->slot_n = n;
	return 0;
}

/* Remember out->recs[idx] under kind's key. Memory short: forgotten, which
 * only loses a check the image's apply makes again. */
static void pending_put(struct sluice_ctl *c, const struct sluice_ctl_out *out, enum pend_kind kind, size_t idx)
{
	struct pending *p = &c->pend;
	assert(p->out == out && idx < out->n && idx < UINT32_MAX);
	if ((p->used + 1) * 2 > p->slot_n && pending_grow(p) < 0)
		return;
	const struct sluice_mrec *r = &out->recs[idx];
	uint64_t h;
	if (kind == PEND_NAME)
		h = name_hash(r->topic.name, strlen(r->topic.name));
	else if (kind == PEND_CHANGED)
		h = key_hash(kind, r->partition_change.topic_id, r->partition_change.partition_id);
	else
		h = key_hash(kind, kind == PEND_REMOVED ? r->remove_topic.topic_id
				   : kind == PEND_GROWN ? r->partition.topic_id : r->topic.topic_id, 0);
	size_t s = h & (p->slot_n - 1);
	while (p->slots[s].hash)
		s = (s + 1) & (p->slot_n - 1);
	p->slots[s] = (struct pend_slot){.hash = h, .idx = (uint32_t)idx};
	p->used++;
}

/* The records from index `from` on were appended by this decision: remember them. */
static void pending_note(struct sluice_ctl *c, const struct sluice_ctl_out *out, size_t from)
{
	assert(c->pend.out == out && from <= out->n);
	for (size_t i = from; i < out->n; i++) {
		switch (out->recs[i].type) {
		case SLUICE_MREC_TOPIC:
			pending_put(c, out, PEND_NAME, i);
			pending_put(c, out, PEND_TOPIC_ID, i);
			break;
		case SLUICE_MREC_REMOVE_TOPIC:
			pending_put(c, out, PEND_REMOVED, i);
			break;
		case SLUICE_MREC_PARTITION:
			if (i == from || out->recs[i - 1].type != SLUICE_MREC_PARTITION)
				pending_put(c, out, PEND_GROWN, i);
			break;
		case SLUICE_MREC_PARTITION_CHANGE:
			pending_put(c, out, PEND_CHANGED, i);
			break;
		case SLUICE_MREC_PRODUCER_IDS:
			c->pend.pid_idx = i;
			break;
		default:
			if (broker_record(out->recs[i].type))
				pending_broker(&c->pend, i);
			break;
		}
	}
	c->pend.n = out->n;
}

/* Drop what this decision appended from `from` on (it failed part way). */
static void pending_rollback(struct sluice_ctl *c, struct sluice_ctl_out *out, size_t from)
{
	assert(from <= out->n);
	out->n = from;
	c->pend.n = from;
}

/* ---- sessions ------------------------------------------------------------------------------ */

static struct ctl_session *session_find(const struct sluice_ctl *c, int32_t id)
{
	size_t lo = 0, hi = c->session_n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->sessions[mid].id == id)
			return &c->sessions[mid];
		if (c->sessions[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The session of broker id at epoch, a fresh one (as if it had just
 * heartbeated) when it has none or one of another registration. */
static struct ctl_session *session_get(struct sluice_ctl *c, int32_t id, int64_t epoch, int64_t now_ms)
{
	struct ctl_session *s = session_find(c, id);
	if (!s) {
		assert(c->session_n < SLUICE_IMAGE_BROKERS_MAX);
		size_t at = 0;
		while (at < c->session_n && c->sessions[at].id < id)
			at++;
		memmove(&c->sessions[at + 1], &c->sessions[at], (c->session_n - at) * sizeof *s);
		c->session_n++;
		s = &c->sessions[at];
		s->epoch = epoch - 1; /* reset below */
	}
	if (s->epoch != epoch)
		*s = (struct ctl_session){.id = id, .epoch = epoch, .last_contact_ms = now_ms, .metadata_offset = -1,
					  .shutdown_offset = -1};
	assert(s->id == id);
	return s;
}

/* Sessions of brokers the image no longer has go. */
static void sessions_prune(struct sluice_ctl *c)
{
	size_t k = 0;
	for (size_t i = 0; i < c->session_n; i++)
		if (sluice_image_broker(c->img, c->sessions[i].id))
			c->sessions[k++] = c->sessions[i];
	c->session_n = k;
}

static bool session_alive(const struct ctl_session *s, int64_t timeout_ms, int64_t now_ms)
{
	return s->last_contact_ms + timeout_ms >= now_ms;
}

void sluice_ctl_became_leader(struct sluice_ctl *c, int64_t now_ms)
{
	assert(c);
	c->session_n = 0;
	size_t bn = sluice_image_broker_count(c->img);
	for (size_t i = 0; i < bn; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(c->img, i);
		session_get(c, b->id, b->epoch, now_ms);
	}
	/* What the previous leader left undone (a scan cut short, a leader not
	 * yet restored) is looked at on the first tick. */
	c->repair_due = true;
	c->rebalance_due = c->cfg.auto_leader_rebalance;
	c->rebalance_last_ms = now_ms;
	c->pend.out = NULL;
	SLOG_INFO("ctl", "active controller at metadata offset %" PRId64 ": %zu broker session(s) started",
		  sluice_image_offset(c->img), c->session_n);
}

/* ---- the brokers' view ---------------------------------------------------------------------- */

static struct ctl_bview *view_find(const struct sluice_ctl *c, int32_t id)
{
	size_t lo = 0, hi = c->view_n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (c->view[mid].id == id)
			return &c->view[mid];
		if (c->view[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The entry of id, added (fenced) if the image does not have it yet; NULL
 * when the view is full (the image's apply refuses such a broker anyway). */
static struct ctl_bview *view_put(struct sluice_ctl *c, int32_t id, const char *rack)
{
	struct ctl_bview *v = view_find(c, id);
	if (v)
		return v;
	if (c->view_n > SLUICE_IMAGE_BROKERS_MAX)
		return NULL;
	size_t at = 0;
	while (at < c->view_n && c->view[at].id < id)
		at++;
	memmove(&c->view[at + 1], &c->view[at], (c->view_n - at) * sizeof *v);
	c->view_n++;
	c->view[at] = (struct ctl_bview){.id = id, .fenced = true, .rack = rack};
	return &c->view[at];
}

/* The image's brokers, then the broker records earlier decisions put in
 * out (pending, not applied yet): the brokers as this command leaves them. */
static void view_load(struct sluice_ctl *c, const struct sluice_ctl_out *out)
{
	size_t bn = sluice_image_broker_count(c->img);
	assert(bn <= SLUICE_IMAGE_BROKERS_MAX);
	for (size_t i = 0; i < bn; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(c->img, i);
		c->view[i] = (struct ctl_bview){.id = b->id, .fenced = b->fenced, .in_cs = b->in_controlled_shutdown,
						.rack = b->rack};
		assert(i == 0 || c->view[i - 1].id < b->id);
	}
	c->view_n = bn;
	for (size_t k = 0; out && c->pend.out == out && k < c->pend.broker_n; k++) {
		size_t idx = c->pend.broker_idx[k];
		const struct sluice_mrec *r = idx < out->n ? &out->recs[idx] : NULL;
		if (!r || !broker_record(r->type))
			continue;
		if (r->type == SLUICE_MREC_REGISTER_BROKER) {
			struct ctl_bview *v = view_put(c, r->register_broker.broker_id, "");
			if (v) {
				v->fenced = r->register_broker.fenced;
				v->in_cs = r->register_broker.in_controlled_shutdown;
			}
		} else if (r->type == SLUICE_MREC_BROKER_REGISTRATION_CHANGE) {
			struct ctl_bview *v = view_find(c, r->broker_registration_change.broker_id);
			if (v && r->broker_registration_change.fenced >= 0)
				v->fenced = r->broker_registration_change.fenced;
			if (v && r->broker_registration_change.in_controlled_shutdown >= 0)
				v->in_cs = r->broker_registration_change.in_controlled_shutdown;
		} else {
			struct ctl_bview *v = view_find(c, r->fence_broker.id);
			if (v)
				v->fenced = r->type == SLUICE_MREC_FENCE_BROKER;
		}
	}
}

/* Kafka's isActive: registered, unfenced and not shutting down. */
static bool view_active(const struct sluice_ctl *c, int32_t id)
{
	const struct ctl_bview *v = view_find(c, id);
	return v && !v->fenced && !v->in_cs && !v->unclean;
}

static bool view_unclean(const struct sluice_ctl *c, int32_t id)
{
	const struct ctl_bview *v = view_find(c, id);
	return v && v->unclean;
}

/* ---- topic-level rules from configs ---------------------------------------------------------- */

/* A topic's config, else the cluster-wide broker default, else NULL. */
static const char *topic_config(const struct sluice_ctl *c, const char *topic, const char *key)
{
	const char *v = sluice_image_config(c->img, SLUICE_MREC_RESOURCE_TOPIC, topic, key);
	return v ? v : sluice_image_config(c->img, SLUICE_MREC_RESOURCE_BROKER, "", key);
}

static bool topic_unclean_allowed(const struct sluice_ctl *c, const char *topic)
{
	const char *v = topic_config(c, topic, "unclean.leader.election.enable");
	return v && !strcasecmp(v, "true");
}

/* Kafka's getTopicEffectiveMinIsr: min.insync.replicas capped by the replication factor. */
static int32_t topic_min_isr(const struct sluice_ctl *c, const struct sluice_image_topic *t)
{
	const char *v = topic_config(c, t->name, "min.insync.replicas");
	long long m = CTL_MIN_ISR_DEFAULT;
	if (v) {
		char *end;
		errno = 0;
		m = strtoll(v, &end, 10);
		if (errno || *end || m < 1)
			m = CTL_MIN_ISR_DEFAULT;
	}
	int32_t rf = t->partition_n ? t->partitions[0].replicas.n : 1;
	return m < rf ? (int32_t)m : rf;
}

/* ---- the partition change builder (Kafka's PartitionChangeBuilder, ELR enabled) -------------- */

enum election { ELECT_ONLINE, ELECT_PREFERRED };

struct pc_rules {
	enum election election;
	bool unclean_allowed; /* the topic's unclean.leader.election.enable */
	int32_t min_isr;
	const struct sluice_mrec_ids *target_isr; /* NULL: the ISR without the view's inactive brokers */
	int8_t target_lrs;                        /* -1: unchanged */
	/* A reassignment's (KIP-455) targets; NULL: the partition's own. */
	const struct sluice_mrec_ids *target_replicas, *target_removing, *target_adding;
};

/* What a partition's assignment becomes: replicas, removing, adding. */
struct pc_assign {
	struct sluice_mrec_ids replicas, removing, adding;
};

/* Kafka's isValidNewLeader: in the ISR, or in the ELR while the ISR is empty, and active. */
static bool leader_valid(const struct sluice_ctl *c, int32_t id, const struct sluice_mrec_ids *isr,
			 const struct sluice_mrec_ids *elr)
{
	return (ids_has(isr, id) || (isr->n == 0 && ids_has(elr, id))) && view_active(c, id);
}

/* The ELR: with fewer ISR members than min ISR, the replicas that were in
 * the ISR (or the ELR) and left it cleanly; otherwise none. */
static void populate_elr(const struct sluice_ctl *c, const struct sluice_image_partition *p, int32_t min_isr,
			 const struct sluice_mrec_ids *isr, struct sluice_mrec_ids *elr)
{
	if (isr->n >= min_isr) {
		elr->n = 0;
		return;
	}
	struct sluice_mrec_ids cand = p->elr;
	for (int32_t i = 0; i < p->isr.n; i++)
		ids_add(&cand, p->isr.id[i]);
	elr->n = 0;
	for (int32_t i = 0; i < cand.n; i++)
		if (!ids_has(isr, cand.id[i]) && !view_unclean(c, cand.id[i]))
			ids_add(elr, cand.id[i]);
	ids_sort(elr);
}

/* Kafka's electLeader over the target replicas reps; *unclean when the
 * leader comes from outside ISR and ELR. */
static int32_t elect(const struct sluice_ctl *c, const struct sluice_image_partition *p, const struct pc_rules *rules,
		     const struct sluice_mrec_ids *reps, const struct sluice_mrec_ids *isr,
		     const struct sluice_mrec_ids *elr, bool *unclean)
{
	*unclean = false;
	if (rules->election == ELECT_PREFERRED && reps->n > 0 && leader_valid(c, reps->id[0], isr, elr))
		return reps->id[0];
	if (p->leader != CTL_NO_LEADER && leader_valid(c, p->leader, isr, elr))
		return p->leader;
	for (int32_t i = 0; i < reps->n; i++)
		if (leader_valid(c, reps->id[i], isr, elr))
			return reps->id[i];
	/* The last known leader, when nobody else has all the data (Kafka's
	 * balanced recovery): what a partition of one replica needs after its
	 * broker crashed and came back. */
	if (isr->n == 0 && elr->n == 0 && p->last_known_elr.n == 1 && view_active(c, p->last_known_elr.id[0])) {
		*unclean = true;
		return p->last_known_elr.id[0];
	}
	if (rules->election == ELECT_ONLINE && rules->unclean_allowed)
		for (int32_t i = 0; i < reps->n; i++)
			if (view_active(c, reps->id[i])) {
				*unclean = true;
				return reps->id[i];
			}
	return CTL_NO_LEADER;
}

static void target_isr(const struct sluice_ctl *c, const struct sluice_image_partition *p, const struct pc_rules *rules,
		       struct sluice_mrec_ids *isr)
{
	if (rules->target_isr) {
		*isr = *rules->target_isr;
		return;
	}
	isr->n = 0;
	for (int32_t i = 0; i < p->isr.n; i++)
		if (view_active(c, p->isr.id[i]))
			isr->id[isr->n++] = p->isr.id[i];
}

/* Kafka's maybeUpdateLastKnownLeader: remember the leader when the ISR
 * empties, forget it once the partition has a leader again. */
static void last_known_leader(const struct sluice_image_partition *p, struct sluice_mrec_partition_change *r)
{
	bool has_leader_after = r->has_leader ? r->leader != CTL_NO_LEADER : p->leader != CTL_NO_LEADER;
	if (r->has_isr && r->isr.n == 0 && p->leader != CTL_NO_LEADER &&
	    !(p->last_known_elr.n == 1 && p->last_known_elr.id[0] == p->leader)) {
		r->has_last_known_elr = true;
		r->last_known_elr = ids_one(p->leader);
	} else if (has_leader_after && p->last_known_elr.n > 0) {
		r->has_last_known_elr = true;
		r->last_known_elr.n = 0;
	}
}

/* Whether every member of b is in a (Kafka's Replicas.contains). */
static bool ids_contains_all(const struct sluice_mrec_ids *a, const struct sluice_mrec_ids *b)
{
	for (int32_t i = 0; i < b->n; i++)
		if (!ids_has(a, b->id[i]))
			return false;
	return true;
}

/* Kafka's completeReassignmentIfNeeded (PartitionReassignmentReplicas
 * .maybeCompleteReassignment): once the ISR, without the replicas being
 * removed, is not empty and holds every replica that stays, those go and
 * the reassignment ends. Changes *a and *isr only then. */
static void reassignment_complete(struct pc_assign *a, struct sluice_mrec_ids *isr)
{
	if (a->removing.n == 0 && a->adding.n == 0)
		return;
	struct sluice_mrec_ids isr_after = *isr, replicas_after = a->replicas;
	for (int32_t i = 0; i < a->removing.n; i++) {
		ids_remove(&isr_after, a->removing.id[i]);
		ids_remove(&replicas_after, a->removing.id[i]);
	}
	if (isr_after.n == 0 || replicas_after.n == 0 || !ids_contains_all(&isr_after, &replicas_after))
		return;
	*isr = isr_after;
	a->replicas = replicas_after;
	a->removing.n = 0;
	a->adding.n = 0;
}

/* The assignment fields of r where a differs from p (Kafka's setAssignmentChanges). */
static void assignment_changes(const struct sluice_image_partition *p, const struct pc_assign *a,
			       struct sluice_mrec_partition_change *r)
{
	if (a->replicas.n > 0 && !ids_equal(&a->replicas, &p->replicas)) {
		r->has_replicas = true;
		r->replicas = a->replicas;
	}
	if (!ids_equal(&a->removing, &p->removing)) {
		r->has_removing = true;
		r->removing = a->removing;
	}
	if (!ids_equal(&a->adding, &p->adding)) {
		r->has_adding = true;
		r->adding = a->adding;
	}
}

/* The change that rules make to partition p, in *r (topic id and partition
 * id left to the caller); false when nothing changes. */
static bool partition_build(const struct sluice_ctl *c, const struct sluice_image_partition *p,
			    const struct pc_rules *rules, struct sluice_mrec_partition_change *r)
{
	struct sluice_mrec_ids isr, elr = p->elr;
	struct pc_assign a = {rules->target_replicas ? *rules->target_replicas : p->replicas,
			      rules->target_removing ? *rules->target_removing : p->removing,
			      rules->target_adding ? *rules->target_adding : p->adding};
	memset(r, 0, sizeof *r);
	target_isr(c, p, rules, &isr);
	reassignment_complete(&a, &isr);
	populate_elr(c, p, rules->min_isr, &isr, &elr);
	bool unclean;
	int32_t leader = elect(c, p, rules, &a.replicas, &isr, &elr, &unclean);
	if (leader != p->leader) {
		if (leader != CTL_NO_LEADER && ids_has(&elr, leader)) {
			isr = ids_one(leader); /* elected from the ELR: it is the ISR now */
			ids_remove(&elr, leader);
		} else if (unclean) {
			r->has_isr = true;
			r->isr = ids_one(leader);
			if (p->leader_recovery_state != CTL_RECOVERING) {
				r->has_leader_recovery_state = true;
				r->leader_recovery_state = CTL_RECOVERING;
			}
		}
		r->has_leader = true;
		r->leader = leader;
	}
	/* Kafka's triggerLeaderEpochBumpForReplicaReassignmentIfNeeded: a
	 * replica leaving the assignment must see a new leader epoch (its
	 * fetches are fenced from then on). */
	if (!r->has_leader && !ids_contains_all(&a.replicas, &p->replicas)) {
		r->has_leader = true;
		r->leader = p->leader;
	}
	if (r->has_isr)
		elr.n = 0; /* an unclean election: nobody else is known to have the data */
	if (!ids_same_set(&elr, &p->elr)) {
		r->has_elr = true;
		r->elr = elr;
	}
	if (!r->has_isr && !ids_equal(&isr, &p->isr)) {
		r->has_isr = true;
		r->isr = isr;
	}
	last_known_leader(p, r);
	assignment_changes(p, &a, r);
	if (rules->target_lrs >= 0 && !r->has_leader_recovery_state && rules->target_lrs != p->leader_recovery_state) {
		r->has_leader_recovery_state = true;
		r->leader_recovery_state = rules->target_lrs;
	}
	return r->has_leader || r->has_isr || r->has_elr || r->has_last_known_elr || r->has_leader_recovery_state ||
	       r->has_replicas || r->has_removing || r->has_adding;
}

static void topic_rules(const struct sluice_ctl *c, const struct sluice_image_topic *t, struct pc_rules *rules)
{
	*rules = (struct pc_rules){.election = ELECT_ONLINE, .unclean_allowed = topic_unclean_allowed(c, t->name),
				   .min_isr = topic_min_isr(c, t), .target_lrs = -1};
}

/* Partition pi of t against the view: repaired (leader, ISR, ELR), or,
 * when it is right and rebalance is asked, led by its preferred replica. */
static bool partition_reconcile(const struct sluice_ctl *c, const struct sluice_image_topic *t, int32_t pi,
				const struct pc_rules *rules, bool rebalance, struct sluice_mrec_partition_change *r)
{
	const struct sluice_image_partition *p = &t->partitions[pi];
	bool changed = partition_build(c, p, rules, r);
	if (!changed && rebalance && p->replicas.n > 0 && p->leader != p->replicas.id[0]) {
		struct pc_rules pref = *rules;
		pref.election = ELECT_PREFERRED;
		changed = partition_build(c, p, &pref, r);
	}
	if (changed) {
		memcpy(r->topic_id, t->id, 16);
		r->partition_id = pi;
	}
	return changed;
}

/* Every partition against the view, a PartitionChangeRecord for each that
 * needs one. Returns false when out filled up first (repair_due is set:
 * the next tick goes on). */
static bool scan_partitions(struct sluice_ctl *c, struct sluice_ctl_out *out, bool rebalance, size_t *changed)
{
	size_t tn = sluice_image_topic_count(c->img), from = out->n;
	bool complete = true;
	for (size_t ti = 0; ti < tn && complete; ti++) {
		const struct sluice_image_topic *t = sluice_image_topic_at(c->img, ti);
		if (pending_has(c, out, PEND_REMOVED, NULL, 0, t->id, 0))
			continue;
		struct pc_rules rules;
		topic_rules(c, t, &rules);
		for (int32_t pi = 0; pi < t->partition_n; pi++) {
			struct sluice_mrec_partition_change pc;
			if (!partition_reconcile(c, t, pi, &rules, rebalance, &pc))
				continue;
			if (pending_has(c, out, PEND_CHANGED, NULL, 0, t->id, pi)) {
				c->repair_due = true; /* one change per partition and command: the next tick */
				continue;
			}
			struct sluice_mrec *r = sluice_ctl_out_add(out);
			if (!r) {
				complete = false;
				break;
			}
			r->type = SLUICE_MREC_PARTITION_CHANGE;
			r->partition_change = pc;
		}
	}
	if (!complete)
		c->repair_due = true;
	*changed = out->n - from;
	return complete; /* the caller notes the records as pending, with its own */
}

/* Whether broker id leads any partition in the image. */
static bool leads_any(const struct sluice_ctl *c, int32_t id)
{
	size_t tn = sluice_image_topic_count(c->img);
	for (size_t ti = 0; ti < tn; ti++) {
		const struct sluice_image_topic *t = sluice_image_topic_at(c->img, ti);
		for (int32_t pi = 0; pi < t->partition_n; pi++)
			if (t->partitions[pi].leader == id)
				return true;
	}
	return false;
}

/* ---- construction ------------------------------------------------------------------------------ */

struct sluice_ctl *sluice_ctl_new(const struct sluice_ctl_config *cfg, const struct sluice_image *img)
{
	assert(cfg && img);
	assert(cfg->session_timeout_ms > 0 && cfg->default_replication_factor >= 1);
	struct sluice_ctl *c = calloc(1, sizeof *c);
	if (!c)
		return NULL;
	c->cfg = *cfg;
	c->img = img;
	size_t bn = SLUICE_IMAGE_BROKERS_MAX + 1;
	c->sessions = calloc(bn, sizeof *c->sessions);
	c->view = calloc(bn, sizeof *c->view);
	c->pl.ent = calloc(bn, sizeof *c->pl.ent);
	c->pl.rack_first = calloc(bn, sizeof *c->pl.rack_first);
	c->pl.rack_len = calloc(bn, sizeof *c->pl.rack_len);
	c->pl.rack_start = calloc(bn, sizeof *c->pl.rack_start);
	c->pl.visits = calloc(bn, sizeof *c->pl.visits);
	c->order = calloc(SLUICE_ASSIGNMENT_LISTS_MAX, sizeof *c->order);
	c->pend.pid_idx = SIZE_MAX;
	if (!c->sessions || !c->view || !c->pl.ent || !c->pl.rack_first || !c->pl.rack_len || !c->pl.rack_start ||
	    !c->pl.visits || !c->order) {
		sluice_ctl_free(c);
		return NULL;
	}
	return c;
}

void sluice_ctl_free(struct sluice_ctl *c)
{
	if (!c)
		return;
	free(c->sessions);
	free(c->view);
	free(c->pl.ent);
	free(c->pl.rack_first);
	free(c->pl.rack_len);
	free(c->pl.rack_start);
	free(c->pl.visits);
	free(c->order);
	free(c->pend.slots);
	free(c->pend.broker_idx);
	free(c->cache.slots);
	free(c);
}

/* ---- broker records ------------------------------------------------------------------------------ */

/* A BrokerRegistrationChangeRecord: fenced / in_cs -1 unchanged, 0 no, 1 yes. */
static int add_registration_change(struct sluice_ctl_out *out, const struct sluice_image_broker *b, int8_t fenced,
				   int8_t in_cs)
{
	struct sluice_mrec *r = sluice_ctl_out_add(out);
	if (!r)
		return -1;
	r->type = SLUICE_MREC_BROKER_REGISTRATION_CHANGE;
	r->broker_registration_change.broker_id = b->id;
	r->broker_registration_change.broker_epoch = b->epoch;
	r->broker_registration_change.fenced = fenced;
	r->broker_registration_change.in_controlled_shutdown = in_cs;
	return 0;
}

/* ---- registration ------------------------------------------------------------------------------------ */

static int16_t registration_check(struct sluice_ctl *c, const struct sluice_ctl_registration *r, const char *cluster_id,
				  const struct sluice_image_broker *old, int64_t now_ms, char *msg, size_t msglen)
{
	if (!r->cluster_id || strcmp(r->cluster_id, cluster_id) != 0) {
		snprintf(msg, msglen, "Expected cluster ID %s, but got cluster ID %s", cluster_id,
			 r->cluster_id ? r->cluster_id : "(null)");
		return KERR_INCONSISTENT_CLUSTER_ID;
	}
	if (r->broker_id < 0) {
		snprintf(msg, msglen, "Invalid broker id %d", r->broker_id);
		return KERR_INVALID_REGISTRATION;
	}
	if (r->rack && strlen(r->rack) > SLUICE_BROKER_RACK_MAX) {
		snprintf(msg, msglen, "Rack of broker %d is longer than %d bytes", r->broker_id, SLUICE_BROKER_RACK_MAX);
		return KERR_INVALID_REGISTRATION;
	}
	for (int32_t i = 0; i < r->endpoint_n; i++)
		if (strnlen(r->endpoints[i].name, sizeof r->endpoints[i].name) == sizeof r->endpoints[i].name ||
		    strnlen(r->endpoints[i].host, sizeof r->endpoints[i].host) == sizeof r->endpoints[i].host) {
			snprintf(msg, msglen, "Listener %d of broker %d: name or host too long", i, r->broker_id);
			return KERR_INVALID_REGISTRATION;
		}
	if (!old && sluice_image_broker_count(c->img) >= SLUICE_IMAGE_BROKERS_MAX) {
		snprintf(msg, msglen, "The cluster already has the most brokers it can hold (%d)", SLUICE_IMAGE_BROKERS_MAX);
		return KERR_INVALID_REGISTRATION;
	}
	if (old && memcmp(old->incarnation_id, r->incarnation_id, 16) != 0 && !old->fenced &&
	    r->previous_broker_epoch != old->epoch) {
		/* Kafka's hasValidSession: an unfenced broker heard from within the session timeout. */
		const struct ctl_session *s = session_get(c, old->id, old->epoch, now_ms);
		if (session_alive(s, c->cfg.session_timeout_ms, now_ms)) {
			snprintf(msg, msglen, "Another broker is registered with that broker id.");
			return KERR_DUPLICATE_BROKER_REGISTRATION;
		}
	}
	return 0;
}

static void registration_record(struct sluice_mrec *rec, const struct sluice_ctl_registration *r, int64_t epoch)
{
	struct sluice_mrec_register_broker *rb = &rec->register_broker;
	rec->type = SLUICE_MREC_REGISTER_BROKER;
	rb->broker_id = r->broker_id;
	memcpy(rb->incarnation_id, r->incarnation_id, 16);
	rb->broker_epoch = epoch;
	rb->endpoint_n = r->endpoint_n;
	memcpy(rb->endpoints, r->endpoints, sizeof r->endpoints[0] * (size_t)r->endpoint_n);
	if (r->rack)
		memcpy(rb->rack, r->rack, strlen(r->rack) + 1);
	rb->fenced = true;
	rb->in_controlled_shutdown = false;
}

int16_t sluice_ctl_register(struct sluice_ctl *c, const struct sluice_ctl_registration *r, const char *cluster_id,
			    int64_t now_ms, struct sluice_ctl_out *out, int64_t *epoch_out, char *msg, size_t msglen)
{
	assert(c && r && cluster_id && out && epoch_out);
	assert(r->endpoint_n >= 0 && r->endpoint_n <= SLUICE_MREC_LISTENERS_MAX);
	pending_sync(c, out);
	msg[0] = 0;
	*epoch_out = -1;
	const struct sluice_image_broker *old = r->broker_id >= 0 ? sluice_image_broker(c->img, r->broker_id) : NULL;
	int16_t err = registration_check(c, r, cluster_id, old, now_ms, msg, msglen);
	if (err)
		return err;
	size_t from = out->n;
	int64_t epoch = next_offset(c, out);
	struct sluice_mrec *rec = sluice_ctl_out_add(out);
	if (!rec) {
		snprintf(msg, msglen, "No room for the registration in this controller command");
		return KERR_REQUEST_TIMED_OUT;
	}
	registration_record(rec, r, epoch);
	/* A new incarnation that did not shut down cleanly may have lost what
	 * it had not flushed: it leaves every ISR and ELR (Kafka's
	 * handleBrokerUncleanShutdown); a clean one stays eligible. */
	bool new_incarnation = !old || memcmp(old->incarnation_id, r->incarnation_id, 16) != 0;
	bool clean = old && r->previous_broker_epoch == old->epoch;
	view_load(c, out);
	/* Placement is not part of a registration: the rack is not needed (and
	 * out's records move when out grows). */
	struct ctl_bview *v = view_put(c, r->broker_id, "");
	if (v) {
		v->fenced = true;
		v->in_cs = false;
		v->unclean = new_incarnation && !clean;
	}
	size_t changed = 0;
	if (old)
		scan_partitions(c, out, false, &changed);
	pending_note(c, out, from);
	struct ctl_session *s = session_get(c, r->broker_id, epoch, now_ms);
	s->last_contact_ms = now_ms;
	*epoch_out = epoch;
	SLOG_INFO("ctl", "broker %d registered with epoch %" PRId64 " (%s%s), %zu partition change(s)", r->broker_id,
		  epoch, !old ? "new" : new_incarnation ? "new incarnation" : "same incarnation",
		  old && new_incarnation ? (clean ? ", clean shutdown" : ", unclean shutdown") : "", changed);
	return 0;
}

/* ---- heartbeats --------------------------------------------------------------------------------------- */

enum bstate { BS_FENCED, BS_UNFENCED, BS_CONTROLLED_SHUTDOWN, BS_SHUTDOWN_NOW };

/* The lowest metadata offset active brokers other than id reported. */
static int64_t lowest_active_offset(struct sluice_ctl *c, int32_t id)
{
	int64_t low = INT64_MAX;
	for (size_t i = 0; i < c->session_n; i++) {
		const struct ctl_session *s = &c->sessions[i];
		const struct sluice_image_broker *b = sluice_image_broker(c->img, s->id);
		if (s->id == id || !b || b->fenced || b->in_controlled_shutdown || s->epoch != b->epoch)
			continue;
		if (s->metadata_offset < low)
			low = s->metadata_offset;
	}
	return low;
}

/* Kafka's BrokerHeartbeatManager.calculateNextBrokerState. */
static enum bstate next_state(struct sluice_ctl *c, const struct sluice_image_broker *b, const struct ctl_session *s,
			      const struct sluice_ctl_heartbeat *h, enum bstate cur)
{
	switch (cur) {
	case BS_FENCED:
		if (h->want_shutdown)
			return BS_SHUTDOWN_NOW;
		if (!h->want_fence && h->metadata_offset >= b->epoch)
			return BS_UNFENCED;
		return BS_FENCED;
	case BS_UNFENCED:
		if (h->want_fence)
			return h->want_shutdown ? BS_SHUTDOWN_NOW : BS_FENCED;
		if (h->want_shutdown)
			return leads_any(c, b->id) ? BS_CONTROLLED_SHUTDOWN : BS_SHUTDOWN_NOW;
		return BS_UNFENCED;
	case BS_CONTROLLED_SHUTDOWN:
		if (leads_any(c, b->id))
			return BS_CONTROLLED_SHUTDOWN;
		/* Shut down once every other active broker knows who leads instead. */
		return s->shutdown_offset <= lowest_active_offset(c, b->id) ? BS_SHUTDOWN_NOW : BS_CONTROLLED_SHUTDOWN;
	case BS_SHUTDOWN_NOW:
		break;
	}
	return BS_SHUTDOWN_NOW;
}

/* The records of a move from cur to next; -1 when out had no room for the broker record. */
static int heartbeat_records(struct sluice_ctl *c, const struct sluice_image_broker *b, struct ctl_session *s,
			     enum bstate cur, enum bstate next, struct sluice_ctl_out *out)
{
	size_t from = out->n;
	view_load(c, out);
	struct ctl_bview *v = view_find(c, b->id);
	assert(v);
	int rc = 0;
	if (next == BS_UNFENCED && cur == BS_FENCED) {
		rc = add_registration_change(out, b, 0, b->in_controlled_shutdown ? 0 : -1);
		v->fenced = v->in_cs = false;
		c->rebalance_due = c->cfg.auto_leader_rebalance;
	} else if ((next == BS_FENCED || next == BS_SHUTDOWN_NOW) && !b->fenced) {
		rc = add_registration_change(out, b, 1, -1);
		v->fenced = true;
	} else if (next == BS_CONTROLLED_SHUTDOWN) {
		if (!b->in_controlled_shutdown)
			rc = add_registration_change(out, b, -1, 1);
		v->in_cs = true;
	} else {
		return 0;
	}
	if (rc < 0)
		return -1;
	size_t changed = 0;
	scan_partitions(c, out, false, &changed);
	if (next == BS_CONTROLLED_SHUTDOWN && out->n > from)
		s->shutdown_offset = next_offset(c, out) - 1; /* the last record that moves its leaderships */
	SLOG_INFO("ctl", "broker %d: %s, %zu partition change(s)", b->id,
		  next == BS_UNFENCED ? "unfenced" : next == BS_CONTROLLED_SHUTDOWN ? "in controlled shutdown" : "fenced",
		  changed);
	return 0;
}

int16_t sluice_ctl_heartbeat(struct sluice_ctl *c, const struct sluice_ctl_heartbeat *h, int64_t now_ms,
			     struct sluice_ctl_out *out, struct sluice_ctl_heartbeat_result *res)
{
	assert(c && h && out && res);
	pending_sync(c, out);
	memset(res, 0, sizeof *res);
	const struct sluice_image_broker *b = sluice_image_broker(c->img, h->broker_id);
	if (!b)
		return KERR_BROKER_ID_NOT_REGISTERED;
	if (h->broker_epoch != b->epoch)
		return KERR_STALE_BROKER_EPOCH;
	struct ctl_session *s = session_get(c, b->id, b->epoch, now_ms);
	enum bstate cur = b->fenced ? BS_FENCED : b->in_controlled_shutdown ? BS_CONTROLLED_SHUTDOWN : BS_UNFENCED;
	enum bstate next = next_state(c, b, s, h, cur);
	size_t from = out->n;
	if (heartbeat_records(c, b, s, cur, next, out) < 0) {
		pending_rollback(c, out, from);
		return KERR_REQUEST_TIMED_OUT; /* no room in this command: the broker retries */
	}
	pending_note(c, out, from);
	s->last_contact_ms = now_ms;
	s->metadata_offset = h->metadata_offset;
	res->is_caught_up = h->metadata_offset >= b->epoch;
	res->is_fenced = next == BS_FENCED || next == BS_SHUTDOWN_NOW;
	res->should_shutdown = next == BS_SHUTDOWN_NOW;
	return 0;
}

/* ---- periodic duties ---------------------------------------------------------------------------------- */

/* Fence every unfenced broker whose session expired; returns how many. */
static size_t fence_expired(struct sluice_ctl *c, int64_t now_ms, struct sluice_ctl_out *out)
{
	size_t fenced = 0;
	size_t bn = sluice_image_broker_count(c->img);
	for (size_t i = 0; i < bn; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(c->img, i);
		if (b->fenced)
			continue;
		const struct ctl_session *s = session_get(c, b->id, b->epoch, now_ms);
		if (session_alive(s, c->cfg.session_timeout_ms, now_ms))
			continue;
		if (add_registration_change(out, b, 1, -1) < 0) {
			c->repair_due = true;
			break;
		}
		view_find(c, b->id)->fenced = true;
		fenced++;
		SLOG_WARN("ctl", "broker %d fenced: no heartbeat for %" PRId64 " ms (broker.session.timeout.ms %" PRId64 ")",
			  b->id, now_ms - s->last_contact_ms, c->cfg.session_timeout_ms);
	}
	return fenced;
}

void sluice_ctl_tick(struct sluice_ctl *c, int64_t now_ms, struct sluice_ctl_out *out)
{
	assert(c && out);
	pending_sync(c, out);
	size_t from = out->n;
	sessions_prune(c);
	view_load(c, out);
	size_t fenced = fence_expired(c, now_ms, out);
	if (c->cfg.auto_leader_rebalance && now_ms - c->rebalance_last_ms >= CTL_IMBALANCE_CHECK_INTERVAL_MS)
		c->rebalance_due = true;
	bool rebalance = c->cfg.auto_leader_rebalance && c->rebalance_due;
	if (fenced || c->repair_due || rebalance) {
		c->repair_due = false;
		size_t changed = 0;
		bool complete = scan_partitions(c, out, rebalance, &changed);
		if (complete && rebalance) {
			c->rebalance_due = false;
			c->rebalance_last_ms = now_ms;
		}
		if (changed)
			SLOG_INFO("ctl", "tick: %zu broker(s) fenced, %zu partition change(s)%s", fenced, changed,
				  complete ? "" : ", more on the next tick");
	}
	pending_note(c, out, from);
}

int64_t sluice_ctl_next_deadline_ms(const struct sluice_ctl *c, int64_t now_ms)
{
	assert(c);
	if (c->repair_due || (c->cfg.auto_leader_rebalance && c->rebalance_due))
		return 0;
	bool any = c->cfg.auto_leader_rebalance;
	int64_t next = any ? c->rebalance_last_ms + CTL_IMBALANCE_CHECK_INTERVAL_MS - now_ms : INT64_MAX;
	size_t bn = sluice_image_broker_count(c->img);
	for (size_t i = 0; i < bn; i++) {
		const struct sluice_image_broker *b = sluice_image_broker_at(c->img, i);
		if (b->fenced)
			continue;
		const struct ctl_session *s = session_find(c, b->id);
		/* A session expires once now passes last contact + timeout; a
		 * broker without one gets it on the next tick. */
		int64_t d = s && s->epoch == b->epoch ? s->last_contact_ms + c->cfg.session_timeout_ms + 1 - now_ms : 0;
		if (d < next)
			next = d;
		any = true;
	}
	if (!any)
		return -1;
	return next < 0 ? 0 : next;
}

/* ---- replica placement ------------------------------------------------------------------------------ */

/* Kafka's striped placement, in its own form: the racks take turns (partition
 * p starts at the next rack, so leaders go round the racks), each rack hands
 * out its brokers in turn (so leaders and followers go round the brokers of
 * a rack), and a partition takes a second broker of a rack only once every
 * rack has given one. Only active brokers (unfenced, not shutting down) get
 * replicas. The start offsets come from the topic name: deterministic, and
 * different from topic to topic. */
static int pl_entry_cmp(const void *a, const void *b)
{
	const struct pl_entry *x = a, *y = b;
	int r = strcmp(x->rack, y->rack);
	return r ? r : (x->id > y->id) - (x->id < y->id);
}

/* Load the active brokers; returns how many. */
static int32_t placer_load(struct sluice_ctl *c, const struct sluice_ctl_out *out, const char *topic)
{
	struct placer *pl = &c->pl;
	view_load(c, out);
	pl->broker_n = 0;
	for (size_t i = 0; i < c->view_n; i++)
		if (view_active(c, c->view[i].id))
			pl->ent[pl->broker_n++] = (struct pl_entry){.rack = c->view[i].rack, .id = c->view[i].id};
	qsort(pl->ent, (size_t)pl->broker_n, sizeof *pl->ent, pl_entry_cmp);
	uint64_t seed = name_hash(topic, strlen(topic));
	pl->rack_n = 0;
	for (int32_t i = 0; i < pl->broker_n; i++) {
		if (i == 0 || strcmp(pl->ent[i].rack, pl->ent[i - 1].rack) != 0) {
			pl->rack_first[pl->rack_n] = i;
			pl->rack_len[pl->rack_n] = 0;
			pl->visits[pl->rack_n] = 0;
			pl->rack_n++;
		}
		pl->rack_len[pl->rack_n - 1]++;
	}
	for (int32_t k = 0; k < pl->rack_n; k++) {
		uint64_t h = fnv_add(seed, &k, sizeof k);
		pl->rack_start[k] = (int32_t)(h % (uint64_t)pl->rack_len[k]);
	}
	pl->rack_offset = pl->rack_n ? (int32_t)((seed >> 7) % (uint64_t)pl->rack_n) : 0;
	return pl->broker_n;
}

/* The replicas of partition p, preferred leader first. */
static void placer_place(struct placer *pl, int32_t p, int32_t rf, struct sluice_mrec_ids *out)
{
	assert(rf >= 1 && rf <= pl->broker_n && rf <= SLUICE_REPLICAS_MAX && p >= 0);
	int64_t racks = pl->rack_n, start = ((int64_t)pl->rack_offset + p) % racks;
	int32_t touched[SLUICE_REPLICAS_MAX], touched_n = 0;
	out->n = 0;
	for (int64_t step = 0; out->n < rf; step++) {
		assert(step < racks * ((int64_t)pl->broker_n + 1)); /* rf <= brokers: every step picks or skips a spent rack */
		int32_t k = (int32_t)((start + step) % racks);
		if (pl->visits[k] >= pl->rack_len[k])
			continue;
		if (pl->visits[k] == 0)
			touched[touched_n++] = k;
		int64_t idx = ((int64_t)pl->rack_start[k] + p / racks + pl->visits[k]) % pl->rack_len[k];
		pl->visits[k]++;
		out->id[out->n++] = pl->ent[pl->rack_first[k] + idx].id;
	}
	for (int32_t i = 0; i < touched_n; i++)
		pl->visits[touched[i]] = 0;
}

static int16_t no_room(const struct sluice_ctl_out *out, size_t needed, const char *what, char *msg, size_t msglen)
{
	if (needed > out->cap_max) {
		snprintf(msg, msglen, "%s needs %zu metadata records, more than one controller command holds (%zu)", what,
			 needed, out->cap_max);
		return KERR_INVALID_PARTITIONS;
	}
	snprintf(msg, msglen, "%s does not fit in this controller command with the changes before it; retry", what);
	return KERR_THROTTLING_QUOTA_EXCEEDED;
}

/* A manual assignment's list (checked): its brokers are the replicas, the
 * active ones the ISR, the first of those the leader (Kafka's
 * buildPartitionRegistration over the active replicas). */
static void assigned_replicas(const struct sluice_ctl *c, const struct sluice_assignment *a, int32_t list,
			      struct sluice_mrec_partition *pr)
{
	int32_t len = sluice_assignment_len(a, list);
	const int32_t *ids = sluice_assignment_list(a, list);
	assert(len >= 1 && len <= SLUICE_REPLICAS_MAX);
	pr->replicas.n = 0;
	pr->isr.n = 0;
	for (int32_t i = 0; i < len; i++) {
		pr->replicas.id[pr->replicas.n++] = ids[i];
		if (view_active(c, ids[i]))
			pr->isr.id[pr->isr.n++] = ids[i];
	}
	assert(pr->isr.n >= 1); /* sluice_assignment_check wants an active broker in every list */
	pr->leader = pr->isr.id[0];
}

/* PartitionRecords for partitions [first, count) of topic id: placed by
 * the loaded placer, or (a non-NULL) as its lists say, partition p by
 * list c->order[p - first]. */
static int add_partition_records(struct sluice_ctl *c, struct sluice_ctl_out *out, const uint8_t id[16],
				 int32_t first, int32_t count, int32_t rf, const struct sluice_assignment *a)
{
	assert(!a || a->n == count - first);
	for (int32_t p = first; p < count; p++) {
		struct sluice_mrec *r = sluice_ctl_out_add(out);
		if (!r)
			return -1;
		r->type = SLUICE_MREC_PARTITION;
		struct sluice_mrec_partition *pr = &r->partition;
		pr->partition_id = p;
		memcpy(pr->topic_id, id, 16);
		if (a) {
			assigned_replicas(c, a, c->order[p - first], pr);
		} else {
			placer_place(&c->pl, p, rf, &pr->replicas);
			pr->isr = pr->replicas;
			pr->leader = pr->replicas.id[0];
		}
		pr->leader_recovery_state = CTL_RECOVERED;
		pr->leader_epoch = 0;
		pr->partition_epoch = 0;
	}
	return 0;
}

/* ---- topics ----------------------------------------------------------------------------------------- */

/* An assignment that names partitions (an empty one places them as none does). */
static bool manual(const struct sluice_assignment *a)
{
	return a && a->n > 0;
}

static bool id_zero(const uint8_t id[16])
{
	static const uint8_t zero[16];
	return memcmp(id, zero, 16) == 0;
}

static int16_t check_partition_count(int32_t parts, char *msg, size_t msglen)
{
	if (parts <= 0) {
		snprintf(msg, msglen, "Number of partitions was set to an invalid non-positive value.");
		return KERR_INVALID_PARTITIONS;
	}
	if (parts > SLUICE_PARTITIONS_PER_TOPIC_MAX) {
		snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", parts, SLUICE_PARTITIONS_PER_TOPIC_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	return 0;
}

/* The replication factor asked for against the rules, the brokers aside. */
static int16_t check_replication_factor(int32_t rf, char *msg, size_t msglen)
{
	if (rf <= 0) {
		snprintf(msg, msglen, "Replication factor must be larger than 0, or -1 to use the default value.");
		return KERR_INVALID_REPLICATION_FACTOR;
	}
	if (rf > SLUICE_REPLICAS_MAX) {
		snprintf(msg, msglen, "Replication factor %d is above the limit %d.", rf, SLUICE_REPLICAS_MAX);
		return KERR_INVALID_REPLICATION_FACTOR;
	}
	return 0;
}

/* The same, and enough active brokers to place it (the placer loaded). */
static int16_t check_replication(const struct sluice_ctl *c, int32_t rf, char *msg, size_t msglen)
{
	int16_t e = check_replication_factor(rf, msg, msglen);
	if (e)
		return e;
	if (rf > c->pl.broker_n) {
		snprintf(msg, msglen, "Unable to replicate the partition %d time(s): The target replication factor of %d "
			 "cannot be reached because only %d broker(s) are registered.", rf, rf, c->pl.broker_n);
		return KERR_INVALID_REPLICATION_FACTOR;
	}
	return 0;
}

static int16_t check_configs(const struct sluice_topic_config *configs, int32_t n, char *msg, size_t msglen)
{
	int16_t e = sluice_topic_configs_check(configs, n, msg, msglen);
	if (e)
		return e;
	for (int32_t i = 0; i < n; i++)
		for (int32_t j = 0; j < i; j++)
			if (!strcmp(configs[i].key, configs[j].key)) {
				snprintf(msg, msglen, "Duplicate config key %s", configs[i].key);
				return KERR_INVALID_CONFIG;
			}
	return 0;
}

/* The name is free (existing topics and those created earlier in out), and the limits hold. */
static int16_t check_new_topic(struct sluice_ctl *c, const struct sluice_ctl_out *out, const char *name, size_t len,
			       int32_t parts, char *msg, size_t msglen)
{
	if (cache_refresh(c) < 0) {
		snprintf(msg, msglen, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	const struct sluice_image_topic *t = cache_colliding(c, name, len);
	bool pending = pending_has(c, out, PEND_NAME, name, len, NULL, 0);
	if ((t && strlen(t->name) == len && !memcmp(t->name, name, len)) || (pending && !t)) {
		snprintf(msg, msglen, "Topic '%.*s' already exists.", (int)len, name);
		return KERR_TOPIC_ALREADY_EXISTS;
	}
	if (t) {
		snprintf(msg, msglen, "Topic '%.*s' collides with existing topic: %s", (int)len, name, t->name);
		return KERR_INVALID_TOPIC_EXCEPTION;
	}
	if (sluice_image_topic_count(c->img) + (size_t)c->pend.topics >= SLUICE_TOPICS_MAX) {
		snprintf(msg, msglen, "Topic limit %d reached.", SLUICE_TOPICS_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	if (c->cache.partitions + c->pend.partitions + parts > SLUICE_IMAGE_PARTITIONS_MAX) {
		snprintf(msg, msglen, "The cluster would have more than %d partitions.", SLUICE_IMAGE_PARTITIONS_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	return 0;
}

/* The topic id: the one given (adoption), else a new random one (version 4 UUID). */
static int16_t choose_topic_id(struct sluice_ctl *c, const struct sluice_ctl_out *out, const uint8_t *want,
			       uint8_t id[16], char *msg, size_t msglen)
{
	if (want) {
		memcpy(id, want, 16);
		const struct sluice_image_topic *o = sluice_image_topic_by_id(c->img, id);
		if (id_zero(id)) {
			snprintf(msg, msglen, "The topic id must not be zero.");
			return KERR_INVALID_REQUEST;
		}
		if (o || pending_has(c, out, PEND_TOPIC_ID, NULL, 0, id, 0)) {
			snprintf(msg, msglen, "The topic id is already used by topic %s.", o ? o->name : "(being created)");
			return KERR_INCONSISTENT_TOPIC_ID;
		}
		return 0;
	}
	for (int i = 0; i < CTL_TOPIC_ID_TRIES_MAX; i++) {
		if (getrandom(id, 16, 0) != 16) {
			snprintf(msg, msglen, "no random topic id: %s", strerror(errno));
			return KERR_UNKNOWN_SERVER_ERROR;
		}
		id[6] = (uint8_t)((id[6] & 0x0f) | 0x40);
		id[8] = (uint8_t)((id[8] & 0x3f) | 0x80);
		if (!id_zero(id) && !sluice_image_topic_by_id(c->img, id) && !pending_has(c, out, PEND_TOPIC_ID, NULL, 0, id, 0))
			return 0;
	}
	snprintf(msg, msglen, "no unused random topic id");
	return KERR_UNKNOWN_SERVER_ERROR;
}

/* TopicRecord, its ConfigRecords, its PartitionRecords (room checked before). */
static int add_topic_records(struct sluice_ctl *c, struct sluice_ctl_out *out, const char *name, size_t len,
			     const uint8_t id[16], int32_t parts, int32_t rf, const struct sluice_ctl_new_topic *t)
{
	const struct sluice_topic_config *configs = t->configs;
	int32_t config_n = t->config_n;
	struct sluice_mrec *r = sluice_ctl_out_add(out);
	if (!r)
		return -1;
	r->type = SLUICE_MREC_TOPIC;
	memcpy(r->topic.name, name, len);
	memcpy(r->topic.topic_id, id, 16);
	for (int32_t i = 0; i < config_n; i++) {
		if (!(r = sluice_ctl_out_add(out)))
			return -1;
		r->type = SLUICE_MREC_CONFIG;
		r->config.resource_type = SLUICE_MREC_RESOURCE_TOPIC;
		memcpy(r->config.resource_name, name, len);
		snprintf(r->config.name, sizeof r->config.name, "%s", configs[i].key);
		snprintf(r->config.value, sizeof r->config.value, "%s", configs[i].value);
	}
	return add_partition_records(c, out, id, 0, parts, rf, manual(t->assignment) ? t->assignment : NULL);
}

static int16_t check_name(const char *name, size_t len, char *msg, size_t msglen)
{
	if (!sluice_topic_name_valid(name, len)) {
		snprintf(msg, msglen, "Topic name is invalid: '%.*s' (legal characters are [a-zA-Z0-9._-], length 1-249)",
			 (int)(len > SLUICE_TOPIC_NAME_MAX ? SLUICE_TOPIC_NAME_MAX : len), name);
		return KERR_INVALID_TOPIC_EXCEPTION;
	}
	if (len == strlen(CTL_METADATA_TOPIC) && !memcmp(name, CTL_METADATA_TOPIC, len)) {
		snprintf(msg, msglen, "Creation of internal topic %s is prohibited.", CTL_METADATA_TOPIC);
		return KERR_INVALID_REQUEST;
	}
	return 0;
}

static bool asg_registered(const void *arg, int32_t id)
{
	return view_find(arg, id) != NULL;
}

static bool asg_active(const void *arg, int32_t id)
{
	return view_active(arg, id);
}

/* A manual assignment against Kafka's rules and the view of the brokers
 * (loaded with the placer); c->order gets each partition's list. */
static int16_t check_assignment(struct sluice_ctl *c, const struct sluice_assignment *a, int32_t rf,
				int32_t first_partition, char *msg, size_t msglen)
{
	const struct sluice_assignment_brokers brokers = {asg_registered, asg_active, c};
	return sluice_assignment_check(a, rf, first_partition, &brokers, c->order, msg, msglen);
}

/* Everything but the name (checked first) and the id; the placer is
 * loaded. *parts and *rf: what the topic gets. */
static int16_t create_check(struct sluice_ctl *c, const struct sluice_ctl_out *out, const char *name,
			    const struct sluice_ctl_new_topic *t, int32_t *parts, int32_t *rf, char *msg, size_t msglen)
{
	const struct sluice_assignment *a = t->assignment;
	int16_t e;
	if (manual(a)) {
		*parts = a->n;
		*rf = sluice_assignment_len(a, 0);
		e = sluice_assignment_check_counts(t->partitions, t->replication_factor, msg, msglen);
		if (!e)
			e = check_partition_count(a->n, msg, msglen);
		if (!e)
			e = check_assignment(c, a, -1, 0, msg, msglen);
		if (!e)
			e = check_replication_factor(*rf, msg, msglen);
	} else {
		*parts = t->partitions == -1 ? c->cfg.default_partitions : t->partitions;
		*rf = t->replication_factor == -1 ? c->cfg.default_replication_factor : t->replication_factor;
		e = check_partition_count(*parts, msg, msglen);
		if (!e)
			e = check_replication(c, *rf, msg, msglen);
	}
	if (!e)
		e = check_configs(t->configs, t->config_n, msg, msglen);
	if (!e)
		e = check_new_topic(c, out, name, t->name_len, *parts, msg, msglen);
	return e;
}

int16_t sluice_ctl_create_topic_spec(struct sluice_ctl *c, const struct sluice_ctl_new_topic *t, bool validate_only,
				     struct sluice_ctl_out *out, uint8_t id_out[16], int32_t *partitions_out, char *msg,
				     size_t msglen)
{
	assert(c && t && t->name && out && id_out && partitions_out && msg);
	assert(t->config_n >= 0 && (t->configs || t->config_n == 0));
	pending_sync(c, out);
	msg[0] = 0;
	/* id and id_out may be the same bytes (the server decodes the wanted id
	 * into the entry that later carries the answer): read it before clearing. */
	uint8_t wanted[16];
	const uint8_t *id = NULL;
	if (t->id) {
		memcpy(wanted, t->id, 16);
		id = wanted;
	}
	memset(id_out, 0, 16);
	*partitions_out = 0;
	int16_t e = check_name(t->name, t->name_len, msg, msglen);
	if (e)
		return e;
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	memcpy(topic, t->name, t->name_len);
	topic[t->name_len] = 0;
	placer_load(c, out, topic);
	int32_t parts, rf;
	e = create_check(c, out, topic, t, &parts, &rf, msg, msglen);
	uint8_t tid[16];
	if (!e)
		e = choose_topic_id(c, out, id, tid, msg, msglen);
	if (e)
		return e;
	*partitions_out = parts;
	if (validate_only) {
		if (id)
			memcpy(id_out, id, 16);
		return 0;
	}
	size_t needed = 1 + (size_t)t->config_n + (size_t)parts;
	if (out->cap_max - out->n < needed)
		return no_room(out, needed, "The topic", msg, msglen);
	size_t from = out->n;
	if (add_topic_records(c, out, topic, t->name_len, tid, parts, rf, t) < 0) {
		pending_rollback(c, out, from);
		snprintf(msg, msglen, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	pending_note(c, out, from);
	c->pend.topics++;
	c->pend.partitions += parts;
	memcpy(id_out, tid, 16);
	SLOG_INFO("ctl", "topic %s: %d partition(s), replication factor %d%s", topic, parts, rf,
		  manual(t->assignment) ? ", assigned by the request" : "");
	return 0;
}

int16_t sluice_ctl_create_topic(struct sluice_ctl *c, const char *name, size_t name_len, int32_t partitions,
				int32_t replication_factor, const struct sluice_topic_config *configs, int32_t config_n,
				const uint8_t *id, bool validate_only, struct sluice_ctl_out *out, uint8_t id_out[16],
				int32_t *partitions_out, char *msg, size_t msglen)
{
	const struct sluice_ctl_new_topic t = {.name = name, .name_len = name_len, .partitions = partitions,
					       .replication_factor = replication_factor, .configs = configs,
					       .config_n = config_n, .id = id};
	return sluice_ctl_create_topic_spec(c, &t, validate_only, out, id_out, partitions_out, msg, msglen);
}

int16_t sluice_ctl_delete_topic(struct sluice_ctl *c, const char *name, size_t name_len, const uint8_t *id,
				struct sluice_ctl_out *out, uint8_t id_out[16], char *msg, size_t msglen)
{
	assert(c && out && id_out && msg);
	pending_sync(c, out);
	msg[0] = 0;
	memset(id_out, 0, 16);
	bool by_id = id && !id_zero(id);
	if (!by_id && !name) {
		snprintf(msg, msglen, "Neither topic name nor topic id given.");
		return KERR_INVALID_REQUEST;
	}
	const struct sluice_image_topic *t = by_id ? sluice_image_topic_by_id(c->img, id)
						   : sluice_image_topic_by_name(c->img, name, name_len);
	if (t && pending_has(c, out, PEND_REMOVED, NULL, 0, t->id, 0))
		t = NULL;
	if (!t && by_id) {
		snprintf(msg, msglen, "This server does not host this topic ID.");
		return KERR_UNKNOWN_TOPIC_ID;
	}
	if (!t) {
		snprintf(msg, msglen, "This server does not host this topic-partition.");
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	}
	size_t from = out->n;
	struct sluice_mrec *r = sluice_ctl_out_add(out);
	if (!r)
		return no_room(out, 1, "The deletion", msg, msglen);
	r->type = SLUICE_MREC_REMOVE_TOPIC;
	memcpy(r->remove_topic.topic_id, t->id, 16);
	pending_note(c, out, from);
	memcpy(id_out, t->id, 16);
	SLOG_INFO("ctl", "topic %s deleted", t->name);
	return 0;
}

static int16_t grow_check(struct sluice_ctl *c, const struct sluice_ctl_out *out, const struct sluice_image_topic *t,
			  int32_t count, const struct sluice_assignment *a, char *msg, size_t msglen)
{
	if (pending_has(c, out, PEND_GROWN, NULL, 0, t->id, 0)) {
		snprintf(msg, msglen, "Duplicate topic %s in the request.", t->name);
		return KERR_INVALID_REQUEST;
	}
	if (count <= t->partition_n) {
		if (count == t->partition_n)
			snprintf(msg, msglen, "Topic already has %d partitions.", t->partition_n);
		else
			snprintf(msg, msglen, "Topic currently has %d partitions, which is higher than the requested %d.",
				 t->partition_n, count);
		return KERR_INVALID_PARTITIONS;
	}
	int16_t e = check_partition_count(count, msg, msglen);
	if (e)
		return e;
	if (cache_refresh(c) < 0) {
		snprintf(msg, msglen, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	if (c->cache.partitions + c->pend.partitions + (count - t->partition_n) > SLUICE_IMAGE_PARTITIONS_MAX) {
		snprintf(msg, msglen, "The cluster would have more than %d partitions.", SLUICE_IMAGE_PARTITIONS_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	/* The new partitions take the replication factor of the existing ones (Kafka). */
	assert(t->partition_n > 0);
	int32_t rf = t->partitions[0].replicas.n;
	if (!manual(a))
		return check_replication(c, rf, msg, msglen);
	int32_t additional = count - t->partition_n;
	if (a->n != additional) {
		snprintf(msg, msglen, "Attempted to add %d additional partition(s), but only %d assignment(s) were specified.",
			 additional, a->n);
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	assert(!a->partition); /* CreatePartitions' lists have no index: they are the new partitions in order */
	return check_assignment(c, a, rf, t->partition_n, msg, msglen);
}

int16_t sluice_ctl_create_partitions(struct sluice_ctl *c, const char *name, size_t name_len, int32_t count,
				     bool validate_only, struct sluice_ctl_out *out, char *msg, size_t msglen)
{
	return sluice_ctl_create_partitions_assigned(c, name, name_len, count, NULL, validate_only, out, msg, msglen);
}

int16_t sluice_ctl_create_partitions_assigned(struct sluice_ctl *c, const char *name, size_t name_len, int32_t count,
					      const struct sluice_assignment *a, bool validate_only,
					      struct sluice_ctl_out *out, char *msg, size_t msglen)
{
	assert(c && name && out && msg);
	pending_sync(c, out);
	msg[0] = 0;
	const struct sluice_image_topic *t = sluice_image_topic_by_name(c->img, name, name_len);
	if (t && pending_has(c, out, PEND_REMOVED, NULL, 0, t->id, 0))
		t = NULL;
	if (!t) {
		snprintf(msg, msglen, "Topic '%.*s' does not exist.",
			 (int)(name_len > SLUICE_TOPIC_NAME_MAX ? SLUICE_TOPIC_NAME_MAX : name_len), name);
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	}
	placer_load(c, out, t->name);
	int16_t e = grow_check(c, out, t, count, a, msg, msglen);
	if (e || validate_only)
		return e;
	size_t needed = (size_t)(count - t->partition_n);
	if (out->cap_max - out->n < needed)
		return no_room(out, needed, "The new partitions", msg, msglen);
	size_t from = out->n;
	if (add_partition_records(c, out, t->id, t->partition_n, count, t->partitions[0].replicas.n,
				  manual(a) ? a : NULL) < 0) {
		pending_rollback(c, out, from);
		snprintf(msg, msglen, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	pending_note(c, out, from);
	c->pend.partitions += count - t->partition_n;
	SLOG_INFO("ctl", "topic %s: %d -> %d partitions%s", t->name, t->partition_n, count,
		  manual(a) ? ", assigned by the request" : "");
	return 0;
}

/* ---- configs ---------------------------------------------------------------------------------------- */

static bool parse_int64(const char *v, int64_t *out)
{
	char *end;
	errno = 0;
	long long x = strtoll(v, &end, 10);
	*out = x;
	return *v && !*end && !errno;
}

/* One config's outcome: delete the override, or set it to value. */
struct cfg_new {
	const char *name;
	bool del;
	char value[SLUICE_MREC_CONFIG_VALUE_MAX + 1];
};

struct cfg_ctx {
	struct sluice_ctl *c;
	int8_t type;
	const char *resource;
	bool per_broker_resource; /* a broker id, not the cluster default */
	size_t value_max;         /* the longest value the resource keeps */
	struct cfg_new *v;
	size_t n, cap;
	int32_t overrides; /* the resource's overrides once the changes apply */
};

static const char *config_current(const struct cfg_ctx *x, const char *name)
{
	return sluice_image_config(x->c->img, x->type, x->resource, name);
}

/* A list value with item added (APPEND) or removed (SUBTRACT), in dst. */
static int list_edit(const char *cur, const char *item, bool add, char *dst, size_t dstlen)
{
	size_t n = 0, ilen = strlen(item);
	bool present = false;
	dst[0] = 0;
	for (const char *p = cur; *p;) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		while (len && (*p == ' ')) {
			p++;
			len--;
		}
		while (len && p[len - 1] == ' ')
			len--;
		bool same = len == ilen && !memcmp(p, item, len);
		present |= same;
		if (len && !(same && !add)) {
			int w = snprintf(dst + n, dstlen - n, "%s%.*s", n ? "," : "", (int)len, p);
			if (w < 0 || (size_t)w >= dstlen - n)
				return -1;
			n += (size_t)w;
		}
		p = e ? e + 1 : p + strlen(p);
	}
	if (add && !present && ilen) {
		int w = snprintf(dst + n, dstlen - n, "%s%s", n ? "," : "", item);
		if (w < 0 || (size_t)w >= dstlen - n)
			return -1;
	}
	return 0;
}

/* The key is one this resource may change; *is_list whether APPEND/SUBTRACT apply. */
static int16_t config_key_check(const struct cfg_ctx *x, const char *name, bool *is_list, const char **list_default,
				const struct sluice_broker_key **bk, char *msg, size_t msglen)
{
	*bk = NULL;
	if (x->type == SLUICE_MREC_RESOURCE_TOPIC) {
		if (!sluice_topic_config_known(name) || strlen(name) >= SLUICE_TOPIC_CONFIG_KEY_MAX) {
			snprintf(msg, msglen, "Unknown topic config name: %s", name);
			return KERR_INVALID_CONFIG;
		}
		*is_list = !strcmp(name, "cleanup.policy");
		*list_default = "delete";
		return 0;
	}
	bool per_broker = false;
	*bk = sluice_broker_key_find(name, &per_broker);
	if (!*bk || strlen(name) > SLUICE_MREC_NAME_MAX) {
		snprintf(msg, msglen, "Cannot update these configs dynamically: %s", name);
		return KERR_INVALID_CONFIG;
	}
	if (per_broker && !x->per_broker_resource) {
		snprintf(msg, msglen, "Cannot update these configs at default cluster level, broker id must be specified: %s",
			 name);
		return KERR_INVALID_CONFIG;
	}
	*is_list = (*bk)->type == 'L';
	*list_default = (*bk)->list_default;
	return 0;
}

static const char *const op_names[] = {"SET", "DELETE", "APPEND", "SUBTRACT"};

/* The outcome of one change in *o. */
static int16_t config_change_eval(const struct cfg_ctx *x, const struct sluice_ctl_config_change *ch,
				  struct cfg_new *o, char *msg, size_t msglen)
{
	bool is_list = false;
	const char *list_default = "";
	const struct sluice_broker_key *bk;
	int16_t e = config_key_check(x, ch->name, &is_list, &list_default, &bk, msg, msglen);
	if (e)
		return e;
	o->name = ch->name;
	o->del = ch->op == SLUICE_CTL_DELETE;
	if (o->del)
		return 0;
	if (!ch->value) {
		snprintf(msg, msglen, "Null value not supported for : %s", ch->name);
		return KERR_INVALID_REQUEST;
	}
	if (ch->op == SLUICE_CTL_APPEND || ch->op == SLUICE_CTL_SUBTRACT) {
		if (!is_list) {
			snprintf(msg, msglen, "Can't %s to key %s because its type is not LIST.", op_names[ch->op], ch->name);
			return KERR_INVALID_CONFIG;
		}
		const char *cur = config_current(x, ch->name);
		if (list_edit(cur ? cur : list_default, ch->value, ch->op == SLUICE_CTL_APPEND, o->value, x->value_max + 1) < 0) {
			snprintf(msg, msglen, "The value of %s would be longer than %zu bytes", ch->name, x->value_max);
			return KERR_INVALID_CONFIG;
		}
	} else if (strlen(ch->value) > x->value_max) {
		snprintf(msg, msglen, "The value of %s is longer than %zu bytes", ch->name, x->value_max);
		return KERR_INVALID_CONFIG;
	} else {
		memcpy(o->value, ch->value, strlen(ch->value) + 1);
	}
	if (x->type == SLUICE_MREC_RESOURCE_TOPIC)
		return sluice_topic_config_check(ch->name, o->value, msg, msglen);
	return sluice_broker_config_check(bk, ch->name, o->value, msg, msglen);
}

static struct cfg_new *cfg_push(struct cfg_ctx *x)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 8;
		struct cfg_new *v = realloc(x->v, cap * sizeof *v);
		if (!v)
			return NULL;
		x->v = v;
		x->cap = cap;
	}
	struct cfg_new *o = &x->v[x->n++];
	memset(o, 0, sizeof *o);
	return o;
}

/* sluice_image_configs callback of a replace: delete every override not named. */
static int cfg_drop_unnamed(void *arg, const char *name, const char *value)
{
	struct cfg_ctx *x = arg;
	(void)value;
	x->overrides++;
	for (size_t i = 0; i < x->n; i++)
		if (!strcmp(x->v[i].name, name))
			return 0;
	struct cfg_new *o = cfg_push(x);
	if (!o)
		return -1;
	o->name = name; /* the image's string: valid until the image changes, after this decision */
	o->del = true;
	return 0;
}

static int cfg_count(void *arg, const char *name, const char *value)
{
	(void)name;
	(void)value;
	((struct cfg_ctx *)arg)->overrides++;
	return 0;
}

static int16_t config_resource_check(const struct sluice_ctl *c, int8_t type, const char *name, char *msg,
				     size_t msglen)
{
	if (type == SLUICE_MREC_RESOURCE_TOPIC) {
		if (!sluice_image_topic_by_name(c->img, name, strlen(name))) {
			snprintf(msg, msglen, "Topic '%s' does not exist.", name);
			return KERR_UNKNOWN_TOPIC_OR_PARTITION;
		}
		return 0;
	}
	if (type != SLUICE_MREC_RESOURCE_BROKER) {
		snprintf(msg, msglen, "Unsupported resource type %d", type);
		return KERR_INVALID_REQUEST;
	}
	int64_t id;
	if (name[0] && (!parse_int64(name, &id) || id < 0 || id > INT32_MAX || name[0] == '+')) {
		snprintf(msg, msglen, "Invalid broker name %s", name);
		return KERR_INVALID_REQUEST;
	}
	return 0;
}

/* Every change evaluated into x (and, for a replace, the deletions of the rest). */
static int16_t config_plan(struct cfg_ctx *x, const struct sluice_ctl_config_change *changes, int32_t n, bool replace,
			   char *msg, size_t msglen)
{
	for (int32_t i = 0; i < n; i++) {
		if (!changes[i].name || !changes[i].name[0] || changes[i].op < SLUICE_CTL_SET ||
		    changes[i].op > SLUICE_CTL_SUBTRACT) {
			snprintf(msg, msglen, "Invalid config change %d", i);
			return KERR_INVALID_REQUEST;
		}
		for (int32_t j = 0; j < i; j++)
			if (!strcmp(changes[i].name, changes[j].name)) {
				snprintf(msg, msglen, "Error due to duplicate config keys: %s", changes[i].name);
				return KERR_INVALID_REQUEST;
			}
		struct cfg_new *o = cfg_push(x);
		if (!o)
			goto oom;
		struct sluice_ctl_config_change ch = changes[i];
		if (replace && ch.op == SLUICE_CTL_SET && !ch.value)
			ch.op = SLUICE_CTL_DELETE; /* AlterConfigs: a null value removes the override */
		int16_t e = config_change_eval(x, &ch, o, msg, msglen);
		if (e)
			return e;
	}
	x->overrides = 0;
	if (sluice_image_configs(x->c->img, x->type, x->resource, replace ? cfg_drop_unnamed : cfg_count, x) != 0)
		goto oom;
	for (size_t i = 0; i < x->n; i++) {
		bool had = config_current(x, x->v[i].name) != NULL;
		x->overrides += (x->v[i].del ? 0 : 1) - (had ? 1 : 0);
	}
	if (x->type == SLUICE_MREC_RESOURCE_TOPIC && x->overrides > SLUICE_TOPIC_CONFIGS_MAX) {
		snprintf(msg, msglen, "More than %d topic config overrides.", SLUICE_TOPIC_CONFIGS_MAX);
		return KERR_INVALID_CONFIG;
	}
	/* A broker keeps every override of its two levels (broker_config.h). */
	if (x->type == SLUICE_MREC_RESOURCE_BROKER && x->overrides > SLUICE_BROKER_DYNAMIC_CONFIGS_MAX) {
		snprintf(msg, msglen, "More than %d dynamic config overrides for one broker resource.",
			 SLUICE_BROKER_DYNAMIC_CONFIGS_MAX);
		return KERR_INVALID_CONFIG;
	}
	return 0;
oom:
	snprintf(msg, msglen, "out of memory");
	return KERR_UNKNOWN_SERVER_ERROR;
}

/* The ConfigRecords of a plan: topics only what changes; brokers every set
 * (Kafka writes them even when equal, so that brokers reload). */
static int16_t config_records(struct cfg_ctx *x, struct sluice_ctl_out *out, char *msg, size_t msglen)
{
	size_t needed = 0;
	for (size_t i = 0; i < x->n; i++) {
		const char *cur = config_current(x, x->v[i].name);
		bool skip = x->v[i].del ? !cur : x->type == SLUICE_MREC_RESOURCE_TOPIC && cur && !strcmp(cur, x->v[i].value);
		if (skip)
			x->v[i].name = NULL;
		else
			needed++;
	}
	if (out->cap_max - out->n < needed)
		return no_room(out, needed, "The config change", msg, msglen);
	for (size_t i = 0; i < x->n; i++) {
		if (!x->v[i].name)
			continue;
		struct sluice_mrec *r = sluice_ctl_out_add(out);
		if (!r) {
			snprintf(msg, msglen, "out of memory");
			return KERR_UNKNOWN_SERVER_ERROR;
		}
		r->type = SLUICE_MREC_CONFIG;
		r->config.resource_type = x->type;
		snprintf(r->config.resource_name, sizeof r->config.resource_name, "%s", x->resource);
		snprintf(r->config.name, sizeof r->config.name, "%s", x->v[i].name);
		r->config.value_null = x->v[i].del;
		if (!x->v[i].del)
			memcpy(r->config.value, x->v[i].value, strlen(x->v[i].value) + 1);
	}
	return 0;
}

int16_t sluice_ctl_alter_configs(struct sluice_ctl *c, int8_t resource_type, const char *resource_name,
				 const struct sluice_ctl_config_change *changes, int32_t n, bool replace,
				 bool validate_only, struct sluice_ctl_out *out, char *msg, size_t msglen)
{
	assert(c && resource_name && out && msg && n >= 0 && (changes || n == 0));
	pending_sync(c, out);
	msg[0] = 0;
	int16_t e = config_resource_check(c, resource_type, resource_name, msg, msglen);
	if (e)
		return e;
	if (n > CTL_CONFIG_CHANGES_MAX) {
		snprintf(msg, msglen, "More than %d config changes to one resource.", CTL_CONFIG_CHANGES_MAX);
		return KERR_INVALID_REQUEST;
	}
	struct cfg_ctx x = {.c = c, .type = resource_type, .resource = resource_name,
			    .per_broker_resource = resource_name[0] != 0,
			    .value_max = resource_type == SLUICE_MREC_RESOURCE_TOPIC ? SLUICE_TOPIC_CONFIG_VALUE_MAX - 1
										   : SLUICE_MREC_CONFIG_VALUE_MAX};
	e = config_plan(&x, changes, n, replace, msg, msglen);
	size_t from = out->n;
	if (!e && !validate_only)
		e = config_records(&x, out, msg, msglen);
	if (e)
		pending_rollback(c, out, from);
	else
		pending_note(c, out, from);
	/* Elections depend on these: the next tick looks at every partition again
	 * (Kafka elects uncleanly once the topic allows it). */
	for (size_t i = 0; !e && !validate_only && i < x.n; i++)
		if (x.v[i].name && (!strcmp(x.v[i].name, "unclean.leader.election.enable") ||
				    !strcmp(x.v[i].name, "min.insync.replicas")))
			c->repair_due = true;
	free(x.v);
	return e;
}

/* ---- producer ids --------------------------------------------------------------------------------------- */

int16_t sluice_ctl_allocate_producer_ids(struct sluice_ctl *c, int32_t broker_id, int64_t broker_epoch,
					 struct sluice_ctl_out *out, int64_t *start_out, int32_t *len_out)
{
	assert(c && out && start_out && len_out);
	pending_sync(c, out);
	*start_out = -1;
	*len_out = 0;
	const struct sluice_image_broker *b = sluice_image_broker(c->img, broker_id);
	if (!b)
		return KERR_BROKER_ID_NOT_REGISTERED;
	if (b->epoch != broker_epoch)
		return KERR_STALE_BROKER_EPOCH;
	/* After a block handed out earlier in the same command, never the image's again. */
	int64_t start = sluice_image_next_producer_id(c->img);
	size_t pi = c->pend.pid_idx;
	if (pi < out->n && out->recs[pi].type == SLUICE_MREC_PRODUCER_IDS)
		start = out->recs[pi].producer_ids.next_producer_id;
	assert(start >= 0);
	if (start > INT64_MAX - SLUICE_CTL_PRODUCER_ID_BLOCK) {
		SLOG_ERR("ctl", "producer ids exhausted at %" PRId64, start);
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	size_t from = out->n;
	struct sluice_mrec *r = sluice_ctl_out_add(out);
	if (!r)
		return KERR_THROTTLING_QUOTA_EXCEEDED;
	r->type = SLUICE_MREC_PRODUCER_IDS;
	r->producer_ids.broker_id = broker_id;
	r->producer_ids.broker_epoch = broker_epoch;
	r->producer_ids.next_producer_id = start + SLUICE_CTL_PRODUCER_ID_BLOCK;
	pending_note(c, out, from);
	*start_out = start;
	*len_out = SLUICE_CTL_PRODUCER_ID_BLOCK;
	return 0;
}

/* ---- AlterPartition ------------------------------------------------------------------------------------- */

/* Kafka's validateAlterPartitionData, in its order. */
static int16_t alter_partition_check(const struct sluice_ctl *c, const struct sluice_ctl_alter_partition *a,
				     const struct sluice_image_partition *p)
{
	if (a->leader_epoch > p->leader_epoch || a->partition_epoch > p->partition_epoch)
		return KERR_NOT_CONTROLLER; /* the sender knows a newer state: this controller is behind */
	if (a->leader_epoch < p->leader_epoch)
		return KERR_FENCED_LEADER_EPOCH;
	if (a->broker_id != p->leader)
		return KERR_NOT_LEADER_OR_FOLLOWER;
	if (a->partition_epoch < p->partition_epoch)
		return KERR_INVALID_UPDATE_VERSION;
	const struct sluice_mrec_ids *isr = &a->new_isr;
	if (isr->n < 1 || isr->n > p->replicas.n || !ids_has(isr, p->leader))
		return KERR_INVALID_REQUEST; /* the ISR must hold the leader */
	for (int32_t i = 0; i < isr->n; i++) {
		if (!ids_has(&p->replicas, isr->id[i]))
			return KERR_INVALID_REQUEST;
		for (int32_t j = 0; j < i; j++)
			if (isr->id[j] == isr->id[i])
				return KERR_INVALID_REQUEST;
	}
	for (int32_t i = 0; i < isr->n; i++)
		if (!view_active(c, isr->id[i]))
			return KERR_INELIGIBLE_REPLICA;
	return 0;
}

int16_t sluice_ctl_alter_partition(struct sluice_ctl *c, const struct sluice_ctl_alter_partition *a,
				   struct sluice_ctl_out *out)
{
	assert(c && a && out);
	pending_sync(c, out);
	const struct sluice_image_broker *b = sluice_image_broker(c->img, a->broker_id);
	if (!b || b->epoch != a->broker_epoch)
		return KERR_STALE_BROKER_EPOCH;
	const struct sluice_image_topic *t = sluice_image_topic_by_id(c->img, a->topic_id);
	if (!t || pending_has(c, out, PEND_REMOVED, NULL, 0, a->topic_id, 0))
		return KERR_UNKNOWN_TOPIC_ID;
	if (a->partition < 0 || a->partition >= t->partition_n)
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	if (a->new_isr.n < 0 || a->new_isr.n > SLUICE_REPLICAS_MAX)
		return KERR_INVALID_REQUEST;
	const struct sluice_image_partition *p = &t->partitions[a->partition];
	view_load(c, out);
	int16_t e = alter_partition_check(c, a, p);
	if (e)
		return e;
	if (pending_has(c, out, PEND_CHANGED, NULL, 0, t->id, a->partition))
		return KERR_INVALID_UPDATE_VERSION; /* changed earlier in this command: the leader retries with the new epoch */
	struct pc_rules rules;
	topic_rules(c, t, &rules);
	rules.target_isr = &a->new_isr;
	/* The contract carries no LeaderRecoveryState: a leader that reports
	 * its ISR has recovered (Kafka's leaders send RECOVERED so). */
	rules.target_lrs = CTL_RECOVERED;
	struct sluice_mrec_partition_change pc;
	if (!partition_build(c, p, &rules, &pc))
		return 0;
	memcpy(pc.topic_id, t->id, 16);
	pc.partition_id = a->partition;
	size_t from = out->n;
	struct sluice_mrec *r = sluice_ctl_out_add(out);
	if (!r)
		return KERR_THROTTLING_QUOTA_EXCEEDED;
	r->type = SLUICE_MREC_PARTITION_CHANGE;
	r->partition_change = pc;
	pending_note(c, out, from);
	if (p->replicas.n > 0 && p->leader != p->replicas.id[0] && ids_has(&a->new_isr, p->replicas.id[0]))
		c->rebalance_due = c->cfg.auto_leader_rebalance; /* the preferred leader is back in sync */
	return 0;
}

/* ---- AlterPartitionReassignments ---------------------------------------------------------------- */

bool sluice_ctl_reassigning(const struct sluice_image_partition *p)
{
	return p->adding.n > 0 || p->removing.n > 0;
}

/* Kafka's validateManualPartitionAssignment, in its order (ids ascending:
 * registered, then not repeated). */
static int16_t reassign_check_target(const struct sluice_ctl *c, const struct sluice_mrec_ids *target, char *msg,
				     size_t msglen)
{
	if (target->n == 0) {
		snprintf(msg, msglen, "The manual partition assignment includes an empty replica list.");
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	struct sluice_mrec_ids sorted = *target;
	ids_sort(&sorted);
	for (int32_t i = 0; i < sorted.n; i++) {
		if (!sluice_image_broker(c->img, sorted.id[i])) {
			snprintf(msg, msglen, "The manual partition assignment includes broker %" PRId32 ", but no such "
				 "broker is registered.", sorted.id[i]);
			return KERR_INVALID_REPLICA_ASSIGNMENT;
		}
		if (i > 0 && sorted.id[i] == sorted.id[i - 1]) {
			snprintf(msg, msglen, "The manual partition assignment includes the broker %" PRId32 " more than "
				 "once.", sorted.id[i]);
			return KERR_INVALID_REPLICA_ASSIGNMENT;
		}
	}
	return 0;
}

/* Kafka's PartitionReassignmentReplicas(current, target): removing the
 * current replicas not targeted, adding the targets not current (both
 * ascending), replicas the targets then the removing ones. */
static void reassign_plan(const struct sluice_mrec_ids *current, const struct sluice_mrec_ids *target,
			  struct pc_assign *a)
{
	memset(a, 0, sizeof *a);
	a->replicas = *target;
	for (int32_t i = 0; i < current->n; i++)
		if (!ids_has(target, current->id[i]))
			ids_add(&a->removing, current->id[i]);
	for (int32_t i = 0; i < target->n; i++)
		if (!ids_has(current, target->id[i]))
			ids_add(&a->adding, target->id[i]);
	ids_sort(&a->removing);
	ids_sort(&a->adding);
	for (int32_t i = 0; i < a->removing.n; i++)
		ids_add(&a->replicas, a->removing.id[i]);
}

/* A new target: Kafka's changePartitionReassignment. The builder keeps the
 * partition's own removing and adding lists where the plan has none (as
 * Kafka's does). */
static int16_t reassign_change(struct sluice_ctl *c, const struct sluice_image_topic *t,
			       const struct sluice_image_partition *p, const struct sluice_mrec_ids *target,
			       bool allow_rf_change, struct pc_rules *rules, struct pc_assign *a, char *msg,
			       size_t msglen)
{
	int16_t e = reassign_check_target(c, target, msg, msglen);
	if (e)
		return e;
	if (!allow_rf_change) { /* KIP-860: the length the partition is headed for */
		struct sluice_mrec_ids heading = p->replicas;
		for (int32_t i = 0; i < p->removing.n; i++)
			ids_remove(&heading, p->removing.id[i]);
		if (heading.n != target->n) {
			snprintf(msg, msglen, "The replication factor is changed from %" PRId32 " to %" PRId32, heading.n,
				 target->n);
			return KERR_INVALID_REPLICATION_FACTOR;
		}
	}
	if (target->n + p->replicas.n > SLUICE_REPLICAS_MAX) {
		int32_t union_n = p->replicas.n;
		for (int32_t i = 0; i < target->n; i++)
			union_n += !ids_has(&p->replicas, target->id[i]);
		if (union_n > SLUICE_REPLICAS_MAX) {
			snprintf(msg, msglen, "Partition %s-%" PRId32 " would have %" PRId32 " replicas while it moves; at "
				 "most %d are supported.", t->name, (int32_t)(p - t->partitions), union_n,
				 SLUICE_REPLICAS_MAX);
			return KERR_INVALID_REPLICA_ASSIGNMENT;
		}
	}
	reassign_plan(&p->replicas, target, a);
	if (!ids_equal(&a->replicas, &p->replicas))
		rules->target_replicas = &a->replicas;
	if (a->removing.n > 0)
		rules->target_removing = &a->removing;
	if (a->adding.n > 0)
		rules->target_adding = &a->adding;
	return 0;
}

/* Cancelling: Kafka's cancelPartitionReassignment over PartitionReassignmentRevert. */
static int16_t reassign_cancel(const struct sluice_image_topic *t, const struct sluice_image_partition *p,
			       struct pc_rules *rules, struct pc_assign *a, struct sluice_mrec_ids *isr, char *msg,
			       size_t msglen)
{
	if (!sluice_ctl_reassigning(p)) {
		snprintf(msg, msglen, "No partition reassignment is in progress.");
		return KERR_NO_REASSIGNMENT_IN_PROGRESS;
	}
	memset(a, 0, sizeof *a);
	a->replicas = p->replicas;
	*isr = p->isr;
	for (int32_t i = 0; i < p->adding.n; i++) {
		ids_remove(&a->replicas, p->adding.id[i]);
		ids_remove(isr, p->adding.id[i]);
	}
	if (a->replicas.n == 0) {
		snprintf(msg, msglen, "Invalid replica assignment: addingReplicas contains all replicas.");
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	if (isr->n == 0) { /* every ISR member was being added: only an unclean election keeps it online */
		if (!rules->unclean_allowed) {
			snprintf(msg, msglen, "Unable to revert partition assignment for %s:%" PRId32 " because it would "
				 "require an unclean leader election.", t->name, (int32_t)(p - t->partitions));
			return KERR_INVALID_REPLICA_ASSIGNMENT;
		}
		*isr = ids_one(a->replicas.id[0]);
	}
	rules->target_isr = isr;
	rules->target_replicas = &a->replicas;
	rules->target_removing = &a->removing; /* empty */
	rules->target_adding = &a->adding;     /* empty */
	return 0;
}

int16_t sluice_ctl_reassign(struct sluice_ctl *c, const char *topic, size_t topic_len, int32_t partition,
			    const struct sluice_mrec_ids *target, bool allow_rf_change, struct sluice_ctl_out *out,
			    char *msg, size_t msglen)
{
	assert(c && topic && out && msg && msglen > 0);
	assert(!target || (target->n >= 0 && target->n <= SLUICE_REPLICAS_MAX));
	pending_sync(c, out);
	msg[0] = '\0';
	const struct sluice_image_topic *t = sluice_image_topic_by_name(c->img, topic, topic_len);
	if (!t || pending_has(c, out, PEND_REMOVED, NULL, 0, t->id, 0)) {
		snprintf(msg, msglen, "Unable to find a topic named %.*s.", (int)topic_len, topic);
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	}
	if (partition < 0 || partition >= t->partition_n) {
		snprintf(msg, msglen, "Unable to find partition %s:%" PRId32 ".", t->name, partition);
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	}
	if (pending_has(c, out, PEND_CHANGED, NULL, 0, t->id, partition)) {
		snprintf(msg, msglen, "Partition %s:%" PRId32 " is named twice in the request.", t->name, partition);
		return KERR_INVALID_REQUEST;
	}
	const struct sluice_image_partition *p = &t->partitions[partition];
	view_load(c, out);
	struct pc_rules rules;
	topic_rules(c, t, &rules);
	struct pc_assign a;
	struct sluice_mrec_ids isr;
	int16_t e = target ? reassign_change(c, t, p, target, allow_rf_change, &rules, &a, msg, msglen)
			   : reassign_cancel(t, p, &rules, &a, &isr, msg, msglen);
	if (e)
		return e;
	struct sluice_mrec_partition_change pc;
	if (!partition_build(c, p, &rules, &pc))
		return 0; /* nothing to change: the partition is where it should be */
	memcpy(pc.topic_id, t->id, 16);
	pc.partition_id = partition;
	size_t from = out->n;
	struct sluice_mrec *r = sluice_ctl_out_add(out);
	if (!r) {
		snprintf(msg, msglen, "Too many changes in one request.");
		return KERR_THROTTLING_QUOTA_EXCEEDED;
	}
	r->type = SLUICE_MREC_PARTITION_CHANGE;
	r->partition_change = pc;
	pending_note(c, out, from);
	return 0;
}
