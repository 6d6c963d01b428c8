/* The metadata log window: the most recent metadata records a controller
 * applied, encoded, each with its offset, kept in memory within a byte and
 * record budget so that brokers can fetch the log from any offset inside
 * it (Kafka's Fetch of __cluster_metadata). A broker asking for an offset
 * older than the window is told OFFSET_OUT_OF_RANGE and loads a snapshot
 * of the image instead (FetchSnapshot), then fetches from its end. The
 * oldest records are dropped first when the budget is exceeded; nothing is
 * ever dropped from the middle, so the window is always contiguous. */
#ifndef SLUICE_MLOG_H
#define SLUICE_MLOG_H
#include <stddef.h>
#include <stdint.h>
#include "common/kafka/codec.h"
#include "control/mrec.h"

#define SLUICE_MLOG_RECORDS_MAX 200000
#define SLUICE_MLOG_BYTES_MAX (64u << 20)

struct sluice_mlog;

struct sluice_mlog *sluice_mlog_new(size_t records_max, size_t bytes_max);
void sluice_mlog_free(struct sluice_mlog *l);
/* Append r as offset (exactly the next one: end offset, or anything after a
 * reset). Returns 0 or -1 (encoding failed: a bug). */
int sluice_mlog_append(struct sluice_mlog *l, int64_t offset, const struct sluice_mrec *r);
/* Drop everything; the next append may take any offset (after a snapshot
 * replaced the image). */
void sluice_mlog_reset(struct sluice_mlog *l);
/* [start, end): the offsets held. start == end when empty. */
int64_t sluice_mlog_start(const struct sluice_mlog *l);
int64_t sluice_mlog_end(const struct sluice_mlog *l);
/* Append to w one or more Kafka record batches (magic 2, CRC-32C, the
 * records' values being the encoded metadata records, keys null, offsets
 * the metadata offsets) holding the records from offset `from` on, at most
 * bytes_max bytes but always at least one record if any is there. Returns
 * the number of records written, 0 when from == end, or -1 when from is
 * outside [start, end] (the caller answers OFFSET_OUT_OF_RANGE). */
int64_t sluice_mlog_read(const struct sluice_mlog *l, int64_t from, size_t bytes_max, struct kwr *w);

/* Decode one record batch of such a log (the broker's side): call fn for
 * each record with its offset. Returns the batch's total length, or -1 with
 * err set (bad CRC, sizes, or a record that does not decode). */
int64_t sluice_mlog_decode_batch(const uint8_t *p, size_t len,
				 int (*fn)(void *arg, int64_t offset, const struct sluice_mrec *r), void *arg, char *err,
				 size_t errlen);

#endif
