/* Storage and group-coordinator test doubles, and a broker whose network
 * core runs over the in-memory transport (transport_test.c), for driving the
 * protocol layer (see proto_stubs.h). Shared by tests/unit/test_handlers.c,
 * test_netcore.c and tests/fuzz/fuzz_request.c. */
#include "proto_stubs.h"
#include "common/kafka/batch.h"
#include "control/meta.h"
#include "dataplane/group.h"
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct broker B;
static bool broker_open;
static bool meta_held; /* stub_meta_hold */

/* ---- broker ------------------------------------------------------------------- */

struct broker *stub_broker_open(const char *dir, const char *const *extra)
{
	char err[512] = "";
	memset(&B, 0, sizeof B);
	sluice_config_defaults(&B.cfg);
	const char *base[] = {
		"log.dirs", dir,
		"listeners", "PLAINTEXT://127.0.0.1:9092",
		"advertised.listeners", "PLAINTEXT://127.0.0.1:9092",
		NULL,
	};
	for (int pass = 0; pass < 2; pass++) {
		const char *const *kv = pass == 0 ? base : extra;
		for (; kv && kv[0]; kv += 2)
			if (sluice_config_set(&B.cfg, kv[0], kv[1], err, sizeof err) < 0) {
				fprintf(stderr, "stub broker: %s\n", err);
				return NULL;
			}
	}
	if (sluice_config_finish(&B.cfg, err, sizeof err) < 0) {
		fprintf(stderr, "stub broker: %s\n", err);
		return NULL;
	}
	B.net_n = 1;
	B.store_n = 1;
	B.net[0].id = 0;
	B.net[0].b = &B;
	B.store[0].id = 0;
	B.store[0].b = &B;
	B.clean_start = true;
	if (sluice_meta_local_open(&B.meta, dir, B.cfg.num_partitions, err, sizeof err) < 0) {
		fprintf(stderr, "stub broker: metadata: %s\n", err);
		return NULL;
	}
	sluice_meta_local_set_node(&B.meta, &B.cfg); /* as main.c does */
	if (sluice_netcore_init_with(&B.net[0], &sluice_transport_test) < 0) {
		fprintf(stderr, "stub broker: network core\n");
		return NULL;
	}
	broker_open = true;
	stub_store_reset();
	return &B;
}

static void stub_cluster_end(void);

void stub_broker_close(void)
{
	if (!broker_open)
		return;
	meta_held = false;
	stub_meta_wait(); /* no batch may complete into a core being freed */
	stub_cluster_end();
	sluice_meta_local_close(&B.meta);
	sluice_netcore_fini(&B.net[0]);
	stub_store_reset();
	broker_open = false;
}

struct netcore *stub_netcore(void) { return &B.net[0]; }

/* ---- a cluster as the snapshots describe it ------------------------------------------ */

struct cluster_override {
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	int32_t partition; /* -1: all */
	struct sluice_partition_state st;
};

static struct {
	bool on;
	const struct sluice_meta_ops *local_ops; /* the wrapped backend's */
	struct sluice_meta_ops ops;              /* its copy, with acquire, release and forward replaced */
	struct cluster_override ov[STUB_CLUSTER_OVERRIDES_MAX];
	int ov_n;
	struct sluice_meta_broker brokers[STUB_CLUSTER_BROKERS_MAX];
	uint32_t broker_n; /* 0: the local backend's */
	bool controller_set;
	int32_t controller;
	int16_t fwd_error;
	uint8_t fwd_resp[STUB_FORWARD_BYTES_MAX];
	size_t fwd_resp_len;
	uint8_t fwd_seen[STUB_FORWARD_BYTES_MAX];
	size_t fwd_seen_len;
	int16_t fwd_key, fwd_version;
	bool fwd_any;
	int snaps_out;
	const struct sluice_broker_config *bcfg; /* one reference */
} CL;

/* A snapshot of ours, on the list of those out, so that release can tell
 * it from one the local backend handed out before the wrap. */
struct cluster_snap {
	struct sluice_meta_snapshot s; /* first */
	struct cluster_snap *next;
};
static struct cluster_snap *cluster_snaps;

static const struct sluice_partition_state *cluster_override_of(const char *topic, int32_t p)
{
	const struct sluice_partition_state *found = NULL;
	for (int i = 0; i < CL.ov_n; i++) /* the last one set wins */
		if (!strcmp(CL.ov[i].topic, topic) && (CL.ov[i].partition == p || CL.ov[i].partition == -1))
			found = &CL.ov[i].st;
	return found;
}

/* A copy of t (configs included), its states per partition with the overrides. */
static struct sluice_topic *cluster_topic_copy(const struct sluice_topic *t)
{
	size_t bytes = offsetof(struct sluice_topic, configs) + (size_t)t->config_n * sizeof t->configs[0];
	struct sluice_topic *c = malloc(bytes);
	struct sluice_partition_state *st = calloc((size_t)(t->partitions > 0 ? t->partitions : 1), sizeof *st);
	if (!c || !st)
		abort(); /* test double */
	memcpy(c, t, bytes);
	for (int32_t p = 0; p < t->partitions; p++) {
		const struct sluice_partition_state *o = cluster_override_of(t->name, p), *l = sluice_topic_partition(t, p);
		st[p] = o ? *o : l ? *l : (struct sluice_partition_state){.leader = -1};
	}
	c->states = st;
	c->state_n = t->partitions;
	c->refs = 1;
	return c;
}

static struct sluice_meta_snapshot *cluster_acquire(void *self)
{
	struct sluice_meta_snapshot *l = CL.local_ops->acquire(self);
	struct cluster_snap *cs = calloc(1, sizeof *cs);
	if (!cs || !(cs->s.topics = calloc(l->topic_n + 1, sizeof *cs->s.topics)))
		abort();
	cs->next = cluster_snaps;
	cluster_snaps = cs;
	cs->s.version = l->version;
	cs->s.refs = 1;
	cs->s.topic_n = l->topic_n;
	for (uint32_t i = 0; i < l->topic_n; i++)
		cs->s.topics[i] = cluster_topic_copy(l->topics[i]);
	cs->s.broker_n = CL.broker_n ? CL.broker_n : l->broker_n;
	cs->s.brokers = CL.broker_n ? CL.brokers : l->brokers;
	cs->s.controller_id = CL.controller_set ? CL.controller : l->controller_id;
	cs->s.metadata_offset = l->metadata_offset;
	cs->s.broker_config = CL.bcfg;
	if (CL.bcfg)
		sluice_broker_config_ref(CL.bcfg);
	CL.local_ops->release(self, l);
	CL.snaps_out++;
	return &cs->s;
}

static void cluster_release(void *self, struct sluice_meta_snapshot *s)
{
	if (!s)
		return;
	struct cluster_snap **pp = &cluster_snaps;
	while (*pp && &(*pp)->s != s)
		pp = &(*pp)->next;
	if (!*pp) { /* acquired before the wrap */
		CL.local_ops->release(self, s);
		return;
	}
	struct cluster_snap *cs = *pp;
	if (--cs->s.refs > 0)
		return;
	*pp = cs->next;
	sluice_broker_config_unref(cs->s.broker_config);
	for (uint32_t i = 0; i < cs->s.topic_n; i++) {
		free((void *)cs->s.topics[i]->states);
		free(cs->s.topics[i]);
	}
	free(cs->s.topics);
	free(cs);
	CL.snaps_out--;
}

static int cluster_forward(void *self, int16_t api_key, int16_t api_version, const uint8_t *body, size_t len,
			   void (*done)(void *arg, int16_t error, const uint8_t *resp, size_t resp_len), void *arg)
{
	(void)self;
	CL.fwd_any = true;
	CL.fwd_key = api_key;
	CL.fwd_version = api_version;
	CL.fwd_seen_len = len < sizeof CL.fwd_seen ? len : sizeof CL.fwd_seen;
	memcpy(CL.fwd_seen, body, CL.fwd_seen_len);
	done(arg, CL.fwd_error, CL.fwd_error ? NULL : CL.fwd_resp, CL.fwd_error ? 0 : CL.fwd_resp_len);
	return 0;
}

void stub_cluster_begin(void)
{
	if (CL.on)
		return;
	memset(&CL, 0, sizeof CL);
	CL.on = true;
	CL.local_ops = B.meta.ops;
	CL.ops = *B.meta.ops;
	CL.ops.acquire = cluster_acquire;
	CL.ops.release = cluster_release;
	CL.ops.is_current = NULL; /* its snapshots are copies: requests take their own */
	B.meta.ops = &CL.ops;
}

void stub_cluster_partition(const char *topic, int32_t partition, const struct sluice_partition_state *st)
{
	if (!CL.on || CL.ov_n == STUB_CLUSTER_OVERRIDES_MAX)
		abort();
	struct cluster_override *o = &CL.ov[CL.ov_n++];
	snprintf(o->topic, sizeof o->topic, "%s", topic);
	o->partition = partition;
	o->st = *st;
}

void stub_cluster_brokers(const struct sluice_meta_broker *b, uint32_t n)
{
	if (!CL.on || n > STUB_CLUSTER_BROKERS_MAX)
		abort();
	memcpy(CL.brokers, b, n * sizeof *b);
	CL.broker_n = n;
}

void stub_cluster_controller(int32_t id)
{
	CL.controller_set = true;
	CL.controller = id;
}

void stub_cluster_forward(int16_t error, const uint8_t *resp, size_t len)
{
	if (!CL.on || len > sizeof CL.fwd_resp)
		abort();
	CL.fwd_error = error;
	if (len)
		memcpy(CL.fwd_resp, resp, len);
	CL.fwd_resp_len = len;
	CL.ops.forward = cluster_forward;
}

void stub_cluster_broker_config(struct sluice_broker_config *bc)
{
	if (!CL.on)
		abort();
	sluice_broker_config_unref(CL.bcfg);
	CL.bcfg = bc;
}

const uint8_t *stub_cluster_forwarded(size_t *len, int16_t *api_key, int16_t *api_version)
{
	*len = CL.fwd_seen_len;
	*api_key = CL.fwd_key;
	*api_version = CL.fwd_version;
	return CL.fwd_any ? CL.fwd_seen : NULL;
}

int stub_cluster_snapshots_out(void) { return CL.snaps_out; }

/* Back to the local backend; every snapshot of ours must be back. */
static void stub_cluster_end(void)
{
	if (!CL.on)
		return;
	if (CL.snaps_out != 0)
		fprintf(stderr, "stub cluster: %d snapshot(s) never released\n", CL.snaps_out);
	sluice_broker_config_unref(CL.bcfg);
	CL.bcfg = NULL;
	B.meta.ops = CL.local_ops;
	CL.on = false;
}

/* ---- connection and transport ---------------------------------------------------- */

/* Connections go through the real network core over the in-memory backend
 * (transport_test.c); the core's close is held until stub_conn_free, so a
 * test may still look at a connection it saw closed. */
struct conn *stub_conn_new(void)
{
	struct tt_conn *t = tt_connect(&B.net[0]);
	if (!t)
		return NULL;
	tt_hold_closed(t, true);
	return tt_core_conn(t);
}

void stub_conn_free(struct conn *c)
{
	if (!c)
		return;
	if (!meta_held)
		stub_meta_wait();
	/* Parked fetches answer now (expired). */
	for (int guard = 0; stub_parked() && guard < 1000; guard++)
		stub_retry_parked(true);
	tt_free(&B.net[0], c->tconn);
}

bool stub_frame(struct conn *c, const void *bytes, size_t len)
{
	if (c->closing)
		return false;
	uint8_t size[4];
	kput32(size, (uint32_t)len);
	tt_feed(c->tconn, size, sizeof size);
	tt_feed(c->tconn, bytes, len);
	tt_pump(&B.net[0], STUB_PUMP_TURNS_MAX);
	if (!meta_held)
		stub_meta_wait();
	return !c->refused;
}

/* ---- metadata completions ----------------------------------------------------------- */

/* The metadata writer is the real one (its own thread): a request whose
 * batch is out is answered once the writer posts it back to the core and
 * the core runs its posts. Waiting is what a sleeping core does: the
 * sleeping flag, a last look, then the eventfd the post writes. */
/* Completions the test holds back (stub_meta_hold): taken off the core
 * runtime's post stack before its turn runs them, newest first, and posted
 * again in their order when released. */
static struct sluice_rt_post *meta_held_posts;

static void meta_hold_take(struct netcore *nc)
{
	struct sluice_rt_post *s = __atomic_exchange_n(&nc->rt.posts, NULL, __ATOMIC_SEQ_CST);
	if (!s)
		return;
	struct sluice_rt_post *t = s;
	while (t->next)
		t = t->next;
	t->next = meta_held_posts;
	meta_held_posts = s;
}

bool stub_meta_posted(void)
{
	return meta_held_posts || sluice_netcore_posts_waiting(&B.net[0]);
}

void stub_meta_hold(bool hold)
{
	meta_held = hold;
	if (hold)
		return;
	struct sluice_rt_post *fifo = NULL;
	while (meta_held_posts) {
		struct sluice_rt_post *p = meta_held_posts;
		meta_held_posts = p->next;
		p->next = fifo;
		fifo = p;
	}
	while (fifo) {
		struct sluice_rt_post *p = fifo;
		fifo = p->next;
		sluice_rt_post(&B.net[0].rt, p);
	}
}

int stub_meta_out(void)
{
	const struct proto_state *ps = B.net[0].state;
	return ps ? ps->meta_out : 0;
}

void stub_meta_wait(void)
{
	struct netcore *nc = &B.net[0];
	for (int guard = 0; stub_meta_out() > 0 && guard < STUB_META_WAITS_MAX; guard++) {
		__atomic_store_n(&nc->rt.sleeping, 1, __ATOMIC_SEQ_CST);
		if (!sluice_netcore_posts_waiting(nc)) {
			struct pollfd pfd = {.fd = nc->rt.efd, .events = POLLIN};
			if (poll(&pfd, 1, STUB_META_WAIT_MS) > 0) {
				uint64_t v;
				ssize_t n = read(nc->rt.efd, &v, sizeof v);
				(void)n;
			}
		}
		__atomic_store_n(&nc->rt.sleeping, 0, __ATOMIC_SEQ_CST);
		tt_pump(nc, STUB_PUMP_TURNS_MAX);
	}
}


bool stub_take_response(struct conn *c, uint8_t **buf, size_t *len)
{
	size_t have;
	const uint8_t *sent = tt_sent(c->tconn, &have);
	if (have < 4 || have - 4 < kbe32(sent))
		return false;
	*len = (size_t)kbe32(sent) + 4;
	*buf = malloc(*len);
	if (!*buf)
		return false;
	memcpy(*buf, sent, *len);
	tt_sent_consume(c->tconn, *len);
	return true;
}

int stub_queued(const struct conn *c)
{
	int n = 0;
	for (const struct req *r = c->head; r; r = r->next)
		n++;
	return n;
}

/* ---- fake storage -------------------------------------------------------------------- */

struct fpart {
	bool used;
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	int32_t partition;
	int64_t log_start, hw;
	uint8_t *data; /* stored batches, offsets assigned */
	size_t len, cap;
	int32_t ep[STUB_EPOCHS_MAX]; /* stub_store_epochs */
	int64_t ep_start[STUB_EPOCHS_MAX];
	int ep_n;
	bool ep_set;
};

/* Ops wait here until stub_drain, as they would sit in a storage core's ring:
 * completing them inside sluice_net_submit would run a request's finish()
 * in the middle of its own dispatch loop, which no real transport does. */
static struct partop **queue;
static size_t queue_head, queue_len, queue_cap;

static struct fpart parts[STUB_PARTITIONS_MAX];
int64_t stub_lag;
static bool store_held; /* stub_store_hold */
static int64_t ops_seen;

/* READs by reference (stub_store_pin_reads). */
struct stub_pin_slot {
	struct sluice_read_pins pins; /* first: the release callback gets &pins.pin */
	uint8_t *buf;                 /* the records, kept (scribbled) until the slot is reused */
	bool lent;
};
static struct stub_pin_slot pin_slots[STUB_PINS_MAX];
static size_t pin_piece; /* 0: reads are copied */
struct stub_pin_stats stub_pins;

void stub_store_pin_reads(size_t piece_bytes) { pin_piece = piece_bytes; }

int64_t stub_pins_out(void) { return stub_pins.lent - stub_pins.released; }

static void stub_pin_release(struct sluice_pin *pin)
{
	struct stub_pin_slot *s = (struct stub_pin_slot *)pin;
	if (!s->lent) {
		stub_pins.double_released++;
		return;
	}
	s->lent = false;
	stub_pins.released++;
	/* As a storage core reusing the slot would: nothing of it may be read. */
	memset(s->buf, 0xdd, (size_t)s->pins.bytes);
	memset(s->pins.range, 0, sizeof s->pins.range);
	s->pins.n = 0;
	s->pins.bytes = -1;
}

/* Answer a READ of bytes [from, from + n) of p by reference; false when
 * every slot is lent (the caller copies). */
static bool pin_read(const struct fpart *p, struct partop *op, size_t from, size_t n)
{
	struct stub_pin_slot *s = NULL;
	for (int i = 0; i < STUB_PINS_MAX && !s; i++)
		if (!pin_slots[i].lent)
			s = &pin_slots[i];
	size_t ranges = (n + pin_piece - 1) / pin_piece;
	if (!s || ranges > SLUICE_READ_PINS_RANGES_MAX)
		return false;
	free(s->buf);
	s->buf = malloc(n);
	if (!s->buf)
		return false;
	memcpy(s->buf, p->data + from, n);
	s->pins.n = 0;
	for (size_t off = 0; off < n; off += pin_piece)
		s->pins.range[s->pins.n++] = (struct sluice_send_range){s->buf + off, n - off < pin_piece ? n - off : pin_piece,
									&s->pins.pin};
	s->pins.bytes = (int32_t)n;
	s->pins.pin.release = stub_pin_release;
	s->pins.pin.holds = 0;
	s->pins.nc = &B.net[0];
	s->pins.store_core = 0;
	s->lent = true;
	stub_pins.lent++;
	op->pins = &s->pins;
	op->rlen = (int32_t)n;
	return true;
}

void stub_store_reset(void)
{
	store_held = false;
	pin_piece = 0;
	for (int i = 0; i < STUB_PINS_MAX; i++) {
		free(pin_slots[i].buf);
		pin_slots[i].buf = NULL;
		pin_slots[i].lent = false;
	}
	memset(&stub_pins, 0, sizeof stub_pins);
	free(queue);
	queue = NULL;
	queue_head = queue_len = queue_cap = 0;
	for (int i = 0; i < STUB_PARTITIONS_MAX; i++)
		free(parts[i].data);
	memset(parts, 0, sizeof parts);
	ops_seen = 0;
	stub_lag = 0;
}

int64_t stub_store_ops(void) { return ops_seen; }

static struct fpart *part_find(const char *topic, int32_t partition, bool create)
{
	struct fpart *free_slot = NULL;
	for (int i = 0; i < STUB_PARTITIONS_MAX; i++) {
		if (!parts[i].used) {
			if (!free_slot)
				free_slot = &parts[i];
			continue;
		}
		if (parts[i].partition == partition && strcmp(parts[i].topic, topic) == 0)
			return &parts[i];
	}
	if (!create || !free_slot)
		return NULL;
	memset(free_slot, 0, sizeof *free_slot);
	free_slot->used = true;
	snprintf(free_slot->topic, sizeof free_slot->topic, "%s", topic);
	free_slot->partition = partition;
	return free_slot;
}

void stub_store_epochs(const char *topic, int32_t partition, const int32_t *epochs, const int64_t *starts, int n)
{
	struct fpart *p = part_find(topic, partition, true);
	if (!p || n < 0 || n > STUB_EPOCHS_MAX)
		abort(); /* test double: a test's mistake */
	memcpy(p->ep, epochs, (size_t)n * sizeof *epochs);
	memcpy(p->ep_start, starts, (size_t)n * sizeof *starts);
	p->ep_n = n;
	p->ep_set = true;
}

/* OffsetForLeaderEpoch as Kafka's LeaderEpochFileCache.endOffsetFor
 * answers it, the log end being the high watermark here. */
static void fake_epoch_end(const struct fpart *p, struct partop *op)
{
	int32_t def_ep = 0;
	int64_t def_start = 0;
	const int32_t *ep = p->ep_set ? p->ep : &def_ep;
	const int64_t *start = p->ep_set ? p->ep_start : &def_start;
	int n = p->ep_set ? p->ep_n : p->hw > 0;
	int64_t want = op->offset;
	op->base_offset = op->last_offset = -1;
	if (want < 0 || n == 0)
		return;
	if (ep[n - 1] == want) {
		op->base_offset = p->hw;
		op->last_offset = want;
		return;
	}
	int higher = 0;
	while (higher < n && ep[higher] <= want)
		higher++;
	if (higher == n)
		return;
	op->base_offset = start[higher];
	op->last_offset = higher == 0 ? want : ep[higher - 1];
}

int64_t stub_store_hw(const char *topic, int32_t partition)
{
	struct fpart *p = part_find(topic, partition, false);
	return p ? p->hw : -1;
}

int64_t stub_store_log_start(const char *topic, int32_t partition)
{
	struct fpart *p = part_find(topic, partition, false);
	return p ? p->log_start : -1;
}

/* Header fields of the stored batch at pos. */
static void stored_batch(const struct fpart *p, size_t pos, int64_t *base, int64_t *last, int64_t *max_ts,
			 size_t *total)
{
	struct sluice_batch b;
	(void)sluice_batch_parse(p->data + pos, p->len - pos, &b);
	*base = b.base_offset;
	*last = b.base_offset + b.last_offset_delta;
	*max_ts = b.max_timestamp;
	*total = (size_t)sluice_batch_total_bytes(&b);
}

static void fake_append(struct fpart *p, struct partop *op)
{
	struct sluice_batch b;
	if (sluice_batch_parse(op->data, op->len, &b) != SLUICE_BATCH_OK ||
	    p->len + op->len > STUB_PARTITION_BYTES_MAX) {
		op->error = 56; /* KAFKA_STORAGE_ERROR */
		return;
	}
	if (p->len + op->len > p->cap) {
		size_t cap = p->cap ? p->cap : 4096;
		while (cap < p->len + op->len)
			cap *= 2;
		uint8_t *n = realloc(p->data, cap);
		if (!n) {
			op->error = 56;
			return;
		}
		p->data = n;
		p->cap = cap;
	}
	memcpy(p->data + p->len, op->data, op->len);
	sluice_batch_set_base_offset(p->data + p->len, p->hw, 0);
	p->len += op->len;
	op->base_offset = p->hw;
	op->last_offset = p->hw + b.last_offset_delta;
	p->hw = op->last_offset + 1;
}

static void fake_read(struct fpart *p, struct partop *op)
{
	if (op->offset < p->log_start || op->offset > p->hw) {
		op->error = 1; /* OFFSET_OUT_OF_RANGE */
		return;
	}
	size_t pos = 0, start = SIZE_MAX, end = 0;
	while (pos < p->len) {
		int64_t base, last, max_ts;
		size_t total;
		stored_batch(p, pos, &base, &last, &max_ts, &total);
		if (start == SIZE_MAX && last >= op->offset)
			start = pos;
		if (start != SIZE_MAX) {
			bool first = pos == start;
			if (pos + total - start > (size_t)(op->max_bytes > 0 ? op->max_bytes : 0) && !(first && op->min_one))
				break;
			end = pos + total;
		}
		pos += total;
	}
	if (start == SIZE_MAX || end <= start)
		return;
	if (pin_piece && pin_read(p, op, start, end - start))
		return;
	op->rdata = malloc(end - start);
	if (!op->rdata) {
		op->error = 56;
		return;
	}
	memcpy(op->rdata, p->data + start, end - start);
	op->rlen = (int32_t)(end - start);
}

static void fake_list_offsets(struct fpart *p, struct partop *op)
{
	int64_t ts = op->offset;
	op->timestamp = -1;
	if (ts == -1) {
		op->base_offset = p->hw;
		return;
	}
	if (ts == -2) {
		op->base_offset = p->log_start;
		return;
	}
	op->base_offset = -1;
	if (ts < 0)
		return;
	for (size_t pos = 0; pos < p->len;) {
		int64_t base, last, max_ts;
		size_t total;
		stored_batch(p, pos, &base, &last, &max_ts, &total);
		if (max_ts >= ts && last >= p->log_start) {
			op->base_offset = base > p->log_start ? base : p->log_start;
			op->timestamp = max_ts;
			return;
		}
		pos += total;
	}
}

void sluice_net_submit(struct netcore *nc, struct partop *op)
{
	(void)nc;
	if (queue_len == queue_cap) {
		size_t cap = queue_cap ? queue_cap * 2 : 256;
		struct partop **n = realloc(queue, cap * sizeof *n);
		if (!n)
			abort(); /* test double: no way to report it */
		queue = n;
		queue_cap = cap;
	}
	queue[queue_len++] = op;
}

struct stub_read_seen stub_read;

/* A READ the network core gave replicas in its consumer's rack: the first. */
static bool fake_read_elsewhere(struct partop *op)
{
	stub_read.follower_read = op->follower_read;
	stub_read.rack_replicas = op->rack_replicas;
	stub_read.reads++;
	op->preferred_read_replica = -1;
	const struct sluice_partition_state *st = sluice_topic_partition(op->tinfo, op->partition);
	for (int32_t i = 0; st && i < st->replica_n; i++)
		if (op->rack_replicas & (1u << i)) {
			op->preferred_read_replica = st->replicas[i];
			return true;
		}
	return false;
}

static void fake_storage(struct netcore *nc, struct partop *op)
{
	ops_seen++;
	op->error = 0;
	switch (op->kind) {
	case PARTOP_DELETE:
		for (int i = 0; i < STUB_PARTITIONS_MAX; i++)
			if (parts[i].used && strcmp(parts[i].topic, op->topic) == 0) {
				free(parts[i].data);
				memset(&parts[i], 0, sizeof parts[i]);
			}
		break;
	case PARTOP_GROUP:
		break; /* no coordinator here: gout stays empty */
	case PARTOP_LOG_DIR: {
		/* as a storage core: only partitions holding a log (here: ever
		 * touched), in the one directory, their stored bytes, no lag */
		const struct fpart *p = part_find(op->topic, op->partition, false);
		if (!p) {
			op->error = 3;
			break;
		}
		op->log_dir = 0;
		op->log_bytes = (int64_t)p->len;
		op->offset_lag = stub_lag;
		break;
	}
	case PARTOP_DIR_SPACE:
		op->dir_total_bytes = STUB_DIR_TOTAL_BYTES;
		op->dir_usable_bytes = STUB_DIR_USABLE_BYTES;
		break;
	case PARTOP_APPEND:
	case PARTOP_READ:
	case PARTOP_LIST_OFFSETS:
	case PARTOP_EPOCH_END:
	case PARTOP_DELETE_RECORDS: {
		struct fpart *p = part_find(op->topic, op->partition, true);
		if (!p) {
			op->error = 56;
			break;
		}
		if (op->kind == PARTOP_APPEND)
			fake_append(p, op);
		else if (op->kind == PARTOP_READ && !fake_read_elsewhere(op))
			fake_read(p, op);
		else if (op->kind == PARTOP_LIST_OFFSETS)
			fake_list_offsets(p, op);
		else if (op->kind == PARTOP_EPOCH_END)
			fake_epoch_end(p, op);
		else {
			int64_t to = op->offset == -1 ? p->hw : op->offset;
			if (to > p->hw || to < 0)
				op->error = 1;
			else if (to > p->log_start)
				p->log_start = to;
		}
		op->high_watermark = p->hw;
		op->log_start = p->log_start;
		break;
	}
	default:
		op->error = -1;
		break;
	}
	sluice_proto_on_partop(nc, op);
}

void stub_drain(void)
{
	while (queue_head < queue_len) {
		struct partop *op = queue[queue_head++];
		fake_storage(&B.net[0], op);
	}
	queue_head = queue_len = 0;
}

/* The network core's side of the storage rings (dataplane/net_rings.c),
 * replaced: where ops go (sluice_net_submit, above: into the queue rather
 * than through the core runtime's send) and where answers come from (the
 * runtime's drain and pending hooks, below). The rest of the loop is the
 * real one: sluice_netcore_turn is a turn of the core runtime. */
void stub_store_hold(bool hold) { store_held = hold; }

bool sluice_netcore_drain_replies(struct netcore *nc)
{
	bool any = false;
	if (meta_held)
		meta_hold_take(nc); /* before the turn runs the runtime's posts */
	if (store_held)
		return any;
	any |= queue_head < queue_len;
	stub_drain();
	return any;
}

bool sluice_netcore_replies_waiting(struct netcore *nc)
{
	return (!meta_held && sluice_netcore_posts_waiting(nc)) || (!store_held && queue_head < queue_len);
}

void stub_retry_parked(bool expire)
{
	sluice_proto_retry_parked(&B.net[0], expire ? INT64_MAX : sluice_now_ms(), true);
	tt_pump(&B.net[0], STUB_PUMP_TURNS_MAX);
}

int stub_parked(void)
{
	const struct proto_state *ps = B.net[0].state;
	return ps ? ps->parked_n : 0;
}

/* ---- group coordinator placement ------------------------------------------------------- */

int32_t sluice_group_partition(const char *group, size_t len, int32_t partitions)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)group[i]) * 16777619u;
	return partitions > 0 ? (int32_t)(h % (uint32_t)partitions) : 0;
}

/* Data directories belong to storage_core.c; the stub broker has no offline
 * directory, so the protocol layer never needs a real answer. */
int sluice_partition_dir(struct broker *b, const char *topic, int32_t partition, bool create, char *out, size_t len)
{
	(void)b; (void)topic; (void)partition; (void)create;
	if (len)
		out[0] = '\0';
	return -1;
}
