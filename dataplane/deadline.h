/* The deadlines of requests a storage core holds while they wait for other
 * replicas (Kafka's purgatory: a Produce with acks=all until the high
 * watermark passes it, a DeleteRecords until every live replica's log start
 * reached its offset), so that each is answered REQUEST_TIMED_OUT once its
 * request's TimeoutMs has passed, as Kafka's DelayedProduce and
 * DelayedDeleteRecords are.
 *
 * Each waiting op embeds one struct sluice_deadline (no allocation per
 * message); a storage core keeps one struct sluice_deadlines. Entries sit in
 * lists by timeout: every entry of a list was armed with the same timeout on
 * a monotonic clock, so appending at the tail keeps the list in deadline
 * order, and arming, cancelling and expiring each cost O(1) (plus a look
 * over the SLUICE_DEADLINE_LISTS list heads). Clients use one timeout each
 * (a producer's request.timeout.ms), so a few lists serve any number of
 * them. When more distinct timeouts wait at once than there are lists, an
 * entry joins the list whose timeout is nearest its own and is inserted in
 * order, walking back from the tail over the entries of that list due later
 * than it: still correct, no longer O(1). An entry cancels itself without
 * the table (its own links), so whoever takes an op off a wait list drops
 * its deadline too. Single-threaded: the owning core only. */
#ifndef SLUICE_DEADLINE_H
#define SLUICE_DEADLINE_H
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Lists one table keeps: distinct timeouts waiting at once before lists are
 * shared (and inserts walk). */
#define SLUICE_DEADLINE_LISTS 16

/* One waiting op's deadline; zeroed (prev and next NULL) means not armed. */
struct sluice_deadline {
	struct sluice_deadline *prev, *next; /* in its list while armed, else NULL */
	int64_t at_ms;                       /* monotonic: when it expires */
};

struct sluice_deadlines {
	struct {
		int64_t timeout_ms; /* the timeout its entries were armed with (shared: nearest) */
		struct sluice_deadline head; /* sentinel of a circular list, earliest first */
	} list[SLUICE_DEADLINE_LISTS];
};

void sluice_deadlines_init(struct sluice_deadlines *ds);
/* Arm d (not armed) to expire timeout_ms (>= 0) after now_ms. */
void sluice_deadlines_arm(struct sluice_deadlines *ds, struct sluice_deadline *d, int64_t now_ms, int64_t timeout_ms);
/* An armed entry due at or before now_ms, taken out (no longer armed), or
 * NULL when none is due. Every list's earliest due entry comes before any
 * entry behind it; across lists the order is unspecified. */
struct sluice_deadline *sluice_deadlines_expired(struct sluice_deadlines *ds, int64_t now_ms);
/* The earliest armed deadline, INT64_MAX when none. */
int64_t sluice_deadlines_next(const struct sluice_deadlines *ds);

static inline bool sluice_deadline_armed(const struct sluice_deadline *d) { return d->next != NULL; }

/* Take d out of its list if armed (nothing otherwise). */
static inline void sluice_deadline_cancel(struct sluice_deadline *d)
{
	if (!d->next)
		return;
	assert(d->prev && d->next->prev == d && d->prev->next == d);
	d->prev->next = d->next;
	d->next->prev = d->prev;
	d->prev = d->next = NULL;
}

#endif
