/* The sliding-window byte rate of rate.h: Kafka's SampledStat (windows
 * that start when the first record after the previous one's end arrives,
 * reused oldest first, reset once obsolete) and SimpleRate (elapsed time
 * from the oldest window, at least one window). */
#include "common/rate.h"
#include <assert.h>
#include <string.h>

void sluice_rate_init(struct sluice_rate *r, int32_t samples, int64_t window_ms)
{
	assert(samples >= 1 && samples <= SLUICE_RATE_SAMPLES_MAX && window_ms >= 1);
	memset(r, 0, sizeof *r);
	pthread_mutex_init(&r->mu, NULL);
	r->samples = samples;
	r->window_ms = window_ms;
}

void sluice_rate_fini(struct sluice_rate *r) { pthread_mutex_destroy(&r->mu); }

/* Kafka's purgeObsoleteSamples: a window that started samples * window_ms
 * ago or more counts no more (it restarts, empty, now). */
static void purge(struct sluice_rate *r, int64_t now_ms)
{
	int64_t expire = (int64_t)r->samples * r->window_ms;
	for (int32_t i = 0; i < r->n; i++)
		if (now_ms - r->w[i].start_ms >= expire) {
			r->w[i].start_ms = now_ms;
			r->w[i].bytes = 0;
		}
}

void sluice_rate_record(struct sluice_rate *r, int64_t bytes, int64_t now_ms)
{
	assert(bytes >= 0);
	pthread_mutex_lock(&r->mu);
	if (r->n == 0) {
		r->w[0].start_ms = now_ms;
		r->w[0].bytes = 0;
		r->n = 1;
		r->current = 0;
	} else if (now_ms - r->w[r->current].start_ms >= r->window_ms) {
		/* the current window is complete: the next one (a new one, or the oldest reused) */
		r->current = (r->current + 1) % r->samples;
		if (r->current >= r->n)
			r->n = r->current + 1;
		r->w[r->current].start_ms = now_ms;
		r->w[r->current].bytes = 0;
	}
	r->w[r->current].bytes += bytes;
	assert(r->n >= 1 && r->n <= r->samples);
	pthread_mutex_unlock(&r->mu);
}

static double measure_locked(struct sluice_rate *r, int64_t now_ms)
{
	purge(r, now_ms);
	int64_t total = 0, oldest = now_ms;
	for (int32_t i = 0; i < r->n; i++) {
		total += r->w[i].bytes;
		if (r->w[i].start_ms < oldest)
			oldest = r->w[i].start_ms;
	}
	int64_t elapsed = now_ms - oldest;
	if (elapsed < r->window_ms)
		elapsed = r->window_ms;
	return (double)total * 1000.0 / (double)elapsed;
}

double sluice_rate_measure(struct sluice_rate *r, int64_t now_ms)
{
	pthread_mutex_lock(&r->mu);
	double v = measure_locked(r, now_ms);
	pthread_mutex_unlock(&r->mu);
	return v;
}

bool sluice_rate_exceeded(struct sluice_rate *r, int64_t bound, int64_t now_ms)
{
	if (bound == INT64_MAX)
		return false;
	return sluice_rate_measure(r, now_ms) > (double)bound;
}
