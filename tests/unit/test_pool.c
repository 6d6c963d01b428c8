/* Unit tests of the per-core object pool (dataplane/objpool.c) alone, and of the
 * network core's pools (dataplane/proto.c, netcore.c) over the in-memory
 * transport backend: exhaustion gives back-pressure (the connection is not
 * read until a request completes; every request is answered, in order), a
 * double or foreign give-back asserts, and the pools are full again after a
 * connection closes mid-request. */
#include "proto_stubs.h"
#include "common/kafka/codec.h"
#include "common/log.h"
#include "dataplane/objpool.h"
#include <criterion/criterion.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- the pool alone ------------------------------------------------------- */

/* Proves a pool lends exactly its count, each object distinct and aligned,
 * answers NULL when exhausted, and lends again what comes back. */
Test(pool, exhaustion_and_reuse)
{
	struct sluice_objpool p;
	cr_assert_eq(sluice_objpool_init(&p, "test", 100, 3), 0);
	void *o[3];
	for (int i = 0; i < 3; i++) {
		o[i] = sluice_objpool_get(&p);
		cr_assert_not_null(o[i]);
		cr_expect_eq((uintptr_t)o[i] % SLUICE_OBJPOOL_ALIGN, 0);
		cr_expect(sluice_objpool_owns(&p, o[i]));
		memset(o[i], 0xa5, 100); /* the whole object is usable */
	}
	cr_expect(o[0] != o[1] && o[1] != o[2] && o[0] != o[2]);
	cr_expect_null(sluice_objpool_get(&p), "a fourth object from a pool of three");
	cr_expect_eq(sluice_objpool_available(&p), 0);
	sluice_objpool_put(&p, o[1]);
	cr_expect_eq(sluice_objpool_available(&p), 1);
	cr_expect_eq(sluice_objpool_get(&p), o[1], "the object given back is lent next");
	for (int i = 0; i < 3; i++)
		sluice_objpool_put(&p, o[i]);
	cr_expect_eq(sluice_objpool_available(&p), 3);
	int local;
	cr_expect(!sluice_objpool_owns(&p, &local));
	sluice_objpool_fini(&p);
}

/* Proves the limits are refused and an empty pool lends nothing. */
Test(pool, bounds)
{
	struct sluice_objpool p;
	cr_expect_eq(sluice_objpool_init(&p, "test", 0, 1), -1);
	cr_expect_eq(sluice_objpool_init(&p, "test", 8, SLUICE_OBJPOOL_OBJECTS_MAX + 1), -1);
	cr_expect_eq(sluice_objpool_init(&p, "test", (size_t)SLUICE_OBJPOOL_OBJECT_BYTES_MAX + 1, 1), -1);
	cr_assert_eq(sluice_objpool_init(&p, "test", 8, 0), 0);
	cr_expect_null(sluice_objpool_get(&p));
	sluice_objpool_fini(&p);
}

/* Proves giving an object back twice asserts (a death test). */
Test(pool, double_put_asserts, .signal = SIGABRT)
{
	struct sluice_objpool p;
	cr_assert_eq(sluice_objpool_init(&p, "test", 32, 2), 0);
	void *o = sluice_objpool_get(&p);
	(void)sluice_objpool_get(&p);
	sluice_objpool_put(&p, o);
	sluice_objpool_put(&p, o);
}

/* Proves giving back an object the pool never held asserts. */
Test(pool, foreign_put_asserts, .signal = SIGABRT)
{
	struct sluice_objpool p;
	cr_assert_eq(sluice_objpool_init(&p, "test", 32, 2), 0);
	(void)sluice_objpool_get(&p);
	static uint8_t other[64];
	sluice_objpool_put(&p, other);
}

/* Proves a pointer inside a lent object (not its start) asserts. */
Test(pool, interior_put_asserts, .signal = SIGABRT)
{
	struct sluice_objpool p;
	cr_assert_eq(sluice_objpool_init(&p, "test", 32, 2), 0);
	uint8_t *o = sluice_objpool_get(&p);
	sluice_objpool_put(&p, o + 8);
}

#if defined(__SANITIZE_ADDRESS__)
/* Proves, under AddressSanitizer, that an object given back is poisoned, so
 * touching it is reported as a heap use after free would be (checked
 * through ASan's interface rather than by touching it: whether a report
 * exits or aborts depends on ASAN_OPTIONS, and the test command aborts),
 * and that taking it again unpoisons it. */
Test(pool, use_after_put_reported)
{
	struct sluice_objpool p;
	cr_assert_eq(sluice_objpool_init(&p, "test", 32, 1), 0);
	uint8_t *o = sluice_objpool_get(&p);
	cr_assert_not_null(o);
	cr_expect_not(__asan_address_is_poisoned(o), "lent: usable");
	o[0] = 1;
	sluice_objpool_put(&p, o);
	cr_expect(__asan_address_is_poisoned(o), "given back: a touch is reported");
	cr_expect(__asan_address_is_poisoned(o + 31));
	cr_assert_eq(sluice_objpool_get(&p), o, "the pool's one object");
	cr_expect_not(__asan_address_is_poisoned(o), "lent again: usable");
	sluice_objpool_put(&p, o);
	sluice_objpool_fini(&p);
}
#endif

/* ---- the network core's pools --------------------------------------------- */

static char tmpdir[128];
static struct netcore *NC;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

static void setup_with(const char *const *overrides)
{
	struct stat st;
	const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
	snprintf(tmpdir, sizeof tmpdir, "%s/sluice-pool-XXXXXX", base);
	cr_assert_not_null(mkdtemp(tmpdir));
	cr_assert_not_null(stub_broker_open(tmpdir, overrides));
	sluice_log_set_level(SLUICE_LOG_ERROR);
	NC = stub_netcore();
}

static void setup_two(void)
{
	static const char *const o[] = {"sluice.network.pool.requests", "2", "sluice.network.pool.overflow.requests", "0",
					NULL};
	setup_with(o);
}

static void setup_two_overflow_one(void)
{
	static const char *const o[] = {"sluice.network.pool.requests", "2", "sluice.network.pool.overflow.requests", "1",
					NULL};
	setup_with(o);
}

static void setup_small(void)
{
	static const char *const o[] = {"sluice.network.pool.overflow.requests", "0",
					"sluice.network.pool.frames", "1", "sluice.network.pool.frame.bytes", "64",
					"sluice.network.pool.large.frames", "1", "sluice.network.pool.large.frame.bytes",
					"128", NULL};
	setup_with(o);
}

static void teardown(void)
{
	cr_expect_eq(sluice_netcore_conns(NC), 0, "every connection freed");
	stub_broker_close();
	nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static struct proto_state *pools(void) { return NC->state; }

static void expect_pools_full(void)
{
	const struct proto_state *ps = pools();
	cr_expect_eq(ps->reqs.free_n, ps->reqs.count, "requests back: %u of %u", ps->reqs.free_n, ps->reqs.count);
	cr_expect_eq(ps->op_arrays.free_n, ps->op_arrays.count, "op arrays back");
	cr_expect_eq(ps->frames.free_n, ps->frames.count, "frames back");
	cr_expect_eq(ps->frames_large.free_n, ps->frames_large.count, "large frames back");
}

/* An ApiVersions v0 request with its size prefix: 14 bytes. */
static size_t api_versions(uint8_t *out, int32_t corr)
{
	kput32(out, 10);
	kput32(out + 4, 18u << 16); /* ApiKey 18, ApiVersion 0 */
	kput32(out + 8, (uint32_t)corr);
	out[12] = out[13] = 0xff; /* null client id */
	return 14;
}

/* A ListOffsets v1 request for topic "t" partition 0 (latest), which goes
 * to storage, with its size prefix. pad bytes of client id make it longer. */
static size_t list_offsets(uint8_t *out, int32_t corr, int pad)
{
	size_t n = 4;
	kput32(out + n, 2u << 16 | 1u); /* ApiKey 2, ApiVersion 1 */
	kput32(out + n + 4, (uint32_t)corr);
	out[n + 8] = (uint8_t)(pad >> 8);
	out[n + 9] = (uint8_t)pad;
	memset(out + n + 10, 'c', (size_t)pad);
	n += 10 + (size_t)pad;
	kput32(out + n, 0xffffffffu); /* ReplicaId -1 */
	kput32(out + n + 4, 1);      /* one topic */
	out[n + 8] = 0;
	out[n + 9] = 1;
	out[n + 10] = 't';
	kput32(out + n + 11, 1);     /* one partition */
	kput32(out + n + 15, 0);
	kput64(out + n + 19, (uint64_t)-1);
	n += 27;
	kput32(out, (uint32_t)(n - 4));
	return n;
}

static void make_topic(const char *name)
{
	struct broker *b = NC->b;
	struct sluice_topic_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.name = name;
	spec.name_len = strlen(name);
	spec.partitions = 1;
	spec.replication_factor = -1;
	char msg[256];
	cr_assert_eq(b->meta.ops->create_topic(b->meta.self, &spec, false, msg, sizeof msg, NULL), 0, "%s", msg);
}

/* Take one response off what the core sent: its correlation id, or -1. */
static int32_t take_corr(struct tt_conn *t)
{
	size_t have;
	const uint8_t *p = tt_sent(t, &have);
	if (have < 8 || have - 4 < kbe32(p))
		return -1;
	int32_t corr = (int32_t)kbe32(p + 4);
	tt_sent_consume(t, kbe32(p) + 4);
	return corr;
}

/* Proves that with a pool of 2 requests a third pipelined request is not
 * read while two wait on storage (the connection is paused, not closed),
 * and that all three are answered, in order, once storage answers. */
Test(netpool, exhaustion_pauses_reading, .init = setup_two, .fini = teardown)
{
	make_topic("t");
	struct tt_conn *t = tt_connect(NC);
	cr_assert_not_null(t);
	stub_store_hold(true);
	uint8_t f[3 * 64];
	size_t n = 0;
	for (int i = 0; i < 3; i++)
		n += list_offsets(f + n, 10 + i, 0);
	tt_feed(t, f, n);
	tt_pump(NC, 1000);
	struct conn *c = tt_core_conn(t);
	cr_assert_not_null(c);
	cr_expect_eq(stub_queued(c), 2, "only two requests taken");
	cr_expect_eq(sluice_objpool_available(&pools()->reqs), 0);
	cr_expect(tt_paused(t), "reading paused on pool exhaustion");
	cr_expect(!tt_closing(t), "not closed");
	cr_expect_eq(take_corr(t), -1);
	/* A later request on the same connection waits behind the third. */
	n = api_versions(f, 13);
	tt_feed(t, f, n);
	tt_pump(NC, 1000);
	cr_expect_eq(tt_pending_in(t), n, "read while paused");
	stub_store_hold(false);
	tt_pump(NC, 10000);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(take_corr(t), 10 + i);
	cr_expect(!tt_paused(t));
	tt_free(NC, t);
	expect_pools_full();
}

/* Proves a connection with nothing in flight also waits when another
 * connection holds every request, and is served once one comes back. */
Test(netpool, exhaustion_across_connections, .init = setup_two, .fini = teardown)
{
	make_topic("t");
	struct tt_conn *a = tt_connect(NC), *b = tt_connect(NC);
	stub_store_hold(true);
	uint8_t f[2 * 64];
	size_t n = list_offsets(f, 1, 0);
	n += list_offsets(f + n, 2, 0);
	tt_feed(a, f, n);
	tt_pump(NC, 1000);
	n = api_versions(f, 3);
	tt_feed(b, f, n);
	tt_pump(NC, 1000);
	cr_expect_eq(stub_queued(tt_core_conn(b)), 0, "b not read: no request free");
	cr_expect_eq(take_corr(b), -1);
	stub_store_hold(false);
	tt_pump(NC, 10000);
	cr_expect_eq(take_corr(a), 1);
	cr_expect_eq(take_corr(a), 2);
	cr_expect_eq(take_corr(b), 3);
	tt_free(NC, a);
	tt_free(NC, b);
	expect_pools_full();
}

/* Proves the pools are full again after connections close mid-request: one
 * with a request at storage and a partial frame, one with a request waiting
 * for the pool. */
Test(netpool, close_mid_request_returns_all, .init = setup_two, .fini = teardown)
{
	make_topic("t");
	struct tt_conn *t = tt_connect(NC);
	stub_store_hold(true);
	uint8_t f[4 * 64];
	size_t n = list_offsets(f, 1, 0);
	n += list_offsets(f + n, 2, 0);
	n += list_offsets(f + n, 3, 0);
	tt_feed(t, f, n + 7); /* and part of a fourth */
	tt_pump(NC, 1000);
	cr_expect_eq(sluice_objpool_available(&pools()->reqs), 0);
	tt_peer_close(t);
	tt_pump(NC, 1000);
	cr_expect(tt_gone(t));
	stub_store_hold(false);
	tt_pump(NC, 1000);
	cr_expect_eq(sluice_netcore_conns(NC), 0);
	expect_pools_full();
	tt_free(NC, t);
}

/* Proves frames go to the small class, then the large one, then the heap
 * above it, and a frame of the large class waits (paused) while the large
 * buffer is lent, all returned at the end. */
Test(netpool, frame_classes, .init = setup_small, .fini = teardown)
{
	make_topic("t");
	struct tt_conn *t = tt_connect(NC);
	stub_store_hold(true);
	uint8_t f[4 * 300];
	size_t n = list_offsets(f, 1, 20);           /* 47 bytes: small */
	n += list_offsets(f + n, 2, 70);             /* 97: large */
	n += list_offsets(f + n, 3, 200);            /* 227: heap */
	n += list_offsets(f + n, 4, 20);             /* small is lent: large, lent too: waits */
	tt_feed(t, f, n);
	tt_pump(NC, 1000);
	struct conn *c = tt_core_conn(t);
	cr_expect_eq(stub_queued(c), 3);
	cr_expect_eq(sluice_objpool_available(&pools()->frames), 0);
	cr_expect_eq(sluice_objpool_available(&pools()->frames_large), 0);
	cr_expect(tt_paused(t));
	stub_store_hold(false);
	tt_pump(NC, 10000);
	for (int i = 1; i <= 4; i++)
		cr_expect_eq(take_corr(t), i);
	tt_free(NC, t);
	expect_pools_full();
}

/* Proves a core whose request pool is empty keeps reading within
 * sluice.network.pool.overflow.requests, taking requests from the heap (a
 * JoinGroup held for the rest of its group must not keep the other members'
 * JoinGroups unread), and pauses past it; every request is answered in
 * order and the heap requests are given back. Fails with the overflow
 * removed: the third request is never read while two are held. */
Test(netpool, overflow_reads_past_the_pool, .init = setup_two_overflow_one, .fini = teardown)
{
	make_topic("t");
	struct tt_conn *t = tt_connect(NC);
	stub_store_hold(true);
	uint8_t f[4 * 64];
	size_t n = 0;
	for (int i = 0; i < 4; i++)
		n += list_offsets(f + n, 20 + i, 0);
	tt_feed(t, f, n);
	tt_pump(NC, 1000);
	struct conn *c = tt_core_conn(t);
	cr_expect_eq(stub_queued(c), 3, "two pooled requests and one from the heap");
	cr_expect_eq(pools()->heap_reqs, 1);
	cr_expect(tt_paused(t), "the fourth waits: past the overflow limit");
	stub_store_hold(false);
	tt_pump(NC, 10000);
	for (int i = 0; i < 4; i++)
		cr_expect_eq(take_corr(t), 20 + i);
	cr_expect_eq(pools()->heap_reqs, 0, "heap requests given back");
	tt_free(NC, t);
	expect_pools_full();
}
