/* KRaft metadata record codec tests (control/mrec.c). They prove that:
 * the bytes Sluice writes for every record type are exactly the bytes
 * Apache Kafka's MetadataRecordSerde writes for the same record, and that
 * Kafka's bytes of every version in the schema decode to the expected
 * struct (the reference bytes below were produced by Kafka 4.4.0's own
 * classes: MetadataRecordSerde.INSTANCE.write of the generated records,
 * ApiMessageAndVersion at the version named); every type round-trips at its
 * limits; every proper prefix of a valid record, every byte flip and
 * random garbage is refused or decoded without reading past the end (the
 * input ends at an inaccessible page, guard.h); lengths and counts beyond
 * the structs' limits, unknown frame versions, api keys and versions, and
 * trailing bytes are refused with an error naming the record and field;
 * and a record the encoder cannot represent is refused and leaves the
 * writer as it was. */
#include "control/mrec.h"
#include "guard.h"
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ----------------------------------------------------------------- */

static const uint8_t U1[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t U2[16] = {0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
			       0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f, 0x20};

static size_t unhex(const char *hex, uint8_t *out, size_t cap)
{
	size_t n = strlen(hex) / 2;
	cr_assert(n <= cap);
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		cr_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
		out[i] = (uint8_t)v;
	}
	return n;
}

/* Decode p[0..len) from memory that ends at a guard page. */
static int decode_guarded(const uint8_t *p, size_t len, struct sluice_mrec *out, char *err, size_t errlen)
{
	struct guarded g;
	cr_assert(guarded_init(&g, p, len));
	int rc = sluice_mrec_decode(g.data, len, out, err, errlen);
	guarded_free(&g);
	return rc;
}

static struct sluice_mrec *rec_new(enum sluice_mrec_type t, int16_t version)
{
	struct sluice_mrec *r = calloc(1, sizeof *r);
	cr_assert(r);
	r->type = t;
	r->version = version;
	return r;
}

static void ids_set(struct sluice_mrec_ids *ids, int32_t n, const int32_t *v)
{
	ids->n = n;
	for (int32_t i = 0; i < n; i++)
		ids->id[i] = v[i];
}
#define IDS(ids, ...)                                                                                                  \
	do {                                                                                                           \
		const int32_t v_[] = {__VA_ARGS__};                                                                    \
		ids_set(&(ids), (int32_t)(sizeof v_ / sizeof v_[0]), v_);                                             \
	} while (0)

/* The records of the reference bytes, built field by field. */
static struct sluice_mrec *ref_register_broker(int16_t version, bool shutdown_variant)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_REGISTER_BROKER, version);
	struct sluice_mrec_register_broker *b = &r->register_broker;
	b->broker_id = 3;
	memcpy(b->incarnation_id, U1, 16);
	b->broker_epoch = 42;
	b->endpoint_n = 2;
	strcpy(b->endpoints[0].name, "PLAINTEXT");
	strcpy(b->endpoints[0].host, "broker3.example");
	b->endpoints[0].port = 9092;
	b->endpoints[0].security_protocol = 0;
	strcpy(b->endpoints[1].name, "SSL");
	strcpy(b->endpoints[1].host, "10.0.0.3");
	b->endpoints[1].port = 65000;
	b->endpoints[1].security_protocol = 1;
	if (shutdown_variant) {
		b->fenced = false;
		b->in_controlled_shutdown = true;
	} else {
		strcpy(b->rack, "rack-a");
		b->fenced = true;
	}
	return r;
}

static struct sluice_mrec *ref_partition(int16_t version, int which)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_PARTITION, version);
	struct sluice_mrec_partition *p = &r->partition;
	memcpy(p->topic_id, U2, 16);
	if (which == 0) {
		p->partition_id = 5;
		IDS(p->replicas, 1, 2, 3);
		IDS(p->isr, 1, 3);
		p->leader = 1;
		p->leader_recovery_state = 1;
		p->leader_epoch = 9;
		p->partition_epoch = 11;
		IDS(p->elr, 2);
		IDS(p->last_known_elr, 4, 5);
		return r;
	}
	IDS(p->replicas, 1);
	IDS(p->isr, 1);
	p->leader = 1;
	if (which == 2) { /* the v0 variant carries a reassignment */
		IDS(p->removing, 3);
		IDS(p->adding, 4);
	}
	return r;
}

static struct sluice_mrec *ref_partition_change(int16_t version, int which)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_PARTITION_CHANGE, version);
	struct sluice_mrec_partition_change *c = &r->partition_change;
	memcpy(c->topic_id, U2, 16);
	switch (which) {
	case 0:
		c->partition_id = 5;
		c->has_isr = true;
		IDS(c->isr, 1, 2);
		c->has_leader = true;
		c->leader = 2;
		c->has_replicas = true;
		IDS(c->replicas, 2, 1, 3);
		c->has_leader_recovery_state = true;
		c->leader_recovery_state = 0;
		c->has_elr = true;
		IDS(c->elr, 3);
		c->has_last_known_elr = true; /* present and empty */
		break;
	case 1:
		c->partition_id = 0;
		c->has_leader = true;
		c->leader = -1;
		break;
	case 2:
		c->partition_id = 1;
		break;
	case 3: /* v0, with a reassignment's removing and adding replicas */
		c->partition_id = 2;
		c->has_isr = true;
		IDS(c->isr, 3);
		c->has_leader = true;
		c->leader = 3;
		c->has_removing = true;
		IDS(c->removing, 4);
		c->has_adding = true;
		IDS(c->adding, 5);
		break;
	case 5: /* a reassignment starting: replicas, removing and adding */
		c->partition_id = 7;
		c->has_replicas = true;
		IDS(c->replicas, 2, 3, 1);
		c->has_removing = true;
		IDS(c->removing, 1);
		c->has_adding = true;
		IDS(c->adding, 2, 3);
		break;
	case 4: /* v1: directories are dropped */
		c->partition_id = 2;
		c->has_replicas = true;
		IDS(c->replicas, 3);
		break;
	}
	return r;
}

static struct sluice_mrec *ref_config(bool null_value)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_CONFIG, 0);
	if (null_value) {
		r->config.resource_type = SLUICE_MREC_RESOURCE_BROKER;
		strcpy(r->config.name, "log.retention.hours");
		r->config.value_null = true;
	} else {
		r->config.resource_type = SLUICE_MREC_RESOURCE_TOPIC;
		strcpy(r->config.resource_name, "orders.eu-1");
		strcpy(r->config.name, "retention.ms");
		strcpy(r->config.value, "86400000");
	}
	return r;
}

static struct sluice_mrec *ref_registration_change(int16_t version, int8_t fenced, int8_t shutdown)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_BROKER_REGISTRATION_CHANGE, version);
	r->broker_registration_change.broker_id = 3;
	r->broker_registration_change.broker_epoch = 42;
	r->broker_registration_change.fenced = fenced;
	r->broker_registration_change.in_controlled_shutdown = shutdown;
	return r;
}

static struct sluice_mrec *ref_simple(enum sluice_mrec_type t)
{
	struct sluice_mrec *r = rec_new(t, 0);
	switch (t) {
	case SLUICE_MREC_UNREGISTER_BROKER:
		r->unregister_broker.broker_id = 7;
		r->unregister_broker.broker_epoch = 1234567890123LL;
		break;
	case SLUICE_MREC_TOPIC:
		strcpy(r->topic.name, "orders.eu-1");
		memcpy(r->topic.topic_id, U2, 16);
		break;
	case SLUICE_MREC_FENCE_BROKER:
		r->fence_broker.id = 3;
		r->fence_broker.epoch = 42;
		break;
	case SLUICE_MREC_UNFENCE_BROKER:
		r->unfence_broker.id = 3;
		r->unfence_broker.epoch = 42;
		break;
	case SLUICE_MREC_REMOVE_TOPIC:
		memcpy(r->remove_topic.topic_id, U2, 16);
		break;
	case SLUICE_MREC_FEATURE_LEVEL:
		strcpy(r->feature_level.name, "metadata.version");
		r->feature_level.level = 21;
		break;
	case SLUICE_MREC_PRODUCER_IDS:
		r->producer_ids.broker_id = 2;
		r->producer_ids.broker_epoch = 77;
		r->producer_ids.next_producer_id = 5000;
		break;
	default:
		break;
	}
	return r;
}

struct reference {
	const char *name;
	const char *hex;             /* Kafka 4.4.0's bytes */
	struct sluice_mrec *(*build)(const struct reference *ref);
	int16_t version;
	int arg, arg2, arg3;
	bool exact; /* Sluice's encoding of the struct is these bytes too */
};

static struct sluice_mrec *b_register(const struct reference *f) { return ref_register_broker(f->version, f->arg); }
static struct sluice_mrec *b_partition(const struct reference *f) { return ref_partition(f->version, f->arg); }
static struct sluice_mrec *b_change(const struct reference *f) { return ref_partition_change(f->version, f->arg); }
static struct sluice_mrec *b_config(const struct reference *f) { return ref_config(f->arg); }
static struct sluice_mrec *b_simple(const struct reference *f) { return ref_simple((enum sluice_mrec_type)f->arg); }
static struct sluice_mrec *b_regchange(const struct reference *f)
{
	return ref_registration_change(f->version, (int8_t)f->arg2, (int8_t)f->arg3);
}

#define RB_HEAD "00000003000102030405060708090a0b0c0d0e0f10000000000000002a"
#define RB_EPS "030a504c41494e544558541062726f6b6572332e6578616d706c6523840000000453534c0931302e302e302e33fde800010001"

static const struct reference refs[] = {
	{"register_broker_v4", "010004" RB_HEAD RB_EPS "077261636b2d61010000", b_register, 4, 0, 0, 0, true},
	{"register_broker_v4_norack_shutdown", "010004" RB_HEAD RB_EPS "00000100", b_register, 4, 1, 0, 0, true},
	{"register_broker_v4_features_logdirs",
	 "010004" RB_HEAD
	 "030a504c41494e544558541062726f6b6572332e6578616d706c6523840000000453534c0931302e302e302e33fde800010002116d65"
	 "7461646174612e76657273696f6e0007001b00077261636b2d610100010011021112131415161718191a1b1c1d1e1f20",
	 b_register, 4, 0, 0, 0, false},
	{"register_broker_v0",
	 "010000000000030102030405060708090a0b0c0d0e0f10000000000000002a" RB_EPS "077261636b2d610100", b_register, 0, 0,
	 0, 0, false},
	{"register_broker_v1_shutdown",
	 "010001000000030102030405060708090a0b0c0d0e0f10000000000000002a" RB_EPS "00000100", b_register, 1, 1, 0, 0,
	 false},
	{"register_broker_v3", "010003" RB_HEAD RB_EPS "077261636b2d61010000", b_register, 3, 0, 0, 0, false},
	{"unregister_broker_v0", "010100000000070000011f71fb04cb00", b_simple, 0, SLUICE_MREC_UNREGISTER_BROKER, 0, 0,
	 true},
	{"topic_v0", "0102000c6f72646572732e65752d311112131415161718191a1b1c1d1e1f2000", b_simple, 0, SLUICE_MREC_TOPIC, 0,
	 0, true},
	{"partition_v2",
	 "010302000000051112131415161718191a1b1c1d1e1f2004000000010000000200000003030000000100000003010100000001000000"
	 "090000000b0103000101010502000000020209030000000400000005",
	 b_partition, 2, 0, 0, 0, true},
	{"partition_v2_plain",
	 "010302000000001112131415161718191a1b1c1d1e1f200200000001020000000101010000000100000000000000000100",
	 b_partition, 2, 1, 0, 0, true},
	{"partition_v0",
	 "010300000000001112131415161718191a1b1c1d1e1f20020000000102000000010200000003020000000400000001000000000000000000",
	 b_partition, 0, 2, 0, 0, false},
	{"partition_v1_dirs",
	 "010301000000001112131415161718191a1b1c1d1e1f20020000000102000000010101000000010000000000000000020102030405060708"
	 "090a0b0c0d0e0f1000",
	 b_partition, 1, 1, 0, 0, false},
	{"config_v0", "010400020c6f72646572732e65752d310d726574656e74696f6e2e6d7309383634303030303000", b_config, 0, 0, 0, 0,
	 true},
	{"config_v0_null", "0104000401146c6f672e726574656e74696f6e2e686f7572730000", b_config, 0, 1, 0, 0, true},
	{"partition_change_v2",
	 "010502000000051112131415161718191a1b1c1d1e1f20060009030000000100000002010400000002020d04000000020000000100000003"
	 "05010006050200000003070101",
	 b_change, 2, 0, 0, 0, true},
	{"partition_change_v2_leader_none", "010502000000001112131415161718191a1b1c1d1e1f20010104ffffffff", b_change, 2, 1,
	 0, 0, true},
	{"partition_change_v2_nothing", "010502000000011112131415161718191a1b1c1d1e1f2000", b_change, 2, 2, 0, 0, true},
	{"partition_change_v2_reassigning",
	 "010502000000071112131415161718191a1b1c1d1e1f2003020d04000000020000000300000001030502000000010409030000000200"
	 "000003",
	 b_change, 2, 5, 0, 0, true},
	{"partition_change_v0",
	 "010500000000021112131415161718191a1b1c1d1e1f2004000502000000030104000000030305020000000404050200000005",
	 b_change, 0, 3, 0, 0, false},
	{"partition_change_v1_dirs",
	 "010501000000021112131415161718191a1b1c1d1e1f2002020502000000030811020102030405060708090a0b0c0d0e0f10", b_change,
	 1, 4, 0, 0, false},
	{"fence_broker_v0", "01070000000003000000000000002a00", b_simple, 0, SLUICE_MREC_FENCE_BROKER, 0, 0, true},
	{"unfence_broker_v0", "01080000000003000000000000002a00", b_simple, 0, SLUICE_MREC_UNFENCE_BROKER, 0, 0, true},
	{"remove_topic_v0", "0109001112131415161718191a1b1c1d1e1f2000", b_simple, 0, SLUICE_MREC_REMOVE_TOPIC, 0, 0, true},
	{"feature_level_v0", "010c00116d657461646174612e76657273696f6e001500", b_simple, 0, SLUICE_MREC_FEATURE_LEVEL, 0,
	 0, true},
	{"producer_ids_v0", "010f0000000002000000000000004d000000000000138800", b_simple, 0, SLUICE_MREC_PRODUCER_IDS, 0,
	 0, true},
	/* Kafka's Fenced -1 (unfence) is the struct's 0 (unfenced). */
	{"registration_change_v3", "01110300000003000000000000002a020001ff010101", b_regchange, 3, 0, 0, 1, true},
	{"registration_change_v3_fence", "01110300000003000000000000002a01000101", b_regchange, 3, 0, 1, -1, true},
	{"registration_change_v0", "01110000000003000000000000002a01000101", b_regchange, 0, 0, 1, -1, false},
	{"registration_change_v2_logdirs",
	 "01110200000003000000000000002a020101010211020102030405060708090a0b0c0d0e0f10", b_regchange, 2, 0, -1, 1, false},
	{"no_op_v0", "01140000", b_simple, 0, SLUICE_MREC_NO_OP, 0, 0, true},
};
#define REF_N (sizeof refs / sizeof refs[0])

static char errbuf[512];

/* ---- Kafka's bytes --------------------------------------------------------------- */

Test(mrec, kafka_bytes_decode_to_the_expected_struct)
{
	for (size_t i = 0; i < REF_N; i++) {
		uint8_t bytes[1024];
		size_t n = unhex(refs[i].hex, bytes, sizeof bytes);
		struct sluice_mrec *want = refs[i].build(&refs[i]);
		struct sluice_mrec got;
		int rc = decode_guarded(bytes, n, &got, errbuf, sizeof errbuf);
		cr_assert_eq(rc, 0, "%s: %s", refs[i].name, errbuf);
		cr_expect_eq(got.type, want->type, "%s", refs[i].name);
		cr_expect_eq(got.version, refs[i].version, "%s: version %d", refs[i].name, got.version);
		cr_expect(memcmp(&got, want, sizeof got) == 0, "%s: decoded struct differs", refs[i].name);
		free(want);
	}
}

Test(mrec, sluice_writes_kafkas_bytes)
{
	for (size_t i = 0; i < REF_N; i++) {
		if (!refs[i].exact)
			continue;
		uint8_t bytes[1024];
		size_t n = unhex(refs[i].hex, bytes, sizeof bytes);
		struct sluice_mrec *r = refs[i].build(&refs[i]);
		struct kwr w;
		kwr_init(&w, 64, SLUICE_MREC_ENCODED_MAX);
		cr_assert_eq(sluice_mrec_encode(&w, r), 0, "%s", refs[i].name);
		cr_expect_eq(w.len, n, "%s: %zu bytes, Kafka %zu", refs[i].name, w.len, n);
		cr_expect(w.len == n && memcmp(w.buf, bytes, n) == 0, "%s: bytes differ from Kafka's", refs[i].name);
		kwr_free(&w);
		free(r);
	}
}

Test(mrec, every_prefix_of_every_reference_is_refused)
{
	for (size_t i = 0; i < REF_N; i++) {
		uint8_t bytes[1024];
		size_t n = unhex(refs[i].hex, bytes, sizeof bytes);
		for (size_t cut = 0; cut < n; cut++) {
			struct sluice_mrec got;
			errbuf[0] = '\0';
			cr_expect_eq(decode_guarded(bytes, cut, &got, errbuf, sizeof errbuf), -1, "%s cut at %zu accepted",
				     refs[i].name, cut);
			cr_expect(errbuf[0] != '\0', "%s cut at %zu: no error text", refs[i].name, cut);
		}
	}
}

/* ---- round trips at the limits ----------------------------------------------------- */

static void fill(char *s, size_t n, char c)
{
	memset(s, c, n);
	s[n] = '\0';
}

static void round_trip(const struct sluice_mrec *r, const char *what)
{
	struct kwr w;
	kwr_init(&w, 64, SLUICE_MREC_ENCODED_MAX);
	cr_assert_eq(sluice_mrec_encode(&w, r), 0, "%s: encode", what);
	cr_assert_leq(w.len, SLUICE_MREC_ENCODED_MAX);
	struct sluice_mrec *got = calloc(1, sizeof *got);
	cr_assert_eq(decode_guarded(w.buf, w.len, got, errbuf, sizeof errbuf), 0, "%s: %s", what, errbuf);
	cr_expect(memcmp(got, r, sizeof *got) == 0, "%s: round trip differs", what);
	/* and every prefix of our own encoding is refused too */
	for (size_t cut = 0; cut < w.len; cut++)
		cr_expect_eq(decode_guarded(w.buf, cut, got, errbuf, sizeof errbuf), -1, "%s cut at %zu", what, cut);
	free(got);
	kwr_free(&w);
}

Test(mrec, register_broker_round_trips_at_its_limits)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_REGISTER_BROKER, 4);
	struct sluice_mrec_register_broker *b = &r->register_broker;
	b->broker_id = INT32_MAX;
	memset(b->incarnation_id, 0xfe, 16);
	b->broker_epoch = INT64_MAX;
	b->endpoint_n = SLUICE_MREC_LISTENERS_MAX;
	for (int i = 0; i < SLUICE_MREC_LISTENERS_MAX; i++) {
		fill(b->endpoints[i].name, SLUICE_MREC_NAME_MAX, (char)('A' + i));
		fill(b->endpoints[i].host, SLUICE_BROKER_HOST_MAX, (char)('a' + i));
		b->endpoints[i].port = (uint16_t)(65535 - i);
		b->endpoints[i].security_protocol = (int16_t)(i % 4);
	}
	fill(b->rack, SLUICE_BROKER_RACK_MAX, 'r');
	b->in_controlled_shutdown = true;
	round_trip(r, "register_broker max");
	b->endpoint_n = 0;
	memset(b->endpoints, 0, sizeof b->endpoints);
	memset(b->rack, 0, sizeof b->rack);
	b->broker_id = -1;
	round_trip(r, "register_broker empty");
	free(r);
}

Test(mrec, partition_and_change_round_trip_at_their_limits)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_PARTITION, 2);
	struct sluice_mrec_partition *p = &r->partition;
	struct sluice_mrec_ids *all[] = {&p->replicas, &p->isr, &p->removing, &p->adding, &p->elr, &p->last_known_elr};
	for (size_t k = 0; k < 6; k++) {
		all[k]->n = SLUICE_REPLICAS_MAX;
		for (int i = 0; i < SLUICE_REPLICAS_MAX; i++)
			all[k]->id[i] = (int32_t)(k * 100 + (size_t)i) - 50;
	}
	p->partition_id = SLUICE_PARTITIONS_PER_TOPIC_MAX - 1;
	p->leader = -1;
	p->leader_recovery_state = -7;
	p->leader_epoch = INT32_MAX;
	p->partition_epoch = INT32_MIN;
	round_trip(r, "partition max");
	free(r);

	r = rec_new(SLUICE_MREC_PARTITION_CHANGE, 2);
	struct sluice_mrec_partition_change *c = &r->partition_change;
	c->partition_id = 77;
	c->has_leader = c->has_isr = c->has_replicas = c->has_elr = c->has_last_known_elr = true;
	c->has_leader_recovery_state = true;
	c->leader = INT32_MAX;
	c->leader_recovery_state = 1;
	struct sluice_mrec_ids *ch[] = {&c->isr, &c->replicas, &c->elr, &c->last_known_elr};
	for (size_t k = 0; k < 4; k++) {
		ch[k]->n = SLUICE_REPLICAS_MAX;
		for (int i = 0; i < SLUICE_REPLICAS_MAX; i++)
			ch[k]->id[i] = (int32_t)(k * 1000 + (size_t)i);
	}
	round_trip(r, "partition_change all");
	free(r);
	/* each present field alone */
	for (int k = 0; k < 6; k++) {
		r = rec_new(SLUICE_MREC_PARTITION_CHANGE, 2);
		c = &r->partition_change;
		c->partition_id = k;
		switch (k) {
		case 0: c->has_leader = true; c->leader = 4; break;
		case 1: c->has_isr = true; IDS(c->isr, 1, 2); break;
		case 2: c->has_replicas = true; IDS(c->replicas, 2); break;
		case 3: c->has_elr = true; break;
		case 4: c->has_last_known_elr = true; IDS(c->last_known_elr, 9, 8, 7); break;
		case 5: c->has_leader_recovery_state = true; c->leader_recovery_state = 1; break;
		}
		round_trip(r, "partition_change one field");
		free(r);
	}
}

Test(mrec, every_other_type_round_trips)
{
	struct sluice_mrec *r = rec_new(SLUICE_MREC_CONFIG, 0);
	r->config.resource_type = SLUICE_MREC_RESOURCE_TOPIC;
	fill(r->config.resource_name, SLUICE_TOPIC_NAME_MAX, 't');
	fill(r->config.name, SLUICE_MREC_NAME_MAX, 'n');
	fill(r->config.value, SLUICE_MREC_CONFIG_VALUE_MAX, 'v');
	round_trip(r, "config max");
	memset(r->config.value, 0, sizeof r->config.value);
	round_trip(r, "config empty value");
	r->config.value_null = true;
	round_trip(r, "config null value");
	free(r);

	r = rec_new(SLUICE_MREC_TOPIC, 0);
	fill(r->topic.name, SLUICE_TOPIC_NAME_MAX, 'x');
	memset(r->topic.topic_id, 0xaa, 16);
	round_trip(r, "topic max");
	free(r);

	r = rec_new(SLUICE_MREC_FEATURE_LEVEL, 0);
	fill(r->feature_level.name, SLUICE_MREC_NAME_MAX, 'f');
	r->feature_level.level = INT16_MIN;
	round_trip(r, "feature_level max");
	free(r);

	enum sluice_mrec_type simple[] = {SLUICE_MREC_UNREGISTER_BROKER, SLUICE_MREC_FENCE_BROKER,
					  SLUICE_MREC_UNFENCE_BROKER,    SLUICE_MREC_REMOVE_TOPIC,
					  SLUICE_MREC_PRODUCER_IDS,      SLUICE_MREC_NO_OP};
	for (size_t i = 0; i < sizeof simple / sizeof simple[0]; i++) {
		r = ref_simple(simple[i]);
		round_trip(r, sluice_mrec_type_name(simple[i]));
		free(r);
	}
	int8_t fenced[] = {-1, 0, 1}, shutdown[] = {-1, 1};
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++) {
			r = ref_registration_change(3, fenced[i], shutdown[j]);
			round_trip(r, "broker_registration_change");
			free(r);
		}
}

/* ---- refusals --------------------------------------------------------------------- */

static void expect_refused(const char *hex, const char *what, const char *err_has)
{
	uint8_t bytes[1024];
	size_t n = unhex(hex, bytes, sizeof bytes);
	struct sluice_mrec got;
	errbuf[0] = '\0';
	cr_expect_eq(decode_guarded(bytes, n, &got, errbuf, sizeof errbuf), -1, "%s accepted", what);
	cr_expect(strstr(errbuf, err_has) != NULL, "%s: error '%s' lacks '%s'", what, errbuf, err_has);
}

Test(mrec, frame_key_version_and_trailing_bytes_are_refused)
{
	expect_refused("00020000", "frame version 0", "frame version");
	expect_refused("0f020000", "frame version 15", "frame version");
	expect_refused("01060000", "api key 6 (not in mrec.h)", "unknown api key");
	expect_refused("01150000", "api key 21", "unknown api key");
	expect_refused("01e8070000", "api key 1000", "unknown api key");
	expect_refused("01140100", "NoOpRecord v1", "unsupported version");
	expect_refused("010005", "RegisterBrokerRecord v5", "unsupported version");
	expect_refused("0114ffff0300", "version above int16", "unsupported version");
	expect_refused("0114000000", "NoOpRecord with a trailing byte", "bytes after the record");
	expect_refused("0109001112131415161718191a1b1c1d1e1f200000", "RemoveTopicRecord with a trailing byte",
		       "bytes after the record");
	expect_refused("018080808080", "over-long varint", "varint");
	expect_refused("", "nothing", "frame version");
}

Test(mrec, lengths_and_counts_beyond_the_limits_are_refused)
{
	/* PartitionRecord v2 with 17 replicas */
	char hex[1024] = "010302000000001112131415161718191a1b1c1d1e1f2012";
	for (int i = 0; i < 17; i++)
		strcat(hex, "00000001");
	strcat(hex, "0101010000000100000000000000000100");
	expect_refused(hex, "17 replicas", "Replicas");
	/* Isr null in a PartitionRecord (not nullable) */
	expect_refused("010302000000001112131415161718191a1b1c1d1e1f20020000000100010101000000010000000000000000"
		       "0100",
		       "null Isr", "null");
	/* TopicRecord with a null name, a name with a NUL byte, a name of 250 bytes */
	expect_refused("010200001112131415161718191a1b1c1d1e1f2000", "null topic name", "Name");
	expect_refused("01020004610062" "1112131415161718191a1b1c1d1e1f2000", "NUL in name", "NUL");
	strcpy(hex, "010200fb01");
	for (int i = 0; i < 250; i++)
		strcat(hex, "61");
	strcat(hex, "1112131415161718191a1b1c1d1e1f2000");
	expect_refused(hex, "250-byte topic name", "limit");
	/* A string length beyond the record */
	expect_refused("0102007f61", "name longer than the record", "Name");
	/* RegisterBrokerRecord with 9 endpoints */
	strcpy(hex, "01000400000003000102030405060708090a0b0c0d0e0f10000000000000002a0a");
	for (int i = 0; i < 9; i++)
		strcat(hex, "0241026800010000" "00");
	strcat(hex, "010001000000");
	expect_refused(hex, "9 endpoints", "EndPoints");
	/* Tagged fields: size beyond the record, value shorter than its size, count absurd */
	expect_refused("01140001000a00", "tag size beyond", "tagged");
	expect_refused("010502000000001112131415161718191a1b1c1d1e1f2001010500000001ff", "leader tag too long",
		       "longer than its value");
	expect_refused("010502000000001112131415161718191a1b1c1d1e1f200101030000ff", "leader tag too short", "Leader");
	expect_refused("011400ff", "tag count cut", "TaggedFields");
	expect_refused("0114007f", "tag count beyond the record", "tagged field count");
	/* BrokerRegistrationChangeRecord with unknown change values */
	expect_refused("01110300000003000000000000002a01000102", "Fenced 2", "fencing");
	expect_refused("01110300000003000000000000002a01010102", "InControlledShutdown 2", "controlled shutdown");
}

Test(mrec, unknown_tags_are_skipped_and_version_gated_tags_are_unknown)
{
	/* NoOpRecord with an unknown tag 9 of 3 bytes: decoded */
	uint8_t b[64];
	struct sluice_mrec got;
	size_t n = unhex("011400010903616263", b, sizeof b);
	cr_expect_eq(decode_guarded(b, n, &got, errbuf, sizeof errbuf), 0, "%s", errbuf);
	/* PartitionChangeRecord v0 with tag 6 (ELR, v2+): unknown at v0, skipped, not applied */
	n = unhex("010500000000021112131415161718191a1b1c1d1e1f200106050200000003", b, sizeof b);
	cr_assert_eq(decode_guarded(b, n, &got, errbuf, sizeof errbuf), 0, "%s", errbuf);
	cr_expect(!got.partition_change.has_elr);
	/* the same at v2: applied */
	n = unhex("010502000000021112131415161718191a1b1c1d1e1f200106050200000003", b, sizeof b);
	cr_assert_eq(decode_guarded(b, n, &got, errbuf, sizeof errbuf), 0, "%s", errbuf);
	cr_expect(got.partition_change.has_elr && got.partition_change.elr.n == 1 &&
		  got.partition_change.elr.id[0] == 3);
	/* A leader tag holding -2 means no change, as in Kafka */
	n = unhex("010502000000021112131415161718191a1b1c1d1e1f20010104fffffffe", b, sizeof b);
	cr_assert_eq(decode_guarded(b, n, &got, errbuf, sizeof errbuf), 0, "%s", errbuf);
	cr_expect(!got.partition_change.has_leader);
}

Test(mrec, the_error_names_record_version_field_and_byte)
{
	uint8_t b[64];
	size_t n = unhex("0107000000000300000000", b, sizeof b); /* FenceBrokerRecord cut in Epoch */
	struct sluice_mrec got;
	cr_assert_eq(decode_guarded(b, n, &got, errbuf, sizeof errbuf), -1);
	cr_expect(strstr(errbuf, "FenceBrokerRecord") && strstr(errbuf, "v0") && strstr(errbuf, "Epoch") &&
			  strstr(errbuf, "byte 7"),
		  "%s", errbuf);
}

Test(mrec, records_the_encoder_cannot_represent_are_refused_and_leave_w_unchanged)
{
	struct kwr w;
	kwr_init(&w, 64, SLUICE_MREC_ENCODED_MAX);
	kwr_raw(&w, "abc", 3);
	struct sluice_mrec *r = ref_register_broker(4, false);
	r->register_broker.endpoint_n = SLUICE_MREC_LISTENERS_MAX + 1;
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	r->register_broker.endpoint_n = 1;
	memset(r->register_broker.endpoints[0].host, 'h', sizeof r->register_broker.endpoints[0].host); /* no NUL */
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	free(r);
	r = ref_partition(2, 0);
	r->partition.isr.n = SLUICE_REPLICAS_MAX + 1;
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	r->partition.isr.n = -1;
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	free(r);
	r = ref_partition_change(2, 1);
	r->partition_change.leader = -2; /* Kafka's "no change" */
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	free(r);
	r = ref_partition_change(2, 2);
	r->partition_change.has_leader_recovery_state = true;
	r->partition_change.leader_recovery_state = -1;
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	free(r);
	r = ref_registration_change(3, -1, 0); /* leaving controlled shutdown: no such change in Kafka */
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	r->broker_registration_change.in_controlled_shutdown = -1;
	r->broker_registration_change.fenced = 2;
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	free(r);
	r = ref_config(false);
	memset(r->config.value, 'v', sizeof r->config.value);
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	r->config.value_null = true; /* a null value's buffer is not looked at */
	cr_expect_eq(sluice_mrec_encode(&w, r), 0);
	free(r);
	r = rec_new((enum sluice_mrec_type)6, 0);
	cr_expect_eq(sluice_mrec_encode(&w, r), -1);
	free(r);
	cr_expect(w.len > 3 && memcmp(w.buf, "abc", 3) == 0 && !w.err);
	kwr_free(&w);
}

/* ---- damage ------------------------------------------------------------------------ */

/* A decoded record always re-encodes, and decodes to itself again. */
static void check_decoded_is_sound(const struct sluice_mrec *got, const char *what)
{
	struct kwr w;
	kwr_init(&w, 64, SLUICE_MREC_ENCODED_MAX);
	cr_assert_eq(sluice_mrec_encode(&w, got), 0, "%s: a decoded record does not encode", what);
	struct sluice_mrec *again = calloc(1, sizeof *again);
	cr_assert_eq(sluice_mrec_decode(w.buf, w.len, again, errbuf, sizeof errbuf), 0, "%s: %s", what, errbuf);
	again->version = got->version;
	cr_expect(memcmp(again, got, sizeof *got) == 0, "%s: re-encoding changed the record", what);
	free(again);
	kwr_free(&w);
}

Test(mrec, every_byte_flip_of_every_reference_is_decoded_soundly_or_refused)
{
	for (size_t i = 0; i < REF_N; i++) {
		uint8_t bytes[1024];
		size_t n = unhex(refs[i].hex, bytes, sizeof bytes);
		for (size_t at = 0; at < n; at++) {
			for (int bit = 0; bit < 8; bit++) {
				bytes[at] ^= (uint8_t)(1u << bit);
				struct sluice_mrec got;
				if (decode_guarded(bytes, n, &got, errbuf, sizeof errbuf) == 0) {
					char what[128];
					snprintf(what, sizeof what, "%s, byte %zu bit %d", refs[i].name, at, bit);
					check_decoded_is_sound(&got, what);
				}
				bytes[at] ^= (uint8_t)(1u << bit);
			}
		}
	}
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL; /* fixed seed: failures reproduce */
static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return (uint32_t)(rng_state >> 16);
}

Test(mrec, random_garbage_never_reads_past_the_end)
{
	uint8_t buf[256];
	int decoded = 0;
	for (int round = 0; round < 20000; round++) {
		size_t n = (size_t)(round % 200);
		for (size_t i = 0; i < n; i++)
			buf[i] = (uint8_t)rng();
		/* a plausible header half the time, so the bodies get exercised */
		if (n >= 3 && round % 2) {
			static const uint8_t keys[] = {0, 1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 17, 20};
			buf[0] = 1;
			buf[1] = keys[(size_t)round % sizeof keys];
			buf[2] = (uint8_t)(round % 5);
		}
		struct sluice_mrec got;
		if (decode_guarded(buf, n, &got, errbuf, sizeof errbuf) == 0) {
			decoded++;
			check_decoded_is_sound(&got, "garbage");
		}
	}
	cr_log_info("random garbage: %d of 20000 decoded", decoded);
}

/* Kafka's records with a few random edits (a byte replaced, inserted or
 * removed, the end cut): what decodes must be sound, nothing may over-read. */
Test(mrec, mutated_references_never_read_past_the_end)
{
	int decoded = 0, rounds = 50000;
	for (int round = 0; round < rounds; round++) {
		uint8_t buf[1100];
		size_t n = unhex(refs[(size_t)round % REF_N].hex, buf, 1024);
		int edits = 1 + (int)(rng() % 4);
		for (int e = 0; e < edits && n > 0; e++) {
			size_t at = rng() % n;
			switch (rng() % 4) {
			case 0: buf[at] = (uint8_t)rng(); break;
			case 1: memmove(buf + at + 1, buf + at, n - at); buf[at] = (uint8_t)rng(); n++; break;
			case 2: memmove(buf + at, buf + at + 1, n - at - 1); n--; break;
			default: n = at; break;
			}
		}
		struct sluice_mrec got;
		if (decode_guarded(buf, n, &got, errbuf, sizeof errbuf) == 0) {
			decoded++;
			check_decoded_is_sound(&got, "mutated");
		}
	}
	cr_log_info("mutated references: %d of %d decoded", decoded, rounds);
}

Test(mrec, type_names)
{
	cr_expect_str_eq(sluice_mrec_type_name(SLUICE_MREC_PARTITION_CHANGE), "PartitionChangeRecord");
	cr_expect_str_eq(sluice_mrec_type_name(SLUICE_MREC_NO_OP), "NoOpRecord");
	cr_expect_str_eq(sluice_mrec_type_name((enum sluice_mrec_type)6), "UnknownRecord");
	cr_expect_str_eq(sluice_mrec_type_name((enum sluice_mrec_type)1000), "UnknownRecord");
}
