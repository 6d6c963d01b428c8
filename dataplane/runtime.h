/* The core runtime: what every core of the broker (network and storage) is
 * built on, so that the loop is written once. A core is a pinned thread
 * with a private, cache-aligned struct sluice_rt: its identity, an eventfd
 * and a `sleeping` flag (the wake protocol below), per-core timers, a
 * backlog of messages that found another core's ring full, and a
 * multi-producer post channel for threads that are not cores. The loop
 * (sluice_rt_run) turns: drain inbound messages, run posts, run due timers,
 * the core's own work, flush the backlog; then, with nothing pending, it
 * sleeps in the kernel (or busy-polls: that is the backend's business)
 * through the core's poll hook until the next timer, the core's own
 * deadline, or a wake. The core supplies the hooks; the runtime knows
 * nothing of partitions, connections or io_uring.
 *
 * Wake protocol: before its last look for work, the core sets `sleeping`
 * (sequentially consistent); a producer that pushed work and sees
 * `sleeping` set clears it and writes the eventfd, which the core's poll
 * must watch (io_uring: a read armed on it; epoll: the fd in the set; a
 * busy-polling backend: `sleeping` itself). Neither side can miss the
 * other: either the core sees the work, or the producer sees the flag.
 *
 * Threads: everything here but sluice_rt_wake, sluice_rt_stop and
 * sluice_rt_post is for the owning core's thread only (or the main thread
 * before start / after join).
 *
 * The two cores on it: the storage core (dataplane/storage_core.c; poll:
 * its io_uring) and the network core (dataplane/netcore.c; drain: storage
 * replies; work: parked fetches' expiry, throttled connections; the sweep
 * a timer; poll: the transport backend's op, so the io_uring backend waits
 * in the kernel with a read armed on efd and a DPDK one busy-polls; end:
 * close every connection and keep turning, with sluice_rt_turn, until they
 * are freed). Each sends to the other with sluice_rt_send and pushes back
 * when it refuses: the storage core stops taking ops, the network core
 * stops reading requests. */
#ifndef SLUICE_RUNTIME_H
#define SLUICE_RUNTIME_H
#include "common/ring.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SLUICE_CORES_MAX 64 /* network cores, and storage cores, each at most */
#define SLUICE_RT_WAKES_MAX (2 * SLUICE_CORES_MAX) /* distinct cores one core may send to */
/* Timers one core may have armed at once; add past it is refused. */
#define SLUICE_RT_TIMERS_MAX 256
/* Messages one core may keep waiting for room in other cores' rings; the
 * backlog starts at SLUICE_RT_BACKLOG_MIN and doubles towards it. */
#define SLUICE_RT_BACKLOG_MIN 1024u
#define SLUICE_RT_BACKLOG_MAX (1u << 20)
/* Posts run in one turn at most; the rest wait for the next turn. */
#define SLUICE_RT_POSTS_PER_TURN 4096
/* A core sleeps at most this long whatever its hooks say. */
#define SLUICE_RT_SLEEP_MS_MAX 1000

_Static_assert(SLUICE_CORES_MAX <= UINT32_MAX, "struct sluice_msg's from_core holds a core id");
_Static_assert((SLUICE_RT_BACKLOG_MIN & (SLUICE_RT_BACKLOG_MIN - 1)) == 0, "the backlog is a power-of-two ring");
_Static_assert((SLUICE_RT_BACKLOG_MAX & (SLUICE_RT_BACKLOG_MAX - 1)) == 0, "the backlog is a power-of-two ring");
_Static_assert(SLUICE_RT_BACKLOG_MIN <= SLUICE_RT_BACKLOG_MAX, "the backlog grows from its minimum to its maximum");
_Static_assert(SLUICE_RT_TIMERS_MAX < UINT32_MAX, "a timer's heap slot is a uint32_t");

struct broker;

enum sluice_rt_kind { SLUICE_RT_NET = 1, SLUICE_RT_STORE };

/* A timer, owned by its caller (usually embedded in what it is for); the
 * heap holds pointers to armed timers. fn runs on the core's thread; it may
 * re-arm its own timer (a periodic timer) or arm and cancel others. */
#define SLUICE_RT_TIMER_IDLE UINT32_MAX
struct sluice_rt_timer {
	int64_t due_ms;  /* monotonic (sluice_rt_now_ms) */
	uint64_t seq;    /* order of arming: equal due times fire in that order */
	uint32_t slot;   /* index in the heap, SLUICE_RT_TIMER_IDLE when not armed */
	void (*fn)(void *arg);
	void *arg;
};

/* A post into a core from any thread. The poster owns it until fn starts
 * (on the core's thread; the runtime no longer touches it then, so fn may
 * free or reuse it). Posts run in the order they were posted. */
struct sluice_rt_post {
	struct sluice_rt_post *next;
	void (*fn)(void *arg);
	void *arg;
};

/* A message that found its ring full: where it goes, and whom to wake. */
struct sluice_rt_pending {
	struct sluice_msg m;
	struct sluice_ring *ring;
	struct sluice_rt *to;
};

struct sluice_rt_backlog {
	struct sluice_rt_pending *items; /* power-of-two ring, grown by doubling */
	uint32_t head, n, cap;           /* cap <= SLUICE_RT_BACKLOG_MAX */
};

/* What a core supplies. Every hook gets the `core` pointer given to
 * sluice_rt_start / sluice_rt_run. drain and poll are required. */
struct sluice_rt_hooks {
	/* On the core's thread before the first turn, and after the last. */
	void (*begin)(void *core);
	void (*end)(void *core);
	/* Take inbound messages from the core's rings; true if there were any. */
	bool (*drain)(void *core);
	/* The core's work for this turn, after inbound messages and timers. */
	void (*work)(void *core, int64_t now_ms);
	/* With `sleeping` set: whether work is waiting that the runtime cannot
	 * see (messages in the core's rings, a helper thread's results). */
	bool (*pending)(void *core);
	/* The latest time (monotonic ms) the core must wake by, besides its
	 * timers; INT64_MAX for none. */
	int64_t (*deadline)(void *core, int64_t now_ms);
	/* Run completions, waiting at most wait_ms (0: do not wait) for the
	 * first, and return early when the eventfd is written. */
	void (*poll)(void *core, int64_t wait_ms);
	/* The longest one sleep, at most SLUICE_RT_SLEEP_MS_MAX. */
	int64_t sleep_max_ms;
};

struct sluice_rt {
	int efd;      /* written to wake the core */
	int sleeping; /* atomic: set while the core may wait in poll */
	int id;       /* < SLUICE_CORES_MAX */
	enum sluice_rt_kind kind;
	struct broker *b; /* for pinning and placement; NULL in tests */
	pthread_t thread;
	bool started;
	const struct sluice_rt_hooks *hooks; /* while running */
	void *core;
	uint64_t turns;
	/* Bumped as each turn's work starts and before each poll, never 0
	 * once the loop runs: what the core caches for one pass of its loop
	 * (the clock it stamps requests with) keys on it. */
	uint64_t pass;
	struct sluice_rt_backlog backlog;
	uint32_t timers_n;
	uint64_t timers_seq;
	struct sluice_rt_timer *timers[SLUICE_RT_TIMERS_MAX]; /* min-heap by (due_ms, seq) */
	struct sluice_rt_post *taken; /* taken from posts, oldest first, not run yet */
	/* Cores this one sent to since it last woke them (sluice_rt_wakes):
	 * one wake per target per batch, not one write(2) per message. */
	uint32_t wakes_n;
	struct sluice_rt *wakes[SLUICE_RT_WAKES_MAX];
	/* Written by other threads: each on its own cache line. */
	_Alignas(64) int stop;                  /* atomic: the loop ends after its next turn */
	_Alignas(64) struct sluice_rt_post *posts; /* atomic: Treiber stack, newest first */
};

/* Set up rt (and its eventfd) for core `id` of `kind`; -1 if the eventfd
 * cannot be had. sluice_rt_fini gives back what init and the loop took. */
int sluice_rt_init(struct sluice_rt *rt, struct broker *b, enum sluice_rt_kind kind, int id);
void sluice_rt_fini(struct sluice_rt *rt);

/* Start the core's thread (named sluice-net<id> / sluice-store<id>, pinned
 * when cpu.affinity is on) running sluice_rt_run; join it after
 * sluice_rt_stop. */
int sluice_rt_start(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core);
void sluice_rt_join(struct sluice_rt *rt);
/* From any thread: end the loop after one more turn (no sleep); posts
 * given before the stop still run. */
void sluice_rt_stop(struct sluice_rt *rt);

/* The loop, on the calling thread: begin, turns until stopped, end. */
void sluice_rt_run(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core);
/* One turn and its sleep of at most sleep_max_ms (for shutdown drains that
 * keep turning after the loop ended). */
void sluice_rt_turn(struct sluice_rt *rt, const struct sluice_rt_hooks *h, void *core, int64_t sleep_max_ms);

/* From any thread: wake rt if it sleeps (the wake protocol above). */
void sluice_rt_wake(struct sluice_rt *rt);

/* The monotonic clock, in milliseconds. */
int64_t sluice_rt_now_ms(void);

/* Timers (the core's thread). add: 0, or -1 when SLUICE_RT_TIMERS_MAX are
 * armed already (refused, nothing changes); t must not be armed. cancel:
 * whether t was armed. next_due: INT64_MAX when none. run_due: runs every
 * timer due at now_ms that was armed before the call, earliest first;
 * returns how many ran. */
void sluice_rt_timer_init(struct sluice_rt_timer *t, void (*fn)(void *arg), void *arg);
int sluice_rt_timer_add(struct sluice_rt *rt, struct sluice_rt_timer *t, int64_t due_ms);
bool sluice_rt_timer_cancel(struct sluice_rt *rt, struct sluice_rt_timer *t);
int64_t sluice_rt_timer_next_due(const struct sluice_rt *rt);
int sluice_rt_timers_run(struct sluice_rt *rt, int64_t now_ms);

/* Send m to another core through ring (rt is its only producer) and wake
 * `to` when this core's batch ends (sluice_rt_wakes, which the loop calls
 * after each turn's work and after each poll: a burst of frames read in one
 * poll, or the completions of one, costs each target one wake). Once a message waits on the backlog, every later one queues behind
 * it, whatever its ring: order holds per core. False (and nothing sent)
 * when the backlog holds SLUICE_RT_BACKLOG_MAX messages or cannot grow:
 * the caller pushes back. flush: push what the rings now take, in order
 * (the loop does it every turn); returns how many went. */
bool sluice_rt_send(struct sluice_rt *rt, struct sluice_ring *ring, struct sluice_rt *to, struct sluice_msg m);
uint32_t sluice_rt_flush(struct sluice_rt *rt);
/* Wake the cores sent to since the last call (the wake protocol: only those
 * asleep are written to). The loop calls it; code that sends outside the
 * loop (a shutdown drain) calls it before waiting. */
void sluice_rt_wakes(struct sluice_rt *rt);
uint32_t sluice_rt_backlog_n(const struct sluice_rt *rt);

/* From any thread: run p->fn(p->arg) on rt's thread in a coming turn, and
 * wake it. run_posts (the loop does it every turn): the posts taken so far,
 * oldest first, at most SLUICE_RT_POSTS_PER_TURN; returns how many ran. */
void sluice_rt_post(struct sluice_rt *rt, struct sluice_rt_post *p);
uint32_t sluice_rt_run_posts(struct sluice_rt *rt);

/* Placement: the storage core that owns a topic partition, by a hash of
 * the two (FNV-1a, mixed; also the storage cores' table hash). */
int sluice_rt_core_for(const struct broker *b, const char *topic, int32_t partition);
uint64_t sluice_rt_hash_tp(const char *topic, int32_t partition);

/* Pin thread t to the CPU for slot (network cores take slots 0..net_n-1,
 * storage cores the next ones) when cpu.affinity is on. */
void sluice_rt_pin(const struct broker *b, pthread_t t, int slot);

#endif
