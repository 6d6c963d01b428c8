/* The broker's metrics (metrics.h): the topic registry, the latency
 * buckets, the scrape that sums every core's counters into the Prometheus
 * text (common/prom.h), and the admin listener's routes (common/http.h):
 * GET /metrics and GET /ready. Everything here but the two inline counters
 * and the latency bucket runs off the hot path: at start, when a storage
 * core opens a partition, or on the admin listener's thread. */
#include "dataplane/metrics.h"
#include "common/http.h"
#include "common/log.h"
#include "dataplane/proto_internal.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(API_KEY_MAX <= SLUICE_METRICS_API_KEYS, "every ApiKey served has its counters");
_Static_assert(SLUICE_METRICS_LATENCY_BUCKETS <= SLUICE_PROM_BUCKETS_MAX, "a latency histogram fits the writer");
_Static_assert(SLUICE_CONFIG_METRICS_TOPICS_MAX < UINT32_MAX / 4, "the topic hash's size fits 32 bits");

static const int64_t latency_bounds_us[SLUICE_METRICS_LATENCY_BUCKETS] = SLUICE_METRICS_LATENCY_BOUNDS_US;

/* ---- the topic registry ---------------------------------------------------- */

static uint32_t topic_hash(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h;
}

struct sluice_metrics *sluice_metrics_new(struct broker *b)
{
	assert(b->store_n > 0 && b->store_n <= SLUICE_CORES_MAX);
	uint32_t max = (uint32_t)b->cfg.metrics_topics_max;
	assert(max <= SLUICE_CONFIG_METRICS_TOPICS_MAX);
	struct sluice_metrics *m = calloc(1, sizeof *m + (size_t)b->store_n * sizeof m->store[0]);
	if (!m)
		return NULL;
	m->b = b;
	m->topics_max = max;
	m->hash_cap = 16;
	while (m->hash_cap < 2 * max)
		m->hash_cap *= 2;
	m->names = calloc(max + 1, sizeof *m->names);
	m->hash = calloc(m->hash_cap, sizeof *m->hash);
	bool ok = m->names && m->hash && pthread_mutex_init(&m->topics_mu, NULL) == 0;
	for (int s = 0; ok && s < b->store_n; s++) {
		m->store[s].records_in = calloc(max + 1, sizeof(uint64_t));
		m->store[s].bytes_in = calloc(max + 1, sizeof(uint64_t));
		ok = m->store[s].records_in && m->store[s].bytes_in;
		b->store[s].metrics = &m->store[s];
	}
	assert(b->net_n > 0 && b->net_n <= SLUICE_CORES_MAX);
	for (int n = 0; ok && n < b->net_n; n++)
		ok = (m->net_bytes_out[n] = calloc(max + 1, sizeof(uint64_t))) != NULL;
	if (!ok) {
		sluice_metrics_free(m);
		return NULL;
	}
	return m;
}

void sluice_metrics_free(struct sluice_metrics *m)
{
	if (!m)
		return;
	assert(!m->http);
	for (int n = 0; n < SLUICE_CORES_MAX; n++)
		free(m->net_bytes_out[n]);
	for (int s = 0; s < m->b->store_n; s++) {
		free(m->store[s].records_in);
		free(m->store[s].bytes_in);
		m->b->store[s].metrics = NULL;
	}
	for (uint32_t i = 0; i < m->topic_n; i++)
		free(m->names[i]);
	free(m->names);
	free(m->hash);
	free(m);
}

uint32_t sluice_metrics_topic_slot(struct sluice_metrics *m, const char *topic)
{
	if (!m)
		return 0;
	pthread_mutex_lock(&m->topics_mu);
	uint32_t mask = m->hash_cap - 1, i = topic_hash(topic) & mask, slot = m->topics_max;
	while (m->hash[i] && strcmp(m->names[m->hash[i] - 1], topic) != 0)
		i = (i + 1) & mask;
	if (m->hash[i])
		slot = m->hash[i] - 1;
	else if (m->topic_n < m->topics_max && (m->names[m->topic_n] = strdup(topic)) != NULL) {
		slot = m->topic_n;
		m->hash[i] = slot + 1;
		__atomic_store_n(&m->topic_n, slot + 1, __ATOMIC_RELEASE); /* the name first, then the count */
	}
	assert(slot <= m->topics_max && m->topic_n * 2 <= m->hash_cap);
	pthread_mutex_unlock(&m->topics_mu);
	return slot;
}

/* ---- the scrape ------------------------------------------------------------ */

/* Every network core's counters added into sum. */
static void net_sum(const struct broker *b, struct sluice_net_metrics *sum)
{
	assert(b->net_n > 0 && b->net_n <= SLUICE_CORES_MAX);
	const size_t words = sizeof *sum / sizeof(uint64_t);
	_Static_assert(sizeof(struct sluice_net_metrics) % sizeof(uint64_t) == 0, "counters only");
	for (int n = 0; n < b->net_n; n++) {
		const struct proto_state *ps = b->net[n].state;
		const uint64_t *from = (const uint64_t *)&ps->metrics;
		uint64_t *to = (uint64_t *)sum;
		for (size_t i = 0; i < words; i++)
			to[i] += sluice_metric_read(&from[i]);
	}
}

static void write_requests(struct sluice_prom *w, const struct sluice_net_metrics *sum)
{
	sluice_prom_family(w, "sluice_requests_total", "counter", "Requests received, by API (Kafka's ApiKey name).");
	for (int k = 0; k < SLUICE_METRICS_API_KEYS; k++) {
		const char *api = sluice_proto_api_name((int16_t)k);
		struct sluice_prom_label l[] = {{"api", api}};
		if (api)
			sluice_prom_u64(w, "sluice_requests_total", l, 1, sum->requests[k]);
	}
	sluice_prom_family(w, "sluice_request_errors_total", "counter",
			   "Errors answered, by API and Kafka error code name (partition-level and top-level codes).");
	for (int k = 0; k < SLUICE_METRICS_API_KEYS; k++) {
		const char *api = sluice_proto_api_name((int16_t)k);
		for (int e = 0; api && e < SLUICE_METRICS_ERROR_SLOTS; e++) {
			int16_t code = (int16_t)(e == 0 ? -1 : e);
			struct sluice_prom_label l[] = {{"api", api}, {"error", sluice_kafka_error_name(code)}};
			if (sum->errors[k][e])
				sluice_prom_u64(w, "sluice_request_errors_total", l, 2, sum->errors[k][e]);
		}
	}
}

static void write_latency(struct sluice_prom *w, const struct sluice_net_metrics *sum)
{
	double bounds[SLUICE_METRICS_LATENCY_BUCKETS];
	for (int i = 0; i < SLUICE_METRICS_LATENCY_BUCKETS; i++)
		bounds[i] = (double)latency_bounds_us[i] / 1e6;
	sluice_prom_family(w, "sluice_request_duration_seconds", "histogram",
			   "Total time of a request, from its frame read to its response sent, by API.");
	for (int k = 0; k < SLUICE_METRICS_API_KEYS; k++) {
		const char *api = sluice_proto_api_name((int16_t)k);
		uint64_t n = 0;
		for (int i = 0; i <= SLUICE_METRICS_LATENCY_BUCKETS; i++)
			n += sum->latency[k][i];
		struct sluice_prom_label l[] = {{"api", api}};
		if (api && n)
			sluice_prom_histogram(w, "sluice_request_duration_seconds", l, 1, bounds, sum->latency[k],
					      SLUICE_METRICS_LATENCY_BUCKETS, (double)sum->latency_us[k] / 1e6);
	}
}

static void write_connections(struct sluice_prom *w, const struct sluice_net_metrics *sum)
{
	sluice_prom_family(w, "sluice_network_connections", "gauge", "Client connections open on the network cores.");
	sluice_prom_u64(w, "sluice_network_connections", NULL, 0,
			sum->conns_accepted >= sum->conns_closed ? sum->conns_accepted - sum->conns_closed : 0);
	sluice_prom_family(w, "sluice_network_connections_accepted_total", "counter",
			   "Client connections accepted by the network cores.");
	sluice_prom_u64(w, "sluice_network_connections_accepted_total", NULL, 0, sum->conns_accepted);
}

/* One per-topic family: the registered topics, then (other) when used. */
enum topic_counter { TOPIC_RECORDS_IN, TOPIC_BYTES_IN, TOPIC_BYTES_OUT };

static uint64_t topic_sum(const struct sluice_metrics *m, uint32_t i, enum topic_counter what)
{
	uint64_t v = 0;
	if (what == TOPIC_BYTES_OUT) {
		for (int n = 0; n < m->b->net_n; n++)
			v += sluice_metric_read(&m->net_bytes_out[n][i]);
		return v;
	}
	for (int s = 0; s < m->b->store_n; s++)
		v += sluice_metric_read(what == TOPIC_BYTES_IN ? &m->store[s].bytes_in[i] : &m->store[s].records_in[i]);
	return v;
}

static void write_topic_family(struct sluice_metrics *m, struct sluice_prom *w, const char *name, const char *help,
			       enum topic_counter what)
{
	uint32_t n = __atomic_load_n(&m->topic_n, __ATOMIC_ACQUIRE);
	assert(n <= m->topics_max);
	sluice_prom_family(w, name, "counter", help);
	for (uint32_t i = 0; i <= m->topics_max; i++) {
		if (i == n)
			i = m->topics_max; /* past the registered ones: the (other) slot */
		uint64_t v = topic_sum(m, i, what);
		struct sluice_prom_label l[] = {{"topic", i < n ? m->names[i] : SLUICE_METRICS_OTHER_TOPIC}};
		if (i < n || v)
			sluice_prom_u64(w, name, l, 1, v);
	}
}

void sluice_metrics_write(struct sluice_metrics *m, struct sluice_prom *w)
{
	sluice_prom_family(w, "sluice_broker_ready", "gauge",
			   "1 once the broker has recovered and serves clients (GET /ready answers 200), else 0.");
	sluice_prom_u64(w, "sluice_broker_ready", NULL, 0, (uint64_t)__atomic_load_n(&m->ready, __ATOMIC_ACQUIRE));
	if (!__atomic_load_n(&m->cores_live, __ATOMIC_ACQUIRE))
		return; /* before the cores start, or as they stop: nothing of theirs is read */
	struct sluice_net_metrics *sum = calloc(1, sizeof *sum);
	if (!sum) {
		w->err = true;
		return;
	}
	net_sum(m->b, sum);
	write_requests(w, sum);
	write_latency(w, sum);
	write_connections(w, sum);
	free(sum);
	write_topic_family(m, w, "sluice_topic_records_in_total",
			   "Records appended by Produce, by topic (idempotent duplicates not counted).", TOPIC_RECORDS_IN);
	write_topic_family(m, w, "sluice_topic_bytes_in_total",
			   "Bytes of record batches appended by Produce, by topic (idempotent duplicates not counted).",
			   TOPIC_BYTES_IN);
	write_topic_family(m, w, "sluice_topic_bytes_out_total",
			   "Bytes of record batches answered to consumers' Fetch requests, by topic (followers' not "
			   "counted).",
			   TOPIC_BYTES_OUT);
}

/* ---- the admin listener ---------------------------------------------------- */

static void route_metrics(void *arg, struct sluice_http_answer *a)
{
	struct sluice_metrics *m = arg;
	struct sluice_prom w;
	sluice_prom_init(&w, SLUICE_METRICS_TEXT_BYTES_MAX);
	sluice_metrics_write(m, &w);
	sluice_prom_http_answer(&w, a);
}

static void route_ready(void *arg, struct sluice_http_answer *a)
{
	struct sluice_metrics *m = arg;
	bool ready = __atomic_load_n(&m->ready, __ATOMIC_ACQUIRE);
	a->status = ready ? 200 : 503;
	a->body = strdup(ready ? "ready\n" : "not ready\n");
	a->len = a->body ? strlen(a->body) : 0;
}

int sluice_metrics_listen(struct sluice_metrics *m, char *err, size_t errlen)
{
	const struct sluice_config *cfg = &m->b->cfg;
	assert(!m->http);
	if (!cfg->admin_listener[0])
		return 0;
	const struct sluice_http_route routes[] = {{"/metrics", route_metrics, m}, {"/ready", route_ready, m}};
	m->http = sluice_http_start("sluice.admin.listener", cfg->admin_host, cfg->admin_port, routes,
				    sizeof routes / sizeof routes[0], err, errlen);
	if (!m->http)
		return -1;
	SLOG_INFO("admin", "admin listener on %s (GET /metrics, GET /ready)", cfg->admin_listener);
	return 0;
}

void sluice_metrics_unlisten(struct sluice_metrics *m)
{
	if (!m)
		return;
	sluice_http_stop(m->http);
	m->http = NULL;
}
