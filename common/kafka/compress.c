/* Record-batch decompression and compression (see compress.h). Snappy
 * arrives either raw (librdkafka) or in the xerial framing the Java client
 * writes, and is written xerial-framed; LZ4 is the LZ4 frame format. */
#include "common/kafka/compress.h"
#include "common/kafka/codec.h"
#include <lz4frame.h>
#include <snappy-c.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

static uint8_t *grow(uint8_t *buf, size_t *cap, size_t need, size_t max)
{
	if (need <= *cap)
		return buf;
	size_t c = *cap ? *cap : 4096;
	while (c < need)
		c *= 2;
	if (c > max)
		c = max;
	if (c < need)
		return NULL;
	uint8_t *n = realloc(buf, c);
	if (n)
		*cap = c;
	return n;
}

static int64_t gunzip(const uint8_t *in, size_t in_len, size_t max, uint8_t **out)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	if (inflateInit2(&z, 15 + 32) != Z_OK)
		return -1;
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)in_len;
	int rc = Z_OK;
	while (rc != Z_STREAM_END) {
		uint8_t *n = grow(buf, &cap, len + 65536 > max ? max : len + 65536, max);
		if (!n || cap == len) {
			rc = Z_BUF_ERROR;
			break;
		}
		buf = n;
		z.next_out = buf + len;
		z.avail_out = (uInt)(cap - len);
		rc = inflate(&z, Z_NO_FLUSH);
		len = cap - z.avail_out;
		if (rc != Z_OK && rc != Z_STREAM_END)
			break;
		if (rc == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
			rc = Z_DATA_ERROR; /* truncated stream */
			break;
		}
	}
	inflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(buf);
		return -1;
	}
	*out = buf;
	return (int64_t)len;
}

static int64_t unsnappy_raw(const uint8_t *in, size_t in_len, size_t max, uint8_t **out)
{
	size_t n;
	if (snappy_uncompressed_length((const char *)in, in_len, &n) != SNAPPY_OK || n > max)
		return -1;
	uint8_t *buf = malloc(n ? n : 1);
	if (!buf || snappy_uncompress((const char *)in, in_len, (char *)buf, &n) != SNAPPY_OK) {
		free(buf);
		return -1;
	}
	*out = buf;
	return (int64_t)n;
}

static const uint8_t xerial_magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

static int64_t unsnappy(const uint8_t *in, size_t in_len, size_t max, uint8_t **out)
{
	if (in_len < 16 || memcmp(in, xerial_magic, 8) != 0)
		return unsnappy_raw(in, in_len, max, out);
	/* xerial: 16-byte header, then blocks of [int32 length][snappy data] */
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0, pos = 16;
	while (pos < in_len) {
		if (in_len - pos < 4)
			goto bad;
		uint32_t blen = kbe32(in + pos);
		pos += 4;
		if (blen > in_len - pos)
			goto bad;
		size_t n;
		if (snappy_uncompressed_length((const char *)in + pos, blen, &n) != SNAPPY_OK || len + n > max)
			goto bad;
		uint8_t *nb = grow(buf, &cap, len + n, max);
		if (!nb)
			goto bad;
		buf = nb;
		if (snappy_uncompress((const char *)in + pos, blen, (char *)buf + len, &n) != SNAPPY_OK)
			goto bad;
		len += n;
		pos += blen;
	}
	*out = buf;
	return (int64_t)len;
bad:
	free(buf);
	return -1;
}

static int64_t unlz4(const uint8_t *in, size_t in_len, size_t max, uint8_t **out)
{
	LZ4F_dctx *d;
	if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)))
		return -1;
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0, pos = 0, hint = 1;
	while (pos < in_len && hint != 0) {
		uint8_t *nb = grow(buf, &cap, len + 65536 > max ? max : len + 65536, max);
		if (!nb || cap == len)
			goto bad;
		buf = nb;
		size_t dst = cap - len, src = in_len - pos;
		hint = LZ4F_decompress(d, buf + len, &dst, in + pos, &src, NULL);
		if (LZ4F_isError(hint))
			goto bad;
		len += dst;
		pos += src;
		if (src == 0 && dst == 0)
			goto bad;
	}
	if (hint != 0)
		goto bad; /* the frame ended early: truncated */
	LZ4F_freeDecompressionContext(d);
	*out = buf;
	return (int64_t)len;
bad:
	LZ4F_freeDecompressionContext(d);
	free(buf);
	return -1;
}

static int64_t unzstd(const uint8_t *in, size_t in_len, size_t max, uint8_t **out)
{
	ZSTD_DCtx *d = ZSTD_createDCtx();
	if (!d)
		return -1;
	uint8_t *buf = NULL;
	size_t cap = 0, len = 0;
	ZSTD_inBuffer ib = {in, in_len, 0};
	size_t rc = 1;
	while (rc != 0) {
		uint8_t *nb = grow(buf, &cap, len + 65536 > max ? max : len + 65536, max);
		if (!nb || cap == len)
			goto bad;
		buf = nb;
		ZSTD_outBuffer ob = {buf + len, cap - len, 0};
		rc = ZSTD_decompressStream(d, &ob, &ib);
		if (ZSTD_isError(rc))
			goto bad;
		len += ob.pos;
		if (rc != 0 && ib.pos == ib.size && ob.pos < ob.size)
			goto bad; /* truncated */
	}
	ZSTD_freeDCtx(d);
	*out = buf;
	return (int64_t)len;
bad:
	ZSTD_freeDCtx(d);
	free(buf);
	return -1;
}

int64_t sluice_decompress(int codec, const uint8_t *in, size_t in_len, size_t out_max, uint8_t **out)
{
	*out = NULL;
	switch (codec) {
	case SLUICE_CODEC_GZIP: return gunzip(in, in_len, out_max, out);
	case SLUICE_CODEC_SNAPPY: return unsnappy(in, in_len, out_max, out);
	case SLUICE_CODEC_LZ4: return unlz4(in, in_len, out_max, out);
	case SLUICE_CODEC_ZSTD: return unzstd(in, in_len, out_max, out);
	default: return -1;
	}
}

#define XERIAL_BLOCK_BYTES (32u << 10) /* the Java client's SnappyOutputStream block */
#define GZIP_LEVEL 6                   /* zlib's default, as java.util.zip writes */
#define ZSTD_LEVEL 3                   /* zstd's default, as the Java client writes */

size_t sluice_compress_bound(int codec, size_t in_len)
{
	switch (codec) {
	case SLUICE_CODEC_GZIP: return (size_t)compressBound((uLong)in_len) + 32; /* + gzip header and trailer */
	case SLUICE_CODEC_SNAPPY: {
		size_t blocks = in_len / XERIAL_BLOCK_BYTES + 1;
		return 16 + blocks * (4 + snappy_max_compressed_length(XERIAL_BLOCK_BYTES));
	}
	case SLUICE_CODEC_LZ4: {
		LZ4F_preferences_t pr = {.frameInfo = {.blockSizeID = LZ4F_max64KB, .blockMode = LZ4F_blockIndependent}};
		return LZ4F_compressFrameBound(in_len, &pr);
	}
	case SLUICE_CODEC_ZSTD: return ZSTD_compressBound(in_len);
	default: return 0;
	}
}

static int64_t gzip(const uint8_t *in, size_t in_len, uint8_t *out, size_t cap)
{
	z_stream z;
	memset(&z, 0, sizeof z);
	if (deflateInit2(&z, GZIP_LEVEL, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	z.next_in = (Bytef *)(uintptr_t)in;
	z.avail_in = (uInt)in_len;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	int rc = deflate(&z, Z_FINISH);
	int64_t n = rc == Z_STREAM_END ? (int64_t)(cap - z.avail_out) : -1;
	deflateEnd(&z);
	return n;
}

static int64_t snappy_xerial(const uint8_t *in, size_t in_len, uint8_t *out, size_t cap)
{
	if (cap < 16)
		return -1;
	memcpy(out, xerial_magic, 8);
	kput32(out + 8, 1);  /* version */
	kput32(out + 12, 1); /* minimum compatible version */
	size_t pos = 16;
	for (size_t off = 0; off < in_len; off += XERIAL_BLOCK_BYTES) {
		size_t take = in_len - off < XERIAL_BLOCK_BYTES ? in_len - off : XERIAL_BLOCK_BYTES;
		if (cap - pos < 4 + snappy_max_compressed_length(take))
			return -1;
		size_t n = cap - pos - 4;
		if (snappy_compress((const char *)in + off, take, (char *)out + pos + 4, &n) != SNAPPY_OK)
			return -1;
		kput32(out + pos, (uint32_t)n);
		pos += 4 + n;
	}
	return (int64_t)pos;
}

int64_t sluice_compress(int codec, const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap)
{
	switch (codec) {
	case SLUICE_CODEC_GZIP: return gzip(in, in_len, out, out_cap);
	case SLUICE_CODEC_SNAPPY: return snappy_xerial(in, in_len, out, out_cap);
	case SLUICE_CODEC_LZ4: {
		LZ4F_preferences_t pr = {.frameInfo = {.blockSizeID = LZ4F_max64KB, .blockMode = LZ4F_blockIndependent}};
		size_t n = LZ4F_compressFrame(out, out_cap, in, in_len, &pr);
		return LZ4F_isError(n) ? -1 : (int64_t)n;
	}
	case SLUICE_CODEC_ZSTD: {
		size_t n = ZSTD_compress(out, out_cap, in, in_len, ZSTD_LEVEL);
		return ZSTD_isError(n) ? -1 : (int64_t)n;
	}
	default: return -1;
	}
}
