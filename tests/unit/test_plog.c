/* Partition log unit tests, on a real io_uring and real files in a fresh
 * temporary directory per test. They prove that storage/plog: assigns
 * offsets and serves whole batches by offset (min_one, max_bytes, offsets
 * inside a batch, out of range -> -1) only once the group-commit write that
 * carries them has completed; keeps working when appends, segment rolls and
 * writes overlap; finds offsets by timestamp (plain and compressed batches);
 * rolls segments into Kafka-named files (20-digit base offset .log, .index,
 * .timeindex, with Kafka's index entry layout); survives a clean close and
 * reopen unchanged; and after an unclean stop (a torn last batch, a flipped
 * byte, a zeroed tail, a missing or garbage offset index, a process killed
 * with writes half-done) reopens with every earlier batch readable and no
 * corrupt batch ever served, cutting only a torn end of the last segment
 * past the recovery point; damage anywhere else is kept and answered with
 * -3 (CORRUPT_MESSAGE), no segment is deleted and no offset reused, and
 * segment files that contradict their names or each other make the open
 * fail with nothing changed on disk. Offsets that jump past 2^31 within a
 * segment roll it, and hostile timestamps overflow nothing. Both the
 * O_DIRECT and the buffered write paths are
 * run. The driver here plays the storage core: it submits the log's writes,
 * reaps completions (kind = user_data & 7) and implements the wait_write hook. */
#include "batch_build.h"
#include "common/kafka/batch.h"
#include "common/kafka/compress.h"
#include "storage/extent.h"
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
#include <zlib.h>

/* ---- harness: a one-log storage core ------------------------------------------ */

static struct {
	struct io_uring ring;
	bool ring_ready;
	int64_t commits;
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
	snprintf(H.root, sizeof H.root, "/tmp/sluice-plog-XXXXXX");
	cr_assert_not_null(mkdtemp(H.root));
	snprintf(H.dir, sizeof H.dir, "%s/topic-0", H.root);
	int rc = io_uring_queue_init(16, &H.ring, 0);
	if (rc < 0)
		cr_skip_test("io_uring unavailable: %s", strerror(-rc));
	H.ring_ready = true;
}

static void teardown(void)
{
	if (H.ring_ready)
		io_uring_queue_exit(&H.ring);
	nftw(H.root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Reap one completion and hand it to its log. */
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

static void hook_written(struct sluice_plog *l, void *arg)
{
	(void)l; (void)arg;
	H.commits++;
}

/* Submit the pending group-commit write, if any, and wait for it. */
static void flush_log(struct sluice_plog *l)
{
	while (sluice_plog_write_pending(l)) {
		cr_assert_eq(sluice_plog_submit_write(l, &H.ring), 0);
		while (sluice_plog_write_inflight(l))
			reap_one();
	}
	cr_assert(!sluice_plog_failed(l));
}

struct opts {
	int64_t segment_bytes;
	int64_t flush_messages;
	bool direct;
	bool preallocate;
	size_t chunk_bytes;       /* extent size of a private pool; 0: the default */
	struct sluice_pool *pool; /* a shared pool (a storage core's), or NULL */
};
static const struct opts BIG = {1 << 30, INT64_MAX, true, false};
static const struct opts SMALL = {64 << 10, INT64_MAX, true, false};

static struct sluice_plog *open_log(const struct opts *o, bool clean, struct sluice_plog_recovery *rec)
{
	struct sluice_plog_cfg cfg = {
		.segment_bytes = o->segment_bytes,
		.index_interval_bytes = 4096,
		.flush_interval_messages = o->flush_messages,
		.chunk_bytes = o->chunk_bytes,
		.pool = o->pool,
		.direct_io = o->direct,
		.preallocate = o->preallocate,
	};
	struct sluice_plog_hooks hooks = {hook_wait_write, hook_written, NULL};
	struct sluice_plog *l = NULL;
	char err[256] = "";
	int rc = sluice_plog_open(H.dir, &cfg, clean, &hooks, &l, rec, err, sizeof err);
	cr_assert_eq(rc, 0, "sluice_plog_open: %s", err);
	cr_assert_not_null(l);
	return l;
}

/* ---- batches with recognisable content --------------------------------------------- */

/* A batch of n records; every value byte is tag, so a batch's identity can be
 * checked after reading it back; timestamps base_ts + i. */
static uint8_t *mk_batch(int n, int64_t base_ts, size_t value_len, uint8_t tag, size_t *len)
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
	struct tb_hdr h = tb_hdr_default(n, base_ts);
	h.max_timestamp = base_ts + maxd;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, len);
	kwr_free(&w);
	free(val);
	free(recs);
	return b;
}

/* Value tag of the first record of a stored batch. */
static uint8_t first_value_tag(const uint8_t *batch, size_t len)
{
	struct krd r;
	krd_init(&r, batch + 61, len - 61);
	(void)krd_varint(&r); /* length */
	(void)krd_i8(&r);
	(void)krd_varlong(&r);
	(void)krd_varint(&r);
	int32_t kl = krd_varint(&r);
	if (kl > 0)
		krd_skip(&r, (size_t)kl);
	int32_t vl = krd_varint(&r);
	cr_assert(!r.err && vl > 0);
	return *r.p;
}

static int64_t append_batch(struct sluice_plog *l, int n, int64_t base_ts, size_t value_len, uint8_t tag)
{
	size_t len = 0;
	uint8_t *b = mk_batch(n, base_ts, value_len, tag, &len);
	int64_t base, last;
	int rc = sluice_plog_append(l, b, len, 3, -1, &base, &last);
	free(b);
	cr_assert_eq(rc, 0, "append: %d", rc);
	cr_assert_eq(last, base + n - 1);
	return base;
}

/* What the tests expect to find: batch k starts at base[k], has n[k]
 * records and value tag tag[k]. */
struct expect {
	int64_t base[4096];
	int32_t n[4096];
	uint8_t tag[4096];
	int count;
};

static void expect_add(struct expect *e, int64_t base, int n, uint8_t tag)
{
	cr_assert_lt(e->count, 4096);
	e->base[e->count] = base;
	e->n[e->count] = n;
	e->tag[e->count] = tag;
	e->count++;
}

/* Read everything from from_index on, batch by batch, with the CRC checked,
 * offsets contiguous and each batch the one expected. Returns batches read. */
static int verify_all(struct sluice_plog *l, const struct expect *e, int from_index, int32_t max_bytes)
{
	int k = from_index;
	int64_t off = e->base[from_index];
	int64_t written = sluice_plog_written_end(l);
	while (off < written) {
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, off, max_bytes, true, &buf);
		cr_assert_gt(n, 0, "read at %" PRId64 " (written end %" PRId64 ") gave %d", off, written, n);
		size_t pos = 0;
		while (pos < (size_t)n) {
			struct sluice_batch b;
			enum sluice_batch_result r = sluice_batch_check(buf + pos, (size_t)n - pos, &b);
			cr_assert_eq(r, SLUICE_BATCH_OK, "batch at offset %" PRId64 ": %s", off, sluice_batch_result_name(r));
			cr_assert_lt(k, e->count, "more batches than appended");
			cr_assert_eq(b.base_offset, e->base[k], "batch %d base %" PRId64 " want %" PRId64, k, b.base_offset,
				     e->base[k]);
			cr_assert_eq(b.records_count, e->n[k]);
			cr_assert_eq(first_value_tag(buf + pos, (size_t)sluice_batch_total_bytes(&b)), e->tag[k],
				     "batch %d content", k);
			off = b.base_offset + b.last_offset_delta + 1;
			pos += (size_t)sluice_batch_total_bytes(&b);
			k++;
		}
		free(buf);
	}
	return k - from_index;
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

/* Base offsets of the .log files in the partition directory, sorted. */
static int list_logs(int64_t *bases, int max)
{
	DIR *d = opendir(H.dir);
	cr_assert_not_null(d);
	int n = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len < 4 || strcmp(de->d_name + len - 4, ".log") != 0)
			continue;
		cr_assert_eq(len, 24, "segment file name %s is not 20 digits + .log", de->d_name);
		for (int i = 0; i < 20; i++)
			cr_assert(de->d_name[i] >= '0' && de->d_name[i] <= '9', "name %s", de->d_name);
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

/* Byte positions of the batches in a segment file (from their Length fields). */
static int batch_positions(const char *path, int64_t *pos, int max)
{
	int fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	int64_t size = file_size(path), p = 0;
	int n = 0;
	while (p + 12 <= size && n < max) {
		uint8_t h[12];
		cr_assert_eq(pread(fd, h, 12, p), 12);
		int32_t len = (int32_t)kbe32(h + 8);
		if (len <= 0)
			break;
		pos[n++] = p;
		p += 12 + len;
	}
	close(fd);
	return n;
}

static void flip_byte(const char *path, int64_t at)
{
	int fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	uint8_t b;
	cr_assert_eq(pread(fd, &b, 1, at), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

/* ---- append, commit, read -------------------------------------------------------- */

/* Proves a new log starts empty: offsets 0, nothing to read at 0, offset 1
 * out of range, and the first segment file is 00000000000000000000.log. */
Test(plog, open_empty, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	cr_expect_eq(sluice_plog_log_start(l), 0);
	cr_expect_eq(sluice_plog_log_end(l), 0);
	cr_expect_eq(sluice_plog_written_end(l), 0);
	uint8_t *buf = (uint8_t *)"x";
	cr_expect_eq(sluice_plog_read(l, 0, 1 << 20, true, &buf), 0);
	cr_expect_null(buf);
	cr_expect_eq(sluice_plog_read(l, 1, 1 << 20, true, &buf), -1);
	cr_expect_eq(sluice_plog_read(l, -1, 1 << 20, true, &buf), -1);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	cr_expect_geq(file_size(p), 0, "%s missing", p);
	sluice_plog_close(l);
}

static void append_read(const struct opts *o)
{
	struct sluice_plog *l = open_log(o, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 10; i++) {
		int64_t base = append_batch(l, 3, 1000 + i * 10, 100, (uint8_t)('A' + i));
		cr_assert_eq(base, i * 3, "offsets are assigned consecutively");
		expect_add(e, base, 3, (uint8_t)('A' + i));
	}
	cr_expect_eq(sluice_plog_log_end(l), 30);
	/* Nothing is visible before the write completes. */
	cr_expect_eq(sluice_plog_written_end(l), 0);
	uint8_t *buf = NULL;
	cr_expect_eq(sluice_plog_read(l, 0, 1 << 20, true, &buf), 0);
	cr_expect(sluice_plog_write_pending(l));
	int64_t commits = H.commits;
	flush_log(l);
	cr_expect_gt(H.commits, commits, "committed hook called");
	cr_expect_eq(sluice_plog_written_end(l), 30);
	cr_expect(!sluice_plog_write_pending(l));
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 10);
	cr_expect_eq(verify_all(l, e, 0, 1), 10, "min_one: one whole batch per read");
	/* An offset inside a batch returns the batch holding it. */
	int32_t n = sluice_plog_read(l, 4, 1 << 20, true, &buf);
	cr_assert_gt(n, 0);
	cr_expect_eq((int64_t)kbe64(buf), 3);
	free(buf);
	/* max_bytes: whole batches only; without min_one a too-small budget gives 0. */
	size_t one = 0;
	free(mk_batch(3, 0, 100, 'x', &one));
	n = sluice_plog_read(l, 0, (int32_t)(one * 2 + one / 2), false, &buf);
	cr_expect_eq(n, (int32_t)(2 * one), "2.5 batches of budget -> 2 batches");
	free(buf);
	buf = NULL;
	n = sluice_plog_read(l, 0, (int32_t)one - 1, false, &buf);
	cr_expect_eq(n, 0);
	cr_expect_null(buf);
	n = sluice_plog_read(l, 0, 0, true, &buf);
	cr_expect_eq(n, (int32_t)one, "min_one returns the first batch whole");
	free(buf);
	/* The stored copy carries the assigned offset and the leader epoch. */
	n = sluice_plog_read(l, 27, 1 << 20, true, &buf);
	cr_assert_eq(n, (int32_t)one);
	struct sluice_batch b;
	cr_expect_eq(sluice_batch_check(buf, (size_t)n, &b), SLUICE_BATCH_OK);
	cr_expect_eq(b.base_offset, 27);
	cr_expect_eq(b.leader_epoch, 3);
	free(buf);
	/* At the end: nothing yet; beyond the end: out of range. */
	cr_expect_eq(sluice_plog_read(l, 30, 1 << 20, true, &buf), 0);
	cr_expect_eq(sluice_plog_read(l, 31, 1 << 20, true, &buf), -1);
	cr_expect_eq(sluice_plog_read(l, INT64_MAX, 1 << 20, true, &buf), -1);
	cr_expect_eq(sluice_plog_size_bytes(l), (int64_t)(10 * one));
	sluice_plog_close(l);
	free(e);
}

/* Proves offsets are assigned, committed only after the write completes,
 * and read back whole by offset, with O_DIRECT writes. */
Test(plog, append_read_direct, .init = setup, .fini = teardown) { append_read(&BIG); }

/* Proves the same with buffered writes (the path used where O_DIRECT is refused). */
Test(plog, append_read_buffered, .init = setup, .fini = teardown)
{
	struct opts o = BIG;
	o.direct = false;
	append_read(&o);
}

/* Proves the fsync path: with flush.messages=1 every write is followed by a
 * linked fdatasync, and the written end moves only when that completes. */
Test(plog, linked_fsync, .init = setup, .fini = teardown)
{
	struct opts o = BIG;
	o.flush_messages = 1;
	struct sluice_plog *l = open_log(&o, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 5; i++) {
		expect_add(e, append_batch(l, 2, 500, 50, (uint8_t)('a' + i)), 2, (uint8_t)('a' + i));
		cr_assert_eq(sluice_plog_submit_write(l, &H.ring), 0);
		cr_expect(sluice_plog_write_inflight(l));
		int64_t written = sluice_plog_written_end(l);
		reap_one(); /* the write; the fsync is still outstanding */
		if (sluice_plog_write_inflight(l))
			cr_expect_eq(sluice_plog_written_end(l), written, "no commit before the fsync");
		while (sluice_plog_write_inflight(l))
			reap_one();
		cr_expect_eq(sluice_plog_written_end(l), (i + 1) * 2);
	}
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 5);
	sluice_plog_close(l);
	free(e);
}

/* Proves group commit with overlapping work: appends made while a write is
 * in flight (including into the same partial block) are committed by the
 * next write, and never become visible early. */
Test(plog, appends_during_inflight_write, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	int tag = 0;
	for (int round = 0; round < 30; round++) {
		for (int k = 0; k < 1 + round % 3; k++, tag++)
			expect_add(e, append_batch(l, 1 + tag % 4, 100, 37 + (size_t)tag * 13 % 900, (uint8_t)tag), 1 + tag % 4,
				   (uint8_t)tag);
		if (!sluice_plog_write_inflight(l) && sluice_plog_write_pending(l))
			cr_assert_eq(sluice_plog_submit_write(l, &H.ring), 0);
		int64_t leo_at_submit = sluice_plog_log_end(l);
		/* more appends while the write is in flight */
		expect_add(e, append_batch(l, 2, 100, 200, (uint8_t)tag), 2, (uint8_t)tag);
		tag++;
		while (sluice_plog_write_inflight(l))
			reap_one();
		cr_expect_leq(sluice_plog_written_end(l), leo_at_submit, "data appended after the submit is not yet committed");
	}
	flush_log(l);
	cr_expect_eq(sluice_plog_written_end(l), sluice_plog_log_end(l));
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	cr_expect_eq(verify_all(l, e, 0, 1000), e->count);
	sluice_plog_close(l);
	free(e);
}

/* Proves a batch larger than the 1 MiB tail chunk is accepted and served. */
Test(plog, batch_larger_than_chunk, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	expect_add(e, append_batch(l, 2, 100, 1000, 'p'), 2, 'p');
	expect_add(e, append_batch(l, 3, 100, 1 << 20, 'Q'), 3, 'Q');
	expect_add(e, append_batch(l, 1, 100, 10, 'r'), 1, 'r');
	flush_log(l);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 3);
	sluice_plog_close(l);
	l = open_log(&BIG, false, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 3);
	sluice_plog_close(l);
	free(e);
}

/* ---- time index ----------------------------------------------------------------- */

static uint8_t *gzip_records(const uint8_t *in, size_t n, size_t *out_len)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
	size_t cap = deflateBound(&z, (uLong)n) + 64;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
	*out_len = cap - z.avail_out;
	deflateEnd(&z);
	return out;
}

/* Proves offset_for_time returns the first record whose timestamp is >= the
 * target, resolving inside plain and gzip-compressed batches, and -1 past the
 * last timestamp. */
Test(plog, offset_for_time, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	/* batch 0: offsets 0-4, ts 1000..1004 */
	(void)append_batch(l, 5, 1000, 20, 'a');
	/* batch 1: offsets 5-9, gzip, ts 2000, 2010, ..., 2040 */
	struct tb_rec recs[5];
	for (int i = 0; i < 5; i++)
		recs[i] = (struct tb_rec){NULL, 0, "zz", 2, i * 10};
	struct kwr w;
	kwr_init(&w, 256, 1 << 20);
	(void)tb_records(&w, recs, 5);
	size_t zlen = 0, len = 0;
	uint8_t *z = gzip_records(w.buf, w.len, &zlen);
	struct tb_hdr h = tb_hdr_default(5, 2000);
	h.max_timestamp = 2040;
	h.attributes = 1; /* gzip */
	uint8_t *b = tb_wrap(&h, z, zlen, &len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0);
	cr_assert_eq(base, 5);
	free(b);
	free(z);
	kwr_free(&w);
	/* batch 2: offsets 10-12, ts 3000..3002 */
	(void)append_batch(l, 3, 3000, 20, 'c');
	flush_log(l);
	const struct { int64_t ts, off, found; } cases[] = {
		{0, 0, 1000}, {1000, 0, 1000}, {1003, 3, 1003}, {1005, 5, 2000}, {2000, 5, 2000},
		{2015, 7, 2020}, {2040, 9, 2040}, {2041, 10, 3000}, {3002, 12, 3002},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		int64_t found = -7;
		int64_t off = sluice_plog_offset_for_time(l, cases[i].ts, &found);
		cr_expect_eq(off, cases[i].off, "ts %" PRId64 ": offset %" PRId64 " want %" PRId64, cases[i].ts, off,
			     cases[i].off);
		cr_expect_eq(found, cases[i].found, "ts %" PRId64 ": timestamp %" PRId64, cases[i].ts, found);
	}
	int64_t found;
	cr_expect_eq(sluice_plog_offset_for_time(l, 3003, &found), -1);
	sluice_plog_close(l);
}

/* ---- segments --------------------------------------------------------------------- */

/* Fill a log with 64 KiB segments; returns the expectations. */
static struct expect *fill_segments(struct sluice_plog *l, int batches, size_t value_len)
{
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < batches; i++) {
		uint8_t tag = (uint8_t)(i % 250 + 1);
		expect_add(e, append_batch(l, 4, 10000 + i * 4, value_len, tag), 4, tag);
		if (i % 3 == 2)
			flush_log(l);
	}
	flush_log(l);
	return e;
}

/* Proves segments roll at segment.bytes into files named by their 20-digit
 * base offset, each .log starting with the batch at that offset, closed
 * segments carrying .index and .timeindex in Kafka's layout (big-endian
 * 4-byte relative offset + 4-byte position, the offset being the last one
 * of the batch that starts at the position, as Kafka writes it; 8-byte
 * timestamp + 4-byte relative offset), and every offset is readable across
 * segments. */
Test(plog, segment_roll_and_names, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 60, 1200); /* ~5 KB batches, ~12 per segment */
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 4, "only %d segments", nseg);
	cr_expect_eq(bases[0], 0);
	for (int s = 0; s < nseg; s++) {
		char p[300];
		seg_file(p, sizeof p, bases[s], ".log");
		int fd = open(p, O_RDONLY);
		uint8_t h[8];
		cr_assert_eq(pread(fd, h, 8, 0), 8);
		close(fd);
		cr_expect_eq((int64_t)kbe64(h), bases[s], "%s starts with offset %" PRId64, p, (int64_t)kbe64(h));
		if (s + 1 < nseg) {
			cr_expect_leq(file_size(p), SMALL.segment_bytes, "closed segment within segment.bytes");
			char ip[300], tp[300];
			seg_file(ip, sizeof ip, bases[s], ".index");
			seg_file(tp, sizeof tp, bases[s], ".timeindex");
			int64_t isz = file_size(ip), tsz = file_size(tp);
			cr_expect(isz > 0 && isz % 8 == 0, "%s size %" PRId64, ip, isz);
			cr_expect(tsz > 0 && tsz % 12 == 0, "%s size %" PRId64, tp, tsz);
			/* index entries point at batch starts, in order */
			uint8_t *ib = malloc((size_t)isz);
			fd = open(ip, O_RDONLY);
			cr_assert_eq(pread(fd, ib, (size_t)isz, 0), isz);
			close(fd);
			cr_expect_eq(kbe32(ib + 4), 0, "first entry position 0");
			int lfd = open(p, O_RDONLY);
			for (int64_t k = 0; k < isz / 8; k++) {
				uint32_t rel = kbe32(ib + k * 8), pos = kbe32(ib + k * 8 + 4);
				uint8_t bh[SLUICE_BATCH_HEADER_BYTES];
				cr_assert_eq(pread(lfd, bh, sizeof bh, pos), (ssize_t)sizeof bh);
				int64_t last = (int64_t)kbe64(bh) + (int32_t)kbe32(bh + SLUICE_BATCH_OFF_LAST_DELTA);
				cr_expect_eq(last, bases[s] + rel, "index entry %" PRId64 " of %s: offset %" PRId64
					     " names batch ending at %" PRId64, k, ip, bases[s] + rel, last);
			}
			close(lfd);
			free(ib);
		}
	}
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	/* every batch start is readable on its own */
	for (int k = 0; k < e->count; k++) {
		uint8_t *buf;
		int32_t n = sluice_plog_read(l, e->base[k] + 1, 1, true, &buf);
		cr_assert_gt(n, 0);
		cr_expect_eq((int64_t)kbe64(buf), e->base[k]);
		free(buf);
	}
	sluice_plog_close(l);
	free(e);
}

/* Proves a roll that happens while a write is in flight goes through the
 * wait_write hook and loses nothing. */
Test(plog, roll_with_write_in_flight, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 40; i++) {
		uint8_t tag = (uint8_t)(i + 1);
		expect_add(e, append_batch(l, 2, 5000, 3000, tag), 2, tag);
		if (!sluice_plog_write_inflight(l) && sluice_plog_write_pending(l)) {
			cr_assert_eq(sluice_plog_submit_write(l, &H.ring), 0);
			io_uring_submit(&H.ring); /* leave it in flight; the next roll must wait */
		}
	}
	while (sluice_plog_write_inflight(l))
		reap_one();
	flush_log(l);
	int64_t bases[64];
	cr_expect_geq(list_logs(bases, 64), 2);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	free(e);
}

/* Proves close + clean reopen preserves everything: offsets, written end,
 * every batch, offset_for_time, and that appends continue at the old end. */
Test(plog, clean_reopen, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 45, 1500);
	int64_t leo = sluice_plog_log_end(l), size = sluice_plog_size_bytes(l);
	int64_t ts_found1, off1 = sluice_plog_offset_for_time(l, 10000 + 30 * 4 + 2, &ts_found1);
	sluice_plog_close(l);
	struct sluice_plog_recovery rec;
	l = open_log(&SMALL, true, &rec);
	cr_expect_eq(sluice_plog_log_end(l), leo);
	cr_expect_eq(sluice_plog_written_end(l), leo);
	cr_expect_eq(sluice_plog_size_bytes(l), size);
	cr_expect_eq(rec.bytes_truncated, 0);
	cr_expect_eq(rec.segments_deleted, 0);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	int64_t ts_found2, off2 = sluice_plog_offset_for_time(l, 10000 + 30 * 4 + 2, &ts_found2);
	cr_expect_eq(off2, off1);
	cr_expect_eq(ts_found2, ts_found1);
	expect_add(e, append_batch(l, 4, 99999, 100, 0xEE), 4, 0xEE);
	cr_expect_eq(e->base[e->count - 1], leo);
	flush_log(l);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	/* and an unclean open of a cleanly closed log changes nothing either */
	l = open_log(&SMALL, false, &rec);
	cr_expect_eq(rec.bytes_truncated, 0);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	free(e);
}

/* Proves that after a clean restart, offset_for_time still finds a record
 * whose timestamp is the segment's maximum when that record lies early in a
 * closed segment (timestamps need not grow: CreateTime comes from clients).
 * Regression: a trusted closed segment's max_ts was once computed only from
 * the batches after its last index entry, so the segment was skipped and
 * the lookup answered -1. */
Test(plog, offset_for_time_after_reopen_non_monotonic, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	/* segment 0: ts 1000, then 9000 (the maximum), then 2000.. (lower) */
	(void)append_batch(l, 1, 1000, 3000, 'a');
	int64_t peak = append_batch(l, 1, 9000, 3000, 'b');
	for (int i = 0; i < 40; i++)
		(void)append_batch(l, 1, 2000 + i, 3000, 'c');
	flush_log(l);
	int64_t bases[64];
	cr_assert_geq(list_logs(bases, 64), 2, "need a closed segment");
	int64_t found;
	cr_expect_eq(sluice_plog_offset_for_time(l, 8000, &found), peak, "before restart");
	sluice_plog_close(l);
	l = open_log(&SMALL, true, NULL);
	int64_t off = sluice_plog_offset_for_time(l, 8000, &found);
	cr_expect_eq(off, peak, "after restart: offset %" PRId64 ", want %" PRId64, off, peak);
	sluice_plog_close(l);
}

/* ---- recovery ------------------------------------------------------------------------ */

/* Forget the recovery point, as if the log had crashed before its first
 * roll or clean close: a torn write can only lie past the recovery point
 * (everything before it was synced), so the tests of torn tails start here. */
static void drop_recovery_point(void)
{
	char rp[300];
	snprintf(rp, sizeof rp, "%s/sluice-recovery-point", H.dir);
	cr_assert_eq(unlink(rp), 0);
}

/* Proves a torn last batch (the file cut mid-batch past the recovery point)
 * is dropped on an unclean open, every earlier batch is served, and appends
 * continue after it. */
Test(plog, recovery_torn_last_batch, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 8; i++)
		expect_add(e, append_batch(l, 3, 100, 300, (uint8_t)('a' + i)), 3, (uint8_t)('a' + i));
	flush_log(l);
	sluice_plog_close(l);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	int64_t pos[16];
	cr_assert_eq(batch_positions(p, pos, 16), 8);
	int64_t size = file_size(p);
	int64_t cut = pos[7] + (size - pos[7]) / 2;
	cr_assert_eq(truncate(p, cut), 0);
	drop_recovery_point();
	struct sluice_plog_recovery rec;
	l = open_log(&BIG, false, &rec);
	cr_expect(rec.crc_checked);
	cr_expect_eq(rec.bytes_truncated, cut - pos[7]);
	cr_expect_eq(sluice_plog_log_end(l), e->base[7]);
	e->count = 7;
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 7);
	uint8_t *buf;
	cr_expect_eq(sluice_plog_read(l, e->base[7] + 1, 1 << 20, true, &buf), -1, "torn batch's offsets are gone");
	expect_add(e, append_batch(l, 2, 100, 10, 'Z'), 2, 'Z');
	cr_expect_eq(e->base[7], 21);
	flush_log(l);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 8);
	int64_t logical = sluice_plog_size_bytes(l);
	sluice_plog_close(l);
	cr_expect_eq(file_size(p), logical, "closed file holds exactly the batches");
	free(e);
}

/* Proves a flipped byte in the middle of the active segment past the
 * recovery point fails that batch's CRC on an unclean open: the log is
 * truncated there (as Kafka does) and everything before it is served intact. */
Test(plog, recovery_flipped_byte_active_segment, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 10; i++)
		expect_add(e, append_batch(l, 2, 100, 500, (uint8_t)('a' + i)), 2, (uint8_t)('a' + i));
	flush_log(l);
	sluice_plog_close(l);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	int64_t pos[16];
	cr_assert_eq(batch_positions(p, pos, 16), 10);
	int64_t size = file_size(p);
	flip_byte(p, pos[5] + 61 + 200); /* inside batch 5's records */
	drop_recovery_point();
	struct sluice_plog_recovery rec;
	l = open_log(&BIG, false, &rec);
	cr_expect_eq(rec.bytes_truncated, size - pos[5]);
	cr_expect_eq(sluice_plog_log_end(l), e->base[5]);
	cr_expect_eq(sluice_plog_written_end(l), e->base[5]);
	e->count = 5;
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 5);
	sluice_plog_close(l);
	cr_expect_eq(file_size(p), pos[5]);
	free(e);
}

/* Proves a flipped byte in a closed segment that recovery checks (here: the
 * recovery-point file was lost, so every segment is CRC-checked) deletes
 * nothing: the damaged segment is reported and kept byte for byte, its
 * batches before the damage are served, a fetch at the damaged batch (and
 * at every offset after it in that segment) answers -3 (CORRUPT_MESSAGE),
 * every later segment is kept and served, and the log end is where it was,
 * so no offset is given out twice. Regression: recovery truncated the
 * segment there and deleted every later segment, acknowledged data
 * included, and reused their offsets. */
Test(plog, recovery_flipped_byte_closed_segment_kept, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 60, 1200);
	int64_t leo = sluice_plog_log_end(l);
	sluice_plog_close(l);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 4);
	char p[300];
	seg_file(p, sizeof p, bases[1], ".log");
	int64_t pos[64], size = file_size(p);
	int nb = batch_positions(p, pos, 64);
	cr_assert_geq(nb, 4);
	int bad = nb / 2;
	flip_byte(p, pos[bad] + 100);
	drop_recovery_point();
	int fd = open(p, O_RDONLY);
	uint8_t h[8];
	cr_assert_eq(pread(fd, h, 8, pos[bad]), 8);
	close(fd);
	int64_t bad_offset = (int64_t)kbe64(h);
	struct sluice_plog_recovery rec;
	l = open_log(&SMALL, false, &rec);
	cr_expect_eq(rec.segments_deleted, 0);
	cr_expect_eq(rec.segments_damaged, 1);
	cr_expect_eq(rec.bytes_truncated, 0);
	cr_expect_eq(sluice_plog_log_end(l), leo, "the log end stays: no offset is reused");
	cr_expect_eq(sluice_plog_written_end(l), leo);
	int64_t left[64];
	cr_expect_eq(list_logs(left, 64), nseg, "no segment deleted");
	cr_expect_eq(file_size(p), size, "the damaged segment is kept whole");
	int k = 0;
	while (k < e->count && e->base[k] < bad_offset)
		k++;
	struct expect *before = calloc(1, sizeof *before), *after = calloc(1, sizeof *after);
	for (int i = 0; i < e->count; i++) {
		if (i < k)
			expect_add(before, e->base[i], e->n[i], e->tag[i]);
		else if (e->base[i] >= bases[2])
			expect_add(after, e->base[i], e->n[i], e->tag[i]);
	}
	/* up to the damage: served, and the read stops there */
	int64_t off = 0;
	int got = 0;
	while (off < bad_offset) {
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, off, 1 << 20, true, &buf);
		cr_assert_gt(n, 0, "read at %" PRId64 ": %d", off, n);
		for (int32_t q = 0; q < n;) {
			struct sluice_batch b;
			cr_assert_eq(sluice_batch_check(buf + q, (size_t)(n - q), &b), SLUICE_BATCH_OK);
			cr_assert_eq(b.base_offset, before->base[got]);
			got++;
			off = b.base_offset + b.last_offset_delta + 1;
			q += sluice_batch_total_bytes(&b);
		}
		free(buf);
	}
	cr_expect_eq(got, before->count);
	for (int64_t o = bad_offset; o < bases[2]; o++) {
		uint8_t *buf = NULL;
		cr_expect_eq(sluice_plog_read(l, o, 1 << 20, true, &buf), -3, "offset %" PRId64 " in the damage", o);
		cr_expect_null(buf);
	}
	cr_expect_eq(verify_all(l, after, 0, 1 << 20), after->count, "later segments served");
	/* the log continues at its old end */
	int64_t next = append_batch(l, 1, 5, 10, 0x77);
	cr_expect_eq(next, leo);
	expect_add(after, next, 1, 0x77);
	flush_log(l);
	sluice_plog_close(l);
	/* and the same after a clean restart (the damaged segment is trusted by
	 * its index up to its last entry, then found damaged, and kept) */
	l = open_log(&SMALL, true, &rec);
	cr_expect_eq(sluice_plog_log_end(l), leo + 1);
	cr_expect_eq(verify_all(l, after, 0, 1 << 20), after->count);
	uint8_t *buf = NULL;
	cr_expect_eq(sluice_plog_read(l, bad_offset, 1 << 20, true, &buf), -3);
	cr_expect_eq(file_size(p), size);
	sluice_plog_close(l);
	free(before);
	free(after);
	free(e);
}

/* Proves a zeroed tail (zeros appended after the last batch, as a
 * preallocated or padded file leaves them) is cut off on an unclean open and
 * new batches go right after the real data. */
Test(plog, recovery_zeroed_tail, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 6; i++)
		expect_add(e, append_batch(l, 2, 100, 700, (uint8_t)('a' + i)), 2, (uint8_t)('a' + i));
	flush_log(l);
	sluice_plog_close(l);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	int64_t size = file_size(p);
	cr_assert_eq(truncate(p, size + 12345), 0); /* extends with zeros */
	struct sluice_plog_recovery rec;
	l = open_log(&BIG, false, &rec);
	cr_expect_eq(rec.bytes_truncated, 12345);
	cr_expect_eq(sluice_plog_log_end(l), 12);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 6);
	expect_add(e, append_batch(l, 1, 100, 5, 'z'), 1, 'z');
	flush_log(l);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 7);
	int64_t logical = sluice_plog_size_bytes(l);
	cr_expect_gt(logical, size);
	sluice_plog_close(l);
	cr_expect_eq(file_size(p), logical, "zeros gone, new batch right after the old data");
	free(e);
}

/* Proves a closed segment whose .index was deleted, or replaced by garbage,
 * has its index rebuilt on open: every offset in it is found again. */
Test(plog, recovery_missing_or_bad_index, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 40, 1500);
	sluice_plog_close(l);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 3);
	char ip[300];
	seg_file(ip, sizeof ip, bases[0], ".index");
	cr_assert_eq(unlink(ip), 0);
	seg_file(ip, sizeof ip, bases[1], ".index");
	int fd = open(ip, O_WRONLY | O_TRUNC);
	uint8_t junk[64];
	for (size_t i = 0; i < sizeof junk; i++)
		junk[i] = (uint8_t)(i * 37 + 11);
	cr_assert_eq(write(fd, junk, sizeof junk), (ssize_t)sizeof junk);
	close(fd);
	for (int clean = 1; clean >= 0; clean--) {
		l = open_log(&SMALL, clean, NULL);
		cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count, "clean=%d", clean);
		for (int k = 0; k < e->count; k++) {
			uint8_t *buf;
			int32_t n = sluice_plog_read(l, e->base[k] + e->n[k] - 1, 1, true, &buf);
			cr_assert_gt(n, 0);
			cr_expect_eq((int64_t)kbe64(buf), e->base[k], "offset %" PRId64, e->base[k] + e->n[k] - 1);
			free(buf);
		}
		sluice_plog_close(l);
	}
	free(e);
}

/* Proves a real crash: a child process appends, commits some batches,
 * appends more that are never written, and exits without closing anything.
 * The unclean reopen serves exactly the committed batches and cuts the
 * O_DIRECT block padding off the file. */
Test(plog, recovery_after_process_crash, .init = setup, .fini = teardown)
{
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 7; i++)
		expect_add(e, i * 3, 3, (uint8_t)('k' + i));
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		io_uring_queue_exit(&H.ring);
		if (io_uring_queue_init(16, &H.ring, 0) < 0)
			_exit(3);
		struct sluice_plog *l = open_log(&BIG, true, NULL);
		for (int i = 0; i < 7; i++)
			(void)append_batch(l, 3, 100, 333, (uint8_t)('k' + i));
		flush_log(l);
		for (int i = 0; i < 4; i++)
			(void)append_batch(l, 3, 100, 333, 'X'); /* never written */
		_exit(sluice_plog_written_end(l) == 21 ? 0 : 4);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	struct sluice_plog_recovery rec;
	struct sluice_plog *l = open_log(&BIG, false, &rec);
	cr_expect(rec.crc_checked);
	cr_expect_eq(sluice_plog_log_end(l), 21);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 7);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	cr_expect_eq(file_size(p), sluice_plog_size_bytes(l), "padding cut off");
	sluice_plog_close(l);
	free(e);
}

/* ---- recovery keeps what it cannot prove is garbage ------------------------------- */

/* Every file of the partition directory (name, size, content hash), to
 * prove an open changed nothing on disk. */
struct dir_snap {
	char name[128][64];
	int64_t size[128];
	uint64_t hash[128];
	int n;
};

static uint64_t file_hash(const char *path)
{
	uint64_t h = 1469598103934665603ull;
	FILE *f = fopen(path, "rb");
	if (!f)
		return 0;
	int c;
	while ((c = fgetc(f)) != EOF)
		h = (h ^ (uint8_t)c) * 1099511628211ull;
	fclose(f);
	return h;
}

static void dir_snapshot(struct dir_snap *d)
{
	memset(d, 0, sizeof *d);
	DIR *dd = opendir(H.dir);
	cr_assert_not_null(dd);
	struct dirent *de;
	while ((de = readdir(dd)) && d->n < 128) {
		if (de->d_name[0] == '.' || strlen(de->d_name) >= 64)
			continue;
		char p[400];
		snprintf(p, sizeof p, "%s/%s", H.dir, de->d_name);
		snprintf(d->name[d->n], 64, "%s", de->d_name);
		d->size[d->n] = file_size(p);
		d->hash[d->n] = file_hash(p);
		d->n++;
	}
	closedir(dd);
}

static void expect_unchanged(const struct dir_snap *before)
{
	struct dir_snap now;
	dir_snapshot(&now);
	cr_expect_eq(now.n, before->n, "files in the directory: %d, were %d", now.n, before->n);
	for (int i = 0; i < before->n; i++) {
		int j = 0;
		while (j < now.n && strcmp(now.name[j], before->name[i]) != 0)
			j++;
		cr_expect_lt(j, now.n, "%s is gone", before->name[i]);
		if (j < now.n)
			cr_expect(now.size[j] == before->size[i] && now.hash[j] == before->hash[i], "%s changed",
				  before->name[i]);
	}
}

static int try_open(bool clean, char *err, size_t errlen, struct sluice_plog **out)
{
	struct sluice_plog_cfg cfg = {.segment_bytes = SMALL.segment_bytes, .index_interval_bytes = 4096,
				      .flush_interval_messages = INT64_MAX, .direct_io = true};
	struct sluice_plog_hooks hooks = {hook_wait_write, hook_written, NULL};
	*out = NULL;
	err[0] = '\0';
	return sluice_plog_open(H.dir, &cfg, clean, &hooks, out, NULL, err, errlen);
}

static void copy_file(const char *from, const char *to, int64_t skip)
{
	FILE *in = fopen(from, "rb"), *out = fopen(to, "wb");
	cr_assert(in && out);
	cr_assert_eq(fseek(in, (long)skip, SEEK_SET), 0);
	int c;
	while ((c = getc(in)) != EOF)
		putc(c, out);
	fclose(in);
	fclose(out);
}

/* Proves the start-up from the issue: after a clean stop, a closed segment
 * cut mid-batch (and another with a whole batch zeroed, a header included)
 * deletes nothing and reuses no offset: every segment file stays, the
 * batches before the damage are served, a fetch at the damage answers -3
 * (CORRUPT_MESSAGE; the zeroed header answered -2, KAFKA_STORAGE_ERROR),
 * every later segment is served, and appends continue at the old end.
 * Regression: recovery truncated the cut segment, deleted every later
 * segment and handed their offsets out again. */
Test(plog, damaged_closed_segments_after_clean_stop, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 60, 1200);
	int64_t leo = sluice_plog_log_end(l);
	sluice_plog_close(l);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 5);
	char p[300];
	/* segment 2: cut in the middle of its third batch from the end */
	seg_file(p, sizeof p, bases[2], ".log");
	int64_t pos[64];
	int nb = batch_positions(p, pos, 64);
	cr_assert_geq(nb, 4);
	cr_assert_eq(truncate(p, pos[nb - 3] + 100), 0);
	int64_t cut_size = file_size(p);
	/* segment 0: its second batch zeroed, header and all */
	char p0[300];
	seg_file(p0, sizeof p0, bases[0], ".log");
	int64_t pos0[64];
	cr_assert_geq(batch_positions(p0, pos0, 64), 4);
	int fd = open(p0, O_WRONLY);
	uint8_t zeros[8192] = {0};
	cr_assert_eq(pwrite(fd, zeros, (size_t)(pos0[2] - pos0[1]), pos0[1]), pos0[2] - pos0[1]);
	close(fd);
	for (int round = 0; round < 2; round++) {
		struct sluice_plog_recovery rec;
		l = open_log(&SMALL, true, &rec);
		int64_t left[64];
		cr_expect_eq(list_logs(left, 64), nseg, "round %d: no segment deleted", round);
		cr_expect_eq(file_size(p), cut_size, "the cut segment is kept as it is");
		cr_expect_eq(sluice_plog_log_end(l), leo + round, "round %d: the log end stays", round);
		for (int k = 0; k < e->count; k++) {
			uint8_t *buf = NULL;
			int32_t n = sluice_plog_read(l, e->base[k], 1 << 20, true, &buf);
			bool zeroed = e->base[k] >= bases[0] + 4 && e->base[k] < bases[0] + 8;
			/* after the zeroed batch the walk from the index entry before
			 * it cannot step over it: -3, unless a later entry helps */
			bool behind = e->base[k] >= bases[0] + 8 && e->base[k] < bases[1];
			if (behind && n == -3)
				continue;
			bool cut = e->base[k] >= bases[2] && e->base[k] < bases[3] &&
				   e->base[k] >= bases[2] + 4 * (nb - 3);
			if (zeroed || cut) {
				cr_expect_eq(n, -3, "round %d: offset %" PRId64 " lies in damage: %d", round, e->base[k], n);
			} else {
				cr_assert_gt(n, 0, "round %d: offset %" PRId64 " gave %d", round, e->base[k], n);
				struct sluice_batch b;
				cr_expect_eq(sluice_batch_check(buf, (size_t)n, &b), SLUICE_BATCH_OK);
				cr_expect_eq(b.base_offset, e->base[k]);
				cr_expect_eq(first_value_tag(buf, (size_t)sluice_batch_total_bytes(&b)), e->tag[k]);
			}
			free(buf);
		}
		if (round == 0) {
			cr_expect_eq(append_batch(l, 1, 5, 10, 0x55), leo, "no offset reused");
			flush_log(l);
		}
		sluice_plog_close(l);
	}
	free(e);
}

/* Proves the active segment cut after a clean stop is not a torn write
 * (the clean stop synced it and wrote the log end as the recovery point):
 * its bytes are kept, the batches before the cut are served, the offsets
 * it lost answer -3, and the log continues at the old end in a new segment,
 * so no acknowledged offset is handed out again. Regression: the segment
 * was cut back and offsets 15-23 reused. */
Test(plog, active_segment_cut_after_clean_stop, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	for (int i = 0; i < 8; i++)
		(void)append_batch(l, 3, 100, 300, (uint8_t)('a' + i));
	flush_log(l);
	sluice_plog_close(l);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	int64_t pos[16];
	cr_assert_eq(batch_positions(p, pos, 16), 8);
	cr_assert_eq(truncate(p, pos[5] + 30), 0);
	for (int clean = 1; clean >= 0; clean--) {
		struct sluice_plog_recovery rec;
		l = open_log(&BIG, clean, &rec);
		cr_expect_eq(sluice_plog_log_end(l), clean ? 24 : 25, "clean=%d", clean);
		cr_expect_eq(rec.bytes_truncated, 0);
		cr_expect_eq(file_size(p), pos[5] + 30, "kept");
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, 0, 1 << 20, true, &buf);
		cr_expect_eq(n, pos[5], "the five batches before the cut");
		free(buf);
		for (int64_t o = 15; o < 24; o++) {
			buf = NULL;
			cr_expect_eq(sluice_plog_read(l, o, 1 << 20, true, &buf), -3, "offset %" PRId64, o);
		}
		if (clean) {
			cr_expect_eq(append_batch(l, 1, 5, 10, 'n'), 24);
			flush_log(l);
		}
		sluice_plog_close(l);
	}
}

/* Proves the stray segment from the issue (a copy of a later segment
 * under the lower name 00000000000000000007.log) makes the open fail with
 * a message naming the file, and changes nothing on disk; the same for a
 * copy named past the log end, and for a file whose batches overlap the
 * previous segment's; once the stray file is removed everything is served
 * again. Regression: recovery deleted five segments, set the high
 * watermark to 7 and reused offsets. */
Test(plog, stray_segment_refused, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 80, 1200);
	int64_t leo = sluice_plog_log_end(l);
	sluice_plog_close(l);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 6);
	char from[300], stray[300], err[512];
	int64_t pos0[64];
	seg_file(from, sizeof from, bases[0], ".log");
	cr_assert_geq(batch_positions(from, pos0, 64), 3);
	struct { int64_t name; int src; int64_t skip; const char *says; } cases[] = {
		{7, 3, 0, "stray or misnamed"},
		{leo + 100, 2, 0, "stray or misnamed"},
		{4, 0, pos0[1], "overlap"}, /* segment 0 from its second batch, named for it */
	};
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		seg_file(from, sizeof from, bases[cases[c].src], ".log");
		seg_file(stray, sizeof stray, cases[c].name, ".log");
		copy_file(from, stray, cases[c].skip);
		struct dir_snap snap;
		dir_snapshot(&snap);
		for (int clean = 1; clean >= 0; clean--) {
			struct sluice_plog *bad;
			int rc = try_open(clean, err, sizeof err, &bad);
			cr_expect_eq(rc, SLUICE_PLOG_OPEN_UNUSABLE, "case %zu clean=%d: open gave %d", c, clean, rc);
			cr_expect_null(bad);
			cr_expect(strstr(err, cases[c].says) != NULL, "case %zu: %s", c, err);
			char name[32];
			snprintf(name, sizeof name, "%020" PRId64 ".log", cases[c].name);
			cr_expect(strstr(err, name) != NULL, "case %zu names the file: %s", c, err);
			expect_unchanged(&snap);
		}
		cr_assert_eq(unlink(stray), 0);
		l = open_log(&SMALL, false, NULL);
		cr_expect_eq(sluice_plog_log_end(l), leo);
		cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
		sluice_plog_close(l);
	}
	free(e);
}

/* Proves a segment file replaced by a directory makes the open fail with
 * that said, and nothing on disk changes. Regression: the scan read nothing
 * from it, "truncated" it and deleted every later segment. */
Test(plog, segment_replaced_by_directory, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 45, 1500);
	sluice_plog_close(l);
	int64_t bases[64];
	cr_assert_geq(list_logs(bases, 64), 3);
	char p[300], err[512];
	seg_file(p, sizeof p, bases[1], ".log");
	char saved[320];
	snprintf(saved, sizeof saved, "%s/saved", H.root);
	cr_assert_eq(rename(p, saved), 0);
	cr_assert_eq(mkdir(p, 0755), 0);
	struct dir_snap snap;
	dir_snapshot(&snap);
	for (int clean = 1; clean >= 0; clean--) {
		struct sluice_plog *bad;
		cr_expect_eq(try_open(clean, err, sizeof err, &bad), SLUICE_PLOG_OPEN_UNUSABLE);
		cr_expect(strstr(err, "directory") != NULL, "%s", err);
		expect_unchanged(&snap);
	}
	cr_assert_eq(rmdir(p), 0);
	cr_assert_eq(rename(saved, p), 0);
	l = open_log(&SMALL, false, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	free(e);
}

/* ---- offsets and timestamps at their limits --------------------------------------- */

/* A batch holding one record whose LastOffsetDelta is delta, as compaction
 * leaves a batch that kept one record (an honest batch: its CRC is good). */
static uint8_t *mk_sparse_batch(int32_t delta, size_t value_len, uint8_t tag, size_t *len)
{
	uint8_t *b = mk_batch(1, 1000, value_len, tag, len);
	kput32(b + SLUICE_BATCH_OFF_LAST_DELTA, (uint32_t)delta);
	tb_fix_crc(b, *len);
	return b;
}

static int64_t append_sparse(struct sluice_plog *l, int32_t delta, uint8_t tag)
{
	size_t len;
	uint8_t *b = mk_sparse_batch(delta, 5000, tag, &len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0);
	free(b);
	cr_assert_eq(last, base + delta);
	return base;
}

/* Read at offset: the batch served first must be the one based at want. */
static void expect_batch_at(struct sluice_plog *l, int64_t offset, int64_t want, uint8_t tag)
{
	uint8_t *buf = NULL;
	int32_t n = sluice_plog_read(l, offset, 1, true, &buf);
	cr_assert_gt(n, 0, "read at %" PRId64 ": %d", offset, n);
	struct sluice_batch b;
	cr_assert_eq(sluice_batch_check_crc(buf, (size_t)n, &b), SLUICE_BATCH_OK);
	cr_expect_eq(b.base_offset, want, "read at %" PRId64 " served the batch at %" PRId64 ", want %" PRId64, offset,
		     b.base_offset, want);
	cr_expect_eq(first_value_tag(buf, (size_t)n), tag, "read at %" PRId64, offset);
	free(buf);
}

#define TWO31 ((int64_t)1 << 31)

/* The layout both offset tests use: offsets 0 | 1 .. 2^31 | 2^31+1 |
 * 2^31+2 .. 2^32+1 | 2^32+2, one batch each, tags A-E. */
static void expect_sparse_layout(struct sluice_plog *l)
{
	expect_batch_at(l, 0, 0, 'A');
	expect_batch_at(l, 1, 1, 'B');
	expect_batch_at(l, TWO31 / 2, 1, 'B');
	expect_batch_at(l, TWO31, 1, 'B');
	expect_batch_at(l, TWO31 + 1, TWO31 + 1, 'C');
	expect_batch_at(l, TWO31 + 2, TWO31 + 2, 'D');
	expect_batch_at(l, 2 * TWO31 + 1, TWO31 + 2, 'D');
	expect_batch_at(l, 2 * TWO31 + 2, 2 * TWO31 + 2, 'E');
	cr_expect_eq(sluice_plog_written_end(l), 2 * TWO31 + 3);
}

/* Proves honest batches whose offsets jump past 2^31 from the segment's
 * base (batches of one record with LastOffsetDelta 2^31-1) each start a
 * new segment named by their base offset, as Kafka rolls, so every index
 * entry fits its 32-bit relative offset and every fetch finds its batch,
 * before and after clean and unclean restarts. Regression: they stayed in
 * one segment, the index wrapped, and a fetch at 0 served the batch at
 * 2^31+1. */
Test(plog, offsets_beyond_32_bits_roll, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	append_sparse(l, 0, 'A');
	append_sparse(l, INT32_MAX, 'B');
	append_sparse(l, 0, 'C');
	append_sparse(l, INT32_MAX, 'D');
	append_sparse(l, 0, 'E');
	flush_log(l);
	expect_sparse_layout(l);
	sluice_plog_close(l);
	int64_t bases[16];
	int n = list_logs(bases, 16);
	cr_expect_eq(n, 5, "a segment per jump: %d", n);
	cr_expect(n == 5 && bases[1] == 1 && bases[2] == TWO31 + 1 && bases[3] == TWO31 + 2 &&
		  bases[4] == 2 * TWO31 + 2);
	for (int clean = 1; clean >= 0; clean--) {
		l = open_log(&BIG, clean, NULL);
		expect_sparse_layout(l);
		sluice_plog_close(l);
	}
}

/* Proves a segment written by older code that spans more than 2^31
 * offsets (all five batches above in one file, with the index such code
 * wrote: relative offsets wrapped to 32 bits, here looking increasing)
 * is never misread: the index is found not to match the file and the
 * segment is scanned, keeping only entries that fit, so every fetch finds
 * its batch, after clean and unclean starts; and appends to it roll. */
Test(plog, old_segment_spanning_beyond_32_bits, .init = setup, .fini = teardown)
{
	cr_assert_eq(mkdir(H.dir, 0755), 0);
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	FILE *f = fopen(p, "wb");
	int64_t base[5] = {0, 1, TWO31 + 1, TWO31 + 2, 2 * TWO31 + 2};
	int32_t delta[5] = {0, INT32_MAX, 0, INT32_MAX, 0};
	int64_t pos[5], at = 0;
	for (int i = 0; i < 5; i++) {
		size_t len;
		uint8_t *b = mk_sparse_batch(delta[i], 5000, (uint8_t)('A' + i), &len);
		kput64(b, (uint64_t)base[i]);
		cr_assert_eq(fwrite(b, 1, len, f), len);
		pos[i] = at;
		at += (int64_t)len;
		free(b);
	}
	fclose(f);
	/* the index older code wrote: (uint32)(last offset - base), position,
	 * for the first batch and for D, whose 2^32+1 wraps to 1 */
	uint8_t idx[16];
	kput32(idx, 0);
	kput32(idx + 4, 0);
	kput32(idx + 8, (uint32_t)(base[3] + delta[3]));
	kput32(idx + 12, (uint32_t)pos[3]);
	seg_file(p, sizeof p, 0, ".index");
	f = fopen(p, "wb");
	fwrite(idx, 1, sizeof idx, f);
	fclose(f);
	/* a second, empty segment after it, so the first is closed and trusted */
	seg_file(p, sizeof p, 2 * TWO31 + 3, ".log");
	f = fopen(p, "wb");
	fclose(f);
	uint8_t tidx[12];
	kput64(tidx, 1000);
	kput32(tidx + 8, 0);
	seg_file(p, sizeof p, 0, ".timeindex");
	f = fopen(p, "wb");
	fwrite(tidx, 1, sizeof tidx, f);
	fclose(f);
	char rp[300];
	snprintf(rp, sizeof rp, "%s/sluice-recovery-point", H.dir);
	f = fopen(rp, "w");
	fprintf(f, "%" PRId64 "\n", 2 * TWO31 + 3);
	fclose(f);
	for (int clean = 1; clean >= 0; clean--) {
		struct sluice_plog *l = open_log(&BIG, clean, NULL);
		expect_sparse_layout(l);
		sluice_plog_close(l);
	}
	/* the same file as the active segment: appends after it roll */
	seg_file(p, sizeof p, 2 * TWO31 + 3, ".log");
	cr_assert_eq(unlink(p), 0);
	cr_assert_eq(unlink(rp), 0);
	struct sluice_plog *l = open_log(&BIG, false, NULL);
	expect_sparse_layout(l);
	int64_t next = append_sparse(l, 0, 'F');
	flush_log(l);
	cr_expect_eq(next, 2 * TWO31 + 3);
	expect_batch_at(l, next, next, 'F');
	expect_batch_at(l, 0, 0, 'A');
	sluice_plog_close(l);
	int64_t bases[8];
	cr_expect_eq(list_logs(bases, 8), 2, "the append rolled");
}

/* Proves a record batch with MaxTimestamp INT64_MIN neither overflows the
 * segment.ms age check (UBSan in the sanitizer build) nor rolls a segment,
 * and segment.ms still rolls on real time. Regression: INT64_MIN minus the
 * first batch's timestamp wrapped to a huge age and forced a roll. */
Test(plog, timestamp_int64_min_no_roll, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	sluice_plog_set_limits(l, 0, 0, 1000);
	(void)append_batch(l, 1, 5000, 10, 'a');
	size_t len;
	uint8_t *b = mk_batch(1, INT64_MIN, 10, 'b', &len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0);
	free(b);
	/* far in the future (rolls: segment.ms past the first batch), and its
	 * records' timestamps (base + delta) pass INT64_MAX: a lookup by time
	 * reaching the second record must not overflow either */
	struct tb_rec recs[2] = {{NULL, 0, "x", 1, 0}, {NULL, 0, "y", 1, 5}};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	(void)tb_records(&w, recs, 2);
	struct tb_hdr h = tb_hdr_default(2, INT64_MAX - 1);
	h.max_timestamp = INT64_MAX;
	b = tb_wrap(&h, w.buf, w.len, &len);
	kwr_free(&w);
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0);
	free(b);
	flush_log(l);
	int64_t bases[8];
	cr_expect_eq(list_logs(bases, 8), 2, "one roll, for the far future only");
	cr_expect_eq(bases[1], 2);
	int64_t found = 0;
	cr_expect_eq(sluice_plog_offset_for_time(l, INT64_MAX, &found), 3);
	cr_expect_eq(found, INT64_MAX);
	cr_expect_eq(sluice_plog_offset_for_time(l, INT64_MIN, &found), 0);
	/* segment 0 (newest timestamp 5000) expires at 10000; segment 1 (INT64_MAX) never does */
	cr_expect_eq(sluice_plog_enforce_retention(l, 10000, 1000, -1), 1, "retention with hostile timestamps");
	cr_expect_eq(sluice_plog_log_start(l), 2);
	sluice_plog_close(l);
}

/* ---- other operations --------------------------------------------------------------- */

static int visited;
static int64_t visit_last;
static void visit(const struct sluice_batch *b, void *arg)
{
	(void)arg;
	cr_expect_gt(b->base_offset, visit_last);
	visit_last = b->base_offset;
	visited++;
}

/* Proves visit_tail walks every batch header of the last n segments in order. */
Test(plog, visit_tail, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 30, 1500);
	visited = 0;
	visit_last = -1;
	cr_expect_eq(sluice_plog_visit_tail(l, 1000, visit, NULL), 0);
	cr_expect_eq(visited, e->count);
	sluice_plog_close(l);
	free(e);
}

/* Proves delete_records moves the log start (reads below it are out of
 * range), refuses offsets past the written end, removes whole segments
 * below it, and persists it across a reopen. */
Test(plog, delete_records, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 45, 1500);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 3);
	int64_t written = sluice_plog_written_end(l);
	cr_expect_eq(sluice_plog_delete_records(l, written + 1), -1);
	int64_t cut = bases[2] + 1;
	cr_expect_eq(sluice_plog_delete_records(l, cut), cut);
	cr_expect_eq(sluice_plog_log_start(l), cut);
	uint8_t *buf;
	cr_expect_eq(sluice_plog_read(l, cut - 1, 1 << 20, true, &buf), -1);
	int64_t left[64];
	cr_expect_eq(list_logs(left, 64), nseg - 2);
	int k = 0;
	while (e->base[k] + e->n[k] <= cut)
		k++;
	int32_t n = sluice_plog_read(l, cut, 1 << 20, true, &buf);
	cr_assert_gt(n, 0);
	cr_expect_eq((int64_t)kbe64(buf), e->base[k]);
	free(buf);
	sluice_plog_close(l);
	l = open_log(&SMALL, true, NULL);
	cr_expect_eq(sluice_plog_log_start(l), cut);
	cr_expect_eq(sluice_plog_read(l, cut - 1, 1 << 20, true, &buf), -1);
	sluice_plog_close(l);
	free(e);
}

/* Proves a batch that rots on disk after a clean shutdown (a flipped byte in
 * a closed segment below the recovery point, which recovery does not rescan)
 * is never served: reading it returns -3, the batches before it in the same
 * read are still served, and every other batch stays readable. */
Test(plog, corrupt_closed_segment_not_served, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 45, 1500);
	sluice_plog_close(l);
	int64_t bases[64];
	cr_assert_geq(list_logs(bases, 64), 3);
	char p[300];
	seg_file(p, sizeof p, bases[0], ".log");
	int64_t pos[64];
	int nb = batch_positions(p, pos, 64);
	cr_assert_geq(nb, 4);
	flip_byte(p, pos[2] + 200);
	l = open_log(&SMALL, true, NULL);
	uint8_t *buf = NULL;
	cr_expect_eq(sluice_plog_read(l, e->base[2], 1 << 20, true, &buf), -3, "corrupt batch served");
	cr_expect_null(buf);
	int32_t n = sluice_plog_read(l, 0, 1 << 20, true, &buf);
	cr_assert_gt(n, 0);
	int32_t pos_in = 0, k = 0;
	while (pos_in < n) {
		struct sluice_batch b;
		cr_assert_eq(sluice_batch_check(buf + pos_in, (size_t)(n - pos_in), &b), SLUICE_BATCH_OK);
		pos_in += sluice_batch_total_bytes(&b);
		k++;
	}
	cr_expect_eq(k, 2, "only the two batches before the corrupt one");
	free(buf);
	struct expect *rest = calloc(1, sizeof *rest);
	for (int i = 3; i < e->count; i++)
		expect_add(rest, e->base[i], e->n[i], e->tag[i]);
	cr_expect_eq(verify_all(l, rest, 0, 1 << 20), rest->count);
	sluice_plog_close(l);
	free(rest);
	free(e);
}

/* Proves giving back descriptors and the tail cache while idle changes
 * nothing a reader or writer sees: reads, appends and a roll all work after
 * sluice_plog_release_fds and sluice_plog_release_cache. */
Test(plog, release_fds_and_cache, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 20, 1500);
	cr_expect_gt(sluice_plog_open_fds(l), 0);
	cr_expect_gt(sluice_plog_cache_bytes(l), 0);
	cr_expect_gt(sluice_plog_release_fds(l), 0);
	(void)sluice_plog_release_cache(l);
	cr_expect_eq(sluice_plog_cache_bytes(l), 0);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	for (int i = 0; i < 20; i++) {
		expect_add(e, append_batch(l, 2, 7000, 1500, (uint8_t)(200 + i % 50)), 2, (uint8_t)(200 + i % 50));
		flush_log(l);
		if (i % 5 == 0) {
			(void)sluice_plog_release_fds(l);
			(void)sluice_plog_release_cache(l);
		}
	}
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	l = open_log(&SMALL, false, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	free(e);
}

/* Proves preallocated segments (fallocate'd to segment.bytes, zeros past the
 * data) recover after a crash: the zeros are cut off, every committed batch
 * is served, and a clean close leaves files of exactly their data. */
Test(plog, preallocated_segments_crash, .init = setup, .fini = teardown)
{
	struct opts o = SMALL;
	o.preallocate = true;
	struct expect *e = calloc(1, sizeof *e);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		io_uring_queue_exit(&H.ring);
		if (io_uring_queue_init(16, &H.ring, 0) < 0)
			_exit(3);
		struct sluice_plog *l = open_log(&o, true, NULL);
		for (int i = 0; i < 30; i++) {
			(void)append_batch(l, 2, 100, 1500, (uint8_t)(i + 1));
			flush_log(l);
		}
		_exit(sluice_plog_written_end(l) == 60 ? 0 : 4);
	}
	int status;
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
	for (int i = 0; i < 30; i++)
		expect_add(e, i * 2, 2, (uint8_t)(i + 1));
	struct sluice_plog_recovery rec;
	struct sluice_plog *l = open_log(&o, false, &rec);
	cr_expect_eq(sluice_plog_log_end(l), 60);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 30);
	sluice_plog_close(l);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	l = open_log(&o, true, NULL);
	int64_t total = sluice_plog_size_bytes(l);
	sluice_plog_close(l);
	int64_t on_disk = 0;
	for (int s = 0; s < nseg; s++) {
		char p[300];
		seg_file(p, sizeof p, bases[s], ".log");
		on_disk += file_size(p);
	}
	cr_expect_eq(on_disk, total, "closed segments hold exactly their batches");
	free(e);
}

/* ---- extents: tails written from several extents, the read cache ---------------- */

/* Proves the extent pool keeps to its budget: buffers are reused from a
 * free list, the least recently used cached extent nobody holds is evicted
 * for a new one, a lookup refreshes recency, a buffer needed while all are
 * held is allocated past the budget and freed when released, and forgetting
 * an owner's segment drops exactly its extents. */
Test(extent, pool_budget_lru_and_forget)
{
	struct sluice_pool *p = sluice_pool_new(16384, 3 * 16384, NULL);
	cr_assert_not_null(p);
	static int owner_a, owner_b;
	struct sluice_extent *e[3];
	for (int i = 0; i < 3; i++) {
		e[i] = sluice_pool_get(p);
		cr_assert_not_null(e[i]);
		e[i]->owner = i == 2 ? (void *)&owner_b : (void *)&owner_a;
		e[i]->seg_base = 0;
		e[i]->file_off = e[i]->lo = i * 16384;
		e[i]->hi = e[i]->lo + 100;
		sluice_cache_insert(p, e[i]);
		sluice_extent_put(e[i]); /* the cache holds them now */
	}
	cr_expect(!sluice_pool_over_budget(p));
	/* extent 0 used most recently: extent 1 is the least recently used */
	cr_expect_eq(sluice_cache_lookup(p, &owner_a, 0, 0), e[0]);
	struct sluice_extent *n = sluice_pool_get(p);
	cr_assert_not_null(n);
	cr_expect_eq(n, e[1], "the least recently used buffer is reused");
	cr_expect_null(sluice_cache_lookup(p, &owner_a, 0, 16384));
	struct sluice_pool_stats st;
	sluice_pool_get_stats(p, &st);
	cr_expect_eq(st.evictions, 1);
	/* all three held: a fourth comes from past the budget */
	struct sluice_extent *h0 = sluice_pool_get(p), *h1 = sluice_pool_get(p), *h2 = sluice_pool_get(p);
	cr_assert(h0 && h1 && h2);
	cr_expect(sluice_pool_over_budget(p));
	sluice_extent_put(h2);
	sluice_extent_put(h1);
	sluice_extent_put(h0);
	cr_expect(!sluice_pool_over_budget(p), "the buffer past the budget was freed");
	/* forget: only owner_b's extent goes */
	struct sluice_extent *c = sluice_pool_get(p);
	c->owner = &owner_b;
	c->seg_base = 7;
	c->file_off = c->lo = 0;
	c->hi = 10;
	sluice_cache_insert(p, c);
	sluice_extent_put(c);
	sluice_cache_forget(p, &owner_b, -1);
	cr_expect_null(sluice_cache_lookup(p, &owner_b, 7, 0));
	cr_expect_null(sluice_cache_lookup(p, &owner_b, 0, 2 * 16384));
	sluice_extent_put(n);
	sluice_pool_destroy(p);
}

/* Proves batches that straddle extents (16 KiB extents, 5-7 KiB batches)
 * and group commits touching more extents than SQEs are allowed (one
 * vectored write) are written and read back intact, before and after a
 * clean reopen, with the partial tail block carried across the reopen. */
Test(plog, small_extents_straddle_and_vectored_commits, .init = setup, .fini = teardown)
{
	struct opts o = BIG;
	o.chunk_bytes = 16384;
	struct sluice_plog *l = open_log(&o, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 200; i++) {
		int n = 1 + i % 3;
		expect_add(e, append_batch(l, n, 1000 + i, (size_t)(1700 + (i * 37) % 700), (uint8_t)(i + 1)), n,
			   (uint8_t)(i + 1));
		/* commits of 1, 5 and 40 batches: up to ~18 extents in one */
		if (i % 40 == 39 || (i < 40 && i % 5 == 4) || i < 3)
			flush_log(l);
	}
	flush_log(l);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 200);
	cr_expect_eq(verify_all(l, e, 0, 3000), 200);
	sluice_plog_close(l);
	l = open_log(&o, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 200);
	/* appends after the reopen continue the partial block from disk */
	expect_add(e, append_batch(l, 2, 5000, 3000, 0xEE), 2, 0xEE);
	flush_log(l);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 201);
	sluice_plog_close(l);
	l = open_log(&o, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 201);
	sluice_plog_close(l);
	free(e);
}

/* Proves the shared cache at work, with buffers and the write descriptor
 * registered with the ring: data just written is read back from memory
 * (hits, no misses); once the cache has been flushed (a clean
 * reopen) the first read of each extent is a miss that loads it with
 * O_DIRECT and later reads of it hit; compaction-free retention forgets a
 * deleted segment's extents; memory stays within the pool's budget. */
Test(plog, shared_cache_hits_and_cold_reads, .init = setup, .fini = teardown)
{
	struct sluice_pool *pool = sluice_pool_new(65536, 64 * 65536, &H.ring);
	cr_assert_not_null(pool);
	struct opts o = SMALL; /* 64 KiB segments: several */
	o.pool = pool;
	struct sluice_plog *l = open_log(&o, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 60; i++) {
		expect_add(e, append_batch(l, 4, 1000 + i, 3000, (uint8_t)(i + 1)), 4, (uint8_t)(i + 1));
		flush_log(l);
	}
	struct sluice_pool_stats st;
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 60);
	sluice_pool_get_stats(pool, &st);
	cr_expect_gt(st.hits, 0);
	cr_expect_eq(st.misses, 0, "data just written is read from memory (%" PRIu64 " misses)", st.misses);
	cr_expect_gt(st.registered, 0, "buffers registered with the ring");
	cr_expect_eq(st.files_in_use, 1, "the active segment's descriptor is a registered file");
	sluice_plog_close(l); /* forgets its extents */
	l = open_log(&o, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 60);
	struct sluice_pool_stats st2;
	sluice_pool_get_stats(pool, &st2);
	uint64_t misses = st2.misses - st.misses;
	cr_expect_gt(misses, 0, "a reopened log reads cold");
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 60);
	struct sluice_pool_stats st3;
	sluice_pool_get_stats(pool, &st3);
	cr_expect_eq(st3.misses, st2.misses, "the second pass is served from the cache");
	cr_expect_leq(st3.bytes_allocated, st3.bytes_budget);
	cr_expect_gt(st3.bytes_cached, 0);
	/* retention by size drops old segments and their cached extents */
	cr_expect_gt(sluice_plog_enforce_retention(l, 0, -1, 100000), 0);
	int64_t start = sluice_plog_log_start(l);
	int from = 0;
	while (e->base[from] < start)
		from++;
	cr_expect_eq(verify_all(l, e, from, 1 << 20), 60 - from);
	sluice_plog_close(l);
	sluice_pool_get_stats(pool, &st3);
	cr_expect_eq(st3.bytes_cached, 0, "a closed log leaves nothing cached");
	cr_expect_eq(st3.files_in_use, 0, "and no registered descriptor");
	sluice_pool_destroy(pool);
	free(e);
}

/* Proves the active segment's file is preallocated ahead of the writes
 * (its size runs ahead of the data while open) and cut to exactly its data
 * when it closes, and that a crash leaving the zeros behind recovers every
 * committed batch (covered for log.preallocate by preallocated_segments_crash). */
Test(plog, preallocation_follows_writes, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 20; i++) {
		expect_add(e, append_batch(l, 10, 1000 + i, 10000, (uint8_t)(i + 1)), 10, (uint8_t)(i + 1));
		flush_log(l);
	}
	char p[300];
	seg_file(p, sizeof p, 0, ".log");
	int64_t data = sluice_plog_size_bytes(l);
	cr_expect_gt(file_size(p), data, "file %" PRId64 " bytes, data %" PRId64, file_size(p), data);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 20);
	sluice_plog_close(l);
	cr_expect_eq(file_size(p), data, "closed: exactly the data");
	l = open_log(&BIG, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 20);
	sluice_plog_close(l);
	free(e);
}

/* ---- compaction as a job (prepare on the core, run elsewhere, finish) ---------- */

/* Append one batch of n records keyed key0..key(n-1) (mod keys), value tag v. */
static void append_keyed(struct sluice_plog *l, int n, int keys, int first, uint8_t v)
{
	struct tb_rec recs[64];
	char kb[64][16];
	static uint8_t val[600];
	memset(val, v, sizeof val);
	cr_assert_leq(n, 64);
	for (int i = 0; i < n; i++) {
		snprintf(kb[i], sizeof kb[i], "key%d", (first + i) % keys);
		recs[i] = (struct tb_rec){kb[i], (int32_t)strlen(kb[i]), val, (int32_t)sizeof val, i};
	}
	struct kwr w;
	kwr_init(&w, 256, 1u << 30);
	int64_t maxd = tb_records(&w, recs, n);
	struct tb_hdr h = tb_hdr_default(n, 1000);
	h.max_timestamp = 1000 + maxd;
	size_t len;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, &len);
	kwr_free(&w);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0);
	free(b);
}

/* Records readable from offset 0 on (whole log), counted. */
static int64_t count_records(struct sluice_plog *l)
{
	int64_t off = sluice_plog_log_start(l), n = 0, written = sluice_plog_written_end(l);
	while (off < written) {
		uint8_t *buf = NULL;
		int32_t got = sluice_plog_read(l, off, 1 << 20, true, &buf);
		cr_assert_gt(got, 0);
		size_t pos = 0;
		while (pos < (size_t)got) {
			struct sluice_batch b;
			/* CRC and framing only: compacted batches have gaps in their offsets */
			enum sluice_batch_result br = sluice_batch_check_crc(buf + pos, (size_t)got - pos, &b);
			cr_assert_eq(br, SLUICE_BATCH_OK, "batch at offset %" PRId64 " (+%zu of %d): %s", off, pos, got,
				     sluice_batch_result_name(br));
			n += b.records_count;
			off = b.base_offset + b.last_offset_delta + 1;
			pos += (size_t)sluice_batch_total_bytes(&b);
		}
		free(buf);
	}
	return n;
}

/* Proves a compaction job run apart from its log keeps the newest record of
 * each key and leaves the log readable with its offsets; that a pass with
 * nothing new to clean is not even prepared; and that a segment deleted by
 * retention while its job ran is not resurrected by the swap (its cleaned
 * file is removed instead). */
Test(plog, compaction_job, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	for (int i = 0; i < 40; i++) {
		append_keyed(l, 10, 20, i * 10, (uint8_t)i);
		flush_log(l);
	}
	int64_t before = count_records(l);
	cr_assert_eq(before, 400);
	struct sluice_plog_clean_job *j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 0, 0, 0});
	cr_assert_not_null(j);
	sluice_plog_clean_run(j); /* as the cleaner thread would */
	int64_t gone = sluice_plog_clean_finish(l, j);
	cr_expect_gt(gone, 0);
	int64_t after = count_records(l);
	cr_expect_lt(after, before);
	cr_expect_geq(after, 20, "each key's newest record stays");
	cr_expect_eq(sluice_plog_written_end(l), 400, "offsets unchanged");
	/* a pass that changed something is due again (shrunk neighbours merge);
	 * the passes converge, and then none is due while nothing changes */
	int passes = 0;
	while ((j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 0, 0, 0})) && passes < 10) {
		sluice_plog_clean_run(j);
		(void)sluice_plog_clean_finish(l, j);
		passes++;
	}
	cr_expect_lt(passes, 10, "compaction passes converge");
	cr_expect_null(j, "nothing changed: no pass");
	cr_expect_eq(count_records(l), after, "further passes removed nothing more");
	/* a new closed segment makes a pass due again; retention takes the
	 * oldest segments while the job runs */
	for (int i = 0; i < 8; i++) {
		append_keyed(l, 10, 20, i * 10, (uint8_t)(100 + i));
		flush_log(l);
	}
	j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 0, 0, 0});
	cr_assert_not_null(j);
	sluice_plog_clean_run(j);
	cr_expect_gt(sluice_plog_enforce_retention(l, 0, -1, 1), 0);
	int64_t start = sluice_plog_log_start(l);
	(void)sluice_plog_clean_finish(l, j);
	cr_expect_eq(sluice_plog_log_start(l), start);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_expect_geq(bases[0], start, "no deleted segment came back");
	DIR *d = opendir(H.dir);
	struct dirent *de;
	while ((de = readdir(d)))
		cr_expect_null(strstr(de->d_name, ".cleaned"), "left behind: %s", de->d_name);
	closedir(d);
	(void)nseg;
	cr_expect_gt(count_records(l), 0);
	sluice_plog_close(l);
	l = open_log(&SMALL, true, NULL);
	cr_expect_eq(sluice_plog_written_end(l), 480);
	(void)count_records(l);
	sluice_plog_close(l);
}

/* Proves a LogAppendTime append stamps each batch in the log's copy: the
 * timestamp-type bit set, MaxTimestamp the broker's time, a CRC that checks,
 * offsets as usual; lookups by time and the segment's time index use it;
 * and the caller's buffer is untouched. */
Test(plog, log_append_time, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&BIG, true, NULL);
	size_t len;
	uint8_t *b = mk_batch(3, 1000, 50, 'x', &len);
	uint8_t *orig = malloc(len);
	memcpy(orig, b, len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, 1700000000000, &base, &last), 0);
	cr_expect_eq(memcmp(b, orig, len), 0, "the caller's batch is not modified");
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0); /* CreateTime */
	flush_log(l);
	uint8_t *buf = NULL;
	int32_t n = sluice_plog_read(l, 0, 1 << 20, true, &buf);
	cr_assert_eq(n, (int32_t)(2 * len));
	struct sluice_batch s;
	cr_assert_eq(sluice_batch_check(buf, len, &s), SLUICE_BATCH_OK, "CRC recomputed");
	cr_expect(s.attributes & SLUICE_BATCH_ATTR_TS_LOG_APPEND);
	cr_expect_eq(s.max_timestamp, 1700000000000);
	cr_expect_eq(s.base_offset, 0);
	cr_assert_eq(sluice_batch_check(buf + len, len, &s), SLUICE_BATCH_OK);
	cr_expect(!(s.attributes & SLUICE_BATCH_ATTR_TS_LOG_APPEND));
	cr_expect_eq(s.max_timestamp, 1002);
	cr_expect_eq(s.base_offset, 3);
	free(buf);
	int64_t found;
	cr_expect_eq(sluice_plog_offset_for_time(l, 1500000000000, &found), 0);
	sluice_plog_close(l);
	free(b);
	free(orig);
}

/* Proves reads ahead: a cold sequential reader's miss on one extent queues
 * an O_DIRECT read of the next on the pool's ring; once it completes, the
 * next extent is a hit without a synchronous load, with the right bytes. */
Test(plog, read_ahead, .init = setup, .fini = teardown)
{
	struct sluice_pool *pool = sluice_pool_new(16384, 64 * 16384, &H.ring);
	cr_assert_not_null(pool);
	struct opts o = BIG;
	o.pool = pool;
	struct sluice_plog *l = open_log(&o, true, NULL);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 40; i++)
		expect_add(e, append_batch(l, 2, 1000 + i, 3000, (uint8_t)(i + 1)), 2, (uint8_t)(i + 1));
	flush_log(l);
	sluice_plog_close(l); /* the cache forgets it: what follows reads cold */
	l = open_log(&o, true, NULL);
	struct sluice_pool_stats a, b;
	sluice_pool_get_stats(pool, &a);
	uint8_t *buf = NULL;
	cr_assert_gt(sluice_plog_read(l, 0, 4096, true, &buf), 0); /* a miss in extent 0 */
	free(buf);
	sluice_pool_get_stats(pool, &b);
	cr_expect_gt(b.misses, a.misses);
	cr_expect_eq(b.readahead, a.readahead + 1, "the next extent is read ahead");
	while (sluice_plog_write_inflight(l))
		reap_one(); /* let it complete */
	/* the first batch starting in extent 1 is served without a new miss */
	int k = 0;
	int64_t pos = 0;
	while (pos < 16384) { /* batch sizes: 12 + length, all equal here */
		size_t len;
		uint8_t *bb = mk_batch(2, 0, 3000, 1, &len);
		free(bb);
		pos += (int64_t)len;
		k++;
	}
	sluice_pool_get_stats(pool, &a);
	buf = NULL;
	int32_t n = sluice_plog_read(l, e->base[k], (int32_t)3500, true, &buf);
	cr_assert_gt(n, 0);
	struct sluice_batch sb;
	cr_assert_eq(sluice_batch_check(buf, (size_t)n, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sb.base_offset, e->base[k]);
	cr_expect_eq(first_value_tag(buf, (size_t)n), e->tag[k]);
	free(buf);
	sluice_pool_get_stats(pool, &b);
	cr_expect_eq(b.misses, a.misses, "extent 1 came from the read ahead");
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 40);
	while (sluice_plog_write_inflight(l))
		reap_one();
	sluice_plog_close(l);
	sluice_pool_destroy(pool);
	free(e);
}

static void copy_append(const char *from, FILE *to)
{
	FILE *f = fopen(from, "rb");
	cr_assert_not_null(f, "open %s", from);
	char buf[65536];
	size_t n;
	while ((n = fread(buf, 1, sizeof buf, f)) > 0)
		cr_assert_eq(fwrite(buf, 1, n, to), n);
	fclose(f);
}

static void write_manifest(int64_t first, int64_t second)
{
	char p[300];
	seg_file(p, sizeof p, first, ".swap");
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	fprintf(f, "%" PRId64 "\n%" PRId64 "\n", first, second);
	fclose(f);
}

/* Proves a compaction swap interrupted by a stop is finished at the next
 * open from its manifest, at both points a crash can leave it: (1) the
 * merged file still "<first>.log.cleaned", the second old segment's index
 * already gone; (2) the merged file already renamed over the first segment,
 * the second old segment still there. Either way the old segments are
 * replaced exactly once: every batch is served once, in order, and no
 * manifest or cleaned file is left. */
Test(plog, compaction_swap_recovery, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 60, 3000);
	sluice_plog_close(l);
	int64_t b[64];
	int nseg = list_logs(b, 64);
	cr_assert_geq(nseg, 6, "need five closed segments, have %d", nseg);
	char p[300], q[300];
	/* (1) b0 + b1 merged into b0.log.cleaned; b1's index removed */
	seg_file(p, sizeof p, b[0], ".log.cleaned");
	FILE *out = fopen(p, "wb");
	seg_file(q, sizeof q, b[0], ".log");
	copy_append(q, out);
	seg_file(q, sizeof q, b[1], ".log");
	copy_append(q, out);
	fclose(out);
	write_manifest(b[0], b[1]);
	seg_file(q, sizeof q, b[1], ".index");
	unlink(q);
	/* (2) b2 already holds b2 + b3; b3 still there */
	seg_file(p, sizeof p, b[2], ".log.new");
	out = fopen(p, "wb");
	seg_file(q, sizeof q, b[2], ".log");
	copy_append(q, out);
	seg_file(q, sizeof q, b[3], ".log");
	copy_append(q, out);
	fclose(out);
	seg_file(q, sizeof q, b[2], ".log");
	cr_assert_eq(rename(p, q), 0);
	seg_file(q, sizeof q, b[2], ".index");
	unlink(q); /* stale now: rebuilt by the open */
	write_manifest(b[2], b[3]);
	l = open_log(&SMALL, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count, "every batch once, in order");
	sluice_plog_close(l);
	int64_t after[64];
	int n2 = list_logs(after, 64);
	cr_expect_eq(n2, nseg - 2, "two old segments replaced");
	for (int i = 0; i < n2; i++)
		cr_expect(after[i] != b[1] && after[i] != b[3], "segment %" PRId64 " still there", after[i]);
	DIR *d = opendir(H.dir);
	struct dirent *de;
	while ((de = readdir(d)))
		cr_expect(!strstr(de->d_name, ".swap") && !strstr(de->d_name, ".cleaned"), "left: %s", de->d_name);
	closedir(d);
	l = open_log(&SMALL, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	sluice_plog_close(l);
	free(e);
}

/* Proves a compaction swap manifest whose cleaned segment is gone (lost,
 * or never there) deletes nothing at the next open: the segments it names
 * stay and are all served, and the manifest goes. Regression: the open
 * "finished" the swap by deleting every segment the manifest named after
 * the first. */
Test(plog, swap_manifest_without_cleaned_file, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 40, 3000);
	sluice_plog_close(l);
	int64_t b[64];
	int nseg = list_logs(b, 64);
	cr_assert_geq(nseg, 4);
	write_manifest(b[1], b[2]);
	l = open_log(&SMALL, true, NULL);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count, "every batch still served");
	sluice_plog_close(l);
	int64_t after[64];
	cr_expect_eq(list_logs(after, 64), nseg, "no segment deleted");
	char p[300];
	seg_file(p, sizeof p, b[1], ".swap");
	cr_expect_lt(file_size(p), 0, "the manifest is gone");
	free(e);
}

/* Proves compaction merges small neighbouring segments into one (each
 * group at most segment.bytes, named by its first): after a pass that
 * shrinks 1 MiB segments to a few KiB, the next pass leaves fewer files,
 * with every key's newest value and the offsets intact, across a reopen. */
Test(plog, compaction_merges_segments, .init = setup, .fini = teardown)
{
	struct opts o = SMALL;
	o.segment_bytes = 1 << 20;
	struct sluice_plog *l = open_log(&o, true, NULL);
	for (int i = 0; i < 400; i++) {
		append_keyed(l, 20, 10, i * 20, (uint8_t)i);
		if (i % 10 == 9)
			flush_log(l);
	}
	flush_log(l);
	int64_t b[128];
	int before = list_logs(b, 128);
	cr_assert_geq(before, 4);
	int64_t written = sluice_plog_written_end(l);
	cr_expect_gt(sluice_plog_compact(l, 2000, 0, 1ll << 30), 0);
	(void)sluice_plog_compact(l, 2000, 0, 1ll << 30);
	int after = list_logs(b, 128);
	cr_expect_lt(after, before, "segments merged: %d -> %d", before, after);
	cr_expect_eq(sluice_plog_written_end(l), written);
	int64_t n = count_records(l);
	cr_expect_geq(n, 10);
	sluice_plog_close(l);
	l = open_log(&o, true, NULL);
	cr_expect_eq(count_records(l), n);
	sluice_plog_close(l);
}

/* Proves compaction leaves a damaged segment (and those after it) alone:
 * the damaged file keeps its bytes and a fetch in its damage still answers
 * -3. Without the guard the pass rewrote the segment from its readable
 * batches, deleting the damaged bytes, and the lost offsets became a gap
 * that a fetch silently skipped. */
Test(plog, compaction_leaves_damaged_segment, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	for (int i = 0; i < 300; i++)
		append_keyed(l, 4, 3, i * 4, (uint8_t)i);
	flush_log(l);
	sluice_plog_close(l);
	int64_t bases[64];
	int nseg = list_logs(bases, 64);
	cr_assert_geq(nseg, 4);
	char p[300];
	seg_file(p, sizeof p, bases[1], ".log");
	int64_t pos[128];
	int nb = batch_positions(p, pos, 128);
	cr_assert_geq(nb, 4);
	cr_assert_eq(truncate(p, pos[nb / 2] + 10), 0);
	int64_t size = file_size(p), lost = bases[1] + 4 * (nb / 2);
	l = open_log(&SMALL, true, NULL);
	uint8_t *buf = NULL;
	cr_assert_eq(sluice_plog_read(l, lost, 1 << 20, true, &buf), -3);
	(void)sluice_plog_compact(l, 1 << 30, 0, 1 << 30);
	(void)sluice_plog_compact(l, 1 << 30, 0, 1 << 30);
	cr_expect_eq(file_size(p), size, "the damaged segment kept its bytes");
	cr_expect_eq(sluice_plog_read(l, lost, 1 << 20, true, &buf), -3, "a fetch in the damage still says so");
	sluice_plog_close(l);
}

/* One batch of the log before the damage: where it was and what it held. */
struct orig_batch {
	int file;            /* index into the damage round's names */
	int64_t pos, len, base;
	uint8_t *bytes;
};

/* Proves recovery never crashes, never serves a corrupt batch and never
 * deletes an acknowledged one, whatever is done to the segment files
 * between runs: 40 rounds, each writing a fresh log of several segments
 * and closing it cleanly, then damaging it at random (bytes flipped
 * anywhere in .log, .index or .timeindex files, files truncated at random
 * lengths or extended with garbage, index files deleted, a stray segment
 * file: a copy of a segment from one of its batches on, under another
 * name), then reopening it, as after a crash or a clean stop. Either the
 * open refuses the partition and has changed nothing on disk, or: every
 * batch that lay wholly before the first damaged byte of its file is
 * served at its offset, byte for byte; reading everything from the start,
 * every batch served passes its CRC and offsets only increase; the log
 * end is not below the old one (no offset is given out twice); and
 * appending still works afterwards. */
Test(plog, random_damage_recovery, .init = setup, .fini = teardown)
{
	unsigned seed = 20261130;
	static struct orig_batch orig[1024];
	for (int round = 0; round < 40; round++) {
		nftw(H.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		struct sluice_plog *l = open_log(&SMALL, true, NULL);
		struct expect *e = fill_segments(l, 25 + rand_r(&seed) % 20, 1000 + rand_r(&seed) % 3000);
		int64_t old_leo = sluice_plog_log_end(l);
		sluice_plog_close(l);
		free(e);
		DIR *d = opendir(H.dir);
		char names[256][64];
		int64_t damage_at[256];
		int n = 0, norig = 0;
		struct dirent *de;
		while ((de = readdir(d)) && n < 256)
			if (strspn(de->d_name, "0123456789") == 20 && strlen(de->d_name) < 64)
				snprintf(names[n++], sizeof names[0], "%s", de->d_name);
		closedir(d);
		for (int i = 0; i < n; i++) {
			damage_at[i] = INT64_MAX;
			if (!strstr(names[i], ".log"))
				continue;
			char p[400];
			snprintf(p, sizeof p, "%s/%.63s", H.dir, names[i]);
			int64_t pos[128];
			int nb = batch_positions(p, pos, 128);
			int fd = open(p, O_RDONLY);
			int64_t size = file_size(p);
			for (int k = 0; k < nb; k++) {
				struct orig_batch *ob = &orig[norig++];
				cr_assert_lt(norig, 1024);
				ob->file = i;
				ob->pos = pos[k];
				ob->len = (k + 1 < nb ? pos[k + 1] : size) - pos[k];
				ob->bytes = malloc((size_t)ob->len);
				cr_assert_eq(pread(fd, ob->bytes, (size_t)ob->len, ob->pos), ob->len);
				ob->base = (int64_t)kbe64(ob->bytes);
			}
			close(fd);
		}
		int hits = 1 + rand_r(&seed) % 4;
		for (int h = 0; h < hits && n > 0; h++) {
			int fi = (int)(rand_r(&seed) % (unsigned)n);
			char p[400];
			snprintf(p, sizeof p, "%s/%.63s", H.dir, names[fi]);
			int64_t size = file_size(p);
			switch (rand_r(&seed) % 6) {
			case 0: /* flip a byte */
			case 1:
				if (size > 0) {
					int64_t at = (int64_t)(rand_r(&seed) % (unsigned)size);
					flip_byte(p, at);
					damage_at[fi] = at < damage_at[fi] ? at : damage_at[fi];
				}
				break;
			case 2: /* truncate */
				if (size > 0) {
					int64_t at = (int64_t)(rand_r(&seed) % (unsigned)size);
					cr_assert_eq(truncate(p, (off_t)at), 0);
					damage_at[fi] = at < damage_at[fi] ? at : damage_at[fi];
				}
				break;
			case 3: { /* garbage appended */
				FILE *f = fopen(p, "ab");
				for (int i = 0, m = 1 + rand_r(&seed) % 3000; f && i < m; i++)
					fputc(rand_r(&seed) & 0xff, f);
				if (f)
					fclose(f);
				damage_at[fi] = size < damage_at[fi] ? size : damage_at[fi];
				break;
			}
			case 4: { /* a stray segment file: a copy from one of its batches on */
				const struct orig_batch *ob = &orig[rand_r(&seed) % (unsigned)norig];
				char from[400], to[400];
				snprintf(from, sizeof from, "%s/%.63s", H.dir, names[ob->file]);
				seg_file(to, sizeof to, (int64_t)(rand_r(&seed) % (unsigned)(old_leo + 50)), ".log");
				if (file_size(to) < 0 && file_size(from) > ob->pos)
					copy_file(from, to, ob->pos);
				break;
			}
			default: /* an index goes */
				if (strstr(p, "index"))
					unlink(p);
			}
		}
		struct dir_snap snap;
		dir_snapshot(&snap);
		bool clean = rand_r(&seed) % 2;
		char err[512];
		int rc = try_open(clean, err, sizeof err, &l);
		if (rc != 0) {
			cr_assert_eq(rc, SLUICE_PLOG_OPEN_UNUSABLE, "round %d: %s", round, err);
			expect_unchanged(&snap);
			for (int k = 0; k < norig; k++)
				free(orig[k].bytes);
			continue;
		}
		cr_expect_geq(sluice_plog_log_end(l), old_leo, "round %d: offsets reused", round);
		for (int k = 0; k < norig; k++) {
			const struct orig_batch *ob = &orig[k];
			if (ob->pos + ob->len <= damage_at[ob->file]) {
				uint8_t *buf = NULL;
				int32_t got = sluice_plog_read(l, ob->base, 1, true, &buf);
				cr_assert(got >= ob->len && memcmp(buf, ob->bytes, (size_t)ob->len) == 0,
					  "round %d: intact batch at offset %" PRId64 " (%s byte %" PRId64 ") not served: %d",
					  round, ob->base, names[ob->file], ob->pos, got);
				free(buf);
			}
			free(ob->bytes);
		}
		int64_t off = sluice_plog_log_start(l), written = sluice_plog_written_end(l), last = -1;
		while (off < written) {
			uint8_t *buf = NULL;
			int32_t got = sluice_plog_read(l, off, 1 << 20, true, &buf);
			if (got == -3 || got == 0) { /* refused (CRC, damage) or a gap: go on */
				free(buf);
				off++;
				continue;
			}
			cr_assert_gt(got, 0, "round %d: read at %" PRId64 " gave %d", round, off, got);
			size_t pos = 0;
			while (pos < (size_t)got) {
				struct sluice_batch b;
				cr_assert_eq(sluice_batch_check_crc(buf + pos, (size_t)got - pos, &b), SLUICE_BATCH_OK,
					     "round %d: a corrupt batch was served at %" PRId64, round, off);
				cr_assert_gt(b.base_offset, last, "round %d: offsets went backwards", round);
				last = b.base_offset + b.last_offset_delta;
				off = last + 1;
				pos += (size_t)sluice_batch_total_bytes(&b);
			}
			free(buf);
		}
		int64_t base, lastoff;
		size_t len;
		uint8_t *b = mk_batch(2, 1, 10, 'r', &len);
		cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &lastoff), 0, "round %d: append after recovery",
			     round);
		free(b);
		flush_log(l);
		cr_expect_eq(sluice_plog_written_end(l), lastoff + 1);
		cr_expect_geq(base, old_leo, "round %d", round);
		sluice_plog_close(l);
	}
}

/* Proves correctness under memory pressure: eight logs sharing a pool of
 * four 16 KiB extents, appended to and read in turn. Tails then need more
 * buffers than the budget (allocated past it, freed when released); idle
 * logs hand their tails to the cache (sluice_plog_release_cache, as the
 * storage core does when the pool is over budget) and the pool trims back
 * to its budget; extents are evicted and reloaded constantly; every batch
 * of every log still reads back intact, before and after a reopen. */
Test(plog, pool_pressure, .init = setup, .fini = teardown)
{
	struct sluice_pool *pool = sluice_pool_new(16384, 4 * 16384, &H.ring);
	cr_assert_not_null(pool);
	enum { LOGS = 8 };
	struct sluice_plog *ls[LOGS];
	struct expect *es[LOGS];
	char dirs[LOGS][192];
	struct opts o = SMALL;
	o.pool = pool;
	for (int i = 0; i < LOGS; i++) {
		snprintf(dirs[i], sizeof dirs[i], "%s/topic-%d", H.root, i + 1);
		memcpy(H.dir, dirs[i], sizeof H.dir < sizeof dirs[i] ? sizeof H.dir : sizeof dirs[i]);
		ls[i] = open_log(&o, true, NULL);
		es[i] = calloc(1, sizeof *es[i]);
	}
	bool was_over = false;
	for (int round = 0; round < 30; round++) {
		for (int i = 0; i < LOGS; i++) {
			uint8_t tag = (uint8_t)(round * LOGS + i + 1);
			expect_add(es[i], append_batch(ls[i], 3, 1000 + round, 2500 + (size_t)i * 300, tag), 3, tag);
		}
		was_over |= sluice_pool_over_budget(pool);
		for (int i = 0; i < LOGS; i++)
			flush_log(ls[i]);
		if (sluice_pool_over_budget(pool)) {
			for (int i = 0; i < LOGS; i++)
				(void)sluice_plog_release_cache(ls[i]);
			sluice_pool_trim(pool);
		}
		cr_expect(!sluice_pool_over_budget(pool), "round %d: back within the budget", round);
		int r = round % LOGS;
		cr_expect_eq(verify_all(ls[r], es[r], 0, 20000), es[r]->count, "round %d log %d", round, r);
	}
	cr_expect(was_over, "the tails needed more than the budget");
	struct sluice_pool_stats st;
	sluice_pool_get_stats(pool, &st);
	cr_expect_gt(st.evictions, 0);
	cr_expect_gt(st.unbudgeted, 0);
	for (int i = 0; i < LOGS; i++) {
		cr_expect_eq(verify_all(ls[i], es[i], 0, 1 << 20), es[i]->count, "log %d", i);
		while (sluice_plog_write_inflight(ls[i]))
			reap_one();
		sluice_plog_close(ls[i]);
		memcpy(H.dir, dirs[i], sizeof H.dir < sizeof dirs[i] ? sizeof H.dir : sizeof dirs[i]);
		ls[i] = open_log(&o, true, NULL);
		cr_expect_eq(verify_all(ls[i], es[i], 0, 1 << 20), es[i]->count, "log %d after reopen", i);
		while (sluice_plog_write_inflight(ls[i]))
			reap_one();
		sluice_plog_close(ls[i]);
		free(es[i]);
	}
	sluice_pool_destroy(pool);
}

/* Proves min.compaction.lag.ms, min.cleanable.dirty.ratio and
 * max.compaction.lag.ms as Kafka applies them: segments holding records
 * younger than the min lag are not compacted (no pass at all when that is
 * every closed segment); after a full pass, one new closed segment among
 * many cleaned ones is below a high ratio and starts no pass, unless its
 * data is older than the max lag, while ratio 0 always passes. */
Test(plog, compaction_lag_and_dirty_ratio, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	for (int i = 0; i < 40; i++) {
		append_keyed(l, 10, 20, i * 10, (uint8_t)i); /* timestamps 1000-1009 */
		flush_log(l);
	}
	cr_expect_null(sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 5000, 0, 0}), "every record younger than the lag");
	struct sluice_plog_clean_job *j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 500, 0, 0.5});
	cr_assert_not_null(j, "older than the lag, all dirty");
	sluice_plog_clean_run(j);
	(void)sluice_plog_clean_finish(l, j);
	for (int passes = 0; passes < 10 && (j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 500, 0, 0.5})); passes++) {
		sluice_plog_clean_run(j);
		(void)sluice_plog_clean_finish(l, j);
	}
	/* a little new data: one more closed segment, mostly cleaned log */
	int64_t before = sluice_plog_log_end(l);
	while (sluice_plog_log_end(l) - before < 60) {
		append_keyed(l, 10, 20, 0, 0x77);
		flush_log(l);
	}
	int64_t b[64];
	int nseg = list_logs(b, 64);
	cr_assert_geq(nseg, 2);
	j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 500, 0, 0.99});
	cr_expect_null(j, "dirty share below the ratio: no pass");
	sluice_plog_clean_discard(j);
	j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 500, 900, 0.99});
	cr_expect_not_null(j, "dirty data older than max.compaction.lag.ms: a pass despite the ratio");
	sluice_plog_clean_discard(j);
	j = sluice_plog_clean_prepare(l, 2000, &(struct sluice_plog_clean_policy){0, 1 << 30, 500, 0, 0});
	cr_expect_not_null(j, "ratio 0: the new segment is enough");
	sluice_plog_clean_discard(j);
	sluice_plog_close(l);
}

/* ---- compaction keeps each batch's codec ------------------------------------------ */

static const struct opts TINY = {8 << 10, INT64_MAX, true, false};

/* One batch of n records, keys "key<(first + i) % keys>", values "v<tag>-"
 * followed by 600 bytes of padding (highly compressible), compressed with
 * codec. */
static size_t append_keyed_codec(struct sluice_plog *l, int n, int keys, int first, int tag, int codec)
{
	struct tb_rec recs[64];
	char kb[64][16];
	static char val[64][640];
	cr_assert_leq(n, 64);
	for (int i = 0; i < n; i++) {
		snprintf(kb[i], sizeof kb[i], "key%d", (first + i) % keys);
		int vl = snprintf(val[i], sizeof val[i], "v%d-", tag);
		memset(val[i] + vl, 'x', 600);
		recs[i] = (struct tb_rec){kb[i], (int32_t)strlen(kb[i]), val[i], vl + 600, i};
	}
	struct kwr w;
	kwr_init(&w, 256, 1u << 30);
	int64_t maxd = tb_records(&w, recs, n);
	size_t cap = codec ? sluice_compress_bound(codec, w.len) : w.len;
	uint8_t *z = malloc(cap);
	int64_t zl = codec ? sluice_compress(codec, w.buf, w.len, z, cap) : (int64_t)w.len;
	if (!codec)
		memcpy(z, w.buf, w.len);
	cr_assert_gt(zl, 0, "compress with codec %d", codec);
	struct tb_hdr h = tb_hdr_default(n, 1000);
	h.max_timestamp = 1000 + maxd;
	h.attributes = (int16_t)codec;
	size_t len;
	uint8_t *b = tb_wrap(&h, z, (size_t)zl, &len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, -1, &base, &last), 0);
	free(b);
	free(z);
	kwr_free(&w);
	return len;
}

struct newest {
	char value[64][16]; /* per key index: the "v<tag>-" prefix of its newest value */
	int records;
};

static bool note_record(const struct sluice_record *rec, void *arg)
{
	struct newest *nw = arg;
	int k = -1;
	if (rec->key && rec->key_len > 3 && sscanf((const char *)rec->key + 3, "%d", &k) == 1 && k >= 0 && k < 64 &&
	    rec->value) {
		int vl = 0;
		while (vl < rec->value_len && vl < 15 && rec->value[vl] != '-')
			vl++;
		memcpy(nw->value[k], rec->value, (size_t)vl);
		nw->value[k][vl] = '\0';
	}
	nw->records++;
	return true;
}

/* Read the whole log: every batch's codec must be codec; collect each key's
 * newest value. */
static void read_newest(struct sluice_plog *l, int codec, struct newest *nw)
{
	memset(nw, 0, sizeof *nw);
	int64_t off = sluice_plog_log_start(l), written = sluice_plog_written_end(l);
	while (off < written) {
		uint8_t *buf = NULL;
		int32_t got = sluice_plog_read(l, off, 1 << 20, true, &buf);
		cr_assert_gt(got, 0);
		size_t pos = 0;
		while (pos < (size_t)got) {
			struct sluice_batch b;
			cr_assert_eq(sluice_batch_check_crc(buf + pos, (size_t)got - pos, &b), SLUICE_BATCH_OK);
			size_t len = (size_t)sluice_batch_total_bytes(&b);
			cr_expect_eq(b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK, codec, "batch at %" PRId64 ": codec %d",
				     b.base_offset, b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK);
			cr_assert_geq(sluice_batch_records(buf + pos, len, 64u << 20, note_record, nw), 0);
			off = b.base_offset + b.last_offset_delta + 1;
			pos += len;
		}
		free(buf);
	}
}

/* Proves compaction rebuilds the batches it shrinks with their own codec
 * (gzip, snappy, lz4, zstd), as Kafka's cleaner does: every batch after the
 * pass still carries the codec, the log takes no more space than before
 * (it used to be rewritten uncompressed: highly compressible batches grew
 * many times over), each key's newest value is intact, the CRCs check and
 * the offsets stay. */
static void compaction_keeps_codec(int codec)
{
	struct sluice_plog *l = open_log(&TINY, true, NULL);
	const int keys = 30, batches = 120;
	for (int i = 0; i < batches; i++) {
		append_keyed_codec(l, 20, keys, i * 20, i, codec);
		flush_log(l);
	}
	/* the expected newest value of each key */
	char want[64][16];
	for (int i = 0; i < batches; i++)
		for (int r = 0; r < 20; r++)
			snprintf(want[(i * 20 + r) % keys], 16, "v%d", i);
	/* other keys after them, so the batches above sit in closed segments */
	for (int i = 0; i < 40; i++) {
		append_keyed_codec(l, 20, 20, 0, 1000 + i, codec);
		flush_log(l);
	}
	int64_t written = sluice_plog_written_end(l), before = sluice_plog_size_bytes(l);
	int64_t gone = 0, g;
	for (int pass = 0; pass < 10 && (g = sluice_plog_compact(l, 2000, 0, 1ll << 30)) != 0; pass++) {
		cr_assert_geq(g, 0, "pass failed");
		gone += g;
	}
	int64_t after = sluice_plog_size_bytes(l);
	cr_expect_gt(gone, 0, "compaction removed something");
	cr_expect_leq(after, before, "codec %d: %" PRId64 " bytes after, %" PRId64 " before", codec, after, before);
	cr_expect_eq(sluice_plog_written_end(l), written, "offsets unchanged");
	struct newest nw;
	read_newest(l, codec, &nw);
	cr_expect_lt(nw.records, batches * 20 + 40 * 20, "records were removed");
	/* keys 0..19 were rewritten by the later batches ("v1000".."v1039"); 20..29 keep theirs */
	for (int k = 20; k < keys; k++)
		cr_expect_str_eq(nw.value[k], want[k], "key%d", k);
	sluice_plog_close(l);
	l = open_log(&TINY, true, NULL);
	read_newest(l, codec, &nw);
	for (int k = 20; k < keys; k++)
		cr_expect_str_eq(nw.value[k], want[k], "key%d after reopen", k);
	sluice_plog_close(l);
}

Test(plog, compaction_keeps_gzip, .init = setup, .fini = teardown) { compaction_keeps_codec(SLUICE_CODEC_GZIP); }
Test(plog, compaction_keeps_snappy, .init = setup, .fini = teardown) { compaction_keeps_codec(SLUICE_CODEC_SNAPPY); }
Test(plog, compaction_keeps_lz4, .init = setup, .fini = teardown) { compaction_keeps_codec(SLUICE_CODEC_LZ4); }
Test(plog, compaction_keeps_zstd, .init = setup, .fini = teardown) { compaction_keeps_codec(SLUICE_CODEC_ZSTD); }

/* Proves a compaction pass that cannot write its cleaned file fails without
 * touching the log and logs why (here the file's name is taken by a
 * directory: "Is a directory"). */
Test(plog, compaction_failure_logged, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&TINY, true, NULL);
	for (int i = 0; i < 60; i++) {
		append_keyed_codec(l, 20, 10, i * 20, i, SLUICE_CODEC_NONE);
		flush_log(l);
	}
	int64_t written = sluice_plog_written_end(l);
	char p[300];
	seg_file(p, sizeof p, 0, ".log.cleaned");
	cr_assert_eq(mkdir(p, 0755), 0);
	char logp[300];
	snprintf(logp, sizeof logp, "%s/stderr.txt", H.root);
	int fd = open(logp, O_RDWR | O_CREAT | O_TRUNC, 0644), saved = dup(STDERR_FILENO);
	cr_assert(fd >= 0 && saved >= 0);
	dup2(fd, STDERR_FILENO);
	int64_t g = sluice_plog_compact(l, 2000, 0, 1ll << 30);
	dup2(saved, STDERR_FILENO);
	close(saved);
	char text[4096] = {0};
	cr_assert_geq(pread(fd, text, sizeof text - 1, 0), 0);
	close(fd);
	cr_expect_eq(g, -1);
	cr_expect_not_null(strstr(text, "compaction pass failed"), "logged: %s", text);
	cr_expect_not_null(strstr(text, strerror(EISDIR)), "the reason logged: %s", text);
	cr_expect_eq(sluice_plog_written_end(l), written);
	cr_expect_eq(count_records(l), 60 * 20, "nothing removed");
	rmdir(p);
	sluice_plog_close(l);
}

/* ---- lookups by time: codecs, the lookup cache, the time index, work ------------- */

/* One batch of n records with timestamps base_ts + 10 * i, compressed with
 * codec (0: none), 2 KiB values; LogAppendTime when lat >= 0. */
static void append_timed(struct sluice_plog *l, int n, int64_t base_ts, int codec, int64_t lat)
{
	static char val[2048];
	memset(val, 'q', sizeof val);
	struct tb_rec recs[64];
	cr_assert_leq(n, 64);
	for (int i = 0; i < n; i++)
		recs[i] = (struct tb_rec){"k", 1, val, (int32_t)sizeof val, 10 * i};
	struct kwr w;
	kwr_init(&w, 256, 1u << 30);
	(void)tb_records(&w, recs, n);
	size_t cap = codec ? sluice_compress_bound(codec, w.len) : w.len;
	uint8_t *z = malloc(cap);
	int64_t zl = (int64_t)w.len;
	if (codec)
		zl = sluice_compress(codec, w.buf, w.len, z, cap);
	else
		memcpy(z, w.buf, w.len);
	cr_assert_gt(zl, 0);
	struct tb_hdr h = tb_hdr_default(n, base_ts);
	h.max_timestamp = base_ts + 10 * (n - 1);
	h.attributes = (int16_t)codec;
	size_t len;
	uint8_t *b = tb_wrap(&h, z, (size_t)zl, &len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, 0, lat, &base, &last), 0);
	free(b);
	free(z);
	kwr_free(&w);
}

/* Proves lookups by time answer right inside batches of every codec (the
 * first record at or after the target, its timestamp), from a batch's
 * decompressed records kept for the next lookup (a repeat costs no
 * decompression) as from a fresh one, and that a LogAppendTime batch
 * is answered from its header alone. The work reported is what bounds
 * lookups per storage-core turn. */
Test(plog, offset_for_time_codecs_cache_work, .init = setup, .fini = teardown)
{
	struct opts o = BIG;
	struct sluice_plog *l = open_log(&o, true, NULL);
	/* batch k (k = 0..39): 20 records, offsets 20k..20k+19, ts 100000k + 10i,
	 * codec k % 5 */
	for (int k = 0; k < 40; k++) {
		append_timed(l, 20, 100000 * (int64_t)k, k % 5, -1);
		flush_log(l);
	}
	for (int k = 0; k < 40; k++) {
		int64_t found = -7, work = 0;
		/* the 13th record: ts 100000k + 125 -> offset 20k + 13 at ts + 130 */
		int64_t off = sluice_plog_offset_for_time_work(l, 100000 * (int64_t)k + 125, &found, &work);
		cr_expect_eq(off, 20 * k + 13, "batch %d (codec %d): offset %" PRId64, k, k % 5, off);
		cr_expect_eq(found, 100000 * (int64_t)k + 130, "batch %d: timestamp %" PRId64, k, found);
		/* one batch inflated and scanned, and a few headers: the time index
		 * starts the search near the target, not at the first batch */
		cr_expect_lt(work, 2 * 20 * 2100 + 4 * 61, "batch %d: work %" PRId64, k, work);
		if (k % 5) {
			int64_t again = 0;
			cr_expect_eq(sluice_plog_offset_for_time_work(l, 100000 * (int64_t)k + 125, &found, &again), off);
			cr_expect_lt(again, work, "a repeat is served from the kept records (%" PRId64 " vs %" PRId64 ")",
				     again, work);
		}
	}
	int64_t found;
	cr_expect_eq(sluice_plog_offset_for_time(l, 39 * 100000 + 191, &found), -1);
	/* LogAppendTime: every record carries the batch's time; no decompression */
	append_timed(l, 20, 5000000, SLUICE_CODEC_ZSTD, 9000000);
	flush_log(l);
	int64_t work = 0;
	cr_expect_eq(sluice_plog_offset_for_time_work(l, 8999999, &found, &work), 800);
	cr_expect_eq(found, 9000000);
	cr_expect_lt(work, 4096, "answered from the header (%" PRId64 " bytes of work)", work);
	sluice_plog_close(l);
	/* after a clean reopen (indexes from disk) the answers stay */
	l = open_log(&o, true, NULL);
	for (int k = 0; k < 40; k += 7)
		cr_expect_eq(sluice_plog_offset_for_time(l, 100000 * (int64_t)k + 125, &found), 20 * k + 13);
	sluice_plog_close(l);
}

/* ---- zero-copy reads (sluice_plog_read_extents) ------------------------------------- */

static int64_t zc_loaded; /* calls of the loaded hook */

static void hook_loaded(struct sluice_plog *l, void *arg)
{
	(void)l; (void)arg;
	zc_loaded++;
}

/* open_log, with the loaded hook a storage core uses to retry reads. */
static struct sluice_plog *zc_open(const struct opts *o)
{
	struct sluice_plog_cfg cfg = {
		.segment_bytes = o->segment_bytes,
		.index_interval_bytes = 4096,
		.flush_interval_messages = o->flush_messages,
		.chunk_bytes = o->chunk_bytes,
		.pool = o->pool,
		.direct_io = o->direct,
	};
	struct sluice_plog_hooks hooks = {.wait_write = hook_wait_write, .loaded = hook_loaded};
	struct sluice_plog *l = NULL;
	char err[256] = "";
	cr_assert_eq(sluice_plog_open(H.dir, &cfg, true, &hooks, &l, NULL, err, sizeof err), 0, "open: %s", err);
	return l;
}

/* Check what a result references: non-empty ranges inside the valid bytes
 * of pinned extents, following each other in the file, one per extent. */
static void zc_check_ranges(const struct sluice_read_result *r, int32_t n)
{
	cr_assert_leq(r->n, SLUICE_READ_RANGES_MAX);
	int64_t total = 0;
	for (uint32_t i = 0; i < r->n; i++) {
		const struct sluice_read_range *g = &r->range[i];
		const struct sluice_extent *e = g->ext;
		cr_assert_gt(g->len, 0);
		cr_assert_geq(e->refs, 2, "pinned beside its tail or cache reference");
		cr_assert_geq(e->file_off + g->off, e->lo);
		cr_assert_leq(e->file_off + g->off + g->len, e->hi);
		if (i) {
			const struct sluice_read_range *p = &r->range[i - 1];
			cr_assert_eq(p->ext->file_off + p->off + p->len, e->file_off + g->off, "ranges in file order");
			cr_assert_neq(p->ext, e);
		}
		total += g->len;
	}
	cr_assert_eq(total, n);
	cr_assert_eq(r->bytes, n);
}

/* Read with sluice_plog_read_extents, on the ring (reaping completions while
 * it would block) or synchronously, and copy what the ranges reference
 * into *out (malloc'd, NULL unless bytes). *rounds: reads that would block. */
static int32_t zc_read_below(struct sluice_plog *l, int64_t off, int64_t end, int32_t max, bool min_one, bool async,
			     uint8_t **out, int *rounds)
{
	struct sluice_read_result r;
	int32_t n;
	int k = 0;
	struct io_uring *ring = async ? &H.ring : NULL;
	while ((n = sluice_plog_read_extents(l, off, end, max, min_one, ring, &r)) == SLUICE_PLOG_READ_WOULD_BLOCK) {
		cr_assert(async, "a synchronous read never would block");
		cr_assert_eq(r.n, 0, "nothing stays pinned");
		cr_assert(sluice_plog_write_inflight(l), "would block with no load in flight");
		cr_assert_lt(++k, 16, "the read converges");
		while (sluice_plog_write_inflight(l))
			reap_one();
	}
	if (rounds)
		*rounds = k;
	*out = NULL;
	if (n > 0) {
		zc_check_ranges(&r, n);
		uint8_t *buf = malloc((size_t)n), *p = buf;
		for (uint32_t i = 0; i < r.n; i++) {
			memcpy(p, r.range[i].ext->buf + r.range[i].off, r.range[i].len);
			p += r.range[i].len;
		}
		*out = buf;
	} else {
		cr_assert_eq(r.n, 0);
	}
	sluice_read_result_release(&r);
	cr_assert_eq(r.n, 0);
	return n;
}

static int32_t zc_read(struct sluice_plog *l, int64_t off, int32_t max, bool min_one, bool async, uint8_t **out,
		       int *rounds)
{
	return zc_read_below(l, off, sluice_plog_log_end(l), max, min_one, async, out, rounds);
}

/* Reads below end serve what sluice_plog_read copies up to the first batch
 * whose base offset is at or past end. */
static void zc_compare_below(struct sluice_plog *l, int64_t off, int64_t end, int32_t max, bool min_one)
{
	uint8_t *copy = NULL, *zc = NULL;
	int32_t b = zc_read_below(l, off, end, max, min_one, true, &zc, NULL);
	int32_t a = sluice_plog_read(l, off, max, min_one, &copy);
	int32_t want = 0;
	while (off < end && want < a && (int64_t)kbe64(copy + want) < end)
		want += (int32_t)kbe32(copy + want + SLUICE_BATCH_OFF_LENGTH) + 12;
	cr_assert_eq(b, a < 0 ? a : want, "offset %" PRId64 " end %" PRId64 ": %d bytes, want %d", off, end, b, want);
	if (b > 0)
		cr_assert_eq(memcmp(zc, copy, (size_t)b), 0);
	free(copy);
	free(zc);
}

/* The extents read at off reference exactly the bytes sluice_plog_read
 * copies (or, past what one result can reference, a prefix of whole
 * batches of them). */
static void zc_compare(struct sluice_plog *l, int64_t off, int32_t max, bool min_one, bool async, int64_t ext_bytes)
{
	uint8_t *copy = NULL, *zc = NULL;
	int32_t b = zc_read(l, off, max, min_one, async, &zc, NULL); /* first: it may find the extents cold */
	int32_t a = sluice_plog_read(l, off, max, min_one, &copy);
	if (a > (SLUICE_READ_RANGES_MAX - 1) * ext_bytes && b > 0)
		cr_assert_leq(b, a, "capped: a prefix");
	else
		cr_assert_eq(b, a, "offset %" PRId64 " max %d min_one %d async %d: %d bytes vs %d copied", off, max,
			     min_one, async, b, a);
	if (b > 0)
		cr_assert_eq(memcmp(zc, copy, (size_t)b), 0, "offset %" PRId64 ": other bytes", off);
	free(copy);
	free(zc);
}

/* Every offset of a log (and one past its end), with read sizes below a
 * header, inside a batch, at and across extent and segment sizes. */
static void zc_compare_all(struct sluice_plog *l, bool async, int64_t ext_bytes)
{
	static const int32_t maxes[] = {1, 61, 200, 5000, 16384, 40000, 1 << 20};
	int64_t end = sluice_plog_log_end(l); /* everything written here */
	for (int64_t off = sluice_plog_log_start(l); off <= end + 1; off++)
		for (size_t m = 0; m < sizeof maxes / sizeof maxes[0]; m++)
			for (int min_one = 0; min_one < 2; min_one++)
				zc_compare(l, off, maxes[m], min_one, async, ext_bytes);
}

/* Appends batches of 1-3 records with values of 100 to ~9 KB, committed in
 * groups of one to five. */
static struct expect *zc_fill(struct sluice_plog *l, int batches)
{
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < batches; i++) {
		int n = 1 + i % 3;
		expect_add(e, append_batch(l, n, 1000 + i, (size_t)(100 + (i * 2731) % 9000), (uint8_t)(i + 1)), n,
			   (uint8_t)(i + 1));
		if (i % 5 == i / 10 % 5)
			flush_log(l);
	}
	flush_log(l);
	return e;
}

/* Proves sluice_plog_read_extents references exactly the bytes
 * sluice_plog_read copies, for every offset, read sizes from below a header
 * to past a segment, with and without min_one, across 16 KiB extents and
 * 64 KiB segments: on data just written (tail and cached extents), then
 * cold after a reopen, read on the ring (loads completing asynchronously)
 * and synchronously. */
Test(plog, read_extents_match_copy, .init = setup, .fini = teardown)
{
	struct sluice_pool *pool = sluice_pool_new(16384, 32 * 16384, &H.ring);
	cr_assert_not_null(pool);
	struct opts o = SMALL;
	o.pool = pool;
	struct sluice_plog *l = zc_open(&o);
	struct expect *e = zc_fill(l, 80);
	int64_t bases[64];
	cr_assert_geq(list_logs(bases, 64), 4, "several segments");
	zc_compare_all(l, false, 16384);
	zc_compare_all(l, true, 16384);
	sluice_plog_close(l); /* the cache forgets it */
	l = zc_open(&o);
	zc_loaded = 0;
	zc_compare_all(l, true, 16384);
	cr_expect_gt(zc_loaded, 0, "cold extents were loaded on the ring");
	zc_compare_all(l, false, 16384);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), e->count);
	/* below a high watermark: at batch starts, inside batches, at the start */
	for (int k = 0; k < e->count; k += 3)
		for (int64_t end = e->base[k]; end < e->base[k] + 3; end++)
			for (int64_t off = e->base[k > 8 ? k - 8 : 0]; off <= end; off += 2)
				zc_compare_below(l, off, end, k % 2 ? 1 << 20 : 20000, true);
	while (sluice_plog_write_inflight(l))
		reap_one();
	sluice_plog_close(l);
	sluice_pool_destroy(pool);
	free(e);
}

/* Whether extent e still holds extent file_off of segment seg_base of l,
 * cached (it was neither evicted nor reused). */
static bool zc_holds(const struct sluice_extent *e, const struct sluice_plog *l, int64_t seg_base, int64_t file_off)
{
	return e->cached && e->owner == l && e->seg_base == seg_base && e->file_off == file_off;
}

/* Proves a pin holds: with a pool of 8 extents and a log of about 20, the
 * extents a result references stay cached with their bytes unchanged while
 * two full passes over the log evict everything else, and once released
 * they are evicted like any other; pinned tail bytes survive later appends. */
Test(plog, read_extents_pins_hold_under_pressure, .init = setup, .fini = teardown)
{
	struct sluice_pool *pool = sluice_pool_new(16384, 8 * 16384, &H.ring);
	cr_assert_not_null(pool);
	struct opts o = BIG;
	o.pool = pool;
	struct sluice_plog *l = zc_open(&o);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 100; i++)
		expect_add(e, append_batch(l, 2, 1000 + i, 3000, (uint8_t)(i + 1)), 2, (uint8_t)(i + 1));
	flush_log(l);
	sluice_plog_close(l);
	l = zc_open(&o);
	struct sluice_read_result r;
	int32_t n = sluice_plog_read_extents(l, 0, sluice_plog_log_end(l), 2 * 16384, true, NULL, &r);
	cr_assert_gt(n, 16384);
	zc_check_ranges(&r, n);
	uint32_t pinned = r.n;
	struct sluice_extent *ext[SLUICE_READ_RANGES_MAX];
	int64_t off[SLUICE_READ_RANGES_MAX];
	uint8_t *snap = malloc((size_t)n), *p = snap;
	for (uint32_t i = 0; i < pinned; i++) {
		ext[i] = r.range[i].ext;
		off[i] = ext[i]->file_off;
		memcpy(p, ext[i]->buf + r.range[i].off, r.range[i].len);
		p += r.range[i].len;
	}
	struct sluice_pool_stats a, b;
	sluice_pool_get_stats(pool, &a);
	cr_expect_eq(verify_all(l, e, 0, 16384), 100); /* 16 KiB reads: at most 2 extents each */
	cr_expect_eq(verify_all(l, e, 0, 16384), 100);
	while (sluice_plog_write_inflight(l))
		reap_one(); /* reads ahead */
	sluice_pool_get_stats(pool, &b);
	cr_expect_gt(b.evictions, a.evictions + 8, "the passes evicted (%" PRIu64 ")", b.evictions - a.evictions);
	cr_expect_eq(b.unbudgeted, a.unbudgeted, "within the budget: pins leave room");
	p = snap;
	for (uint32_t i = 0; i < pinned; i++) {
		cr_expect(zc_holds(ext[i], l, 0, off[i]), "pinned extent %u kept", i);
		cr_expect_eq(memcmp(ext[i]->buf + r.range[i].off, p, r.range[i].len), 0, "pinned bytes unchanged");
		p += r.range[i].len;
	}
	sluice_read_result_release(&r);
	for (uint32_t i = 0; i < pinned; i++)
		cr_expect_eq(ext[i]->refs, 1, "only the cache holds it now");
	cr_expect_eq(verify_all(l, e, 50, 16384), 50); /* the second half: 9 extents */
	while (sluice_plog_write_inflight(l))
		reap_one();
	for (uint32_t i = 0; i < pinned; i++)
		cr_expect(!zc_holds(ext[i], l, 0, off[i]), "released extent %u evicted", i);
	/* a pin on the tail: later appends and commits leave its bytes alone */
	int64_t last = e->base[99];
	uint8_t *before = NULL;
	n = sluice_plog_read_extents(l, last, sluice_plog_log_end(l), 1 << 20, true, NULL, &r);
	cr_assert_gt(n, 0);
	cr_assert_eq(zc_read(l, last, 1 << 20, true, false, &before, NULL), n);
	for (int i = 0; i < 20; i++)
		expect_add(e, append_batch(l, 2, 5000 + i, 3000, (uint8_t)(0x80 + i)), 2, (uint8_t)(0x80 + i));
	flush_log(l);
	p = before;
	for (uint32_t i = 0; i < r.n; i++) {
		cr_expect_eq(memcmp(r.range[i].ext->buf + r.range[i].off, p, r.range[i].len), 0, "tail bytes kept");
		p += r.range[i].len;
	}
	sluice_read_result_release(&r);
	cr_expect_eq(verify_all(l, e, 0, 1 << 20), 120);
	while (sluice_plog_write_inflight(l))
		reap_one();
	sluice_plog_close(l);
	sluice_pool_destroy(pool);
	free(before);
	free(snap);
	free(e);
}

/* Proves a cold read never reads on the caller: the first read of cold
 * extents answers WOULD_BLOCK with their loads on the ring and nothing
 * pinned, the completions call the loaded hook, and the read then answers
 * (in at most three rounds: the index walk's extent, then the rest at
 * once) with the bytes sluice_plog_read copies; a load that fails (the file
 * cut under the log) answers -2 instead of loading forever. */
Test(plog, read_extents_cold_on_ring, .init = setup, .fini = teardown)
{
	struct sluice_pool *pool = sluice_pool_new(16384, 64 * 16384, &H.ring);
	cr_assert_not_null(pool);
	struct opts o = BIG;
	o.pool = pool;
	struct sluice_plog *l = zc_open(&o);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 60; i++)
		expect_add(e, append_batch(l, 2, 1000 + i, 3000, (uint8_t)(i + 1)), 2, (uint8_t)(i + 1));
	flush_log(l);
	sluice_plog_close(l);
	l = zc_open(&o);
	zc_loaded = 0;
	struct sluice_read_result r;
	int64_t end = sluice_plog_log_end(l);
	int32_t first = sluice_plog_read_extents(l, e->base[10], end, 40000, true, &H.ring, &r);
	cr_assert_eq(first, SLUICE_PLOG_READ_WOULD_BLOCK);
	cr_assert_eq(r.n, 0);
	cr_assert(sluice_plog_write_inflight(l), "a load is in flight");
	while (sluice_plog_write_inflight(l))
		reap_one();
	cr_expect_gt(zc_loaded, 0, "its completion called the loaded hook");
	uint8_t *zc = NULL, *copy = NULL;
	int rounds = 0;
	int32_t n = zc_read(l, e->base[10], 40000, true, true, &zc, &rounds);
	cr_expect_leq(rounds, 2, "%d more rounds", rounds);
	cr_assert_gt(n, 36000);
	cr_assert_eq(sluice_plog_read(l, e->base[10], 40000, true, &copy), n);
	cr_expect_eq(memcmp(zc, copy, (size_t)n), 0);
	struct sluice_batch b;
	cr_assert_eq(sluice_batch_check(zc, (size_t)n, &b), SLUICE_BATCH_OK);
	cr_expect_eq(b.base_offset, e->base[10]);
	free(zc);
	free(copy);
	/* cut the file under the log: a cold load comes back short */
	sluice_plog_close(l);
	l = zc_open(&o);
	char path[300];
	seg_file(path, sizeof path, 0, ".log");
	cr_assert_eq(truncate(path, 16384), 0);
	int32_t rc;
	int k = 0;
	while ((rc = sluice_plog_read_extents(l, e->base[40], sluice_plog_log_end(l), 1 << 20, true, &H.ring, &r)) ==
	       SLUICE_PLOG_READ_WOULD_BLOCK) {
		cr_assert_lt(++k, 8);
		while (sluice_plog_write_inflight(l))
			reap_one();
	}
	cr_expect_eq(rc, -2, "a failed load is an I/O error (%d)", rc);
	cr_expect_eq(r.n, 0);
	while (sluice_plog_write_inflight(l))
		reap_one();
	sluice_plog_close(l);
	sluice_pool_destroy(pool);
	free(e);
}

/* Proves damage on disk is refused through the zero-copy path as through
 * the copying one: after a clean stop (no rescan at open), a batch with a
 * flipped byte answers -3 on the ring and synchronously, a read from the
 * segment's start serves only the two batches before it, and the batches
 * after it are served. */
Test(plog, read_extents_crc_damage_refused, .init = setup, .fini = teardown)
{
	struct sluice_plog *l = open_log(&SMALL, true, NULL);
	struct expect *e = fill_segments(l, 45, 1500);
	sluice_plog_close(l);
	int64_t bases[64];
	cr_assert_geq(list_logs(bases, 64), 3);
	char p[300];
	seg_file(p, sizeof p, bases[0], ".log");
	int64_t pos[64];
	cr_assert_geq(batch_positions(p, pos, 64), 4);
	flip_byte(p, pos[2] + 200);
	for (int async = 0; async < 2; async++) {
		l = zc_open(&SMALL);
		uint8_t *buf = NULL;
		cr_expect_eq(zc_read(l, e->base[2], 1 << 20, true, async, &buf, NULL), -3, "corrupt batch served");
		cr_expect_null(buf);
		int32_t n = zc_read(l, 0, 1 << 20, true, async, &buf, NULL);
		cr_assert_gt(n, 0);
		int32_t at = 0, k = 0;
		while (at < n) {
			struct sluice_batch b;
			cr_assert_eq(sluice_batch_check(buf + at, (size_t)(n - at), &b), SLUICE_BATCH_OK);
			at += sluice_batch_total_bytes(&b);
			k++;
		}
		cr_expect_eq(k, 2, "only the two batches before the corrupt one");
		free(buf);
		cr_assert_gt(zc_read(l, e->base[3], 1 << 20, true, async, &buf, NULL), 0);
		free(buf);
		zc_compare_all(l, async, 1 << 20);
		while (sluice_plog_write_inflight(l))
			reap_one();
		sluice_plog_close(l);
	}
	free(e);
}

/* Proves the bound on ranges: with 4 KiB extents a 1 MiB read references
 * at most SLUICE_READ_RANGES_MAX extents and stops at the last whole batch
 * within them (a prefix of what sluice_plog_read copies), and a first batch
 * spanning more extents than that answers TOO_MANY_EXTENTS, which
 * sluice_plog_read serves by copying. */
Test(plog, read_extents_ranges_bounded, .init = setup, .fini = teardown)
{
	struct opts o = BIG;
	o.chunk_bytes = 16384;
	struct sluice_plog *l = zc_open(&o);
	struct expect *e = calloc(1, sizeof *e);
	for (int i = 0; i < 400; i++)
		expect_add(e, append_batch(l, 1, 1000 + i, 3000, (uint8_t)(i + 1)), 1, (uint8_t)(i + 1));
	int64_t big = append_batch(l, 1, 9000, 1100000, 0xBB);
	flush_log(l);
	uint8_t *zc = NULL, *copy = NULL;
	int32_t n = zc_read(l, 0, 2 << 20, true, false, &zc, NULL);
	cr_assert_gt(n, (SLUICE_READ_RANGES_MAX - 1) * 16384);
	cr_assert_leq(n, SLUICE_READ_RANGES_MAX * 16384);
	int32_t c = sluice_plog_read(l, 0, 2 << 20, true, &copy);
	cr_assert_gt(c, n, "sluice_plog_read copies more");
	cr_expect_eq(memcmp(zc, copy, (size_t)n), 0);
	struct sluice_batch b;
	cr_expect_eq(sluice_batch_check(copy + n, (size_t)(c - n), &b), SLUICE_BATCH_OK, "cut at a batch boundary");
	free(zc);
	free(copy);
	for (int64_t off = 0; off < big; off += 37)
		zc_compare(l, off, 1 << 20, true, false, 16384);
	struct sluice_read_result r;
	int64_t end = sluice_plog_log_end(l);
	cr_expect_eq(sluice_plog_read_extents(l, big, end, 1 << 20, true, NULL, &r), SLUICE_PLOG_READ_TOO_MANY_EXTENTS);
	cr_expect_eq(r.n, 0);
	cr_expect_eq(sluice_plog_read_extents(l, big, end, 1 << 20, false, NULL, &r), 0, "no min_one: nothing fits");
	cr_assert_gt(sluice_plog_read(l, big, 1 << 20, true, &copy), 1100000);
	free(copy);
	sluice_plog_close(l);
	free(e);
}
