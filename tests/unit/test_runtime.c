/* Core runtime unit tests (dataplane/runtime.c alone, no broker). They
 * prove that timers fire in due order (ties in arming order) and a
 * cancelled one never fires; that arming past SLUICE_RT_TIMERS_MAX is
 * refused without harm; that a core sleeping in its poll is woken by
 * another thread's wake or post (its poll has no timeout); that messages finding
 * a ring full wait on the backlog in order, later messages to other rings
 * queue behind them, the backlog drains as room appears and refuses past
 * its limit; and that posts from several threads each run exactly once,
 * in each poster's order. */
#include "dataplane/runtime.h"
#include <criterion/criterion.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAKE_BOUND_MS 5000 /* generous: only says the wake was not lost */

static void rt_open(struct sluice_rt *rt, int id)
{
	cr_assert_eq(sluice_rt_init(rt, NULL, SLUICE_RT_STORE, id), 0);
}

/* ---- timers ------------------------------------------------------------ */

static int fired[16], nfired;

static void on_timer(void *arg)
{
	cr_assert_lt(nfired, 16);
	fired[nfired++] = (int)(intptr_t)arg;
}

/* Proves due order, arming order among equal due times, cancel, next_due,
 * and that a timer not yet due stays armed. */
Test(runtime, timers_fire_in_order_and_cancel)
{
	static struct sluice_rt rt;
	rt_open(&rt, 0);
	struct sluice_rt_timer t[5];
	int64_t due[5] = {30, 10, 20, 10, 15};
	for (int i = 0; i < 5; i++) {
		sluice_rt_timer_init(&t[i], on_timer, (void *)(intptr_t)i);
		cr_assert_eq(sluice_rt_timer_add(&rt, &t[i], due[i]), 0);
	}
	cr_assert_eq(sluice_rt_timer_next_due(&rt), 10);
	cr_assert(sluice_rt_timer_cancel(&rt, &t[4]));
	cr_assert(!sluice_rt_timer_cancel(&rt, &t[4]), "a second cancel finds nothing");
	nfired = 0;
	cr_assert_eq(sluice_rt_timers_run(&rt, 25), 3);
	cr_assert_eq(fired[0], 1);
	cr_assert_eq(fired[1], 3, "equal due times fire in arming order");
	cr_assert_eq(fired[2], 2);
	cr_assert_eq(sluice_rt_timer_next_due(&rt), 30);
	cr_assert_eq(sluice_rt_timers_run(&rt, 29), 0);
	cr_assert_eq(sluice_rt_timers_run(&rt, 1000), 1);
	cr_assert_eq(fired[3], 0);
	cr_assert_eq(nfired, 4, "the cancelled timer never fired");
	cr_assert_eq(sluice_rt_timer_next_due(&rt), INT64_MAX);
	sluice_rt_fini(&rt);
}

struct periodic {
	struct sluice_rt *rt;
	struct sluice_rt_timer t;
	int runs;
};

static void on_periodic(void *arg)
{
	struct periodic *p = arg;
	p->runs++;
	cr_assert_eq(sluice_rt_timer_add(p->rt, &p->t, p->t.due_ms + 1), 0);
}

/* Proves a timer re-arming itself for a time already past runs once per
 * call, not forever. */
Test(runtime, timer_rearmed_in_the_past_waits_for_next_run)
{
	static struct sluice_rt rt;
	rt_open(&rt, 0);
	struct periodic p = {.rt = &rt};
	sluice_rt_timer_init(&p.t, on_periodic, &p);
	cr_assert_eq(sluice_rt_timer_add(&rt, &p.t, 1), 0);
	cr_assert_eq(sluice_rt_timers_run(&rt, 100), 1);
	cr_assert_eq(sluice_rt_timers_run(&rt, 100), 1);
	cr_assert_eq(p.runs, 2);
	cr_assert(sluice_rt_timer_cancel(&rt, &p.t));
	sluice_rt_fini(&rt);
}

static int count_fired;
static void on_count(void *arg)
{
	(void)arg;
	count_fired++;
}

/* Proves the timer table's bound: one past SLUICE_RT_TIMERS_MAX is refused,
 * leaves the refused timer idle and the others armed; a slot freed by a
 * cancel takes it. */
Test(runtime, timer_capacity_refused_not_crashed)
{
	static struct sluice_rt rt;
	static struct sluice_rt_timer t[SLUICE_RT_TIMERS_MAX + 1];
	rt_open(&rt, 0);
	for (int i = 0; i <= SLUICE_RT_TIMERS_MAX; i++)
		sluice_rt_timer_init(&t[i], on_count, NULL);
	for (int i = 0; i < SLUICE_RT_TIMERS_MAX; i++)
		cr_assert_eq(sluice_rt_timer_add(&rt, &t[i], 1000 - i), 0);
	cr_assert_eq(sluice_rt_timer_add(&rt, &t[SLUICE_RT_TIMERS_MAX], 5), -1);
	cr_assert_eq(t[SLUICE_RT_TIMERS_MAX].slot, SLUICE_RT_TIMER_IDLE);
	cr_assert_eq(sluice_rt_timer_next_due(&rt), 1000 - (SLUICE_RT_TIMERS_MAX - 1));
	cr_assert(sluice_rt_timer_cancel(&rt, &t[0]));
	cr_assert_eq(sluice_rt_timer_add(&rt, &t[SLUICE_RT_TIMERS_MAX], 5), 0);
	count_fired = 0;
	cr_assert_eq(sluice_rt_timers_run(&rt, 2000), SLUICE_RT_TIMERS_MAX);
	cr_assert_eq(count_fired, SLUICE_RT_TIMERS_MAX);
	sluice_rt_fini(&rt);
}

/* ---- a core on a thread: hooks over poll(2) on the eventfd -------------- */

struct tcore {
	struct sluice_rt rt;
	int flag;        /* atomic: work another thread left */
	int seen;        /* atomic: drain took it */
	int posts_run;
};

static bool tc_drain(void *core)
{
	struct tcore *c = core;
	if (!__atomic_exchange_n(&c->flag, 0, __ATOMIC_ACQ_REL))
		return false;
	__atomic_add_fetch(&c->seen, 1, __ATOMIC_RELEASE);
	return true;
}

static bool tc_pending(void *core)
{
	struct tcore *c = core;
	return __atomic_load_n(&c->flag, __ATOMIC_ACQUIRE) != 0;
}

/* A sleep here has no timeout at all (whatever wait_ms says, when it is
 * not 0): only the eventfd ends it, so work seen proves the wake arrived. */
static void tc_poll(void *core, int64_t wait_ms)
{
	struct tcore *c = core;
	struct pollfd pfd = {.fd = c->rt.efd, .events = POLLIN};
	if (poll(&pfd, 1, wait_ms == 0 ? 0 : -1) > 0) {
		uint64_t v;
		cr_assert_eq(read(c->rt.efd, &v, sizeof v), (ssize_t)sizeof v);
	}
}

static const struct sluice_rt_hooks tc_hooks = {
	.drain = tc_drain,
	.pending = tc_pending,
	.poll = tc_poll,
	.sleep_max_ms = SLUICE_RT_SLEEP_MS_MAX,
};

static void wait_until_sleeping(struct tcore *c)
{
	int64_t until = sluice_rt_now_ms() + WAKE_BOUND_MS;
	while (!__atomic_load_n(&c->rt.sleeping, __ATOMIC_ACQUIRE) && sluice_rt_now_ms() < until)
		usleep(1000);
	cr_assert(__atomic_load_n(&c->rt.sleeping, __ATOMIC_ACQUIRE), "the core went to sleep");
	usleep(20 * 1000); /* most likely inside poll(2) now; correct either way */
}

static void on_post_count(void *arg)
{
	struct tcore *c = arg;
	c->posts_run++;
}

/* Proves a wake from another thread ends the core's sleep (a sleep with no
 * timeout) and its work is seen, and that a stop ends the loop after
 * running a post given before it. */
Test(runtime, wake_from_another_thread_ends_sleep)
{
	static struct tcore c;
	rt_open(&c.rt, 1);
	cr_assert_eq(sluice_rt_start(&c.rt, &tc_hooks, &c), 0);
	for (int round = 0; round < 3; round++) {
		wait_until_sleeping(&c);
		__atomic_store_n(&c.flag, 1, __ATOMIC_RELEASE);
		sluice_rt_wake(&c.rt);
		int64_t until = sluice_rt_now_ms() + WAKE_BOUND_MS;
		while (__atomic_load_n(&c.seen, __ATOMIC_ACQUIRE) <= round && sluice_rt_now_ms() < until)
			usleep(100);
		cr_assert_eq(__atomic_load_n(&c.seen, __ATOMIC_ACQUIRE), round + 1, "woken within %d ms", WAKE_BOUND_MS);
	}
	wait_until_sleeping(&c);
	struct sluice_rt_post p = {.fn = on_post_count, .arg = &c};
	sluice_rt_post(&c.rt, &p);
	sluice_rt_stop(&c.rt);
	sluice_rt_join(&c.rt);
	cr_assert_eq(c.posts_run, 1, "a post before the stop ran");
	sluice_rt_fini(&c.rt);
}

/* ---- send with backlog ----------------------------------------------------- */

static void expect_pop(struct sluice_ring *r, uint32_t type)
{
	struct sluice_msg m;
	cr_assert(sluice_ring_pop(r, &m), "message %u there", type);
	cr_assert_eq(m.type, type);
}

/* Proves order: a full ring sends the rest to the backlog, later messages
 * to an empty ring queue behind them, flushing sends what room allows in
 * order and stops at the first that does not fit. */
Test(runtime, backlog_keeps_order_and_drains)
{
	static struct sluice_rt a, b;
	rt_open(&a, 0);
	rt_open(&b, 1);
	struct sluice_ring r1, r2;
	cr_assert_eq(sluice_ring_init(&r1, 4), 0);
	cr_assert_eq(sluice_ring_init(&r2, 4), 0);
	static int x;
	for (uint32_t i = 1; i <= 10; i++)
		cr_assert(sluice_rt_send(&a, &r1, &b, (struct sluice_msg){i, 0, &x}));
	cr_assert_eq(sluice_rt_backlog_n(&a), 6);
	cr_assert(sluice_rt_send(&a, &r2, &b, (struct sluice_msg){100, 0, &x}));
	cr_assert_eq(sluice_rt_backlog_n(&a), 7, "a message to another ring waits behind the backlog");
	cr_assert_eq(sluice_rt_flush(&a), 0, "no room yet");
	expect_pop(&r1, 1);
	expect_pop(&r1, 2);
	cr_assert_eq(sluice_rt_flush(&a), 2);
	for (uint32_t i = 3; i <= 6; i++)
		expect_pop(&r1, i);
	struct sluice_msg m;
	cr_assert(!sluice_ring_pop(&r2, &m), "100 still waits behind 7..10");
	cr_assert_eq(sluice_rt_flush(&a), 5, "7..10 fit, then 100 into its own ring");
	for (uint32_t i = 7; i <= 10; i++)
		expect_pop(&r1, i);
	expect_pop(&r2, 100);
	cr_assert_eq(sluice_rt_backlog_n(&a), 0);
	cr_assert(sluice_rt_send(&a, &r1, &b, (struct sluice_msg){11, 0, &x}));
	cr_assert_eq(sluice_rt_backlog_n(&a), 0, "with the backlog empty a message goes straight in");
	expect_pop(&r1, 11);
	sluice_ring_free(&r1);
	sluice_ring_free(&r2);
	sluice_rt_fini(&a);
	sluice_rt_fini(&b);
}

/* Proves the backlog grows past its first size keeping order, then refuses
 * (returns false, changes nothing) at SLUICE_RT_BACKLOG_MAX, and drains. */
Test(runtime, backlog_grows_in_order_and_refuses_at_its_limit)
{
	static struct sluice_rt a, b;
	rt_open(&a, 0);
	rt_open(&b, 1);
	struct sluice_ring r;
	cr_assert_eq(sluice_ring_init(&r, 1024), 0);
	uint32_t total = 1024 + SLUICE_RT_BACKLOG_MAX;
	static int x;
	for (uint32_t i = 1; i <= total; i++)
		cr_assert(sluice_rt_send(&a, &r, &b, (struct sluice_msg){i, 0, &x}));
	cr_assert_eq(sluice_rt_backlog_n(&a), SLUICE_RT_BACKLOG_MAX);
	cr_assert(!sluice_rt_send(&a, &r, &b, (struct sluice_msg){total + 1, 0, &x}), "refused at the limit");
	cr_assert_eq(sluice_rt_backlog_n(&a), SLUICE_RT_BACKLOG_MAX);
	uint32_t next = 1;
	while (next <= total) {
		struct sluice_msg m;
		while (sluice_ring_pop(&r, &m)) {
			if (m.type != next)
				cr_assert_fail("message %u came where %u was due", m.type, next);
			next++;
		}
		sluice_rt_flush(&a);
	}
	cr_assert_eq(sluice_rt_backlog_n(&a), 0);
	sluice_ring_free(&r);
	sluice_rt_fini(&a);
	sluice_rt_fini(&b);
}

/* ---- posts from several threads ----------------------------------------- */

#define POSTERS 4
#define POSTS_EACH 20000

struct post_item {
	struct sluice_rt_post post;
	int poster, index;
};

static struct post_item items[POSTERS][POSTS_EACH];
static int runs[POSTERS][POSTS_EACH];
static int last_index[POSTERS];
static int out_of_order;
static struct tcore pc;

static void on_item(void *arg)
{
	struct post_item *it = arg;
	runs[it->poster][it->index]++;
	if (it->index != last_index[it->poster] + 1)
		out_of_order++;
	last_index[it->poster] = it->index;
}

static void *poster_main(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < POSTS_EACH; i++) {
		items[t][i] = (struct post_item){{NULL, on_item, &items[t][i]}, t, i};
		sluice_rt_post(&pc.rt, &items[t][i].post);
		if (i % 1000 == 0)
			usleep(100); /* let the core sleep between bursts sometimes */
	}
	return NULL;
}

/* Proves every post from POSTERS threads runs exactly once on the core's
 * thread, each poster's in its order, all of them by the time a stop given
 * after the last post has ended the loop. */
Test(runtime, posts_from_several_threads_run_once)
{
	rt_open(&pc.rt, 2);
	for (int t = 0; t < POSTERS; t++)
		last_index[t] = -1;
	cr_assert_eq(sluice_rt_start(&pc.rt, &tc_hooks, &pc), 0);
	pthread_t th[POSTERS];
	for (int t = 0; t < POSTERS; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, poster_main, (void *)(intptr_t)t), 0);
	for (int t = 0; t < POSTERS; t++)
		pthread_join(th[t], NULL);
	sluice_rt_stop(&pc.rt);
	sluice_rt_join(&pc.rt);
	for (int t = 0; t < POSTERS; t++)
		for (int i = 0; i < POSTS_EACH; i++)
			if (runs[t][i] != 1)
				cr_assert_fail("post %d of thread %d ran %d times", i, t, runs[t][i]);
	cr_assert_eq(out_of_order, 0);
	sluice_rt_fini(&pc.rt);
}
