/*
 * sluice-perf: a load generator and latency meter for any Kafka-compatible broker
 * (Sluice, Apache Kafka, Redpanda ...), built on librdkafka so that what it measures is
 * what an ordinary client sees. Its workload knobs follow the OpenMessaging Benchmark's:
 * topics, partitions, record size, keys, producers, consumers per group and groups, a
 * fixed or maximum rate, warmup, duration, acks, compression, linger and batch size.
 *
 * Modes: `produce` sends records and measures the time from send (or, at a fixed --rate,
 * from the intended send time, so that a stalled broker cannot hide its stall through
 * coordinated omission) to the delivery report; `consume` reads every partition from the
 * beginning and measures throughput; `e2e` does both at once and measures end-to-end
 * latency from the stamp at the head of each value. Every producer and consumer is a
 * thread with its own librdkafka client. A consumer group is N independent readers of
 * each topic: each group's partitions are divided among its consumers by direct
 * assignment, because Sluice has no group membership (JoinGroup/SyncGroup) yet; real
 * membership can replace the assignment once it does, without changing the figures'
 * meaning. Latencies go into fixed-size histograms (perf-histogram.c), gathered per
 * thread and merged per interval and at the end (perf-report.c). The hot loops allocate
 * nothing: one payload buffer per producer is rewritten in place and librdkafka copies
 * it (RD_KAFKA_MSG_F_COPY), and a record's intended send time travels as its opaque.
 */
#include "perf-common.h"
#include "perf-histogram.h"
#include "perf-report.h"

#include <librdkafka/rdkafka.h>

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PERF_KEY_BYTES 8
#define PERF_RECORD_SIZE_MAX (UINT64_C(64) << 20)
#define PERF_CONF_EXTRA_MAX 64
#define PERF_TOPICS_MAX 4096
#define PERF_TOPIC_NAME_BYTES 250  /* Kafka's limit is 249 characters */
#define PERF_TOPPARS_MAX 65536     /* partitions over all topics */
#define PERF_PRODUCERS_MAX 64
#define PERF_GROUPS_MAX 64
#define PERF_CONSUMERS_PER_GROUP_MAX 64
#define PERF_CREATE_BATCH 100      /* topics per CreateTopics request */
#define PERF_REPLICATION_MAX 16    /* --replication-factor */
#define PERF_CONSUME_BATCH 1024
#define PERF_POLL_EVERY 32         /* produce calls between two rd_kafka_poll(0) */
#define PERF_ERRORS_LOGGED 5       /* first errors printed in full, the rest counted */
#define PERF_METADATA_WAIT_S 60.0  /* for the topics to exist with leaders everywhere */
#define PERF_JOIN_WAIT_S 60.0      /* for every group to have all its partitions assigned */
#define PERF_PURGE_WAIT_S 5.0      /* for the reports of purged records */
#define PERF_REPORT_TICK_US 100000 /* how often the main thread prints due rows */
#define PERF_DEFAULT_RECORDS UINT64_C(1000000)
#define PERF_DEFAULT_TIMEOUT_S 30.0

_Static_assert(PERF_POLL_EVERY > 0, "poll cadence");
_Static_assert(PERF_KEY_BYTES == 8, "keys are one u64");
_Static_assert(PERF_TOPICS_MAX <= PERF_TOPPARS_MAX, "every topic has a partition");
_Static_assert(PERF_TOPPARS_MAX < INT32_MAX, "toppar indexes are int32_t");

enum perf_mode { MODE_PRODUCE, MODE_CONSUME, MODE_E2E };
enum perf_key { KEY_NONE, KEY_ROUND_ROBIN, KEY_RANDOM };
/* How a group's members get their partitions: by direct assignment (any broker), or as
 * real members of a consumer group (JoinGroup/SyncGroup, offsets committed). */
enum perf_membership { MEMBERSHIP_ASSIGN, MEMBERSHIP_GROUP };

struct perf_config {
    enum perf_mode mode;
    const char *bootstrap;
    const char *topic;      /* the topic, or with --topics > 1 the prefix of NAME-i */
    int topics;
    int32_t partitions;     /* expected count per topic (0 = whatever the broker has) */
    bool create;            /* CreateTopics before starting; falls back to auto-create */
    int16_t replication;    /* --create's replication factor; > 1: wait for a full ISR */
    uint64_t records;       /* measured records over all producers (0 with --duration) */
    bool records_set;
    double duration_s;
    uint64_t record_size;
    enum perf_key key;
    const char *acks;
    const char *compression;
    int linger_ms;          /* -1 = librdkafka default */
    long batch_size;        /* -1 = librdkafka default */
    double rate;            /* records/s over all producers, 0 = as fast as possible */
    double warmup_s;
    double interval_s;      /* 0 = progress lines on stderr only */
    double timeout_s;       /* consumers give up after this long without a record */
    double tail_s;          /* e2e consumers stop this long after the producers at most */
    int producers;
    int consumers;          /* per group */
    double groups;          /* groups per topic on average: 5.5 = half the topics have 6 */
    enum perf_membership membership;
    const char *json_path;
    const char *stats_path; /* --stats: librdkafka's statistics, one JSON line each */
    const char *extra[PERF_CONF_EXTRA_MAX]; /* -X key=value, passed to librdkafka */
    int extra_count;
    const char *producer_extra[PERF_CONF_EXTRA_MAX]; /* -P key=value: producers only */
    int producer_extra_count;
};

/* The run's topics as the broker reported them: the partitions of topic t are the
 * toppar indexes base[t] .. base[t] + partitions[t] - 1. */
struct perf_topics {
    int count;
    char (*names)[PERF_TOPIC_NAME_BYTES];
    int32_t *partitions;
    int32_t *base;
    int32_t *topic_of;       /* toppar index -> topic */
    int32_t toppars;
    int64_t *start_offsets;  /* per toppar: where consumers begin */
};

struct perf_run;

struct perf_producer {
    const struct perf_config *cfg;
    const struct perf_topics *topics;
    struct perf_run *run;
    int index;
    rd_kafka_t *rk;
    rd_kafka_topic_t **rkts;              /* per topic; opaque = topic index */
    uint32_t run_id;
    uint64_t t0, measure_start_ns;
    double rate;                          /* this producer's share of --rate */
    uint64_t records;                     /* this producer's share of --records */
    struct perf_series *series;
    uint64_t *delivered;                  /* per toppar, warmup included */
    uint64_t delivered_all, queue_full;
    uint64_t unsent;                      /* fixed rate: scheduled records never sent */
    uint64_t abandoned;                   /* unacknowledged when --tail ran out */
    unsigned errors_logged;
    uint64_t rng;
    unsigned char key[PERF_KEY_BYTES];
    unsigned char *value;                 /* the one payload buffer, record_size bytes */
};

struct perf_consumer {
    const struct perf_config *cfg;
    const struct perf_topics *topics;
    struct perf_run *run;
    int group, index;
    rd_kafka_t *rk;
    rd_kafka_topic_t **rkts;              /* per topic, NULL where nothing is assigned */
    rd_kafka_queue_t *queue;
    int32_t *assigned;                    /* toppar indexes (direct assignment) */
    int32_t assigned_count;               /* group membership: as the group assigned */
    _Atomic int assignments;              /* group membership: assignments received */
    bool *at_eof;                         /* per toppar index */
    int32_t eof_count;
    uint64_t received_all;                /* this run's records, warmup included */
    uint64_t foreign;                     /* e2e: records not written by this run */
    rd_kafka_topic_partition_list_t *subscription; /* group membership: the group's topics */
    struct perf_series *series;
    unsigned errors_logged;
    rd_kafka_message_t *batch[PERF_CONSUME_BATCH];
};

/* Everything one run shares between its threads. */
struct perf_run {
    const struct perf_config *cfg;
    struct perf_topics topics;
    uint32_t run_id;
    uint64_t t0, measure_start_ns;
    struct perf_stream *produce_stream, *consume_stream; /* consume_stream is e2e's too */
    struct perf_producer *producers;
    int producer_count;
    struct perf_consumer *consumers;
    int consumer_count;
    int group_count;
    _Atomic uint64_t group_consumed[PERF_GROUPS_MAX]; /* consume -n: records per group */
    _Atomic uint64_t group_received[PERF_GROUPS_MAX]; /* e2e: this run's records per group */
    _Atomic uint64_t group_expected[PERF_GROUPS_MAX]; /* e2e: set once producers are done */
    _Atomic int32_t assigned_total;       /* group membership: partitions held by members */
    int32_t assignments_needed;           /* every group's partitions, summed */
    _Atomic bool started;                 /* members past the first assignment */
    _Atomic int producers_running, consumers_running;
    _Atomic bool producers_done;          /* and every group_expected is set */
    _Atomic uint64_t producers_done_ns;
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *out)
{
    fputs(
"usage: sluice-perf produce|consume|e2e [options]\n"
"  -b, --bootstrap HOST:PORT   brokers (default 127.0.0.1:9092)\n"
"  -t, --topic NAME            topic, or with --topics N the prefix of NAME-0..NAME-(N-1)\n"
"                              (default sluice-perf); auto-created by the broker unless --create\n"
"      --topics N              number of topics (default 1)\n"
"  -p, --partitions P          expected partitions per topic, and the count for --create\n"
"      --create                create the topics with CreateTopics first; if the broker\n"
"                              refuses, fall back to auto-creation\n"
"      --replication-factor R  --create's replication factor (default 1); above 1 the\n"
"                              run starts once every partition's ISR holds all R replicas\n"
"  -n, --records N             measured records over all producers (k/M/G suffixes;\n"
"                              default 1M); consume: stop each group after N records\n"
"                              (default: at the end of every partition)\n"
"  -d, --duration S            measure for S seconds instead of N records\n"
"  -s, --record-size B         value size in bytes (default 100; e2e needs >= 16)\n"
"      --key MODE              none (default): no key, librdkafka's partitioner;\n"
"                              round-robin: 8-byte sequence key, partitions in turn;\n"
"                              random: 8-byte random key, murmur2 partitioner\n"
"      --acks 0|1|all          (default 1)\n"
"      --compression C         none|gzip|snappy|lz4|zstd (default none)\n"
"      --linger-ms MS          linger.ms (default: librdkafka's)\n"
"      --batch-size B          batch.size in bytes (default: librdkafka's)\n"
"      --rate R                records/s over all producers, 0 = as fast as possible\n"
"                              (default 0); at a fixed rate latency counts from the\n"
"                              intended send time\n"
"      --producers N           producer threads, each its own client (default 1)\n"
"      --consumers N           consumer threads per group (default 1)\n"
"      --groups G              consumer groups per topic, fractions allowed: 5.5 = half\n"
"                              the topics are read by 6 groups, half by 5 (default 1)\n"
"      --membership M          assign (default): each group's partitions divided among its\n"
"                              consumers by direct assignment, with any broker;\n"
"                              group: the consumers are real consumer-group members\n"
"                              (subscribe, the group's assignor, auto-commit)\n"
"      --warmup S              run S seconds of load first, not measured (default 0)\n"
"      --interval S            report every S seconds (default: a progress line on stderr\n"
"                              every 10 s)\n"
"      --timeout S             consumers stop after S s without records (default 30)\n"
"      --tail S                at the end, producers wait at most S s for outstanding\n"
"                              acknowledgements (the rest is abandoned and counted), and\n"
"                              e2e consumers stop at most S s after the producers (what\n"
"                              they have not read counts as unconsumed); default 30\n"
"      --json FILE             write the results as JSON\n"
"      --stats FILE            append librdkafka's statistics of every client, every\n"
"                              100 ms, one JSON object a line (request counts per type\n"
"                              and librdkafka's monotonic clock: perf/run-all.sh's alloc\n"
"                              workload counts requests with it)\n"
"  -X key=value                any librdkafka property, for producers and consumers\n"
"  -P key=value                a librdkafka property for the producers only (after -X)\n",
        out);
}

static enum perf_key parse_key(const char *s)
{
    if (strcmp(s, "none") == 0)
        return KEY_NONE;
    if (strcmp(s, "round-robin") == 0)
        return KEY_ROUND_ROBIN;
    if (strcmp(s, "random") == 0)
        return KEY_RANDOM;
    perf_die("bad --key '%s' (none|round-robin|random)", s);
}

static const char *key_name(enum perf_key k)
{
    return k == KEY_NONE ? "none" : k == KEY_ROUND_ROBIN ? "round-robin" : "random";
}

static const char *mode_name(enum perf_mode m)
{
    return m == MODE_PRODUCE ? "produce" : m == MODE_CONSUME ? "consume" : "e2e";
}

enum { OPT_CREATE = 256, OPT_KEY, OPT_ACKS, OPT_COMPRESSION, OPT_LINGER, OPT_BATCH,
       OPT_RATE, OPT_WARMUP, OPT_INTERVAL, OPT_TIMEOUT, OPT_JSON, OPT_TOPICS,
       OPT_PRODUCERS, OPT_CONSUMERS, OPT_GROUPS, OPT_TAIL, OPT_MEMBERSHIP, OPT_STATS,
       OPT_REPLICATION };

static const struct option long_options[] = {
    {"bootstrap", required_argument, NULL, 'b'},
    {"topic", required_argument, NULL, 't'},
    {"topics", required_argument, NULL, OPT_TOPICS},
    {"partitions", required_argument, NULL, 'p'},
    {"create", no_argument, NULL, OPT_CREATE},
    {"replication-factor", required_argument, NULL, OPT_REPLICATION},
    {"records", required_argument, NULL, 'n'},
    {"duration", required_argument, NULL, 'd'},
    {"record-size", required_argument, NULL, 's'},
    {"key", required_argument, NULL, OPT_KEY},
    {"acks", required_argument, NULL, OPT_ACKS},
    {"compression", required_argument, NULL, OPT_COMPRESSION},
    {"linger-ms", required_argument, NULL, OPT_LINGER},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"rate", required_argument, NULL, OPT_RATE},
    {"producers", required_argument, NULL, OPT_PRODUCERS},
    {"consumers", required_argument, NULL, OPT_CONSUMERS},
    {"groups", required_argument, NULL, OPT_GROUPS},
    {"membership", required_argument, NULL, OPT_MEMBERSHIP},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"tail", required_argument, NULL, OPT_TAIL},
    {"json", required_argument, NULL, OPT_JSON},
    {"stats", required_argument, NULL, OPT_STATS},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void parse_option(struct perf_config *cfg, int c, const char *arg)
{
    switch (c) {
    case 'b': cfg->bootstrap = arg; break;
    case 't': cfg->topic = arg; break;
    case OPT_TOPICS: cfg->topics = (int)perf_parse_count(arg, "--topics"); break;
    case 'p': cfg->partitions = (int32_t)perf_parse_count(arg, "--partitions"); break;
    case OPT_CREATE: cfg->create = true; break;
    case OPT_REPLICATION: {
        uint64_t r = perf_parse_count(arg, "--replication-factor");
        if (r < 1 || r > PERF_REPLICATION_MAX)
            perf_die("--replication-factor must be 1..%d", PERF_REPLICATION_MAX);
        cfg->replication = (int16_t)r;
        break;
    }
    case 'n':
        cfg->records = perf_parse_count(arg, "--records");
        cfg->records_set = true;
        break;
    case 'd': cfg->duration_s = perf_parse_seconds(arg, "--duration"); break;
    case 's': cfg->record_size = perf_parse_count(arg, "--record-size"); break;
    case OPT_KEY: cfg->key = parse_key(arg); break;
    case OPT_ACKS: cfg->acks = arg; break;
    case OPT_COMPRESSION: cfg->compression = arg; break;
    case OPT_LINGER: cfg->linger_ms = (int)perf_parse_count(arg, "--linger-ms"); break;
    case OPT_BATCH: cfg->batch_size = (long)perf_parse_count(arg, "--batch-size"); break;
    case OPT_RATE: cfg->rate = (double)perf_parse_count(arg, "--rate"); break;
    case OPT_PRODUCERS: cfg->producers = (int)perf_parse_count(arg, "--producers"); break;
    case OPT_CONSUMERS: cfg->consumers = (int)perf_parse_count(arg, "--consumers"); break;
    case OPT_GROUPS: cfg->groups = perf_parse_real(arg, "--groups"); break;
    case OPT_MEMBERSHIP:
        if (strcmp(arg, "assign") && strcmp(arg, "group"))
            perf_die("bad --membership '%s' (assign|group)", arg);
        cfg->membership = strcmp(arg, "group") ? MEMBERSHIP_ASSIGN : MEMBERSHIP_GROUP;
        break;
    case OPT_WARMUP: cfg->warmup_s = perf_parse_seconds(arg, "--warmup"); break;
    case OPT_INTERVAL: cfg->interval_s = perf_parse_seconds(arg, "--interval"); break;
    case OPT_TIMEOUT: cfg->timeout_s = perf_parse_seconds(arg, "--timeout"); break;
    case OPT_TAIL: cfg->tail_s = perf_parse_seconds(arg, "--tail"); break;
    case OPT_JSON: cfg->json_path = arg; break;
    case OPT_STATS: cfg->stats_path = arg; break;
    case 'X':
        if (cfg->extra_count == PERF_CONF_EXTRA_MAX)
            perf_die("too many -X options (max %d)", PERF_CONF_EXTRA_MAX);
        if (!strchr(arg, '='))
            perf_die("-X needs key=value, got '%s'", arg);
        cfg->extra[cfg->extra_count++] = arg;
        break;
    case 'P':
        if (cfg->producer_extra_count == PERF_CONF_EXTRA_MAX)
            perf_die("too many -P options (max %d)", PERF_CONF_EXTRA_MAX);
        if (!strchr(arg, '='))
            perf_die("-P needs key=value, got '%s'", arg);
        cfg->producer_extra[cfg->producer_extra_count++] = arg;
        break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
}

static void check_counts(const struct perf_config *cfg)
{
    if (cfg->topics < 1 || cfg->topics > PERF_TOPICS_MAX)
        perf_die("--topics must be 1..%d", PERF_TOPICS_MAX);
    if (cfg->partitions < 0 || cfg->partitions > PERF_TOPPARS_MAX)
        perf_die("--partitions out of range");
    if (cfg->producers < 1 || cfg->producers > PERF_PRODUCERS_MAX)
        perf_die("--producers must be 1..%d", PERF_PRODUCERS_MAX);
    if (cfg->consumers < 1 || cfg->consumers > PERF_CONSUMERS_PER_GROUP_MAX)
        perf_die("--consumers must be 1..%d", PERF_CONSUMERS_PER_GROUP_MAX);
    if (cfg->groups <= 0 || ceil(cfg->groups) > PERF_GROUPS_MAX)
        perf_die("--groups must be above 0 and at most %d", PERF_GROUPS_MAX);
    if (strlen(cfg->topic) + 6 >= PERF_TOPIC_NAME_BYTES)
        perf_die("--topic too long");
}

static void check_config(struct perf_config *cfg)
{
    if (cfg->records_set && cfg->duration_s > 0)
        perf_die("--records and --duration are exclusive");
    if (!cfg->records_set && cfg->duration_s <= 0 && cfg->mode != MODE_CONSUME)
        cfg->records = PERF_DEFAULT_RECORDS;
    if (cfg->record_size > PERF_RECORD_SIZE_MAX)
        perf_die("--record-size above %" PRIu64, PERF_RECORD_SIZE_MAX);
    if (cfg->mode == MODE_E2E && cfg->record_size < PERF_STAMP_BYTES)
        perf_die("e2e needs --record-size >= %d to carry the send timestamp", PERF_STAMP_BYTES);
    if (strcmp(cfg->acks, "0") && strcmp(cfg->acks, "1") && strcmp(cfg->acks, "all") &&
        strcmp(cfg->acks, "-1"))
        perf_die("bad --acks '%s' (0|1|all)", cfg->acks);
    if (cfg->interval_s > 0 && cfg->interval_s < PERF_INTERVAL_MIN_S)
        perf_die("--interval below %.1f s", PERF_INTERVAL_MIN_S);
    check_counts(cfg);
}

static void parse_args(struct perf_config *cfg, int argc, char **argv)
{
    *cfg = (struct perf_config){
        .bootstrap = "127.0.0.1:9092", .topic = "sluice-perf", .topics = 1,
        .replication = 1, .record_size = 100, .key = KEY_NONE, .acks = "1", .compression = "none",
        .linger_ms = -1, .batch_size = -1, .timeout_s = PERF_DEFAULT_TIMEOUT_S,
        .tail_s = PERF_DEFAULT_TIMEOUT_S,
        .producers = 1, .consumers = 1, .groups = 1,
    };
    if (argc < 2 || argv[1][0] == '-') {
        if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
            usage(stdout);
            exit(0);
        }
        usage(stderr);
        exit(2);
    }
    if (!strcmp(argv[1], "produce"))
        cfg->mode = MODE_PRODUCE;
    else if (!strcmp(argv[1], "consume"))
        cfg->mode = MODE_CONSUME;
    else if (!strcmp(argv[1], "e2e"))
        cfg->mode = MODE_E2E;
    else
        perf_die("unknown mode '%s' (produce|consume|e2e)", argv[1]);
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "b:t:p:n:d:s:X:P:h", long_options, NULL)) != -1)
        parse_option(cfg, c, optarg);
    if (optind != argc)
        perf_die("unexpected argument '%s'", argv[optind]);
    check_config(cfg);
}

/* ---------------------------------------------------------------- librdkafka setup */

static void conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK)
        perf_die("librdkafka %s=%s: %s", name, value, err);
}

/* --stats: every client's statistics go to one file, a line each. Not on the hot path:
 * librdkafka calls this from the poll of the client's thread every 100 ms. */
static FILE *stats_file;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;

static int stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
    (void)rk;
    (void)opaque;
    pthread_mutex_lock(&stats_lock);
    fwrite(json, 1, len, stats_file);
    fputc('\n', stats_file);
    fflush(stats_file);
    pthread_mutex_unlock(&stats_lock);
    return 0; /* librdkafka frees json */
}

static void conf_stats(rd_kafka_conf_t *conf, const struct perf_config *cfg)
{
    if (!cfg->stats_path)
        return;
    pthread_mutex_lock(&stats_lock);
    if (!stats_file && !(stats_file = fopen(cfg->stats_path, "a")))
        perf_die("cannot write %s: %s", cfg->stats_path, strerror(errno));
    pthread_mutex_unlock(&stats_lock);
    conf_set(conf, "statistics.interval.ms", "100");
    rd_kafka_conf_set_stats_cb(conf, stats_cb);
}

/* Sets each "key=value" of props (checked for its '=' when parsed). */
static void conf_props(rd_kafka_conf_t *conf, const char *const *props, int count)
{
    for (int i = 0; i < count; i++) {
        char buf[1024];
        const char *eq = strchr(props[i], '=');
        assert(eq);
        size_t klen = (size_t)(eq - props[i]);
        if (klen >= sizeof buf)
            perf_die("property name too long: %s", props[i]);
        memcpy(buf, props[i], klen);
        buf[klen] = '\0';
        conf_set(conf, buf, eq + 1);
    }
}

static void conf_extra(rd_kafka_conf_t *conf, const struct perf_config *cfg)
{
    conf_stats(conf, cfg);
    conf_props(conf, cfg->extra, cfg->extra_count);
}

static rd_kafka_t *client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf)
{
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
    if (!rk)
        perf_die("rd_kafka_new: %s", err);
    return rk;
}

/* A topic handle whose opaque is the topic's index, read back in delivery reports. */
static rd_kafka_topic_t *topic_handle(rd_kafka_t *rk, const char *name, int index)
{
    rd_kafka_topic_conf_t *tconf = rd_kafka_topic_conf_new();
    rd_kafka_topic_conf_set_opaque(tconf, (void *)(intptr_t)index);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, name, tconf);
    if (!rkt)
        perf_die("topic %s: %s", name, rd_kafka_err2str(rd_kafka_last_error()));
    return rkt;
}

/* ---------------------------------------------------------------- topics */

static void topics_name(struct perf_topics *tp, const struct perf_config *cfg)
{
    tp->count = cfg->topics;
    tp->names = calloc((size_t)tp->count, sizeof *tp->names);
    tp->partitions = calloc((size_t)tp->count, sizeof *tp->partitions);
    tp->base = calloc((size_t)tp->count, sizeof *tp->base);
    if (!tp->names || !tp->partitions || !tp->base)
        perf_die("out of memory");
    for (int t = 0; t < tp->count; t++) {
        if (tp->count == 1)
            snprintf(tp->names[t], PERF_TOPIC_NAME_BYTES, "%s", cfg->topic);
        else
            snprintf(tp->names[t], PERF_TOPIC_NAME_BYTES, "%s-%d", cfg->topic, t);
    }
}

/* Creates the topics with CreateTopics, PERF_CREATE_BATCH per request; an existing
 * topic is fine, and so is a broker without CreateTopics (auto-creation then does it). */
static void topics_create_batch(rd_kafka_t *rk, struct perf_topics *tp, int first, int n,
                                int32_t partitions, int16_t replication)
{
    char err[512];
    rd_kafka_NewTopic_t *nt[PERF_CREATE_BATCH];
    assert(n > 0 && n <= PERF_CREATE_BATCH);
    for (int i = 0; i < n; i++)
        if (!(nt[i] = rd_kafka_NewTopic_new(tp->names[first + i], partitions, replication,
                                            err, sizeof err)))
            perf_die("NewTopic: %s", err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opts, 30000, err, sizeof err);
    rd_kafka_CreateTopics(rk, nt, (size_t)n, opts, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 60000);
    if (!ev) {
        fprintf(stderr, "sluice-perf: CreateTopics timed out; relying on auto-creation\n");
    } else if (rd_kafka_event_error(ev)) {
        fprintf(stderr, "sluice-perf: CreateTopics: %s; relying on auto-creation\n",
                rd_kafka_event_error_string(ev));
    } else {
        size_t cnt = 0;
        const rd_kafka_topic_result_t **res =
            rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &cnt);
        for (size_t i = 0; i < cnt; i++) {
            rd_kafka_resp_err_t terr = rd_kafka_topic_result_error(res[i]);
            if (terr && terr != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
                fprintf(stderr, "sluice-perf: CreateTopics %s: %s; relying on auto-creation\n",
                        rd_kafka_topic_result_name(res[i]), rd_kafka_err2str(terr));
        }
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    for (int i = 0; i < n; i++)
        rd_kafka_NewTopic_destroy(nt[i]);
}

/* One metadata round over the locally known topics (those with a handle on `rk`): the
 * number of the run's topics that exist with a leader for every partition (and, with
 * replication > 1, that many replicas all in the ISR); their partition counts go into
 * tp->partitions. A metadata request for an unknown topic is also what makes a broker
 * with auto.create.topics.enable create it. */
static int topics_ready(rd_kafka_t *rk, struct perf_topics *tp, int16_t replication,
                        char *why, size_t why_len)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, NULL, &md, 10000);
    if (err) {
        snprintf(why, why_len, "%s", rd_kafka_err2str(err));
        return 0;
    }
    int ready = 0;
    for (int t = 0; t < tp->count; t++) {
        tp->partitions[t] = 0;
        for (int i = 0; i < md->topic_cnt; i++) {
            const rd_kafka_metadata_topic_t *mt = &md->topics[i];
            if (strcmp(mt->topic, tp->names[t]) != 0)
                continue;
            bool led = !mt->err && mt->partition_cnt > 0;
            bool in_sync = true;
            for (int p = 0; led && p < mt->partition_cnt; p++) {
                const rd_kafka_metadata_partition_t *mp = &mt->partitions[p];
                led = mp->leader >= 0;
                if (replication > 1)
                    in_sync = in_sync && mp->replica_cnt >= replication &&
                              mp->isr_cnt >= replication;
            }
            if (led && in_sync)
                tp->partitions[t] = mt->partition_cnt, ready++;
            else
                snprintf(why, why_len, "%s: %s", tp->names[t],
                         mt->err ? rd_kafka_err2str(mt->err)
                         : !led ? "a partition has no leader"
                                : "a partition's ISR is not all its replicas yet");
        }
        if (!tp->partitions[t] && !why[0])
            snprintf(why, why_len, "%s missing from metadata", tp->names[t]);
    }
    rd_kafka_metadata_destroy(md);
    return ready;
}

/* Lays out the toppar index space once every topic's partition count is known. */
static void topics_index(struct perf_topics *tp, const struct perf_config *cfg)
{
    int64_t total = 0;
    for (int t = 0; t < tp->count; t++) {
        if (cfg->partitions && tp->partitions[t] != cfg->partitions)
            fprintf(stderr, "sluice-perf: warning: topic %s has %d partitions, expected %d "
                    "(check the broker's num.partitions)\n", tp->names[t], tp->partitions[t],
                    cfg->partitions);
        tp->base[t] = (int32_t)total;
        total += tp->partitions[t];
        if (total > PERF_TOPPARS_MAX)
            perf_die("more than %d partitions over all topics", PERF_TOPPARS_MAX);
    }
    tp->toppars = (int32_t)total;
    tp->topic_of = calloc((size_t)total, sizeof *tp->topic_of);
    tp->start_offsets = calloc((size_t)total, sizeof *tp->start_offsets);
    if (!tp->topic_of || !tp->start_offsets)
        perf_die("out of memory");
    for (int t = 0; t < tp->count; t++)
        for (int32_t p = 0; p < tp->partitions[t]; p++) {
            tp->topic_of[tp->base[t] + p] = t;
            tp->start_offsets[tp->base[t] + p] = RD_KAFKA_OFFSET_BEGINNING;
        }
}

/* Creates (or lets the broker auto-create) the topics and waits until every partition
 * has a leader, through a short-lived admin client. */
static void topics_setup(struct perf_topics *tp, const struct perf_config *cfg)
{
    topics_name(tp, cfg);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg->bootstrap);
    conf_set(conf, "client.id", "sluice-perf-admin");
    conf_extra(conf, cfg);
    rd_kafka_t *rk = client_new(RD_KAFKA_PRODUCER, conf);
    if (cfg->create && cfg->partitions > 0)
        for (int t = 0; t < tp->count; t += PERF_CREATE_BATCH)
            topics_create_batch(rk, tp, t, tp->count - t < PERF_CREATE_BATCH
                                ? tp->count - t : PERF_CREATE_BATCH, cfg->partitions,
                                cfg->replication);
    rd_kafka_topic_t **rkts = calloc((size_t)tp->count, sizeof *rkts);
    if (!rkts)
        perf_die("out of memory");
    for (int t = 0; t < tp->count; t++)
        rkts[t] = topic_handle(rk, tp->names[t], t);
    uint64_t deadline = perf_now_ns() + perf_seconds_to_ns(PERF_METADATA_WAIT_S);
    char why[512] = "";
    while (topics_ready(rk, tp, cfg->replication, why, sizeof why) < tp->count) {
        if (g_stop || perf_now_ns() > deadline)
            perf_die("topics not ready after %.0f s: %s", PERF_METADATA_WAIT_S, why);
        why[0] = '\0';
        usleep(200 * 1000);
    }
    topics_index(tp, cfg);
    for (int t = 0; t < tp->count; t++)
        rd_kafka_topic_destroy(rkts[t]);
    free(rkts);
    rd_kafka_destroy(rk);
}

static bool watermark_retriable(rd_kafka_resp_err_t err)
{
    return err == RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION ||
           err == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE ||
           err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
           err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION ||
           err == RD_KAFKA_RESP_ERR__TIMED_OUT || err == RD_KAFKA_RESP_ERR__TRANSPORT;
}

/* e2e: every consumer starts at the high watermark each partition has now, so that
 * nothing produced after this call is missed (a logical "end" would be resolved later,
 * when records may already have arrived). */
static void topics_query_ends(struct perf_topics *tp, const struct perf_config *cfg)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg->bootstrap);
    conf_set(conf, "client.id", "sluice-perf-admin");
    conf_extra(conf, cfg);
    rd_kafka_t *rk = client_new(RD_KAFKA_CONSUMER, conf);
    uint64_t deadline = perf_now_ns() + perf_seconds_to_ns(PERF_METADATA_WAIT_S);
    for (int32_t i = 0; i < tp->toppars; i++) {
        int t = tp->topic_of[i];
        int64_t lo = 0, hi = 0;
        rd_kafka_resp_err_t err;
        /* A partition just created can be listed with its leader before that broker has
         * taken the leadership (Kafka: NOT_LEADER_OR_FOLLOWER for a moment): retry. */
        while ((err = rd_kafka_query_watermark_offsets(rk, tp->names[t], i - tp->base[t], &lo,
                                                       &hi, 10000)) != 0 &&
               watermark_retriable(err) && !g_stop && perf_now_ns() < deadline)
            usleep(100 * 1000);
        if (err)
            perf_die("watermarks of %s[%d]: %s", tp->names[t], i - tp->base[t],
                     rd_kafka_err2str(err));
        tp->start_offsets[i] = hi;
    }
    rd_kafka_destroy(rk);
}

static void topics_free(struct perf_topics *tp)
{
    free(tp->names);
    free(tp->partitions);
    free(tp->base);
    free(tp->topic_of);
    free(tp->start_offsets);
}

/* ---------------------------------------------------------------- producer */

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct perf_producer *p = opaque;
    uint64_t now = perf_now_ns();
    uint64_t sent = (uint64_t)(uintptr_t)m->_private;
    bool measured = now >= p->measure_start_ns; /* completed after the warmup */
    if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE || m->err == RD_KAFKA_RESP_ERR__PURGE_INFLIGHT) {
        p->abandoned++;
        return;
    }
    if (m->err) {
        perf_series_error(p->series, measured);
        if (p->errors_logged++ < PERF_ERRORS_LOGGED)
            fprintf(stderr, "sluice-perf: delivery failed: %s\n", rd_kafka_err2str(m->err));
        return;
    }
    intptr_t t = (intptr_t)rd_kafka_topic_opaque(m->rkt);
    assert(t >= 0 && t < p->topics->count);
    if (m->partition >= 0 && m->partition < p->topics->partitions[t])
        p->delivered[p->topics->base[t] + m->partition]++;
    p->delivered_all++;
    perf_series_add(p->series, m->len + m->key_len, now > sent ? now - sent : 0, now, measured);
}

static rd_kafka_t *producer_client(struct perf_producer *p, const struct perf_config *cfg)
{
    char buf[64];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg->bootstrap);
    snprintf(buf, sizeof buf, "sluice-perf-producer-%d", p->index);
    conf_set(conf, "client.id", buf);
    conf_set(conf, "acks", cfg->acks);
    conf_set(conf, "compression.codec", cfg->compression);
    conf_set(conf, "message.timeout.ms", "30000");
    if (cfg->linger_ms >= 0) {
        snprintf(buf, sizeof buf, "%d", cfg->linger_ms);
        conf_set(conf, "linger.ms", buf);
    }
    if (cfg->batch_size >= 0) {
        snprintf(buf, sizeof buf, "%ld", cfg->batch_size);
        conf_set(conf, "batch.size", buf);
    }
    if (cfg->key == KEY_RANDOM)
        conf_set(conf, "partitioner", "murmur2_random");
    conf_extra(conf, cfg);
    conf_props(conf, cfg->producer_extra, cfg->producer_extra_count);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_opaque(conf, p);
    return client_new(RD_KAFKA_PRODUCER, conf);
}

/* Producer `index` of `count` gets an even share of --rate and --records. */
static void producer_init(struct perf_producer *p, struct perf_run *run, int index)
{
    const struct perf_config *cfg = run->cfg;
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->topics = &run->topics;
    p->run = run;
    p->index = index;
    p->run_id = run->run_id;
    p->rng = perf_seed() + (uint64_t)index * UINT64_C(0x2545f4914f6cdd1d);
    p->rate = cfg->rate / run->producer_count;
    p->records = cfg->records / (uint64_t)run->producer_count +
                 ((uint64_t)index < cfg->records % (uint64_t)run->producer_count);
    p->value = malloc(cfg->record_size ? cfg->record_size : 1);
    p->delivered = calloc((size_t)run->topics.toppars, sizeof *p->delivered);
    p->rkts = calloc((size_t)run->topics.count, sizeof *p->rkts);
    if (!p->value || !p->delivered || !p->rkts)
        perf_die("out of memory");
    perf_fill_payload(p->value, cfg->record_size, &p->rng);
    p->rk = producer_client(p, cfg);
    for (int t = 0; t < run->topics.count; t++)
        p->rkts[t] = topic_handle(p->rk, run->topics.names[t], t);
}

/* Sends record `seq` stamped with `stamp` (its intended send time); retries while the
 * local queue is full. Returns false on a non-retriable local error. */
static bool producer_send(struct perf_producer *p, uint64_t seq, uint64_t stamp)
{
    const struct perf_config *cfg = p->cfg;
    const struct perf_topics *tp = p->topics;
    int t = (int)((seq + (uint64_t)p->index) % (uint64_t)tp->count);
    int32_t partition = RD_KAFKA_PARTITION_UA;
    const void *key = NULL;
    size_t key_len = 0;
    if (cfg->record_size >= PERF_STAMP_BYTES)
        perf_stamp_put(p->value, p->run_id, stamp);
    if (cfg->key == KEY_ROUND_ROBIN) {
        perf_put_u64(p->key, seq);
        key = p->key, key_len = PERF_KEY_BYTES;
        partition = (int32_t)((seq / (uint64_t)tp->count) % (uint64_t)tp->partitions[t]);
    } else if (cfg->key == KEY_RANDOM) {
        perf_put_u64(p->key, perf_xorshift64(&p->rng));
        key = p->key, key_len = PERF_KEY_BYTES;
    }
    for (;;) {
        if (rd_kafka_produce(p->rkts[t], partition, RD_KAFKA_MSG_F_COPY, p->value,
                             (size_t)cfg->record_size, key, key_len,
                             (void *)(uintptr_t)stamp) == 0)
            return true;
        rd_kafka_resp_err_t err = rd_kafka_last_error();
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL || g_stop) {
            if (p->errors_logged++ < PERF_ERRORS_LOGGED)
                fprintf(stderr, "sluice-perf: produce failed: %s\n", rd_kafka_err2str(err));
            return false;
        }
        p->queue_full++;
        rd_kafka_poll(p->rk, 1);
        perf_series_tick(p->series, perf_now_ns());
    }
}

/* Waits until `target`, serving delivery reports meanwhile. */
static void producer_wait_until(struct perf_producer *p, uint64_t target)
{
    uint64_t now = perf_now_ns();
    if (now >= target)
        return;
    uint64_t left = target - now;
    if (left >= 2000000) {
        rd_kafka_poll(p->rk, (int)(left / 1000000) - 1);
    } else {
        rd_kafka_poll(p->rk, 0);
        struct timespec ts = {0, (long)left};
        nanosleep(&ts, NULL);
    }
}

/* With --duration the run also ends by the wall clock: a producer that fell behind a
 * fixed rate stops with the rest of its schedule unsent (counted, not hidden) rather than
 * making the run as long as the broker's backlog. */
static bool producer_finished(const struct perf_producer *p, uint64_t measured, uint64_t stamp)
{
    const struct perf_config *cfg = p->cfg;
    if (g_stop)
        return true;
    if (cfg->duration_s > 0) {
        uint64_t end = p->measure_start_ns + perf_seconds_to_ns(cfg->duration_s);
        return stamp >= end || perf_now_ns() >= end;
    }
    if (stamp < p->measure_start_ns)
        return false;
    return measured >= p->records;
}

/* Fixed rate with --duration: records whose intended send time fell in the run but that
 * were never sent because the producer could not keep up. */
static uint64_t producer_unsent(const struct perf_producer *p, uint64_t sent, double period_ns,
                                double phase)
{
    if (p->rate <= 0 || p->cfg->duration_s <= 0 || g_stop)
        return 0;
    uint64_t end = p->measure_start_ns + perf_seconds_to_ns(p->cfg->duration_s);
    double span = (double)(end - p->t0) - phase;
    uint64_t scheduled = span > 0 ? (uint64_t)ceil(span / period_ns) : 0;
    return scheduled > sent ? scheduled - sent : 0;
}

/* The produce loop: paced by this producer's share of --rate (its stamps offset by a
 * fraction of a period from the other producers'), or as fast as librdkafka accepts. */
static void producer_run(struct perf_producer *p, int producer_count)
{
    double period_ns = p->rate > 0 ? 1e9 / p->rate : 0;
    double phase = period_ns * p->index / producer_count;
    uint64_t measured = 0, seq;
    for (seq = 0;; seq++) {
        uint64_t stamp = p->rate > 0 ? p->t0 + (uint64_t)((double)seq * period_ns + phase)
                                     : perf_now_ns();
        while (p->rate > 0 && !g_stop && perf_now_ns() < stamp) {
            producer_wait_until(p, stamp);
            perf_series_tick(p->series, perf_now_ns());
        }
        bool counted = stamp >= p->measure_start_ns;
        if (producer_finished(p, measured, stamp))
            break;
        measured += counted; /* a failed send counts too, so the loop always ends */
        if (!producer_send(p, seq, stamp)) {
            perf_series_error(p->series, counted);
            continue;
        }
        if (seq % PERF_POLL_EVERY == 0) {
            rd_kafka_poll(p->rk, 0);
            perf_series_tick(p->series, perf_now_ns());
        }
    }
    p->unsent = producer_unsent(p, seq, period_ns, phase);
}

/* Waits up to --tail for every outstanding delivery report, still handing over interval
 * rows; then purges what is left (a broker far behind would otherwise make the run as
 * long as its backlog), and those records count as abandoned, not as errors. */
static void producer_drain(struct perf_producer *p)
{
    uint64_t deadline = perf_now_ns() + perf_seconds_to_ns(p->cfg->tail_s);
    while (rd_kafka_outq_len(p->rk) > 0 && perf_now_ns() < deadline) {
        rd_kafka_poll(p->rk, 50);
        perf_series_tick(p->series, perf_now_ns());
    }
    if (rd_kafka_outq_len(p->rk) == 0)
        return;
    fprintf(stderr, "sluice-perf: producer %d: %d records unacknowledged %.0f s after the end; "
            "abandoning them\n", p->index, rd_kafka_outq_len(p->rk), p->cfg->tail_s);
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    deadline = perf_now_ns() + perf_seconds_to_ns(PERF_PURGE_WAIT_S);
    while (rd_kafka_outq_len(p->rk) > 0 && perf_now_ns() < deadline)
        rd_kafka_poll(p->rk, 50);
}

static void producer_destroy(struct perf_producer *p)
{
    for (int t = 0; t < p->topics->count; t++)
        rd_kafka_topic_destroy(p->rkts[t]);
    rd_kafka_destroy(p->rk);
    free(p->rkts);
    free(p->delivered);
    free(p->value);
    perf_series_free(p->series);
}

/* ---------------------------------------------------------------- consumer */

/* The index of a topic of this run from its name ("NAME" or "NAME-i"), or -1. */
static int topics_find(const struct perf_topics *tp, const char *name)
{
    if (tp->count == 1)
        return strcmp(name, tp->names[0]) ? -1 : 0;
    const char *dash = strrchr(name, '-');
    if (!dash)
        return -1;
    char *end;
    long t = strtol(dash + 1, &end, 10);
    if (*end || t < 0 || t >= tp->count || strcmp(name, tp->names[t]))
        return -1;
    return (int)t;
}

static bool membership_group(const struct perf_config *cfg)
{
    return cfg->membership == MEMBERSHIP_GROUP;
}

/* Group membership: before the run starts, partitions assigned to this member start where
 * the run wants them (the high watermark taken at set-up for e2e, the beginning for
 * consume) and stay paused, so that nothing is read before every member of every group
 * has its share. A rebalance after the start resumes from the committed offsets, as for
 * any group member. Revocation gives the partitions back (and forgets their EOFs: they
 * come again once a partition is read to its end after the next assignment). */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
                         rd_kafka_topic_partition_list_t *parts, void *opaque)
{
    struct perf_consumer *c = opaque;
    const struct perf_topics *tp = c->topics;
    bool started = atomic_load(&c->run->started);
    if (err != RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
        atomic_fetch_sub(&c->run->assigned_total, c->assigned_count);
        c->assigned_count = 0;
        memset(c->at_eof, 0, (size_t)tp->toppars * sizeof *c->at_eof);
        c->eof_count = 0;
        rd_kafka_assign(rk, NULL);
        return;
    }
    for (int i = 0; i < parts->cnt && !started; i++) {
        rd_kafka_topic_partition_t *e = &parts->elems[i];
        int t = topics_find(tp, e->topic);
        e->offset = RD_KAFKA_OFFSET_BEGINNING;
        if (t >= 0 && e->partition >= 0 && e->partition < tp->partitions[t])
            e->offset = tp->start_offsets[tp->base[t] + e->partition];
    }
    rd_kafka_assign(rk, parts);
    if (!started)
        rd_kafka_pause_partitions(rk, parts);
    c->assigned_count += parts->cnt;
    atomic_fetch_add(&c->run->assigned_total, parts->cnt);
    atomic_fetch_add(&c->assignments, 1);
}

static rd_kafka_t *consumer_client(struct perf_consumer *c, bool eof)
{
    const struct perf_config *cfg = c->cfg;
    char buf[64];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg->bootstrap);
    snprintf(buf, sizeof buf, "sluice-perf-consumer-g%d-%d", c->group, c->index);
    conf_set(conf, "client.id", buf);
    conf_set(conf, "enable.partition.eof", eof ? "true" : "false");
    if (membership_group(cfg)) {
        snprintf(buf, sizeof buf, "sluice-perf-%08x-g%d", c->run->run_id, c->group);
        conf_set(conf, "group.id", buf);
        conf_set(conf, "auto.offset.reset", cfg->mode == MODE_E2E ? "latest" : "earliest");
        rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
        rd_kafka_conf_set_opaque(conf, c);
    }
    conf_extra(conf, cfg);
    rd_kafka_t *rk = client_new(RD_KAFKA_CONSUMER, conf);
    if (membership_group(cfg))
        rd_kafka_poll_set_consumer(rk);
    return rk;
}

/* Group membership: the member subscribes to its group's topics and the group's assignor
 * divides them. Returns false when the group reads no topic. */
static bool consumer_init_member(struct perf_consumer *c)
{
    const struct perf_topics *tp = c->topics;
    c->subscription = rd_kafka_topic_partition_list_new(tp->count);
    int32_t toppars = 0;
    for (int t = 0; t < tp->count; t++)
        if (c->group < perf_groups_of_topic(c->cfg->groups, t)) {
            rd_kafka_topic_partition_list_add(c->subscription, tp->names[t],
                                              RD_KAFKA_PARTITION_UA);
            toppars += tp->partitions[t];
        }
    if (c->subscription->cnt == 0)
        return false;
    if (c->index == 0)
        c->run->assignments_needed += toppars;
    bool eof = c->cfg->mode == MODE_CONSUME && !c->cfg->records_set && c->cfg->duration_s <= 0;
    c->rk = consumer_client(c, eof);
    return true;
}

/* Direct assignment: consumer `index` of group `group` takes every consumers-th partition
 * of the group's topics, in toppar order, standing in for a group's partition assignor.
 * Returns false when it was left without partitions. */
static bool consumer_init(struct perf_consumer *c, struct perf_run *run, int group, int index)
{
    const struct perf_config *cfg = run->cfg;
    const struct perf_topics *tp = &run->topics;
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    c->topics = tp;
    c->run = run;
    c->group = group;
    c->index = index;
    c->assigned = calloc((size_t)tp->toppars, sizeof *c->assigned);
    c->at_eof = calloc((size_t)tp->toppars, sizeof *c->at_eof);
    c->rkts = calloc((size_t)tp->count, sizeof *c->rkts);
    if (!c->assigned || !c->at_eof || !c->rkts)
        perf_die("out of memory");
    if (membership_group(cfg))
        return consumer_init_member(c);
    int32_t nth = 0;
    for (int32_t i = 0; i < tp->toppars; i++) {
        if (group >= perf_groups_of_topic(cfg->groups, tp->topic_of[i]))
            continue;
        if (nth++ % cfg->consumers == index)
            c->assigned[c->assigned_count++] = i;
    }
    if (c->assigned_count == 0)
        return false;
    bool eof = cfg->mode == MODE_CONSUME && !cfg->records_set && cfg->duration_s <= 0;
    c->rk = consumer_client(c, eof);
    for (int32_t j = 0; j < c->assigned_count; j++) {
        int t = tp->topic_of[c->assigned[j]];
        if (!c->rkts[t])
            c->rkts[t] = topic_handle(c->rk, tp->names[t], t);
    }
    c->queue = rd_kafka_queue_new(c->rk);
    return true;
}

static void consumer_start(struct perf_consumer *c)
{
    const struct perf_topics *tp = c->topics;
    if (membership_group(c->cfg)) {
        rd_kafka_resp_err_t err = rd_kafka_subscribe(c->rk, c->subscription);
        if (err)
            perf_die("subscribe (group %d): %s", c->group, rd_kafka_err2str(err));
        return;
    }
    for (int32_t j = 0; j < c->assigned_count; j++) {
        int32_t i = c->assigned[j];
        int t = tp->topic_of[i];
        if (rd_kafka_consume_start_queue(c->rkts[t], i - tp->base[t], tp->start_offsets[i],
                                         c->queue) != 0)
            perf_die("consume_start %s[%d]: %s", tp->names[t], i - tp->base[t],
                     rd_kafka_err2str(rd_kafka_last_error()));
    }
}

/* Every member has had an assignment and every group's partitions are held: members
 * joining one after another cause one rebalance each, and the first assignment of the
 * last of them belongs to the final generation. */
static bool consumers_settled(struct perf_run *run)
{
    for (int i = 0; i < run->consumer_count; i++)
        if (atomic_load(&run->consumers[i].assignments) == 0)
            return false;
    return atomic_load(&run->assigned_total) == run->assignments_needed;
}

/* Group membership, before the clock starts: serves the rebalances (from this thread)
 * until the groups have settled, then lets the members fetch. */
static void consumers_wait_assigned(struct perf_run *run)
{
    uint64_t deadline = perf_now_ns() + perf_seconds_to_ns(PERF_JOIN_WAIT_S);
    while (!consumers_settled(run)) {
        if (g_stop || perf_now_ns() > deadline)
            perf_die("groups not assigned after %.0f s: %d of %d partitions", PERF_JOIN_WAIT_S,
                     (int)atomic_load(&run->assigned_total), run->assignments_needed);
        for (int i = 0; i < run->consumer_count; i++) {
            rd_kafka_message_t *m = rd_kafka_consumer_poll(run->consumers[i].rk, 10);
            if (m && !m->err)
                fprintf(stderr, "sluice-perf: a record arrived before the start; not counted\n");
            if (m)
                rd_kafka_message_destroy(m);
        }
    }
    atomic_store(&run->started, true);
    for (int i = 0; i < run->consumer_count; i++) {
        rd_kafka_topic_partition_list_t *held = NULL;
        if (rd_kafka_assignment(run->consumers[i].rk, &held) == 0 && held) {
            rd_kafka_resume_partitions(run->consumers[i].rk, held);
            rd_kafka_topic_partition_list_destroy(held);
        }
    }
}

static int32_t consumer_toppar(const struct perf_consumer *c, const rd_kafka_message_t *m)
{
    int t = membership_group(c->cfg) ? topics_find(c->topics, rd_kafka_topic_name(m->rkt))
                                     : (int)(intptr_t)rd_kafka_topic_opaque(m->rkt);
    if (t < 0 || t >= c->topics->count || m->partition < 0 ||
        m->partition >= c->topics->partitions[t])
        return -1;
    return c->topics->base[t] + m->partition;
}

/* consume -n: counts `n` records against the group's total and returns how many of them
 * are within the records asked for. */
static uint64_t consumer_claim(struct perf_consumer *c, uint64_t n)
{
    if (!c->cfg->records_set)
        return n;
    uint64_t before = atomic_fetch_add(&c->run->group_consumed[c->group], n);
    if (before >= c->cfg->records)
        return 0;
    return before + n <= c->cfg->records ? n : c->cfg->records - before;
}

/* Handles one message or event; returns whether it was one of this run's records. */
static bool consumer_handle(struct perf_consumer *c, const rd_kafka_message_t *m, uint64_t now)
{
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        int32_t i = consumer_toppar(c, m);
        if (i >= 0 && !c->at_eof[i]) {
            c->at_eof[i] = true;
            c->eof_count++;
        }
        return false;
    }
    if (m->err) {
        perf_series_error(c->series, true);
        if (c->errors_logged++ < PERF_ERRORS_LOGGED)
            fprintf(stderr, "sluice-perf: consume error on %s[%d]: %s\n",
                    m->rkt ? rd_kafka_topic_name(m->rkt) : "-", m->partition,
                    rd_kafka_message_errstr(m));
        return false;
    }
    if (c->cfg->mode == MODE_CONSUME) {
        if (consumer_claim(c, 1) == 0)
            return false; /* the rest of the last batch: beyond the records asked for */
        c->received_all++;
        perf_series_add(c->series, m->len + m->key_len, 0, now, true);
        return true;
    }
    uint64_t stamp;
    if (!perf_stamp_get(m->payload, m->len, c->run->run_id, &stamp)) {
        c->foreign++;
        return false;
    }
    c->received_all++;
    perf_series_add(c->series, m->len + m->key_len, now > stamp ? now - stamp : 0, now,
                    now >= c->run->measure_start_ns);
    return true;
}

static bool consumer_finished(struct perf_consumer *c, uint64_t now, uint64_t idle_since)
{
    const struct perf_config *cfg = c->cfg;
    struct perf_run *run = c->run;
    bool idle = now - idle_since > perf_seconds_to_ns(cfg->timeout_s);
    if (cfg->mode == MODE_E2E) {
        if (!atomic_load(&run->producers_done))
            return g_stop;
        uint64_t done_ns = atomic_load(&run->producers_done_ns);
        bool tail_over = now > done_ns && now - done_ns > perf_seconds_to_ns(cfg->tail_s);
        return atomic_load(&run->group_received[c->group]) >=
                   atomic_load(&run->group_expected[c->group]) ||
               idle || tail_over || g_stop;
    }
    if (g_stop || idle)
        return true;
    if (cfg->records_set)
        return atomic_load(&run->group_consumed[c->group]) >= cfg->records;
    if (cfg->duration_s > 0)
        return now - run->measure_start_ns >= perf_seconds_to_ns(cfg->duration_s);
    return c->assigned_count > 0 && c->eof_count >= c->assigned_count;
}

/* Takes whatever the queue holds, up to a batch, without waiting; if it is empty, waits
 * up to 100 ms for one message. (A batch call with a timeout waits for the batch to
 * fill, which would add up to the timeout to every end-to-end latency.) A group member
 * polls its consumer queue, which also serves its rebalances. */
static ssize_t consumer_fetch(struct perf_consumer *c)
{
    if (membership_group(c->cfg)) {
        ssize_t n = 0;
        rd_kafka_message_t *m;
        while (n < PERF_CONSUME_BATCH && (m = rd_kafka_consumer_poll(c->rk, n ? 0 : 100)))
            c->batch[n++] = m;
        return n;
    }
    ssize_t n = rd_kafka_consume_batch_queue(c->queue, 0, c->batch, PERF_CONSUME_BATCH);
    if (n != 0)
        return n;
    c->batch[0] = rd_kafka_consume_queue(c->queue, 100);
    return c->batch[0] ? 1 : 0;
}

static void consumer_run(struct perf_consumer *c)
{
    uint64_t idle_since = perf_now_ns();
    for (;;) {
        ssize_t n = consumer_fetch(c);
        uint64_t now = perf_now_ns();
        if (n < 0)
            perf_die("consume: %s", rd_kafka_err2str(rd_kafka_last_error()));
        uint64_t ours = 0;
        for (ssize_t i = 0; i < n; i++) {
            ours += consumer_handle(c, c->batch[i], now);
            rd_kafka_message_destroy(c->batch[i]);
        }
        if (ours)
            atomic_fetch_add(&c->run->group_received[c->group], ours);
        if (n > 0)
            idle_since = now;
        perf_series_tick(c->series, now);
        if (consumer_finished(c, now, idle_since))
            break;
    }
}

static void consumer_destroy(struct perf_consumer *c)
{
    const struct perf_topics *tp = c->topics;
    if (c->rk && membership_group(c->cfg)) {
        rd_kafka_consumer_close(c->rk); /* leaves the group */
        rd_kafka_destroy(c->rk);
    } else if (c->rk) {
        for (int32_t j = 0; j < c->assigned_count; j++) {
            int32_t i = c->assigned[j];
            rd_kafka_consume_stop(c->rkts[tp->topic_of[i]], i - tp->base[tp->topic_of[i]]);
        }
        rd_kafka_queue_destroy(c->queue);
        for (int t = 0; t < tp->count; t++)
            if (c->rkts[t])
                rd_kafka_topic_destroy(c->rkts[t]);
        rd_kafka_destroy(c->rk);
    }
    if (c->subscription)
        rd_kafka_topic_partition_list_destroy(c->subscription);
    free(c->rkts);
    free(c->assigned);
    free(c->at_eof);
    perf_series_free(c->series);
}

/* ---------------------------------------------------------------- threads */

static void *producer_thread(void *arg)
{
    struct perf_producer *p = arg;
    producer_run(p, p->run->producer_count);
    producer_drain(p);
    perf_series_finish(p->series, perf_now_ns());
    atomic_fetch_sub(&p->run->producers_running, 1);
    return NULL;
}

static void *consumer_thread(void *arg)
{
    struct perf_consumer *c = arg;
    consumer_run(c);
    perf_series_finish(c->series, perf_now_ns());
    atomic_fetch_sub(&c->run->consumers_running, 1);
    return NULL;
}

/* ---------------------------------------------------------------- a run */

static void run_setup_consumers(struct perf_run *run)
{
    const struct perf_config *cfg = run->cfg;
    run->group_count = (int)ceil(cfg->groups - 1e-9);
    size_t slots = (size_t)run->group_count * (size_t)cfg->consumers;
    run->consumers = calloc(slots, sizeof *run->consumers);
    if (!run->consumers)
        perf_die("out of memory");
    for (int g = 0; g < run->group_count; g++)
        for (int i = 0; i < cfg->consumers; i++) {
            struct perf_consumer *c = &run->consumers[run->consumer_count];
            if (consumer_init(c, run, g, i)) {
                run->consumer_count++;
                continue;
            }
            fprintf(stderr, "sluice-perf: consumer %d of group %d has no partition to read\n",
                    i, g);
            consumer_destroy(c);
        }
    if (run->consumer_count == 0)
        perf_die("no consumer has a partition to read");
}

/* Finds the topics and makes every client before the clock starts, so that connection
 * and metadata set-up are not measured. */
static void run_setup(struct perf_run *run, const struct perf_config *cfg)
{
    memset(run, 0, sizeof *run);
    run->cfg = cfg;
    uint64_t seed = perf_seed();
    run->run_id = (uint32_t)perf_xorshift64(&seed);
    topics_setup(&run->topics, cfg);
    if (cfg->mode == MODE_E2E)
        topics_query_ends(&run->topics, cfg);
    if (cfg->mode != MODE_CONSUME) {
        run->producer_count = cfg->producers;
        run->producers = calloc((size_t)run->producer_count, sizeof *run->producers);
        if (!run->producers)
            perf_die("out of memory");
        for (int i = 0; i < run->producer_count; i++)
            producer_init(&run->producers[i], run, i);
    }
    if (cfg->mode != MODE_PRODUCE)
        run_setup_consumers(run);
}

static void run_start(struct perf_run *run, pthread_t *threads)
{
    const struct perf_config *cfg = run->cfg;
    for (int i = 0; i < run->consumer_count; i++)
        consumer_start(&run->consumers[i]);
    if (membership_group(cfg) && run->consumer_count)
        consumers_wait_assigned(run);
    run->t0 = perf_now_ns();
    run->measure_start_ns = run->t0 + (cfg->mode == MODE_CONSUME
                                       ? 0 : perf_seconds_to_ns(cfg->warmup_s));
    if (run->producer_count)
        run->produce_stream = perf_stream_new("produce", true, run->t0, run->measure_start_ns,
                                              cfg->interval_s);
    if (run->consumer_count)
        run->consume_stream = perf_stream_new(cfg->mode == MODE_E2E ? "e2e" : "consume",
                                              cfg->mode == MODE_E2E, run->t0,
                                              run->measure_start_ns, cfg->interval_s);
    atomic_store(&run->producers_running, run->producer_count);
    atomic_store(&run->consumers_running, run->consumer_count);
    atomic_store(&run->producers_done, run->producer_count == 0);
    for (int i = 0; i < run->consumer_count; i++) {
        struct perf_consumer *c = &run->consumers[i];
        c->series = perf_series_new(run->consume_stream);
        if (pthread_create(&threads[i], NULL, consumer_thread, c) != 0)
            perf_die("pthread_create failed");
    }
    for (int i = 0; i < run->producer_count; i++) {
        struct perf_producer *p = &run->producers[i];
        p->t0 = run->t0;
        p->measure_start_ns = run->measure_start_ns;
        p->series = perf_series_new(run->produce_stream);
        if (pthread_create(&threads[run->consumer_count + i], NULL, producer_thread, p) != 0)
            perf_die("pthread_create failed");
    }
}

/* Once every producer is done, tells each group how many of this run's records its
 * topics received, so that its consumers know when they have them all. */
static void run_producers_done(struct perf_run *run)
{
    const struct perf_topics *tp = &run->topics;
    for (int g = 0; g < run->group_count; g++) {
        uint64_t expected = 0;
        for (int32_t i = 0; i < tp->toppars; i++) {
            if (g >= perf_groups_of_topic(run->cfg->groups, tp->topic_of[i]))
                continue;
            for (int k = 0; k < run->producer_count; k++)
                expected += run->producers[k].delivered[i];
        }
        atomic_store(&run->group_expected[g], expected);
    }
    atomic_store(&run->producers_done_ns, perf_now_ns());
    atomic_store(&run->producers_done, true);
}

static void run_report(struct perf_run *run, bool final)
{
    uint64_t now = perf_now_ns();
    if (run->produce_stream)
        perf_stream_report(run->produce_stream, now, final);
    if (run->consume_stream)
        perf_stream_report(run->consume_stream, now, final);
}

/* The main thread prints interval rows until every thread is done. */
static void run_wait(struct perf_run *run, pthread_t *threads)
{
    for (;;) {
        usleep(PERF_REPORT_TICK_US);
        run_report(run, false);
        if (!atomic_load(&run->producers_done) && atomic_load(&run->producers_running) == 0)
            run_producers_done(run);
        if (atomic_load(&run->producers_done) && atomic_load(&run->consumers_running) == 0)
            break;
    }
    for (int i = 0; i < run->consumer_count + run->producer_count; i++)
        pthread_join(threads[i], NULL);
    run_report(run, true);
}

static void run_free(struct perf_run *run)
{
    for (int i = 0; i < run->consumer_count; i++)
        consumer_destroy(&run->consumers[i]);
    for (int i = 0; i < run->producer_count; i++)
        producer_destroy(&run->producers[i]);
    free(run->consumers);
    free(run->producers);
    perf_stream_free(run->produce_stream);
    perf_stream_free(run->consume_stream);
    topics_free(&run->topics);
}

/* ---------------------------------------------------------------- output */

static double groups_per_topic(const struct perf_config *cfg)
{
    double sum = 0;
    for (int t = 0; t < cfg->topics; t++)
        sum += perf_groups_of_topic(cfg->groups, t);
    return sum / cfg->topics;
}

static void print_header(const struct perf_run *run)
{
    const struct perf_config *cfg = run->cfg;
    char amount[64];
    if (cfg->duration_s > 0)
        snprintf(amount, sizeof amount, "%.1f s", cfg->duration_s);
    else if (cfg->records_set || cfg->mode != MODE_CONSUME)
        snprintf(amount, sizeof amount, "%" PRIu64 " records", cfg->records);
    else
        snprintf(amount, sizeof amount, "to end of partitions");
    printf("sluice-perf %s: bootstrap %s, %d topic(s) %s%s (%d partitions in all, "
           "replication factor %d), %s, librdkafka %s\n", mode_name(cfg->mode),
           cfg->bootstrap, cfg->topics, cfg->topic, cfg->topics > 1 ? "-*" : "",
           run->topics.toppars, cfg->replication, amount, rd_kafka_version_str());
    printf("  %d producer(s), %d consumer(s) per group, %.2f group(s) per topic (%d readers, %s)\n",
           run->producer_count, cfg->consumers, groups_per_topic(cfg), run->consumer_count,
           membership_group(cfg) ? "group members" : "direct assignment");
    if (cfg->mode != MODE_CONSUME) {
        char rate[32] = "max", linger[32] = "default", batch[32] = "default";
        if (cfg->rate > 0)
            snprintf(rate, sizeof rate, "%.0f rec/s", cfg->rate);
        if (cfg->linger_ms >= 0)
            snprintf(linger, sizeof linger, "%d", cfg->linger_ms);
        if (cfg->batch_size >= 0)
            snprintf(batch, sizeof batch, "%ld", cfg->batch_size);
        printf("  record %" PRIu64 " B, key %s, acks %s, compression %s, linger.ms %s, "
               "batch.size %s, rate %s, warmup %.1f s\n", cfg->record_size, key_name(cfg->key),
               cfg->acks, cfg->compression, linger, batch, rate, cfg->warmup_s);
    }
    fflush(stdout);
}

static void json_config(FILE *f, const struct perf_run *run)
{
    const struct perf_config *cfg = run->cfg;
    fprintf(f, "  \"config\": {\"bootstrap\": ");
    perf_json_string(f, cfg->bootstrap);
    fprintf(f, ", \"topic\": ");
    perf_json_string(f, cfg->topic);
    fprintf(f, ", \"topics\": %d, \"partitions\": %d, \"replication_factor\": %d, "
            "\"toppars\": %d, \"records\": %" PRIu64
            ", \"duration_s\": %.3f, \"record_size\": %" PRIu64 ", \"key\": \"%s\", \"acks\": ",
            cfg->topics, run->topics.partitions[0], cfg->replication, run->topics.toppars,
            cfg->records,
            cfg->duration_s, cfg->record_size, key_name(cfg->key));
    perf_json_string(f, cfg->acks);
    fprintf(f, ", \"compression\": ");
    perf_json_string(f, cfg->compression);
    fprintf(f, ", \"linger_ms\": %d, \"batch_size\": %ld, \"rate\": %.0f, \"warmup_s\": %.3f, "
            "\"interval_s\": %.3f, \"tail_s\": %.3f, \"producers\": %d, "
            "\"consumers_per_group\": %d, "
            "\"groups\": %.3f, \"groups_per_topic\": %.4f, \"consumers_total\": %d, "
            "\"group_membership\": \"%s\"}", cfg->linger_ms, cfg->batch_size,
            cfg->rate, cfg->warmup_s, cfg->interval_s, cfg->tail_s, run->producer_count,
            cfg->consumers,
            cfg->groups, groups_per_topic(cfg), run->consumer_count,
            membership_group(cfg) ? "consumer groups (subscribe)" : "direct assignment");
}

static void json_write(const struct perf_run *run, uint64_t lost, uint64_t queue_full,
                       uint64_t unsent)
{
    const struct perf_config *cfg = run->cfg;
    FILE *f = fopen(cfg->json_path, "w");
    if (!f)
        perf_die("cannot write %s: %s", cfg->json_path, strerror(errno));
    fprintf(f, "{\n  \"tool\": \"sluice-perf\", \"client\": ");
    char client[64];
    snprintf(client, sizeof client, "librdkafka %s", rd_kafka_version_str());
    perf_json_string(f, client);
    fprintf(f, ", \"librdkafka\": ");
    perf_json_string(f, rd_kafka_version_str());
    uint64_t delivered = 0;
    for (int i = 0; i < run->producer_count; i++)
        delivered += run->producers[i].delivered_all;
    fprintf(f, ", \"mode\": \"%s\", \"delivered\": %" PRIu64 ", \"lost\": %" PRIu64
            ", \"unsent\": %" PRIu64 ", \"queue_full\": %" PRIu64 ",\n", mode_name(cfg->mode),
            delivered, lost, unsent, queue_full);
    json_config(f, run);
    if (run->produce_stream) {
        fprintf(f, ",\n");
        perf_stream_json(run->produce_stream, f);
    }
    if (run->consume_stream) {
        fprintf(f, ",\n");
        perf_stream_json(run->consume_stream, f);
    }
    fprintf(f, "\n}\n");
    if (fclose(f) != 0)
        perf_die("cannot write %s: %s", cfg->json_path, strerror(errno));
}

/* Prints the summary and writes the JSON; returns the exit status. */
static int run_summarize(const struct perf_run *run)
{
    const struct perf_config *cfg = run->cfg;
    uint64_t lost = 0, foreign = 0, queue_full = 0, unsent = 0;
    for (int i = 0; i < run->producer_count; i++) {
        queue_full += run->producers[i].queue_full;
        unsent += run->producers[i].unsent + run->producers[i].abandoned;
    }
    for (int g = 0; cfg->mode == MODE_E2E && g < run->group_count; g++) {
        uint64_t expected = atomic_load(&run->group_expected[g]);
        uint64_t received = atomic_load(&run->group_received[g]);
        lost += received < expected ? expected - received : 0;
    }
    for (int i = 0; i < run->consumer_count; i++)
        foreign += run->consumers[i].foreign;
    int rc = 0;
    if (run->produce_stream) {
        perf_stream_print(run->produce_stream, stdout);
        rc |= run->produce_stream->errors || run->produce_stream->records == 0;
    }
    if (run->consume_stream) {
        perf_stream_print(run->consume_stream, stdout);
        rc |= run->consume_stream->errors || run->consume_stream->records == 0;
    }
    if (queue_full)
        printf("produce: local queue full %" PRIu64 " times (librdkafka back-pressure)\n",
               queue_full);
    if (unsent)
        printf("produce: %" PRIu64 " records never sent or never acknowledged (fixed-rate "
               "schedule not kept, or abandoned after --tail)\n", unsent);
    if (lost)
        printf("e2e: %" PRIu64 " delivered records not consumed by every group reading them "
               "within %.0f s of the producers' end\n", lost, cfg->tail_s);
    if (foreign)
        printf("e2e: %" PRIu64 " records from other runs skipped\n", foreign);
    if (cfg->mode == MODE_CONSUME && cfg->records_set)
        for (int g = 0; g < run->group_count; g++)
            if (atomic_load(&run->group_consumed[g]) < cfg->records) {
                fprintf(stderr, "sluice-perf: group %d consumed %" PRIu64 " of %" PRIu64
                        " records before the %.0f s idle timeout\n", g,
                        (uint64_t)atomic_load(&run->group_consumed[g]), cfg->records,
                        cfg->timeout_s);
                rc = 1;
            }
    if (cfg->json_path)
        json_write(run, lost, queue_full, unsent);
    return rc || lost ? 1 : 0;
}

int main(int argc, char **argv)
{
    perf_program = "sluice-perf";
    struct perf_config cfg;
    parse_args(&cfg, argc, argv);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    static struct perf_run run;
    run_setup(&run, &cfg);
    print_header(&run);
    pthread_t *threads = calloc((size_t)(run.consumer_count + run.producer_count),
                                sizeof *threads);
    if (!threads)
        perf_die("out of memory");
    run_start(&run, threads);
    run_wait(&run, threads);
    int rc = run_summarize(&run);
    free(threads);
    run_free(&run);
    return rc;
}
