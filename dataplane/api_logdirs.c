/* DescribeLogDirs (35): each broker describes its own data directories
 * (log.dirs) and, in each, the partitions it holds there: their segments'
 * bytes and offset lag, as Kafka's ReplicaManager.describeLogDirs does.
 * kafka-log-dirs.sh and Kafka 4.4's kafka-reassign-partitions.sh use it
 * (the Admin client's describeLogDirs and describeReplicaLogDirs).
 *
 * Which partitions: those the request names (Topics null: every partition
 * the metadata places on this broker), then only those a storage core
 * holds an open log of (PARTOP_LOG_DIR: nothing is opened or created for a
 * describe); topics and partitions unknown here are left out, as Kafka
 * leaves them out. Sizes and lags come from the storage cores' memory, the
 * volumes' sizes from statvfs on a storage core (PARTOP_DIR_SPACE), so the
 * network core touches no filesystem.
 *
 * A broker may hold a million partitions: the partitions are described in
 * rounds of at most LD_OPS_PER_ROUND ops (one op array, reused), and the
 * results kept per directory in compact entries (24 bytes a partition) in
 * the order the answer lists them (topics in name order, partitions
 * ascending), so the answer is encoded once at the end without sorting.
 * What the answer may take is reserved against the connection's and the
 * broker's response budgets (r->resp_bytes_max) when the request starts.
 * No authorization: Sluice has no ACLs (the top-level ErrorCode is 0). */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Partition ops out at once for one request: about 400 KiB of ops, and a
 * million partitions described in a thousand rounds. The first round also
 * carries one op per data directory. */
#define LD_OPS_PER_ROUND 1024
_Static_assert(LD_OPS_PER_ROUND > SLUICE_LOG_DIRS_MAX, "the first round holds every directory's op and a partition's");
_Static_assert(LD_OPS_PER_ROUND <= SLUICE_REQ_PARTITIONS_MAX, "a round is no more ops than a request may name");
/* Smallest request entries, for capping counts by the bytes left: a topic
 * (name length, partitions count; a flexible one's tagged fields) and a
 * partition index. */
#define LD_TOPIC_BYTES_MIN 6
#define LD_TOPIC_BYTES_MIN_FLEX 3
#define LD_PARTITION_BYTES 4
/* Response bytes, for the budget: a partition (index, size, lag, future
 * flag, tagged fields), a topic beside its name, a directory beside its
 * path (at most PATH_MAX with the working directory before it). */
#define LD_RESP_PARTITION_BYTES 22
#define LD_RESP_TOPIC_BYTES 12
#define LD_RESP_DIR_BYTES (PATH_MAX + SLUICE_CONFIG_STRING_MAX + 32)

/* One partition described: its topic's index in the request's snapshot. */
struct ld_entry {
	uint32_t topic;
	int32_t partition;
	int64_t bytes, lag;
};

/* A data directory's part of the answer. */
struct ld_dir {
	struct ld_entry *e; /* in answer order */
	int32_t n, cap;
	int16_t error;      /* its PARTOP_DIR_SPACE's */
	int64_t total_bytes, usable_bytes;
};

/* The request (r->api, from the heap). */
struct ld_state {
	bool all;           /* Topics null: every partition placed here */
	uint64_t *want;     /* named partitions: topic index << 32 | partition, sorted, unique */
	int32_t want_n;
	int32_t want_at;    /* cursor in want */
	uint32_t topic_at;  /* all: cursor over the snapshot's topics */
	int32_t part_at;    /* ... and that topic's partitions */
	int32_t ops_cap;    /* ops in r->ops, reused each round */
	int32_t parts;      /* partitions to describe: no directory keeps more */
	bool space_asked;
	bool failed;        /* out of memory keeping results, or an op refused */
	/* Kafka lists each distinct directory once: canon[d] is the first
	 * index naming the same directory as log.dirs[d]. */
	int8_t canon[SLUICE_LOG_DIRS_MAX];
	struct ld_dir dir[SLUICE_LOG_DIRS_MAX];
};
_Static_assert(SLUICE_LOG_DIRS_MAX <= INT8_MAX, "canon holds a directory index");

/* ---- which partitions ------------------------------------------------------------ */

/* Whether the metadata places a replica of partition p of t on this
 * broker: its replicas (a reassignment's adding ones included) name it; a
 * single node's metadata names it for every partition. A backend that says
 * nothing of the partition leaves the storage core to say. */
static bool ld_placed_here(const struct req *r, const struct sluice_topic *t, int32_t p)
{
	const struct sluice_partition_state *st = sluice_topic_partition(t, p);
	if (!st || st->replica_n == 0)
		return true;
	assert(st->replica_n > 0 && st->replica_n <= SLUICE_REPLICAS_MAX);
	for (int32_t i = 0; i < st->replica_n; i++)
		if (st->replicas[i] == r->nc->b->cfg.node_id)
			return true;
	return false;
}

/* The index of the topic named name in s (sorted by name), or -1. */
static int64_t ld_topic_index(const struct sluice_meta_snapshot *s, struct kstr name)
{
	size_t lo = 0, hi = s->topic_n, len = (size_t)name.len;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const char *tn = s->topics[mid]->name;
		size_t tl = strlen(tn);
		int c = memcmp(name.ptr, tn, len < tl ? len : tl);
		if (c == 0)
			c = (len > tl) - (len < tl);
		if (c == 0)
			return (int64_t)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

static int ld_key_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* Counting pass over a copy of the reader: the partition indexes the
 * Topics array names (-1: null, all), or -2 when it is malformed or names
 * more than a request may (the reader's error latched). */
static int64_t ld_count(struct req *r, struct krd *scan)
{
	bool flex = r->flexible;
	int32_t n = krd_array(scan, flex, flex ? LD_TOPIC_BYTES_MIN_FLEX : LD_TOPIC_BYTES_MIN);
	int64_t total = n < 0 ? -1 : 0;
	for (int32_t t = 0; t < n && !scan->err; t++) {
		if (!krd_string(scan, flex).ptr)
			krd_fail(scan, "null Topic");
		int32_t np = krd_array(scan, flex, LD_PARTITION_BYTES);
		if (np < 0)
			krd_fail(scan, "null Partitions");
		krd_skip(scan, (size_t)(np > 0 ? np : 0) * LD_PARTITION_BYTES);
		if (flex)
			krd_tags_skip(scan);
		total += np > 0 ? np : 0;
		if (total > SLUICE_REQ_PARTITIONS_MAX)
			krd_fail(scan, "more partitions than a request may name");
	}
	if (flex)
		krd_tags_skip(scan);
	return scan->err ? -2 : total;
}

/* Filling pass over the bytes ld_count proved well-formed: the named
 * partitions this broker may hold, as sorted unique keys. False when out
 * of memory. */
static bool ld_decode_named(struct req *r, struct krd *rd, struct ld_state *ld, int64_t total)
{
	bool flex = r->flexible;
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	assert(total >= 0 && total <= SLUICE_REQ_PARTITIONS_MAX);
	ld->want = total > 0 ? malloc((size_t)total * sizeof *ld->want) : NULL;
	if (total > 0 && !ld->want)
		return false;
	int32_t n = krd_array(rd, flex, flex ? LD_TOPIC_BYTES_MIN_FLEX : LD_TOPIC_BYTES_MIN), k = 0;
	for (int32_t t = 0; t < n; t++) {
		struct kstr name = krd_string(rd, flex);
		int64_t ti = ld_topic_index(s, name);
		int32_t np = krd_array(rd, flex, LD_PARTITION_BYTES);
		for (int32_t i = 0; i < np; i++) {
			int32_t p = krd_i32(rd);
			if (ti < 0 || p < 0 || p >= s->topics[ti]->partitions ||
			    !ld_placed_here(r, s->topics[ti], p))
				continue; /* no log here: left out, as Kafka leaves it out */
			assert(k < total);
			ld->want[k++] = (uint64_t)ti << 32 | (uint32_t)p;
		}
		if (flex)
			krd_tags_skip(rd);
	}
	if (flex)
		krd_tags_skip(rd);
	assert(!rd->err);
	/* Kafka describes a set: each partition once, however often named. */
	if (k > 1)
		qsort(ld->want, (size_t)k, sizeof *ld->want, ld_key_cmp);
	int32_t u = 0;
	for (int32_t i = 0; i < k; i++)
		if (u == 0 || ld->want[i] != ld->want[u - 1])
			ld->want[u++] = ld->want[i];
	ld->want_n = u;
	return true;
}

/* The partitions to describe (named, or all placed here) and the most
 * bytes their answer may take. */
static int64_t ld_candidates(struct req *r, const struct ld_state *ld, int64_t *resp_bytes)
{
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	int64_t parts = 0, topic_bytes = 0;
	if (!ld->all) {
		for (int32_t i = 0; i < ld->want_n; i++)
			if (i == 0 || ld->want[i] >> 32 != ld->want[i - 1] >> 32)
				topic_bytes += (int64_t)strlen(s->topics[ld->want[i] >> 32]->name) + LD_RESP_TOPIC_BYTES;
		parts = ld->want_n;
	}
	for (uint32_t ti = 0; ld->all && ti < s->topic_n; ti++) {
		const struct sluice_topic *t = s->topics[ti];
		int64_t before = parts;
		for (int32_t p = 0; p < t->partitions; p++)
			parts += ld_placed_here(r, t, p);
		if (parts > before)
			topic_bytes += (int64_t)strlen(t->name) + LD_RESP_TOPIC_BYTES;
	}
	int32_t dirs = r->nc->b->cfg.log_dir_count;
	*resp_bytes = 64 + dirs * ((int64_t)LD_RESP_DIR_BYTES + topic_bytes) + parts * LD_RESP_PARTITION_BYTES;
	return parts;
}

/* ---- rounds ------------------------------------------------------------------------ */

static struct partop *ld_op(struct req *r, int32_t i, uint8_t kind)
{
	struct partop *op = &r->ops[i];
	memset(op, 0, sizeof *op);
	op->req = r;
	op->net_core = (uint8_t)r->nc->id;
	op->kind = kind;
	op->leader_epoch = -1;
	return op;
}

static void ld_partition_op(struct req *r, int32_t i, const struct sluice_topic *t, uint32_t ti, int32_t p)
{
	struct partop *op = ld_op(r, i, PARTOP_LOG_DIR);
	op->topic = t->name;
	op->tinfo = t;
	op->partition = p;
	op->tindex = (int32_t)ti;
	op->cfg = sluice_proto_config(r);
	memcpy(op->topic_id, t->id, 16);
}

/* The next round's ops from the cursor: the directories' first, then up to
 * ops_cap partitions. Returns how many. */
static int32_t ld_fill(struct req *r, struct ld_state *ld)
{
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	const struct broker *b = r->nc->b;
	int32_t n = 0;
	if (!ld->space_asked) {
		ld->space_asked = true;
		for (int d = 0; d < b->cfg.log_dir_count; d++) {
			if (ld->canon[d] != d)
				continue;
			struct partop *op = ld_op(r, n++, PARTOP_DIR_SPACE);
			op->log_dir = (int16_t)d;
			op->core_plus1 = (int16_t)(d % b->store_n + 1);
		}
	}
	while (!ld->all && n < ld->ops_cap && ld->want_at < ld->want_n) {
		uint64_t key = ld->want[ld->want_at++];
		uint32_t ti = (uint32_t)(key >> 32);
		ld_partition_op(r, n++, s->topics[ti], ti, (int32_t)(uint32_t)key);
	}
	while (ld->all && n < ld->ops_cap && ld->topic_at < s->topic_n) {
		const struct sluice_topic *t = s->topics[ld->topic_at];
		if (ld->part_at >= t->partitions) {
			ld->topic_at++;
			ld->part_at = 0;
			continue;
		}
		int32_t p = ld->part_at++;
		if (ld_placed_here(r, t, p))
			ld_partition_op(r, n++, t, ld->topic_at, p);
	}
	assert(n <= ld->ops_cap);
	return n;
}

static void ld_keep(struct ld_state *ld, const struct partop *op)
{
	struct ld_dir *d = &ld->dir[ld->canon[op->log_dir]];
	if (d->n == d->cap) {
		int32_t cap = d->cap > ld->parts / 2 ? ld->parts : d->cap ? 2 * d->cap : 64;
		cap = cap < ld->parts ? cap : ld->parts;
		struct ld_entry *e = cap > d->n ? realloc(d->e, (size_t)cap * sizeof *e) : NULL;
		if (!e) {
			ld->failed = true;
			return;
		}
		d->e = e;
		d->cap = cap;
	}
	d->e[d->n++] = (struct ld_entry){(uint32_t)op->tindex, op->partition, op->log_bytes, op->offset_lag};
	assert(d->n <= d->cap);
}

/* A round's answers into the directories' results. */
static void ld_collect(struct req *r, struct ld_state *ld)
{
	const struct broker *b = r->nc->b;
	for (int32_t i = 0; i < r->nops; i++) {
		const struct partop *op = &r->ops[i];
		assert(op->log_dir >= 0 && op->log_dir < b->cfg.log_dir_count);
		if (op->kind == PARTOP_DIR_SPACE && (op->error == KERR_NONE || op->error == KERR_KAFKA_STORAGE_ERROR)) {
			struct ld_dir *d = &ld->dir[op->log_dir];
			d->error = op->error;
			d->total_bytes = op->dir_total_bytes;
			d->usable_bytes = op->dir_usable_bytes;
		} else if (op->kind == PARTOP_LOG_DIR && op->error == KERR_NONE) {
			ld_keep(ld, op);
		} else if (op->kind != PARTOP_LOG_DIR || op->error != KERR_UNKNOWN_TOPIC_OR_PARTITION) {
			ld->failed = true; /* refused on its way (a full backlog): no partial answer */
		}
	}
}

/* ---- the answer -------------------------------------------------------------------- */

/* Kafka's Paths.get(dir).toAbsolutePath(): a relative directory under the
 * working directory, neither normalised nor resolved. */
static void ld_abs_path(const char *dir, char *out, size_t cap)
{
	assert(cap > 0);
	char cwd[PATH_MAX];
	if (dir[0] == '/' || !getcwd(cwd, sizeof cwd) ||
	    (size_t)snprintf(out, cap, "%s%s%s", cwd, cwd[strlen(cwd) - 1] == '/' ? "" : "/", dir) >= cap)
		snprintf(out, cap, "%s", dir);
}

static void ld_write_dir(struct req *r, const struct ld_state *ld, int dirx, uint32_t offline)
{
	const struct sluice_meta_snapshot *s = sluice_proto_snap(r);
	const struct ld_dir *d = &ld->dir[dirx];
	struct kwr *w = &r->out;
	bool flex = r->flexible;
	int16_t error = offline & (1u << dirx) ? KERR_KAFKA_STORAGE_ERROR : d->error;
	char path[LD_RESP_DIR_BYTES];
	ld_abs_path(r->nc->b->cfg.log_dir[dirx], path, sizeof path);
	kwr_i16(w, error);
	kwr_cstr(w, flex, path);
	int32_t n = error ? 0 : d->n, topics = 0;
	for (int32_t i = 0; i < n; i++)
		topics += i == 0 || d->e[i].topic != d->e[i - 1].topic;
	kwr_array(w, flex, topics);
	for (int32_t i = 0, end; i < n; i = end) {
		for (end = i + 1; end < n && d->e[end].topic == d->e[i].topic; end++)
			;
		assert(d->e[i].topic < s->topic_n);
		kwr_cstr(w, flex, s->topics[d->e[i].topic]->name);
		kwr_array(w, flex, end - i);
		for (int32_t k = i; k < end; k++) {
			assert(k == i || d->e[k].partition > d->e[k - 1].partition);
			kwr_i32(w, d->e[k].partition);
			kwr_i64(w, d->e[k].bytes);     /* PartitionSize */
			kwr_i64(w, d->e[k].lag);       /* OffsetLag */
			kwr_bool(w, false);            /* IsFutureKey: no moves between directories */
			if (flex)
				kwr_tags_empty(w);
		}
		if (flex)
			kwr_tags_empty(w);
	}
	if (r->api_version >= 4) {
		kwr_i64(w, error ? -1 : d->total_bytes);  /* TotalBytes (-1: the schema's default) */
		kwr_i64(w, error ? -1 : d->usable_bytes); /* UsableBytes */
	}
	if (flex)
		kwr_tags_empty(w);
}

static void ld_answer(struct req *r, const struct ld_state *ld)
{
	const struct broker *b = r->nc->b;
	if (ld->failed) {
		SLOG_WARN("proto", "%s: DescribeLogDirs v%d: out of memory or refused on its way; closing the connection",
			  r->conn->peer, r->api_version);
		r->done = true;
		r->no_response = true;
		sluice_conn_close(r->conn);
		return;
	}
	uint32_t offline = __atomic_load_n(&b->offline_dirs, __ATOMIC_ACQUIRE);
	bool flex = r->flexible;
	sluice_proto_resp_begin(r);
	struct kwr *w = &r->out;
	kwr_i32(w, 0); /* ThrottleTimeMs */
	if (r->api_version >= 3)
		kwr_i16(w, KERR_NONE);
	int32_t dirs = 0;
	for (int d = 0; d < b->cfg.log_dir_count; d++)
		dirs += ld->canon[d] == d;
	kwr_array(w, flex, dirs);
	for (int d = 0; d < b->cfg.log_dir_count; d++)
		if (ld->canon[d] == d)
			ld_write_dir(r, ld, d, offline);
	if (flex)
		kwr_tags_empty(w);
	sluice_proto_resp_end(r);
}

/* What the state holds beyond itself (r->api is freed with the request). */
static void ld_state_free(struct ld_state *ld)
{
	free(ld->want);
	ld->want = NULL;
	for (int d = 0; d < SLUICE_LOG_DIRS_MAX; d++) {
		free(ld->dir[d].e);
		ld->dir[d].e = NULL;
	}
}

/* Lend the next round to the storage cores, or answer when none is left. */
static void ld_next(struct req *r)
{
	struct ld_state *ld = r->api;
	assert(r->pending == 0 && !r->done);
	int32_t n = ld->failed ? 0 : ld_fill(r, ld);
	if (n == 0) {
		ld_answer(r, ld);
		ld_state_free(ld);
		return;
	}
	r->nops = n;
	sluice_proto_dispatch(r);
}

void sluice_api_describe_log_dirs_finish(struct req *r)
{
	struct ld_state *ld = r->api;
	assert(ld && r->pending == 0);
	ld_collect(r, ld);
	ld_next(r);
}

bool sluice_api_describe_log_dirs_start(struct req *r, struct krd *rd)
{
	struct krd scan = *rd;
	int64_t named = ld_count(r, &scan);
	if (named == -2) {
		*rd = scan;
		return false;
	}
	struct ld_state *ld = sluice_proto_api_state(r, sizeof *ld);
	if (!ld)
		return false;
	const struct sluice_config *cfg = &r->nc->b->cfg;
	for (int d = 0; d < cfg->log_dir_count; d++) {
		ld->canon[d] = (int8_t)d;
		for (int e = 0; e < d && ld->canon[d] == d; e++)
			if (!strcmp(cfg->log_dir[e], cfg->log_dir[d]))
				ld->canon[d] = (int8_t)e;
	}
	ld->all = named == -1;
	if (ld->all)
		*rd = scan;
	else if (!ld_decode_named(r, rd, ld, named)) {
		ld_state_free(ld);
		return false;
	}
	int64_t resp_bytes;
	int64_t parts = ld_candidates(r, ld, &resp_bytes);
	assert(parts >= 0);
	ld->parts = (int32_t)(parts < INT32_MAX ? parts : INT32_MAX);
	r->resp_bytes_max = resp_bytes;
	int64_t cap = parts + cfg->log_dir_count;
	ld->ops_cap = (int32_t)(cap < LD_OPS_PER_ROUND ? cap : LD_OPS_PER_ROUND);
	if (!sluice_proto_ops_alloc(r, ld->ops_cap)) {
		ld_state_free(ld);
		return false;
	}
	ld_next(r);
	return true;
}
