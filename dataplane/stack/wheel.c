/* The timer wheel (wheel.h). */
#include "dataplane/stack/wheel.h"
#include <assert.h>
#include <stddef.h>

static void list_init(struct sluice_wheel_node *head)
{
	head->next = head->prev = head;
}

static void list_push(struct sluice_wheel_node *head, struct sluice_wheel_node *n)
{
	n->prev = head->prev;
	n->next = head;
	head->prev->next = n;
	head->prev = n;
}

static void list_unlink(struct sluice_wheel_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = NULL;
}

void sluice_wheel_init(struct sluice_wheel *w, uint64_t now_ms)
{
	for (uint32_t i = 0; i < SLUICE_WHEEL_SLOTS; i++)
		list_init(&w->slot[i]);
	w->now = now_ms;
	w->armed = 0;
}

void sluice_wheel_cancel(struct sluice_wheel *w, struct sluice_wheel_node *n)
{
	if (!n->armed)
		return;
	assert(w->armed > 0);
	list_unlink(n);
	n->armed = false;
	w->armed--;
}

void sluice_wheel_arm(struct sluice_wheel *w, struct sluice_wheel_node *n, uint64_t at)
{
	sluice_wheel_cancel(w, n);
	if (at <= w->now)
		at = w->now + 1;
	n->at = at;
	n->armed = true;
	w->armed++;
	list_push(&w->slot[at & (SLUICE_WHEEL_SLOTS - 1)], n);
}

/* One slot's nodes due by limit fire; the rest stay. The slot is emptied
 * onto a local list first, so fire may arm into this very slot (a deadline
 * a whole turn later) or cancel nodes still on the local list. */
static uint32_t run_slot(struct sluice_wheel *w, struct sluice_wheel_node *head, uint64_t limit,
			 void (*fire)(struct sluice_wheel_node *, uint64_t, void *), void *arg)
{
	struct sluice_wheel_node local, later;
	list_init(&local);
	list_init(&later);
	if (head->next == head)
		return 0;
	local.next = head->next;
	local.prev = head->prev;
	local.next->prev = &local;
	local.prev->next = &local;
	list_init(head);
	uint32_t fired = 0;
	while (local.next != &local) {
		struct sluice_wheel_node *n = local.next;
		list_unlink(n);
		if (n->at > limit) {
			list_push(&later, n); /* a later turn's */
			continue;
		}
		n->armed = false;
		w->armed--;
		fired++;
		fire(n, limit, arg);
	}
	while (later.next != &later) {
		struct sluice_wheel_node *n = later.next;
		list_unlink(n);
		list_push(head, n);
	}
	return fired;
}

uint32_t sluice_wheel_advance(struct sluice_wheel *w, uint64_t now_ms,
			      void (*fire)(struct sluice_wheel_node *n, uint64_t now_ms, void *arg), void *arg)
{
	if (now_ms <= w->now)
		return 0;
	uint64_t start = w->now, gap = now_ms - start;
	uint64_t steps = gap > SLUICE_WHEEL_SLOTS ? SLUICE_WHEEL_SLOTS : gap;
	uint32_t fired = 0;
	for (uint64_t k = 1; k <= steps; k++) {
		uint64_t tick = start + k;
		/* After a long gap each slot is looked at once, for everything due. */
		uint64_t limit = gap > SLUICE_WHEEL_SLOTS ? now_ms : tick;
		w->now = limit;
		if (w->armed)
			fired += run_slot(w, &w->slot[tick & (SLUICE_WHEEL_SLOTS - 1)], limit, fire, arg);
	}
	w->now = now_ms;
	return fired;
}
