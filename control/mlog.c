/* The metadata log window (see mlog.h): the last metadata records applied,
 * each kept encoded (sluice_mrec_encode) with its append time, in a ring
 * that grows up to records_max entries; the oldest are dropped while the
 * record count or the encoded bytes are past their budgets. Reads frame
 * the records as Kafka record batches v2 (uncompressed, CRC-32C, no
 * producer, keys null, values the encoded records, BaseOffset the first
 * record's metadata offset and OffsetDelta the rest), which is how Kafka's
 * controllers serve __cluster_metadata; decode_batch is the other side,
 * checking the CRC and every length before a record is handed out, and
 * handing out none of a batch in which any record does not decode.
 *
 * A record is one allocation: the metadata log is the control path (a few
 * records per topic created or broker heartbeat state change), not the
 * data path. */
#include "control/mlog.h"
#include "common/crc32c.h"
#include "common/kafka/batch.h"
#include <assert.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MLOG_RING_MIN 64            /* entries allocated at first, doubled up to records_max */
#define MLOG_BATCH_RECORDS_MAX 4096 /* records in one batch of a read */
_Static_assert(MLOG_RING_MIN <= SLUICE_MLOG_RECORDS_MAX, "the ring starts within its limit");
_Static_assert(SLUICE_MREC_ENCODED_MAX <= SLUICE_MLOG_BYTES_MAX, "one record fits the largest window");

struct mlog_entry {
	uint8_t *bytes; /* the encoded record, owned */
	uint32_t len;
	int64_t timestamp_ms; /* wall clock at append: the record's timestamp in a batch */
};

struct sluice_mlog {
	size_t records_max, bytes_max;
	struct mlog_entry *ring; /* ring_cap entries; n from head on, wrapping */
	size_t ring_cap, head, n;
	size_t bytes;   /* sum of the entries' len */
	int64_t start;  /* the offset of the entry at head */
	bool any_next;  /* new or reset: the next append may take any offset */
	struct kwr scratch;
};

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	if (err && errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

struct sluice_mlog *sluice_mlog_new(size_t records_max, size_t bytes_max)
{
	assert(records_max >= 1 && records_max <= SLUICE_MLOG_RECORDS_MAX);
	assert(bytes_max >= 1 && bytes_max <= SLUICE_MLOG_BYTES_MAX);
	struct sluice_mlog *l = calloc(1, sizeof *l);
	if (!l)
		return NULL;
	l->records_max = records_max;
	l->bytes_max = bytes_max;
	l->any_next = true;
	kwr_init(&l->scratch, 256, SLUICE_MREC_ENCODED_MAX);
	return l;
}

static struct mlog_entry *entry(const struct sluice_mlog *l, size_t i)
{
	assert(i < l->n);
	return &l->ring[(l->head + i) % l->ring_cap];
}

static void drop_oldest(struct sluice_mlog *l)
{
	struct mlog_entry *e = entry(l, 0);
	l->bytes -= e->len;
	free(e->bytes);
	e->bytes = NULL;
	l->head = (l->head + 1) % l->ring_cap;
	l->n--;
	l->start++;
}

void sluice_mlog_reset(struct sluice_mlog *l)
{
	while (l->n)
		drop_oldest(l);
	assert(l->bytes == 0);
	l->any_next = true;
}

void sluice_mlog_free(struct sluice_mlog *l)
{
	if (!l)
		return;
	sluice_mlog_reset(l);
	free(l->ring);
	kwr_free(&l->scratch);
	free(l);
}

int64_t sluice_mlog_start(const struct sluice_mlog *l) { return l->start; }
int64_t sluice_mlog_end(const struct sluice_mlog *l) { return l->start + (int64_t)l->n; }

/* Room for one more entry without dropping one: double the ring (up to
 * records_max), unwrapping it. Changes no content. */
static int ring_reserve(struct sluice_mlog *l)
{
	if (l->n < l->ring_cap || l->ring_cap >= l->records_max)
		return 0;
	size_t cap = l->ring_cap ? 2 * l->ring_cap : MLOG_RING_MIN;
	if (cap > l->records_max)
		cap = l->records_max;
	struct mlog_entry *ring = malloc(cap * sizeof *ring);
	if (!ring)
		return -1;
	for (size_t i = 0; i < l->n; i++)
		ring[i] = *entry(l, i);
	free(l->ring);
	l->ring = ring;
	l->ring_cap = cap;
	l->head = 0;
	return 0;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int sluice_mlog_append(struct sluice_mlog *l, int64_t offset, const struct sluice_mrec *r)
{
	if (offset < 0 || (!l->any_next && offset != sluice_mlog_end(l)))
		return -1; /* not the next offset: the caller's bug */
	kwr_reset(&l->scratch);
	if (sluice_mrec_encode(&l->scratch, r) != 0)
		return -1;
	uint8_t *copy = malloc(l->scratch.len);
	if (!copy || ring_reserve(l) != 0) {
		free(copy);
		return -1;
	}
	memcpy(copy, l->scratch.buf, l->scratch.len);
	/* Oldest first, never the middle; a record larger than the whole byte
	 * budget is still kept, alone, so that brokers can fetch it. */
	while (l->n && (l->n + 1 > l->records_max || l->bytes + l->scratch.len > l->bytes_max))
		drop_oldest(l);
	if (l->any_next) {
		assert(l->n == 0);
		l->start = offset;
		l->any_next = false;
	}
	assert(l->n < l->ring_cap);
	struct mlog_entry *e = &l->ring[(l->head + l->n) % l->ring_cap];
	e->bytes = copy;
	e->len = (uint32_t)l->scratch.len;
	e->timestamp_ms = wall_ms();
	l->n++;
	l->bytes += e->len;
	assert(l->n <= l->records_max);
	return 0;
}

/* ---- reads: record batches ------------------------------------------------------- */

static size_t varlong_bytes(int64_t v)
{
	uint64_t u = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
	size_t n = 1;
	while (u >= 0x80) {
		u >>= 7;
		n++;
	}
	return n;
}

/* The bytes of record `delta` of a batch after its length prefix. */
static size_t record_body_bytes(const struct mlog_entry *e, int64_t base_timestamp, int32_t delta)
{
	return 1 /* attributes */ + varlong_bytes(e->timestamp_ms - base_timestamp) + varlong_bytes(delta) +
	       1 /* key -1 */ + varlong_bytes(e->len) + e->len + 1 /* no headers */;
}
static size_t record_bytes(const struct mlog_entry *e, int64_t base_timestamp, int32_t delta)
{
	size_t body = record_body_bytes(e, base_timestamp, delta);
	return varlong_bytes((int64_t)body) + body;
}

/* How many records from index `first` one batch takes within `room` bytes
 * (at least one when must_take). 0 when not even one fits. */
static int32_t batch_span(const struct sluice_mlog *l, size_t first, size_t room, bool must_take, size_t *bytes)
{
	int64_t base_ts = entry(l, first)->timestamp_ms;
	size_t used = SLUICE_BATCH_HEADER_BYTES;
	int32_t k = 0;
	while (k < MLOG_BATCH_RECORDS_MAX && first + (size_t)k < l->n) {
		size_t rb = record_bytes(entry(l, first + (size_t)k), base_ts, k);
		if (used + rb > room && !(must_take && k == 0))
			break;
		used += rb;
		k++;
	}
	*bytes = used;
	return k;
}

static void write_batch(const struct sluice_mlog *l, size_t first, int32_t k, struct kwr *w)
{
	size_t at = w->len;
	uint8_t *hdr = kwr_reserve(w, SLUICE_BATCH_HEADER_BYTES);
	if (!hdr)
		return;
	memset(hdr, 0, SLUICE_BATCH_HEADER_BYTES);
	int64_t base_ts = entry(l, first)->timestamp_ms, max_ts = base_ts;
	for (int32_t i = 0; i < k; i++) {
		const struct mlog_entry *e = entry(l, first + (size_t)i);
		int64_t ts_delta = e->timestamp_ms - base_ts;
		kwr_varint(w, (int32_t)record_body_bytes(e, base_ts, i));
		kwr_i8(w, 0);
		kwr_varlong(w, ts_delta);
		kwr_varint(w, i);
		kwr_varint(w, -1);
		kwr_varint(w, (int32_t)e->len);
		kwr_raw(w, e->bytes, e->len);
		kwr_varint(w, 0);
		if (e->timestamp_ms > max_ts)
			max_ts = e->timestamp_ms;
	}
	if (w->err)
		return;
	uint8_t *b = w->buf + at;
	size_t total = w->len - at;
	kput64(b, (uint64_t)(l->start + (int64_t)first));
	kput32(b + SLUICE_BATCH_OFF_LENGTH, (uint32_t)(total - SLUICE_BATCH_LOG_OVERHEAD));
	kput32(b + SLUICE_BATCH_OFF_EPOCH, 0);
	b[SLUICE_BATCH_OFF_MAGIC] = 2;
	kput32(b + SLUICE_BATCH_OFF_LAST_DELTA, (uint32_t)(k - 1));
	kput64(b + SLUICE_BATCH_OFF_BASE_TS, (uint64_t)base_ts);
	kput64(b + SLUICE_BATCH_OFF_MAX_TS, (uint64_t)max_ts);
	kput64(b + SLUICE_BATCH_OFF_PRODUCER_ID, (uint64_t)-1);
	b[SLUICE_BATCH_OFF_PRODUCER_EPOCH] = 0xff;
	b[SLUICE_BATCH_OFF_PRODUCER_EPOCH + 1] = 0xff;
	kput32(b + SLUICE_BATCH_OFF_BASE_SEQ, (uint32_t)-1);
	kput32(b + SLUICE_BATCH_OFF_COUNT, (uint32_t)k);
	kput32(b + SLUICE_BATCH_OFF_CRC,
	       sluice_crc32c(0, b + SLUICE_BATCH_OFF_ATTRIBUTES, total - SLUICE_BATCH_OFF_ATTRIBUTES));
}

/* A writer that fails (its cap) also answers -1, with w cut back to where
 * it was: the caller cannot serve the records either way. */
int64_t sluice_mlog_read(const struct sluice_mlog *l, int64_t from, size_t bytes_max, struct kwr *w)
{
	if (from < l->start || from > sluice_mlog_end(l))
		return -1;
	size_t first = (size_t)(from - l->start), used = 0, w_start = w->len;
	int64_t written = 0;
	while (first < l->n) {
		size_t bytes;
		size_t room = bytes_max > used ? bytes_max - used : 0;
		int32_t k = batch_span(l, first, room, written == 0, &bytes);
		if (k == 0)
			break;
		size_t before = w->len;
		write_batch(l, first, k, w);
		if (w->err) {
			w->len = w_start;
			return -1;
		}
		assert(w->len - before == bytes);
		used += bytes;
		first += (size_t)k;
		written += k;
	}
	assert(written > 0 || from == sluice_mlog_end(l));
	return written;
}

/* ---- decoding a batch (the broker's side) --------------------------------------------- */

/* Record i of a batch, framed as Kafka's DefaultRecord: its value (the
 * encoded metadata record) in *value; every length checked. */
static bool record_value(struct krd *rd, int32_t i, const uint8_t **value, int32_t *value_len)
{
	int32_t len = krd_varint(rd);
	if (rd->err || len < 0 || (size_t)len > krd_left(rd))
		return krd_fail(rd, "record length");
	struct krd r;
	krd_init(&r, rd->p, (size_t)len);
	rd->p += len;
	(void)krd_i8(&r);      /* attributes */
	(void)krd_varlong(&r); /* timestamp delta */
	if (krd_varint(&r) != i && !r.err)
		return krd_fail(rd, "offset delta is not the record's index");
	int32_t key_len = krd_varint(&r);
	if (!r.err && (key_len < -1 || (key_len > 0 && (size_t)key_len > krd_left(&r))))
		return krd_fail(rd, "key length");
	if (key_len > 0)
		krd_skip(&r, (size_t)key_len);
	*value_len = krd_varint(&r);
	if (!r.err && (*value_len < 0 || (size_t)*value_len > krd_left(&r)))
		return krd_fail(rd, "value length (a metadata record is never null)");
	*value = r.p;
	krd_skip(&r, (size_t)(r.err ? 0 : *value_len));
	int32_t headers = krd_varint(&r);
	if (!r.err && (headers < 0 || (size_t)headers > krd_left(&r)))
		return krd_fail(rd, "header count");
	for (int32_t h = 0; h < headers && !r.err; h++) {
		int32_t klen = krd_varint(&r);
		if (!r.err && (klen < 0 || (size_t)klen > krd_left(&r)))
			return krd_fail(rd, "header key length");
		krd_skip(&r, (size_t)(r.err ? 0 : klen));
		int32_t vlen = krd_varint(&r);
		if (!r.err && (vlen < -1 || (vlen > 0 && (size_t)vlen > krd_left(&r))))
			return krd_fail(rd, "header value length");
		if (vlen > 0)
			krd_skip(&r, (size_t)vlen);
	}
	if (r.err)
		return krd_fail(rd, r.err_what);
	if (krd_left(&r) != 0)
		return krd_fail(rd, "bytes after the record's fields");
	return true;
}

/* Walk the records of batch b at p: decode each; call fn with each when
 * fn is set. Returns 0, or -1 with err set. */
static int batch_walk(const uint8_t *p, const struct sluice_batch *b,
		      int (*fn)(void *arg, int64_t offset, const struct sluice_mrec *r), void *arg,
		      struct sluice_mrec *rec, char *err, size_t errlen)
{
	struct krd rd;
	krd_init(&rd, p + SLUICE_BATCH_HEADER_BYTES, (size_t)sluice_batch_total_bytes(b) - SLUICE_BATCH_HEADER_BYTES);
	char why[256];
	for (int32_t i = 0; i < b->records_count; i++) {
		const uint8_t *value;
		int32_t value_len;
		if (!record_value(&rd, i, &value, &value_len))
			return fail(err, errlen, "metadata batch at offset %" PRId64 ", record %" PRId32 ": %s",
				    b->base_offset, i, rd.err_what);
		if (sluice_mrec_decode(value, (size_t)value_len, rec, why, sizeof why) != 0)
			return fail(err, errlen, "metadata batch, offset %" PRId64 ": %s", b->base_offset + i, why);
		if (fn && fn(arg, b->base_offset + i, rec) != 0)
			return fail(err, errlen, "metadata batch, offset %" PRId64 ": %s refused by the caller",
				    b->base_offset + i, sluice_mrec_type_name(rec->type));
	}
	if (krd_left(&rd) != 0)
		return fail(err, errlen, "metadata batch at offset %" PRId64 ": bytes after its %" PRId32 " records",
			    b->base_offset, b->records_count);
	return 0;
}

int64_t sluice_mlog_decode_batch(const uint8_t *p, size_t len,
				 int (*fn)(void *arg, int64_t offset, const struct sluice_mrec *r), void *arg, char *err,
				 size_t errlen)
{
	struct sluice_batch b;
	enum sluice_batch_result res = sluice_batch_check(p, len, &b);
	if (res != SLUICE_BATCH_OK)
		return fail(err, errlen, "metadata batch: %s", sluice_batch_result_name(res));
	if (b.base_offset < 0) /* outside the CRC; -1 would read as a snapshot's record */
		return fail(err, errlen, "metadata batch: negative base offset %" PRId64, b.base_offset);
	if (b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK)
		return fail(err, errlen, "metadata batch at offset %" PRId64 ": compressed (codec %d)", b.base_offset,
			    b.attributes & SLUICE_BATCH_ATTR_CODEC_MASK);
	/* Kafka's control records (leader change, snapshot header and footer)
	 * are not metadata: skipped whole, as Kafka's metadata loader does. */
	if (b.attributes & SLUICE_BATCH_ATTR_CONTROL)
		return sluice_batch_total_bytes(&b);
	struct sluice_mrec *rec = malloc(sizeof *rec);
	if (!rec)
		return fail(err, errlen, "metadata batch: out of memory");
	/* Every record must decode before the first is handed out: no record
	 * of a damaged batch reaches the caller. */
	int rc = batch_walk(p, &b, NULL, NULL, rec, err, errlen);
	if (rc == 0)
		rc = batch_walk(p, &b, fn, arg, rec, err, errlen);
	free(rec);
	return rc == 0 ? sluice_batch_total_bytes(&b) : -1;
}
