/* The TCP connection state machine of Sluice's own TCP/IP stack (issue
 * 14): RFC 9293 per connection, driven by parsed segments and the clock,
 * emitting segments and delivering bytes through callbacks; no packet
 * buffers, no DPDK. Placeholder until it lands. */
#include "dataplane/stack/seg.h"
_Static_assert(SLUICE_TCP_SYN == 0x02 && SLUICE_TCP_FIN == 0x01, "flag bits as on the wire");
