/* libFuzzer target for partition-log recovery (storage/plog.c, open): each
 * input describes damage done to a small valid partition directory (bytes
 * flipped or zeroed, a file cut short, garbage appended, a stray segment
 * file, an index deleted) after a clean stop, and whether the next start
 * counts as clean. The directory is rebuilt in a temporary directory for
 * every input and opened. What must hold, whatever the damage:
 *   - no crash, no sanitizer report;
 *   - an open that refuses the partition changed nothing on disk;
 *   - an open that succeeds deletes no acknowledged record: every batch of
 *     the original log that lies wholly before the first damaged byte of
 *     its file is served, byte for byte, at its offset; everything served
 *     passes its CRC with offsets increasing within a response (across
 *     responses a rotted BaseOffset, which no CRC covers, may repeat
 *     offsets: Kafka's format cannot tell);
 *   - offsets are never given out twice: the log end is at least the old
 *     one (the recovery point file, which holds it, is never damaged here);
 *   - a second (clean) open of what the first left serves the same.
 * The template log is built once (LLVMFuzzerInitialize) with the real
 * append path and a clean close, so no io_uring is needed. */
#include "common/kafka/batch.h"
#include "common/kafka/codec.h"
#include "common/log.h"
#include "storage/plog.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILES_MAX 64        /* files of the template directory */
#define BATCHES_MAX 256     /* batches of the template log */
#define OPS_MAX 6           /* damage operations per input */
#define OP_BYTES 8          /* kind, file, 4-byte position, 2-byte argument */
#define GARBAGE_MAX 600     /* bytes one append of garbage adds */
#define SEGMENT_BYTES 12000 /* small segments: a handful of them */

struct tfile {
	char name[64];
	uint8_t *data;
	size_t len;
	int64_t damage; /* first damaged byte this round (INT64_MAX: none) */
};

struct tbatch {
	int file;       /* index into files */
	int64_t pos, len, base;
};

static struct tfile files[FILES_MAX];
static int nfiles;
static struct tbatch batches[BATCHES_MAX];
static int nbatches;
static int64_t leo;
static char root[128], dir[192];
static int damageable[FILES_MAX]; /* the segment files (.log, .index, .timeindex) */
static int ndamageable;

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return ftw->level == 0 ? 0 : remove(p);
}

static void empty_dir(void) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int rm_any(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

/* The scratch directory goes when the fuzzer exits normally (a crash leaves
 * it for the post-mortem). */
static void remove_root(void)
{
	if (root[0])
		nftw(root, rm_any, 16, FTW_DEPTH | FTW_PHYS);
}

static struct sluice_plog *open_dir(bool clean, int *rc, char *err, size_t errlen)
{
	struct sluice_plog_cfg cfg = {.segment_bytes = SEGMENT_BYTES, .index_interval_bytes = 1024,
				      .flush_interval_messages = INT64_MAX, .direct_io = false};
	struct sluice_plog_hooks hooks = {NULL, NULL, NULL};
	struct sluice_plog *l = NULL;
	*rc = sluice_plog_open(dir, &cfg, clean, &hooks, &l, NULL, err, errlen);
	return l;
}

/* One batch of n records with values of value_len bytes, all tag. */
static uint8_t *make_batch(int n, size_t value_len, uint8_t tag, size_t *len)
{
	uint8_t *val = malloc(value_len);
	memset(val, tag, value_len);
	struct sluice_record_kv *recs = calloc((size_t)n, sizeof *recs);
	for (int i = 0; i < n; i++) {
		recs[i].value = val;
		recs[i].value_len = (int32_t)value_len;
	}
	struct kwr w;
	kwr_init(&w, 256, 1u << 24);
	int64_t at = sluice_batch_build(&w, recs, n, 1000 + tag);
	free(recs);
	free(val);
	if (at != 0) {
		kwr_free(&w);
		return NULL;
	}
	*len = w.len;
	return w.buf;
}

static void load_template(void)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) && nfiles < FILES_MAX) {
		if (e->d_name[0] == '.' || strlen(e->d_name) >= sizeof files[0].name)
			continue;
		struct tfile *f = &files[nfiles++];
		snprintf(f->name, sizeof f->name, "%s", e->d_name);
		char p[300];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		FILE *in = fopen(p, "rb");
		fseek(in, 0, SEEK_END);
		f->len = (size_t)ftell(in);
		f->data = malloc(f->len + 1);
		fseek(in, 0, SEEK_SET);
		if (fread(f->data, 1, f->len, in) != f->len)
			abort();
		fclose(in);
		size_t nl = strlen(f->name);
		if (nl != 24 || strcmp(f->name + 20, ".log") != 0)
			continue;
		for (int64_t pos = 0; pos + SLUICE_BATCH_HEADER_BYTES <= (int64_t)f->len && nbatches < BATCHES_MAX;) {
			struct sluice_batch b;
			if (sluice_batch_check_crc(f->data + pos, f->len - (size_t)pos, &b) != SLUICE_BATCH_OK)
				abort();
			batches[nbatches++] = (struct tbatch){nfiles - 1, pos, sluice_batch_total_bytes(&b), b.base_offset};
			pos += sluice_batch_total_bytes(&b);
		}
	}
	if (d)
		closedir(d);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	sluice_log_set_level(SLUICE_LOG_ERROR);
	sluice_log_level_current = -1; /* recovery reports every damage it meets: quiet here */
	/* tmpfs when there is one: every input rewrites the directory and the
	 * opens fsync (on tmpfs, for free) */
	struct stat st;
	snprintf(root, sizeof root, "%s/sluice-fuzz-recovery-XXXXXX",
		 stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp");
	if (!mkdtemp(root))
		abort();
	atexit(remove_root);
	snprintf(dir, sizeof dir, "%s/t-0", root);
	int rc;
	char err[512];
	struct sluice_plog *l = open_dir(true, &rc, err, sizeof err);
	if (rc != 0)
		abort();
	for (int i = 0; i < 30; i++) {
		size_t len;
		uint8_t *b = make_batch(1 + i % 3, 700 + (size_t)(i * 37 % 900), (uint8_t)(i + 1), &len);
		int64_t base, last;
		if (!b || sluice_plog_append(l, b, len, 0, -1, &base, &last) != 0)
			abort();
		free(b);
	}
	leo = sluice_plog_log_end(l);
	sluice_plog_close(l);
	load_template();
	for (int i = 0; i < nfiles; i++)
		if (strspn(files[i].name, "0123456789") == 20)
			damageable[ndamageable++] = i;
	if (nbatches < 20 || ndamageable < 6)
		abort();
	return 0;
}

static void write_file(const char *name, const uint8_t *data, size_t len)
{
	char p[300];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *f = fopen(p, "wb");
	if (!f || (len && fwrite(data, 1, len, f) != len))
		abort();
	fclose(f);
}

static void note_damage(int fi, int64_t at)
{
	if (at < files[fi].damage)
		files[fi].damage = at;
}

/* Apply one damage operation to the files on disk. */
static void damage(const uint8_t *op, const uint8_t *rest, size_t rest_len)
{
	int fi = damageable[op[1] % ndamageable];
	struct tfile *f = &files[fi];
	uint32_t at = kbe32(op + 2);
	uint16_t arg = (uint16_t)(op[6] << 8 | op[7]);
	char p[300];
	snprintf(p, sizeof p, "%s/%s", dir, f->name);
	struct stat st;
	if (stat(p, &st) < 0)
		return;
	int64_t size = st.st_size;
	int fd = open(p, O_RDWR);
	if (fd < 0)
		return;
	switch (op[0] % 6) {
	case 0: /* flip bits of one byte */
	case 1: /* zero a run of bytes */
		if (size > 0) {
			int64_t pos = at % size;
			uint8_t buf[256];
			size_t n = op[0] % 6 == 0 ? 1 : 1 + arg % sizeof buf;
			if (pos + (int64_t)n > size)
				n = (size_t)(size - pos);
			if (pread(fd, buf, n, pos) != (ssize_t)n)
				break;
			for (size_t i = 0; i < n; i++)
				buf[i] = op[0] % 6 == 0 ? (uint8_t)(buf[i] ^ (arg | 1)) : 0;
			if (pwrite(fd, buf, n, pos) == (ssize_t)n)
				note_damage(fi, pos);
		}
		break;
	case 2: /* cut short */
		if (size > 0 && ftruncate(fd, at % size) == 0)
			note_damage(fi, at % size);
		break;
	case 3: { /* garbage appended (the input's own bytes) */
		size_t n = arg % GARBAGE_MAX;
		uint8_t buf[GARBAGE_MAX];
		for (size_t i = 0; i < n; i++)
			buf[i] = rest_len ? rest[i % rest_len] : (uint8_t)i;
		if (n && pwrite(fd, buf, n, size) == (ssize_t)n)
			note_damage(fi, size);
		break;
	}
	case 4: { /* a stray segment file: this file's bytes from a batch on, under another name */
		char name[64];
		snprintf(name, sizeof name, "%020" PRId64 ".log", (int64_t)(at % (uint32_t)(leo + 40)));
		int b = arg % nbatches;
		int64_t skip = batches[b].file == fi ? batches[b].pos : 0;
		if ((size_t)skip > f->len)
			break;
		char q[300];
		snprintf(q, sizeof q, "%s/%s", dir, name);
		if (access(q, F_OK) == 0)
			break; /* never replace a real segment: that is damage of another kind */
		write_file(name, f->data + skip, f->len - (size_t)skip);
		break;
	}
	default: /* an index deleted */
		if (strstr(f->name, "index"))
			(void)unlink(p);
	}
	close(fd);
}

struct snap {
	char name[FILES_MAX + OPS_MAX][64];
	int64_t size[FILES_MAX + OPS_MAX];
	uint64_t hash[FILES_MAX + OPS_MAX];
	int n;
};

static void snapshot(struct snap *s)
{
	s->n = 0;
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) && s->n < FILES_MAX + OPS_MAX) {
		if (e->d_name[0] == '.' || strlen(e->d_name) >= 64)
			continue;
		char p[300];
		snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
		snprintf(s->name[s->n], 64, "%s", e->d_name);
		uint64_t h = 1469598103934665603ull;
		int64_t size = 0;
		FILE *f = fopen(p, "rb");
		int c;
		while (f && (c = getc(f)) != EOF) {
			h = (h ^ (uint8_t)c) * 1099511628211ull;
			size++;
		}
		if (f)
			fclose(f);
		s->size[s->n] = size;
		s->hash[s->n] = h;
		s->n++;
	}
	if (d)
		closedir(d);
}

static void check_unchanged(const struct snap *before, const char *err)
{
	struct snap now;
	snapshot(&now);
	bool same = now.n == before->n;
	for (int i = 0; same && i < before->n; i++) {
		int j = 0;
		while (j < now.n && strcmp(now.name[j], before->name[i]) != 0)
			j++;
		same = j < now.n && now.size[j] == before->size[i] && now.hash[j] == before->hash[i];
	}
	if (!same) {
		fprintf(stderr, "open refused the partition (%s) but changed its files\n", err);
		abort();
	}
}

/* The log as served: every batch intact before its file's damage is there
 * at its offset, byte for byte; everything served is CRC-good, in order. */
static void check_log(struct sluice_plog *l)
{
	if (sluice_plog_log_end(l) < leo) {
		fprintf(stderr, "log end %" PRId64 " below the old end %" PRId64 ": offsets reused\n",
			sluice_plog_log_end(l), leo);
		abort();
	}
	for (int i = 0; i < nbatches; i++) {
		const struct tbatch *b = &batches[i];
		if (b->pos + b->len > files[b->file].damage)
			continue;
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, b->base, 1, true, &buf);
		if (n < b->len || memcmp(buf, files[b->file].data + b->pos, (size_t)b->len) != 0) {
			fprintf(stderr, "intact batch at offset %" PRId64 " (%s, byte %" PRId64 ") not served: %d\n",
				b->base, files[b->file].name, b->pos, n);
			abort();
		}
		free(buf);
	}
	int64_t off = sluice_plog_log_start(l), hw = sluice_plog_written_end(l);
	int steps = 0;
	while (off < hw && steps++ < 4 * BATCHES_MAX) {
		uint8_t *buf = NULL;
		int32_t n = sluice_plog_read(l, off, 1 << 20, true, &buf);
		if (n <= 0) {
			/* damage (-3) or a gap: go on at the next batch the template
			 * knows, or give up past them */
			free(buf);
			int64_t next = INT64_MAX;
			for (int i = 0; i < nbatches; i++)
				if (batches[i].base > off && batches[i].base < next)
					next = batches[i].base;
			if (n == -1 || n == -2 || next == INT64_MAX)
				break;
			off = next;
			continue;
		}
		int64_t last = -1, before = off;
		for (int32_t q = 0; q < n;) {
			struct sluice_batch b;
			if (sluice_batch_check_crc(buf + q, (size_t)(n - q), &b) != SLUICE_BATCH_OK ||
			    b.base_offset <= last) {
				fprintf(stderr, "served a bad or out-of-order batch at %" PRId64 " (base %" PRId64 ", last %" PRId64
					", %d bytes)\n", off, b.base_offset, last, n);
				abort();
			}
			last = b.base_offset + b.last_offset_delta;
			off = last + 1;
			q += sluice_batch_total_bytes(&b);
		}
		free(buf);
		if (off <= before)
			off = before + 1;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	empty_dir();
	(void)mkdir(dir, 0755);
	for (int i = 0; i < nfiles; i++) {
		write_file(files[i].name, files[i].data, files[i].len);
		files[i].damage = INT64_MAX;
	}
	bool clean = data[0] & 1;
	size_t nops = (size - 1) / OP_BYTES;
	if (nops > OPS_MAX)
		nops = OPS_MAX;
	const uint8_t *rest = data + 1 + nops * OP_BYTES;
	size_t rest_len = size - 1 - nops * OP_BYTES;
	for (size_t i = 0; i < nops; i++)
		damage(data + 1 + i * OP_BYTES, rest, rest_len);
	struct snap before;
	snapshot(&before);
	int rc;
	char err[512];
	struct sluice_plog *l = open_dir(clean, &rc, err, sizeof err);
	if (rc != 0) {
		if (rc != SLUICE_PLOG_OPEN_UNUSABLE || errno == ENOMEM || l) {
			fprintf(stderr, "open failed unexpectedly (%d): %s\n", rc, err);
			abort();
		}
		check_unchanged(&before, err);
		return 0;
	}
	check_log(l);
	sluice_plog_close(l);
	l = open_dir(true, &rc, err, sizeof err);
	if (rc != 0) {
		fprintf(stderr, "a clean reopen after recovery failed: %s\n", err);
		abort();
	}
	check_log(l);
	sluice_plog_close(l);
	return 0;
}
