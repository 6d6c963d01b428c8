/* Storage-core append benchmark: the partition log alone (no network, no
 * Kafka decoding), fed pre-built, already-validated record batches, written
 * the way a storage core writes them (copied into tail extents from the
 * core's pool, registered with the ring; one group commit per partition in
 * flight, one O_DIRECT write per extent it touches), so its MB/s can be set
 * beside fio's sequential O_DIRECT write on the same directory in the same
 * run (perf/storage/bench-storage.sh prints the ratio).
 *
 * usage: bench-storage DIR [--bytes N] [--batch-bytes B] [--partitions P]
 *                          [--commit-batches K] [--fsync] [--preallocate]
 *   N: total bytes appended (default 2 GiB); B: batch size (default 64 KiB,
 *   100-byte records); P: partitions written round-robin (default 1);
 *   K: appends per partition between group commits (default 16); at most
 *   4 x K batches per partition appended and not yet committed (producers
 *   waiting for acks); --fsync: fdatasync linked to every group commit
 *   (flush.messages=1); --preallocate: log.preallocate=true. */
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "storage/extent.h"
#include "storage/plog.h"
#include <errno.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PARTITIONS_MAX 64

static struct io_uring ring;

static void reap_one(void)
{
	struct io_uring_cqe *cqe;
	if (io_uring_wait_cqe(&ring, &cqe) < 0)
		return;
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&ring, cqe);
	if (ud)
		sluice_plog_complete((struct sluice_plog *)(uintptr_t)(ud & ~7ull), (int)(ud & 7), res);
}

static void wait_write(struct sluice_plog *l, void *arg)
{
	(void)arg;
	while (sluice_plog_write_inflight(l)) {
		io_uring_submit(&ring);
		reap_one();
	}
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench-storage DIR [--bytes N] [--batch-bytes B] [--partitions P] "
				"[--commit-batches K] [--fsync]\n");
		return 2;
	}
	const char *dir = argv[1];
	int64_t total = 2ll << 30, batch_bytes = 64 << 10;
	int parts = 1, commit_batches = 16;
	bool fsync_each = false, preallocate = false;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--bytes") && i + 1 < argc)
			total = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--batch-bytes") && i + 1 < argc)
			batch_bytes = strtoll(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--partitions") && i + 1 < argc)
			parts = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--commit-batches") && i + 1 < argc)
			commit_batches = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fsync"))
			fsync_each = true;
		else if (!strcmp(argv[i], "--preallocate"))
			preallocate = true;
		else {
			fprintf(stderr, "bench-storage: unknown argument %s\n", argv[i]);
			return 2;
		}
	}
	if (parts < 1 || parts > PARTITIONS_MAX || batch_bytes < 256 || commit_batches < 1) {
		fprintf(stderr, "bench-storage: bad arguments\n");
		return 2;
	}
	/* One batch of 100-byte records, built once (validated by construction). */
	int32_t nrec = (int32_t)(batch_bytes / 120);
	struct sluice_record_kv *recs = calloc((size_t)nrec, sizeof *recs);
	static char value[100];
	memset(value, 'v', sizeof value);
	for (int32_t i = 0; i < nrec; i++)
		recs[i] = (struct sluice_record_kv){NULL, -1, value, (int32_t)sizeof value};
	struct kwr w;
	kwr_init(&w, (size_t)batch_bytes + 4096, (size_t)batch_bytes * 2);
	if (sluice_batch_build(&w, recs, nrec, 1700000000000) < 0) {
		fprintf(stderr, "bench-storage: cannot build a batch\n");
		return 1;
	}
	if (io_uring_queue_init(256, &ring, 0) < 0) {
		fprintf(stderr, "bench-storage: io_uring_queue_init failed\n");
		return 77;
	}
	mkdir(dir, 0755);
	struct sluice_plog *logs[PARTITIONS_MAX];
	struct sluice_plog_cfg cfg = {.segment_bytes = 1ll << 30, .index_interval_bytes = 4096,
				      .flush_interval_messages = fsync_each ? 1 : INT64_MAX,
				      .chunk_bytes = 1u << 20, .direct_io = true,
				      .preallocate = preallocate};
	/* The storage core's extent pool: buffers registered with the ring. */
	struct sluice_pool *pool = sluice_pool_new(cfg.chunk_bytes, 256u << 20, &ring);
	if (!pool) {
		fprintf(stderr, "bench-storage: no memory for the extent pool\n");
		return 1;
	}
	cfg.pool = pool;
	struct sluice_plog_hooks hooks = {wait_write, NULL, NULL};
	for (int p = 0; p < parts; p++) {
		char pdir[1024], err[256];
		snprintf(pdir, sizeof pdir, "%s/bench-%d", dir, p);
		if (sluice_plog_open(pdir, &cfg, true, &hooks, &logs[p], NULL, err, sizeof err) < 0) {
			fprintf(stderr, "bench-storage: %s\n", err);
			return 1;
		}
	}
	/* The storage core never stops appending while a partition's write is in
	 * flight: appends pile up in the tail chunk and go out as the next group
	 * commit. Producers bound what they leave unacknowledged (Kafka clients:
	 * max.in.flight.requests.per.connection=5), modelled here as at most
	 * 4 x K batches appended but not yet committed per partition. */
	int64_t written = 0, batches = 0;
	int64_t unacked_max = 4ll * commit_batches * nrec;
	int since_commit = 0;
	double t0 = now_s();
	while (written < total) {
		bool appended = false;
		for (int p = 0; p < parts && written < total; p++) {
			if (sluice_plog_log_end(logs[p]) - sluice_plog_written_end(logs[p]) >= unacked_max)
				continue;
			int64_t base, last;
			if (sluice_plog_append(logs[p], w.buf, w.len, 0, -1, &base, &last) < 0) {
				fprintf(stderr, "bench-storage: append failed\n");
				return 1;
			}
			written += (int64_t)w.len;
			batches++;
			appended = true;
		}
		/* group commit every K rounds of appends, or whenever appends are
		 * held back: one write per partition with nothing in flight */
		if (++since_commit >= commit_batches || !appended) {
			since_commit = 0;
			for (int p = 0; p < parts; p++)
				if (sluice_plog_write_pending(logs[p]))
					(void)sluice_plog_submit_write(logs[p], &ring);
			io_uring_submit(&ring);
		}
		if (!appended)
			reap_one();
		struct io_uring_cqe *cqe;
		while (io_uring_peek_cqe(&ring, &cqe) == 0) {
			uint64_t ud = io_uring_cqe_get_data64(cqe);
			int res = cqe->res;
			io_uring_cqe_seen(&ring, cqe);
			if (ud)
				sluice_plog_complete((struct sluice_plog *)(uintptr_t)(ud & ~7ull), (int)(ud & 7), res);
		}
	}
	for (int p = 0; p < parts; p++)
		while (sluice_plog_write_inflight(logs[p]) || sluice_plog_write_pending(logs[p])) {
			if (sluice_plog_write_pending(logs[p]))
				(void)sluice_plog_submit_write(logs[p], &ring);
			io_uring_submit(&ring);
			if (sluice_plog_write_inflight(logs[p]))
				reap_one();
		}
	double secs = now_s() - t0;
	int64_t hw = 0;
	for (int p = 0; p < parts; p++)
		hw += sluice_plog_written_end(logs[p]);
	printf("{\"bytes\": %" PRId64 ", \"batches\": %" PRId64 ", \"records\": %" PRId64 ", \"seconds\": %.3f, "
	       "\"mb_per_s\": %.1f, \"partitions\": %d, \"batch_bytes\": %zu, \"fsync_per_commit\": %s}\n",
	       written, batches, hw, secs, (double)written / secs / 1e6, parts, w.len, fsync_each ? "true" : "false");
	for (int p = 0; p < parts; p++)
		sluice_plog_close(logs[p]);
	sluice_pool_destroy(pool);
	io_uring_queue_exit(&ring);
	kwr_free(&w);
	free(recs);
	return 0;
}
