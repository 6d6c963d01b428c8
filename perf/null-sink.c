/*
 * null-sink: a Kafka-speaking server that acknowledges every produce request and stores
 * nothing. It answers just enough of the protocol for a librdkafka producer: ApiVersions,
 * Metadata (every topic asked for exists with --partitions partitions, all led by this
 * server), Produce (every partition acked with increasing offsets, at once, or not at all
 * for acks=0) and InitProducerId (should an idempotent producer ask). Measuring
 * sluice-perf against it gives the ceiling that the client, the kernel's loopback and this
 * machine's cores allow with no broker work at all, so a broker's figure can be read as a
 * fraction of what is reachable. It serves each connection on its own thread with
 * blocking I/O and batches the responses to every complete request it has read into one
 * write. It shares only the wire codec (common/kafka/codec.h) with the broker.
 */
#include "common/kafka/codec.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SINK_FRAME_MAX (100u << 20)      /* largest request accepted */
#define SINK_RECV_INITIAL (1u << 20)
#define SINK_RESPONSE_MAX (64u << 20)    /* responses batched before one write */
#define SINK_CONNECTIONS_MAX 1024
#define SINK_PARTITIONS_MAX 100000
#define SINK_BATCH_HEADER_BYTES 61       /* record batch v2 header */
#define SINK_LAST_OFFSET_DELTA_AT 23     /* baseOffset, length, epoch, magic, crc, attrs */

_Static_assert(SINK_RECV_INITIAL <= SINK_FRAME_MAX, "initial buffer within the limit");

enum { API_PRODUCE = 0, API_FETCH = 1, API_METADATA = 3, API_API_VERSIONS = 18,
       API_INIT_PRODUCER_ID = 22 };
enum { ERR_NONE = 0, ERR_UNSUPPORTED_VERSION = 35 };

struct sink_api {
    int16_t key, min, max;
    bool served;
};

/* Produce v3-8 and Metadata v0-8 are the versions before flexible encoding, so only
 * ApiVersions v3 needs the compact forms. Fetch is advertised but never served: librdkafka
 * writes record batches v2 (MsgVer2) only to a broker that has both Produce >= v3 and
 * Fetch >= v4, and would fall back to the old message-set format without it. */
static const struct sink_api sink_apis[] = {
    {API_PRODUCE, 3, 8, true},
    {API_FETCH, 4, 11, false},
    {API_METADATA, 0, 8, true},
    {API_API_VERSIONS, 0, 3, true},
    {API_INIT_PRODUCER_ID, 0, 1, true},
};
#define SINK_API_COUNT ((int)(sizeof sink_apis / sizeof sink_apis[0]))

struct sink_config {
    const char *host;
    int port;
    int32_t partitions;
    int32_t node_id;
};

static struct sink_config g_cfg = {"127.0.0.1", 9092, 1, 1};
static _Atomic int64_t g_next_offset;     /* one offset sequence for every partition */
static _Atomic int64_t g_next_producer_id = 1000;
static _Atomic int g_connections;
static _Atomic uint64_t g_records, g_requests;

struct sink_conn {
    int fd;
    uint8_t *buf;    /* received bytes, [0, len) */
    size_t len, cap;
    struct kwr out;  /* responses to the requests read so far */
};

struct sink_request {
    int16_t api_key, api_version;
    int32_t correlation_id;
};

static const struct sink_api *sink_api_find(int16_t key)
{
    for (int i = 0; i < SINK_API_COUNT; i++)
        if (sink_apis[i].key == key)
            return &sink_apis[i];
    return NULL;
}

static void api_versions(struct kwr *w, int16_t version)
{
    bool flexible = version >= 3;
    kwr_i16(w, ERR_NONE);
    kwr_array(w, flexible, SINK_API_COUNT);
    for (int i = 0; i < SINK_API_COUNT; i++) {
        kwr_i16(w, sink_apis[i].key);
        kwr_i16(w, sink_apis[i].min);
        kwr_i16(w, sink_apis[i].max);
        if (flexible)
            kwr_tags_empty(w);
    }
    if (version >= 1)
        kwr_i32(w, 0); /* throttle_time_ms */
    if (flexible)
        kwr_tags_empty(w);
}

static void metadata_partitions(struct kwr *w, int16_t version)
{
    kwr_array(w, false, g_cfg.partitions);
    for (int32_t p = 0; p < g_cfg.partitions; p++) {
        kwr_i16(w, ERR_NONE);
        kwr_i32(w, p);
        kwr_i32(w, g_cfg.node_id); /* leader */
        if (version >= 7)
            kwr_i32(w, 0);         /* leader_epoch */
        kwr_array(w, false, 1);    /* replicas */
        kwr_i32(w, g_cfg.node_id);
        kwr_array(w, false, 1);    /* isr */
        kwr_i32(w, g_cfg.node_id);
        if (version >= 5)
            kwr_array(w, false, 0); /* offline_replicas */
    }
}

/* Every topic asked for exists; a request for all topics gets none. */
static bool metadata(struct krd *r, struct kwr *w, int16_t version)
{
    int32_t topics = krd_array(r, false, 2);
    if (version >= 3)
        kwr_i32(w, 0); /* throttle_time_ms */
    kwr_array(w, false, 1);
    kwr_i32(w, g_cfg.node_id);
    kwr_cstr(w, false, g_cfg.host);
    kwr_i32(w, g_cfg.port);
    if (version >= 1)
        kwr_string(w, false, NULL, 0); /* rack */
    if (version >= 2)
        kwr_cstr(w, false, "null-sink");
    if (version >= 1)
        kwr_i32(w, g_cfg.node_id); /* controller */
    kwr_array(w, false, topics > 0 ? topics : 0);
    for (int32_t t = 0; t < topics && !r->err; t++) {
        struct kstr name = krd_string(r, false);
        kwr_i16(w, ERR_NONE);
        kwr_string(w, false, name.ptr ? name.ptr : "", name.ptr ? name.len : 0);
        if (version >= 1)
            kwr_bool(w, false); /* is_internal */
        metadata_partitions(w, version);
        if (version >= 8)
            kwr_i32(w, INT32_MIN); /* topic_authorized_operations: not asked */
    }
    if (version >= 8)
        kwr_i32(w, INT32_MIN); /* cluster_authorized_operations */
    return !r->err;
}

/* Records in a record set: the sum of lastOffsetDelta + 1 over its v2 batches. */
static int64_t record_count(const uint8_t *p, int32_t len)
{
    int64_t count = 0;
    size_t left = len > 0 ? (size_t)len : 0;
    while (left >= SINK_BATCH_HEADER_BYTES) {
        uint32_t batch_len = kbe32(p + 8);
        size_t total = 12 + (size_t)batch_len;
        if (total < SINK_BATCH_HEADER_BYTES || total > left)
            break; /* a partial batch at the end of a fetch-style set; not expected here */
        count += (int64_t)(int32_t)kbe32(p + SINK_LAST_OFFSET_DELTA_AT) + 1;
        p += total;
        left -= total;
    }
    return count;
}

static void produce_partition(struct krd *r, struct kwr *w, int16_t version)
{
    int32_t index = krd_i32(r);
    const uint8_t *records = NULL;
    int32_t len = krd_bytes(r, false, &records);
    int64_t count = records ? record_count(records, len) : 0;
    atomic_fetch_add(&g_records, (uint64_t)count);
    kwr_i32(w, index);
    kwr_i16(w, ERR_NONE);
    kwr_i64(w, atomic_fetch_add(&g_next_offset, count)); /* base_offset */
    kwr_i64(w, -1);                                      /* log_append_time_ms */
    if (version >= 5)
        kwr_i64(w, 0);                                   /* log_start_offset */
    if (version >= 8) {
        kwr_array(w, false, 0);                          /* record_errors */
        kwr_string(w, false, NULL, 0);                   /* error_message */
    }
}

/* Acks every partition; returns false (no response) for acks=0. */
static bool produce(struct krd *r, struct kwr *w, int16_t version, bool *respond)
{
    krd_string(r, false); /* transactional_id */
    int16_t acks = krd_i16(r);
    krd_i32(r);           /* timeout_ms */
    int32_t topics = krd_array(r, false, 6);
    kwr_array(w, false, topics > 0 ? topics : 0);
    for (int32_t t = 0; t < topics && !r->err; t++) {
        struct kstr name = krd_string(r, false);
        kwr_string(w, false, name.ptr ? name.ptr : "", name.ptr ? name.len : 0);
        int32_t parts = krd_array(r, false, 8);
        kwr_array(w, false, parts > 0 ? parts : 0);
        for (int32_t p = 0; p < parts && !r->err; p++)
            produce_partition(r, w, version);
    }
    kwr_i32(w, 0); /* throttle_time_ms */
    *respond = acks != 0;
    return !r->err;
}

static bool init_producer_id(struct krd *r, struct kwr *w)
{
    krd_string(r, false); /* transactional_id */
    krd_i32(r);           /* transaction_timeout_ms */
    kwr_i32(w, 0);
    kwr_i16(w, ERR_NONE);
    kwr_i64(w, atomic_fetch_add(&g_next_producer_id, 1));
    kwr_i16(w, 0);
    return !r->err;
}

/* Appends the response to one request (a frame without its size) to c->out. Returns
 * false to close the connection: a bad frame or an API this server does not serve. */
static bool handle_frame(struct sink_conn *c, const uint8_t *frame, size_t len)
{
    struct krd r;
    krd_init(&r, frame, len);
    struct sink_request q = {krd_i16(&r), krd_i16(&r), krd_i32(&r)};
    krd_string(&r, false); /* client_id */
    const struct sink_api *api = sink_api_find(q.api_key);
    bool supported = api && api->served && q.api_version >= api->min &&
                     q.api_version <= api->max;
    if (!supported && q.api_key != API_API_VERSIONS) {
        fprintf(stderr, "null-sink: closing a connection: ApiKey %d v%d is not served\n",
                q.api_key, q.api_version);
        return false;
    }
    if (q.api_key == API_API_VERSIONS && q.api_version >= 3)
        krd_tags_skip(&r); /* request header v2; the response header stays v0 */
    size_t start = c->out.len;
    kwr_i32(&c->out, 0); /* size, patched below */
    kwr_i32(&c->out, q.correlation_id);
    bool ok = true, respond = true;
    if (!supported) {
        /* An ApiVersions version above ours: answer v0 with the error, as Kafka does. */
        kwr_i16(&c->out, ERR_UNSUPPORTED_VERSION);
        kwr_array(&c->out, false, 0);
    } else if (q.api_key == API_API_VERSIONS) {
        api_versions(&c->out, q.api_version);
    } else if (q.api_key == API_METADATA) {
        ok = metadata(&r, &c->out, q.api_version);
    } else if (q.api_key == API_PRODUCE) {
        ok = produce(&r, &c->out, q.api_version, &respond);
    } else {
        ok = init_producer_id(&r, &c->out);
    }
    if (!ok || c->out.err) {
        fprintf(stderr, "null-sink: bad request: ApiKey %d v%d, at byte %zu: %s\n", q.api_key,
                q.api_version, krd_offset(&r), r.err_what ? r.err_what : "response too large");
        return false;
    }
    if (!respond)
        c->out.len = start; /* acks=0: no response at all */
    else
        kwr_patch_i32(&c->out, start, (int32_t)(c->out.len - start - 4));
    atomic_fetch_add(&g_requests, 1);
    return true;
}

static bool write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t k = write(fd, p, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return false;
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Handles every complete frame in the buffer, writes their responses in one go and
 * keeps the partial frame at the end. Returns false to close. */
static bool drain_frames(struct sink_conn *c)
{
    size_t at = 0;
    kwr_reset(&c->out);
    while (c->len - at >= 4) {
        uint32_t size = kbe32(c->buf + at);
        if (size > SINK_FRAME_MAX || size < 8) {
            fprintf(stderr, "null-sink: closing a connection: frame of %u bytes\n", size);
            return false;
        }
        if (c->len - at - 4 < size)
            break;
        if (!handle_frame(c, c->buf + at + 4, size))
            return false;
        at += 4 + size;
    }
    if (c->out.len && !write_all(c->fd, c->out.buf, c->out.len))
        return false;
    memmove(c->buf, c->buf + at, c->len - at);
    c->len -= at;
    if (c->len >= 4) { /* make room for the whole of the next frame */
        size_t need = 4 + (size_t)kbe32(c->buf);
        if (need > c->cap) {
            uint8_t *nb = realloc(c->buf, need);
            if (!nb)
                return false;
            c->buf = nb;
            c->cap = need;
        }
    }
    return true;
}

static void *conn_thread(void *arg)
{
    struct sink_conn *c = arg;
    for (;;) {
        ssize_t n = read(c->fd, c->buf + c->len, c->cap - c->len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        c->len += (size_t)n;
        if (!drain_frames(c))
            break;
    }
    close(c->fd);
    kwr_free(&c->out);
    free(c->buf);
    free(c);
    atomic_fetch_sub(&g_connections, 1);
    return NULL;
}

static void *serve(void *arg)
{
    int listen_fd = (int)(intptr_t)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            perror("null-sink: accept");
            exit(1);
        }
        if (atomic_load(&g_connections) >= SINK_CONNECTIONS_MAX) {
            fprintf(stderr, "null-sink: refusing a connection: %d open\n", SINK_CONNECTIONS_MAX);
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        struct sink_conn *c = calloc(1, sizeof *c);
        if (c)
            c->buf = malloc(SINK_RECV_INITIAL);
        if (!c || !c->buf) {
            free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->cap = SINK_RECV_INITIAL;
        kwr_init(&c->out, 64 << 10, SINK_RESPONSE_MAX);
        atomic_fetch_add(&g_connections, 1);
        pthread_t tid;
        if (pthread_create(&tid, NULL, conn_thread, c) != 0) {
            close(fd);
            kwr_free(&c->out);
            free(c->buf);
            free(c);
            atomic_fetch_sub(&g_connections, 1);
            continue;
        }
        pthread_detach(tid);
    }
}

static void usage(FILE *out)
{
    fputs("usage: null-sink [--host 127.0.0.1] [--port 9092] [--partitions 1] [--node-id 1]\n"
          "Acks every Kafka produce request without storing it; Metadata reports every\n"
          "topic asked for with --partitions partitions led by this server.\n", out);
}

static void parse_args(int argc, char **argv)
{
    static const struct option opts[] = {
        {"host", required_argument, NULL, 'H'}, {"port", required_argument, NULL, 'p'},
        {"partitions", required_argument, NULL, 'n'}, {"node-id", required_argument, NULL, 'i'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "H:p:n:i:h", opts, NULL)) != -1) {
        switch (c) {
        case 'H': g_cfg.host = optarg; break;
        case 'p': g_cfg.port = atoi(optarg); break;
        case 'n': g_cfg.partitions = atoi(optarg); break;
        case 'i': g_cfg.node_id = atoi(optarg); break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind != argc || g_cfg.port <= 0 || g_cfg.port > 65535 || g_cfg.partitions < 1 ||
        g_cfg.partitions > SINK_PARTITIONS_MAX) {
        usage(stderr);
        exit(2);
    }
}

static int listen_on(const char *host, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        fprintf(stderr, "null-sink: --host must be an IPv4 address\n");
        exit(2);
    }
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 128) != 0) {
        fprintf(stderr, "null-sink: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
        exit(1);
    }
    return fd;
}

/* The accept loop and the connections run on their own threads with SIGINT and SIGTERM
 * blocked; the main thread waits for either and prints what was served. */
int main(int argc, char **argv)
{
    parse_args(argc, argv);
    signal(SIGPIPE, SIG_IGN);
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    int fd = listen_on(g_cfg.host, g_cfg.port);
    fprintf(stderr, "null-sink: listening on %s:%d, %d partition(s) per topic, storing nothing\n",
            g_cfg.host, g_cfg.port, g_cfg.partitions);
    pthread_t tid;
    if (pthread_create(&tid, NULL, serve, (void *)(intptr_t)fd) != 0) {
        fprintf(stderr, "null-sink: pthread_create failed\n");
        return 1;
    }
    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "null-sink: stopping on signal %d after %" PRIu64 " requests, %" PRIu64
            " records acked\n", sig, (uint64_t)atomic_load(&g_requests),
            (uint64_t)atomic_load(&g_records));
    return 0;
}
