/* Record batch v2 (magic 2): header layout, parsing and validation. Used by
 * the produce path (validate before append) and by storage (recovery scan).
 * BaseOffset and PartitionLeaderEpoch lie outside the CRC, so offsets are
 * assigned by rewriting them in place. */
#ifndef SLUICE_KAFKA_BATCH_H
#define SLUICE_KAFKA_BATCH_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_BATCH_HEADER_BYTES 61
#define SLUICE_BATCH_LOG_OVERHEAD 12 /* BaseOffset + Length */
#define SLUICE_BATCH_OFF_LENGTH 8
#define SLUICE_BATCH_OFF_EPOCH 12
#define SLUICE_BATCH_OFF_MAGIC 16
#define SLUICE_BATCH_OFF_CRC 17
#define SLUICE_BATCH_OFF_ATTRIBUTES 21
#define SLUICE_BATCH_OFF_LAST_DELTA 23
#define SLUICE_BATCH_OFF_BASE_TS 27
#define SLUICE_BATCH_OFF_MAX_TS 35
#define SLUICE_BATCH_OFF_PRODUCER_ID 43
#define SLUICE_BATCH_OFF_PRODUCER_EPOCH 51
#define SLUICE_BATCH_OFF_BASE_SEQ 53
#define SLUICE_BATCH_OFF_COUNT 57

#define SLUICE_BATCH_ATTR_CODEC_MASK 0x07
#define SLUICE_BATCH_ATTR_TS_LOG_APPEND 0x08
#define SLUICE_BATCH_ATTR_TRANSACTIONAL 0x10
#define SLUICE_BATCH_ATTR_CONTROL 0x20

struct sluice_batch {
	int64_t base_offset;
	int32_t length;        /* bytes after the Length field */
	int32_t leader_epoch;
	int8_t magic;
	uint32_t crc;
	int16_t attributes;
	int32_t last_offset_delta;
	int64_t base_timestamp;
	int64_t max_timestamp;
	int64_t producer_id;
	int16_t producer_epoch;
	int32_t base_sequence;
	int32_t records_count;
};

enum sluice_batch_result {
	SLUICE_BATCH_OK = 0,
	SLUICE_BATCH_SHORT,         /* fewer bytes than the header or the declared length */
	SLUICE_BATCH_BAD_LENGTH,    /* declared length below the header size */
	SLUICE_BATCH_BAD_MAGIC,     /* not magic 2 */
	SLUICE_BATCH_BAD_CRC,
	SLUICE_BATCH_BAD_COUNT,     /* RecordsCount != LastOffsetDelta + 1, or <= 0 */
	/* found by sluice_batch_verify, which decodes every record: */
	SLUICE_BATCH_BAD_CODEC,     /* compression codec 5, 6 or 7 */
	SLUICE_BATCH_BAD_PAYLOAD,   /* the compressed payload is corrupt or truncated */
	SLUICE_BATCH_TOO_BIG_INFLATED, /* the payload inflates past the caller's cap */
	SLUICE_BATCH_BAD_RECORD,    /* a record's length is not exactly its fields, or a length runs past it */
	SLUICE_BATCH_FEWER_RECORDS, /* the records end before RecordsCount of them */
	SLUICE_BATCH_EXTRA_BYTES,   /* bytes left after RecordsCount records */
	SLUICE_BATCH_BAD_DELTA,     /* record i's OffsetDelta is not i */
};

static inline int32_t sluice_batch_total_bytes(const struct sluice_batch *b)
{
	return b->length + SLUICE_BATCH_LOG_OVERHEAD;
}

/* Parse the header of the batch starting at p with avail bytes. Does not
 * check the CRC. On SLUICE_BATCH_OK, the whole batch (total bytes) is within avail. */
enum sluice_batch_result sluice_batch_parse(const uint8_t *p, size_t avail, struct sluice_batch *out);
/* Parse and verify the CRC and counts (what a producer must send). */
enum sluice_batch_result sluice_batch_check(const uint8_t *p, size_t avail, struct sluice_batch *out);
/* Parse and verify the CRC only: batches rewritten by compaction keep their
 * LastOffsetDelta while holding fewer records, as in Kafka. */
enum sluice_batch_result sluice_batch_check_crc(const uint8_t *p, size_t avail, struct sluice_batch *out);

/* One record inside a batch, as sluice_batch_records hands it out. raw
 * covers the whole encoded record including its length prefix, so a record
 * can be copied into another batch with the same base offset unchanged. */
struct sluice_record {
	int64_t offset, timestamp;
	const uint8_t *key, *value; /* NULL when null */
	int32_t key_len, value_len;
	const uint8_t *raw;
	size_t raw_len;
};

/* Call fn for every record of the batch at p (decompressing if needed,
 * up to out_max bytes). fn returns false to stop. Returns the number of
 * records visited, or -1 for a malformed or undecompressible batch. */
int32_t sluice_batch_records(const uint8_t *p, size_t len, size_t out_max,
			     bool (*fn)(const struct sluice_record *rec, void *arg), void *arg);
/* Record-level faults: the batch decodes, but a record breaks a rule of the
 * topic. Kafka answers these with one RecordErrors entry per record. */
enum sluice_record_fault {
	SLUICE_RECORD_NO_KEY = 1,   /* null key on a cleanup.policy=compact topic */
	SLUICE_RECORD_TIMESTAMP,    /* CreateTime outside [ts_min, ts_max] */
};

#define SLUICE_BATCH_RECORD_ERRORS_MAX 64 /* record errors kept (all are counted) */

struct sluice_record_error {
	int32_t index;     /* the record's position in the batch */
	uint8_t fault;     /* enum sluice_record_fault */
	int64_t timestamp; /* the record's timestamp (for SLUICE_RECORD_TIMESTAMP) */
};

/* The rules a produced batch's records must meet, and what was found. */
struct sluice_batch_verify {
	bool need_key;         /* cleanup.policy=compact: every record needs a key */
	bool check_timestamps; /* CreateTime: each timestamp other than -1 within [ts_min, ts_max]
				* (a record's timestamp is MaxTimestamp in a LogAppendTime batch) */
	int64_t ts_min, ts_max;
	int32_t at;            /* out: the record a structural fault was found at */
	int64_t max_timestamp; /* out: the largest record timestamp (-1 if none), as Kafka computes it */
	size_t inflated_bytes; /* out: the decompressed size (0 uncompressed) */
	int32_t nerrors;       /* out: record-level errors, all counted */
	struct sluice_record_error errors[SLUICE_BATCH_RECORD_ERRORS_MAX]; /* out: the first ones */
};

struct sluice_inflater;
/* Decode every record of the batch at p, whose header b sluice_batch_check
 * accepted, as Kafka's log validator does: a compressed payload is
 * decompressed with z (at most inflate_max bytes), there must be exactly
 * RecordsCount records with OffsetDeltas 0..n-1, each record's length must
 * be exactly what its fields take, and nothing may follow the last record.
 * Returns the first structural fault (v->at says at which record), else OK
 * with the record-level faults in v (v->nerrors > 0: refuse the batch).
 * Allocates nothing once z's buffer is large enough; z->buf is scratch. */
enum sluice_batch_result sluice_batch_verify(const uint8_t *p, const struct sluice_batch *b, struct sluice_inflater *z,
					     size_t inflate_max, struct sluice_batch_verify *v);

/* Rewrite MaxTimestamp (inside the CRC) and the CRC: how the broker makes
 * a CreateTime batch's header agree with its records, as Kafka does. */
void sluice_batch_set_max_timestamp(uint8_t *p, int64_t max_timestamp);
void sluice_batch_set_base_offset(uint8_t *p, int64_t base_offset, int32_t leader_epoch);
const char *sluice_batch_result_name(enum sluice_batch_result r);

/* One record for sluice_batch_build; a NULL key or value is encoded as null. */
struct sluice_record_kv {
	const void *key;
	int32_t key_len;
	const void *value;
	int32_t value_len;
};

struct kwr;
/* Append an uncompressed batch (BaseOffset 0, CreateTime timestamp, no
 * producer id) holding recs[0..n) to w, CRC included. Returns the batch's
 * offset in w, or -1 when w failed. */
int64_t sluice_batch_build(struct kwr *w, const struct sluice_record_kv *recs, int32_t n, int64_t timestamp_ms);

#endif
