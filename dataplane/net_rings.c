/* A network core's side of the rings to the storage cores: partition ops go
 * out (kept in order on a backlog while a ring is full) and come back
 * finished, with wake-ups for parked fetches. Apart from netcore.c so that
 * the tests, which answer ops with an in-memory storage double
 * (tests/unit/proto_stubs.c), can replace exactly this file; the core
 * runtime (issue 11) takes it over. */
#include "dataplane/req.h"
#include <assert.h>

#define SLUICE_NET_REPLIES_PER_TURN 4096 /* replies taken from one ring per turn */
_Static_assert(SLUICE_NET_REPLIES_PER_TURN <= SLUICE_RING_SLOTS, "a turn takes at most a ring's worth");

/* Which storage core an op goes to. */
static int op_core(const struct netcore *nc, const struct partop *op)
{
	int sc = op->core_plus1 > 0 ? op->core_plus1 - 1 : sluice_store_core_for(nc->b, op->topic, op->partition);
	assert(sc >= 0 && sc < nc->b->store_n);
	return sc;
}

void sluice_net_submit(struct netcore *nc, struct partop *op)
{
	struct proto_state *ps = nc->state;
	int sc = op_core(nc, op);
	struct storecore *s = &nc->b->store[sc];
	op->next = NULL;
	if (!ps->backlog_head && sluice_ring_push(&s->in[nc->id], (struct sluice_msg){MSG_PARTOP, (uint32_t)nc->id, op})) {
		sluice_core_wake(&s->sleeping, s->efd);
		return;
	}
	if (ps->backlog_tail)
		ps->backlog_tail->next = op;
	else
		ps->backlog_head = op;
	ps->backlog_tail = op;
}

/* Pins go back to the storage core that owns their extents; a full ring
 * keeps them on the core's release backlog (never dropped: an extent
 * pinned for ever would never be evicted). */
static bool release_push(struct netcore *nc, struct sluice_read_pins *pins)
{
	assert(pins->store_core >= 0 && pins->store_core < nc->b->store_n);
	struct storecore *s = &nc->b->store[pins->store_core];
	if (!sluice_ring_push(&s->in[nc->id], (struct sluice_msg){MSG_READ_RELEASE, (uint32_t)nc->id, pins}))
		return false;
	sluice_core_wake(&s->sleeping, s->efd);
	return true;
}

void sluice_net_release_pins(struct sluice_pin *pin)
{
	struct sluice_read_pins *pins = (struct sluice_read_pins *)pin; /* pin is its first member */
	struct netcore *nc = pins->nc;
	struct proto_state *ps = nc->state;
	assert(pin == &pins->pin && pins->n <= SLUICE_READ_PINS_RANGES_MAX);
	pins->next = NULL;
	if (!ps->release_head && release_push(nc, pins))
		return;
	if (ps->release_tail)
		ps->release_tail->next = pins;
	else
		ps->release_head = pins;
	ps->release_tail = pins;
}

void sluice_netcore_flush_backlog(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	while (ps->release_head && release_push(nc, ps->release_head)) {
		ps->release_head = ps->release_head->next;
		if (!ps->release_head)
			ps->release_tail = NULL;
	}
	while (ps->backlog_head) {
		struct partop *op = ps->backlog_head;
		struct storecore *s = &nc->b->store[op_core(nc, op)];
		if (!sluice_ring_push(&s->in[nc->id], (struct sluice_msg){MSG_PARTOP, (uint32_t)nc->id, op}))
			break;
		sluice_core_wake(&s->sleeping, s->efd);
		ps->backlog_head = op->next;
		if (!ps->backlog_head)
			ps->backlog_tail = NULL;
	}
	assert(ps->backlog_head || !ps->backlog_tail);
}

bool sluice_netcore_drain_replies(struct netcore *nc)
{
	bool any = false, wake = false;
	for (int s = 0; s < nc->b->store_n; s++) {
		struct sluice_msg m;
		for (int k = 0; k < SLUICE_NET_REPLIES_PER_TURN && sluice_ring_pop(&nc->b->store[s].out[nc->id], &m);
		     k++) {
			any = true;
			assert(m.type == MSG_WAKE_FETCHES || m.type == MSG_PARTOP);
			if (m.type == MSG_WAKE_FETCHES)
				wake = true;
			else
				sluice_proto_on_partop(nc, m.ptr);
		}
	}
	if (wake)
		sluice_proto_retry_parked(nc, sluice_now_ms(), true);
	return any;
}

bool sluice_netcore_replies_waiting(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	if (ps->backlog_head)
		return true;
	if (ps->release_head) /* pins to send back: a turn flushes them */
		return true;
	for (int s = 0; s < nc->b->store_n; s++) {
		struct sluice_ring *r = &nc->b->store[s].out[nc->id];
		if (__atomic_load_n(&r->head, __ATOMIC_ACQUIRE) != r->tail)
			return true;
	}
	return false;
}
