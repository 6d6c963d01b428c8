/* libFuzzer target for the TCP connection state machine of Sluice's own
 * TCP/IP stack (dataplane/stack/tcp.c): each input drives one passively
 * opened connection (sluice_tcp_accept of a SYN built from the input's
 * first bytes) through up to FUZZ_STEPS_MAX steps read from the front of
 * the input: segments from the peer (sequence and acknowledgement numbers
 * relative to the connection's rcv_nxt, snd_una, snd_nxt or snd_max with
 * small offsets, or raw; flags, window, timestamps, SACK blocks, payloads
 * of 0 to 4 KiB), clock advances that fire the due timers as the DPDK
 * transport does (sluice_tcp_next_timer, then sluice_tcp_on_timer), and the
 * caller's calls (send, output, pause and resume of the receive space,
 * close, abort). The callbacks re-enter the machine as the transport's do
 * (dataplane/transport_dpdk.c), each choice read from the back of the
 * input: a delivery may pause, resume, answer (send + output), close or
 * abort; established may refuse (abort), queue bytes or close; peer_fin
 * may close or abort; acked may queue more. The buffers are the transport's sizes (256 KiB
 * send ring, 64 KiB reassembly area), the MSS sometimes the smallest.
 * Input layout (configure, open_conn, step, peer_segment say which byte is
 * what; tcp_seeds.py writes seeds with it): configuration, the SYN, then
 * one opcode byte per step and its operands, 0xff ending the steps; the
 * callbacks' choices from the last byte backwards.
 *
 * The peer's byte at stream offset o is peer_byte(o) and ours our_byte(o),
 * so that every byte handed over is checked without a copy of the stream.
 * Checked in the callbacks and after every step, the input stopping at the
 * first failure (abort with a message):
 * - closed is called once, and nothing is emitted or delivered after it;
 *   no timer is left once CLOSED;
 * - deliveries come after established and before the peer's FIN, within
 *   the receive space the caller gave and the window last offered, and are
 *   exactly the peer's stream, in order, made of bytes the peer did send;
 *   peer_fin comes where the peer put a FIN;
 * - an emitted segment's sequence number lies within [iss, snd_max + 1] (a
 *   RST answering a bad ACK takes that ACK), its payload is at most one
 *   segment, lies in the send ring and equals the bytes queued at that
 *   sequence, its ACK number never goes back, its SACK blocks lie beyond it;
 *   its offset from snd_buf_seq plus what acked gave back is its stream
 *   offset (what an external send buffer finds its bytes by: tcp.h); with
 *   an external send buffer (inputs of odd length: the DPDK transport's
 *   mode) it carries no payload pointer and is cut at the MSS alone; with
 *   segmentation offload (inputs whose length has bit 1 set) at most
 *   tso_max's whole MSS parts;
 * - snd_una <= snd_nxt <= snd_max, nothing emitted lies past snd_max (the
 *   peer's ACK of it would be dropped) and nothing past the queued bytes
 *   and the FIN; the acked callback accounts for every acknowledged byte;
 * - the SACK scoreboard's ranges lie above snd_una and within snd_max,
 *   ordered and apart, whatever blocks the peer sent (valid, past snd_max,
 *   wrapped, raw); no byte it holds as SACKed is sent again; a SACK
 *   recovery's resent bytes end within [snd_una, snd_max];
 * - the receive space is what the caller gave minus what was delivered;
 *   the islands are ordered, disjoint, beyond rcv_nxt (the first may start
 *   there, held while the caller is full, and only then: once it gives room,
 *   the sluice_tcp_output that follows delivers it) and within the area;
 * - a closing state's timer runs exactly in TIME-WAIT and FIN-WAIT-2, and a
 *   connection with something unacknowledged or unsent has its
 *   retransmission or persist timer armed (else it would stall).
 * When the machine ends the connection from a call of ours (not from
 * inside a callback), the TCB and its buffers are poisoned for ASan as if
 * freed in the closed callback (tcp.h allows it), so that a later touch is
 * reported. SLUICE_FUZZ_TCP_TRACE=1 in the environment prints each step and
 * the TCB after it (to read a reproducer). */
#include "dataplane/stack/seg.h"
#include "dataplane/stack/tcp.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/asan_interface.h>
#define FUZZ_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define FUZZ_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#endif
#endif
#ifndef FUZZ_POISON
#define FUZZ_POISON(p, n) ((void)(p), (void)(n))
#define FUZZ_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

#define FUZZ_STEPS_MAX 256
#define FUZZ_SND_BUF_BYTES (256u << 10)  /* SLUICE_DPDK_SND_BUF_BYTES */
#define FUZZ_OOO_BUF_BYTES (64u << 10)   /* SLUICE_DPDK_OOO_BUF_BYTES */
#define FUZZ_RCV_SPACE (256u << 10)      /* SLUICE_DPDK_RCV_SPACE */
#define FUZZ_MSL_MS 5000                 /* SLUICE_DPDK_MSL_MS */
#define FUZZ_PAYLOAD_MAX 4096            /* a peer segment's payload at most */
#define FUZZ_STREAM_MAX (2u << 20)       /* peer stream offsets tracked (bytes the peer sent) */
#define FUZZ_QUEUED_MAX (2u << 20)       /* bytes we queue per input at most (each is generated) */
#define FUZZ_FINS_MAX FUZZ_STEPS_MAX     /* FIN positions the peer used */
#define FUZZ_OP_END 0xff                 /* a step that ends the steps */
#define FUZZ_TIMER_ROUNDS 8              /* on_timer calls per clock advance at most */
#define US 0x0a000001u
#define PEER 0x0a000002u
#define US_PORT 9092
#define PEER_PORT 40000

_Static_assert(FUZZ_STREAM_MAX > (uint64_t)FUZZ_STEPS_MAX * FUZZ_PAYLOAD_MAX, "every byte the peer sends is tracked");
_Static_assert(FUZZ_QUEUED_MAX > FUZZ_SND_BUF_BYTES, "the send ring wraps");

/* The input: steps from the front, callback choices from the back. */
struct reader {
	const uint8_t *p;
	size_t lo, hi;
};

/* One connection and what its callbacks saw. */
struct fuzz {
	struct sluice_tcp_tcb tcb;
	struct sluice_tcp_config cfg;
	struct reader in;
	uint64_t now;
	int step, depth;      /* depth: our callbacks running */
	bool closed, poisoned, close_in_cb, established, peer_fin, paused, owes_output;
	bool closing, aborting, in_input, in_timer;
	uint32_t in_ack;      /* the ACK number of the segment being input */
	bool in_rst;
	uint32_t space;       /* receive space given, minus what was delivered since */
	uint64_t delivered, queued, acked;
	bool external; /* the send buffer is the caller's (sluice_tcp_send_external) */
	bool tso;      /* config.tso_max: new data in segments of many MSS */
	uint64_t adv_max;     /* right edge of the windows offered, stream offset */
	uint64_t ack_last;    /* last ACK number emitted, stream offset */
	uint32_t sent_hi;     /* the end of what was emitted, as seq - iss */
	bool acked_any;
	uint32_t peer_hi;     /* peer's highest seq + len sent */
	uint32_t peer_wnd;    /* the peer's window field, sticky */
	uint32_t peer_ts;     /* the peer's timestamp clock's offset */
	uint32_t our_ts;      /* our last TSval */
	uint32_t fins[FUZZ_FINS_MAX], fins_n; /* stream offsets of the peer's FINs */
};

static struct fuzz F;
static uint8_t snd_buf[FUZZ_SND_BUF_BYTES];
static uint8_t ooo_buf[FUZZ_OOO_BUF_BYTES];
static uint8_t covered[FUZZ_STREAM_MAX / 8]; /* peer stream bytes sent, by offset */
static uint8_t scratch[FUZZ_SND_BUF_BYTES];
static int trace;

__attribute__((format(printf, 1, 2), noreturn)) static void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "fuzz_stack_tcp: step %d: ", F.step);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	abort();
}

#define CHECK(cond, ...)                                                                                           \
	do {                                                                                                       \
		if (!(cond))                                                                                       \
			fail(__VA_ARGS__);                                                                         \
	} while (0)

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...)
{
	if (!trace)
		return;
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "[%d t=%llu %s] ", F.step, (unsigned long long)F.now,
		F.closed ? "CLOSED" : sluice_tcp_state_name(F.tcb.state));
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
}

static uint8_t u8(void) { return F.in.lo < F.in.hi ? F.in.p[F.in.lo++] : 0; }
static uint16_t u16(void) { return (uint16_t)(u8() | u8() << 8); }
static uint32_t u32(void) { return (uint32_t)u16() | (uint32_t)u16() << 16; }
static uint8_t back8(void) { return F.in.lo < F.in.hi ? F.in.p[--F.in.hi] : 0; }

static uint8_t peer_byte(uint32_t o) { return (uint8_t)((o * 0x9e3779b1u) >> 24 ^ o); }
static uint8_t our_byte(uint64_t o) { return (uint8_t)(((uint32_t)o * 0x85ebca6bu) >> 24 ^ (o >> 5)); }

/* Stream offsets: bytes after the SYNs. */
static uint32_t peer_off(uint32_t seq) { return seq - (F.tcb.irs + 1); }
static uint32_t our_off(uint32_t seq) { return seq - (F.tcb.iss + 1); }

/* ---- callbacks ---- */

static void do_send(uint32_t n, bool output);

static void cb_enter(const char *name)
{
	CHECK(!F.closed, "%s after closed", name);
	F.depth++;
}

static void check_emit(const struct sluice_tcp_seg *s)
{
	const struct sluice_tcp_tcb *t = &F.tcb;
	CHECK(s->saddr == US && s->daddr == PEER && s->sport == US_PORT && s->dport == PEER_PORT, "emitted: 4-tuple");
	bool rst = s->flags & SLUICE_TCP_RST;
	if (rst && F.in_input && s->seq == F.in_ack && !(s->flags & SLUICE_TCP_ACK))
		return; /* a reset for an unacceptable ACK takes that ACK as its sequence */
	CHECK(s->seq - t->iss <= t->snd_max + 1 - t->iss, "emitted seq %u outside [iss %u, snd_max %u + 1]", s->seq,
	      t->iss, t->snd_max);
	if (rst) {
		CHECK(F.aborting, "a RST emitted with no abort");
		CHECK(s->payload_len == 0, "a RST with a payload");
		return;
	}
	CHECK(s->flags & SLUICE_TCP_ACK, "a segment without ACK after the SYN was received");
	uint32_t end = s->seq - t->iss + s->payload_len + !!(s->flags & SLUICE_TCP_SYN) + !!(s->flags & SLUICE_TCP_FIN);
	F.sent_hi = end > F.sent_hi ? end : F.sent_hi;
	if (s->flags & SLUICE_TCP_SYN)
		CHECK(s->seq == t->iss && s->payload_len == 0 && !(s->flags & SLUICE_TCP_FIN), "a bad SYN-ACK");
	CHECK(s->has_ts == t->ts_ok, "timestamps where not negotiated, or missing");
	CHECK(s->sack_n == 0 || t->sack_ok, "SACK blocks where not negotiated");
	for (uint8_t i = 0; i < s->sack_n; i++) {
		uint32_t l = s->sack[i].left - t->rcv_nxt, r = s->sack[i].right - t->rcv_nxt;
		CHECK(l > 0 && l < r && r <= FUZZ_OOO_BUF_BYTES, "SACK block %u [%u, %u) vs rcv_nxt %u", i,
		      s->sack[i].left, s->sack[i].right, t->rcv_nxt);
	}
	/* The ACK never goes back, and what the window offered is remembered. */
	uint64_t ack = peer_off(s->ack);
	CHECK(s->ack == t->rcv_nxt && (!F.acked_any || ack >= F.ack_last), "ACK number went back");
	F.ack_last = ack, F.acked_any = true;
	uint64_t edge = ack + ((uint64_t)s->window << ((s->flags & SLUICE_TCP_SYN) ? 0 : t->rcv_wscale));
	F.adv_max = edge > F.adv_max ? edge : F.adv_max;
	if (s->has_ts)
		F.our_ts = s->ts_val;
	if (s->payload_len > 0) {
		uint32_t cap = F.tso && t->cfg.tso_max > t->smss ? t->cfg.tso_max / t->smss * t->smss : t->smss;
		CHECK(s->payload_len <= cap, "a payload of %u past the MSS %u (segmentation offload: %u)", s->payload_len,
		      t->smss, F.tso ? cap : 0);
		uint64_t o = our_off(s->seq);
		CHECK(F.acked + (s->seq - t->snd_buf_seq) == o, "emitted at offset %u from the send buffer's front, with "
		      "%llu given back by acked, but at stream offset %llu", s->seq - t->snd_buf_seq,
		      (unsigned long long)F.acked, (unsigned long long)o);
		CHECK(s->seq - t->snd_buf_seq + (uint64_t)s->payload_len <= t->snd_len,
		      "sent bytes outside the send ring (seq %u, ring from %u, %u long)", s->seq, t->snd_buf_seq, t->snd_len);
		CHECK(o + s->payload_len <= F.queued, "sent bytes never queued (offset %llu + %u, queued %llu)",
		      (unsigned long long)o, s->payload_len, (unsigned long long)F.queued);
		CHECK((s->payload == NULL) == F.external, "a payload pointer %s an external send buffer",
		      F.external ? "with" : "without");
		for (uint32_t i = 0; s->payload && i < s->payload_len; i++)
			CHECK(s->payload[i] == our_byte(o + i), "sent byte at offset %llu is not the one queued",
			      (unsigned long long)(o + i));
		for (uint32_t i = 0; i < t->sacked_n; i++)
			CHECK(!(sluice_tcp_seq_lt(s->seq, t->sacked[i].right) &&
				sluice_tcp_seq_gt(s->seq + s->payload_len, t->sacked[i].left)),
			      "sent [%u, %u), SACKed [%u, %u)", our_off(s->seq), our_off(s->seq + s->payload_len),
			      our_off(t->sacked[i].left), our_off(t->sacked[i].right));
	}
	if (s->flags & SLUICE_TCP_FIN) {
		CHECK(t->fin_queued, "a FIN before close");
		CHECK(our_off(s->seq) + s->payload_len == F.queued, "a FIN not after the last queued byte");
	}
}

static void on_emit(void *arg, const struct sluice_tcp_seg *s)
{
	(void)arg;
	cb_enter("emit");
	say("emit seq %u ack %u flags %#x win %u len %u sack %u", our_off(s->seq), peer_off(s->ack), s->flags,
	    s->window, s->payload_len, s->sack_n);
	check_emit(s);
	F.depth--;
}

/* The transport's delivery: hand the bytes on and give the space back
 * unless paused; or, chosen by the input, pause, resume, answer, close,
 * abort, or keep the bytes (the space shrinks). */
static void on_deliver(void *arg, const uint8_t *p, uint32_t n)
{
	(void)arg;
	cb_enter("deliver");
	say("deliver %u at %llu", n, (unsigned long long)F.delivered);
	CHECK(F.established, "a delivery before established");
	CHECK(!F.peer_fin, "a delivery after the peer's FIN");
	CHECK(n > 0 && n <= F.space, "a delivery of %u with %u of space", n, F.space);
	CHECK(F.delivered + n <= F.adv_max, "delivered past the window offered (%llu + %u > %llu)",
	      (unsigned long long)F.delivered, n, (unsigned long long)F.adv_max);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t o = F.delivered + i;
		CHECK(o < FUZZ_STREAM_MAX && (covered[o / 8] >> (o % 8) & 1), "delivered byte %llu the peer never sent",
		      (unsigned long long)o);
		CHECK(p[i] == peer_byte((uint32_t)o), "delivered byte %llu differs from the peer's", (unsigned long long)o);
	}
	F.delivered += n;
	F.space -= n;
	uint8_t b = back8();
	switch (b % 16) {
	case 9:
		say("deliver: pause");
		F.paused = true;
		F.space = 0;
		sluice_tcp_set_rcv_space(&F.tcb, 0);
		break;
	case 10:
		say("deliver: resume");
		F.paused = false;
		F.space = F.cfg.rcv_space;
		sluice_tcp_set_rcv_space(&F.tcb, F.space);
		sluice_tcp_output(&F.tcb, F.now);
		break;
	case 11:
	case 12:
		if (!F.paused)
			F.space = F.cfg.rcv_space, sluice_tcp_set_rcv_space(&F.tcb, F.space);
		do_send(b % 16 == 11 ? back8() : (uint32_t)back8() << 8 | back8(), true);
		break;
	case 13:
		say("deliver: close");
		F.closing = true;
		(void)sluice_tcp_close(&F.tcb, F.now);
		break;
	case 14:
		say("deliver: abort");
		F.aborting = true;
		sluice_tcp_abort(&F.tcb, F.now);
		break;
	case 15:
		break; /* the bytes stay with the caller: the space shrinks */
	default:
		if (!F.paused) {
			F.space = F.cfg.rcv_space;
			sluice_tcp_set_rcv_space(&F.tcb, F.space);
		}
		break;
	}
	F.depth--;
}

static void on_established(void *arg)
{
	(void)arg;
	cb_enter("established");
	say("established");
	CHECK(!F.established, "established twice");
	CHECK(F.tcb.state == SLUICE_TCP_ESTABLISHED || F.tcb.state == SLUICE_TCP_FIN_WAIT_1, "established in %s",
	      sluice_tcp_state_name(F.tcb.state));
	F.established = true;
	uint8_t b = back8();
	if (b % 8 == 7) {
		say("established: refuse");
		F.aborting = true;
		sluice_tcp_abort(&F.tcb, F.now);
	} else if (b % 8 == 6) {
		do_send(back8(), false);
	} else if (b % 8 == 5) {
		say("established: close");
		F.closing = true;
		(void)sluice_tcp_close(&F.tcb, F.now);
	}
	F.depth--;
}

static void on_peer_fin(void *arg)
{
	(void)arg;
	cb_enter("peer_fin");
	say("peer_fin at %llu", (unsigned long long)F.delivered);
	CHECK(!F.peer_fin, "peer_fin twice");
	F.peer_fin = true;
	bool found = false;
	for (uint32_t i = 0; i < F.fins_n && !found; i++)
		found = F.fins[i] == F.delivered;
	CHECK(found, "peer_fin at %llu where the peer sent no FIN", (unsigned long long)F.delivered);
	CHECK(peer_off(F.tcb.rcv_nxt) == F.delivered + 1, "rcv_nxt not past the FIN");
	uint8_t b = back8();
	if (b % 4 == 3) {
		F.aborting = true;
		sluice_tcp_abort(&F.tcb, F.now);
	} else if (b % 4 != 2 && !F.closing) { /* the transport's: Kafka has no half-close */
		F.closing = true;
		(void)sluice_tcp_close(&F.tcb, F.now);
	}
	F.depth--;
}

static void on_acked(void *arg, uint32_t n)
{
	(void)arg;
	cb_enter("acked");
	say("acked %u", n);
	CHECK(n > 0 && F.acked + n <= F.queued, "acked %u with %llu of %llu acknowledged", n,
	      (unsigned long long)F.acked, (unsigned long long)F.queued);
	F.acked += n;
	uint8_t b = back8();
	if (b % 4 == 1)
		do_send((uint32_t)back8() << 4, false); /* more of a pending response (pend_fill) */
	F.depth--;
}

static void on_closed(void *arg, enum sluice_tcp_close_reason reason)
{
	(void)arg;
	cb_enter("closed");
	say("closed: %s", sluice_tcp_reason_name(reason));
	CHECK(F.tcb.state == SLUICE_TCP_CLOSED, "closed in %s", sluice_tcp_state_name(F.tcb.state));
	CHECK(sluice_tcp_next_timer(&F.tcb) == SLUICE_TCP_TIMER_NONE, "a timer armed when closed");
	switch (reason) {
	case SLUICE_TCP_END_ABORTED:
		CHECK(F.aborting, "aborted without an abort");
		break;
	case SLUICE_TCP_END_RESET:
		CHECK(F.in_input && F.in_rst, "reset without a RST");
		break;
	case SLUICE_TCP_END_ORDERLY:
		CHECK(F.tcb.fin_queued && F.tcb.fin_acked && F.peer_fin, "orderly without both FINs");
		break;
	case SLUICE_TCP_END_TIMEOUT:
	case SLUICE_TCP_END_FIN_WAIT_2:
	case SLUICE_TCP_END_KEEPALIVE:
		CHECK(F.in_timer, "a timer's end outside on_timer");
		break;
	default:
		fail("closed: reason %d", (int)reason);
	}
	F.closed = true;
	F.close_in_cb = F.depth > 1;
	F.depth--;
	if (!F.close_in_cb) { /* freed here, as tcp.h allows */
		FUZZ_POISON(&F.tcb, sizeof F.tcb);
		FUZZ_POISON(snd_buf, sizeof snd_buf);
		FUZZ_POISON(ooo_buf, sizeof ooo_buf);
		F.poisoned = true;
	}
}

/* ---- the caller's calls ---- */

/* Queue up to n bytes (our_byte at their offsets); output after, as the
 * transport's send does. */
static void do_send(uint32_t n, bool output)
{
	if (F.closed)
		return;
	uint64_t room = FUZZ_QUEUED_MAX - F.queued;
	n = n < room ? n : (uint32_t)room;
	n = n < sizeof scratch ? n : (uint32_t)sizeof scratch;
	uint32_t space = sluice_tcp_send_space(&F.tcb);
	uint32_t take = n < space ? n : space;
	for (uint32_t i = 0; i < take; i++)
		scratch[i] = our_byte(F.queued + i);
	uint32_t got = F.external ? sluice_tcp_send_external(&F.tcb, n) : sluice_tcp_send(&F.tcb, scratch, n);
	CHECK(got == take, "send took %u of %u with %u of space", got, n, space);
	F.queued += got;
	say("send %u (queued %llu)%s", got, (unsigned long long)F.queued, output ? " + output" : "");
	if (output)
		sluice_tcp_output(&F.tcb, F.now);
}

static void fire_timers(void)
{
	for (int i = 0; i < FUZZ_TIMER_ROUNDS && !F.closed && sluice_tcp_next_timer(&F.tcb) <= F.now; i++) {
		say("on_timer (next %llu)", (unsigned long long)sluice_tcp_next_timer(&F.tcb));
		F.in_timer = true;
		sluice_tcp_on_timer(&F.tcb, F.now); /* ends with sluice_tcp_output unless it ended the connection */
		F.in_timer = false;
		F.owes_output = false;
	}
}

static void mark_sent(uint32_t seq, uint32_t len)
{
	for (uint32_t i = 0; i < len; i++) {
		uint32_t o = peer_off(seq + i);
		if (o < FUZZ_STREAM_MAX)
			covered[o / 8] |= (uint8_t)(1u << (o % 8));
	}
}

static uint32_t seq_choice(uint8_t mode)
{
	const struct sluice_tcp_tcb *t = &F.tcb;
	switch (mode) {
	case 0: return t->rcv_nxt;
	case 1: return t->rcv_nxt + (uint32_t)(int8_t)u8();
	case 2: return t->rcv_nxt + u16();        /* ahead: out of order */
	case 3: return t->rcv_nxt - u16();        /* old */
	case 4: return u32();
	case 5: return F.peer_hi + (uint32_t)(int8_t)u8(); /* the peer's stream goes on */
	case 6: return t->rcv_adv + (uint32_t)(int8_t)u8(); /* the window's edge */
	default: return t->rcv_nxt + (uint32_t)u8() * 64;
	}
}

static uint32_t ack_choice(uint8_t mode)
{
	const struct sluice_tcp_tcb *t = &F.tcb;
	switch (mode) {
	case 0: return t->snd_una;
	case 1: return t->snd_nxt;
	case 2: return t->snd_max;
	case 3: return t->snd_una + (uint32_t)(int8_t)u8();
	case 4: return t->snd_max + (uint32_t)(int8_t)u8();
	case 5: return t->snd_una + u16() % (t->snd_max - t->snd_una + 1); /* partial */
	case 6: return u32();
	default: return t->snd_una - u16();
	}
}

/* A SACK block, by mode: above snd_una by u16 and u16 long; whole
 * segments (the holes a real receiver reports); around snd_max; raw. */
static struct sluice_tcp_sack_block sack_choice(uint8_t mode)
{
	const struct sluice_tcp_tcb *t = &F.tcb;
	uint32_t l;
	switch (mode & 3) {
	case 0:
		l = t->snd_una + u16();
		return (struct sluice_tcp_sack_block){l, l + u16()};
	case 1:
		l = t->snd_una + t->smss * (u8() % 64u);
		return (struct sluice_tcp_sack_block){l, l + t->smss * (1u + u8() % 8u)};
	case 2:
		l = t->snd_max - u16();
		return (struct sluice_tcp_sack_block){l, l + u16()};
	default:
		l = u32();
		return (struct sluice_tcp_sack_block){l, u32()};
	}
}

/* A segment from the peer: its bytes are always peer_byte at their offset.
 * Bytes: flags (FIN, PSH, RST when both 0x0c, SYN when both 0x30, no ACK
 * when both 0xc0), modes (sequence and ACK number choices, timestamps,
 * SACK blocks), their operands, the window (sticky, or new), the payload
 * length, then the timestamp and SACK operands (per block: sack_choice's
 * mode, then its operands). */
static void peer_segment(void)
{
	static uint8_t payload[FUZZ_PAYLOAD_MAX];
	const struct sluice_tcp_tcb *t = &F.tcb;
	uint8_t f = u8(), m = u8();
	struct sluice_tcp_seg s;
	memset(&s, 0, sizeof s);
	s.saddr = PEER, s.daddr = US, s.sport = PEER_PORT, s.dport = US_PORT, s.wscale = -1;
	s.flags = SLUICE_TCP_ACK;
	s.flags |= (f & 1 ? SLUICE_TCP_FIN : 0) | (f & 2 ? SLUICE_TCP_PSH : 0);
	s.flags |= (f & 0x0c) == 0x0c ? SLUICE_TCP_RST : 0;
	s.flags |= (f & 0x30) == 0x30 ? SLUICE_TCP_SYN : 0;
	s.flags &= (f & 0xc0) == 0xc0 ? (uint8_t)~SLUICE_TCP_ACK : 0xff;
	s.seq = seq_choice(m & 7);
	s.ack = ack_choice(m >> 3 & 7);
	uint8_t w = u8();
	switch (w & 3) {
	case 1: F.peer_wnd = u16(); break;
	case 2: F.peer_wnd = 0; break;
	case 3: F.peer_wnd = u8(); break;
	default: break;
	}
	s.window = (uint16_t)F.peer_wnd;
	uint8_t l = u8();
	switch (l & 3) {
	case 1: s.payload_len = u8(); break;
	case 2: s.payload_len = u16() % (FUZZ_PAYLOAD_MAX + 1); break;
	case 3: s.payload_len = F.cfg.mss * (1u + (l >> 2 & 3)); break;
	default: break;
	}
	s.payload_len = s.payload_len < FUZZ_PAYLOAD_MAX ? s.payload_len : FUZZ_PAYLOAD_MAX;
	for (uint32_t i = 0; i < s.payload_len; i++)
		payload[i] = peer_byte(peer_off(s.seq + i));
	s.payload = payload;
	if (m & 0x40) {
		uint8_t tm = u8();
		s.has_ts = true;
		switch (tm & 3) {
		case 0: s.ts_val = F.peer_ts + (uint32_t)F.now; break;
		case 1: s.ts_val = t->ts_recent - u8(); break;
		case 2: s.ts_val = u32(); break;
		default: s.ts_val = F.peer_ts + (uint32_t)F.now + u16(); break;
		}
		switch (tm >> 2 & 3) {
		case 0: s.ts_ecr = F.our_ts; break;
		case 1: s.ts_ecr = 0; break;
		case 2: s.ts_ecr = u32(); break;
		default: s.ts_ecr = F.our_ts - u8(); break;
		}
	}
	if (m & 0x80) {
		s.sack_n = (uint8_t)(1 + u8() % SLUICE_TCP_SACK_BLOCKS_MAX);
		for (uint8_t i = 0; i < s.sack_n; i++)
			s.sack[i] = sack_choice(u8());
	}
	if (!(s.flags & (SLUICE_TCP_RST | SLUICE_TCP_SYN))) { /* what a real peer sends: remembered */
		mark_sent(s.seq, s.payload_len);
		if (sluice_tcp_seq_gt(s.seq + s.payload_len, F.peer_hi))
			F.peer_hi = s.seq + s.payload_len;
		if ((s.flags & SLUICE_TCP_FIN) && F.fins_n < FUZZ_FINS_MAX)
			F.fins[F.fins_n++] = peer_off(s.seq + s.payload_len);
	}
	say("input seq %u ack %u flags %#x win %u len %u ts %d", peer_off(s.seq), our_off(s.ack), s.flags, s.window,
	    s.payload_len, s.has_ts);
	F.in_input = true, F.in_ack = s.ack, F.in_rst = s.flags & SLUICE_TCP_RST;
	sluice_tcp_input(&F.tcb, &s, F.now);
	F.in_input = false;
}

/* ---- invariants after a step ---- */

static bool seq_between(uint32_t lo, uint32_t x, uint32_t hi) { return x - lo <= hi - lo; }

static void check_tcb(void)
{
	const struct sluice_tcp_tcb *t = &F.tcb;
	CHECK(t->state != SLUICE_TCP_CLOSED, "CLOSED without the closed callback");
	CHECK(seq_between(t->iss, t->snd_una, t->snd_max) && seq_between(t->snd_una, t->snd_nxt, t->snd_max),
	      "not iss %u <= snd_una %u <= snd_nxt %u <= snd_max %u", t->iss, t->snd_una, t->snd_nxt, t->snd_max);
	CHECK((uint64_t)(t->snd_buf_seq - (t->iss + 1)) == F.acked && F.acked + t->snd_len == F.queued,
	      "the send ring does not account for the bytes queued and acknowledged");
	CHECK(seq_between(t->iss, t->snd_max, t->snd_buf_seq + t->snd_len + t->fin_queued),
	      "sent past the queued bytes (snd_max %u)", t->snd_max);
	CHECK(F.sent_hi <= t->snd_max - t->iss, "emitted up to %u past snd_max %u", F.sent_hi, t->snd_max - t->iss);
	CHECK(t->snd_len <= F.cfg.snd_buf_bytes && (!t->fin_queued || F.closing), "send ring or FIN without close");
	CHECK(t->rcv_space == F.space, "receive space %u, %u given minus what was delivered", t->rcv_space, F.space);
	CHECK(t->state == SLUICE_TCP_SYN_RECEIVED ||
		      peer_off(t->rcv_nxt) == F.delivered + (F.peer_fin ? 1 : 0),
	      "rcv_nxt %u is not what was delivered", peer_off(t->rcv_nxt));
	CHECK(t->ooo_n <= SLUICE_TCP_OOO_RANGES_MAX && (t->ooo_n == 0 || t->ooo_newest < t->ooo_n), "islands");
	/* Once the peer's FIN is taken its islands are stale (bytes it sent past
	 * its own FIN, a protocol violation) and nothing reads them again. */
	uint32_t prev = t->rcv_nxt;
	for (uint32_t i = 0; i < t->ooo_n && !F.peer_fin; i++) {
		uint32_t l = t->ooo[i].left - t->rcv_nxt, r = t->ooo[i].right - t->rcv_nxt;
		/* The first may start at rcv_nxt: reached while the caller was full. */
		CHECK((l > 0 || i == 0) && l < r && r <= FUZZ_OOO_BUF_BYTES && (i == 0 || l > prev - t->rcv_nxt),
		      "island %u [%u, %u) out of order or place (rcv_nxt %u)", i, t->ooo[i].left, t->ooo[i].right,
		      t->rcv_nxt);
		prev = t->ooo[i].right;
	}
	/* An island held at rcv_nxt waits only while the caller has no room:
	 * every step that gives room ends with sluice_tcp_output, which
	 * delivers it (a room given inside a delivery, the drain goes on). */
	bool text = t->state == SLUICE_TCP_ESTABLISHED || t->state == SLUICE_TCP_FIN_WAIT_1 ||
		    t->state == SLUICE_TCP_FIN_WAIT_2;
	CHECK(!text || t->ooo_n == 0 || sluice_tcp_seq_gt(t->ooo[0].left, t->rcv_nxt) || t->rcv_space == 0,
	      "island [%u, %u) held at rcv_nxt %u with %u bytes of room", t->ooo[0].left, t->ooo[0].right, t->rcv_nxt,
	      t->rcv_space);
	/* The scoreboard: ranges above snd_una, within snd_max, ordered, apart;
	 * a SACK recovery's resends within [snd_una, snd_max]. */
	CHECK(t->sacked_n <= SLUICE_TCP_SCOREBOARD_MAX && (t->sack_ok || t->sacked_n == 0), "scoreboard of %u",
	      t->sacked_n);
	for (uint32_t i = 0, below = 0; i < t->sacked_n; i++) {
		uint32_t l = t->sacked[i].left - t->snd_una, r = t->sacked[i].right - t->snd_una;
		CHECK(l > below && l < r && r <= t->snd_max - t->snd_una,
		      "SACKed range %u [%u, %u) out of order or place (snd_una %u, snd_max %u)", i, our_off(t->sacked[i].left),
		      our_off(t->sacked[i].right), our_off(t->snd_una), our_off(t->snd_max));
		below = r;
	}
	CHECK(!t->sack_recovery || (t->in_recovery && seq_between(t->snd_una, t->rtx_high, t->snd_max)),
	      "SACK recovery: in recovery %d, rtx_high %u (snd_una %u, snd_max %u)", t->in_recovery, our_off(t->rtx_high),
	      our_off(t->snd_una), our_off(t->snd_max));
	bool closing_timer = t->state == SLUICE_TCP_TIME_WAIT || t->state == SLUICE_TCP_FIN_WAIT_2;
	CHECK((t->state_at != SLUICE_TCP_TIMER_NONE) == closing_timer, "state timer %llu in %s",
	      (unsigned long long)t->state_at, sluice_tcp_state_name(t->state));
	CHECK(t->smss > 0 && t->cwnd > 0, "smss or cwnd zero");
	if (F.owes_output)
		return;
	/* Something unacknowledged or unsent: a timer must be running for it. */
	bool unsent = sluice_tcp_seq_lt(t->snd_nxt, t->snd_buf_seq + t->snd_len);
	bool fin_owed = t->fin_queued && !t->fin_acked &&
			(t->state == SLUICE_TCP_FIN_WAIT_1 || t->state == SLUICE_TCP_CLOSING || t->state == SLUICE_TCP_LAST_ACK);
	CHECK(!(t->snd_una != t->snd_max || unsent || fin_owed) || t->rtx_at != SLUICE_TCP_TIMER_NONE ||
		      t->persist_at != SLUICE_TCP_TIMER_NONE,
	      "stalled: snd_una %u snd_nxt %u snd_max %u unsent %d fin owed %d and no timer", t->snd_una, t->snd_nxt,
	      t->snd_max, unsent, fin_owed);
}

/* ---- the input ---- */

/* One byte of choices, bit by bit: the MSS we announce (1460, the
 * smallest, 536, a jumbo frame's), Nagle, short keepalive (then three
 * bytes: idle, interval, probes), no reassembly area, a small receive
 * space (then u16), few retries (then u8), no window scaling; then our
 * timestamp offset (u32). */
static void configure(struct sluice_tcp_config *cfg)
{
	uint8_t c = u8();
	sluice_tcp_config_default(cfg);
	cfg->ops = (struct sluice_tcp_ops){on_emit, on_deliver, on_established, on_peer_fin, on_acked, on_closed};
	cfg->snd_buf = F.external ? NULL : snd_buf;
	cfg->tso_max = F.tso ? SLUICE_TCP_TSO_MAX : 0;
	cfg->snd_buf_bytes = FUZZ_SND_BUF_BYTES;
	cfg->ooo_buf = (c & 0x10) ? NULL : ooo_buf;
	cfg->ooo_buf_bytes = (c & 0x10) ? 0 : FUZZ_OOO_BUF_BYTES;
	cfg->rcv_space = (c & 0x20) ? 1u + u16() : FUZZ_RCV_SPACE;
	static const uint16_t mss[4] = {1460, SLUICE_TCP_MSS_MIN, 536, 9000 - 40};
	cfg->mss = mss[c & 3];
	cfg->nagle = c & 4;
	cfg->msl_ms = FUZZ_MSL_MS;
	cfg->rcv_wscale = (c & 0x80) ? 0 : SLUICE_TCP_WSCALE_DEFAULT;
	if (c & 8) { /* short keepalive, to reach its end */
		cfg->keepalive_idle_ms = 1 + u8() * 16u;
		cfg->keepalive_interval_ms = 1 + u8() * 4u;
		cfg->keepalive_probes = 1 + u8() % 4;
	}
	cfg->retries_max = (c & 0x40) ? u8() % 4 : SLUICE_TCP_RETRIES_MAX_DEFAULT;
	cfg->ts_offset = u32();
}

/* The SYN: option bits (timestamps, SACK-permitted, window scale, MSS,
 * and 0x80: FIN and PSH on it too), the shift, IRS, our ISS, the window,
 * then TSval and MSS when present. */
static void open_conn(void)
{
	uint8_t o = u8(), ws = u8();
	struct sluice_tcp_seg syn;
	memset(&syn, 0, sizeof syn);
	syn.saddr = PEER, syn.daddr = US, syn.sport = PEER_PORT, syn.dport = US_PORT;
	syn.flags = SLUICE_TCP_SYN | (o & 0x80 ? SLUICE_TCP_FIN | SLUICE_TCP_PSH : 0);
	syn.seq = u32();
	uint32_t iss = u32();
	syn.window = u16();
	syn.wscale = (o & 4) ? (int8_t)(ws % (SLUICE_TCP_WSCALE_MAX + 1)) : -1;
	syn.sack_permitted = o & 2;
	if (o & 1)
		syn.has_ts = true, syn.ts_val = u32();
	if (o & 8)
		syn.mss = u16();
	F.peer_ts = syn.ts_val - (uint32_t)F.now;
	F.peer_wnd = syn.window;
	F.peer_hi = syn.seq + 1;
	say("accept irs %u iss %u win %u wscale %d sack %d ts %d mss %u", syn.seq, iss, syn.window, syn.wscale,
	    syn.sack_permitted, syn.has_ts, syn.mss);
	int rc = sluice_tcp_accept(&F.tcb, &F.cfg, &syn, iss, F.now);
	CHECK(rc == 0 && F.tcb.state == SLUICE_TCP_SYN_RECEIVED, "accept refused a lone SYN");
}

/* One step, by opcode modulo 16: 0-5 a peer segment, 6 the clock forward
 * by u8 ms, 7 to the next timer, 8 by u16 << (u8 % 8) ms (each firing what
 * is due), 9 send (no output), 10 send and output, 11 output, 12 pause,
 * 13 resume and output, 14 close, 15 abort (if the next byte is 0 mod 8).
 * owes_output: bytes were queued and no sluice_tcp_output has run since
 * (the caller's duty, as the transport's send does): the stall check waits
 * until one has. */
static void step(void)
{
	uint8_t op = u8();
	if (op == FUZZ_OP_END) { /* the rest of the input is for the callbacks */
		F.in.lo = F.in.hi;
		return;
	}
	switch (op % 16) {
	case 6:
		F.now += u8();
		fire_timers();
		break;
	case 7: {
		uint64_t at = sluice_tcp_next_timer(&F.tcb);
		if (at != SLUICE_TCP_TIMER_NONE && at > F.now)
			F.now = at + u8() % 4;
		fire_timers();
		break;
	}
	case 8:
		F.now += (uint64_t)u16() << (u8() % 8);
		fire_timers();
		break;
	case 9:
		do_send(u8() & 1 ? u16() : FUZZ_SND_BUF_BYTES, false);
		F.owes_output = true;
		break;
	case 10:
		do_send(u8() & 1 ? u8() : u16(), true);
		F.owes_output = false;
		break;
	case 11:
		say("output");
		sluice_tcp_output(&F.tcb, F.now);
		F.owes_output = false;
		break;
	case 12:
		say("pause");
		F.paused = true;
		F.space = 0;
		sluice_tcp_set_rcv_space(&F.tcb, 0);
		break;
	case 13:
		say("resume");
		F.paused = false;
		F.space = F.cfg.rcv_space;
		sluice_tcp_set_rcv_space(&F.tcb, F.space);
		sluice_tcp_output(&F.tcb, F.now);
		F.owes_output = false;
		break;
	case 14:
		say("close");
		F.closing = true;
		(void)sluice_tcp_close(&F.tcb, F.now);
		break;
	case 15:
		if (u8() % 8 != 0)
			break;
		say("abort");
		F.aborting = true;
		sluice_tcp_abort(&F.tcb, F.now);
		break;
	default:
		peer_segment();
		F.owes_output = false; /* input ends with sluice_tcp_output */
		break;
	}
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	const char *e = getenv("SLUICE_FUZZ_TCP_TRACE");
	trace = e && *e && *e != '0';
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FUZZ_UNPOISON(&F.tcb, sizeof F.tcb);
	FUZZ_UNPOISON(snd_buf, sizeof snd_buf);
	FUZZ_UNPOISON(ooo_buf, sizeof ooo_buf);
	memset(&F, 0, sizeof F);
	memset(covered, 0, sizeof covered);
	F.in = (struct reader){data, 0, size};
	F.external = size & 1; /* half the inputs (and seeds) each way, whatever their bytes */
	F.tso = (size & 2) != 0; /* and half with segmentation offload (segments of many MSS) */
	F.now = 1000; /* TSval 0 reads as no echo: start the clock past it */
	configure(&F.cfg);
	F.cfg.arg = &F;
	F.space = F.cfg.rcv_space;
	open_conn();
	for (F.step = 1; F.step <= FUZZ_STEPS_MAX && F.in.lo < F.in.hi && !F.closed; F.step++) {
		step();
		if (F.closed)
			break;
		const struct sluice_tcp_tcb *t = &F.tcb;
		say("una %u nxt %u max %u len %u wnd %u cwnd %u smss %u recovery %d sack %d rtx_high %u sacked %u rcv_nxt %u "
		    "adv %u space %u ooo %u timers rtx %lld persist %lld delack %lld state %lld keepalive %lld",
		    our_off(t->snd_una), our_off(t->snd_nxt), our_off(t->snd_max), t->snd_len, t->snd_wnd, t->cwnd, t->smss,
		    t->in_recovery, t->sack_recovery, our_off(t->rtx_high), t->sacked_n,
		    peer_off(t->rcv_nxt), peer_off(t->rcv_adv), t->rcv_space, t->ooo_n, (long long)t->rtx_at,
		    (long long)t->persist_at, (long long)t->delack_at, (long long)t->state_at, (long long)t->keepalive_at);
		check_tcb();
	}
	if (F.closed && !F.poisoned) { /* ended inside a callback: readable until now, freed now */
		CHECK(F.tcb.state == SLUICE_TCP_CLOSED, "closed but left in %s", sluice_tcp_state_name(F.tcb.state));
		CHECK(sluice_tcp_next_timer(&F.tcb) == SLUICE_TCP_TIMER_NONE, "a timer armed after closed");
	}
	return 0;
}
