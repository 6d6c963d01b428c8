/*
 * A fixed-size log-linear latency histogram for sluice-perf, in the spirit of
 * HdrHistogram: values below 2^(PERF_HIST_SUB_BITS+1) are counted exactly, larger ones
 * fall into 2^PERF_HIST_SUB_BITS linear sub-buckets per power of two, so every value is
 * kept with a relative error under 1/1024 (about three significant digits). The whole
 * histogram is one flat array sized at compile time, so recording a value is a
 * count-leading-zeros, a shift and an increment: no allocation and no search, which is
 * what the load generator's delivery callback needs at a million records per second.
 * Values are unsigned 64-bit integers; sluice-perf records nanoseconds.
 */
#ifndef SLUICE_PERF_HISTOGRAM_H
#define SLUICE_PERF_HISTOGRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 1024 linear sub-buckets per power of two: relative error < 0.1%. */
#define PERF_HIST_SUB_BITS 10
#define PERF_HIST_SUB_COUNT (UINT64_C(1) << PERF_HIST_SUB_BITS)
/* Largest tracked most-significant bit: 2^43 ns is about 2.4 hours; larger values are
 * clamped into the top bucket (and still show up exactly in `max`). */
#define PERF_HIST_MSB_MAX 42
#define PERF_HIST_VALUE_MAX ((UINT64_C(1) << (PERF_HIST_MSB_MAX + 1)) - 1)
#define PERF_HIST_BUCKETS ((PERF_HIST_MSB_MAX - PERF_HIST_SUB_BITS + 2) * PERF_HIST_SUB_COUNT)

_Static_assert(PERF_HIST_MSB_MAX > PERF_HIST_SUB_BITS, "need at least one log range");
_Static_assert(PERF_HIST_MSB_MAX < 63, "values must fit in uint64_t");

struct perf_hist {
    uint64_t total;  /* number of values recorded */
    uint64_t min;    /* exact smallest value, UINT64_MAX when empty */
    uint64_t max;    /* exact largest value, 0 when empty */
    double sum;      /* for the mean; double so hours of nanoseconds cannot overflow */
    uint64_t counts[PERF_HIST_BUCKETS];
};

/* Percentiles asked for in one pass; `pct` in [0, 100]. */
#define PERF_HIST_QUANTILES_MAX 8

void perf_hist_reset(struct perf_hist *h);
void perf_hist_record(struct perf_hist *h, uint64_t value);
/* Adds every count of `src` into `dst`. */
void perf_hist_merge(struct perf_hist *dst, const struct perf_hist *src);
/* Bucket index of a value, and the highest value that maps to a bucket. */
size_t perf_hist_index(uint64_t value);
uint64_t perf_hist_bucket_high(size_t index);
/* Writes into out[i] the smallest recorded value v (reported as the highest value of
 * its bucket, capped at the exact max) such that at least pct[i]% of all values are
 * <= v. Returns false (and writes zeros) when the histogram is empty. */
bool perf_hist_quantiles(const struct perf_hist *h, const double *pct, size_t n,
                         uint64_t *out);
double perf_hist_mean(const struct perf_hist *h);

#endif
