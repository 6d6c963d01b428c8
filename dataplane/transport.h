/* The seam between a network core (dataplane/netcore.c: framing, budgets,
 * response order, parked fetches, the sweep) and the backend that moves its
 * bytes: kernel TCP through io_uring (transport_uring.c) today, a DPDK
 * user-space stack later, an in-memory double in the tests
 * (tests/unit/transport_test.c). A backend is an ops struct chosen at start
 * by name (sluice.transport), in the manner of nginx's event actions; it
 * implements exactly these ops and calls back exactly these upcalls, and
 * knows nothing of Kafka.
 *
 * Rules both sides keep:
 *   - Ops never call upcalls. Upcalls happen only inside poll (so an op may
 *     be called from inside an upcall without the core being re-entered).
 *   - A connection's backend state is c->tconn, set by the backend before
 *     it calls accepted. Every upcall about a connection comes before its
 *     closed upcall, which is the last: after it the backend holds nothing
 *     of the connection, and the core calls no op on it (c->tconn is NULL).
 *   - Receive: the backend receives into buffers it owns and hands them to
 *     the core with received(); the core consumes or copies the bytes
 *     before it returns, so the buffer can be reused at once. recv_pause
 *     stops further reads from the peer (bytes already read may still be
 *     delivered; the core keeps them) until recv_pause(c, false).
 *   - Send: at most one send in flight per connection (the core waits for
 *     its sent upcall before the next). The backend may send fewer bytes
 *     than asked (sent reports how many; the core sends the rest), and
 *     must not touch the ranges' memory after reporting sent.
 *   - Close: close() starts tearing the connection down; a send in flight
 *     is reported by sent (with an error, or the bytes that left), then
 *     closed comes. A peer that closes or resets is reported the same way,
 *     by closed, without close() having been called.
 *   - Accept: the backend accepts on its own (the listening socket and its
 *     rules are the backend's: see transport_uring.c) and offers each new
 *     connection with accepted; NULL means refused (a limit, shutdown): the
 *     backend then closes it and frees its state without a closed upcall. */
#ifndef SLUICE_TRANSPORT_H
#define SLUICE_TRANSPORT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct broker;
struct netcore;
struct conn;

/* A reference that keeps memory a send range points into alive, e.g. a
 * pinned extent of the log cache that a Fetch response sends without
 * copying. Whoever builds the range takes the reference; the network core
 * owns it from then on and drops it exactly once (sluice_pin_put): when the
 * backend's sent upcalls have covered every byte of the range, or when the
 * connection drops the response unsent (closed, failed send). A backend
 * that reads a range after the sent upcall covering it (a user-space TCP
 * stack resending until the peer acknowledges, a NIC reading it by DMA: the
 * dpdk backend's zero-copy sends) takes references of its own with
 * sluice_pin_hold and drops each with sluice_pin_put; otherwise it never
 * reads the range after that upcall. release runs once, when the last
 * reference is dropped, on the network core that holds them (the only
 * thread that touches a pin's count). */
struct sluice_pin {
	void (*release)(struct sluice_pin *pin);
	uint32_t holds; /* references besides the first (the core's): 0 when built */
};

static inline void sluice_pin_hold(struct sluice_pin *pin) { pin->holds++; }

static inline void sluice_pin_put(struct sluice_pin *pin)
{
	if (pin->holds > 0)
		pin->holds--;
	else
		pin->release(pin);
}

/* One contiguous range of bytes to send, in order with its neighbours. */
struct sluice_send_range {
	const uint8_t *base;
	size_t len;
	struct sluice_pin *pin; /* NULL: memory the core owns until sent */
};

/* The most ranges one send may carry (a response header and its extents;
 * the rest goes in the next send). */
#define SLUICE_SEND_RANGES_MAX 64

struct sluice_transport_ops {
	const char *name; /* as sluice.transport names it */
	/* Optional (NULL: num.network.threads decides). Once, on the main
	 * thread, before any init: set up what the cores share (a device, its
	 * queues) and say how many network cores the backend runs (> 0), or
	 * -1 after saying why it cannot start. */
	int (*prepare)(struct broker *b);
	/* Per network core, on the main thread before the core's thread
	 * starts: set nc->tstate, and the listener up (core 0) or shared. */
	int (*init)(struct netcore *nc);
	/* After every network core's thread has stopped. */
	void (*fini)(struct netcore *nc);
	/* Stop (true) or restart (false) reading from the peer. */
	void (*recv_pause)(struct conn *c, bool paused);
	/* Send ranges[0..n) (n <= SLUICE_SEND_RANGES_MAX) in order. 0, or a
	 * negative errno when the send cannot even start (the core closes the
	 * connection; no sent upcall follows). */
	int (*send)(struct conn *c, const struct sluice_send_range *ranges, int n);
	/* Tear the connection down; abort: with a reset rather than a FIN (a
	 * peer that stopped reading would otherwise keep the kernel's send
	 * buffer behind a FIN it never takes). */
	void (*close)(struct conn *c, bool abort);
	/* Run completions, waiting at most wait_ms (0: do not wait) for the
	 * first; the network core's sleep in the core runtime (runtime.h): in
	 * the kernel for io_uring, which must also wake when nc->rt.efd is
	 * written (sluice_rt_wake: a storage core's reply, a post, a stop);
	 * busy polling for DPDK, returning early once nc->rt.sleeping is
	 * cleared. */
	void (*poll)(struct netcore *nc, int64_t wait_ms);
};

extern const struct sluice_transport_ops sluice_transport_uring;
/* Built only with DPDK (meson -Ddpdk, SLUICE_HAVE_DPDK): transport_dpdk.c. */
extern const struct sluice_transport_ops sluice_transport_dpdk;

/* Upcalls, backend -> network core (dataplane/netcore.c). */
/* A connection arrived from host:port (host as text, for logs and Kafka's
 * client host); t is the backend's state for it. Returns the core's
 * connection (with c->tconn = t), or NULL to refuse it. */
struct conn *sluice_netcore_accepted(struct netcore *nc, void *t, const char *host, int port);
/* n > 0 bytes arrived; consumed or copied before this returns. */
void sluice_netcore_received(struct conn *c, const uint8_t *bytes, size_t n);
/* The send in flight finished: res bytes left (> 0), or -errno / 0. */
void sluice_netcore_sent(struct conn *c, ssize_t res);
/* The connection is gone on the backend's side (error: 0 for an orderly
 * close or one the core asked for, else -errno); the last upcall. */
void sluice_netcore_closed(struct conn *c, int error);

/* The per-connection stage between the transport and framing: where TLS
 * will decrypt what arrives and encrypt what leaves, and where the SASL
 * gate refuses every request but ApiVersions and SASL ones before the
 * client has authenticated. Plaintext (sluice_stage_plaintext) passes bytes
 * straight through without copying and allows every API. A stage keeps its
 * per-connection state in c->stage_state. */
struct sluice_conn_stage {
	const char *name;
	/* Wire bytes in, plaintext out: *plain may point into wire (no copy)
	 * or into the stage's own buffer, valid until the next call. Returns
	 * false when the connection must close (a bad record). */
	bool (*inbound)(struct conn *c, const uint8_t *wire, size_t n, const uint8_t **plain, size_t *plain_n);
	/* Plaintext ranges in, wire ranges out (at most out_max): the number
	 * of wire ranges, or -1 to close. Plaintext copies the descriptors. */
	int (*outbound)(struct conn *c, const struct sluice_send_range *plain, int n, struct sluice_send_range *out,
			int out_max);
	/* Whether a request of api_key may be served now. */
	bool (*allowed)(const struct conn *c, int16_t api_key);
};

extern const struct sluice_conn_stage sluice_stage_plaintext;

#endif
