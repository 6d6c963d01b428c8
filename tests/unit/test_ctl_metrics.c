/* The sluice-controller's admin listener pieces, alone: its
 * sluice.admin.listener key is parsed as the broker's (off when unset;
 * host:port; refusals naming the key) by sluice_controller_config_finish,
 * and the Prometheus text of published values (control/ctl_metrics.c) has
 * exactly one role at 1, the apply lag as commit - applied, the broker
 * counts by state and one request counter per ApiKey served. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include "control/ctl_config.h"
#include "control/ctl_metrics.h"

static int finish(struct sluice_controller_config *cfg, const char *admin, char *err, size_t errlen)
{
	static const char *const keys[][2] = {
		{"process.roles", "controller"},
		{"node.id", "1"},
		{"controller.quorum.voters", "1@127.0.0.1:9093"},
		{"listeners", "CONTROLLER://127.0.0.1:9093"},
		{"metadata.log.dir", "/tmp/sluice-test-ctl-metrics"},
		{"cluster.id", "test"},
	};
	sluice_controller_config_defaults(cfg);
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
		cr_assert_eq(sluice_controller_config_set(cfg, keys[i][0], keys[i][1], err, errlen), 0, "%s", err);
	cr_assert_eq(sluice_controller_config_set(cfg, "sluice.admin.listener", admin, err, errlen), 0, "%s", err);
	return sluice_controller_config_finish(cfg, err, errlen);
}

Test(ctl_metrics, admin_listener_parsed_or_refused_naming_the_key)
{
	static struct sluice_controller_config cfg;
	char err[256];
	cr_assert_eq(finish(&cfg, "", err, sizeof err), 0, "%s", err);
	cr_assert_eq(cfg.admin_port, 0, "unset: off");
	cr_assert_eq(finish(&cfg, "127.0.0.1:9645", err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(cfg.admin_host, "127.0.0.1");
	cr_assert_eq(cfg.admin_port, 9645);
	cr_assert_eq(finish(&cfg, "[::1]:1", err, sizeof err), 0, "%s", err);
	cr_assert_str_eq(cfg.admin_host, "::1");
	const char *bad[] = {"127.0.0.1", "127.0.0.1:", ":9644", "127.0.0.1:0", "127.0.0.1:65536", "h:12x",
			     "CONTROLLER://127.0.0.1:9644", "h:99999999999999999999"};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		err[0] = '\0';
		cr_assert_eq(finish(&cfg, bad[i], err, sizeof err), -1, "%s accepted", bad[i]);
		cr_assert(strstr(err, "sluice.admin.listener"), "%s: %s", bad[i], err);
	}
}

static const char *api_name(int16_t key)
{
	return key == 1 ? "Fetch" : key == 63 ? "BrokerHeartbeat" : NULL;
}

Test(ctl_metrics, text_of_published_values)
{
	static struct sluice_ctl_metrics m;
	m.ready = 1;
	m.role = SLUICE_CTL_ROLE_LEADER;
	m.leader_id = 2;
	m.term = 7;
	m.commit_index = 40;
	m.applied_index = 37;
	m.last_index = 41;
	m.metadata_offset = 30;
	m.brokers_registered = 3;
	m.brokers_fenced = 1;
	m.api_name = api_name;
	sluice_ctl_metrics_request(&m, 63);
	sluice_ctl_metrics_request(&m, 63);
	sluice_ctl_metrics_request(&m, 1);
	sluice_ctl_metrics_request(&m, -1); /* ignored, as any key out of the table */
	sluice_ctl_metrics_request(&m, SLUICE_CTL_METRICS_API_KEYS);
	struct sluice_prom w;
	sluice_prom_init(&w, SLUICE_CTL_METRICS_TEXT_BYTES_MAX);
	sluice_ctl_metrics_write(&m, &w);
	cr_assert(!w.err);
	const char *want[] = {
		"sluice_controller_ready 1\n",
		"sluice_controller_role{role=\"unavailable\"} 0\n",
		"sluice_controller_role{role=\"follower\"} 0\n",
		"sluice_controller_role{role=\"candidate\"} 0\n",
		"sluice_controller_role{role=\"leader\"} 1\n",
		"sluice_controller_leader_id 2\n",
		"sluice_controller_term 7\n",
		"sluice_controller_commit_index 40\n",
		"sluice_controller_applied_index 37\n",
		"sluice_controller_apply_lag 3\n",
		"sluice_controller_last_index 41\n",
		"sluice_controller_metadata_offset 30\n",
		"sluice_controller_brokers{state=\"registered\"} 3\n",
		"sluice_controller_brokers{state=\"fenced\"} 1\n",
		"sluice_controller_requests_total{api=\"Fetch\"} 1\n",
		"sluice_controller_requests_total{api=\"BrokerHeartbeat\"} 2\n",
		"# TYPE sluice_controller_requests_total counter\n",
		"# TYPE sluice_controller_role gauge\n",
	};
	for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
		cr_assert(strstr(w.buf, want[i]), "missing %s in:\n%s", want[i], w.buf);
	sluice_prom_free(&w);

	/* Unknown leader, and applied past commit (a follower's commit is learnt late): no negative lag. */
	m.leader_id = -1;
	m.metadata_offset = -1;
	m.applied_index = 41;
	sluice_prom_init(&w, SLUICE_CTL_METRICS_TEXT_BYTES_MAX);
	sluice_ctl_metrics_write(&m, &w);
	cr_assert(!w.err);
	cr_assert(strstr(w.buf, "sluice_controller_leader_id -1\n"), "%s", w.buf);
	cr_assert(strstr(w.buf, "sluice_controller_metadata_offset -1\n"), "%s", w.buf);
	cr_assert(strstr(w.buf, "sluice_controller_apply_lag 0\n"), "%s", w.buf);
	sluice_prom_free(&w);
}
