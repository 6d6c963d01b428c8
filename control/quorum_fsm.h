/* The quorum's state machine apart from libuv (internal to the quorum and
 * its tests): the Raft FSM that turns committed commands into records
 * applied to the image (control/image.h) and appended to the metadata log
 * window (control/mlog.h), takes snapshots of the image and restores them.
 * control/quorum.c runs it under raft_uv; tests/unit/test_quorum.c runs the
 * very same functions under libraft's deterministic fixture (raft/fixture.h),
 * so what the fixture proves (elections, partitions, crashes, snapshot
 * installs) holds for the real path. The encodings of commands and
 * snapshots are described in quorum_fsm.c's header. Single-threaded: libraft
 * calls it on its loop. */
#ifndef SLUICE_QUORUM_FSM_H
#define SLUICE_QUORUM_FSM_H
#include <raft.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "control/quorum.h"

/* One command, encoded: a topic of 100,000 partitions with 16 replicas
 * each is about 30 MiB. Larger proposals are refused (POLICY_VIOLATION). */
#define SLUICE_QUORUM_COMMAND_BYTES_MAX (64u << 20)
/* One snapshot, encoded: the image at its limits (1,000,000 partitions and
 * as many configs) stays below this. */
#define SLUICE_QUORUM_SNAPSHOT_BYTES_MAX (1u << 30)
/* Records in one snapshot: every broker, topic, partition and config, plus
 * the producer id allocator and feature levels. */
#define SLUICE_QUORUM_SNAPSHOT_RECORDS_MAX \
	(SLUICE_IMAGE_BROKERS_MAX + SLUICE_TOPICS_MAX + SLUICE_IMAGE_PARTITIONS_MAX + SLUICE_IMAGE_CONFIGS_MAX + 64)
/* Recent Raft index -> metadata offset pairs kept for DescribeQuorum. */
#define SLUICE_QUORUM_FSM_MAP_MAX 1024

/* What applying one committed command gave: handed to the proposer's
 * raft_apply callback as its result. */
struct sluice_quorum_outcome {
	int16_t error;       /* KERR_NONE, or KERR_UNKNOWN_SERVER_ERROR for a refused command */
	int64_t last_offset; /* the image offset after the command */
	size_t applied_n;    /* records of the command that were applied */
};

struct sluice_quorum_fsm {
	struct raft_fsm raft_fsm; /* give &raft_fsm to raft_init; its data is this struct */
	/* The Raft instance the FSM serves (set after raft_init): the index of
	 * the entry being applied is its last_applied + 1. NULL: indexes are
	 * unknown (no index -> offset map, snapshots record index 0). */
	struct raft *raft;
	struct sluice_image *img;   /* the caller's; never freed here */
	struct sluice_mlog *mlog;   /* the caller's; may be NULL */
	const struct sluice_quorum_callbacks *cbs; /* may be NULL; each callback may be NULL */
	void *cb_arg;
	struct sluice_quorum_outcome outcome; /* the last command's */
	struct sluice_mrec *rec;    /* decode scratch (a record is kilobytes: not on the stack) */
	struct {
		raft_index index;
		int64_t offset;
	} map[SLUICE_QUORUM_FSM_MAP_MAX]; /* ring, oldest at map_first */
	size_t map_first, map_n;
	/* Counters, for logs and tests. */
	uint64_t commands_applied, commands_refused, snapshots_taken, snapshots_restored;
	raft_index last_restored_index; /* the Raft index the last restored snapshot ended at */
};

/* Set up f over img (and mlog, cbs when not NULL). Returns 0, or -1 when
 * out of memory. */
int sluice_quorum_fsm_init(struct sluice_quorum_fsm *f, struct sluice_image *img, struct sluice_mlog *mlog,
			   const struct sluice_quorum_callbacks *cbs, void *cb_arg);
void sluice_quorum_fsm_close(struct sluice_quorum_fsm *f);

/* Encode recs[0..n) as one command into out->base (raft_malloc'd: hand it
 * to raft_apply, or raft_free it). Returns KERR_NONE, KERR_INVALID_REQUEST
 * (n is 0 or above SLUICE_QUORUM_COMMAND_RECORDS_MAX, or a record does not
 * encode), or KERR_POLICY_VIOLATION (above SLUICE_QUORUM_COMMAND_BYTES_MAX). */
int16_t sluice_quorum_command_encode(const struct sluice_mrec *recs, size_t n, struct raft_buffer *out);

/* Apply one encoded command at Raft index `index` (0: unknown), all or
 * none: every record must decode before any is applied. What raft's apply
 * does; exposed for tests. */
void sluice_quorum_fsm_apply_command(struct sluice_quorum_fsm *f, const void *p, size_t len, raft_index index,
				     struct sluice_quorum_outcome *out);

/* The metadata offset of the last record at or before Raft index `index`:
 * the image offset for any index at or past the last one applied (a lower
 * bound for entries not applied yet), -1 when the index is older than the
 * map remembers. */
int64_t sluice_quorum_fsm_offset_at(const struct sluice_quorum_fsm *f, raft_index index);

/* Apply cfg's election and heartbeat timeouts, snapshot threshold and
 * trailing (0: defaults, see quorum_fsm.c) and pre-vote to r: the same
 * tuning for raft_uv and for the fixture. */
void sluice_quorum_tune(struct raft *r, const struct sluice_quorum_config *cfg);

#endif
