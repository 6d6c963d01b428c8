/* The sluice-controller's metrics and admin listener
 * (sluice.admin.listener): GET /metrics in the Prometheus text format
 * (common/prom.h) and GET /ready (common/http.h). The controller's loop
 * thread owns every value: it publishes them here with relaxed atomic
 * stores (the request counters on each request, the rest from its 100 ms
 * tick and at each leadership change), and the admin listener's thread
 * reads them with relaxed atomic loads. No lock is shared, so a scrape
 * never stalls the loop; a scrape may mix values of two ticks, which a
 * monitoring system does not notice. */
#ifndef SLUICE_CTL_METRICS_H
#define SLUICE_CTL_METRICS_H
#include "common/prom.h"
#include <stddef.h>
#include <stdint.h>

#define SLUICE_CTL_METRICS_API_KEYS 80 /* ApiKeys counted: at least ctl_server.c's API_KEY_MAX (asserted there) */
#define SLUICE_CTL_METRICS_TEXT_BYTES_MAX (256u * 1024) /* a scrape's text: a few dozen series */

/* libraft's states, in its order (RAFT_UNAVAILABLE .. RAFT_LEADER). */
enum sluice_ctl_role { SLUICE_CTL_ROLE_UNAVAILABLE, SLUICE_CTL_ROLE_FOLLOWER, SLUICE_CTL_ROLE_CANDIDATE,
		       SLUICE_CTL_ROLE_LEADER, SLUICE_CTL_ROLES };

struct sluice_ctl_metrics {
	int ready;     /* 1: serving (GET /ready 200); 0 before and from SIGTERM */
	int role;      /* enum sluice_ctl_role */
	int32_t node_id;
	int32_t leader_id;        /* -1: none known */
	uint64_t term;            /* the Raft term */
	uint64_t commit_index;    /* Raft indexes */
	uint64_t applied_index;
	uint64_t last_index;
	int64_t metadata_offset;  /* the image's last applied metadata record (-1 none) */
	uint32_t brokers_registered, brokers_fenced; /* disjoint: unfenced and fenced brokers of the image */
	uint64_t requests[SLUICE_CTL_METRICS_API_KEYS]; /* by ApiKey, counted when dispatched */
	/* Set once before the listener starts: an ApiKey's name, NULL for one
	 * not served (not written). */
	const char *(*api_name)(int16_t key);
};

/* For the loop thread: a request of api_key (a served one) dispatched. */
static inline void sluice_ctl_metrics_request(struct sluice_ctl_metrics *m, int16_t api_key)
{
	if (m && api_key >= 0 && api_key < SLUICE_CTL_METRICS_API_KEYS)
		__atomic_store_n(&m->requests[api_key], __atomic_load_n(&m->requests[api_key], __ATOMIC_RELAXED) + 1,
				 __ATOMIC_RELAXED);
}

/* The Prometheus text of m. Safe on any thread. */
void sluice_ctl_metrics_write(const struct sluice_ctl_metrics *m, struct sluice_prom *w);

struct sluice_http_server;
/* Serve /metrics and /ready for m on host:port (NULL after writing err,
 * naming sluice.admin.listener, when the address is bad or busy). */
struct sluice_http_server *sluice_ctl_metrics_listen(struct sluice_ctl_metrics *m, const char *host, int port,
						     char *err, size_t errlen);

#endif
