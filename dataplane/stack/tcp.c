/* The TCP connection state machine of Sluice's own TCP/IP stack (issue
 * 14): RFC 9293 per connection, driven by parsed segments and the caller's
 * clock, emitting segments and delivering bytes through callbacks (tcp.h
 * says what is whose). Choices, each explained where it is made:
 * - out-of-order segments are kept in a bounded reassembly area the caller
 *   supplies (at most SLUICE_TCP_OOO_RANGES_MAX islands) and reported in
 *   SACK blocks; without an area, or past its bounds, they are dropped and
 *   answered by an immediate duplicate ACK;
 * - the sender keeps the peer's SACK blocks (a scoreboard of at most
 *   SLUICE_TCP_SCOREBOARD_MAX ranges, the lowest kept) and recovers from
 *   losses by them as RFC 6675 does, conservatively: it enters recovery on
 *   three duplicate ACKs only, resends the holes that more than two
 *   segments' worth of SACKed bytes lie above (and the first segment at
 *   snd_una, which the duplicate or partial ACK says is lost), while the
 *   pipe estimate leaves cwnd room, then new data; never SACKed bytes,
 *   never more than was sent. A recovery that began without SACK blocks
 *   (the peer sends none) is NewReno's (RFC 6582). A timeout empties the
 *   scoreboard (RFC 2018 8, RFC 6675 5.1: the peer may have reneged); the
 *   SACK blocks that come after it are used again, also when going back N;
 * - the initial window is RFC 6928's 10 segments (capped at 14600 bytes);
 * - ACKs are delayed up to delack_ms, but sent at once for every second
 *   full segment's worth of bytes, out-of-order data, a filled hole, a FIN
 *   and a window update (RFC 9293 3.8.6.3, RFC 5681 4.2);
 * - after a retransmission timeout the sender goes back N (snd_nxt returns
 *   to snd_una, snd_max remembers the highest sent);
 * - a RST in TIME-WAIT closes it (RFC 9293, not RFC 1337); a SYN there gets
 *   a challenge ACK (reuse of TIME-WAIT for a new SYN is the listener's);
 * - segments without timestamps on a timestamped connection are accepted;
 *   challenge ACKs are not rate limited;
 * - keepalive (RFC 1122 4.2.3.6, RFC 9293 3.8.4) runs only in ESTABLISHED
 *   and CLOSE-WAIT with nothing unacknowledged or unsent: the
 *   retransmission and persist timers watch the peer otherwise, and the
 *   closing states have their own timers. Its clock restarts at every
 *   acceptable segment from the peer (a peer's own keepalive probe is an
 *   unacceptable segment: answered, not counted, as in Linux). A probe is
 *   SEG.SEQ = SND.NXT - 1 with ACK and no data: RFC 1122 allows one garbage
 *   byte for old receivers that ignore empty segments, but every current
 *   stack answers the empty one and it carries nothing the peer could
 *   mistake for data. */
#include "dataplane/stack/tcp.h"
#include <assert.h>
#include <string.h>

#define TS_OPTION_BYTES 12                       /* timestamps + 2 NOPs, taken from the MSS */
#define PAWS_IDLE_MS (24ull * 24 * 3600 * 1000)  /* RFC 7323 5.5: TS.Recent too old to trust */
#define PERSIST_BACKOFF_MAX 16                   /* shifts of the persist interval */
#define SSTHRESH_INITIAL 0x7fffffffu             /* RFC 5681 3.1: arbitrarily high */
#define DUPTHRESH 3                              /* RFC 5681, RFC 6675: duplicate ACKs that mean a loss */

_Static_assert(SLUICE_TCP_MSS_MIN > TS_OPTION_BYTES, "a segment carries data after the timestamps");
_Static_assert((uint64_t)SLUICE_TCP_RTO_MAX_MS << PERSIST_BACKOFF_MAX < UINT32_MAX * 1000ull,
	       "persist intervals do not overflow before the cap");

/* What a step of segment processing leaves: go on, drop the segment (the
 * connection lives: send what is owed), or the connection is gone (touch
 * nothing: ops.closed may have freed the TCB). */
enum step { STEP_GO, STEP_DROP, STEP_GONE };

static uint32_t min32(uint32_t a, uint32_t b) { return a < b ? a : b; }
static uint32_t max32(uint32_t a, uint32_t b) { return a > b ? a : b; }

static uint32_t seg_len(const struct sluice_tcp_seg *s)
{
	return s->payload_len + !!(s->flags & SLUICE_TCP_SYN) + !!(s->flags & SLUICE_TCP_FIN);
}

/* s in [base, base + wnd) in wrapped arithmetic. */
static bool in_window(uint32_t s, uint32_t base, uint32_t wnd) { return s - base < wnd; }

static void end_conn(struct sluice_tcp_tcb *t, enum sluice_tcp_close_reason reason)
{
	assert(t->state != SLUICE_TCP_CLOSED);
	t->state = SLUICE_TCP_CLOSED;
	t->rtx_at = t->persist_at = t->delack_at = t->state_at = t->keepalive_at = SLUICE_TCP_TIMER_NONE;
	t->cfg.ops.closed(t->cfg.arg, reason); /* last: the TCB may be freed here */
}

/* ---- receive window ---- */

/* The window our last segment offered, from rcv_nxt to its right edge. */
static uint32_t rcv_wnd_cur(const struct sluice_tcp_tcb *t)
{
	return sluice_tcp_seq_gt(t->rcv_adv, t->rcv_nxt) ? t->rcv_adv - t->rcv_nxt : 0;
}

/* The window to offer now: the caller's free space, scaled-field aligned,
 * and moved right only by a worthwhile step (receiver SWS avoidance, RFC
 * 9293 3.8.6.2.2: min(half the buffer, one segment)). */
static uint32_t rcv_wnd_new(const struct sluice_tcp_tcb *t)
{
	uint32_t w = min32(t->rcv_space, 65535u << t->rcv_wscale);
	w &= ~((1u << t->rcv_wscale) - 1);
	uint32_t cur = rcv_wnd_cur(t);
	if (w > cur && w - cur < min32(t->cfg.rcv_space / 2, t->rcv_mss))
		return cur;
	return w;
}

/* ---- emitting ---- */

static void put_options(struct sluice_tcp_tcb *t, struct sluice_tcp_seg *s, uint64_t now_ms)
{
	bool offer = t->state == SLUICE_TCP_SYN_SENT; /* our SYN offers everything */
	if (s->flags & SLUICE_TCP_SYN) {
		s->mss = t->cfg.mss;
		if (offer || t->wscale_ok)
			s->wscale = (int8_t)t->cfg.rcv_wscale;
		s->sack_permitted = offer || t->sack_ok;
	}
	if (offer || t->ts_ok) {
		s->has_ts = true;
		s->ts_val = (uint32_t)now_ms + t->cfg.ts_offset;
		s->ts_ecr = offer ? 0 : t->ts_recent;
	}
	if (!t->sack_ok || t->ooo_n == 0 || (s->flags & SLUICE_TCP_SYN))
		return;
	/* RFC 2018 4: the first block is the island the latest segment touched.
	 * Islands rcv_nxt reached are not reported (a block at or below the
	 * ACK number is a D-SACK to the peer, RFC 2883, not news of data
	 * held): those a delivery is about to drain (a segment sent from
	 * inside the deliver callback), and one held while the caller is full
	 * (ooo_drain), whose bytes are not acknowledged until the caller has
	 * room (held_drain) or the peer sends them again. */
	uint32_t room = t->ts_ok ? 3 : SLUICE_TCP_SACK_BLOCKS_MAX, reached = 0;
	while (reached < t->ooo_n && sluice_tcp_seq_leq(t->ooo[reached].left, t->rcv_nxt))
		reached++;
	if (t->ooo_newest >= reached)
		s->sack[s->sack_n++] = t->ooo[t->ooo_newest];
	for (uint32_t i = reached; i < t->ooo_n && s->sack_n < room; i++)
		if (i != t->ooo_newest)
			s->sack[s->sack_n++] = t->ooo[i];
	assert(s->sack_n <= SLUICE_TCP_SACK_BLOCKS_MAX);
}

static void emit_seg(struct sluice_tcp_tcb *t, uint32_t seq, uint8_t flags, const uint8_t *p, uint32_t n,
		     uint64_t now_ms)
{
	struct sluice_tcp_seg s;
	memset(&s, 0, sizeof s);
	s.saddr = t->laddr, s.daddr = t->raddr, s.sport = t->lport, s.dport = t->rport;
	s.seq = seq, s.flags = flags, s.wscale = -1, s.payload = p, s.payload_len = n;
	if (!(flags & SLUICE_TCP_RST)) {
		uint32_t w = rcv_wnd_new(t);
		if (flags & SLUICE_TCP_SYN) { /* never scaled (RFC 7323 2.2) */
			s.window = (uint16_t)min32(w, 65535);
			t->rcv_adv = t->rcv_nxt + s.window;
		} else {
			s.window = (uint16_t)(w >> t->rcv_wscale);
			t->rcv_adv = t->rcv_nxt + ((uint32_t)s.window << t->rcv_wscale);
		}
		put_options(t, &s, now_ms);
	}
	if (flags & SLUICE_TCP_ACK) {
		s.ack = t->rcv_nxt;
		t->last_ack_sent = t->rcv_nxt;
		t->ack_now = false;
		t->unacked_bytes = 0;
		t->delack_at = SLUICE_TCP_TIMER_NONE;
	}
	t->counters.segs_out++;
	t->cfg.ops.emit(t->cfg.arg, &s);
}

static bool fin_may_go(const struct sluice_tcp_tcb *t)
{
	return t->fin_queued && (t->state == SLUICE_TCP_FIN_WAIT_1 || t->state == SLUICE_TCP_CLOSING ||
				 t->state == SLUICE_TCP_LAST_ACK);
}

/* The most payload one emitted segment may carry: the MSS, or with
 * segmentation offload (config.tso_max) whole MSS-sized segments up to
 * tso_max, for new data only (sends by send_data and window probes;
 * retransmissions stay one MSS). */
static uint32_t seg_cap(const struct sluice_tcp_tcb *t, bool big)
{
	if (!big || t->cfg.tso_max <= t->smss)
		return t->smss;
	return t->cfg.tso_max / t->smss * t->smss;
}

/* Sends one segment starting at seq with at most limit payload bytes, at
 * most one MSS unless big (seg_cap) (the SYN, data up to the ring's wrap,
 * the FIN after the last byte); returns the sequence space it covered, 0
 * when there was nothing to send. */
static uint32_t xmit_cap(struct sluice_tcp_tcb *t, uint32_t seq, uint32_t limit, bool big, uint64_t now_ms)
{
	if (seq == t->iss && (t->state == SLUICE_TCP_SYN_SENT || t->state == SLUICE_TCP_SYN_RECEIVED)) {
		uint8_t f = SLUICE_TCP_SYN | (t->state == SLUICE_TCP_SYN_RECEIVED ? SLUICE_TCP_ACK : 0);
		emit_seg(t, seq, f, NULL, 0, now_ms);
		return 1;
	}
	if (t->state == SLUICE_TCP_SYN_SENT || t->state == SLUICE_TCP_SYN_RECEIVED)
		return 0; /* data waits for the handshake */
	uint32_t off = seq - t->snd_buf_seq;
	assert(off <= t->snd_len);
	uint32_t pos = (t->snd_head + off) & (t->cfg.snd_buf_bytes - 1);
	uint32_t n = min32(min32(t->snd_len - off, limit), seg_cap(t, big));
	if (t->cfg.snd_buf)
		n = min32(n, t->cfg.snd_buf_bytes - pos); /* one contiguous piece per segment */
	bool fin = fin_may_go(t) && off + n == t->snd_len;
	if (n == 0 && !fin)
		return 0;
	uint8_t flags = SLUICE_TCP_ACK;
	if (n > 0 && off + n == t->snd_len)
		flags |= SLUICE_TCP_PSH;
	if (fin)
		flags |= SLUICE_TCP_FIN;
	emit_seg(t, seq, flags, n && t->cfg.snd_buf ? t->cfg.snd_buf + pos : NULL, n, now_ms);
	return n + fin;
}

static uint32_t xmit(struct sluice_tcp_tcb *t, uint32_t seq, uint32_t limit, uint64_t now_ms)
{
	return xmit_cap(t, seq, limit, false, now_ms);
}

/* Bookkeeping after sending len at snd_nxt: new data counted, the RTT timed
 * when timestamps do not time it (Karn: only first transmissions), the
 * retransmission timer armed. */
static void sent_at_nxt(struct sluice_tcp_tcb *t, uint32_t len, uint64_t now_ms)
{
	uint32_t seq = t->snd_nxt;
	t->snd_nxt += len;
	if (sluice_tcp_seq_gt(t->snd_nxt, t->snd_max)) {
		if (!t->ts_ok && !t->rtt_timing && seq == t->snd_max) {
			t->rtt_timing = true;
			t->rtt_seq = t->snd_nxt;
			t->rtt_start_ms = now_ms;
		}
		/* Fresh data only: the SYN and the FIN are no payload. */
		uint32_t from = sluice_tcp_seq_gt(t->snd_max, t->snd_buf_seq) ? t->snd_max : t->snd_buf_seq;
		uint32_t to = t->snd_buf_seq + t->snd_len;
		to = sluice_tcp_seq_lt(t->snd_nxt, to) ? t->snd_nxt : to;
		t->counters.bytes_out += sluice_tcp_seq_gt(to, from) ? to - from : 0;
		t->snd_max = t->snd_nxt;
	}
	if (t->rtx_at == SLUICE_TCP_TIMER_NONE)
		t->rtx_at = now_ms + t->rto_ms;
	t->persist_at = SLUICE_TCP_TIMER_NONE;
}

/* ---- the peer's SACK blocks (RFC 6675 scoreboard) ---- */

/* The scoreboard's arithmetic is in offsets from snd_una: every range lies
 * within snd_max - snd_una, far below 2^31. */

/* Keeps [l, r) (offsets) merged into the scoreboard; when that makes more
 * ranges than it keeps, the highest goes: its bytes may then be resent
 * needlessly, never wrongly, and the lowest holes are filled first. */
static void sack_insert(struct sluice_tcp_tcb *t, uint32_t l, uint32_t r)
{
	struct sluice_tcp_sack_block tmp[SLUICE_TCP_SCOREBOARD_MAX + 1];
	uint32_t n = 0, base = t->snd_una;
	bool placed = false;
	assert(l > 0 && l < r && r <= t->snd_max - base);
	for (uint32_t i = 0; i < t->sacked_n; i++) {
		uint32_t bl = t->sacked[i].left - base, br = t->sacked[i].right - base;
		if (br < l) {
			tmp[n++] = t->sacked[i]; /* wholly below, not touching */
		} else if (bl > r) {
			if (!placed)
				tmp[n++] = (struct sluice_tcp_sack_block){base + l, base + r}, placed = true;
			tmp[n++] = t->sacked[i];
		} else { /* overlapping or adjacent: merge */
			l = bl < l ? bl : l;
			r = br > r ? br : r;
		}
	}
	if (!placed)
		tmp[n++] = (struct sluice_tcp_sack_block){base + l, base + r};
	t->sacked_n = (uint8_t)min32(n, SLUICE_TCP_SCOREBOARD_MAX);
	memcpy(t->sacked, tmp, t->sacked_n * sizeof tmp[0]);
}

/* The SACK blocks of an ACK that is not old (ack == snd_una, after it
 * moved) go into the scoreboard. Blocks that are no news of data held
 * above snd_una are ignored: at or below it (a D-SACK, RFC 2883, or
 * stale), past snd_max (never sent), empty or wrapped (a broken or lying
 * peer), and a first block inside the second (a D-SACK above the ACK). */
static void sack_update(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg)
{
	if (!t->sack_ok)
		return;
	uint32_t span = t->snd_max - t->snd_una;
	for (uint32_t i = 0; i < seg->sack_n && i < SLUICE_TCP_SACK_BLOCKS_MAX; i++) {
		const struct sluice_tcp_sack_block *b = &seg->sack[i];
		uint32_t l = b->left - t->snd_una, r = b->right - t->snd_una;
		if (l == 0 || l >= r || r > span)
			continue;
		if (i == 0 && seg->sack_n > 1 && sluice_tcp_seq_geq(b->left, seg->sack[1].left) &&
		    sluice_tcp_seq_leq(b->right, seg->sack[1].right))
			continue;
		sack_insert(t, l, r);
	}
}

/* SND.UNA moves to ack: only the ranges wholly above it stay (one it
 * reached or entered says the peer holds bytes its cumulative ACK denies:
 * dropped, as if reneged). */
static void sack_trim(struct sluice_tcp_tcb *t, uint32_t ack)
{
	uint32_t d = ack - t->snd_una, n = 0;
	for (uint32_t i = 0; i < t->sacked_n; i++)
		if (t->sacked[i].left - t->snd_una > d)
			t->sacked[n++] = t->sacked[i];
	t->sacked_n = (uint8_t)n;
}

/* Hole i: the un-SACKed bytes [*from, *to) (offsets) below range i; the
 * last one, i == sacked_n, lies above every range, up to snd_max. */
static void sack_hole(const struct sluice_tcp_tcb *t, uint32_t i, uint32_t *from, uint32_t *to)
{
	assert(i <= t->sacked_n);
	*from = i == 0 ? 0 : t->sacked[i - 1].right - t->snd_una;
	*to = i < t->sacked_n ? t->sacked[i].left - t->snd_una : t->snd_max - t->snd_una;
	assert(*from <= *to);
}

/* How much of hole i, from its start, is lost (RFC 6675 IsLost): all of
 * it when more than DUPTHRESH - 1 segments' worth of bytes above it were
 * SACKed; else, of the hole at snd_una, its first segment, which the
 * duplicate ACKs or the partial ACK that brought the recovery say is lost
 * (NewReno's inference; the rest of that hole may still be in flight). */
static uint32_t sack_lost_len(const struct sluice_tcp_tcb *t, uint32_t i, uint32_t from, uint32_t to)
{
	uint32_t above = 0;
	for (uint32_t k = i; k < t->sacked_n; k++)
		above += t->sacked[k].right - t->sacked[k].left;
	if (above > (DUPTHRESH - 1) * (uint32_t)t->smss)
		return to - from;
	return i == 0 ? min32(to - from, t->smss) : 0;
}

/* RFC 6675 SetPipe: the bytes thought to be in the network in a SACK
 * recovery: those neither SACKed nor lost, and those resent in it (below
 * rtx_high) once more. */
static uint32_t sack_pipe(const struct sluice_tcp_tcb *t)
{
	uint32_t pipe = 0, rtx = t->rtx_high - t->snd_una;
	assert(rtx <= t->snd_max - t->snd_una);
	for (uint32_t i = 0; i <= t->sacked_n; i++) {
		uint32_t from, to;
		sack_hole(t, i, &from, &to);
		pipe += to - from - sack_lost_len(t, i, from, to);
		if (rtx > from)
			pipe += min32(rtx, to) - from;
	}
	return pipe;
}

/* RFC 6675 NextSeg, rule 1: the first lost byte not resent yet in this
 * recovery (*seq), and how much from it one segment may carry (*len): to
 * the end of its hole's lost part at most, so never SACKed bytes and
 * never past snd_max. False when there is none. */
static bool sack_next_lost(const struct sluice_tcp_tcb *t, uint32_t *seq, uint32_t *len)
{
	uint32_t rtx = t->rtx_high - t->snd_una;
	for (uint32_t i = 0; i <= t->sacked_n; i++) {
		uint32_t from, to;
		sack_hole(t, i, &from, &to);
		uint32_t end = from + sack_lost_len(t, i, from, to), at = max32(from, rtx);
		if (at < end) {
			*seq = t->snd_una + at;
			*len = min32(end - at, t->smss);
			return true;
		}
	}
	return false;
}

/* Going back over what was sent (after a timeout, or a window that
 * closed), snd_nxt skips the ranges the peer SACKed since (RFC 6675 5.1:
 * the SACK information that came after the timeout is used); returns how
 * many bytes may go from snd_nxt before the next range (UINT32_MAX: no
 * range ahead). */
static uint32_t sack_skip(struct sluice_tcp_tcb *t)
{
	for (uint32_t i = 0; i < t->sacked_n && sluice_tcp_seq_lt(t->snd_nxt, t->snd_max); i++) {
		uint32_t nxt = t->snd_nxt - t->snd_una;
		uint32_t l = t->sacked[i].left - t->snd_una, r = t->sacked[i].right - t->snd_una;
		if (nxt >= r)
			continue;
		if (nxt < l)
			return l - nxt;
		t->snd_nxt = t->sacked[i].right; /* inside a range: past it */
	}
	return UINT32_MAX;
}

/* Resends from seq at most limit bytes of what was sent (the caller keeps
 * seq + limit within snd_max). Bytes queued since go later as new data: a
 * retransmission that carried them would move the peer's ACK past
 * snd_max, where it is dropped as acknowledging what was never sent. The
 * FIN queued behind the last byte goes along (xmit), for the first time if
 * a closed window held it back: then snd_max covers it. */
static uint32_t resend(struct sluice_tcp_tcb *t, uint32_t seq, uint32_t limit, uint64_t now_ms)
{
	assert(limit > 0 && sluice_tcp_seq_leq(seq + limit, t->snd_max));
	uint32_t len = xmit(t, seq, limit, now_ms);
	if (sluice_tcp_seq_gt(seq + len, t->snd_max))
		t->snd_max = seq + len;
	return len;
}

/* Resends the oldest unacknowledged segment: at most one MSS, up to the
 * first range the peer SACKed. */
static uint32_t resend_oldest(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	uint32_t limit = min32(t->smss, t->snd_max - t->snd_una);
	if (t->sacked_n > 0)
		limit = min32(limit, t->sacked[0].left - t->snd_una);
	return resend(t, t->snd_una, limit, now_ms);
}

/* RFC 6675 (C): in a SACK recovery, while the pipe leaves cwnd a
 * segment's room, the lost holes are resent (NextSeg rule 1), lowest
 * first, each byte once per recovery; new data goes after, by send_data
 * (rule 2). Bounded: every round resends a byte at least, past rtx_high. */
static void sack_resend(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	uint32_t rounds_max = t->cfg.snd_buf_bytes / t->smss + 2 * (SLUICE_TCP_SCOREBOARD_MAX + 1) + 1;
	for (uint32_t i = 0; i < rounds_max; i++) {
		uint32_t pipe = sack_pipe(t), seq, len;
		if (pipe >= t->cwnd || t->cwnd - pipe < t->smss || !sack_next_lost(t, &seq, &len))
			return;
		uint32_t sent = resend(t, seq, len, now_ms);
		assert(sent > 0 && sluice_tcp_seq_leq(seq + sent, t->snd_max));
		t->rtx_high = seq + sent;
		t->counters.sack_retransmits++;
	}
}

static bool can_send_data(const struct sluice_tcp_tcb *t)
{
	switch (t->state) {
	case SLUICE_TCP_ESTABLISHED: case SLUICE_TCP_CLOSE_WAIT: case SLUICE_TCP_FIN_WAIT_1:
	case SLUICE_TCP_CLOSING: case SLUICE_TCP_LAST_ACK:
		return true;
	default:
		return false;
	}
}

static uint32_t unsent_bytes(const struct sluice_tcp_tcb *t)
{
	uint32_t off = t->snd_nxt - t->snd_buf_seq;
	return off < t->snd_len ? t->snd_len - off : 0;
}

/* Sends what the peer's window and cwnd allow, MSS-sized; small segments
 * only when they carry the last queued byte or half the peer's largest
 * window (sender SWS avoidance, RFC 9293 3.8.6.2.1), and with Nagle only
 * when nothing is in flight. */
static void send_data(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	/* Bounded: each round sends or stops; a SACKed range cuts a segment
	 * short at most once per range. */
	uint32_t segs_max = t->cfg.snd_buf_bytes / t->smss + 3 + SLUICE_TCP_SCOREBOARD_MAX;
	for (uint32_t i = 0; i < segs_max; i++) {
		uint32_t to_sacked = sack_skip(t);
		uint32_t flight = t->snd_nxt - t->snd_una;
		/* In a SACK recovery the pipe estimate, not the flight, fills cwnd. */
		uint32_t in_net = t->in_recovery && t->sack_recovery ? sack_pipe(t) : flight;
		uint32_t usable = min32(t->snd_wnd > flight ? t->snd_wnd - flight : 0,
					t->cwnd > in_net ? t->cwnd - in_net : 0);
		uint32_t pending = unsent_bytes(t);
		uint32_t n = min32(min32(pending, usable), seg_cap(t, true));
		if (pending == 0) {
			if (fin_may_go(t) && t->snd_nxt == t->snd_buf_seq + t->snd_len)
				sent_at_nxt(t, xmit(t, t->snd_nxt, 0, now_ms), now_ms);
			return;
		}
		if (n == 0)
			return;
		/* Bytes resent up to a SACKed range go however few they are. */
		bool short_by_sack = to_sacked <= n;
		n = min32(n, to_sacked);
		if (!short_by_sack && n < t->smss && n < pending && n < t->max_snd_wnd / 2)
			return;
		if (!short_by_sack && t->cfg.nagle && n < t->smss && flight > 0)
			return;
		uint32_t len = xmit_cap(t, t->snd_nxt, n, true, now_ms);
		assert(len > 0);
		sent_at_nxt(t, len, now_ms);
	}
}

static uint32_t persist_interval_ms(const struct sluice_tcp_tcb *t)
{
	uint64_t ms = (uint64_t)t->rto_ms << t->persist_backoff;
	return (uint32_t)(ms < t->cfg.rto_max_ms ? ms : t->cfg.rto_max_ms);
}

/* Keepalive is due only where no other timer watches the peer (the
 * choices at the top): open, nothing unacknowledged (snd_max covers a
 * zero-window probe's byte), nothing unsent, no retransmission or persist
 * timer running. */
static bool keepalive_idle(const struct sluice_tcp_tcb *t)
{
	return t->cfg.keepalive && (t->state == SLUICE_TCP_ESTABLISHED || t->state == SLUICE_TCP_CLOSE_WAIT) &&
	       t->snd_una == t->snd_max && unsent_bytes(t) == 0 && t->rtx_at == SLUICE_TCP_TIMER_NONE &&
	       t->persist_at == SLUICE_TCP_TIMER_NONE;
}

/* The next probe (or the end, once keepalive_probes went unanswered): the
 * idle time after the peer was last heard, then the interval after the
 * last probe. */
static uint64_t keepalive_deadline(const struct sluice_tcp_tcb *t)
{
	if (t->keepalive_sent == 0)
		return t->heard_ms + t->cfg.keepalive_idle_ms;
	return t->keepalive_sent_ms + t->cfg.keepalive_interval_ms;
}

static void keepalive_update(struct sluice_tcp_tcb *t)
{
	t->keepalive_at = keepalive_idle(t) ? keepalive_deadline(t) : SLUICE_TCP_TIMER_NONE;
}

static enum step held_drain(struct sluice_tcp_tcb *t, uint64_t now_ms);

void sluice_tcp_output(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	assert(t->state != SLUICE_TCP_CLOSED);
	if (held_drain(t, now_ms) == STEP_GONE)
		return; /* ended from inside a callback: touch nothing more */
	if (can_send_data(t)) {
		if (t->in_recovery && t->sack_recovery)
			sack_resend(t, now_ms);
		send_data(t, now_ms);
		/* Data waits and nothing is in flight to bring an ACK: probe. */
		if (t->rtx_at == SLUICE_TCP_TIMER_NONE && t->persist_at == SLUICE_TCP_TIMER_NONE &&
		    t->snd_nxt == t->snd_una && unsent_bytes(t) > 0)
			t->persist_at = now_ms + persist_interval_ms(t);
	}
	if (t->ack_now && t->state != SLUICE_TCP_SYN_SENT)
		emit_seg(t, t->snd_nxt, SLUICE_TCP_ACK, NULL, 0, now_ms);
	else if (t->unacked_bytes > 0 && t->delack_at == SLUICE_TCP_TIMER_NONE)
		t->delack_at = now_ms + t->cfg.delack_ms;
	keepalive_update(t); /* every input, timer and close ends here: the timer follows the state */
}

/* ---- RTT and congestion ---- */

/* RFC 6298 2.2-2.4, in microseconds; the backoff ends with a new sample. */
static void rtt_sample(struct sluice_tcp_tcb *t, uint32_t sample_ms)
{
	uint32_t r = min32(sample_ms, SLUICE_TCP_RTO_MAX_MS) * 1000;
	if (!t->rtt_measured) {
		t->srtt_us = r;
		t->rttvar_us = r / 2;
		t->rtt_measured = true;
	} else {
		uint32_t delta = t->srtt_us > r ? t->srtt_us - r : r - t->srtt_us;
		t->rttvar_us = (3 * t->rttvar_us + delta) / 4;
		t->srtt_us = (7 * t->srtt_us + r) / 8;
	}
	uint32_t rto_us = t->srtt_us + max32(1000, 4 * t->rttvar_us); /* G: a 1 ms clock */
	uint32_t rto = (rto_us + 999) / 1000;
	t->rto_ms = min32(max32(rto, t->cfg.rto_min_ms), t->cfg.rto_max_ms);
	assert(t->rto_ms >= t->cfg.rto_min_ms && t->rto_ms <= SLUICE_TCP_RTO_MAX_MS);
}

static void rtt_on_ack(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	if (t->ts_ok && seg->has_ts && seg->ts_ecr != 0) {
		uint32_t r = (uint32_t)now_ms + t->cfg.ts_offset - seg->ts_ecr;
		if ((int32_t)r >= 0)
			rtt_sample(t, r);
	} else if (t->rtt_timing && sluice_tcp_seq_geq(seg->ack, t->rtt_seq)) {
		t->rtt_timing = false;
		rtt_sample(t, (uint32_t)(now_ms - t->rtt_start_ms));
	}
}

static uint32_t initial_window(uint32_t smss)
{
	return min32(SLUICE_TCP_IW_SEGS * smss, max32(2 * smss, SLUICE_TCP_IW_BYTES_CAP));
}

/* New data acknowledged: slow start or congestion avoidance (RFC 5681
 * 3.1), or the partial and full ACKs of a recovery: NewReno's (RFC 6582
 * 3.2), or in a SACK recovery a partial ACK that shows the hole now at
 * snd_una lost (it was sent before what the ACK covers): its first
 * segment goes at once unless it went already (the pipe sends the rest;
 * cwnd stays, RFC 6675). */
static void cc_on_ack(struct sluice_tcp_tcb *t, uint32_t acked, uint64_t now_ms)
{
	if (t->in_recovery && sluice_tcp_seq_gt(t->snd_una, t->recover)) {
		uint32_t flight = t->snd_max - t->snd_una;
		t->cwnd = min32(t->ssthresh, max32(flight, t->smss) + t->smss);
		t->in_recovery = t->sack_recovery = false;
	} else if (t->in_recovery && t->sack_recovery) {
		if (sluice_tcp_seq_lt(t->rtx_high, t->snd_una))
			t->rtx_high = t->snd_una;
		if (t->rtx_high == t->snd_una && t->snd_una != t->snd_max) {
			t->rtx_high = t->snd_una + resend_oldest(t, now_ms);
			t->counters.sack_retransmits++;
		}
		if (!t->partial_ack_seen) /* only the first partial ACK restarts the timer */
			t->rtx_at = now_ms + t->rto_ms;
		t->partial_ack_seen = true;
	} else if (t->in_recovery) {
		/* Partial ACK: the next hole is lost too; resend it at once and
		 * deflate by what left the network, keeping one segment's credit. */
		uint32_t len = resend_oldest(t, now_ms);
		t->counters.fast_retransmits += len > 0;
		t->cwnd = t->cwnd > acked ? t->cwnd - acked : 0;
		if (acked >= t->smss)
			t->cwnd += t->smss;
		t->cwnd = max32(t->cwnd, t->smss);
		if (!t->partial_ack_seen) /* only the first partial ACK restarts the timer */
			t->rtx_at = now_ms + t->rto_ms;
		t->partial_ack_seen = true;
	} else if (t->cwnd < t->ssthresh) {
		t->cwnd += min32(acked, t->smss);
	} else {
		t->cwnd += max32(1, t->smss * t->smss / t->cwnd);
	}
	t->dupacks = 0;
}

/* A duplicate ACK: the third starts a fast recovery (RFC 5681 3.2): the
 * first segment resent, ssthresh halved. With SACK blocks to go by it is
 * RFC 6675's: cwnd = ssthresh, and the pipe estimate says what may go
 * (sluice_tcp_output); without, NewReno's: cwnd inflated by the three
 * segments that left, and by one more per duplicate. */
static void cc_on_dup_ack(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	t->counters.dup_acks++;
	if (t->in_recovery) {
		if (!t->sack_recovery)
			t->cwnd += t->smss; /* another segment left the network */
		return;
	}
	if (++t->dupacks != DUPTHRESH || !sluice_tcp_seq_gt(t->snd_una, t->recover))
		return;
	uint32_t flight = t->snd_max - t->snd_una;
	t->ssthresh = max32(flight / 2, 2 * t->smss);
	t->recover = t->snd_max - 1;
	uint32_t len = resend_oldest(t, now_ms);
	assert(len > 0);
	t->counters.fast_retransmits++;
	t->rtt_timing = false;
	t->in_recovery = true;
	t->partial_ack_seen = false;
	t->sack_recovery = t->sacked_n > 0;
	t->rtx_high = t->snd_una + len;
	t->cwnd = t->sack_recovery ? t->ssthresh : t->ssthresh + DUPTHRESH * t->smss;
}

/* ---- ACK processing ---- */

/* SND.UNA advances to ack: the ring gives back the acknowledged bytes,
 * our FIN may be acknowledged, RTT and cwnd learn, the timer restarts. */
static void ack_advance(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	uint32_t ack = seg->ack, data = 0;
	sack_trim(t, ack);
	if (sluice_tcp_seq_gt(ack, t->snd_buf_seq)) {
		data = min32(ack - t->snd_buf_seq, t->snd_len);
		t->snd_head = (t->snd_head + data) & (t->cfg.snd_buf_bytes - 1);
		t->snd_len -= data;
		t->snd_buf_seq += data;
		if (t->fin_queued && sluice_tcp_seq_gt(ack, t->snd_buf_seq)) {
			assert(t->snd_len == 0 && ack == t->snd_buf_seq + 1);
			t->fin_acked = true;
		}
		/* Given back before anything below may emit (a recovery's
		 * retransmission): an external send buffer finds its bytes by
		 * offset from snd_buf_seq, which has just moved. */
		if (data > 0 && t->cfg.ops.acked)
			t->cfg.ops.acked(t->cfg.arg, data);
	}
	t->snd_una = ack;
	if (sluice_tcp_seq_lt(t->snd_nxt, ack))
		t->snd_nxt = ack;
	rtt_on_ack(t, seg, now_ms);
	t->retries = 0;
	bool was_partial = t->in_recovery && t->partial_ack_seen;
	cc_on_ack(t, data, now_ms);
	if (t->snd_una == t->snd_max)
		t->rtx_at = SLUICE_TCP_TIMER_NONE;
	else if (!was_partial || !t->in_recovery)
		t->rtx_at = now_ms + t->rto_ms; /* RFC 6298 5.3 */
}

/* SND.WND from a segment newer than the last update (WL1/WL2 rule). A
 * window closed on data in flight makes the data wait for the persist
 * timer instead of retransmitting into it (so a mute peer that answers
 * probes never exhausts the retransmissions). */
static void window_update(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg)
{
	uint32_t wnd = (uint32_t)seg->window << t->snd_wscale;
	if (!(sluice_tcp_seq_lt(t->snd_wl1, seg->seq) ||
	      (t->snd_wl1 == seg->seq && sluice_tcp_seq_leq(t->snd_wl2, seg->ack))))
		return;
	t->snd_wnd = wnd;
	t->snd_wl1 = seg->seq;
	t->snd_wl2 = seg->ack;
	t->max_snd_wnd = max32(t->max_snd_wnd, wnd);
	if (wnd > 0) {
		t->persist_backoff = 0;
		t->persist_at = SLUICE_TCP_TIMER_NONE;
	} else if (t->snd_nxt != t->snd_una && !t->in_recovery) {
		t->snd_nxt = t->snd_una;
		t->rtx_at = SLUICE_TCP_TIMER_NONE;
		t->retries = 0;
	}
}

static void enter_time_wait(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	t->state = SLUICE_TCP_TIME_WAIT;
	t->state_at = now_ms + 2ull * t->cfg.msl_ms;
	t->rtx_at = t->persist_at = SLUICE_TCP_TIMER_NONE;
}

/* RFC 9293 3.10.7.4, fifth check, in synchronized states. */
static enum step ack_process(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	uint32_t ack = seg->ack;
	if (sluice_tcp_seq_gt(ack, t->snd_max)) { /* acknowledges what was never sent */
		t->ack_now = true;
		return STEP_DROP;
	}
	if (sluice_tcp_seq_lt(ack, t->snd_una - t->max_snd_wnd)) { /* RFC 5961 5.2: too old */
		t->ack_now = true;
		t->counters.challenge_acks++;
		return STEP_DROP;
	}
	uint32_t wnd = (uint32_t)seg->window << t->snd_wscale;
	/* RFC 5681 2: a duplicate ACK; answers to zero-window probes are not. */
	bool dup = ack == t->snd_una && t->snd_max != t->snd_una && seg->payload_len == 0 &&
		   !(seg->flags & (SLUICE_TCP_SYN | SLUICE_TCP_FIN)) && wnd == t->snd_wnd && wnd != 0;
	if (sluice_tcp_seq_gt(ack, t->snd_una))
		ack_advance(t, seg, now_ms);
	if (ack == t->snd_una && seg->sack_n > 0) /* not an old ACK: its blocks are news */
		sack_update(t, seg);
	if (dup)
		cc_on_dup_ack(t, now_ms);
	if (sluice_tcp_seq_geq(ack, t->snd_una))
		window_update(t, seg);
	if (!t->fin_acked)
		return STEP_GO;
	switch (t->state) {
	case SLUICE_TCP_FIN_WAIT_1:
		t->state = SLUICE_TCP_FIN_WAIT_2;
		t->state_at = now_ms + t->cfg.fin_wait_2_ms;
		break;
	case SLUICE_TCP_CLOSING:
		enter_time_wait(t, now_ms);
		break;
	case SLUICE_TCP_LAST_ACK:
		end_conn(t, SLUICE_TCP_END_ORDERLY);
		return STEP_GONE;
	default:
		break;
	}
	return STEP_GO;
}

/* ---- receiving text ---- */

/* In-order bytes to the caller; the books are updated first so the
 * callback may set the receive space. While it runs, sluice_tcp_output
 * (which the callback may call) leaves held islands alone (held_drain):
 * the caller is taking these bytes, and ooo_drain may be walking the
 * islands. */
static void deliver(struct sluice_tcp_tcb *t, const uint8_t *p, uint32_t n)
{
	if (n == 0)
		return;
	assert(n <= t->rcv_space && !t->delivering);
	t->rcv_nxt += n;
	t->rcv_space -= n;
	t->unacked_bytes += n;
	t->counters.bytes_in += n;
	t->delivering = true;
	t->cfg.ops.deliver(t->cfg.arg, p, n);
	t->delivering = false; /* the TCB stays readable until the callback returns, even if it closed */
}

/* Islands now reached by rcv_nxt go to the caller, a piece at a time (the
 * area's end splits one; the caller may pause, or give its space back,
 * between pieces), as long as it has room; returns whether any byte did.
 * When it has none, the island reached stays in the area, held at rcv_nxt
 * (its bytes unacknowledged) until room comes: held_drain. The area is
 * indexed by sequence number modulo its size: every kept byte lies within
 * its size of rcv_nxt. Bounded: each round delivers a byte at least, or
 * drops an island. */
static bool ooo_drain(struct sluice_tcp_tcb *t)
{
	bool moved = false;
	uint32_t mask = t->cfg.ooo_buf_bytes - 1;
	for (uint32_t round = 0; round < t->cfg.ooo_buf_bytes + SLUICE_TCP_OOO_RANGES_MAX; round++) {
		if (t->ooo_n == 0 || sluice_tcp_seq_gt(t->ooo[0].left, t->rcv_nxt))
			return moved;
		struct sluice_tcp_sack_block *b = &t->ooo[0];
		if (sluice_tcp_seq_gt(b->right, t->rcv_nxt)) {
			if (t->rcv_space == 0) {
				b->left = t->rcv_nxt; /* the caller is full: the rest waits */
				return moved;
			}
			uint32_t pos = t->rcv_nxt & mask;
			uint32_t n = min32(min32(b->right - t->rcv_nxt, t->rcv_space), t->cfg.ooo_buf_bytes - pos);
			deliver(t, t->cfg.ooo_buf + pos, n);
			moved = true;
			if (t->state == SLUICE_TCP_CLOSED)
				return true; /* aborted from inside the delivery */
			continue;
		}
		memmove(&t->ooo[0], &t->ooo[1], (t->ooo_n - 1u) * sizeof t->ooo[0]);
		t->ooo_n--;
		t->ooo_newest = t->ooo_newest > 0 ? t->ooo_newest - 1 : 0;
	}
	assert(!"ooo_drain: more rounds than bytes and islands");
	return moved;
}

/* Keeps [seq, seq+len) beyond rcv_nxt, merged with the islands, unless it
 * would make more islands than allowed; returns whether it was kept. */
static bool ooo_store(struct sluice_tcp_tcb *t, uint32_t seq, const uint8_t *p, uint32_t len)
{
	struct sluice_tcp_sack_block tmp[SLUICE_TCP_OOO_RANGES_MAX + 1];
	uint32_t n = 0, newest = 0, base = t->rcv_nxt;
	uint32_t l = seq, r = seq + len;
	bool placed = false;
	for (uint32_t i = 0; i < t->ooo_n; i++) {
		struct sluice_tcp_sack_block b = t->ooo[i];
		if (b.right - base < l - base) {
			tmp[n++] = b; /* wholly before, not touching */
		} else if (b.left - base > r - base) {
			if (!placed)
				newest = n, tmp[n++] = (struct sluice_tcp_sack_block){l, r}, placed = true;
			tmp[n++] = b;
		} else { /* overlapping or adjacent: merge */
			l = b.left - base < l - base ? b.left : l;
			r = b.right - base > r - base ? b.right : r;
		}
	}
	if (!placed)
		newest = n, tmp[n++] = (struct sluice_tcp_sack_block){l, r};
	if (n > SLUICE_TCP_OOO_RANGES_MAX)
		return false;
	uint32_t mask = t->cfg.ooo_buf_bytes - 1, pos = seq & mask;
	uint32_t first = min32(len, t->cfg.ooo_buf_bytes - pos);
	memcpy(t->cfg.ooo_buf + pos, p, first);
	memcpy(t->cfg.ooo_buf, p + first, len - first);
	memcpy(t->ooo, tmp, n * sizeof tmp[0]);
	t->ooo_n = (uint8_t)n;
	t->ooo_newest = (uint8_t)newest;
	return true;
}

/* A segment beyond rcv_nxt: kept within the area's reach, or dropped;
 * either way the peer gets an immediate duplicate ACK (RFC 5681 4.2). */
static void out_of_order(struct sluice_tcp_tcb *t, uint32_t seq, const uint8_t *p, uint32_t len, bool fin)
{
	t->ack_now = true;
	uint32_t off = seq - t->rcv_nxt;
	if (t->cfg.ooo_buf == NULL || off >= t->cfg.ooo_buf_bytes) {
		t->counters.ooo_drops++;
		return;
	}
	if (len > t->cfg.ooo_buf_bytes - off)
		len = t->cfg.ooo_buf_bytes - off, fin = false;
	if (len > 0 && !ooo_store(t, seq, p, len)) {
		t->counters.ooo_drops++;
		return;
	}
	t->counters.ooo_queued++;
	if (fin) {
		t->ooo_fin = true;
		t->ooo_fin_seq = seq + len;
	}
}

static void fin_received(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	t->rcv_nxt++;
	t->ack_now = true;
	t->ooo_fin = false;
	switch (t->state) {
	case SLUICE_TCP_ESTABLISHED:
		t->state = SLUICE_TCP_CLOSE_WAIT;
		break;
	case SLUICE_TCP_FIN_WAIT_1:
		if (t->fin_acked)
			enter_time_wait(t, now_ms);
		else
			t->state = SLUICE_TCP_CLOSING; /* simultaneous close */
		break;
	case SLUICE_TCP_FIN_WAIT_2:
		enter_time_wait(t, now_ms);
		break;
	default:
		assert(!"a FIN is taken only where text is");
	}
	if (t->cfg.ops.peer_fin)
		t->cfg.ops.peer_fin(t->cfg.arg);
}

/* RFC 9293 3.10.7.4, seventh and eighth checks: the segment's text cut to
 * what is new and fits (the offered window and the caller's space), in
 * order to the caller, ahead of time to the reassembly area; then its FIN. */
static void text_process(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	if (t->state != SLUICE_TCP_ESTABLISHED && t->state != SLUICE_TCP_FIN_WAIT_1 &&
	    t->state != SLUICE_TCP_FIN_WAIT_2)
		return; /* the peer's FIN was taken already: nothing more is text */
	uint32_t seq = seg->seq, len = seg->payload_len;
	const uint8_t *p = seg->payload;
	bool fin = seg->flags & SLUICE_TCP_FIN;
	if (sluice_tcp_seq_lt(seq, t->rcv_nxt)) {
		uint32_t d = t->rcv_nxt - seq;
		if (d > len)
			fin = false; /* the FIN itself was taken already */
		p += min32(d, len), len -= min32(d, len), seq = t->rcv_nxt;
	}
	uint32_t lim = min32(rcv_wnd_cur(t), t->rcv_space);
	if (seq - t->rcv_nxt + len > lim) {
		uint32_t off = seq - t->rcv_nxt;
		len = off < lim ? lim - off : 0;
		fin = false;
	}
	if (len == 0 && !fin) {
		t->ack_now = t->ack_now || seg_len(seg) > 0; /* old or no room: say where we are */
		return;
	}
	if (t->state == SLUICE_TCP_FIN_WAIT_2)
		t->state_at = now_ms + t->cfg.fin_wait_2_ms; /* the peer is alive */
	if (seq != t->rcv_nxt) {
		out_of_order(t, seq, p, len, fin);
		return;
	}
	bool hole = t->ooo_n > 0 || t->ooo_fin;
	deliver(t, p, len);
	if (t->state == SLUICE_TCP_CLOSED)
		return; /* aborted from inside the delivery: nothing more of this segment */
	ooo_drain(t);
	if (t->state == SLUICE_TCP_CLOSED)
		return;
	if (hole)
		t->ack_now = true; /* a gap (partly) filled: RFC 5681 4.2 */
	else if (t->unacked_bytes >= 2u * t->rcv_mss)
		t->ack_now = true; /* every second full segment */
	if ((fin && t->rcv_nxt == seq + len) || (t->ooo_fin && t->ooo_n == 0 && t->rcv_nxt == t->ooo_fin_seq))
		fin_received(t, now_ms);
}

/* The bytes of an island held while the caller had no room (ooo_drain)
 * go to it once it has room again (sluice_tcp_set_rcv_space, then
 * sluice_tcp_output), rather than waiting for the peer to send them again;
 * then the peer's FIN if it waited behind them. Not from inside a delivery
 * (deliver says why), and only while text is taken (once the peer's FIN
 * is in, islands are stale: bytes it sent past its own FIN). A callback
 * may end the connection: then STEP_GONE. */
static enum step held_drain(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	if (t->delivering || t->rcv_space == 0 || t->ooo_n == 0 || sluice_tcp_seq_gt(t->ooo[0].left, t->rcv_nxt))
		return STEP_GO;
	if (t->state != SLUICE_TCP_ESTABLISHED && t->state != SLUICE_TCP_FIN_WAIT_1 &&
	    t->state != SLUICE_TCP_FIN_WAIT_2)
		return STEP_GO;
	bool moved = ooo_drain(t);
	assert(moved);
	if (t->state == SLUICE_TCP_CLOSED)
		return STEP_GONE;
	t->ack_now = true; /* a gap filled, as far as the peer can tell */
	if (t->ooo_fin && t->ooo_n == 0 && t->rcv_nxt == t->ooo_fin_seq) {
		fin_received(t, now_ms);
		if (t->state == SLUICE_TCP_CLOSED)
			return STEP_GONE; /* aborted from inside peer_fin */
	}
	return STEP_GO;
}

/* ---- segment arrival ---- */

/* RFC 9293 3.10.7.4, first check: the four cases of the acceptability
 * table. A zero window still lets the ACK of a segment at rcv_nxt through
 * (text dropped): *text_ok says whether its text may be taken. */
static bool acceptable(const struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, bool *text_ok)
{
	uint32_t wnd = rcv_wnd_cur(t), len = seg_len(seg);
	*text_ok = true;
	if (len == 0)
		return wnd == 0 ? seg->seq == t->rcv_nxt : in_window(seg->seq, t->rcv_nxt, wnd);
	if (wnd == 0) {
		*text_ok = false;
		return seg->seq == t->rcv_nxt;
	}
	return in_window(seg->seq, t->rcv_nxt, wnd) || in_window(seg->seq + len - 1, t->rcv_nxt, wnd);
}

/* PAWS (RFC 7323 5.3), the acceptability test, RST (RFC 5961 3.2) and
 * SYN (RFC 5961 4.2), then TS.Recent (RFC 7323 4.3). */
static enum step input_checks(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, bool *text_ok,
			      uint64_t now_ms)
{
	bool rst = seg->flags & SLUICE_TCP_RST;
	if (t->ts_ok && seg->has_ts && t->ts_recent_valid && !rst && sluice_tcp_seq_lt(seg->ts_val, t->ts_recent)) {
		if (now_ms - t->ts_recent_ms <= PAWS_IDLE_MS) {
			t->counters.unacceptable++;
			t->ack_now = true;
			return STEP_DROP;
		}
		t->ts_recent_valid = false;
	}
	if (!acceptable(t, seg, text_ok)) {
		t->counters.unacceptable++;
		t->ack_now = t->ack_now || !rst; /* never answer a RST */
		return STEP_DROP;
	}
	if (rst) {
		if (seg->seq != t->rcv_nxt) { /* in the window but not exact: challenge */
			t->counters.challenge_acks++;
			t->ack_now = true;
			return STEP_DROP;
		}
		end_conn(t, SLUICE_TCP_END_RESET);
		return STEP_GONE;
	}
	if (seg->flags & SLUICE_TCP_SYN) {
		t->counters.challenge_acks++;
		t->ack_now = true;
		return STEP_DROP;
	}
	if (t->ts_ok && seg->has_ts && sluice_tcp_seq_leq(seg->seq, t->last_ack_sent) &&
	    (!t->ts_recent_valid || sluice_tcp_seq_geq(seg->ts_val, t->ts_recent))) {
		t->ts_recent = seg->ts_val;
		t->ts_recent_ms = now_ms;
		t->ts_recent_valid = true;
	}
	return STEP_GO;
}

/* SYN-RECEIVED: an ACK of our SYN completes the handshake; any other ACK
 * is answered by a reset (RFC 9293 3.10.7.4, fifth check). */
static enum step syn_received_ack(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	if (!sluice_tcp_seq_gt(seg->ack, t->snd_una) || sluice_tcp_seq_gt(seg->ack, t->snd_max)) {
		emit_seg(t, seg->ack, SLUICE_TCP_RST, NULL, 0, now_ms);
		return STEP_DROP;
	}
	t->state = t->fin_queued ? SLUICE_TCP_FIN_WAIT_1 : SLUICE_TCP_ESTABLISHED;
	t->snd_wnd = (uint32_t)seg->window << t->snd_wscale;
	t->max_snd_wnd = max32(t->max_snd_wnd, t->snd_wnd);
	t->snd_wl1 = seg->seq;
	t->snd_wl2 = seg->ack;
	if (t->cfg.ops.established)
		t->cfg.ops.established(t->cfg.arg);
	return STEP_GO;
}

/* The peer's SYN options decide ours (RFC 7323, RFC 2018, RFC 6691). */
static void negotiate(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *syn, uint64_t now_ms)
{
	uint32_t peer_mss = syn->mss ? max32(syn->mss, SLUICE_TCP_MSS_MIN) : SLUICE_TCP_MSS_PEER_DEFAULT;
	t->ts_ok = syn->has_ts;
	t->sack_ok = syn->sack_permitted;
	t->wscale_ok = syn->wscale >= 0;
	t->snd_wscale = t->wscale_ok ? (uint8_t)min32((uint32_t)syn->wscale, SLUICE_TCP_WSCALE_MAX) : 0;
	t->rcv_wscale = t->wscale_ok ? t->cfg.rcv_wscale : 0;
	if (t->ts_ok) {
		t->ts_recent = syn->ts_val;
		t->ts_recent_ms = now_ms;
		t->ts_recent_valid = true;
	}
	uint32_t opt = t->ts_ok ? TS_OPTION_BYTES : 0;
	t->smss = (uint16_t)(min32(peer_mss, t->cfg.mss) - opt);
	t->rcv_mss = (uint16_t)(t->cfg.mss - opt);
	t->cwnd = initial_window(t->smss);
	t->irs = syn->seq;
	t->rcv_nxt = syn->seq + 1;
	assert(t->smss > 0 && t->rcv_mss > 0);
}

/* SYN-SENT (RFC 9293 3.10.7.3): a SYN-ACK establishes, a lone SYN is a
 * simultaneous open, a RST acknowledging our SYN refuses. */
static void syn_sent_input(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	bool has_ack = seg->flags & SLUICE_TCP_ACK;
	if (has_ack && (sluice_tcp_seq_leq(seg->ack, t->iss) || sluice_tcp_seq_gt(seg->ack, t->snd_max))) {
		if (!(seg->flags & SLUICE_TCP_RST))
			emit_seg(t, seg->ack, SLUICE_TCP_RST, NULL, 0, now_ms);
		return;
	}
	if (seg->flags & SLUICE_TCP_RST) {
		if (has_ack)
			end_conn(t, SLUICE_TCP_END_REFUSED);
		return;
	}
	if (!(seg->flags & SLUICE_TCP_SYN))
		return;
	negotiate(t, seg, now_ms);
	if (!has_ack) {
		t->state = SLUICE_TCP_SYN_RECEIVED;
		t->snd_nxt = t->iss;
		sent_at_nxt(t, xmit(t, t->iss, 0, now_ms), now_ms);
		return;
	}
	t->snd_una = seg->ack;
	t->state = SLUICE_TCP_ESTABLISHED;
	t->heard_ms = now_ms;
	t->snd_wnd = t->max_snd_wnd = seg->window; /* never scaled in a SYN */
	t->snd_wl1 = seg->seq;
	t->snd_wl2 = seg->ack;
	rtt_on_ack(t, seg, now_ms);
	t->retries = 0;
	t->rtx_at = SLUICE_TCP_TIMER_NONE;
	t->ack_now = true;
	if (t->cfg.ops.established)
		t->cfg.ops.established(t->cfg.arg);
	if (t->state != SLUICE_TCP_CLOSED) /* not refused from inside the callback */
		sluice_tcp_output(t, now_ms);
}

void sluice_tcp_input(struct sluice_tcp_tcb *t, const struct sluice_tcp_seg *seg, uint64_t now_ms)
{
	assert(t->state != SLUICE_TCP_CLOSED);
	assert(seg->saddr == t->raddr && seg->sport == t->rport && seg->daddr == t->laddr && seg->dport == t->lport);
	t->counters.segs_in++;
	if (t->state == SLUICE_TCP_SYN_SENT) {
		syn_sent_input(t, seg, now_ms);
		return;
	}
	if (t->state == SLUICE_TCP_SYN_RECEIVED && seg->seq == t->irs &&
	    (seg->flags & (SLUICE_TCP_SYN | SLUICE_TCP_ACK | SLUICE_TCP_RST)) == SLUICE_TCP_SYN) {
		xmit(t, t->iss, 0, now_ms); /* the peer's SYN again: our SYN-ACK was lost */
		return;
	}
	bool text_ok;
	enum step st = input_checks(t, seg, &text_ok, now_ms);
	if (st == STEP_GO) { /* an acceptable segment: the peer lives, the keepalive clock restarts */
		t->heard_ms = now_ms;
		t->keepalive_sent = 0;
	}
	if (st == STEP_GO && !(seg->flags & SLUICE_TCP_ACK))
		st = STEP_DROP; /* RFC 9293: no ACK, no processing */
	if (st == STEP_GO && t->state == SLUICE_TCP_SYN_RECEIVED)
		st = syn_received_ack(t, seg, now_ms);
	/* A callback (established, acked, deliver, peer_fin) may close the
	 * connection from inside (an abort: the caller refused it, or found
	 * its bytes bad): then nothing more of this segment is processed. */
	if (st == STEP_GO && t->state == SLUICE_TCP_CLOSED)
		return;
	if (st == STEP_GO)
		st = ack_process(t, seg, now_ms);
	if (st == STEP_GONE || t->state == SLUICE_TCP_CLOSED)
		return;
	if (st == STEP_GO && text_ok)
		text_process(t, seg, now_ms);
	else if (st == STEP_GO && seg_len(seg) > 0)
		t->ack_now = true; /* text refused by a zero window: say so */
	if (t->state == SLUICE_TCP_CLOSED)
		return;
	sluice_tcp_output(t, now_ms);
}

/* ---- opening ---- */

static void tcb_init(struct sluice_tcp_tcb *t, const struct sluice_tcp_config *cfg, uint32_t iss, uint64_t now_ms)
{
	assert(cfg->ops.emit && cfg->ops.deliver && cfg->ops.closed);
	assert(cfg->snd_buf_bytes > 0 && cfg->snd_buf_bytes <= SLUICE_TCP_SND_BUF_MAX &&
	       (cfg->snd_buf_bytes & (cfg->snd_buf_bytes - 1)) == 0);
	assert(cfg->ooo_buf ? cfg->ooo_buf_bytes > 0 && cfg->ooo_buf_bytes <= SLUICE_TCP_OOO_BUF_MAX &&
				      (cfg->ooo_buf_bytes & (cfg->ooo_buf_bytes - 1)) == 0
			    : cfg->ooo_buf_bytes == 0);
	assert(cfg->mss >= SLUICE_TCP_MSS_MIN && cfg->rcv_wscale <= SLUICE_TCP_WSCALE_MAX);
	assert(cfg->tso_max <= SLUICE_TCP_TSO_MAX);
	assert(cfg->rto_min_ms > 0 && cfg->rto_min_ms <= cfg->rto_initial_ms &&
	       cfg->rto_initial_ms <= cfg->rto_max_ms && cfg->rto_max_ms <= SLUICE_TCP_RTO_MAX_MS);
	assert(cfg->retries_max <= SLUICE_TCP_RETRIES_LIMIT && cfg->delack_ms > 0);
	assert(!cfg->keepalive ||
	       (cfg->keepalive_idle_ms > 0 && cfg->keepalive_idle_ms <= SLUICE_TCP_KEEPALIVE_MS_LIMIT &&
		cfg->keepalive_interval_ms > 0 && cfg->keepalive_interval_ms <= SLUICE_TCP_KEEPALIVE_MS_LIMIT &&
		cfg->keepalive_probes > 0 && cfg->keepalive_probes <= SLUICE_TCP_KEEPALIVE_PROBES_LIMIT));
	memset(t, 0, sizeof *t);
	t->cfg = *cfg;
	t->iss = t->snd_una = t->snd_nxt = t->snd_max = iss;
	t->snd_buf_seq = iss + 1;
	t->recover = iss;
	t->rcv_space = cfg->rcv_space;
	t->rto_ms = cfg->rto_initial_ms;
	t->ssthresh = SSTHRESH_INITIAL;
	t->rtx_at = t->persist_at = t->delack_at = t->state_at = t->keepalive_at = SLUICE_TCP_TIMER_NONE;
	t->heard_ms = now_ms;
}

static void send_syn(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	uint32_t len = xmit(t, t->iss, 0, now_ms);
	assert(len == 1);
	if (!t->ts_ok) { /* time the handshake (Karn: only if it is not resent) */
		t->rtt_timing = true;
		t->rtt_seq = t->iss + 1;
		t->rtt_start_ms = now_ms;
	}
	sent_at_nxt(t, len, now_ms);
}

int sluice_tcp_accept(struct sluice_tcp_tcb *t, const struct sluice_tcp_config *cfg,
		      const struct sluice_tcp_seg *syn, uint32_t iss, uint64_t now_ms)
{
	if ((syn->flags & (SLUICE_TCP_SYN | SLUICE_TCP_ACK | SLUICE_TCP_RST)) != SLUICE_TCP_SYN)
		return -1;
	tcb_init(t, cfg, iss, now_ms);
	t->laddr = syn->daddr, t->lport = syn->dport, t->raddr = syn->saddr, t->rport = syn->sport;
	t->state = SLUICE_TCP_SYN_RECEIVED;
	negotiate(t, syn, now_ms);
	t->snd_wnd = t->max_snd_wnd = syn->window; /* never scaled in a SYN */
	t->snd_wl1 = syn->seq;
	t->last_ack_sent = t->rcv_nxt;
	send_syn(t, now_ms); /* the SYN's own text, if any, is not taken: the peer resends it */
	assert(t->snd_max == iss + 1);
	return 0;
}

void sluice_tcp_connect(struct sluice_tcp_tcb *t, const struct sluice_tcp_config *cfg, uint32_t laddr,
			uint16_t lport, uint32_t raddr, uint16_t rport, uint32_t iss, uint64_t now_ms)
{
	tcb_init(t, cfg, iss, now_ms);
	t->laddr = laddr, t->lport = lport, t->raddr = raddr, t->rport = rport;
	t->state = SLUICE_TCP_SYN_SENT;
	t->smss = SLUICE_TCP_MSS_PEER_DEFAULT;
	t->rcv_mss = cfg->mss;
	send_syn(t, now_ms);
	t->rtt_timing = true; /* timestamps are only offered yet: time by the clock too */
	t->rtt_seq = iss + 1;
	t->rtt_start_ms = now_ms;
}

/* ---- the caller's calls ---- */

uint32_t sluice_tcp_send_space(const struct sluice_tcp_tcb *t)
{
	bool open = t->state == SLUICE_TCP_SYN_SENT || t->state == SLUICE_TCP_SYN_RECEIVED ||
		    t->state == SLUICE_TCP_ESTABLISHED || t->state == SLUICE_TCP_CLOSE_WAIT;
	return open && !t->fin_queued ? t->cfg.snd_buf_bytes - t->snd_len : 0;
}

uint32_t sluice_tcp_send_external(struct sluice_tcp_tcb *t, uint32_t n)
{
	assert(!t->cfg.snd_buf);
	n = min32(n, sluice_tcp_send_space(t));
	t->snd_len += n;
	assert(t->snd_len <= t->cfg.snd_buf_bytes);
	return n;
}

uint32_t sluice_tcp_send(struct sluice_tcp_tcb *t, const void *bytes, uint32_t n)
{
	assert(t->cfg.snd_buf);
	n = min32(n, sluice_tcp_send_space(t));
	if (n == 0)
		return 0;
	uint32_t size = t->cfg.snd_buf_bytes, pos = (t->snd_head + t->snd_len) & (size - 1);
	uint32_t first = min32(n, size - pos);
	memcpy(t->cfg.snd_buf + pos, bytes, first);
	memcpy(t->cfg.snd_buf, (const uint8_t *)bytes + first, n - first);
	t->snd_len += n;
	assert(t->snd_len <= size);
	return n;
}

void sluice_tcp_set_rcv_space(struct sluice_tcp_tcb *t, uint32_t bytes)
{
	uint32_t before = rcv_wnd_cur(t);
	t->rcv_space = bytes;
	uint32_t after = rcv_wnd_new(t);
	/* Tell the peer when the window opens by a segment from (nearly)
	 * closed, or by half the buffer. */
	if (after > before && ((before < t->rcv_mss && after >= t->rcv_mss) || after - before >= t->cfg.rcv_space / 2))
		t->ack_now = true;
}

int sluice_tcp_close(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	if (t->fin_queued)
		return -1;
	switch (t->state) {
	case SLUICE_TCP_SYN_SENT:
		end_conn(t, SLUICE_TCP_END_ABORTED);
		return 0;
	case SLUICE_TCP_SYN_RECEIVED: /* the FIN follows the handshake */
		t->fin_queued = true;
		return 0;
	case SLUICE_TCP_ESTABLISHED:
		t->state = SLUICE_TCP_FIN_WAIT_1;
		break;
	case SLUICE_TCP_CLOSE_WAIT:
		t->state = SLUICE_TCP_LAST_ACK;
		break;
	default:
		return -1;
	}
	t->fin_queued = true;
	sluice_tcp_output(t, now_ms);
	return 0;
}

void sluice_tcp_abort(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	switch (t->state) {
	case SLUICE_TCP_SYN_RECEIVED: case SLUICE_TCP_ESTABLISHED: case SLUICE_TCP_FIN_WAIT_1:
	case SLUICE_TCP_FIN_WAIT_2: case SLUICE_TCP_CLOSE_WAIT:
		/* snd_max, not a gone-back snd_nxt: the peer has likely seen it all */
		emit_seg(t, t->snd_max, SLUICE_TCP_RST, NULL, 0, now_ms);
		break;
	default:
		break;
	}
	end_conn(t, SLUICE_TCP_END_ABORTED);
}

/* ---- timers ---- */

uint64_t sluice_tcp_next_timer(const struct sluice_tcp_tcb *t)
{
	uint64_t a = t->rtx_at < t->persist_at ? t->rtx_at : t->persist_at;
	uint64_t b = t->delack_at < t->state_at ? t->delack_at : t->state_at;
	uint64_t c = a < b ? a : b;
	return c < t->keepalive_at ? c : t->keepalive_at;
}

/* RFC 6298 5.4-5.7 and RFC 5681 3.1: resend the oldest segment, double
 * the timeout, shrink cwnd to the loss window, and go back N; abort after
 * retries_max. ssthresh is halved on the first timeout of a loss only. */
static enum step rto_fire(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	t->rtx_at = SLUICE_TCP_TIMER_NONE;
	if (t->snd_una == t->snd_max)
		return STEP_GO;
	if (++t->retries > t->cfg.retries_max) {
		end_conn(t, SLUICE_TCP_END_TIMEOUT);
		return STEP_GONE;
	}
	t->rto_ms = min32(t->rto_ms * 2, t->cfg.rto_max_ms);
	if (t->retries == 1)
		t->ssthresh = max32((t->snd_max - t->snd_una) / 2, 2 * t->smss);
	t->cwnd = t->smss;
	t->recover = t->snd_max - 1;
	t->in_recovery = t->sack_recovery = false;
	t->sacked_n = 0; /* RFC 2018 8, RFC 6675 5.1: the peer may have reneged */
	t->dupacks = 0;
	t->rtt_timing = false;
	t->snd_nxt = t->snd_una;
	uint32_t len = resend_oldest(t, now_ms);
	t->snd_nxt += len;
	t->counters.retransmits++;
	t->rtx_at = now_ms + t->rto_ms;
	return STEP_GO;
}

/* RFC 9293 3.8.6.1: a closed window is probed with one byte of new data
 * (sent without advancing snd_nxt, so it is not in flight), forever, at a
 * backed-off interval; a small open window the sender was holding back
 * for (SWS) gets what fits instead. */
static void persist_fire(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	t->persist_at = SLUICE_TCP_TIMER_NONE;
	if (!can_send_data(t) || t->snd_nxt != t->snd_una || unsent_bytes(t) == 0)
		return;
	if (t->snd_wnd > 0) { /* not into a range the peer SACKed (going back: snd_nxt is snd_una) */
		sent_at_nxt(t, xmit(t, t->snd_nxt, min32(t->snd_wnd, sack_skip(t)), now_ms), now_ms);
		return;
	}
	uint32_t len = xmit(t, t->snd_nxt, 1, now_ms);
	assert(len == 1 || len == 2); /* the last byte takes the queued FIN along */
	if (sluice_tcp_seq_gt(t->snd_nxt + len, t->snd_max))
		t->snd_max = t->snd_nxt + len;
	t->counters.persist_probes++;
	if (t->persist_backoff < PERSIST_BACKOFF_MAX)
		t->persist_backoff++;
	t->persist_at = now_ms + persist_interval_ms(t);
}

/* RFC 1122 4.2.3.6: an idle connection is probed with a segment the peer
 * must answer with an ACK (SEG.SEQ = SND.NXT - 1: old, so unacceptable;
 * no data, see the top); keepalive_probes unanswered ones end it. The
 * conditions are checked again: the state may have moved since the timer
 * was armed (sluice_tcp_send without sluice_tcp_output). */
static enum step keepalive_fire(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	t->keepalive_at = SLUICE_TCP_TIMER_NONE; /* sluice_tcp_output arms it again */
	if (!keepalive_idle(t) || keepalive_deadline(t) > now_ms)
		return STEP_GO;
	if (t->keepalive_sent >= t->cfg.keepalive_probes) {
		end_conn(t, SLUICE_TCP_END_KEEPALIVE);
		return STEP_GONE;
	}
	emit_seg(t, t->snd_nxt - 1, SLUICE_TCP_ACK, NULL, 0, now_ms);
	t->keepalive_sent++;
	t->keepalive_sent_ms = now_ms;
	t->counters.keepalive_probes++;
	assert(t->keepalive_sent <= t->cfg.keepalive_probes);
	return STEP_GO;
}

void sluice_tcp_on_timer(struct sluice_tcp_tcb *t, uint64_t now_ms)
{
	assert(t->state != SLUICE_TCP_CLOSED);
	if (t->state_at <= now_ms) {
		assert(t->state == SLUICE_TCP_TIME_WAIT || t->state == SLUICE_TCP_FIN_WAIT_2);
		end_conn(t, t->state == SLUICE_TCP_TIME_WAIT ? SLUICE_TCP_END_ORDERLY : SLUICE_TCP_END_FIN_WAIT_2);
		return;
	}
	if (t->rtx_at <= now_ms && rto_fire(t, now_ms) == STEP_GONE)
		return;
	if (t->persist_at <= now_ms)
		persist_fire(t, now_ms);
	if (t->delack_at <= now_ms) {
		t->delack_at = SLUICE_TCP_TIMER_NONE;
		t->ack_now = true;
	}
	if (t->keepalive_at <= now_ms && keepalive_fire(t, now_ms) == STEP_GONE)
		return;
	sluice_tcp_output(t, now_ms);
}

/* ---- without a connection ---- */

bool sluice_tcp_reset_for(const struct sluice_tcp_seg *in, struct sluice_tcp_seg *rst)
{
	if (in->flags & SLUICE_TCP_RST)
		return false;
	memset(rst, 0, sizeof *rst);
	rst->saddr = in->daddr, rst->daddr = in->saddr, rst->sport = in->dport, rst->dport = in->sport;
	rst->wscale = -1;
	if (in->flags & SLUICE_TCP_ACK) {
		rst->seq = in->ack;
		rst->flags = SLUICE_TCP_RST;
	} else {
		rst->ack = in->seq + seg_len(in);
		rst->flags = SLUICE_TCP_RST | SLUICE_TCP_ACK;
	}
	return true;
}

void sluice_tcp_config_default(struct sluice_tcp_config *cfg)
{
	memset(cfg, 0, sizeof *cfg);
	cfg->mss = SLUICE_TCP_MSS_DEFAULT;
	cfg->rcv_wscale = SLUICE_TCP_WSCALE_DEFAULT;
	cfg->rcv_space = 65535;
	cfg->rto_min_ms = SLUICE_TCP_RTO_MIN_MS_DEFAULT;
	cfg->rto_initial_ms = SLUICE_TCP_RTO_INITIAL_MS;
	cfg->rto_max_ms = SLUICE_TCP_RTO_MAX_MS;
	cfg->retries_max = SLUICE_TCP_RETRIES_MAX_DEFAULT;
	cfg->delack_ms = SLUICE_TCP_DELACK_MS_DEFAULT;
	cfg->msl_ms = SLUICE_TCP_MSL_MS_DEFAULT;
	cfg->fin_wait_2_ms = SLUICE_TCP_FIN_WAIT_2_MS_DEFAULT;
	cfg->keepalive = true;
	cfg->keepalive_idle_ms = SLUICE_TCP_KEEPALIVE_IDLE_MS_DEFAULT;
	cfg->keepalive_interval_ms = SLUICE_TCP_KEEPALIVE_INTERVAL_MS_DEFAULT;
	cfg->keepalive_probes = SLUICE_TCP_KEEPALIVE_PROBES_DEFAULT;
}

uint32_t sluice_tcp_rto_ms(const struct sluice_tcp_tcb *t) { return t->rto_ms; }

const char *sluice_tcp_state_name(enum sluice_tcp_state state)
{
	static const char *const names[] = {
		[SLUICE_TCP_CLOSED] = "CLOSED", [SLUICE_TCP_SYN_SENT] = "SYN-SENT",
		[SLUICE_TCP_SYN_RECEIVED] = "SYN-RECEIVED", [SLUICE_TCP_ESTABLISHED] = "ESTABLISHED",
		[SLUICE_TCP_FIN_WAIT_1] = "FIN-WAIT-1", [SLUICE_TCP_FIN_WAIT_2] = "FIN-WAIT-2",
		[SLUICE_TCP_CLOSE_WAIT] = "CLOSE-WAIT", [SLUICE_TCP_CLOSING] = "CLOSING",
		[SLUICE_TCP_LAST_ACK] = "LAST-ACK", [SLUICE_TCP_TIME_WAIT] = "TIME-WAIT",
	};
	return (unsigned)state < sizeof names / sizeof names[0] ? names[state] : "?";
}

const char *sluice_tcp_reason_name(enum sluice_tcp_close_reason reason)
{
	static const char *const names[] = {
		[SLUICE_TCP_END_ORDERLY] = "orderly", [SLUICE_TCP_END_RESET] = "reset by peer",
		[SLUICE_TCP_END_REFUSED] = "refused", [SLUICE_TCP_END_ABORTED] = "aborted",
		[SLUICE_TCP_END_TIMEOUT] = "retransmissions exhausted",
		[SLUICE_TCP_END_FIN_WAIT_2] = "no FIN from the peer",
		[SLUICE_TCP_END_KEEPALIVE] = "keepalive unanswered",
	};
	_Static_assert(sizeof names / sizeof names[0] == SLUICE_TCP_END_REASONS, "a name for every reason");
	return (unsigned)reason < sizeof names / sizeof names[0] ? names[reason] : "?";
}
