/* Record batch v2 header parsing and validation (see batch.h). */
#include "common/kafka/batch.h"
#include "common/crc32c.h"
#include "common/kafka/codec.h"

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
	}
	return "?";
}
