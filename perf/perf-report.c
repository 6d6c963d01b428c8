/*
 * Streams, per-thread series, interval rows, summaries and JSON for perf/'s load
 * generators (see perf-report.h for the threading model). Interval k covers
 * [origin + k*I, origin + (k+1)*I); a feeder that crosses a boundary hands what it
 * gathered to the interval that just ended, so a row is exact to within one feeder's
 * tick (a few milliseconds), which is what a per-interval report needs.
 */
#include "perf-report.h"

#include "perf-common.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static const double summary_pct[5] = {50, 99, 99.9, 99.99, 100};

static double ms(uint64_t ns)
{
    return (double)ns / 1e6;
}

struct perf_stream *perf_stream_new(const char *name, bool has_latency, uint64_t origin,
                                    uint64_t measure_start, double interval_s)
{
    assert(measure_start >= origin);
    struct perf_stream *st = calloc(1, sizeof *st);
    if (!st)
        perf_die("out of memory");
    st->name = name;
    st->has_latency = has_latency;
    st->rows_stored = interval_s > 0;
    st->origin_ns = origin;
    st->measure_start_ns = measure_start;
    st->interval_ns = perf_seconds_to_ns(interval_s > 0 ? interval_s : PERF_PROGRESS_S);
    st->last_ns = measure_start;
    assert(st->interval_ns >= UINT64_C(1000000) * PERF_INTERVAL_MIN_MS);
    if (pthread_mutex_init(&st->lock, NULL) != 0)
        perf_die("pthread_mutex_init failed");
    for (size_t i = 0; i < PERF_REPORT_SLOTS; i++)
        perf_hist_reset(&st->slots[i].hist);
    perf_hist_reset(&st->hist);
    return st;
}

void perf_stream_free(struct perf_stream *st)
{
    if (!st)
        return;
    pthread_mutex_destroy(&st->lock);
    free(st);
}

static uint64_t next_boundary(const struct perf_stream *st, uint64_t now)
{
    uint64_t k = now > st->origin_ns ? (now - st->origin_ns) / st->interval_ns : 0;
    return st->origin_ns + (k + 1) * st->interval_ns;
}

struct perf_series *perf_series_new(struct perf_stream *st)
{
    struct perf_series *s = calloc(1, sizeof *s);
    if (!s)
        perf_die("out of memory");
    s->stream = st;
    s->last_ns = st->measure_start_ns;
    s->next_handover_ns = next_boundary(st, st->origin_ns);
    perf_hist_reset(&s->hist);
    perf_hist_reset(&s->ihist);
    return s;
}

void perf_series_free(struct perf_series *s)
{
    free(s);
}

void perf_series_add(struct perf_series *s, uint64_t bytes, uint64_t latency_ns, uint64_t t,
                     bool measured)
{
    bool latency = s->stream->has_latency;
    s->irecords++;
    s->ibytes += bytes;
    if (latency)
        perf_hist_record(&s->ihist, latency_ns);
    if (!measured)
        return;
    s->records++;
    s->bytes += bytes;
    if (t > s->last_ns)
        s->last_ns = t;
    if (latency)
        perf_hist_record(&s->hist, latency_ns);
}

void perf_series_error(struct perf_series *s, bool measured)
{
    s->ierrors++;
    if (measured)
        s->errors++;
}

/* Moves the series' current interval into interval `target` of the stream (or the
 * nearest one still open). */
static void handover(struct perf_series *s, uint64_t target)
{
    struct perf_stream *st = s->stream;
    pthread_mutex_lock(&st->lock);
    if (target < st->printed)
        target = st->printed; /* late: that row is out, count it in the next */
    if (target >= st->printed + PERF_REPORT_SLOTS)
        target = st->printed + PERF_REPORT_SLOTS - 1;
    struct perf_slot *slot = &st->slots[target % PERF_REPORT_SLOTS];
    slot->records += s->irecords;
    slot->bytes += s->ibytes;
    slot->errors += s->ierrors;
    if (st->has_latency && s->ihist.total)
        perf_hist_merge(&slot->hist, &s->ihist);
    st->progress_records += s->irecords;
    pthread_mutex_unlock(&st->lock);
    if (st->has_latency && s->ihist.total)
        perf_hist_reset(&s->ihist);
    s->irecords = s->ibytes = s->ierrors = 0;
}

void perf_series_tick(struct perf_series *s, uint64_t now)
{
    if (now < s->next_handover_ns)
        return;
    const struct perf_stream *st = s->stream;
    uint64_t ended = (now - st->origin_ns) / st->interval_ns; /* >= 1 here */
    assert(ended >= 1);
    handover(s, ended - 1);
    s->next_handover_ns = next_boundary(st, now);
}

void perf_series_finish(struct perf_series *s, uint64_t now)
{
    struct perf_stream *st = s->stream;
    handover(s, now > st->origin_ns ? (now - st->origin_ns) / st->interval_ns : 0);
    pthread_mutex_lock(&st->lock);
    st->records += s->records;
    st->bytes += s->bytes;
    st->errors += s->errors;
    if (s->last_ns > st->last_ns)
        st->last_ns = s->last_ns;
    if (st->has_latency && s->hist.total)
        perf_hist_merge(&st->hist, &s->hist);
    pthread_mutex_unlock(&st->lock);
}

/* Prints and (with --interval) keeps the row of interval `printed`, then clears its
 * slot. Called with the lock held. */
static void emit_row(struct perf_stream *st, uint64_t now)
{
    struct perf_slot *slot = &st->slots[st->printed % PERF_REPORT_SLOTS];
    uint64_t begin = st->origin_ns + st->printed * st->interval_ns;
    uint64_t end = begin + st->interval_ns;
    if (end > now)
        end = now; /* the last, partial interval of a run */
    double secs = end > begin ? (double)(end - begin) / 1e9 : 0;
    struct perf_interval row = {
        .t_s = (double)(end - st->origin_ns) / 1e9,
        .warmup = begin < st->measure_start_ns,
        .records_per_s = secs > 0 ? (double)slot->records / secs : 0,
        .mb_per_s = secs > 0 ? (double)slot->bytes / secs / 1e6 : 0,
    };
    static const double pct[3] = {50, 99, 100};
    uint64_t q[3] = {0, 0, 0};
    if (st->has_latency)
        perf_hist_quantiles(&slot->hist, pct, 3, q);
    row.p50_ns = q[0], row.p99_ns = q[1], row.max_ns = q[2];
    FILE *out = st->rows_stored ? stdout : stderr;
    fprintf(out, "[%8.1fs] %-8s %10.0f rec/s %8.2f MB/s", row.t_s, st->name,
            row.records_per_s, row.mb_per_s);
    if (st->has_latency)
        fprintf(out, "  p50 %8.3f ms  p99 %8.3f ms  max %8.3f ms", ms(q[0]), ms(q[1]), ms(q[2]));
    if (slot->errors)
        fprintf(out, "  errors %" PRIu64, slot->errors);
    fprintf(out, "%s%s\n", row.warmup ? "  (warmup)" : "",
            st->rows_stored ? "" : "  (progress)");
    fflush(out);
    if (st->rows_stored && st->interval_count < PERF_INTERVALS_MAX)
        st->intervals[st->interval_count++] = row;
    slot->records = slot->bytes = slot->errors = 0;
    if (st->has_latency && slot->hist.total)
        perf_hist_reset(&slot->hist);
    st->printed++;
}

void perf_stream_report(struct perf_stream *st, uint64_t now, bool final)
{
    pthread_mutex_lock(&st->lock);
    for (;;) {
        uint64_t end = st->origin_ns + (st->printed + 1) * st->interval_ns;
        if (!final && now < end + PERF_REPORT_GRACE_NS)
            break;
        if (final && (end - st->interval_ns >= now || !st->rows_stored))
            break; /* nothing after `now` can hold data; no partial progress line */
        emit_row(st, now);
    }
    pthread_mutex_unlock(&st->lock);
}

double perf_stream_elapsed_s(const struct perf_stream *st)
{
    return st->last_ns > st->measure_start_ns
               ? (double)(st->last_ns - st->measure_start_ns) / 1e9 : 0;
}

void perf_stream_print(struct perf_stream *st, FILE *out)
{
    double secs = perf_stream_elapsed_s(st);
    fprintf(out, "%s: %" PRIu64 " records, %.1f MB in %.3f s: %.0f records/s, %.2f MB/s; "
            "errors %" PRIu64 "\n", st->name, st->records, (double)st->bytes / 1e6, secs,
            secs > 0 ? (double)st->records / secs : 0,
            secs > 0 ? (double)st->bytes / secs / 1e6 : 0, st->errors);
    if (!st->has_latency)
        return;
    uint64_t q[5];
    if (!perf_hist_quantiles(&st->hist, summary_pct, 5, q)) {
        fprintf(out, "%s latency: no samples\n", st->name);
        return;
    }
    fprintf(out, "%s latency ms: p50 %.3f  p99 %.3f  p99.9 %.3f  p99.99 %.3f  max %.3f  "
            "mean %.3f  min %.3f\n", st->name, ms(q[0]), ms(q[1]), ms(q[2]), ms(q[3]),
            ms(q[4]), perf_hist_mean(&st->hist) / 1e6, ms(st->hist.min));
}

void perf_json_string(FILE *f, const char *s)
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

static void json_intervals(const struct perf_stream *st, FILE *f)
{
    fprintf(f, ",\n    \"intervals\": [");
    for (size_t i = 0; i < st->interval_count; i++) {
        const struct perf_interval *r = &st->intervals[i];
        fprintf(f, "%s\n      {\"t_s\": %.3f, \"warmup\": %s, \"records_per_s\": %.1f, "
                "\"mb_per_s\": %.3f", i ? "," : "", r->t_s, r->warmup ? "true" : "false",
                r->records_per_s, r->mb_per_s);
        if (st->has_latency)
            fprintf(f, ", \"p50_us\": %.3f, \"p99_us\": %.3f, \"max_us\": %.3f",
                    (double)r->p50_ns / 1e3, (double)r->p99_ns / 1e3, (double)r->max_ns / 1e3);
        fputc('}', f);
    }
    fprintf(f, "]");
}

void perf_stream_json(struct perf_stream *st, FILE *f)
{
    double secs = perf_stream_elapsed_s(st);
    fprintf(f, "  ");
    perf_json_string(f, st->name);
    fprintf(f, ": {\"records\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"errors\": %" PRIu64
            ", \"elapsed_s\": %.6f, \"records_per_s\": %.1f, \"mb_per_s\": %.3f",
            st->records, st->bytes, st->errors, secs,
            secs > 0 ? (double)st->records / secs : 0,
            secs > 0 ? (double)st->bytes / secs / 1e6 : 0);
    uint64_t q[5];
    if (st->has_latency && perf_hist_quantiles(&st->hist, summary_pct, 5, q))
        fprintf(f, ",\n    \"latency_us\": {\"count\": %" PRIu64 ", \"min\": %.3f, "
                "\"mean\": %.3f, \"p50\": %.3f, \"p99\": %.3f, \"p99_9\": %.3f, "
                "\"p99_99\": %.3f, \"max\": %.3f}", st->hist.total,
                (double)st->hist.min / 1e3, perf_hist_mean(&st->hist) / 1e3,
                (double)q[0] / 1e3, (double)q[1] / 1e3, (double)q[2] / 1e3,
                (double)q[3] / 1e3, (double)q[4] / 1e3);
    json_intervals(st, f);
    fprintf(f, "}");
}
