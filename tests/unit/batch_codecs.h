/* Test helper: compress a records section the way clients do, with the codec
 * libraries themselves (zlib gzip, raw snappy as librdkafka writes it, the
 * xerial snappy framing of the Java client, the LZ4 frame format, zstd), so
 * that tests of the batch validator and the fuzz target's seeds get real
 * compressed batches without going through the broker's own code. Each
 * returns a malloc'ed buffer (NULL on failure) and its size in *out_len. */
#ifndef SLUICE_TEST_BATCH_CODECS_H
#define SLUICE_TEST_BATCH_CODECS_H
#include "common/kafka/codec.h"
#include <lz4frame.h>
#include <snappy-c.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

enum { TB_GZIP = 1, TB_SNAPPY = 2, TB_LZ4 = 3, TB_ZSTD = 4, TB_SNAPPY_XERIAL = 102 };

static inline uint8_t *tb_gzip(const uint8_t *in, size_t n, size_t *out_len)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return NULL;
	size_t cap = deflateBound(&z, (uLong)n) + 64;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	int rc = out ? deflate(&z, Z_FINISH) : Z_MEM_ERROR;
	*out_len = cap - z.avail_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(out);
		return NULL;
	}
	return out;
}

static inline uint8_t *tb_snappy(const uint8_t *in, size_t n, size_t *out_len)
{
	size_t cap = snappy_max_compressed_length(n);
	uint8_t *out = malloc(cap ? cap : 1);
	if (out && snappy_compress((const char *)in, n, (char *)out, &cap) == SNAPPY_OK) {
		*out_len = cap;
		return out;
	}
	free(out);
	return NULL;
}

/* xerial: 8-byte magic, int32 version, int32 compatible version, then
 * blocks of [int32 length][raw snappy] of at most block input bytes. */
static inline uint8_t *tb_xerial(const uint8_t *in, size_t n, size_t block, size_t *out_len)
{
	static const uint8_t magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
	size_t cap = 16 + (n / block + 1) * (4 + snappy_max_compressed_length(block));
	uint8_t *out = malloc(cap);
	if (!out)
		return NULL;
	memcpy(out, magic, 8);
	kput32(out + 8, 1);
	kput32(out + 12, 1);
	size_t pos = 16;
	for (size_t off = 0; off < n; off += block) {
		size_t take = n - off < block ? n - off : block;
		size_t clen = cap - pos - 4;
		if (snappy_compress((const char *)in + off, take, (char *)out + pos + 4, &clen) != SNAPPY_OK) {
			free(out);
			return NULL;
		}
		kput32(out + pos, (uint32_t)clen);
		pos += 4 + clen;
	}
	*out_len = pos;
	return out;
}

static inline uint8_t *tb_lz4(const uint8_t *in, size_t n, size_t *out_len)
{
	size_t cap = LZ4F_compressFrameBound(n, NULL);
	uint8_t *out = malloc(cap);
	size_t r = out ? LZ4F_compressFrame(out, cap, in, n, NULL) : 0;
	if (!out || LZ4F_isError(r)) {
		free(out);
		return NULL;
	}
	*out_len = r;
	return out;
}

static inline uint8_t *tb_zstd(const uint8_t *in, size_t n, size_t *out_len)
{
	size_t cap = ZSTD_compressBound(n);
	uint8_t *out = malloc(cap);
	size_t r = out ? ZSTD_compress(out, cap, in, n, 3) : 0;
	if (!out || ZSTD_isError(r)) {
		free(out);
		return NULL;
	}
	*out_len = r;
	return out;
}

/* One of the above by codec (TB_*); NULL for none or failure. */
static inline uint8_t *tb_compress(int codec, const uint8_t *in, size_t n, size_t *out_len)
{
	switch (codec) {
	case TB_GZIP: return tb_gzip(in, n, out_len);
	case TB_SNAPPY: return tb_snappy(in, n, out_len);
	case TB_SNAPPY_XERIAL: return tb_xerial(in, n, 32 << 10, out_len);
	case TB_LZ4: return tb_lz4(in, n, out_len);
	case TB_ZSTD: return tb_zstd(in, n, out_len);
	default: return NULL;
	}
}

/* The codec number a batch's attributes carry for a TB_* value. */
static inline int tb_attr_codec(int codec) { return codec == TB_SNAPPY_XERIAL ? TB_SNAPPY : codec; }

#endif
