/* The follower fetcher (fetcher.c), a service of the storage core
 * (service.h): what the storage core tells it (which partitions follow
 * which leader at which epoch) and the completions of its socket
 * operations, which the core's io_uring reaps with its own. */
#ifndef SLUICE_FETCHER_H
#define SLUICE_FETCHER_H
#include "dataplane/core.h"
#include <stdint.h>

struct spart;
struct sluice_follow;

/* io_uring user_data of the fetcher's operations on its storage core's
 * ring: SLUICE_FETCHER_UD_MIN + SLUICE_FETCHER_UD_KINDS * connection slot +
 * kind (connect, send, receive). Below any pointer a log's completions
 * carry (storage/plog.h: the plog's address with a kind in the low bits),
 * above the core's own small values (0: ignored, 8: its eventfd). */
#define SLUICE_FETCHER_UD_MIN 16
#define SLUICE_FETCHER_UD_END 4096
#define SLUICE_FETCHER_UD_KINDS 4
/* Leader brokers one storage core fetches from at once (one connection each). */
#define SLUICE_FETCHER_LEADERS_MAX 256
_Static_assert(SLUICE_FETCHER_UD_MIN + SLUICE_FETCHER_LEADERS_MAX * SLUICE_FETCHER_UD_KINDS <= SLUICE_FETCHER_UD_END,
	       "every connection's user_data lies in the fetcher's range");

/* p (topic, partition: copied) follows leader at epoch from now on: called
 * whenever the storage core learns a new leader or leader epoch for it.
 * *f is p's follow state (NULL at first), owned by the fetcher; leader -1
 * (none yet): held until one is named. unfollow: p leads, or goes away
 * (*f becomes NULL; a request in flight naming it drops its answer). */
void sluice_fetcher_follow(struct storecore *sc, struct sluice_follow **f, struct spart *p, const char *topic,
			   int32_t partition, int32_t leader, int32_t epoch);
void sluice_fetcher_unfollow(struct storecore *sc, struct sluice_follow **f);
/* A completion with user_data ud in [SLUICE_FETCHER_UD_MIN, _END): only
 * recorded (it may be reaped inside a log's wait for its write); the
 * service's tick acts on it. */
void sluice_fetcher_complete(struct storecore *sc, uint64_t ud, int res);

#endif
