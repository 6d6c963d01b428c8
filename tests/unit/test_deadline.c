/* Deadline table tests (dataplane/deadline.c alone). They prove that
 * entries expire no earlier than their deadline and in deadline order
 * whatever their timeouts and arming order, also when more distinct
 * timeouts wait than the table has lists (shared lists stay in order); that
 * a cancelled entry never expires and cancelling one not armed is harmless;
 * that the next deadline is the earliest armed one; that an entry can be
 * armed again after it expired; and that a table of entries sharing one
 * timeout arms them without walking (each lands at its list's tail). */
#include "dataplane/deadline.h"
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

static struct sluice_deadlines DS;

static void ds_setup(void) { sluice_deadlines_init(&DS); }

TestSuite(deadline, .init = ds_setup);

/* Every entry due by now, in the order they come out. */
static int drain(int64_t now, struct sluice_deadline *base, int *out, int max)
{
	int n = 0;
	for (struct sluice_deadline *d; (d = sluice_deadlines_expired(&DS, now));) {
		cr_assert_lt(n, max);
		cr_expect_not(sluice_deadline_armed(d));
		cr_expect_leq(d->at_ms, now, "expired early");
		out[n++] = (int)(d - base);
	}
	return n;
}

/* Proves expiry at (not before) the deadline, the next deadline across
 * lists, cancel, and re-arming an expired entry. */
Test(deadline, expire_at_deadline_and_cancel)
{
	struct sluice_deadline d[4];
	memset(d, 0, sizeof d);
	int out[8];
	cr_expect_eq(sluice_deadlines_next(&DS), INT64_MAX);
	cr_expect_null(sluice_deadlines_expired(&DS, 1000000));
	sluice_deadlines_arm(&DS, &d[0], 100, 1000); /* 1100 */
	sluice_deadlines_arm(&DS, &d[1], 100, 30);   /* 130 */
	sluice_deadlines_arm(&DS, &d[2], 120, 1000); /* 1120 */
	sluice_deadlines_arm(&DS, &d[3], 120, 0);    /* 120 */
	cr_expect(sluice_deadline_armed(&d[0]));
	cr_expect_eq(sluice_deadlines_next(&DS), 120);
	cr_expect_eq(drain(119, d, out, 8), 0);
	cr_expect_eq(drain(120, d, out, 8), 1);
	cr_expect_eq(out[0], 3, "timeout 0 expires at once");
	cr_expect_eq(sluice_deadlines_next(&DS), 130);
	sluice_deadline_cancel(&d[1]);
	cr_expect_not(sluice_deadline_armed(&d[1]));
	sluice_deadline_cancel(&d[1]); /* not armed: nothing */
	cr_expect_eq(sluice_deadlines_next(&DS), 1100);
	cr_expect_eq(drain(1099, d, out, 8), 0, "the cancelled one never comes");
	cr_expect_eq(drain(1100, d, out, 8), 1);
	cr_expect_eq(out[0], 0);
	sluice_deadlines_arm(&DS, &d[0], 1100, 5); /* again, after it expired */
	cr_expect_eq(sluice_deadlines_next(&DS), 1105);
	cr_expect_eq(drain(1110, d, out, 8), 1);
	cr_expect_eq(out[0], 0);
	cr_expect_eq(drain(5000, d, out, 8), 1);
	cr_expect_eq(out[0], 2);
	cr_expect_eq(sluice_deadlines_next(&DS), INT64_MAX);
}

/* Proves that with more distinct timeouts than lists (entries sharing
 * lists, inserted in order) every entry still expires at its deadline and
 * no entry of a list comes before an earlier one of the same list: taken
 * one step of time after another, entries come out in deadline order. */
Test(deadline, more_timeouts_than_lists)
{
	enum { N = 4 * SLUICE_DEADLINE_LISTS + 7 };
	static struct sluice_deadline d[N];
	memset(d, 0, sizeof d);
	srand(7);
	int64_t now = 1000;
	for (int i = 0; i < N; i++) {
		now += rand() % 3; /* the clock moves forward as they arrive */
		sluice_deadlines_arm(&DS, &d[i], now, (int64_t)(rand() % 500));
	}
	int64_t last = 0;
	int out[N], seen = 0;
	for (int64_t t = 0; t <= now + 500; t++) {
		int n = drain(t, d, out, N);
		for (int k = 0; k < n; k++) {
			cr_expect_eq(d[out[k]].at_ms, t, "entry %d due %lld came out at %lld", out[k],
				     (long long)d[out[k]].at_ms, (long long)t);
			cr_expect_geq(d[out[k]].at_ms, last);
			last = d[out[k]].at_ms;
		}
		seen += n;
	}
	cr_expect_eq(seen, N);
	cr_expect_eq(sluice_deadlines_next(&DS), INT64_MAX);
}

/* Proves entries armed with one timeout on a clock that does not go back
 * land at their list's tail (no walk: the previous entry is the one armed
 * before), and cancelling from the middle keeps the rest in order. */
Test(deadline, one_timeout_appends)
{
	enum { N = 1000 };
	static struct sluice_deadline d[N];
	memset(d, 0, sizeof d);
	for (int i = 0; i < N; i++) {
		sluice_deadlines_arm(&DS, &d[i], 10 + i / 3, 30000);
		if (i)
			cr_assert_eq(d[i].prev, &d[i - 1], "entry %d was not appended at the tail", i);
	}
	for (int i = 1; i < N; i += 2)
		sluice_deadline_cancel(&d[i]);
	int out[N];
	int n = drain(INT64_MAX - 1, d, out, N);
	cr_expect_eq(n, N / 2);
	for (int k = 0; k < n; k++)
		cr_expect_eq(out[k], 2 * k);
}
