/* The core runtime (runtime.h): a core's thread, its loop skeleton and
 * sleep, the wake protocol, timers, the backlog of messages waiting for
 * room in other cores' rings, the post channel from other threads, and
 * placement of partitions on storage cores. Written once here so the
 * network and storage cores share it instead of each carrying a copy. */
#include "dataplane/runtime.h"
#include "dataplane/core.h"
#include <assert.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* ---- identity, thread, stop -------------------------------------------- */

int sluice_rt_init(struct sluice_rt *rt, struct broker *b, enum sluice_rt_kind kind, int id)
{
	assert(id >= 0 && id < SLUICE_CORES_MAX);
	assert(kind == SLUICE_RT_NET || kind == SLUICE_RT_STORE);
	memset(rt, 0, sizeof *rt);
	rt->id = id;
	rt->kind = kind;
	rt->b = b;
	rt->efd = eventfd(0, EFD_CLOEXEC);
	return rt->efd < 0 ? -1 : 0;
}

void sluice_rt_fini(struct sluice_rt *rt)
{
	assert(!rt->started); /* joined first */
	if (rt->efd >= 0)
		close(rt->efd);
	rt->efd = -1;
	free(rt->backlog.items);
	rt->backlog = (struct sluice_rt_backlog){0};
}

static void *rt_thread_main(void *arg)
{
	struct sluice_rt *rt = arg;
	char name[16];
	snprintf(name, sizeof name, "sluice-%s%d", rt->kind == SLUICE_RT_NET ? "net" : "store", rt->id);
	pthread_setname_np(pthread_self(), name);
	sluice_rt_run(rt, rt->hooks, rt->core);
	return NULL;
}

int sluice_rt_start(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core)
{
	assert(!rt->started && rt->efd >= 0);
	assert(h && h->drain && h->poll);
	rt->hooks = h;
	rt->core = core;
	if (pthread_create(&rt->thread, NULL, rt_thread_main, rt) != 0)
		return -1;
	rt->started = true;
	if (rt->b)
		sluice_rt_pin(rt->b, rt->thread, rt->kind == SLUICE_RT_NET ? rt->id : rt->b->net_n + rt->id);
	return 0;
}

void sluice_rt_join(struct sluice_rt *rt)
{
	assert(rt->started);
	pthread_join(rt->thread, NULL);
	rt->started = false;
}

void sluice_rt_stop(struct sluice_rt *rt)
{
	assert(rt->efd >= 0);
	__atomic_store_n(&rt->stop, 1, __ATOMIC_SEQ_CST);
	uint64_t one = 1; /* whether or not it sleeps: a stop is never lost */
	ssize_t w = write(rt->efd, &one, sizeof one);
	(void)w;
}

void sluice_rt_pin(const struct broker *b, pthread_t t, int slot)
{
	assert(slot >= 0 && slot < 2 * SLUICE_CORES_MAX);
	if (!b->cfg.cpu_affinity || b->ncpu <= 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(slot % b->ncpu, &set);
	pthread_setaffinity_np(t, sizeof set, &set);
}

/* ---- wake and clock ---------------------------------------------------- */

void sluice_rt_wake(struct sluice_rt *rt)
{
	assert(rt->efd >= 0);
	if (__atomic_load_n(&rt->sleeping, __ATOMIC_SEQ_CST) && __atomic_exchange_n(&rt->sleeping, 0, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		ssize_t w = write(rt->efd, &one, sizeof one);
		(void)w; /* only EAGAIN at a counter near 2^64: the core is awake then */
	}
}

int64_t sluice_rt_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- timers: a binary min-heap by (due_ms, seq) ------------------------- */

static bool timer_before(const struct sluice_rt_timer *a, const struct sluice_rt_timer *b)
{
	return a->due_ms < b->due_ms || (a->due_ms == b->due_ms && a->seq < b->seq);
}

static void heap_set(struct sluice_rt *rt, uint32_t i, struct sluice_rt_timer *t)
{
	rt->timers[i] = t;
	t->slot = i;
}

static void heap_up(struct sluice_rt *rt, uint32_t i)
{
	struct sluice_rt_timer *t = rt->timers[i];
	while (i > 0 && timer_before(t, rt->timers[(i - 1) / 2])) {
		heap_set(rt, i, rt->timers[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_set(rt, i, t);
}

static void heap_down(struct sluice_rt *rt, uint32_t i)
{
	struct sluice_rt_timer *t = rt->timers[i];
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= rt->timers_n)
			break;
		if (c + 1 < rt->timers_n && timer_before(rt->timers[c + 1], rt->timers[c]))
			c++;
		if (!timer_before(rt->timers[c], t))
			break;
		heap_set(rt, i, rt->timers[c]);
		i = c;
	}
	heap_set(rt, i, t);
}

void sluice_rt_timer_init(struct sluice_rt_timer *t, void (*fn)(void *arg), void *arg)
{
	assert(fn);
	*t = (struct sluice_rt_timer){.slot = SLUICE_RT_TIMER_IDLE, .fn = fn, .arg = arg};
}

int sluice_rt_timer_add(struct sluice_rt *rt, struct sluice_rt_timer *t, int64_t due_ms)
{
	assert(t->fn && t->slot == SLUICE_RT_TIMER_IDLE); /* armed twice is a bug */
	if (rt->timers_n == SLUICE_RT_TIMERS_MAX)
		return -1;
	t->due_ms = due_ms;
	t->seq = rt->timers_seq++;
	heap_set(rt, rt->timers_n++, t);
	heap_up(rt, t->slot);
	assert(rt->timers[t->slot] == t);
	return 0;
}

bool sluice_rt_timer_cancel(struct sluice_rt *rt, struct sluice_rt_timer *t)
{
	if (t->slot == SLUICE_RT_TIMER_IDLE)
		return false;
	uint32_t i = t->slot;
	assert(i < rt->timers_n && rt->timers[i] == t); /* armed on this core */
	t->slot = SLUICE_RT_TIMER_IDLE;
	struct sluice_rt_timer *last = rt->timers[--rt->timers_n];
	if (last != t) {
		heap_set(rt, i, last);
		heap_up(rt, i);
		heap_down(rt, last->slot);
	}
	return true;
}

int64_t sluice_rt_timer_next_due(const struct sluice_rt *rt)
{
	return rt->timers_n ? rt->timers[0]->due_ms : INT64_MAX;
}

/* A timer re-armed by its own fn for a time already past gets a newer seq
 * and waits for the next call (as may timers due after it), so a periodic
 * timer cannot hold the core in one call. */
int sluice_rt_timers_run(struct sluice_rt *rt, int64_t now_ms)
{
	uint64_t seq_end = rt->timers_seq;
	int ran = 0;
	while (rt->timers_n && rt->timers[0]->due_ms <= now_ms && rt->timers[0]->seq < seq_end) {
		struct sluice_rt_timer *t = rt->timers[0];
		bool was = sluice_rt_timer_cancel(rt, t);
		assert(was && t->slot == SLUICE_RT_TIMER_IDLE);
		(void)was;
		t->fn(t->arg);
		ran++;
	}
	return ran;
}

/* ---- sending with a backlog ------------------------------------------- */

static bool backlog_grow(struct sluice_rt_backlog *bl)
{
	assert(bl->n == bl->cap);
	if (bl->cap == SLUICE_RT_BACKLOG_MAX)
		return false;
	uint32_t cap = bl->cap ? bl->cap * 2 : SLUICE_RT_BACKLOG_MIN;
	struct sluice_rt_pending *items = malloc(cap * sizeof *items);
	if (!items)
		return false;
	for (uint32_t i = 0; i < bl->n; i++)
		items[i] = bl->items[(bl->head + i) & (bl->cap - 1)];
	free(bl->items);
	bl->items = items;
	bl->head = 0;
	bl->cap = cap;
	assert(bl->n < bl->cap);
	return true;
}

/* Remember to wake `to` at the end of the batch. Deferring is safe: the
 * message is in the ring already, so a target that goes to sleep before the
 * wake sees it in its last look (pending), and one asleep is woken then. */
static void wake_later(struct sluice_rt *rt, struct sluice_rt *to)
{
	for (uint32_t i = 0; i < rt->wakes_n; i++)
		if (rt->wakes[i] == to)
			return;
	if (rt->wakes_n == SLUICE_RT_WAKES_MAX) {
		sluice_rt_wake(to); /* more targets than cores exist: never, but never lose a wake */
		return;
	}
	rt->wakes[rt->wakes_n++] = to;
}

void sluice_rt_wakes(struct sluice_rt *rt)
{
	for (uint32_t i = 0; i < rt->wakes_n; i++)
		sluice_rt_wake(rt->wakes[i]);
	rt->wakes_n = 0;
}

bool sluice_rt_send(struct sluice_rt *rt, struct sluice_ring *ring, struct sluice_rt *to, struct sluice_msg m)
{
	struct sluice_rt_backlog *bl = &rt->backlog;
	assert(ring && to && to != rt);
	assert(m.type != 0 && m.from_core == (uint32_t)rt->id);
	if (bl->n == 0 && sluice_ring_push(ring, m)) {
		wake_later(rt, to);
		return true;
	}
	if (bl->n == bl->cap && !backlog_grow(bl))
		return false;
	bl->items[(bl->head + bl->n) & (bl->cap - 1)] = (struct sluice_rt_pending){m, ring, to};
	bl->n++;
	assert(bl->n <= bl->cap && bl->cap <= SLUICE_RT_BACKLOG_MAX);
	return true;
}

uint32_t sluice_rt_flush(struct sluice_rt *rt)
{
	struct sluice_rt_backlog *bl = &rt->backlog;
	uint32_t sent = 0;
	while (bl->n) {
		struct sluice_rt_pending *it = &bl->items[bl->head];
		if (!sluice_ring_push(it->ring, it->m))
			break;
		wake_later(rt, it->to);
		bl->head = (bl->head + 1) & (bl->cap - 1);
		bl->n--;
		sent++;
	}
	assert(bl->n <= bl->cap);
	return sent;
}

uint32_t sluice_rt_backlog_n(const struct sluice_rt *rt)
{
	return rt->backlog.n;
}

/* ---- posts from other threads ----------------------------------------- */

void sluice_rt_post(struct sluice_rt *rt, struct sluice_rt_post *p)
{
	assert(p && p->fn);
	struct sluice_rt_post *head = __atomic_load_n(&rt->posts, __ATOMIC_RELAXED);
	do
		p->next = head;
	while (!__atomic_compare_exchange_n(&rt->posts, &head, p, true, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
	sluice_rt_wake(rt);
}

/* The whole stack is taken at once (so no ABA), newest first, and reversed
 * into the order of posting. Newer posts wait until those taken have run. */
uint32_t sluice_rt_run_posts(struct sluice_rt *rt)
{
	if (!rt->taken) {
		struct sluice_rt_post *s = __atomic_exchange_n(&rt->posts, NULL, __ATOMIC_SEQ_CST), *fifo = NULL;
		while (s) {
			struct sluice_rt_post *next = s->next;
			s->next = fifo;
			fifo = s;
			s = next;
		}
		rt->taken = fifo;
	}
	uint32_t ran = 0;
	while (rt->taken && ran < SLUICE_RT_POSTS_PER_TURN) {
		struct sluice_rt_post *p = rt->taken;
		rt->taken = p->next;
		void (*fn)(void *) = p->fn;
		void *arg = p->arg;
		assert(fn);
		fn(arg); /* p may be gone from here on */
		ran++;
	}
	return ran;
}

/* ---- the loop --------------------------------------------------------- */

static void turn_work(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core)
{
	rt->pass++;
	h->drain(core);
	sluice_rt_run_posts(rt);
	int64_t now = sluice_rt_now_ms();
	sluice_rt_timers_run(rt, now);
	if (h->work)
		h->work(core, now);
	sluice_rt_flush(rt);
	sluice_rt_wakes(rt);
	rt->turns++;
}

/* Sleep until the next timer, the core's deadline or a wake, at most
 * sleep_max_ms; not at all when work is already waiting. `sleeping` is set
 * before the last look, so a wake in between is not lost. */
static void turn_sleep(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core, int64_t sleep_max_ms)
{
	int64_t max = sleep_max_ms < 0 ? 0 : sleep_max_ms > SLUICE_RT_SLEEP_MS_MAX ? SLUICE_RT_SLEEP_MS_MAX : sleep_max_ms;
	int64_t now = sluice_rt_now_ms();
	int64_t until = sluice_rt_timer_next_due(rt);
	if (h->deadline) {
		int64_t d = h->deadline(core, now);
		until = d < until ? d : until;
	}
	int64_t wait = until == INT64_MAX ? max : until - now;
	wait = wait < 0 ? 0 : wait > max ? max : wait;
	__atomic_store_n(&rt->sleeping, 1, __ATOMIC_SEQ_CST);
	if (wait > 0 && (__atomic_load_n(&rt->posts, __ATOMIC_SEQ_CST) || rt->taken || rt->backlog.n ||
			 (h->pending && h->pending(core))))
		wait = 0;
	rt->pass++; /* what arrives in the poll is stamped after its wait */
	h->poll(core, wait);
	__atomic_store_n(&rt->sleeping, 0, __ATOMIC_SEQ_CST);
	sluice_rt_wakes(rt); /* for what the poll's upcalls sent */
	assert(wait >= 0 && wait <= SLUICE_RT_SLEEP_MS_MAX);
}

void sluice_rt_turn(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core, int64_t sleep_max_ms)
{
	assert(h && h->drain && h->poll);
	turn_work(rt, h, core);
	turn_sleep(rt, h, core, sleep_max_ms);
}

/* A stop is seen at the start of a turn; that turn still runs whole (what
 * it drains is answered, the backlog flushed), then the posts given before
 * the stop, and the loop ends without sleeping. */
void sluice_rt_run(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core)
{
	assert(h && h->drain && h->poll);
	assert(h->sleep_max_ms > 0 && h->sleep_max_ms <= SLUICE_RT_SLEEP_MS_MAX);
	rt->hooks = h;
	rt->core = core;
	if (h->begin)
		h->begin(core);
	for (;;) {
		bool stopping = __atomic_load_n(&rt->stop, __ATOMIC_ACQUIRE) != 0;
		turn_work(rt, h, core);
		if (stopping)
			break;
		turn_sleep(rt, h, core, h->sleep_max_ms);
	}
	while (sluice_rt_run_posts(rt) > 0)
		; /* posts given before the stop all run */
	sluice_rt_flush(rt);
	sluice_rt_wakes(rt);
	if (h->end)
		h->end(core);
}

/* ---- placement -------------------------------------------------------- */

uint64_t sluice_rt_hash_tp(const char *t, int32_t p)
{
	uint64_t h = 1469598103934665603ull;
	for (; *t; t++)
		h = (h ^ (uint8_t)*t) * 1099511628211ull;
	h = (h ^ (uint32_t)p) * 1099511628211ull;
	return h ^ (h >> 29);
}

int sluice_rt_core_for(const struct broker *b, const char *topic, int32_t partition)
{
	assert(b->store_n > 0 && b->store_n <= SLUICE_CORES_MAX);
	int core = (int)(sluice_rt_hash_tp(topic, partition) % (uint64_t)b->store_n);
	assert(core >= 0 && core < b->store_n);
	return core;
}

/* The older name, still called by the network core and the coordinator. */
int sluice_store_core_for(const struct broker *b, const char *topic, int32_t partition)
{
	return sluice_rt_core_for(b, topic, partition);
}
