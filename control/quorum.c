/* The controllers' Raft quorum on libuv (control/quorum.h): Debian's
 * libraft 0.15 with raft_uv storage in metadata.log.dir and the raft_uv_tcp
 * transport, driving the state machine of control/quorum_fsm.c.
 *
 * Leadership: libraft 0.15 has no state-change callback, so a timer polls
 * raft_state/raft_leader every few milliseconds and reports changes through
 * leader_changed. A node that wins an election is reported as the leader
 * (and accepts proposals) only once a barrier entry of its own term has been
 * applied: libraft appends no entry of its own at election, so until then
 * entries committed under the previous leader may not be applied yet, and
 * the owner would decide on a stale image.
 *
 * Proposals are raft_apply requests carrying the owner's done callback;
 * libraft completes them when applied (the FSM's outcome is the result), or
 * with RAFT_LEADERSHIPLOST when this node stops being the leader (graceful
 * stop included), which becomes KERR_NOT_CONTROLLER. As in any Raft, a
 * proposal failed that way may still commit under the next leader: the
 * owner learns it from the applied records.
 *
 * Callbacks: a snapshot found at start is restored inside
 * sluice_quorum_start (restored fires before it returns); every other
 * callback comes from the loop. Stopping is deferred to the next loop turn
 * (a zero timer), so the owner may stop from inside any callback; from the
 * call on the node is not the leader and refuses proposals.
 *
 * Addresses: raft_uv_tcp speaks IPv4 dotted quads only, so each voter's
 * host is resolved once at start (getaddrinfo, AF_INET). On a fresh
 * directory the voters are bootstrapped from the configuration; an existing
 * directory keeps the configuration in its log and snapshot (a differing
 * controller.quorum.voters is reported, not applied).
 *
 * DescribeQuorum offsets come from the FSM's map of recent Raft indexes to
 * metadata offsets; the times of each voter's last fetch and catch-up are
 * what this node saw while leading (wall clock, sampled by the poll). All
 * offsets are inclusive: the offset of the last record (-1 none or unknown). */
#include "control/quorum.h"
#include "common/kafka/errors.h"
#include "common/log.h"
#include "control/quorum_fsm.h"
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <raft/uv.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define ADDRESS_MAX (INET_ADDRSTRLEN + 1 + 5 + 1) /* a.b.c.d:port */
#define POLL_MS_MAX 50
#define POLL_MS_MIN 5
#define CONNECT_RETRY_MS_MAX 1000u

struct voter_seen {
	raft_index match_index;
	int64_t last_fetch_ms;
	int64_t last_caught_up_ms;
};

struct sluice_quorum {
	uv_loop_t *loop;
	struct sluice_quorum_config cfg; /* cfg.dir points at dir */
	char dir[PATH_MAX];
	char addresses[SLUICE_QUORUM_VOTERS_MAX][ADDRESS_MAX]; /* resolved, per cfg.voters */
	struct sluice_quorum_callbacks cbs;
	void *arg;
	struct raft_uv_transport transport;
	struct raft_io io;
	struct raft raft;
	struct sluice_quorum_fsm fsm;
	uv_timer_t poll;
	unsigned poll_ms;
	/* Leadership: reported once a barrier of the term was applied. */
	struct raft_barrier barrier;
	bool barrier_pending;
	raft_term barrier_term, ready_term;
	bool reported_leader;
	int32_t reported_leader_id;
	struct voter_seen seen[SLUICE_QUORUM_VOTERS_MAX];
	/* Stop. */
	bool stopping;
	int closes_pending;
	void (*stop_done)(void *arg);
	void *stop_arg;
};

struct proposal {
	struct raft_apply req; /* req.data is this proposal */
	sluice_quorum_done_fn done;
	void *arg;
};

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int voter_index(const struct sluice_quorum_config *cfg, int32_t id)
{
	for (int32_t i = 0; i < cfg->voter_n; i++)
		if (cfg->voters[i].id == id)
			return (int)i;
	return -1;
}

bool sluice_quorum_is_leader(const struct sluice_quorum *q)
{
	struct raft *r = (struct raft *)&q->raft; /* libraft's getters take no const */
	return !q->stopping && raft_state(r) == RAFT_LEADER && q->ready_term == r->current_term;
}

int32_t sluice_quorum_leader_id(const struct sluice_quorum *q)
{
	struct raft *r = (struct raft *)&q->raft;
	raft_id id = 0;
	const char *address = NULL;
	if (q->stopping)
		return -1;
	if (raft_state(r) == RAFT_LEADER)
		return sluice_quorum_is_leader(q) ? q->cfg.node_id : -1; /* not ready yet: nobody to send to */
	raft_leader(r, &id, &address);
	return id ? (int32_t)id : -1;
}

static void poll_cb(uv_timer_t *t);

static void barrier_cb(struct raft_barrier *req, int status)
{
	struct sluice_quorum *q = req->data;
	q->barrier_pending = false;
	if (q->stopping || status != 0)
		return;
	if (raft_state(&q->raft) == RAFT_LEADER && q->raft.current_term == q->barrier_term) {
		q->ready_term = q->barrier_term;
		/* Report on the next loop turn, not from inside libraft's apply loop. */
		(void)uv_timer_start(&q->poll, poll_cb, 0, q->poll_ms);
	}
}

/* Record what the leader sees of each voter, for DescribeQuorum. */
static void voters_track(struct sluice_quorum *q)
{
	struct raft *r = &q->raft;
	int64_t now = wall_ms();
	raft_index last = raft_last_index(r);
	for (unsigned c = 0; c < r->configuration.n; c++) {
		int i = voter_index(&q->cfg, (int32_t)r->configuration.servers[c].id);
		if (i < 0)
			continue;
		struct voter_seen *s = &q->seen[i];
		const struct raft_progress *p = &r->leader_state.progress[c];
		if (q->cfg.voters[i].id == q->cfg.node_id || p->recent_recv || p->match_index != s->match_index)
			s->last_fetch_ms = now;
		if (q->cfg.voters[i].id == q->cfg.node_id || p->match_index >= last)
			s->last_caught_up_ms = now;
		s->match_index = q->cfg.voters[i].id == q->cfg.node_id ? last : p->match_index;
	}
}

static void seen_reset(struct sluice_quorum *q)
{
	for (int i = 0; i < SLUICE_QUORUM_VOTERS_MAX; i++)
		q->seen[i] = (struct voter_seen){.match_index = 0, .last_fetch_ms = -1, .last_caught_up_ms = -1};
}

static void poll_cb(uv_timer_t *t)
{
	struct sluice_quorum *q = t->data;
	struct raft *r = &q->raft;
	if (q->stopping)
		return;
	if (raft_state(r) == RAFT_LEADER && q->ready_term != r->current_term && !q->barrier_pending) {
		q->barrier.data = q;
		q->barrier_term = r->current_term;
		if (raft_barrier(r, &q->barrier, barrier_cb) == 0)
			q->barrier_pending = true; /* else retried at the next poll */
	}
	bool is_leader = sluice_quorum_is_leader(q);
	int32_t leader_id = sluice_quorum_leader_id(q);
	if (is_leader)
		voters_track(q);
	if (is_leader == q->reported_leader && leader_id == q->reported_leader_id)
		return;
	SLOG_INFO("quorum", "node %d: %s, leader %d, term %llu, metadata offset %lld", q->cfg.node_id,
		  is_leader ? "leader" : "not the leader", leader_id, (unsigned long long)r->current_term,
		  (long long)sluice_image_offset(q->fsm.img));
	if (is_leader != q->reported_leader)
		seen_reset(q);
	q->reported_leader = is_leader;
	q->reported_leader_id = leader_id;
	if (q->cbs.leader_changed)
		q->cbs.leader_changed(q->arg, is_leader, leader_id);
}

static void proposal_cb(struct raft_apply *req, int status, void *result)
{
	struct proposal *p = req->data;
	int16_t error = KERR_NONE;
	int64_t last_offset = -1;
	if (status == 0) {
		const struct sluice_quorum_outcome *o = result;
		assert(o);
		error = o->error;
		last_offset = o->last_offset;
	} else if (status == RAFT_LEADERSHIPLOST || status == RAFT_NOTLEADER || status == RAFT_SHUTDOWN) {
		error = KERR_NOT_CONTROLLER;
	} else {
		SLOG_WARN("quorum", "proposal failed: %s", raft_strerror(status));
		error = KERR_UNKNOWN_SERVER_ERROR;
	}
	sluice_quorum_done_fn done = p->done;
	void *arg = p->arg;
	free(p);
	done(arg, error, last_offset);
}

int16_t sluice_quorum_propose(struct sluice_quorum *q, const struct sluice_mrec *recs, size_t n,
			      sluice_quorum_done_fn done, void *arg)
{
	assert(done);
	if (!sluice_quorum_is_leader(q))
		return KERR_NOT_CONTROLLER;
	struct raft_buffer buf;
	int16_t error = sluice_quorum_command_encode(recs, n, &buf);
	if (error != KERR_NONE)
		return error;
	struct proposal *p = malloc(sizeof *p);
	if (!p) {
		raft_free(buf.base);
		return KERR_UNKNOWN_SERVER_ERROR;
	}
	memset(p, 0, sizeof *p);
	p->req.data = p;
	p->done = done;
	p->arg = arg;
	int rv = raft_apply(&q->raft, &p->req, &buf, 1, proposal_cb);
	if (rv != 0) {
		raft_free(buf.base); /* not taken on failure */
		free(p);
		return rv == RAFT_NOTLEADER ? KERR_NOT_CONTROLLER : KERR_UNKNOWN_SERVER_ERROR;
	}
	return KERR_NONE;
}

void sluice_quorum_status(const struct sluice_quorum *q, struct sluice_quorum_status *out)
{
	struct raft *r = (struct raft *)&q->raft;
	bool leading = sluice_quorum_is_leader(q);
	memset(out, 0, sizeof *out);
	out->leader_id = sluice_quorum_leader_id(q);
	out->leader_epoch = (int64_t)r->current_term;
	out->high_watermark = sluice_image_offset(q->fsm.img);
	out->voter_n = q->cfg.voter_n;
	for (int32_t i = 0; i < q->cfg.voter_n; i++) {
		out->voters[i].id = q->cfg.voters[i].id;
		out->voters[i].log_end_offset = -1;
		out->voters[i].last_fetch_ms = leading ? q->seen[i].last_fetch_ms : -1;
		out->voters[i].last_caught_up_ms = leading ? q->seen[i].last_caught_up_ms : -1;
		if (q->cfg.voters[i].id == q->cfg.node_id)
			out->voters[i].log_end_offset = sluice_image_offset(q->fsm.img);
		else if (leading && q->seen[i].match_index > 0)
			out->voters[i].log_end_offset = sluice_quorum_fsm_offset_at(&q->fsm, q->seen[i].match_index);
	}
}

void sluice_quorum_progress(const struct sluice_quorum *q, struct sluice_quorum_progress *out)
{
	struct raft *r = (struct raft *)&q->raft; /* libraft's getters take no const */
	out->state = raft_state(r);
	out->term = (uint64_t)r->current_term;
	out->commit_index = (uint64_t)r->commit_index;
	out->applied_index = (uint64_t)raft_last_applied(r);
	out->last_index = (uint64_t)raft_last_index(r);
	assert(out->state >= RAFT_UNAVAILABLE && out->state <= RAFT_LEADER);
}

/* Resolve host to an IPv4 "a.b.c.d:port" (raft_uv_tcp's only form). */
static int resolve(const char *host, uint32_t port, char *out, size_t outlen, char *err, size_t errlen)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
	char ip[INET_ADDRSTRLEN];
	if (port == 0 || port > 65535) {
		snprintf(err, errlen, "voter %s: Raft port %u out of range", host, port);
		return -1;
	}
	int rc = getaddrinfo(host, NULL, &hints, &res);
	if (rc != 0 || !res) {
		snprintf(err, errlen, "voter host %s does not resolve to an IPv4 address: %s", host,
			 rc ? gai_strerror(rc) : "no address");
		return -1;
	}
	const struct sockaddr_in *sin = (const struct sockaddr_in *)res->ai_addr;
	inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof ip);
	freeaddrinfo(res);
	snprintf(out, outlen, "%s:%u", ip, port);
	return 0;
}

static int config_check(const struct sluice_quorum_config *cfg, char *err, size_t errlen)
{
	struct sigaction sa;
	if (sigaction(SIGPIPE, NULL, &sa) != 0 || sa.sa_handler != SIG_IGN) {
		snprintf(err, errlen, "SIGPIPE is not ignored: a dead Raft peer's socket would kill this process");
		return -1;
	}
	if (cfg->voter_n < 1 || cfg->voter_n > SLUICE_QUORUM_VOTERS_MAX) {
		snprintf(err, errlen, "%d voters (1 to %d)", cfg->voter_n, SLUICE_QUORUM_VOTERS_MAX);
		return -1;
	}
	if (voter_index(cfg, cfg->node_id) < 0) {
		snprintf(err, errlen, "node.id %d is not one of controller.quorum.voters", cfg->node_id);
		return -1;
	}
	if (!cfg->dir || !*cfg->dir || strlen(cfg->dir) >= PATH_MAX) {
		snprintf(err, errlen, "metadata.log.dir is empty or too long");
		return -1;
	}
	if (mkdir(cfg->dir, 0750) != 0 && errno != EEXIST) {
		snprintf(err, errlen, "metadata.log.dir %s: %s", cfg->dir, strerror(errno));
		return -1;
	}
	return 0;
}

static void closed_one(struct sluice_quorum *q)
{
	assert(q->closes_pending > 0);
	if (--q->closes_pending > 0)
		return;
	void (*done)(void *) = q->stop_done;
	void *arg = q->stop_arg;
	sluice_quorum_fsm_close(&q->fsm);
	free(q);
	if (done)
		done(arg);
}

static void raft_closed(struct raft *r)
{
	struct sluice_quorum *q = r->data;
	raft_uv_close(&q->io);
	raft_uv_tcp_close(&q->transport);
	closed_one(q);
}

static void poll_closed(uv_handle_t *h)
{
	closed_one(h->data);
}

/* raft_bootstrap the voters on a fresh directory. */
static int bootstrap(struct sluice_quorum *q, char *err, size_t errlen)
{
	struct raft_configuration conf;
	int rv = 0;
	raft_configuration_init(&conf);
	for (int32_t i = 0; i < q->cfg.voter_n && rv == 0; i++)
		rv = raft_configuration_add(&conf, (raft_id)q->cfg.voters[i].id, q->addresses[i], RAFT_VOTER);
	if (rv == 0)
		rv = raft_bootstrap(&q->raft, &conf);
	raft_configuration_close(&conf);
	if (rv == RAFT_CANTBOOTSTRAP)
		return 0; /* an existing directory: its log holds the configuration */
	if (rv != 0)
		snprintf(err, errlen, "raft bootstrap in %s: %s (%s)", q->dir, raft_strerror(rv), raft_errmsg(&q->raft));
	else
		SLOG_INFO("quorum", "bootstrapped %d voters in %s", q->cfg.voter_n, q->dir);
	return rv ? -1 : 0;
}

/* Warn when the directory's Raft configuration is not controller.quorum.voters. */
static void configuration_compare(struct sluice_quorum *q)
{
	const struct raft_configuration *c = &q->raft.configuration;
	bool same = c->n == (unsigned)q->cfg.voter_n;
	for (unsigned i = 0; same && i < c->n; i++) {
		int v = voter_index(&q->cfg, (int32_t)c->servers[i].id);
		same = v >= 0 && c->servers[i].role == RAFT_VOTER && strcmp(c->servers[i].address, q->addresses[v]) == 0;
	}
	if (!same)
		SLOG_WARN("quorum", "the Raft configuration in %s (%u servers) differs from controller.quorum.voters"
			  " (%d): the directory's is used", q->dir, c->n, q->cfg.voter_n);
}

/* Everything after raft_init: tuning, bootstrap, start, the poll timer.
 * Returns 0 or -1 with err set (the caller closes Raft). */
static int quorum_run(struct sluice_quorum *q, char *err, size_t errlen)
{
	sluice_quorum_tune(&q->raft, &q->cfg);
	/* Reconnect to a restarted peer well within an election timeout. */
	unsigned retry_ms = q->raft.election_timeout / 4 + 1;
	raft_uv_set_connect_retry_delay(&q->io, retry_ms < CONNECT_RETRY_MS_MAX ? retry_ms : CONNECT_RETRY_MS_MAX);
	q->poll_ms = q->raft.heartbeat_timeout < POLL_MS_MAX ? q->raft.heartbeat_timeout : POLL_MS_MAX;
	if (q->poll_ms < POLL_MS_MIN)
		q->poll_ms = POLL_MS_MIN;
	if (bootstrap(q, err, errlen) != 0)
		return -1;
	int rv = raft_start(&q->raft);
	if (rv != 0) {
		snprintf(err, errlen, "raft start in %s: %s (%s)", q->dir, raft_strerror(rv), raft_errmsg(&q->raft));
		return -1;
	}
	configuration_compare(q);
	rv = uv_timer_init(q->loop, &q->poll);
	assert(rv == 0);
	q->poll.data = q;
	rv = uv_timer_start(&q->poll, poll_cb, q->poll_ms, q->poll_ms);
	assert(rv == 0);
	return 0;
}

int sluice_quorum_start(struct sluice_quorum **out, uv_loop_t *loop, const struct sluice_quorum_config *cfg,
			struct sluice_image *img, struct sluice_mlog *mlog, const struct sluice_quorum_callbacks *cbs,
			void *arg, char *err, size_t errlen)
{
	*out = NULL;
	if (config_check(cfg, err, errlen) != 0)
		return -1;
	struct sluice_quorum *q = calloc(1, sizeof *q);
	if (!q || sluice_quorum_fsm_init(&q->fsm, img, mlog, &q->cbs, arg) != 0) {
		free(q);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	q->loop = loop;
	q->cfg = *cfg;
	snprintf(q->dir, sizeof q->dir, "%s", cfg->dir);
	q->cfg.dir = q->dir;
	q->cbs = cbs ? *cbs : (struct sluice_quorum_callbacks){0};
	q->arg = arg;
	q->reported_leader_id = -1;
	seen_reset(q);
	for (int32_t i = 0; i < cfg->voter_n; i++)
		if (resolve(cfg->voters[i].host, cfg->voters[i].port, q->addresses[i], ADDRESS_MAX, err, errlen) != 0)
			goto fail_free;
	const char *self = q->addresses[voter_index(cfg, cfg->node_id)];
	int rv = raft_uv_tcp_init(&q->transport, loop);
	if (rv != 0) {
		snprintf(err, errlen, "raft transport: %s", raft_strerror(rv));
		goto fail_free;
	}
	rv = raft_uv_init(&q->io, loop, q->dir, &q->transport);
	if (rv != 0) {
		snprintf(err, errlen, "raft storage in %s: %s (%s)", q->dir, raft_strerror(rv), q->io.errmsg);
		raft_uv_tcp_close(&q->transport);
		goto fail_free;
	}
	rv = raft_init(&q->raft, &q->io, &q->fsm.raft_fsm, (raft_id)cfg->node_id, self);
	if (rv != 0) {
		snprintf(err, errlen, "raft init (%s in %s): %s (%s)", self, q->dir, raft_strerror(rv), q->raft.errmsg);
		raft_uv_close(&q->io);
		raft_uv_tcp_close(&q->transport);
		goto fail_free;
	}
	q->raft.data = q;
	q->fsm.raft = &q->raft;
	if (quorum_run(q, err, errlen) != 0) {
		/* Raft's handles close on the loop, which frees q. */
		q->stopping = true;
		q->closes_pending = 1;
		raft_close(&q->raft, raft_closed);
		return -1;
	}
	SLOG_INFO("quorum", "node %d started: raft %s, dir %s, %d voters, metadata offset %lld", cfg->node_id, self,
		  q->dir, cfg->voter_n, (long long)sluice_image_offset(img));
	*out = q;
	return 0;
fail_free:
	sluice_quorum_fsm_close(&q->fsm);
	free(q);
	return -1;
}

/* The stop itself, on the loop turn after sluice_quorum_stop: never inside
 * one of libraft's callbacks (the owner may stop from applied or done). */
static void stop_now(uv_timer_t *t)
{
	struct sluice_quorum *q = t->data;
	assert(q->stopping && q->closes_pending == 0);
	q->closes_pending = 2;
	uv_close((uv_handle_t *)&q->poll, poll_closed);
	/* Fails pending proposals (RAFT_LEADERSHIPLOST: NOT_CONTROLLER) and the
	 * barrier, then closes storage and transport. */
	raft_close(&q->raft, raft_closed);
}

void sluice_quorum_stop(struct sluice_quorum *q, void (*done)(void *arg), void *arg)
{
	assert(!q->stopping);
	q->stopping = true; /* from now on: not the leader, proposals refused */
	q->stop_done = done;
	q->stop_arg = arg;
	int rc = uv_timer_start(&q->poll, stop_now, 0, 0);
	assert(rc == 0);
	(void)rc;
}

/* Parse one "id@host:port" of s[0..len). */
static int voter_parse(const char *s, size_t len, struct sluice_quorum_voter *v, char *err, size_t errlen)
{
	const char *at = memchr(s, '@', len);
	const char *colon = NULL;
	for (size_t i = len; i-- > 0;)
		if (s[i] == ':') {
			colon = s + i;
			break;
		}
	if (!at || !colon || colon < at) {
		snprintf(err, errlen, "controller.quorum.voters entry '%.*s' is not id@host:port", (int)len, s);
		return -1;
	}
	char num[16];
	size_t idlen = (size_t)(at - s), hostlen = (size_t)(colon - at - 1), portlen = (size_t)(s + len - colon - 1);
	char *end = NULL;
	snprintf(num, sizeof num, "%.*s", (int)(idlen < sizeof num ? idlen : sizeof num - 1), s);
	long id = idlen && idlen < sizeof num ? strtol(num, &end, 10) : 0;
	if (!end || *end || id < 1 || id > INT32_MAX) {
		snprintf(err, errlen, "controller.quorum.voters entry '%.*s': id must be a positive integer", (int)len, s);
		return -1;
	}
	snprintf(num, sizeof num, "%.*s", (int)(portlen < sizeof num ? portlen : sizeof num - 1), colon + 1);
	end = NULL;
	long port = portlen && portlen < 6 ? strtol(num, &end, 10) : 0;
	if (!end || *end || port < 1 || port > 65535) {
		snprintf(err, errlen, "controller.quorum.voters entry '%.*s': port must be 1..65535", (int)len, s);
		return -1;
	}
	if (hostlen == 0 || hostlen > SLUICE_QUORUM_HOST_MAX) {
		snprintf(err, errlen, "controller.quorum.voters entry '%.*s': host empty or longer than %d", (int)len, s,
			 SLUICE_QUORUM_HOST_MAX);
		return -1;
	}
	v->id = (int32_t)id;
	v->port = (uint16_t)port;
	memcpy(v->host, at + 1, hostlen);
	v->host[hostlen] = '\0';
	return 0;
}

int sluice_quorum_parse_voters(const char *s, struct sluice_quorum_config *cfg, char *err, size_t errlen)
{
	struct sluice_quorum_voter voters[SLUICE_QUORUM_VOTERS_MAX];
	int32_t n = 0;
	if (!s || !*s) {
		snprintf(err, errlen, "controller.quorum.voters is empty");
		return -1;
	}
	for (const char *p = s;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		while (len && (*p == ' ' || *p == '\t'))
			p++, len--;
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (n == SLUICE_QUORUM_VOTERS_MAX) {
			snprintf(err, errlen, "controller.quorum.voters: more than %d voters", SLUICE_QUORUM_VOTERS_MAX);
			return -1;
		}
		if (voter_parse(p, len, &voters[n], err, errlen) != 0)
			return -1;
		for (int32_t i = 0; i < n; i++)
			if (voters[i].id == voters[n].id) {
				snprintf(err, errlen, "controller.quorum.voters: id %d appears twice", voters[n].id);
				return -1;
			}
		n++;
		if (!comma)
			break;
		p = comma + 1;
	}
	cfg->voter_n = n;
	memcpy(cfg->voters, voters, sizeof voters[0] * (size_t)n);
	return 0;
}
