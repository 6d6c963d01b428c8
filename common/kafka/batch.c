/* Record batch v2 header parsing and validation (see batch.h): the header
 * checks every reader needs, the record walk compaction and ListOffsets use,
 * and the deep validation of produced batches, which decodes every record
 * (decompressing first) without allocating, so that a batch that lies about
 * its records is refused before it can burn offsets or stall a consumer. */
#include "common/kafka/batch.h"
#include "common/crc32c.h"
#include "common/kafka/codec.h"
#include "common/kafka/compress.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

enum sluice_batch_result sluice_batch_parse(const uint8_t *p, size_t avail, struct sluice_batch *b)
{
	if (avail < SLUICE_BATCH_LOG_OVERHEAD + 5)
		return SLUICE_BATCH_SHORT;
	b->base_offset = (int64_t)kbe64(p);
	b->length = (int32_t)kbe32(p + SLUICE_BATCH_OFF_LENGTH);
	b->leader_epoch = (int32_t)kbe32(p + SLUICE_BATCH_OFF_EPOCH);
	b->magic = (int8_t)p[SLUICE_BATCH_OFF_MAGIC];
	if (b->length < SLUICE_BATCH_HEADER_BYTES - SLUICE_BATCH_LOG_OVERHEAD)
		return SLUICE_BATCH_BAD_LENGTH;
	if (b->magic != 2)
		return SLUICE_BATCH_BAD_MAGIC;
	if ((size_t)b->length + SLUICE_BATCH_LOG_OVERHEAD > avail)
		return SLUICE_BATCH_SHORT;
	b->crc = kbe32(p + SLUICE_BATCH_OFF_CRC);
	b->attributes = (int16_t)kbe16(p + SLUICE_BATCH_OFF_ATTRIBUTES);
	b->last_offset_delta = (int32_t)kbe32(p + SLUICE_BATCH_OFF_LAST_DELTA);
	b->base_timestamp = (int64_t)kbe64(p + SLUICE_BATCH_OFF_BASE_TS);
	b->max_timestamp = (int64_t)kbe64(p + SLUICE_BATCH_OFF_MAX_TS);
	b->producer_id = (int64_t)kbe64(p + SLUICE_BATCH_OFF_PRODUCER_ID);
	b->producer_epoch = (int16_t)kbe16(p + SLUICE_BATCH_OFF_PRODUCER_EPOCH);
	b->base_sequence = (int32_t)kbe32(p + SLUICE_BATCH_OFF_BASE_SEQ);
	b->records_count = (int32_t)kbe32(p + SLUICE_BATCH_OFF_COUNT);
	/* BaseOffset is outside the CRC: a stored batch whose last offset
	 * would pass INT64_MAX is damage, and every caller adds the two. */
	if (b->last_offset_delta > 0 && b->base_offset > INT64_MAX - b->last_offset_delta)
		return SLUICE_BATCH_BAD_COUNT;
	return SLUICE_BATCH_OK;
}

enum sluice_batch_result sluice_batch_check(const uint8_t *p, size_t avail, struct sluice_batch *b)
{
	enum sluice_batch_result r = sluice_batch_parse(p, avail, b);
	if (r != SLUICE_BATCH_OK)
		return r;
	size_t crc_len = (size_t)b->length - (SLUICE_BATCH_OFF_ATTRIBUTES - SLUICE_BATCH_LOG_OVERHEAD);
	if (sluice_crc32c(0, p + SLUICE_BATCH_OFF_ATTRIBUTES, crc_len) != b->crc)
		return SLUICE_BATCH_BAD_CRC;
	if (b->records_count <= 0 || b->last_offset_delta < 0 ||
	    (int64_t)b->records_count != (int64_t)b->last_offset_delta + 1)
		return SLUICE_BATCH_BAD_COUNT;
	return SLUICE_BATCH_OK;
}

enum sluice_batch_result sluice_batch_check_crc(const uint8_t *p, size_t avail, struct sluice_batch *b)
{
	enum sluice_batch_result r = sluice_batch_parse(p, avail, b);
	if (r != SLUICE_BATCH_OK)
		return r;
	size_t crc_len = (size_t)b->length - (SLUICE_BATCH_OFF_ATTRIBUTES - SLUICE_BATCH_LOG_OVERHEAD);
	if (sluice_crc32c(0, p + SLUICE_BATCH_OFF_ATTRIBUTES, crc_len) != b->crc)
		return SLUICE_BATCH_BAD_CRC;
	if (b->records_count < 0 || b->last_offset_delta < 0 || (int64_t)b->records_count > (int64_t)b->last_offset_delta + 1)
		return SLUICE_BATCH_BAD_COUNT;
	return SLUICE_BATCH_OK;
}

int32_t sluice_batch_records(const uint8_t *p, size_t len, size_t out_max,
			     bool (*fn)(const struct sluice_record *rec, void *arg), void *arg)
{
	struct sluice_batch b;
	if (sluice_batch_parse(p, len, &b) != SLUICE_BATCH_OK)
		return -1;
	const uint8_t *recs = p + SLUICE_BATCH_HEADER_BYTES;
	size_t recs_len = (size_t)sluice_batch_total_bytes(&b) - SLUICE_BATCH_HEADER_BYTES;
	uint8_t *plain = NULL;
	int codec = b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK;
	if (codec) {
		int64_t n = sluice_decompress(codec, recs, recs_len, out_max, &plain);
		if (n < 0)
			return -1;
		recs = plain;
		recs_len = (size_t)n;
	}
	struct krd r;
	krd_init(&r, recs, recs_len);
	int32_t i = 0;
	for (; i < b.records_count; i++) {
		const uint8_t *raw = r.p;
		int32_t rlen = krd_varint(&r);
		const uint8_t *start = r.p;
		if (r.err || rlen < 0 || (size_t)rlen > krd_left(&r))
			goto bad;
		struct krd rr;
		krd_init(&rr, start, (size_t)rlen);
		struct sluice_record rec;
		(void)krd_i8(&rr);
		/* Deltas wrap as Kafka's Java arithmetic does: a hostile
		 * FirstTimestamp or delta must not be undefined behaviour here
		 * (fuzz_batch found FirstTimestamp INT64_MIN with delta -23);
		 * the produce path checks each record's timestamp itself. */
		rec.timestamp = (int64_t)((uint64_t)b.base_timestamp + (uint64_t)krd_varlong(&rr));
		rec.offset = (int64_t)((uint64_t)b.base_offset + (uint64_t)(int64_t)krd_varint(&rr));
		rec.key_len = krd_varint(&rr);
		rec.key = rec.key_len >= 0 ? rr.p : NULL;
		if (rec.key_len > 0)
			krd_skip(&rr, (size_t)rec.key_len);
		rec.value_len = krd_varint(&rr);
		rec.value = rec.value_len >= 0 ? rr.p : NULL;
		if (rec.value_len > 0)
			krd_skip(&rr, (size_t)rec.value_len);
		if (rr.err)
			goto bad;
		rec.raw = raw;
		rec.raw_len = (size_t)(start + rlen - raw);
		r.p = start + rlen;
		if (!fn(&rec, arg)) {
			i++;
			break;
		}
	}
	free(plain);
	return i;
bad:
	free(plain);
	return -1;
}

/* ---- deep validation ------------------------------------------------------------ */

/* Varint readers for the record walk: bounded by end, false when the bytes
 * run out or the encoding is longer than its type allows (5 and 10 bytes,
 * as Kafka's ByteUtils). Inline, with the one-byte case first: most fields
 * of most records are one byte. */
static inline bool rd_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
	const uint8_t *p = *pp;
	uint32_t u = 0;
	for (int shift = 0; shift < 35; shift += 7) {
		if (p == end)
			return false;
		uint8_t c = *p++;
		u |= (uint32_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*pp = p;
			*out = (int32_t)((u >> 1) ^ (~(u & 1) + 1));
			return true;
		}
	}
	return false;
}

static inline bool rd_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
	const uint8_t *p = *pp;
	uint64_t u = 0;
	for (int shift = 0; shift < 70; shift += 7) {
		if (p == end)
			return false;
		uint8_t c = *p++;
		u |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80)) {
			*pp = p;
			*out = (int64_t)((u >> 1) ^ (~(u & 1) + 1));
			return true;
		}
	}
	return false;
}

/* A length-prefixed field: -1 (null) when nullable, else 0..bytes left. */
static inline bool rd_field(const uint8_t **pp, const uint8_t *end, bool nullable, int32_t *len)
{
	if (!rd_varint(pp, end, len) || *len < (nullable ? -1 : 0) || *len > end - *pp)
		return false;
	if (*len > 0)
		*pp += *len;
	return true;
}

static void record_error(struct sluice_batch_verify *v, int32_t index, uint8_t fault, int64_t ts)
{
	if (v->nerrors < SLUICE_BATCH_RECORD_ERRORS_MAX)
		v->errors[v->nerrors] = (struct sluice_record_error){index, fault, ts};
	v->nerrors++;
}

/* One record's body [r, rend): every field inside it and nothing after. */
static enum sluice_batch_result verify_record(const uint8_t *r, const uint8_t *rend, int32_t i,
					      const struct sluice_batch *b, struct sluice_batch_verify *v)
{
	int64_t ts_delta;
	int32_t delta, key_len, value_len, headers;
	if (r == rend)
		return SLUICE_BATCH_BAD_RECORD;
	r++; /* attributes: unused in v2 */
	if (!rd_varlong(&r, rend, &ts_delta) || !rd_varint(&r, rend, &delta))
		return SLUICE_BATCH_BAD_RECORD;
	if (delta != i)
		return SLUICE_BATCH_BAD_DELTA;
	if (!rd_field(&r, rend, true, &key_len) || !rd_field(&r, rend, true, &value_len) ||
	    !rd_varint(&r, rend, &headers) || headers < 0 || headers > rend - r)
		return SLUICE_BATCH_BAD_RECORD;
	for (int32_t h = 0; h < headers; h++) {
		int32_t hk, hv;
		if (!rd_field(&r, rend, false, &hk) || !rd_field(&r, rend, true, &hv))
			return SLUICE_BATCH_BAD_RECORD;
	}
	if (r != rend)
		return SLUICE_BATCH_BAD_RECORD;
	int64_t ts = b->attributes & SLUICE_BATCH_ATTR_TS_LOG_APPEND
			     ? b->max_timestamp
			     : (int64_t)((uint64_t)b->base_timestamp + (uint64_t)ts_delta);
	if (ts > v->max_timestamp)
		v->max_timestamp = ts;
	/* One fault per record, the key first (as Kafka's validateRecord). */
	if (v->need_key && key_len < 0)
		record_error(v, i, SLUICE_RECORD_NO_KEY, 0);
	else if (v->check_timestamps && ts != -1 && (ts < v->ts_min || ts > v->ts_max))
		record_error(v, i, SLUICE_RECORD_TIMESTAMP, ts);
	return SLUICE_BATCH_OK;
}

static enum sluice_batch_result verify_records(const uint8_t *p, const uint8_t *end, const struct sluice_batch *b,
					       struct sluice_batch_verify *v)
{
	for (int32_t i = 0; i < b->records_count; i++) {
		v->at = i;
		int32_t len;
		if (p == end)
			return SLUICE_BATCH_FEWER_RECORDS;
		if (!rd_varint(&p, end, &len) || len < 0 || len > end - p)
			return SLUICE_BATCH_BAD_RECORD;
		enum sluice_batch_result r = verify_record(p, p + len, i, b, v);
		if (r != SLUICE_BATCH_OK)
			return r;
		p += len;
	}
	v->at = b->records_count;
	return p == end ? SLUICE_BATCH_OK : SLUICE_BATCH_EXTRA_BYTES;
}

enum sluice_batch_result sluice_batch_verify(const uint8_t *p, const struct sluice_batch *b, struct sluice_inflater *z,
					     size_t inflate_max, struct sluice_batch_verify *v)
{
	assert(b->length >= SLUICE_BATCH_HEADER_BYTES - SLUICE_BATCH_LOG_OVERHEAD);
	assert(b->records_count > 0);
	v->at = -1;
	v->max_timestamp = -1;
	v->nerrors = 0;
	v->inflated_bytes = 0;
	const uint8_t *recs = p + SLUICE_BATCH_HEADER_BYTES;
	const uint8_t *end = p + sluice_batch_total_bytes(b);
	int codec = b->attributes & SLUICE_BATCH_ATTR_CODEC_MASK;
	if (codec > SLUICE_CODEC_ZSTD)
		return SLUICE_BATCH_BAD_CODEC;
	if (codec != SLUICE_CODEC_NONE) {
		int64_t n = sluice_inflate(z, codec, recs, (size_t)(end - recs), inflate_max);
		if (n == SLUICE_INFLATE_TOO_LARGE)
			return SLUICE_BATCH_TOO_BIG_INFLATED;
		if (n < 0)
			return SLUICE_BATCH_BAD_PAYLOAD;
		if (n == 0) { /* nothing inside (z->buf may be NULL): RecordsCount > 0 lies */
			v->at = 0;
			return SLUICE_BATCH_FEWER_RECORDS;
		}
		recs = z->buf;
		end = z->buf + n;
		v->inflated_bytes = (size_t)n;
	}
	return verify_records(recs, end, b, v);
}

void sluice_batch_set_max_timestamp(uint8_t *p, int64_t max_timestamp)
{
	int32_t length = (int32_t)kbe32(p + SLUICE_BATCH_OFF_LENGTH);
	assert(length >= SLUICE_BATCH_HEADER_BYTES - SLUICE_BATCH_LOG_OVERHEAD);
	kput64(p + SLUICE_BATCH_OFF_MAX_TS, (uint64_t)max_timestamp);
	size_t crc_len = (size_t)length - (SLUICE_BATCH_OFF_ATTRIBUTES - SLUICE_BATCH_LOG_OVERHEAD);
	kput32(p + SLUICE_BATCH_OFF_CRC, sluice_crc32c(0, p + SLUICE_BATCH_OFF_ATTRIBUTES, crc_len));
}

void sluice_batch_set_base_offset(uint8_t *p, int64_t base_offset, int32_t leader_epoch)
{
	kput64(p, (uint64_t)base_offset);
	kput32(p + SLUICE_BATCH_OFF_EPOCH, (uint32_t)leader_epoch);
}

const char *sluice_batch_result_name(enum sluice_batch_result r)
{
	switch (r) {
	case SLUICE_BATCH_OK: return "ok";
	case SLUICE_BATCH_SHORT: return "truncated batch";
	case SLUICE_BATCH_BAD_LENGTH: return "batch length below header size";
	case SLUICE_BATCH_BAD_MAGIC: return "unsupported magic (only record batch v2)";
	case SLUICE_BATCH_BAD_CRC: return "CRC-32C mismatch";
	case SLUICE_BATCH_BAD_COUNT: return "record count does not match LastOffsetDelta";
	case SLUICE_BATCH_BAD_CODEC: return "unknown compression codec";
	case SLUICE_BATCH_BAD_PAYLOAD: return "compressed payload corrupt or truncated";
	case SLUICE_BATCH_TOO_BIG_INFLATED: return "compressed payload inflates past the limit";
	case SLUICE_BATCH_BAD_RECORD: return "record length does not match its fields";
	case SLUICE_BATCH_FEWER_RECORDS: return "fewer records than RecordsCount";
	case SLUICE_BATCH_EXTRA_BYTES: return "bytes after the last record";
	case SLUICE_BATCH_BAD_DELTA: return "record OffsetDelta out of sequence";
	}
	return "?";
}

int64_t sluice_batch_build(struct kwr *w, const struct sluice_record_kv *recs, int32_t n, int64_t timestamp_ms)
{
	size_t start = w->len;
	uint8_t *hdr = kwr_reserve(w, SLUICE_BATCH_HEADER_BYTES);
	if (!hdr)
		return -1;
	memset(hdr, 0, SLUICE_BATCH_HEADER_BYTES);
	for (int32_t i = 0; i < n; i++) {
		/* A record's length prefix needs its encoded size: measure first. */
		size_t body = 1 + 1 + 0;
		struct kwr probe;
		kwr_init(&probe, 0, 16);
		kwr_varint(&probe, i);
		body += probe.len;
		probe.len = 0;
		probe.err = false;
		kwr_varint(&probe, recs[i].key ? recs[i].key_len : -1);
		body += probe.len + (recs[i].key ? (size_t)recs[i].key_len : 0);
		probe.len = 0;
		probe.err = false;
		kwr_varint(&probe, recs[i].value ? recs[i].value_len : -1);
		body += probe.len + (recs[i].value ? (size_t)recs[i].value_len : 0);
		body += 1; /* header count 0 */
		kwr_free(&probe);
		kwr_varint(w, (int32_t)body);
		kwr_i8(w, 0);       /* attributes */
		kwr_varlong(w, 0);  /* timestamp delta */
		kwr_varint(w, i);   /* offset delta */
		kwr_varint(w, recs[i].key ? recs[i].key_len : -1);
		if (recs[i].key)
			kwr_raw(w, recs[i].key, (size_t)recs[i].key_len);
		kwr_varint(w, recs[i].value ? recs[i].value_len : -1);
		if (recs[i].value)
			kwr_raw(w, recs[i].value, (size_t)recs[i].value_len);
		kwr_varint(w, 0);
	}
	if (w->err)
		return -1;
	uint8_t *b = w->buf + start;
	size_t total = w->len - start;
	kput32(b + SLUICE_BATCH_OFF_LENGTH, (uint32_t)(total - SLUICE_BATCH_LOG_OVERHEAD));
	b[SLUICE_BATCH_OFF_MAGIC] = 2;
	kput32(b + SLUICE_BATCH_OFF_LAST_DELTA, (uint32_t)(n - 1));
	kput64(b + SLUICE_BATCH_OFF_BASE_TS, (uint64_t)timestamp_ms);
	kput64(b + SLUICE_BATCH_OFF_MAX_TS, (uint64_t)timestamp_ms);
	kput64(b + SLUICE_BATCH_OFF_PRODUCER_ID, (uint64_t)-1);
	b[SLUICE_BATCH_OFF_PRODUCER_EPOCH] = 0xff;
	b[SLUICE_BATCH_OFF_PRODUCER_EPOCH + 1] = 0xff;
	kput32(b + SLUICE_BATCH_OFF_BASE_SEQ, (uint32_t)-1);
	kput32(b + SLUICE_BATCH_OFF_COUNT, (uint32_t)n);
	uint32_t crc = sluice_crc32c(0, b + SLUICE_BATCH_OFF_ATTRIBUTES, total - SLUICE_BATCH_OFF_ATTRIBUTES);
	kput32(b + SLUICE_BATCH_OFF_CRC, crc);
	return (int64_t)start;
}
