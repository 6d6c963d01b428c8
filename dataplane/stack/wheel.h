/* A hashed timer wheel (Varghese and Lauck's scheme 6) of 1 ms ticks: each
 * network core keeps its connections' next deadlines in one, so a turn
 * looks only at the slots of the milliseconds that passed, not at every
 * connection. A deadline beyond the wheel's span sits in its slot and is
 * passed over (left in place) until its own turn of the wheel comes.
 *
 * Nodes are intrusive and owned by their caller; the wheel allocates
 * nothing. Single-threaded: one core's wheel is only touched by that core. */
#ifndef SLUICE_STACK_WHEEL_H
#define SLUICE_STACK_WHEEL_H
#include <stdbool.h>
#include <stdint.h>

#define SLUICE_WHEEL_SLOTS 4096 /* ms: the span of one turn */
_Static_assert((SLUICE_WHEEL_SLOTS & (SLUICE_WHEEL_SLOTS - 1)) == 0, "slots mask by a power of two");

struct sluice_wheel_node {
	struct sluice_wheel_node *next, *prev;
	uint64_t at; /* the deadline, ms, while armed */
	bool armed;
};

struct sluice_wheel {
	struct sluice_wheel_node slot[SLUICE_WHEEL_SLOTS]; /* list heads */
	uint64_t now;                                       /* every tick up to here has run */
	uint32_t armed;                                     /* nodes in the wheel */
};

void sluice_wheel_init(struct sluice_wheel *w, uint64_t now_ms);
/* Arm n for deadline at (a node armed already moves); a deadline not after
 * the wheel's clock fires at the next tick. */
void sluice_wheel_arm(struct sluice_wheel *w, struct sluice_wheel_node *n, uint64_t at);
/* Disarm n; a node not armed is left as it is. */
void sluice_wheel_cancel(struct sluice_wheel *w, struct sluice_wheel_node *n);
/* Run the ticks up to now_ms: each node whose deadline has come is disarmed
 * and handed to fire, which may arm it again (for a later tick) or cancel
 * any node. After a gap longer than the span every slot is looked at once.
 * Returns how many fired. */
uint32_t sluice_wheel_advance(struct sluice_wheel *w, uint64_t now_ms,
			      void (*fire)(struct sluice_wheel_node *n, uint64_t now_ms, void *arg), void *arg);

#endif
