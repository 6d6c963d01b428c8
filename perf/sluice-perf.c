/*
 * sluice-perf: a load generator and latency meter for any Kafka-compatible broker
 * (Sluice, Apache Kafka, Redpanda ...), built on librdkafka so that what it measures is
 * what an ordinary client sees. It has three modes: `produce` sends records and measures
 * the time from send (or, at a fixed --rate, from the intended send time, so a stalled
 * broker cannot hide its stall through coordinated omission) to the delivery report;
 * `consume` reads records from the beginning of every partition without a consumer group
 * and measures throughput; `e2e` does both at once and measures end-to-end latency from
 * a timestamp embedded in each value. Latencies go into a fixed-size log-linear
 * histogram (perf-histogram.c) and are reported as p50/p99/p99.9/p99.99/max along with
 * records/s, MB/s (10^6 bytes) and errors, both as a human-readable summary and as
 * JSON. The hot loop allocates nothing: one payload buffer is rewritten in place for
 * every record and librdkafka copies it (RD_KAFKA_MSG_F_COPY); a record's send
 * timestamp travels as its opaque pointer rather than in a per-record allocation.
 */
#include "perf-histogram.h"

#include <librdkafka/rdkafka.h>

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The first PERF_HEADER_BYTES of every value: magic, run id, intended send time (ns,
 * CLOCK_MONOTONIC, which is shared by all processes on one machine). */
#define PERF_HEADER_BYTES 16
#define PERF_MAGIC UINT32_C(0x53504c46) /* "FLPS" on the wire, little-endian */
#define PERF_KEY_BYTES 8
#define PERF_RECORD_SIZE_MAX (UINT64_C(64) << 20)
#define PERF_CONF_EXTRA_MAX 64
#define PERF_INTERVALS_MAX 8192
#define PERF_PARTITIONS_MAX 65536
#define PERF_CONSUME_BATCH 1024
#define PERF_POLL_EVERY 32         /* produce calls between two rd_kafka_poll(0) */
#define PERF_ERRORS_LOGGED 5       /* first errors printed in full, the rest counted */
#define PERF_METADATA_WAIT_S 60.0  /* for the topic to exist with leaders everywhere */
#define PERF_DEFAULT_RECORDS UINT64_C(1000000)
#define PERF_DEFAULT_TIMEOUT_S 30.0
#define NS_PER_S UINT64_C(1000000000)

_Static_assert(PERF_HEADER_BYTES == 4 + 4 + 8, "header layout");
_Static_assert(PERF_POLL_EVERY > 0, "poll cadence");

enum perf_mode { MODE_PRODUCE, MODE_CONSUME, MODE_E2E };
enum perf_key { KEY_NONE, KEY_ROUND_ROBIN, KEY_RANDOM };

struct perf_config {
    enum perf_mode mode;
    const char *bootstrap;
    const char *topic;
    int32_t partitions;     /* expected count (0 = whatever the broker has) */
    bool create;            /* CreateTopics before starting; falls back to auto-create */
    uint64_t records;       /* measured records (0 when --duration is used) */
    bool records_set;
    double duration_s;
    uint64_t record_size;
    enum perf_key key;
    const char *acks;
    const char *compression;
    int linger_ms;          /* -1 = librdkafka default */
    long batch_size;        /* -1 = librdkafka default */
    double rate;            /* records/s, 0 = as fast as possible */
    double warmup_s;
    double interval_s;      /* 0 = no periodic report */
    double timeout_s;       /* consumers give up after this long without a record */
    const char *json_path;
    const char *extra[PERF_CONF_EXTRA_MAX]; /* -X key=value, passed to librdkafka */
    int extra_count;
};

/* One interval row of the periodic report, also kept for the JSON output. */
struct perf_interval {
    double t_s;
    bool warmup;
    double records_per_s;
    double mb_per_s;
    uint64_t p50_ns, p99_ns, max_ns;
};

/* One measured stream (produce, consume or e2e): totals, latencies, interval rows. It
 * belongs to exactly one thread while the run lasts and is read by main afterwards. */
struct perf_series {
    const char *name;
    bool has_latency;
    uint64_t records, bytes, errors;
    uint64_t start_ns, last_ns;           /* measurement window (after the warmup) */
    struct perf_hist hist;
    struct perf_hist ihist;               /* current interval, warmup included */
    uint64_t irecords, ibytes, istart_ns, interval_ns, next_report_ns;
    struct perf_interval intervals[PERF_INTERVALS_MAX];
    size_t interval_count;
};

struct perf_producer {
    const struct perf_config *cfg;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    int32_t partitions;
    uint32_t run_id;
    uint64_t measure_start_ns;
    struct perf_series *series;
    uint64_t delivered_all;               /* successful deliveries, warmup included */
    uint64_t sent_all;
    uint64_t queue_full;
    unsigned errors_logged;
    uint64_t rng;
    unsigned char key[PERF_KEY_BYTES];
    unsigned char *value;                 /* the one payload buffer, record_size bytes */
};

struct perf_consumer {
    const struct perf_config *cfg;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    rd_kafka_queue_t *queue;
    int32_t partitions;
    int64_t *start_offsets;               /* per partition */
    bool *at_eof;
    int32_t eof_count;
    bool e2e;
    uint32_t run_id;
    uint64_t measure_start_ns;
    struct perf_series *series;
    uint64_t received_all;                /* this run's records, warmup included */
    uint64_t foreign;                     /* e2e: records not written by this run */
    _Atomic uint64_t expected;            /* e2e: set by the producer when it is done */
    _Atomic bool producer_done;
    unsigned errors_logged;
    rd_kafka_message_t *batch[PERF_CONSUME_BATCH];
};

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("sluice-perf: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

static uint64_t seconds_to_ns(double s)
{
    return s <= 0 ? 0 : (uint64_t)(s * 1e9);
}

static uint64_t xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

static void put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *out)
{
    fputs(
"usage: sluice-perf produce|consume|e2e [options]\n"
"  -b, --bootstrap HOST:PORT   brokers (default 127.0.0.1:9092)\n"
"  -t, --topic NAME            topic (default sluice-perf); auto-created by the broker\n"
"                              (auto.create.topics.enable, num.partitions) unless --create\n"
"  -p, --partitions P          expected partition count, and the count for --create\n"
"      --create                create the topic with CreateTopics first (replication 1);\n"
"                              if the broker refuses, fall back to auto-creation\n"
"  -n, --records N             measured records (k/M/G suffixes; default 1M); consume:\n"
"                              stop after N records (default: at the end of every partition)\n"
"  -d, --duration S            measure for S seconds instead of N records\n"
"  -s, --record-size B         value size in bytes (default 100; e2e needs >= 16)\n"
"      --key MODE              none (default): no key, librdkafka's partitioner;\n"
"                              round-robin: 8-byte sequence key, partition = seq % P;\n"
"                              random: 8-byte random key, murmur2 partitioner\n"
"      --acks 0|1|all          (default 1)\n"
"      --compression C         none|gzip|snappy|lz4|zstd (default none)\n"
"      --linger-ms MS          linger.ms (default: librdkafka's)\n"
"      --batch-size B          batch.size in bytes (default: librdkafka's)\n"
"      --rate R                records/s, 0 = as fast as possible (default 0); at a fixed\n"
"                              rate latency counts from the intended send time\n"
"      --warmup S              run S seconds of load first, not measured (default 0)\n"
"      --interval S            periodic report every S seconds (default 0 = none)\n"
"      --timeout S             consumers stop after S s without records (default 30)\n"
"      --json FILE             write the results as JSON\n"
"  -X key=value                any librdkafka property, for producer and consumer\n",
        out);
}

/* Parses a count with an optional decimal k/M/G suffix: "10M" = 10000000. */
static uint64_t parse_count(const char *s, const char *what)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    if (*end == 'k' || *end == 'K')
        mult = 1e3, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1e6, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1e9, end++;
    if (errno || end == s || *end != '\0' || v < 0 || v * mult > 1e18)
        die("bad %s: '%s'", what, s);
    return (uint64_t)(v * mult + 0.5);
}

static double parse_seconds(const char *s, const char *what)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || v < 0 || v > 1e7)
        die("bad %s: '%s'", what, s);
    return v;
}

static enum perf_key parse_key(const char *s)
{
    if (strcmp(s, "none") == 0)
        return KEY_NONE;
    if (strcmp(s, "round-robin") == 0)
        return KEY_ROUND_ROBIN;
    if (strcmp(s, "random") == 0)
        return KEY_RANDOM;
    die("bad --key '%s' (none|round-robin|random)", s);
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
       OPT_RATE, OPT_WARMUP, OPT_INTERVAL, OPT_TIMEOUT, OPT_JSON };

static const struct option long_options[] = {
    {"bootstrap", required_argument, NULL, 'b'},
    {"topic", required_argument, NULL, 't'},
    {"partitions", required_argument, NULL, 'p'},
    {"create", no_argument, NULL, OPT_CREATE},
    {"records", required_argument, NULL, 'n'},
    {"duration", required_argument, NULL, 'd'},
    {"record-size", required_argument, NULL, 's'},
    {"key", required_argument, NULL, OPT_KEY},
    {"acks", required_argument, NULL, OPT_ACKS},
    {"compression", required_argument, NULL, OPT_COMPRESSION},
    {"linger-ms", required_argument, NULL, OPT_LINGER},
    {"batch-size", required_argument, NULL, OPT_BATCH},
    {"rate", required_argument, NULL, OPT_RATE},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"json", required_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void parse_option(struct perf_config *cfg, int c, const char *arg)
{
    switch (c) {
    case 'b': cfg->bootstrap = arg; break;
    case 't': cfg->topic = arg; break;
    case 'p': cfg->partitions = (int32_t)parse_count(arg, "--partitions"); break;
    case OPT_CREATE: cfg->create = true; break;
    case 'n': cfg->records = parse_count(arg, "--records"); cfg->records_set = true; break;
    case 'd': cfg->duration_s = parse_seconds(arg, "--duration"); break;
    case 's': cfg->record_size = parse_count(arg, "--record-size"); break;
    case OPT_KEY: cfg->key = parse_key(arg); break;
    case OPT_ACKS: cfg->acks = arg; break;
    case OPT_COMPRESSION: cfg->compression = arg; break;
    case OPT_LINGER: cfg->linger_ms = (int)parse_count(arg, "--linger-ms"); break;
    case OPT_BATCH: cfg->batch_size = (long)parse_count(arg, "--batch-size"); break;
    case OPT_RATE: cfg->rate = (double)parse_count(arg, "--rate"); break;
    case OPT_WARMUP: cfg->warmup_s = parse_seconds(arg, "--warmup"); break;
    case OPT_INTERVAL: cfg->interval_s = parse_seconds(arg, "--interval"); break;
    case OPT_TIMEOUT: cfg->timeout_s = parse_seconds(arg, "--timeout"); break;
    case OPT_JSON: cfg->json_path = arg; break;
    case 'X':
        if (cfg->extra_count == PERF_CONF_EXTRA_MAX)
            die("too many -X options (max %d)", PERF_CONF_EXTRA_MAX);
        if (!strchr(arg, '='))
            die("-X needs key=value, got '%s'", arg);
        cfg->extra[cfg->extra_count++] = arg;
        break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
}

static void check_config(struct perf_config *cfg)
{
    if (cfg->records_set && cfg->duration_s > 0)
        die("--records and --duration are exclusive");
    if (!cfg->records_set && cfg->duration_s <= 0 && cfg->mode != MODE_CONSUME)
        cfg->records = PERF_DEFAULT_RECORDS;
    if (cfg->record_size > PERF_RECORD_SIZE_MAX)
        die("--record-size above %" PRIu64, PERF_RECORD_SIZE_MAX);
    if (cfg->mode == MODE_E2E && cfg->record_size < PERF_HEADER_BYTES)
        die("e2e needs --record-size >= %d to carry the send timestamp", PERF_HEADER_BYTES);
    if (cfg->partitions < 0 || cfg->partitions > PERF_PARTITIONS_MAX)
        die("--partitions out of range");
    if (strcmp(cfg->acks, "0") && strcmp(cfg->acks, "1") && strcmp(cfg->acks, "all") &&
        strcmp(cfg->acks, "-1"))
        die("bad --acks '%s' (0|1|all)", cfg->acks);
    if (cfg->interval_s > 0 && cfg->interval_s < 0.1)
        die("--interval below 0.1 s");
}

static void parse_args(struct perf_config *cfg, int argc, char **argv)
{
    *cfg = (struct perf_config){
        .bootstrap = "127.0.0.1:9092", .topic = "sluice-perf", .record_size = 100,
        .key = KEY_NONE, .acks = "1", .compression = "none", .linger_ms = -1,
        .batch_size = -1, .timeout_s = PERF_DEFAULT_TIMEOUT_S,
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
        die("unknown mode '%s' (produce|consume|e2e)", argv[1]);
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "b:t:p:n:d:s:X:h", long_options, NULL)) != -1)
        parse_option(cfg, c, optarg);
    if (optind != argc)
        die("unexpected argument '%s'", argv[optind]);
    check_config(cfg);
}

/* ---------------------------------------------------------------- series and reports */

static struct perf_series *series_new(const char *name, bool has_latency)
{
    struct perf_series *s = calloc(1, sizeof *s);
    if (!s)
        die("out of memory");
    s->name = name;
    s->has_latency = has_latency;
    perf_hist_reset(&s->hist);
    perf_hist_reset(&s->ihist);
    return s;
}

/* Starts the interval clock at `origin` and the measurement window at `measure_start`
 * (later than `origin` by the warmup). */
static void series_start(struct perf_series *s, uint64_t origin, uint64_t measure_start,
                         const struct perf_config *cfg)
{
    assert(measure_start >= origin);
    s->start_ns = measure_start;
    s->last_ns = measure_start;
    s->istart_ns = origin;
    s->interval_ns = seconds_to_ns(cfg->interval_s);
    s->next_report_ns = s->interval_ns ? origin + s->interval_ns : UINT64_MAX;
}

/* Counts one record in the current interval and, when `measured` (not warmup), in the
 * totals; `t` is when it completed. */
static void series_add(struct perf_series *s, uint64_t bytes, uint64_t latency_ns, uint64_t t,
                       bool measured)
{
    s->irecords++;
    s->ibytes += bytes;
    if (s->has_latency)
        perf_hist_record(&s->ihist, latency_ns);
    if (!measured)
        return;
    s->records++;
    s->bytes += bytes;
    s->last_ns = t;
    if (s->has_latency)
        perf_hist_record(&s->hist, latency_ns);
}

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

/* Prints and stores one interval row if the interval has elapsed. `origin` is the time
 * shown as t=0 (the start of the run, warmup included); a row that began before the
 * measurement window is marked as warmup. */
static void series_tick(struct perf_series *s, uint64_t now, uint64_t origin)
{
    if (now < s->next_report_ns)
        return;
    bool warmup = s->istart_ns < s->start_ns; /* the interval holds warmup records */
    double secs = (double)(now - s->istart_ns) / 1e9;
    struct perf_interval row = {
        .t_s = (double)(now - origin) / 1e9, .warmup = warmup,
        .records_per_s = secs > 0 ? (double)s->irecords / secs : 0,
        .mb_per_s = secs > 0 ? (double)s->ibytes / secs / 1e6 : 0,
    };
    static const double pct[3] = {50, 99, 100};
    uint64_t q[3] = {0, 0, 0};
    if (s->has_latency)
        perf_hist_quantiles(&s->ihist, pct, 3, q);
    row.p50_ns = q[0], row.p99_ns = q[1], row.max_ns = q[2];
    if (s->has_latency)
        printf("[%8.1fs] %-8s %10.0f rec/s %8.2f MB/s  p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms%s\n",
               row.t_s, s->name, row.records_per_s, row.mb_per_s, ms(q[0]), ms(q[1]),
               ms(q[2]), warmup ? "  (warmup)" : "");
    else
        printf("[%8.1fs] %-8s %10.0f rec/s %8.2f MB/s%s\n", row.t_s, s->name,
               row.records_per_s, row.mb_per_s, warmup ? "  (warmup)" : "");
    fflush(stdout);
    if (s->interval_count < PERF_INTERVALS_MAX)
        s->intervals[s->interval_count++] = row;
    perf_hist_reset(&s->ihist);
    s->irecords = s->ibytes = 0;
    s->istart_ns = now;
    while (s->next_report_ns <= now)
        s->next_report_ns += s->interval_ns;
}

static double series_elapsed_s(const struct perf_series *s)
{
    return s->last_ns > s->start_ns ? (double)(s->last_ns - s->start_ns) / 1e9 : 0;
}

static const double summary_pct[5] = {50, 99, 99.9, 99.99, 100};

static void series_print(const struct perf_series *s)
{
    double secs = series_elapsed_s(s);
    printf("%s: %" PRIu64 " records, %.1f MB in %.3f s: %.0f records/s, %.2f MB/s; errors %" PRIu64 "\n",
           s->name, s->records, (double)s->bytes / 1e6, secs,
           secs > 0 ? (double)s->records / secs : 0, secs > 0 ? (double)s->bytes / secs / 1e6 : 0,
           s->errors);
    if (!s->has_latency)
        return;
    uint64_t q[5];
    if (!perf_hist_quantiles(&s->hist, summary_pct, 5, q)) {
        printf("%s latency: no samples\n", s->name);
        return;
    }
    printf("%s latency ms: p50 %.3f  p99 %.3f  p99.9 %.3f  p99.99 %.3f  max %.3f  "
           "mean %.3f  min %.3f\n",
           s->name, ms(q[0]), ms(q[1]), ms(q[2]), ms(q[3]), ms(q[4]),
           perf_hist_mean(&s->hist) / 1e6, ms(s->hist.min));
}

/* ---------------------------------------------------------------- JSON */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_series(FILE *f, const struct perf_series *s)
{
    double secs = series_elapsed_s(s);
    fprintf(f, "  \"%s\": {\"records\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
            ", \"elapsed_s\": %.6f, \"records_per_s\": %.1f, \"mb_per_s\": %.3f",
            s->name, s->records, s->bytes, s->errors, secs,
            secs > 0 ? (double)s->records / secs : 0, secs > 0 ? (double)s->bytes / secs / 1e6 : 0);
    uint64_t q[5];
    if (s->has_latency && perf_hist_quantiles(&s->hist, summary_pct, 5, q))
        fprintf(f, ",\n    \"latency_us\": {\"count\": %" PRIu64 ", \"min\": %.3f, \"mean\": %.3f, "
                "\"p50\": %.3f, \"p99\": %.3f, \"p99_9\": %.3f, \"p99_99\": %.3f, \"max\": %.3f}",
                s->hist.total, (double)s->hist.min / 1e3, perf_hist_mean(&s->hist) / 1e3,
                (double)q[0] / 1e3, (double)q[1] / 1e3, (double)q[2] / 1e3, (double)q[3] / 1e3,
                (double)q[4] / 1e3);
    fprintf(f, ",\n    \"intervals\": [");
    for (size_t i = 0; i < s->interval_count; i++) {
        const struct perf_interval *r = &s->intervals[i];
        fprintf(f, "%s\n      {\"t_s\": %.3f, \"warmup\": %s, \"records_per_s\": %.1f, "
                "\"mb_per_s\": %.3f", i ? "," : "", r->t_s, r->warmup ? "true" : "false",
                r->records_per_s, r->mb_per_s);
        if (s->has_latency)
            fprintf(f, ", \"p50_us\": %.3f, \"p99_us\": %.3f, \"max_us\": %.3f",
                    (double)r->p50_ns / 1e3, (double)r->p99_ns / 1e3, (double)r->max_ns / 1e3);
        fputc('}', f);
    }
    fprintf(f, "]}");
}

static void json_write(const struct perf_config *cfg, int32_t partitions,
                       struct perf_series *const *series, size_t n)
{
    FILE *f = fopen(cfg->json_path, "w");
    if (!f)
        die("cannot write %s: %s", cfg->json_path, strerror(errno));
    fprintf(f, "{\n  \"tool\": \"sluice-perf\", \"librdkafka\": ");
    json_string(f, rd_kafka_version_str());
    fprintf(f, ", \"mode\": \"%s\",\n  \"config\": {\"bootstrap\": ", mode_name(cfg->mode));
    json_string(f, cfg->bootstrap);
    fprintf(f, ", \"topic\": ");
    json_string(f, cfg->topic);
    fprintf(f, ", \"partitions\": %d, \"records\": %" PRIu64 ", \"duration_s\": %.3f, "
            "\"record_size\": %" PRIu64 ", \"key\": \"%s\", \"acks\": ",
            partitions, cfg->records, cfg->duration_s, cfg->record_size, key_name(cfg->key));
    json_string(f, cfg->acks);
    fprintf(f, ", \"compression\": ");
    json_string(f, cfg->compression);
    fprintf(f, ", \"linger_ms\": %d, \"batch_size\": %ld, \"rate\": %.0f, \"warmup_s\": %.3f, "
            "\"interval_s\": %.3f}", cfg->linger_ms, cfg->batch_size, cfg->rate, cfg->warmup_s,
            cfg->interval_s);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, ",\n");
        json_series(f, series[i]);
    }
    fprintf(f, "\n}\n");
    if (fclose(f) != 0)
        die("cannot write %s: %s", cfg->json_path, strerror(errno));
}

/* ---------------------------------------------------------------- librdkafka setup */

static void conf_set(rd_kafka_conf_t *conf, const char *name, const char *value)
{
    char err[512];
    if (rd_kafka_conf_set(conf, name, value, err, sizeof err) != RD_KAFKA_CONF_OK)
        die("librdkafka %s=%s: %s", name, value, err);
}

static void conf_extra(rd_kafka_conf_t *conf, const struct perf_config *cfg)
{
    for (int i = 0; i < cfg->extra_count; i++) {
        char buf[1024];
        const char *eq = strchr(cfg->extra[i], '=');
        size_t klen = (size_t)(eq - cfg->extra[i]);
        if (klen >= sizeof buf)
            die("-X key too long");
        memcpy(buf, cfg->extra[i], klen);
        buf[klen] = '\0';
        conf_set(conf, buf, eq + 1);
    }
}

static rd_kafka_t *client_new(rd_kafka_type_t type, rd_kafka_conf_t *conf)
{
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
    if (!rk)
        die("rd_kafka_new: %s", err);
    return rk;
}

/* Creates the topic with `partitions` partitions; an existing topic is fine, and so is a
 * broker without CreateTopics (auto-creation then has to do it). */
static void topic_create(rd_kafka_t *rk, const char *topic, int32_t partitions)
{
    char err[512];
    rd_kafka_NewTopic_t *nt = rd_kafka_NewTopic_new(topic, partitions, 1, err, sizeof err);
    if (!nt)
        die("NewTopic: %s", err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opts = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opts, 30000, err, sizeof err);
    rd_kafka_CreateTopics(rk, &nt, 1, opts, q);
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
        rd_kafka_resp_err_t terr = cnt ? rd_kafka_topic_result_error(res[0]) : RD_KAFKA_RESP_ERR_NO_ERROR;
        if (terr && terr != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
            fprintf(stderr, "sluice-perf: CreateTopics %s: %s; relying on auto-creation\n",
                    topic, rd_kafka_err2str(terr));
    }
    if (ev)
        rd_kafka_event_destroy(ev);
    rd_kafka_AdminOptions_destroy(opts);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewTopic_destroy(nt);
}

/* One metadata round: the partition count if the topic exists and every partition has a
 * leader, else 0. A metadata request for an unknown topic is also what makes a broker
 * with auto.create.topics.enable create it. */
static int32_t topic_ready_partitions(rd_kafka_t *rk, rd_kafka_topic_t *rkt, char *why,
                                      size_t why_len)
{
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
    int32_t count = 0;
    if (err) {
        snprintf(why, why_len, "%s", rd_kafka_err2str(err));
        return 0;
    }
    if (md->topic_cnt != 1 || md->topics[0].err || md->topics[0].partition_cnt == 0) {
        snprintf(why, why_len, "%s", md->topic_cnt != 1 ? "topic missing from metadata"
                 : rd_kafka_err2str(md->topics[0].err));
    } else {
        count = md->topics[0].partition_cnt;
        for (int i = 0; i < md->topics[0].partition_cnt; i++)
            if (md->topics[0].partitions[i].leader < 0) {
                snprintf(why, why_len, "partition %d has no leader", i);
                count = 0;
            }
    }
    rd_kafka_metadata_destroy(md);
    return count;
}

static int32_t topic_wait(rd_kafka_t *rk, rd_kafka_topic_t *rkt, const struct perf_config *cfg)
{
    uint64_t deadline = now_ns() + seconds_to_ns(PERF_METADATA_WAIT_S);
    char why[256] = "no answer";
    for (;;) {
        int32_t count = topic_ready_partitions(rk, rkt, why, sizeof why);
        if (count > 0) {
            if (cfg->partitions && count != cfg->partitions)
                fprintf(stderr, "sluice-perf: warning: topic %s has %d partitions, expected %d "
                        "(check the broker's num.partitions)\n", cfg->topic, count, cfg->partitions);
            if (count > PERF_PARTITIONS_MAX)
                die("topic has %d partitions, above %d", count, PERF_PARTITIONS_MAX);
            return count;
        }
        if (g_stop || now_ns() > deadline)
            die("topic %s not ready after %.0f s: %s", cfg->topic, PERF_METADATA_WAIT_S, why);
        usleep(200 * 1000);
    }
}

/* ---------------------------------------------------------------- producer */

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct perf_producer *p = opaque;
    uint64_t now = now_ns();
    uint64_t sent = (uint64_t)(uintptr_t)m->_private;
    if (m->err) {
        if (sent >= p->measure_start_ns)
            p->series->errors++;
        if (p->errors_logged++ < PERF_ERRORS_LOGGED)
            fprintf(stderr, "sluice-perf: delivery failed: %s\n", rd_kafka_err2str(m->err));
        return;
    }
    p->delivered_all++;
    series_add(p->series, m->len + m->key_len, now > sent ? now - sent : 0, now,
               sent >= p->measure_start_ns);
}

static rd_kafka_t *producer_new(struct perf_producer *p, const struct perf_config *cfg)
{
    char buf[64];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg->bootstrap);
    conf_set(conf, "client.id", "sluice-perf");
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
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_opaque(conf, p);
    return client_new(RD_KAFKA_PRODUCER, conf);
}

/* Fills the one payload buffer with pseudo-random capital letters (compressible about
 * as much as Kafka's own perf tool's payload). */
static void producer_init(struct perf_producer *p, const struct perf_config *cfg,
                          struct perf_series *series)
{
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->series = series;
    p->rng = now_ns() ^ ((uint64_t)getpid() << 32) ^ UINT64_C(0x9e3779b97f4a7c15);
    p->run_id = (uint32_t)xorshift64(&p->rng);
    p->value = malloc(cfg->record_size ? cfg->record_size : 1);
    if (!p->value)
        die("out of memory");
    for (uint64_t i = 0; i < cfg->record_size; i++)
        p->value[i] = (unsigned char)('A' + xorshift64(&p->rng) % 26);
    p->rk = producer_new(p, cfg);
    /* Before the topic handle exists: its first metadata request would already make a
     * broker with auto.create.topics.enable create the topic with num.partitions. */
    if (cfg->create && cfg->partitions > 0)
        topic_create(p->rk, cfg->topic, cfg->partitions);
    p->rkt = rd_kafka_topic_new(p->rk, cfg->topic, NULL);
    p->partitions = topic_wait(p->rk, p->rkt, cfg);
}

/* Sends record `seq` stamped with `stamp` (its intended send time); retries while the
 * local queue is full. Returns false on a non-retriable local error. */
static bool producer_send(struct perf_producer *p, uint64_t seq, uint64_t stamp)
{
    const struct perf_config *cfg = p->cfg;
    int32_t partition = RD_KAFKA_PARTITION_UA;
    const void *key = NULL;
    size_t key_len = 0;
    if (cfg->record_size >= PERF_HEADER_BYTES) {
        put_u32(p->value, PERF_MAGIC);
        put_u32(p->value + 4, p->run_id);
        put_u64(p->value + 8, stamp);
    }
    if (cfg->key == KEY_ROUND_ROBIN) {
        put_u64(p->key, seq);
        key = p->key, key_len = PERF_KEY_BYTES;
        partition = (int32_t)(seq % (uint64_t)p->partitions);
    } else if (cfg->key == KEY_RANDOM) {
        put_u64(p->key, xorshift64(&p->rng));
        key = p->key, key_len = PERF_KEY_BYTES;
    }
    for (;;) {
        if (rd_kafka_produce(p->rkt, partition, RD_KAFKA_MSG_F_COPY, p->value,
                             (size_t)cfg->record_size, key, key_len,
                             (void *)(uintptr_t)stamp) == 0)
            return true;
        rd_kafka_resp_err_t err = rd_kafka_last_error();
        if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            if (p->errors_logged++ < PERF_ERRORS_LOGGED)
                fprintf(stderr, "sluice-perf: produce failed: %s\n", rd_kafka_err2str(err));
            return false;
        }
        p->queue_full++;
        rd_kafka_poll(p->rk, 1);
    }
}

/* Waits until `target`, serving delivery reports meanwhile. */
static void producer_wait_until(struct perf_producer *p, uint64_t target)
{
    uint64_t now = now_ns();
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

static bool producer_finished(const struct perf_producer *p, uint64_t measured, uint64_t stamp)
{
    const struct perf_config *cfg = p->cfg;
    if (g_stop)
        return true;
    if (stamp < p->measure_start_ns)
        return false;
    if (cfg->duration_s > 0)
        return stamp - p->measure_start_ns >= seconds_to_ns(cfg->duration_s);
    return measured >= cfg->records;
}

/* The produce loop: paced by --rate or as fast as librdkafka accepts records. */
static void producer_run(struct perf_producer *p, uint64_t t0)
{
    const struct perf_config *cfg = p->cfg;
    double period_ns = cfg->rate > 0 ? 1e9 / cfg->rate : 0;
    uint64_t measured = 0;
    p->measure_start_ns = t0 + seconds_to_ns(cfg->warmup_s);
    series_start(p->series, t0, p->measure_start_ns, cfg);
    for (uint64_t seq = 0;; seq++) {
        uint64_t stamp = cfg->rate > 0 ? t0 + (uint64_t)((double)seq * period_ns) : now_ns();
        while (cfg->rate > 0 && !g_stop && now_ns() < stamp) {
            producer_wait_until(p, stamp);
            series_tick(p->series, now_ns(), t0);
        }
        bool counted = stamp >= p->measure_start_ns;
        if (producer_finished(p, measured, stamp))
            break;
        measured += counted; /* a failed send counts too, so the loop always ends */
        if (!producer_send(p, seq, stamp)) {
            p->series->errors += counted;
            continue;
        }
        p->sent_all++;
        if (seq % PERF_POLL_EVERY == 0) {
            rd_kafka_poll(p->rk, 0);
            series_tick(p->series, now_ns(), t0);
        }
    }
}

/* Waits for every outstanding delivery report, still printing interval rows. */
static void producer_drain(struct perf_producer *p, uint64_t t0)
{
    uint64_t deadline = now_ns() + seconds_to_ns(60);
    while (rd_kafka_outq_len(p->rk) > 0 && now_ns() < deadline) {
        rd_kafka_poll(p->rk, 50);
        series_tick(p->series, now_ns(), t0);
    }
    if (rd_kafka_outq_len(p->rk) > 0)
        fprintf(stderr, "sluice-perf: %d records still undelivered after 60 s\n",
                rd_kafka_outq_len(p->rk));
}

static void producer_destroy(struct perf_producer *p)
{
    rd_kafka_topic_destroy(p->rkt);
    rd_kafka_destroy(p->rk);
    free(p->value);
}

/* ---------------------------------------------------------------- consumer */

static rd_kafka_t *consumer_new(const struct perf_config *cfg, bool eof)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg->bootstrap);
    conf_set(conf, "client.id", "sluice-perf-consumer");
    conf_set(conf, "enable.partition.eof", eof ? "true" : "false");
    /* Metadata for an unknown topic should let the broker auto-create it. */
    conf_set(conf, "allow.auto.create.topics", "true");
    conf_extra(conf, cfg);
    return client_new(RD_KAFKA_CONSUMER, conf);
}

/* Sets up a consumer without a group: the legacy per-partition API started on one
 * queue, from `start` (RD_KAFKA_OFFSET_BEGINNING) or, with start == RD_KAFKA_OFFSET_END,
 * from each partition's high watermark as queried now, so that nothing produced after
 * this call is missed. */
static void consumer_init(struct perf_consumer *c, const struct perf_config *cfg,
                          struct perf_series *series, int64_t start)
{
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    c->series = series;
    c->e2e = cfg->mode == MODE_E2E;
    c->rk = consumer_new(cfg, !c->e2e && !cfg->records_set);
    c->rkt = rd_kafka_topic_new(c->rk, cfg->topic, NULL);
    c->partitions = topic_wait(c->rk, c->rkt, cfg);
    c->start_offsets = calloc((size_t)c->partitions, sizeof *c->start_offsets);
    c->at_eof = calloc((size_t)c->partitions, sizeof *c->at_eof);
    if (!c->start_offsets || !c->at_eof)
        die("out of memory");
    for (int32_t i = 0; i < c->partitions; i++) {
        int64_t lo = 0, hi = 0;
        c->start_offsets[i] = start;
        if (start != RD_KAFKA_OFFSET_END)
            continue;
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(c->rk, cfg->topic, i, &lo, &hi, 10000);
        if (err)
            die("watermarks of %s[%d]: %s", cfg->topic, i, rd_kafka_err2str(err));
        c->start_offsets[i] = hi;
    }
    c->queue = rd_kafka_queue_new(c->rk);
}

static void consumer_start(struct perf_consumer *c)
{
    for (int32_t i = 0; i < c->partitions; i++)
        if (rd_kafka_consume_start_queue(c->rkt, i, c->start_offsets[i], c->queue) != 0)
            die("consume_start %s[%d]: %s", c->cfg->topic, i,
                rd_kafka_err2str(rd_kafka_last_error()));
}

/* Handles one message or event from the queue. */
static void consumer_handle(struct perf_consumer *c, const rd_kafka_message_t *m, uint64_t now)
{
    if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
        if (m->partition >= 0 && m->partition < c->partitions && !c->at_eof[m->partition]) {
            c->at_eof[m->partition] = true;
            c->eof_count++;
        }
        return;
    }
    if (m->err) {
        c->series->errors++;
        if (c->errors_logged++ < PERF_ERRORS_LOGGED)
            fprintf(stderr, "sluice-perf: consume error on %s[%d]: %s\n", c->cfg->topic,
                    m->partition, rd_kafka_message_errstr(m));
        return;
    }
    if (!c->e2e) {
        if (c->cfg->records_set && c->received_all >= c->cfg->records)
            return; /* the rest of the last batch: beyond the records asked for */
        c->received_all++;
        series_add(c->series, m->len + m->key_len, 0, now, true);
        return;
    }
    const unsigned char *v = m->payload;
    if (m->len < PERF_HEADER_BYTES || get_u32(v) != PERF_MAGIC || get_u32(v + 4) != c->run_id) {
        c->foreign++;
        return;
    }
    c->received_all++;
    uint64_t stamp = get_u64(v + 8);
    series_add(c->series, m->len + m->key_len, now > stamp ? now - stamp : 0, now,
               stamp >= c->measure_start_ns);
}

static bool consumer_finished(struct perf_consumer *c, uint64_t now, uint64_t idle_since)
{
    const struct perf_config *cfg = c->cfg;
    bool idle = now - idle_since > seconds_to_ns(cfg->timeout_s);
    if (c->e2e) {
        if (!atomic_load(&c->producer_done))
            return false;
        return c->received_all >= atomic_load(&c->expected) || idle || g_stop;
    }
    if (g_stop || idle)
        return true;
    if (cfg->records_set)
        return c->received_all >= cfg->records;
    if (cfg->duration_s > 0)
        return now - c->series->start_ns >= seconds_to_ns(cfg->duration_s);
    return c->eof_count == c->partitions;
}

/* Takes whatever the queue holds, up to a batch, without waiting; if it is empty, waits
 * up to 100 ms for one message. (A batch call with a timeout waits for the batch to
 * fill, which would add up to the timeout to every end-to-end latency.) */
static ssize_t consumer_fetch(struct perf_consumer *c)
{
    ssize_t n = rd_kafka_consume_batch_queue(c->queue, 0, c->batch, PERF_CONSUME_BATCH);
    if (n != 0)
        return n;
    c->batch[0] = rd_kafka_consume_queue(c->queue, 100);
    return c->batch[0] ? 1 : 0;
}

static void consumer_run(struct perf_consumer *c, uint64_t t0)
{
    uint64_t idle_since = now_ns();
    for (;;) {
        ssize_t n = consumer_fetch(c);
        uint64_t now = now_ns();
        if (n < 0)
            die("consume: %s", rd_kafka_err2str(rd_kafka_last_error()));
        for (ssize_t i = 0; i < n; i++) {
            consumer_handle(c, c->batch[i], now);
            rd_kafka_message_destroy(c->batch[i]);
        }
        if (n > 0)
            idle_since = now;
        series_tick(c->series, now, t0);
        if (consumer_finished(c, now, idle_since))
            break;
    }
    if (c->e2e && c->received_all < atomic_load(&c->expected))
        fprintf(stderr, "sluice-perf: e2e: received %" PRIu64 " of %" PRIu64 " records\n",
                c->received_all, atomic_load(&c->expected));
}

static void consumer_destroy(struct perf_consumer *c)
{
    for (int32_t i = 0; i < c->partitions; i++)
        rd_kafka_consume_stop(c->rkt, i);
    rd_kafka_queue_destroy(c->queue);
    rd_kafka_topic_destroy(c->rkt);
    rd_kafka_destroy(c->rk);
    free(c->start_offsets);
    free(c->at_eof);
}

struct e2e_thread_arg {
    struct perf_consumer *consumer;
    uint64_t t0;
};

static void *consumer_thread(void *arg)
{
    struct e2e_thread_arg *a = arg;
    consumer_run(a->consumer, a->t0);
    return NULL;
}

/* ---------------------------------------------------------------- modes */

static void print_header(const struct perf_config *cfg, int32_t partitions)
{
    char amount[64];
    if (cfg->duration_s > 0)
        snprintf(amount, sizeof amount, "%.1f s", cfg->duration_s);
    else if (cfg->records_set || cfg->mode != MODE_CONSUME)
        snprintf(amount, sizeof amount, "%" PRIu64 " records", cfg->records);
    else
        snprintf(amount, sizeof amount, "to end of partitions");
    printf("sluice-perf %s: bootstrap %s, topic %s (%d partitions), %s, librdkafka %s\n",
           mode_name(cfg->mode), cfg->bootstrap, cfg->topic, partitions, amount,
           rd_kafka_version_str());
    if (cfg->mode != MODE_CONSUME) {
        char rate[32];
        if (cfg->rate > 0)
            snprintf(rate, sizeof rate, "%.0f rec/s", cfg->rate);
        else
            snprintf(rate, sizeof rate, "max");
        char linger[32] = "default", batch[32] = "default";
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

static int run_produce(const struct perf_config *cfg)
{
    struct perf_series *ps = series_new("produce", true);
    struct perf_producer p;
    producer_init(&p, cfg, ps);
    print_header(cfg, p.partitions);
    uint64_t t0 = now_ns();
    producer_run(&p, t0);
    producer_drain(&p, t0);
    series_print(ps);
    if (p.queue_full)
        printf("produce: local queue full %" PRIu64 " times (librdkafka back-pressure)\n",
               p.queue_full);
    if (cfg->json_path)
        json_write(cfg, p.partitions, &ps, 1);
    int rc = ps->errors || ps->records == 0 ? 1 : 0;
    producer_destroy(&p);
    free(ps);
    return rc;
}

static int run_consume(const struct perf_config *cfg)
{
    struct perf_series *cs = series_new("consume", false);
    struct perf_consumer c;
    consumer_init(&c, cfg, cs, RD_KAFKA_OFFSET_BEGINNING);
    print_header(cfg, c.partitions);
    uint64_t t0 = now_ns();
    series_start(cs, t0, t0, cfg);
    consumer_start(&c);
    consumer_run(&c, t0);
    series_print(cs);
    if (cfg->records_set && cs->records < cfg->records)
        fprintf(stderr, "sluice-perf: consumed %" PRIu64 " of %" PRIu64 " records before the "
                "%.0f s idle timeout\n", cs->records, cfg->records, cfg->timeout_s);
    if (cfg->json_path)
        json_write(cfg, c.partitions, &cs, 1);
    int rc = cs->errors || cs->records == 0 ||
             (cfg->records_set && cs->records < cfg->records) ? 1 : 0;
    consumer_destroy(&c);
    free(cs);
    return rc;
}

static int run_e2e(const struct perf_config *cfg)
{
    struct perf_series *ps = series_new("produce", true);
    struct perf_series *es = series_new("e2e", true);
    struct perf_consumer c;
    struct perf_producer p;
    producer_init(&p, cfg, ps);
    consumer_init(&c, cfg, es, RD_KAFKA_OFFSET_END);
    c.run_id = p.run_id;
    print_header(cfg, p.partitions);
    consumer_start(&c);
    uint64_t t0 = now_ns();
    c.measure_start_ns = t0 + seconds_to_ns(cfg->warmup_s);
    series_start(es, t0, c.measure_start_ns, cfg);
    struct e2e_thread_arg arg = {&c, t0};
    pthread_t tid;
    if (pthread_create(&tid, NULL, consumer_thread, &arg) != 0)
        die("pthread_create failed");
    producer_run(&p, t0);
    producer_drain(&p, t0);
    atomic_store(&c.expected, p.delivered_all);
    atomic_store(&c.producer_done, true);
    pthread_join(tid, NULL);
    series_print(ps);
    series_print(es);
    uint64_t lost = c.received_all < p.delivered_all ? p.delivered_all - c.received_all : 0;
    if (lost)
        printf("e2e: %" PRIu64 " delivered records never consumed\n", lost);
    if (cfg->json_path) {
        struct perf_series *both[2] = {ps, es};
        json_write(cfg, p.partitions, both, 2);
    }
    int rc = ps->errors || es->errors || lost || es->records == 0 ? 1 : 0;
    consumer_destroy(&c);
    producer_destroy(&p);
    free(ps);
    free(es);
    return rc;
}

int main(int argc, char **argv)
{
    struct perf_config cfg;
    parse_args(&cfg, argc, argv);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    switch (cfg.mode) {
    case MODE_PRODUCE: return run_produce(&cfg);
    case MODE_CONSUME: return run_consume(&cfg);
    case MODE_E2E: return run_e2e(&cfg);
    }
    assert(0 && "unreachable");
    return 2;
}
