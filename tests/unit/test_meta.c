/* The local metadata authority's files: a snapshot plus a journal of changes,
 * replayed at open. Proves that changes survive a reopen (created, deleted with
 * a tombstone, reconfigured), that a torn last journal record is cut off and
 * appending continues after it, that a stale journal (older generation) is
 * ignored and a newer one refused, that the v1 format still loads, that an
 * empty or malformed file is refused with what was found instead of being taken
 * as empty, and that a batch checks names against the topics it stages. */
#include "control/meta.h"
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof dir, "/tmp/sluice-meta-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static void path_of(char *out, size_t len, const char *name)
{
	snprintf(out, len, "%s/%s", dir, name);
}

static void write_file(const char *name, const char *content, size_t len)
{
	char p[128];
	path_of(p, sizeof p, name);
	FILE *f = fopen(p, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(content, 1, len, f), len);
	fclose(f);
}

static off_t file_size(const char *name)
{
	char p[128];
	struct stat st;
	path_of(p, sizeof p, name);
	return stat(p, &st) == 0 ? st.st_size : -1;
}

static void open_ok(struct sluice_meta *m)
{
	char err[512] = "";
	cr_assert_eq(sluice_meta_local_open(m, dir, 1, err, sizeof err), 0, "open: %s", err);
}

static int16_t create(struct sluice_meta *m, const char *name, int32_t parts, uint8_t id[16])
{
	struct sluice_topic_spec spec;
	memset(&spec, 0, sizeof spec);
	spec.name = name;
	spec.name_len = strlen(name);
	spec.partitions = parts;
	spec.replication_factor = -1;
	struct sluice_topic out;
	char msg[256];
	int16_t e = m->ops->create_topic(m->self, &spec, false, msg, sizeof msg, &out);
	if (!e && id)
		memcpy(id, out.id, 16);
	return e;
}

static const struct sluice_topic *find(struct sluice_meta *m, const char *name, struct sluice_meta_snapshot **s)
{
	*s = m->ops->acquire(m->self);
	return sluice_meta_find(*s, name, strlen(name));
}

static bool exists(struct sluice_meta *m, const char *name)
{
	struct sluice_meta_snapshot *s;
	bool r = find(m, name, &s) != NULL;
	m->ops->release(m->self, s);
	return r;
}

Test(meta, changes_survive_reopen, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	open_ok(&m);
	cr_assert_not(sluice_meta_local_found(&m));
	uint8_t id_b[16];
	char msg[256];
	m.ops->batch_begin(m.self);
	cr_assert_eq(create(&m, "a", 3, NULL), 0);
	cr_assert_eq(create(&m, "b", 1, id_b), 0);
	cr_assert_eq(create(&m, "c.x", 2, NULL), 0);
	cr_assert_eq(create(&m, "c_x", 2, NULL), 17, "collides with a topic of the same batch");
	cr_assert_eq(create(&m, "a", 2, NULL), 36, "exists in the same batch");
	cr_assert_not(exists(&m, "a"), "not visible before the commit");
	cr_assert_eq(m.ops->batch_commit(m.self, msg, sizeof msg), 0, "%s", msg);
	cr_assert(exists(&m, "a"));
	cr_assert_eq(m.ops->delete_topic(m.self, "b", 1, NULL, msg, sizeof msg), 0);
	struct sluice_topic_config cfg = {"retention.ms", "1234"};
	cr_assert_eq(m.ops->set_topic_configs(m.self, "a", 1, &cfg, 1, false, msg, sizeof msg), 0);
	cr_assert_eq(m.ops->create_partitions(m.self, "c.x", 3, 5, false, msg, sizeof msg), 0);
	sluice_meta_local_close(&m);

	open_ok(&m);
	cr_assert(sluice_meta_local_found(&m));
	struct sluice_meta_snapshot *s;
	const struct sluice_topic *a = find(&m, "a", &s);
	cr_assert_not_null(a);
	cr_assert_eq(a->partitions, 3);
	cr_assert_eq(a->config_n, 1);
	cr_assert_eq(a->limits.retention_ms, 1234);
	cr_assert_eq(sluice_meta_find(s, "c.x", 3)->partitions, 5);
	cr_assert_null(sluice_meta_find(s, "b", 1));
	cr_assert_eq(s->topic_n, 2);
	m.ops->release(m.self, s);
	const struct sluice_meta_tombstone *t = sluice_meta_local_tombstone(&m, id_b);
	cr_assert_not_null(t, "the deletion left a tombstone");
	cr_assert_str_eq(t->name, "b");
	cr_assert_eq(sluice_meta_local_forget_all(&m), 0);
	sluice_meta_local_close(&m);
	open_ok(&m);
	cr_assert_null(sluice_meta_local_tombstone(&m, id_b), "forgotten across a reopen");
	cr_assert(exists(&m, "a") && exists(&m, "c.x"));
	sluice_meta_local_close(&m);
}

Test(meta, torn_journal_tail_is_cut_off, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	open_ok(&m);
	cr_assert_eq(create(&m, "first", 1, NULL), 0);
	cr_assert_eq(create(&m, "second", 1, NULL), 0);
	sluice_meta_local_close(&m);
	off_t good = file_size("sluice-topics.journal");
	cr_assert_gt(good, 0);
	/* a record whose header promises more than was written */
	char p[128];
	path_of(p, sizeof p, "sluice-topics.journal");
	int fd = open(p, O_WRONLY | O_APPEND);
	const unsigned char torn[] = {40, 0, 0, 0, 1, 2, 3, 4, 't', 'o', 'p'};
	cr_assert_eq(write(fd, torn, sizeof torn), (ssize_t)sizeof torn);
	close(fd);
	open_ok(&m);
	cr_assert(exists(&m, "first") && exists(&m, "second"));
	cr_assert_eq(file_size("sluice-topics.journal"), good, "the torn record was cut off");
	cr_assert_eq(create(&m, "third", 1, NULL), 0);
	sluice_meta_local_close(&m);
	open_ok(&m);
	cr_assert(exists(&m, "third"), "appends after the cut replay");
	sluice_meta_local_close(&m);
}

static const char snap_v2[] = "# sluice topic metadata v2: ...; generation 5\n"
			      "topic kept 2 00112233445566778899aabbccddeeff\n";

static void journal(unsigned gen, const char *rec)
{
	extern uint32_t sluice_crc32c(uint32_t crc, const void *data, size_t len);
	char buf[512], hdr[64];
	size_t n = 0;
	const char *recs[2] = {hdr, rec};
	snprintf(hdr, sizeof hdr, "generation %u", gen);
	for (int i = 0; i < 2; i++) {
		uint32_t len = (uint32_t)strlen(recs[i]), crc = sluice_crc32c(0, recs[i], len);
		memcpy(buf + n, &len, 4);
		memcpy(buf + n + 4, &crc, 4);
		memcpy(buf + n + 8, recs[i], len);
		n += 8 + len;
	}
	write_file("sluice-topics.journal", buf, n);
}

Test(meta, journal_generations, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	char err[512] = "";
	write_file("sluice-topics", snap_v2, sizeof snap_v2 - 1);
	journal(4, "topic stale 1 00112233445566778899aabbccddee00");
	open_ok(&m);
	cr_assert(exists(&m, "kept"));
	cr_assert_not(exists(&m, "stale"), "a journal of an older generation is already in the snapshot");
	sluice_meta_local_close(&m);
	journal(5, "topic current 1 00112233445566778899aabbccddee01");
	open_ok(&m);
	cr_assert(exists(&m, "current"));
	sluice_meta_local_close(&m);
	journal(6, "topic future 1 00112233445566778899aabbccddee02");
	cr_assert_eq(sluice_meta_local_open(&m, dir, 1, err, sizeof err), -1, "a newer journal than the snapshot");
	cr_assert(strstr(err, "older than the journal"), "%s", err);
}

Test(meta, refuses_what_does_not_parse, .init = setup, .fini = teardown)
{
	struct sluice_meta m;
	char err[512] = "";
	write_file("sluice-topics", "", 0);
	cr_assert_eq(sluice_meta_local_open(&m, dir, 1, err, sizeof err), -1);
	cr_assert(strstr(err, "is empty"), "%s", err);
	static const char bad[] = "# sluice topic metadata v1: x\ntopic ok 1 00112233445566778899aabbccddeeff\ntopic bad x y\n";
	write_file("sluice-topics", bad, sizeof bad - 1);
	cr_assert_eq(sluice_meta_local_open(&m, dir, 1, err, sizeof err), -1);
	cr_assert(strstr(err, "sluice-topics:3: malformed topic line"), "%s", err);
	static const char cut[] = "# sluice topic metadata v1: x\ntopic ok 1 00112233445566778899aabbccddeeff";
	write_file("sluice-topics", cut, sizeof cut - 1);
	cr_assert_eq(sluice_meta_local_open(&m, dir, 1, err, sizeof err), -1);
	cr_assert(strstr(err, "middle of a line"), "%s", err);
	static const char v1[] = "# sluice topic metadata v1: topic <name> <partitions> <id> [key=value ...]\n"
				 "topic old 4 00112233445566778899aabbccddeeff retention.ms=5 cleanup.policy=compact\n";
	write_file("sluice-topics", v1, sizeof v1 - 1);
	open_ok(&m);
	struct sluice_meta_snapshot *s;
	const struct sluice_topic *t = find(&m, "old", &s);
	cr_assert(t && t->partitions == 4 && t->limits.retention_ms == 5 && t->limits.cleanup_compact == 1);
	m.ops->release(m.self, s);
	sluice_meta_local_close(&m);
}

Test(meta, partition_metadata_roundtrip, .init = setup, .fini = teardown)
{
	uint8_t id[16], back[16];
	for (int i = 0; i < 16; i++)
		id[i] = (uint8_t)(i * 17 + 3);
	cr_assert_eq(sluice_partition_metadata_read(dir, back), 0, "absent");
	cr_assert_eq(sluice_partition_metadata_write(dir, id), 0);
	cr_assert_eq(sluice_partition_metadata_read(dir, back), 1);
	cr_assert_eq(memcmp(id, back, 16), 0);
	char b64[23];
	sluice_topic_id_base64(id, b64);
	cr_assert_eq(strlen(b64), 22);
	write_file("partition.metadata", "version: 0\ntopic_id: !!\n", 24);
	cr_assert_eq(sluice_partition_metadata_read(dir, back), -1, "malformed");
}
