/* KRaft metadata records (see mrec.h): the codec. A record is serialised as
 * Kafka's MetadataRecordSerde does: the frame version (unsigned varint, 1),
 * the api key and the version (unsigned varints), then the message in the
 * flexible encoding every metadata record uses (compact strings and arrays,
 * a tagged-field section after each structure). Encoding writes the highest
 * version of each record known here and every field the structs hold;
 * fields Sluice does not keep (broker features, log directories) are
 * written as Kafka's defaults and, when decoded, checked for shape and
 * dropped. Decoding accepts every version in
 * the schema, follows the field layout of that version, checks every length
 * against the bytes left and every count against the structs' limits, and
 * refuses trailing bytes, exactly as Kafka's reader does. A decoding error
 * names the record, its version, the field and the byte it started at. */
#include "control/mrec.h"
#include <assert.h>
#include <stdio.h>
#include <string.h>

#define FRAME_VERSION 1 /* AbstractApiMessageSerde.DEFAULT_FRAME_VERSION */
#define API_KEY_MAX SLUICE_MREC_NO_OP

/* Sentinels of PartitionChangeRecord and BrokerRegistrationChangeRecord. */
#define LEADER_NO_CHANGE (-2)
#define RECOVERY_NO_CHANGE (-1)
#define FENCING_FENCE 1   /* BrokerRegistrationFencingChange */
#define FENCING_NONE 0
#define FENCING_UNFENCE (-1)
#define SHUTDOWN_NONE 0 /* BrokerRegistrationInControlledShutdownChange */
#define SHUTDOWN_IN 1

/* The smallest encodings of array elements, for krd_array's bound. */
#define ENDPOINT_BYTES_MIN 7 /* name, host (1 each), port 2, protocol 2, tags 1 */
#define FEATURE_BYTES_MIN 6  /* name 1, min 2, max 2, tags 1 */
#define UUID_BYTES 16

/* ---- decoding ----------------------------------------------------------------- */

/* A reader plus what the error message needs: the field being read and
 * where it started (relative to the record, also inside tagged fields). */
struct mdec {
	struct krd rd;
	const uint8_t *origin; /* the record's first byte */
	int16_t version;
	const char *field;
	size_t field_at;
};

static void fld(struct mdec *d, const char *name)
{
	if (d->rd.err)
		return;
	d->field = name;
	d->field_at = (size_t)(d->rd.p - d->origin);
}

static bool dfail(struct mdec *d, const char *why) { return krd_fail(&d->rd, why); }

static int32_t rd_i32(struct mdec *d, const char *field)
{
	fld(d, field);
	return krd_i32(&d->rd);
}
static int64_t rd_i64(struct mdec *d, const char *field)
{
	fld(d, field);
	return krd_i64(&d->rd);
}
static int16_t rd_i16(struct mdec *d, const char *field)
{
	fld(d, field);
	return krd_i16(&d->rd);
}
static int8_t rd_i8(struct mdec *d, const char *field)
{
	fld(d, field);
	return krd_i8(&d->rd);
}
static void rd_uuid(struct mdec *d, const char *field, uint8_t out[16])
{
	fld(d, field);
	krd_uuid(&d->rd, out);
}

/* A compact string into out[0..max]: NUL-terminated, "" for a null one
 * (which only nullable fields accept; *is_null says which it was). Strings
 * longer than max or holding a NUL byte are refused: they could not
 * round-trip through a C string. */
static void rd_str(struct mdec *d, const char *field, char *out, size_t max, bool nullable, bool *is_null)
{
	fld(d, field);
	out[0] = '\0';
	struct kstr s = krd_string(&d->rd, true);
	if (d->rd.err)
		return;
	if (is_null)
		*is_null = !s.ptr;
	if (!s.ptr) {
		if (!nullable)
			dfail(d, "null in a non-nullable string");
		return;
	}
	if ((size_t)s.len > max) {
		dfail(d, "string longer than its limit");
		return;
	}
	if (s.len && memchr(s.ptr, 0, (size_t)s.len)) {
		dfail(d, "NUL byte inside a string");
		return;
	}
	memcpy(out, s.ptr, (size_t)s.len);
	out[s.len] = '\0';
}

/* A compact []int32 of broker ids; returns false for a null one (which
 * only nullable fields accept). At most SLUICE_REPLICAS_MAX ids. */
static bool rd_ids(struct mdec *d, const char *field, struct sluice_mrec_ids *out, bool nullable)
{
	fld(d, field);
	memset(out, 0, sizeof *out); /* a repeated tag leaves nothing of the first */
	int32_t n = krd_array(&d->rd, true, sizeof(int32_t));
	if (d->rd.err)
		return false;
	if (n < 0) {
		if (!nullable)
			dfail(d, "null in a non-nullable array");
		return false;
	}
	if (n > SLUICE_REPLICAS_MAX)
		return dfail(d, "more ids than SLUICE_REPLICAS_MAX");
	for (int32_t i = 0; i < n; i++)
		out->id[i] = krd_i32(&d->rd);
	out->n = d->rd.err ? 0 : n;
	return !d->rd.err;
}

/* A compact []uuid Sluice does not keep (log directories): checked, skipped. */
static void rd_uuids_skip(struct mdec *d, const char *field, bool nullable)
{
	fld(d, field);
	int32_t n = krd_array(&d->rd, true, UUID_BYTES);
	if (d->rd.err)
		return;
	if (n < 0) {
		if (!nullable)
			dfail(d, "null in a non-nullable array");
		return;
	}
	krd_skip(&d->rd, (size_t)n * UUID_BYTES);
}

/* Known tagged fields of one structure: returns true when it read `tag`
 * from sub (which holds exactly the field's bytes), false for a tag this
 * version does not know (skipped, as Kafka keeps it as unknown). */
typedef bool (*tag_fn)(struct mdec *sub, uint32_t tag, void *out);

static void rd_tags(struct mdec *d, tag_fn known, void *out)
{
	fld(d, "TaggedFields");
	uint32_t count = krd_uvarint(&d->rd);
	if (d->rd.err)
		return;
	if (count > SLUICE_KAFKA_TAGGED_FIELDS_MAX || count * 2u > krd_left(&d->rd)) {
		dfail(d, "tagged field count");
		return;
	}
	for (uint32_t i = 0; i < count && !d->rd.err; i++) {
		fld(d, "TaggedFields");
		uint32_t tag = krd_uvarint(&d->rd);
		uint32_t size = krd_uvarint(&d->rd);
		if (d->rd.err)
			return;
		if (size > krd_left(&d->rd)) {
			dfail(d, "tagged field size beyond the record");
			return;
		}
		struct mdec sub = {.origin = d->origin, .version = d->version};
		krd_init(&sub.rd, d->rd.p, size);
		if (known && known(&sub, tag, out)) {
			if (!sub.rd.err && krd_left(&sub.rd) != 0) {
				fld(&sub, "TaggedFields");
				dfail(&sub, "tagged field longer than its value");
			}
			if (sub.rd.err) {
				d->field = sub.field;
				d->field_at = sub.field_at;
				dfail(d, sub.rd.err_what);
				return;
			}
		}
		d->rd.p += size;
	}
}

static void rd_no_tags(struct mdec *d) { rd_tags(d, NULL, NULL); }

/* ---- encoding ----------------------------------------------------------------- */

static size_t uvarint_bytes(uint32_t v)
{
	size_t n = 1;
	while (v >= 0x80) {
		v >>= 7;
		n++;
	}
	return n;
}

static bool str_fits(const char *s, size_t max) { return strnlen(s, max + 1) <= max; }
static bool ids_fit(const struct sluice_mrec_ids *ids) { return ids->n >= 0 && ids->n <= SLUICE_REPLICAS_MAX; }
static size_t ids_bytes(const struct sluice_mrec_ids *ids)
{
	return uvarint_bytes((uint32_t)ids->n + 1) + 4 * (size_t)ids->n;
}

static void wr_ids(struct kwr *w, const struct sluice_mrec_ids *ids)
{
	kwr_array(w, true, ids->n);
	for (int32_t i = 0; i < ids->n; i++)
		kwr_i32(w, ids->id[i]);
}
/* A tagged field's tag and size; the caller writes the value. */
static void wr_tag(struct kwr *w, uint32_t tag, size_t size)
{
	kwr_uvarint(w, tag);
	kwr_uvarint(w, (uint32_t)size);
}
static void wr_tag_ids(struct kwr *w, uint32_t tag, const struct sluice_mrec_ids *ids)
{
	wr_tag(w, tag, ids_bytes(ids));
	wr_ids(w, ids);
}

/* ---- RegisterBrokerRecord (0), v0-4 ---------------------------------------- */

static bool register_broker_tag(struct mdec *sub, uint32_t tag, void *out)
{
	(void)out;
	if (tag == 0 && sub->version >= 3) {
		rd_uuids_skip(sub, "LogDirs", false);
		return true;
	}
	if (tag == 1 && sub->version >= 4) {
		rd_uuids_skip(sub, "CordonedLogDirs", true);
		return true;
	}
	return false;
}

static void rd_endpoint(struct mdec *d, struct sluice_mrec_endpoint *e)
{
	rd_str(d, "EndPoints.Name", e->name, SLUICE_MREC_NAME_MAX, false, NULL);
	rd_str(d, "EndPoints.Host", e->host, SLUICE_BROKER_HOST_MAX, false, NULL);
	e->port = (uint16_t)rd_i16(d, "EndPoints.Port");
	e->security_protocol = rd_i16(d, "EndPoints.SecurityProtocol");
	rd_no_tags(d);
}

/* Features: what the broker supports; Sluice's controller does not
 * negotiate features, so they are checked for shape and dropped. */
static void rd_features_skip(struct mdec *d)
{
	fld(d, "Features");
	int32_t n = krd_array(&d->rd, true, FEATURE_BYTES_MIN);
	if (!d->rd.err && n < 0)
		dfail(d, "null in a non-nullable array");
	char name[SLUICE_MREC_NAME_MAX + 1];
	for (int32_t i = 0; i < n && !d->rd.err; i++) {
		rd_str(d, "Features.Name", name, SLUICE_MREC_NAME_MAX, false, NULL);
		(void)rd_i16(d, "Features.MinSupportedVersion");
		(void)rd_i16(d, "Features.MaxSupportedVersion");
		rd_no_tags(d);
	}
}

static void dec_register_broker(struct mdec *d, struct sluice_mrec *out)
{
	struct sluice_mrec_register_broker *b = &out->register_broker;
	b->broker_id = rd_i32(d, "BrokerId");
	if (d->version >= 2) {
		fld(d, "IsMigratingZkBroker");
		(void)krd_bool(&d->rd);
	}
	rd_uuid(d, "IncarnationId", b->incarnation_id);
	b->broker_epoch = rd_i64(d, "BrokerEpoch");
	fld(d, "EndPoints");
	int32_t n = krd_array(&d->rd, true, ENDPOINT_BYTES_MIN);
	if (!d->rd.err && n < 0)
		dfail(d, "null in a non-nullable array");
	if (!d->rd.err && n > SLUICE_MREC_LISTENERS_MAX)
		dfail(d, "more endpoints than SLUICE_MREC_LISTENERS_MAX");
	for (int32_t i = 0; i < n && !d->rd.err; i++)
		rd_endpoint(d, &b->endpoints[i]);
	b->endpoint_n = d->rd.err ? 0 : n;
	rd_features_skip(d);
	rd_str(d, "Rack", b->rack, SLUICE_BROKER_RACK_MAX, true, NULL);
	fld(d, "Fenced");
	b->fenced = krd_bool(&d->rd);
	if (d->version >= 1) {
		fld(d, "InControlledShutdown");
		b->in_controlled_shutdown = krd_bool(&d->rd);
	}
	rd_tags(d, register_broker_tag, NULL);
}

static int enc_register_broker(struct kwr *w, const struct sluice_mrec *r)
{
	const struct sluice_mrec_register_broker *b = &r->register_broker;
	if (b->endpoint_n < 0 || b->endpoint_n > SLUICE_MREC_LISTENERS_MAX || !str_fits(b->rack, SLUICE_BROKER_RACK_MAX))
		return -1;
	for (int32_t i = 0; i < b->endpoint_n; i++)
		if (!str_fits(b->endpoints[i].name, SLUICE_MREC_NAME_MAX) ||
		    !str_fits(b->endpoints[i].host, SLUICE_BROKER_HOST_MAX))
			return -1;
	kwr_i32(w, b->broker_id);
	kwr_bool(w, false); /* IsMigratingZkBroker */
	kwr_uuid(w, b->incarnation_id);
	kwr_i64(w, b->broker_epoch);
	kwr_array(w, true, b->endpoint_n);
	for (int32_t i = 0; i < b->endpoint_n; i++) {
		kwr_cstr(w, true, b->endpoints[i].name);
		kwr_cstr(w, true, b->endpoints[i].host);
		kwr_i16(w, (int16_t)b->endpoints[i].port);
		kwr_i16(w, b->endpoints[i].security_protocol);
		kwr_tags_empty(w);
	}
	kwr_array(w, true, 0); /* Features */
	kwr_cstr(w, true, b->rack[0] ? b->rack : NULL);
	kwr_bool(w, b->fenced);
	kwr_bool(w, b->in_controlled_shutdown);
	kwr_tags_empty(w); /* LogDirs empty and CordonedLogDirs null: their defaults */
	return 0;
}

/* ---- UnregisterBrokerRecord (1), v0 ----------------------------------------- */

static void dec_unregister_broker(struct mdec *d, struct sluice_mrec *out)
{
	out->unregister_broker.broker_id = rd_i32(d, "BrokerId");
	out->unregister_broker.broker_epoch = rd_i64(d, "BrokerEpoch");
	rd_no_tags(d);
}

static int enc_unregister_broker(struct kwr *w, const struct sluice_mrec *r)
{
	kwr_i32(w, r->unregister_broker.broker_id);
	kwr_i64(w, r->unregister_broker.broker_epoch);
	kwr_tags_empty(w);
	return 0;
}

/* ---- TopicRecord (2), v0 ------------------------------------------------------ */

static void dec_topic(struct mdec *d, struct sluice_mrec *out)
{
	rd_str(d, "Name", out->topic.name, SLUICE_TOPIC_NAME_MAX, false, NULL);
	rd_uuid(d, "TopicId", out->topic.topic_id);
	rd_no_tags(d);
}

static int enc_topic(struct kwr *w, const struct sluice_mrec *r)
{
	if (!str_fits(r->topic.name, SLUICE_TOPIC_NAME_MAX))
		return -1;
	kwr_cstr(w, true, r->topic.name);
	kwr_uuid(w, r->topic.topic_id);
	kwr_tags_empty(w);
	return 0;
}

/* ---- PartitionRecord (3), v0-2 -------------------------------------------------- */

static bool partition_tag(struct mdec *sub, uint32_t tag, void *out)
{
	struct sluice_mrec_partition *p = out;
	if (tag == 0) {
		p->leader_recovery_state = rd_i8(sub, "LeaderRecoveryState");
		return true;
	}
	if (tag == 1 && sub->version >= 2) {
		(void)rd_ids(sub, "EligibleLeaderReplicas", &p->elr, true);
		return true;
	}
	if (tag == 2 && sub->version >= 2) {
		(void)rd_ids(sub, "LastKnownElr", &p->last_known_elr, true);
		return true;
	}
	return false;
}

static void dec_partition(struct mdec *d, struct sluice_mrec *out)
{
	struct sluice_mrec_partition *p = &out->partition;
	p->partition_id = rd_i32(d, "PartitionId");
	rd_uuid(d, "TopicId", p->topic_id);
	(void)rd_ids(d, "Replicas", &p->replicas, false);
	(void)rd_ids(d, "Isr", &p->isr, false);
	(void)rd_ids(d, "RemovingReplicas", &p->removing, false);
	(void)rd_ids(d, "AddingReplicas", &p->adding, false);
	p->leader = rd_i32(d, "Leader");
	p->leader_epoch = rd_i32(d, "LeaderEpoch");
	p->partition_epoch = rd_i32(d, "PartitionEpoch");
	if (d->version >= 1)
		rd_uuids_skip(d, "Directories", false);
	rd_tags(d, partition_tag, p);
}

static int enc_partition(struct kwr *w, const struct sluice_mrec *r)
{
	const struct sluice_mrec_partition *p = &r->partition;
	if (!ids_fit(&p->replicas) || !ids_fit(&p->isr) || !ids_fit(&p->removing) || !ids_fit(&p->adding) ||
	    !ids_fit(&p->elr) || !ids_fit(&p->last_known_elr))
		return -1;
	kwr_i32(w, p->partition_id);
	kwr_uuid(w, p->topic_id);
	wr_ids(w, &p->replicas);
	wr_ids(w, &p->isr);
	wr_ids(w, &p->removing);
	wr_ids(w, &p->adding);
	kwr_i32(w, p->leader);
	kwr_i32(w, p->leader_epoch);
	kwr_i32(w, p->partition_epoch);
	kwr_array(w, true, 0); /* Directories: none assigned (Kafka reads them as migrating) */
	/* Tagged fields, in tag order, each only when not its default. */
	uint32_t tags = (p->leader_recovery_state != 0) + (p->elr.n > 0) + (p->last_known_elr.n > 0);
	kwr_uvarint(w, tags);
	if (p->leader_recovery_state != 0) {
		wr_tag(w, 0, 1);
		kwr_i8(w, p->leader_recovery_state);
	}
	if (p->elr.n > 0)
		wr_tag_ids(w, 1, &p->elr);
	if (p->last_known_elr.n > 0)
		wr_tag_ids(w, 2, &p->last_known_elr);
	return 0;
}

/* ---- ConfigRecord (4), v0 ------------------------------------------------------- */

static void dec_config(struct mdec *d, struct sluice_mrec *out)
{
	struct sluice_mrec_config *c = &out->config;
	c->resource_type = rd_i8(d, "ResourceType");
	rd_str(d, "ResourceName", c->resource_name, SLUICE_TOPIC_NAME_MAX, false, NULL);
	rd_str(d, "Name", c->name, SLUICE_MREC_NAME_MAX, false, NULL);
	rd_str(d, "Value", c->value, SLUICE_MREC_CONFIG_VALUE_MAX, true, &c->value_null);
	rd_no_tags(d);
}

static int enc_config(struct kwr *w, const struct sluice_mrec *r)
{
	const struct sluice_mrec_config *c = &r->config;
	if (!str_fits(c->resource_name, SLUICE_TOPIC_NAME_MAX) || !str_fits(c->name, SLUICE_MREC_NAME_MAX) ||
	    (!c->value_null && !str_fits(c->value, SLUICE_MREC_CONFIG_VALUE_MAX)))
		return -1;
	kwr_i8(w, c->resource_type);
	kwr_cstr(w, true, c->resource_name);
	kwr_cstr(w, true, c->name);
	kwr_cstr(w, true, c->value_null ? NULL : c->value);
	kwr_tags_empty(w);
	return 0;
}

/* ---- PartitionChangeRecord (5), v0-2 ------------------------------------------ */

static bool partition_change_tag(struct mdec *sub, uint32_t tag, void *out)
{
	struct sluice_mrec_partition_change *c = out;
	switch (tag) {
	case 0:
		c->has_isr = rd_ids(sub, "Isr", &c->isr, true);
		return true;
	case 1:
		c->leader = rd_i32(sub, "Leader");
		c->has_leader = c->leader != LEADER_NO_CHANGE;
		if (!c->has_leader)
			c->leader = 0;
		return true;
	case 2:
		c->has_replicas = rd_ids(sub, "Replicas", &c->replicas, true);
		return true;
	case 3:
		c->has_removing = rd_ids(sub, "RemovingReplicas", &c->removing, true);
		return true;
	case 4:
		c->has_adding = rd_ids(sub, "AddingReplicas", &c->adding, true);
		return true;
	case 5:
		c->leader_recovery_state = rd_i8(sub, "LeaderRecoveryState");
		c->has_leader_recovery_state = c->leader_recovery_state != RECOVERY_NO_CHANGE;
		if (!c->has_leader_recovery_state)
			c->leader_recovery_state = 0;
		return true;
	case 6:
		if (sub->version < 2)
			return false;
		c->has_elr = rd_ids(sub, "EligibleLeaderReplicas", &c->elr, true);
		return true;
	case 7:
		if (sub->version < 2)
			return false;
		c->has_last_known_elr = rd_ids(sub, "LastKnownElr", &c->last_known_elr, true);
		return true;
	case 8:
		if (sub->version < 1)
			return false;
		rd_uuids_skip(sub, "Directories", true);
		return true;
	default:
		return false;
	}
}

static void dec_partition_change(struct mdec *d, struct sluice_mrec *out)
{
	struct sluice_mrec_partition_change *c = &out->partition_change;
	c->partition_id = rd_i32(d, "PartitionId");
	rd_uuid(d, "TopicId", c->topic_id);
	rd_tags(d, partition_change_tag, c);
}

static int enc_partition_change(struct kwr *w, const struct sluice_mrec *r)
{
	const struct sluice_mrec_partition_change *c = &r->partition_change;
	if ((c->has_isr && !ids_fit(&c->isr)) || (c->has_replicas && !ids_fit(&c->replicas)) ||
	    (c->has_elr && !ids_fit(&c->elr)) || (c->has_last_known_elr && !ids_fit(&c->last_known_elr)) ||
	    (c->has_removing && !ids_fit(&c->removing)) || (c->has_adding && !ids_fit(&c->adding)))
		return -1;
	/* The sentinels cannot be values: -2 is "no change" of the leader, -1 of the recovery state. */
	if ((c->has_leader && c->leader == LEADER_NO_CHANGE) ||
	    (c->has_leader_recovery_state && c->leader_recovery_state == RECOVERY_NO_CHANGE))
		return -1;
	kwr_i32(w, c->partition_id);
	kwr_uuid(w, c->topic_id);
	kwr_uvarint(w, (uint32_t)c->has_isr + c->has_leader + c->has_replicas + c->has_removing + c->has_adding +
			       c->has_leader_recovery_state + c->has_elr + c->has_last_known_elr);
	if (c->has_isr)
		wr_tag_ids(w, 0, &c->isr);
	if (c->has_leader) {
		wr_tag(w, 1, 4);
		kwr_i32(w, c->leader);
	}
	if (c->has_replicas)
		wr_tag_ids(w, 2, &c->replicas);
	if (c->has_removing)
		wr_tag_ids(w, 3, &c->removing);
	if (c->has_adding)
		wr_tag_ids(w, 4, &c->adding);
	if (c->has_leader_recovery_state) {
		wr_tag(w, 5, 1);
		kwr_i8(w, c->leader_recovery_state);
	}
	if (c->has_elr)
		wr_tag_ids(w, 6, &c->elr);
	if (c->has_last_known_elr)
		wr_tag_ids(w, 7, &c->last_known_elr);
	return 0;
}

/* ---- FenceBrokerRecord (7), UnfenceBrokerRecord (8), v0 ------------------------ */

static void dec_fence_broker(struct mdec *d, struct sluice_mrec *out)
{
	out->fence_broker.id = rd_i32(d, "Id");
	out->fence_broker.epoch = rd_i64(d, "Epoch");
	rd_no_tags(d);
}
static void dec_unfence_broker(struct mdec *d, struct sluice_mrec *out)
{
	out->unfence_broker.id = rd_i32(d, "Id");
	out->unfence_broker.epoch = rd_i64(d, "Epoch");
	rd_no_tags(d);
}

static int enc_fence_broker(struct kwr *w, const struct sluice_mrec *r)
{
	kwr_i32(w, r->fence_broker.id);
	kwr_i64(w, r->fence_broker.epoch);
	kwr_tags_empty(w);
	return 0;
}
static int enc_unfence_broker(struct kwr *w, const struct sluice_mrec *r)
{
	kwr_i32(w, r->unfence_broker.id);
	kwr_i64(w, r->unfence_broker.epoch);
	kwr_tags_empty(w);
	return 0;
}

/* ---- RemoveTopicRecord (9), FeatureLevelRecord (12), v0 ------------------------ */

static void dec_remove_topic(struct mdec *d, struct sluice_mrec *out)
{
	rd_uuid(d, "TopicId", out->remove_topic.topic_id);
	rd_no_tags(d);
}

static int enc_remove_topic(struct kwr *w, const struct sluice_mrec *r)
{
	kwr_uuid(w, r->remove_topic.topic_id);
	kwr_tags_empty(w);
	return 0;
}

static void dec_feature_level(struct mdec *d, struct sluice_mrec *out)
{
	rd_str(d, "Name", out->feature_level.name, SLUICE_MREC_NAME_MAX, false, NULL);
	out->feature_level.level = rd_i16(d, "FeatureLevel");
	rd_no_tags(d);
}

static int enc_feature_level(struct kwr *w, const struct sluice_mrec *r)
{
	if (!str_fits(r->feature_level.name, SLUICE_MREC_NAME_MAX))
		return -1;
	kwr_cstr(w, true, r->feature_level.name);
	kwr_i16(w, r->feature_level.level);
	kwr_tags_empty(w);
	return 0;
}

/* ---- ProducerIdsRecord (15), v0 ----------------------------------------------- */

static void dec_producer_ids(struct mdec *d, struct sluice_mrec *out)
{
	out->producer_ids.broker_id = rd_i32(d, "BrokerId");
	out->producer_ids.broker_epoch = rd_i64(d, "BrokerEpoch");
	out->producer_ids.next_producer_id = rd_i64(d, "NextProducerId");
	rd_no_tags(d);
}

static int enc_producer_ids(struct kwr *w, const struct sluice_mrec *r)
{
	kwr_i32(w, r->producer_ids.broker_id);
	kwr_i64(w, r->producer_ids.broker_epoch);
	kwr_i64(w, r->producer_ids.next_producer_id);
	kwr_tags_empty(w);
	return 0;
}

/* ---- BrokerRegistrationChangeRecord (17), v0-3 ------------------------------- */

/* The wire says -1 unfence, 0 no change, 1 fence; the struct -1 no change,
 * 0 unfenced, 1 fenced. Controlled shutdown on the wire: 0 no change, 1
 * entered; it is never left by a change (only by a new registration, as
 * in Kafka), so the struct's 0 has no encoding. */
static bool registration_change_tag(struct mdec *sub, uint32_t tag, void *out)
{
	struct sluice_mrec *r = out;
	int8_t v;
	switch (tag) {
	case 0:
		v = rd_i8(sub, "Fenced");
		if (v == FENCING_FENCE || v == FENCING_UNFENCE || v == FENCING_NONE)
			r->broker_registration_change.fenced = v == FENCING_NONE ? -1 : v == FENCING_FENCE;
		else
			dfail(sub, "unknown fencing change");
		return true;
	case 1:
		if (sub->version < 1)
			return false;
		v = rd_i8(sub, "InControlledShutdown");
		if (v == SHUTDOWN_NONE || v == SHUTDOWN_IN)
			r->broker_registration_change.in_controlled_shutdown = v == SHUTDOWN_IN ? 1 : -1;
		else
			dfail(sub, "unknown controlled shutdown change");
		return true;
	case 2:
		if (sub->version < 2)
			return false;
		rd_uuids_skip(sub, "LogDirs", false);
		return true;
	case 3:
		if (sub->version < 3)
			return false;
		rd_uuids_skip(sub, "CordonedLogDirs", true);
		return true;
	default:
		return false;
	}
}

static void dec_registration_change(struct mdec *d, struct sluice_mrec *out)
{
	out->broker_registration_change.broker_id = rd_i32(d, "BrokerId");
	out->broker_registration_change.broker_epoch = rd_i64(d, "BrokerEpoch");
	out->broker_registration_change.fenced = -1;
	out->broker_registration_change.in_controlled_shutdown = -1;
	rd_tags(d, registration_change_tag, out);
}

static int enc_registration_change(struct kwr *w, const struct sluice_mrec *r)
{
	int8_t fenced = r->broker_registration_change.fenced;
	int8_t shutdown = r->broker_registration_change.in_controlled_shutdown;
	if (fenced < -1 || fenced > 1 || (shutdown != -1 && shutdown != 1))
		return -1;
	kwr_i32(w, r->broker_registration_change.broker_id);
	kwr_i64(w, r->broker_registration_change.broker_epoch);
	kwr_uvarint(w, (uint32_t)(fenced != -1) + (shutdown == 1));
	if (fenced != -1) {
		wr_tag(w, 0, 1);
		kwr_i8(w, fenced ? FENCING_FENCE : FENCING_UNFENCE);
	}
	if (shutdown == 1) {
		wr_tag(w, 1, 1);
		kwr_i8(w, SHUTDOWN_IN);
	}
	return 0;
}

/* ---- NoOpRecord (20), v0 ---------------------------------------------------- */

static void dec_no_op(struct mdec *d, struct sluice_mrec *out)
{
	(void)out;
	rd_no_tags(d);
}

static int enc_no_op(struct kwr *w, const struct sluice_mrec *r)
{
	(void)r;
	kwr_tags_empty(w);
	return 0;
}

/* ---- the table and the entry points --------------------------------------------- */

struct mrec_kind {
	const char *name;
	int16_t version_max; /* the schema's highest: decoded 0..max, encoded as max */
	void (*decode)(struct mdec *d, struct sluice_mrec *out);
	int (*encode)(struct kwr *w, const struct sluice_mrec *r); /* -1: r breaks its limits */
};

static const struct mrec_kind kinds[API_KEY_MAX + 1] = {
	[SLUICE_MREC_REGISTER_BROKER] = {"RegisterBrokerRecord", 4, dec_register_broker, enc_register_broker},
	[SLUICE_MREC_UNREGISTER_BROKER] = {"UnregisterBrokerRecord", 0, dec_unregister_broker, enc_unregister_broker},
	[SLUICE_MREC_TOPIC] = {"TopicRecord", 0, dec_topic, enc_topic},
	[SLUICE_MREC_PARTITION] = {"PartitionRecord", 2, dec_partition, enc_partition},
	[SLUICE_MREC_CONFIG] = {"ConfigRecord", 0, dec_config, enc_config},
	[SLUICE_MREC_PARTITION_CHANGE] = {"PartitionChangeRecord", 2, dec_partition_change, enc_partition_change},
	[SLUICE_MREC_FENCE_BROKER] = {"FenceBrokerRecord", 0, dec_fence_broker, enc_fence_broker},
	[SLUICE_MREC_UNFENCE_BROKER] = {"UnfenceBrokerRecord", 0, dec_unfence_broker, enc_unfence_broker},
	[SLUICE_MREC_REMOVE_TOPIC] = {"RemoveTopicRecord", 0, dec_remove_topic, enc_remove_topic},
	[SLUICE_MREC_FEATURE_LEVEL] = {"FeatureLevelRecord", 0, dec_feature_level, enc_feature_level},
	[SLUICE_MREC_PRODUCER_IDS] = {"ProducerIdsRecord", 0, dec_producer_ids, enc_producer_ids},
	[SLUICE_MREC_BROKER_REGISTRATION_CHANGE] = {"BrokerRegistrationChangeRecord", 3, dec_registration_change,
						    enc_registration_change},
	[SLUICE_MREC_NO_OP] = {"NoOpRecord", 0, dec_no_op, enc_no_op},
};

static const struct mrec_kind *kind_of(uint32_t api_key)
{
	if (api_key > API_KEY_MAX || !kinds[api_key].name)
		return NULL;
	return &kinds[api_key];
}

const char *sluice_mrec_type_name(enum sluice_mrec_type t)
{
	const struct mrec_kind *k = kind_of((uint32_t)t);
	return k ? k->name : "UnknownRecord";
}

int sluice_mrec_encode(struct kwr *w, const struct sluice_mrec *r)
{
	const struct mrec_kind *k = kind_of((uint32_t)r->type);
	if (!k)
		return -1;
	size_t start = w->len;
	kwr_uvarint(w, FRAME_VERSION);
	kwr_uvarint(w, (uint32_t)r->type);
	kwr_uvarint(w, (uint32_t)k->version_max);
	if (k->encode(w, r) != 0) {
		w->len = start; /* nothing of a refused record stays in w */
		return -1;
	}
	assert(w->err || w->len - start <= SLUICE_MREC_ENCODED_MAX);
	return w->err ? -1 : 0;
}

int sluice_mrec_decode(const uint8_t *p, size_t len, struct sluice_mrec *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof *out);
	struct mdec d = {.origin = p, .field = "frame version"};
	krd_init(&d.rd, p, len);
	fld(&d, "frame version");
	uint32_t frame = krd_uvarint(&d.rd);
	if (!d.rd.err && frame != FRAME_VERSION)
		dfail(&d, "unknown frame version (only 1 is)");
	fld(&d, "api key");
	uint32_t api_key = krd_uvarint(&d.rd);
	fld(&d, "version");
	uint32_t version = krd_uvarint(&d.rd);
	const struct mrec_kind *k = d.rd.err ? NULL : kind_of(api_key);
	if (!d.rd.err && !k) {
		fld(&d, "api key");
		dfail(&d, "unknown api key");
	}
	if (!d.rd.err && version > (uint32_t)k->version_max)
		dfail(&d, "unsupported version");
	if (!d.rd.err) {
		out->type = (enum sluice_mrec_type)api_key;
		out->version = (int16_t)version;
		d.version = (int16_t)version;
		k->decode(&d, out);
	}
	if (!d.rd.err && krd_left(&d.rd) != 0) {
		fld(&d, "end");
		dfail(&d, "bytes after the record");
	}
	if (!d.rd.err)
		return 0;
	if (err && errlen)
		snprintf(err, errlen, "%s (api key %u) v%u: field %s at byte %zu of %zu: %s",
			 k ? k->name : "metadata record", api_key, version, d.field, d.field_at, len,
			 d.rd.err_what ? d.rd.err_what : "malformed");
	memset(out, 0, sizeof *out);
	return -1;
}
