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
#include <rte_bus.h>
#include <rte_dev.h>
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
#define SLUICE_DPDK_SND_DESCS 256         /* pieces of one connection's send stream at once (power of two) */
#define SLUICE_DPDK_ZC_MIN 256            /* shorter pieces of cached log bytes are copied, not referenced */
#define SLUICE_DPDK_ZREFS 8192            /* cached ranges held by reference, per network core */
#define SLUICE_DPDK_EXT_MBUFS 8191        /* mbufs per network core that carry bytes by reference */
#define SLUICE_DPDK_TX_SEGS_MAX 16        /* mbufs chained in one frame, at most */
#define SLUICE_DPDK_FRAME_PIECES 96       /* pieces of the send stream one frame's payload spans, at most */
#define SLUICE_DPDK_TSO_SEGS_MAX 64       /* mbufs chained in one offloaded (TSO) frame, at most */
#define SLUICE_DPDK_TSO_CHUNK 1920        /* payload bytes per mbuf of a TSO frame: a fresh mbuf's room, even */
_Static_assert(SLUICE_DPDK_TABLE_SLOTS >= 2 * SLUICE_DPDK_CONNS_MAX, "the table stays at most half full");
_Static_assert((SLUICE_DPDK_TABLE_SLOTS & (SLUICE_DPDK_TABLE_SLOTS - 1)) == 0, "slots mask by a power of two");
_Static_assert(SLUICE_DPDK_SND_BUF_BYTES <= SLUICE_TCP_SND_BUF_MAX, "within the state machine's ring bound");
_Static_assert(SLUICE_DPDK_OOO_BUF_BYTES <= SLUICE_TCP_OOO_BUF_MAX, "within the reassembly bound");
_Static_assert(SLUICE_DPDK_BURST <= SLUICE_DPDK_MBUF_CACHE, "a burst comes from the core's cache");
_Static_assert((SLUICE_DPDK_SND_DESCS & (SLUICE_DPDK_SND_DESCS - 1)) == 0, "descriptors mask by a power of two");
/* A frame's payload (9000 - 40 bytes at most) spans referenced pieces of
 * SLUICE_DPDK_ZC_MIN bytes or more (a shorter one, cut by an ACK, only at
 * the front), each with at most one copied piece before it. */
_Static_assert(SLUICE_DPDK_FRAME_PIECES >= 2 * (9000 / SLUICE_DPDK_ZC_MIN + 2) + 1, "a jumbo frame's pieces fit");

/* A range of cached log bytes (a pinned extent's) that a connection's send
 * stream holds by reference: the pin held (sluice_pin_hold) until the
 * stream has been acknowledged past it and every frame that carried its
 * bytes has left the NIC. shinfo's count: the stream's reference and one
 * per mbuf attached; when it falls to 0 the pin is dropped. */
struct zref {
	struct rte_mbuf_ext_shared_info shinfo;
	struct sluice_pin *pin;
	struct zpool *zp;
	struct zref *next; /* the free list */
};

/* A network core's references. It outlives the core's state until the
 * ports are closed: frames still in a NIC's ring point at them. */
struct zpool {
	struct zref *free;
	uint32_t used;
	bool stopped; /* the core stopped: a reference freed now drops no pin (the broker is ending) */
	struct zref refs[SLUICE_DPDK_ZREFS];
};

/* A piece of a connection's send stream: bytes copied into its ring, or a
 * cached range held by reference. */
struct sdesc {
	const uint8_t *base;
	uint32_t len;
	struct zref *ref; /* NULL: copied (base points into the ring) */
};

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
	/* The send stream (tcp.c's external send buffer) from its first
	 * unacknowledged byte: pieces in order, a ring of sq_n from sq_head;
	 * the copied ones' bytes in snd_buf, a ring of cr_len from cr_head.
	 * cur_k, cur_at: emit's cursor, piece cur_k from the front starts
	 * cur_at bytes in (reset when the front moves). */
	struct sdesc sq[SLUICE_DPDK_SND_DESCS];
	uint32_t sq_head, sq_n, cr_head, cr_len, cur_k, cur_at;
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
	struct rte_mempool *ext_pool;   /* mbufs without data room: attached to referenced bytes */
	struct zpool *zp;
	bool zc;                        /* cached bytes sent by reference (sluice.dpdk.zero.copy, the port allows) */
	uint16_t tx_segs;               /* mbufs one frame may chain */
	bool tso;                       /* the port cuts segments (TCP segmentation offload) */
	uint16_t tso_mss_less;          /* bytes the port's TSO wants under the MSS (net_tap counts the Ethernet header) */
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
	uint64_t zc_frames, zc_bytes;   /* frames that carried bytes by reference, and those bytes (first sends and resends) */
	uint64_t tso_frames, tso_bytes; /* frames the port cut into segments (TSO), and their payload */
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

/* ---- the send stream: copies and references ------------------------------ */

static void zref_free(struct zref *z)
{
	struct zpool *zp = z->zp;
	if (!zp->stopped)
		sluice_pin_put(z->pin);
	z->pin = NULL;
	z->next = zp->free;
	zp->free = z;
	assert(zp->used > 0);
	zp->used--;
}

/* The last mbuf attached to z's bytes was freed (sent, or dropped). */
static void zref_free_cb(void *addr, void *opaque)
{
	(void)addr;
	zref_free(opaque);
}

/* A reference to bytes of pin's (held), the stream's own; NULL if none is free. */
static struct zref *zref_get(struct zpool *zp, struct sluice_pin *pin)
{
	struct zref *z = zp->free;
	if (!z)
		return NULL;
	zp->free = z->next;
	zp->used++;
	z->next = NULL;
	z->pin = pin;
	sluice_pin_hold(pin);
	z->shinfo.free_cb = zref_free_cb;
	z->shinfo.fcb_opaque = z;
	rte_mbuf_ext_refcnt_set(&z->shinfo, 1);
	return z;
}

static void zref_put(struct zref *z)
{
	if (rte_mbuf_ext_refcnt_update(&z->shinfo, -1) == 0)
		zref_free(z);
}

static struct zpool *zpool_new(void)
{
	struct zpool *zp = calloc(1, sizeof *zp);
	if (!zp)
		return NULL;
	for (uint32_t i = SLUICE_DPDK_ZREFS; i-- > 0;) {
		zp->refs[i].zp = zp;
		zp->refs[i].next = zp->free;
		zp->free = &zp->refs[i];
	}
	return zp;
}

static struct sdesc *sq_at(struct dconn *d, uint32_t k) { return &d->sq[(d->sq_head + k) & (SLUICE_DPDK_SND_DESCS - 1)]; }

static void sq_push(struct dconn *d, const uint8_t *base, uint32_t len, struct zref *ref)
{
	assert(d->sq_n < SLUICE_DPDK_SND_DESCS && len > 0);
	*sq_at(d, d->sq_n++) = (struct sdesc){base, len, ref};
}

/* Copy up to n bytes onto the stream, as far as it and its ring take them;
 * returns how many. */
static uint32_t take_copy(struct dconn *d, const uint8_t *p, uint32_t n)
{
	uint32_t took = 0;
	while (took < n) {
		uint32_t pos = (d->cr_head + d->cr_len) & (SLUICE_DPDK_SND_BUF_BYTES - 1);
		uint32_t k = n - took;
		if (k > SLUICE_DPDK_SND_BUF_BYTES - pos)
			k = SLUICE_DPDK_SND_BUF_BYTES - pos; /* up to the ring's end: the next piece starts at 0 */
		if (k > SLUICE_DPDK_SND_BUF_BYTES - d->cr_len)
			k = SLUICE_DPDK_SND_BUF_BYTES - d->cr_len;
		struct sdesc *t = d->sq_n ? sq_at(d, d->sq_n - 1) : NULL;
		bool join = t && !t->ref && t->base + t->len == d->snd_buf + pos;
		if (!join && d->sq_n == SLUICE_DPDK_SND_DESCS)
			break;
		k = sluice_tcp_send_external(&d->tcb, k);
		if (k == 0)
			break;
		memcpy(d->snd_buf + pos, p + took, k);
		if (join)
			t->len += k;
		else
			sq_push(d, d->snd_buf + pos, k, NULL);
		d->cr_len += k;
		took += k;
	}
	return took;
}

/* Put up to n bytes of pin's onto the stream by reference; 0 when that
 * does not pay or cannot be done now (the caller copies them). */
static uint32_t take_ref(struct dconn *d, const uint8_t *p, uint32_t n, struct sluice_pin *pin)
{
	uint32_t space = sluice_tcp_send_space(&d->tcb);
	if (n > space)
		n = space;
	if (n < SLUICE_DPDK_ZC_MIN || d->sq_n == SLUICE_DPDK_SND_DESCS)
		return 0;
	struct zref *z = zref_get(d->ds->zp, pin);
	if (!z)
		return 0;
	uint32_t k = sluice_tcp_send_external(&d->tcb, n);
	assert(k == n);
	sq_push(d, p, k, z);
	return k;
}

/* The peer acknowledged the stream's first n bytes: they leave it. Emit's
 * cursor moves with the pieces after them (the one the front is now
 * starts at 0; one that left sends the cursor back to the front). */
static void sq_pop(struct dconn *d, uint32_t n)
{
	uint32_t gone = 0, bytes = n;
	while (n > 0) {
		assert(d->sq_n > 0);
		struct sdesc *e = sq_at(d, 0);
		uint32_t k = n < e->len ? n : e->len;
		if (!e->ref) {
			assert(e->base == d->snd_buf + d->cr_head && k <= d->cr_len);
			d->cr_head = (d->cr_head + k) & (SLUICE_DPDK_SND_BUF_BYTES - 1);
			d->cr_len -= k;
		}
		e->base += k;
		e->len -= k;
		n -= k;
		if (e->len == 0) {
			if (e->ref)
				zref_put(e->ref);
			e->ref = NULL;
			d->sq_head = (d->sq_head + 1) & (SLUICE_DPDK_SND_DESCS - 1);
			d->sq_n--;
			gone++;
		}
	}
	if (d->cur_k <= gone) {
		d->cur_k = d->cur_at = 0;
	} else {
		assert(d->cur_at >= bytes);
		d->cur_k -= gone;
		d->cur_at -= bytes;
	}
}

/* A piece of a frame's payload. */
struct fpiece {
	const uint8_t *p;
	uint32_t len;
	struct zref *ref;
};

/* The pieces of the stream's bytes [off, off + len) from its front, into
 * pc (at most max): how many. */
static int sq_pieces(struct dconn *d, uint32_t off, uint32_t len, struct fpiece *pc, int max)
{
	if (off < d->cur_at)
		d->cur_k = d->cur_at = 0;
	uint32_t k = d->cur_k, at = d->cur_at;
	while (k < d->sq_n && off >= at + sq_at(d, k)->len) {
		at += sq_at(d, k)->len;
		k++;
	}
	d->cur_k = k;
	d->cur_at = at;
	int n = 0;
	uint32_t skip = off - at;
	while (len > 0) {
		assert(k < d->sq_n && n < max);
		const struct sdesc *e = sq_at(d, k++);
		uint32_t take = e->len - skip < len ? e->len - skip : len;
		pc[n++] = (struct fpiece){e->base + skip, take, e->ref};
		len -= take;
		skip = 0;
	}
	return n;
}

/* Copy the stream's bytes [off, off + len) from its front into dst. */
static void sq_copy(struct dconn *d, uint32_t off, uint8_t *dst, uint32_t len)
{
	struct fpiece pc[SLUICE_DPDK_FRAME_PIECES];
	while (len > 0) {
		/* At most a piece per SLUICE_DPDK_ZC_MIN bytes and one before each (FRAME_PIECES' bound). */
		uint32_t take = len < 9000 - 40 ? len : 9000 - 40;
		int n = sq_pieces(d, off, take, pc, SLUICE_DPDK_FRAME_PIECES);
		for (int i = 0; i < n; i++) {
			memcpy(dst, pc[i].p, pc[i].len);
			dst += pc[i].len;
		}
		off += take;
		len -= take;
	}
}

static void conn_free(struct dconn *d)
{
	for (uint32_t k = 0; k < d->sq_n; k++)
		if (sq_at(d, k)->ref)
			zref_put(sq_at(d, k)->ref);
	d->sq_n = 0;
	free(d->snd_buf);
	free(d->ooo_buf);
	free(d);
}

/* ---- the state machine's callbacks ------------------------------------- */

static void tx_offload_flags(struct dstate *ds, struct rte_mbuf *m, size_t tcp_hdr_len)
{
	if (ds->tx_csum) {
		m->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM;
		m->l2_len = SLUICE_ETH_HDR_LEN;
		m->l3_len = SLUICE_IPV4_HDR_LEN;
		m->l4_len = tcp_hdr_len;
	}
}

/* Attach m to len bytes at p, held by z (one more reference). */
static void attach(struct rte_mbuf *m, const uint8_t *p, uint32_t len, struct zref *z)
{
	rte_iova_t iova = rte_eal_iova_mode() == RTE_IOVA_VA ? (rte_iova_t)(uintptr_t)p : RTE_BAD_IOVA;
	rte_mbuf_ext_refcnt_update(&z->shinfo, 1);
	rte_pktmbuf_attach_extbuf(m, (void *)(uintptr_t)p, iova, (uint16_t)len, &z->shinfo);
	m->data_len = (uint16_t)len;
}

/* A segment the port cuts (TSO): the headers alone in a fresh mbuf (the
 * checksums the port's, the pseudo-header's sum without the length), the
 * payload copied after it in chunks of even length (net_tap sums each
 * mbuf of a chain on its own, wrong after one of odd length). Not sent
 * when mbufs run out: as a lost segment, the state machine resends. */
static void emit_tso(struct dstate *ds, struct dconn *d, const struct sluice_tcp_seg *seg)
{
	struct rte_mbuf *head;
	size_t cap;
	uint8_t *p = tx_frame(ds, &head, &cap);
	if (!p)
		return;
	size_t hdr = sluice_wire_tcp_headers_build(p, cap, &d->peer_mac, &ds->mac, ds->ip_id, seg, NULL, 0,
						   SLUICE_WIRE_CSUM_IP | SLUICE_WIRE_CSUM_TCP | SLUICE_WIRE_CSUM_TSO);
	if (hdr == 0) {
		tx_queue(ds, head, 0);
		return;
	}
	head->data_len = (uint16_t)hdr;
	head->pkt_len = (uint32_t)hdr;
	struct rte_mbuf *tail = head;
	uint32_t off = seg->seq - d->tcb.snd_buf_seq, left = seg->payload_len;
	while (left > 0) {
		struct rte_mbuf *m = head->nb_segs < SLUICE_DPDK_TSO_SEGS_MAX ? rte_pktmbuf_alloc(ds->pool) : NULL;
		if (!m) {
			rte_pktmbuf_free(head);
			ds->tx_drops++;
			return;
		}
		uint32_t k = left < SLUICE_DPDK_TSO_CHUNK ? left : SLUICE_DPDK_TSO_CHUNK;
		assert(rte_pktmbuf_tailroom(m) >= k);
		sq_copy(d, off, rte_pktmbuf_mtod(m, uint8_t *), k);
		m->data_len = (uint16_t)k;
		tail->next = m;
		tail = m;
		head->nb_segs++;
		head->pkt_len += k;
		off += k;
		left -= k;
	}
	uint16_t segsz = (uint16_t)(d->tcb.smss - ds->tso_mss_less);
	head->ol_flags |= RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM | RTE_MBUF_F_TX_TCP_SEG;
	head->l2_len = SLUICE_ETH_HDR_LEN;
	head->l3_len = SLUICE_IPV4_HDR_LEN;
	head->l4_len = hdr - SLUICE_ETH_HDR_LEN - SLUICE_IPV4_HDR_LEN;
	head->tso_segsz = segsz;
	ds->ip_id = (uint16_t)(ds->ip_id + (seg->payload_len + segsz - 1) / segsz);
	ds->tso_frames++;
	ds->tso_bytes += seg->payload_len;
	ds->tx[ds->tx_n++] = head;
	if (ds->tx_n == SLUICE_DPDK_BURST)
		tx_flush(ds);
}

/* A segment whose payload is on the stream: the headers in a fresh mbuf,
 * then the payload's pieces, those held by reference (long enough to pay)
 * in mbufs attached to their bytes, the rest copied; one chain. Whatever
 * fails, the frame is not sent: as a lost segment, the state machine
 * resends it. */
static void emit_stream(struct dstate *ds, struct dconn *d, const struct sluice_tcp_seg *seg)
{
	struct fpiece pc[SLUICE_DPDK_FRAME_PIECES];
	int n = sq_pieces(d, seg->seq - d->tcb.snd_buf_seq, seg->payload_len, pc, SLUICE_DPDK_FRAME_PIECES);
	struct sluice_wire_piece wp[SLUICE_DPDK_FRAME_PIECES];
	bool by_ref = false;
	for (int i = 0; i < n; i++) {
		wp[i] = (struct sluice_wire_piece){pc[i].p, pc[i].len};
		by_ref |= ds->zc && pc[i].ref && pc[i].len >= SLUICE_DPDK_ZC_MIN;
	}
	struct rte_mbuf *head;
	size_t cap;
	uint8_t *p = tx_frame(ds, &head, &cap);
	if (!p)
		return;
	/* A chain's checksums are summed here: zero copy is for virtual
	 * devices, whose drivers sum in software anyway, and net_tap's sums
	 * each mbuf on its own (wrong after one of odd length). */
	size_t hdr = by_ref ? sluice_wire_tcp_headers_build(p, cap, &d->peer_mac, &ds->mac, ds->ip_id, seg, wp, n, 0) : 0;
	if (hdr == 0) {
		/* All copied, into one frame: the payload placed after the
		 * headers, which the whole-frame builder then writes before it. */
		size_t at = SLUICE_ETH_HDR_LEN + SLUICE_IPV4_HDR_LEN + SLUICE_TCP_HDR_LEN + sluice_wire_tcp_options_len(seg);
		if (at + seg->payload_len > cap) {
			tx_queue(ds, head, 0); /* cannot be: the MTU fits an mbuf (a dropped frame if it did) */
			return;
		}
		for (int i = 0, o = 0; i < n; o += (int)pc[i].len, i++)
			memcpy(p + at + o, pc[i].p, pc[i].len);
		struct sluice_tcp_seg placed = *seg;
		placed.payload = p + at;
		size_t len = sluice_wire_tcp_frame_build_offload(p, cap, &d->peer_mac, &ds->mac, ds->ip_id++, &placed,
								 ds->tx_csum);
		tx_offload_flags(ds, head, at - SLUICE_ETH_HDR_LEN - SLUICE_IPV4_HDR_LEN);
		tx_queue(ds, head, len);
		return;
	}
	ds->ip_id++;
	head->data_len = (uint16_t)hdr;
	head->pkt_len = (uint32_t)hdr;
	struct rte_mbuf *tail = head;
	uint64_t zc_bytes = 0;
	for (int i = 0; i < n; i++) {
		const uint8_t *src = pc[i].p;
		uint32_t left = pc[i].len;
		if (ds->zc && pc[i].ref && left >= SLUICE_DPDK_ZC_MIN && head->nb_segs + 2 <= ds->tx_segs) {
			struct rte_mbuf *m = rte_pktmbuf_alloc(ds->ext_pool);
			if (m) {
				attach(m, src, left, pc[i].ref);
				tail->next = m;
				tail = m;
				head->nb_segs++;
				head->pkt_len += left;
				zc_bytes += left;
				continue;
			}
		}
		while (left > 0) { /* copied: into the tail while it is the frame's own, else a fresh mbuf */
			if (RTE_MBUF_HAS_EXTBUF(tail) || rte_pktmbuf_tailroom(tail) == 0) {
				struct rte_mbuf *m = head->nb_segs < ds->tx_segs ? rte_pktmbuf_alloc(ds->pool) : NULL;
				if (!m) {
					rte_pktmbuf_free(head);
					ds->tx_drops++;
					return;
				}
				tail->next = m;
				tail = m;
				head->nb_segs++;
			}
			uint32_t room = (uint32_t)rte_pktmbuf_tailroom(tail);
			uint32_t k = left < room ? left : room;
			memcpy(rte_pktmbuf_mtod_offset(tail, uint8_t *, tail->data_len), src, k);
			tail->data_len = (uint16_t)(tail->data_len + k);
			head->pkt_len += k;
			src += k;
			left -= k;
		}
	}
	assert(head->pkt_len == hdr + seg->payload_len);
	ds->zc_frames++;
	ds->zc_bytes += zc_bytes;
	ds->tx[ds->tx_n++] = head;
	if (ds->tx_n == SLUICE_DPDK_BURST)
		tx_flush(ds);
}

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
	if (seg->payload_len > d->tcb.smss) {
		assert(!seg->payload && ds->tso);
		emit_tso(ds, d, seg);
		return;
	}
	if (seg->payload_len > 0) {
		assert(!seg->payload); /* the stream is ours (tcp.h's external send buffer) */
		emit_stream(ds, d, seg);
		return;
	}
	struct rte_mbuf *m;
	size_t cap;
	uint8_t *p = tx_frame(ds, &m, &cap);
	if (!p)
		return; /* as a lost segment: the state machine resends */
	size_t len = sluice_wire_tcp_frame_build_offload(p, cap, &d->peer_mac, &ds->mac, ds->ip_id++, seg, ds->tx_csum);
	tx_offload_flags(ds, m, len ? sluice_wire_tcp_options_len(seg) + SLUICE_TCP_HDR_LEN : 0);
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

/* Put the pending ranges onto the send stream as far as it takes them:
 * cached log bytes (a range with a pin) by reference when zero copy is on
 * and the piece is long enough, the rest copied into the ring. Once
 * anything was taken the send is reported at the end of the poll. */
static void pend_fill(struct dconn *d)
{
	while (d->pend_i < d->pend_n) {
		const struct sluice_send_range *r = &d->pend[d->pend_i];
		size_t left = r->len - d->pend_off;
		uint32_t want = left > UINT32_MAX ? UINT32_MAX : (uint32_t)left;
		uint32_t got = 0;
		if (r->pin && d->ds->zc)
			got = take_ref(d, r->base + d->pend_off, want, r->pin);
		if (got == 0)
			got = take_copy(d, r->base + d->pend_off, want);
		if (got == 0)
			break; /* the stream is full: more when the peer acknowledges */
		d->pend_off += got;
		d->pend_taken += got;
		if (d->pend_off < r->len)
			break; /* the stream is full */
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
	sq_pop(d, bytes);
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
	cfg->snd_buf = NULL; /* the stream is ours: copies in d->snd_buf, and references */
	cfg->snd_buf_bytes = SLUICE_DPDK_SND_BUF_BYTES;
	cfg->ooo_buf = d->ooo_buf;
	cfg->ooo_buf_bytes = SLUICE_DPDK_OOO_BUF_BYTES;
	cfg->rcv_space = SLUICE_DPDK_RCV_SPACE;
	cfg->mss = (uint16_t)(ds->nc->b->cfg.dpdk_mtu - 40);
	/* A TSO frame: its headers' mbuf and payload chunks, within the
	 * port's chain limit and one IPv4 packet. */
	uint32_t tso = (uint32_t)(SLUICE_DPDK_TSO_SEGS_MAX - 1) * SLUICE_DPDK_TSO_CHUNK;
	cfg->tso_max = ds->tso ? (tso < SLUICE_TCP_TSO_MAX ? tso : SLUICE_TCP_TSO_MAX) : 0;
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
	bool zc[RTE_MAX_ETHPORTS];                                 /* frames may carry cached bytes by reference */
	bool tso[RTE_MAX_ETHPORTS];                                /* TCP segmentation offload enabled */
	uint16_t tso_mss_less[RTE_MAX_ETHPORTS];
	uint16_t tx_segs[RTE_MAX_ETHPORTS];                        /* mbufs a frame may chain on each port */
	struct rte_mempool *ext_pool[SLUICE_CORES_MAX];
	struct zpool *zp[SLUICE_CORES_MAX];
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
	/* Frames as mbuf chains: zero-copy sends attach cached log bytes.
	 * Only on ports whose driver copies the bytes with the CPU (virtual
	 * devices: net_tap, net_memif, ...); a NIC on a bus reads them by DMA,
	 * for which the extents are not registered (rte_extmem_register): it
	 * gets copies. */
	const char *bus = rc == 0 && info.device ? rte_bus_name(rte_dev_bus(info.device)) : NULL;
	bool vdev = bus && strcmp(bus, "vdev") == 0;
	g.tx_segs[p] = 1;
	if (rc == 0 && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS)) {
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
		uint16_t lim = info.tx_desc_lim.nb_mtu_seg_max ? info.tx_desc_lim.nb_mtu_seg_max : 1;
		g.tx_segs[p] = lim < SLUICE_DPDK_TX_SEGS_MAX ? lim : SLUICE_DPDK_TX_SEGS_MAX;
	}
	g.zc[p] = cfg->dpdk_zero_copy && vdev && g.tx_segs[p] >= 3;
	/* Segmentation offload, with the checksum offloads it implies, on a
	 * port that chains mbufs. net_tap's (software GSO in the driver)
	 * counts the Ethernet header against the MTU: its segments are cut
	 * that much under the MSS. */
	const uint64_t tso_want = RTE_ETH_TX_OFFLOAD_TCP_TSO | RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
	if (rc == 0 && cfg->dpdk_tso && g.tx_csum[p] && (info.tx_offload_capa & tso_want) == tso_want &&
	    info.tx_desc_lim.nb_seg_max >= SLUICE_DPDK_TSO_SEGS_MAX) {
		conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_TCP_TSO;
		g.tso[p] = true;
		g.tso_mss_less[p] = strcmp(info.driver_name, "net_tap") == 0 ? SLUICE_ETH_HDR_LEN : 0;
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
	SLOG_INFO("net", "sluice.dpdk.port %u (%s): %d queue pair(s); checksums: sent %s, received %s; idle cores %s; "
		  "segments cut %s; cached log bytes sent %s", p, info.driver_name, q,
		  g.tx_csum[p] ? "by the NIC" : "in software",
		  g.rx_csum[p] ? "checked by the NIC (software when it did not)" : "in software",
		  g.rx_intr[p] ? "sleep until a frame arrives (Rx interrupts)" : "nap 1 ms at a time",
		  g.tso[p] ? "by the NIC (TSO)" : "by the stack",
		  g.zc[p]                    ? "by reference (zero copy)"
		  : !cfg->dpdk_zero_copy     ? "as copies (sluice.dpdk.zero.copy=false)"
		  : !vdev                    ? "as copies (a device on a bus: extents not registered for DMA)"
					     : "as copies (the port does not chain mbufs)");
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
		snprintf(name, sizeof name, "sluice_ext%d", k);
		g.ext_pool[k] = rte_pktmbuf_pool_create(name, SLUICE_DPDK_EXT_MBUFS, SLUICE_DPDK_MBUF_CACHE, 0, 0, socket);
		g.zp[k] = g.ext_pool[k] ? zpool_new() : NULL;
		if (!g.zp[k]) {
			SLOG_ERR("net", "DPDK: cannot create network core %d's zero-copy mbuf pool: %s (memory: -m in "
				 "sluice.dpdk.eal.args)", k, g.ext_pool[k] ? "out of memory" : rte_strerror(rte_errno));
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
	ds->ext_pool = g.ext_pool[nc->id];
	ds->zp = g.zp[nc->id];
	ds->zc = g.zc[ds->port];
	ds->tx_segs = g.tx_segs[ds->port];
	ds->tso = g.tso[ds->port];
	ds->tso_mss_less = g.tso_mss_less[ds->port];
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
		/* The core's thread is gone: pins are no longer its to drop
		 * (nothing reads the extents after this; the process ends). */
		ds->zp->stopped = true;
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
		SLOG_INFO("net", "network core %d: DPDK: %" PRIu64 " bytes of cached log data sent by reference (zero copy) "
			  "in %" PRIu64 " frames; %" PRIu64 " bytes in %" PRIu64 " frames the port cut into segments (TSO)",
			  nc->id, ds->zc_bytes, ds->zc_frames, ds->tso_bytes, ds->tso_frames);
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
	for (int k = 0; k < g.cores; k++) { /* the NICs' rings are empty now: nothing points at a reference */
		free(g.zp[k]);
		g.zp[k] = NULL;
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
