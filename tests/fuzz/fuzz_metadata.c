/* libFuzzer target for what a broker applies from a controller and what a
 * controller applies from its Raft log: metadata records (control/mrec.c)
 * applied to the cluster image (control/image.c), carried in metadata-log
 * batches (control/mlog.c). Each input is a sequence of records, each
 * prefixed by a 2-byte big-endian length, so that mutations reach the
 * record decoder and the image's rules instead of dying at a CRC.
 * Properties checked on every input, beyond ASan/UBSan's:
 * - a record that decodes re-encodes to bytes that decode to the same
 *   record (encode(decode(x)) is a fixed point);
 * - a record the image refuses leaves it unchanged (compared with a twin
 *   that never saw it);
 * - the image's own records (sluice_image_encode) rebuild an equal image;
 * - the accepted records, appended to a metadata-log window and read back
 *   as Kafka record batches, decode to the same records in the same order.
 * The images are rebuilt per input: nothing carries over between inputs. */
#include "common/kafka/codec.h"
#include "control/image.h"
#include "control/mlog.h"
#include "control/mrec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_RECORDS_MAX 64

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_metadata: %s\n", what);
	abort();
}

static bool same_record(const struct sluice_mrec *a, const struct sluice_mrec *b)
{
	struct kwr wa, wb;
	kwr_init(&wa, 256, SLUICE_MREC_ENCODED_MAX);
	kwr_init(&wb, 256, SLUICE_MREC_ENCODED_MAX);
	bool same = sluice_mrec_encode(&wa, a) == 0 && sluice_mrec_encode(&wb, b) == 0 && wa.len == wb.len &&
		    memcmp(wa.buf, wb.buf, wa.len) == 0;
	kwr_free(&wa);
	kwr_free(&wb);
	return same;
}

/* encode(decode(x)) decodes to the same record. Returns whether r has an
 * encoding at all. */
static bool check_fixed_point(const struct sluice_mrec *r)
{
	static struct sluice_mrec again;
	char err[256];
	struct kwr w;
	kwr_init(&w, 256, SLUICE_MREC_ENCODED_MAX);
	if (sluice_mrec_encode(&w, r) < 0) {
		/* A few decoded values have no encoding (see mrec.c); that is a refusal, not a bug. */
		kwr_free(&w);
		return false;
	}
	if (sluice_mrec_decode(w.buf, w.len, &again, err, sizeof err) < 0)
		fail(err);
	if (!same_record(r, &again))
		fail("a record's re-encoding decodes to another record");
	kwr_free(&w);
	return true;
}

struct replay {
	struct sluice_image *img;
	int64_t offset;
	bool ok;
};

static int apply_snapshot_record(void *arg, const struct sluice_mrec *r)
{
	struct replay *rp = arg;
	char err[256];
	if (sluice_image_apply(rp->img, r, -1, err, sizeof err) < 0) {
		fprintf(stderr, "fuzz_metadata: snapshot record refused: %s\n", err);
		rp->ok = false;
		return 1;
	}
	return 0;
}

struct walk {
	const struct sluice_mrec *want;
	int64_t want_n, seen, first_offset;
	bool ok;
};

static int check_log_record(void *arg, int64_t offset, const struct sluice_mrec *r)
{
	struct walk *wk = arg;
	if (wk->seen >= wk->want_n || offset != wk->first_offset + wk->seen || !same_record(r, &wk->want[wk->seen]))
		wk->ok = false;
	wk->seen++;
	return 0;
}

static void check_snapshot(const struct sluice_image *img)
{
	struct replay rp = {sluice_image_new(), -1, true};
	if (!rp.img)
		return;
	if (sluice_image_encode(img, apply_snapshot_record, &rp) != 0 || !rp.ok)
		fail("the image's own records do not rebuild it");
	sluice_image_set_offset(rp.img, sluice_image_offset(img));
	if (!sluice_image_equal(img, rp.img))
		fail("the image rebuilt from its snapshot records differs");
	sluice_image_free(rp.img);
}

static void check_log(const struct sluice_mrec *recs, int64_t n)
{
	struct sluice_mlog *l = sluice_mlog_new(FUZZ_RECORDS_MAX, SLUICE_MLOG_BYTES_MAX);
	if (!l)
		return;
	for (int64_t i = 0; i < n; i++)
		if (sluice_mlog_append(l, i, &recs[i]) < 0)
			fail("the log refused an accepted record");
	struct kwr w;
	kwr_init(&w, 4096, 64u << 20);
	if (sluice_mlog_read(l, 0, 64u << 20, &w) != n)
		fail("the log read back another number of records");
	struct walk wk = {recs, n, 0, 0, true};
	char err[256];
	size_t at = 0;
	while (at < w.len) {
		int64_t used = sluice_mlog_decode_batch(w.buf + at, w.len - at, check_log_record, &wk, err, sizeof err);
		if (used <= 0)
			fail(err);
		at += (size_t)used;
	}
	if (!wk.ok || wk.seen != n)
		fail("the log's batches decode to other records");
	kwr_free(&w);
	sluice_mlog_free(l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct sluice_mrec recs[FUZZ_RECORDS_MAX];
	struct sluice_image *img = sluice_image_new(), *twin = sluice_image_new();
	if (!img || !twin)
		goto out;
	int64_t n = 0, offset = 0;
	char err[256];
	while (size >= 2 && n < FUZZ_RECORDS_MAX) {
		size_t len = (size_t)data[0] << 8 | data[1];
		data += 2;
		size -= 2;
		if (len > size)
			len = size;
		struct sluice_mrec *r = &recs[n];
		if (sluice_mrec_decode(data, len, r, err, sizeof err) == 0) {
			bool encodable = check_fixed_point(r);
			if (sluice_image_apply(img, r, offset, err, sizeof err) == 0) {
				if (sluice_image_apply(twin, r, offset, err, sizeof err) != 0)
					fail("a twin image refused what the image accepted");
				offset++;
				n += encodable; /* the log holds encodable records only */
			} else if (!sluice_image_equal(img, twin)) {
				fail("a refused record changed the image");
			}
		}
		data += len;
		size -= len;
	}
	check_snapshot(img);
	check_log(recs, n);
out:
	sluice_image_free(img);
	sluice_image_free(twin);
	return 0;
}
