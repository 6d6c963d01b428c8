/* The TCP connection state machine of Sluice's own TCP/IP stack (issue 14):
 * one transmission control block (TCB) per connection, RFC 9293 segment
 * arrival and state transitions, RFC 7323 timestamps (RTT, PAWS) and window
 * scaling, RFC 6298 retransmission timer, RFC 5681 congestion control with
 * loss recovery driven by the peer's SACK blocks (RFC 6675, bounded) or,
 * without them, NewReno (RFC 6582), zero-window persist, delayed ACKs,
 * keepalive (RFC 9293 3.8.4, RFC 1122 4.2.3.6), and bounded
 * out-of-order reassembly with SACK blocks advertised (RFC 2018). It is a
 * pure module so it is unit tested without a NIC: it reads no clock (every
 * call that may emit or arm a timer takes now_ms), owns no packets (segments
 * come in and go out as struct sluice_tcp_seg, seg.h) and allocates nothing
 * (the send ring and the reassembly area are the caller's, sized at the
 * connection's creation). Demultiplexing, the listen queue, ISS generation
 * (RFC 6528 hashing) and the packet codecs are the caller's.
 *
 * Ownership: segments passed to sluice_tcp_input are borrowed for the call;
 * a segment passed to ops.emit (and its payload, which points into the send
 * ring) is valid only during that call; bytes passed to ops.deliver likewise.
 * ops.closed is called exactly once per connection, as the very last thing
 * the module does with the TCB: the caller may free it inside the callback. */
#ifndef SLUICE_STACK_TCP_H
#define SLUICE_STACK_TCP_H
#include <stdbool.h>
#include <stdint.h>
#include "dataplane/stack/seg.h"

/* Limits and defaults. */
#define SLUICE_TCP_SND_BUF_MAX (4u << 20)   /* largest send ring per connection */
#define SLUICE_TCP_TSO_MAX 65000u           /* config.tso_max at most: one IPv4 packet's payload, headers aside */
#define SLUICE_TCP_OOO_BUF_MAX (4u << 20)   /* largest reassembly area per connection */
#define SLUICE_TCP_OOO_RANGES_MAX 4         /* out-of-order islands kept at once */
#define SLUICE_TCP_SCOREBOARD_MAX 8         /* the peer's SACKed ranges kept (RFC 6675 scoreboard) */
#define SLUICE_TCP_MSS_DEFAULT 1460         /* what we announce: 1500-byte MTU */
#define SLUICE_TCP_MSS_PEER_DEFAULT 536     /* RFC 9293 3.7.1: when a SYN has no MSS option */
#define SLUICE_TCP_MSS_MIN 88               /* smaller announced MSS values are raised to this */
#define SLUICE_TCP_WSCALE_MAX 14            /* RFC 7323 2.3 */
#define SLUICE_TCP_WSCALE_DEFAULT 7         /* our receive shift: windows up to 8 MiB */
#define SLUICE_TCP_IW_SEGS 10               /* RFC 6928 initial window */
#define SLUICE_TCP_IW_BYTES_CAP 14600       /* RFC 6928: min(10*MSS, max(2*MSS, 14600)) */
#define SLUICE_TCP_RTO_INITIAL_MS 1000      /* RFC 6298 2.1 */
#define SLUICE_TCP_RTO_MIN_MS_DEFAULT 200   /* RFC 6298 says 1 s; data centres use 200 ms */
#define SLUICE_TCP_RTO_MAX_MS 60000         /* RFC 6298 2.5 */
#define SLUICE_TCP_RETRIES_MAX_DEFAULT 12   /* retransmissions of one segment before aborting */
#define SLUICE_TCP_RETRIES_LIMIT 30         /* the most a configuration may ask for */
#define SLUICE_TCP_DELACK_MS_DEFAULT 40     /* delayed ACK (RFC 9293 3.8.6.3: under 500 ms) */
#define SLUICE_TCP_MSL_MS_DEFAULT 30000     /* TIME-WAIT lasts 2 * MSL */
#define SLUICE_TCP_FIN_WAIT_2_MS_DEFAULT 60000 /* FIN-WAIT-2 without the peer's FIN: abort */
/* Keepalive: Linux's defaults (tcp_keepalive_time, _intvl, _probes), which
 * Apache Kafka's broker gets by turning SO_KEEPALIVE on for every socket. */
#define SLUICE_TCP_KEEPALIVE_IDLE_MS_DEFAULT 7200000u  /* heard nothing for 2 h: first probe */
#define SLUICE_TCP_KEEPALIVE_INTERVAL_MS_DEFAULT 75000u /* between unanswered probes */
#define SLUICE_TCP_KEEPALIVE_PROBES_DEFAULT 9          /* unanswered probes before the end */
#define SLUICE_TCP_KEEPALIVE_MS_LIMIT 32767000u        /* idle or interval at most (Linux: 32767 s) */
#define SLUICE_TCP_KEEPALIVE_PROBES_LIMIT 127          /* the most a configuration may ask for (Linux too) */
#define SLUICE_TCP_TIMER_NONE UINT64_MAX    /* sluice_tcp_next_timer: nothing armed */

_Static_assert((SLUICE_TCP_SND_BUF_MAX & (SLUICE_TCP_SND_BUF_MAX - 1)) == 0, "rings are powers of two");
_Static_assert((SLUICE_TCP_OOO_BUF_MAX & (SLUICE_TCP_OOO_BUF_MAX - 1)) == 0, "rings are powers of two");
_Static_assert(SLUICE_TCP_OOO_RANGES_MAX <= SLUICE_TCP_SACK_BLOCKS_MAX,
	       "every island fits a SACK option (the first one sent is the newest)");
_Static_assert(SLUICE_TCP_SCOREBOARD_MAX >= SLUICE_TCP_SACK_BLOCKS_MAX, "one segment's SACK blocks fit the scoreboard");
_Static_assert(((uint64_t)65535 << SLUICE_TCP_WSCALE_MAX) < (1ull << 31),
	       "a scaled window stays below half the sequence space (RFC 7323 2.3)");
_Static_assert(SLUICE_TCP_RTO_MIN_MS_DEFAULT <= SLUICE_TCP_RTO_INITIAL_MS &&
	       SLUICE_TCP_RTO_INITIAL_MS <= SLUICE_TCP_RTO_MAX_MS, "RTO bounds ordered");
_Static_assert(SLUICE_TCP_RETRIES_MAX_DEFAULT <= SLUICE_TCP_RETRIES_LIMIT, "default within the limit");
_Static_assert(SLUICE_TCP_KEEPALIVE_IDLE_MS_DEFAULT <= SLUICE_TCP_KEEPALIVE_MS_LIMIT &&
	       SLUICE_TCP_KEEPALIVE_INTERVAL_MS_DEFAULT <= SLUICE_TCP_KEEPALIVE_MS_LIMIT &&
	       SLUICE_TCP_KEEPALIVE_PROBES_DEFAULT <= SLUICE_TCP_KEEPALIVE_PROBES_LIMIT, "defaults within the limits");
_Static_assert(SLUICE_TCP_MSS_MIN <= SLUICE_TCP_MSS_PEER_DEFAULT && SLUICE_TCP_MSS_PEER_DEFAULT <= SLUICE_TCP_MSS_DEFAULT,
	       "MSS bounds ordered");

/* Wrapped 32-bit sequence arithmetic (RFC 9293 3.4): a before b when the
 * signed distance from a to b is positive. */
static inline bool sluice_tcp_seq_lt(uint32_t a, uint32_t b) { return (int32_t)(a - b) < 0; }
static inline bool sluice_tcp_seq_leq(uint32_t a, uint32_t b) { return (int32_t)(a - b) <= 0; }
static inline bool sluice_tcp_seq_gt(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }
static inline bool sluice_tcp_seq_geq(uint32_t a, uint32_t b) { return (int32_t)(a - b) >= 0; }

enum sluice_tcp_state {
	SLUICE_TCP_CLOSED = 0,
	SLUICE_TCP_SYN_SENT,
	SLUICE_TCP_SYN_RECEIVED,
	SLUICE_TCP_ESTABLISHED,
	SLUICE_TCP_FIN_WAIT_1,
	SLUICE_TCP_FIN_WAIT_2,
	SLUICE_TCP_CLOSE_WAIT,
	SLUICE_TCP_CLOSING,
	SLUICE_TCP_LAST_ACK,
	SLUICE_TCP_TIME_WAIT,
};

/* Why a connection ended (ops.closed). */
enum sluice_tcp_close_reason {
	SLUICE_TCP_END_ORDERLY = 0, /* both FINs exchanged and acknowledged (TIME-WAIT over, or LAST-ACK acked) */
	SLUICE_TCP_END_RESET,       /* the peer sent an acceptable RST */
	SLUICE_TCP_END_REFUSED,     /* RST in answer to our SYN (active open) */
	SLUICE_TCP_END_ABORTED,     /* sluice_tcp_abort, or close before the SYN was answered */
	SLUICE_TCP_END_TIMEOUT,     /* retransmissions exhausted */
	SLUICE_TCP_END_FIN_WAIT_2,  /* the peer never sent its FIN after ours was acknowledged */
	SLUICE_TCP_END_KEEPALIVE,   /* an idle connection's keepalive probes all went unanswered */
};
#define SLUICE_TCP_END_REASONS (SLUICE_TCP_END_KEEPALIVE + 1) /* how many: the last one above + 1 */

struct sluice_tcp_counters {
	uint64_t segs_in, segs_out;
	uint64_t bytes_in, bytes_out; /* payload delivered in order / first transmissions */
	uint64_t retransmits;         /* segments resent by the retransmission timer */
	uint64_t fast_retransmits;    /* by three duplicate ACKs or a NewReno partial ACK */
	uint64_t sack_retransmits;    /* holes resent in a SACK recovery after its first (scoreboard, partial ACK) */
	uint64_t dup_acks;            /* RFC 5681 duplicate ACKs received */
	uint64_t ooo_queued;          /* out-of-order segments kept for reassembly */
	uint64_t ooo_drops;           /* out-of-order segments dropped (no room, no area) */
	uint64_t unacceptable;        /* segments failing the acceptability test or PAWS */
	uint64_t challenge_acks;      /* RFC 5961 challenge ACKs sent */
	uint64_t persist_probes;      /* zero-window probes sent */
	uint64_t keepalive_probes;    /* keepalive probes sent */
};

/* Callbacks. emit, deliver and closed are required; the others may be NULL.
 * Inside a callback other than emit and closed the caller may call
 * sluice_tcp_send, sluice_tcp_send_space and sluice_tcp_set_rcv_space on
 * the same TCB; inside deliver also sluice_tcp_output, sluice_tcp_close and
 * sluice_tcp_abort, inside established and peer_fin sluice_tcp_close and
 * sluice_tcp_abort (the DPDK transport answers, closes and refuses so;
 * tests/fuzz/fuzz_stack_tcp does each); never input or on_timer (the
 * module is mid-update). Deliveries never nest: sluice_tcp_output called
 * from inside deliver sends, but delivers nothing (a held island waits for
 * the delivery to return). Besides input and on_timer, sluice_tcp_output
 * (and sluice_tcp_close, which ends with it) delivers too, when the caller
 * gave room back while an island was held (sluice_tcp_set_rcv_space): so
 * its deliver and peer_fin callbacks may run, and end the connection,
 * inside those calls. */
struct sluice_tcp_ops {
	/* Send this segment. seg->payload points into the send ring: valid
	 * only during the call. With an external send buffer (config.snd_buf
	 * NULL) seg->payload is NULL and the caller supplies the payload_len
	 * bytes itself: those at offset seg->seq - tcb->snd_buf_seq of what it
	 * queued with sluice_tcp_send_external (a SYN or a FIN carries none). */
	void (*emit)(void *arg, const struct sluice_tcp_seg *seg);
	/* In-order bytes for the application, at most the receive space last
	 * given (sluice_tcp_set_rcv_space) minus what was delivered since:
	 * the caller takes all n. */
	void (*deliver)(void *arg, const uint8_t *bytes, uint32_t n);
	void (*established)(void *arg);            /* the handshake completed */
	void (*peer_fin)(void *arg);               /* the peer will send no more (end of stream) */
	void (*acked)(void *arg, uint32_t bytes);  /* send ring space freed */
	/* The connection is over; called once, last; the TCB may be freed inside,
	 * except when the close came from inside another of its callbacks (an
	 * abort in deliver, say): then it must stay readable until that
	 * callback returns, which sees it CLOSED and stops. */
	void (*closed)(void *arg, enum sluice_tcp_close_reason reason);
};

struct sluice_tcp_config {
	struct sluice_tcp_ops ops;
	void *arg;                  /* passed to every callback */
	/* The caller-owned send ring, snd_buf_bytes long; or NULL: the caller
	 * keeps the bytes queued (sluice_tcp_send_external) and snd_buf_bytes
	 * bounds how many may be queued and unacknowledged at once. */
	uint8_t *snd_buf;
	uint32_t snd_buf_bytes;     /* power of two, 1 .. SLUICE_TCP_SND_BUF_MAX */
	uint8_t *ooo_buf;           /* caller-owned reassembly area; NULL: out-of-order segments dropped */
	uint32_t ooo_buf_bytes;     /* power of two, <= SLUICE_TCP_OOO_BUF_MAX, or 0 */
	uint32_t rcv_space;         /* receive bytes the caller can take at first */
	uint16_t mss;               /* announced: the largest payload we accept (MTU - 40) */
	/* Segmentation offload: new data may go in segments of up to tso_max
	 * payload bytes (whole MSS-sized segments: the NIC cuts them at the
	 * MSS, repeating the headers and options); 0, or not above the MSS:
	 * off. Retransmissions and probes of a closed window stay one MSS. The
	 * counters count each such segment once. */
	uint32_t tso_max;
	uint8_t rcv_wscale;         /* our receive window shift when the peer scales */
	bool nagle;                 /* RFC 896; off by default (Kafka responses want latency) */
	uint32_t rto_min_ms, rto_initial_ms, rto_max_ms; /* rto_max_ms <= SLUICE_TCP_RTO_MAX_MS */
	uint32_t retries_max;       /* <= SLUICE_TCP_RETRIES_LIMIT */
	uint32_t delack_ms;
	uint32_t msl_ms;            /* TIME-WAIT is 2 * msl_ms */
	uint32_t fin_wait_2_ms;
	/* Keepalive (RFC 1122 4.2.3.6), in ESTABLISHED and CLOSE-WAIT while
	 * nothing is unacknowledged, unsent or being probed: after
	 * keepalive_idle_ms without an acceptable segment from the peer, a
	 * probe every keepalive_interval_ms; keepalive_probes unanswered ones
	 * end the connection (SLUICE_TCP_END_KEEPALIVE). When keepalive is on,
	 * idle and interval are 1 .. SLUICE_TCP_KEEPALIVE_MS_LIMIT and probes
	 * 1 .. SLUICE_TCP_KEEPALIVE_PROBES_LIMIT. */
	bool keepalive;
	uint32_t keepalive_idle_ms, keepalive_interval_ms, keepalive_probes;
	uint32_t ts_offset;         /* added to now_ms in our TSval (RFC 7323 7.1: per-connection) */
};

/* One connection. Fields are read-only for the caller (tests inspect them). */
struct sluice_tcp_tcb {
	struct sluice_tcp_config cfg;
	uint32_t laddr, raddr;
	uint16_t lport, rport;
	enum sluice_tcp_state state;
	/* Send sequence space (RFC 9293 3.3.1); snd_max: highest sent + 1 (snd_nxt
	 * goes back to snd_una after a retransmission timeout). */
	uint32_t iss, snd_una, snd_nxt, snd_max, snd_wnd, snd_wl1, snd_wl2, max_snd_wnd;
	/* Receive sequence space; rcv_adv: right edge last advertised. */
	uint32_t irs, rcv_nxt, rcv_adv, rcv_space, last_ack_sent;
	uint8_t snd_wscale, rcv_wscale;
	uint16_t smss;     /* payload per segment we send (peer MSS, ours, less options) */
	uint16_t rcv_mss;  /* payload per full segment we expect (delayed-ACK counting) */
	bool ts_ok, sack_ok, wscale_ok, ts_recent_valid;
	uint32_t ts_recent;
	uint64_t ts_recent_ms; /* when ts_recent was taken (PAWS: 24 days idle) */
	/* Send ring: bytes from sequence snd_buf_seq on, snd_len of them. */
	uint32_t snd_head, snd_len, snd_buf_seq;
	bool fin_queued, fin_acked;
	/* Out-of-order islands, sorted by sequence; ooo_newest: the one the last
	 * segment touched (first SACK block). The first may start at rcv_nxt:
	 * reached while the caller had no room, held until it has. */
	struct sluice_tcp_sack_block ooo[SLUICE_TCP_OOO_RANGES_MAX];
	uint8_t ooo_n, ooo_newest;
	bool ooo_fin;
	uint32_t ooo_fin_seq;
	/* Congestion control (RFC 5681, RFC 6582). */
	uint32_t cwnd, ssthresh, recover, dupacks;
	bool in_recovery, partial_ack_seen;
	/* The peer's SACK blocks (RFC 6675 scoreboard): disjoint ranges above
	 * snd_una (never starting at it) and within snd_max, sorted, not
	 * touching; emptied by a retransmission timeout. sack_recovery: this
	 * fast recovery resends by them (it began with some); rtx_high: the end
	 * of the highest byte resent in it (RFC 6675 HighRxt), in [snd_una,
	 * snd_max]. */
	struct sluice_tcp_sack_block sacked[SLUICE_TCP_SCOREBOARD_MAX];
	uint8_t sacked_n;
	bool sack_recovery;
	uint32_t rtx_high;
	/* RTT (RFC 6298), microseconds; rtt_seq timed when no timestamps (Karn). */
	uint32_t srtt_us, rttvar_us, rto_ms;
	bool rtt_measured, rtt_timing;
	uint32_t rtt_seq;
	uint64_t rtt_start_ms;
	uint32_t retries, persist_backoff;
	/* Timers, absolute ms, SLUICE_TCP_TIMER_NONE when off. state_at: TIME-WAIT or FIN-WAIT-2. */
	uint64_t rtx_at, persist_at, delack_at, state_at, keepalive_at;
	/* Keepalive: when the peer's last acceptable segment came, when our
	 * last probe went, and how many went unanswered since. */
	uint64_t heard_ms, keepalive_sent_ms;
	uint32_t keepalive_sent;
	uint32_t unacked_bytes; /* received since our last ACK */
	bool ack_now;
	bool delivering; /* inside ops.deliver: sluice_tcp_output leaves held islands alone */
	struct sluice_tcp_counters counters;
};

/* Defaults: no buffers, no callbacks; the caller sets those. */
void sluice_tcp_config_default(struct sluice_tcp_config *cfg);

/* Passive open: a listener got `syn` (SYN without ACK or RST) for no
 * existing connection. Initialises tcb in SYN-RECEIVED with the caller's
 * ISS and emits the SYN-ACK, echoing the options the peer offered.
 * Returns 0, or -1 (nothing initialised, nothing emitted) if syn is not a
 * lone SYN. */
int sluice_tcp_accept(struct sluice_tcp_tcb *tcb, const struct sluice_tcp_config *cfg,
		      const struct sluice_tcp_seg *syn, uint32_t iss, uint64_t now_ms);
/* Active open: initialises tcb in SYN-SENT and emits a SYN offering MSS,
 * window scale, SACK and timestamps. */
void sluice_tcp_connect(struct sluice_tcp_tcb *tcb, const struct sluice_tcp_config *cfg,
			uint32_t laddr, uint16_t lport, uint32_t raddr, uint16_t rport,
			uint32_t iss, uint64_t now_ms);

/* A segment of this connection (the caller demultiplexed it by 4-tuple). */
void sluice_tcp_input(struct sluice_tcp_tcb *tcb, const struct sluice_tcp_seg *seg, uint64_t now_ms);
/* Copies up to n bytes into the send ring; returns how many it took (0
 * once the connection is closing). Nothing is sent before sluice_tcp_output. */
uint32_t sluice_tcp_send(struct sluice_tcp_tcb *tcb, const void *bytes, uint32_t n);
uint32_t sluice_tcp_send_space(const struct sluice_tcp_tcb *tcb);
/* With an external send buffer: n more bytes of the stream, which the
 * caller keeps until ops.acked gives them back (in order, from the front);
 * returns how many it may queue (0 when the buffer's bound is reached or
 * the connection can no longer send), as sluice_tcp_send. */
uint32_t sluice_tcp_send_external(struct sluice_tcp_tcb *tcb, uint32_t n);
/* Delivers what an island held while the caller had no room lets through
 * (see sluice_tcp_set_rcv_space), then sends what the windows allow, and
 * any ACK owed now. A callback may end the connection inside: the caller
 * checks the state after (CLOSED: the closed callback ran). */
void sluice_tcp_output(struct sluice_tcp_tcb *tcb, uint64_t now_ms);
/* The caller can take `bytes` more received bytes; a window update is sent
 * at the next sluice_tcp_output when the window opens enough. Bytes that
 * arrived out of order and were held at rcv_nxt while the caller had no
 * room (its space was 0: paused) are delivered by that sluice_tcp_output,
 * without waiting for the peer to send them again, followed by the peer's
 * FIN if it came behind them. Nothing is delivered inside this call: it
 * may be made from inside callbacks. */
void sluice_tcp_set_rcv_space(struct sluice_tcp_tcb *tcb, uint32_t bytes);
/* Orderly close: FIN after the queued data. Returns 0, or -1 if already closing. */
int sluice_tcp_close(struct sluice_tcp_tcb *tcb, uint64_t now_ms);
/* Abortive close: RST if synchronized, then ops.closed(ABORTED). */
void sluice_tcp_abort(struct sluice_tcp_tcb *tcb, uint64_t now_ms);

/* The earliest armed timer, absolute ms, or SLUICE_TCP_TIMER_NONE. */
uint64_t sluice_tcp_next_timer(const struct sluice_tcp_tcb *tcb);
/* Runs the timers due at now_ms (may end the connection). */
void sluice_tcp_on_timer(struct sluice_tcp_tcb *tcb, uint64_t now_ms);

/* For a segment that matches no connection (RFC 9293 3.10.7.1, CLOSED):
 * fills *rst with the reset to send and returns true, or false when none is
 * owed (the segment is itself a RST). */
bool sluice_tcp_reset_for(const struct sluice_tcp_seg *in, struct sluice_tcp_seg *rst);

/* The current retransmission timeout, ms (after backoff). */
uint32_t sluice_tcp_rto_ms(const struct sluice_tcp_tcb *tcb);
const char *sluice_tcp_state_name(enum sluice_tcp_state state);
const char *sluice_tcp_reason_name(enum sluice_tcp_close_reason reason);

#endif
