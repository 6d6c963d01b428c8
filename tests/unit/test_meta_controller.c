/* The broker's controller-client metadata backend (control/meta_controller.c)
 * against fake controllers: threads in this test listening on 127.0.0.1
 * (ephemeral ports) that speak just enough of the controller's protocol
 * (BrokerRegistration, BrokerHeartbeat, Fetch of __cluster_metadata served
 * from a real metadata log with sluice_mlog_read, FetchSnapshot from
 * sluice_image_encode, CreateTopics with the tag-1000 extensions,
 * DeleteTopics, CreatePartitions, IncrementalAlterConfigs,
 * AllocateProducerIds, AlterPartition, and any other api echoed back). Proves that the
 * client registers and its snapshot shows this broker and the topics the
 * controller's records created; that a submitted create completes only
 * once the local image shows the topic (the completion itself finds it in
 * the snapshot, while the fake answers metadata fetches late), with the
 * controller's topic id, and adopts a given id (SluiceTopicId) and a given
 * replica (Assignments); that NOT_CONTROLLER moves it to the next voter;
 * that OFFSET_OUT_OF_RANGE makes it load the controller's snapshot (paged,
 * cut inside batches) and end with the controller's state, then follow the
 * log again; that garbage from the controller (lying lengths, wrong
 * correlation ids, random bodies, corrupt record batches) costs reconnects,
 * never a crash; that every change kind works in one batch (configs
 * replaced as a difference), validate-only changes nothing, batch_begin ..
 * batch_commit sends one batch and reports the first failure; that
 * producer ids come from blocks handed out by the controller; that
 * forward() relays; that the ISR changes submitted while an AlterPartition
 * is out go together in the next, each answered alone; that a controlled shutdown waits for ShouldShutDown and
 * leaves the epoch the next registration names; and that without any
 * controller wait_ready says what is missing and a batch fails at close. */
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
#include "control/image.h"
#include "control/meta.h"
#include "control/meta_controller.h"
#include "control/mlog.h"
#include "control/mrec.h"
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FAKE_CONNS_MAX 16
#define FAKE_FRAME_MAX (1 << 20)
#define NODE 7
#define READY_MS 15000

/* ---- the fake controller ------------------------------------------------------ */

struct fake_conn {
	int fd; /* -1: free */
	uint8_t *buf;
	size_t len;
	/* a held metadata fetch (long poll) */
	bool held;
	int32_t corr;
	int64_t offset, deadline_ms, ready_ms;
	int32_t max_bytes;
};

struct fake {
	int32_t id;
	int listen_fd;
	uint16_t port;
	pthread_t thread;
	bool stop; /* atomic */
	pthread_mutex_t lock; /* everything below, against the test thread */
	struct sluice_image *img;
	struct sluice_mlog *log;
	int64_t next_offset;
	struct fake_conn conns[FAKE_CONNS_MAX];
	/* behaviour */
	bool not_controller;
	int garbage_n;            /* the next requests answered with garbage */
	int garbage_kind;         /* rotates: lying length, wrong correlation id, random body, corrupt batch */
	int32_t snapshot_page_max; /* bytes per FetchSnapshot page */
	int32_t fetch_delay_ms;    /* metadata fetches are answered no sooner */
	int32_t assign_node;       /* >= 0: the replica of every partition fake_create makes */
	int alter_refusals;        /* the next IncrementalAlterConfigs answered NOT_CONTROLLER throughout */
	int32_t alter_delay_ms;    /* each AlterPartition is answered this much later (the fake waits) */
	bool alter_garbage;        /* AlterPartition answers cut short by a byte */
	int64_t pid_next;
	/* what it saw */
	int requests, registrations, heartbeats, fetches, snapshot_pages, creates, config_ops;
	int alter_requests, alter_partitions, alter_last_n, alter_most_n; /* atomic: read while the fake waits */
	int64_t previous_epoch; /* of the last registration */
	bool want_shutdown;
	/* the snapshot being paged */
	uint8_t *snap;
	size_t snap_len;
	int64_t snap_end;
};

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Appends r as the next metadata offset (lock held). */
static int64_t fake_append(struct fake *f, const struct sluice_mrec *r)
{
	char err[256];
	int64_t at = f->next_offset;
	cr_assert_eq(sluice_image_apply(f->img, r, at, err, sizeof err), 0, "fake apply: %s", err);
	cr_assert_eq(sluice_mlog_append(f->log, at, r), 0);
	f->next_offset++;
	return at;
}

static void random_id(uint8_t id[16])
{
	for (int i = 0; i < 16; i++)
		id[i] = (uint8_t)rand();
}

/* TopicRecord, PartitionRecords (leader: the first registered broker) and
 * ConfigRecords; returns the last offset (lock held). */
static int64_t fake_create(struct fake *f, const char *name, int32_t parts, const uint8_t *id_in,
			   const struct sluice_topic_config *cfgs, int32_t cfg_n, uint8_t id_out[16])
{
	struct sluice_mrec r;
	memset(&r, 0, sizeof r);
	r.type = SLUICE_MREC_TOPIC;
	snprintf(r.topic.name, sizeof r.topic.name, "%s", name);
	if (id_in)
		memcpy(r.topic.topic_id, id_in, 16);
	else
		random_id(r.topic.topic_id);
	memcpy(id_out, r.topic.topic_id, 16);
	int64_t last = fake_append(f, &r);
	int32_t leader = f->assign_node >= 0 ? f->assign_node
			 : sluice_image_broker_count(f->img) ? sluice_image_broker_at(f->img, 0)->id
							     : -1;
	for (int32_t p = 0; p < parts; p++) {
		memset(&r, 0, sizeof r);
		r.type = SLUICE_MREC_PARTITION;
		r.partition.partition_id = p;
		memcpy(r.partition.topic_id, id_out, 16);
		r.partition.leader = leader;
		r.partition.leader_epoch = 3;
		if (leader >= 0) {
			r.partition.replicas.n = r.partition.isr.n = 1;
			r.partition.replicas.id[0] = r.partition.isr.id[0] = leader;
		}
		last = fake_append(f, &r);
	}
	for (int32_t c = 0; c < cfg_n; c++) {
		memset(&r, 0, sizeof r);
		r.type = SLUICE_MREC_CONFIG;
		r.config.resource_type = SLUICE_MREC_RESOURCE_TOPIC;
		snprintf(r.config.resource_name, sizeof r.config.resource_name, "%.*s", (int)sizeof r.config.resource_name - 1, name);
		snprintf(r.config.name, sizeof r.config.name, "%.*s", (int)sizeof r.config.name - 1, cfgs[c].key);
		snprintf(r.config.value, sizeof r.config.value, "%.*s", (int)sizeof r.config.value - 1, cfgs[c].value);
		last = fake_append(f, &r);
	}
	return last;
}

static void send_all(int fd, const uint8_t *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return; /* the client went away */
		p += w;
		n -= (size_t)w;
	}
}

/* Frames body w (written after an 8-byte gap) as a response to corr. */
static void respond(struct fake_conn *c, struct kwr *w, int32_t corr, bool flexible_header)
{
	(void)flexible_header;
	kwr_patch_i32(w, 0, (int32_t)(w->len - 4));
	kwr_patch_i32(w, 4, corr);
	send_all(c->fd, w->buf, w->len);
}

static void begin(struct kwr *w)
{
	kwr_init(w, 1024, 64u << 20);
	kwr_i32(w, 0);
	kwr_i32(w, 0);
	kwr_tags_empty(w); /* response header v1 */
}

/* Garbage in place of an answer: 0 a length beyond any frame, 1 another
 * correlation id, 2 a random body (3, a corrupt record batch, is sent by
 * fetch_answer). */
static void answer_garbage(struct fake_conn *c, int32_t corr, int kind)
{
	uint8_t junk[64];
	for (size_t i = 0; i < sizeof junk; i++)
		junk[i] = (uint8_t)rand();
	if (kind == 0) {
		uint8_t hdr[4] = {0x7f, 0xff, 0xff, 0xff};
		send_all(c->fd, hdr, 4);
		send_all(c->fd, junk, sizeof junk);
	} else {
		struct kwr w;
		begin(&w);
		kwr_raw(&w, junk, sizeof junk);
		respond(c, &w, kind == 1 ? corr + 17 : corr, true);
		kwr_free(&w);
	}
}

static void on_registration(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct sluice_mrec rec;
	memset(&rec, 0, sizeof rec);
	rec.type = SLUICE_MREC_REGISTER_BROKER;
	struct sluice_mrec_register_broker *rb = &rec.register_broker;
	rb->broker_id = krd_i32(r);
	(void)krd_string(r, true); /* ClusterId */
	krd_uuid(r, rb->incarnation_id);
	int32_t n = krd_array(r, true, 6);
	for (int32_t i = 0; i < n && !r->err; i++) {
		struct kstr name = krd_string(r, true), host = krd_string(r, true);
		struct sluice_mrec_endpoint *ep = &rb->endpoints[rb->endpoint_n++];
		snprintf(ep->name, sizeof ep->name, "%.*s", name.len, name.ptr);
		snprintf(ep->host, sizeof ep->host, "%.*s", host.len, host.ptr);
		ep->port = (uint16_t)krd_i16(r);
		ep->security_protocol = krd_i16(r);
		krd_tags_skip(r);
	}
	int32_t features = krd_array(r, true, 6);
	for (int32_t i = 0; i < features && !r->err; i++) {
		(void)krd_string(r, true);
		krd_skip(r, 4);
		krd_tags_skip(r);
	}
	struct kstr rack = krd_string(r, true);
	if (rack.ptr)
		snprintf(rb->rack, sizeof rb->rack, "%.*s", rack.len, rack.ptr);
	(void)krd_bool(r);
	int32_t dirs = krd_array(r, true, 16);
	krd_skip(r, (size_t)(dirs > 0 ? dirs : 0) * 16);
	f->previous_epoch = krd_i64(r);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "BrokerRegistration decodes");
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	if (f->not_controller) {
		kwr_i16(&w, KERR_NOT_CONTROLLER);
		kwr_i64(&w, -1);
	} else {
		rb->fenced = true;
		rb->broker_epoch = f->next_offset;
		kwr_i16(&w, 0);
		kwr_i64(&w, fake_append(f, &rec));
		f->registrations++;
	}
	kwr_tags_empty(&w);
	respond(c, &w, corr, true);
	kwr_free(&w);
}

static void on_heartbeat(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	int32_t id = krd_i32(r);
	int64_t epoch = krd_i64(r), offset = krd_i64(r);
	(void)krd_bool(r);
	bool want_shutdown = krd_bool(r);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "BrokerHeartbeat decodes");
	const struct sluice_image_broker *b = sluice_image_broker(f->img, id);
	int16_t error = f->not_controller ? KERR_NOT_CONTROLLER : !b ? KERR_BROKER_ID_NOT_REGISTERED
				 : b->epoch != epoch ? KERR_STALE_BROKER_EPOCH : 0;
	if (!error && b->fenced && offset >= epoch) {
		struct sluice_mrec rec = {.type = SLUICE_MREC_UNFENCE_BROKER};
		rec.unfence_broker.id = id;
		rec.unfence_broker.epoch = epoch;
		fake_append(f, &rec);
		b = sluice_image_broker(f->img, id);
	}
	f->heartbeats += !error;
	f->want_shutdown |= want_shutdown;
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	kwr_i16(&w, error);
	kwr_bool(&w, true);
	kwr_bool(&w, error || b->fenced);
	kwr_bool(&w, !error && want_shutdown);
	kwr_tags_empty(&w);
	respond(c, &w, corr, true);
	kwr_free(&w);
}

/* Answers a (held) metadata fetch. */
static void fetch_answer(struct fake *f, struct fake_conn *c)
{
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	kwr_i16(&w, 0);
	kwr_i32(&w, 0);
	kwr_array(&w, true, 1);
	kwr_cstr(&w, true, "__cluster_metadata");
	kwr_array(&w, true, 1);
	kwr_i32(&w, 0);
	int64_t start = sluice_mlog_start(f->log), end = sluice_mlog_end(f->log);
	int16_t error = f->not_controller ? KERR_NOT_LEADER_OR_FOLLOWER
			: c->offset < start || c->offset > end ? KERR_OFFSET_OUT_OF_RANGE : 0;
	kwr_i16(&w, error);
	kwr_i64(&w, end);
	kwr_i64(&w, end);
	kwr_i64(&w, start);
	kwr_array(&w, true, -1); /* AbortedTransactions */
	kwr_i32(&w, -1);
	struct kwr recs;
	kwr_init(&recs, 1024, 64u << 20);
	if (!error)
		cr_assert_geq(sluice_mlog_read(f->log, c->offset, (size_t)c->max_bytes, &recs), 0);
	if (!error && f->garbage_n > 0 && f->garbage_kind % 4 == 3 && recs.len > 30) {
		recs.buf[recs.len - 5] ^= 0x5a; /* a record batch whose CRC fails */
		f->garbage_n--;
		f->garbage_kind++;
	}
	kwr_bytes(&w, true, recs.buf ? recs.buf : (const uint8_t *)"", (int32_t)recs.len);
	kwr_free(&recs);
	kwr_tags_empty(&w);
	kwr_tags_empty(&w);
	kwr_tags_empty(&w);
	respond(c, &w, c->corr, true);
	kwr_free(&w);
	c->held = false;
	f->fetches++;
}

static void on_fetch(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	(void)krd_i32(r);
	int32_t max_wait = krd_i32(r);
	krd_skip(r, 4 + 4 + 1 + 4 + 4);
	int32_t topics = krd_array(r, true, 2);
	cr_assert_eq(topics, 1);
	cr_assert(kstr_eq(krd_string(r, true), "__cluster_metadata"));
	cr_assert_eq(krd_array(r, true, 30), 1);
	cr_assert_eq(krd_i32(r), 0);
	(void)krd_i32(r);
	c->offset = krd_i64(r);
	krd_skip(r, 4 + 8);
	c->max_bytes = krd_i32(r);
	krd_tags_skip(r);
	krd_tags_skip(r);
	cr_assert_eq(krd_array(r, true, 2), 0);
	(void)krd_string(r, true);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "Fetch decodes");
	c->corr = corr;
	c->held = true;
	c->deadline_ms = mono_ms() + max_wait;
	c->ready_ms = mono_ms() + f->fetch_delay_ms;
	if ((c->offset != sluice_mlog_end(f->log) && !f->fetch_delay_ms) || f->not_controller)
		fetch_answer(f, c);
}

static int snap_record(void *arg, const struct sluice_mrec *r)
{
	struct sluice_mlog *l = arg;
	return sluice_mlog_append(l, sluice_mlog_end(l), r);
}

/* The image as a snapshot: its records as batches, offsets 0..n-1. */
static void snapshot_build(struct fake *f)
{
	struct sluice_mlog *l = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX);
	cr_assert_not_null(l);
	cr_assert_eq(sluice_image_encode(f->img, snap_record, l), 0);
	struct kwr w;
	kwr_init(&w, 4096, 64u << 20);
	int64_t from = 0;
	while (from < sluice_mlog_end(l)) {
		struct kwr part;
		kwr_init(&part, 4096, 64u << 20);
		int64_t n = sluice_mlog_read(l, from, 300, &part);
		cr_assert_gt(n, 0);
		kwr_raw(&w, part.buf, part.len);
		kwr_free(&part);
		from += n;
	}
	sluice_mlog_free(l);
	free(f->snap);
	f->snap = w.buf;
	f->snap_len = w.len;
	f->snap_end = sluice_image_offset(f->img) + 1;
}

static void on_fetch_snapshot(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	(void)krd_i32(r);
	int32_t max_bytes = krd_i32(r);
	cr_assert_eq(krd_array(r, true, 2), 1);
	cr_assert(kstr_eq(krd_string(r, true), "__cluster_metadata"));
	cr_assert_eq(krd_array(r, true, 20), 1);
	cr_assert_eq(krd_i32(r), 0);
	(void)krd_i32(r);
	int64_t end = krd_i64(r);
	(void)krd_i32(r);
	krd_tags_skip(r);
	int64_t pos = krd_i64(r);
	krd_tags_skip(r);
	krd_tags_skip(r);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "FetchSnapshot decodes");
	if (end < 0 || !f->snap)
		snapshot_build(f);
	int16_t error = f->not_controller		 ? KERR_NOT_LEADER_OR_FOLLOWER
			: end >= 0 && end != f->snap_end ? KERR_SNAPSHOT_NOT_FOUND
							 : 0;
	int64_t len = error || pos > (int64_t)f->snap_len ? 0 : (int64_t)f->snap_len - pos;
	if (len > max_bytes)
		len = max_bytes;
	if (len > f->snapshot_page_max)
		len = f->snapshot_page_max;
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	kwr_i16(&w, 0);
	kwr_array(&w, true, 1);
	kwr_cstr(&w, true, "__cluster_metadata");
	kwr_array(&w, true, 1);
	kwr_i32(&w, 0);
	kwr_i16(&w, error);
	kwr_i64(&w, f->snap_end);
	kwr_i32(&w, 0);
	kwr_tags_empty(&w);
	kwr_i64(&w, (int64_t)f->snap_len);
	kwr_i64(&w, pos);
	kwr_bytes(&w, true, f->snap + (len ? pos : 0), (int32_t)len);
	kwr_tags_empty(&w);
	kwr_tags_empty(&w);
	kwr_tags_empty(&w);
	respond(c, &w, corr, true);
	kwr_free(&w);
	f->snapshot_pages++;
}

/* CreateTopics v7 with SluiceTopicId in, SluiceMetadataOffset out. */
static void on_create_topics(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	int32_t n = krd_array(r, true, 10);
	kwr_array(&w, true, n);
	int64_t last = sluice_image_offset(f->img);
	bool validate_only = r->end - r->p >= 6 && r->end[-2] == 1; /* ValidateOnly, before the last tag byte */
	for (int32_t i = 0; i < n && !r->err; i++) {
		struct kstr name = krd_string(r, true);
		int32_t parts = krd_i32(r);
		int16_t rf = krd_i16(r);
		int32_t an = krd_array(r, true, 6);
		for (int32_t k = 0; k < an && !r->err; k++) { /* Assignments: one replica each */
			cr_assert_eq(krd_i32(r), k);
			cr_assert_eq(krd_array(r, true, 4), 1);
			f->assign_node = krd_i32(r);
			krd_tags_skip(r);
		}
		if (an > 0) {
			cr_assert(parts == -1 && rf == -1, "Assignments come with NumPartitions and ReplicationFactor -1");
			parts = an;
		}
		int32_t cn = krd_array(r, true, 3);
		struct sluice_topic_config cfgs[SLUICE_TOPIC_CONFIGS_MAX];
		for (int32_t k = 0; k < cn && !r->err; k++) {
			struct kstr key = krd_string(r, true), val = krd_string(r, true);
			snprintf(cfgs[k].key, sizeof cfgs[k].key, "%.*s", key.len, key.ptr);
			snprintf(cfgs[k].value, sizeof cfgs[k].value, "%.*s", val.len, val.ptr);
			krd_tags_skip(r);
		}
		uint8_t given[16], id[16] = {0};
		bool has_id = false;
		uint32_t tags = krd_uvarint(r);
		for (uint32_t t = 0; t < tags; t++) {
			uint32_t tag = krd_uvarint(r), size = krd_uvarint(r);
			cr_assert(tag == 1000 && size == 16);
			krd_uuid(r, given);
			has_id = true;
		}
		char nm[256];
		snprintf(nm, sizeof nm, "%.*s", name.len, name.ptr);
		int16_t error = f->not_controller ? KERR_NOT_CONTROLLER
				: sluice_image_topic_by_name(f->img, nm, strlen(nm)) ? KERR_TOPIC_ALREADY_EXISTS : 0;
		if (!error && !validate_only)
			last = fake_create(f, nm, parts < 0 ? 1 : parts, has_id ? given : NULL, cfgs, cn, id);
		f->assign_node = -1;
		kwr_cstr(&w, true, nm);
		kwr_uuid(&w, id);
		kwr_i16(&w, error);
		kwr_cstr(&w, true, error ? "refused by the fake" : NULL);
		kwr_i32(&w, parts);
		kwr_i16(&w, 1);
		kwr_array(&w, true, -1);
		kwr_tags_empty(&w);
		f->creates += !error && !validate_only;
	}
	(void)krd_i32(r);
	cr_assert_eq(krd_bool(r), validate_only);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "CreateTopics decodes");
	kwr_uvarint(&w, 1); /* SluiceMetadataOffset */
	kwr_uvarint(&w, 1000);
	kwr_uvarint(&w, 8);
	kwr_i64(&w, last);
	respond(c, &w, corr, true);
	kwr_free(&w);
}

static void on_allocate_pids(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	(void)krd_i32(r);
	(void)krd_i64(r);
	krd_tags_skip(r);
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	kwr_i16(&w, f->not_controller ? KERR_NOT_CONTROLLER : 0);
	kwr_i64(&w, f->pid_next);
	kwr_i32(&w, 3); /* small blocks: a second one is needed soon */
	kwr_tags_empty(&w);
	f->pid_next += 3;
	respond(c, &w, corr, true);
	kwr_free(&w);
}

/* The answer of DeleteTopics v5 / CreatePartitions v3 / IncrementalAlterConfigs v1:
 * entries written by the handler, then SluiceMetadataOffset. */
static void finish_offset(struct kwr *w, int64_t last)
{
	kwr_uvarint(w, 1);
	kwr_uvarint(w, 1000);
	kwr_uvarint(w, 8);
	kwr_i64(w, last);
}

static void name_of(struct kstr k, char *out, size_t cap)
{
	snprintf(out, cap, "%.*s", k.ptr ? k.len : 0, k.ptr ? k.ptr : "");
}

static void on_delete_topics(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	int32_t n = krd_array(r, true, 1);
	kwr_array(&w, true, n);
	int64_t last = sluice_image_offset(f->img);
	for (int32_t i = 0; i < n && !r->err; i++) {
		char nm[256];
		name_of(krd_string(r, true), nm, sizeof nm);
		const struct sluice_image_topic *t = sluice_image_topic_by_name(f->img, nm, strlen(nm));
		if (t) {
			struct sluice_mrec rec = {.type = SLUICE_MREC_REMOVE_TOPIC};
			memcpy(rec.remove_topic.topic_id, t->id, 16);
			last = fake_append(f, &rec);
		}
		kwr_cstr(&w, true, nm);
		kwr_i16(&w, t ? 0 : KERR_UNKNOWN_TOPIC_OR_PARTITION);
		kwr_cstr(&w, true, t ? NULL : "no such topic in the fake");
		kwr_tags_empty(&w);
	}
	(void)krd_i32(r);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "DeleteTopics decodes");
	finish_offset(&w, last);
	respond(c, &w, corr, true);
	kwr_free(&w);
}

static void on_create_partitions(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	int32_t n = krd_array(r, true, 7);
	kwr_array(&w, true, n);
	int64_t last = sluice_image_offset(f->img);
	bool validate_only = r->end - r->p >= 2 && r->end[-2] == 1;
	for (int32_t i = 0; i < n && !r->err; i++) {
		char nm[256];
		name_of(krd_string(r, true), nm, sizeof nm);
		int32_t count = krd_i32(r);
		cr_assert_eq(krd_array(r, true, 1), -1, "no assignments");
		krd_tags_skip(r);
		const struct sluice_image_topic *t = sluice_image_topic_by_name(f->img, nm, strlen(nm));
		int16_t error = !t ? KERR_UNKNOWN_TOPIC_OR_PARTITION : count <= t->partition_n ? KERR_INVALID_PARTITIONS : 0;
		for (int32_t p = t && !error && !validate_only ? t->partition_n : count; p < count; p++) {
			struct sluice_mrec rec;
			memset(&rec, 0, sizeof rec);
			rec.type = SLUICE_MREC_PARTITION;
			rec.partition.partition_id = p;
			memcpy(rec.partition.topic_id, t->id, 16);
			rec.partition.leader = -1;
			last = fake_append(f, &rec);
			t = sluice_image_topic_by_name(f->img, nm, strlen(nm));
		}
		kwr_cstr(&w, true, nm);
		kwr_i16(&w, error);
		kwr_cstr(&w, true, error ? "refused by the fake" : NULL);
		kwr_tags_empty(&w);
	}
	(void)krd_i32(r);
	cr_assert_eq(krd_bool(r), validate_only);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "CreatePartitions decodes");
	finish_offset(&w, last);
	respond(c, &w, corr, true);
	kwr_free(&w);
}

static void on_alter_configs(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	int32_t n = krd_array(r, true, 4);
	kwr_array(&w, true, n);
	int64_t last = sluice_image_offset(f->img);
	bool refuse = f->alter_refusals > 0;
	f->alter_refusals -= refuse;
	for (int32_t i = 0; i < n && !r->err; i++) {
		int8_t type = krd_i8(r);
		cr_assert(type == SLUICE_MREC_RESOURCE_TOPIC || type == SLUICE_MREC_RESOURCE_BROKER);
		char nm[256];
		name_of(krd_string(r, true), nm, sizeof nm);
		int32_t ops = krd_array(r, true, 4);
		f->config_ops += refuse ? 0 : ops;
		for (int32_t k = 0; k < ops && !r->err; k++) {
			struct sluice_mrec rec;
			memset(&rec, 0, sizeof rec);
			rec.type = SLUICE_MREC_CONFIG;
			rec.config.resource_type = type;
			snprintf(rec.config.resource_name, sizeof rec.config.resource_name, "%.249s", nm);
			name_of(krd_string(r, true), rec.config.name, sizeof rec.config.name);
			int8_t op = krd_i8(r);
			struct kstr v = krd_string(r, true);
			krd_tags_skip(r);
			cr_assert(op == 0 || op == 1, "SET or DELETE");
			cr_assert_eq(op == 1, v.ptr == NULL, "DELETE has a null value");
			rec.config.value_null = op == 1;
			name_of(v, rec.config.value, sizeof rec.config.value);
			if (!refuse)
				last = fake_append(f, &rec);
		}
		krd_tags_skip(r);
		kwr_i16(&w, refuse ? KERR_NOT_CONTROLLER : 0);
		kwr_cstr(&w, true, refuse ? "not the fake's" : NULL);
		kwr_i8(&w, type);
		kwr_cstr(&w, true, nm);
		kwr_tags_empty(&w);
	}
	(void)krd_bool(r);
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "IncrementalAlterConfigs decodes");
	finish_offset(&w, last);
	respond(c, &w, corr, true);
	kwr_free(&w);
}

/* AlterPartition v2: every partition accepted as asked (leader NODE, the
 * partition epoch one more) but partition 13, refused with
 * FENCED_LEADER_EPOCH; answered alter_delay_ms late. */
static void on_alter_partition(struct fake *f, struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct kwr w;
	begin(&w);
	kwr_i32(&w, 0);
	kwr_i16(&w, 0);
	cr_assert_eq(krd_i32(r), NODE, "BrokerId");
	(void)krd_i64(r);
	int32_t topics = krd_array(r, true, 18), total = 0;
	kwr_array(&w, true, topics);
	for (int32_t t = 0; t < topics && !r->err; t++) {
		uint8_t id[16];
		krd_uuid(r, id);
		kwr_uuid(&w, id);
		int32_t parts = krd_array(r, true, 11);
		kwr_array(&w, true, parts);
		for (int32_t p = 0; p < parts && !r->err; p++) {
			int32_t index = krd_i32(r), leader_epoch = krd_i32(r);
			int32_t isr[SLUICE_REPLICAS_MAX], n = krd_array(r, true, 4);
			cr_assert(n >= 0 && n <= SLUICE_REPLICAS_MAX);
			for (int32_t i = 0; i < n; i++)
				isr[i] = krd_i32(r);
			(void)krd_i8(r);
			int32_t partition_epoch = krd_i32(r);
			krd_tags_skip(r);
			bool refused = index == 13;
			kwr_i32(&w, index);
			kwr_i16(&w, refused ? KERR_FENCED_LEADER_EPOCH : 0);
			kwr_i32(&w, refused ? -1 : NODE);
			kwr_i32(&w, refused ? -1 : leader_epoch);
			kwr_array(&w, true, refused ? 0 : n);
			for (int32_t i = 0; !refused && i < n; i++)
				kwr_i32(&w, isr[i]);
			kwr_i8(&w, 0);
			kwr_i32(&w, refused ? -1 : partition_epoch + 1);
			kwr_tags_empty(&w);
			total++;
		}
		krd_tags_skip(r);
		kwr_tags_empty(&w);
	}
	krd_tags_skip(r);
	cr_assert(!r->err && krd_left(r) == 0, "AlterPartition decodes");
	kwr_tags_empty(&w);
	__atomic_add_fetch(&f->alter_requests, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&f->alter_partitions, total, __ATOMIC_ACQ_REL);
	__atomic_store_n(&f->alter_last_n, total, __ATOMIC_RELEASE);
	if (total > f->alter_most_n)
		__atomic_store_n(&f->alter_most_n, total, __ATOMIC_RELEASE);
	if (f->alter_delay_ms)
		usleep((useconds_t)f->alter_delay_ms * 1000);
	if (f->alter_garbage)
		w.len--;
	respond(c, &w, corr, true);
	kwr_free(&w);
}

/* Any other api: the request body back, for forward(). */
static void on_echo(struct fake_conn *c, int32_t corr, struct krd *r)
{
	struct kwr w;
	begin(&w);
	kwr_raw(&w, r->p, krd_left(r));
	respond(c, &w, corr, true);
	kwr_free(&w);
}

/* One request frame (lock held). */
static void fake_request(struct fake *f, struct fake_conn *c, const uint8_t *p, size_t n)
{
	struct krd r;
	krd_init(&r, p, n);
	int16_t key = krd_i16(&r), ver = krd_i16(&r);
	int32_t corr = krd_i32(&r);
	(void)krd_string(&r, false);
	krd_tags_skip(&r);
	cr_assert(!r.err);
	f->requests++;
	if (f->garbage_n > 0 && f->garbage_kind % 4 != 3) {
		answer_garbage(c, corr, f->garbage_kind % 4);
		f->garbage_n--;
		f->garbage_kind++;
		return;
	}
	if (key == 62 && ver == 3)
		on_registration(f, c, corr, &r);
	else if (key == 63 && ver == 1)
		on_heartbeat(f, c, corr, &r);
	else if (key == 1 && ver == 12)
		on_fetch(f, c, corr, &r);
	else if (key == 59 && ver == 0)
		on_fetch_snapshot(f, c, corr, &r);
	else if (key == 19 && ver == 7)
		on_create_topics(f, c, corr, &r);
	else if (key == 67 && ver == 0)
		on_allocate_pids(f, c, corr, &r);
	else if (key == 20 && ver == 5)
		on_delete_topics(f, c, corr, &r);
	else if (key == 37 && ver == 3)
		on_create_partitions(f, c, corr, &r);
	else if (key == 44 && ver == 1)
		on_alter_configs(f, c, corr, &r);
	else if (key == 44)
		on_echo(c, corr, &r); /* IncrementalAlterConfigs v0: only relayed, by forward() */
	else if (key == 55)
		on_echo(c, corr, &r);
	else if (key == 56 && ver == 2)
		on_alter_partition(f, c, corr, &r);
	else
		cr_assert_fail("fake controller: unexpected api %d v%d", key, ver);
}

static void conn_drop(struct fake_conn *c)
{
	close(c->fd);
	c->fd = -1;
	c->len = 0;
	c->held = false;
}

static void fake_read(struct fake *f, struct fake_conn *c)
{
	ssize_t got = recv(c->fd, c->buf + c->len, FAKE_FRAME_MAX - c->len, 0);
	if (got <= 0) {
		conn_drop(c);
		return;
	}
	c->len += (size_t)got;
	while (c->fd >= 0 && c->len >= 4) {
		uint32_t n = kbe32(c->buf);
		cr_assert(n < FAKE_FRAME_MAX - 4, "request frame of %u bytes", n);
		if (c->len < 4 + n)
			break;
		pthread_mutex_lock(&f->lock);
		int kind = f->garbage_kind;
		fake_request(f, c, c->buf + 4, n);
		bool close_it = f->garbage_kind != kind && kind % 4 == 0; /* after a lying length */
		pthread_mutex_unlock(&f->lock);
		memmove(c->buf, c->buf + 4 + n, c->len - 4 - n);
		c->len -= 4 + n;
		if (close_it)
			conn_drop(c);
	}
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	while (!__atomic_load_n(&f->stop, __ATOMIC_ACQUIRE)) {
		struct pollfd p[FAKE_CONNS_MAX + 1] = {{.fd = f->listen_fd, .events = POLLIN}};
		for (int i = 0; i < FAKE_CONNS_MAX; i++)
			p[i + 1] = (struct pollfd){.fd = f->conns[i].fd, .events = POLLIN};
		(void)poll(p, FAKE_CONNS_MAX + 1, 10);
		if (p[0].revents & POLLIN) {
			int fd = accept(f->listen_fd, NULL, NULL);
			for (int i = 0; fd >= 0 && i < FAKE_CONNS_MAX; i++)
				if (f->conns[i].fd < 0) {
					f->conns[i].fd = fd;
					fd = -1;
				}
			if (fd >= 0)
				close(fd);
		}
		for (int i = 0; i < FAKE_CONNS_MAX; i++)
			if (f->conns[i].fd >= 0 && p[i + 1].fd == f->conns[i].fd && (p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
				fake_read(f, &f->conns[i]);
		pthread_mutex_lock(&f->lock);
		for (int i = 0; i < FAKE_CONNS_MAX; i++) {
			struct fake_conn *c = &f->conns[i];
			int64_t now = mono_ms();
			if (c->fd >= 0 && c->held && now >= c->ready_ms &&
			    (sluice_mlog_end(f->log) != c->offset || now >= c->deadline_ms))
				fetch_answer(f, c);
		}
		pthread_mutex_unlock(&f->lock);
	}
	return NULL;
}

static void fake_start(struct fake *f, int32_t id)
{
	memset(f, 0, sizeof *f);
	f->id = id;
	f->img = sluice_image_new();
	f->log = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX);
	cr_assert(f->img && f->log);
	f->snapshot_page_max = 1 << 20;
	f->pid_next = 1000;
	f->previous_epoch = -2;
	f->assign_node = -1;
	pthread_mutex_init(&f->lock, NULL);
	for (int i = 0; i < FAKE_CONNS_MAX; i++) {
		f->conns[i].fd = -1;
		f->conns[i].buf = malloc(FAKE_FRAME_MAX);
	}
	f->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof a;
	cr_assert_eq(bind(f->listen_fd, (struct sockaddr *)&a, sizeof a), 0, "bind: %s", strerror(errno));
	cr_assert_eq(listen(f->listen_fd, 16), 0);
	cr_assert_eq(getsockname(f->listen_fd, (struct sockaddr *)&a, &al), 0);
	f->port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
	__atomic_store_n(&f->stop, true, __ATOMIC_RELEASE);
	pthread_join(f->thread, NULL);
	close(f->listen_fd);
	for (int i = 0; i < FAKE_CONNS_MAX; i++) {
		if (f->conns[i].fd >= 0)
			close(f->conns[i].fd);
		free(f->conns[i].buf);
	}
	sluice_image_free(f->img);
	sluice_mlog_free(f->log);
	free(f->snap);
	pthread_mutex_destroy(&f->lock);
}

/* ---- the client under test ---------------------------------------------------------- */

static char dir[64];

/* The static configuration the next client_open gives (NULL: the defaults). */
static const struct sluice_config *client_base;

static void setup(void)
{
	client_base = NULL;
	snprintf(dir, sizeof dir, "/tmp/sluice-meta-ctl-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static void client_open(struct sluice_meta *m, const struct fake *a, const struct fake *b)
{
	struct sluice_meta_controller_config cc;
	memset(&cc, 0, sizeof cc);
	cc.node_id = NODE;
	cc.base = client_base;
	snprintf(cc.cluster_id, sizeof cc.cluster_id, "test-cluster");
	int n = snprintf(cc.quorum_voters, sizeof cc.quorum_voters, "%d@127.0.0.1:%u", a->id, a->port);
	if (b)
		snprintf(cc.quorum_voters + n, sizeof cc.quorum_voters - (size_t)n, ",%d@127.0.0.1:%u", b->id, b->port);
	snprintf(cc.listeners, sizeof cc.listeners, "PLAINTEXT://127.0.0.1:19092,INTERNAL://10.0.0.1:19093");
	snprintf(cc.rack, sizeof cc.rack, "rack-a");
	cc.heartbeat_interval_ms = 100;
	char err[512] = "";
	cr_assert_eq(sluice_meta_controller_open_config(m, &cc, dir, err, sizeof err), 0, "open: %s", err);
	cr_assert(sluice_meta_is_controller(m));
}

static void client_ready(struct sluice_meta *m)
{
	char err[512] = "";
	cr_assert_eq(sluice_meta_controller_wait_ready(m, READY_MS, err, sizeof err), 0, "ready: %s", err);
}

/* Waits until the client's snapshot reaches offset (the fake's last). */
static struct sluice_meta_snapshot *snap_at(struct sluice_meta *m, int64_t offset)
{
	int64_t deadline = mono_ms() + READY_MS;
	for (;;) {
		struct sluice_meta_snapshot *s = m->ops->acquire(m->self);
		if (s->metadata_offset >= offset || mono_ms() > deadline)
			return s;
		m->ops->release(m->self, s);
		usleep(5000);
	}
}

/* The client's snapshot says what the fake's image says. */
static void assert_same_state(const struct sluice_meta_snapshot *s, struct fake *f)
{
	pthread_mutex_lock(&f->lock);
	cr_assert_eq(s->metadata_offset, sluice_image_offset(f->img));
	size_t n = sluice_image_topic_count(f->img);
	cr_assert_eq(s->topic_n, n);
	for (size_t i = 0; i < n; i++) {
		const struct sluice_image_topic *it = sluice_image_topic_at(f->img, i);
		const struct sluice_topic *t = sluice_meta_find(s, it->name, strlen(it->name));
		cr_assert_not_null(t, "topic %s", it->name);
		cr_assert_eq(memcmp(t->id, it->id, 16), 0);
		cr_assert_eq(t->partitions, it->partition_n);
		for (int32_t p = 0; p < it->partition_n; p++) {
			const struct sluice_partition_state *st = sluice_topic_partition(t, p);
			cr_assert_not_null(st);
			cr_assert_eq(st->leader, it->partitions[p].leader);
			cr_assert_eq(st->leader_epoch, it->partitions[p].leader_epoch);
			cr_assert_eq(st->replica_n, it->partitions[p].replicas.n);
			cr_assert_eq(st->isr_n, it->partitions[p].isr.n);
		}
	}
	size_t unfenced = 0;
	for (size_t i = 0; i < sluice_image_broker_count(f->img); i++)
		unfenced += !sluice_image_broker_at(f->img, i)->fenced;
	cr_assert_eq(s->broker_n, unfenced);
	pthread_mutex_unlock(&f->lock);
}

TestSuite(meta_controller, .init = setup, .fini = teardown, .timeout = 60);

/* Registration, then a snapshot with this broker (unfenced, the endpoint
 * of its first listener's name, its rack) and the topic the controller's
 * records made, configs parsed as the local backend parses them. */
Test(meta_controller, registers_and_shows_controller_topics)
{
	struct fake f;
	fake_start(&f, 1);
	uint8_t id[16];
	struct sluice_topic_config cfg = {"retention.ms", "60000"};
	pthread_mutex_lock(&f.lock);
	int64_t last = fake_create(&f, "pre", 2, NULL, &cfg, 1, id);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.registrations, 1);
	cr_assert_eq(f.previous_epoch, -1, "no epoch file: PreviousBrokerEpoch -1");
	last = sluice_image_offset(f.img);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_snapshot *s = snap_at(&m, last);
	cr_assert_eq(s->broker_n, 1);
	cr_assert_eq(s->brokers[0].node_id, NODE);
	cr_assert_str_eq(s->brokers[0].host, "127.0.0.1");
	cr_assert_eq(s->brokers[0].port, 19092);
	cr_assert_str_eq(s->brokers[0].rack, "rack-a");
	cr_assert_eq(s->controller_id, 1);
	const struct sluice_topic *t = sluice_meta_find(s, "pre", 3);
	cr_assert_not_null(t);
	cr_assert_eq(memcmp(t->id, id, 16), 0);
	cr_assert_eq(t->partitions, 2);
	cr_assert_eq(t->config_n, 1);
	cr_assert_str_eq(t->configs[0].key, "retention.ms");
	cr_assert_eq(t->limits.retention_ms, 60000);
	cr_assert_eq(sluice_topic_partition(t, 1)->leader_epoch, 3);
	assert_same_state(s, &f);
	m.ops->release(m.self, s);
	struct sluice_meta_controller_stats st;
	sluice_meta_controller_stats(&m, &st);
	cr_assert_eq(st.registrations, 1);
	cr_assert_geq(st.heartbeats, 1);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* A broker in controlled shutdown stays in the snapshot's broker list
 * (Kafka's Metadata lists it), marked shutting_down: a leader reads that
 * before it asks for the broker to join an ISR, which the controller would
 * refuse (INELIGIBLE_REPLICA) after holding the high watermark to it. */
Test(meta_controller, snapshot_marks_a_broker_shutting_down)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	pthread_mutex_lock(&f.lock);
	const struct sluice_image_broker *b = sluice_image_broker(f.img, NODE);
	cr_assert_not_null(b);
	struct sluice_mrec r;
	memset(&r, 0, sizeof r);
	r.type = SLUICE_MREC_BROKER_REGISTRATION_CHANGE;
	r.broker_registration_change.broker_id = NODE;
	r.broker_registration_change.broker_epoch = b->epoch;
	r.broker_registration_change.fenced = -1;
	r.broker_registration_change.in_controlled_shutdown = 1;
	int64_t at = fake_append(&f, &r);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_snapshot *s = snap_at(&m, at);
	cr_assert_geq(s->metadata_offset, at);
	cr_assert_eq(s->broker_n, 1, "still listed");
	cr_expect(s->brokers[0].shutting_down);
	m.ops->release(m.self, s);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* A submitted batch and what its completion saw. */
struct waiter {
	struct sluice_meta_batch batch;
	struct sluice_meta_change changes[8];
	struct sluice_meta *m;
	sem_t done;
	bool seen[8];         /* the topic was in the snapshot when done ran */
	uint8_t seen_id[8][16];
	pthread_t thread;
};

static void waiter_done(struct sluice_meta_batch *b)
{
	struct waiter *w = b->arg;
	struct sluice_meta_snapshot *s = w->m->ops->acquire(w->m->self);
	for (uint32_t i = 0; i < b->change_n; i++) {
		const struct sluice_topic *t =
			b->changes[i].name ? sluice_meta_find(s, b->changes[i].name, b->changes[i].name_len) : NULL;
		w->seen[i] = t != NULL;
		if (t)
			memcpy(w->seen_id[i], t->id, 16);
	}
	cr_assert_geq(s->version, b->version);
	w->m->ops->release(w->m->self, s);
	w->thread = pthread_self();
	sem_post(&w->done);
}

static void waiter_wait(struct waiter *w)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	cr_assert_eq(sem_timedwait(&w->done, &ts), 0, "the batch completes");
}

/* A create completes only once the local image shows it (the completion
 * finds it in the snapshot), with the controller's id; a given id is
 * sent as SluiceTopicId and kept; an existing name is refused with the
 * controller's error and message. */
Test(meta_controller, submit_create_completes_after_image_caught_up)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	pthread_mutex_lock(&f.lock);
	f.fetch_delay_ms = 300; /* the CreateTopics answer comes well before the records */
	pthread_mutex_unlock(&f.lock);
	static const uint8_t adopted[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	static const struct sluice_topic_config cfg = {"cleanup.policy", "compact"};
	struct sluice_topic out;
	struct waiter *w = calloc(1, sizeof *w);
	w->m = &m;
	sem_init(&w->done, 0, 0);
	w->changes[0] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_TOPIC, .name = "t1", .name_len = 2,
						    .partitions = 3, .replication_factor = -1, .configs = &cfg, .config_n = 1,
						    .topic_out = &out};
	w->changes[1] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_TOPIC, .name = "t2", .name_len = 2,
						    .partitions = 1, .replication_factor = -1, .id = adopted};
	w->batch = (struct sluice_meta_batch){.changes = w->changes, .change_n = 2, .done = waiter_done, .arg = w};
	cr_assert_eq(m.ops->submit(m.self, &w->batch), SLUICE_META_SUBMITTED);
	waiter_wait(w);
	cr_assert_not(pthread_equal(w->thread, pthread_self()), "done runs on the backend's thread");
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(w->changes[i].error, 0, "%s", w->changes[i].msg);
		cr_assert(w->seen[i], "the topic is in the snapshot when the batch completes");
		cr_assert_eq(memcmp(w->changes[i].topic_id, w->seen_id[i], 16), 0);
	}
	cr_assert_eq(memcmp(w->changes[1].topic_id, adopted, 16), 0, "SluiceTopicId kept");
	cr_assert_eq(w->changes[0].topic_partitions, 3);
	cr_assert_str_eq(out.name, "t1");
	cr_assert_eq(out.partitions, 3);
	cr_assert_eq(out.config_n, 1);
	cr_assert_eq(out.limits.cleanup_compact, 1);
	/* the synchronous form, and an existing name */
	char msg[256];
	struct sluice_topic_spec spec = {.name = "t1", .name_len = 2, .partitions = 1, .replication_factor = -1};
	cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), KERR_TOPIC_ALREADY_EXISTS);
	cr_assert_str_eq(msg, "refused by the fake");
	spec.name = "t3";
	cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), 0, "%s", msg);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_not_null(sluice_meta_find(s, "t3", 2), "a synchronous create returns once the snapshot shows it");
	assert_same_state(s, &f);
	m.ops->release(m.self, s);
	sem_destroy(&w->done);
	free(w);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* The first voter answers NOT_CONTROLLER to everything: the client moves
 * to the second, registers there and names it as the controller; its
 * admin requests get there too. */
Test(meta_controller, not_controller_moves_to_next_voter)
{
	struct fake a, b;
	fake_start(&a, 1);
	fake_start(&b, 2);
	a.not_controller = true;
	struct sluice_meta m;
	client_open(&m, &a, &b);
	client_ready(&m);
	char msg[256];
	struct sluice_topic_spec spec = {.name = "x", .name_len = 1, .partitions = 2, .replication_factor = -1};
	cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), 0, "%s", msg);
	pthread_mutex_lock(&a.lock);
	pthread_mutex_lock(&b.lock);
	cr_assert_gt(a.requests, 0, "the first voter was tried");
	cr_assert_eq(a.registrations + a.creates, 0);
	cr_assert_eq(b.registrations, 1);
	cr_assert_eq(b.creates, 1);
	int64_t last = sluice_image_offset(b.img);
	pthread_mutex_unlock(&b.lock);
	pthread_mutex_unlock(&a.lock);
	struct sluice_meta_snapshot *s = snap_at(&m, last);
	cr_assert_eq(s->controller_id, 2);
	cr_assert_not_null(sluice_meta_find(s, "x", 1));
	assert_same_state(s, &b);
	m.ops->release(m.self, s);
	sluice_meta_controller_close(&m);
	fake_stop(&a);
	fake_stop(&b);
}

/* The controller's log starts past offset 0 (older records dropped): the
 * fetch from 0 is OFFSET_OUT_OF_RANGE, the client loads the snapshot in
 * small pages that cut record batches, ends with the controller's state,
 * and then follows the log again. */
Test(meta_controller, out_of_range_loads_snapshot)
{
	struct fake f;
	fake_start(&f, 1);
	f.snapshot_page_max = 97;
	uint8_t id[16];
	char name[32];
	pthread_mutex_lock(&f.lock);
	for (int i = 0; i < 20; i++) {
		snprintf(name, sizeof name, "old-%02d", i);
		struct sluice_topic_config cfg = {"segment.bytes", "1048576"};
		fake_create(&f, name, 1 + i % 3, NULL, &cfg, i % 2, id);
	}
	sluice_mlog_reset(f.log); /* the log window now starts at next_offset */
	fake_create(&f, "after-reset", 2, NULL, NULL, 0, id);
	cr_assert_gt(sluice_mlog_start(f.log), 0);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	struct sluice_meta_controller_stats st;
	sluice_meta_controller_stats(&m, &st);
	cr_assert_eq(st.snapshots_loaded, 1);
	pthread_mutex_lock(&f.lock);
	cr_assert_gt(f.snapshot_pages, 3, "paged");
	int64_t last = sluice_image_offset(f.img);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_snapshot *s = snap_at(&m, last);
	assert_same_state(s, &f);
	cr_assert_eq(s->broker_n, 1);
	m.ops->release(m.self, s);
	pthread_mutex_lock(&f.lock);
	last = fake_create(&f, "later", 4, NULL, NULL, 0, id);
	pthread_mutex_unlock(&f.lock);
	s = snap_at(&m, last);
	cr_assert_not_null(sluice_meta_find(s, "later", 5), "the log is followed after the load");
	assert_same_state(s, &f);
	m.ops->release(m.self, s);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* Garbage answers (a length beyond any frame, another correlation id, a
 * random body, a record batch whose CRC fails) cost reconnects; the
 * client ends registered, caught up and equal to the controller. */
Test(meta_controller, garbage_is_survived)
{
	struct fake f;
	fake_start(&f, 1);
	uint8_t id[16];
	pthread_mutex_lock(&f.lock);
	fake_create(&f, "g", 3, NULL, NULL, 0, id);
	f.garbage_n = 12;
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	/* a corrupt batch needs a fetch that brings records: make some */
	char name[32];
	int64_t deadline = mono_ms() + READY_MS;
	for (int i = 0;; i++) {
		pthread_mutex_lock(&f.lock);
		int left = f.garbage_n;
		if (left)
			snprintf(name, sizeof name, "more-%d", i), fake_create(&f, name, 1, NULL, NULL, 0, id);
		pthread_mutex_unlock(&f.lock);
		if (!left || mono_ms() > deadline)
			break;
		usleep(50000);
	}
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.garbage_n, 0, "every garbage answer was sent");
	int64_t last = sluice_image_offset(f.img);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_controller_stats st;
	sluice_meta_controller_stats(&m, &st);
	cr_assert_geq(st.reconnects, 9);
	struct sluice_meta_snapshot *s = snap_at(&m, last);
	assert_same_state(s, &f);
	m.ops->release(m.self, s);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* Producer ids come one by one from the blocks the controller hands out. */
Test(meta_controller, producer_ids_from_controller_blocks)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	for (int64_t i = 0; i < 7; i++)
		cr_assert_eq(m.ops->allocate_producer_id(m.self), 1000 + i);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.pid_next, 1009, "three blocks of three");
	pthread_mutex_unlock(&f.lock);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* A controlled shutdown heartbeats WantShutDown until ShouldShutDown and
 * writes the broker epoch, which the next start sends as
 * PreviousBrokerEpoch (once: the file is removed at start). */
Test(meta_controller, controlled_shutdown_keeps_epoch)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	cr_assert_eq(sluice_meta_controller_shutdown(&m, 10000), 0);
	pthread_mutex_lock(&f.lock);
	cr_assert(f.want_shutdown);
	int64_t epoch = sluice_image_broker(f.img, NODE)->epoch;
	pthread_mutex_unlock(&f.lock);
	sluice_meta_controller_close(&m);
	client_open(&m, &f, NULL);
	client_ready(&m);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.previous_epoch, epoch);
	pthread_mutex_unlock(&f.lock);
	char path[128];
	snprintf(path, sizeof path, "%s/sluice-broker-epoch", dir);
	cr_assert_neq(access(path, F_OK), 0, "removed at start");
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* No controller at all: wait_ready times out saying what is missing,
 * and a submitted batch fails with REQUEST_TIMED_OUT at close. */
Test(meta_controller, no_controller_is_reported)
{
	struct fake f;
	fake_start(&f, 1);
	fake_stop(&f); /* its port is now closed */
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	char err[512];
	cr_assert_eq(sluice_meta_controller_wait_ready(&m, 300, err, sizeof err), -1);
	cr_assert(strstr(err, "not registered"), "%s", err);
	struct waiter *w = calloc(1, sizeof *w);
	w->m = &m;
	sem_init(&w->done, 0, 0);
	w->changes[0] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_TOPIC, .name = "t", .name_len = 1,
						    .partitions = 1, .replication_factor = -1};
	w->batch = (struct sluice_meta_batch){.changes = w->changes, .change_n = 1, .done = waiter_done, .arg = w};
	cr_assert_eq(m.ops->submit(m.self, &w->batch), SLUICE_META_SUBMITTED);
	sluice_meta_controller_close(&m);
	waiter_wait(w);
	cr_assert_eq(w->changes[0].error, KERR_REQUEST_TIMED_OUT);
	sem_destroy(&w->done);
	free(w);
}

static const struct sluice_topic_config *config_of(const struct sluice_topic *t, const char *key)
{
	for (int32_t i = 0; i < t->config_n; i++)
		if (!strcmp(t->configs[i].key, key))
			return &t->configs[i];
	return NULL;
}

/* One batch of every kind: configs replaced (as the difference: two SETs
 * and a DELETE), partitions grown, a producer id, a forgotten tombstone
 * (nothing to do), a deletion reporting the deleted topic's id; the
 * completion's snapshot shows all of it. Replacing configs by the same
 * ones sends no operation. */
Test(meta_controller, batch_of_every_kind)
{
	struct fake f;
	fake_start(&f, 1);
	uint8_t gone_id[16], id[16];
	static const struct sluice_topic_config before[2] = {{"retention.ms", "1000"}, {"segment.bytes", "1048576"}};
	static const struct sluice_topic_config after[2] = {{"retention.ms", "2000"}, {"cleanup.policy", "compact"}};
	pthread_mutex_lock(&f.lock);
	fake_create(&f, "k", 2, NULL, before, 2, id);
	fake_create(&f, "gone", 3, NULL, NULL, 0, gone_id);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	struct waiter *w = calloc(1, sizeof *w);
	w->m = &m;
	sem_init(&w->done, 0, 0);
	struct sluice_topic gone_out;
	w->changes[0] = (struct sluice_meta_change){.kind = SLUICE_META_SET_TOPIC_CONFIGS, .name = "k", .name_len = 1,
						    .configs = after, .config_n = 2};
	w->changes[1] = (struct sluice_meta_change){.kind = SLUICE_META_CREATE_PARTITIONS, .name = "k", .name_len = 1,
						    .partitions = 5};
	w->changes[2] = (struct sluice_meta_change){.kind = SLUICE_META_ALLOCATE_PRODUCER_ID};
	w->changes[3] = (struct sluice_meta_change){.kind = SLUICE_META_FORGET_DELETED, .id = gone_id};
	w->changes[4] = (struct sluice_meta_change){.kind = SLUICE_META_DELETE_TOPIC, .name = "gone", .name_len = 4,
						    .topic_out = &gone_out};
	w->batch = (struct sluice_meta_batch){.changes = w->changes, .change_n = 5, .done = waiter_done, .arg = w};
	cr_assert_eq(m.ops->submit(m.self, &w->batch), SLUICE_META_SUBMITTED);
	waiter_wait(w);
	for (int i = 0; i < 5; i++)
		cr_assert_eq(w->changes[i].error, 0, "change %d: %s", i, w->changes[i].msg);
	cr_assert(w->seen[0] && w->seen[1] && !w->seen[4]);
	cr_assert_eq(w->changes[1].topic_partitions, 5);
	cr_assert_eq(w->changes[2].producer_id, 1000);
	cr_assert_eq(memcmp(w->changes[4].topic_id, gone_id, 16), 0, "the deleted topic's id");
	cr_assert_eq(w->changes[4].topic_partitions, 3);
	cr_assert_str_eq(gone_out.name, "gone");
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.config_ops, 3, "SET retention.ms, SET cleanup.policy, DELETE segment.bytes");
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	const struct sluice_topic *k = sluice_meta_find(s, "k", 1);
	cr_assert_not_null(k);
	cr_assert_eq(k->partitions, 5);
	cr_assert_eq(k->config_n, 2);
	cr_assert_str_eq(config_of(k, "retention.ms")->value, "2000");
	cr_assert_str_eq(config_of(k, "cleanup.policy")->value, "compact");
	cr_assert_eq(k->limits.retention_ms, 2000);
	cr_assert_null(sluice_meta_find(s, "gone", 4));
	assert_same_state(s, &f);
	m.ops->release(m.self, s);
	char msg[256];
	cr_assert_eq(m.ops->set_topic_configs(m.self, "k", 1, after, 2, false, msg, sizeof msg), 0, "%s", msg);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.config_ops, 3, "the same configs again: no operation");
	pthread_mutex_unlock(&f.lock);
	cr_assert_eq(m.ops->create_partitions(m.self, "k", 1, 4, false, msg, sizeof msg), KERR_INVALID_PARTITIONS);
	cr_assert_str_eq(msg, "refused by the fake");
	cr_assert_eq(m.ops->delete_topic(m.self, "nope", 4, NULL, msg, sizeof msg), KERR_UNKNOWN_TOPIC_OR_PARTITION);
	sem_destroy(&w->done);
	free(w);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* Validate-only changes are checked by the controller and change nothing. */
Test(meta_controller, validate_only_changes_nothing)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	char msg[256];
	struct sluice_topic out;
	struct sluice_topic_spec spec = {.name = "v", .name_len = 1, .partitions = 6, .replication_factor = -1};
	cr_assert_eq(m.ops->create_topic(m.self, &spec, true, msg, sizeof msg, &out), 0, "%s", msg);
	cr_assert_str_eq(out.name, "v");
	cr_assert_eq(out.partitions, 6);
	cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), 0, "%s", msg);
	cr_assert_eq(m.ops->create_partitions(m.self, "v", 1, 9, true, msg, sizeof msg), 0, "%s", msg);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.creates, 1);
	cr_assert_eq(sluice_image_topic_by_name(f.img, "v", 1)->partition_n, 6);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert_eq(sluice_meta_find(s, "v", 1)->partitions, 6);
	m.ops->release(m.self, s);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* batch_begin .. batch_commit sends the staged changes together and
 * answers with the first failure. */
Test(meta_controller, batch_begin_commit)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	char msg[256];
	struct sluice_topic_spec spec = {.partitions = 1, .replication_factor = -1};
	m.ops->batch_begin(m.self);
	const char *names[] = {"a", "b", "a"};
	for (int i = 0; i < 3; i++) {
		spec.name = names[i];
		spec.name_len = 1;
		cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), 0, "staged");
	}
	cr_assert_eq(m.ops->batch_commit(m.self, msg, sizeof msg), KERR_TOPIC_ALREADY_EXISTS);
	cr_assert_str_eq(msg, "a: refused by the fake");
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	cr_assert(sluice_meta_find(s, "a", 1) && sluice_meta_find(s, "b", 1));
	m.ops->release(m.self, s);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.creates, 2);
	pthread_mutex_unlock(&f.lock);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

struct relay {
	sem_t done;
	int16_t error;
	char body[64];
	size_t len;
};

static void relay_done(void *arg, int16_t error, const uint8_t *resp, size_t len)
{
	struct relay *r = arg;
	r->error = error;
	r->len = len < sizeof r->body ? len : sizeof r->body;
	if (resp)
		memcpy(r->body, resp, r->len);
	sem_post(&r->done);
}

/* forward() relays a request body to the active controller and hands
 * back the answer's body; without a controller, REQUEST_TIMED_OUT. */
Test(meta_controller, forward_relays_to_controller)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	struct relay r = {.error = -2};
	sem_init(&r.done, 0, 0);
	static const uint8_t body[] = {0x02, 0x13, '_', '_', 'c', 0x00};
	cr_assert_eq(m.ops->forward(m.self, 55, 2, body, sizeof body, relay_done, &r), 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	cr_assert_eq(sem_timedwait(&r.done, &ts), 0);
	cr_assert_eq(r.error, 0);
	cr_assert_eq(r.len, sizeof body);
	cr_assert_eq(memcmp(r.body, body, sizeof body), 0);
	cr_assert_eq(m.ops->forward(m.self, 30000, 0, body, sizeof body, relay_done, &r), -1, "unknown api key");
	fake_stop(&f);
	cr_assert_eq(m.ops->forward(m.self, 55, 2, body, sizeof body, relay_done, &r), 0);
	sluice_meta_controller_close(&m); /* no controller: fails at close at the latest */
	cr_assert_eq(sem_timedwait(&r.done, &ts), 0);
	cr_assert_eq(r.error, KERR_REQUEST_TIMED_OUT);
	sem_destroy(&r.done);
}

/* One change of an IncrementalAlterConfigs v1 body: resource (type 4 =
 * BROKER), name, key, value (NULL: DELETE). */
struct iac_change {
	const char *resource, *key, *value;
};

static void iac_encode(struct kwr *w, const struct iac_change *ch, int n)
{
	kwr_array(w, true, n);
	for (int i = 0; i < n; i++) {
		kwr_i8(w, SLUICE_MREC_RESOURCE_BROKER);
		kwr_cstr(w, true, ch[i].resource);
		kwr_array(w, true, 1);
		kwr_cstr(w, true, ch[i].key);
		kwr_i8(w, ch[i].value ? 0 : 1);
		kwr_cstr(w, true, ch[i].value);
		kwr_tags_empty(w);
		kwr_tags_empty(w);
	}
	kwr_bool(w, false);
	kwr_tags_empty(w);
}

static void relay_iac(struct sluice_meta *m, const struct iac_change *ch, int n)
{
	struct relay r = {.error = -2};
	sem_init(&r.done, 0, 0);
	struct kwr w;
	kwr_init(&w, 256, 1 << 20);
	iac_encode(&w, ch, n);
	cr_assert_eq(m->ops->forward(m->self, 44, 1, w.buf, w.len, relay_done, &r), 0);
	kwr_free(&w);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	cr_assert_eq(sem_timedwait(&r.done, &ts), 0);
	cr_assert_eq(r.error, 0);
	struct krd rd;
	krd_init(&rd, (const uint8_t *)r.body, r.len);
	(void)krd_i32(&rd);
	cr_assert_eq(krd_array(&rd, true, 6), n);
	for (int i = 0; i < n; i++) {
		cr_assert_eq(krd_i16(&rd), 0, "resource %d answered", i);
		(void)krd_string(&rd, true);
		(void)krd_i8(&rd);
		(void)krd_string(&rd, true);
		krd_tags_skip(&rd);
	}
	sem_destroy(&r.done);
}

/* Proves that a relayed IncrementalAlterConfigs of BROKER resources is
 * answered only once this broker's snapshot shows the change (the answer
 * refused with NOT_CONTROLLER first is sent again), and that the snapshot's
 * dynamic configuration is this broker's own override over the
 * cluster-wide default over the static file, another broker's ignored; a
 * deleted override gives the lower level back, and with none left the
 * snapshot carries none. A non-flexible relay (v0) is answered too. */
Test(meta_controller, relayed_broker_configs_reach_the_snapshot)
{
	static struct sluice_config base;
	char err[256];
	sluice_config_defaults(&base);
	cr_assert_eq(sluice_config_set(&base, "message.max.bytes", "1500000", err, sizeof err), 0);
	cr_assert_eq(sluice_config_derive(&base, err, sizeof err), 0, "%s", err);
	client_base = &base;
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	pthread_mutex_lock(&f.lock);
	f.alter_refusals = 1;
	pthread_mutex_unlock(&f.lock);
	const struct iac_change set[] = {
		{"", "message.max.bytes", "3000"},
		{"7", "message.max.bytes", "2000"},
		{"7", "log.retention.bytes", "5555"},
		{"8", "message.max.bytes", "100"},
	};
	relay_iac(&m, set, 4);
	pthread_mutex_lock(&f.lock);
	cr_assert_eq(f.alter_refusals, 0, "refused once, then sent again");
	cr_assert_eq(f.config_ops, 4);
	pthread_mutex_unlock(&f.lock);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	const struct sluice_broker_config *bc = s->broker_config;
	cr_assert_not_null(bc, "the answer came after the snapshot showed it");
	cr_assert_eq(bc->effective.message_max_bytes, 2000);
	cr_assert_eq(bc->effective.log_retention_bytes, 5555);
	cr_assert_eq(bc->own_n, 2);
	cr_assert_eq(bc->default_n, 1);
	cr_assert_str_eq(sluice_broker_config_get(bc, false, "message.max.bytes"), "3000");
	cr_assert_eq(sluice_meta_config(s, &base)->message_max_bytes, 2000);
	m.ops->release(m.self, s);

	const struct iac_change del_own[] = {{"7", "message.max.bytes", NULL}};
	relay_iac(&m, del_own, 1);
	s = m.ops->acquire(m.self);
	cr_assert_eq(s->broker_config->effective.message_max_bytes, 3000, "the cluster-wide default again");
	m.ops->release(m.self, s);
	const struct iac_change del_default[] = {{"", "message.max.bytes", NULL}};
	relay_iac(&m, del_default, 1);
	s = m.ops->acquire(m.self);
	cr_assert_eq(s->broker_config->effective.message_max_bytes, 1500000, "the static file's");
	m.ops->release(m.self, s);
	const struct iac_change del_last[] = {{"7", "log.retention.bytes", NULL}};
	relay_iac(&m, del_last, 1);
	s = m.ops->acquire(m.self);
	cr_assert_null(s->broker_config, "no override left");
	cr_assert_eq(sluice_meta_config(s, &base)->message_max_bytes, 1500000);
	m.ops->release(m.self, s);

	/* v0 (not flexible): no SluiceMetadataOffset; answered after a later fetch */
	struct relay r = {.error = -2};
	sem_init(&r.done, 0, 0);
	/* the fake echoes it: as an answer, ThrottleTimeMs 0 and no resources */
	static const uint8_t v0[] = {0, 0, 0, 0, 0, 0, 0, 0};
	cr_assert_eq(m.ops->forward(m.self, 44, 0, v0, sizeof v0, relay_done, &r), 0);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	cr_assert_eq(sem_timedwait(&r.done, &ts), 0);
	cr_assert_eq(r.error, 0);
	sem_destroy(&r.done);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

/* Adoption's create: every partition's one replica named by the broker
 * (CreateTopics Assignments, with NumPartitions and ReplicationFactor -1),
 * the topic id kept; also when staged between batch_begin and commit. */
Test(meta_controller, create_with_replica_node)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	static const uint8_t old_id[16] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9};
	int32_t node = 42;
	char msg[256];
	struct sluice_topic_spec spec = {.name = "adopted", .name_len = 7, .partitions = 3, .replication_factor = -1,
					 .id = old_id, .replica_node = &node};
	cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), 0, "%s", msg);
	m.ops->batch_begin(m.self);
	spec.name = "staged";
	spec.name_len = 6;
	spec.id = NULL;
	int32_t node2 = 43;
	spec.replica_node = &node2;
	cr_assert_eq(m.ops->create_topic(m.self, &spec, false, msg, sizeof msg, NULL), 0);
	node2 = -5; /* staged: the value was copied */
	cr_assert_eq(m.ops->batch_commit(m.self, msg, sizeof msg), 0, "%s", msg);
	struct sluice_meta_snapshot *s = m.ops->acquire(m.self);
	const struct sluice_topic *t = sluice_meta_find(s, "adopted", 7);
	cr_assert_not_null(t);
	cr_assert_eq(memcmp(t->id, old_id, 16), 0);
	cr_assert_eq(t->partitions, 3);
	for (int32_t p = 0; p < 3; p++) {
		const struct sluice_partition_state *st = sluice_topic_partition(t, p);
		cr_assert(st->replica_n == 1 && st->replicas[0] == 42 && st->leader == 42);
	}
	t = sluice_meta_find(s, "staged", 6);
	cr_assert(t && sluice_topic_partition(t, 2)->replicas[0] == 43);
	m.ops->release(m.self, s);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
}

static bool config_has_key(const struct sluice_config *cfg, const char *key)
{
	const char *name;
	char v[SLUICE_CONFIG_STRING_MAX];
	bool def;
	for (size_t i = 0; sluice_config_entry(cfg, i, &name, v, sizeof v, &def); i++)
		if (!strcmp(name, key))
			return true;
	return false;
}

/* The settings come from the broker's properties by name (advertised
 * listeners before listeners); bad ones refuse to open, naming the key. */
Test(meta_controller, settings_from_config_and_refusals)
{
	struct sluice_config cfg;
	char err[512] = "";
	sluice_config_defaults(&cfg);
	cr_assert_eq(sluice_config_set(&cfg, "node.id", "4", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(&cfg, "listeners", "PLAINTEXT://0.0.0.0:9092", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(&cfg, "advertised.listeners", "EXTERNAL://h1:9092", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(&cfg, "broker.rack", "r9", err, sizeof err), 0, "%s", err);
	cr_assert_eq(sluice_config_set(&cfg, "cluster.id", "abc", err, sizeof err), 0, "%s", err);
	bool cluster_keys = config_has_key(&cfg, "controller.quorum.voters"); /* the broker's keys, once merged */
	if (cluster_keys) {
		cr_assert_eq(sluice_config_set(&cfg, "controller.quorum.voters", "1@c1:9093", err, sizeof err), 0, "%s", err);
		cr_assert_eq(sluice_config_set(&cfg, "broker.heartbeat.interval.ms", "700", err, sizeof err), 0, "%s", err);
	}
	struct sluice_meta_controller_config cc;
	sluice_meta_controller_config_from(&cc, &cfg);
	cr_assert_eq(cc.node_id, 4);
	cr_assert_str_eq(cc.listeners, "EXTERNAL://h1:9092");
	cr_assert_str_eq(cc.rack, "r9");
	cr_assert_str_eq(cc.cluster_id, "abc");
	cr_assert_str_eq(cc.quorum_voters, cluster_keys ? "1@c1:9093" : "");
	cr_assert_eq(cc.heartbeat_interval_ms, cluster_keys ? 700 : 2000);
	struct sluice_meta m;
	cc.quorum_voters[0] = cc.bootstrap_servers[0] = '\0';
	cr_assert_eq(sluice_meta_controller_open_config(&m, &cc, dir, err, sizeof err), -1);
	cr_assert(strstr(err, "controller.quorum.voters"), "%s", err);
	snprintf(cc.quorum_voters, sizeof cc.quorum_voters, "1@c1:9093,c2:9093");
	cr_assert_eq(sluice_meta_controller_open_config(&m, &cc, dir, err, sizeof err), -1);
	cr_assert(strstr(err, "'c2:9093' is not id@host:port"), "%s", err);
	snprintf(cc.quorum_voters, sizeof cc.quorum_voters, "1@c1:99999");
	cr_assert_eq(sluice_meta_controller_open_config(&m, &cc, dir, err, sizeof err), -1);
	cr_assert(strstr(err, "is not host:port"), "%s", err);
	cc.quorum_voters[0] = '\0';
	snprintf(cc.bootstrap_servers, sizeof cc.bootstrap_servers, "[::1]:9093, c2:9093");
	cc.cluster_id[0] = '\0';
	cr_assert_eq(sluice_meta_controller_open_config(&m, &cc, dir, err, sizeof err), -1);
	cr_assert(strstr(err, "cluster.id"), "%s", err);
	snprintf(cc.cluster_id, sizeof cc.cluster_id, "abc");
	cr_assert_eq(sluice_meta_controller_open_config(&m, &cc, dir, err, sizeof err), 0, "bootstrap servers: %s", err);
	cr_assert(sluice_meta_is_controller(&m));
	sluice_meta_controller_close(&m);
}

/* ---- AlterPartition: ISR changes batched ----------------------------------------- */

#define ISR_CHANGES 41
#define ISR_MANY 600

static void isr_change_done(struct sluice_meta_isr_change *c)
{
	sem_post(c->arg);
}

/* An ISR change of partition `partition` of one of three topics. */
static void isr_change_fill(struct sluice_meta_isr_change *c, int32_t partition, sem_t *sem)
{
	memset(c, 0, sizeof *c);
	memset(c->topic_id, 0xa0 + partition % 3, 16);
	c->partition = partition;
	c->leader_epoch = 5;
	c->partition_epoch = 10 + partition;
	c->isr_n = 2;
	c->isr[0] = NODE;
	c->isr[1] = 8;
	c->done = isr_change_done;
	c->arg = sem;
}

static void isr_wait_all(sem_t *sem, int n)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 30;
	for (int i = 0; i < n; i++)
		cr_assert_eq(sem_timedwait(sem, &ts), 0, "ISR change %d of %d answered", i, n);
}

/* Submits the first of changes[0..n), waits until the fake holds its
 * request, then submits the rest: they wait for the answer together. */
static void isr_submit_behind_one(struct sluice_meta *m, struct fake *f, struct sluice_meta_isr_change *changes, int n)
{
	int before = __atomic_load_n(&f->alter_requests, __ATOMIC_ACQUIRE);
	cr_assert_eq(m->ops->alter_partition(m->self, &changes[0]), 0);
	int64_t deadline = mono_ms() + READY_MS;
	while (__atomic_load_n(&f->alter_requests, __ATOMIC_ACQUIRE) == before && mono_ms() < deadline)
		usleep(1000);
	cr_assert_eq(__atomic_load_n(&f->alter_requests, __ATOMIC_ACQUIRE), before + 1);
	for (int i = 1; i < n; i++)
		cr_assert_eq(m->ops->alter_partition(m->self, &changes[i]), 0);
}

/* Proves that the ISR changes submitted while an AlterPartition is out go
 * together in the next one (three topics, one request), each answered
 * with its own partition's result (one refused among accepted ones); that
 * a request carries at most SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX
 * (the rest go in the one after); that an answer that does not parse
 * fails every change it answers; and that the counters say how many
 * requests carried how many changes. */
Test(meta_controller, alter_partition_batches_isr_changes)
{
	struct fake f;
	fake_start(&f, 1);
	struct sluice_meta m;
	client_open(&m, &f, NULL);
	client_ready(&m);
	sem_t sem;
	sem_init(&sem, 0, 0);
	pthread_mutex_lock(&f.lock);
	f.alter_delay_ms = 300;
	pthread_mutex_unlock(&f.lock);

	static struct sluice_meta_isr_change changes[ISR_MANY + 1];
	for (int i = 0; i < ISR_CHANGES; i++)
		isr_change_fill(&changes[i], i, &sem);
	isr_submit_behind_one(&m, &f, changes, ISR_CHANGES);
	isr_wait_all(&sem, ISR_CHANGES);
	cr_assert_eq(__atomic_load_n(&f.alter_requests, __ATOMIC_ACQUIRE), 2, "one request, then one for the rest");
	cr_assert_eq(__atomic_load_n(&f.alter_partitions, __ATOMIC_ACQUIRE), ISR_CHANGES);
	cr_assert_eq(__atomic_load_n(&f.alter_last_n, __ATOMIC_ACQUIRE), ISR_CHANGES - 1);
	for (int i = 0; i < ISR_CHANGES; i++) {
		const struct sluice_meta_isr_change *c = &changes[i];
		if (i == 13) {
			cr_assert_eq(c->error, KERR_FENCED_LEADER_EPOCH, "partition 13 refused alone");
			continue;
		}
		cr_assert_eq(c->error, 0, "partition %d: %d", i, c->error);
		cr_assert_eq(c->result.leader, NODE);
		cr_assert_eq(c->result.leader_epoch, 5);
		cr_assert_eq(c->result.partition_epoch, 11 + i, "partition %d has its own answer", i);
		cr_assert_eq(c->result.isr_n, 2);
		cr_assert_eq(c->result.isr[1], 8);
	}
	struct sluice_meta_controller_stats st;
	sluice_meta_controller_stats(&m, &st);
	cr_assert_eq(st.alter_partition_requests, 2);
	cr_assert_eq(st.alter_partition_changes, ISR_CHANGES);

	/* More than one request holds: the rest go in the next. */
	for (int i = 0; i < ISR_MANY + 1; i++)
		isr_change_fill(&changes[i], i, &sem);
	isr_submit_behind_one(&m, &f, changes, ISR_MANY + 1);
	isr_wait_all(&sem, ISR_MANY + 1);
	cr_assert_eq(__atomic_load_n(&f.alter_most_n, __ATOMIC_ACQUIRE), SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX);
	cr_assert_eq(__atomic_load_n(&f.alter_requests, __ATOMIC_ACQUIRE), 5, "1, 500, then 100");
	cr_assert_eq(__atomic_load_n(&f.alter_last_n, __ATOMIC_ACQUIRE), ISR_MANY - SLUICE_META_CONTROLLER_ALTER_PARTITIONS_MAX);
	for (int i = 0; i < ISR_MANY + 1; i++)
		cr_assert_eq(changes[i].error, i == 13 ? KERR_FENCED_LEADER_EPOCH : 0, "partition %d", i);

	/* An answer that does not parse: every change of it fails. */
	pthread_mutex_lock(&f.lock);
	f.alter_garbage = true;
	pthread_mutex_unlock(&f.lock);
	for (int i = 0; i < 4; i++)
		isr_change_fill(&changes[i], i, &sem);
	isr_submit_behind_one(&m, &f, changes, 4);
	isr_wait_all(&sem, 4);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(changes[i].error, KERR_UNKNOWN_SERVER_ERROR, "change %d", i);
	sluice_meta_controller_stats(&m, &st);
	cr_assert_eq(st.alter_partition_requests, 7);
	cr_assert_eq(st.alter_partition_changes, ISR_CHANGES + ISR_MANY + 1 + 4);
	sluice_meta_controller_close(&m);
	fake_stop(&f);
	sem_destroy(&sem);
}
