/* Test doubles for everything the protocol layer (dataplane/proto.c and api_*.c)
 * and the network core (dataplane/netcore.c) call outside themselves, so
 * that requests can be driven by unit tests and by the libFuzzer target
 * without sockets, rings, storage threads or a group coordinator:
 *   - the transport is the in-memory backend of transport_test.c under the
 *     real network core: a frame given to stub_frame is fed as bytes, cut,
 *     dispatched and answered by the same code as in the broker, and the
 *     responses are taken off what the core sent;
 *   - the storage rings (dataplane/net_rings.c) are replaced: partops handed
 *     to sluice_net_submit are queued and answered, when the core drains
 *     its replies, by a small in-memory fake storage (appends stored with
 *     offsets assigned, reads of whole batches, list offsets, deletes) that
 *     then calls sluice_proto_on_partop, as a storage core handing the op
 *     back would;
 *   - the metadata backend is the real local one, writer thread included:
 *     its completions come back through the core runtime's posts,
 *     which the replaced sluice_netcore_drain_replies runs;
 *   - sluice_group_partition (group.c is not linked: group ops get no
 *     answer, which the handlers treat as a coordinator failure).
 * A broker with the default configuration (sluice_config_defaults +
 * sluice_config_finish) and a local metadata store in a caller-chosen
 * directory completes the picture. Single-threaded; not for production. */
#ifndef SLUICE_TEST_PROTO_STUBS_H
#define SLUICE_TEST_PROTO_STUBS_H
#include "dataplane/req.h"
#include "transport_test.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STUB_PARTITIONS_MAX 64
#define STUB_PARTITION_BYTES_MAX (8u << 20)
#define STUB_PUMP_TURNS_MAX 10000 /* network core turns after one frame, at most */

/* Create the broker (config defaults, node.id 1, advertised 127.0.0.1:9092,
 * log.dirs = dir) and open local metadata in dir. extra_overrides is a
 * NULL-terminated list of key, value pairs (or NULL). Returns the broker,
 * or NULL with a message on stderr. */
struct broker *stub_broker_open(const char *dir, const char *const *extra_overrides);
void stub_broker_close(void);
struct netcore *stub_netcore(void);

/* A connection on network core 0. */
struct conn *stub_conn_new(void);
/* Expire parked fetches, drop every request still queued, free the conn. */
void stub_conn_free(struct conn *c);

/* Feed bytes, with their 4-byte size prefix, into the connection as one
 * frame and turn the network core until it is done. Returns false when the
 * frame was refused (the connection then closes; a closed one refuses). */
bool stub_frame(struct conn *c, const void *bytes, size_t len);
/* Take the next finished response (size prefix included) from the head of
 * the connection's queue, in request order. Requests that finished without
 * a response (acks=0) are dropped on the way. Returns false when the head is
 * missing or not finished. Caller frees *buf. */
bool stub_take_response(struct conn *c, uint8_t **buf, size_t *len);
/* Requests still queued on the connection (finished or not). */
int stub_queued(const struct conn *c);

/* Complete every partop handed to sluice_net_submit so far (and any they
 * lead to), in order, as storage cores answering would. The network core's
 * turn does this (stub_frame turns it). */
void stub_drain(void);
/* Retry parked fetches now (expire: as if their deadline had passed). */
void stub_retry_parked(bool expire);
int stub_parked(void);

/* Metadata: the real local backend with its writer thread. stub_frame
 * (and stub_conn_free) wait until every batch out is back and answered,
 * unless held: then the core leaves the writer's completions posted and
 * unrun (as a busy core would), and the test may look at a request whose
 * batch is out; it releases the hold and waits itself (stub_meta_wait). */
#define STUB_META_WAIT_MS 100    /* one sleep on the core's eventfd */
#define STUB_META_WAITS_MAX 600  /* a minute in all, then give up */
void stub_meta_hold(bool hold);
/* Whether the metadata writer's completion has been posted (held or not). */
bool stub_meta_posted(void);
void stub_meta_wait(void);
/* Requests whose metadata batch is out. */
int stub_meta_out(void);

/* A cluster as the snapshots describe it. stub_cluster_begin wraps the
 * local backend so that every snapshot acquired from then on is a copy of
 * the local one with these overrides applied: a partition's state (leader,
 * epoch, replicas, ISR; partition -1: every partition of the topic), the
 * broker list, the controller id; and, once stub_cluster_forward is called,
 * a forward op (control/meta.h) that records what it was given and answers
 * with the canned error or response bytes (from the caller's thread, as a
 * backend thread would: through the core's post). stub_broker_close ends it. */
#define STUB_CLUSTER_OVERRIDES_MAX 64
#define STUB_CLUSTER_BROKERS_MAX 8
#define STUB_FORWARD_BYTES_MAX 4096
struct sluice_partition_state;
struct sluice_meta_broker;
void stub_cluster_begin(void);
void stub_cluster_partition(const char *topic, int32_t partition, const struct sluice_partition_state *st);
void stub_cluster_brokers(const struct sluice_meta_broker *b, uint32_t n);
void stub_cluster_controller(int32_t id);
void stub_cluster_forward(int16_t error, const uint8_t *resp, size_t len);
/* The dynamic broker configuration snapshots carry from now on (NULL:
 * none); the stub takes the caller's reference. */
struct sluice_broker_config;
void stub_cluster_broker_config(struct sluice_broker_config *bc);
/* What the last forward carried (NULL before any). */
const uint8_t *stub_cluster_forwarded(size_t *len, int16_t *api_key, int16_t *api_version);
/* Snapshots handed out and not released yet. */
int stub_cluster_snapshots_out(void);

/* Fake storage. */
void stub_store_reset(void);
/* While held, partops wait unanswered (a slow storage core). */
void stub_store_hold(bool hold);
/* High watermark and log start of a partition (-1 when never touched). */
int64_t stub_store_hw(const char *topic, int32_t partition);
int64_t stub_store_log_start(const char *topic, int32_t partition);
/* Appends (and partops of any kind) seen since the last reset. */
int64_t stub_store_ops(void);
/* A partition's leader-epoch cache (epochs and start offsets increasing,
 * at most STUB_EPOCHS_MAX), which OffsetForLeaderEpoch's partops answer
 * from as a storage core's does; by default a partition holding data has
 * epoch 0 from offset 0, as a single node's. */
#define STUB_EPOCHS_MAX 8
void stub_store_epochs(const char *topic, int32_t partition, const int32_t *epochs, const int64_t *starts, int n);
/* DescribeLogDirs: a partition's log is in the one directory (log.dirs)
 * once touched, its size the bytes stored, its offset lag stub_lag; the
 * directory's volume has these sizes. */
#define STUB_DIR_TOTAL_BYTES ((int64_t)1 << 40)
#define STUB_DIR_USABLE_BYTES ((int64_t)3 << 37)
extern int64_t stub_lag;
/* READs answered by reference, as a storage core answers them: the
 * records in a pinned copy of their own (STUB_PINS_MAX at once; past that
 * a read is copied, as past the storage core's pool), cut into ranges of
 * at most piece_bytes (0: copied into rdata, the default). A released
 * pin's bytes are scribbled over, so a response that still reads them
 * after the release sends garbage. */
#define STUB_PINS_MAX 64
void stub_store_pin_reads(size_t piece_bytes);
struct stub_pin_stats {
	int64_t lent, released;
	int64_t double_released; /* released again after their release: a bug */
};
extern struct stub_pin_stats stub_pins;
/* Pins lent and not released yet. */
int64_t stub_pins_out(void);
/* What the last READ carried for KIP-392 (its follower_read flag and the
 * replicas in its consumer's rack). A READ naming such replicas is answered
 * as a leader's storage core answers when its selector picks one: no
 * records, PreferredReadReplica the first of them. */
struct stub_read_seen {
	bool follower_read;
	uint16_t rack_replicas;
	int64_t reads;
};
extern struct stub_read_seen stub_read;

/* Closes the network core asked of the transport. */
#define stub_close_calls (tt_stats.close_calls)

#endif
