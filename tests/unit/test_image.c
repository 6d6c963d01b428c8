/* Cluster image tests (control/image.c). They prove that: each record type
 * applies with Kafka's semantics (a registration replaces the broker's;
 * fencing, unfencing and registration changes need the broker's current
 * epoch; topics are unique by name and id; partitions arrive in order;
 * partition changes merge as Kafka's PartitionRegistration.merge, bumping
 * the leader epoch for a leader field and the partition epoch always;
 * removing a topic removes its configs; configs are set and deleted; the
 * producer id allocator only moves forward; offsets only grow); every
 * refused record leaves the image equal to an untouched twin; the image's
 * own records (sluice_image_encode), passed through the codec and applied
 * to an empty image, rebuild an equal image; sluice_image_equal notices
 * each kind of difference; the limits refuse what is past them; and
 * 100,000 topics are created, looked up by name and id, iterated in name
 * order, encoded and rebuilt quickly.
 * The metadata log window (control/mlog.c) is tested at the end of this
 * file: see the comment there. */
#include "control/image.h"
#include "control/mlog.h"
#include "common/crc32c.h"
#include "common/kafka/batch.h"
#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- record builders ------------------------------------------------------------- */

static char err[512];

static void topic_id(uint8_t id[16], uint32_t n)
{
	for (int i = 0; i < 16; i++)
		id[i] = (uint8_t)(0xa0 + i);
	id[0] = (uint8_t)(n >> 24);
	id[1] = (uint8_t)(n >> 16);
	id[2] = (uint8_t)(n >> 8);
	id[3] = (uint8_t)n;
}

static struct sluice_mrec mk(enum sluice_mrec_type t)
{
	struct sluice_mrec r;
	memset(&r, 0, sizeof r);
	r.type = t;
	return r;
}

static struct sluice_mrec mk_register(int32_t id, int64_t epoch, const char *host, uint16_t port)
{
	struct sluice_mrec r = mk(SLUICE_MREC_REGISTER_BROKER);
	r.register_broker.broker_id = id;
	r.register_broker.incarnation_id[0] = (uint8_t)id;
	r.register_broker.incarnation_id[15] = (uint8_t)epoch;
	r.register_broker.broker_epoch = epoch;
	r.register_broker.endpoint_n = 1;
	strcpy(r.register_broker.endpoints[0].name, "PLAINTEXT");
	snprintf(r.register_broker.endpoints[0].host, sizeof r.register_broker.endpoints[0].host, "%s", host);
	r.register_broker.endpoints[0].port = port;
	r.register_broker.fenced = true;
	return r;
}

static struct sluice_mrec mk_fence(enum sluice_mrec_type t, int32_t id, int64_t epoch)
{
	struct sluice_mrec r = mk(t);
	if (t == SLUICE_MREC_UNREGISTER_BROKER) {
		r.unregister_broker.broker_id = id;
		r.unregister_broker.broker_epoch = epoch;
	} else {
		r.fence_broker.id = id;
		r.fence_broker.epoch = epoch;
	}
	return r;
}

static struct sluice_mrec mk_brc(int32_t id, int64_t epoch, int8_t fenced, int8_t shutdown)
{
	struct sluice_mrec r = mk(SLUICE_MREC_BROKER_REGISTRATION_CHANGE);
	r.broker_registration_change.broker_id = id;
	r.broker_registration_change.broker_epoch = epoch;
	r.broker_registration_change.fenced = fenced;
	r.broker_registration_change.in_controlled_shutdown = shutdown;
	return r;
}

static struct sluice_mrec mk_topic(const char *name, uint32_t idn)
{
	struct sluice_mrec r = mk(SLUICE_MREC_TOPIC);
	snprintf(r.topic.name, sizeof r.topic.name, "%s", name);
	topic_id(r.topic.topic_id, idn);
	return r;
}

static struct sluice_mrec mk_partition(uint32_t idn, int32_t p, int32_t leader, int32_t replica_n)
{
	struct sluice_mrec r = mk(SLUICE_MREC_PARTITION);
	topic_id(r.partition.topic_id, idn);
	r.partition.partition_id = p;
	r.partition.leader = leader;
	r.partition.replicas.n = r.partition.isr.n = replica_n;
	for (int32_t i = 0; i < replica_n; i++)
		r.partition.replicas.id[i] = r.partition.isr.id[i] = leader + i;
	return r;
}

static struct sluice_mrec mk_change(uint32_t idn, int32_t p)
{
	struct sluice_mrec r = mk(SLUICE_MREC_PARTITION_CHANGE);
	topic_id(r.partition_change.topic_id, idn);
	r.partition_change.partition_id = p;
	return r;
}

static struct sluice_mrec mk_remove(uint32_t idn)
{
	struct sluice_mrec r = mk(SLUICE_MREC_REMOVE_TOPIC);
	topic_id(r.remove_topic.topic_id, idn);
	return r;
}

static struct sluice_mrec mk_config(int8_t type, const char *rname, const char *name, const char *value)
{
	struct sluice_mrec r = mk(SLUICE_MREC_CONFIG);
	r.config.resource_type = type;
	snprintf(r.config.resource_name, sizeof r.config.resource_name, "%s", rname);
	snprintf(r.config.name, sizeof r.config.name, "%s", name);
	r.config.value_null = !value;
	if (value)
		snprintf(r.config.value, sizeof r.config.value, "%s", value);
	return r;
}

static struct sluice_mrec mk_pids(int64_t next)
{
	struct sluice_mrec r = mk(SLUICE_MREC_PRODUCER_IDS);
	r.producer_ids.broker_id = 1;
	r.producer_ids.broker_epoch = 5;
	r.producer_ids.next_producer_id = next;
	return r;
}

/* Apply at the next offset; the test fails if it is refused. */
static void ok(struct sluice_image *img, struct sluice_mrec r)
{
	int64_t off = sluice_image_offset(img) + 1;
	cr_assert_eq(sluice_image_apply(img, &r, off, err, sizeof err), 0, "%s refused: %s",
		     sluice_mrec_type_name(r.type), err);
	cr_assert_eq(sluice_image_offset(img), off);
}

/* A refused record: -1, an error text, and the image equal to its twin. */
static void refused(struct sluice_image *img, const struct sluice_image *twin, struct sluice_mrec r, const char *why)
{
	err[0] = '\0';
	cr_expect_eq(sluice_image_apply(img, &r, sluice_image_offset(img) + 1, err, sizeof err), -1, "%s: accepted",
		     why);
	cr_expect(err[0] != '\0', "%s: no error text", why);
	if (twin)
		cr_expect(sluice_image_equal(img, twin), "%s: a refused record changed the image", why);
}

/* ---- brokers -------------------------------------------------------------------- */

Test(image, an_empty_image)
{
	struct sluice_image *img = sluice_image_new();
	uint8_t id[16];
	topic_id(id, 1);
	cr_expect_eq(sluice_image_offset(img), -1);
	cr_expect_eq(sluice_image_broker_count(img), 0);
	cr_expect_null(sluice_image_broker_at(img, 0));
	cr_expect_null(sluice_image_broker(img, 1));
	cr_expect_eq(sluice_image_topic_count(img), 0);
	cr_expect_null(sluice_image_topic_at(img, 0));
	cr_expect_null(sluice_image_topic_by_name(img, "a", 1));
	cr_expect_null(sluice_image_topic_by_id(img, id));
	cr_expect_null(sluice_image_config(img, SLUICE_MREC_RESOURCE_BROKER, "", "x"));
	cr_expect_eq(sluice_image_next_producer_id(img), 0);
	struct sluice_image *other = sluice_image_new();
	cr_expect(sluice_image_equal(img, other));
	sluice_image_free(other);
	sluice_image_free(img);
}

Test(image, brokers_register_fence_unfence_shut_down_and_unregister)
{
	struct sluice_image *img = sluice_image_new(), *twin = sluice_image_new();
	struct sluice_mrec seq[] = {mk_register(5, 0, "h5", 9095), mk_register(1, 1, "h1", 9091),
				    mk_register(3, 2, "h3", 9093)};
	for (size_t i = 0; i < 3; i++) {
		ok(img, seq[i]);
		ok(twin, seq[i]);
	}
	cr_assert_eq(sluice_image_broker_count(img), 3);
	cr_expect_eq(sluice_image_broker_at(img, 0)->id, 1); /* sorted by id */
	cr_expect_eq(sluice_image_broker_at(img, 1)->id, 3);
	cr_expect_eq(sluice_image_broker_at(img, 2)->id, 5);
	const struct sluice_image_broker *b = sluice_image_broker(img, 3);
	cr_assert_not_null(b);
	cr_expect(b->fenced && !b->in_controlled_shutdown && b->epoch == 2 && b->endpoint_n == 1);
	cr_expect_str_eq(b->endpoints[0].host, "h3");
	cr_expect_eq(b->endpoints[0].port, 9093);

	refused(img, twin, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 3, 1), "unfence with a stale epoch");
	refused(img, twin, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 4, 2), "unfence of an unknown broker");
	refused(img, twin, mk_fence(SLUICE_MREC_FENCE_BROKER, 3, 7), "fence with a wrong epoch");
	refused(img, twin, mk_brc(3, 1, -1, 1), "registration change with a stale epoch");
	refused(img, twin, mk_brc(3, 2, 2, -1), "registration change with an unknown fencing value");
	refused(img, twin, mk_fence(SLUICE_MREC_UNREGISTER_BROKER, 3, 0), "unregister with a wrong epoch");
	refused(img, twin, mk_fence(SLUICE_MREC_UNREGISTER_BROKER, 9, 0), "unregister of an unknown broker");

	ok(img, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 3, 2));
	cr_expect(!sluice_image_broker(img, 3)->fenced);
	ok(img, mk_brc(3, 2, -1, 1));
	cr_expect(!sluice_image_broker(img, 3)->fenced && sluice_image_broker(img, 3)->in_controlled_shutdown);
	ok(img, mk_brc(3, 2, 1, -1));
	cr_expect(sluice_image_broker(img, 3)->fenced && sluice_image_broker(img, 3)->in_controlled_shutdown);
	ok(img, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 3, 2));
	ok(img, mk_fence(SLUICE_MREC_FENCE_BROKER, 3, 2));
	cr_expect(sluice_image_broker(img, 3)->fenced);

	/* A new registration replaces the old one whole: new epoch, endpoints, shutdown cleared. */
	struct sluice_mrec again = mk_register(3, 10, "new-host", 19093);
	strcpy(again.register_broker.rack, "r1");
	ok(img, again);
	b = sluice_image_broker(img, 3);
	cr_expect(b->epoch == 10 && b->fenced && !b->in_controlled_shutdown);
	cr_expect_str_eq(b->endpoints[0].host, "new-host");
	cr_expect_str_eq(b->rack, "r1");
	cr_expect_eq(sluice_image_broker_count(img), 3);
	refused(img, NULL, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 3, 2), "unfence with the old registration's epoch");

	ok(img, mk_fence(SLUICE_MREC_UNREGISTER_BROKER, 3, 10));
	cr_expect_null(sluice_image_broker(img, 3));
	cr_expect_eq(sluice_image_broker_count(img), 2);
	cr_expect_eq(sluice_image_broker_at(img, 1)->id, 5);
	sluice_image_free(img);
	sluice_image_free(twin);
}

Test(image, broker_limits)
{
	struct sluice_image *img = sluice_image_new();
	for (int32_t i = 0; i < SLUICE_IMAGE_BROKERS_MAX; i++)
		ok(img, mk_register(SLUICE_IMAGE_BROKERS_MAX - i, i, "h", 1)); /* descending: every insert at the front */
	cr_expect_eq(sluice_image_broker_count(img), SLUICE_IMAGE_BROKERS_MAX);
	for (size_t i = 0; i < SLUICE_IMAGE_BROKERS_MAX; i++)
		cr_expect_eq(sluice_image_broker_at(img, i)->id, (int32_t)i + 1);
	refused(img, NULL, mk_register(SLUICE_IMAGE_BROKERS_MAX + 1, 0, "h", 1), "one broker too many");
	ok(img, mk_register(7, 99, "re-registered", 2)); /* replacing one is still fine */
	struct sluice_mrec bad = mk_register(1, 0, "h", 1);
	bad.register_broker.endpoint_n = SLUICE_MREC_LISTENERS_MAX + 1;
	refused(img, NULL, bad, "too many endpoints");
	sluice_image_free(img);
}

/* ---- topics and partitions ------------------------------------------------------- */

Test(image, topics_are_unique_by_name_and_id)
{
	struct sluice_image *img = sluice_image_new(), *twin = sluice_image_new();
	ok(img, mk_topic("orders", 1));
	ok(twin, mk_topic("orders", 1));
	refused(img, twin, mk_topic("orders", 2), "same name");
	refused(img, twin, mk_topic("payments", 1), "same id");
	refused(img, twin, mk_topic("", 3), "empty name");
	struct sluice_mrec zero = mk_topic("zero", 0);
	memset(zero.topic.topic_id, 0, 16);
	refused(img, twin, zero, "the zero id");
	const struct sluice_image_topic *t = sluice_image_topic_by_name(img, "orders", 6);
	cr_assert_not_null(t);
	cr_expect_eq(t->partition_n, 0);
	cr_expect_eq(sluice_image_topic_by_id(img, t->id), t);
	cr_expect_null(sluice_image_topic_by_name(img, "order", 5));
	cr_expect_null(sluice_image_topic_by_name(img, "orderss", 7));
	/* the name need not be NUL-terminated */
	cr_expect_eq(sluice_image_topic_by_name(img, "ordersXYZ", 6), t);
	sluice_image_free(img);
	sluice_image_free(twin);
}

Test(image, partitions_arrive_in_order_and_changes_merge_as_kafka)
{
	struct sluice_image *img = sluice_image_new(), *twin = sluice_image_new();
	struct sluice_mrec setup[] = {mk_topic("t", 1), mk_partition(1, 0, 1, 3), mk_partition(1, 1, 2, 2)};
	for (size_t i = 0; i < 3; i++) {
		ok(img, setup[i]);
		ok(twin, setup[i]);
	}
	refused(img, twin, mk_partition(1, 3, 1, 1), "a gap");
	refused(img, twin, mk_partition(1, 1, 1, 1), "a partition that exists");
	refused(img, twin, mk_partition(2, 0, 1, 1), "a partition of an unknown topic");
	struct sluice_mrec bad = mk_partition(1, 2, 1, 1);
	bad.partition.leader_recovery_state = 2;
	refused(img, twin, bad, "an unknown leader recovery state");
	bad = mk_partition(1, 2, 1, 1);
	bad.partition.leader = -3;
	refused(img, twin, bad, "a leader below -1");
	bad = mk_partition(1, 2, 1, 1);
	bad.partition.isr.n = SLUICE_REPLICAS_MAX + 1;
	refused(img, twin, bad, "too many isr");

	const struct sluice_image_topic *t = sluice_image_topic_by_name(img, "t", 1);
	cr_assert_eq(t->partition_n, 2);
	const struct sluice_image_partition *p = &t->partitions[0];
	cr_expect(p->leader == 1 && p->replicas.n == 3 && p->replicas.id[2] == 3 && p->isr.n == 3);
	cr_expect(p->leader_epoch == 0 && p->partition_epoch == 0);

	struct sluice_mrec c = mk_change(1, 0); /* ISR shrink only: partition epoch */
	c.partition_change.has_isr = true;
	c.partition_change.isr.n = 1;
	c.partition_change.isr.id[0] = 1;
	ok(img, c);
	t = sluice_image_topic_by_name(img, "t", 1);
	p = &t->partitions[0];
	cr_expect(p->isr.n == 1 && p->leader == 1 && p->leader_epoch == 0 && p->partition_epoch == 1);
	c = mk_change(1, 0); /* new leader: both epochs */
	c.partition_change.has_leader = true;
	c.partition_change.leader = 2;
	ok(img, c);
	cr_expect(p->leader == 2 && p->leader_epoch == 1 && p->partition_epoch == 2);
	c.partition_change.leader = 2; /* the same leader again: Kafka's merge bumps the leader epoch anyway */
	ok(img, c);
	cr_expect(p->leader == 2 && p->leader_epoch == 2 && p->partition_epoch == 3);
	c = mk_change(1, 0); /* no field: still a change (partition epoch) */
	ok(img, c);
	cr_expect(p->leader_epoch == 2 && p->partition_epoch == 4);
	c = mk_change(1, 0);
	c.partition_change.has_leader = true;
	c.partition_change.leader = -1;
	c.partition_change.has_replicas = true;
	c.partition_change.replicas.n = 1;
	c.partition_change.replicas.id[0] = 9;
	c.partition_change.has_elr = c.partition_change.has_last_known_elr = true;
	c.partition_change.elr.n = 1;
	c.partition_change.elr.id[0] = 4;
	c.partition_change.has_leader_recovery_state = true;
	c.partition_change.leader_recovery_state = 1;
	ok(img, c);
	cr_expect(p->leader == -1 && p->leader_epoch == 3 && p->partition_epoch == 5 && p->replicas.n == 1 &&
		  p->replicas.id[0] == 9 && p->elr.n == 1 && p->elr.id[0] == 4 && p->last_known_elr.n == 0 &&
		  p->leader_recovery_state == 1);
	cr_expect(t->partitions[1].partition_epoch == 0 && t->partitions[1].leader == 2); /* the other untouched */

	sluice_image_free(twin);
	refused(img, NULL, mk_change(1, 2), "a change of a partition that does not exist");
	refused(img, NULL, mk_change(1, -1), "a change of partition -1");
	refused(img, NULL, mk_change(3, 0), "a change of an unknown topic");
	c = mk_change(1, 1);
	c.partition_change.has_leader_recovery_state = true;
	c.partition_change.leader_recovery_state = 5;
	refused(img, NULL, c, "an unknown leader recovery state");
	cr_expect(t->partitions[1].partition_epoch == 0);
	sluice_image_free(img);
}

static int collect(void *arg, const char *name, const char *value)
{
	char *out = arg;
	strcat(out, name);
	strcat(out, "=");
	strcat(out, value);
	strcat(out, ";");
	return 0;
}
static int stop_at_second(void *arg, const char *name, const char *value)
{
	(void)name;
	(void)value;
	return ++*(int *)arg == 2 ? 42 : 0;
}

Test(image, configs_set_replace_delete_and_die_with_their_topic)
{
	struct sluice_image *img = sluice_image_new(), *twin = sluice_image_new();
	struct sluice_mrec seq[] = {mk_topic("t", 1), mk_config(SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms", "1000"),
				    mk_config(SLUICE_MREC_RESOURCE_TOPIC, "t", "cleanup.policy", "compact"),
				    mk_config(SLUICE_MREC_RESOURCE_BROKER, "", "num.partitions", "3")};
	for (size_t i = 0; i < 4; i++) {
		ok(img, seq[i]);
		ok(twin, seq[i]);
	}
	cr_expect_str_eq(sluice_image_config(img, SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms"), "1000");
	cr_expect_str_eq(sluice_image_config(img, SLUICE_MREC_RESOURCE_BROKER, "", "num.partitions"), "3");
	cr_expect_null(sluice_image_config(img, SLUICE_MREC_RESOURCE_BROKER, "t", "retention.ms"));
	char all[256] = "";
	cr_expect_eq(sluice_image_configs(img, SLUICE_MREC_RESOURCE_TOPIC, "t", collect, all), 0);
	cr_expect_str_eq(all, "cleanup.policy=compact;retention.ms=1000;"); /* name order */
	int calls = 0;
	cr_expect_eq(sluice_image_configs(img, SLUICE_MREC_RESOURCE_TOPIC, "t", stop_at_second, &calls), 42);
	cr_expect_eq(calls, 2);

	refused(img, twin, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "nope", "retention.ms", "1"), "unknown topic");
	refused(img, twin, mk_config(3, "x", "a", "b"), "an unknown resource type");
	refused(img, twin, mk_config(SLUICE_MREC_RESOURCE_BROKER, "", "", "b"), "an empty config name");

	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms", "2000"));
	cr_expect_str_eq(sluice_image_config(img, SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms"), "2000");
	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms", NULL));
	cr_expect_null(sluice_image_config(img, SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms"));
	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "t", "retention.ms", NULL)); /* absent: nothing to do */
	ok(img, mk_config(SLUICE_MREC_RESOURCE_BROKER, "", "num.partitions", NULL));
	cr_expect_null(sluice_image_config(img, SLUICE_MREC_RESOURCE_BROKER, "", "num.partitions"));

	ok(img, mk_remove(1));
	cr_expect_null(sluice_image_topic_by_name(img, "t", 1));
	ok(img, mk_topic("t", 2)); /* the name again, a new topic: no configs of the old one */
	cr_expect_null(sluice_image_config(img, SLUICE_MREC_RESOURCE_TOPIC, "t", "cleanup.policy"));
	refused(img, NULL, mk_remove(1), "removing a removed topic");
	sluice_image_free(img);
	sluice_image_free(twin);
}

Test(image, producer_ids_only_move_forward)
{
	struct sluice_image *img = sluice_image_new(), *twin = sluice_image_new();
	ok(img, mk_pids(0)); /* the first block may start at 0 */
	ok(twin, mk_pids(0));
	refused(img, twin, mk_pids(0), "the same again");
	refused(img, twin, mk_pids(-5), "negative");
	ok(img, mk_pids(1000));
	cr_expect_eq(sluice_image_next_producer_id(img), 1000);
	refused(img, NULL, mk_pids(1000), "not after");
	refused(img, NULL, mk_pids(999), "backwards");
	sluice_image_free(img);
	sluice_image_free(twin);
}

Test(image, offsets_only_grow_and_snapshot_records_keep_them)
{
	struct sluice_image *img = sluice_image_new();
	struct sluice_mrec noop = mk(SLUICE_MREC_NO_OP), feature = mk(SLUICE_MREC_FEATURE_LEVEL);
	strcpy(feature.feature_level.name, "metadata.version");
	cr_expect_eq(sluice_image_apply(img, &noop, 5, err, sizeof err), 0); /* the first may be anything */
	cr_expect_eq(sluice_image_apply(img, &feature, 6, err, sizeof err), 0);
	cr_expect_eq(sluice_image_apply(img, &noop, 6, err, sizeof err), -1);
	cr_expect_eq(sluice_image_apply(img, &noop, 2, err, sizeof err), -1);
	cr_expect_eq(sluice_image_apply(img, &noop, -2, err, sizeof err), -1);
	cr_expect_eq(sluice_image_offset(img), 6);
	struct sluice_mrec t = mk_topic("t", 1);
	cr_expect_eq(sluice_image_apply(img, &t, -1, err, sizeof err), 0); /* a snapshot's record */
	cr_expect_eq(sluice_image_offset(img), 6);
	cr_expect_eq(sluice_image_apply(img, &noop, 100, err, sizeof err), 0); /* gaps are allowed */
	sluice_image_set_offset(img, 7);
	cr_expect_eq(sluice_image_offset(img), 7);
	/* a refused record does not take its offset */
	cr_expect_eq(sluice_image_apply(img, &t, 8, err, sizeof err), -1);
	cr_expect_eq(sluice_image_offset(img), 7);
	sluice_image_clear(img);
	cr_expect_eq(sluice_image_offset(img), -1);
	cr_expect_eq(sluice_image_topic_count(img), 0);
	sluice_image_free(img);
}

/* ---- encode and equal -------------------------------------------------------------- */

/* Pass each record through the codec (as a snapshot travels) and apply it. */
static int apply_via_codec(void *arg, const struct sluice_mrec *r)
{
	struct sluice_image *dst = arg;
	struct kwr w;
	kwr_init(&w, 256, SLUICE_MREC_ENCODED_MAX);
	cr_assert_eq(sluice_mrec_encode(&w, r), 0, "%s does not encode", sluice_mrec_type_name(r->type));
	struct sluice_mrec *d = malloc(sizeof *d);
	cr_assert_eq(sluice_mrec_decode(w.buf, w.len, d, err, sizeof err), 0, "%s", err);
	int rc = sluice_image_apply(dst, d, -1, err, sizeof err);
	cr_assert_eq(rc, 0, "snapshot record %s refused: %s", sluice_mrec_type_name(r->type), err);
	free(d);
	kwr_free(&w);
	return 0;
}

static struct sluice_image *rebuild(const struct sluice_image *img)
{
	struct sluice_image *copy = sluice_image_new();
	cr_assert_eq(sluice_image_encode(img, apply_via_codec, copy), 0);
	sluice_image_set_offset(copy, sluice_image_offset(img));
	return copy;
}

/* A busy image: brokers in every state, topics with partitions changed,
 * removed and re-created, configs, producer ids. */
static struct sluice_image *busy_image(void)
{
	struct sluice_image *img = sluice_image_new();
	for (int32_t b = 1; b <= 4; b++)
		ok(img, mk_register(b, sluice_image_offset(img) + 1, "host", (uint16_t)(9090 + b)));
	ok(img, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 1, 0));
	ok(img, mk_fence(SLUICE_MREC_UNFENCE_BROKER, 2, 1));
	ok(img, mk_brc(2, 1, -1, 1));
	struct sluice_mrec r4 = mk_register(4, 20, "h4", 19094);
	strcpy(r4.register_broker.rack, "rack-4");
	r4.register_broker.endpoint_n = 2;
	strcpy(r4.register_broker.endpoints[1].name, "SSL");
	strcpy(r4.register_broker.endpoints[1].host, "h4s");
	r4.register_broker.endpoints[1].port = 19095;
	r4.register_broker.endpoints[1].security_protocol = 1;
	ok(img, r4);
	const char *names[] = {"zeta", "alpha", "mid.dle", "beta_1", "gone"};
	for (uint32_t t = 0; t < 5; t++) {
		ok(img, mk_topic(names[t], t + 1));
		for (int32_t p = 0; p < (int32_t)t + 1; p++)
			ok(img, mk_partition(t + 1, p, p % 3 + 1, 1 + p % 3));
	}
	struct sluice_mrec c = mk_change(3, 1);
	c.partition_change.has_leader = true;
	c.partition_change.leader = 3;
	c.partition_change.has_elr = true;
	c.partition_change.elr.n = 2;
	c.partition_change.elr.id[0] = 2;
	c.partition_change.elr.id[1] = 4;
	ok(img, c);
	c = mk_change(3, 2);
	c.partition_change.has_leader_recovery_state = true;
	c.partition_change.leader_recovery_state = 1;
	c.partition_change.has_last_known_elr = true;
	c.partition_change.last_known_elr.n = 1;
	c.partition_change.last_known_elr.id[0] = 7;
	ok(img, c);
	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "zeta", "retention.ms", "5"));
	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "gone", "retention.ms", "5"));
	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "alpha", "cleanup.policy", "compact"));
	ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, "alpha", "segment.bytes", "1048576"));
	ok(img, mk_config(SLUICE_MREC_RESOURCE_BROKER, "", "log.retention.hours", "1"));
	ok(img, mk_config(SLUICE_MREC_RESOURCE_BROKER, "2", "log.retention.hours", "2"));
	ok(img, mk_remove(5));
	ok(img, mk_topic("gone", 6));
	ok(img, mk_partition(6, 0, 1, 1));
	ok(img, mk_pids(3000));
	ok(img, mk(SLUICE_MREC_NO_OP));
	return img;
}

Test(image, encode_then_apply_to_an_empty_image_rebuilds_an_equal_one)
{
	struct sluice_image *img = busy_image();
	struct sluice_image *copy = rebuild(img);
	cr_expect(sluice_image_equal(img, copy));
	cr_expect(sluice_image_equal(copy, img));
	cr_expect_eq(sluice_image_topic_count(copy), 5);
	const char *order[] = {"alpha", "beta_1", "gone", "mid.dle", "zeta"};
	for (size_t i = 0; i < 5; i++)
		cr_expect_str_eq(sluice_image_topic_at(copy, i)->name, order[i]);
	/* and again from the copy: a snapshot of a snapshot */
	struct sluice_image *copy2 = rebuild(copy);
	cr_expect(sluice_image_equal(img, copy2));
	sluice_image_free(copy2);
	sluice_image_free(copy);
	sluice_image_free(img);
}

static int count_records(void *arg, const struct sluice_mrec *r)
{
	(void)r;
	return ++*(int *)arg == 3 ? 17 : 0;
}

Test(image, encode_stops_when_fn_says_so)
{
	struct sluice_image *img = busy_image();
	int n = 0;
	cr_expect_eq(sluice_image_encode(img, count_records, &n), 17);
	cr_expect_eq(n, 3);
	sluice_image_free(img);
}

Test(image, equal_notices_every_kind_of_difference)
{
	struct sluice_image *a = busy_image();
	struct sluice_mrec diffs[9];
	diffs[0] = mk(SLUICE_MREC_NO_OP); /* offset only */
	diffs[1] = mk_fence(SLUICE_MREC_FENCE_BROKER, 1, 0);
	diffs[2] = mk_brc(4, 20, -1, 1);
	diffs[3] = mk_register(9, 30, "h9", 1);
	diffs[4] = mk_topic("new", 99);
	diffs[5] = mk_change(2, 0);
	diffs[6] = mk_config(SLUICE_MREC_RESOURCE_TOPIC, "alpha", "segment.bytes", "2097152");
	diffs[7] = mk_config(SLUICE_MREC_RESOURCE_BROKER, "", "log.retention.hours", NULL);
	diffs[8] = mk_pids(4000);
	for (size_t i = 0; i < 9; i++) {
		struct sluice_image *b = busy_image();
		cr_assert(sluice_image_equal(a, b));
		ok(b, diffs[i]);
		if (i > 0)
			sluice_image_set_offset(b, sluice_image_offset(a)); /* the difference is in the state */
		cr_expect(!sluice_image_equal(a, b), "difference %zu not noticed", i);
		cr_expect(!sluice_image_equal(b, a), "difference %zu not noticed (reversed)", i);
		sluice_image_free(b);
	}
	sluice_image_free(a);
}

/* ---- scale ----------------------------------------------------------------------- */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Names in no particular order, so the sorted array really is re-sorted. */
static void scale_name(char *buf, size_t cap, uint32_t i)
{
	uint32_t h = i * 2654435761u;
	snprintf(buf, cap, "topic-%08x-%u", h, i);
}

Test(image, a_hundred_thousand_topics_are_fast, .timeout = 120)
{
	double t0 = now_s();
	struct sluice_image *img = sluice_image_new();
	char name[64];
	for (uint32_t i = 0; i < SLUICE_TOPICS_MAX; i++) {
		scale_name(name, sizeof name, i);
		ok(img, mk_topic(name, i + 1));
		ok(img, mk_partition(i + 1, 0, 1, 1));
		if (i % 10 == 0)
			ok(img, mk_config(SLUICE_MREC_RESOURCE_TOPIC, name, "retention.ms", "60000"));
	}
	refused(img, NULL, mk_topic("one-too-many", SLUICE_TOPICS_MAX + 1), "topic 100,001");
	double t_apply = now_s() - t0;
	for (uint32_t i = 0; i < SLUICE_TOPICS_MAX; i++) {
		scale_name(name, sizeof name, i);
		const struct sluice_image_topic *t = sluice_image_topic_by_name(img, name, strlen(name));
		cr_assert_not_null(t, "%s", name);
		uint8_t id[16];
		topic_id(id, i + 1);
		cr_assert_eq(sluice_image_topic_by_id(img, id), t);
		cr_assert_eq(t->partition_n, 1);
	}
	for (size_t i = 1; i < SLUICE_TOPICS_MAX; i++)
		cr_assert(strcmp(sluice_image_topic_at(img, i - 1)->name, sluice_image_topic_at(img, i)->name) < 0);
	double t1 = now_s();
	struct sluice_image *copy = rebuild(img);
	cr_assert(sluice_image_equal(img, copy));
	double t_rebuild = now_s() - t1;
	/* delete every other topic, then look everything up again */
	for (uint32_t i = 0; i < SLUICE_TOPICS_MAX; i += 2)
		ok(img, mk_remove(i + 1));
	cr_expect_eq(sluice_image_topic_count(img), SLUICE_TOPICS_MAX / 2);
	for (uint32_t i = 0; i < SLUICE_TOPICS_MAX; i++) {
		scale_name(name, sizeof name, i);
		bool alive = i % 2;
		cr_assert_eq(sluice_image_topic_by_name(img, name, strlen(name)) != NULL, alive, "%s", name);
		cr_assert_eq(sluice_image_config(img, SLUICE_MREC_RESOURCE_TOPIC, name, "retention.ms") != NULL,
			     alive && i % 10 == 0, "%s", name);
	}
	for (size_t i = 1; i < sluice_image_topic_count(img); i++)
		cr_assert(strcmp(sluice_image_topic_at(img, i - 1)->name, sluice_image_topic_at(img, i)->name) < 0);
	double total = now_s() - t0;
	cr_log_info("100,000 topics: apply %.2f s, snapshot rebuild %.2f s, total %.2f s", t_apply, t_rebuild, total);
	cr_expect_lt(total, 60.0, "100,000 topics took %.1f s", total); /* generous: sanitizers, a shared machine */
	sluice_image_free(copy);
	sluice_image_free(img);
}

Test(image, partitions_of_one_topic_up_to_the_limit, .timeout = 120)
{
	struct sluice_image *img = sluice_image_new();
	ok(img, mk_topic("wide", 1));
	for (int32_t p = 0; p < SLUICE_PARTITIONS_PER_TOPIC_MAX; p++)
		ok(img, mk_partition(1, p, 1, 1));
	refused(img, NULL, mk_partition(1, SLUICE_PARTITIONS_PER_TOPIC_MAX, 1, 1), "partition 100,000");
	cr_expect_eq(sluice_image_topic_by_name(img, "wide", 4)->partition_n, SLUICE_PARTITIONS_PER_TOPIC_MAX);
	sluice_image_free(img);
}

/* ---- the metadata log window (control/mlog.c) ---------------------------------------
 * These prove that: reads from every offset of the window return record
 * batches that both sluice_mlog_decode_batch and the project's generic
 * batch parser (common/kafka/batch.h) read back as exactly the records
 * appended, at their metadata offsets; reads outside [start, end] are
 * refused and a read at end is empty; the byte budget of a read is kept
 * (and broken only to return one record); the window drops its oldest
 * records past its record and byte budgets and stays contiguous; appends
 * must take the next offset except after a reset; and a batch with any
 * byte changed inside its CRC, or cut short, is refused whole. */

/* The i-th record of a test log: types and sizes vary. */
static struct sluice_mrec log_rec(int64_t i)
{
	switch (i % 4) {
	case 0: return mk_topic("t", (uint32_t)i + 1);
	case 1: return mk_partition((uint32_t)i, (int32_t)(i % 7), 1, (int32_t)(i % 5));
	case 2: {
		char v[64];
		snprintf(v, sizeof v, "%" PRId64, i * 1000);
		return mk_config(SLUICE_MREC_RESOURCE_BROKER, "", "log.retention.ms", v);
	}
	default: return mk(SLUICE_MREC_NO_OP);
	}
}

static void append_range(struct sluice_mlog *l, int64_t from, int64_t to)
{
	for (int64_t i = from; i < to; i++) {
		struct sluice_mrec r = log_rec(i);
		cr_assert_eq(sluice_mlog_append(l, i, &r), 0, "append %" PRId64, i);
	}
}

struct seen {
	int64_t next; /* the offset expected next */
	int64_t n;
	int refuse_at; /* the callback refuses this offset (-1: none) */
};

static int check_record(void *arg, int64_t offset, const struct sluice_mrec *r)
{
	struct seen *s = arg;
	cr_assert_eq(offset, s->next, "offset %" PRId64 ", expected %" PRId64, offset, s->next);
	if (offset == s->refuse_at)
		return 1;
	struct sluice_mrec want = log_rec(offset);
	want.version = r->version;
	cr_assert(memcmp(&want, r, sizeof want) == 0, "record at %" PRId64 " differs", offset);
	s->next++;
	s->n++;
	return 0;
}

/* Decode every batch of buf; returns the records seen. */
static int64_t decode_all(const uint8_t *buf, size_t len, int64_t from)
{
	struct seen s = {.next = from, .refuse_at = -1};
	size_t at = 0;
	while (at < len) {
		int64_t n = sluice_mlog_decode_batch(buf + at, len - at, check_record, &s, err, sizeof err);
		cr_assert_gt(n, 0, "batch at byte %zu: %s", at, err);
		at += (size_t)n;
	}
	return s.n;
}

struct generic {
	int64_t next;
	bool bad;
};
static bool generic_record(const struct sluice_record *rec, void *arg)
{
	struct generic *g = arg;
	struct sluice_mrec want = log_rec(rec->offset), got;
	struct kwr w;
	kwr_init(&w, 256, SLUICE_MREC_ENCODED_MAX);
	cr_assert_eq(sluice_mrec_encode(&w, &want), 0);
	if (rec->offset != g->next || rec->key || !rec->value || (size_t)rec->value_len != w.len ||
	    memcmp(rec->value, w.buf, w.len) != 0 ||
	    sluice_mrec_decode(rec->value, (size_t)rec->value_len, &got, err, sizeof err) != 0)
		g->bad = true;
	kwr_free(&w);
	g->next++;
	return true;
}

/* The project's own Kafka batch parser agrees: CRC, counts, offsets, values. */
static void check_generic(const uint8_t *buf, size_t len, int64_t from, int64_t n)
{
	struct generic g = {.next = from};
	size_t at = 0;
	while (at < len) {
		struct sluice_batch b;
		cr_assert_eq(sluice_batch_check(buf + at, len - at, &b), SLUICE_BATCH_OK);
		cr_assert_eq(b.magic, 2);
		cr_assert_eq(b.attributes, 0);
		cr_assert_eq(b.producer_id, -1);
		cr_assert_eq(b.base_offset, g.next);
		cr_assert_eq(sluice_batch_records(buf + at, len - at, 0, generic_record, &g), b.records_count);
		at += (size_t)sluice_batch_total_bytes(&b);
	}
	cr_expect(!g.bad);
	cr_expect_eq(g.next, from + n);
}

Test(mlog, reads_from_every_offset_return_the_records_as_kafka_batches)
{
	struct sluice_mlog *l = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX);
	cr_expect_eq(sluice_mlog_start(l), sluice_mlog_end(l));
	append_range(l, 0, 300);
	cr_expect_eq(sluice_mlog_start(l), 0);
	cr_expect_eq(sluice_mlog_end(l), 300);
	struct kwr w;
	kwr_init(&w, 4096, 1u << 24);
	for (int64_t from = 0; from <= 300; from++) {
		kwr_reset(&w);
		int64_t n = sluice_mlog_read(l, from, 1u << 20, &w);
		cr_assert_eq(n, 300 - from, "read at %" PRId64 ": %" PRId64, from, n);
		cr_assert_eq(decode_all(w.buf, w.len, from), n);
		check_generic(w.buf, w.len, from, n);
	}
	kwr_reset(&w);
	cr_expect_eq(sluice_mlog_read(l, 301, 1u << 20, &w), -1);
	cr_expect_eq(sluice_mlog_read(l, -1, 1u << 20, &w), -1);
	cr_expect_eq(w.len, 0);
	kwr_free(&w);
	sluice_mlog_free(l);
}

Test(mlog, a_read_keeps_its_byte_budget_but_always_returns_one_record)
{
	struct sluice_mlog *l = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX);
	append_range(l, 0, 10000); /* more than one batch's worth of records */
	struct kwr w;
	kwr_init(&w, 4096, 1u << 24);
	cr_assert_eq(sluice_mlog_read(l, 0, 16u << 20, &w), 10000);
	size_t all = w.len;
	cr_expect_eq(decode_all(w.buf, w.len, 0), 10000);
	check_generic(w.buf, w.len, 0, 10000);
	size_t budgets[] = {1, 61, 100, 200, 1000, 4096, 65536, all - 1, all};
	for (size_t i = 0; i < sizeof budgets / sizeof budgets[0]; i++) {
		for (int64_t from = 0; from < 10000; from += 3333) {
			kwr_reset(&w);
			int64_t n = sluice_mlog_read(l, from, budgets[i], &w);
			cr_assert_gt(n, 0);
			cr_expect(w.len <= budgets[i] || n == 1, "budget %zu: %zu bytes, %" PRId64 " records", budgets[i],
				  w.len, n);
			cr_expect_eq(decode_all(w.buf, w.len, from), n);
			/* one more record would not have fitted */
			if (from + n < 10000) {
				struct kwr w2;
				kwr_init(&w2, 4096, 1u << 24);
				cr_assert_eq(sluice_mlog_read(l, from, 16u << 20, &w2), 10000 - from);
				cr_expect_gt(w2.len, w.len);
				kwr_free(&w2);
			}
		}
	}
	kwr_free(&w);
	sluice_mlog_free(l);
}

Test(mlog, the_window_drops_its_oldest_past_the_record_budget)
{
	struct sluice_mlog *l = sluice_mlog_new(10, SLUICE_MLOG_BYTES_MAX);
	append_range(l, 0, 25);
	cr_expect_eq(sluice_mlog_start(l), 15);
	cr_expect_eq(sluice_mlog_end(l), 25);
	struct kwr w;
	kwr_init(&w, 4096, 1u << 24);
	cr_expect_eq(sluice_mlog_read(l, 14, 1u << 20, &w), -1);
	for (int64_t from = 15; from <= 25; from++) {
		kwr_reset(&w);
		cr_assert_eq(sluice_mlog_read(l, from, 1u << 20, &w), 25 - from);
		cr_assert_eq(decode_all(w.buf, w.len, from), 25 - from);
	}
	kwr_free(&w);
	sluice_mlog_free(l);
}

static size_t encoded_len(int64_t i)
{
	struct sluice_mrec r = log_rec(i);
	struct kwr w;
	kwr_init(&w, 256, SLUICE_MREC_ENCODED_MAX);
	cr_assert_eq(sluice_mrec_encode(&w, &r), 0);
	size_t n = w.len;
	kwr_free(&w);
	return n;
}

Test(mlog, the_window_drops_its_oldest_past_the_byte_budget)
{
	size_t budget = encoded_len(96) + encoded_len(97) + encoded_len(98) + encoded_len(99);
	struct sluice_mlog *l = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, budget);
	append_range(l, 0, 100);
	cr_expect_eq(sluice_mlog_end(l), 100);
	cr_expect_eq(sluice_mlog_start(l), 96, "start %" PRId64, sluice_mlog_start(l));
	struct kwr w;
	kwr_init(&w, 4096, 1u << 24);
	cr_expect_eq(sluice_mlog_read(l, 96, 1u << 20, &w), 4);
	cr_expect_eq(decode_all(w.buf, w.len, 96), 4);
	kwr_free(&w);
	sluice_mlog_free(l);

	/* a record larger than the whole budget is kept, alone */
	l = sluice_mlog_new(SLUICE_MLOG_RECORDS_MAX, 8);
	append_range(l, 0, 3);
	cr_expect_eq(sluice_mlog_start(l), 2);
	cr_expect_eq(sluice_mlog_end(l), 3);
	sluice_mlog_free(l);
}

Test(mlog, appends_take_the_next_offset_except_after_a_reset)
{
	struct sluice_mlog *l = sluice_mlog_new(100, SLUICE_MLOG_BYTES_MAX);
	struct sluice_mrec r = mk(SLUICE_MREC_NO_OP);
	cr_expect_eq(sluice_mlog_append(l, -1, &r), -1);
	cr_expect_eq(sluice_mlog_append(l, 500, &r), 0); /* a new log starts anywhere */
	cr_expect_eq(sluice_mlog_start(l), 500);
	cr_expect_eq(sluice_mlog_append(l, 500, &r), -1);
	cr_expect_eq(sluice_mlog_append(l, 502, &r), -1);
	cr_expect_eq(sluice_mlog_append(l, 501, &r), 0);
	struct sluice_mrec bad = mk_brc(1, 1, -1, 0); /* does not encode */
	cr_expect_eq(sluice_mlog_append(l, 502, &bad), -1);
	cr_expect_eq(sluice_mlog_end(l), 502);
	sluice_mlog_reset(l);
	cr_expect_eq(sluice_mlog_start(l), sluice_mlog_end(l));
	struct kwr w;
	kwr_init(&w, 64, 1u << 20);
	cr_expect_eq(sluice_mlog_read(l, sluice_mlog_end(l), 1000, &w), 0);
	cr_expect_eq(w.len, 0);
	cr_expect_eq(sluice_mlog_append(l, 10, &r), 0); /* after a reset: anywhere */
	cr_expect_eq(sluice_mlog_start(l), 10);
	cr_expect_eq(sluice_mlog_end(l), 11);
	cr_expect_eq(sluice_mlog_read(l, 10, 1000, &w), 1);
	kwr_free(&w);
	sluice_mlog_free(l);
}

struct counted {
	int64_t offsets[8];
	enum sluice_mrec_type types[8];
	int n;
};
static int count_record8(void *arg, int64_t offset, const struct sluice_mrec *r)
{
	struct counted *c = arg;
	cr_assert_lt(c->n, 8);
	cr_assert(c->n == 0 || offset == c->offsets[c->n - 1] + 1);
	c->offsets[c->n] = offset;
	c->types[c->n++] = r->type;
	return 0;
}

Test(mlog, damaged_batches_are_refused_whole)
{
	struct sluice_mlog *l = sluice_mlog_new(100, SLUICE_MLOG_BYTES_MAX);
	append_range(l, 40, 48);
	struct kwr w;
	kwr_init(&w, 4096, 1u << 20);
	cr_assert_eq(sluice_mlog_read(l, 40, 1u << 20, &w), 8);
	cr_assert_eq(decode_all(w.buf, w.len, 40), 8);
	struct seen s;
	for (size_t at = 0; at < w.len; at++) {
		for (int bit = 0; bit < 8; bit++) {
			w.buf[at] ^= (uint8_t)(1u << bit);
			memset(&s, 0, sizeof s);
			s.refuse_at = -1;
			s.next = 40;
			int64_t n;
			if (at < SLUICE_BATCH_OFF_LENGTH) {
				/* BaseOffset, outside Kafka's CRC: the same records at other offsets */
				struct counted c = {0};
				n = sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err);
				if ((int64_t)kbe64(w.buf) < 0)
					cr_expect(n == -1 && c.n == 0, "byte %zu bit %d: negative base accepted", at, bit);
				else
					cr_expect(n == (int64_t)w.len && c.n == 8 && c.offsets[0] == (int64_t)kbe64(w.buf),
						  "byte %zu bit %d", at, bit);
			} else if (at >= SLUICE_BATCH_OFF_EPOCH && at < SLUICE_BATCH_OFF_MAGIC) {
				/* PartitionLeaderEpoch, outside the CRC too, and not looked at */
				n = sluice_mlog_decode_batch(w.buf, w.len, check_record, &s, err, sizeof err);
				cr_expect(n == (int64_t)w.len && s.n == 8, "byte %zu bit %d", at, bit);
			} else {
				n = sluice_mlog_decode_batch(w.buf, w.len, check_record, &s, err, sizeof err);
				cr_expect(n == -1 && s.n == 0, "byte %zu bit %d: accepted", at, bit);
			}
			w.buf[at] ^= (uint8_t)(1u << bit);
		}
	}
	for (size_t cut = 0; cut < w.len; cut++) {
		memset(&s, 0, sizeof s);
		s.next = 40;
		s.refuse_at = -1;
		cr_expect_eq(sluice_mlog_decode_batch(w.buf, cut, check_record, &s, err, sizeof err), -1, "cut %zu", cut);
		cr_expect_eq(s.n, 0);
	}
	/* the caller refusing a record stops the batch with an error */
	memset(&s, 0, sizeof s);
	s.next = 40;
	s.refuse_at = 43;
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, check_record, &s, err, sizeof err), -1);
	cr_expect_eq(s.n, 3);
	cr_expect(strstr(err, "43") != NULL, "%s", err);
	kwr_free(&w);
	sluice_mlog_free(l);
}

/* Re-seal a batch after a change inside the CRC. */
static void reseal(uint8_t *b, size_t total)
{
	kput32(b + SLUICE_BATCH_OFF_CRC,
	       sluice_crc32c(0, b + SLUICE_BATCH_OFF_ATTRIBUTES, total - SLUICE_BATCH_OFF_ATTRIBUTES));
}


/* A batch of two records written by sluice_batch_build (common/kafka/batch.h). */
static void other_batch(struct kwr *w, const void *value2, int32_t value2_len)
{
	struct sluice_mrec a = mk_topic("x", 9);
	struct kwr ea;
	kwr_init(&ea, 256, SLUICE_MREC_ENCODED_MAX);
	cr_assert_eq(sluice_mrec_encode(&ea, &a), 0);
	struct sluice_record_kv kv[] = {{NULL, 0, ea.buf, (int32_t)ea.len}, {"key", 3, value2, value2_len}};
	kwr_reset(w);
	cr_assert_eq(sluice_batch_build(w, kv, 2, 1700000000000LL), 0);
	sluice_batch_set_base_offset(w->buf, 100, 3);
	kwr_free(&ea);
}

Test(mlog, batches_from_other_writers)
{
	struct sluice_mrec b = mk(SLUICE_MREC_NO_OP);
	struct kwr eb, w;
	kwr_init(&eb, 256, SLUICE_MREC_ENCODED_MAX);
	kwr_init(&w, 256, 1u << 20);
	cr_assert_eq(sluice_mrec_encode(&eb, &b), 0);

	/* keys are ignored; offsets are BaseOffset + OffsetDelta */
	other_batch(&w, eb.buf, (int32_t)eb.len);
	struct counted c = {0};
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err), (int64_t)w.len, "%s",
		     err);
	cr_expect(c.n == 2 && c.offsets[0] == 100 && c.offsets[1] == 101 && c.types[0] == SLUICE_MREC_TOPIC &&
		  c.types[1] == SLUICE_MREC_NO_OP);
	/* with fn NULL the batch is only checked */
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, NULL, NULL, err, sizeof err), (int64_t)w.len);

	/* a control batch (Kafka's leader change, snapshot header/footer) is skipped whole */
	w.buf[SLUICE_BATCH_OFF_ATTRIBUTES + 1] |= SLUICE_BATCH_ATTR_CONTROL;
	reseal(w.buf, w.len);
	c.n = 0;
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err), (int64_t)w.len);
	cr_expect_eq(c.n, 0);
	/* a compressed one is refused */
	other_batch(&w, eb.buf, (int32_t)eb.len);
	w.buf[SLUICE_BATCH_OFF_ATTRIBUTES + 1] |= 1;
	reseal(w.buf, w.len);
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "compressed"), "%s", err);
	/* a null value, or one that is no metadata record, refuses the batch: not even its first record is handed out */
	other_batch(&w, NULL, 0);
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err), -1);
	other_batch(&w, "garbage", 7);
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err), -1);
	cr_expect(strstr(err, "offset 101"), "%s", err);
	cr_expect_eq(c.n, 0);
	/* a record whose length claims less than its fields, resealed so the CRC passes */
	other_batch(&w, eb.buf, (int32_t)eb.len);
	w.buf[SLUICE_BATCH_HEADER_BYTES] = (uint8_t)(w.buf[SLUICE_BATCH_HEADER_BYTES] - 2); /* zigzag: length - 1 */
	reseal(w.buf, w.len);
	cr_expect_eq(sluice_mlog_decode_batch(w.buf, w.len, count_record8, &c, err, sizeof err), -1);
	cr_expect_eq(c.n, 0);
	kwr_free(&w);
	kwr_free(&eb);
}

Test(mlog, a_writer_that_fills_up_gets_nothing)
{
	struct sluice_mlog *l = sluice_mlog_new(100, SLUICE_MLOG_BYTES_MAX);
	append_range(l, 0, 50);
	struct kwr w;
	kwr_init(&w, 16, 200); /* room for about one batch of one record */
	kwr_raw(&w, "xy", 2);
	cr_expect_eq(sluice_mlog_read(l, 0, 1u << 20, &w), -1);
	cr_expect_eq(w.len, 2);
	kwr_free(&w);
	sluice_mlog_free(l);
}
