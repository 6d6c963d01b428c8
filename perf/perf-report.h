/*
 * Measurement and reporting for perf/'s load generators, shared by sluice-perf and
 * amqp-perf so that both print and write the same figures the same way. A *stream* is one
 * kind of measurement in a run (produce, consume, e2e); many threads feed one stream, each
 * through its own private *series*, so recording a record is plain arithmetic on memory
 * only that thread touches. A thread hands its current interval to the stream (under the
 * stream's lock) when it crosses an interval boundary and its totals when it finishes;
 * the reporting thread prints an interval row once the interval has ended and every
 * feeder had a chance to hand over (PERF_REPORT_GRACE_NS later). Everything is sized when
 * the stream is made: nothing is allocated while records flow.
 */
#ifndef SLUICE_PERF_REPORT_H
#define SLUICE_PERF_REPORT_H

#include "perf-histogram.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define PERF_INTERVALS_MAX 8192
/* Intervals a stream keeps open for late hand-overs; a feeder more than this many
 * intervals behind the reporter lands in the newest open one. */
#define PERF_REPORT_SLOTS 4
#define PERF_REPORT_GRACE_NS UINT64_C(300000000)
/* Without --interval, a progress line (stderr only) every this many seconds. */
#define PERF_PROGRESS_S 10.0
#define PERF_INTERVAL_MIN_MS 500
#define PERF_INTERVAL_MIN_S (PERF_INTERVAL_MIN_MS / 1000.0)

_Static_assert(PERF_REPORT_SLOTS >= 2, "one slot being filled, one being printed");
_Static_assert(PERF_REPORT_GRACE_NS < UINT64_C(1000000) * PERF_INTERVAL_MIN_MS,
               "an interval row is printed before the next one ends");

/* One printed interval row, also kept for the JSON output. */
struct perf_interval {
    double t_s;        /* end of the interval, from the start of the run */
    bool warmup;       /* the interval began before the measurement window */
    double records_per_s;
    double mb_per_s;
    uint64_t p50_ns, p99_ns, max_ns;
};

struct perf_slot {
    uint64_t records, bytes, errors;
    struct perf_hist hist;
};

struct perf_stream {
    const char *name;
    bool has_latency;
    bool rows_stored;          /* false: progress lines only (no --interval) */
    uint64_t origin_ns;        /* t = 0 of the interval rows: the start of the run */
    uint64_t measure_start_ns; /* end of the warmup */
    uint64_t interval_ns;
    pthread_mutex_t lock;      /* guards everything below */
    uint64_t printed;          /* interval rows printed so far: slots hold [printed, +SLOTS) */
    struct perf_slot slots[PERF_REPORT_SLOTS];
    uint64_t records, bytes, errors; /* measured totals, handed over at the end */
    uint64_t last_ns;          /* latest measured completion */
    uint64_t progress_records; /* all records handed over, warmup included */
    struct perf_hist hist;
    struct perf_interval intervals[PERF_INTERVALS_MAX];
    size_t interval_count;
};

/* One feeder thread's private part of a stream. */
struct perf_series {
    struct perf_stream *stream;
    uint64_t records, bytes, errors; /* measured */
    uint64_t last_ns;
    uint64_t irecords, ibytes, ierrors; /* since the last hand-over, warmup included */
    uint64_t next_handover_ns;
    struct perf_hist hist;  /* measured */
    struct perf_hist ihist; /* since the last hand-over */
};

/* A stream whose rows run from `origin` every interval_s seconds (0: progress lines
 * every PERF_PROGRESS_S on stderr, no rows kept) and whose measurement window starts at
 * `measure_start` (origin + warmup). Dies when out of memory. */
struct perf_stream *perf_stream_new(const char *name, bool has_latency, uint64_t origin,
                                    uint64_t measure_start, double interval_s);
void perf_stream_free(struct perf_stream *st);

struct perf_series *perf_series_new(struct perf_stream *st);
void perf_series_free(struct perf_series *s);
/* One record completed at `t` (`latency_ns` ignored without latency); `measured` is
 * false during the warmup. Plain arithmetic: call it as often as records arrive. */
void perf_series_add(struct perf_series *s, uint64_t bytes, uint64_t latency_ns, uint64_t t,
                     bool measured);
void perf_series_error(struct perf_series *s, bool measured);
/* Hands the current interval to the stream if an interval boundary has passed. */
void perf_series_tick(struct perf_series *s, uint64_t now);
/* Hands over the last interval and the totals; the series may then be freed. */
void perf_series_finish(struct perf_series *s, uint64_t now);

/* Prints (and keeps) the rows whose interval ended more than the grace period before
 * `now`; with `final`, every row with data. Called by one reporting thread. */
void perf_stream_report(struct perf_stream *st, uint64_t now, bool final);
/* The summary: records/s, MB/s, errors and (with latency) the percentiles. */
void perf_stream_print(struct perf_stream *st, FILE *out);
double perf_stream_elapsed_s(const struct perf_stream *st);
/* `"name": {...}` with totals, latency percentiles (µs) and interval rows. */
void perf_stream_json(struct perf_stream *st, FILE *f);
void perf_json_string(FILE *f, const char *s);

#endif
