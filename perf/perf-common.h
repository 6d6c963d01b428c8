/*
 * Helpers shared by the load generators in perf/ (sluice-perf on librdkafka, amqp-perf on
 * librabbitmq) and the null sink: the monotonic clock, fatal errors, option parsing with
 * k/M/G suffixes, a xorshift generator, and the 16-byte stamp every generated value starts
 * with (magic, run id, intended send time). Sharing the stamp is what lets one definition
 * of end-to-end latency hold for every broker the harness measures.
 */
#ifndef SLUICE_PERF_COMMON_H
#define SLUICE_PERF_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NS_PER_S UINT64_C(1000000000)

/* The first PERF_STAMP_BYTES of every value: magic, run id, intended send time (ns,
 * CLOCK_MONOTONIC, which is shared by all processes on one machine). */
#define PERF_STAMP_BYTES 16
#define PERF_MAGIC UINT32_C(0x53504c46) /* "FLPS" on the wire, little-endian */

_Static_assert(PERF_STAMP_BYTES == 4 + 4 + 8, "stamp layout");

/* Prints "PROGRAM: message" to stderr and exits with status 2 (bad usage or setup). */
__attribute__((format(printf, 1, 2), noreturn)) void perf_die(const char *fmt, ...);
/* The program name perf_die prints; set once by main. */
extern const char *perf_program;

uint64_t perf_now_ns(void);
uint64_t perf_seconds_to_ns(double s);
uint64_t perf_xorshift64(uint64_t *state);
/* A seed that differs between processes and runs. */
uint64_t perf_seed(void);

/* A count with an optional decimal k/M/G suffix: "10M" = 10000000; dies on bad input. */
uint64_t perf_parse_count(const char *s, const char *what);
/* A non-negative number of seconds (fractions allowed); dies on bad input. */
double perf_parse_seconds(const char *s, const char *what);
/* A non-negative real number; dies on bad input. */
double perf_parse_real(const char *s, const char *what);

/* How many consumer groups read topic t when `groups` groups per topic are asked for on
 * average: floor(groups), plus one for a share frac(groups) of the topics, spread evenly
 * over the topic list (Bresenham), so 5.5 gives topics 5, 6, 5, 6 ... */
int perf_groups_of_topic(double groups, int t);

void perf_put_u32(unsigned char *p, uint32_t v);
void perf_put_u64(unsigned char *p, uint64_t v);
uint32_t perf_get_u32(const unsigned char *p);
uint64_t perf_get_u64(const unsigned char *p);

/* Fills `len` bytes with pseudo-random capital letters, compressible about as much as
 * Kafka's own perf tool's payload. */
void perf_fill_payload(unsigned char *buf, size_t len, uint64_t *rng);
/* Writes the stamp into the first PERF_STAMP_BYTES of `value` (len must be >= that). */
void perf_stamp_put(unsigned char *value, uint32_t run_id, uint64_t stamp_ns);
/* Reads a stamp: false if the value is too short or was not written by run `run_id`. */
bool perf_stamp_get(const unsigned char *value, size_t len, uint32_t run_id, uint64_t *stamp_ns);

#endif
