/* libFuzzer target for the network core's framing and the Kafka request
 * decoders behind it: each input is one request frame (the bytes after the
 * 4-byte size prefix, as the seed corpus holds them), given its size prefix
 * and fed to a fresh connection of the real network core
 * (dataplane/netcore.c) over the in-memory transport backend
 * (tests/unit/transport_test.c), in pieces whose sizes are taken from the
 * input's own bytes, so every split of a frame is tried without changing
 * what the decoders see. An input that starts with 0xff 'R' (API key
 * 0xffxx: never a valid request) is instead fed as raw wire bytes after
 * those two, size prefixes and all: pipelined frames, bad sizes, partial
 * frames. The broker is built from the same test doubles as the unit tests
 * (tests/unit/proto_stubs.c: in-memory storage, no sockets or storage
 * threads, local metadata on tmpfs). Whatever the core sends is taken and
 * checked, parked fetches are expired, and the connection is closed by the
 * peer and freed, so AddressSanitizer sees every buffer the request touched
 * and LeakSanitizer every one it forgot. Two topics always exist so that
 * produce, fetch and list-offsets inputs reach the storage path. */
#include "common/kafka/codec.h"
#include "common/log.h"
#include "control/meta.h"
#include "proto_stubs.h"
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FUZZ_TOPICS_MAX 64          /* reopen the metadata past this many topics */
#define FUZZ_REOPEN_EVERY 2000      /* ... and every so many inputs */
#define FUZZ_PIECES_MAX 64          /* pieces one input is fed in; then the rest at once */
#define FUZZ_PIECE_BYTES_MAX 97     /* the largest piece before the last */

static char dir[128];
static unsigned long runs;

static void make_topic(struct broker *b, const char *name, int32_t partitions)
{
	struct sluice_topic_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.name = name;
	spec.name_len = strlen(name);
	spec.partitions = partitions;
	spec.replication_factor = -1;
	char msg[256];
	(void)b->meta.ops->create_topic(b->meta.self, &spec, false, msg, sizeof msg, NULL);
}

/* A fresh metadata directory with the seed topics (the captured requests
 * name "captopic"). */
static void open_broker(void)
{
	struct stat st;
	const char *base = stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp";
	if (dir[0]) {
		/* Every metadata file goes (snapshot, journal, producer ids): a
		 * journal left without its snapshot is refused at open, rightly. */
		stub_broker_close();
		static const char *const files[] = {"sluice-topics", "sluice-topics.journal", "sluice-topics.tmp",
						    "sluice-producer-ids"};
		for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
			char meta[256];
			snprintf(meta, sizeof meta, "%s/%s", dir, files[i]);
			unlink(meta);
		}
	} else {
		snprintf(dir, sizeof dir, "%s/sluice-fuzz-XXXXXX", base);
		if (!mkdtemp(dir))
			abort();
	}
	struct broker *b = stub_broker_open(dir, NULL);
	if (!b)
		abort();
	make_topic(b, "captopic", 2);
	make_topic(b, "t", 3);
}

/* The metadata directory goes when the fuzzer exits normally (a crash
 * leaves it for the post-mortem). */
static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

static void remove_dir(void)
{
	stub_broker_close();
	if (dir[0])
		nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
}

static uint32_t topic_count(void)
{
	struct broker *b = stub_netcore()->b;
	struct sluice_meta_snapshot *s = b->meta.ops->acquire(b->meta.self);
	uint32_t n = s->topic_n;
	b->meta.ops->release(b->meta.self, s);
	return n;
}

/* Feed wire[0..n) in pieces of sizes taken from the input's bytes, turning
 * the network core after each. */
static void feed_split(struct conn *c, const uint8_t *wire, size_t n, const uint8_t *data, size_t size)
{
	struct tt_conn *t = c->tconn;
	size_t off = 0;
	for (size_t k = 0; off < n; k++) {
		size_t piece = n - off;
		if (k < FUZZ_PIECES_MAX && size > 0) {
			size_t cut = (size_t)data[(k * 7) % size] % FUZZ_PIECE_BYTES_MAX + 1;
			piece = cut < piece ? cut : piece;
		}
		tt_feed(t, wire + off, piece);
		off += piece;
		tt_pump(stub_netcore(), STUB_PUMP_TURNS_MAX);
		if (tt_gone(t) || c->closing)
			break;
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	open_broker();
	atexit(remove_dir);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* AlterConfigs on the broker logger can raise the level: keep it quiet. */
	sluice_log_set_level(SLUICE_LOG_ERROR);
	if (++runs % FUZZ_REOPEN_EVERY == 0 || topic_count() > FUZZ_TOPICS_MAX)
		open_broker();
	struct conn *c = stub_conn_new();
	if (!c)
		return 0;
	const uint8_t *wire = data;
	size_t n = size;
	uint8_t *framed = NULL;
	if (size >= 2 && data[0] == 0xff && data[1] == 'R') {
		wire += 2;
		n -= 2;
	} else {
		framed = malloc(size + 4);
		if (!framed)
			abort();
		kput32(framed, (uint32_t)size);
		memcpy(framed + 4, data, size);
		wire = framed;
		n = size + 4;
	}
	feed_split(c, wire, n, data, size);
	free(framed);
	uint8_t *buf;
	size_t len;
	while (stub_take_response(c, &buf, &len)) {
		/* a response must at least carry its size and correlation id */
		if (len < 8 || kbe32(buf) != len - 4)
			abort();
		free(buf);
	}
	stub_conn_free(c);
	stub_store_reset();
	return 0;
}
