/* The controllers' Raft state machine (control/quorum_fsm.h): committed
 * commands become metadata records applied to the image, each taking the
 * next metadata offset, and appended to the metadata log window; snapshots
 * are the image's own records.
 *
 * Command (one Raft entry), all integers big-endian:
 *   version  u8   1
 *   count    u32  1 .. SLUICE_QUORUM_COMMAND_RECORDS_MAX
 *   count times:
 *     length u32  1 .. SLUICE_MREC_ENCODED_MAX
 *     record      `length` bytes: sluice_mrec_encode's serialisation
 *   padding  0-7 zero bytes: the whole command is a multiple of 8 bytes,
 *            which raft_uv requires of every entry (its segment writer
 *            assumes it; Debian's build compiles the assertion out and
 *            writes a segment that does not load again otherwise).
 * A command is applied all or none: every record is decoded (and checked)
 * before the first is applied; one that does not decode refuses the whole
 * command and nothing changes. A record that decodes but that the image
 * refuses stops the command there (the records before it stay applied:
 * the image cannot take them back); on a committed entry that is a bug in
 * the proposer or damage, logged as an error with its offset. Either way
 * the entry is consumed, not retried: every voter refuses it identically
 * (applying is deterministic), so the images stay equal and the quorum
 * stays available, and the proposer hears KERR_UNKNOWN_SERVER_ERROR.
 *
 * Snapshot (libraft stores it with the Raft index and term it ends at):
 *   magic    4 bytes "SLQS"
 *   version  u8   1
 *   index    u64  the Raft index it ends at (0: unknown)
 *   offset   i64  the image offset (last metadata offset applied, -1 none)
 *   count    u32  records that follow
 *   count times: length u32, record (as in a command)
 * Restoring checks the whole snapshot first (every record decodes and
 * applies to a scratch image), then clears the image, applies every record
 * with offset -1, sets the offset, resets the metadata log window (brokers
 * behind it load a snapshot) and tells the owner (restored). A snapshot that
 * does not check is refused and the image stays as it was. */
#include "control/quorum_fsm.h"
#include "common/kafka/codec.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define COMMAND_VERSION 1
#define COMMAND_ALIGN 8 /* raft_uv's entry alignment */
#define SNAPSHOT_VERSION 1
#define SNAPSHOT_MAGIC "SLQS"
#define SNAPSHOT_HEADER_BYTES (4 + 1 + 8 + 8 + 4)
#define RECORD_BYTES_MIN 5 /* a length and at least one byte */
#define INSTALL_SNAPSHOT_TIMEOUT_MIN_MS 5000
#define INSTALL_SNAPSHOT_TIMEOUT_MAX_MS 30000 /* libraft's default */
#define THRESHOLD_DEFAULT 1024
#define TRAILING_DEFAULT 128
#define ERR_MAX 256

_Static_assert(SLUICE_QUORUM_COMMAND_RECORDS_MAX * RECORD_BYTES_MIN <= SLUICE_QUORUM_COMMAND_BYTES_MAX,
	       "a command of the most records fits the byte limit");
_Static_assert(SLUICE_QUORUM_SNAPSHOT_BYTES_MAX <= INT32_MAX, "snapshot sizes fit an int32 codec position");

static void map_reset(struct sluice_quorum_fsm *f, raft_index index, int64_t offset)
{
	f->map_first = 0;
	f->map_n = 1;
	f->map[0].index = index;
	f->map[0].offset = offset;
}

static void map_push(struct sluice_quorum_fsm *f, raft_index index, int64_t offset)
{
	size_t last = (f->map_first + f->map_n - 1) % SLUICE_QUORUM_FSM_MAP_MAX;
	assert(f->map_n > 0);
	assert(index > f->map[last].index); /* applies come in index order */
	if (f->map_n == SLUICE_QUORUM_FSM_MAP_MAX) {
		f->map_first = (f->map_first + 1) % SLUICE_QUORUM_FSM_MAP_MAX;
		f->map_n--;
	}
	f->map[(f->map_first + f->map_n) % SLUICE_QUORUM_FSM_MAP_MAX].index = index;
	f->map[(f->map_first + f->map_n) % SLUICE_QUORUM_FSM_MAP_MAX].offset = offset;
	f->map_n++;
}

int64_t sluice_quorum_fsm_offset_at(const struct sluice_quorum_fsm *f, raft_index index)
{
	assert(f->map_n > 0 && f->map_n <= SLUICE_QUORUM_FSM_MAP_MAX);
	size_t last = (f->map_first + f->map_n - 1) % SLUICE_QUORUM_FSM_MAP_MAX;
	if (index >= f->map[last].index)
		return sluice_image_offset(f->img);
	/* Newest first: the answer is the newest pair at or before index. */
	for (size_t i = f->map_n; i-- > 0;) {
		size_t at = (f->map_first + i) % SLUICE_QUORUM_FSM_MAP_MAX;
		if (f->map[at].index <= index)
			return f->map[at].offset;
	}
	return -1;
}

/* Read one length-prefixed record of a command or snapshot: its bytes, or
 * NULL with r->err set. */
static const uint8_t *record_next(struct krd *r, size_t *len)
{
	int32_t n = krd_i32(r);
	if (r->err || n < 1 || n > SLUICE_MREC_ENCODED_MAX || (size_t)n > krd_left(r)) {
		krd_fail(r, "record length");
		return NULL;
	}
	const uint8_t *p = r->p;
	krd_skip(r, (size_t)n);
	*len = (size_t)n;
	return p;
}

/* Check that every record of a command decodes. Returns the record count,
 * or 0 with err set. */
static size_t command_check(struct sluice_quorum_fsm *f, const void *p, size_t len, char *err, size_t errlen)
{
	struct krd r;
	krd_init(&r, p, len);
	int8_t version = krd_i8(&r);
	int32_t count = krd_i32(&r);
	if (r.err || version != COMMAND_VERSION || count < 1 || count > SLUICE_QUORUM_COMMAND_RECORDS_MAX ||
	    (size_t)count > krd_left(&r) / RECORD_BYTES_MIN) {
		snprintf(err, errlen, "bad command header (version %d, count %d, %zu bytes)", version, count, len);
		return 0;
	}
	for (int32_t i = 0; i < count; i++) {
		size_t rlen = 0;
		const uint8_t *rp = record_next(&r, &rlen);
		char derr[ERR_MAX];
		if (!rp) {
			snprintf(err, errlen, "record %d of %d: bad length at byte %zu", i, count, krd_offset(&r));
			return 0;
		}
		if (sluice_mrec_decode(rp, rlen, f->rec, derr, sizeof derr) != 0) {
			snprintf(err, errlen, "record %d of %d does not decode: %.200s", i, count, derr);
			return 0;
		}
	}
	size_t pad = krd_left(&r);
	bool zeros = true;
	for (size_t i = 0; i < pad; i++)
		zeros = zeros && r.p[i] == 0;
	if (pad >= COMMAND_ALIGN || len % COMMAND_ALIGN != 0 || !zeros) {
		snprintf(err, errlen, "%zu bytes after the last of %d records (%zu in all): not the padding to %d",
			 pad, count, len, COMMAND_ALIGN);
		return 0;
	}
	return (size_t)count;
}

void sluice_quorum_fsm_apply_command(struct sluice_quorum_fsm *f, const void *p, size_t len, raft_index index,
				     struct sluice_quorum_outcome *out)
{
	char err[ERR_MAX];
	int64_t first = sluice_image_offset(f->img) + 1;
	size_t count = command_check(f, p, len, err, sizeof err);
	out->error = KERR_NONE;
	out->applied_n = 0;
	if (count == 0) {
		SLOG_ERR("quorum", "committed command at raft index %llu refused, nothing applied (damage or a bug): %s",
			 (unsigned long long)index, err);
		f->commands_refused++;
		out->error = KERR_UNKNOWN_SERVER_ERROR;
		out->last_offset = first - 1;
		return;
	}
	struct krd r;
	krd_init(&r, p, len);
	krd_skip(&r, 1 + 4);
	for (size_t i = 0; i < count; i++) {
		size_t rlen = 0;
		const uint8_t *rp = record_next(&r, &rlen);
		assert(rp); /* command_check read the same bytes */
		int rc = sluice_mrec_decode(rp, rlen, f->rec, err, sizeof err);
		assert(rc == 0);
		(void)rc;
		int64_t offset = first + (int64_t)i;
		if (sluice_image_apply(f->img, f->rec, offset, err, sizeof err) != 0) {
			SLOG_ERR("quorum",
				 "committed record %zu of %zu (%s) at metadata offset %lld, raft index %llu, does not apply"
				 " (a bug in the proposer or damage); the rest of the command is skipped: %s",
				 i, count, sluice_mrec_type_name(f->rec->type), (long long)offset,
				 (unsigned long long)index, err);
			out->error = KERR_UNKNOWN_SERVER_ERROR;
			f->commands_refused++;
			break;
		}
		if (f->mlog && sluice_mlog_append(f->mlog, offset, f->rec) != 0)
			SLOG_ERR("quorum", "metadata offset %lld applied but not added to the metadata log window",
				 (long long)offset);
		out->applied_n++;
	}
	out->last_offset = sluice_image_offset(f->img);
	assert(out->last_offset == first - 1 + (int64_t)out->applied_n);
	if (out->error == KERR_NONE)
		f->commands_applied++;
	if (index && out->applied_n)
		map_push(f, index, out->last_offset);
	if (out->applied_n && f->cbs && f->cbs->applied)
		f->cbs->applied(f->cb_arg, first, out->applied_n);
}

static int fsm_apply(struct raft_fsm *rf, const struct raft_buffer *buf, void **result)
{
	struct sluice_quorum_fsm *f = rf->data;
	raft_index index = f->raft ? f->raft->last_applied + 1 : 0;
	sluice_quorum_fsm_apply_command(f, buf->base, buf->len, index, &f->outcome);
	*result = &f->outcome;
	/* Always consumed: a refused command is refused identically by every
	 * voter; returning an error would stall every voter on it forever. */
	return 0;
}

int16_t sluice_quorum_command_encode(const struct sluice_mrec *recs, size_t n, struct raft_buffer *out)
{
	if (n == 0 || n > SLUICE_QUORUM_COMMAND_RECORDS_MAX)
		return KERR_INVALID_REQUEST;
	struct kwr w;
	int16_t error = KERR_NONE;
	kwr_init(&w, 256 + n * 64, SLUICE_QUORUM_COMMAND_BYTES_MAX);
	kwr_i8(&w, COMMAND_VERSION);
	kwr_i32(&w, (int32_t)n);
	for (size_t i = 0; i < n && !w.err; i++) {
		size_t at = w.len;
		kwr_i32(&w, 0);
		if (sluice_mrec_encode(&w, &recs[i]) != 0 && !w.err) {
			error = KERR_INVALID_REQUEST;
			goto out;
		}
		if (!w.err)
			kwr_patch_i32(&w, at, (int32_t)(w.len - at - 4));
	}
	if (!w.err && w.len % COMMAND_ALIGN)
		kwr_raw(&w, "\0\0\0\0\0\0\0", COMMAND_ALIGN - w.len % COMMAND_ALIGN);
	if (w.err) {
		error = KERR_POLICY_VIOLATION; /* above the byte limit (or out of memory) */
		goto out;
	}
	assert(w.len % COMMAND_ALIGN == 0);
	out->base = raft_malloc(w.len);
	if (!out->base) {
		error = KERR_UNKNOWN_SERVER_ERROR;
		goto out;
	}
	memcpy(out->base, w.buf, w.len);
	out->len = w.len;
out:
	kwr_free(&w);
	return error;
}

struct snapshot_writer {
	struct kwr *w;
	uint32_t n;
};

static int snapshot_record(void *arg, const struct sluice_mrec *r)
{
	struct snapshot_writer *s = arg;
	size_t at = s->w->len;
	kwr_i32(s->w, 0);
	if (sluice_mrec_encode(s->w, r) != 0 || s->w->err)
		return -1;
	kwr_patch_i32(s->w, at, (int32_t)(s->w->len - at - 4));
	s->n++;
	return 0;
}

static int fsm_snapshot(struct raft_fsm *rf, struct raft_buffer *bufs[], unsigned *n_bufs)
{
	struct sluice_quorum_fsm *f = rf->data;
	struct kwr w;
	struct snapshot_writer s = {.w = &w, .n = 0};
	raft_index index = f->raft ? f->raft->last_applied : 0;
	kwr_init(&w, 4096, SLUICE_QUORUM_SNAPSHOT_BYTES_MAX);
	kwr_raw(&w, SNAPSHOT_MAGIC, 4);
	kwr_i8(&w, SNAPSHOT_VERSION);
	kwr_i64(&w, (int64_t)index);
	kwr_i64(&w, sluice_image_offset(f->img));
	kwr_i32(&w, 0); /* count, patched below */
	int rc = w.err ? -1 : sluice_image_encode(f->img, snapshot_record, &s);
	*bufs = rc == 0 && !w.err ? malloc(sizeof **bufs) : NULL;
	if (!*bufs) {
		SLOG_ERR("quorum", "snapshot at raft index %llu not taken: the image does not encode within %u bytes",
			 (unsigned long long)index, SLUICE_QUORUM_SNAPSHOT_BYTES_MAX);
		kwr_free(&w);
		return RAFT_NOMEM;
	}
	kwr_patch_i32(&w, SNAPSHOT_HEADER_BYTES - 4, (int32_t)s.n);
	(*bufs)[0].base = w.buf; /* ours until fsm_snapshot_finalize */
	(*bufs)[0].len = w.len;
	*n_bufs = 1;
	f->snapshots_taken++;
	SLOG_INFO("quorum", "snapshot at raft index %llu, metadata offset %lld: %u records, %zu bytes",
		  (unsigned long long)index, (long long)sluice_image_offset(f->img), s.n, w.len);
	return 0;
}

static int fsm_snapshot_finalize(struct raft_fsm *rf, struct raft_buffer *bufs[], unsigned *n_bufs)
{
	assert(*n_bufs == 1 && *bufs);
	free((*bufs)[0].base); /* kwr's buffer: malloc'd */
	free(*bufs);
	*bufs = NULL;
	*n_bufs = 0;
	return 0;
}

struct snapshot_header {
	raft_index index;
	int64_t offset;
	uint32_t count;
};

/* Apply every record of a snapshot body to img with offset -1. Returns 0,
 * or -1 with err set (the image is then partly built). */
static int snapshot_apply(struct sluice_quorum_fsm *f, struct sluice_image *img, const struct raft_buffer *buf,
			  const struct snapshot_header *h, char *err, size_t errlen)
{
	struct krd r;
	krd_init(&r, buf->base, buf->len);
	krd_skip(&r, SNAPSHOT_HEADER_BYTES);
	for (uint32_t i = 0; i < h->count; i++) {
		size_t rlen = 0;
		char derr[ERR_MAX];
		const uint8_t *rp = record_next(&r, &rlen);
		if (!rp) {
			snprintf(err, errlen, "record %u of %u: bad length at byte %zu", i, h->count, krd_offset(&r));
			return -1;
		}
		if (sluice_mrec_decode(rp, rlen, f->rec, derr, sizeof derr) != 0 ||
		    sluice_image_apply(img, f->rec, -1, derr, sizeof derr) != 0) {
			snprintf(err, errlen, "record %u of %u: %.200s", i, h->count, derr);
			return -1;
		}
	}
	if (krd_left(&r) != 0) {
		snprintf(err, errlen, "%zu bytes after the last of %u records", krd_left(&r), h->count);
		return -1;
	}
	return 0;
}

static int snapshot_header_read(const struct raft_buffer *buf, struct snapshot_header *h)
{
	struct krd r;
	krd_init(&r, buf->base, buf->len);
	if (buf->len < SNAPSHOT_HEADER_BYTES || memcmp(buf->base, SNAPSHOT_MAGIC, 4) != 0)
		return -1;
	krd_skip(&r, 4);
	int8_t version = krd_i8(&r);
	h->index = (raft_index)krd_i64(&r);
	h->offset = krd_i64(&r);
	int32_t count = krd_i32(&r);
	if (r.err || version != SNAPSHOT_VERSION || h->offset < -1 || count < 0 ||
	    count > SLUICE_QUORUM_SNAPSHOT_RECORDS_MAX || (size_t)count > krd_left(&r) / RECORD_BYTES_MIN)
		return -1;
	h->count = (uint32_t)count;
	return 0;
}

static int fsm_restore(struct raft_fsm *rf, struct raft_buffer *buf)
{
	struct sluice_quorum_fsm *f = rf->data;
	struct snapshot_header h;
	char err[ERR_MAX] = "";
	if (snapshot_header_read(buf, &h) != 0) {
		SLOG_ERR("quorum", "snapshot of %zu bytes refused: bad header", buf->len);
		return RAFT_MALFORMED;
	}
	/* Check it whole on a scratch image first: a snapshot that fails half
	 * way must not leave the live image half built. */
	struct sluice_image *scratch = sluice_image_new();
	if (!scratch)
		return RAFT_NOMEM;
	int rc = snapshot_apply(f, scratch, buf, &h, err, sizeof err);
	sluice_image_free(scratch);
	if (rc != 0) {
		SLOG_ERR("quorum", "snapshot at raft index %llu, metadata offset %lld refused, image unchanged: %s",
			 (unsigned long long)h.index, (long long)h.offset, err);
		return RAFT_MALFORMED;
	}
	sluice_image_clear(f->img);
	rc = snapshot_apply(f, f->img, buf, &h, err, sizeof err);
	assert(rc == 0); /* the same records applied to an empty image a moment ago */
	(void)rc;
	sluice_image_set_offset(f->img, h.offset);
	if (f->mlog)
		sluice_mlog_reset(f->mlog);
	map_reset(f, h.index, h.offset);
	f->snapshots_restored++;
	f->last_restored_index = h.index;
	raft_free(buf->base); /* ours on success (libraft's contract) */
	SLOG_INFO("quorum", "snapshot restored: raft index %llu, metadata offset %lld, %u records",
		  (unsigned long long)h.index, (long long)h.offset, h.count);
	if (f->cbs && f->cbs->restored)
		f->cbs->restored(f->cb_arg, h.offset);
	return 0;
}

int sluice_quorum_fsm_init(struct sluice_quorum_fsm *f, struct sluice_image *img, struct sluice_mlog *mlog,
			   const struct sluice_quorum_callbacks *cbs, void *cb_arg)
{
	assert(img);
	memset(f, 0, sizeof *f);
	f->rec = malloc(sizeof *f->rec);
	if (!f->rec)
		return -1;
	f->img = img;
	f->mlog = mlog;
	f->cbs = cbs;
	f->cb_arg = cb_arg;
	map_reset(f, 0, sluice_image_offset(img));
	f->outcome.last_offset = sluice_image_offset(img);
	/* Version 2: the snapshot buffers stay ours (snapshot_finalize frees
	 * them), so the kwr buffer is handed over without a copy. */
	f->raft_fsm.version = 2;
	f->raft_fsm.data = f;
	f->raft_fsm.apply = fsm_apply;
	f->raft_fsm.snapshot = fsm_snapshot;
	f->raft_fsm.restore = fsm_restore;
	f->raft_fsm.snapshot_finalize = fsm_snapshot_finalize;
	return 0;
}

void sluice_quorum_fsm_close(struct sluice_quorum_fsm *f)
{
	free(f->rec);
	f->rec = NULL;
}

void sluice_quorum_tune(struct raft *r, const struct sluice_quorum_config *cfg)
{
	unsigned election = cfg->election_timeout_ms ? cfg->election_timeout_ms : 1000;
	unsigned heartbeat = cfg->heartbeat_timeout_ms ? cfg->heartbeat_timeout_ms : election / 10;
	assert(election > 0);
	raft_set_election_timeout(r, election);
	raft_set_heartbeat_timeout(r, heartbeat ? heartbeat : 1);
	raft_set_snapshot_threshold(r, cfg->snapshot_threshold ? cfg->snapshot_threshold : THRESHOLD_DEFAULT);
	raft_set_snapshot_trailing(r, cfg->snapshot_trailing ? cfg->snapshot_trailing : TRAILING_DEFAULT);
	/* A voter cut off and back must not depose a healthy leader (4.2.3). */
	raft_set_pre_vote(r, true);
	/* libraft keeps a follower's match index across its restarts; one that
	 * comes back with less log than it had (a controller replaced on an
	 * empty metadata.log.dir) acknowledges the snapshot it is sent with an
	 * index below that, which the leader ignores, so it waits for this
	 * timeout before it probes again (30 s by default). A few election
	 * timeouts bound that stall and still leave a snapshot of 100,000
	 * partitions (tens of MB) seconds to cross a LAN. */
	unsigned long install = 5ul * election;
	if (install < INSTALL_SNAPSHOT_TIMEOUT_MIN_MS)
		install = INSTALL_SNAPSHOT_TIMEOUT_MIN_MS;
	if (install > INSTALL_SNAPSHOT_TIMEOUT_MAX_MS)
		install = INSTALL_SNAPSHOT_TIMEOUT_MAX_MS;
	raft_set_install_snapshot_timeout(r, (unsigned)install);
}
