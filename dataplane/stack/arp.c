/* The ARP cache of Sluice's own TCP/IP stack (issue 14): one per lcore,
 * bounded, entries expiring, packets to an unresolved address queued
 * (bounded) until the reply comes, every held packet handed back exactly
 * once. The rules are in arp.h; this file keeps two invariants, checked by
 * assertions: n is the number of used slots, and a resolved entry holds no
 * packets (they were handed back when it resolved). */
#include "dataplane/stack/arp.h"
#include <assert.h>
#include <string.h>

void sluice_arp_init(struct sluice_arp_cache *c, uint32_t own_ip, const struct sluice_eth_addr *own_mac,
		     int64_t ttl_ms, sluice_arp_release_fn release, void *release_arg)
{
	assert(own_ip != 0 && !sluice_ipv4_is_group(own_ip) && !sluice_eth_addr_is_group(own_mac));
	assert(ttl_ms > SLUICE_ARP_REFRESH_MS && release != NULL);
	memset(c, 0, sizeof *c);
	c->own_ip = own_ip;
	c->own_mac = *own_mac;
	c->ttl_ms = ttl_ms;
	c->release = release;
	c->release_arg = release_arg;
}

static int find(const struct sluice_arp_cache *c, uint32_t ip)
{
	assert(ip != 0);
	for (int i = 0; i < SLUICE_ARP_ENTRIES_MAX; i++)
		if (c->ip[i] == ip)
			return i;
	return -1;
}

/* Hands every packet waiting on e back through the release callback. */
static void release_pending(struct sluice_arp_cache *c, struct sluice_arp_entry *e)
{
	for (uint8_t k = 0; k < e->pending_n; k++) {
		void *pkt = e->pending[(e->pending_head + k) % SLUICE_ARP_PENDING_MAX];
		c->release(pkt, c->release_arg);
	}
	c->stats.pending_dropped += e->pending_n;
	e->pending_n = 0;
	e->pending_head = 0;
}

static void remove_entry(struct sluice_arp_cache *c, int i)
{
	assert(c->ip[i] != 0 && c->n > 0);
	release_pending(c, &c->e[i]);
	c->ip[i] = 0;
	c->n--;
}

void sluice_arp_fini(struct sluice_arp_cache *c)
{
	for (int i = 0; i < SLUICE_ARP_ENTRIES_MAX; i++)
		if (c->ip[i] != 0)
			remove_entry(c, i);
	assert(c->n == 0);
}

/* The least recently used entry (the table is full). */
static int lru(const struct sluice_arp_cache *c)
{
	assert(c->n == SLUICE_ARP_ENTRIES_MAX);
	int victim = 0;
	for (int i = 1; i < SLUICE_ARP_ENTRIES_MAX; i++)
		if (c->e[i].used_ms < c->e[victim].used_ms)
			victim = i;
	return victim;
}

/* A new unresolved entry for ip, evicting the LRU one if need be. */
static int insert(struct sluice_arp_cache *c, uint32_t ip, int64_t now_ms)
{
	assert(find(c, ip) < 0);
	int slot = -1;
	if (c->n == SLUICE_ARP_ENTRIES_MAX) {
		slot = lru(c);
		remove_entry(c, slot);
		c->stats.evicted++;
	} else {
		for (int i = 0; i < SLUICE_ARP_ENTRIES_MAX && slot < 0; i++)
			if (c->ip[i] == 0)
				slot = i;
	}
	assert(slot >= 0 && c->ip[slot] == 0);
	memset(&c->e[slot], 0, sizeof c->e[slot]);
	c->e[slot].used_ms = now_ms;
	c->ip[slot] = ip;
	c->n++;
	return slot;
}

bool sluice_arp_lookup(struct sluice_arp_cache *c, uint32_t ip, int64_t now_ms, struct sluice_eth_addr *mac)
{
	int i = find(c, ip);
	if (i < 0 || !c->e[i].resolved || now_ms >= c->e[i].expires_ms)
		return false;
	c->e[i].used_ms = now_ms;
	*mac = c->e[i].mac;
	return true;
}

/* Whether the rate limit lets a request for e go now. */
static bool request_due(const struct sluice_arp_entry *e, int64_t now_ms)
{
	return e->requests == 0 || now_ms - e->requested_ms >= SLUICE_ARP_RETRY_MS;
}

static void request_sent(struct sluice_arp_entry *e, int64_t now_ms)
{
	assert(e->requests < SLUICE_ARP_REQUESTS_MAX);
	e->requests++;
	e->requested_ms = now_ms;
}

/* Queues pkt on the unresolved e, releasing the oldest if the queue is full. */
static void enqueue(struct sluice_arp_cache *c, struct sluice_arp_entry *e, void *pkt)
{
	assert(!e->resolved && e->pending_n <= SLUICE_ARP_PENDING_MAX);
	if (e->pending_n == SLUICE_ARP_PENDING_MAX) {
		c->release(e->pending[e->pending_head], c->release_arg);
		c->stats.pending_dropped++;
		e->pending_head = (uint8_t)((e->pending_head + 1) % SLUICE_ARP_PENDING_MAX);
		e->pending_n--;
	}
	e->pending[(e->pending_head + e->pending_n) % SLUICE_ARP_PENDING_MAX] = pkt;
	e->pending_n++;
}

enum sluice_arp_resolve_result sluice_arp_resolve(struct sluice_arp_cache *c, uint32_t ip, void *pkt,
						  int64_t now_ms, struct sluice_eth_addr *mac)
{
	assert(ip != 0 && ip != c->own_ip);
	int i = find(c, ip);
	if (i < 0)
		i = insert(c, ip, now_ms);
	struct sluice_arp_entry *e = &c->e[i];
	e->used_ms = now_ms;
	if (e->resolved && now_ms < e->expires_ms) {
		*mac = e->mac;
		bool refresh = now_ms >= e->expires_ms - SLUICE_ARP_REFRESH_MS && e->requests < SLUICE_ARP_REQUESTS_MAX &&
			       request_due(e, now_ms);
		if (!refresh)
			return SLUICE_ARP_HIT;
		request_sent(e, now_ms);
		return SLUICE_ARP_HIT_REFRESH;
	}
	if (e->resolved) { /* expired: resolve afresh */
		assert(e->pending_n == 0);
		e->resolved = false;
		e->requests = 0;
	}
	if (e->requests == SLUICE_ARP_REQUESTS_MAX && request_due(e, now_ms)) {
		/* the last request went unanswered too: give up on what waits, start over */
		release_pending(c, e);
		c->stats.failed++;
		e->requests = 0;
	}
	if (pkt != NULL)
		enqueue(c, e, pkt);
	if (e->requests < SLUICE_ARP_REQUESTS_MAX && request_due(e, now_ms)) {
		request_sent(e, now_ms);
		return SLUICE_ARP_QUEUED_REQUEST;
	}
	return SLUICE_ARP_QUEUED;
}

/* e learns mac: resolved for the TTL, its waiting packets handed to out. */
static void resolve_entry(struct sluice_arp_cache *c, struct sluice_arp_entry *e, const struct sluice_eth_addr *mac,
			  int64_t now_ms, struct sluice_arp_input_result *out)
{
	assert(!e->resolved || e->pending_n == 0);
	e->mac = *mac;
	e->resolved = true;
	e->requests = 0;
	e->expires_ms = now_ms + c->ttl_ms;
	for (uint8_t k = 0; k < e->pending_n; k++)
		out->ready[k] = e->pending[(e->pending_head + k) % SLUICE_ARP_PENDING_MAX];
	out->ready_n = e->pending_n;
	e->pending_n = 0;
	e->pending_head = 0;
	out->merged = true;
	out->mac = *mac;
}

void sluice_arp_input(struct sluice_arp_cache *c, const struct sluice_arp_pkt *a, int64_t now_ms,
		      struct sluice_arp_input_result *out)
{
	assert(a->op == SLUICE_ARP_OP_REQUEST || a->op == SLUICE_ARP_OP_REPLY);
	memset(out, 0, sizeof *out);
	bool for_us = a->tpa == c->own_ip;
	bool own_claim = a->spa == c->own_ip;
	if (own_claim && memcmp(a->sha.b, c->own_mac.b, SLUICE_ETH_ADDR_LEN) != 0) {
		out->conflict = true;
		c->stats.conflicts++;
	}
	bool neighbour = !sluice_eth_addr_is_group(&a->sha) && a->spa != 0 && !sluice_ipv4_is_group(a->spa) &&
			 !own_claim;
	if (neighbour) {
		int i = find(c, a->spa); /* RFC 826: merge if known ... */
		if (i < 0 && for_us)
			i = insert(c, a->spa, now_ms); /* ... else add if it is for us */
		if (i >= 0)
			resolve_entry(c, &c->e[i], &a->sha, now_ms, out);
	} else {
		c->stats.ignored++;
	}
	out->reply = for_us && a->op == SLUICE_ARP_OP_REQUEST && !own_claim && !sluice_eth_addr_is_group(&a->sha);
	assert(out->ready_n <= SLUICE_ARP_PENDING_MAX);
}

/* What tick does with entry i: false if it removed it. */
static bool tick_entry(struct sluice_arp_cache *c, int i, int64_t now_ms, bool *due)
{
	struct sluice_arp_entry *e = &c->e[i];
	*due = false;
	if (e->resolved) {
		assert(e->pending_n == 0);
		if (now_ms >= e->expires_ms) {
			remove_entry(c, i);
			return false;
		}
		*due = now_ms >= e->expires_ms - SLUICE_ARP_REFRESH_MS && e->requests < SLUICE_ARP_REQUESTS_MAX &&
		       request_due(e, now_ms);
		return true;
	}
	if (!request_due(e, now_ms))
		return true;
	if (e->requests == SLUICE_ARP_REQUESTS_MAX) {
		c->stats.failed++;
		remove_entry(c, i);
		return false;
	}
	*due = true;
	return true;
}

uint32_t sluice_arp_tick(struct sluice_arp_cache *c, int64_t now_ms, uint32_t *retry, uint32_t retry_cap)
{
	uint32_t n = 0;
	for (int i = 0; i < SLUICE_ARP_ENTRIES_MAX; i++) {
		if (c->ip[i] == 0)
			continue;
		bool due;
		uint32_t ip = c->ip[i];
		if (tick_entry(c, i, now_ms, &due) && due && n < retry_cap) {
			request_sent(&c->e[i], now_ms);
			retry[n++] = ip;
		}
	}
	assert(n <= retry_cap && c->n <= SLUICE_ARP_ENTRIES_MAX);
	return n;
}

size_t sluice_arp_announce(const struct sluice_arp_cache *c, uint8_t *frame, size_t cap)
{
	assert(c->own_ip != 0);
	return sluice_wire_arp_frame_request(frame, cap, &c->own_mac, c->own_ip, c->own_ip, NULL);
}
