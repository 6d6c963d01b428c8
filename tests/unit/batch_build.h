/* Test helper: a small, independent encoder for Kafka record batches v2
 * (magic 2), written from Kafka's published record-format description (the
 * protocol guide), so the tests do not check the broker's batch code against
 * itself. Records are encoded as the spec
 * says (varint length, attributes, varlong timestamp delta, varint offset
 * delta, varint-length key and value, header count); the CRC-32C covers
 * Attributes to the end. Only the codec writer and sluice_crc32c (both tested
 * on their own) are borrowed. */
#ifndef SLUICE_TEST_BATCH_BUILD_H
#define SLUICE_TEST_BATCH_BUILD_H
#include "common/crc32c.h"
#include "common/kafka/codec.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct tb_rec {
	const void *key;   /* NULL: null key */
	int32_t key_len;
	const void *value; /* NULL: null value */
	int32_t value_len;
	int64_t ts_delta;
};

struct tb_hdr {
	int64_t base_offset;
	int32_t leader_epoch;
	int16_t attributes;
	int32_t last_offset_delta;
	int64_t base_timestamp;
	int64_t max_timestamp;
	int64_t producer_id;
	int16_t producer_epoch;
	int32_t base_sequence;
	int32_t records_count;
};

static inline struct tb_hdr tb_hdr_default(int32_t count, int64_t base_ts)
{
	struct tb_hdr h = {0, -1, 0, count - 1, base_ts, base_ts, -1, -1, -1, count};
	return h;
}

/* Encode records into w; returns the max timestamp delta. */
static inline int64_t tb_records(struct kwr *w, const struct tb_rec *recs, int n)
{
	int64_t max_delta = 0;
	for (int i = 0; i < n; i++) {
		struct kwr body;
		kwr_init(&body, 64, 1u << 30);
		kwr_i8(&body, 0);
		kwr_varlong(&body, recs[i].ts_delta);
		kwr_varint(&body, i);
		if (recs[i].key) {
			kwr_varint(&body, recs[i].key_len);
			kwr_raw(&body, recs[i].key, (size_t)recs[i].key_len);
		} else
			kwr_varint(&body, -1);
		if (recs[i].value) {
			kwr_varint(&body, recs[i].value_len);
			kwr_raw(&body, recs[i].value, (size_t)recs[i].value_len);
		} else
			kwr_varint(&body, -1);
		kwr_varint(&body, 0); /* headers */
		kwr_varint(w, (int32_t)body.len);
		kwr_raw(w, body.buf, body.len);
		kwr_free(&body);
		if (recs[i].ts_delta > max_delta)
			max_delta = recs[i].ts_delta;
	}
	return max_delta;
}

/* Wrap an already-encoded (possibly compressed) records section in a batch
 * header with a correct CRC. Returns a malloc'ed batch; *len its size. */
static inline uint8_t *tb_wrap(const struct tb_hdr *h, const void *recs, size_t recs_len, size_t *len)
{
	size_t n = 61 + recs_len;
	*len = 0;
	uint8_t *b = malloc(n);
	if (!b)
		return NULL;
	kput64(b, (uint64_t)h->base_offset);
	kput32(b + 8, (uint32_t)(n - 12));
	kput32(b + 12, (uint32_t)h->leader_epoch);
	b[16] = 2;
	b[21] = (uint8_t)((uint16_t)h->attributes >> 8);
	b[22] = (uint8_t)h->attributes;
	kput32(b + 23, (uint32_t)h->last_offset_delta);
	kput64(b + 27, (uint64_t)h->base_timestamp);
	kput64(b + 35, (uint64_t)h->max_timestamp);
	kput64(b + 43, (uint64_t)h->producer_id);
	b[51] = (uint8_t)((uint16_t)h->producer_epoch >> 8);
	b[52] = (uint8_t)h->producer_epoch;
	kput32(b + 53, (uint32_t)h->base_sequence);
	kput32(b + 57, (uint32_t)h->records_count);
	if (recs_len)
		memcpy(b + 61, recs, recs_len);
	kput32(b + 17, sluice_crc32c(0, b + 21, n - 21));
	*len = n;
	return b;
}

/* Recompute the CRC after a test has edited fields inside it. */
static inline void tb_fix_crc(uint8_t *b, size_t len)
{
	kput32(b + 17, sluice_crc32c(0, b + 21, len - 21));
}

/* A batch of n uncompressed records "v<i>" (value_len bytes each, padded
 * with the record number) with timestamps base_ts + i. */
static inline uint8_t *tb_simple(int n, int64_t base_ts, size_t value_len, size_t *len)
{
	struct tb_rec *recs = calloc((size_t)n, sizeof *recs);
	char *vals = malloc((size_t)n * (value_len + 1));
	for (int i = 0; i < n; i++) {
		char *v = vals + (size_t)i * (value_len + 1);
		memset(v, 'a' + i % 26, value_len);
		recs[i].value = v;
		recs[i].value_len = (int32_t)value_len;
		recs[i].ts_delta = i;
	}
	struct kwr w;
	kwr_init(&w, 256, 1u << 30);
	int64_t max_delta = tb_records(&w, recs, n);
	struct tb_hdr h = tb_hdr_default(n, base_ts);
	h.max_timestamp = base_ts + max_delta;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, len);
	kwr_free(&w);
	free(vals);
	free(recs);
	return b;
}

#endif
