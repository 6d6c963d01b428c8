/* Unit tests of the stack's packet codecs and ARP cache (dataplane/stack/
 * wire.c, arp.c). Placeholder until they land: the segment flags are the
 * wire's bits. */
#include "dataplane/stack/seg.h"
#include <criterion/criterion.h>

/* Proves the flag constants are TCP's header bits (RFC 9293 3.1). */
Test(stack_wire, flag_bits)
{
	cr_expect_eq(SLUICE_TCP_FIN | SLUICE_TCP_SYN | SLUICE_TCP_RST | SLUICE_TCP_PSH | SLUICE_TCP_ACK | SLUICE_TCP_URG,
		     0x3f);
}
