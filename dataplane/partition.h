/* A partition's state above its log, in one place: what consumers may read
 * (the high watermark) as opposed to what is written here (the log's written
 * end) and what is assigned (the log end offset), this replica's role
 * (leader or follower, as the controller last said), the leader epoch and
 * its epoch -> start offset cache, the replicas' positions and the ISR, the
 * idempotent-producer table, the appends waiting for their data to become
 * visible (acks=all) or written (acks=0/1), the DeleteRecords waiting for
 * every live replica's log start (the low watermark), and the network cores
 * whose fetches wait for new data. It is where replication's rules live as pure
 * functions: a leader's high watermark is the least position over the ISR
 * (each follower's position comes with its fetch,
 * sluice_partition_replica_position), a follower's the leader's high
 * watermark capped by what it has written, and the controller's word
 * arrives through sluice_partition_set_leader. On a single node the ISR is
 * {self} and the high watermark follows the written end exactly.
 *
 * Ownership: a partition belongs to the storage core that owns its log and
 * is touched only by it. The log (storage/plog.h) is the storage core's: it
 * opens, budgets and closes it; the partition borrows it between
 * sluice_partition_attach and sluice_partition_fini. storage/ knows nothing
 * of this module. */
#ifndef SLUICE_PARTITION_H
#define SLUICE_PARTITION_H
#include "dataplane/core.h"
#include <stdbool.h>
#include <stdint.h>

struct sluice_plog;
struct sluice_batch;

/* Replicas a partition may have (Kafka's practical maximum is far below). */
#define SLUICE_PARTITION_REPLICAS_MAX 16
/* Entries of the leader-epoch cache kept in memory; past it the oldest is
 * dropped (see sluice_partition_epoch_end_offset). Leader changes are rare:
 * a log's retained range seldom spans more. */
#define SLUICE_PARTITION_EPOCHS_MAX 16
/* Idempotent producers remembered per partition; past it all are forgotten
 * (treated as unknown, which accepts their next sequence): bounded memory. */
#define SLUICE_PARTITION_PRODUCERS_MAX 65536
/* Batches remembered per producer, so a retry gets its original offsets. */
#define SLUICE_PARTITION_PRODUCER_BATCHES 5
/* Kafka's UNDEFINED_EPOCH and UNDEFINED_EPOCH_OFFSET. */
#define SLUICE_EPOCH_UNDEFINED (-1)
#define SLUICE_EPOCH_OFFSET_UNDEFINED (-1)

#define SLUICE_PARTITION_WAITER_WORDS ((SLUICE_CORES_MAX + 63) / 64)
_Static_assert(SLUICE_PARTITION_WAITER_WORDS * 64 >= SLUICE_CORES_MAX, "a fetch-waiter bit for every core");
_Static_assert(SLUICE_CORES_MAX - 1 <= UINT8_MAX, "partop.net_core (uint8_t) holds every network core id");
_Static_assert(SLUICE_PARTITION_PRODUCER_BATCHES <= UINT8_MAX, "producer ring positions are uint8_t");
_Static_assert(SLUICE_PARTITION_REPLICAS_MAX <= UINT8_MAX, "replica counts are uint8_t");

/* Idempotent-producer state for one producer on one partition: its epoch,
 * last sequence, and its last batches. */
struct sluice_producer {
	int64_t pid; /* -1: free slot */
	int16_t epoch;
	int32_t last_seq;
	uint8_t n, pos;
	struct {
		int32_t first_seq, last_seq;
		int64_t base_offset, last_offset;
	} recent[SLUICE_PARTITION_PRODUCER_BATCHES];
};

struct sluice_epoch_entry {
	int32_t epoch;
	int64_t start_offset; /* first offset appended under this epoch */
};

/* A replica as its leader tracks it (Kafka's ReplicaState). */
struct sluice_replica {
	int32_t id;       /* broker id */
	bool in_isr;
	/* Its last known log end offset: for self the written end, for a
	 * follower the FetchOffset of its last fetch; 0 until it fetches from
	 * this leader (a position nobody is below: the high watermark waits). */
	int64_t log_end;
	/* When it was last caught up: its fetch reached the leader's written
	 * end, or the end the leader had at its previous fetch (Kafka's
	 * lastCaughtUpTimeMs). Set to the leadership's start for every
	 * replica, so a follower is judged lagging only after
	 * replica.lag.time.max.ms under this leader. */
	int64_t caught_up_ms;
	int64_t last_fetch_ms;       /* its previous fetch */
	int64_t last_fetch_leader_end; /* the leader's written end at that fetch */
	bool fetched;                /* it fetched from this leadership (its position is its own) */
	bool isr_adding;             /* an ISR change adding it is in flight (counts as in the ISR: KIP-497) */
	int64_t log_start;           /* its log start offset, as its last fetch said (-1: unknown) */
	int64_t hw_told;             /* the highest high watermark its fetches were read with (-1: none) */
};

/* The controller's word on a partition (a snapshot's partition state). */
struct sluice_partition_leadership {
	int32_t leader;          /* broker id; -1: none (offline) */
	int32_t leader_epoch;
	int32_t partition_epoch; /* bumped by every change of leader, ISR or replicas */
	const int32_t *replicas; /* the assignment; must name this replica */
	uint8_t replica_n;
	const int32_t *isr;      /* a subset of replicas */
	uint8_t isr_n;
};

/* What sluice_partition_set_leader made of the controller's word. */
enum sluice_partition_change {
	SLUICE_PARTITION_REFUSED = -1, /* lists too long, or this replica not among them: nothing changed */
	SLUICE_PARTITION_SAME = 0,     /* not newer than what it has (epochs): nothing changed */
	SLUICE_PARTITION_UPDATED,      /* same leader epoch: the ISR or the replicas changed */
	SLUICE_PARTITION_LEADER,       /* leads from now on, at a new leader epoch */
	SLUICE_PARTITION_FOLLOWER,     /* follows (leader_id, -1: nobody yet) at a new leader epoch */
};

struct sluice_partition {
	struct sluice_plog *log; /* borrowed from the storage core; NULL while not open */
	int32_t self_id;         /* this broker's replica id */
	/* The role, as the controller last said (single node: leader, epoch 0,
	 * until told otherwise). A follower takes no produce and serves no
	 * consumer; its log grows only by what it fetches from the leader. */
	bool is_leader;
	bool leadership_known;   /* the controller's word arrived (else any word is newer) */
	int32_t leader_id;       /* -1: none */
	int32_t leader_epoch;
	int32_t partition_epoch;
	int64_t high_watermark;  /* consumers read below it; <= the log's written end */
	int64_t leader_hw;       /* follower: the leader's high watermark, as its last fetch answer said */
	bool isr_pending;        /* leader: an ISR change is out to the controller */
	int64_t isr_join_after_ms; /* leader: no replica asked to join before (a refusal's backoff) */
	bool isr_stale;          /* leader: the controller moved on (a new epoch): no ISR change until its word comes */
	struct sluice_replica replicas[SLUICE_PARTITION_REPLICAS_MAX];
	uint8_t replica_n;
	/* Leader-epoch cache, oldest first, epochs and start offsets both
	 * increasing. The storage core keeps it in the partition directory as
	 * Kafka's leader-epoch-checkpoint: loaded before attach, checked there
	 * against the log, and written whenever epochs_dirty says it changed
	 * (and synced before the log's next roll when epochs_durable: see
	 * sluice_partition_epoch_assign). */
	struct sluice_epoch_entry epochs[SLUICE_PARTITION_EPOCHS_MAX];
	uint8_t epoch_n;
	bool epochs_dropped;     /* the oldest entries were dropped for room */
	bool epochs_dirty;       /* changed since the checkpoint was last written */
	bool epochs_durable;     /* ... in a way the log cannot rebuild once it rolls twice */
	struct sluice_producer *prods; /* open addressing by pid, owned */
	uint32_t prod_cap, prod_n;
	struct partop *wait_head, *wait_tail;   /* acks=all appends waiting to become visible */
	struct partop *local_head, *local_tail; /* acks=0/1 appends waiting to be written here */
	struct partop *del_head, *del_tail;     /* leader: DeleteRecords waiting for the replicas' log starts */
	uint64_t fetch_waiters[SLUICE_PARTITION_WAITER_WORDS]; /* bit per network core */
};

/* Set up p (zeroed or not) for replica self_id: no log, epoch 0, leader,
 * the ISR {self}. fini frees what p owns (not the log, nor waiting ops,
 * which the caller must have answered). */
void sluice_partition_init(struct sluice_partition *p, int32_t self_id);
void sluice_partition_fini(struct sluice_partition *p);
/* The log is open. The high watermark starts at high_watermark (a
 * replicated partition's checkpointed one: Kafka's
 * replication-offset-checkpoint), kept within [log start, written end]; with
 * high_watermark < 0 at the written end (a single replica serves what
 * recovery kept). The epoch cache (loaded from the checkpoint beforehand
 * with sluice_partition_epoch_load, or empty) loses entries past the log
 * end and below its start, and is corrected by the epochs of the newest
 * segments' batches (the log wins: a checkpoint a crash left behind the
 * log); changes made so are durable (written, synced before the next
 * roll). The producer table is rebuilt from the same batches. */
void sluice_partition_attach(struct sluice_partition *p, struct sluice_plog *log, int64_t high_watermark);
/* This replica leads at epoch (Kafka's Partition.makeLeader): the leader
 * epoch becomes at least epoch and starts at the log end in the epoch
 * cache, so OffsetForLeaderEpoch knows it before anything is appended in
 * it (the latest epoch again changes nothing). The log is attached. */
void sluice_partition_become_leader(struct sluice_partition *p, int32_t epoch);

/* Offsets. log_end: the next offset to assign; written_end: the end of
 * what is written here; high_watermark: what consumers may read. Always
 * log_start <= high_watermark <= written_end <= log_end. */
int64_t sluice_partition_log_start(const struct sluice_partition *p);
int64_t sluice_partition_log_end(const struct sluice_partition *p);
int64_t sluice_partition_written_end(const struct sluice_partition *p);
int64_t sluice_partition_high_watermark(const struct sluice_partition *p);

/* The local log's written end moved (the plog's written hook, which may
 * come while the log is still opening): this replica's position, and so
 * the high watermark. Returns true when the high watermark moved. This is
 * the one function through which a single node's high watermark follows
 * its written end. */
bool sluice_partition_on_written(struct sluice_partition *p, int64_t written_end);
/* Leader: a replica's log end offset is known (the leader's own, or a
 * follower's fetch position, at now_ms): the high watermark becomes the
 * least position over the ISR, never moving back and never past the local
 * written end; the replica's caught-up time advances as Kafka's does.
 * Returns true when the high watermark moved; unknown replica ids, and a
 * follower's position on a partition that does not lead, change nothing. */
bool sluice_partition_replica_position(struct sluice_partition *p, int32_t replica_id, int64_t log_end_offset,
				       int64_t now_ms);
/* Leader: a follower's fetch reads here now. Its log start offset (from
 * the request; -1: not sent) is noted, and the answer: whether the high
 * watermark is news to it, above every high watermark an earlier fetch of
 * it was read with (Kafka's KIP-1166: such a fetch is answered at once
 * rather than held for data, so followers, and the consumers they serve,
 * learn a new high watermark without waiting out replica.fetch.wait.max.ms).
 * Unknown ids and a partition that does not lead: false. */
bool sluice_partition_replica_fetch(struct sluice_partition *p, int32_t replica_id, int64_t log_start);
/* Leader: the replica a consumer at offset should read from instead
 * (KIP-392, Kafka's RackAwareReplicaSelector once the consumer's rack is
 * known): among the candidates ids[0..n) (the replicas in its rack), those
 * in the ISR, whose fetches from this leadership hold offset (log start <=
 * offset <= log end), the most caught up (largest log end, then the least
 * time since caught up, then the largest id); -1 for none (or not leading,
 * or the leader itself a candidate: it serves). */
int32_t sluice_partition_read_replica(const struct sluice_partition *p, const int32_t *ids, uint8_t n, int64_t offset,
				      int64_t now_ms);
/* Follower: the leader's high watermark, from a fetch answer. Its own
 * becomes the least of that and its written end (never moving back).
 * Returns true when it moved. */
bool sluice_partition_follower_hw(struct sluice_partition *p, int64_t leader_hw);
/* The controller's word (a snapshot's partition state, or an AlterPartition
 * answer) at now_ms. Applied only when newer: a higher leader epoch, or
 * the same one with a higher partition epoch (the first word always).
 * Becoming leader: every follower's position is unknown again (the high
 * watermark waits for the ISR to fetch; it never moves back) and the new
 * epoch starts at the log end in the epoch cache. Becoming follower: the
 * leader's high watermark is taken as its own until the first fetch
 * answer. The caller does the rest (see enum sluice_partition_change). */
enum sluice_partition_change sluice_partition_set_leader(struct sluice_partition *p,
							 const struct sluice_partition_leadership *l, int64_t now_ms);
/* This replica is no longer one of the partition's (a reassignment moved it
 * away): it neither leads nor follows from now on, its acks=all appends
 * can never become visible here (the caller fails them), and only a word
 * that names it again, at a higher epoch, makes it a replica again. */
void sluice_partition_stop_replica(struct sluice_partition *p);
/* Members of the ISR; max: with the replicas an ISR change in flight adds
 * (Kafka's maximal ISR, which an acks=all answer is checked against). */
uint8_t sluice_partition_isr_n(const struct sluice_partition *p);
uint8_t sluice_partition_max_isr_n(const struct sluice_partition *p);
/* Leader: the ISR to ask the controller for at now_ms (AlterPartition), in
 * isr[] in replica order, or 0 when none is wanted (no change, one in
 * flight, or not leading). As Kafka's maybeShrinkIsr and maybeExpandIsr: a
 * follower not caught up for lag_ms leaves; one outside that has fetched
 * from this leader up to its high watermark and to the start of its epoch,
 * and was caught up within lag_ms (a replica that stopped fetching at the
 * end of an idle log is not), joins; the leader stays. */
uint8_t sluice_partition_isr_wanted(const struct sluice_partition *p, int64_t now_ms, int64_t lag_ms,
				    int32_t isr[SLUICE_PARTITION_REPLICAS_MAX]);
/* The ISR change isr[0..n) went out: until it settles, the replicas it adds
 * count for the high watermark (the maximal ISR: current and joining, as
 * Kafka's KIP-497) and no other change is asked for. settled: its answer
 * came (applied through set_leader or refused) or it failed. */
void sluice_partition_isr_inflight(struct sluice_partition *p, const int32_t *isr, uint8_t n);
void sluice_partition_isr_settled(struct sluice_partition *p);
/* The controller refused the change (a replica fenced or shutting down:
 * INELIGIBLE_REPLICA; another change first): no replica is asked to join
 * before until_ms, while leaving still goes at once. Without it the leader
 * asked again at the next fetch, which the refusal itself woke: a loop of
 * thousands of AlterPartition requests a second for as long as the replica
 * stayed ineligible. */
void sluice_partition_isr_refused(struct sluice_partition *p, int64_t until_ms);
/* The controller answered that it moved on (a reassignment completed, a new
 * leader epoch): no ISR change is asked for until its next word arrives
 * through set_leader, which the metadata brings at once. */
void sluice_partition_isr_stale(struct sluice_partition *p);

/* Leader-epoch cache (Kafka's LeaderEpochFileCache, in memory). load:
 * the checkpointed entries (before attach; at most
 * SLUICE_PARTITION_EPOCHS_MAX, increasing; dropped: older ones were left
 * out), not marked dirty. Every change below marks the cache dirty; those
 * a checkpoint must not lose once the log has moved on mark it durable
 * too: a truncation from the end, and an epoch assigned after others (a
 * leader change). A checkpoint written but not synced may be lost in a
 * crash; attach then rebuilds those changes from the newest two segments'
 * batches, which hold them until the log rolls twice: the storage core
 * syncs a durable change before the log's next roll, never on the path of
 * a write. The first epoch of an empty cache and a truncation from the
 * start are rebuilt correctly from the log at any time. assign:
 * epoch's first batch starts at start_offset (no change when epoch is the
 * latest already and starts no later; entries that would no longer
 * increase are dropped). end_offset: where requested_epoch ends: the log
 * end for the latest epoch, else the start of the next higher epoch, with
 * *epoch_out the largest known epoch <= requested (both UNDEFINED when
 * requested is above every epoch, or below the oldest kept after entries
 * were dropped). truncate_from_end: remove entries starting at or past
 * end_offset (the log was cut there). truncate_from_start: entries wholly
 * below start_offset go, the one holding it starts there. */
void sluice_partition_epoch_load(struct sluice_partition *p, const struct sluice_epoch_entry *e, uint8_t n,
				 bool dropped);
void sluice_partition_epoch_assign(struct sluice_partition *p, int32_t epoch, int64_t start_offset);
int64_t sluice_partition_epoch_end_offset(const struct sluice_partition *p, int32_t requested_epoch,
					  int64_t log_end_offset, int32_t *epoch_out);
void sluice_partition_epoch_truncate_from_end(struct sluice_partition *p, int64_t end_offset);
void sluice_partition_epoch_truncate_from_start(struct sluice_partition *p, int64_t start_offset);
/* A batch was appended at base_offset under the current leader epoch. */
void sluice_partition_on_append(struct sluice_partition *p, int64_t base_offset);
/* Follower: after a fetch answer carried DivergingEpoch {epoch, end_offset}
 * (the leader's largest epoch <= the one the follower asked about, and
 * where it ends), the offset to truncate this log to (Kafka's
 * getOffsetTruncationState): the end of that epoch here, capped by the
 * leader's end and by log_end; when this log does not know that epoch, the
 * end of its largest epoch below it (another round follows). Never the high
 * watermark (KIP-101). */
int64_t sluice_partition_truncation_offset(const struct sluice_partition *p, int32_t epoch, int64_t end_offset,
					   int64_t log_end);
/* Follower: the leader answered OFFSET_OUT_OF_RANGE to a fetch at this log's
 * end log_end (its start log_start) under LastFetchedEpoch last_epoch, and
 * said its own log starts at leader_log_start (-1: not said). What to do
 * (Kafka's fetchOffsetAndTruncate, with the epoch cache where Kafka asks the
 * leader for its end offset):
 * - below the leader's log start (retention or DeleteRecords went past this
 *   replica): RESTART_AT the leader's log start, the log emptied;
 * - otherwise the position is past the leader's end or under an epoch the
 *   leader cannot place (it would have answered DivergingEpoch): with an
 *   epoch, TRUNCATE_TO where that epoch starts here (its records are not
 *   known to be the leader's) and ask again at once with the epoch before,
 *   which the leader checks as OffsetForLeaderEpoch would (KIP-101), never
 *   the high watermark; without one nothing says where the logs agree, so
 *   RESTART_AT the leader's log start (everything read again from it);
 * - RETRY (after the backoff) when the answer says nothing to act on, or
 *   last_epoch is no longer this log's latest (it changed since the request).
 * *offset is where to truncate to or start at. Each TRUNCATE_TO removes the
 * latest epoch, so an answer that keeps coming ends in RESTART_AT. */
enum sluice_partition_oor {
	SLUICE_PARTITION_OOR_RETRY,
	SLUICE_PARTITION_OOR_RESTART_AT,
	SLUICE_PARTITION_OOR_TRUNCATE_TO,
};
enum sluice_partition_oor sluice_partition_out_of_range(const struct sluice_partition *p, int64_t log_start,
							int64_t log_end, int32_t last_epoch,
							int64_t leader_log_start, int64_t *offset);
/* The log was truncated (sluice_plog_truncate_to; fully: sluice_plog_truncate_fully),
 * as Kafka's Log.truncateTo and truncateFullyAndStartAt: the high watermark
 * within [log start, written end] (it may move up after a full truncation,
 * to the new start), this replica's position the written end, the epoch
 * cache cut at the log end (emptied when fully; durable), the producer
 * table rebuilt from the newest segments. The appends waiting beyond the
 * new end can never be answered with the records they wrote: they are
 * taken off the wait list and returned (linked through op->next, in offset
 * order; acks=all ones first, then acks=0/1 ones) for the caller to fail. */
struct partop *sluice_partition_on_truncate(struct sluice_partition *p, bool fully);

/* Kafka's idempotence rules for batch b. */
enum sluice_producer_verdict {
	SLUICE_PRODUCER_APPEND,    /* append it (and then record it) */
	SLUICE_PRODUCER_DUPLICATE, /* a retry: *base and *last are its original offsets */
	SLUICE_PRODUCER_REFUSED,   /* *error (a Kafka error code) and *why say why */
};
enum sluice_producer_verdict sluice_partition_producer_check(struct sluice_partition *p, const struct sluice_batch *b,
							     int64_t *base, int64_t *last, int16_t *error,
							     const char **why);
/* b was appended at [base, last]. */
void sluice_partition_producer_record(struct sluice_partition *p, const struct sluice_batch *b, int64_t base,
				      int64_t last);
/* The producer's entry, or NULL (create: added when absent). */
struct sluice_producer *sluice_partition_producer(struct sluice_partition *p, int64_t pid, bool create);

/* Appends waiting to be answered, in offset order (linked through
 * op->next and op->prev): acks=all (all) until the high watermark passes
 * their last offset, acks=0/1 until the local written end does.
 * pop_visible: the first acks=all one the high watermark passed (all of
 * them when failed), else NULL; pop_written: the same for the others
 * against the written end; pop: the first of either list (then of the
 * waiting DeleteRecords), whatever its offset; remove: op (an acks=all one,
 * waiting) taken out wherever it is, as its timeout passed. An op leaving a
 * wait list, by any of these or by sluice_partition_on_truncate, leaves its
 * deadline too (op->deadline cancelled). waiting: appends wait (not
 * DeleteRecords). */
void sluice_partition_wait_append(struct sluice_partition *p, struct partop *op, bool all);
struct partop *sluice_partition_wait_pop_visible(struct sluice_partition *p, bool failed);
struct partop *sluice_partition_wait_pop_written(struct sluice_partition *p, bool failed);
struct partop *sluice_partition_wait_pop(struct sluice_partition *p);
void sluice_partition_wait_remove(struct sluice_partition *p, struct partop *op);
bool sluice_partition_waiting(const struct sluice_partition *p);

/* DeleteRecords on a replicated partition (Kafka's DelayedDeleteRecords).
 * low_watermark: leader, the least log start over this replica and every
 * follower whose broker alive(arg, id) says is alive (registered and not
 * fenced), as each follower's last fetch from this leadership reported it
 * (-1 while one has not: nothing is known of it), Kafka's
 * lowWatermarkIfLeader. A DeleteRecords whose required offset (op->offset)
 * is above it waits: delete_wait adds it, delete_pop takes a waiting one
 * whose offset the low watermark reached (any, with all), else NULL;
 * delete_remove takes op out as its timeout passed. Like the appends, an op
 * taken out leaves its deadline. */
int64_t sluice_partition_low_watermark(const struct sluice_partition *p, bool (*alive)(void *arg, int32_t id),
				       void *arg);
void sluice_partition_delete_wait(struct sluice_partition *p, struct partop *op);
struct partop *sluice_partition_delete_pop(struct sluice_partition *p, int64_t low_watermark, bool all);
void sluice_partition_delete_remove(struct sluice_partition *p, struct partop *op);

/* Fetch waiters: network core `core` has a fetch waiting for data here.
 * take: the next waiting core at or after *from (cleared), or -1. */
void sluice_partition_watch(struct sluice_partition *p, int core);
bool sluice_partition_watched(const struct sluice_partition *p, int core);
int sluice_partition_take_watcher(struct sluice_partition *p, int from);

#endif
