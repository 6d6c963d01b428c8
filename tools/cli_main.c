/* `sluice`: the operator's command-line tool for a Sluice cluster. Today it
 * has one command, `cluster status`; this file only reads the command line
 * (Kafka's tool conventions: --bootstrap-server for brokers,
 * --bootstrap-controller for controllers, comma-separated lists tried in
 * turn) and hands over to cli_status.c. Exit status: 0 success, 1 the
 * cluster could not be asked or answered wrongly, 2 usage; --help prints the usage
 * text to stdout and exits 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

#define EXIT_USAGE 2
#define HELP_SHOWN (-1)

static const char usage_text[] =
	"usage: sluice --bootstrap-server HOST:PORT[,HOST:PORT...] cluster status [--json]\n"
	"       sluice --bootstrap-controller HOST:PORT[,HOST:PORT...] cluster status [--json]\n"
	"\n"
	"Options:\n"
	"  --bootstrap-server LIST      brokers to ask (tried in turn)\n"
	"  --bootstrap-controller LIST  controllers to ask (tried in turn)\n"
	"  --json                       machine-readable output\n"
	"  --timeout-ms MS              time-out of each connect and request (default 5000)\n"
	"  --help                       this text\n"
	"\n"
	"cluster status prints the controllers (id, role, last applied offset: the\n"
	"LogEndOffset DescribeQuorum reports for each voter), the brokers (id, endpoint,\n"
	"rack, fenced), and the counts of offline partitions (no leader) and\n"
	"under-replicated ones (fewer in-sync replicas than replicas). The brokers,\n"
	"fenced ones included, come from the controllers (DescribeCluster v2), whose\n"
	"endpoints DescribeQuorum gives; the partitions from a broker (Metadata).\n"
	"\n"
	"Exit status: 0 success; 1 nothing could be reached or an answer was an error\n"
	"or malformed; 2 usage.\n";

static int usage(const char *why)
{
	if (why)
		fprintf(stderr, "sluice: %s\n", why);
	fputs(usage_text, stderr);
	return EXIT_USAGE;
}

/* "HOST:PORT,HOST:PORT" into o->servers. */
static int parse_servers(const char *list, struct sluice_cli_options *o)
{
	for (const char *p = list;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		if (o->server_n >= SLUICE_CLI_SERVERS_MAX ||
		    sluice_cli_parse_endpoint(p, len, &o->servers[o->server_n]) < 0)
			return -1;
		o->server_n++;
		if (!comma)
			return 0;
		p = comma + 1;
	}
}

/* The value of --name VALUE or --name=VALUE; advances *i past it. */
static const char *option_value(int argc, char **argv, int *i, const char *name)
{
	size_t n = strlen(name);
	if (strncmp(argv[*i], name, n) != 0)
		return NULL;
	if (argv[*i][n] == '=')
		return argv[*i] + n + 1;
	if (argv[*i][n] != '\0' || *i + 1 >= argc)
		return NULL;
	return argv[++*i];
}

static int parse_timeout(const char *text, int *out)
{
	char *end;
	long v = strtol(text, &end, 10);
	if (end == text || *end || v < 1 || v > SLUICE_CLI_TIMEOUT_MS_MAX)
		return -1;
	*out = (int)v;
	return 0;
}

/* 0 parsed, HELP_SHOWN (exit 0), else the exit status to return. */
static int parse_args(int argc, char **argv, struct sluice_cli_options *o)
{
	const char *words[2] = {NULL, NULL};
	int word_n = 0, lists = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage_text, stdout);
			return HELP_SHOWN;
		}
		if (strcmp(a, "--json") == 0) {
			o->json = true;
		} else if ((v = option_value(argc, argv, &i, "--bootstrap-server")) ||
			   (v = option_value(argc, argv, &i, "--bootstrap-controller"))) {
			o->controllers = strncmp(a, "--bootstrap-controller", 22) == 0;
			if (++lists > 1)
				return usage("give one --bootstrap-server or --bootstrap-controller");
			if (parse_servers(v, o) < 0)
				return usage("a server list is HOST:PORT[,HOST:PORT...] (at most 16)");
		} else if ((v = option_value(argc, argv, &i, "--timeout-ms"))) {
			if (parse_timeout(v, &o->timeout_ms) < 0)
				return usage("--timeout-ms takes 1..600000");
		} else if (a[0] == '-') {
			fprintf(stderr, "sluice: unknown option or missing value: %s\n", a);
			return usage(NULL);
		} else if (word_n < 2) {
			words[word_n++] = a;
		} else {
			return usage("too many words: the command is `cluster status`");
		}
	}
	if (word_n != 2 || strcmp(words[0], "cluster") != 0 || strcmp(words[1], "status") != 0)
		return usage("the command is `cluster status`");
	if (lists == 0)
		return usage("--bootstrap-server or --bootstrap-controller is required");
	return 0;
}

int main(int argc, char **argv)
{
	struct sluice_cli_options o;
	memset(&o, 0, sizeof o);
	o.timeout_ms = SLUICE_CLI_TIMEOUT_MS_DEFAULT;
	int rc = parse_args(argc, argv, &o);
	if (rc == HELP_SHOWN)
		return 0;
	if (rc != 0)
		return rc;
	return sluice_cli_cluster_status(&o, stdout, stderr);
}
