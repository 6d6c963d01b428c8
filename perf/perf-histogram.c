/*
 * The log-linear latency histogram used by sluice-perf (see perf-histogram.h for the
 * layout). Index math: a value v below 2*SUB is its own index; otherwise, with m the
 * position of its highest set bit and s = m - SUB_BITS, the value keeps its top
 * SUB_BITS+1 bits (v >> s, in [SUB, 2*SUB)) and lands at s*SUB + (v >> s). Consecutive
 * powers of two thus occupy consecutive runs of SUB buckets, and each bucket of run s is
 * 2^s wide.
 */
#include "perf-histogram.h"

#include <assert.h>
#include <string.h>

void perf_hist_reset(struct perf_hist *h)
{
    memset(h->counts, 0, sizeof h->counts);
    h->total = 0;
    h->min = UINT64_MAX;
    h->max = 0;
    h->sum = 0.0;
}

size_t perf_hist_index(uint64_t value)
{
    if (value > PERF_HIST_VALUE_MAX)
        value = PERF_HIST_VALUE_MAX;
    if (value < 2 * PERF_HIST_SUB_COUNT)
        return (size_t)value;
    unsigned msb = 63u - (unsigned)__builtin_clzll(value);
    unsigned shift = msb - PERF_HIST_SUB_BITS;
    size_t index = (size_t)shift * PERF_HIST_SUB_COUNT + (size_t)(value >> shift);
    assert(index < PERF_HIST_BUCKETS);
    return index;
}

uint64_t perf_hist_bucket_high(size_t index)
{
    assert(index < PERF_HIST_BUCKETS);
    if (index < 2 * PERF_HIST_SUB_COUNT)
        return index;
    unsigned shift = (unsigned)(index / PERF_HIST_SUB_COUNT) - 1u;
    uint64_t sub = index - (uint64_t)shift * PERF_HIST_SUB_COUNT;
    assert(sub >= PERF_HIST_SUB_COUNT && sub < 2 * PERF_HIST_SUB_COUNT);
    return ((sub + 1) << shift) - 1;
}

void perf_hist_record(struct perf_hist *h, uint64_t value)
{
    h->counts[perf_hist_index(value)]++;
    h->total++;
    h->sum += (double)value;
    if (value < h->min)
        h->min = value;
    if (value > h->max)
        h->max = value;
}

void perf_hist_merge(struct perf_hist *dst, const struct perf_hist *src)
{
    for (size_t i = 0; i < PERF_HIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
    dst->total += src->total;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

bool perf_hist_quantiles(const struct perf_hist *h, const double *pct, size_t n,
                         uint64_t *out)
{
    assert(n <= PERF_HIST_QUANTILES_MAX);
    uint64_t rank[PERF_HIST_QUANTILES_MAX];
    bool found[PERF_HIST_QUANTILES_MAX];
    for (size_t q = 0; q < n; q++) {
        out[q] = 0;
        found[q] = false;
        /* The rank of the pct-th percentile, rounded up, at least the first value. */
        double r = pct[q] / 100.0 * (double)h->total;
        uint64_t ri = (uint64_t)r;
        if ((double)ri < r)
            ri++;
        rank[q] = ri == 0 ? 1 : (ri > h->total ? h->total : ri);
    }
    if (h->total == 0)
        return false;
    uint64_t seen = 0;
    size_t done = 0;
    for (size_t i = 0; i < PERF_HIST_BUCKETS && done < n; i++) {
        if (h->counts[i] == 0)
            continue;
        seen += h->counts[i];
        uint64_t high = perf_hist_bucket_high(i);
        if (high > h->max)
            high = h->max;
        for (size_t q = 0; q < n; q++)
            if (!found[q] && seen >= rank[q]) {
                found[q] = true;
                out[q] = high < h->min ? h->min : high;
                done++;
            }
    }
    assert(done == n || seen < h->total);
    return true;
}

double perf_hist_mean(const struct perf_hist *h)
{
    return h->total ? h->sum / (double)h->total : 0.0;
}
