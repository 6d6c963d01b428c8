/* Packet codecs of Sluice's own TCP/IP stack (issue 14): Ethernet, ARP,
 * IPv4, ICMP echo and TCP headers with their checksums, parsed from and
 * built into plain byte buffers (the DPDK layer hands mbuf data to them).
 * Placeholder until the codecs land. */
#include "dataplane/stack/seg.h"
_Static_assert(SLUICE_TCP_ACK == 0x10, "flag bits as on the wire");
