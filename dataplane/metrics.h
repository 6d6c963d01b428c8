/* The broker's metrics (docs/operations.md, "Metrics"): counters kept per
 * core by the thread that owns them, summed when /metrics is scraped.
 *
 * A network core's counters (struct sluice_net_metrics, inside its
 * protocol state) and a storage core's (struct sluice_store_metrics) are
 * each written by that core's thread alone, with plain increments: a
 * relaxed load and store, never a locked instruction, never shared with
 * another core. The admin listener's thread reads them with relaxed loads
 * at scrape time; a scrape may see one core's counters a few increments
 * apart from another's, which monitoring does not mind.
 *
 * Series are bounded: the API and error-code labels by Kafka's tables;
 * the topic label by sluice.metrics.topics.max (topics registered once,
 * by the storage core that first opens one of their partitions, under a
 * mutex taken only then, never on an append); later topics count together
 * under topic="(other)", a name no Kafka topic can have. */
#ifndef SLUICE_METRICS_H
#define SLUICE_METRICS_H
#include "common/kafka/errors.h"
#include "common/prom.h"
#include "dataplane/runtime.h"
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct broker;
struct sluice_http_server;

#define SLUICE_METRICS_API_KEYS 80 /* ApiKeys counted: at least proto_internal.h's API_KEY_MAX (asserted there) */
/* Error codes counted per API: slot 0 holds -1 (UNKNOWN_SERVER_ERROR),
 * slots 1..KERR_CODE_MAX their code, the last every other code. */
#define SLUICE_METRICS_ERROR_SLOTS (KERR_CODE_MAX + 2)
/* Request latency buckets' upper bounds, in microseconds (the +Inf bucket
 * comes after them). */
#define SLUICE_METRICS_LATENCY_BOUNDS_US \
	{100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, \
	 10000000, 30000000, 60000000}
#define SLUICE_METRICS_LATENCY_BUCKETS 18
#define SLUICE_METRICS_TEXT_BYTES_MAX (64u << 20) /* the most a /metrics answer may take */
#define SLUICE_METRICS_OTHER_TOPIC "(other)"

/* A counter of the owning thread: a plain add (relaxed, so the scraping
 * thread's relaxed load is no data race, and no lock prefix). */
static inline void sluice_metric_add(uint64_t *c, uint64_t n)
{
	__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

static inline uint64_t sluice_metric_read(const uint64_t *c) { return __atomic_load_n(c, __ATOMIC_RELAXED); }

/* A network core's: requests by ApiKey, errors answered by ApiKey and
 * code, total request time (frame read to response sent) by ApiKey, and
 * connections. */
struct sluice_net_metrics {
	uint64_t requests[SLUICE_METRICS_API_KEYS];
	uint64_t errors[SLUICE_METRICS_API_KEYS][SLUICE_METRICS_ERROR_SLOTS];
	uint64_t latency[SLUICE_METRICS_API_KEYS][SLUICE_METRICS_LATENCY_BUCKETS + 1];
	uint64_t latency_us[SLUICE_METRICS_API_KEYS]; /* their sum */
	uint64_t conns_accepted, conns_closed;
};

/* The slot of an error code in errors[key][]. */
static inline int sluice_metrics_error_slot(int16_t code)
{
	return code == -1 ? 0 : code >= 1 && code <= KERR_CODE_MAX ? code : KERR_CODE_MAX + 1;
}

/* An error answered for api_key (not KERR_NONE). */
static inline void sluice_metrics_error(struct sluice_net_metrics *m, int16_t api_key, int16_t code)
{
	if (code != 0 && api_key >= 0 && api_key < SLUICE_METRICS_API_KEYS)
		sluice_metric_add(&m->errors[api_key][sluice_metrics_error_slot(code)], 1);
}

/* A request of api_key done after us microseconds: its bucket (the first
 * bound at or above us; the +Inf one past them) and the sum. */
static inline void sluice_metrics_latency(struct sluice_net_metrics *m, int16_t api_key, int64_t us)
{
	static const int64_t bounds_us[SLUICE_METRICS_LATENCY_BUCKETS] = SLUICE_METRICS_LATENCY_BOUNDS_US;
	if (api_key < 0 || api_key >= SLUICE_METRICS_API_KEYS)
		return;
	us = us < 0 ? 0 : us;
	int i = 0;
	while (i < SLUICE_METRICS_LATENCY_BUCKETS && us > bounds_us[i])
		i++;
	sluice_metric_add(&m->latency[api_key][i], 1);
	sluice_metric_add(&m->latency_us[api_key], (uint64_t)us);
}

/* A storage core's: records and bytes appended by Produce, per registered
 * topic (slot topics_max: every other topic). Arrays of topics_max + 1. */
struct sluice_store_metrics {
	uint64_t *records_in;
	uint64_t *bytes_in;
};

/* A produced batch appended (not an idempotent duplicate). */
static inline void sluice_metrics_topic_in(struct sluice_store_metrics *m, uint32_t slot, uint64_t records,
					   uint64_t bytes)
{
	sluice_metric_add(&m->records_in[slot], records);
	sluice_metric_add(&m->bytes_in[slot], bytes);
}

struct sluice_metrics {
	struct broker *b;
	int ready; /* atomic: /ready answers 200 (set once serving, cleared at shutdown) */
	int cores_live; /* atomic: the cores' counters may be read (from cores_start to cores_stop) */
	/* Topic registry: names[0..topic_n) published (topic_n atomic, names
	 * immutable once published), a hash of them for registering. */
	pthread_mutex_t topics_mu;
	uint32_t topics_max, topic_n;
	char **names;
	uint32_t *hash; /* open addressing, slot + 1 (0: empty), hash_cap a power of two */
	uint32_t hash_cap;
	struct sluice_http_server *http; /* the admin listener, or NULL */
	/* Record bytes answered to consumers' Fetch requests, per topic slot,
	 * one array per network core (written by it alone). */
	uint64_t *net_bytes_out[SLUICE_CORES_MAX];
	struct sluice_store_metrics store[]; /* [b->store_n] */
};

/* The broker's metrics for its configuration and cores (b->store_n set):
 * NULL when out of memory. Each storage core's sc->metrics points into it. */
struct sluice_metrics *sluice_metrics_new(struct broker *b);

/* A consumer's Fetch answered with bytes of the topic in slot (the op's
 * metrics_topic), on network core nc. */
static inline void sluice_metrics_topic_out(struct sluice_metrics *m, int nc, uint32_t slot, uint64_t bytes)
{
	if (m && slot <= m->topics_max)
		sluice_metric_add(&m->net_bytes_out[nc][slot], bytes);
}
void sluice_metrics_free(struct sluice_metrics *m);
/* The slot of topic's series (registered now if there is room; the
 * (other) slot when not). A storage core calls it once per partition it
 * opens, never per append. m NULL (tests): 0. */
uint32_t sluice_metrics_topic_slot(struct sluice_metrics *m, const char *topic);
/* The /metrics text of the whole broker into w (the admin thread). */
void sluice_metrics_write(struct sluice_metrics *m, struct sluice_prom *w);

/* The admin listener (sluice.admin.listener), serving /metrics and /ready
 * from m: 0, or -1 after writing err (naming the key). Off when the key is
 * unset. */
int sluice_metrics_listen(struct sluice_metrics *m, char *err, size_t errlen);
void sluice_metrics_unlisten(struct sluice_metrics *m);

#endif
