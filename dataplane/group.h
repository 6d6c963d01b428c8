/* The group coordinator (classic consumer-group protocol), run by storage
 * cores: a group lives on the storage core that owns its __consumer_offsets
 * partition (hash of the group id, as Kafka places it), so group state,
 * its durable records and its timers all sit on one thread with no locks.
 * Offsets and group metadata are written to that partition in Kafka's key
 * and value formats and read back when the partition is first used.
 * The storage core runs it as a service (sluice_group_service,
 * dataplane/service.h); the functions below are that service's ops, and
 * what the network core and the tests call directly. */
#ifndef SLUICE_GROUP_H
#define SLUICE_GROUP_H
#include "dataplane/core.h"
#include "dataplane/service.h"

#define SLUICE_OFFSETS_TOPIC "__consumer_offsets"

/* Kafka's placement: abs(Java String.hashCode(group)) % partitions. */
int32_t sluice_group_partition(const char *group, size_t len, int32_t partitions);
void sluice_group_handle(struct storecore *sc, struct partop *op);
void sluice_group_tick(struct storecore *sc, int64_t now_ms);
/* When the tick must run next at the latest (a join phase ends), or INT64_MAX. */
int64_t sluice_group_next_deadline(struct storecore *sc);
/* The records an op waited for were written (ok) or not: called by the
 * storage core just before it answers a group op it held. */
void sluice_group_written(struct storecore *sc, struct partop *op, bool ok);

#endif
