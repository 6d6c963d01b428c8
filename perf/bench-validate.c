/* Micro-benchmark of the produce-path batch validation (issue 10): what it
 * costs a network core to decode every record of every produced batch, for
 * realistic batches. For each codec (none, lz4, zstd, snappy, gzip), record
 * size (100 B and 1 KiB values with 16-byte keys and one header) and batch
 * size (16 KiB, the Java client's batch.size, and 1 MiB, librdkafka's
 * message.max.bytes), it times on one thread, over the same batch again and
 * again: "header", the checks Produce made before (header parse and the
 * CRC-32C over the batch), and "full", those plus sluice_batch_verify
 * (decompression into a reused inflater, then every record decoded). It
 * prints wire MB/s (produced bytes, compressed), records/s and the time per
 * batch for both, and their ratio. Values are JSON-like text with a random
 * part, so the codecs compress them 2-4x, as event payloads do. The figures
 * are the upper bound of a core's produce throughput with and without
 * validation; the broker does other work per batch (copy, storage). */
#include "batch_build.h"
#include "batch_codecs.h"
#include "common/kafka/batch.h"
#include "common/kafka/compress.h"
#include <stdio.h>
#include <time.h>

#define BENCH_ROUNDS 9          /* rounds per figure; the fastest is kept */
#define BENCH_ROUND_SECONDS 0.03
#define BENCH_INFLATE_BYTES_MAX (64u << 20) /* the broker's cap */

/* Thread CPU time: on a shared machine, time the thread was preempted is
 * not the validator's; the fastest of several rounds then drops most of
 * the remaining interference (caches shared with other tenants). */
static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A batch of records with value_bytes values filling about batch_bytes
 * before compression; *nrec the record count. */
static uint8_t *make_batch(int codec, size_t value_bytes, size_t batch_bytes, int32_t *nrec, size_t *len)
{
	static uint32_t seed = 2463534242u;
	size_t per = value_bytes + 16 + 24;
	int32_t n = (int32_t)(batch_bytes / per);
	if (n < 1)
		n = 1;
	struct kwr w;
	kwr_init(&w, batch_bytes + 1024, 1u << 30);
	char key[17], *value = malloc(value_bytes);
	for (int32_t i = 0; i < n; i++) {
		snprintf(key, sizeof key, "user-%011d", i * 7919 % 1000003);
		for (size_t k = 0; k < value_bytes; k++) {
			seed ^= seed << 13;
			seed ^= seed >> 17;
			seed ^= seed << 5;
			value[k] = k % 32 < 20 ? "{\"event\":\"click\",\"page\":"[k % 24] : (char)('a' + seed % 26);
		}
		struct kwr body;
		kwr_init(&body, per + 64, 1u << 30);
		kwr_i8(&body, 0);
		kwr_varlong(&body, i);
		kwr_varint(&body, i);
		kwr_varint(&body, 16);
		kwr_raw(&body, key, 16);
		kwr_varint(&body, (int32_t)value_bytes);
		kwr_raw(&body, value, value_bytes);
		kwr_varint(&body, 1);
		kwr_varint(&body, 5);
		kwr_raw(&body, "trace", 5);
		kwr_varint(&body, 8);
		kwr_raw(&body, "abcdefgh", 8);
		kwr_varint(&w, (int32_t)body.len);
		kwr_raw(&w, body.buf, body.len);
		kwr_free(&body);
	}
	free(value);
	size_t n_bytes = w.len;
	uint8_t *z = codec ? tb_compress(codec, w.buf, w.len, &n_bytes) : NULL;
	struct tb_hdr h = tb_hdr_default(n, 1700000000000LL);
	h.attributes = (int16_t)tb_attr_codec(codec);
	uint8_t *b = tb_wrap(&h, z ? z : w.buf, n_bytes, len);
	free(z);
	kwr_free(&w);
	*nrec = n;
	return b;
}

static void run_once(const uint8_t *b, size_t len, bool full, struct sluice_inflater *z)
{
	struct sluice_batch h;
	if (sluice_batch_check(b, len, &h) != SLUICE_BATCH_OK)
		abort();
	if (full) {
		struct sluice_batch_verify v = {.check_timestamps = true, .ts_min = INT64_MIN, .ts_max = INT64_MAX};
		if (sluice_batch_verify(b, &h, z, BENCH_INFLATE_BYTES_MAX, &v) != SLUICE_BATCH_OK)
			abort();
		sluice_inflater_trim(z);
	}
}

/* CPU seconds per batch of one round. */
static double round_per_batch(const uint8_t *b, size_t len, bool full, struct sluice_inflater *z)
{
	long iters = 0;
	double t0 = now_s(), t;
	do {
		for (int k = 0; k < 8; k++)
			run_once(b, len, full, z);
		iters += 8;
		t = now_s();
	} while (t - t0 < BENCH_ROUND_SECONDS);
	return (t - t0) / (double)iters;
}

/* The fastest round of each, header and full interleaved so that both see
 * the same machine. */
static void time_per_batch(const uint8_t *b, size_t len, struct sluice_inflater *z, double *header, double *full)
{
	*header = *full = 1e9;
	run_once(b, len, true, z); /* warm: the inflater's buffer grows once */
	for (int r = 0; r < BENCH_ROUNDS; r++) {
		double h = round_per_batch(b, len, false, z), f = round_per_batch(b, len, true, z);
		*header = h < *header ? h : *header;
		*full = f < *full ? f : *full;
	}
}

int main(void)
{
	static const int codecs[] = {0, TB_LZ4, TB_ZSTD, TB_SNAPPY, TB_GZIP};
	static const char *names[] = {"none", "lz4", "zstd", "snappy", "gzip"};
	static const size_t values[] = {100, 1024};
	static const size_t batches[] = {16u << 10, 1u << 20};
	struct sluice_inflater z = {0};
	printf("# batch validation cost, one thread, CPU time, fastest of %d rounds\n", BENCH_ROUNDS);
	printf("%-7s %6s %8s %6s %9s | %10s %12s %9s | %10s %12s %9s | %6s\n", "codec", "value", "batch", "recs",
	       "wire B", "hdr MB/s", "hdr rec/s", "hdr us", "full MB/s", "full rec/s", "full us", "ratio");
	for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++)
		for (size_t vi = 0; vi < 2; vi++)
			for (size_t bi = 0; bi < 2; bi++) {
				int32_t n;
				size_t len;
				uint8_t *b = make_batch(codecs[c], values[vi], batches[bi], &n, &len);
				double th, tf;
				time_per_batch(b, len, &z, &th, &tf);
				printf("%-7s %6zu %8zu %6d %9zu | %10.0f %12.0f %9.2f | %10.0f %12.0f %9.2f | %6.2f\n",
				       names[c], values[vi], batches[bi], n, len, (double)len / th / 1e6, n / th, th * 1e6,
				       (double)len / tf / 1e6, n / tf, tf * 1e6, tf / th);
				free(b);
			}
	sluice_inflater_free(&z);
	return 0;
}
