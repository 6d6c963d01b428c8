/* The dpdk transport backend (sluice.transport=dpdk; transport.h has the
 * contract, docs/dpdk.md the operator's view): the network core polls one
 * DPDK ethdev queue and runs Sluice's own TCP/IP stack (dataplane/stack:
 * wire.c parses and builds frames, arp.c keeps the neighbours, tcp.c is
 * each connection's RFC 9293 state machine), so the Kafka listener's bytes
 * never cross the kernel. The broker above it is the same as over io_uring.
 *
 * Network cores are EAL lcores (sluice.dpdk.lcores), each with its own
 * queue pair, mbuf pool, connection table and timers, set up by prepare on
 * the main thread before any core runs and never shared after: one port
 * whose queues RSS spreads connections over, or a port per core. One IPv4
 * address (sluice.dpdk.ipv4.address), the listener port of `listeners`;
 * ARP (answers, a gratuitous announce at start), ICMP echo, and TCP
 * connections to the listener port. A peer is answered at its next hop's
 * MAC (itself on the link, else the gateway) as the ARP cache has it, the
 * MAC its SYN came from until then; zero-copy sends come later. The broker's own
 * replication and controller connections stay on kernel sockets.
 *
 * Receive: a burst of frames, each classified (wire.c) and handed to the
 * ARP cache, answered (ICMP), or given to its connection's state machine,
 * whose in-order bytes go straight to the network core (received upcall:
 * it copies), then the frame is freed. Send: the core's ranges are copied
 * into the connection's send ring (tcp.c) at once and reported sent in the
 * next poll; the state machine cuts segments, each built into a fresh mbuf
 * and sent in bursts. Upcalls (accepted, received, sent, closed) happen
 * only inside poll, as the contract asks: a connection that ends inside an
 * op is reported at the end of the next poll. Idle, the core sleeps until
 * a frame arrives where the port has Rx interrupts, else naps on its
 * eventfd, first briefly (SLUICE_DPDK_NAP_US_MIN) then twice as long each
 * time up to SLUICE_DPDK_NAP_MS, instead of spinning: an idle broker does
 * not burn the cores its tests share, and a lull between requests costs
 * tens of microseconds, not a millisecond. */
#include "common/log.h"
#include "dataplane/req.h"
#include "dataplane/stack/arp.h"
#include "dataplane/stack/tcp.h"
#include "dataplane/stack/wheel.h"
#include "dataplane/stack/wire.h"
#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <pthread.h>
#include <sched.h>
#include <rte_eal.h>
#include <rte_epoll.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLUICE_DPDK_CONNS_MAX 4096        /* connections per network core */
#define SLUICE_DPDK_TABLE_SLOTS 8192      /* open addressing: twice the connections */
#define SLUICE_DPDK_BURST 32              /* frames per rx/tx burst */
#define SLUICE_DPDK_MBUFS 8191            /* the core's mbuf pool (2^n - 1, DPDK's advice) */
#define SLUICE_DPDK_MBUF_CACHE 256
#define SLUICE_DPDK_RX_DESC 1024
#define SLUICE_DPDK_TX_DESC 1024
#define SLUICE_DPDK_SND_BUF_BYTES (256u << 10) /* send ring per connection */
#define SLUICE_DPDK_OOO_BUF_BYTES (64u << 10)  /* reassembly area per connection */
#define SLUICE_DPDK_RCV_SPACE (256u << 10)     /* receive window while the core reads */
#define SLUICE_DPDK_NAP_MS 1              /* the longest idle nap between looks at the queue */
#define SLUICE_DPDK_NAP_US_MIN 50         /* the first nap after a frame (no Rx interrupts): doubled up to the above */
#define SLUICE_DPDK_INTR_NAP_MS 5         /* the same when a frame's arrival wakes the core (timers' lateness) */
#define SLUICE_DPDK_SPIN_POLLS 64         /* empty polls before napping */
#define SLUICE_DPDK_ARGS_MAX 64           /* EAL arguments */
#define SLUICE_DPDK_ARP_TICK_MS 200
#define SLUICE_DPDK_MSL_MS 5000           /* TIME-WAIT lasts twice this */
#define SLUICE_DPDK_PORTS_MAX 16          /* ports in sluice.dpdk.port */
_Static_assert(SLUICE_DPDK_TABLE_SLOTS >= 2 * SLUICE_DPDK_CONNS_MAX, "the table stays at most half full");
_Static_assert((SLUICE_DPDK_TABLE_SLOTS & (SLUICE_DPDK_TABLE_SLOTS - 1)) == 0, "slots mask by a power of two");
_Static_assert(SLUICE_DPDK_SND_BUF_BYTES <= SLUICE_TCP_SND_BUF_MAX, "within the state machine's ring bound");
_Static_assert(SLUICE_DPDK_OOO_BUF_BYTES <= SLUICE_TCP_OOO_BUF_MAX, "within the reassembly bound");
_Static_assert(SLUICE_DPDK_BURST <= SLUICE_DPDK_MBUF_CACHE, "a burst comes from the core's cache");

/* One connection: the state machine, its buffers, and what the network core
 * knows of it. */
struct dconn {
	struct sluice_tcp_tcb tcb;
	struct dstate *ds;
	struct sluice_wheel_node tn;    /* its next deadline on the core's wheel */
	struct conn *c;                 /* NULL until the handshake completed and the core took it */
	struct sluice_eth_addr peer_mac; /* where its frames go: the next hop's MAC */
	uint32_t next_hop;              /* the peer (on the link) or the gateway; 0: the SYN's sender alone */
	uint32_t arp_gen;               /* ds->arp_gen when peer_mac was last looked up */
	uint32_t slot;
	bool paused, closing, dead, listed, detached;
	int close_error;
	/* The core's send in flight: its ranges (valid until the sent upcall),
	 * where copying into the send ring stands, and how much was taken. */
	struct sluice_send_range pend[SLUICE_SEND_RANGES_MAX];
	int pend_n, pend_i;
	size_t pend_off, pend_taken;
	bool on_sent;                   /* on ds->sent_head: reported at the end of poll */
	bool on_resume;                 /* on ds->resume: its window reopens at the next poll round */
	bool half_open;                 /* SYN-RECEIVED: on ds's half-open list, oldest first */
	struct dconn *ho_prev, *ho_next;
	struct dconn *done_next;        /* ended: reported (and freed) at the end of poll */
	struct dconn *detach_next;      /* closed by the core: reported at the end of poll */
	uint8_t *snd_buf, *ooo_buf;
};

/* One network core's state in this backend. */
struct dstate {
	struct netcore *nc;
	uint16_t port, queue;
	unsigned tx_csum;               /* SLUICE_WIRE_CSUM_*: what the port fills in on frames sent */
	bool rx_csum;                   /* the port reports checksums it verified */
	bool rx_intr;                   /* naps end when a frame arrives (the queue's Rx interrupt) */
	struct rte_epoll_event efd_ev;  /* the core's eventfd in the thread's DPDK epoll set */
	unsigned lcore;                 /* the EAL lcore whose CPUs the core runs on (LCORE_ID_ANY: as placed) */
	struct rte_mempool *pool;
	struct sluice_eth_addr mac;
	uint32_t ip, netmask, gateway;
	uint16_t listen_port;
	uint16_t ip_id;
	uint32_t secret;
	struct sluice_arp_cache arp;
	uint32_t arp_gen;               /* bumped by every mapping an ARP packet stores: connections look again */
	int64_t next_arp_ms;
	struct sluice_wheel wheel;      /* the connections' deadlines */
	struct dconn *table[SLUICE_DPDK_TABLE_SLOTS];
	uint32_t conns;
	struct dconn *ho_head, *ho_tail; /* half-open connections, oldest first */
	uint32_t half_open;
	uint64_t syn_evicted;           /* half-open connections dropped for a newer SYN (the backlog full) */
	struct dconn *done;             /* ended, to report and free */
	struct dconn *detach;           /* closed by the core, still finishing on the wire */
	struct dconn *sent_head[SLUICE_DPDK_CONNS_MAX];
	uint32_t sent_n;                /* connections with a send to report */
	struct dconn *resume[SLUICE_DPDK_CONNS_MAX];
	uint32_t resume_n;              /* connections the core resumed reading, in no order */
	struct rte_mbuf *tx[SLUICE_DPDK_BURST];
	uint16_t tx_n;
	uint32_t empty_polls;
	uint32_t nap_us;                /* the next nap without Rx interrupts (backs off while idle) */
	int64_t now;                    /* the clock as the poll loop last read it (ds_now) */
	bool in_poll, registered;
	uint64_t rx_frames, tx_frames, tx_drops, drops[SLUICE_WIRE_REASONS], refused, not_ours;
	struct sluice_tcp_counters tcp; /* of the connections that ended (fini adds the rest) */
	uint64_t ends[SLUICE_TCP_END_REASONS]; /* connections ended, by reason */
	/* SLUICE_DPDK_RX_CHAOS (tests): per mille of frames reordered, duplicated, corrupted. */
	bool chaos;
	uint32_t chaos_rand, chaos_reorder, chaos_dup, chaos_corrupt;
	struct rte_mbuf *chaos_held;
	uint64_t chaos_counts[3];
};

/* The signals a port raises per frame (net_tap's), taken only by the
 * network cores (signals_steer); set before any core starts. */
static sigset_t steer_signals;

/* The time for the state machines: inside poll, as its loop read it at the
 * top of this pass (one clock read per burst, not per segment); outside,
 * the clock. */
static uint64_t ds_now(struct dstate *ds)
{
	return (uint64_t)(ds->in_poll ? ds->now : sluice_now_ms());
}

/* ---- frames out -------------------------------------------------------- */

static void tx_flush(struct dstate *ds)
{
	uint16_t sent = ds->tx_n ? rte_eth_tx_burst(ds->port, ds->queue, ds->tx, ds->tx_n) : 0;
	for (uint16_t i = sent; i < ds->tx_n; i++)
		rte_pktmbuf_free(ds->tx[i]); /* the NIC's ring is full: as a lost frame, TCP resends */
	ds->tx_drops += ds->tx_n - sent;
	ds->tx_frames += sent;
	ds->tx_n = 0;
}

/* A fresh mbuf to build a frame of up to cap bytes into, or NULL. */
static uint8_t *tx_frame(struct dstate *ds, struct rte_mbuf **out, size_t *cap)
{
	struct rte_mbuf *m = rte_pktmbuf_alloc(ds->pool);
	if (!m) {
		ds->tx_drops++;
		return NULL;
	}
	*out = m;
	*cap = rte_pktmbuf_tailroom(m);
	return rte_pktmbuf_mtod(m, uint8_t *);
}

static void tx_queue(struct dstate *ds, struct rte_mbuf *m, size_t len)
{
	if (len == 0) {
		rte_pktmbuf_free(m);
		ds->tx_drops++;
		return;
	}
	m->data_len = m->pkt_len = (uint32_t)len;
	ds->tx[ds->tx_n++] = m;
	if (ds->tx_n == SLUICE_DPDK_BURST)
		tx_flush(ds);
}

/* ---- the connection table ---------------------------------------------- */

static uint32_t tuple_hash(uint32_t raddr, uint16_t rport)
{
	uint64_t x = ((uint64_t)raddr << 16 | rport) * 0x9e3779b97f4a7c15ull;
	return (uint32_t)(x >> 40);
}

static struct dconn *conn_find(struct dstate *ds, uint32_t raddr, uint16_t rport, uint32_t *slot)
{
	uint32_t mask = SLUICE_DPDK_TABLE_SLOTS - 1, i = tuple_hash(raddr, rport) & mask;
	for (;; i = (i + 1) & mask) {
		struct dconn *d = ds->table[i];
		if (!d || (d->tcb.raddr == raddr && d->tcb.rport == rport)) {
			*slot = i;
			return d;
		}
	}
}

/* Backward-shift deletion keeps every probe sequence unbroken. */
static void conn_unlist(struct dstate *ds, struct dconn *d)
{
	uint32_t mask = SLUICE_DPDK_TABLE_SLOTS - 1, hole = d->slot;
	assert(d->listed && ds->table[hole] == d);
	ds->table[hole] = NULL;
	d->listed = false;
	ds->conns--;
	for (uint32_t i = (hole + 1) & mask; ds->table[i]; i = (i + 1) & mask) {
		struct dconn *e = ds->table[i];
		uint32_t home = tuple_hash(e->tcb.raddr, e->tcb.rport) & mask;
		/* e may move to the hole if its home is not in (hole, i]. */
		bool stays = hole < i ? (home > hole && home <= i) : (home > hole || home <= i);
		if (!stays) {
			ds->table[hole] = e;
			e->slot = hole;
			ds->table[i] = NULL;
			hole = i;
		}
	}
}

/* The half-open list: SYN-RECEIVED connections, oldest first, at most
 * sluice.dpdk.syn.backlog of them, so a SYN flood (spoofed sources that
 * never answer) cannot fill the connection table for the minutes its
 * SYN-ACK retransmissions would take. */
static void half_open_add(struct dstate *ds, struct dconn *d)
{
	assert(!d->half_open);
	d->half_open = true;
	d->ho_prev = ds->ho_tail;
	d->ho_next = NULL;
	if (ds->ho_tail)
		ds->ho_tail->ho_next = d;
	else
		ds->ho_head = d;
	ds->ho_tail = d;
	ds->half_open++;
}

static void half_open_remove(struct dstate *ds, struct dconn *d)
{
	if (!d->half_open)
		return;
	if (d->ho_prev)
		d->ho_prev->ho_next = d->ho_next;
	else
		ds->ho_head = d->ho_next;
	if (d->ho_next)
		d->ho_next->ho_prev = d->ho_prev;
	else
		ds->ho_tail = d->ho_prev;
	d->half_open = false;
	d->ho_prev = d->ho_next = NULL;
	assert(ds->half_open > 0);
	ds->half_open--;
}

/* Put the connection's next deadline on the wheel: at once when it comes
 * sooner than the one armed, lazily when later (the early firing finds
 * nothing due and arms the real one), so the common case, an ACK that
 * pushes the retransmission timer back, costs nothing here. */
static void rearm(struct dstate *ds, struct dconn *d)
{
	if (d->dead)
		return;
	uint64_t at = sluice_tcp_next_timer(&d->tcb);
	if (at == SLUICE_TCP_TIMER_NONE)
		sluice_wheel_cancel(&ds->wheel, &d->tn);
	else if (!d->tn.armed || at < d->tn.at)
		sluice_wheel_arm(&ds->wheel, &d->tn, at);
}

static void conn_free(struct dconn *d)
{
	free(d->snd_buf);
	free(d->ooo_buf);
	free(d);
}

/* ---- the state machine's callbacks ------------------------------------- */

static void on_emit(void *arg, const struct sluice_tcp_seg *seg)
{
	struct dconn *d = arg;
	struct dstate *ds = d->ds;
	if (d->arp_gen != ds->arp_gen) {
		/* A neighbour's mapping changed (a router's failover, a host's
		 * new NIC): follow the cache for this connection's next hop. */
		d->arp_gen = ds->arp_gen;
		struct sluice_eth_addr mac;
		if (d->next_hop && sluice_arp_lookup(&ds->arp, d->next_hop, (int64_t)ds_now(ds), &mac))
			d->peer_mac = mac;
	}
	struct rte_mbuf *m;
	size_t cap;
	uint8_t *p = tx_frame(ds, &m, &cap);
	if (!p)
		return; /* as a lost segment: the state machine resends */
	size_t len = sluice_wire_tcp_frame_build_offload(p, cap, &d->peer_mac, &ds->mac, ds->ip_id++, seg, ds->tx_csum);
	if (ds->tx_csum) {
		m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM;
		m->l2_len = SLUICE_ETH_HDR_LEN;
		m->l3_len = SLUICE_IPV4_HDR_LEN;
	}
	tx_queue(ds, m, len);
}

static void on_deliver(void *arg, const uint8_t *bytes, uint32_t n)
{
	struct dconn *d = arg;
	assert(d->ds->in_poll); /* bytes arrive only with input, timers or a resume (resume_run), inside poll */
	if (d->c && !d->closing)
		sluice_netcore_received(d->c, bytes, n);
	if (!d->paused)
		sluice_tcp_set_rcv_space(&d->tcb, SLUICE_DPDK_RCV_SPACE);
}

static void on_established(void *arg)
{
	struct dconn *d = arg;
	struct dstate *ds = d->ds;
	assert(ds->in_poll && !d->c);
	half_open_remove(ds, d);
	char host[INET_ADDRSTRLEN];
	struct in_addr a = {htonl(d->tcb.raddr)};
	inet_ntop(AF_INET, &a, host, sizeof host);
	d->c = sluice_netcore_accepted(ds->nc, d, host, d->tcb.rport);
	if (!d->c) {
		ds->refused++;
		d->closing = true;
		sluice_tcp_abort(&d->tcb, ds_now(d->ds)); /* its closed callback frees it */
	}
}

static void on_peer_fin(void *arg)
{
	struct dconn *d = arg;
	/* Kafka has no half-close: the peer is done, so is the connection. */
	if (!d->closing) {
		d->closing = true;
		(void)sluice_tcp_close(&d->tcb, ds_now(d->ds));
	}
}

/* Copy the pending ranges into the send ring as far as it has room; once
 * anything was taken the send is reported at the end of the poll. */
static void pend_fill(struct dconn *d)
{
	while (d->pend_i < d->pend_n) {
		const struct sluice_send_range *r = &d->pend[d->pend_i];
		size_t left = r->len - d->pend_off;
		uint32_t want = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
		uint32_t got = sluice_tcp_send(&d->tcb, r->base + d->pend_off, want);
		d->pend_off += got;
		d->pend_taken += got;
		if (d->pend_off < r->len)
			break; /* the ring is full: more when the peer acknowledges */
		d->pend_i++;
		d->pend_off = 0;
	}
	struct dstate *ds = d->ds;
	if (d->pend_taken > 0 && !d->on_sent) {
		assert(ds->sent_n < SLUICE_DPDK_CONNS_MAX);
		ds->sent_head[ds->sent_n++] = d;
		d->on_sent = true;
	}
}

static void on_acked(void *arg, uint32_t bytes)
{
	struct dconn *d = arg;
	(void)bytes;
	if (d->pend_n && d->pend_i < d->pend_n)
		pend_fill(d);
}

static void counters_add(struct sluice_tcp_counters *to, const struct sluice_tcp_counters *c)
{
	to->segs_in += c->segs_in;
	to->segs_out += c->segs_out;
	to->retransmits += c->retransmits;
	to->fast_retransmits += c->fast_retransmits;
	to->sack_retransmits += c->sack_retransmits;
	to->dup_acks += c->dup_acks;
	to->ooo_queued += c->ooo_queued;
	to->ooo_drops += c->ooo_drops;
	to->unacceptable += c->unacceptable;
	to->keepalive_probes += c->keepalive_probes;
}

/* The resume list: connections whose reading the core restarted
 * (dpdk_recv_pause), their window to reopen at the next poll round. Not in
 * the op itself: the state machine then delivers the bytes it held while
 * the connection was paused (tcp.h, sluice_tcp_set_rcv_space), and a
 * delivery is an upcall, which an op must not make (transport.h). So, as
 * long as a connection is paused or waits here, its receive space stays
 * 0, and the state machine delivers nothing from inside an op (send and
 * close end with sluice_tcp_output too). */
static void resume_queue(struct dstate *ds, struct dconn *d)
{
	if (d->on_resume || d->dead)
		return;
	assert(ds->resume_n < SLUICE_DPDK_CONNS_MAX);
	ds->resume[ds->resume_n++] = d;
	d->on_resume = true;
}

static void resume_remove(struct dstate *ds, struct dconn *d)
{
	if (!d->on_resume)
		return;
	for (uint32_t i = 0; i < ds->resume_n; i++)
		if (ds->resume[i] == d) {
			ds->resume[i] = ds->resume[--ds->resume_n];
			break;
		}
	d->on_resume = false;
}

/* At the start of a poll round: the resumed connections' windows open
 * (the update sent) and their held bytes go to the core. A delivery may
 * pause one again, close or abort it, or resume others (queued, taken in
 * this loop or the next round); bounded by the table either way. Returns
 * how many were resumed. */
static uint32_t resume_run(struct dstate *ds, int64_t now)
{
	uint32_t done = 0;
	for (uint32_t i = 0; i < SLUICE_DPDK_CONNS_MAX && ds->resume_n > 0; i++) {
		struct dconn *d = ds->resume[--ds->resume_n];
		assert(d->on_resume && !d->dead);
		d->on_resume = false;
		if (d->paused)
			continue; /* paused again before its turn */
		sluice_tcp_set_rcv_space(&d->tcb, SLUICE_DPDK_RCV_SPACE);
		sluice_tcp_output(&d->tcb, (uint64_t)now); /* may end it: closed, on the done list */
		rearm(ds, d);
		done++;
	}
	return done;
}

static void on_closed(void *arg, enum sluice_tcp_close_reason reason)
{
	struct dconn *d = arg;
	struct dstate *ds = d->ds;
	assert(!d->dead);
	d->dead = true;
	sluice_wheel_cancel(&ds->wheel, &d->tn);
	half_open_remove(ds, d);
	resume_remove(ds, d); /* freed at the end of poll: off the list before */
	counters_add(&ds->tcp, &d->tcb.counters);
	assert((unsigned)reason < SLUICE_TCP_END_REASONS);
	ds->ends[reason]++;
	const struct sluice_tcp_counters *tc = &d->tcb.counters;
	SLOG_DEBUG("net", "network core %d: connection from port %u ended (%s): %" PRIu64 " segments in, %" PRIu64
		   " out, %" PRIu64 " bytes in, %" PRIu64 " out, %" PRIu64 " retransmissions, %" PRIu64 " unacceptable",
		   ds->nc->id, d->tcb.rport, sluice_tcp_reason_name(reason), tc->segs_in, tc->segs_out, tc->bytes_in, tc->bytes_out,
		   tc->retransmits, tc->unacceptable);
	d->close_error = reason == SLUICE_TCP_END_ORDERLY ? 0
			 : reason == SLUICE_TCP_END_TIMEOUT || reason == SLUICE_TCP_END_KEEPALIVE ? -ETIMEDOUT
			 : -ECONNRESET;
	if (d->listed)
		conn_unlist(ds, d);
	d->done_next = ds->done; /* reported (and freed) at the end of poll */
	ds->done = d;
}

static void tcb_config(struct dstate *ds, struct dconn *d, struct sluice_tcp_config *cfg)
{
	sluice_tcp_config_default(cfg);
	cfg->ops = (struct sluice_tcp_ops){.emit = on_emit, .deliver = on_deliver, .established = on_established,
					   .peer_fin = on_peer_fin, .acked = on_acked, .closed = on_closed};
	cfg->arg = d;
	cfg->snd_buf = d->snd_buf;
	cfg->snd_buf_bytes = SLUICE_DPDK_SND_BUF_BYTES;
	cfg->ooo_buf = d->ooo_buf;
	cfg->ooo_buf_bytes = SLUICE_DPDK_OOO_BUF_BYTES;
	cfg->rcv_space = SLUICE_DPDK_RCV_SPACE;
	cfg->mss = (uint16_t)(ds->nc->b->cfg.dpdk_mtu - 40);
	cfg->ts_offset = ds->secret;
	/* TIME-WAIT holds a connection's buffers (320 KiB): 2 x 5 s rather than
	 * 2 x 30 s, so a client reconnecting often cannot pin the table. */
	cfg->msl_ms = SLUICE_DPDK_MSL_MS;
	cfg->retries_max = (uint32_t)ds->nc->b->cfg.dpdk_tcp_retries;
	/* Keepalive, as Kafka turns SO_KEEPALIVE on for its sockets: an idle
	 * connection whose peer vanished is found and freed (0: off). */
	cfg->keepalive = ds->nc->b->cfg.dpdk_tcp_keepalive_ms > 0;
	cfg->keepalive_idle_ms = (uint32_t)ds->nc->b->cfg.dpdk_tcp_keepalive_ms;
	cfg->keepalive_interval_ms = (uint32_t)ds->nc->b->cfg.dpdk_tcp_keepalive_interval_ms;
	cfg->keepalive_probes = (uint32_t)ds->nc->b->cfg.dpdk_tcp_keepalive_probes;
}

/* ---- frames in ----------------------------------------------------------- */

/* Where frames to addr go first: addr itself on the link, else the
 * gateway; 0 (no gateway, off the link): only the SYN's sender is known. */
static uint32_t next_hop(const struct dstate *ds, uint32_t addr)
{
	if ((addr & ds->netmask) == (ds->ip & ds->netmask))
		return addr;
	return ds->gateway;
}

static void arp_request(struct dstate *ds, uint32_t ip)
{
	struct rte_mbuf *m;
	size_t cap;
	uint8_t *p = tx_frame(ds, &m, &cap);
	if (p)
		tx_queue(ds, m, sluice_wire_arp_frame_request(p, cap, &ds->mac, ds->ip, ip, NULL));
}

/* Have the cache resolve (or refresh) ip, sending a request when it asks. */
static void arp_want(struct dstate *ds, uint32_t ip, int64_t now)
{
	struct sluice_eth_addr mac;
	enum sluice_arp_resolve_result r = sluice_arp_resolve(&ds->arp, ip, NULL, now, &mac);
	if (r == SLUICE_ARP_QUEUED_REQUEST || r == SLUICE_ARP_HIT_REFRESH)
		arp_request(ds, ip);
}

static void tcp_refuse(struct dstate *ds, const struct sluice_wire_pkt *pkt)
{
	struct sluice_tcp_seg rst;
	if (!sluice_tcp_reset_for(&pkt->tcp, &rst))
		return;
	struct rte_mbuf *m;
	size_t cap;
	uint8_t *p = tx_frame(ds, &m, &cap);
	if (p)
		tx_queue(ds, m, sluice_wire_tcp_frame_build(p, cap, &pkt->eth.src, &ds->mac, ds->ip_id++, &rst));
}

static struct dconn *tcp_accept(struct dstate *ds, const struct sluice_wire_pkt *pkt, uint32_t slot, int64_t now)
{
	if (ds->nc->b->stopping)
		return NULL;
	if (ds->half_open >= (uint32_t)ds->nc->b->cfg.dpdk_syn_backlog) {
		/* The backlog is full: the oldest half-open connection makes way
		 * (its peer, if real, retries its SYN; a flood's never answers). */
		struct dconn *old = ds->ho_head;
		ds->syn_evicted++;
		sluice_tcp_abort(&old->tcb, (uint64_t)now); /* closed: off the list and the table */
		conn_find(ds, pkt->tcp.saddr, pkt->tcp.sport, &slot); /* the table shifted */
	}
	if (ds->conns >= SLUICE_DPDK_CONNS_MAX)
		return NULL;
	struct dconn *d = calloc(1, sizeof *d);
	if (!d || !(d->snd_buf = malloc(SLUICE_DPDK_SND_BUF_BYTES)) || !(d->ooo_buf = malloc(SLUICE_DPDK_OOO_BUF_BYTES))) {
		if (d)
			conn_free(d);
		return NULL;
	}
	d->ds = ds;
	d->peer_mac = pkt->eth.src;
	d->arp_gen = ds->arp_gen;
	d->next_hop = next_hop(ds, pkt->tcp.saddr);
	struct sluice_eth_addr mac;
	if (d->next_hop && sluice_arp_lookup(&ds->arp, d->next_hop, now, &mac))
		d->peer_mac = mac;
	else if (d->next_hop)
		arp_want(ds, d->next_hop, now); /* meanwhile the SYN's sender */
	struct sluice_tcp_config cfg;
	tcb_config(ds, d, &cfg);
	const struct sluice_tcp_seg *s = &pkt->tcp;
	uint32_t iss = tuple_hash(s->saddr ^ ds->secret, s->sport) + (uint32_t)(now * 250); /* RFC 6528's clock */
	if (sluice_tcp_accept(&d->tcb, &cfg, s, iss, (uint64_t)now) < 0) {
		conn_free(d);
		return NULL;
	}
	d->slot = slot;
	d->listed = true;
	ds->table[slot] = d;
	ds->conns++;
	half_open_add(ds, d);
	return d;
}

static void tcp_in(struct dstate *ds, const struct sluice_wire_pkt *pkt, int64_t now)
{
	const struct sluice_tcp_seg *s = &pkt->tcp;
	if (s->daddr != ds->ip) {
		ds->not_ours++; /* another host's (a shared segment): never answered */
		return;
	}
	if (s->dport != ds->listen_port) {
		tcp_refuse(ds, pkt); /* a closed port: RST, as any host */
		return;
	}
	uint32_t slot;
	struct dconn *d = conn_find(ds, s->saddr, s->sport, &slot);
	if (d) {
		sluice_tcp_input(&d->tcb, s, (uint64_t)now);
		rearm(ds, d);
		return;
	}
	bool syn = (s->flags & (SLUICE_TCP_SYN | SLUICE_TCP_ACK | SLUICE_TCP_RST)) == SLUICE_TCP_SYN;
	if (!syn || !(d = tcp_accept(ds, pkt, slot, now)))
		tcp_refuse(ds, pkt);
	else
		rearm(ds, d);
}

static void arp_release(void *pkt, void *arg)
{
	(void)arg;
	rte_pktmbuf_free(pkt);
}

static void arp_in(struct dstate *ds, const struct sluice_wire_pkt *pkt, int64_t now)
{
	struct sluice_arp_input_result r;
	sluice_arp_input(&ds->arp, &pkt->arp, now, &r);
	if (r.merged)
		ds->arp_gen++;
	if (r.reply) {
		struct rte_mbuf *m;
		size_t cap;
		uint8_t *p = tx_frame(ds, &m, &cap);
		if (p)
			tx_queue(ds, m, sluice_wire_arp_frame_reply(p, cap, &ds->mac, ds->ip, &pkt->arp));
	}
	for (uint32_t i = 0; i < r.ready_n; i++)
		rte_pktmbuf_free(r.ready[i]); /* nothing waits in the cache: a connection has its SYN's sender meanwhile */
}

static void frame_in(struct dstate *ds, struct rte_mbuf *m, int64_t now)
{
	struct sluice_wire_pkt pkt;
	const uint8_t *f = rte_pktmbuf_mtod(m, const uint8_t *);
	size_t len = rte_pktmbuf_data_len(m);
	unsigned verified = 0;
	if (ds->rx_csum) {
		/* What the NIC found good is not summed again; what it found bad
		 * or did not check is checked (and dropped) in software. */
		if ((m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK) == RTE_MBUF_F_RX_IP_CKSUM_GOOD)
			verified |= SLUICE_WIRE_CSUM_IP;
		if ((m->ol_flags & RTE_MBUF_F_RX_L4_CKSUM_MASK) == RTE_MBUF_F_RX_L4_CKSUM_GOOD)
			verified |= SLUICE_WIRE_CSUM_TCP;
	}
	switch (sluice_wire_classify_verified(f, len, &pkt, verified)) {
	case SLUICE_WIRE_ARP:
		arp_in(ds, &pkt, now);
		break;
	case SLUICE_WIRE_ICMP_ECHO:
		if (pkt.ip.daddr == ds->ip) {
			struct rte_mbuf *o;
			size_t cap;
			uint8_t *p = tx_frame(ds, &o, &cap);
			if (p)
				tx_queue(ds, o, sluice_wire_icmp_echo_reply_frame(p, cap, &pkt, &ds->mac, ds->ip_id++));
		}
		break;
	case SLUICE_WIRE_TCP:
		tcp_in(ds, &pkt, now);
		break;
	case SLUICE_WIRE_DROP:
	default:
		assert(pkt.reason < SLUICE_WIRE_REASONS);
		ds->drops[pkt.reason]++;
		break;
	}
	rte_pktmbuf_free(m); /* the stack copied what it kept */
}

/* ---- the ops --------------------------------------------------------------- */

static struct dconn *dconn_of(const struct conn *c) { return c->tconn; }

static void dpdk_recv_pause(struct conn *c, bool paused)
{
	struct dconn *d = dconn_of(c);
	if (!d || d->paused == paused)
		return;
	d->paused = paused;
	/* Paused, the window closes as bytes arrive (they stay with the peer);
	 * resumed, it opens at the next poll round (resume_run says why). */
	if (paused)
		sluice_tcp_set_rcv_space(&d->tcb, 0);
	else
		resume_queue(d->ds, d);
}

/* Copy what the send ring takes now (the rest as the peer acknowledges);
 * the sent upcall, at the end of the poll in which something was taken,
 * says how much, and the core sends the rest after it. */
static int dpdk_send(struct conn *c, const struct sluice_send_range *ranges, int n)
{
	struct dconn *d = dconn_of(c);
	assert(n > 0 && n <= SLUICE_SEND_RANGES_MAX && d->pend_n == 0);
	if (d->closing || d->dead)
		return -EPIPE;
	memcpy(d->pend, ranges, (size_t)n * sizeof *ranges);
	d->pend_n = n;
	d->pend_i = 0;
	d->pend_off = d->pend_taken = 0;
	pend_fill(d);
	sluice_tcp_output(&d->tcb, ds_now(d->ds));
	rearm(d->ds, d);
	return 0;
}

/* Abort: the connection ends now (RST) and the core hears of it at the end
 * of the next poll. Orderly: the FIN goes after what is queued and the
 * core hears at once that it is closed; the state machine finishes the
 * exchange (and TIME-WAIT) on its own, holding only its own buffers. */
static void dpdk_close(struct conn *c, bool abort)
{
	struct dconn *d = dconn_of(c);
	struct dstate *ds = d->ds;
	if (d->dead || d->detached)
		return; /* ended already: its closed upcall is queued */
	d->closing = true;
	if (abort)
		sluice_tcp_abort(&d->tcb, ds_now(d->ds));
	else
		(void)sluice_tcp_close(&d->tcb, ds_now(d->ds));
	if (d->dead)
		return; /* on the done list, with its connection */
	rearm(ds, d);
	d->detached = true;
	d->detach_next = ds->detach;
	ds->detach = d;
}

/* A send the ring never took anything of, on a connection that ends: the
 * core hears it failed before it hears the end (the contract's order). */
static void unsent(struct dconn *d)
{
	if (d->pend_n == 0)
		return;
	assert(!d->on_sent);
	d->pend_n = d->pend_i = 0;
	d->pend_off = d->pend_taken = 0;
	sluice_netcore_sent(d->c, -EPIPE);
}

/* Sends taken, connections the core closed, then connections that ended:
 * their upcalls, in that order (a connection may be on all three lists:
 * the done list frees it, so it comes last). */
static void report(struct dstate *ds)
{
	for (uint32_t i = 0; i < ds->sent_n; i++) {
		struct dconn *d = ds->sent_head[i];
		ssize_t n = (ssize_t)d->pend_taken;
		d->on_sent = false;
		d->pend_n = d->pend_i = 0;
		d->pend_off = d->pend_taken = 0;
		if (d->c)
			sluice_netcore_sent(d->c, d->dead ? -EPIPE : n);
	}
	ds->sent_n = 0;
	while (ds->detach) {
		struct dconn *d = ds->detach;
		ds->detach = d->detach_next;
		struct conn *c = d->c;
		if (!c)
			continue;
		unsent(d);
		d->c = NULL;
		sluice_netcore_closed(c, 0); /* which clears c->tconn */
	}
	while (ds->done) {
		struct dconn *d = ds->done;
		ds->done = d->done_next;
		if (d->c) {
			struct conn *c = d->c;
			unsent(d);
			d->c = NULL;
			sluice_netcore_closed(c, d->close_error);
		}
		conn_free(d);
	}
}

/* A connection's deadline came (or an earlier one armed, lazily): its
 * state machine's timers run if due, and its next deadline is armed. */
static void timer_fire(struct sluice_wheel_node *n, uint64_t now, void *arg)
{
	struct dstate *ds = arg;
	struct dconn *d = (struct dconn *)((char *)n - offsetof(struct dconn, tn));
	assert(!d->dead);
	if (sluice_tcp_next_timer(&d->tcb) <= now)
		sluice_tcp_on_timer(&d->tcb, now);
	rearm(ds, d); /* nothing when it ended */
}

/* The connections' due timers, from the wheel (the milliseconds since the
 * last look), and the ARP cache's. */
static void timers(struct dstate *ds, int64_t now)
{
	if (now >= ds->next_arp_ms) {
		ds->next_arp_ms = now + SLUICE_DPDK_ARP_TICK_MS;
		uint32_t retry[8];
		uint32_t n = sluice_arp_tick(&ds->arp, now, retry, 8);
		for (uint32_t i = 0; i < n; i++)
			arp_request(ds, retry[i]); /* unanswered yet, or refreshing before expiry */
	}
	(void)sluice_wheel_advance(&ds->wheel, (uint64_t)now, timer_fire, ds);
}

/* The test hook (SLUICE_DPDK_RX_CHAOS): a received frame is held back
 * until after the next one (reordering), handed in twice (duplication),
 * or has one byte past the Ethernet header flipped (corruption), each
 * with its probability. Off unless the environment asks. */
static uint32_t chaos_next(struct dstate *ds)
{
	uint32_t x = ds->chaos_rand;
	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	return ds->chaos_rand = x;
}

static void chaos_in(struct dstate *ds, struct rte_mbuf *m, int64_t now)
{
	if (chaos_next(ds) % 1000 < ds->chaos_corrupt && rte_pktmbuf_data_len(m) > 14) {
		uint8_t *f = rte_pktmbuf_mtod(m, uint8_t *);
		f[14 + chaos_next(ds) % (rte_pktmbuf_data_len(m) - 14)] ^= 0x5a;
		/* Damaged after the NIC looked: as if it had not checked (a NIC
		 * that had would have said bad), so the software checks run. */
		m->ol_flags &= ~(RTE_MBUF_F_RX_IP_CKSUM_MASK | RTE_MBUF_F_RX_L4_CKSUM_MASK);
		ds->chaos_counts[2]++;
	}
	if (chaos_next(ds) % 1000 < ds->chaos_dup) {
		struct rte_mbuf *c = rte_pktmbuf_copy(m, ds->pool, 0, UINT32_MAX);
		if (c) {
			frame_in(ds, c, now);
			ds->chaos_counts[1]++;
		}
	}
	if (!ds->chaos_held && chaos_next(ds) % 1000 < ds->chaos_reorder) {
		ds->chaos_held = m; /* after the next frame */
		ds->chaos_counts[0]++;
		return;
	}
	frame_in(ds, m, now);
	if (ds->chaos_held) {
		struct rte_mbuf *h = ds->chaos_held;
		ds->chaos_held = NULL;
		frame_in(ds, h, now);
	}
}

static int rx_once(struct dstate *ds, int64_t now)
{
	struct rte_mbuf *m[SLUICE_DPDK_BURST];
	uint16_t n = rte_eth_rx_burst(ds->port, ds->queue, m, SLUICE_DPDK_BURST);
	for (uint16_t i = 0; i < n; i++) {
		if (ds->chaos)
			chaos_in(ds, m[i], now);
		else
			frame_in(ds, m[i], now);
	}
	if (n == 0 && ds->chaos_held) { /* nothing followed it: it goes now, late */
		struct rte_mbuf *h = ds->chaos_held;
		ds->chaos_held = NULL;
		frame_in(ds, h, now);
	}
	ds->rx_frames += n;
	return n;
}

/* Nap on the core's eventfd (a wake: a storage core's reply, a stop). */
static void nap(struct netcore *nc, int64_t us)
{
	struct pollfd pfd = {.fd = nc->rt.efd, .events = POLLIN};
	struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
	if (ppoll(&pfd, 1, &ts, NULL) > 0) {
		uint64_t v;
		(void)!read(nc->rt.efd, &v, sizeof v);
	}
}

/* Interrupt mode, where the port offers Rx interrupts: the queue's
 * interrupt and the core's eventfd in the thread's DPDK epoll set, so a
 * napping core wakes when a frame arrives rather than at the nap's end.
 * In the core's own thread (the set is per thread); false: short naps. */
static bool intr_setup(struct dstate *ds)
{
	if (!ds->rx_intr)
		return false;
	int rc = rte_eth_dev_rx_intr_ctl_q(ds->port, ds->queue, RTE_EPOLL_PER_THREAD, RTE_INTR_EVENT_ADD, NULL);
	if (rc == 0) {
		memset(&ds->efd_ev, 0, sizeof ds->efd_ev);
		ds->efd_ev.epdata.event = EPOLLIN;
		rc = rte_epoll_ctl(RTE_EPOLL_PER_THREAD, EPOLL_CTL_ADD, ds->nc->rt.efd, &ds->efd_ev);
	}
	if (rc != 0) {
		SLOG_WARN("net", "network core %d: port %u queue %u: no Rx interrupt (%s): idle naps of %d ms", ds->nc->id,
			  ds->port, ds->queue, rte_strerror(rc < 0 ? -rc : rc), SLUICE_DPDK_NAP_MS);
		return false;
	}
	return true;
}

static void nap_intr(struct dstate *ds, int ms)
{
	bool armed = rte_eth_dev_rx_intr_enable(ds->port, ds->queue) == 0; /* net_tap: its fd is always armed */
	/* A frame that came before the interrupt was armed raises none on
	 * some NICs: one more look (a port that cannot count says < 0). */
	if (rte_eth_rx_queue_count(ds->port, ds->queue) <= 0) {
		struct rte_epoll_event ev[2];
		int n = rte_epoll_wait(RTE_EPOLL_PER_THREAD, ev, 2, ms);
		for (int i = 0; i < n; i++)
			if (ev[i].fd == ds->nc->rt.efd) {
				uint64_t v;
				(void)!read(ds->nc->rt.efd, &v, sizeof v);
			}
	}
	if (armed)
		(void)rte_eth_dev_rx_intr_disable(ds->port, ds->queue);
}

static void dpdk_poll(struct netcore *nc, int64_t wait_ms)
{
	struct dstate *ds = nc->tstate;
	if (!ds->registered) {
		ds->registered = true;
		if (rte_thread_register() < 0)
			SLOG_WARN("net", "network core %d: rte_thread_register: %s (mbuf caches unused)", nc->id,
				  rte_strerror(rte_errno));
		/* The core runs where its lcore does (the EAL's own thread for
		 * that lcore stays parked). */
		if (ds->lcore != LCORE_ID_ANY) {
			rte_cpuset_t set = rte_lcore_cpuset(ds->lcore);
			int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set);
			if (rc != 0)
				SLOG_WARN("net", "network core %d: cannot run on lcore %u's CPUs: %s", nc->id, ds->lcore,
					  strerror(rc));
		}
		ds->rx_intr = intr_setup(ds);
		pthread_sigmask(SIG_UNBLOCK, &steer_signals, NULL); /* the port's per-frame signal is ours (signals_steer) */
	}
	ds->in_poll = true;
	int64_t now = sluice_now_ms(), until = now + wait_ms;
	ds->now = now;
	for (;;) {
		uint32_t resumed = resume_run(ds, now);
		int got = rx_once(ds, now);
		if (got)
			ds->nap_us = SLUICE_DPDK_NAP_US_MIN;
		timers(ds, now);
		tx_flush(ds);
		if (got || resumed || ds->resume_n || ds->done || ds->detach || ds->sent_n || now >= until ||
		    !__atomic_load_n(&nc->rt.sleeping, __ATOMIC_ACQUIRE))
			break;
		if (++ds->empty_polls >= SLUICE_DPDK_SPIN_POLLS) {
			ds->empty_polls = 0;
			if (ds->rx_intr) {
				nap_intr(ds, (int)(until - now < SLUICE_DPDK_INTR_NAP_MS ? until - now : SLUICE_DPDK_INTR_NAP_MS));
			} else {
				int64_t left_us = (until - now) * 1000;
				nap(nc, left_us < ds->nap_us ? left_us : ds->nap_us);
				ds->nap_us = ds->nap_us * 2 > SLUICE_DPDK_NAP_MS * 1000 ? SLUICE_DPDK_NAP_MS * 1000 : ds->nap_us * 2;
			}
		}
		ds->now = now = sluice_now_ms();
	}
	report(ds);
	tx_flush(ds);
	ds->in_poll = false;
}

/* ---- start and stop --------------------------------------------------- */

/* What the network cores share, set up once by prepare on the main thread
 * before any core starts, and read-only after: core k's EAL lcore, its
 * port and queue, its mbuf pool. */
static struct {
	bool eal_up;
	int cores;
	unsigned lcore[SLUICE_CORES_MAX]; /* LCORE_ID_ANY: not pinned (an EAL with one lcore) */
	uint16_t port[SLUICE_CORES_MAX], queue[SLUICE_CORES_MAX];
	struct rte_mempool *pool[SLUICE_CORES_MAX];
	uint16_t ports[SLUICE_DPDK_PORTS_MAX];
	int ports_n;
	bool rss; /* one port, its queues spread by the device's hash */
	bool tx_csum[RTE_MAX_ETHPORTS], rx_csum[RTE_MAX_ETHPORTS]; /* checksum offloads enabled on each port */
	bool rx_intr[RTE_MAX_ETHPORTS];                            /* Rx interrupts configured on each port */
	int fini_left;
} g;

static int eal_start(const struct sluice_config *cfg)
{
	static char args[SLUICE_CONFIG_STRING_MAX];
	char *argv[SLUICE_DPDK_ARGS_MAX + 2];
	int argc = 0;
	argv[argc++] = "sluice-broker";
	snprintf(args, sizeof args, "%s", cfg->dpdk_eal_args);
	for (char *save = NULL, *t = strtok_r(args, " \t", &save); t; t = strtok_r(NULL, " \t", &save)) {
		if (argc > SLUICE_DPDK_ARGS_MAX) {
			SLOG_ERR("net", "sluice.dpdk.eal.args: more than %d arguments", SLUICE_DPDK_ARGS_MAX);
			return -1;
		}
		argv[argc++] = t;
	}
	argv[argc] = NULL;
	/* The EAL pins the calling thread (main's) to its main lcore, and the
	 * cores' threads, started later, would inherit it: they keep the
	 * process's own placement (each network core then takes its lcore's,
	 * the storage cores sluice.cpu.affinity's). */
	cpu_set_t before;
	bool saved = pthread_getaffinity_np(pthread_self(), sizeof before, &before) == 0;
	/* The EAL's threads are born with the real-time signals blocked: a
	 * port's per-frame signal (net_tap's) must reach a network core. */
	sigset_t rt, old;
	sigemptyset(&rt);
	for (int sig = SIGRTMIN; sig <= SIGRTMAX; sig++)
		sigaddset(&rt, sig);
	pthread_sigmask(SIG_BLOCK, &rt, &old);
	int rc_init = rte_eal_init(argc, argv);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc_init < 0) {
		SLOG_ERR("net", "sluice.dpdk.eal.args: rte_eal_init failed: %s (args '%s')", rte_strerror(rte_errno),
			 cfg->dpdk_eal_args);
		return -1;
	}
	if (saved)
		(void)pthread_setaffinity_np(pthread_self(), sizeof before, &before);
	g.eal_up = true;
	return 0;
}

/* A list of numbers and ranges, "1,3-5", each within [0, max]; at most cap
 * of them. Returns how many, or -1. */
static int parse_list(const char *text, unsigned max, unsigned *out, int cap)
{
	int n = 0;
	const char *p = text;
	while (*p) {
		char *end;
		unsigned long a = strtoul(p, &end, 10), b = a;
		if (end == p)
			return -1;
		if (*end == '-') {
			p = end + 1;
			b = strtoul(p, &end, 10);
			if (end == p)
				return -1;
		}
		if (a > max || b > max || b < a)
			return -1;
		for (unsigned long v = a; v <= b; v++) {
			if (n == cap)
				return -1;
			out[n++] = (unsigned)v;
		}
		p = end;
		if (*p == ',')
			p++;
		else if (*p)
			return -1;
	}
	return n;
}

static int parse_ipv4(const char *text, uint32_t *out)
{
	struct in_addr a;
	if (inet_pton(AF_INET, text, &a) != 1)
		return -1;
	*out = ntohl(a.s_addr);
	return 0;
}

static int address_config(struct dstate *ds, const struct sluice_config *cfg)
{
	char addr[64];
	const char *slash = strchr(cfg->dpdk_ipv4_address, '/');
	int prefix = slash ? atoi(slash + 1) : -1;
	snprintf(addr, sizeof addr, "%.*s", slash ? (int)(slash - cfg->dpdk_ipv4_address) : 0, cfg->dpdk_ipv4_address);
	if (!slash || prefix < 1 || prefix > 32 || parse_ipv4(addr, &ds->ip) < 0) {
		SLOG_ERR("net", "sluice.dpdk.ipv4.address: '%s' is not an IPv4 address with a prefix (a.b.c.d/n)",
			 cfg->dpdk_ipv4_address);
		return -1;
	}
	ds->netmask = prefix == 32 ? 0xffffffffu : ~(0xffffffffu >> prefix);
	if (cfg->dpdk_ipv4_gateway[0] && parse_ipv4(cfg->dpdk_ipv4_gateway, &ds->gateway) < 0) {
		SLOG_ERR("net", "sluice.dpdk.ipv4.gateway: '%s' is not an IPv4 address", cfg->dpdk_ipv4_gateway);
		return -1;
	}
	ds->listen_port = (uint16_t)cfg->listen_port;
	return 0;
}

/* The listener the transport serves must be the one `listeners` names
 * (this broker has one listener). */
static int listener_check(const struct sluice_config *cfg)
{
	const char *sep = strstr(cfg->listeners, "://");
	size_t n = sep ? (size_t)(sep - cfg->listeners) : 0;
	if (n == 0 || strlen(cfg->dpdk_listener) != n || strncasecmp(cfg->listeners, cfg->dpdk_listener, n) != 0 ||
	    strncasecmp(cfg->listeners, "PLAINTEXT", n) != 0) {
		SLOG_ERR("net", "sluice.dpdk.listener: '%s' is not the PLAINTEXT listener in listeners='%s' (the dpdk "
			 "transport serves a PLAINTEXT listener; this broker has one listener)", cfg->dpdk_listener,
			 cfg->listeners);
		return -1;
	}
	return 0;
}

/* The network cores: the lcores sluice.dpdk.lcores names, or else every
 * EAL lcore but the main one, or else (an EAL of one lcore) one core that
 * sluice.cpu.affinity places. */
static int lcores_config(const struct sluice_config *cfg)
{
	unsigned ids[SLUICE_CORES_MAX];
	int n = 0;
	if (cfg->dpdk_lcores[0]) {
		n = parse_list(cfg->dpdk_lcores, RTE_MAX_LCORE - 1, ids, SLUICE_CORES_MAX);
		if (n <= 0) {
			SLOG_ERR("net", "sluice.dpdk.lcores: '%s' is not a list of lcore ids (e.g. 1,2 or 1-3; at most %d)",
				 cfg->dpdk_lcores, SLUICE_CORES_MAX);
			return -1;
		}
		for (int i = 0; i < n; i++) {
			for (int j = 0; j < i; j++)
				if (ids[j] == ids[i]) {
					SLOG_ERR("net", "sluice.dpdk.lcores: lcore %u is named twice", ids[i]);
					return -1;
				}
			if (!rte_lcore_is_enabled(ids[i])) {
				SLOG_ERR("net", "sluice.dpdk.lcores: lcore %u is not one of the EAL's (its -l or --lcores in "
					 "sluice.dpdk.eal.args)", ids[i]);
				return -1;
			}
		}
	} else {
		unsigned l;
		RTE_LCORE_FOREACH_WORKER(l)
		{
			if (n == SLUICE_CORES_MAX)
				break;
			ids[n++] = l;
		}
		if (n == 0)
			ids[n++] = LCORE_ID_ANY;
	}
	g.cores = n;
	memcpy(g.lcore, ids, (size_t)n * sizeof ids[0]);
	return 0;
}

/* Ports and queues: one port whose queues the device's RSS hash spreads
 * connections over (a real NIC), or one port per core (net_tap, whose RSS
 * this kernel cannot do). */
static int ports_config(const struct sluice_config *cfg)
{
	unsigned ids[SLUICE_DPDK_PORTS_MAX];
	int n = parse_list(cfg->dpdk_ports, RTE_MAX_ETHPORTS - 1, ids, SLUICE_DPDK_PORTS_MAX);
	if (n <= 0) {
		SLOG_ERR("net", "sluice.dpdk.port: '%s' is not a port index or a list of them (e.g. 0 or 0,1)",
			 cfg->dpdk_ports);
		return -1;
	}
	if (n != 1 && n != g.cores) {
		SLOG_ERR("net", "sluice.dpdk.port: %d ports for %d network cores (sluice.dpdk.lcores): give one port, "
			 "whose queues RSS spreads over the cores, or one port per core", n, g.cores);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		if (!rte_eth_dev_is_valid_port((uint16_t)ids[i])) {
			SLOG_ERR("net", "sluice.dpdk.port: no DPDK port %u (the EAL found %u; give a device with "
				 "sluice.dpdk.eal.args, e.g. --vdev=net_tap0,iface=sltap0)", ids[i], rte_eth_dev_count_avail());
			return -1;
		}
		for (int j = 0; j < i; j++)
			if (ids[j] == ids[i]) {
				SLOG_ERR("net", "sluice.dpdk.port: port %u is named twice", ids[i]);
				return -1;
			}
		g.ports[i] = (uint16_t)ids[i];
	}
	g.ports_n = n;
	g.rss = n == 1 && g.cores > 1;
	for (int k = 0; k < g.cores; k++) {
		g.port[k] = g.ports[n == 1 ? 0 : k];
		g.queue[k] = (uint16_t)(n == 1 ? k : 0);
	}
	return 0;
}

static int port_configure(const struct sluice_config *cfg, uint16_t p, int q, struct rte_mempool *const *pools,
			  const struct rte_eth_conf *conf);

/* Configure and start port p with q queue pairs, queue i receiving into
 * pools[i]. */
static int port_start(const struct sluice_config *cfg, uint16_t p, int q, struct rte_mempool *const *pools)
{
	struct rte_eth_conf conf;
	memset(&conf, 0, sizeof conf);
	struct rte_eth_dev_info info;
	int rc = rte_eth_dev_info_get(p, &info);
	if (rc == 0 && q > 1) {
		uint64_t hf = info.flow_type_rss_offloads & (RTE_ETH_RSS_NONFRAG_IPV4_TCP | RTE_ETH_RSS_IPV4);
		if (info.max_rx_queues < q || info.max_tx_queues < q || !(hf & RTE_ETH_RSS_NONFRAG_IPV4_TCP)) {
			SLOG_ERR("net", "sluice.dpdk.port %u (%s): cannot spread %d network cores by RSS (%u receive "
				 "queues, TCP hashing %s): name one port per core in sluice.dpdk.port, or fewer lcores",
				 p, info.driver_name, q, info.max_rx_queues,
				 (hf & RTE_ETH_RSS_NONFRAG_IPV4_TCP) ? "offered" : "not offered");
			return -1;
		}
		conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
		conf.rx_adv_conf.rss_conf.rss_hf = hf;
	}
	const uint64_t tx_want = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM | RTE_ETH_TX_OFFLOAD_TCP_CKSUM;
	const uint64_t rx_want = RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | RTE_ETH_RX_OFFLOAD_TCP_CKSUM;
	if (rc == 0 && cfg->dpdk_checksum_offload) {
		g.tx_csum[p] = (info.tx_offload_capa & tx_want) == tx_want;
		g.rx_csum[p] = (info.rx_offload_capa & rx_want) == rx_want;
		conf.txmode.offloads = g.tx_csum[p] ? tx_want : 0;
		conf.rxmode.offloads = g.rx_csum[p] ? rx_want : 0;
	}
	/* Rx interrupts where the port takes them (its start says), else
	 * without: the cores then nap briefly instead. */
	conf.intr_conf.rxq = cfg->dpdk_rx_interrupts;
	g.rx_intr[p] = cfg->dpdk_rx_interrupts;
	int started = rc == 0 ? port_configure(cfg, p, q, pools, &conf) : -1;
	if (rc == 0 && started < 0 && cfg->dpdk_rx_interrupts) {
		(void)rte_eth_dev_stop(p);
		conf.intr_conf.rxq = 0;
		g.rx_intr[p] = false;
		started = port_configure(cfg, p, q, pools, &conf);
	}
	if (rc == 0 && started < 0)
		rc = -rte_errno;
	if (rc < 0) {
		SLOG_ERR("net", "sluice.dpdk.port %u: cannot start it: %s", p, rte_strerror(-rc));
		return -1;
	}
	SLOG_INFO("net", "sluice.dpdk.port %u (%s): %d queue pair(s); checksums: sent %s, received %s; idle cores %s", p,
		  info.driver_name, q, g.tx_csum[p] ? "by the NIC" : "in software",
		  g.rx_csum[p] ? "checked by the NIC (software when it did not)" : "in software",
		  g.rx_intr[p] ? "sleep until a frame arrives (Rx interrupts)" : "nap 1 ms at a time");
	return 0;
}

/* Configure and start p as conf says; -1 with rte_errno set. */
static int port_configure(const struct sluice_config *cfg, uint16_t p, int q, struct rte_mempool *const *pools,
			  const struct rte_eth_conf *conf)
{
	int rc = rte_eth_dev_configure(p, (uint16_t)q, (uint16_t)q, conf);
	for (int i = 0; rc == 0 && i < q; i++) {
		rc = rte_eth_rx_queue_setup(p, (uint16_t)i, SLUICE_DPDK_RX_DESC, rte_eth_dev_socket_id(p), NULL, pools[i]);
		if (rc == 0)
			rc = rte_eth_tx_queue_setup(p, (uint16_t)i, SLUICE_DPDK_TX_DESC, rte_eth_dev_socket_id(p), NULL);
	}
	if (rc == 0 && cfg->dpdk_mtu != 1500)
		rc = rte_eth_dev_set_mtu(p, (uint16_t)cfg->dpdk_mtu);
	if (rc == 0)
		rc = rte_eth_dev_start(p);
	if (rc < 0) {
		rte_errno = -rc;
		return -1;
	}
	return 0;
}

/* net_tap raises a real-time signal for every frame it queues (its queue
 * descriptors are O_ASYNC), and its receive burst reads nothing until that
 * signal's handler has run. Sent to the process, the signal would wake
 * whichever thread the kernel picks, and a network core woken by the
 * queue's interrupt could look before the handler ran elsewhere, then
 * sleep again with the frame waiting. So the signal is blocked in every
 * other thread (the main thread now, so the threads it starts inherit it;
 * the EAL's were born blocking it) and taken by the network cores alone,
 * where it runs before they look. */
static void signals_steer(void)
{
	sigemptyset(&steer_signals);
	for (int k = 0; k < g.cores; k++) {
		if (!g.rx_intr[g.port[k]])
			continue;
		int fd = rte_eth_dev_rx_intr_ctl_q_get_fd(g.port[k], g.queue[k]);
		int sig = fd >= 0 ? fcntl(fd, F_GETSIG) : -1;
		if (sig >= SIGRTMIN && sig <= SIGRTMAX && !sigismember(&steer_signals, sig)) {
			sigaddset(&steer_signals, sig);
			SLOG_INFO("net", "port %u raises signal %d per frame: taken by the network cores alone", g.port[k],
				  sig);
		}
	}
	pthread_sigmask(SIG_BLOCK, &steer_signals, NULL);
}

static int dpdk_prepare(struct broker *b)
{
	const struct sluice_config *cfg = &b->cfg;
	struct dstate probe;
	memset(&probe, 0, sizeof probe);
	if (address_config(&probe, cfg) < 0 || listener_check(cfg) < 0 || eal_start(cfg) < 0 ||
	    lcores_config(cfg) < 0 || ports_config(cfg) < 0)
		return -1;
	for (int k = 0; k < g.cores; k++) {
		char name[RTE_MEMPOOL_NAMESIZE];
		snprintf(name, sizeof name, "sluice_net%d", k);
		int socket = g.lcore[k] == LCORE_ID_ANY ? rte_eth_dev_socket_id(g.port[k]) : (int)rte_lcore_to_socket_id(g.lcore[k]);
		g.pool[k] = rte_pktmbuf_pool_create(name, SLUICE_DPDK_MBUFS, SLUICE_DPDK_MBUF_CACHE, 0,
						    RTE_MBUF_DEFAULT_BUF_SIZE, socket);
		if (!g.pool[k]) {
			SLOG_ERR("net", "DPDK: cannot create network core %d's mbuf pool: %s (memory: -m in "
				 "sluice.dpdk.eal.args)", k, rte_strerror(rte_errno));
			return -1;
		}
	}
	for (int i = 0; i < g.ports_n; i++)
		if (port_start(cfg, g.ports[i], g.rss ? g.cores : 1, g.rss ? g.pool : &g.pool[i]) < 0)
			return -1;
	signals_steer();
	g.fini_left = g.cores;
	char lcores[256];
	size_t off = 0;
	for (int k = 0; k < g.cores && off < sizeof lcores; k++)
		off += (size_t)snprintf(lcores + off, sizeof lcores - off, g.lcore[k] == LCORE_ID_ANY ? "%sunpinned" : "%s%u",
					k ? "," : "", g.lcore[k]);
	SLOG_INFO("net", "sluice.transport=dpdk: %d network core(s) on lcores %s, %d port(s)%s (num.network.threads is "
		  "not used)", g.cores, lcores, g.ports_n, g.rss ? ", queues spread by RSS" : "");
	return g.cores;
}

/* SLUICE_DPDK_RX_CHAOS=seed:reorder:duplicate:corrupt, each per mille:
 * the tests' way to shuffle, repeat and damage what the stack receives. */
static void chaos_setup(struct dstate *ds)
{
	const char *env = getenv("SLUICE_DPDK_RX_CHAOS");
	unsigned seed, r, d, c;
	if (!env || sscanf(env, "%u:%u:%u:%u", &seed, &r, &d, &c) != 4)
		return;
	ds->chaos = true;
	ds->chaos_rand = seed ? seed : 1;
	ds->chaos_reorder = r > 1000 ? 1000 : r;
	ds->chaos_dup = d > 1000 ? 1000 : d;
	ds->chaos_corrupt = c > 1000 ? 1000 : c;
	SLOG_WARN("net", "SLUICE_DPDK_RX_CHAOS: per mille of received frames reordered %u, duplicated %u, "
		  "corrupted %u (a test hook)", ds->chaos_reorder, ds->chaos_dup, ds->chaos_corrupt);
}

static int dpdk_init(struct netcore *nc)
{
	const struct sluice_config *cfg = &nc->b->cfg;
	assert(g.eal_up && nc->id < g.cores);
	struct dstate *ds = calloc(1, sizeof *ds);
	if (!ds)
		return -1;
	nc->tstate = ds;
	ds->nc = nc;
	ds->nap_us = SLUICE_DPDK_NAP_US_MIN;
	if (address_config(ds, cfg) < 0)
		return -1;
	ds->port = g.port[nc->id];
	ds->queue = g.queue[nc->id];
	ds->pool = g.pool[nc->id];
	ds->lcore = g.lcore[nc->id];
	ds->tx_csum = g.tx_csum[ds->port] ? SLUICE_WIRE_CSUM_IP | SLUICE_WIRE_CSUM_TCP : 0;
	ds->rx_csum = g.rx_csum[ds->port];
	ds->rx_intr = g.rx_intr[ds->port]; /* armed in the core's thread (intr_setup) */
	if (rte_eth_macaddr_get(ds->port, (struct rte_ether_addr *)ds->mac.b) < 0)
		return -1;
	ds->secret = (uint32_t)rte_rand();
	sluice_wheel_init(&ds->wheel, (uint64_t)sluice_now_ms());
	chaos_setup(ds);
	sluice_arp_init(&ds->arp, ds->ip, &ds->mac, SLUICE_ARP_TTL_MS_DEFAULT, arp_release, ds);
	/* Announce the address (gratuitous ARP) once per port, so neighbours'
	 * caches learn it. */
	if (ds->queue == 0) {
		struct rte_mbuf *m;
		size_t cap;
		uint8_t *p = tx_frame(ds, &m, &cap);
		if (p)
			tx_queue(ds, m, sluice_arp_announce(&ds->arp, p, cap));
		tx_flush(ds);
	}
	char mac[32];
	snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", ds->mac.b[0], ds->mac.b[1], ds->mac.b[2], ds->mac.b[3],
		 ds->mac.b[4], ds->mac.b[5]);
	SLOG_INFO("net", "network core %d: DPDK port %u queue %u (%s) up, %s on %s, TCP port %u; our own TCP/IP stack",
		  nc->id, ds->port, ds->queue, mac, cfg->dpdk_ipv4_address,
		  cfg->dpdk_ipv4_gateway[0] ? cfg->dpdk_ipv4_gateway : "no gateway", ds->listen_port);
	return 0;
}

static void dpdk_fini(struct netcore *nc)
{
	struct dstate *ds = nc->tstate;
	if (ds) {
		for (uint32_t i = 0; i < SLUICE_DPDK_TABLE_SLOTS; i++)
			if (ds->table[i]) {
				struct dconn *d = ds->table[i];
				SLOG_DEBUG("net", "network core %d: at stop, connection from port %u in %s: next timer %"
					   PRIu64 ", on the wheel %d at %" PRIu64 " (wheel at %" PRIu64 "), %" PRIu64
					   " segments in, %" PRIu64 " out, %" PRIu64 " bytes in, %" PRIu64 " out, %" PRIu64
					   " retransmissions", nc->id, d->tcb.rport, sluice_tcp_state_name(d->tcb.state),
					   sluice_tcp_next_timer(&d->tcb), d->tn.armed, d->tn.at, ds->wheel.now,
					   d->tcb.counters.segs_in, d->tcb.counters.segs_out, d->tcb.counters.bytes_in,
					   d->tcb.counters.bytes_out, d->tcb.counters.retransmits);
				counters_add(&ds->tcp, &ds->table[i]->tcb.counters);
				conn_free(ds->table[i]);
			}
		while (ds->done) {
			struct dconn *d = ds->done;
			ds->done = d->done_next;
			conn_free(d);
		}
		if (ds->chaos_held)
			rte_pktmbuf_free(ds->chaos_held);
		if (ds->chaos)
			SLOG_INFO("net", "network core %d: SLUICE_DPDK_RX_CHAOS: %" PRIu64 " frames reordered, %" PRIu64
				  " duplicated, %" PRIu64 " corrupted", nc->id, ds->chaos_counts[0], ds->chaos_counts[1],
				  ds->chaos_counts[2]);
		tx_flush(ds);
		sluice_arp_fini(&ds->arp);
		uint64_t dropped = ds->not_ours;
		for (int r = 0; r < SLUICE_WIRE_REASONS; r++)
			dropped += ds->drops[r];
		const struct sluice_tcp_counters *t = &ds->tcp;
		SLOG_INFO("net", "network core %d: DPDK: %" PRIu64 " frames in (%" PRIu64 " dropped), %" PRIu64 " out, %"
			  PRIu64 " not sent, %" PRIu64 " connections refused, %" PRIu64 " half-open dropped for newer "
			  "SYNs; TCP: %" PRIu64 " segments in, %" PRIu64
			  " out, %" PRIu64 " retransmissions, %" PRIu64 " fast retransmissions, %" PRIu64
			  " SACK retransmissions, %" PRIu64 " duplicate ACKs, %" PRIu64 " out-of-order kept, %" PRIu64
			  " dropped, %" PRIu64 " unacceptable, %" PRIu64 " keepalive probes", nc->id, ds->rx_frames, dropped,
			  ds->tx_frames, ds->tx_drops, ds->refused, ds->syn_evicted, t->segs_in, t->segs_out, t->retransmits,
			  t->fast_retransmits, t->sack_retransmits, t->dup_acks, t->ooo_queued, t->ooo_drops, t->unacceptable,
			  t->keepalive_probes);
		SLOG_INFO("net", "network core %d: DPDK: connections ended: %" PRIu64 " orderly, %" PRIu64
			  " reset by the peer, %" PRIu64 " timed out (sluice.dpdk.tcp.retries), %" PRIu64 " aborted, %"
			  PRIu64 " in FIN-WAIT-2, %" PRIu64 " keepalive unanswered", nc->id,
			  ds->ends[SLUICE_TCP_END_ORDERLY], ds->ends[SLUICE_TCP_END_RESET], ds->ends[SLUICE_TCP_END_TIMEOUT],
			  ds->ends[SLUICE_TCP_END_ABORTED], ds->ends[SLUICE_TCP_END_FIN_WAIT_2],
			  ds->ends[SLUICE_TCP_END_KEEPALIVE]);
		free(ds);
		nc->tstate = NULL;
	}
	/* The last core's fini (after every core's thread stopped) closes the
	 * ports and the EAL. */
	if (--g.fini_left > 0 || !g.eal_up)
		return;
	for (int i = 0; i < g.ports_n; i++) {
		(void)rte_eth_dev_stop(g.ports[i]);
		(void)rte_eth_dev_close(g.ports[i]);
	}
	(void)rte_eal_cleanup();
	g.eal_up = false;
}

const struct sluice_transport_ops sluice_transport_dpdk = {
	.name = "dpdk",
	.prepare = dpdk_prepare,
	.init = dpdk_init,
	.fini = dpdk_fini,
	.recv_pause = dpdk_recv_pause,
	.send = dpdk_send,
	.close = dpdk_close,
	.poll = dpdk_poll,
};
