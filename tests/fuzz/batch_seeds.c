/* Writes the seed corpus of fuzz_batch into a directory: for every codec
 * (none, gzip, raw snappy, xerial snappy, lz4, zstd) a valid batch of a few
 * records with null keys, values and headers, the same batch claiming one
 * record too many, and one asking for the key and timestamp rules (the
 * low bits of PartitionLeaderEpoch). Batches are built with the tests'
 * independent encoder and the codec libraries (tests/unit/batch_build.h,
 * batch_codecs.h). Usage: batch_seeds OUT_DIR STAMP_FILE. */
#include "batch_build.h"
#include "batch_codecs.h"
#include <stdio.h>
#include <sys/stat.h>

static int write_file(const char *dir, const char *name, const uint8_t *p, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(p, 1, n, f) != n) {
		perror(path);
		if (f)
			fclose(f);
		return -1;
	}
	return fclose(f);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: batch_seeds OUT_DIR STAMP_FILE\n");
		return 2;
	}
	mkdir(argv[1], 0755);
	static const struct tb_rec recs[4] = {
		{"key-0", 5, "value-0", 7, 0}, {NULL, 0, "value-1", 7, 1}, {"key-2", 5, NULL, 0, 2}, {"k3", 2, "v3", 2, 3},
	};
	struct kwr w;
	kwr_init(&w, 256, 1u << 20);
	(void)tb_records(&w, recs, 4);
	static const int codecs[] = {0, TB_GZIP, TB_SNAPPY, TB_SNAPPY_XERIAL, TB_LZ4, TB_ZSTD};
	static const char *names[] = {"none", "gzip", "snappy", "xerial", "lz4", "zstd"};
	for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) {
		size_t n = w.len;
		uint8_t *z = codecs[c] ? tb_compress(codecs[c], w.buf, w.len, &n) : NULL;
		if (codecs[c] && !z)
			return 1;
		for (int variant = 0; variant < 3; variant++) {
			struct tb_hdr h = tb_hdr_default(variant == 1 ? 5 : 4, 1700000000000LL);
			h.attributes = (int16_t)tb_attr_codec(codecs[c]);
			h.leader_epoch = variant == 2 ? 3 : 0;
			size_t len;
			uint8_t *b = tb_wrap(&h, z ? z : w.buf, n, &len);
			char name[64];
			snprintf(name, sizeof name, "%s-%s", names[c], variant == 0 ? "valid" : variant == 1 ? "count" : "rules");
			if (!b || write_file(argv[1], name, b, len) < 0)
				return 1;
			free(b);
		}
		free(z);
	}
	kwr_free(&w);
	FILE *stamp = fopen(argv[2], "w");
	return stamp && fclose(stamp) == 0 ? 0 : 1;
}
