/* Deadlines of waiting requests in lists by timeout (see deadline.h): the
 * leaf code of Kafka's purgatory timers for a storage core. No I/O, no
 * allocation. */
#include "dataplane/deadline.h"
#include <stdlib.h>

void sluice_deadlines_init(struct sluice_deadlines *ds)
{
	for (size_t i = 0; i < SLUICE_DEADLINE_LISTS; i++) {
		ds->list[i].timeout_ms = -1;
		ds->list[i].head.prev = ds->list[i].head.next = &ds->list[i].head;
		ds->list[i].head.at_ms = INT64_MIN;
	}
}

static bool list_empty(const struct sluice_deadline *head) { return head->next == head; }

/* The list for timeout: the one holding it already, else an empty one
 * (taking it), else the one whose timeout is nearest (shared). */
static size_t list_for(struct sluice_deadlines *ds, int64_t timeout_ms)
{
	size_t empty = SLUICE_DEADLINE_LISTS, nearest = 0;
	int64_t nearest_gap = INT64_MAX;
	for (size_t i = 0; i < SLUICE_DEADLINE_LISTS; i++) {
		if (list_empty(&ds->list[i].head)) {
			empty = empty < SLUICE_DEADLINE_LISTS ? empty : i;
			continue;
		}
		if (ds->list[i].timeout_ms == timeout_ms)
			return i;
		int64_t gap = llabs(ds->list[i].timeout_ms - timeout_ms);
		if (gap < nearest_gap) {
			nearest_gap = gap;
			nearest = i;
		}
	}
	if (empty < SLUICE_DEADLINE_LISTS) {
		ds->list[empty].timeout_ms = timeout_ms;
		return empty;
	}
	return nearest;
}

void sluice_deadlines_arm(struct sluice_deadlines *ds, struct sluice_deadline *d, int64_t now_ms, int64_t timeout_ms)
{
	assert(!sluice_deadline_armed(d) && timeout_ms >= 0 && now_ms >= 0);
	d->at_ms = now_ms + timeout_ms;
	struct sluice_deadline *head = &ds->list[list_for(ds, timeout_ms)].head, *after = head->prev;
	/* Alone in its list's timeout this never walks (the clock does not go
	 * back); sharing a list it walks past those due later. The sentinel's
	 * INT64_MIN ends the walk. */
	while (after != head && after->at_ms > d->at_ms)
		after = after->prev;
	d->prev = after;
	d->next = after->next;
	after->next->prev = d;
	after->next = d;
	assert(d->prev->next == d && d->next->prev == d);
}

struct sluice_deadline *sluice_deadlines_expired(struct sluice_deadlines *ds, int64_t now_ms)
{
	for (size_t i = 0; i < SLUICE_DEADLINE_LISTS; i++) {
		struct sluice_deadline *head = &ds->list[i].head, *d = head->next;
		if (d == head || d->at_ms > now_ms)
			continue;
		sluice_deadline_cancel(d);
		return d;
	}
	return NULL;
}

int64_t sluice_deadlines_next(const struct sluice_deadlines *ds)
{
	int64_t next = INT64_MAX;
	for (size_t i = 0; i < SLUICE_DEADLINE_LISTS; i++) {
		const struct sluice_deadline *head = &ds->list[i].head;
		if (!list_empty(head) && head->next->at_ms < next)
			next = head->next->at_ms;
	}
	return next;
}
