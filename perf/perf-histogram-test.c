/*
 * Checks the log-linear histogram behind sluice-perf's latency figures: that bucket
 * indexes are contiguous and monotonic, that every value is reported within the
 * promised relative error (1/1024), and that percentiles of known distributions come
 * out right. It needs no broker, so it runs in the ordinary test suite; a wrong
 * histogram would silently skew every benchmark result.
 */
#include "perf-histogram.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static int failures;

#define CHECK(cond, ...)                                      \
    do {                                                      \
        if (!(cond)) {                                        \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                     \
            fputc('\n', stderr);                              \
            failures++;                                       \
        }                                                     \
    } while (0)

/* Every value lands in a bucket whose high edge is >= the value and within 1/1024. */
static void test_index_error(void)
{
    size_t prev = 0;
    for (uint64_t v = 0; v < (UINT64_C(1) << 22); v++) {
        size_t i = perf_hist_index(v);
        CHECK(i == prev || i == prev + 1, "index jumps at %" PRIu64, v);
        prev = i;
        uint64_t high = perf_hist_bucket_high(i);
        CHECK(high >= v && (double)(high - v) <= (double)v / 1024.0 + 1e-9,
              "value %" PRIu64 " reported as %" PRIu64, v, high);
    }
    for (unsigned b = 22; b <= PERF_HIST_MSB_MAX; b++) {
        uint64_t v = (UINT64_C(1) << b) + 12345;
        uint64_t high = perf_hist_bucket_high(perf_hist_index(v));
        CHECK(high >= v && (double)(high - v) <= (double)v / 1024.0, "big value %u", b);
    }
    CHECK(perf_hist_index(UINT64_MAX) == PERF_HIST_BUCKETS - 1, "clamp to last bucket");
}

static void test_quantiles(void)
{
    static struct perf_hist h;
    perf_hist_reset(&h);
    for (uint64_t v = 1; v <= 100000; v++)
        perf_hist_record(&h, v * 1000); /* 1 us .. 100 ms */
    const double pct[5] = {50, 99, 99.9, 99.99, 100};
    uint64_t q[5];
    CHECK(perf_hist_quantiles(&h, pct, 5, q), "non-empty");
    const uint64_t want[5] = {50000000, 99000000, 99900000, 99990000, 100000000};
    for (int i = 0; i < 5; i++)
        CHECK(q[i] >= want[i] && (double)(q[i] - want[i]) <= (double)want[i] / 1024.0,
              "p%g = %" PRIu64 ", want ~%" PRIu64, pct[i], q[i], want[i]);
    CHECK(q[4] == 100000000, "max is exact");
    CHECK(h.min == 1000 && h.total == 100000, "min and count");
    CHECK(perf_hist_mean(&h) > 50000000.0 && perf_hist_mean(&h) < 50001000.0, "mean");

    perf_hist_reset(&h);
    CHECK(!perf_hist_quantiles(&h, pct, 5, q) && q[0] == 0, "empty histogram");
    perf_hist_record(&h, 0);
    perf_hist_record(&h, 7);
    CHECK(perf_hist_quantiles(&h, pct, 5, q) && q[0] == 0 && q[4] == 7, "tiny values");
}

static void test_merge(void)
{
    static struct perf_hist a, b;
    perf_hist_reset(&a);
    perf_hist_reset(&b);
    for (int i = 0; i < 99; i++)
        perf_hist_record(&a, 1000);
    perf_hist_record(&b, 5000000);
    perf_hist_merge(&a, &b);
    const double pct[2] = {99, 100};
    uint64_t q[2];
    perf_hist_quantiles(&a, pct, 2, q);
    CHECK(a.total == 100 && q[0] == 1000 && q[1] == 5000000, "merge p99 %" PRIu64, q[0]);
}

int main(void)
{
    test_index_error();
    test_quantiles();
    test_merge();
    if (failures) {
        fprintf(stderr, "%d checks failed\n", failures);
        return 1;
    }
    puts("perf-histogram: all checks passed");
    return 0;
}
