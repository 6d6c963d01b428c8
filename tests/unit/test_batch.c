/* Record batch v2 unit tests. They prove that sluice_batch_check accepts a
 * batch built independently from the specification (batch_build.h) and reads
 * every header field at Kafka's offsets, and that it rejects, with the right
 * result code, each way a batch from a client or a torn disk can be wrong: a
 * CRC mismatch (a flipped bit anywhere in the CRC'd range), a magic other than
 * 2, RecordsCount != LastOffsetDelta + 1 (or not positive), a Length below
 * the header size (including negative), and every truncation. They also prove
 * that sluice_batch_set_base_offset rewrites BaseOffset and
 * PartitionLeaderEpoch without invalidating the CRC, which is how the broker
 * assigns offsets without recomputing it. Inputs end at a guard page. */
#include "batch_build.h"
#include "common/kafka/batch.h"
#include "guard.h"
#include <criterion/criterion.h>
#include <stdio.h>

static enum sluice_batch_result check_guarded(const uint8_t *b, size_t len, struct sluice_batch *out)
{
	struct guarded g = {0};
	cr_assert(guarded_init(&g, b, len));
	enum sluice_batch_result r = sluice_batch_check(g.data, len, out);
	guarded_free(&g);
	return r;
}

static uint8_t *three_records(size_t *len)
{
	static const struct tb_rec recs[3] = {
		{"k0", 2, "hello", 5, 0},
		{NULL, 0, "world", 5, 7},
		{"k2", 2, NULL, 0, 3},
	};
	struct kwr w;
	kwr_init(&w, 128, 1u << 20);
	int64_t maxd = tb_records(&w, recs, 3);
	struct tb_hdr h = tb_hdr_default(3, 1700000000000LL);
	h.max_timestamp = h.base_timestamp + maxd;
	h.base_offset = 42;
	h.leader_epoch = 5;
	h.producer_id = 1234;
	h.producer_epoch = 2;
	h.base_sequence = 77;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, len);
	kwr_free(&w);
	return b;
}

/* Proves a well-formed batch checks OK and every header field is read from
 * its documented offset. */
Test(batch, valid_batch_fields)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	struct sluice_batch sb;
	cr_assert_eq(check_guarded(b, len, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sb.base_offset, 42);
	cr_expect_eq(sb.length, (int32_t)len - 12);
	cr_expect_eq(sluice_batch_total_bytes(&sb), (int32_t)len);
	cr_expect_eq(sb.leader_epoch, 5);
	cr_expect_eq(sb.magic, 2);
	cr_expect_eq(sb.crc, kbe32(b + 17));
	cr_expect_eq(sb.attributes, 0);
	cr_expect_eq(sb.last_offset_delta, 2);
	cr_expect_eq(sb.base_timestamp, 1700000000000LL);
	cr_expect_eq(sb.max_timestamp, 1700000000007LL);
	cr_expect_eq(sb.producer_id, 1234);
	cr_expect_eq(sb.producer_epoch, 2);
	cr_expect_eq(sb.base_sequence, 77);
	cr_expect_eq(sb.records_count, 3);
	cr_expect_str_eq(sluice_batch_result_name(SLUICE_BATCH_OK), "ok");
	free(b);
}

/* Proves a batch followed by more bytes checks OK on its own length (the
 * caller decides what trailing bytes mean). */
Test(batch, trailing_bytes_ignored)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	uint8_t *two = malloc(len + 10);
	memcpy(two, b, len);
	memset(two + len, 0xee, 10);
	struct sluice_batch sb;
	cr_expect_eq(check_guarded(two, len + 10, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sluice_batch_total_bytes(&sb), (int32_t)len);
	free(two);
	free(b);
}

/* Proves a single flipped bit anywhere from Attributes to the end (the CRC'd
 * range) or in the CRC itself is reported as BAD_CRC. */
Test(batch, bad_crc_every_byte)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	struct sluice_batch sb;
	for (size_t i = 17; i < len; i++) {
		b[i] ^= 0x10;
		enum sluice_batch_result r = check_guarded(b, len, &sb);
		cr_expect_eq(r, SLUICE_BATCH_BAD_CRC, "flip at byte %zu gave %s", i, sluice_batch_result_name(r));
		b[i] ^= 0x10;
	}
	cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_OK);
	free(b);
}

/* Proves magic 0, 1 and 3 are rejected as BAD_MAGIC before the CRC is looked at. */
Test(batch, bad_magic)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	const int8_t magics[] = {0, 1, 3, -1};
	for (size_t i = 0; i < sizeof magics; i++) {
		b[16] = (uint8_t)magics[i];
		struct sluice_batch sb;
		cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_BAD_MAGIC, "magic %d", magics[i]);
	}
	free(b);
}

/* Proves RecordsCount must equal LastOffsetDelta + 1 and be positive, even
 * with a correct CRC. */
Test(batch, bad_count)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	const struct { int32_t count, delta; } cases[] = {
		{2, 2}, {4, 2}, {3, 3}, {0, -1}, {-1, -2}, {INT32_MIN, INT32_MAX}, {INT32_MAX, INT32_MAX},
		{3, -1},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		kput32(b + 57, (uint32_t)cases[i].count);
		kput32(b + 23, (uint32_t)cases[i].delta);
		tb_fix_crc(b, len);
		struct sluice_batch sb;
		cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_BAD_COUNT, "count %d delta %d",
			     cases[i].count, cases[i].delta);
	}
	free(b);
}

/* Proves a declared Length below the 49 header bytes after the Length field
 * (including zero and negative) is BAD_LENGTH, never a read. */
Test(batch, length_below_header)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	const int32_t lens[] = {0, 1, 48, -1, INT32_MIN, -49};
	for (size_t i = 0; i < sizeof lens / sizeof *lens; i++) {
		kput32(b + 8, (uint32_t)lens[i]);
		struct sluice_batch sb;
		cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_BAD_LENGTH, "length %d", lens[i]);
	}
	free(b);
}

/* Proves that a header-only batch (Length exactly 49, no records) is
 * structurally readable but fails the count rule, so nothing empty is accepted. */
Test(batch, header_only_batch)
{
	struct tb_hdr h = tb_hdr_default(1, 1000);
	h.records_count = 0;
	h.last_offset_delta = -1;
	size_t len = 0;
	uint8_t *b = tb_wrap(&h, NULL, 0, &len);
	cr_assert_eq(len, 61);
	struct sluice_batch sb;
	cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_BAD_COUNT);
	free(b);
}

/* Proves every truncation of a valid batch, down to zero bytes, is SHORT
 * (or BAD_LENGTH/BAD_MAGIC when too little is left to even see them) and
 * never reads past the available bytes. */
Test(batch, truncated_everywhere)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	for (size_t n = 0; n < len; n++) {
		struct sluice_batch sb;
		enum sluice_batch_result r = check_guarded(b, n, &sb);
		cr_expect_eq(r, SLUICE_BATCH_SHORT, "truncated to %zu of %zu: %s", n, len, sluice_batch_result_name(r));
	}
	/* A Length of INT32_MAX on a short buffer is SHORT, with no overflow. */
	kput32(b + 8, INT32_MAX);
	struct sluice_batch sb;
	cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_SHORT);
	free(b);
}

/* Proves set_base_offset writes BaseOffset and PartitionLeaderEpoch in place,
 * leaves every other byte alone, and keeps the CRC valid. */
Test(batch, set_base_offset_keeps_crc)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	uint8_t *orig = malloc(len);
	memcpy(orig, b, len);
	const struct { int64_t off; int32_t epoch; } cases[] = {
		{0, 0}, {1, -1}, {INT64_MAX - 2, INT32_MAX}, {123456789012LL, 7},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		sluice_batch_set_base_offset(b, cases[i].off, cases[i].epoch);
		struct sluice_batch sb;
		cr_assert_eq(check_guarded(b, len, &sb), SLUICE_BATCH_OK);
		cr_expect_eq(sb.base_offset, cases[i].off);
		cr_expect_eq(sb.leader_epoch, cases[i].epoch);
		cr_expect(memcmp(b + 16, orig + 16, len - 16) == 0, "bytes past the epoch changed");
		cr_expect(memcmp(b + 8, orig + 8, 4) == 0, "Length changed");
	}
	free(orig);
	free(b);
}

/* Proves sluice_batch_parse (no CRC) accepts a batch with a wrong CRC, which
 * is what the header-only scans rely on, while check rejects it. */
Test(batch, parse_skips_crc)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	b[len - 1] ^= 1;
	struct sluice_batch sb;
	struct guarded g = {0};
	cr_assert(guarded_init(&g, b, len));
	cr_expect_eq(sluice_batch_parse(g.data, len, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sluice_batch_check(g.data, len, &sb), SLUICE_BATCH_BAD_CRC);
	guarded_free(&g);
	free(b);
}

/* Proves a large batch (1000 records, ~100 KB) checks OK: the CRC covers
 * exactly Attributes..end. */
Test(batch, large_batch)
{
	size_t len = 0;
	uint8_t *b = tb_simple(1000, 5000, 100, &len);
	struct sluice_batch sb;
	cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sb.records_count, 1000);
	cr_expect_eq(sb.max_timestamp, 5999);
	free(b);
}

/* Proves every result code has a readable name. */
Test(batch, result_names)
{
	for (int r = SLUICE_BATCH_OK; r <= SLUICE_BATCH_BAD_COUNT; r++) {
		const char *n = sluice_batch_result_name((enum sluice_batch_result)r);
		cr_expect(n && n[0] && strcmp(n, "?") != 0, "result %d", r);
	}
}

/* ---- sluice_batch_check_crc: batches rewritten by compaction ------------------- */

/* Proves check_crc accepts a batch holding fewer records than its
 * LastOffsetDelta + 1 (what compaction leaves), still rejects a bad CRC, and
 * rejects more records than the offset range or negative counts. */
Test(batch_crc, compacted_counts)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	struct sluice_batch sb;
	kput32(b + 23, 9); /* LastOffsetDelta 9, 3 records: compacted */
	tb_fix_crc(b, len);
	cr_expect_eq(check_guarded(b, len, &sb), SLUICE_BATCH_BAD_COUNT, "producers must send exact counts");
	struct guarded g = {0};
	cr_assert(guarded_init(&g, b, len));
	cr_expect_eq(sluice_batch_check_crc(g.data, len, &sb), SLUICE_BATCH_OK);
	guarded_free(&g);
	kput32(b + 23, 1); /* 3 records in 2 offsets */
	tb_fix_crc(b, len);
	cr_assert(guarded_init(&g, b, len));
	cr_expect_eq(sluice_batch_check_crc(g.data, len, &sb), SLUICE_BATCH_BAD_COUNT);
	guarded_free(&g);
	kput32(b + 23, 2);
	tb_fix_crc(b, len);
	b[len - 1] ^= 4;
	cr_assert(guarded_init(&g, b, len));
	cr_expect_eq(sluice_batch_check_crc(g.data, len, &sb), SLUICE_BATCH_BAD_CRC);
	guarded_free(&g);
	for (size_t n = 0; n < len; n++) {
		cr_assert(guarded_init(&g, b, n));
		cr_expect_eq(sluice_batch_check_crc(g.data, n, &sb), SLUICE_BATCH_SHORT, "prefix of %zu", n);
		guarded_free(&g);
	}
	free(b);
}

/* Proves check_crc handles the largest LastOffsetDelta without arithmetic
 * overflow (regression: the count rule once computed last_offset_delta + 1
 * in int32, undefined behaviour for INT32_MAX that UBSan reported, and a
 * wrong answer in an optimised build). */
Test(batch_crc, delta_int32_max)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	kput32(b + 23, INT32_MAX);
	tb_fix_crc(b, len);
	struct sluice_batch sb;
	struct guarded g = {0};
	cr_assert(guarded_init(&g, b, len));
	cr_expect_eq(sluice_batch_check_crc(g.data, len, &sb), SLUICE_BATCH_OK);
	guarded_free(&g);
	free(b);
}

/* ---- sluice_batch_records ----------------------------------------------------- */

struct seen {
	int n, stop_after;
	int64_t offset[8], ts[8];
	char key[8][8], value[8][8];
	bool key_null[8], value_null[8];
	size_t raw_total;
};

static bool collect(const struct sluice_record *rec, void *arg)
{
	struct seen *s = arg;
	if (s->n < 8) {
		s->offset[s->n] = rec->offset;
		s->ts[s->n] = rec->timestamp;
		s->key_null[s->n] = rec->key == NULL;
		s->value_null[s->n] = rec->value == NULL;
		if (rec->key)
			snprintf(s->key[s->n], 8, "%.*s", rec->key_len, (const char *)rec->key);
		if (rec->value)
			snprintf(s->value[s->n], 8, "%.*s", rec->value_len, (const char *)rec->value);
	}
	s->raw_total += rec->raw_len;
	s->n++;
	return s->stop_after == 0 || s->n < s->stop_after;
}

/* Proves sluice_batch_records visits every record with its absolute offset
 * and timestamp, key and value (null ones as NULL), raw spans that tile the
 * records section exactly, and stops when the callback says so. */
Test(batch_records, plain)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	struct seen s = {0};
	cr_assert_eq(sluice_batch_records(b, len, 1 << 20, collect, &s), 3);
	cr_expect_eq(s.n, 3);
	cr_expect_eq(s.offset[0], 42);
	cr_expect_eq(s.offset[2], 44);
	cr_expect_eq(s.ts[1], 1700000000007LL);
	cr_expect_str_eq(s.key[0], "k0");
	cr_expect_str_eq(s.value[0], "hello");
	cr_expect(s.key_null[1]);
	cr_expect(s.value_null[2]);
	cr_expect_eq(s.raw_total, len - 61);
	struct seen one = {.stop_after = 1};
	cr_expect_eq(sluice_batch_records(b, len, 1 << 20, collect, &one), 1);
	free(b);
}

/* Proves a records section that lies about itself is refused with -1, never
 * read past: a record length beyond the section, more records announced than
 * present, a key length beyond its record, and a compressed batch that does
 * not decompress. Every variant sits at a page end. */
Test(batch_records, malformed)
{
	size_t len = 0;
	uint8_t *b = three_records(&len);
	struct seen s;
	struct guarded g = {0};
	/* more records announced than the section holds */
	kput32(b + 57, 4);
	kput32(b + 23, 3);
	cr_assert(guarded_init(&g, b, len));
	memset(&s, 0, sizeof s);
	cr_expect_eq(sluice_batch_records(g.data, len, 1 << 20, collect, &s), -1);
	guarded_free(&g);
	kput32(b + 57, 3);
	kput32(b + 23, 2);
	/* first record's length (a 1-byte varint at 61) beyond the section */
	uint8_t saved = b[61];
	b[61] = 0x7e; /* zigzag 63 */
	cr_assert(guarded_init(&g, b, 61 + 20));
	kput32(g.data + 8, 61 + 20 - 12);
	memset(&s, 0, sizeof s);
	cr_expect_eq(sluice_batch_records(g.data, 61 + 20, 1 << 20, collect, &s), -1);
	guarded_free(&g);
	b[61] = saved;
	/* key length beyond its record: record 0 is len, attr, ts, off, keylen(2)... */
	uint8_t *k = b + 61 + 1 + 1 + 1 + 1;
	uint8_t saved_k = *k;
	*k = 0x40; /* zigzag 32 */
	cr_assert(guarded_init(&g, b, len));
	memset(&s, 0, sizeof s);
	cr_expect_eq(sluice_batch_records(g.data, len, 1 << 20, collect, &s), -1);
	guarded_free(&g);
	*k = saved_k;
	/* "gzip" that is not */
	b[22] = 1;
	cr_assert(guarded_init(&g, b, len));
	memset(&s, 0, sizeof s);
	cr_expect_eq(sluice_batch_records(g.data, len, 1 << 20, collect, &s), -1);
	guarded_free(&g);
	/* not a batch at all */
	memset(&s, 0, sizeof s);
	cr_expect_eq(sluice_batch_records(b, 10, 1 << 20, collect, &s), -1);
	cr_expect_eq(s.n, 0);
	free(b);
}

/* ---- sluice_batch_build --------------------------------------------------------- */

/* Proves sluice_batch_build writes a batch that passes sluice_batch_check and
 * whose records read back as given, appended after existing bytes. */
Test(batch_build, roundtrip)
{
	struct sluice_record_kv recs[3] = {
		{"a", 1, "one", 3}, {NULL, 0, "two", 3}, {"c", 1, NULL, 0},
	};
	struct kwr w;
	kwr_init(&w, 64, 1 << 20);
	kwr_raw(&w, "xyz", 3);
	int64_t at = sluice_batch_build(&w, recs, 3, 1234567);
	cr_assert_eq(at, 3);
	struct sluice_batch sb;
	cr_assert_eq(check_guarded(w.buf + 3, w.len - 3, &sb), SLUICE_BATCH_OK);
	cr_expect_eq(sb.records_count, 3);
	cr_expect_eq(sb.base_timestamp, 1234567);
	cr_expect_eq(sb.producer_id, -1);
	struct seen s = {0};
	cr_expect_eq(sluice_batch_records(w.buf + 3, w.len - 3, 1 << 20, collect, &s), 3);
	cr_expect_str_eq(s.key[0], "a");
	cr_expect_str_eq(s.value[1], "two");
	cr_expect(s.key_null[1]);
	cr_expect(s.value_null[2]);
	cr_expect_eq(s.offset[2], 2);
	kwr_free(&w);
}
