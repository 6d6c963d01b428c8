/* File-backed local metadata authority (see meta.h).
 *
 * On disk: a snapshot, <dir>/sluice-topics (a text line per topic and per
 * deletion tombstone, replaced atomically: temp file, fsync, rename, directory
 * fsync), and a journal of the changes made since, <dir>/sluice-topics.journal
 * (records framed by length and CRC-32C, appended with one write and one
 * fdatasync per committed batch). Open replays the journal over the snapshot
 * and drops a torn last record; the snapshot is rewritten only when the
 * journal has grown past twice its size, so a change costs O(changed topics)
 * amortised, not a rewrite of every topic. A file that does not parse stops
 * the open with what was found: metadata is never taken as empty.
 *
 * Changes arrive as batches on a bounded queue and are committed by one
 * writer thread: it takes the batches queued together (up to one batch's
 * worth of changes; a validate-only batch alone), stages them, appends the
 * journal once and fdatasyncs, publishes, and then completes each batch.
 * The synchronous operations submit a one-change batch and wait for it.
 *
 * In memory: writers serialise on `lock` and stage their changes in a batch
 * (one clone of the topic pointer array per batch, new topics merged in once
 * at commit), persist them, and publish the new snapshot under `pub_lock`,
 * which readers hold only while they take a reference. A hash set of the
 * names folded as Kafka compares them ('.' and '_' alike) makes the existence
 * and collision checks O(1). */
#include "control/meta.h"
#include "control/assignment.h"
#include "common/config.h"
#include "common/crc32c.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* One journal record or snapshot line: a topic with its name, id and up to
 * 32 percent-encoded configs. */
#define RECORD_BYTES_MAX 32768
_Static_assert(RECORD_BYTES_MAX > 40 + SLUICE_TOPIC_NAME_MAX +
				   SLUICE_TOPIC_CONFIGS_MAX * (2 + SLUICE_TOPIC_CONFIG_KEY_MAX + 3 * SLUICE_TOPIC_CONFIG_VALUE_MAX),
	       "a topic line fits one record");
#define RECORD_HEADER_BYTES 8 /* u32 length, u32 CRC-32C of the payload, little-endian */
/* The journal may grow to twice the snapshot plus this before the snapshot is rewritten. */
#define JOURNAL_SLACK_BYTES (1u << 20)
#define NAME_SET_MIN 1024u
_Static_assert((NAME_SET_MIN & (NAME_SET_MIN - 1)) == 0, "power of two");
_Static_assert((uint64_t)SLUICE_TOPICS_MAX * 4 + 4 <= UINT32_MAX, "the name set, at most half full, has uint32_t slots");
_Static_assert(RECORD_BYTES_MAX <= UINT32_MAX && RECORD_HEADER_BYTES == 2 * sizeof(uint32_t),
	       "a record's length fits its u32 header field");
/* A "deleted <name> <partitions> <id>" line. */
#define DELETED_LINE_BYTES 400
_Static_assert(sizeof "deleted " + SLUICE_TOPIC_NAME_MAX + sizeof " -2147483648 " + 32 <= DELETED_LINE_BYTES &&
		       DELETED_LINE_BYTES <= RECORD_BYTES_MAX,
	       "a deleted line fits its buffer and one record");
#define SNAPSHOT_MAGIC "# sluice topic metadata v"
#define SNAPSHOT_HEADER                                                                                              \
	"# sluice topic metadata v2: topic <name> <partitions> <id> [key=value ...] | deleted <name> <partitions> " \
	"<id>; generation "

struct meta_local {
	pthread_mutex_t lock;     /* writers, the staged batch, the files */
	pthread_mutex_t pub_lock; /* readers: held only to take a reference on current */
	struct sluice_meta_snapshot *current;
	char dir[1024], path[1100], jpath[1200];
	int32_t default_partitions;
	/* Producer ids are handed out from blocks whose end is persisted
	 * before any id in them is used, so a restart never repeats one. */
	int64_t pid_next, pid_block_end;
	char pid_path[1100];
	bool found;          /* open found a snapshot */
	uint64_t generation; /* of the snapshot; the journal names the one it extends */
	int jfd;             /* journal, appending; -1: rewrite the snapshot at the next commit */
	uint64_t jbytes, snap_bytes;
	struct sluice_meta_tombstone *tombs;
	uint32_t tomb_n, tomb_cap;
	/* Live topics of the staged state by folded name (open addressing). */
	struct sluice_topic **names;
	uint32_t names_cap, names_n;
	/* The batch being staged (writer lock held by `owner`). */
	pthread_t owner; /* 0: none; read atomically */
	struct sluice_meta_snapshot *work; /* clone of current, made at the first change */
	uint8_t *dead;                     /* work entries deleted in this batch */
	uint32_t dead_n;
	struct sluice_topic **added; /* created in this batch, unsorted; NULL once deleted again */
	uint32_t added_n, added_cap, added_live;
	char *jbuf; /* journal records of this batch */
	size_t jlen, jcap;
	uint32_t tomb_n_at_begin;
	bool changed, oom;
	bool replaying; /* open: no journal records */
	/* This node, as every snapshot describes it (sluice_meta_local_set_node):
	 * one broker, and the state every partition shares. */
	struct sluice_meta_broker self_broker;
	struct sluice_partition_state self_state;
	bool node_set;
	struct sluice_meta_local_stats stats; /* under lock */
	/* The writer thread and its queue of submitted batches (under q_lock). */
	pthread_t writer;
	bool writer_running;
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;  /* a batch was queued, or stopping */
	pthread_cond_t q_space; /* changes were completed */
	struct sluice_meta_batch *q_head, *q_tail;
	uint32_t q_changes; /* submitted, not yet completed */
	bool stopping;
};
_Static_assert(SLUICE_META_QUEUE_CHANGES_MAX <= UINT32_MAX / 2, "q_changes holds the queue and one batch more");

#define PRODUCER_ID_BLOCK 1000
_Static_assert(PRODUCER_ID_BLOCK > 0, "a block holds ids");

static size_t record_at(const char *buf, size_t len, size_t pos);

/* Staging runs with the writer lock held (by the writer thread, or by the
 * thread between batch_begin and batch_commit), or at open before anything
 * else can see m. A trylock on a held default mutex answers EBUSY; on a
 * free one it takes it, and the assertion this feeds fails. */
static bool staging_locked(struct meta_local *m)
{
	return m->replaying || pthread_mutex_trylock(&m->lock) == EBUSY;
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

/* ---- topics and snapshots ------------------------------------------------ */

/* Topics are immutable and shared between snapshots by reference count, so
 * a new snapshot costs one pointer per topic, not a copy of each topic; each
 * is allocated with room for its own configs only. */
static size_t topic_size(int32_t config_n)
{
	return offsetof(struct sluice_topic, configs) + (size_t)config_n * sizeof(struct sluice_topic_config);
}

/* Copies into a caller's full-size struct. */
static void topic_copy_out(struct sluice_topic *out, const struct sluice_topic *t)
{
	if (out)
		memcpy(out, t, topic_size(t->config_n));
}

static void topic_unref(struct sluice_topic *t)
{
	if (!t)
		return;
	int refs = __atomic_sub_fetch(&t->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 0); /* one release per reference */
	if (refs == 0)
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
	pthread_mutex_lock(&m->pub_lock);
	struct sluice_meta_snapshot *s = m->current;
	int refs = __atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 2); /* current's own reference and this one */
	pthread_mutex_unlock(&m->pub_lock);
	return s;
}

static void ml_release(void *self, struct sluice_meta_snapshot *s)
{
	(void)self;
	if (!s)
		return;
	int refs = __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	assert(refs >= 0); /* one release per acquire */
	if (refs == 0)
		snap_free(s);
}

static struct sluice_meta_snapshot *snap_clone(const struct sluice_meta_snapshot *cur)
{
	struct sluice_meta_snapshot *s = calloc(1, sizeof *s);
	if (!s)
		return NULL;
	s->topics = malloc((cur->topic_n + 1) * sizeof *s->topics);
	if (!s->topics) {
		free(s);
		return NULL;
	}
	assert(__atomic_load_n(&cur->refs, __ATOMIC_ACQUIRE) >= 1);
	for (uint32_t i = 0; i < cur->topic_n; i++) {
		s->topics[i] = cur->topics[i];
		int refs = __atomic_add_fetch(&s->topics[i]->refs, 1, __ATOMIC_ACQ_REL);
		assert(refs >= 2); /* cur's and the clone's */
	}
	s->topic_n = cur->topic_n;
	s->broker_n = cur->broker_n;
	s->brokers = cur->brokers;
	s->version = cur->version + 1;
	s->refs = 1;
	return s;
}

static bool ml_is_current(void *self, const struct sluice_meta_snapshot *snap)
{
	struct meta_local *m = self;
	return __atomic_load_n(&m->current, __ATOMIC_ACQUIRE) == snap;
}

static void publish(struct meta_local *m, struct sluice_meta_snapshot *s)
{
	assert(s->refs == 1 && s->version > m->current->version); /* the writer's, handed to current */
	/* This node is its own controller; the offset is the version (meta.h). */
	s->controller_id = m->node_set ? m->self_broker.node_id : -1;
	s->metadata_offset = (int64_t)s->version;
	pthread_mutex_lock(&m->pub_lock);
	struct sluice_meta_snapshot *old = m->current;
	__atomic_store_n(&m->current, s, __ATOMIC_RELEASE); /* read without the lock by ml_is_current */
	pthread_mutex_unlock(&m->pub_lock);
	ml_release(m, old);
}

/* ---- the folded-name set --------------------------------------------------- */

static char fold(char c)
{
	return c == '.' ? '_' : c;
}

static uint32_t fold_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)fold(s[i])) * 16777619u;
	return h;
}

static bool fold_eq(const char *a, size_t alen, const char *b)
{
	if (strlen(b) != alen)
		return false;
	for (size_t i = 0; i < alen; i++)
		if (fold(a[i]) != fold(b[i]))
			return false;
	return true;
}

/* The slot holding the topic whose folded name equals name's, or the empty
 * slot where it would go. */
static uint32_t names_slot(const struct meta_local *m, const char *name, size_t len)
{
	/* A power of two, never full: the probe ends. */
	assert((m->names_cap & (m->names_cap - 1)) == 0 && m->names_n < m->names_cap);
	uint32_t mask = m->names_cap - 1;
	uint32_t i = fold_hash(name, len) & mask;
	while (m->names[i] && !fold_eq(name, len, m->names[i]->name))
		i = (i + 1) & mask;
	return i;
}

static int names_insert(struct meta_local *m, struct sluice_topic *t)
{
	if ((m->names_n + 1) * 2 > m->names_cap) {
		uint32_t cap = m->names_cap * 2;
		struct sluice_topic **old = m->names, **nn = calloc(cap, sizeof *nn);
		if (!nn)
			return -1;
		uint32_t old_cap = m->names_cap;
		m->names = nn;
		m->names_cap = cap;
		for (uint32_t i = 0; i < old_cap; i++)
			if (old[i])
				m->names[names_slot(m, old[i]->name, strlen(old[i]->name))] = old[i];
		free(old);
	}
	uint32_t s = names_slot(m, t->name, strlen(t->name));
	assert(!m->names[s]);
	m->names[s] = t;
	m->names_n++;
	assert(m->names_n * 2 <= m->names_cap);
	return 0;
}

static void names_remove(struct meta_local *m, uint32_t slot)
{
	assert(m->names[slot]);
	uint32_t mask = m->names_cap - 1;
	m->names[slot] = NULL;
	m->names_n--;
	for (uint32_t i = (slot + 1) & mask; m->names[i]; i = (i + 1) & mask) {
		struct sluice_topic *t = m->names[i];
		m->names[i] = NULL;
		m->names[names_slot(m, t->name, strlen(t->name))] = t;
	}
}

static int names_rebuild(struct meta_local *m, const struct sluice_meta_snapshot *s)
{
	uint32_t cap = NAME_SET_MIN;
	while (cap < s->topic_n * 2 + 2)
		cap *= 2;
	struct sluice_topic **nn = calloc(cap, sizeof *nn);
	if (!nn)
		return -1;
	free(m->names);
	m->names = nn;
	m->names_cap = cap;
	m->names_n = 0;
	for (uint32_t i = 0; i < s->topic_n; i++)
		(void)names_insert(m, s->topics[i]); /* cannot grow: cap holds them */
	assert(m->names_n == s->topic_n && m->names_cap == cap);
	return 0;
}

/* The live topic of the staged state named exactly name, or NULL. */
static struct sluice_topic *staged_find(const struct meta_local *m, const char *name, size_t len, uint32_t *slot)
{
	uint32_t s = names_slot(m, name, len);
	if (slot)
		*slot = s;
	struct sluice_topic *t = m->names[s];
	return t && cmp_name(name, len, t->name) == 0 ? t : NULL;
}

/* ---- tombstones --------------------------------------------------------------- */

static int tomb_add(struct meta_local *m, const char *name, const uint8_t id[16], int32_t partitions)
{
	if (m->tomb_n == m->tomb_cap) {
		uint32_t cap = m->tomb_cap ? m->tomb_cap * 2 : 16;
		struct sluice_meta_tombstone *nt = realloc(m->tombs, cap * sizeof *nt);
		if (!nt)
			return -1;
		m->tombs = nt;
		m->tomb_cap = cap;
	}
	assert(strlen(name) < sizeof m->tombs[0].name && m->tomb_n < m->tomb_cap);
	struct sluice_meta_tombstone *t = &m->tombs[m->tomb_n++];
	snprintf(t->name, sizeof t->name, "%s", name);
	memcpy(t->id, id, 16);
	t->partitions = partitions;
	return 0;
}

static struct sluice_meta_tombstone *tomb_find(const struct meta_local *m, const uint8_t id[16])
{
	for (uint32_t i = 0; i < m->tomb_n; i++)
		if (!memcmp(m->tombs[i].id, id, 16))
			return &m->tombs[i];
	return NULL;
}

static void tomb_drop(struct meta_local *m, const uint8_t id[16])
{
	struct sluice_meta_tombstone *t = tomb_find(m, id);
	if (t)
		*t = m->tombs[--m->tomb_n];
}

/* ---- record text ----------------------------------------------------------------- */

static void hex16(const uint8_t id[16], char out[33])
{
	static const char d[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		out[2 * i] = d[id[i] >> 4];
		out[2 * i + 1] = d[id[i] & 15];
	}
	out[32] = '\0';
}

static int parse_hex16(const char *h, uint8_t out[16])
{
	if (strlen(h) != 32)
		return -1;
	for (int i = 0; i < 32; i++) {
		char c = h[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
		if (v < 0)
			return -1;
		out[i / 2] = (uint8_t)(i % 2 ? (out[i / 2] << 4) | v : v);
	}
	return 0;
}

/* "topic <name> <partitions> <id> [key=value ...]" without newline; values are
 * percent-encoded so spaces and newlines survive. Returns the length. */
static size_t fmt_topic(char *buf, size_t cap, const struct sluice_topic *t)
{
	char id[33];
	hex16(t->id, id);
	size_t n = (size_t)snprintf(buf, cap, "topic %s %d %s", t->name, t->partitions, id);
	for (int32_t c = 0; c < t->config_n && n < cap; c++) {
		n += (size_t)snprintf(buf + n, cap - n, " %s=", t->configs[c].key);
		for (const char *v = t->configs[c].value; *v && n + 4 < cap; v++) {
			if (*v == ' ' || *v == '%' || *v == '\n' || *v == '\r' || *v == '\t')
				n += (size_t)snprintf(buf + n, cap - n, "%%%02X", (unsigned char)*v);
			else
				buf[n++] = *v;
		}
	}
	assert(n < cap);
	buf[n] = '\0';
	return n;
}

static size_t fmt_deleted(char *buf, size_t cap, const char *name, int32_t partitions, const uint8_t id[16])
{
	char hex[33];
	hex16(id, hex);
	int n = snprintf(buf, cap, "deleted %s %d %s", name, partitions, hex);
	assert(n > 0 && (size_t)n < cap);
	return (size_t)n;
}

/* Appends one framed record to the batch's journal buffer. */
static void jrec_add(struct meta_local *m, const char *payload, size_t len)
{
	if (m->replaying)
		return;
	assert(len > 0 && len <= RECORD_BYTES_MAX);
	if (m->jlen + RECORD_HEADER_BYTES + len > m->jcap) {
		size_t cap = m->jcap ? m->jcap * 2 : 65536;
		while (cap < m->jlen + RECORD_HEADER_BYTES + len)
			cap *= 2;
		char *nb = realloc(m->jbuf, cap);
		if (!nb) {
			m->oom = true;
			return;
		}
		m->jbuf = nb;
		m->jcap = cap;
	}
	uint8_t *h = (uint8_t *)m->jbuf + m->jlen;
	uint32_t crc = sluice_crc32c(0, payload, len);
	for (int i = 0; i < 4; i++) {
		h[i] = (uint8_t)(len >> (8 * i));
		h[4 + i] = (uint8_t)(crc >> (8 * i));
	}
	memcpy(h + RECORD_HEADER_BYTES, payload, len);
	m->jlen += RECORD_HEADER_BYTES + len;
	/* The record reads back as open will read it. */
	assert(record_at(m->jbuf, m->jlen, m->jlen - RECORD_HEADER_BYTES - len) == RECORD_HEADER_BYTES + len);
}

static void jrec_topic(struct meta_local *m, const struct sluice_topic *t)
{
	if (m->replaying)
		return;
	char buf[RECORD_BYTES_MAX];
	jrec_add(m, buf, fmt_topic(buf, sizeof buf, t));
}

/* ---- staging a batch ------------------------------------------------------------ */

static bool in_batch(const struct meta_local *m)
{
	pthread_t o = __atomic_load_n(&m->owner, __ATOMIC_ACQUIRE);
	return o && pthread_equal(o, pthread_self());
}

static void stage_reset(struct meta_local *m)
{
	m->work = NULL;
	free(m->dead);
	m->dead = NULL;
	m->dead_n = 0;
	m->added_n = m->added_live = 0;
	m->jlen = 0;
	m->tomb_n_at_begin = m->tomb_n;
	m->changed = m->oom = false;
}

/* The batch's private copy of the topic array, made at its first change. */
static int stage_work(struct meta_local *m)
{
	assert(staging_locked(m));
	if (!m->work && !(m->work = snap_clone(m->current)))
		return -1;
	if (!m->dead && !(m->dead = calloc(m->work->topic_n + 1, 1)))
		return -1;
	return 0;
}

static uint32_t live_count(const struct meta_local *m)
{
	return m->names_n;
}

static uint32_t work_index(const struct meta_local *m, const char *name)
{
	size_t lo = 0, hi = m->work->topic_n, len = strlen(name);
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = cmp_name(name, len, m->work->topics[mid]->name);
		if (c == 0)
			return (uint32_t)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	assert(!"a staged topic is in the work array");
	return 0;
}

static bool is_added(const struct meta_local *m, const struct sluice_topic *t)
{
	return t->stage_index < m->added_n && m->added[t->stage_index] == t;
}

/* Every partition of a local topic is this node's: one shared state. */
static void topic_place(const struct meta_local *m, struct sluice_topic *t)
{
	t->states = m->node_set ? &m->self_state : NULL;
	t->state_n = 1;
}

/* New topic t (one reference, owned by the batch from here on). */
static int stage_add(struct meta_local *m, struct sluice_topic *t)
{
	if (stage_work(m) < 0)
		return -1;
	if (m->added_n == m->added_cap) {
		uint32_t cap = m->added_cap ? m->added_cap * 2 : 64;
		struct sluice_topic **na = realloc(m->added, cap * sizeof *na);
		if (!na)
			return -1;
		m->added = na;
		m->added_cap = cap;
	}
	if (names_insert(m, t) < 0)
		return -1;
	topic_place(m, t);
	assert(t->refs == 1 && m->added_n < m->added_cap);
	t->stage_index = m->added_n;
	m->added[m->added_n++] = t;
	m->added_live++;
	assert(m->added_live <= m->added_n);
	m->changed = true;
	jrec_topic(m, t);
	return 0;
}

/* Replace live topic old by nt (same name). */
static int stage_replace(struct meta_local *m, struct sluice_topic *old, struct sluice_topic *nt, uint32_t slot)
{
	if (stage_work(m) < 0)
		return -1;
	assert(m->names[slot] == old && !strcmp(old->name, nt->name));
	m->names[slot] = nt;
	topic_place(m, nt);
	if (is_added(m, old)) {
		nt->stage_index = old->stage_index;
		m->added[old->stage_index] = nt;
	} else {
		uint32_t i = work_index(m, old->name);
		assert(m->work->topics[i] == old && !m->dead[i]);
		nt->stage_index = UINT32_MAX;
		m->work->topics[i] = nt;
	}
	topic_unref(old);
	m->changed = true;
	jrec_topic(m, nt);
	return 0;
}

/* Delete live topic t, leaving a tombstone. */
static int stage_remove(struct meta_local *m, struct sluice_topic *t, uint32_t slot)
{
	if (stage_work(m) < 0 || tomb_add(m, t->name, t->id, t->partitions) < 0)
		return -1;
	char buf[DELETED_LINE_BYTES];
	jrec_add(m, buf, fmt_deleted(buf, sizeof buf, t->name, t->partitions, t->id));
	names_remove(m, slot);
	if (is_added(m, t)) {
		m->added[t->stage_index] = NULL;
		m->added_live--;
		topic_unref(t);
	} else {
		uint32_t i = work_index(m, t->name);
		assert(m->work->topics[i] == t && !m->dead[i]);
		m->dead[i] = 1;
		m->dead_n++;
	}
	assert(m->dead_n <= m->work->topic_n && live_count(m) == m->work->topic_n - m->dead_n + m->added_live);
	m->changed = true;
	return 0;
}

static int cmp_topic_ptr(const void *a, const void *b)
{
	return strcmp((*(struct sluice_topic *const *)a)->name, (*(struct sluice_topic *const *)b)->name);
}

/* The batch's result as a snapshot: the work array without its deleted
 * entries merged with the new topics, sorted; the references move to it. */
static struct sluice_meta_snapshot *stage_build(struct meta_local *m)
{
	struct sluice_meta_snapshot *w = m->work;
	uint32_t n = w->topic_n - m->dead_n + m->added_live, k = 0;
	assert(n == live_count(m));
	struct sluice_topic **add = malloc((m->added_live + 1) * sizeof *add);
	struct sluice_topic **out = malloc((n + 1) * sizeof *out);
	if (!add || !out) {
		free(add);
		free(out);
		return NULL;
	}
	for (uint32_t i = 0; i < m->added_n; i++)
		if (m->added[i])
			add[k++] = m->added[i];
	assert(k == m->added_live);
	qsort(add, k, sizeof *add, cmp_topic_ptr);
	uint32_t a = 0, o = 0;
	for (uint32_t i = 0; i < w->topic_n; i++) {
		if (m->dead[i]) {
			topic_unref(w->topics[i]);
			continue;
		}
		while (a < k && strcmp(add[a]->name, w->topics[i]->name) < 0)
			out[o++] = add[a++];
		out[o++] = w->topics[i];
	}
	while (a < k)
		out[o++] = add[a++];
	assert(o == n);
	free(add);
	free(w->topics);
	w->topics = out;
	w->topic_n = n;
	m->work = NULL;
	m->added_n = m->added_live = 0;
	return w;
}

/* Throw the staged batch away and return to the published state. */
static void stage_discard(struct meta_local *m)
{
	if (m->work)
		snap_free(m->work);
	for (uint32_t i = 0; i < m->added_n; i++)
		topic_unref(m->added[i]);
	assert(m->tomb_n >= m->tomb_n_at_begin); /* a batch only adds tombstones */
	m->tomb_n = m->tomb_n_at_begin;
	if (m->changed && names_rebuild(m, m->current) < 0)
		SLOG_ERR("meta", "out of memory rebuilding the topic name index");
	stage_reset(m);
}

/* ---- files -------------------------------------------------------------------- */

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	close(fd);
	return rc;
}

static int write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Rewrite the snapshot as s plus the tombstones, then start an empty journal
 * of the next generation. Once the snapshot is renamed in, the state is
 * durable: a journal that cannot be created only means the next commit
 * rewrites the snapshot again (the old journal names an older generation
 * and is ignored at open). */
static int compact(struct meta_local *m, const struct sluice_meta_snapshot *s)
{
	uint64_t gen = m->generation + 1;
	assert(staging_locked(m) && s->topic_n <= SLUICE_TOPICS_MAX);
	char tmp[1300];
	snprintf(tmp, sizeof tmp, "%s.tmp", m->path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	static char line[RECORD_BYTES_MAX];
	fprintf(f, "%s%llu\n", SNAPSHOT_HEADER, (unsigned long long)gen);
	for (uint32_t i = 0; i < s->topic_n; i++) {
		fmt_topic(line, sizeof line, s->topics[i]);
		fprintf(f, "%s\n", line);
	}
	for (uint32_t i = 0; i < m->tomb_n; i++) {
		fmt_deleted(line, sizeof line, m->tombs[i].name, m->tombs[i].partitions, m->tombs[i].id);
		fprintf(f, "%s\n", line);
	}
	long size = ftell(f);
	int rc = fflush(f) == 0 && fsync(fileno(f)) == 0 ? 0 : -1;
	if (fclose(f) != 0)
		rc = -1;
	if (rc < 0 || rename(tmp, m->path) < 0)
		return -1;
	(void)fsync_dir(m->dir);
	m->stats.snapshot_writes++;
	m->generation = gen;
	m->snap_bytes = size > 0 ? (uint64_t)size : 0;
	m->found = true;
	if (m->jfd >= 0)
		close(m->jfd);
	m->jfd = -1;
	char jtmp[1300], hdr[64], rec[RECORD_HEADER_BYTES + 64];
	snprintf(jtmp, sizeof jtmp, "%s.tmp", m->jpath);
	size_t hl = (size_t)snprintf(hdr, sizeof hdr, "generation %llu", (unsigned long long)gen);
	uint32_t crc = sluice_crc32c(0, hdr, hl);
	for (int i = 0; i < 4; i++) {
		rec[i] = (char)(hl >> (8 * i));
		rec[4 + i] = (char)(crc >> (8 * i));
	}
	memcpy(rec + RECORD_HEADER_BYTES, hdr, hl);
	assert(hl < sizeof hdr && record_at(rec, RECORD_HEADER_BYTES + hl, 0) == RECORD_HEADER_BYTES + hl);
	int fd = open(jtmp, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0 || write_all(fd, rec, RECORD_HEADER_BYTES + hl) < 0 || fdatasync(fd) < 0 || rename(jtmp, m->jpath) < 0) {
		SLOG_WARN("meta", "cannot start %s: %s; the next change rewrites %s again", m->jpath, strerror(errno), m->path);
		if (fd >= 0)
			close(fd);
		return 0;
	}
	(void)fsync_dir(m->dir);
	m->jfd = fd;
	m->jbytes = RECORD_HEADER_BYTES + hl;
	return 0;
}

/* Append the batch's records with one write and one fdatasync. A failed
 * append is cut off again so that later records never follow garbage. */
static int journal_append(struct meta_local *m)
{
	assert(m->jfd >= 0 && m->jlen > 0 && !m->oom);
	if (write_all(m->jfd, m->jbuf, m->jlen) == 0 && fdatasync(m->jfd) == 0) {
		m->jbytes += m->jlen;
		m->stats.journal_appends++;
		return 0;
	}
	int e = errno;
	if (ftruncate(m->jfd, (off_t)m->jbytes) < 0) {
		close(m->jfd);
		m->jfd = -1;
	}
	errno = e;
	return -1;
}

/* Persist and publish the staged batch; on failure nothing of it happened. */
static int16_t stage_commit(struct meta_local *m, char *msg, size_t msglen)
{
	assert(staging_locked(m) && !m->replaying);
	if (!m->changed) {
		stage_discard(m);
		return 0;
	}
	struct sluice_meta_snapshot *s = m->oom ? NULL : stage_build(m);
	if (!s) {
		stage_discard(m);
		snprintf(msg, msglen, "out of memory staging topic metadata");
		return KERR_KAFKA_STORAGE_ERROR;
	}
	s->version = m->current->version + 1;
	int rc;
	if (m->jfd < 0 || m->jbytes + m->jlen > 2 * m->snap_bytes + JOURNAL_SLACK_BYTES)
		rc = compact(m, s);
	else
		rc = journal_append(m);
	if (rc < 0) {
		snprintf(msg, msglen, "cannot persist topic metadata: %s", strerror(errno));
		SLOG_ERR("meta", "%s", msg);
		snap_free(s);
		stage_discard(m);
		return KERR_KAFKA_STORAGE_ERROR;
	}
	publish(m, s);
	stage_reset(m);
	assert(m->current == s && !m->work);
	return 0;
}

/* ---- staging one change (writer lock held, a batch being staged) ------------------- */

/* This node is the one broker there is: registered and active. */
static bool self_is(const void *arg, int32_t id)
{
	const struct meta_local *m = arg;
	return m->node_set && id == m->self_broker.node_id;
}

/* A manual assignment (a->n >= 1) under Kafka's rules, with this node the
 * only broker: every partition's one replica is this node. rf: -1 for a
 * new topic, else the topic's (1). */
static int16_t check_assignment(const struct meta_local *m, const struct sluice_assignment *a, int32_t rf,
				int32_t first_partition, char *msg, size_t msglen)
{
	if (a->n > SLUICE_ASSIGNMENT_LISTS_MAX) {
		snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", a->n, SLUICE_ASSIGNMENT_LISTS_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	int32_t *order = malloc((size_t)a->n * sizeof *order);
	if (!order) {
		snprintf(msg, msglen, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	const struct sluice_assignment_brokers self = {self_is, self_is, m};
	int16_t e = sluice_assignment_check(a, rf, first_partition, &self, order, msg, msglen);
	free(order);
	return e;
}

static int16_t check_create(const struct meta_local *m, const struct sluice_meta_change *c, int32_t *parts, char *msg,
			    size_t msglen)
{
	if (!sluice_topic_name_valid(c->name, c->name_len)) {
		snprintf(msg, msglen, "Topic name is invalid: '%.*s' (legal characters are [a-zA-Z0-9._-], length 1-249)",
			 (int)(c->name_len > 249 ? 249 : c->name_len), c->name);
		return KERR_INVALID_TOPIC_EXCEPTION;
	}
	if (c->assignment && c->assignment->n > 0) {
		*parts = c->assignment->n;
		int16_t e = sluice_assignment_check_counts(c->partitions, c->replication_factor, msg, msglen);
		if (!e)
			e = check_assignment(m, c->assignment, -1, 0, msg, msglen);
		return e ? e : sluice_topic_configs_check(c->configs, c->config_n, msg, msglen);
	}
	*parts = c->partitions == -1 ? m->default_partitions : c->partitions;
	if (*parts <= 0 || *parts > SLUICE_PARTITIONS_PER_TOPIC_MAX) {
		snprintf(msg, msglen, "Number of partitions was set to an invalid non-positive value.");
		if (*parts > 0)
			snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", *parts, SLUICE_PARTITIONS_PER_TOPIC_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	if (c->replication_factor != -1 && c->replication_factor != 1) {
		if (c->replication_factor <= 0)
			snprintf(msg, msglen, "Replication factor must be larger than 0, or -1 to use the default value.");
		else
			snprintf(msg, msglen, "Unable to replicate the partition %d time(s): The target replication factor of %d cannot be reached because only 1 broker(s) are registered.",
				 c->replication_factor, c->replication_factor);
		return KERR_INVALID_REPLICATION_FACTOR;
	}
	return sluice_topic_configs_check(c->configs, c->config_n, msg, msglen);
}

/* Kafka rejects a name that exists, or collides once '.' and '_' are treated alike. */
static int16_t check_new_name(const struct meta_local *m, const char *name, size_t len, char *msg, size_t msglen)
{
	struct sluice_topic *o = m->names[names_slot(m, name, len)];
	if (o && cmp_name(name, len, o->name) == 0) {
		snprintf(msg, msglen, "Topic '%.*s' already exists.", (int)len, name);
		return KERR_TOPIC_ALREADY_EXISTS;
	}
	if (o) {
		snprintf(msg, msglen, "Topic '%.*s' collides with an existing topic ('.' and '_' are treated alike).",
			 (int)len, name);
		return KERR_INVALID_TOPIC_EXCEPTION;
	}
	if (live_count(m) >= SLUICE_TOPICS_MAX) {
		snprintf(msg, msglen, "Topic limit %d reached.", SLUICE_TOPICS_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	return 0;
}

static void new_topic_id(struct sluice_topic *t, const uint8_t *id)
{
	if (id) {
		memcpy(t->id, id, 16);
		return;
	}
	if (getrandom(t->id, sizeof t->id, 0) != (ssize_t)sizeof t->id)
		memset(t->id, 0x5a, sizeof t->id);
	t->id[6] = (uint8_t)((t->id[6] & 0x0f) | 0x40);
	t->id[8] = (uint8_t)((t->id[8] & 0x3f) | 0x80);
}

/* The change's outputs describing topic t. */
static void change_result(struct sluice_meta_change *c, const struct sluice_topic *t)
{
	memcpy(c->topic_id, t->id, 16);
	c->topic_partitions = t->partitions;
	topic_copy_out(c->topic_out, t);
}

static int16_t stage_create(struct meta_local *m, struct sluice_meta_change *c, bool validate_only)
{
	int32_t parts = 0;
	int16_t code = check_create(m, c, &parts, c->msg, sizeof c->msg);
	if (!code)
		code = check_new_name(m, c->name, c->name_len, c->msg, sizeof c->msg);
	if (code || validate_only) {
		if (!code && c->topic_out) {
			memset(c->topic_out, 0, sizeof *c->topic_out);
			memcpy(c->topic_out->name, c->name, c->name_len);
			c->topic_out->partitions = parts;
		}
		c->topic_partitions = code ? 0 : parts;
		return code;
	}
	struct sluice_topic *t = calloc(1, topic_size(c->config_n));
	if (!t) {
		snprintf(c->msg, sizeof c->msg, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	memcpy(t->name, c->name, c->name_len);
	t->partitions = parts;
	t->refs = 1;
	new_topic_id(t, c->id);
	t->config_n = c->config_n;
	if (c->config_n)
		memcpy(t->configs, c->configs, sizeof t->configs[0] * (size_t)c->config_n);
	sluice_topic_limits_parse(&t->limits, t->configs, t->config_n);
	if (stage_add(m, t) < 0) {
		free(t);
		snprintf(c->msg, sizeof c->msg, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	change_result(c, t);
	SLOG_INFO("meta", "created topic %s with %d partition(s)", t->name, parts);
	return 0;
}

static int16_t stage_delete(struct meta_local *m, struct sluice_meta_change *c, bool validate_only)
{
	uint32_t slot;
	struct sluice_topic *t = staged_find(m, c->name, c->name_len, &slot);
	if (!t) {
		snprintf(c->msg, sizeof c->msg, "This server does not host this topic-partition.");
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	}
	change_result(c, t);
	if (validate_only)
		return 0;
	if (stage_remove(m, t, slot) < 0) {
		snprintf(c->msg, sizeof c->msg, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	SLOG_INFO("meta", "deleted topic %.*s", (int)c->name_len, c->name);
	return 0;
}

static int16_t grow_partitions(const struct meta_local *m, struct sluice_topic *t, const struct sluice_meta_change *c,
			       char *msg, size_t msglen)
{
	int32_t count = c->partitions;
	if (count <= t->partitions) {
		snprintf(msg, msglen, "Topic currently has %d partitions, which is higher than the requested %d.",
			 t->partitions, count);
		if (count == t->partitions)
			snprintf(msg, msglen, "Topic already has %d partitions.", t->partitions);
		return KERR_INVALID_PARTITIONS;
	}
	if (count > SLUICE_PARTITIONS_PER_TOPIC_MAX) {
		snprintf(msg, msglen, "Number of partitions %d is above the limit %d.", count, SLUICE_PARTITIONS_PER_TOPIC_MAX);
		return KERR_INVALID_PARTITIONS;
	}
	const struct sluice_assignment *a = c->assignment;
	if (a && a->n > 0 && a->n != count - t->partitions) {
		snprintf(msg, msglen, "Attempted to add %d additional partition(s), but only %d assignment(s) were specified.",
			 count - t->partitions, a->n);
		return KERR_INVALID_REPLICA_ASSIGNMENT;
	}
	int16_t e = a && a->n > 0 ? check_assignment(m, a, 1, t->partitions, msg, msglen) : 0;
	if (e)
		return e;
	t->partitions = count;
	return 0;
}

static int16_t replace_configs(struct sluice_topic *t, const struct sluice_meta_change *c, char *msg, size_t msglen)
{
	int16_t e = sluice_topic_configs_check(c->configs, c->config_n, msg, msglen);
	if (e)
		return e;
	t->config_n = c->config_n;
	if (c->config_n)
		memcpy(t->configs, c->configs, sizeof *c->configs * (size_t)c->config_n);
	sluice_topic_limits_parse(&t->limits, t->configs, t->config_n);
	return 0;
}

/* Apply the change's kind to a copy of the named topic and stage the copy in its place. */
static int16_t stage_modify(struct meta_local *m, struct sluice_meta_change *c, bool validate_only)
{
	assert(c->kind == SLUICE_META_CREATE_PARTITIONS || c->kind == SLUICE_META_SET_TOPIC_CONFIGS);
	uint32_t slot;
	struct sluice_topic *cur = staged_find(m, c->name, c->name_len, &slot);
	if (!cur) {
		snprintf(c->msg, sizeof c->msg, "Topic '%.*s' does not exist.", (int)(c->name_len > 249 ? 249 : c->name_len),
			 c->name);
		return KERR_UNKNOWN_TOPIC_OR_PARTITION;
	}
	struct sluice_topic *nt = malloc(sizeof *nt);
	if (!nt) {
		snprintf(c->msg, sizeof c->msg, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	topic_copy_out(nt, cur);
	nt->refs = 1;
	int16_t e = c->kind == SLUICE_META_CREATE_PARTITIONS ? grow_partitions(m, nt, c, c->msg, sizeof c->msg)
							     : replace_configs(nt, c, c->msg, sizeof c->msg);
	if (e || validate_only) {
		if (!e)
			change_result(c, nt);
		free(nt);
		return e;
	}
	struct sluice_topic *trimmed = realloc(nt, topic_size(nt->config_n));
	if (trimmed)
		nt = trimmed;
	if (stage_replace(m, cur, nt, slot) < 0) {
		free(nt);
		snprintf(c->msg, sizeof c->msg, "out of memory");
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	change_result(c, nt);
	if (c->kind == SLUICE_META_CREATE_PARTITIONS)
		SLOG_INFO("meta", "topic %.*s now has %d partition(s)", (int)c->name_len, c->name, nt->partitions);
	else
		SLOG_INFO("meta", "topic %.*s configs updated (%d override(s))", (int)c->name_len, c->name, c->config_n);
	return 0;
}

/* Producer ids are handed out from blocks whose end is persisted before
 * any id in them is used, so a restart never repeats one. */
static int64_t pid_allocate(struct meta_local *m)
{
	assert(staging_locked(m) && m->pid_next <= m->pid_block_end);
	if (m->pid_next >= m->pid_block_end) {
		int64_t end = m->pid_block_end + PRODUCER_ID_BLOCK;
		char tmp[1200];
		snprintf(tmp, sizeof tmp, "%s.tmp", m->pid_path);
		FILE *f = fopen(tmp, "w");
		int ok = f && fprintf(f, "%lld\n", (long long)end) > 0 && fflush(f) == 0 && fsync(fileno(f)) == 0;
		if (f)
			fclose(f);
		if (!ok || rename(tmp, m->pid_path) < 0) {
			SLOG_ERR("meta", "cannot persist the producer id block: %s", strerror(errno));
			return -1;
		}
		m->pid_next = m->pid_block_end;
		m->pid_block_end = end;
	}
	assert(m->pid_next < m->pid_block_end);
	return m->pid_next++;
}

/* Drops tombstone id with an unsynced journal record: a lost record only
 * keeps the tombstone until the next start. Outside any staged batch,
 * since a discarded batch restores the tombstone count. */
static void forget_now(struct meta_local *m, const uint8_t id[16])
{
	assert(!m->changed && staging_locked(m));
	if (!tomb_find(m, id))
		return;
	tomb_drop(m, id);
	char buf[64], hex[33];
	hex16(id, hex);
	size_t n = (size_t)snprintf(buf, sizeof buf, "forget %s", hex);
	jrec_add(m, buf, n);
	if (m->jfd >= 0 && !m->oom && write_all(m->jfd, m->jbuf, m->jlen) == 0)
		m->jbytes += m->jlen;
	else if (m->jfd >= 0 && ftruncate(m->jfd, (off_t)m->jbytes) < 0) {
		close(m->jfd);
		m->jfd = -1;
	}
	stage_reset(m);
}

/* One change of a batch being staged; FORGET_DELETED waits for the commit. */
static int16_t stage_change(struct meta_local *m, struct sluice_meta_change *c, bool validate_only)
{
	switch (c->kind) {
	case SLUICE_META_CREATE_TOPIC:
		return stage_create(m, c, validate_only);
	case SLUICE_META_DELETE_TOPIC:
		return stage_delete(m, c, validate_only);
	case SLUICE_META_CREATE_PARTITIONS:
	case SLUICE_META_SET_TOPIC_CONFIGS:
		return stage_modify(m, c, validate_only);
	case SLUICE_META_ALLOCATE_PRODUCER_ID:
		c->producer_id = validate_only ? -1 : pid_allocate(m);
		if (c->producer_id >= 0 || validate_only)
			return 0;
		snprintf(c->msg, sizeof c->msg, "cannot persist the producer id block");
		return KERR_KAFKA_STORAGE_ERROR;
	case SLUICE_META_FORGET_DELETED:
		return 0;
	}
	snprintf(c->msg, sizeof c->msg, "unknown metadata change kind %d", (int)c->kind);
	return KERR_INVALID_REQUEST;
}

/* Whether the change is part of the staged (journalled) state, so that a
 * failed commit undoes it. */
static bool change_staged(const struct sluice_meta_change *c)
{
	return c->kind == SLUICE_META_CREATE_TOPIC || c->kind == SLUICE_META_DELETE_TOPIC ||
	       c->kind == SLUICE_META_CREATE_PARTITIONS || c->kind == SLUICE_META_SET_TOPIC_CONFIGS;
}

/* ---- the metadata writer: a queue of batches and the thread that commits them ---------- */

/* Stages every change of the group, commits once (one journal append, one
 * fdatasync), publishes; on a failed commit, every staged change reports it. */
static void writer_commit(struct meta_local *m, struct sluice_meta_batch *group)
{
	pthread_mutex_lock(&m->lock);
	assert(!m->work && !m->changed && !in_batch(m));
	stage_reset(m);
	for (struct sluice_meta_batch *b = group; b; b = b->next)
		for (uint32_t i = 0; i < b->change_n; i++) {
			struct sluice_meta_change *c = &b->changes[i];
			c->error = 0;
			c->msg[0] = '\0';
			c->producer_id = -1;
			c->error = stage_change(m, c, b->validate_only);
		}
	char cmsg[SLUICE_META_MSG_MAX];
	int16_t ce = stage_commit(m, cmsg, sizeof cmsg);
	assert(!m->work && !m->changed);
	for (struct sluice_meta_batch *b = group; b; b = b->next)
		for (uint32_t i = 0; i < b->change_n; i++) {
			struct sluice_meta_change *c = &b->changes[i];
			if (b->validate_only || c->error)
				continue;
			if (ce && change_staged(c)) {
				c->error = ce;
				snprintf(c->msg, sizeof c->msg, "%s", cmsg);
			} else if (c->kind == SLUICE_META_FORGET_DELETED)
				forget_now(m, c->id);
		}
	uint64_t version = m->current->version;
	m->stats.commits++;
	pthread_mutex_unlock(&m->lock);
	for (struct sluice_meta_batch *b = group; b; b = b->next)
		b->version = version;
}

/* Takes the next group off the queue (q_lock held): the first batch and,
 * unless it is validate-only (checked alone against published state), the
 * changing batches after it while the group stays within one batch's size. */
static struct sluice_meta_batch *writer_take(struct meta_local *m, uint32_t *change_n)
{
	struct sluice_meta_batch *first = m->q_head, *last = first;
	assert(first);
	uint32_t n = first->change_n;
	while (!first->validate_only && last->next && !last->next->validate_only &&
	       n + last->next->change_n <= SLUICE_META_BATCH_CHANGES_MAX) {
		last = last->next;
		n += last->change_n;
	}
	m->q_head = last->next;
	if (!m->q_head)
		m->q_tail = NULL;
	last->next = NULL;
	assert(n <= SLUICE_META_BATCH_CHANGES_MAX && n <= m->q_changes);
	*change_n = n;
	return first;
}

static void *writer_main(void *arg)
{
	struct meta_local *m = arg;
	pthread_mutex_lock(&m->q_lock);
	for (;;) {
		while (!m->q_head && !m->stopping)
			pthread_cond_wait(&m->q_cond, &m->q_lock);
		if (!m->q_head)
			break;
		uint32_t n;
		struct sluice_meta_batch *group = writer_take(m, &n);
		pthread_mutex_unlock(&m->q_lock);
		writer_commit(m, group);
		for (struct sluice_meta_batch *b = group, *next; b; b = next) {
			next = b->next; /* done may free b */
			b->next = NULL;
			b->done(b);
		}
		pthread_mutex_lock(&m->q_lock);
		assert(m->q_changes >= n);
		m->q_changes -= n;
		pthread_cond_broadcast(&m->q_space);
	}
	pthread_mutex_unlock(&m->q_lock);
	return NULL;
}

/* Queues batch; wait: block while the queue is full instead of answering BUSY. */
static enum sluice_meta_submit_result queue_push(struct meta_local *m, struct sluice_meta_batch *b, bool wait)
{
	assert(b->done && (b->changes || b->change_n == 0));
	if (b->change_n > SLUICE_META_BATCH_CHANGES_MAX)
		return SLUICE_META_TOO_LARGE;
	pthread_mutex_lock(&m->q_lock);
	assert(!m->stopping);
	while (m->q_changes + b->change_n > SLUICE_META_QUEUE_CHANGES_MAX) {
		if (!wait) {
			pthread_mutex_unlock(&m->q_lock);
			return SLUICE_META_BUSY;
		}
		pthread_cond_wait(&m->q_space, &m->q_lock);
	}
	m->q_changes += b->change_n;
	b->next = NULL;
	if (m->q_tail)
		m->q_tail->next = b;
	else
		m->q_head = b;
	m->q_tail = b;
	pthread_cond_signal(&m->q_cond);
	pthread_mutex_unlock(&m->q_lock);
	return SLUICE_META_SUBMITTED;
}

static enum sluice_meta_submit_result ml_submit(void *self, struct sluice_meta_batch *b)
{
	return queue_push(self, b, false);
}

static int writer_start(struct meta_local *m)
{
	pthread_mutex_init(&m->q_lock, NULL);
	pthread_cond_init(&m->q_cond, NULL);
	pthread_cond_init(&m->q_space, NULL);
	if (pthread_create(&m->writer, NULL, writer_main, m) != 0)
		return -1;
	m->writer_running = true;
	return 0;
}

/* Completes what is queued, then ends the thread. */
static void writer_stop(struct meta_local *m)
{
	if (!m->writer_running)
		return;
	pthread_mutex_lock(&m->q_lock);
	m->stopping = true;
	pthread_cond_signal(&m->q_cond);
	pthread_mutex_unlock(&m->q_lock);
	pthread_join(m->writer, NULL);
	assert(!m->q_head && m->q_changes == 0);
	m->writer_running = false;
}

/* ---- the synchronous operations: one-change batches, submitted and waited for ------------ */

static void sync_done(struct sluice_meta_batch *b)
{
	sem_post(b->arg);
}

/* Runs c: staged directly inside batch_begin/batch_commit (this thread holds
 * the writer lock), else as a batch of its own through the writer. */
static int16_t sync_change(struct meta_local *m, struct sluice_meta_change *c, bool validate_only)
{
	c->msg[0] = '\0';
	c->producer_id = -1;
	if (in_batch(m)) {
		assert(c->kind != SLUICE_META_FORGET_DELETED);
		c->error = stage_change(m, c, validate_only);
		return c->error;
	}
	assert(!m->writer_running || !pthread_equal(pthread_self(), m->writer));
	sem_t sem;
	sem_init(&sem, 0, 0);
	struct sluice_meta_batch b = {.changes = c, .change_n = 1, .validate_only = validate_only, .done = sync_done, .arg = &sem};
	enum sluice_meta_submit_result r = queue_push(m, &b, true);
	assert(r == SLUICE_META_SUBMITTED);
	while (sem_wait(&sem) < 0 && errno == EINTR)
		;
	sem_destroy(&sem);
	return c->error;
}

static int16_t sync_result(const struct sluice_meta_change *c, char *msg, size_t msglen)
{
	if (msg && msglen)
		snprintf(msg, msglen, "%s", c->msg);
	return c->error;
}

static int16_t ml_create(void *self, const struct sluice_topic_spec *spec, bool validate_only, char *msg,
			 size_t msglen, struct sluice_topic *out)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_CREATE_TOPIC, .name = spec->name, .name_len = spec->name_len,
				       .partitions = spec->partitions, .replication_factor = spec->replication_factor,
				       .configs = spec->configs, .config_n = spec->config_n, .id = spec->id, .topic_out = out};
	(void)sync_change(self, &c, validate_only);
	return sync_result(&c, msg, msglen);
}

static int16_t ml_delete(void *self, const char *name, size_t len, struct sluice_topic *out, char *msg, size_t msglen)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_DELETE_TOPIC, .name = name, .name_len = len, .topic_out = out};
	(void)sync_change(self, &c, false);
	return sync_result(&c, msg, msglen);
}

static void ml_forget_deleted(void *self, const uint8_t id[16])
{
	struct sluice_meta_change c = {.kind = SLUICE_META_FORGET_DELETED, .id = id};
	(void)sync_change(self, &c, false);
}

static int64_t ml_allocate_producer_id(void *self)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_ALLOCATE_PRODUCER_ID};
	(void)sync_change(self, &c, false);
	return c.producer_id;
}

static int16_t ml_create_partitions(void *self, const char *name, size_t len, int32_t count, bool validate_only,
				    char *msg, size_t msglen)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_CREATE_PARTITIONS, .name = name, .name_len = len, .partitions = count};
	(void)sync_change(self, &c, validate_only);
	return sync_result(&c, msg, msglen);
}

static int16_t ml_set_topic_configs(void *self, const char *name, size_t len, const struct sluice_topic_config *configs,
				    int32_t n, bool validate_only, char *msg, size_t msglen)
{
	struct sluice_meta_change c = {.kind = SLUICE_META_SET_TOPIC_CONFIGS, .name = name, .name_len = len,
				       .configs = configs, .config_n = n};
	(void)sync_change(self, &c, validate_only);
	return sync_result(&c, msg, msglen);
}

static void ml_batch_begin(void *self)
{
	struct meta_local *m = self;
	assert(!in_batch(m));
	pthread_mutex_lock(&m->lock);
	assert(!m->work && !m->changed);
	stage_reset(m);
	__atomic_store_n(&m->owner, pthread_self(), __ATOMIC_RELEASE);
}

static int16_t ml_batch_commit(void *self, char *msg, size_t msglen)
{
	struct meta_local *m = self;
	assert(in_batch(m));
	int16_t c = stage_commit(m, msg, msglen);
	__atomic_store_n(&m->owner, (pthread_t)0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&m->lock);
	return c;
}

static const struct sluice_meta_ops local_ops = {
	.acquire = ml_acquire,
	.is_current = ml_is_current,
	.release = ml_release,
	.submit = ml_submit,
	.create_topic = ml_create,
	.delete_topic = ml_delete,
	.allocate_producer_id = ml_allocate_producer_id,
	.create_partitions = ml_create_partitions,
	.set_topic_configs = ml_set_topic_configs,
	.batch_begin = ml_batch_begin,
	.batch_commit = ml_batch_commit,
	.forget_deleted = ml_forget_deleted,
};

/* ---- open: parse the snapshot, replay the journal -------------------------------- */

static int parse_int32(const char *s, int32_t min, int32_t max, int32_t *out)
{
	char *end;
	errno = 0;
	long v = s ? strtol(s, &end, 10) : 0;
	if (!s || !*s || *end || errno || v < min || v > max)
		return -1;
	*out = (int32_t)v;
	return 0;
}

/* "topic <name> <partitions> <id> [key=value ...]" (line is modified). */
static struct sluice_topic *parse_topic(char *line, char *err, size_t errlen)
{
	char *save = NULL;
	(void)strtok_r(line, " ", &save);
	char *name = strtok_r(NULL, " ", &save), *parts = strtok_r(NULL, " ", &save), *id = strtok_r(NULL, " ", &save);
	struct sluice_topic *t = calloc(1, sizeof *t);
	if (!t) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!name || !sluice_topic_name_valid(name, strlen(name)) || !id || parse_hex16(id, t->id) < 0 ||
	    parse_int32(parts, 1, SLUICE_PARTITIONS_PER_TOPIC_MAX, &t->partitions) < 0) {
		snprintf(err, errlen, "malformed topic line");
		free(t);
		return NULL;
	}
	snprintf(t->name, sizeof t->name, "%s", name);
	t->refs = 1;
	for (char *kv; (kv = strtok_r(NULL, " ", &save));) {
		char *eq = strchr(kv, '=');
		if (!eq || eq == kv || (size_t)(eq - kv) >= SLUICE_TOPIC_CONFIG_KEY_MAX || t->config_n >= SLUICE_TOPIC_CONFIGS_MAX) {
			snprintf(err, errlen, "malformed config '%.60s' in topic line", kv);
			free(t);
			return NULL;
		}
		*eq = '\0';
		snprintf(t->configs[t->config_n].key, SLUICE_TOPIC_CONFIG_KEY_MAX, "%s", kv);
		char *dst = t->configs[t->config_n].value;
		size_t n = 0;
		for (const char *v = eq + 1; *v && n + 1 < SLUICE_TOPIC_CONFIG_VALUE_MAX; v++) {
			unsigned x;
			if (*v == '%' && v[1] && v[2] && sscanf(v + 1, "%2X", &x) == 1) {
				dst[n++] = (char)x;
				v += 2;
			} else
				dst[n++] = *v;
		}
		dst[n] = '\0';
		t->config_n++;
	}
	assert(t->config_n <= SLUICE_TOPIC_CONFIGS_MAX && t->partitions >= 1);
	sluice_topic_limits_parse(&t->limits, t->configs, t->config_n);
	struct sluice_topic *trimmed = realloc(t, topic_size(t->config_n));
	return trimmed ? trimmed : t;
}

/* Applies one snapshot line or journal record (NUL-terminated, modified) to
 * the staged state: "topic ..." creates or replaces, "deleted <name> <n> <id>"
 * deletes the live topic of that id (if any) and keeps its tombstone,
 * "forget <id>" drops a tombstone. */
static int apply_line(struct meta_local *m, char *line, char *err, size_t errlen)
{
	assert(m->replaying); /* open only: nothing else sees m yet */
	if (!strncmp(line, "topic ", 6)) {
		struct sluice_topic *t = parse_topic(line, err, errlen);
		if (!t)
			return -1;
		uint32_t slot;
		struct sluice_topic *old = staged_find(m, t->name, strlen(t->name), &slot);
		if (!old && m->names[slot]) {
			snprintf(err, errlen, "topic %.60s collides with topic %.60s (. and _ alike)", t->name,
				 m->names[slot]->name);
			free(t);
			return -1;
		}
		if (!old && live_count(m) >= SLUICE_TOPICS_MAX) {
			snprintf(err, errlen, "more than %d topics", SLUICE_TOPICS_MAX);
			free(t);
			return -1;
		}
		if ((old ? stage_replace(m, old, t, slot) : stage_add(m, t)) < 0) {
			free(t);
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		return 0;
	}
	char *save = NULL, *kind = strtok_r(line, " ", &save);
	if (kind && !strcmp(kind, "deleted")) {
		char *name = strtok_r(NULL, " ", &save), *parts = strtok_r(NULL, " ", &save), *id = strtok_r(NULL, " ", &save);
		uint8_t uid[16];
		int32_t n;
		if (!name || !sluice_topic_name_valid(name, strlen(name)) || parse_int32(parts, 1, SLUICE_PARTITIONS_PER_TOPIC_MAX, &n) < 0 ||
		    !id || parse_hex16(id, uid) < 0 || strtok_r(NULL, " ", &save)) {
			snprintf(err, errlen, "malformed deleted line");
			return -1;
		}
		uint32_t slot;
		struct sluice_topic *t = staged_find(m, name, strlen(name), &slot);
		if (t && !memcmp(t->id, uid, 16))
			return stage_remove(m, t, slot) < 0 ? (snprintf(err, errlen, "out of memory"), -1) : 0;
		return tomb_add(m, name, uid, n) < 0 ? (snprintf(err, errlen, "out of memory"), -1) : 0;
	}
	if (kind && !strcmp(kind, "forget")) {
		char *id = strtok_r(NULL, " ", &save);
		uint8_t uid[16];
		if (!id || parse_hex16(id, uid) < 0) {
			snprintf(err, errlen, "malformed forget record");
			return -1;
		}
		tomb_drop(m, uid);
		return 0;
	}
	snprintf(err, errlen, "unknown line");
	return -1;
}

/* The whole file; -1 with errno (ENOENT: absent). */
static int read_whole(const char *path, char **buf, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return -1;
	}
	*buf = malloc((size_t)st.st_size + 1);
	size_t got = 0;
	errno = 0;
	while (*buf && got < (size_t)st.st_size) {
		ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	int e = !*buf ? ENOMEM : got != (size_t)st.st_size && errno == 0 ? EIO : errno;
	close(fd);
	if (!*buf || got != (size_t)st.st_size) {
		free(*buf);
		*buf = NULL;
		errno = e;
		return -1;
	}
	(*buf)[got] = '\0';
	*len = got;
	return 0;
}

#define REFUSE_HINT                                                                                               \
	"nothing was changed; restore the file from a backup (with sluice-topics.journal), or move it away if this " \
	"data directory is meant to start without topics"

static int load_snapshot(struct meta_local *m, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	if (read_whole(m->path, &buf, &len) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "cannot read %s: %s", m->path, strerror(errno));
		return -1;
	}
	m->found = true;
	m->snap_bytes = len;
	int rc = 0, lineno = 0;
	if (len == 0 || strncmp(buf, SNAPSHOT_MAGIC, strlen(SNAPSHOT_MAGIC)) != 0) {
		snprintf(err, errlen, "%s %s (a metadata file starts with the line '%s...'); %s", m->path,
			 len == 0 ? "is empty (0 bytes)" : "does not start with its header", SNAPSHOT_MAGIC, REFUSE_HINT);
		rc = -1;
	} else if (buf[len - 1] != '\n') {
		snprintf(err, errlen, "%s ends in the middle of a line (%zu bytes): it was cut short; %s", m->path, len, REFUSE_HINT);
		rc = -1;
	}
	const char *g = strstr(buf, "; generation ");
	if (!rc && g && g < strchr(buf, '\n'))
		m->generation = strtoull(g + 13, NULL, 10);
	for (char *line = buf, *nl; !rc && *line; line = nl + 1) {
		nl = strchr(line, '\n');
		*nl = '\0';
		lineno++;
		if (line[0] == '#' || line[0] == '\0')
			continue;
		char what[200] = "", copy[64];
		snprintf(copy, sizeof copy, "%.63s", line);
		if (nl - line > RECORD_BYTES_MAX)
			snprintf(what, sizeof what, "line longer than %d bytes", RECORD_BYTES_MAX);
		if (what[0] || apply_line(m, line, what, sizeof what) < 0) {
			snprintf(err, errlen, "%s:%d: %s: '%s...'; %s", m->path, lineno, what, copy, REFUSE_HINT);
			rc = -1;
		}
	}
	free(buf);
	return rc;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* The length of the valid record at buf[pos..len), or 0 (torn or damaged). */
static size_t record_at(const char *buf, size_t len, size_t pos)
{
	assert(pos <= len);
	if (len - pos < RECORD_HEADER_BYTES)
		return 0;
	uint32_t n = le32((const uint8_t *)buf + pos), crc = le32((const uint8_t *)buf + pos + 4);
	if (n == 0 || n > RECORD_BYTES_MAX || n > len - pos - RECORD_HEADER_BYTES)
		return 0;
	if (sluice_crc32c(0, buf + pos + RECORD_HEADER_BYTES, n) != crc)
		return 0;
	assert(RECORD_HEADER_BYTES + n <= len - pos);
	return RECORD_HEADER_BYTES + n;
}

/* Replays the journal's records if it extends this snapshot generation. A
 * torn last record (a crash during an append that was never acknowledged)
 * is cut off. */
static int load_journal(struct meta_local *m, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	if (read_whole(m->jpath, &buf, &len) < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "cannot read %s: %s", m->jpath, strerror(errno));
		return -1;
	}
	size_t r = record_at(buf, len, 0);
	char line[RECORD_BYTES_MAX + 1];
	unsigned long long gen = 0;
	if (r) {
		memcpy(line, buf + RECORD_HEADER_BYTES, r - RECORD_HEADER_BYTES);
		line[r - RECORD_HEADER_BYTES] = '\0';
	}
	if (!r || sscanf(line, "generation %llu", &gen) != 1) {
		snprintf(err, errlen, "%s does not start with its generation record (%zu bytes); %s", m->jpath, len, REFUSE_HINT);
		free(buf);
		return -1;
	}
	if (!m->found || gen > m->generation) {
		snprintf(err, errlen, "%s extends generation %llu but %s %s%llu: the snapshot is older than the journal; %s",
			 m->jpath, gen, m->path, m->found ? "is generation " : "is missing", (unsigned long long)m->generation,
			 REFUSE_HINT);
		free(buf);
		return -1;
	}
	if (gen < m->generation) { /* a rewrite of the snapshot already holds these changes */
		free(buf);
		return 0;
	}
	size_t pos = r;
	int records = 0;
	while (pos < len && (r = record_at(buf, len, pos)) > 0) {
		memcpy(line, buf + pos + RECORD_HEADER_BYTES, r - RECORD_HEADER_BYTES);
		line[r - RECORD_HEADER_BYTES] = '\0';
		char what[200] = "", copy[64];
		snprintf(copy, sizeof copy, "%.63s", line);
		if (apply_line(m, line, what, sizeof what) < 0) {
			snprintf(err, errlen, "%s: record %d at byte %zu: %s: '%s...'; %s", m->jpath, records + 1, pos, what, copy,
				 REFUSE_HINT);
			free(buf);
			return -1;
		}
		pos += r;
		records++;
	}
	assert(pos <= len && m->replaying);
	free(buf);
	int fd = open(m->jpath, O_WRONLY | O_APPEND | O_CLOEXEC);
	if (fd < 0 || (pos < len && (ftruncate(fd, (off_t)pos) < 0 || fdatasync(fd) < 0))) {
		snprintf(err, errlen, "cannot open %s for appending: %s", m->jpath, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (pos < len)
		SLOG_WARN("meta", "%s: cut off %zu byte(s) of an incomplete last record at byte %zu (a crash during an "
			  "append; that change was never acknowledged)", m->jpath, len - pos, pos);
	m->jfd = fd;
	m->jbytes = pos;
	if (records)
		SLOG_INFO("meta", "%s: %d change(s) replayed over %s", m->jpath, records, m->path);
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
	pthread_mutex_init(&m->pub_lock, NULL);
	snprintf(m->dir, sizeof m->dir, "%.1000s", dir);
	snprintf(m->path, sizeof m->path, "%.1000s/sluice-topics", dir);
	snprintf(m->jpath, sizeof m->jpath, "%.1000s/sluice-topics.journal", dir);
	m->default_partitions = default_partitions;
	m->jfd = -1;
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
	s->controller_id = -1; /* until sluice_meta_local_set_node */
	s->metadata_offset = 1;
	m->current = s;
	err[0] = '\0';
	m->replaying = true;
	stage_reset(m);
	int rc = names_rebuild(m, s);
	if (rc == 0)
		rc = load_snapshot(m, err, errlen);
	if (rc == 0)
		rc = load_journal(m, err, errlen);
	struct sluice_meta_snapshot *loaded = rc == 0 && m->changed && !m->oom ? stage_build(m) : NULL;
	if (rc < 0 || (m->changed && !loaded)) {
		if (!err[0])
			snprintf(err, errlen, "out of memory loading %s", m->path);
		stage_discard(m);
		if (m->jfd >= 0)
			close(m->jfd);
		snap_free(s);
		free(m->names);
		free(m->tombs);
		free(m->added);
		free(m);
		return -1;
	}
	if (loaded) {
		assert(loaded->refs == 1 && loaded->topic_n == live_count(m));
		loaded->version = 1;
		loaded->controller_id = -1;
		loaded->metadata_offset = 1;
		snap_free(s);
		m->current = loaded;
	}
	stage_reset(m);
	m->replaying = false;
	if (writer_start(m) < 0) {
		snprintf(err, errlen, "cannot start the metadata writer thread: %s", strerror(errno));
		out->ops = &local_ops;
		out->self = m;
		sluice_meta_local_close(out);
		return -1;
	}
	out->ops = &local_ops;
	out->self = m;
	return 0;
}

void sluice_meta_local_close(struct sluice_meta *mm)
{
	struct meta_local *m = mm->self;
	if (!m)
		return;
	writer_stop(m);
	assert(!m->work && !in_batch(m)); /* no batch left staged */
	pthread_mutex_destroy(&m->q_lock);
	pthread_cond_destroy(&m->q_cond);
	pthread_cond_destroy(&m->q_space);
	ml_release(m, m->current);
	if (m->jfd >= 0)
		close(m->jfd);
	pthread_mutex_destroy(&m->lock);
	pthread_mutex_destroy(&m->pub_lock);
	free(m->names);
	free(m->tombs);
	free(m->added);
	free(m->jbuf);
	free(m->dead);
	free(m);
	mm->self = NULL;
}

void sluice_meta_local_set_node(struct sluice_meta *mm, const struct sluice_config *cfg)
{
	struct meta_local *m = mm->self;
	assert(m && cfg && cfg->node_id >= 0);
	pthread_mutex_lock(&m->lock);
	struct sluice_meta_broker *b = &m->self_broker;
	b->node_id = cfg->node_id;
	b->port = cfg->advertised_port;
	snprintf(b->host, sizeof b->host, "%s", cfg->advertised_host);
	snprintf(b->rack, sizeof b->rack, "%s", cfg->broker_rack);
	struct sluice_partition_state *p = &m->self_state;
	memset(p, 0, sizeof *p);
	p->leader = cfg->node_id;
	p->leader_epoch = 0;
	p->replica_n = p->isr_n = 1;
	p->replicas[0] = p->isr[0] = cfg->node_id;
	m->node_set = true;
	/* Not yet shared with another thread (see meta.h): completed in place. */
	struct sluice_meta_snapshot *s = m->current;
	s->broker_n = 1;
	s->brokers = b;
	s->controller_id = cfg->node_id;
	s->metadata_offset = (int64_t)s->version;
	for (uint32_t i = 0; i < s->topic_n; i++)
		topic_place(m, s->topics[i]);
	pthread_mutex_unlock(&m->lock);
}

void sluice_meta_local_stats(const struct sluice_meta *mm, struct sluice_meta_local_stats *out)
{
	struct meta_local *m = mm->self;
	pthread_mutex_lock(&m->lock);
	*out = m->stats;
	pthread_mutex_unlock(&m->lock);
}

bool sluice_meta_local_found(const struct sluice_meta *mm)
{
	const struct meta_local *m = mm->self;
	return m->found;
}

const struct sluice_meta_tombstone *sluice_meta_local_tombstone(const struct sluice_meta *mm, const uint8_t id[16])
{
	return tomb_find(mm->self, id);
}

int sluice_meta_local_forget_all(struct sluice_meta *mm)
{
	struct meta_local *m = mm->self;
	pthread_mutex_lock(&m->lock);
	int rc = 0;
	if (m->tomb_n) {
		uint32_t n = m->tomb_n;
		m->tomb_n = 0;
		rc = compact(m, m->current);
		if (rc < 0)
			m->tomb_n = n;
	}
	pthread_mutex_unlock(&m->lock);
	return rc;
}

/* ---- partition.metadata (Kafka's: the topic id in each partition directory) ------------ */

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

void sluice_topic_id_base64(const uint8_t id[16], char out[23])
{
	uint32_t acc = 0;
	int bits = 0, n = 0;
	for (int i = 0; i < 16; i++) {
		acc = acc << 8 | id[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			out[n++] = b64url[(acc >> bits) & 63];
		}
	}
	out[n++] = b64url[(acc << (6 - bits)) & 63];
	out[n] = '\0';
	assert(n == 22);
}

static int topic_id_from_base64(const char *s, uint8_t id[16])
{
	uint32_t acc = 0;
	int bits = 0, n = 0;
	size_t len = strcspn(s, "\r\n");
	if (len != 22)
		return -1;
	for (size_t i = 0; i < len; i++) {
		const char *p = strchr(b64url, s[i]);
		if (!p || !s[i])
			return -1;
		acc = acc << 6 | (uint32_t)(p - b64url);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (n < 16)
				id[n++] = (uint8_t)(acc >> bits);
		}
	}
	return n == 16 ? 0 : -1;
}

int sluice_partition_metadata_read(const char *dir, uint8_t id[16])
{
	char path[1200], buf[256];
	snprintf(path, sizeof path, "%.1100s/partition.metadata", dir);
	FILE *f = fopen(path, "r");
	if (!f)
		return errno == ENOENT ? 0 : -1;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *v = strstr(buf, "version: 0\n"), *t = strstr(buf, "topic_id: ");
	if (v != buf || !t || topic_id_from_base64(t + 10, id) < 0)
		return -1;
	return 1;
}

int sluice_partition_metadata_write(const char *dir, const uint8_t id[16])
{
	char path[1200], tmp[1300], b64[23];
	snprintf(path, sizeof path, "%.1100s/partition.metadata", dir);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	sluice_topic_id_base64(id, b64);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return -1;
	int ok = fprintf(f, "version: 0\ntopic_id: %s\n", b64) > 0;
	ok = fclose(f) == 0 && ok;
	if (!ok || rename(tmp, path) < 0) {
		(void)unlink(tmp);
		return -1;
	}
	return 0;
}
