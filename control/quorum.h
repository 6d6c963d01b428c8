/* The controllers' Raft quorum (Debian's libraft 0.15: raft_uv storage
 * under metadata.log.dir, raft_uv_tcp transport), on the controller's one
 * libuv loop. Each Raft entry is a command: a list of metadata records
 * (control/mrec.h) that the state machine applies to the image
 * (control/image.h) in order, each record taking the next metadata offset,
 * all or none. Snapshots are the image's own records (sluice_image_encode)
 * with its offset, taken every `snapshot_threshold` entries; the log is
 * compacted behind them, keeping `snapshot_trailing` entries so that a
 * lagging voter catches up from the log when it can. The last records
 * applied stay in a bounded window (control/mlog.h) from which brokers
 * fetch the metadata log.
 *
 * Every process that uses this must ignore SIGPIPE (a dead peer's socket
 * otherwise kills the survivors); sluice_quorum_start checks and refuses
 * to start when it is not ignored. */
#ifndef SLUICE_QUORUM_H
#define SLUICE_QUORUM_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>
#include "control/image.h"
#include "control/mlog.h"
#include "control/mrec.h"

#define SLUICE_QUORUM_VOTERS_MAX 5 /* 1, 3 or 5 controllers */
#define SLUICE_QUORUM_HOST_MAX 255
/* Records in one command: creating a topic of 100,000 partitions fits. */
#define SLUICE_QUORUM_COMMAND_RECORDS_MAX (SLUICE_PARTITIONS_PER_TOPIC_MAX + 16)

struct sluice_quorum_voter {
	int32_t id; /* node.id */
	char host[SLUICE_QUORUM_HOST_MAX + 1];
	uint16_t port; /* the Raft port of controller.quorum.voters */
};

struct sluice_quorum_config {
	int32_t node_id;
	int32_t voter_n;
	struct sluice_quorum_voter voters[SLUICE_QUORUM_VOTERS_MAX];
	const char *dir;                  /* metadata.log.dir: raft_uv's files */
	unsigned election_timeout_ms;     /* controller.quorum.election.timeout.ms */
	unsigned heartbeat_timeout_ms;    /* Raft's heartbeat; election_timeout_ms / 10 by default */
	unsigned snapshot_threshold;      /* entries between snapshots */
	unsigned snapshot_trailing;       /* entries kept behind a snapshot */
};

/* What the owner (the controller's server) hears from the quorum, always on
 * the loop's thread. */
struct sluice_quorum_callbacks {
	/* Records [first_offset, first_offset + n) were applied to the image
	 * (every voter calls this; the active controller's pending proposals
	 * complete through their own done callbacks too). */
	void (*applied)(void *arg, int64_t first_offset, size_t n);
	/* This node became the leader (is_leader) or stopped being it;
	 * leader_id -1 while no leader is known. */
	void (*leader_changed)(void *arg, bool is_leader, int32_t leader_id);
	/* The image was replaced by a snapshot (installed from the leader or
	 * loaded at start). */
	void (*restored)(void *arg, int64_t offset);
};

struct sluice_quorum;

/* Start this node's Raft on loop: the voters are bootstrapped on a fresh
 * dir, the log and snapshot are loaded on an existing one (the image then
 * holds their state). Returns 0, or -1 with err saying what failed. */
int sluice_quorum_start(struct sluice_quorum **out, uv_loop_t *loop, const struct sluice_quorum_config *cfg,
			struct sluice_image *img, struct sluice_mlog *mlog, const struct sluice_quorum_callbacks *cbs,
			void *arg, char *err, size_t errlen);
/* Close Raft (graceful: pending proposals complete with NOT_CONTROLLER),
 * then call done(arg) on the loop. */
void sluice_quorum_stop(struct sluice_quorum *q, void (*done)(void *arg), void *arg);

/* A proposal's outcome: error 0 (KERR_NONE) and the offset of its last
 * record once committed and applied; KERR_NOT_CONTROLLER when this node is
 * not (or stopped being) the leader; another Kafka error otherwise. */
typedef void (*sluice_quorum_done_fn)(void *arg, int16_t error, int64_t last_offset);
/* Propose recs[0..n) as one command (copied: the caller's array may go).
 * Only the leader accepts; done is called exactly once, on the loop,
 * never before this returns. Returns 0, or a Kafka error (nothing
 * proposed, done not called). The records must apply to the image as it
 * will be when they commit: the owner serialises its proposals (waits for
 * one's done before deciding the next) so that this holds. */
int16_t sluice_quorum_propose(struct sluice_quorum *q, const struct sluice_mrec *recs, size_t n,
			      sluice_quorum_done_fn done, void *arg);

bool sluice_quorum_is_leader(const struct sluice_quorum *q);
int32_t sluice_quorum_leader_id(const struct sluice_quorum *q); /* -1: unknown */

/* DescribeQuorum's answer, from this node's view. Offsets are metadata
 * record offsets where known (the leader: each voter's matched Raft index,
 * mapped), else -1. */
struct sluice_quorum_status {
	int32_t leader_id;
	int64_t leader_epoch; /* the Raft term */
	int64_t high_watermark; /* metadata offset committed */
	int32_t voter_n;
	struct {
		int32_t id;
		int64_t log_end_offset;
		int64_t last_fetch_ms; /* wall clock, -1 unknown */
		int64_t last_caught_up_ms;
	} voters[SLUICE_QUORUM_VOTERS_MAX];
};
void sluice_quorum_status(const struct sluice_quorum *q, struct sluice_quorum_status *out);

/* The Raft node's own progress, for the admin listener's metrics: its
 * libraft state (RAFT_UNAVAILABLE 0, FOLLOWER 1, CANDIDATE 2, LEADER 3),
 * term, and the commit, applied and last log indexes. */
struct sluice_quorum_progress {
	int state;
	uint64_t term, commit_index, applied_index, last_index;
};
void sluice_quorum_progress(const struct sluice_quorum *q, struct sluice_quorum_progress *out);

/* Parse controller.quorum.voters ("1@host:port,2@host:port,..."): 0, or -1
 * with err naming what is wrong (ids unique and positive, 1 to
 * SLUICE_QUORUM_VOTERS_MAX voters, ports 1..65535). */
int sluice_quorum_parse_voters(const char *s, struct sluice_quorum_config *cfg, char *err, size_t errlen);

#endif
