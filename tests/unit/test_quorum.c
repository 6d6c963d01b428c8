/* The controllers' Raft quorum (control/quorum.c, control/quorum_fsm.c).
 *
 * Most tests run the quorum's own state machine (the FSM functions
 * quorum.c hands to raft_uv) under libraft's deterministic fixture
 * (raft/fixture.h: in-memory I/O, simulated time and network): 3 and 5
 * voters elect one leader; commands committed through it are applied in
 * the same order, each record at the next metadata offset, giving equal
 * images on every voter; a crashed leader is replaced; a minority cut off
 * with the old leader cannot commit, and the whole heals; a killed voter
 * catches up from the log when revived, and from a snapshot when the log
 * was compacted past it; a snapshot restores the image with its offset; a
 * command that does not decode is refused before anything is applied (and
 * refused identically by every voter). The commands are generated from a
 * seed (printed; SLUICE_TEST_SEED overrides it), which also picks the
 * voters' election timeouts, so a failure replays exactly.
 *
 * The "uv_" tests are REAL TIME (marked in their names and below, several
 * seconds each, under 10 s): three quorum instances on one libuv loop with
 * raft_uv storage in temporary directories and raft_uv_tcp on 127.0.0.1
 * ports 30000-30099 elect a leader, commit with the expected offsets (a
 * command above raft_uv's segment size among them), elect another when
 * the leader stops, and reload their images (snapshot + log) when restarted
 * from the same directories. */
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
#include "control/image.h"
#include "control/mlog.h"
#include "control/mrec.h"
#include "control/quorum.h"
#include "control/quorum_fsm.h"
#include <criterion/criterion.h>
#include <ftw.h>
#include <raft/fixture.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SEED_DEFAULT 0x5eed5eedULL
#define NODES_MAX 5
#define STEP_MS_MAX 20000u /* simulated time: generous, the fixture is instant */
#define CMD_RECORDS_MAX 8
#define MLOG_RECORDS 100000
#define MLOG_BYTES (16u << 20)

/* ---- seeded generator of commands that apply in sequence -------------------- */

static uint64_t seed_get(void)
{
	const char *s = getenv("SLUICE_TEST_SEED");
	uint64_t seed = s ? strtoull(s, NULL, 0) : SEED_DEFAULT;
	fprintf(stderr, "test_quorum seed %#llx (SLUICE_TEST_SEED to replay)\n", (unsigned long long)seed);
	return seed;
}

struct gen {
	uint64_t state;
	int32_t brokers; /* registered 1..brokers */
	int32_t topics;  /* created t0..t(topics-1) */
};

static uint64_t rnd(struct gen *g)
{
	g->state ^= g->state << 13;
	g->state ^= g->state >> 7;
	g->state ^= g->state << 17;
	return g->state;
}

static void topic_id(int32_t t, uint8_t id[16])
{
	memset(id, 0, 16);
	id[0] = 0x70;
	memcpy(id + 4, &t, sizeof t);
	id[15] = 1;
}

static void rec_broker(struct sluice_mrec *r, int32_t id)
{
	memset(r, 0, sizeof *r);
	r->type = SLUICE_MREC_REGISTER_BROKER;
	r->register_broker.broker_id = id;
	memset(r->register_broker.incarnation_id, 0x40 + (id & 0x3f), 16);
	r->register_broker.endpoint_n = 1;
	strcpy(r->register_broker.endpoints[0].name, "PLAINTEXT");
	strcpy(r->register_broker.endpoints[0].host, "127.0.0.1");
	r->register_broker.endpoints[0].port = (uint16_t)(9000 + id);
	r->register_broker.fenced = true;
}

static void rec_topic(struct sluice_mrec *r, int32_t t)
{
	memset(r, 0, sizeof *r);
	r->type = SLUICE_MREC_TOPIC;
	snprintf(r->topic.name, sizeof r->topic.name, "t%d", t);
	topic_id(t, r->topic.topic_id);
}

static void rec_partition(struct sluice_mrec *r, int32_t t, int32_t p, int32_t broker)
{
	memset(r, 0, sizeof *r);
	r->type = SLUICE_MREC_PARTITION;
	r->partition.partition_id = p;
	topic_id(t, r->partition.topic_id);
	r->partition.replicas.n = r->partition.isr.n = 1;
	r->partition.replicas.id[0] = r->partition.isr.id[0] = broker;
	r->partition.leader = broker;
}

static void rec_config(struct sluice_mrec *r, int32_t t, uint64_t value)
{
	memset(r, 0, sizeof *r);
	r->type = SLUICE_MREC_CONFIG;
	r->config.resource_type = SLUICE_MREC_RESOURCE_TOPIC;
	snprintf(r->config.resource_name, sizeof r->config.resource_name, "t%d", t);
	strcpy(r->config.name, "retention.ms");
	snprintf(r->config.value, sizeof r->config.value, "%llu", (unsigned long long)(value % 1000000000));
}

/* The next command: 1 to CMD_RECORDS_MAX records that apply to the image
 * as the previous commands left it. */
static size_t gen_command(struct gen *g, struct sluice_mrec *recs)
{
	size_t n = 0;
	if (g->brokers == 0) {
		rec_broker(&recs[n++], ++g->brokers);
		return n;
	}
	size_t units = 1 + rnd(g) % 3;
	for (size_t u = 0; u < units && n + 4 <= CMD_RECORDS_MAX; u++) {
		uint64_t kind = rnd(g) % 3;
		if (kind == 0) {
			rec_broker(&recs[n++], ++g->brokers);
		} else if (kind == 1 || g->topics == 0) {
			int32_t t = g->topics++;
			int32_t parts = 1 + (int32_t)(rnd(g) % 3);
			rec_topic(&recs[n++], t);
			for (int32_t p = 0; p < parts; p++)
				rec_partition(&recs[n++], t, p, 1 + (int32_t)(rnd(g) % (uint64_t)g->brokers));
		} else {
			rec_config(&recs[n++], (int32_t)(rnd(g) % (uint64_t)g->topics), rnd(g));
		}
	}
	return n;
}

static struct raft_buffer command(const struct sluice_mrec *recs, size_t n)
{
	struct raft_buffer buf;
	cr_assert_eq(sluice_quorum_command_encode(recs, n, &buf), KERR_NONE);
	return buf;
}

/* A command built by hand in the documented format (quorum_fsm.c): two good
 * records (brokers 501, 502), then a third of an unknown frame version. */
static struct raft_buffer bad_command(void)
{
	struct kwr w;
	struct sluice_mrec r;
	kwr_init(&w, 256, 1 << 20);
	kwr_i8(&w, 1);
	kwr_i32(&w, 3);
	for (int32_t id = 501; id <= 502; id++) {
		size_t at = w.len;
		rec_broker(&r, id);
		kwr_i32(&w, 0);
		cr_assert_eq(sluice_mrec_encode(&w, &r), 0);
		kwr_patch_i32(&w, at, (int32_t)(w.len - at - 4));
	}
	kwr_i32(&w, 3);
	kwr_raw(&w, "\x7f\x00\x00", 3);
	while (w.len % 8) /* the padding raft_uv needs */
		kwr_i8(&w, 0);
	cr_assert(!w.err);
	struct raft_buffer b = {.base = raft_malloc(w.len), .len = w.len};
	memcpy(b.base, w.buf, w.len);
	kwr_free(&w);
	return b;
}

/* ---- a fixture cluster of FSMs ---------------------------------------------- */

struct node {
	struct sluice_image *img;
	struct sluice_mlog *mlog;
	struct sluice_quorum_fsm fsm;
	int64_t applied_records, applied_next; /* from the applied callback */
	int restored_n;
	int64_t restored_offset;
};

struct cluster {
	struct raft_fixture f;
	unsigned n;
	struct node nodes[NODES_MAX];
	struct gen gen;
	struct sluice_mrec recs[CMD_RECORDS_MAX];
};

static void on_applied(void *arg, int64_t first_offset, size_t n)
{
	struct node *nd = arg;
	cr_assert_eq(first_offset, nd->applied_next, "records applied out of order");
	nd->applied_next = first_offset + (int64_t)n;
	nd->applied_records += (int64_t)n;
}

static void on_restored(void *arg, int64_t offset)
{
	struct node *nd = arg;
	nd->restored_n++;
	nd->restored_offset = offset;
	nd->applied_next = offset + 1;
}

static const struct sluice_quorum_callbacks node_cbs = {.applied = on_applied, .restored = on_restored};

static void node_init(struct node *nd)
{
	memset(nd, 0, sizeof *nd);
	nd->img = sluice_image_new();
	nd->mlog = sluice_mlog_new(MLOG_RECORDS, MLOG_BYTES);
	cr_assert(nd->img && nd->mlog);
	cr_assert_eq(sluice_quorum_fsm_init(&nd->fsm, nd->img, nd->mlog, &node_cbs, nd), 0);
}

static void node_free(struct node *nd)
{
	sluice_quorum_fsm_close(&nd->fsm);
	sluice_mlog_free(nd->mlog);
	sluice_image_free(nd->img);
}

static void cluster_init(struct cluster *c, unsigned n, unsigned threshold, unsigned trailing)
{
	struct sluice_quorum_config cfg = {.election_timeout_ms = 1000, .heartbeat_timeout_ms = 100,
					   .snapshot_threshold = threshold, .snapshot_trailing = trailing};
	struct raft_configuration conf;
	memset(c, 0, sizeof *c);
	c->n = n;
	c->gen.state = seed_get() | 1;
	cr_assert_eq(raft_fixture_initialize(&c->f), 0);
	for (unsigned i = 0; i < n; i++) {
		node_init(&c->nodes[i]);
		cr_assert_eq(raft_fixture_grow(&c->f, &c->nodes[i].fsm.raft_fsm), 0);
		c->nodes[i].fsm.raft = raft_fixture_get(&c->f, i);
		sluice_quorum_tune(c->nodes[i].fsm.raft, &cfg);
		raft_fixture_set_randomized_election_timeout(&c->f, i, 1000 + (unsigned)(rnd(&c->gen) % 1000));
	}
	cr_assert_eq(raft_fixture_configuration(&c->f, n, &conf), 0);
	cr_assert_eq(raft_fixture_bootstrap(&c->f, &conf), 0);
	raft_configuration_close(&conf);
	cr_assert_eq(raft_fixture_start(&c->f), 0);
}

static void cluster_free(struct cluster *c)
{
	raft_fixture_close(&c->f);
	for (unsigned i = 0; i < c->n; i++)
		node_free(&c->nodes[i]);
}

static unsigned leader_of(struct cluster *c)
{
	cr_assert(raft_fixture_step_until_has_leader(&c->f, STEP_MS_MAX), "no leader elected");
	unsigned l = raft_fixture_leader_index(&c->f);
	cr_assert_lt(l, c->n);
	return l;
}

struct req {
	struct raft_apply apply;
	bool done;
	int status;
	struct sluice_quorum_outcome outcome;
};

static void req_cb(struct raft_apply *a, int status, void *result)
{
	struct req *r = a->data;
	cr_assert(!r->done, "a proposal completed twice");
	r->done = true;
	r->status = status;
	if (status == 0)
		r->outcome = *(const struct sluice_quorum_outcome *)result;
}

/* Propose buf on node i; returns its Raft index. */
static raft_index propose_buf(struct cluster *c, unsigned i, struct req *r, struct raft_buffer buf)
{
	memset(r, 0, sizeof *r);
	r->apply.data = r;
	cr_assert_eq(raft_apply(raft_fixture_get(&c->f, i), &r->apply, &buf, 1, req_cb), 0);
	return r->apply.index;
}

/* Generate the next command and propose it on node i. */
static raft_index propose_next(struct cluster *c, unsigned i, struct req *r, size_t *records)
{
	size_t n = gen_command(&c->gen, c->recs);
	if (records)
		*records = n;
	return propose_buf(c, i, r, command(c->recs, n));
}

static bool req_is_done(struct raft_fixture *f, void *arg) { return ((struct req *)arg)->done; }

static bool alive(struct cluster *c, unsigned i) { return raft_fixture_alive(&c->f, i); }

/* Step until every alive node (but `except`) applied index. */
static void step_until_applied_alive(struct cluster *c, raft_index index, unsigned except)
{
	for (unsigned i = 0; i < c->n; i++)
		if (alive(c, i) && i != except)
			cr_assert(raft_fixture_step_until_applied(&c->f, i, index, STEP_MS_MAX),
				  "node %u did not apply index %llu", i, (unsigned long long)index);
}

/* Commit `count` generated commands one after the other through the
 * current leader; each must complete with the next offsets. */
static void commit_some(struct cluster *c, int count)
{
	for (int k = 0; k < count; k++) {
		unsigned l = leader_of(c);
		struct req r;
		size_t n = 0;
		int64_t before = sluice_image_offset(c->nodes[l].img);
		raft_index index = propose_next(c, l, &r, &n);
		step_until_applied_alive(c, index, c->n);
		cr_assert(r.done && r.status == 0, "proposal %d: done %d status %d", k, r.done, r.status);
		cr_assert_eq(r.outcome.error, KERR_NONE);
		cr_assert_eq(r.outcome.last_offset, before + (int64_t)n, "offsets: one per record, in order");
	}
}

static void assert_equal_images(struct cluster *c)
{
	unsigned ref = c->n;
	for (unsigned i = 0; i < c->n; i++) {
		if (!alive(c, i))
			continue;
		if (ref == c->n) {
			ref = i;
			continue;
		}
		cr_assert(sluice_image_equal(c->nodes[ref].img, c->nodes[i].img), "images of nodes %u and %u differ",
			  ref, i);
		cr_assert_eq(sluice_image_offset(c->nodes[i].img), sluice_image_offset(c->nodes[ref].img));
	}
}

/* ---- fixture tests ------------------------------------------------------------ */

static void election_and_order(unsigned n)
{
	struct cluster c;
	cluster_init(&c, n, 0, 0);
	unsigned l = leader_of(&c);
	for (unsigned i = 0; i < n; i++)
		cr_assert_eq(raft_state(raft_fixture_get(&c.f, i)), i == l ? RAFT_LEADER : RAFT_FOLLOWER);
	commit_some(&c, 20);
	/* Pipelined: several proposals in flight at once, offsets in order. */
	struct req rs[6];
	raft_index last = 0;
	size_t records[6];
	for (int k = 0; k < 6; k++)
		last = propose_next(&c, l, &rs[k], &records[k]);
	step_until_applied_alive(&c, last, c.n);
	for (int k = 1; k < 6; k++) {
		cr_assert(rs[k].done && rs[k].status == 0 && rs[k].outcome.error == KERR_NONE);
		cr_assert_eq(rs[k].outcome.last_offset, rs[k - 1].outcome.last_offset + (int64_t)records[k]);
	}
	assert_equal_images(&c);
	int64_t end = sluice_image_offset(c.nodes[0].img);
	cr_assert_gt(end, 20);
	for (unsigned i = 0; i < n; i++) {
		cr_assert_eq(c.nodes[i].applied_records, end + 1, "every record reported applied once");
		cr_assert_eq(sluice_mlog_end(c.nodes[i].mlog), end + 1, "every record in the metadata log window");
		cr_assert_eq(sluice_mlog_start(c.nodes[i].mlog), 0);
	}
	cluster_free(&c);
}

Test(quorum_fixture, election_of_3_commands_in_order_equal_images) { election_and_order(3); }
Test(quorum_fixture, election_of_5_commands_in_order_equal_images) { election_and_order(5); }

/* The leader crashes: the others elect a new one, which commits; the old
 * leader comes back as a follower and catches up. */
Test(quorum_fixture, leader_crash_new_election)
{
	struct cluster c;
	cluster_init(&c, 3, 0, 0);
	commit_some(&c, 5);
	unsigned old = leader_of(&c);
	raft_term term = raft_fixture_get(&c.f, old)->current_term;
	raft_fixture_kill(&c.f, old);
	cr_assert(raft_fixture_step_until_has_no_leader(&c.f, STEP_MS_MAX));
	unsigned l = leader_of(&c);
	cr_assert_neq(l, old);
	cr_assert_gt(raft_fixture_get(&c.f, l)->current_term, term);
	commit_some(&c, 5);
	raft_fixture_revive(&c.f, old);
	struct req r;
	raft_index index = propose_next(&c, l, &r, NULL);
	step_until_applied_alive(&c, index, c.n);
	cr_assert_eq(raft_state(raft_fixture_get(&c.f, old)), RAFT_FOLLOWER);
	assert_equal_images(&c);
	cluster_free(&c);
}

static void cut(struct cluster *c, const unsigned *a, size_t an, const unsigned *b, size_t bn, bool on)
{
	for (size_t i = 0; i < an; i++)
		for (size_t j = 0; j < bn; j++) {
			if (on) {
				raft_fixture_saturate(&c->f, a[i], b[j]);
				raft_fixture_saturate(&c->f, b[j], a[i]);
			} else {
				raft_fixture_desaturate(&c->f, a[i], b[j]);
				raft_fixture_desaturate(&c->f, b[j], a[i]);
			}
		}
}

/* Of 5 voters, the leader and one follower are cut off: their proposal
 * never commits (and fails when the old leader steps down), the majority
 * elects a leader and commits, and once healed every voter holds the
 * majority's image and nothing of the minority's proposal. */
Test(quorum_fixture, minority_partition_cannot_commit_then_heals)
{
	struct cluster c;
	cluster_init(&c, 5, 0, 0);
	commit_some(&c, 3);
	unsigned old = leader_of(&c);
	unsigned minority[2] = {old, (old + 1) % 5}, majority[3] = {(old + 2) % 5, (old + 3) % 5, (old + 4) % 5};
	int64_t before = sluice_image_offset(c.nodes[old].img);
	cut(&c, minority, 2, majority, 3, true);
	struct req lost;
	struct sluice_mrec stray;
	rec_broker(&stray, 9999);
	raft_index lost_index = propose_buf(&c, old, &lost, command(&stray, 1));
	cr_assert(!raft_fixture_step_until_applied(&c.f, old, lost_index, 3000), "a minority committed");
	cr_assert_eq(sluice_image_offset(c.nodes[old].img), before);
	/* The majority elects a leader of its own and commits. */
	unsigned l = leader_of(&c);
	cr_assert(l == majority[0] || l == majority[1] || l == majority[2]);
	struct req r;
	raft_index index = propose_next(&c, l, &r, NULL);
	for (int k = 0; k < 3; k++)
		cr_assert(raft_fixture_step_until_applied(&c.f, majority[k], index, STEP_MS_MAX));
	cr_assert(r.done && r.status == 0 && r.outcome.error == KERR_NONE);
	/* The cut-off leader gives up (no majority contact): its proposal fails. */
	cr_assert(raft_fixture_step_until(&c.f, req_is_done, &lost, STEP_MS_MAX), "the lost proposal never completed");
	cr_assert_neq(raft_state(raft_fixture_get(&c.f, old)), RAFT_LEADER);
	cr_assert_eq(lost.status, RAFT_LEADERSHIPLOST);
	cut(&c, minority, 2, majority, 3, false);
	index = propose_next(&c, leader_of(&c), &r, NULL);
	step_until_applied_alive(&c, index, c.n);
	assert_equal_images(&c);
	cr_assert_null(sluice_image_broker(c.nodes[old].img, 9999), "the minority's proposal was applied");
	cluster_free(&c);
}

/* A follower killed while the others commit catches up from the log. */
Test(quorum_fixture, killed_follower_revived_catches_up)
{
	struct cluster c;
	cluster_init(&c, 3, 0, 0);
	commit_some(&c, 2);
	unsigned f = (leader_of(&c) + 1) % 3;
	raft_fixture_kill(&c.f, f);
	commit_some(&c, 10);
	cr_assert_lt(sluice_image_offset(c.nodes[f].img), sluice_image_offset(c.nodes[(f + 1) % 3].img));
	raft_fixture_revive(&c.f, f);
	cr_assert(raft_fixture_step_until_applied(&c.f, f, raft_last_applied(raft_fixture_get(&c.f, leader_of(&c))),
						  STEP_MS_MAX));
	assert_equal_images(&c);
	cr_assert_eq(c.nodes[f].restored_n, 0, "caught up from the log, not a snapshot");
	cluster_free(&c);
}

/* With a small snapshot threshold the leader compacts its log past a dead
 * follower: revived, it gets a snapshot (restore) and then the log, and
 * ends with the same image and offset. */
Test(quorum_fixture, snapshot_installed_on_lagging_follower)
{
	struct cluster c;
	cluster_init(&c, 3, 8, 2);
	commit_some(&c, 3);
	unsigned l = leader_of(&c), f = (l + 1) % 3;
	raft_fixture_kill(&c.f, f);
	commit_some(&c, 30);
	cr_assert_gt(c.nodes[l].fsm.snapshots_taken, 0);
	cr_assert_gt(raft_fixture_get(&c.f, l)->log.snapshot.last_index, raft_last_applied(raft_fixture_get(&c.f, f)),
		     "the log was not compacted past the dead follower");
	raft_fixture_revive(&c.f, f);
	struct req r;
	raft_index index = propose_next(&c, l, &r, NULL);
	step_until_applied_alive(&c, index, c.n);
	cr_assert_geq(c.nodes[f].restored_n, 1, "no snapshot was installed");
	assert_equal_images(&c);
	cr_assert_eq(c.nodes[f].applied_next, sluice_image_offset(c.nodes[f].img) + 1);
	/* The window restarts at the snapshot: older offsets are not there. */
	cr_assert_gt(sluice_mlog_start(c.nodes[f].mlog), 0);
	cr_assert_eq(sluice_mlog_end(c.nodes[f].mlog), sluice_image_offset(c.nodes[f].img) + 1);
	commit_some(&c, 3);
	assert_equal_images(&c);
	cluster_free(&c);
}

/* A command that does not decode, proposed through Raft, is consumed and
 * refused identically by every voter: nothing applied, the next command
 * takes the next offset. */
Test(quorum_fixture, bad_command_refused_by_every_voter)
{
	struct cluster c;
	cluster_init(&c, 3, 0, 0);
	commit_some(&c, 3);
	unsigned l = leader_of(&c);
	int64_t before = sluice_image_offset(c.nodes[l].img);
	struct raft_buffer bad = bad_command();
	struct req r;
	raft_index index = propose_buf(&c, l, &r, bad);
	step_until_applied_alive(&c, index, c.n);
	cr_assert(r.done && r.status == 0);
	cr_assert_eq(r.outcome.error, KERR_UNKNOWN_SERVER_ERROR);
	cr_assert_eq(r.outcome.applied_n, 0);
	for (unsigned i = 0; i < c.n; i++) {
		cr_assert_eq(sluice_image_offset(c.nodes[i].img), before);
		cr_assert_eq(c.nodes[i].fsm.commands_refused, 1);
	}
	commit_some(&c, 1);
	cr_assert_gt(sluice_image_offset(c.nodes[l].img), before);
	assert_equal_images(&c);
	cluster_free(&c);
}

/* ---- the FSM alone -------------------------------------------------------------- */

static void apply_ok(struct node *nd, struct gen *g, raft_index index)
{
	struct sluice_mrec recs[CMD_RECORDS_MAX];
	size_t n = gen_command(g, recs);
	struct raft_buffer b = command(recs, n);
	struct sluice_quorum_outcome o;
	int64_t before = sluice_image_offset(nd->img);
	sluice_quorum_fsm_apply_command(&nd->fsm, b.base, b.len, index, &o);
	raft_free(b.base);
	cr_assert_eq(o.error, KERR_NONE);
	cr_assert_eq(o.applied_n, n);
	cr_assert_eq(o.last_offset, before + (int64_t)n);
}

/* Snapshot of one FSM, restored into another that held something else:
 * equal images, the snapshot's offset, the log window reset, restored told;
 * both then apply the next command at the same offset. */
Test(quorum_fsm, snapshot_restore_with_offset)
{
	struct node a, b;
	struct gen ga = {.state = seed_get() | 1}, gb = {.state = 99};
	node_init(&a);
	node_init(&b);
	for (int k = 0; k < 12; k++)
		apply_ok(&a, &ga, 0);
	apply_ok(&b, &gb, 0);
	struct raft_buffer *bufs = NULL;
	unsigned n_bufs = 0;
	cr_assert_eq(a.fsm.raft_fsm.snapshot(&a.fsm.raft_fsm, &bufs, &n_bufs), 0);
	cr_assert_eq(n_bufs, 1);
	struct raft_buffer copy = {.base = raft_malloc(bufs[0].len), .len = bufs[0].len};
	memcpy(copy.base, bufs[0].base, copy.len);
	cr_assert_eq(a.fsm.raft_fsm.snapshot_finalize(&a.fsm.raft_fsm, &bufs, &n_bufs), 0);
	cr_assert_eq(b.fsm.raft_fsm.restore(&b.fsm.raft_fsm, &copy), 0); /* copy is now b's */
	cr_assert(sluice_image_equal(a.img, b.img));
	cr_assert_eq(sluice_image_offset(b.img), sluice_image_offset(a.img));
	cr_assert_eq(b.restored_n, 1);
	cr_assert_eq(b.restored_offset, sluice_image_offset(a.img));
	cr_assert_eq(sluice_mlog_end(b.mlog), sluice_mlog_start(b.mlog), "the window was not reset");
	struct gen ga2 = ga;
	apply_ok(&a, &ga, 0);
	apply_ok(&b, &ga2, 0);
	cr_assert(sluice_image_equal(a.img, b.img));
	cr_assert_eq(sluice_mlog_end(b.mlog), sluice_image_offset(b.img) + 1);
	node_free(&a);
	node_free(&b);
}

/* Damaged snapshots are refused and leave the image as it was. */
Test(quorum_fsm, damaged_snapshot_refused_image_unchanged)
{
	struct node a, b;
	struct gen ga = {.state = seed_get() | 1}, gb = {.state = 5};
	node_init(&a);
	node_init(&b);
	for (int k = 0; k < 6; k++)
		apply_ok(&a, &ga, 0);
	for (int k = 0; k < 3; k++)
		apply_ok(&b, &gb, 0);
	struct node keep;
	node_init(&keep);
	gb = (struct gen){.state = 5};
	for (int k = 0; k < 3; k++)
		apply_ok(&keep, &gb, 0);
	struct raft_buffer *bufs = NULL;
	unsigned n_bufs = 0;
	cr_assert_eq(a.fsm.raft_fsm.snapshot(&a.fsm.raft_fsm, &bufs, &n_bufs), 0);
	size_t len = bufs[0].len;
	/* cuts at every length, then flips of the count and of the last byte */
	for (size_t cutlen = 0; cutlen < len; cutlen += 1 + cutlen / 8) {
		struct raft_buffer d = {.base = malloc(cutlen + 1), .len = cutlen};
		memcpy(d.base, bufs[0].base, cutlen);
		cr_assert_neq(b.fsm.raft_fsm.restore(&b.fsm.raft_fsm, &d), 0, "a cut at %zu restored", cutlen);
		free(d.base);
	}
	size_t flips[] = {0, 4, 21, 24, len - 1};
	for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
		struct raft_buffer d = {.base = malloc(len), .len = len};
		memcpy(d.base, bufs[0].base, len);
		((uint8_t *)d.base)[flips[k]] ^= 0x80;
		cr_assert_neq(b.fsm.raft_fsm.restore(&b.fsm.raft_fsm, &d), 0, "a flip at %zu restored", flips[k]);
		free(d.base);
	}
	a.fsm.raft_fsm.snapshot_finalize(&a.fsm.raft_fsm, &bufs, &n_bufs);
	cr_assert(sluice_image_equal(b.img, keep.img), "a refused snapshot changed the image");
	cr_assert_eq(b.restored_n, 0);
	node_free(&a);
	node_free(&b);
	node_free(&keep);
}

static void apply_refused(struct node *nd, const void *p, size_t len, const char *what)
{
	struct sluice_quorum_outcome o;
	int64_t before = sluice_image_offset(nd->img);
	int64_t applied = nd->applied_records;
	sluice_quorum_fsm_apply_command(&nd->fsm, p, len, 0, &o);
	cr_assert_eq(o.error, KERR_UNKNOWN_SERVER_ERROR, "%s: not refused", what);
	cr_assert_eq(o.applied_n, 0, "%s", what);
	cr_assert_eq(sluice_image_offset(nd->img), before, "%s: applied", what);
	cr_assert_eq(nd->applied_records, applied, "%s: reported applied", what);
}

/* Bad commands are refused before anything is applied: a bad record after
 * good ones, a count that lies, trailing bytes, a bad header, every cut. */
Test(quorum_fsm, bad_command_refused_before_applying_anything)
{
	struct node nd;
	struct gen g = {.state = seed_get() | 1};
	node_init(&nd);
	apply_ok(&nd, &g, 0);
	struct sluice_mrec recs[3];
	rec_broker(&recs[0], 501);
	rec_broker(&recs[1], 502);
	rec_broker(&recs[2], 503);
	struct raft_buffer b = command(recs, 3);
	uint8_t *p = b.base;
	uint8_t *d = malloc(b.len + 8);
	struct raft_buffer bad = bad_command();
	apply_refused(&nd, bad.base, bad.len, "a bad third record");
	raft_free(bad.base);
	memcpy(d, p, b.len);
	d[4] = 4; /* count 3 -> 4 */
	apply_refused(&nd, d, b.len, "a count that lies");
	memcpy(d, p, b.len);
	memset(d + b.len, 0, 8);
	apply_refused(&nd, d, b.len + 1, "a trailing byte");
	apply_refused(&nd, d, b.len + 8, "eight trailing bytes");
	cr_assert_eq(b.len % 8, 0, "commands are padded to 8 bytes (raft_uv)");
	size_t unpadded = 5;
	for (int k = 0; k < 3; k++)
		unpadded += 4 + kbe32(p + unpadded);
	cr_assert(unpadded <= b.len && b.len - unpadded < 8);
	cr_assert_lt(unpadded, b.len, "these three records need padding (the test relies on it)");
	memcpy(d, p, b.len);
	d[b.len - 1] = 1;
	apply_refused(&nd, d, b.len, "padding that is not zeros");
	apply_refused(&nd, p, unpadded, "no padding (raft_uv needs it)");
	memcpy(d, p, b.len);
	d[0] = 9;
	apply_refused(&nd, d, b.len, "an unknown command version");
	for (size_t cutlen = 0; cutlen < b.len; cutlen++)
		apply_refused(&nd, p, cutlen, "a cut command");
	cr_assert_null(sluice_image_broker(nd.img, 501));
	/* The intact command still applies. */
	struct sluice_quorum_outcome o;
	int64_t before = sluice_image_offset(nd.img);
	sluice_quorum_fsm_apply_command(&nd.fsm, p, b.len, 0, &o);
	cr_assert_eq(o.error, KERR_NONE);
	cr_assert_eq(o.last_offset, before + 3);
	cr_assert_not_null(sluice_image_broker(nd.img, 503));
	free(d);
	raft_free(b.base);
	node_free(&nd);
}

/* A record the image refuses (a partition of an unknown topic) stops its
 * command there, loudly: the ones before it stay applied. */
Test(quorum_fsm, record_that_does_not_apply_stops_the_command)
{
	struct node nd;
	node_init(&nd);
	struct sluice_mrec recs[3];
	rec_broker(&recs[0], 1);
	rec_partition(&recs[1], 4242, 0, 1); /* topic t4242 does not exist */
	rec_broker(&recs[2], 2);
	struct raft_buffer b = command(recs, 3);
	struct sluice_quorum_outcome o;
	sluice_quorum_fsm_apply_command(&nd.fsm, b.base, b.len, 0, &o);
	cr_assert_eq(o.error, KERR_UNKNOWN_SERVER_ERROR);
	cr_assert_eq(o.applied_n, 1);
	cr_assert_eq(o.last_offset, 0);
	cr_assert_not_null(sluice_image_broker(nd.img, 1));
	cr_assert_null(sluice_image_broker(nd.img, 2));
	cr_assert_eq(nd.applied_records, 1);
	raft_free(b.base);
	node_free(&nd);
}

/* Raft indexes map to the offset of the last record at or before them. */
Test(quorum_fsm, index_to_offset_map)
{
	struct node nd;
	struct gen g = {.state = 3};
	node_init(&nd);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 0), -1);
	apply_ok(&nd, &g, 2); /* index 1 is the configuration */
	int64_t at2 = sluice_image_offset(nd.img);
	apply_ok(&nd, &g, 5); /* 3 and 4: barriers */
	int64_t at5 = sluice_image_offset(nd.img);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 1), -1);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 2), at2);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 4), at2);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 5), at5);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 50), at5);
	for (raft_index i = 6; i < 6 + SLUICE_QUORUM_FSM_MAP_MAX + 10; i++)
		apply_ok(&nd, &g, i);
	cr_assert_eq(sluice_quorum_fsm_offset_at(&nd.fsm, 5), -1, "forgotten indexes are unknown");
	node_free(&nd);
}

Test(quorum_fsm, command_encode_limits)
{
	struct sluice_mrec r;
	struct raft_buffer b;
	rec_broker(&r, 1);
	cr_assert_eq(sluice_quorum_command_encode(&r, 0, &b), KERR_INVALID_REQUEST);
	cr_assert_eq(sluice_quorum_command_encode(&r, SLUICE_QUORUM_COMMAND_RECORDS_MAX + 1, &b), KERR_INVALID_REQUEST);
}

/* ---- controller.quorum.voters ---------------------------------------------------- */

Test(quorum_voters, parse)
{
	struct sluice_quorum_config cfg;
	char err[256];
	memset(&cfg, 0, sizeof cfg);
	cr_assert_eq(sluice_quorum_parse_voters("1@localhost:9093, 2@10.0.0.2:9095 ,3@host-c.example:1", &cfg, err,
						sizeof err), 0, "%s", err);
	cr_assert_eq(cfg.voter_n, 3);
	cr_assert_eq(cfg.voters[0].id, 1);
	cr_assert_str_eq(cfg.voters[0].host, "localhost");
	cr_assert_eq(cfg.voters[0].port, 9093);
	cr_assert_str_eq(cfg.voters[1].host, "10.0.0.2");
	cr_assert_eq(cfg.voters[2].port, 1);
	cr_assert_str_eq(cfg.voters[2].host, "host-c.example");
	cr_assert_eq(sluice_quorum_parse_voters("7@h:65535", &cfg, err, sizeof err), 0);
	cr_assert_eq(cfg.voter_n, 1);
	const char *bad[] = {"", "1@h", "h:1", "@h:1", "0@h:1", "-1@h:1", "x@h:1", "1@:9093", "1@h:0", "1@h:65536",
			     "1@h:9x", "1@h:", "1@h:1,1@g:2", "1@h:1,", "1@h:1,,2@g:2", "99999999999@h:1",
			     "1@a:1,2@b:1,3@c:1,4@d:1,5@e:1,6@f:1"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = 0;
		cfg.voter_n = 3;
		cr_assert_eq(sluice_quorum_parse_voters(bad[i], &cfg, err, sizeof err), -1, "'%s' accepted", bad[i]);
		cr_assert_neq(err[0], 0, "'%s': no message", bad[i]);
		cr_assert_eq(cfg.voter_n, 3, "'%s': the config changed on error", bad[i]);
	}
}

/* ---- REAL TIME: raft_uv storage and raft_uv_tcp on one libuv loop ---------------- */

#define UV_NODES 3
#define UV_PORT_BASE 30040 /* this test's range: 30000-30099 */
#define UV_WAIT_MS 8000
/* One command above raft_uv's 8 MiB segment size: this many topic configs
 * of the largest value. */
#define BIG_CONFIGS 2500

struct unode {
	int32_t id;
	char dir[128];
	struct sluice_quorum *q; /* NULL while stopped */
	struct sluice_image *img;
	struct sluice_mlog *mlog;
	bool leader;
	int32_t leader_id;
	int restored_n;
	int64_t applied_next;
};

struct ucluster {
	uv_loop_t loop;
	char root[64];
	unsigned threshold;
	struct unode n[UV_NODES];
};

static void u_leader_changed(void *arg, bool is_leader, int32_t leader_id)
{
	struct unode *nd = arg;
	nd->leader = is_leader;
	nd->leader_id = leader_id;
}

static void u_applied(void *arg, int64_t first_offset, size_t n)
{
	struct unode *nd = arg;
	cr_assert_eq(first_offset, nd->applied_next, "node %d: records applied out of order", nd->id);
	nd->applied_next = first_offset + (int64_t)n;
}

static void u_restored(void *arg, int64_t offset)
{
	struct unode *nd = arg;
	nd->restored_n++;
	nd->applied_next = offset + 1;
}

static const struct sluice_quorum_callbacks u_cbs = {
	.applied = u_applied, .leader_changed = u_leader_changed, .restored = u_restored};

static void u_start(struct ucluster *c, int i)
{
	struct unode *nd = &c->n[i];
	struct sluice_quorum_config cfg = {.node_id = nd->id, .voter_n = UV_NODES, .dir = nd->dir,
					   .election_timeout_ms = 500, .heartbeat_timeout_ms = 50,
					   .snapshot_threshold = c->threshold, .snapshot_trailing = 2};
	char err[256] = "";
	for (int k = 0; k < UV_NODES; k++) {
		cfg.voters[k].id = k + 1;
		strcpy(cfg.voters[k].host, "127.0.0.1");
		cfg.voters[k].port = (uint16_t)(UV_PORT_BASE + k);
	}
	nd->img = sluice_image_new();
	nd->mlog = sluice_mlog_new(MLOG_RECORDS * 2, 64u << 20);
	nd->leader = false;
	nd->leader_id = -1;
	nd->restored_n = 0;
	nd->applied_next = 0;
	cr_assert(nd->img && nd->mlog);
	cr_assert_eq(sluice_quorum_start(&nd->q, &c->loop, &cfg, nd->img, nd->mlog, &u_cbs, nd, err, sizeof err), 0,
		     "node %d: %s", nd->id, err);
}

static bool run_until(struct ucluster *c, bool (*pred)(struct ucluster *c, void *arg), void *arg, unsigned ms)
{
	uint64_t deadline = uv_hrtime() + (uint64_t)ms * 1000000;
	while (!pred(c, arg)) {
		if (uv_hrtime() > deadline)
			return false;
		uv_run(&c->loop, UV_RUN_ONCE);
	}
	return true;
}

static bool flag_set(struct ucluster *c, void *arg) { return *(bool *)arg; }
static void set_flag(void *arg) { *(bool *)arg = true; }

static void u_stop(struct ucluster *c, int i)
{
	bool done = false;
	sluice_quorum_stop(c->n[i].q, set_flag, &done);
	cr_assert(run_until(c, flag_set, &done, UV_WAIT_MS), "node %d did not stop", c->n[i].id);
	c->n[i].q = NULL;
}

static void u_forget(struct unode *nd)
{
	sluice_image_free(nd->img);
	sluice_mlog_free(nd->mlog);
	nd->img = NULL;
	nd->mlog = NULL;
}

/* One running node leads and every running node knows it. */
static bool one_leader(struct ucluster *c, void *arg)
{
	int leader = -1;
	for (int i = 0; i < UV_NODES; i++)
		if (c->n[i].q && c->n[i].leader) {
			if (leader >= 0)
				return false;
			leader = i;
		}
	if (leader < 0)
		return false;
	for (int i = 0; i < UV_NODES; i++)
		if (c->n[i].q && c->n[i].leader_id != c->n[leader].id)
			return false;
	if (arg)
		*(int *)arg = leader;
	return true;
}

static int u_leader(struct ucluster *c)
{
	int leader = -1;
	cr_assert(run_until(c, one_leader, &leader, UV_WAIT_MS), "no leader emerged");
	cr_assert(sluice_quorum_is_leader(c->n[leader].q));
	cr_assert_eq(sluice_quorum_leader_id(c->n[leader].q), c->n[leader].id);
	return leader;
}

static bool all_at(struct ucluster *c, void *arg)
{
	for (int i = 0; i < UV_NODES; i++)
		if (c->n[i].q && sluice_image_offset(c->n[i].img) != *(int64_t *)arg)
			return false;
	return true;
}

struct uprop {
	bool done;
	int16_t error;
	int64_t last_offset;
};

static void uprop_done(void *arg, int16_t error, int64_t last_offset)
{
	struct uprop *p = arg;
	cr_assert(!p->done, "done called twice");
	p->done = true;
	p->error = error;
	p->last_offset = last_offset;
}

static bool uprop_is_done(struct ucluster *c, void *arg) { return ((struct uprop *)arg)->done; }

/* Propose recs on the leader, wait for it and for every running node to
 * reach the expected offset. */
static void u_commit(struct ucluster *c, const struct sluice_mrec *recs, size_t n, int64_t expect_last)
{
	int l = u_leader(c);
	struct uprop p = {0};
	cr_assert_eq(sluice_quorum_propose(c->n[l].q, recs, n, uprop_done, &p), KERR_NONE);
	cr_assert(!p.done, "done called before propose returned");
	cr_assert(run_until(c, uprop_is_done, &p, UV_WAIT_MS), "proposal not completed");
	cr_assert_eq(p.error, KERR_NONE, "proposal of %zu records: error %d", n, p.error);
	cr_assert_eq(p.last_offset, expect_last);
	cr_assert(run_until(c, all_at, &expect_last, UV_WAIT_MS), "not every node reached offset %lld",
		  (long long)expect_last);
	for (int i = 0; i < UV_NODES; i++)
		if (c->n[i].q && i != l)
			cr_assert(sluice_image_equal(c->n[l].img, c->n[i].img), "node %d's image differs", c->n[i].id);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void u_init(struct ucluster *c, unsigned threshold)
{
	memset(c, 0, sizeof *c);
	signal(SIGPIPE, SIG_IGN);
	cr_assert_eq(uv_loop_init(&c->loop), 0);
	strcpy(c->root, "/tmp/sluice-quorum-XXXXXX");
	cr_assert_not_null(mkdtemp(c->root));
	c->threshold = threshold;
	for (int i = 0; i < UV_NODES; i++) {
		c->n[i].id = i + 1;
		snprintf(c->n[i].dir, sizeof c->n[i].dir, "%s/n%d", c->root, i + 1);
	}
}

static void u_fini(struct ucluster *c)
{
	for (int i = 0; i < UV_NODES; i++) {
		if (c->n[i].q)
			u_stop(c, i);
		if (c->n[i].img)
			u_forget(&c->n[i]);
	}
	uv_run(&c->loop, UV_RUN_NOWAIT);
	cr_assert_eq(uv_loop_close(&c->loop), 0, "handles left open on the loop");
	nftw(c->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void idle_ms(struct ucluster *c, unsigned ms)
{
	bool never = false;
	run_until(c, flag_set, &never, ms);
}

static void big_command(struct sluice_mrec *recs)
{
	for (int k = 0; k < BIG_CONFIGS; k++) {
		rec_config(&recs[k], 0, 0);
		snprintf(recs[k].config.name, sizeof recs[k].config.name, "sluice.test.big.%04d", k);
		memset(recs[k].config.value, 'a' + k % 26, SLUICE_MREC_CONFIG_VALUE_MAX);
		recs[k].config.value[SLUICE_MREC_CONFIG_VALUE_MAX] = '\0';
	}
}

/* A first commit on all three; DescribeQuorum from the leader once the
 * followers were heard from, and from a follower; a follower refuses. */
static void u_first_commit_and_status(struct ucluster *c, struct sluice_mrec *small)
{
	rec_broker(&small[0], 1);
	rec_topic(&small[1], 0);
	rec_partition(&small[2], 0, 0, 1);
	u_commit(c, small, 3, 2);
	int l = u_leader(c);
	idle_ms(c, 300);
	struct sluice_quorum_status st;
	sluice_quorum_status(c->n[l].q, &st);
	cr_assert_eq(st.leader_id, c->n[l].id);
	cr_assert_eq(st.high_watermark, 2);
	cr_assert_gt(st.leader_epoch, 0);
	cr_assert_eq(st.voter_n, UV_NODES);
	for (int i = 0; i < UV_NODES; i++) {
		cr_assert_eq(st.voters[i].id, i + 1);
		cr_assert_eq(st.voters[i].log_end_offset, 2, "voter %d", i + 1);
		cr_assert_gt(st.voters[i].last_caught_up_ms, 0);
	}
	sluice_quorum_status(c->n[(l + 1) % UV_NODES].q, &st);
	cr_assert_eq(st.leader_id, c->n[l].id);
	cr_assert_eq(sluice_quorum_propose(c->n[(l + 1) % UV_NODES].q, small, 1, uprop_done, NULL), KERR_NOT_CONTROLLER);
}

/* The leader stops: another takes over and commits; the old one restarts
 * from its directory and catches up. Returns the offset reached. */
static int64_t u_failover(struct ucluster *c, struct sluice_mrec *small)
{
	int l = u_leader(c);
	u_stop(c, l);
	cr_assert_neq(u_leader(c), l);
	rec_broker(&small[0], 2);
	u_commit(c, small, 1, 3);
	u_forget(&c->n[l]);
	u_start(c, l);
	int64_t end = 3;
	cr_assert(run_until(c, all_at, &end, UV_WAIT_MS), "the restarted node did not catch up");
	return end;
}

/* A proposal pending when its leader stops completes with NOT_CONTROLLER;
 * the leader restarts and everyone commits on. Returns the offset reached. */
static int64_t u_pending_at_stop(struct ucluster *c, struct sluice_mrec *small)
{
	int l = u_leader(c);
	struct uprop p = {0};
	int64_t end = -1;
	rec_broker(&small[0], 3);
	cr_assert_eq(sluice_quorum_propose(c->n[l].q, small, 1, uprop_done, &p), KERR_NONE);
	u_stop(c, l);
	cr_assert(p.done);
	cr_assert_eq(p.error, KERR_NOT_CONTROLLER);
	/* It may still commit under the next leader (as in any Raft). */
	u_leader(c);
	u_forget(&c->n[l]);
	u_start(c, l);
	for (int k = 0; k < 2; k++) {
		rec_config(&small[0], 0, (uint64_t)k + 100);
		end = sluice_image_offset(c->n[u_leader(c)].img) + 1;
		u_commit(c, small, 1, end);
	}
	return end;
}

/* Everyone stops; restarted from the same directories, the images come
 * back equal (a snapshot loaded at start, then the log). */
static void u_restart_all(struct ucluster *c, int64_t end)
{
	struct sluice_image *before[UV_NODES];
	for (int i = 0; i < UV_NODES; i++) {
		u_stop(c, i);
		before[i] = c->n[i].img;
		sluice_mlog_free(c->n[i].mlog);
		c->n[i].img = NULL;
		c->n[i].mlog = NULL;
	}
	for (int i = 0; i < UV_NODES; i++)
		u_start(c, i);
	u_leader(c);
	cr_assert(run_until(c, all_at, &end, UV_WAIT_MS), "not reloaded to offset %lld", (long long)end);
	for (int i = 0; i < UV_NODES; i++) {
		cr_assert(sluice_image_equal(before[i], c->n[i].img), "node %d reloaded a different image", i + 1);
		cr_assert_eq(c->n[i].restored_n, 1, "node %d loaded no snapshot at start", i + 1);
		sluice_image_free(before[i]);
	}
}

/* REAL TIME (about 5-7 s). A leader emerges among three controllers, a
 * proposal commits at the expected offsets on all three, the leader stops
 * and another emerges and commits, the stopped one restarts from its
 * directory and catches up, a command of about 10 MiB (above raft_uv's
 * 8 MiB segment size) commits, a proposal pending when its leader stops
 * completes with NOT_CONTROLLER, and all three restarted from their
 * directories reload the same images (snapshot + log). The loop must keep
 * turning: time spent outside it (say, building records) would look like a
 * stalled leader to the followers. */
Test(quorum_uv, real_time_leader_commit_failover_restart)
{
	struct ucluster c;
	struct sluice_mrec *recs = calloc(BIG_CONFIGS, sizeof *recs);
	struct sluice_mrec small[3];
	cr_assert(recs);
	big_command(recs); /* built before the quorum runs */
	u_init(&c, 4);
	for (int i = 0; i < UV_NODES; i++)
		u_start(&c, i);
	u_first_commit_and_status(&c, small);
	int64_t end = u_failover(&c, small);
	/* One command of about 10 MiB, then small ones past the snapshot threshold. */
	end += BIG_CONFIGS;
	u_commit(&c, recs, BIG_CONFIGS, end);
	cr_assert_str_eq(sluice_image_config(c.n[0].img, SLUICE_MREC_RESOURCE_TOPIC, "t0", "sluice.test.big.2499"),
			 recs[BIG_CONFIGS - 1].config.value);
	for (int k = 0; k < 5; k++) {
		rec_config(&small[0], 0, (uint64_t)k);
		u_commit(&c, small, 1, ++end);
	}
	end = u_pending_at_stop(&c, small);
	u_restart_all(&c, end);
	u_fini(&c);
	free(recs);
}

/* Without SIGPIPE ignored the quorum refuses to start; bad configurations
 * are refused with a message. */
Test(quorum_uv, refuses_without_sigpipe_ignored_and_bad_config)
{
	struct ucluster c;
	struct sluice_quorum *q = NULL;
	char err[256] = "";
	u_init(&c, 0);
	struct sluice_image *img = sluice_image_new();
	struct sluice_quorum_config cfg = {.node_id = 1, .voter_n = 1, .dir = c.n[0].dir};
	cfg.voters[0].id = 1;
	strcpy(cfg.voters[0].host, "127.0.0.1");
	cfg.voters[0].port = UV_PORT_BASE + 10;
	signal(SIGPIPE, SIG_DFL);
	cr_assert_eq(sluice_quorum_start(&q, &c.loop, &cfg, img, NULL, NULL, NULL, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "SIGPIPE"), "%s", err);
	cr_assert_null(q);
	signal(SIGPIPE, SIG_IGN);
	cfg.node_id = 2;
	cr_assert_eq(sluice_quorum_start(&q, &c.loop, &cfg, img, NULL, NULL, NULL, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "node.id"), "%s", err);
	cfg.node_id = 1;
	strcpy(cfg.voters[0].host, "no-such-host.invalid");
	cr_assert_eq(sluice_quorum_start(&q, &c.loop, &cfg, img, NULL, NULL, NULL, err, sizeof err), -1);
	cr_assert_not_null(strstr(err, "resolve"), "%s", err);
	sluice_image_free(img);
	u_fini(&c);
}

/* One voter alone: leads, commits, stops, and restarts from its log. */
Test(quorum_uv, real_time_single_voter_restart)
{
	struct ucluster c;
	struct sluice_quorum *q = NULL;
	char err[256] = "";
	u_init(&c, 0);
	struct unode *nd = &c.n[0];
	struct sluice_quorum_config cfg = {.node_id = 1, .voter_n = 1, .dir = nd->dir, .election_timeout_ms = 200};
	cfg.voters[0].id = 1;
	strcpy(cfg.voters[0].host, "localhost");
	cfg.voters[0].port = UV_PORT_BASE + 20;
	for (int round = 0; round < 2; round++) {
		nd->img = sluice_image_new();
		nd->mlog = sluice_mlog_new(1000, 1 << 20);
		nd->applied_next = 0;
		nd->leader = false;
		nd->leader_id = -1;
		cr_assert_eq(sluice_quorum_start(&q, &c.loop, &cfg, nd->img, nd->mlog, &u_cbs, nd, err, sizeof err), 0,
			     "%s", err);
		nd->q = q;
		u_leader(&c);
		int64_t expect = round == 0 ? -1 : 0;
		cr_assert(run_until(&c, all_at, &expect, UV_WAIT_MS));
		struct sluice_mrec r;
		rec_broker(&r, 10 + round);
		u_commit(&c, &r, 1, expect + 1);
		u_stop(&c, 0);
		u_forget(nd);
	}
	u_fini(&c);
}
