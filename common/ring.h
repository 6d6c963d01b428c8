/* Bounded single-producer/single-consumer ring of fixed-size messages: the
 * only way cores talk to each other. The producer owns head, the consumer owns
 * tail; each sits on its own cache line. Capacity is a power of two fixed at
 * creation. A full ring is reported to the producer, who keeps the message on
 * its own backlog and retries: nothing blocks and nothing is dropped. */
#ifndef SLUICE_RING_H
#define SLUICE_RING_H
#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#define SLUICE_RING_CAPACITY_MAX (1u << 20)

/* One message: what kind, and a pointer whose ownership moves with it. */
struct sluice_msg {
	uint32_t type;
	uint32_t from_core;
	void *ptr;
};

struct sluice_ring {
	_Alignas(64) uint64_t head; /* written by the producer */
	_Alignas(64) uint64_t tail; /* written by the consumer */
	_Alignas(64) uint32_t mask;
	struct sluice_msg *slots;
};

static inline int sluice_ring_init(struct sluice_ring *r, uint32_t capacity)
{
	assert(capacity && (capacity & (capacity - 1)) == 0 && capacity <= SLUICE_RING_CAPACITY_MAX);
	r->head = r->tail = 0;
	r->mask = capacity - 1;
	r->slots = calloc(capacity, sizeof *r->slots);
	return r->slots ? 0 : -1;
}

static inline void sluice_ring_free(struct sluice_ring *r)
{
	free(r->slots);
	r->slots = NULL;
}

static inline bool sluice_ring_push(struct sluice_ring *r, struct sluice_msg m)
{
	uint64_t head = r->head;
	uint64_t tail = __atomic_load_n(&r->tail, __ATOMIC_ACQUIRE);
	if (head - tail > r->mask)
		return false;
	r->slots[head & r->mask] = m;
	__atomic_store_n(&r->head, head + 1, __ATOMIC_RELEASE);
	return true;
}

static inline bool sluice_ring_pop(struct sluice_ring *r, struct sluice_msg *out)
{
	uint64_t tail = r->tail;
	uint64_t head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
	if (tail == head)
		return false;
	*out = r->slots[tail & r->mask];
	__atomic_store_n(&r->tail, tail + 1, __ATOMIC_RELEASE);
	return true;
}

#endif
