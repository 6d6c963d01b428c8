/* Checkpoint file tests (storage/checkpoint.c). They prove that a
 * leader-epoch-checkpoint and a replication-offset-checkpoint are written
 * in Kafka's exact text format (version 0, count, one entry a line), read
 * back as written, an absent file answers 0, and a file that is not what
 * the format says (another version, a count that does not match the lines,
 * fields that are not numbers or out of range, epochs not increasing,
 * bytes after the last entry, a last line without its newline) answers -1
 * with a reason, never a guess; that a longer epoch file keeps its newest
 * entries; that no temporary file stays behind; that unsynced writes are
 * synced as one batch; and that a topic name
 * Kafka's format cannot hold is refused when a line is built. */
#include "storage/checkpoint.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/sluice-ckpt-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(checkpoint, .init = setup, .fini = teardown);

static void put(const char *name, const char *text)
{
	char p[128];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
}

static char *slurp(const char *name)
{
	char p[128];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "r");
	cr_assert_not_null(f, "%s missing", p);
	static char buf[4096];
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static int files_in_dir(void)
{
	DIR *d = opendir(dir);
	int n = 0;
	for (struct dirent *e; (e = readdir(d));)
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Proves the epoch file's format and round trip, synced or not, and that
 * an absent file is 0 and an empty cache is written as count 0. */
Test(checkpoint, epochs_round_trip)
{
	struct sluice_ckpt_epoch e[3] = {{0, 0}, {2, 150}, {7, 9000000000ll}}, r[8];
	uint32_t n = 99;
	bool dropped = true;
	char err[200] = "";
	cr_expect_eq(sluice_ckpt_epochs_read(dir, r, 8, &n, &dropped, err, sizeof err), 0, "absent");
	cr_expect_eq(n, 0);
	cr_assert_eq(sluice_ckpt_epochs_write(dir, e, 3, true), 0);
	cr_expect_str_eq(slurp(SLUICE_CKPT_EPOCHS_FILE), "0\n3\n0 0\n2 150\n7 9000000000\n");
	cr_expect_eq(files_in_dir(), 1, "no temporary file left");
	cr_assert_eq(sluice_ckpt_epochs_read(dir, r, 8, &n, &dropped, err, sizeof err), 1, "%s", err);
	cr_expect(n == 3 && !dropped);
	for (int i = 0; i < 3; i++)
		cr_expect(r[i].epoch == e[i].epoch && r[i].start_offset == e[i].start_offset, "entry %d", i);
	cr_assert_eq(sluice_ckpt_epochs_write(dir, e, 0, false), 0);
	cr_expect_str_eq(slurp(SLUICE_CKPT_EPOCHS_FILE), "0\n0\n");
	cr_expect_eq(sluice_ckpt_epochs_read(dir, r, 8, &n, &dropped, err, sizeof err), 1);
	cr_expect_eq(n, 0);
}

/* Proves checkpoints written unsynced are synced as one batch: every
 * directory's file and the directory itself are opened and synced (a
 * checkpoint that cannot be opened fails, named by its index), a
 * directory gone meanwhile (its partition deleted) is passed over, and
 * the files read back as written. */
Test(checkpoint, epochs_sync_batch)
{
	struct sluice_ckpt_epoch e[2] = {{1, 0}, {3, 40}};
	char sub[4][96];
	const char *dirs[4];
	for (int i = 0; i < 4; i++) {
		snprintf(sub[i], sizeof sub[i], "%s/t-%d", dir, i);
		cr_assert_eq(mkdir(sub[i], 0755), 0);
		cr_assert_eq(sluice_ckpt_epochs_write(sub[i], e, 2, false), 0);
		dirs[i] = sub[i];
	}
	uint32_t failed = 99;
	cr_expect_eq(sluice_ckpt_epochs_sync(dirs, 0, &failed), 0, "nothing to sync");
	cr_expect_eq(sluice_ckpt_epochs_sync(dirs, 4, &failed), 0);
	char gone[128];
	snprintf(gone, sizeof gone, "%s/" SLUICE_CKPT_EPOCHS_FILE, sub[1]);
	cr_assert_eq(unlink(gone), 0);
	cr_assert_eq(rmdir(sub[1]), 0);
	cr_expect_eq(sluice_ckpt_epochs_sync(dirs, 4, &failed), 0, "a deleted partition is passed over");
	/* A checkpoint that cannot be opened (a symbolic link to itself). */
	snprintf(gone, sizeof gone, "%s/" SLUICE_CKPT_EPOCHS_FILE, sub[2]);
	cr_assert_eq(unlink(gone), 0);
	cr_assert_eq(symlink(gone, gone), 0);
	int rc = sluice_ckpt_epochs_sync(dirs, 4, &failed);
	cr_expect_eq(rc, -ELOOP, "a checkpoint that cannot be opened fails");
	cr_expect_eq(failed, 2, "the failure names its directory");
	cr_assert_eq(unlink(gone), 0);
	struct sluice_ckpt_epoch r[4];
	uint32_t n = 0;
	bool dropped = false;
	char err[200] = "";
	cr_assert_eq(sluice_ckpt_epochs_read(sub[3], r, 4, &n, &dropped, err, sizeof err), 1, "%s", err);
	cr_expect(n == 2 && r[1].epoch == 3 && r[1].start_offset == 40);
}

/* Proves a file longer than the reader's room keeps its newest entries. */
Test(checkpoint, epochs_newest_kept)
{
	put(SLUICE_CKPT_EPOCHS_FILE, "0\n4\n1 10\n2 20\n3 30\n4 40\n");
	struct sluice_ckpt_epoch r[2];
	uint32_t n;
	bool dropped;
	char err[200];
	cr_assert_eq(sluice_ckpt_epochs_read(dir, r, 2, &n, &dropped, err, sizeof err), 1);
	cr_expect(n == 2 && dropped);
	cr_expect(r[0].epoch == 3 && r[0].start_offset == 30 && r[1].epoch == 4 && r[1].start_offset == 40);
}

/* Proves every kind of epoch file that is not the format is refused. */
Test(checkpoint, epochs_refused)
{
	static const char *const bad[] = {
		"1\n1\n0 0\n",        /* version 1 */
		"0\n2\n0 0\n",        /* fewer lines than the count */
		"0\n1\n0 0\n1 5\n",   /* more */
		"0\n1\n0 0",          /* no newline at the end */
		"0\n1\nx 0\n",        /* not a number */
		"0\n1\n-1 0\n",       /* a negative epoch */
		"0\n1\n0 -4\n",       /* a negative offset */
		"0\n2\n3 0\n2 10\n",  /* epochs going back */
		"0\n2\n1 10\n2 10\n", /* start offsets not increasing */
		"0\n1\n0 0 0\n",      /* a third field */
		"0\n1\n0  0\n",       /* two spaces */
		"0\n-1\n",            /* a negative count */
		"",                   /* empty */
		"0\n1\n2147483648 0\n", /* an epoch past int32 */
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		put(SLUICE_CKPT_EPOCHS_FILE, bad[i]);
		struct sluice_ckpt_epoch r[4];
		uint32_t n = 7;
		bool dropped;
		char err[200] = "";
		cr_expect_eq(sluice_ckpt_epochs_read(dir, r, 4, &n, &dropped, err, sizeof err), -1, "file %zu accepted",
			     i);
		cr_expect_eq(n, 0, "file %zu: no entries handed out", i);
		cr_expect_neq(err[0], '\0', "file %zu: a reason", i);
	}
}

struct seen {
	char topic[64][32];
	int32_t partition[64];
	int64_t offset[64];
	int n;
};

static void collect(const char *topic, size_t len, int32_t partition, int64_t offset, void *arg)
{
	struct seen *s = arg;
	cr_assert_lt(s->n, 64);
	cr_assert_lt(len, 32);
	memcpy(s->topic[s->n], topic, len);
	s->topic[s->n][len] = '\0';
	s->partition[s->n] = partition;
	s->offset[s->n] = offset;
	s->n++;
}

/* Proves the offsets file's format and round trip, built line by line. */
Test(checkpoint, offsets_round_trip)
{
	char *body = NULL, path[128];
	size_t len = 0, cap = 0;
	cr_assert_eq(sluice_ckpt_offsets_line(&body, &len, &cap, "orders", 0, 42), 0);
	cr_assert_eq(sluice_ckpt_offsets_line(&body, &len, &cap, "__consumer_offsets", 17, 0), 0);
	cr_assert_eq(sluice_ckpt_offsets_line(&body, &len, &cap, "a.b-c_d", 2147483647, 9000000000ll), 0);
	cr_expect_eq(sluice_ckpt_offsets_line(&body, &len, &cap, "has space", 0, 1), -1);
	cr_expect_eq(sluice_ckpt_offsets_line(&body, &len, &cap, "", 0, 1), -1);
	snprintf(path, sizeof path, "%s/" SLUICE_CKPT_HW_FILE, dir);
	cr_assert_eq(sluice_ckpt_offsets_write(path, body, len, 3), 0);
	free(body);
	cr_expect_str_eq(slurp(SLUICE_CKPT_HW_FILE),
			 "0\n3\norders 0 42\n__consumer_offsets 17 0\na.b-c_d 2147483647 9000000000\n");
	cr_expect_eq(files_in_dir(), 1);
	struct seen s = {0};
	char err[200] = "";
	cr_assert_eq(sluice_ckpt_offsets_read(path, collect, &s, err, sizeof err), 1, "%s", err);
	cr_assert_eq(s.n, 3);
	cr_expect_str_eq(s.topic[1], "__consumer_offsets");
	cr_expect(s.partition[2] == 2147483647 && s.offset[2] == 9000000000ll);
	cr_expect_eq(sluice_ckpt_offsets_write(path, NULL, 0, 0), 0);
	cr_expect_str_eq(slurp(SLUICE_CKPT_HW_FILE), "0\n0\n");
	snprintf(path, sizeof path, "%s/none", dir);
	cr_expect_eq(sluice_ckpt_offsets_read(path, collect, &s, err, sizeof err), 0, "absent");
}

/* Proves offsets files that are not the format are refused. */
Test(checkpoint, offsets_refused)
{
	static const char *const bad[] = {
		"0\n1\nt 0\n", "0\n1\nt 0 1 2\n", "0\n1\n 0 1\n", "0\n1\nt -1 1\n", "0\n1\nt 0 -1\n",
		"0\n2\nt 0 1\n", "0\n1\nt 0 1\nu 0 1\n", "1\n0\n", "0\n99999999\nt 0 1\n", "0\n1\nt 0 1",
	};
	char path[128];
	snprintf(path, sizeof path, "%s/" SLUICE_CKPT_HW_FILE, dir);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		put(SLUICE_CKPT_HW_FILE, bad[i]);
		struct seen s = {0};
		char err[200] = "";
		cr_expect_eq(sluice_ckpt_offsets_read(path, collect, &s, err, sizeof err), -1, "file %zu accepted", i);
		cr_expect_neq(err[0], '\0');
	}
}
