/* A partition's state above its log (see partition.h): offsets as consumers
 * and replicas see them, the leader-epoch cache, the idempotent-producer
 * table, append and fetch waiters. Leaf functions only: no I/O, no rings;
 * the storage core calls them and does the messaging. */
#include "dataplane/partition.h"
#include "common/kafka/batch.h"
#include "common/kafka/errors.h"
#include "storage/plog.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SLUICE_PARTITION_EPOCHS_MAX <= UINT8_MAX, "epoch_n is uint8_t");

void sluice_partition_init(struct sluice_partition *p, int32_t self_id)
{
	assert(self_id >= 0);
	memset(p, 0, sizeof *p);
	p->self_id = self_id;
	p->is_leader = true;
	p->leader_id = self_id;
	p->replicas[0] = (struct sluice_replica){.id = self_id, .in_isr = true};
	p->replica_n = 1;
}

void sluice_partition_fini(struct sluice_partition *p)
{
	assert(!p->wait_head && !p->local_head && !p->del_head);
	free(p->prods);
	p->prods = NULL;
	p->prod_cap = p->prod_n = 0;
	p->log = NULL;
}

/* A batch of the newest segments, in offset order, against the cache: the
 * log is right where the checkpoint disagrees (it may be older than the
 * log's end after a crash, the checkpoint written but not synced). A
 * batch of an epoch below the latest entry's shows that entries of higher
 * epochs starting here or later came from a log since truncated; they go,
 * and the batches after rebuild them. The first batches of an epoch the
 * cache holds already keep its entry's start (which may lie below the
 * segments read). */
static void rebuild_assign(struct sluice_partition *p, int32_t epoch, int64_t base_offset)
{
	if (epoch < 0)
		return;
	while (p->epoch_n && p->epochs[p->epoch_n - 1].epoch > epoch)
		p->epoch_n--;
	sluice_partition_epoch_assign(p, epoch, base_offset);
}

static void rebuild_visit(const struct sluice_batch *b, void *arg)
{
	struct sluice_partition *p = arg;
	rebuild_assign(p, b->leader_epoch, b->base_offset);
	if (b->producer_id < 0)
		return;
	struct sluice_producer *pr = sluice_partition_producer(p, b->producer_id, true);
	if (pr && b->producer_epoch >= pr->epoch)
		sluice_partition_producer_record(p, b, b->base_offset, b->base_offset + b->last_offset_delta);
}

/* The producer table forgotten, then rebuilt (with the epochs) from the
 * newest two segments. */
static void rebuild_from_tail(struct sluice_partition *p)
{
	for (uint32_t i = 0; i < p->prod_cap; i++)
		p->prods[i].pid = -1;
	p->prod_n = 0;
	(void)sluice_plog_visit_tail(p->log, 2, rebuild_visit, p);
}

static int64_t hw_clamp(int64_t hw, int64_t log_start, int64_t written)
{
	return hw < log_start ? log_start : hw > written ? written : hw;
}

void sluice_partition_attach(struct sluice_partition *p, struct sluice_plog *log, int64_t high_watermark)
{
	assert(log && !p->log);
	p->log = log;
	/* The written end on open is what recovery kept: a single replica
	 * served it before the stop; a replicated one restarts from its
	 * checkpointed high watermark (Kafka's), never past what it holds. */
	int64_t written = sluice_plog_written_end(log), start = sluice_plog_log_start(log);
	for (uint8_t i = 0; i < p->replica_n; i++)
		if (p->replicas[i].id == p->self_id)
			p->replicas[i].log_end = written;
	p->high_watermark = high_watermark < 0 ? written : hw_clamp(high_watermark, start, written);
	/* The checkpointed epochs may run past what recovery kept (a crash lost
	 * the end of the log) or start below the log start; the newest
	 * segments' batches add what the checkpoint missed. */
	struct sluice_epoch_entry loaded[SLUICE_PARTITION_EPOCHS_MAX];
	uint8_t loaded_n = p->epoch_n;
	bool dirty = p->epochs_dirty;
	memcpy(loaded, p->epochs, loaded_n * sizeof *loaded);
	sluice_partition_epoch_truncate_from_end(p, sluice_plog_log_end(log));
	rebuild_from_tail(p);
	sluice_partition_epoch_truncate_from_start(p, start);
	/* What the newest segments changed is rebuilt from them again at the
	 * next open, until they roll away (then it must be synced). */
	bool changed = p->epoch_n != loaded_n || memcmp(p->epochs, loaded, loaded_n * sizeof *loaded);
	p->epochs_dirty = dirty || changed;
	p->epochs_durable = changed;
	assert(p->high_watermark >= start && p->high_watermark <= written);
}

/* Take the ops of a wait list whose last offset is at or past end (a
 * suffix: the list is in offset order), in order, linked through next
 * only, their deadlines cancelled. */
static struct partop *list_cut(struct partop **head, struct partop **tail, int64_t end)
{
	struct partop **q = head, *prev = NULL;
	while (*q && (*q)->last_offset < end) {
		prev = *q;
		q = &(*q)->next;
	}
	struct partop *gone = *q;
	*q = NULL;
	*tail = prev;
	assert(!*head == !*tail);
	for (struct partop *op = gone; op; op = op->next) {
		op->prev = NULL;
		sluice_deadline_cancel(&op->deadline);
	}
	return gone;
}

struct partop *sluice_partition_on_truncate(struct sluice_partition *p, bool fully)
{
	assert(p->log);
	int64_t end = sluice_plog_log_end(p->log), written = sluice_plog_written_end(p->log);
	int64_t start = sluice_plog_log_start(p->log);
	assert(written == end); /* a truncation leaves nothing unwritten */
	p->high_watermark = hw_clamp(p->high_watermark, start, written);
	for (uint8_t i = 0; i < p->replica_n; i++)
		if (p->replicas[i].id == p->self_id)
			p->replicas[i].log_end = written;
	if (fully && p->epoch_n) {
		p->epoch_n = 0;
		p->epochs_dropped = false;
		p->epochs_dirty = p->epochs_durable = true;
	}
	sluice_partition_epoch_truncate_from_end(p, end);
	bool durable = p->epochs_durable;
	rebuild_from_tail(p);
	p->epochs_durable = durable; /* what the newest segments add is in the log already */
	/* The waiters are in offset order: those past the end are a suffix of
	 * each list. */
	struct partop *gone = list_cut(&p->wait_head, &p->wait_tail, end);
	struct partop *gone_local = list_cut(&p->local_head, &p->local_tail, end), **tail = &gone;
	while (*tail)
		tail = &(*tail)->next;
	*tail = gone_local;
	return gone;
}

int64_t sluice_partition_log_start(const struct sluice_partition *p) { return sluice_plog_log_start(p->log); }
int64_t sluice_partition_log_end(const struct sluice_partition *p) { return sluice_plog_log_end(p->log); }
int64_t sluice_partition_written_end(const struct sluice_partition *p) { return sluice_plog_written_end(p->log); }
int64_t sluice_partition_high_watermark(const struct sluice_partition *p) { return p->high_watermark; }

/* ---- high watermark ------------------------------------------------------ */

/* The position of self (the log's written end; without a log, in unit
 * tests, the last one reported). */
static int64_t local_end(const struct sluice_partition *p)
{
	if (p->log)
		return sluice_plog_written_end(p->log);
	for (uint8_t i = 0; i < p->replica_n; i++)
		if (p->replicas[i].id == p->self_id)
			return p->replicas[i].log_end;
	return 0;
}

/* Leader: the least log end over the ISR; follower: the leader's high
 * watermark; either capped by what is written here (a consumer is served
 * from this log). Kafka never moves it back (but for a truncation). */
static bool hw_update(struct sluice_partition *p)
{
	int64_t written = local_end(p), hw = written;
	if (!p->is_leader) {
		hw = p->leader_hw < written ? p->leader_hw : written;
	} else {
		for (uint8_t i = 0; i < p->replica_n; i++)
			if ((p->replicas[i].in_isr || p->replicas[i].isr_adding) && p->replicas[i].log_end < hw)
				hw = p->replicas[i].log_end;
	}
	if (hw <= p->high_watermark)
		return false;
	p->high_watermark = hw;
	assert(p->high_watermark <= written);
	return true;
}

static struct sluice_replica *replica_find(struct sluice_partition *p, int32_t id)
{
	for (uint8_t i = 0; i < p->replica_n; i++)
		if (p->replicas[i].id == id)
			return &p->replicas[i];
	return NULL;
}

bool sluice_partition_replica_position(struct sluice_partition *p, int32_t replica_id, int64_t log_end_offset,
				       int64_t now_ms)
{
	assert(log_end_offset >= 0);
	struct sluice_replica *r = replica_find(p, replica_id);
	if (!r || (!p->is_leader && replica_id != p->self_id))
		return false;
	if (replica_id != p->self_id) {
		/* Kafka's updateFetchState: caught up when the fetch reaches the
		 * leader's end now, or the end the leader had at its last fetch. */
		int64_t leader_end = local_end(p);
		if (log_end_offset >= leader_end)
			r->caught_up_ms = now_ms > r->caught_up_ms ? now_ms : r->caught_up_ms;
		else if (log_end_offset >= r->last_fetch_leader_end && r->last_fetch_ms > r->caught_up_ms)
			r->caught_up_ms = r->last_fetch_ms;
		r->last_fetch_ms = now_ms;
		r->last_fetch_leader_end = leader_end;
		r->fetched = true;
	}
	r->log_end = log_end_offset;
	return hw_update(p);
}

bool sluice_partition_on_written(struct sluice_partition *p, int64_t written_end)
{
	assert(!p->log || written_end == sluice_plog_written_end(p->log));
	struct sluice_replica *self = replica_find(p, p->self_id);
	assert(self);
	self->log_end = written_end;
	bool moved = hw_update(p);
	assert(p->high_watermark <= written_end);
	return moved;
}

static bool id_in(int32_t id, const int32_t *ids, uint8_t n)
{
	for (uint8_t i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

bool sluice_partition_replica_fetch(struct sluice_partition *p, int32_t replica_id, int64_t log_start)
{
	struct sluice_replica *r = replica_find(p, replica_id);
	if (!r || !p->is_leader || replica_id == p->self_id)
		return false;
	r->log_start = log_start >= 0 ? log_start : -1;
	if (p->high_watermark <= r->hw_told)
		return false;
	r->hw_told = p->high_watermark;
	return true;
}

/* Kafka's ReplicaView.comparator: whether a is more caught up than b. */
static bool replica_ahead(const struct sluice_replica *a, const struct sluice_replica *b, int64_t now_ms)
{
	if (a->log_end != b->log_end)
		return a->log_end > b->log_end;
	int64_t a_lag = now_ms - a->caught_up_ms, b_lag = now_ms - b->caught_up_ms;
	if (a_lag != b_lag)
		return a_lag < b_lag;
	return a->id > b->id;
}

int32_t sluice_partition_read_replica(const struct sluice_partition *p, const int32_t *ids, uint8_t n, int64_t offset,
				      int64_t now_ms)
{
	assert(n <= SLUICE_PARTITION_REPLICAS_MAX);
	const struct sluice_replica *best = NULL;
	if (!p->is_leader || id_in(p->self_id, ids, n))
		return -1;
	for (uint8_t i = 0; i < p->replica_n; i++) {
		const struct sluice_replica *r = &p->replicas[i];
		/* Only in-sync followers that hold the offset: one lagging
		 * behind would hold the consumer back for as long as it lags
		 * (Kafka, KAFKA-14372). */
		if (r->id == p->self_id || !id_in(r->id, ids, n) || !r->in_isr || !r->fetched || r->log_end < offset ||
		    r->log_start > offset)
			continue;
		if (!best || replica_ahead(r, best, now_ms))
			best = r;
	}
	assert(!best || best->id != p->self_id);
	return best ? best->id : -1;
}

bool sluice_partition_follower_hw(struct sluice_partition *p, int64_t leader_hw)
{
	if (p->is_leader || leader_hw < 0)
		return false;
	if (leader_hw > p->leader_hw)
		p->leader_hw = leader_hw;
	return hw_update(p);
}

uint8_t sluice_partition_isr_n(const struct sluice_partition *p)
{
	uint8_t n = 0;
	for (uint8_t i = 0; i < p->replica_n; i++)
		n += p->replicas[i].in_isr;
	return n;
}

uint8_t sluice_partition_max_isr_n(const struct sluice_partition *p)
{
	uint8_t n = 0;
	for (uint8_t i = 0; i < p->replica_n; i++)
		n += p->replicas[i].in_isr || p->replicas[i].isr_adding;
	assert(n <= p->replica_n);
	return n;
}

/* Whether l is news: the first word, a higher leader epoch, or the same
 * leader epoch with a higher partition epoch. */
static bool leadership_newer(const struct sluice_partition *p, const struct sluice_partition_leadership *l)
{
	if (!p->leadership_known || l->leader_epoch > p->leader_epoch)
		return true;
	return l->leader_epoch == p->leader_epoch && l->partition_epoch > p->partition_epoch;
}

/* The replica list becomes l's: a replica kept keeps what its leader knows
 * of it unless the leadership is new (then it is unknown again, as in
 * Kafka's makeLeader: positions from before are another leader's). */
static void replicas_take(struct sluice_partition *p, const struct sluice_partition_leadership *l, bool new_term,
			  int64_t now_ms)
{
	struct sluice_replica next[SLUICE_PARTITION_REPLICAS_MAX];
	int64_t written = local_end(p);
	for (uint8_t i = 0; i < l->replica_n; i++) {
		const struct sluice_replica *old = replica_find(p, l->replicas[i]);
		next[i] = (struct sluice_replica){.id = l->replicas[i], .in_isr = id_in(l->replicas[i], l->isr, l->isr_n),
						  .caught_up_ms = now_ms, .last_fetch_ms = now_ms, .log_start = -1,
						  .hw_told = -1};
		if (l->replicas[i] == p->self_id) {
			next[i].log_end = written;
		} else if (old && !new_term) {
			bool in_isr = next[i].in_isr;
			next[i] = *old;
			next[i].in_isr = in_isr;
			next[i].isr_adding = old->isr_adding && !in_isr;
		}
	}
	memcpy(p->replicas, next, l->replica_n * sizeof *next);
	p->replica_n = l->replica_n;
}

enum sluice_partition_change sluice_partition_set_leader(struct sluice_partition *p,
							 const struct sluice_partition_leadership *l, int64_t now_ms)
{
	assert(l->leader_epoch >= 0 && l->partition_epoch >= 0);
	if (l->replica_n > SLUICE_PARTITION_REPLICAS_MAX || l->isr_n > l->replica_n ||
	    !id_in(p->self_id, l->replicas, l->replica_n))
		return SLUICE_PARTITION_REFUSED;
	if (!leadership_newer(p, l))
		return SLUICE_PARTITION_SAME;
	bool new_term = !p->leadership_known || l->leader_epoch > p->leader_epoch;
	bool was_leader = p->is_leader;
	p->isr_stale = false;
	p->leadership_known = true;
	p->leader_epoch = l->leader_epoch;
	p->partition_epoch = l->partition_epoch;
	p->leader_id = l->leader;
	p->is_leader = l->leader == p->self_id;
	replicas_take(p, l, new_term, now_ms);
	if (p->is_leader && new_term && p->log)
		sluice_partition_epoch_assign(p, p->leader_epoch, sluice_plog_log_end(p->log));
	if (!p->is_leader && (new_term || was_leader))
		p->leader_hw = p->high_watermark; /* until the new leader's first answer */
	(void)hw_update(p);
	assert(p->replica_n >= 1);
	if (!new_term && was_leader == p->is_leader)
		return SLUICE_PARTITION_UPDATED;
	return p->is_leader ? SLUICE_PARTITION_LEADER : SLUICE_PARTITION_FOLLOWER;
}

void sluice_partition_stop_replica(struct sluice_partition *p)
{
	p->is_leader = false;
	p->leader_id = -1;
	for (uint8_t i = 0; i < p->replica_n; i++)
		p->replicas[i].isr_adding = false;
	p->isr_pending = false;
	assert(!p->is_leader);
}

uint8_t sluice_partition_isr_wanted(const struct sluice_partition *p, int64_t now_ms, int64_t lag_ms,
				    int32_t isr[SLUICE_PARTITION_REPLICAS_MAX])
{
	if (!p->is_leader || p->isr_pending || p->isr_stale || !p->leadership_known)
		return 0;
	/* Where this leader's epoch starts: a follower below it may still hold
	 * another leader's records there (Kafka's leaderEpochStartOffset). */
	int64_t epoch_start = p->epoch_n && p->epochs[p->epoch_n - 1].epoch == p->leader_epoch
				      ? p->epochs[p->epoch_n - 1].start_offset
				      : local_end(p);
	uint8_t n = 0;
	bool changed = false;
	for (uint8_t i = 0; i < p->replica_n; i++) {
		const struct sluice_replica *r = &p->replicas[i];
		bool keep;
		if (r->id == p->self_id)
			keep = true;
		else if (r->in_isr)
			keep = now_ms - r->caught_up_ms <= lag_ms;
		else /* and caught up lately, by the rule that keeps it in: it stays once in */
			keep = r->fetched && r->log_end >= p->high_watermark && r->log_end >= epoch_start &&
			       now_ms - r->caught_up_ms <= lag_ms && now_ms >= p->isr_join_after_ms;
		changed |= keep != r->in_isr;
		if (keep)
			isr[n++] = r->id;
	}
	assert(n >= 1 && n <= p->replica_n);
	return changed ? n : 0;
}

void sluice_partition_isr_inflight(struct sluice_partition *p, const int32_t *isr, uint8_t n)
{
	assert(p->is_leader && !p->isr_pending);
	p->isr_pending = true;
	for (uint8_t i = 0; i < p->replica_n; i++)
		p->replicas[i].isr_adding = !p->replicas[i].in_isr && id_in(p->replicas[i].id, isr, n);
}

void sluice_partition_isr_refused(struct sluice_partition *p, int64_t until_ms)
{
	assert(!p->isr_pending);
	p->isr_join_after_ms = until_ms;
}

void sluice_partition_isr_stale(struct sluice_partition *p)
{
	p->isr_stale = true;
	assert(sluice_partition_isr_wanted(p, 0, 0, (int32_t[SLUICE_PARTITION_REPLICAS_MAX]){0}) == 0);
}

void sluice_partition_isr_settled(struct sluice_partition *p)
{
	p->isr_pending = false;
	for (uint8_t i = 0; i < p->replica_n; i++)
		p->replicas[i].isr_adding = false;
}

/* ---- leader-epoch cache -------------------------------------------------- */

void sluice_partition_epoch_load(struct sluice_partition *p, const struct sluice_epoch_entry *e, uint8_t n,
				 bool dropped)
{
	assert(n <= SLUICE_PARTITION_EPOCHS_MAX && !p->log);
	for (uint8_t i = 0; i < n; i++)
		assert(e[i].epoch >= 0 && (i == 0 || (e[i].epoch > e[i - 1].epoch &&
						       e[i].start_offset > e[i - 1].start_offset)));
	memcpy(p->epochs, e, n * sizeof *e);
	p->epoch_n = n;
	p->epochs_dropped = dropped;
	p->epochs_dirty = p->epochs_durable = false;
}

void sluice_partition_become_leader(struct sluice_partition *p, int32_t epoch)
{
	assert(p->log && epoch >= 0);
	if (epoch > p->leader_epoch)
		p->leader_epoch = epoch;
	sluice_partition_epoch_assign(p, p->leader_epoch, sluice_plog_log_end(p->log));
	assert(p->epoch_n > 0 && p->epochs[p->epoch_n - 1].epoch == p->leader_epoch);
}

void sluice_partition_epoch_assign(struct sluice_partition *p, int32_t epoch, int64_t start_offset)
{
	if (epoch < 0 || start_offset < 0)
		return;
	if (p->epoch_n) {
		const struct sluice_epoch_entry *last = &p->epochs[p->epoch_n - 1];
		if (last->epoch == epoch && last->start_offset <= start_offset)
			return;
	}
	/* Past here the cache changes. */
	p->epochs_dirty = true;
	p->epochs_durable |= p->epoch_n > 0;
	/* Entries that would no longer increase in both go (Kafka's
	 * maybeTruncateNonMonotonicEntries). */
	while (p->epoch_n && (p->epochs[p->epoch_n - 1].epoch >= epoch ||
			      p->epochs[p->epoch_n - 1].start_offset >= start_offset))
		p->epoch_n--;
	if (p->epoch_n == SLUICE_PARTITION_EPOCHS_MAX) {
		memmove(p->epochs, p->epochs + 1, (p->epoch_n - 1) * sizeof *p->epochs);
		p->epoch_n--;
		p->epochs_dropped = true;
	}
	p->epochs[p->epoch_n++] = (struct sluice_epoch_entry){epoch, start_offset};
	assert(p->epoch_n <= SLUICE_PARTITION_EPOCHS_MAX);
}

int64_t sluice_partition_epoch_end_offset(const struct sluice_partition *p, int32_t requested_epoch,
					  int64_t log_end_offset, int32_t *epoch_out)
{
	*epoch_out = SLUICE_EPOCH_UNDEFINED;
	if (requested_epoch < 0 || p->epoch_n == 0)
		return SLUICE_EPOCH_OFFSET_UNDEFINED;
	if (p->epochs[p->epoch_n - 1].epoch == requested_epoch) {
		*epoch_out = requested_epoch;
		return log_end_offset;
	}
	uint8_t higher = 0;
	while (higher < p->epoch_n && p->epochs[higher].epoch <= requested_epoch)
		higher++;
	if (higher == p->epoch_n)
		return SLUICE_EPOCH_OFFSET_UNDEFINED; /* above every known epoch */
	if (higher == 0) {
		if (p->epochs_dropped)
			return SLUICE_EPOCH_OFFSET_UNDEFINED; /* its entry may have been dropped */
		*epoch_out = requested_epoch;
		return p->epochs[0].start_offset;
	}
	*epoch_out = p->epochs[higher - 1].epoch;
	assert(*epoch_out <= requested_epoch);
	return p->epochs[higher].start_offset;
}

void sluice_partition_epoch_truncate_from_end(struct sluice_partition *p, int64_t end_offset)
{
	uint8_t n = p->epoch_n;
	while (p->epoch_n && p->epochs[p->epoch_n - 1].start_offset >= end_offset)
		p->epoch_n--;
	if (p->epoch_n != n)
		p->epochs_dirty = p->epochs_durable = true;
}

void sluice_partition_epoch_truncate_from_start(struct sluice_partition *p, int64_t start_offset)
{
	uint8_t below = 0;
	while (below < p->epoch_n && p->epochs[below].start_offset <= start_offset)
		below++;
	if (below == 0 || (below == 1 && p->epochs[0].start_offset == start_offset))
		return;
	p->epochs_dirty = true;
	/* The last entry starting at or below start_offset holds it: keep it,
	 * moved up to start there; those before it go. */
	p->epochs[below - 1].start_offset = start_offset;
	memmove(p->epochs, p->epochs + below - 1, (size_t)(p->epoch_n - below + 1) * sizeof *p->epochs);
	p->epoch_n = (uint8_t)(p->epoch_n - below + 1);
	assert(p->epoch_n >= 1);
}

void sluice_partition_on_append(struct sluice_partition *p, int64_t base_offset)
{
	sluice_partition_epoch_assign(p, p->leader_epoch, base_offset);
}

int64_t sluice_partition_truncation_offset(const struct sluice_partition *p, int32_t epoch, int64_t end_offset,
					   int64_t log_end)
{
	assert(log_end >= 0);
	int32_t mine;
	int64_t my_end = sluice_partition_epoch_end_offset(p, epoch, log_end, &mine);
	int64_t to;
	if (mine == SLUICE_EPOCH_UNDEFINED || my_end == SLUICE_EPOCH_OFFSET_UNDEFINED)
		to = end_offset; /* no epoch here at or below it: the leader's end (Kafka: safe, the leader's is older) */
	else if (mine != epoch)
		to = my_end; /* an epoch the leader does not have: cut to where ours below it ends, then ask again */
	else
		to = my_end < end_offset ? my_end : end_offset;
	if (to > log_end)
		to = log_end;
	if (to < 0)
		to = 0;
	assert(to >= 0 && to <= log_end);
	return to;
}

enum sluice_partition_oor sluice_partition_out_of_range(const struct sluice_partition *p, int64_t log_start,
							int64_t log_end, int32_t last_epoch,
							int64_t leader_log_start, int64_t *offset)
{
	assert(log_start >= 0 && log_start <= log_end);
	*offset = -1;
	if (leader_log_start < 0)
		return SLUICE_PARTITION_OOR_RETRY;
	if (leader_log_start > log_end) {
		*offset = leader_log_start;
		return SLUICE_PARTITION_OOR_RESTART_AT;
	}
	int32_t latest = p->epoch_n ? p->epochs[p->epoch_n - 1].epoch : SLUICE_EPOCH_UNDEFINED;
	if (last_epoch != latest)
		return SLUICE_PARTITION_OOR_RETRY; /* the cache changed since the request: ask again */
	if (latest != SLUICE_EPOCH_UNDEFINED) {
		int64_t to = p->epochs[p->epoch_n - 1].start_offset;
		*offset = to < log_start ? log_start : to > log_end ? log_end : to;
		return SLUICE_PARTITION_OOR_TRUNCATE_TO;
	}
	if (log_start == log_end && log_start == leader_log_start)
		return SLUICE_PARTITION_OOR_RETRY; /* empty at the leader's start already: nothing to change */
	*offset = leader_log_start;
	assert(*offset >= 0);
	return SLUICE_PARTITION_OOR_RESTART_AT;
}

/* ---- idempotent producers ------------------------------------------------ */

static void producers_grow(struct sluice_partition *p)
{
	uint32_t old_cap = p->prod_cap, cap = old_cap ? old_cap * 2 : 16;
	if (cap > SLUICE_PARTITION_PRODUCERS_MAX * 2) {
		/* Full: forget every producer (they are treated as unknown,
		 * which accepts their next sequence). Bounded memory wins. */
		for (uint32_t i = 0; i < old_cap; i++)
			p->prods[i].pid = -1;
		p->prod_n = 0;
		return;
	}
	struct sluice_producer *old = p->prods, *n = malloc(cap * sizeof *n);
	assert(n);
	for (uint32_t i = 0; i < cap; i++)
		n[i].pid = -1;
	p->prods = n;
	p->prod_cap = cap;
	p->prod_n = 0;
	for (uint32_t i = 0; i < old_cap; i++)
		if (old[i].pid >= 0)
			*sluice_partition_producer(p, old[i].pid, true) = old[i];
	free(old);
	assert(p->prod_cap <= SLUICE_PARTITION_PRODUCERS_MAX * 2);
}

struct sluice_producer *sluice_partition_producer(struct sluice_partition *p, int64_t pid, bool create)
{
	assert(pid >= 0);
	if (create && (p->prod_n + 1) * 2 > p->prod_cap)
		producers_grow(p);
	if (!p->prod_cap)
		return NULL;
	uint32_t mask = p->prod_cap - 1;
	for (uint32_t i = (uint32_t)((uint64_t)pid * 0x9E3779B97F4A7C15ull >> 32) & mask;; i = (i + 1) & mask) {
		if (p->prods[i].pid == pid)
			return &p->prods[i];
		if (p->prods[i].pid < 0) {
			if (!create)
				return NULL;
			memset(&p->prods[i], 0, sizeof p->prods[i]);
			p->prods[i].pid = pid;
			p->prods[i].epoch = -1;
			p->prod_n++;
			return &p->prods[i];
		}
	}
}

static int32_t seq_add(int32_t seq, int32_t delta)
{
	return (int32_t)(((int64_t)seq + delta) % ((int64_t)INT32_MAX + 1));
}

void sluice_partition_producer_record(struct sluice_partition *p, const struct sluice_batch *b, int64_t base,
				      int64_t last)
{
	struct sluice_producer *pr = sluice_partition_producer(p, b->producer_id, true);
	assert(pr && last >= base);
	if (b->producer_epoch != pr->epoch) {
		pr->epoch = b->producer_epoch;
		pr->n = pr->pos = 0;
	}
	int32_t last_seq = seq_add(b->base_sequence, b->last_offset_delta);
	pr->last_seq = last_seq;
	pr->recent[pr->pos].first_seq = b->base_sequence;
	pr->recent[pr->pos].last_seq = last_seq;
	pr->recent[pr->pos].base_offset = base;
	pr->recent[pr->pos].last_offset = last;
	pr->pos = (uint8_t)((pr->pos + 1) % SLUICE_PARTITION_PRODUCER_BATCHES);
	if (pr->n < SLUICE_PARTITION_PRODUCER_BATCHES)
		pr->n++;
}

enum sluice_producer_verdict sluice_partition_producer_check(struct sluice_partition *p, const struct sluice_batch *b,
							     int64_t *base, int64_t *last, int16_t *error,
							     const char **why)
{
	assert(b->producer_id >= 0);
	struct sluice_producer *pr = sluice_partition_producer(p, b->producer_id, false);
	if (!pr)
		return SLUICE_PRODUCER_APPEND; /* unknown producer: any sequence is accepted */
	int32_t last_seq = seq_add(b->base_sequence, b->last_offset_delta);
	if (b->producer_epoch < pr->epoch) {
		*why = "Producer's epoch is older than the broker's";
		*error = KERR_INVALID_PRODUCER_EPOCH;
		return SLUICE_PRODUCER_REFUSED;
	}
	if (b->producer_epoch > pr->epoch) {
		if (b->base_sequence == 0)
			return SLUICE_PRODUCER_APPEND;
		*why = "A new producer epoch must start at sequence 0";
		*error = KERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
		return SLUICE_PRODUCER_REFUSED;
	}
	for (uint8_t i = 0; i < pr->n; i++)
		if (pr->recent[i].first_seq == b->base_sequence && pr->recent[i].last_seq == last_seq) {
			*base = pr->recent[i].base_offset;
			*last = pr->recent[i].last_offset;
			return SLUICE_PRODUCER_DUPLICATE;
		}
	if (b->base_sequence != seq_add(pr->last_seq, 1)) {
		*why = "Out of order sequence number";
		*error = KERR_OUT_OF_ORDER_SEQUENCE_NUMBER;
		return SLUICE_PRODUCER_REFUSED;
	}
	return SLUICE_PRODUCER_APPEND;
}

/* ---- waiters ------------------------------------------------------------- */

/* The wait lists are doubly linked (op->next, op->prev), so that an op whose
 * timeout passed leaves from wherever it is in O(1). */
static void list_append(struct partop **head, struct partop **tail, struct partop *op)
{
	assert(op && op != *tail && !op->prev);
	op->next = NULL;
	op->prev = *tail;
	if (*tail)
		(*tail)->next = op;
	else
		*head = op;
	*tail = op;
}

/* op (in the list) taken out, its deadline with it. */
static void list_unlink(struct partop **head, struct partop **tail, struct partop *op)
{
	assert(op->prev ? op->prev->next == op : *head == op);
	assert(op->next ? op->next->prev == op : *tail == op);
	if (op->prev)
		op->prev->next = op->next;
	else
		*head = op->next;
	if (op->next)
		op->next->prev = op->prev;
	else
		*tail = op->prev;
	op->next = op->prev = NULL;
	sluice_deadline_cancel(&op->deadline);
	assert(!*head == !*tail);
}

static struct partop *list_pop(struct partop **head, struct partop **tail)
{
	struct partop *op = *head;
	if (op)
		list_unlink(head, tail, op);
	return op;
}

void sluice_partition_wait_append(struct sluice_partition *p, struct partop *op, bool all)
{
	if (all)
		list_append(&p->wait_head, &p->wait_tail, op);
	else
		list_append(&p->local_head, &p->local_tail, op);
}

struct partop *sluice_partition_wait_pop(struct sluice_partition *p)
{
	struct partop *op = list_pop(&p->wait_head, &p->wait_tail);
	if (!op)
		op = list_pop(&p->local_head, &p->local_tail);
	return op ? op : list_pop(&p->del_head, &p->del_tail);
}

struct partop *sluice_partition_wait_pop_visible(struct sluice_partition *p, bool failed)
{
	if (!p->wait_head || (!failed && p->wait_head->last_offset >= p->high_watermark))
		return NULL;
	return list_pop(&p->wait_head, &p->wait_tail);
}

struct partop *sluice_partition_wait_pop_written(struct sluice_partition *p, bool failed)
{
	if (!p->local_head || (!failed && p->local_head->last_offset >= local_end(p)))
		return NULL;
	return list_pop(&p->local_head, &p->local_tail);
}

void sluice_partition_wait_remove(struct sluice_partition *p, struct partop *op)
{
	list_unlink(&p->wait_head, &p->wait_tail, op);
}

bool sluice_partition_waiting(const struct sluice_partition *p)
{
	return p->wait_head || p->local_head;
}

/* ---- DeleteRecords waiting for the low watermark ---------------------------- */

/* The log start of self (without a log, in unit tests, the one noted for it). */
static int64_t local_start(const struct sluice_partition *p)
{
	if (p->log)
		return sluice_plog_log_start(p->log);
	for (uint8_t i = 0; i < p->replica_n; i++)
		if (p->replicas[i].id == p->self_id)
			return p->replicas[i].log_start > 0 ? p->replicas[i].log_start : 0;
	return 0;
}

int64_t sluice_partition_low_watermark(const struct sluice_partition *p, bool (*alive)(void *arg, int32_t id),
				       void *arg)
{
	assert(p->is_leader);
	int64_t low = local_start(p);
	for (uint8_t i = 0; i < p->replica_n; i++) {
		const struct sluice_replica *r = &p->replicas[i];
		if (r->id != p->self_id && r->log_start < low && alive(arg, r->id))
			low = r->log_start;
	}
	assert(low >= -1);
	return low;
}

void sluice_partition_delete_wait(struct sluice_partition *p, struct partop *op)
{
	assert(op->kind == PARTOP_DELETE_RECORDS && op->offset >= 0);
	list_append(&p->del_head, &p->del_tail, op);
}

struct partop *sluice_partition_delete_pop(struct sluice_partition *p, int64_t low_watermark, bool all)
{
	/* Few wait at once (one per DeleteRecords in flight on the partition). */
	for (struct partop *op = p->del_head; op; op = op->next)
		if (all || op->offset <= low_watermark) {
			list_unlink(&p->del_head, &p->del_tail, op);
			return op;
		}
	return NULL;
}

void sluice_partition_delete_remove(struct sluice_partition *p, struct partop *op)
{
	list_unlink(&p->del_head, &p->del_tail, op);
}

void sluice_partition_watch(struct sluice_partition *p, int core)
{
	assert(core >= 0 && core < SLUICE_CORES_MAX);
	p->fetch_waiters[core / 64] |= 1ull << (core % 64);
}

bool sluice_partition_watched(const struct sluice_partition *p, int core)
{
	assert(core >= 0 && core < SLUICE_CORES_MAX);
	return p->fetch_waiters[core / 64] & (1ull << (core % 64));
}

int sluice_partition_take_watcher(struct sluice_partition *p, int from)
{
	assert(from >= 0);
	for (int w = from / 64; w < SLUICE_PARTITION_WAITER_WORDS; w++) {
		uint64_t bits = p->fetch_waiters[w];
		if (w == from / 64)
			bits &= ~0ull << (from % 64);
		if (!bits)
			continue;
		int core = w * 64 + __builtin_ctzll(bits);
		if (core >= SLUICE_CORES_MAX)
			return -1;
		p->fetch_waiters[w] &= ~(1ull << (core % 64));
		return core;
	}
	return -1;
}
