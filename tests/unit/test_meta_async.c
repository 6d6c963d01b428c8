/* The local metadata authority's asynchronous interface and what its
 * snapshots say of the cluster. Proves that a submitted batch completes
 * exactly once, on the writer thread, only after its changes are on disk (a
 * second open of the directory from inside the completion sees them); that a
 * batch of many creates costs one journal append; that the queue answers
 * SLUICE_META_BUSY when full and accepts again once drained; that a
 * validate-only batch answers every change and writes nothing; that a single
 * node's snapshot names it as every partition's leader, sole replica and ISR
 * and lists it as the one broker with its endpoint and rack; and that files
 * in the format today's broker writes (snapshot v2, journal, producer ids)
 * still open, with the new per-partition state filled in. */
#include "common/config.h"
#include "common/kafka/errors.h"
#include "control/meta.h"
#include <criterion/criterion.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/sluice-meta-async-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *name, const void *content, size_t len)
{
	char p[128];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(content, 1, len, f), len);
	fclose(f);
}

static off_t file_size(const char *name)
{
	char p[128];
	struct stat st;
	snprintf(p, sizeof p, "%s/%s", dir, name);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

static void open_ok(struct sluice_meta *m)
{
	char err[512] = "";
	cr_assert_eq(sluice_meta_local_open(m, dir, 1, err, sizeof err), 0, "open: %s", err);
}

static bool exists(struct sluice_meta *m, const char *name)
{
	struct sluice_meta_snapshot *s = m->ops->acquire(m->self);
	bool r = sluice_meta_find(s, name, strlen(name)) != NULL;
	m->ops->release(m->self, s);
	return r;
}

static int16_t create_sync(struct sluice_meta *m, const char *name, int32_t parts)
{
	struct sluice_topic_spec spec = {.name = name, .name_len = strlen(name), .partitions = parts, .replication_factor = -1};
	char msg[256];
	return m->ops->create_topic(m->self, &spec, false, msg, sizeof msg, NULL);
}

/* A submitted batch and what its completion saw. */
struct waiter {
	struct sluice_meta_batch batch;
	sem_t done_sem;
	int calls;                 /* atomic */
	pthread_t submitter;
	bool on_other_thread;
	int visible_on_reopen;     /* topics of the batch a fresh open found, -1: not checked */
	sem_t *block;              /* if set, the completion waits on it (holds the writer) */
	sem_t *entered;
};

static void waiter_done(struct sluice_meta_batch *b)
{
	struct waiter *w = b->arg;
	__atomic_add_fetch(&w->calls, 1, __ATOMIC_ACQ_REL);
	w->on_other_thread = !pthread_equal(pthread_self(), w->submitter);
	if (w->visible_on_reopen == 0) {
		struct sluice_meta other;
		char err[512];
		if (sluice_meta_local_open(&other, dir, 1, err, sizeof err) == 0) {
			for (uint32_t i = 0; i < b->change_n; i++)
				w->visible_on_reopen += exists(&other, b->changes[i].name);
			sluice_meta_local_close(&other);
		}
	}
	if (w->entered)
		sem_post(w->entered);
	if (w->block)
		while (sem_wait(w->block) < 0)
			;
	sem_post(&w->done_sem);
}

static void waiter_init(struct waiter *w, struct sluice_meta_change *changes, uint32_t n, bool validate_only)
{
	memset(w, 0, sizeof *w);
	sem_init(&w->done_sem, 0, 0);
	w->submitter = pthread_self();
	w->visible_on_reopen = -1;
	w->batch = (struct sluice_meta_batch){.changes = changes, .change_n = n, .validate_only = validate_only,
					      .done = waiter_done, .arg = w};
}

static void waiter_wait(struct waiter *w)
{
	while (sem_wait(&w->done_sem) < 0)
		;
}

/* Topic names that live as long as the test. */
static char (*names_make(uint32_t n, const char *prefix))[32]
{
	char (*names)[32] = calloc(n, sizeof *names);
	cr_assert_not_null(names);
	for (uint32_t i = 0; i < n; i++)
		snprintf(names[i], sizeof names[i], "%s%u", prefix, i);
	return names;
}

static void creates(struct sluice_meta_change *c, char (*names)[32], uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_TOPIC, .name = names[i],
						   .name_len = strlen(names[i]), .partitions = 2, .replication_factor = -1};
}

Test(meta_async, completes_once_after_durable, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	open_ok(&m);
	char(*names)[32] = names_make(3, "durable-");
	struct sluice_meta_change c[3];
	creates(c, names, 3);
	struct waiter w;
	waiter_init(&w, c, 3, false);
	w.visible_on_reopen = 0;
	cr_assert_eq(m.ops->submit(m.self, &w.batch), SLUICE_META_SUBMITTED);
	waiter_wait(&w);
	usleep(20000);
	cr_assert_eq(__atomic_load_n(&w.calls, __ATOMIC_ACQUIRE), 1, "completed exactly once");
	cr_assert(w.on_other_thread, "completed on the writer thread, not the submitter's");
	cr_assert_eq(w.visible_on_reopen, 3, "a fresh open inside the completion sees every change");
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(c[i].error, 0, "%s", c[i].msg);
		cr_assert_eq(c[i].topic_partitions, 2);
		cr_assert(exists(&m, names[i]), "published before completion");
	}
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_geq(s->version, w.batch.version);
	cr_assert_eq(memcmp(sluice_meta_find(s, names[1], strlen(names[1]))->id, c[1].topic_id, 16), 0);
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);
	free(names);
}

Test(meta_async, many_creates_one_journal_append, .init = setup, .fini = teardown)
{
	enum { N = 2000 };
	struct sluice_meta m;
	open_ok(&m);
	cr_assert_eq(create_sync(&m, "seed", 1), 0, "the first commit writes the snapshot and starts the journal");
	struct sluice_meta_local_stats before, after;
	sluice_meta_local_stats(&m, &before);
	char(*names)[32] = names_make(N, "many-");
	struct sluice_meta_change *c = calloc(N, sizeof *c);
	creates(c, names, N);
	struct waiter w;
	waiter_init(&w, c, N, false);
	cr_assert_eq(m.ops->submit(m.self, &w.batch), SLUICE_META_SUBMITTED);
	waiter_wait(&w);
	sluice_meta_local_stats(&m, &after);
	cr_assert_eq(after.journal_appends - before.journal_appends, 1, "one append (one fdatasync) for the batch");
	cr_assert_eq(after.snapshot_writes, before.snapshot_writes);
	cr_assert_eq(after.commits - before.commits, 1);
	for (uint32_t i = 0; i < N; i++)
		cr_assert_eq(c[i].error, 0, "%s: %s", names[i], c[i].msg);
	sluice_meta_local_close(&m);
	open_ok(&m);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_eq(s->topic_n, N + 1, "every create survives a reopen");
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);
	free(c);
	free(names);
}

Test(meta_async, full_queue_answers_busy, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	open_ok(&m);
	sem_t block, entered;
	sem_init(&block, 0, 0);
	sem_init(&entered, 0, 0);
	/* A: one change whose completion holds the writer until released. */
	struct sluice_meta_change a = {.kind = SLUICE_META_CREATE_TOPIC, .name = "a", .name_len = 1, .partitions = 1,
				       .replication_factor = -1};
	struct waiter wa, wb, wc;
	waiter_init(&wa, &a, 1, false);
	wa.block = &block;
	wa.entered = &entered;
	cr_assert_eq(m.ops->submit(m.self, &wa.batch), SLUICE_META_SUBMITTED);
	while (sem_wait(&entered) < 0)
		;
	/* B and C: as large as a batch may be; B fits beside A, C does not. */
	uint32_t n = SLUICE_META_BATCH_CHANGES_MAX;
	struct sluice_meta_change *cb = calloc(n, sizeof *cb), *cc = calloc(n, sizeof *cc);
	cr_assert(cb && cc);
	for (uint32_t i = 0; i < n; i++)
		cb[i] = cc[i] = (struct sluice_meta_change){.kind = SLUICE_META_DELETE_TOPIC, .name = "absent", .name_len = 6};
	waiter_init(&wb, cb, n, false);
	waiter_init(&wc, cc, n, false);
	cr_assert_eq(m.ops->submit(m.self, &wb.batch), SLUICE_META_SUBMITTED);
	cr_assert_eq(m.ops->submit(m.self, &wc.batch), SLUICE_META_BUSY, "past SLUICE_META_QUEUE_CHANGES_MAX");
	struct sluice_meta_batch huge = wc.batch;
	huge.change_n = SLUICE_META_BATCH_CHANGES_MAX + 1;
	cr_assert_eq(m.ops->submit(m.self, &huge), SLUICE_META_TOO_LARGE);
	sem_post(&block);
	waiter_wait(&wa);
	waiter_wait(&wb);
	cr_assert_eq(cb[n - 1].error, KERR_UNKNOWN_TOPIC_OR_PARTITION);
	cr_assert_eq(m.ops->submit(m.self, &wc.batch), SLUICE_META_SUBMITTED, "accepted again once drained");
	waiter_wait(&wc);
	cr_assert_eq(wc.calls, 1);
	cr_assert_eq(wc.batch.next, NULL);
	cr_assert(exists(&m, "a"));
	sluice_meta_local_close(&m);
	free(cb);
	free(cc);
}

Test(meta_async, validate_only_writes_nothing, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	open_ok(&m);
	cr_assert_eq(create_sync(&m, "t", 1), 0);
	off_t jsize = file_size("sluice-topics.journal"), ssize = file_size("sluice-topics");
	struct sluice_meta_local_stats before, after;
	sluice_meta_local_stats(&m, &before);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	uint64_t version = s->version;
	m.ops->release(m.self, s);
	struct sluice_topic_config bad = {"retention.ms", "soon"};
	struct sluice_meta_change c[] = {
		{.kind = SLUICE_META_CREATE_TOPIC, .name = "new", .name_len = 3, .partitions = 4, .replication_factor = -1},
		{.kind = SLUICE_META_CREATE_TOPIC, .name = "t", .name_len = 1, .partitions = 1, .replication_factor = -1},
		{.kind = SLUICE_META_CREATE_TOPIC, .name = "b@d", .name_len = 3, .partitions = 1, .replication_factor = -1},
		{.kind = SLUICE_META_SET_TOPIC_CONFIGS, .name = "t", .name_len = 1, .configs = &bad, .config_n = 1},
		{.kind = SLUICE_META_CREATE_PARTITIONS, .name = "t", .name_len = 1, .partitions = 5},
		{.kind = SLUICE_META_DELETE_TOPIC, .name = "t", .name_len = 1},
	};
	struct waiter w;
	waiter_init(&w, c, sizeof c / sizeof *c, true);
	cr_assert_eq(m.ops->submit(m.self, &w.batch), SLUICE_META_SUBMITTED);
	waiter_wait(&w);
	cr_assert_eq(c[0].error, 0, "%s", c[0].msg);
	cr_assert_eq(c[0].topic_partitions, 4);
	cr_assert_eq(c[1].error, KERR_TOPIC_ALREADY_EXISTS);
	cr_assert_eq(c[2].error, KERR_INVALID_TOPIC_EXCEPTION);
	cr_assert_eq(c[3].error, KERR_INVALID_CONFIG);
	cr_assert(strstr(c[3].msg, "retention.ms"), "%s", c[3].msg);
	cr_assert_eq(c[4].error, 0, "%s", c[4].msg);
	cr_assert_eq(c[5].error, 0, "%s", c[5].msg);
	sluice_meta_local_stats(&m, &after);
	cr_assert_eq(after.journal_appends, before.journal_appends, "no journal append");
	cr_assert_eq(after.snapshot_writes, before.snapshot_writes, "no snapshot write");
	cr_assert_eq(file_size("sluice-topics.journal"), jsize);
	cr_assert_eq(file_size("sluice-topics"), ssize);
	cr_assert_eq(w.batch.version, version, "checked against the published snapshot, none published");
	s = m.ops->acquire(m.self);
	cr_assert_eq(s->version, version);
	cr_assert_null(sluice_meta_find(s, "new", 3));
	cr_assert_eq(sluice_meta_find(s, "t", 1)->partitions, 1);
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);
}

static void node_config(struct sluice_config *cfg, const char *id_key, const char *id)
{
	char err[256];
	sluice_config_defaults(cfg);
	cr_assert_eq(sluice_config_set(cfg, id_key, id, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(cfg, "broker.rack", "rack-b", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(cfg, "listeners", "PLAINTEXT://127.0.0.1:19092", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(cfg, "advertised.listeners", "PLAINTEXT://broker7.example:29092", err, sizeof err), 0);
	cr_assert_eq(sluice_config_finish(cfg, err, sizeof err), 0, "%s", err);
}

/* Every partition of every topic: leader node, epoch 0, replicas = ISR = [node]. */
static void assert_single_node(const struct sluice_meta_snapshot *s, int32_t node)
{
	cr_assert_eq(s->broker_n, 1);
	cr_assert_eq(s->brokers[0].node_id, node);
	for (uint32_t i = 0; i < s->topic_n; i++) {
		const struct sluice_topic *t = s->topics[i];
		for (int32_t p = 0; p < t->partitions; p++) {
			const struct sluice_partition_state *ps = sluice_topic_partition(t, p);
			cr_assert_not_null(ps, "%s-%d", t->name, p);
			cr_assert_eq(ps->leader, node);
			cr_assert_eq(ps->leader_epoch, 0);
			cr_assert_eq(ps->replica_n, 1);
			cr_assert_eq(ps->replicas[0], node);
			cr_assert_eq(ps->isr_n, 1);
			cr_assert_eq(ps->isr[0], node);
			cr_assert_eq(ps->offline_n, 0);
		}
		cr_assert_null(sluice_topic_partition(t, t->partitions), "past the last partition");
		cr_assert_null(sluice_topic_partition(t, -1));
	}
}

Test(meta_async, single_node_snapshot, .init = setup, .fini = teardown)
{
	struct sluice_config cfg;
	node_config(&cfg, "node.id", "7");
	struct sluice_meta m;
	open_ok(&m);
	sluice_meta_local_set_node(&m, &cfg);
	cr_assert_eq(create_sync(&m, "three", 3), 0);
	char msg[256];
	cr_assert_eq(m.ops->create_partitions(m.self, "three", 5, 4, false, msg, sizeof msg), 0, "%s", msg);
	cr_assert_eq(create_sync(&m, "one", 1), 0);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_eq(s->topic_n, 2);
	cr_assert_str_eq(s->brokers[0].host, "broker7.example");
	cr_assert_eq(s->brokers[0].port, 29092);
	cr_assert_str_eq(s->brokers[0].rack, "rack-b");
	assert_single_node(s, 7);
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);

	node_config(&cfg, "broker.id", "9");
	cr_assert_eq(cfg.node_id, 9, "broker.id is node.id's older name");
	open_ok(&m);
	sluice_meta_local_set_node(&m, &cfg);
	s = m.ops->acquire(m.self);
	cr_assert_eq(s->topic_n, 2, "reopened topics get this node's state too");
	assert_single_node(s, 9);
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);
}

static void journal_of(const char *const *recs, int n)
{
	extern uint32_t sluice_crc32c(uint32_t crc, const void *data, size_t len);
	char buf[2048];
	size_t at = 0;
	for (int i = 0; i < n; i++) {
		uint32_t len = (uint32_t)strlen(recs[i]), crc = sluice_crc32c(0, recs[i], len);
		cr_assert_lt(at + 8 + len, sizeof buf);
		memcpy(buf + at, &len, 4);
		memcpy(buf + at + 4, &crc, 4);
		memcpy(buf + at + 8, recs[i], len);
		at += 8 + len;
	}
	write_file("sluice-topics.journal", buf, at);
}

Test(meta_async, files_of_the_previous_broker_open, .init = setup, .fini = teardown)
{
	/* As today's broker writes them: snapshot v2 with a tombstone, a journal
	 * extending its generation, the producer id block. */
	static const char snap[] =
		"# sluice topic metadata v2: topic <name> <partitions> <id> [key=value ...] | deleted <name> <partitions> "
		"<id>; generation 3\n"
		"topic kept 2 00112233445566778899aabbccddeeff retention.ms=60000 cleanup.policy=compact\n"
		"topic gone 1 00112233445566778899aabbccddee01\n"
		"deleted older 4 00112233445566778899aabbccddee02\n";
	write_file("sluice-topics", snap, sizeof snap - 1);
	const char *recs[] = {"generation 3", "topic added 3 00112233445566778899aabbccddee03 max.message.bytes=2048",
			      "deleted gone 1 00112233445566778899aabbccddee01",
			      "forget 00112233445566778899aabbccddee02"};
	journal_of(recs, 4);
	write_file("sluice-producer-ids", "2000\n", 5);
	struct sluice_config cfg;
	node_config(&cfg, "node.id", "1");
	struct sluice_meta m;
	open_ok(&m);
	sluice_meta_local_set_node(&m, &cfg);
	cr_assert(sluice_meta_local_found(&m));
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_eq(s->topic_n, 2);
	const struct sluice_topic *kept = sluice_meta_find(s, "kept", 4), *added = sluice_meta_find(s, "added", 5);
	cr_assert(kept && added);
	cr_assert_eq(kept->limits.retention_ms, 60000);
	cr_assert_eq(kept->limits.cleanup_compact, 1);
	cr_assert_eq(added->limits.max_message_bytes, 2048);
	cr_assert_eq(added->partitions, 3);
	assert_single_node(s, 1);
	m.ops->release(m.self, s);
	uint8_t gone[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x01};
	uint8_t older[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0x02};
	cr_assert_not_null(sluice_meta_local_tombstone(&m, gone));
	cr_assert_null(sluice_meta_local_tombstone(&m, older), "forgotten in the journal");
	cr_assert_geq(m.ops->allocate_producer_id(m.self), 2000, "producer ids continue past the persisted block");
	cr_assert_eq(create_sync(&m, "after", 1), 0);
	sluice_meta_local_close(&m);
	open_ok(&m);
	cr_assert(exists(&m, "kept") && exists(&m, "added") && exists(&m, "after"));
	sluice_meta_local_close(&m);
}

/* Several threads submitting at once: each batch completes exactly once and
 * every create lands (batches queued together may share one commit). */
struct submitter {
	struct sluice_meta *m;
	int index;
	struct sluice_meta_change c[10];
	char names[10][32];
	struct waiter w[20];
};

static void *submit_many(void *arg)
{
	struct submitter *sm = arg;
	for (int b = 0; b < 20; b++) {
		for (int i = 0; i < 10; i++) {
			snprintf(sm->names[i], sizeof sm->names[i], "s%d-b%d-%d", sm->index, b, i);
			sm->c[i] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_TOPIC, .name = sm->names[i],
							       .name_len = strlen(sm->names[i]), .partitions = 1,
							       .replication_factor = -1};
		}
		waiter_init(&sm->w[b], sm->c, 10, false);
		if (sm->m->ops->submit(sm->m->self, &sm->w[b].batch) != SLUICE_META_SUBMITTED)
			return (void *)1;
		waiter_wait(&sm->w[b]);
		for (int i = 0; i < 10; i++)
			if (sm->c[i].error)
				return (void *)2;
	}
	return NULL;
}

Test(meta_async, concurrent_submitters, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	open_ok(&m);
	static struct submitter sm[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		sm[i].m = &m;
		sm[i].index = i;
		cr_assert_eq(pthread_create(&th[i], NULL, submit_many, &sm[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		void *rc;
		pthread_join(th[i], &rc);
		cr_assert_null(rc, "submitter %d failed (%p)", i, rc);
	}
	for (int i = 0; i < 4; i++)
		for (int b = 0; b < 20; b++)
			cr_assert_eq(sm[i].w[b].calls, 1);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_eq(s->topic_n, 4 * 20 * 10);
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);
}
