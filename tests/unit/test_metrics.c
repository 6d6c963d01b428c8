/* The broker's metrics (dataplane/metrics.c) over a broker with no threads:
 * topics get their own series up to sluice.metrics.topics.max and the rest
 * share topic="(other)"; a scrape sums every storage and network core's
 * counters; requests, errors by name and histograms come out under Kafka's
 * API names; before the cores serve only sluice_broker_ready is written. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "dataplane/metrics.h"
#include "dataplane/proto_internal.h"

static struct broker b;

static struct sluice_metrics *metrics_for(int32_t topics_max, int net_n, int store_n)
{
	memset(&b, 0, sizeof b);
	b.cfg.metrics_topics_max = topics_max;
	b.net_n = net_n;
	b.store_n = store_n;
	for (int n = 0; n < net_n; n++)
		b.net[n].state = calloc(1, sizeof(struct proto_state));
	struct sluice_metrics *m = sluice_metrics_new(&b);
	cr_assert_not_null(m);
	return m;
}

static void metrics_done(struct sluice_metrics *m)
{
	sluice_metrics_free(m);
	for (int n = 0; n < b.net_n; n++)
		free(b.net[n].state);
}

static char *scrape(struct sluice_metrics *m)
{
	static char text[1 << 16];
	struct sluice_prom w;
	sluice_prom_init(&w, sizeof text);
	sluice_metrics_write(m, &w);
	cr_assert(!w.err);
	cr_assert_lt(w.len, sizeof text);
	memcpy(text, w.buf, w.len + 1);
	sluice_prom_free(&w);
	return text;
}

Test(metrics, topics_beyond_the_bound_share_other)
{
	struct sluice_metrics *m = metrics_for(2, 1, 2);
	cr_assert_eq(b.store[0].metrics, &m->store[0]);
	cr_assert_eq(b.store[1].metrics, &m->store[1]);
	cr_assert_eq(sluice_metrics_topic_slot(m, "a"), 0);
	cr_assert_eq(sluice_metrics_topic_slot(m, "b"), 1);
	cr_assert_eq(sluice_metrics_topic_slot(m, "c"), 2, "over the bound: (other)");
	cr_assert_eq(sluice_metrics_topic_slot(m, "d"), 2);
	cr_assert_eq(sluice_metrics_topic_slot(m, "a"), 0, "registered once");
	cr_assert_eq(sluice_metrics_topic_slot(NULL, "a"), 0, "no metrics (tests): slot 0");
	/* Before the cores serve: the ready gauge only. */
	char *t = scrape(m);
	cr_assert(strstr(t, "sluice_broker_ready 0\n"));
	cr_assert_null(strstr(t, "sluice_topic_records_in_total"));
	__atomic_store_n(&m->cores_live, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&m->ready, 1, __ATOMIC_RELEASE);
	t = scrape(m);
	cr_assert(strstr(t, "sluice_topic_records_in_total{topic=\"b\"} 0\n"), "registered: listed at 0");
	cr_assert_null(strstr(t, "(other)"), "(other) only once used");
	sluice_metrics_topic_in(&m->store[0], 0, 5, 100);
	sluice_metrics_topic_in(&m->store[1], 0, 7, 200); /* the same topic on another core */
	sluice_metrics_topic_in(&m->store[1], 2, 3, 30);
	t = scrape(m);
	cr_assert(strstr(t, "sluice_broker_ready 1\n"));
	cr_assert(strstr(t, "sluice_topic_records_in_total{topic=\"a\"} 12\n"), "%s", t);
	cr_assert(strstr(t, "sluice_topic_bytes_in_total{topic=\"a\"} 300\n"));
	cr_assert(strstr(t, "sluice_topic_records_in_total{topic=\"(other)\"} 3\n"));
	cr_assert(strstr(t, "sluice_topic_bytes_in_total{topic=\"(other)\"} 30\n"));
	metrics_done(m);
}

Test(metrics, network_cores_summed_under_api_names)
{
	struct sluice_metrics *m = metrics_for(0, 2, 1);
	__atomic_store_n(&m->cores_live, 1, __ATOMIC_RELEASE);
	struct sluice_net_metrics *n0 = &((struct proto_state *)b.net[0].state)->metrics;
	struct sluice_net_metrics *n1 = &((struct proto_state *)b.net[1].state)->metrics;
	sluice_metric_add(&n0->requests[API_PRODUCE], 2);
	sluice_metric_add(&n1->requests[API_PRODUCE], 3);
	sluice_metrics_error(n0, API_PRODUCE, 6);
	sluice_metrics_error(n1, API_PRODUCE, 6);
	sluice_metrics_error(n1, API_METADATA, -1);
	sluice_metrics_error(n1, API_METADATA, 0); /* NONE: not an error */
	sluice_metrics_latency(n0, API_FETCH, 300);
	sluice_metrics_latency(n1, API_FETCH, 2000000);
	sluice_metric_add(&n0->conns_accepted, 4);
	sluice_metric_add(&n1->conns_accepted, 1);
	sluice_metric_add(&n0->conns_closed, 3);
	char *t = scrape(m);
	cr_assert(strstr(t, "sluice_requests_total{api=\"Produce\"} 5\n"), "%s", t);
	cr_assert(strstr(t, "sluice_requests_total{api=\"DescribeTopicPartitions\"} 0\n"), "every API served, at 0");
	cr_assert(strstr(t, "sluice_request_errors_total{api=\"Produce\",error=\"NOT_LEADER_OR_FOLLOWER\"} 2\n"));
	cr_assert(strstr(t, "sluice_request_errors_total{api=\"Metadata\",error=\"UNKNOWN_SERVER_ERROR\"} 1\n"));
	cr_assert_null(strstr(t, "error=\"NONE\""));
	cr_assert(strstr(t, "sluice_request_duration_seconds_bucket{api=\"Fetch\",le=\"0.00025\"} 0\n"));
	cr_assert(strstr(t, "sluice_request_duration_seconds_bucket{api=\"Fetch\",le=\"0.0005\"} 1\n"));
	cr_assert(strstr(t, "sluice_request_duration_seconds_bucket{api=\"Fetch\",le=\"2.5\"} 2\n"));
	cr_assert(strstr(t, "sluice_request_duration_seconds_sum{api=\"Fetch\"} 2.0003\n"));
	cr_assert(strstr(t, "sluice_request_duration_seconds_count{api=\"Fetch\"} 2\n"));
	cr_assert_null(strstr(t, "sluice_request_duration_seconds_count{api=\"Produce\"}"), "unused: not listed");
	cr_assert(strstr(t, "sluice_network_connections 2\n"));
	cr_assert(strstr(t, "sluice_network_connections_accepted_total 5\n"));
	cr_assert_null(strstr(t, "(other)"), "topics.max 0 and nothing produced: no topic series");
	metrics_done(m);
}
