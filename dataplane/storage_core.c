/* A storage core: owns a shard of partition logs. It takes partition
 * operations from the network cores' rings, appends and reads, issues one
 * group-commit write per dirty partition per loop turn through its io_uring,
 * answers appends once their data is written, and wakes network cores whose
 * fetches wait on a partition that just advanced. In cluster mode it also
 * removes the partitions of topics deleted through another broker (the
 * metadata no longer has their topic id), as the broker that took the
 * DeleteTopics does through PARTOP_DELETE. */
#include "common/log.h"
#include "dataplane/core.h"
#include "common/kafka/batch.h"
#include "common/kafka/errors.h"
#include "dataplane/fetcher.h"
#include "dataplane/group.h"
#include "dataplane/metrics.h"
#include "dataplane/partition.h"
#include "dataplane/service.h"
#include "storage/checkpoint.h"
#include "storage/extent.h"
#include "storage/plog.h"
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

/* The services this core runs beside its logs (dataplane/service.h), each
 * handed the partops of its kind. */
static const struct sluice_store_service_ops *const store_services[] = {&sluice_group_service,
									 &sluice_fetcher_service};
#define STORE_SERVICES_N (sizeof store_services / sizeof store_services[0])

static const struct sluice_store_service_ops *service_for(uint8_t kind)
{
	for (size_t i = 0; i < STORE_SERVICES_N; i++)
		if (store_services[i]->partop_kind == kind)
			return store_services[i];
	return NULL;
}

/* The records op waited for were written (ok) or not: its service hears first. */
static void service_written(struct storecore *sc, struct partop *op, bool ok)
{
	const struct sluice_store_service_ops *svc = service_for(op->kind);
	if (svc)
		svc->written(sc, op, ok);
}

/* Partitions one loop turn opens at most: an open costs directory syncs
 * (about 2 ms each on ext4), so a request naming 100,000 new partitions is
 * worked through over many turns, other clients served in between. */
#define STORE_OPENS_PER_TURN 16
/* A partition not appended to for this long gives back the space its
 * active segment has preallocated ahead of the data; a pass every second
 * gives back at most PREALLOC_TRIMS_PER_PASS (each truncation is a journal
 * transaction). */
#define PREALLOC_IDLE_MS 5000
#define PREALLOC_TRIMS_PER_PASS 32
#define DELETED_SWEEP_PARTITIONS_MAX 1024 /* partitions of deleted topics removed per pass (1 s) */
#define MOVED_SWEEP_PARTITIONS_MAX 256    /* replicas moved away removed per loop turn */
/* Bytes lookups by timestamp (ListOffsets) may read, decompress and scan in
 * one loop turn (a few milliseconds of work); lookups past it wait for the
 * next turn, so pipelined lookups into big compressed batches cannot starve
 * the core's appends. One lookup is at most one batch (64 MiB inflated). */
#define STORE_LOOKUP_BYTES_PER_TURN (4 << 20)
/* Descriptors an op may need beyond what its partition holds (a segment's
 * write, read and direct descriptors, and one spare). */
#define STORE_OP_FDS_MAX 4
/* The longest an idle storage core sleeps: housekeeping (descriptor
 * budget, preallocation trims, flush and retention clocks) runs on turns. */
#define STORE_SLEEP_MS_MAX 100
/* How often changed leader-epoch caches are written to their checkpoints
 * (epochs_flush): after a leader change, not within the turns that move
 * the leaderships and the first writes. */
#define STORE_EPOCHS_WRITE_MS 1000
_Static_assert(STORE_SLEEP_MS_MAX <= SLUICE_RT_SLEEP_MS_MAX, "the runtime caps every sleep");
/* How stale the dynamic broker configuration a core applies outside
 * requests (flush interval, retention, compaction) may get. */
#define STORE_CONFIG_REFRESH_MS 1000
_Static_assert(STORE_CONFIG_REFRESH_MS >= STORE_SLEEP_MS_MAX, "refreshed at most once a turn");
/* Ops taken from one network core's ring per loop turn. */
#define STORE_OPS_PER_RING_TURN 4096
_Static_assert(STORE_OPS_PER_RING_TURN <= SLUICE_RING_SLOTS, "a turn takes at most a ring's worth");
_Static_assert((uint64_t)SLUICE_CORES_MAX * STORE_OPS_PER_RING_TURN < SLUICE_RT_BACKLOG_MAX / 2,
	       "one turn's ops (each owing one reply) fit in the backlog above drain_rings' cut-off");
/* Zero-copy reads (PARTOP_READ answered with pinned extents, core.h's
 * struct sluice_read_pins): at most STORE_READ_PINS_MAX out at once per
 * storage core (a fixed pool taken at start, about 2.6 KiB each), and the
 * extents they pin at most half the core's extent pool, so the cache never
 * fills with pinned extents while slow readers hold them; past either, a
 * read copies (sluice_plog_read_below), as does one whose first batch spans
 * too many extents. A read waiting for cold extents is retried as they
 * load, at most STORE_READ_LOAD_RETRIES_MAX times (each round loads up to
 * SLUICE_PLOG_LOADS_MAX extents; extents evicted again before the retry
 * could make it chase them), then copies. */
/* ISR changes (AlterPartition) one storage core has out at once; the
 * controller backend queues at most 256 requests of all kinds. */
#define STORE_ISR_CHANGES_INFLIGHT_MAX 64
/* How often led partitions are checked for followers to drop from the ISR:
 * half of replica.lag.time.max.ms (Kafka's isr-expiration task), at least this. */
#define STORE_ISR_CHECK_MS_MIN 100
/* After the controller refused an ISR change, the partition asks again no
 * sooner than this: an idle partition whose follower stays caught up by
 * the rule while the controller will not take it (fenced, shutting down)
 * would otherwise ask at every fetch of any of its followers, thousands of
 * times a second. */
#define STORE_ISR_REFUSED_BACKOFF_MS 500
#define STORE_READ_PINS_MAX 1024
/* Ops whose timeout passed answered in one loop turn (REQUEST_TIMED_OUT);
 * more wait for the next turn, which comes at once. An acks=all append
 * whose timeout passes before its own write completed is looked at again
 * this much later: Kafka's timeout starts after the leader's append, so the
 * local write is not what times out (a single replica's acks=all, whose
 * high watermark moves with the write, never does). */
#define STORE_EXPIRIES_PER_TURN 4096
#define STORE_EXPIRY_WRITE_RECHECK_MS 1
_Static_assert((uint64_t)SLUICE_CORES_MAX * STORE_OPS_PER_RING_TURN + STORE_EXPIRIES_PER_TURN < SLUICE_RT_BACKLOG_MAX / 2,
	       "a turn's ops and expiries (each owing one reply) fit in the backlog above drain_rings' cut-off");
#define STORE_READ_LOAD_RETRIES_MAX 32
/* A partition directory's path: a data directory, '/', a topic name of up
 * to 249 bytes, '-' and a partition number. */
#define STORE_PART_PATH_BYTES 900
_Static_assert(SLUICE_READ_PINS_RANGES_MAX == SLUICE_READ_RANGES_MAX, "a read's pins hold every range of its result");
_Static_assert(STORE_READ_LOAD_RETRIES_MAX * SLUICE_PLOG_LOADS_MAX >= 2 * SLUICE_READ_RANGES_MAX,
	       "a read loading every extent of a full result converges before the retries run out");
_Static_assert(STORE_READ_LOAD_RETRIES_MAX <= UINT8_MAX, "struct partop's load_retries counts them");

/* A storage core's table entry: the partition's state (partition.h) and
 * what the core keeps to run it: the log it opened (the partition borrows
 * it), its directory, descriptor budget, parking and housekeeping. */
struct spart {
	char *topic;
	int32_t partition;
	struct sluice_plog *log;
	struct sluice_partition part;
	bool dirty;
	struct spart *dirty_next;
	int dir;                /* index into log.dirs */
	int64_t last_used_ms;   /* monotonic, for giving idle descriptors back */
	struct storecore *sc;
	struct clean_item *cleaning; /* compaction job out on the cleaner thread */
	uint8_t topic_id[16];        /* its partition.metadata's, once opened (has_topic_id) */
	bool has_topic_id;
	uint32_t parked;             /* this partition's ops in the core's parked queue */
	/* READs waiting for cold extents to load (linked through op->next):
	 * the loaded hook moves them to the parked queue, to run again. */
	struct partop *load_head, *load_tail;
	struct sluice_follow *follow; /* the fetcher's, while this replica follows (fetcher.h) */
	int64_t isr_retry_ms; /* monotonic: no ISR change is asked for before (the controller refused one) */
	uint8_t throttle;             /* SLUICE_THROTTLE_* bits of this replica, from the metadata */
	bool moved;                   /* no longer a replica here (part_stop): serves nobody */
	bool epochs_unsynced;         /* its leader-epoch-checkpoint holds a durable change not yet synced */
	bool epochs_queued;           /* on the core's list of caches to write (epochs_next) */
	struct spart *epochs_next;
	uint32_t metrics_topic;       /* its topic's slot in the core's counters (metrics.h) */
};

/* A zero-copy read's slot: the pins lent to a network core (first: a
 * MSG_READ_RELEASE points at them) and the plog's result holding the
 * extent references behind them. Slots are not tied to a partition: the
 * extents belong to the core's pool, not to a log, so a log closed (or a
 * partition deleted) while a response still sends its extents leaves them
 * pinned in the pool until the release; deletion does not wait. */
struct read_slot {
	struct sluice_read_pins pins;
	struct sluice_read_result res;
	struct read_slot *free_next;
	bool lent;
};

/* The cleaner: a thread per storage core runs its compaction jobs, so
 * reading and rewriting segments never stalls the core's appends and
 * fetches. Jobs go out on a mutex-protected queue and come back on a done
 * list, the core woken through its eventfd; only the core touches the
 * logs (prepare and finish), the thread only the job's snapshot. */
struct clean_item {
	struct sluice_plog_clean_job *job;
	struct spart *part; /* NULL once the partition went away */
	struct clean_item *next;
};

struct cleaner {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct clean_item *queued, *running, *done;
	bool stop, started;
	int done_ready; /* atomic: the done list is not empty */
};

struct sstate {
	struct spart **table; /* open addressing, power-of-two size */
	uint32_t table_cap, count;
	struct spart *dirty_head;
	uint64_t efd_buf;
	bool efd_armed;
	bool in_wait; /* inside wait_write: defer new messages */
	int64_t next_retention_ms, next_flush_ms, next_clean_ms, next_fd_check_ms; /* monotonic */
	int64_t next_trim_ms;  /* monotonic: the next pass giving back idle preallocation */
	uint32_t trim_cursor;  /* where that pass starts in the table */
	int32_t fds_max;
	int64_t fds_est; /* open descriptors, exact after fd_budget, estimated between */
	/* Ops waiting for descriptors, for this turn's opens or lookup work
	 * (oldest first, linked through op->next; op_can_run); a partition's
	 * later ops queue behind its parked ones, so its order holds. */
	struct partop *parked_head, *parked_tail;
	uint32_t parked_n;
	uint32_t opens_turn;   /* partitions opened this loop turn */
	int64_t lookup_work_turn; /* bytes lookups by timestamp handled this turn */
	bool fd_budget_turn;   /* fd_budget already ran this loop turn */
	uint64_t open_failures; /* logged in full only for the first few */
	struct sluice_plog_cfg plog_cfg;
	struct sluice_pool *pool; /* extents: the partitions' tails and the read cache */
	struct cleaner cleaner;
	int64_t next_stats_ms;
	/* Partitions whose files could not be opened as they are (unreadable,
	 * not files, segments contradicting each other: see sluice_plog_open).
	 * They answer KAFKA_STORAGE_ERROR until a restart, as in Kafka, while
	 * the rest of their directory keeps serving; a write or fsync error
	 * instead takes the whole directory offline (sluice_dir_failed). */
	struct offline_part *offline;
	uint32_t offline_n, offline_cap; /* at most SLUICE_STORE_PARTITIONS_MAX */
	/* Zero-copy reads: STORE_READ_PINS_MAX slots, those not lent on the
	 * free list; extents their results pin (one per range), at most
	 * pinned_extents_max. */
	struct read_slot *slots, *slot_free;
	int64_t pinned_extents, pinned_extents_max;
	int64_t swept_offset; /* cluster mode: the metadata offset the last deleted-topic sweep saw */
	/* Cluster mode: the metadata offset whose partition states this core
	 * has applied to every replica it holds (leadership_sweep), and
	 * whether the last pass was cut short (opens left for later turns). */
	int64_t led_offset;
	bool led_partial;
	/* ISR changes this core's leaders asked the controller for and whose
	 * answers have not come (at most STORE_ISR_CHANGES_INFLIGHT_MAX), and
	 * when the led partitions are next checked for lagging followers. */
	uint32_t isr_inflight;
	int64_t next_isr_ms; /* monotonic */
	/* The dynamic broker configuration in effect on this core (cluster
	 * mode, a reference), taken from the newest snapshot at least every
	 * STORE_CONFIG_REFRESH_MS; NULL: server.properties as it is. */
	const struct sluice_broker_config *bcfg;
	int64_t next_config_ms; /* monotonic */
	/* replication-offset-checkpoint: the high watermarks read at start for
	 * this core's partitions (sorted by topic, then partition), and when
	 * this core writes its share next (monotonic). */
	struct hw_entry *hw_ck;
	uint32_t hw_ck_n, hw_ck_cap; /* at most SLUICE_STORE_PARTITIONS_MAX */
	int64_t next_hw_ckpt_ms;
	uint32_t epochs_rebuilt; /* partitions opened with no usable leader-epoch-checkpoint */
	/* Ops waiting for other replicas with a timeout (acks=all appends,
	 * DeleteRecords, group coordinator writes): their deadlines
	 * (dataplane/deadline.h). */
	struct sluice_deadlines deadlines;
	uint64_t epochs_roll_syncs; /* leader-epoch checkpoints synced before a roll (stats line) */
	/* Partitions whose leader-epoch cache changed since its checkpoint was
	 * written (epochs_persist): written by housekeeping, off the turns
	 * that answer (a leader change touches every partition it moves). */
	struct spart *epochs_head;
	int64_t next_epochs_ms;
};

struct hw_entry {
	char *topic;
	int32_t partition;
	int dir; /* the data directory whose file named it */
	int64_t hw;
};

/* One storage core's lines of each data directory's
 * replication-offset-checkpoint (struct broker's hw_share). */
struct sluice_hw_share {
	struct {
		char *body;
		size_t len, cap;
		uint32_t count;
	} dir[SLUICE_LOG_DIRS_MAX];
};

struct offline_part {
	char *topic;
	int32_t partition;
};

/* Replies and wake-ups to network core `net`; what finds its ring full
 * waits on the runtime's backlog, which drain_rings keeps below its
 * limit. */
static void reply(struct storecore *sc, int net, struct sluice_msg m)
{
	assert(net >= 0 && net < sc->b->net_n);
	assert(m.type == MSG_WAKE_FETCHES || (m.type == MSG_PARTOP && m.ptr));
	bool queued = sluice_rt_send(&sc->rt, &sc->out[net], &sc->b->net[net].rt, m);
	assert(queued); /* drain_rings stops taking ops well before the backlog's limit */
	(void)queued;
}

/* A READ takes from its request's budget at most its own max_bytes; what
 * it takes is the most it reads. */
static int32_t read_budget_claim(struct partop *op)
{
	if (!op->read_budget)
		return op->max_bytes;
	int64_t left = __atomic_load_n(op->read_budget, __ATOMIC_RELAXED);
	int64_t take;
	do {
		take = left < 0 ? 0 : left < op->max_bytes ? left : op->max_bytes;
	} while (!__atomic_compare_exchange_n(op->read_budget, &left, left - take, false, __ATOMIC_RELAXED,
					      __ATOMIC_RELAXED));
	assert(take >= 0 && take <= op->max_bytes);
	return (int32_t)take;
}

static void op_done(struct storecore *sc, struct partop *op)
{
	reply(sc, op->net_core, (struct sluice_msg){MSG_PARTOP, (uint32_t)sc->id, op});
}

static void wake_fetch_watchers(struct spart *p)
{
	for (int n = 0; (n = sluice_partition_take_watcher(&p->part, n)) >= 0; n++) {
		assert(n < p->sc->b->net_n);
		reply(p->sc, n, (struct sluice_msg){MSG_WAKE_FETCHES, (uint32_t)p->sc->id, NULL});
	}
}

static const struct sluice_config *core_cfg(const struct storecore *sc);
static void core_cfg_take(struct storecore *sc, const struct sluice_meta_snapshot *snap);
static void epochs_persist(struct storecore *sc, struct spart *p);
static struct spart *part_lookup(struct sstate *st, const char *topic, int32_t partition, uint32_t *slot);

/* The min.insync.replicas an acks=all append is held to: its topic's,
 * else the broker's in effect for its request. Group records are held to
 * __consumer_offsets' (the op carries its request's word on that topic)
 * in cluster mode, as Kafka's coordinator writes them with acks=all; a
 * single node's to 1, as before replication. */
static int64_t op_min_isr(const struct storecore *sc, const struct partop *op)
{
	if (op->kind != PARTOP_APPEND && (op->kind != PARTOP_GROUP || !sluice_config_cluster_mode(&sc->b->cfg)))
		return 1;
	if (op->tinfo && op->tinfo->limits.min_insync_replicas > 0)
		return op->tinfo->limits.min_insync_replicas;
	return (op->cfg ? op->cfg : core_cfg(sc))->min_insync_replicas;
}

static void append_answer(struct spart *p, struct partop *op, int64_t hw)
{
	service_written(p->sc, op, op->error == 0);
	op->high_watermark = hw;
	op->log_start = sluice_plog_log_start(p->log);
	op_done(p->sc, op);
}

/* Appends whose condition now holds are answered: acks=0/1 once written
 * here, acks=all once the high watermark passed them, with
 * NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR has shrunk below
 * min.insync.replicas meanwhile (Kafka's check at completion); with the
 * log failed, all of them (those not written with KAFKA_STORAGE_ERROR).
 * Then the fetches waiting here are woken: new data (followers read to the
 * written end) or a higher high watermark (consumers read below it). */
static void answer_waiting(struct spart *p, bool failed)
{
	int64_t hw = sluice_partition_high_watermark(&p->part), written = sluice_plog_written_end(p->log);
	uint8_t isr_n = sluice_partition_max_isr_n(&p->part);
	for (struct partop *op; (op = sluice_partition_wait_pop_written(&p->part, failed));) {
		if (failed && op->last_offset >= written)
			op->error = KERR_KAFKA_STORAGE_ERROR;
		append_answer(p, op, hw);
	}
	for (struct partop *op; (op = sluice_partition_wait_pop_visible(&p->part, failed));) {
		if (failed && op->last_offset >= hw)
			op->error = KERR_KAFKA_STORAGE_ERROR;
		else if (!op->error && isr_n < op_min_isr(p->sc, op)) {
			op->error = KERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND;
			op->error_message = "The size of the current ISR is less than min.insync.replicas";
		}
		append_answer(p, op, hw);
	}
	for (struct partop *op; failed && (op = sluice_partition_delete_pop(&p->part, 0, true));) {
		op->error = KERR_KAFKA_STORAGE_ERROR;
		op_done(p->sc, op);
	}
	wake_fetch_watchers(p);
}

/* Whether broker id counts for the low watermark (arg: a snapshot): among
 * the snapshot's brokers, registered and not fenced (a broker shutting
 * down counts until it is fenced), as Kafka's metadataCache.hasAliveBroker. */
static bool broker_alive(void *arg, int32_t id)
{
	const struct sluice_meta_snapshot *snap = arg;
	for (uint32_t i = 0; i < snap->broker_n; i++)
		if (snap->brokers[i].node_id == id)
			return true;
	return false;
}

/* Leader p's low watermark under the current metadata. */
static int64_t low_watermark(struct storecore *sc, struct spart *p)
{
	struct broker *b = sc->b;
	if (p->part.replica_n == 1)
		return sluice_plog_log_start(p->log);
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	int64_t low = sluice_partition_low_watermark(&p->part, broker_alive, snap);
	b->meta.ops->release(b->meta.self, snap);
	return low;
}

/* The DeleteRecords waiting on p whose offset the low watermark reached are
 * answered with it (Kafka's DelayedDeleteRecords.tryComplete): after a
 * follower's fetch told its log start, or when the replicas, the ISR or
 * the live brokers changed. Once p no longer leads, every one of them gets
 * NOT_LEADER_OR_FOLLOWER (low watermark -1). */
static void deletes_check(struct storecore *sc, struct spart *p)
{
	struct sluice_partition *pt = &p->part;
	if (!pt->del_head)
		return;
	if (!pt->is_leader || !p->log) {
		for (struct partop *op; (op = sluice_partition_delete_pop(pt, 0, true));) {
			op->error = KERR_NOT_LEADER_OR_FOLLOWER;
			op_done(sc, op);
		}
		return;
	}
	int64_t low = low_watermark(sc, p);
	for (struct partop *op; (op = sluice_partition_delete_pop(pt, low, false));) {
		assert(low >= op->offset);
		op->log_start = low;
		op_done(sc, op);
	}
}

/* Hook from the plog: its written end moved (or it failed). The high
 * watermark follows (on a single node, exactly; replicated, as far as the
 * ISR's positions allow); appends are answered and waiting fetches woken. */
static void on_written(struct sluice_plog *l, void *arg)
{
	struct spart *p = arg;
	bool failed = sluice_plog_failed(l);
	(void)sluice_partition_on_written(&p->part, sluice_plog_written_end(l));
	if (failed)
		sluice_dir_failed(p->sc->b, p->dir, "write failed");
	answer_waiting(p, failed);
}

/* ---- replication: the controller's word, and the follower's log ---------------------- */

/* Apply the controller's word st on p (cluster mode: a snapshot's, the
 * newest this core or the op carrying it has seen) and act on what it
 * changed. Leading: the fetcher stops following. Following: acks=all
 * appends still waiting are refused with NOT_LEADER_OR_FOLLOWER (the new
 * leader may not have them; the producer retries there) and the fetcher
 * follows the new leader, from whose first answer a log that diverged
 * learns where to truncate. Either way the high watermark may have moved
 * (an ISR that shrank lets it advance). */
/* p's replica here is no longer one of the partition's: it stops following
 * and leading, and its acks=all appends and DeleteRecords waiting are
 * refused with NOT_LEADER_OR_FOLLOWER (the producer retries at the new
 * leader). Its log stays until removed_sweep proves it garbage. */
static void part_stop(struct storecore *sc, struct spart *p)
{
	sluice_fetcher_unfollow(sc, &p->follow);
	if (p->moved)
		return; /* stopped already */
	p->moved = true;
	SLOG_INFO("replication", "%s-%d: no longer a replica on this broker (log end %" PRId64 ", high watermark %" PRId64
		  "): neither leading nor following it", p->topic, p->partition, sluice_plog_log_end(p->log),
		  sluice_partition_high_watermark(&p->part));
	sluice_partition_stop_replica(&p->part);
	for (struct partop *op; (op = sluice_partition_wait_pop_visible(&p->part, true));) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		append_answer(p, op, sluice_partition_high_watermark(&p->part));
	}
	deletes_check(sc, p); /* DeleteRecords waiting: NOT_LEADER_OR_FOLLOWER too */
	assert(!p->part.is_leader && !p->follow && !p->part.del_head);
}

static enum sluice_partition_change part_leadership_apply(struct storecore *sc, struct spart *p,
							   const struct sluice_partition_state *st)
{
	if (!st || !p->log)
		return SLUICE_PARTITION_SAME;
	assert(st->replica_n >= 0 && st->replica_n <= SLUICE_REPLICAS_MAX && st->isr_n <= st->replica_n);
	_Static_assert(SLUICE_REPLICAS_MAX <= SLUICE_PARTITION_REPLICAS_MAX, "a snapshot's replicas fit a partition");
	struct sluice_partition_leadership l = {st->leader, st->leader_epoch, st->partition_epoch, st->replicas,
						(uint8_t)st->replica_n, st->isr, (uint8_t)st->isr_n};
	enum sluice_partition_change c = sluice_partition_set_leader(&p->part, &l, sluice_now_ms());
	if (c == SLUICE_PARTITION_SAME || c == SLUICE_PARTITION_UPDATED)
		return c;
	if (c == SLUICE_PARTITION_REFUSED) {
		part_stop(sc, p); /* no longer a replica here (reassigned away) */
		return c;
	}
	p->moved = false; /* named again (a later reassignment) */
	epochs_persist(sc, p); /* a new leader's epoch starts at its log end */
	if (c == SLUICE_PARTITION_LEADER) {
		SLOG_INFO("replication", "%s-%d: leader at epoch %d (log end %" PRId64 ", high watermark %" PRId64 ")",
			  p->topic, p->partition, st->leader_epoch, sluice_plog_log_end(p->log),
			  sluice_partition_high_watermark(&p->part));
		sluice_fetcher_unfollow(sc, &p->follow);
	}
	answer_waiting(p, false);
	if (p->part.is_leader)
		return c;
	if (c == SLUICE_PARTITION_FOLLOWER)
		SLOG_INFO("replication", "%s-%d: follower of broker %d at epoch %d (log end %" PRId64 ")", p->topic,
			  p->partition, st->leader, st->leader_epoch, sluice_plog_log_end(p->log));
	for (struct partop *op; (op = sluice_partition_wait_pop_visible(&p->part, true));) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		append_answer(p, op, sluice_partition_high_watermark(&p->part));
	}
	sluice_fetcher_follow(sc, &p->follow, p, p->topic, p->partition, st->leader, st->leader_epoch);
	return c;
}

/* part_leadership_apply, then the services hear of a role that changed
 * (the group coordinator loads or unloads the groups of a
 * __consumer_offsets partition; a replica reassigned away unloads them). */
/* Cluster mode: whether p's open log is an earlier topic's of its name
 * than t (deleted and created again): t's word is not for it, and records
 * for the new topic must never go into it (its log goes, records and all).
 * The deleted-topic sweep removes it in this same turn (housekeeping runs
 * after the ops and the leadership pass), and the new topic's replica
 * opens afresh at the next pass. */
static bool part_earlier(struct storecore *sc, const struct spart *p, const struct sluice_topic *t)
{
	if (!t || !p->log || !p->has_topic_id || !memcmp(t->id, p->topic_id, 16) ||
	    !sluice_config_cluster_mode(&sc->b->cfg))
		return false;
	struct sstate *st = sc->state;
	st->swept_offset = -1; /* the sweep looks again, now */
	st->next_trim_ms = 0;
	st->led_partial = true;
	return true;
}

static void part_leadership(struct storecore *sc, struct spart *p, const struct sluice_partition_state *st)
{
	enum sluice_partition_change c = part_leadership_apply(sc, p, st);
	deletes_check(sc, p); /* the leader, its replicas or the live brokers may have changed */
	if (c != SLUICE_PARTITION_LEADER && c != SLUICE_PARTITION_FOLLOWER && c != SLUICE_PARTITION_REFUSED)
		return;
	for (size_t i = 0; i < STORE_SERVICES_N; i++)
		if (store_services[i]->leadership)
			store_services[i]->leadership(sc, p, p->topic, p->partition);
}

/* ---- ISR changes (a leader's AlterPartition) --------------------------------------------- */

/* An ISR change out to the controller: the request (first) and how its
 * answer comes back to this core. Allocated per change: a rare event. */
struct isr_req {
	struct sluice_meta_isr_change c;
	struct sluice_rt_post post;
	struct storecore *sc;
	int32_t partition;
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
};

static void ids_text(char *buf, size_t cap, const int32_t *ids, int32_t n)
{
	size_t at = 0;
	buf[0] = '\0';
	for (int32_t i = 0; i < n && at < cap; i++)
		at += (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", ids[i]);
}

/* On the core: the controller's answer. Accepted, the partition takes the
 * ISR and partition epoch it answered (the snapshot that shows them may
 * come later); refused (another change came first, a fenced replica), the
 * next check asks again from what the partition holds then. */
static void isr_answered(void *arg)
{
	struct isr_req *q = arg;
	struct storecore *sc = q->sc;
	struct sstate *st = sc->state;
	assert(st->isr_inflight > 0);
	st->isr_inflight--;
	uint32_t slot;
	struct spart *p = st->table_cap ? part_lookup(st, q->topic, q->partition, &slot) : NULL;
	if (p && p->log) {
		sluice_partition_isr_settled(&p->part);
		char text[SLUICE_REPLICAS_MAX * 12];
		/* The partition still holds the word it asked with: the controller's
		 * newer one has not come yet (else nothing waits for it). */
		bool asked_now = q->c.leader_epoch == p->part.leader_epoch && q->c.partition_epoch == p->part.partition_epoch;
		if (!q->c.error && q->c.result.leader_epoch != p->part.leader_epoch) {
			/* A new leader epoch: the change also moved replicas (a
			 * reassignment completed), which the answer does not list:
			 * the metadata that follows says all of it. */
			SLOG_INFO("replication", "%s-%d: ISR change accepted at leader epoch %d; waiting for the metadata",
				  p->topic, p->partition, q->c.result.leader_epoch);
			if (asked_now)
				sluice_partition_isr_stale(&p->part);
		} else if (!q->c.error) {
			struct sluice_partition_state ps = q->c.result;
			ps.replica_n = p->part.replica_n;
			for (uint8_t i = 0; i < p->part.replica_n; i++)
				ps.replicas[i] = p->part.replicas[i].id;
			ids_text(text, sizeof text, ps.isr, ps.isr_n);
			SLOG_INFO("replication", "%s-%d: ISR now [%s] (partition epoch %d)", p->topic, p->partition, text,
				  ps.partition_epoch);
			part_leadership(sc, p, &ps);
		} else if (q->c.error == KERR_NEW_LEADER_ELECTED) {
			ids_text(text, sizeof text, q->c.isr, q->c.isr_n);
			SLOG_INFO("replication", "%s-%d: ISR [%s] completed a reassignment that moved the leadership away; "
				  "waiting for the metadata", p->topic, p->partition, text);
			if (asked_now)
				sluice_partition_isr_stale(&p->part);
		} else {
			ids_text(text, sizeof text, q->c.isr, q->c.isr_n);
			int32_t wait_ms = core_cfg(sc)->replica_fetch_wait_max_ms;
			SLOG_INFO("replication", "%s-%d: the controller refused ISR [%s]: %s; no replica joins for %d ms",
				  p->topic, p->partition, text, sluice_kafka_error_name(q->c.error), wait_ms);
			if (asked_now && (q->c.error == KERR_FENCED_LEADER_EPOCH || q->c.error == KERR_NOT_LEADER_OR_FOLLOWER))
				sluice_partition_isr_stale(&p->part); /* its word is on its way */
			/* As often as an idle follower's fetch would ask in Kafka. */
			sluice_partition_isr_refused(&p->part, sluice_now_ms() + wait_ms);
		}
		answer_waiting(p, false); /* the replicas that were joining count no more */
	}
	free(q);
}

/* On the backend's thread: hand the answer to the core. */
static void isr_done(struct sluice_meta_isr_change *c)
{
	struct isr_req *q = (struct isr_req *)(void *)c; /* c is its first member */
	sluice_rt_post(&q->sc->rt, &q->post);
}

/* The wanted ISR isr[0..n) without the replicas it would add whose broker
 * the controller would refuse (not among the snapshot's active brokers:
 * fenced, or shutting down), as Kafka's leader checks isReplicaIsrEligible
 * before it asks. Returns the new count, or 0 when no change is left. */
static uint8_t isr_eligible(struct storecore *sc, const struct spart *p, int32_t *isr, uint8_t n)
{
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	uint8_t k = 0;
	bool changed = false;
	for (uint8_t i = 0; i < n; i++) {
		bool in = false, active = false;
		for (uint8_t j = 0; j < p->part.replica_n; j++)
			in |= p->part.replicas[j].id == isr[i] && p->part.replicas[j].in_isr;
		for (uint32_t j = 0; !in && j < snap->broker_n && !active; j++)
			active = snap->brokers[j].node_id == isr[i] && !snap->brokers[j].shutting_down;
		if (in || active)
			isr[k++] = isr[i];
		changed |= !in && active;
	}
	b->meta.ops->release(b->meta.self, snap);
	assert(k <= n);
	changed |= k < sluice_partition_isr_n(&p->part); /* a member left */
	return changed ? k : 0;
}

/* Leader p: ask the controller for the ISR its followers' positions call
 * for, if any (sluice_partition_isr_wanted), and the controller can take. */
static void isr_check(struct storecore *sc, struct spart *p, int64_t now)
{
	struct sstate *st = sc->state;
	const struct sluice_meta *m = &sc->b->meta;
	if (!m->ops->alter_partition || st->isr_inflight >= STORE_ISR_CHANGES_INFLIGHT_MAX || !p->log ||
	    !p->has_topic_id || now < p->isr_retry_ms)
		return;
	int32_t isr[SLUICE_PARTITION_REPLICAS_MAX];
	uint8_t n = sluice_partition_isr_wanted(&p->part, now, core_cfg(sc)->replica_lag_time_max_ms, isr);
	if (!n)
		return;
	n = isr_eligible(sc, p, isr, n);
	if (!n) { /* only replicas the controller would refuse: look again later, not at every fetch */
		p->isr_retry_ms = now + STORE_ISR_REFUSED_BACKOFF_MS;
		return;
	}
	struct isr_req *q = calloc(1, sizeof *q);
	if (!q)
		return; /* the next check asks again */
	_Static_assert(offsetof(struct isr_req, c) == 0, "the change leads its request");
	memcpy(q->c.topic_id, p->topic_id, 16);
	q->c.partition = p->partition;
	q->c.leader_epoch = p->part.leader_epoch;
	q->c.partition_epoch = p->part.partition_epoch;
	q->c.isr_n = n;
	memcpy(q->c.isr, isr, n * sizeof isr[0]);
	q->c.done = isr_done;
	q->post = (struct sluice_rt_post){.fn = isr_answered, .arg = q};
	q->sc = sc;
	q->partition = p->partition;
	snprintf(q->topic, sizeof q->topic, "%s", p->topic);
	sluice_partition_isr_inflight(&p->part, isr, n);
	if (m->ops->alter_partition(m->self, &q->c) != 0) {
		sluice_partition_isr_settled(&p->part);
		free(q);
		return;
	}
	st->isr_inflight++;
	char text[SLUICE_REPLICAS_MAX * 12];
	ids_text(text, sizeof text, isr, n);
	SLOG_INFO("replication", "%s-%d: asking the controller for ISR [%s] (%u in it now)", p->topic, p->partition,
		  text, sluice_partition_isr_n(&p->part));
}

/* Every half replica.lag.time.max.ms: each partition this core leads with
 * followers is checked for ISR members that fell behind (and followers
 * caught up, whose fetches usually found them first). */
static void isr_sweep(struct storecore *sc, int64_t now)
{
	struct sstate *st = sc->state;
	if (now < st->next_isr_ms)
		return;
	int64_t every = core_cfg(sc)->replica_lag_time_max_ms / 2;
	st->next_isr_ms = now + (every > STORE_ISR_CHECK_MS_MIN ? every : STORE_ISR_CHECK_MS_MIN);
	for (uint32_t i = 0; i < st->table_cap; i++) {
		struct spart *p = st->table[i];
		if (p && p->log && p->part.is_leader && p->part.replica_n > 1)
			isr_check(sc, p, now);
	}
}

static void dispatch_cqe(struct storecore *sc, struct io_uring_cqe *cqe);

/* Hook from the plog: block until its in-flight write completes. */
static void wait_write(struct sluice_plog *l, void *arg)
{
	struct spart *p = arg;
	struct sstate *st = p->sc->state;
	st->in_wait = true;
	while (sluice_plog_write_inflight(l)) {
		struct io_uring_cqe *cqe;
		io_uring_submit(&p->sc->ring);
		if (io_uring_wait_cqe(&p->sc->ring, &cqe) < 0)
			break;
		dispatch_cqe(p->sc, cqe);
	}
	st->in_wait = false;
}

static void op_park(struct sstate *st, struct spart *p, struct partop *op);

/* Hook from the plog: a cold read it submitted completed. The READs that
 * waited for it go to the parked queue and run again at the start of the
 * next turn (not here: this runs inside a completion, maybe inside another
 * operation on the same log). */
static void on_loaded(struct sluice_plog *l, void *arg)
{
	struct spart *p = arg;
	assert(p->log == l || !p->log);
	struct partop *op = p->load_head;
	p->load_head = p->load_tail = NULL;
	while (op) {
		struct partop *next = op->next;
		assert(op->kind == PARTOP_READ);
		op_park(p->sc->state, p, op);
		op = next;
	}
}

static struct spart *part_lookup(struct sstate *st, const char *topic, int32_t partition, uint32_t *slot)
{
	uint32_t mask = st->table_cap - 1;
	uint32_t i = (uint32_t)sluice_rt_hash_tp(topic, partition) & mask;
	for (;; i = (i + 1) & mask) {
		struct spart *p = st->table[i];
		if (!p || (p->partition == partition && strcmp(p->topic, topic) == 0)) {
			*slot = i;
			return p;
		}
	}
}

static void table_grow(struct sstate *st)
{
	uint32_t old_cap = st->table_cap;
	struct spart **old = st->table;
	st->table_cap = old_cap ? old_cap * 2 : 1024;
	st->table = calloc(st->table_cap, sizeof *st->table);
	assert(st->table);
	for (uint32_t i = 0; i < old_cap; i++)
		if (old[i]) {
			uint32_t slot;
			(void)part_lookup(st, old[i]->topic, old[i]->partition, &slot);
			st->table[slot] = old[i];
		}
	free(old);
}

int sluice_partition_dir(struct broker *b, const char *topic, int32_t partition, bool create, char *out, size_t len)
{
	/* The directory that already holds the partition wins, failed or not. */
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		snprintf(out, len, "%s/%s-%d", b->cfg.log_dir[d], topic, partition);
		struct stat stt;
		if (stat(out, &stt) == 0)
			return d;
	}
	if (!create)
		return -1;
	/* New partitions go to the online directory holding the fewest. */
	uint32_t offline = __atomic_load_n(&b->offline_dirs, __ATOMIC_ACQUIRE);
	int best = -1;
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		if (offline & (1u << d))
			continue;
		if (best < 0 || __atomic_load_n(&b->dir_partitions[d], __ATOMIC_RELAXED) <
				       __atomic_load_n(&b->dir_partitions[best], __ATOMIC_RELAXED))
			best = d;
	}
	if (best < 0)
		return -1;
	__atomic_add_fetch(&b->dir_partitions[best], 1, __ATOMIC_RELAXED);
	snprintf(out, len, "%s/%s-%d", b->cfg.log_dir[best], topic, partition);
	return best;
}

void sluice_dir_failed(struct broker *b, int dir, const char *why)
{
	if (dir < 0)
		return;
	uint32_t old = __atomic_fetch_or(&b->offline_dirs, 1u << dir, __ATOMIC_ACQ_REL);
	if (!(old & (1u << dir)))
		SLOG_ERR("storage", "log directory %s failed (%s): its partitions are offline (KAFKA_STORAGE_ERROR); "
			 "the other directories keep serving", b->cfg.log_dir[dir], why);
}

static bool dir_offline(const struct broker *b, int dir)
{
	return dir >= 0 && (__atomic_load_n(&b->offline_dirs, __ATOMIC_ACQUIRE) & (1u << dir));
}

static struct spart *part_get(struct storecore *sc, const char *topic, int32_t partition, int16_t *error);
static struct spart *part_entry(struct storecore *sc, const char *topic, int32_t partition, int16_t *error);
static int16_t part_open(struct storecore *sc, struct spart *p);
static void fd_budget(struct storecore *sc);
static int64_t wall_now_ms(void);
static void epochs_persist(struct storecore *sc, struct spart *p);

struct spart *sluice_store_partition(struct storecore *sc, const char *topic, int32_t partition, int16_t *error)
{
	return part_get(sc, topic, partition, error);
}

struct sluice_plog *sluice_store_log(struct spart *p) { return p->log; }

void sluice_store_done(struct storecore *sc, struct partop *op) { op_done(sc, op); }

struct spart *sluice_store_partition_open(struct storecore *sc, const char *topic, int32_t partition)
{
	struct sstate *st = sc->state;
	uint32_t slot;
	struct spart *p = st->table_cap ? part_lookup(st, topic, partition, &slot) : NULL;
	return p && p->log ? p : NULL;
}

bool sluice_store_leads(const struct storecore *sc, const struct spart *p, int32_t *leader_epoch)
{
	*leader_epoch = p->part.leader_epoch;
	if (!p->log || !p->part.is_leader)
		return false;
	/* Until the controller's word arrives a partition is set up as a
	 * leader (sluice_partition_init): in a cluster that is no word at all. */
	return p->part.leadership_known || !sluice_config_cluster_mode(&sc->b->cfg);
}

void sluice_store_apply_word(struct storecore *sc, struct spart *p, const struct partop *op)
{
	if (op->tinfo && p->log && sluice_config_cluster_mode(&sc->b->cfg) && !part_earlier(sc, p, op->tinfo))
		part_leadership(sc, p, sluice_topic_partition(op->tinfo, op->partition));
}

/* Append a batch built by the broker itself (group coordinator records);
 * wait_op, when given, is answered once the batch is committed, or failed
 * with REQUEST_TIMED_OUT once offsets.commit.timeout.ms passed without
 * that (expire_waiting; Kafka's coordinator runtime times its writes out
 * so), the batch staying in the log. */
int16_t sluice_store_append(struct storecore *sc, struct spart *p, const uint8_t *batch, size_t len,
			    struct partop *wait_op)
{
	struct sstate *st = sc->state;
	int64_t base, last;
	if (!p->log || sluice_plog_failed(p->log) || dir_offline(sc->b, p->dir))
		return KERR_KAFKA_STORAGE_ERROR; /* as for clients: the directory's partitions are offline */
	if (!p->part.is_leader)
		return KERR_NOT_LEADER_OR_FOLLOWER; /* a follower's log grows only by what it fetches */
	if (wait_op && sluice_partition_isr_n(&p->part) < op_min_isr(sc, wait_op))
		return KERR_NOT_ENOUGH_REPLICAS; /* Kafka's acks=all check before the append */
	int rc = sluice_plog_append(p->log, batch, len, p->part.leader_epoch, -1, &base, &last);
	if (rc < 0)
		return KERR_KAFKA_STORAGE_ERROR;
	sluice_partition_on_append(&p->part, base);
	epochs_persist(sc, p);
	if (!p->dirty) {
		p->dirty = true;
		p->dirty_next = st->dirty_head;
		st->dirty_head = p;
	}
	if (wait_op) {
		/* expire_waiting finds the partition the op waits on by its name */
		assert(wait_op->partition == p->partition && strcmp(wait_op->topic, p->topic) == 0);
		wait_op->last_offset = last;
		sluice_partition_wait_append(&p->part, wait_op, true);
		sluice_deadlines_arm(&st->deadlines, &wait_op->deadline, sluice_now_ms(),
				     (wait_op->cfg ? wait_op->cfg : core_cfg(sc))->offsets_commit_timeout_ms);
	}
	return KERR_NONE;
}

struct sluice_partition *sluice_store_part(struct spart *p) { return &p->part; }

static void mark_dirty(struct sstate *st, struct spart *p)
{
	if (!p->dirty) {
		p->dirty = true;
		p->dirty_next = st->dirty_head;
		st->dirty_head = p;
	}
}

int sluice_store_append_verbatim(struct storecore *sc, struct spart *p, const uint8_t *batches, size_t len,
				 int64_t *last_offset)
{
	struct sstate *st = sc->state;
	if (!p->log || sluice_plog_failed(p->log) || dir_offline(sc->b, p->dir))
		return -EIO;
	int fds_before = sluice_plog_open_fds(p->log);
	int rc = sluice_plog_append_verbatim(p->log, batches, len, last_offset);
	if (rc == -EMFILE || rc == -ENFILE) {
		fd_budget(sc);
		rc = sluice_plog_append_verbatim(p->log, batches, len, last_offset);
	}
	st->fds_est += sluice_plog_open_fds(p->log) - fds_before;
	if (rc < 0)
		return rc == -EINVAL || rc == -ERANGE ? rc : -EIO;
	/* What the batches say about epochs and producers, as Kafka's follower
	 * learns it from the records it appends. */
	for (size_t off = 0; off < len;) {
		struct sluice_batch b;
		enum sluice_batch_result br = sluice_batch_parse(batches + off, len - off, &b);
		assert(br == SLUICE_BATCH_OK); /* the plog walked the same batches */
		(void)br;
		sluice_partition_epoch_assign(&p->part, b.leader_epoch, b.base_offset);
		if (b.producer_id >= 0 && !(b.attributes & SLUICE_BATCH_ATTR_CONTROL))
			sluice_partition_producer_record(&p->part, &b, b.base_offset, b.base_offset + b.last_offset_delta);
		off += (size_t)sluice_batch_total_bytes(&b);
	}
	epochs_persist(sc, p);
	mark_dirty(st, p);
	p->last_used_ms = sluice_now_ms();
	return 0;
}

/* After the log was cut: the partition's state follows, the appends that
 * waited past the end are answered, the epoch checkpoint written (synced). */
static void after_truncate(struct storecore *sc, struct spart *p, bool fully)
{
	for (struct partop *op = sluice_partition_on_truncate(&p->part, fully), *next; op; op = next) {
		next = op->next;
		op->next = NULL;
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		service_written(sc, op, false);
		op->high_watermark = sluice_partition_high_watermark(&p->part);
		op->log_start = sluice_plog_log_start(p->log);
		op_done(sc, op);
	}
	epochs_persist(sc, p);
	p->last_used_ms = sluice_now_ms();
}

static int64_t store_truncate(struct storecore *sc, struct spart *p, int64_t offset, bool fully)
{
	if (!p->log || sluice_plog_failed(p->log) || dir_offline(sc->b, p->dir))
		return -EIO;
	char err[512] = "";
	int rc = fully ? sluice_plog_truncate_fully(p->log, offset, err, sizeof err)
		       : sluice_plog_truncate_to(p->log, offset, err, sizeof err);
	if (rc < 0) {
		SLOG_ERR("storage", "%s-%d: truncation to offset %" PRId64 " failed: %s", p->topic, p->partition, offset,
			 err);
		if (sluice_plog_failed(p->log))
			sluice_dir_failed(sc->b, p->dir, "a truncation failed");
		return rc == -EINVAL ? rc : -EIO;
	}
	after_truncate(sc, p, fully);
	return sluice_plog_log_end(p->log);
}

int64_t sluice_store_truncate_to(struct storecore *sc, struct spart *p, int64_t offset)
{
	return store_truncate(sc, p, offset, false);
}

int64_t sluice_store_truncate_fully(struct storecore *sc, struct spart *p, int64_t offset)
{
	return store_truncate(sc, p, offset, true);
}

bool sluice_store_follower_position(struct spart *p, int64_t *log_end, int32_t *last_epoch, int64_t *log_start)
{
	const struct sluice_partition *pt = &p->part;
	if (!p->log || pt->is_leader || sluice_plog_failed(p->log) || dir_offline(p->sc->b, p->dir))
		return false;
	*log_end = sluice_plog_log_end(p->log);
	*last_epoch = pt->epoch_n ? pt->epochs[pt->epoch_n - 1].epoch : SLUICE_EPOCH_UNDEFINED;
	*log_start = sluice_plog_log_start(p->log);
	assert(*log_start <= *log_end);
	return true;
}

bool sluice_store_follower_unwritten(const struct spart *p)
{
	return p->log && !sluice_plog_failed(p->log) && sluice_plog_written_end(p->log) < sluice_plog_log_end(p->log);
}

bool sluice_store_follower_throttled(struct storecore *sc, const struct spart *p, int64_t now_ms)
{
	if (!(p->throttle & SLUICE_THROTTLE_FOLLOWER) || !p->log)
		return false;
	if (sluice_plog_log_end(p->log) >= p->part.leader_hw)
		return false; /* in sync: no lag behind the leader's high watermark (Kafka's isReplicaInSync) */
	const struct sluice_broker_config *bc = ((const struct sstate *)sc->state)->bcfg;
	int64_t rate = bc ? bc->follower_throttled_rate : INT64_MAX;
	return sluice_rate_exceeded(&sc->b->follower_quota, rate, now_ms);
}

void sluice_store_follower_fetched(struct storecore *sc, const struct spart *p, size_t bytes, int64_t now_ms)
{
	if ((p->throttle & SLUICE_THROTTLE_FOLLOWER) && bytes > 0)
		sluice_rate_record(&sc->b->follower_quota, (int64_t)bytes, now_ms);
}

bool sluice_store_follows(const struct spart *p, int32_t leader, int32_t epoch)
{
	return p->log && !p->part.is_leader && p->part.leader_id == leader && p->part.leader_epoch == epoch;
}


/* ---- the follower's side (the fetcher's storage calls, service.h) ------------------ */

/* Follower: the leader's log start moved up (DeleteRecords, retention):
 * this log's follows, as far as its own high watermark (Kafka's follower
 * maybeIncrementLogStartOffset), so records a client deleted do not come
 * back when this replica leads. */
static void follower_log_start(struct spart *p, int64_t leader_log_start)
{
	if (sluice_plog_failed(p->log))
		return;
	int64_t to = sluice_partition_high_watermark(&p->part);
	if (leader_log_start < to)
		to = leader_log_start;
	if (to <= sluice_plog_log_start(p->log))
		return;
	int64_t ls = sluice_plog_delete_records(p->log, to);
	assert(ls == to); /* below the high watermark, so below the written end */
	sluice_partition_epoch_truncate_from_start(&p->part, ls);
}

int16_t sluice_store_follower_append(struct storecore *sc, struct spart *p, const uint8_t *records, size_t len,
				     int64_t leader_hw, int64_t leader_log_start)
{
	struct sluice_plog *l = p->log;
	if (!l || sluice_plog_failed(l) || dir_offline(sc->b, p->dir))
		return KERR_KAFKA_STORAGE_ERROR;
	if (p->part.is_leader)
		return KERR_NOT_LEADER_OR_FOLLOWER;
	/* The whole batches from the log end on, each CRC checked (Kafka's
	 * follower checks them too): one held already is skipped, a partial
	 * one ends the answer (a leader may cut the last batch; it comes whole
	 * with the next fetch). */
	int16_t e = KERR_NONE;
	size_t from = 0, to = 0;
	int64_t leo = sluice_plog_log_end(l);
	while (to < len) {
		struct sluice_batch b;
		enum sluice_batch_result r = sluice_batch_check_crc(records + to, len - to, &b);
		if (r == SLUICE_BATCH_SHORT)
			break;
		if (r != SLUICE_BATCH_OK || b.last_offset_delta < 0) {
			e = KERR_CORRUPT_MESSAGE;
			break;
		}
		size_t blen = (size_t)sluice_batch_total_bytes(&b);
		if (to == from && b.base_offset + b.last_offset_delta < leo)
			from += blen; /* held already */
		to += blen;
	}
	if (to > from) {
		int64_t last;
		int rc = sluice_store_append_verbatim(sc, p, records + from, to - from, &last);
		if (rc == -EINVAL) {
			SLOG_WARN("replication", "%s-%d: the leader's batches do not follow the log end %" PRId64,
				  p->topic, p->partition, leo);
			e = KERR_CORRUPT_MESSAGE;
		} else if (rc < 0) {
			e = KERR_KAFKA_STORAGE_ERROR;
		}
	}
	if (sluice_partition_follower_hw(&p->part, leader_hw))
		wake_fetch_watchers(p); /* consumers reading here (KIP-392) may read further */
	follower_log_start(p, leader_log_start);
	return e;
}

int sluice_store_follower_diverged(struct storecore *sc, struct spart *p, int32_t epoch, int64_t end_offset)
{
	int64_t leo = sluice_plog_log_end(p->log);
	int64_t to = sluice_partition_truncation_offset(&p->part, epoch, end_offset, leo);
	if (to >= leo) {
		/* No record to cut, but epochs that start at the end go (an epoch
		 * this replica led without appending in it): else the next Fetch
		 * names it as LastFetchedEpoch and diverges again, for ever. */
		sluice_partition_epoch_truncate_from_end(&p->part, leo);
		epochs_persist(sc, p);
		return 0;
	}
	SLOG_INFO("replication", "%s-%d: diverged from the leader (its epoch %d ends at %" PRId64 "): truncating "
		  "from %" PRId64 " to %" PRId64, p->topic, p->partition, epoch, end_offset, leo, to);
	return sluice_store_truncate_to(sc, p, to) < 0 ? -1 : 0;
}

int sluice_store_follower_out_of_range(struct storecore *sc, struct spart *p, int64_t fetch_offset, int32_t last_epoch,
				       int64_t leader_log_start)
{
	int64_t leo = sluice_plog_log_end(p->log), start = sluice_plog_log_start(p->log), to;
	if (leo != fetch_offset)
		return -1; /* the log moved since the request: its next fetch asks anew */
	switch (sluice_partition_out_of_range(&p->part, start, leo, last_epoch, leader_log_start, &to)) {
	case SLUICE_PARTITION_OOR_RESTART_AT:
		if (leader_log_start > leo)
			SLOG_INFO("replication", "%s-%d: the leader's log starts at %" PRId64 ", past this log's end %" PRId64
				  ": starting over there", p->topic, p->partition, leader_log_start, leo);
		else
			SLOG_WARN("replication", "%s-%d: fetch at %" PRId64 " is out of the leader's range and this log "
				  "has no leader epoch to find where it agrees with the leader's: starting over at the "
				  "leader's log start %" PRId64, p->topic, p->partition, leo, to);
		return sluice_store_truncate_fully(sc, p, to) < 0 ? -1 : 0;
	case SLUICE_PARTITION_OOR_TRUNCATE_TO:
		SLOG_WARN("replication", "%s-%d: fetch at %" PRId64 " is out of the leader's range, which cannot place "
			  "epoch %d: dropping that epoch (truncating from %" PRId64 " to %" PRId64 ") and asking with "
			  "the one before", p->topic, p->partition, leo, last_epoch, leo, to);
		if (to >= leo) {
			sluice_partition_epoch_truncate_from_end(&p->part, leo); /* an epoch with no record here */
			epochs_persist(sc, p);
			return 0;
		}
		return sluice_store_truncate_to(sc, p, to) < 0 ? -1 : 0;
	case SLUICE_PARTITION_OOR_RETRY:
		return -1;
	}
	assert(!"unknown out-of-range action");
	return -1;
}

static int part_delete(struct storecore *sc, const char *topic, int32_t partition, const uint8_t id[16],
		       int16_t error);

/* A replica the metadata moved away from this broker, noted before any is
 * removed (removal changes the table being walked). */
struct moved_part {
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	int32_t partition;
	uint8_t id[16];
	int32_t leader;
	char isr[SLUICE_REPLICAS_MAX * 12];
};

static bool ids_has(const int32_t *ids, int32_t n, int32_t id)
{
	for (int32_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

/* Whether the data of a replica no longer assigned here is provably
 * garbage: the partition has a leader in a non-empty ISR without this
 * broker. The controller takes a replica out of a live partition's
 * replicas only when a reassignment completes (every replica that stays is
 * in the ISR) or is cancelled (the adding replicas go, the ISR of the
 * original ones stays), so every record this copy holds below its high
 * watermark is on every ISR member; what lies above was never committed,
 * and a follower's truncation would drop it too. Otherwise (the partition
 * offline) the copy is kept and looked at again at the next change. */
static bool moved_garbage(const struct sluice_partition_state *ps, int32_t self)
{
	if (ps->leader < 0 || ps->isr_n <= 0 || ids_has(ps->isr, ps->isr_n, self))
		return false;
	return ids_has(ps->isr, ps->isr_n, ps->leader);
}

/* Cluster mode, with the leadership sweep: every partition this core holds
 * whose topic lives on (same topic id) but whose replicas no longer name
 * this broker stops (part_stop), and its log is removed when that is
 * provably garbage (moved_garbage), as Kafka's brokers delete a replica
 * the metadata moved away. At most MOVED_SWEEP_PARTITIONS_MAX are removed
 * in a pass; true when the pass was cut short (the next turn goes on). */
static bool removed_sweep(struct storecore *sc, const struct sluice_meta_snapshot *snap)
{
	struct sstate *st = sc->state;
	int32_t self = sc->b->cfg.node_id;
	struct moved_part *gone = NULL;
	uint32_t n = 0;
	bool partial = false;
	for (uint32_t i = 0; i < st->table_cap && !partial; i++) {
		struct spart *p = st->table[i];
		if (!p || !p->log || !p->has_topic_id)
			continue;
		const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
		const struct sluice_partition_state *ps =
			t && !memcmp(t->id, p->topic_id, 16) ? sluice_topic_partition(t, p->partition) : NULL;
		if (!ps || ids_has(ps->replicas, ps->replica_n, self))
			continue;
		part_stop(sc, p);
		if (!moved_garbage(ps, self))
			continue;
		if (n == MOVED_SWEEP_PARTITIONS_MAX || (!gone && !(gone = calloc(MOVED_SWEEP_PARTITIONS_MAX, sizeof *gone)))) {
			partial = true;
			break;
		}
		struct moved_part *m = &gone[n++];
		snprintf(m->topic, sizeof m->topic, "%s", p->topic);
		m->partition = p->partition;
		memcpy(m->id, p->topic_id, 16);
		m->leader = ps->leader;
		ids_text(m->isr, sizeof m->isr, ps->isr, ps->isr_n);
	}
	assert(n <= MOVED_SWEEP_PARTITIONS_MAX);
	for (uint32_t i = 0; i < n; i++) {
		SLOG_INFO("replication", "%s-%d: moved away from this broker (leader %d, ISR [%s], which hold every "
			  "committed record): removing its log", gone[i].topic, gone[i].partition, gone[i].leader,
			  gone[i].isr);
		if (part_delete(sc, gone[i].topic, gone[i].partition, gone[i].id, KERR_NOT_LEADER_OR_FOLLOWER) < 0)
			partial = true; /* a rename failed (logged): tried again */
	}
	free(gone);
	return partial;
}

/* Cluster mode, once per metadata change: every partition the snapshot
 * places a replica of on this broker and that this core owns is opened
 * (a follower's log exists before any client names it) and takes the
 * snapshot's word (part_leadership). At most STORE_OPENS_PER_TURN logs
 * are opened in a turn; the pass is then repeated on the next turns. */
static void leadership_sweep(struct storecore *sc)
{
	struct sstate *st = sc->state;
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	if (snap->metadata_offset == st->led_offset && !st->led_partial) {
		b->meta.ops->release(b->meta.self, snap);
		return;
	}
	int32_t self = b->cfg.node_id;
	bool partial = false;
	/* The broker configuration this change brings (a replication throttle
	 * set before a reassignment) holds before the partitions change. */
	core_cfg_take(sc, snap);
	for (uint32_t i = 0; i < snap->topic_n; i++) {
		const struct sluice_topic *t = snap->topics[i];
		for (int32_t pi = 0; pi < t->partitions; pi++) {
			const struct sluice_partition_state *ps = sluice_topic_partition(t, pi);
			bool replica = false;
			for (int32_t k = 0; ps && k < ps->replica_n; k++)
				replica |= ps->replicas[k] == self;
			if (!replica || sluice_store_core_for(b, t->name, pi) != sc->id)
				continue;
			int16_t err = 0;
			struct spart *p = part_entry(sc, t->name, pi, &err);
			if (p && !p->log) {
				if (st->opens_turn >= STORE_OPENS_PER_TURN) {
					partial = true;
					continue;
				}
				st->opens_turn++;
				if (part_open(sc, p) != 0)
					continue; /* logged; its next op tries again */
			}
			if (p && part_earlier(sc, p, t)) {
				partial = true; /* its log goes this turn; the new one opens next pass */
				continue;
			}
			if (p) {
				p->throttle = ps->throttle;
				part_leadership(sc, p, ps);
			}
		}
	}
	partial |= removed_sweep(sc, snap);
	st->led_offset = snap->metadata_offset;
	st->led_partial = partial;
	b->meta.ops->release(b->meta.self, snap);
}

/* Kafka's partition.metadata: the directory names the topic id it belongs
 * to, so that at start a directory the metadata no longer knows can be
 * proven to be a deleted topic's (its id has a tombstone) or refused, and so
 * that a directory a failed deletion left behind is never served as a new
 * topic of the same name. Returns -1 on such a mismatch; otherwise writes
 * the file if the directory lacks it (created now, or by an older broker). */
static int part_metadata_check(struct broker *b, const char *topic, const char *dir, bool write)
{
	uint8_t have[16];
	int found = sluice_partition_metadata_read(dir, have);
	if (found < 0 || (found == 0 && !write))
		return 0; /* unreadable files were reported at start; absent before the open: written after it */
	int rc = 0;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *t = sluice_meta_find(snap, topic, strlen(topic));
	if (t && found == 1 && memcmp(have, t->id, 16) != 0) {
		char a[23], c[23];
		sluice_topic_id_base64(have, a);
		sluice_topic_id_base64(t->id, c);
		SLOG_ERR("storage", "%s belongs to topic id %s, not to topic %s's id %s (a deletion that did not finish); "
			 "left as it is, the partition is offline until a restart checks it", dir, a, topic, c);
		rc = -1;
	} else if (t && found == 0 && sluice_partition_metadata_write(dir, t->id) < 0)
		SLOG_WARN("storage", "cannot write %s/partition.metadata: %s", dir, strerror(errno));
	b->meta.ops->release(b->meta.self, snap);
	return rc;
}

static uint32_t offline_find(const struct sstate *st, const char *topic, int32_t partition)
{
	uint32_t i = 0;
	while (i < st->offline_n && (st->offline[i].partition != partition || strcmp(st->offline[i].topic, topic) != 0))
		i++;
	return i;
}

/* Take one partition offline (its files stay as they are). */
static void offline_add(struct storecore *sc, const char *topic, int32_t partition, const char *dir, const char *why)
{
	struct sstate *st = sc->state;
	SLOG_ERR("storage", "partition %s-%d is offline until a restart (KAFKA_STORAGE_ERROR): %s: %s; its files are "
		 "left as they are, and the other partitions in its log directory keep serving", topic, partition, dir, why);
	if (st->offline_n == st->offline_cap) {
		uint32_t cap = st->offline_cap ? 2 * st->offline_cap : 16;
		struct offline_part *n = cap <= SLUICE_STORE_PARTITIONS_MAX ? realloc(st->offline, cap * sizeof *n) : NULL;
		if (!n)
			return; /* not remembered: the next request tries the open again */
		st->offline = n;
		st->offline_cap = cap;
	}
	char *t = strdup(topic);
	if (!t)
		return;
	st->offline[st->offline_n++] = (struct offline_part){t, partition};
	assert(st->offline_n <= SLUICE_STORE_PARTITIONS_MAX);
}

static void offline_remove(struct sstate *st, const char *topic, int32_t partition)
{
	uint32_t i = offline_find(st, topic, partition);
	if (i == st->offline_n)
		return;
	free(st->offline[i].topic);
	st->offline[i] = st->offline[--st->offline_n];
}

/* The table entry for a partition, added when absent: no I/O, so an op can
 * be parked on it before its log is opened (part_open). */
static struct spart *part_entry(struct storecore *sc, const char *topic, int32_t partition, int16_t *error)
{
	struct sstate *st = sc->state;
	if ((st->count + 1) * 2 > st->table_cap)
		table_grow(st);
	uint32_t slot;
	struct spart *p = part_lookup(st, topic, partition, &slot);
	if (p)
		return p;
	if (st->count >= SLUICE_STORE_PARTITIONS_MAX || offline_find(st, topic, partition) < st->offline_n) {
		*error = KERR_KAFKA_STORAGE_ERROR;
		return NULL;
	}
	p = calloc(1, sizeof *p);
	if (!p || !(p->topic = strdup(topic))) {
		free(p);
		*error = KERR_UNKNOWN_SERVER_ERROR;
		return NULL;
	}
	p->partition = partition;
	p->sc = sc;
	p->dir = -1;
	p->metrics_topic = sluice_metrics_topic_slot(sc->b->metrics, topic);
	sluice_partition_init(&p->part, sc->b->cfg.node_id);
	st->table[slot] = p;
	st->count++;
	return p;
}

static void part_path(const struct storecore *sc, const struct spart *p, char *out, size_t len)
{
	assert(p->dir >= 0 && p->dir < sc->b->cfg.log_dir_count);
	snprintf(out, len, "%s/%s-%d", sc->b->cfg.log_dir[p->dir], p->topic, p->partition);
}

/* The leader-epoch-checkpoint into p's epoch cache, before attach checks
 * it against the log. Absent (a new partition, or one written before the
 * file existed) or unreadable, the cache is rebuilt from the newest
 * segments (attach) and the file written afresh. */
static void epochs_load(struct storecore *sc, struct spart *p, const char *dir)
{
	struct sstate *st = sc->state;
	struct sluice_ckpt_epoch e[SLUICE_PARTITION_EPOCHS_MAX];
	struct sluice_epoch_entry c[SLUICE_PARTITION_EPOCHS_MAX];
	uint32_t n = 0;
	bool dropped = false;
	char err[200] = "";
	int rc = sluice_ckpt_epochs_read(dir, e, SLUICE_PARTITION_EPOCHS_MAX, &n, &dropped, err, sizeof err);
	if (rc < 0)
		SLOG_WARN("storage", "%s/" SLUICE_CKPT_EPOCHS_FILE ": %s; the leader-epoch cache is rebuilt from the "
			  "newest segments", dir, err);
	assert(n <= SLUICE_PARTITION_EPOCHS_MAX);
	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct sluice_epoch_entry){e[i].epoch, e[i].start_offset};
	bool data = sluice_plog_log_end(p->log) > sluice_plog_log_start(p->log);
	/* An unreadable file (torn by a crash before it was synced): the epochs
	 * older than the newest segments' are unknown, and OffsetForLeaderEpoch
	 * says so rather than place them at the oldest one rebuilt. */
	sluice_partition_epoch_load(&p->part, c, (uint8_t)n, dropped || (rc < 0 && data));
	if (rc < 0 || (rc == 0 && data)) {
		st->epochs_rebuilt += data;
		p->part.epochs_dirty = true; /* written once attach rebuilt it */
	}
}

/* Write p's leader-epoch-checkpoint if its cache changed: renamed into
 * place, not synced. A crash may lose it (or an unwritten change): attach
 * rebuilds what it held from the newest two segments, where a change that
 * must survive (a new epoch, a truncation: partition.h) stays until the
 * log rolls; so such a change is written and synced before the next roll
 * (epochs_rolling), never on the path of a write. (Kafka fsyncs the file
 * in the append that starts an epoch; here a leader change costs its
 * writes neither a journal commit nor a file write.) A failed write takes
 * the directory offline, as Kafka does for a checkpoint it cannot write. */
static void epochs_write(struct storecore *sc, struct spart *p)
{
	struct sluice_partition *pt = &p->part;
	if (!pt->epochs_dirty || p->dir < 0 || dir_offline(sc->b, p->dir))
		return;
	p->epochs_unsynced |= pt->epochs_durable;
	pt->epochs_dirty = pt->epochs_durable = false;
	struct sluice_ckpt_epoch e[SLUICE_PARTITION_EPOCHS_MAX];
	assert(pt->epoch_n <= SLUICE_PARTITION_EPOCHS_MAX);
	for (uint8_t i = 0; i < pt->epoch_n; i++)
		e[i] = (struct sluice_ckpt_epoch){pt->epochs[i].epoch, pt->epochs[i].start_offset};
	char dir[STORE_PART_PATH_BYTES];
	part_path(sc, p, dir, sizeof dir);
	int rc = sluice_ckpt_epochs_write(dir, e, pt->epoch_n, false);
	if (rc < 0) {
		SLOG_ERR("storage", "%s/" SLUICE_CKPT_EPOCHS_FILE ": write failed: %s", dir, strerror(-rc));
		sluice_dir_failed(sc->b, p->dir, SLUICE_CKPT_EPOCHS_FILE " write failed");
	}
}

/* p's epoch cache may have changed: queue its checkpoint for writing
 * (epochs_flush). */
static void epochs_persist(struct storecore *sc, struct spart *p)
{
	struct sstate *st = sc->state;
	if (!p->part.epochs_dirty || p->epochs_queued)
		return;
	p->epochs_queued = true;
	p->epochs_next = st->epochs_head;
	st->epochs_head = p;
}

/* Off the list without writing (a partition being deleted or freed). */
static void epochs_unqueue(struct sstate *st, struct spart *p)
{
	if (!p->epochs_queued)
		return;
	for (struct spart **q = &st->epochs_head; *q; q = &(*q)->epochs_next)
		if (*q == p) {
			*q = p->epochs_next;
			break;
		}
	p->epochs_queued = false;
	p->epochs_next = NULL;
}

/* Write every queued checkpoint (housekeeping, shutdown). */
static void epochs_flush(struct storecore *sc)
{
	struct sstate *st = sc->state;
	struct spart *p = st->epochs_head;
	st->epochs_head = NULL;
	while (p) {
		struct spart *next = p->epochs_next;
		p->epochs_queued = false;
		p->epochs_next = NULL;
		if (p->log)
			epochs_write(sc, p);
		p = next;
	}
}

/* The log is about to roll (plog hook): after it, the segment before the
 * active one leaves the two a restart rescans, so a durable change of the
 * epoch cache must be on stable storage first. A roll syncs its segment
 * anyway; this adds one file and directory sync when a leader change or
 * truncation happened since the last roll, and none otherwise. */
static void epochs_rolling(struct sluice_plog *l, void *arg)
{
	struct spart *p = arg;
	struct storecore *sc = p->sc;
	struct sstate *st = sc->state;
	assert(p->log == l || !p->log);
	(void)l;
	epochs_write(sc, p); /* stays queued if it was: nothing left to write then */
	if (!p->epochs_unsynced || p->dir < 0 || dir_offline(sc->b, p->dir))
		return;
	p->epochs_unsynced = false;
	char dir[STORE_PART_PATH_BYTES];
	part_path(sc, p, dir, sizeof dir);
	const char *dirs[1] = {dir};
	uint32_t failed = 0;
	int rc = sluice_ckpt_epochs_sync(dirs, 1, &failed);
	if (rc < 0) {
		SLOG_ERR("storage", "%s/" SLUICE_CKPT_EPOCHS_FILE ": sync failed: %s", dir, strerror(-rc));
		sluice_dir_failed(sc->b, p->dir, SLUICE_CKPT_EPOCHS_FILE " sync failed");
	}
	st->epochs_roll_syncs++;
}

static int hw_entry_cmp(const void *a, const void *b)
{
	const struct hw_entry *x = a, *y = b;
	int c = strcmp(x->topic, y->topic);
	return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

static const struct hw_entry *hw_ck_find(const struct sstate *st, const char *topic, int32_t partition)
{
	struct hw_entry key = {(char *)topic, partition, 0, 0};
	return st->hw_ck_n ? bsearch(&key, st->hw_ck, st->hw_ck_n, sizeof key, hw_entry_cmp) : NULL;
}

/* What the metadata says of p at its open: whether it has other replicas,
 * and the leader epoch when this broker leads it (-1 otherwise). */
static void part_meta_state(struct storecore *sc, const struct spart *p, bool *replicated, int32_t *lead_epoch)
{
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
	const struct sluice_partition_state *ps = t ? sluice_topic_partition(t, p->partition) : NULL;
	*replicated = ps && ps->replica_n > 1;
	*lead_epoch = ps && ps->leader == b->cfg.node_id && ps->leader_epoch >= 0 ? ps->leader_epoch : -1;
	b->meta.ops->release(b->meta.self, snap);
}

/* Where p's high watermark starts (sluice_partition_attach): a replicated
 * partition at its checkpointed one (0 when none: attach keeps it at least
 * the log start), as Kafka; a single replica at its written end (-1), as
 * before replication. */
static int64_t part_hw_start(struct storecore *sc, const struct spart *p, bool replicated)
{
	if (!replicated)
		return -1;
	const struct hw_entry *e = hw_ck_find(sc->state, p->topic, p->partition);
	return e ? e->hw : 0;
}

/* Make the rename of a directory entry in data directory d durable. */
static int data_dir_sync(const char *d)
{
	int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	int rc = fsync(fd);
	int saved = errno;
	close(fd);
	errno = saved;
	return rc;
}

/* Cluster mode: Kafka's stray logs (KAFKA-14616). A topic deleted and
 * created again under its name while this broker was down leaves the old
 * topic's directory here, its partition.metadata naming the old topic id;
 * this broker never saw the deletion, so nothing proves the bytes are
 * garbage. As Kafka does, the directory is renamed in its data directory
 * to <topic>-<partition>.<32 random hex>-stray (the rename made durable
 * with a sync of that directory), which no scan takes for a partition
 * again (main.c warns of it at each start), and the partition starts
 * empty here and follows its leader. Only when the metadata knows the
 * topic under another id: an unknown topic is left alone, and single-node
 * mode keeps refusing such a directory (part_metadata_check). Returns 0
 * when dir may be opened (nothing to do, or set aside for a replica of the
 * current topic), otherwise the error for the op. */
static int16_t part_stray(struct storecore *sc, const struct spart *p, const char *dir)
{
	struct broker *b = sc->b;
	uint8_t have[16], live[16];
	if (!sluice_config_cluster_mode(&b->cfg) || sluice_partition_metadata_read(dir, have) != 1)
		return 0;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
	const struct sluice_partition_state *ps = t ? sluice_topic_partition(t, p->partition) : NULL;
	bool other = t && memcmp(have, t->id, 16) != 0;
	bool replica = ps && ids_has(ps->replicas, ps->replica_n, b->cfg.node_id);
	if (t)
		memcpy(live, t->id, 16);
	b->meta.ops->release(b->meta.self, snap);
	if (!other)
		return 0;
	assert(p->dir >= 0 && p->dir < b->cfg.log_dir_count);
	uint8_t u[16];
	if (getrandom(u, sizeof u, 0) != (ssize_t)sizeof u)
		memset(u, 0, sizeof u); /* a name already taken fails the rename: nothing is overwritten */
	char stray[STORE_PART_PATH_BYTES + 48], hex[33], a[23], c[23];
	for (int i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", u[i]);
	snprintf(stray, sizeof stray, "%s.%s-stray", dir, hex);
	sluice_topic_id_base64(have, a);
	sluice_topic_id_base64(live, c);
	struct stat taken;
	errno = 0;
	if (stat(stray, &taken) == 0 || rename(dir, stray) < 0) {
		SLOG_ERR("storage", "%s belongs to topic id %s, not to topic %s's id %s, and cannot be renamed to %s: %s; "
			 "left as it is, the partition is offline here", dir, a, p->topic, c, stray,
			 errno ? strerror(errno) : "name taken");
		return KERR_KAFKA_STORAGE_ERROR;
	}
	if (data_dir_sync(b->cfg.log_dir[p->dir]) < 0) {
		SLOG_ERR("storage", "%s: sync after renaming %s to %s failed: %s", b->cfg.log_dir[p->dir], dir, stray,
			 strerror(errno));
		sluice_dir_failed(b, p->dir, "directory sync failed");
		return KERR_KAFKA_STORAGE_ERROR;
	}
	SLOG_WARN("storage", "%s belongs to topic id %s, not to topic %s's id %s (the topic was deleted and created "
		  "again while this broker was away): renamed to %s and kept (Kafka's stray log; remove it once it is "
		  "not needed); the partition starts empty here%s", dir, a, p->topic, c, stray,
		  replica ? " and follows its leader" : "");
	return replica ? 0 : KERR_NOT_LEADER_OR_FOLLOWER;
}

/* Cluster mode: whether the metadata has p's topic and partition. A
 * request for a topic just deleted (a follower's fetch still in flight)
 * must not create its directory again: made from a snapshot without the
 * topic, it would name no topic id, and no sweep could prove it garbage
 * when a topic of the same name is created again. */
static bool part_known(struct broker *b, const struct spart *p)
{
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
	bool known = t && p->partition < t->partitions;
	b->meta.ops->release(b->meta.self, snap);
	return known;
}

/* Open (and so recover) p's log. Returns 0 or the error for the op: the
 * entry stays, without a log, and the next op tries again. */
static int16_t part_open(struct storecore *sc, struct spart *p)
{
	struct sstate *st = sc->state;
	char dir[STORE_PART_PATH_BYTES], err[512];
	assert(!p->log);
	if (offline_find(st, p->topic, p->partition) < st->offline_n)
		return KERR_KAFKA_STORAGE_ERROR; /* offline until a restart: its files are not opened again */
	if (sluice_config_cluster_mode(&sc->b->cfg) &&
	    sluice_partition_dir(sc->b, p->topic, p->partition, false, dir, sizeof dir) < 0 && !part_known(sc->b, p))
		return KERR_UNKNOWN_TOPIC_OR_PARTITION; /* a deleted topic's late fetch creates nothing */
	p->dir = sluice_partition_dir(sc->b, p->topic, p->partition, true, dir, sizeof dir);
	if (p->dir < 0 || dir_offline(sc->b, p->dir))
		return KERR_KAFKA_STORAGE_ERROR; /* no usable data directory */
	int16_t stray = part_stray(sc, p, dir);
	if (stray != 0)
		return stray;
	if (part_metadata_check(sc->b, p->topic, dir, false) < 0)
		return KERR_KAFKA_STORAGE_ERROR; /* the directory is another topic id's: never served */
	struct sluice_plog_hooks hooks = {wait_write, on_written, p, on_loaded, epochs_rolling};
	struct sluice_plog_recovery rec;
	/* Opening takes descriptors: stay within the budget first. */
	if (st->fds_est + 4 > st->fds_max)
		fd_budget(sc);
	int rc = sluice_plog_open(dir, &st->plog_cfg, sc->b->clean_start, &hooks, &p->log, &rec, err, sizeof err);
	if (rc < 0 && (strstr(err, strerror(EMFILE)) || strstr(err, strerror(ENFILE)))) {
		fd_budget(sc);
		rc = sluice_plog_open(dir, &st->plog_cfg, sc->b->clean_start, &hooks, &p->log, &rec, err, sizeof err);
	}
	if (rc < 0) {
		p->log = NULL;
		/* Out of descriptors or memory is the process's trouble, not the
		 * disk's: the next op tries again. A write that failed is the
		 * directory's; anything else is this partition's files. */
		bool process = strstr(err, strerror(EMFILE)) || strstr(err, strerror(ENFILE)) || strstr(err, "out of memory");
		if (process) {
			st->open_failures++;
			if (st->open_failures <= 10)
				SLOG_ERR("storage", "cannot open partition %s-%d: %s", p->topic, p->partition, err);
		} else if (rc == SLUICE_PLOG_OPEN_IO) {
			sluice_dir_failed(sc->b, p->dir, err);
		} else {
			offline_add(sc, p->topic, p->partition, dir, err);
		}
		return KERR_KAFKA_STORAGE_ERROR;
	}
	if (rec.bytes_truncated || rec.segments_damaged)
		SLOG_WARN("storage", "recovered %s-%d: %" PRId64 " batches scanned%s, %" PRId64
			  " bytes truncated, %d damaged segments kept (see above)",
			  p->topic, p->partition, rec.batches_scanned, rec.crc_checked ? " with CRC checks" : "",
			  rec.bytes_truncated, rec.segments_damaged);
	(void)part_metadata_check(sc->b, p->topic, dir, true);
	p->has_topic_id = sluice_partition_metadata_read(dir, p->topic_id) == 1;
	/* The high watermark, idempotent-producer state and leader epochs. */
	bool replicated;
	int32_t lead_epoch;
	part_meta_state(sc, p, &replicated, &lead_epoch);
	epochs_load(sc, p, dir);
	sluice_partition_attach(&p->part, p->log, part_hw_start(sc, p, replicated));
	/* Led here (a single node leads every partition): Kafka's makeLeader
	 * starts the leader epoch at the log end. */
	if (lead_epoch >= 0)
		sluice_partition_become_leader(&p->part, lead_epoch);
	epochs_persist(sc, p);
	st->fds_est += sluice_plog_open_fds(p->log);
	return 0;
}

static struct spart *part_get(struct storecore *sc, const char *topic, int32_t partition, int16_t *error)
{
	struct spart *p = part_entry(sc, topic, partition, error);
	if (p && !p->log && (*error = part_open(sc, p)) != 0)
		return NULL;
	return p;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path) < 0 ? 0 : 0;
}

/* Returns 0 once no directory of the partition (of topic id `id`) is left
 * under its name; the ops still waiting on it are answered with error. A
 * directory whose partition.metadata names another topic id is not this
 * topic's data and is left for the start-up check. */
static int part_delete(struct storecore *sc, const char *topic, int32_t partition, const uint8_t id[16],
		       int16_t error)
{
	struct sstate *st = sc->state;
	char dir[STORE_PART_PATH_BYTES];
	uint32_t slot = 0;
	offline_remove(st, topic, partition);
	struct spart *p = st->table_cap ? part_lookup(st, topic, partition, &slot) : NULL;
	if (p) {
		/* Fail anything still waiting, close the log, then drop the entry
		 * and re-insert the rest of its probe cluster. */
		for (struct partop *op; (op = sluice_partition_wait_pop(&p->part));) {
			op->error = error;
			service_written(sc, op, false);
			op_done(sc, op);
		}
		/* READs waiting for loads: answered now, before the close waits
		 * for the loads (whose hook then finds none). Responses still
		 * sending this log's extents keep them pinned in the pool. */
		for (struct partop *op = p->load_head, *next; op; op = next) {
			next = op->next;
			op->next = NULL;
			op->error = error;
			op_done(sc, op);
		}
		p->load_head = p->load_tail = NULL;
		sluice_fetcher_unfollow(sc, &p->follow);
		epochs_unqueue(st, p); /* its directory goes: nothing to write */
		for (struct spart **d = &st->dirty_head; *d; d = &(*d)->dirty_next)
			if (*d == p) {
				*d = p->dirty_next;
				break;
			}
		for (struct partop **q = &st->parked_head, *prev = NULL; p->parked && *q;) {
			struct partop *op = *q;
			if (op->partition != partition || strcmp(op->topic, topic) != 0) {
				prev = op;
				q = &op->next;
				continue;
			}
			*q = op->next;
			if (st->parked_tail == op)
				st->parked_tail = prev;
			st->parked_n--;
			p->parked--;
			op->next = NULL;
			op->error = error;
			op_done(sc, op);
		}
		if (p->cleaning) {
			/* its job comes back later and is thrown away */
			pthread_mutex_lock(&st->cleaner.mu);
			sluice_plog_clean_cancel(p->cleaning->job);
			p->cleaning->part = NULL;
			pthread_mutex_unlock(&st->cleaner.mu);
		}
		sluice_plog_close(p->log);
		sluice_partition_fini(&p->part);
		free(p->topic);
		free(p);
		st->table[slot] = NULL;
		st->count--;
		uint32_t mask = st->table_cap - 1;
		for (uint32_t i = (slot + 1) & mask; st->table[i]; i = (i + 1) & mask) {
			struct spart *q = st->table[i];
			st->table[i] = NULL;
			uint32_t s2;
			(void)part_lookup(st, q->topic, q->partition, &s2);
			st->table[s2] = q;
		}
	}
	int rc = 0;
	for (int d = 0; d < sc->b->cfg.log_dir_count; d++) {
		snprintf(dir, sizeof dir, "%s/%s-%d", sc->b->cfg.log_dir[d], topic, partition);
		/* Rename first, then remove: a crash in between leaves only a
		 * "-delete" directory (Kafka's <topic>-<partition>.<unique id>-delete),
		 * never a half-deleted live partition. The id is random: a name
		 * deleted twice must never collide with the first's leftovers. */
		uint8_t u[16];
		if (sluice_partition_metadata_read(dir, u) == 1 && memcmp(u, id, 16) != 0) {
			SLOG_WARN("storage", "%s belongs to another topic id than the deleted topic %s: left as it is", dir,
				  topic);
			continue;
		}
		if (getrandom(u, sizeof u, 0) != (ssize_t)sizeof u)
			memset(u, 0, sizeof u);
		char gone[1000], hex[33];
		for (int i = 0; i < 16; i++)
			snprintf(hex + 2 * i, 3, "%02x", u[i]);
		snprintf(gone, sizeof gone, "%s.%s-delete", dir, hex);
		if (rename(dir, gone) == 0)
			(void)nftw(gone, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		else if (errno != ENOENT) {
			SLOG_ERR("storage", "cannot rename %s away for deletion: %s; it is removed at the next start", dir,
				 strerror(errno));
			rc = -1;
		}
	}
	return rc;
}

static void op_run(struct storecore *sc, struct spart *p, struct partop *op);

/* fd_budget walks every partition: at most once a loop turn, however many
 * ops find the budget short. */
static void fd_budget_once(struct storecore *sc)
{
	struct sstate *st = sc->state;
	if (st->fds_est + STORE_OP_FDS_MAX > st->fds_max && !st->fd_budget_turn) {
		st->fd_budget_turn = true;
		fd_budget(sc);
	}
}

/* Whether an op on p may run this turn. A lookup by timestamp waits once
 * the turn's lookups did STORE_LOOKUP_BYTES_PER_TURN of work. An op whose
 * partition holds a descriptor runs (it reopens at most a few); otherwise
 * it needs room under the descriptor budget, which fills while the
 * partitions opened are still writing and frees as they go idle
 * (fd_budget), and opening the log takes one of the turn's opens. Without
 * this a request naming 100,000 partitions opened them all in one turn and
 * ran out of descriptors. */
static bool op_can_run(struct storecore *sc, struct spart *p, const struct partop *op)
{
	struct sstate *st = sc->state;
	if (op->kind == PARTOP_LIST_OFFSETS && op->offset >= 0 && st->lookup_work_turn >= STORE_LOOKUP_BYTES_PER_TURN)
		return false;
	if (p->log && sluice_plog_open_fds(p->log) > 0)
		return true;
	if (!p->log && st->opens_turn >= STORE_OPENS_PER_TURN)
		return false;
	fd_budget_once(sc);
	return st->fds_est + STORE_OP_FDS_MAX <= st->fds_max;
}

static void op_park(struct sstate *st, struct spart *p, struct partop *op)
{
	op->next = NULL;
	if (st->parked_tail)
		st->parked_tail->next = op;
	else
		st->parked_head = op;
	st->parked_tail = op;
	st->parked_n++;
	p->parked++;
	assert(p->parked <= st->parked_n);
}

/* The parked ops, oldest first, until one still cannot run (those behind
 * it wait too, which keeps each partition's order). */
static void run_parked(struct storecore *sc)
{
	struct sstate *st = sc->state;
	while (st->parked_head) {
		struct partop *op = st->parked_head;
		int16_t error = 0;
		struct spart *p = part_entry(sc, op->topic, op->partition, &error);
		if (p && !op_can_run(sc, p, op))
			break;
		st->parked_head = op->next;
		if (!st->parked_head)
			st->parked_tail = NULL;
		st->parked_n--;
		op->next = NULL;
		if (!p) {
			op->error = error;
			op_done(sc, op);
			continue;
		}
		assert(p->parked > 0);
		p->parked--;
		op_run(sc, p, op);
	}
}

/* DescribeLogDirs, one partition: what its open log says, in memory. A
 * partition without one here (never created on this broker: a single node
 * creates a partition's files at its first use; open failed; moved away
 * and awaiting removal; in a failed directory) is not described, as Kafka
 * describes only the logs it holds. No table entry is made for it. The
 * lag is Kafka's max(high watermark - log end offset, 0), with a
 * follower's high watermark the leader's as its last fetch answer said
 * (Kafka's follower caps its own at its log end, so its lag reads 0). */
static void op_log_dir(struct storecore *sc, struct partop *op)
{
	struct sstate *st = sc->state;
	assert(op->kind == PARTOP_LOG_DIR && op->topic);
	uint32_t slot;
	struct spart *p = st->table_cap ? part_lookup(st, op->topic, op->partition, &slot) : NULL;
	if (!p || !p->log || p->moved || p->dir < 0 || dir_offline(sc->b, p->dir) || sluice_plog_failed(p->log)) {
		op->error = KERR_UNKNOWN_TOPIC_OR_PARTITION;
		op_done(sc, op);
		return;
	}
	assert(p->dir < sc->b->cfg.log_dir_count);
	int64_t leo = sluice_plog_log_end(p->log);
	int64_t hw = p->part.is_leader ? sluice_partition_high_watermark(&p->part) : p->part.leader_hw;
	op->log_dir = (int16_t)p->dir;
	op->log_bytes = sluice_plog_size_bytes(p->log);
	op->offset_lag = hw > leo ? hw - leo : 0;
	assert(op->log_bytes >= 0 && op->offset_lag >= 0);
	op_done(sc, op);
}

/* DescribeLogDirs, one data directory: its volume's size (Kafka's
 * FileStore total and usable space). A failed directory, or one statvfs
 * cannot read, is KAFKA_STORAGE_ERROR. */
static void op_dir_space(struct storecore *sc, struct partop *op)
{
	const struct broker *b = sc->b;
	assert(op->kind == PARTOP_DIR_SPACE);
	assert(op->log_dir >= 0 && op->log_dir < b->cfg.log_dir_count);
	struct statvfs vfs;
	op->dir_total_bytes = op->dir_usable_bytes = -1;
	if (dir_offline(b, op->log_dir) || statvfs(b->cfg.log_dir[op->log_dir], &vfs) != 0) {
		op->error = KERR_KAFKA_STORAGE_ERROR;
	} else {
		op->dir_total_bytes = (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize;
		op->dir_usable_bytes = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
	}
	op_done(sc, op);
}

static void handle_op(struct storecore *sc, struct partop *op)
{
	struct sstate *st = sc->state;
	if (op->kind == PARTOP_LOG_DIR) {
		op_log_dir(sc, op);
		return;
	}
	if (op->kind == PARTOP_DIR_SPACE) {
		op_dir_space(sc, op);
		return;
	}
	if (op->kind == PARTOP_DELETE) {
		if (part_delete(sc, op->topic, op->partition, op->topic_id, KERR_UNKNOWN_TOPIC_OR_PARTITION) < 0)
			op->error = KERR_KAFKA_STORAGE_ERROR; /* the topic keeps its tombstone */
		op_done(sc, op);
		return;
	}
	const struct sluice_store_service_ops *svc = service_for(op->kind);
	if (svc) {
		svc->handle(sc, op);
		return;
	}
	int16_t error = 0;
	struct spart *p = part_entry(sc, op->topic, op->partition, &error);
	if (!p) {
		op->error = error;
		op_done(sc, op);
		return;
	}
	if (p->parked || !op_can_run(sc, p, op)) {
		op_park(st, p, op);
		return;
	}
	op_run(sc, p, op);
}

/* Read op's batches by reference into a free slot: the bytes pinned, 0,
 * an error of sluice_plog_read_extents, WOULD_BLOCK (loads submitted), or
 * TOO_MANY_EXTENTS also when no slot or pin room is left or the load
 * retries ran out (the caller then copies). */
static int32_t read_pinned(struct storecore *sc, struct spart *p, struct partop *op, int64_t hw, int32_t claim,
			   bool min_one)
{
	struct sstate *st = sc->state;
	struct read_slot *s = st->slot_free;
	int64_t extents = claim / (int64_t)sluice_pool_extent_bytes(st->pool) + 2; /* at most, with min_one's batch */
	if (!s || st->pinned_extents + extents > st->pinned_extents_max || op->load_retries >= STORE_READ_LOAD_RETRIES_MAX)
		return SLUICE_PLOG_READ_TOO_MANY_EXTENTS;
	assert(!s->lent && s->res.n == 0);
	int32_t n = sluice_plog_read_extents(p->log, op->offset, hw, claim, min_one, &sc->ring, &s->res);
	if (n == SLUICE_PLOG_READ_WOULD_BLOCK)
		op->load_retries++;
	if (n <= 0)
		return n;
	assert(s->res.bytes == n && s->res.n > 0 && s->res.n <= SLUICE_READ_PINS_RANGES_MAX);
	st->slot_free = s->free_next;
	s->lent = true;
	s->pins.n = s->res.n;
	s->pins.bytes = n;
	for (uint32_t i = 0; i < s->res.n; i++) {
		const struct sluice_read_range *g = &s->res.range[i];
		s->pins.range[i] = (struct sluice_send_range){g->ext->buf + g->off, g->len, &s->pins.pin};
	}
	s->pins.pin.release = sluice_net_release_pins;
	s->pins.pin.holds = 0;
	s->pins.nc = &sc->b->net[op->net_core];
	s->pins.store_core = sc->id;
	st->pinned_extents += s->res.n;
	op->pins = &s->pins;
	return n;
}

/* MSG_READ_RELEASE: a network core is done with a slot's extents. */
static void read_release(struct storecore *sc, struct sluice_read_pins *pins)
{
	struct sstate *st = sc->state;
	struct read_slot *s = (struct read_slot *)pins; /* the pins are its first member */
	assert(s >= st->slots && s < st->slots + STORE_READ_PINS_MAX && s->lent);
	assert(pins->store_core == sc->id && pins->n == s->res.n);
	st->pinned_extents -= s->res.n;
	assert(st->pinned_extents >= 0);
	sluice_read_result_release(&s->res);
	s->lent = false;
	s->pins.n = 0;
	s->free_next = st->slot_free;
	st->slot_free = s;
}

/* At shutdown, with every network core stopped: the pins never sent back
 * (a release backlog a network core left, messages not drained) are
 * released here, before the logs and the pool go. */
static void read_slots_reclaim(struct storecore *sc)
{
	struct sstate *st = sc->state;
	for (uint32_t i = 0; st->slots && i < STORE_READ_PINS_MAX; i++)
		if (st->slots[i].lent)
			read_release(sc, &st->slots[i].pins);
	assert(st->pinned_extents == 0);
	free(st->slots);
	st->slots = st->slot_free = NULL;
}

/* The leader replication throttle in effect on this core: bytes/s, INT64_MAX none. */
static int64_t leader_rate(const struct storecore *sc)
{
	const struct sluice_broker_config *bc = ((const struct sstate *)sc->state)->bcfg;
	return bc ? bc->leader_throttled_rate : INT64_MAX;
}

/* Kafka's shouldLeaderThrottle: a replica out of the ISR of a partition
 * whose leader.replication.throttled.replicas names this replica gets no
 * records while the bytes served for throttled partitions lately are
 * above leader.replication.throttled.rate. */
static bool leader_throttled(struct storecore *sc, const struct spart *p, int32_t replica_id, int64_t now)
{
	if (!(p->throttle & SLUICE_THROTTLE_LEADER))
		return false;
	for (uint8_t i = 0; i < p->part.replica_n; i++)
		if (p->part.replicas[i].id == replica_id && p->part.replicas[i].in_isr)
			return false;
	return sluice_rate_exceeded(&sc->b->leader_quota, leader_rate(sc), now);
}

/* A follower's fetch on this replica (Kafka's Partition.fetchRecords for a
 * follower): refused unless this replica leads at the epoch the follower
 * names (FENCED_LEADER_EPOCH older, UNKNOWN_LEADER_EPOCH newer) and the
 * follower is one of its replicas; then its LastFetchedEpoch and
 * FetchOffset are checked against the epoch cache (a log that diverged
 * gets DivergingEpoch and no records: it truncates and asks again), and its
 * FetchOffset is its position, which may advance the high watermark (and
 * so answer acks=all appends and wake consumers). Returns true when op was
 * answered here. */
static bool replica_fetch(struct storecore *sc, struct spart *p, struct partop *op)
{
	struct sluice_partition *pt = &p->part;
	bool member = false;
	for (uint8_t i = 0; i < pt->replica_n; i++)
		member |= pt->replicas[i].id == op->replica_id && op->replica_id != pt->self_id;
	int16_t e = !pt->is_leader ? KERR_NOT_LEADER_OR_FOLLOWER
		  : op->leader_epoch >= 0 && op->leader_epoch < pt->leader_epoch ? KERR_FENCED_LEADER_EPOCH
		  : op->leader_epoch > pt->leader_epoch ? KERR_UNKNOWN_LEADER_EPOCH
		  : !member ? KERR_NOT_LEADER_OR_FOLLOWER : KERR_NONE;
	int64_t leo = sluice_plog_log_end(p->log);
	if (!e && op->last_fetched_epoch >= 0) {
		int32_t epoch;
		int64_t end = sluice_partition_epoch_end_offset(pt, op->last_fetched_epoch, leo, &epoch);
		if (epoch == SLUICE_EPOCH_UNDEFINED || end == SLUICE_EPOCH_OFFSET_UNDEFINED)
			e = KERR_OFFSET_OUT_OF_RANGE; /* Kafka: the end of the last fetched epoch cannot be known */
		else if (epoch < op->last_fetched_epoch || end < op->offset) {
			op->diverging_epoch = epoch;
			op->diverging_end = end;
			op->high_watermark = sluice_partition_high_watermark(pt);
			op_done(sc, op);
			return true;
		}
	}
	/* The follower names a leader epoch newer than this broker knows: the
	 * change is on its way here too (both learn it from the controller),
	 * most often within milliseconds. Held as a fetch with nothing to
	 * return is, until the change applies here (answer_waiting wakes the
	 * watchers) or the request's wait ends (its last read answers the
	 * error), rather than answered with an error the follower would wait
	 * out before asking again. Answered meanwhile (another partition's
	 * records ended the wait), it moves nothing at the follower: no
	 * records, no high watermark, no log start. */
	if ((e == KERR_UNKNOWN_LEADER_EPOCH || (e == KERR_NOT_LEADER_OR_FOLLOWER && op->leader_epoch > pt->leader_epoch)) &&
	    op->watch) {
		op->rlen = 0;
		op->high_watermark = op->log_start = -1;
		sluice_partition_watch(pt, op->net_core);
		op_done(sc, op);
		return true;
	}
	if (e) {
		op->error = e;
		op_done(sc, op);
		return true;
	}
	int64_t now = sluice_now_ms();
	if (op->offset >= 0 && op->offset <= leo && sluice_partition_replica_position(pt, op->replica_id, op->offset, now))
		answer_waiting(p, false);
	isr_check(sc, p, now); /* a follower caught up rejoins the ISR at once */
	op->high_watermark = sluice_partition_high_watermark(pt);
	op->hw_news = sluice_partition_replica_fetch(pt, op->replica_id, op->replica_log_start);
	deletes_check(sc, p); /* its log start may be what a DeleteRecords waits for */
	if (leader_throttled(sc, p, op->replica_id, now)) {
		op->rlen = 0; /* Kafka's leader answers a throttled replica with no records */
		op_done(sc, op);
		return true;
	}
	return false;
}

/* The replicas of op's partition in its consumer's rack (the network core
 * chose them from its snapshot: op->rack_replicas), into ids; their count. */
static uint8_t rack_candidates(const struct partop *op, int32_t ids[SLUICE_REPLICAS_MAX])
{
	const struct sluice_partition_state *st = op->tinfo ? sluice_topic_partition(op->tinfo, op->partition) : NULL;
	uint8_t n = 0;
	for (int32_t i = 0; st && i < st->replica_n; i++)
		if (op->rack_replicas & (1u << i))
			ids[n++] = st->replicas[i];
	assert(n <= SLUICE_REPLICAS_MAX);
	return n;
}

/* A consumer's READ of a partition this replica leads, when the replica
 * selector points it elsewhere (Kafka's ReplicaManager.readFromLog with a
 * preferred read replica): answered without records, naming the in-sync
 * follower in its rack that holds the offset. Returns true when answered. */
static bool read_elsewhere(struct storecore *sc, struct spart *p, struct partop *op)
{
	int32_t ids[SLUICE_REPLICAS_MAX];
	uint8_t n = op->rack_replicas ? rack_candidates(op, ids) : 0;
	int32_t to = n ? sluice_partition_read_replica(&p->part, ids, n, op->offset, sluice_now_ms()) : -1;
	if (to < 0)
		return false;
	assert(to != p->part.self_id);
	SLOG_DEBUG("replication", "%s-%d: a consumer at offset %" PRId64 " is sent to broker %d, in its rack", p->topic,
		   p->partition, op->offset, to);
	op->preferred_read_replica = to;
	op_done(sc, op);
	return true;
}

/* PARTOP_READ: by reference when it can (read_pinned), else copied; a read
 * waiting for cold extents waits on p's load list (on_loaded) with its
 * budget claim given back. */
/* Who answers a READ, before anything is read: a follower's fetch is
 * checked (replica_fetch) and reads all that is written here; a consumer's
 * on a follower is served only from Fetch v11 on (before, consumers read
 * from the leader), and one on the leader may be pointed at a replica in
 * its rack (read_elsewhere). A consumer reads below the high watermark, on
 * a follower the one its leader's answers taught it (never above what it
 * wrote there); past it, up to the log end, there is nothing yet; past the
 * log end or below the log start, OFFSET_OUT_OF_RANGE: Kafka's follower
 * answers alike, and the consumer then goes back to the leader (KIP-392).
 * Returns true when op was answered; *hw is where its read stops. */
static bool read_route(struct storecore *sc, struct spart *p, struct partop *op, int64_t *hw)
{
	op->diverging_epoch = SLUICE_EPOCH_UNDEFINED;
	op->preferred_read_replica = -1;
	op->hw_news = false;
	if (op->from_replica) {
		if (replica_fetch(sc, p, op))
			return true;
		*hw = sluice_plog_written_end(p->log);
		return false;
	}
	if (p->moved || (!p->part.is_leader && !op->follower_read)) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		op_done(sc, op);
		return true;
	}
	assert(*hw == sluice_partition_high_watermark(&p->part));
	return p->part.is_leader && read_elsewhere(sc, p, op);
}

static void op_read(struct storecore *sc, struct spart *p, struct partop *op, int64_t hw)
{
	if (read_route(sc, p, op, &hw))
		return;
	int32_t claim = read_budget_claim(op);
	/* Past the request's budget a partition reads nothing, not even
	 * one oversized batch (Kafka's min-one is for a request's first). */
	bool min_one = op->min_one && claim == op->max_bytes;
	assert(!op->pins && !op->rdata);
	op->metrics_topic = p->metrics_topic; /* bytes out, counted by the network core as it answers */
	/* A consumer never reads past the high watermark. */
	int32_t n = read_pinned(sc, p, op, hw, claim, min_one);
	if (n == SLUICE_PLOG_READ_WOULD_BLOCK) {
		if (op->read_budget)
			__atomic_add_fetch(op->read_budget, (int64_t)claim, __ATOMIC_RELAXED);
		op->next = NULL;
		if (p->load_tail)
			p->load_tail->next = op;
		else
			p->load_head = op;
		p->load_tail = op;
		return;
	}
	if (n == SLUICE_PLOG_READ_TOO_MANY_EXTENTS)
		n = sluice_plog_read_below(p->log, op->offset, hw, claim, min_one, &op->rdata);
	if (!p->part.is_leader && !op->from_replica)
		SLOG_DEBUG("replication", "%s-%d: a consumer reads from this follower at offset %" PRId64 ": %d bytes "
			   "(high watermark %" PRId64 ")", p->topic, p->partition, op->offset, n, hw);
	if (op->read_budget) /* give back what was not read; an oversized batch takes more */
		__atomic_add_fetch(op->read_budget, (int64_t)claim - (n > 0 ? n : 0), __ATOMIC_RELAXED);
	if (n == -1)
		op->error = KERR_OFFSET_OUT_OF_RANGE;
	else if (n == -3)
		op->error = KERR_CORRUPT_MESSAGE;
	else if (n < 0)
		op->error = KERR_KAFKA_STORAGE_ERROR;
	else
		op->rlen = n;
	/* Kafka counts every throttled partition's bytes sent to followers. */
	if (n > 0 && op->from_replica && (p->throttle & SLUICE_THROTTLE_LEADER))
		sluice_rate_record(&sc->b->leader_quota, n, sluice_now_ms());
	if (n == 0 && op->watch)
		sluice_partition_watch(&p->part, op->net_core);
	op->load_retries = 0;
	op_done(sc, op);
}

/* DeleteRecords (Kafka's deleteRecordsOnLeader, then DelayedDeleteRecords):
 * the leader's log start moves up to the offset (-1: the high watermark),
 * never into what consumers cannot see yet; the answer waits until the low
 * watermark reached it, that is until every replica on a live broker moved
 * its log start there too (a follower moves it from its next Fetch answer,
 * up to its high watermark, and says so in the Fetch after: within about
 * replica.fetch.wait.max.ms on an idle partition), and is then the low
 * watermark. At the request's TimeoutMs it is REQUEST_TIMED_OUT instead,
 * with the low watermark as it was at the deletion, as Kafka answers (the
 * leader's log start stays where it moved). A single replica answers at
 * once. */
static void op_delete_records(struct storecore *sc, struct spart *p, struct partop *op, int64_t hw)
{
	struct sstate *st = sc->state;
	assert(op->kind == PARTOP_DELETE_RECORDS);
	if (!p->part.is_leader) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER; /* a follower's log start follows its leader's only */
		op_done(sc, op);
		return;
	}
	int64_t to = op->offset == -1 ? hw : op->offset;
	int64_t ls = to > hw || to < 0 ? -1 : sluice_plog_delete_records(p->log, to);
	if (ls < 0) {
		op->error = KERR_OFFSET_OUT_OF_RANGE;
		op_done(sc, op);
		return;
	}
	sluice_partition_epoch_truncate_from_start(&p->part, ls); /* as Kafka's log start moves */
	op->offset = to; /* from here on: the offset every live replica's log start must reach */
	op->log_start = low_watermark(sc, p);
	if (op->log_start >= to) {
		op_done(sc, op);
		return;
	}
	sluice_partition_delete_wait(&p->part, op);
	sluice_deadlines_arm(&st->deadlines, &op->deadline, sluice_now_ms(), op->timeout_ms > 0 ? op->timeout_ms : 0);
}

/* OffsetForLeaderEpoch: where the epoch asked about ends, from the epoch
 * cache: the log end offset for the latest epoch, else the start of the
 * next higher one (Kafka's LeaderEpochFileCache.endOffsetFor). Leadership
 * and CurrentLeaderEpoch were checked by the network core. */
static void op_epoch_end(struct storecore *sc, struct spart *p, struct partop *op)
{
	assert(op->kind == PARTOP_EPOCH_END);
	int32_t requested = op->offset < INT32_MIN || op->offset > INT32_MAX ? -1 : (int32_t)op->offset, epoch;
	op->base_offset = sluice_partition_epoch_end_offset(&p->part, requested, sluice_plog_log_end(p->log), &epoch);
	op->last_offset = epoch;
	assert(op->base_offset >= -1 && op->last_offset <= requested);
	op_done(sc, op);
}

/* ListOffsets: -1 the high watermark, -2 the log start, else by time. */
static void op_list_offsets(struct storecore *sc, struct sluice_plog *l, struct partop *op, int64_t hw)
{
	struct sstate *st = sc->state;
	assert(op->kind == PARTOP_LIST_OFFSETS);
	int64_t ts = op->offset;
	op->timestamp = -1;
	if (ts == -1)
		op->base_offset = hw;
	else if (ts == -2)
		op->base_offset = sluice_plog_log_start(l);
	else if (ts < 0)
		op->base_offset = -1;
	else
		op->base_offset = sluice_plog_offset_for_time_work(l, ts, &op->timestamp, &st->lookup_work_turn);
	op_done(sc, op);
}

/* The broker configuration in effect on this core: the dynamic one it
 * holds, else the file's. An op carries its request's (op->cfg), newer or
 * the same, and uses that. */
static const struct sluice_config *core_cfg(const struct storecore *sc)
{
	const struct sstate *st = sc->state;
	return st->bcfg ? &st->bcfg->effective : &sc->b->cfg;
}

/* Hold snap's dynamic configuration from now on. */
static void core_cfg_take(struct storecore *sc, const struct sluice_meta_snapshot *snap)
{
	struct sstate *st = sc->state;
	if (snap->broker_config == st->bcfg)
		return;
	if (snap->broker_config)
		sluice_broker_config_ref(snap->broker_config);
	sluice_broker_config_unref(st->bcfg);
	st->bcfg = snap->broker_config;
}

/* The topic's own segment size, flush interval and roll time, else the
 * broker's. */
static void append_limits(struct storecore *sc, struct sluice_plog *l, const struct partop *op)
{
	if (!op->tinfo)
		return;
	const struct sluice_topic_limits *lim = &op->tinfo->limits;
	const struct sluice_config *cfg = op->cfg ? op->cfg : core_cfg(sc);
	sluice_plog_set_limits(l, lim->segment_bytes > 0 ? lim->segment_bytes : cfg->log_segment_bytes,
			       lim->flush_messages > 0 ? lim->flush_messages : cfg->log_flush_interval_messages,
			       lim->segment_ms > 0 ? lim->segment_ms : cfg->log_roll_ms);
}

/* The append itself, retried once after giving descriptors back; 0 or the
 * error (KAFKA_STORAGE_ERROR) already set on op. */
static int append_write(struct storecore *sc, struct spart *p, struct partop *op, int fds_before)
{
	struct sstate *st = sc->state;
	struct sluice_plog *l = p->log;
	/* message.timestamp.type=LogAppendTime: the broker's clock, now */
	int8_t lat = op->tinfo ? op->tinfo->limits.log_append_time : -1;
	op->timestamp = (lat >= 0 ? lat : (op->cfg ? op->cfg : core_cfg(sc))->log_append_time) ? wall_now_ms() : -1;
	int32_t epoch = p->part.leader_epoch;
	int rc = sluice_plog_append(l, op->data, op->len, epoch, op->timestamp, &op->base_offset, &op->last_offset);
	if (rc == -EMFILE || rc == -ENFILE) {
		fd_budget(sc);
		rc = sluice_plog_append(l, op->data, op->len, epoch, op->timestamp, &op->base_offset, &op->last_offset);
	}
	st->fds_est += sluice_plog_open_fds(l) - fds_before;
	if (rc < 0)
		op->error = KERR_KAFKA_STORAGE_ERROR;
	assert(rc < 0 || op->last_offset >= op->base_offset);
	return rc < 0 ? -1 : 0;
}

/* Produce: idempotence checked, the batch appended, the op waiting for its
 * write (or, for a duplicate, for the original's visibility). */
static void op_append(struct storecore *sc, struct spart *p, struct partop *op, int64_t hw, int fds_before)
{
	struct sstate *st = sc->state;
	assert(op->kind == PARTOP_APPEND);
	append_limits(sc, p->log, op);
	struct sluice_batch b;
	enum sluice_batch_result br = sluice_batch_parse(op->data, op->len, &b);
	assert(br == SLUICE_BATCH_OK); /* validated by the network core */
	(void)br;
	bool idempotent = b.producer_id >= 0;
	/* Only the leader appends (the network core checked its snapshot,
	 * which may be ahead of or behind this partition's word); acks=all
	 * only while the ISR holds min.insync.replicas (Kafka checks before
	 * the append, and again when answering). */
	if (!p->part.is_leader) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		op_done(sc, op);
		return;
	}
	if (op->acks == -1 && sluice_partition_isr_n(&p->part) < op_min_isr(sc, op)) {
		op->error = KERR_NOT_ENOUGH_REPLICAS;
		op->error_message = "The size of the current ISR is less than min.insync.replicas";
		op_done(sc, op);
		return;
	}
	enum sluice_producer_verdict pv = SLUICE_PRODUCER_APPEND;
	if (idempotent)
		pv = sluice_partition_producer_check(&p->part, &b, &op->base_offset, &op->last_offset, &op->error,
						     &op->error_message);
	if (pv == SLUICE_PRODUCER_DUPLICATE &&
	    op->last_offset < (op->acks == -1 ? hw : sluice_plog_written_end(p->log))) {
		op_done(sc, op); /* answered with the original offsets, visible (or written) already */
		return;
	}
	if (pv == SLUICE_PRODUCER_REFUSED) {
		assert(op->error != 0);
		op_done(sc, op);
		return;
	}
	if (pv == SLUICE_PRODUCER_APPEND) {
		if (append_write(sc, p, op, fds_before) < 0) {
			op_done(sc, op);
			return;
		}
		sluice_partition_on_append(&p->part, op->base_offset);
		if (sc->metrics) /* records and bytes in, counted here: a duplicate never gets this far */
			sluice_metrics_topic_in(sc->metrics, p->metrics_topic,
						(uint64_t)b.records_count, op->len);
		if (idempotent)
			sluice_partition_producer_record(&p->part, &b, op->base_offset, op->last_offset);
		if (!p->dirty) {
			p->dirty = true;
			p->dirty_next = st->dirty_head;
			st->dirty_head = p;
		}
	}
	sluice_partition_wait_append(&p->part, op, op->acks == -1); /* answered once visible, or written */
	if (op->acks == -1) /* or REQUEST_TIMED_OUT at its request's TimeoutMs (expire_waiting) */
		sluice_deadlines_arm(&st->deadlines, &op->deadline, sluice_now_ms(),
				     op->timeout_ms > 0 ? op->timeout_ms : 0);
}

/* The ops whose request's TimeoutMs passed while they waited for other
 * replicas are answered REQUEST_TIMED_OUT (Kafka's purgatory expiring a
 * DelayedProduce or DelayedDeleteRecords; each partition of a request
 * alone, so a request's other partitions keep the answers they had, as in
 * Kafka's). An acks=all append's answer keeps its offsets: its records stay
 * in the log and become visible once the ISR has them, as in Kafka, and an
 * idempotent producer's retry of the batch is answered with them. A
 * DeleteRecords keeps the low watermark it had at the deletion. A group
 * coordinator's write (offsets.commit.timeout.ms) is failed the same way:
 * its service hears REQUEST_TIMED_OUT and answers as Kafka's coordinator
 * does (group.c), its records staying in the log. */
static void expire_waiting(struct storecore *sc, int64_t now)
{
	struct sstate *st = sc->state;
	for (uint32_t k = 0; k < STORE_EXPIRIES_PER_TURN; k++) {
		struct sluice_deadline *d = sluice_deadlines_expired(&st->deadlines, now);
		if (!d)
			return;
		struct partop *op = (struct partop *)(void *)((char *)d - offsetof(struct partop, deadline));
		uint32_t slot;
		struct spart *p = part_lookup(st, op->topic, op->partition, &slot);
		assert(p && p->log); /* an armed op waits on its partition, which answers it before it goes */
		if (op->kind == PARTOP_DELETE_RECORDS) {
			sluice_partition_delete_remove(&p->part, op);
			op->error = KERR_REQUEST_TIMED_OUT;
			op_done(sc, op);
			continue;
		}
		assert((op->kind == PARTOP_APPEND && op->acks == -1) || op->kind == PARTOP_GROUP);
		if (op->last_offset >= sluice_plog_written_end(p->log)) {
			/* Its own write is still out: not what the timeout is for. */
			sluice_deadlines_arm(&st->deadlines, d, now, STORE_EXPIRY_WRITE_RECHECK_MS);
			continue;
		}
		sluice_partition_wait_remove(&p->part, op);
		op->error = KERR_REQUEST_TIMED_OUT;
		append_answer(p, op, sluice_partition_high_watermark(&p->part));
	}
}

/* Cluster mode: whether the newest metadata still places a replica of p
 * here (or says nothing of it). An op carrying an older word must not
 * create the log of a replica moved away (removed_sweep deleted it). */
static bool replica_here(struct storecore *sc, const struct spart *p)
{
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
	const struct sluice_partition_state *ps = t ? sluice_topic_partition(t, p->partition) : NULL;
	bool here = !ps || ids_has(ps->replicas, ps->replica_n, b->cfg.node_id);
	b->meta.ops->release(b->meta.self, snap);
	return here;
}

static void op_run(struct storecore *sc, struct spart *p, struct partop *op)
{
	struct sstate *st = sc->state;
	if (!p->log && sluice_config_cluster_mode(&sc->b->cfg) && !replica_here(sc, p)) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		op_done(sc, op);
		return;
	}
	if (!p->log) {
		st->opens_turn++;
		int16_t e = part_open(sc, p);
		if (e) {
			op->error = e;
			op_done(sc, op);
			return;
		}
	}
	struct sluice_plog *l = p->log;
	assert(l && op->kind != PARTOP_GROUP); /* group ops go to their service before partition lookup */
	/* An op for a topic of another id than this log's (the name deleted
	 * and created again, the old log not yet removed): never served from
	 * or written into it; the client asks again once the new log is open. */
	if (op->tinfo && part_earlier(sc, p, op->tinfo)) {
		op->error = KERR_NOT_LEADER_OR_FOLLOWER;
		op_done(sc, op);
		return;
	}
	/* The op's snapshot may be newer than what this core applied: its
	 * word on the partition counts before the op runs. */
	if (op->tinfo && sluice_config_cluster_mode(&sc->b->cfg))
		part_leadership(sc, p, sluice_topic_partition(op->tinfo, op->partition));
	p->last_used_ms = sluice_now_ms();
	/* This op may reopen descriptors the partition gave back (op_can_run
	 * made room): count what it opens. */
	int fds_before = sluice_plog_open_fds(l);
	op->log_start = sluice_plog_log_start(l);
	int64_t hw = sluice_partition_high_watermark(&p->part);
	op->high_watermark = hw;
	if (sluice_plog_failed(l) || dir_offline(sc->b, p->dir)) {
		op->error = KERR_KAFKA_STORAGE_ERROR;
		op_done(sc, op);
		return;
	}
	switch (op->kind) {
	case PARTOP_DELETE_RECORDS:
		op_delete_records(sc, p, op, hw);
		break;
	case PARTOP_APPEND:
		op_append(sc, p, op, hw, fds_before);
		break;
	case PARTOP_READ:
		op_read(sc, p, op, hw);
		st->fds_est += sluice_plog_open_fds(l) - fds_before;
		break;
	case PARTOP_LIST_OFFSETS:
		op_list_offsets(sc, l, op, hw);
		break;
	case PARTOP_EPOCH_END:
		op_epoch_end(sc, p, op);
		break;
	default:
		assert(!"unknown partop kind");
	}
	/* op is answered (or waiting) by now: not touched again here. */
	epochs_persist(sc, p);
}

static void dispatch_cqe(struct storecore *sc, struct io_uring_cqe *cqe)
{
	struct sstate *st = sc->state;
	uintptr_t ud = (uintptr_t)io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&sc->ring, cqe);
	if (ud == 0)
		return;
	if (ud == 8) { /* eventfd read */
		st->efd_armed = false;
		return;
	}
	if (ud >= SLUICE_FETCHER_UD_MIN && ud < SLUICE_FETCHER_UD_END) { /* the follower fetcher's sockets */
		sluice_fetcher_complete(sc, ud, res);
		return;
	}
	struct sluice_plog *l = (struct sluice_plog *)(ud & ~(uintptr_t)7);
	sluice_plog_complete(l, (int)(ud & 7), res);
}

static bool drain_rings(struct storecore *sc)
{
	struct sstate *st = sc->state;
	bool any = false;
	st->opens_turn = 0;
	st->lookup_work_turn = 0;
	st->fd_budget_turn = false;
	run_parked(sc);
	/* Each parked op owes a reply, as do those in the backlog the network
	 * cores have not taken yet: past half the backlog's limit no new op is
	 * taken (the full rings push back on the network cores) rather than
	 * growing towards it (an assertion). */
	if (sluice_rt_backlog_n(&sc->rt) + st->parked_n >= SLUICE_RT_BACKLOG_MAX / 2)
		return any;
	for (int n = 0; n < sc->b->net_n; n++) {
		struct sluice_msg m;
		for (int k = 0; k < STORE_OPS_PER_RING_TURN && sluice_ring_pop(&sc->in[n], &m); k++) {
			any = true;
			assert(m.ptr && m.from_core == (uint32_t)n);
			if (m.type == MSG_READ_RELEASE) {
				read_release(sc, m.ptr);
				continue;
			}
			assert(m.type == MSG_PARTOP);
			handle_op(sc, m.ptr);
		}
	}
	return any;
}

static void submit_writes(struct storecore *sc)
{
	struct sstate *st = sc->state;
	struct spart **pp = &st->dirty_head;
	while (*pp) {
		struct spart *p = *pp;
		if (sluice_plog_write_pending(p->log)) {
			if (io_uring_sq_space_left(&sc->ring) < SLUICE_PLOG_WRITE_SQES_MAX + 1)
				io_uring_submit(&sc->ring);
			if (sluice_plog_submit_write(p->log, &sc->ring) < 0) {
				pp = &p->dirty_next;
				continue;
			}
		}
		/* keep it listed while its write is in flight; it may need another */
		if (!sluice_plog_write_pending(p->log) && !sluice_partition_waiting(&p->part)) {
			p->dirty = false;
			*pp = p->dirty_next;
			continue;
		}
		pp = &p->dirty_next;
	}
}

static int64_t wall_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Background duties on their own clocks: retention every
 * log.retention.check.interval.ms, time-based flushing (log.flush.interval.ms). */
static int cmp_last_used(const void *a, const void *b)
{
	const struct spart *x = *(struct spart *const *)a, *y = *(struct spart *const *)b;
	return x->last_used_ms < y->last_used_ms ? -1 : x->last_used_ms > y->last_used_ms;
}

/* Keep open descriptors under this core's budget, and extent memory within
 * sluice.cache.bytes.max: the partitions idle the longest give back their
 * descriptors (reopened on their next use) and, when the pool had to
 * allocate past its budget, hand their tails to the cache, which then
 * evicts least recently used extents. */
static void fd_budget(struct storecore *sc)
{
	struct sstate *st = sc->state;
	struct sluice_pool *pool = st->pool;
	int64_t open_fds = 0;
	for (uint32_t i = 0; i < st->table_cap; i++)
		if (st->table[i] && st->table[i]->log)
			open_fds += sluice_plog_open_fds(st->table[i]->log);
	st->fds_est = open_fds;
	bool over = sluice_pool_over_budget(pool);
	/* Room for one more op's descriptors (op_can_run), or they wait for
	 * ever: releasing only past the budget left it full. */
	bool short_fds = open_fds + STORE_OP_FDS_MAX > st->fds_max;
	if (!short_fds && !over)
		return;
	struct spart **idle = malloc(st->count * sizeof *idle);
	if (!idle)
		return;
	uint32_t n = 0;
	/* Only the idle partitions holding something to give back: with
	 * 100,000 partitions, sorting them all on every turn that parked ops
	 * wait for descriptors made a wide Fetch quadratic (50 s). */
	for (uint32_t i = 0; i < st->table_cap; i++) {
		struct spart *p = st->table[i];
		if (p && p->log && !p->dirty && !sluice_partition_waiting(&p->part) &&
		    (sluice_plog_open_fds(p->log) > 0 || sluice_plog_cache_bytes(p->log) > 0))
			idle[n++] = p;
	}
	/* Least recently used first; down to half the budget while ops wait
	 * for descriptors (fewer turns of this walk), else to three quarters. */
	qsort(idle, n, sizeof *idle, cmp_last_used);
	int64_t target = st->parked_n ? st->fds_max / 2 : st->fds_max * 3 / 4;
	if (short_fds)
		for (uint32_t i = 0; i < n && open_fds > target; i++)
			open_fds -= sluice_plog_release_fds(idle[i]->log);
	/* A trim walks the cache's LRU list: trim after every 64 tails handed
	 * over, not after each (10,000 idle partitions made that quadratic). */
	uint32_t handed = 0;
	for (uint32_t i = 0; i < n && sluice_pool_over_budget(pool); i++) {
		handed += sluice_plog_release_cache(idle[i]->log) > 0;
		if (handed == 64 || i + 1 == n) {
			sluice_pool_trim(pool);
			handed = 0;
		}
	}
	if (handed)
		sluice_pool_trim(pool);
	st->fds_est = open_fds;
	free(idle);
}

static void *cleaner_main(void *arg)
{
	struct storecore *sc = arg;
	struct cleaner *c = &((struct sstate *)sc->state)->cleaner;
	char name[16];
	snprintf(name, sizeof name, "sluice-clean%d", sc->id);
	pthread_setname_np(pthread_self(), name);
	pthread_mutex_lock(&c->mu);
	while (!c->stop) {
		struct clean_item *it = c->queued;
		if (!it) {
			pthread_cond_wait(&c->cv, &c->mu);
			continue;
		}
		c->queued = it->next;
		c->running = it;
		pthread_mutex_unlock(&c->mu);
		sluice_plog_clean_run(it->job);
		pthread_mutex_lock(&c->mu);
		c->running = NULL;
		it->next = c->done;
		c->done = it;
		__atomic_store_n(&c->done_ready, 1, __ATOMIC_RELEASE);
		sluice_rt_wake(&sc->rt);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Snapshot a compaction pass of p and hand it to the cleaner thread (run
 * here when the thread could not be started). */
static void cleaner_submit(struct storecore *sc, struct spart *p, const struct sluice_topic_limits *lim,
			   int64_t wall_ms)
{
	struct sstate *st = sc->state;
	const struct sluice_config *cfg = core_cfg(sc);
	int64_t drm = lim->delete_retention_ms != SLUICE_LIMIT_UNSET ? lim->delete_retention_ms
								  : cfg->log_cleaner_delete_retention_ms;
	int64_t lag = lim->min_compaction_lag_ms != SLUICE_LIMIT_UNSET ? lim->min_compaction_lag_ms
									 : cfg->log_cleaner_min_compaction_lag_ms;
	struct sluice_plog_clean_policy pol = {
		.delete_retention_ms = drm,
		.budget_bytes = cfg->cleaner_pass_bytes_max,
		.min_lag_ms = lag,
		.max_lag_ms = lim->max_compaction_lag_ms != SLUICE_LIMIT_UNSET ? lim->max_compaction_lag_ms
									: cfg->log_cleaner_max_compaction_lag_ms,
		.min_dirty_ratio = lim->min_cleanable_dirty_ratio >= 0 ? lim->min_cleanable_dirty_ratio
								     : cfg->log_cleaner_min_cleanable_ratio,
	};
	struct sluice_plog_clean_job *j = sluice_plog_clean_prepare(p->log, wall_ms, &pol);
	if (!j)
		return;
	sluice_plog_clean_set_io_limit(j, cfg->log_cleaner_io_bytes_per_sec);
	struct clean_item *it = st->cleaner.started ? calloc(1, sizeof *it) : NULL;
	if (!it) {
		sluice_plog_clean_run(j);
		int64_t gone = sluice_plog_clean_finish(p->log, j);
		if (gone > 0)
			SLOG_INFO("storage", "%s-%d: compaction removed %" PRId64 " bytes", p->topic, p->partition, gone);
		return;
	}
	it->job = j;
	it->part = p;
	p->cleaning = it;
	pthread_mutex_lock(&st->cleaner.mu);
	struct clean_item **tail = &st->cleaner.queued;
	while (*tail)
		tail = &(*tail)->next;
	*tail = it;
	pthread_cond_signal(&st->cleaner.cv);
	pthread_mutex_unlock(&st->cleaner.mu);
}

/* Swap in what the cleaner finished. */
static void cleaner_collect(struct storecore *sc)
{
	struct cleaner *c = &((struct sstate *)sc->state)->cleaner;
	if (!__atomic_load_n(&c->done_ready, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&c->mu);
	struct clean_item *it = c->done;
	c->done = NULL;
	__atomic_store_n(&c->done_ready, 0, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->mu);
	while (it) {
		struct clean_item *next = it->next;
		struct spart *p = it->part;
		if (p) {
			p->cleaning = NULL;
			int64_t gone = sluice_plog_clean_finish(p->log, it->job);
			if (gone > 0)
				SLOG_INFO("storage", "%s-%d: compaction removed %" PRId64 " bytes", p->topic, p->partition,
					  gone); /* a failed pass is logged with its reason by the plog */
		} else {
			sluice_plog_clean_discard(it->job);
		}
		free(it);
		it = next;
	}
}

/* At shutdown: stop the thread (a running job is cancelled) and throw away
 * every job not swapped in; the logs are closed after. */
static void cleaner_stop(struct storecore *sc)
{
	struct cleaner *c = &((struct sstate *)sc->state)->cleaner;
	if (!c->started)
		return;
	pthread_mutex_lock(&c->mu);
	c->stop = true;
	if (c->running)
		sluice_plog_clean_cancel(c->running->job);
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	c->started = false;
	struct clean_item *lists[2] = {c->queued, c->done};
	c->queued = c->done = NULL;
	for (int k = 0; k < 2; k++)
		for (struct clean_item *it = lists[k], *next; it; it = next) {
			next = it->next;
			if (it->part)
				it->part->cleaning = NULL;
			sluice_plog_clean_discard(it->job);
			free(it);
		}
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->cv);
}

/* ---- replication-offset-checkpoint ----------------------------------------------- */

struct hw_load {
	struct storecore *sc;
	int dir;
};

/* An entry of a data directory's file: kept when this core owns the partition. */
static void hw_ck_add(const char *topic, size_t tlen, int32_t partition, int64_t offset, void *arg)
{
	const struct hw_load *hl = arg;
	struct sstate *st = hl->sc->state;
	char t[SLUICE_TOPIC_NAME_MAX + 1];
	if (tlen > SLUICE_TOPIC_NAME_MAX || !sluice_topic_name_valid(topic, tlen))
		return;
	memcpy(t, topic, tlen);
	t[tlen] = '\0';
	if (sluice_store_core_for(hl->sc->b, t, partition) != hl->sc->id)
		return;
	if (st->hw_ck_n == st->hw_ck_cap) {
		uint32_t cap = st->hw_ck_cap ? 2 * st->hw_ck_cap : 256;
		struct hw_entry *n = cap <= SLUICE_STORE_PARTITIONS_MAX ? realloc(st->hw_ck, cap * sizeof *n) : NULL;
		if (!n)
			return; /* its partition starts at its log start, as with no file */
		st->hw_ck = n;
		st->hw_ck_cap = cap;
	}
	char *copy = strdup(t);
	if (copy)
		st->hw_ck[st->hw_ck_n++] = (struct hw_entry){copy, partition, hl->dir, offset};
	assert(st->hw_ck_n <= st->hw_ck_cap);
}

/* At start: the high watermarks every data directory's file holds for
 * this core's partitions. A file that cannot be read is reported (by core
 * 0) and ignored: its replicated partitions start at their log start and
 * learn the high watermark from their leader, as with no file. */
static void hw_ckpt_load(struct storecore *sc)
{
	struct sstate *st = sc->state;
	const struct sluice_config *cfg = &sc->b->cfg;
	for (int d = 0; d < cfg->log_dir_count; d++) {
		if (dir_offline(sc->b, d))
			continue;
		char path[SLUICE_CONFIG_STRING_MAX + 64], err[200] = "";
		snprintf(path, sizeof path, "%s/" SLUICE_CKPT_HW_FILE, cfg->log_dir[d]);
		struct hw_load hl = {sc, d};
		if (sluice_ckpt_offsets_read(path, hw_ck_add, &hl, err, sizeof err) < 0 && sc->id == 0)
			SLOG_WARN("storage", "%s: %s; it is ignored (replicated partitions there start from their log start "
				  "offset and learn the high watermark from their leaders)", path, err);
	}
	if (st->hw_ck_n)
		qsort(st->hw_ck, st->hw_ck_n, sizeof *st->hw_ck, hw_entry_cmp);
}

static void hw_share_free(struct sluice_hw_share *s)
{
	if (!s)
		return;
	for (int d = 0; d < SLUICE_LOG_DIRS_MAX; d++)
		free(s->dir[d].body);
	free(s);
}

/* This core's lines of every data directory's file: its open partitions'
 * high watermarks, and those read at start for partitions not open here
 * (kept, not lost). NULL when out of memory. */
static struct sluice_hw_share *hw_share_build(struct storecore *sc)
{
	struct sstate *st = sc->state;
	struct sluice_hw_share *s = calloc(1, sizeof *s);
	bool ok = s != NULL;
	for (uint32_t i = 0; ok && i < st->table_cap; i++) {
		const struct spart *p = st->table[i];
		if (!p || !p->log || p->dir < 0)
			continue;
		__typeof__(s->dir[0]) *d = &s->dir[p->dir];
		ok = sluice_ckpt_offsets_line(&d->body, &d->len, &d->cap, p->topic, p->partition,
					      sluice_partition_high_watermark(&p->part)) == 0;
		d->count++;
	}
	for (uint32_t i = 0; ok && i < st->hw_ck_n; i++) {
		const struct hw_entry *e = &st->hw_ck[i];
		uint32_t slot;
		const struct spart *p = part_lookup(st, e->topic, e->partition, &slot);
		if (p && p->log)
			continue;
		__typeof__(s->dir[0]) *d = &s->dir[e->dir];
		ok = sluice_ckpt_offsets_line(&d->body, &d->len, &d->cap, e->topic, e->partition, e->hw) == 0;
		d->count++;
	}
	if (!ok) {
		hw_share_free(s);
		return NULL;
	}
	return s;
}

/* Write every data directory's replication-offset-checkpoint whose share
 * from this core changed since its last write: this core's new share
 * merged with every other core's latest (under the broker's lock, so two
 * cores never write one file at once and each write holds every core's
 * latest lines). A write that fails takes the directory offline, as Kafka
 * does for a checkpoint it cannot write. */
static void hw_ckpt_write(struct storecore *sc)
{
	struct broker *b = sc->b;
	struct sluice_hw_share *mine = hw_share_build(sc), *old = b->hw_share[sc->id];
	if (!mine)
		return; /* out of memory: the next turn tries again */
	bool changed[SLUICE_LOG_DIRS_MAX] = {false}, any = false;
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		changed[d] = !old || old->dir[d].len != mine->dir[d].len ||
			     (mine->dir[d].len && memcmp(old->dir[d].body, mine->dir[d].body, mine->dir[d].len) != 0);
		any |= changed[d];
	}
	if (!any) {
		hw_share_free(mine);
		return;
	}
	pthread_mutex_lock(&b->hw_ckpt_mu);
	b->hw_share[sc->id] = mine;
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		if (!changed[d] || dir_offline(b, d))
			continue;
		size_t len = 0;
		uint32_t count = 0;
		for (int c = 0; c < b->store_n; c++)
			if (b->hw_share[c]) {
				len += b->hw_share[c]->dir[d].len;
				count += b->hw_share[c]->dir[d].count;
			}
		char *body = malloc(len + 1), path[SLUICE_CONFIG_STRING_MAX + 64];
		if (!body)
			continue;
		size_t at = 0;
		for (int c = 0; c < b->store_n; c++)
			if (b->hw_share[c] && b->hw_share[c]->dir[d].len) {
				memcpy(body + at, b->hw_share[c]->dir[d].body, b->hw_share[c]->dir[d].len);
				at += b->hw_share[c]->dir[d].len;
			}
		assert(at == len);
		snprintf(path, sizeof path, "%s/" SLUICE_CKPT_HW_FILE, b->cfg.log_dir[d]);
		int rc = sluice_ckpt_offsets_write(path, body, len, count);
		free(body);
		if (rc < 0) {
			SLOG_ERR("storage", "%s: write failed: %s", path, strerror(-rc));
			sluice_dir_failed(b, d, SLUICE_CKPT_HW_FILE " write failed");
		}
	}
	pthread_mutex_unlock(&b->hw_ckpt_mu);
	hw_share_free(old); /* no other core reads it: the lock was held while it was replaced */
}

/* Give back the preallocation of partitions idle for PREALLOC_IDLE_MS, a
 * bounded number per pass, resuming where the last pass stopped. */
static void trim_idle(struct storecore *sc, int64_t now)
{
	struct sstate *st = sc->state;
	uint32_t trims = 0, mask = st->table_cap - 1;
	for (uint32_t k = 0; k < st->table_cap && trims < PREALLOC_TRIMS_PER_PASS; k++) {
		struct spart *p = st->table[(st->trim_cursor + k) & mask];
		if (p && p->log && !p->dirty && !sluice_partition_waiting(&p->part) && sluice_plog_trim_prealloc(p->log, now, PREALLOC_IDLE_MS) > 0)
			trims++;
		if (trims == PREALLOC_TRIMS_PER_PASS)
			st->trim_cursor = (st->trim_cursor + k + 1) & mask;
	}
}

/* One partition of a deleted topic, noted before any is removed (removal
 * changes the table being walked). */
struct deleted_part {
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	int32_t partition;
	uint8_t id[16];
};

/* Cluster mode: another broker took the DeleteTopics, so only the metadata
 * tells this one. A partition open here under topic id X whose topic the
 * current snapshot no longer has (or has under another id: deleted and
 * created again) was deleted: its log is closed
 * and its directory removed, as PARTOP_DELETE does, before a topic created
 * again under the name can be served the old records. The snapshots of the
 * controller backend are whole images (never a partial load), so a topic
 * absent from one is gone. A partition whose files name no topic id is
 * left alone (nothing proves it was that topic). */
static void deleted_sweep(struct storecore *sc)
{
	struct sstate *st = sc->state;
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	if (snap->metadata_offset == st->swept_offset) {
		b->meta.ops->release(b->meta.self, snap);
		return;
	}
	struct deleted_part *gone = NULL;
	uint32_t n = 0;
	for (uint32_t i = 0; i < st->table_cap && n < DELETED_SWEEP_PARTITIONS_MAX; i++) {
		const struct spart *p = st->table[i];
		if (!p || !p->log || !p->has_topic_id)
			continue;
		const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
		if (t && !memcmp(t->id, p->topic_id, 16))
			continue; /* live (partitions never shrink: a higher index is left for a restart to judge) */
		if (!gone && !(gone = calloc(DELETED_SWEEP_PARTITIONS_MAX, sizeof *gone)))
			break; /* tried again next pass */
		snprintf(gone[n].topic, sizeof gone[n].topic, "%s", p->topic);
		gone[n].partition = p->partition;
		memcpy(gone[n].id, p->topic_id, 16);
		n++;
	}
	/* All seen (not cut short): the next pass waits for the next change. */
	if (n < DELETED_SWEEP_PARTITIONS_MAX && (n == 0 || gone))
		st->swept_offset = snap->metadata_offset;
	b->meta.ops->release(b->meta.self, snap);
	assert(n <= DELETED_SWEEP_PARTITIONS_MAX);
	for (uint32_t i = 0; i < n; i++) {
		char hex[23];
		sluice_topic_id_base64(gone[i].id, hex);
		SLOG_WARN("storage", "%s-%d: topic id %s is no longer in the cluster's metadata (deleted through another "
			  "broker): removing its log", gone[i].topic, gone[i].partition, hex);
		(void)part_delete(sc, gone[i].topic, gone[i].partition, gone[i].id, KERR_UNKNOWN_TOPIC_OR_PARTITION);
	}
	/* A topic created again under the name has its replicas here opened
	 * afresh by the next leadership pass (which otherwise waits for the
	 * next metadata change): a log reopened from a snapshot that still had
	 * the old topic, and so removed here, would leave the new topic's
	 * replica closed until then, out of its ISR. */
	if (n)
		st->led_partial = true;
	free(gone);
}

static void housekeeping(struct storecore *sc, int64_t now)
{
	struct sstate *st = sc->state;
	if (now >= st->next_config_ms) {
		st->next_config_ms = now + STORE_CONFIG_REFRESH_MS;
		struct sluice_meta_snapshot *snap = sc->b->meta.ops->acquire(sc->b->meta.self);
		core_cfg_take(sc, snap);
		sc->b->meta.ops->release(sc->b->meta.self, snap);
	}
	const struct sluice_config *cfg = core_cfg(sc);
	if (now >= st->next_fd_check_ms) {
		st->next_fd_check_ms = now + 200;
		fd_budget(sc);
	}
	if (now >= st->next_trim_ms) {
		st->next_trim_ms = now + 1000;
		trim_idle(sc, now);
		if (sluice_config_cluster_mode(cfg))
			deleted_sweep(sc);
	}
	if (now >= st->next_hw_ckpt_ms) {
		st->next_hw_ckpt_ms = now + cfg->replica_hw_checkpoint_interval_ms;
		hw_ckpt_write(sc);
	}
	if (st->epochs_head && now >= st->next_epochs_ms) {
		st->next_epochs_ms = now + STORE_EPOCHS_WRITE_MS;
		epochs_flush(sc);
	}
	if (now >= st->next_stats_ms) {
		st->next_stats_ms = now + 60000;
		struct sluice_pool_stats ps;
		sluice_pool_get_stats(st->pool, &ps);
		if (ps.hits + ps.misses)
			SLOG_DEBUG("storage", "storage core %d extents: %zu of %zu bytes allocated (%u registered), "
					      "%zu cached; reads %" PRIu64 " hits %" PRIu64 " misses, %" PRIu64
					      " evictions, %" PRIu64 " past budget",
				   sc->id, ps.bytes_allocated, ps.bytes_budget, ps.registered, ps.bytes_cached, ps.hits,
				   ps.misses, ps.evictions, ps.unbudgeted);
		if (st->epochs_roll_syncs)
			SLOG_DEBUG("storage", "storage core %d: %" PRIu64 " leader-epoch checkpoints synced before a roll",
				   sc->id, st->epochs_roll_syncs);
	}
	if (cfg->log_flush_interval_ms >= 0 && now >= st->next_flush_ms) {
		int64_t step = cfg->log_flush_interval_ms > 0 ? cfg->log_flush_interval_ms : 10;
		st->next_flush_ms = now + (step < 1000 ? step : 1000);
		for (uint32_t i = 0; i < st->table_cap; i++)
			if (st->table[i] && st->table[i]->log && sluice_plog_sync_if_due(st->table[i]->log, now, cfg->log_flush_interval_ms) < 0)
				SLOG_ERR("storage", "%s-%d: fdatasync failed", st->table[i]->topic, st->table[i]->partition);
	}
	bool retention_due = now >= st->next_retention_ms, cleaner_due = now >= st->next_clean_ms;
	if (!retention_due && !cleaner_due)
		return;
	if (retention_due)
		st->next_retention_ms = now + cfg->log_retention_check_interval_ms;
	if (cleaner_due)
		st->next_clean_ms = now + (cfg->log_cleaner_backoff_ms > 0 ? cfg->log_cleaner_backoff_ms : 1);
	struct sluice_meta_snapshot *snap = sc->b->meta.ops->acquire(sc->b->meta.self);
	core_cfg_take(sc, snap);
	cfg = core_cfg(sc);
	int64_t wall = wall_now_ms();
	for (uint32_t i = 0; i < st->table_cap; i++) {
		struct spart *p = st->table[i];
		if (!p || !p->log)
			continue;
		const struct sluice_topic *t = sluice_meta_find(snap, p->topic, strlen(p->topic));
		if (!t)
			continue;
		if (cleaner_due && sluice_topic_limits_compact(&t->limits, cfg->log_cleanup_compact)) {
			if (!p->cleaning)
				cleaner_submit(sc, p, &t->limits, wall);
		}
		if (!retention_due || !sluice_topic_limits_delete(&t->limits, cfg->log_cleanup_delete))
			continue;
		int64_t rms = t->limits.retention_ms != SLUICE_LIMIT_UNSET ? t->limits.retention_ms : cfg->log_retention_ms;
		int64_t rbytes = t->limits.retention_bytes != SLUICE_LIMIT_UNSET ? t->limits.retention_bytes : cfg->log_retention_bytes;
		int n = sluice_plog_enforce_retention(p->log, wall, rms, rbytes);
		if (n > 0) {
			SLOG_INFO("storage", "%s-%d: retention deleted %d segment(s); log start offset now %" PRId64,
				  p->topic, p->partition, n, sluice_plog_log_start(p->log));
			sluice_partition_epoch_truncate_from_start(&p->part, sluice_plog_log_start(p->log));
			epochs_persist(sc, p);
		}
	}
	sc->b->meta.ops->release(sc->b->meta.self, snap);
}

/* At start, every partition this core owns is opened (and so recovered)
 * before anything else, as Kafka recovers all logs: an unclean stop is
 * repaired everywhere, not only where clients happen to look, and
 * retention sees every partition. main() has already checked every
 * directory against the metadata (removing only those proven to be deleted
 * topics', refusing to start on any other); one that is still unknown here
 * is left alone, never deleted. */
static void startup_open_all(struct storecore *sc)
{
	struct broker *b = sc->b;
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	int opened = 0, skipped = 0;
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		if (dir_offline(b, d))
			continue;
		DIR *dir = opendir(b->cfg.log_dir[d]);
		if (!dir)
			continue;
		struct dirent *e;
		while ((e = readdir(dir))) {
			const char *dash = strrchr(e->d_name, '-');
			if (!dash || dash == e->d_name || e->d_name[0] == '.' || !dash[1])
				continue;
			bool digits = true;
			for (const char *c = dash + 1; *c; c++)
				digits &= *c >= '0' && *c <= '9';
			if (!digits || strlen(dash + 1) > 9)
				continue;
			char topic[SLUICE_TOPIC_NAME_MAX + 1];
			size_t tl = (size_t)(dash - e->d_name);
			if (tl > SLUICE_TOPIC_NAME_MAX || !sluice_topic_name_valid(e->d_name, tl))
				continue;
			memcpy(topic, e->d_name, tl);
			topic[tl] = '\0';
			int32_t part = atoi(dash + 1);
			if (sluice_store_core_for(b, topic, part) != sc->id)
				continue;
			const struct sluice_topic *t = sluice_meta_find(snap, topic, tl);
			if (!t || part >= t->partitions) {
				SLOG_WARN("storage", "%s/%s: not a partition of the topic metadata; left as it is",
					  b->cfg.log_dir[d], e->d_name);
				skipped++;
				continue;
			}
			int16_t err = 0;
			if (part_get(sc, t->name, part, &err))
				opened++;
		}
		closedir(dir);
	}
	b->meta.ops->release(b->meta.self, snap);
	if (opened || skipped)
		SLOG_INFO("storage", "storage core %d: %d partition(s) opened at start, %d unknown left alone", sc->id,
			  opened, skipped);
	struct sstate *st = sc->state;
	if (st->epochs_rebuilt)
		SLOG_INFO("storage", "storage core %d: %u partition(s) had no usable " SLUICE_CKPT_EPOCHS_FILE
			  ": their leader-epoch caches were rebuilt from their newest segments", sc->id, st->epochs_rebuilt);
}

/* Threads a shutdown closes logs' files with: each close waits on the
 * filesystem journal (about 1 ms), so 100,000 written partitions took
 * minutes one by one. Kafka closes logs on a thread pool too. */
#define SHUTDOWN_CLOSE_THREADS 8

struct close_share {
	struct sstate *st;
	uint32_t from;
};

static void *close_files_main(void *arg)
{
	struct close_share *c = arg;
	for (uint32_t i = c->from; i < c->st->table_cap; i += SHUTDOWN_CLOSE_THREADS) {
		struct spart *p = c->st->table[i];
		if (p && p->log)
			(void)sluice_plog_close_io(p->log);
	}
	return NULL;
}

/* At shutdown: with every log's I/O in flight completed (on this core),
 * the file work of closing them runs on SHUTDOWN_CLOSE_THREADS threads,
 * each on its own share of the table; whatever a thread could not do (or a
 * thread not started) is left to the close that follows on this core. */
static void close_files_parallel(struct storecore *sc)
{
	struct sstate *st = sc->state;
	for (uint32_t i = 0; i < st->table_cap; i++) {
		struct spart *p = st->table[i];
		if (p && p->log && sluice_plog_write_inflight(p->log))
			wait_write(p->log, p);
	}
	pthread_t t[SHUTDOWN_CLOSE_THREADS];
	struct close_share share[SHUTDOWN_CLOSE_THREADS];
	int started = 0;
	for (int k = 0; k < SHUTDOWN_CLOSE_THREADS; k++) {
		share[k] = (struct close_share){st, (uint32_t)k};
		if (pthread_create(&t[started], NULL, close_files_main, &share[k]) == 0)
			started++;
	}
	for (int k = 0; k < started; k++)
		pthread_join(t[k], NULL);
}

/* ---- the loop, on the core runtime (runtime.h) ---------------------------- */

static void store_begin(void *core)
{
	hw_ckpt_load(core);
	startup_open_all(core);
}

static bool store_drain(void *core)
{
	return drain_rings(core);
}

/* After the ops: compactions finished, group deadlines, housekeeping on
 * its own clocks, then one write per dirty partition (the runtime flushes
 * the replies after). */
static void store_work(void *core, int64_t now_ms)
{
	struct storecore *sc = core;
	cleaner_collect(sc);
	if (sluice_config_cluster_mode(&sc->b->cfg)) {
		leadership_sweep(sc);
		isr_sweep(sc, now_ms);
	}
	for (size_t i = 0; i < STORE_SERVICES_N; i++)
		store_services[i]->tick(sc, now_ms);
	expire_waiting(sc, now_ms);
	housekeeping(sc, now_ms);
	submit_writes(sc);
}

/* Work the runtime cannot see: ops in the rings, the cleaner's results. */
static bool store_pending(void *core)
{
	struct storecore *sc = core;
	struct sstate *st = sc->state;
	if (__atomic_load_n(&st->cleaner.done_ready, __ATOMIC_ACQUIRE))
		return true;
	for (int n = 0; n < sc->b->net_n; n++)
		if (sc->in[n].head != __atomic_load_n(&sc->in[n].tail, __ATOMIC_ACQUIRE) ||
		    __atomic_load_n(&sc->in[n].head, __ATOMIC_ACQUIRE) != sc->in[n].tail)
			return true;
	return false;
}

/* A consumer group's join phase ending or a waiting op's timeout, else at
 * least 1 ms away; 1 ms while ops are parked (descriptors or lookup work to
 * come free). The runtime caps it at sleep_max_ms (STORE_SLEEP_MS_MAX). */
static int64_t store_deadline(void *core, int64_t now_ms)
{
	struct storecore *sc = core;
	struct sstate *st = sc->state;
	int64_t d = sluice_deadlines_next(&st->deadlines); /* and the services' timers (a group's join phase) */
	for (size_t i = 0; i < STORE_SERVICES_N; i++) {
		int64_t sd = store_services[i]->next_deadline(sc);
		d = sd < d ? sd : d;
	}
	return d < now_ms + 1 || st->parked_n ? now_ms + 1 : d;
}

/* Wait on the io_uring, the eventfd read armed so a wake ends the wait,
 * then reap what completed (those already there when reaping starts). */
static void store_poll(void *core, int64_t wait_ms)
{
	struct storecore *sc = core;
	struct sstate *st = sc->state;
	assert(wait_ms >= 0 && wait_ms <= SLUICE_RT_SLEEP_MS_MAX);
	if (!st->efd_armed) {
		struct io_uring_sqe *sqe = io_uring_get_sqe(&sc->ring);
		if (!sqe) {
			io_uring_submit(&sc->ring);
			sqe = io_uring_get_sqe(&sc->ring);
		}
		assert(sqe); /* the ring was just emptied */
		io_uring_prep_read(sqe, sc->rt.efd, &st->efd_buf, sizeof st->efd_buf, 0);
		io_uring_sqe_set_data64(sqe, 8);
		st->efd_armed = true;
	}
	struct io_uring_cqe *cqe;
	if (wait_ms == 0) {
		io_uring_submit(&sc->ring);
	} else {
		struct __kernel_timespec ts = {wait_ms / 1000, (long long)(wait_ms % 1000) * 1000 * 1000};
		io_uring_submit_and_wait_timeout(&sc->ring, &cqe, 1, &ts, NULL);
	}
	unsigned head, n = 0;
	io_uring_for_each_cqe(&sc->ring, head, cqe) {
		n++;
		(void)head;
	}
	for (unsigned i = 0; i < n; i++) {
		if (io_uring_peek_cqe(&sc->ring, &cqe) != 0)
			break;
		dispatch_cqe(sc, cqe);
	}
}

/* Shutdown, after the last turn: stop the cleaner, wait for writes in
 * flight, then close every log cleanly and sync each data directory's
 * filesystem once. Parked ops are dropped: the network cores have stopped. */
static void store_end(void *core)
{
	struct storecore *sc = core;
	struct sstate *st = sc->state;
	cleaner_stop(sc);
	read_slots_reclaim(sc);
	int64_t t0 = sluice_rt_now_ms();
	uint32_t closed = 0;
	epochs_flush(sc); /* before the logs close (the syncfs below covers them) */
	close_files_parallel(sc);
	hw_ckpt_write(sc); /* the high watermarks as the clean stop leaves them */
	for (uint32_t i = 0; i < st->table_cap; i++) {
		struct spart *p = st->table[i];
		if (!p || !p->log)
			continue;
		sluice_plog_close_nosync(p->log);
		p->log = NULL;
		closed++;
	}
	for (uint32_t i = 0; i < st->hw_ck_n; i++)
		free(st->hw_ck[i].topic);
	free(st->hw_ck);
	st->hw_ck = NULL;
	st->hw_ck_n = st->hw_ck_cap = 0;
	for (uint32_t i = 0; i < st->offline_n; i++)
		free(st->offline[i].topic);
	free(st->offline);
	st->offline = NULL;
	st->offline_n = st->offline_cap = 0;
	int64_t t1 = sluice_rt_now_ms();
	for (int d = 0; d < sc->b->cfg.log_dir_count; d++) {
		int dfd = dir_offline(sc->b, d) ? -1 : open(sc->b->cfg.log_dir[d], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd >= 0 && syncfs(dfd) < 0)
			sluice_dir_failed(sc->b, d, "syncfs at shutdown failed"); /* no clean-shutdown marker then */
		if (dfd >= 0)
			close(dfd);
	}
	SLOG_INFO("storage", "storage core %d: %u partition(s) closed in %" PRId64 " ms, synced in %" PRId64 " ms",
		  sc->id, closed, t1 - t0, sluice_rt_now_ms() - t1);
	for (size_t i = 0; i < STORE_SERVICES_N; i++)
		store_services[i]->fini(sc);
	sluice_pool_destroy(st->pool);
	st->pool = NULL;
	sluice_broker_config_unref(st->bcfg);
	st->bcfg = NULL;
}

static const struct sluice_rt_hooks store_hooks = {
	.begin = store_begin,
	.end = store_end,
	.drain = store_drain,
	.work = store_work,
	.pending = store_pending,
	.deadline = store_deadline,
	.poll = store_poll,
	.sleep_max_ms = STORE_SLEEP_MS_MAX,
};

int sluice_storage_core_start(struct storecore *sc)
{
	struct sstate *st = calloc(1, sizeof *st);
	if (!st)
		return -1;
	const struct sluice_config *cfg = &sc->b->cfg;
	st->plog_cfg.segment_bytes = cfg->log_segment_bytes;
	st->plog_cfg.index_interval_bytes = cfg->log_index_interval_bytes;
	st->plog_cfg.flush_interval_messages = cfg->log_flush_interval_messages;
	st->plog_cfg.chunk_bytes = SLUICE_PLOG_CHUNK_BYTES_DEFAULT;
	st->plog_cfg.direct_io = true;
	st->plog_cfg.segment_ms = cfg->log_roll_ms;
	st->plog_cfg.preallocate = cfg->log_preallocate;
	sc->state = st;
	sluice_deadlines_init(&st->deadlines);
	table_grow(st);
	st->next_retention_ms = sluice_now_ms() + cfg->log_retention_check_interval_ms;
	st->next_hw_ckpt_ms = sluice_now_ms() + cfg->replica_hw_checkpoint_interval_ms;
	/* Storage cores start one after another on main's thread: core 0 sets
	 * up what they share before the others exist. Each core's last share
	 * stays until the process exits (a core stopping later merges it). */
	if (sc->id == 0 && pthread_mutex_init(&sc->b->hw_ckpt_mu, NULL) != 0)
		return -1;
	if (sc->id == 0) {
		int64_t window_ms = (int64_t)cfg->replication_quota_window_size_seconds * 1000;
		sluice_rate_init(&sc->b->leader_quota, cfg->replication_quota_window_num, window_ms);
		sluice_rate_init(&sc->b->follower_quota, cfg->replication_quota_window_num, window_ms);
	}
	st->fds_max = cfg->open_files_max;
	if (st->fds_max <= 0) {
		/* Half of what the process may open, shared by the storage cores;
		 * the rest is for connections. */
		struct rlimit rl;
		rlim_t soft = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
		if (soft == RLIM_INFINITY || soft > (1u << 20))
			soft = 1u << 20;
		st->fds_max = (int32_t)(soft / 2 / (rlim_t)sc->b->store_n);
		if (st->fds_max < 32)
			st->fds_max = 32;
	}
	if (sluice_rt_init(&sc->rt, sc->b, SLUICE_RT_STORE, sc->id) < 0 ||
	    io_uring_queue_init(SLUICE_URING_ENTRIES, &sc->ring, 0) < 0)
		return -1;
	/* The extent pool: the tail write buffers and read cache of this core's
	 * partitions, registered with its ring. */
	st->pool = sluice_pool_new(SLUICE_PLOG_CHUNK_BYTES_DEFAULT, (size_t)(cfg->cache_bytes_max / sc->b->store_n),
				   &sc->ring);
	if (!st->pool)
		return -1;
	st->plog_cfg.pool = st->pool;
	st->slots = calloc(STORE_READ_PINS_MAX, sizeof *st->slots);
	if (!st->slots)
		return -1;
	for (uint32_t i = STORE_READ_PINS_MAX; i-- > 0;) {
		st->slots[i].free_next = st->slot_free;
		st->slot_free = &st->slots[i];
	}
	st->pinned_extents_max = (cfg->cache_bytes_max / sc->b->store_n) / 2 / SLUICE_PLOG_CHUNK_BYTES_DEFAULT;
	if (pthread_mutex_init(&st->cleaner.mu, NULL) == 0 && pthread_cond_init(&st->cleaner.cv, NULL) == 0 &&
	    pthread_create(&st->cleaner.thread, NULL, cleaner_main, sc) == 0)
		st->cleaner.started = true;
	else
		SLOG_WARN("storage", "no cleaner thread: compaction runs on storage core %d", sc->id);
	for (size_t i = 0; i < STORE_SERVICES_N; i++)
		if (store_services[i]->init(sc) < 0) {
			SLOG_ERR("storage", "storage core %d: service %s did not start", sc->id, store_services[i]->name);
			return -1;
		}
	return sluice_rt_start(&sc->rt, &store_hooks, sc);
}

/* After sluice_rt_stop (main.c): the last turn and store_end have run. */
void sluice_storage_core_join(struct storecore *sc)
{
	sluice_rt_join(&sc->rt);
	io_uring_queue_exit(&sc->ring);
	sluice_rt_fini(&sc->rt);
}
