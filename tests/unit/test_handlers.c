/* Kafka protocol handler tests, driving sluice_proto_on_frame directly with
 * the transport, storage and coordinator doubles of proto_stubs.c. Requests
 * are encoded here, per version, from the Apache Kafka message schemas
 * (Apache Kafka's messages/ *.json: compact strings, arrays and tagged
 * fields with request header v2 in flexible versions, ApiVersions answering
 * with response header v0), and every response is decoded strictly for its
 * version: each field at its version, nullable only where the schema allows,
 * and no byte left over. They prove that for every API and version the
 * broker advertises among ApiVersions 0-4 (and the v99 fallback), Metadata
 * 0-12, Produce 3-11 (0-2 refused per partition), Fetch 4-12, ListOffsets
 * 1-7, CreateTopics 2-7, DeleteTopics 1-6, DescribeConfigs 1-4,
 * FindCoordinator 0-4 and InitProducerId 0-4, the broker answers with the
 * right correlation id, error codes, echoed names and the offsets the
 * (fake) storage produced; that unsupported keys, versions and short headers
 * close the connection without an answer; that responses keep request order
 * even when a fetch long-polls; and that the exact requests kcat/librdkafka
 * 2.0.2 sent to a running broker (fixtures/, see its README) decode and get
 * sane answers, while every truncation of them is rejected and byte-level
 * mutations of them never crash the decoder (this suite also runs under
 * AddressSanitizer and UBSan). A few more tests pin down bugs found on the
 * way (group request routing, CreatePartitions names, DeleteTopics names and
 * memory, CreateTopics size rules and cost), as regression tests.
 * Cluster mode's data path is proved over snapshots in which other brokers
 * lead (proto_stubs' stub_cluster_*): records only where this broker leads
 * and at the leader epoch, Metadata, DescribeCluster and FindCoordinator
 * from the snapshot, group requests for other coordinators refused as
 * Kafka refuses them, DescribeQuorum answered alone or relayed; and the
 * configuration keys of cluster mode. */
#include "batch_build.h"
#include "batch_codecs.h"
#include "common/kafka/batch.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "control/meta.h"
#include "dataplane/proto_internal.h"
#include "proto_stubs.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef SLUICE_TEST_FIXTURES
#define SLUICE_TEST_FIXTURES "tests/unit/fixtures"
#endif

/* ---- harness ------------------------------------------------------------------------ */

static char tmpdir[128];
static struct broker *BR;
static struct conn *C;
static int32_t corr_next;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

static void setup_with(const char *const *overrides)
{
	/* tmpfs when there is one: metadata changes are fsync'ed. */
	struct stat st;
	const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	snprintf(tmpdir, sizeof tmpdir, "%s/sluice-handlers-XXXXXX", base);
	cr_assert_not_null(mkdtemp(tmpdir));
	BR = stub_broker_open(tmpdir, overrides);
	cr_assert_not_null(BR);
	sluice_log_set_level(SLUICE_LOG_ERROR);
	C = stub_conn_new();
	cr_assert_not_null(C);
	corr_next = 1000;
}
static void setup(void) { setup_with(NULL); }

static void teardown(void)
{
	stub_conn_free(C);
	C = NULL;
	stub_broker_close();
	nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* A fresh connection (after a test closed the current one). */
static void reconnect(void)
{
	stub_conn_free(C);
	C = stub_conn_new();
}

static void create_topic(const char *name, int32_t partitions)
{
	struct sluice_topic_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.name = name;
	spec.name_len = strlen(name);
	spec.partitions = partitions;
	spec.replication_factor = -1;
	char msg[256] = "";
	int16_t e = BR->meta.ops->create_topic(BR->meta.self, &spec, false, msg, sizeof msg, NULL);
	cr_assert_eq(e, 0, "create_topic %s: %d %s", name, e, msg);
}

/* The topic's id, or false when it does not exist. */
static bool topic_id(const char *name, uint8_t id[16], int32_t *partitions)
{
	struct sluice_meta_snapshot *s = BR->meta.ops->acquire(BR->meta.self);
	const struct sluice_topic *t = sluice_meta_find(s, name, strlen(name));
	if (t) {
		if (id)
			memcpy(id, t->id, 16);
		if (partitions)
			*partitions = t->partitions;
	}
	BR->meta.ops->release(BR->meta.self, s);
	return t != NULL;
}

static int64_t wall_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* First flexible version of each API, from the schemas' flexibleVersions. */
static bool flex_of(int16_t key, int16_t v)
{
	switch (key) {
	case 0: return v >= 9;
	case 1: return v >= 12;
	case 2: return v >= 6;
	case 3: return v >= 9;
	case 10: return v >= 3;
	case 18: return v >= 3;
	case 19: return v >= 5;
	case 20: return v >= 4;
	case 22: return v >= 2;
	case 23: return v >= 4;
	case 32: return v >= 4;
	case 33: return v >= 2;
	case 35: return v >= 2;
	case 44: return v >= 1;
	case 37: return v >= 2;
	case 8: return v >= 8;
	case 9: return v >= 6;
	case 11: return v >= 6;
	case 12: return v >= 4;
	case 13: return v >= 4;
	case 14: return v >= 4;
	case 15: return v >= 5;
	case 21: return v >= 2;
	case 42: return v >= 2;
	case 47: return false;
	case 55: return true;
	case 60: return true;
	default: cr_assert_fail("no flex table entry for key %d", key); return false;
	}
}

/* ---- request encoding ------------------------------------------------------------------ */

struct rq {
	struct kwr w;
	int16_t key, ver;
	bool flex;
	int32_t corr;
};

static void rq_start(struct rq *q, int16_t key, int16_t ver)
{
	q->key = key;
	q->ver = ver;
	q->flex = flex_of(key, ver);
	q->corr = corr_next++;
	kwr_init(&q->w, 256, 1u << 30);
	kwr_i16(&q->w, key);
	kwr_i16(&q->w, ver);
	kwr_i32(&q->w, q->corr);
	kwr_cstr(&q->w, false, "sluice-unit"); /* header v1+: ClientId is never compact */
	if (q->flex)
		kwr_tags_empty(&q->w);
}
static void rq_str(struct rq *q, const char *s) { kwr_cstr(&q->w, q->flex, s); }
static void rq_arr(struct rq *q, int32_t n) { kwr_array(&q->w, q->flex, n); }
static void rq_tags(struct rq *q)
{
	if (q->flex)
		kwr_tags_empty(&q->w);
}

/* With SLUICE_DUMP_REQUESTS=dir, every request this suite encodes is also
 * written there as hex (how tests/fuzz/seeds was made). */
static void rq_dump(const struct rq *q)
{
	const char *dir = getenv("SLUICE_DUMP_REQUESTS");
	if (!dir)
		return;
	char path[512];
	snprintf(path, sizeof path, "%s/k%d-v%d-%d.hex", dir, q->key, q->ver, q->corr);
	FILE *f = fopen(path, "w");
	if (!f)
		return;
	for (size_t i = 0; i < q->w.len; i++)
		fprintf(f, "%02x", q->w.buf[i]);
	fputc('\n', f);
	fclose(f);
}

/* Send; returns on_frame's verdict. */
static bool rq_send(struct rq *q)
{
	cr_assert(!q->w.err);
	rq_dump(q);
	bool ok = stub_frame(C, q->w.buf, q->w.len);
	kwr_free(&q->w);
	return ok;
}

/* ---- response decoding ------------------------------------------------------------------- */

struct rs {
	uint8_t *buf;
	size_t len;
	struct krd r;
	bool flex;
	int16_t ver;
};

/* Take the next response and check its size prefix and header. */
static void rs_take(struct rs *s, int16_t key, int16_t ver, int32_t corr)
{
	cr_assert(stub_take_response(C, &s->buf, &s->len), "no response for key %d v%d corr %d", key, ver, corr);
	krd_init(&s->r, s->buf, s->len);
	s->flex = flex_of(key, ver);
	s->ver = ver;
	int32_t size = krd_i32(&s->r);
	cr_assert_eq((size_t)size, s->len - 4, "size prefix %d for %zu bytes", size, s->len - 4);
	cr_assert_eq(krd_i32(&s->r), corr, "correlation id");
	if (s->flex && key != 18) /* response header v1, except ApiVersions (always v0) */
		krd_tags_skip(&s->r);
}
static void rs_end(struct rs *s)
{
	cr_assert(!s->r.err, "response decode failed at byte %zu: %s", krd_offset(&s->r),
		  s->r.err_what ? s->r.err_what : "?");
	cr_assert_eq(krd_left(&s->r), 0, "%zu bytes left over in the response", krd_left(&s->r));
	free(s->buf);
	s->buf = NULL;
}
static void rs_tags(struct rs *s)
{
	if (s->flex)
		krd_tags_skip(&s->r);
}
static int32_t rs_arr(struct rs *s, bool nullable)
{
	int32_t n = krd_array(&s->r, s->flex, 1);
	if (!nullable)
		cr_assert_geq(n, 0, "non-nullable array read as null");
	return n;
}
/* Read a string into out (NUL-terminated); returns false for null, which
 * must be allowed. */
static bool rs_str(struct rs *s, char *out, size_t cap, bool nullable)
{
	struct kstr k = krd_string(&s->r, s->flex);
	if (!k.ptr) {
		cr_assert(nullable || s->r.err, "non-nullable string read as null at byte %zu", krd_offset(&s->r));
		if (cap)
			out[0] = '\0';
		return false;
	}
	if (cap) {
		size_t n = (size_t)k.len < cap - 1 ? (size_t)k.len : cap - 1;
		memcpy(out, k.ptr, n);
		out[n] = '\0';
	}
	return true;
}

/* ---- ApiVersions ------------------------------------------------------------------------ */

struct av {
	int16_t err;
	int n;
	int16_t key[128], min[128], max[128];
};

static void enc_api_versions(struct rq *q, int16_t v)
{
	rq_start(q, 18, v);
	if (v >= 3) {
		kwr_cstr(&q->w, true, "sluice-unit");
		kwr_cstr(&q->w, true, "0.1");
		kwr_tags_empty(&q->w);
	}
}

static void dec_api_versions(struct rs *s, struct av *a)
{
	int16_t v = s->ver;
	a->err = krd_i16(&s->r);
	int32_t n = rs_arr(s, false);
	cr_assert_leq(n, 128);
	a->n = n;
	for (int i = 0; i < n; i++) {
		a->key[i] = krd_i16(&s->r);
		a->min[i] = krd_i16(&s->r);
		a->max[i] = krd_i16(&s->r);
		rs_tags(s);
	}
	if (v >= 1)
		cr_expect_eq(krd_i32(&s->r), 0, "ThrottleTimeMs");
	rs_tags(s);
}

static bool av_range(const struct av *a, int16_t key, int16_t *min, int16_t *max)
{
	for (int i = 0; i < a->n; i++)
		if (a->key[i] == key) {
			*min = a->min[i];
			*max = a->max[i];
			return true;
		}
	return false;
}

/* COMPAT.md's "advertise" column. */
static const struct { int16_t key, min, max; } compat_advertise[] = {
	{0, 0, 11}, {1, 4, 12}, {2, 1, 7}, {3, 0, 12}, {8, 2, 9}, {9, 1, 9}, {10, 0, 4}, {11, 0, 9},
	{12, 0, 4}, {13, 0, 5}, {14, 0, 5}, {15, 0, 5}, {16, 0, 5}, {17, 0, 1}, {18, 0, 4}, {19, 2, 7},
	{20, 1, 6}, {21, 0, 2}, {22, 0, 4}, {23, 2, 4}, {32, 1, 4}, {33, 0, 2}, {36, 0, 2}, {37, 0, 3},
	{42, 0, 2}, {44, 0, 1}, {60, 0, 1},
};

/* The APIs this suite encodes, with the versions to exercise. */
static const struct { int16_t key, min, max; } covered[] = {
	{18, 0, 4}, {3, 0, 12}, {0, 3, 11}, {1, 4, 12}, {2, 1, 7}, {19, 2, 7}, {20, 1, 6}, {32, 1, 4},
	{10, 0, 4}, {22, 0, 4}, {23, 2, 4}, {35, 1, 4},
};

/* Proves ApiVersions v0-v4 answer error 0 with header v0, the v3+ flexible
 * body, ThrottleTimeMs from v1, and list every API this suite covers over
 * exactly the version range COMPAT.md says to advertise. */
Test(api_versions, all_versions, .init = setup, .fini = teardown)
{
	for (int16_t v = 0; v <= 4; v++) {
		struct rq q;
		enc_api_versions(&q, v);
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 18, v, q.corr);
		struct av a;
		dec_api_versions(&s, &a);
		rs_end(&s);
		cr_expect_eq(a.err, 0, "v%d error %d", v, a.err);
		for (size_t i = 0; i < sizeof covered / sizeof *covered; i++) {
			int16_t mn, mx;
			cr_assert(av_range(&a, covered[i].key, &mn, &mx), "v%d: key %d not advertised", v, covered[i].key);
			cr_expect_leq(mn, covered[i].min, "key %d min %d", covered[i].key, mn);
			cr_expect_geq(mx, covered[i].max, "key %d max %d", covered[i].key, mx);
		}
	}
}

/* Proves every advertised API that COMPAT.md lists is advertised with
 * exactly its range (the librdkafka feature traps: Produce from 0, Fetch
 * containing 4 and 10, InitProducerId and FindCoordinator from 0), and that
 * ConsumerGroupHeartbeat (68) is not advertised. */
Test(api_versions, advertised_ranges_match_compat, .init = setup, .fini = teardown)
{
	struct rq q;
	enc_api_versions(&q, 3);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 18, 3, q.corr);
	struct av a;
	dec_api_versions(&s, &a);
	rs_end(&s);
	for (int i = 0; i < a.n; i++) {
		cr_expect_leq(a.min[i], a.max[i], "key %d", a.key[i]);
		cr_expect_neq(a.key[i], 68, "ConsumerGroupHeartbeat must not be advertised");
		for (size_t k = 0; k < sizeof compat_advertise / sizeof *compat_advertise; k++)
			if (compat_advertise[k].key == a.key[i]) {
				cr_expect_eq(a.min[i], compat_advertise[k].min, "key %d min", a.key[i]);
				cr_expect_eq(a.max[i], compat_advertise[k].max, "key %d max", a.key[i]);
			}
		for (int j = 0; j < i; j++)
			cr_expect_neq(a.key[i], a.key[j], "key %d listed twice", a.key[i]);
	}
	int16_t mn, mx;
	cr_assert(av_range(&a, 0, &mn, &mx));
	cr_expect(mn == 0 && mx >= 7, "Produce must contain 0 (compression) and 7 (zstd)");
	cr_assert(av_range(&a, 1, &mn, &mx));
	cr_expect(mn <= 4 && mx >= 10, "Fetch must contain 4 and 10");
}

/* Proves the ApiVersions fallback for a version the broker does not know
 * (v5, v99, v-1): body not parsed, a v0 body and v0 header, error 35
 * UNSUPPORTED_VERSION and only {18, 0, 4}. */
Test(api_versions, unsupported_version_fallback, .init = setup, .fini = teardown)
{
	const int16_t versions[] = {5, 99, -1, INT16_MAX};
	for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
		struct rq q;
		q.corr = corr_next++;
		kwr_init(&q.w, 64, 1 << 20);
		kwr_i16(&q.w, 18);
		kwr_i16(&q.w, versions[i]);
		kwr_i32(&q.w, q.corr);
		kwr_raw(&q.w, "\xde\xad\xbe\xef\xff\xff", 6); /* whatever a future client sends */
		cr_assert(stub_frame(C, q.w.buf, q.w.len), "v%d", versions[i]);
		kwr_free(&q.w);
		struct rs s;
		rs_take(&s, 18, 0, q.corr);
		struct av a;
		dec_api_versions(&s, &a);
		rs_end(&s);
		cr_expect_eq(a.err, 35);
		cr_assert_eq(a.n, 1);
		cr_expect(a.key[0] == 18 && a.min[0] == 0 && a.max[0] == 4);
	}
}

/* ---- Metadata ------------------------------------------------------------------------------ */

struct md_part {
	int16_t err;
	int32_t index, leader, nreplicas, nisr, replica0;
};
struct md_topic {
	int16_t err;
	char name[300];
	bool name_null;
	uint8_t id[16];
	bool internal;
	int nparts;
	struct md_part p[8];
};
struct md {
	int nbrokers;
	int32_t node, port, controller;
	char host[64], cluster[64];
	int ntopics;
	struct md_topic t[32];
};

/* names: n entries (n = -1: all topics); ids: optional per-entry topic ids
 * (v10+, used when the name is NULL). */
static void enc_metadata(struct rq *q, int16_t v, const char *const *names, const uint8_t (*ids)[16], int n,
			 bool allow_auto)
{
	rq_start(q, 3, v);
	if (n < 0)
		rq_arr(q, v == 0 ? 0 : -1);
	else {
		rq_arr(q, n);
		for (int i = 0; i < n; i++) {
			if (v >= 10) {
				static const uint8_t zero[16];
				kwr_uuid(&q->w, ids ? ids[i] : zero);
			}
			rq_str(q, names[i]);
			rq_tags(q);
		}
	}
	if (v >= 4)
		kwr_bool(&q->w, allow_auto);
	if (v >= 8 && v <= 10)
		kwr_bool(&q->w, false);
	if (v >= 8)
		kwr_bool(&q->w, false);
	rq_tags(q);
}

static void dec_metadata(struct rs *s, struct md *m)
{
	int16_t v = s->ver;
	memset(m, 0, sizeof *m);
	if (v >= 3)
		cr_expect_eq(krd_i32(&s->r), 0);
	m->nbrokers = rs_arr(s, false);
	for (int i = 0; i < m->nbrokers && !s->r.err; i++) {
		m->node = krd_i32(&s->r);
		rs_str(s, m->host, sizeof m->host, false);
		m->port = krd_i32(&s->r);
		if (v >= 1)
			rs_str(s, NULL, 0, true); /* Rack */
		rs_tags(s);
	}
	if (v >= 2)
		rs_str(s, m->cluster, sizeof m->cluster, true);
	m->controller = v >= 1 ? krd_i32(&s->r) : -1;
	m->ntopics = rs_arr(s, false);
	cr_assert_leq(m->ntopics, 32);
	for (int i = 0; i < m->ntopics && !s->r.err; i++) {
		struct md_topic *t = &m->t[i];
		t->err = krd_i16(&s->r);
		t->name_null = !rs_str(s, t->name, sizeof t->name, v >= 12);
		if (v >= 10)
			krd_uuid(&s->r, t->id);
		if (v >= 1)
			t->internal = krd_bool(&s->r);
		t->nparts = rs_arr(s, false);
		for (int p = 0; p < t->nparts && !s->r.err; p++) {
			struct md_part tmp, *mp = p < 8 ? &t->p[p] : &tmp;
			mp->err = krd_i16(&s->r);
			mp->index = krd_i32(&s->r);
			mp->leader = krd_i32(&s->r);
			if (v >= 7)
				(void)krd_i32(&s->r); /* LeaderEpoch */
			mp->nreplicas = rs_arr(s, false);
			for (int k = 0; k < mp->nreplicas && !s->r.err; k++) {
				int32_t id = krd_i32(&s->r);
				if (k == 0)
					mp->replica0 = id;
			}
			mp->nisr = rs_arr(s, false);
			for (int k = 0; k < mp->nisr && !s->r.err; k++)
				(void)krd_i32(&s->r);
			if (v >= 5) {
				int32_t off = rs_arr(s, false);
				for (int k = 0; k < off && !s->r.err; k++)
					(void)krd_i32(&s->r);
			}
			rs_tags(s);
		}
		if (v >= 8)
			(void)krd_i32(&s->r); /* TopicAuthorizedOperations */
		rs_tags(s);
	}
	if (v >= 8 && v <= 10)
		(void)krd_i32(&s->r);
	rs_tags(s);
}

static const struct md_topic *md_find(const struct md *m, const char *name)
{
	for (int i = 0; i < m->ntopics; i++)
		if (!strcmp(m->t[i].name, name))
			return &m->t[i];
	return NULL;
}

static void metadata_roundtrip(int16_t v, const char *const *names, const uint8_t (*ids)[16], int n, bool allow_auto,
			       struct md *m)
{
	struct rq q;
	enc_metadata(&q, v, names, ids, n, allow_auto);
	cr_assert(rq_send(&q), "Metadata v%d refused", v);
	struct rs s;
	rs_take(&s, 3, v, q.corr);
	dec_metadata(&s, m);
	rs_end(&s);
}

/* Proves Metadata v0-v12 for all topics: the single broker (node 1,
 * 127.0.0.1:9092), the cluster id (v2+), the controller (v1+), and each
 * topic with its partitions led by node 1 with replicas and ISR [1], and
 * the topic id (v10+) that the metadata store holds. */
Test(metadata, all_topics_every_version, .init = setup, .fini = teardown)
{
	create_topic("md-a", 3);
	create_topic("md-b", 1);
	uint8_t id[16];
	cr_assert(topic_id("md-a", id, NULL));
	for (int16_t v = 0; v <= 12; v++) {
		struct md m;
		metadata_roundtrip(v, NULL, NULL, -1, true, &m);
		cr_expect_eq(m.nbrokers, 1, "v%d", v);
		cr_expect_eq(m.node, 1);
		cr_expect_str_eq(m.host, "127.0.0.1");
		cr_expect_eq(m.port, 9092);
		if (v >= 1)
			cr_expect_eq(m.controller, 1);
		if (v >= 2)
			cr_expect_str_eq(m.cluster, "sluice-local-cluster0");
		cr_expect_eq(m.ntopics, 2, "v%d: %d topics", v, m.ntopics);
		const struct md_topic *t = md_find(&m, "md-a");
		cr_assert_not_null(t, "v%d: md-a missing", v);
		cr_expect_eq(t->err, 0);
		cr_expect(!t->internal);
		cr_assert_eq(t->nparts, 3);
		for (int p = 0; p < 3; p++) {
			cr_expect_eq(t->p[p].err, 0);
			cr_expect_eq(t->p[p].index, p);
			cr_expect_eq(t->p[p].leader, 1);
			cr_expect_eq(t->p[p].nreplicas, 1);
			cr_expect_eq(t->p[p].replica0, 1);
			cr_expect_eq(t->p[p].nisr, 1);
		}
		if (v >= 10)
			cr_expect(memcmp(t->id, id, 16) == 0, "v%d topic id", v);
	}
}

/* Proves named Metadata lookups: a known topic is answered; an unknown one
 * is UNKNOWN_TOPIC_OR_PARTITION (3) when v4+ asks not to auto-create, and is
 * auto-created (num.partitions = 1) otherwise, v0-3 always allowing it; an
 * illegal name is INVALID_TOPIC (17) and is never created. Names are echoed. */
Test(metadata, named_topics_and_auto_create, .init = setup, .fini = teardown)
{
	create_topic("md-known", 2);
	for (int16_t v = 0; v <= 12; v++) {
		char missing[64], created[64];
		snprintf(missing, sizeof missing, "md-missing-%d", v);
		snprintf(created, sizeof created, "md-auto-%d", v);
		if (v >= 4) {
			const char *names[] = {"md-known", missing, "bad name!"};
			struct md m;
			metadata_roundtrip(v, names, NULL, 3, false, &m);
			cr_assert_eq(m.ntopics, 3, "v%d", v);
			cr_expect_str_eq(m.t[0].name, "md-known");
			cr_expect_eq(m.t[0].err, 0);
			cr_expect_eq(m.t[0].nparts, 2);
			cr_expect_str_eq(m.t[1].name, missing);
			cr_expect_eq(m.t[1].err, 3, "v%d unknown topic: %d", v, m.t[1].err);
			cr_expect_eq(m.t[1].nparts, 0);
			cr_expect_str_eq(m.t[2].name, "bad name!");
			cr_expect_eq(m.t[2].err, 17, "v%d invalid name: %d", v, m.t[2].err);
			cr_expect(!topic_id(missing, NULL, NULL), "v%d must not auto-create", v);
		}
		const char *names[] = {created, "bad name!"};
		struct md m;
		metadata_roundtrip(v, names, NULL, 2, true, &m);
		cr_assert_eq(m.ntopics, 2);
		cr_expect_str_eq(m.t[0].name, created);
		cr_expect_eq(m.t[0].err, 0, "v%d auto-created topic error %d", v, m.t[0].err);
		cr_expect_eq(m.t[0].nparts, 1);
		cr_expect_eq(m.t[1].err, 17);
		int32_t parts = 0;
		cr_expect(topic_id(created, NULL, &parts), "v%d: %s not created", v, created);
		cr_expect_eq(parts, 1);
		cr_expect(!topic_id("bad name!", NULL, NULL));
	}
}

/* Proves Metadata v12 lookups by topic id: a known id gets its name and
 * partitions, an unknown id gets UNKNOWN_TOPIC_ID (100) with a null name. */
Test(metadata, by_topic_id_v12, .init = setup, .fini = teardown)
{
	create_topic("md-id", 4);
	uint8_t ids[2][16];
	cr_assert(topic_id("md-id", ids[0], NULL));
	memset(ids[1], 0x42, 16);
	const char *names[] = {NULL, NULL};
	struct md m;
	metadata_roundtrip(12, names, (const uint8_t(*)[16])ids, 2, false, &m);
	cr_assert_eq(m.ntopics, 2);
	cr_expect_eq(m.t[0].err, 0);
	cr_expect_str_eq(m.t[0].name, "md-id");
	cr_expect_eq(m.t[0].nparts, 4);
	cr_expect(memcmp(m.t[0].id, ids[0], 16) == 0);
	cr_expect_eq(m.t[1].err, 100);
	cr_expect(m.t[1].name_null);
	cr_expect(memcmp(m.t[1].id, ids[1], 16) == 0);
}

/* ---- Produce ------------------------------------------------------------------------------------ */

struct ppart_req {
	int32_t index;
	const uint8_t *recs; /* NULL: null records */
	int32_t len;
};
struct ptopic_req {
	const char *name;
	int np;
	struct ppart_req p[4];
};

static void enc_produce(struct rq *q, int16_t v, int16_t acks, const struct ptopic_req *t, int nt)
{
	rq_start(q, 0, v);
	if (v >= 3)
		rq_str(q, NULL); /* TransactionalId */
	kwr_i16(&q->w, acks);
	kwr_i32(&q->w, 30000);
	rq_arr(q, nt);
	for (int i = 0; i < nt; i++) {
		rq_str(q, t[i].name);
		rq_arr(q, t[i].np);
		for (int p = 0; p < t[i].np; p++) {
			kwr_i32(&q->w, t[i].p[p].index);
			kwr_bytes(&q->w, q->flex, t[i].p[p].recs, t[i].p[p].len);
			rq_tags(q);
		}
		rq_tags(q);
	}
	rq_tags(q);
}

struct pr_part {
	int32_t index;
	int16_t err;
	int64_t base, append_time, log_start;
	int nrecord_errors;
	int32_t record_error_index;
	bool msg_null;
	char msg[256];
};
struct pr {
	int ntopics;
	struct {
		char name[256];
		int np;
		struct pr_part p[4];
	} t[4];
};

static void dec_produce(struct rs *s, struct pr *o)
{
	int16_t v = s->ver;
	memset(o, 0, sizeof *o);
	o->ntopics = rs_arr(s, false);
	cr_assert_leq(o->ntopics, 4);
	for (int i = 0; i < o->ntopics && !s->r.err; i++) {
		rs_str(s, o->t[i].name, sizeof o->t[i].name, false);
		o->t[i].np = rs_arr(s, false);
		cr_assert_leq(o->t[i].np, 4);
		for (int p = 0; p < o->t[i].np && !s->r.err; p++) {
			struct pr_part *pp = &o->t[i].p[p];
			pp->index = krd_i32(&s->r);
			pp->err = krd_i16(&s->r);
			pp->base = krd_i64(&s->r);
			pp->append_time = v >= 2 ? krd_i64(&s->r) : -1;
			pp->log_start = v >= 5 ? krd_i64(&s->r) : -1;
			pp->msg_null = true;
			if (v >= 8) {
				pp->nrecord_errors = rs_arr(s, false);
				for (int k = 0; k < pp->nrecord_errors && !s->r.err; k++) {
					pp->record_error_index = krd_i32(&s->r);
					rs_str(s, NULL, 0, true);
					rs_tags(s);
				}
				pp->msg_null = !rs_str(s, pp->msg, sizeof pp->msg, true);
			}
			rs_tags(s);
		}
		rs_tags(s);
	}
	if (v >= 1)
		cr_expect_eq(krd_i32(&s->r), 0);
	rs_tags(s);
}

static void produce_roundtrip(int16_t v, int16_t acks, const struct ptopic_req *t, int nt, struct pr *o)
{
	struct rq q;
	enc_produce(&q, v, acks, t, nt);
	cr_assert(rq_send(&q), "Produce v%d refused", v);
	struct rs s;
	rs_take(&s, 0, v, q.corr);
	dec_produce(&s, o);
	rs_end(&s);
}

/* A valid batch of n records stamped now. */
static uint8_t *now_batch(int n, size_t *len) { return tb_simple(n, wall_now_ms(), 16, len); }

/* Proves Produce v3-v11 with acks=1 appends each partition's batch and
 * answers error 0 with the base offset the storage assigned, LogAppendTime
 * -1 (v2+), the log start offset (v5+), no record errors and a null message
 * (v8+), echoing topic names and partition indexes in request order. */
Test(produce, every_version, .init = setup, .fini = teardown)
{
	create_topic("pt", 2);
	size_t l2, l1;
	uint8_t *b2 = now_batch(2, &l2), *b1 = now_batch(1, &l1);
	int64_t next0 = 0, next1 = 0;
	for (int16_t v = 3; v <= 11; v++) {
		struct ptopic_req t = {"pt", 2, {{0, b2, (int32_t)l2}, {1, b1, (int32_t)l1}}};
		struct pr o;
		produce_roundtrip(v, 1, &t, 1, &o);
		cr_assert_eq(o.ntopics, 1);
		cr_expect_str_eq(o.t[0].name, "pt");
		cr_assert_eq(o.t[0].np, 2);
		struct pr_part *p0 = &o.t[0].p[0], *p1 = &o.t[0].p[1];
		cr_expect_eq(p0->index, 0);
		cr_expect_eq(p1->index, 1);
		cr_expect_eq(p0->err, 0, "v%d error %d", v, p0->err);
		cr_expect_eq(p1->err, 0);
		cr_expect_eq(p0->base, next0, "v%d base %" PRId64 " want %" PRId64, v, p0->base, next0);
		cr_expect_eq(p1->base, next1);
		cr_expect_eq(p0->append_time, -1);
		if (v >= 5)
			cr_expect_eq(p0->log_start, 0);
		if (v >= 8) {
			cr_expect_eq(p0->nrecord_errors, 0);
			cr_expect(p0->msg_null);
		}
		next0 += 2;
		next1 += 1;
		cr_expect_eq(stub_store_hw("pt", 0), next0);
		cr_expect_eq(stub_store_hw("pt", 1), next1);
	}
	free(b2);
	free(b1);
}

/* Proves Produce v0-v2 (advertised for librdkafka's compression probe but
 * not served) answer UNSUPPORTED_VERSION (35) per partition, append nothing. */
Test(produce, v0_to_v2_refused_per_partition, .init = setup, .fini = teardown)
{
	create_topic("pt-old", 1);
	size_t len = 0;
	uint8_t *b = now_batch(1, &len);
	for (int16_t v = 0; v <= 2; v++) {
		struct ptopic_req t = {"pt-old", 1, {{0, b, (int32_t)len}}};
		struct pr o;
		produce_roundtrip(v, 1, &t, 1, &o);
		cr_assert_eq(o.ntopics, 1);
		cr_assert_eq(o.t[0].np, 1);
		cr_expect_eq(o.t[0].p[0].err, 35, "v%d: %d", v, o.t[0].p[0].err);
		cr_expect_eq(o.t[0].p[0].base, -1);
	}
	cr_expect_eq(stub_store_hw("pt-old", 0), -1, "nothing appended");
	free(b);
}

/* Proves the per-partition error codes of Produce, in v3 and flexible v9
 * and v11: unknown topic or partition (3), a CRC mismatch (2 CORRUPT_MESSAGE),
 * two batches or trailing bytes, magic 1, null records, a control batch, a
 * producer id without a sequence, an unknown codec (87 INVALID_RECORD),
 * acks=2 (21), a timestamp an hour and more in the future (32, with the
 * record error from v8), while a good partition in the same request is still
 * appended; and that a transactional batch without a TransactionalId fails
 * the whole request with 53, as Kafka 4.1 answers. */
Test(produce, partition_errors, .init = setup, .fini = teardown)
{
	create_topic("pe", 1);
	create_topic("pe-ok", 1);
	size_t len = 0;
	uint8_t *good = now_batch(3, &len);
	uint8_t *badcrc = malloc(len);
	memcpy(badcrc, good, len);
	badcrc[len - 1] ^= 1;
	uint8_t *two = malloc(2 * len);
	memcpy(two, good, len);
	memcpy(two + len, good, len);
	uint8_t *magic1 = malloc(len);
	memcpy(magic1, good, len);
	magic1[16] = 1;
	struct tb_hdr h = tb_hdr_default(1, wall_now_ms());
	size_t rl, ctl_len, txn_len, codec_len, fut_len;
	struct kwr w;
	kwr_init(&w, 64, 1 << 20);
	struct tb_rec rec = {NULL, 0, "v", 1, 0};
	(void)tb_records(&w, &rec, 1);
	rl = w.len;
	h.attributes = 0x20;
	uint8_t *ctl = tb_wrap(&h, w.buf, rl, &ctl_len);
	h.attributes = 0x10;
	uint8_t *txn = tb_wrap(&h, w.buf, rl, &txn_len);
	h.attributes = 0;
	h.producer_id = 7; /* idempotent, but BaseSequence -1 */
	size_t noseq_len;
	uint8_t *noseq = tb_wrap(&h, w.buf, rl, &noseq_len);
	h.producer_id = -1;
	h.attributes = 5;
	uint8_t *codec = tb_wrap(&h, w.buf, rl, &codec_len);
	h.attributes = 0;
	h.base_timestamp = h.max_timestamp = wall_now_ms() + 2 * 3600 * 1000;
	uint8_t *fut = tb_wrap(&h, w.buf, rl, &fut_len);
	kwr_free(&w);
	const int16_t versions[] = {3, 9, 11};
	for (size_t vi = 0; vi < 3; vi++) {
		int16_t v = versions[vi];
		struct ptopic_req t[3] = {
			{"pe", 4, {{0, badcrc, (int32_t)len}, {7, good, (int32_t)len}, {0, two, (int32_t)(2 * len)},
				   {0, magic1, (int32_t)len}}},
			{"pe", 4, {{0, NULL, -1}, {0, ctl, (int32_t)ctl_len}, {0, noseq, (int32_t)noseq_len},
				   {0, codec, (int32_t)codec_len}}},
			{"pe-nope", 1, {{0, good, (int32_t)len}}},
		};
		struct pr o;
		produce_roundtrip(v, 1, t, 3, &o);
		cr_assert_eq(o.ntopics, 3);
		cr_expect_str_eq(o.t[0].name, "pe");
		cr_expect_str_eq(o.t[2].name, "pe-nope");
		const int16_t want0[4] = {2, 3, 87, 87}, want1[4] = {87, 87, 87, 87};
		for (int p = 0; p < 4; p++) {
			cr_expect_eq(o.t[0].p[p].err, want0[p], "v%d t0 p%d: %d", v, p, o.t[0].p[p].err);
			cr_expect_eq(o.t[0].p[p].base, -1);
			cr_expect_eq(o.t[1].p[p].err, want1[p], "v%d t1 p%d: %d", v, p, o.t[1].p[p].err);
		}
		cr_expect_eq(o.t[0].p[1].index, 7);
		cr_expect_eq(o.t[2].p[0].err, 3);
		/* acks=2 */
		struct ptopic_req ta = {"pe-ok", 1, {{0, good, (int32_t)len}}};
		produce_roundtrip(v, 2, &ta, 1, &o);
		cr_expect_eq(o.t[0].p[0].err, 21);
		/* a future timestamp next to a good partition */
		struct ptopic_req tf[2] = {{"pe", 1, {{0, fut, (int32_t)fut_len}}}, {"pe-ok", 1, {{0, good, (int32_t)len}}}};
		int64_t hw = stub_store_hw("pe-ok", 0);
		produce_roundtrip(v, -1, tf, 2, &o);
		cr_expect_eq(o.t[0].p[0].err, 32, "v%d future timestamp: %d", v, o.t[0].p[0].err);
		if (v >= 8) {
			cr_expect_eq(o.t[0].p[0].nrecord_errors, 1);
			cr_expect(!o.t[0].p[0].msg_null);
		}
		cr_expect_eq(o.t[1].p[0].err, 0);
		cr_expect_eq(o.t[1].p[0].base, hw < 0 ? 0 : hw);
		/* a transactional batch without a TransactionalId, next to a good one */
		struct ptopic_req tt[2] = {{"pe-ok", 1, {{0, good, (int32_t)len}}}, {"pe", 1, {{0, txn, (int32_t)txn_len}}}};
		hw = stub_store_hw("pe-ok", 0);
		produce_roundtrip(v, -1, tt, 2, &o);
		cr_expect_eq(o.t[0].p[0].err, 53, "v%d transactional: %d", v, o.t[0].p[0].err);
		cr_expect_eq(o.t[1].p[0].err, 53, "v%d transactional: %d", v, o.t[1].p[0].err);
		cr_expect_eq(stub_store_hw("pe-ok", 0), hw, "nothing of the request appended");
	}
	cr_expect_eq(stub_store_hw("pe", 0), -1, "no bad batch reached storage");
	free(good); free(badcrc); free(two); free(magic1); free(ctl); free(txn); free(noseq); free(codec); free(fut);
}

/* Proves acks=0 appends but sends no response: the next response taken
 * belongs to the next request. */
Test(produce, acks0_no_response, .init = setup, .fini = teardown)
{
	create_topic("p0", 1);
	size_t len = 0;
	uint8_t *b = now_batch(2, &len);
	for (int16_t v = 3; v <= 11; v += 4) {
		struct ptopic_req t = {"p0", 1, {{0, b, (int32_t)len}}};
		struct rq q;
		enc_produce(&q, v, 0, &t, 1);
		cr_assert(rq_send(&q));
	}
	cr_expect_eq(stub_store_hw("p0", 0), 6, "three acks=0 batches appended");
	struct rq q;
	enc_api_versions(&q, 0);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 18, 0, q.corr);
	struct av a;
	dec_api_versions(&s, &a);
	rs_end(&s);
	cr_expect_eq(stub_queued(C), 0);
	free(b);
}

/* ---- Fetch ------------------------------------------------------------------------------------ */

struct fpart_req {
	int32_t index;
	int64_t offset;
	int32_t max_bytes;
};

static void enc_fetch(struct rq *q, int16_t v, int32_t max_wait, int32_t min_bytes, int32_t max_bytes, const char *topic,
		      const struct fpart_req *p, int np)
{
	rq_start(q, 1, v);
	kwr_i32(&q->w, -1); /* ReplicaId */
	kwr_i32(&q->w, max_wait);
	kwr_i32(&q->w, min_bytes);
	kwr_i32(&q->w, max_bytes);
	kwr_i8(&q->w, 0); /* IsolationLevel (v4+) */
	if (v >= 7) {
		kwr_i32(&q->w, 0);
		kwr_i32(&q->w, -1);
	}
	rq_arr(q, 1);
	rq_str(q, topic);
	rq_arr(q, np);
	for (int i = 0; i < np; i++) {
		kwr_i32(&q->w, p[i].index);
		if (v >= 9)
			kwr_i32(&q->w, -1);
		kwr_i64(&q->w, p[i].offset);
		if (v >= 12)
			kwr_i32(&q->w, -1);
		if (v >= 5)
			kwr_i64(&q->w, -1);
		kwr_i32(&q->w, p[i].max_bytes);
		rq_tags(q);
	}
	rq_tags(q);
	if (v >= 7)
		rq_arr(q, 0);
	if (v >= 11)
		rq_str(q, "");
	rq_tags(q);
}

struct fr_part {
	int32_t index;
	int16_t err;
	int64_t hw, lso, log_start;
	int32_t naborted, preferred;
	bool records_null;
	uint8_t *records;
	int32_t records_len;
};
struct fr {
	int16_t err;
	int32_t session;
	char topic[256];
	int np;
	struct fr_part p[4];
};

static void dec_fetch(struct rs *s, struct fr *o)
{
	int16_t v = s->ver;
	memset(o, 0, sizeof *o);
	cr_expect_eq(krd_i32(&s->r), 0);
	if (v >= 7) {
		o->err = krd_i16(&s->r);
		o->session = krd_i32(&s->r);
	}
	int32_t nt = rs_arr(s, false);
	cr_assert_eq(nt, 1);
	rs_str(s, o->topic, sizeof o->topic, false);
	o->np = rs_arr(s, false);
	cr_assert_leq(o->np, 4);
	for (int p = 0; p < o->np && !s->r.err; p++) {
		struct fr_part *fp = &o->p[p];
		fp->index = krd_i32(&s->r);
		fp->err = krd_i16(&s->r);
		fp->hw = krd_i64(&s->r);
		fp->lso = krd_i64(&s->r);
		fp->log_start = v >= 5 ? krd_i64(&s->r) : -1;
		fp->naborted = rs_arr(s, true);
		for (int k = 0; k < fp->naborted && !s->r.err; k++) {
			(void)krd_i64(&s->r);
			(void)krd_i64(&s->r);
			rs_tags(s);
		}
		fp->preferred = v >= 11 ? krd_i32(&s->r) : -1;
		const uint8_t *recs;
		fp->records_len = krd_bytes(&s->r, s->flex, &recs);
		fp->records_null = recs == NULL;
		if (recs && fp->records_len > 0) {
			fp->records = malloc((size_t)fp->records_len);
			memcpy(fp->records, recs, (size_t)fp->records_len);
		}
		rs_tags(s);
	}
	rs_tags(s);
	rs_tags(s);
}

static void fr_free(struct fr *o)
{
	for (int p = 0; p < o->np; p++)
		free(o->p[p].records);
}

/* Check a records blob: whole batches with valid CRCs, first base offset
 * first_base, last offset + 1 == end; returns the batch count. */
static int check_records(const uint8_t *p, int32_t len, int64_t first_base, int64_t end)
{
	int n = 0;
	int64_t next = first_base;
	for (int32_t pos = 0; pos < len;) {
		struct sluice_batch b;
		cr_assert_eq(sluice_batch_check(p + pos, (size_t)(len - pos), &b), SLUICE_BATCH_OK, "batch %d", n);
		cr_expect_eq(b.base_offset, next, "batch %d base %" PRId64 " want %" PRId64, n, b.base_offset, next);
		next = b.base_offset + b.last_offset_delta + 1;
		pos += sluice_batch_total_bytes(&b);
		n++;
	}
	cr_expect_eq(next, end);
	return n;
}

static void fetch_roundtrip(int16_t v, int32_t max_wait, int32_t min_bytes, const char *topic, const struct fpart_req *p,
			    int np, struct fr *o)
{
	struct rq q;
	enc_fetch(&q, v, max_wait, min_bytes, 1 << 20, topic, p, np);
	cr_assert(rq_send(&q), "Fetch v%d refused", v);
	struct rs s;
	rs_take(&s, 1, v, q.corr);
	dec_fetch(&s, o);
	rs_end(&s);
}

static void produce_simple(const char *topic, int32_t partition, int nrec)
{
	size_t len = 0;
	uint8_t *b = now_batch(nrec, &len);
	struct ptopic_req t = {topic, 1, {{partition, b, (int32_t)len}}};
	struct pr o;
	produce_roundtrip(7, -1, &t, 1, &o);
	cr_assert_eq(o.t[0].p[0].err, 0);
	free(b);
}

/* Proves Fetch v4-v12: stored batches come back whole, CRC intact, from the
 * requested offset (a fetch inside a batch starts at that batch), with the
 * high watermark, LSO = HW, log start (v5+), empty aborted list, preferred
 * replica -1 (v11+), top-level error 0 and session 0 (v7+); at the high
 * watermark the records are empty, past it OFFSET_OUT_OF_RANGE (1), and an
 * unknown partition is 3 with HW -1. */
Test(fetch, every_version, .init = setup, .fini = teardown)
{
	create_topic("ft", 1);
	produce_simple("ft", 0, 2);
	produce_simple("ft", 0, 3);
	for (int16_t v = 4; v <= 12; v++) {
		struct fpart_req p[4] = {{0, 0, 1 << 20}, {0, 3, 1 << 20}, {0, 5, 1 << 20}, {0, 6, 1 << 20}};
		struct fr o;
		fetch_roundtrip(v, 0, 1, "ft", p, 4, &o);
		cr_expect_eq(o.err, 0);
		cr_expect_eq(o.session, 0);
		cr_expect_str_eq(o.topic, "ft");
		cr_assert_eq(o.np, 4);
		for (int i = 0; i < 4; i++) {
			cr_expect_eq(o.p[i].index, 0);
			cr_expect_eq(o.p[i].naborted, 0, "v%d aborted transactions", v);
			cr_expect_eq(o.p[i].preferred, -1);
		}
		cr_expect_eq(o.p[0].err, 0, "v%d error %d", v, o.p[0].err);
		cr_expect_eq(o.p[0].hw, 5);
		cr_expect_eq(o.p[0].lso, 5);
		if (v >= 5)
			cr_expect_eq(o.p[0].log_start, 0);
		cr_expect_eq(check_records(o.p[0].records, o.p[0].records_len, 0, 5), 2);
		cr_expect_eq(o.p[1].err, 0);
		cr_expect_eq(check_records(o.p[1].records, o.p[1].records_len, 2, 5), 1, "offset 3 lies in batch 2..4");
		cr_expect_eq(o.p[2].err, 0);
		cr_expect_eq(o.p[2].records_len, 0, "at the high watermark: no records");
		cr_expect(!o.p[2].records_null);
		cr_expect_eq(o.p[3].err, 1, "past the high watermark: %d", o.p[3].err);
		fr_free(&o);
		struct fpart_req u = {9, 0, 1 << 20};
		fetch_roundtrip(v, 0, 1, "ft", &u, 1, &o);
		cr_expect_eq(o.p[0].err, 3);
		cr_expect_eq(o.p[0].hw, -1);
		fr_free(&o);
		fetch_roundtrip(v, 0, 1, "ft-nope", &u, 1, &o);
		cr_expect_eq(o.p[0].err, 3);
		cr_expect_str_eq(o.topic, "ft-nope");
		fr_free(&o);
	}
}

/* Proves the partition byte limit: whole batches only, but at least one
 * batch even when it is larger than the limit. */
Test(fetch, partition_max_bytes, .init = setup, .fini = teardown)
{
	create_topic("fm", 1);
	for (int i = 0; i < 4; i++)
		produce_simple("fm", 0, 1);
	struct fpart_req p = {0, 0, 10};
	struct fr o;
	fetch_roundtrip(11, 0, 1, "fm", &p, 1, &o);
	cr_expect_eq(o.p[0].err, 0);
	cr_expect_eq(check_records(o.p[0].records, o.p[0].records_len, 0, 1), 1);
	fr_free(&o);
}

/* Proves a long-polling fetch (max_wait, min_bytes unmet) is parked without
 * an answer, responses stay in request order behind it, it answers with the
 * data once a produce lands and it is retried, and an expired one answers
 * empty. */
Test(fetch, long_poll_and_order, .init = setup, .fini = teardown)
{
	create_topic("fl", 1);
	struct rq fq;
	struct fpart_req p = {0, 0, 1 << 20};
	enc_fetch(&fq, 11, 60000, 1, 1 << 20, "fl", &p, 1);
	cr_assert(rq_send(&fq));
	cr_expect_eq(stub_parked(), 1);
	uint8_t *buf;
	size_t len = 0;
	cr_expect(!stub_take_response(C, &buf, &len), "parked fetch must not answer yet");
	/* a produce behind it: its response must wait for the fetch's */
	size_t bl;
	uint8_t *b = now_batch(2, &bl);
	struct ptopic_req t = {"fl", 1, {{0, b, (int32_t)bl}}};
	struct rq pq;
	enc_produce(&pq, 9, 1, &t, 1);
	cr_assert(rq_send(&pq));
	cr_expect(!stub_take_response(C, &buf, &len), "responses keep request order");
	stub_retry_parked(false);
	struct rs s;
	rs_take(&s, 1, 11, fq.corr);
	struct fr o;
	dec_fetch(&s, &o);
	rs_end(&s);
	cr_expect_eq(o.p[0].err, 0);
	cr_expect_eq(check_records(o.p[0].records, o.p[0].records_len, 0, 2), 1);
	fr_free(&o);
	rs_take(&s, 0, 9, pq.corr);
	struct pr pr;
	dec_produce(&s, &pr);
	rs_end(&s);
	cr_expect_eq(pr.t[0].p[0].base, 0);
	/* a second long poll at the end expires empty */
	p.offset = 2;
	enc_fetch(&fq, 12, 60000, 1, 1 << 20, "fl", &p, 1);
	cr_assert(rq_send(&fq));
	cr_expect_eq(stub_parked(), 1);
	stub_retry_parked(true);
	cr_expect_eq(stub_parked(), 0);
	rs_take(&s, 1, 12, fq.corr);
	dec_fetch(&s, &o);
	rs_end(&s);
	cr_expect_eq(o.p[0].err, 0);
	cr_expect_eq(o.p[0].records_len, 0);
	fr_free(&o);
	free(b);
}

/* ---- Fetch by reference (zero-copy) ----------------------------------------------------------- */

/* Partition 0 of "zc": three batches of about 15 KB (spliced when read by
 * reference); partition 1: one small batch (copied even when pinned). */
static void zc_fill(void)
{
	create_topic("zc", 2);
	for (int i = 0; i < 3; i++) {
		size_t len = 0;
		uint8_t *b = tb_simple(200, wall_now_ms(), 64, &len);
		cr_assert_gt(len, 8192, "a batch large enough to be spliced");
		struct ptopic_req t = {"zc", 1, {{0, b, (int32_t)len}}};
		struct pr o;
		produce_roundtrip(7, -1, &t, 1, &o);
		cr_assert_eq(o.t[0].p[0].err, 0);
		free(b);
	}
	produce_simple("zc", 1, 2);
}

/* Send the Fetch (correlation id corr) without waiting for its response. */
static void zc_fetch_send(int16_t v, int32_t corr)
{
	struct fpart_req p[3] = {{0, 0, 1 << 20}, {1, 0, 1 << 20}, {0, 250, 1 << 20}};
	struct rq q;
	corr_next = corr;
	enc_fetch(&q, v, 0, 1, 1 << 20, "zc", p, 3);
	cr_assert(rq_send(&q), "Fetch v%d refused", v);
}

/* The whole response to one Fetch (size prefix included); caller frees. */
static uint8_t *zc_fetch(int16_t v, int32_t corr, size_t *len)
{
	zc_fetch_send(v, corr);
	uint8_t *buf;
	cr_assert(stub_take_response(C, &buf, len), "no response to Fetch v%d", v);
	return buf;
}

static void zc_expect_released(void)
{
	cr_expect_eq(stub_pins_out(), 0, "%" PRId64 " pins never released", stub_pins_out());
	cr_expect_eq(stub_pins.double_released, 0, "pins released twice");
	cr_expect_eq(sluice_netcore_pinned_bytes(), 0, "pinned bytes still counted");
}

/* Proves a Fetch answered by reference (records spliced from pinned ranges,
 * cut at odd sizes so batches span ranges) sends the very bytes of the one
 * answered by copy, for the non-flexible and flexible encodings, also when
 * the backend takes a few hundred bytes per send; and that every pin is
 * released exactly once, once its bytes have been sent (the test backend
 * reads a send's ranges only when it completes, and a released pin's bytes
 * are scribbled over, so an early release would change the bytes). */
Test(fetch_zero_copy, same_bytes_as_copy, .init = setup, .fini = teardown)
{
	zc_fill();
	const int16_t versions[] = {4, 11, 12};
	for (size_t k = 0; k < sizeof versions / sizeof versions[0]; k++) {
		int16_t v = versions[k];
		for (size_t send_max = 0; send_max <= 333; send_max += 333) {
			tt_set_send_max(C->tconn, send_max);
			stub_store_pin_reads(0);
			size_t clen, rlen;
			uint8_t *copy = zc_fetch(v, 77, &clen);
			int64_t lent = stub_pins.lent, sends = tt_stats.send_calls;
			stub_store_pin_reads(1000);
			uint8_t *ref = zc_fetch(v, 77, &rlen);
			cr_expect_eq(stub_pins.lent - lent, 3, "v%d: three partitions read by reference", v);
			/* About 80 ranges (two spliced reads in 1000-byte pieces, the
			 * buffer's slices): more than one send carries. */
			cr_expect_geq(tt_stats.send_calls - sends, 2, "v%d: %" PRId64 " sends", v, tt_stats.send_calls - sends);
			cr_assert_eq(rlen, clen, "v%d send_max %zu: %zu bytes by reference, %zu by copy", v, send_max, rlen,
				     clen);
			cr_expect_eq(memcmp(ref, copy, clen), 0, "v%d send_max %zu: the bytes differ", v, send_max);
			zc_expect_released();
			free(copy);
			free(ref);
		}
	}
}

/* Proves pins are released exactly once when the connection closes while
 * the response carrying them is being sent, and when a response built
 * behind it is dropped unsent: the peer stops reading (sends held), two
 * Fetches are answered (the first sending, the second waiting), both hold
 * their pins and count as pinned bytes; the peer closes and every pin comes
 * back. */
Test(fetch_zero_copy, released_on_close_mid_send_and_drop, .init = setup, .fini = teardown)
{
	zc_fill();
	stub_store_pin_reads(4096);
	tt_hold_sends(C->tconn, true);
	zc_fetch_send(11, 1);
	zc_fetch_send(12, 2);
	cr_expect_eq(stub_queued(C), 2, "both answered, neither sent");
	cr_expect_eq(stub_pins_out(), 4, "the spliced partitions' pins are held (the small one was copied)");
	cr_expect_gt(sluice_netcore_pinned_bytes(), 4 * 8192);
	tt_peer_close(C->tconn);
	tt_pump(stub_netcore(), STUB_PUMP_TURNS_MAX);
	cr_expect(C->closing);
	zc_expect_released();
}

/* Proves the reads of a Fetch whose connection closed before they came
 * back are released, not spliced: storage holds the ops, the peer closes,
 * then storage answers. */
Test(fetch_zero_copy, released_when_the_client_left_first, .init = setup, .fini = teardown)
{
	zc_fill();
	stub_store_pin_reads(4096);
	stub_store_hold(true);
	zc_fetch_send(12, 3);
	struct tt_conn *t = C->tconn;
	tt_hold_closed(t, false); /* the core hears of the close at once */
	tt_peer_close(t);
	tt_pump(stub_netcore(), STUB_PUMP_TURNS_MAX);
	cr_expect(C->closing, "closed, kept alive by the Fetch storage holds");
	stub_store_hold(false);
	tt_pump(stub_netcore(), STUB_PUMP_TURNS_MAX);
	C = NULL; /* freed with its last request */
	cr_expect(tt_gone(t));
	tt_free(stub_netcore(), t);
	cr_expect_gt(stub_pins.lent, 0);
	zc_expect_released();
}

static const char *const zc_small_budget[] = {"sluice.connection.response.bytes.max", "40000", NULL};

static void setup_small_budget(void) { setup_with(zc_small_budget); }

/* Proves pinned bytes respect sluice.connection.response.bytes.max: past
 * it a partition's records are copied and its pins released at once, even
 * while the response waits for a slow reader, and the bytes are the same. */
Test(fetch_zero_copy, copied_past_the_connection_budget, .init = setup_small_budget, .fini = teardown)
{
	zc_fill();
	size_t clen, rlen;
	uint8_t *copy = zc_fetch(12, 5, &clen);
	stub_store_pin_reads(4096);
	tt_hold_sends(C->tconn, true);
	zc_fetch_send(12, 5);
	cr_expect_leq(sluice_netcore_pinned_bytes(), 40000, "pinned within the connection's budget");
	cr_expect_lt(stub_pins_out(), 3, "not every partition pinned");
	tt_hold_sends(C->tconn, false);
	tt_pump(stub_netcore(), STUB_PUMP_TURNS_MAX);
	uint8_t *ref;
	cr_assert(stub_take_response(C, &ref, &rlen));
	cr_assert_eq(rlen, clen);
	cr_expect_eq(memcmp(ref, copy, clen), 0);
	zc_expect_released();
	free(copy);
	free(ref);
}

/* ---- OffsetForLeaderEpoch -------------------------------------------------------------------------- */

/* A partition's answer to ListOffsets or OffsetForLeaderEpoch. */
struct lo_part {
	int32_t index;
	int16_t err;
	int64_t ts, offset;
	int32_t epoch;
};

/* One OffsetForLeaderEpoch request: topic, ReplicaId (v3+), then
 * (partition, CurrentLeaderEpoch, LeaderEpoch) triples; the answers in out
 * (index, err, epoch: LeaderEpoch, offset: EndOffset). */
static void epoch_end_roundtrip(int16_t v, const char *topic, int32_t replica, const int32_t (*parts)[3], int n,
				char *echo, struct lo_part *out)
{
	struct rq q;
	rq_start(&q, 23, v);
	if (v >= 3)
		kwr_i32(&q.w, replica);
	rq_arr(&q, 1);
	rq_str(&q, topic);
	rq_arr(&q, n);
	for (int i = 0; i < n; i++) {
		kwr_i32(&q.w, parts[i][0]);
		kwr_i32(&q.w, parts[i][1]);
		kwr_i32(&q.w, parts[i][2]);
		rq_tags(&q);
	}
	rq_tags(&q);
	rq_tags(&q);
	cr_assert(rq_send(&q), "OffsetForLeaderEpoch v%d refused", v);
	struct rs s;
	rs_take(&s, 23, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0, "ThrottleTimeMs");
	cr_assert_eq(rs_arr(&s, false), 1);
	rs_str(&s, echo, echo ? 256 : 0, false);
	cr_assert_eq(rs_arr(&s, false), n);
	for (int i = 0; i < n; i++) {
		out[i].err = krd_i16(&s.r);
		out[i].index = krd_i32(&s.r);
		out[i].epoch = krd_i32(&s.r);
		out[i].offset = krd_i64(&s.r);
		out[i].ts = -1;
		rs_tags(&s);
		cr_expect_eq(out[i].index, parts[i][0], "partition %d answered in order", i);
	}
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);
}

/* The same on topic "cl" from follower 2 (the cluster tests' broker). */
static void cl_epoch_end(int16_t v, const int32_t (*parts)[3], int n, struct lo_part *out)
{
	epoch_end_roundtrip(v, "cl", 2, parts, n, NULL, out);
}

/* Proves OffsetForLeaderEpoch v2-v4 (ReplicaId -1, -2 and a broker id:
 * the same answers) answers from the storage core's epoch cache as Kafka's
 * LeaderEpochFileCache.endOffsetFor: the latest epoch ends at the log end;
 * an older one where the next higher starts, with the largest epoch at or
 * below it (4 -> 3); one below the oldest with itself and the oldest's
 * start; one above every epoch, or -1, UNDEFINED (-1, -1) without error; an
 * empty partition UNDEFINED; a partition or topic that does not exist
 * UNKNOWN_TOPIC_OR_PARTITION (3); and, on a single node (leader epoch 0),
 * CurrentLeaderEpoch 0 or -1 passes while 1 is UNKNOWN_LEADER_EPOCH (75). */
Test(offset_for_leader_epoch, every_version, .init = setup, .fini = teardown)
{
	create_topic("oe", 2);
	for (int i = 0; i < 6; i++)
		produce_simple("oe", 0, 5);
	const int32_t e[] = {1, 3, 5};
	const int64_t s[] = {0, 10, 20};
	stub_store_epochs("oe", 0, e, s, 3);
	const int32_t replicas[] = {-1, -2, 7};
	for (int16_t v = 2; v <= 4; v++)
		for (int r = 0; r < 3; r++) {
			const int32_t parts[][3] = {{0, -1, 5}, {0, 0, 3}, {0, -1, 4}, {0, -1, 0}, {0, -1, 6},
						    {0, -1, -1}, {1, -1, 0}, {7, -1, 0}, {0, 1, 5}};
			const int32_t want_epoch[] = {5, 3, 3, 0, -1, -1, -1, -1, -1};
			const int64_t want_end[] = {30, 20, 20, 0, -1, -1, -1, -1, -1};
			const int16_t want_err[] = {0, 0, 0, 0, 0, 0, 0, 3, 75};
			struct lo_part o[9];
			char echo[256];
			epoch_end_roundtrip(v, "oe", replicas[r], parts, 9, echo, o);
			cr_expect_str_eq(echo, "oe");
			for (int i = 0; i < 9; i++) {
				cr_expect_eq(o[i].err, want_err[i], "v%d replica %d entry %d: error %d", v, replicas[r], i,
					     o[i].err);
				cr_expect_eq(o[i].epoch, want_epoch[i], "v%d entry %d: epoch %d", v, i, o[i].epoch);
				cr_expect_eq(o[i].offset, want_end[i], "v%d entry %d: end %" PRId64, v, i, o[i].offset);
			}
		}
	const int32_t one[][3] = {{0, -1, 0}};
	struct lo_part o[1];
	epoch_end_roundtrip(4, "nope", -1, one, 1, NULL, o);
	cr_expect_eq(o[0].err, 3, "unknown topic: %d", o[0].err);
}

/* Proves a malformed OffsetForLeaderEpoch closes the connection with
 * nothing lent to storage: a partition count past the bytes left, a
 * partition entry cut short, a v4 topic name whose length runs past the
 * frame. */
Test(offset_for_leader_epoch, malformed_closes, .init = setup, .fini = teardown)
{
	create_topic("oe", 1);
	int64_t ops = stub_store_ops();
	for (int k = 0; k < 3; k++) {
		struct rq q;
		rq_start(&q, 23, k == 2 ? 4 : 3);
		kwr_i32(&q.w, -1);
		rq_arr(&q, 1);
		if (k == 2) {
			kwr_uvarint(&q.w, 1000); /* compact string length 999 */
			kwr_raw(&q.w, "oe", 2);
		} else {
			rq_str(&q, "oe");
			rq_arr(&q, k == 0 ? 100000 : 2);
			kwr_i32(&q.w, 0);
			kwr_i32(&q.w, -1);
			kwr_i32(&q.w, 0);
			if (k == 1)
				kwr_i32(&q.w, 0); /* the second entry: 4 of its 12 bytes */
		}
		reconnect();
		cr_expect(!rq_send(&q), "malformed request %d answered", k);
	}
	cr_expect_eq(stub_store_ops(), ops, "nothing reached storage");
	reconnect();
}

/* ---- ListOffsets -------------------------------------------------------------------------------- */

static void list_offsets_roundtrip(int16_t v, const char *topic, const int64_t *ts, const int32_t *parts, int n,
				   char *echo, struct lo_part *out)
{
	struct rq q;
	rq_start(&q, 2, v);
	kwr_i32(&q.w, -1);
	if (v >= 2)
		kwr_i8(&q.w, 0);
	rq_arr(&q, 1);
	rq_str(&q, topic);
	rq_arr(&q, n);
	for (int i = 0; i < n; i++) {
		kwr_i32(&q.w, parts[i]);
		if (v >= 4)
			kwr_i32(&q.w, -1);
		kwr_i64(&q.w, ts[i]);
		rq_tags(&q);
	}
	rq_tags(&q);
	rq_tags(&q);
	cr_assert(rq_send(&q), "ListOffsets v%d refused", v);
	struct rs s;
	rs_take(&s, 2, v, q.corr);
	if (v >= 2)
		cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 1);
	rs_str(&s, echo, 256, false);
	cr_assert_eq(rs_arr(&s, false), n);
	for (int i = 0; i < n; i++) {
		out[i].index = krd_i32(&s.r);
		out[i].err = krd_i16(&s.r);
		out[i].ts = krd_i64(&s.r);
		out[i].offset = krd_i64(&s.r);
		out[i].epoch = v >= 4 ? krd_i32(&s.r) : -1;
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);
}

/* Proves ListOffsets v1-v7: latest (-1) is the high watermark, earliest
 * (-2) the log start, a timestamp gets the storage's offset and timestamp,
 * leader epoch 0 when found (v4+), and an unknown partition is 3 with -1s. */
Test(list_offsets, every_version, .init = setup, .fini = teardown)
{
	create_topic("lt", 1);
	produce_simple("lt", 0, 3);
	produce_simple("lt", 0, 2);
	for (int16_t v = 1; v <= 7; v++) {
		const int64_t ts[4] = {-1, -2, 0, 0};
		const int32_t parts[4] = {0, 0, 0, 5};
		struct lo_part o[4];
		char echo[256];
		list_offsets_roundtrip(v, "lt", ts, parts, 4, echo, o);
		cr_expect_str_eq(echo, "lt");
		cr_expect_eq(o[0].err, 0, "v%d: %d", v, o[0].err);
		cr_expect_eq(o[0].offset, 5);
		cr_expect_eq(o[1].offset, 0);
		cr_expect_eq(o[2].err, 0);
		cr_expect_eq(o[2].offset, 0, "timestamp 0: first batch");
		cr_expect_geq(o[2].ts, 0);
		cr_expect_eq(o[3].err, 3);
		cr_expect_eq(o[3].offset, -1);
		cr_expect_eq(o[3].ts, -1);
		if (v >= 4) {
			cr_expect_eq(o[0].epoch, 0);
			cr_expect_eq(o[3].epoch, -1);
		}
	}
}

/* ---- CreateTopics ------------------------------------------------------------------------------- */

struct ct_req {
	const char *name;
	int32_t partitions;
	int16_t rf;
	int nassign;          /* assignments: partition i on broker assign_broker */
	int32_t assign_broker;
	int nconfigs;
	const char *ck[2], *cv[2];
};
struct ct_res {
	char name[300];
	uint8_t id[16];
	int16_t err;
	bool msg_null;
	char msg[300];
	int32_t partitions;
	int16_t rf;
	int nconfigs;
	char ck[4][64], cv[4][64];
};

static int create_topics_roundtrip(int16_t v, const struct ct_req *t, int n, bool validate_only, struct ct_res *out,
				   bool *accepted)
{
	struct rq q;
	rq_start(&q, 19, v);
	rq_arr(&q, n);
	for (int i = 0; i < n; i++) {
		rq_str(&q, t[i].name);
		kwr_i32(&q.w, t[i].partitions);
		kwr_i16(&q.w, t[i].rf);
		rq_arr(&q, t[i].nassign);
		for (int a = 0; a < t[i].nassign; a++) {
			kwr_i32(&q.w, a);
			rq_arr(&q, 1);
			kwr_i32(&q.w, t[i].assign_broker);
			rq_tags(&q);
		}
		rq_arr(&q, t[i].nconfigs);
		for (int c = 0; c < t[i].nconfigs; c++) {
			rq_str(&q, t[i].ck[c]);
			rq_str(&q, t[i].cv[c]);
			rq_tags(&q);
		}
		rq_tags(&q);
	}
	kwr_i32(&q.w, 60000);
	kwr_bool(&q.w, validate_only); /* v1+ */
	rq_tags(&q);
	bool ok = rq_send(&q);
	if (accepted)
		*accepted = ok;
	if (!ok)
		return -1;
	struct rs s;
	rs_take(&s, 19, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0); /* v2+ */
	int32_t m = rs_arr(&s, false);
	cr_assert_leq(m, n);
	for (int i = 0; i < m && !s.r.err; i++) {
		struct ct_res *o = &out[i];
		memset(o, 0, sizeof *o);
		rs_str(&s, o->name, sizeof o->name, false);
		if (v >= 7)
			krd_uuid(&s.r, o->id);
		o->err = krd_i16(&s.r);
		o->msg_null = !rs_str(&s, o->msg, sizeof o->msg, true);
		o->partitions = -1;
		o->rf = -1;
		if (v >= 5) {
			o->partitions = krd_i32(&s.r);
			o->rf = krd_i16(&s.r);
			o->nconfigs = rs_arr(&s, true);
			for (int c = 0; c < o->nconfigs && !s.r.err; c++) {
				rs_str(&s, c < 4 ? o->ck[c] : NULL, c < 4 ? 64 : 0, false);
				rs_str(&s, c < 4 ? o->cv[c] : NULL, c < 4 ? 64 : 0, true);
				(void)krd_bool(&s.r);
				(void)krd_i8(&s.r);
				(void)krd_bool(&s.r);
				rs_tags(&s);
			}
		}
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_end(&s);
	return m;
}

/* Proves CreateTopics v2-v7 creates topics with the asked partitions and
 * config overrides: error 0, null message, and from v5 the partition count,
 * replication factor 1 and the configs echoed; from v7 the id the metadata
 * store assigned. A replica assignment on broker 1 sets the partition count. */
Test(create_topics, every_version, .init = setup, .fini = teardown)
{
	for (int16_t v = 2; v <= 7; v++) {
		char n1[32], n2[32];
		snprintf(n1, sizeof n1, "ct-%d", v);
		snprintf(n2, sizeof n2, "ct-assigned-%d", v);
		struct ct_req t[2] = {
			{n1, 3, 1, 0, 0, 1, {"retention.ms"}, {"1000"}},
			{n2, -1, -1, 2, 1, 0, {NULL}, {NULL}},
		};
		struct ct_res o[2];
		cr_assert_eq(create_topics_roundtrip(v, t, 2, false, o, NULL), 2);
		for (int i = 0; i < 2; i++) {
			cr_expect_str_eq(o[i].name, t[i].name);
			cr_expect_eq(o[i].err, 0, "v%d %s: %d %s", v, t[i].name, o[i].err, o[i].msg);
			cr_expect(o[i].msg_null);
		}
		int32_t parts;
		uint8_t id[16];
		cr_assert(topic_id(n1, id, &parts));
		cr_expect_eq(parts, 3);
		cr_assert(topic_id(n2, NULL, &parts));
		cr_expect_eq(parts, 2, "assignments give 2 partitions");
		if (v >= 5) {
			cr_expect_eq(o[0].partitions, 3);
			cr_expect_eq(o[0].rf, 1);
			cr_expect_eq(o[0].nconfigs, 1);
			cr_expect_str_eq(o[0].ck[0], "retention.ms");
			cr_expect_str_eq(o[0].cv[0], "1000");
			cr_expect_eq(o[1].partitions, 2);
		}
		if (v >= 7)
			cr_expect(memcmp(o[0].id, id, 16) == 0, "v7 topic id");
	}
}

/* Proves CreateTopics' per-topic errors (v2 and flexible v5): an existing
 * topic (36), an illegal name (17), a duplicate within the request (42),
 * a replica on a broker that does not exist (39), an unknown config (40),
 * replication factor 3 on one broker (38), 0 partitions (37); each topic is
 * answered on its own and validate_only creates nothing. */
Test(create_topics, errors, .init = setup, .fini = teardown)
{
	create_topic("ct-exists", 1);
	const int16_t versions[] = {2, 5};
	for (int vi = 0; vi < 2; vi++) {
		int16_t v = versions[vi];
		struct ct_req t[8] = {
			{"ct-exists", 1, 1, 0, 0, 0, {NULL}, {NULL}},
			{"bad/name", 1, 1, 0, 0, 0, {NULL}, {NULL}},
			{"ct-dup", 1, 1, 0, 0, 0, {NULL}, {NULL}},
			{"ct-dup", 1, 1, 0, 0, 0, {NULL}, {NULL}},
			{"ct-assign", -1, -1, 1, 7, 0, {NULL}, {NULL}},
			{"ct-config", 1, 1, 0, 0, 1, {"no.such.config"}, {"1"}},
			{"ct-rf", 1, 3, 0, 0, 0, {NULL}, {NULL}},
			{"ct-zero", 0, 1, 0, 0, 0, {NULL}, {NULL}},
		};
		struct ct_res o[8];
		cr_assert_eq(create_topics_roundtrip(v, t, 8, false, o, NULL), 8);
		const int16_t want[8] = {36, 17, 0, 42, 39, 40, 38, 37};
		for (int i = 0; i < 8; i++) {
			cr_expect_str_eq(o[i].name, t[i].name);
			cr_expect_eq(o[i].err, want[i], "v%d %s: %d (%s)", v, t[i].name, o[i].err, o[i].msg);
			if (want[i])
				cr_expect(!o[i].msg_null && o[i].msg[0], "v%d %s: message", v, t[i].name);
		}
		cr_expect(topic_id("ct-dup", NULL, NULL));
		/* validate_only */
		char vn[32];
		snprintf(vn, sizeof vn, "ct-validate-%d", v);
		struct ct_req tv = {vn, 2, 1, 0, 0, 0, {NULL}, {NULL}};
		cr_assert_eq(create_topics_roundtrip(v, &tv, 1, true, o, NULL), 1);
		cr_expect_eq(o[0].err, 0);
		cr_expect(!topic_id(vn, NULL, NULL), "validate_only must not create");
		/* the next round would find ct-dup existing */
		struct ct_req td = {"ct-dup", 1, 1, 0, 0, 0, {NULL}, {NULL}};
		cr_assert_eq(create_topics_roundtrip(v, &td, 1, false, o, NULL), 1);
		cr_expect_eq(o[0].err, 36);
		cr_assert_eq(BR->meta.ops->delete_topic(BR->meta.self, "ct-dup", 6, NULL, o[0].msg, sizeof o[0].msg), 0);
	}
}

/* Proves a flexible CreateTopics naming seven or more one-character topics
 * (each 11 bytes on the wire) is accepted. Regression: the smallest topic
 * entry was once taken to be 12 bytes, but a flexible one is 10 plus the name
 * (compact name 1+len, NumPartitions 4, ReplicationFactor 2, empty
 * Assignments 1, empty Configs 1, tags 1), so n >= 7 one-character names
 * (11n + 6 bytes after the count < 12n) closed the connection. */
Test(create_topics, many_one_char_names_flexible, .init = setup, .fini = teardown)
{
	static const char *names[] = {"a", "b", "c", "d", "e", "f", "g", "h"};
	struct ct_req t[8];
	for (int i = 0; i < 8; i++)
		t[i] = (struct ct_req){names[i], 1, 1, 0, 0, 0, {NULL}, {NULL}};
	struct ct_res o[8];
	bool accepted;
	int m = create_topics_roundtrip(5, t, 8, false, o, &accepted);
	cr_assert(accepted, "CreateTopics v5 with 8 one-character names was refused as malformed");
	cr_expect_eq(m, 8);
	for (int i = 0; i < m; i++)
		cr_expect_eq(o[i].err, 0);
}

/* Proves an admin request naming no topics at all (CreateTopics v2-v7,
 * CreatePartitions v0-v3, DeleteTopics v1-v6) is answered with an empty
 * result list, and nothing undefined happens on the way (UBSan). Regression
 * for a fuzzer finding: the sorted duplicate check once handed qsort a NULL
 * array (tests/fuzz/crashes/ubsan-create-topics-empty-qsort). */
struct dt_res;
static int delete_topics_roundtrip(int16_t v, const char *const *names, const uint8_t (*ids)[16], int n,
				   struct dt_res *out);
Test(create_topics, no_topics, .init = setup, .fini = teardown)
{
	for (int16_t v = 2; v <= 7; v++) {
		struct ct_res o[1];
		cr_expect_eq(create_topics_roundtrip(v, NULL, 0, false, o, NULL), 0, "CreateTopics v%d", v);
	}
	for (int16_t v = 0; v <= 3; v++) {
		bool flex = v >= 2;
		struct kwr w;
		kwr_init(&w, 64, 1 << 20);
		kwr_i16(&w, 37);
		kwr_i16(&w, v);
		kwr_i32(&w, 9);
		kwr_cstr(&w, false, "sluice-unit");
		if (flex)
			kwr_tags_empty(&w);
		kwr_array(&w, flex, 0);
		kwr_i32(&w, 1000);
		kwr_bool(&w, false);
		if (flex)
			kwr_tags_empty(&w);
		cr_expect(stub_frame(C, w.buf, w.len), "CreatePartitions v%d", v);
		kwr_free(&w);
		uint8_t *buf = NULL;
		size_t len = 0;
		cr_expect(stub_take_response(C, &buf, &len));
		free(buf);
	}
	for (int16_t v = 1; v <= 6; v++)
		cr_expect_eq(delete_topics_roundtrip(v, NULL, NULL, 0, NULL), 0, "DeleteTopics v%d", v);
}

/* A CreateTopics v4 (or CreatePartitions v0) frame naming n topics that all
 * have the empty name: the smallest entries the decoder accepts. */
static uint8_t *many_empty_topics(int16_t key, int32_t n, size_t *len)
{
	size_t entry = key == 19 ? 16 : 10; /* name 2, counts, empty arrays */
	*len = 10 + 4 + (size_t)n * entry + 5;
	uint8_t *f = calloc(1, *len);
	f[1] = (uint8_t)key;
	f[3] = key == 19 ? 4 : 0;
	f[8] = 0xff; /* null client id */
	f[9] = 0xff;
	kput32(f + 10, (uint32_t)n);
	for (int32_t i = 0; i < n; i++)
		kput32(f + 14 + (size_t)i * entry + (key == 19 ? 12 : 6), 0xffffffffu); /* null arrays */
	return f;
}

/* Proves a CreateTopics or CreatePartitions request naming many topics is
 * decoded and answered in time proportional to its size: 30000 entries
 * (under 500 KB) within a few seconds, even under the sanitizers.
 * Regression: the duplicate-name checks once compared every entry with every
 * earlier one on the network core (at 714b41f, optimised: CreateTopics
 * 10000/20000/40000 entries took 0.3/2.9/25 s, CreatePartitions 20000/40000
 * took 1.5/11 s), and CreateTopics allocated ~10.5 KB per entry up front,
 * about 650 times the bytes on the wire. */
Test(create_topics, many_topics_linear_time, .init = setup, .fini = teardown, .timeout = 8)
{
	const int16_t keys[2] = {19, 37};
	for (int k = 0; k < 2; k++) {
		size_t len;
		uint8_t *f = many_empty_topics(keys[k], 30000, &len);
		reconnect();
		cr_expect(stub_frame(C, f, len), "key %d refused", keys[k]);
		uint8_t *buf;
		size_t blen;
		if (stub_take_response(C, &buf, &blen))
			free(buf);
		free(f);
	}
}

/* ---- DeleteTopics ------------------------------------------------------------------------------ */

struct dt_res {
	char name[300];
	bool name_null;
	uint8_t id[16];
	int16_t err;
	bool msg_null;
};

/* names[i] NULL: by id (v6). */
static int delete_topics_roundtrip(int16_t v, const char *const *names, const uint8_t (*ids)[16], int n,
				   struct dt_res *out)
{
	struct rq q;
	rq_start(&q, 20, v);
	rq_arr(&q, n);
	for (int i = 0; i < n; i++) {
		if (v >= 6) {
			rq_str(&q, names[i]);
			static const uint8_t zero[16];
			kwr_uuid(&q.w, ids ? ids[i] : zero);
			rq_tags(&q);
		} else
			rq_str(&q, names[i]);
	}
	kwr_i32(&q.w, 30000);
	rq_tags(&q);
	cr_assert(rq_send(&q), "DeleteTopics v%d refused", v);
	struct rs s;
	rs_take(&s, 20, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0); /* v1+ */
	int32_t m = rs_arr(&s, false);
	for (int i = 0; i < m && !s.r.err; i++) {
		struct dt_res *o = &out[i];
		o->name_null = !rs_str(&s, o->name, sizeof o->name, v >= 6);
		if (v >= 6)
			krd_uuid(&s.r, o->id);
		o->err = krd_i16(&s.r);
		o->msg_null = v >= 5 ? !rs_str(&s, NULL, 0, true) : true;
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_end(&s);
	return m;
}

/* Proves DeleteTopics v1-v6: a topic is deleted (and its partitions handed
 * to storage for removal), an unknown one is 3 with a message from v5, names
 * are echoed, and v6 deletes by topic id, answering with the name and id,
 * an unknown id being UNKNOWN_TOPIC_ID (100). */
Test(delete_topics, every_version, .init = setup, .fini = teardown)
{
	for (int16_t v = 1; v <= 6; v++) {
		char n1[32];
		snprintf(n1, sizeof n1, "dt-%d", v);
		create_topic(n1, 2);
		produce_simple(n1, 1, 1);
		const char *names[2] = {n1, "dt-unknown"};
		struct dt_res o[2];
		cr_assert_eq(delete_topics_roundtrip(v, names, NULL, 2, o), 2);
		cr_expect_str_eq(o[0].name, n1);
		cr_expect_eq(o[0].err, 0, "v%d: %d", v, o[0].err);
		cr_expect(o[0].msg_null);
		cr_expect_str_eq(o[1].name, "dt-unknown");
		cr_expect_eq(o[1].err, 3);
		if (v >= 5)
			cr_expect(!o[1].msg_null);
		cr_expect(!topic_id(n1, NULL, NULL), "v%d: topic still there", v);
		cr_expect_eq(stub_store_hw(n1, 1), -1, "v%d: storage not told to delete", v);
	}
	create_topic("dt-by-id", 1);
	uint8_t ids[2][16];
	cr_assert(topic_id("dt-by-id", ids[0], NULL));
	memset(ids[1], 0x33, 16);
	const char *names[2] = {NULL, NULL};
	struct dt_res o[2];
	cr_assert_eq(delete_topics_roundtrip(6, names, (const uint8_t(*)[16])ids, 2, o), 2);
	cr_expect_eq(o[0].err, 0);
	cr_expect_str_eq(o[0].name, "dt-by-id");
	cr_expect(memcmp(o[0].id, ids[0], 16) == 0);
	cr_expect_eq(o[1].err, 100);
	cr_expect(o[1].name_null);
	cr_expect(!topic_id("dt-by-id", NULL, NULL));
}

/* Proves DeleteTopics with delete.topic.enable=false answers
 * TOPIC_DELETION_DISABLED (73) and deletes nothing. */
Test(delete_topics, disabled, .fini = teardown)
{
	static const char *const ov[] = {"delete.topic.enable", "false", NULL};
	setup_with(ov);
	create_topic("dt-keep", 1);
	const char *names[1] = {"dt-keep"};
	struct dt_res o[1];
	cr_assert_eq(delete_topics_roundtrip(4, names, NULL, 1, o), 1);
	cr_expect_eq(o[0].err, 73);
	cr_expect(topic_id("dt-keep", NULL, NULL));
}

/* Proves a DeleteTopics name longer than Kafka's 249-character limit does
 * not delete the topic whose name is its first 249 characters. Regression:
 * the name was once truncated to SLUICE_TOPIC_NAME_MAX and the 249-character
 * topic it starts with deleted, with error 0. */
Test(delete_topics, overlong_name_is_not_truncated, .init = setup, .fini = teardown)
{
	char name249[250], name250[251];
	memset(name249, 'x', 249);
	name249[249] = '\0';
	memset(name250, 'x', 250);
	name250[250] = '\0';
	create_topic(name249, 1);
	const char *names[1] = {name250};
	struct dt_res o[1];
	cr_assert_eq(delete_topics_roundtrip(4, names, NULL, 1, o), 1);
	cr_expect_neq(o[0].err, 0, "deleting a 250-character name reported success");
	cr_expect(topic_id(name249, NULL, NULL), "the 249-character topic was deleted");
}

/* Heap bytes in use, from whichever allocator this build has. */
#if defined(__SANITIZE_ADDRESS__)
size_t __sanitizer_get_current_allocated_bytes(void); /* libasan (no header with gcc) */
static size_t heap_in_use(void) { return __sanitizer_get_current_allocated_bytes(); }
#else
#include <malloc.h>
static size_t heap_in_use(void)
{
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}
#endif

/* Proves a DeleteTopics request that fails to decode after its topic array
 * was sized frees everything it allocated: 50 such requests, each naming
 * 1000 topics and missing its TimeoutMs, leave the heap where it was.
 * Regression for a fuzzer finding: ds->topics (about 416 bytes per named
 * topic) was once freed only by delete_topics_finish, so every malformed
 * DeleteTopics leaked it (tests/fuzz/crashes/leak-delete-topics-decode-error). */
Test(delete_topics, malformed_request_frees_everything, .init = setup, .fini = teardown)
{
	size_t before = 0;
	for (int round = 0; round < 51; round++) {
		if (round == 1)
			before = heap_in_use(); /* after the first: one-time allocations done */
		struct rq q;
		rq_start(&q, 20, 1);
		rq_arr(&q, 1000);
		for (int i = 0; i < 1000; i++)
			rq_str(&q, "");
		/* no TimeoutMs */
		reconnect();
		cr_assert(!rq_send(&q));
	}
	size_t after = heap_in_use();
	cr_expect_lt(after, before + (4u << 20), "heap grew by %zu bytes over 50 malformed requests",
		     after > before ? after - before : 0);
}

/* ---- DescribeConfigs -------------------------------------------------------------------------- */

#define DC_SYN_KEPT 8
struct dc_entry {
	char name[80], value[600];
	bool value_null, read_only, sensitive;
	int8_t source, type;
	int nsyn;
	struct {
		char name[80], value[64];
		bool value_null;
		int8_t source;
	} syn[DC_SYN_KEPT]; /* the first ones */
};
struct dc_res {
	int16_t err;
	bool msg_null;
	int8_t type;
	char name[300];
	int n;
	struct dc_entry e[128];
};

static void describe_configs_roundtrip(int16_t v, int8_t type, const char *name, const char *const *keys, int nkeys,
				       bool synonyms, struct dc_res *o)
{
	struct rq q;
	rq_start(&q, 32, v);
	rq_arr(&q, 1);
	kwr_i8(&q.w, type);
	rq_str(&q, name);
	rq_arr(&q, nkeys);
	for (int k = 0; k < nkeys; k++)
		rq_str(&q, keys[k]);
	rq_tags(&q);
	kwr_bool(&q.w, synonyms); /* v1+ */
	if (v >= 3)
		kwr_bool(&q.w, false);
	rq_tags(&q);
	cr_assert(rq_send(&q), "DescribeConfigs v%d refused", v);
	struct rs s;
	rs_take(&s, 32, v, q.corr);
	(void)krd_i32(&s.r);
	cr_assert_eq(rs_arr(&s, false), 1);
	memset(o, 0, sizeof *o);
	o->err = krd_i16(&s.r);
	o->msg_null = !rs_str(&s, NULL, 0, true);
	o->type = krd_i8(&s.r);
	rs_str(&s, o->name, sizeof o->name, false);
	o->n = rs_arr(&s, false);
	cr_assert_leq(o->n, 128);
	for (int i = 0; i < o->n && !s.r.err; i++) {
		struct dc_entry *e = &o->e[i];
		rs_str(&s, e->name, sizeof e->name, false);
		e->value_null = !rs_str(&s, e->value, sizeof e->value, true);
		e->read_only = krd_bool(&s.r);
		e->source = krd_i8(&s.r); /* v1+: ConfigSource */
		e->sensitive = krd_bool(&s.r);
		e->nsyn = rs_arr(&s, false);
		for (int k = 0; k < e->nsyn && !s.r.err; k++) {
			if (k < DC_SYN_KEPT) {
				rs_str(&s, e->syn[k].name, sizeof e->syn[k].name, false);
				e->syn[k].value_null = !rs_str(&s, e->syn[k].value, sizeof e->syn[k].value, true);
				e->syn[k].source = krd_i8(&s.r);
			} else {
				rs_str(&s, NULL, 0, false);
				rs_str(&s, NULL, 0, true);
				(void)krd_i8(&s.r);
			}
			rs_tags(&s);
		}
		if (v >= 3) {
			e->type = krd_i8(&s.r);
			rs_str(&s, NULL, 0, true);
		}
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);
}

static const struct dc_entry *dc_find(const struct dc_res *o, const char *name)
{
	for (int i = 0; i < o->n; i++)
		if (!strcmp(o->e[i].name, name))
			return &o->e[i];
	return NULL;
}

/* Proves DescribeConfigs v1-v4 for a topic (all keys, the defaults with
 * DEFAULT_CONFIG source 5, an override with DYNAMIC_TOPIC_CONFIG 1, a key
 * filter, synonyms on request, types from v3) and for the broker (read-only
 * entries; a wrong broker id 42), an unknown topic (3) and an unsupported
 * resource type (42). */
Test(describe_configs, every_version, .init = setup, .fini = teardown)
{
	struct sluice_topic_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.name = "dc";
	spec.name_len = 2;
	spec.partitions = 1;
	spec.replication_factor = -1;
	spec.config_n = 1;
	snprintf(spec.configs[0].key, sizeof spec.configs[0].key, "retention.ms");
	snprintf(spec.configs[0].value, sizeof spec.configs[0].value, "12345");
	char msg[256];
	cr_assert_eq(BR->meta.ops->create_topic(BR->meta.self, &spec, false, msg, sizeof msg, NULL), 0);
	for (int16_t v = 1; v <= 4; v++) {
		struct dc_res o;
		describe_configs_roundtrip(v, 2, "dc", NULL, -1, false, &o);
		cr_expect_eq(o.err, 0, "v%d: %d", v, o.err);
		cr_expect(o.msg_null);
		cr_expect_eq(o.type, 2);
		cr_expect_str_eq(o.name, "dc");
		cr_expect_geq(o.n, 10, "v%d: only %d topic configs", v, o.n);
		const struct dc_entry *e = dc_find(&o, "retention.ms");
		cr_assert_not_null(e);
		cr_expect_str_eq(e->value, "12345");
		cr_expect_eq(e->source, 1);
		e = dc_find(&o, "cleanup.policy");
		cr_assert_not_null(e);
		cr_expect_str_eq(e->value, "delete");
		cr_expect_eq(e->source, 5);
		e = dc_find(&o, "max.message.bytes");
		cr_assert_not_null(e);
		cr_expect_str_eq(e->value, "1048588");
		if (v >= 3)
			cr_expect_eq(e->type, 3, "max.message.bytes is INT");
		const char *keys[] = {"segment.bytes", "retention.ms"};
		describe_configs_roundtrip(v, 2, "dc", keys, 2, true, &o);
		cr_expect_eq(o.n, 2);
		for (int i = 0; i < o.n; i++)
			cr_expect_eq(o.e[i].nsyn, 1, "synonyms requested");
		describe_configs_roundtrip(v, 4, "1", NULL, -1, false, &o);
		cr_expect_eq(o.err, 0);
		cr_expect_gt(o.n, 10);
		for (int i = 0; i < o.n; i++) {
			cr_expect(o.e[i].read_only, "broker config %s read-only", o.e[i].name);
			cr_expect(o.e[i].source == 4 || o.e[i].source == 5, "%s source %d", o.e[i].name, o.e[i].source);
		}
		e = dc_find(&o, "node.id");
		cr_assert_not_null(e);
		cr_expect_str_eq(e->value, "1");
		describe_configs_roundtrip(v, 4, "2", NULL, -1, false, &o);
		cr_expect_eq(o.err, 42);
		describe_configs_roundtrip(v, 2, "dc-nope", NULL, -1, false, &o);
		cr_expect_eq(o.err, 3);
		cr_expect(!o.msg_null);
		cr_expect_eq(o.n, 0);
		describe_configs_roundtrip(v, 3, "x", NULL, -1, false, &o);
		cr_expect_eq(o.err, 42);
	}
}

/* ---- FindCoordinator ------------------------------------------------------------------------------ */

/* Proves FindCoordinator v0-v4 names this broker (node 1, 127.0.0.1:9092)
 * for groups and transactional ids: v0-v3 with a single key (KeyType from
 * v1, ThrottleTimeMs and a null message from v1), v4 with one coordinator
 * per requested key, keys echoed in order. */
Test(find_coordinator, every_version, .init = setup, .fini = teardown)
{
	for (int16_t v = 0; v <= 4; v++) {
		struct rq q;
		rq_start(&q, 10, v);
		if (v <= 3) {
			rq_str(&q, "group-1");
			if (v >= 1)
				kwr_i8(&q.w, 0);
		} else {
			kwr_i8(&q.w, 0);
			rq_arr(&q, 2);
			rq_str(&q, "group-a");
			rq_str(&q, "group-b");
		}
		rq_tags(&q);
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 10, v, q.corr);
		if (v >= 1)
			cr_expect_eq(krd_i32(&s.r), 0);
		char host[64], key[64];
		if (v <= 3) {
			cr_expect_eq(krd_i16(&s.r), 0);
			if (v >= 1)
				cr_expect(!rs_str(&s, NULL, 0, true), "null error message");
			cr_expect_eq(krd_i32(&s.r), 1);
			rs_str(&s, host, sizeof host, false);
			cr_expect_str_eq(host, "127.0.0.1");
			cr_expect_eq(krd_i32(&s.r), 9092);
		} else {
			cr_assert_eq(rs_arr(&s, false), 2);
			for (int i = 0; i < 2; i++) {
				rs_str(&s, key, sizeof key, false);
				cr_expect_str_eq(key, i == 0 ? "group-a" : "group-b");
				cr_expect_eq(krd_i32(&s.r), 1);
				rs_str(&s, host, sizeof host, false);
				cr_expect_eq(krd_i32(&s.r), 9092);
				cr_expect_eq(krd_i16(&s.r), 0);
				rs_str(&s, NULL, 0, true);
				rs_tags(&s);
			}
		}
		rs_tags(&s);
		rs_end(&s);
	}
}

/* ---- InitProducerId -------------------------------------------------------------------------------- */

static void init_pid_roundtrip(int16_t v, const char *txn, int64_t pid_in, int16_t epoch_in, int16_t *err, int64_t *pid,
			       int16_t *epoch)
{
	struct rq q;
	rq_start(&q, 22, v);
	rq_str(&q, txn);
	kwr_i32(&q.w, 60000);
	if (v >= 3) {
		kwr_i64(&q.w, pid_in);
		kwr_i16(&q.w, epoch_in);
	}
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 22, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	*err = krd_i16(&s.r);
	*pid = krd_i64(&s.r);
	*epoch = krd_i16(&s.r);
	rs_tags(&s);
	rs_end(&s);
}

/* Proves InitProducerId v0-v4 hands an idempotent producer a new id at epoch
 * 0, different each time; from v3 a producer naming its id and epoch keeps
 * the id one epoch on; a transactional id is refused (42). */
Test(init_producer_id, every_version, .init = setup, .fini = teardown)
{
	int64_t last = -1;
	for (int16_t v = 0; v <= 4; v++) {
		int16_t err, epoch;
		int64_t pid;
		init_pid_roundtrip(v, NULL, -1, -1, &err, &pid, &epoch);
		cr_expect_eq(err, 0, "v%d", v);
		cr_expect_geq(pid, 0);
		cr_expect_neq(pid, last, "ids are not reused");
		cr_expect_eq(epoch, 0);
		last = pid;
		if (v >= 3) {
			int64_t pid2;
			init_pid_roundtrip(v, NULL, pid, 4, &err, &pid2, &epoch);
			cr_expect_eq(err, 0);
			cr_expect_eq(pid2, pid);
			cr_expect_eq(epoch, 5);
		}
		init_pid_roundtrip(v, "txn-1", -1, -1, &err, &pid, &epoch);
		cr_expect_eq(err, 42, "transactions: %d", err);
		cr_expect_eq(pid, -1);
	}
}

/* ---- requests the broker routes elsewhere (groups) or answers alone (admin) ------------ */

/* Proves an OffsetFetch v1-v7 request (one group, the form librdkafka 2.0.2
 * sends) is routed to the group coordinator and its answer, or its absence,
 * handled without crashing: here the coordinator double gives no answer, so
 * the connection must be closed or answered, nothing else.
 * Regression test for a NULL read found by tests/fuzz: OffsetFetch v1-v7 is
 * started by group_single_start (r->api stays NULL) but was finished by
 * group_multi_finish, which read *(int32_t *)r->api; one OffsetFetch v7, or
 * `kcat -G group topic`, killed sluice-broker with SIGSEGV
 * (tests/fuzz/crashes/segv-offset-fetch-v7). */
Test(groups, offset_fetch_v1_to_v7_no_crash, .init = setup, .fini = teardown)
{
	for (int16_t v = 1; v <= 7; v++) {
		bool flex = v >= 6;
		struct kwr w;
		kwr_init(&w, 64, 1 << 20);
		kwr_i16(&w, 9);
		kwr_i16(&w, v);
		kwr_i32(&w, 5);
		kwr_cstr(&w, false, "sluice-unit");
		if (flex)
			kwr_tags_empty(&w);
		kwr_cstr(&w, flex, "group-1");
		kwr_array(&w, flex, 1);
		kwr_cstr(&w, flex, "t");
		kwr_array(&w, flex, 1);
		kwr_i32(&w, 0);
		if (flex)
			kwr_tags_empty(&w);
		if (v >= 7)
			kwr_bool(&w, false);
		if (flex)
			kwr_tags_empty(&w);
		reconnect();
		(void)stub_frame(C, w.buf, w.len);
		kwr_free(&w);
		uint8_t *buf;
		size_t len;
		if (stub_take_response(C, &buf, &len))
			free(buf);
	}
}

/* Proves CreatePartitions copes with a null topic name followed by an empty
 * one: each gets its own error and nothing undefined happens. Regression for
 * a fuzzer finding: the duplicate check once called memcmp with the null
 * name's NULL pointer (UBSan nonnull-attribute;
 * tests/fuzz/crashes/ubsan-create-partitions-null-name). */
Test(create_partitions, null_then_empty_name, .init = setup, .fini = teardown)
{
	static const uint8_t frame[] = {
		0x00, 0x25, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, /* CreatePartitions v0, null client id */
		0x00, 0x00, 0x00, 0x02,                                     /* 2 topics */
		0xff, 0xff, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xff, /* null name, count 1, no assignments */
		0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0xff, 0xff, 0xff, 0xff, /* "" , count 1, no assignments */
		0x00, 0x00, 0x00, 0x00, 0x00,                               /* timeout, validate_only */
	};
	cr_assert(stub_frame(C, frame, sizeof frame));
	uint8_t *buf;
	size_t len = 0;
	cr_assert(stub_take_response(C, &buf, &len));
	free(buf);
}

/* Proves CreatePartitions' Assignments on a single-node broker follow
 * Kafka's rules with this broker (node 1) the only one: new partitions
 * assigned to it are created; one list per new partition is required, and
 * a list naming another broker is refused with INVALID_REPLICA_ASSIGNMENT
 * and Kafka's message; a null array places them as before. v0 and the
 * flexible v2. */
Test(create_partitions, single_node_assignments, .init = setup, .fini = teardown)
{
	for (int16_t v = 0; v <= 2; v += 2) {
		char a[32], b[32], c[32], d[32];
		snprintf(a, sizeof a, "cpa-ok-%d", v);
		snprintf(b, sizeof b, "cpa-count-%d", v);
		snprintf(c, sizeof c, "cpa-other-%d", v);
		snprintf(d, sizeof d, "cpa-null-%d", v);
		const char *names[4] = {a, b, c, d};
		for (int i = 0; i < 4; i++)
			create_topic(names[i], 1);
		/* new count, lists (-1: a null array), their one broker; 39 INVALID_REPLICA_ASSIGNMENT */
		const struct {
			int32_t count, lists, broker;
			int16_t err;
			const char *in_msg;
		} t[4] = {
			{3, 2, 1, 0, NULL},
			{3, 1, 1, 39, "Attempted to add 2 additional partition(s), but only 1"},
			{2, 1, 7, 39, "includes broker 7, but no such broker is registered"},
			{2, -1, 0, 0, NULL},
		};
		struct rq q;
		rq_start(&q, 37, v);
		rq_arr(&q, 4);
		for (int i = 0; i < 4; i++) {
			rq_str(&q, names[i]);
			kwr_i32(&q.w, t[i].count);
			rq_arr(&q, t[i].lists);
			for (int l = 0; l < t[i].lists; l++) {
				rq_arr(&q, 1);
				kwr_i32(&q.w, t[i].broker);
				rq_tags(&q);
			}
			rq_tags(&q);
		}
		kwr_i32(&q.w, 60000);
		kwr_bool(&q.w, false);
		rq_tags(&q);
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 37, v, q.corr);
		(void)krd_i32(&s.r); /* throttle */
		cr_assert_eq(rs_arr(&s, false), 4);
		for (int i = 0; i < 4; i++) {
			char name[64], msg[256];
			rs_str(&s, name, sizeof name, false);
			int16_t err = krd_i16(&s.r);
			rs_str(&s, msg, sizeof msg, true);
			rs_tags(&s);
			cr_expect_str_eq(name, names[i]);
			cr_expect_eq(err, t[i].err, "v%d %s: %d (%s)", v, name, err, msg);
			if (t[i].in_msg)
				cr_expect(strstr(msg, t[i].in_msg), "v%d %s: %s", v, name, msg);
			int32_t parts;
			cr_assert(topic_id(names[i], NULL, &parts));
			cr_expect_eq(parts, t[i].err ? 1 : t[i].count, "v%d %s: %d partitions", v, name, parts);
		}
		rs_tags(&s);
		rs_end(&s);
	}
}

/* ---- framing, unsupported versions -------------------------------------------------------------- */

/* Send a 32-byte frame for key/version (null client id, zero body) on a
 * fresh connection; true when the broker closed without answering. */
static bool refused(int16_t key, int16_t ver)
{
	reconnect();
	int closes = stub_close_calls;
	uint8_t frame[32] = {0};
	frame[0] = (uint8_t)((uint16_t)key >> 8);
	frame[1] = (uint8_t)key;
	frame[2] = (uint8_t)((uint16_t)ver >> 8);
	frame[3] = (uint8_t)ver;
	kput32(frame + 4, 77);
	frame[8] = 0xff;
	frame[9] = 0xff;
	bool ok = stub_frame(C, frame, sizeof frame);
	uint8_t *buf;
	size_t len = 0;
	bool answered = stub_take_response(C, &buf, &len);
	if (answered)
		free(buf);
	return !ok && !answered && stub_close_calls > closes && stub_queued(C) == 0;
}

/* Proves every API key the broker does not advertise, and every advertised
 * API one version below its minimum and one above its maximum, closes the
 * connection without a response (Kafka's behaviour for everything but
 * ApiVersions), over keys -1..200 and the int16 extremes. */
Test(framing, unsupported_key_or_version_closes, .init = setup, .fini = teardown)
{
	struct rq q;
	enc_api_versions(&q, 3);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 18, 3, q.corr);
	struct av a;
	dec_api_versions(&s, &a);
	rs_end(&s);
	for (int32_t key = -1; key <= 200; key++) {
		if (key == 18)
			continue; /* has its own fallback, tested above */
		int16_t mn, mx;
		if (!av_range(&a, (int16_t)key, &mn, &mx)) {
			cr_expect(refused((int16_t)key, 0), "unadvertised key %d v0 not refused", key);
			continue;
		}
		if (mn > INT16_MIN)
			cr_expect(refused((int16_t)key, (int16_t)(mn - 1)), "key %d v%d (below min) not refused", key, mn - 1);
		if (mx < INT16_MAX)
			cr_expect(refused((int16_t)key, (int16_t)(mx + 1)), "key %d v%d (above max) not refused", key, mx + 1);
		cr_expect(refused((int16_t)key, -1), "key %d v-1 not refused", key);
	}
	cr_expect(refused(INT16_MAX, 0));
	cr_expect(refused(INT16_MIN, 0));
}

/* Proves a frame shorter than the 8-byte header prefix is refused. */
Test(framing, short_header, .init = setup, .fini = teardown)
{
	static const uint8_t hdr[8] = {0, 18, 0, 0, 0, 0, 0, 1};
	for (size_t n = 0; n < 8; n++) {
		reconnect();
		cr_expect(!stub_frame(C, hdr, n), "%zu-byte frame accepted", n);
		cr_expect_eq(stub_queued(C), 0);
	}
}

/* Proves pipelined requests of different APIs are answered in request order
 * with their own correlation ids. */
Test(framing, pipelined_order, .init = setup, .fini = teardown)
{
	create_topic("po", 1);
	struct rq q[4];
	enc_api_versions(&q[0], 3);
	enc_metadata(&q[1], 9, NULL, NULL, -1, true);
	struct fpart_req p = {0, 0, 1 << 20};
	enc_fetch(&q[2], 4, 0, 0, 1 << 20, "po", &p, 1);
	enc_api_versions(&q[3], 0);
	int32_t corr[4];
	for (int i = 0; i < 4; i++) {
		corr[i] = q[i].corr;
		cr_assert(rq_send(&q[i]));
	}
	const int16_t keys[4] = {18, 3, 1, 18}, vers[4] = {3, 9, 4, 0};
	for (int i = 0; i < 4; i++) {
		struct rs s;
		rs_take(&s, keys[i], vers[i], corr[i]);
		free(s.buf);
	}
	cr_expect_eq(stub_queued(C), 0);
}

/* Proves a request with bytes after its last field is refused only where
 * the decoder looks (it must never read them as data): the broker answers
 * or closes, but never crashes or answers twice. */
Test(framing, trailing_garbage, .init = setup, .fini = teardown)
{
	struct rq q;
	enc_metadata(&q, 1, NULL, NULL, -1, true);
	kwr_raw(&q.w, "\x00\x01\x02\x03", 4);
	(void)rq_send(&q);
	uint8_t *buf;
	size_t len = 0;
	int n = 0;
	while (stub_take_response(C, &buf, &len)) {
		free(buf);
		n++;
	}
	cr_expect_leq(n, 1);
}

/* ---- captured client requests --------------------------------------------------------------------- */

struct fixture {
	char name[128];
	uint8_t *bytes;
	size_t len;
};

static int load_fixtures(struct fixture *fx, int max)
{
	DIR *d = opendir(SLUICE_TEST_FIXTURES);
	cr_assert_not_null(d, "fixtures directory %s", SLUICE_TEST_FIXTURES);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);
		if (l < 5 || strcmp(de->d_name + l - 4, ".hex") != 0)
			continue;
		cr_assert_lt(n, max);
		char path[512];
		snprintf(path, sizeof path, "%s/%s", SLUICE_TEST_FIXTURES, de->d_name);
		FILE *f = fopen(path, "r");
		cr_assert_not_null(f);
		static char text[1 << 16];
		size_t tl = fread(text, 1, sizeof text - 1, f);
		fclose(f);
		text[tl] = '\0';
		fx[n].bytes = malloc(tl / 2 + 1);
		size_t k = 0;
		for (size_t i = 0; i + 1 < tl; i += 2) {
			unsigned b;
			if (text[i] == '\n' || sscanf(text + i, "%2x", &b) != 1)
				break;
			fx[n].bytes[k++] = (uint8_t)b;
		}
		fx[n].len = k;
		snprintf(fx[n].name, sizeof fx[n].name, "%s", de->d_name);
		n++;
	}
	closedir(d);
	/* Sorted by name: produce_* before fetch_*? Not needed; each is
	 * checked on its own terms. */
	return n;
}

static void free_fixtures(struct fixture *fx, int n)
{
	for (int i = 0; i < n; i++)
		free(fx[i].bytes);
}

/* Decode the response to a fixture with this suite's decoder for its API
 * and version and apply the sanity checks that hold for any state. */
static void check_fixture_response(const struct fixture *f)
{
	int16_t key = (int16_t)kbe16(f->bytes), v = (int16_t)kbe16(f->bytes + 2);
	int32_t corr = (int32_t)kbe32(f->bytes + 4);
	struct rs s;
	rs_take(&s, key, v, corr);
	switch (key) {
	case 18: {
		struct av a;
		dec_api_versions(&s, &a);
		cr_expect_eq(a.err, 0, "%s", f->name);
		cr_expect_gt(a.n, 5);
		break;
	}
	case 3: {
		struct md m;
		dec_metadata(&s, &m);
		cr_expect_eq(m.nbrokers, 1, "%s", f->name);
		for (int i = 0; i < m.ntopics; i++)
			cr_expect_eq(m.t[i].err, 0, "%s: topic %s error %d", f->name, m.t[i].name, m.t[i].err);
		break;
	}
	case 0: {
		struct pr o;
		dec_produce(&s, &o);
		cr_expect_eq(o.ntopics, 1, "%s", f->name);
		cr_expect_str_eq(o.t[0].name, "captopic");
		cr_expect_eq(o.t[0].p[0].err, 0, "%s: produce error %d", f->name, o.t[0].p[0].err);
		cr_expect_geq(o.t[0].p[0].base, 0);
		break;
	}
	case 1: {
		struct fr o;
		dec_fetch(&s, &o);
		cr_expect_str_eq(o.topic, "captopic");
		cr_expect(o.p[0].err == 0 || o.p[0].err == 1, "%s: fetch error %d", f->name, o.p[0].err);
		if (o.p[0].records_len > 0)
			(void)check_records(o.p[0].records, o.p[0].records_len,
					    (int64_t)kbe64(o.p[0].records), o.p[0].hw);
		fr_free(&o);
		break;
	}
	case 2: {
		if (v >= 2)
			(void)krd_i32(&s.r);
		cr_assert_eq(rs_arr(&s, false), 1);
		char name[64];
		rs_str(&s, name, sizeof name, false);
		cr_expect_str_eq(name, "captopic");
		int32_t np = rs_arr(&s, false);
		for (int i = 0; i < np; i++) {
			(void)krd_i32(&s.r);
			cr_expect_eq(krd_i16(&s.r), 0, "%s", f->name);
			(void)krd_i64(&s.r);
			cr_expect_geq(krd_i64(&s.r), 0, "%s offset", f->name);
			if (v >= 4)
				(void)krd_i32(&s.r);
			rs_tags(&s);
		}
		rs_tags(&s);
		rs_tags(&s);
		break;
	}
	case 10:
		(void)krd_i32(&s.r);
		cr_expect_eq(krd_i16(&s.r), 0);
		rs_str(&s, NULL, 0, true);
		cr_expect_eq(krd_i32(&s.r), 1);
		rs_str(&s, NULL, 0, false);
		cr_expect_eq(krd_i32(&s.r), 9092);
		rs_tags(&s);
		break;
	case 22:
		(void)krd_i32(&s.r);
		cr_expect_eq(krd_i16(&s.r), 0);
		cr_expect_geq(krd_i64(&s.r), 0);
		cr_expect_eq(krd_i16(&s.r), 0);
		rs_tags(&s);
		break;
	default:
		cr_assert_fail("%s: no decoder for key %d", f->name, key);
	}
	rs_end(&s);
}

/* Proves every request kcat/librdkafka 2.0.2 sent to a real Sluice broker
 * (fixtures/README) is accepted and answered sanely: ApiVersions v3,
 * Metadata v4 (all, brokers only, named with auto-create), Produce v7 plain,
 * gzip, snappy, lz4, zstd and idempotent, InitProducerId v4, ListOffsets v2
 * (earliest, latest, by time), Fetch v11 and FindCoordinator v2, all
 * decoding with the strict response decoders here. Produces go first so
 * that fetches and offset lookups see data. */
Test(fixtures, captured_requests_answered, .init = setup, .fini = teardown)
{
	create_topic("captopic", 1);
	static struct fixture fx[64];
	int n = load_fixtures(fx, 64);
	cr_assert_geq(n, 15, "only %d fixtures", n);
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < n; i++) {
			int16_t key = (int16_t)kbe16(fx[i].bytes);
			if ((pass == 0) != (key == 0 || key == 18 || key == 22))
				continue;
			cr_assert(stub_frame(C, fx[i].bytes, fx[i].len), "%s refused", fx[i].name);
			check_fixture_response(&fx[i]);
		}
	cr_expect_eq(stub_store_hw("captopic", 0), 11, "the captured produces hold 11 records");
	free_fixtures(fx, n);
}

/* Proves every truncation of every captured request (each prefix of at
 * least the 8-byte header prefix) is refused: on_frame returns false, no
 * response is produced and nothing reaches storage. */
Test(fixtures, truncations_refused, .init = setup, .fini = teardown)
{
	create_topic("captopic", 1);
	static struct fixture fx[64];
	int n = load_fixtures(fx, 64);
	for (int i = 0; i < n; i++)
		for (size_t cut = 0; cut < fx[i].len; cut++) {
			reconnect();
			int64_t ops = stub_store_ops();
			bool ok = stub_frame(C, fx[i].bytes, cut);
			cr_expect(!ok, "%s truncated to %zu of %zu bytes was accepted", fx[i].name, cut, fx[i].len);
			uint8_t *buf;
			size_t len;
			if (stub_take_response(C, &buf, &len)) {
				cr_expect_fail("%s truncated to %zu: answered", fx[i].name, cut);
				free(buf);
			}
			cr_expect_eq(stub_store_ops(), ops, "%s truncated to %zu reached storage", fx[i].name, cut);
		}
	free_fixtures(fx, n);
}

/* Proves byte-level mutations of the captured requests (every byte set to
 * 0x00, 0xff, 0x7f, 0x80 and +1 in turn) never crash or hang the decoder
 * and never produce more than one response per request (run under ASan and
 * UBSan this is a small deterministic fuzz of every handler they reach). */
Test(fixtures, mutations_survive, .init = setup, .fini = teardown, .timeout = 120)
{
	create_topic("captopic", 2);
	static struct fixture fx[64];
	int n = load_fixtures(fx, 64);
	static const int muts[] = {0x00, 0xff, 0x7f, 0x80, -1};
	for (int i = 0; i < n; i++) {
		uint8_t *m = malloc(fx[i].len);
		for (size_t pos = 0; pos < fx[i].len; pos++)
			for (size_t k = 0; k < sizeof muts / sizeof *muts; k++) {
				memcpy(m, fx[i].bytes, fx[i].len);
				m[pos] = muts[k] < 0 ? (uint8_t)(m[pos] + 1) : (uint8_t)muts[k];
				reconnect();
				(void)stub_frame(C, m, fx[i].len);
				uint8_t *buf;
				size_t len;
				int answers = 0;
				while (stub_take_response(C, &buf, &len)) {
					cr_assert_geq(len, 8);
					cr_assert_eq(kbe32(buf), len - 4);
					free(buf);
					answers++;
				}
				stub_retry_parked(true);
				while (stub_take_response(C, &buf, &len)) {
					free(buf);
					answers++;
				}
				cr_assert_leq(answers, 1, "%s byte %zu", fx[i].name, pos);
			}
		free(m);
		stub_store_reset();
	}
	free_fixtures(fx, n);
}

/* ---- produce: batches that lie about their records ------------------------------- */

/* A batch whose records section is recs[0..n) (compressed with codec, TB_*,
 * unless 0) claiming count records, stamped now. */
static uint8_t *lying_batch(const uint8_t *recs, size_t n, int codec, int32_t count, size_t *len)
{
	struct tb_hdr h = tb_hdr_default(count, wall_now_ms());
	uint8_t *c = NULL;
	if (codec) {
		c = tb_compress(codec, recs, n, &n);
		cr_assert(c);
		h.attributes = (int16_t)tb_attr_codec(codec);
	}
	uint8_t *b = tb_wrap(&h, c ? c : recs, n, len);
	free(c);
	return b;
}

/* Proves Produce refuses, with INVALID_RECORD and nothing appended, batches
 * with a correct CRC whose records do not match their header: a count one
 * too high or too low, a record length one byte too long, bytes after the
 * last record, for uncompressed, gzip, lz4 and zstd batches; and a truncated
 * zstd payload. A good batch afterwards gets offset 0: no offset was burned. */
Test(produce, lying_batches, .init = setup, .fini = teardown)
{
	create_topic("pl", 1);
	static const struct tb_rec recs[3] = {{"k0", 2, "v0", 2, 0}, {"k1", 2, "v1", 2, 1}, {"k2", 2, "v2", 2, 2}};
	struct kwr w;
	kwr_init(&w, 128, 1u << 20);
	(void)tb_records(&w, recs, 3);
	size_t n = w.len;
	uint8_t over[64], tail[64];
	cr_assert_lt(n + 3, sizeof over);
	memcpy(over, w.buf, n);
	over[0] += 2; /* record 0's length (a one-byte zigzag varint) one byte too long */
	memcpy(tail, w.buf, n);
	memcpy(tail + n, "xyz", 3); /* bytes after the last record */
	const struct {
		const uint8_t *recs;
		size_t n;
		int32_t count;
	} cases[4] = {{w.buf, n, 4}, {w.buf, n, 2}, {over, n, 3}, {tail, n + 3, 3}};
	const int codecs[4] = {0, TB_GZIP, TB_LZ4, TB_ZSTD};
	for (int c = 0; c < 4; c++) {
		for (int k = 0; k < 4; k++) {
			size_t len;
			uint8_t *b = lying_batch(cases[k].recs, cases[k].n, codecs[c], cases[k].count, &len);
			for (int16_t v = 7; v <= 11; v += 4) { /* zstd needs v7+ */
				struct ptopic_req t = {"pl", 1, {{0, b, (int32_t)len}}};
				struct pr o;
				produce_roundtrip(v, -1, &t, 1, &o);
				cr_expect_eq(o.t[0].p[0].err, 87, "codec %d case %d v%d: %d", codecs[c], k, v, o.t[0].p[0].err);
			}
			free(b);
		}
	}
	size_t zl;
	uint8_t *z = tb_compress(TB_ZSTD, w.buf, n, &zl);
	struct tb_hdr h = tb_hdr_default(3, wall_now_ms());
	h.attributes = TB_ZSTD;
	size_t len;
	uint8_t *b = tb_wrap(&h, z, zl - 4, &len);
	struct ptopic_req t = {"pl", 1, {{0, b, (int32_t)len}}};
	struct pr o;
	produce_roundtrip(9, -1, &t, 1, &o);
	cr_expect_eq(o.t[0].p[0].err, 87, "truncated zstd: %d", o.t[0].p[0].err);
	free(b);
	free(z);
	cr_expect_eq(stub_store_hw("pl", 0), -1, "nothing appended");
	b = lying_batch(w.buf, n, TB_ZSTD, 3, &len);
	struct ptopic_req good = {"pl", 1, {{0, b, (int32_t)len}}};
	produce_roundtrip(9, -1, &good, 1, &o);
	cr_expect_eq(o.t[0].p[0].err, 0);
	cr_expect_eq(o.t[0].p[0].base, 0, "no offset burned");
	free(b);
	kwr_free(&w);
}

/* Proves a null key on a cleanup.policy=compact topic is refused as Kafka
 * 4.1 does: INVALID_RECORD, one RecordErrors entry per keyless record (here
 * record 1) and Kafka's ErrorMessage; uncompressed and gzip; while keyed
 * records are appended, and a null key on a delete-policy topic is fine. */
Test(produce, compacted_topic_null_key, .init = setup, .fini = teardown)
{
	struct ct_req ct = {"pc", 1, -1, 0, 0, 1, {"cleanup.policy"}, {"compact"}};
	struct ct_res cres[1];
	cr_assert_eq(create_topics_roundtrip(5, &ct, 1, false, cres, NULL), 1);
	cr_assert_eq(cres[0].err, 0);
	create_topic("pd", 1);
	static const struct tb_rec recs[3] = {{"k0", 2, "v0", 2, 0}, {NULL, 0, "v1", 2, 1}, {"k2", 2, "v2", 2, 2}};
	struct kwr w;
	kwr_init(&w, 128, 1u << 20);
	(void)tb_records(&w, recs, 3);
	for (int codec = 0; codec <= TB_GZIP; codec++) {
		size_t len;
		uint8_t *b = lying_batch(w.buf, w.len, codec, 3, &len);
		for (int16_t v = 3; v <= 11; v += 4) {
			struct ptopic_req t = {"pc", 1, {{0, b, (int32_t)len}}};
			struct pr o;
			produce_roundtrip(v, -1, &t, 1, &o);
			cr_expect_eq(o.t[0].p[0].err, 87, "codec %d v%d: %d", codec, v, o.t[0].p[0].err);
			if (v >= 8) {
				cr_expect_eq(o.t[0].p[0].nrecord_errors, 1);
				cr_expect_eq(o.t[0].p[0].record_error_index, 1);
				const char *want = "One or more records have been rejected due to 1 record errors in total";
				cr_expect(!strncmp(o.t[0].p[0].msg, want, strlen(want)), "%s", o.t[0].p[0].msg);
			}
		}
		struct ptopic_req t = {"pd", 1, {{0, b, (int32_t)len}}};
		struct pr o;
		produce_roundtrip(9, -1, &t, 1, &o);
		cr_expect_eq(o.t[0].p[0].err, 0, "delete policy: %d", o.t[0].p[0].err);
		free(b);
	}
	cr_expect_eq(stub_store_hw("pc", 0), -1, "nothing appended");
	kwr_free(&w);
	kwr_init(&w, 128, 1u << 20);
	struct tb_rec keyed = {"k", 1, "v", 1, 0};
	(void)tb_records(&w, &keyed, 1);
	size_t len;
	uint8_t *b = lying_batch(w.buf, w.len, 0, 1, &len);
	struct ptopic_req t = {"pc", 1, {{0, b, (int32_t)len}}};
	struct pr o;
	produce_roundtrip(9, -1, &t, 1, &o);
	cr_expect_eq(o.t[0].p[0].err, 0);
	cr_expect_eq(o.t[0].p[0].base, 0);
	free(b);
	kwr_free(&w);
}

/* Proves a CreateTime batch whose MaxTimestamp header does not match its
 * records (here 30 minutes ahead, inside the accepted window) is stored with
 * the records' largest timestamp and a CRC that matches, as Kafka rewrites
 * it; and that a batch whose BaseOffset is not 0 is refused (87), as Kafka
 * 4.1 does. */
Test(produce, max_timestamp_rewritten, .init = setup, .fini = teardown)
{
	create_topic("pm", 1);
	int64_t now = wall_now_ms();
	static const struct tb_rec recs[3] = {{"a", 1, "0", 1, 0}, {"b", 1, "1", 1, 2}, {"c", 1, "2", 1, 1}};
	struct kwr w;
	kwr_init(&w, 128, 1u << 20);
	(void)tb_records(&w, recs, 3);
	struct tb_hdr h = tb_hdr_default(3, now);
	h.max_timestamp = now + 30 * 60 * 1000;
	size_t len;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, &len);
	struct ptopic_req t = {"pm", 1, {{0, b, (int32_t)len}}};
	struct pr o;
	produce_roundtrip(9, -1, &t, 1, &o);
	cr_assert_eq(o.t[0].p[0].err, 0);
	free(b);
	struct fpart_req fp = {0, 0, 1 << 20};
	struct fr f;
	fetch_roundtrip(11, 0, 1, "pm", &fp, 1, &f);
	cr_assert_eq(f.p[0].err, 0);
	cr_assert_geq(f.p[0].records_len, 61);
	struct sluice_batch sb;
	cr_assert_eq(sluice_batch_check(f.p[0].records, (size_t)f.p[0].records_len, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sb.max_timestamp, now + 2, "MaxTimestamp %" PRId64 ", records' max %" PRId64, sb.max_timestamp,
		     now + 2);
	fr_free(&f);
	h.max_timestamp = now + 2;
	h.base_offset = 1234;
	b = tb_wrap(&h, w.buf, w.len, &len);
	struct ptopic_req t2 = {"pm", 1, {{0, b, (int32_t)len}}};
	produce_roundtrip(9, -1, &t2, 1, &o);
	cr_expect_eq(o.t[0].p[0].err, 87, "BaseOffset 1234: %d", o.t[0].p[0].err);
	free(b);
	kwr_free(&w);
}

/* ---- metadata changes answered on completion ------------------------------------------------ */

/* Wait (at most 5 s) until the metadata writer has posted a completion to
 * the network core, which the held stub leaves unrun. */
static void wait_posted(void)
{
	for (int i = 0; i < 5000 && !stub_meta_posted(); i++)
		usleep(1000);
	cr_assert(stub_meta_posted(), "the metadata writer never completed the batch");
}

static void create_topics_send(int16_t v, const char *name, int32_t partitions)
{
	struct rq q;
	rq_start(&q, 19, v);
	rq_arr(&q, 1);
	rq_str(&q, name);
	kwr_i32(&q.w, partitions);
	kwr_i16(&q.w, -1);
	rq_arr(&q, 0);
	rq_arr(&q, 0);
	rq_tags(&q);
	kwr_i32(&q.w, 60000);
	kwr_bool(&q.w, false);
	rq_tags(&q);
	cr_assert(rq_send(&q));
}

/* Proves CreateTopics is answered only once its metadata batch has come
 * back to the network core: with the core not running the writer's
 * completion, the topic is already durable and published but no response
 * has been sent and the request is still queued; once the core runs the
 * completion, the answer (error 0, the partition count) follows. */
Test(meta_async, create_topics_answered_after_completion, .init = setup, .fini = teardown)
{
	stub_meta_hold(true);
	create_topics_send(5, "late", 3);
	wait_posted();
	cr_expect(topic_id("late", NULL, NULL), "published before done is called");
	cr_expect_eq(stub_meta_out(), 1);
	cr_expect_eq(stub_queued(C), 1);
	uint8_t *buf;
	size_t len;
	cr_assert_not(stub_take_response(C, &buf, &len), "answered before the completion ran");
	stub_meta_hold(false);
	stub_meta_wait();
	cr_expect_eq(stub_meta_out(), 0);
	struct rs s;
	rs_take(&s, 19, 5, corr_next - 1);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 1);
	char name[16];
	rs_str(&s, name, sizeof name, false);
	cr_expect_str_eq(name, "late");
	cr_expect_eq(krd_i16(&s.r), 0);
	(void)rs_str(&s, NULL, 0, true);
	cr_expect_eq(krd_i32(&s.r), 3);
	cr_expect_eq(krd_i16(&s.r), 1);
	cr_expect_eq(rs_arr(&s, true), 0);
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);
}

/* Proves a connection closed while its CreateTopics batch is out is kept
 * (with the request) until the batch comes back, then freed: the metadata
 * writer never completes into freed memory (run it under
 * -Db_sanitize=address,undefined), and the topic is created all the same. */
Test(meta_async, connection_closed_while_batch_out, .init = setup, .fini = teardown)
{
	stub_meta_hold(true);
	create_topics_send(2, "orphaned", 2);
	reconnect(); /* the peer goes away; C is a new connection */
	cr_expect_eq(sluice_netcore_conns(stub_netcore()), 2, "the closed connection waits for its batch");
	wait_posted();
	stub_meta_hold(false);
	stub_meta_wait();
	cr_expect_eq(stub_meta_out(), 0);
	cr_expect_eq(sluice_netcore_conns(stub_netcore()), 1, "freed once the batch was back");
	int32_t parts = 0;
	cr_expect(topic_id("orphaned", NULL, &parts));
	cr_expect_eq(parts, 2);
}

/* A metadata backend whose queue is always full. */
static enum sluice_meta_submit_result submit_busy(void *self, struct sluice_meta_batch *batch)
{
	(void)self;
	(void)batch;
	return SLUICE_META_BUSY;
}

/* Proves a full metadata queue (SUBMIT answers BUSY) is answered at once
 * with errors clients retry by themselves: CreateTopics and CreatePartitions
 * THROTTLING_QUOTA_EXCEEDED (89) per topic, AlterConfigs REQUEST_TIMED_OUT
 * (7) per resource, InitProducerId COORDINATOR_LOAD_IN_PROGRESS (14); and
 * nothing was created. */
Test(meta_async, busy_queue_gives_retriable_errors, .init = setup, .fini = teardown)
{
	create_topic("grown", 1);
	struct sluice_meta_ops busy = *BR->meta.ops;
	busy.submit = submit_busy;
	const struct sluice_meta_ops *real = BR->meta.ops;
	BR->meta.ops = &busy;

	struct ct_req t = {"refused", 2, -1, 0, 0, 0, {NULL}, {NULL}};
	struct ct_res o;
	cr_assert_eq(create_topics_roundtrip(5, &t, 1, false, &o, NULL), 1);
	cr_expect_eq(o.err, 89, "CreateTopics: %d", o.err);
	cr_expect_not(o.msg_null);

	struct rq q;
	rq_start(&q, 37, 2); /* CreatePartitions v2: flexible */
	rq_arr(&q, 1);
	rq_str(&q, "grown");
	kwr_i32(&q.w, 4);
	rq_arr(&q, -1);
	rq_tags(&q);
	kwr_i32(&q.w, 60000);
	kwr_bool(&q.w, false);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 37, 2, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 1);
	(void)rs_str(&s, NULL, 0, false);
	cr_expect_eq(krd_i16(&s.r), 89, "CreatePartitions");
	(void)rs_str(&s, NULL, 0, true);
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);

	rq_start(&q, 33, 0); /* AlterConfigs v0 */
	rq_arr(&q, 1);
	kwr_i8(&q.w, 2);
	rq_str(&q, "grown");
	rq_arr(&q, 1);
	rq_str(&q, "retention.ms");
	rq_str(&q, "1000");
	kwr_bool(&q.w, false);
	cr_assert(rq_send(&q));
	rs_take(&s, 33, 0, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 1);
	cr_expect_eq(krd_i16(&s.r), 7, "AlterConfigs");
	(void)rs_str(&s, NULL, 0, true);
	cr_expect_eq(krd_i8(&s.r), 2);
	(void)rs_str(&s, NULL, 0, false);
	rs_end(&s);

	int16_t err, epoch;
	int64_t pid;
	init_pid_roundtrip(4, NULL, -1, -1, &err, &pid, &epoch);
	cr_expect_eq(err, 14, "InitProducerId: %d", err);
	cr_expect_eq(pid, -1);

	BR->meta.ops = real;
	cr_expect_not(topic_id("refused", NULL, NULL));
	int32_t parts = 0;
	cr_expect(topic_id("grown", NULL, &parts));
	cr_expect_eq(parts, 1);
}

/* ---- cluster mode: who serves what comes from the snapshot --------------------------------- */

#define SLUICE_OFFSETS_TOPIC_NAME "__consumer_offsets"

/* Three brokers; this one is node 1 at 127.0.0.1:9092 (the stub broker). */
static const struct sluice_meta_broker cl_brokers[3] = {
	{1, 9092, "127.0.0.1", ""},
	{2, 9093, "10.0.0.2", "r2"},
	{3, 9094, "10.0.0.3", ""},
};

/* One replica; leader -1: offline (its replica's broker is fenced). */
static struct sluice_partition_state cl_state(int32_t leader, int32_t epoch, int32_t replica)
{
	struct sluice_partition_state st = {.leader = leader, .leader_epoch = epoch, .replica_n = 1};
	st.replicas[0] = replica;
	if (leader >= 0)
		st.isr[st.isr_n++] = leader;
	return st;
}

static void cl_partition(const char *topic, int32_t p, int32_t leader, int32_t epoch, int32_t replica)
{
	struct sluice_partition_state st = cl_state(leader, epoch, replica);
	stub_cluster_partition(topic, p, &st);
}

/* Topic "cl": partition 0 led here at epoch 5, partition 1 by broker 2 at
 * epoch 3, partition 2 by nobody (epoch 4, its replica on broker 3). */
static void cl_setup(void)
{
	setup();
	create_topic("cl", 3);
	stub_cluster_begin();
	stub_cluster_brokers(cl_brokers, 3);
	cl_partition("cl", 0, 1, 5, 1);
	cl_partition("cl", 1, 2, 3, 2);
	cl_partition("cl", 2, -1, 4, 3);
}

/* Proves Produce v3, v9 and v11 append only to the partition this broker
 * leads: a partition led by another broker, and one without a leader, get
 * NOT_LEADER_OR_FOLLOWER (6, retriable: the client refreshes its metadata)
 * and nothing reaches storage for them. */
Test(cluster, produce_only_where_this_broker_leads, .init = cl_setup, .fini = teardown)
{
	size_t len = 0;
	uint8_t *b = now_batch(2, &len);
	const int16_t versions[] = {3, 9, 11};
	for (size_t i = 0; i < sizeof versions / sizeof *versions; i++) {
		struct ptopic_req t = {"cl", 3, {{0, b, (int32_t)len}, {1, b, (int32_t)len}, {2, b, (int32_t)len}}};
		struct pr o;
		produce_roundtrip(versions[i], 1, &t, 1, &o);
		cr_assert_eq(o.t[0].np, 3);
		cr_expect_eq(o.t[0].p[0].err, 0, "v%d led here", versions[i]);
		cr_expect_eq(o.t[0].p[1].err, 6, "v%d led by broker 2: %d", versions[i], o.t[0].p[1].err);
		cr_expect_eq(o.t[0].p[2].err, 6, "v%d no leader: %d", versions[i], o.t[0].p[2].err);
		cr_expect_eq(o.t[0].p[1].base, -1);
	}
	cr_expect_eq(stub_store_hw("cl", 0), 6, "three batches of 2 appended where this broker leads");
	cr_expect_eq(stub_store_hw("cl", 1), -1, "nothing reached storage for partition 1");
	cr_expect_eq(stub_store_hw("cl", 2), -1, "nothing reached storage for partition 2");
	free(b);
}

/* A Fetch of topic "cl" naming CurrentLeaderEpoch (v9+) per partition. */
static void cl_fetch(int16_t v, const int32_t *parts, const int32_t *epochs, int n, struct fr *o)
{
	struct rq q;
	rq_start(&q, 1, v);
	kwr_i32(&q.w, -1);
	kwr_i32(&q.w, 0); /* MaxWaitMs: answer at once */
	kwr_i32(&q.w, 0);
	kwr_i32(&q.w, 1 << 20);
	kwr_i8(&q.w, 0);
	if (v >= 7) {
		kwr_i32(&q.w, 0);
		kwr_i32(&q.w, -1);
	}
	rq_arr(&q, 1);
	rq_str(&q, "cl");
	rq_arr(&q, n);
	for (int i = 0; i < n; i++) {
		kwr_i32(&q.w, parts[i]);
		if (v >= 9)
			kwr_i32(&q.w, epochs[i]);
		kwr_i64(&q.w, 0);
		if (v >= 12)
			kwr_i32(&q.w, -1);
		if (v >= 5)
			kwr_i64(&q.w, -1);
		kwr_i32(&q.w, 1 << 20);
		rq_tags(&q);
	}
	rq_tags(&q);
	if (v >= 7)
		rq_arr(&q, 0);
	if (v >= 11)
		rq_str(&q, "");
	rq_tags(&q);
	cr_assert(rq_send(&q), "Fetch v%d refused", v);
	struct rs s;
	rs_take(&s, 1, v, q.corr);
	dec_fetch(&s, o);
	rs_end(&s);
}

/* Proves Fetch checks leadership per partition: partition 1 (broker 2's)
 * and 2 (leaderless) answer NOT_LEADER_OR_FOLLOWER (6) with HW -1; on the
 * partition led here at epoch 5, CurrentLeaderEpoch -1 or 5 reads, 4 (older)
 * answers FENCED_LEADER_EPOCH (74) and 6 (newer: this broker lags) answers
 * UNKNOWN_LEADER_EPOCH (75); v4-v8 carry no epoch and only leadership counts. */
Test(cluster, fetch_leader_and_epoch, .init = cl_setup, .fini = teardown)
{
	produce_simple("cl", 0, 2);
	const int32_t parts[] = {0, 0, 0, 0}, epochs[] = {-1, 5, 4, 6};
	struct fr o;
	cl_fetch(12, parts, epochs, 4, &o);
	cr_assert_eq(o.np, 4);
	cr_expect_eq(o.p[0].err, 0);
	cr_expect_gt(o.p[0].records_len, 0, "epoch -1 reads");
	cr_expect_eq(o.p[1].err, 0);
	cr_expect_gt(o.p[1].records_len, 0, "the current epoch reads");
	cr_expect_eq(o.p[2].err, 74, "older epoch: %d", o.p[2].err);
	cr_expect_eq(o.p[3].err, 75, "newer epoch: %d", o.p[3].err);
	cr_expect_eq(o.p[2].records_len, 0);
	fr_free(&o);
	const int32_t others[] = {1, 2}, none[] = {-1, 4};
	for (int16_t v = 4; v <= 12; v += 4) {
		cl_fetch(v, others, none, 2, &o);
		cr_assert_eq(o.np, 2);
		cr_expect_eq(o.p[0].err, 6, "v%d broker 2's partition: %d", v, o.p[0].err);
		cr_expect_eq(o.p[1].err, 6, "v%d leaderless partition: %d", v, o.p[1].err);
		cr_expect_eq(o.p[0].hw, -1);
		fr_free(&o);
	}
}

/* ---- KIP-392: fetch from the closest replica --------------------------------------------- */

static const char *const rack_aware[] = {"replica.selector.class", SLUICE_CONFIG_RACK_AWARE_SELECTOR, NULL};

/* Topic "near" (records in partitions 0 and 1, written while single-node):
 * partition 0 led here with replicas 1, 2, 3 and 4 (broker 2 in rack r2,
 * broker 4 in no snapshot: fenced); partition 1 led by broker 2 with this
 * broker a follower; partition 2 led by 2 on brokers 2 and 3 only. */
static void near_setup_with(const char *const *overrides, const char *own_rack)
{
	setup_with(overrides);
	create_topic("near", 3);
	produce_simple("near", 0, 2);
	produce_simple("near", 1, 3);
	stub_cluster_begin();
	struct sluice_meta_broker brokers[3] = {{1, 9092, "127.0.0.1", ""}, {2, 9093, "10.0.0.2", "r2"},
						{3, 9094, "10.0.0.3", ""}};
	snprintf(brokers[0].rack, sizeof brokers[0].rack, "%s", own_rack);
	stub_cluster_brokers(brokers, 3);
	struct sluice_partition_state st = {.leader = 1, .leader_epoch = 5, .replica_n = 4, .isr_n = 4};
	const int32_t all[] = {1, 2, 3, 4};
	memcpy(st.replicas, all, sizeof all);
	memcpy(st.isr, all, sizeof all);
	stub_cluster_partition("near", 0, &st);
	st = (struct sluice_partition_state){.leader = 2, .leader_epoch = 3, .replica_n = 2, .isr_n = 2};
	st.replicas[0] = st.isr[0] = 2;
	st.replicas[1] = st.isr[1] = 1;
	stub_cluster_partition("near", 1, &st);
	st.replicas[1] = st.isr[1] = 3;
	stub_cluster_partition("near", 2, &st);
}
static void near_setup(void) { near_setup_with(rack_aware, ""); }
static void near_setup_no_selector(void) { near_setup_with(NULL, ""); }
static void near_setup_own_rack(void) { near_setup_with(rack_aware, "r2"); }

/* One Fetch of topic "near" partition p (CurrentLeaderEpoch -1) by
 * replica_id with RackId rack (v11+). */
static void near_fetch(int16_t v, int32_t replica_id, const char *rack, int32_t p, struct fr *o)
{
	struct rq q;
	rq_start(&q, 1, v);
	kwr_i32(&q.w, replica_id);
	kwr_i32(&q.w, 0);
	kwr_i32(&q.w, 0);
	kwr_i32(&q.w, 1 << 20);
	kwr_i8(&q.w, 0);
	if (v >= 7) {
		kwr_i32(&q.w, 0);
		kwr_i32(&q.w, -1);
	}
	rq_arr(&q, 1);
	rq_str(&q, "near");
	rq_arr(&q, 1);
	kwr_i32(&q.w, p);
	if (v >= 9)
		kwr_i32(&q.w, -1);
	kwr_i64(&q.w, 0);
	if (v >= 12)
		kwr_i32(&q.w, -1);
	if (v >= 5)
		kwr_i64(&q.w, -1);
	kwr_i32(&q.w, 1 << 20);
	rq_tags(&q);
	rq_tags(&q);
	if (v >= 7)
		rq_arr(&q, 0);
	if (v >= 11)
		rq_str(&q, rack);
	rq_tags(&q);
	cr_assert(rq_send(&q), "Fetch v%d refused", v);
	struct rs s;
	rs_take(&s, 1, v, q.corr);
	dec_fetch(&s, o);
	rs_end(&s);
	cr_assert_eq(o->np, 1);
}

/* Proves the network core's half of Kafka's RackAwareReplicaSelector on a
 * partition led here: a consumer's Fetch v11 and v12 naming rack r2 reaches
 * storage with exactly the unfenced replicas in r2 as candidates (broker 2;
 * broker 4 is fenced, the leader never one), and the partition answers
 * PreferredReadReplica 2 without records (error 0, the high watermark); no
 * rack, an unknown rack, a follower's fetch, and v10 (no RackId) name no
 * candidate and read records (PreferredReadReplica -1 from v11). */
Test(fetch_from_follower, leader_points_to_the_rack, .init = near_setup, .fini = teardown)
{
	struct fr o;
	for (int16_t v = 11; v <= 12; v++) {
		near_fetch(v, -1, "r2", 0, &o);
		cr_expect_eq(o.p[0].err, 0, "v%d: %d", v, o.p[0].err);
		cr_expect_eq(o.p[0].preferred, 2, "v%d: PreferredReadReplica %d", v, o.p[0].preferred);
		cr_expect_eq(o.p[0].records_len, 0, "pointed elsewhere: no records");
		cr_expect_eq(o.p[0].hw, 2);
		cr_expect_eq(stub_read.rack_replicas, 1u << 1, "v%d: candidates %#x", v, stub_read.rack_replicas);
		cr_expect(stub_read.follower_read);
		fr_free(&o);
	}
	const char *racks[] = {"", "r9"};
	for (int i = 0; i < 2; i++) {
		near_fetch(12, -1, racks[i], 0, &o);
		cr_expect_eq(o.p[0].err, 0);
		cr_expect_eq(o.p[0].preferred, -1, "rack '%s'", racks[i]);
		cr_expect_gt(o.p[0].records_len, 0, "rack '%s' reads here", racks[i]);
		cr_expect_eq(stub_read.rack_replicas, 0);
		fr_free(&o);
	}
	near_fetch(12, 3, "r2", 0, &o); /* a follower's fetch: never pointed elsewhere */
	cr_expect_eq(o.p[0].preferred, -1);
	cr_expect_eq(stub_read.rack_replicas, 0);
	cr_expect_not(stub_read.follower_read);
	fr_free(&o);
	near_fetch(10, -1, "r2", 0, &o);
	cr_expect_eq(o.p[0].err, 0);
	cr_expect_gt(o.p[0].records_len, 0, "v10 has no RackId: the leader serves");
	cr_expect_eq(stub_read.rack_replicas, 0);
	cr_expect_not(stub_read.follower_read, "v10: leader only");
	fr_free(&o);
}

/* Proves the selector is off by default (replica.selector.class unset:
 * Kafka's null) and that a leader in the consumer's own rack serves it. */
Test(fetch_from_follower, no_selector_reads_here, .init = near_setup_no_selector, .fini = teardown)
{
	struct fr o;
	near_fetch(12, -1, "r2", 0, &o);
	cr_expect_eq(o.p[0].preferred, -1);
	cr_expect_gt(o.p[0].records_len, 0);
	cr_expect_eq(stub_read.rack_replicas, 0);
	fr_free(&o);
}

Test(fetch_from_follower, leader_in_the_rack_serves, .init = near_setup_own_rack, .fini = teardown)
{
	struct fr o;
	near_fetch(12, -1, "r2", 0, &o);
	cr_expect_eq(o.p[0].preferred, -1);
	cr_expect_gt(o.p[0].records_len, 0);
	cr_expect_eq(stub_read.rack_replicas, 0);
	fr_free(&o);
}

/* Proves a consumer's Fetch v11+ of a partition this broker follows goes
 * to storage (which serves it below its own high watermark), with or
 * without a rack, while v4-v10 still answer NOT_LEADER_OR_FOLLOWER (6)
 * without reaching storage, and a partition with no replica here answers
 * 6 at every version. */
Test(fetch_from_follower, follower_serves_v11_consumers, .init = near_setup, .fini = teardown)
{
	struct fr o;
	for (int16_t v = 11; v <= 12; v++) {
		int64_t before = stub_read.reads;
		near_fetch(v, -1, v == 11 ? "r2" : "", 1, &o);
		cr_expect_eq(o.p[0].err, 0, "v%d on a follower: %d", v, o.p[0].err);
		cr_expect_gt(o.p[0].records_len, 0);
		cr_expect_eq(o.p[0].preferred, -1);
		cr_expect_eq(stub_read.reads, before + 1);
		cr_expect(stub_read.follower_read);
		cr_expect_eq(stub_read.rack_replicas, 0, "only a leader points elsewhere");
		fr_free(&o);
	}
	for (int16_t v = 4; v <= 12; v++) {
		int64_t before = stub_read.reads;
		if (v <= 10) {
			near_fetch(v, -1, "", 1, &o);
			cr_expect_eq(o.p[0].err, 6, "v%d on a follower: %d", v, o.p[0].err);
			cr_expect_eq(o.p[0].hw, -1);
			fr_free(&o);
		}
		near_fetch(v, -1, "", 2, &o);
		cr_expect_eq(o.p[0].err, 6, "v%d, no replica here: %d", v, o.p[0].err);
		fr_free(&o);
		cr_expect_eq(stub_read.reads, before, "v%d: nothing reached storage", v);
	}
}

/* ListOffsets of topic "cl" with CurrentLeaderEpoch (v4+) per partition, latest. */
static void cl_list_offsets(int16_t v, const int32_t *parts, const int32_t *epochs, int n, struct lo_part *out)
{
	struct rq q;
	rq_start(&q, 2, v);
	kwr_i32(&q.w, -1);
	if (v >= 2)
		kwr_i8(&q.w, 0);
	rq_arr(&q, 1);
	rq_str(&q, "cl");
	rq_arr(&q, n);
	for (int i = 0; i < n; i++) {
		kwr_i32(&q.w, parts[i]);
		if (v >= 4)
			kwr_i32(&q.w, epochs[i]);
		kwr_i64(&q.w, -1);
		rq_tags(&q);
	}
	rq_tags(&q);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 2, v, q.corr);
	if (v >= 2)
		cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 1);
	rs_str(&s, NULL, 0, false);
	cr_assert_eq(rs_arr(&s, false), n);
	for (int i = 0; i < n; i++) {
		out[i].index = krd_i32(&s.r);
		out[i].err = krd_i16(&s.r);
		out[i].ts = krd_i64(&s.r);
		out[i].offset = krd_i64(&s.r);
		out[i].epoch = v >= 4 ? krd_i32(&s.r) : -1;
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);
}

/* Proves ListOffsets v1-v7 answers NOT_LEADER_OR_FOLLOWER (6) for partitions
 * led elsewhere or by nobody, applies the CurrentLeaderEpoch rules (v4+) on
 * the partition led here, and answers its LeaderEpoch (5) with the offset. */
Test(cluster, list_offsets_leader_and_epoch, .init = cl_setup, .fini = teardown)
{
	produce_simple("cl", 0, 3);
	for (int16_t v = 1; v <= 7; v++) {
		const int32_t parts[] = {0, 1, 2, 0, 0}, epochs[] = {5, 3, 4, 2, 9};
		int n = v >= 4 ? 5 : 3;
		struct lo_part o[5];
		cl_list_offsets(v, parts, epochs, n, o);
		cr_expect_eq(o[0].err, 0, "v%d", v);
		cr_expect_eq(o[0].offset, 3);
		if (v >= 4)
			cr_expect_eq(o[0].epoch, 5, "v%d LeaderEpoch %d", v, o[0].epoch);
		cr_expect_eq(o[1].err, 6, "v%d broker 2's: %d", v, o[1].err);
		cr_expect_eq(o[2].err, 6, "v%d leaderless: %d", v, o[2].err);
		cr_expect_eq(o[1].offset, -1);
		if (v >= 4) {
			cr_expect_eq(o[3].err, 74, "v%d older epoch: %d", v, o[3].err);
			cr_expect_eq(o[4].err, 75, "v%d newer epoch: %d", v, o[4].err);
		}
	}
}

/* Proves OffsetForLeaderEpoch v2-v4 checks leadership and CurrentLeaderEpoch
 * per partition as Kafka: on the partition led here at epoch 5, -1 and 5
 * answer, 4 (older) is FENCED_LEADER_EPOCH (74), 6 (newer) is
 * UNKNOWN_LEADER_EPOCH (75), each with LeaderEpoch and EndOffset -1; the
 * partitions led by broker 2 and by nobody answer NOT_LEADER_OR_FOLLOWER (6),
 * whatever the ReplicaId (a follower gets a consumer's answer). */
Test(cluster, offset_for_leader_epoch_leader_and_epoch, .init = cl_setup, .fini = teardown)
{
	produce_simple("cl", 0, 4);
	const int32_t e[] = {2, 5};
	const int64_t s[] = {0, 3};
	stub_store_epochs("cl", 0, e, s, 2);
	for (int16_t v = 2; v <= 4; v++) {
		const int32_t parts[][3] = {{0, -1, 5}, {0, 5, 2}, {0, 4, 5}, {0, 6, 5}, {1, -1, 0}, {2, -1, 0}};
		struct lo_part o[6];
		cl_epoch_end(v, parts, 6, o);
		cr_expect_eq(o[0].err, 0, "v%d: %d", v, o[0].err);
		cr_expect(o[0].epoch == 5 && o[0].offset == 4, "v%d latest epoch: %d %" PRId64, v, o[0].epoch, o[0].offset);
		cr_expect(o[1].err == 0 && o[1].epoch == 2 && o[1].offset == 3, "v%d epoch 2 ends where 5 starts", v);
		cr_expect_eq(o[2].err, 74, "v%d older CurrentLeaderEpoch: %d", v, o[2].err);
		cr_expect_eq(o[3].err, 75, "v%d newer CurrentLeaderEpoch: %d", v, o[3].err);
		cr_expect(o[2].epoch == -1 && o[2].offset == -1);
		cr_expect_eq(o[4].err, 6, "v%d broker 2's: %d", v, o[4].err);
		cr_expect_eq(o[5].err, 6, "v%d leaderless: %d", v, o[5].err);
		cr_expect(o[4].epoch == -1 && o[4].offset == -1);
	}
}

/* Proves DeleteRecords v0-v2 answers NOT_LEADER_OR_FOLLOWER (6) with low
 * watermark -1 for a partition another broker leads, and deletes on the one
 * led here. */
Test(cluster, delete_records_only_where_this_broker_leads, .init = cl_setup, .fini = teardown)
{
	produce_simple("cl", 0, 3);
	for (int16_t v = 0; v <= 2; v++) {
		struct rq q;
		rq_start(&q, 21, v);
		rq_arr(&q, 1);
		rq_str(&q, "cl");
		rq_arr(&q, 2);
		for (int32_t p = 0; p < 2; p++) {
			kwr_i32(&q.w, p);
			kwr_i64(&q.w, 1);
			rq_tags(&q);
		}
		rq_tags(&q);
		kwr_i32(&q.w, 1000);
		rq_tags(&q);
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 21, v, q.corr);
		cr_expect_eq(krd_i32(&s.r), 0);
		cr_assert_eq(rs_arr(&s, false), 1);
		rs_str(&s, NULL, 0, false);
		cr_assert_eq(rs_arr(&s, false), 2);
		int64_t low[2];
		int16_t err[2];
		for (int p = 0; p < 2; p++) {
			cr_expect_eq(krd_i32(&s.r), p);
			low[p] = krd_i64(&s.r);
			err[p] = krd_i16(&s.r);
			rs_tags(&s);
		}
		rs_tags(&s);
		rs_tags(&s);
		rs_end(&s);
		cr_expect_eq(err[0], 0, "v%d", v);
		cr_expect_eq(low[0], 1);
		cr_expect_eq(err[1], 6, "v%d: %d", v, err[1]);
		cr_expect_eq(low[1], -1);
	}
}

/* Proves Metadata v1-v12 answers from the snapshot: its three brokers,
 * each partition's leader and replicas, LEADER_NOT_AVAILABLE (5) for the
 * partition without a leader; ControllerId the snapshot's controller when
 * it is a broker, else the lowest-numbered broker (the active controller is
 * no broker a client could send CreateTopics to). */
Test(cluster, metadata_from_the_snapshot, .init = cl_setup, .fini = teardown)
{
	stub_cluster_controller(3000);
	for (int16_t v = 1; v <= 12; v++) {
		struct md m;
		const char *names[] = {"cl"};
		metadata_roundtrip(v, names, NULL, 1, false, &m);
		cr_expect_eq(m.nbrokers, 3, "v%d brokers", v);
		cr_expect_eq(m.controller, 1, "v%d ControllerId %d", v, m.controller);
		const struct md_topic *t = md_find(&m, "cl");
		cr_assert_not_null(t);
		cr_assert_eq(t->nparts, 3);
		cr_expect(t->p[0].err == 0 && t->p[0].leader == 1);
		cr_expect(t->p[1].err == 0 && t->p[1].leader == 2 && t->p[1].replica0 == 2 && t->p[1].nisr == 1);
		cr_expect_eq(t->p[2].err, 5, "v%d leaderless partition: %d", v, t->p[2].err);
		cr_expect(t->p[2].leader == -1 && t->p[2].replica0 == 3 && t->p[2].nisr == 0);
	}
	stub_cluster_controller(2);
	struct md m;
	metadata_roundtrip(12, NULL, NULL, -1, false, &m);
	cr_expect_eq(m.controller, 2);
}

/* DescribeCluster v0-v1 (endpoint type brokers): controller id and brokers. */
static void describe_cluster_roundtrip(int16_t v, int32_t *controller, int32_t *nbrokers, int32_t *last_port)
{
	struct rq q;
	rq_start(&q, 60, v);
	kwr_bool(&q.w, false);
	if (v >= 1)
		kwr_i8(&q.w, 1);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 60, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_expect_eq(krd_i16(&s.r), 0);
	rs_str(&s, NULL, 0, true);
	if (v >= 1)
		cr_expect_eq(krd_i8(&s.r), 1);
	rs_str(&s, NULL, 0, false);
	*controller = krd_i32(&s.r);
	*nbrokers = rs_arr(&s, false);
	for (int32_t i = 0; i < *nbrokers; i++) {
		(void)krd_i32(&s.r);
		rs_str(&s, NULL, 0, false);
		*last_port = krd_i32(&s.r);
		rs_str(&s, NULL, 0, true);
		rs_tags(&s);
	}
	(void)krd_i32(&s.r);
	rs_tags(&s);
	rs_end(&s);
}

/* Proves DescribeCluster v0-v1 lists the snapshot's brokers and its
 * controller (when a broker), and that a single-node broker names itself. */
Test(cluster, describe_cluster_from_the_snapshot, .init = cl_setup, .fini = teardown)
{
	stub_cluster_controller(3);
	for (int16_t v = 0; v <= 1; v++) {
		int32_t controller, n, port = 0;
		describe_cluster_roundtrip(v, &controller, &n, &port);
		cr_expect_eq(controller, 3, "v%d", v);
		cr_expect_eq(n, 3);
		cr_expect_eq(port, 9094);
	}
}

Test(cluster, describe_cluster_single_node, .init = setup, .fini = teardown)
{
	int32_t controller, n, port = 0;
	describe_cluster_roundtrip(1, &controller, &n, &port);
	cr_expect_eq(controller, 1, "a single node is its own controller");
	cr_expect_eq(n, 1);
	cr_expect_eq(port, 9092);
}

/* FindCoordinator v0-v3 for one group: error, node, host, port. */
static void fc_single(int16_t v, const char *group, int16_t *err, int32_t *node, char host[64], int32_t *port)
{
	struct rq q;
	rq_start(&q, 10, v);
	rq_str(&q, group);
	if (v >= 1)
		kwr_i8(&q.w, 0);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 10, v, q.corr);
	if (v >= 1)
		cr_expect_eq(krd_i32(&s.r), 0);
	*err = krd_i16(&s.r);
	if (v >= 1)
		rs_str(&s, NULL, 0, true);
	*node = krd_i32(&s.r);
	rs_str(&s, host, 64, false);
	*port = krd_i32(&s.r);
	rs_tags(&s);
	rs_end(&s);
}

/* __consumer_offsets exists (the first FindCoordinator creates it, as
 * Kafka does), then the cluster view begins with every one of its
 * partitions led by leader. */
static void offsets_led_by(int32_t leader)
{
	int16_t err;
	int32_t node, port;
	char host[64];
	fc_single(3, "warm-up", &err, &node, host, &port);
	cr_assert_eq(err, 0);
	cr_assert(topic_id(SLUICE_OFFSETS_TOPIC_NAME, NULL, NULL), "__consumer_offsets created");
	stub_cluster_begin();
	stub_cluster_brokers(cl_brokers, 3);
	cl_partition(SLUICE_OFFSETS_TOPIC_NAME, -1, leader, 0, leader >= 0 ? leader : 3);
}

/* Proves FindCoordinator v0-v4 names the leader of the group's
 * __consumer_offsets partition with its endpoint from the snapshot (broker
 * 2 at 10.0.0.2:9093), and COORDINATOR_NOT_AVAILABLE (15) with node -1,
 * host "" and port -1 while that partition has no leader. */
Test(cluster, find_coordinator_names_the_partition_leader, .init = setup, .fini = teardown)
{
	offsets_led_by(2);
	for (int pass = 0; pass < 2; pass++) {
		bool led = pass == 0;
		for (int16_t v = 0; v <= 3; v++) {
			int16_t err;
			int32_t node, port;
			char host[64];
			fc_single(v, "group-1", &err, &node, host, &port);
			cr_expect_eq(err, led ? 0 : 15, "v%d: %d", v, err);
			cr_expect_eq(node, led ? 2 : -1, "v%d node %d", v, node);
			cr_expect_str_eq(host, led ? "10.0.0.2" : "");
			cr_expect_eq(port, led ? 9093 : -1);
		}
		struct rq q;
		rq_start(&q, 10, 4);
		kwr_i8(&q.w, 0);
		rq_arr(&q, 2);
		rq_str(&q, "group-a");
		rq_str(&q, "group-b");
		rq_tags(&q);
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 10, 4, q.corr);
		cr_expect_eq(krd_i32(&s.r), 0);
		cr_assert_eq(rs_arr(&s, false), 2);
		for (int i = 0; i < 2; i++) {
			rs_str(&s, NULL, 0, false);
			cr_expect_eq(krd_i32(&s.r), led ? 2 : -1);
			rs_str(&s, NULL, 0, false);
			cr_expect_eq(krd_i32(&s.r), led ? 9093 : -1);
			cr_expect_eq(krd_i16(&s.r), led ? 0 : 15);
			rs_str(&s, NULL, 0, true);
			rs_tags(&s);
		}
		rs_tags(&s);
		rs_end(&s);
		cl_partition(SLUICE_OFFSETS_TOPIC_NAME, -1, -1, 1, 2);
	}
}

/* ---- group requests for groups another broker coordinates ------------------------------------ */

/* The header fields every group answer starts with, then the error. */
static int16_t group_heartbeat(int16_t v)
{
	struct rq q;
	rq_start(&q, 12, v);
	rq_str(&q, "g");
	kwr_i32(&q.w, 1);
	rq_str(&q, "m-1");
	if (v >= 3)
		rq_str(&q, NULL);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 12, v, q.corr);
	if (v >= 1)
		cr_expect_eq(krd_i32(&s.r), 0);
	int16_t err = krd_i16(&s.r);
	rs_tags(&s);
	rs_end(&s);
	return err;
}

static int16_t group_join_v5(char member[64])
{
	struct rq q;
	rq_start(&q, 11, 5);
	rq_str(&q, "g");
	kwr_i32(&q.w, 10000);
	kwr_i32(&q.w, 10000);
	rq_str(&q, "m-7");
	rq_str(&q, NULL);
	rq_str(&q, "consumer");
	rq_arr(&q, 1);
	rq_str(&q, "range");
	kwr_bytes(&q.w, false, (const uint8_t *)"x", 1);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 11, 5, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	int16_t err = krd_i16(&s.r);
	cr_expect_eq(krd_i32(&s.r), -1, "GenerationId");
	rs_str(&s, NULL, 0, false); /* ProtocolName */
	rs_str(&s, NULL, 0, false); /* Leader */
	rs_str(&s, member, 64, false);
	cr_expect_eq(rs_arr(&s, false), 0);
	rs_end(&s);
	return err;
}

static int16_t group_sync_v3(void)
{
	struct rq q;
	rq_start(&q, 14, 3);
	rq_str(&q, "g");
	kwr_i32(&q.w, 1);
	rq_str(&q, "m-1");
	rq_str(&q, NULL);
	rq_arr(&q, 0);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 14, 3, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	int16_t err = krd_i16(&s.r);
	const uint8_t *a;
	cr_expect_eq(krd_bytes(&s.r, false, &a), 0, "empty assignment");
	rs_end(&s);
	return err;
}

static int16_t group_leave_v3(void)
{
	struct rq q;
	rq_start(&q, 13, 3);
	rq_str(&q, "g");
	rq_arr(&q, 1);
	rq_str(&q, "m-1");
	rq_str(&q, NULL);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 13, 3, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	int16_t err = krd_i16(&s.r);
	cr_expect_eq(rs_arr(&s, false), 0, "no member answered");
	rs_end(&s);
	return err;
}

/* OffsetCommit v8: two partitions of one topic; both errors must match. */
static int16_t group_commit_v8(void)
{
	struct rq q;
	rq_start(&q, 8, 8);
	rq_str(&q, "g");
	kwr_i32(&q.w, -1);
	rq_str(&q, "");
	rq_str(&q, NULL);
	rq_arr(&q, 1);
	rq_str(&q, "t");
	rq_arr(&q, 2);
	for (int32_t p = 0; p < 2; p++) {
		kwr_i32(&q.w, p);
		kwr_i64(&q.w, 10);
		kwr_i32(&q.w, -1);
		rq_str(&q, "");
		rq_tags(&q);
	}
	rq_tags(&q);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 8, 8, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 1);
	char name[16];
	rs_str(&s, name, sizeof name, false);
	cr_expect_str_eq(name, "t");
	cr_assert_eq(rs_arr(&s, false), 2);
	int16_t err[2];
	for (int32_t p = 0; p < 2; p++) {
		cr_expect_eq(krd_i32(&s.r), p);
		err[p] = krd_i16(&s.r);
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_tags(&s);
	rs_end(&s);
	cr_expect_eq(err[0], err[1]);
	return err[0];
}

/* OffsetFetch v7 (one group, the group's error at the end) or v8 (groups). */
static int16_t group_offset_fetch(int16_t v)
{
	struct rq q;
	rq_start(&q, 9, v);
	if (v >= 8)
		rq_arr(&q, 1);
	rq_str(&q, "g");
	rq_arr(&q, 1);
	rq_str(&q, "t");
	rq_arr(&q, 1);
	kwr_i32(&q.w, 0);
	rq_tags(&q);
	if (v >= 8)
		rq_tags(&q);
	kwr_bool(&q.w, false);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 9, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	int16_t err;
	if (v >= 8) {
		cr_assert_eq(rs_arr(&s, false), 1);
		char g[8];
		rs_str(&s, g, sizeof g, false);
		cr_expect_str_eq(g, "g");
		cr_expect_eq(rs_arr(&s, false), 0);
		err = krd_i16(&s.r);
		rs_tags(&s);
	} else {
		cr_expect_eq(rs_arr(&s, false), 0);
		err = krd_i16(&s.r);
	}
	rs_tags(&s);
	rs_end(&s);
	return err;
}

/* DescribeGroups v5 or DeleteGroups v2, two groups: the first one's error. */
static int16_t group_multi(int16_t key, int16_t v)
{
	struct rq q;
	rq_start(&q, key, v);
	rq_arr(&q, 2);
	rq_str(&q, "g");
	rq_str(&q, "h");
	if (key == 15)
		kwr_bool(&q.w, false);
	rq_tags(&q);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, key, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_assert_eq(rs_arr(&s, false), 2);
	int16_t first = 0;
	for (int i = 0; i < 2; i++) {
		char g[8], state[8];
		int16_t err = 0;
		if (key == 15) {
			err = krd_i16(&s.r);
			rs_str(&s, g, sizeof g, false);
			rs_str(&s, state, sizeof state, false);
			cr_expect_str_eq(state, "");
			rs_str(&s, NULL, 0, false);
			rs_str(&s, NULL, 0, false);
			cr_expect_eq(rs_arr(&s, false), 0);
			(void)krd_i32(&s.r); /* AuthorizedOperations */
		} else {
			rs_str(&s, g, sizeof g, false);
			err = krd_i16(&s.r);
		}
		cr_expect_str_eq(g, i == 0 ? "g" : "h");
		rs_tags(&s);
		if (i == 0)
			first = err;
		else
			cr_expect_eq(err, first);
	}
	rs_tags(&s);
	rs_end(&s);
	return first;
}

static int16_t group_offset_delete(void)
{
	struct rq q;
	rq_start(&q, 47, 0);
	rq_str(&q, "g");
	rq_arr(&q, 1);
	rq_str(&q, "t");
	rq_arr(&q, 1);
	kwr_i32(&q.w, 0);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 47, 0, q.corr);
	int16_t err = krd_i16(&s.r);
	cr_expect_eq(krd_i32(&s.r), 0);
	cr_expect_eq(rs_arr(&s, false), 0);
	rs_end(&s);
	return err;
}

/* Proves every group API, for a group whose __consumer_offsets partition
 * broker 2 leads, is answered at once by this broker with NOT_COORDINATOR
 * (16) in the shape Kafka answers it (Heartbeat v0/v4, JoinGroup v5 with the
 * member id echoed, SyncGroup v3, LeaveGroup v3, OffsetCommit v8 per
 * partition, OffsetFetch v7 and v8, DescribeGroups v5 and DeleteGroups v2
 * per group, OffsetDelete v0), nothing reaching the coordinator; and with
 * COORDINATOR_NOT_AVAILABLE (15) while the partition has no leader. */
Test(cluster, group_requests_for_another_coordinator, .init = setup, .fini = teardown)
{
	offsets_led_by(2);
	int64_t ops_before = stub_store_ops();
	char member[64];
	cr_expect_eq(group_heartbeat(0), 16);
	cr_expect_eq(group_heartbeat(4), 16);
	cr_expect_eq(group_join_v5(member), 16);
	cr_expect_str_eq(member, "m-7");
	cr_expect_eq(group_sync_v3(), 16);
	cr_expect_eq(group_leave_v3(), 16);
	cr_expect_eq(group_commit_v8(), 16);
	cr_expect_eq(group_offset_fetch(7), 16);
	cr_expect_eq(group_offset_fetch(8), 16);
	cr_expect_eq(group_multi(15, 5), 16);
	cr_expect_eq(group_multi(42, 2), 16);
	cr_expect_eq(group_offset_delete(), 16);
	cr_expect_eq(stub_store_ops(), ops_before, "no group op reached the coordinator");
	cl_partition(SLUICE_OFFSETS_TOPIC_NAME, -1, -1, 1, 2);
	cr_expect_eq(group_heartbeat(4), 15);
	cr_expect_eq(group_commit_v8(), 15);
}

/* ---- DescribeQuorum ------------------------------------------------------------------------- */

static void enc_describe_quorum(struct rq *q, int16_t v, const char *topic, int32_t partition)
{
	rq_start(q, 55, v);
	rq_arr(q, 1);
	rq_str(q, topic);
	rq_arr(q, 1);
	kwr_i32(&q->w, partition);
	rq_tags(q);
	rq_tags(q);
	rq_tags(q);
}

struct dq_res {
	int16_t err, perr;
	int32_t leader, epoch, voters, voter, nodes, node_port;
	int64_t hw;
	char listener[32], host[64];
};

static void dec_describe_quorum(struct rs *s, struct dq_res *o)
{
	int16_t v = s->ver;
	memset(o, 0, sizeof *o);
	o->err = krd_i16(&s->r);
	if (v >= 2)
		rs_str(s, NULL, 0, true);
	cr_assert_eq(rs_arr(s, false), 1);
	char topic[32];
	rs_str(s, topic, sizeof topic, false);
	cr_expect_str_eq(topic, "__cluster_metadata");
	cr_assert_eq(rs_arr(s, false), 1);
	cr_expect_eq(krd_i32(&s->r), 0);
	o->perr = krd_i16(&s->r);
	if (v >= 2)
		rs_str(s, NULL, 0, true);
	o->leader = krd_i32(&s->r);
	o->epoch = krd_i32(&s->r);
	o->hw = krd_i64(&s->r);
	o->voters = rs_arr(s, false);
	for (int32_t i = 0; i < o->voters; i++) {
		o->voter = krd_i32(&s->r);
		if (v >= 2) {
			uint8_t dir[16];
			krd_uuid(&s->r, dir);
		}
		cr_expect_eq(krd_i64(&s->r), o->hw, "the leader's log end is the high watermark");
		if (v >= 1) {
			cr_expect_gt(krd_i64(&s->r), 0);
			cr_expect_gt(krd_i64(&s->r), 0);
		}
		rs_tags(s);
	}
	cr_expect_eq(rs_arr(s, false), 0, "no observers");
	rs_tags(s);
	rs_tags(s);
	if (v >= 2) {
		o->nodes = rs_arr(s, false);
		for (int32_t i = 0; i < o->nodes; i++) {
			(void)krd_i32(&s->r);
			cr_assert_eq(rs_arr(s, false), 1);
			rs_str(s, o->listener, sizeof o->listener, false);
			rs_str(s, o->host, sizeof o->host, false);
			o->node_port = (uint16_t)krd_i16(&s->r);
			rs_tags(s);
			rs_tags(s);
		}
	}
	rs_tags(s);
}

/* Proves a single-node broker advertises DescribeQuorum v0-v2 and answers
 * it as a quorum of one voter, itself: leader 1 at epoch 1, high watermark
 * the metadata version, one voter with timestamps (v1+), its endpoint in
 * Nodes (v2: PLAINTEXT 127.0.0.1:9092), which is what
 * kafka-metadata-quorum.sh --bootstrap-server describe prints; and that a
 * request for another topic or partition gets UNKNOWN_TOPIC_OR_PARTITION (3). */
Test(describe_quorum, single_node_is_a_quorum_of_one, .init = setup, .fini = teardown)
{
	struct rq q;
	enc_api_versions(&q, 3);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 18, 3, q.corr);
	struct av a;
	dec_api_versions(&s, &a);
	rs_end(&s);
	int16_t mn, mx;
	cr_assert(av_range(&a, 55, &mn, &mx), "DescribeQuorum advertised");
	cr_expect(mn == 0 && mx == 2);
	for (int16_t v = 0; v <= 2; v++) {
		enc_describe_quorum(&q, v, "__cluster_metadata", 0);
		cr_assert(rq_send(&q));
		rs_take(&s, 55, v, q.corr);
		struct dq_res o;
		dec_describe_quorum(&s, &o);
		rs_end(&s);
		cr_expect(o.err == 0 && o.perr == 0, "v%d", v);
		cr_expect(o.leader == 1 && o.epoch == 1 && o.hw >= 1);
		cr_expect(o.voters == 1 && o.voter == 1);
		if (v >= 2) {
			cr_expect_eq(o.nodes, 1);
			cr_expect_str_eq(o.listener, "PLAINTEXT");
			cr_expect_str_eq(o.host, "127.0.0.1");
			cr_expect_eq(o.node_port, 9092);
		}
		enc_describe_quorum(&q, v, "__cluster_metadata", 1);
		cr_assert(rq_send(&q));
		rs_take(&s, 55, v, q.corr);
		dec_describe_quorum(&s, &o);
		rs_end(&s);
		cr_expect(o.err == 0 && o.perr == 3 && o.voters == 0, "v%d wrong partition: %d", v, o.perr);
	}
}

/* Proves that in cluster mode DescribeQuorum is relayed: the controller is
 * given the request's body as it came (ApiKey 55, the client's version) and
 * the client gets the controller's response body as it is; when no
 * controller answers, the client gets the error (41) with a message and
 * empty lists. */
Test(describe_quorum, relayed_to_the_controller, .init = setup, .fini = teardown)
{
	stub_cluster_begin();
	/* The controller's answer: v2, error 0, one partition led by controller 9. */
	struct kwr c;
	kwr_init(&c, 128, 1 << 20);
	kwr_i16(&c, 0);
	kwr_cstr(&c, true, NULL);
	kwr_array(&c, true, 1);
	kwr_cstr(&c, true, "__cluster_metadata");
	kwr_array(&c, true, 1);
	kwr_i32(&c, 0);
	kwr_i16(&c, 0);
	kwr_cstr(&c, true, NULL);
	kwr_i32(&c, 9);
	kwr_i32(&c, 7);
	kwr_i64(&c, 1234);
	kwr_array(&c, true, 0);
	kwr_array(&c, true, 0);
	kwr_tags_empty(&c);
	kwr_tags_empty(&c);
	kwr_array(&c, true, 0);
	kwr_tags_empty(&c);
	stub_cluster_forward(0, c.buf, c.len);
	struct rq q;
	enc_describe_quorum(&q, 2, "__cluster_metadata", 0);
	uint8_t sent[256];
	size_t sent_len = q.w.len;
	memcpy(sent, q.w.buf, sent_len);
	cr_assert(rq_send(&q));
	uint8_t *buf;
	size_t len;
	cr_assert(stub_take_response(C, &buf, &len));
	cr_assert_eq(len, 4 + 4 + 1 + c.len, "size, correlation id, header tags, the controller's body: %zu", len);
	cr_expect_eq(memcmp(buf + 9, c.buf, c.len), 0, "relayed byte for byte");
	free(buf);
	size_t flen;
	int16_t key, ver;
	const uint8_t *fwd = stub_cluster_forwarded(&flen, &key, &ver);
	cr_assert_not_null(fwd);
	cr_expect(key == 55 && ver == 2);
	/* header v2: key, version, correlation id, client id "sluice-unit", empty tags */
	size_t header = 2 + 2 + 4 + 2 + strlen("sluice-unit") + 1;
	cr_assert_eq(flen, sent_len - header);
	cr_expect_eq(memcmp(fwd, sent + header, flen), 0, "the request's body, as it came");
	kwr_free(&c);

	stub_cluster_forward(41, NULL, 0);
	enc_describe_quorum(&q, 2, "__cluster_metadata", 0);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 55, 2, q.corr);
	cr_expect_eq(krd_i16(&s.r), 41);
	cr_expect(rs_str(&s, NULL, 0, true), "a message");
	cr_expect_eq(rs_arr(&s, false), 0);
	cr_expect_eq(rs_arr(&s, false), 0);
	rs_tags(&s);
	rs_end(&s);
}

static const char *const cluster_overrides[] = {
	"controller.quorum.voters", "9@127.0.0.1:1", "cluster.id", "unit-cluster", "process.roles", "broker", NULL,
};
static void setup_cluster_config(void) { setup_with(cluster_overrides); }

/* Proves that in cluster mode DescribeQuorum is neither advertised nor
 * served (the connection closes) by a backend that cannot relay it, and is
 * both once the backend forwards. */
Test(describe_quorum, cluster_mode_only_with_forward, .init = setup_cluster_config, .fini = teardown)
{
	for (int pass = 0; pass < 2; pass++) {
		struct rq q;
		enc_api_versions(&q, 3);
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 18, 3, q.corr);
		struct av a;
		dec_api_versions(&s, &a);
		rs_end(&s);
		int16_t mn, mx;
		cr_expect_eq(av_range(&a, 55, &mn, &mx), pass == 1, "pass %d", pass);
		enc_describe_quorum(&q, 1, "__cluster_metadata", 0);
		cr_expect_eq(rq_send(&q), pass == 1, "pass %d", pass);
		if (pass == 1) {
			uint8_t *buf;
			size_t len;
			cr_assert(stub_take_response(C, &buf, &len));
			free(buf);
		}
		reconnect();
		stub_cluster_begin();
		stub_cluster_forward(0, (const uint8_t *)"\0\0\0\0", 4);
	}
}

/* ---- configuration of cluster mode ------------------------------------------------------------ */

static int cfg_try(const char *const *kv, struct sluice_config *c, char *err, size_t errlen)
{
	sluice_config_defaults(c);
	for (; kv[0]; kv += 2)
		if (sluice_config_set(c, kv[0], kv[1], err, errlen) < 0)
			return -1;
	return sluice_config_finish(c, err, errlen);
}

/* Proves the keys of cluster mode: process.roles takes broker only (a
 * controller role names the separate sluice-controller binary), broker
 * alone needs controllers named, controller.quorum.voters needs cluster.id
 * (the error names it) and id@host:port entries, bootstrap servers host:port
 * ones; the defaults (heartbeat 2000 ms, session 9000 ms, start-up wait
 * 60000 ms) and the controllers' keys a shared file carries are accepted;
 * and without controllers the broker is in single-node mode. */
Test(config, cluster_keys)
{
	struct sluice_config c;
	char err[512] = "";
	sluice_log_set_level(SLUICE_LOG_ERROR);
	const char *none[] = {NULL};
	cr_assert_eq(cfg_try(none, &c, err, sizeof err), 0, "%s", err);
	cr_expect_not(sluice_config_cluster_mode(&c));
	cr_expect_eq(c.broker_heartbeat_interval_ms, 2000);
	cr_expect_eq(c.broker_session_timeout_ms, 9000);
	cr_expect_eq(c.controller_wait_ms, 60000);
	const char *roles[] = {"process.roles", "broker,controller", NULL};
	cr_expect_eq(cfg_try(roles, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "process.roles") && strstr(err, "sluice-controller"), "%s", err);
	const char *alone[] = {"process.roles", "broker", NULL};
	cr_expect_eq(cfg_try(alone, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "controller.quorum.voters"), "%s", err);
	const char *no_id[] = {"controller.quorum.voters", "1@127.0.0.1:9093", NULL};
	cr_expect_eq(cfg_try(no_id, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "cluster.id"), "%s", err);
	const char *bad[] = {"controller.quorum.voters", "1@127.0.0.1", "cluster.id", "x", NULL};
	cr_expect_eq(cfg_try(bad, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "controller.quorum.voters"), "%s", err);
	const char *bad_port[] = {"controller.quorum.voters", "1@h:1,2@h:70000", "cluster.id", "x", NULL};
	cr_expect_eq(cfg_try(bad_port, &c, err, sizeof err), -1);
	const char *ok[] = {"process.roles", "broker", "controller.quorum.voters", "1@127.0.0.1:9093, 2@[::1]:9095",
			    "cluster.id", "x", "broker.session.timeout.ms", "6000", "sluice.controller.raft.port.offset", "2",
			    "metadata.log.dir", "/tmp/m", "controller.listener.names", "CONTROLLER", NULL};
	cr_expect_eq(cfg_try(ok, &c, err, sizeof err), 0, "%s", err);
	cr_expect(sluice_config_cluster_mode(&c));
	const char *boot[] = {"controller.quorum.bootstrap.servers", "h1:9093,h2:9093", "cluster.id", "x", NULL};
	cr_expect_eq(cfg_try(boot, &c, err, sizeof err), 0, "%s", err);
	cr_expect(sluice_config_cluster_mode(&c));
	const char *boot_bad[] = {"controller.quorum.bootstrap.servers", "1@h1:9093", "cluster.id", "x", NULL};
	cr_expect_eq(cfg_try(boot_bad, &c, err, sizeof err), -1);
}

/* Proves replica.selector.class: unset by default (consumers read from
 * leaders), Kafka's RackAwareReplicaSelector accepted, any other class
 * refused at start naming the key. */
Test(config, replica_selector_class)
{
	struct sluice_config c;
	char err[512] = "";
	sluice_log_set_level(SLUICE_LOG_ERROR);
	const char *none[] = {NULL};
	cr_assert_eq(cfg_try(none, &c, err, sizeof err), 0, "%s", err);
	cr_expect_not(c.replica_selector_rack_aware);
	cr_expect_str_empty(c.replica_selector_class);
	const char *rack[] = {"replica.selector.class", "org.apache.kafka.common.replica.RackAwareReplicaSelector",
			      "broker.rack", "r1", NULL};
	cr_assert_eq(cfg_try(rack, &c, err, sizeof err), 0, "%s", err);
	cr_expect(c.replica_selector_rack_aware);
	cr_expect_str_eq(c.broker_rack, "r1");
	const char *other[] = {"replica.selector.class", "com.example.NearestSelector", NULL};
	cr_expect_eq(cfg_try(other, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "replica.selector.class") && strstr(err, "com.example.NearestSelector"), "%s", err);
}

/* ---- dynamic broker configs (cluster mode) ---------------------------------------------------- */

/* A dynamic configuration over this broker's file: the cluster-wide
 * defaults d[0..nd) and this broker's own o[0..no). */
static struct sluice_broker_config *dyn_config(const struct sluice_broker_dynamic *d, uint32_t nd,
					       const struct sluice_broker_dynamic *o, uint32_t no)
{
	struct sluice_broker_config *bc = sluice_broker_config_build(&BR->cfg, BR->cfg.node_id, d, nd, o, no);
	cr_assert_not_null(bc);
	return bc;
}

static const struct sluice_broker_dynamic dyn_defaults[] = {
	{"message.max.bytes", "3000"},
	{"log.retention.ms", "5000"},
	{"num.io.threads", "16"},
};
static const struct sluice_broker_dynamic dyn_own[] = {
	{"message.max.bytes", "2000"},
	{"ssl.keystore.password", "secret"},
};

/* This broker (node 1) in cluster mode, leading every partition of "dyn"
 * and of "dyn-big" (max.message.bytes=100000); the dynamic configuration:
 * the cluster-wide message.max.bytes=3000, log.retention.ms=5000 and
 * num.io.threads=16, its own message.max.bytes=2000 and a keystore
 * password. */
static void dyn_setup(void)
{
	setup_with(cluster_overrides);
	create_topic("dyn", 1);
	struct sluice_topic_spec spec = {.name = "dyn-big", .name_len = 7, .partitions = 1, .replication_factor = -1,
					 .config_n = 1};
	snprintf(spec.configs[0].key, sizeof spec.configs[0].key, "max.message.bytes");
	snprintf(spec.configs[0].value, sizeof spec.configs[0].value, "100000");
	char msg[256];
	cr_assert_eq(BR->meta.ops->create_topic(BR->meta.self, &spec, false, msg, sizeof msg, NULL), 0, "%s", msg);
	stub_cluster_begin();
	stub_cluster_brokers(cl_brokers, 3);
	cl_partition("dyn", -1, 1, 0, 1);
	cl_partition("dyn-big", -1, 1, 0, 1);
	stub_cluster_broker_config(dyn_config(dyn_defaults, 3, dyn_own, 2));
}

static int dc_syn_find(const struct dc_entry *e, int8_t source, const char *name)
{
	for (int k = 0; k < e->nsyn && k < DC_SYN_KEPT; k++)
		if (e->syn[k].source == source && !strcmp(e->syn[k].name, name))
			return k;
	return -1;
}

/* Proves DescribeConfigs BROKER in cluster mode, as Kafka's ConfigHelper
 * answers it: for this broker's id every key of server.properties with the
 * value in effect and its source (its own override DYNAMIC_BROKER_CONFIG 2,
 * the cluster-wide one DYNAMIC_DEFAULT_BROKER_CONFIG 3, the file's
 * STATIC_BROKER_CONFIG 4, else DEFAULT_CONFIG 5), the synonyms in that order
 * when asked (log.retention.ms followed by .minutes and .hours), the keys
 * Kafka changes at run time writable and the rest read-only, dynamic keys
 * the broker has no property of listed too, a password null and sensitive;
 * for the empty name only the cluster-wide overrides; another broker's id
 * refused (42). */
Test(dynamic_configs, describe_with_sources_and_synonyms, .init = dyn_setup, .fini = teardown)
{
	for (int16_t v = 1; v <= 4; v += 3) {
		struct dc_res o;
		describe_configs_roundtrip(v, 4, "1", NULL, -1, true, &o);
		cr_assert_eq(o.err, 0, "v%d: %d", v, o.err);
		const struct dc_entry *e = dc_find(&o, "message.max.bytes");
		cr_assert_not_null(e);
		cr_expect_str_eq(e->value, "2000");
		cr_expect_eq(e->source, 2);
		cr_expect(!e->read_only);
		cr_assert_eq(e->nsyn, 3, "v%d: own, default, DEFAULT_CONFIG: %d", v, e->nsyn);
		cr_expect(dc_syn_find(e, 2, "message.max.bytes") == 0 && !strcmp(e->syn[0].value, "2000"));
		cr_expect(dc_syn_find(e, 3, "message.max.bytes") == 1 && !strcmp(e->syn[1].value, "3000"));
		cr_expect(dc_syn_find(e, 5, "message.max.bytes") == 2 && !strcmp(e->syn[2].value, "1048588"));
		e = dc_find(&o, "log.retention.ms");
		cr_assert_not_null(e);
		cr_expect_str_eq(e->value, "5000");
		cr_expect_eq(e->source, 3);
		cr_expect_eq(dc_syn_find(e, 3, "log.retention.ms"), 0);
		cr_expect_gt(dc_syn_find(e, 5, "log.retention.hours"), dc_syn_find(e, 5, "log.retention.minutes"));
		cr_expect_gt(dc_syn_find(e, 5, "log.retention.minutes"), 0);
		e = dc_find(&o, "controller.quorum.voters");
		cr_assert_not_null(e);
		cr_expect_eq(e->source, 4, "set in the file");
		cr_expect(e->read_only);
		cr_expect(dc_syn_find(e, 4, "controller.quorum.voters") == 0 && !strcmp(e->syn[0].value, "9@127.0.0.1:1"));
		e = dc_find(&o, "node.id");
		cr_assert_not_null(e);
		cr_expect(e->read_only && e->source == 5);
		e = dc_find(&o, "num.io.threads");
		cr_assert_not_null(e, "a dynamic key Sluice has no property of");
		cr_expect(!strcmp(e->value, "16") && e->source == 3 && !e->read_only);
		e = dc_find(&o, "ssl.keystore.password");
		cr_assert_not_null(e);
		cr_expect(e->value_null && e->sensitive && e->source == 2);
		cr_expect(e->nsyn == 1 && e->syn[0].value_null, "a password's synonyms are null too");
		if (v >= 3)
			cr_expect_eq(e->type, 8, "PASSWORD");

		const char *keys[] = {"message.max.bytes", "no.such.key"};
		describe_configs_roundtrip(v, 4, "1", keys, 2, false, &o);
		cr_expect(o.n == 1 && o.e[0].nsyn == 0, "v%d: a key filter, no synonyms unless asked", v);

		describe_configs_roundtrip(v, 4, "", NULL, -1, true, &o);
		cr_assert_eq(o.err, 0);
		cr_assert_eq(o.n, 3, "v%d: the cluster-wide overrides only: %d", v, o.n);
		e = dc_find(&o, "message.max.bytes");
		cr_assert_not_null(e);
		cr_expect(!strcmp(e->value, "3000") && e->source == 3 && e->nsyn == 1 && e->syn[0].source == 3);
		cr_expect_not_null(dc_find(&o, "num.io.threads"));

		describe_configs_roundtrip(v, 4, "2", NULL, -1, false, &o);
		cr_expect_eq(o.err, 42);
	}
}

static int16_t produce_one(const char *topic, size_t value_len)
{
	size_t len = 0;
	uint8_t *b = tb_simple(1, wall_now_ms(), value_len, &len);
	struct ptopic_req t = {topic, 1, {{0, b, (int32_t)len}}};
	struct pr o;
	produce_roundtrip(9, 1, &t, 1, &o);
	free(b);
	cr_assert(o.ntopics == 1 && o.t[0].np == 1);
	return o.t[0].p[0].err;
}

/* Proves that a produce is held to the message.max.bytes in effect: this
 * broker's own override (2000) over the cluster-wide one, a topic's
 * max.message.bytes above both, and a new dynamic configuration at once
 * (the next request's snapshot), without a restart; back to the file's
 * value when no override is left. */
Test(dynamic_configs, produce_limit_follows_the_dynamic_value, .init = dyn_setup, .fini = teardown)
{
	cr_expect_eq(produce_one("dyn", 1000), 0);
	cr_expect_eq(produce_one("dyn", 2500), 10, "MESSAGE_TOO_LARGE over this broker's 2000");
	cr_expect_eq(produce_one("dyn-big", 2500), 0, "the topic's own limit comes first");
	stub_cluster_broker_config(dyn_config(dyn_defaults, 3, NULL, 0));
	cr_expect_eq(produce_one("dyn", 2500), 0, "the cluster-wide 3000 now");
	cr_expect_eq(produce_one("dyn", 3500), 10);
	stub_cluster_broker_config(NULL);
	cr_expect_eq(produce_one("dyn", 3500), 0, "server.properties' 1048588");
}

/* An (Incremental)AlterConfigs request: resources (type, name, key, value). */
struct ac_res {
	int8_t type;
	const char *name, *key, *value;
	int8_t op; /* IncrementalAlterConfigs' operation: 0 SET (the default), 1 DELETE, 2 APPEND, 3 SUBTRACT */
};

static void enc_alter(struct rq *q, int16_t key, int16_t v, const struct ac_res *res, int n)
{
	rq_start(q, key, v);
	rq_arr(q, n);
	for (int i = 0; i < n; i++) {
		kwr_i8(&q->w, res[i].type);
		rq_str(q, res[i].name);
		rq_arr(q, 1);
		rq_str(q, res[i].key);
		if (key == 44)
			kwr_i8(&q->w, res[i].op);
		rq_str(q, res[i].value);
		rq_tags(q);
		rq_tags(q);
	}
	kwr_bool(&q->w, false);
	rq_tags(q);
}

struct ac_out {
	int n;
	int16_t err[4];
	char msg[4][256];
	int8_t type[4];
	char name[4][64];
};

static void alter_roundtrip(int16_t key, int16_t v, const struct ac_res *res, int n, struct ac_out *o)
{
	struct rq q;
	enc_alter(&q, key, v, res, n);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, key, v, q.corr);
	cr_expect_eq(krd_i32(&s.r), 0);
	memset(o, 0, sizeof *o);
	o->n = rs_arr(&s, false);
	cr_assert_leq(o->n, 4);
	for (int i = 0; i < o->n; i++) {
		o->err[i] = krd_i16(&s.r);
		rs_str(&s, o->msg[i], sizeof o->msg[i], true);
		o->type[i] = krd_i8(&s.r);
		rs_str(&s, o->name[i], sizeof o->name[i], false);
		rs_tags(&s);
	}
	rs_tags(&s);
	rs_end(&s);
}

/* The controller's answer to a relayed request: flexible, entries
 * (error, message, type, name), then SluiceMetadataOffset. */
static size_t controller_answer(uint8_t *out, size_t cap, const struct ac_res *res, const int16_t *errs, int n)
{
	struct kwr w;
	kwr_init(&w, 128, cap);
	kwr_i32(&w, 0);
	kwr_array(&w, true, n);
	for (int i = 0; i < n; i++) {
		kwr_i16(&w, errs[i]);
		kwr_cstr(&w, true, errs[i] ? "refused by the controller" : NULL);
		kwr_i8(&w, res[i].type);
		kwr_cstr(&w, true, res[i].name);
		kwr_tags_empty(&w);
	}
	kwr_uvarint(&w, 1); /* tag 1000: SluiceMetadataOffset, not the client's */
	kwr_uvarint(&w, 1000);
	kwr_uvarint(&w, 8);
	kwr_i64(&w, 42);
	cr_assert(!w.err && w.len <= cap);
	size_t len = w.len;
	memcpy(out, w.buf, len);
	kwr_free(&w);
	return len;
}

/* Proves that in cluster mode an (Incremental)AlterConfigs naming a BROKER
 * resource is relayed to the controller, TOPIC resources with it, at the
 * flexible version whatever the client's (v0 rewritten as v1, AlterConfigs
 * v0 as v2), the BROKER_LOGGER resource applied here and left out; the
 * answers merged in request order, the controller's message kept and its
 * tag 1000 not passed on; no controller: the relayed resources get the
 * error; an answer that does not match: UNKNOWN_SERVER_ERROR (-1). A
 * request without a BROKER resource stays on the broker's own path. */
Test(dynamic_configs, broker_resources_are_relayed_to_the_controller, .init = dyn_setup, .fini = teardown)
{
	const struct ac_res req[] = {
		{4, "", "message.max.bytes", "3000"},
		{8, "1", "root", "ERROR"},
		{2, "dyn", "retention.ms", "-5"},
	};
	const struct ac_res fwd[] = {req[0], req[2]};
	static const int16_t errs[] = {0, 40};
	uint8_t answer[512];
	size_t alen = controller_answer(answer, sizeof answer, fwd, errs, 2);
	stub_cluster_forward(0, answer, alen);
	for (int16_t key = 33; key <= 44; key += 11) {
		for (int16_t v = 0; v <= (key == 44 ? 1 : 2); v++) {
			struct ac_out o;
			alter_roundtrip(key, v, req, 3, &o);
			cr_assert_eq(o.n, 3);
			cr_expect(o.err[0] == 0 && o.type[0] == 4 && !strcmp(o.name[0], ""), "key %d v%d: %d %s / %d %s / %d %s", key, v,
				  o.err[0], o.msg[0], o.err[1], o.msg[1], o.err[2], o.msg[2]);
			cr_expect(o.err[1] == 0 && o.type[1] == 8 && !strcmp(o.name[1], "1"));
			cr_expect(o.err[2] == 40 && !strcmp(o.msg[2], "refused by the controller") && !strcmp(o.name[2], "dyn"));
			size_t flen;
			int16_t fk, fv;
			const uint8_t *body = stub_cluster_forwarded(&flen, &fk, &fv);
			cr_assert_not_null(body);
			cr_expect(fk == key && fv == (key == 44 ? 1 : 2), "relayed as key %d v%d", fk, fv);
			struct rq want;
			enc_alter(&want, key, key == 44 ? 1 : 2, fwd, 2);
			size_t header = 2 + 2 + 4 + 2 + strlen("sluice-unit") + 1;
			cr_assert_eq(flen, want.w.len - header, "key %d v%d: %zu bytes relayed", key, v, flen);
			cr_expect_eq(memcmp(body, want.w.buf + header, flen), 0, "the BROKER and TOPIC resources, flexible");
			kwr_free(&want.w);
		}
	}
	cr_expect_eq(sluice_log_level_current, SLUICE_LOG_ERROR, "the logger resource applied here");

	stub_cluster_forward(KERR_REQUEST_TIMED_OUT, NULL, 0);
	struct ac_out o;
	alter_roundtrip(44, 1, req, 3, &o);
	cr_expect(o.err[0] == KERR_REQUEST_TIMED_OUT && o.err[1] == 0 && o.err[2] == KERR_REQUEST_TIMED_OUT);
	cr_expect(strlen(o.msg[0]) > 0);
	const int16_t one[] = {0};
	alen = controller_answer(answer, sizeof answer, fwd, one, 1); /* one entry for two */
	stub_cluster_forward(0, answer, alen);
	alter_roundtrip(44, 1, req, 3, &o);
	cr_expect(o.err[0] == KERR_UNKNOWN_SERVER_ERROR && o.err[2] == KERR_UNKNOWN_SERVER_ERROR && o.err[1] == 0);

	/* no BROKER resource: the topic's change goes through the broker's
	 * metadata (a relay would fail: the forward answers an error now) */
	const struct ac_res topic_only[] = {{2, "dyn", "retention.ms", "60000"}};
	stub_cluster_forward(KERR_REQUEST_TIMED_OUT, NULL, 0);
	alter_roundtrip(44, 1, topic_only, 1, &o);
	cr_expect_eq(o.err[0], 0, "%s", o.msg[0]);
}

/* Proves that a single-node broker keeps its broker configs read-only:
 * AlterConfigs and IncrementalAlterConfigs on BROKER answer INVALID_REQUEST
 * and nothing is relayed. */
Test(dynamic_configs, single_node_broker_configs_are_read_only, .init = setup, .fini = teardown)
{
	const struct ac_res req[] = {{4, "", "message.max.bytes", "3000"}};
	struct ac_out o;
	alter_roundtrip(44, 1, req, 1, &o);
	cr_expect_eq(o.err[0], KERR_INVALID_REQUEST);
	cr_expect(strstr(o.msg[0], "read-only"), "%s", o.msg[0]);
	alter_roundtrip(33, 0, req, 1, &o);
	cr_expect_eq(o.err[0], KERR_INVALID_REQUEST);
}

/* ---- DescribeLogDirs ---------------------------------------------------------------------------- */

#define LDT_DIRS_MAX 4
#define LDT_TOPICS_MAX 8
#define LDT_PARTS_MAX 8

struct ldt_req {
	const char *topic;
	int np;
	int32_t p[LDT_PARTS_MAX];
};
struct ldt_part {
	int32_t index;
	int64_t size, lag;
	bool future;
};
struct ldt_topic {
	char name[64];
	int np;
	struct ldt_part p[LDT_PARTS_MAX];
};
struct ldt_dir {
	int16_t err;
	char path[1024];
	int nt;
	struct ldt_topic t[LDT_TOPICS_MAX];
	int64_t total, usable;
};
struct ldt_out {
	int16_t err;
	int nd;
	struct ldt_dir d[LDT_DIRS_MAX];
};

/* A DescribeLogDirs request: nt topics (-1: Topics null). */
static void enc_log_dirs(struct rq *q, int16_t v, const struct ldt_req *t, int nt)
{
	rq_start(q, 35, v);
	rq_arr(q, nt);
	for (int i = 0; i < nt; i++) {
		rq_str(q, t[i].topic);
		rq_arr(q, t[i].np);
		for (int k = 0; k < t[i].np; k++)
			kwr_i32(&q->w, t[i].p[k]);
		rq_tags(q);
	}
	rq_tags(q);
}

static void dec_log_dirs(struct rs *s, struct ldt_out *o)
{
	memset(o, 0, sizeof *o);
	cr_expect_eq(krd_i32(&s->r), 0, "ThrottleTimeMs");
	o->err = s->ver >= 3 ? krd_i16(&s->r) : 0;
	o->nd = rs_arr(s, false);
	cr_assert_leq(o->nd, LDT_DIRS_MAX);
	for (int i = 0; i < o->nd; i++) {
		struct ldt_dir *d = &o->d[i];
		d->err = krd_i16(&s->r);
		rs_str(s, d->path, sizeof d->path, false);
		d->nt = rs_arr(s, false);
		cr_assert_leq(d->nt, LDT_TOPICS_MAX);
		for (int k = 0; k < d->nt; k++) {
			struct ldt_topic *t = &d->t[k];
			rs_str(s, t->name, sizeof t->name, false);
			t->np = rs_arr(s, false);
			cr_assert_leq(t->np, LDT_PARTS_MAX);
			for (int j = 0; j < t->np; j++) {
				t->p[j].index = krd_i32(&s->r);
				t->p[j].size = krd_i64(&s->r);
				t->p[j].lag = krd_i64(&s->r);
				t->p[j].future = krd_bool(&s->r);
				rs_tags(s);
			}
			rs_tags(s);
		}
		d->total = d->usable = -2; /* absent below v4 */
		if (s->ver >= 4) {
			d->total = krd_i64(&s->r);
			d->usable = krd_i64(&s->r);
		}
		rs_tags(s);
	}
	rs_tags(s);
}

static void log_dirs_roundtrip(int16_t v, const struct ldt_req *t, int nt, struct ldt_out *o)
{
	struct rq q;
	enc_log_dirs(&q, v, t, nt);
	cr_assert(rq_send(&q), "DescribeLogDirs v%d refused", v);
	struct rs s;
	rs_take(&s, 35, v, q.corr);
	dec_log_dirs(&s, o);
	rs_end(&s);
}

/* One batch of nrec records to topic-partition; its stored bytes. */
static int64_t ldt_produce(const char *topic, int32_t partition, int nrec)
{
	size_t len = 0;
	uint8_t *b = now_batch(nrec, &len);
	struct ptopic_req t = {topic, 1, {{partition, b, (int32_t)len}}};
	struct pr o;
	produce_roundtrip(7, -1, &t, 1, &o);
	cr_assert_eq(o.t[0].p[0].err, 0);
	free(b);
	return (int64_t)len;
}

/* Topics "la" (3 partitions: 0 and 2 written) and "lb" (2: 1 written), and
 * "lc" (never written); returns the bytes of la-0, la-2 and lb-1. */
static void ldt_fill(int64_t sizes[3])
{
	create_topic("la", 3);
	create_topic("lb", 2);
	create_topic("lc", 1);
	sizes[0] = ldt_produce("la", 0, 3);
	sizes[1] = ldt_produce("la", 2, 2);
	sizes[1] += ldt_produce("la", 2, 5);
	sizes[2] = ldt_produce("lb", 1, 1);
}

/* Proves DescribeLogDirs v1-v4 (flexible from v2): Topics null describes
 * the one data directory (its absolute path, error 0) with every partition
 * holding a log there (topics in name order, partitions ascending): its
 * stored bytes as PartitionSize, OffsetLag 0, IsFutureKey false; a
 * partition never written (no log) is left out; the top-level ErrorCode
 * from v3, the volume's TotalBytes and UsableBytes from v4. Named
 * partitions: each once however often named, unknown topics and partitions
 * left out, a topic naming none left out; an empty Topics array lists the
 * directory alone. */
Test(describe_log_dirs, every_version, .init = setup, .fini = teardown)
{
	int64_t size[3];
	ldt_fill(size);
	for (int16_t v = 1; v <= 4; v++) {
		struct ldt_out o;
		log_dirs_roundtrip(v, NULL, -1, &o);
		cr_expect_eq(o.err, 0);
		cr_assert_eq(o.nd, 1, "v%d: %d directories", v, o.nd);
		const struct ldt_dir *d = &o.d[0];
		cr_expect_eq(d->err, 0);
		cr_expect_str_eq(d->path, tmpdir, "v%d", v);
		cr_assert_eq(d->nt, 2, "v%d: %d topics", v, d->nt);
		cr_expect_str_eq(d->t[0].name, "la");
		cr_expect_str_eq(d->t[1].name, "lb");
		cr_assert_eq(d->t[0].np, 2);
		cr_expect(d->t[0].p[0].index == 0 && d->t[0].p[0].size == size[0]);
		cr_expect(d->t[0].p[1].index == 2 && d->t[0].p[1].size == size[1], "v%d: la-2 %" PRId64 " bytes", v,
			  d->t[0].p[1].size);
		cr_assert_eq(d->t[1].np, 1);
		cr_expect(d->t[1].p[0].index == 1 && d->t[1].p[0].size == size[2]);
		for (int k = 0; k < d->nt; k++)
			for (int j = 0; j < d->t[k].np; j++)
				cr_expect(d->t[k].p[j].lag == 0 && !d->t[k].p[j].future);
		cr_expect_eq(d->total, v >= 4 ? STUB_DIR_TOTAL_BYTES : -2);
		cr_expect_eq(d->usable, v >= 4 ? STUB_DIR_USABLE_BYTES : -2);

		const struct ldt_req named[] = {{"la", 5, {2, 0, 2, 7, -1}}, {"nosuch", 1, {0}}, {"lb", 0, {0}},
						{"lc", 1, {0}}, {"la", 1, {0}}};
		log_dirs_roundtrip(v, named, 5, &o);
		cr_assert_eq(o.nd, 1);
		d = &o.d[0];
		cr_assert_eq(d->nt, 1, "v%d: %d topics named", v, d->nt);
		cr_expect_str_eq(d->t[0].name, "la");
		cr_assert_eq(d->t[0].np, 2, "v%d: la-0 and la-2 once each", v);
		cr_expect(d->t[0].p[0].index == 0 && d->t[0].p[1].index == 2);
		cr_expect_eq(d->t[0].p[1].size, size[1]);

		log_dirs_roundtrip(v, NULL, 0, &o);
		cr_assert_eq(o.nd, 1);
		cr_expect_eq(o.d[0].err, 0);
		cr_expect_eq(o.d[0].nt, 0, "v%d: no partition asked for", v);
	}
}

/* Proves a failed data directory is described with KAFKA_STORAGE_ERROR
 * (56), no topics, and TotalBytes and UsableBytes -1 (Kafka's defaults). */
Test(describe_log_dirs, failed_directory, .init = setup, .fini = teardown)
{
	int64_t size[3];
	ldt_fill(size);
	__atomic_store_n(&BR->offline_dirs, 1u, __ATOMIC_RELEASE);
	for (int16_t v = 1; v <= 4; v++) {
		struct ldt_out o;
		log_dirs_roundtrip(v, NULL, -1, &o);
		cr_assert_eq(o.nd, 1);
		cr_expect_eq(o.err, 0, "the request itself succeeds");
		cr_expect_eq(o.d[0].err, 56, "v%d: %d", v, o.d[0].err);
		cr_expect_str_eq(o.d[0].path, tmpdir);
		cr_expect_eq(o.d[0].nt, 0);
		cr_expect_eq(o.d[0].total, v >= 4 ? -1 : -2);
		cr_expect_eq(o.d[0].usable, v >= 4 ? -1 : -2);
	}
	__atomic_store_n(&BR->offline_dirs, 0u, __ATOMIC_RELEASE);
}

static const char *const ldt_rel_dirs[] = {"log.dirs", "ldt-rel-a, /ldt-abs/b ,ldt-rel-a", NULL};
static void ldt_setup_rel_dirs(void) { setup_with(ldt_rel_dirs); }

/* Proves the directories are described as Kafka does: in log.dirs order,
 * each once (a repeated one is not listed twice), a relative one under the
 * working directory (Paths.toAbsolutePath), and a directory holding no
 * partition with an empty topic list. */
Test(describe_log_dirs, directories_absolute_and_distinct, .init = ldt_setup_rel_dirs, .fini = teardown)
{
	create_topic("lr", 1);
	int64_t size = ldt_produce("lr", 0, 2);
	char cwd[512], want[600];
	cr_assert_not_null(getcwd(cwd, sizeof cwd));
	snprintf(want, sizeof want, "%s/ldt-rel-a", cwd);
	struct ldt_out o;
	log_dirs_roundtrip(4, NULL, -1, &o);
	cr_assert_eq(o.nd, 2, "%d directories", o.nd);
	cr_expect_str_eq(o.d[0].path, want);
	cr_expect_str_eq(o.d[1].path, "/ldt-abs/b");
	cr_assert_eq(o.d[0].nt, 1);
	cr_expect_eq(o.d[0].t[0].p[0].size, size);
	cr_expect_eq(o.d[1].nt, 0);
	cr_expect(o.d[0].err == 0 && o.d[1].err == 0);
}

/* Proves that in cluster mode only the partitions the metadata places on
 * this broker are described (no op reaches storage for the others, named or
 * not), that a follower's offset lag is the storage core's, and that the
 * request needs no leadership (a replica led elsewhere is described). */
Test(describe_log_dirs, cluster_placement, .init = cl_setup, .fini = teardown)
{
	int64_t size = ldt_produce("cl", 0, 4);
	struct sluice_partition_state st = cl_state(2, 3, 2);
	st.replicas[st.replica_n++] = 1; /* a follower here */
	stub_cluster_partition("cl", 1, &st);
	const int32_t no_epochs[1] = {0};
	const int64_t no_starts[1] = {0};
	stub_store_epochs("cl", 1, no_epochs, no_starts, 0); /* its log exists here (the stub's: ever touched) */
	stub_lag = 7;
	for (int round = 0; round < 2; round++) {
		int64_t ops = stub_store_ops();
		struct ldt_out o;
		const struct ldt_req named[] = {{"cl", 3, {2, 1, 0}}};
		log_dirs_roundtrip(3, round ? named : NULL, round ? 1 : -1, &o);
		cr_expect_eq(stub_store_ops() - ops, 3, "one directory op and two partitions: %" PRId64,
			     stub_store_ops() - ops);
		cr_assert_eq(o.nd, 1);
		cr_assert_eq(o.d[0].nt, 1);
		cr_assert_eq(o.d[0].t[0].np, 2);
		cr_expect(o.d[0].t[0].p[0].index == 0 && o.d[0].t[0].p[0].size == size);
		cr_expect(o.d[0].t[0].p[1].index == 1 && o.d[0].t[0].p[1].size == 0);
		cr_expect_eq(o.d[0].t[0].p[1].lag, 7);
	}
}

/* Proves a broker holding more partitions than one round of ops (1024)
 * describes them all, in several rounds, named or not: 2,500 partitions
 * placed here, three of them written; 2,501 ops reach storage (one for the
 * directory); a request naming every partition backwards, some twice,
 * gets the same answer. */
Test(describe_log_dirs, many_partitions_in_rounds, .init = setup, .fini = teardown)
{
	create_topic("lm", 2500);
	const int32_t written[3] = {0, 1024, 2499};
	int64_t size[3];
	for (int i = 0; i < 3; i++)
		size[i] = ldt_produce("lm", written[i], i + 1);
	for (int named = 0; named < 2; named++) {
		struct rq q;
		rq_start(&q, 35, 2);
		if (named) {
			rq_arr(&q, 2);
			for (int t = 0; t < 2; t++) {
				rq_str(&q, "lm");
				rq_arr(&q, t ? 100 : 2500);
				for (int p = 0; p < (t ? 100 : 2500); p++)
					kwr_i32(&q.w, t ? p * 25 : 2499 - p);
				rq_tags(&q);
			}
		} else
			rq_arr(&q, -1);
		rq_tags(&q);
		int64_t ops = stub_store_ops();
		cr_assert(rq_send(&q));
		struct rs s;
		rs_take(&s, 35, 2, q.corr);
		struct ldt_out o;
		dec_log_dirs(&s, &o);
		rs_end(&s);
		cr_expect_eq(stub_store_ops() - ops, 2501, "%" PRId64 " ops", stub_store_ops() - ops);
		cr_assert(o.nd == 1 && o.d[0].nt == 1);
		cr_assert_eq(o.d[0].t[0].np, 3);
		for (int i = 0; i < 3; i++)
			cr_expect(o.d[0].t[0].p[i].index == written[i] && o.d[0].t[0].p[i].size == size[i], "named %d: %d",
				  named, o.d[0].t[0].p[i].index);
	}
}

/* Proves DescribeLogDirs is advertised as v1-v4 (Kafka 3.3 to 4.2's
 * range): kafka-python 3.x takes a broker advertising v5 for Kafka 4.3+
 * (its broker-version guess), which the rest of the table is not. */
Test(describe_log_dirs, advertised_1_to_4, .init = setup, .fini = teardown)
{
	struct rq q;
	enc_api_versions(&q, 3);
	cr_assert(rq_send(&q));
	struct rs s;
	rs_take(&s, 18, 3, q.corr);
	struct av a;
	dec_api_versions(&s, &a);
	rs_end(&s);
	int16_t mn, mx;
	cr_assert(av_range(&a, 35, &mn, &mx), "DescribeLogDirs advertised");
	cr_expect(mn == 1 && mx == 4, "DescribeLogDirs %d-%d", mn, mx);
}

/* Proves a malformed DescribeLogDirs closes the connection with nothing
 * lent to storage: every truncation of a v1 and a v2 request, a null topic
 * name, a null Partitions array, counts past the bytes left, and more
 * partitions than a request may name (100,000). */
Test(describe_log_dirs, malformed_closes, .init = setup, .fini = teardown)
{
	create_topic("lx", 2);
	int64_t ops = stub_store_ops();
	const struct ldt_req ok[] = {{"lx", 2, {0, 1}}, {"ly", 1, {3}}};
	for (int16_t v = 1; v <= 2; v++) {
		struct rq q;
		enc_log_dirs(&q, v, ok, 2);
		size_t body = 2 + 2 + 4 + 2 + strlen("sluice-unit") + (v >= 2);
		for (size_t cut = body; cut < q.w.len; cut++) {
			reconnect();
			cr_expect(!stub_frame(C, q.w.buf, cut), "v%d cut at %zu of %zu answered", v, cut, q.w.len);
		}
		kwr_free(&q.w);
	}
	for (int k = 0; k < 5; k++) {
		struct rq q;
		int16_t v = k % 2 ? 2 : 1;
		rq_start(&q, 35, v);
		if (k == 4) { /* 100,001 partitions */
			rq_arr(&q, 1);
			rq_str(&q, "lx");
			rq_arr(&q, 100001);
			for (int i = 0; i < 100001; i++)
				kwr_i32(&q.w, i % 2);
			rq_tags(&q);
			rq_tags(&q);
		} else {
			rq_arr(&q, k == 2 ? 1000 : 1);
			if (k <= 1)
				kwr_string(&q.w, q.flex, NULL, -1); /* null Topic */
			else
				rq_str(&q, "lx");
			kwr_array(&q.w, q.flex, k == 3 ? -1 : 1); /* k 3: null Partitions */
			kwr_i32(&q.w, 0);
			rq_tags(&q);
			rq_tags(&q);
		}
		reconnect();
		cr_expect(!rq_send(&q), "malformed request %d answered", k);
	}
	cr_expect_eq(stub_store_ops(), ops, "nothing reached storage");
	reconnect();
}

/* Proves the broker loggers (resource type 8) as kafka-configs.sh uses
 * them: DescribeConfigs lists root and every area's logger with source
 * DYNAMIC_BROKER_LOGGER_CONFIG (6: the tool lists and accepts only loggers
 * so described), each at its level in effect; IncrementalAlterConfigs sets
 * one logger alone, DELETE gives it the root's level again, and Kafka's
 * refusals: deleting the root (42), an unknown logger or level (40),
 * APPEND (42); the fast test level follows the highest logger. */
Test(broker_loggers, describe_set_delete, .init = setup, .fini = teardown)
{
	struct dc_res *o = calloc(1, sizeof *o);
	cr_assert_not_null(o);
	describe_configs_roundtrip(4, 8, "1", NULL, -1, true, o);
	cr_assert_eq(o->err, 0);
	cr_assert_eq(o->n, sluice_log_logger_count());
	for (int i = 0; i < o->n; i++) {
		cr_expect_eq(o->e[i].source, 6, "%s: DYNAMIC_BROKER_LOGGER_CONFIG", o->e[i].name);
		cr_expect(!o->e[i].read_only && !o->e[i].sensitive && o->e[i].nsyn == 0, "%s", o->e[i].name);
		cr_expect_str_eq(o->e[i].value, "ERROR", "%s follows the root (set to ERROR by setup)", o->e[i].name);
	}
	cr_expect_not_null(dc_find(o, "root"));
	cr_expect_not_null(dc_find(o, "storage"));
	cr_expect_not_null(dc_find(o, "net"));

	struct ac_out a;
	struct ac_res set = {8, "1", "storage", "DEBUG", 0};
	alter_roundtrip(44, 1, &set, 1, &a);
	cr_expect_eq(a.err[0], 0, "%s", a.msg[0]);
	const char *storage = "storage", *root = "root";
	describe_configs_roundtrip(4, 8, "1", &storage, 1, false, o);
	cr_assert_eq(o->n, 1, "the key filter");
	cr_expect_str_eq(o->e[0].value, "DEBUG");
	describe_configs_roundtrip(4, 8, "1", &root, 1, false, o);
	cr_expect_str_eq(o->e[0].value, "ERROR", "the root unchanged");
	cr_expect_eq(sluice_log_level_current, SLUICE_LOG_DEBUG, "the fast test lets DEBUG through for storage");
	cr_expect_eq(sluice_log_logger_level(sluice_log_logger_find("net")), SLUICE_LOG_ERROR, "other areas unchanged");

	struct ac_res del = {8, "1", "storage", NULL, 1};
	alter_roundtrip(44, 1, &del, 1, &a);
	cr_expect_eq(a.err[0], 0, "%s", a.msg[0]);
	describe_configs_roundtrip(4, 8, "1", &storage, 1, false, o);
	cr_expect_str_eq(o->e[0].value, "ERROR", "the root's level again");
	cr_expect_eq(sluice_log_level_current, SLUICE_LOG_ERROR);

	struct ac_res root_del = {8, "1", "root", NULL, 1};
	alter_roundtrip(44, 1, &root_del, 1, &a);
	cr_expect_eq(a.err[0], 42);
	cr_expect_str_eq(a.msg[0], "Removing the log level of the root logger is not allowed");
	struct ac_res unknown = {8, "1", "kafka.server", "INFO", 0};
	alter_roundtrip(44, 1, &unknown, 1, &a);
	cr_expect_eq(a.err[0], 40);
	cr_expect_str_eq(a.msg[0], "Logger kafka.server does not exist!");
	struct ac_res bad_level = {8, "1", "net", "LOUD", 0};
	alter_roundtrip(44, 1, &bad_level, 1, &a);
	cr_expect_eq(a.err[0], 40, "%s", a.msg[0]);
	struct ac_res append = {8, "1", "net", "INFO", 2};
	alter_roundtrip(44, 1, &append, 1, &a);
	cr_expect_eq(a.err[0], 42, "%s", a.msg[0]);
	cr_expect_eq(sluice_log_logger_level(sluice_log_logger_find("net")), SLUICE_LOG_ERROR, "no refused change applied");

	/* Another broker's loggers, or no id: refused as Kafka refuses them. */
	describe_configs_roundtrip(4, 8, "2", NULL, -1, true, o);
	cr_expect_eq(o->err, 42, "another broker's id: INVALID_REQUEST");
	describe_configs_roundtrip(4, 8, "", NULL, -1, true, o);
	cr_expect_eq(o->err, 42, "an empty id: INVALID_REQUEST");
	describe_configs_roundtrip(4, 8, "one", NULL, -1, true, o);
	cr_expect_eq(o->err, 42, "not a number: INVALID_REQUEST");
	struct ac_res other = {8, "2", "net", "DEBUG", 0};
	alter_roundtrip(44, 1, &other, 1, &a);
	cr_expect_eq(a.err[0], 42, "%s", a.msg[0]);
	cr_expect_str_eq(a.msg[0], "Unexpected broker id, expected 1 but received 2");
	cr_expect_eq(sluice_log_logger_level(sluice_log_logger_find("net")), SLUICE_LOG_ERROR, "another broker's: not applied");

	struct ac_res root_set = {8, "1", "root", "TRACE", 0};
	alter_roundtrip(44, 1, &root_set, 1, &a);
	cr_expect_eq(a.err[0], 0);
	cr_expect_eq(sluice_log_logger_level(sluice_log_logger_find("replication")), SLUICE_LOG_TRACE, "follows the root");
	sluice_log_set_level(SLUICE_LOG_ERROR);
	free(o);
}

/* ---- the network core's shared snapshot ---- */

/* Proves requests on one network core share the snapshot the core holds
 * (one reference for all of them, users counted) while it is current; a
 * newer one out, the next request gets it and the old one stays, retired,
 * until its last request is done, then is released (its count back to the
 * writer's alone); and the core's own reference goes at shutdown. */
Test(snap_cache, shared_retired_released, .init = setup, .fini = teardown)
{
	struct netcore *nc = &BR->net[0];
	struct proto_state *ps = nc->state;
	struct req *r = calloc(3, sizeof *r);
	cr_assert_not_null(r);
	for (int i = 0; i < 3; i++)
		r[i].nc = nc;
	struct sluice_meta_snapshot *s1 = sluice_proto_snap(&r[0]);
	cr_assert_eq(sluice_proto_snap(&r[1]), s1, "the same snapshot for both");
	cr_assert(r[0].snap_core && ps->snap_cur.snap == s1 && ps->snap_cur.users == 2);
	int refs1 = __atomic_load_n(&s1->refs, __ATOMIC_ACQUIRE);
	cr_assert_eq(refs1, 2, "the writer's and the core's, none per request: %d", refs1);

	create_topic("snap-cache", 1); /* publishes a newer snapshot */
	struct sluice_meta_snapshot *s2 = sluice_proto_snap(&r[2]);
	cr_assert_neq(s2, s1, "the newer one");
	cr_assert_not_null(sluice_meta_find(s2, "snap-cache", strlen("snap-cache")));
	cr_assert_null(sluice_meta_find(s1, "snap-cache", strlen("snap-cache")), "the old one unchanged");
	cr_assert_eq(ps->snap_retired_n, 1);
	cr_assert(ps->snap_retired[0].snap == s1 && ps->snap_retired[0].users == 2);

	sluice_proto_snap_refresh(&r[0]);
	cr_assert_eq(r[0].snap, s2);
	cr_assert_eq(ps->snap_retired[0].users, 1);
	__atomic_add_fetch(&s1->refs, 1, __ATOMIC_ACQ_REL); /* the test's own, to see the count after */
	sluice_proto_snap_refresh(&r[1]);
	cr_assert_eq(ps->snap_retired_n, 0, "its last request done: released");
	cr_assert_eq(__atomic_load_n(&s1->refs, __ATOMIC_ACQUIRE), 1, "only the test's reference left");
	BR->meta.ops->release(BR->meta.self, s1);
	cr_assert_eq(ps->snap_cur.snap, s2);
	cr_assert_eq(ps->snap_cur.users, 3);
	for (int i = 0; i < 3; i++)
		sluice_proto_snap_put(&r[i]);
	cr_assert_eq(ps->snap_cur.users, 0, "kept for the next requests; released at shutdown (teardown)");
	cr_assert_null(r[0].snap);
	free(r);
}
