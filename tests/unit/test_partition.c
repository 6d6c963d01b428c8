/* Partition state tests: dataplane/partition.c on its own, and over a real
 * partition log for the offsets it reads from it. They prove that the high
 * watermark is the least position over the ISR and never passes the local
 * written end (on a single node it follows the written end exactly); that a
 * read clamped to the high watermark serves nothing past it while the log
 * has more written; the leader-epoch cache's append, end-offset lookup and
 * truncations (Kafka's LeaderEpochFileCache semantics), its bound and which
 * changes its checkpoint must write (synced or not); a follower's log
 * appended verbatim, truncated and truncated fully, with the high
 * watermark, epochs, producers and waiters following; a checkpointed high
 * watermark and epoch cache checked against the log at attach; the
 * idempotent-producer rules (duplicates, order, epoch fencing) and the
 * producer table's bound; the append wait list, an op whose timeout passed
 * taken out of it and deadlines dropped whenever an op leaves it; the low
 * watermark a DeleteRecords waits for and its wait list; a fetch-waiter bit for
 * every core id up to SLUICE_CORES_MAX - 1; and the replica a leader points
 * a consumer in another rack at (KIP-392), with the high watermark news a
 * follower's fetch is answered at once for. */
#include "batch_build.h"
#include "common/kafka/batch.h"
#include "common/kafka/errors.h"
#include "dataplane/partition.h"
#include "storage/plog.h"
#include <criterion/criterion.h>
#include <ftw.h>
#include <inttypes.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#define SELF 1

static struct sluice_partition P;

static void part_setup(void) { sluice_partition_init(&P, SELF); }

/* The controller's word: leader, epochs, replicas and ISR. */
static enum sluice_partition_change lead(int32_t leader, int32_t epoch, int32_t partition_epoch, const int32_t *reps,
					 uint8_t rn, const int32_t *isr, uint8_t in, int64_t now)
{
	struct sluice_partition_leadership l = {leader, epoch, partition_epoch, reps, rn, isr, in};
	return sluice_partition_set_leader(&P, &l, now);
}
static void part_teardown(void) { sluice_partition_fini(&P); }

TestSuite(partition, .init = part_setup, .fini = part_teardown);

/* ---- high watermark -------------------------------------------------------- */

/* Proves a single node's high watermark (ISR = {self}) is its written end,
 * moving with every report of it. */
Test(partition, hw_single_node_follows_written_end)
{
	cr_expect_eq(sluice_partition_high_watermark(&P), 0);
	cr_expect(sluice_partition_on_written(&P, 10));
	cr_expect_eq(sluice_partition_high_watermark(&P), 10);
	cr_expect_not(sluice_partition_on_written(&P, 10), "no move, no news");
	cr_expect(sluice_partition_on_written(&P, 25));
	cr_expect_eq(sluice_partition_high_watermark(&P), 25);
}

/* Proves the high watermark is the slowest ISR member's position, never
 * past the local written end, never moving back, and not held by a replica
 * outside the ISR; unknown replicas and refused lists change nothing. */
Test(partition, hw_is_min_over_isr)
{
	int32_t all[] = {SELF, 2, 3};
	cr_assert_eq(lead(SELF, 1, 1, all, 3, all, 3, 0), SLUICE_PARTITION_LEADER);
	cr_expect_eq(P.leader_epoch, 1);
	cr_expect_not(sluice_partition_on_written(&P, 100), "followers at 0 hold it");
	cr_expect_eq(sluice_partition_high_watermark(&P), 0);
	cr_expect_not(sluice_partition_replica_position(&P, 2, 50, 0));
	cr_expect(sluice_partition_replica_position(&P, 3, 70, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 50);
	cr_expect(sluice_partition_replica_position(&P, 2, 120, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 70);
	cr_expect(sluice_partition_replica_position(&P, 3, 200, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 100, "capped by the local written end");
	cr_expect_not(sluice_partition_replica_position(&P, 3, 60, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 100, "never moves back");
	cr_expect_not(sluice_partition_replica_position(&P, 9, 500, 0), "unknown replica");

	/* Replica 3 leaves the ISR (same leader epoch, next partition epoch):
	 * only self (130) and 2 (120) count. */
	int32_t isr[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 1, 2, all, 3, isr, 2, 0), SLUICE_PARTITION_UPDATED);
	cr_expect_eq(sluice_partition_isr_n(&P), 2);
	cr_expect(sluice_partition_on_written(&P, 130));
	cr_expect_eq(sluice_partition_high_watermark(&P), 120);
	cr_expect_not(sluice_partition_replica_position(&P, 3, 0, 0), "outside the ISR");

	int32_t others[] = {2, 3};
	cr_expect_eq(lead(2, 3, 3, others, 2, others, 2, 0), SLUICE_PARTITION_REFUSED, "self not a replica");
	int32_t many[SLUICE_PARTITION_REPLICAS_MAX + 1] = {SELF};
	for (int i = 1; i <= SLUICE_PARTITION_REPLICAS_MAX; i++)
		many[i] = i + 1;
	cr_expect_eq(lead(SELF, 3, 3, many, SLUICE_PARTITION_REPLICAS_MAX + 1, many, 1, 0), SLUICE_PARTITION_REFUSED);
	cr_expect_eq(P.leader_epoch, 1);
	cr_expect_eq(P.partition_epoch, 2);
	cr_expect_eq(P.replica_n, 3);
}

/* Proves the controller's word is applied only when newer (a higher
 * leader epoch, or the same one with a higher partition epoch: a snapshot
 * older than an AlterPartition answer changes nothing), and what each
 * change is: leading, following (a follower outside the ISR too), or an
 * update of the same leadership. */
Test(partition, leadership_only_moves_forward)
{
	int32_t all[] = {SELF, 2, 3}, two[] = {2, 3};
	cr_expect(P.is_leader && !P.leadership_known, "single node: leads until told");
	cr_assert_eq(lead(2, 0, 0, all, 3, two, 2, 0), SLUICE_PARTITION_FOLLOWER, "the first word always counts");
	cr_expect(!P.is_leader && P.leader_id == 2);
	cr_expect_eq(lead(2, 0, 0, all, 3, all, 3, 0), SLUICE_PARTITION_SAME, "same epochs: nothing new");
	cr_expect_eq(sluice_partition_isr_n(&P), 2);
	cr_expect_eq(lead(2, 0, 1, all, 3, all, 3, 0), SLUICE_PARTITION_UPDATED, "rejoined the ISR");
	cr_expect_eq(sluice_partition_isr_n(&P), 3);
	cr_expect_eq(lead(2, 0, 0, all, 3, two, 2, 0), SLUICE_PARTITION_SAME, "an older partition epoch");
	cr_expect_eq(sluice_partition_isr_n(&P), 3);
	cr_expect_eq(lead(3, 1, 2, all, 3, two, 2, 0), SLUICE_PARTITION_FOLLOWER, "a new leader");
	cr_expect_eq(P.leader_id, 3);
	cr_expect_eq(lead(2, 0, 9, all, 3, all, 3, 0), SLUICE_PARTITION_SAME, "an older leader epoch");
	cr_expect_eq(lead(SELF, 2, 3, all, 3, all, 3, 0), SLUICE_PARTITION_LEADER);
	cr_expect(P.is_leader && P.leader_epoch == 2 && P.partition_epoch == 3);
	cr_expect_eq(lead(-1, 3, 4, all, 3, all, 3, 0), SLUICE_PARTITION_FOLLOWER, "no leader: not leading");
	cr_expect(!P.is_leader && P.leader_id == -1);
}

/* Proves a follower's high watermark is the leader's capped by what it has
 * written, never moving back; that a leader's position reports are
 * ignored while following; and that a replica becoming leader keeps its
 * high watermark until every ISR member has fetched past it (positions
 * from before are another leader's). */
Test(partition, follower_hw_and_new_leader)
{
	int32_t all[] = {SELF, 2, 3};
	cr_assert_eq(lead(2, 4, 0, all, 3, all, 3, 0), SLUICE_PARTITION_FOLLOWER);
	cr_expect_not(sluice_partition_on_written(&P, 40));
	cr_expect(sluice_partition_follower_hw(&P, 25));
	cr_expect_eq(sluice_partition_high_watermark(&P), 25);
	cr_expect(sluice_partition_follower_hw(&P, 90));
	cr_expect_eq(sluice_partition_high_watermark(&P), 40, "capped by the written end");
	cr_expect(sluice_partition_on_written(&P, 60));
	cr_expect_eq(sluice_partition_high_watermark(&P), 60, "the write lets it follow the leader's");
	cr_expect_not(sluice_partition_follower_hw(&P, 30), "never back");
	cr_expect_not(sluice_partition_replica_position(&P, 3, 80, 0), "a follower tracks nobody");

	cr_assert_eq(lead(SELF, 5, 1, all, 3, all, 3, 0), SLUICE_PARTITION_LEADER);
	cr_expect(sluice_partition_on_written(&P, 100) == false, "the ISR has not fetched from this leader");
	cr_expect_not(sluice_partition_replica_position(&P, 2, 100, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 60);
	cr_expect(sluice_partition_replica_position(&P, 3, 90, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 90);
	cr_expect_not(sluice_partition_follower_hw(&P, 100), "a leader takes no leader's word");
}

/* Proves Kafka's caught-up rule: a follower fetching at the leader's end
 * is caught up now; one fetching at least the end the leader had at its
 * previous fetch was caught up then; one behind both keeps its old time. */
Test(partition, caught_up_time)
{
	int32_t all[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 1, 0, all, 2, all, 2, 1000), SLUICE_PARTITION_LEADER);
	cr_expect_eq(P.replicas[1].caught_up_ms, 1000, "a new leadership starts every clock");
	(void)sluice_partition_on_written(&P, 50);
	(void)sluice_partition_replica_position(&P, 2, 50, 2000);
	cr_expect_eq(P.replicas[1].caught_up_ms, 2000, "at the end");
	(void)sluice_partition_on_written(&P, 80);
	(void)sluice_partition_replica_position(&P, 2, 60, 3000); /* the end was 50 at its last fetch */
	cr_expect_eq(P.replicas[1].caught_up_ms, 2000, "its previous fetch: 2000");
	(void)sluice_partition_on_written(&P, 120);
	(void)sluice_partition_replica_position(&P, 2, 90, 4000); /* >= 80, the end at its fetch at 3000 */
	cr_expect_eq(P.replicas[1].caught_up_ms, 3000);
	(void)sluice_partition_replica_position(&P, 2, 95, 5000); /* < 120 */
	cr_expect_eq(P.replicas[1].caught_up_ms, 3000, "behind both: unchanged");
}

/* Proves the replica a leader points a consumer at (KIP-392, Kafka's
 * RackAwareReplicaSelector over the candidates in the consumer's rack):
 * only in-sync followers that fetched from this leadership and hold the
 * offset (log start <= offset <= log end) qualify; among them the largest
 * log end wins, then the shortest time since caught up, then the largest
 * id; none, a leader among the candidates, or not leading: -1. */
Test(partition, read_replica)
{
	int32_t all[] = {SELF, 2, 3, 4}, isr[] = {SELF, 2, 3};
	cr_assert_eq(lead(SELF, 1, 0, all, 4, isr, 3, 1000), SLUICE_PARTITION_LEADER);
	(void)sluice_partition_on_written(&P, 100);
	int32_t rack[] = {2, 3, 4};
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 0, 1000), -1, "nobody fetched from this leader yet");
	(void)sluice_partition_replica_position(&P, 2, 80, 2000);
	(void)sluice_partition_replica_position(&P, 3, 100, 2000);
	(void)sluice_partition_replica_position(&P, 4, 100, 2000); /* not in the ISR */
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 50, 2000), 3, "the largest log end");
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 1, 50, 2000), 2, "the only candidate");
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 1, 90, 2000), -1, "2 does not hold offset 90");
	cr_expect_eq(sluice_partition_read_replica(&P, rack + 2, 1, 50, 2000), -1, "4 is out of the ISR");
	(void)sluice_partition_replica_fetch(&P, 3, 60);
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 50, 2000), 2, "3's log starts past 50");
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 60, 2000), 3);
	(void)sluice_partition_replica_fetch(&P, 3, -1);
	(void)sluice_partition_replica_position(&P, 2, 100, 2500); /* both at 100: 2 caught up later */
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 50, 3000), 2, "the least time since caught up");
	(void)sluice_partition_replica_position(&P, 3, 100, 2500);
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 50, 3000), 3, "a tie: the largest id");
	int32_t with_self[] = {2, SELF};
	cr_expect_eq(sluice_partition_read_replica(&P, with_self, 2, 50, 3000), -1, "the leader in the rack serves");
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 0, 50, 3000), -1, "no candidate");
	cr_assert_eq(lead(2, 2, 1, all, 4, isr, 3, 4000), SLUICE_PARTITION_FOLLOWER);
	cr_expect_eq(sluice_partition_read_replica(&P, rack, 3, 50, 4000), -1, "a follower points nobody anywhere");
}

/* Proves a follower's fetch learns whether the high watermark is news to
 * it: the first read under a leadership is, a read at the same high
 * watermark is not, one after it moved is again; other replicas' reads
 * are counted apart, and a follower partition answers no. */
Test(partition, hw_news_per_follower)
{
	int32_t all[] = {SELF, 2, 3};
	cr_assert_eq(lead(SELF, 1, 0, all, 3, all, 3, 0), SLUICE_PARTITION_LEADER);
	(void)sluice_partition_on_written(&P, 100);
	cr_expect(sluice_partition_replica_fetch(&P, 2, 0), "high watermark 0: news to a new follower");
	cr_expect_not(sluice_partition_replica_fetch(&P, 2, 0));
	(void)sluice_partition_replica_position(&P, 2, 100, 0);
	cr_expect_not(sluice_partition_replica_fetch(&P, 2, 0), "3 holds it at 0 still");
	(void)sluice_partition_replica_position(&P, 3, 100, 0);
	cr_expect_eq(sluice_partition_high_watermark(&P), 100);
	cr_expect(sluice_partition_replica_fetch(&P, 3, 0), "3's fetch moved it: news to 3");
	cr_expect(sluice_partition_replica_fetch(&P, 2, 0), "and to 2, which has not read it");
	cr_expect_not(sluice_partition_replica_fetch(&P, 2, 0));
	cr_expect_not(sluice_partition_replica_fetch(&P, 9, 0), "unknown replica");
	cr_expect_not(sluice_partition_replica_fetch(&P, SELF, 0), "the leader itself");
	cr_assert_eq(lead(2, 2, 1, all, 3, all, 3, 0), SLUICE_PARTITION_FOLLOWER);
	cr_expect_not(sluice_partition_replica_fetch(&P, 3, 0), "not leading");
}

/* Proves the ISR a leader asks for: a follower not caught up for the lag
 * leaves, one out of it that fetched from this leader up to the high
 * watermark and its epoch's start joins, nothing is asked while a change
 * is in flight, and while it is the joining replica counts for the high
 * watermark (the maximal ISR). */
Test(partition, isr_wanted)
{
	int32_t all[] = {SELF, 2, 3}, two[] = {SELF, 2}, isr[SLUICE_PARTITION_REPLICAS_MAX];
	cr_assert_eq(lead(SELF, 1, 0, all, 3, two, 2, 1000), SLUICE_PARTITION_LEADER);
	sluice_partition_epoch_assign(&P, 1, 10); /* this leader's epoch starts at 10 */
	(void)sluice_partition_on_written(&P, 20);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 1500, 1000, isr), 0, "all well");
	(void)sluice_partition_replica_position(&P, 2, 20, 1600);
	cr_expect_eq(sluice_partition_high_watermark(&P), 20);
	(void)sluice_partition_replica_position(&P, 3, 15, 1700);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 1700, 1000, isr), 0, "3 is below the high watermark");
	(void)sluice_partition_replica_position(&P, 3, 20, 1800);
	uint8_t n = sluice_partition_isr_wanted(&P, 1800, 1000, isr);
	cr_assert_eq(n, 3, "3 caught up: it joins");
	cr_expect(isr[0] == SELF && isr[1] == 2 && isr[2] == 3);
	sluice_partition_isr_inflight(&P, isr, n);
	cr_expect_eq(sluice_partition_isr_n(&P), 2);
	cr_expect_eq(sluice_partition_max_isr_n(&P), 3, "the maximal ISR has the joining replica");
	cr_expect_eq(sluice_partition_isr_wanted(&P, 9000, 1000, isr), 0, "one change at a time");
	(void)sluice_partition_on_written(&P, 30);
	(void)sluice_partition_replica_position(&P, 2, 30, 1900);
	cr_expect_eq(sluice_partition_high_watermark(&P), 20, "joining 3 holds it (maximal ISR)");
	sluice_partition_isr_settled(&P);
	cr_assert_eq(lead(SELF, 1, 1, all, 3, all, 3, 2000), SLUICE_PARTITION_UPDATED, "the controller's answer");
	(void)sluice_partition_replica_position(&P, 3, 30, 2100);
	cr_expect_eq(sluice_partition_high_watermark(&P), 30);
	/* 2 stops fetching at 2100 (caught up at 1900; 3 keeps up). */
	(void)sluice_partition_on_written(&P, 40);
	(void)sluice_partition_replica_position(&P, 3, 40, 2500);
	(void)sluice_partition_replica_position(&P, 3, 40, 3000);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 2800, 1000, isr), 0, "2 lags 900 ms: stays");
	n = sluice_partition_isr_wanted(&P, 3000, 1000, isr);
	cr_assert_eq(n, 2, "2 lags 1100 ms: leaves");
	cr_expect(isr[0] == SELF && isr[1] == 3);
	sluice_partition_isr_inflight(&P, isr, n);
	sluice_partition_isr_settled(&P);
	cr_assert_eq(lead(SELF, 1, 2, all, 3, isr, 2, 3000), SLUICE_PARTITION_UPDATED);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 3100, 1000, isr), 0, "2 is behind: stays out");

	/* An idle log: a follower that stopped fetching sits at the high
	 * watermark; dropped for its silence, it must not come straight back
	 * (it would flap in and out). */
	sluice_partition_fini(&P);
	sluice_partition_init(&P, SELF);
	cr_assert_eq(lead(SELF, 1, 0, all, 3, all, 3, 0), SLUICE_PARTITION_LEADER);
	(void)sluice_partition_replica_position(&P, 2, 0, 100);
	(void)sluice_partition_replica_position(&P, 3, 0, 100);
	(void)sluice_partition_replica_position(&P, 2, 0, 1500); /* 3 went silent at 100 */
	n = sluice_partition_isr_wanted(&P, 1500, 1000, isr);
	cr_assert_eq(n, 2, "3 silent for 1400 ms: leaves");
	sluice_partition_isr_inflight(&P, isr, n);
	sluice_partition_isr_settled(&P);
	cr_assert_eq(lead(SELF, 1, 1, all, 3, isr, 2, 1500), SLUICE_PARTITION_UPDATED);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 1600, 1000, isr), 0, "at the high watermark, but silent: stays out");
	(void)sluice_partition_replica_position(&P, 3, 0, 1700);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 1700, 1000, isr), 3, "it fetches again: it joins");
	struct sluice_partition q;
	sluice_partition_init(&q, SELF);
	cr_expect_eq(sluice_partition_isr_wanted(&q, 5000, 1000, isr), 0, "single node: never");
	sluice_partition_fini(&q);
}

/* Proves a refused ISR change holds joining back until its backoff ends
 * (the refusal woke the follower's fetch, which asked again at once: a loop
 * of thousands of AlterPartition requests a second), while a member that
 * lags still leaves at once. */
Test(partition, isr_refused)
{
	int32_t all[] = {SELF, 2, 3}, two[] = {SELF, 2}, isr[SLUICE_PARTITION_REPLICAS_MAX];
	cr_assert_eq(lead(SELF, 1, 0, all, 3, two, 2, 1000), SLUICE_PARTITION_LEADER);
	(void)sluice_partition_on_written(&P, 20);
	(void)sluice_partition_replica_position(&P, 2, 20, 1100);
	(void)sluice_partition_replica_position(&P, 3, 20, 1100);
	uint8_t n = sluice_partition_isr_wanted(&P, 1100, 1000, isr);
	cr_assert_eq(n, 3, "3 caught up: it joins");
	sluice_partition_isr_inflight(&P, isr, n);
	sluice_partition_isr_settled(&P);
	sluice_partition_isr_refused(&P, 1600); /* INELIGIBLE_REPLICA */
	(void)sluice_partition_replica_position(&P, 3, 20, 1200);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 1200, 1000, isr), 0, "refused: not asked again at its next fetch");
	(void)sluice_partition_replica_position(&P, 3, 20, 2300);
	n = sluice_partition_isr_wanted(&P, 2300, 1000, isr);
	cr_assert_eq(n, 2, "the backoff is over: 3 joins, and 2, lagging 1200 ms, leaves");
	cr_expect(isr[0] == SELF && isr[1] == 3);
	sluice_partition_isr_refused(&P, 5000);
	n = sluice_partition_isr_wanted(&P, 2300, 1000, isr);
	cr_assert_eq(n, 1, "during a backoff leaving still goes");
	cr_expect(isr[0] == SELF, "and 3 does not join");
}

/* Proves what a reassignment does to a replica's state: an adding replica
 * joins the leader's replicas without a new term and is asked into the ISR
 * once caught up; a leader told the controller moved on (isr_stale) asks
 * nothing more until the next word; a replica moved away (stop_replica)
 * neither leads nor asks, and a word naming it again at a higher epoch
 * makes it a follower. */
Test(partition, reassignment)
{
	int32_t one[] = {SELF}, moving[] = {2, 3, SELF}, isr[SLUICE_PARTITION_REPLICAS_MAX];
	cr_assert_eq(lead(SELF, 0, 0, one, 1, one, 1, 0), SLUICE_PARTITION_LEADER);
	(void)sluice_partition_on_written(&P, 50);
	cr_assert_eq(lead(SELF, 0, 1, moving, 3, one, 1, 100), SLUICE_PARTITION_UPDATED, "adding replicas: same term");
	cr_expect(P.is_leader && P.replica_n == 3);
	(void)sluice_partition_replica_position(&P, 2, 50, 200);
	(void)sluice_partition_replica_position(&P, 3, 50, 200);
	uint8_t n = sluice_partition_isr_wanted(&P, 200, 1000, isr);
	cr_assert_eq(n, 3, "both new replicas caught up: they join");
	sluice_partition_isr_inflight(&P, isr, n);
	sluice_partition_isr_settled(&P);
	sluice_partition_isr_stale(&P); /* the answer: the controller completed the move (new epoch) */
	cr_expect_eq(sluice_partition_isr_wanted(&P, 300, 1000, isr), 0, "nothing asked until the word comes");
	sluice_partition_stop_replica(&P); /* the word: moved away from SELF */
	cr_expect(!P.is_leader && P.leader_id == -1);
	cr_expect_eq(sluice_partition_isr_wanted(&P, 400, 1000, isr), 0, "a stopped replica asks for nothing");
	int32_t back[] = {2, SELF};
	cr_assert_eq(lead(2, 1, 3, back, 2, back, 2, 500), SLUICE_PARTITION_FOLLOWER, "named again: a follower");
	cr_expect(!P.is_leader && P.leader_id == 2 && !P.isr_stale);
}

/* Proves Kafka's truncation rule for a follower told where its log
 * diverged: the end of that epoch here capped by the leader's end; an
 * epoch the leader named that this log lacks cuts to the end of its largest
 * epoch below; no epoch at or below it: the leader's end; never past the
 * log end. */
Test(partition, truncation_offset)
{
	sluice_partition_epoch_assign(&P, 1, 0);
	sluice_partition_epoch_assign(&P, 3, 40);
	sluice_partition_epoch_assign(&P, 5, 70);
	cr_expect_eq(sluice_partition_truncation_offset(&P, 3, 55, 100), 55, "the leader's end is lower");
	cr_expect_eq(sluice_partition_truncation_offset(&P, 3, 65, 100), 65);
	cr_expect_eq(sluice_partition_truncation_offset(&P, 3, 90, 100), 70, "ours ends at 70");
	cr_expect_eq(sluice_partition_truncation_offset(&P, 4, 80, 100), 70, "epoch 4 unknown: where 3 ends");
	cr_expect_eq(sluice_partition_truncation_offset(&P, 5, 500, 100), 100, "never past the log end");
	struct sluice_partition q;
	sluice_partition_init(&q, SELF);
	cr_expect_eq(sluice_partition_truncation_offset(&q, 2, 30, 10), 10, "no epochs: the leader's end, capped");
	cr_expect_eq(sluice_partition_truncation_offset(&q, 2, 3, 10), 3);
	sluice_partition_fini(&q);
}

/* Proves what a follower does with OFFSET_OUT_OF_RANGE (Kafka's
 * fetchOffsetAndTruncate with epochs): below the leader's log start it
 * starts over there; past the leader's end with a latest epoch it cuts to
 * where that epoch starts (clamped to the log), also for an epoch with no
 * record (at the log end); without any epoch it starts over at the leader's
 * log start; a request whose epoch is no longer the latest, an answer
 * without a log start, and an empty log at the leader's start change
 * nothing. Before this rule the follower only backed off and asked again. */
Test(partition, out_of_range_rules)
{
	int64_t to;
	sluice_partition_epoch_assign(&P, 1, 0);
	sluice_partition_epoch_assign(&P, 3, 40);
	sluice_partition_epoch_assign(&P, 5, 70);
	cr_expect_eq(sluice_partition_out_of_range(&P, 0, 100, 5, -1, &to), SLUICE_PARTITION_OOR_RETRY, "no log start");
	cr_expect_eq(sluice_partition_out_of_range(&P, 0, 100, 5, 250, &to), SLUICE_PARTITION_OOR_RESTART_AT);
	cr_expect_eq(to, 250, "below the leader's log start: start over there");
	cr_expect_eq(sluice_partition_out_of_range(&P, 0, 100, 5, 0, &to), SLUICE_PARTITION_OOR_TRUNCATE_TO);
	cr_expect_eq(to, 70, "past the leader's end: epoch 5 cut away, never the high watermark");
	cr_expect_eq(sluice_partition_out_of_range(&P, 80, 100, 5, 0, &to), SLUICE_PARTITION_OOR_TRUNCATE_TO);
	cr_expect_eq(to, 80, "never below the log start");
	cr_expect_eq(sluice_partition_out_of_range(&P, 0, 100, 3, 0, &to), SLUICE_PARTITION_OOR_RETRY,
		     "asked under another epoch than the latest: the log changed since");
	sluice_partition_epoch_assign(&P, 6, 100);
	cr_expect_eq(sluice_partition_out_of_range(&P, 0, 100, 6, 0, &to), SLUICE_PARTITION_OOR_TRUNCATE_TO);
	cr_expect_eq(to, 100, "an epoch without records goes, nothing is cut");
	struct sluice_partition q;
	sluice_partition_init(&q, SELF);
	cr_expect_eq(sluice_partition_out_of_range(&q, 0, 100, -1, 10, &to), SLUICE_PARTITION_OOR_RESTART_AT);
	cr_expect_eq(to, 10, "no epoch to truncate by: start over at the leader's log start");
	cr_expect_eq(sluice_partition_out_of_range(&q, 300, 300, -1, 10, &to), SLUICE_PARTITION_OOR_RESTART_AT,
		     "an empty log past the leader's end moves back to its start");
	cr_expect_eq(to, 10);
	cr_expect_eq(sluice_partition_out_of_range(&q, 10, 10, -1, 10, &to), SLUICE_PARTITION_OOR_RETRY);
	sluice_partition_fini(&q);
}

/* ---- over a real log -------------------------------------------------------- */

static struct {
	struct io_uring ring;
	char root[64], dir[96];
} L;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

static void reap_one(void)
{
	struct io_uring_cqe *cqe;
	io_uring_submit(&L.ring);
	cr_assert_eq(io_uring_wait_cqe(&L.ring, &cqe), 0);
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	int res = cqe->res;
	io_uring_cqe_seen(&L.ring, cqe);
	if (ud & ~(uint64_t)7)
		sluice_plog_complete((struct sluice_plog *)(uintptr_t)(ud & ~(uint64_t)7), (int)(ud & 7), res);
}

static void wait_write(struct sluice_plog *l, void *arg)
{
	(void)arg;
	while (sluice_plog_write_inflight(l))
		reap_one();
}

/* The storage core's hook, as dataplane/storage_core.c has it. */
static void on_written(struct sluice_plog *l, void *arg)
{
	(void)sluice_partition_on_written(arg, sluice_plog_written_end(l));
}

static void flush(struct sluice_plog *l)
{
	while (sluice_plog_write_pending(l)) {
		cr_assert_eq(sluice_plog_submit_write(l, &L.ring), 0);
		while (sluice_plog_write_inflight(l))
			reap_one();
	}
}

static struct sluice_plog *open_log(void)
{
	snprintf(L.root, sizeof L.root, "/tmp/sluice-partition-XXXXXX");
	cr_assert_not_null(mkdtemp(L.root));
	snprintf(L.dir, sizeof L.dir, "%s/t-0", L.root);
	int rc = io_uring_queue_init(16, &L.ring, 0);
	if (rc < 0)
		cr_skip_test("io_uring unavailable: %s", strerror(-rc));
	struct sluice_plog_cfg cfg = {.segment_bytes = 1 << 30, .index_interval_bytes = 4096,
				      .flush_interval_messages = INT64_MAX, .direct_io = true};
	struct sluice_plog_hooks hooks = {wait_write, on_written, &P};
	struct sluice_plog *l = NULL;
	char err[256] = "";
	cr_assert_eq(sluice_plog_open(L.dir, &cfg, true, &hooks, &l, NULL, err, sizeof err), 0, "%s", err);
	return l;
}

static void close_log(struct sluice_plog *l)
{
	sluice_plog_close(l);
	io_uring_queue_exit(&L.ring);
	nftw(L.root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static void append(struct sluice_plog *l, int n)
{
	size_t len;
	uint8_t *b = tb_simple(n, 1000, 10, &len);
	int64_t base, last;
	cr_assert_eq(sluice_plog_append(l, b, len, P.leader_epoch, -1, &base, &last), 0);
	sluice_partition_on_append(&P, base);
	free(b);
}

/* Proves log end, written end and high watermark stay apart: an append
 * moves the log end only; its write moves the written end and (single
 * node) the high watermark with it; with a follower behind, a read stops at
 * the high watermark although more is written, and an offset between the
 * two answers "nothing yet", not out of range. */
Test(partition, offsets_over_a_log)
{
	struct sluice_plog *l = open_log();
	sluice_partition_attach(&P, l, -1);
	append(l, 3);
	cr_expect_eq(sluice_partition_log_end(&P), 3);
	cr_expect_eq(sluice_partition_written_end(&P), 0);
	cr_expect_eq(sluice_partition_high_watermark(&P), 0);
	flush(l);
	cr_expect_eq(sluice_partition_written_end(&P), 3);
	cr_expect_eq(sluice_partition_high_watermark(&P), 3, "single node: follows the written end");

	int32_t all[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 1, 0, all, 2, all, 2, 0), SLUICE_PARTITION_LEADER);
	cr_expect_eq(P.epochs[P.epoch_n - 1].epoch, 1, "the new epoch starts at the log end");
	cr_expect_eq(P.epochs[P.epoch_n - 1].start_offset, 3);
	append(l, 2); /* offsets 3..4, epoch 1 */
	append(l, 4); /* offsets 5..8 */
	flush(l);
	cr_expect_eq(sluice_partition_written_end(&P), 9);
	cr_expect_eq(sluice_partition_high_watermark(&P), 3, "the follower has not fetched");
	cr_expect(sluice_partition_replica_position(&P, 2, 5, 0));
	int64_t hw = sluice_partition_high_watermark(&P);
	cr_expect_eq(hw, 5);
	uint8_t *out = NULL;
	int32_t n = sluice_plog_read_below(l, 0, hw, 1 << 20, true, &out);
	cr_assert_gt(n, 0);
	int64_t end = -1;
	for (int32_t pos = 0; pos < n;) {
		struct sluice_batch b;
		cr_assert_eq(sluice_batch_parse(out + pos, (size_t)(n - pos), &b), SLUICE_BATCH_OK);
		end = b.base_offset + b.last_offset_delta + 1;
		pos += (int32_t)sluice_batch_total_bytes(&b);
	}
	free(out);
	cr_expect_eq(end, 5, "served up to the high watermark, not the written end");
	cr_expect_eq(sluice_plog_read_below(l, 5, hw, 1 << 20, true, &out), 0, "past it: nothing yet");
	cr_expect_eq(sluice_plog_read_below(l, 10, hw, 1 << 20, true, &out), -1, "past the log end");
	cr_expect_gt(sluice_plog_read(l, 5, 1 << 20, true, &out), 0, "the log itself has it");
	free(out);
	int32_t e;
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 0, sluice_partition_log_end(&P), &e), 3);
	cr_expect_eq(e, 0);
	close_log(l);
}

/* ---- leader-epoch cache ------------------------------------------------------- */

/* Proves Kafka's epoch -> start offset rules: a new epoch appends, the
 * latest epoch again changes nothing, lookups answer the next epoch's start
 * (the log end for the latest), an epoch above every known one is
 * undefined, and truncating from the end or the start cuts entries. */
Test(partition, epoch_cache)
{
	int32_t e;
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 0, 50, &e), SLUICE_EPOCH_OFFSET_UNDEFINED, "empty");
	sluice_partition_epoch_assign(&P, 0, 0);
	sluice_partition_epoch_assign(&P, 0, 5);
	cr_expect_eq(P.epoch_n, 1, "same epoch, later offset: no change");
	sluice_partition_epoch_assign(&P, 1, 10);
	sluice_partition_epoch_assign(&P, 3, 20);
	cr_expect_eq(P.epoch_n, 3);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 0, 30, &e), 10);
	cr_expect_eq(e, 0);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 1, 30, &e), 20);
	cr_expect_eq(e, 1);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 2, 30, &e), 20, "unknown epoch: the floor's end");
	cr_expect_eq(e, 1);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 3, 30, &e), 30, "latest: the log end");
	cr_expect_eq(e, 3);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 4, 30, &e), SLUICE_EPOCH_OFFSET_UNDEFINED);
	cr_expect_eq(e, SLUICE_EPOCH_UNDEFINED);

	sluice_partition_epoch_truncate_from_end(&P, 20);
	cr_expect_eq(P.epoch_n, 2, "epoch 3 started at the cut");
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 1, 20, &e), 20);
	cr_expect_eq(e, 1);
	sluice_partition_epoch_truncate_from_start(&P, 12);
	cr_expect_eq(P.epoch_n, 1);
	cr_expect_eq(P.epochs[0].epoch, 1);
	cr_expect_eq(P.epochs[0].start_offset, 12);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 0, 20, &e), 12, "below every epoch: the first start");
	cr_expect_eq(e, 0);

	/* Entries that would no longer increase go. */
	sluice_partition_epoch_assign(&P, 4, 30);
	sluice_partition_epoch_assign(&P, 5, 25);
	cr_expect_eq(P.epoch_n, 2);
	cr_expect_eq(P.epochs[1].epoch, 5);
	cr_expect_eq(P.epochs[1].start_offset, 25);
	sluice_partition_epoch_assign(&P, -1, 40);
	cr_expect_eq(P.epoch_n, 2, "producer-supplied -1 is no epoch");
}

/* Proves the cache is bounded: past SLUICE_PARTITION_EPOCHS_MAX the oldest
 * entries go, and a lookup below the oldest kept is then undefined rather
 * than a guess. */
Test(partition, epoch_cache_bounded)
{
	for (int32_t i = 0; i < SLUICE_PARTITION_EPOCHS_MAX + 4; i++)
		sluice_partition_epoch_assign(&P, i, 10 * i);
	cr_expect_eq(P.epoch_n, SLUICE_PARTITION_EPOCHS_MAX);
	cr_expect_eq(P.epochs[0].epoch, 4);
	int32_t e;
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 1, 1000, &e), SLUICE_EPOCH_OFFSET_UNDEFINED);
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 4, 1000, &e), 50);
	cr_expect_eq(e, 4);
	/* The leader's appends under one epoch add one entry. */
	P.leader_epoch = 100;
	sluice_partition_on_append(&P, 1000);
	sluice_partition_on_append(&P, 1001);
	cr_expect_eq(P.epochs[P.epoch_n - 1].epoch, 100);
	cr_expect_eq(P.epochs[P.epoch_n - 1].start_offset, 1000);
}

/* Proves which cache changes mark the checkpoint for writing, and which
 * need it synced: the first epoch of an empty cache and a cut from the
 * start are rebuilt from the log after a crash (no sync), a later epoch and
 * a cut from the end are not; nothing that changes nothing marks it; a load
 * leaves it clean. */
Test(partition, epoch_checkpoint_flags)
{
	sluice_partition_epoch_assign(&P, 0, 0);
	cr_expect(P.epochs_dirty && !P.epochs_durable, "first epoch: written, not synced");
	P.epochs_dirty = false;
	sluice_partition_epoch_assign(&P, 0, 7);
	sluice_partition_epoch_truncate_from_end(&P, 50);
	sluice_partition_epoch_truncate_from_start(&P, 0);
	cr_expect(!P.epochs_dirty, "no change, nothing to write");
	sluice_partition_epoch_assign(&P, 2, 10);
	cr_expect(P.epochs_dirty && P.epochs_durable, "a new epoch after others: synced");
	P.epochs_dirty = P.epochs_durable = false;
	sluice_partition_epoch_truncate_from_start(&P, 4);
	cr_expect(P.epochs_dirty && !P.epochs_durable, "the log start moved: written, not synced");
	P.epochs_dirty = false;
	sluice_partition_epoch_truncate_from_end(&P, 10);
	cr_expect(P.epochs_dirty && P.epochs_durable, "a truncation: synced");
	cr_expect_eq(P.epoch_n, 1);
	struct sluice_epoch_entry e[2] = {{3, 0}, {4, 9}};
	sluice_partition_epoch_load(&P, e, 2, true);
	cr_expect(!P.epochs_dirty && !P.epochs_durable && P.epochs_dropped && P.epoch_n == 2);
}

static struct sluice_batch pbatch(int64_t pid, int16_t epoch, int32_t first_seq, int32_t count);

/* A batch as a leader wrote it: base offset, epoch, n records, an
 * idempotent producer's pid (-1: none) and first sequence. */
static uint8_t *leader_batch(int64_t base, int32_t epoch, int n, int64_t pid, int32_t seq, size_t *len)
{
	uint8_t *b = tb_simple(n, 1000, 10, len);
	kput64(b, (uint64_t)base);
	kput32(b + SLUICE_BATCH_OFF_EPOCH, (uint32_t)epoch);
	kput64(b + SLUICE_BATCH_OFF_PRODUCER_ID, (uint64_t)pid);
	b[SLUICE_BATCH_OFF_PRODUCER_EPOCH] = b[SLUICE_BATCH_OFF_PRODUCER_EPOCH + 1] = pid >= 0 ? 0 : 0xff;
	kput32(b + SLUICE_BATCH_OFF_BASE_SEQ, (uint32_t)(pid >= 0 ? seq : -1));
	tb_fix_crc(b, *len);
	return b;
}

/* Append the leader's batch verbatim, as sluice_store_append_verbatim does:
 * the epoch cache and producer table learn from it. */
static void follow(struct sluice_plog *l, int64_t base, int32_t epoch, int n, int64_t pid, int32_t seq)
{
	size_t len;
	uint8_t *b = leader_batch(base, epoch, n, pid, seq, &len);
	int64_t last;
	cr_assert_eq(sluice_plog_append_verbatim(l, b, len, &last), 0);
	struct sluice_batch h;
	cr_assert_eq(sluice_batch_parse(b, len, &h), SLUICE_BATCH_OK);
	sluice_partition_epoch_assign(&P, h.leader_epoch, h.base_offset);
	if (h.producer_id >= 0)
		sluice_partition_producer_record(&P, &h, base, last);
	free(b);
}

/* Proves a follower's truncation as the storage core runs it: after the
 * log is cut inside epoch 3's batches, the high watermark comes down to
 * the new end, epoch 3 leaves the cache (synced), the producer table no
 * longer knows the truncated batches (a retry of one is no duplicate), and
 * the appends waiting past the end are handed back in order while those
 * below stay; a full truncation then empties the cache and puts the high
 * watermark at the new start. */
Test(partition, follower_truncation)
{
	struct sluice_plog *l = open_log();
	int32_t all[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 3, 0, all, 2, all, 2, 0), SLUICE_PARTITION_LEADER); /* for the high watermark's sake */
	sluice_partition_attach(&P, l, 0);
	follow(l, 0, 1, 4, 77, 0);  /* 0..3, epoch 1 */
	follow(l, 4, 3, 4, 77, 4);  /* 4..7, epoch 3 */
	follow(l, 8, 3, 4, 77, 8);  /* 8..11 */
	flush(l);
	cr_expect(sluice_partition_replica_position(&P, 2, 12, 0));
	cr_expect_eq(sluice_partition_high_watermark(&P), 12);
	struct partop a = {.last_offset = 3}, b = {.last_offset = 7}, c = {.last_offset = 11};
	sluice_partition_wait_append(&P, &a, true);
	sluice_partition_wait_append(&P, &b, true);
	sluice_partition_wait_append(&P, &c, true);
	char err[256];
	cr_assert_eq(sluice_plog_truncate_to(l, 6, err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_plog_log_end(l), 4, "the batch holding 6 went whole");
	P.epochs_dirty = P.epochs_durable = false;
	struct partop *gone = sluice_partition_on_truncate(&P, false);
	cr_expect_eq(gone, &b);
	cr_expect_eq(b.next, &c);
	cr_expect_null(c.next);
	cr_expect_eq(P.wait_head, &a);
	cr_expect_eq(P.wait_tail, &a);
	cr_expect_eq(sluice_partition_high_watermark(&P), 4);
	cr_expect(P.epoch_n == 1 && P.epochs[0].epoch == 1);
	cr_expect(P.epochs_dirty && P.epochs_durable, "the cut is written synced");
	int32_t e;
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 1, sluice_partition_log_end(&P), &e), 4);
	struct sluice_batch retry = pbatch(77, 0, 4, 4);
	int64_t base, last;
	int16_t error;
	const char *why = NULL;
	cr_expect_eq(sluice_partition_producer_check(&P, &retry, &base, &last, &error, &why), SLUICE_PRODUCER_APPEND,
		     "the truncated batch is no longer a duplicate");
	/* The leader's epoch 2 batches follow. */
	follow(l, 4, 2, 2, -1, 0);
	flush(l);
	cr_expect_eq(P.epochs[P.epoch_n - 1].epoch, 2);
	cr_expect_eq(P.epochs[P.epoch_n - 1].start_offset, 4);
	(void)sluice_partition_wait_pop(&P);
	cr_assert_eq(sluice_plog_truncate_fully(l, 40, err, sizeof err), 0, "%s", err);
	cr_expect_null(sluice_partition_on_truncate(&P, true));
	cr_expect_eq(P.epoch_n, 0);
	cr_expect_eq(sluice_partition_high_watermark(&P), 40);
	cr_expect_eq(sluice_partition_log_start(&P), 40);
	close_log(l);
}

/* Proves a follower answered OFFSET_OUT_OF_RANGE again and again (a leader
 * that places none of its epochs) does not stall: applying each action to
 * a real log as the storage core does, every round drops the latest epoch
 * (its records cut down to the log start), and once none is left the
 * empty log starts over at the leader's log start; there nothing is left to
 * change (the leader serves that offset). */
Test(partition, out_of_range_walk)
{
	struct sluice_plog *l = open_log();
	int32_t all[] = {2, SELF};
	cr_assert_eq(lead(2, 7, 0, all, 2, all, 2, 0), SLUICE_PARTITION_FOLLOWER);
	sluice_partition_attach(&P, l, 0);
	follow(l, 0, 1, 4, -1, 0);  /* 0..3, epoch 1 */
	follow(l, 4, 3, 4, -1, 0);  /* 4..7, epoch 3 */
	follow(l, 8, 5, 4, -1, 0);  /* 8..11, epoch 5 */
	flush(l);
	int64_t want_ends[] = {8, 4, 0};
	char err[256];
	int rounds = 0;
	for (;; rounds++) {
		cr_assert_lt(rounds, 10, "the follower keeps getting the same answer");
		int64_t leo = sluice_plog_log_end(l), to;
		int32_t last = P.epoch_n ? P.epochs[P.epoch_n - 1].epoch : -1;
		enum sluice_partition_oor a = sluice_partition_out_of_range(&P, sluice_plog_log_start(l), leo, last, 2, &to);
		if (a == SLUICE_PARTITION_OOR_RESTART_AT) {
			cr_expect_eq(to, 2);
			cr_assert_eq(sluice_plog_truncate_fully(l, to, err, sizeof err), 0, "%s", err);
			cr_expect_null(sluice_partition_on_truncate(&P, true));
			break;
		}
		cr_assert_eq(a, SLUICE_PARTITION_OOR_TRUNCATE_TO);
		cr_assert_lt(rounds, 3);
		cr_expect_eq(to, want_ends[rounds]);
		cr_assert_eq(sluice_plog_truncate_to(l, to, err, sizeof err), 0, "%s", err);
		cr_expect_null(sluice_partition_on_truncate(&P, false));
		cr_expect_eq(sluice_plog_log_end(l), to);
		cr_expect(P.epoch_n == 0 || P.epochs[P.epoch_n - 1].epoch < last, "epoch %d dropped", last);
	}
	cr_expect_eq(rounds, 3, "one round per epoch, then the restart");
	cr_expect_eq(sluice_plog_log_start(l), 2);
	cr_expect_eq(sluice_plog_log_end(l), 2);
	cr_expect_eq(P.epoch_n, 0);
	int64_t to;
	cr_expect_eq(sluice_partition_out_of_range(&P, 2, 2, -1, 2, &to), SLUICE_PARTITION_OOR_RETRY,
		     "empty at the leader's log start: nothing left to change");
	close_log(l);
}

/* Proves attach checks a checkpointed cache against the log: an entry past
 * the log end (the checkpoint outlived a crash's lost data) goes, the
 * newest segments' epochs are added, the cut ones marked for writing; and
 * a replicated partition's checkpointed high watermark is kept within
 * [log start, written end]. */
Test(partition, attach_checks_checkpoints)
{
	struct sluice_plog *l = open_log();
	follow(l, 0, 1, 5, -1, 0);
	follow(l, 5, 2, 5, -1, 0);
	flush(l);
	sluice_plog_close(l);
	struct sluice_plog_cfg cfg = {.segment_bytes = 1 << 30, .index_interval_bytes = 4096,
				      .flush_interval_messages = INT64_MAX, .direct_io = true};
	struct sluice_plog_hooks hooks = {wait_write, on_written, &P};
	char err[256] = "";
	sluice_partition_fini(&P);
	sluice_partition_init(&P, SELF);
	cr_assert_eq(sluice_plog_open(L.dir, &cfg, true, &hooks, &l, NULL, err, sizeof err), 0, "%s", err);
	struct sluice_epoch_entry ck[2] = {{1, 0}, {7, 100}};
	sluice_partition_epoch_load(&P, ck, 2, false);
	sluice_partition_attach(&P, l, 500);
	cr_expect_eq(sluice_partition_high_watermark(&P), 10, "at most the written end");
	cr_expect_eq(P.epoch_n, 2);
	cr_expect(P.epochs[0].epoch == 1 && P.epochs[0].start_offset == 0);
	cr_expect(P.epochs[1].epoch == 2 && P.epochs[1].start_offset == 5, "epoch 7 past the end went, 2 was added");
	cr_expect(P.epochs_dirty && P.epochs_durable, "the correction is synced before the segments roll away");
	close_log(l);
}

static int rolls;
static void count_roll(struct sluice_plog *l, void *arg)
{
	(void)l;
	(void)arg;
	rolls++;
}

static void reopen_with(struct sluice_plog **l, const struct sluice_epoch_entry *ck, uint8_t n)
{
	sluice_plog_close(*l);
	sluice_partition_fini(&P);
	sluice_partition_init(&P, SELF);
	struct sluice_plog_cfg cfg = {.segment_bytes = 400, .index_interval_bytes = 4096,
				      .flush_interval_messages = INT64_MAX, .direct_io = true};
	struct sluice_plog_hooks hooks = {.wait_write = wait_write, .written = on_written, .arg = &P,
					  .rolling = count_roll};
	char err[256] = "";
	cr_assert_eq(sluice_plog_open(L.dir, &cfg, true, &hooks, l, NULL, err, sizeof err), 0, "%s", err);
	sluice_partition_epoch_load(&P, ck, n, false);
	sluice_partition_attach(&P, *l, 0);
}

/* Proves the leader-epoch cache may be written without a sync on the
 * path of a write (storage core: synced before the next roll), because
 * attach trusts the log over the checkpoint in the newest two segments:
 * a checkpoint a crash left behind the log (epoch 5 at 30, of a log since
 * truncated there and written again in epochs 1 and 6) gives way to the
 * batches, while an epoch that started below those segments keeps its
 * start (epoch 1 at 0, although the segments read start at 30); a cache
 * that agrees with the log is left as it is (not rewritten). The log calls
 * the rolling hook once per roll. */
Test(partition, attach_trusts_the_newest_segments)
{
	struct sluice_plog *l = open_log();
	struct sluice_epoch_entry none[1];
	reopen_with(&l, none, 0); /* with small segments */
	rolls = 0;
	for (int i = 0; i < 8; i++)
		follow(l, i * 5, 1, 5, -1, 0); /* epoch 1: offsets 0..39 */
	for (int i = 8; i < 10; i++)
		follow(l, i * 5, 6, 5, -1, 0); /* epoch 6: 40..49 */
	flush(l);
	cr_assert_geq(rolls, 3, "segments of about two batches each (%d rolls)", rolls);
	cr_assert_eq(P.epoch_n, 2);

	struct sluice_epoch_entry stale[2] = {{1, 0}, {5, 30}};
	reopen_with(&l, stale, 2);
	cr_expect_eq(P.epoch_n, 2);
	cr_expect(P.epochs[0].epoch == 1 && P.epochs[0].start_offset == 0, "epoch 1 keeps its start (%d at %" PRId64 ")",
		  P.epochs[0].epoch, P.epochs[0].start_offset);
	cr_expect(P.epoch_n == 2 && P.epochs[1].epoch == 6 && P.epochs[1].start_offset == 40,
		  "the log's epoch 6 replaces the checkpoint's epoch 5");
	cr_expect(P.epochs_dirty && P.epochs_durable);

	struct sluice_epoch_entry right[2] = {{1, 0}, {6, 40}};
	reopen_with(&l, right, 2);
	cr_expect(P.epoch_n == 2 && P.epochs[0].start_offset == 0 && P.epochs[1].start_offset == 40);
	cr_expect(!P.epochs_dirty && !P.epochs_durable, "nothing to write");
	int32_t out;
	cr_expect_eq(sluice_partition_epoch_end_offset(&P, 0, 50, &out), 0, "epoch 0 ended where epoch 1 began");
	close_log(l);
}

/* ---- idempotent producers ---------------------------------------------------- */

static struct sluice_batch pbatch(int64_t pid, int16_t epoch, int32_t first_seq, int32_t count)
{
	struct sluice_batch b = {0};
	b.producer_id = pid;
	b.producer_epoch = epoch;
	b.base_sequence = first_seq;
	b.last_offset_delta = count - 1;
	b.records_count = count;
	return b;
}

static enum sluice_producer_verdict check(struct sluice_batch b, int64_t *base, int64_t *last, int16_t *err)
{
	const char *why = NULL;
	*err = 0;
	enum sluice_producer_verdict v = sluice_partition_producer_check(&P, &b, base, last, err, &why);
	cr_expect_eq(v == SLUICE_PRODUCER_REFUSED, why != NULL, "a refusal says why");
	return v;
}

/* Proves the idempotence rules: an unknown producer's batch is accepted at
 * any sequence; a retry of one of the last batches is a duplicate answered
 * with its original offsets; a gap is out of order; an older epoch is
 * fenced; a newer one must start at sequence 0; sequences wrap at
 * INT32_MAX. */
Test(partition, producer_rules)
{
	int64_t base = -1, last = -1;
	int16_t err;
	cr_expect_eq(check(pbatch(7, 0, 40, 5), &base, &last, &err), SLUICE_PRODUCER_APPEND, "unknown producer");
	struct sluice_batch b = pbatch(7, 0, 0, 5);
	sluice_partition_producer_record(&P, &b, 100, 104);
	b = pbatch(7, 0, 5, 2);
	cr_expect_eq(check(b, &base, &last, &err), SLUICE_PRODUCER_APPEND);
	sluice_partition_producer_record(&P, &b, 105, 106);
	cr_expect_eq(check(pbatch(7, 0, 0, 5), &base, &last, &err), SLUICE_PRODUCER_DUPLICATE);
	cr_expect_eq(base, 100);
	cr_expect_eq(last, 104);
	cr_expect_eq(check(pbatch(7, 0, 5, 2), &base, &last, &err), SLUICE_PRODUCER_DUPLICATE);
	cr_expect_eq(base, 105);
	cr_expect_eq(check(pbatch(7, 0, 9, 1), &base, &last, &err), SLUICE_PRODUCER_REFUSED);
	cr_expect_eq(err, KERR_OUT_OF_ORDER_SEQUENCE_NUMBER);

	b = pbatch(7, 1, 0, 1);
	cr_expect_eq(check(b, &base, &last, &err), SLUICE_PRODUCER_APPEND, "a new epoch from 0");
	sluice_partition_producer_record(&P, &b, 107, 107);
	cr_expect_eq(check(pbatch(7, 0, 7, 1), &base, &last, &err), SLUICE_PRODUCER_REFUSED);
	cr_expect_eq(err, KERR_INVALID_PRODUCER_EPOCH, "the old epoch is fenced");
	cr_expect_eq(check(pbatch(7, 2, 3, 1), &base, &last, &err), SLUICE_PRODUCER_REFUSED);
	cr_expect_eq(err, KERR_OUT_OF_ORDER_SEQUENCE_NUMBER, "a new epoch must start at 0");
	cr_expect_eq(check(pbatch(7, 1, 0, 5), &base, &last, &err), SLUICE_PRODUCER_REFUSED,
		     "not a retry of a batch it remembers: out of order");

	/* Only the last SLUICE_PARTITION_PRODUCER_BATCHES are remembered. */
	int32_t seq = 1;
	for (int i = 0; i < SLUICE_PARTITION_PRODUCER_BATCHES + 1; i++, seq++) {
		b = pbatch(7, 1, seq, 1);
		sluice_partition_producer_record(&P, &b, 108 + i, 108 + i);
	}
	cr_expect_eq(check(pbatch(7, 1, 1, 1), &base, &last, &err), SLUICE_PRODUCER_REFUSED, "too old to be known");
	cr_expect_eq(check(pbatch(7, 1, 2, 1), &base, &last, &err), SLUICE_PRODUCER_DUPLICATE);

	/* Sequences wrap after INT32_MAX. */
	b = pbatch(8, 0, INT32_MAX - 1, 2);
	sluice_partition_producer_record(&P, &b, 200, 201);
	cr_expect_eq(check(pbatch(8, 0, 0, 1), &base, &last, &err), SLUICE_PRODUCER_APPEND);
}

/* Proves the producer table is bounded: SLUICE_PARTITION_PRODUCERS_MAX fit;
 * one more forgets them all (they are unknown again, which accepts their
 * next sequence) instead of growing. */
Test(partition, producer_table_bounded)
{
	for (int64_t pid = 0; pid < SLUICE_PARTITION_PRODUCERS_MAX; pid++) {
		struct sluice_batch b = pbatch(pid, 0, 0, 1);
		sluice_partition_producer_record(&P, &b, pid, pid);
	}
	cr_expect_eq(P.prod_n, SLUICE_PARTITION_PRODUCERS_MAX);
	cr_expect_not_null(sluice_partition_producer(&P, 0, false));
	uint32_t cap = P.prod_cap;
	struct sluice_batch b = pbatch(SLUICE_PARTITION_PRODUCERS_MAX, 0, 0, 1);
	sluice_partition_producer_record(&P, &b, 0, 0);
	cr_expect_eq(P.prod_cap, cap, "no growth past the bound");
	cr_expect_eq(P.prod_n, 1);
	cr_expect_null(sluice_partition_producer(&P, 0, false), "forgotten");
	int64_t base, last;
	int16_t err;
	cr_expect_eq(check(pbatch(0, 0, 77, 1), &base, &last, &err), SLUICE_PRODUCER_APPEND);
}

/* ---- waiters ------------------------------------------------------------------ */

/* Proves acks=all appends are answered in order once the high watermark
 * passes their last offset, acks=0/1 ones once the written end does, all
 * of them when the log failed. */
Test(partition, append_waiters)
{
	int32_t all[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 1, 0, all, 2, all, 2, 0), SLUICE_PARTITION_LEADER);
	struct partop a = {.last_offset = 4}, b = {.last_offset = 9}, one = {.last_offset = 6};
	sluice_partition_wait_append(&P, &a, true);
	sluice_partition_wait_append(&P, &one, false);
	sluice_partition_wait_append(&P, &b, true);
	cr_expect(sluice_partition_waiting(&P));
	cr_expect_null(sluice_partition_wait_pop_visible(&P, false));
	(void)sluice_partition_on_written(&P, 7);
	cr_expect_null(sluice_partition_wait_pop_visible(&P, false), "written, not replicated");
	cr_expect_eq(sluice_partition_wait_pop_written(&P, false), &one, "acks=1: written here");
	(void)sluice_partition_replica_position(&P, 2, 5, 0);
	cr_expect_eq(sluice_partition_wait_pop_visible(&P, false), &a);
	cr_expect_null(sluice_partition_wait_pop_visible(&P, false));
	cr_expect_eq(sluice_partition_wait_pop_visible(&P, true), &b, "a failed log answers everything");
	cr_expect_null(P.wait_head);
	cr_expect_null(P.wait_tail);
	cr_expect_not(sluice_partition_waiting(&P));
}

/* Proves an acks=all append whose timeout passed leaves the wait list from
 * wherever it is (head, middle, tail) with the others kept in order, and
 * that every way an op leaves a wait list (answered, refused, cut by a
 * truncation, removed) drops its deadline, so none expires after it was
 * answered. */
Test(partition, wait_remove_drops_deadlines)
{
	struct sluice_deadlines ds;
	sluice_deadlines_init(&ds);
	int32_t all[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 1, 0, all, 2, all, 2, 0), SLUICE_PARTITION_LEADER);
	struct partop op[5];
	memset(op, 0, sizeof op);
	for (int i = 0; i < 5; i++) {
		op[i].last_offset = 10 * i + 9;
		sluice_partition_wait_append(&P, &op[i], true);
		sluice_deadlines_arm(&ds, &op[i].deadline, 0, 1000 + i);
	}
	sluice_partition_wait_remove(&P, &op[2]); /* the middle */
	cr_expect_not(sluice_deadline_armed(&op[2].deadline));
	cr_expect(op[1].next == &op[3] && op[3].prev == &op[1]);
	sluice_partition_wait_remove(&P, &op[0]); /* the head */
	sluice_partition_wait_remove(&P, &op[4]); /* the tail */
	cr_expect(P.wait_head == &op[1] && P.wait_tail == &op[3]);
	(void)sluice_partition_on_written(&P, 50);
	(void)sluice_partition_replica_position(&P, 2, 20, 0);
	cr_expect_eq(sluice_partition_wait_pop_visible(&P, false), &op[1]);
	cr_expect_not(sluice_deadline_armed(&op[1].deadline), "answered: no longer timed");
	cr_expect_null(sluice_partition_wait_pop_visible(&P, false));
	cr_expect_eq(sluice_partition_wait_pop(&P), &op[3]);
	cr_expect_not(sluice_deadline_armed(&op[3].deadline));
	cr_expect_null(P.wait_head);
	cr_expect_null(P.wait_tail);
	cr_expect_eq(sluice_deadlines_next(&ds), INT64_MAX, "no deadline left behind");
}

/* Proves the truncation of a follower's log hands back the waiting appends
 * past the new end with their deadlines dropped. */
Test(partition, truncation_drops_deadlines)
{
	struct sluice_deadlines ds;
	sluice_deadlines_init(&ds);
	struct sluice_plog *l = open_log();
	int32_t all[] = {SELF, 2};
	cr_assert_eq(lead(SELF, 3, 0, all, 2, all, 2, 0), SLUICE_PARTITION_LEADER);
	sluice_partition_attach(&P, l, 0);
	follow(l, 0, 1, 4, -1, 0);
	follow(l, 4, 1, 4, -1, 0);
	flush(l);
	struct partop a = {.last_offset = 3}, b = {.last_offset = 7};
	sluice_partition_wait_append(&P, &a, true);
	sluice_partition_wait_append(&P, &b, true);
	sluice_deadlines_arm(&ds, &a.deadline, 0, 100);
	sluice_deadlines_arm(&ds, &b.deadline, 0, 100);
	char err[256];
	cr_assert_eq(sluice_plog_truncate_to(l, 4, err, sizeof err), 0, "%s", err);
	cr_expect_eq(sluice_partition_on_truncate(&P, false), &b);
	cr_expect_not(sluice_deadline_armed(&b.deadline));
	cr_expect_null(b.prev);
	cr_expect(sluice_deadline_armed(&a.deadline), "still waiting, still timed");
	cr_expect_eq(sluice_partition_wait_pop(&P), &a);
	cr_expect_eq(sluice_deadlines_next(&ds), INT64_MAX);
	close_log(l);
}

/* Which brokers the low watermark tests call alive: a bit per id. */
static bool alive_bits(void *arg, int32_t id) { return (*(const uint32_t *)arg >> id) & 1; }

/* Proves the low watermark (Kafka's lowWatermarkIfLeader) is the least log
 * start over the leader and the followers on live brokers, in or out of
 * the ISR, as their fetches reported it; -1 while a live follower has not
 * reported one under this leadership (a new leader knows nothing of them);
 * and that a follower on a dead (fenced) broker does not hold it back. */
Test(partition, low_watermark)
{
	int32_t all[] = {SELF, 2, 3}, isr[] = {SELF, 2};
	uint32_t alive = 1u << SELF | 1u << 2 | 1u << 3;
	cr_assert_eq(lead(SELF, 1, 0, all, 3, isr, 2, 0), SLUICE_PARTITION_LEADER);
	P.replicas[0].log_start = 50; /* this replica's (no log in this test) */
	cr_expect_eq(sluice_partition_low_watermark(&P, alive_bits, &alive), -1, "nothing heard from the followers");
	(void)sluice_partition_replica_fetch(&P, 2, 50);
	(void)sluice_partition_replica_fetch(&P, 3, 20);
	cr_expect_eq(sluice_partition_low_watermark(&P, alive_bits, &alive), 20, "broker 3 is out of the ISR but alive");
	alive &= ~(1u << 3);
	cr_expect_eq(sluice_partition_low_watermark(&P, alive_bits, &alive), 50, "a fenced broker does not count");
	alive |= 1u << 3;
	(void)sluice_partition_replica_fetch(&P, 3, 70);
	cr_expect_eq(sluice_partition_low_watermark(&P, alive_bits, &alive), 50, "never above the leader's own");
	(void)sluice_partition_replica_fetch(&P, 2, -1);
	cr_expect_eq(sluice_partition_low_watermark(&P, alive_bits, &alive), -1, "a fetch without LogStartOffset");
	cr_assert_eq(lead(SELF, 2, 0, all, 3, isr, 2, 0), SLUICE_PARTITION_LEADER);
	(void)sluice_partition_replica_fetch(&P, 2, 50);
	cr_expect_eq(sluice_partition_low_watermark(&P, alive_bits, &alive), -1, "a new leadership asks broker 3 again");
}

/* Proves waiting DeleteRecords are taken as the low watermark reaches
 * their offsets (in any order), removed as their timeouts pass with their
 * deadlines dropped, and all taken when asked (a lost leadership). */
Test(partition, delete_waiters)
{
	struct sluice_deadlines ds;
	sluice_deadlines_init(&ds);
	struct partop d[4];
	memset(d, 0, sizeof d);
	int64_t offsets[] = {30, 10, 20, 40};
	for (int i = 0; i < 4; i++) {
		d[i].kind = PARTOP_DELETE_RECORDS;
		d[i].offset = offsets[i];
		sluice_partition_delete_wait(&P, &d[i]);
		sluice_deadlines_arm(&ds, &d[i].deadline, 0, 500);
	}
	cr_expect_not(sluice_partition_waiting(&P), "DeleteRecords are not appends");
	cr_expect_null(sluice_partition_delete_pop(&P, 9, false));
	cr_expect_null(sluice_partition_delete_pop(&P, -1, false), "an unknown follower holds everything");
	cr_expect_eq(sluice_partition_delete_pop(&P, 20, false), &d[1]);
	cr_expect_eq(sluice_partition_delete_pop(&P, 20, false), &d[2]);
	cr_expect_null(sluice_partition_delete_pop(&P, 20, false));
	cr_expect_not(sluice_deadline_armed(&d[1].deadline));
	sluice_partition_delete_remove(&P, &d[0]); /* its timeout passed */
	cr_expect_not(sluice_deadline_armed(&d[0].deadline));
	cr_expect_eq(sluice_partition_delete_pop(&P, 0, true), &d[3]);
	cr_expect_null(sluice_partition_delete_pop(&P, 0, true));
	cr_expect(!P.del_head && !P.del_tail);
	cr_expect_eq(sluice_deadlines_next(&ds), INT64_MAX);
}

/* Proves every core id from 0 to SLUICE_CORES_MAX - 1 has its own waiter
 * bit, and taking them yields each once, in order. */
Test(partition, fetch_waiter_bitmap)
{
	for (int c = 0; c < SLUICE_CORES_MAX; c += 3)
		sluice_partition_watch(&P, c);
	sluice_partition_watch(&P, SLUICE_CORES_MAX - 1);
	sluice_partition_watch(&P, SLUICE_CORES_MAX - 1);
	for (int c = 0; c < SLUICE_CORES_MAX; c++)
		cr_expect_eq(sluice_partition_watched(&P, c), c % 3 == 0 || c == SLUICE_CORES_MAX - 1, "core %d", c);
	int want = 0, got;
	for (int from = 0; (got = sluice_partition_take_watcher(&P, from)) >= 0; from = got + 1) {
		cr_expect_eq(got, want);
		want = want + 3 < SLUICE_CORES_MAX ? want + 3 : SLUICE_CORES_MAX - 1;
		if (got == SLUICE_CORES_MAX - 1)
			want = -1;
	}
	cr_expect_eq(want, -1, "the last core was taken");
	for (int c = 0; c < SLUICE_CORES_MAX; c++)
		cr_expect_not(sluice_partition_watched(&P, c));
	cr_expect_eq(sluice_partition_take_watcher(&P, 0), -1);
}
