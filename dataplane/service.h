/* Services of a storage core: work that runs on a storage core's thread
 * beside its partition logs, driven by the core through one small ops
 * table, and using the core only through the few storage calls declared
 * here. The group coordinator is the first such service and the follower
 * fetcher (fetcher.c) the second; the transaction coordinator is meant to
 * be the next. A service owns the partops of its kind (routed to it by
 * partop kind) from handle() until it answers them with
 * sluice_store_done(), or hands one to sluice_store_append() to be answered
 * once its records are written (the core then calls written() just before
 * it answers). Everything here runs on the storage core's thread: no locks. */
#ifndef SLUICE_SERVICE_H
#define SLUICE_SERVICE_H
#include "dataplane/core.h"
#include <stdbool.h>
#include <stdint.h>

struct spart;
struct sluice_plog;

struct sluice_store_service_ops {
	const char *name;
	uint8_t partop_kind; /* the ops routed to handle() */
	/* At core start, before any op; returns 0, or -1 (the core does not start). */
	int (*init)(struct storecore *sc);
	/* At core stop, after the last log write completed (held ops are
	 * dropped with the network cores). */
	void (*fini)(struct storecore *sc);
	void (*handle)(struct storecore *sc, struct partop *op);
	/* Once per loop turn; cheap when nothing is due. */
	void (*tick)(struct storecore *sc, int64_t now_ms);
	/* When tick must run next at the latest (monotonic ms), or INT64_MAX. */
	int64_t (*next_deadline)(struct storecore *sc);
	/* The records op waited for were written (ok) or not (op->error says
	 * why: KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER,
	 * NOT_ENOUGH_REPLICAS_AFTER_APPEND). */
	void (*written)(struct storecore *sc, struct partop *op, bool ok);
	/* Optional: the controller's word on p changed its role here (it leads
	 * from now on, or follows, at a new leader epoch), after the core acted
	 * on it (waiting appends answered, the fetcher told). */
	void (*leadership)(struct storecore *sc, struct spart *p, const char *topic, int32_t partition);
};

/* The services a storage core runs, in the order it ticks them. */
extern const struct sluice_store_service_ops sluice_group_service;
extern const struct sluice_store_service_ops sluice_fetcher_service; /* dataplane/fetcher.c */

/* ---- storage calls a service may make (storage_core.c) ---------------------- */

/* The partition's entry on this core (opened on first use), or NULL with
 * *error set to a Kafka error code. */
struct spart *sluice_store_partition(struct storecore *sc, const char *topic, int32_t partition, int16_t *error);
struct sluice_plog *sluice_store_log(struct spart *p);
/* The partition's entry on this core when it is open already, else NULL
 * (nothing is created or opened). */
struct spart *sluice_store_partition_open(struct storecore *sc, const char *topic, int32_t partition);
/* Append a batch built by the service at the current leader epoch, as a
 * producer's acks=all: wait_op, when given, is answered once the high
 * watermark passes the batch (every ISR member has it), written() first
 * (with op->error NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR fell below
 * min.insync.replicas meanwhile, NOT_LEADER_OR_FOLLOWER when this replica
 * stopped leading, KAFKA_STORAGE_ERROR when the log failed). Returns
 * KERR_NONE, or the Kafka error it was refused with (nothing appended,
 * wait_op not taken): KAFKA_STORAGE_ERROR, NOT_LEADER_OR_FOLLOWER, or
 * NOT_ENOUGH_REPLICAS (cluster mode, wait_op given: the ISR is below the
 * min.insync.replicas of wait_op's topic or broker configuration; a write
 * nobody waits for is appended whatever the ISR). */
int16_t sluice_store_append(struct storecore *sc, struct spart *p, const uint8_t *batch, size_t len,
			    struct partop *wait_op);
/* Whether this replica leads p as the controller last said (a single node
 * leads every partition it holds), and at which leader epoch: a service
 * whose state comes from a partition's log (the group coordinator) keys
 * that state by the epoch it read it at. */
bool sluice_store_leads(const struct storecore *sc, const struct spart *p, int32_t *leader_epoch);
/* The word of op's snapshot on p (op->tinfo, cluster mode), applied when
 * newer than the core's own (the leadership hook runs when it changes p's
 * role). */
void sluice_store_apply_word(struct storecore *sc, struct spart *p, const struct partop *op);
/* Hand op back to its network core: the answer is complete. */
void sluice_store_done(struct storecore *sc, struct partop *op);
/* The partition's state (dataplane/partition.h): offsets, high watermark,
 * leader epoch and its cache, replicas. */
struct sluice_partition *sluice_store_part(struct spart *p);

/* ---- what a follower does to its partition (issue 13: replication) -------------- */

/* Append the leader's batches as they are (sluice_plog_append_verbatim:
 * offsets, PartitionLeaderEpoch, bytes kept; the caller has checked each
 * batch's CRC): the epoch cache learns each batch's PartitionLeaderEpoch at
 * its base offset (its checkpoint written), the producer table each
 * idempotent batch, and the partition's write goes out with this turn's
 * group commits (its written end, and so what this replica reports, moves
 * when it completes). Returns 0, or -errno: -EINVAL when the offsets do not
 * follow the log end (nothing appended, the log fine), -EIO when the log or
 * its directory failed. */
int sluice_store_append_verbatim(struct storecore *sc, struct spart *p, const uint8_t *batches, size_t len,
				 int64_t *last_offset);
/* Truncate the partition's log at a divergence point (sluice_plog_truncate_to:
 * batches whose last offset is at or past offset go, a batch holding it
 * whole), then sluice_partition_on_truncate: high watermark at most the new
 * end, the epoch cache cut there (its checkpoint written and synced),
 * producers rebuilt; appends waiting past the end are answered
 * NOT_LEADER_OR_FOLLOWER. Blocks the core for the write in flight and the
 * syncs (milliseconds: a leader change, not the data path). Returns the new
 * log end (at most offset; the log end unchanged when offset is at or past
 * it), or -errno: -EINVAL offset below the log start, -EIO the log could
 * not be truncated (failed, or failed now: its directory goes offline). */
int64_t sluice_store_truncate_to(struct storecore *sc, struct spart *p, int64_t offset);
/* Kafka's truncateFullyAndStartAt (sluice_plog_truncate_fully): the log
 * restarted empty at offset (its leader's log start offset, past this
 * replica's end), the epoch cache emptied, the high watermark there.
 * Returns offset or -errno as above. */
int64_t sluice_store_truncate_fully(struct storecore *sc, struct spart *p, int64_t offset);
int64_t sluice_now_ms(void);

/* ---- storage calls of the follower fetcher (a partition this replica follows) --------- */

/* Where p's next fetch starts: its log end (FetchOffset), the epoch of its
 * last batch (LastFetchedEpoch, -1: none) and its log start; false when p
 * cannot fetch now (no log, failed, or it leads). */
bool sluice_store_follower_position(struct spart *p, int64_t *log_end, int32_t *last_epoch, int64_t *log_start);
/* Whether p holds records appended and not yet written (its write is in
 * flight): a follower reports a position only once its records are
 * written, so that what the leader counts as replicated survives this
 * process's crash, as a write to Kafka's page cache does. */
bool sluice_store_follower_unwritten(const struct spart *p);
/* Whether p's fetch waits for the follower replication throttle now (as
 * Kafka's shouldFollowerThrottle): its topic's
 * follower.replication.throttled.replicas names this replica, it is not
 * caught up to the leader's high watermark, and the bytes this broker
 * fetched for throttled partitions lately are above
 * follower.replication.throttled.rate. fetched: the bytes of an answer
 * for p, counted when p is throttled (in sync or not, as Kafka does). */
bool sluice_store_follower_throttled(struct storecore *sc, const struct spart *p, int64_t now_ms);
void sluice_store_follower_fetched(struct storecore *sc, const struct spart *p, size_t bytes, int64_t now_ms);
/* Whether p still follows leader at epoch (an answer to an older request
 * is dropped otherwise). */
bool sluice_store_follows(const struct spart *p, int32_t leader, int32_t epoch);
/* The leader's answer for p: its records appended as they are (same
 * offsets, bytes and CRCs; a partial last batch left for the next fetch),
 * each batch's epoch into the epoch cache and its producer into the
 * idempotence table, the leader's high watermark learned (p's own is the
 * least of it and p's written end), and p's log start moved up to the
 * leader's (leader_log_start), at most to p's high watermark. Returns
 * KERR_NONE, or the Kafka error that stopped it (CORRUPT_MESSAGE,
 * KAFKA_STORAGE_ERROR) after appending what came before. */
int16_t sluice_store_follower_append(struct storecore *sc, struct spart *p, const uint8_t *records, size_t len,
				     int64_t leader_hw, int64_t leader_log_start);
/* The leader's answer said p's log diverged (DivergingEpoch epoch,
 * end_offset): p is truncated to the point that rule gives
 * (sluice_partition_truncation_offset). Returns 0 (fetch on), or -1 (it
 * could not be cut: the fetcher backs off). */
int sluice_store_follower_diverged(struct storecore *sc, struct spart *p, int32_t epoch, int64_t end_offset);
/* The leader answered OFFSET_OUT_OF_RANGE to p's fetch at fetch_offset
 * under LastFetchedEpoch last_epoch, its log starting at leader_log_start
 * (-1: unknown). As sluice_partition_out_of_range says: below the leader's
 * log start p starts over there, empty (sluice_store_truncate_fully); past
 * the leader's end (or under an epoch the leader cannot place) p drops its
 * latest epoch's records and asks again with the epoch before, or, having
 * no epoch, starts over at the leader's log start. Returns 0 (p changed:
 * fetch again at once), or -1 (nothing to do, p moved since the request, or
 * a truncation failed: the fetcher backs off). */
int sluice_store_follower_out_of_range(struct storecore *sc, struct spart *p, int64_t fetch_offset, int32_t last_epoch,
				       int64_t leader_log_start);

#endif
