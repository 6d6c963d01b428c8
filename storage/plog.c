/* Partition log implementation (see plog.h): segments, sparse offset and
 * time indexes, the O_DIRECT write path from the tail extents, reads through
 * the extent cache, and crash recovery by scanning and truncating. */
#include "storage/plog.h"
#include "storage/extent.h"
#include "common/crc32c.h"
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/kafka/compress.h"
#include "common/log.h"
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define SWAP_GROUP_MAX 1024 /* segments merged into one by a compaction pass */
#define PREALLOC_STEP_MIN SLUICE_PLOG_BLOCK
#define PREALLOC_STEP_MAX (64ll << 20)
#define PREALLOC_ALIGN_MAX (1ll << 20) /* large steps end on a MiB boundary */
/* A write past the preallocated space within this long of the previous
 * one doubles the step (a busy partition); a later one preallocates
 * nothing (prealloc_ahead). */
#define PREALLOC_BUSY_MS 1000
_Static_assert(PREALLOC_STEP_MIN <= PREALLOC_ALIGN_MAX && PREALLOC_ALIGN_MAX <= PREALLOC_STEP_MAX,
	       "preallocation steps");
#define PATH_BYTES 1024 /* dir (at most PATH_BYTES - 64) + file name */
#define SCAN_BUF_BYTES (4u << 20)
#define PLOG_DECOMPRESS_MAX (64u << 20) /* a batch inflating past this is not searched */
#define PLOG_LOOKUP_CACHE_MAX (4u << 20)  /* a lookup keeps a batch's records up to this size */
_Static_assert((SLUICE_PLOG_BLOCK & (SLUICE_PLOG_BLOCK - 1)) == 0, "align_down masks with the block size");
_Static_assert(SLUICE_PLOG_CHUNK_BYTES_DEFAULT % SLUICE_PLOG_BLOCK == 0 &&
		       SLUICE_PLOG_CHUNK_BYTES_DEFAULT >= 4 * SLUICE_PLOG_BLOCK,
	       "the default extent is whole blocks, and no smaller than plog_new allows");
_Static_assert(SLUICE_PLOG_CHUNK_BYTES_DEFAULT <= UINT32_MAX, "a read range's offset and length are 32-bit");
_Static_assert((SLUICE_PLOG_SEGMENTS_MAX & (SLUICE_PLOG_SEGMENTS_MAX - 1)) == 0 &&
		       SLUICE_PLOG_SEGMENTS_MAX <= UINT32_MAX / 2,
	       "segment arrays double from a power of two up to exactly the maximum");
_Static_assert(SWAP_GROUP_MAX <= SLUICE_PLOG_SEGMENTS_MAX, "a compaction group is segments of one log");
_Static_assert(SCAN_BUF_BYTES % SLUICE_PLOG_BLOCK == 0 && SCAN_BUF_BYTES >= SLUICE_BATCH_HEADER_BYTES,
	       "a scan buffer holds at least a batch header");
_Static_assert(PLOG_LOOKUP_CACHE_MAX <= PLOG_DECOMPRESS_MAX, "the lookup cache keeps only what a lookup inflates");
_Static_assert(SLUICE_BATCH_OFF_MAX_TS + 8 <= SLUICE_BATCH_HEADER_BYTES, "an append patches header bytes only");
_Static_assert(SLUICE_PLOG_OFFSET_MAX <= INT64_MAX - INT32_MAX - 1,
	       "the offsets recovery finds sane include every offset a log assigns");

/* The offsets and positions every operation leaves in order: the log
 * start at or below the written end, that at or below the log end (the
 * active segment's next offset), and in the active segment the committed
 * position at or below the submitted one, at or below its bytes (not
 * once failed: a roll that failed to open its new segment leaves the old
 * one's positions). A macro, so a failure names the caller's line. */
#define check_offsets(l)                                                                                              \
	do {                                                                                                          \
		assert((l)->seg_n >= 1 && (l)->seg_n <= SLUICE_PLOG_SEGMENTS_MAX);                                    \
		assert((l)->log_start <= (l)->written_end && (l)->written_end <= (l)->leo);                           \
		assert((l)->failed || ((l)->committed_pos <= (l)->submitted_end &&                                    \
				       (l)->submitted_end <= (l)->segs[(l)->seg_n - 1].size));                        \
		assert((l)->segs[(l)->seg_n - 1].next_offset == (l)->leo);                                            \
	} while (0)

struct idx_entry {
	int32_t rel_offset;
	int32_t position;
};
struct tidx_entry {
	int64_t timestamp;
	int32_t rel_offset;
};

struct segment {
	int64_t base_offset;
	int64_t size;        /* logical bytes (appended, whether written or not) */
	int64_t next_offset; /* offset after the last batch */
	int64_t max_ts;
	int fd_read;         /* buffered, opened on demand (scans, compaction) */
	int fd_direct;       /* O_DIRECT, opened on demand for cold reads into the cache */
	struct idx_entry *idx;
	uint32_t idx_n, idx_cap;
	struct tidx_entry *tidx;
	uint32_t tidx_n, tidx_cap;
	int64_t bytes_since_index;
	int64_t first_ts; /* max timestamp of the first batch (segment.ms rolls) */
	int64_t max_ts_offset; /* last offset of the batch holding max_ts, -1: none */
	/* A closed segment whose bytes past size could not be read as batches
	 * (rot, a cut, garbage): they stay on disk untouched, size covers only
	 * the batches before them, and a fetch of an offset from next_offset up
	 * to the next segment's base answers CORRUPT_MESSAGE. */
	bool damaged;
	/* Its time index in memory is not whole: a trusted closed segment
	 * whose .timeindex was not loaded (lookups scan it instead). */
	bool tidx_partial;
};

struct sluice_plog {
	char dir[PATH_BYTES - 64];
	struct sluice_plog_cfg cfg;
	struct sluice_plog_hooks hooks;
	struct segment *segs;
	uint32_t seg_n, seg_cap;
	int fd_write; /* active segment, O_DIRECT where allowed */
	int fd_slot;  /* fd_write's slot among the ring's registered files, -1: none */
	struct sluice_pool *pool; /* the storage core's, or this log's own */
	bool pool_owned;
	int64_t ext_bytes;
	/* The active segment's tail: consecutive extents from the one holding
	 * align_down(submitted_end) to the one holding size, so everything not
	 * yet written is in memory (at most segment.bytes / ext_bytes + 1). */
	struct sluice_extent **tail;
	uint32_t tail_n, tail_cap;
	struct iovec *iov; /* a write spanning more extents than SQEs allowed */
	uint32_t iov_cap;
	int64_t leo;          /* next offset to assign */
	int64_t written_end;  /* next offset after the data written locally (write completed) */
	int64_t committed_pos; /* byte position in the active segment matching written_end */
	int64_t log_start;
	int64_t submitted_end; /* active segment position covered by submitted writes */
	bool write_inflight, fsync_inflight, fsync_linked;
	int inflight_parts;    /* write SQEs of the group commit not yet completed */
	int inflight_err;      /* first error among them */
	int64_t inflight_done; /* bytes they completed */
	int64_t inflight_end_pos, inflight_end_offset;
	int64_t inflight_len; /* bytes the write in flight must complete */
	int64_t unflushed_messages;
	int64_t prealloc_end; /* the active segment file's size (ahead of the data) */
	int64_t prealloc_step; /* how far ahead the last preallocation went (write-rate driven) */
	int64_t prealloc_ms;   /* monotonic time of the last write past prealloc_end, 0: none */
	int64_t last_append_ms; /* monotonic time of the last append, 0: none since open */
	uint64_t compact_sig;      /* the closed segments as the last compaction pass left them */
	int64_t compact_due_ms;    /* a pass is due by then anyway (kept tombstones expire; 0: retry) */
	int64_t compact_next_base; /* where the next pass starts (0: the oldest segment) */
	int64_t compact_clean_end; /* segments below this base were cleaned (the rest is dirty) */
	bool prealloc_refused;
	int64_t recovery_point;
	int64_t unflushed_since_ms; /* monotonic time of the oldest unsynced append, 0: none */
	/* One extent read ahead of a sequential reader at a time (user_data
	 * kind 3); cache_gen changes whenever cached data is invalidated, so a
	 * read that raced an invalidation is thrown away. */
	struct sluice_extent *ra_ext;
	int64_t ra_seg_base;
	uint64_t ra_gen, cache_gen;
	bool ra_inflight;
	/* Cold-read loads in flight for sluice_plog_read_extents (user_data
	 * kind 4 + slot), and the last one that failed, answered -2 once to
	 * the read that needs it. load_ring is set while such a read walks an
	 * index, so that a miss there loads on the ring instead of blocking. */
	struct plog_load {
		struct sluice_extent *ext; /* NULL: slot free */
		int64_t seg_base;
		uint64_t gen;
	} loads[SLUICE_PLOG_LOADS_MAX];
	int loads_inflight;
	bool load_err;
	int64_t load_err_seg, load_err_off;
	struct io_uring *load_ring;
	/* Bumped by every truncation: a compaction pass prepared before one
	 * never swaps in (segments of the same names and sizes may since hold
	 * other batches). */
	uint64_t trunc_gen;
	bool failed;
	bool opened;   /* sluice_plog_open completed */
	bool modified; /* appended to (or recovered) since open: close must sync */
	bool close_nosync; /* close leaves syncing to the caller (syncfs at shutdown) */
	/* The records of the compressed batch the last lookup by time
	 * decompressed (BaseOffset, CRC, length name it); freed when idle. */
	uint8_t *tl_plain;
	size_t tl_plain_len;
	int64_t tl_base, tl_len;
	uint32_t tl_crc;
};

static struct segment *active(struct sluice_plog *l) { return &l->segs[l->seg_n - 1]; }

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void write_log_start(struct sluice_plog *l);

/* Arithmetic on record timestamps, which are whatever producers sent
 * (INT64_MIN and INT64_MAX included), and on header fields read from disk:
 * saturating instead of overflowing. */
static int64_t ts_age_ms(int64_t now_ms, int64_t ts)
{
	int64_t age;
	return __builtin_sub_overflow(now_ms, ts, &age) ? (ts < 0 ? INT64_MAX : INT64_MIN) : age;
}

static int64_t ts_plus_ms(int64_t ts, int64_t ms)
{
	int64_t sum;
	return __builtin_add_overflow(ts, ms, &sum) ? (ms > 0 ? INT64_MAX : INT64_MIN) : sum;
}

static void seg_path(const struct sluice_plog *l, int64_t base, const char *ext, char *out)
{
	snprintf(out, PATH_BYTES, "%s/%020" PRId64 "%s", l->dir, base, ext);
}

static int64_t align_down(int64_t v) { return v & ~(int64_t)(SLUICE_PLOG_BLOCK - 1); }
static int64_t align_up(int64_t v) { return align_down(v + SLUICE_PLOG_BLOCK - 1); }

static int64_t ext_floor(const struct sluice_plog *l, int64_t pos) { return pos - pos % l->ext_bytes; }

/* The tail extent mirroring the extent that starts at file_off, or NULL. */
static struct sluice_extent *tail_at(const struct sluice_plog *l, int64_t file_off)
{
	if (!l->tail_n || file_off < l->tail[0]->file_off)
		return NULL;
	uint64_t i = (uint64_t)(file_off - l->tail[0]->file_off) / (uint64_t)l->ext_bytes;
	return i < l->tail_n ? l->tail[i] : NULL;
}

/* Hand a tail extent of segment seg_base to the read cache (its bytes
 * [lo, hi) are final) and drop the tail's reference. */
static void extent_retire(struct sluice_plog *l, struct sluice_extent *e, int64_t seg_base, bool cache)
{
	assert(e->refs > 0 && e->lo <= e->hi);
	if (cache && e->hi > e->lo) {
		e->owner = l;
		e->seg_base = seg_base;
		sluice_cache_insert(l->pool, e);
	}
	sluice_extent_put(e);
}

/* Cached data of a segment (seg_base >= 0) or of the whole log is stale. */
static void cache_forget(struct sluice_plog *l, int64_t seg_base)
{
	l->cache_gen++;
	sluice_cache_forget(l->pool, l, seg_base);
}

static void readahead_complete(struct sluice_plog *l, int res);
static void read_ahead(struct sluice_plog *l, struct segment *s, int64_t k);
static void load_complete(struct sluice_plog *l, int slot, int res);
static int load_submit(struct sluice_plog *l, struct segment *s, int64_t k, struct io_uring *ring);

/* Let go of the whole tail (nothing may be unwritten or in flight). */
static void tail_release(struct sluice_plog *l, int64_t seg_base, bool cache)
{
	assert(!l->write_inflight && l->tail_n <= l->tail_cap);
	for (uint32_t i = 0; i < l->tail_n; i++)
		extent_retire(l, l->tail[i], seg_base, cache);
	l->tail_n = 0;
}

/* Whether offset can be an index entry of segment s: Kafka's index files
 * hold 32-bit offsets relative to the segment's base (and 32-bit
 * positions). Appends roll before a batch would break this; a segment
 * written by older code may span more, and then its entries stop where
 * they no longer fit, so lookups past them scan forward from the last one
 * instead of landing on a wrapped entry. */
static bool seg_indexable(const struct segment *s, int64_t offset, int64_t position)
{
	return offset >= s->base_offset && offset - s->base_offset <= INT32_MAX && position >= 0 &&
	       position <= INT32_MAX;
}

static bool seg_add_index(struct segment *s, int64_t offset, int64_t position)
{
	if (!seg_indexable(s, offset, position))
		return false;
	if (s->idx_n == s->idx_cap) {
		uint32_t cap = s->idx_cap ? s->idx_cap * 2 : 64;
		struct idx_entry *n = realloc(s->idx, cap * sizeof *n);
		if (!n)
			return false;
		s->idx = n;
		s->idx_cap = cap;
	}
	/* Index entries increase: offsets (an entry per batch, in order) and
	 * positions (batches take bytes). */
	assert(s->idx_n == 0 || (s->idx[s->idx_n - 1].rel_offset <= offset - s->base_offset &&
				 s->idx[s->idx_n - 1].position < position));
	s->idx[s->idx_n++] = (struct idx_entry){(int32_t)(offset - s->base_offset), (int32_t)position};
	assert(s->base_offset + s->idx[s->idx_n - 1].rel_offset == offset);
	return true;
}

static bool seg_add_tindex(struct segment *s, int64_t ts, int64_t offset)
{
	if (s->tidx_n && s->tidx[s->tidx_n - 1].timestamp >= ts)
		return true;
	if (!seg_indexable(s, offset, 0))
		return false;
	if (s->tidx_n == s->tidx_cap) {
		uint32_t cap = s->tidx_cap ? s->tidx_cap * 2 : 64;
		struct tidx_entry *n = realloc(s->tidx, cap * sizeof *n);
		if (!n)
			return false;
		s->tidx = n;
		s->tidx_cap = cap;
	}
	assert(s->tidx_n == 0 || s->tidx[s->tidx_n - 1].rel_offset <= offset - s->base_offset);
	s->tidx[s->tidx_n++] = (struct tidx_entry){ts, (int32_t)(offset - s->base_offset)};
	assert(s->tidx_n <= s->tidx_cap && s->tidx[s->tidx_n - 1].timestamp == ts);
	return true;
}

/* Index bookkeeping for one batch placed at position in segment s. */
static void seg_note_batch(struct sluice_plog *l, struct segment *s, const struct sluice_batch *b,
			   int64_t position)
{
	int32_t total = sluice_batch_total_bytes(b);
	int64_t last = b->base_offset + b->last_offset_delta;
	assert(position >= 0 && total >= SLUICE_BATCH_HEADER_BYTES);
	assert(b->base_offset >= s->next_offset && b->last_offset_delta >= 0); /* batches follow each other */
	if (b->max_timestamp > s->max_ts || s->max_ts_offset < 0) {
		s->max_ts = b->max_timestamp > s->max_ts ? b->max_timestamp : s->max_ts;
		s->max_ts_offset = last;
	}
	if (s->idx_n == 0 || s->bytes_since_index >= l->cfg.index_interval_bytes) {
		/* Kafka's index format: each entry names the batch's LAST offset
		 * and the batch's position; a lookup takes the last entry <= the
		 * target and scans forward from there. The time index, likewise,
		 * gets (largest timestamp so far, its batch's last offset) when
		 * the largest timestamp grew. */
		(void)seg_add_index(s, last, position);
		if (s->tidx_n == 0 || s->max_ts > s->tidx[s->tidx_n - 1].timestamp)
			(void)seg_add_tindex(s, s->max_ts, s->max_ts_offset);
		s->bytes_since_index = 0;
	}
	s->bytes_since_index += total;
	if (s->size == 0 && position == 0)
		s->first_ts = b->max_timestamp;
	s->next_offset = b->base_offset + b->last_offset_delta + 1;
}

static void seg_free(struct segment *s)
{
	if (s->fd_read >= 0)
		close(s->fd_read);
	if (s->fd_direct >= 0)
		close(s->fd_direct);
	free(s->idx);
	free(s->tidx);
	memset(s, 0, sizeof *s);
	s->fd_read = s->fd_direct = -1;
}

static int seg_fd_read(struct sluice_plog *l, struct segment *s)
{
	if (s->fd_read < 0) {
		char p[PATH_BYTES];
		seg_path(l, s->base_offset, ".log", p);
		s->fd_read = open(p, O_RDONLY | O_CLOEXEC);
		/* consumers read segments front to back: ask for readahead */
		if (s->fd_read >= 0)
			(void)posix_fadvise(s->fd_read, 0, 0, POSIX_FADV_SEQUENTIAL);
	}
	return s->fd_read;
}

/* An O_DIRECT descriptor for cold reads into the cache: the active
 * segment's write descriptor, or one opened on demand; -1 where the
 * filesystem refuses O_DIRECT (reads then go through the page cache). */
static int seg_fd_direct(struct sluice_plog *l, struct segment *s)
{
	if (!l->cfg.direct_io)
		return -1;
	if (s == &l->segs[l->seg_n - 1] && l->fd_write >= 0)
		return l->fd_write;
	if (s->fd_direct < 0) {
		char p[PATH_BYTES];
		seg_path(l, s->base_offset, ".log", p);
		s->fd_direct = open(p, O_RDONLY | O_CLOEXEC | O_DIRECT);
	}
	return s->fd_direct;
}

/* Write the in-memory indexes in Kafka's format (big-endian, relative offsets). */
static void seg_write_indexes_as(struct sluice_plog *l, struct segment *s, const char *suffix);
static void seg_write_indexes(struct sluice_plog *l, struct segment *s) { seg_write_indexes_as(l, s, ""); }

static void seg_write_indexes_as(struct sluice_plog *l, struct segment *s, const char *suffix)
{
	/* As Kafka does when a segment closes: the time index ends with the
	 * segment's largest timestamp. */
	if (s->max_ts >= 0 && s->max_ts_offset >= 0 && (s->tidx_n == 0 || s->max_ts > s->tidx[s->tidx_n - 1].timestamp))
		(void)seg_add_tindex(s, s->max_ts, s->max_ts_offset);
	char p[PATH_BYTES], ext[32];
	snprintf(ext, sizeof ext, ".index%s", suffix);
	seg_path(l, s->base_offset, ext, p);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		uint8_t *buf = malloc((size_t)s->idx_n * 8 + 1);
		if (buf) {
			for (uint32_t i = 0; i < s->idx_n; i++) {
				assert(i == 0 || s->idx[i].position > s->idx[i - 1].position);
				kput32(buf + i * 8, (uint32_t)s->idx[i].rel_offset);
				kput32(buf + i * 8 + 4, (uint32_t)s->idx[i].position);
				assert((int32_t)kbe32(buf + i * 8) == s->idx[i].rel_offset);
			}
			ssize_t w = write(fd, buf, (size_t)s->idx_n * 8);
			(void)w;
			free(buf);
		}
		close(fd);
	}
	snprintf(ext, sizeof ext, ".timeindex%s", suffix);
	seg_path(l, s->base_offset, ext, p);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		uint8_t *buf = malloc((size_t)s->tidx_n * 12 + 1);
		if (buf) {
			for (uint32_t i = 0; i < s->tidx_n; i++) {
				assert(i == 0 || s->tidx[i].timestamp > s->tidx[i - 1].timestamp);
				kput64(buf + i * 12, (uint64_t)s->tidx[i].timestamp);
				kput32(buf + i * 12 + 8, (uint32_t)s->tidx[i].rel_offset);
				assert((int64_t)kbe64(buf + i * 12) == s->tidx[i].timestamp);
			}
			ssize_t w = write(fd, buf, (size_t)s->tidx_n * 12);
			(void)w;
			free(buf);
		}
		close(fd);
	}
}

/* The recovery point: below it the log was on stable storage, so recovery
 * treats missing or bad bytes there as damage to keep and report, and only
 * what lies past it as a torn write to cut. At a shutdown (close_nosync) the
 * file is not synced here: the storage core syncs each data directory's
 * filesystem once afterwards, and writes the clean-shutdown marker only if
 * that worked. */
static void write_recovery_point(struct sluice_plog *l, int64_t offset)
{
	char p[PATH_BYTES], tmp[PATH_BYTES];
	snprintf(p, sizeof p, "%s/sluice-recovery-point", l->dir);
	snprintf(tmp, sizeof tmp, "%s/sluice-recovery-point.tmp", l->dir);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%" PRId64 "\n", offset);
	fflush(f);
	if (!l->close_nosync)
		fdatasync(fileno(f));
	fclose(f);
	if (rename(tmp, p) == 0)
		l->recovery_point = offset;
}

static int64_t read_recovery_point(const char *dir)
{
	char p[PATH_BYTES + 32];
	snprintf(p, sizeof p, "%s/sluice-recovery-point", dir);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	long long v = 0;
	if (fscanf(f, "%lld", &v) != 1 || v < 0)
		v = 0;
	fclose(f);
	return v;
}

/* ---- recovery ---------------------------------------------------------- */

/* Why a scan stopped before the end of the file. */
enum scan_stop {
	SCAN_END,       /* every byte is a batch */
	SCAN_INVALID,   /* short, malformed, out of sequence, or (when checked) a failing CRC */
	SCAN_MISPLACED, /* the first batch, whole and its CRC good, lies outside [lo, hi) */
	SCAN_OVERLAP,   /* a whole, good batch continuing its predecessor reaches hi */
};

struct scan_result {
	enum scan_stop stop;
	int64_t base, last; /* the offending batch's offsets (SCAN_MISPLACED, SCAN_OVERLAP) */
	const char *why;    /* SCAN_INVALID: what was wrong, for the log */
};

/* Whether a batch whose parse succeeded has offsets that make sense at all
 * (a corrupt header can claim anything; nothing below may overflow). */
static bool batch_offsets_sane(const struct sluice_batch *b)
{
	return b->base_offset >= 0 && b->last_offset_delta >= 0 && b->base_offset <= INT64_MAX - INT32_MAX - 1;
}

/* Classify a whole batch at the start of buf whose offsets lie outside
 * [expect, hi): a good batch that is the file's first does not belong
 * under the segment's name (a stray or misnamed file), one that continues
 * its predecessor and runs into the next segment's base means two files
 * hold the same offsets; anything else is damage. */
static void scan_misfit(const uint8_t *buf, size_t avail, const struct sluice_batch *b, int64_t pos, int64_t expect,
			int64_t hi, struct scan_result *res)
{
	struct sluice_batch c;
	int64_t last = b->base_offset + b->last_offset_delta;
	assert(b->base_offset < expect || last >= hi); /* only batches that do not fit come here */
	res->base = b->base_offset;
	res->last = last;
	if (sluice_batch_check_crc(buf, avail, &c) != SLUICE_BATCH_OK) {
		res->stop = SCAN_INVALID;
		res->why = "a batch out of offset order failing its CRC";
	} else if (pos == 0) {
		res->stop = SCAN_MISPLACED;
	} else if (b->base_offset == expect && last >= hi) {
		res->stop = SCAN_OVERLAP;
	} else {
		res->stop = SCAN_INVALID;
		res->why = "a batch whose offsets do not follow the previous batch";
	}
}

/* How scan_buffer stopped walking the batches in its buffer. */
enum scan_chunk {
	CHUNK_DONE,   /* every byte of the buffer was whole batches */
	CHUNK_REFILL, /* a batch whole on disk runs past the buffer: read again from it */
	CHUNK_GROW,   /* the same at the buffer's start: a larger buffer is needed */
	CHUNK_STOP,   /* a batch that does not fit the segment (res says why) */
};

/* What a scan walks: the segment's offset bounds and the file's size. */
struct scan_bounds {
	int64_t hi;        /* the next segment's base offset (INT64_MAX: none) */
	int64_t file_size;
	bool check_crc;
};

/* Forget what a segment's indexes and offsets said before a scan. */
static void seg_scan_reset(struct segment *s)
{
	s->idx_n = s->tidx_n = 0;
	s->tidx_partial = false;
	s->bytes_since_index = 0;
	s->max_ts = -1;
	s->first_ts = -1;
	s->max_ts_offset = -1;
	s->next_offset = s->base_offset;
}

/* Walk the batches of buf[0, got), read at file position pos, noting each
 * in s; *off ends at the first byte not consumed, *expect at the offset the
 * next batch must start at or after. CHUNK_GROW sets *need to the buffer
 * size the batch at pos takes. */
static enum scan_chunk scan_buffer(struct sluice_plog *l, struct segment *s, const uint8_t *buf, size_t got,
				   int64_t pos, const struct scan_bounds *sb, int64_t *expect,
				   struct sluice_plog_recovery *rec, struct scan_result *res, size_t *off, size_t *need)
{
	*off = 0;
	while (*off < got) {
		struct sluice_batch b;
		memset(&b, 0, sizeof b);
		int64_t at = pos + (int64_t)*off;
		enum sluice_batch_result r = sb->check_crc ? sluice_batch_check_crc(buf + *off, got - *off, &b)
							   : sluice_batch_parse(buf + *off, got - *off, &b);
		if (r == SLUICE_BATCH_SHORT && at + 17 <= sb->file_size && b.length > 0 &&
		    at + b.length + 12 <= sb->file_size) {
			/* The batch is whole on disk but not in the buffer: refill
			 * from its start, growing the buffer when it is larger. */
			*need = (size_t)b.length + 12;
			return *off == 0 ? CHUNK_GROW : CHUNK_REFILL;
		}
		if (r != SLUICE_BATCH_OK || !batch_offsets_sane(&b)) {
			res->stop = SCAN_INVALID;
			res->why = r == SLUICE_BATCH_OK ? "impossible offsets" : sluice_batch_result_name(r);
			return CHUNK_STOP;
		}
		if (b.base_offset < *expect || b.base_offset + b.last_offset_delta >= sb->hi) {
			scan_misfit(buf + *off, got - *off, &b, at, *expect, sb->hi, res);
			return CHUNK_STOP;
		}
		seg_note_batch(l, s, &b, at);
		assert(s->next_offset > *expect && s->next_offset <= sb->hi);
		*expect = s->next_offset;
		if (rec)
			rec->batches_scanned++;
		*off += (size_t)sluice_batch_total_bytes(&b);
	}
	assert(*off == got);
	return CHUNK_DONE;
}

/* Scan one segment from position 0, rebuilding its indexes. Batches must
 * lie in [lo, hi) (lo: the segment's base offset, hi: the next segment's,
 * INT64_MAX for the last) and follow one another in offset order. Stops at
 * the first batch that does not (res says why); returns the length of the
 * batches before it, or -1 on an I/O error. */
static int64_t seg_scan_range(struct sluice_plog *l, struct segment *s, int fd, bool check_crc, int64_t lo, int64_t hi,
			      struct sluice_plog_recovery *rec, struct scan_result *res)
{
	struct stat st;
	assert(lo >= s->base_offset);
	memset(res, 0, sizeof *res);
	if (fstat(fd, &st) < 0)
		return -1;
	size_t cap = SCAN_BUF_BYTES;
	uint8_t *buf = malloc(cap);
	if (!buf)
		return -1;
	const struct scan_bounds sb = {.hi = hi, .file_size = st.st_size, .check_crc = check_crc};
	int64_t pos = 0, expect = lo;
	seg_scan_reset(s);
	bool io_error = false;
	while (pos < sb.file_size) {
		size_t want = (size_t)(sb.file_size - pos < (int64_t)cap ? sb.file_size - pos : (int64_t)cap);
		ssize_t got = pread(fd, buf, want, pos);
		if (got < 0)
			io_error = true;
		if (got <= 0)
			break;
		size_t off = 0, need = 0;
		enum scan_chunk c = scan_buffer(l, s, buf, (size_t)got, pos, &sb, &expect, rec, res, &off, &need);
		pos += (int64_t)off;
		if (c == CHUNK_GROW) {
			uint8_t *nb = need > cap ? realloc(buf, need) : NULL;
			if (!nb) {
				io_error = true;
				errno = ENOMEM;
				break;
			}
			buf = nb;
			cap = need;
			continue;
		}
		if (c == CHUNK_STOP || off == 0)
			break;
	}
	free(buf);
	assert(pos <= sb.file_size);
	s->size = pos;
	if (io_error)
		return -1;
	if (pos < sb.file_size && res->stop == SCAN_END) {
		res->stop = SCAN_INVALID; /* a batch cut short by the end of the file */
		res->why = "a batch cut short";
	}
	return pos;
}

/* The same without an upper bound or a report (compaction's output). */
static int64_t seg_scan(struct sluice_plog *l, struct segment *s, int fd, bool check_crc, int64_t expect_offset,
			struct sluice_plog_recovery *rec)
{
	struct scan_result res;
	int64_t lo = expect_offset > s->base_offset ? expect_offset : s->base_offset;
	return seg_scan_range(l, s, fd, check_crc, lo, INT64_MAX, rec, &res);
}

/* Whether file bytes [pos, size) are all zeros: the written part checked
 * byte by byte (at most ZERO_CHECK_BYTES of it), the rest a hole or
 * preallocated, unwritten space (which reads as zeros). */
#define ZERO_CHECK_BYTES (64 << 20)
static bool preallocated_zeros(int fd, int64_t pos, int64_t size)
{
	assert(pos >= 0 && pos <= size);
	off_t hole = lseek(fd, pos, SEEK_HOLE);
	int64_t written_end = hole < 0 || hole > size ? size : (int64_t)hole;
	if (written_end < size && lseek(fd, written_end, SEEK_DATA) >= 0)
		return false; /* written data after the hole */
	if (written_end - pos > ZERO_CHECK_BYTES)
		return false;
	uint8_t buf[65536];
	while (pos < written_end) {
		size_t want = (size_t)(written_end - pos < (int64_t)sizeof buf ? written_end - pos : (int64_t)sizeof buf);
		ssize_t got = pread(fd, buf, want, pos);
		if (got <= 0)
			return false;
		for (ssize_t i = 0; i < got; i++)
			if (buf[i])
				return false;
		pos += got;
	}
	return true;
}

/* Load a closed segment's offset index from disk when it looks sane. */
static bool seg_load_index(struct sluice_plog *l, struct segment *s, int64_t log_size)
{
	char p[PATH_BYTES];
	seg_path(l, s->base_offset, ".index", p);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat st;
	bool ok = false;
	if (fstat(fd, &st) == 0 && st.st_size % 8 == 0 && st.st_size > 0 && st.st_size < (1 << 28)) {
		uint8_t *buf = malloc((size_t)st.st_size);
		if (buf && pread(fd, buf, (size_t)st.st_size, 0) == st.st_size) {
			ok = true;
			int32_t last_pos = -1, last_rel = -1;
			s->idx_n = 0;
			for (int64_t i = 0; i < st.st_size / 8 && ok; i++) {
				int32_t rel = (int32_t)kbe32(buf + i * 8), pos = (int32_t)kbe32(buf + i * 8 + 4);
				if (rel < last_rel || pos <= last_pos || pos >= log_size) {
					ok = false;
					break;
				}
				last_rel = rel;
				last_pos = pos;
				ok = seg_add_index(s, s->base_offset + rel, pos);
			}
		}
		free(buf);
	}
	close(fd);
	if (!ok)
		s->idx_n = 0;
	assert(!ok || (int64_t)s->idx_n * 8 == st.st_size);
	return ok;
}

/* For a closed segment whose index loaded: find next_offset and max ts from
 * the last indexed batch onwards (headers only). */
/* A trusted closed segment's largest timestamp: the last .timeindex entry
 * (max timestamp so far). False when the file is missing or malformed. */
static bool seg_load_max_ts(struct sluice_plog *l, struct segment *s)
{
	char p[PATH_BYTES];
	seg_path(l, s->base_offset, ".timeindex", p);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	struct stat st;
	uint8_t e[12];
	bool ok = fstat(fd, &st) == 0 && st.st_size >= 12 && st.st_size % 12 == 0 &&
		  pread(fd, e, sizeof e, st.st_size - 12) == (ssize_t)sizeof e;
	close(fd);
	if (ok)
		s->max_ts = (int64_t)kbe64(e);
	return ok;
}

/* A batch header's offsets and length, read without trusting them. */
struct hdr_view {
	int64_t base, last, len;
	int64_t max_ts;
	bool ok; /* magic 2, a length at least a header, offsets sane */
};

static struct hdr_view hdr_read(const uint8_t *hdr)
{
	struct hdr_view v;
	int32_t delta = (int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LAST_DELTA);
	v.base = (int64_t)kbe64(hdr);
	v.len = (int64_t)(int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LENGTH) + 12;
	v.max_ts = (int64_t)kbe64(hdr + SLUICE_BATCH_OFF_MAX_TS);
	v.ok = hdr[SLUICE_BATCH_OFF_MAGIC] == 2 && v.len >= SLUICE_BATCH_HEADER_BYTES && delta >= 0 && v.base >= 0 &&
	       v.base <= INT64_MAX - INT32_MAX - 1;
	v.last = v.ok ? v.base + delta : -1;
	return v;
}

/* For a closed segment whose index loaded: check it against the file and
 * find next_offset and the largest timestamp from the last indexed batch
 * onwards (headers only). The first batch must lie under the segment's
 * name and every batch read below hi (the next segment's base), the last
 * index entry must name the batch it points at, and the segment must not
 * span more offsets than its index can hold; otherwise -1 (the caller
 * scans the whole segment instead). */
static int64_t seg_tail_scan(struct sluice_plog *l, struct segment *s, int fd, int64_t file_size, int64_t hi)
{
	(void)l;
	assert(s->idx_n > 0); /* called once the index loaded */
	uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
	if (pread(fd, hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)
		return -1;
	struct hdr_view v = hdr_read(hdr);
	if (!v.ok || v.base < s->base_offset || v.last >= hi)
		return -1;
	int64_t pos = s->idx[s->idx_n - 1].position;
	int64_t indexed = s->base_offset + s->idx[s->idx_n - 1].rel_offset, expect = s->base_offset;
	bool first = true;
	while (pos + (int64_t)sizeof hdr <= file_size) {
		if (pread(fd, hdr, sizeof hdr, pos) != (ssize_t)sizeof hdr)
			return -1;
		v = hdr_read(hdr);
		if (!v.ok || pos + v.len > file_size || v.base < expect || v.last >= hi || (first && v.last != indexed))
			return -1;
		first = false;
		expect = s->next_offset = v.last + 1;
		if (v.max_ts > s->max_ts)
			s->max_ts = v.max_ts;
		pos += v.len;
	}
	assert(pos <= file_size);
	s->size = pos;
	if (pos != file_size || first || s->next_offset - 1 - s->base_offset > INT32_MAX)
		return -1;
	return pos;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void swaps_recover(const char *dir);
static int truncate_recover(struct sluice_plog *l, char *err, size_t errlen);

/* Files a compaction pass left behind unfinished (stopped before its swap). */
static void remove_stray_cleaned(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if ((len > 8 && strcmp(e->d_name + len - 8, ".cleaned") == 0) ||
		    (len > 9 && strcmp(e->d_name + len - 9, ".swap.tmp") == 0)) {
			char p[PATH_BYTES];
			snprintf(p, sizeof p, "%.*s/%s", PATH_BYTES - 300, dir, e->d_name);
			(void)unlink(p);
		}
	}
	closedir(d);
}

static int list_segments(const char *dir, int64_t **out, uint32_t *n)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	uint32_t cap = 16, cnt = 0;
	int64_t *v = malloc(cap * sizeof *v);
	struct dirent *e;
	while (v && (e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len != 24 || strcmp(e->d_name + 20, ".log") != 0)
			continue;
		char *end;
		long long base = strtoll(e->d_name, &end, 10);
		if (end != e->d_name + 20 || base < 0)
			continue;
		if (cnt == cap) {
			/* Never open a log with some of its segments left out: the
			 * ones left out would be overwritten by later rolls. */
			int64_t *nv = cap < SLUICE_PLOG_SEGMENTS_MAX ? realloc(v, 2 * cap * sizeof *nv) : NULL;
			if (!nv) {
				free(v);
				v = NULL;
				errno = cap < SLUICE_PLOG_SEGMENTS_MAX ? ENOMEM : E2BIG;
				break;
			}
			cap *= 2;
			v = nv;
		}
		v[cnt++] = base;
	}
	int saved = errno;
	closedir(d);
	errno = saved;
	if (!v)
		return -1;
	assert(cnt <= SLUICE_PLOG_SEGMENTS_MAX);
	qsort(v, cnt, sizeof *v, cmp_i64);
	*out = v;
	*n = cnt;
	return 0;
}

static bool segs_reserve(struct sluice_plog *l)
{
	assert(l->seg_n <= l->seg_cap && l->seg_cap <= SLUICE_PLOG_SEGMENTS_MAX);
	if (l->seg_n < l->seg_cap)
		return true;
	if (l->seg_cap >= SLUICE_PLOG_SEGMENTS_MAX)
		return false;
	uint32_t cap = l->seg_cap ? l->seg_cap * 2 : 8;
	struct segment *n = realloc(l->segs, cap * sizeof *n);
	if (!n)
		return false;
	l->segs = n;
	l->seg_cap = cap;
	return true;
}

static void remove_segment_files(struct sluice_plog *l, int64_t base)
{
	static const char *const exts[] = {".log", ".index", ".timeindex"};
	char p[PATH_BYTES];
	for (size_t i = 0; i < 3; i++) {
		seg_path(l, base, exts[i], p);
		unlink(p);
	}
}

/* The active segment's write descriptor, opened on demand (idle partitions
 * give theirs back, see sluice_plog_release_fds). */
static int fd_write_open(struct sluice_plog *l)
{
	if (l->fd_write >= 0)
		return 0;
	char p[PATH_BYTES];
	seg_path(l, active(l)->base_offset, ".log", p);
	int flags = O_RDWR | O_CREAT | O_CLOEXEC;
	l->fd_write = open(p, flags | (l->cfg.direct_io ? O_DIRECT : 0), 0644);
	if (l->fd_write < 0 && errno == EINVAL && l->cfg.direct_io) {
		SLOG_WARN("storage", "%s: O_DIRECT refused by the filesystem; using buffered writes", p);
		l->cfg.direct_io = false;
		l->fd_write = open(p, flags, 0644);
	}
	if (l->fd_write < 0)
		return -1;
	l->fd_slot = sluice_pool_file_register(l->pool, l->fd_write);
	return 0;
}

static void fd_write_close(struct sluice_plog *l)
{
	sluice_pool_file_unregister(l->pool, l->fd_slot);
	l->fd_slot = -1;
	close(l->fd_write);
	l->fd_write = -1;
}

/* The descriptor an SQE names: the registered slot where there is one. */
static void sqe_set_file(const struct sluice_plog *l, struct io_uring_sqe *sqe)
{
	if (l->fd_slot >= 0) {
		sqe->fd = l->fd_slot;
		sqe->flags |= IOSQE_FIXED_FILE;
	}
}

int sluice_plog_open_fds(const struct sluice_plog *l)
{
	int n = l->fd_write >= 0;
	for (uint32_t i = 0; i < l->seg_n; i++)
		n += (l->segs[i].fd_read >= 0) + (l->segs[i].fd_direct >= 0);
	return n;
}

size_t sluice_plog_cache_bytes(const struct sluice_plog *l)
{
	return (size_t)l->tail_n * (size_t)l->ext_bytes;
}

size_t sluice_plog_release_cache(struct sluice_plog *l)
{
	if (l->write_inflight || l->fsync_inflight || l->ra_inflight || l->loads_inflight ||
	    l->segs[l->seg_n - 1].size > l->submitted_end)
		return 0;
	size_t n = sluice_plog_cache_bytes(l) + l->tl_plain_len;
	assert(!l->ra_ext && !l->write_inflight); /* nothing in flight reads or writes the tail */
	tail_release(l, l->segs[l->seg_n - 1].base_offset, true);
	free(l->tl_plain);
	l->tl_plain = NULL;
	l->tl_plain_len = 0;
	return n;
}

int sluice_plog_release_fds(struct sluice_plog *l)
{
	if (l->write_inflight || l->fsync_inflight || l->ra_inflight || l->loads_inflight ||
	    l->segs[l->seg_n - 1].size > l->submitted_end)
		return 0;
	int n = 0;
	if (l->fd_write >= 0) {
		/* No sync needed: fdatasync on a later descriptor covers the file. */
		fd_write_close(l);
		n++;
	}
	for (uint32_t i = 0; i < l->seg_n; i++) {
		struct segment *s = &l->segs[i];
		if (s->fd_read >= 0) {
			close(s->fd_read);
			s->fd_read = -1;
			n++;
		}
		if (s->fd_direct >= 0) {
			close(s->fd_direct);
			s->fd_direct = -1;
			n++;
		}
	}
	return n;
}

/* Open the active segment for direct writes; its partial tail block is
 * loaded into a tail extent on the first append. */
static int open_active(struct sluice_plog *l, char *err, size_t errlen)
{
	struct segment *s = active(l);
	char p[PATH_BYTES];
	seg_path(l, s->base_offset, ".log", p);
	if (fd_write_open(l) < 0) {
		snprintf(err, errlen, "open %s: %s", p, strerror(errno));
		return -1;
	}
	/* The new file's directory entry must be durable before data in it is
	 * acknowledged with a sync. */
	int dfd = s->size == 0 ? open(l->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	if (ftruncate(l->fd_write, s->size) < 0) {
		snprintf(err, errlen, "truncate %s: %s", p, strerror(errno));
		return -1;
	}
	/* log.preallocate: the whole segment up front, as Kafka does (the file
	 * is cut to its true length when it closes); otherwise preallocation
	 * follows the writes (prealloc_ahead). Refusal is not an error. */
	l->prealloc_end = s->size;
	if (l->cfg.preallocate && l->cfg.segment_bytes > s->size &&
	    fallocate(l->fd_write, 0, s->size, l->cfg.segment_bytes - s->size) == 0) {
		l->prealloc_end = l->cfg.segment_bytes;
		l->modified = true; /* the file is longer than its data until closed */
	}
	/* Tail extents are taken on the first append, so an idle partition
	 * holds no buffer. */
	assert(l->tail_n == 0);
	l->submitted_end = s->size;
	l->committed_pos = s->size;
	assert(l->prealloc_end >= s->size && l->fd_write >= 0);
	return 0;
}

static int create_segment(struct sluice_plog *l, int64_t base)
{
	/* Segments follow each other: a new one starts at or past the offsets
	 * of the one before it. */
	assert(l->seg_n == 0 || base >= active(l)->next_offset);
	if (!segs_reserve(l))
		return -ENOMEM;
	struct segment *s = &l->segs[l->seg_n++];
	memset(s, 0, sizeof *s);
	s->fd_read = s->fd_direct = -1;
	s->base_offset = base;
	s->next_offset = base;
	s->max_ts = -1;
	s->first_ts = -1;
	s->max_ts_offset = -1;
	assert(l->seg_n <= l->seg_cap);
	return 0;
}

/* Damage in a segment recovery keeps: logged with what is served and what
 * is not; its bytes stay on disk as they are. */
static void seg_mark_damaged(struct sluice_plog *l, struct segment *s, int64_t file_size, int64_t hi,
			     const struct scan_result *res, struct sluice_plog_recovery *rec)
{
	char served[96] = "no batch before it is served", refused[128] = "no offset lies in the damaged bytes";
	assert(!s->damaged && s->next_offset <= hi && s->size <= file_size);
	s->damaged = true;
	rec->segments_damaged++;
	if (s->next_offset > s->base_offset)
		snprintf(served, sizeof served, "its batches before that (offsets up to %" PRId64 ") are served",
			 s->next_offset - 1);
	if (hi > s->next_offset)
		snprintf(refused, sizeof refused, "a fetch of offsets %" PRId64 " to %" PRId64 " answers CORRUPT_MESSAGE",
			 s->next_offset, hi - 1);
	SLOG_ERR("storage", "%s: segment %020" PRId64 ".log is damaged at byte %lld of %lld (%s): %s, %s; the file "
		 "is kept as it is and no other segment is touched", l->dir, s->base_offset, (long long)s->size,
		 (long long)file_size, res->why ? res->why : "a batch out of place", served, refused);
}

/* The last segment has bytes past its batches, or ends below the recovery
 * point. Below the recovery point (written at each roll and clean stop,
 * once everything before it was synced) they held data that was on stable
 * storage: damage, kept, and the log continues in a new segment at the
 * recovery point so no offset is given out twice. At or past it, after a
 * crash, they are a torn write, and after a clean stop (which wrote the
 * log end there) they were never part of the log: cut off, as Kafka does.
 * A clean stop whose recovery point lies below the segment's batches
 * leaves no way to tell. */
static int recover_tail(struct sluice_plog *l, struct segment *s, int fd, int64_t file_size, bool clean,
			const struct scan_result *res, struct sluice_plog_recovery *rec, char *err, size_t errlen)
{
	int64_t rp = l->recovery_point, valid = s->size;
	assert(s == active(l) && valid <= file_size);
	if (s->next_offset < rp) {
		struct scan_result missing = *res;
		if (valid == file_size)
			missing.why = "its end is missing: the recovery point lies past its last batch";
		seg_mark_damaged(l, s, file_size, rp, &missing, rec);
		if (create_segment(l, rp) < 0) {
			snprintf(err, errlen, "out of memory");
			errno = ENOMEM;
			return SLUICE_PLOG_OPEN_UNUSABLE;
		}
		l->modified = true;
		return 0;
	}
	if (clean && s->next_offset > rp && !preallocated_zeros(fd, valid, file_size)) {
		snprintf(err, errlen, "segment %020" PRId64 ".log is damaged at byte %lld of %lld (%s) after a clean stop, "
			 "and the recovery point %" PRId64 " lies below its batches, so the offsets the damaged bytes held "
			 "are unknown; nothing was changed on disk", s->base_offset, (long long)valid, (long long)file_size,
			 res->why ? res->why : "a batch out of place", rp);
		errno = EUCLEAN;
		return SLUICE_PLOG_OPEN_UNUSABLE;
	}
	rec->bytes_truncated += file_size - valid;
	if (preallocated_zeros(fd, valid, file_size))
		/* Space preallocated past the data (a stop before the segment
		 * was closed): nothing was lost. */
		SLOG_INFO("storage", "%s: segment %020" PRId64 " truncated from %lld to %lld bytes: "
				     "only zeros (preallocated space) past the last batch",
			  l->dir, s->base_offset, (long long)file_size, (long long)valid);
	else
		SLOG_WARN("storage", "%s: segment %020" PRId64 " truncated from %lld to %lld bytes (%s at the end of "
			  "the active segment, past offset %" PRId64 ")", l->dir, s->base_offset, (long long)file_size,
			  (long long)valid, res->why ? res->why : "a batch out of place", s->next_offset - 1);
	char p[PATH_BYTES];
	seg_path(l, s->base_offset, ".log", p);
	if (truncate(p, valid) < 0)
		SLOG_WARN("storage", "truncate %s: %s", p, strerror(errno));
	return 0;
}

/* Whether the segment file named base begins with a whole, CRC-good batch
 * whose base offset lies outside [base, hi): a file that does not belong under
 * its name (a stray copy, a misnamed file). Fills err when it does. Files
 * that cannot be read, or begin with damage, are left to the scan. */
static bool seg_misnamed(const struct sluice_plog *l, int64_t base, int64_t hi, char *err, size_t errlen)
{
	char p[PATH_BYTES];
	seg_path(l, base, ".log", p);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	struct stat st;
	uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
	bool bad = false;
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	    pread(fd, hdr, sizeof hdr, 0) == (ssize_t)sizeof hdr) {
		struct hdr_view v = hdr_read(hdr);
		uint8_t *batch = v.ok && (v.base < base || v.base >= hi) && v.len <= st.st_size ? malloc((size_t)v.len) : NULL;
		struct sluice_batch b;
		bad = batch && pread(fd, batch, (size_t)v.len, 0) == v.len &&
		      sluice_batch_check_crc(batch, (size_t)v.len, &b) == SLUICE_BATCH_OK;
		free(batch);
		if (bad) {
			char next[32] = "the log end";
			if (hi != INT64_MAX)
				snprintf(next, sizeof next, "%" PRId64, hi);
			snprintf(err, errlen, "segment file %020" PRId64 ".log begins with a batch of offsets %" PRId64
				 " to %" PRId64 ", outside the offsets %" PRId64 " up to %s that its name and the next segment "
				 "file allow: a stray or misnamed segment file; nothing was changed on disk",
				 base, v.base, v.last, base, next);
		}
	}
	if (fd >= 0)
		close(fd);
	return bad;
}

/* Open segment s for reading, and check it is a regular file: its
 * descriptor with *st filled, or -1 with err and errno saying why. */
static int seg_open_regular(struct sluice_plog *l, struct segment *s, struct stat *st, char *err, size_t errlen)
{
	int fd = seg_fd_read(l, s);
	if (fd < 0 || fstat(fd, st) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open segment %020" PRId64 ".log: %s", s->base_offset, strerror(e));
		errno = e;
		return -1;
	}
	if (!S_ISREG(st->st_mode)) {
		snprintf(err, errlen, "segment %020" PRId64 ".log is %s, not a file; nothing was changed on disk",
			 s->base_offset, S_ISDIR(st->st_mode) ? "a directory" : "not a regular file");
		errno = EUCLEAN;
		return -1;
	}
	return fd;
}

/* Segment i's scan found a good batch outside its offsets (SCAN_MISPLACED
 * or SCAN_OVERLAP at byte valid): the partition is unusable. Name the file
 * that does not belong, when one does not: a stray file shows first as a
 * neighbour running into it. */
static int report_misfit(const struct sluice_plog *l, const int64_t *bases, uint32_t nbase, uint32_t i,
			 const struct scan_result *res, int64_t valid, char *err, size_t errlen)
{
	assert(i < nbase);
	assert(res->stop == SCAN_MISPLACED || res->stop == SCAN_OVERLAP);
	bool last = i + 1 == nbase;
	int64_t hi = last ? INT64_MAX : bases[i + 1];
	for (uint32_t k = 0; k < nbase; k++)
		if (seg_misnamed(l, bases[k], k + 1 < nbase ? bases[k + 1] : INT64_MAX, err, errlen)) {
			errno = EUCLEAN;
			return SLUICE_PLOG_OPEN_UNUSABLE;
		}
	char next[32] = "the log end";
	if (!last)
		snprintf(next, sizeof next, "%" PRId64, hi);
	if (res->stop == SCAN_MISPLACED)
		snprintf(err, errlen, "segment file %020" PRId64 ".log begins with a batch of offsets %" PRId64
			 " to %" PRId64 ", outside the offsets %" PRId64 " up to %s that its name and the next "
			 "segment file allow: a stray or misnamed segment file; nothing was changed on disk",
			 bases[i], res->base, res->last, bases[i], next);
	else
		snprintf(err, errlen, "segment files %020" PRId64 ".log and %020" PRId64 ".log overlap: the "
			 "first holds a batch of offsets %" PRId64 " to %" PRId64 " at byte %lld, but the "
			 "second is named for offset %" PRId64 "; nothing was changed on disk",
			 bases[i], hi, res->base, res->last, (long long)valid, hi);
	errno = EUCLEAN;
	return SLUICE_PLOG_OPEN_UNUSABLE;
}

/* Load the segments in base-offset order. Each one's batches must lie
 * between its own base offset and the next segment's. Closed segments
 * below the recovery point are trusted when their index agrees with the
 * file; the others are scanned (with CRCs after a crash). Nothing is
 * deleted and only the last segment is ever cut (recover_tail): damage in
 * a closed segment is kept and reported (a later segment exists only once
 * this one was complete and synced, so it is not a torn write), and files
 * that contradict their names or each other make the partition unusable
 * until someone looks, rather than have recovery guess which to believe. */
static int recover_segments(struct sluice_plog *l, const int64_t *bases, uint32_t nbase, bool clean,
			    struct sluice_plog_recovery *rec, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < nbase; i++) {
		assert(i == 0 || bases[i] >= bases[i - 1]);
		if (create_segment(l, bases[i]) < 0) {
			snprintf(err, errlen, "out of memory");
			errno = ENOMEM;
			return SLUICE_PLOG_OPEN_UNUSABLE;
		}
		struct segment *s = active(l);
		bool last = i + 1 == nbase;
		int64_t hi = last ? INT64_MAX : bases[i + 1];
		struct stat st;
		int fd = seg_open_regular(l, s, &st, err, errlen);
		if (fd < 0)
			return SLUICE_PLOG_OPEN_UNUSABLE;
		bool need_crc = !clean && (bases[i] >= l->recovery_point || last || bases[i + 1] > l->recovery_point);
		/* a trusted closed segment: offset index from disk; lookups by
		 * time scan its batch headers (see sluice_plog_offset_for_time) */
		if (!need_crc && !last && seg_load_index(l, s, st.st_size) && seg_load_max_ts(l, s) &&
		    seg_tail_scan(l, s, fd, st.st_size, hi) == st.st_size) {
			s->tidx_partial = true;
			continue;
		}
		struct scan_result res;
		int64_t valid = seg_scan_range(l, s, fd, need_crc, bases[i], hi, rec, &res);
		if (valid < 0) {
			int e = errno;
			snprintf(err, errlen, "cannot read segment %020" PRId64 ".log: %s", bases[i],
				 e == ENOMEM ? "out of memory" : strerror(e));
			errno = e;
			return SLUICE_PLOG_OPEN_UNUSABLE;
		}
		assert(valid == s->size && valid <= st.st_size);
		if (valid == st.st_size && (!last || s->next_offset >= l->recovery_point))
			continue;
		if (res.stop == SCAN_MISPLACED || res.stop == SCAN_OVERLAP)
			return report_misfit(l, bases, nbase, i, &res, valid, err, errlen);
		if (!last) {
			seg_mark_damaged(l, s, st.st_size, hi, &res, rec);
			continue;
		}
		int rc = recover_tail(l, s, fd, st.st_size, clean, &res, rec, err, errlen);
		if (rc < 0)
			return rc;
	}
	return 0;
}

/* Create the partition directory unless it exists, making a new one's
 * entry durable. Returns 0, or SLUICE_PLOG_OPEN_IO with err filled. */
static int dir_create(const char *dir, char *err, size_t errlen)
{
	if (mkdir(dir, 0755) == 0) {
		char parent[PATH_BYTES];
		snprintf(parent, sizeof parent, "%s", dir);
		char *slash = strrchr(parent, '/');
		if (slash && slash != parent) {
			*slash = '\0';
			int pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (pfd >= 0) {
				(void)fsync(pfd);
				close(pfd);
			}
		}
	} else if (errno != EEXIST) {
		snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
		return SLUICE_PLOG_OPEN_IO;
	}
	return 0;
}

/* A log with no segment yet: its configuration (extent size rounded to
 * whole blocks), its pool (a private one without cfg->pool), no file open.
 * NULL with err filled when out of memory or the path is too long. */
static struct sluice_plog *plog_new(const char *dir, const struct sluice_plog_cfg *cfg,
				    const struct sluice_plog_hooks *hooks, char *err, size_t errlen)
{
	struct sluice_plog *l = calloc(1, sizeof *l);
	if (!l) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (strlen(dir) >= sizeof l->dir) {
		snprintf(err, errlen, "partition directory path too long: %s", dir);
		free(l);
		return NULL;
	}
	snprintf(l->dir, sizeof l->dir, "%s", dir);
	l->cfg = *cfg;
	if (l->cfg.chunk_bytes < SLUICE_PLOG_BLOCK * 4)
		l->cfg.chunk_bytes = SLUICE_PLOG_CHUNK_BYTES_DEFAULT;
	l->cfg.chunk_bytes = (size_t)align_up((int64_t)l->cfg.chunk_bytes);
	l->pool = cfg->pool;
	if (!l->pool) {
		/* No storage core to share one with (tools, tests): a small private
		 * pool; appends past it still get buffers, freed after use. */
		l->pool = sluice_pool_new(l->cfg.chunk_bytes, 4 * l->cfg.chunk_bytes, NULL);
		l->pool_owned = true;
		if (!l->pool) {
			snprintf(err, errlen, "out of memory");
			free(l);
			return NULL;
		}
	}
	l->ext_bytes = (int64_t)sluice_pool_extent_bytes(l->pool);
	assert(l->ext_bytes >= SLUICE_PLOG_BLOCK && l->ext_bytes % SLUICE_PLOG_BLOCK == 0);
	l->hooks = *hooks;
	l->fd_write = -1;
	l->fd_slot = -1;
	l->recovery_point = read_recovery_point(dir);
	return l;
}

/* The log start offset persisted by sluice_plog_delete_records, when it
 * lies within the log's segments. */
static void read_log_start(struct sluice_plog *l)
{
	char p[PATH_BYTES];
	snprintf(p, sizeof p, "%s/sluice-log-start-offset", l->dir);
	FILE *f = fopen(p, "r");
	long long v;
	if (f && fscanf(f, "%lld", &v) == 1 && v > l->log_start && v <= l->leo)
		l->log_start = v;
	if (f)
		fclose(f);
}

/* Finish interrupted swaps, drop a stopped compaction's files, and load
 * every segment in the directory (recover_segments). Returns 0, or
 * SLUICE_PLOG_OPEN_UNUSABLE with err and errno saying why. */
static int plog_recover(struct sluice_plog *l, bool clean, struct sluice_plog_recovery *rec, char *err,
			size_t errlen)
{
	int64_t *bases = NULL;
	uint32_t nbase = 0;
	swaps_recover(l->dir);
	remove_stray_cleaned(l->dir);
	if (truncate_recover(l, err, errlen) < 0)
		return SLUICE_PLOG_OPEN_UNUSABLE;
	if (list_segments(l->dir, &bases, &nbase) < 0) {
		int e = errno;
		snprintf(err, errlen, "list %s: %s", l->dir,
			 e == E2BIG ? "more than SLUICE_PLOG_SEGMENTS_MAX segment files" : strerror(e));
		errno = e;
		return SLUICE_PLOG_OPEN_UNUSABLE;
	}
	assert(nbase <= SLUICE_PLOG_SEGMENTS_MAX);
	memset(rec, 0, sizeof *rec);
	rec->crc_checked = !clean;
	int rc = recover_segments(l, bases, nbase, clean, rec, err, errlen);
	int e = errno;
	free(bases);
	errno = e;
	return rc;
}

int sluice_plog_open(const char *dir, const struct sluice_plog_cfg *cfg, bool clean,
		     const struct sluice_plog_hooks *hooks, struct sluice_plog **out,
		     struct sluice_plog_recovery *rec, char *err, size_t errlen)
{
	int rc = dir_create(dir, err, errlen);
	if (rc < 0)
		return rc;
	struct sluice_plog *l = plog_new(dir, cfg, hooks, err, errlen);
	if (!l)
		return -1;
	struct sluice_plog_recovery dummy;
	rc = plog_recover(l, clean, rec ? rec : &dummy, err, errlen);
	if (rc < 0) {
		int e = errno;
		sluice_plog_close(l);
		errno = e;
		return rc;
	}
	if (l->seg_n == 0 && create_segment(l, 0) < 0) {
		snprintf(err, errlen, "out of memory");
		sluice_plog_close(l);
		return -1;
	}
	l->log_start = l->segs[0].base_offset;
	l->leo = l->written_end = active(l)->next_offset;
	read_log_start(l);
	assert(l->log_start >= l->segs[0].base_offset);
	if (open_active(l, err, errlen) < 0) {
		int e = errno;
		sluice_plog_close(l);
		errno = e;
		return e == EMFILE || e == ENFILE || e == ENOMEM ? SLUICE_PLOG_OPEN_UNUSABLE : SLUICE_PLOG_OPEN_IO;
	}
	check_offsets(l);
	l->opened = true;
	l->modified |= !clean;
	*out = l;
	return 0;
}

/* ---- append and the write path ----------------------------------------- */

static void advance_written(struct sluice_plog *l, int64_t end_pos, int64_t end_offset)
{
	assert(end_offset >= l->written_end && end_offset <= l->leo);
	assert(end_pos >= l->committed_pos && end_pos <= active(l)->size);
	l->committed_pos = end_pos;
	l->written_end = end_offset;
	if (l->hooks.written)
		l->hooks.written(l, l->hooks.arg);
}

/* Zero the padding of the last block of a write ending at end (an O_DIRECT
 * write is whole blocks; recovery reads zeros past the last batch). */
static void tail_pad(struct sluice_plog *l, int64_t size, int64_t end)
{
	if (end <= size)
		return;
	struct sluice_extent *e = tail_at(l, ext_floor(l, size - 1 < 0 ? 0 : size - 1));
	assert(end - size < SLUICE_PLOG_BLOCK); /* padding fills the last block only */
	if (size % l->ext_bytes == 0)
		return; /* the write ends at an extent boundary: nothing to pad */
	assert(e && end <= e->file_off + l->ext_bytes);
	memset(e->buf + (size - e->file_off), 0, (size_t)(end - size));
}

/* Synchronously write [align_down(submitted_end), size) and mark it
 * committed. Used only at segment roll and close, with no write in flight. */
static int write_sync(struct sluice_plog *l)
{
	struct segment *s = active(l);
	assert(!l->write_inflight);
	/* Bytes submitted earlier were written (only an fdatasync may have been
	 * missing, and the caller syncs next). */
	if (s->size <= l->submitted_end)
		return 0;
	assert(l->tail_n > 0); /* the bytes not yet written are in the tail */
	int64_t start = align_down(l->submitted_end);
	int64_t end = l->cfg.direct_io ? align_up(s->size) : s->size;
	tail_pad(l, s->size, end);
	for (int64_t pos = start; pos < end;) {
		struct sluice_extent *e = tail_at(l, ext_floor(l, pos));
		assert(e && e->lo <= pos); /* the tail holds everything not yet written */
		int64_t stop = e->file_off + l->ext_bytes < end ? e->file_off + l->ext_bytes : end;
		ssize_t w = pwrite(l->fd_write, e->buf + (pos - e->file_off), (size_t)(stop - pos), pos);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			SLOG_ERR("storage", "%s: write failed: %s", l->dir, strerror(w < 0 ? errno : EIO));
			l->failed = true;
			return -EIO;
		}
		pos += w;
	}
	l->submitted_end = s->size;
	return 0;
}

/* Close the active segment (truncate to its true length, write indexes,
 * fsync) and start a new one at the current log end offset. */
static int roll(struct sluice_plog *l)
{
	if (l->hooks.rolling)
		l->hooks.rolling(l, l->hooks.arg);
	if (l->write_inflight && l->hooks.wait_write)
		l->hooks.wait_write(l, l->hooks.arg);
	assert(!l->write_inflight);
	int rc = write_sync(l);
	if (rc < 0) {
		if (l->hooks.written)
			l->hooks.written(l, l->hooks.arg);
		return rc;
	}
	struct segment *s = active(l);
	if (ftruncate(l->fd_write, s->size) < 0 || fdatasync(l->fd_write) < 0) {
		SLOG_ERR("storage", "%s: closing segment failed: %s", l->dir, strerror(errno));
		l->failed = true;
		if (l->hooks.written)
			l->hooks.written(l, l->hooks.arg); /* answers the waiting appends */
		return -EIO;
	}
	/* Acknowledged only now that the closing segment is on stable storage. */
	if (l->committed_pos < s->size || l->written_end < l->leo)
		advance_written(l, s->size, l->leo);
	assert(l->written_end == l->leo && l->committed_pos == s->size);
	seg_write_indexes(l, s);
	fd_write_close(l);
	l->unflushed_messages = 0;
	write_recovery_point(l, l->leo);
	/* The closed segment's tail stays readable from the cache. */
	tail_release(l, s->base_offset, true);
	if (create_segment(l, l->leo) < 0)
		return -ENOMEM;
	/* The positions are the new, empty segment's from here on, even when
	 * its file cannot be opened: a read of the failed log must not take the
	 * closed segment's committed position as the new one's limit. */
	l->committed_pos = l->submitted_end = 0;
	char err[256];
	if (open_active(l, err, sizeof err) < 0) {
		SLOG_ERR("storage", "%s: roll failed: %s", l->dir, err);
		l->failed = true;
		if (l->hooks.written)
			l->hooks.written(l, l->hooks.arg);
		return -EIO;
	}
	assert(active(l)->base_offset == l->leo && active(l)->size == 0);
	check_offsets(l);
	return 0;
}

/* The tail extent for file position pos, the next byte appended; a new one
 * from the pool when pos enters the next extent. The first extent after
 * open (or after the tail went to the cache) starts with the bytes before
 * pos: from the cache when it holds them, the partial block from disk
 * otherwise. NULL: out of memory or the read failed. */
static struct sluice_extent *tail_extent_for(struct sluice_plog *l, struct segment *s, int64_t pos)
{
	int64_t k = ext_floor(l, pos);
	if (l->tail_n) {
		struct sluice_extent *last = l->tail[l->tail_n - 1];
		if (last->file_off == k)
			return last;
		assert(last->file_off + l->ext_bytes == k);
	}
	if (l->tail_n == l->tail_cap) {
		uint32_t cap = l->tail_cap ? 2 * l->tail_cap : 4;
		struct sluice_extent **n = realloc(l->tail, cap * sizeof *n);
		if (!n)
			return NULL;
		l->tail = n;
		l->tail_cap = cap;
	}
	struct sluice_extent *e = sluice_pool_get(l->pool);
	if (!e)
		return NULL;
	e->file_off = k;
	e->lo = e->hi = pos;
	e->verified = true; /* appends are validated batches */
	if (!l->tail_n && pos > k) {
		e->verified = false; /* its first bytes come from disk */
		int64_t from = align_down(pos);
		struct sluice_extent *c = sluice_cache_lookup(l->pool, l, s->base_offset, k);
		if (c && c->lo <= from && c->hi >= pos) {
			memcpy(e->buf + (c->lo - k), c->buf + (c->lo - k), (size_t)(pos - c->lo));
			e->lo = c->lo;
		} else if (from < pos) {
			int fd = seg_fd_read(l, s);
			if (fd < 0 || pread(fd, e->buf + (from - k), (size_t)(pos - from), from) != pos - from) {
				sluice_extent_put(e);
				return NULL;
			}
			e->lo = from;
		}
	}
	assert(e->file_off <= e->lo && e->lo <= pos && e->hi == pos && l->tail_n < l->tail_cap);
	l->tail[l->tail_n++] = e;
	return e;
}

/* Copy len bytes to file position pos of the tail: appended bytes (append:
 * pos is the end) or a patch of bytes already copied in. */
static int tail_copy(struct sluice_plog *l, struct segment *s, int64_t pos, const uint8_t *src, size_t len,
		     bool append)
{
	while (len) {
		struct sluice_extent *e = append ? tail_extent_for(l, s, pos) : tail_at(l, ext_floor(l, pos));
		if (!e)
			return -1;
		assert(pos >= e->lo && pos <= e->hi);
		assert(pos < e->file_off + l->ext_bytes); /* the extent holds pos */
		size_t n = (size_t)(e->file_off + l->ext_bytes - pos);
		if (n > len)
			n = len;
		memcpy(e->buf + (pos - e->file_off), src, n);
		if (pos + (int64_t)n > e->hi)
			e->hi = pos + (int64_t)n;
		pos += (int64_t)n;
		src += n;
		len -= n;
	}
	return 0;
}

/* The header bytes an append rewrites (from BaseOffset through MaxTimestamp),
 * for the batch at data: offsets and epoch always, and with a LogAppendTime
 * the timestamp type, MaxTimestamp and so the CRC, which covers everything
 * from Attributes on. */
static void batch_header_patch(const uint8_t *data, const struct sluice_batch *b, int64_t base_offset,
			       int32_t leader_epoch, int64_t log_append_time, uint8_t *hdr)
{
	assert(base_offset >= 0 && sluice_batch_total_bytes(b) >= SLUICE_BATCH_HEADER_BYTES);
	memcpy(hdr, data, SLUICE_BATCH_OFF_MAX_TS + 8);
	sluice_batch_set_base_offset(hdr, base_offset, leader_epoch);
	assert((int64_t)kbe64(hdr) == base_offset);
	if (log_append_time < 0)
		return;
	uint16_t attr = (uint16_t)(b->attributes | SLUICE_BATCH_ATTR_TS_LOG_APPEND);
	hdr[SLUICE_BATCH_OFF_ATTRIBUTES] = (uint8_t)(attr >> 8);
	hdr[SLUICE_BATCH_OFF_ATTRIBUTES + 1] = (uint8_t)attr;
	kput64(hdr + SLUICE_BATCH_OFF_MAX_TS, (uint64_t)log_append_time);
	size_t total = (size_t)sluice_batch_total_bytes(b);
	uint32_t crc = sluice_crc32c(0, hdr + SLUICE_BATCH_OFF_ATTRIBUTES,
				     SLUICE_BATCH_OFF_MAX_TS + 8 - SLUICE_BATCH_OFF_ATTRIBUTES);
	crc = sluice_crc32c(crc, data + SLUICE_BATCH_OFF_MAX_TS + 8, total - (SLUICE_BATCH_OFF_MAX_TS + 8));
	kput32(hdr + SLUICE_BATCH_OFF_CRC, crc);
}

/* Whether the next batch (bytes long, last_delta its LastOffsetDelta,
 * max_ts its MaxTimestamp) starts a new segment, as in Kafka: it would
 * take the segment past segment.bytes; its last offset would no longer
 * fit the index's 32-bit offset relative to the segment's base (the new
 * segment is named by the batch's base offset, so one batch always fits);
 * or its timestamp is segment.ms past the segment's first batch.
 * Timestamps are whatever producers sent (INT64_MIN included): compared
 * so nothing overflows. */
static bool roll_due(const struct sluice_plog *l, const struct segment *s, size_t bytes, int32_t last_delta,
		     int64_t max_ts)
{
	assert(s == &l->segs[l->seg_n - 1] && last_delta >= 0);
	if (s->size == 0)
		return false;
	if (s->size + (int64_t)bytes > l->cfg.segment_bytes)
		return true;
	if (l->leo + last_delta - s->base_offset > INT32_MAX)
		return true;
	return l->cfg.segment_ms > 0 && s->first_ts >= 0 && max_ts > s->first_ts &&
	       max_ts - s->first_ts > l->cfg.segment_ms;
}

/* Offsets a follower's batches must have (sluice_plog_append_verbatim):
 * increasing from the log end on, within SLUICE_PLOG_OFFSET_MAX. Checked
 * before anything is appended. Returns 0, -EINVAL or -ERANGE. */
static int verbatim_check(const struct sluice_plog *l, const uint8_t *data, size_t len)
{
	int64_t next = l->leo;
	size_t off = 0;
	while (off < len) {
		struct sluice_batch b;
		enum sluice_batch_result r = sluice_batch_parse(data + off, len - off, &b);
		assert(r == SLUICE_BATCH_OK && b.last_offset_delta >= 0); /* the caller checked every batch */
		(void)r;
		if (b.base_offset < next) {
			SLOG_WARN("storage", "%s: a replicated batch at offset %" PRId64 " does not follow offset %" PRId64
				  "; nothing appended", l->dir, b.base_offset, next - 1);
			return -EINVAL;
		}
		if (b.base_offset > SLUICE_PLOG_OFFSET_MAX - b.last_offset_delta)
			return -ERANGE;
		next = b.base_offset + b.last_offset_delta + 1;
		off += (size_t)sluice_batch_total_bytes(&b);
	}
	assert(off == len && next > l->leo);
	return 0;
}

/* sluice_plog_append and sluice_plog_append_verbatim: the leader's append
 * assigns offsets (and the epoch, and LogAppendTime) in the log's copy; a
 * follower's keeps every byte. */
static int plog_append(struct sluice_plog *l, const uint8_t *data, size_t len, bool verbatim, int32_t leader_epoch,
		       int64_t log_append_time, int64_t *base_offset, int64_t *last_offset)
{
	if (l->failed)
		return -EIO;
	if (verbatim) {
		int rc = verbatim_check(l, data, len);
		if (rc < 0)
			return rc;
	}
	if (fd_write_open(l) < 0) {
		int e = errno;
		if (e == EMFILE || e == ENFILE)
			return -e; /* the process's limit, not the disk: the caller frees some and retries */
		SLOG_ERR("storage", "%s: cannot open the active segment: %s", l->dir, strerror(e));
		l->failed = true;
		return -EIO;
	}
	struct segment *s = active(l);
	*base_offset = l->leo;
	size_t off = 0;
	while (off < len) {
		/* Parse the caller's copy; patch offsets into the log's. */
		struct sluice_batch b;
		enum sluice_batch_result r = sluice_batch_parse(data + off, len - off, &b);
		assert(r == SLUICE_BATCH_OK && b.last_offset_delta >= 0); /* the caller validated every batch */
		(void)r;
		size_t blen = (size_t)sluice_batch_total_bytes(&b);
		if (verbatim && b.base_offset > l->leo) {
			/* A gap in the leader's offsets (compaction): the log end
			 * moves over it, so a roll names the new segment by this batch. */
			l->leo = s->next_offset = b.base_offset;
		}
		if (l->leo > SLUICE_PLOG_OFFSET_MAX - b.last_offset_delta) {
			SLOG_ERR("storage", "%s: offsets exhausted (log end %" PRId64 ")", l->dir, l->leo);
			return -ERANGE;
		}
		int64_t max_ts = log_append_time >= 0 ? log_append_time : b.max_timestamp;
		if (roll_due(l, s, blen, b.last_offset_delta, max_ts)) {
			int rc = roll(l);
			if (rc < 0)
				return rc;
			s = active(l);
		}
		/* A new segment is named by its first batch (a follower's empty
		 * segment may be named below it, across a gap). */
		assert(s->size > 0 || s->base_offset == l->leo || (verbatim && s->base_offset < l->leo));
		if (tail_copy(l, s, s->size, data + off, blen, true) < 0) {
			SLOG_ERR("storage", "%s: no memory for the tail or its partial block unreadable", l->dir);
			l->failed = true;
			return -EIO;
		}
		if (!verbatim) {
			uint8_t hdr[SLUICE_BATCH_OFF_MAX_TS + 8];
			batch_header_patch(data + off, &b, l->leo, leader_epoch, log_append_time, hdr);
			int rc = tail_copy(l, s, s->size, hdr, sizeof hdr, false);
			assert(rc == 0); /* those bytes are in the tail already */
			(void)rc;
			b.base_offset = l->leo;
			b.max_timestamp = max_ts;
		}
		assert(b.base_offset == l->leo);
		seg_note_batch(l, s, &b, s->size);
		assert(s->next_offset - 1 - s->base_offset <= INT32_MAX);
		l->leo += (int64_t)b.last_offset_delta + 1;
		l->unflushed_messages += b.records_count;
		s->size += (int64_t)blen;
		off += blen;
	}
	assert(off == len);
	check_offsets(l);
	l->modified = true;
	*last_offset = l->leo - 1;
	l->last_append_ms = mono_ms();
	if (!l->unflushed_since_ms)
		l->unflushed_since_ms = l->last_append_ms;
	return 0;
}

int sluice_plog_append(struct sluice_plog *l, const uint8_t *data, size_t len, int32_t leader_epoch,
		       int64_t log_append_time, int64_t *base_offset, int64_t *last_offset)
{
	return plog_append(l, data, len, false, leader_epoch, log_append_time, base_offset, last_offset);
}

int sluice_plog_append_verbatim(struct sluice_plog *l, const uint8_t *data, size_t len, int64_t *last_offset)
{
	int64_t base;
	return plog_append(l, data, len, true, -1, -1, &base, last_offset);
}

bool sluice_plog_write_pending(const struct sluice_plog *l)
{
	return !l->failed && !l->write_inflight && !l->fsync_inflight &&
	       l->segs[l->seg_n - 1].size > l->submitted_end;
}

bool sluice_plog_write_inflight(const struct sluice_plog *l)
{
	return l->write_inflight || l->fsync_inflight || l->ra_inflight || l->loads_inflight;
}

/* One SQE per extent the group commit touches, so a large commit goes to
 * the device as several writes at once (a fixed-buffer write when the
 * extent is registered); past SLUICE_PLOG_WRITE_SQES_MAX extents, one
 * vectored write. With an fdatasync they are linked in order before it. */
static uint32_t write_parts(const struct sluice_plog *l, int64_t start, int64_t end)
{
	assert(start < end);
	return (uint32_t)((ext_floor(l, end - 1) - ext_floor(l, start)) / l->ext_bytes + 1);
}

static int prep_writes(struct sluice_plog *l, struct io_uring *ring, int64_t start, int64_t end, bool link)
{
	uint32_t parts = write_parts(l, start, end);
	if (parts > SLUICE_PLOG_WRITE_SQES_MAX) {
		if (parts > l->iov_cap) {
			struct iovec *n = realloc(l->iov, parts * sizeof *n);
			if (!n)
				return -ENOMEM;
			l->iov = n;
			l->iov_cap = parts;
		}
	}
	uint32_t i = 0;
	for (int64_t pos = start; pos < end; i++) {
		struct sluice_extent *e = tail_at(l, ext_floor(l, pos));
		assert(e && e->lo <= pos && i < parts);
		int64_t stop = e->file_off + l->ext_bytes < end ? e->file_off + l->ext_bytes : end;
		uint8_t *src = e->buf + (pos - e->file_off);
		if (parts > SLUICE_PLOG_WRITE_SQES_MAX) {
			l->iov[i] = (struct iovec){src, (size_t)(stop - pos)};
		} else {
			struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
			assert(sqe); /* space was checked */
			if (e->buf_index >= 0)
				io_uring_prep_write_fixed(sqe, l->fd_write, src, (unsigned)(stop - pos), (uint64_t)pos,
							  e->buf_index);
			else
				io_uring_prep_write(sqe, l->fd_write, src, (unsigned)(stop - pos), (uint64_t)pos);
			sqe_set_file(l, sqe);
			io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)l | 1);
			if (link)
				sqe->flags |= IOSQE_IO_LINK;
		}
		pos = stop;
	}
	if (parts > SLUICE_PLOG_WRITE_SQES_MAX) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
		assert(sqe);
		io_uring_prep_writev(sqe, l->fd_write, l->iov, parts, (uint64_t)start);
		sqe_set_file(l, sqe);
		io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)l | 1);
		if (link)
			sqe->flags |= IOSQE_IO_LINK;
		parts = 1;
	}
	return (int)parts;
}

/* Keep the active segment's file size ahead of the writes. io_uring issues
 * an O_DIRECT write inside the file's size over preallocated blocks at once
 * and runs several in parallel, while one that extends the file goes to a
 * worker thread, serialized with the file's other writes: ahead by twice
 * the write, the writes run about 30 % faster on ext4. How far ahead follows
 * the partition's write rate: nothing for a write that comes more than
 * PREALLOC_BUSY_MS after the previous one that extended the file (a
 * partition written once or now and then: giving back a preallocated block
 * costs a journal commit, about 4 ms), then twice the write (at least a
 * block), doubled each time the space runs out within PREALLOC_BUSY_MS, up
 * to 64 MiB (at most to segment.bytes). So 3,000 partitions written once
 * hold only their written blocks, not 2 MiB each, and a busy one still gets
 * large steps. The zeros past the data are cut off when the segment closes,
 * when the partition goes idle (sluice_plog_trim_prealloc), and by recovery
 * after a crash. */
static void prealloc_ahead(struct sluice_plog *l, int64_t start, int64_t end)
{
	if (!l->cfg.direct_io || l->prealloc_refused || end <= l->prealloc_end)
		return;
	int64_t now = mono_ms(), step = 0;
	bool busy = l->prealloc_ms && now - l->prealloc_ms < PREALLOC_BUSY_MS;
	l->prealloc_ms = now;
	if (busy) {
		step = 2 * l->prealloc_step;
		if (step < 2 * (end - start))
			step = 2 * (end - start);
		step = step < PREALLOC_STEP_MIN ? PREALLOC_STEP_MIN : step > PREALLOC_STEP_MAX ? PREALLOC_STEP_MAX : step;
	}
	l->prealloc_step = step;
	if (step == 0)
		return;
	int64_t align = step < PREALLOC_ALIGN_MAX ? SLUICE_PLOG_BLOCK : PREALLOC_ALIGN_MAX;
	int64_t target = (end + step + align - 1) / align * align;
	if (target > l->cfg.segment_bytes)
		target = l->cfg.segment_bytes;
	if (target <= end)
		return;
	assert(step >= PREALLOC_STEP_MIN && step <= PREALLOC_STEP_MAX && end > l->prealloc_end);
	if (fallocate(l->fd_write, 0, l->prealloc_end, target - l->prealloc_end) < 0) {
		SLOG_DEBUG("storage", "%s: fallocate refused (%s); writes extend the file", l->dir, strerror(errno));
		l->prealloc_refused = true;
		return;
	}
	l->prealloc_end = target;
}

int64_t sluice_plog_trim_prealloc(struct sluice_plog *l, int64_t now_ms, int64_t idle_ms)
{
	struct segment *s = active(l);
	if (l->failed || l->cfg.preallocate || l->write_inflight || l->fsync_inflight ||
	    l->prealloc_end <= align_up(s->size) || s->size > l->submitted_end || now_ms - l->last_append_ms < idle_ms)
		return 0;
	/* The file keeps its written blocks (the partial last one included, so
	 * the next write rewrites it in place); only the blocks ahead go. The
	 * descriptor may have been given back: then by path. */
	int64_t keep = l->cfg.direct_io ? align_up(s->size) : s->size, gone = l->prealloc_end - keep;
	assert(gone > 0 && keep >= s->size);
	char p[PATH_BYTES];
	seg_path(l, s->base_offset, ".log", p);
	if ((l->fd_write >= 0 ? ftruncate(l->fd_write, keep) : truncate(p, keep)) < 0) {
		SLOG_DEBUG("storage", "%s: giving back preallocated space failed: %s", p, strerror(errno));
		return 0;
	}
	l->prealloc_end = keep;
	l->prealloc_step = 0; /* the next write starts small again */
	l->prealloc_ms = 0;
	l->modified = true;   /* close cuts the file to its true length */
	return gone;
}

int sluice_plog_submit_write(struct sluice_plog *l, struct io_uring *ring)
{
	assert(sluice_plog_write_pending(l));
	struct segment *s = active(l);
	int64_t start = align_down(l->submitted_end);
	int64_t end = l->cfg.direct_io ? align_up(s->size) : s->size;
	uint32_t parts = write_parts(l, start, end);
	bool want_fsync = l->unflushed_messages >= l->cfg.flush_interval_messages;
	unsigned need = (parts > SLUICE_PLOG_WRITE_SQES_MAX ? 1 : parts) + (want_fsync ? 1 : 0);
	if (io_uring_sq_space_left(ring) < need)
		return -EBUSY;
	tail_pad(l, s->size, end);
	prealloc_ahead(l, start, end);
	int n = prep_writes(l, ring, start, end, want_fsync);
	if (n < 0)
		return n;
	assert(n >= 1 && (unsigned)n + (want_fsync ? 1 : 0) == need);
	l->write_inflight = true;
	l->inflight_parts = n;
	l->inflight_err = 0;
	l->inflight_done = 0;
	l->inflight_end_pos = s->size;
	l->inflight_end_offset = l->leo;
	l->inflight_len = end - start;
	l->submitted_end = s->size;
	l->fsync_linked = false;
	if (want_fsync) {
		struct io_uring_sqe *f = io_uring_get_sqe(ring);
		assert(f);
		io_uring_prep_fsync(f, l->fd_write, IORING_FSYNC_DATASYNC);
		sqe_set_file(l, f);
		io_uring_sqe_set_data64(f, (uint64_t)(uintptr_t)l | 2);
		l->fsync_inflight = true;
		l->fsync_linked = true;
		l->unflushed_messages = 0;
	}
	check_offsets(l);
	return 0;
}

/* After a group commit's writes: extents wholly below where the next write
 * starts are no longer needed for writing and go to the read cache. */
static void tail_trim(struct sluice_plog *l)
{
	int64_t next_start = align_down(l->submitted_end);
	int64_t seg_base = active(l)->base_offset;
	uint32_t n = 0;
	while (n < l->tail_n && l->tail[n]->file_off + l->ext_bytes <= next_start)
		extent_retire(l, l->tail[n++], seg_base, true);
	if (n) {
		memmove(l->tail, l->tail + n, (l->tail_n - n) * sizeof *l->tail);
		l->tail_n -= n;
	}
	/* The tail starts with the extent the next write starts in. */
	assert(l->tail_n == 0 || l->tail[0]->file_off <= next_start);
}

void sluice_plog_complete(struct sluice_plog *l, int kind, int res)
{
	assert(kind >= 1 && kind < 4 + SLUICE_PLOG_LOADS_MAX);
	if (kind == 3) {
		readahead_complete(l, res);
		return;
	}
	if (kind >= 4) {
		load_complete(l, kind - 4, res);
		return;
	}
	if (kind == 1) {
		assert(l->write_inflight && l->inflight_parts > 0);
		if (res < 0 && !l->inflight_err)
			l->inflight_err = res;
		else if (res > 0)
			l->inflight_done += res;
		if (--l->inflight_parts > 0)
			return;
		l->write_inflight = false;
		res = l->inflight_err;
		if (res == 0 && l->inflight_done != l->inflight_len) {
			/* O_DIRECT writes of whole blocks do not come back short unless
			 * the device is full or failing: treat it as a failure. */
			SLOG_ERR("storage", "%s: short write (%lld of %lld bytes)", l->dir, (long long)l->inflight_done,
				 (long long)l->inflight_len);
			res = -EIO;
		}
		if (res < 0) {
			SLOG_ERR("storage", "%s: write failed: %s", l->dir, strerror(-res));
			l->failed = true;
			if (l->hooks.written)
				l->hooks.written(l, l->hooks.arg);
			return;
		}
		tail_trim(l);
		if (!l->fsync_linked)
			advance_written(l, l->inflight_end_pos, l->inflight_end_offset);
		check_offsets(l);
		return;
	}
	assert(kind == 2 && l->fsync_inflight);
	l->fsync_inflight = false;
	if (res < 0 || l->failed) {
		if (res < 0)
			SLOG_ERR("storage", "%s: fdatasync failed: %s", l->dir, strerror(-res));
		l->failed = true;
		if (l->hooks.written)
			l->hooks.written(l, l->hooks.arg);
		return;
	}
	if (l->fsync_linked)
		advance_written(l, l->inflight_end_pos, l->inflight_end_offset);
}

int sluice_plog_sync(struct sluice_plog *l)
{
	if (l->unflushed_messages && fd_write_open(l) < 0)
		return -errno;
	if (l->fd_write >= 0 && fdatasync(l->fd_write) < 0)
		return -errno;
	/* Records appended but not yet written are not covered: their count
	 * stays, so their own write still carries the fsync it is due. */
	if (l->segs[l->seg_n - 1].size == l->submitted_end) {
		l->unflushed_messages = 0;
		l->unflushed_since_ms = 0;
	}
	return 0;
}

int sluice_plog_sync_if_due(struct sluice_plog *l, int64_t now_ms, int64_t interval_ms)
{
	if (!l->unflushed_since_ms || now_ms - l->unflushed_since_ms < interval_ms || l->failed)
		return 0;
	/* Only what has been written can be synced; wait for the write. */
	if (l->write_inflight && l->hooks.wait_write)
		l->hooks.wait_write(l, l->hooks.arg);
	int rc = sluice_plog_sync(l);
	if (rc < 0) {
		/* After a failed fsync the page state is unknown: stop trusting the log. */
		SLOG_ERR("storage", "%s: fdatasync failed: %s", l->dir, strerror(-rc));
		l->failed = true;
		if (l->hooks.written)
			l->hooks.written(l, l->hooks.arg);
	}
	return rc;
}

static void segment_delete_files(struct sluice_plog *l, int64_t base)
{
	static const char *const exts[] = {".log", ".index", ".timeindex"};
	char p[PATH_BYTES], q[PATH_BYTES + 16];
	for (size_t i = 0; i < 3; i++) {
		seg_path(l, base, exts[i], p);
		snprintf(q, sizeof q, "%s.deleted", p);
		if (rename(p, q) == 0)
			unlink(q);
	}
}

int sluice_plog_enforce_retention(struct sluice_plog *l, int64_t now_ms, int64_t retention_ms, int64_t retention_bytes)
{
	if (l->failed)
		return 0;
	struct segment *act = active(l);
	if (retention_ms >= 0 && act->size > 0 && act->max_ts >= 0 && now_ms - act->max_ts > retention_ms &&
	    l->written_end == l->leo && (fd_write_open(l) < 0 || roll(l) < 0))
		return 0;
	int64_t total = sluice_plog_size_bytes(l);
	int deleted = 0;
	while (l->seg_n > 1) {
		struct segment *s = &l->segs[0];
		bool by_time = retention_ms >= 0 && s->max_ts >= 0 && now_ms - s->max_ts > retention_ms;
		bool by_size = retention_bytes >= 0 && total - s->size >= retention_bytes;
		if (!by_time && !by_size)
			break;
		int64_t base = s->base_offset;
		total -= s->size;
		seg_free(s);
		cache_forget(l, base);
		segment_delete_files(l, base);
		memmove(l->segs, l->segs + 1, (l->seg_n - 1) * sizeof *l->segs);
		l->seg_n--;
		deleted++;
	}
	if (deleted && l->segs[0].base_offset > l->log_start) {
		l->log_start = l->segs[0].base_offset;
		write_log_start(l);
	}
	assert(l->log_start >= l->segs[0].base_offset);
	check_offsets(l);
	return deleted;
}

int64_t sluice_plog_written_end(const struct sluice_plog *l) { return l->written_end; }
int64_t sluice_plog_log_start(const struct sluice_plog *l) { return l->log_start; }
int64_t sluice_plog_log_end(const struct sluice_plog *l) { return l->leo; }
bool sluice_plog_failed(const struct sluice_plog *l) { return l->failed; }
int64_t sluice_plog_size_bytes(const struct sluice_plog *l)
{
	int64_t n = 0;
	for (uint32_t i = 0; i < l->seg_n; i++)
		n += l->segs[i].size;
	return n;
}

/* ---- reads -------------------------------------------------------------- */

/* The end of what can be read from segment s: committed bytes only. */
static int64_t seg_limit(const struct sluice_plog *l, const struct segment *s)
{
	return s == &l->segs[l->seg_n - 1] ? l->committed_pos : s->size;
}

static int pread_full(int fd, uint8_t *dst, size_t len, int64_t pos)
{
	size_t done = 0;
	while (fd >= 0 && done < len) {
		ssize_t r = pread(fd, dst + done, len - done, pos + (int64_t)done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		done += (size_t)r;
	}
	return fd >= 0 ? 0 : -1;
}

/* A cold read: the extent of segment s starting at k, read with O_DIRECT
 * (bypassing the page cache: the pool is the cache) into a pool buffer and
 * cached, valid up to the committed end. The result stays valid until the
 * pool is next used. NULL on an I/O error or no memory. */
static struct sluice_extent *extent_load(struct sluice_plog *l, struct segment *s, int64_t k)
{
	int64_t limit = seg_limit(l, s);
	int64_t want_end = k + l->ext_bytes < limit ? k + l->ext_bytes : limit;
	assert(k >= 0 && k % l->ext_bytes == 0);
	if (want_end <= k)
		return NULL;
	int fd = seg_fd_direct(l, s);
	bool direct = fd >= 0;
	if (!direct && (fd = seg_fd_read(l, s)) < 0)
		return NULL;
	struct sluice_extent *e = sluice_pool_get(l->pool);
	if (!e)
		return NULL;
	size_t want = (size_t)(direct ? align_up(want_end - k) : want_end - k), done = 0;
	while (done < want) {
		/* An O_DIRECT read stops short at the end of the file. */
		ssize_t r = pread(fd, e->buf + done, want - done, k + (int64_t)done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		done += (size_t)r;
	}
	if ((int64_t)done < want_end - k) {
		SLOG_ERR("storage", "%s: read of segment %020" PRId64 " at %lld failed: %s", l->dir, s->base_offset,
			 (long long)k, done ? "short read" : strerror(errno));
		sluice_extent_put(e);
		return NULL;
	}
	e->owner = l;
	e->seg_base = s->base_offset;
	e->file_off = e->lo = k;
	e->hi = want_end;
	assert(e->hi - e->file_off <= l->ext_bytes);
	sluice_cache_insert(l->pool, e);
	sluice_extent_put(e); /* the cache's reference remains */
	return e;
}

/* Copy len bytes at position pos of segment s, extent by extent: from the
 * tail, then the cache; on a miss, fill loads the extent into the cache
 * (fetches: consumers read on from there; with l->load_ring set the load is
 * submitted there and SLUICE_PLOG_READ_WOULD_BLOCK returned), otherwise the
 * bytes are read straight from the file (scans that would only flush the
 * cache). */
static int seg_read_bytes_ex(struct sluice_plog *l, struct segment *s, int64_t pos, size_t len, uint8_t *dst,
			     bool fill, bool *verified)
{
	if (verified)
		*verified = false;
	if (!l->pool) /* a cleaner's view of closed segments: files only */
		return pread_full(seg_fd_read(l, s), dst, len, pos);
	bool act = s == active(l), all_verified = true;
	while (len) {
		int64_t k = ext_floor(l, pos);
		size_t n = (size_t)(k + l->ext_bytes - pos);
		if (n > len)
			n = len;
		int64_t end = pos + (int64_t)n;
		assert(pos >= 0 && n > 0 && end <= k + l->ext_bytes); /* one extent at a time */
		const struct sluice_extent *e = act ? tail_at(l, k) : NULL;
		if (!e || e->lo > pos || e->hi < end) {
			e = sluice_cache_lookup(l->pool, l, s->base_offset, k);
			if (e && (e->lo > pos || e->hi < end))
				e = NULL;
			if (fill) {
				sluice_pool_count(l->pool, e != NULL);
				int rc = !e && l->load_ring ? load_submit(l, s, k, l->load_ring) : 0;
				if (rc < 0)
					return rc;
				if (!e && (e = extent_load(l, s, k)) && e->hi < end)
					e = NULL;
			}
		} else if (fill) {
			sluice_pool_count(l->pool, true);
		}
		all_verified &= e && e->verified;
		if (e)
			memcpy(dst, e->buf + (pos - e->file_off), n);
		else if (pread_full(seg_fd_read(l, s), dst, n, pos) < 0)
			return -1;
		pos = end;
		dst += n;
		len -= n;
	}
	if (fill)
		read_ahead(l, s, ext_floor(l, pos - 1));
	if (verified)
		*verified = all_verified;
	return 0;
}

static int seg_read_bytes(struct sluice_plog *l, struct segment *s, int64_t pos, size_t len, uint8_t *dst)
{
	return seg_read_bytes_ex(l, s, pos, len, dst, false, NULL);
}

/* After a fetch read from extent k of segment s: read the next extent
 * ahead, asynchronously, on the pool's ring (O_DIRECT into a pool buffer),
 * so a consumer reading on finds it cached instead of stalling the core on
 * a synchronous read. One at a time per log; skipped when it is cached, in
 * the tail, past the committed end, or there is no ring or SQE to spare. */
static void read_ahead(struct sluice_plog *l, struct segment *s, int64_t k)
{
	struct io_uring *ring = sluice_pool_ring(l->pool);
	int64_t next = k + l->ext_bytes, limit = seg_limit(l, s);
	if (!ring || l->ra_inflight || next >= limit || !l->cfg.direct_io)
		return;
	if (s == active(l) && tail_at(l, next))
		return;
	const struct sluice_extent *c = sluice_cache_lookup(l->pool, l, s->base_offset, next);
	if (c)
		return;
	int fd = seg_fd_direct(l, s);
	if (fd < 0 || io_uring_sq_space_left(ring) < SLUICE_PLOG_WRITE_SQES_MAX + 2)
		return; /* leave room for the writes */
	struct sluice_extent *e = sluice_pool_get(l->pool);
	if (!e)
		return;
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	if (!sqe) {
		sluice_extent_put(e);
		return;
	}
	int64_t end = next + l->ext_bytes < limit ? next + l->ext_bytes : limit;
	unsigned want = (unsigned)align_up(end - next);
	if (e->buf_index >= 0)
		io_uring_prep_read_fixed(sqe, fd, e->buf, want, (uint64_t)next, e->buf_index);
	else
		io_uring_prep_read(sqe, fd, e->buf, want, (uint64_t)next);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)l | 3);
	e->owner = l;
	e->seg_base = s->base_offset;
	e->file_off = e->lo = next;
	e->hi = end;
	assert(end > next && end - next <= l->ext_bytes && !l->ra_ext);
	l->ra_ext = e;
	l->ra_seg_base = s->base_offset;
	l->ra_gen = l->cache_gen;
	l->ra_inflight = true;
	sluice_pool_count_readahead(l->pool);
}

/* Cache an extent read from disk, unless one already cached holds at least
 * its bytes (loaded meanwhile, maybe pinned by a reader: replacing it would
 * keep two copies in memory). */
static void cache_offer(struct sluice_plog *l, struct sluice_extent *e)
{
	const struct sluice_extent *c = sluice_cache_lookup(l->pool, l, e->seg_base, e->file_off);
	if (!c || c->lo > e->lo || c->hi < e->hi)
		sluice_cache_insert(l->pool, e);
}

/* A read ahead completed: cache it unless it came back short or what it
 * read was invalidated meanwhile (compaction, retention, DeleteRecords). */
static void readahead_complete(struct sluice_plog *l, int res)
{
	assert(l->ra_inflight && l->ra_ext);
	struct sluice_extent *e = l->ra_ext;
	l->ra_inflight = false;
	l->ra_ext = NULL;
	bool present = false;
	for (uint32_t i = 0; i < l->seg_n && !present; i++)
		present = l->segs[i].base_offset == l->ra_seg_base;
	if (res >= e->hi - e->lo && l->ra_gen == l->cache_gen && present)
		cache_offer(l, e);
	sluice_extent_put(e);
	if (l->hooks.loaded) /* a zero-copy read may wait for this extent */
		l->hooks.loaded(l, l->hooks.arg);
}

static uint32_t find_segment(const struct sluice_plog *l, int64_t offset)
{
	assert(l->seg_n >= 1);
	uint32_t lo = 0, hi = l->seg_n - 1;
	while (lo < hi) {
		uint32_t mid = (lo + hi + 1) / 2;
		if (l->segs[mid].base_offset <= offset)
			lo = mid;
		else
			hi = mid - 1;
	}
	/* The segments are in base-offset order, so the search found the last
	 * one starting at or below offset. */
	assert(lo + 1 == l->seg_n || l->segs[lo + 1].base_offset > offset);
	return lo;
}

/* Position of the batch holding offset in segment s (limit: end of readable
 * bytes), -1 when no batch there holds it, -2 on an I/O error, -3 when the
 * walk meets bytes that are not a batch header (damage recovery did not
 * see: the segment was trusted), SLUICE_PLOG_READ_WOULD_BLOCK when it needs
 * an extent being loaded on l->load_ring. */
static int64_t seg_find_position(struct sluice_plog *l, struct segment *s, int64_t offset, int64_t limit)
{
	int64_t pos = 0;
	uint32_t lo = 0, hi = s->idx_n;
	assert(limit >= 0 && s->idx_n <= s->idx_cap);
	while (lo < hi) { /* last index entry with offset <= target */
		uint32_t mid = (lo + hi) / 2;
		if (s->base_offset + s->idx[mid].rel_offset <= offset)
			lo = mid + 1;
		else
			hi = mid;
	}
	int64_t indexed = -1; /* the last offset the entry says its batch holds */
	if (lo > 0) {
		pos = s->idx[lo - 1].position;
		indexed = s->base_offset + s->idx[lo - 1].rel_offset;
	}
	uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
	while (pos + SLUICE_BATCH_HEADER_BYTES <= limit) {
		int rc = seg_read_bytes_ex(l, s, pos, sizeof hdr, hdr, true, NULL);
		if (rc < 0)
			return rc == SLUICE_PLOG_READ_WOULD_BLOCK ? rc : -2;
		struct hdr_view v = hdr_read(hdr);
		if (indexed >= 0 && v.last != indexed) {
			/* An index file that rotted after it was checked at open
			 * (which looks at its last entry only), or damage right at
			 * the entry: walking on from a wrong entry could skip
			 * batches, so the index goes and the segment is walked from
			 * its start (which then stops at the damage, as a scan of
			 * the segment would). */
			SLOG_WARN("storage", "%s: index of segment %020" PRId64 " names offset %" PRId64 " at position %lld, "
				  "where the batch ends at %" PRId64 "; index dropped, lookups scan the segment", l->dir,
				  s->base_offset, indexed, (long long)pos, v.last);
			s->idx_n = 0;
			pos = 0;
			indexed = -1;
			continue;
		}
		indexed = -1;
		if (!v.ok)
			return -3;
		if (v.last >= offset) {
			assert(pos + SLUICE_BATCH_HEADER_BYTES <= limit);
			return pos;
		}
		pos += v.len;
	}
	return -1;
}

int32_t sluice_plog_read(struct sluice_plog *l, int64_t offset, int32_t max_bytes, bool min_one, uint8_t **out)
{
	return sluice_plog_read_below(l, offset, l->written_end, max_bytes, min_one, out);
}

/* The length of the whole batches leading buf[0, want), read at segment
 * position pos (limit: the end of its readable bytes), stopping before the
 * first whose base offset is at or past end when cut. When the first batch
 * alone is longer than want, *first_len is its length; *malformed when
 * the first bytes are not a batch header at all. */
static size_t whole_batches(const uint8_t *buf, size_t want, int64_t pos, int64_t limit, bool cut, int64_t end,
			    int64_t *first_len, bool *malformed)
{
	size_t n = 0;
	*first_len = 0;
	*malformed = false;
	while (n + SLUICE_BATCH_HEADER_BYTES <= want) {
		int64_t len = (int64_t)(int32_t)kbe32(buf + n + SLUICE_BATCH_OFF_LENGTH) + 12;
		if (len < SLUICE_BATCH_HEADER_BYTES || pos + (int64_t)n + len > limit) {
			*malformed = n == 0;
			break;
		}
		if (cut && (int64_t)kbe64(buf + n) >= end)
			break;
		if (n + (size_t)len > want) {
			if (n == 0)
				*first_len = len;
			break;
		}
		n += (size_t)len;
	}
	assert(n <= want);
	return n;
}

/* Never serve a batch whose CRC fails (a disk that rotted after a clean
 * shutdown, which recovery does not rescan): the length of the good
 * batches leading buf[0, n), read from segment si at pos; the damage past
 * them is reported. The CRC leaves BaseOffset out: from disk, batches must
 * also lie in this segment's offsets, in order, or they are not served. */
static size_t crc_checked_prefix(const struct sluice_plog *l, uint32_t si, const uint8_t *buf, size_t n, int64_t pos)
{
	const struct segment *s = &l->segs[si];
	size_t good = 0;
	int64_t expect = s->base_offset, seg_hi = si + 1 < l->seg_n ? l->segs[si + 1].base_offset : l->leo;
	while (good < n) {
		struct sluice_batch b;
		if (sluice_batch_check_crc(buf + good, n - good, &b) != SLUICE_BATCH_OK || !batch_offsets_sane(&b) ||
		    b.base_offset < expect || b.base_offset + b.last_offset_delta >= seg_hi) {
			SLOG_ERR("storage", "%s: corrupt batch at segment %020" PRId64 " position %lld; not served",
				 l->dir, s->base_offset, (long long)(pos + (int64_t)good));
			break;
		}
		expect = b.base_offset + b.last_offset_delta + 1;
		good += (size_t)sluice_batch_total_bytes(&b);
	}
	assert(good <= n);
	return good;
}

/* buf holds want bytes of segment s read at pos: grow it to len and read
 * the rest. NULL (buf freed) when memory or the read fails. */
static uint8_t *read_rest(struct sluice_plog *l, struct segment *s, uint8_t *buf, int64_t pos, size_t want, size_t len,
			  bool *verified)
{
	assert(len > want);
	uint8_t *nb = realloc(buf, len);
	if (!nb || seg_read_bytes_ex(l, s, pos + (int64_t)want, len - want, nb + want, true, verified) < 0) {
		free(nb ? nb : buf);
		return NULL;
	}
	return nb;
}

int32_t sluice_plog_read_below(struct sluice_plog *l, int64_t offset, int64_t end, int32_t max_bytes, bool min_one,
			       uint8_t **out)
{
	*out = NULL;
	assert(end <= l->written_end);
	check_offsets(l);
	if (offset < l->log_start || offset > l->leo)
		return -1;
	if (offset >= end)
		return 0; /* at or past the end the caller may see: nothing to read yet */
	/* Batches at or past end are written but not to be served: cut the
	 * copy at the first one. Below the written end only, so the reads of
	 * a single node (end == written end) take the path they always took. */
	bool cut = end < l->written_end;
	uint32_t si = find_segment(l, offset);
	for (; si < l->seg_n; si++) {
		struct segment *s = &l->segs[si];
		int64_t limit = si == l->seg_n - 1 ? l->committed_pos : s->size;
		int64_t pos = seg_find_position(l, s, offset, limit);
		if (pos == -2 || pos == -3)
			return (int32_t)pos;
		if (pos < 0 && s->damaged)
			return -3; /* the offset lies in the bytes recovery found damaged */
		if (pos < 0)
			continue; /* offset lies past this segment (e.g. removed records) */
		/* One read of up to max_bytes (a single pread for cold data), then
		 * whole batches are cut from it in memory. */
		int64_t avail = limit - pos;
		size_t want = (size_t)(max_bytes < avail ? max_bytes : avail);
		if (want < SLUICE_BATCH_HEADER_BYTES)
			want = (size_t)(avail < SLUICE_BATCH_HEADER_BYTES ? avail : SLUICE_BATCH_HEADER_BYTES);
		if (want == 0)
			return 0;
		uint8_t *buf = malloc(want);
		if (!buf)
			return -2;
		bool verified = false, verified2 = true, malformed;
		if (seg_read_bytes_ex(l, s, pos, want, buf, true, &verified) < 0) {
			free(buf);
			return -2;
		}
		int64_t first_len;
		size_t n = whole_batches(buf, want, pos, limit, cut, end, &first_len, &malformed);
		if (n == 0 && first_len > 0 && min_one) {
			/* The first batch is larger than max_bytes: whole, as Kafka does. */
			assert(first_len > (int64_t)want && pos + first_len <= limit);
			buf = read_rest(l, s, buf, pos, want, (size_t)first_len, &verified2);
			if (!buf)
				return -2;
			n = (size_t)first_len;
		}
		if (n == 0) {
			free(buf);
			if (malformed)
				SLOG_ERR("storage", "%s: no batch at segment %020" PRId64 " position %lld (damaged); not served",
					 l->dir, s->base_offset, (long long)pos);
			return malformed ? -3 : 0;
		}
		/* Bytes that never left memory since their produce (which checked
		 * every CRC) need no check. */
		size_t good = verified && verified2 ? n : crc_checked_prefix(l, si, buf, n, pos);
		if (good == 0) {
			free(buf);
			return -3;
		}
		*out = buf;
		return (int32_t)good;
	}
	return 0;
}

void sluice_plog_set_limits(struct sluice_plog *l, int64_t segment_bytes, int64_t flush_messages, int64_t segment_ms)
{
	if (segment_ms > 0)
		l->cfg.segment_ms = segment_ms;
	if (segment_bytes > 0)
		l->cfg.segment_bytes = segment_bytes;
	if (flush_messages > 0)
		l->cfg.flush_interval_messages = flush_messages;
}

static void write_log_start_file(const char *dir, int64_t offset);

static void write_log_start(struct sluice_plog *l)
{
	assert(l->log_start >= 0 && l->log_start <= l->written_end);
	write_log_start_file(l->dir, l->log_start);
}

int64_t sluice_plog_delete_records(struct sluice_plog *l, int64_t offset)
{
	if (offset == -1)
		offset = l->written_end;
	if (offset < 0 || offset > l->written_end)
		return -1;
	if (offset <= l->log_start)
		return l->log_start;
	l->log_start = offset;
	write_log_start(l);
	/* Drop whole segments below the new start (never the active one). */
	uint32_t drop = 0;
	while (drop + 1 < l->seg_n && l->segs[drop + 1].base_offset <= offset)
		drop++;
	for (uint32_t i = 0; i < drop; i++) {
		int64_t base = l->segs[i].base_offset;
		seg_free(&l->segs[i]);
		cache_forget(l, base);
		remove_segment_files(l, base);
	}
	if (drop) {
		memmove(l->segs, l->segs + drop, (l->seg_n - drop) * sizeof *l->segs);
		l->seg_n -= drop;
	}
	assert(l->segs[0].base_offset <= l->log_start);
	check_offsets(l);
	return l->log_start;
}

/* ---- truncation (a follower's log meeting its leader's) ------------------ */

#define TRUNCATE_MARKER "sluice-truncate"

/* fsync a directory: the entries changed in it (renames, unlinks, new
 * files) are durable. */
static int dir_sync(const char *dir)
{
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	int rc = fsync(dfd);
	close(dfd);
	return rc;
}

/* The truncation marker, durable before a truncation removes anything:
 * "<new log end> <segment cut> <byte position>", or "<offset> -1 0" for
 * sluice_plog_truncate_fully (every segment goes, an empty one named offset
 * follows). Returns 0 or -1 (nothing was changed). */
static int marker_write(const char *dir, int64_t end, int64_t base, int64_t pos)
{
	char p[PATH_BYTES], tmp[PATH_BYTES];
	snprintf(p, sizeof p, "%.*s/" TRUNCATE_MARKER, PATH_BYTES - 64, dir);
	snprintf(tmp, sizeof tmp, "%.*s/" TRUNCATE_MARKER ".tmp", PATH_BYTES - 64, dir);
	char buf[96];
	int n = snprintf(buf, sizeof buf, "%" PRId64 " %" PRId64 " %" PRId64 "\n", end, base, pos);
	assert(n > 0 && (size_t)n < sizeof buf);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -1;
	bool ok = write(fd, buf, (size_t)n) == n && fdatasync(fd) == 0;
	ok = close(fd) == 0 && ok && rename(tmp, p) == 0 && dir_sync(dir) == 0;
	if (!ok)
		(void)unlink(tmp);
	return ok ? 0 : -1;
}

/* The truncation is complete on disk: the marker goes, durably (a marker
 * left behind would cut what is appended after it at the next open). */
static int marker_remove(const char *dir)
{
	char p[PATH_BYTES];
	snprintf(p, sizeof p, "%.*s/" TRUNCATE_MARKER, PATH_BYTES - 64, dir);
	if (dir_sync(dir) < 0 || (unlink(p) < 0 && errno != ENOENT))
		return -1;
	return dir_sync(dir);
}

static void write_log_start_file(const char *dir, int64_t offset)
{
	char p[PATH_BYTES], tmp[PATH_BYTES];
	snprintf(p, sizeof p, "%.*s/sluice-log-start-offset", PATH_BYTES - 64, dir);
	snprintf(tmp, sizeof tmp, "%.*s/sluice-log-start-offset.tmp", PATH_BYTES - 64, dir);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "%" PRId64 "\n", offset);
	fflush(f);
	fdatasync(fileno(f));
	fclose(f);
	(void)rename(tmp, p);
}

/* At open, before recovery: finish a truncation a stop interrupted (its
 * marker is there). The segments named above the one cut go, that one is
 * cut to its position and loses its indexes (recovery scans it: it is the
 * last), the recovery point and the log start offset come down to the new
 * end; then the marker goes. Returns 0, or -1 with err filled (a marker
 * that cannot be read or files that cannot be changed: the partition is
 * unusable as it is). */
static int truncate_recover(struct sluice_plog *l, char *err, size_t errlen)
{
	char p[PATH_BYTES];
	snprintf(p, sizeof p, "%s/" TRUNCATE_MARKER, l->dir);
	FILE *f = fopen(p, "r");
	if (!f)
		return 0;
	long long end = -1, base = -2, pos = -1;
	int got = fscanf(f, "%lld %lld %lld", &end, &base, &pos);
	fclose(f);
	if (got != 3 || end < 0 || base < -1 || pos < 0 || (base >= 0 && end < base)) {
		snprintf(err, errlen, "the truncation marker %s cannot be read: a truncation may be unfinished; nothing "
			 "was changed on disk", TRUNCATE_MARKER);
		errno = EUCLEAN;
		return -1;
	}
	SLOG_WARN("storage", "%s: finishing a truncation to offset %lld interrupted by a stop", l->dir, end);
	int64_t *bases = NULL;
	uint32_t n = 0;
	if (list_segments(l->dir, &bases, &n) < 0) {
		snprintf(err, errlen, "list %s: %s", l->dir, strerror(errno));
		return -1;
	}
	for (uint32_t i = n; i-- > 0;)
		if (bases[i] > base)
			segment_delete_files(l, bases[i]);
	free(bases);
	static const char *const idx_exts[] = {".index", ".timeindex"};
	if (base >= 0) {
		char q[PATH_BYTES];
		seg_path(l, base, ".log", q);
		struct stat st;
		if (stat(q, &st) == 0 && st.st_size > pos && truncate(q, pos) < 0) {
			snprintf(err, errlen, "truncate %s: %s", q, strerror(errno));
			return -1;
		}
		for (size_t i = 0; i < 2; i++) {
			seg_path(l, base, idx_exts[i], q);
			(void)unlink(q);
		}
	} else {
		seg_path(l, end, ".log", p);
		int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd < 0 || fdatasync(fd) < 0) {
			snprintf(err, errlen, "create %s: %s", p, strerror(errno));
			if (fd >= 0)
				close(fd);
			return -1;
		}
		close(fd);
	}
	/* Below the new end only what was durable before stays trusted. */
	if (l->recovery_point > end || base < 0)
		write_recovery_point(l, end);
	snprintf(p, sizeof p, "%s/sluice-log-start-offset", l->dir);
	f = fopen(p, "r");
	long long ls = -1;
	if (f && fscanf(f, "%lld", &ls) != 1)
		ls = -1;
	if (f)
		fclose(f);
	if (ls > end || base < 0)
		write_log_start_file(l->dir, end);
	if (marker_remove(l->dir) < 0) {
		snprintf(err, errlen, "remove %s: %s", TRUNCATE_MARKER, strerror(errno));
		return -1;
	}
	return 0;
}

/* Wait for every I/O of the log in flight, then write out what was
 * appended but not submitted, so the files hold everything the log does.
 * Returns 0, or a negative errno with err filled. */
static int truncate_quiesce(struct sluice_plog *l, bool write_pending, char *err, size_t errlen)
{
	if (sluice_plog_write_inflight(l) && l->hooks.wait_write)
		l->hooks.wait_write(l, l->hooks.arg);
	if (sluice_plog_write_inflight(l)) {
		snprintf(err, errlen, "I/O still in flight");
		return -EAGAIN;
	}
	if (l->failed) {
		snprintf(err, errlen, "the log has failed");
		return -EIO;
	}
	if (fd_write_open(l) < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open the active segment: %s", strerror(e));
		return e == EMFILE || e == ENFILE ? -e : -EIO;
	}
	if (write_pending && write_sync(l) < 0) {
		snprintf(err, errlen, "writing the appended data failed");
		return -EIO;
	}
	assert(!l->write_inflight && !l->fsync_inflight && !l->ra_inflight && !l->loads_inflight);
	return 0;
}

/* The new state of a segment cut at byte position cut: its offsets,
 * largest timestamp and index counts, derived from its batch headers from
 * the last index entry before the cut (or, when its time index in memory
 * is not whole or no entry lies before the cut, rebuilt from its start
 * into fresh). Nothing of s changes here. */
struct seg_cut {
	int64_t pos, end;
	int64_t max_ts, max_ts_offset, first_ts, since;
	uint32_t idx_n;
	bool rebuilt;          /* fresh holds the whole new state */
	struct segment fresh;  /* when rebuilt: arrays owned until applied */
};

static int seg_cut_walk(struct sluice_plog *l, struct segment *s, int64_t from, int64_t cut, struct seg_cut *c)
{
	uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
	for (int64_t pos = from; pos < cut;) {
		if (pos + (int64_t)sizeof hdr > cut || seg_read_bytes(l, s, pos, sizeof hdr, hdr) < 0)
			return -1;
		struct hdr_view v = hdr_read(hdr);
		if (!v.ok || pos + v.len > cut || v.base < c->end)
			return -1;
		if (c->rebuilt) {
			struct sluice_batch b = {.base_offset = v.base, .length = (int32_t)(v.len - 12),
						 .last_offset_delta = (int32_t)(v.last - v.base), .max_timestamp = v.max_ts};
			seg_note_batch(l, &c->fresh, &b, pos);
			c->fresh.size = pos + v.len;
		} else if (v.max_ts > c->max_ts || c->max_ts_offset < 0) {
			c->max_ts = v.max_ts > c->max_ts ? v.max_ts : c->max_ts;
			c->max_ts_offset = v.last;
		}
		c->end = v.last + 1;
		pos += v.len;
	}
	return 0;
}

static int seg_cut_plan(struct sluice_plog *l, struct segment *s, int64_t cut, struct seg_cut *c)
{
	memset(c, 0, sizeof *c);
	c->pos = cut;
	c->end = s->base_offset;
	uint32_t keep = 0;
	while (keep < s->idx_n && s->idx[keep].position < cut)
		keep++;
	c->idx_n = keep;
	c->rebuilt = keep == 0 || s->tidx_partial;
	if (c->rebuilt) {
		c->fresh.base_offset = s->base_offset;
		c->fresh.fd_read = c->fresh.fd_direct = -1;
		seg_scan_reset(&c->fresh);
		if (seg_cut_walk(l, s, 0, cut, c) < 0) {
			seg_free(&c->fresh);
			return -1;
		}
		assert(c->fresh.next_offset == c->end && c->fresh.size == cut);
		return 0;
	}
	/* Kept: the batches up to index entry keep - 1, whose largest
	 * timestamp is the last time index entry naming one of them (an entry
	 * is added at each index point where the largest timestamp grew). */
	const struct idx_entry *q = &s->idx[keep - 1];
	int64_t q_last = s->base_offset + q->rel_offset;
	c->max_ts = -1;
	c->max_ts_offset = -1;
	for (uint32_t t = s->tidx_n; t-- > 0;)
		if (s->base_offset + s->tidx[t].rel_offset <= q_last) {
			c->max_ts = s->tidx[t].timestamp;
			c->max_ts_offset = s->base_offset + s->tidx[t].rel_offset;
			break;
		}
	c->first_ts = s->first_ts;
	c->since = cut - q->position;
	if (seg_cut_walk(l, s, q->position, cut, c) < 0)
		return -1;
	assert(c->end > q_last);
	return 0;
}

/* Apply a plan to s: its indexes trimmed (time index entries naming
 * removed batches go) or replaced by the rebuilt ones. */
static void seg_cut_apply(struct segment *s, struct seg_cut *c)
{
	if (c->rebuilt) {
		free(s->idx);
		free(s->tidx);
		s->idx = c->fresh.idx;
		s->idx_n = c->fresh.idx_n;
		s->idx_cap = c->fresh.idx_cap;
		s->tidx = c->fresh.tidx;
		s->tidx_n = c->fresh.tidx_n;
		s->tidx_cap = c->fresh.tidx_cap;
		s->bytes_since_index = c->fresh.bytes_since_index;
		s->max_ts = c->fresh.max_ts;
		s->max_ts_offset = c->fresh.max_ts_offset;
		s->first_ts = c->fresh.first_ts;
		s->tidx_partial = false;
		c->fresh.idx = NULL;
		c->fresh.tidx = NULL;
	} else {
		s->idx_n = c->idx_n;
		while (s->tidx_n && s->base_offset + s->tidx[s->tidx_n - 1].rel_offset >= c->end)
			s->tidx_n--;
		s->bytes_since_index = c->since;
		s->max_ts = c->max_ts;
		s->max_ts_offset = c->max_ts_offset;
		s->first_ts = c->first_ts;
	}
	s->size = c->pos;
	s->next_offset = c->end;
	s->damaged = false; /* bytes past its batches are cut off with the rest */
	assert(s->idx_n == 0 || s->idx[s->idx_n - 1].position < s->size);
	assert(s->max_ts_offset < s->next_offset);
}

/* Drop segments [from, seg_n) from memory and disk, newest first (the
 * active one's tail and descriptor with it). */
static void segments_drop_from(struct sluice_plog *l, uint32_t from)
{
	while (l->seg_n > from) {
		struct segment *s = active(l);
		int64_t base = s->base_offset;
		tail_release(l, base, false);
		if (l->fd_write >= 0)
			fd_write_close(l);
		seg_free(s);
		cache_forget(l, base);
		segment_delete_files(l, base);
		l->seg_n--;
	}
}

/* After the files changed: the log's positions for an active segment of
 * size bytes ending at offset end, nothing pending. cut: its file was just
 * cut to size, so its preallocation is made again as open_active makes it
 * (log.preallocate), or follows the writes from there. synced: the cut is
 * on stable storage, and the recovery point moves to end (else it is at or
 * below end already and stays). */
static void truncate_settle(struct sluice_plog *l, int64_t end, bool cut, bool synced)
{
	struct segment *s = active(l);
	l->leo = l->written_end = end;
	l->committed_pos = l->submitted_end = s->size;
	if (cut) {
		l->prealloc_end = s->size;
		l->prealloc_step = 0;
		l->prealloc_ms = 0;
		if (l->cfg.preallocate && l->cfg.segment_bytes > s->size &&
		    fallocate(l->fd_write, 0, s->size, l->cfg.segment_bytes - s->size) == 0)
			l->prealloc_end = l->cfg.segment_bytes;
	}
	l->unflushed_messages = 0;
	l->unflushed_since_ms = 0;
	l->load_err = false;
	free(l->tl_plain);
	l->tl_plain = NULL;
	l->tl_plain_len = 0;
	l->trunc_gen++;
	l->modified = true;
	if (l->log_start > end) {
		l->log_start = end;
		write_log_start(l);
	}
	assert(synced || l->recovery_point <= end);
	if (synced)
		write_recovery_point(l, end);
}

int sluice_plog_truncate_to(struct sluice_plog *l, int64_t offset, char *err, size_t errlen)
{
	if (offset < l->log_start) {
		snprintf(err, errlen, "offset %" PRId64 " is below the log start offset %" PRId64, offset, l->log_start);
		return -EINVAL;
	}
	if (offset >= l->leo)
		return 0;
	int rc = truncate_quiesce(l, true, err, errlen);
	if (rc < 0)
		return rc;
	uint32_t k = find_segment(l, offset);
	struct segment *s = &l->segs[k];
	int64_t pos = offset <= s->base_offset ? 0 : seg_find_position(l, s, offset, s->size);
	if (pos == -1)
		pos = s->size; /* every batch of the segment lies below offset */
	struct seg_cut c;
	if (pos < 0 || seg_cut_plan(l, s, pos, &c) < 0) {
		snprintf(err, errlen, "segment %020" PRId64 ".log cannot be read before offset %" PRId64
			 " (an I/O error or bytes that are not batches); nothing was changed", s->base_offset, offset);
		return -EIO;
	}
	assert(c.end <= offset && c.end >= s->base_offset);
	/* A cut inside the active segment at or above the recovery point (a
	 * follower dropping what an old leader wrote last: the usual case)
	 * needs neither the marker nor a sync, as Kafka's truncation syncs
	 * nothing: a crash that loses the cut brings back only batches past
	 * the recovery point, which recovery checks as it checks any unsynced
	 * tail, and which the replica then truncates again by leader epoch
	 * (they were never committed). Batches written after the cut replace
	 * them on disk as they are written. So a follower cutting 34
	 * partitions after a leader change costs no journal commit. */
	bool quick = k == l->seg_n - 1 && c.end >= l->recovery_point;
	if (!quick && marker_write(l->dir, c.end, s->base_offset, pos) < 0) {
		snprintf(err, errlen, "writing the truncation marker failed: %s; nothing was changed", strerror(errno));
		if (c.rebuilt)
			seg_free(&c.fresh);
		return -EIO;
	}
	/* From here a failure fails the log: the marker makes the next open
	 * finish the truncation. */
	segments_drop_from(l, k + 1);
	tail_release(l, s->base_offset, false);
	cache_forget(l, s->base_offset);
	seg_cut_apply(s, &c);
	static const char *const idx_exts[] = {".index", ".timeindex"};
	for (size_t i = 0; i < 2; i++) {
		char q[PATH_BYTES];
		seg_path(l, s->base_offset, idx_exts[i], q);
		(void)unlink(q); /* an active segment's indexes are written when it closes */
	}
	if (fd_write_open(l) < 0 || ftruncate(l->fd_write, pos) < 0 || (!quick && fdatasync(l->fd_write) < 0)) {
		snprintf(err, errlen, "cutting segment %020" PRId64 ".log failed: %s", s->base_offset, strerror(errno));
		goto fail;
	}
	truncate_settle(l, c.end, true, !quick);
	if (!quick && marker_remove(l->dir) < 0) {
		snprintf(err, errlen, "removing the truncation marker failed: %s", strerror(errno));
		goto fail;
	}
	check_offsets(l);
	SLOG_INFO("storage", "%s: truncated to offset %" PRId64 " (asked %" PRId64 ")", l->dir, l->leo, offset);
	return 0;
fail:
	l->failed = true;
	SLOG_ERR("storage", "%s: truncation to offset %" PRId64 " failed: %s", l->dir, offset, err);
	return -EIO;
}

int sluice_plog_truncate_fully(struct sluice_plog *l, int64_t offset, char *err, size_t errlen)
{
	if (offset < 0 || offset > SLUICE_PLOG_OFFSET_MAX) {
		snprintf(err, errlen, "offset %" PRId64 " out of range", offset);
		return -EINVAL;
	}
	int rc = truncate_quiesce(l, false, err, errlen);
	if (rc < 0)
		return rc;
	if (marker_write(l->dir, offset, -1, 0) < 0) {
		snprintf(err, errlen, "writing the truncation marker failed: %s; nothing was changed", strerror(errno));
		return -EIO;
	}
	segments_drop_from(l, 0);
	assert(l->seg_n == 0 && l->fd_write < 0 && l->tail_n == 0);
	if (create_segment(l, offset) < 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	l->log_start = l->written_end = l->leo = offset;
	if (open_active(l, err, errlen) < 0)
		goto fail;
	write_log_start(l);
	truncate_settle(l, offset, false, true);
	if (marker_remove(l->dir) < 0) {
		snprintf(err, errlen, "removing the truncation marker failed: %s", strerror(errno));
		goto fail;
	}
	check_offsets(l);
	SLOG_INFO("storage", "%s: truncated fully, restarting at offset %" PRId64, l->dir, offset);
	return 0;
fail:
	l->failed = true;
	if (l->seg_n == 0 && create_segment(l, offset) == 0)
		l->leo = l->written_end = l->log_start = offset; /* the structure stays whole for close */
	SLOG_ERR("storage", "%s: full truncation to offset %" PRId64 " failed: %s", l->dir, offset, err);
	return -EIO;
}

int sluice_plog_visit_tail(struct sluice_plog *l, uint32_t nsegs,
			   void (*visit)(const struct sluice_batch *b, void *arg), void *arg)
{
	uint32_t first = l->seg_n > nsegs ? l->seg_n - nsegs : 0;
	for (uint32_t si = first; si < l->seg_n; si++) {
		struct segment *s = &l->segs[si];
		int64_t limit = si == l->seg_n - 1 ? l->committed_pos : s->size;
		int64_t pos = 0;
		uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
		while (pos + SLUICE_BATCH_HEADER_BYTES <= limit) {
			if (seg_read_bytes(l, s, pos, sizeof hdr, hdr) < 0)
				return -1;
			struct sluice_batch b;
			int64_t len = (int64_t)(int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LENGTH) + 12;
			if (len < SLUICE_BATCH_HEADER_BYTES || pos + len > limit)
				break;
			/* header fields only: parse against the declared length */
			if (sluice_batch_parse(hdr, (size_t)len, &b) == SLUICE_BATCH_BAD_MAGIC)
				break;
			b.base_offset = (int64_t)kbe64(hdr);
			b.last_offset_delta = (int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LAST_DELTA);
			b.producer_id = (int64_t)kbe64(hdr + SLUICE_BATCH_OFF_PRODUCER_ID);
			b.producer_epoch = (int16_t)kbe16(hdr + SLUICE_BATCH_OFF_PRODUCER_EPOCH);
			b.base_sequence = (int32_t)kbe32(hdr + SLUICE_BATCH_OFF_BASE_SEQ);
			visit(&b, arg);
			pos += len;
		}
	}
	return 0;
}

/* Within a batch, the first record with timestamp >= ts. A compressed
 * batch's records come from the lookup cache when it holds this batch
 * (same BaseOffset, CRC and length: 128 pipelined lookups landing in one
 * batch decompress it once), else decompressed and, when small enough,
 * cached. *work grows by the record bytes scanned or decompressed. */
static bool batch_record_for_time(struct sluice_plog *l, const uint8_t *batch, size_t len, int64_t ts,
				  int64_t *off, int64_t *rts, int64_t *work)
{
	struct sluice_batch b;
	if (sluice_batch_parse(batch, len, &b) != SLUICE_BATCH_OK)
		return false;
	const uint8_t *recs = batch + SLUICE_BATCH_HEADER_BYTES;
	size_t recs_len = (size_t)sluice_batch_total_bytes(&b) - SLUICE_BATCH_HEADER_BYTES;
	uint8_t *plain = NULL;
	int codec = b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK;
	uint32_t crc = kbe32(batch + SLUICE_BATCH_OFF_CRC);
	if (codec && l->tl_plain && l->tl_base == b.base_offset && l->tl_crc == crc && l->tl_len == (int64_t)len) {
		recs = l->tl_plain;
		recs_len = l->tl_plain_len;
	} else if (codec) {
		int64_t n = sluice_decompress(codec, recs, recs_len, PLOG_DECOMPRESS_MAX, &plain);
		if (n < 0)
			return false;
		*work += n;
		recs = plain;
		recs_len = (size_t)n;
		if ((size_t)n <= PLOG_LOOKUP_CACHE_MAX) {
			free(l->tl_plain);
			l->tl_plain = plain;
			l->tl_plain_len = (size_t)n;
			l->tl_base = b.base_offset;
			l->tl_crc = crc;
			l->tl_len = (int64_t)len;
			plain = NULL; /* the cache owns it now */
		}
	}
	bool found = false;
	struct krd r;
	krd_init(&r, recs, recs_len);
	for (int32_t i = 0; i < b.records_count && !r.err; i++) {
		int32_t rlen = krd_varint(&r);
		const uint8_t *start = r.p;
		(void)krd_i8(&r);
		int64_t tsd = krd_varlong(&r);
		int32_t od = krd_varint(&r);
		if (r.err || rlen < 0 || (size_t)rlen > krd_left(&r) + (size_t)(r.p - start))
			break;
		if (ts_plus_ms(b.base_timestamp, tsd) >= ts) {
			*off = ts_plus_ms(b.base_offset, od); /* header fields from disk: anything */
			*rts = ts_plus_ms(b.base_timestamp, tsd);
			found = true;
			break;
		}
		r.p = start + rlen;
	}
	*work += r.p - recs;
	free(plain);
	return found;
}

/* Where a lookup for ts may start in segment s: after the batch named by
 * the last time index entry whose timestamp is below ts (every batch up to
 * it has a smaller MaxTimestamp), else at 0. */
static int64_t seg_time_start(struct sluice_plog *l, struct segment *s, int64_t ts, int64_t limit)
{
	uint32_t lo = 0, hi = s->tidx_n;
	while (lo < hi) { /* first entry with timestamp >= ts */
		uint32_t mid = (lo + hi) / 2;
		if (s->tidx[mid].timestamp < ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return 0;
	int64_t pos = seg_find_position(l, s, s->base_offset + s->tidx[lo - 1].rel_offset + 1, limit);
	return pos < 0 ? 0 : pos;
}

int64_t sluice_plog_offset_for_time_work(struct sluice_plog *l, int64_t ts, int64_t *found_ts, int64_t *work)
{
	for (uint32_t si = 0; si < l->seg_n; si++) {
		struct segment *s = &l->segs[si];
		if (s->max_ts < ts)
			continue;
		int64_t limit = si == l->seg_n - 1 ? l->committed_pos : s->size;
		int64_t pos = seg_time_start(l, s, ts, limit);
		uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
		while (pos + SLUICE_BATCH_HEADER_BYTES <= limit) {
			if (seg_read_bytes(l, s, pos, sizeof hdr, hdr) < 0)
				return -1;
			*work += (int64_t)sizeof hdr;
			struct sluice_batch b;
			if (sluice_batch_parse(hdr, sizeof hdr, &b) == SLUICE_BATCH_BAD_LENGTH)
				return -1;
			b.base_offset = (int64_t)kbe64(hdr);
			int64_t len = (int64_t)(int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LENGTH) + 12;
			int64_t max_ts = (int64_t)kbe64(hdr + SLUICE_BATCH_OFF_MAX_TS);
			uint16_t attr = kbe16(hdr + SLUICE_BATCH_OFF_ATTRIBUTES);
			if (len < SLUICE_BATCH_HEADER_BYTES || pos + len > limit)
				break;
			if (max_ts >= ts && b.base_offset >= l->log_start) {
				int64_t off = b.base_offset, rts = max_ts;
				/* LogAppendTime: every record carries MaxTimestamp, so the
				 * first one is the answer, nothing to decompress, when it is
				 * at BaseOffset (no records compacted away: count = deltas). */
				int32_t count = (int32_t)kbe32(hdr + SLUICE_BATCH_OFF_COUNT);
				int32_t deltas = (int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LAST_DELTA) + 1;
				if (!(attr & SLUICE_BATCH_ATTR_TS_LOG_APPEND) || count != deltas) {
					uint8_t *buf = malloc((size_t)len);
					if (buf && seg_read_bytes(l, s, pos, (size_t)len, buf) == 0)
						(void)batch_record_for_time(l, buf, (size_t)len, ts, &off, &rts, work);
					free(buf);
				}
				*found_ts = rts;
				return off;
			}
			pos += len;
		}
	}
	return -1;
}

int64_t sluice_plog_offset_for_time(struct sluice_plog *l, int64_t ts, int64_t *found_ts)
{
	int64_t work = 0;
	return sluice_plog_offset_for_time_work(l, ts, found_ts, &work);
}

void sluice_plog_close(struct sluice_plog *l)
{
	if (!l)
		return;
	/* A log untouched since a clean open has nothing to sync or rewrite:
	 * closing 10,000 idle partitions then costs no I/O. */
	bool sync = l->opened && !l->failed && l->modified;
	if (sync)
		(void)fd_write_open(l);
	if (l->fd_write >= 0) {
		if (l->write_inflight && l->hooks.wait_write)
			l->hooks.wait_write(l, l->hooks.arg);
		if (sync && !l->failed && write_sync(l) == 0) {
			struct segment *s = active(l);
			if (ftruncate(l->fd_write, s->size) == 0 && (l->close_nosync || fdatasync(l->fd_write) == 0)) {
				if (l->committed_pos < s->size || l->written_end < l->leo)
					advance_written(l, s->size, l->leo);
				seg_write_indexes(l, s);
				write_recovery_point(l, l->leo);
			}
		}
		fd_write_close(l);
	}
	if ((l->write_inflight || l->ra_inflight || l->loads_inflight) && l->hooks.wait_write)
		l->hooks.wait_write(l, l->hooks.arg);
	assert(!l->write_inflight || l->failed); /* the hook waited for it */
	if (!l->write_inflight && !l->ra_inflight && !l->loads_inflight) {
		tail_release(l, -1, false);
		sluice_cache_forget(l->pool, l, -1);
		if (l->pool_owned)
			sluice_pool_destroy(l->pool);
	} /* else a failed log whose buffers a write still holds: leaked, not freed under the kernel */
	free(l->tail);
	free(l->iov);
	free(l->tl_plain);
	for (uint32_t i = 0; i < l->seg_n; i++)
		seg_free(&l->segs[i]);
	free(l->segs);
	free(l);
}

int sluice_plog_close_io(struct sluice_plog *l)
{
	assert(!l->write_inflight && !l->fsync_inflight && !l->ra_inflight && !l->loads_inflight);
	if (!l->opened || l->failed || !l->modified)
		return 0;
	/* Nothing here may reach the storage core: no hooks, and a descriptor
	 * of its own rather than one registered with the core's ring. */
	l->hooks.written = NULL;
	l->hooks.wait_write = NULL;
	l->close_nosync = true;
	bool own = l->fd_write < 0;
	if (own) {
		char p[PATH_BYTES];
		seg_path(l, active(l)->base_offset, ".log", p);
		l->fd_write = open(p, O_RDWR | O_CLOEXEC | (l->cfg.direct_io ? O_DIRECT : 0));
		if (l->fd_write < 0)
			return -1; /* close tries again on the core */
	}
	struct segment *s = active(l);
	int rc = write_sync(l) == 0 && ftruncate(l->fd_write, s->size) == 0 ? 0 : -1;
	if (rc == 0) {
		if (l->committed_pos < s->size || l->written_end < l->leo)
			advance_written(l, s->size, l->leo);
		assert(l->written_end == l->leo && l->committed_pos == s->size);
		seg_write_indexes(l, s);
		write_recovery_point(l, l->leo);
		l->modified = false; /* close has nothing left to write */
	}
	if (own) {
		close(l->fd_write);
		l->fd_write = -1;
	}
	return rc;
}

void sluice_plog_close_nosync(struct sluice_plog *l)
{
	if (l)
		l->close_nosync = true;
	sluice_plog_close(l);
}

/* ---- zero-copy reads ------------------------------------------------------ */

static bool seg_present(const struct sluice_plog *l, int64_t seg_base)
{
	for (uint32_t i = 0; i < l->seg_n; i++)
		if (l->segs[i].base_offset == seg_base)
			return true;
	return false;
}

/* The extent holding bytes [pos, end) of segment s (within one extent):
 * the tail's or a cached one; NULL when neither holds them all. */
static struct sluice_extent *extent_find(struct sluice_plog *l, struct segment *s, int64_t pos, int64_t end)
{
	int64_t k = ext_floor(l, pos);
	assert(end > pos && end <= k + l->ext_bytes);
	struct sluice_extent *e = s == active(l) ? tail_at(l, k) : NULL;
	if (e && e->lo <= pos && e->hi >= end)
		return e;
	e = sluice_cache_lookup(l->pool, l, s->base_offset, k);
	return e && e->lo <= pos && e->hi >= end ? e : NULL;
}

/* Read extent k of segment s on ring into a pool buffer (O_DIRECT where
 * the filesystem allows, else through the page cache, still off the core),
 * cached by load_complete. Returns SLUICE_PLOG_READ_WOULD_BLOCK when the
 * extent is on its way (submitted now, by an earlier read, or by the read
 * ahead; or every load slot is busy: a completion is coming), -2 for the
 * failed load of this extent (once) or no memory, and 0 when the ring has
 * no room even after a submit: the caller then loads synchronously. */
static int load_submit(struct sluice_plog *l, struct segment *s, int64_t k, struct io_uring *ring)
{
	int slot = -1;
	for (int i = 0; i < SLUICE_PLOG_LOADS_MAX; i++) {
		const struct plog_load *ld = &l->loads[i];
		if (!ld->ext)
			slot = slot < 0 ? i : slot;
		else if (ld->seg_base == s->base_offset && ld->ext->file_off == k)
			return SLUICE_PLOG_READ_WOULD_BLOCK;
	}
	if (l->ra_inflight && l->ra_seg_base == s->base_offset && l->ra_ext->file_off == k)
		return SLUICE_PLOG_READ_WOULD_BLOCK;
	if (l->load_err && l->load_err_seg == s->base_offset && l->load_err_off == k) {
		l->load_err = false;
		return -2;
	}
	if (slot < 0)
		return SLUICE_PLOG_READ_WOULD_BLOCK;
	int64_t limit = seg_limit(l, s), end = k + l->ext_bytes < limit ? k + l->ext_bytes : limit;
	assert(end > k);
	int fd = seg_fd_direct(l, s);
	bool direct = fd >= 0;
	if (!direct && (fd = seg_fd_read(l, s)) < 0)
		return -2;
	/* Leave room for the writes, as the read ahead does. */
	if (io_uring_sq_space_left(ring) < SLUICE_PLOG_WRITE_SQES_MAX + 2)
		(void)io_uring_submit(ring);
	if (io_uring_sq_space_left(ring) < SLUICE_PLOG_WRITE_SQES_MAX + 2)
		return 0;
	struct sluice_extent *e = sluice_pool_get(l->pool);
	if (!e)
		return -2;
	struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
	assert(sqe); /* room was checked */
	unsigned want = (unsigned)(direct ? align_up(end - k) : end - k);
	if (e->buf_index >= 0 && ring == sluice_pool_ring(l->pool))
		io_uring_prep_read_fixed(sqe, fd, e->buf, want, (uint64_t)k, e->buf_index);
	else
		io_uring_prep_read(sqe, fd, e->buf, want, (uint64_t)k);
	io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)l | (uint64_t)(4 + slot));
	e->owner = l;
	e->seg_base = s->base_offset;
	e->file_off = e->lo = k;
	e->hi = end;
	l->loads[slot] = (struct plog_load){e, s->base_offset, l->cache_gen};
	l->loads_inflight++;
	sluice_pool_count(l->pool, false);
	return SLUICE_PLOG_READ_WOULD_BLOCK;
}

/* A load completed: cache what it read unless the segment changed or went
 * meanwhile; a failed or short read is remembered for the reader's retry,
 * which answers -2 instead of loading forever. Readers are told either way. */
static void load_complete(struct sluice_plog *l, int slot, int res)
{
	assert(slot >= 0 && slot < SLUICE_PLOG_LOADS_MAX && l->loads[slot].ext);
	assert(l->loads_inflight > 0);
	struct plog_load ld = l->loads[slot];
	struct sluice_extent *e = ld.ext;
	l->loads[slot].ext = NULL;
	l->loads_inflight--;
	bool current = ld.gen == l->cache_gen && seg_present(l, ld.seg_base);
	if (current && res >= e->hi - e->lo) {
		cache_offer(l, e);
	} else if (current) {
		SLOG_ERR("storage", "%s: read of segment %020" PRId64 " at %lld failed: %s", l->dir, ld.seg_base,
			 (long long)e->file_off, res < 0 ? strerror(-res) : "short read");
		l->load_err = true;
		l->load_err_seg = ld.seg_base;
		l->load_err_off = e->file_off;
	}
	sluice_extent_put(e);
	if (l->hooks.loaded)
		l->hooks.loaded(l, l->hooks.arg);
}

/* The extent holding [pos, end) of segment s, loaded when missing:
 * synchronously without ring, else submitted there (WOULD_BLOCK). */
static int extent_get(struct sluice_plog *l, struct segment *s, int64_t pos, int64_t end, struct io_uring *ring,
		      struct sluice_extent **out)
{
	assert(end > pos);
	struct sluice_extent *e = extent_find(l, s, pos, end);
	if (e)
		sluice_pool_count(l->pool, true);
	if (!e) {
		int rc = ring ? load_submit(l, s, ext_floor(l, pos), ring) : 0;
		if (rc < 0)
			return rc;
		sluice_pool_count(l->pool, false);
		e = extent_load(l, s, ext_floor(l, pos));
		if (!e || e->lo > pos || e->hi < end)
			return -2;
	}
	assert(e->lo <= pos && e->hi >= end && e->refs > 0);
	*out = e;
	return 0;
}

/* With ring: submit the loads of every extent of [from, to) in segment s
 * that is missing, so one wait covers the whole read. 0 when all are in
 * memory (or must be loaded synchronously), else WOULD_BLOCK or -2. */
static int extents_ensure(struct sluice_plog *l, struct segment *s, int64_t from, int64_t to, struct io_uring *ring)
{
	int rc = 0;
	assert(ring && from >= 0);
	while (from < to) {
		int64_t k = ext_floor(l, from), end = k + l->ext_bytes < to ? k + l->ext_bytes : to;
		int r = extent_find(l, s, from, end) ? 0 : load_submit(l, s, k, ring);
		if (r == -2)
			return -2;
		rc = r < 0 ? r : rc;
		from = end;
	}
	return rc;
}

/* One zero-copy read as it walks the batches of segment s from pos. */
struct read_walk {
	struct sluice_plog *l;
	struct segment *s;
	struct io_uring *ring;         /* loads go there; NULL: synchronous */
	struct sluice_read_result *r;  /* covers the bytes from pos on */
	int64_t pos, limit;            /* the read's start; the segment's readable end */
	int64_t reach;                 /* the end of the extents one result can reference */
	int64_t end;                   /* no batch from this offset on is served */
	int64_t expect, seg_hi;        /* batches from disk must lie in offsets [expect, seg_hi) */
};

/* Pin the extents holding bytes [pos + r->bytes, to): the last range grows
 * while its extent holds the bytes, else a range is added with a new
 * reference. Returns 0, -2, WOULD_BLOCK, or TOO_MANY_EXTENTS when the
 * result has no range left. */
static int result_extend(struct read_walk *w, int64_t to)
{
	struct sluice_plog *l = w->l;
	struct sluice_read_result *r = w->r;
	assert(l->ext_bytes <= UINT32_MAX && r->n <= SLUICE_READ_RANGES_MAX);
	if (to - w->pos > INT32_MAX)
		return SLUICE_PLOG_READ_TOO_MANY_EXTENTS;
	int64_t at = w->pos + r->bytes;
	while (at < to) {
		int64_t k = ext_floor(l, at), end = k + l->ext_bytes < to ? k + l->ext_bytes : to;
		struct sluice_read_range *last = r->n ? &r->range[r->n - 1] : NULL;
		if (last && last->ext->file_off == k && last->ext->hi >= end) {
			assert(last->off + last->len == at - k); /* ranges follow each other */
			last->len += (uint32_t)(end - at);
		} else {
			if (r->n == SLUICE_READ_RANGES_MAX)
				return SLUICE_PLOG_READ_TOO_MANY_EXTENTS;
			struct sluice_extent *e;
			int rc = extent_get(l, w->s, at, end, w->ring, &e);
			if (rc < 0)
				return rc;
			sluice_extent_ref(e);
			uint32_t off = (uint32_t)(at - e->file_off);
			r->range[r->n++] = (struct sluice_read_range){e, off, (uint32_t)(end - at)};
		}
		r->bytes += (int32_t)(end - at);
		at = end;
	}
	return 0;
}

/* Walk the result's bytes [rel, rel + len): copy them to dst (unless
 * NULL), sum their CRC-32C into *crc (unless NULL); returns whether every
 * extent they lie in holds bytes from appends only. */
static bool result_walk(const struct sluice_read_result *r, int64_t rel, int64_t len, uint8_t *dst, uint32_t *crc)
{
	assert(rel >= 0 && len >= 0 && rel + len <= r->bytes);
	bool verified = true;
	for (uint32_t i = 0; i < r->n && len > 0; i++) {
		const struct sluice_read_range *g = &r->range[i];
		if (rel >= g->len) {
			rel -= g->len;
			continue;
		}
		size_t n = (size_t)(g->len - rel < len ? g->len - rel : len);
		const uint8_t *src = g->ext->buf + g->off + rel;
		if (dst) {
			memcpy(dst, src, n);
			dst += n;
		}
		if (crc)
			*crc = sluice_crc32c(*crc, src, n);
		verified &= g->ext->verified;
		len -= (int64_t)n;
		rel = 0;
	}
	assert(len == 0);
	return verified;
}

/* Keep the first bytes of the result, unpinning the extents past them. */
static void result_trim(struct sluice_read_result *r, int64_t bytes)
{
	assert(bytes >= 0 && bytes <= r->bytes && r->n <= SLUICE_READ_RANGES_MAX);
	int64_t seen = 0;
	uint32_t keep = 0;
	for (uint32_t i = 0; i < r->n; i++) {
		struct sluice_read_range *g = &r->range[i];
		if (seen >= bytes) {
			sluice_extent_put(g->ext);
			g->ext = NULL;
			continue;
		}
		if (seen + g->len > bytes)
			g->len = (uint32_t)(bytes - seen);
		seen += g->len;
		keep++;
	}
	r->n = keep;
	r->bytes = (int32_t)bytes;
}

void sluice_read_result_release(struct sluice_read_result *r)
{
	result_trim(r, 0);
	assert(r->n == 0 && r->bytes == 0);
}

/* Whether the batch at the result's bytes [rel, rel + len), header hdr,
 * may be served: sluice_plog_read's checks over bytes lying in pieces.
 * Bytes from appends are trusted; bytes from disk must pass the CRC and lie
 * in the segment's offsets, in order. w->expect moves past the batch. */
static bool batch_servable(struct read_walk *w, int64_t rel, int64_t len, const uint8_t *hdr)
{
	assert(len >= SLUICE_BATCH_HEADER_BYTES && rel >= 0 && rel + len <= w->r->bytes);
	if (result_walk(w->r, rel, len, NULL, NULL)) {
		w->expect = hdr_read(hdr).last + 1;
		return true;
	}
	/* sluice_batch_parse reads the header only (the CRC is summed below,
	 * piece by piece); len is the whole batch, which it checks against. */
	_Static_assert(SLUICE_BATCH_OFF_COUNT + 4 == SLUICE_BATCH_HEADER_BYTES, "parse reads the header only");
	struct sluice_batch b;
	uint32_t crc = 0;
	bool ok = sluice_batch_parse(hdr, (size_t)len, &b) == SLUICE_BATCH_OK && sluice_batch_total_bytes(&b) == len;
	if (ok)
		(void)result_walk(w->r, rel + SLUICE_BATCH_OFF_ATTRIBUTES, len - SLUICE_BATCH_OFF_ATTRIBUTES, NULL,
				  &crc);
	/* sluice_batch_check_crc's checks, then those of a batch from disk */
	ok = ok && crc == b.crc && b.records_count >= 0 && b.last_offset_delta >= 0 &&
	     (int64_t)b.records_count <= (int64_t)b.last_offset_delta + 1 && batch_offsets_sane(&b) &&
	     b.base_offset >= w->expect && b.base_offset + b.last_offset_delta < w->seg_hi;
	if (!ok) {
		SLOG_ERR("storage", "%s: corrupt batch at segment %020" PRId64 " position %lld; not served", w->l->dir,
			 w->s->base_offset, (long long)(w->pos + rel));
		return false;
	}
	w->expect = b.base_offset + b.last_offset_delta + 1;
	assert(w->expect <= w->seg_hi);
	return true;
}

/* Pin whole batches from w->pos, as sluice_plog_read selects them: up to
 * want bytes, or the first one whole when min_one; a batch that cannot be
 * pinned (no range left) or served (damage) ends the read before it.
 * Returns the bytes kept (0: none fit), -3 when the first batch is damage,
 * or the error that stopped it (nothing then stays pinned). */
static int64_t walk_batches(struct read_walk *w, int64_t want, bool min_one)
{
	int64_t n = 0;
	int rc = 0;
	assert(w->r->n == 0 && w->r->bytes == 0 && w->pos + want <= w->limit);
	while (n + SLUICE_BATCH_HEADER_BYTES <= want) {
		uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
		if ((rc = result_extend(w, w->pos + n + SLUICE_BATCH_HEADER_BYTES)) < 0)
			break;
		(void)result_walk(w->r, n, SLUICE_BATCH_HEADER_BYTES, hdr, NULL);
		int64_t len = (int64_t)(int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LENGTH) + 12;
		if (len < SLUICE_BATCH_HEADER_BYTES || w->pos + n + len > w->limit) {
			rc = n == 0 ? -3 : 0;
			if (n == 0)
				SLOG_ERR("storage", "%s: no batch at segment %020" PRId64 " position %lld (damaged); "
					 "not served", w->l->dir, w->s->base_offset, (long long)w->pos);
			break;
		}
		bool oversized = n + len > want;
		if (oversized && !(n == 0 && min_one))
			break;
		if (w->pos + n + len > w->reach) {
			rc = SLUICE_PLOG_READ_TOO_MANY_EXTENTS; /* nothing loaded or pinned for it */
			break;
		}
		if (oversized && w->ring && (rc = extents_ensure(w->l, w->s, w->pos + want, w->pos + len, w->ring)) < 0)
			break;
		if ((rc = result_extend(w, w->pos + n + len)) < 0)
			break;
		if (!batch_servable(w, n, len, hdr)) {
			rc = n == 0 ? -3 : 0;
			break;
		}
		/* Cut at end only once the batch passed its checks: a BaseOffset
		 * from disk lies outside the CRC. Below the written end only,
		 * since every batch read lies below it. */
		if (hdr_read(hdr).base >= w->end)
			break;
		n += len;
		if (oversized)
			break;
	}
	if (rc == SLUICE_PLOG_READ_TOO_MANY_EXTENTS && n > 0)
		rc = 0; /* serve the batches that fit */
	result_trim(w->r, rc < 0 ? 0 : n);
	assert(w->pos + n <= w->limit);
	return rc < 0 ? rc : n;
}

int32_t sluice_plog_read_extents(struct sluice_plog *l, int64_t offset, int64_t end, int32_t max_bytes, bool min_one,
				 struct io_uring *ring, struct sluice_read_result *out)
{
	assert(out && l->pool);
	out->n = 0;
	out->bytes = 0;
	if (offset < l->log_start || offset > l->leo)
		return -1;
	/* Past the written end nothing is readable anyway (seg_limit stops
	 * there), so end needs no check against it here. */
	if (offset >= end)
		return 0; /* at or past the end the caller may see: nothing to read yet */
	for (uint32_t si = find_segment(l, offset); si < l->seg_n; si++) {
		struct segment *s = &l->segs[si];
		int64_t limit = seg_limit(l, s);
		l->load_ring = ring;
		int64_t pos = seg_find_position(l, s, offset, limit);
		l->load_ring = NULL;
		if (pos == -2 || pos == -3 || pos == SLUICE_PLOG_READ_WOULD_BLOCK)
			return (int32_t)pos;
		if (pos < 0 && s->damaged)
			return -3; /* the offset lies in the bytes recovery found damaged */
		if (pos < 0)
			continue; /* offset lies past this segment (e.g. removed records) */
		int64_t avail = limit - pos;
		int64_t want = max_bytes < avail ? max_bytes : avail;
		if (want < SLUICE_BATCH_HEADER_BYTES)
			want = avail < SLUICE_BATCH_HEADER_BYTES ? avail : SLUICE_BATCH_HEADER_BYTES;
		if (want == 0)
			return 0;
		/* Past what one result can reference nothing is loaded ahead. */
		int64_t reach = ext_floor(l, pos) + SLUICE_READ_RANGES_MAX * l->ext_bytes;
		int rc = ring ? extents_ensure(l, s, pos, pos + want < reach ? pos + want : reach, ring) : 0;
		if (rc < 0)
			return rc;
		struct read_walk w = {l, s, ring, out, pos, limit, reach, end, s->base_offset,
				      si + 1 < l->seg_n ? l->segs[si + 1].base_offset : l->leo};
		int64_t n = walk_batches(&w, want, min_one);
		if (n > 0)
			read_ahead(l, s, ext_floor(l, pos + n - 1));
		assert(n < 0 ? out->n == 0 : out->bytes == n);
		return (int32_t)n;
	}
	return 0;
}

/* ---- compaction ------------------------------------------------------------ */

#define COMPACT_DECOMPRESS_MAX (64u << 20)
#define COMPACT_KEYS_MAX (16u << 20) /* keys tracked in one pass */
_Static_assert((COMPACT_KEYS_MAX & (COMPACT_KEYS_MAX - 1)) == 0 && COMPACT_KEYS_MAX <= UINT32_MAX / 8,
	       "the key map's capacity doubles as a uint32_t power of two past twice the keys");

struct keymap {
	uint64_t *hash; /* 0: empty */
	int64_t *offset;
	uint32_t cap, n;
	bool full;
};

static uint64_t key_hash(const uint8_t *k, int32_t len)
{
	uint64_t h = 1469598103934665603ull;
	for (int32_t i = 0; i < len; i++)
		h = (h ^ k[i]) * 1099511628211ull;
	h ^= h >> 31;
	h *= 0x7fb5d329728ea185ull;
	h ^= h >> 27;
	return h ? h : 1;
}

static int64_t *keymap_slot(struct keymap *m, uint64_t h, bool create)
{
	if (create && (m->n + 1) * 2 > m->cap) {
		if (m->cap >= COMPACT_KEYS_MAX * 2) {
			m->full = true;
			return NULL;
		}
		uint32_t oc = m->cap, nc = oc ? oc * 2 : 1024;
		uint64_t *oh = m->hash;
		int64_t *oo = m->offset;
		m->hash = calloc(nc, sizeof *m->hash);
		m->offset = calloc(nc, sizeof *m->offset);
		if (!m->hash || !m->offset) {
			free(m->hash);
			free(m->offset);
			m->hash = oh;
			m->offset = oo;
			m->full = true;
			return NULL;
		}
		m->cap = nc;
		m->n = 0;
		for (uint32_t i = 0; i < oc; i++)
			if (oh[i])
				*keymap_slot(m, oh[i], true) = oo[i];
		free(oh);
		free(oo);
	}
	if (!m->cap)
		return NULL;
	/* A power of two, at most half full: the probe finds h or a free slot. */
	assert((m->cap & (m->cap - 1)) == 0 && m->n < m->cap);
	for (uint32_t i = (uint32_t)h & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (m->hash[i] == h)
			return &m->offset[i];
		if (!m->hash[i]) {
			if (!create)
				return NULL;
			m->hash[i] = h;
			m->n++;
			return &m->offset[i];
		}
	}
}

static bool map_record(const struct sluice_record *rec, void *arg)
{
	struct keymap *m = arg;
	if (!rec->key)
		return true;
	int64_t *slot = keymap_slot(m, key_hash(rec->key, rec->key_len), true);
	if (slot)
		*slot = rec->offset;
	return !m->full;
}

/* Visit every batch of a closed segment, reading it batch by batch. */
static int seg_each_batch(struct sluice_plog *l, struct segment *s,
			  bool (*fn)(const uint8_t *batch, size_t len, void *arg), void *arg)
{
	int64_t pos = 0;
	uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
	uint8_t *buf = NULL;
	size_t cap = 0;
	while (pos + SLUICE_BATCH_HEADER_BYTES <= s->size) {
		if (seg_read_bytes(l, s, pos, sizeof hdr, hdr) < 0)
			goto fail;
		int64_t len = (int64_t)(int32_t)kbe32(hdr + SLUICE_BATCH_OFF_LENGTH) + 12;
		if (len < SLUICE_BATCH_HEADER_BYTES || pos + len > s->size)
			break;
		if ((size_t)len > cap) {
			uint8_t *n = realloc(buf, (size_t)len);
			if (!n)
				goto fail;
			buf = n;
			cap = (size_t)len;
		}
		if (seg_read_bytes(l, s, pos, (size_t)len, buf) < 0)
			goto fail;
		if (!fn(buf, (size_t)len, arg))
			break;
		pos += len;
	}
	assert(pos <= s->size);
	free(buf);
	return 0;
fail:
	free(buf);
	return -1;
}

struct map_ctx {
	struct keymap map;
	struct sluice_plog_clean_job *job;
};

static void clean_throttle(struct sluice_plog_clean_job *j, size_t bytes);
static bool clean_cancelled(const struct sluice_plog_clean_job *j);

static bool map_batch(const uint8_t *batch, size_t len, void *arg)
{
	struct map_ctx *m = arg;
	clean_throttle(m->job, len);
	(void)sluice_batch_records(batch, len, COMPACT_DECOMPRESS_MAX, map_record, &m->map);
	return !clean_cancelled(m->job);
}

struct clean_ctx {
	struct keymap *map;
	int64_t now_ms, delete_retention_ms;
	int fd;
	int64_t written, removed;
	struct kwr out;     /* the rewritten batch being built */
	int32_t kept;
	int64_t batch_max_ts;
	bool failed;
	int64_t tombstone_due_ms; /* when the first tombstone kept may go, INT64_MAX: none kept */
	struct sluice_plog_clean_job *job;
	uint8_t *z;  /* a rebuilt batch recompressed with its codec */
	size_t z_cap;
};

static void clean_fail(struct sluice_plog_clean_job *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));


static bool keep_record(const struct sluice_record *rec, void *arg)
{
	struct clean_ctx *c = arg;
	bool keep = true;
	if (rec->key) {
		int64_t *latest = keymap_slot(c->map, key_hash(rec->key, rec->key_len), false);
		if (latest && *latest != rec->offset)
			keep = false; /* a newer record has this key */
		else if (!rec->value && ts_age_ms(c->now_ms, c->batch_max_ts) > c->delete_retention_ms)
			keep = false; /* a tombstone past delete.retention.ms */
		else if (!rec->value && ts_plus_ms(c->batch_max_ts, c->delete_retention_ms) < c->tombstone_due_ms)
			c->tombstone_due_ms = ts_plus_ms(ts_plus_ms(c->batch_max_ts, c->delete_retention_ms), 1);
	}
	if (keep) {
		kwr_raw(&c->out, rec->raw, rec->raw_len);
		c->kept++;
	}
	return true;
}

/* Rebuild the batch from the records kept (in c->out after room for the
 * header) as Kafka's cleaner does: the original header (BaseOffset,
 * LastOffsetDelta, timestamps, producer fields) with the new count and
 * length, the records recompressed with the batch's own codec, the CRC
 * recomputed. Sets *out to it; false when it would not be smaller than the
 * original (which is then kept whole: superseded records may stay, and a
 * cleaned segment is never larger than what it replaces). */
static bool clean_rebuild(struct clean_ctx *c, const uint8_t *batch, size_t len, const struct sluice_batch *b,
			  const uint8_t **out, size_t *out_len)
{
	int codec = b->attributes & SLUICE_BATCH_ATTR_CODEC_MASK;
	uint8_t *h = c->out.buf;
	size_t total = c->out.len;
	assert(total >= SLUICE_BATCH_HEADER_BYTES && c->kept > 0 && c->kept < b->records_count);
	if (codec) {
		size_t plain = c->out.len - SLUICE_BATCH_HEADER_BYTES, need = sluice_compress_bound(codec, plain);
		if (need == 0)
			return false;
		need += SLUICE_BATCH_HEADER_BYTES;
		if (need > c->z_cap) {
			uint8_t *z = realloc(c->z, need);
			if (!z)
				return false;
			c->z = z;
			c->z_cap = need;
		}
		int64_t n = sluice_compress(codec, c->out.buf + SLUICE_BATCH_HEADER_BYTES, plain,
					    c->z + SLUICE_BATCH_HEADER_BYTES, c->z_cap - SLUICE_BATCH_HEADER_BYTES);
		if (n < 0) {
			SLOG_WARN("storage", "compaction could not recompress a batch (codec %d): kept whole", codec);
			return false;
		}
		h = c->z;
		total = SLUICE_BATCH_HEADER_BYTES + (size_t)n;
	}
	if (total >= len)
		return false;
	memcpy(h, batch, SLUICE_BATCH_HEADER_BYTES);
	kput32(h + SLUICE_BATCH_OFF_LENGTH, (uint32_t)(total - SLUICE_BATCH_LOG_OVERHEAD));
	kput32(h + SLUICE_BATCH_OFF_COUNT, (uint32_t)c->kept);
	kput32(h + SLUICE_BATCH_OFF_CRC,
	       sluice_crc32c(0, h + SLUICE_BATCH_OFF_ATTRIBUTES, total - SLUICE_BATCH_OFF_ATTRIBUTES));
	assert(kbe32(h + SLUICE_BATCH_OFF_LENGTH) + SLUICE_BATCH_LOG_OVERHEAD == total);
	*out = h;
	*out_len = total;
	return true;
}

static bool clean_batch(const uint8_t *batch, size_t len, void *arg)
{
	struct clean_ctx *c = arg;
	if (clean_cancelled(c->job)) {
		c->failed = true;
		return false;
	}
	clean_throttle(c->job, 2 * len); /* read, and written (at most) */
	struct sluice_batch b;
	if (sluice_batch_parse(batch, len, &b) != SLUICE_BATCH_OK)
		return false;
	kwr_reset(&c->out);
	(void)kwr_reserve(&c->out, SLUICE_BATCH_HEADER_BYTES);
	c->kept = 0;
	c->batch_max_ts = b.max_timestamp;
	int32_t n = b.attributes & SLUICE_BATCH_ATTR_CONTROL ? -1
		  : sluice_batch_records(batch, len, COMPACT_DECOMPRESS_MAX, keep_record, c);
	const uint8_t *src = batch;
	size_t src_len = len;
	if (n < 0 || c->kept == b.records_count) {
		/* untouched (or not understood): copied as it is */
	} else if (c->kept == 0) {
		c->removed += (int64_t)len;
		return true;
	} else if (clean_rebuild(c, batch, len, &b, &src, &src_len)) {
		c->removed += (int64_t)len - (int64_t)src_len;
	}
	assert(src_len <= len); /* the cleaned file never outgrows its input */
	size_t done = 0;
	while (done < src_len) {
		ssize_t w = pwrite(c->fd, src + done, src_len - done, c->written + (int64_t)done);
		if (w <= 0) {
			clean_fail(c->job, "write: %s", w < 0 ? strerror(errno) : "no progress");
			c->failed = true;
			return false;
		}
		done += (size_t)w;
	}
	c->written += (int64_t)src_len;
	return true;
}

/* A compaction job: a snapshot of closed segments taken on the owning core
 * (a shadow log naming only them, no pool, so nothing it touches is shared),
 * cleaned on any thread into "<base>.log.cleaned" files with their indexes
 * beside them, and swapped in on the owning core. */
struct sluice_plog_clean_job {
	struct sluice_plog shadow;
	int64_t now_ms, delete_retention_ms;
	int64_t io_bytes_per_sec; /* read + written; <= 0: unlimited */
	int64_t io_bytes;
	double io_start_s;
	int64_t next_base;       /* where the next pass starts (0: from the oldest) */
	int64_t end_base;        /* base of the first segment after those this pass covers */
	/* Consecutive input segments are cleaned together into one output
	 * segment named by the first (as Kafka merges small segments): group g
	 * holds shadow segments [group_start[g], group_start[g + 1]). */
	uint32_t ngroups;
	uint32_t *group_start;
	struct segment *result;  /* per group: the cleaned segment, when written[g] */
	int64_t *removed;        /* per group: bytes the cleaning removed */
	bool *written;           /* per group: a cleaned file is ready to swap in */
	int64_t tombstone_due_ms; /* INT64_MAX: no tombstone kept for later */
	bool failed;
	char why[200];           /* the first failure, for the log */
	_Atomic bool cancelled;
};

static void clean_fail(struct sluice_plog_clean_job *j, const char *fmt, ...)
{
	j->failed = true;
	if (j->why[0])
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(j->why, sizeof j->why, fmt, ap);
	va_end(ap);
}

/* Signature of the closed segments: a pass is due only when it changed. */
static uint64_t closed_signature(const struct sluice_plog *l)
{
	uint64_t h = l->seg_n;
	for (uint32_t i = 0; i + 1 < l->seg_n; i++)
		h = (h ^ (uint64_t)l->segs[i].base_offset) * 1099511628211ull ^ (uint64_t)l->segs[i].size;
	return h;
}

/* What a pass may clean: the closed segments up to the first holding a
 * record newer than min.compaction.lag.ms (those stay as written a while
 * longer) or damaged. Returns their number; *total is their bytes, *dirty
 * those not cleaned yet, *overdue whether dirty data is older than
 * max.compaction.lag.ms. */
static uint32_t clean_eligible(const struct sluice_plog *l, int64_t now_ms, const struct sluice_plog_clean_policy *pol,
			       int64_t *total, int64_t *dirty, bool *overdue)
{
	uint32_t eligible = 0;
	*total = *dirty = 0;
	*overdue = false;
	while (eligible + 1 < l->seg_n) {
		const struct segment *sg = &l->segs[eligible];
		if (pol->min_lag_ms > 0 && sg->max_ts >= 0 && now_ms - sg->max_ts < pol->min_lag_ms)
			break;
		if (sg->damaged)
			break; /* its damaged bytes stay as recovery found them, and so does what follows */
		*total += sg->size;
		if (sg->base_offset >= l->compact_clean_end) {
			int64_t oldest = sg->first_ts >= 0 ? sg->first_ts : sg->max_ts;
			*dirty += sg->size;
			*overdue |= pol->max_lag_ms > 0 && oldest >= 0 && now_ms - oldest > pol->max_lag_ms;
		}
		eligible++;
	}
	assert(eligible < l->seg_n && *dirty <= *total);
	return eligible;
}

/* From where the last pass stopped (compact_next_base), the eligible
 * segments that fit budget_bytes (at least one): *first and the count.
 * Keys superseded only in later segments are kept this pass. */
static uint32_t clean_pick(const struct sluice_plog *l, uint32_t eligible, int64_t budget_bytes, uint32_t *first)
{
	uint32_t f = 0;
	while (f < eligible && l->segs[f].base_offset < l->compact_next_base)
		f++;
	if (f >= eligible)
		f = 0;
	uint32_t n = 0;
	int64_t bytes = 0;
	while (f + n < eligible && (n == 0 || bytes + l->segs[f + n].size <= budget_bytes))
		bytes += l->segs[f + n++].size;
	assert(n >= 1 && f + n <= eligible);
	*first = f;
	return n;
}

/* A job for n segments, its arrays allocated and zeroed; NULL when out of memory. */
static struct sluice_plog_clean_job *clean_job_new(uint32_t n)
{
	struct sluice_plog_clean_job *j = calloc(1, sizeof *j);
	if (!j)
		return NULL;
	j->shadow.segs = calloc(n, sizeof *j->shadow.segs);
	j->group_start = calloc(n + 1, sizeof *j->group_start);
	j->result = calloc(n, sizeof *j->result);
	j->removed = calloc(n, sizeof *j->removed);
	j->written = calloc(n, sizeof *j->written);
	if (!j->shadow.segs || !j->group_start || !j->result || !j->removed || !j->written) {
		sluice_plog_clean_discard(j);
		return NULL;
	}
	return j;
}

/* Groups: consecutive segments (n from first) whose sizes add up to at
 * most segment.bytes, and whose offsets fit the index's 32-bit relative
 * offsets, at most SWAP_GROUP_MAX each. */
static void clean_plan_groups(const struct sluice_plog *l, struct sluice_plog_clean_job *j, uint32_t first, uint32_t n)
{
	int64_t gbytes = 0, gbase = 0;
	uint32_t gcount = 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct segment *sg = &l->segs[first + i];
		if (i == 0 || gbytes + sg->size > l->cfg.segment_bytes || sg->next_offset - gbase >= INT32_MAX ||
		    gcount == SWAP_GROUP_MAX) {
			j->group_start[j->ngroups++] = i;
			gbytes = 0;
			gcount = 0;
			gbase = sg->base_offset;
		}
		gbytes += sg->size;
		gcount++;
	}
	j->group_start[j->ngroups] = n;
	assert(j->ngroups >= 1 && j->ngroups <= n && j->group_start[0] == 0);
}

/* The shadow log naming segments [first, first + n) of l, no pool, and
 * empty results. */
static void clean_shadow_fill(const struct sluice_plog *l, struct sluice_plog_clean_job *j, uint32_t first, uint32_t n)
{
	memcpy(j->shadow.dir, l->dir, sizeof j->shadow.dir);
	j->shadow.cfg = l->cfg;
	j->shadow.trunc_gen = l->trunc_gen;
	j->shadow.cfg.pool = NULL;
	j->shadow.fd_write = j->shadow.fd_slot = -1;
	for (uint32_t i = 0; i < n; i++) {
		struct segment *d = &j->shadow.segs[i];
		d->base_offset = l->segs[first + i].base_offset;
		d->size = l->segs[first + i].size;
		d->fd_read = d->fd_direct = -1;
		j->result[i].fd_read = j->result[i].fd_direct = -1;
		j->result[i].base_offset = -1;
		assert(i == 0 || d->base_offset >= d[-1].base_offset);
	}
	j->shadow.seg_n = n;
}

struct sluice_plog_clean_job *sluice_plog_clean_prepare(struct sluice_plog *l, int64_t now_ms,
							 const struct sluice_plog_clean_policy *pol)
{
	if (l->failed || l->seg_n < 2)
		return NULL;
	int64_t total, dirty;
	bool overdue; /* dirty data older than max.compaction.lag.ms */
	uint32_t eligible = clean_eligible(l, now_ms, pol, &total, &dirty, &overdue);
	if (eligible == 0)
		return NULL;
	/* A pass is due when the previous one changed something or stopped at
	 * its byte limit, or a kept tombstone expires; otherwise only when
	 * segments closed or went since, and the part not cleaned yet is at
	 * least min.cleanable.dirty.ratio of the eligible log (as in Kafka). */
	bool due = now_ms >= l->compact_due_ms || l->compact_next_base != 0;
	if (!due && (closed_signature(l) == l->compact_sig ||
		     ((double)dirty < pol->min_dirty_ratio * (double)total && !overdue)))
		return NULL;
	uint32_t first;
	uint32_t n = clean_pick(l, eligible, pol->budget_bytes, &first);
	struct sluice_plog_clean_job *j = clean_job_new(n);
	if (!j)
		return NULL;
	clean_plan_groups(l, j, first, n);
	clean_shadow_fill(l, j, first, n);
	j->now_ms = now_ms;
	j->delete_retention_ms = pol->delete_retention_ms;
	j->tombstone_due_ms = INT64_MAX;
	j->next_base = first + n < eligible ? l->segs[first + n].base_offset : 0;
	j->end_base = l->segs[first + n].base_offset; /* the first segment after the pass */
	assert(j->end_base > j->shadow.segs[n - 1].base_offset);
	return j;
}

/* Clean group g's segments, in order, into one file named by the first
 * ("<base>.log.cleaned", synced), with its indexes beside it. A lone
 * segment that loses nothing is left alone. */
static void clean_group(struct sluice_plog_clean_job *j, struct keymap *map, uint32_t g)
{
	struct sluice_plog *sh = &j->shadow;
	uint32_t i0 = j->group_start[g], i1 = j->group_start[g + 1];
	assert(g < j->ngroups && i0 < i1 && i1 <= sh->seg_n);
	int64_t base = sh->segs[i0].base_offset;
	char tmp[PATH_BYTES];
	seg_path(sh, base, ".log.cleaned", tmp);
	struct clean_ctx c = {.map = map, .now_ms = j->now_ms, .delete_retention_ms = j->delete_retention_ms, .job = j,
			      .tombstone_due_ms = INT64_MAX};
	kwr_init(&c.out, 4096, (size_t)INT32_MAX);
	/* The cleaned file is at most its input (clean_batch): with that much
	 * free, the pass cannot fill the disk. */
	int64_t in_bytes = 0;
	for (uint32_t i = i0; i < i1; i++)
		in_bytes += sh->segs[i].size;
	struct statvfs vfs;
	if (statvfs(sh->dir, &vfs) == 0 && (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize < in_bytes) {
		clean_fail(j, "%" PRId64 " bytes free, the segments at %020" PRId64 " need up to %" PRId64,
			   (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize, base, in_bytes);
		kwr_free(&c.out);
		return;
	}
	c.fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	bool ok = c.fd >= 0;
	if (!ok)
		clean_fail(j, "open %s: %s", tmp, strerror(errno));
	for (uint32_t i = i0; ok && i < i1; i++) {
		ok = seg_each_batch(sh, &sh->segs[i], clean_batch, &c) == 0 && !c.failed;
		if (!ok && !j->cancelled)
			clean_fail(j, "reading segment %020" PRId64 " failed", sh->segs[i].base_offset);
	}
	if (ok && fdatasync(c.fd) < 0) {
		clean_fail(j, "fdatasync %s: %s", tmp, strerror(errno));
		ok = false;
	}
	if (!ok) {
		j->failed = !j->cancelled || j->failed;
	} else if (c.removed > 0 || i1 - i0 > 1) {
		struct segment *r = &j->result[g];
		r->base_offset = base;
		r->max_ts = -1;
		assert(c.written <= in_bytes); /* clean_batch never grows a batch */
		if (seg_scan(sh, r, c.fd, false, -1, NULL) == c.written) {
			seg_write_indexes_as(sh, r, ".cleaned");
			j->removed[g] = c.removed;
			j->written[g] = true;
		} else {
			clean_fail(j, "%s does not read back as written", tmp);
		}
	}
	if (c.tombstone_due_ms < j->tombstone_due_ms)
		j->tombstone_due_ms = c.tombstone_due_ms;
	if (c.fd >= 0)
		close(c.fd);
	if (!j->written[g])
		unlink(tmp);
	kwr_free(&c.out);
	free(c.z);
}

static double clean_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static bool clean_cancelled(const struct sluice_plog_clean_job *j) { return j->cancelled; }

/* log.cleaner.io.max.bytes.per.second: sleep while ahead of the rate (in
 * steps of at most 100 ms, so a cancel is seen soon). */
static void clean_throttle(struct sluice_plog_clean_job *j, size_t bytes)
{
	j->io_bytes += (int64_t)bytes;
	if (j->io_bytes_per_sec <= 0)
		return;
	for (;;) {
		double ahead = j->io_start_s + (double)j->io_bytes / (double)j->io_bytes_per_sec - clean_now_s();
		if (ahead < 0.001 || j->cancelled)
			return;
		double step = ahead < 0.1 ? ahead : 0.1;
		struct timespec ts = {(time_t)step, (long)((step - (double)(time_t)step) * 1e9)};
		nanosleep(&ts, NULL);
	}
}

void sluice_plog_clean_set_io_limit(struct sluice_plog_clean_job *j, int64_t bytes_per_sec)
{
	j->io_bytes_per_sec = bytes_per_sec;
}

void sluice_plog_clean_run(struct sluice_plog_clean_job *j)
{
	struct sluice_plog *sh = &j->shadow;
	struct map_ctx m = {.job = j};
	assert(j->ngroups >= 1 && sh->seg_n >= 1 && !sh->pool);
	j->io_start_s = clean_now_s();
	for (uint32_t i = 0; i < sh->seg_n && !m.map.full && !j->cancelled; i++)
		if (seg_each_batch(sh, &sh->segs[i], map_batch, &m) < 0)
			clean_fail(j, "reading segment %020" PRId64 " failed: %s", sh->segs[i].base_offset, strerror(errno));
	struct keymap map = m.map;
	if (!map.full && !j->failed)
		for (uint32_t g = 0; g < j->ngroups && !j->failed && !j->cancelled; g++)
			clean_group(j, &map, g);
	for (uint32_t i = 0; i < sh->seg_n; i++) {
		if (sh->segs[i].fd_read >= 0)
			close(sh->segs[i].fd_read);
		sh->segs[i].fd_read = -1;
	}
	free(map.hash);
	free(map.offset);
}

void sluice_plog_clean_cancel(struct sluice_plog_clean_job *j) { j->cancelled = true; }

static void clean_unlink(struct sluice_plog_clean_job *j, uint32_t g)
{
	static const char *const exts[] = {".log.cleaned", ".index.cleaned", ".timeindex.cleaned"};
	char p[PATH_BYTES];
	for (size_t k = 0; k < 3; k++) {
		seg_path(&j->shadow, j->shadow.segs[j->group_start[g]].base_offset, exts[k], p);
		unlink(p);
	}
}

void sluice_plog_clean_discard(struct sluice_plog_clean_job *j)
{
	if (!j)
		return;
	for (uint32_t g = 0; g < j->ngroups; g++) {
		if (j->written && j->written[g])
			clean_unlink(j, g);
		if (j->result)
			seg_free(&j->result[g]);
	}
	free(j->shadow.segs);
	free(j->group_start);
	free(j->result);
	free(j->removed);
	free(j->written);
	free(j);
}

/* The swap of a cleaned group for its old segments, safe against a crash
 * at any step. A manifest "<first>.swap" naming every old segment is made
 * durable first (the cleaned files already are); then the old indexes and
 * the old segments after the first are removed, and the cleaned log is
 * renamed over the first, then its indexes, and the manifest goes.
 * sluice_plog_open finishes a swap it finds a manifest for (swap_apply is
 * idempotent) and removes any other *.cleaned file. */
static bool swap_manifest_write(const char *dir, const int64_t *bases, uint32_t n)
{
	char p[PATH_BYTES], tmp[PATH_BYTES + 8];
	assert(n >= 1 && n <= SWAP_GROUP_MAX);
	snprintf(p, sizeof p, "%.*s/%020" PRId64 ".swap", PATH_BYTES - 64, dir, bases[0]);
	snprintf(tmp, sizeof tmp, "%s.tmp", p);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return false;
	for (uint32_t i = 0; i < n; i++)
		fprintf(f, "%" PRId64 "\n", bases[i]);
	bool ok = fflush(f) == 0 && fdatasync(fileno(f)) == 0;
	ok = fclose(f) == 0 && ok && rename(tmp, p) == 0;
	int dfd = ok ? open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
	ok = ok && dfd >= 0 && fsync(dfd) == 0;
	if (dfd >= 0)
		close(dfd);
	if (!ok)
		unlink(tmp);
	return ok;
}

/* Whether the segment file at path holds a batch reaching offset (headers
 * walked until one does, or until they stop making sense). */
static bool file_reaches(const char *path, int64_t offset)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	uint8_t hdr[SLUICE_BATCH_HEADER_BYTES];
	bool reaches = false;
	for (int64_t pos = 0; fd >= 0 && !reaches && pread(fd, hdr, sizeof hdr, pos) == (ssize_t)sizeof hdr;) {
		struct hdr_view v = hdr_read(hdr);
		if (!v.ok)
			break;
		reaches = v.last >= offset;
		pos += v.len;
	}
	if (fd >= 0)
		close(fd);
	return reaches;
}

static void swap_apply(const char *dir, const int64_t *bases, uint32_t n)
{
	char p[PATH_BYTES], q[PATH_BYTES];
	assert(n >= 1 && n <= SWAP_GROUP_MAX);
	/* The old segments go only when their cleaned replacement is there:
	 * still "<first>.log.cleaned", or already renamed over the first
	 * (which then holds offsets past the second's base). A manifest whose
	 * cleaned file is gone deletes nothing. */
	snprintf(p, sizeof p, "%.*s/%020" PRId64 ".log.cleaned", PATH_BYTES - 64, dir, bases[0]);
	snprintf(q, sizeof q, "%.*s/%020" PRId64 ".log", PATH_BYTES - 64, dir, bases[0]);
	if (access(p, F_OK) != 0 && n > 1 && !file_reaches(q, bases[1])) {
		SLOG_WARN("storage", "%.*s: compaction swap manifest %020" PRId64 ".swap without its cleaned segment: "
			  "the old segments are kept", PATH_BYTES - 64, dir, bases[0]);
		snprintf(p, sizeof p, "%.*s/%020" PRId64 ".swap", PATH_BYTES - 64, dir, bases[0]);
		unlink(p);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		snprintf(p, sizeof p, "%.*s/%020" PRId64 ".index", PATH_BYTES - 64, dir, bases[i]);
		unlink(p);
		snprintf(p, sizeof p, "%.*s/%020" PRId64 ".timeindex", PATH_BYTES - 64, dir, bases[i]);
		unlink(p);
		if (i > 0) {
			snprintf(p, sizeof p, "%.*s/%020" PRId64 ".log", PATH_BYTES - 64, dir, bases[i]);
			unlink(p);
		}
	}
	static const char *const exts[] = {".log", ".index", ".timeindex"};
	for (size_t k = 0; k < 3; k++) {
		snprintf(p, sizeof p, "%.*s/%020" PRId64 "%s.cleaned", PATH_BYTES - 64, dir, bases[0], exts[k]);
		snprintf(q, sizeof q, "%.*s/%020" PRId64 "%s", PATH_BYTES - 64, dir, bases[0], exts[k]);
		if (rename(p, q) < 0 && k == 0)
			break; /* renamed already (a finished swap being redone): indexes rebuilt at open if missing */
	}
	snprintf(p, sizeof p, "%.*s/%020" PRId64 ".swap", PATH_BYTES - 64, dir, bases[0]);
	unlink(p);
}

/* At open: finish the swaps whose manifests survived a stop. */
static void swaps_recover(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t len = strlen(e->d_name);
		if (len != 25 || strcmp(e->d_name + 20, ".swap") != 0)
			continue;
		char p[PATH_BYTES];
		snprintf(p, sizeof p, "%.*s/%s", PATH_BYTES - 64, dir, e->d_name);
		FILE *f = fopen(p, "r");
		int64_t bases[SWAP_GROUP_MAX];
		uint32_t n = 0;
		long long v;
		while (f && n < SWAP_GROUP_MAX && fscanf(f, "%lld", &v) == 1)
			bases[n++] = v;
		if (f)
			fclose(f);
		if (n > 0 && bases[0] == strtoll(e->d_name, NULL, 10)) {
			SLOG_WARN("storage", "%s: finishing a compaction swap of %u segment(s) at %020" PRId64
					     " interrupted by a stop", dir, n, bases[0]);
			swap_apply(dir, bases, n);
		} else {
			unlink(p); /* unreadable: the swap never started (its old segments are all there) */
		}
	}
	closedir(d);
}

/* Swap group g in for l's segments [k, k + cnt). */
static bool clean_swap(struct sluice_plog *l, uint32_t k, uint32_t cnt, struct sluice_plog_clean_job *j, uint32_t g)
{
	int64_t bases[SWAP_GROUP_MAX];
	assert(cnt >= 1 && cnt <= SWAP_GROUP_MAX && k + cnt < l->seg_n);
	for (uint32_t i = 0; i < cnt; i++)
		bases[i] = l->segs[k + i].base_offset;
	if (!swap_manifest_write(l->dir, bases, cnt))
		return false;
	swap_apply(l->dir, bases, cnt);
	for (uint32_t i = 0; i < cnt; i++) {
		cache_forget(l, bases[i]);
		seg_free(&l->segs[k + i]); /* closes the old files' descriptors */
	}
	struct segment *r = &j->result[g];
	l->segs[k] = *r;
	l->segs[k].fd_read = l->segs[k].fd_direct = -1;
	memset(r, 0, sizeof *r);
	r->fd_read = r->fd_direct = -1;
	if (cnt > 1) {
		memmove(&l->segs[k + 1], &l->segs[k + cnt], (l->seg_n - k - cnt) * sizeof *l->segs);
		l->seg_n -= cnt - 1;
	}
	/* The cleaned segment takes the first one's place, in order. */
	assert(l->segs[k].base_offset == bases[0] && k + 1 < l->seg_n &&
	       l->segs[k].base_offset < l->segs[k + 1].base_offset);
	return true;
}

int64_t sluice_plog_clean_finish(struct sluice_plog *l, struct sluice_plog_clean_job *j)
{
	int64_t removed = 0;
	bool merged = false, refused = false;
	for (uint32_t g = 0; g < j->ngroups; g++) {
		if (!j->written[g])
			continue;
		/* Only segments still there, closed and unchanged, in order. */
		uint32_t i0 = j->group_start[g], cnt = j->group_start[g + 1] - i0, k = 0;
		assert(cnt >= 1 && cnt <= SWAP_GROUP_MAX);
		while (k < l->seg_n && l->segs[k].base_offset != j->shadow.segs[i0].base_offset)
			k++;
		bool same = k + cnt < l->seg_n && !l->failed && l->trunc_gen == j->shadow.trunc_gen;
		for (uint32_t i = 0; same && i < cnt; i++)
			same = l->segs[k + i].base_offset == j->shadow.segs[i0 + i].base_offset &&
			       l->segs[k + i].size == j->shadow.segs[i0 + i].size;
		if (!same || !clean_swap(l, k, cnt, j, g)) {
			refused = true;
			clean_unlink(j, g);
			j->written[g] = false;
			continue;
		}
		removed += j->removed[g];
		merged |= cnt > 1;
		j->written[g] = false;
	}
	check_offsets(l);
	l->compact_sig = closed_signature(l);
	/* A pass that changed segments goes again soon: shrunk neighbours may now
	 * merge (the passes converge: each merges or removes something, or ends).
	 * So does one refused because its segments changed meanwhile (retention,
	 * a truncation): the next is prepared from what is there now. */
	l->compact_due_ms = j->failed || removed > 0 || merged || refused ? 0 : j->tombstone_due_ms;
	l->compact_next_base = j->next_base;
	if (j->next_base == 0 && !j->failed)
		l->compact_clean_end = j->end_base; /* everything before it has been cleaned */
	bool failed = j->failed;
	if (failed)
		SLOG_WARN("storage", "%s: compaction pass failed: %s", l->dir, j->why[0] ? j->why : "reason unknown");
	sluice_plog_clean_discard(j);
	return failed && removed == 0 ? -1 : removed;
}

int64_t sluice_plog_compact(struct sluice_plog *l, int64_t now_ms, int64_t delete_retention_ms, int64_t budget_bytes)
{
	struct sluice_plog_clean_policy pol = {.delete_retention_ms = delete_retention_ms, .budget_bytes = budget_bytes};
	struct sluice_plog_clean_job *j = sluice_plog_clean_prepare(l, now_ms, &pol);
	if (!j)
		return 0;
	sluice_plog_clean_run(j);
	return sluice_plog_clean_finish(l, j);
}
