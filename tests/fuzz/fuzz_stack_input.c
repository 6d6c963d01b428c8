/* libFuzzer target for the receive path of Sluice's own TCP/IP stack
 * (issue 14, dataplane/stack): each input is one Ethernet frame as a NIC
 * could deliver it, given to the classifier (sluice_wire_classify), and the
 * same bytes are given to the TCP option parser alone, which the
 * classifier only ever hands 40 bytes at most. Properties checked on every
 * input, beyond ASan/UBSan's (no over-read, no undefined arithmetic):
 * a drop names a reason and nothing else does; what is borrowed (a TCP
 * payload, an ICMP message) lies inside the frame; an accepted TCP segment
 * built again (sluice_wire_tcp_frame_build) classifies to the same segment,
 * so parser and builder agree; an echo reply verifies; an accepted ARP
 * packet goes through an ARP cache kept across inputs (the clock advancing
 * with each), which must stay within its bounds and hand back every packet
 * it held exactly once. */
#include "dataplane/stack/arp.h"
#include "dataplane/stack/wire.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_FRAME_BYTES_MAX 9216 /* a jumbo frame; longer inputs are cut */
#define FUZZ_OWN_IP 0xc0a87a0au   /* 192.168.122.10 */

static const struct sluice_eth_addr own_mac = {{0x02, 0x00, 0x5e, 0x10, 0x00, 0x01}};
static struct sluice_arp_cache cache;
static bool cache_ready;
static int64_t now_ms;
static uint64_t held, handed_back; /* packets given to the cache, and back */
static char packet_token;          /* the "packet" the cache holds: only its address matters */

static void fail(const char *what)
{
	fprintf(stderr, "fuzz_stack_input: %s\n", what);
	abort();
}

static void on_release(void *pkt, void *arg)
{
	(void)arg;
	if (pkt != &packet_token)
		fail("the ARP cache released a pointer it was never given");
	handed_back++;
}

/* The accepted segment s, rebuilt and classified again, must come back
 * the same in every field the builder sends for its flags. */
static void check_tcp_rebuild(const struct sluice_wire_pkt *pkt)
{
	static uint8_t frame[FUZZ_FRAME_BYTES_MAX + SLUICE_WIRE_HEADERS_LEN_MAX];
	const struct sluice_tcp_seg *s = &pkt->tcp;
	if (sluice_wire_tcp_options_len(s) > SLUICE_TCP_OPTIONS_LEN_MAX)
		return; /* our layout can need more room than the sender's (4 SACK blocks on a SYN) */
	size_t n = sluice_wire_tcp_frame_build(frame, sizeof frame, &pkt->eth.dst, &pkt->eth.src, pkt->ip.id, s);
	if (n == 0)
		fail("an accepted segment could not be built again");
	struct sluice_wire_pkt again;
	if (sluice_wire_classify(frame, n, &again) != SLUICE_WIRE_TCP)
		fail("a rebuilt segment was not classified as TCP");
	const struct sluice_tcp_seg *b = &again.tcp;
	bool syn = (s->flags & SLUICE_TCP_SYN) != 0;
	if (b->saddr != s->saddr || b->daddr != s->daddr || b->sport != s->sport || b->dport != s->dport ||
	    b->seq != s->seq || b->ack != s->ack || b->flags != s->flags || b->window != s->window)
		fail("a rebuilt segment's header differs");
	if (b->mss != (syn ? s->mss : 0) || b->wscale != (syn ? s->wscale : -1) ||
	    b->sack_permitted != (syn && s->sack_permitted) || b->has_ts != s->has_ts ||
	    (s->has_ts && (b->ts_val != s->ts_val || b->ts_ecr != s->ts_ecr)) || b->sack_n != s->sack_n)
		fail("a rebuilt segment's options differ");
	for (uint8_t i = 0; i < s->sack_n; i++)
		if (b->sack[i].left != s->sack[i].left || b->sack[i].right != s->sack[i].right)
			fail("a rebuilt segment's SACK blocks differ");
	if (b->payload_len != s->payload_len || (s->payload_len && memcmp(b->payload, s->payload, s->payload_len)))
		fail("a rebuilt segment's payload differs");
}

static void check_echo_reply(const struct sluice_wire_pkt *pkt)
{
	static uint8_t frame[FUZZ_FRAME_BYTES_MAX + SLUICE_WIRE_HEADERS_LEN_MAX];
	size_t n = sluice_wire_icmp_echo_reply_frame(frame, sizeof frame, pkt, &own_mac, 1);
	if (n < SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN + pkt->icmp_len)
		fail("no echo reply for an accepted request");
	if (sluice_wire_csum(frame + SLUICE_ETH_HDR_LEN, SLUICE_IPV4_HDR_LEN) != 0 ||
	    sluice_wire_csum(frame + SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN, pkt->icmp_len) != 0)
		fail("an echo reply does not verify");
}

/* The ARP packet goes to the cache; its sender's address is then resolved
 * with a packet, so that queues fill, overflow, resolve and get evicted. */
static void check_arp(const struct sluice_arp_pkt *a)
{
	if (!cache_ready) {
		sluice_arp_init(&cache, FUZZ_OWN_IP, &own_mac, SLUICE_ARP_TTL_MS_DEFAULT, on_release, NULL);
		cache_ready = true;
	}
	now_ms += 250;
	struct sluice_arp_input_result r;
	sluice_arp_input(&cache, a, now_ms, &r);
	if (r.ready_n > SLUICE_ARP_PENDING_MAX)
		fail("more packets ready than an entry holds");
	for (uint32_t i = 0; i < r.ready_n; i++)
		on_release(r.ready[i], NULL); /* sent, as far as the count goes */
	uint32_t ip = a->tpa;
	if (ip != 0 && ip != FUZZ_OWN_IP) {
		struct sluice_eth_addr mac;
		enum sluice_arp_resolve_result rr = sluice_arp_resolve(&cache, ip, &packet_token, now_ms, &mac);
		if (rr == SLUICE_ARP_QUEUED || rr == SLUICE_ARP_QUEUED_REQUEST)
			held++;
	}
	uint32_t retry[8];
	if (sluice_arp_tick(&cache, now_ms, retry, 8) > 8 || cache.n > SLUICE_ARP_ENTRIES_MAX)
		fail("the ARP cache passed a bound");
	uint64_t waiting = 0;
	for (int i = 0; i < SLUICE_ARP_ENTRIES_MAX; i++)
		if (cache.ip[i] != 0)
			waiting += cache.e[i].pending_n;
	if (held != handed_back + waiting)
		fail("the ARP cache lost or duplicated a packet");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > FUZZ_FRAME_BYTES_MAX)
		size = FUZZ_FRAME_BYTES_MAX;
	struct sluice_wire_pkt pkt;
	enum sluice_wire_kind kind = sluice_wire_classify(data, size, &pkt);
	if ((kind == SLUICE_WIRE_DROP) != (pkt.reason != SLUICE_WIRE_OK) || pkt.reason >= SLUICE_WIRE_REASONS)
		fail("a drop without a reason, or a reason without a drop");
	/* As if a NIC had vouched for the checksums (offloads): no checksum
	 * to stop at, so the parsers' length checks alone guard the reads. */
	struct sluice_wire_pkt trusted;
	enum sluice_wire_kind tk =
		sluice_wire_classify_verified(data, size, &trusted, SLUICE_WIRE_CSUM_IP | SLUICE_WIRE_CSUM_TCP);
	if (tk == SLUICE_WIRE_TCP &&
	    (trusted.tcp.payload < data || trusted.tcp.payload + trusted.tcp.payload_len > data + size))
		fail("a TCP payload outside the frame (checksums vouched for)");
	if (kind != SLUICE_WIRE_DROP && tk != kind)
		fail("vouching for the checksums changed what a good frame is");
	switch (kind) {
	case SLUICE_WIRE_TCP:
		if (pkt.tcp.payload < data || pkt.tcp.payload + pkt.tcp.payload_len > data + size)
			fail("a TCP payload outside the frame");
		check_tcp_rebuild(&pkt);
		break;
	case SLUICE_WIRE_ICMP_ECHO:
		if (pkt.icmp < data || pkt.icmp + pkt.icmp_len > data + size)
			fail("an ICMP message outside the frame");
		check_echo_reply(&pkt);
		break;
	case SLUICE_WIRE_ARP:
		check_arp(&pkt.arp);
		break;
	case SLUICE_WIRE_DROP:
		break;
	}
	/* The option parser alone, over the whole input: lengths past 40, SACK
	 * with 5 blocks and more, are for it to refuse. */
	struct sluice_tcp_seg s;
	if (sluice_wire_tcp_options_parse(data, size, &s) == SLUICE_WIRE_OK &&
	    (s.sack_n > SLUICE_TCP_SACK_BLOCKS_MAX || s.wscale > SLUICE_TCP_WSCALE_MAX))
		fail("the option parser accepted more than a segment can carry");
	return 0;
}
