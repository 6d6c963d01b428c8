/* The ARP cache of Sluice's own TCP/IP stack (issue 14): one per lcore,
 * bounded, entries expiring, packets to an unresolved address queued
 * (bounded) until the reply comes. Placeholder until it lands. */
#include "dataplane/stack/seg.h"
_Static_assert(SLUICE_TCP_SACK_BLOCKS_MAX == 4, "40 option bytes hold 4 SACK blocks at most");
