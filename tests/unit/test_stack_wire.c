/* Unit tests of the stack's packet codecs and ARP cache (dataplane/stack/
 * wire.c, arp.c): checksums against known vectors, build -> parse round
 * trips of every header, the refusal of each malformed case (at every
 * truncated length), frames as Linux sends them, and the ARP cache's
 * bounds: expiry, LRU eviction, the pending queue and the request rate.
 * The frame vectors below are not captures: they were reconstructed to
 * the layout a Linux host uses (field values, option order, ping's data
 * pattern; a QEMU-style MAC 52:54:00:3a:7c:11, the stack at
 * 02:00:5e:10:00:01), and their checksums were computed by a separate
 * implementation (a few lines of Python over struct.unpack), not by wire.c. */
#include "dataplane/stack/arp.h"
#include "dataplane/stack/wire.h"
#include <criterion/criterion.h>
#include <string.h>

#define IP4(a, b, c, d) ((uint32_t)(a) << 24 | (uint32_t)(b) << 16 | (uint32_t)(c) << 8 | (uint32_t)(d))
#define FRAME_BYTES_MAX 2048

static const struct sluice_eth_addr mac_host = {{0x52, 0x54, 0x00, 0x3a, 0x7c, 0x11}};
static const struct sluice_eth_addr mac_us = {{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}};

/* `arping`/the kernel's ARP request from 192.168.122.1 for 192.168.122.10,
 * received padded to the 60-byte minimum. */
static const uint8_t linux_arp_request[60] = {
	0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x3a, 0x7c, 0x11,
	0x08, 0x06, 0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54,
	0x00, 0x3a, 0x7c, 0x11, 0xc0, 0xa8, 0x7a, 0x01, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0xc0, 0xa8, 0x7a, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
};

/* A Linux SYN (connect() to a broker: 10.0.0.2:51234 -> 10.0.0.1:9092),
 * options in Linux's order: MSS 1460, SACK-permitted, timestamps
 * (TSval 0x6c1e2f40, TSecr 0), NOP, window scale 7; window 64240. */
static const uint8_t linux_syn[74] = {
	0x02, 0x00, 0x5e, 0x10, 0x00, 0x01, 0x52, 0x54, 0x00, 0x3a, 0x7c, 0x11,
	0x08, 0x00, 0x45, 0x00, 0x00, 0x3c, 0x8d, 0x2c, 0x40, 0x00, 0x40, 0x06,
	0x99, 0x8d, 0x0a, 0x00, 0x00, 0x02, 0x0a, 0x00, 0x00, 0x01, 0xc8, 0x22,
	0x23, 0x84, 0x9b, 0x3e, 0x51, 0xa7, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02,
	0xfa, 0xf0, 0xc5, 0x21, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02,
	0x08, 0x0a, 0x6c, 0x1e, 0x2f, 0x40, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03,
	0x03, 0x07,
};

/* `ping 192.168.122.10` from 192.168.122.1: id 0x1f2e, seq 1, 56 data bytes
 * (a struct timeval, then 0x10..0x37). */
static const uint8_t linux_ping[98] = {
	0x02, 0x00, 0x5e, 0x10, 0x00, 0x01, 0x52, 0x54, 0x00, 0x3a, 0x7c, 0x11,
	0x08, 0x00, 0x45, 0x00, 0x00, 0x54, 0x3e, 0x9a, 0x40, 0x00, 0x40, 0x01,
	0x86, 0xb2, 0xc0, 0xa8, 0x7a, 0x01, 0xc0, 0xa8, 0x7a, 0x0a, 0x08, 0x00,
	0x48, 0x97, 0x1f, 0x2e, 0x00, 0x01, 0xc3, 0xb2, 0xa1, 0x65, 0x00, 0x00,
	0x00, 0x00, 0x5f, 0x4e, 0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x11,
	0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d,
	0x1e, 0x1f, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29,
	0x2a, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x32, 0x33, 0x34, 0x35,
	0x36, 0x37,
};

/* Helpers: recompute a tampered header's checksum so that only the
 * property under test is wrong. */
static void ip_csum_fix(uint8_t *ip)
{
	size_t hdr_len = (size_t)(ip[0] & 0x0f) * 4;
	ip[10] = ip[11] = 0;
	uint16_t c = sluice_wire_csum(ip, hdr_len);
	ip[10] = (uint8_t)(c >> 8);
	ip[11] = (uint8_t)c;
}

/* TCP segment at tcp, len bytes, between saddr and daddr. */
static void tcp_csum_fix(uint8_t *tcp, size_t len, uint32_t saddr, uint32_t daddr)
{
	tcp[16] = tcp[17] = 0;
	struct sluice_wire_csum c;
	sluice_wire_csum_init(&c);
	sluice_wire_csum_add_pseudo(&c, saddr, daddr, SLUICE_IPPROTO_TCP, (uint16_t)len);
	sluice_wire_csum_add(&c, tcp, len);
	uint16_t v = sluice_wire_csum_finish(&c);
	tcp[16] = (uint8_t)(v >> 8);
	tcp[17] = (uint8_t)v;
}

/* A simple deterministic byte source for the property tests. */
static uint32_t rng_state = 0x2545f491u;
static uint32_t rng(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 17;
	rng_state ^= rng_state << 5;
	return rng_state;
}

/* ------------------------------------------------------------------------- */

/* Proves the checksum gives RFC 1071's worked example (section 3: the
 * words 0001 f203 f4f5 f6f7 sum to ddf2, whose complement is 220d). */
Test(stack_wire, csum_rfc1071_example)
{
	static const uint8_t b[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
	cr_expect_eq(sluice_wire_csum(b, sizeof b), 0x220d);
	/* and that a buffer including its correct checksum sums to 0 */
	static const uint8_t with[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7, 0x22, 0x0d};
	cr_expect_eq(sluice_wire_csum(with, sizeof with), 0);
}

/* Proves the checksum of a real IPv4 header (a UDP packet 192.168.0.1 ->
 * 192.168.0.199, checksum b861, the textbook capture): computed over the
 * header with the field zeroed it is b861, and the header verifies. */
Test(stack_wire, csum_real_ipv4_header)
{
	uint8_t h[20] = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
			 0xb8, 0x61, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};
	cr_expect_eq(sluice_wire_csum(h, sizeof h), 0);
	h[10] = h[11] = 0;
	cr_expect_eq(sluice_wire_csum(h, sizeof h), 0xb861);
	/* the Linux frames' headers verify too */
	cr_expect_eq(sluice_wire_csum(linux_syn + 14, 20), 0);
	cr_expect_eq(sluice_wire_csum(linux_ping + 14, 20), 0);
}

/* Proves an odd trailing byte counts as the high byte of a word padded
 * with zero (RFC 1071 2.(A)). */
Test(stack_wire, csum_odd_length)
{
	static const uint8_t b[] = {0x12, 0x34, 0x56};
	cr_expect_eq(sluice_wire_csum(b, 3), (uint16_t)~(0x1234 + 0x5600));
	cr_expect_eq(sluice_wire_csum(b, 0), 0xffff);
}

/* Proves summing in pieces split anywhere (odd splits included, three
 * pieces) gives the sum of the whole, so pseudo-header, header and a
 * payload in another buffer can be summed separately. */
Test(stack_wire, csum_pieces_any_split)
{
	uint8_t b[301];
	for (size_t i = 0; i < sizeof b; i++)
		b[i] = (uint8_t)rng();
	for (size_t len = 0; len <= sizeof b; len += 37) {
		uint16_t whole = sluice_wire_csum(b, len);
		for (size_t i = 0; i <= len; i++) {
			size_t j = i + (len - i) / 2;
			struct sluice_wire_csum c;
			sluice_wire_csum_init(&c);
			sluice_wire_csum_add(&c, b, i);
			sluice_wire_csum_add(&c, b + i, j - i);
			sluice_wire_csum_add(&c, b + j, len - j);
			cr_assert_eq(sluice_wire_csum_finish(&c), whole, "len %zu split %zu/%zu", len, i, j);
		}
	}
}

/* RFC 1071's definition, word by word: the reference for the fast one. */
static uint16_t csum_reference(const uint8_t *p, size_t len)
{
	uint32_t sum = 0;
	for (size_t i = 0; i + 1 < len; i += 2) {
		sum += (uint32_t)(p[i] << 8 | p[i + 1]);
		sum = (sum & 0xffff) + (sum >> 16);
	}
	if (len & 1) {
		sum += (uint32_t)p[len - 1] << 8;
		sum = (sum & 0xffff) + (sum >> 16);
	}
	return (uint16_t)~sum;
}

/* Proves the checksum of long runs (summed eight bytes at a time in the
 * machine's byte order) is RFC 1071's, for every length up to a jumbo
 * frame's at every alignment, for all-zero and all-0xff buffers (the two
 * representations of zero), and split in pieces at odd places. */
Test(stack_wire, csum_long_runs_match_the_definition)
{
	static uint8_t b[9100];
	for (size_t i = 0; i < sizeof b; i++)
		b[i] = (uint8_t)rng();
	for (size_t off = 0; off < 8; off++)
		for (size_t len = 0; len + off <= sizeof b; len += len < 200 ? 1 : 97)
			cr_assert_eq(sluice_wire_csum(b + off, len), csum_reference(b + off, len), "off %zu len %zu", off, len);
	for (int fill = 0; fill < 2; fill++) {
		memset(b, fill ? 0xff : 0, sizeof b);
		for (size_t len = 0; len <= 2000; len += 67)
			cr_assert_eq(sluice_wire_csum(b, len), csum_reference(b, len), "fill %d len %zu", fill, len);
	}
	for (size_t i = 0; i < sizeof b; i++)
		b[i] = (uint8_t)rng();
	for (size_t cut = 1; cut < 1500; cut += 13) {
		struct sluice_wire_csum c;
		sluice_wire_csum_init(&c);
		sluice_wire_csum_add(&c, b, cut);
		sluice_wire_csum_add(&c, b + cut, 1501 - cut);
		cr_assert_eq(sluice_wire_csum_finish(&c), csum_reference(b, 1501), "cut %zu", cut);
	}
}

/* Proves the pseudo-header helper adds the 12 bytes RFC 9293 3.1 names
 * (source, destination, zero, protocol, TCP length). */
Test(stack_wire, csum_pseudo_header)
{
	static const uint8_t ph[12] = {10, 0, 0, 2, 10, 0, 0, 1, 0, 6, 0, 40};
	struct sluice_wire_csum c;
	sluice_wire_csum_init(&c);
	sluice_wire_csum_add_pseudo(&c, IP4(10, 0, 0, 2), IP4(10, 0, 0, 1), SLUICE_IPPROTO_TCP, 40);
	cr_expect_eq(sluice_wire_csum_finish(&c), sluice_wire_csum(ph, sizeof ph));
	/* and the Linux SYN's TCP checksum verifies with it */
	sluice_wire_csum_init(&c);
	sluice_wire_csum_add_pseudo(&c, IP4(10, 0, 0, 2), IP4(10, 0, 0, 1), SLUICE_IPPROTO_TCP, 40);
	sluice_wire_csum_add(&c, linux_syn + 34, 40);
	cr_expect_eq(sluice_wire_csum_finish(&c), 0);
}

/* Proves the incremental update (RFC 1624) agrees with a full recompute
 * for random messages and random changed words, including the words 0000
 * and ffff where RFC 1141's older formula went wrong; the one documented
 * exception, data that becomes all zeros, is checked for what it gives. */
Test(stack_wire, csum_adjust_matches_recompute)
{
	uint8_t b[64];
	for (int round = 0; round < 2000; round++) {
		for (size_t i = 0; i < sizeof b; i++)
			b[i] = (uint8_t)rng();
		if (round % 7 == 0)
			memset(b, round % 2 ? 0xff : 0x00, sizeof b);
		b[2] = b[3] = 0;
		uint16_t c = sluice_wire_csum(b, sizeof b);
		b[2] = (uint8_t)(c >> 8), b[3] = (uint8_t)c;
		size_t at = 4 + 2 * (rng() % 30);
		uint16_t old_word = (uint16_t)(b[at] << 8 | b[at + 1]);
		uint16_t new_word = round % 5 == 0 ? 0 : round % 5 == 1 ? 0xffff : (uint16_t)rng();
		b[at] = (uint8_t)(new_word >> 8), b[at + 1] = (uint8_t)new_word;
		uint16_t adjusted = sluice_wire_csum_adjust(c, old_word, new_word);
		b[2] = (uint8_t)(adjusted >> 8), b[3] = (uint8_t)adjusted;
		bool all_zero = true;
		for (size_t i = 0; i < sizeof b; i++)
			all_zero &= i == 2 || i == 3 || b[i] == 0;
		if (all_zero)
			cr_assert_eq(adjusted, 0, "round %d: the ambiguous case, documented", round);
		else
			cr_assert_eq(sluice_wire_csum(b, sizeof b), 0, "round %d", round);
	}
}

/* ------------------------------------------------------------------------- */

/* Proves an Ethernet header builds and parses back to the same fields. */
Test(stack_wire, eth_round_trip)
{
	struct sluice_eth_hdr h = {.dst = mac_host, .src = mac_us, .ethertype = SLUICE_ETHERTYPE_IPV4}, back;
	uint8_t b[SLUICE_ETH_HDR_LEN];
	cr_assert_eq(sluice_wire_eth_build(b, sizeof b, &h), SLUICE_ETH_HDR_LEN);
	cr_assert_eq(sluice_wire_eth_parse(b, sizeof b, &back), SLUICE_WIRE_OK);
	cr_expect_eq(memcmp(&back, &h, sizeof h), 0);
	cr_expect_eq(sluice_wire_eth_build(b, SLUICE_ETH_HDR_LEN - 1, &h), 0);
}

/* Proves every frame shorter than an Ethernet header is refused as short,
 * by the parser and by the classifier. */
Test(stack_wire, eth_short_every_length)
{
	struct sluice_eth_hdr h;
	struct sluice_wire_pkt pkt;
	for (size_t len = 0; len < SLUICE_ETH_HDR_LEN; len++) {
		cr_expect_eq(sluice_wire_eth_parse(linux_syn, len, &h), SLUICE_WIRE_SHORT, "len %zu", len);
		cr_expect_eq(sluice_wire_classify(linux_syn, len, &pkt), SLUICE_WIRE_DROP);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_SHORT);
	}
	cr_expect_eq(sluice_wire_classify(NULL, 0, &pkt), SLUICE_WIRE_DROP);
}

/* Proves a VLAN-tagged frame (802.1Q, 802.1ad and the old 0x9100) is
 * refused as VLAN rather than read as if the tag were the IPv4 header. */
Test(stack_wire, eth_vlan_refused)
{
	static const uint16_t tpids[] = {SLUICE_ETHERTYPE_VLAN, SLUICE_ETHERTYPE_QINQ, SLUICE_ETHERTYPE_QINQ_OLD};
	for (size_t i = 0; i < sizeof tpids / sizeof tpids[0]; i++) {
		/* the SYN with a tag inserted: TPID, TCI (VLAN 100), then 0x0800 */
		uint8_t f[sizeof linux_syn + 4];
		memcpy(f, linux_syn, 12);
		f[12] = (uint8_t)(tpids[i] >> 8), f[13] = (uint8_t)tpids[i];
		f[14] = 0x00, f[15] = 0x64;
		memcpy(f + 16, linux_syn + 12, sizeof linux_syn - 12);
		struct sluice_wire_pkt pkt;
		cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_VLAN);
	}
}

/* Proves frames that are neither IPv4 nor ARP (IPv6, an 802.3 length
 * field) are dropped as such. */
Test(stack_wire, eth_other_ethertypes)
{
	static const uint16_t types[] = {0x86dd, 0x88cc, 0x0040};
	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		uint8_t f[sizeof linux_syn];
		memcpy(f, linux_syn, sizeof f);
		f[12] = (uint8_t)(types[i] >> 8), f[13] = (uint8_t)types[i];
		struct sluice_wire_pkt pkt;
		cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_ETHERTYPE);
	}
}

/* ------------------------------------------------------------------------- */

/* Proves a Linux ARP request (with its padding) classifies as ARP with
 * every field as sent. */
Test(stack_wire, arp_linux_request)
{
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(linux_arp_request, sizeof linux_arp_request, &pkt), SLUICE_WIRE_ARP);
	cr_expect_eq(pkt.reason, SLUICE_WIRE_OK);
	cr_expect_eq(pkt.arp.op, SLUICE_ARP_OP_REQUEST);
	cr_expect_eq(memcmp(pkt.arp.sha.b, mac_host.b, 6), 0);
	cr_expect_eq(pkt.arp.spa, IP4(192, 168, 122, 1));
	cr_expect_eq(pkt.arp.tpa, IP4(192, 168, 122, 10));
	static const uint8_t zero[6];
	cr_expect_eq(memcmp(pkt.arp.tha.b, zero, 6), 0);
	/* and without the padding, as the sender's capture shows it */
	cr_expect_eq(sluice_wire_classify(linux_arp_request, 42, &pkt), SLUICE_WIRE_ARP);
}

/* Proves the reply to that request is addressed to the requester (frame
 * and ARP target), carries our mapping, is padded to 60 bytes, and parses
 * back; and that a built request parses back to what was asked. */
Test(stack_wire, arp_reply_and_request_round_trip)
{
	struct sluice_wire_pkt req, back;
	cr_assert_eq(sluice_wire_classify(linux_arp_request, sizeof linux_arp_request, &req), SLUICE_WIRE_ARP);
	uint8_t f[FRAME_BYTES_MAX];
	memset(f, 0xee, sizeof f);
	size_t n = sluice_wire_arp_frame_reply(f, sizeof f, &mac_us, IP4(192, 168, 122, 10), &req.arp);
	cr_assert_eq(n, SLUICE_ETH_FRAME_MIN);
	cr_expect_eq(f[n], 0xee, "nothing written past the frame");
	cr_assert_eq(sluice_wire_classify(f, n, &back), SLUICE_WIRE_ARP);
	cr_expect_eq(memcmp(back.eth.dst.b, mac_host.b, 6), 0);
	cr_expect_eq(memcmp(back.eth.src.b, mac_us.b, 6), 0);
	cr_expect_eq(back.arp.op, SLUICE_ARP_OP_REPLY);
	cr_expect_eq(memcmp(back.arp.sha.b, mac_us.b, 6), 0);
	cr_expect_eq(back.arp.spa, IP4(192, 168, 122, 10));
	cr_expect_eq(memcmp(back.arp.tha.b, mac_host.b, 6), 0);
	cr_expect_eq(back.arp.tpa, IP4(192, 168, 122, 1));
	for (size_t i = 42; i < n; i++)
		cr_expect_eq(f[i], 0, "padding is zeros");

	n = sluice_wire_arp_frame_request(f, sizeof f, &mac_us, IP4(192, 168, 122, 10), IP4(192, 168, 122, 1), NULL);
	cr_assert_eq(n, SLUICE_ETH_FRAME_MIN);
	cr_assert_eq(sluice_wire_classify(f, n, &back), SLUICE_WIRE_ARP);
	static const uint8_t bcast[6] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	cr_expect_eq(memcmp(back.eth.dst.b, bcast, 6), 0);
	cr_expect_eq(back.arp.op, SLUICE_ARP_OP_REQUEST);
	cr_expect_eq(back.arp.tpa, IP4(192, 168, 122, 1));
	/* a unicast request (refreshing a known neighbour) goes to that MAC */
	n = sluice_wire_arp_frame_request(f, sizeof f, &mac_us, IP4(192, 168, 122, 10), IP4(192, 168, 122, 1), &mac_host);
	cr_assert_eq(sluice_wire_classify(f, n, &back), SLUICE_WIRE_ARP);
	cr_expect_eq(memcmp(back.eth.dst.b, mac_host.b, 6), 0);
	/* too small a buffer is refused, not overrun */
	cr_expect_eq(sluice_wire_arp_frame_request(f, SLUICE_ETH_FRAME_MIN - 1, &mac_us, 1, 2, NULL), 0);
	cr_expect_eq(sluice_wire_arp_build(f, SLUICE_ARP_LEN - 1, &back.arp), 0);
}

/* Proves ARP other than IPv4 over Ethernet, or with an op other than
 * request/reply, is refused, and so is every truncated ARP message. */
Test(stack_wire, arp_refusals)
{
	static const struct {
		size_t at;
		uint8_t v;
	} bad[] = {
		{15, 6},    /* htype 6 (IEEE 802) */
		{16, 0x86}, /* ptype 0x86dd */
		{18, 8},    /* hlen 8 */
		{19, 16},   /* plen 16 */
		{21, 0},    /* op 0 */
		{21, 3},    /* op 3 (RARP request) */
	};
	struct sluice_wire_pkt pkt;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint8_t f[sizeof linux_arp_request];
		memcpy(f, linux_arp_request, sizeof f);
		f[bad[i].at] = bad[i].v;
		cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP, "case %zu", i);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_ARP_FORMAT, "case %zu", i);
	}
	struct sluice_arp_pkt a;
	for (size_t len = 0; len < SLUICE_ARP_LEN; len++)
		cr_expect_eq(sluice_wire_arp_parse(linux_arp_request + 14, len, &a), SLUICE_WIRE_SHORT, "len %zu", len);
	for (size_t len = SLUICE_ETH_HDR_LEN; len < SLUICE_ETH_HDR_LEN + SLUICE_ARP_LEN; len++) {
		cr_expect_eq(sluice_wire_classify(linux_arp_request, len, &pkt), SLUICE_WIRE_DROP);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_SHORT);
	}
}

/* ------------------------------------------------------------------------- */

/* Proves an IPv4 header builds (20 bytes, DF, checksum) and parses back to
 * the same fields, and that the builder refuses a small buffer and a total
 * length past 65535. */
Test(stack_wire, ipv4_round_trip)
{
	struct sluice_ipv4_hdr h = {.tos = 0x10, .id = 0xbeef, .ttl = 64, .protocol = SLUICE_IPPROTO_TCP,
				    .saddr = IP4(10, 0, 0, 1), .daddr = IP4(10, 0, 0, 2), .payload_len = 100};
	uint8_t b[20 + 100] = {0};
	cr_assert_eq(sluice_wire_ipv4_build(b, sizeof b, &h), 20);
	struct sluice_ipv4_hdr back;
	cr_assert_eq(sluice_wire_ipv4_parse(b, sizeof b, &back), SLUICE_WIRE_OK);
	cr_expect_eq(back.hdr_len, 20);
	cr_expect_eq(back.tos, 0x10);
	cr_expect_eq(back.total_len, 120);
	cr_expect_eq(back.id, 0xbeef);
	cr_expect(back.df);
	cr_expect(!back.fragment);
	cr_expect_eq(back.ttl, 64);
	cr_expect_eq(back.protocol, SLUICE_IPPROTO_TCP);
	cr_expect_eq(back.saddr, IP4(10, 0, 0, 1));
	cr_expect_eq(back.daddr, IP4(10, 0, 0, 2));
	cr_expect_eq(back.payload, b + 20);
	cr_expect_eq(back.payload_len, 100);
	cr_expect_eq(sluice_wire_ipv4_build(b, 19, &h), 0);
	h.payload_len = 65535 - 19;
	cr_expect_eq(sluice_wire_ipv4_build(b, sizeof b, &h), 0);
}

/* Proves bytes after the IPv4 total length (Ethernet padding of a short
 * packet) are ignored: the payload is what the header says. */
Test(stack_wire, ipv4_padding_ignored)
{
	uint8_t b[SLUICE_ETH_FRAME_MIN - SLUICE_ETH_HDR_LEN];
	memset(b, 0, sizeof b);
	struct sluice_ipv4_hdr h = {.id = 1, .ttl = 64, .protocol = 17, .saddr = 1, .daddr = 2, .payload_len = 4};
	cr_assert_eq(sluice_wire_ipv4_build(b, sizeof b, &h), 20);
	struct sluice_ipv4_hdr back;
	cr_assert_eq(sluice_wire_ipv4_parse(b, sizeof b, &back), SLUICE_WIRE_OK);
	cr_expect_eq(back.total_len, 24);
	cr_expect_eq(back.payload_len, 4);
}

/* Proves a header with options (IHL 6) is accepted, its payload starting
 * after them. */
Test(stack_wire, ipv4_options_skipped)
{
	uint8_t b[24 + 8] = {0x46, 0, 0, 32, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 1, 1, 1, 0};
	ip_csum_fix(b);
	struct sluice_ipv4_hdr back;
	cr_assert_eq(sluice_wire_ipv4_parse(b, sizeof b, &back), SLUICE_WIRE_OK);
	cr_expect_eq(back.hdr_len, 24);
	cr_expect_eq(back.payload, b + 24);
	cr_expect_eq(back.payload_len, 8);
}

/* Proves every malformed IPv4 header is refused for its own reason, each
 * case otherwise valid (checksum recomputed after the damage): version,
 * IHL below 5, IHL past the buffer, total length below the header or past
 * the bytes present, a bad checksum. */
Test(stack_wire, ipv4_refusals)
{
	uint8_t ok[40] = {0};
	struct sluice_ipv4_hdr h = {.id = 7, .ttl = 64, .protocol = 6, .saddr = 1, .daddr = 2, .payload_len = 20};
	cr_assert_eq(sluice_wire_ipv4_build(ok, sizeof ok, &h), 20);
	struct sluice_ipv4_hdr back;
	uint8_t b[40];
#define DAMAGE(stmt, expect, len)                                                                                        \
	do {                                                                                                             \
		memcpy(b, ok, sizeof b);                                                                                 \
		stmt;                                                                                                    \
		ip_csum_fix(b);                                                                                          \
		cr_expect_eq(sluice_wire_ipv4_parse(b, len, &back), expect, #stmt);                                      \
	} while (0)
	DAMAGE((void)0, SLUICE_WIRE_OK, 40);
	DAMAGE(b[0] = 0x65, SLUICE_WIRE_IP_VERSION, 40);
	DAMAGE(b[0] = 0x05, SLUICE_WIRE_IP_VERSION, 40);
	for (uint8_t ihl = 0; ihl < 5; ihl++) {
		memcpy(b, ok, sizeof b);
		b[0] = (uint8_t)(0x40 | ihl);
		cr_expect_eq(sluice_wire_ipv4_parse(b, 40, &back), SLUICE_WIRE_IP_HEADER_LEN, "IHL %u", ihl);
	}
	memcpy(b, ok, sizeof b);
	b[0] = 0x4f; /* 60 bytes of header in a 40-byte buffer */
	cr_expect_eq(sluice_wire_ipv4_parse(b, 40, &back), SLUICE_WIRE_SHORT);
	DAMAGE((b[2] = 0, b[3] = 19), SLUICE_WIRE_IP_TOTAL_LEN, 40);
	DAMAGE((b[2] = 0, b[3] = 0), SLUICE_WIRE_IP_TOTAL_LEN, 40);
	DAMAGE((b[2] = 0, b[3] = 41), SLUICE_WIRE_SHORT, 40);
	DAMAGE((b[2] = 0xff, b[3] = 0xff), SLUICE_WIRE_SHORT, 40);
	memcpy(b, ok, sizeof b);
	b[11] ^= 1;
	cr_expect_eq(sluice_wire_ipv4_parse(b, 40, &back), SLUICE_WIRE_IP_CHECKSUM);
	memcpy(b, ok, sizeof b);
	b[13] ^= 0x80; /* a flipped address bit breaks the checksum too */
	cr_expect_eq(sluice_wire_ipv4_parse(b, 40, &back), SLUICE_WIRE_IP_CHECKSUM);
#undef DAMAGE
}

/* Proves fragments are reported as FRAGMENT (MF set, or an offset, or
 * both), with the header still filled in so the drop can be counted, and
 * that the classifier drops them. */
Test(stack_wire, ipv4_fragments_reported)
{
	static const uint16_t frags[] = {0x2000, 0x0001, 0x00b9, 0x20b9, 0x6000};
	for (size_t i = 0; i < sizeof frags / sizeof frags[0]; i++) {
		uint8_t f[sizeof linux_syn];
		memcpy(f, linux_syn, sizeof f);
		f[20] = (uint8_t)(frags[i] >> 8), f[21] = (uint8_t)frags[i];
		ip_csum_fix(f + 14);
		struct sluice_ipv4_hdr h;
		cr_expect_eq(sluice_wire_ipv4_parse(f + 14, sizeof f - 14, &h), SLUICE_WIRE_FRAGMENT, "frag %04x", frags[i]);
		cr_expect(h.fragment);
		cr_expect_eq(h.saddr, IP4(10, 0, 0, 2));
		struct sluice_wire_pkt pkt;
		cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_FRAGMENT);
		cr_expect_eq(pkt.ip.id, 0x8d2c);
	}
}

/* Proves every truncation of a valid frame (the Linux SYN and ping, at
 * every length from the end of the Ethernet header on) is dropped as
 * short: the total length is checked against the bytes present. */
Test(stack_wire, ipv4_short_every_length)
{
	struct sluice_wire_pkt pkt;
	for (size_t len = SLUICE_ETH_HDR_LEN; len < sizeof linux_syn; len++) {
		cr_expect_eq(sluice_wire_classify(linux_syn, len, &pkt), SLUICE_WIRE_DROP, "len %zu", len);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_SHORT, "len %zu", len);
	}
	for (size_t len = SLUICE_ETH_HDR_LEN; len < sizeof linux_ping; len++) {
		cr_expect_eq(sluice_wire_classify(linux_ping, len, &pkt), SLUICE_WIRE_DROP, "len %zu", len);
		cr_expect_eq(pkt.reason, SLUICE_WIRE_SHORT, "len %zu", len);
	}
	struct sluice_ipv4_hdr h;
	for (size_t len = 0; len < 20; len++)
		cr_expect_eq(sluice_wire_ipv4_parse(linux_syn + 14, len, &h), SLUICE_WIRE_SHORT);
}

/* Proves IP protocols other than ICMP and TCP (UDP here) are dropped. */
Test(stack_wire, ipv4_other_protocol)
{
	uint8_t f[sizeof linux_syn];
	memcpy(f, linux_syn, sizeof f);
	f[23] = 17;
	ip_csum_fix(f + 14);
	struct sluice_wire_pkt pkt;
	cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
	cr_expect_eq(pkt.reason, SLUICE_WIRE_PROTOCOL);
}

/* ------------------------------------------------------------------------- */

/* Proves a Linux ping classifies as an echo request with its id, seq and
 * data, and that the reply frame built from it goes back to the pinger
 * (MACs and addresses swapped), is type 0 with a valid checksum and the
 * same id, seq and data, with a valid IPv4 header. */
Test(stack_wire, icmp_linux_ping_and_reply)
{
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(linux_ping, sizeof linux_ping, &pkt), SLUICE_WIRE_ICMP_ECHO);
	cr_expect_eq(pkt.echo.id, 0x1f2e);
	cr_expect_eq(pkt.echo.seq, 1);
	cr_expect_eq(pkt.echo.data_len, 56);
	cr_expect_eq(pkt.echo.data, linux_ping + 42);
	cr_expect_eq(pkt.icmp_len, 64);
	uint8_t f[FRAME_BYTES_MAX];
	size_t n = sluice_wire_icmp_echo_reply_frame(f, sizeof f, &pkt, &mac_us, 0x1234);
	cr_assert_eq(n, sizeof linux_ping);
	cr_expect_eq(memcmp(f, mac_host.b, 6), 0);
	cr_expect_eq(memcmp(f + 6, mac_us.b, 6), 0);
	struct sluice_ipv4_hdr ip;
	cr_assert_eq(sluice_wire_ipv4_parse(f + 14, n - 14, &ip), SLUICE_WIRE_OK);
	cr_expect_eq(ip.saddr, IP4(192, 168, 122, 10));
	cr_expect_eq(ip.daddr, IP4(192, 168, 122, 1));
	cr_expect_eq(ip.protocol, SLUICE_IPPROTO_ICMP);
	cr_expect_eq(ip.id, 0x1234);
	cr_expect_eq(f[34], SLUICE_ICMP_ECHO_REPLY);
	cr_expect_eq(f[35], 0);
	cr_expect_eq(sluice_wire_csum(f + 34, 64), 0);
	cr_expect_eq(memcmp(f + 38, linux_ping + 38, 60), 0, "id, seq and data echoed");
	cr_expect_eq(sluice_wire_icmp_echo_reply_frame(f, sizeof linux_ping - 1, &pkt, &mac_us, 1), 0);
}

/* Proves the reply can be built into the request's own buffer (the mbuf
 * reused), also when the request carried IP options, which the reply
 * drops. */
Test(stack_wire, icmp_reply_in_the_request_buffer)
{
	uint8_t f[sizeof linux_ping + 4];
	memcpy(f, linux_ping, 34);
	memcpy(f + 38, linux_ping + 34, 64);
	f[14] = 0x46;
	f[16] = 0, f[17] = 88;
	f[34] = f[35] = f[36] = 1, f[37] = 0; /* NOP NOP NOP EOL */
	ip_csum_fix(f + 14);
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_ICMP_ECHO);
	cr_expect_eq(pkt.ip.hdr_len, 24);
	size_t n = sluice_wire_icmp_echo_reply_frame(f, sizeof f, &pkt, &mac_us, 9);
	cr_assert_eq(n, sizeof linux_ping);
	cr_expect_eq(f[14], 0x45);
	cr_expect_eq(sluice_wire_csum(f + 14, 20), 0);
	cr_expect_eq(f[34], SLUICE_ICMP_ECHO_REPLY);
	cr_expect_eq(sluice_wire_csum(f + 34, 64), 0);
	cr_expect_eq(memcmp(f + 38, linux_ping + 38, 60), 0);
}

/* Proves the in-place reply's incremental checksum is right for echo
 * requests of every length 8..200 with random contents. */
Test(stack_wire, icmp_reply_in_place_any_message)
{
	uint8_t m[200];
	for (size_t len = 8; len <= sizeof m; len++) {
		for (size_t i = 0; i < len; i++)
			m[i] = (uint8_t)rng();
		m[0] = 8, m[1] = 0, m[2] = m[3] = 0;
		uint16_t c = sluice_wire_csum(m, len);
		m[2] = (uint8_t)(c >> 8), m[3] = (uint8_t)c;
		struct sluice_icmp_echo e;
		cr_assert_eq(sluice_wire_icmp_echo_parse(m, len, &e), SLUICE_WIRE_OK);
		sluice_wire_icmp_echo_reply_in_place(m, len);
		cr_assert_eq(m[0], 0);
		cr_assert_eq(sluice_wire_csum(m, len), 0, "len %zu", len);
	}
}

/* Proves the reply to an echo request that is all zeros past its type
 * (id 0, seq 0, zero data: the one case the incremental update cannot
 * tell, RFC 1624 3) still carries a checksum that verifies (ffff). */
Test(stack_wire, icmp_reply_all_zero_message)
{
	for (size_t len = 8; len <= 64; len += 8) {
		uint8_t m[64] = {8, 0, 0xf7, 0xff};
		struct sluice_icmp_echo e;
		cr_assert_eq(sluice_wire_icmp_echo_parse(m, len, &e), SLUICE_WIRE_OK);
		sluice_wire_icmp_echo_reply_in_place(m, len);
		cr_expect_eq(m[2], 0xff);
		cr_expect_eq(m[3], 0xff);
		cr_expect_eq(sluice_wire_csum(m, len), 0);
	}
}

/* Proves ICMP other than an echo request (a reply, code 1, a destination
 * unreachable), a bad checksum, and a message under 8 bytes are dropped. */
Test(stack_wire, icmp_refusals)
{
	struct sluice_icmp_echo e;
	const uint8_t *req = linux_ping + 34;
	uint8_t m[64];
	static const uint8_t types[][2] = {{0, 0}, {8, 1}, {3, 3}, {13, 0}};
	for (size_t i = 0; i < 4; i++) {
		memcpy(m, req, sizeof m);
		m[0] = types[i][0], m[1] = types[i][1];
		m[2] = m[3] = 0;
		uint16_t c = sluice_wire_csum(m, sizeof m);
		m[2] = (uint8_t)(c >> 8), m[3] = (uint8_t)c;
		cr_expect_eq(sluice_wire_icmp_echo_parse(m, sizeof m, &e), SLUICE_WIRE_ICMP_TYPE, "type %u", m[0]);
	}
	memcpy(m, req, sizeof m);
	m[63] ^= 0x40;
	cr_expect_eq(sluice_wire_icmp_echo_parse(m, sizeof m, &e), SLUICE_WIRE_ICMP_CHECKSUM);
	for (size_t len = 0; len < 8; len++)
		cr_expect_eq(sluice_wire_icmp_echo_parse(req, len, &e), SLUICE_WIRE_SHORT);
	/* a truncated message (IP total length shortened with it) fails its checksum */
	cr_expect_eq(sluice_wire_icmp_echo_parse(req, 63, &e), SLUICE_WIRE_ICMP_CHECKSUM);
	uint8_t f[sizeof linux_ping];
	memcpy(f, linux_ping, sizeof f);
	f[98 - 1] ^= 1;
	struct sluice_wire_pkt pkt;
	cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
	cr_expect_eq(pkt.reason, SLUICE_WIRE_ICMP_CHECKSUM);
}

/* ------------------------------------------------------------------------- */

/* Proves the Linux SYN classifies as a TCP segment with every field and
 * option as sent: MSS 1460, SACK-permitted, timestamps, window scale 7. */
Test(stack_wire, tcp_linux_syn)
{
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(linux_syn, sizeof linux_syn, &pkt), SLUICE_WIRE_TCP);
	const struct sluice_tcp_seg *s = &pkt.tcp;
	cr_expect_eq(s->saddr, IP4(10, 0, 0, 2));
	cr_expect_eq(s->daddr, IP4(10, 0, 0, 1));
	cr_expect_eq(s->sport, 51234);
	cr_expect_eq(s->dport, 9092);
	cr_expect_eq(s->seq, 0x9b3e51a7);
	cr_expect_eq(s->ack, 0);
	cr_expect_eq(s->flags, SLUICE_TCP_SYN);
	cr_expect_eq(s->window, 64240);
	cr_expect_eq(s->mss, 1460);
	cr_expect_eq(s->wscale, 7);
	cr_expect(s->sack_permitted);
	cr_expect(s->has_ts);
	cr_expect_eq(s->ts_val, 0x6c1e2f40);
	cr_expect_eq(s->ts_ecr, 0);
	cr_expect_eq(s->sack_n, 0);
	cr_expect_eq(s->payload_len, 0);
	cr_expect_eq(pkt.ip.ttl, 64);
	/* and our builder lays the same options out byte for byte */
	uint8_t f[FRAME_BYTES_MAX];
	size_t n = sluice_wire_tcp_frame_build(f, sizeof f, &mac_us, &mac_host, 0x8d2c, s);
	cr_assert_eq(n, sizeof linux_syn);
	cr_expect_eq(memcmp(f + 34, linux_syn + 34, 40), 0, "TCP header and options as Linux's");
	cr_expect_eq(memcmp(f, linux_syn, 34), 0, "Ethernet and IPv4 headers as Linux's");
}

/* The option bytes a segment asks for, computed here independently of
 * the builder: MSS 4 on a SYN; timestamps 12 (with SACK-permitted or two
 * NOPs); SACK-permitted alone 4; NOP+wscale 4 on a SYN; NOP NOP SACK 4+8n. */
static size_t expected_options_len(const struct sluice_tcp_seg *s)
{
	bool syn = s->flags & SLUICE_TCP_SYN;
	size_t n = (syn && s->mss ? 4 : 0) + (s->has_ts ? 12 : syn && s->sack_permitted ? 4 : 0) +
		   (syn && s->wscale >= 0 ? 4 : 0);
	return n + (s->sack_n ? 4 + 8 * (size_t)s->sack_n : 0);
}

/* Builds s into a frame, classifies it, checks what comes back; false if
 * the builder refused (options over 40 bytes), which must be exactly when
 * the expected options do not fit. */
static bool tcp_round_trip(const struct sluice_tcp_seg *s)
{
	uint8_t f[FRAME_BYTES_MAX];
	size_t want = expected_options_len(s);
	cr_assert_eq(sluice_wire_tcp_options_len(s), want);
	size_t n = sluice_wire_tcp_frame_build(f, sizeof f, &mac_host, &mac_us, 77, s);
	if (want > SLUICE_TCP_OPTIONS_LEN_MAX) {
		cr_assert_eq(n, 0, "options of %zu bytes refused", want);
		return false;
	}
	size_t unpadded = 14 + 20 + 20 + want + s->payload_len;
	cr_assert_eq(n, unpadded < 60 ? 60 : unpadded);
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(f, n, &pkt), SLUICE_WIRE_TCP, "reason %s", sluice_wire_reason_name(pkt.reason));
	const struct sluice_tcp_seg *b = &pkt.tcp;
	bool syn = s->flags & SLUICE_TCP_SYN;
	cr_assert_eq(b->saddr, s->saddr);
	cr_assert_eq(b->daddr, s->daddr);
	cr_assert_eq(b->sport, s->sport);
	cr_assert_eq(b->dport, s->dport);
	cr_assert_eq(b->seq, s->seq);
	cr_assert_eq(b->ack, s->ack);
	cr_assert_eq(b->flags, s->flags);
	cr_assert_eq(b->window, s->window);
	cr_assert_eq(b->mss, syn ? s->mss : 0);
	cr_assert_eq(b->wscale, syn ? s->wscale : -1);
	cr_assert_eq(b->sack_permitted, syn && s->sack_permitted);
	cr_assert_eq(b->has_ts, s->has_ts);
	if (s->has_ts) {
		cr_assert_eq(b->ts_val, s->ts_val);
		cr_assert_eq(b->ts_ecr, s->ts_ecr);
	}
	cr_assert_eq(b->sack_n, s->sack_n);
	for (size_t i = 0; i < s->sack_n; i++) {
		cr_assert_eq(b->sack[i].left, s->sack[i].left);
		cr_assert_eq(b->sack[i].right, s->sack[i].right);
	}
	cr_assert_eq(b->payload_len, s->payload_len);
	if (s->payload_len > 0)
		cr_assert_eq(memcmp(b->payload, s->payload, s->payload_len), 0);
	return true;
}

/* Proves build -> classify round trips for every combination of options
 * (MSS on/off, window scale absent/0/7/14, SACK-permitted, timestamps,
 * 0..4 SACK blocks) on SYN, SYN-ACK and ACK segments, with and without a
 * payload: options a segment's kind does not carry (MSS, wscale,
 * SACK-permitted off a SYN) are not sent, and a request for more than 40
 * option bytes is refused. */
Test(stack_wire, tcp_round_trip_every_option_combination)
{
	static const uint8_t flag_sets[] = {SLUICE_TCP_SYN, SLUICE_TCP_SYN | SLUICE_TCP_ACK, SLUICE_TCP_ACK,
					    SLUICE_TCP_ACK | SLUICE_TCP_PSH | SLUICE_TCP_FIN};
	static const int8_t wscales[] = {-1, 0, 7, 14};
	static const uint8_t payload[300] = {1, 2, 3, 0xfe, [299] = 0x5a};
	int built = 0, refused = 0;
	for (size_t fl = 0; fl < 4; fl++)
		for (int combo = 0; combo < 2 * 4 * 2 * 2 * 5 * 3; combo++) {
			struct sluice_tcp_seg s = {.saddr = IP4(10, 0, 0, 1), .daddr = IP4(10, 0, 0, 2), .sport = 9092,
						   .dport = 40000, .seq = rng(), .ack = rng(), .flags = flag_sets[fl],
						   .window = (uint16_t)rng()};
			int c = combo;
			s.mss = c % 2 ? 1460 : 0, c /= 2;
			s.wscale = wscales[c % 4], c /= 4;
			s.sack_permitted = c % 2, c /= 2;
			s.has_ts = c % 2, c /= 2;
			s.ts_val = rng(), s.ts_ecr = rng();
			s.sack_n = (uint8_t)(c % 5), c /= 5;
			for (size_t i = 0; i < s.sack_n; i++)
				s.sack[i].left = rng(), s.sack[i].right = rng();
			static const uint32_t lens[] = {0, 1, 300};
			s.payload_len = lens[c % 3];
			s.payload = s.payload_len ? payload : NULL;
			if (tcp_round_trip(&s))
				built++;
			else
				refused++;
		}
	/* tcp_round_trip checked that exactly the over-long ones were refused;
	 * both kinds occur (off a SYN: timestamps with 4 SACK blocks) */
	cr_expect_gt(refused, 0);
	cr_expect_gt(built, refused);
	cr_expect_eq(built + refused, 4 * 480);
}

/* Proves the builder refuses every buffer too small for the header
 * (returning 0) and writes nothing past the cap it was given. */
Test(stack_wire, tcp_build_refuses_small_buffer)
{
	struct sluice_tcp_seg s = {.saddr = 1, .daddr = 2, .flags = SLUICE_TCP_SYN, .mss = 1460, .wscale = 7,
				   .sack_permitted = true, .has_ts = true};
	size_t need = SLUICE_TCP_HDR_LEN + sluice_wire_tcp_options_len(&s);
	cr_assert_eq(need, 40);
	uint8_t b[64];
	for (size_t cap = 0; cap < need; cap++) {
		memset(b, 0xcc, sizeof b);
		cr_expect_eq(sluice_wire_tcp_build(b, cap, &s), 0, "cap %zu", cap);
		for (size_t i = cap; i < sizeof b; i++)
			cr_assert_eq(b[i], 0xcc, "cap %zu: byte %zu written", cap, i);
	}
	cr_expect_eq(sluice_wire_tcp_build(b, need, &s), need);
	uint8_t f[FRAME_BYTES_MAX];
	for (size_t cap = 0; cap < 14 + 20 + need; cap++)
		cr_expect_eq(sluice_wire_tcp_frame_build(f, cap, &mac_host, &mac_us, 1, &s), 0);
	/* a pure ACK is padded to the Ethernet minimum, so needs 60 bytes */
	struct sluice_tcp_seg ack = {.saddr = 1, .daddr = 2, .flags = SLUICE_TCP_ACK, .wscale = -1};
	cr_expect_eq(sluice_wire_tcp_frame_build(f, 59, &mac_host, &mac_us, 1, &ack), 0);
	cr_expect_eq(sluice_wire_tcp_frame_build(f, 60, &mac_host, &mac_us, 1, &ack), 60);
}

/* A TCP segment (no payload) with the given raw option bytes (a multiple
 * of 4, at most 40) and a correct checksum, parsed. */
static enum sluice_wire_reason parse_options_in_segment(const uint8_t *opt, size_t n, struct sluice_tcp_seg *out)
{
	cr_assert(n % 4 == 0 && n <= 40);
	uint8_t seg[60] = {0x23, 0x84, 0xc8, 0x22, 0, 0, 0, 1, 0, 0, 0, 0, 0, SLUICE_TCP_SYN, 0xff, 0xff};
	seg[12] = (uint8_t)((20 + n) / 4 << 4);
	memcpy(seg + 20, opt, n);
	tcp_csum_fix(seg, 20 + n, IP4(10, 0, 0, 1), IP4(10, 0, 0, 2));
	return sluice_wire_tcp_parse(seg, 20 + n, IP4(10, 0, 0, 1), IP4(10, 0, 0, 2), out);
}

/* Proves every malformed option refuses the segment: lengths 0 and 1, a
 * length past the header, a kind with no length byte left, each known
 * kind with a wrong length, SACK with 0 blocks or a partial block. */
Test(stack_wire, tcp_malformed_options)
{
	static const struct {
		uint8_t o[12];
		size_t n;
		const char *what;
	} bad[] = {
		{{2, 0, 5, 0xb4}, 4, "length 0"},
		{{30, 1, 1, 1}, 4, "length 1"},
		{{1, 1, 8, 10, 0, 0, 0, 0}, 8, "timestamps past the header"},
		{{30, 9, 0, 0, 0, 0, 0, 0}, 8, "an unknown kind past the header"},
		{{1, 1, 1, 2}, 4, "MSS kind with no length byte"},
		{{2, 3, 5, 1}, 4, "MSS length 3"},
		{{2, 5, 5, 0xb4, 0, 1, 1, 1}, 8, "MSS length 5"},
		{{3, 4, 7, 0}, 4, "wscale length 4"},
		{{3, 2, 1, 1}, 4, "wscale length 2"},
		{{4, 3, 0, 1}, 4, "SACK-permitted length 3"},
		{{1, 1, 5, 2}, 4, "SACK with no block"},
		{{1, 1, 5, 6, 0, 0, 0, 1, 0, 0, 0, 2}, 12, "SACK with half a block"},
		{{5, 12, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0}, 12, "SACK with a block and a half"},
		{{8, 8, 0, 0, 0, 1, 0, 0}, 8, "timestamps length 8"},
		{{1, 8, 11, 0, 0, 0, 1, 0, 0, 0, 2, 0}, 12, "timestamps length 11"},
	};
	struct sluice_tcp_seg s;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
		cr_expect_eq(parse_options_in_segment(bad[i].o, bad[i].n, &s), SLUICE_WIRE_TCP_OPTION, "%s", bad[i].what);
}

/* Proves SACK carries at most 4 blocks: 4 parse in a segment; 5 (42
 * bytes, more than an option area holds) are refused by the option parser
 * given a longer area, as a fuzzer or a bug could give it. */
Test(stack_wire, tcp_sack_blocks_bounded)
{
	uint8_t o[44] = {1, 1, 5, 2 + 4 * 8};
	for (uint8_t i = 0; i < 32; i++)
		o[4 + i] = i;
	struct sluice_tcp_seg s;
	cr_assert_eq(parse_options_in_segment(o, 36, &s), SLUICE_WIRE_OK);
	cr_expect_eq(s.sack_n, 4);
	cr_expect_eq(s.sack[0].left, 0x00010203);
	cr_expect_eq(s.sack[3].right, 0x1c1d1e1f);
	o[3] = 2 + 5 * 8;
	cr_expect_eq(sluice_wire_tcp_options_parse(o, sizeof o, &s), SLUICE_WIRE_TCP_OPTION);
	cr_expect_eq(sluice_wire_tcp_options_parse(o, 42, &s), SLUICE_WIRE_TCP_OPTION);
}

/* Proves unknown options are skipped by their length (and the ones after
 * them read), EOL ends the list (what follows it is ignored), and a later
 * duplicate wins. */
Test(stack_wire, tcp_unknown_options_and_eol)
{
	static const uint8_t o[] = {30, 6, 0xde, 0xad, 0xbe, 0xef, /* MPTCP-like, unknown here */
				    254, 4, 0xf9, 0x89,          /* experimental (RFC 6994) */
				    8, 10, 0, 0, 0, 9, 0, 0, 0, 3, 2, 4, 0x05, 0xb4, 2, 4, 0x23, 0x28,
				    0, 2, 0, 0}; /* EOL, then a malformed length that is never read */
	struct sluice_tcp_seg s;
	cr_assert_eq(parse_options_in_segment(o, sizeof o, &s), SLUICE_WIRE_OK);
	cr_expect(s.has_ts);
	cr_expect_eq(s.ts_val, 9);
	cr_expect_eq(s.ts_ecr, 3);
	cr_expect_eq(s.mss, 9000, "the later MSS");
	cr_expect_eq(s.wscale, -1);
	cr_expect(!s.sack_permitted);
	/* an empty option area and one of NOPs say "absent" for everything */
	static const uint8_t nops[] = {1, 1, 1, 1};
	cr_assert_eq(parse_options_in_segment(nops, sizeof nops, &s), SLUICE_WIRE_OK);
	cr_expect(s.mss == 0 && s.wscale == -1 && !s.has_ts && !s.sack_permitted && s.sack_n == 0);
}

/* Proves a window scale above 14 is taken as 14 (RFC 7323 2.3). */
Test(stack_wire, tcp_wscale_capped)
{
	static const uint8_t shifts[] = {14, 15, 200, 255};
	for (size_t i = 0; i < sizeof shifts; i++) {
		uint8_t o[4] = {1, 3, 3, shifts[i]};
		struct sluice_tcp_seg s;
		cr_assert_eq(parse_options_in_segment(o, 4, &s), SLUICE_WIRE_OK);
		cr_expect_eq(s.wscale, 14, "shift %u", shifts[i]);
	}
}

/* Proves the data offset is checked (below 5, or past the segment), a
 * segment under 20 bytes is short, a bad checksum is caught (payload,
 * header or pseudo-header address), and TCP to or from a broadcast or
 * multicast address is dropped. */
Test(stack_wire, tcp_header_refusals)
{
	const uint8_t *tcp = linux_syn + 34;
	uint32_t sa = IP4(10, 0, 0, 2), da = IP4(10, 0, 0, 1);
	struct sluice_tcp_seg s;
	uint8_t b[40];
	cr_assert_eq(sluice_wire_tcp_parse(tcp, 40, sa, da, &s), SLUICE_WIRE_OK);
	for (uint8_t doff = 0; doff < 5; doff++) {
		memcpy(b, tcp, 40);
		b[12] = (uint8_t)(doff << 4);
		tcp_csum_fix(b, 40, sa, da);
		cr_expect_eq(sluice_wire_tcp_parse(b, 40, sa, da, &s), SLUICE_WIRE_TCP_OFFSET, "doff %u", doff);
	}
	memcpy(b, tcp, 40);
	b[12] = 0xb0; /* 44 bytes of header in 40 */
	tcp_csum_fix(b, 40, sa, da);
	cr_expect_eq(sluice_wire_tcp_parse(b, 40, sa, da, &s), SLUICE_WIRE_TCP_OFFSET);
	b[12] = 0xf0;
	tcp_csum_fix(b, 40, sa, da);
	cr_expect_eq(sluice_wire_tcp_parse(b, 40, sa, da, &s), SLUICE_WIRE_TCP_OFFSET);
	for (size_t len = 0; len < 20; len++)
		cr_expect_eq(sluice_wire_tcp_parse(tcp, len, sa, da, &s), SLUICE_WIRE_SHORT);
	memcpy(b, tcp, 40);
	b[4] ^= 0x01;
	cr_expect_eq(sluice_wire_tcp_parse(b, 40, sa, da, &s), SLUICE_WIRE_TCP_CHECKSUM);
	cr_expect_eq(sluice_wire_tcp_parse(tcp, 40, sa + 1, da, &s), SLUICE_WIRE_TCP_CHECKSUM, "pseudo-header");
	/* a bad checksum in a whole frame */
	uint8_t f[sizeof linux_syn];
	memcpy(f, linux_syn, sizeof f);
	f[sizeof f - 1] ^= 0x02;
	struct sluice_wire_pkt pkt;
	cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
	cr_expect_eq(pkt.reason, SLUICE_WIRE_TCP_CHECKSUM);
	/* broadcast and multicast destinations and sources */
	static const uint32_t group[] = {0xffffffffu, IP4(224, 0, 0, 1), IP4(239, 255, 255, 250)};
	for (size_t i = 0; i < 3; i++)
		for (int side = 0; side < 2; side++) {
			memcpy(f, linux_syn, sizeof f);
			uint8_t *a = f + 26 + 4 * side;
			a[0] = (uint8_t)(group[i] >> 24), a[1] = (uint8_t)(group[i] >> 16);
			a[2] = (uint8_t)(group[i] >> 8), a[3] = (uint8_t)group[i];
			ip_csum_fix(f + 14);
			cr_expect_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
			cr_expect_eq(pkt.reason, SLUICE_WIRE_TCP_ADDRESS);
		}
}

/* Proves a data segment's payload is borrowed from the frame, Ethernet
 * padding after a short segment is not taken as payload, and the payload
 * may already sit where the frame builder puts it. */
Test(stack_wire, tcp_payload_and_padding)
{
	uint8_t f[FRAME_BYTES_MAX];
	static const uint8_t data[3] = {'a', 'b', 'c'};
	struct sluice_tcp_seg s = {.saddr = IP4(10, 0, 0, 1), .daddr = IP4(10, 0, 0, 2), .sport = 1, .dport = 2,
				   .flags = SLUICE_TCP_ACK | SLUICE_TCP_PSH, .wscale = -1, .payload = data,
				   .payload_len = 3};
	size_t n = sluice_wire_tcp_frame_build(f, sizeof f, &mac_host, &mac_us, 1, &s);
	cr_assert_eq(n, 60, "57 bytes padded");
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(f, n, &pkt), SLUICE_WIRE_TCP);
	cr_expect_eq(pkt.tcp.payload_len, 3);
	cr_expect_eq(pkt.tcp.payload, f + 54);
	cr_expect_eq(memcmp(pkt.tcp.payload, "abc", 3), 0);
	/* in place: the payload already at offset 54 */
	uint8_t g[FRAME_BYTES_MAX];
	memcpy(g + 54, "hello, broker", 13);
	s.payload = g + 54, s.payload_len = 13;
	n = sluice_wire_tcp_frame_build(g, sizeof g, &mac_host, &mac_us, 1, &s);
	cr_assert_eq(n, 67);
	cr_assert_eq(sluice_wire_classify(g, n, &pkt), SLUICE_WIRE_TCP);
	cr_expect_eq(memcmp(pkt.tcp.payload, "hello, broker", 13), 0);
}

/* What a NIC with checksum offloads does to a frame built for it: the IPv4
 * header's checksum over the header (its field 0), and TCP's over the
 * segment, whose field holds the pseudo-header's sum (RFC 1071: summing it
 * in stands for summing the pseudo-header). */
static void nic_fills_checksums(uint8_t *f, size_t n)
{
	uint8_t *ip = f + 14;
	size_t ip_len = (size_t)(ip[2] << 8 | ip[3]);
	cr_assert_eq(ip[10] | ip[11], 0, "the IPv4 checksum is left 0 for the NIC");
	uint16_t v = sluice_wire_csum(ip, 20);
	ip[10] = (uint8_t)(v >> 8), ip[11] = (uint8_t)v;
	cr_assert_leq(14 + ip_len, n);
	v = sluice_wire_csum(ip + 20, ip_len - 20);
	ip[36] = (uint8_t)(v >> 8), ip[37] = (uint8_t)v;
}

/* Proves a frame built for checksum offload, once the NIC has filled the
 * checksums in, is the very frame the software path builds, byte for byte,
 * for data segments of every length parity and a pure ACK. */
Test(stack_wire, tcp_offload_build_is_the_software_frame_once_filled)
{
	static uint8_t data[1460];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7 + 3);
	const uint32_t lens[] = {0, 1, 2, 3, 517, 1448, 1460};
	for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
		struct sluice_tcp_seg s = {.saddr = IP4(198, 18, 0, 2), .daddr = IP4(198, 18, 0, 1), .sport = 9092,
					   .dport = 40123, .seq = 0xfffffff0u, .ack = 12345, .window = 2048,
					   .flags = SLUICE_TCP_ACK | (lens[k] ? SLUICE_TCP_PSH : 0), .wscale = -1,
					   .has_ts = true, .ts_val = 99, .ts_ecr = 7, .payload = data,
					   .payload_len = lens[k]};
		uint8_t soft[FRAME_BYTES_MAX], off[FRAME_BYTES_MAX];
		size_t a = sluice_wire_tcp_frame_build(soft, sizeof soft, &mac_host, &mac_us, 42, &s);
		size_t b = sluice_wire_tcp_frame_build_offload(off, sizeof off, &mac_host, &mac_us, 42, &s,
								SLUICE_WIRE_CSUM_IP | SLUICE_WIRE_CSUM_TCP);
		cr_assert_eq(a, b);
		cr_assert_neq(memcmp(soft, off, a), 0, "length %u: the offload frame lacks its checksums", lens[k]);
		nic_fills_checksums(off, b);
		cr_assert_eq(memcmp(soft, off, a), 0, "length %u: differs once the NIC filled it in", lens[k]);
	}
}

/* Proves the headers built for a payload kept elsewhere (the DPDK
 * transport's zero-copy frames: headers in one buffer, the payload in
 * pieces after them), once the pieces are placed after them, make the very
 * frame the whole-frame builder makes, in software and with offloads, for
 * payloads split at odd and even places; and that a frame too short to
 * need no padding is refused (the caller builds it whole). */
Test(stack_wire, tcp_headers_for_a_payload_in_pieces)
{
	static uint8_t data[1448];
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 13 + 5);
	const size_t cuts[][3] = {{1448, 0, 0}, {1, 1447, 0}, {333, 1000, 115}, {700, 3, 745}, {0, 1448, 0}};
	for (unsigned off = 0; off <= SLUICE_WIRE_CSUM_TCP; off += SLUICE_WIRE_CSUM_TCP)
		for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
			struct sluice_tcp_seg s = {.saddr = IP4(198, 18, 0, 2), .daddr = IP4(198, 18, 0, 1), .sport = 9092,
						   .dport = 40123, .seq = 77, .ack = 12345, .window = 2048,
						   .flags = SLUICE_TCP_ACK | SLUICE_TCP_PSH, .wscale = -1, .has_ts = true,
						   .ts_val = 99, .ts_ecr = 7, .payload = data, .payload_len = sizeof data};
			uint8_t whole[FRAME_BYTES_MAX], parts[FRAME_BYTES_MAX];
			size_t a = sluice_wire_tcp_frame_build_offload(whole, sizeof whole, &mac_host, &mac_us, 42, &s, off);
			struct sluice_wire_piece pieces[3];
			size_t at = 0;
			for (int i = 0; i < 3; i++) {
				pieces[i] = (struct sluice_wire_piece){data + at, cuts[k][i]};
				at += cuts[k][i];
			}
			cr_assert_eq(at, sizeof data);
			s.payload = NULL;
			size_t h = sluice_wire_tcp_headers_build(parts, sizeof parts, &mac_host, &mac_us, 42, &s, pieces, 3, off);
			cr_assert_eq(h, 14 + 20 + 20 + 12);
			memcpy(parts + h, data, sizeof data);
			cr_assert_eq(a, h + sizeof data);
			cr_assert_eq(memcmp(whole, parts, a), 0, "cut %zu, offload %u: the frames differ", k, off);
			if (!off) {
				struct sluice_wire_pkt pkt;
				cr_assert_eq(sluice_wire_classify(parts, a, &pkt), SLUICE_WIRE_TCP, "checksums good");
			}
		}
	static const uint8_t few[3] = {1, 2, 3};
	struct sluice_wire_piece p = {few, 3};
	struct sluice_tcp_seg s = {.saddr = IP4(10, 0, 0, 1), .daddr = IP4(10, 0, 0, 2), .sport = 1, .dport = 2,
				   .flags = SLUICE_TCP_ACK, .wscale = -1, .payload_len = 3};
	uint8_t f[FRAME_BYTES_MAX];
	cr_assert_eq(sluice_wire_tcp_headers_build(f, sizeof f, &mac_host, &mac_us, 1, &s, &p, 1, 0), 0, "57 bytes: padding");
}

/* Proves what the NIC verified is not checked again, and only that: a
 * frame with a bad TCP checksum passes when the NIC vouched for TCP, a bad
 * IPv4 header checksum when it vouched for IPv4, neither otherwise; ICMP's
 * is checked whatever the NIC said. */
Test(stack_wire, classify_trusts_only_what_the_nic_verified)
{
	uint8_t f[sizeof linux_syn];
	struct sluice_wire_pkt pkt;
	memcpy(f, linux_syn, sizeof f);
	f[14 + 20 + 16] ^= 0x01; /* the TCP checksum */
	cr_assert_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
	cr_assert_eq(pkt.reason, SLUICE_WIRE_TCP_CHECKSUM);
	cr_assert_eq(sluice_wire_classify_verified(f, sizeof f, &pkt, SLUICE_WIRE_CSUM_IP), SLUICE_WIRE_DROP);
	cr_assert_eq(sluice_wire_classify_verified(f, sizeof f, &pkt, SLUICE_WIRE_CSUM_TCP), SLUICE_WIRE_TCP);
	memcpy(f, linux_syn, sizeof f);
	f[14 + 10] ^= 0x01; /* the IPv4 header checksum */
	cr_assert_eq(sluice_wire_classify(f, sizeof f, &pkt), SLUICE_WIRE_DROP);
	cr_assert_eq(pkt.reason, SLUICE_WIRE_IP_CHECKSUM);
	cr_assert_eq(sluice_wire_classify_verified(f, sizeof f, &pkt, SLUICE_WIRE_CSUM_TCP), SLUICE_WIRE_DROP);
	cr_assert_eq(sluice_wire_classify_verified(f, sizeof f, &pkt, SLUICE_WIRE_CSUM_IP), SLUICE_WIRE_TCP);
	uint8_t g[sizeof linux_ping];
	memcpy(g, linux_ping, sizeof g);
	g[14 + 20 + 2] ^= 0x01; /* the ICMP checksum */
	cr_assert_eq(sluice_wire_classify_verified(g, sizeof g, &pkt, SLUICE_WIRE_CSUM_IP | SLUICE_WIRE_CSUM_TCP),
		     SLUICE_WIRE_DROP);
	cr_assert_eq(pkt.reason, SLUICE_WIRE_ICMP_CHECKSUM);
}

/* Proves every reason has a distinct name (the drop counters' labels). */
Test(stack_wire, reason_names)
{
	for (int a = 0; a < SLUICE_WIRE_REASONS; a++) {
		cr_expect_str_neq(sluice_wire_reason_name(a), "unknown", "reason %d", a);
		for (int b = a + 1; b < SLUICE_WIRE_REASONS; b++)
			cr_expect_str_neq(sluice_wire_reason_name(a), sluice_wire_reason_name(b));
	}
	cr_expect_str_eq(sluice_wire_reason_name(SLUICE_WIRE_REASONS), "unknown");
}

/* Proves the classifier never accepts random bytes as anything but what
 * they check out as, and never reads past them (ASan runs say the latter):
 * random mutations of the three Linux frames. */
Test(stack_wire, classify_mutations)
{
	const uint8_t *frames[] = {linux_arp_request, linux_syn, linux_ping};
	const size_t lens[] = {sizeof linux_arp_request, sizeof linux_syn, sizeof linux_ping};
	uint8_t f[128];
	for (int round = 0; round < 30000; round++) {
		size_t k = (size_t)round % 3;
		memcpy(f, frames[k], lens[k]);
		size_t len = rng() % 4 ? lens[k] : rng() % (lens[k] + 1);
		for (int m = 0; m < 1 + round % 3; m++)
			f[rng() % lens[k]] ^= (uint8_t)(1u << (rng() % 8));
		struct sluice_wire_pkt pkt;
		enum sluice_wire_kind kind = sluice_wire_classify(f, len, &pkt);
		cr_assert((kind == SLUICE_WIRE_DROP) == (pkt.reason != SLUICE_WIRE_OK));
		if (kind == SLUICE_WIRE_TCP)
			cr_assert(pkt.tcp.payload + pkt.tcp.payload_len <= f + len);
		if (kind == SLUICE_WIRE_ICMP_ECHO)
			cr_assert(pkt.icmp + pkt.icmp_len <= f + len);
	}
}

/* --- The ARP cache ------------------------------------------------------ */

#define OWN_IP IP4(192, 168, 122, 10)
#define HOST_IP IP4(192, 168, 122, 1)
#define TTL_MS 60000
#define RELEASED_MAX 1024

/* Every packet the cache hands back for freeing, in order. */
struct released {
	int n;
	void *pkt[RELEASED_MAX];
};

static struct released released;
static struct sluice_arp_cache cache;
static char pkts[SLUICE_ARP_ENTRIES_MAX + 64]; /* their addresses are the "packets" */

static void on_release(void *pkt, void *arg)
{
	struct released *r = arg;
	cr_assert_lt(r->n, RELEASED_MAX);
	r->pkt[r->n++] = pkt;
}

static void cache_setup(void)
{
	memset(&released, 0, sizeof released);
	sluice_arp_init(&cache, OWN_IP, &mac_us, TTL_MS, on_release, &released);
}

static struct sluice_arp_pkt arp_from(uint16_t op, const struct sluice_eth_addr *sha, uint32_t spa, uint32_t tpa)
{
	struct sluice_arp_pkt a = {.op = op, .sha = *sha, .spa = spa, .tpa = tpa};
	return a;
}

/* Proves the Linux host's request for our address is stored (RFC 826: it
 * is for us), answered, and then looked up; a request for another address
 * from an unknown sender is not stored, but one from a known sender
 * updates it (the merge rule), and a reply for us from a new sender is
 * stored. */
Test(stack_arp, input_merge_rule_and_lookup)
{
	cache_setup();
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(linux_arp_request, sizeof linux_arp_request, &pkt), SLUICE_WIRE_ARP);
	struct sluice_arp_input_result r;
	sluice_arp_input(&cache, &pkt.arp, 1000, &r);
	cr_expect(r.reply);
	cr_expect(r.merged);
	cr_expect(!r.conflict);
	cr_expect_eq(r.ready_n, 0);
	struct sluice_eth_addr mac;
	cr_assert(sluice_arp_lookup(&cache, HOST_IP, 1001, &mac));
	cr_expect_eq(memcmp(mac.b, mac_host.b, 6), 0);
	cr_expect_eq(cache.n, 1);

	/* a stranger asking for someone else: neither stored nor answered */
	struct sluice_eth_addr other = {{0x52, 0x54, 0x00, 0, 0, 9}};
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REQUEST, &other, IP4(192, 168, 122, 9), IP4(192, 168, 122, 7));
	sluice_arp_input(&cache, &a, 1002, &r);
	cr_expect(!r.reply && !r.merged);
	cr_expect(!sluice_arp_lookup(&cache, IP4(192, 168, 122, 9), 1003, &mac));
	/* the known host moving to a new MAC, seen in a request not for us: merged */
	a = arp_from(SLUICE_ARP_OP_REQUEST, &other, HOST_IP, IP4(192, 168, 122, 7));
	sluice_arp_input(&cache, &a, 1004, &r);
	cr_expect(r.merged && !r.reply);
	cr_assert(sluice_arp_lookup(&cache, HOST_IP, 1005, &mac));
	cr_expect_eq(memcmp(mac.b, other.b, 6), 0);
	/* a reply for us from a new sender: stored, not answered */
	a = arp_from(SLUICE_ARP_OP_REPLY, &other, IP4(192, 168, 122, 9), OWN_IP);
	sluice_arp_input(&cache, &a, 1006, &r);
	cr_expect(r.merged && !r.reply);
	cr_expect(sluice_arp_lookup(&cache, IP4(192, 168, 122, 9), 1007, &mac));
	cr_expect_eq(cache.n, 2);
}

/* Proves senders that cannot be neighbours are never stored: a group
 * MAC, address 0 (an RFC 5227 probe, which is still answered), a
 * multicast address, and a claim to our own address (reported as a
 * conflict, not answered). */
Test(stack_arp, input_ignores_impossible_senders)
{
	cache_setup();
	struct sluice_arp_input_result r;
	struct sluice_eth_addr group = {{0x01, 0x00, 0x5e, 0, 0, 1}};
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REPLY, &group, HOST_IP, OWN_IP);
	sluice_arp_input(&cache, &a, 1, &r);
	cr_expect(!r.merged);
	a = arp_from(SLUICE_ARP_OP_REQUEST, &mac_host, 0, OWN_IP); /* probe */
	sluice_arp_input(&cache, &a, 2, &r);
	cr_expect(!r.merged);
	cr_expect(r.reply, "a probe for our address is answered (RFC 5227 2.1.1)");
	a = arp_from(SLUICE_ARP_OP_REPLY, &mac_host, IP4(224, 0, 0, 5), OWN_IP);
	sluice_arp_input(&cache, &a, 3, &r);
	cr_expect(!r.merged);
	a = arp_from(SLUICE_ARP_OP_REQUEST, &mac_host, OWN_IP, OWN_IP); /* someone announcing our address */
	sluice_arp_input(&cache, &a, 4, &r);
	cr_expect(!r.merged && !r.reply && r.conflict);
	cr_expect_eq(cache.n, 0);
	cr_expect_eq(cache.stats.ignored, 4);
	cr_expect_eq(cache.stats.conflicts, 1);
}

/* Proves an entry expires at its TTL: looked up until then, not after,
 * and removed by tick. */
Test(stack_arp, expiry)
{
	cache_setup();
	struct sluice_arp_input_result r;
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REPLY, &mac_host, HOST_IP, OWN_IP);
	sluice_arp_input(&cache, &a, 10000, &r);
	struct sluice_eth_addr mac;
	cr_expect(sluice_arp_lookup(&cache, HOST_IP, 10000 + TTL_MS - 1, &mac));
	cr_expect(!sluice_arp_lookup(&cache, HOST_IP, 10000 + TTL_MS, &mac));
	uint32_t retry[4];
	sluice_arp_tick(&cache, 10000 + TTL_MS - 1, retry, 4);
	cr_expect_eq(cache.n, 1);
	cr_expect_eq(sluice_arp_tick(&cache, 10000 + TTL_MS, retry, 4), 0);
	cr_expect_eq(cache.n, 0);
}

/* Proves resolve asks for at most one request per SLUICE_ARP_RETRY_MS,
 * queues the packets meanwhile, hands them out in order when the reply
 * comes, and then hits. */
Test(stack_arp, resolve_rate_limited_then_resolved)
{
	cache_setup();
	struct sluice_eth_addr mac;
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[0], 0, &mac), SLUICE_ARP_QUEUED_REQUEST);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[1], 1, &mac), SLUICE_ARP_QUEUED);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, NULL, SLUICE_ARP_RETRY_MS - 1, &mac), SLUICE_ARP_QUEUED);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[2], SLUICE_ARP_RETRY_MS, &mac),
		     SLUICE_ARP_QUEUED_REQUEST);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, NULL, SLUICE_ARP_RETRY_MS + 1, &mac), SLUICE_ARP_QUEUED);
	cr_expect(!sluice_arp_lookup(&cache, HOST_IP, 1500, &mac));
	struct sluice_arp_input_result r;
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REPLY, &mac_host, HOST_IP, OWN_IP);
	sluice_arp_input(&cache, &a, 1600, &r);
	cr_assert_eq(r.ready_n, 3);
	cr_expect(r.ready[0] == &pkts[0] && r.ready[1] == &pkts[1] && r.ready[2] == &pkts[2]);
	cr_expect_eq(memcmp(r.mac.b, mac_host.b, 6), 0);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[3], 1601, &mac), SLUICE_ARP_HIT);
	cr_expect_eq(memcmp(mac.b, mac_host.b, 6), 0);
	cr_expect_eq(released.n, 0, "nothing freed: all were handed out");
}

/* Proves the pending queue is bounded: past SLUICE_ARP_PENDING_MAX the
 * oldest packets are handed back for freeing, in order, and the reply
 * hands out the newest ones, oldest first. */
Test(stack_arp, pending_overflow_releases_oldest)
{
	cache_setup();
	struct sluice_eth_addr mac;
	int total = SLUICE_ARP_PENDING_MAX + 3;
	for (int i = 0; i < total; i++)
		sluice_arp_resolve(&cache, HOST_IP, &pkts[i], i, &mac);
	cr_assert_eq(released.n, 3);
	for (int i = 0; i < 3; i++)
		cr_expect(released.pkt[i] == &pkts[i], "released %d in order", i);
	cr_expect_eq(cache.stats.pending_dropped, 3);
	struct sluice_arp_input_result r;
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REPLY, &mac_host, HOST_IP, OWN_IP);
	sluice_arp_input(&cache, &a, 100, &r);
	cr_assert_eq(r.ready_n, SLUICE_ARP_PENDING_MAX);
	for (int i = 0; i < SLUICE_ARP_PENDING_MAX; i++)
		cr_expect(r.ready[i] == &pkts[3 + i]);
}

/* Proves a full table evicts the least recently used entry (a lookup
 * counts as use), handing back the packets it held, and that the table
 * never holds more than SLUICE_ARP_ENTRIES_MAX entries. */
Test(stack_arp, lru_eviction)
{
	cache_setup();
	struct sluice_eth_addr mac;
	for (int i = 0; i < SLUICE_ARP_ENTRIES_MAX; i++)
		cr_assert_eq(sluice_arp_resolve(&cache, IP4(10, 1, 0, 1) + (uint32_t)i, &pkts[i], i, &mac),
			     SLUICE_ARP_QUEUED_REQUEST);
	cr_assert_eq(cache.n, SLUICE_ARP_ENTRIES_MAX);
	/* entry 0 becomes resolved and used recently; entry 1 is now the LRU */
	struct sluice_arp_input_result r;
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REPLY, &mac_host, IP4(10, 1, 0, 1), OWN_IP);
	sluice_arp_input(&cache, &a, 500, &r);
	cr_expect_eq(r.ready_n, 1);
	cr_expect(sluice_arp_lookup(&cache, IP4(10, 1, 0, 1), 600, &mac));
	cr_expect_eq(sluice_arp_resolve(&cache, IP4(10, 2, 0, 1), &pkts[300], 700, &mac), SLUICE_ARP_QUEUED_REQUEST);
	cr_expect_eq(cache.n, SLUICE_ARP_ENTRIES_MAX);
	cr_expect_eq(cache.stats.evicted, 1);
	cr_assert_eq(released.n, 1);
	cr_expect(released.pkt[0] == &pkts[1], "the evicted entry's packet is handed back");
	cr_expect(sluice_arp_lookup(&cache, IP4(10, 1, 0, 1), 701, &mac), "the recently used entry stays");
	/* a request for us from a new sender also evicts (entry 2 now) */
	a = arp_from(SLUICE_ARP_OP_REQUEST, &mac_host, IP4(10, 3, 0, 1), OWN_IP);
	sluice_arp_input(&cache, &a, 800, &r);
	cr_expect(r.merged);
	cr_expect_eq(cache.stats.evicted, 2);
	cr_expect(released.pkt[1] == &pkts[2]);
	sluice_arp_fini(&cache);
	/* 2 evicted, then entries 3..255 and the new one: every packet once */
	cr_expect_eq(released.n, 2 + (SLUICE_ARP_ENTRIES_MAX - 3) + 1, "fini hands back every packet still held");
	cr_expect_eq(cache.n, 0);
}

/* Proves an address whose requests go unanswered fails: after
 * SLUICE_ARP_REQUESTS_MAX requests a retry period later its packets are
 * handed back; resolve starts over, and tick alone retries (listing the
 * address, at most retry_cap of them) and then removes the entry. */
Test(stack_arp, unanswered_requests_fail)
{
	cache_setup();
	struct sluice_eth_addr mac;
	int64_t t = 0;
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[0], t, &mac), SLUICE_ARP_QUEUED_REQUEST);
	for (int i = 1; i < SLUICE_ARP_REQUESTS_MAX; i++) {
		t += SLUICE_ARP_RETRY_MS;
		cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[i], t, &mac), SLUICE_ARP_QUEUED_REQUEST);
	}
	cr_expect_eq(released.n, 0);
	t += SLUICE_ARP_RETRY_MS;
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[10], t, &mac), SLUICE_ARP_QUEUED_REQUEST, "started over");
	cr_expect_eq(released.n, SLUICE_ARP_REQUESTS_MAX, "the packets that waited in vain are freed");
	cr_expect_eq(cache.stats.failed, 1);

	/* tick alone: retries due, at most retry_cap listed, then gives up */
	cache_setup();
	for (int i = 0; i < 3; i++)
		sluice_arp_resolve(&cache, IP4(10, 9, 0, 1) + (uint32_t)i, &pkts[i], 0, &mac);
	uint32_t retry[3];
	cr_expect_eq(sluice_arp_tick(&cache, SLUICE_ARP_RETRY_MS - 1, retry, 3), 0, "not due yet");
	cr_expect_eq(sluice_arp_tick(&cache, SLUICE_ARP_RETRY_MS, retry, 2), 2, "capped");
	cr_expect_eq(sluice_arp_tick(&cache, SLUICE_ARP_RETRY_MS, retry, 3), 1, "the one left out");
	cr_expect_eq(retry[0], IP4(10, 9, 0, 3));
	t = SLUICE_ARP_RETRY_MS;
	for (int i = 2; i < SLUICE_ARP_REQUESTS_MAX; i++) {
		t += SLUICE_ARP_RETRY_MS;
		cr_expect_eq(sluice_arp_tick(&cache, t, retry, 3), 3);
	}
	cr_expect_eq(cache.n, 3);
	t += SLUICE_ARP_RETRY_MS;
	cr_expect_eq(sluice_arp_tick(&cache, t, retry, 3), 0);
	cr_expect_eq(cache.n, 0);
	cr_expect_eq(released.n, 3);
	cr_expect_eq(cache.stats.failed, 3);
}

/* Proves a resolved entry is refreshed before it expires: in its last
 * SLUICE_ARP_REFRESH_MS resolve still hits but asks for a request (rate
 * limited), a reply extends it, and past the TTL without one it is
 * unresolved again (the packet queued, a request asked for). */
Test(stack_arp, refresh_before_expiry)
{
	cache_setup();
	struct sluice_arp_input_result r;
	struct sluice_arp_pkt a = arp_from(SLUICE_ARP_OP_REPLY, &mac_host, HOST_IP, OWN_IP);
	sluice_arp_input(&cache, &a, 0, &r);
	struct sluice_eth_addr mac;
	int64_t window = TTL_MS - SLUICE_ARP_REFRESH_MS;
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[0], window - 1, &mac), SLUICE_ARP_HIT);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[0], window, &mac), SLUICE_ARP_HIT_REFRESH);
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[0], window + 1, &mac), SLUICE_ARP_HIT);
	uint32_t retry[1];
	cr_expect_eq(sluice_arp_tick(&cache, window + SLUICE_ARP_RETRY_MS, retry, 1), 1, "tick refreshes too");
	cr_expect_eq(retry[0], HOST_IP);
	sluice_arp_input(&cache, &a, window + 1500, &r); /* the answer */
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[0], TTL_MS + 100, &mac), SLUICE_ARP_HIT, "extended");
	/* no answer this time: past the TTL the packet waits */
	int64_t expiry = window + 1500 + TTL_MS;
	cr_expect_eq(sluice_arp_resolve(&cache, HOST_IP, &pkts[1], expiry, &mac), SLUICE_ARP_QUEUED_REQUEST);
	cr_expect_eq(released.n, 0);
}

/* Proves the gratuitous ARP is a broadcast request with sender and target
 * address our own, from our MAC, that parses back as such. */
Test(stack_arp, announce)
{
	cache_setup();
	uint8_t f[FRAME_BYTES_MAX];
	size_t n = sluice_arp_announce(&cache, f, sizeof f);
	cr_assert_eq(n, SLUICE_ETH_FRAME_MIN);
	struct sluice_wire_pkt pkt;
	cr_assert_eq(sluice_wire_classify(f, n, &pkt), SLUICE_WIRE_ARP);
	cr_expect(sluice_eth_addr_is_group(&pkt.eth.dst));
	cr_expect_eq(memcmp(pkt.eth.src.b, mac_us.b, 6), 0);
	cr_expect_eq(pkt.arp.op, SLUICE_ARP_OP_REQUEST);
	cr_expect_eq(pkt.arp.spa, OWN_IP);
	cr_expect_eq(pkt.arp.tpa, OWN_IP);
	cr_expect_eq(memcmp(pkt.arp.sha.b, mac_us.b, 6), 0);
	cr_expect_eq(sluice_arp_announce(&cache, f, SLUICE_ETH_FRAME_MIN - 1), 0);
	/* our own announcement looped back is neither a conflict nor stored */
	struct sluice_arp_input_result r;
	sluice_arp_input(&cache, &pkt.arp, 1, &r);
	cr_expect(!r.conflict && !r.merged && !r.reply);
}
