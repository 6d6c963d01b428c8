/* Kafka wire codec unit tests. They prove two things about common/kafka/codec:
 * every primitive the writer emits (fixed-width integers, varints and varlongs
 * at their edge values, compact and classic nullable strings and bytes,
 * arrays, UUIDs, booleans, tagged-field sections including unknown tags with
 * payloads) is read back identically, with Kafka's byte-exact encodings where
 * the protocol fixes them; and the reader rejects every malformed length it
 * can meet on the wire (lengths and counts beyond the frame, negative lengths
 * other than the -1 null, count * element size beyond the frame, over-long
 * varints, huge tagged-field counts), latching rd->err, returning zero values
 * and never touching a byte past the end. The malformed inputs are placed so
 * that they end at an inaccessible page (guard.h), so an over-read crashes
 * the test even without AddressSanitizer. */
#include "common/kafka/codec.h"
#include "guard.h"
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- helpers ---------------------------------------------------------------- */

static struct kwr wr;
static void wr_setup(void) { kwr_init(&wr, 64, 1u << 20); }
static void wr_teardown(void) { kwr_free(&wr); }

/* Read the writer's output with a reader whose end is a guard page. */
static struct guarded guard;
static struct krd rd_over(const void *p, size_t n)
{
	cr_assert(guarded_init(&guard, p, n));
	struct krd r;
	krd_init(&r, guard.data, n);
	return r;
}
static struct krd rd_written(void) { return rd_over(wr.buf, wr.len); }
static void rd_done(void) { guarded_free(&guard); }

/* A reader whose first failure must have left it at the end with err set. */
static void expect_failed(struct krd *r, const char *what)
{
	cr_expect(r->err, "%s: err not set", what);
	cr_expect_eq(krd_left(r), 0, "%s: reader not moved to the end", what);
	cr_expect_not_null(r->err_what, "%s: no failure description", what);
}

/* ---- round trips -------------------------------------------------------------- */

/* Proves fixed-width integers round-trip at their extremes, big-endian. */
Test(codec_roundtrip, fixed_ints, .init = wr_setup, .fini = wr_teardown)
{
	const int8_t i8s[] = {0, 1, -1, INT8_MIN, INT8_MAX};
	const int16_t i16s[] = {0, 1, -1, INT16_MIN, INT16_MAX, 0x1234};
	const int32_t i32s[] = {0, 1, -1, INT32_MIN, INT32_MAX, 0x12345678};
	const int64_t i64s[] = {0, 1, -1, INT64_MIN, INT64_MAX, 0x0123456789abcdefLL};
	for (size_t i = 0; i < sizeof i8s / sizeof *i8s; i++) kwr_i8(&wr, i8s[i]);
	for (size_t i = 0; i < sizeof i16s / sizeof *i16s; i++) kwr_i16(&wr, i16s[i]);
	for (size_t i = 0; i < sizeof i32s / sizeof *i32s; i++) kwr_i32(&wr, i32s[i]);
	for (size_t i = 0; i < sizeof i64s / sizeof *i64s; i++) kwr_i64(&wr, i64s[i]);
	kwr_bool(&wr, true);
	kwr_bool(&wr, false);
	cr_assert(!wr.err);
	cr_assert_eq(wr.len, 5 + 6 * 2 + 6 * 4 + 6 * 8 + 2);
	struct krd r = rd_written();
	for (size_t i = 0; i < sizeof i8s / sizeof *i8s; i++) cr_expect_eq(krd_i8(&r), i8s[i]);
	for (size_t i = 0; i < sizeof i16s / sizeof *i16s; i++) cr_expect_eq(krd_i16(&r), i16s[i]);
	for (size_t i = 0; i < sizeof i32s / sizeof *i32s; i++) cr_expect_eq(krd_i32(&r), i32s[i]);
	for (size_t i = 0; i < sizeof i64s / sizeof *i64s; i++) cr_expect_eq(krd_i64(&r), i64s[i]);
	cr_expect(krd_bool(&r));
	cr_expect(!krd_bool(&r));
	cr_expect(!r.err);
	cr_expect_eq(krd_left(&r), 0);
	rd_done();
	/* Big-endian on the wire. */
	kwr_reset(&wr);
	kwr_i32(&wr, 0x01020304);
	cr_expect_arr_eq(wr.buf, ((uint8_t[]){1, 2, 3, 4}), 4);
}

/* Proves unsigned varints round-trip and have Kafka's lengths (7 bits per
 * byte, at most 5 bytes for 32 bits). */
Test(codec_roundtrip, uvarint, .init = wr_setup, .fini = wr_teardown)
{
	const struct { uint32_t v; size_t len; } cases[] = {
		{0, 1}, {1, 1}, {127, 1}, {128, 2}, {300, 2}, {16383, 2}, {16384, 3},
		{(1u << 21) - 1, 3}, {1u << 21, 4}, {(1u << 28) - 1, 4}, {1u << 28, 5}, {UINT32_MAX, 5},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		kwr_reset(&wr);
		kwr_uvarint(&wr, cases[i].v);
		cr_expect_eq(wr.len, cases[i].len, "uvarint %u: %zu bytes", cases[i].v, wr.len);
		struct krd r = rd_written();
		cr_expect_eq(krd_uvarint(&r), cases[i].v);
		cr_expect(!r.err);
		cr_expect_eq(krd_left(&r), 0);
		rd_done();
	}
	kwr_reset(&wr);
	kwr_uvarint(&wr, 300);
	cr_expect_arr_eq(wr.buf, ((uint8_t[]){0xac, 0x02}), 2);
}

/* Proves zigzag varints round-trip at INT32_MIN/MAX and around the 1-byte and
 * 2-byte boundaries, with Kafka's zigzag byte values. */
Test(codec_roundtrip, varint, .init = wr_setup, .fini = wr_teardown)
{
	const int32_t vals[] = {0, 1, -1, 2, -2, 63, -64, 64, -65, 8191, -8192, 8192, 1 << 20, -(1 << 20),
				INT32_MAX, INT32_MIN, INT32_MAX - 1, INT32_MIN + 1};
	for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
		kwr_reset(&wr);
		kwr_varint(&wr, vals[i]);
		cr_expect_leq(wr.len, 5);
		struct krd r = rd_written();
		cr_expect_eq(krd_varint(&r), vals[i], "varint %d", vals[i]);
		cr_expect(!r.err);
		cr_expect_eq(krd_left(&r), 0);
		rd_done();
	}
	/* Zigzag: 0->0, -1->1, 1->2, -64->127 (one byte), 64->128 (two bytes). */
	const struct { int32_t v; uint8_t b[5]; size_t n; } enc[] = {
		{0, {0x00}, 1}, {-1, {0x01}, 1}, {1, {0x02}, 1}, {-64, {0x7f}, 1}, {64, {0x80, 0x01}, 2},
		{INT32_MAX, {0xfe, 0xff, 0xff, 0xff, 0x0f}, 5}, {INT32_MIN, {0xff, 0xff, 0xff, 0xff, 0x0f}, 5},
	};
	for (size_t i = 0; i < sizeof enc / sizeof *enc; i++) {
		kwr_reset(&wr);
		kwr_varint(&wr, enc[i].v);
		cr_expect_eq(wr.len, enc[i].n, "varint %d length", enc[i].v);
		cr_expect(memcmp(wr.buf, enc[i].b, enc[i].n) == 0, "varint %d bytes", enc[i].v);
	}
}

/* Proves zigzag varlongs round-trip at INT64_MIN/MAX (10 bytes) and elsewhere. */
Test(codec_roundtrip, varlong, .init = wr_setup, .fini = wr_teardown)
{
	const int64_t vals[] = {0, 1, -1, 63, -64, 64, -65, INT32_MAX, INT32_MIN, (int64_t)INT32_MAX + 1,
				(int64_t)INT32_MIN - 1, 1LL << 62, -(1LL << 62), INT64_MAX, INT64_MIN,
				1700000000000LL, -1700000000000LL};
	for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
		kwr_reset(&wr);
		kwr_varlong(&wr, vals[i]);
		cr_expect_leq(wr.len, 10);
		struct krd r = rd_written();
		cr_expect_eq(krd_varlong(&r), vals[i], "varlong %lld", (long long)vals[i]);
		cr_expect(!r.err);
		cr_expect_eq(krd_left(&r), 0);
		rd_done();
	}
	kwr_reset(&wr);
	kwr_varlong(&wr, INT64_MIN);
	cr_expect_eq(wr.len, 10);
	kwr_reset(&wr);
	kwr_varlong(&wr, INT64_MAX);
	cr_expect_eq(wr.len, 10);
}

/* Proves strings round-trip in both encodings, including empty and null:
 * classic = int16 length (-1 null), compact = uvarint length+1 (0 null). */
Test(codec_roundtrip, strings, .init = wr_setup, .fini = wr_teardown)
{
	for (int flex = 0; flex <= 1; flex++) {
		kwr_reset(&wr);
		kwr_cstr(&wr, flex, "sluice");
		kwr_cstr(&wr, flex, "");
		kwr_cstr(&wr, flex, NULL);
		kwr_string(&wr, flex, "abcdef", 3);
		cr_assert(!wr.err);
		cr_expect_eq(wr.len, flex ? (1 + 6) + 1 + 1 + (1 + 3) : (2 + 6) + 2 + 2 + (2 + 3));
		struct krd r = rd_written();
		struct kstr s = krd_string(&r, flex);
		cr_expect(kstr_eq(s, "sluice"));
		s = krd_string(&r, flex);
		cr_expect_not_null(s.ptr, "empty string must not read as null");
		cr_expect_eq(s.len, 0);
		s = krd_string(&r, flex);
		cr_expect_null(s.ptr);
		s = krd_string(&r, flex);
		cr_expect(kstr_eq(s, "abc"));
		cr_expect(!r.err);
		cr_expect_eq(krd_left(&r), 0);
		rd_done();
	}
	kwr_reset(&wr);
	kwr_cstr(&wr, false, NULL);
	cr_expect_arr_eq(wr.buf, ((uint8_t[]){0xff, 0xff}), 2);
	kwr_reset(&wr);
	kwr_cstr(&wr, true, NULL);
	cr_expect_eq(wr.len, 1);
	cr_expect_eq(wr.buf[0], 0);
}

/* Proves a long compact string (length needing a 2-byte uvarint) round-trips. */
Test(codec_roundtrip, long_compact_string, .init = wr_setup, .fini = wr_teardown)
{
	char big[1000];
	memset(big, 'x', sizeof big);
	kwr_string(&wr, true, big, (int32_t)sizeof big);
	cr_expect_eq(wr.len, 2 + sizeof big);
	struct krd r = rd_written();
	struct kstr s = krd_string(&r, true);
	cr_expect_eq(s.len, 1000);
	cr_expect(memcmp(s.ptr, big, sizeof big) == 0);
	cr_expect(!r.err);
	rd_done();
}

/* Proves bytes round-trip in both encodings (classic int32 length, -1 null). */
Test(codec_roundtrip, bytes, .init = wr_setup, .fini = wr_teardown)
{
	static const uint8_t payload[] = {0, 1, 2, 0xff, 0x80};
	for (int flex = 0; flex <= 1; flex++) {
		kwr_reset(&wr);
		kwr_bytes(&wr, flex, payload, (int32_t)sizeof payload);
		kwr_bytes(&wr, flex, "", 0);
		kwr_bytes(&wr, flex, NULL, 0);
		cr_assert(!wr.err);
		cr_expect_eq(wr.len, flex ? 1 + 5 + 1 + 1 : 4 + 5 + 4 + 4);
		struct krd r = rd_written();
		const uint8_t *p;
		cr_expect_eq(krd_bytes(&r, flex, &p), 5);
		cr_expect(p && memcmp(p, payload, 5) == 0);
		cr_expect_eq(krd_bytes(&r, flex, &p), 0);
		cr_expect_not_null(p, "empty bytes must not read as null");
		cr_expect_eq(krd_bytes(&r, flex, &p), -1);
		cr_expect_null(p);
		cr_expect(!r.err);
		cr_expect_eq(krd_left(&r), 0);
		rd_done();
	}
}

/* Proves array counts round-trip in both encodings, including 0 and null. */
Test(codec_roundtrip, arrays, .init = wr_setup, .fini = wr_teardown)
{
	for (int flex = 0; flex <= 1; flex++) {
		kwr_reset(&wr);
		kwr_array(&wr, flex, 3);
		kwr_i32(&wr, 10);
		kwr_i32(&wr, 20);
		kwr_i32(&wr, 30);
		kwr_array(&wr, flex, 0);
		kwr_array(&wr, flex, -1);
		struct krd r = rd_written();
		cr_expect_eq(krd_array(&r, flex, 4), 3);
		cr_expect_eq(krd_i32(&r), 10);
		cr_expect_eq(krd_i32(&r), 20);
		cr_expect_eq(krd_i32(&r), 30);
		cr_expect_eq(krd_array(&r, flex, 4), 0);
		cr_expect_eq(krd_array(&r, flex, 4), -1);
		cr_expect(!r.err);
		cr_expect_eq(krd_left(&r), 0);
		rd_done();
	}
}

/* Proves UUIDs round-trip as 16 raw bytes. */
Test(codec_roundtrip, uuid, .init = wr_setup, .fini = wr_teardown)
{
	uint8_t u[16], back[16];
	for (int i = 0; i < 16; i++)
		u[i] = (uint8_t)(0xf0 ^ i * 17);
	kwr_uuid(&wr, u);
	cr_expect_eq(wr.len, 16);
	struct krd r = rd_written();
	krd_uuid(&r, back);
	cr_expect(memcmp(u, back, 16) == 0);
	cr_expect(!r.err);
	rd_done();
}

/* Proves a tagged-field section is skipped whole: empty sections, unknown tags
 * with payloads (including a payload that itself looks like varints and a
 * 200-byte payload with a 2-byte size) and large tag numbers, leaving the
 * reader exactly at the next field. */
Test(codec_roundtrip, tagged_fields_skip, .init = wr_setup, .fini = wr_teardown)
{
	kwr_tags_empty(&wr);
	kwr_i32(&wr, 0x11111111);
	/* three tagged fields */
	kwr_uvarint(&wr, 3);
	kwr_uvarint(&wr, 0);     /* tag 0 */
	kwr_uvarint(&wr, 3);     /* size */
	kwr_raw(&wr, "\x80\x80\x01", 3);
	kwr_uvarint(&wr, 12345); /* an unknown, large tag */
	kwr_uvarint(&wr, 0);
	kwr_uvarint(&wr, 7);
	kwr_uvarint(&wr, 200);
	uint8_t pay[200];
	memset(pay, 0xab, sizeof pay);
	kwr_raw(&wr, pay, sizeof pay);
	kwr_i32(&wr, 0x22222222);
	struct krd r = rd_written();
	krd_tags_skip(&r);
	cr_expect_eq(krd_i32(&r), 0x11111111);
	krd_tags_skip(&r);
	cr_expect_eq(krd_i32(&r), 0x22222222);
	cr_expect(!r.err);
	cr_expect_eq(krd_left(&r), 0);
	rd_done();
}

/* Proves kwr_patch_i32 rewrites a placeholder written earlier (frame sizes). */
Test(codec_roundtrip, patch_i32, .init = wr_setup, .fini = wr_teardown)
{
	kwr_i32(&wr, 0);
	kwr_cstr(&wr, false, "abc");
	kwr_patch_i32(&wr, 0, (int32_t)(wr.len - 4));
	struct krd r = rd_written();
	cr_expect_eq(krd_i32(&r), 5);
	rd_done();
}

/* Proves the writer refuses to grow past cap_max and latches err, and that
 * writes after the failure are dropped rather than half-done. */
Test(codec_writer, cap_max)
{
	struct kwr w;
	kwr_init(&w, 0, 16);
	kwr_i64(&w, 1);
	kwr_i64(&w, 2);
	cr_expect(!w.err);
	cr_expect_eq(w.len, 16);
	kwr_i8(&w, 3);
	cr_expect(w.err);
	cr_expect_eq(w.len, 16);
	cr_expect_null(kwr_reserve(&w, 1));
	kwr_reset(&w);
	cr_expect(!w.err);
	cr_expect_eq(w.len, 0);
	kwr_free(&w);
}

/* ---- malformed input ---------------------------------------------------------- */

/* Proves every fixed-width read on too few bytes fails without reading past
 * the end, and that later reads keep returning zero. */
Test(codec_bounds, short_fixed_reads)
{
	static const uint8_t b[8] = {0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f};
	for (size_t n = 0; n < 8; n++) {
		struct krd r = rd_over(b, n);
		cr_expect_eq(krd_i64(&r), 0, "i64 over %zu bytes", n);
		expect_failed(&r, "i64");
		cr_expect_eq(krd_i8(&r), 0, "read after failure returns 0");
		rd_done();
	}
	for (size_t n = 0; n < 4; n++) {
		struct krd r = rd_over(b, n);
		cr_expect_eq(krd_i32(&r), 0);
		expect_failed(&r, "i32");
		rd_done();
	}
	for (size_t n = 0; n < 2; n++) {
		struct krd r = rd_over(b, n);
		cr_expect_eq(krd_i16(&r), 0);
		expect_failed(&r, "i16");
		rd_done();
	}
	struct krd r = rd_over(b, 0);
	cr_expect_eq(krd_i8(&r), 0);
	expect_failed(&r, "i8");
	rd_done();
	uint8_t u[16];
	memset(u, 0x55, sizeof u);
	r = rd_over(b, 8);
	krd_uuid(&r, u);
	expect_failed(&r, "uuid");
	for (int i = 0; i < 16; i++)
		cr_expect_eq(u[i], 0, "uuid zeroed on failure");
	rd_done();
	r = rd_over(b, 8);
	krd_skip(&r, 9);
	expect_failed(&r, "skip");
	rd_done();
}

/* Proves a classic string whose int16 length exceeds the bytes left fails,
 * for every shortfall, at the page end. */
Test(codec_bounds, string_beyond_frame)
{
	uint8_t b[2 + 10] = {0x00, 0x0a, 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h', 'i', 'j'};
	for (size_t n = 2; n < sizeof b; n++) {
		struct krd r = rd_over(b, n);
		struct kstr s = krd_string(&r, false);
		cr_expect_null(s.ptr, "string over %zu bytes", n);
		expect_failed(&r, "string");
		rd_done();
	}
	struct krd r = rd_over(b, sizeof b);
	cr_expect(kstr_eq(krd_string(&r, false), "abcdefghij"));
	cr_expect(!r.err);
	rd_done();
	/* The largest int16 length with only the length present. */
	r = rd_over("\x7f\xff", 2);
	(void)krd_string(&r, false);
	expect_failed(&r, "string 32767");
	rd_done();
}

/* Proves a compact string whose uvarint length exceeds the bytes left fails,
 * including lengths near 2^32 that would overflow a 32-bit sum. */
Test(codec_bounds, compact_string_beyond_frame)
{
	struct krd r = rd_over("\x05" "abc", 4); /* 4 bytes declared, 3 present */
	cr_expect_null(krd_string(&r, true).ptr);
	expect_failed(&r, "compact 4/3");
	rd_done();
	r = rd_over("\xff\xff\xff\xff\x0f", 5); /* UINT32_MAX -> length 2^32-2 */
	(void)krd_string(&r, true);
	expect_failed(&r, "compact huge");
	rd_done();
	r = rd_over("\x80\x80\x80\x80\x08" "ab", 7); /* 2^31 -> length 2^31-1 */
	(void)krd_string(&r, true);
	expect_failed(&r, "compact 2^31");
	rd_done();
	const uint8_t *p;
	r = rd_over("\xff\xff\xff\xff\x0f", 5);
	cr_expect_eq(krd_bytes(&r, true, &p), -1);
	cr_expect_null(p);
	expect_failed(&r, "compact bytes huge");
	rd_done();
}

/* Proves negative lengths other than -1 are rejected for strings and bytes,
 * while -1 reads as null without an error. */
Test(codec_bounds, negative_lengths)
{
	const char *cases16[] = {"\xff\xfe" "abcd", "\x80\x00" "abcd", "\xff\x00" "abcd"};
	for (size_t i = 0; i < 3; i++) {
		struct krd r = rd_over(cases16[i], 6);
		cr_expect_null(krd_string(&r, false).ptr);
		expect_failed(&r, "negative string length");
		rd_done();
	}
	const char *cases32[] = {"\xff\xff\xff\xfe" "abcd", "\x80\x00\x00\x00" "abcd", "\xff\xff\xff\x00" "abcd"};
	for (size_t i = 0; i < 3; i++) {
		struct krd r = rd_over(cases32[i], 8);
		const uint8_t *p = (const uint8_t *)"x";
		cr_expect_eq(krd_bytes(&r, false, &p), -1);
		cr_expect_null(p);
		expect_failed(&r, "negative bytes length");
		rd_done();
	}
	struct krd r = rd_over("\xff\xff" "\xff\xff\xff\xff", 6);
	cr_expect_null(krd_string(&r, false).ptr);
	const uint8_t *p;
	cr_expect_eq(krd_bytes(&r, false, &p), -1);
	cr_expect(!r.err, "-1 is null, not an error");
	cr_expect_eq(krd_left(&r), 0);
	rd_done();
}

/* Proves a classic bytes field with a length beyond the frame (up to
 * INT32_MAX) fails at the page end. */
Test(codec_bounds, bytes_beyond_frame)
{
	const char *cases[] = {"\x00\x00\x00\x05" "abcd", "\x7f\xff\xff\xff" "abcd", "\x00\x01\x00\x00" "abcd"};
	for (size_t i = 0; i < 3; i++) {
		struct krd r = rd_over(cases[i], 8);
		const uint8_t *p;
		cr_expect_eq(krd_bytes(&r, false, &p), -1);
		expect_failed(&r, "bytes beyond frame");
		rd_done();
	}
}

/* Proves array counts are checked against the bytes left times the smallest
 * element size (so a count can never size an allocation beyond the frame),
 * that negative counts other than -1 fail, and that -1 is null. */
Test(codec_bounds, array_counts)
{
	/* 3 elements of >= 4 bytes need 12 bytes; 11 present. */
	uint8_t b[4 + 12] = {0, 0, 0, 3};
	struct krd r = rd_over(b, 4 + 11);
	cr_expect_eq(krd_array(&r, false, 4), -1);
	expect_failed(&r, "count*size beyond frame");
	rd_done();
	r = rd_over(b, 4 + 12);
	cr_expect_eq(krd_array(&r, false, 4), 3);
	cr_expect(!r.err);
	rd_done();
	/* elem_min_bytes 0 still counts one byte per element. */
	r = rd_over(b, 4 + 2);
	cr_expect_eq(krd_array(&r, false, 0), -1);
	expect_failed(&r, "count beyond frame (size 0)");
	rd_done();
	/* INT32_MAX elements of 8 bytes: the product must not overflow. */
	r = rd_over("\x7f\xff\xff\xff" "abcdefgh", 12);
	cr_expect_eq(krd_array(&r, false, 8), -1);
	expect_failed(&r, "INT32_MAX count");
	rd_done();
	/* A count whose product with the size wraps in 32 bits. */
	r = rd_over("\x40\x00\x00\x01" "abcdefgh", 12);
	cr_expect_eq(krd_array(&r, false, 4), -1);
	expect_failed(&r, "wrapping count");
	rd_done();
	const char *neg[] = {"\xff\xff\xff\xfe", "\x80\x00\x00\x00"};
	for (size_t i = 0; i < 2; i++) {
		r = rd_over(neg[i], 4);
		cr_expect_eq(krd_array(&r, false, 1), -1);
		expect_failed(&r, "negative count");
		rd_done();
	}
	r = rd_over("\xff\xff\xff\xff", 4);
	cr_expect_eq(krd_array(&r, false, 100), -1);
	cr_expect(!r.err, "-1 is a null array");
	rd_done();
	/* Compact: uvarint count+1. */
	r = rd_over("\x05" "abc", 4); /* 4 elements, 3 bytes */
	cr_expect_eq(krd_array(&r, true, 1), -1);
	expect_failed(&r, "compact count beyond frame");
	rd_done();
	r = rd_over("\xff\xff\xff\xff\x0f" "abc", 8);
	cr_expect_eq(krd_array(&r, true, 1), -1);
	expect_failed(&r, "compact huge count");
	rd_done();
	r = rd_over("\x00", 1);
	cr_expect_eq(krd_array(&r, true, 1), -1);
	cr_expect(!r.err, "compact 0 is a null array");
	rd_done();
}

/* Proves varints longer than 5 bytes and varlongs longer than 10 fail, and
 * that the longest legal forms are accepted. */
Test(codec_bounds, overlong_varints)
{
	struct krd r = rd_over("\x80\x80\x80\x80\x80\x01", 6);
	(void)krd_uvarint(&r);
	cr_expect(r.err, "6-byte uvarint");
	rd_done();
	r = rd_over("\x80\x80\x80\x80\x80\x01", 6);
	cr_expect_eq(krd_varint(&r), 0);
	cr_expect(r.err, "6-byte varint");
	rd_done();
	r = rd_over("\xff\xff\xff\xff\x0f", 5);
	cr_expect_eq(krd_uvarint(&r), UINT32_MAX);
	cr_expect(!r.err);
	rd_done();
	uint8_t v11[11], v10[10];
	memset(v11, 0x80, sizeof v11);
	v11[10] = 0x01;
	r = rd_over(v11, sizeof v11);
	cr_expect_eq(krd_varlong(&r), 0);
	cr_expect(r.err, "11-byte varlong");
	rd_done();
	memset(v10, 0xff, sizeof v10);
	v10[9] = 0x01;
	r = rd_over(v10, sizeof v10);
	cr_expect_eq(krd_varlong(&r), INT64_MIN);
	cr_expect(!r.err);
	rd_done();
	/* A stream of continuation bytes long enough to tempt a runaway loop. */
	uint8_t cont[64];
	memset(cont, 0xff, sizeof cont);
	r = rd_over(cont, sizeof cont);
	(void)krd_varlong(&r);
	expect_failed(&r, "endless varlong");
	rd_done();
}

/* Proves a varint cut off by the end of the frame fails at the page end. */
Test(codec_bounds, truncated_varints)
{
	for (size_t n = 0; n < 4; n++) {
		struct krd r = rd_over("\x80\x80\x80\x80", n);
		(void)krd_uvarint(&r);
		expect_failed(&r, "truncated uvarint");
		rd_done();
		r = rd_over("\x80\x80\x80\x80", n);
		(void)krd_varlong(&r);
		expect_failed(&r, "truncated varlong");
		rd_done();
		r = rd_over("\x80\x80\x80\x80", n);
		(void)krd_string(&r, true);
		expect_failed(&r, "truncated compact length");
		rd_done();
	}
}

/* Proves the tagged-field section is bounded: a count above the limit or
 * above what the bytes left could hold fails before any field is walked, a
 * field whose size runs past the frame fails, and a truncated tag fails. */
Test(codec_bounds, tagged_fields)
{
	uint8_t huge[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0, 0, 0, 0};
	struct krd r = rd_over(huge, sizeof huge);
	krd_tags_skip(&r);
	expect_failed(&r, "tag count 2^32-1");
	rd_done();
	uint8_t over_max[2 + 2 * 80];
	memset(over_max, 0, sizeof over_max);
	over_max[0] = SLUICE_KAFKA_TAGGED_FIELDS_MAX + 1; /* < 128: one byte */
	r = rd_over(over_max, sizeof over_max);
	krd_tags_skip(&r);
	expect_failed(&r, "tag count above the limit");
	rd_done();
	r = rd_over("\x05\x00\x00", 3); /* 5 fields cannot fit in 2 bytes */
	krd_tags_skip(&r);
	expect_failed(&r, "tag count beyond frame");
	rd_done();
	r = rd_over("\x01\x00\x10" "abc", 6); /* tag 0, size 16, 3 bytes present */
	krd_tags_skip(&r);
	expect_failed(&r, "tag size beyond frame");
	rd_done();
	r = rd_over("\x01\x00\xff\xff\xff\xff\x0f", 7); /* size 2^32-1 */
	krd_tags_skip(&r);
	expect_failed(&r, "tag size 2^32-1");
	rd_done();
	r = rd_over("\x02\x00\x00\x80", 4); /* second tag truncated */
	krd_tags_skip(&r);
	expect_failed(&r, "truncated tag");
	rd_done();
	r = rd_over("", 0);
	krd_tags_skip(&r);
	expect_failed(&r, "no tag section at all");
	rd_done();
	/* The limit itself is accepted. */
	uint8_t at_max[1 + 2 * SLUICE_KAFKA_TAGGED_FIELDS_MAX];
	memset(at_max, 0, sizeof at_max);
	at_max[0] = SLUICE_KAFKA_TAGGED_FIELDS_MAX;
	r = rd_over(at_max, sizeof at_max);
	krd_tags_skip(&r);
	cr_expect(!r.err);
	cr_expect_eq(krd_left(&r), 0);
	rd_done();
}

/* Proves the first failure is the one reported and that the reader stays
 * failed: a later successful-looking read cannot clear err. */
Test(codec_bounds, error_latches)
{
	struct krd r = rd_over("\x00\x05" "ab", 4);
	(void)krd_string(&r, false);
	const char *first = r.err_what;
	cr_assert(r.err);
	(void)krd_i32(&r);
	cr_expect_eq(r.err_what, first);
	cr_expect(r.err);
	rd_done();
}

/* Proves random byte strings never make any reader primitive read past the
 * end (a crude in-process fuzz of the codec at the page boundary). */
Test(codec_bounds, random_sequences)
{
	uint64_t s = 12345;
	uint8_t buf[64];
	for (int round = 0; round < 3000; round++) {
		size_t n = (size_t)(s % 64);
		for (size_t i = 0; i < n; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			buf[i] = (uint8_t)(s >> 56);
		}
		struct krd r = rd_over(buf, n);
		for (int step = 0; step < 40 && !r.err; step++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			const uint8_t *p;
			switch ((s >> 33) % 9) {
			case 0: (void)krd_string(&r, (s >> 40) & 1); break;
			case 1: (void)krd_bytes(&r, (s >> 40) & 1, &p); break;
			case 2: (void)krd_array(&r, (s >> 40) & 1, (s >> 44) % 20); break;
			case 3: krd_tags_skip(&r); break;
			case 4: (void)krd_varlong(&r); break;
			case 5: (void)krd_varint(&r); break;
			case 6: (void)krd_i64(&r); break;
			case 7: (void)krd_i16(&r); break;
			default: (void)krd_i8(&r); break;
			}
			cr_assert_leq((size_t)(r.p - r.base), n);
		}
		rd_done();
	}
}
