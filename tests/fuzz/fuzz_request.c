/* libFuzzer target for the Kafka request decoders: each input is handed to
 * sluice_proto_on_frame as one complete frame (the bytes after the 4-byte
 * size prefix) on a fresh connection of a broker built from the same test
 * doubles as the unit tests (tests/unit/proto_stubs.c: in-memory storage, no
 * sockets or storage threads, local metadata on tmpfs). Whatever the handler
 * answers is taken off the connection, parked fetches are expired, and the
 * connection is freed, so AddressSanitizer sees every buffer the request
 * touched and LeakSanitizer every one it forgot. Two topics always exist so
 * that produce, fetch and list-offsets inputs reach the storage path. */
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
	(void)stub_frame(c, data, size);
	uint8_t *buf;
	size_t len;
	while (stub_take_response(c, &buf, &len)) {
		/* a response must at least carry its size and correlation id */
		if (len < 8 || ((size_t)buf[0] << 24 | (size_t)buf[1] << 16 | (size_t)buf[2] << 8 | buf[3]) != len - 4)
			abort();
		free(buf);
	}
	stub_conn_free(c);
	stub_store_reset();
	return 0;
}
