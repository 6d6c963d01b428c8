/* Unit tests of the stack's TCP state machine (dataplane/stack/tcp.c).
 * Placeholder until it lands: SACK blocks fit the option space. */
#include "dataplane/stack/seg.h"
#include <criterion/criterion.h>

/* Proves a segment has room for the SACK blocks 40 option bytes can hold
 * (RFC 2018: 2 + 8n bytes, n <= 4). */
Test(stack_tcp, sack_room)
{
	cr_expect_leq(2 + 8 * SLUICE_TCP_SACK_BLOCKS_MAX, 40);
}
