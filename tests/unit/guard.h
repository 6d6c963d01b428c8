/* Test helper: place bytes so that they end exactly at the start of an
 * inaccessible page. A reader that looks one byte past the end faults at once
 * (SIGSEGV, which Criterion reports as a crashed test), even in a build
 * without AddressSanitizer. */
#ifndef SLUICE_TEST_GUARD_H
#define SLUICE_TEST_GUARD_H
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct guarded {
	uint8_t *map;  /* start of the mapping */
	size_t map_len;
	uint8_t *data; /* the copy; data + len is the first byte of the guard page */
	size_t len;
};

/* Copies len bytes (at most a few pages) to just before a PROT_NONE page.
 * Returns false if the mapping fails. */
static inline bool guarded_init(struct guarded *g, const void *src, size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t data_pages = (len + page - 1) / page;
	if (data_pages == 0)
		data_pages = 1;
	g->map_len = (data_pages + 1) * page;
	g->map = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (g->map == MAP_FAILED)
		return false;
	if (mprotect(g->map + data_pages * page, page, PROT_NONE) != 0) {
		munmap(g->map, g->map_len);
		return false;
	}
	g->data = g->map + data_pages * page - len;
	g->len = len;
	if (len)
		memcpy(g->data, src, len);
	return true;
}

static inline void guarded_free(struct guarded *g)
{
	munmap(g->map, g->map_len);
	g->map = NULL;
}

#endif
