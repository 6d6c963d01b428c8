/* The cluster metadata image (see image.h): brokers, topics with their
 * partitions, configs and the producer id allocator, changed only by
 * applying metadata records in offset order with Kafka's semantics.
 *
 * Every apply checks everything first and changes the image only once the
 * record is known to apply and every allocation it needs has been made, so
 * that a refused record leaves the image exactly as it was.
 *
 * Layout, for 100,000 topics and a million partitions:
 * - brokers: an array sorted by id (binary search; at most 4096);
 * - topics: two open-addressing hash tables (linear probing, backward-shift
 *   deletion), one keyed by name and one by id, over heap nodes that keep
 *   their partition arrays; plus an array of the topics sorted by name for
 *   sluice_image_topic_at. That array is kept in order while topics arrive
 *   in name order (a snapshot) and otherwise only marked stale, and is
 *   re-sorted on the first read after a change: creating or deleting many
 *   topics costs one sort, not a memmove per topic. The re-sort happens in
 *   the const readers, which image.h allows because the owner serialises
 *   applies and reads; it never allocates (room is made at insert time);
 * - configs: a hash table of resources (type, name), each with its configs
 *   sorted by name. */
#include "control/image.h"
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_CAP_MIN 16 /* hash tables: power of two, at most half full */
_Static_assert((TABLE_CAP_MIN & (TABLE_CAP_MIN - 1)) == 0, "table capacity is a power of two");
_Static_assert(SLUICE_TOPICS_MAX <= SLUICE_IMAGE_PARTITIONS_MAX, "every topic has room for a partition");

struct topic_node {
	struct sluice_image_topic t; /* what readers see */
	int32_t partition_cap;
	uint64_t name_hash, id_hash;
};

struct config_entry {
	char *name;  /* one allocation: name, NUL, value, NUL */
	char *value;
};

struct resource {
	int8_t type;
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	uint64_t hash;
	int32_t n, cap;
	struct config_entry *entries; /* sorted by name */
};

struct sluice_image {
	int64_t offset;
	struct sluice_image_broker *brokers; /* sorted by id */
	size_t broker_n, broker_cap;
	struct topic_node **by_name, **by_id; /* hash tables of topic_cap slots */
	size_t topic_cap, topic_n;
	struct topic_node **sorted; /* topic_n entries, by name, unless sorted_stale */
	size_t sorted_cap;
	bool sorted_stale;
	int64_t partition_total;
	struct resource **resources; /* hash table of resource_cap slots */
	size_t resource_cap, resource_n;
	size_t config_n;
	bool has_producer_ids;
	int64_t next_producer_id;
};

static int refuse(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/* A topic id for messages: 32 hex digits. */
struct idhex {
	char s[33];
};
static struct idhex idhex(const uint8_t id[16])
{
	struct idhex h;
	for (int i = 0; i < 16; i++)
		snprintf(h.s + 2 * i, 3, "%02x", id[i]);
	return h;
}

static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;
	h ^= 0xcbf29ce484222325ULL; /* FNV-1a */
	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h ^ (h >> 29);
}
static uint64_t hash_id(const uint8_t id[16]) { return hash_bytes(0, id, 16); }

static bool str_fits(const char *s, size_t max) { return strnlen(s, max + 1) <= max; }
static bool ids_fit(const struct sluice_mrec_ids *ids) { return ids->n >= 0 && ids->n <= SLUICE_REPLICAS_MAX; }
static void ids_copy(struct sluice_mrec_ids *dst, const struct sluice_mrec_ids *src)
{
	assert(ids_fit(src));
	memset(dst, 0, sizeof *dst);
	dst->n = src->n;
	memcpy(dst->id, src->id, (size_t)src->n * sizeof src->id[0]);
}
static bool ids_equal(const struct sluice_mrec_ids *a, const struct sluice_mrec_ids *b)
{
	return a->n == b->n && memcmp(a->id, b->id, (size_t)a->n * sizeof a->id[0]) == 0;
}
static bool uuid_zero(const uint8_t id[16])
{
	static const uint8_t zero[16];
	return memcmp(id, zero, 16) == 0;
}

/* ---- open-addressing tables ----------------------------------------------------- */

/* Remove slot i of a linear-probing table and shift the entries after it
 * back, so that every lookup still finds its entry (no tombstones). */
static void table_remove(void **tab, size_t cap, size_t i, uint64_t (*home)(const void *e))
{
	size_t mask = cap - 1, j = i;
	tab[i] = NULL;
	for (;;) {
		j = (j + 1) & mask;
		if (!tab[j])
			return;
		size_t k = (size_t)home(tab[j]) & mask;
		bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
		if (stays)
			continue;
		tab[i] = tab[j];
		tab[j] = NULL;
		i = j;
	}
}

/* Rehash every entry of old[0..old_cap) into a zeroed table of cap slots. */
static void table_move(void **tab, size_t cap, void **old, size_t old_cap, uint64_t (*home)(const void *e))
{
	for (size_t s = 0; s < old_cap; s++) {
		if (!old[s])
			continue;
		size_t i = (size_t)home(old[s]) & (cap - 1);
		while (tab[i])
			i = (i + 1) & (cap - 1);
		tab[i] = old[s];
	}
}

static uint64_t topic_name_home(const void *e) { return ((const struct topic_node *)e)->name_hash; }
static uint64_t topic_id_home(const void *e) { return ((const struct topic_node *)e)->id_hash; }
static uint64_t resource_home(const void *e) { return ((const struct resource *)e)->hash; }

/* The slot holding the topic named name[0..len), or the empty slot where it would go. */
static size_t topic_name_slot(const struct sluice_image *img, const char *name, size_t len, uint64_t h)
{
	size_t mask = img->topic_cap - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		const struct topic_node *n = img->by_name[i];
		if (!n || (n->name_hash == h && strlen(n->t.name) == len && memcmp(n->t.name, name, len) == 0))
			return i;
	}
}
static size_t topic_id_slot(const struct sluice_image *img, const uint8_t id[16], uint64_t h)
{
	size_t mask = img->topic_cap - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		const struct topic_node *n = img->by_id[i];
		if (!n || (n->id_hash == h && memcmp(n->t.id, id, 16) == 0))
			return i;
	}
}

static uint64_t resource_hash(int8_t type, const char *name)
{
	return hash_bytes((uint64_t)(uint8_t)type * 0x9e3779b97f4a7c15ULL, name, strlen(name));
}
static size_t resource_slot(const struct sluice_image *img, int8_t type, const char *name, uint64_t h)
{
	size_t mask = img->resource_cap - 1;
	for (size_t i = (size_t)h & mask;; i = (i + 1) & mask) {
		const struct resource *r = img->resources[i];
		if (!r || (r->hash == h && r->type == type && strcmp(r->name, name) == 0))
			return i;
	}
}

/* Room for one more topic: both tables at most half full, the sorted
 * array as long as the topic count. Changes no content. */
static int topics_reserve(struct sluice_image *img)
{
	if (img->sorted_cap < img->topic_n + 1) {
		size_t cap = img->sorted_cap ? 2 * img->sorted_cap : TABLE_CAP_MIN;
		struct topic_node **s = realloc(img->sorted, cap * sizeof *s);
		if (!s)
			return -1;
		img->sorted = s;
		img->sorted_cap = cap;
	}
	if (2 * (img->topic_n + 1) <= img->topic_cap)
		return 0;
	size_t cap = img->topic_cap ? 2 * img->topic_cap : TABLE_CAP_MIN;
	struct topic_node **by_name = calloc(cap, sizeof *by_name), **by_id = calloc(cap, sizeof *by_id);
	if (!by_name || !by_id) {
		free(by_name);
		free(by_id);
		return -1;
	}
	table_move((void **)by_name, cap, (void **)img->by_name, img->topic_cap, topic_name_home);
	table_move((void **)by_id, cap, (void **)img->by_id, img->topic_cap, topic_id_home);
	free(img->by_name);
	free(img->by_id);
	img->by_name = by_name;
	img->by_id = by_id;
	img->topic_cap = cap;
	return 0;
}

static int resources_reserve(struct sluice_image *img)
{
	if (2 * (img->resource_n + 1) <= img->resource_cap)
		return 0;
	size_t cap = img->resource_cap ? 2 * img->resource_cap : TABLE_CAP_MIN;
	struct resource **tab = calloc(cap, sizeof *tab);
	if (!tab)
		return -1;
	table_move((void **)tab, cap, (void **)img->resources, img->resource_cap, resource_home);
	free(img->resources);
	img->resources = tab;
	img->resource_cap = cap;
	return 0;
}

/* ---- lifetime ------------------------------------------------------------------ */

struct sluice_image *sluice_image_new(void)
{
	struct sluice_image *img = calloc(1, sizeof *img);
	if (img) {
		img->offset = -1;
		img->next_producer_id = 0;
	}
	return img;
}

static void resource_free(struct resource *r)
{
	for (int32_t i = 0; i < r->n; i++)
		free(r->entries[i].name);
	free(r->entries);
	free(r);
}

void sluice_image_clear(struct sluice_image *img)
{
	for (size_t i = 0; i < img->topic_cap; i++) {
		if (img->by_id[i]) {
			free(img->by_id[i]->t.partitions);
			free(img->by_id[i]);
		}
	}
	for (size_t i = 0; i < img->resource_cap; i++)
		if (img->resources[i])
			resource_free(img->resources[i]);
	free(img->brokers);
	free(img->by_name);
	free(img->by_id);
	free(img->sorted);
	free(img->resources);
	memset(img, 0, sizeof *img);
	img->offset = -1;
}

void sluice_image_free(struct sluice_image *img)
{
	if (!img)
		return;
	sluice_image_clear(img);
	free(img);
}

int64_t sluice_image_offset(const struct sluice_image *img) { return img->offset; }

void sluice_image_set_offset(struct sluice_image *img, int64_t offset)
{
	assert(offset >= -1);
	img->offset = offset;
}

/* ---- brokers -------------------------------------------------------------------- */

/* The index of broker id, or where it would be inserted (*found false). */
static size_t broker_index(const struct sluice_image *img, int32_t id, bool *found)
{
	size_t lo = 0, hi = img->broker_n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (img->brokers[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < img->broker_n && img->brokers[lo].id == id;
	return lo;
}

size_t sluice_image_broker_count(const struct sluice_image *img) { return img->broker_n; }

const struct sluice_image_broker *sluice_image_broker_at(const struct sluice_image *img, size_t i)
{
	return i < img->broker_n ? &img->brokers[i] : NULL;
}

const struct sluice_image_broker *sluice_image_broker(const struct sluice_image *img, int32_t id)
{
	bool found;
	size_t i = broker_index(img, id, &found);
	return found ? &img->brokers[i] : NULL;
}

static int apply_register_broker(struct sluice_image *img, const struct sluice_mrec_register_broker *r, char *err,
				 size_t errlen)
{
	if (r->endpoint_n < 0 || r->endpoint_n > SLUICE_MREC_LISTENERS_MAX || !str_fits(r->rack, SLUICE_BROKER_RACK_MAX))
		return refuse(err, errlen, "RegisterBrokerRecord: broker %" PRId32 ": endpoints or rack beyond limits",
			      r->broker_id);
	for (int32_t i = 0; i < r->endpoint_n; i++)
		if (!str_fits(r->endpoints[i].name, SLUICE_MREC_NAME_MAX) ||
		    !str_fits(r->endpoints[i].host, SLUICE_BROKER_HOST_MAX))
			return refuse(err, errlen, "RegisterBrokerRecord: broker %" PRId32 ": endpoint beyond limits",
				      r->broker_id);
	bool found;
	size_t i = broker_index(img, r->broker_id, &found);
	if (!found) {
		if (img->broker_n >= SLUICE_IMAGE_BROKERS_MAX)
			return refuse(err, errlen, "RegisterBrokerRecord: broker %" PRId32 ": already %d brokers",
				      r->broker_id, SLUICE_IMAGE_BROKERS_MAX);
		if (img->broker_n == img->broker_cap) {
			size_t cap = img->broker_cap ? 2 * img->broker_cap : 8;
			struct sluice_image_broker *b = realloc(img->brokers, cap * sizeof *b);
			if (!b)
				return refuse(err, errlen, "RegisterBrokerRecord: out of memory");
			img->brokers = b;
			img->broker_cap = cap;
		}
		memmove(&img->brokers[i + 1], &img->brokers[i], (img->broker_n - i) * sizeof img->brokers[0]);
		img->broker_n++;
	}
	/* A registration replaces the previous one whole, as Kafka's. */
	struct sluice_image_broker *b = &img->brokers[i];
	memset(b, 0, sizeof *b);
	b->id = r->broker_id;
	memcpy(b->incarnation_id, r->incarnation_id, 16);
	b->epoch = r->broker_epoch;
	b->endpoint_n = r->endpoint_n;
	for (int32_t e = 0; e < r->endpoint_n; e++) {
		struct sluice_mrec_endpoint *d = &b->endpoints[e];
		snprintf(d->name, sizeof d->name, "%s", r->endpoints[e].name);
		snprintf(d->host, sizeof d->host, "%s", r->endpoints[e].host);
		d->port = r->endpoints[e].port;
		d->security_protocol = r->endpoints[e].security_protocol;
	}
	snprintf(b->rack, sizeof b->rack, "%s", r->rack);
	b->fenced = r->fenced;
	b->in_controlled_shutdown = r->in_controlled_shutdown;
	return 0;
}

/* Kafka's getBrokerOrThrow: the broker is registered with exactly this epoch. */
static struct sluice_image_broker *broker_at_epoch(struct sluice_image *img, const char *what, int32_t id,
						   int64_t epoch, char *err, size_t errlen)
{
	bool found;
	size_t i = broker_index(img, id, &found);
	if (!found) {
		refuse(err, errlen, "%s: broker %" PRId32 " is not registered", what, id);
		return NULL;
	}
	if (img->brokers[i].epoch != epoch) {
		refuse(err, errlen, "%s: broker %" PRId32 ": epoch %" PRId64 " is not its current epoch %" PRId64, what,
		       id, epoch, img->brokers[i].epoch);
		return NULL;
	}
	return &img->brokers[i];
}

static int apply_broker_change(struct sluice_image *img, const struct sluice_mrec *r, char *err, size_t errlen)
{
	const char *what = sluice_mrec_type_name(r->type);
	struct sluice_image_broker *b;
	switch (r->type) {
	case SLUICE_MREC_UNREGISTER_BROKER: {
		b = broker_at_epoch(img, what, r->unregister_broker.broker_id, r->unregister_broker.broker_epoch, err,
				    errlen);
		if (!b)
			return -1;
		size_t i = (size_t)(b - img->brokers);
		memmove(&img->brokers[i], &img->brokers[i + 1], (img->broker_n - i - 1) * sizeof img->brokers[0]);
		img->broker_n--;
		return 0;
	}
	case SLUICE_MREC_FENCE_BROKER:
	case SLUICE_MREC_UNFENCE_BROKER:
		b = broker_at_epoch(img, what, r->fence_broker.id, r->fence_broker.epoch, err, errlen);
		if (!b)
			return -1;
		b->fenced = r->type == SLUICE_MREC_FENCE_BROKER;
		return 0;
	default: {
		assert(r->type == SLUICE_MREC_BROKER_REGISTRATION_CHANGE);
		int8_t fenced = r->broker_registration_change.fenced;
		int8_t shutdown = r->broker_registration_change.in_controlled_shutdown;
		if (fenced < -1 || fenced > 1 || shutdown < -1 || shutdown > 1)
			return refuse(err, errlen, "%s: unknown change (fenced %d, in controlled shutdown %d)", what,
				      fenced, shutdown);
		b = broker_at_epoch(img, what, r->broker_registration_change.broker_id,
				    r->broker_registration_change.broker_epoch, err, errlen);
		if (!b)
			return -1;
		if (fenced >= 0)
			b->fenced = fenced;
		if (shutdown >= 0)
			b->in_controlled_shutdown = shutdown;
		return 0;
	}
	}
}

/* ---- topics --------------------------------------------------------------------- */

static int topic_name_cmp(const void *a, const void *b)
{
	return strcmp((*(struct topic_node *const *)a)->t.name, (*(struct topic_node *const *)b)->t.name);
}

/* Re-sort the by-name array after changes (see the file comment on why a
 * const reader may do this). Never allocates: inserts made the room. */
static void sorted_refresh(const struct sluice_image *cimg)
{
	struct sluice_image *img = (struct sluice_image *)cimg;
	if (!img->sorted_stale)
		return;
	size_t n = 0;
	for (size_t i = 0; i < img->topic_cap; i++)
		if (img->by_id[i])
			img->sorted[n++] = img->by_id[i];
	assert(n == img->topic_n && n <= img->sorted_cap);
	if (n > 1)
		qsort(img->sorted, n, sizeof img->sorted[0], topic_name_cmp);
	img->sorted_stale = false;
}

size_t sluice_image_topic_count(const struct sluice_image *img) { return img->topic_n; }

const struct sluice_image_topic *sluice_image_topic_at(const struct sluice_image *img, size_t i)
{
	if (i >= img->topic_n)
		return NULL;
	sorted_refresh(img);
	return &img->sorted[i]->t;
}

static struct topic_node *topic_node_by_name(const struct sluice_image *img, const char *name, size_t len)
{
	if (!img->topic_n || len > SLUICE_TOPIC_NAME_MAX)
		return NULL;
	return img->by_name[topic_name_slot(img, name, len, hash_bytes(0, name, len))];
}

static struct topic_node *topic_node_by_id(const struct sluice_image *img, const uint8_t id[16])
{
	if (!img->topic_n)
		return NULL;
	return img->by_id[topic_id_slot(img, id, hash_id(id))];
}

const struct sluice_image_topic *sluice_image_topic_by_name(const struct sluice_image *img, const char *name,
							     size_t len)
{
	struct topic_node *n = topic_node_by_name(img, name, len);
	return n ? &n->t : NULL;
}

const struct sluice_image_topic *sluice_image_topic_by_id(const struct sluice_image *img, const uint8_t id[16])
{
	struct topic_node *n = topic_node_by_id(img, id);
	return n ? &n->t : NULL;
}

static int apply_topic(struct sluice_image *img, const char *name, const uint8_t id[16], char *err, size_t errlen)
{
	size_t len = strnlen(name, SLUICE_TOPIC_NAME_MAX + 1);
	if (len == 0 || len > SLUICE_TOPIC_NAME_MAX)
		return refuse(err, errlen, "TopicRecord: name empty or longer than %d bytes", SLUICE_TOPIC_NAME_MAX);
	if (uuid_zero(id))
		return refuse(err, errlen, "TopicRecord: topic %s: the zero topic id", name);
	if (topic_node_by_name(img, name, len))
		return refuse(err, errlen, "TopicRecord: topic %s exists", name);
	if (topic_node_by_id(img, id))
		return refuse(err, errlen, "TopicRecord: topic %s: id %s is another topic's", name, idhex(id).s);
	if (img->topic_n >= SLUICE_TOPICS_MAX)
		return refuse(err, errlen, "TopicRecord: topic %s: already %d topics", name, SLUICE_TOPICS_MAX);
	struct topic_node *n = calloc(1, sizeof *n);
	if (!n || topics_reserve(img) != 0) {
		free(n);
		return refuse(err, errlen, "TopicRecord: topic %s: out of memory", name);
	}
	memcpy(n->t.name, name, len);
	memcpy(n->t.id, id, 16);
	n->name_hash = hash_bytes(0, name, len);
	n->id_hash = hash_id(id);
	img->by_name[topic_name_slot(img, name, len, n->name_hash)] = n;
	img->by_id[topic_id_slot(img, id, n->id_hash)] = n;
	/* In order (a snapshot's topics): append; otherwise re-sort on the next read. */
	if (!img->sorted_stale && (img->topic_n == 0 || strcmp(img->sorted[img->topic_n - 1]->t.name, name) < 0))
		img->sorted[img->topic_n] = n;
	else
		img->sorted_stale = true;
	img->topic_n++;
	return 0;
}

static void configs_delete_resource(struct sluice_image *img, int8_t type, const char *name);

static int apply_remove_topic(struct sluice_image *img, const uint8_t id[16], char *err, size_t errlen)
{
	struct topic_node *n = topic_node_by_id(img, id);
	if (!n)
		return refuse(err, errlen, "RemoveTopicRecord: topic id %s unknown", idhex(id).s);
	configs_delete_resource(img, SLUICE_MREC_RESOURCE_TOPIC, n->t.name);
	table_remove((void **)img->by_name, img->topic_cap,
		     topic_name_slot(img, n->t.name, strlen(n->t.name), n->name_hash), topic_name_home);
	table_remove((void **)img->by_id, img->topic_cap, topic_id_slot(img, n->t.id, n->id_hash), topic_id_home);
	img->topic_n--;
	img->sorted_stale = true;
	img->partition_total -= n->t.partition_n;
	free(n->t.partitions);
	free(n);
	return 0;
}

/* ---- partitions ----------------------------------------------------------------- */

static int apply_partition(struct sluice_image *img, const struct sluice_mrec_partition *r, char *err, size_t errlen)
{
	struct topic_node *n = topic_node_by_id(img, r->topic_id);
	if (!n)
		return refuse(err, errlen, "PartitionRecord: partition %" PRId32 " of unknown topic id %s",
			      r->partition_id, idhex(r->topic_id).s);
	if (r->partition_id != n->t.partition_n)
		return refuse(err, errlen, "PartitionRecord: topic %s: partition %" PRId32 " is not the next one (%" PRId32 ")",
			      n->t.name, r->partition_id, n->t.partition_n);
	if (n->t.partition_n >= SLUICE_PARTITIONS_PER_TOPIC_MAX || img->partition_total >= SLUICE_IMAGE_PARTITIONS_MAX)
		return refuse(err, errlen, "PartitionRecord: topic %s: partition %" PRId32 " beyond the partition limits",
			      n->t.name, r->partition_id);
	if (!ids_fit(&r->replicas) || !ids_fit(&r->isr) || !ids_fit(&r->elr) || !ids_fit(&r->last_known_elr) ||
	    !ids_fit(&r->removing) || !ids_fit(&r->adding) || r->leader < -1 ||
	    (r->leader_recovery_state != 0 && r->leader_recovery_state != 1))
		return refuse(err, errlen, "PartitionRecord: topic %s partition %" PRId32 ": bad replicas, leader or state",
			      n->t.name, r->partition_id);
	if (n->t.partition_n == n->partition_cap) {
		int32_t cap = n->partition_cap ? 2 * n->partition_cap : 1;
		if (cap > SLUICE_PARTITIONS_PER_TOPIC_MAX)
			cap = SLUICE_PARTITIONS_PER_TOPIC_MAX;
		struct sluice_image_partition *p = realloc(n->t.partitions, (size_t)cap * sizeof *p);
		if (!p)
			return refuse(err, errlen, "PartitionRecord: out of memory");
		n->t.partitions = p;
		n->partition_cap = cap;
	}
	struct sluice_image_partition *p = &n->t.partitions[n->t.partition_n];
	memset(p, 0, sizeof *p);
	ids_copy(&p->replicas, &r->replicas);
	ids_copy(&p->isr, &r->isr);
	ids_copy(&p->removing, &r->removing);
	ids_copy(&p->adding, &r->adding);
	ids_copy(&p->elr, &r->elr);
	ids_copy(&p->last_known_elr, &r->last_known_elr);
	p->leader = r->leader;
	p->leader_epoch = r->leader_epoch;
	p->partition_epoch = r->partition_epoch;
	p->leader_recovery_state = r->leader_recovery_state;
	n->t.partition_n++;
	img->partition_total++;
	return 0;
}

/* Kafka's PartitionRegistration.merge: the fields present replace the
 * current ones; a leader field (even naming the same leader) bumps the
 * leader epoch; every change bumps the partition epoch. */
static int apply_partition_change(struct sluice_image *img, const struct sluice_mrec_partition_change *c, char *err,
				  size_t errlen)
{
	struct topic_node *n = topic_node_by_id(img, c->topic_id);
	if (!n)
		return refuse(err, errlen, "PartitionChangeRecord: partition %" PRId32 " of unknown topic id %s",
			      c->partition_id, idhex(c->topic_id).s);
	if (c->partition_id < 0 || c->partition_id >= n->t.partition_n)
		return refuse(err, errlen, "PartitionChangeRecord: topic %s has no partition %" PRId32, n->t.name,
			      c->partition_id);
	if ((c->has_isr && !ids_fit(&c->isr)) || (c->has_replicas && !ids_fit(&c->replicas)) ||
	    (c->has_elr && !ids_fit(&c->elr)) || (c->has_last_known_elr && !ids_fit(&c->last_known_elr)) ||
	    (c->has_removing && !ids_fit(&c->removing)) || (c->has_adding && !ids_fit(&c->adding)) ||
	    (c->has_leader && c->leader < -1) ||
	    (c->has_leader_recovery_state && c->leader_recovery_state != 0 && c->leader_recovery_state != 1))
		return refuse(err, errlen, "PartitionChangeRecord: topic %s partition %" PRId32 ": bad replicas, leader or state",
			      n->t.name, c->partition_id);
	struct sluice_image_partition *p = &n->t.partitions[c->partition_id];
	if (c->has_replicas)
		ids_copy(&p->replicas, &c->replicas);
	if (c->has_isr)
		ids_copy(&p->isr, &c->isr);
	if (c->has_elr)
		ids_copy(&p->elr, &c->elr);
	if (c->has_last_known_elr)
		ids_copy(&p->last_known_elr, &c->last_known_elr);
	if (c->has_removing)
		ids_copy(&p->removing, &c->removing);
	if (c->has_adding)
		ids_copy(&p->adding, &c->adding);
	if (c->has_leader) {
		p->leader = c->leader;
		p->leader_epoch++;
	}
	if (c->has_leader_recovery_state)
		p->leader_recovery_state = c->leader_recovery_state;
	p->partition_epoch++;
	return 0;
}

/* ---- configs --------------------------------------------------------------------- */

static struct resource *resource_find(const struct sluice_image *img, int8_t type, const char *name)
{
	if (!img->resource_n)
		return NULL;
	return img->resources[resource_slot(img, type, name, resource_hash(type, name))];
}

/* The index of config name in r, or where it would go (*found false). */
static int32_t entry_index(const struct resource *r, const char *name, bool *found)
{
	int32_t lo = 0, hi = r->n;
	while (lo < hi) {
		int32_t mid = lo + (hi - lo) / 2;
		if (strcmp(r->entries[mid].name, name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = lo < r->n && strcmp(r->entries[lo].name, name) == 0;
	return lo;
}

static void resource_unlink(struct sluice_image *img, struct resource *r)
{
	table_remove((void **)img->resources, img->resource_cap, resource_slot(img, r->type, r->name, r->hash),
		     resource_home);
	img->resource_n--;
	img->config_n -= (size_t)r->n;
	resource_free(r);
}

static void configs_delete_resource(struct sluice_image *img, int8_t type, const char *name)
{
	struct resource *r = resource_find(img, type, name);
	if (r)
		resource_unlink(img, r);
}

static int config_delete(struct sluice_image *img, const struct sluice_mrec_config *c)
{
	struct resource *r = resource_find(img, c->resource_type, c->resource_name);
	bool found = false;
	int32_t i = r ? entry_index(r, c->name, &found) : 0;
	if (!found)
		return 0; /* deleting an override that is not there changes nothing, as in Kafka */
	free(r->entries[i].name);
	memmove(&r->entries[i], &r->entries[i + 1], (size_t)(r->n - i - 1) * sizeof r->entries[0]);
	r->n--;
	img->config_n--;
	if (r->n == 0)
		resource_unlink(img, r);
	return 0;
}

/* Set one config: every allocation first, then the change. */
static int config_set(struct sluice_image *img, const struct sluice_mrec_config *c, char *err, size_t errlen)
{
	struct resource *r = resource_find(img, c->resource_type, c->resource_name);
	bool found = false;
	int32_t i = r ? entry_index(r, c->name, &found) : 0;
	if (!found && img->config_n >= SLUICE_IMAGE_CONFIGS_MAX)
		return refuse(err, errlen, "ConfigRecord: already %d configs", SLUICE_IMAGE_CONFIGS_MAX);
	size_t nlen = strlen(c->name), vlen = strlen(c->value);
	char *text = malloc(nlen + vlen + 2);
	struct resource *fresh = r ? NULL : calloc(1, sizeof *fresh);
	if (!text || (!r && (!fresh || resources_reserve(img) != 0)))
		goto oom;
	struct resource *dst = r ? r : fresh;
	if (!found && dst->n == dst->cap) {
		int32_t cap = dst->cap ? 2 * dst->cap : 4;
		struct config_entry *e = realloc(dst->entries, (size_t)cap * sizeof *e);
		if (!e)
			goto oom;
		dst->entries = e;
		dst->cap = cap;
	}
	memcpy(text, c->name, nlen + 1);
	memcpy(text + nlen + 1, c->value, vlen + 1);
	if (fresh) {
		fresh->type = c->resource_type;
		snprintf(fresh->name, sizeof fresh->name, "%s", c->resource_name);
		fresh->hash = resource_hash(fresh->type, fresh->name);
		img->resources[resource_slot(img, fresh->type, fresh->name, fresh->hash)] = fresh;
		img->resource_n++;
	}
	if (found) {
		free(dst->entries[i].name);
	} else {
		memmove(&dst->entries[i + 1], &dst->entries[i], (size_t)(dst->n - i) * sizeof dst->entries[0]);
		dst->n++;
		img->config_n++;
	}
	dst->entries[i].name = text;
	dst->entries[i].value = text + nlen + 1;
	return 0;
oom:
	free(text);
	if (fresh)
		free(fresh->entries);
	free(fresh);
	return refuse(err, errlen, "ConfigRecord: out of memory");
}

static int apply_config(struct sluice_image *img, const struct sluice_mrec_config *c, char *err, size_t errlen)
{
	if (c->resource_type != SLUICE_MREC_RESOURCE_TOPIC && c->resource_type != SLUICE_MREC_RESOURCE_BROKER)
		return refuse(err, errlen, "ConfigRecord: resource type %d is not TOPIC (2) or BROKER (4)",
			      c->resource_type);
	if (!str_fits(c->resource_name, SLUICE_TOPIC_NAME_MAX) || !str_fits(c->name, SLUICE_MREC_NAME_MAX) ||
	    !c->name[0] || (!c->value_null && !str_fits(c->value, SLUICE_MREC_CONFIG_VALUE_MAX)))
		return refuse(err, errlen, "ConfigRecord: names or value empty or beyond limits");
	/* Topic configs live and die with their topic (RemoveTopicRecord deletes them). */
	if (c->resource_type == SLUICE_MREC_RESOURCE_TOPIC &&
	    !topic_node_by_name(img, c->resource_name, strlen(c->resource_name)))
		return refuse(err, errlen, "ConfigRecord: %s of unknown topic %s", c->name, c->resource_name);
	if (c->value_null)
		return config_delete(img, c);
	return config_set(img, c, err, errlen);
}

const char *sluice_image_config(const struct sluice_image *img, int8_t resource_type, const char *resource_name,
				const char *name)
{
	const struct resource *r = resource_find(img, resource_type, resource_name);
	bool found = false;
	int32_t i = r ? entry_index(r, name, &found) : 0;
	return found ? r->entries[i].value : NULL;
}

int sluice_image_configs(const struct sluice_image *img, int8_t resource_type, const char *resource_name,
			 int (*fn)(void *arg, const char *name, const char *value), void *arg)
{
	const struct resource *r = resource_find(img, resource_type, resource_name);
	for (int32_t i = 0; r && i < r->n; i++) {
		int rc = fn(arg, r->entries[i].name, r->entries[i].value);
		if (rc)
			return rc;
	}
	return 0;
}

/* ---- producer ids, dispatch ----------------------------------------------------------- */

int64_t sluice_image_next_producer_id(const struct sluice_image *img) { return img->next_producer_id; }

static int apply_producer_ids(struct sluice_image *img, int64_t next, char *err, size_t errlen)
{
	/* As Kafka's ProducerIdControlManager.replay: each block starts past the last. */
	if (next < 0 || (img->has_producer_ids && next <= img->next_producer_id))
		return refuse(err, errlen, "ProducerIdsRecord: next producer id %" PRId64 " is not after %" PRId64, next,
			      img->next_producer_id);
	img->next_producer_id = next;
	img->has_producer_ids = true;
	return 0;
}

static int apply_record(struct sluice_image *img, const struct sluice_mrec *r, char *err, size_t errlen)
{
	switch (r->type) {
	case SLUICE_MREC_REGISTER_BROKER:
		return apply_register_broker(img, &r->register_broker, err, errlen);
	case SLUICE_MREC_UNREGISTER_BROKER:
	case SLUICE_MREC_FENCE_BROKER:
	case SLUICE_MREC_UNFENCE_BROKER:
	case SLUICE_MREC_BROKER_REGISTRATION_CHANGE:
		return apply_broker_change(img, r, err, errlen);
	case SLUICE_MREC_TOPIC:
		return apply_topic(img, r->topic.name, r->topic.topic_id, err, errlen);
	case SLUICE_MREC_PARTITION:
		return apply_partition(img, &r->partition, err, errlen);
	case SLUICE_MREC_PARTITION_CHANGE:
		return apply_partition_change(img, &r->partition_change, err, errlen);
	case SLUICE_MREC_REMOVE_TOPIC:
		return apply_remove_topic(img, r->remove_topic.topic_id, err, errlen);
	case SLUICE_MREC_CONFIG:
		return apply_config(img, &r->config, err, errlen);
	case SLUICE_MREC_PRODUCER_IDS:
		return apply_producer_ids(img, r->producer_ids.next_producer_id, err, errlen);
	case SLUICE_MREC_FEATURE_LEVEL: /* Sluice negotiates no features: the record only takes its offset */
	case SLUICE_MREC_NO_OP:
		return 0;
	}
	return refuse(err, errlen, "metadata record type %d unknown", (int)r->type);
}

int sluice_image_apply(struct sluice_image *img, const struct sluice_mrec *r, int64_t offset, char *err, size_t errlen)
{
	if (offset < -1 || (offset >= 0 && offset <= img->offset))
		return refuse(err, errlen, "%s at offset %" PRId64 ": not after the last applied offset %" PRId64,
			      sluice_mrec_type_name(r->type), offset, img->offset);
	if (apply_record(img, r, err, errlen) != 0)
		return -1;
	if (offset >= 0)
		img->offset = offset;
	return 0;
}

/* ---- encode, equal ------------------------------------------------------------------- */

static int encode_brokers(const struct sluice_image *img, struct sluice_mrec *r,
			  int (*fn)(void *arg, const struct sluice_mrec *r), void *arg)
{
	for (size_t i = 0; i < img->broker_n; i++) {
		const struct sluice_image_broker *b = &img->brokers[i];
		memset(r, 0, sizeof *r);
		r->type = SLUICE_MREC_REGISTER_BROKER;
		struct sluice_mrec_register_broker *rb = &r->register_broker;
		rb->broker_id = b->id;
		memcpy(rb->incarnation_id, b->incarnation_id, 16);
		rb->broker_epoch = b->epoch;
		rb->endpoint_n = b->endpoint_n;
		memcpy(rb->endpoints, b->endpoints, sizeof rb->endpoints);
		memcpy(rb->rack, b->rack, sizeof rb->rack);
		rb->fenced = b->fenced;
		rb->in_controlled_shutdown = b->in_controlled_shutdown;
		int rc = fn(arg, r);
		if (rc)
			return rc;
	}
	return 0;
}

static int encode_topic(const struct sluice_image_topic *t, struct sluice_mrec *r,
			int (*fn)(void *arg, const struct sluice_mrec *r), void *arg)
{
	memset(r, 0, sizeof *r);
	r->type = SLUICE_MREC_TOPIC;
	memcpy(r->topic.name, t->name, sizeof r->topic.name);
	memcpy(r->topic.topic_id, t->id, 16);
	int rc = fn(arg, r);
	for (int32_t i = 0; !rc && i < t->partition_n; i++) {
		const struct sluice_image_partition *p = &t->partitions[i];
		memset(r, 0, sizeof *r);
		r->type = SLUICE_MREC_PARTITION;
		struct sluice_mrec_partition *rp = &r->partition;
		rp->partition_id = i;
		memcpy(rp->topic_id, t->id, 16);
		rp->replicas = p->replicas;
		rp->isr = p->isr;
		rp->removing = p->removing;
		rp->adding = p->adding;
		rp->elr = p->elr;
		rp->last_known_elr = p->last_known_elr;
		rp->leader = p->leader;
		rp->leader_recovery_state = p->leader_recovery_state;
		rp->leader_epoch = p->leader_epoch;
		rp->partition_epoch = p->partition_epoch;
		rc = fn(arg, r);
	}
	return rc;
}

static int resource_cmp(const void *a, const void *b)
{
	const struct resource *x = *(const struct resource *const *)a, *y = *(const struct resource *const *)b;
	return x->type != y->type ? (x->type < y->type ? -1 : 1) : strcmp(x->name, y->name);
}

/* Configs after the topics they belong to, resources in (type, name) order. */
static int encode_configs(const struct sluice_image *img, struct sluice_mrec *r,
			  int (*fn)(void *arg, const struct sluice_mrec *r), void *arg)
{
	if (!img->resource_n)
		return 0;
	struct resource **all = malloc(img->resource_n * sizeof *all);
	if (!all)
		return -1;
	size_t n = 0;
	for (size_t i = 0; i < img->resource_cap; i++)
		if (img->resources[i])
			all[n++] = img->resources[i];
	assert(n == img->resource_n);
	qsort(all, n, sizeof *all, resource_cmp);
	int rc = 0;
	for (size_t k = 0; !rc && k < n; k++) {
		for (int32_t i = 0; !rc && i < all[k]->n; i++) {
			memset(r, 0, sizeof *r);
			r->type = SLUICE_MREC_CONFIG;
			r->config.resource_type = all[k]->type;
			snprintf(r->config.resource_name, sizeof r->config.resource_name, "%s", all[k]->name);
			snprintf(r->config.name, sizeof r->config.name, "%s", all[k]->entries[i].name);
			snprintf(r->config.value, sizeof r->config.value, "%s", all[k]->entries[i].value);
			rc = fn(arg, r);
		}
	}
	free(all);
	return rc;
}

int sluice_image_encode(const struct sluice_image *img, int (*fn)(void *arg, const struct sluice_mrec *r), void *arg)
{
	struct sluice_mrec *r = malloc(sizeof *r);
	if (!r)
		return -1;
	int rc = encode_brokers(img, r, fn, arg);
	sorted_refresh(img);
	for (size_t i = 0; !rc && i < img->topic_n; i++)
		rc = encode_topic(&img->sorted[i]->t, r, fn, arg);
	if (!rc)
		rc = encode_configs(img, r, fn, arg);
	if (!rc && img->has_producer_ids) {
		/* as Kafka's ProducerIdsImage writes it: no requesting broker */
		memset(r, 0, sizeof *r);
		r->type = SLUICE_MREC_PRODUCER_IDS;
		r->producer_ids.broker_id = -1;
		r->producer_ids.broker_epoch = -1;
		r->producer_ids.next_producer_id = img->next_producer_id;
		rc = fn(arg, r);
	}
	free(r);
	return rc;
}

static bool broker_equal(const struct sluice_image_broker *a, const struct sluice_image_broker *b)
{
	if (a->id != b->id || memcmp(a->incarnation_id, b->incarnation_id, 16) != 0 || a->epoch != b->epoch ||
	    a->endpoint_n != b->endpoint_n || strcmp(a->rack, b->rack) != 0 || a->fenced != b->fenced ||
	    a->in_controlled_shutdown != b->in_controlled_shutdown)
		return false;
	for (int32_t i = 0; i < a->endpoint_n; i++) {
		const struct sluice_mrec_endpoint *x = &a->endpoints[i], *y = &b->endpoints[i];
		if (strcmp(x->name, y->name) != 0 || strcmp(x->host, y->host) != 0 || x->port != y->port ||
		    x->security_protocol != y->security_protocol)
			return false;
	}
	return true;
}

static bool topic_equal(const struct sluice_image_topic *a, const struct sluice_image_topic *b)
{
	if (strcmp(a->name, b->name) != 0 || memcmp(a->id, b->id, 16) != 0 || a->partition_n != b->partition_n)
		return false;
	for (int32_t i = 0; i < a->partition_n; i++) {
		const struct sluice_image_partition *x = &a->partitions[i], *y = &b->partitions[i];
		if (!ids_equal(&x->replicas, &y->replicas) || !ids_equal(&x->isr, &y->isr) ||
		    !ids_equal(&x->elr, &y->elr) || !ids_equal(&x->last_known_elr, &y->last_known_elr) ||
		    !ids_equal(&x->removing, &y->removing) || !ids_equal(&x->adding, &y->adding) ||
		    x->leader != y->leader || x->leader_epoch != y->leader_epoch ||
		    x->partition_epoch != y->partition_epoch || x->leader_recovery_state != y->leader_recovery_state)
			return false;
	}
	return true;
}

static bool configs_equal(const struct sluice_image *a, const struct sluice_image *b)
{
	if (a->resource_n != b->resource_n || a->config_n != b->config_n)
		return false;
	for (size_t s = 0; s < a->resource_cap; s++) {
		const struct resource *x = a->resources[s];
		if (!x)
			continue;
		const struct resource *y = resource_find(b, x->type, x->name);
		if (!y || x->n != y->n)
			return false;
		for (int32_t i = 0; i < x->n; i++)
			if (strcmp(x->entries[i].name, y->entries[i].name) != 0 ||
			    strcmp(x->entries[i].value, y->entries[i].value) != 0)
				return false;
	}
	return true;
}

bool sluice_image_equal(const struct sluice_image *a, const struct sluice_image *b)
{
	if (a->offset != b->offset || a->has_producer_ids != b->has_producer_ids ||
	    a->next_producer_id != b->next_producer_id || a->broker_n != b->broker_n || a->topic_n != b->topic_n ||
	    a->partition_total != b->partition_total)
		return false;
	for (size_t i = 0; i < a->broker_n; i++)
		if (!broker_equal(&a->brokers[i], &b->brokers[i]))
			return false;
	sorted_refresh(a);
	sorted_refresh(b);
	for (size_t i = 0; i < a->topic_n; i++)
		if (!topic_equal(&a->sorted[i]->t, &b->sorted[i]->t))
			return false;
	return configs_equal(a, b);
}
