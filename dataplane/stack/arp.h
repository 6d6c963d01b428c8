/* The ARP cache of Sluice's own TCP/IP stack (issue 14): one per lcore,
 * owned by that lcore alone, mapping a neighbour's IPv4 address to its MAC.
 * It is bounded in every dimension (entries, packets waiting per entry,
 * requests per entry and per second) so that no peer, hostile or broken,
 * can make it grow or make the stack flood the link; it reads no clock (the
 * caller passes the time in ms, from a monotonic clock) and sends nothing
 * itself: it tells the caller when a request or a reply must go out, and
 * the caller builds it with wire.h. Packets waiting for an address are the
 * caller's opaque pointers (mbufs, in the DPDK transport): the cache holds
 * them and hands each one back exactly once, either to be sent (when the
 * address resolves) or to be freed through the release callback (queue
 * overflow, eviction, giving up, fini), so none leaks.
 *
 * An entry's life: sluice_arp_resolve for an unknown address creates it
 * unresolved and asks for a request (then one per SLUICE_ARP_RETRY_MS, from
 * resolve or sluice_arp_tick); after SLUICE_ARP_REQUESTS_MAX unanswered
 * requests it fails and its packets are released. A reply or request from
 * the neighbour (sluice_arp_input, RFC 826's merge rule) resolves it for
 * the cache's TTL; in the last SLUICE_ARP_REFRESH_MS of that it is still
 * used but re-requested, so a live neighbour never stalls traffic; past its
 * TTL it is unresolved again. A full table evicts the least recently used
 * entry. */
#ifndef SLUICE_STACK_ARP_H
#define SLUICE_STACK_ARP_H
#include "dataplane/stack/wire.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SLUICE_ARP_ENTRIES_MAX 256     /* neighbours per lcore: a broker's clients sit behind few routers */
#define SLUICE_ARP_PENDING_MAX 4       /* packets held per unresolved address (Linux holds about 3) */
#define SLUICE_ARP_RETRY_MS 1000       /* at most one request per entry per this */
#define SLUICE_ARP_REQUESTS_MAX 3      /* unanswered requests before an address fails */
#define SLUICE_ARP_REFRESH_MS 5000     /* a resolved entry is re-requested this long before it expires */
#define SLUICE_ARP_TTL_MS_DEFAULT 60000 /* how long a resolution is trusted */

_Static_assert(SLUICE_ARP_REFRESH_MS >= SLUICE_ARP_REQUESTS_MAX * SLUICE_ARP_RETRY_MS,
	       "every refresh request fits in the refresh window: a live neighbour is refreshed before expiry");
_Static_assert(SLUICE_ARP_TTL_MS_DEFAULT > SLUICE_ARP_REFRESH_MS, "an entry is trusted before it is refreshed");
_Static_assert(SLUICE_ARP_PENDING_MAX <= UINT8_MAX && SLUICE_ARP_REQUESTS_MAX <= UINT8_MAX, "kept in bytes");

/* Takes back a packet the cache held and will not send: the caller frees it. */
typedef void (*sluice_arp_release_fn)(void *pkt, void *arg);

struct sluice_arp_entry {
	struct sluice_eth_addr mac; /* valid when resolved */
	bool resolved;
	uint8_t requests;     /* requests since resolution (or refresh) started */
	uint8_t pending_head; /* the oldest waiting packet */
	uint8_t pending_n;    /* 0 when resolved */
	int64_t expires_ms;   /* resolved: when it stops being trusted */
	int64_t used_ms;      /* created, looked up or resolved for: the LRU order */
	int64_t requested_ms; /* the last request (when requests > 0) */
	void *pending[SLUICE_ARP_PENDING_MAX]; /* a ring, pending_n from pending_head */
};

struct sluice_arp_stats {
	uint64_t evicted;         /* entries evicted for room */
	uint64_t pending_dropped; /* packets released: queue overflow, eviction, failure */
	uint64_t failed;          /* addresses given up after SLUICE_ARP_REQUESTS_MAX requests */
	uint64_t ignored;         /* ARP packets not merged (group or zero sender, ...) */
	uint64_t conflicts;       /* ARP packets claiming own_ip from elsewhere */
};

struct sluice_arp_cache {
	uint32_t own_ip;
	struct sluice_eth_addr own_mac;
	int64_t ttl_ms;
	sluice_arp_release_fn release;
	void *release_arg;
	uint32_t n; /* entries in use */
	struct sluice_arp_stats stats;
	/* The keys alone, 0 for a free slot: 1 KiB scanned linearly, which at
	 * this size costs less than hashing would (and connections keep the
	 * MAC they resolved, so the scan is not per packet). */
	uint32_t ip[SLUICE_ARP_ENTRIES_MAX];
	struct sluice_arp_entry e[SLUICE_ARP_ENTRIES_MAX];
} __attribute__((aligned(64)));

/* own_ip/own_mac: the stack's address (not 0, not a group address);
 * ttl_ms > SLUICE_ARP_REFRESH_MS; release is called for every packet the
 * cache gives up. */
void sluice_arp_init(struct sluice_arp_cache *c, uint32_t own_ip, const struct sluice_eth_addr *own_mac,
		     int64_t ttl_ms, sluice_arp_release_fn release, void *release_arg);
/* Releases every waiting packet and empties the cache. */
void sluice_arp_fini(struct sluice_arp_cache *c);

/* The MAC of ip if resolved and not expired (true, *mac set; the entry
 * counts as used); false otherwise. Starts nothing. */
bool sluice_arp_lookup(struct sluice_arp_cache *c, uint32_t ip, int64_t now_ms, struct sluice_eth_addr *mac);

enum sluice_arp_resolve_result {
	SLUICE_ARP_HIT = 1,        /* *mac set; pkt is still the caller's: send it */
	SLUICE_ARP_HIT_REFRESH,    /* as HIT, and send a request (the entry is about to expire) */
	SLUICE_ARP_QUEUED,         /* pkt is the cache's until resolution; a request is already out */
	SLUICE_ARP_QUEUED_REQUEST, /* as QUEUED, and send a request now */
};

/* The MAC to send pkt (may be NULL: resolve only) to ip, a neighbour's
 * address (not 0, not own_ip). An unknown address gets an entry (evicting
 * the least recently used one if the table is full); a packet that must
 * wait is queued, the oldest waiting one released if the queue is full.
 * A request is asked for at most once per SLUICE_ARP_RETRY_MS per entry;
 * an address whose SLUICE_ARP_REQUESTS_MAX requests went unanswered has its
 * packets released and starts over. */
enum sluice_arp_resolve_result sluice_arp_resolve(struct sluice_arp_cache *c, uint32_t ip, void *pkt,
						  int64_t now_ms, struct sluice_eth_addr *mac);

/* What a received ARP packet asks of the caller. */
struct sluice_arp_input_result {
	bool reply;     /* a request for own_ip: answer it (sluice_wire_arp_frame_reply) */
	bool conflict;  /* another host claims own_ip (RFC 5227: consider announcing) */
	bool merged;    /* the sender's mapping was stored */
	struct sluice_eth_addr mac; /* the sender's, when merged */
	uint32_t ready_n;
	void *ready[SLUICE_ARP_PENDING_MAX]; /* packets that waited for the sender, oldest first:
					      * the caller's again, to send to mac */
};

/* A received ARP packet (parsed by sluice_wire_arp_parse), by RFC 826's
 * rule: the sender's mapping updates an entry it already has, and is
 * created only when the packet is addressed to own_ip. Senders that cannot
 * be neighbours (a group MAC, address 0 as in RFC 5227 probes, a group
 * address, own_ip) are not stored. */
void sluice_arp_input(struct sluice_arp_cache *c, const struct sluice_arp_pkt *a, int64_t now_ms,
		      struct sluice_arp_input_result *out);

/* Housekeeping, to call every few hundred ms: drops expired entries, gives
 * up on addresses whose requests went unanswered (their packets released),
 * and lists in retry (at most retry_cap) the addresses a request is due
 * for, counting it as sent: the caller sends one to each. Returns how many. */
uint32_t sluice_arp_tick(struct sluice_arp_cache *c, int64_t now_ms, uint32_t *retry, uint32_t retry_cap);

/* A gratuitous ARP (RFC 5227's announcement: a broadcast request with
 * sender and target address own_ip) into frame; its length, 0 if cap is
 * under SLUICE_ETH_FRAME_MIN. */
size_t sluice_arp_announce(const struct sluice_arp_cache *c, uint8_t *frame, size_t cap);

#endif
