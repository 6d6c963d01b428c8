/* Extent pool and read cache of one storage core.
 *
 * Every partition-log byte held in memory lives in an extent: an aligned
 * buffer of a fixed size (1 MiB by default) mirroring one extent-aligned
 * range [k * size, (k + 1) * size) of a segment file. The tail of an active
 * segment is written from extents (one O_DIRECT write per extent touched by
 * a group commit); once written they stay behind as the read cache, beside
 * extents read cold from disk with O_DIRECT. Both share one memory budget:
 * when the pool needs a buffer and the budget is spent, the least recently
 * used cached extent nobody else holds is evicted and its buffer reused.
 *
 * Buffers within the budget are allocated on first need, kept for the life
 * of the pool, and registered with the core's io_uring (fixed buffers), so
 * writes and reads from them skip the per-I/O page pinning. Past the budget
 * (all buffers held by tails or I/O in flight) a buffer is allocated
 * unregistered and freed when released; the storage core then asks idle
 * partitions to let go of their tails.
 *
 * The pool also holds the ring's registered-file table, where the active
 * segments' write descriptors are installed.
 *
 * Threading: a pool belongs to one storage core; nothing here locks. */
#ifndef SLUICE_EXTENT_H
#define SLUICE_EXTENT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct io_uring;
struct sluice_pool;

#define SLUICE_POOL_REGISTERED_MAX 16384 /* io_uring's limit on fixed buffers */
#define SLUICE_POOL_FILES_MAX 4096       /* fixed-file slots (active segments being written) */

struct sluice_extent {
	uint8_t *buf;
	int32_t buf_index; /* fixed-buffer slot in the pool's ring, -1: not registered */
	int32_t slot;      /* index among the pool's budgeted buffers, -1: past the budget */
	/* Holders: a log's tail, each I/O in flight, the cache, each read
	 * result pinning it (sluice_plog_read_extents). Only an extent the
	 * cache alone holds (refs == 1) is ever evicted and its buffer reused. */
	int32_t refs;
	/* Identity and validity while cached (or as a tail): file bytes
	 * [lo, hi) of segment seg_base of owner are valid in
	 * buf[lo - file_off ...]. */
	const void *owner;
	int64_t seg_base;
	int64_t file_off;
	int64_t lo, hi;
	bool cached;
	bool verified; /* every byte came from appends (CRC-checked batches), none from disk */
	struct sluice_extent *hnext, *lru_prev, *lru_next;
	struct sluice_pool *pool;
};

struct sluice_pool_stats {
	uint64_t hits, misses, evictions, unbudgeted; /* unbudgeted: buffers allocated past the budget */
	uint64_t readahead;                           /* extents read ahead of a reader */
	size_t bytes_budget, bytes_allocated, bytes_cached;
	uint32_t registered;  /* buffers registered with the ring */
	uint32_t files_in_use; /* registered-file slots holding a descriptor */
};

/* extent_bytes: a multiple of 4096; budget_bytes: memory kept in buffers
 * (at least one extent); ring: register buffers with it, or NULL. */
struct sluice_pool *sluice_pool_new(size_t extent_bytes, size_t budget_bytes, struct io_uring *ring);
/* Every extent must have been released (cached ones are dropped here). */
void sluice_pool_destroy(struct sluice_pool *p);
size_t sluice_pool_extent_bytes(const struct sluice_pool *p);
/* A buffer with one reference, not cached, identity cleared; NULL only when
 * memory is exhausted. */
struct sluice_extent *sluice_pool_get(struct sluice_pool *p);
void sluice_extent_ref(struct sluice_extent *e);
void sluice_extent_put(struct sluice_extent *e);
/* Bytes held past the budget, and evicting unreferenced cached extents to
 * get back within it. */
bool sluice_pool_over_budget(const struct sluice_pool *p);
void sluice_pool_trim(struct sluice_pool *p);
void sluice_pool_get_stats(const struct sluice_pool *p, struct sluice_pool_stats *out);

/* The cached extent of (owner, seg_base) starting at file_off, made most
 * recently used; NULL on a miss. No reference is added: use it before
 * anything else can touch the pool. */
struct sluice_extent *sluice_cache_lookup(struct sluice_pool *p, const void *owner, int64_t seg_base,
					  int64_t file_off);
/* Cache e (its owner/seg_base/file_off/lo/hi set by the caller), taking a
 * reference; an extent already cached under that key is dropped first. */
void sluice_cache_insert(struct sluice_pool *p, struct sluice_extent *e);
/* Drop the cached extents of one segment (seg_base >= 0) or of every
 * segment of owner (seg_base < 0): the file changed or went away. */
void sluice_cache_forget(struct sluice_pool *p, const void *owner, int64_t seg_base);
/* The ring the pool was made for (reads ahead go there), or NULL. */
struct io_uring *sluice_pool_ring(const struct sluice_pool *p);
void sluice_pool_count_readahead(struct sluice_pool *p);
/* Count a hit or a miss seen by the caller (for the stats). */
void sluice_pool_count(struct sluice_pool *p, bool hit);

/* Registered files: the pool also keeps the ring's fixed-file table, so the
 * descriptors the logs write through are looked up once, not per I/O.
 * Returns the slot fd was installed in, or -1 (none free, no ring, or
 * refused: the caller then uses fd itself). Release only with no I/O on
 * the slot in flight. */
int sluice_pool_file_register(struct sluice_pool *p, int fd);
void sluice_pool_file_unregister(struct sluice_pool *p, int slot);

#endif
