/* `sluice`: the operator's command-line tool for a Sluice cluster (and for
 * Apache Kafka 4.x, whose protocol it speaks). This file reads the command
 * line (Kafka's tool conventions: --bootstrap-server for brokers,
 * --bootstrap-controller for controllers, comma-separated lists tried in
 * turn; `GROUP COMMAND [ARGS]` words, options anywhere after the group) and
 * hands over to cli_status.c (cluster status), cli_admin.c (logger,
 * topic) or cli_group.c (group). Exit status, the same for every command: 0 success, 1 a refusal
 * or error from the server (or a malformed answer), 2 usage, 3 no server
 * could be connected to; --help prints the usage text to stdout and exits
 * 0 (`sluice topic --help`: the topic commands' own). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/cli.h"

#define HELP_SHOWN (-1)

static const char common_options[] =
	"Options of every command:\n"
	"  --bootstrap-server LIST      brokers to ask, HOST:PORT[,HOST:PORT...] (tried in turn)\n"
	"  --bootstrap-controller LIST  controllers to ask (cluster status only)\n"
	"  --json                       one JSON document on stdout\n"
	"  --timeout-ms MS              time-out of each connect and request (default 5000)\n"
	"  --help                       this text\n"
	"\n"
	"Exit status: 0 success; 1 a refusal or error from the server (its Kafka error name\n"
	"and message on stderr) or a malformed answer; 2 usage; 3 no server of the list could\n"
	"be connected to.\n";

static const char usage_text[] =
	"usage: sluice --bootstrap-server HOST:PORT[,...] COMMAND [ARGS] [--json]\n"
	"\n"
	"Commands:\n"
	"  cluster status                controllers, brokers, offline and under-replicated partitions\n"
	"  logger [NAME [LEVEL]]         a broker's loggers and their levels; set one; --delete\n"
	"  topic list|describe|create|delete|alter-config ...\n"
	"  group list|describe|lag ...   consumer groups, members, committed offsets and lag\n"
	"\n"
	"`sluice cluster --help`, `sluice logger --help`, `sluice topic --help`,\n"
	"`sluice group --help`: each command's own.\n"
	"\n";

static const char cluster_usage[] =
	"usage: sluice --bootstrap-server HOST:PORT[,HOST:PORT...] cluster status [--json]\n"
	"       sluice --bootstrap-controller HOST:PORT[,HOST:PORT...] cluster status [--json]\n"
	"\n"
	"cluster status prints the controllers (id, role, last applied offset: the\n"
	"LogEndOffset DescribeQuorum reports for each voter), the brokers (id, endpoint,\n"
	"rack, fenced), and the counts of offline partitions (no leader) and\n"
	"under-replicated ones (fewer in-sync replicas than replicas). The brokers,\n"
	"fenced ones included, come from the controllers (DescribeCluster v2), whose\n"
	"endpoints DescribeQuorum gives; the partitions from a broker (Metadata).\n"
	"\n";

static const char logger_usage[] =
	"usage: sluice --bootstrap-server HOST:PORT logger [--broker-id N] [--json]\n"
	"       sluice --bootstrap-server HOST:PORT logger NAME [--json]\n"
	"       sluice --bootstrap-server HOST:PORT logger NAME LEVEL [--json]\n"
	"       sluice --bootstrap-server HOST:PORT logger NAME --delete [--json]\n"
	"\n"
	"The loggers of the broker connected to and their levels (DescribeConfigs of its\n"
	"BROKER_LOGGER resource); NAME alone: that one; NAME LEVEL sets it (ERROR, WARN,\n"
	"INFO, DEBUG, TRACE; IncrementalAlterConfigs); --delete gives it the inherited\n"
	"(root) level again. The broker's id is found in Metadata by the endpoint\n"
	"connected to; --broker-id N names it instead.\n"
	"\n";

static const char topic_usage[] =
	"usage: sluice --bootstrap-server HOST:PORT topic list [--json]\n"
	"       sluice --bootstrap-server HOST:PORT topic describe TOPIC [--json]\n"
	"       sluice --bootstrap-server HOST:PORT topic create TOPIC [--partitions N]\n"
	"              [--replication-factor R] [--config KEY=VALUE ...] [--json]\n"
	"       sluice --bootstrap-server HOST:PORT topic delete TOPIC [--json]\n"
	"       sluice --bootstrap-server HOST:PORT topic alter-config TOPIC\n"
	"              (--set KEY=VALUE | --delete KEY) ... [--json]\n"
	"\n"
	"list: every topic's name, internal ones included, sorted. describe: partitions,\n"
	"leader, replicas and in-sync replicas as kafka-topics --describe prints them, and\n"
	"the topic's configs that are not defaults. create: --partitions and\n"
	"--replication-factor default to the broker's num.partitions and\n"
	"default.replication.factor. alter-config: the changes are applied together.\n"
	"\n";

static const char group_usage[] =
	"usage: sluice --bootstrap-server HOST:PORT group list [--json]\n"
	"       sluice --bootstrap-server HOST:PORT group describe GROUP [--json]\n"
	"       sluice --bootstrap-server HOST:PORT group lag GROUP [--json]\n"
	"\n"
	"list: every consumer group of every broker (ListGroups), sorted. describe: the\n"
	"group's state, protocol, coordinator and members with their assignments\n"
	"(DescribeGroups of the coordinator). lag: per partition, the committed offset, the\n"
	"log end offset and their difference, and the member that owns the partition, as\n"
	"kafka-consumer-groups --describe prints them.\n"
	"\n";

struct group {
	const char *name;
	const char *usage;
};
static const struct group groups[] = {
	{"cluster", cluster_usage},
	{"logger", logger_usage},
	{"topic", topic_usage},
	{"group", group_usage},
};
#define GROUPS_N (sizeof groups / sizeof *groups)

static const char *usage_of(const char *group)
{
	for (size_t i = 0; group && i < GROUPS_N; i++)
		if (strcmp(group, groups[i].name) == 0)
			return groups[i].usage;
	return usage_text;
}

static int usage(const struct sluice_cli_options *o, const char *why)
{
	if (why)
		fprintf(stderr, "sluice: %s\n", why);
	fputs(usage_of(o->word_n > 0 ? o->words[0] : NULL), stderr);
	fputs(common_options, stderr);
	return SLUICE_CLI_EXIT_USAGE;
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

static int parse_int(const char *text, long lo, long hi, long *out)
{
	char *end;
	long v = strtol(text, &end, 10);
	if (end == text || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* KEY=VALUE with a key of 1..255 bytes. */
static bool key_value(const char *text)
{
	const char *eq = strchr(text, '=');
	return eq && eq > text && (size_t)(eq - text) < SLUICE_CLI_TOPIC_NAME_MAX;
}

/* --set KEY=VALUE / --delete KEY of topic alter-config. */
static int add_alter(struct sluice_cli_options *o, const char *text, int8_t op)
{
	if (o->alter_n >= SLUICE_CLI_CONFIG_ARGS_MAX)
		return usage(o, "at most 64 --set/--delete");
	struct sluice_cli_alter *a = &o->alters[o->alter_n];
	if (op == SLUICE_CLI_OP_DELETE) {
		if (!text[0] || strchr(text, '='))
			return usage(o, "--delete takes a config name");
		*a = (struct sluice_cli_alter){text, NULL, op};
	} else {
		if (!key_value(text))
			return usage(o, "--set takes KEY=VALUE");
		const char *eq = strchr(text, '=');
		char *key = o->alter_keys[o->alter_n];
		snprintf(key, SLUICE_CLI_TOPIC_NAME_MAX, "%.*s", (int)(eq - text), text);
		*a = (struct sluice_cli_alter){key, eq + 1, op};
	}
	o->alter_n++;
	return 0;
}

/* The options of the commands; 1 taken, 0 not one of them, else the exit status. */
static int command_option(int argc, char **argv, int *i, struct sluice_cli_options *o)
{
	const char *a = argv[*i], *v;
	const char *group = o->word_n > 0 ? o->words[0] : "";
	long n;
	if ((v = option_value(argc, argv, i, "--broker-id"))) {
		if (parse_int(v, 0, INT32_MAX, &n) < 0)
			return usage(o, "--broker-id takes a broker id (0 or more)");
		o->broker_id = (int32_t)n;
	} else if ((v = option_value(argc, argv, i, "--partitions"))) {
		if (parse_int(v, 1, 1000000, &n) < 0)
			return usage(o, "--partitions takes 1..1000000");
		o->partitions = (int32_t)n;
	} else if ((v = option_value(argc, argv, i, "--replication-factor"))) {
		if (parse_int(v, 1, INT16_MAX, &n) < 0)
			return usage(o, "--replication-factor takes 1..32767");
		o->replication_factor = (int16_t)n;
	} else if ((v = option_value(argc, argv, i, "--config"))) {
		if (o->config_n >= SLUICE_CLI_CONFIG_ARGS_MAX || !key_value(v))
			return usage(o, "--config takes KEY=VALUE (at most 64)");
		o->configs[o->config_n++] = v;
	} else if ((v = option_value(argc, argv, i, "--set"))) {
		int rc = add_alter(o, v, SLUICE_CLI_OP_SET);
		return rc ? rc : 1;
	} else if (strcmp(a, "--delete") == 0 && strcmp(group, "logger") == 0) {
		o->delete_flag = true;
	} else if (strcmp(group, "topic") == 0 && (v = option_value(argc, argv, i, "--delete"))) {
		int rc = add_alter(o, v, SLUICE_CLI_OP_DELETE);
		return rc ? rc : 1;
	} else {
		return 0;
	}
	return 1;
}

/* The group of the first word on the command line, for --help. */
static const char *help_group(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		for (size_t g = 0; g < GROUPS_N; g++)
			if (strcmp(argv[i], groups[g].name) == 0)
				return argv[i];
	return NULL;
}

/* 0 parsed, HELP_SHOWN (exit 0), else the exit status to return. */
static int parse_args(int argc, char **argv, struct sluice_cli_options *o)
{
	int lists = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			fputs(usage_of(help_group(argc, argv)), stdout);
			fputs(common_options, stdout);
			return HELP_SHOWN;
		}
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v;
		int rc;
		if (strcmp(a, "--json") == 0) {
			o->json = true;
		} else if ((v = option_value(argc, argv, &i, "--bootstrap-server")) ||
			   (v = option_value(argc, argv, &i, "--bootstrap-controller"))) {
			o->controllers = strncmp(a, "--bootstrap-controller", 22) == 0;
			if (++lists > 1)
				return usage(o, "give one --bootstrap-server or --bootstrap-controller");
			if (parse_servers(v, o) < 0)
				return usage(o, "a server list is HOST:PORT[,HOST:PORT...] (at most 16)");
		} else if ((v = option_value(argc, argv, &i, "--timeout-ms"))) {
			long ms;
			if (parse_int(v, 1, SLUICE_CLI_TIMEOUT_MS_MAX, &ms) < 0)
				return usage(o, "--timeout-ms takes 1..600000");
			o->timeout_ms = (int)ms;
		} else if (a[0] == '-' && a[1] != '\0' && (rc = command_option(argc, argv, &i, o)) != 0) {
			if (rc != 1)
				return rc;
		} else if (a[0] == '-' && a[1] != '\0') {
			fprintf(stderr, "sluice: unknown option or missing value: %s\n", a);
			return usage(o, NULL);
		} else if (o->word_n < SLUICE_CLI_WORDS_MAX) {
			o->words[o->word_n++] = a;
		} else {
			return usage(o, "too many words");
		}
	}
	if (lists == 0)
		return usage(o, "--bootstrap-server or --bootstrap-controller is required");
	return 0;
}

static bool word_is(const struct sluice_cli_options *o, int i, const char *w)
{
	return o->word_n > i && strcmp(o->words[i], w) == 0;
}

/* Which command, with its words and options checked; NULL with the exit
 * status in *rc on a usage error. */
typedef int (*command_fn)(const struct sluice_cli_options *o, FILE *out, FILE *errout);
static command_fn pick_command(const struct sluice_cli_options *o, int *rc)
{
	bool topic_opts = o->partitions >= 0 || o->replication_factor >= 0 || o->config_n > 0;
	bool any_opts = topic_opts || o->alter_n > 0 || o->delete_flag || o->broker_id >= 0;
	*rc = SLUICE_CLI_EXIT_USAGE;
	if (word_is(o, 0, "cluster")) {
		if (o->word_n != 2 || !word_is(o, 1, "status") || any_opts)
			return usage(o, "the command is `cluster status`"), NULL;
		return sluice_cli_cluster_status;
	}
	if (o->controllers)
		return usage(o, "only `cluster status` takes --bootstrap-controller"), NULL;
	if (word_is(o, 0, "logger")) {
		if (o->word_n > 3 || topic_opts || o->alter_n > 0 || (o->delete_flag && o->word_n != 2))
			return usage(o, "logger [NAME [LEVEL]] or logger NAME --delete"), NULL;
		return sluice_cli_logger;
	}
	if (word_is(o, 0, "group")) {
		bool list = word_is(o, 1, "list"), named = word_is(o, 1, "describe") || word_is(o, 1, "lag");
		if ((!list && !named) || any_opts)
			return usage(o, "group list|describe|lag"), NULL;
		if (o->word_n != (list ? 2 : 3) || (named && !o->words[2][0]))
			return usage(o, list ? "group list takes no argument" : "name one group"), NULL;
		return sluice_cli_group;
	}
	if (!word_is(o, 0, "topic"))
		return usage(o, o->word_n ? "unknown command" : "no command"), NULL;
	bool list = word_is(o, 1, "list"), create = word_is(o, 1, "create"), alter = word_is(o, 1, "alter-config");
	bool named = word_is(o, 1, "describe") || word_is(o, 1, "delete") || create || alter;
	if (!list && !named)
		return usage(o, "topic list|describe|create|delete|alter-config"), NULL;
	if (o->word_n != (list ? 2 : 3))
		return usage(o, list ? "topic list takes no argument" : "name one topic"), NULL;
	if ((topic_opts && !create) || (o->alter_n > 0) != alter || o->broker_id >= 0)
		return usage(o, alter ? "alter-config takes --set KEY=VALUE or --delete KEY"
				      : "an option of another command"),
		       NULL;
	if (named && !o->words[2][0])
		return usage(o, "a topic name is not empty"), NULL;
	return sluice_cli_topic;
}

int main(int argc, char **argv)
{
	static struct sluice_cli_options o; /* large (the --set keys): not on the stack */
	memset(&o, 0, sizeof o);
	o.timeout_ms = SLUICE_CLI_TIMEOUT_MS_DEFAULT;
	o.broker_id = -1;
	o.partitions = -1;
	o.replication_factor = -1;
	int rc = parse_args(argc, argv, &o);
	if (rc == HELP_SHOWN)
		return SLUICE_CLI_EXIT_OK;
	if (rc != 0)
		return rc;
	command_fn run = pick_command(&o, &rc);
	return run ? run(&o, stdout, stderr) : rc;
}
