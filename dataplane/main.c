/* sluice-broker: loads server.properties (with --override key=value),
 * recovers, starts the storage and network cores, and runs until SIGTERM or
 * SIGINT, then stops the network first, lets storage finish its writes and
 * close every log cleanly, and leaves the clean-shutdown marker.
 * Single-node mode (no controller.quorum.voters) keeps its topics in a local
 * file (control/meta_local.c). Cluster mode takes them from sluice-controller
 * (control/meta_controller.c): the broker waits until it is registered and
 * caught up before it looks at its data directories, adopts the topics of
 * an earlier single-node life once, never removes a directory it does not
 * know, and on SIGTERM asks the controller to move its leadership away
 * before it stops. */
#include "common/kafka/errors.h"
#include "common/log.h"
#include "common/sdnotify.h"
#include "dataplane/core.h"
#include "dataplane/group.h"
#include "dataplane/metrics.h"
#include <dirent.h>
#include <assert.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLEAN_MARKER ".kafka_cleanshutdown"

static struct broker *the_broker;
static volatile sig_atomic_t signalled; /* SIGTERM or SIGINT came */
/* Written by the signal handler, read by main's wait: a process-directed
 * signal may run its handler on any thread that does not block it (a
 * core's, the EAL's), and main, waiting in pause(), then never woke (a
 * dpdk broker that did not stop in 30 s after SIGTERM, once in CI). */
static int wake_fd = -1;

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	(void)remove(path);
	return 0;
}

/* Single-node: stop now. Cluster mode: main first has the controller move
 * this broker's leadership away (clients are served meanwhile), then stops. */
static void on_signal(int sig)
{
	(void)sig;
	int saved = errno;
	signalled = 1;
	if (the_broker && !sluice_config_cluster_mode(&the_broker->cfg))
		__atomic_store_n(&the_broker->stopping, 1, __ATOMIC_RELEASE);
	uint64_t one = 1;
	if (wake_fd >= 0 && write(wake_fd, &one, sizeof one) < 0)
		(void)0; /* the counter is full: main wakes anyway */
	errno = saved;
}

static void usage(void)
{
	fprintf(stderr, "usage: sluice-broker server.properties [--override key=value ...] [--adopt-orphans | --remove-orphans]\n");
}

/* ---- start-up check: every partition directory against the topic metadata ----
 *
 * A broker never deletes data it cannot prove is garbage. A directory
 * "<topic>-<n>" is a live partition (the topic exists, n is below its count,
 * its partition.metadata names no other topic id), or a deleted topic's
 * (its partition.metadata names a topic id the metadata keeps a tombstone
 * for: a crash came between the deletion and the rename): only those are
 * removed. Anything else is an orphan, and the broker refuses to start,
 * listing each, unless the operator says --adopt-orphans (recreate the
 * topics from them) or --remove-orphans (delete them). */

enum orphan_mode { ORPHANS_REFUSE, ORPHANS_ADOPT, ORPHANS_REMOVE };

struct orphan {
	char path[SLUICE_CONFIG_STRING_MAX + 300];
	char topic[SLUICE_TOPIC_NAME_MAX + 1];
	int32_t partition;
	int has_id; /* partition.metadata: 1 read, 0 absent, -1 unreadable */
	uint8_t id[16];
	bool earlier; /* an earlier topic of the name (another topic id): cluster mode sets it aside as stray */
	char why[400];
};

struct orphans {
	struct orphan *v;
	size_t n, cap;
	int removed;
};

/* "<topic>-<n>" with a valid topic name and n of at most 9 digits. */
static bool partition_dir_name(const char *name, char topic[SLUICE_TOPIC_NAME_MAX + 1], int32_t *partition)
{
	const char *dash = strrchr(name, '-');
	if (!dash || dash == name || name[0] == '.' || !dash[1] || strlen(dash + 1) > 9)
		return false;
	for (const char *c = dash + 1; *c; c++)
		if (*c < '0' || *c > '9')
			return false;
	size_t tl = (size_t)(dash - name);
	if (tl > SLUICE_TOPIC_NAME_MAX || !sluice_topic_name_valid(name, tl))
		return false;
	memcpy(topic, name, tl);
	topic[tl] = '\0';
	*partition = atoi(dash + 1);
	return true;
}

/* Rename to Kafka's "-delete" form first, then remove the files: a crash in
 * between leaves a directory that is removed at the next start. */
static int remove_partition_dir(const char *path)
{
	uint8_t u[16];
	char gone[SLUICE_CONFIG_STRING_MAX + 400];
	if (getrandom(u, sizeof u, 0) != (ssize_t)sizeof u)
		memset(u, 0, sizeof u);
	int n = snprintf(gone, sizeof gone, "%s.", path);
	for (int i = 0; i < 16; i++)
		n += snprintf(gone + n, sizeof gone - (size_t)n, "%02x", u[i]);
	snprintf(gone + n, sizeof gone - (size_t)n, "-delete");
	if (rename(path, gone) < 0)
		return -1;
	(void)nftw(gone, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

/* Files and bytes directly in a partition directory, for the report. */
static void dir_usage(const char *path, int *files, long long *bytes)
{
	*files = 0;
	*bytes = 0;
	DIR *d = opendir(path);
	if (!d)
		return;
	struct dirent *e;
	struct stat st;
	char f[SLUICE_CONFIG_STRING_MAX + 600];
	while ((e = readdir(d)))
		if (e->d_name[0] != '.') {
			snprintf(f, sizeof f, "%s/%s", path, e->d_name);
			if (stat(f, &st) == 0 && S_ISREG(st.st_mode)) {
				(*files)++;
				*bytes += st.st_size;
			}
		}
	closedir(d);
}

static void classify_dir(struct broker *b, const struct sluice_meta_snapshot *snap, const char *path, const char *topic,
			 int32_t part, struct orphans *o)
{
	uint8_t id[16];
	char hex[23], live[23];
	bool cluster = sluice_config_cluster_mode(&b->cfg); /* no tombstones there: nothing is removed */
	int has_id = sluice_partition_metadata_read(path, id);
	const struct sluice_topic *t = sluice_meta_find(snap, topic, strlen(topic));
	if (t && part < t->partitions && (has_id == 0 || (has_id == 1 && !memcmp(id, t->id, 16))))
		return; /* a live partition */
	const struct sluice_meta_tombstone *dead =
		has_id == 1 && !cluster ? sluice_meta_local_tombstone(&b->meta, id) : NULL;
	if (dead && !strcmp(dead->name, topic)) {
		sluice_topic_id_base64(id, hex);
		if (remove_partition_dir(path) == 0) {
			SLOG_WARN("broker", "removed %s: a partition of deleted topic %s (id %s)", path, topic, hex);
			o->removed++;
		} else
			SLOG_WARN("broker", "cannot remove %s (deleted topic %s): %s; left as it is", path, topic, strerror(errno));
		return;
	}
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 64;
		struct orphan *nv = realloc(o->v, cap * sizeof *nv);
		if (!nv) {
			fprintf(stderr, "sluice-broker: out of memory\n");
			exit(1);
		}
		o->v = nv;
		o->cap = cap;
	}
	struct orphan *x = &o->v[o->n++];
	memset(x, 0, sizeof *x);
	snprintf(x->path, sizeof x->path, "%s", path);
	snprintf(x->topic, sizeof x->topic, "%s", topic);
	x->partition = part;
	x->has_id = has_id;
	memcpy(x->id, id, has_id == 1 ? 16 : 0);
	if (has_id == 1)
		sluice_topic_id_base64(id, hex);
	if (has_id < 0)
		snprintf(x->why, sizeof x->why, "its partition.metadata cannot be read");
	else if (!cluster && !sluice_meta_local_found(&b->meta))
		snprintf(x->why, sizeof x->why, "there is no topic metadata at all");
	else if (!t)
		snprintf(x->why, sizeof x->why, "topic %s is not in the topic metadata", topic);
	else if (part >= t->partitions)
		snprintf(x->why, sizeof x->why, "topic %s has %d partition(s), this is partition %d", topic, t->partitions,
			 part);
	else {
		x->earlier = true;
		sluice_topic_id_base64(t->id, live);
		snprintf(x->why, sizeof x->why, "it belongs to topic id %s, the topic %s now has id %s", hex, topic, live);
	}
	if (has_id == 1)
		snprintf(x->why + strlen(x->why), sizeof x->why - strlen(x->why), " (partition.metadata: topic id %s)", hex);
}

static void scan_partition_dirs(struct broker *b, struct orphans *o)
{
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		if (b->offline_dirs & (1u << d))
			continue;
		DIR *dir = opendir(b->cfg.log_dir[d]);
		struct dirent *e;
		while (dir && (e = readdir(dir))) {
			char topic[SLUICE_TOPIC_NAME_MAX + 1], path[SLUICE_CONFIG_STRING_MAX + 300];
			int32_t part;
			struct stat st;
			snprintf(path, sizeof path, "%s/%s", b->cfg.log_dir[d], e->d_name);
			if (partition_dir_name(e->d_name, topic, &part) && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
				classify_dir(b, snap, path, topic, part, o);
		}
		if (dir)
			closedir(dir);
	}
	b->meta.ops->release(b->meta.self, snap);
}

static int cmp_orphan(const void *a, const void *b)
{
	const struct orphan *x = a, *y = b;
	int c = strcmp(x->topic, y->topic);
	return c ? c : (x->partition > y->partition) - (x->partition < y->partition);
}

static void refuse_orphans(const struct broker *b, const struct orphans *o, const char *config, int meta_dir)
{
	fprintf(stderr, "sluice-broker: refusing to start: %zu partition director%s not accounted for by the topic "
		"metadata (%s/sluice-topics: %s). Nothing was deleted.\n", o->n, o->n == 1 ? "y is" : "ies are",
		b->cfg.log_dir[meta_dir], sluice_meta_local_found(&b->meta) ? "present" : "missing");
	for (size_t i = 0; i < o->n; i++) {
		int files;
		long long bytes;
		dir_usage(o->v[i].path, &files, &bytes);
		fprintf(stderr, "  %s: %s; %d file(s), %lld byte(s)\n", o->v[i].path, o->v[i].why, files, bytes);
	}
	fprintf(stderr,
		"Resolve it with one of:\n"
		"  - if the topic metadata was lost or replaced: stop, restore sluice-topics and sluice-topics.journal\n"
		"    into %s from a backup, and start again;\n"
		"  - sluice-broker %s --adopt-orphans\n"
		"    starts after recreating the topics from these directories (partition count: the highest\n"
		"    partition number + 1; topic id: from partition.metadata where present);\n"
		"  - sluice-broker %s --remove-orphans\n"
		"    starts after deleting these directories and everything in them.\n"
		"(docs/operations.md: start-up refusals)\n",
		b->cfg.log_dir[meta_dir], config, config);
}

/* Recreate the topics of the orphans, or grow the topic they are beyond. */
static int adopt_orphans(struct broker *b, struct orphans *o)
{
	qsort(o->v, o->n, sizeof *o->v, cmp_orphan);
	for (size_t i = 0, j; i < o->n; i = j) {
		const uint8_t *id = NULL;
		int32_t count = 0;
		for (j = i; j < o->n && !strcmp(o->v[j].topic, o->v[i].topic); j++) {
			count = o->v[j].partition + 1 > count ? o->v[j].partition + 1 : count;
			if (o->v[j].has_id == 1 && id && memcmp(id, o->v[j].id, 16)) {
				fprintf(stderr, "sluice-broker: --adopt-orphans: the directories of topic %s name different topic "
					"ids (%s and others): they are not one topic; remove the wrong ones by hand or use "
					"--remove-orphans\n", o->v[i].topic, o->v[j].path);
				return -1;
			}
			if (o->v[j].has_id == 1)
				id = o->v[j].id;
		}
		struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
		const struct sluice_topic *t = sluice_meta_find(snap, o->v[i].topic, strlen(o->v[i].topic));
		bool other = t && id && memcmp(id, t->id, 16);
		int32_t have = t ? t->partitions : 0;
		b->meta.ops->release(b->meta.self, snap);
		char msg[256] = "";
		int16_t e = 0;
		if (other) {
			snprintf(msg, sizeof msg, "the directories belong to an earlier topic of that name (another topic id)");
			e = -1;
		} else if (have && count > have)
			e = b->meta.ops->create_partitions(b->meta.self, o->v[i].topic, strlen(o->v[i].topic), count, false, msg,
							   sizeof msg);
		else if (!have) {
			struct sluice_topic_spec spec;
			memset(&spec, 0, sizeof spec);
			spec.name = o->v[i].topic;
			spec.name_len = strlen(o->v[i].topic);
			spec.partitions = count;
			spec.replication_factor = -1;
			spec.id = id;
			if (!strcmp(o->v[i].topic, SLUICE_OFFSETS_TOPIC)) { /* as the group coordinator creates it */
				spec.config_n = 1;
				snprintf(spec.configs[0].key, sizeof spec.configs[0].key, "cleanup.policy");
				snprintf(spec.configs[0].value, sizeof spec.configs[0].value, "compact");
			}
			e = b->meta.ops->create_topic(b->meta.self, &spec, false, msg, sizeof msg, NULL);
		}
		if (e) {
			fprintf(stderr, "sluice-broker: --adopt-orphans: cannot adopt topic %s: %s; use --remove-orphans or "
				"resolve by hand\n", o->v[i].topic, msg);
			return -1;
		}
		/* The directories now name the topic's id (an unreadable file is replaced). */
		snap = b->meta.ops->acquire(b->meta.self);
		t = sluice_meta_find(snap, o->v[i].topic, strlen(o->v[i].topic));
		for (size_t k = i; t && k < j; k++)
			if (sluice_partition_metadata_write(o->v[k].path, t->id) < 0)
				SLOG_WARN("broker", "cannot write %s/partition.metadata: %s", o->v[k].path, strerror(errno));
		b->meta.ops->release(b->meta.self, snap);
		SLOG_WARN("broker", "adopted %zu director%s as topic %s with %d partition(s)%s", j - i, j - i == 1 ? "y" : "ies",
			  o->v[i].topic, count > have ? count : have, id ? " (topic id from partition.metadata)" : "");
	}
	return 0;
}

static int check_partition_dirs(struct broker *b, enum orphan_mode mode, const char *config, int meta_dir)
{
	struct orphans o = {0};
	scan_partition_dirs(b, &o);
	int rc = 0;
	if (o.n && mode == ORPHANS_REFUSE) {
		refuse_orphans(b, &o, config, meta_dir);
		rc = -1;
	} else if (o.n && mode == ORPHANS_ADOPT)
		rc = adopt_orphans(b, &o);
	else if (o.n && mode == ORPHANS_REMOVE) {
		for (size_t i = 0; i < o.n; i++) {
			if (remove_partition_dir(o.v[i].path) < 0) {
				fprintf(stderr, "sluice-broker: --remove-orphans: cannot remove %s: %s\n", o.v[i].path, strerror(errno));
				rc = -1;
				break;
			}
			SLOG_WARN("broker", "removed %s as the operator asked (--remove-orphans): %s", o.v[i].path, o.v[i].why);
		}
	}
	/* Every directory of a deleted topic is gone from the directories we
	 * can see: its tombstone is not needed any more (a failed directory may
	 * still hold some, so then they stay). */
	if (rc == 0 && !b->offline_dirs && sluice_meta_local_forget_all(&b->meta) < 0)
		SLOG_WARN("broker", "cannot rewrite the topic metadata without its tombstones: %s", strerror(errno));
	if (rc == 0 && o.removed)
		SLOG_INFO("broker", "start-up check: %d director%s of deleted topics removed", o.removed,
			  o.removed == 1 ? "y" : "ies");
	if (rc == 0 && o.n)
		SLOG_INFO("broker", "start-up check: %zu orphan director%s %s as the operator asked", o.n,
			  o.n == 1 ? "y" : "ies", mode == ORPHANS_ADOPT ? "adopted" : "removed");
	free(o.v);
	return rc;
}

/* Partition directories ("<topic>-<n>") in a data directory; stray
 * "-delete" directories left by a crash during topic deletion are removed.
 * Kafka's "-stray" directories (an earlier topic of the same name, set
 * aside in cluster mode: storage_core.c part_stray) are never partitions:
 * kept, with a warning at each start, as Kafka's "Loaded stray log". */
static int32_t count_partition_dirs(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int32_t n = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *dash = strrchr(e->d_name, '-');
		if (!dash || e->d_name[0] == '.')
			continue;
		if (!strcmp(dash, "-delete")) {
			char path[SLUICE_CONFIG_STRING_MAX + 300];
			snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
			(void)nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
			continue;
		}
		if (!strcmp(dash, "-stray")) {
			SLOG_WARN("broker", "%s/%s: a stray partition directory (an earlier topic of the same name, set aside); "
				  "left as it is: remove it once its data is not needed", dir, e->d_name);
			continue;
		}
		bool digits = dash[1] != '\0';
		for (const char *c = dash + 1; *c; c++)
			digits &= *c >= '0' && *c <= '9';
		n += digits;
	}
	closedir(d);
	return n;
}

static int mkdirs(const char *path)
{
	char tmp[SLUICE_CONFIG_STRING_MAX];
	snprintf(tmp, sizeof tmp, "%s", path);
	for (char *p = tmp + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(tmp, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* The command line: the config file, then --override key=value and one of
 * --adopt-orphans / --remove-orphans. Returns -1 to go on, else the exit code. */
static int parse_args(struct broker *b, int argc, char **argv, enum orphan_mode *orphans)
{
	char err[512] = "";
	assert(argc >= 2);
	sluice_config_defaults(&b->cfg);
	if (sluice_config_load_file(&b->cfg, argv[1], err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: %s\n", err);
		return 1;
	}
	*orphans = ORPHANS_REFUSE;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--adopt-orphans") || !strcmp(argv[i], "--remove-orphans")) {
			enum orphan_mode mm = argv[i][2] == 'a' ? ORPHANS_ADOPT : ORPHANS_REMOVE;
			if (*orphans != ORPHANS_REFUSE && *orphans != mm) {
				usage();
				return 2;
			}
			*orphans = mm;
			continue;
		}
		if (strcmp(argv[i], "--override") || i + 1 >= argc) {
			usage();
			return 2;
		}
		char *kv = argv[++i], *eq = strchr(kv, '=');
		if (!eq) {
			fprintf(stderr, "sluice-broker: --override %s: expected key=value\n", kv);
			return 2;
		}
		*eq = '\0';
		if (sluice_config_set(&b->cfg, kv, eq + 1, err, sizeof err) < 0) {
			fprintf(stderr, "sluice-broker: %s\n", err);
			return 1;
		}
	}
	if (sluice_config_finish(&b->cfg, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: %s\n", err);
		return 1;
	}
	if (*orphans != ORPHANS_REFUSE && sluice_config_cluster_mode(&b->cfg)) {
		fprintf(stderr, "sluice-broker: --adopt-orphans and --remove-orphans are for single-node mode; in cluster mode "
			"(controller.quorum.voters) a directory the cluster does not know is left in place with a warning\n");
		return 2;
	}
	return -1;
}

/* One data directory: created if need be, locked for life (Kafka's .lock),
 * its partitions counted, and whether the last run left it clean. Returns
 * -1 when another broker holds it; a directory that cannot be created is
 * offline (Kafka's rule: one bad directory is tolerated while another works). */
static int open_data_dir(struct broker *b, int d)
{
	assert(d >= 0 && d < b->cfg.log_dir_count);
	if (mkdirs(b->cfg.log_dir[d]) < 0) {
		SLOG_ERR("broker", "log.dirs: cannot create %s: %s; it is offline", b->cfg.log_dir[d], strerror(errno));
		b->offline_dirs |= 1u << d;
		return 0;
	}
	char lock[SLUICE_CONFIG_STRING_MAX + 32];
	snprintf(lock, sizeof lock, "%s/.lock", b->cfg.log_dir[d]);
	int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) < 0) {
		fprintf(stderr, "sluice-broker: log.dirs: %s is in use by another broker (%s)\n", b->cfg.log_dir[d],
			lfd < 0 ? strerror(errno) : "locked");
		return -1;
	}
	char marker[SLUICE_CONFIG_STRING_MAX + 32];
	snprintf(marker, sizeof marker, "%s/%s", b->cfg.log_dir[d], CLEAN_MARKER);
	struct stat st;
	b->dir_partitions[d] = count_partition_dirs(b->cfg.log_dir[d]);
	/* A directory holding no partition yet (a first start) has nothing to
	 * recover, marker or not. */
	if (stat(marker, &st) < 0 && b->dir_partitions[d] > 0)
		b->clean_start = false;
	return 0;
}

/* The clean-shutdown marker of every usable directory: removed once the
 * start is certain (a crash is then noticed), written after a clean stop. */
static void clean_markers(struct broker *b, bool write)
{
	for (int d = 0; d < b->cfg.log_dir_count; d++) {
		if (__atomic_load_n(&b->offline_dirs, __ATOMIC_ACQUIRE) & (1u << d))
			continue; /* a failed directory is not vouched for */
		char marker[SLUICE_CONFIG_STRING_MAX + 32];
		snprintf(marker, sizeof marker, "%s/%s", b->cfg.log_dir[d], CLEAN_MARKER);
		if (!write) {
			unlink(marker);
			continue;
		}
		int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
}

/* Topic metadata from the first usable directory, then the partition
 * directories checked against it. Returns -1 after saying why not. */
static int open_metadata(struct broker *b, const char *config, enum orphan_mode orphans)
{
	char err[512] = "";
	int meta_dir = 0;
	while (b->offline_dirs & (1u << meta_dir))
		meta_dir++;
	assert(meta_dir < b->cfg.log_dir_count);
	if (sluice_meta_local_open(&b->meta, b->cfg.log_dir[meta_dir], b->cfg.num_partitions, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: refusing to start: topic metadata: %s\n"
			"If it cannot be restored, move sluice-topics and sluice-topics.journal away: the next start lists "
			"the partition directories it finds and offers --adopt-orphans (recreate their topics) or "
			"--remove-orphans (delete them). (docs/operations.md: start-up refusals)\n", err);
		return -1;
	}
	sluice_meta_local_set_node(&b->meta, &b->cfg);
	if (check_partition_dirs(b, orphans, config, meta_dir) < 0)
		return -1;
	/* __consumer_offsets is created when groups are first used (as in
	 * Kafka); once it exists, groups are placed by its real partition count,
	 * whatever offsets.topic.num.partitions says now. */
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *ot = sluice_meta_find(snap, SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC));
	if (ot)
		b->cfg.offsets_topic_partitions = ot->partitions;
	b->meta.ops->release(b->meta.self, snap);
	return 0;
}

/* ---- cluster mode: metadata from the controllers ------------------------------
 *
 * Adoption: the first start in cluster mode of a broker that ran alone
 * finds its old topic metadata (sluice-topics and its journal) in the
 * metadata directory. Every topic there is created through the controller
 * with its topic id, partition count and configs, its partitions placed on
 * this broker (where the data is); a topic the cluster already has with the
 * same id counts as adopted (a start that stopped half-way is repeated).
 * Only when every topic is in the cluster are the files renamed to
 * *.adopted: kept, never deleted, and not adopted again. */

#define ADOPTED_SUFFIX ".adopted"
#define ADOPTED_RENAMES_MAX 1000 /* numbered names tried when *.adopted exists already */

/* The one partition state adoption asked for, checked: warn of any
 * partition the controller placed elsewhere (its data here is not served). */
static void adopt_check_placement(struct broker *b, const char *name)
{
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *t = sluice_meta_find(snap, name, strlen(name));
	for (int32_t p = 0; t && p < t->partitions; p++) {
		const struct sluice_partition_state *st = sluice_topic_partition(t, p);
		bool here = false;
		for (int32_t i = 0; st && i < st->replica_n; i++)
			here |= st->replicas[i] == b->cfg.node_id;
		if (st && !here)
			SLOG_WARN("broker", "adoption: %s-%d was placed on broker %d, not on this one (%d): its data here is "
				  "left in place and not served", name, p, st->replica_n ? st->replicas[0] : -1, b->cfg.node_id);
	}
	b->meta.ops->release(b->meta.self, snap);
}

/* One topic of the old metadata into the cluster. Returns 0 or -1 (said why). */
static int adopt_topic(struct broker *b, const struct sluice_topic *t)
{
	struct sluice_topic_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.name = t->name;
	spec.name_len = strlen(t->name);
	spec.partitions = t->partitions;
	spec.replication_factor = -1;
	assert(t->config_n >= 0 && t->config_n <= SLUICE_TOPIC_CONFIGS_MAX);
	spec.config_n = t->config_n;
	memcpy(spec.configs, t->configs, (size_t)t->config_n * sizeof spec.configs[0]);
	spec.id = t->id;
	spec.replica_node = &b->cfg.node_id;
	char msg[SLUICE_META_MSG_MAX] = "", id[23], other[23];
	int16_t e = b->meta.ops->create_topic(b->meta.self, &spec, false, msg, sizeof msg, NULL);
	if (e == KERR_TOPIC_ALREADY_EXISTS) {
		struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
		const struct sluice_topic *ct = sluice_meta_find(snap, t->name, strlen(t->name));
		bool same = ct && !memcmp(ct->id, t->id, 16);
		int32_t have = ct ? ct->partitions : 0;
		sluice_topic_id_base64(ct ? ct->id : t->id, other);
		b->meta.ops->release(b->meta.self, snap);
		sluice_topic_id_base64(t->id, id);
		if (!same && !strcmp(t->name, SLUICE_OFFSETS_TOPIC)) {
			/* Another broker created the cluster's first: this broker's
			 * committed offsets cannot join it (its directories stay). */
			SLOG_WARN("broker", "adoption: the cluster has its own %s (topic id %s, here %s): this broker's "
				  "committed group offsets are not adopted; their directories are left in place",
				  SLUICE_OFFSETS_TOPIC, other, id);
			return 0;
		}
		if (!same) {
			fprintf(stderr, "sluice-broker: refusing to start: adoption: topic %s exists in the cluster with topic id "
				"%s, this broker's data has id %s: not the same topic. Nothing was changed here; rename or delete "
				"one of them (docs/cluster.md)\n", t->name, other, id);
			return -1;
		}
		e = have < t->partitions ? b->meta.ops->create_partitions(b->meta.self, t->name, strlen(t->name),
									 t->partitions, false, msg, sizeof msg)
					 : KERR_NONE;
	}
	if (e) {
		fprintf(stderr, "sluice-broker: refusing to start: adoption: cannot create topic %s through the controller: "
			"%s (error %d); nothing was renamed, the next start tries again\n", t->name, msg, e);
		return -1;
	}
	adopt_check_placement(b, t->name);
	return 0;
}

/* path -> path.adopted, or path.adopted.N when that exists (kept, never
 * overwritten). A missing path is fine. */
static int adopt_rename(const char *path)
{
	char to[SLUICE_CONFIG_STRING_MAX + 64];
	struct stat st;
	if (stat(path, &st) < 0)
		return errno == ENOENT ? 0 : -1;
	snprintf(to, sizeof to, "%s%s", path, ADOPTED_SUFFIX);
	for (int n = 1; n <= ADOPTED_RENAMES_MAX && stat(to, &st) == 0; n++)
		snprintf(to, sizeof to, "%s%s.%d", path, ADOPTED_SUFFIX, n);
	return rename(path, to);
}

static int adopt_local_metadata(struct broker *b, const char *dir)
{
	char snap_path[SLUICE_CONFIG_STRING_MAX + 32], journal_path[SLUICE_CONFIG_STRING_MAX + 32], err[512] = "";
	struct stat st;
	snprintf(snap_path, sizeof snap_path, "%s/sluice-topics", dir);
	snprintf(journal_path, sizeof journal_path, "%s/sluice-topics.journal", dir);
	if (stat(snap_path, &st) < 0 && stat(journal_path, &st) < 0)
		return 0; /* never ran alone, or adopted already */
	struct sluice_meta local = {0};
	if (sluice_meta_local_open(&local, dir, b->cfg.num_partitions, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: refusing to start: adoption: the single-node topic metadata in %s cannot be "
			"read: %s. Nothing was changed (docs/cluster.md)\n", dir, err);
		return -1;
	}
	struct sluice_meta_snapshot *old = local.ops->acquire(local.self);
	int rc = 0;
	for (uint32_t i = 0; i < old->topic_n && rc == 0; i++)
		rc = adopt_topic(b, old->topics[i]);
	uint32_t n = old->topic_n;
	local.ops->release(local.self, old);
	sluice_meta_local_close(&local);
	if (rc < 0)
		return -1;
	if (adopt_rename(snap_path) < 0 || adopt_rename(journal_path) < 0) {
		fprintf(stderr, "sluice-broker: refusing to start: adoption: cannot rename %s (and its journal) to %s: %s; "
			"every topic is in the cluster already, the next start finds them there\n", snap_path, ADOPTED_SUFFIX,
			strerror(errno));
		return -1;
	}
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	SLOG_WARN("broker", "adoption: %u topic(s) of this broker's single-node metadata are now the cluster's; %s kept "
		  "as %s%s", n, snap_path, snap_path, ADOPTED_SUFFIX);
	return 0;
}

/* __consumer_offsets is created at start in cluster mode (through the
 * controller, by whichever broker comes first), so that every broker
 * places groups by the same partition count from the start; with
 * offsets.topic.replication.factor replicas, which the controller places
 * only once that many brokers are active: until then this fails and the
 * group requests try again (api_group.c), answered COORDINATOR_NOT_AVAILABLE. */
static void offsets_topic_cluster(struct broker *b)
{
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	bool have = sluice_meta_find(snap, SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC)) != NULL;
	b->meta.ops->release(b->meta.self, snap);
	if (!have) {
		struct sluice_topic_spec spec;
		memset(&spec, 0, sizeof spec);
		spec.name = SLUICE_OFFSETS_TOPIC;
		spec.name_len = strlen(SLUICE_OFFSETS_TOPIC);
		spec.partitions = b->cfg.offsets_topic_partitions;
		spec.replication_factor = b->cfg.offsets_topic_replication_factor;
		spec.config_n = 1; /* as the group coordinator creates it (api_group.c) */
		snprintf(spec.configs[0].key, sizeof spec.configs[0].key, "cleanup.policy");
		snprintf(spec.configs[0].value, sizeof spec.configs[0].value, "compact");
		char msg[SLUICE_META_MSG_MAX] = "";
		int16_t e = b->meta.ops->create_topic(b->meta.self, &spec, false, msg, sizeof msg, NULL);
		if (e && e != KERR_TOPIC_ALREADY_EXISTS)
			SLOG_INFO("broker", "cannot create %s now (%s, error %d): group requests try again, answered "
				  "COORDINATOR_NOT_AVAILABLE until it exists", SLUICE_OFFSETS_TOPIC, msg, e);
	}
}

/* Directories the cluster does not account for: warned about, left alone. */
static void check_partition_dirs_cluster(struct broker *b)
{
	struct orphans o = {0};
	scan_partition_dirs(b, &o);
	assert(o.removed == 0);
	for (size_t i = 0; i < o.n; i++)
		if (o.v[i].earlier)
			SLOG_WARN("broker", "%s: %s; renamed to %s.<random hex>-stray and kept when its storage core opens the "
				  "partition, which then starts empty (Kafka's stray logs)", o.v[i].path, o.v[i].why,
				  o.v[i].path);
		else
			SLOG_WARN("broker", "%s: %s; left in place (cluster mode never removes a directory it does not know)",
				  o.v[i].path, o.v[i].why);
	free(o.v);
}

/* Cluster mode: the controller backend, ready (registered, caught up,
 * unfenced) before anything on disk is judged. Returns -1 after saying why. */
static int open_metadata_cluster(struct broker *b)
{
	char err[512] = "";
	int meta_dir = 0;
	while (b->offline_dirs & (1u << meta_dir))
		meta_dir++;
	assert(meta_dir < b->cfg.log_dir_count);
	if (sluice_meta_controller_open(&b->meta, &b->cfg, b->cfg.log_dir[meta_dir], err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: cluster mode: %s\n", err);
		return -1;
	}
	SLOG_INFO("broker", "cluster mode: waiting up to %lld ms (sluice.controller.wait.ms) to be registered and caught up "
		  "with the controllers (%s)", (long long)b->cfg.controller_wait_ms,
		  b->cfg.controller_quorum_voters[0] ? b->cfg.controller_quorum_voters
						     : b->cfg.controller_quorum_bootstrap_servers);
	sluice_sdnotify_send("STATUS=waiting to be registered and caught up with the controllers");
	if (sluice_meta_controller_wait_ready(&b->meta, (unsigned)b->cfg.controller_wait_ms, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: refusing to start: not ready within sluice.controller.wait.ms=%lld: %s\n",
			(long long)b->cfg.controller_wait_ms, err);
		sluice_meta_controller_close(&b->meta);
		return -1;
	}
	if (adopt_local_metadata(b, b->cfg.log_dir[meta_dir]) < 0) {
		sluice_meta_controller_close(&b->meta);
		return -1;
	}
	offsets_topic_cluster(b);
	check_partition_dirs_cluster(b);
	struct sluice_meta_snapshot *snap = b->meta.ops->acquire(b->meta.self);
	const struct sluice_topic *ot = sluice_meta_find(snap, SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC));
	if (ot)
		b->cfg.offsets_topic_partitions = ot->partitions;
	b->meta.ops->release(b->meta.self, snap);
	return 0;
}

/* The rings between every network and storage core, and the network cores'
 * listeners. Returns -1 after saying why not. */
static int cores_init(struct broker *b)
{
	assert(b->net_n > 0 && b->net_n <= SLUICE_CORES_MAX);
	assert(b->store_n > 0 && b->store_n <= SLUICE_CORES_MAX);
	for (int s = 0; s < b->store_n; s++) {
		b->store[s].id = s;
		b->store[s].b = b;
		b->store[s].in = calloc((size_t)b->net_n, sizeof(struct sluice_ring));
		b->store[s].out = calloc((size_t)b->net_n, sizeof(struct sluice_ring));
		for (int n = 0; n < b->net_n; n++)
			if (!b->store[s].in || !b->store[s].out ||
			    sluice_ring_init(&b->store[s].in[n], SLUICE_RING_SLOTS) < 0 ||
			    sluice_ring_init(&b->store[s].out[n], SLUICE_RING_SLOTS) < 0) {
				fprintf(stderr, "sluice-broker: out of memory\n");
				return -1;
			}
	}
	for (int n = 0; n < b->net_n; n++) {
		b->net[n].id = n;
		b->net[n].b = b;
		if (sluice_netcore_init(&b->net[n]) < 0) {
			fprintf(stderr, "sluice-broker: listeners: cannot listen on %s:%d\n", b->cfg.listen_host,
				b->cfg.listen_port);
			return -1;
		}
	}
	return 0;
}

/* The metadata thread published a snapshot: every storage core takes it
 * on its next turn (leadership_sweep), now rather than after its sleep. */
static void wake_stores(void *arg)
{
	struct broker *b = arg;
	for (int s = 0; s < b->store_n; s++)
		sluice_rt_wake(&b->store[s].rt);
}

/* Storage cores first (they recover their logs), then the network cores. */
static int cores_start(struct broker *b)
{
	for (int s = 0; s < b->store_n; s++)
		if (sluice_storage_core_start(&b->store[s]) < 0) {
			fprintf(stderr, "sluice-broker: cannot start storage core %d\n", s);
			return -1;
		}
	if (sluice_config_cluster_mode(&b->cfg))
		sluice_meta_controller_on_publish(&b->meta, wake_stores, b);
	for (int n = 0; n < b->net_n; n++)
		if (sluice_netcore_start(&b->net[n]) < 0) {
			fprintf(stderr, "sluice-broker: cannot start network core %d\n", n);
			return -1;
		}
	return 0;
}

/* Every network core stops (each closes its connections and drains them,
 * together) before any is finalised: they share one listening socket, which
 * the first core's fini closes. b->stopping, set already, keeps them from
 * accepting meanwhile. Then the storage cores close their logs. */
static void cores_stop(struct broker *b)
{
	assert(__atomic_load_n(&b->stopping, __ATOMIC_ACQUIRE) >= 1);
	if (sluice_config_cluster_mode(&b->cfg))
		sluice_meta_controller_on_publish(&b->meta, NULL, NULL);
	for (int n = 0; n < b->net_n; n++)
		sluice_rt_stop(&b->net[n].rt);
	for (int n = 0; n < b->net_n; n++)
		sluice_rt_join(&b->net[n].rt);
	for (int n = 0; n < b->net_n; n++)
		sluice_netcore_fini(&b->net[n]);
	__atomic_store_n(&b->stopping, 2, __ATOMIC_RELEASE);
	for (int s = 0; s < b->store_n; s++) {
		sluice_rt_stop(&b->store[s].rt);
		sluice_storage_core_join(&b->store[s]);
	}
}

/* The counters and the admin listener (sluice.admin.listener), bound
 * before any data directory is touched: a bad or busy address stops the
 * start there, naming the key. /ready answers 503 until the cores serve.
 * Returns -1 after saying why not. */
static int metrics_start(struct broker *b)
{
	char err[512] = "";
	b->metrics = sluice_metrics_new(b);
	if (!b->metrics) {
		fprintf(stderr, "sluice-broker: out of memory (metrics)\n");
		return -1;
	}
	if (sluice_metrics_listen(b->metrics, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: %s\n", err);
		return -1;
	}
	return 0;
}

/* Serving (on) or going (off): GET /ready and systemd's readiness say the
 * same thing at the same moment, once the listener is open and every core
 * runs (Type=notify units wait for READY=1; rolling restarts wait for /ready). */
static void serving_set(struct broker *b, bool on)
{
	assert(b->metrics);
	__atomic_store_n(&b->metrics->ready, on ? 1 : 0, __ATOMIC_RELEASE);
	if (on)
		sluice_sdnotify_sendf("READY=1\nSTATUS=serving on %s:%d (node %d, transport %s)", b->cfg.listen_host,
				      b->cfg.listen_port, b->cfg.node_id, b->cfg.transport);
	else
		sluice_sdnotify_send(sluice_config_cluster_mode(&b->cfg)
					     ? "STOPPING=1\nSTATUS=controlled shutdown: moving leadership away, then stopping"
					     : "STOPPING=1\nSTATUS=stopping");
}

/* Cluster mode, SIGTERM: the controller moves this broker's leadership
 * away (clients keep being served meanwhile and follow with
 * NOT_LEADER_OR_FOLLOWER), bounded by sluice.controller.shutdown.wait.ms. */
static void controlled_shutdown(struct broker *b)
{
	SLOG_INFO("broker", "controlled shutdown: asking the controller to move this broker's leadership away (up to %lld "
		  "ms)", (long long)b->cfg.controller_shutdown_wait_ms);
	if (sluice_meta_controller_shutdown(&b->meta, (unsigned)b->cfg.controller_shutdown_wait_ms) != 0)
		SLOG_WARN("broker", "controlled shutdown: the controller did not agree within %lld ms "
			  "(sluice.controller.shutdown.wait.ms); stopping anyway", (long long)b->cfg.controller_shutdown_wait_ms);
}

int main(int argc, char **argv)
{
	static struct broker b;
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	enum orphan_mode orphans;
	int rc = parse_args(&b, argc, argv, &orphans);
	if (rc >= 0)
		return rc;
	signal(SIGPIPE, SIG_IGN);
	b.ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	/* The transport first (the dpdk one starts its EAL and ports, and its
	 * lcores say how many network cores there are): a device that cannot
	 * start stops the broker before any data directory is touched. */
	b.net_n = sluice_netcore_prepare(&b);
	if (b.net_n < 0)
		return 1;
	b.store_n = b.cfg.storage_threads;
	if (metrics_start(&b) < 0)
		return 1;
	b.clean_start = true;
	sluice_sdnotify_send("STATUS=opening the data directories");
	for (int d = 0; d < b.cfg.log_dir_count; d++)
		if (open_data_dir(&b, d) < 0)
			return 1;
	if (__builtin_popcount(b.offline_dirs) == b.cfg.log_dir_count) {
		fprintf(stderr, "sluice-broker: log.dirs: no usable data directory\n");
		return 1;
	}
	if (!b.clean_start)
		SLOG_WARN("broker", "no clean-shutdown marker: logs will be recovered (CRC scan past the recovery point)");
	bool cluster = sluice_config_cluster_mode(&b.cfg);
	if (cluster ? open_metadata_cluster(&b) < 0 : open_metadata(&b, argv[1], orphans) < 0)
		return 1;
	/* Only now, with the start certain, is the marker removed: a refused
	 * start leaves the directory exactly as it found it. */
	clean_markers(&b, false);
	if (cores_init(&b) < 0)
		return 1;
	the_broker = &b;
	wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (wake_fd < 0) {
		fprintf(stderr, "sluice-broker: eventfd: %s\n", strerror(errno));
		return 1;
	}
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sluice_sdnotify_send("STATUS=recovering logs and starting the cores");
	if (cores_start(&b) < 0)
		return 1;
	SLOG_INFO("broker", "sluice-broker node %d listening on %s:%d (advertised %s:%d), transport %s, "
		  "%d network core(s), %d storage core(s), log.dirs=%s",
		  b.cfg.node_id, b.cfg.listen_host, b.cfg.listen_port, b.cfg.advertised_host, b.cfg.advertised_port,
		  b.cfg.transport, b.net_n, b.store_n, b.cfg.log_dirs);
	/* Serving: the cores' counters may be read, /ready says 200, systemd hears READY=1. */
	__atomic_store_n(&b.metrics->cores_live, 1, __ATOMIC_RELEASE);
	serving_set(&b, true);
	while (!signalled && !__atomic_load_n(&b.stopping, __ATOMIC_ACQUIRE)) {
		/* Woken by the handler, whichever thread ran it; once a second
		 * regardless, for a stop set without a signal. */
		struct pollfd pfd = {.fd = wake_fd, .events = POLLIN};
		if (poll(&pfd, 1, 1000) > 0) {
			uint64_t v;
			if (read(wake_fd, &v, sizeof v) < 0)
				(void)0;
		}
	}
	serving_set(&b, false); /* going: rolling restarts wait elsewhere */
	if (cluster)
		controlled_shutdown(&b);
	SLOG_INFO("broker", "shutting down");
	__atomic_store_n(&b.stopping, 1, __ATOMIC_RELEASE);
	/* The admin listener ends before the cores it reads are freed. */
	sluice_metrics_unlisten(b.metrics);
	__atomic_store_n(&b.metrics->cores_live, 0, __ATOMIC_RELEASE);
	cores_stop(&b);
	sluice_metrics_free(b.metrics);
	b.metrics = NULL;
	if (cluster)
		sluice_meta_controller_close(&b.meta);
	else
		sluice_meta_local_close(&b.meta);
	clean_markers(&b, true);
	SLOG_INFO("broker", "stopped cleanly");
	return 0;
}
