/* A network core's side of the rings to the storage cores: partition ops go
 * out through the core runtime's send (dataplane/runtime.h: an op that
 * finds its ring full waits, in order, on the runtime's backlog, which the
 * loop flushes every turn) and come back finished, with wake-ups for parked
 * fetches. Apart from netcore.c so that the tests, which answer ops with an
 * in-memory storage double (tests/unit/proto_stubs.c), replace exactly this
 * file: where ops go (sluice_net_submit) and where answers come from
 * (sluice_netcore_drain_replies, sluice_netcore_replies_waiting). */
#include "common/kafka/errors.h"
#include "common/log.h"
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

/* The backlog refuses only past SLUICE_RT_BACKLOG_MAX messages, and the
 * network core stops reading requests long before (netcore.c); what still
 * overflows (many parked fetches retried at once) fails as if its partition
 * had moved, which every client retries after a metadata refresh. It is
 * answered by the next drain, never inside the submit: the request's
 * dispatch loop is still running. */
void sluice_net_submit(struct netcore *nc, struct partop *op)
{
	struct proto_state *ps = nc->state;
	struct storecore *s = &nc->b->store[op_core(nc, op)];
	assert(op->req && op->net_core == (uint8_t)nc->id);
	assert(nc->rt.id == nc->id);
	op->next = NULL;
	if (sluice_rt_send(&nc->rt, &s->in[nc->id], &s->rt, (struct sluice_msg){MSG_PARTOP, (uint32_t)nc->id, op}))
		return;
	op->error = KERR_NOT_LEADER_OR_FOLLOWER;
	op->next = ps->refused;
	ps->refused = op;
}

/* Pins go back to the storage core that owns their extents through the
 * runtime's send (its backlog keeps them in order while the ring is full).
 * The backlog refuses only past its limit; a release it refuses waits on
 * the core's release list for the next drain, never dropped (an extent
 * pinned for ever would never be evicted). */
static bool release_send(struct netcore *nc, struct sluice_read_pins *pins)
{
	assert(pins->store_core >= 0 && pins->store_core < nc->b->store_n);
	struct storecore *s = &nc->b->store[pins->store_core];
	return sluice_rt_send(&nc->rt, &s->in[nc->id], &s->rt,
			      (struct sluice_msg){MSG_READ_RELEASE, (uint32_t)nc->id, pins});
}

void sluice_net_release_pins(struct sluice_pin *pin)
{
	struct sluice_read_pins *pins = (struct sluice_read_pins *)pin; /* pin is its first member */
	struct netcore *nc = pins->nc;
	struct proto_state *ps = nc->state;
	assert(pin == &pins->pin && pins->n <= SLUICE_READ_PINS_RANGES_MAX);
	pins->next = NULL;
	if (!ps->release_head && release_send(nc, pins))
		return;
	if (ps->release_tail)
		ps->release_tail->next = pins;
	else
		ps->release_head = pins;
	ps->release_tail = pins;
}

/* Releases the backlog refused, sent again in order. */
static bool release_retry(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	bool any = false;
	while (ps->release_head && release_send(nc, ps->release_head)) {
		ps->release_head = ps->release_head->next;
		if (!ps->release_head)
			ps->release_tail = NULL;
		any = true;
	}
	return any;
}

/* Ops the backlog refused, handed back with their error. */
static bool answer_refused(struct netcore *nc)
{
	struct proto_state *ps = nc->state;
	struct partop *list = ps->refused;
	ps->refused = NULL;
	uint32_t n = 0;
	while (list) {
		struct partop *op = list;
		list = op->next;
		op->next = NULL;
		assert(op->error == KERR_NOT_LEADER_OR_FOLLOWER);
		sluice_proto_on_partop(nc, op); /* may submit (and refuse) again: onto the fresh list */
		n++;
	}
	if (n)
		SLOG_WARN("net", "network core %d: %u partition op(s) refused: %u waiting for full storage rings",
			  nc->id, n, sluice_rt_backlog_n(&nc->rt));
	return n > 0;
}

bool sluice_netcore_drain_replies(struct netcore *nc)
{
	bool refused = answer_refused(nc), released = release_retry(nc); /* both run */
	bool any = refused || released, wake = false;
	for (int s = 0; s < nc->b->store_n; s++) {
		struct sluice_msg m;
		for (int k = 0; k < SLUICE_NET_REPLIES_PER_TURN && sluice_ring_pop(&nc->b->store[s].out[nc->id], &m);
		     k++) {
			any = true;
			assert(m.type == MSG_WAKE_FETCHES || m.type == MSG_PARTOP);
			assert(m.from_core == (uint32_t)s);
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

/* The runtime's pending hook: answers waiting that its own checks (posts,
 * backlog) cannot see. */
bool sluice_netcore_replies_waiting(struct netcore *nc)
{
	const struct proto_state *ps = nc->state;
	if (ps->refused)
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
