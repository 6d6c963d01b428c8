/* A fixed-capacity object pool for one core: objects of one size, as many as
 * chosen at start (from configuration), lent and given back without locks
 * and without touching the allocator, so that a steady-state request makes no
 * heap allocation (issue 11). Exhaustion is not an error: get returns NULL and
 * the caller applies back-pressure (the network core stops reading the
 * connection until objects come back). Giving back an object twice, or one
 * the pool never lent, is a bug and asserts.
 *
 * The objects live in one region reserved at init; the free list is a stack
 * of indices beside it, so a fresh pool touches none of the objects' pages and
 * the most recently returned (cache-warm) object is lent first. A pool belongs
 * to the core that created it: never shared between threads. */
#ifndef SLUICE_OBJPOOL_H
#define SLUICE_OBJPOOL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_OBJPOOL_OBJECTS_MAX (1u << 20)   /* objects one pool may hold */
#define SLUICE_OBJPOOL_OBJECT_BYTES_MAX (1u << 30) /* largest object */
#define SLUICE_OBJPOOL_ALIGN 64                 /* every object starts on a cache line */

struct sluice_objpool {
	const char *name;     /* for messages: "requests", "frames" */
	uint8_t *mem;         /* count objects of stride bytes */
	size_t obj_bytes;     /* as asked */
	size_t stride;        /* obj_bytes rounded up to SLUICE_OBJPOOL_ALIGN */
	uint32_t count;       /* objects in the pool */
	uint32_t free_n;      /* objects not lent */
	uint32_t *free_stack; /* indices of the free objects, [0, free_n) */
	uint8_t *lent;        /* 1 while object i is lent: catches double and foreign frees */
};

/* Reserve count objects of obj_bytes each. 0, or -1 when out of memory or
 * a size is outside its limit (count 0 makes an empty pool: every get fails). */
int sluice_objpool_init(struct sluice_objpool *p, const char *name, size_t obj_bytes, uint32_t count);
/* Release the region; every object must be back (asserted). */
void sluice_objpool_fini(struct sluice_objpool *p);
/* An object (its contents undefined), or NULL when every object is lent. */
void *sluice_objpool_get(struct sluice_objpool *p);
/* Give obj back. obj must have come from p and be lent (asserted). */
void sluice_objpool_put(struct sluice_objpool *p, void *obj);
/* Whether obj is one of p's objects (lent or not): how a caller that mixes
 * pooled and allocated buffers tells them apart. */
bool sluice_objpool_owns(const struct sluice_objpool *p, const void *obj);
/* Objects available to get. */
static inline uint32_t sluice_objpool_available(const struct sluice_objpool *p) { return p->free_n; }

#endif
