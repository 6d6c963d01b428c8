/* Unit tests of the network core (dataplane/netcore.c) over the in-memory
 * transport backend: framing of bytes that come in any pieces, responses in
 * request order, refused frames, a peer gone mid-request, a budget
 * pausing and resuming reading, and the core runtime's backlog of ops for
 * full storage rings doing the same. */
#include "proto_stubs.h"
#include "common/kafka/codec.h"
#include "common/log.h"
#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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
	snprintf(tmpdir, sizeof tmpdir, "%s/sluice-netcore-XXXXXX", base);
	cr_assert_not_null(mkdtemp(tmpdir));
	cr_assert_not_null(stub_broker_open(tmpdir, overrides));
	sluice_log_set_level(SLUICE_LOG_ERROR);
	NC = stub_netcore();
}
static void setup(void) { setup_with(NULL); }

static void teardown(void)
{
	cr_expect_eq(sluice_netcore_conns(NC), 0, "every connection freed");
	stub_broker_close();
	nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
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
 * to storage, with its size prefix. */
static size_t list_offsets(uint8_t *out, int32_t corr)
{
	size_t n = 4;
	kput32(out + n, 2u << 16 | 1u); /* ApiKey 2, ApiVersion 1 */
	kput32(out + n + 4, (uint32_t)corr);
	out[n + 8] = out[n + 9] = 0xff; /* null client id */
	n += 10;
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

/* Proves a frame fed one byte at a time is cut and answered once, whole. */
Test(netcore, frame_byte_by_byte, .init = setup, .fini = teardown)
{
	struct tt_conn *t = tt_connect(NC);
	cr_assert_not_null(t);
	uint8_t f[14];
	size_t n = api_versions(f, 7);
	tt_set_piece(t, 1);
	for (size_t i = 0; i < n; i++) {
		cr_expect_eq(take_corr(t), -1, "answered after %zu bytes", i);
		tt_feed(t, f + i, 1);
		tt_pump(NC, 100);
	}
	cr_expect_eq(take_corr(t), 7);
	cr_expect_eq(take_corr(t), -1);
	tt_free(NC, t);
}

/* Proves pipelined requests, split at odd points, are answered in request
 * order even when a later one completes first: a produce waiting on storage
 * (its op not yet answered), then an ApiVersions answered at once. */
Test(netcore, pipelined_in_order, .init = setup, .fini = teardown)
{
	struct tt_conn *t = tt_connect(NC);
	uint8_t f[3 * 14];
	size_t n = 0;
	for (int i = 0; i < 3; i++)
		n += api_versions(f + n, 100 + i);
	tt_set_piece(t, 5);
	tt_feed(t, f, n);
	tt_pump(NC, 1000);
	for (int i = 0; i < 3; i++)
		cr_expect_eq(take_corr(t), 100 + i);
	/* A ListOffsets waits on storage while the ApiVersions behind it is
	 * answered at once: the later one waits for the earlier. */
	make_topic("t");
	stub_store_hold(true);
	uint8_t lo[64];
	size_t lon = list_offsets(lo, 200);
	tt_feed(t, lo, lon);
	n = api_versions(f, 201);
	tt_feed(t, f, n);
	tt_pump(NC, 1000);
	struct conn *c = tt_core_conn(t);
	cr_assert_eq(stub_queued(c), 2);
	cr_expect(!c->head->done && c->head->next->done, "the second completed first");
	cr_expect_eq(take_corr(t), -1, "nothing sent ahead of the first");
	stub_store_hold(false);
	tt_pump(NC, 1000);
	cr_expect_eq(take_corr(t), 200);
	cr_expect_eq(take_corr(t), 201);
	tt_free(NC, t);
}

/* Proves short sends are finished by the core: every response arrives whole
 * and in order when the backend takes 3 bytes per send. */
Test(netcore, short_sends, .init = setup, .fini = teardown)
{
	struct tt_conn *t = tt_connect(NC);
	tt_set_send_max(t, 3);
	uint8_t f[2 * 14];
	size_t n = api_versions(f, 1) + api_versions(f + 14, 2);
	tt_feed(t, f, n);
	tt_pump(NC, 10000);
	cr_expect_eq(take_corr(t), 1);
	cr_expect_eq(take_corr(t), 2);
	tt_free(NC, t);
}

/* Proves a frame size below the header, negative, or above
 * socket.request.max.bytes closes the connection without an answer. */
Test(netcore, bad_sizes_close, .init = setup, .fini = teardown)
{
	const int32_t sizes[] = {0, 7, -1, INT32_MIN, 104857601};
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
		struct tt_conn *t = tt_connect(NC);
		uint8_t f[8] = {0};
		kput32(f, (uint32_t)sizes[i]);
		tt_feed(t, f, sizeof f);
		tt_pump(NC, 100);
		cr_expect(tt_gone(t), "size %d did not close", sizes[i]);
		size_t have;
		(void)tt_sent(t, &have);
		cr_expect_eq(have, 0);
		tt_free(NC, t);
	}
}

/* Proves a peer closing mid-request frees everything: a produce whose op is
 * still with storage, a partial frame behind it, then the close. Run under
 * ASan, a leak or a use after free fails it. */
Test(netcore, peer_close_mid_request, .init = setup, .fini = teardown)
{
	struct tt_conn *t = tt_connect(NC);
	uint8_t f[14];
	api_versions(f, 9);
	tt_feed(t, f, 10); /* part of a frame */
	tt_pump(NC, 100);
	cr_expect_eq(tt_core_conn(t)->in_len, 10, "the partial frame is kept");
	tt_peer_close(t);
	tt_pump(NC, 100);
	cr_expect(tt_gone(t));
	tt_free(NC, t);
	/* A request with storage when the peer goes: freed when its op returns. */
	make_topic("t");
	t = tt_connect(NC);
	stub_store_hold(true);
	uint8_t lo[64];
	size_t lon = list_offsets(lo, 1);
	tt_feed(t, lo, lon);
	tt_feed(t, f, 5);
	tt_pump(NC, 100);
	tt_peer_close(t);
	tt_pump(NC, 100);
	cr_expect(tt_gone(t), "closed while its request is with storage");
	cr_expect_eq(sluice_netcore_conns(NC), 1, "kept by its request");
	stub_store_hold(false);
	tt_pump(NC, 100);
	cr_expect_eq(sluice_netcore_conns(NC), 0);
	tt_free(NC, t);
}

/* Proves sluice.connection.response.bytes.max pauses reading from a client
 * that does not read its responses, and reading resumes once it does. */
Test(netcore, budget_pauses_and_resumes, .init = setup, .fini = teardown)
{
	struct tt_conn *t = tt_connect(NC);
	tt_hold_sends(t, true);
	uint8_t f[14];
	int sent = 0;
	for (; sent < 2 * SLUICE_CONN_INFLIGHT_MAX && !tt_paused(t); sent++) {
		api_versions(f, sent);
		tt_feed(t, f, sizeof f);
		tt_pump(NC, 100);
	}
	cr_assert(tt_paused(t), "reading never paused");
	cr_expect_leq(sent, SLUICE_CONN_INFLIGHT_MAX);
	api_versions(f, sent);
	tt_feed(t, f, sizeof f); /* waits in the "kernel" */
	tt_pump(NC, 100);
	cr_expect_eq(tt_pending_in(t), sizeof f, "read while paused");
	tt_hold_sends(t, false);
	tt_pump(NC, 10000);
	cr_expect(!tt_paused(t));
	cr_expect_eq(tt_pending_in(t), 0);
	for (int i = 0; i <= sent; i++)
		cr_expect_eq(take_corr(t), i);
	tt_free(NC, t);
}

/* Proves that while the core runtime's backlog holds SLUICE_NET_BACKLOG_PAUSE
 * ops (storage cores behind), the network core reads no further request,
 * and reads on, answering it, once the backlog has drained. */
Test(netcore, backlog_pauses_reading, .init = setup, .fini = teardown)
{
	struct sluice_ring ring;
	struct sluice_rt storage;
	cr_assert_eq(sluice_ring_init(&ring, 1024), 0);
	cr_assert_eq(sluice_rt_init(&storage, NULL, SLUICE_RT_STORE, 0), 0);
	struct sluice_msg m = {MSG_PARTOP, (uint32_t)NC->id, &m};
	while (sluice_rt_backlog_n(&NC->rt) < SLUICE_NET_BACKLOG_PAUSE)
		cr_assert(sluice_rt_send(&NC->rt, &ring, &storage, m));
	struct tt_conn *t = tt_connect(NC);
	uint8_t f[14];
	api_versions(f, 5);
	tt_feed(t, f, sizeof f);
	tt_pump(NC, 100);
	cr_expect_eq(take_corr(t), -1, "a request read while the backlog is long");
	cr_expect(tt_paused(t), "reading goes on");
	/* The storage core catches up; each turn flushes what the ring takes. */
	for (int turns = 0; sluice_rt_backlog_n(&NC->rt) > 0 && turns < 10000; turns++) {
		struct sluice_msg got;
		while (sluice_ring_pop(&ring, &got))
			cr_assert(got.ptr == &m);
		sluice_netcore_turn(NC, 0);
	}
	cr_assert_eq(sluice_rt_backlog_n(&NC->rt), 0);
	tt_pump(NC, 1000);
	cr_expect(!tt_paused(t));
	cr_expect_eq(take_corr(t), 5, "answered once the backlog drained");
	tt_free(NC, t);
	sluice_rt_fini(&storage);
	sluice_ring_free(&ring);
}

static void count_post(void *arg) { (*(int *)arg)++; }

/* Proves the network core's turn is the core runtime's: a post (how
 * metadata completions reach the core) runs in the next turn, once. */
Test(netcore, turn_runs_posts, .init = setup, .fini = teardown)
{
	int ran = 0;
	struct sluice_rt_post p = {.fn = count_post, .arg = &ran};
	sluice_rt_post(&NC->rt, &p);
	cr_expect_eq(ran, 0, "run by the core, not the poster");
	sluice_netcore_turn(NC, 0);
	cr_expect_eq(ran, 1);
	sluice_netcore_turn(NC, 0);
	cr_expect_eq(ran, 1, "once");
}
