/* Packet codecs of Sluice's own TCP/IP stack (the DPDK transport's, issue
 * 14): the Internet checksum, Ethernet II, ARP for IPv4, IPv4, ICMP echo
 * and TCP headers, parsed from and built into plain byte buffers, so that
 * the DPDK layer hands them mbuf data and the tests and fuzzers hand them
 * arrays. Every decoder checks each length against the bytes left before
 * reading, nothing allocates, and what a decoder refuses is named by one
 * reason (enum sluice_wire_reason) that the receive path counts. Builders
 * return the bytes written, or 0 when the buffer is too small: they never
 * write past cap. Multi-byte fields in the structs are in host byte order;
 * MAC addresses are byte arrays as on the wire.
 * Limits, on purpose: no VLAN tags (a tagged frame is refused, not
 * misparsed), no IPv4 reassembly (a fragment is reported as such and the
 * caller drops it: Sluice's peers send DF segments sized by MSS), no IP
 * options on transmit. */
#ifndef SLUICE_STACK_WIRE_H
#define SLUICE_STACK_WIRE_H
#include "dataplane/stack/seg.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_ETH_ADDR_LEN 6
#define SLUICE_ETH_HDR_LEN 14
#define SLUICE_ETH_FRAME_MIN 60 /* without the FCS: shorter frames are padded */
#define SLUICE_ETHERTYPE_IPV4 0x0800
#define SLUICE_ETHERTYPE_ARP 0x0806
#define SLUICE_ETHERTYPE_VLAN 0x8100 /* 802.1Q */
#define SLUICE_ETHERTYPE_QINQ 0x88a8 /* 802.1ad */
#define SLUICE_ETHERTYPE_QINQ_OLD 0x9100

#define SLUICE_ARP_LEN 28 /* the ARP message for IPv4 over Ethernet */
#define SLUICE_ARP_OP_REQUEST 1
#define SLUICE_ARP_OP_REPLY 2

#define SLUICE_IPV4_HDR_LEN 20     /* without options: what is built */
#define SLUICE_IPV4_HDR_LEN_MAX 60 /* IHL 15 */
#define SLUICE_IPV4_TOTAL_LEN_MAX 65535
#define SLUICE_IPPROTO_ICMP 1
#define SLUICE_IPPROTO_TCP 6
#define SLUICE_IPV4_TTL_DEFAULT 64

#define SLUICE_ICMP_ECHO_HDR_LEN 8
#define SLUICE_ICMP_ECHO_REQUEST 8
#define SLUICE_ICMP_ECHO_REPLY 0

#define SLUICE_TCP_HDR_LEN 20
#define SLUICE_TCP_HDR_LEN_MAX 60 /* data offset 15 */
#define SLUICE_TCP_OPTIONS_LEN_MAX (SLUICE_TCP_HDR_LEN_MAX - SLUICE_TCP_HDR_LEN)
#define SLUICE_TCP_WSCALE_MAX 14 /* RFC 7323 2.3: larger shifts are taken as 14 */

/* The largest frame the whole-frame builders are asked for: Ethernet,
 * IPv4 and TCP headers with every option, and a payload. */
#define SLUICE_WIRE_HEADERS_LEN_MAX (SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN + SLUICE_TCP_HDR_LEN_MAX)

_Static_assert(SLUICE_ETH_HDR_LEN + SLUICE_ARP_LEN <= SLUICE_ETH_FRAME_MIN, "an ARP frame is padded to the minimum");
_Static_assert(SLUICE_TCP_OPTIONS_LEN_MAX == 40, "data offset is 4 bits of 32-bit words");
_Static_assert(2 + 8 * SLUICE_TCP_SACK_BLOCKS_MAX <= SLUICE_TCP_OPTIONS_LEN_MAX &&
		       2 + 8 * (SLUICE_TCP_SACK_BLOCKS_MAX + 1) > SLUICE_TCP_OPTIONS_LEN_MAX,
	       "seg.h keeps exactly the SACK blocks an option area can hold");

/* Why a decoder refused bytes; SLUICE_WIRE_OK when it did not. The receive
 * path counts drops per reason (sluice_wire_reason_name for logs). */
enum sluice_wire_reason {
	SLUICE_WIRE_OK = 0,
	SLUICE_WIRE_SHORT,          /* fewer bytes than a header or a length field requires */
	SLUICE_WIRE_VLAN,           /* a VLAN-tagged frame (802.1Q, 802.1ad): not supported */
	SLUICE_WIRE_ETHERTYPE,      /* neither IPv4 nor ARP (IPv6, LLDP, an 802.3 length, ...) */
	SLUICE_WIRE_ARP_FORMAT,     /* not IPv4-over-Ethernet ARP, or an op other than request/reply */
	SLUICE_WIRE_IP_VERSION,     /* version field not 4 */
	SLUICE_WIRE_IP_HEADER_LEN,  /* IHL below 5 */
	SLUICE_WIRE_IP_TOTAL_LEN,   /* total length below the header's */
	SLUICE_WIRE_IP_CHECKSUM,
	SLUICE_WIRE_FRAGMENT,       /* MF set or a fragment offset: no reassembly */
	SLUICE_WIRE_PROTOCOL,       /* an IP protocol other than ICMP and TCP */
	SLUICE_WIRE_ICMP_TYPE,      /* ICMP other than an echo request */
	SLUICE_WIRE_ICMP_CHECKSUM,
	SLUICE_WIRE_TCP_OFFSET,     /* data offset below 5 or past the segment */
	SLUICE_WIRE_TCP_CHECKSUM,
	SLUICE_WIRE_TCP_OPTION,     /* an option length of 0 or 1, past the header, or wrong for its kind */
	SLUICE_WIRE_TCP_ADDRESS,    /* TCP from or to a multicast or broadcast address (RFC 1122 4.2.3.10) */
	SLUICE_WIRE_REASONS         /* how many: size of a counter array */
};

const char *sluice_wire_reason_name(enum sluice_wire_reason r);

struct sluice_eth_addr {
	uint8_t b[SLUICE_ETH_ADDR_LEN];
};

/* Whether a MAC is a group (multicast or broadcast) address: never a
 * neighbour's. */
static inline bool sluice_eth_addr_is_group(const struct sluice_eth_addr *a)
{
	return (a->b[0] & 1) != 0;
}

/* --- The Internet checksum (RFC 1071) --------------------------------------
 * A running sum over several pieces (pseudo-header, header, payload) of any
 * lengths, odd ones included: a piece that ends mid-word is continued by the
 * next. finish gives the value to store in a checksum field (host order);
 * over bytes that include a correct checksum field it gives 0. */
struct sluice_wire_csum {
	uint64_t sum;
	bool odd; /* the pieces so far end in the high byte of a 16-bit word */
};

void sluice_wire_csum_init(struct sluice_wire_csum *c);
void sluice_wire_csum_add(struct sluice_wire_csum *c, const uint8_t *p, size_t len);
/* The IPv4 pseudo-header of TCP and UDP (addresses host order, len the
 * transport header plus payload). Add it first, or any time the pieces so
 * far end on a 16-bit boundary. */
void sluice_wire_csum_add_pseudo(struct sluice_wire_csum *c, uint32_t saddr, uint32_t daddr, uint8_t protocol,
				 uint16_t len);
uint16_t sluice_wire_csum_finish(const struct sluice_wire_csum *c);
/* One piece: init, add, finish. */
uint16_t sluice_wire_csum(const uint8_t *p, size_t len);
/* Incremental update (RFC 1624 eqn. 3): the checksum field's new value
 * after one 16-bit word covered by it changed from old_word to new_word.
 * Exact, except that when every word covered becomes zero it gives 0000
 * where a full sum gives ffff (the arithmetic cannot reach +0 from non-zero
 * terms); where that can happen (not in an IPv4 header, whose first word is
 * never zero), treat a result of 0 as "recompute". */
uint16_t sluice_wire_csum_adjust(uint16_t csum, uint16_t old_word, uint16_t new_word);

/* --- Ethernet II ----------------------------------------------------------- */
struct sluice_eth_hdr {
	struct sluice_eth_addr dst, src;
	uint16_t ethertype;
};

/* Refuses a short frame (SHORT) and a VLAN tag (VLAN); any other ethertype
 * is reported for the caller to judge. */
enum sluice_wire_reason sluice_wire_eth_parse(const uint8_t *p, size_t len, struct sluice_eth_hdr *out);
size_t sluice_wire_eth_build(uint8_t *p, size_t cap, const struct sluice_eth_hdr *h);

/* --- ARP for IPv4 over Ethernet (RFC 826) --------------------------------- */
struct sluice_arp_pkt {
	uint16_t op; /* SLUICE_ARP_OP_* */
	struct sluice_eth_addr sha, tha;
	uint32_t spa, tpa;
};

/* p is the ARP message (after the Ethernet header); bytes past its 28 are
 * padding and ignored. */
enum sluice_wire_reason sluice_wire_arp_parse(const uint8_t *p, size_t len, struct sluice_arp_pkt *out);
size_t sluice_wire_arp_build(uint8_t *p, size_t cap, const struct sluice_arp_pkt *a);
/* Whole frames, padded with zeros to SLUICE_ETH_FRAME_MIN (some NICs do
 * not pad): a request for target_ip from (own_mac, own_ip), to dst or, if
 * dst is NULL, broadcast; and the reply to a request (to its sender). */
size_t sluice_wire_arp_frame_request(uint8_t *frame, size_t cap, const struct sluice_eth_addr *own_mac, uint32_t own_ip,
				     uint32_t target_ip, const struct sluice_eth_addr *dst);
size_t sluice_wire_arp_frame_reply(uint8_t *frame, size_t cap, const struct sluice_eth_addr *own_mac, uint32_t own_ip,
				   const struct sluice_arp_pkt *request);

/* --- IPv4 (RFC 791) -------------------------------------------------------- */
struct sluice_ipv4_hdr {
	uint8_t hdr_len;      /* IHL * 4 */
	uint8_t tos;
	uint16_t total_len;
	uint16_t id;
	bool df;
	bool fragment;        /* MF set or offset != 0 (parse: then FRAGMENT) */
	uint8_t ttl;
	uint8_t protocol;
	uint32_t saddr, daddr;
	const uint8_t *payload; /* borrowed: total_len - hdr_len bytes */
	uint16_t payload_len;
};

/* Checks version 4, IHL >= 5 and within len, total length between the
 * header's and len (bytes past it, such as Ethernet padding, are ignored)
 * and the header checksum. A fragment is refused with FRAGMENT after out is
 * filled, so the caller may count it; there is no reassembly. */
enum sluice_wire_reason sluice_wire_ipv4_parse(const uint8_t *p, size_t len, struct sluice_ipv4_hdr *out);
/* A 20-byte header (no options, DF set, not a fragment) with its checksum,
 * from h's tos, id, ttl, protocol, saddr, daddr and payload_len; 0 when cap
 * is under 20 or the total length would pass 65535. */
size_t sluice_wire_ipv4_build(uint8_t *p, size_t cap, const struct sluice_ipv4_hdr *h);

static inline bool sluice_ipv4_is_group(uint32_t addr)
{
	return (addr & 0xf0000000u) == 0xe0000000u || addr == 0xffffffffu;
}

/* --- ICMP echo (RFC 792) -------------------------------------------------- */
struct sluice_icmp_echo {
	uint16_t id, seq;
	const uint8_t *data; /* borrowed */
	size_t data_len;
};

/* p is the whole ICMP message (the IPv4 payload). Refuses anything but an
 * echo request (type 8, code 0: ICMP_TYPE) and a bad checksum. */
enum sluice_wire_reason sluice_wire_icmp_echo_parse(const uint8_t *p, size_t len, struct sluice_icmp_echo *out);
/* Turns the echo request msg (len bytes, accepted by the parser) into its
 * reply in place: type 0, checksum adjusted incrementally. */
void sluice_wire_icmp_echo_reply_in_place(uint8_t *msg, size_t len);

/* --- TCP (RFC 9293, options RFC 7323 and RFC 2018) ------------------------ */

/* p is the whole segment (the IPv4 payload, len bytes), saddr/daddr the
 * IPv4 addresses for the pseudo-header. Checks data offset >= 5 and within
 * len, the checksum, and every option; fills out with the payload borrowed
 * from p. len must be at most 65515 (what an IPv4 packet can carry). */
enum sluice_wire_reason sluice_wire_tcp_parse(const uint8_t *p, size_t len, uint32_t saddr, uint32_t daddr,
					      struct sluice_tcp_seg *out);
/* The option area alone (len bytes after the fixed header): sets out's mss,
 * wscale, sack_permitted, ts and sack fields (absent ones to their "absent"
 * values). EOL ends the list, NOP is skipped, unknown kinds are skipped by
 * their length; a length of 0 or 1, one running past len, or a known
 * kind's wrong length (SACK: 2 + 8n with n of 1..4) refuses the segment.
 * A later duplicate overrides an earlier one; a wscale above 14 is 14. */
enum sluice_wire_reason sluice_wire_tcp_options_parse(const uint8_t *p, size_t len, struct sluice_tcp_seg *out);
/* The option bytes s asks for, padded to 4: MSS (if s->mss, on a SYN),
 * SACK-permitted and window scale (if asked, on a SYN), timestamps (if
 * s->has_ts) and s->sack_n SACK blocks. More than
 * SLUICE_TCP_OPTIONS_LEN_MAX means s asks for too much (too many SACK
 * blocks with timestamps: at most 3) and the builder refuses it. */
size_t sluice_wire_tcp_options_len(const struct sluice_tcp_seg *s);
/* The header (20 bytes and the options) for s at p, with the checksum over
 * the pseudo-header, the header and s->payload (s->payload_len bytes,
 * wherever they are: they are summed, not copied). Returns the header's
 * length, or 0 when the options do not fit 40 bytes or cap is too small. */
size_t sluice_wire_tcp_build(uint8_t *p, size_t cap, const struct sluice_tcp_seg *s);

/* --- Whole frames ------------------------------------------------------- */

/* The whole-frame builders pad what they build with zeros to
 * SLUICE_ETH_FRAME_MIN (a pure ACK is 54 bytes; not every NIC pads), so cap
 * must hold at least that. */

/* A frame carrying s: Ethernet (dst, src), IPv4 (id, TTL 64, DF) and TCP
 * headers, then s->payload copied after them (memmove: it may already be
 * there). Returns the frame's length, or 0 if it does not fit cap. */
size_t sluice_wire_tcp_frame_build(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
				   const struct sluice_eth_addr *src, uint16_t ip_id, const struct sluice_tcp_seg *s);

/* Checksum work a NIC takes over (DPDK's checksum offloads). Receiving:
 * what it has verified as good (a frame it found bad, or did not check, is
 * checked in software as always). Sending: what it fills in: the IPv4
 * header's checksum is left 0, and TCP's field holds only the
 * pseudo-header's sum (folded, not complemented), as DPDK's
 * RTE_MBUF_F_TX_TCP_CKSUM asks. */
#define SLUICE_WIRE_CSUM_IP 1u
#define SLUICE_WIRE_CSUM_TCP 2u
/* With SLUICE_WIRE_CSUM_TCP, for a segment the NIC cuts (TCP segmentation
 * offload): the pseudo-header's sum leaves the length out, as DPDK's
 * RTE_MBUF_F_TX_TCP_SEG asks (each cut segment's length differs). */
#define SLUICE_WIRE_CSUM_TSO 4u
/* sluice_wire_tcp_frame_build, leaving the checksums offload names to the NIC. */
size_t sluice_wire_tcp_frame_build_offload(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
					   const struct sluice_eth_addr *src, uint16_t ip_id,
					   const struct sluice_tcp_seg *s, unsigned offload);

/* A piece of a payload that lies elsewhere than after its headers. */
struct sluice_wire_piece {
	const uint8_t *p;
	size_t len;
};

/* Only the Ethernet, IPv4 and TCP headers of the frame carrying s, whose
 * s->payload_len payload bytes (s->payload unused) the caller places after
 * them, in buffers of its own (an mbuf chain pointing into a cache): the
 * TCP checksum, unless offloaded, is summed over pieces[0..pieces_n),
 * which hold exactly those bytes in order. Returns the headers' length, or
 * 0 when they do not fit cap or the whole frame would be shorter than
 * SLUICE_ETH_FRAME_MIN (nothing pads it here: such a frame is built whole). */
size_t sluice_wire_tcp_headers_build(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
				     const struct sluice_eth_addr *src, uint16_t ip_id, const struct sluice_tcp_seg *s,
				     const struct sluice_wire_piece *pieces, int pieces_n, unsigned offload);

enum sluice_wire_kind {
	SLUICE_WIRE_DROP = 0,   /* out->reason says why */
	SLUICE_WIRE_ARP,        /* out->arp */
	SLUICE_WIRE_ICMP_ECHO,  /* out->ip, out->echo, out->icmp/icmp_len */
	SLUICE_WIRE_TCP,        /* out->ip, out->tcp (payload borrowed from the frame) */
};

/* What the receive path learns of one frame. Fields not named by kind are
 * unspecified; eth is filled whenever the Ethernet header was read, ip
 * whenever the IPv4 header was (a FRAGMENT drop included). */
struct sluice_wire_pkt {
	enum sluice_wire_kind kind;
	enum sluice_wire_reason reason;
	struct sluice_eth_hdr eth;
	struct sluice_ipv4_hdr ip;
	const uint8_t *icmp; /* ICMP_ECHO: the whole message, for the reply */
	size_t icmp_len;
	union {
		struct sluice_arp_pkt arp;
		struct sluice_icmp_echo echo;
		struct sluice_tcp_seg tcp;
	};
};

/* The receive path's entry: one Ethernet frame (without FCS) in, what it
 * is out. Does not look at the destination MAC or IPv4 address: the
 * caller (and the NIC's filters) decide what is addressed to the stack. */
enum sluice_wire_kind sluice_wire_classify(const uint8_t *frame, size_t len, struct sluice_wire_pkt *out);
/* The same, trusting the checksums the NIC verified (SLUICE_WIRE_CSUM_*);
 * ICMP's is always checked here. */
enum sluice_wire_kind sluice_wire_classify_verified(const uint8_t *frame, size_t len, struct sluice_wire_pkt *out,
						    unsigned verified);
/* The echo reply to the request pkt (classified SLUICE_WIRE_ICMP_ECHO) as
 * a whole frame: to the request's source MAC and address, from own_mac and
 * the address the request was sent to, no IP options, TTL 64. Returns its
 * length, or 0 if it does not fit cap. */
size_t sluice_wire_icmp_echo_reply_frame(uint8_t *frame, size_t cap, const struct sluice_wire_pkt *pkt,
					 const struct sluice_eth_addr *own_mac, uint16_t ip_id);

#endif
