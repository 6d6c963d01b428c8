/* Decompression of record-batch payloads (gzip, snappy, lz4, zstd), for the
 * few places that must look inside a compressed batch: the validation of
 * every produced batch, ListOffsets by timestamp and compaction. Output is
 * capped: a batch that inflates past out_max is reported as too large, never
 * allocated for. The broker stores and serves batches as produced;
 * compaction rebuilds the batches it shrinks with their own codec
 * (sluice_compress), as Kafka's cleaner does. */
#ifndef SLUICE_KAFKA_COMPRESS_H
#define SLUICE_KAFKA_COMPRESS_H
#include <stddef.h>
#include <stdint.h>

enum { SLUICE_CODEC_NONE = 0, SLUICE_CODEC_GZIP = 1, SLUICE_CODEC_SNAPPY = 2, SLUICE_CODEC_LZ4 = 3,
       SLUICE_CODEC_ZSTD = 4 };

/* Decompress in[0..in_len) with codec into a buffer allocated here
 * (caller frees). Returns the decompressed size, or -1 on corrupt input,
 * unknown codec or output beyond out_max. */
int64_t sluice_decompress(int codec, const uint8_t *in, size_t in_len, size_t out_max, uint8_t **out);

/* A reusable decompressor for one thread: the codec contexts and the output
 * buffer live from one call to the next, so that the produce path, which
 * decompresses every compressed batch to validate it, allocates nothing once
 * the buffer has grown to the batches it sees. An output buffer that had to
 * grow past keep_bytes (a rare, huge batch) is released after that call
 * instead of being kept. Zero-initialise, set keep_bytes, and release with
 * sluice_inflater_free. */
#define SLUICE_INFLATER_KEEP_BYTES_DEFAULT (8u << 20)
struct sluice_inflater {
	uint8_t *buf;       /* output of the last call, valid until the next */
	size_t cap;
	size_t keep_bytes;  /* 0: SLUICE_INFLATER_KEEP_BYTES_DEFAULT */
	void *zstd;         /* ZSTD_DCtx, created on first use */
	void *lz4;          /* LZ4F_dctx */
	void *zlib;         /* z_stream */
};

enum { SLUICE_INFLATE_CORRUPT = -1, SLUICE_INFLATE_TOO_LARGE = -2 };

/* Decompress in[0..in_len) with codec into z->buf. Returns the decompressed
 * size, SLUICE_INFLATE_TOO_LARGE when the output would pass out_max (the
 * decompression-bomb cap: nothing beyond it is produced), or
 * SLUICE_INFLATE_CORRUPT for corrupt or truncated input, an unknown codec or
 * an allocation failure. */
int64_t sluice_inflate(struct sluice_inflater *z, int codec, const uint8_t *in, size_t in_len, size_t out_max);
/* Release z->buf, and a zstd context holding a large window, when larger
 * than the keep limit (call after use). */
void sluice_inflater_trim(struct sluice_inflater *z);
void sluice_inflater_free(struct sluice_inflater *z);

/* Compress in[0..in_len) with codec into out (out_cap bytes), in the form
 * Kafka's Java client writes: a gzip stream, xerial-framed snappy (32 KiB
 * blocks), an LZ4 frame of independent 64 KiB blocks, a zstd frame.
 * sluice_compress_bound gives an out_cap that always suffices (0: unknown
 * codec). Returns the compressed size, or -1 (unknown codec, a library
 * error, out_cap too small). */
size_t sluice_compress_bound(int codec, size_t in_len);
int64_t sluice_compress(int codec, const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap);

#endif
