/* The sluice-controller's metrics (ctl_metrics.h): the Prometheus text of
 * the values the loop published, and the admin listener's two routes. It
 * runs on the admin listener's thread only, and reads every value with a
 * relaxed atomic load. */
#include "control/ctl_metrics.h"
#include "common/http.h"
#include "common/log.h"
#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static const char *const role_names[SLUICE_CTL_ROLES] = {"unavailable", "follower", "candidate", "leader"};

#define LOAD(field) __atomic_load_n(&(field), __ATOMIC_RELAXED)

static void write_gauge(struct sluice_prom *w, const char *name, const char *help, uint64_t v)
{
	sluice_prom_family(w, name, "gauge", help);
	sluice_prom_u64(w, name, NULL, 0, v);
}

static void write_role(const struct sluice_ctl_metrics *m, struct sluice_prom *w)
{
	int role = LOAD(m->role);
	assert(role >= 0 && role < SLUICE_CTL_ROLES);
	sluice_prom_family(w, "sluice_controller_role", "gauge",
			   "This controller's Raft role: 1 on the series of the current one, 0 on the others.");
	for (int r = 0; r < SLUICE_CTL_ROLES; r++) {
		struct sluice_prom_label l = {"role", role_names[r]};
		sluice_prom_u64(w, "sluice_controller_role", &l, 1, r == role);
	}
}

static void write_requests(const struct sluice_ctl_metrics *m, struct sluice_prom *w)
{
	sluice_prom_family(w, "sluice_controller_requests_total", "counter",
			   "Requests dispatched by this controller's Kafka-protocol listener, by API.");
	for (int16_t k = 0; k < SLUICE_CTL_METRICS_API_KEYS; k++) {
		const char *name = m->api_name ? m->api_name(k) : NULL;
		if (!name)
			continue;
		struct sluice_prom_label l = {"api", name};
		sluice_prom_u64(w, "sluice_controller_requests_total", &l, 1, LOAD(m->requests[k]));
	}
}

void sluice_ctl_metrics_write(const struct sluice_ctl_metrics *m, struct sluice_prom *w)
{
	assert(m && w);
	write_gauge(w, "sluice_controller_ready", "1 once the controller serves (GET /ready answers 200), else 0.",
		    (uint64_t)LOAD(m->ready));
	write_role(m, w);
	int32_t leader = LOAD(m->leader_id);
	sluice_prom_family(w, "sluice_controller_leader_id", "gauge",
			   "The node id of the active controller as this node knows it; -1 when none is known.");
	sluice_prom_f64(w, "sluice_controller_leader_id", NULL, 0, (double)leader);
	write_gauge(w, "sluice_controller_term", "The current Raft term (KRaft's leader epoch).", LOAD(m->term));
	uint64_t commit = LOAD(m->commit_index), applied = LOAD(m->applied_index);
	write_gauge(w, "sluice_controller_commit_index", "The highest Raft log index known to be committed.", commit);
	write_gauge(w, "sluice_controller_applied_index", "The highest Raft log index applied to the metadata image.",
		    applied);
	uint64_t lag = commit > applied ? commit - applied : 0; /* a follower may learn of a commit after applying */
	write_gauge(w, "sluice_controller_apply_lag", "Raft entries committed but not yet applied (commit - applied).",
		    lag);
	write_gauge(w, "sluice_controller_last_index", "The last Raft log index this node holds.", LOAD(m->last_index));
	sluice_prom_family(w, "sluice_controller_metadata_offset", "gauge",
			   "The offset of the last metadata record applied to the image; -1 when none.");
	sluice_prom_f64(w, "sluice_controller_metadata_offset", NULL, 0, (double)LOAD(m->metadata_offset));
	sluice_prom_family(w, "sluice_controller_brokers", "gauge",
			   "Brokers in the metadata image: registered (unfenced) or fenced; the two sum to all.");
	struct sluice_prom_label reg = {"state", "registered"}, fen = {"state", "fenced"};
	sluice_prom_u64(w, "sluice_controller_brokers", &reg, 1, LOAD(m->brokers_registered));
	sluice_prom_u64(w, "sluice_controller_brokers", &fen, 1, LOAD(m->brokers_fenced));
	write_requests(m, w);
}

/* ---- the admin listener ---------------------------------------------------- */

static void route_metrics(void *arg, struct sluice_http_answer *a)
{
	const struct sluice_ctl_metrics *m = arg;
	struct sluice_prom w;
	sluice_prom_init(&w, SLUICE_CTL_METRICS_TEXT_BYTES_MAX);
	sluice_ctl_metrics_write(m, &w);
	sluice_prom_http_answer(&w, a);
}

static void route_ready(void *arg, struct sluice_http_answer *a)
{
	const struct sluice_ctl_metrics *m = arg;
	bool ready = __atomic_load_n(&m->ready, __ATOMIC_ACQUIRE);
	a->status = ready ? 200 : 503;
	a->body = strdup(ready ? "ready\n" : "not ready\n");
	a->len = a->body ? strlen(a->body) : 0;
}

struct sluice_http_server *sluice_ctl_metrics_listen(struct sluice_ctl_metrics *m, const char *host, int port,
						     char *err, size_t errlen)
{
	assert(m && port > 0 && port <= 65535);
	const struct sluice_http_route routes[] = {{"/metrics", route_metrics, m}, {"/ready", route_ready, m}};
	return sluice_http_start("sluice.admin.listener", host, port, routes, sizeof routes / sizeof routes[0], err,
				 errlen);
}
