/*
 * The helpers shared by perf/'s load generators (see perf-common.h). Nothing here
 * allocates; everything is safe to call from any thread except perf_die's exit.
 */
#include "perf-common.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

const char *perf_program = "perf";

void perf_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", perf_program);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

uint64_t perf_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

uint64_t perf_seconds_to_ns(double s)
{
    return s <= 0 ? 0 : (uint64_t)(s * 1e9);
}

uint64_t perf_xorshift64(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return x;
}

uint64_t perf_seed(void)
{
    uint64_t s = perf_now_ns() ^ ((uint64_t)getpid() << 32) ^ UINT64_C(0x9e3779b97f4a7c15);
    return s ? s : 1; /* xorshift's one fixed point */
}

uint64_t perf_parse_count(const char *s, const char *what)
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
        perf_die("bad %s: '%s'", what, s);
    return (uint64_t)(v * mult + 0.5);
}

double perf_parse_real(const char *s, const char *what)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || v < 0 || v > 1e12)
        perf_die("bad %s: '%s'", what, s);
    return v;
}

double perf_parse_seconds(const char *s, const char *what)
{
    double v = perf_parse_real(s, what);
    if (v > 1e7)
        perf_die("bad %s: '%s' (over 10^7 s)", what, s);
    return v;
}

int perf_groups_of_topic(double groups, int t)
{
    double whole = floor(groups), frac = groups - whole;
    int extra = (int)floor((t + 1) * frac + 1e-9) - (int)floor(t * frac + 1e-9);
    return (int)whole + extra;
}

void perf_put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

void perf_put_u64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

uint32_t perf_get_u32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint64_t perf_get_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void perf_fill_payload(unsigned char *buf, size_t len, uint64_t *rng)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = (unsigned char)('A' + perf_xorshift64(rng) % 26);
}

void perf_stamp_put(unsigned char *value, uint32_t run_id, uint64_t stamp_ns)
{
    perf_put_u32(value, PERF_MAGIC);
    perf_put_u32(value + 4, run_id);
    perf_put_u64(value + 8, stamp_ns);
}

bool perf_stamp_get(const unsigned char *value, size_t len, uint32_t run_id, uint64_t *stamp_ns)
{
    if (len < PERF_STAMP_BYTES || perf_get_u32(value) != PERF_MAGIC ||
        perf_get_u32(value + 4) != run_id)
        return false;
    *stamp_ns = perf_get_u64(value + 8);
    return true;
}
