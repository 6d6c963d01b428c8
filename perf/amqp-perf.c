/*
 * amqp-perf: sluice-perf's workloads against RabbitMQ, over AMQP 0-9-1 with librabbitmq
 * (Debian's librabbitmq-dev), so that RabbitMQ is measured the same way as the Kafka
 * brokers: same knobs, same value stamp, same histograms, same report and JSON
 * (perf-report.c). A Kafka topic of P partitions maps to P durable RabbitMQ streams named
 * TOPIC.0 .. TOPIC.(P-1) (the layout of a RabbitMQ super stream), because a stream, like a
 * partition, is a log every consumer group reads whole from an offset of its own; a group
 * of N consumers divides the streams among its members as sluice-perf divides partitions.
 *
 * Producers publish persistent messages to the default exchange with publisher confirms
 * (the AMQP counterpart of acks; --acks 0 turns them off) and keep at most --window
 * unconfirmed messages, whose intended send times wait in a ring indexed by delivery tag;
 * produce latency runs from that time to the confirm. Consumers set a prefetch per stream
 * (stream consumers need one; RabbitMQ counts it per consumer), shrunk so that one
 * connection's streams together stay within --prefetch-budget, consume from
 * x-stream-offset "first" (consume) or "next" (e2e) and ack every half prefetch. Messages are read frame by frame
 * (amqp_simple_wait_frame), not with amqp_consume_message, which mallocs every body: only
 * the first 16 bytes of a body are kept, so nothing is allocated per message.
 * Each producer and consumer is a thread with its own connection (librabbitmq connections
 * are not thread-safe).
 */
#include "perf-common.h"
#include "perf-histogram.h"
#include "perf-report.h"

#include <amqp.h>
#include <amqp_tcp_socket.h>

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
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define AP_RECORD_SIZE_MAX (UINT64_C(16) << 20)
#define AP_TOPICS_MAX 4096
#define AP_TOPPARS_MAX 65536
#define AP_QUEUE_NAME_BYTES 256       /* AMQP short strings are at most 255 bytes */
#define AP_PRODUCERS_MAX 64
#define AP_GROUPS_MAX 64
#define AP_CONSUMERS_PER_GROUP_MAX 64
#define AP_WINDOW_MAX (1u << 20)      /* unconfirmed messages per producer */
#define AP_FRAME_MAX 131072           /* RabbitMQ's default frame_max */
#define AP_CHANNEL 1
#define AP_ERRORS_LOGGED 5
#define AP_POLL_EVERY 32              /* publishes between two looks for confirms */
#define AP_REPORT_TICK_US 100000
#define AP_DEFAULT_RECORDS UINT64_C(1000000)
#define AP_PREFETCH_MIN 64            /* per stream, however many streams a consumer has */

_Static_assert(AP_TOPICS_MAX <= AP_TOPPARS_MAX, "every topic has a partition");
_Static_assert(AP_RECORD_SIZE_MAX > PERF_STAMP_BYTES, "room for the stamp");

enum ap_mode { MODE_PRODUCE, MODE_CONSUME, MODE_E2E };
enum ap_key { KEY_NONE, KEY_ROUND_ROBIN, KEY_RANDOM };

struct ap_config {
    enum ap_mode mode;
    const char *host;
    int port;
    const char *user, *password;
    const char *topic;
    int topics;
    int32_t partitions;      /* streams per topic */
    bool create;             /* declare the streams first */
    uint64_t records;
    bool records_set;
    double duration_s;
    uint64_t record_size;
    enum ap_key key;
    bool confirms;           /* --acks 1|all: publisher confirms; --acks 0: none */
    const char *acks;
    double rate;
    double warmup_s, interval_s, timeout_s;
    double tail_s;           /* e2e consumers stop this long after the producers at most */
    int producers, consumers;
    double groups;
    uint32_t window;
    uint16_t prefetch;       /* per stream */
    uint32_t prefetch_budget; /* per consumer connection, over all its streams */
    const char *json_path;
};

struct ap_topics {
    int count;
    int32_t toppars;         /* count * partitions */
    char (*queues)[AP_QUEUE_NAME_BYTES]; /* per toppar: TOPIC.PARTITION */
};

struct ap_inflight {
    uint64_t stamp_ns;
    int32_t toppar;
    bool pending;
};

struct ap_run;

struct ap_producer {
    const struct ap_config *cfg;
    struct ap_run *run;
    int index;
    amqp_connection_state_t conn;
    double rate;
    uint64_t records;
    uint64_t next_tag;        /* delivery tag of the next publish; tags start at 1 */
    uint64_t lowest_pending;  /* every tag below it is confirmed */
    struct ap_inflight *window; /* cfg->window slots, indexed by tag % window */
    struct perf_series *series;
    uint64_t *delivered;      /* per toppar, warmup included */
    uint64_t delivered_all;
    uint64_t unsent;          /* fixed rate: scheduled messages never published */
    unsigned errors_logged;
    uint64_t rng;
    unsigned char *value;
};

struct ap_consumer {
    const struct ap_config *cfg;
    struct ap_run *run;
    int group, index;
    amqp_connection_state_t conn;
    int32_t *assigned;
    int32_t assigned_count;
    uint64_t received_all, foreign, unacked, last_tag;
    uint16_t prefetch;        /* per stream, after the budget */
    _Atomic uint64_t expected;
    struct perf_series *series;
    unsigned errors_logged;
    /* the message being assembled from its frames */
    bool in_message;
    uint64_t body_size, body_got;
    size_t head_got;
    unsigned char head[PERF_STAMP_BYTES];
};

struct ap_run {
    const struct ap_config *cfg;
    struct ap_topics topics;
    uint32_t run_id;
    uint64_t t0, measure_start_ns;
    char server[128];         /* "RabbitMQ 3.10.8" */
    struct perf_stream *produce_stream, *consume_stream;
    struct ap_producer *producers;
    int producer_count;
    struct ap_consumer *consumers;
    int consumer_count, group_count;
    _Atomic uint64_t group_consumed[AP_GROUPS_MAX];
    _Atomic int producers_running, consumers_running;
    _Atomic bool producers_done;
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
"usage: amqp-perf produce|consume|e2e [options]\n"
"  -b, --broker HOST:PORT      RabbitMQ AMQP listener (default 127.0.0.1:5672)\n"
"      --user U, --password P  (default guest/guest)\n"
"  -t, --topic NAME            topic, or with --topics N the prefix of NAME-0..NAME-(N-1);\n"
"                              partition p of topic T is the durable stream T.p\n"
"      --topics N              (default 1)\n"
"  -p, --partitions P          streams per topic (default 1)\n"
"      --create                declare the streams first (x-queue-type stream, durable)\n"
"  -n, --records N             measured records over all producers (default 1M);\n"
"                              consume: stop each group after N records\n"
"  -d, --duration S            measure for S seconds instead\n"
"  -s, --record-size B         message body bytes (default 100; e2e needs >= 16)\n"
"      --key MODE              none|round-robin: streams in turn; random: a random stream\n"
"      --acks 0|1|all          1 and all: publisher confirms (default 1); 0: none\n"
"      --rate R                records/s over all producers, 0 = maximum (default 0)\n"
"      --producers N, --consumers N (per group), --groups G (fractions allowed)\n"
"      --window N              unconfirmed messages per producer (default 8192)\n"
"      --prefetch N            unacknowledged messages per stream (basic.qos; default 2000)\n"
"      --prefetch-budget N     ... and per consumer connection over all its streams: the\n"
"                              per-stream prefetch shrinks to fit (not below 64; default\n"
"                              20000)\n"
"      --warmup S, --interval S, --timeout S (consumers: idle stop, default 30)\n"
"      --tail S                at the end, producers wait at most S s for confirms (the\n"
"                              rest is abandoned and counted), and e2e consumers stop at\n"
"                              most S s after the producers; default 30\n"
"      --json FILE             write the results as JSON (sluice-perf's layout)\n",
        out);
}

enum { OPT_CREATE = 256, OPT_KEY, OPT_ACKS, OPT_RATE, OPT_WARMUP, OPT_INTERVAL, OPT_TIMEOUT,
       OPT_JSON, OPT_TOPICS, OPT_PRODUCERS, OPT_CONSUMERS, OPT_GROUPS, OPT_WINDOW,
       OPT_PREFETCH, OPT_USER, OPT_PASSWORD, OPT_TAIL, OPT_PREFETCH_BUDGET };

static const struct option long_options[] = {
    {"broker", required_argument, NULL, 'b'}, {"user", required_argument, NULL, OPT_USER},
    {"password", required_argument, NULL, OPT_PASSWORD},
    {"topic", required_argument, NULL, 't'}, {"topics", required_argument, NULL, OPT_TOPICS},
    {"partitions", required_argument, NULL, 'p'}, {"create", no_argument, NULL, OPT_CREATE},
    {"records", required_argument, NULL, 'n'}, {"duration", required_argument, NULL, 'd'},
    {"record-size", required_argument, NULL, 's'}, {"key", required_argument, NULL, OPT_KEY},
    {"acks", required_argument, NULL, OPT_ACKS}, {"rate", required_argument, NULL, OPT_RATE},
    {"producers", required_argument, NULL, OPT_PRODUCERS},
    {"consumers", required_argument, NULL, OPT_CONSUMERS},
    {"groups", required_argument, NULL, OPT_GROUPS},
    {"window", required_argument, NULL, OPT_WINDOW},
    {"prefetch", required_argument, NULL, OPT_PREFETCH},
    {"prefetch-budget", required_argument, NULL, OPT_PREFETCH_BUDGET},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"interval", required_argument, NULL, OPT_INTERVAL},
    {"timeout", required_argument, NULL, OPT_TIMEOUT}, {"tail", required_argument, NULL, OPT_TAIL},
    {"json", required_argument, NULL, OPT_JSON},
    {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
};

static enum ap_key parse_key(const char *s)
{
    if (!strcmp(s, "none"))
        return KEY_NONE;
    if (!strcmp(s, "round-robin"))
        return KEY_ROUND_ROBIN;
    if (!strcmp(s, "random"))
        return KEY_RANDOM;
    perf_die("bad --key '%s' (none|round-robin|random)", s);
}

static void parse_broker(struct ap_config *cfg, const char *arg)
{
    static char host[256];
    const char *colon = strrchr(arg, ':');
    size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
    if (n == 0 || n >= sizeof host)
        perf_die("bad --broker '%s'", arg);
    memcpy(host, arg, n);
    host[n] = '\0';
    cfg->host = host;
    if (colon)
        cfg->port = (int)perf_parse_count(colon + 1, "--broker port");
}

static void parse_option(struct ap_config *cfg, int c, const char *arg)
{
    switch (c) {
    case 'b': parse_broker(cfg, arg); break;
    case OPT_USER: cfg->user = arg; break;
    case OPT_PASSWORD: cfg->password = arg; break;
    case 't': cfg->topic = arg; break;
    case OPT_TOPICS: cfg->topics = (int)perf_parse_count(arg, "--topics"); break;
    case 'p': cfg->partitions = (int32_t)perf_parse_count(arg, "--partitions"); break;
    case OPT_CREATE: cfg->create = true; break;
    case 'n':
        cfg->records = perf_parse_count(arg, "--records");
        cfg->records_set = true;
        break;
    case 'd': cfg->duration_s = perf_parse_seconds(arg, "--duration"); break;
    case 's': cfg->record_size = perf_parse_count(arg, "--record-size"); break;
    case OPT_KEY: cfg->key = parse_key(arg); break;
    case OPT_ACKS: cfg->acks = arg; break;
    case OPT_RATE: cfg->rate = (double)perf_parse_count(arg, "--rate"); break;
    case OPT_PRODUCERS: cfg->producers = (int)perf_parse_count(arg, "--producers"); break;
    case OPT_CONSUMERS: cfg->consumers = (int)perf_parse_count(arg, "--consumers"); break;
    case OPT_GROUPS: cfg->groups = perf_parse_real(arg, "--groups"); break;
    case OPT_WINDOW: cfg->window = (uint32_t)perf_parse_count(arg, "--window"); break;
    case OPT_PREFETCH: cfg->prefetch = (uint16_t)perf_parse_count(arg, "--prefetch"); break;
    case OPT_PREFETCH_BUDGET:
        cfg->prefetch_budget = (uint32_t)perf_parse_count(arg, "--prefetch-budget");
        break;
    case OPT_WARMUP: cfg->warmup_s = perf_parse_seconds(arg, "--warmup"); break;
    case OPT_INTERVAL: cfg->interval_s = perf_parse_seconds(arg, "--interval"); break;
    case OPT_TIMEOUT: cfg->timeout_s = perf_parse_seconds(arg, "--timeout"); break;
    case OPT_TAIL: cfg->tail_s = perf_parse_seconds(arg, "--tail"); break;
    case OPT_JSON: cfg->json_path = arg; break;
    case 'h': usage(stdout); exit(0);
    default: usage(stderr); exit(2);
    }
}

static void check_config(struct ap_config *cfg)
{
    if (cfg->records_set && cfg->duration_s > 0)
        perf_die("--records and --duration are exclusive");
    if (!cfg->records_set && cfg->duration_s <= 0 && cfg->mode != MODE_CONSUME)
        cfg->records = AP_DEFAULT_RECORDS;
    if (cfg->record_size > AP_RECORD_SIZE_MAX)
        perf_die("--record-size above %" PRIu64, AP_RECORD_SIZE_MAX);
    if (cfg->mode == MODE_E2E && cfg->record_size < PERF_STAMP_BYTES)
        perf_die("e2e needs --record-size >= %d", PERF_STAMP_BYTES);
    if (strcmp(cfg->acks, "0") && strcmp(cfg->acks, "1") && strcmp(cfg->acks, "all") &&
        strcmp(cfg->acks, "-1"))
        perf_die("bad --acks '%s' (0|1|all)", cfg->acks);
    cfg->confirms = strcmp(cfg->acks, "0") != 0;
    if (cfg->topics < 1 || cfg->topics > AP_TOPICS_MAX || cfg->partitions < 1 ||
        (int64_t)cfg->topics * cfg->partitions > AP_TOPPARS_MAX)
        perf_die("--topics x --partitions must be 1..%d", AP_TOPPARS_MAX);
    if (cfg->producers < 1 || cfg->producers > AP_PRODUCERS_MAX || cfg->consumers < 1 ||
        cfg->consumers > AP_CONSUMERS_PER_GROUP_MAX || cfg->groups <= 0 ||
        ceil(cfg->groups) > AP_GROUPS_MAX)
        perf_die("--producers, --consumers or --groups out of range");
    if (cfg->window < 1 || cfg->window > AP_WINDOW_MAX || cfg->prefetch < 2)
        perf_die("--window must be 1..%u and --prefetch at least 2", AP_WINDOW_MAX);
    if (cfg->interval_s > 0 && cfg->interval_s < PERF_INTERVAL_MIN_S)
        perf_die("--interval below %.1f s", PERF_INTERVAL_MIN_S);
    if (strlen(cfg->topic) + 16 >= AP_QUEUE_NAME_BYTES)
        perf_die("--topic too long");
}

static void parse_args(struct ap_config *cfg, int argc, char **argv)
{
    *cfg = (struct ap_config){
        .host = "127.0.0.1", .port = 5672, .user = "guest", .password = "guest",
        .topic = "amqp-perf", .topics = 1, .partitions = 1, .record_size = 100,
        .acks = "1", .timeout_s = 30, .tail_s = 30, .producers = 1, .consumers = 1, .groups = 1,
        .window = 8192, .prefetch = 2000, .prefetch_budget = 20000,
    };
    if (argc < 2 || argv[1][0] == '-') {
        usage(argc >= 2 && !strcmp(argv[1], "--help") ? stdout : stderr);
        exit(argc >= 2 && !strcmp(argv[1], "--help") ? 0 : 2);
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
    while ((c = getopt_long(argc, argv, "b:t:p:n:d:s:h", long_options, NULL)) != -1)
        parse_option(cfg, c, optarg);
    if (optind != argc)
        perf_die("unexpected argument '%s'", argv[optind]);
    check_config(cfg);
}

static const char *mode_name(enum ap_mode m)
{
    return m == MODE_PRODUCE ? "produce" : m == MODE_CONSUME ? "consume" : "e2e";
}

static const char *key_name(enum ap_key k)
{
    return k == KEY_NONE ? "none" : k == KEY_ROUND_ROBIN ? "round-robin" : "random";
}

/* ---------------------------------------------------------------- connections */

static void check_reply(amqp_connection_state_t conn, const char *what)
{
    amqp_rpc_reply_t r = amqp_get_rpc_reply(conn);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return;
    if (r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION)
        perf_die("%s: %s", what, amqp_error_string2(r.library_error));
    if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = r.reply.decoded;
        perf_die("%s: channel closed: %d %.*s", what, m->reply_code, (int)m->reply_text.len,
                 (const char *)m->reply_text.bytes);
    }
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const amqp_connection_close_t *m = r.reply.decoded;
        perf_die("%s: connection closed: %d %.*s", what, m->reply_code,
                 (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    }
    perf_die("%s: server error (method 0x%08x)", what, r.reply.id);
}

static amqp_connection_state_t ap_connect(const struct ap_config *cfg)
{
    amqp_connection_state_t conn = amqp_new_connection();
    amqp_socket_t *sock = conn ? amqp_tcp_socket_new(conn) : NULL;
    if (!sock)
        perf_die("out of memory");
    int rc = amqp_socket_open(sock, cfg->host, cfg->port);
    if (rc != AMQP_STATUS_OK)
        perf_die("connect %s:%d: %s", cfg->host, cfg->port, amqp_error_string2(rc));
    amqp_rpc_reply_t r = amqp_login(conn, "/", 0, AP_FRAME_MAX, 0, AMQP_SASL_METHOD_PLAIN,
                                    cfg->user, cfg->password);
    if (r.reply_type != AMQP_RESPONSE_NORMAL)
        check_reply(conn, "login");
    amqp_channel_open(conn, AP_CHANNEL);
    check_reply(conn, "channel.open");
    return conn;
}

static void ap_close(amqp_connection_state_t conn)
{
    amqp_channel_close(conn, AP_CHANNEL, AMQP_REPLY_SUCCESS);
    amqp_connection_close(conn, AMQP_REPLY_SUCCESS);
    amqp_destroy_connection(conn);
}

/* "RabbitMQ 3.10.8", from the server properties of connection.start. */
static void server_version(amqp_connection_state_t conn, char *out, size_t len)
{
    const amqp_table_t *props = amqp_get_server_properties(conn);
    const char *product = "AMQP server", *version = "?";
    int plen = (int)strlen(product), vlen = 1;
    for (int i = 0; props && i < props->num_entries; i++) {
        const amqp_table_entry_t *e = &props->entries[i];
        if (e->value.kind != AMQP_FIELD_KIND_UTF8 && e->value.kind != AMQP_FIELD_KIND_BYTES)
            continue;
        amqp_bytes_t k = e->key, v = e->value.value.bytes;
        if (k.len == 7 && !memcmp(k.bytes, "product", 7))
            product = v.bytes, plen = (int)v.len;
        else if (k.len == 7 && !memcmp(k.bytes, "version", 7))
            version = v.bytes, vlen = (int)v.len;
    }
    snprintf(out, len, "%.*s %.*s", plen, product, vlen, version);
}

static amqp_table_t one_entry_table(amqp_table_entry_t *e, const char *key, const char *value)
{
    e->key = amqp_cstring_bytes(key);
    e->value.kind = AMQP_FIELD_KIND_UTF8;
    e->value.value.bytes = amqp_cstring_bytes(value);
    return (amqp_table_t){1, e};
}

/* ---------------------------------------------------------------- topics */

static void topics_setup(struct ap_run *run)
{
    const struct ap_config *cfg = run->cfg;
    struct ap_topics *tp = &run->topics;
    tp->count = cfg->topics;
    tp->toppars = cfg->topics * cfg->partitions;
    tp->queues = calloc((size_t)tp->toppars, sizeof *tp->queues);
    if (!tp->queues)
        perf_die("out of memory");
    for (int32_t i = 0; i < tp->toppars; i++) {
        int t = i / cfg->partitions, p = i % cfg->partitions;
        if (cfg->topics == 1)
            snprintf(tp->queues[i], AP_QUEUE_NAME_BYTES, "%s.%d", cfg->topic, p);
        else
            snprintf(tp->queues[i], AP_QUEUE_NAME_BYTES, "%s-%d.%d", cfg->topic, t, p);
    }
    amqp_connection_state_t conn = ap_connect(cfg);
    server_version(conn, run->server, sizeof run->server);
    for (int32_t i = 0; cfg->create && i < tp->toppars; i++) {
        amqp_table_entry_t e;
        amqp_queue_declare(conn, AP_CHANNEL, amqp_cstring_bytes(tp->queues[i]), 0, 1, 0, 0,
                           one_entry_table(&e, "x-queue-type", "stream"));
        check_reply(conn, tp->queues[i]);
    }
    ap_close(conn);
}

/* ---------------------------------------------------------------- producer */

static void producer_init(struct ap_producer *p, struct ap_run *run, int index)
{
    const struct ap_config *cfg = run->cfg;
    memset(p, 0, sizeof *p);
    p->cfg = cfg;
    p->run = run;
    p->index = index;
    p->rng = perf_seed() + (uint64_t)index * UINT64_C(0x2545f4914f6cdd1d);
    p->rate = cfg->rate / run->producer_count;
    p->records = cfg->records / (uint64_t)run->producer_count +
                 ((uint64_t)index < cfg->records % (uint64_t)run->producer_count);
    p->next_tag = p->lowest_pending = 1;
    p->window = calloc(cfg->window, sizeof *p->window);
    p->delivered = calloc((size_t)run->topics.toppars, sizeof *p->delivered);
    p->value = malloc(cfg->record_size ? cfg->record_size : 1);
    if (!p->window || !p->delivered || !p->value)
        perf_die("out of memory");
    perf_fill_payload(p->value, cfg->record_size, &p->rng);
    p->conn = ap_connect(cfg);
    if (cfg->confirms) {
        amqp_confirm_select(p->conn, AP_CHANNEL);
        check_reply(p->conn, "confirm.select");
    }
}

/* A confirmed (or, with ok false, nacked) message. */
static void producer_complete(struct ap_producer *p, struct ap_inflight *f, bool ok, uint64_t now)
{
    assert(f->pending);
    f->pending = false;
    bool measured = now >= p->run->measure_start_ns; /* completed after the warmup */
    if (!ok) {
        perf_series_error(p->series, measured);
        if (p->errors_logged++ < AP_ERRORS_LOGGED)
            fprintf(stderr, "amqp-perf: publish nacked by the broker\n");
        return;
    }
    p->delivered[f->toppar]++;
    p->delivered_all++;
    perf_series_add(p->series, p->cfg->record_size, now > f->stamp_ns ? now - f->stamp_ns : 0,
                    now, measured);
}

/* basic.ack / basic.nack: `tag`, or with `multiple` every tag up to it. */
static void producer_confirm(struct ap_producer *p, uint64_t tag, bool multiple, bool ok)
{
    uint64_t now = perf_now_ns(), window = p->cfg->window;
    if (tag >= p->next_tag)
        perf_die("confirm for delivery tag %" PRIu64 " never published", tag);
    uint64_t from = multiple ? p->lowest_pending : tag;
    for (uint64_t t = from; t <= tag; t++) {
        struct ap_inflight *f = &p->window[t % window];
        if (t >= p->lowest_pending && f->pending)
            producer_complete(p, f, ok, now);
    }
    while (p->lowest_pending < p->next_tag && !p->window[p->lowest_pending % window].pending)
        p->lowest_pending++;
}

static void fail_on_close(const amqp_frame_t *f)
{
    if (f->payload.method.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = f->payload.method.decoded;
        perf_die("channel closed by the broker: %d %.*s", m->reply_code,
                 (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    }
    if (f->payload.method.id == AMQP_CONNECTION_CLOSE_METHOD) {
        const amqp_connection_close_t *m = f->payload.method.decoded;
        perf_die("connection closed by the broker: %d %.*s", m->reply_code,
                 (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    }
}

/* Reads every frame that has arrived, waiting up to `wait_us` for the first one. */
static void producer_poll(struct ap_producer *p, long wait_us)
{
    struct timeval tv = {wait_us / 1000000, wait_us % 1000000};
    for (;;) {
        amqp_frame_t f;
        int rc = amqp_simple_wait_frame_noblock(p->conn, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            break;
        if (rc != AMQP_STATUS_OK)
            perf_die("producer %d: %s", p->index, amqp_error_string2(rc));
        tv = (struct timeval){0, 0};
        if (f.frame_type != AMQP_FRAME_METHOD)
            continue;
        if (f.payload.method.id == AMQP_BASIC_ACK_METHOD) {
            const amqp_basic_ack_t *a = f.payload.method.decoded;
            producer_confirm(p, a->delivery_tag, a->multiple, true);
        } else if (f.payload.method.id == AMQP_BASIC_NACK_METHOD) {
            const amqp_basic_nack_t *a = f.payload.method.decoded;
            producer_confirm(p, a->delivery_tag, a->multiple, false);
        } else {
            fail_on_close(&f);
        }
    }
    amqp_maybe_release_buffers(p->conn);
    perf_series_tick(p->series, perf_now_ns());
}

static int32_t producer_toppar(struct ap_producer *p, uint64_t seq)
{
    const struct ap_config *cfg = p->cfg;
    int t = (int)((seq + (uint64_t)p->index) % (uint64_t)cfg->topics);
    uint64_t part = cfg->key == KEY_RANDOM ? perf_xorshift64(&p->rng)
                                           : seq / (uint64_t)cfg->topics + (uint64_t)p->index;
    return t * cfg->partitions + (int32_t)(part % (uint64_t)cfg->partitions);
}

/* Publishes record `seq` stamped `stamp`, first waiting for room in the window. */
static bool producer_send(struct ap_producer *p, uint64_t seq, uint64_t stamp)
{
    const struct ap_config *cfg = p->cfg;
    while (cfg->confirms && p->next_tag - p->lowest_pending >= cfg->window && !g_stop)
        producer_poll(p, 100000);
    int32_t toppar = producer_toppar(p, seq);
    if (cfg->record_size >= PERF_STAMP_BYTES)
        perf_stamp_put(p->value, p->run->run_id, stamp);
    amqp_basic_properties_t props = {._flags = AMQP_BASIC_DELIVERY_MODE_FLAG,
                                     .delivery_mode = AMQP_DELIVERY_PERSISTENT};
    amqp_bytes_t body = {(size_t)cfg->record_size, p->value};
    int rc = amqp_basic_publish(p->conn, AP_CHANNEL, amqp_empty_bytes,
                                amqp_cstring_bytes(p->run->topics.queues[toppar]), 0, 0,
                                &props, body);
    if (rc != AMQP_STATUS_OK) {
        if (p->errors_logged++ < AP_ERRORS_LOGGED)
            fprintf(stderr, "amqp-perf: publish failed: %s\n", amqp_error_string2(rc));
        return false;
    }
    if (!cfg->confirms) { /* nothing will confirm it: count it as sent */
        struct ap_inflight f = {stamp, toppar, true};
        producer_complete(p, &f, true, stamp);
        return true;
    }
    p->window[p->next_tag % cfg->window] = (struct ap_inflight){stamp, toppar, true};
    p->next_tag++;
    return true;
}

/* With --duration the run also ends by the wall clock, as in sluice-perf: a producer
 * behind a fixed rate stops with the rest of its schedule counted as unsent. */
static bool producer_finished(const struct ap_producer *p, uint64_t measured, uint64_t stamp)
{
    if (g_stop)
        return true;
    if (p->cfg->duration_s > 0) {
        uint64_t end = p->run->measure_start_ns + perf_seconds_to_ns(p->cfg->duration_s);
        return stamp >= end || perf_now_ns() >= end;
    }
    if (stamp < p->run->measure_start_ns)
        return false;
    return measured >= p->records;
}

static uint64_t producer_unsent(const struct ap_producer *p, uint64_t sent, double period_ns,
                                double phase)
{
    if (p->rate <= 0 || p->cfg->duration_s <= 0 || g_stop)
        return 0;
    uint64_t end = p->run->measure_start_ns + perf_seconds_to_ns(p->cfg->duration_s);
    double span = (double)(end - p->run->t0) - phase;
    uint64_t scheduled = span > 0 ? (uint64_t)ceil(span / period_ns) : 0;
    return scheduled > sent ? scheduled - sent : 0;
}

static void producer_run(struct ap_producer *p)
{
    double period_ns = p->rate > 0 ? 1e9 / p->rate : 0;
    double phase = period_ns * p->index / p->run->producer_count;
    uint64_t measured = 0, seq;
    for (seq = 0;; seq++) {
        uint64_t stamp = p->rate > 0 ? p->run->t0 + (uint64_t)((double)seq * period_ns + phase)
                                     : perf_now_ns();
        for (uint64_t now = perf_now_ns(); p->rate > 0 && !g_stop && now < stamp;
             now = perf_now_ns()) {
            long left_us = (long)((stamp - now) / 1000);
            if (left_us >= 1000)
                producer_poll(p, left_us - 500);
            else
                nanosleep(&(struct timespec){0, (long)(stamp - now)}, NULL);
        }
        bool counted = stamp >= p->run->measure_start_ns;
        if (producer_finished(p, measured, stamp))
            break;
        measured += counted;
        if (!producer_send(p, seq, stamp))
            perf_series_error(p->series, counted);
        if (seq % AP_POLL_EVERY == 0)
            producer_poll(p, 0);
    }
    p->unsent = producer_unsent(p, seq, period_ns, phase);
}

/* Waits up to --tail for the outstanding confirms; what is still unconfirmed then is
 * abandoned and counted with the unsent. */
static void producer_drain(struct ap_producer *p)
{
    uint64_t deadline = perf_now_ns() + perf_seconds_to_ns(p->cfg->tail_s);
    while (p->lowest_pending < p->next_tag && perf_now_ns() < deadline)
        producer_poll(p, 50000);
    for (uint64_t t = p->lowest_pending; t < p->next_tag; t++)
        p->unsent += p->window[t % p->cfg->window].pending;
    if (p->lowest_pending < p->next_tag)
        fprintf(stderr, "amqp-perf: producer %d: messages unconfirmed %.0f s after the end; "
                "abandoning them\n", p->index, p->cfg->tail_s);
}

static void producer_destroy(struct ap_producer *p)
{
    ap_close(p->conn);
    free(p->window);
    free(p->delivered);
    free(p->value);
    perf_series_free(p->series);
}

/* ---------------------------------------------------------------- consumer */

/* Group `group`'s streams are divided among its consumers in toppar order. */
static bool consumer_init(struct ap_consumer *c, struct ap_run *run, int group, int index)
{
    const struct ap_config *cfg = run->cfg;
    memset(c, 0, sizeof *c);
    c->cfg = cfg;
    c->run = run;
    c->group = group;
    c->index = index;
    c->assigned = calloc((size_t)run->topics.toppars, sizeof *c->assigned);
    if (!c->assigned)
        perf_die("out of memory");
    int32_t nth = 0;
    for (int32_t i = 0; i < run->topics.toppars; i++) {
        if (group >= perf_groups_of_topic(cfg->groups, i / cfg->partitions))
            continue;
        if (nth++ % cfg->consumers == index)
            c->assigned[c->assigned_count++] = i;
    }
    if (c->assigned_count == 0)
        return false;
    uint32_t share = cfg->prefetch_budget / (uint32_t)c->assigned_count;
    c->prefetch = share < cfg->prefetch ? (uint16_t)(share < AP_PREFETCH_MIN ? AP_PREFETCH_MIN
                                                                              : share)
                                        : cfg->prefetch;
    c->conn = ap_connect(cfg);
    amqp_basic_qos(c->conn, AP_CHANNEL, 0, c->prefetch, 0);
    check_reply(c->conn, "basic.qos");
    return true;
}

/* One basic.consume per stream; the consumer tag carries the toppar index. */
static void consumer_start(struct ap_consumer *c)
{
    const char *offset = c->cfg->mode == MODE_E2E ? "next" : "first";
    for (int32_t j = 0; j < c->assigned_count; j++) {
        char tag[32];
        snprintf(tag, sizeof tag, "tp%d", c->assigned[j]);
        amqp_table_entry_t e;
        amqp_basic_consume(c->conn, AP_CHANNEL,
                           amqp_cstring_bytes(c->run->topics.queues[c->assigned[j]]),
                           amqp_cstring_bytes(tag), 0, 0, 0,
                           one_entry_table(&e, "x-stream-offset", offset));
        check_reply(c->conn, c->run->topics.queues[c->assigned[j]]);
    }
}

static uint64_t consumer_claim(struct ap_consumer *c)
{
    if (!c->cfg->records_set)
        return 1;
    return atomic_fetch_add(&c->run->group_consumed[c->group], 1) < c->cfg->records;
}

/* A whole message has arrived: count it, and ack every half prefetch (a stream
 * consumer's acks are credit, not deletion; one ack with `multiple` credits every stream
 * of the channel, so no stream can sit at its limit unacked). */
static void consumer_message(struct ap_consumer *c, uint64_t now)
{
    c->in_message = false;
    if (++c->unacked >= c->prefetch / 2u) {
        amqp_basic_ack(c->conn, AP_CHANNEL, c->last_tag, 1);
        c->unacked = 0;
    }
    if (c->cfg->mode == MODE_CONSUME) {
        if (!consumer_claim(c))
            return;
        c->received_all++;
        perf_series_add(c->series, c->body_size, 0, now, true);
        return;
    }
    uint64_t stamp;
    if (!perf_stamp_get(c->head, c->head_got, c->run->run_id, &stamp)) {
        c->foreign++;
        return;
    }
    c->received_all++;
    perf_series_add(c->series, c->body_size, now > stamp ? now - stamp : 0, now,
                    now >= c->run->measure_start_ns);
}

static void consumer_frame(struct ap_consumer *c, const amqp_frame_t *f, uint64_t now)
{
    if (f->frame_type == AMQP_FRAME_METHOD) {
        if (f->payload.method.id == AMQP_BASIC_DELIVER_METHOD) {
            const amqp_basic_deliver_t *d = f->payload.method.decoded;
            c->last_tag = d->delivery_tag;
            c->in_message = true;
            c->body_size = c->body_got = c->head_got = 0;
        } else {
            fail_on_close(f);
        }
    } else if (f->frame_type == AMQP_FRAME_HEADER && c->in_message) {
        c->body_size = f->payload.properties.body_size;
        if (c->body_size == 0)
            consumer_message(c, now);
    } else if (f->frame_type == AMQP_FRAME_BODY && c->in_message) {
        amqp_bytes_t b = f->payload.body_fragment;
        if (c->head_got < PERF_STAMP_BYTES) {
            size_t n = PERF_STAMP_BYTES - c->head_got < b.len ? PERF_STAMP_BYTES - c->head_got
                                                              : b.len;
            memcpy(c->head + c->head_got, b.bytes, n);
            c->head_got += n;
        }
        c->body_got += b.len;
        if (c->body_got >= c->body_size)
            consumer_message(c, now);
    }
}

static bool consumer_finished(struct ap_consumer *c, uint64_t now, uint64_t idle_since)
{
    const struct ap_config *cfg = c->cfg;
    bool idle = now - idle_since > perf_seconds_to_ns(cfg->timeout_s);
    if (cfg->mode == MODE_E2E) {
        if (!atomic_load(&c->run->producers_done))
            return g_stop;
        bool tail_over = now > atomic_load(&c->run->producers_done_ns) &&
                         now - atomic_load(&c->run->producers_done_ns) >
                             perf_seconds_to_ns(cfg->tail_s);
        return c->received_all >= atomic_load(&c->expected) || idle || tail_over || g_stop;
    }
    if (g_stop || idle)
        return true;
    if (cfg->records_set)
        return atomic_load(&c->run->group_consumed[c->group]) >= cfg->records;
    return cfg->duration_s > 0 &&
           now - c->run->measure_start_ns >= perf_seconds_to_ns(cfg->duration_s);
}

static void consumer_run(struct ap_consumer *c)
{
    uint64_t idle_since = perf_now_ns();
    for (;;) {
        amqp_frame_t f;
        struct timeval tv = {0, 100000};
        int rc = amqp_simple_wait_frame_noblock(c->conn, &f, &tv);
        uint64_t now = perf_now_ns();
        if (rc == AMQP_STATUS_OK) {
            consumer_frame(c, &f, now);
            idle_since = now;
        } else if (rc != AMQP_STATUS_TIMEOUT) {
            perf_die("consumer %d/%d: %s", c->group, c->index, amqp_error_string2(rc));
        }
        if (!amqp_frames_enqueued(c->conn) && !amqp_data_in_buffer(c->conn))
            amqp_maybe_release_buffers(c->conn);
        perf_series_tick(c->series, now);
        if (consumer_finished(c, now, idle_since))
            break;
    }
}

static void consumer_destroy(struct ap_consumer *c)
{
    if (c->conn)
        ap_close(c->conn);
    free(c->assigned);
    perf_series_free(c->series);
}

/* ---------------------------------------------------------------- threads and the run */

static void *producer_thread(void *arg)
{
    struct ap_producer *p = arg;
    producer_run(p);
    if (p->cfg->confirms)
        producer_drain(p);
    perf_series_finish(p->series, perf_now_ns());
    atomic_fetch_sub(&p->run->producers_running, 1);
    return NULL;
}

static void *consumer_thread(void *arg)
{
    struct ap_consumer *c = arg;
    consumer_run(c);
    perf_series_finish(c->series, perf_now_ns());
    atomic_fetch_sub(&c->run->consumers_running, 1);
    return NULL;
}

static void run_setup(struct ap_run *run, const struct ap_config *cfg)
{
    memset(run, 0, sizeof *run);
    run->cfg = cfg;
    uint64_t seed = perf_seed();
    run->run_id = (uint32_t)perf_xorshift64(&seed);
    topics_setup(run);
    if (cfg->mode != MODE_CONSUME) {
        run->producer_count = cfg->producers;
        run->producers = calloc((size_t)run->producer_count, sizeof *run->producers);
        if (!run->producers)
            perf_die("out of memory");
        for (int i = 0; i < run->producer_count; i++)
            producer_init(&run->producers[i], run, i);
    }
    if (cfg->mode == MODE_PRODUCE)
        return;
    run->group_count = (int)ceil(cfg->groups - 1e-9);
    run->consumers = calloc((size_t)run->group_count * (size_t)cfg->consumers,
                            sizeof *run->consumers);
    if (!run->consumers)
        perf_die("out of memory");
    for (int g = 0; g < run->group_count; g++)
        for (int i = 0; i < cfg->consumers; i++) {
            struct ap_consumer *c = &run->consumers[run->consumer_count];
            if (consumer_init(c, run, g, i))
                run->consumer_count++;
            else
                consumer_destroy(c);
        }
    if (run->consumer_count == 0)
        perf_die("no consumer has a stream to read");
}

static void run_start(struct ap_run *run, pthread_t *threads)
{
    const struct ap_config *cfg = run->cfg;
    for (int i = 0; i < run->consumer_count; i++)
        consumer_start(&run->consumers[i]);
    run->t0 = perf_now_ns();
    run->measure_start_ns = run->t0 + (cfg->mode == MODE_CONSUME
                                       ? 0 : perf_seconds_to_ns(cfg->warmup_s));
    if (run->producer_count)
        run->produce_stream = perf_stream_new("produce", cfg->confirms, run->t0,
                                              run->measure_start_ns, cfg->interval_s);
    if (run->consumer_count)
        run->consume_stream = perf_stream_new(cfg->mode == MODE_E2E ? "e2e" : "consume",
                                              cfg->mode == MODE_E2E, run->t0,
                                              run->measure_start_ns, cfg->interval_s);
    atomic_store(&run->producers_running, run->producer_count);
    atomic_store(&run->consumers_running, run->consumer_count);
    atomic_store(&run->producers_done, run->producer_count == 0);
    for (int i = 0; i < run->consumer_count; i++) {
        run->consumers[i].series = perf_series_new(run->consume_stream);
        if (pthread_create(&threads[i], NULL, consumer_thread, &run->consumers[i]) != 0)
            perf_die("pthread_create failed");
    }
    for (int i = 0; i < run->producer_count; i++) {
        run->producers[i].series = perf_series_new(run->produce_stream);
        if (pthread_create(&threads[run->consumer_count + i], NULL, producer_thread,
                           &run->producers[i]) != 0)
            perf_die("pthread_create failed");
    }
}

static void run_producers_done(struct ap_run *run)
{
    for (int i = 0; i < run->consumer_count; i++) {
        struct ap_consumer *c = &run->consumers[i];
        uint64_t expected = 0;
        for (int32_t j = 0; j < c->assigned_count; j++)
            for (int k = 0; k < run->producer_count; k++)
                expected += run->producers[k].delivered[c->assigned[j]];
        atomic_store(&c->expected, expected);
    }
    atomic_store(&run->producers_done_ns, perf_now_ns());
    atomic_store(&run->producers_done, true);
}

static void run_report(struct ap_run *run, bool final)
{
    uint64_t now = perf_now_ns();
    if (run->produce_stream)
        perf_stream_report(run->produce_stream, now, final);
    if (run->consume_stream)
        perf_stream_report(run->consume_stream, now, final);
}

static void run_wait(struct ap_run *run, pthread_t *threads)
{
    for (;;) {
        usleep(AP_REPORT_TICK_US);
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

/* ---------------------------------------------------------------- output */

static double groups_per_topic(const struct ap_config *cfg)
{
    double sum = 0;
    for (int t = 0; t < cfg->topics; t++)
        sum += perf_groups_of_topic(cfg->groups, t);
    return sum / cfg->topics;
}

static void json_write(const struct ap_run *run, uint64_t lost, uint64_t unsent)
{
    const struct ap_config *cfg = run->cfg;
    FILE *f = fopen(cfg->json_path, "w");
    if (!f)
        perf_die("cannot write %s: %s", cfg->json_path, strerror(errno));
    char client[64];
    snprintf(client, sizeof client, "librabbitmq %s", amqp_version());
    fprintf(f, "{\n  \"tool\": \"amqp-perf\", \"client\": ");
    perf_json_string(f, client);
    fprintf(f, ", \"server\": ");
    perf_json_string(f, run->server);
    uint64_t delivered = 0;
    for (int i = 0; i < run->producer_count; i++)
        delivered += run->producers[i].delivered_all;
    fprintf(f, ", \"mode\": \"%s\", \"delivered\": %" PRIu64 ", \"lost\": %" PRIu64
            ", \"unsent\": %" PRIu64 ",\n  \"config\": {\"broker\": \"%s:%d\", \"topic\": ",
            mode_name(cfg->mode), delivered, lost, unsent, cfg->host, cfg->port);
    perf_json_string(f, cfg->topic);
    fprintf(f, ", \"topics\": %d, \"partitions\": %d, \"toppars\": %d, \"records\": %" PRIu64
            ", \"duration_s\": %.3f, \"record_size\": %" PRIu64 ", \"key\": \"%s\", "
            "\"acks\": \"%s\", \"confirms\": %s, \"rate\": %.0f, \"warmup_s\": %.3f, "
            "\"interval_s\": %.3f, \"tail_s\": %.3f, \"producers\": %d, "
            "\"consumers_per_group\": %d, \"groups\": %.3f, \"groups_per_topic\": %.4f, "
            "\"consumers_total\": %d, \"window\": %u, \"prefetch\": %u, "
            "\"prefetch_budget\": %u, "
            "\"queue_type\": \"stream\", \"group_membership\": \"direct assignment\"}",
            cfg->topics, cfg->partitions, run->topics.toppars, cfg->records, cfg->duration_s,
            cfg->record_size, key_name(cfg->key), cfg->acks, cfg->confirms ? "true" : "false",
            cfg->rate, cfg->warmup_s, cfg->interval_s, cfg->tail_s, run->producer_count,
            cfg->consumers,
            cfg->groups, groups_per_topic(cfg), run->consumer_count, cfg->window, cfg->prefetch,
            cfg->prefetch_budget);
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

static int run_summarize(const struct ap_run *run)
{
    const struct ap_config *cfg = run->cfg;
    uint64_t lost = 0, foreign = 0, unsent = 0;
    for (int i = 0; i < run->producer_count; i++)
        unsent += run->producers[i].unsent;
    for (int i = 0; cfg->mode == MODE_E2E && i < run->consumer_count; i++) {
        const struct ap_consumer *c = &run->consumers[i];
        uint64_t expected = atomic_load(&c->expected);
        lost += c->received_all < expected ? expected - c->received_all : 0;
        foreign += c->foreign;
    }
    int rc = 0;
    if (run->produce_stream) {
        perf_stream_print(run->produce_stream, stdout);
        rc |= run->produce_stream->errors || run->produce_stream->records == 0;
    }
    if (run->consume_stream) {
        perf_stream_print(run->consume_stream, stdout);
        rc |= run->consume_stream->errors || run->consume_stream->records == 0;
    }
    if (unsent)
        printf("produce: %" PRIu64 " messages never published or never confirmed (fixed-rate "
               "schedule not kept, or abandoned after --tail)\n", unsent);
    if (lost)
        printf("e2e: %" PRIu64 " confirmed messages not consumed by every group reading them "
               "within %.0f s of the producers' end\n", lost, cfg->tail_s);
    if (foreign)
        printf("e2e: %" PRIu64 " messages from other runs skipped\n", foreign);
    for (int g = 0; cfg->mode == MODE_CONSUME && cfg->records_set && g < run->group_count; g++)
        if (atomic_load(&run->group_consumed[g]) < cfg->records) {
            fprintf(stderr, "amqp-perf: group %d consumed %" PRIu64 " of %" PRIu64 " records\n",
                    g, (uint64_t)atomic_load(&run->group_consumed[g]), cfg->records);
            rc = 1;
        }
    if (cfg->json_path)
        json_write(run, lost, unsent);
    return rc || lost ? 1 : 0;
}

static void print_header(const struct ap_run *run)
{
    const struct ap_config *cfg = run->cfg;
    printf("amqp-perf %s: %s at %s:%d, %d topic(s) %s%s as %d durable stream(s), librabbitmq %s\n",
           mode_name(cfg->mode), run->server, cfg->host, cfg->port, cfg->topics, cfg->topic,
           cfg->topics > 1 ? "-*" : "", run->topics.toppars, amqp_version());
    printf("  %d producer(s), %d consumer(s) per group, %.2f group(s) per topic (%d readers); "
           "record %" PRIu64 " B, key %s, %s, rate %.0f rec/s (0 = max), warmup %.1f s\n",
           run->producer_count, cfg->consumers, cfg->groups, run->consumer_count,
           cfg->record_size, key_name(cfg->key),
           cfg->confirms ? "publisher confirms" : "no confirms", cfg->rate, cfg->warmup_s);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    perf_program = "amqp-perf";
    struct ap_config cfg;
    parse_args(&cfg, argc, argv);
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    static struct ap_run run;
    run_setup(&run, &cfg);
    print_header(&run);
    pthread_t *threads = calloc((size_t)(run.consumer_count + run.producer_count),
                                sizeof *threads);
    if (!threads)
        perf_die("out of memory");
    run_start(&run, threads);
    run_wait(&run, threads);
    int rc = run_summarize(&run);
    for (int i = 0; i < run.consumer_count; i++)
        consumer_destroy(&run.consumers[i]);
    for (int i = 0; i < run.producer_count; i++)
        producer_destroy(&run.producers[i]);
    free(threads);
    free(run.consumers);
    free(run.producers);
    free(run.topics.queues);
    perf_stream_free(run.produce_stream);
    perf_stream_free(run.consume_stream);
    return rc;
}
