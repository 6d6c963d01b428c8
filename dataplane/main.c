/* sluice-broker: loads server.properties (with --override key=value),
 * recovers, starts the storage and network cores, and runs until SIGTERM or
 * SIGINT, then stops the network first, lets storage finish its writes and
 * close every log cleanly, and leaves the clean-shutdown marker. */
#include "common/log.h"
#include "dataplane/core.h"
#include "dataplane/group.h"
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLEAN_MARKER ".kafka_cleanshutdown"

static struct broker *the_broker;

void sluice_core_wake(int *sleeping, int efd)
{
	if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST) &&
	    __atomic_exchange_n(sleeping, 0, __ATOMIC_SEQ_CST)) {
		uint64_t one = 1;
		ssize_t w = write(efd, &one, sizeof one);
		(void)w;
	}
}

void sluice_core_pin(struct broker *b, pthread_t t, int slot)
{
	if (!b->cfg.cpu_affinity || b->ncpu <= 0)
		return;
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(slot % b->ncpu, &set);
	pthread_setaffinity_np(t, sizeof set, &set);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	(void)remove(path);
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	if (the_broker)
		__atomic_store_n(&the_broker->stopping, 1, __ATOMIC_RELEASE);
}

static void usage(void)
{
	fprintf(stderr, "usage: sluice-broker server.properties [--override key=value ...]\n");
}

/* Partition directories ("<topic>-<n>") in a data directory; stray
 * "-delete" directories left by a crash during topic deletion are removed. */
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

int main(int argc, char **argv)
{
	static struct broker b;
	char err[512] = "";
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage();
		return argc < 2 ? 2 : 0;
	}
	sluice_config_defaults(&b.cfg);
	if (sluice_config_load_file(&b.cfg, argv[1], err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: %s\n", err);
		return 1;
	}
	for (int i = 2; i < argc; i++) {
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
		if (sluice_config_set(&b.cfg, kv, eq + 1, err, sizeof err) < 0) {
			fprintf(stderr, "sluice-broker: %s\n", err);
			return 1;
		}
	}
	if (sluice_config_finish(&b.cfg, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: %s\n", err);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	b.ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
	b.net_n = b.cfg.num_network_threads;
	b.store_n = b.cfg.storage_threads;
	/* Data directories and the clean-shutdown marker: present means the last
	 * run closed every log cleanly; it is removed now so a crash is noticed. */
	b.clean_start = true;
	for (int d = 0; d < b.cfg.log_dir_count; d++) {
		if (mkdirs(b.cfg.log_dir[d]) < 0) {
			/* Kafka's rule: one bad directory is tolerated while another works. */
			SLOG_ERR("broker", "log.dirs: cannot create %s: %s; it is offline", b.cfg.log_dir[d], strerror(errno));
			b.offline_dirs |= 1u << d;
			continue;
		}
		/* One broker per data directory: Kafka's .lock, held for life. */
		char lock[SLUICE_CONFIG_STRING_MAX + 32];
		snprintf(lock, sizeof lock, "%s/.lock", b.cfg.log_dir[d]);
		int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
		if (lfd < 0 || flock(lfd, LOCK_EX | LOCK_NB) < 0) {
			fprintf(stderr, "sluice-broker: log.dirs: %s is in use by another broker (%s)\n", b.cfg.log_dir[d],
				lfd < 0 ? strerror(errno) : "locked");
			return 1;
		}
		char marker[SLUICE_CONFIG_STRING_MAX + 32];
		snprintf(marker, sizeof marker, "%s/%s", b.cfg.log_dir[d], CLEAN_MARKER);
		struct stat st;
		b.dir_partitions[d] = count_partition_dirs(b.cfg.log_dir[d]);
		/* A directory holding no partition yet (a first start) has nothing
		 * to recover, marker or not. */
		if (stat(marker, &st) < 0 && b.dir_partitions[d] > 0)
			b.clean_start = false;
		unlink(marker);
	}
	if (__builtin_popcount(b.offline_dirs) == b.cfg.log_dir_count) {
		fprintf(stderr, "sluice-broker: log.dirs: no usable data directory\n");
		return 1;
	}
	if (!b.clean_start)
		SLOG_WARN("broker", "no clean-shutdown marker: logs will be recovered (CRC scan past the recovery point)");
	int meta_dir = 0;
	while (b.offline_dirs & (1u << meta_dir))
		meta_dir++;
	if (sluice_meta_local_open(&b.meta, b.cfg.log_dir[meta_dir], b.cfg.num_partitions, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-broker: metadata: %s\n", err);
		return 1;
	}
	/* __consumer_offsets is created when groups are first used (as in
	 * Kafka); once it exists, groups are placed by its real partition count,
	 * whatever offsets.topic.num.partitions says now. */
	{
		struct sluice_meta_snapshot *snap = b.meta.ops->acquire(b.meta.self);
		const struct sluice_topic *ot = sluice_meta_find(snap, SLUICE_OFFSETS_TOPIC, strlen(SLUICE_OFFSETS_TOPIC));
		if (ot)
			b.cfg.offsets_topic_partitions = ot->partitions;
		b.meta.ops->release(b.meta.self, snap);
	}
	for (int s = 0; s < b.store_n; s++) {
		b.store[s].id = s;
		b.store[s].b = &b;
		b.store[s].in = calloc((size_t)b.net_n, sizeof(struct sluice_ring));
		b.store[s].out = calloc((size_t)b.net_n, sizeof(struct sluice_ring));
		for (int n = 0; n < b.net_n; n++)
			if (sluice_ring_init(&b.store[s].in[n], SLUICE_RING_SLOTS) < 0 ||
			    sluice_ring_init(&b.store[s].out[n], SLUICE_RING_SLOTS) < 0) {
				fprintf(stderr, "sluice-broker: out of memory\n");
				return 1;
			}
	}
	const struct sluice_transport_ops *tr = &sluice_transport_uring;
	for (int n = 0; n < b.net_n; n++) {
		b.net[n].id = n;
		b.net[n].b = &b;
		if (tr->init(&b.net[n]) < 0) {
			fprintf(stderr, "sluice-broker: listeners: cannot listen on %s:%d\n", b.cfg.listen_host, b.cfg.listen_port);
			return 1;
		}
	}
	the_broker = &b;
	struct sigaction sa = {0};
	sa.sa_handler = on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	for (int s = 0; s < b.store_n; s++)
		if (sluice_storage_core_start(&b.store[s]) < 0) {
			fprintf(stderr, "sluice-broker: cannot start storage core %d\n", s);
			return 1;
		}
	for (int n = 0; n < b.net_n; n++) {
		if (pthread_create(&b.net[n].thread, NULL, tr->run, &b.net[n]) != 0) {
			fprintf(stderr, "sluice-broker: cannot start network core %d\n", n);
			return 1;
		}
		sluice_core_pin(&b, b.net[n].thread, n);
	}
	SLOG_INFO("broker", "sluice-broker node %d listening on %s:%d (advertised %s:%d), transport %s, "
		  "%d network core(s), %d storage core(s), log.dirs=%s",
		  b.cfg.node_id, b.cfg.listen_host, b.cfg.listen_port, b.cfg.advertised_host, b.cfg.advertised_port,
		  tr->name, b.net_n, b.store_n, b.cfg.log_dirs);
	while (!__atomic_load_n(&b.stopping, __ATOMIC_ACQUIRE))
		pause();
	SLOG_INFO("broker", "shutting down");
	/* Every network core stops before any is finalised: they share one
	 * listening socket, which the first core's fini closes. */
	for (int n = 0; n < b.net_n; n++) {
		sluice_core_wake(&(int){1}, b.net[n].efd);
		pthread_join(b.net[n].thread, NULL);
	}
	for (int n = 0; n < b.net_n; n++)
		tr->fini(&b.net[n]);
	__atomic_store_n(&b.stopping, 2, __ATOMIC_RELEASE);
	for (int s = 0; s < b.store_n; s++) {
		sluice_core_wake(&(int){1}, b.store[s].efd);
		sluice_storage_core_join(&b.store[s]);
	}
	sluice_meta_local_close(&b.meta);
	for (int d = 0; d < b.cfg.log_dir_count; d++) {
		if (__atomic_load_n(&b.offline_dirs, __ATOMIC_ACQUIRE) & (1u << d))
			continue; /* a failed directory is not vouched for */
		char marker[SLUICE_CONFIG_STRING_MAX + 32];
		snprintf(marker, sizeof marker, "%s/%s", b.cfg.log_dir[d], CLEAN_MARKER);
		int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		if (fd >= 0) {
			fsync(fd);
			close(fd);
		}
	}
	SLOG_INFO("broker", "stopped cleanly");
	return 0;
}
