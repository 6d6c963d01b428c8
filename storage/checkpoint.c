/* Kafka's checkpoint files (see checkpoint.h): atomic writes through a
 * temporary file, and strict readers over the whole file in memory. */
#include "storage/checkpoint.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH_BYTES 1024
#define CKPT_EPOCHS_FILE_BYTES_MAX (1 << 20) /* a cache of a few entries; anything larger is not ours */

/* The directory part of path (for its fsync). */
static int dir_of(const char *path, char *out, size_t len)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return snprintf(out, len, ".") < (int)len ? 0 : -1;
	size_t n = (size_t)(slash - path);
	if (n == 0)
		n = 1; /* "/" itself */
	if (n >= len)
		return -1;
	memcpy(out, path, n);
	out[n] = '\0';
	return 0;
}

/* Write head then body to path through path.tmp; durable: fsync both the
 * file and, after the rename, its directory. */
static int file_replace(const char *path, const char *head, size_t head_len, const char *body, size_t body_len,
			bool durable)
{
	char tmp[CKPT_PATH_BYTES + 8], dir[CKPT_PATH_BYTES];
	if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp || dir_of(path, dir, sizeof dir) < 0)
		return -ENAMETOOLONG;
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	int rc = 0;
	const char *parts[2] = {head, body};
	size_t lens[2] = {head_len, body_len};
	for (int i = 0; i < 2 && rc == 0; i++) {
		size_t done = 0;
		while (done < lens[i]) {
			ssize_t w = write(fd, parts[i] + done, lens[i] - done);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				rc = w < 0 ? -errno : -EIO;
				break;
			}
			done += (size_t)w;
		}
	}
	if (rc == 0 && durable && fdatasync(fd) < 0)
		rc = -errno;
	if (close(fd) < 0 && rc == 0)
		rc = -errno;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -errno;
	if (rc < 0) {
		(void)unlink(tmp);
		return rc;
	}
	if (durable) {
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd < 0)
			return -errno;
		rc = fsync(dfd) < 0 ? -errno : 0;
		close(dfd);
	}
	return rc;
}

/* The whole file at path, NUL-terminated (*len without the NUL). Returns 1,
 * 0 when absent, -1 with err filled. */
static int file_slurp(const char *path, int64_t max, char **out, size_t *len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		snprintf(err, errlen, "open: %s", strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > max) {
		snprintf(err, errlen, "%s", !S_ISREG(st.st_mode) ? "not a regular file" : "larger than any checkpoint");
		close(fd);
		return -1;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t done = 0;
	while (buf && done < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + done, (size_t)st.st_size - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		done += (size_t)r;
	}
	close(fd);
	if (!buf || done != (size_t)st.st_size) {
		snprintf(err, errlen, "%s", buf ? "short read" : "out of memory");
		free(buf);
		return -1;
	}
	buf[done] = '\0';
	*out = buf;
	*len = done;
	return 1;
}

/* A line reader over a file in memory: each line must end in '\n'. */
struct lines {
	char *p, *end;
	int64_t no; /* the line number of the last line taken, for messages */
};

/* The next line, NUL-terminated in place (its '\n' overwritten), or NULL
 * at the end or before an unterminated line. */
static char *line_next(struct lines *ls)
{
	if (ls->p >= ls->end)
		return NULL;
	char *nl = memchr(ls->p, '\n', (size_t)(ls->end - ls->p));
	if (!nl)
		return NULL;
	*nl = '\0';
	char *line = ls->p;
	ls->p = nl + 1;
	ls->no++;
	return line;
}

/* A decimal integer in [lo, hi] from *s, which must then be at a space (or
 * the end of the line when last). */
static bool field_int(char **s, int64_t lo, int64_t hi, bool last, int64_t *out)
{
	char *p = *s, *end;
	if (!(*p >= '0' && *p <= '9') && *p != '-')
		return false;
	errno = 0;
	long long v = strtoll(p, &end, 10);
	if (errno || end == p || v < lo || v > hi || (last ? *end != '\0' : *end != ' '))
		return false;
	*s = last ? end : end + 1;
	*out = v;
	return true;
}

/* The version and count lines. Returns the count, or -1. */
static int64_t header_read(struct lines *ls, int64_t count_max, char *err, size_t errlen)
{
	char *v = line_next(ls), *c = v ? line_next(ls) : NULL;
	int64_t version, count;
	if (!v || !field_int(&v, 0, 0, true, &version)) {
		snprintf(err, errlen, "line 1: not version 0");
		return -1;
	}
	if (!c || !field_int(&c, 0, count_max, true, &count)) {
		snprintf(err, errlen, "line 2: not an entry count");
		return -1;
	}
	return count;
}

/* ---- leader-epoch-checkpoint --------------------------------------------------- */

int sluice_ckpt_epochs_write(const char *dir, const struct sluice_ckpt_epoch *e, uint32_t n, bool durable)
{
	char path[CKPT_PATH_BYTES], head[32];
	if (snprintf(path, sizeof path, "%s/" SLUICE_CKPT_EPOCHS_FILE, dir) >= (int)sizeof path)
		return -ENAMETOOLONG;
	size_t cap = (size_t)n * 32 + 1, len = 0;
	char *body = malloc(cap);
	if (!body)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		assert(e[i].epoch >= 0 && e[i].start_offset >= 0);
		assert(i == 0 || (e[i].epoch > e[i - 1].epoch && e[i].start_offset > e[i - 1].start_offset));
		len += (size_t)snprintf(body + len, cap - len, "%" PRId32 " %" PRId64 "\n", e[i].epoch, e[i].start_offset);
		assert(len < cap);
	}
	int hl = snprintf(head, sizeof head, "0\n%" PRIu32 "\n", n);
	int rc = file_replace(path, head, (size_t)hl, body, len, durable);
	free(body);
	return rc;
}

int sluice_ckpt_epochs_sync(const char *const *dirs, uint32_t n, uint32_t *failed)
{
	assert(n <= SLUICE_CKPT_SYNC_BATCH_MAX);
	*failed = 0;
	if (n == 0)
		return 0;
	int fds[2 * SLUICE_CKPT_SYNC_BATCH_MAX];
	uint32_t owner[2 * SLUICE_CKPT_SYNC_BATCH_MAX]; /* fds[k] belongs to dirs[owner[k]] */
	uint32_t nfd = 0;
	int rc = 0;
	for (uint32_t i = 0; i < n && rc == 0; i++) {
		char path[CKPT_PATH_BYTES];
		if (snprintf(path, sizeof path, "%s/" SLUICE_CKPT_EPOCHS_FILE, dirs[i]) >= (int)sizeof path) {
			rc = -ENAMETOOLONG;
			*failed = i;
			break;
		}
		int f = open(path, O_RDONLY | O_CLOEXEC);
		int d = f >= 0 ? open(dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
		if (f < 0 || d < 0) {
			int e = errno;
			if (f >= 0)
				close(f);
			if (e == ENOENT)
				continue; /* the partition is gone: nothing of it to keep */
			rc = -e;
			*failed = i;
			break;
		}
		fds[nfd] = f;
		owner[nfd++] = i;
		fds[nfd] = d;
		owner[nfd++] = i;
	}
	struct io_uring ring;
	int q = rc == 0 && nfd ? io_uring_queue_init(nfd, &ring, 0) : 0;
	if (rc == 0 && nfd && q < 0) {
		/* No ring to be had (memlock, descriptors): one by one. */
		for (uint32_t k = 0; k < nfd && rc == 0; k++)
			if ((k % 2 == 0 ? fdatasync(fds[k]) : fsync(fds[k])) < 0) {
				rc = -errno;
				*failed = owner[k];
			}
	} else if (rc == 0 && nfd) {
		for (uint32_t k = 0; k < nfd; k++) {
			struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
			assert(sqe); /* the ring holds nfd entries */
			io_uring_prep_fsync(sqe, fds[k], k % 2 == 0 ? IORING_FSYNC_DATASYNC : 0);
			io_uring_sqe_set_data64(sqe, k);
		}
		uint32_t done = 0;
		int s = io_uring_submit(&ring);
		if (s < 0) {
			rc = s;
			*failed = owner[0];
		}
		while (rc == 0 && done < nfd) {
			struct io_uring_cqe *cqe;
			int w = io_uring_wait_cqe(&ring, &cqe);
			if (w == -EINTR)
				continue;
			if (w < 0) {
				rc = w;
				*failed = owner[0];
				break;
			}
			if (cqe->res < 0) {
				rc = cqe->res;
				*failed = owner[io_uring_cqe_get_data64(cqe)];
			}
			io_uring_cqe_seen(&ring, cqe);
			done++;
		}
		/* A submission or wait failure may leave syncs in flight: they
		 * hold their own references to the files past the closes. */
		io_uring_queue_exit(&ring);
	}
	for (uint32_t k = 0; k < nfd; k++)
		close(fds[k]);
	return rc;
}

int sluice_ckpt_epochs_read(const char *dir, struct sluice_ckpt_epoch *e, uint32_t max, uint32_t *n, bool *dropped,
			    char *err, size_t errlen)
{
	char path[CKPT_PATH_BYTES];
	*n = 0;
	*dropped = false;
	if (snprintf(path, sizeof path, "%s/" SLUICE_CKPT_EPOCHS_FILE, dir) >= (int)sizeof path) {
		snprintf(err, errlen, "path too long");
		return -1;
	}
	char *buf = NULL;
	size_t len = 0;
	int rc = file_slurp(path, CKPT_EPOCHS_FILE_BYTES_MAX, &buf, &len, err, errlen);
	if (rc <= 0)
		return rc;
	struct lines ls = {buf, buf + len, 0};
	int64_t count = header_read(&ls, INT32_MAX, err, errlen);
	int32_t last_epoch = -1;
	int64_t last_start = -1;
	for (int64_t i = 0; count >= 0 && i < count; i++) {
		char *s = line_next(&ls);
		int64_t epoch, start;
		if (!s || !field_int(&s, 0, INT32_MAX, false, &epoch) || !field_int(&s, 0, INT64_MAX, true, &start)) {
			snprintf(err, errlen, "line %" PRId64 ": not \"<epoch> <start offset>\"", ls.no);
			count = -1;
			break;
		}
		if (epoch <= last_epoch || start <= last_start) {
			snprintf(err, errlen, "line %" PRId64 ": epochs and start offsets do not increase", ls.no);
			count = -1;
			break;
		}
		last_epoch = (int32_t)epoch;
		last_start = start;
		if (*n == max) { /* keep the newest max */
			memmove(e, e + 1, (size_t)(max - 1) * sizeof *e);
			(*n)--;
			*dropped = true;
		}
		if (max > 0)
			e[(*n)++] = (struct sluice_ckpt_epoch){(int32_t)epoch, start};
	}
	if (count >= 0 && ls.p != ls.end) {
		snprintf(err, errlen, "bytes after the %" PRId64 " entries the count names", count);
		count = -1;
	}
	free(buf);
	if (count < 0)
		*n = 0;
	assert(*n <= max);
	return count < 0 ? -1 : 1;
}

/* ---- offsets checkpoints ---------------------------------------------------------- */

int sluice_ckpt_offsets_line(char **body, size_t *len, size_t *cap, const char *topic, int32_t partition,
			     int64_t offset)
{
	size_t tl = strlen(topic);
	if (tl == 0 || strpbrk(topic, " \n") || partition < 0 || offset < 0)
		return -1;
	size_t need = *len + tl + 40;
	if (need > *cap) {
		size_t ncap = *cap ? *cap * 2 : 4096;
		while (ncap < need)
			ncap *= 2;
		char *nb = realloc(*body, ncap);
		if (!nb)
			return -1;
		*body = nb;
		*cap = ncap;
	}
	int w = snprintf(*body + *len, *cap - *len, "%s %" PRId32 " %" PRId64 "\n", topic, partition, offset);
	assert(w > 0 && (size_t)w < *cap - *len);
	*len += (size_t)w;
	return 0;
}

int sluice_ckpt_offsets_write(const char *path, const char *body, size_t len, uint32_t count)
{
	char head[32];
	int hl = snprintf(head, sizeof head, "0\n%" PRIu32 "\n", count);
	return file_replace(path, head, (size_t)hl, body ? body : "", len, true);
}

int sluice_ckpt_offsets_read(const char *path,
			     void (*fn)(const char *topic, size_t topic_len, int32_t partition, int64_t offset, void *arg),
			     void *arg, char *err, size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	int rc = file_slurp(path, SLUICE_CKPT_FILE_BYTES_MAX, &buf, &len, err, errlen);
	if (rc <= 0)
		return rc;
	struct lines ls = {buf, buf + len, 0};
	/* A line takes at least 6 bytes ("t 0 0\n"): a count past that is a lie. */
	int64_t count = header_read(&ls, (int64_t)len / 6 + 1, err, errlen);
	for (int64_t i = 0; count >= 0 && i < count; i++) {
		char *s = line_next(&ls);
		char *sp = s ? strchr(s, ' ') : NULL;
		int64_t partition, offset;
		char *rest = sp ? sp + 1 : NULL;
		if (!sp || sp == s || !field_int(&rest, 0, INT32_MAX, false, &partition) ||
		    !field_int(&rest, 0, INT64_MAX, true, &offset)) {
			snprintf(err, errlen, "line %" PRId64 ": not \"<topic> <partition> <offset>\"", ls.no);
			count = -1;
			break;
		}
		fn(s, (size_t)(sp - s), (int32_t)partition, offset, arg);
	}
	if (count >= 0 && ls.p != ls.end) {
		snprintf(err, errlen, "bytes after the %" PRId64 " entries the count names", count);
		count = -1;
	}
	free(buf);
	return count < 0 ? -1 : 1;
}
