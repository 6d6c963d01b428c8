#!/usr/bin/env python3
# Hand-made seeds for tests/fuzz/fuzz_stack_tcp, written as hex files into
# the given directory (tests/fuzz/seeds-tcp, see its README). Each is a step
# sequence in the target's input layout (fuzz_stack_tcp.c: configure,
# open_conn, step, peer_segment): steps from the front, 0xff ending them,
# the callbacks' choices from the back (the first one used is the last
# byte; 0 is the DPDK transport's own behaviour). Run again after changing
# the layout:
#   python3 tests/fuzz/tcp_seeds.py tests/fuzz/seeds-tcp
import os
import struct
import sys

# Sequence number choices: 0 rcv_nxt, 1 rcv_nxt + i8, 2 rcv_nxt + u16,
# 3 rcv_nxt - u16, 4 raw u32, 5 the peer's highest sent + i8,
# 6 the window's right edge + i8, 7 rcv_nxt + u8 * 64.
SEQ_RCV_NXT, SEQ_AHEAD, SEQ_PEER_NEXT = 0, 2, 5
# ACK number choices: 0 snd_una, 1 snd_nxt, 2 snd_max, 3 snd_una + i8,
# 4 snd_max + i8, 5 snd_una + u16 % in flight (partial), 6 raw u32,
# 7 snd_una - u16.
ACK_UNA, ACK_NXT, ACK_MAX, ACK_PARTIAL = 0, 1, 2, 5

OUTPUT, PAUSE, RESUME, CLOSE = bytes([11]), bytes([12]), bytes([13]), bytes([14])
ABORT = bytes([15, 0])
END = bytes([0xff])


def u16(v):
    return struct.pack('<H', v & 0xffff)


def u32(v):
    return struct.pack('<I', v & 0xffffffff)


def config(c=0, rcv_space=None, keepalive=None, tsoff=0x12345678):
    """The configuration byte (fuzz_stack_tcp.c, configure) and its operands."""
    b = bytes([c])
    if c & 0x20:
        b += u16(rcv_space)
    if c & 8:
        b += bytes(keepalive)
    return b + u32(tsoff)


def syn(ts=True, sack=True, ws=7, mss=1460, irs=0x50000000, iss=0x10000000, win=64240, tsval=1000):
    o = (1 if ts else 0) | (2 if sack else 0) | (4 if ws is not None else 0) | (8 if mss else 0)
    b = bytes([o, ws or 0]) + u32(irs) + u32(iss) + u16(win)
    if ts:
        b += u32(tsval)
    if mss:
        b += u16(mss)
    return b


def sacked(first, segs):
    """A SACK block of whole segments (sack_choice mode 1): from snd_una +
    first segments, segs long (1..8)."""
    return bytes([1, first, segs - 1])


def seg(fin=False, psh=False, seq=SEQ_RCV_NXT, seq_arg=b'', ack=ACK_MAX, ack_arg=b'', win=None, length=0,
        ts=True, sack=None):
    """A peer segment (opcode 0); win None keeps the peer's last window;
    sack: up to 4 blocks (sacked())."""
    f = (1 if fin else 0) | (2 if psh else 0)
    m = seq | ack << 3 | (0x40 if ts else 0) | (0x80 if sack else 0)
    b = bytes([0, f, m]) + seq_arg + ack_arg
    if win is None:
        b += bytes([0])
    elif win == 0:
        b += bytes([2])
    else:
        b += bytes([1]) + u16(win)
    if length == 0:
        b += bytes([0])
    elif length < 256:
        b += bytes([1, length])
    else:
        b += bytes([2]) + u16(length)
    if ts:
        b += bytes([0])  # TSval from the peer's clock, TSecr our last TSval
    if sack:
        b += bytes([len(sack) - 1]) + b''.join(sack)
    return b


def data(n):
    return seg(psh=True, seq=SEQ_PEER_NEXT, seq_arg=b'\0', ack=ACK_NXT, length=n)


def send(n, output=True):
    """Queue n bytes (0 without output: fill the send ring)."""
    if output:
        return bytes([10, 1, n]) if n < 256 else bytes([10, 0]) + u16(n)
    return bytes([9, 1]) + u16(n) if n else bytes([9, 0])


def clock(ms):
    return bytes([6, ms])


def to_timer():
    return bytes([7, 0])


def clock_long(v, shift):
    return bytes([8]) + u16(v) + bytes([shift])


HANDSHAKE = seg(ack=ACK_MAX)
ACK_ALL = seg(ack=ACK_MAX)

SEEDS = {
    # Handshake, a request, a response, the peer's FIN, ours (the close in
    # peer_fin), its ACK: orderly.
    'request-response-close': (
        config() + syn() + HANDSHAKE + data(1000) + send(200) + ACK_ALL +
        seg(fin=True, seq=SEQ_PEER_NEXT, seq_arg=b'\0') + ACK_ALL, [0] * 5),
    # The smallest MSS, 256 KiB queued, partial ACKs, timeouts, then all.
    'small-mss-bulk-rto': (
        config(c=1) + syn(mss=88) + HANDSHAKE + send(0, output=False) + OUTPUT +
        seg(ack=ACK_PARTIAL, ack_arg=u16(3000)) + seg(ack=ACK_PARTIAL, ack_arg=u16(9000)) + to_timer() +
        to_timer() + ACK_ALL + OUTPUT + ACK_ALL + clock(50) + ACK_ALL, [0] * 16),
    # An island, then the gap filled by a delivery that pauses; resumed, the
    # peer sends the island again.
    'island-then-pause-resume': (
        config() + syn() + HANDSHAKE + seg(psh=True, seq=SEQ_AHEAD, seq_arg=u16(2000), ack=ACK_NXT, length=1000) +
        seg(psh=True, ack=ACK_NXT, length=2000) + clock(10) + RESUME + seg(psh=True, ack=ACK_NXT, length=1000) +
        data(500), [0, 9, 0, 0, 0, 0]),
    # Refused inside established, the handshake's ACK carrying data.
    'refused-in-established': (config() + syn() + seg(psh=True, length=10), [7]),
    # An abort inside a delivery, an island behind it and a FIN.
    'abort-in-delivery': (
        config() + syn() + HANDSHAKE + seg(psh=True, seq=SEQ_AHEAD, seq_arg=u16(2000), ack=ACK_NXT, length=1000) +
        seg(fin=True, psh=True, ack=ACK_NXT, length=2000), [0, 14]),
    # The peer's window closed: persist probes, then it opens.
    'zero-window-persist': (
        config() + syn() + seg(win=0) + send(3000) + to_timer() + to_timer() + to_timer() + seg(win=512) + ACK_ALL,
        [0] * 8),
    # Short keepalive with one probe, no options: the end by keepalive.
    'keepalive-end': (
        config(c=8, keepalive=[4, 2, 1]) + syn(ts=False, sack=False, ws=None, mss=0) + seg(ts=False) +
        clock_long(100, 0) + to_timer() + to_timer() + to_timer(), [0] * 4),
    # No window scaling, a 3001-byte receive space, an answer from inside a
    # delivery, a reader keeping its bytes, our close, TIME-WAIT.
    'small-space-answers': (
        config(c=0xa0, rcv_space=3000) + syn(ws=None) + HANDSHAKE + data(2000) + data(2000) + data(2000) +
        OUTPUT + CLOSE + ACK_ALL + seg(fin=True, ack=ACK_MAX) + to_timer(), [0, 0, 11, 50, 0, 15, 0, 0, 0]),
    # 256 KiB queued, the initial window out, segments 1, 4 and 7 lost: the
    # peer's duplicate ACKs SACK the rest (a SACK recovery resending the
    # three holes), then partial ACKs as the resends arrive, then all.
    'sack-recovery': (
        config() + syn() + HANDSHAKE + send(0, output=False) + OUTPUT +
        seg(ack=ACK_PARTIAL, ack_arg=u16(1448)) +
        seg(ack=ACK_UNA, sack=[sacked(1, 2)]) + seg(ack=ACK_UNA, sack=[sacked(4, 2), sacked(1, 2)]) +
        seg(ack=ACK_UNA, sack=[sacked(4, 2), sacked(1, 2)]) + seg(ack=ACK_UNA, sack=[sacked(7, 2), sacked(4, 2),
                                                                                      sacked(1, 2)]) +
        seg(ack=ACK_UNA, sack=[sacked(7, 2), sacked(4, 2), sacked(1, 2)]) +
        seg(ack=ACK_PARTIAL, ack_arg=u16(3 * 1448), sack=[sacked(1, 2), sacked(4, 2)]) +
        seg(ack=ACK_PARTIAL, ack_arg=u16(3 * 1448), sack=[sacked(1, 2)]) + ACK_ALL + OUTPUT + ACK_ALL,
        [0] * 16),
    # A SACK recovery whose resend is lost: the timeout empties the
    # scoreboard; the SACK blocks after it are skipped going back N.
    'sack-then-timeout': (
        config() + syn() + HANDSHAKE + send(20000) + seg(ack=ACK_UNA, sack=[sacked(1, 3)]) +
        seg(ack=ACK_UNA, sack=[sacked(1, 4)]) + seg(ack=ACK_UNA, sack=[sacked(1, 5)]) + to_timer() +
        seg(ack=ACK_PARTIAL, ack_arg=u16(1448), sack=[sacked(2, 3)]) + seg(ack=ACK_UNA, sack=[sacked(2, 3)]) +
        ACK_ALL, [0] * 12),
    # Sequence numbers across 2^32 both ways, a jumbo MSS.
    'wrap-jumbo': (
        config(c=3) + syn(irs=0xfffff000, iss=0xffffff00, mss=8960) + HANDSHAKE + data(4096) + data(4096) +
        send(20000) + seg(ack=ACK_PARTIAL, ack_arg=u16(10000)) + ACK_ALL, [0] * 8),
}


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, (steps, choices) in SEEDS.items():
        with open(os.path.join(out, name + '.hex'), 'w') as f:
            f.write((steps + END + bytes(reversed(choices))).hex() + '\n')


if __name__ == '__main__':
    main()
