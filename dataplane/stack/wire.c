/* Packet codecs of Sluice's own TCP/IP stack (issue 14): Ethernet, ARP,
 * IPv4, ICMP echo and TCP headers with their checksums, parsed from and
 * built into plain byte buffers (the DPDK layer hands mbuf data to them).
 * Decoders read only through the get/put helpers below after checking the
 * bytes left, so that a hostile frame can make them refuse but never read
 * past what they were given; see wire.h for each contract. */
#include "dataplane/stack/wire.h"
#include <assert.h>
#include <string.h>

_Static_assert(SLUICE_TCP_ACK == 0x10, "flag bits as on the wire");

/* TCP option kinds and lengths (RFC 9293 3.2, RFC 7323, RFC 2018). */
enum {
	TCPOPT_EOL = 0,
	TCPOPT_NOP = 1,
	TCPOPT_MSS = 2,
	TCPOPT_WSCALE = 3,
	TCPOPT_SACK_PERMITTED = 4,
	TCPOPT_SACK = 5,
	TCPOPT_TIMESTAMPS = 8,
};
#define TCPOLEN_MSS 4
#define TCPOLEN_WSCALE 3
#define TCPOLEN_SACK_PERMITTED 2
#define TCPOLEN_SACK_BLOCK 8
#define TCPOLEN_TIMESTAMPS 10
/* The TCP segment length the pseudo-header's 16-bit field can carry inside
 * one IPv4 packet. */
#define TCP_SEGMENT_LEN_MAX (SLUICE_IPV4_TOTAL_LEN_MAX - SLUICE_IPV4_HDR_LEN)

static inline uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static inline void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

const char *sluice_wire_reason_name(enum sluice_wire_reason r)
{
	static const char *const names[SLUICE_WIRE_REASONS] = {
		[SLUICE_WIRE_OK] = "ok",
		[SLUICE_WIRE_SHORT] = "short",
		[SLUICE_WIRE_VLAN] = "vlan",
		[SLUICE_WIRE_ETHERTYPE] = "ethertype",
		[SLUICE_WIRE_ARP_FORMAT] = "arp_format",
		[SLUICE_WIRE_IP_VERSION] = "ip_version",
		[SLUICE_WIRE_IP_HEADER_LEN] = "ip_header_len",
		[SLUICE_WIRE_IP_TOTAL_LEN] = "ip_total_len",
		[SLUICE_WIRE_IP_CHECKSUM] = "ip_checksum",
		[SLUICE_WIRE_FRAGMENT] = "fragment",
		[SLUICE_WIRE_PROTOCOL] = "protocol",
		[SLUICE_WIRE_ICMP_TYPE] = "icmp_type",
		[SLUICE_WIRE_ICMP_CHECKSUM] = "icmp_checksum",
		[SLUICE_WIRE_TCP_OFFSET] = "tcp_offset",
		[SLUICE_WIRE_TCP_CHECKSUM] = "tcp_checksum",
		[SLUICE_WIRE_TCP_OPTION] = "tcp_option",
		[SLUICE_WIRE_TCP_ADDRESS] = "tcp_address",
	};
	if ((unsigned)r >= SLUICE_WIRE_REASONS || names[r] == NULL)
		return "unknown";
	return names[r];
}

/* --- The Internet checksum --------------------------------------------------
 * The sum is kept in 64 bits of big-endian 32-bit words: since 2^16 is 1
 * modulo 2^16 - 1, folding that sum gives the ones' complement sum of the
 * 16-bit words (RFC 1071 2.(B)), four bytes a step, and 64 bits cannot
 * carry out for any buffer a packet can be. Long runs are summed in the
 * machine's own byte order, eight bytes a step (a loop the compiler
 * vectorises): the ones' complement sum is independent of byte order up
 * to swapping the two bytes of the result (RFC 1071 2.(B) again), so the
 * run's folded sum, swapped on a little-endian machine, joins the rest. It
 * is the checksum of every payload byte the DPDK transport sends or
 * receives without a NIC's offload (net_memif has none): the hottest loop
 * of a large Fetch response there. */

void sluice_wire_csum_init(struct sluice_wire_csum *c)
{
	c->sum = 0;
	c->odd = false;
}

static uint16_t csum_fold(uint64_t sum);

/* The folded ones' complement sum of len bytes (len even) as big-endian
 * 16-bit words. */
static uint64_t csum_run(const uint8_t *p, size_t len)
{
	uint64_t a = 0, b = 0;
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t v;
		memcpy(&v, p, sizeof v);
		a += v & 0xffffffffu;
		b += v >> 32;
	}
	uint64_t rest = 0;
	memcpy(&rest, p, len); /* 0, 2, 4 or 6 bytes, in the same lanes as the words above */
	a += rest & 0xffffffffu;
	b += rest >> 32;
	uint16_t native = csum_fold(csum_fold(a) + (uint64_t)csum_fold(b));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (uint16_t)(native << 8 | native >> 8);
#else
	return native;
#endif
}

void sluice_wire_csum_add(struct sluice_wire_csum *c, const uint8_t *p, size_t len)
{
	assert(p != NULL || len == 0);
	if (len == 0)
		return;
	if (c->odd) { /* this byte is the low half of the previous piece's last word */
		c->sum += p[0];
		p++;
		len--;
		c->odd = false;
	}
	uint64_t sum = c->sum;
	if (len >= 64) {
		size_t run = len & ~(size_t)1;
		sum += csum_run(p, run);
		p += run;
		len -= run;
	}
	for (; len >= 4; p += 4, len -= 4)
		sum += get32(p);
	if (len >= 2) {
		sum += get16(p);
		p += 2;
		len -= 2;
	}
	if (len == 1) {
		sum += (uint64_t)p[0] << 8;
		c->odd = true;
	}
	c->sum = sum;
}

void sluice_wire_csum_add_pseudo(struct sluice_wire_csum *c, uint32_t saddr, uint32_t daddr, uint8_t protocol,
				 uint16_t len)
{
	assert(!c->odd);
	uint8_t ph[12];
	put32(ph, saddr);
	put32(ph + 4, daddr);
	ph[8] = 0;
	ph[9] = protocol;
	put16(ph + 10, len);
	sluice_wire_csum_add(c, ph, sizeof ph);
	assert(!c->odd);
}

static uint16_t csum_fold(uint64_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return (uint16_t)sum;
}

uint16_t sluice_wire_csum_finish(const struct sluice_wire_csum *c)
{
	return (uint16_t)~csum_fold(c->sum);
}

uint16_t sluice_wire_csum(const uint8_t *p, size_t len)
{
	struct sluice_wire_csum c;
	sluice_wire_csum_init(&c);
	sluice_wire_csum_add(&c, p, len);
	return sluice_wire_csum_finish(&c);
}

uint16_t sluice_wire_csum_adjust(uint16_t csum, uint16_t old_word, uint16_t new_word)
{
	/* HC' = ~(~HC + ~m + m') */
	uint64_t sum = (uint16_t)~csum;
	sum += (uint16_t)~old_word;
	sum += new_word;
	return (uint16_t)~csum_fold(sum);
}

/* --- Ethernet II --------------------------------------------------------- */

enum sluice_wire_reason sluice_wire_eth_parse(const uint8_t *p, size_t len, struct sluice_eth_hdr *out)
{
	if (len < SLUICE_ETH_HDR_LEN)
		return SLUICE_WIRE_SHORT;
	memcpy(out->dst.b, p, SLUICE_ETH_ADDR_LEN);
	memcpy(out->src.b, p + SLUICE_ETH_ADDR_LEN, SLUICE_ETH_ADDR_LEN);
	out->ethertype = get16(p + 2 * SLUICE_ETH_ADDR_LEN);
	if (out->ethertype == SLUICE_ETHERTYPE_VLAN || out->ethertype == SLUICE_ETHERTYPE_QINQ ||
	    out->ethertype == SLUICE_ETHERTYPE_QINQ_OLD)
		return SLUICE_WIRE_VLAN;
	return SLUICE_WIRE_OK;
}

size_t sluice_wire_eth_build(uint8_t *p, size_t cap, const struct sluice_eth_hdr *h)
{
	if (cap < SLUICE_ETH_HDR_LEN)
		return 0;
	memcpy(p, h->dst.b, SLUICE_ETH_ADDR_LEN);
	memcpy(p + SLUICE_ETH_ADDR_LEN, h->src.b, SLUICE_ETH_ADDR_LEN);
	put16(p + 2 * SLUICE_ETH_ADDR_LEN, h->ethertype);
	return SLUICE_ETH_HDR_LEN;
}

/* --- ARP ----------------------------------------------------------------- */

enum sluice_wire_reason sluice_wire_arp_parse(const uint8_t *p, size_t len, struct sluice_arp_pkt *out)
{
	if (len < SLUICE_ARP_LEN)
		return SLUICE_WIRE_SHORT;
	/* hardware type 1 (Ethernet), protocol IPv4, lengths 6 and 4 */
	if (get16(p) != 1 || get16(p + 2) != SLUICE_ETHERTYPE_IPV4 || p[4] != SLUICE_ETH_ADDR_LEN || p[5] != 4)
		return SLUICE_WIRE_ARP_FORMAT;
	out->op = get16(p + 6);
	if (out->op != SLUICE_ARP_OP_REQUEST && out->op != SLUICE_ARP_OP_REPLY)
		return SLUICE_WIRE_ARP_FORMAT;
	memcpy(out->sha.b, p + 8, SLUICE_ETH_ADDR_LEN);
	out->spa = get32(p + 14);
	memcpy(out->tha.b, p + 18, SLUICE_ETH_ADDR_LEN);
	out->tpa = get32(p + 24);
	return SLUICE_WIRE_OK;
}

size_t sluice_wire_arp_build(uint8_t *p, size_t cap, const struct sluice_arp_pkt *a)
{
	assert(a->op == SLUICE_ARP_OP_REQUEST || a->op == SLUICE_ARP_OP_REPLY);
	if (cap < SLUICE_ARP_LEN)
		return 0;
	put16(p, 1);
	put16(p + 2, SLUICE_ETHERTYPE_IPV4);
	p[4] = SLUICE_ETH_ADDR_LEN;
	p[5] = 4;
	put16(p + 6, a->op);
	memcpy(p + 8, a->sha.b, SLUICE_ETH_ADDR_LEN);
	put32(p + 14, a->spa);
	memcpy(p + 18, a->tha.b, SLUICE_ETH_ADDR_LEN);
	put32(p + 24, a->tpa);
	return SLUICE_ARP_LEN;
}

/* Zeros after a frame of n bytes up to the Ethernet minimum; the padded
 * length, or 0 if cap cannot hold it. */
static size_t frame_pad(uint8_t *frame, size_t n, size_t cap)
{
	assert(n <= cap);
	if (n >= SLUICE_ETH_FRAME_MIN)
		return n;
	if (cap < SLUICE_ETH_FRAME_MIN)
		return 0;
	memset(frame + n, 0, SLUICE_ETH_FRAME_MIN - n);
	return SLUICE_ETH_FRAME_MIN;
}

/* An ARP frame padded to the Ethernet minimum. */
static size_t arp_frame(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
			const struct sluice_eth_addr *src, const struct sluice_arp_pkt *a)
{
	if (cap < SLUICE_ETH_FRAME_MIN)
		return 0;
	struct sluice_eth_hdr eh = {.dst = *dst, .src = *src, .ethertype = SLUICE_ETHERTYPE_ARP};
	size_t n = sluice_wire_eth_build(frame, cap, &eh);
	n += sluice_wire_arp_build(frame + n, cap - n, a);
	assert(n == SLUICE_ETH_HDR_LEN + SLUICE_ARP_LEN);
	return frame_pad(frame, n, cap);
}

size_t sluice_wire_arp_frame_request(uint8_t *frame, size_t cap, const struct sluice_eth_addr *own_mac, uint32_t own_ip,
				     uint32_t target_ip, const struct sluice_eth_addr *dst)
{
	static const struct sluice_eth_addr broadcast = {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}};
	/* tha is unknown: zeros, as Linux sends it (RFC 826 leaves it open) */
	struct sluice_arp_pkt a = {.op = SLUICE_ARP_OP_REQUEST, .sha = *own_mac, .spa = own_ip, .tpa = target_ip};
	return arp_frame(frame, cap, dst != NULL ? dst : &broadcast, own_mac, &a);
}

size_t sluice_wire_arp_frame_reply(uint8_t *frame, size_t cap, const struct sluice_eth_addr *own_mac, uint32_t own_ip,
				   const struct sluice_arp_pkt *request)
{
	assert(request->op == SLUICE_ARP_OP_REQUEST);
	struct sluice_arp_pkt a = {
		.op = SLUICE_ARP_OP_REPLY, .sha = *own_mac, .spa = own_ip, .tha = request->sha, .tpa = request->spa};
	return arp_frame(frame, cap, &request->sha, own_mac, &a);
}

/* --- IPv4 ---------------------------------------------------------------- */

static enum sluice_wire_reason ipv4_parse(const uint8_t *p, size_t len, struct sluice_ipv4_hdr *out, bool verified);

enum sluice_wire_reason sluice_wire_ipv4_parse(const uint8_t *p, size_t len, struct sluice_ipv4_hdr *out)
{
	return ipv4_parse(p, len, out, false);
}

/* verified: the NIC checked the header's checksum already. */
static enum sluice_wire_reason ipv4_parse(const uint8_t *p, size_t len, struct sluice_ipv4_hdr *out, bool verified)
{
	if (len < SLUICE_IPV4_HDR_LEN)
		return SLUICE_WIRE_SHORT;
	if (p[0] >> 4 != 4)
		return SLUICE_WIRE_IP_VERSION;
	size_t hdr_len = (size_t)(p[0] & 0x0f) * 4;
	if (hdr_len < SLUICE_IPV4_HDR_LEN)
		return SLUICE_WIRE_IP_HEADER_LEN;
	if (hdr_len > len)
		return SLUICE_WIRE_SHORT;
	uint16_t total_len = get16(p + 2);
	if (total_len < hdr_len)
		return SLUICE_WIRE_IP_TOTAL_LEN;
	if (total_len > len)
		return SLUICE_WIRE_SHORT;
	if (!verified && sluice_wire_csum(p, hdr_len) != 0)
		return SLUICE_WIRE_IP_CHECKSUM;
	uint16_t frag = get16(p + 6);
	out->hdr_len = (uint8_t)hdr_len;
	out->tos = p[1];
	out->total_len = total_len;
	out->id = get16(p + 4);
	out->df = (frag & 0x4000) != 0;
	out->fragment = (frag & 0x2000) != 0 || (frag & 0x1fff) != 0; /* MF or an offset */
	out->ttl = p[8];
	out->protocol = p[9];
	out->saddr = get32(p + 12);
	out->daddr = get32(p + 16);
	out->payload = p + hdr_len;
	out->payload_len = (uint16_t)(total_len - hdr_len);
	assert(out->payload_len <= len - hdr_len);
	return out->fragment ? SLUICE_WIRE_FRAGMENT : SLUICE_WIRE_OK;
}

static size_t ipv4_build(uint8_t *p, size_t cap, const struct sluice_ipv4_hdr *h, bool offload);

size_t sluice_wire_ipv4_build(uint8_t *p, size_t cap, const struct sluice_ipv4_hdr *h)
{
	return ipv4_build(p, cap, h, false);
}

/* offload: the checksum is left 0 for the NIC to fill in. */
static size_t ipv4_build(uint8_t *p, size_t cap, const struct sluice_ipv4_hdr *h, bool offload)
{
	if (cap < SLUICE_IPV4_HDR_LEN || h->payload_len > SLUICE_IPV4_TOTAL_LEN_MAX - SLUICE_IPV4_HDR_LEN)
		return 0;
	p[0] = 0x45; /* version 4, IHL 5 */
	p[1] = h->tos;
	put16(p + 2, (uint16_t)(SLUICE_IPV4_HDR_LEN + h->payload_len));
	put16(p + 4, h->id);
	put16(p + 6, 0x4000); /* DF, offset 0 */
	p[8] = h->ttl;
	p[9] = h->protocol;
	put16(p + 10, 0);
	put32(p + 12, h->saddr);
	put32(p + 16, h->daddr);
	if (!offload) {
		put16(p + 10, sluice_wire_csum(p, SLUICE_IPV4_HDR_LEN));
		assert(sluice_wire_csum(p, SLUICE_IPV4_HDR_LEN) == 0);
	}
	return SLUICE_IPV4_HDR_LEN;
}

/* --- ICMP echo ----------------------------------------------------------- */

enum sluice_wire_reason sluice_wire_icmp_echo_parse(const uint8_t *p, size_t len, struct sluice_icmp_echo *out)
{
	if (len < SLUICE_ICMP_ECHO_HDR_LEN)
		return SLUICE_WIRE_SHORT;
	if (p[0] != SLUICE_ICMP_ECHO_REQUEST || p[1] != 0)
		return SLUICE_WIRE_ICMP_TYPE;
	if (sluice_wire_csum(p, len) != 0)
		return SLUICE_WIRE_ICMP_CHECKSUM;
	out->id = get16(p + 4);
	out->seq = get16(p + 6);
	out->data = p + SLUICE_ICMP_ECHO_HDR_LEN;
	out->data_len = len - SLUICE_ICMP_ECHO_HDR_LEN;
	return SLUICE_WIRE_OK;
}

void sluice_wire_icmp_echo_reply_in_place(uint8_t *msg, size_t len)
{
	assert(len >= SLUICE_ICMP_ECHO_HDR_LEN && msg[0] == SLUICE_ICMP_ECHO_REQUEST && msg[1] == 0);
	uint16_t old_word = get16(msg);
	msg[0] = SLUICE_ICMP_ECHO_REPLY;
	uint16_t csum = sluice_wire_csum_adjust(get16(msg + 2), old_word, get16(msg));
	if (csum == 0) {
		/* ambiguous (see sluice_wire_csum_adjust): a message of zeros
		 * (id, seq, data: a peer may send one) needs ffff; rare, so
		 * settled by a full recompute */
		put16(msg + 2, 0);
		csum = sluice_wire_csum(msg, len);
	}
	put16(msg + 2, csum);
	assert(sluice_wire_csum(msg, len) == 0);
}

/* --- TCP options --------------------------------------------------------- */

static void tcp_options_clear(struct sluice_tcp_seg *out)
{
	out->mss = 0;
	out->wscale = -1;
	out->sack_permitted = false;
	out->has_ts = false;
	out->ts_val = 0;
	out->ts_ecr = 0;
	out->sack_n = 0;
}

/* One option of kind p[0] and length olen (checked: 2 <= olen <= bytes
 * left) into out; false if olen is wrong for a known kind. */
static bool tcp_option_take(const uint8_t *p, uint8_t olen, struct sluice_tcp_seg *out)
{
	switch (p[0]) {
	case TCPOPT_MSS:
		if (olen != TCPOLEN_MSS)
			return false;
		out->mss = get16(p + 2);
		return true;
	case TCPOPT_WSCALE:
		if (olen != TCPOLEN_WSCALE)
			return false;
		out->wscale = (int8_t)(p[2] > SLUICE_TCP_WSCALE_MAX ? SLUICE_TCP_WSCALE_MAX : p[2]);
		return true;
	case TCPOPT_SACK_PERMITTED:
		if (olen != TCPOLEN_SACK_PERMITTED)
			return false;
		out->sack_permitted = true;
		return true;
	case TCPOPT_SACK: {
		size_t blocks = (size_t)(olen - 2) / TCPOLEN_SACK_BLOCK;
		if ((olen - 2) % TCPOLEN_SACK_BLOCK != 0 || blocks == 0 || blocks > SLUICE_TCP_SACK_BLOCKS_MAX)
			return false;
		for (size_t i = 0; i < blocks; i++) {
			out->sack[i].left = get32(p + 2 + i * TCPOLEN_SACK_BLOCK);
			out->sack[i].right = get32(p + 6 + i * TCPOLEN_SACK_BLOCK);
		}
		out->sack_n = (uint8_t)blocks;
		return true;
	}
	case TCPOPT_TIMESTAMPS:
		if (olen != TCPOLEN_TIMESTAMPS)
			return false;
		out->has_ts = true;
		out->ts_val = get32(p + 2);
		out->ts_ecr = get32(p + 6);
		return true;
	default: /* unknown: skipped by its length */
		return true;
	}
}

enum sluice_wire_reason sluice_wire_tcp_options_parse(const uint8_t *p, size_t len, struct sluice_tcp_seg *out)
{
	assert(p != NULL || len == 0);
	tcp_options_clear(out);
	size_t at = 0;
	while (at < len) {
		uint8_t kind = p[at];
		if (kind == TCPOPT_EOL)
			break;
		if (kind == TCPOPT_NOP) {
			at++;
			continue;
		}
		if (len - at < 2)
			return SLUICE_WIRE_TCP_OPTION; /* a kind without its length byte */
		uint8_t olen = p[at + 1];
		if (olen < 2 || olen > len - at)
			return SLUICE_WIRE_TCP_OPTION;
		if (!tcp_option_take(p + at, olen, out))
			return SLUICE_WIRE_TCP_OPTION;
		at += olen;
	}
	assert(at <= len);
	return SLUICE_WIRE_OK;
}

/* --- TCP ----------------------------------------------------------------- */

static enum sluice_wire_reason tcp_parse(const uint8_t *p, size_t len, uint32_t saddr, uint32_t daddr,
					 struct sluice_tcp_seg *out, bool verified);

enum sluice_wire_reason sluice_wire_tcp_parse(const uint8_t *p, size_t len, uint32_t saddr, uint32_t daddr,
					      struct sluice_tcp_seg *out)
{
	return tcp_parse(p, len, saddr, daddr, out, false);
}

/* verified: the NIC checked the checksum already. */
static enum sluice_wire_reason tcp_parse(const uint8_t *p, size_t len, uint32_t saddr, uint32_t daddr,
					 struct sluice_tcp_seg *out, bool verified)
{
	assert(len <= TCP_SEGMENT_LEN_MAX);
	if (len < SLUICE_TCP_HDR_LEN)
		return SLUICE_WIRE_SHORT;
	size_t hdr_len = (size_t)(p[12] >> 4) * 4;
	if (hdr_len < SLUICE_TCP_HDR_LEN || hdr_len > len)
		return SLUICE_WIRE_TCP_OFFSET;
	if (!verified) {
		struct sluice_wire_csum c;
		sluice_wire_csum_init(&c);
		sluice_wire_csum_add_pseudo(&c, saddr, daddr, SLUICE_IPPROTO_TCP, (uint16_t)len);
		sluice_wire_csum_add(&c, p, len);
		if (sluice_wire_csum_finish(&c) != 0)
			return SLUICE_WIRE_TCP_CHECKSUM;
	}
	enum sluice_wire_reason r =
		sluice_wire_tcp_options_parse(p + SLUICE_TCP_HDR_LEN, hdr_len - SLUICE_TCP_HDR_LEN, out);
	if (r != SLUICE_WIRE_OK)
		return r;
	out->saddr = saddr;
	out->daddr = daddr;
	out->sport = get16(p);
	out->dport = get16(p + 2);
	out->seq = get32(p + 4);
	out->ack = get32(p + 8);
	out->flags = p[13] & 0x3f; /* the six classic flags; ECE/CWR are not used */
	out->window = get16(p + 14);
	out->payload = p + hdr_len;
	out->payload_len = (uint32_t)(len - hdr_len);
	return SLUICE_WIRE_OK;
}

/* The option bytes of s, unpadded lengths being multiples of 4 already by
 * the layout tcp_options_write uses (NOPs in front of the odd-sized ones). */
size_t sluice_wire_tcp_options_len(const struct sluice_tcp_seg *s)
{
	bool syn = (s->flags & SLUICE_TCP_SYN) != 0;
	size_t n = 0;
	if (syn && s->mss != 0)
		n += TCPOLEN_MSS;
	if (s->has_ts || (syn && s->sack_permitted))
		n += s->has_ts ? 2 + TCPOLEN_TIMESTAMPS : 2 + TCPOLEN_SACK_PERMITTED; /* SACK-permitted or 2 NOPs, TS */
	if (syn && s->wscale >= 0)
		n += 1 + TCPOLEN_WSCALE;
	if (s->sack_n > 0)
		n += 2 + 2 + (size_t)s->sack_n * TCPOLEN_SACK_BLOCK;
	return (n + 3) & ~(size_t)3;
}

/* Writes the options (the layout Linux uses, so that middleboxes that
 * expect it see it): MSS; SACK-permitted with timestamps (or NOP NOP
 * before either alone); NOP wscale; NOP NOP SACK. Returns the bytes. */
static size_t tcp_options_write(uint8_t *o, const struct sluice_tcp_seg *s)
{
	bool syn = (s->flags & SLUICE_TCP_SYN) != 0;
	bool sack_perm = syn && s->sack_permitted;
	size_t n = 0;
	if (syn && s->mss != 0) {
		o[n] = TCPOPT_MSS, o[n + 1] = TCPOLEN_MSS;
		put16(o + n + 2, s->mss);
		n += TCPOLEN_MSS;
	}
	if (sack_perm) {
		o[n] = s->has_ts ? TCPOPT_SACK_PERMITTED : TCPOPT_NOP;
		o[n + 1] = s->has_ts ? TCPOLEN_SACK_PERMITTED : TCPOPT_NOP;
		n += 2;
	} else if (s->has_ts) {
		o[n] = TCPOPT_NOP, o[n + 1] = TCPOPT_NOP;
		n += 2;
	}
	if (s->has_ts) {
		o[n] = TCPOPT_TIMESTAMPS, o[n + 1] = TCPOLEN_TIMESTAMPS;
		put32(o + n + 2, s->ts_val);
		put32(o + n + 6, s->ts_ecr);
		n += TCPOLEN_TIMESTAMPS;
	} else if (sack_perm) {
		o[n] = TCPOPT_SACK_PERMITTED, o[n + 1] = TCPOLEN_SACK_PERMITTED;
		n += 2;
	}
	if (syn && s->wscale >= 0) {
		o[n] = TCPOPT_NOP, o[n + 1] = TCPOPT_WSCALE, o[n + 2] = TCPOLEN_WSCALE, o[n + 3] = (uint8_t)s->wscale;
		n += 1 + TCPOLEN_WSCALE;
	}
	if (s->sack_n > 0) {
		o[n] = TCPOPT_NOP, o[n + 1] = TCPOPT_NOP, o[n + 2] = TCPOPT_SACK;
		o[n + 3] = (uint8_t)(2 + s->sack_n * TCPOLEN_SACK_BLOCK);
		n += 4;
		for (size_t i = 0; i < s->sack_n; i++, n += TCPOLEN_SACK_BLOCK) {
			put32(o + n, s->sack[i].left);
			put32(o + n + 4, s->sack[i].right);
		}
	}
	for (; n % 4 != 0; n++)
		o[n] = TCPOPT_EOL;
	return n;
}

static size_t tcp_build(uint8_t *p, size_t cap, const struct sluice_tcp_seg *s, bool offload, bool tso,
			const struct sluice_wire_piece *pieces, int n);

size_t sluice_wire_tcp_build(uint8_t *p, size_t cap, const struct sluice_tcp_seg *s)
{
	return tcp_build(p, cap, s, false, false, NULL, 0);
}

/* offload: the checksum field holds the pseudo-header's sum alone (folded,
 * not complemented), which the NIC completes over the segment: DPDK's
 * convention for RTE_MBUF_F_TX_TCP_CKSUM. pieces: the payload, when it is
 * not at s->payload (NULL: it is). */
static size_t tcp_build(uint8_t *p, size_t cap, const struct sluice_tcp_seg *s, bool offload, bool tso,
			const struct sluice_wire_piece *pieces, int n)
{
	assert(!tso || offload);
	assert(s->wscale <= SLUICE_TCP_WSCALE_MAX && s->sack_n <= SLUICE_TCP_SACK_BLOCKS_MAX);
	assert(offload || pieces || s->payload != NULL || s->payload_len == 0);
	size_t opt_len = sluice_wire_tcp_options_len(s);
	size_t hdr_len = SLUICE_TCP_HDR_LEN + opt_len;
	if (opt_len > SLUICE_TCP_OPTIONS_LEN_MAX || cap < hdr_len || s->payload_len > TCP_SEGMENT_LEN_MAX - hdr_len)
		return 0;
	put16(p, s->sport);
	put16(p + 2, s->dport);
	put32(p + 4, s->seq);
	put32(p + 8, s->ack);
	p[12] = (uint8_t)(hdr_len / 4 << 4);
	p[13] = s->flags;
	put16(p + 14, s->window);
	put16(p + 16, 0); /* checksum, below */
	put16(p + 18, 0); /* urgent pointer: URG is not sent */
	size_t written = tcp_options_write(p + SLUICE_TCP_HDR_LEN, s);
	assert(written == opt_len);
	struct sluice_wire_csum c;
	sluice_wire_csum_init(&c);
	sluice_wire_csum_add_pseudo(&c, s->saddr, s->daddr, SLUICE_IPPROTO_TCP,
				    tso ? 0 : (uint16_t)(hdr_len + s->payload_len));
	if (offload) {
		put16(p + 16, (uint16_t)~sluice_wire_csum_finish(&c));
		return hdr_len;
	}
	sluice_wire_csum_add(&c, p, hdr_len);
	if (!pieces) {
		sluice_wire_csum_add(&c, s->payload, s->payload_len);
	} else {
		size_t total = 0;
		for (int i = 0; i < n; i++) {
			sluice_wire_csum_add(&c, pieces[i].p, pieces[i].len);
			total += pieces[i].len;
		}
		assert(total == s->payload_len);
		(void)total;
	}
	put16(p + 16, sluice_wire_csum_finish(&c));
	return hdr_len;
}

size_t sluice_wire_tcp_frame_build(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
				   const struct sluice_eth_addr *src, uint16_t ip_id, const struct sluice_tcp_seg *s)
{
	return sluice_wire_tcp_frame_build_offload(frame, cap, dst, src, ip_id, s, 0);
}

size_t sluice_wire_tcp_frame_build_offload(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
					   const struct sluice_eth_addr *src, uint16_t ip_id,
					   const struct sluice_tcp_seg *s, unsigned offload)
{
	size_t opt_len = sluice_wire_tcp_options_len(s);
	if (opt_len > SLUICE_TCP_OPTIONS_LEN_MAX)
		return 0;
	size_t headers = SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN + SLUICE_TCP_HDR_LEN + opt_len;
	if (cap < SLUICE_ETH_FRAME_MIN || cap < headers || s->payload_len > cap - headers ||
	    s->payload_len > SLUICE_IPV4_TOTAL_LEN_MAX - (headers - SLUICE_ETH_HDR_LEN))
		return 0;
	/* The payload first: it may sit where the headers go if the caller
	 * built it in place at a smaller offset. */
	if (s->payload_len > 0)
		memmove(frame + headers, s->payload, s->payload_len);
	struct sluice_tcp_seg placed = *s;
	placed.payload = frame + headers;
	struct sluice_eth_hdr eh = {.dst = *dst, .src = *src, .ethertype = SLUICE_ETHERTYPE_IPV4};
	struct sluice_ipv4_hdr ih = {.id = ip_id, .ttl = SLUICE_IPV4_TTL_DEFAULT, .protocol = SLUICE_IPPROTO_TCP,
				     .saddr = s->saddr, .daddr = s->daddr,
				     .payload_len = (uint16_t)(headers - SLUICE_ETH_HDR_LEN - SLUICE_IPV4_HDR_LEN +
							       s->payload_len)};
	size_t n = sluice_wire_eth_build(frame, cap, &eh);
	n += ipv4_build(frame + n, cap - n, &ih, (offload & SLUICE_WIRE_CSUM_IP) != 0);
	n += tcp_build(frame + n, cap - n, &placed, (offload & SLUICE_WIRE_CSUM_TCP) != 0, false, NULL, 0);
	assert(n == headers);
	return frame_pad(frame, headers + s->payload_len, cap);
}

size_t sluice_wire_tcp_headers_build(uint8_t *frame, size_t cap, const struct sluice_eth_addr *dst,
				     const struct sluice_eth_addr *src, uint16_t ip_id, const struct sluice_tcp_seg *s,
				     const struct sluice_wire_piece *pieces, int pieces_n, unsigned offload)
{
	size_t opt_len = sluice_wire_tcp_options_len(s);
	if (opt_len > SLUICE_TCP_OPTIONS_LEN_MAX || pieces_n < 0)
		return 0;
	size_t headers = SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN + SLUICE_TCP_HDR_LEN + opt_len;
	if (cap < headers || headers + s->payload_len < SLUICE_ETH_FRAME_MIN ||
	    s->payload_len > SLUICE_IPV4_TOTAL_LEN_MAX - (headers - SLUICE_ETH_HDR_LEN))
		return 0;
	struct sluice_eth_hdr eh = {.dst = *dst, .src = *src, .ethertype = SLUICE_ETHERTYPE_IPV4};
	struct sluice_ipv4_hdr ih = {.id = ip_id, .ttl = SLUICE_IPV4_TTL_DEFAULT, .protocol = SLUICE_IPPROTO_TCP,
				     .saddr = s->saddr, .daddr = s->daddr,
				     .payload_len = (uint16_t)(headers - SLUICE_ETH_HDR_LEN - SLUICE_IPV4_HDR_LEN +
							       s->payload_len)};
	size_t n = sluice_wire_eth_build(frame, cap, &eh);
	n += ipv4_build(frame + n, cap - n, &ih, (offload & SLUICE_WIRE_CSUM_IP) != 0);
	n += tcp_build(frame + n, cap - n, s, (offload & SLUICE_WIRE_CSUM_TCP) != 0,
		       (offload & (SLUICE_WIRE_CSUM_TCP | SLUICE_WIRE_CSUM_TSO)) ==
			       (SLUICE_WIRE_CSUM_TCP | SLUICE_WIRE_CSUM_TSO),
		       pieces, pieces_n);
	assert(n == headers);
	return headers;
}

/* --- The receive path ---------------------------------------------------- */

static enum sluice_wire_kind drop(struct sluice_wire_pkt *out, enum sluice_wire_reason r)
{
	assert(r != SLUICE_WIRE_OK && r < SLUICE_WIRE_REASONS);
	out->kind = SLUICE_WIRE_DROP;
	out->reason = r;
	return SLUICE_WIRE_DROP;
}

/* The IPv4 packet ip (parsed, not a fragment): ICMP echo or TCP. */
static enum sluice_wire_kind classify_ipv4(struct sluice_wire_pkt *out, unsigned verified)
{
	const struct sluice_ipv4_hdr *ip = &out->ip;
	enum sluice_wire_reason r;
	switch (ip->protocol) {
	case SLUICE_IPPROTO_ICMP:
		r = sluice_wire_icmp_echo_parse(ip->payload, ip->payload_len, &out->echo);
		if (r != SLUICE_WIRE_OK)
			return drop(out, r);
		out->icmp = ip->payload;
		out->icmp_len = ip->payload_len;
		out->kind = SLUICE_WIRE_ICMP_ECHO;
		return out->kind;
	case SLUICE_IPPROTO_TCP:
		if (sluice_ipv4_is_group(ip->saddr) || sluice_ipv4_is_group(ip->daddr))
			return drop(out, SLUICE_WIRE_TCP_ADDRESS);
		r = tcp_parse(ip->payload, ip->payload_len, ip->saddr, ip->daddr, &out->tcp,
			      (verified & SLUICE_WIRE_CSUM_TCP) != 0);
		if (r != SLUICE_WIRE_OK)
			return drop(out, r);
		out->kind = SLUICE_WIRE_TCP;
		return out->kind;
	default:
		return drop(out, SLUICE_WIRE_PROTOCOL);
	}
}

enum sluice_wire_kind sluice_wire_classify(const uint8_t *frame, size_t len, struct sluice_wire_pkt *out)
{
	return sluice_wire_classify_verified(frame, len, out, 0);
}

enum sluice_wire_kind sluice_wire_classify_verified(const uint8_t *frame, size_t len, struct sluice_wire_pkt *out,
						    unsigned verified)
{
	assert(frame != NULL || len == 0);
	out->reason = SLUICE_WIRE_OK;
	enum sluice_wire_reason r = sluice_wire_eth_parse(frame, len, &out->eth);
	if (r != SLUICE_WIRE_OK)
		return drop(out, r);
	const uint8_t *p = frame + SLUICE_ETH_HDR_LEN;
	size_t left = len - SLUICE_ETH_HDR_LEN;
	switch (out->eth.ethertype) {
	case SLUICE_ETHERTYPE_ARP:
		r = sluice_wire_arp_parse(p, left, &out->arp);
		if (r != SLUICE_WIRE_OK)
			return drop(out, r);
		out->kind = SLUICE_WIRE_ARP;
		return out->kind;
	case SLUICE_ETHERTYPE_IPV4:
		/* An IPv4 packet is at most 65535 bytes: a longer buffer is
		 * padding as far as the header is concerned. */
		r = ipv4_parse(p, left > SLUICE_IPV4_TOTAL_LEN_MAX ? SLUICE_IPV4_TOTAL_LEN_MAX : left, &out->ip,
			       (verified & SLUICE_WIRE_CSUM_IP) != 0);
		if (r != SLUICE_WIRE_OK)
			return drop(out, r);
		return classify_ipv4(out, verified);
	default:
		return drop(out, SLUICE_WIRE_ETHERTYPE);
	}
}

size_t sluice_wire_icmp_echo_reply_frame(uint8_t *frame, size_t cap, const struct sluice_wire_pkt *pkt,
					 const struct sluice_eth_addr *own_mac, uint16_t ip_id)
{
	assert(pkt->kind == SLUICE_WIRE_ICMP_ECHO && pkt->icmp_len >= SLUICE_ICMP_ECHO_HDR_LEN);
	size_t headers = SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN;
	if (cap < SLUICE_ETH_FRAME_MIN || cap < headers || pkt->icmp_len > cap - headers)
		return 0;
	struct sluice_eth_hdr eh = {.dst = pkt->eth.src, .src = *own_mac, .ethertype = SLUICE_ETHERTYPE_IPV4};
	struct sluice_ipv4_hdr ih = {.tos = pkt->ip.tos, .id = ip_id, .ttl = SLUICE_IPV4_TTL_DEFAULT,
				     .protocol = SLUICE_IPPROTO_ICMP, .saddr = pkt->ip.daddr, .daddr = pkt->ip.saddr,
				     .payload_len = (uint16_t)pkt->icmp_len};
	/* The message first: the caller may reply into the request's own
	 * buffer, whose IP header may be longer (options) than ours. */
	memmove(frame + headers, pkt->icmp, pkt->icmp_len);
	size_t n = sluice_wire_eth_build(frame, cap, &eh);
	n += sluice_wire_ipv4_build(frame + n, cap - n, &ih);
	assert(n == headers);
	sluice_wire_icmp_echo_reply_in_place(frame + headers, pkt->icmp_len);
	return frame_pad(frame, headers + pkt->icmp_len, cap);
}
