/* Decompression of record-batch payloads (gzip, snappy, lz4, zstd), for the
 * few places that must look inside a compressed batch: ListOffsets by
 * timestamp today, compaction and deep validation later. Output is capped:
 * a batch that inflates past out_max is reported as too large, never
 * allocated for. The broker stores and serves batches as produced. */
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

#endif
