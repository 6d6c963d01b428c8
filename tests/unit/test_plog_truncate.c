/* Partition log tests for what a follower does to its log
 * (storage/plog.h): appending its leader's batches verbatim and truncating
 * to a divergence point. They prove that sluice_plog_append_verbatim keeps
 * every byte (offsets, PartitionLeaderEpoch, CRC), accepts gaps, refuses
 * offsets going back and names rolled segments by the batch; that
 * sluice_plog_truncate_to cuts at batch boundaries in the active segment
 * and across segments (later segment files gone, the cut one's indexes
 * trimmed, lookups by offset and by time consistent), to the log start, to
 * a segment's base, as a no-op at or past the log end, and refuses offsets
 * below the log start; that appends continue at the new end; that a clean
 * reopen, a kill -9 after the truncation, and a stop in the middle of one
 * (its marker left behind) never bring truncated batches back; with
 * log.preallocate and pending unwritten data too; that
 * sluice_plog_truncate_fully restarts the log at an offset; and that a
 * compaction pass prepared before a truncation is not swapped in after it.
 * Real io_uring, real files, a fresh directory per test; the driver plays
 * the storage core as in test_plog.c. */
#include "batch_build.h"
#include "common/kafka/batch.h"
#include "storage/plog.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static struct {
	struct io_uring ring;
	bool ring_ready;
	char root[128];
	char dir[192];
} H;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(p);
}

static void setup(void)
{
	memset(&H, 0, sizeof H);
	snprintf(H.root, sizeof H.root, "/tmp/sluice-trunc-XXXXXX");
	cr_assert_not_null(mkdtemp(H.root));
	snprintf(H.dir, sizeof H.dir, "%s/topic-0", H.root);
	int rc = io_uring_queue_init(16, &H.ring, 0);
	cr_assert_eq(rc, 0, "io_uring unavailable: %s", strerror(-rc));
	H.ring_ready = true;
}

static void teardown(void)
{
	if (H.ring_ready)
		io_uring_queue_exit(&H.ring);
	nftw(H.root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void reap_one(void)
{
	struct io_uring_cqe *cqe;
	io_uring_submit(&H.ring);
	int rc = io_uring_wait_cqe(&H.ring, &cqe);
	cr_assert_eq(rc, 0, "io_uring_wait_cqe: %s", strerror(-rc));
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&H.ring, cqe);
	if (ud & ~(uint64_t)7)
		sluice_plog_complete((struct sluice_plog *)(uintptr_t)(ud & ~(uint64_t)7), (int)(ud & 7), res);
}

static void hook_wait_write(struct sluice_plog *l, void *arg)
{
	(void)arg;
	while (sluice_plog_write_inflight(l))
		reap_one();
}

static void hook_written(struct sluice_plog *l, void *arg) { (void)l; (void)arg; }

static void flush_log(struct sluice_plog *l)
{
	while (sluice_plog_write_pending(l)) {
		cr_assert_eq(sluice_plog_submit_write(l, &H.ring), 0);
		while (sluice_plog_write_inflight(l))
			reap_one();
	}
	cr_assert(!sluice_plog_failed(l));
}

/* Submit the pending write and leave it in flight. */
static void submit_only(struct sluice_plog *l)
{
	if (sluice_plog_write_pending(l))
		cr_assert_eq(sluice_plog_submit_write(l, &H.ring), 0);
	io_uring_submit(&H.ring);
}

struct opts {
	int64_t segment_bytes;
	bool preallocate;
};
static const struct opts BIG = {1 << 30, false};
static const struct opts SMALL = {64 << 10, false};

static struct sluice_plog *open_log(const struct opts *o, bool clean)
{
	struct sluice_plog_cfg cfg = {
		.segment_bytes = o->segment_bytes,
		.index_interval_bytes = 4096,
		.flush_interval_messages = INT64_MAX,
		.direct_io = true,
		.preallocate = o->preallocate,
	};
	struct sluice_plog_hooks hooks = {hook_wait_write, hook_written, NULL};
	struct sluice_plog *l = NULL;
	char err[256] = "";
	int rc = sluice_plog_open(H.dir, &cfg, clean, &hooks, &l, NULL, err, sizeof err);
	cr_assert_eq(rc, 0, "sluice_plog_open: %s", err);
	return l;
}

/* A batch of n records of value_len bytes, every value byte tag, record
 * timestamps ts, ts + 1, ...; BaseOffset base, PartitionLeaderEpoch epoch
 * (what a leader's log holds; a leader's append rewrites both). */
static uint8_t *mk_batch(int64_t base, int32_t epoch, int n, int64_t ts, size_t value_len, uint8_t tag, size_t *len)
{
	struct tb_rec *recs = calloc((size_t)n, sizeof *recs);
	uint8_t *val = malloc(value_len ? value_len : 1);
	memset(val, tag, value_len);
	for (int i = 0; i < n; i++) {
		recs[i].value = val;
		recs[i].value_len = (int32_t)value_len;
		recs[i].ts_delta = i;
	}
	struct kwr w;
	kwr_init(&w, 256, 1u << 30);
	int64_t maxd = tb_records(&w, recs, n);
	struct tb_hdr h = tb_hdr_default(n, ts);
	h.max_timestamp = ts + maxd;
	h.base_offset = base;
	h.leader_epoch = epoch;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, len);
	kwr_free(&w);
	free(val);
	free(recs);
	return b;
}

/* Leader-style append of a batch of n records; its timestamps start at
 * ts. Returns its base offset. */
static int64_t append(struct sluice_plog *l, int n, int64_t ts, size_t value_len, uint8_t tag)
{
	size_t len;
	uint8_t *b = mk_batch(0, -1, n, ts, value_len, tag, &len);
	int64_t base, last;
	int rc = sluice_plog_append(l, b, len, 7, -1, &base, &last);
	free(b);
	cr_assert_eq(rc, 0, "append: %d", rc);
	cr_assert_eq(last, base + n - 1);
	return base;
}

/* The batch read at offset: its base offset and first value byte (the
 * tag), CRC checked; -1 when nothing is there. */
static int64_t read_at(struct sluice_plog *l, int64_t offset, uint8_t *tag)
{
	uint8_t *buf = NULL;
	int32_t n = sluice_plog_read(l, offset, 1, true, &buf);
	if (n <= 0)
		return n == 0 ? -1 : -100 + n;
	struct sluice_batch b;
	cr_assert_eq(sluice_batch_check(buf, (size_t)n, &b), SLUICE_BATCH_OK, "CRC at %" PRId64, offset);
	if (tag)
		*tag = buf[(size_t)n - 2]; /* the last value byte (no headers follow it but their count) */
	free(buf);
	return b.base_offset;
}

/* Every batch from the log start to the written end: n_each records each,
 * tags as in want (want[k] for the k-th batch), offsets contiguous. */
static void expect_batches(struct sluice_plog *l, int n_each, const uint8_t *want, int count)
{
	int64_t off = sluice_plog_log_start(l);
	int k = 0;
	while (off < sluice_plog_written_end(l)) {
		uint8_t tag = 0;
		int64_t base = read_at(l, off, &tag);
		cr_assert_eq(base, off, "batch %d: base %" PRId64 " at offset %" PRId64, k, base, off);
		cr_assert_lt(k, count, "more batches than expected");
		cr_assert_eq(tag, want[k], "batch %d at %" PRId64 ": tag %c want %c", k, off, tag, want[k]);
		off += n_each;
		k++;
	}
	cr_assert_eq(k, count, "batches read %d, want %d", k, count);
}

static int64_t file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static void seg_file(char *out, size_t n, int64_t base, const char *ext)
{
	snprintf(out, n, "%s/%020" PRId64 "%s", H.dir, base, ext);
}

static int list_logs(int64_t *bases, int max)
{
	DIR *d = opendir(H.dir);
	cr_assert_not_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len != 24 || strcmp(de->d_name + 20, ".log") != 0)
			continue;
		cr_assert_lt(n, max);
		bases[n++] = strtoll(de->d_name, NULL, 10);
	}
	closedir(d);
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && bases[j - 1] > bases[j]; j--) {
			int64_t t = bases[j];
			bases[j] = bases[j - 1];
			bases[j - 1] = t;
		}
	return n;
}

static bool exists(const char *name)
{
	char p[400];
	snprintf(p, sizeof p, "%s/%s", H.dir, name);
	return access(p, F_OK) == 0;
}

/* The offset index file of segment base: every entry's position lies
 * inside the segment file, offsets and positions increase, and each names
 * the last offset of the batch at its position. */
static void check_index(int64_t base)
{
	char ip[300], lp[300];
	seg_file(ip, sizeof ip, base, ".index");
	seg_file(lp, sizeof lp, base, ".log");
	int64_t isize = file_size(ip), lsize = file_size(lp);
	cr_assert_geq(isize, 0, "%s missing", ip);
	cr_assert_eq(isize % 8, 0);
	int ifd = open(ip, O_RDONLY), lfd = open(lp, O_RDONLY);
	cr_assert(ifd >= 0 && lfd >= 0);
	int32_t last_pos = -1;
	for (int64_t i = 0; i < isize / 8; i++) {
		uint8_t e[8], h[61];
		cr_assert_eq(pread(ifd, e, 8, i * 8), 8);
		int32_t rel = (int32_t)kbe32(e), pos = (int32_t)kbe32(e + 4);
		cr_assert(pos > last_pos && pos < lsize, "index entry %" PRId64 ": position %d (file %" PRId64 ")", i, pos,
			  lsize);
		cr_assert_eq(pread(lfd, h, 61, pos), 61);
		int64_t last = (int64_t)kbe64(h) + (int32_t)kbe32(h + 23);
		cr_assert_eq(last, base + rel, "index entry %" PRId64 " names %" PRId64 ", batch ends at %" PRId64, i,
			     base + rel, last);
		last_pos = pos;
	}
	close(ifd);
	close(lfd);
}

/* ---- verbatim appends ------------------------------------------------------------ */

/* Proves a follower's append keeps the leader's batches byte for byte
 * (BaseOffset, PartitionLeaderEpoch, CRC), moves the log end over a gap,
 * refuses a batch that does not follow (nothing appended, the log still
 * usable), and that a leader-style append after it continues at the end. */
Test(plog_truncate, append_verbatim_keeps_bytes, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true);
	size_t l1, l2, l3;
	uint8_t *b1 = mk_batch(0, 4, 3, 1000, 100, 'a', &l1);
	uint8_t *b2 = mk_batch(3, 5, 2, 1010, 100, 'b', &l2);
	uint8_t *b3 = mk_batch(9, 5, 1, 1020, 100, 'c', &l3); /* a gap: 5..8 compacted away on the leader */
	uint8_t *all = malloc(l1 + l2);
	memcpy(all, b1, l1);
	memcpy(all + l1, b2, l2);
	int64_t last = -1;
	cr_assert_eq(sluice_plog_append_verbatim(l, all, l1 + l2, &last), 0);
	cr_expect_eq(last, 4);
	cr_assert_eq(sluice_plog_append_verbatim(l, b3, l3, &last), 0);
	cr_expect_eq(last, 9);
	cr_expect_eq(sluice_plog_log_end(l), 10);
	/* Going back, or overlapping the end: refused, nothing appended. */
	cr_expect_eq(sluice_plog_append_verbatim(l, b2, l2, &last), -EINVAL);
	cr_expect_eq(sluice_plog_log_end(l), 10);
	cr_expect(!sluice_plog_failed(l));
	flush_log(l);
	const uint8_t *want[3] = {b1, b2, b3};
	size_t wlen[3] = {l1, l2, l3};
	int64_t at[3] = {0, 3, 9};
	for (int i = 0; i < 3; i++) {
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, at[i], 1, true, &buf);
		cr_assert_eq(n, (int32_t)wlen[i], "batch %d: %d bytes", i, n);
		cr_expect_eq(memcmp(buf, want[i], wlen[i]), 0, "batch %d is byte for byte the leader's", i);
		free(buf);
	}
	/* An offset in the gap reads the batch after it. */
	cr_expect_eq(read_at(l, 6, NULL), 9);
	cr_expect_eq(append(l, 2, 2000, 10, 'd'), 10);
	flush_log(l);
	sluice_plog_close(l);
	l = open_log(&BIG, true);
	cr_expect_eq(sluice_plog_log_end(l), 12);
	uint8_t *buf = NULL;
	cr_assert_eq(sluice_plog_read(l, 3, 1, true, &buf), (int32_t)l2);
	cr_expect_eq(memcmp(buf, b2, l2), 0, "kept across a reopen");
	free(buf);
	sluice_plog_close(l);
	free(all);
	free(b1);
	free(b2);
	free(b3);
}

/* Proves a verbatim batch that rolls the segment names the new segment by
 * its own base offset (past a gap), as Kafka does. */
Test(plog_truncate, append_verbatim_roll_names_segment, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true);
	int64_t next = 0;
	for (int i = 0; i < 40; i++) {
		size_t len;
		uint8_t *b = mk_batch(next, 1, 2, 100 + i, 3000, (uint8_t)('A' + i % 26), &len);
		int64_t last;
		cr_assert_eq(sluice_plog_append_verbatim(l, b, len, &last), 0);
		free(b);
		next = last + 1 + (i == 24 ? 100 : 0); /* one gap, where a roll is due */
		flush_log(l);
	}
	int64_t bases[16];
	int n = list_logs(bases, 16);
	cr_assert_geq(n, 2);
	for (int i = 1; i < n; i++) {
		uint8_t *buf = NULL;
		cr_assert_gt(sluice_plog_read(l, bases[i], 1, true, &buf), 0);
		cr_expect_eq((int64_t)kbe64(buf), bases[i], "segment %" PRId64 " begins with its own base", bases[i]);
		free(buf);
	}
	sluice_plog_close(l);
}

/* ---- truncation ------------------------------------------------------------------ */

/* Proves truncation inside the active segment: to a batch boundary, to an
 * offset inside a batch (removed whole: the end is its base), with data
 * both written and still pending; reads stop at the new end, lookups by
 * time find nothing removed, appends continue there, and a clean reopen
 * and the index written at close agree. */
Test(plog_truncate, active_segment, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true);
	uint8_t tags[40];
	for (int i = 0; i < 20; i++) {
		tags[i] = (uint8_t)('a' + i);
		append(l, 3, 1000 + 10 * i, 1500, tags[i]);
		if (i == 11)
			flush_log(l);
	}
	cr_assert_eq(sluice_plog_log_end(l), 60);
	cr_assert_eq(sluice_plog_written_end(l), 36); /* batches 12.. still pending */
	char err[256] = "";
	/* Past the end: nothing happens. */
	cr_expect_eq(sluice_plog_truncate_to(l, 60, err, sizeof err), 0);
	cr_expect_eq(sluice_plog_truncate_to(l, 1000, err, sizeof err), 0);
	cr_expect_eq(sluice_plog_log_end(l), 60);
	/* Into pending data, at a boundary. */
	cr_assert_eq(sluice_plog_truncate_to(l, 45, err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_plog_log_end(l), 45);
	cr_expect_eq(sluice_plog_written_end(l), 45, "what is kept is written");
	expect_batches(l, 3, tags, 15);
	/* Inside a batch: 31 is in [30, 32], which goes whole. */
	cr_assert_eq(sluice_plog_truncate_to(l, 31, err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_plog_log_end(l), 30);
	cr_expect_eq(read_at(l, 30, NULL), -1, "nothing at the new end");
	cr_expect_eq(read_at(l, 33, NULL), -101, "past it: out of range");
	int64_t ts = -1;
	cr_expect_eq(sluice_plog_offset_for_time(l, 1000 + 10 * 9, &ts), 27);
	cr_expect_eq(sluice_plog_offset_for_time(l, 1000 + 10 * 10, &ts), -1, "removed batches are not found by time");
	/* Appends continue at the end. */
	for (int i = 10; i < 14; i++) {
		tags[i] = (uint8_t)('A' + i);
		cr_expect_eq(append(l, 3, 5000 + 10 * i, 1500, tags[i]), 3 * i);
	}
	flush_log(l);
	expect_batches(l, 3, tags, 14);
	cr_expect_eq(sluice_plog_offset_for_time(l, 5000, &ts), 30);
	sluice_plog_close(l);
	check_index(0);
	l = open_log(&BIG, true);
	cr_expect_eq(sluice_plog_log_end(l), 42);
	expect_batches(l, 3, tags, 14);
	sluice_plog_close(l);
}

/* Proves truncation across segments: later segment files are deleted, the
 * segment holding the offset becomes the active one (its indexes trimmed:
 * lookups by offset inside it still work; its index rewritten at close
 * names only batches kept), and rolls continue from there; the same after
 * a reopen. Truncation to a segment's base offset empties that segment. */
Test(plog_truncate, across_segments, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true);
	uint8_t tags[200];
	for (int i = 0; i < 120; i++) {
		tags[i] = (uint8_t)(' ' + i % 90);
		append(l, 2, 100 + i, 1400, tags[i]);
	}
	flush_log(l);
	int64_t bases[64];
	int n = list_logs(bases, 64);
	cr_assert_geq(n, 4, "segments: %d", n);
	char err[256];
	/* Into the middle of the second segment, inside a batch. */
	int64_t target = bases[1] + 9;
	cr_assert_eq(sluice_plog_truncate_to(l, target, err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_plog_log_end(l), target - 1);
	int64_t now[64];
	cr_expect_eq(list_logs(now, 64), 2, "later segments are gone");
	char p[300];
	seg_file(p, sizeof p, bases[2], ".index");
	cr_expect_eq(file_size(p), -1);
	expect_batches(l, 2, tags, (int)(target - 1) / 2);
	for (int64_t off = bases[1]; off < target - 1; off++)
		cr_expect_eq(read_at(l, off, NULL), off - off % 2, "lookup of %" PRId64 " in the cut segment", off);
	/* Appends roll on from there. */
	int kept = (int)(target - 1) / 2;
	for (int i = kept; i < kept + 80; i++) {
		tags[i] = (uint8_t)('0' + i % 40);
		cr_expect_eq(append(l, 2, 900 + i, 1400, tags[i]), 2 * i);
	}
	flush_log(l);
	expect_batches(l, 2, tags, kept + 80);
	sluice_plog_close(l);
	n = list_logs(bases, 64);
	for (int i = 0; i < n; i++)
		check_index(bases[i]);
	l = open_log(&SMALL, true);
	cr_expect_eq(sluice_plog_log_end(l), 2 * (kept + 80));
	expect_batches(l, 2, tags, kept + 80);
	/* To a segment's base: that segment is emptied, later ones go. */
	cr_assert_eq(sluice_plog_truncate_to(l, bases[2], err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_plog_log_end(l), bases[2]);
	cr_expect_eq(list_logs(now, 64), 3);
	seg_file(p, sizeof p, bases[2], ".log");
	cr_expect_eq(file_size(p), 0);
	cr_expect_eq(append(l, 2, 7000, 100, 'z'), bases[2]);
	flush_log(l);
	sluice_plog_close(l);
}

/* Proves truncation to the log start empties the log (also after
 * DeleteRecords moved it inside a batch: the start comes down to the
 * batch's base, so nothing deleted reappears), and that an offset below
 * the log start is refused with nothing changed. */
Test(plog_truncate, to_log_start, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true);
	for (int i = 0; i < 60; i++)
		append(l, 4, 100 + i, 1400, 'x');
	flush_log(l);
	cr_assert_eq(sluice_plog_delete_records(l, 50), 50);
	char err[256];
	cr_expect_eq(sluice_plog_truncate_to(l, 49, err, sizeof err), -EINVAL);
	cr_expect_eq(sluice_plog_log_end(l), 240);
	cr_assert_eq(sluice_plog_truncate_to(l, 50, err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_plog_log_end(l), 48, "the batch [48, 51] went whole");
	cr_expect_eq(sluice_plog_log_start(l), 48);
	cr_expect_eq(read_at(l, 47, NULL), -101, "below the start: out of range");
	cr_expect_eq(read_at(l, 48, NULL), -1);
	sluice_plog_close(l);
	l = open_log(&SMALL, true);
	cr_expect_eq(sluice_plog_log_start(l), 48);
	cr_expect_eq(sluice_plog_log_end(l), 48);
	cr_expect_eq(append(l, 1, 5, 10, 'y'), 48);
	flush_log(l);
	sluice_plog_close(l);
}

/* Proves a kill -9 right after a truncation (and after appends that
 * followed it, some written, some not) never brings truncated batches
 * back: recovery finds exactly the batches kept plus those written after,
 * in the cut segment and with later segments gone. With log.preallocate,
 * so the cut segment's preallocated zeros are recovery's to handle too. */
static void crash_after_truncate(bool preallocate)
{
	struct opts o = SMALL;
	o.preallocate = preallocate;
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		io_uring_queue_exit(&H.ring);
		if (io_uring_queue_init(16, &H.ring, 0) < 0)
			_exit(3);
		struct sluice_plog *l = open_log(&o, true);
		for (int i = 0; i < 100; i++)
			append(l, 2, 100 + i, 1400, 'o');
		flush_log(l);
		char err[256];
		if (sluice_plog_truncate_to(l, 61, err, sizeof err) != 0 || sluice_plog_log_end(l) != 60)
			_exit(5);
		for (int i = 0; i < 10; i++)
			append(l, 2, 500 + i, 1400, 'n');
		flush_log(l);
		append(l, 2, 600, 1400, 'u'); /* never written */
		_exit(sluice_plog_written_end(l) == 80 ? 0 : 4);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	cr_expect(!exists("sluice-truncate"), "no marker left by a finished truncation");
	struct sluice_plog *l = open_log(&o, false);
	cr_expect_eq(sluice_plog_log_end(l), 80);
	uint8_t tags[40];
	for (int i = 0; i < 40; i++)
		tags[i] = i < 30 ? 'o' : 'n';
	expect_batches(l, 2, tags, 40);
	sluice_plog_close(l);
}

Test(plog_truncate, crash_after_truncate, .init = setup, .fini = teardown) { crash_after_truncate(false); }
Test(plog_truncate, crash_after_truncate_preallocated, .init = setup, .fini = teardown)
{
	crash_after_truncate(true);
}

/* Proves the quick cut (inside the active segment, at or above the
 * recovery point: a follower dropping an old leader's last batches) leaves
 * no marker and does not move the recovery point, and that a kill -9 after
 * it and after the appends that replaced the cut batches recovers exactly
 * the batches kept and those written after: the cut ones never come back
 * over the new ones. */
Test(plog_truncate, quick_cut_then_crash, .init = setup, .fini = teardown)
{
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		io_uring_queue_exit(&H.ring);
		if (io_uring_queue_init(16, &H.ring, 0) < 0)
			_exit(3);
		struct sluice_plog *l = open_log(&BIG, true);
		for (int i = 0; i < 20; i++)
			append(l, 2, 100 + i, 1400, 'o');
		flush_log(l);
		char rp_before[64] = "";
		char p[400];
		snprintf(p, sizeof p, "%s/sluice-recovery-point", H.dir);
		FILE *f = fopen(p, "r");
		if (f) {
			if (!fgets(rp_before, sizeof rp_before, f))
				rp_before[0] = 0;
			fclose(f);
		}
		char err[256];
		if (sluice_plog_truncate_to(l, 31, err, sizeof err) != 0 || sluice_plog_log_end(l) != 30)
			_exit(5);
		if (exists("sluice-truncate"))
			_exit(6); /* the quick cut writes no marker */
		char rp_after[64] = "";
		f = fopen(p, "r");
		if (f) {
			if (!fgets(rp_after, sizeof rp_after, f))
				rp_after[0] = 0;
			fclose(f);
		}
		if (strcmp(rp_before, rp_after) != 0)
			_exit(7); /* nor moves the recovery point */
		for (int i = 0; i < 3; i++)
			append(l, 2, 500 + i, 700, 'n'); /* shorter than the cut ones: their bytes lie past the end */
		flush_log(l);
		_exit(sluice_plog_written_end(l) == 36 ? 0 : 4);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	struct sluice_plog *l = open_log(&BIG, false);
	cr_expect_eq(sluice_plog_log_end(l), 36);
	uint8_t tags[18];
	for (int i = 0; i < 18; i++)
		tags[i] = i < 15 ? 'o' : 'n';
	expect_batches(l, 2, tags, 18);
	sluice_plog_close(l);
}

/* Proves a truncation interrupted by a stop is finished at the next open:
 * its marker durable, nothing removed yet (the state a kill -9 right after
 * the marker leaves), the open cuts the segment named in it, deletes the
 * later ones and lowers the recovery point, so recovery neither serves the
 * truncated batches nor mistakes the cut for lost data; the marker is
 * gone after. An unreadable marker refuses the open with nothing changed. */
Test(plog_truncate, marker_finished_at_open, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true);
	for (int i = 0; i < 100; i++)
		append(l, 2, 100 + i, 1400, 'o');
	flush_log(l);
	sluice_plog_close(l); /* recovery point 200 */
	int64_t bases[64];
	int n = list_logs(bases, 64);
	cr_assert_geq(n, 3);
	/* The batch holding bases[1] + 4 starts 4 in, at byte 2 * 1400-ish:
	 * find its position from the file. */
	char p[300];
	seg_file(p, sizeof p, bases[1], ".log");
	int fd = open(p, O_RDONLY);
	uint8_t h[61];
	int64_t pos = 0;
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(pread(fd, h, 61, pos), 61);
		pos += 12 + (int32_t)kbe32(h + 8);
	}
	close(fd);
	char m[400];
	snprintf(m, sizeof m, "%s/sluice-truncate", H.dir);
	FILE *f = fopen(m, "w");
	fprintf(f, "%" PRId64 " %" PRId64 " %" PRId64 "\n", bases[1] + 4, bases[1], pos);
	fclose(f);
	l = open_log(&SMALL, false);
	cr_expect_eq(sluice_plog_log_end(l), bases[1] + 4);
	cr_expect(!exists("sluice-truncate"));
	int64_t now[64];
	cr_expect_eq(list_logs(now, 64), 2);
	cr_expect_eq(append(l, 1, 9, 10, 'q'), bases[1] + 4, "no offset skipped: the cut is not taken for lost data");
	flush_log(l);
	sluice_plog_close(l);
	f = fopen(m, "w");
	fprintf(f, "garbage\n");
	fclose(f);
	struct sluice_plog_cfg cfg = {.segment_bytes = SMALL.segment_bytes, .index_interval_bytes = 4096,
				      .flush_interval_messages = INT64_MAX, .direct_io = true};
	struct sluice_plog_hooks hooks = {hook_wait_write, hook_written, NULL};
	char err[256] = "";
	l = NULL;
	cr_expect_eq(sluice_plog_open(H.dir, &cfg, false, &hooks, &l, NULL, err, sizeof err), SLUICE_PLOG_OPEN_UNUSABLE);
	cr_expect(strstr(err, "truncation marker") != NULL, "%s", err);
	cr_expect_eq(list_logs(now, 64), 2, "nothing changed");
}

/* Proves truncation waits for a group commit in flight (the write it
 * submitted completes first) and that data appended meanwhile below the
 * cut is kept. */
Test(plog_truncate, write_in_flight, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true);
	uint8_t tags[10];
	for (int i = 0; i < 6; i++) {
		tags[i] = (uint8_t)('a' + i);
		append(l, 5, 10, 3000, tags[i]);
		if (i == 3)
			submit_only(l);
	}
	cr_assert(sluice_plog_write_inflight(l));
	char err[256];
	cr_assert_eq(sluice_plog_truncate_to(l, 25, err, sizeof err), 0, "%s", err);
	cr_expect(!sluice_plog_write_inflight(l));
	cr_expect_eq(sluice_plog_log_end(l), 25);
	expect_batches(l, 5, tags, 5);
	sluice_plog_close(l);
	l = open_log(&BIG, false);
	expect_batches(l, 5, tags, 5);
	sluice_plog_close(l);
}

/* Proves sluice_plog_truncate_fully restarts the log empty at any offset
 * (above its end, or below it), files and all, across a reopen and a
 * crash, appends continuing there. */
Test(plog_truncate, truncate_fully, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true);
	for (int i = 0; i < 80; i++)
		append(l, 2, 100 + i, 1400, 'o');
	flush_log(l);
	char err[256];
	cr_assert_eq(sluice_plog_truncate_fully(l, 1000, err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_plog_log_start(l), 1000);
	cr_expect_eq(sluice_plog_log_end(l), 1000);
	cr_expect_eq(sluice_plog_written_end(l), 1000);
	int64_t bases[64];
	cr_expect_eq(list_logs(bases, 64), 1);
	cr_expect_eq(bases[0], 1000);
	cr_expect_eq(append(l, 2, 5, 100, 'p'), 1000);
	flush_log(l);
	sluice_plog_close(l);
	l = open_log(&SMALL, false);
	cr_expect_eq(sluice_plog_log_start(l), 1000);
	cr_expect_eq(sluice_plog_log_end(l), 1002);
	cr_assert_eq(sluice_plog_truncate_fully(l, 10, err, sizeof err), 0, "%s", err);
	sluice_plog_close(l);
	l = open_log(&SMALL, true);
	cr_expect_eq(sluice_plog_log_start(l), 10);
	cr_expect_eq(sluice_plog_log_end(l), 10);
	sluice_plog_close(l);
}

/* A batch of n records all keyed "k" (so compaction keeps only the newest). */
static int64_t append_keyed(struct sluice_plog *l, int n, int64_t ts)
{
	struct tb_rec recs[8];
	uint8_t val[1400];
	memset(val, 'v', sizeof val);
	cr_assert_leq(n, 8);
	for (int i = 0; i < n; i++)
		recs[i] = (struct tb_rec){.key = (const uint8_t *)"k", .key_len = 1, .value = val,
					  .value_len = (int32_t)sizeof val, .ts_delta = i};
	struct kwr w;
	kwr_init(&w, 256, 1u << 30);
	int64_t maxd = tb_records(&w, recs, n);
	struct tb_hdr h = tb_hdr_default(n, ts);
	h.max_timestamp = ts + maxd;
	size_t len;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, &len);
	kwr_free(&w);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 1, -1, &base, &last), 0);
	free(b);
	return base;
}

/* Proves a compaction pass prepared before a truncation is not swapped in
 * after it (the segments it read may since hold other batches), while the
 * same pass prepared after the truncation is. */
Test(plog_truncate, compaction_pass_across_truncation, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true);
	for (int i = 0; i < 120; i++)
		append_keyed(l, 2, 100 + i);
	flush_log(l);
	struct sluice_plog_clean_policy pol = {.delete_retention_ms = 0, .budget_bytes = 1 << 30};
	struct sluice_plog_clean_job *j = sluice_plog_clean_prepare(l, 1000000, &pol);
	cr_assert_not_null(j);
	sluice_plog_clean_run(j);
	char err[256];
	int64_t end = sluice_plog_log_end(l);
	cr_assert_eq(sluice_plog_truncate_to(l, end - 2, err, sizeof err), 0, "%s", err);
	append_keyed(l, 2, 100);
	flush_log(l);
	cr_expect_eq(sluice_plog_clean_finish(l, j), 0, "nothing swapped in");
	cr_expect_eq(sluice_plog_log_end(l), end);
	j = sluice_plog_clean_prepare(l, 1000000, &pol);
	cr_assert_not_null(j);
	sluice_plog_clean_run(j);
	cr_expect_gt(sluice_plog_clean_finish(l, j), 0, "a pass prepared after the truncation cleans");
	sluice_plog_close(l);
}
