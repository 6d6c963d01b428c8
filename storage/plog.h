/* A partition log: Kafka's on-disk layout (<base offset>.log, .index,
 * .timeindex in the partition directory), appended through io_uring with
 * O_DIRECT from aligned in-memory extents (storage/extent.h). The extents
 * holding the active segment's tail are written from and, once written,
 * stay behind in the storage core's extent cache, which also takes cold
 * reads (O_DIRECT) so fetches of recent or re-read data come from memory.
 *
 * Threading: a plog belongs to exactly one storage core and is touched only
 * by it. Appends copy validated batches into the tail extents and assign
 * offsets; data becomes readable (the log's written end advances) once the
 * write that carries it has completed. What consumers may see, the high
 * watermark, is not the log's business: the partition above it
 * (dataplane/partition.h) keeps it, at or below the written end, and reads
 * through sluice_plog_read_below. One group commit per
 * partition is in flight at a time, covering everything appended since the
 * previous one (one SQE per extent it touches, so large commits reach the
 * device in parallel); the partial tail block is rewritten by the next. */
#ifndef SLUICE_PLOG_H
#define SLUICE_PLOG_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct io_uring;
struct sluice_pool;

#define SLUICE_PLOG_BLOCK 4096
/* SQEs one group commit may take (one per extent written, more become one
 * vectored write), plus one for its fdatasync: the caller keeps this much
 * room in the ring. */
#define SLUICE_PLOG_WRITE_SQES_MAX 8
#define SLUICE_PLOG_SEGMENTS_MAX 65536
#define SLUICE_PLOG_CHUNK_BYTES_DEFAULT (1u << 20)
/* The largest offset a log assigns: room is left so that a batch's last
 * offset (base + a 32-bit LastOffsetDelta) and the next offset never
 * overflow. An append past it fails with -ERANGE. */
#define SLUICE_PLOG_OFFSET_MAX (INT64_MAX - INT32_MAX - 1)

struct sluice_plog_cfg {
	int64_t segment_bytes;
	int32_t index_interval_bytes;
	int64_t flush_interval_messages; /* fdatasync once this many messages are unflushed */
	size_t chunk_bytes;              /* extent size when the log has no pool of its own */
	struct sluice_pool *pool;        /* the storage core's extent pool and cache, or NULL */
	bool direct_io;                  /* false only where O_DIRECT is refused */
	int64_t segment_ms;              /* roll once a segment spans this much time; <= 0 never */
	bool preallocate;                /* fallocate segment_bytes for each new segment */
};

struct sluice_plog;

/* Hooks to the owning storage core. wait_write blocks until this log's
 * in-flight write (if any) has completed, reaping other completions normally.
 * written is called whenever the written end advances (or the log fails). */
struct sluice_plog_hooks {
	void (*wait_write)(struct sluice_plog *l, void *arg);
	void (*written)(struct sluice_plog *l, void *arg);
	void *arg;
	/* A cold read this log submitted (a load or a read ahead) completed,
	 * well or not: a read that answered SLUICE_PLOG_READ_WOULD_BLOCK is
	 * due again. Optional (NULL: the caller polls). */
	void (*loaded)(struct sluice_plog *l, void *arg);
	/* The log is about to roll: once the new segment exists, the oldest
	 * of the newest two segments (what a restart rescans for state kept
	 * beside the log, such as the leader-epoch cache) is older than the
	 * window. Called before the roll touches anything, on the thread that
	 * appends; it must not call into the log. Optional. */
	void (*rolling)(struct sluice_plog *l, void *arg);
};

struct sluice_plog_recovery {
	int64_t batches_scanned;
	int64_t bytes_truncated;  /* cut off the end of the last segment */
	int32_t segments_deleted; /* always 0: recovery deletes no segment */
	int32_t segments_damaged; /* kept with bytes that are not batches (see below) */
	bool crc_checked;
};

/* What sluice_plog_open returns when it fails (err says what was found,
 * errno why). UNUSABLE: this partition's files cannot be used as they are
 * (unreadable, not a file, segments that contradict their names or each
 * other, or the process is out of descriptors or memory: errno EMFILE,
 * ENFILE, ENOMEM); nothing on disk was changed for it, and only this
 * partition should go offline. IO: creating or writing the directory's
 * files failed, which is the directory's trouble. */
#define SLUICE_PLOG_OPEN_UNUSABLE (-1)
#define SLUICE_PLOG_OPEN_IO (-2)

/* Open (creating if absent) the log in dir. clean says whether the previous
 * run shut down cleanly; otherwise every segment from the recovery point on
 * is scanned, CRCs verified. Recovery deletes nothing and cuts only a torn
 * end off the last segment: damage anywhere else is kept, logged and
 * answered with -3 by sluice_plog_read (see docs/on-disk-format.md). */
int sluice_plog_open(const char *dir, const struct sluice_plog_cfg *cfg, bool clean,
		     const struct sluice_plog_hooks *hooks, struct sluice_plog **out,
		     struct sluice_plog_recovery *rec, char *err, size_t errlen);
/* Write everything out, truncate the active segment to its length, write the
 * indexes and the recovery point, fsync, free. */
void sluice_plog_close(struct sluice_plog *l);
/* The same without its fdatasyncs, for a caller that syncs the whole
 * filesystem after closing many logs (shutdown: one syncfs instead of two
 * fdatasyncs per partition, which took a minute for 20,000 partitions). */
void sluice_plog_close_nosync(struct sluice_plog *l);
/* The file work of a nosync close (write what is pending, cut the file to
 * its length, write the indexes), touching nothing but the log itself: with
 * nothing in flight, several threads may run it on distinct logs at once
 * (shutdown, as Kafka closes logs on a thread pool). The hooks are cleared;
 * close then only frees. Returns 0, or -1 (close tries again). */
int sluice_plog_close_io(struct sluice_plog *l);

/* Append already-validated batches (one or more, contiguous). Offsets are
 * assigned by rewriting each batch's BaseOffset in the log's copy. With
 * log_append_time >= 0 (message.timestamp.type=LogAppendTime) each batch is
 * also marked LogAppendTime with that MaxTimestamp, its CRC recomputed, as
 * Kafka does. A new segment is rolled before a batch that would take the
 * active one past segment.bytes or segment.ms, or whose last offset would
 * lie more than INT32_MAX past the segment's base offset (Kafka's 32-bit
 * relative offsets in the index). Returns 0 or a negative errno (the log is
 * then failed, except for -ERANGE: offsets exhausted). */
int sluice_plog_append(struct sluice_plog *l, const uint8_t *data, size_t len, int32_t leader_epoch,
		       int64_t log_append_time, int64_t *base_offset, int64_t *last_offset);

/* A follower's append: the leader's batches copied as they are (BaseOffset,
 * PartitionLeaderEpoch, every byte and so the CRC unchanged), as Kafka's
 * replica appends without assigning offsets. The caller has checked each
 * batch (sluice_batch_check_crc at least). Offsets must increase: the first
 * batch's BaseOffset at or past the log end, each next one past the previous
 * one's last offset. A BaseOffset past the log end leaves a gap, as a
 * compacted leader's log has (the log end moves to it first; a segment a
 * batch rolls is named by that batch's BaseOffset). Segments roll as for
 * sluice_plog_append. *last_offset: the last batch's last offset. Returns 0;
 * -EINVAL when the offsets do not follow (nothing appended, the log is
 * fine); -ERANGE past SLUICE_PLOG_OFFSET_MAX (nothing appended); another
 * negative errno as sluice_plog_append (the log failed). */
int sluice_plog_append_verbatim(struct sluice_plog *l, const uint8_t *data, size_t len, int64_t *last_offset);

/* Kafka's Log.truncateTo, for a follower whose log diverged from its
 * leader's: remove every batch whose last offset is at or past offset. A
 * batch holding offset is removed whole (the cut is at its start), so the
 * new log end is the next offset after the last batch kept (the segment's
 * base offset when it keeps none), which may lie below offset when a batch
 * spans it or when offset lies in a gap; read it with sluice_plog_log_end.
 * The written end becomes the log end (the bytes kept are written and
 * synced before this returns); the log start offset moves down to the new
 * end if it lay above it (persisted). Segments named above offset are
 * deleted; the one holding offset becomes the active segment, its file cut
 * at the batch boundary (its preallocated space given back or, with
 * log.preallocate, made again), its indexes trimmed.
 *
 * offset must be at least the log start offset (else -EINVAL, nothing
 * changed); at or past the log end nothing is removed (returns 0, as Kafka).
 * Any write in flight is waited for (the wait_write hook) and data appended
 * but not yet written is written out first. The written hook is NOT called:
 * the caller moves what sits above the log (high watermark at most the new
 * end, epoch cache, producer state, appends waiting beyond the end).
 *
 * Crash safety: a marker file (sluice-truncate: the new end, the segment cut
 * and the byte position) is made durable before anything is removed, and
 * removed (durably) only once the cut segment is synced and the later ones
 * are gone; sluice_plog_open finishes a truncation whose marker it finds
 * before recovering, so truncated batches never come back, and lowers the
 * recovery point to the new end (recovery never mistakes the cut for lost
 * data). Returns 0, or a negative errno with err filled: -EINVAL (offset
 * below the log start), -EIO before the marker was written (nothing
 * changed, the log still works: a read of the segment failed or the marker
 * could not be written), or -EIO after it (the log is failed; the next open
 * finishes the truncation). */
int sluice_plog_truncate_to(struct sluice_plog *l, int64_t offset, char *err, size_t errlen);
/* Kafka's Log.truncateFullyAndStartAt: every segment removed, the log
 * restarted empty at offset (log start = log end = written end = offset):
 * a follower whose log end lies below its leader's log start offset. Same
 * waits, marker and errors as sluice_plog_truncate_to; offset in
 * [0, SLUICE_PLOG_OFFSET_MAX]. */
int sluice_plog_truncate_fully(struct sluice_plog *l, int64_t offset, char *err, size_t errlen);

bool sluice_plog_write_pending(const struct sluice_plog *l);
bool sluice_plog_write_inflight(const struct sluice_plog *l);
/* Queue the group-commit write (and fsync where the flush policy asks) on
 * ring. user_data, for every SQE a log submits: the plog pointer (8-byte
 * aligned) with the low 3 bits the kind: 1 write, 2 fsync, 3 read ahead,
 * 4 + i cold-read load slot i (i < SLUICE_PLOG_LOADS_MAX, see
 * sluice_plog_read_extents). */
int sluice_plog_submit_write(struct sluice_plog *l, struct io_uring *ring);
/* A completion for this log; kind is the user_data low bits. */
void sluice_plog_complete(struct sluice_plog *l, int kind, int res);
/* fdatasync now (used by the flush.ms timer and at shutdown). */
int sluice_plog_sync(struct sluice_plog *l);

/* The next offset after the data whose write has completed here (the
 * "log end written"): what a single node may serve. Never above log_end. */
int64_t sluice_plog_written_end(const struct sluice_plog *l);
int64_t sluice_plog_log_start(const struct sluice_plog *l);
/* The next offset to assign (Kafka's log end offset). */
int64_t sluice_plog_log_end(const struct sluice_plog *l);
bool sluice_plog_failed(const struct sluice_plog *l);
int64_t sluice_plog_size_bytes(const struct sluice_plog *l);

/* Copy whole written batches starting with the one holding offset into a
 * buffer allocated here (caller frees): at most max_bytes, except that the
 * first batch is returned whole when min_one. Returns bytes (0: nothing yet),
 * -1 for an offset out of range, -2 for an I/O error, -3 when the batch at
 * offset fails its CRC or the offset lies in bytes that are not batches
 * (damage recovery kept; Kafka's CORRUPT_MESSAGE) (batches read from disk are CRC-checked before they
 * are served; bytes still in the extents they were appended to, whose CRCs
 * the producer's validation checked, are not checked twice). */
int32_t sluice_plog_read(struct sluice_plog *l, int64_t offset, int32_t max_bytes, bool min_one,
			 uint8_t **out);
/* The same, serving no batch whose base offset is at or past end (at most
 * the written end): a consumer reads below the high watermark only. An
 * offset in [end, log end] answers 0 (nothing yet), as at the written end. */
int32_t sluice_plog_read_below(struct sluice_plog *l, int64_t offset, int64_t end, int32_t max_bytes, bool min_one,
			       uint8_t **out);
/* Descriptors this log holds open, and giving them back while it is idle
 * (nothing in flight or pending; a later fdatasync covers the file). Both are
 * reopened on demand. Returns the number closed. */
int sluice_plog_open_fds(const struct sluice_plog *l);
int sluice_plog_release_fds(struct sluice_plog *l);

/* Memory held by the tail extents, and handing them to the cache (where the
 * pool may evict them) while the log is idle; the next append takes the
 * partial tail block back from the cache, or from disk. */
size_t sluice_plog_cache_bytes(const struct sluice_plog *l);
size_t sluice_plog_release_cache(struct sluice_plog *l);

/* Give back the active segment's space preallocated past its written
 * blocks once nothing was appended for idle_ms (not with log.preallocate,
 * which keeps Kafka's whole-segment file). Returns the bytes given back. */
int64_t sluice_plog_trim_prealloc(struct sluice_plog *l, int64_t now_ms, int64_t idle_ms);

/* Topic overrides (segment.bytes, flush.messages, segment.ms); <= 0 keeps the current. */
void sluice_plog_set_limits(struct sluice_plog *l, int64_t segment_bytes, int64_t flush_messages, int64_t segment_ms);
/* Retention: delete the oldest segments while the oldest one's newest
 * record is older than retention_ms (< 0: no limit), or while the log
 * without it still holds retention_bytes (< 0: no limit). An expired active
 * segment is rolled first so it can go too. Files are renamed to
 * ".deleted" and then removed. Returns the number of segments deleted. */
int sluice_plog_enforce_retention(struct sluice_plog *l, int64_t now_ms, int64_t retention_ms, int64_t retention_bytes);
/* Log compaction (cleanup.policy=compact): over closed segments, keep only
 * the newest record of each key; tombstones (null values) are kept until
 * they are delete_retention_ms old, then removed too. Rewritten batches keep
 * their header (offsets, LastOffsetDelta, timestamps, producer fields) and
 * their codec, as Kafka's cleaner does; one whose rebuild would not be
 * smaller is kept whole, so cleaned files never outgrow their input.
 *
 * A pass is a job in three steps, so the work can run on a cleaner thread:
 * prepare (owning core) snapshots the closed segments from where the last
 * pass stopped, as many as budget_bytes allows (at least one), or returns
 * NULL when nothing closed, was deleted or left tombstones waiting since the
 * last pass; run (any thread, touching nothing of the log) cleans runs of
 * neighbouring segments (at most segment.bytes together) into one file each,
 * "<first base>.log.cleaned" (synced), with its indexes; finish (owning
 * core) swaps in those whose segments are all still there unchanged, under
 * a "<first base>.swap" manifest that open uses to finish a swap a stop
 * interrupted, and frees the job. cancel makes a running job stop early;
 * discard frees an unfinished one and removes its files. */
struct sluice_plog_clean_job;
struct sluice_plog_clean_policy {
	int64_t delete_retention_ms; /* tombstones are kept this long */
	int64_t budget_bytes;        /* closed-segment bytes one pass reads (at least one segment) */
	int64_t min_lag_ms;          /* min.compaction.lag.ms: segments with newer records wait */
	int64_t max_lag_ms;          /* max.compaction.lag.ms: a pass is due once dirty data is this old; <= 0 none */
	double min_dirty_ratio;      /* min.cleanable.dirty.ratio: share of the log not yet cleaned */
};
struct sluice_plog_clean_job *sluice_plog_clean_prepare(struct sluice_plog *l, int64_t now_ms,
							 const struct sluice_plog_clean_policy *pol);
void sluice_plog_clean_run(struct sluice_plog_clean_job *j);
/* Bytes per second a job may read and write (log.cleaner.io.max.bytes.per.second). */
void sluice_plog_clean_set_io_limit(struct sluice_plog_clean_job *j, int64_t bytes_per_sec);
void sluice_plog_clean_cancel(struct sluice_plog_clean_job *j);
/* Returns bytes removed, or -1 when the pass failed and removed nothing. */
int64_t sluice_plog_clean_finish(struct sluice_plog *l, struct sluice_plog_clean_job *j);
void sluice_plog_clean_discard(struct sluice_plog_clean_job *j);
/* All three steps at once. */
int64_t sluice_plog_compact(struct sluice_plog *l, int64_t now_ms, int64_t delete_retention_ms, int64_t budget_bytes);

/* fdatasync when data has waited unflushed for at least interval_ms. */
int sluice_plog_sync_if_due(struct sluice_plog *l, int64_t now_ms, int64_t interval_ms);
/* Move the log start offset up to offset (-1: the written end), removing
 * segments that lie wholly below it. Returns the new log start offset, or -1
 * when offset is beyond the written end (a caller that serves a high
 * watermark below it checks against that first). Persisted in the partition
 * directory (sluice-log-start-offset). */
int64_t sluice_plog_delete_records(struct sluice_plog *l, int64_t offset);

/* Call visit for the header of every batch in the last nsegs segments, in
 * offset order (used to rebuild idempotent-producer state after a restart). */
struct sluice_batch;
int sluice_plog_visit_tail(struct sluice_plog *l, uint32_t nsegs,
			   void (*visit)(const struct sluice_batch *b, void *arg), void *arg);
/* First offset whose record timestamp >= ts; -1 when none. The search
 * starts at the time index entry before ts; a LogAppendTime batch is
 * answered from its header; the last compressed batch searched is kept
 * decompressed (up to 4 MiB) for the next lookup. The _work form adds to
 * *work the bytes it read, decompressed or scanned, so a caller can bound
 * lookups per loop turn. */
int64_t sluice_plog_offset_for_time(struct sluice_plog *l, int64_t ts, int64_t *found_ts);
int64_t sluice_plog_offset_for_time_work(struct sluice_plog *l, int64_t ts, int64_t *found_ts, int64_t *work);

/* Zero-copy reads: the same batches sluice_plog_read would copy out
 * (whole committed batches from the one holding offset, at most max_bytes
 * unless min_one and the first is larger; batches from disk CRC-checked and
 * offset-checked before they are served; none whose base offset is at or
 * past end, the high watermark a consumer may see, at most the log's
 * written end: an offset in [end, log end] answers 0), answered as references into the
 * storage core's extents: ranges (extent, offset in its buffer, length) in
 * file order, consecutive bytes of one segment, one range per extent (a
 * batch spanning two extents lies in two ranges), each extent pinned by one
 * reference until sluice_read_result_release. A pinned extent is never
 * evicted or reused, and the bytes a range names never change (committed
 * bytes are final; an invalidated extent only leaves the cache).
 *
 * Cold data: with ring, every extent of the read that is neither in the
 * tail nor cached is read there (O_DIRECT into a pool buffer, user_data
 * kind 4 + load slot) and SLUICE_PLOG_READ_WOULD_BLOCK returned with
 * nothing pinned; sluice_plog_complete caches the extent and calls the
 * loaded hook, and the caller reads again. A load that failed answers the
 * next read needing that extent with -2 once. At most SLUICE_PLOG_LOADS_MAX
 * loads per log are in flight; a read needing more submits what fits and
 * answers WOULD_BLOCK again on the retry, so it converges. A load leaves the
 * ring room for a group commit (submitting what is queued when it must);
 * only when the kernel takes nothing is it done synchronously. Without ring
 * the loads are synchronous preads (tests and callers off the core's loop;
 * compaction, recovery and time lookups keep their own synchronous reads).
 *
 * Returns the bytes referenced (0: nothing yet), -1, -2, -3 as
 * sluice_plog_read, WOULD_BLOCK, or TOO_MANY_EXTENTS when the first batch
 * alone spans more than SLUICE_READ_RANGES_MAX extents (read it with
 * sluice_plog_read, which copies). A read needing more ranges than that
 * otherwise stops at the last whole batch that fits. Every result must be
 * released before the log closes. */
#define SLUICE_PLOG_READ_WOULD_BLOCK (-4)
#define SLUICE_PLOG_READ_TOO_MANY_EXTENTS (-5)
#define SLUICE_PLOG_LOADS_MAX 4 /* user_data kinds 4..7 */
#define SLUICE_READ_RANGES_MAX 64
/* fetch.max.bytes' default (common/config.c), read at the default extent
 * size, never needs the fallback: */
#define SLUICE_PLOG_FETCH_BYTES_DEFAULT (55u << 20)
_Static_assert(SLUICE_READ_RANGES_MAX >= SLUICE_PLOG_FETCH_BYTES_DEFAULT / SLUICE_PLOG_CHUNK_BYTES_DEFAULT + 2,
	       "a default fetch at the default extent size fits one result");
_Static_assert(3 + SLUICE_PLOG_LOADS_MAX <= 7, "load kinds fit the 3 low bits of user_data");

struct sluice_extent;
struct sluice_read_range {
	struct sluice_extent *ext; /* pinned: one reference held by this range */
	uint32_t off;              /* where the bytes start in ext->buf */
	uint32_t len;
};
struct sluice_read_result {
	uint32_t n;    /* ranges */
	int32_t bytes; /* their total */
	struct sluice_read_range range[SLUICE_READ_RANGES_MAX];
};
int32_t sluice_plog_read_extents(struct sluice_plog *l, int64_t offset, int64_t end, int32_t max_bytes, bool min_one,
				 struct io_uring *ring, struct sluice_read_result *out);
/* Unpin every range (the result is then empty); a no-op on an empty one. */
void sluice_read_result_release(struct sluice_read_result *r);

#endif
