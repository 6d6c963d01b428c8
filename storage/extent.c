/* Extent pool and read cache of one storage core: fixed-size aligned
 * buffers within a memory budget, registered with the core's io_uring, and
 * an LRU index of the segment extents they hold (see extent.h). */
#include "storage/extent.h"
#include "common/log.h"
#include <assert.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>

#define POOL_BUCKETS_MIN 64u
#define POOL_BUCKETS_MAX (1u << 20)
#define POOL_SLOTS_MAX (1u << 24) /* budgeted buffers, whatever the budget */
_Static_assert((POOL_BUCKETS_MIN & (POOL_BUCKETS_MIN - 1)) == 0 && (POOL_BUCKETS_MAX & (POOL_BUCKETS_MAX - 1)) == 0 &&
		       POOL_BUCKETS_MIN <= POOL_BUCKETS_MAX,
	       "bucket counts are powers of two: the key is masked");
_Static_assert(POOL_SLOTS_MAX <= INT32_MAX && SLUICE_POOL_REGISTERED_MAX <= POOL_SLOTS_MAX,
	       "a slot index fits an extent's int32_t slot, and registered buffers are budgeted slots");
_Static_assert(SLUICE_POOL_FILES_MAX <= INT32_MAX, "a fixed-file slot fits the int32_t free list");

struct sluice_pool {
	size_t extent_bytes;
	uint32_t slots_max;  /* budgeted buffers */
	uint32_t slots_n;    /* allocated so far */
	struct sluice_extent **slots;
	struct sluice_extent **free_stack;
	uint32_t free_n;
	struct io_uring *ring;   /* set when something was registered with it */
	struct io_uring *uring;  /* the ring given, registered or not */
	uint32_t registered_max; /* slots below this are registered fixed buffers */
	struct sluice_extent **buckets;
	uint32_t bucket_mask;
	struct sluice_extent *lru_head, *lru_tail; /* head: most recently used */
	uint32_t unbudgeted_live;
	struct sluice_pool_stats stats;
	int32_t *file_free; /* free fixed-file slots */
	uint32_t file_free_n, files_max;
	bool files_registered;
};

struct sluice_pool *sluice_pool_new(size_t extent_bytes, size_t budget_bytes, struct io_uring *ring)
{
	assert(extent_bytes >= 4096 && extent_bytes % 4096 == 0);
	struct sluice_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->extent_bytes = extent_bytes;
	size_t n = budget_bytes / extent_bytes;
	p->slots_max = n < 1 ? 1 : n > POOL_SLOTS_MAX ? POOL_SLOTS_MAX : (uint32_t)n;
	uint32_t buckets = POOL_BUCKETS_MIN;
	while (buckets < 2 * p->slots_max && buckets < POOL_BUCKETS_MAX)
		buckets <<= 1;
	p->bucket_mask = buckets - 1;
	p->slots = calloc(p->slots_max, sizeof *p->slots);
	p->free_stack = calloc(p->slots_max, sizeof *p->free_stack);
	p->buckets = calloc(buckets, sizeof *p->buckets);
	if (!p->slots || !p->free_stack || !p->buckets) {
		sluice_pool_destroy(p);
		return NULL;
	}
	p->stats.bytes_budget = (size_t)p->slots_max * extent_bytes;
	p->uring = ring;
	if (ring) {
		uint32_t nreg = p->slots_max < SLUICE_POOL_REGISTERED_MAX ? p->slots_max : SLUICE_POOL_REGISTERED_MAX;
		int rc = io_uring_register_buffers_sparse(ring, nreg);
		if (rc == 0) {
			p->ring = ring;
			p->registered_max = nreg;
		} else {
			SLOG_WARN("storage", "io_uring fixed buffers unavailable (%s); writes pin pages per I/O",
				  strerror(-rc));
		}
		/* The kernel caps the table at the descriptor limit. */
		struct rlimit rl;
		uint32_t nfiles = SLUICE_POOL_FILES_MAX;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < nfiles)
			nfiles = (uint32_t)rl.rlim_cur;
		p->file_free = malloc(nfiles * sizeof *p->file_free);
		if (p->file_free && nfiles && io_uring_register_files_sparse(ring, nfiles) == 0) {
			p->ring = ring;
			p->files_registered = true;
			p->files_max = nfiles;
			for (uint32_t i = 0; i < nfiles; i++)
				p->file_free[i] = (int32_t)(nfiles - 1 - i);
			p->file_free_n = nfiles;
		}
	}
	assert(p->slots_max >= 1 && p->slots_max <= POOL_SLOTS_MAX && (p->bucket_mask & (p->bucket_mask + 1)) == 0);
	assert(p->registered_max <= p->slots_max && p->file_free_n <= p->files_max);
	return p;
}

static void extent_free(struct sluice_extent *e)
{
	free(e->buf);
	free(e);
}

void sluice_pool_destroy(struct sluice_pool *p)
{
	if (!p)
		return;
	if (p->buckets)
		sluice_cache_forget(p, NULL, -1);
	assert(!p->lru_head && p->stats.bytes_cached == 0 && p->free_n <= p->slots_n);
	if (p->ring && p->registered_max)
		(void)io_uring_unregister_buffers(p->ring);
	if (p->ring && p->files_registered)
		(void)io_uring_unregister_files(p->ring);
	free(p->file_free);
	for (uint32_t i = 0; p->slots && i < p->slots_n; i++) {
		assert(p->slots[i]->refs == 0); /* every holder has let go */
		extent_free(p->slots[i]);
	}
	free(p->slots);
	free(p->free_stack);
	free(p->buckets);
	free(p);
}

size_t sluice_pool_extent_bytes(const struct sluice_pool *p) { return p->extent_bytes; }

static uint32_t key_bucket(const struct sluice_pool *p, const void *owner, int64_t seg_base, int64_t file_off)
{
	uint64_t h = (uint64_t)(uintptr_t)owner * 0x9E3779B97F4A7C15ull;
	h ^= (uint64_t)seg_base * 0xC2B2AE3D27D4EB4Full;
	h ^= (uint64_t)file_off * 0x165667B19E3779F9ull;
	h ^= h >> 29;
	return (uint32_t)h & p->bucket_mask;
}

static void lru_unlink(struct sluice_pool *p, struct sluice_extent *e)
{
	assert(e->lru_prev || p->lru_head == e);
	assert(e->lru_next || p->lru_tail == e);
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		p->lru_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		p->lru_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void lru_push_head(struct sluice_pool *p, struct sluice_extent *e)
{
	assert(!e->lru_prev && !e->lru_next && p->lru_head != e);
	e->lru_prev = NULL;
	e->lru_next = p->lru_head;
	if (p->lru_head)
		p->lru_head->lru_prev = e;
	else
		p->lru_tail = e;
	p->lru_head = e;
	assert(p->lru_tail && !p->lru_tail->lru_next);
}

/* Take e out of the index and the LRU list and drop the cache's reference. */
static void cache_remove(struct sluice_pool *p, struct sluice_extent *e)
{
	assert(e->cached && e->refs >= 1 && p->stats.bytes_cached >= p->extent_bytes);
	struct sluice_extent **pp = &p->buckets[key_bucket(p, e->owner, e->seg_base, e->file_off)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	e->hnext = NULL;
	lru_unlink(p, e);
	e->cached = false;
	p->stats.bytes_cached -= p->extent_bytes;
	sluice_extent_put(e);
}

static struct sluice_extent *slot_alloc(struct sluice_pool *p)
{
	struct sluice_extent *e = calloc(1, sizeof *e);
	if (!e)
		return NULL;
	if (posix_memalign((void **)&e->buf, 4096, p->extent_bytes) != 0) {
		free(e);
		return NULL;
	}
	e->pool = p;
	e->buf_index = -1;
	e->slot = -1;
	if (p->slots_n < p->slots_max) {
		e->slot = (int32_t)p->slots_n;
		p->slots[p->slots_n++] = e;
		p->stats.bytes_allocated += p->extent_bytes;
		if ((uint32_t)e->slot < p->registered_max) {
			struct iovec iov = {e->buf, p->extent_bytes};
			if (io_uring_register_buffers_update_tag(p->ring, (unsigned)e->slot, &iov, NULL, 1) == 1) {
				e->buf_index = e->slot;
				p->stats.registered++;
			}
		}
	} else {
		p->unbudgeted_live++;
		p->stats.unbudgeted++;
	}
	assert(p->slots_n <= p->slots_max && (e->slot < 0 || p->slots[e->slot] == e));
	return e;
}

struct sluice_extent *sluice_pool_get(struct sluice_pool *p)
{
	struct sluice_extent *e = NULL;
	assert(p->free_n <= p->slots_n && p->slots_n <= p->slots_max);
	if (p->free_n)
		e = p->free_stack[--p->free_n];
	else if (p->slots_n < p->slots_max)
		e = slot_alloc(p);
	if (!e) {
		/* Reuse the least recently used cached buffer nobody else holds. */
		for (struct sluice_extent *c = p->lru_tail; c; c = c->lru_prev)
			if (c->refs == 1 && c->slot >= 0) {
				sluice_extent_ref(c);
				cache_remove(p, c);
				p->stats.evictions++;
				e = c;
				e->refs = 0;
				break;
			}
	}
	if (!e)
		e = slot_alloc(p); /* past the budget: unregistered, freed on release */
	if (!e)
		return NULL;
	assert(e->refs == 0 && !e->cached);
	e->refs = 1;
	e->owner = NULL;
	e->seg_base = e->file_off = -1;
	e->lo = e->hi = 0;
	e->verified = false;
	return e;
}

void sluice_extent_ref(struct sluice_extent *e)
{
	assert(e->refs > 0);
	e->refs++;
}

void sluice_extent_put(struct sluice_extent *e)
{
	if (!e)
		return;
	assert(e->refs > 0);
	if (--e->refs > 0)
		return;
	assert(!e->cached);
	struct sluice_pool *p = e->pool;
	if (e->slot >= 0) {
		assert(p->free_n < p->slots_max);
		p->free_stack[p->free_n++] = e;
	} else {
		assert(p->unbudgeted_live > 0);
		p->unbudgeted_live--;
		extent_free(e);
	}
}

bool sluice_pool_over_budget(const struct sluice_pool *p) { return p->unbudgeted_live > 0; }

void sluice_pool_trim(struct sluice_pool *p)
{
	struct sluice_extent *c = p->lru_tail;
	while (c && p->unbudgeted_live > 0) {
		struct sluice_extent *prev = c->lru_prev;
		assert(c->cached && c->refs >= 1); /* the LRU list holds cached extents only */
		if (c->slot < 0 && c->refs == 1) {
			cache_remove(p, c);
			p->stats.evictions++;
		}
		c = prev;
	}
}

void sluice_pool_get_stats(const struct sluice_pool *p, struct sluice_pool_stats *out)
{
	assert(p->file_free_n <= p->files_max);
	*out = p->stats;
	out->bytes_allocated += (size_t)p->unbudgeted_live * p->extent_bytes;
	out->files_in_use = p->files_registered ? p->files_max - p->file_free_n : 0;
}

struct io_uring *sluice_pool_ring(const struct sluice_pool *p) { return p->uring; }

void sluice_pool_count(struct sluice_pool *p, bool hit)
{
	if (hit)
		p->stats.hits++;
	else
		p->stats.misses++;
}

void sluice_pool_count_readahead(struct sluice_pool *p)
{
	p->stats.readahead++;
}

struct sluice_extent *sluice_cache_lookup(struct sluice_pool *p, const void *owner, int64_t seg_base,
					  int64_t file_off)
{
	for (struct sluice_extent *e = p->buckets[key_bucket(p, owner, seg_base, file_off)]; e; e = e->hnext)
		if (e->owner == owner && e->seg_base == seg_base && e->file_off == file_off) {
			assert(e->cached && e->refs >= 1);
			if (p->lru_head != e) {
				lru_unlink(p, e);
				lru_push_head(p, e);
			}
			return e;
		}
	return NULL;
}

void sluice_cache_insert(struct sluice_pool *p, struct sluice_extent *e)
{
	assert(e->pool == p && !e->cached && e->owner && e->file_off >= 0);
	assert(e->lo >= e->file_off && e->hi <= e->file_off + (int64_t)p->extent_bytes && e->lo <= e->hi);
	struct sluice_extent *old = sluice_cache_lookup(p, e->owner, e->seg_base, e->file_off);
	if (old)
		cache_remove(p, old);
	uint32_t b = key_bucket(p, e->owner, e->seg_base, e->file_off);
	e->hnext = p->buckets[b];
	p->buckets[b] = e;
	lru_push_head(p, e);
	e->cached = true;
	sluice_extent_ref(e);
	p->stats.bytes_cached += p->extent_bytes;
	assert(p->lru_head == e && e->refs >= 2); /* the caller's reference and the cache's */
}

void sluice_cache_forget(struct sluice_pool *p, const void *owner, int64_t seg_base)
{
	struct sluice_extent *c = p->lru_head;
	while (c) {
		struct sluice_extent *next = c->lru_next;
		if (!owner || (c->owner == owner && (seg_base < 0 || c->seg_base == seg_base)))
			cache_remove(p, c);
		c = next;
	}
	assert(owner || (!p->lru_head && !p->lru_tail && p->stats.bytes_cached == 0));
}

int sluice_pool_file_register(struct sluice_pool *p, int fd)
{
	if (!p->files_registered || p->file_free_n == 0)
		return -1;
	int32_t slot = p->file_free[p->file_free_n - 1];
	assert(slot >= 0 && (uint32_t)slot < p->files_max && p->file_free_n <= p->files_max);
	if (io_uring_register_files_update(p->ring, (unsigned)slot, &fd, 1) != 1)
		return -1;
	p->file_free_n--;
	return slot;
}

void sluice_pool_file_unregister(struct sluice_pool *p, int slot)
{
	if (slot < 0)
		return;
	assert(p->files_registered && p->file_free_n < p->files_max);
	int gone = -1;
	(void)io_uring_register_files_update(p->ring, (unsigned)slot, &gone, 1);
	p->file_free[p->file_free_n++] = slot;
}
