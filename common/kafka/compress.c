/* Record-batch decompression and compression (see compress.h). Snappy
 * arrives either raw (librdkafka) or in the xerial framing the Java client
 * writes, and is written xerial-framed; LZ4 is the LZ4 frame format. Every
 * codec decodes into the inflater's growing buffer; the bomb cap is enforced
 * as output is produced, never after. */
#include "common/kafka/compress.h"
#include "common/kafka/codec.h"
#include <assert.h>
#include <limits.h>
#include <lz4frame.h>
#include <snappy-c.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#define INFLATE_FIRST_BYTES (64u << 10) /* first output buffer when the size is not announced */

/* Make z->buf hold at least need bytes (need <= max), doubling. */
static bool ensure(struct sluice_inflater *z, size_t need, size_t max)
{
	assert(need <= max);
	if (need <= z->cap)
		return true;
	size_t c = z->cap ? z->cap : INFLATE_FIRST_BYTES;
	while (c < need)
		c = c > SIZE_MAX / 2 ? SIZE_MAX : c * 2;
	if (c > max)
		c = max;
	uint8_t *n = realloc(z->buf, c);
	if (!n)
		return false;
	z->buf = n;
	z->cap = c;
	return true;
}

/* Output space for a streaming decoder that has written len bytes: grows the
 * buffer, or at the cap points at a one-byte probe, so that a stream that
 * ends exactly at the cap is accepted and one that would go on is caught
 * (the caller checks whether the probe was written). Returns false when the
 * buffer cannot grow. */
static bool out_space(struct sluice_inflater *z, size_t len, size_t max, uint8_t *probe, uint8_t **dst,
		      size_t *room)
{
	if (len == z->cap && len < max && !ensure(z, len + 1, max))
		return false;
	size_t cap = z->cap < max ? z->cap : max; /* the buffer may be larger than this call's cap */
	if (len < cap) {
		*dst = z->buf + len;
		*room = cap - len;
	} else {
		*dst = probe;
		*room = 1;
	}
	return true;
}

static int64_t inflate_gzip(struct sluice_inflater *z, const uint8_t *in, size_t in_len, size_t max)
{
	z_stream *s = z->zlib;
	if (!s) {
		s = calloc(1, sizeof *s);
		if (!s || inflateInit2(s, 15 + 32) != Z_OK) {
			free(s);
			return SLUICE_INFLATE_CORRUPT;
		}
		z->zlib = s;
	} else if (inflateReset(s) != Z_OK) {
		return SLUICE_INFLATE_CORRUPT;
	}
	if (in_len > UINT_MAX)
		return SLUICE_INFLATE_CORRUPT;
	s->next_in = (Bytef *)(uintptr_t)in;
	s->avail_in = (uInt)in_len;
	size_t len = 0;
	uint8_t probe;
	for (;;) {
		uint8_t *dst;
		size_t room;
		if (!out_space(z, len, max, &probe, &dst, &room))
			return SLUICE_INFLATE_CORRUPT;
		s->next_out = dst;
		s->avail_out = room > UINT_MAX ? UINT_MAX : (uInt)room;
		uInt before = s->avail_out, in_before = s->avail_in;
		int rc = inflate(s, Z_NO_FLUSH);
		size_t wrote = before - s->avail_out;
		if (dst == &probe && wrote)
			return SLUICE_INFLATE_TOO_LARGE;
		len += wrote;
		if (rc == Z_STREAM_END)
			return (int64_t)len;
		if (rc != Z_OK && rc != Z_BUF_ERROR)
			return SLUICE_INFLATE_CORRUPT;
		if (s->avail_in == 0 && s->avail_out != 0)
			return SLUICE_INFLATE_CORRUPT; /* truncated stream */
		if (dst == &probe && s->avail_in == in_before)
			return SLUICE_INFLATE_TOO_LARGE; /* it needs room beyond the cap */
	}
}

static int64_t unsnappy_block(struct sluice_inflater *z, size_t len, const uint8_t *in, size_t in_len, size_t max)
{
	size_t n;
	if (snappy_uncompressed_length((const char *)in, in_len, &n) != SNAPPY_OK)
		return SLUICE_INFLATE_CORRUPT;
	if (n > max - len)
		return SLUICE_INFLATE_TOO_LARGE;
	if (!ensure(z, len + n ? len + n : 1, max ? max : 1))
		return SLUICE_INFLATE_CORRUPT;
	if (snappy_uncompress((const char *)in, in_len, (char *)z->buf + len, &n) != SNAPPY_OK)
		return SLUICE_INFLATE_CORRUPT;
	return (int64_t)(len + n);
}

static const uint8_t xerial_magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};

static int64_t inflate_snappy(struct sluice_inflater *z, const uint8_t *in, size_t in_len, size_t max)
{
	if (in_len < 16 || memcmp(in, xerial_magic, 8) != 0)
		return unsnappy_block(z, 0, in, in_len, max);
	/* xerial: 16-byte header, then blocks of [int32 length][snappy data] */
	int64_t len = 0;
	size_t pos = 16;
	while (pos < in_len) {
		if (in_len - pos < 4)
			return SLUICE_INFLATE_CORRUPT;
		uint32_t blen = kbe32(in + pos);
		pos += 4;
		if (blen > in_len - pos)
			return SLUICE_INFLATE_CORRUPT;
		len = unsnappy_block(z, (size_t)len, in + pos, blen, max);
		if (len < 0)
			return len;
		pos += blen;
	}
	return len;
}

static int64_t inflate_lz4(struct sluice_inflater *z, const uint8_t *in, size_t in_len, size_t max)
{
	LZ4F_dctx *d = z->lz4;
	if (!d) {
		if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)))
			return SLUICE_INFLATE_CORRUPT;
		z->lz4 = d;
	} else {
		LZ4F_resetDecompressionContext(d);
	}
	size_t len = 0, pos = 0, hint = 1;
	uint8_t probe;
	while (hint != 0) {
		if (pos == in_len)
			return SLUICE_INFLATE_CORRUPT; /* the frame ended early: truncated */
		uint8_t *dst;
		size_t room, src = in_len - pos;
		if (!out_space(z, len, max, &probe, &dst, &room))
			return SLUICE_INFLATE_CORRUPT;
		hint = LZ4F_decompress(d, dst, &room, in + pos, &src, NULL);
		if (LZ4F_isError(hint))
			return SLUICE_INFLATE_CORRUPT;
		if (dst == &probe && room)
			return SLUICE_INFLATE_TOO_LARGE;
		if (src == 0 && room == 0)
			return dst == &probe ? SLUICE_INFLATE_TOO_LARGE : SLUICE_INFLATE_CORRUPT;
		len += room;
		pos += src;
	}
	return (int64_t)len;
}

/* Every frame of the payload is decoded (zstd streams may be concatenated
 * frames, as the Java client's reader accepts). */
static int64_t inflate_zstd(struct sluice_inflater *z, const uint8_t *in, size_t in_len, size_t max)
{
	ZSTD_DCtx *d = z->zstd;
	if (!d) {
		d = ZSTD_createDCtx();
		if (!d)
			return SLUICE_INFLATE_CORRUPT;
		z->zstd = d;
	} else {
		ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
	}
	/* A frame that announces its size (one-shot compressors write it) is
	 * decoded in one call, faster than streaming; if more follows (more
	 * frames than room), the stream below starts over. */
	unsigned long long announced = ZSTD_getFrameContentSize(in, in_len);
	if (announced != ZSTD_CONTENTSIZE_UNKNOWN && announced != ZSTD_CONTENTSIZE_ERROR && announced <= max) {
		if (!ensure(z, announced ? (size_t)announced : 1, max ? max : 1))
			return SLUICE_INFLATE_CORRUPT;
		size_t r = ZSTD_decompressDCtx(d, z->buf, z->cap < max ? z->cap : max, in, in_len);
		if (!ZSTD_isError(r))
			return (int64_t)r;
		if (ZSTD_getErrorCode(r) != ZSTD_error_dstSize_tooSmall)
			return SLUICE_INFLATE_CORRUPT;
		ZSTD_DCtx_reset(d, ZSTD_reset_session_only);
	}
	ZSTD_inBuffer ib = {in, in_len, 0};
	size_t len = 0, rc = 1;
	uint8_t probe;
	while (rc != 0 || ib.pos < ib.size) {
		uint8_t *dst;
		size_t room;
		if (!out_space(z, len, max, &probe, &dst, &room))
			return SLUICE_INFLATE_CORRUPT;
		ZSTD_outBuffer ob = {dst, room, 0};
		size_t in_before = ib.pos;
		rc = ZSTD_decompressStream(d, &ob, &ib);
		if (ZSTD_isError(rc))
			return SLUICE_INFLATE_CORRUPT;
		if (dst == &probe && ob.pos)
			return SLUICE_INFLATE_TOO_LARGE;
		len += ob.pos;
		if (rc != 0 && ib.pos == ib.size && ob.pos < ob.size)
			return SLUICE_INFLATE_CORRUPT; /* truncated */
		if (ob.pos == 0 && ib.pos == in_before && dst == &probe)
			return SLUICE_INFLATE_TOO_LARGE;
	}
	return (int64_t)len;
}

int64_t sluice_inflate(struct sluice_inflater *z, int codec, const uint8_t *in, size_t in_len, size_t out_max)
{
	switch (codec) {
	case SLUICE_CODEC_GZIP: return inflate_gzip(z, in, in_len, out_max);
	case SLUICE_CODEC_SNAPPY: return inflate_snappy(z, in, in_len, out_max);
	case SLUICE_CODEC_LZ4: return inflate_lz4(z, in, in_len, out_max);
	case SLUICE_CODEC_ZSTD: return inflate_zstd(z, in, in_len, out_max);
	default: return SLUICE_INFLATE_CORRUPT;
	}
}

void sluice_inflater_trim(struct sluice_inflater *z)
{
	size_t keep = z->keep_bytes ? z->keep_bytes : SLUICE_INFLATER_KEEP_BYTES_DEFAULT;
	if (z->cap > keep) {
		free(z->buf);
		z->buf = NULL;
		z->cap = 0;
	}
	/* A streamed zstd frame makes the context allocate the window its header
	 * declares (up to 128 MiB, zstd's default limit, which Kafka's reader
	 * shares); the context would keep it for the next batch. */
	if (z->zstd && ZSTD_sizeof_DCtx(z->zstd) > keep) {
		ZSTD_freeDCtx(z->zstd);
		z->zstd = NULL;
	}
}

void sluice_inflater_free(struct sluice_inflater *z)
{
	free(z->buf);
	if (z->zstd)
		ZSTD_freeDCtx(z->zstd);
	if (z->lz4)
		LZ4F_freeDecompressionContext(z->lz4);
	if (z->zlib) {
		inflateEnd(z->zlib);
		free(z->zlib);
	}
	memset(z, 0, sizeof *z);
}

/* The one-shot form: a private inflater whose buffer is handed over. */
int64_t sluice_decompress(int codec, const uint8_t *in, size_t in_len, size_t out_max, uint8_t **out)
{
	struct sluice_inflater z;
	memset(&z, 0, sizeof z);
	*out = NULL;
	int64_t n = sluice_inflate(&z, codec, in, in_len, out_max);
	if (n >= 0) {
		*out = z.buf ? z.buf : malloc(1);
		z.buf = NULL;
		if (!*out)
			n = -1;
	}
	sluice_inflater_free(&z);
	return n < 0 ? -1 : n;
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
