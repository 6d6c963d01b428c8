/* libFuzzer target for the record batch validator that guards Produce
 * (sluice_batch_verify): each input is one record batch v2. So that
 * mutations reach the records instead of dying at the header, the target
 * makes the header agree with the input before checking it: Length covers
 * the input, magic is 2 and the CRC is recomputed; low bits of the
 * PartitionLeaderEpoch field (which the validator ignores) turn on the
 * compacted-topic key rule and a timestamp window. Properties checked on
 * every input, beyond ASan/UBSan's: no crash or over-read, and any batch
 * the validator accepts decodes fully, with an independent reader
 * (sluice_batch_records), into exactly RecordsCount records at offsets
 * base..base+n-1 whose encodings tile the (decompressed) records section
 * with no byte left over; record errors name records in order. The
 * decompression scratch is one inflater kept across inputs, as on a core. */
#include "common/crc32c.h"
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/kafka/compress.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_BATCH_BYTES_MAX (1u << 20)
#define FUZZ_INFLATE_BYTES_MAX (4u << 20) /* small cap: bombs are cut short, fast */
#define FUZZ_INFLATER_KEEP_BYTES (1u << 20)

static struct sluice_inflater inflater = {.keep_bytes = FUZZ_INFLATER_KEEP_BYTES};

struct tally {
	int32_t n;
	int64_t next_offset;
	size_t raw_bytes;
	bool in_order;
};

static bool count_record(const struct sluice_record *rec, void *arg)
{
	struct tally *t = arg;
	t->in_order &= rec->offset == t->next_offset;
	t->next_offset = (int64_t)((uint64_t)t->next_offset + 1); /* wraps as the decoder's offsets do */
	t->raw_bytes += rec->raw_len;
	t->n++;
	return true;
}

static void fail(const char *what, const struct sluice_batch *h, int32_t got)
{
	fprintf(stderr, "fuzz_batch: accepted batch %s (RecordsCount %d, got %d)\n", what, h->records_count, got);
	abort();
}

/* The validator accepted b: an independent reader must agree. */
static void check_accepted(const uint8_t *b, size_t size, const struct sluice_batch *h,
			   const struct sluice_batch_verify *v)
{
	struct tally t = {0, h->base_offset, 0, true};
	int32_t n = sluice_batch_records(b, size, FUZZ_INFLATE_BYTES_MAX, count_record, &t);
	if (n != h->records_count || t.n != n)
		fail("does not decode to RecordsCount records", h, n);
	if (!t.in_order)
		fail("has offsets out of order", h, n);
	bool compressed = (h->attributes & SLUICE_BATCH_ATTR_CODEC_MASK) != 0;
	size_t section = compressed ? v->inflated_bytes : size - SLUICE_BATCH_HEADER_BYTES;
	if (t.raw_bytes != section)
		fail("leaves bytes outside its records", h, n);
	if (v->nerrors < 0 || v->nerrors > h->records_count)
		fail("counts more record errors than records", h, v->nerrors);
	int32_t kept = v->nerrors < SLUICE_BATCH_RECORD_ERRORS_MAX ? v->nerrors : SLUICE_BATCH_RECORD_ERRORS_MAX;
	for (int32_t i = 0; i < kept; i++)
		if (v->errors[i].index < 0 || v->errors[i].index >= n || (i && v->errors[i].index <= v->errors[i - 1].index))
			fail("reports record errors out of order or range", h, v->errors[i].index);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < SLUICE_BATCH_HEADER_BYTES || size > FUZZ_BATCH_BYTES_MAX)
		return 0;
	uint8_t *b = malloc(size);
	if (!b)
		return 0;
	memcpy(b, data, size);
	kput32(b + SLUICE_BATCH_OFF_LENGTH, (uint32_t)(size - SLUICE_BATCH_LOG_OVERHEAD));
	b[SLUICE_BATCH_OFF_MAGIC] = 2;
	kput32(b + SLUICE_BATCH_OFF_CRC,
	       sluice_crc32c(0, b + SLUICE_BATCH_OFF_ATTRIBUTES, size - SLUICE_BATCH_OFF_ATTRIBUTES));
	struct sluice_batch h;
	if (sluice_batch_check(b, size, &h) == SLUICE_BATCH_OK) {
		struct sluice_batch_verify v;
		uint8_t rules = b[SLUICE_BATCH_OFF_EPOCH + 3];
		v.need_key = rules & 1;
		v.check_timestamps = rules & 2;
		v.ts_min = h.base_timestamp;
		v.ts_max = h.base_timestamp > INT64_MAX - 1000 ? INT64_MAX : h.base_timestamp + 1000;
		enum sluice_batch_result r = sluice_batch_verify(b, &h, &inflater, FUZZ_INFLATE_BYTES_MAX, &v);
		if (r == SLUICE_BATCH_OK)
			check_accepted(b, size, &h, &v);
		sluice_inflater_trim(&inflater);
	}
	free(b);
	return 0;
}
