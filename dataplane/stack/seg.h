/* What the layers of Sluice's own TCP/IP stack (the DPDK transport's,
 * issue 14) hand each other: a TCP segment with its IPv4 addresses and its
 * parsed options, independent of any packet buffer library. wire.c fills one
 * from a received packet (after checking every length and checksum) and
 * builds a packet from one; tcp.c's connection state machine consumes and
 * emits them. The payload is borrowed: valid only for the call it is passed
 * in. Addresses and ports are in host byte order. */
#ifndef SLUICE_STACK_SEG_H
#define SLUICE_STACK_SEG_H
#include <stdbool.h>
#include <stdint.h>

/* TCP header flags, as in the header's low byte. */
#define SLUICE_TCP_FIN 0x01
#define SLUICE_TCP_SYN 0x02
#define SLUICE_TCP_RST 0x04
#define SLUICE_TCP_PSH 0x08
#define SLUICE_TCP_ACK 0x10
#define SLUICE_TCP_URG 0x20

/* SACK blocks a segment carries at most (40 option bytes: 4 without
 * timestamps, 3 with them). */
#define SLUICE_TCP_SACK_BLOCKS_MAX 4

struct sluice_tcp_sack_block {
	uint32_t left, right; /* [left, right) in sequence space */
};

struct sluice_tcp_seg {
	uint32_t saddr, daddr; /* IPv4 */
	uint16_t sport, dport;
	uint32_t seq, ack;
	uint8_t flags;         /* SLUICE_TCP_* */
	uint16_t window;       /* as on the wire: not scaled */
	/* Options; what is absent says so. */
	uint16_t mss;          /* 0: absent */
	int8_t wscale;         /* -1: absent; else the shift, 0..14 */
	bool sack_permitted;
	bool has_ts;
	uint32_t ts_val, ts_ecr;
	uint8_t sack_n;
	struct sluice_tcp_sack_block sack[SLUICE_TCP_SACK_BLOCKS_MAX];
	const uint8_t *payload; /* borrowed, payload_len bytes */
	uint32_t payload_len;
};

#endif
