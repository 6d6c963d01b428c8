/* The broker's runtime: network cores and storage cores, each a pinned
 * thread with its own io_uring, joined by bounded SPSC rings that carry
 * fixed-size messages (struct sluice_msg) pointing at partition operations.
 *
 * Ownership: a network core owns its connections and requests; a request's
 * partition operations (struct partop) are owned by the request and lent to
 * a storage core while a message about them is in a ring or the storage core
 * is working on them, then handed back in a reply message. Storage cores own
 * partition logs. Nothing else is shared but the metadata snapshot
 * (reference-counted, immutable) and the configuration (read-only). */
#ifndef SLUICE_CORE_H
#define SLUICE_CORE_H
#include "common/config.h"
#include "common/kafka/codec.h"
#include "common/rate.h"
#include "common/ring.h"
#include "control/meta.h"
#include "dataplane/deadline.h"
#include "dataplane/runtime.h"
#include "dataplane/transport.h"
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* SLUICE_CORES_MAX: dataplane/runtime.h */
#define SLUICE_RING_SLOTS 8192
#define SLUICE_URING_ENTRIES 1024
#define SLUICE_CONN_INFLIGHT_MAX 128  /* requests in flight per connection */
#define SLUICE_CONN_RECV_BYTES (64u << 10)
#define SLUICE_REQ_PARTITIONS_MAX 100000 /* partitions one request may name */
#define SLUICE_STORE_PARTITIONS_MAX (1u << 20)
/* Ops a network core's runtime backlog (runtime.h) may hold before the core
 * stops reading requests until the storage cores catch up. */
#define SLUICE_NET_BACKLOG_PAUSE (SLUICE_RT_BACKLOG_MAX / 2)
_Static_assert(SLUICE_NET_BACKLOG_PAUSE + SLUICE_REQ_PARTITIONS_MAX <= SLUICE_RT_BACKLOG_MAX,
	       "a request read below the pause fits on the backlog whole");

/* Message types on the rings. */
enum {
	MSG_PARTOP = 1,      /* net -> storage: do this partop; storage -> net: done */
	MSG_WAKE_FETCHES,    /* storage -> net: data arrived where a fetch waits */
	MSG_READ_RELEASE,    /* net -> storage: a READ's pinned extents are no longer read (ptr: its pins) */
};

/* PARTOP_EPOCH_END (OffsetForLeaderEpoch): offset holds the LeaderEpoch
 * asked about; the answer is base_offset (EndOffset) and last_offset (the
 * LeaderEpoch found), both -1 when unknown. */
/* PARTOP_LOG_DIR (DescribeLogDirs): where this broker keeps the partition
 * and how much of it, read from the open log without any I/O and without
 * creating or opening one: log_dir, log_bytes and offset_lag below, or
 * UNKNOWN_TOPIC_OR_PARTITION when the storage core holds no open log of it
 * (never created here, offline, or moved away). PARTOP_DIR_SPACE: the size
 * of the volume under data directory log_dir (statvfs), sent to a storage
 * core by core_plus1 (its answer may wait on the filesystem, which no
 * network core should). */
enum partop_kind { PARTOP_APPEND = 1, PARTOP_READ, PARTOP_LIST_OFFSETS, PARTOP_DELETE, PARTOP_DELETE_RECORDS,
		   PARTOP_GROUP, PARTOP_EPOCH_END, PARTOP_LOG_DIR, PARTOP_DIR_SPACE };

struct req;

/* A READ answered without copying: its records as ranges of the storage
 * core's cache extents, each pinned (never evicted, never reused) until
 * the pins come back. Ownership: the storage core takes the pins from its
 * fixed pool and lends them with the op (op->pins); the network core
 * either splices the ranges into the Fetch response (dataplane/req.h) or
 * copies them, and then calls pin.release exactly once (the response sent,
 * dropped, or copied), on its own thread: release only queues a
 * MSG_READ_RELEASE to the owning storage core, which alone touches the
 * extents' reference counts. The ranges' bytes never change while pinned. */
#define SLUICE_READ_PINS_RANGES_MAX 64 /* storage/plog.h's SLUICE_READ_RANGES_MAX (asserted in storage_core.c) */
struct sluice_read_pins {
	struct sluice_pin pin;  /* release: sluice_net_release_pins (or a test double's) */
	uint32_t n;             /* ranges */
	int32_t bytes;          /* their total */
	struct sluice_send_range range[SLUICE_READ_PINS_RANGES_MAX]; /* each range's pin is &pin */
	struct netcore *nc;     /* the network core the op went back to: releases from there */
	int32_t store_core;     /* the storage core that owns the extents */
	struct sluice_read_pins *next; /* the network core's release backlog (ring full) */
};
_Static_assert(SLUICE_READ_PINS_RANGES_MAX <= SLUICE_SEND_RANGES_MAX,
	       "one read's ranges fit one send beside nothing else");
/* The pins' release callback for a real broker (net_rings.c): queue the
 * MSG_READ_RELEASE on the network core's ring to the owning storage core. */
void sluice_net_release_pins(struct sluice_pin *pin);

/* One partition's share of a request. Inputs are set by the network core,
 * outputs by the storage core. */
struct partop {
	uint8_t kind;
	uint8_t net_core;
	bool watch;              /* READ: ask to be woken when data arrives */
	int16_t error;
	struct req *req;
	const char *topic;       /* NUL-terminated, lives in the request's metadata snapshot */
	const struct sluice_topic *tinfo; /* likewise: the topic's overrides */
	const struct sluice_config *cfg;  /* likewise: the broker configuration in effect (dynamic configs) */
	int32_t partition;
	/* APPEND */
	const uint8_t *data;
	uint32_t len;
	int16_t acks;
	/* APPEND with acks=all, DELETE_RECORDS: the request's TimeoutMs, how
	 * long the op may wait for the other replicas once done here (Kafka's
	 * DelayedProduce and DelayedDeleteRecords); then REQUEST_TIMED_OUT. */
	int32_t timeout_ms;
	/* READ / LIST_OFFSETS / DELETE_RECORDS */
	int64_t offset;          /* fetch offset, timestamp for LIST_OFFSETS, DeleteRecords' Offset (-1: the
				  * high watermark; the storage core puts the offset it deleted to here) */
	int32_t max_bytes;
	bool min_one;
	/* READ: bytes the whole request may still read, shared by its ops on
	 * every storage core (atomic; NULL: only max_bytes limits). */
	int64_t *read_budget;
	/* READ from a follower (a Fetch with ReplicaId >= 0): its broker id and
	 * LastFetchedEpoch (-1: none); it reads to the written end, not the
	 * high watermark, and its FetchOffset is its position. */
	bool from_replica;
	int32_t replica_id;
	int32_t last_fetched_epoch;
	int64_t replica_log_start; /* the follower's LogStartOffset (v5+; -1: not sent) */
	/* READ for a consumer (KIP-392, Fetch v11+): a follower replica may
	 * serve it, below its own high watermark; and, where this replica
	 * leads, the replicas that replica.selector.class would rather have
	 * it read from (bit i: the op's snapshot partition state's
	 * replicas[i], in the consumer's rack; set by the network core). */
	bool follower_read;
	uint16_t rack_replicas;
	/* outputs */
	int64_t base_offset;     /* APPEND base offset, LIST_OFFSETS offset */
	int64_t last_offset;
	int64_t timestamp;       /* LIST_OFFSETS */
	int64_t high_watermark;
	int64_t log_start;       /* DELETE_RECORDS: the answer's LowWatermark */
	/* READ from a follower whose log diverges from the leader's
	 * (LastFetchedEpoch and FetchOffset against the epoch cache): the
	 * leader's largest epoch <= LastFetchedEpoch and its end offset, the
	 * Fetch response's DivergingEpoch (epoch -1: none). */
	int32_t diverging_epoch;
	int64_t diverging_end;
	/* READ: the replica a consumer should fetch from instead (KIP-392's
	 * PreferredReadReplica: no records then), or -1. */
	int32_t preferred_read_replica;
	uint32_t metrics_topic; /* Fetch: its topic's slot in the metrics' per-topic counters (set by op_read) */
	/* READ from a follower: the high watermark it is answered with is
	 * news to it (KIP-1166's idea): answered at once, not held. */
	bool hw_news;
	uint8_t *rdata;          /* READ result, malloc'ed by storage, freed by net */
	int32_t rlen;            /* READ: bytes in rdata, or in pins */
	struct sluice_read_pins *pins; /* READ answered by reference (rdata NULL), or NULL */
	uint32_t splice_at;      /* READ: where its pinned records go in the response (0: copied) */
	uint8_t load_retries;    /* READ: times it waited for a cold extent to load */
	/* LOG_DIR: the data directory (index into log.dirs) holding the log,
	 * the bytes of its segments and its offset lag (outputs); DIR_SPACE:
	 * the directory asked about (input) and its volume's total and usable
	 * bytes (outputs). */
	int16_t log_dir;
	int64_t log_bytes;
	int64_t offset_lag;
	int64_t dir_total_bytes, dir_usable_bytes;
	struct partop *next;     /* storage-side wait list link */
	struct partop *prev;     /* ... and its back link in a partition's wait lists (partition.c) */
	struct sluice_deadline deadline; /* storage side: armed while it waits with a timeout (deadline.h) */
	/* PARTOP_GROUP: the group coordinator decodes data[0..len) (the request
	 * body, or one group's part of it) and encodes its answer into gout. */
	int16_t api_key, api_version;
	bool flex;
	int16_t core_plus1;      /* > 0: send to storage core core_plus1 - 1 (ListGroups) */
	struct kstr gname;       /* group id for multi-group requests */
	const struct sluice_meta_snapshot *gsnap; /* OffsetCommit: the request's snapshot (which topics exist) */
	struct kstr client_id;
	const char *client_host;
	struct kwr gout;
	int32_t gcount;
	void *gpending;          /* group.c: what to apply once the op's records are written */
	/* network-core-only fields: how the request named it */
	const char *name_ptr;
	int32_t name_len;
	int32_t tindex;          /* index of the topic in the request */
	bool local;              /* answered without a storage core */
	int32_t leader_epoch;    /* CurrentLeaderEpoch the request named (-1: none) */
	const char *error_message; /* static text for the response, or NULL */
	uint8_t topic_id[16];
};

_Static_assert(SLUICE_CORES_MAX - 1 <= UINT8_MAX, "struct partop's net_core holds a network core id");
_Static_assert(SLUICE_REPLICAS_MAX <= 16, "struct partop's rack_replicas holds a bit per replica");
_Static_assert(SLUICE_CORES_MAX < INT16_MAX, "struct partop's core_plus1 holds a storage core id plus one");
_Static_assert(SLUICE_LOG_DIRS_MAX <= INT16_MAX, "struct partop's log_dir holds a data directory index");

struct broker;
struct sluice_store_metrics;
struct sluice_metrics;

struct storecore {
	struct sluice_rt rt; /* the core's loop, wake and timers (dataplane/runtime.h); first: its own cache lines */
	int id;
	struct broker *b;
	struct io_uring ring;
	struct sluice_ring *in;  /* [net core] net -> this storage core */
	struct sluice_ring *out; /* [net core] this storage core -> net */
	void *state;             /* storage_core.c private */
	void *groups;            /* group.c private */
	void *fetcher;           /* fetcher.c private: the follower fetcher */
	struct sluice_store_metrics *metrics; /* this core's counters (metrics.h), or NULL */
};

struct sluice_transport_ops;

/* A network core (dataplane/netcore.c): the connections a thread serves,
 * over a transport backend (dataplane/transport.h) whose state is private. */
struct netcore {
	struct sluice_rt rt; /* the core's loop, wake and timers (dataplane/runtime.h); first: its own cache lines */
	int id;              /* rt.id too */
	struct broker *b;
	const struct sluice_transport_ops *tops; /* the backend, chosen by sluice.transport */
	void *tstate; /* the backend's private state */
	void *state;  /* the network core's (its first member: struct proto_state) */
};

struct broker {
	struct sluice_config cfg;
	struct sluice_meta meta;
	int net_n, store_n;
	struct netcore net[SLUICE_CORES_MAX];
	struct storecore store[SLUICE_CORES_MAX];
	volatile int stopping; /* 1: network cores stop; 2: then storage cores (each also told by sluice_rt_stop) */
	/* Data directories: partitions per directory (for least-loaded
	 * placement) and a bit per directory that has failed. Atomics. */
	int32_t dir_partitions[SLUICE_LOG_DIRS_MAX];
	uint32_t offline_dirs;
	bool clean_start;
	int ncpu;
	/* replication-offset-checkpoint (storage_core.c): each storage core's
	 * latest share of every data directory's file, merged into the file by
	 * whichever core writes it, under hw_ckpt_mu (set up by storage core 0). */
	pthread_mutex_t hw_ckpt_mu;
	struct sluice_hw_share *hw_share[SLUICE_CORES_MAX];
	/* The last failed creation of __consumer_offsets (api_group.c): the
	 * metadata offset it was tried at and when (monotonic ms, 0: none).
	 * Atomics, written by any network core: advice against retrying at
	 * every request, nothing more. */
	int64_t offsets_create_failed_offset;
	int64_t offsets_create_failed_ms;
	/* Replication throttles (Kafka's ReplicationQuotaManager, leader and
	 * follower): the bytes of throttled partitions this broker served to
	 * followers, and fetched as a follower, over every storage core (set up
	 * by storage core 0, as hw_ckpt_mu). */
	struct sluice_rate leader_quota, follower_quota;
	/* /metrics and /ready (metrics.h), or NULL (the tests' brokers). */
	struct sluice_metrics *metrics;
};

_Static_assert(offsetof(struct storecore, rt) == 0 && offsetof(struct netcore, rt) == 0,
	       "a core's runtime comes first, on its own cache lines");

/* The wake protocol (sluice_rt_wake) and pinning: dataplane/runtime.h. */

/* Which data directory holds (or will hold) a partition: -1 if none yet
 * (with create false) or no directory is usable. */
int sluice_partition_dir(struct broker *b, const char *topic, int32_t partition, bool create, char *out, size_t len);
void sluice_dir_failed(struct broker *b, int dir, const char *why);
/* Partition placement: which storage core owns a topic partition
 * (sluice_rt_core_for under its older name). */
int sluice_store_core_for(const struct broker *b, const char *topic, int32_t partition);
/* Send a partop to its storage core through the runtime's send (a ring
 * that is full keeps it, in order, on the core's backlog); where ops go, so
 * the tests' storage double replaces it (with the two below: net_rings.c).
 * An op the backlog refuses (full: reading stops well before) comes back
 * through drain_replies with an error. */
void sluice_net_submit(struct netcore *nc, struct partop *op);

int sluice_storage_core_start(struct storecore *sc);
void sluice_storage_core_join(struct storecore *sc);

/* Network cores (netcore.c): init picks the backend named by
 * sluice.transport (an unknown name fails, naming the key) and sets it up
 * with the core's runtime; start runs the core's thread on the runtime
 * (sluice_rt_run with the network core's hooks; stopped with sluice_rt_stop
 * and sluice_rt_join on nc->rt); fini after every network core has been
 * joined. */
/* Before any init: the backend's shared set-up, and how many network cores
 * it runs (num.network.threads unless the backend decides: dpdk's lcores),
 * or -1 after saying why not. */
int sluice_netcore_prepare(struct broker *b);
int sluice_netcore_init(struct netcore *nc);
int sluice_netcore_init_with(struct netcore *nc, const struct sluice_transport_ops *tops);
int sluice_netcore_start(struct netcore *nc);
void sluice_netcore_fini(struct netcore *nc);
/* One turn of a network core's loop (sluice_rt_turn with its hooks: storage
 * replies, posts, timers such as the sweep, parked fetches, throttled
 * connections, the backlog flushed) and the backend's poll for at most
 * wait_max_ms; and its parts, each callable alone: storage replies taken
 * (net_rings.c), whether any wait, connections throttled by a broker-wide
 * budget resumed, the idle and slow-frame sweep. */
void sluice_netcore_turn(struct netcore *nc, int64_t wait_max_ms);
bool sluice_netcore_drain_replies(struct netcore *nc);
bool sluice_netcore_replies_waiting(struct netcore *nc);
void sluice_netcore_resume_throttled(struct netcore *nc);
void sluice_netcore_sweep(struct netcore *nc, int64_t now_ms);
/* Close every connection and turn until they are freed (or a limit). */
void sluice_netcore_close_all(struct netcore *nc);
/* Connections open on this core. */
int32_t sluice_netcore_conns(const struct netcore *nc);

#endif
