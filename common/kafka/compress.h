/* Decompression of record-batch payloads (gzip, snappy, lz4, zstd), for the
 * few places that must look inside a compressed batch: ListOffsets by
 * timestamp, compaction and deep validation. Output is capped: a batch that
 * inflates past out_max is reported as too large, never allocated for. The
 * broker stores and serves batches as produced; compaction rebuilds the
 * batches it shrinks with their own codec (sluice_compress), as Kafka's
 * cleaner does. */
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

/* Compress in[0..in_len) with codec into out (out_cap bytes), in the form
 * Kafka's Java client writes: a gzip stream, xerial-framed snappy (32 KiB
 * blocks), an LZ4 frame of independent 64 KiB blocks, a zstd frame.
 * sluice_compress_bound gives an out_cap that always suffices (0: unknown
 * codec). Returns the compressed size, or -1 (unknown codec, a library
 * error, out_cap too small). */
size_t sluice_compress_bound(int codec, size_t in_len);
int64_t sluice_compress(int codec, const uint8_t *in, size_t in_len, uint8_t *out, size_t out_cap);

#endif
