/* Posts into a network core: how another thread (today the metadata
 * writer, completing a request's batch) hands work back to the core that
 * owns the request, since only that core may touch its connections. Any
 * number of threads push onto a lock-free stack (Treiber's) in the core's
 * struct netcore; the core takes the whole stack at once each turn, turns
 * it into arrival order and runs each post. Taking the whole stack with one
 * exchange, never popping single entries, leaves no ABA window. The push
 * then wakes the core through the eventfd protocol of core.h, as storage
 * cores do. Apart from net_rings.c so that the unit tests, which replace the
 * rings with doubles, run this very code with a real metadata writer thread.
 * A stand-in for the core runtime's post (issue 11), which replaces it. */
#include "dataplane/req.h"
#include <assert.h>

void sluice_netcore_post(struct netcore *nc, struct sluice_post *p)
{
	assert(p && p->run);
	struct sluice_post *head = __atomic_load_n(&nc->posts, __ATOMIC_RELAXED);
	do
		p->next = head;
	while (!__atomic_compare_exchange_n(&nc->posts, &head, p, true, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
	sluice_core_wake(&nc->sleeping, nc->efd);
}

bool sluice_netcore_run_posts(struct netcore *nc)
{
	struct sluice_post *stack = __atomic_exchange_n(&nc->posts, NULL, __ATOMIC_ACQUIRE);
	if (!stack)
		return false;
	struct sluice_post *fifo = NULL; /* the stack reversed: oldest first */
	while (stack) {
		struct sluice_post *next = stack->next;
		stack->next = fifo;
		fifo = stack;
		stack = next;
	}
	while (fifo) {
		struct sluice_post *p = fifo;
		fifo = p->next; /* run may free p or post it again */
		p->next = NULL;
		assert(p->run);
		p->run(nc, p);
	}
	return true;
}

bool sluice_netcore_posts_waiting(const struct netcore *nc)
{
	return __atomic_load_n(&nc->posts, __ATOMIC_ACQUIRE) != NULL;
}
