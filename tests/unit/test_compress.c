/* Record-batch decompression unit tests. Payloads are compressed here with
 * the codec libraries themselves (zlib, libzstd, liblz4 frame API, libsnappy
 * raw, plus the xerial snappy framing the Java client writes, assembled by
 * hand), and the tests prove that sluice_decompress returns exactly the
 * original bytes for each codec, across sizes from empty to several
 * megabytes; that corrupt or truncated input and unknown codecs give -1; and
 * that the output cap holds: 10 MB of zeros (a few kilobytes compressed, a
 * decompression bomb) with a 1 MB cap gives -1 for every codec, while an
 * output of exactly the cap is still accepted. */
#include "common/kafka/compress.h"
#include "common/kafka/codec.h"
#include <criterion/criterion.h>
#include <lz4frame.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

/* ---- compressors (test side) --------------------------------------------------- */

static uint8_t *c_gzip(const uint8_t *in, size_t n, size_t *out_len)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
	size_t cap = deflateBound(&z, (uLong)n) + 64;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
	*out_len = cap - z.avail_out;
	deflateEnd(&z);
	return out;
}

static uint8_t *c_zstd(const uint8_t *in, size_t n, size_t *out_len)
{
	size_t cap = ZSTD_compressBound(n);
	uint8_t *out = malloc(cap);
	size_t r = ZSTD_compress(out, cap, in, n, 3);
	cr_assert(!ZSTD_isError(r));
	*out_len = r;
	return out;
}

/* A zstd frame written by the streaming API, without the content size in
 * its header (what a streaming producer emits). */
static uint8_t *c_zstd_stream(const uint8_t *in, size_t n, size_t *out_len)
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

static uint8_t *c_lz4(const uint8_t *in, size_t n, size_t *out_len)
{
	size_t cap = LZ4F_compressFrameBound(n, NULL);
	uint8_t *out = malloc(cap);
	size_t r = LZ4F_compressFrame(out, cap, in, n, NULL);
	cr_assert(!LZ4F_isError(r));
	*out_len = r;
	return out;
}

static uint8_t *c_snappy(const uint8_t *in, size_t n, size_t *out_len)
{
	size_t cap = snappy_max_compressed_length(n);
	uint8_t *out = malloc(cap ? cap : 1);
	cr_assert_eq(snappy_compress((const char *)in, n, (char *)out, &cap), SNAPPY_OK);
	*out_len = cap;
	return out;
}

/* xerial framing: 8-byte magic, int32 version 1, int32 compatible 1, then
 * blocks of [int32 big-endian length][raw snappy], each block compressing at
 * most block bytes of input. */
static uint8_t *c_xerial(const uint8_t *in, size_t n, size_t block, size_t *out_len)
{
	static const uint8_t magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
	size_t blocks = n / block + 1;
	size_t cap = 16 + blocks * (4 + snappy_max_compressed_length(block));
	uint8_t *out = malloc(cap);
	memcpy(out, magic, 8);
	kput32(out + 8, 1);
	kput32(out + 12, 1);
	size_t pos = 16;
	for (size_t off = 0; off < n; off += block) {
		size_t take = n - off < block ? n - off : block;
		size_t clen = cap - pos - 4;
		cr_assert_eq(snappy_compress((const char *)in + off, take, (char *)out + pos + 4, &clen), SNAPPY_OK);
		kput32(out + pos, (uint32_t)clen);
		pos += 4 + clen;
	}
	*out_len = pos;
	return out;
}

/* ---- inputs -------------------------------------------------------------------- */

/* Compressible but not trivial: records-like text with some noise. */
static uint8_t *sample(size_t n)
{
	uint8_t *p = malloc(n ? n : 1);
	uint32_t s = 2463534242u;
	for (size_t i = 0; i < n; i++) {
		s ^= s << 13;
		s ^= s >> 17;
		s ^= s << 5;
		p[i] = (i % 64 < 48) ? (uint8_t)("sluice-record-value-"[i % 20]) : (uint8_t)s;
	}
	return p;
}

static const size_t sizes[] = {0, 1, 100, 4096, 65535, 65536, 65537, 300000, 3u << 20};

typedef uint8_t *(*compress_fn)(const uint8_t *, size_t, size_t *);

static void roundtrip(int codec, compress_fn fn, const char *name)
{
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		size_t n = sizes[i], clen;
		uint8_t *in = sample(n);
		uint8_t *c = fn(in, n, &clen);
		uint8_t *out = NULL;
		int64_t got = sluice_decompress(codec, c, clen, 64u << 20, &out);
		cr_expect_eq(got, (int64_t)n, "%s: %zu bytes in, %lld out", name, n, (long long)got);
		if (got == (int64_t)n && n)
			cr_expect(memcmp(out, in, n) == 0, "%s: %zu bytes differ", name, n);
		free(out);
		free(c);
		free(in);
	}
}

/* ---- round trips ------------------------------------------------------------------ */

/* Proves gzip (RFC 1952, as librdkafka and Java write it) round-trips. */
Test(compress, gzip_roundtrip) { roundtrip(SLUICE_CODEC_GZIP, c_gzip, "gzip"); }

/* Proves zstd round-trips, with and without the content size in the frame. */
Test(compress, zstd_roundtrip)
{
	roundtrip(SLUICE_CODEC_ZSTD, c_zstd, "zstd");
	roundtrip(SLUICE_CODEC_ZSTD, c_zstd_stream, "zstd-stream");
}

/* Proves the LZ4 frame format round-trips. */
Test(compress, lz4_frame_roundtrip) { roundtrip(SLUICE_CODEC_LZ4, c_lz4, "lz4"); }

/* Proves raw snappy (librdkafka's form) round-trips. */
Test(compress, snappy_raw_roundtrip) { roundtrip(SLUICE_CODEC_SNAPPY, c_snappy, "snappy"); }

static uint8_t *c_xerial_32k(const uint8_t *in, size_t n, size_t *out_len) { return c_xerial(in, n, 32768, out_len); }
static uint8_t *c_xerial_1k(const uint8_t *in, size_t n, size_t *out_len) { return c_xerial(in, n, 1000, out_len); }

/* Proves xerial-framed snappy (the Java client's form) round-trips, with one
 * block and with many blocks. */
Test(compress, snappy_xerial_roundtrip)
{
	roundtrip(SLUICE_CODEC_SNAPPY, c_xerial_32k, "xerial-32k");
	roundtrip(SLUICE_CODEC_SNAPPY, c_xerial_1k, "xerial-1k");
}

/* ---- corrupt input ------------------------------------------------------------------ */

static void expect_fail(int codec, const uint8_t *in, size_t n, const char *what)
{
	uint8_t *out = (uint8_t *)"sentinel";
	int64_t got = sluice_decompress(codec, in, n, 16u << 20, &out);
	cr_expect_eq(got, -1, "%s: expected -1, got %lld", what, (long long)got);
	cr_expect_null(out, "%s: out must be NULL on failure", what);
}

/* Proves unknown codec numbers (0 = none, 5-7) are refused. */
Test(compress, unknown_codec)
{
	expect_fail(0, (const uint8_t *)"abc", 3, "codec 0");
	expect_fail(5, (const uint8_t *)"abc", 3, "codec 5");
	expect_fail(7, (const uint8_t *)"abc", 3, "codec 7");
	expect_fail(-1, (const uint8_t *)"abc", 3, "codec -1");
}

/* Proves random garbage is refused by every codec. */
Test(compress, garbage)
{
	uint8_t junk[512];
	for (size_t i = 0; i < sizeof junk; i++)
		junk[i] = (uint8_t)(i * 151 + 7);
	expect_fail(SLUICE_CODEC_GZIP, junk, sizeof junk, "gzip garbage");
	expect_fail(SLUICE_CODEC_ZSTD, junk, sizeof junk, "zstd garbage");
	expect_fail(SLUICE_CODEC_LZ4, junk, sizeof junk, "lz4 garbage");
	expect_fail(SLUICE_CODEC_SNAPPY, junk, sizeof junk, "snappy garbage");
}

/* Proves a gzip or zstd stream cut short anywhere is refused (not returned
 * as a silently shorter payload). */
Test(compress, truncated_gzip_zstd)
{
	size_t n = 20000, clen;
	uint8_t *in = sample(n);
	uint8_t *c = c_gzip(in, n, &clen);
	for (size_t cut = 0; cut < clen; cut += (cut < 40 ? 1 : 97))
		expect_fail(SLUICE_CODEC_GZIP, c, cut, "truncated gzip");
	free(c);
	c = c_zstd(in, n, &clen);
	for (size_t cut = 0; cut < clen; cut += (cut < 40 ? 1 : 97))
		expect_fail(SLUICE_CODEC_ZSTD, c, cut, "truncated zstd");
	free(c);
	free(in);
}

/* Proves an LZ4 frame cut short anywhere (including losing only its end
 * mark) is refused (regression: unlz4 once returned the bytes decoded so far
 * when the input ran out before LZ4F_decompress reported the frame complete). */
Test(compress, truncated_lz4)
{
	size_t n = 20000, clen;
	uint8_t *in = sample(n);
	uint8_t *c = c_lz4(in, n, &clen);
	for (size_t cut = 0; cut < clen; cut += (cut < 40 || cut > clen - 8 ? 1 : 97))
		expect_fail(SLUICE_CODEC_LZ4, c, cut, "truncated lz4");
	free(c);
	free(in);
}

/* Proves truncated snappy is refused, raw and xerial (a block length that
 * runs past the input, a header-only frame cut inside a length). */
Test(compress, truncated_snappy)
{
	size_t n = 20000, clen;
	uint8_t *in = sample(n);
	uint8_t *c = c_snappy(in, n, &clen);
	for (size_t cut = 0; cut < clen; cut += (cut < 40 ? 1 : 97))
		expect_fail(SLUICE_CODEC_SNAPPY, c, cut, "truncated snappy");
	free(c);
	c = c_xerial(in, n, 4096, &clen);
	for (size_t cut = 17; cut < clen; cut += (cut < 60 ? 1 : 97)) {
		/* The xerial framing has no end mark or total length: a cut exactly
		 * between two blocks is a shorter valid stream. Skip those cuts. */
		bool boundary = false;
		for (size_t pos = 16; pos < clen; pos += 4 + kbe32(c + pos))
			boundary |= pos == cut;
		if (!boundary)
			expect_fail(SLUICE_CODEC_SNAPPY, c, cut, "truncated xerial");
	}
	/* a block whose declared length runs past the input */
	kput32(c + 16, 0x7fffffff);
	expect_fail(SLUICE_CODEC_SNAPPY, c, clen, "xerial block length beyond input");
	free(c);
	free(in);
}

/* Proves flipped bytes inside the compressed data are caught (checksums in
 * gzip, and decoder consistency checks elsewhere) or at least never produce
 * output larger than the cap or a crash. gzip must always fail: its CRC-32
 * and length trailer cover the output. */
Test(compress, corrupted_bytes)
{
	size_t n = 50000, clen;
	uint8_t *in = sample(n);
	uint8_t *c = c_gzip(in, n, &clen);
	for (size_t i = 10; i < clen; i += 37) {
		c[i] ^= 0x55;
		uint8_t *out = NULL;
		int64_t got = sluice_decompress(SLUICE_CODEC_GZIP, c, clen, 1u << 20, &out);
		cr_expect(got == -1 || (got == (int64_t)n && memcmp(out, in, n) == 0),
			  "corrupted gzip at %zu decoded to wrong data (%lld bytes)", i, (long long)got);
		free(out);
		c[i] ^= 0x55;
	}
	free(c);
	compress_fn fns[] = {c_zstd, c_lz4, c_snappy};
	int codecs[] = {SLUICE_CODEC_ZSTD, SLUICE_CODEC_LZ4, SLUICE_CODEC_SNAPPY};
	for (int k = 0; k < 3; k++) {
		c = fns[k](in, n, &clen);
		for (size_t i = 0; i < clen; i += 41) {
			c[i] ^= 0xa5;
			uint8_t *out = NULL;
			int64_t got = sluice_decompress(codecs[k], c, clen, 1u << 20, &out);
			cr_expect(got >= -1 && got <= (int64_t)(1u << 20));
			free(out);
			c[i] ^= 0xa5;
		}
		free(c);
	}
	free(in);
}

/* ---- output cap -------------------------------------------------------------------- */

/* Proves the decompression-bomb defence: 10 MB of zeros, compressed by each
 * codec to a few kilobytes, is refused with a 1 MB cap. */
Test(compress, bomb_capped)
{
	size_t n = 10u << 20, clen;
	uint8_t *zeros = calloc(1, n);
	struct { int codec; compress_fn fn; const char *name; } cs[] = {
		{SLUICE_CODEC_GZIP, c_gzip, "gzip"}, {SLUICE_CODEC_ZSTD, c_zstd, "zstd"},
		{SLUICE_CODEC_ZSTD, c_zstd_stream, "zstd-stream"}, {SLUICE_CODEC_LZ4, c_lz4, "lz4"},
		{SLUICE_CODEC_SNAPPY, c_snappy, "snappy"}, {SLUICE_CODEC_SNAPPY, c_xerial_32k, "xerial"},
	};
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
		uint8_t *c = cs[i].fn(zeros, n, &clen);
		cr_expect_lt(clen, n / 10, "%s did not compress", cs[i].name);
		uint8_t *out = (uint8_t *)"sentinel";
		int64_t got = sluice_decompress(cs[i].codec, c, clen, 1u << 20, &out);
		cr_expect_eq(got, -1, "%s bomb: got %lld", cs[i].name, (long long)got);
		cr_expect_null(out, "%s bomb: out must be NULL", cs[i].name);
		/* and with room for it, the same input decodes fully */
		got = sluice_decompress(cs[i].codec, c, clen, 16u << 20, &out);
		cr_expect_eq(got, (int64_t)n, "%s with a 16 MB cap", cs[i].name);
		free(out);
		free(c);
	}
	free(zeros);
}

/* Proves the cap is inclusive: an output of exactly out_max bytes is
 * accepted and one byte less of cap refuses it. */
Test(compress, cap_exact)
{
	size_t n = 200000, clen;
	uint8_t *in = sample(n);
	struct { int codec; compress_fn fn; const char *name; } cs[] = {
		{SLUICE_CODEC_GZIP, c_gzip, "gzip"}, {SLUICE_CODEC_ZSTD, c_zstd, "zstd"},
		{SLUICE_CODEC_ZSTD, c_zstd_stream, "zstd-stream"}, {SLUICE_CODEC_LZ4, c_lz4, "lz4"},
		{SLUICE_CODEC_SNAPPY, c_snappy, "snappy"}, {SLUICE_CODEC_SNAPPY, c_xerial_32k, "xerial"},
	};
	for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) {
		uint8_t *c = cs[i].fn(in, n, &clen);
		uint8_t *out = NULL;
		int64_t got = sluice_decompress(cs[i].codec, c, clen, n, &out);
		cr_expect_eq(got, (int64_t)n, "%s with cap == size: got %lld", cs[i].name, (long long)got);
		free(out);
		out = NULL;
		got = sluice_decompress(cs[i].codec, c, clen, n - 1, &out);
		cr_expect_eq(got, -1, "%s with cap == size-1: got %lld", cs[i].name, (long long)got);
		free(out);
		free(c);
	}
	free(in);
}
