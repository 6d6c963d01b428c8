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
#include "batch_codecs.h"
#include "common/kafka/batch.h"
#include "common/kafka/compress.h"
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

/* ---- sluice_batch_verify ---------------------------------------------------------- */

/* These prove the deep validation of produced batches refuses every way a
 * batch with a correct CRC can lie about its records, for each codec: a
 * count too high (FEWER_RECORDS) or too low (EXTRA_BYTES), a record length
 * one byte over or under its fields, bytes after the last record, offset
 * deltas out of order, a truncated or wrong-count compressed payload, an
 * unknown codec, a payload inflating past the cap; that it reports null keys
 * (compacted topics) and out-of-range timestamps per record; and that its
 * decompression scratch is reused without reallocating. Uncompressed inputs
 * end at a guard page. */

/* One record with an explicit offset delta; len_adjust skews its length
 * prefix, stray adds bytes after its fields. */
static void enc_rec(struct kwr *w, int32_t delta, const char *key, const char *value, int32_t nheaders,
		    int32_t len_adjust, size_t stray)
{
	struct kwr body;
	kwr_init(&body, 64, 1u << 24);
	kwr_i8(&body, 0);
	kwr_varlong(&body, delta); /* timestamp delta */
	kwr_varint(&body, delta);
	kwr_varint(&body, key ? (int32_t)strlen(key) : -1);
	if (key)
		kwr_raw(&body, key, strlen(key));
	kwr_varint(&body, value ? (int32_t)strlen(value) : -1);
	if (value)
		kwr_raw(&body, value, strlen(value));
	kwr_varint(&body, nheaders);
	for (int32_t h = 0; h < nheaders; h++) {
		kwr_varint(&body, 2);
		kwr_raw(&body, "hk", 2);
		kwr_varint(&body, h % 2 ? -1 : 2);
		if (h % 2 == 0)
			kwr_raw(&body, "hv", 2);
	}
	for (size_t i = 0; i < stray; i++)
		kwr_i8(&body, 0);
	kwr_varint(w, (int32_t)body.len + len_adjust);
	kwr_raw(w, body.buf, body.len);
	kwr_free(&body);
}

/* n plain records 0..n-1, record `bad` with len_adjust (-1 for none). */
static void enc_recs(struct kwr *w, int32_t n, int32_t bad, int32_t len_adjust)
{
	char key[16], value[32];
	for (int32_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "key-%d", i);
		snprintf(value, sizeof value, "value-%d-of-the-batch", i);
		enc_rec(w, i, i == 1 ? NULL : key, i == 2 ? NULL : value, i % 3, i == bad ? len_adjust : 0, 0);
	}
}

/* Wrap a records section (compressed with codec, TB_*, unless 0) in a batch
 * claiming count records; cut drops bytes off the compressed payload. */
static uint8_t *vbatch(const uint8_t *section, size_t section_len, int codec, int32_t count, size_t cut, size_t *len)
{
	struct tb_hdr h = tb_hdr_default(count, 1700000000000LL);
	uint8_t *c = NULL;
	if (codec) {
		c = tb_compress(codec, section, section_len, &section_len);
		cr_assert(c, "compress with codec %d", codec);
		h.attributes = (int16_t)tb_attr_codec(codec);
	}
	cr_assert(cut <= section_len);
	uint8_t *b = tb_wrap(&h, c ? c : section, section_len - cut, len);
	free(c);
	return b;
}

static enum sluice_batch_result verify_in(struct sluice_inflater *z, const uint8_t *b, size_t len, size_t cap,
					  struct sluice_batch_verify *v)
{
	struct guarded g = {0};
	cr_assert(guarded_init(&g, b, len));
	struct sluice_batch sb;
	cr_assert_eq(sluice_batch_check(g.data, len, &sb), SLUICE_BATCH_OK);
	enum sluice_batch_result r = sluice_batch_verify(g.data, &sb, z, cap, v);
	guarded_free(&g);
	return r;
}

static const int all_codecs[] = {0, TB_GZIP, TB_SNAPPY, TB_SNAPPY_XERIAL, TB_LZ4, TB_ZSTD};

/* What verify says of section (n records encoded) wrapped with codec and
 * claiming count records; *at the record it stopped at. */
static enum sluice_batch_result verdict(struct sluice_inflater *z, const struct kwr *section, int codec, int32_t count,
					size_t cut, int32_t *at)
{
	size_t len;
	uint8_t *b = vbatch(section->buf, section->len, codec, count, cut, &len);
	struct sluice_batch_verify v = {0};
	enum sluice_batch_result r = verify_in(z, b, len, 1u << 20, &v);
	if (at)
		*at = v.at;
	if (r == SLUICE_BATCH_OK)
		cr_expect_eq(v.inflated_bytes, codec ? section->len : 0, "codec %d", codec);
	free(b);
	return r;
}

/* Proves a well-formed batch of 5 records (null keys and values, headers)
 * passes with every codec, and that a count one too high or one too low is
 * refused, naming the record where the lie shows. */
Test(batch_verify, counts_every_codec)
{
	struct sluice_inflater z = {0};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_recs(&w, 5, -1, 0);
	for (size_t c = 0; c < sizeof all_codecs / sizeof all_codecs[0]; c++) {
		int codec = all_codecs[c];
		int32_t at;
		cr_expect_eq(verdict(&z, &w, codec, 5, 0, NULL), SLUICE_BATCH_OK, "codec %d", codec);
		cr_expect_eq(verdict(&z, &w, codec, 6, 0, &at), SLUICE_BATCH_FEWER_RECORDS, "codec %d", codec);
		cr_expect_eq(at, 5);
		cr_expect_eq(verdict(&z, &w, codec, 4, 0, &at), SLUICE_BATCH_EXTRA_BYTES, "codec %d", codec);
		cr_expect_eq(at, 4);
		cr_expect_eq(verdict(&z, &w, codec, 1, 0, &at), SLUICE_BATCH_EXTRA_BYTES, "codec %d", codec);
	}
	kwr_free(&w);
	sluice_inflater_free(&z);
}

/* Proves a record whose length prefix is one byte over or under what its
 * fields take is refused at that record, for every codec and for the first,
 * a middle and the last record; and that bytes after the last record, or
 * inside a record after its headers, are refused. */
Test(batch_verify, record_lengths_every_codec)
{
	struct sluice_inflater z = {0};
	const int32_t which[] = {0, 2, 4};
	for (size_t c = 0; c < sizeof all_codecs / sizeof all_codecs[0]; c++) {
		int codec = all_codecs[c];
		for (size_t k = 0; k < 3; k++)
			for (int32_t adj = -1; adj <= 1; adj += 2) {
				struct kwr w;
				kwr_init(&w, 256, 1u << 20);
				enc_recs(&w, 5, which[k], adj);
				int32_t at;
				enum sluice_batch_result r = verdict(&z, &w, codec, 5, 0, &at);
				cr_expect_eq(r, SLUICE_BATCH_BAD_RECORD, "codec %d record %d adjust %d: %s", codec, which[k],
					     adj, sluice_batch_result_name(r));
				cr_expect_eq(at, which[k], "codec %d record %d adjust %d", codec, which[k], adj);
				kwr_free(&w);
			}
		struct kwr w;
		kwr_init(&w, 256, 1u << 20);
		enc_recs(&w, 3, -1, 0);
		kwr_raw(&w, "xyz", 3);
		cr_expect_eq(verdict(&z, &w, codec, 3, 0, NULL), SLUICE_BATCH_EXTRA_BYTES, "codec %d", codec);
		kwr_free(&w);
		kwr_init(&w, 256, 1u << 20);
		enc_rec(&w, 0, "a", "b", 1, 0, 0);
		enc_rec(&w, 1, "a", "b", 1, 0, 2); /* two stray bytes inside record 1 */
		int32_t at;
		cr_expect_eq(verdict(&z, &w, codec, 2, 0, &at), SLUICE_BATCH_BAD_RECORD, "codec %d", codec);
		cr_expect_eq(at, 1);
		kwr_free(&w);
	}
	sluice_inflater_free(&z);
}

/* Proves offset deltas other than 0, 1, 2, ... are refused at the first
 * record out of place: swapped, repeated, or starting at 1. */
Test(batch_verify, offset_deltas)
{
	struct sluice_inflater z = {0};
	const int32_t cases[3][3] = {{0, 2, 1}, {0, 0, 1}, {1, 2, 3}};
	const int32_t first_bad[3] = {1, 1, 0};
	for (int c = 0; c < 3; c++)
		for (int codec = 0; codec <= TB_ZSTD; codec += TB_ZSTD) {
			struct kwr w;
			kwr_init(&w, 256, 1u << 20);
			for (int i = 0; i < 3; i++)
				enc_rec(&w, cases[c][i], "k", "v", 0, 0, 0);
			int32_t at;
			cr_expect_eq(verdict(&z, &w, codec, 3, 0, &at), SLUICE_BATCH_BAD_DELTA, "case %d codec %d", c, codec);
			cr_expect_eq(at, first_bad[c]);
			kwr_free(&w);
		}
	sluice_inflater_free(&z);
}

/* Proves a compressed payload that is truncated (by one byte or by eight)
 * or is not in its codec's format is refused as BAD_PAYLOAD, for every
 * codec, and an unknown codec (5, 6, 7) as BAD_CODEC; and that the same
 * inflater then still validates a good batch (its contexts are reset). */
Test(batch_verify, compressed_payload_broken)
{
	struct sluice_inflater z = {0};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_recs(&w, 20, -1, 0);
	for (size_t c = 1; c < sizeof all_codecs / sizeof all_codecs[0]; c++) {
		int codec = all_codecs[c];
		const size_t cuts[2] = {1, 8};
		for (int k = 0; k < 2; k++) {
			enum sluice_batch_result r = verdict(&z, &w, codec, 20, cuts[k], NULL);
			cr_expect_eq(r, SLUICE_BATCH_BAD_PAYLOAD, "codec %d cut %zu: %s", codec, cuts[k],
				     sluice_batch_result_name(r));
		}
		struct tb_hdr h = tb_hdr_default(20, 1700000000000LL);
		h.attributes = (int16_t)tb_attr_codec(codec);
		size_t len;
		uint8_t *b = tb_wrap(&h, w.buf, w.len, &len); /* plain records claiming a codec */
		struct sluice_batch_verify v = {0};
		enum sluice_batch_result r = verify_in(&z, b, len, 1u << 20, &v);
		cr_expect_eq(r, SLUICE_BATCH_BAD_PAYLOAD, "codec %d, not compressed: %s", codec,
			     sluice_batch_result_name(r));
		free(b);
		cr_expect_eq(verdict(&z, &w, codec, 20, 0, NULL), SLUICE_BATCH_OK, "codec %d after a failure", codec);
	}
	for (int16_t codec = 5; codec <= 7; codec++) {
		struct tb_hdr h = tb_hdr_default(20, 1700000000000LL);
		h.attributes = codec;
		size_t len;
		uint8_t *b = tb_wrap(&h, w.buf, w.len, &len);
		struct sluice_batch_verify v = {0};
		cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_BAD_CODEC);
		free(b);
	}
	kwr_free(&w);
	sluice_inflater_free(&z);
}

/* Proves the decompression cap holds for every codec: a record of 4 MiB of
 * zeros (kilobytes compressed) is TOO_BIG_INFLATED with a 1 MiB cap, while
 * a cap of exactly the inflated size accepts it. */
Test(batch_verify, inflate_cap)
{
	struct sluice_inflater z = {0};
	size_t big = 4u << 20;
	char *zeros = malloc(big + 1);
	memset(zeros, '0', big);
	zeros[big] = 0;
	struct kwr w;
	kwr_init(&w, big + 64, 1u << 24);
	enc_rec(&w, 0, "k", zeros, 0, 0, 0);
	for (size_t c = 1; c < sizeof all_codecs / sizeof all_codecs[0]; c++) {
		int codec = all_codecs[c];
		size_t len;
		uint8_t *b = vbatch(w.buf, w.len, codec, 1, 0, &len);
		struct sluice_batch sb;
		cr_assert_eq(sluice_batch_check(b, len, &sb), SLUICE_BATCH_OK);
		struct sluice_batch_verify v = {0};
		enum sluice_batch_result r1 = sluice_batch_verify(b, &sb, &z, 1u << 20, &v);
		cr_expect_eq(r1, SLUICE_BATCH_TOO_BIG_INFLATED, "codec %d: %s", codec, sluice_batch_result_name(r1));
		r1 = sluice_batch_verify(b, &sb, &z, w.len - 1, &v);
		cr_expect_eq(r1, SLUICE_BATCH_TOO_BIG_INFLATED, "codec %d: %s", codec, sluice_batch_result_name(r1));
		enum sluice_batch_result r = sluice_batch_verify(b, &sb, &z, w.len, &v);
		cr_expect_eq(r, SLUICE_BATCH_OK, "codec %d at the cap: %s", codec, sluice_batch_result_name(r));
		cr_expect_eq(v.inflated_bytes, w.len);
		free(b);
	}
	kwr_free(&w);
	free(zeros);
	sluice_inflater_free(&z);
}

/* Proves fields that cannot be decoded are refused: a key length below -1,
 * a negative header count, a null header key, a header count beyond the
 * record, a record length varint of six bytes, an empty record. */
Test(batch_verify, malformed_fields)
{
	struct sluice_inflater z = {0};
	for (int c = 0; c < 6; c++) {
		struct kwr w;
		kwr_init(&w, 64, 1u << 20);
		struct kwr body;
		kwr_init(&body, 64, 1u << 20);
		kwr_i8(&body, 0);
		kwr_varlong(&body, 0);
		kwr_varint(&body, 0);
		kwr_varint(&body, c == 0 ? -2 : 1);
		if (c != 0)
			kwr_raw(&body, "k", 1);
		kwr_varint(&body, 1);
		kwr_raw(&body, "v", 1);
		kwr_varint(&body, c == 1 ? -1 : c == 2 ? 1 : c == 3 ? 50 : 0);
		if (c == 2) { /* header with a null key */
			kwr_varint(&body, -1);
			kwr_varint(&body, -1);
		}
		if (c == 4)
			kwr_raw(&w, "\xff\xff\xff\xff\xff\x01", 6);
		else if (c == 5)
			kwr_varint(&w, 0);
		else
			kwr_varint(&w, (int32_t)body.len);
		if (c < 4)
			kwr_raw(&w, body.buf, body.len);
		kwr_free(&body);
		int32_t at;
		enum sluice_batch_result r = verdict(&z, &w, 0, 1, 0, &at);
		cr_expect_eq(r, SLUICE_BATCH_BAD_RECORD, "case %d: %s", c, sluice_batch_result_name(r));
		cr_expect_eq(at, 0);
		kwr_free(&w);
	}
	sluice_inflater_free(&z);
}

/* Proves record-level faults are reported per record, in order, without
 * failing the decode: null keys when keys are required (none reported
 * otherwise), timestamps outside the window (with the record's timestamp),
 * one fault per record with the key first, and all counted past the kept
 * maximum. */
Test(batch_verify, record_errors)
{
	struct sluice_inflater z = {0};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_rec(&w, 0, "a", "0", 0, 0, 0);
	enc_rec(&w, 1, NULL, "1", 0, 0, 0);
	enc_rec(&w, 2, "c", "2", 0, 0, 0);
	enc_rec(&w, 3, NULL, "3", 0, 0, 0);
	for (int codec = 0; codec <= TB_ZSTD; codec += TB_LZ4) {
		size_t len;
		uint8_t *b = vbatch(w.buf, w.len, codec, 4, 0, &len);
		struct sluice_batch_verify v = {0};
		cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
		cr_expect_eq(v.nerrors, 0, "keys not required");
		v.need_key = true;
		cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
		cr_assert_eq(v.nerrors, 2, "codec %d", codec);
		cr_expect_eq(v.errors[0].index, 1);
		cr_expect_eq(v.errors[1].index, 3);
		cr_expect_eq(v.errors[0].fault, SLUICE_RECORD_NO_KEY);
		/* timestamps are base + index: 1700000000000 + 0..3; allow [+1, +2] */
		v.need_key = false;
		v.check_timestamps = true;
		v.ts_min = 1700000000001LL;
		v.ts_max = 1700000000002LL;
		cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
		cr_assert_eq(v.nerrors, 2);
		cr_expect_eq(v.errors[0].index, 0);
		cr_expect_eq(v.errors[0].fault, SLUICE_RECORD_TIMESTAMP);
		cr_expect_eq(v.errors[0].timestamp, 1700000000000LL);
		cr_expect_eq(v.errors[1].index, 3);
		v.need_key = true;
		cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
		cr_assert_eq(v.nerrors, 3, "record 3 counted once");
		cr_expect_eq(v.errors[2].index, 3);
		cr_expect_eq(v.errors[2].fault, SLUICE_RECORD_NO_KEY);
		free(b);
	}
	kwr_free(&w);
	kwr_init(&w, 256, 1u << 20);
	for (int32_t i = 0; i < 100; i++)
		enc_rec(&w, i, NULL, "v", 0, 0, 0);
	size_t len;
	uint8_t *b = vbatch(w.buf, w.len, 0, 100, 0, &len);
	struct sluice_batch_verify v = {.need_key = true};
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
	cr_expect_eq(v.nerrors, 100);
	cr_expect_eq(v.errors[SLUICE_BATCH_RECORD_ERRORS_MAX - 1].index, SLUICE_BATCH_RECORD_ERRORS_MAX - 1);
	free(b);
	kwr_free(&w);
	sluice_inflater_free(&z);
}

/* Proves the inflater's output buffer is reused from one batch to the next
 * (same address, no reallocation once large enough), and released by trim
 * only when it grew past keep_bytes. */
Test(batch_verify, inflater_reuse)
{
	struct sluice_inflater z = {.keep_bytes = 1u << 20};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_recs(&w, 50, -1, 0);
	for (size_t c = 1; c < sizeof all_codecs / sizeof all_codecs[0]; c++) {
		cr_expect_eq(verdict(&z, &w, all_codecs[c], 50, 0, NULL), SLUICE_BATCH_OK);
		uint8_t *buf = z.buf;
		size_t cap = z.cap;
		for (int i = 0; i < 3; i++)
			cr_expect_eq(verdict(&z, &w, all_codecs[c], 50, 0, NULL), SLUICE_BATCH_OK);
		cr_expect_eq(z.buf, buf, "codec %d: buffer reused", all_codecs[c]);
		cr_expect_eq(z.cap, cap);
		sluice_inflater_trim(&z);
		cr_expect_eq(z.buf, buf, "small buffer kept");
	}
	z.keep_bytes = 16;
	sluice_inflater_trim(&z);
	cr_expect_null(z.buf);
	cr_expect_eq(z.cap, 0);
	cr_expect_eq(verdict(&z, &w, TB_ZSTD, 50, 0, NULL), SLUICE_BATCH_OK);
	kwr_free(&w);
	sluice_inflater_free(&z);
}

/* Proves a compressed payload that decompresses to nothing (here a xerial
 * snappy header without blocks, gzip and zstd of zero bytes) is refused as
 * FEWER_RECORDS, without arithmetic on the inflater's empty buffer (found by
 * fuzz_batch: UBSan "applying zero offset to null pointer"). */
Test(batch_verify, empty_payload)
{
	static const uint8_t xerial_empty[16] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1};
	const int codecs[3] = {TB_SNAPPY, TB_GZIP, TB_ZSTD};
	for (int c = 0; c < 3; c++) {
		struct sluice_inflater z = {0};
		size_t n = sizeof xerial_empty;
		uint8_t *payload = c == 0 ? NULL : tb_compress(codecs[c], (const uint8_t *)"", 0, &n);
		struct tb_hdr h = tb_hdr_default(3, 1700000000000LL);
		h.attributes = (int16_t)codecs[c];
		size_t len;
		uint8_t *b = tb_wrap(&h, payload ? payload : xerial_empty, n, &len);
		struct sluice_batch_verify v = {0};
		int32_t at = -1;
		cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_FEWER_RECORDS, "codec %d", codecs[c]);
		at = v.at;
		cr_expect_eq(at, 0);
		free(b);
		free(payload);
		sluice_inflater_free(&z);
	}
}

/* Proves verify reports the records' largest timestamp (base + deltas) for
 * a CreateTime batch whatever its MaxTimestamp header says, and that in a
 * LogAppendTime batch every record's timestamp is the header's MaxTimestamp,
 * checked against the window for each record (as Kafka's records read it). */
Test(batch_verify, max_timestamp)
{
	struct sluice_inflater z = {0};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_rec(&w, 0, "a", "0", 0, 0, 0); /* timestamp delta = offset delta */
	enc_rec(&w, 1, "b", "1", 0, 0, 0);
	enc_rec(&w, 2, "c", "2", 0, 0, 0);
	struct tb_hdr h = tb_hdr_default(3, 1700000000000LL);
	h.max_timestamp = 1800000000000LL; /* lies */
	size_t len;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, &len);
	struct sluice_batch_verify v = {0};
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
	cr_expect_eq(v.max_timestamp, 1700000000002LL);
	sluice_batch_set_max_timestamp(b, v.max_timestamp);
	struct sluice_batch sb;
	cr_expect_eq(sluice_batch_check(b, len, &sb), SLUICE_BATCH_OK, "CRC recomputed");
	cr_expect_eq(sb.max_timestamp, 1700000000002LL);
	free(b);
	h.attributes = SLUICE_BATCH_ATTR_TS_LOG_APPEND;
	b = tb_wrap(&h, w.buf, w.len, &len);
	v = (struct sluice_batch_verify){.check_timestamps = true, .ts_min = 0, .ts_max = 1700000001000LL};
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
	cr_expect_eq(v.max_timestamp, 1800000000000LL);
	cr_expect_eq(v.nerrors, 3);
	cr_expect_eq(v.errors[2].timestamp, 1800000000000LL);
	free(b);
	kwr_free(&w);
	sluice_inflater_free(&z);
}

/* A zstd frame written by the streaming API: no content size in its header
 * (what a streaming producer, the Java client's, emits). */
static uint8_t *zstd_streamed(const uint8_t *in, size_t n, size_t *out_len)
{
	ZSTD_CCtx *c = ZSTD_createCCtx();
	size_t cap = ZSTD_compressBound(n) + 64;
	uint8_t *out = malloc(cap);
	ZSTD_outBuffer ob = {out, cap, 0};
	ZSTD_inBuffer ib = {in, n, 0};
	size_t r;
	do {
		r = ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end);
		cr_assert(!ZSTD_isError(r));
	} while (r != 0);
	ZSTD_freeCCtx(c);
	*out_len = ob.pos;
	return out;
}

/* Proves zstd payloads are validated whichever way they were written: a
 * streamed frame without a content size, and two frames back to back that
 * split the records between them (the Java client's reader reads on into
 * the next frame), with or without content sizes; one frame alone holds too
 * few records; a frame followed by garbage is BAD_PAYLOAD. */
Test(batch_verify, zstd_streamed_and_concatenated)
{
	struct sluice_inflater z = {0};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_recs(&w, 4000, -1, 0); /* ~130 KiB: past the first buffer of 64 KiB */
	size_t half = 0;
	{ /* the end of record 1999, where the second frame starts */
		const uint8_t *p = w.buf, *end = w.buf + w.len;
		for (int i = 0; i < 2000; i++) {
			int32_t len;
			struct krd r;
			krd_init(&r, p, (size_t)(end - p));
			len = krd_varint(&r);
			p = r.p + len;
		}
		half = (size_t)(p - w.buf);
	}
	size_t l1, l2;
	uint8_t *f1 = zstd_streamed(w.buf, half, &l1), *f2 = zstd_streamed(w.buf + half, w.len - half, &l2);
	uint8_t *both = malloc(l1 + l2 + 8);
	memcpy(both, f1, l1);
	memcpy(both + l1, f2, l2);
	struct tb_hdr h = tb_hdr_default(4000, 1700000000000LL);
	h.attributes = TB_ZSTD;
	size_t len;
	uint8_t *b = tb_wrap(&h, f1, l1, &len); /* one frame, 2000 of 4000 records */
	struct sluice_batch_verify v = {0};
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_FEWER_RECORDS);
	free(b);
	b = tb_wrap(&h, both, l1 + l2, &len);
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
	cr_expect_eq(v.inflated_bytes, w.len);
	free(b);
	memcpy(both + l1 + l2, "garbage!", 8);
	b = tb_wrap(&h, both, l1 + l2 + 8, &len);
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_BAD_PAYLOAD);
	free(b);
	/* frames that announce their sizes: the one-shot decode runs out of room
	 * after the first and the stream takes over */
	free(f1);
	free(f2);
	f1 = tb_zstd(w.buf, half, &l1);
	f2 = tb_zstd(w.buf + half, w.len - half, &l2);
	memcpy(both, f1, l1);
	memcpy(both + l1, f2, l2);
	b = tb_wrap(&h, both, l1 + l2, &len);
	struct sluice_inflater fresh = {0};
	cr_expect_eq(verify_in(&fresh, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
	cr_expect_eq(v.inflated_bytes, w.len);
	sluice_inflater_free(&fresh);
	free(b);
	size_t l;
	uint8_t *one = zstd_streamed(w.buf, w.len, &l);
	b = tb_wrap(&h, one, l, &len);
	cr_expect_eq(verify_in(&z, b, len, 1u << 20, &v), SLUICE_BATCH_OK);
	free(b);
	free(one);
	free(f1);
	free(f2);
	free(both);
	kwr_free(&w);
	sluice_inflater_free(&z);
}

/* Proves a streamed zstd frame that declares a 32 MiB window (no content
 * size) is validated, and that trim then releases the decompression context
 * that allocated the window instead of keeping it for the next batch. */
Test(batch_verify, zstd_window_released)
{
	struct sluice_inflater z = {.keep_bytes = 1u << 20};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	enc_recs(&w, 30, -1, 0);
	ZSTD_CCtx *c = ZSTD_createCCtx();
	cr_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, 25)));
	size_t cap = ZSTD_compressBound(w.len) + 64;
	uint8_t *out = malloc(cap);
	ZSTD_outBuffer ob = {out, cap, 0};
	ZSTD_inBuffer ib = {w.buf, w.len / 2, 0};
	cr_assert(!ZSTD_isError(ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_continue))); /* size unknown */
	ib = (ZSTD_inBuffer){w.buf + w.len / 2, w.len - w.len / 2, 0};
	size_t r;
	do {
		r = ZSTD_compressStream2(c, &ob, &ib, ZSTD_e_end);
		cr_assert(!ZSTD_isError(r));
	} while (r != 0);
	ZSTD_freeCCtx(c);
	cr_assert_eq(ZSTD_getFrameContentSize(out, ob.pos), ZSTD_CONTENTSIZE_UNKNOWN);
	struct tb_hdr h = tb_hdr_default(30, 1700000000000LL);
	h.attributes = TB_ZSTD;
	size_t len;
	uint8_t *b = tb_wrap(&h, out, ob.pos, &len);
	struct sluice_batch sb;
	cr_assert_eq(sluice_batch_check(b, len, &sb), SLUICE_BATCH_OK);
	struct sluice_batch_verify v = {0};
	cr_expect_eq(sluice_batch_verify(b, &sb, &z, 1u << 20, &v), SLUICE_BATCH_OK);
	cr_assert(z.zstd);
	cr_expect_gt(ZSTD_sizeof_DCtx(z.zstd), 1u << 20, "the context holds the window");
	sluice_inflater_trim(&z);
	cr_expect_null(z.zstd, "released");
	cr_expect_eq(sluice_batch_verify(b, &sb, &z, 1u << 20, &v), SLUICE_BATCH_OK, "and made again");
	free(b);
	free(out);
	kwr_free(&w);
	sluice_inflater_free(&z);
}

static bool collect_ts(const struct sluice_record *rec, void *arg)
{
	int64_t *out = arg;
	out[rec->offset & 1] = rec->timestamp;
	return true;
}

/* Proves a hostile FirstTimestamp with negative record deltas is decoded
 * with Kafka's wrapping arithmetic instead of overflowing (fuzz_batch found
 * FirstTimestamp INT64_MIN with delta -23: undefined behaviour, caught by
 * UBSan in the sanitizer build), and a BaseOffset whose last offset would
 * pass INT64_MAX is refused as damage. */
Test(batch, hostile_timestamps_and_offsets)
{
	struct tb_rec recs[2] = {{"k", 1, "v", 1, -23}, {"k", 1, "v", 1, 0}};
	struct kwr w;
	kwr_init(&w, 64, 1u << 20);
	(void)tb_records(&w, recs, 2);
	struct tb_hdr h = tb_hdr_default(2, INT64_MIN);
	size_t len = 0;
	uint8_t *b = tb_wrap(&h, w.buf, w.len, &len);
	kwr_free(&w);
	cr_assert_not_null(b);
	int64_t ts[2] = {0, 0};
	cr_expect_eq(sluice_batch_records(b, len, 1u << 20, collect_ts, ts), 2);
	cr_expect_eq(ts[0], (int64_t)((uint64_t)INT64_MIN - 23u));
	cr_expect_eq(ts[1], INT64_MIN);
	kput64(b, (uint64_t)(INT64_MAX - 0)); /* BaseOffset: last offset INT64_MAX + 1 */
	struct sluice_batch sb;
	cr_expect_neq(sluice_batch_parse(b, len, &sb), SLUICE_BATCH_OK);
	kput64(b, (uint64_t)(INT64_MAX - 1)); /* last offset exactly INT64_MAX */
	cr_expect_eq(sluice_batch_parse(b, len, &sb), SLUICE_BATCH_OK);
	free(b);
}
