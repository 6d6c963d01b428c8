/* sluice-controller: one node of a Sluice cluster's replicated control
 * plane. `sluice-controller controller.properties [--override key=value
 * ...]` reads Kafka's KRaft properties (control/ctl_config.h), then runs
 * one thread with one libuv loop holding the Raft quorum, the decision
 * rules and the Kafka-protocol listener (control/ctl_server.h) until
 * SIGTERM or SIGINT, which stop it cleanly (quorum stopped, listener and
 * connections closed, exit 0). A bad or missing property exits 1 with one
 * line naming the key. With sluice.admin.listener set, an HTTP admin
 * listener (control/ctl_metrics.h) serves GET /metrics and GET /ready on
 * its own thread. Under systemd (Type=notify) it says READY=1 once its
 * listener is bound and its quorum started, and STOPPING=1 at SIGTERM. */
#include "common/http.h"
#include "common/log.h"
#include "common/sdnotify.h"
#include "control/ctl_config.h"
#include "control/ctl_metrics.h"
#include "control/ctl_server.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#define OVERRIDE_BYTES_MAX 8192

struct controller {
	uv_loop_t loop;
	uv_signal_t sigterm, sigint;
	struct sluice_ctl_server *server;
	struct sluice_ctl_metrics metrics; /* written by the loop, read by the admin listener */
	struct sluice_http_server *admin;  /* NULL: sluice.admin.listener unset */
	bool stopping;
};

static void usage(void)
{
	fprintf(stderr, "usage: sluice-controller controller.properties [--override key=value ...]\n");
}

/* --override key=value (or --override=key=value), applied after the file. */
static int apply_override(struct sluice_controller_config *cfg, const char *kv, char *err, size_t errlen)
{
	char buf[OVERRIDE_BYTES_MAX];
	if (strlen(kv) >= sizeof buf) {
		snprintf(err, errlen, "--override: longer than %d bytes", OVERRIDE_BYTES_MAX - 1);
		return -1;
	}
	snprintf(buf, sizeof buf, "%s", kv);
	char *eq = strchr(buf, '=');
	if (!eq || eq == buf) {
		snprintf(err, errlen, "--override: '%s' is not key=value", kv);
		return -1;
	}
	*eq = '\0';
	return sluice_controller_config_set(cfg, buf, eq + 1, err, errlen);
}

static int load_config(struct sluice_controller_config *cfg, int argc, char **argv, char *err, size_t errlen)
{
	sluice_controller_config_defaults(cfg);
	if (sluice_controller_config_load_file(cfg, argv[1], err, errlen) < 0)
		return -1;
	for (int i = 2; i < argc; i++) {
		const char *kv = NULL;
		if (strcmp(argv[i], "--override") == 0 && i + 1 < argc)
			kv = argv[++i];
		else if (strncmp(argv[i], "--override=", 11) == 0)
			kv = argv[i] + 11;
		if (!kv) {
			snprintf(err, errlen, "unexpected argument '%s'", argv[i]);
			return -1;
		}
		if (apply_override(cfg, kv, err, errlen) < 0)
			return -1;
	}
	return sluice_controller_config_finish(cfg, err, errlen);
}

static void on_signal_closed(uv_handle_t *h)
{
	(void)h;
}

static void on_stopped(void *arg)
{
	struct controller *c = arg;
	/* The server has closed everything of its own: the signals are the last handles. */
	uv_close((uv_handle_t *)&c->sigterm, on_signal_closed);
	uv_close((uv_handle_t *)&c->sigint, on_signal_closed);
}

static void on_signal(uv_signal_t *h, int signum)
{
	struct controller *c = h->data;
	if (c->stopping)
		return;
	c->stopping = true;
	__atomic_store_n(&c->metrics.ready, 0, __ATOMIC_RELEASE); /* GET /ready: 503 from now on */
	SLOG_INFO("controller", "%s: stopping", signum == SIGTERM ? "SIGTERM" : "SIGINT");
	sluice_sdnotify_send("STOPPING=1\nSTATUS=stopping: closing the listener, then the quorum");
	sluice_ctl_server_stop(c->server, on_stopped, c);
}

int main(int argc, char **argv)
{
	/* First: a peer's socket closing under a write must not kill the
	 * process (libraft's transport writes to dead peers). */
	signal(SIGPIPE, SIG_IGN);
	if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		usage();
		return 0;
	}
	if (argc < 2 || argv[1][0] == '-') {
		usage();
		return 1;
	}
	static struct sluice_controller_config cfg; /* large: off the stack */
	char err[512];
	if (load_config(&cfg, argc, argv, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-controller: %s\n", err);
		return 1;
	}
	static struct controller c;
	/* The admin listener first: a bad or busy address stops the start
	 * before the metadata directory is touched. */
	c.metrics.node_id = cfg.node_id;
	c.metrics.leader_id = -1;
	c.metrics.metadata_offset = -1;
	c.metrics.api_name = sluice_ctl_server_api_name;
	if (cfg.admin_port > 0) {
		c.admin = sluice_ctl_metrics_listen(&c.metrics, cfg.admin_host, cfg.admin_port, err, sizeof err);
		if (!c.admin) {
			fprintf(stderr, "sluice-controller: %s\n", err);
			return 1;
		}
		SLOG_INFO("admin", "admin listener on %s (GET /metrics, GET /ready)", cfg.admin_listener);
	}
	int rc = uv_loop_init(&c.loop);
	if (rc < 0) {
		fprintf(stderr, "sluice-controller: uv_loop_init: %s\n", uv_strerror(rc));
		sluice_http_stop(c.admin);
		return 1;
	}
	/* Before the start: the server's leader-change callback replaces this
	 * STATUS= (a lone voter is elected inside sluice_ctl_server_start). */
	sluice_sdnotify_sendf("STATUS=node %d on %s:%u: no active controller known yet (an election is under way)",
			      cfg.node_id, cfg.listen_host, (unsigned)cfg.listen_port);
	if (sluice_ctl_server_start(&c.server, &c.loop, &cfg, &c.metrics, err, sizeof err) < 0) {
		fprintf(stderr, "sluice-controller: %s\n", err);
		sluice_http_stop(c.admin);
		uv_loop_close(&c.loop);
		return 1;
	}
	uv_signal_init(&c.loop, &c.sigterm);
	uv_signal_init(&c.loop, &c.sigint);
	c.sigterm.data = c.sigint.data = &c;
	uv_signal_start(&c.sigterm, on_signal, SIGTERM);
	uv_signal_start(&c.sigint, on_signal, SIGINT);
	/* Ready once it serves, not once a leader is known: a quorum's first
	 * voters start one by one, and a unit waiting for an election that needs
	 * the next voter would hold that voter's start back. */
	/* GET /ready answers 200 at the same moment. */
	__atomic_store_n(&c.metrics.ready, 1, __ATOMIC_RELEASE);
	sluice_sdnotify_send("READY=1");
	uv_run(&c.loop, UV_RUN_DEFAULT);
	/* The admin listener reads nothing of the server's, only c.metrics,
	 * but it stops first so that no scrape sees a process half gone. */
	sluice_http_stop(c.admin);
	c.admin = NULL;
	sluice_ctl_server_free(c.server);
	rc = uv_loop_close(&c.loop);
	SLOG_INFO("controller", "stopped%s", rc < 0 ? " (some handle was left open)" : "");
	return 0;
}
