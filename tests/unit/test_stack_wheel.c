/* Unit tests of the network cores' timer wheel (dataplane/stack/wheel.c):
 * nodes fire at their own millisecond, never early and never twice;
 * deadlines beyond one turn wait for their turn; a long gap fires
 * everything due in one pass; fire may re-arm its node or cancel others. */
#include "dataplane/stack/wheel.h"
#include <criterion/criterion.h>
#include <stddef.h>
#include <string.h>

#define NODES 64

struct rec {
	struct sluice_wheel_node n;
	int id;
	uint64_t fired_at[8];
	int fired;
	uint64_t rearm_after; /* re-arm this much later when fired, if non-zero */
	struct rec *cancel;   /* cancel this one when fired */
};

static struct sluice_wheel wheel;
static struct rec recs[NODES];

static void fire(struct sluice_wheel_node *n, uint64_t now, void *arg)
{
	struct rec *r = (struct rec *)((char *)n - offsetof(struct rec, n));
	(void)arg;
	cr_assert(!n->armed, "a fired node is disarmed first");
	cr_assert(n->at <= now, "node %d fired at %llu before its deadline %llu", r->id, (unsigned long long)now,
		  (unsigned long long)n->at);
	if (r->fired < 8)
		r->fired_at[r->fired] = now;
	r->fired++;
	if (r->rearm_after)
		sluice_wheel_arm(&wheel, n, now + r->rearm_after);
	if (r->cancel)
		sluice_wheel_cancel(&wheel, &r->cancel->n);
}

static void setup(void)
{
	memset(recs, 0, sizeof recs);
	for (int i = 0; i < NODES; i++)
		recs[i].id = i;
	sluice_wheel_init(&wheel, 1000);
}

TestSuite(wheel, .init = setup);

Test(wheel, fires_at_its_millisecond_one_tick_at_a_time)
{
	for (int i = 0; i < 10; i++)
		sluice_wheel_arm(&wheel, &recs[i].n, 1000 + 1 + (uint64_t)i * 37);
	cr_assert_eq(wheel.armed, 10);
	for (uint64_t t = 1001; t <= 1400; t++)
		sluice_wheel_advance(&wheel, t, fire, NULL);
	for (int i = 0; i < 10; i++) {
		cr_assert_eq(recs[i].fired, 1, "node %d fired %d times", i, recs[i].fired);
		cr_assert_eq(recs[i].fired_at[0], 1001 + (uint64_t)i * 37);
	}
	cr_assert_eq(wheel.armed, 0);
}

Test(wheel, a_deadline_past_is_the_next_tick)
{
	sluice_wheel_arm(&wheel, &recs[0].n, 3);
	cr_assert_eq(recs[0].n.at, 1001);
	cr_assert_eq(sluice_wheel_advance(&wheel, 1000, fire, NULL), 0, "no tick, nothing fires");
	cr_assert_eq(sluice_wheel_advance(&wheel, 1001, fire, NULL), 1);
}

Test(wheel, beyond_one_turn_waits_for_its_own)
{
	/* Same slot as 1005, three turns later. */
	uint64_t far = 1005 + 3 * SLUICE_WHEEL_SLOTS;
	sluice_wheel_arm(&wheel, &recs[0].n, far);
	sluice_wheel_arm(&wheel, &recs[1].n, 1005);
	for (uint64_t t = 1001; t < far; t++)
		sluice_wheel_advance(&wheel, t, fire, NULL);
	cr_assert_eq(recs[1].fired, 1);
	cr_assert_eq(recs[0].fired, 0, "fired a turn early");
	sluice_wheel_advance(&wheel, far, fire, NULL);
	cr_assert_eq(recs[0].fired, 1);
	cr_assert_eq(recs[0].fired_at[0], far);
}

Test(wheel, a_long_gap_fires_everything_due_once)
{
	for (int i = 0; i < NODES; i++)
		sluice_wheel_arm(&wheel, &recs[i].n, 1001 + (uint64_t)i * 500); /* up to ~32 s, past one turn */
	uint64_t now = 1001 + 40 * 500;                                    /* 20 s later in one step */
	uint32_t n = sluice_wheel_advance(&wheel, now, fire, NULL);
	cr_assert_eq(n, 41);
	for (int i = 0; i < NODES; i++)
		cr_assert_eq(recs[i].fired, i <= 40 ? 1 : 0, "node %d fired %d times", i, recs[i].fired);
	for (uint64_t t = now + 1; t <= 1001 + NODES * 500; t++)
		sluice_wheel_advance(&wheel, t, fire, NULL);
	for (int i = 41; i < NODES; i++) {
		cr_assert_eq(recs[i].fired, 1);
		cr_assert_eq(recs[i].fired_at[0], 1001 + (uint64_t)i * 500);
	}
}

Test(wheel, a_gap_shorter_than_a_turn_fires_each_at_its_tick)
{
	sluice_wheel_arm(&wheel, &recs[0].n, 1010);
	sluice_wheel_arm(&wheel, &recs[1].n, 1500);
	sluice_wheel_arm(&wheel, &recs[2].n, 1600);
	cr_assert_eq(sluice_wheel_advance(&wheel, 1550, fire, NULL), 2);
	cr_assert_eq(recs[0].fired_at[0], 1010, "the clock seen by fire is the node's tick");
	cr_assert_eq(recs[1].fired_at[0], 1500);
	cr_assert_eq(recs[2].fired, 0);
}

Test(wheel, rearm_moves_and_cancel_removes)
{
	sluice_wheel_arm(&wheel, &recs[0].n, 1100);
	sluice_wheel_arm(&wheel, &recs[0].n, 1050); /* earlier */
	sluice_wheel_arm(&wheel, &recs[1].n, 1020);
	sluice_wheel_cancel(&wheel, &recs[1].n);
	sluice_wheel_cancel(&wheel, &recs[1].n); /* twice: nothing */
	cr_assert_eq(wheel.armed, 1);
	for (uint64_t t = 1001; t <= 1200; t++)
		sluice_wheel_advance(&wheel, t, fire, NULL);
	cr_assert_eq(recs[0].fired, 1);
	cr_assert_eq(recs[0].fired_at[0], 1050);
	cr_assert_eq(recs[1].fired, 0);
}

Test(wheel, fire_may_rearm_its_node_even_a_whole_turn_later)
{
	recs[0].rearm_after = 10;
	recs[1].rearm_after = SLUICE_WHEEL_SLOTS; /* the slot being run */
	sluice_wheel_arm(&wheel, &recs[0].n, 1001);
	sluice_wheel_arm(&wheel, &recs[1].n, 1002);
	for (uint64_t t = 1001; t <= 1002 + 2 * SLUICE_WHEEL_SLOTS; t++)
		sluice_wheel_advance(&wheel, t, fire, NULL);
	cr_assert_eq(recs[0].fired_at[0], 1001);
	cr_assert_eq(recs[0].fired_at[1], 1011);
	cr_assert_eq(recs[0].fired_at[2], 1021);
	cr_assert_eq(recs[1].fired, 3, "fired %d times", recs[1].fired);
	cr_assert_eq(recs[1].fired_at[1], 1002 + SLUICE_WHEEL_SLOTS);
	cr_assert_eq(recs[1].fired_at[2], 1002 + 2 * SLUICE_WHEEL_SLOTS);
}

Test(wheel, fire_may_cancel_a_node_of_the_same_tick)
{
	recs[0].cancel = &recs[1];
	recs[1].cancel = &recs[0];
	sluice_wheel_arm(&wheel, &recs[0].n, 1005);
	sluice_wheel_arm(&wheel, &recs[1].n, 1005);
	cr_assert_eq(sluice_wheel_advance(&wheel, 1010, fire, NULL), 1);
	cr_assert_eq(recs[0].fired + recs[1].fired, 1, "the first fired cancelled the second");
	cr_assert_eq(wheel.armed, 0);
}

Test(wheel, many_nodes_in_one_slot_keep_their_turns)
{
	for (int i = 0; i < NODES; i++)
		sluice_wheel_arm(&wheel, &recs[i].n, 1007 + (uint64_t)(i % 4) * SLUICE_WHEEL_SLOTS);
	for (int turn = 0; turn < 4; turn++) {
		uint64_t t = 1007 + (uint64_t)turn * SLUICE_WHEEL_SLOTS;
		for (uint64_t u = wheel.now + 1; u <= t; u++)
			sluice_wheel_advance(&wheel, u, fire, NULL);
		for (int i = 0; i < NODES; i++)
			cr_assert_eq(recs[i].fired, i % 4 <= turn ? 1 : 0, "turn %d node %d", turn, i);
	}
	cr_assert_eq(wheel.armed, 0);
}
