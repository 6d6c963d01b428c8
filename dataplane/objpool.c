/* The fixed-capacity per-core object pool (objpool.h): one aligned region of
 * objects, a stack of free indices, and a byte per object saying whether it
 * is lent, so that a double or foreign give-back asserts instead of
 * corrupting the free list. */
#include "dataplane/objpool.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Under AddressSanitizer a free object is poisoned, so a use after it was
 * given back is reported as a heap use after free would be (a pool would
 * otherwise hide what the allocator used to catch). */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POOL_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define POOL_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POOL_POISON(p, n) ((void)(p), (void)(n))
#define POOL_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

_Static_assert((SLUICE_OBJPOOL_ALIGN & (SLUICE_OBJPOOL_ALIGN - 1)) == 0, "the alignment is a power of two");
_Static_assert(SLUICE_OBJPOOL_OBJECTS_MAX <= UINT32_MAX, "free_stack holds object indices");

int sluice_objpool_init(struct sluice_objpool *p, const char *name, size_t obj_bytes, uint32_t count)
{
	assert(p && name);
	memset(p, 0, sizeof *p);
	p->name = name;
	if (obj_bytes == 0 || obj_bytes > SLUICE_OBJPOOL_OBJECT_BYTES_MAX || count > SLUICE_OBJPOOL_OBJECTS_MAX)
		return -1;
	p->obj_bytes = obj_bytes;
	p->stride = (obj_bytes + SLUICE_OBJPOOL_ALIGN - 1) & ~(size_t)(SLUICE_OBJPOOL_ALIGN - 1);
	if (count == 0)
		return 0;
	/* The objects' pages are touched only when first lent: a large pool
	 * costs address space, not memory, until it is used. */
	p->mem = aligned_alloc(SLUICE_OBJPOOL_ALIGN, p->stride * count);
	p->free_stack = malloc(count * sizeof *p->free_stack);
	p->lent = calloc(count, 1);
	if (!p->mem || !p->free_stack || !p->lent) {
		sluice_objpool_fini(p);
		return -1;
	}
	p->count = count;
	p->free_n = count;
	POOL_POISON(p->mem, p->stride * count);
	/* The lowest index on top: a lightly used pool keeps using its first pages. */
	for (uint32_t i = 0; i < count; i++)
		p->free_stack[i] = count - 1 - i;
	assert(p->free_n == p->count);
	return 0;
}

void sluice_objpool_fini(struct sluice_objpool *p)
{
	assert(p->free_n == p->count); /* every object given back */
	if (p->mem)
		POOL_UNPOISON(p->mem, p->stride * p->count);
	free(p->mem);
	free(p->free_stack);
	free(p->lent);
	p->mem = NULL;
	p->free_stack = NULL;
	p->lent = NULL;
	p->count = p->free_n = 0;
}

bool sluice_objpool_owns(const struct sluice_objpool *p, const void *obj)
{
	const uint8_t *o = obj;
	return p->mem && o >= p->mem && o < p->mem + p->stride * p->count;
}

void *sluice_objpool_get(struct sluice_objpool *p)
{
	assert(p->free_n <= p->count);
	if (p->free_n == 0)
		return NULL;
	uint32_t i = p->free_stack[--p->free_n];
	assert(i < p->count && !p->lent[i]);
	p->lent[i] = 1;
	POOL_UNPOISON(p->mem + (size_t)i * p->stride, p->obj_bytes);
	return p->mem + (size_t)i * p->stride;
}

void sluice_objpool_put(struct sluice_objpool *p, void *obj)
{
	assert(sluice_objpool_owns(p, obj)); /* a foreign object */
	size_t off = (size_t)((uint8_t *)obj - p->mem);
	assert(off % p->stride == 0); /* a pointer into an object, not its start */
	uint32_t i = (uint32_t)(off / p->stride);
	assert(p->lent[i]); /* given back twice */
	assert(p->free_n < p->count);
	p->lent[i] = 0;
	p->free_stack[p->free_n++] = i;
	POOL_POISON(obj, p->stride);
}
