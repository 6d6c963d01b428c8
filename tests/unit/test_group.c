/* Group coordinator tests: dataplane/group.c driven directly with partops,
 * over a storage double kept here (each __consumer_offsets partition an
 * in-memory log of the batches the coordinator appends, read back by the
 * plog read calls it makes when it loads a partition; appends are written
 * when the test says so). A "restart" is a fresh coordinator on the same
 * logs. This suite runs under AddressSanitizer with leak detection, which
 * is what most of these tests are for: the commit, delete, expiry, join
 * and replay paths must free what they allocate. They prove that
 * OffsetDelete and its replay free the offsets they drop (the rebuilt
 * offset table used to drop a fresh copy of every topic name: about 1 MB
 * per request); that offsets, group ids and commit metadata keep embedded
 * NULs through a replay; that a body which does not decode changes nothing
 * (OffsetCommit, LeaveGroup); that commits for unknown topics are refused;
 * and that handed-out member ids scale with the group and expire. */
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/log.h"
#include "control/meta.h"
#include "dataplane/group.h"
#include "storage/plog.h"
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

/* ---- storage double --------------------------------------------------------- */

#define TLOG_BYTES_MAX (64u << 20)
#define WAITING_MAX 20000

struct spart {
	uint8_t *buf; /* batches back to back, base offsets set */
	size_t len;
	int64_t next_offset;
};

static struct spart parts[64];
static struct partop *waiting[WAITING_MAX];
static int nwaiting;
static int64_t now_ms = 1000000;
static int answered;

int64_t sluice_now_ms(void) { return now_ms; }
int sluice_store_core_for(const struct broker *b, const char *topic, int32_t partition)
{
	(void)b, (void)topic, (void)partition;
	return 0;
}
struct spart *sluice_store_partition(struct storecore *sc, const char *topic, int32_t partition, int16_t *error)
{
	(void)sc, (void)error;
	cr_assert_str_eq(topic, SLUICE_OFFSETS_TOPIC);
	cr_assert(partition >= 0 && partition < 64);
	return &parts[partition];
}
struct sluice_plog *sluice_store_log(struct spart *p) { return (struct sluice_plog *)p; }
void sluice_store_done(struct storecore *sc, struct partop *op)
{
	(void)sc, (void)op;
	answered++;
}
/* Leadership as the double's storage core reports it: whether this broker
 * leads every partition, at which leader epoch, and how many offsets past
 * the written end the logs hold (a follower's fetch not yet written). */
static bool leads = true;
static int32_t lead_epoch;
static int64_t unwritten;
/* The next append is refused with this Kafka error (0: accepted). */
static int16_t refuse_append;
bool sluice_store_leads(const struct storecore *sc, const struct spart *p, int32_t *leader_epoch)
{
	(void)sc, (void)p;
	*leader_epoch = lead_epoch;
	return leads;
}
void sluice_store_apply_word(struct storecore *sc, struct spart *p, const struct partop *op)
{
	(void)sc, (void)p, (void)op;
}
struct spart *sluice_store_partition_open(struct storecore *sc, const char *topic, int32_t partition)
{
	int16_t err = 0;
	return sluice_store_partition(sc, topic, partition, &err);
}
int16_t sluice_store_append(struct storecore *sc, struct spart *p, const uint8_t *batch, size_t len,
			    struct partop *wait_op)
{
	(void)sc;
	if (refuse_append) {
		int16_t e = refuse_append;
		refuse_append = 0;
		return e;
	}
	struct sluice_batch b;
	cr_assert_eq(sluice_batch_parse(batch, len, &b), SLUICE_BATCH_OK);
	cr_assert(p->len + len <= TLOG_BYTES_MAX);
	if (!p->buf)
		p->buf = malloc(TLOG_BYTES_MAX);
	memcpy(p->buf + p->len, batch, len);
	kput64(p->buf + p->len, (uint64_t)p->next_offset);
	p->len += len;
	p->next_offset += b.last_offset_delta + 1;
	if (wait_op) {
		cr_assert(nwaiting < WAITING_MAX);
		waiting[nwaiting++] = wait_op;
	}
	return 0;
}
int64_t sluice_plog_log_start(const struct sluice_plog *l)
{
	(void)l;
	return 0;
}
int64_t sluice_plog_written_end(const struct sluice_plog *l) { return ((const struct spart *)l)->next_offset; }
int64_t sluice_plog_log_end(const struct sluice_plog *l) { return ((const struct spart *)l)->next_offset + unwritten; }
int32_t sluice_plog_read(struct sluice_plog *l, int64_t offset, int32_t max_bytes, bool min_one, uint8_t **out)
{
	(void)max_bytes, (void)min_one;
	struct spart *p = (struct spart *)l;
	size_t pos = 0;
	while (pos < p->len) { /* the first batch that ends after offset */
		struct sluice_batch b;
		cr_assert_eq(sluice_batch_parse(p->buf + pos, p->len - pos, &b), SLUICE_BATCH_OK);
		if (b.base_offset + b.last_offset_delta >= offset)
			break;
		pos += (size_t)sluice_batch_total_bytes(&b);
	}
	*out = malloc(p->len - pos + 1);
	memcpy(*out, p->buf + pos, p->len - pos);
	return (int32_t)(p->len - pos);
}

/* The appends waited on are written (or fail): their ops are answered. */
static void written(struct storecore *sc, bool ok)
{
	for (int i = 0; i < nwaiting; i++) {
		sluice_group_written(sc, waiting[i], ok);
		sluice_store_done(sc, waiting[i]);
	}
	nwaiting = 0;
}

/* ---- the coordinator under test ----------------------------------------------- */

static struct broker *B;
static struct storecore *SC;
static struct sluice_meta_snapshot SNAP;
static struct sluice_topic TOPICS[2];
static struct sluice_topic *TOPIC_PTRS[2];

static void setup(void)
{
	sluice_log_set_level(0);
	B = calloc(1, sizeof *B);
	sluice_config_defaults(&B->cfg);
	B->cfg.offsets_topic_partitions = 8;
	B->store_n = 1;
	SC = &B->store[0];
	SC->b = B;
	/* topics "a" (4 partitions) and a long name (64), sorted by name */
	strcpy(TOPICS[0].name, "a");
	TOPICS[0].partitions = 4;
	memset(TOPICS[1].name, 'z', 200);
	TOPICS[1].partitions = 64;
	TOPIC_PTRS[0] = &TOPICS[0];
	TOPIC_PTRS[1] = &TOPICS[1];
	SNAP.topic_n = 2;
	SNAP.topics = TOPIC_PTRS;
}

static void teardown(void)
{
	leads = true;
	lead_epoch = 0;
	unwritten = 0;
	refuse_append = 0;
	for (int i = 0; i < 64; i++) {
		free(parts[i].buf);
		memset(&parts[i], 0, sizeof parts[i]);
	}
}

/* A broker restart: a new coordinator over the same logs. The old one
 * stays reachable (there is no free function: a coordinator lives as long
 * as its storage core), so what LeakSanitizer reports is only memory the
 * coordinator itself lost track of. */
#define RESTARTS_MAX 8
static void *old_coords[RESTARTS_MAX];
static int nrestarts;
static void restart(void)
{
	written(SC, true);
	cr_assert(nrestarts < RESTARTS_MAX);
	old_coords[nrestarts++] = SC->groups;
	SC->groups = NULL;
}

struct call {
	struct partop op;
	struct kwr body;
};

/* Runs one request body (ownership stays with c) through the coordinator. */
static void call(struct call *c, int16_t key, int16_t version, struct kstr group)
{
	memset(&c->op, 0, sizeof c->op);
	c->op.kind = PARTOP_GROUP;
	c->op.api_key = key;
	c->op.api_version = version;
	c->op.partition = sluice_group_partition(group.ptr, (size_t)group.len, B->cfg.offsets_topic_partitions);
	c->op.gname = group;
	c->op.gsnap = &SNAP;
	c->op.client_id = (struct kstr){"cli", 3};
	c->op.client_host = "/127.0.0.1";
	c->op.data = c->body.buf;
	c->op.len = (uint32_t)c->body.len;
	sluice_group_handle(SC, &c->op);
}

static void call_free(struct call *c)
{
	kwr_free(&c->body);
	kwr_free(&c->op.gout);
}

/* OffsetCommit v7 of n partitions of one topic (standalone: generation -1). */
static void commit_body(struct kwr *w, struct kstr group, struct kstr topic, const int32_t *p, int n, int64_t off,
			struct kstr meta)
{
	kwr_init(w, 256, 64u << 20);
	kwr_string(w, false, group.ptr, group.len);
	kwr_i32(w, -1);
	kwr_cstr(w, false, "");
	kwr_cstr(w, false, NULL);
	kwr_i32(w, 1);
	kwr_string(w, false, topic.ptr, topic.len);
	kwr_i32(w, n);
	for (int i = 0; i < n; i++) {
		kwr_i32(w, p[i]);
		kwr_i64(w, off);
		kwr_i32(w, -1);
		kwr_string(w, false, meta.ptr, meta.len);
	}
}

/* Commits and waits for the write; returns the first partition's error. */
static int16_t commit(struct kstr group, struct kstr topic, const int32_t *p, int n, int64_t off, struct kstr meta)
{
	struct call c;
	commit_body(&c.body, group, topic, p, n, off, meta);
	call(&c, 8, 7, group);
	written(SC, true);
	struct krd r;
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	(void)krd_i32(&r);
	cr_assert_eq(krd_i32(&r), 1);
	(void)krd_string(&r, false);
	cr_assert_eq(krd_i32(&r), n);
	(void)krd_i32(&r);
	int16_t e = krd_i16(&r);
	cr_assert(!r.err);
	call_free(&c);
	return e;
}

/* OffsetFetch v5 of one partition: the offset, and its metadata into meta. */
static int64_t fetch(struct kstr group, struct kstr topic, int32_t p, char *meta, int32_t *meta_len)
{
	struct call c;
	kwr_init(&c.body, 64, 1 << 20);
	kwr_string(&c.body, false, group.ptr, group.len);
	kwr_i32(&c.body, 1);
	kwr_string(&c.body, false, topic.ptr, topic.len);
	kwr_i32(&c.body, 1);
	kwr_i32(&c.body, p);
	call(&c, 9, 5, group);
	struct krd r;
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	(void)krd_string(&r, false);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	int64_t off = krd_i64(&r);
	(void)krd_i32(&r);
	struct kstr m = krd_string(&r, false);
	cr_assert(!r.err && m.ptr);
	if (meta) {
		memcpy(meta, m.ptr, (size_t)m.len);
		*meta_len = m.len;
	}
	call_free(&c);
	return off;
}

/* OffsetFetch v5 of every offset of the group: how many there are. */
static int32_t fetch_count(struct kstr group)
{
	struct call c;
	kwr_init(&c.body, 64, 1 << 20);
	kwr_string(&c.body, false, group.ptr, group.len);
	kwr_i32(&c.body, -1);
	call(&c, 9, 5, group);
	struct krd r;
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	(void)krd_i32(&r);
	int32_t n = krd_i32(&r);
	cr_assert(!r.err);
	call_free(&c);
	return n;
}

static int16_t offset_delete(struct kstr group, struct kstr topic, int32_t p)
{
	struct call c;
	kwr_init(&c.body, 64, 1 << 20);
	kwr_string(&c.body, false, group.ptr, group.len);
	kwr_i32(&c.body, 1);
	kwr_string(&c.body, false, topic.ptr, topic.len);
	kwr_i32(&c.body, 1);
	kwr_i32(&c.body, p);
	call(&c, 47, 0, group);
	written(SC, true);
	struct krd r;
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	int16_t e = krd_i16(&r);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	(void)krd_string(&r, false);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	int16_t pe = krd_i16(&r);
	cr_assert(!r.err);
	call_free(&c);
	return e ? e : pe;
}

#define KS(s) ((struct kstr){(s), (int32_t)(sizeof(s) - 1)})

/* ---- offsets ------------------------------------------------------------------ */

/* OffsetDelete and the replay of its tombstones free every offset they drop
 * (LeakSanitizer fails the test otherwise), and the offsets left are the
 * right ones, before and after a restart. */
Test(group, offset_delete_frees_and_replays, .init = setup, .fini = teardown)
{
	char lt[201];
	memset(lt, 'z', 200);
	lt[200] = '\0';
	struct kstr topic = {lt, 200};
	int32_t p[64];
	for (int i = 0; i < 64; i++)
		p[i] = i;
	cr_assert_eq(commit(KS("gd"), topic, p, 64, 5, KS("m")), 0);
	for (int i = 0; i < 48; i++)
		cr_assert_eq(offset_delete(KS("gd"), topic, i), 0);
	for (int i = 0; i < 16; i++) /* delete and commit again */
		cr_assert_eq(commit(KS("gd"), topic, &p[i], 1, 7, KS("")), 0);
	cr_assert_eq(fetch_count(KS("gd")), 32);
	cr_assert_eq(fetch(KS("gd"), topic, 3, NULL, NULL), 7);
	cr_assert_eq(fetch(KS("gd"), topic, 20, NULL, NULL), -1);
	cr_assert_eq(fetch(KS("gd"), topic, 63, NULL, NULL), 5);
	restart();
	cr_assert_eq(fetch_count(KS("gd")), 32);
	cr_assert_eq(fetch(KS("gd"), topic, 3, NULL, NULL), 7);
	cr_assert_eq(fetch(KS("gd"), topic, 20, NULL, NULL), -1);
	cr_assert_eq(fetch(KS("gd"), topic, 63, NULL, NULL), 5);
}

/* Commit metadata and group ids are bytes with a length: "Hello\0world!"
 * comes back whole, "g\0x" is not "g", also after a replay. */
Test(group, nul_bytes_kept_through_replay, .init = setup, .fini = teardown)
{
	int32_t p0 = 0;
	cr_assert_eq(commit(KS("g\0x"), KS("a"), &p0, 1, 42, KS("Hello\0world!")), 0);
	cr_assert_eq(commit(KS("g"), KS("a"), &p0, 1, 7, KS("plain")), 0);
	for (int round = 0; round < 2; round++) {
		char meta[64];
		int32_t ml = 0;
		cr_assert_eq(fetch(KS("g\0x"), KS("a"), 0, meta, &ml), 42);
		cr_assert_eq(ml, 12);
		cr_assert_eq(memcmp(meta, "Hello\0world!", 12), 0);
		cr_assert_eq(fetch(KS("g"), KS("a"), 0, meta, &ml), 7);
		cr_assert_eq(ml, 5);
		restart();
	}
}

/* Commits for a topic that does not exist or a partition beyond its count
 * are refused (UNKNOWN_TOPIC_OR_PARTITION) and not stored. */
Test(group, commit_unknown_topic_refused, .init = setup, .fini = teardown)
{
	int32_t p0 = 0, p9 = 9;
	cr_assert_eq(commit(KS("gu"), KS("nosuch"), &p0, 1, 5, KS("")), 3);
	cr_assert_eq(commit(KS("gu"), KS("a"), &p9, 1, 5, KS("")), 3);
	cr_assert_eq(fetch_count(KS("gu")), 0);
}

/* A commit cut anywhere (here inside the second partition's metadata)
 * commits nothing and gets no answer (the connection is closed). */
Test(group, truncated_commit_changes_nothing, .init = setup, .fini = teardown)
{
	int32_t p[2] = {0, 1};
	struct call c;
	commit_body(&c.body, KS("gt"), KS("a"), p, 2, 11, KS("abcdef"));
	for (size_t cut = 1; cut < c.body.len; cut++) {
		struct kwr full = c.body;
		c.body.len = full.len - cut;
		call(&c, 8, 7, KS("gt"));
		c.body.len = full.len;
		cr_assert_eq(c.op.gout.len, 0, "cut %zu: answered", cut);
		cr_assert_eq(nwaiting, 0);
	}
	call_free(&c);
	cr_assert_eq(fetch_count(KS("gt")), 0);
}

/* ---- members ------------------------------------------------------------------ */

/* JoinGroup v5 of a dynamic member; returns the op (held or answered). */
static struct call *join(struct kstr group, struct kstr member, int32_t session_ms)
{
	struct call *c = calloc(1, sizeof *c);
	kwr_init(&c->body, 64, 1 << 20);
	kwr_string(&c->body, false, group.ptr, group.len);
	kwr_i32(&c->body, session_ms);
	kwr_i32(&c->body, 60000);
	kwr_string(&c->body, false, member.ptr, member.len);
	kwr_cstr(&c->body, false, NULL);
	kwr_cstr(&c->body, false, "consumer");
	kwr_i32(&c->body, 1);
	kwr_cstr(&c->body, false, "range");
	kwr_bytes(&c->body, false, "\0m", 2);
	call(c, 11, 5, group);
	return c;
}

/* A JoinGroup answer: its error, and the member id copied into id. */
static int16_t join_answer(struct call *c, char *id, int32_t *id_len)
{
	struct krd r;
	krd_init(&r, c->op.gout.buf, c->op.gout.len);
	(void)krd_i32(&r);
	int16_t e = krd_i16(&r);
	(void)krd_i32(&r);
	(void)krd_string(&r, false);
	(void)krd_string(&r, false);
	struct kstr m = krd_string(&r, false);
	cr_assert(!r.err);
	if (id) {
		memcpy(id, m.ptr, (size_t)m.len);
		*id_len = m.len;
	}
	return e;
}

#define BIG 3000

/* 3,000 members get ids and all rejoin into one generation (ids were
 * capped at 1,024); ids never used expire after the session timeout;
 * group.max.size refuses the member beyond it. */
Test(group, member_ids_scale_and_expire, .init = setup, .fini = teardown)
{
	static char ids[BIG][160];
	static int32_t lens[BIG];
	static struct call *held[BIG];
	for (int i = 0; i < BIG; i++) {
		struct call *c = join(KS("big"), KS(""), 10000);
		cr_assert_eq(join_answer(c, ids[i], &lens[i]), 79);
		call_free(c);
		free(c);
	}
	for (int i = 0; i < BIG; i++) {
		held[i] = join(KS("big"), (struct kstr){ids[i], lens[i]}, 10000);
		cr_assert_eq(held[i]->op.gout.len, 0, "member %d answered at once", i);
	}
	now_ms += 70000;
	sluice_group_tick(SC, now_ms);
	for (int i = 0; i < BIG; i++) {
		cr_assert_eq(join_answer(held[i], NULL, NULL), 0, "member %d", i);
		call_free(held[i]);
		free(held[i]);
	}
	/* ids handed out and never used: gone after the session timeout */
	struct call *c = join(KS("idle"), KS(""), 6000);
	cr_assert_eq(join_answer(c, ids[0], &lens[0]), 79);
	call_free(c);
	free(c);
	now_ms += 6001;
	sluice_group_tick(SC, now_ms);
	c = join(KS("idle"), (struct kstr){ids[0], lens[0]}, 6000);
	cr_assert_eq(join_answer(c, NULL, NULL), 25);
	call_free(c);
	free(c);
	/* group.max.size: ids bounded by it; member 3 is refused */
	B->cfg.group_max_size = 2;
	for (int i = 0; i < 3; i++) {
		c = join(KS("small"), KS(""), 6000);
		cr_assert_eq(join_answer(c, ids[i], &lens[i]), i < 2 ? 79 : 81);
		call_free(c);
		free(c);
	}
}

/* A LeaveGroup v3 cut inside its second member removes nobody. */
Test(group, truncated_leave_changes_nothing, .init = setup, .fini = teardown)
{
	char id[160];
	int32_t len;
	struct call *c = join(KS("gl"), KS(""), 10000);
	cr_assert_eq(join_answer(c, id, &len), 79);
	call_free(c);
	free(c);
	struct call *j = join(KS("gl"), (struct kstr){id, len}, 10000);
	now_ms += 70000;
	sluice_group_tick(SC, now_ms);
	cr_assert_eq(join_answer(j, NULL, NULL), 0);
	call_free(j);
	free(j);
	struct call l;
	kwr_init(&l.body, 64, 1 << 20);
	kwr_cstr(&l.body, false, "gl");
	kwr_i32(&l.body, 2);
	kwr_string(&l.body, false, id, len);
	kwr_cstr(&l.body, false, NULL);
	kwr_cstr(&l.body, false, "someone-else");
	l.body.len -= 3;
	call(&l, 13, 3, KS("gl"));
	cr_assert_eq(l.op.gout.len, 0);
	call_free(&l);
	/* still a member: its heartbeat is accepted */
	struct call h;
	kwr_init(&h.body, 64, 1 << 20);
	kwr_cstr(&h.body, false, "gl");
	kwr_i32(&h.body, 1);
	kwr_string(&h.body, false, id, len);
	kwr_cstr(&h.body, false, NULL);
	call(&h, 12, 3, KS("gl"));
	struct krd r;
	krd_init(&r, h.op.gout.buf, h.op.gout.len);
	(void)krd_i32(&r);
	cr_assert_eq(krd_i16(&r), 0);
	call_free(&h);
}

/* An Empty group past offsets.retention.minutes is dropped with its
 * offsets and members' memory, and stays dropped after a replay. */
Test(group, expiry_frees_and_replays, .init = setup, .fini = teardown)
{
	int32_t p[4] = {0, 1, 2, 3};
	cr_assert_eq(commit(KS("ge"), KS("a"), p, 4, 9, KS("x")), 0);
	now_ms += (int64_t)B->cfg.offsets_retention_minutes * 60000 + 1;
	sluice_group_tick(SC, now_ms);
	cr_assert_eq(fetch_count(KS("ge")), 0);
	restart();
	cr_assert_eq(fetch_count(KS("ge")), 0);
}

/* ---- replication: leadership, acknowledgement, failover ------------------------- */

/* The appends waited on fail with error e (the storage core's reason, as
 * its acks=all answers give it): their ops are answered. */
static void written_err(int16_t e)
{
	for (int i = 0; i < nwaiting; i++) {
		waiting[i]->error = e;
		sluice_group_written(SC, waiting[i], false);
		sluice_store_done(SC, waiting[i]);
	}
	nwaiting = 0;
}

/* The storage core's hook: the controller's word on the group's partition
 * changed (leads / lead_epoch say what it is now). */
static void leadership_changed(struct kstr group)
{
	int32_t p = sluice_group_partition(group.ptr, (size_t)group.len, B->cfg.offsets_topic_partitions);
	sluice_group_service.leadership(SC, &parts[p], SLUICE_OFFSETS_TOPIC, p);
}

/* OffsetFetch v5 of every offset of the group: its group ErrorCode. */
static int16_t fetch_error(struct kstr group)
{
	struct call c;
	kwr_init(&c.body, 64, 1 << 20);
	kwr_string(&c.body, false, group.ptr, group.len);
	kwr_i32(&c.body, -1);
	call(&c, 9, 5, group);
	struct krd r;
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	(void)krd_i32(&r);
	int32_t n = krd_i32(&r);
	for (int32_t i = 0; i < n && !r.err; i++) { /* topic, 1 partition: index, offset, epoch, metadata, error */
		(void)krd_string(&r, false);
		cr_assert_eq(krd_i32(&r), 1);
		(void)krd_i32(&r);
		(void)krd_i64(&r);
		(void)krd_i32(&r);
		(void)krd_string(&r, false);
		(void)krd_i16(&r);
	}
	int16_t e = krd_i16(&r);
	cr_assert(!r.err);
	call_free(&c);
	return e;
}

/* Heartbeat v3: its error. */
static int16_t heartbeat(struct kstr group, int32_t generation, struct kstr member)
{
	struct call h;
	kwr_init(&h.body, 64, 1 << 20);
	kwr_string(&h.body, false, group.ptr, group.len);
	kwr_i32(&h.body, generation);
	kwr_string(&h.body, false, member.ptr, member.len);
	kwr_cstr(&h.body, false, NULL);
	call(&h, 12, 3, group);
	struct krd r;
	krd_init(&r, h.op.gout.buf, h.op.gout.len);
	(void)krd_i32(&r);
	int16_t e = krd_i16(&r);
	cr_assert(!r.err);
	call_free(&h);
	return e;
}

/* SyncGroup v3 of the leader of a one-member group, assigning it "A1";
 * returns the op (held until its group record is written, or answered). */
static struct call *sync_leader_call(struct kstr group, int32_t generation, struct kstr member)
{
	struct call *c = calloc(1, sizeof *c);
	kwr_init(&c->body, 64, 1 << 20);
	kwr_string(&c->body, false, group.ptr, group.len);
	kwr_i32(&c->body, generation);
	kwr_string(&c->body, false, member.ptr, member.len);
	kwr_cstr(&c->body, false, NULL);
	kwr_i32(&c->body, 1);
	kwr_string(&c->body, false, member.ptr, member.len);
	kwr_bytes(&c->body, false, "A1", 2);
	call(c, 14, 3, group);
	return c;
}

/* A SyncGroup answer: its error, and the assignment's length. */
static int16_t sync_answer(struct call *c, int32_t *assignment_len)
{
	struct krd r;
	krd_init(&r, c->op.gout.buf, c->op.gout.len);
	(void)krd_i32(&r);
	int16_t e = krd_i16(&r);
	const uint8_t *a;
	int32_t n = krd_bytes(&r, false, &a);
	cr_assert(!r.err);
	if (assignment_len)
		*assignment_len = n;
	return e;
}

/* One member joins group (its id into id) and is in generation 1,
 * CompletingRebalance, as its leader. */
static void one_member_joined(struct kstr group, char *id, int32_t *len)
{
	struct call *c = join(group, KS(""), 10000);
	cr_assert_eq(join_answer(c, id, len), 79);
	call_free(c);
	free(c);
	c = join(group, (struct kstr){id, *len}, 10000);
	now_ms += 70000; /* past the initial delay */
	sluice_group_tick(SC, now_ms);
	cr_assert_eq(join_answer(c, NULL, NULL), 0);
	call_free(c);
	free(c);
}

/* A coordinator that stops leading a partition answers its groups
 * NOT_COORDINATOR; leading it again at a later epoch, it reads the log
 * afresh and shows what the leader in between committed, not what it had
 * (the lazy load kept stale state: it would show 5). */
Test(group, leadership_lost_and_regained_reloads, .init = setup, .fini = teardown)
{
	int32_t p0 = 0;
	lead_epoch = 1;
	cr_assert_eq(commit(KS("gm"), KS("a"), &p0, 1, 5, KS("")), 0);
	cr_assert_eq(fetch(KS("gm"), KS("a"), 0, NULL, NULL), 5);
	leads = false;
	lead_epoch = 2;
	leadership_changed(KS("gm"));
	cr_assert_eq(fetch_error(KS("gm")), 16); /* NOT_COORDINATOR */
	cr_assert_eq(commit(KS("gm"), KS("a"), &p0, 1, 6, KS("")), 16);
	/* another broker leads at epoch 2 and commits 7 to the same log */
	void *mine = SC->groups;
	SC->groups = NULL;
	leads = true;
	cr_assert_eq(commit(KS("gm"), KS("a"), &p0, 1, 7, KS("")), 0);
	sluice_group_service.fini(SC);
	SC->groups = mine;
	/* this one leads again at epoch 3 */
	lead_epoch = 3;
	leadership_changed(KS("gm"));
	cr_assert_eq(fetch(KS("gm"), KS("a"), 0, NULL, NULL), 7);
	/* the same word again (no hook) and a newer epoch found by an op alone */
	lead_epoch = 4;
	cr_assert_eq(fetch(KS("gm"), KS("a"), 0, NULL, NULL), 7);
}

/* Leadership lost while a JoinGroup is held: it is answered NOT_COORDINATOR
 * (the client finds the new coordinator), and the group leaves memory. */
Test(group, held_join_answered_when_unloaded, .init = setup, .fini = teardown)
{
	char id[160];
	int32_t len;
	struct call *c = join(KS("gh"), KS(""), 10000);
	cr_assert_eq(join_answer(c, id, &len), 79);
	call_free(c);
	free(c);
	c = join(KS("gh"), (struct kstr){id, len}, 10000);
	cr_assert_eq(c->op.gout.len, 0); /* held: the initial delay */
	int before = answered;
	leads = false;
	leadership_changed(KS("gh"));
	cr_assert_eq(answered, before + 1);
	cr_assert_eq(join_answer(c, NULL, NULL), 16);
	call_free(c);
	free(c);
	now_ms += 70000;
	sluice_group_tick(SC, now_ms); /* nothing left to complete */
	cr_assert_eq(answered, before + 1);
}

/* The leader's SyncGroup is answered only once the group record is
 * written (committed), and a new coordinator loading that record has the
 * group Stable with its member: its heartbeat at the same generation is
 * accepted, no rebalance. */
Test(group, sync_waits_for_record_and_members_survive_failover, .init = setup, .fini = teardown)
{
	char id[160];
	int32_t len, alen = 0;
	one_member_joined(KS("gs"), id, &len);
	struct call *s = sync_leader_call(KS("gs"), 1, (struct kstr){id, len});
	cr_assert_eq(s->op.gout.len, 0, "answered before its record was committed");
	cr_assert_eq(nwaiting, 1);
	cr_assert_eq(heartbeat(KS("gs"), 1, (struct kstr){id, len}), 0);
	written(SC, true);
	cr_assert_eq(sync_answer(s, &alen), 0);
	cr_assert_eq(alen, 2);
	call_free(s);
	free(s);
	restart(); /* another broker (or this one restarted) leads the partition */
	cr_assert_eq(heartbeat(KS("gs"), 1, (struct kstr){id, len}), 0);
	cr_assert_eq(heartbeat(KS("gs"), 1, KS("nobody")), 25); /* UNKNOWN_MEMBER_ID */
	/* its session restarted with the load: it expires when it stops */
	now_ms += 10001;
	sluice_group_tick(SC, now_ms);
	cr_assert_eq(heartbeat(KS("gs"), 1, (struct kstr){id, len}), 25);
}

/* The group record's write fails after the append (the ISR fell below
 * min.insync.replicas): the leader's SyncGroup gets
 * COORDINATOR_NOT_AVAILABLE, as Kafka maps NOT_ENOUGH_REPLICAS, and the
 * group rebalances rather than hand out an assignment nobody stored. */
Test(group, sync_record_not_stored_rebalances, .init = setup, .fini = teardown)
{
	char id[160];
	int32_t len;
	one_member_joined(KS("gf"), id, &len);
	struct call *s = sync_leader_call(KS("gf"), 1, (struct kstr){id, len});
	cr_assert_eq(s->op.gout.len, 0);
	written_err(20); /* NOT_ENOUGH_REPLICAS_AFTER_APPEND */
	cr_assert_eq(sync_answer(s, NULL), 15);
	cr_assert_eq(s->op.error, 0);
	call_free(s);
	free(s);
	cr_assert_eq(heartbeat(KS("gf"), 1, (struct kstr){id, len}), 27); /* REBALANCE_IN_PROGRESS */
	/* refused before the append (leadership gone): NOT_COORDINATOR */
	one_member_joined(KS("gg"), id, &len);
	refuse_append = 6; /* NOT_LEADER_OR_FOLLOWER */
	s = sync_leader_call(KS("gg"), 1, (struct kstr){id, len});
	cr_assert_eq(sync_answer(s, NULL), 16);
	call_free(s);
	free(s);
}

/* Commits are acknowledged only once committed, with Kafka's coordinator
 * errors otherwise (a write that timed out included); a commit that failed
 * is not visible. */
Test(group, commit_errors_mapped, .init = setup, .fini = teardown)
{
	int32_t p0 = 0;
	cr_assert_eq(commit(KS("gc"), KS("a"), &p0, 1, 5, KS("")), 0);
	refuse_append = 19; /* NOT_ENOUGH_REPLICAS: refused before the append */
	cr_assert_eq(commit(KS("gc"), KS("a"), &p0, 1, 6, KS("")), 15);
	refuse_append = 56; /* KAFKA_STORAGE_ERROR */
	cr_assert_eq(commit(KS("gc"), KS("a"), &p0, 1, 6, KS("")), 16);
	struct call c;
	commit_body(&c.body, KS("gc"), KS("a"), &p0, 1, 8, KS(""));
	call(&c, 8, 7, KS("gc"));
	cr_assert_eq(nwaiting, 1);
	cr_assert_eq(fetch(KS("gc"), KS("a"), 0, NULL, NULL), 5); /* not visible before it is committed */
	written_err(6); /* NOT_LEADER_OR_FOLLOWER: this broker stopped leading meanwhile */
	struct krd r;
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	(void)krd_string(&r, false);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	cr_assert_eq(krd_i16(&r), 16);
	call_free(&c);
	cr_assert_eq(fetch(KS("gc"), KS("a"), 0, NULL, NULL), 5);
	/* offsets.commit.timeout.ms passed (the storage core's REQUEST_TIMED_OUT):
	 * COORDINATOR_NOT_AVAILABLE, as Kafka 4's coordinator answers it */
	commit_body(&c.body, KS("gc"), KS("a"), &p0, 1, 9, KS(""));
	call(&c, 8, 7, KS("gc"));
	cr_assert_eq(nwaiting, 1);
	written_err(7);
	krd_init(&r, c.op.gout.buf, c.op.gout.len);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	(void)krd_string(&r, false);
	(void)krd_i32(&r);
	(void)krd_i32(&r);
	cr_assert_eq(krd_i16(&r), 15);
	call_free(&c);
	cr_assert_eq(fetch(KS("gc"), KS("a"), 0, NULL, NULL), 5);
}

/* A new leader whose log holds records not yet written (fetched just before
 * the election) answers COORDINATOR_LOAD_IN_PROGRESS until they are, then
 * loads them all. */
Test(group, load_waits_for_unwritten_records, .init = setup, .fini = teardown)
{
	int32_t p0 = 0;
	cr_assert_eq(commit(KS("gw"), KS("a"), &p0, 1, 9, KS("")), 0);
	restart();
	unwritten = 1;
	cr_assert_eq(fetch_error(KS("gw")), 14);
	unwritten = 0;
	cr_assert_eq(fetch_error(KS("gw")), 0);
	cr_assert_eq(fetch(KS("gw"), KS("a"), 0, NULL, NULL), 9);
}
