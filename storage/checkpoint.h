/* Kafka's checkpoint files, in Kafka's own text format so that operators
 * and Kafka's tools read them as they read Kafka's: a version line (0), a
 * count line, then one entry a line, fields separated by one space.
 *
 *   leader-epoch-checkpoint (in each partition directory): "<epoch> <start offset>",
 *     the partition's leader-epoch cache, oldest first;
 *   replication-offset-checkpoint (in each data directory): "<topic> <partition> <offset>",
 *     each partition's high watermark.
 *
 * A file is written whole to "<name>.tmp" and renamed over the old one, so a
 * reader sees the old file or the new one, never a mix; durable writes also
 * sync the file before the rename and the directory after. Storage owns the
 * files; what the entries mean is the caller's (dataplane/storage_core.c).
 * Readers check everything (version, count, each field, the order an epoch
 * cache must have) and report a file they cannot trust as unreadable rather
 * than guess. */
#ifndef SLUICE_CHECKPOINT_H
#define SLUICE_CHECKPOINT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_CKPT_EPOCHS_FILE "leader-epoch-checkpoint"
#define SLUICE_CKPT_HW_FILE "replication-offset-checkpoint"
/* Largest checkpoint file read: 1 Mi partitions of a data directory at
 * about 270 bytes a line (a 249-byte topic name) fit. */
#define SLUICE_CKPT_FILE_BYTES_MAX (320ll << 20)

struct sluice_ckpt_epoch {
	int32_t epoch;
	int64_t start_offset;
};

/* Write dir's leader-epoch-checkpoint with n entries (epochs and start
 * offsets both increasing). durable: synced before it returns (what a
 * truncation writes must survive a crash); otherwise renamed into place
 * only (atomic, but a crash may leave the previous file or none: the
 * caller rebuilds from the log then). Returns 0 or -errno. */
int sluice_ckpt_epochs_write(const char *dir, const struct sluice_ckpt_epoch *e, uint32_t n, bool durable);
/* Make the leader-epoch-checkpoints of n partition directories durable
 * (written before with durable false): each file and each directory is
 * synced, all at once through an io_uring of the call's own, so that a
 * filesystem's journal commits them together instead of one by one (a
 * broker taking the leadership of many partitions). A directory or file
 * gone meanwhile (the partition deleted) has nothing left to keep.
 * Returns 0, or -errno of the first failure with *failed its index. */
#define SLUICE_CKPT_SYNC_BATCH_MAX 64
int sluice_ckpt_epochs_sync(const char *const *dirs, uint32_t n, uint32_t *failed);
/* Read dir's leader-epoch-checkpoint into e (at most max entries: the
 * newest max of a longer file, *dropped then set). Returns 1 when read, 0
 * when absent, -1 when it cannot be read or trusted (err says why). */
int sluice_ckpt_epochs_read(const char *dir, struct sluice_ckpt_epoch *e, uint32_t max, uint32_t *n, bool *dropped,
			    char *err, size_t errlen);

/* Write an offsets checkpoint at path, durably: count entries, their lines
 * ("<topic> <partition> <offset>\n" each) in body[0, len), as the caller
 * built them. Returns 0 or -errno. */
int sluice_ckpt_offsets_write(const char *path, const char *body, size_t len, uint32_t count);
/* Append one entry's line to a body being built (*len grows; the buffer
 * grows as needed, *cap its size). Returns 0, or -1 when out of memory or
 * the topic is not a name Kafka allows in a checkpoint (empty, or with a
 * space or a newline). */
int sluice_ckpt_offsets_line(char **body, size_t *len, size_t *cap, const char *topic, int32_t partition,
			     int64_t offset);
/* Read an offsets checkpoint: fn for every entry, in file order (topic not
 * NUL-terminated: topic_len bytes). Returns 1 when read, 0 when absent, -1
 * when it cannot be read or trusted (err says why; fn may have been called
 * for the entries before the fault). */
int sluice_ckpt_offsets_read(const char *path,
			     void (*fn)(const char *topic, size_t topic_len, int32_t partition, int64_t offset, void *arg),
			     void *arg, char *err, size_t errlen);

#endif
