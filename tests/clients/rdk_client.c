/*
 * sluice-rdk-client: a small librdkafka test client for Sluice's integration tests
 * and perf harness. It talks to any Kafka-compatible broker (Sluice or, as the
 * reference, Apache Kafka) exactly as an unmodified librdkafka application would,
 * and checks what comes back byte for byte. Keys and values derive
 * deterministically from a record's index, so a record read back can be checked
 * without remembering what was sent:
 *
 *   produce      N keyed records with delivery reports; --acked-log appends one
 *                "partition offset index" line per acknowledged record, flushed as
 *                it goes, so the log survives the broker being killed. The producer
 *                rides out the broker disappearing and reports acked/failed counts.
 *   verify-acked reads every partition from its low watermark (legacy assign-style
 *                consumer, no consumer group) and checks that every acked record is
 *                at its acked offset with the right key/value/headers, that offsets
 *                are contiguous and that no index appears twice.
 *   roundtrip    produces records with explicit timestamps, headers, null keys,
 *                null and empty values with acks=all, then reads them back by offset
 *                (from the start and from the middle) and by timestamp
 *                (rd_kafka_offsets_for_times) and checks every answer.
 *
 * Exit status: 0 success, 1 a check failed, 2 usage or unexpected client error.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* usleep, clock_gettime */
#endif
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#define EXIT_CHECK 1
#define EXIT_USAGE 2
#define KEY_LEN 11 /* "k" + 10 digits */
#define MAX_INDEX (UINT64_C(1) << 31)

/* ---------------------------------------------------------------- options */

struct opts {
    const char *cmd;
    const char *bootstrap;
    const char *topic;
    const char *acks;
    const char *compression;
    const char *acked_log;
    const char *debug;
    uint64_t count;
    uint64_t start_index;
    size_t size;
    int timeout_ms;      /* message.timeout.ms */
    int run_timeout_s;   /* overall deadline of consume phases */
    int idempotence;     /* -1 default (on for acks=all in produce) */
    bool headers;
    bool allow_dups;
    bool quiet;
    double rate;         /* records/s, 0 = unlimited */
    int linger_ms;
};

static void usage(void)
{
    fprintf(stderr,
        "usage: sluice-rdk-client COMMAND --bootstrap HOST:PORT --topic T [options]\n"
        "commands:\n"
        "  produce       --count N [--acks all|1|0] [--size B] [--compression none|gzip|snappy|lz4|zstd]\n"
        "                [--acked-log FILE] [--idempotence on|off] [--headers] [--timeout-ms MS]\n"
        "                [--start-index I] [--rate R] [--linger-ms MS]\n"
        "  verify-acked  --acked-log FILE [--size B] [--headers] [--allow-dups] [--run-timeout S]\n"
        "  roundtrip     [--count N] [--compression C] [--run-timeout S]\n"
        "common: [--debug CONTEXTS] [--quiet]\n");
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    memset(o, 0, sizeof(*o));
    o->acks = "all";
    o->compression = "none";
    o->count = 0;
    o->size = 100;
    o->timeout_ms = 60000;
    o->run_timeout_s = 120;
    o->idempotence = -1;
    o->linger_ms = 5;
    if (argc < 2)
        return -1;
    o->cmd = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = (i + 1 < argc) ? argv[i + 1] : NULL;
#define TAKE_ARG()                                                      \
    do {                                                                \
        if (!v) {                                                       \
            fprintf(stderr, "option %s needs a value\n", a);            \
            return -1;                                                  \
        }                                                               \
        i++;                                                            \
    } while (0)
        if (!strcmp(a, "--bootstrap")) { TAKE_ARG(); o->bootstrap = v; }
        else if (!strcmp(a, "--topic")) { TAKE_ARG(); o->topic = v; }
        else if (!strcmp(a, "--acks")) { TAKE_ARG(); o->acks = v; }
        else if (!strcmp(a, "--compression")) { TAKE_ARG(); o->compression = v; }
        else if (!strcmp(a, "--acked-log")) { TAKE_ARG(); o->acked_log = v; }
        else if (!strcmp(a, "--debug")) { TAKE_ARG(); o->debug = v; }
        else if (!strcmp(a, "--count")) { TAKE_ARG(); o->count = strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--start-index")) { TAKE_ARG(); o->start_index = strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--size")) { TAKE_ARG(); o->size = (size_t)strtoull(v, NULL, 10); }
        else if (!strcmp(a, "--timeout-ms")) { TAKE_ARG(); o->timeout_ms = atoi(v); }
        else if (!strcmp(a, "--run-timeout")) { TAKE_ARG(); o->run_timeout_s = atoi(v); }
        else if (!strcmp(a, "--rate")) { TAKE_ARG(); o->rate = strtod(v, NULL); }
        else if (!strcmp(a, "--linger-ms")) { TAKE_ARG(); o->linger_ms = atoi(v); }
        else if (!strcmp(a, "--idempotence")) {
            TAKE_ARG();
            o->idempotence = (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "1")) ? 1 : 0;
        }
        else if (!strcmp(a, "--headers")) o->headers = true;
        else if (!strcmp(a, "--allow-dups")) o->allow_dups = true;
        else if (!strcmp(a, "--quiet")) o->quiet = true;
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return -1;
        }
#undef TAKE_ARG
    }
    if (!o->bootstrap || !o->topic) {
        fprintf(stderr, "--bootstrap and --topic are required\n");
        return -1;
    }
    if (o->size > 64u * 1024 * 1024) {
        fprintf(stderr, "--size too large\n");
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("rdk-client: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        logf_("out of memory (%zu bytes)", n);
        exit(EXIT_USAGE);
    }
    return p;
}

static void *xcalloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) {
        logf_("out of memory");
        exit(EXIT_USAGE);
    }
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q) {
        logf_("out of memory (%zu bytes)", n);
        exit(EXIT_USAGE);
    }
    return q;
}

/* Deterministic record contents. The key is "k" and the index in ten digits; the
 * value starts with "v<index>|" and continues with a text pattern that depends on
 * the index (compressible, but different for every record). */
static void make_key(char out[KEY_LEN + 1], uint64_t idx)
{
    snprintf(out, KEY_LEN + 1, "k%010" PRIu64, (uint64_t)(idx % UINT64_C(10000000000)));
}

static void make_value(char *out, size_t len, uint64_t idx)
{
    static const char alphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char prefix[32];
    int n = snprintf(prefix, sizeof(prefix), "v%010" PRIu64 "|", (uint64_t)(idx % UINT64_C(10000000000)));
    size_t plen = (size_t)n < len ? (size_t)n : len;
    memcpy(out, prefix, plen);
    uint64_t mix = idx * 0x9E3779B97F4A7C15ull;
    for (size_t j = plen; j < len; j++)
        out[j] = alphabet[((mix >> ((j / 16) % 48)) + j / 3) % 62];
}

static int parse_key(const void *key, size_t len, uint64_t *idx)
{
    const char *k = key;
    if (!k || len != KEY_LEN || k[0] != 'k')
        return -1;
    uint64_t v = 0;
    for (size_t i = 1; i < len; i++) {
        if (k[i] < '0' || k[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(k[i] - '0');
    }
    *idx = v;
    return 0;
}

/* Header set used with --headers: "idx" = decimal index, "src" = "sluice". */
static int check_headers(rd_kafka_message_t *m, uint64_t idx, char *why, size_t whylen)
{
    rd_kafka_headers_t *hdrs = NULL;
    rd_kafka_resp_err_t err = rd_kafka_message_headers(m, &hdrs);
    if (err != RD_KAFKA_RESP_ERR_NO_ERROR || !hdrs) {
        snprintf(why, whylen, "headers missing (%s)", rd_kafka_err2str(err));
        return -1;
    }
    if (rd_kafka_header_cnt(hdrs) != 2) {
        snprintf(why, whylen, "expected 2 headers, got %zu", rd_kafka_header_cnt(hdrs));
        return -1;
    }
    const char *name;
    const void *val;
    size_t vsize;
    char want[32];
    snprintf(want, sizeof(want), "%" PRIu64, idx);
    if (rd_kafka_header_get_all(hdrs, 0, &name, &val, &vsize) || strcmp(name, "idx") ||
        vsize != strlen(want) || memcmp(val, want, vsize)) {
        snprintf(why, whylen, "header 0 is not idx=%s", want);
        return -1;
    }
    if (rd_kafka_header_get_all(hdrs, 1, &name, &val, &vsize) || strcmp(name, "src") ||
        vsize != 6 || memcmp(val, "sluice", 6)) {
        snprintf(why, whylen, "header 1 is not src=sluice");
        return -1;
    }
    return 0;
}

static int conf_set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK) {
        logf_("config %s=%s: %s", k, v, err);
        return -1;
    }
    return 0;
}

static int conf_set_int(rd_kafka_conf_t *conf, const char *k, long long v)
{
    char buf[32];
    snprintf(buf, sizeof(buf), "%lld", v);
    return conf_set(conf, k, buf);
}

/* Errors reported through the error callback: logged at a bounded rate, since a
 * dead broker makes librdkafka repeat them every reconnect attempt. */
struct errstats {
    unsigned long count;
    int64_t last_log_ms;
    bool fatal;
};

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    struct errstats *es = opaque;
    if (!es)
        return;
    es->count++;
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof(buf));
        logf_("FATAL error: %s: %s", rd_kafka_err2name(orig), buf);
        es->fatal = true;
        return;
    }
    int64_t t = now_ms();
    if (t - es->last_log_ms > 1000) {
        logf_("client error %s: %s (%lu so far)", rd_kafka_err2name(err), reason, es->count);
        es->last_log_ms = t;
    }
}

static rd_kafka_conf_t *base_conf(const struct opts *o, struct errstats *es)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (conf_set(conf, "bootstrap.servers", o->bootstrap) ||
        conf_set(conf, "client.id", "sluice-rdk-client") ||
        conf_set(conf, "reconnect.backoff.ms", "50") ||
        conf_set(conf, "reconnect.backoff.max.ms", "500") ||
        conf_set(conf, "topic.metadata.refresh.interval.ms", "10000") ||
        conf_set(conf, "log.connection.close", "false")) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    if (o->debug && conf_set(conf, "debug", o->debug)) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, es);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    return conf;
}

/* Waits for the topic to exist with at least one partition (it may be created on
 * this very metadata request by auto-create). Returns the partition count or -1. */
static int topic_partitions(rd_kafka_t *rk, const char *topic, int timeout_s)
{
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    if (!rkt) {
        logf_("rd_kafka_topic_new(%s): %s", topic, rd_kafka_err2str(rd_kafka_last_error()));
        return -1;
    }
    int64_t deadline = now_ms() + (int64_t)timeout_s * 1000;
    int parts = -1;
    rd_kafka_resp_err_t last = RD_KAFKA_RESP_ERR_NO_ERROR;
    while (now_ms() < deadline && !g_stop) {
        const struct rd_kafka_metadata *md = NULL;
        rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 0, rkt, &md, 5000);
        if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
            if (md->topic_cnt == 1 && md->topics[0].err == RD_KAFKA_RESP_ERR_NO_ERROR &&
                md->topics[0].partition_cnt > 0) {
                bool leaders = true;
                for (int i = 0; i < md->topics[0].partition_cnt; i++)
                    if (md->topics[0].partitions[i].leader < 0)
                        leaders = false;
                if (leaders)
                    parts = md->topics[0].partition_cnt;
            } else if (md->topic_cnt == 1) {
                last = md->topics[0].err;
            }
            rd_kafka_metadata_destroy(md);
            if (parts > 0)
                break;
        } else {
            last = err;
        }
        usleep(200 * 1000);
    }
    rd_kafka_topic_destroy(rkt);
    if (parts < 0)
        logf_("topic %s has no usable metadata after %d s (last error %s)", topic, timeout_s,
              rd_kafka_err2name(last));
    return parts;
}

/* ---------------------------------------------------------------- produce */

struct prod_state {
    FILE *acked_log;
    uint64_t acked, failed, unexpected;
    uint64_t err_by_code[8];
    rd_kafka_resp_err_t first_unexpected;
    int64_t last_fail_log_ms;
    int64_t *dr_offsets;   /* roundtrip: offset per index, -1 if failed */
    int32_t *dr_parts;
    uint64_t base_index;
};

/* Delivery failures that a producer sees when the broker dies or restarts. */
static bool expected_failure(rd_kafka_resp_err_t err)
{
    switch (err) {
    case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT:
    case RD_KAFKA_RESP_ERR__TIMED_OUT_QUEUE:
    case RD_KAFKA_RESP_ERR__TRANSPORT:
    case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
    case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
    case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
    case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
    case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION:
    case RD_KAFKA_RESP_ERR__PURGE_QUEUE:
    case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        return true;
    default:
        return false;
    }
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct prod_state *ps = opaque;
    uint64_t idx = (uint64_t)(uintptr_t)m->_private;
    if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
        ps->acked++;
        if (ps->acked_log)
            fprintf(ps->acked_log, "%" PRId32 " %" PRId64 " %" PRIu64 "\n", m->partition,
                    m->offset, idx);
        if (ps->dr_offsets) {
            ps->dr_offsets[idx - ps->base_index] = m->offset;
            ps->dr_parts[idx - ps->base_index] = m->partition;
        }
        return;
    }
    ps->failed++;
    if (!expected_failure(m->err)) {
        if (!ps->unexpected)
            ps->first_unexpected = m->err;
        ps->unexpected++;
    }
    int64_t t = now_ms();
    if (t - ps->last_fail_log_ms > 1000) {
        logf_("delivery failed for index %" PRIu64 ": %s (%" PRIu64 " failed so far)", idx,
              rd_kafka_err2name(m->err), ps->failed);
        ps->last_fail_log_ms = t;
    }
}

/* librdkafka has a single opaque per handle: bundle both states. */
struct prod_ctx {
    struct errstats es;      /* must stay first: error_cb casts the opaque */
    struct prod_state ps;
};

static void dr_cb_ctx(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    struct prod_ctx *ctx = opaque;
    dr_cb(rk, m, &ctx->ps);
}

static rd_kafka_t *producer_new(const struct opts *o, struct prod_ctx *ctx, bool idempotent)
{
    rd_kafka_conf_t *conf = base_conf(o, &ctx->es);
    if (!conf)
        return NULL;
    if (conf_set(conf, "acks", o->acks) ||
        conf_set(conf, "compression.codec", o->compression) ||
        conf_set(conf, "enable.idempotence", idempotent ? "true" : "false") ||
        conf_set_int(conf, "message.timeout.ms", o->timeout_ms) ||
        conf_set_int(conf, "linger.ms", o->linger_ms) ||
        conf_set(conf, "queue.buffering.max.messages", "200000") ||
        conf_set(conf, "queue.buffering.max.kbytes", "262144") ||
        conf_set(conf, "retry.backoff.ms", "100") ||
        conf_set(conf, "socket.timeout.ms", "10000")) {
        rd_kafka_conf_destroy(conf);
        return NULL;
    }
    rd_kafka_conf_set_opaque(conf, ctx);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb_ctx);
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        logf_("rd_kafka_new(producer): %s", err);
    return rk;
}

static void flush_acked_log(struct prod_state *ps)
{
    if (ps->acked_log)
        fflush(ps->acked_log);
}

/* Serves callbacks until the producer's queue drains, the deadline passes or a
 * stop is requested. */
static void drain(rd_kafka_t *rk, struct prod_ctx *ctx, int64_t deadline)
{
    while (rd_kafka_outq_len(rk) > 0 && now_ms() < deadline && !g_stop && !ctx->es.fatal) {
        rd_kafka_poll(rk, 100);
        flush_acked_log(&ctx->ps);
    }
    rd_kafka_poll(rk, 0);
    flush_acked_log(&ctx->ps);
}

static int cmd_produce(const struct opts *o)
{
    if (o->count == 0) {
        logf_("produce: --count N is required");
        return EXIT_USAGE;
    }
    struct prod_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    if (o->acked_log) {
        ctx.ps.acked_log = fopen(o->acked_log, "a");
        if (!ctx.ps.acked_log) {
            logf_("cannot open %s: %s", o->acked_log, strerror(errno));
            return EXIT_USAGE;
        }
        setvbuf(ctx.ps.acked_log, NULL, _IOFBF, 1 << 16);
    }
    bool idem = o->idempotence < 0 ? !strcmp(o->acks, "all") || !strcmp(o->acks, "-1")
                                   : o->idempotence == 1;
    rd_kafka_t *rk = producer_new(o, &ctx, idem);
    if (!rk)
        return EXIT_USAGE;

    char key[KEY_LEN + 1];
    char *val = xmalloc(o->size);
    int64_t t0 = now_ms();
    int64_t last_report = t0;
    uint64_t queued = 0;
    int rc = 0;
    for (uint64_t i = 0; i < o->count && !g_stop && !ctx.es.fatal; i++) {
        uint64_t idx = o->start_index + i;
        make_key(key, idx);
        make_value(val, o->size, idx);
        char idxs[24];
        snprintf(idxs, sizeof(idxs), "%" PRIu64, idx);
        if (o->rate > 0) {
            int64_t due = t0 + (int64_t)((double)i * 1000.0 / o->rate);
            while (now_ms() < due && !g_stop) {
                rd_kafka_poll(rk, (int)(due - now_ms() > 0 ? due - now_ms() : 0));
                flush_acked_log(&ctx.ps);
            }
        }
        for (;;) {
            rd_kafka_resp_err_t err;
            if (o->headers)
                err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(o->topic),
                                        RD_KAFKA_V_KEY(key, KEY_LEN),
                                        RD_KAFKA_V_VALUE(val, o->size),
                                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                        RD_KAFKA_V_HEADER("idx", idxs, (ssize_t)strlen(idxs)),
                                        RD_KAFKA_V_HEADER("src", "sluice", 6),
                                        RD_KAFKA_V_OPAQUE((void *)(uintptr_t)idx), RD_KAFKA_V_END);
            else
                err = rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(o->topic),
                                        RD_KAFKA_V_KEY(key, KEY_LEN),
                                        RD_KAFKA_V_VALUE(val, o->size),
                                        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                        RD_KAFKA_V_OPAQUE((void *)(uintptr_t)idx), RD_KAFKA_V_END);
            if (err == RD_KAFKA_RESP_ERR_NO_ERROR) {
                queued++;
                break;
            }
            if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                rd_kafka_poll(rk, 20);
                flush_acked_log(&ctx.ps);
                if (g_stop || ctx.es.fatal)
                    break;
                continue;
            }
            logf_("produce of index %" PRIu64 " failed: %s", idx, rd_kafka_err2name(err));
            rc = EXIT_USAGE;
            goto out;
        }
        if ((i & 1023) == 0) {
            rd_kafka_poll(rk, 0);
            flush_acked_log(&ctx.ps);
            int64_t t = now_ms();
            if (!o->quiet && t - last_report >= 5000) {
                logf_("progress: queued %" PRIu64 " acked %" PRIu64 " failed %" PRIu64, queued,
                      ctx.ps.acked, ctx.ps.failed);
                last_report = t;
            }
        }
    }
    drain(rk, &ctx, now_ms() + (int64_t)o->timeout_ms + 30000);
out:
    if (rd_kafka_outq_len(rk) > 0) {
        logf_("%d messages still queued at exit; purging", rd_kafka_outq_len(rk));
        rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        rd_kafka_poll(rk, 500);
    }
    flush_acked_log(&ctx.ps);
    int64_t el = now_ms() - t0;
    uint64_t not_reported = queued - ctx.ps.acked - ctx.ps.failed;
    printf("produce: requested=%" PRIu64 " queued=%" PRIu64 " acked=%" PRIu64 " failed=%" PRIu64
           " unexpected=%" PRIu64 " unreported=%" PRIu64 " elapsed_ms=%" PRId64
           " acked_per_s=%.0f idempotent=%d compression=%s\n",
           o->count, queued, ctx.ps.acked, ctx.ps.failed, ctx.ps.unexpected, not_reported, el,
           el > 0 ? (double)ctx.ps.acked * 1000.0 / (double)el : 0.0, idem, o->compression);
    if (ctx.ps.unexpected)
        logf_("unexpected delivery error, first: %s", rd_kafka_err2name(ctx.ps.first_unexpected));
    if (ctx.es.fatal || ctx.ps.unexpected)
        rc = rc ? rc : EXIT_CHECK;
    if (g_stop && !rc)
        rc = 0; /* stopped on request: what was acked is logged */
    rd_kafka_destroy(rk);
    if (ctx.ps.acked_log)
        fclose(ctx.ps.acked_log);
    free(val);
    return rc;
}

/* ---------------------------------------------------------------- consume */

typedef int (*msg_fn)(const rd_kafka_message_t *m, void *ctx);

/* Reads partitions [0, nparts) from start[p] (inclusive) to end[p] (exclusive) with
 * the legacy queue consumer (no consumer group) and hands each record to fn. Checks
 * that offsets arrive contiguous. Returns the number of problems found, or -1 on a
 * client error or time-out. */
static int consume_range(const struct opts *o, int nparts, const int64_t *start,
                         const int64_t *end, msg_fn fn, void *fnctx)
{
    struct errstats es;
    memset(&es, 0, sizeof(es));
    rd_kafka_conf_t *conf = base_conf(o, &es);
    if (!conf)
        return -1;
    if (conf_set(conf, "enable.partition.eof", "true") ||
        conf_set(conf, "check.crcs", "true") ||
        conf_set(conf, "fetch.wait.max.ms", "100") ||
        conf_set(conf, "queued.max.messages.kbytes", "16384") ||
        conf_set(conf, "fetch.error.backoff.ms", "100")) {
        rd_kafka_conf_destroy(conf);
        return -1;
    }
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    if (!rk) {
        logf_("rd_kafka_new(consumer): %s", err);
        return -1;
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, o->topic, NULL);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    int64_t *next = xcalloc((size_t)nparts, sizeof(*next));
    bool *started = xcalloc((size_t)nparts, sizeof(*started));
    int problems = 0, pending = 0;
    for (int p = 0; p < nparts; p++) {
        next[p] = start[p];
        if (start[p] >= end[p])
            continue;
        if (rd_kafka_consume_start_queue(rkt, p, start[p], q) == -1) {
            logf_("consume_start(%s [%d] @%" PRId64 "): %s", o->topic, p, start[p],
                  rd_kafka_err2str(rd_kafka_last_error()));
            problems = -1;
            goto out;
        }
        started[p] = true;
        pending++;
    }
    int64_t deadline = now_ms() + (int64_t)o->run_timeout_s * 1000;
    rd_kafka_message_t *batch[512];
    int64_t last_err_log = 0;
    while (pending > 0 && !g_stop) {
        if (now_ms() > deadline) {
            for (int p = 0; p < nparts; p++)
                if (next[p] < end[p])
                    logf_("time-out: partition %d read up to %" PRId64 " of %" PRId64, p,
                          next[p], end[p]);
            problems = -1;
            break;
        }
        ssize_t n = rd_kafka_consume_batch_queue(q, 500, batch, 512);
        if (n < 0) {
            logf_("consume_batch_queue: %s", rd_kafka_err2str(rd_kafka_last_error()));
            problems = -1;
            break;
        }
        for (ssize_t i = 0; i < n; i++) {
            rd_kafka_message_t *m = batch[i];
            int p = m->partition;
            if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                /* EOF before the end we were asked for means records are missing. */
                if (p >= 0 && p < nparts && next[p] < end[p] && m->offset >= end[p]) {
                    logf_("partition %d: EOF at %" PRId64 " but offsets %" PRId64 "..%" PRId64
                          " never arrived", p, m->offset, next[p], end[p] - 1);
                    problems++;
                    next[p] = end[p];
                    pending--;
                }
            } else if (m->err) {
                if (m->err == RD_KAFKA_RESP_ERR_OFFSET_OUT_OF_RANGE ||
                    m->err == RD_KAFKA_RESP_ERR__AUTO_OFFSET_RESET) {
                    logf_("partition %d: %s (%s)", p, rd_kafka_err2name(m->err),
                          rd_kafka_message_errstr(m));
                    problems = -1;
                    pending = 0;
                } else if (now_ms() - last_err_log > 1000) {
                    logf_("consumer error on partition %d: %s", p, rd_kafka_message_errstr(m));
                    last_err_log = now_ms();
                }
            } else if (p < 0 || p >= nparts) {
                logf_("record from unexpected partition %d", p);
                problems++;
            } else if (m->offset >= end[p] || next[p] >= end[p]) {
                /* past the range asked for: ignore */
            } else {
                if (m->offset != next[p]) {
                    logf_("partition %d: expected offset %" PRId64 ", got %" PRId64
                          " (offsets not contiguous)", p, next[p], m->offset);
                    problems++;
                }
                problems += fn(m, fnctx);
                next[p] = m->offset + 1;
                if (next[p] >= end[p])
                    pending--;
            }
            rd_kafka_message_destroy(m);
        }
    }
out:
    for (int p = 0; p < nparts; p++)
        if (started[p])
            rd_kafka_consume_stop(rkt, p);
    rd_kafka_queue_destroy(q);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(next);
    free(started);
    return problems;
}

static int query_watermarks(rd_kafka_t *rk, const char *topic, int nparts, int64_t *lo,
                            int64_t *hi)
{
    for (int p = 0; p < nparts; p++) {
        rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR_NO_ERROR;
        for (int attempt = 0; attempt < 20; attempt++) {
            err = rd_kafka_query_watermark_offsets(rk, topic, p, &lo[p], &hi[p], 5000);
            if (!err)
                break;
            usleep(250 * 1000);
        }
        if (err) {
            logf_("watermarks of %s [%d]: %s", topic, p, rd_kafka_err2name(err));
            return -1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- verify-acked */

struct verify_ctx {
    const struct opts *o;
    char *want_val;
    uint8_t *seen;          /* copies of each index found in the log */
    uint8_t *found;         /* acked index found at its acked place */
    int64_t *acked_off;     /* per index: acked offset or -1 */
    int32_t *acked_part;
    uint64_t cap;           /* entries of the three arrays above */
    uint64_t records, bad_key, bad_value, bad_headers, dups, wrong_place, acked_found;
    uint64_t report_budget;
};

static void verify_grow(struct verify_ctx *v, uint64_t idx)
{
    if (idx < v->cap)
        return;
    uint64_t ncap = v->cap ? v->cap : 1024;
    while (ncap <= idx)
        ncap *= 2;
    v->seen = xrealloc(v->seen, ncap);
    v->found = xrealloc(v->found, ncap);
    memset(v->found + v->cap, 0, ncap - v->cap);
    v->acked_off = xrealloc(v->acked_off, ncap * sizeof(*v->acked_off));
    v->acked_part = xrealloc(v->acked_part, ncap * sizeof(*v->acked_part));
    memset(v->seen + v->cap, 0, ncap - v->cap);
    for (uint64_t i = v->cap; i < ncap; i++) {
        v->acked_off[i] = -1;
        v->acked_part[i] = -1;
    }
    v->cap = ncap;
}

static bool verify_report(struct verify_ctx *v)
{
    if (v->report_budget == 0)
        return false;
    v->report_budget--;
    return true;
}

static int verify_msg(const rd_kafka_message_t *m, void *arg)
{
    struct verify_ctx *v = arg;
    uint64_t idx;
    v->records++;
    if (parse_key(m->key, m->key_len, &idx) || idx >= MAX_INDEX) {
        v->bad_key++;
        if (verify_report(v))
            logf_("partition %" PRId32 " offset %" PRId64 ": unparseable key (len %zu)",
                  m->partition, m->offset, m->key_len);
        return 1;
    }
    verify_grow(v, idx);
    int problems = 0;
    make_value(v->want_val, v->o->size, idx);
    if (m->len != v->o->size || !m->payload || memcmp(m->payload, v->want_val, m->len)) {
        v->bad_value++;
        problems++;
        if (verify_report(v))
            logf_("partition %" PRId32 " offset %" PRId64 ": value of index %" PRIu64
                  " differs (len %zu, want %zu)", m->partition, m->offset, idx, m->len,
                  v->o->size);
    }
    if (v->o->headers) {
        char why[128];
        if (check_headers((rd_kafka_message_t *)m, idx, why, sizeof(why))) {
            v->bad_headers++;
            problems++;
            if (verify_report(v))
                logf_("partition %" PRId32 " offset %" PRId64 ": %s", m->partition, m->offset,
                      why);
        }
    }
    if (v->seen[idx] < 255)
        v->seen[idx]++;
    if (v->seen[idx] > 1) {
        v->dups++;
        if (!v->o->allow_dups) {
            problems++;
            if (verify_report(v))
                logf_("index %" PRIu64 " appears again at partition %" PRId32 " offset %" PRId64,
                      idx, m->partition, m->offset);
        }
    }
    if (v->acked_off[idx] >= 0) {
        if (v->acked_off[idx] == m->offset && v->acked_part[idx] == m->partition) {
            v->acked_found++;
            v->found[idx] = 1;
        } else if (!v->o->allow_dups) {
            /* With --allow-dups an unacked copy may sit beside the acked one: only
             * the copy at the acked place counts (checked at the end). */
            v->wrong_place++;
            problems++;
            if (verify_report(v))
                logf_("index %" PRIu64 " acked at %" PRId32 "/%" PRId64 " but found at %" PRId32
                      "/%" PRId64, idx, v->acked_part[idx], v->acked_off[idx], m->partition,
                      m->offset);
        }
    }
    return problems;
}

static int load_acked_log(const char *path, struct verify_ctx *v, uint64_t *nacked,
                          int32_t *max_part)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        logf_("cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    char line[256];
    uint64_t lineno = 0, bad = 0;
    *nacked = 0;
    *max_part = -1;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        int32_t p;
        int64_t off;
        uint64_t idx;
        if (sscanf(line, "%" SCNd32 " %" SCNd64 " %" SCNu64, &p, &off, &idx) != 3 || p < 0 ||
            off < 0 || idx >= MAX_INDEX) {
            /* A torn last line is possible only if the producer itself was killed. */
            if (!feof(f) || strchr(line, '\n'))
                bad++;
            logf_("%s:%" PRIu64 ": unparseable line ignored", path, lineno);
            continue;
        }
        verify_grow(v, idx);
        if (v->acked_off[idx] >= 0) {
            logf_("%s:%" PRIu64 ": index %" PRIu64 " acked twice", path, lineno, idx);
            bad++;
            continue;
        }
        v->acked_off[idx] = off;
        v->acked_part[idx] = p;
        if (p > *max_part)
            *max_part = p;
        (*nacked)++;
    }
    fclose(f);
    return bad ? -1 : 0;
}

static int cmd_verify_acked(const struct opts *o)
{
    if (!o->acked_log) {
        logf_("verify-acked: --acked-log FILE is required");
        return EXIT_USAGE;
    }
    struct verify_ctx v;
    memset(&v, 0, sizeof(v));
    v.o = o;
    v.report_budget = 20;
    v.want_val = xmalloc(o->size);
    uint64_t nacked = 0;
    int32_t max_part = -1;
    int rc = 0;
    if (load_acked_log(o->acked_log, &v, &nacked, &max_part))
        rc = EXIT_CHECK;

    struct errstats es;
    memset(&es, 0, sizeof(es));
    rd_kafka_conf_t *conf = base_conf(o, &es);
    char err[512];
    rd_kafka_t *rk = conf ? rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err)) : NULL;
    if (!rk) {
        logf_("cannot create client: %s", conf ? err : "config");
        return EXIT_USAGE;
    }
    int nparts = topic_partitions(rk, o->topic, 30);
    if (nparts <= 0) {
        rd_kafka_destroy(rk);
        return EXIT_USAGE;
    }
    if (max_part >= nparts) {
        logf_("acked log names partition %" PRId32 " but the topic has %d", max_part, nparts);
        rc = EXIT_CHECK;
    }
    int64_t *lo = xcalloc((size_t)nparts, sizeof(*lo));
    int64_t *hi = xcalloc((size_t)nparts, sizeof(*hi));
    if (query_watermarks(rk, o->topic, nparts, lo, hi)) {
        rd_kafka_destroy(rk);
        return EXIT_USAGE;
    }
    rd_kafka_destroy(rk);
    int64_t total = 0;
    for (int p = 0; p < nparts; p++) {
        total += hi[p] - lo[p];
        if (lo[p] != 0) {
            logf_("partition %d: low watermark is %" PRId64 ", not 0", p, lo[p]);
            rc = EXIT_CHECK;
        }
    }
    int64_t t0 = now_ms();
    int problems = consume_range(o, nparts, lo, hi, verify_msg, &v);
    int64_t el = now_ms() - t0;
    if (problems < 0) {
        logf_("reading the topic back failed");
        rc = EXIT_CHECK;
    } else if (problems > 0) {
        rc = EXIT_CHECK;
    }
    /* Every acked record must have been found at its place. */
    uint64_t missing = 0;
    for (uint64_t i = 0; i < v.cap; i++) {
        if (v.acked_off[i] < 0)
            continue;
        if (!v.found[i]) {
            missing++;
            if (verify_report(&v))
                logf_("acked index %" PRIu64 " (partition %" PRId32 " offset %" PRId64
                      ") is missing", i, v.acked_part[i], v.acked_off[i]);
        }
    }
    if (v.acked_found != nacked) {
        logf_("%" PRIu64 " of %" PRIu64 " acked records found at their acked offset",
              v.acked_found, nacked);
        rc = EXIT_CHECK;
    }
    if (missing)
        rc = EXIT_CHECK;
    uint64_t unacked_present = 0;
    for (uint64_t i = 0; i < v.cap; i++)
        if (v.seen[i] && v.acked_off[i] < 0)
            unacked_present++;
    printf("verify-acked: partitions=%d log_records=%" PRId64 " read=%" PRIu64 " acked=%" PRIu64
           " acked_found=%" PRIu64 " missing=%" PRIu64 " unacked_present=%" PRIu64
           " dups=%" PRIu64 " wrong_place=%" PRIu64 " bad_key=%" PRIu64 " bad_value=%" PRIu64
           " bad_headers=%" PRIu64 " read_ms=%" PRId64 " result=%s\n",
           nparts, total, v.records, nacked, v.acked_found, missing, unacked_present, v.dups,
           v.wrong_place, v.bad_key, v.bad_value, v.bad_headers, el, rc ? "FAIL" : "OK");
    free(lo);
    free(hi);
    free(v.want_val);
    free(v.seen);
    free(v.found);
    free(v.acked_off);
    free(v.acked_part);
    return rc;
}

/* ---------------------------------------------------------------- roundtrip */

/* Record i of a roundtrip: partition i % P, timestamp base + i seconds, headers
 * idx/src; every 50 records one has a null key, one a null value and one an
 * empty value. */
enum rt_kind { RT_NORMAL, RT_NULL_KEY, RT_NULL_VALUE, RT_EMPTY_VALUE };

static enum rt_kind rt_kind_of(uint64_t i)
{
    switch (i % 50) {
    case 9: return RT_NULL_KEY;
    case 7: return RT_NULL_VALUE;
    case 11: return RT_EMPTY_VALUE;
    default: return RT_NORMAL;
    }
}

struct rt_ctx {
    const struct opts *o;
    uint64_t n;
    int nparts;
    int64_t ts_base;
    const int64_t *off_of;      /* per index */
    const int32_t *part_of;
    uint64_t **by_place;        /* [p][offset - base[p]] -> index */
    const int64_t *base;
    char *want_val;
    uint64_t checked;
    unsigned report_budget;
};

static int rt_msg(const rd_kafka_message_t *m, void *arg)
{
    struct rt_ctx *c = arg;
    int p = m->partition;
    int64_t rel = m->offset - c->base[p];
    char why[160] = "";
    c->checked++;
    if (rel < 0) {
        snprintf(why, sizeof(why), "offset below the produced range");
        goto bad;
    }
    uint64_t idx = c->by_place[p][rel];
    enum rt_kind k = rt_kind_of(idx);
    char key[KEY_LEN + 1];
    make_key(key, idx);
    if (k == RT_NULL_KEY) {
        if (m->key) {
            snprintf(why, sizeof(why), "index %" PRIu64 ": expected a null key", idx);
            goto bad;
        }
    } else if (!m->key || m->key_len != KEY_LEN || memcmp(m->key, key, KEY_LEN)) {
        snprintf(why, sizeof(why), "index %" PRIu64 ": wrong key", idx);
        goto bad;
    }
    size_t vlen = c->o->size;
    make_value(c->want_val, vlen, idx);
    if (k == RT_NULL_VALUE) {
        if (m->payload) {
            snprintf(why, sizeof(why), "index %" PRIu64 ": expected a null value, got %zu bytes",
                     idx, m->len);
            goto bad;
        }
    } else if (k == RT_EMPTY_VALUE) {
        if (!m->payload || m->len != 0) {
            snprintf(why, sizeof(why), "index %" PRIu64 ": expected an empty (non-null) value",
                     idx);
            goto bad;
        }
    } else if (!m->payload || m->len != vlen || memcmp(m->payload, c->want_val, vlen)) {
        snprintf(why, sizeof(why), "index %" PRIu64 ": wrong value", idx);
        goto bad;
    }
    rd_kafka_timestamp_type_t tstype;
    int64_t ts = rd_kafka_message_timestamp(m, &tstype);
    int64_t want_ts = c->ts_base + (int64_t)idx * 1000;
    if (tstype != RD_KAFKA_TIMESTAMP_CREATE_TIME || ts != want_ts) {
        snprintf(why, sizeof(why), "index %" PRIu64 ": timestamp %" PRId64 " type %d, want %" PRId64
                 " CreateTime", idx, ts, (int)tstype, want_ts);
        goto bad;
    }
    if (check_headers((rd_kafka_message_t *)m, idx, why, sizeof(why)))
        goto bad;
    return 0;
bad:
    if (c->report_budget) {
        c->report_budget--;
        logf_("roundtrip: partition %d offset %" PRId64 ": %s", p, m->offset, why);
    }
    return 1;
}

static int cmd_roundtrip(const struct opts *o_in)
{
    struct opts ob = *o_in;
    struct opts *o = &ob;
    if (o->count == 0)
        o->count = 600;
    if (o->count > 3000) {
        logf_("roundtrip: --count at most 3000 (timestamps are one second apart within the last hour)");
        return EXIT_USAGE;
    }
    uint64_t n = o->count;
    int fails = 0;
#define RT_FAIL(...)                 \
    do {                             \
        logf_("roundtrip: " __VA_ARGS__); \
        fails++;                     \
    } while (0)

    struct prod_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.ps.dr_offsets = xmalloc(n * sizeof(int64_t));
    ctx.ps.dr_parts = xmalloc(n * sizeof(int32_t));
    for (uint64_t i = 0; i < n; i++) {
        ctx.ps.dr_offsets[i] = -1;
        ctx.ps.dr_parts[i] = -1;
    }
    rd_kafka_t *rk = producer_new(o, &ctx, o->idempotence == 1);
    if (!rk)
        return EXIT_USAGE;
    int P = topic_partitions(rk, o->topic, 30);
    if (P <= 0) {
        rd_kafka_destroy(rk);
        return EXIT_USAGE;
    }
    int64_t *lo0 = xcalloc((size_t)P, sizeof(int64_t));
    int64_t *base = xcalloc((size_t)P, sizeof(int64_t));
    if (query_watermarks(rk, o->topic, P, lo0, base)) {
        rd_kafka_destroy(rk);
        return EXIT_USAGE;
    }
    for (int p = 0; p < P; p++) {
        if (base[p] != 0) {
            logf_("roundtrip: topic %s is not empty (partition %d ends at %" PRId64
                  "): timestamp lookups need a fresh topic", o->topic, p, base[p]);
            rd_kafka_destroy(rk);
            return EXIT_USAGE;
        }
    }
    /* Timestamps one second apart, ending more than a minute in the past: inside
     * any broker's accepted window (Kafka 4 rejects > 1 h in the future). */
    int64_t ts_base = (wall_ms() / 1000) * 1000 - (int64_t)n * 1000 - 120000;
    char key[KEY_LEN + 1];
    char *val = xmalloc(o->size);
    for (uint64_t i = 0; i < n; i++) {
        enum rt_kind k = rt_kind_of(i);
        make_key(key, i);
        make_value(val, o->size, i);
        char idxs[24];
        snprintf(idxs, sizeof(idxs), "%" PRIu64, i);
        const void *kp = k == RT_NULL_KEY ? NULL : key;
        size_t klen = k == RT_NULL_KEY ? 0 : KEY_LEN;
        const void *vp = k == RT_NULL_VALUE ? NULL : val;
        size_t vlen = (k == RT_NULL_VALUE || k == RT_EMPTY_VALUE) ? 0 : o->size;
        rd_kafka_resp_err_t err;
        do {
            err = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(o->topic), RD_KAFKA_V_PARTITION((int32_t)(i % (uint64_t)P)),
                RD_KAFKA_V_KEY(kp, klen), RD_KAFKA_V_VALUE((void *)(uintptr_t)vp, vlen),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                RD_KAFKA_V_TIMESTAMP(ts_base + (int64_t)i * 1000),
                RD_KAFKA_V_HEADER("idx", idxs, (ssize_t)strlen(idxs)),
                RD_KAFKA_V_HEADER("src", "sluice", 6),
                RD_KAFKA_V_OPAQUE((void *)(uintptr_t)i), RD_KAFKA_V_END);
            if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL)
                rd_kafka_poll(rk, 20);
        } while (err == RD_KAFKA_RESP_ERR__QUEUE_FULL);
        if (err) {
            logf_("roundtrip: producev: %s", rd_kafka_err2name(err));
            rd_kafka_destroy(rk);
            return EXIT_USAGE;
        }
    }
    drain(rk, &ctx, now_ms() + o->timeout_ms + 10000);
    free(val);
    if (ctx.ps.acked != n)
        RT_FAIL("%" PRIu64 " of %" PRIu64 " records acked (%" PRIu64 " failed)", ctx.ps.acked, n,
                ctx.ps.failed);

    /* Offsets: partition p receives indexes p, p+P, ... in order, so index i must
     * sit at base[p] + i / P. */
    uint64_t **by_place = xcalloc((size_t)P, sizeof(*by_place));
    uint64_t *per_part = xcalloc((size_t)P, sizeof(*per_part));
    for (int p = 0; p < P; p++)
        by_place[p] = xcalloc(n / (uint64_t)P + 1, sizeof(uint64_t));
    for (uint64_t i = 0; i < n; i++) {
        int p = (int)(i % (uint64_t)P);
        int64_t want = base[p] + (int64_t)(i / (uint64_t)P);
        by_place[p][i / (uint64_t)P] = i;
        per_part[p]++;
        if (ctx.ps.dr_parts[i] != p || ctx.ps.dr_offsets[i] != want) {
            if (fails < 20)
                RT_FAIL("index %" PRIu64 " acked at %" PRId32 "/%" PRId64 ", expected %d/%" PRId64,
                        i, ctx.ps.dr_parts[i], ctx.ps.dr_offsets[i], p, want);
            else
                fails++;
        }
    }
    int64_t *lo = xcalloc((size_t)P, sizeof(int64_t));
    int64_t *hi = xcalloc((size_t)P, sizeof(int64_t));
    if (query_watermarks(rk, o->topic, P, lo, hi) == 0) {
        for (int p = 0; p < P; p++)
            if (hi[p] != base[p] + (int64_t)per_part[p] || lo[p] != lo0[p])
                RT_FAIL("partition %d watermarks [%" PRId64 ", %" PRId64 "), expected [%" PRId64
                        ", %" PRId64 ")", p, lo[p], hi[p], lo0[p], base[p] + (int64_t)per_part[p]);
    } else {
        fails++;
    }

    /* By timestamp: for sample records, the exact timestamp and one ms before it
     * both find the record; before everything finds the first produced record;
     * after everything finds nothing (-1). */
    int ts_checks = 0;
    for (int round = 0; round < 24 && fails == 0; round++) {
        rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(P);
        int64_t *want = xcalloc((size_t)P, sizeof(int64_t));
        for (int p = 0; p < P; p++) {
            int64_t q;
            uint64_t np = per_part[p];
            if (np == 0) {
                q = ts_base;
                want[p] = -1;
            } else if (round == 0) {
                q = ts_base - 3600 * 1000;         /* before all */
                want[p] = base[p];
            } else if (round == 1) {
                q = ts_base + (int64_t)n * 1000 + 1; /* after all */
                want[p] = -1;
            } else {
                uint64_t k = ((uint64_t)round * 7919u + (uint64_t)p * 104729u) % np;
                uint64_t idx = (uint64_t)p + k * (uint64_t)P;
                q = ts_base + (int64_t)idx * 1000 - (round % 2 ? 1 : 0);
                want[p] = base[p] + (int64_t)k;
            }
            rd_kafka_topic_partition_list_add(l, o->topic, p)->offset = q;
        }
        rd_kafka_resp_err_t err = rd_kafka_offsets_for_times(rk, l, 10000);
        if (err) {
            RT_FAIL("offsets_for_times: %s", rd_kafka_err2name(err));
        } else {
            for (int i = 0; i < l->cnt; i++) {
                rd_kafka_topic_partition_t *tp = &l->elems[i];
                ts_checks++;
                if (tp->err || tp->offset != want[tp->partition])
                    RT_FAIL("offsets_for_times round %d partition %" PRId32 ": got offset %" PRId64
                            " (%s), expected %" PRId64, round, tp->partition, tp->offset,
                            rd_kafka_err2name(tp->err), want[tp->partition]);
            }
        }
        free(want);
        rd_kafka_topic_partition_list_destroy(l);
    }
    rd_kafka_destroy(rk);

    /* By offset: everything from each partition's first produced offset, then again
     * from the middle of each partition. */
    struct rt_ctx rc;
    memset(&rc, 0, sizeof(rc));
    rc.o = o;
    rc.n = n;
    rc.nparts = P;
    rc.ts_base = ts_base;
    rc.by_place = by_place;
    rc.base = base;
    rc.want_val = xmalloc(o->size);
    rc.report_budget = 20;
    int64_t *end = xcalloc((size_t)P, sizeof(int64_t));
    int64_t *mid = xcalloc((size_t)P, sizeof(int64_t));
    for (int p = 0; p < P; p++) {
        end[p] = base[p] + (int64_t)per_part[p];
        mid[p] = base[p] + (int64_t)per_part[p] / 2;
    }
    if (fails == 0) {
        int r = consume_range(o, P, base, end, rt_msg, &rc);
        if (r != 0)
            RT_FAIL("read back from the first offset: %d problems", r);
        uint64_t full = rc.checked;
        r = consume_range(o, P, mid, end, rt_msg, &rc);
        if (r != 0)
            RT_FAIL("read back from the middle offsets: %d problems", r);
        if (full != n)
            RT_FAIL("read %" PRIu64 " records from the start, expected %" PRIu64, full, n);
    }
    printf("roundtrip: partitions=%d records=%" PRIu64 " acked=%" PRIu64 " read_checked=%" PRIu64
           " timestamp_lookups=%d result=%s\n", P, n, ctx.ps.acked, rc.checked, ts_checks,
           fails ? "FAIL" : "OK");
    for (int p = 0; p < P; p++)
        free(by_place[p]);
    free(by_place);
    free(per_part);
    free(lo0);
    free(base);
    free(lo);
    free(hi);
    free(end);
    free(mid);
    free(rc.want_val);
    free(ctx.ps.dr_offsets);
    free(ctx.ps.dr_parts);
    return fails ? EXIT_CHECK : 0;
#undef RT_FAIL
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    struct opts o;
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage();
        return 0;
    }
    if (parse_opts(argc, argv, &o)) {
        usage();
        return EXIT_USAGE;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (!strcmp(o.cmd, "produce"))
        return cmd_produce(&o);
    if (!strcmp(o.cmd, "verify-acked"))
        return cmd_verify_acked(&o);
    if (!strcmp(o.cmd, "roundtrip"))
        return cmd_roundtrip(&o);
    logf_("unknown command %s", o.cmd);
    usage();
    return EXIT_USAGE;
}
