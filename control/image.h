/* The cluster metadata image: the state that a Sluice cluster's metadata
 * records build up, applied one record at a time in log order. Controllers
 * hold one as their Raft state machine (control/quorum.h) and take
 * snapshots of it; brokers hold one fed by the metadata log they fetch from
 * the active controller, and publish sluice_meta_snapshots from it
 * (control/meta_controller.c). Applying is deterministic: the same records
 * in the same order give equal images on every process, which the tests
 * check with sluice_image_equal. A record that does not apply (a partition
 * of an unknown topic, a fence of an unknown broker) is refused with an
 * error and changes nothing: the caller decides whether that is a bug (a
 * controller's own proposal) or damage (fence and report).
 *
 * Single-threaded: the owner serialises applies and reads. */
#ifndef SLUICE_IMAGE_H
#define SLUICE_IMAGE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "control/meta.h"
#include "control/mrec.h"

#define SLUICE_IMAGE_BROKERS_MAX 4096
#define SLUICE_IMAGE_CONFIGS_MAX 1000000 /* config records over all resources */
#define SLUICE_IMAGE_PARTITIONS_MAX 1000000 /* over all topics */

struct sluice_image_broker {
	int32_t id;
	uint8_t incarnation_id[16];
	int64_t epoch; /* the metadata offset of its RegisterBrokerRecord, as in Kafka */
	int32_t endpoint_n;
	struct sluice_mrec_endpoint endpoints[SLUICE_MREC_LISTENERS_MAX];
	char rack[SLUICE_BROKER_RACK_MAX + 1];
	bool fenced;
	bool in_controlled_shutdown;
};

/* A partition as the metadata records left it. While a reassignment runs
 * (KIP-455), replicas holds the target replicas and then the ones being
 * removed, adding the targets not yet replicas before it, removing the
 * replicas not among the targets; both are empty otherwise. */
struct sluice_image_partition {
	struct sluice_mrec_ids replicas, isr, elr, last_known_elr;
	struct sluice_mrec_ids removing, adding;
	int32_t leader; /* -1: none (offline) */
	int32_t leader_epoch;
	int32_t partition_epoch;
	int8_t leader_recovery_state;
};

struct sluice_image_topic {
	char name[SLUICE_TOPIC_NAME_MAX + 1];
	uint8_t id[16];
	int32_t partition_n;
	struct sluice_image_partition *partitions; /* [partition_n], owned by the image */
};

struct sluice_image;

struct sluice_image *sluice_image_new(void);
void sluice_image_free(struct sluice_image *img);

/* Apply one record as metadata offset `offset` (strictly greater than the
 * last applied one), or with offset -1 as one record of a snapshot being
 * loaded (the offset stays; sluice_image_set_offset sets it after the last).
 * Returns 0, or -1 with err set and the image unchanged. */
int sluice_image_apply(struct sluice_image *img, const struct sluice_mrec *r, int64_t offset, char *err, size_t errlen);
/* The offset of the last record applied, -1 for an empty image. */
int64_t sluice_image_offset(const struct sluice_image *img);
/* Forget everything (before applying a snapshot's records). */
void sluice_image_clear(struct sluice_image *img);
/* Set the offset without a record: after a snapshot's records were applied
 * at their snapshot's end offset. */
void sluice_image_set_offset(struct sluice_image *img, int64_t offset);

/* Brokers, sorted by id. */
size_t sluice_image_broker_count(const struct sluice_image *img);
const struct sluice_image_broker *sluice_image_broker_at(const struct sluice_image *img, size_t i);
const struct sluice_image_broker *sluice_image_broker(const struct sluice_image *img, int32_t id);

/* Topics, sorted by name; lookups are O(log n) or better. */
size_t sluice_image_topic_count(const struct sluice_image *img);
const struct sluice_image_topic *sluice_image_topic_at(const struct sluice_image *img, size_t i);
const struct sluice_image_topic *sluice_image_topic_by_name(const struct sluice_image *img, const char *name,
							     size_t len);
const struct sluice_image_topic *sluice_image_topic_by_id(const struct sluice_image *img, const uint8_t id[16]);

/* Configs (ConfigRecord): the value, or NULL when not set. */
const char *sluice_image_config(const struct sluice_image *img, int8_t resource_type, const char *resource_name,
				const char *name);
/* Every config of one resource, in name order; stops early when fn returns non-zero. */
int sluice_image_configs(const struct sluice_image *img, int8_t resource_type, const char *resource_name,
			 int (*fn)(void *arg, const char *name, const char *value), void *arg);

/* The next producer id the allocator hands out (ProducerIdsRecord). */
int64_t sluice_image_next_producer_id(const struct sluice_image *img);

/* The whole image as records that rebuild it when applied in order to an
 * empty image (a snapshot, as KRaft's): brokers, topics with their
 * partitions, configs, the producer id allocator. fn returns non-zero to
 * stop (the result is then that value). */
int sluice_image_encode(const struct sluice_image *img, int (*fn)(void *arg, const struct sluice_mrec *r), void *arg);
/* Equal state (offsets included): for tests and for a restarted controller's checks. */
bool sluice_image_equal(const struct sluice_image *a, const struct sluice_image *b);

#endif
