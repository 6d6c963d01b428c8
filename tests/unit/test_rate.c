/* The replication throttles' pieces, alone: the sliding-window byte rate
 * (common/rate.c) measured as Kafka's SimpleRate over SampledStat does, and
 * the throttled replica lists of a topic (control/topic_config.c) checked
 * and read as Kafka's ThrottledReplicaListValidator and ConfigHandler do. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include "common/kafka/errors.h"
#include "common/rate.h"
#include "control/topic_config.h"

Test(rate, at_least_one_window_then_the_time_since_the_oldest)
{
	struct sluice_rate r;
	sluice_rate_init(&r, 11, 1000);
	cr_assert_float_eq(sluice_rate_measure(&r, 5000), 0.0, 1e-9, "nothing recorded: 0");
	sluice_rate_record(&r, 1000000, 10000);
	/* 100 ms later: the elapsed time counts as one whole window. */
	cr_assert_float_eq(sluice_rate_measure(&r, 10100), 1000000.0, 1e-6);
	cr_assert(sluice_rate_exceeded(&r, 999999, 10100));
	cr_assert(!sluice_rate_exceeded(&r, 1000000, 10100), "at the bound is not above it");
	/* 4 s after the first record: 1 MB over 4 s. */
	cr_assert_float_eq(sluice_rate_measure(&r, 14000), 250000.0, 1e-6);
	sluice_rate_record(&r, 1000000, 14000);
	cr_assert_float_eq(sluice_rate_measure(&r, 15000), 400000.0, 1e-6, "2 MB over 5 s");
	cr_assert(!sluice_rate_exceeded(&r, INT64_MAX, 15000), "no quota: never exceeded");
	sluice_rate_fini(&r);
}

Test(rate, windows_older_than_the_samples_count_no_more)
{
	struct sluice_rate r;
	sluice_rate_init(&r, 3, 1000);
	sluice_rate_record(&r, 300, 0);
	sluice_rate_record(&r, 300, 1000);
	sluice_rate_record(&r, 300, 2000);
	cr_assert_float_eq(sluice_rate_measure(&r, 2500), 900 * 1000.0 / 2500, 1e-6);
	/* At 3000 the first window (started at 0) is 3 windows old: obsolete. */
	cr_assert_float_eq(sluice_rate_measure(&r, 3000), 600 * 1000.0 / 2000, 1e-6);
	/* A fourth window reuses the oldest slot. */
	sluice_rate_record(&r, 300, 3500);
	cr_assert_float_eq(sluice_rate_measure(&r, 3600), 900 * 1000.0 / 2600, 1e-6);
	/* Long silence: everything obsolete. */
	cr_assert_float_eq(sluice_rate_measure(&r, 60000), 0.0, 1e-9);
	sluice_rate_fini(&r);
}

static uint8_t mark(const char *v, int32_t broker, int32_t parts, int32_t p)
{
	uint8_t f[8];
	memset(f, 0, sizeof f);
	sluice_topic_throttled_mark(v, broker, parts, f, 2);
	return f[p];
}

Test(throttled_replicas, kafka_lists_are_read_for_this_broker)
{
	cr_assert_eq(mark("0:1,1:2, 2:1 ,3:3", 1, 4, 0), 2);
	cr_assert_eq(mark("0:1,1:2, 2:1 ,3:3", 1, 4, 1), 0);
	cr_assert_eq(mark("0:1,1:2, 2:1 ,3:3", 1, 4, 2), 2, "items are trimmed");
	cr_assert_eq(mark("0:1,1:2, 2:1 ,3:3", 3, 4, 3), 2);
	cr_assert_eq(mark("9:1", 1, 4, 0), 0, "a partition beyond the topic is ignored");
	cr_assert_eq(mark("*", 7, 4, 3), 2, "'*': every partition of every broker");
	cr_assert_eq(mark(" * ", 7, 4, 0), 2);
	cr_assert_eq(mark("", 1, 4, 0), 0);
	cr_assert_eq(mark("0:x", 1, 4, 0), 0, "an invalid list marks nothing");
}

Test(throttled_replicas, values_are_checked_as_kafka_does)
{
	char msg[300];
	const char *ok[] = {"", "*", "0:1", "0:1,1:2", " 0:1 , 1:2 ", "0:1,", ",0:1"};
	const char *bad[] = {"x", "0:", ":1", "0:1:2", "*,0:1", "**", "0-1", "0:1,*"};
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++)
		cr_assert_eq(sluice_topic_config_check(SLUICE_TOPIC_LEADER_THROTTLED, ok[i], msg, sizeof msg), 0, "'%s': %s",
			     ok[i], msg);
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
		cr_assert_eq(sluice_topic_config_check(SLUICE_TOPIC_FOLLOWER_THROTTLED, bad[i], msg, sizeof msg),
			     KERR_INVALID_CONFIG, "'%s' accepted", bad[i]);
	cr_assert(strstr(msg, "must be the literal '*' or a list of replicas in the following format: "
			      "[partitionId]:[brokerId],[partitionId]:[brokerId],..."), "%s", msg);
}
