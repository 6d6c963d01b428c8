/* A byte rate over a sliding window, as Kafka's replication quotas measure
 * it (ReplicationQuotaManager: a Sensor with SimpleRate over SampledStat):
 * `samples` windows of `window_ms` each; the rate is the bytes of the
 * windows not yet obsolete (younger than samples * window_ms) divided by
 * the time since the oldest of them started, and at least one window. A
 * quota is exceeded while that rate is above its bound. Several threads
 * (storage cores) record into and check one meter: a mutex guards its few
 * words, taken only for the partitions a throttle names. */
#ifndef SLUICE_RATE_H
#define SLUICE_RATE_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define SLUICE_RATE_SAMPLES_MAX 100 /* replication.quota.window.num's upper bound */

struct sluice_rate {
	pthread_mutex_t mu;
	int32_t samples;   /* windows kept (Kafka: replication.quota.window.num) */
	int64_t window_ms; /* each window (replication.quota.window.size.seconds) */
	int32_t n;         /* windows in use, at most samples */
	int32_t current;   /* the window records go to */
	struct {
		int64_t start_ms; /* when it began */
		int64_t bytes;
	} w[SLUICE_RATE_SAMPLES_MAX];
};

/* samples in [1, SLUICE_RATE_SAMPLES_MAX], window_ms >= 1. */
void sluice_rate_init(struct sluice_rate *r, int32_t samples, int64_t window_ms);
void sluice_rate_fini(struct sluice_rate *r);
/* bytes moved at now_ms (monotonic); whether the quota is exceeded or not. */
void sluice_rate_record(struct sluice_rate *r, int64_t bytes, int64_t now_ms);
/* The rate at now_ms, bytes per second. */
double sluice_rate_measure(struct sluice_rate *r, int64_t now_ms);
/* Whether the rate at now_ms is above bound bytes per second (never for INT64_MAX, Kafka's unset quota). */
bool sluice_rate_exceeded(struct sluice_rate *r, int64_t bound, int64_t now_ms);

#endif
