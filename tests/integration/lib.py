"""Shared helpers for Sluice's integration tests (Python 3 standard library only).

Each test starts its own broker on a free loopback port with a fresh data directory
and stops it at the end. By default the broker is Sluice (`SLUICE_BROKER`, else
build/dataplane/sluice-broker); with SLUICE_TEST_TARGET=kafka the same test runs
against the reference Apache Kafka started by tests/reference/kafka-ref.sh, which
is how the tests themselves are proven correct.

Environment:
  SLUICE_TEST_TARGET   sluice (default) | kafka
  SLUICE_BROKER        path of sluice-broker
  SLUICE_RDK_CLIENT    path of sluice-rdk-client
  SLUICE_KAFKA_REF     path of kafka-ref.sh
  SLUICE_TEST_KEEP=1   keep temp dirs (data, logs) after the test
  SLUICE_TEST_SEED     seed for tests that pick random moments

Also: a minimal Kafka wire-protocol encoder/decoder (request framing, record batch
v2 with CRC-32C, Produce, Fetch, Metadata, ApiVersions) for tests that must speak
the protocol directly.
"""
import atexit
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TARGET = os.environ.get("SLUICE_TEST_TARGET", "sluice")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def skip(why):
    log(f"SKIP: {why}")
    sys.exit(SKIP)


class TestFailure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise TestFailure(what)


# --------------------------------------------------------------------- tools

def _first_existing(*paths):
    for p in paths:
        if p and os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def broker_path():
    """SLUICE_BROKER if set (meson sets it), else build/dataplane/sluice-broker."""
    env = os.environ.get("SLUICE_BROKER")
    return _first_existing(env or os.path.join(ROOT, "build", "dataplane", "sluice-broker"))


def rdk_client_path(required=True):
    env = os.environ.get("SLUICE_RDK_CLIENT")
    p = _first_existing(env or os.path.join(ROOT, "build", "tests", "clients", "sluice-rdk-client"))
    if not p and required:
        skip("sluice-rdk-client not built (needs librdkafka-dev)")
    return p


def kcat_path(required=True):
    p = shutil.which("kcat") or shutil.which("kafkacat")
    if not p and required:
        skip("kcat not installed (tests/install-deps.sh)")
    return p


def kafka_ref_path():
    return os.environ.get("SLUICE_KAFKA_REF") or os.path.join(ROOT, "tests", "reference", "kafka-ref.sh")


def free_port(avoid=()):
    for _ in range(50):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        if port not in avoid and port + 1 < 65536:
            return port
    raise RuntimeError("no free port")


def free_port_pair(avoid=()):
    """A port p such that p and p + 1 can both be bound now (a controller's listener and
    its Raft port): each tried with a bind, not a connect, since a port in use by a
    connection or in TIME_WAIT answers no connect yet cannot be bound."""
    for _ in range(100):
        p = free_port(avoid)
        socks = []
        try:
            for q in (p, p + 1):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(s)
                s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port pair")


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_port(port, timeout=30.0, proc_alive=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if port_open(port):
            return True
        if proc_alive is not None and not proc_alive():
            return False
        time.sleep(0.05)
    return False


def run(cmd, timeout, **kw):
    """subprocess.run with a hard time-out; returns CompletedProcess (text)."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    try:
        return subprocess.run(cmd, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as e:
        raise TestFailure(f"command timed out after {timeout}s: {' '.join(map(str, cmd))}") from e


# --------------------------------------------------------------------- broker

_live_brokers = []


def _cleanup_all():
    for b in list(_live_brokers):
        try:
            b.stop(quiet=True)
        except Exception:  # noqa: BLE001 - best effort at exit
            pass


def _on_signal(sig, frame):
    # meson sends SIGTERM on time-out: stop our broker before dying.
    _cleanup_all()
    sys.exit(128 + sig)


atexit.register(_cleanup_all)
signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)


class Broker:
    """One broker (Sluice or reference Kafka) on 127.0.0.1:<free port>.

    props: extra broker properties (Kafka names), e.g. {"num.partitions": 6}.
    """

    BASE_PROPS = {
        "num.partitions": 1,
        "auto.create.topics.enable": "true",
    }

    def __init__(self, name, props=None):
        self.name = name
        self.target = TARGET
        self.tmp = tempfile.mkdtemp(prefix=f"sluice-it-{name}-")
        self.datadir = os.path.join(self.tmp, "data")
        os.makedirs(self.datadir)
        self.port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.props = dict(self.BASE_PROPS)
        self.props.update(props or {})
        self.proc = None
        self.pid = None
        self.logfile = os.path.join(self.tmp, "broker.log")
        self.starts = 0
        if self.target == "kafka":
            self.ref = kafka_ref_path()
            if not shutil.which("java"):
                skip("java not installed (tests/install-deps.sh)")
            cache = os.environ.get("SLUICE_CACHE") or os.path.expanduser("~/.cache/sluice")
            ver = os.environ.get("KAFKA_VERSION", "*")
            import glob
            if not shutil.which("mvn") and not glob.glob(os.path.join(cache, f"kafka-{ver}", "lib", ".complete")):
                skip("reference Kafka not cached and mvn not installed (tests/install-deps.sh)")
            self.controller_port = free_port(avoid=(self.port,))
        elif self.target == "sluice":
            self.exe = broker_path()
            if not self.exe:
                skip("sluice-broker not built yet (set SLUICE_BROKER or SLUICE_TEST_TARGET=kafka)")
        else:
            raise SystemExit(f"SLUICE_TEST_TARGET must be sluice or kafka, not {self.target}")

    # -- lifecycle
    def start(self, timeout=None):
        if self.target == "kafka":
            self._start_kafka(timeout or 120)
        else:
            self._start_sluice(timeout or 30)
        if self not in _live_brokers:
            _live_brokers.append(self)
        self.starts += 1
        # A listening port is not yet a working broker: wait for ApiVersions.
        deadline = time.monotonic() + (timeout or 60)
        while True:
            try:
                with Conn(self.port, timeout=5) as c:
                    c.api_versions()
                break
            except (OSError, ProtocolError):
                if time.monotonic() > deadline or not self.alive():
                    self._dump_log()
                    raise TestFailure(f"{self.target} broker does not answer ApiVersions on {self.port}")
                time.sleep(0.1)
        log(f"{self.target} broker up on {self.bootstrap} pid {self.pid} (start #{self.starts})")
        return self

    def _start_sluice(self, timeout):
        cfg = os.path.join(self.tmp, "server.properties")
        base = {
            "node.id": 1,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": self.datadir,
        }
        with open(cfg, "w") as f:
            for k, v in base.items():
                f.write(f"{k}={v}\n")
        cmd = [self.exe, cfg]
        for k, v in self.props.items():
            cmd += ["--override", f"{k}={v}"]
        out = open(self.logfile, "ab")
        self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        out.close()
        self.pid = self.proc.pid
        if not wait_port(self.port, timeout, proc_alive=self.alive):
            self._dump_log()
            raise TestFailure(f"sluice-broker did not listen on {self.port} within {timeout}s "
                              f"(exit {self.proc.poll()})")

    def _start_kafka(self, timeout):
        env = dict(os.environ, KAFKA_CONTROLLER_PORT=str(self.controller_port),
                   KAFKA_START_TIMEOUT=str(int(timeout)))
        kv = [f"{k}={v}" for k, v in self.props.items() if k not in ("log.dirs", "node.id")]
        verb = "start" if self.starts == 0 else "restart"
        args = [self.ref, verb, str(self.port), self.datadir] + (kv if verb == "start" else [])
        with open(self.logfile, "ab") as out:
            r = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, env=env,
                               timeout=timeout + 240)
        if r.returncode != 0:
            self._dump_log()
            raise TestFailure(f"kafka-ref.sh {verb} failed ({r.returncode})")
        with open(os.path.join(self.datadir, "kafka.pid")) as f:
            self.pid = int(f.read().strip())

    def alive(self):
        if self.target == "sluice":
            return self.proc is not None and self.proc.poll() is None
        if self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        # a zombie is not alive
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def stop(self, quiet=False, timeout=30):
        """SIGTERM and wait. Returns the exit status (sluice) or 0 (kafka); raises
        TestFailure if the broker needed SIGKILL (unless quiet)."""
        if self in _live_brokers:
            _live_brokers.remove(self)
        if self.target == "kafka":
            if self.pid is not None:
                subprocess.run([self.ref, "stop", self.datadir], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=timeout + 30)
                self.pid = None
            return 0
        if self.proc is None:
            return 0
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                if not quiet:
                    raise TestFailure(f"sluice-broker ignored SIGTERM for {timeout}s")
                return -9
        self.proc = None
        if rc != 0 and not quiet:
            raise TestFailure(f"sluice-broker exited {rc} on SIGTERM (want 0)")
        return rc

    def kill9(self):
        log(f"kill -9 {self.target} broker pid {self.pid}")
        if self.target == "kafka":
            subprocess.run([self.ref, "kill9", self.datadir], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)
            self.pid = None
        elif self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self in _live_brokers:
            _live_brokers.remove(self)

    def restart(self, timeout=None):
        """Start again on the same port and data directory."""
        if self.alive():
            self.stop()
        return self.start(timeout)

    def log_tail(self, n=40):
        try:
            with open(self.logfile, "rb") as f:
                lines = f.read().decode(errors="replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def _dump_log(self):
        tail = self.log_tail()
        if self.target == "kafka":
            try:
                with open(os.path.join(self.datadir, "kafka.out"), "rb") as f:
                    tail += "\n" + "\n".join(f.read().decode(errors="replace").splitlines()[-40:])
            except OSError:
                pass
        if tail:
            log(f"--- last lines of the {self.target} broker log ---\n{tail}\n---")

    def cleanup(self, failed=False):
        if failed:
            self._dump_log()
        if self.alive():
            self.stop(quiet=True)
        if os.environ.get("SLUICE_TEST_KEEP") or failed:
            log(f"kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, et, ev, tb):
        self.cleanup(failed=et is not None)
        return False


def main(test_fn):
    """Runs test_fn() and maps the outcome to an exit status (0 ok, 1 fail, 77 skip)."""
    t0 = time.monotonic()
    try:
        test_fn()
    except TestFailure as e:
        log(f"FAIL: {e}")
        log(f"0 passed, 1 failed ({time.monotonic() - t0:.1f}s, target {TARGET})")
        sys.exit(1)
    except Exception as e:  # noqa: BLE001 - any other error is a failure too
        import traceback
        traceback.print_exc(file=sys.stdout)
        log(f"FAIL: {type(e).__name__}: {e}")
        log(f"0 passed, 1 failed ({time.monotonic() - t0:.1f}s, target {TARGET})")
        sys.exit(1)
    log(f"PASS ({time.monotonic() - t0:.1f}s, target {TARGET})")
    sys.exit(0)


def rng():
    seed = os.environ.get("SLUICE_TEST_SEED")
    seed = int(seed) if seed else random.SystemRandom().randrange(1 << 30)
    log(f"random seed {seed} (repeat with SLUICE_TEST_SEED={seed})")
    return random.Random(seed)


# --------------------------------------------------------------------- wire protocol

class ProtocolError(Exception):
    pass


class ConnectionClosed(ProtocolError):
    pass


def _crc32c_table():
    poly = 0x82F63B78
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _CRC32C
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def uvarint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n):  # zigzag
    return uvarint((n << 1) ^ (n >> 63))


class Enc:
    def __init__(self):
        self.b = bytearray()

    def i8(self, v): self.b += struct.pack(">b", v); return self
    def i16(self, v): self.b += struct.pack(">h", v); return self
    def i32(self, v): self.b += struct.pack(">i", v); return self
    def i64(self, v): self.b += struct.pack(">q", v); return self
    def raw(self, v): self.b += v; return self
    def uv(self, v): self.b += uvarint(v); return self

    def string(self, s, flex=False):
        if s is None:
            return self.uv(0) if flex else self.i16(-1)
        d = s.encode() if isinstance(s, str) else s
        if flex:
            self.uv(len(d) + 1)
        else:
            self.i16(len(d))
        self.b += d
        return self

    def bytes_(self, d, flex=False):
        if d is None:
            return self.uv(0) if flex else self.i32(-1)
        if flex:
            self.uv(len(d) + 1)
        else:
            self.i32(len(d))
        self.b += d
        return self

    def array_len(self, n, flex=False):
        if n is None:
            return self.uv(0) if flex else self.i32(-1)
        return self.uv(n + 1) if flex else self.i32(n)

    def tags(self):
        return self.uv(0)

    def done(self):
        return bytes(self.b)


class Dec:
    def __init__(self, data):
        self.d = data
        self.o = 0

    def _take(self, n):
        if self.o + n > len(self.d):
            raise ProtocolError(f"response truncated at {self.o} (+{n} of {len(self.d)})")
        v = self.d[self.o:self.o + n]
        self.o += n
        return v

    def i8(self): return struct.unpack(">b", self._take(1))[0]
    def i16(self): return struct.unpack(">h", self._take(2))[0]
    def i32(self): return struct.unpack(">i", self._take(4))[0]
    def u32(self): return struct.unpack(">I", self._take(4))[0]
    def i64(self): return struct.unpack(">q", self._take(8))[0]

    def uv(self):
        shift = n = 0
        while True:
            b = self._take(1)[0]
            n |= (b & 0x7F) << shift
            if not b & 0x80:
                return n
            shift += 7
            if shift > 63:
                raise ProtocolError("varint too long")

    def vi(self):
        n = self.uv()
        return (n >> 1) ^ -(n & 1)

    def string(self, flex=False):
        n = self.uv() - 1 if flex else self.i16()
        return None if n < 0 else self._take(n).decode(errors="replace")

    def string_raw(self, flex=False):
        """A string as the bytes on the wire (NULs and all), None for null."""
        n = self.uv() - 1 if flex else self.i16()
        return None if n < 0 else bytes(self._take(n))

    def bytes_(self, flex=False):
        n = self.uv() - 1 if flex else self.i32()
        return None if n < 0 else self._take(n)

    def array_len(self, flex=False):
        return self.uv() - 1 if flex else self.i32()

    def tags(self):
        for _ in range(self.uv()):
            self.uv()
            self._take(self.uv())

    def remaining(self):
        return len(self.d) - self.o


def frame(payload):
    return struct.pack(">i", len(payload)) + payload


def request_header(api_key, version, corr, client_id="sluice-it", flexible=False):
    e = Enc().i16(api_key).i16(version).i32(corr).string(client_id)
    if flexible:
        e.tags()
    return e.done()


class Conn:
    """One blocking connection with a timeout on every operation."""

    def __init__(self, port, timeout=10.0, host="127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.corr = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()
        return False

    def send(self, data):
        self.sock.sendall(data)

    def recv_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionClosed(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self):
        n = struct.unpack(">i", self.recv_exact(4))[0]
        if n < 4 or n > 256 << 20:
            raise ProtocolError(f"bad response length {n}")
        return self.recv_exact(n)

    def request(self, api_key, version, body, flexible_req=False, flexible_resp=None, client_id="sluice-it"):
        """Sends one request, returns a Dec positioned after the response header."""
        self.corr += 1
        corr = self.corr
        self.send(frame(request_header(api_key, version, corr, client_id, flexible=flexible_req) + body))
        d = Dec(self.recv_frame())
        got = d.i32()
        if got != corr:
            raise ProtocolError(f"correlation id {got}, expected {corr}")
        if flexible_resp is None:
            flexible_resp = flexible_req and api_key != 18  # ApiVersions: header v0 always
        if flexible_resp:
            d.tags()
        return d

    # -- APIs
    def api_versions(self, version=0):
        flex = version >= 3
        body = Enc()
        if flex:
            body.string("sluice-it", True).string("1.0", True).tags()
        d = self.request(18, version, body.done(), flexible_req=flex, flexible_resp=False)
        err = d.i16()
        n = d.array_len(flex)
        keys = {}
        for _ in range(max(n, 0)):
            k, lo, hi = d.i16(), d.i16(), d.i16()
            if flex:
                d.tags()
            keys[k] = (lo, hi)
        if err:
            raise ProtocolError(f"ApiVersions error {err}")
        return keys

    def metadata(self, topics, auto_create=True, version=4):
        body = Enc()
        if topics is None:
            body.array_len(-1 if version >= 1 else 0)
        else:
            body.array_len(len(topics))
            for t in topics:
                body.string(t)
        if version >= 4:
            body.i8(1 if auto_create else 0)
        d = self.request(3, version, body.done())
        if version >= 3:
            d.i32()  # throttle
        brokers = []
        for _ in range(d.array_len()):
            node, host, port = d.i32(), d.string(), d.i32()
            if version >= 1:
                d.string()  # rack
            brokers.append((node, host, port))
        if version >= 2:
            d.string()  # cluster id
        if version >= 1:
            d.i32()  # controller
        out = {}
        for _ in range(d.array_len()):
            terr, name = d.i16(), d.string()
            if version >= 1:
                d.i8()
            parts = {}
            for _ in range(d.array_len()):
                perr, idx, leader = d.i16(), d.i32(), d.i32()
                if version >= 7:
                    d.i32()
                for _ in range(d.array_len()):
                    d.i32()
                for _ in range(d.array_len()):
                    d.i32()
                if version >= 5:
                    for _ in range(d.array_len()):
                        d.i32()
                parts[idx] = (perr, leader)
            out[name] = (terr, parts)
        return brokers, out

    def ensure_topic(self, topic, timeout=30.0):
        """Auto-creates topic through Metadata and waits until every partition has a
        leader. Returns the partition count."""
        deadline = time.monotonic() + timeout
        while True:
            _, topics = self.metadata([topic])
            terr, parts = topics.get(topic, (-1, {}))
            if terr == 0 and parts and all(p[0] == 0 and p[1] >= 0 for p in parts.values()):
                return len(parts)
            if time.monotonic() > deadline:
                raise TestFailure(f"topic {topic} not ready: error {terr}, partitions {parts}")
            time.sleep(0.2)

    def produce(self, topic, partition, records_blob, version=3, acks=-1, timeout_ms=10000):
        """Returns (error_code, base_offset, error_message or None)."""
        flex = version >= 9
        e = Enc()
        if version >= 3:
            e.string(None, flex)  # transactional id
        e.i16(acks).i32(timeout_ms)
        e.array_len(1, flex).string(topic, flex)
        e.array_len(1, flex).i32(partition).bytes_(records_blob, flex)
        if flex:
            e.tags().tags().tags()  # partition, topic, request
        d = self.request(0, version, e.done(), flexible_req=flex)
        if acks == 0:
            return None
        res = None
        for _ in range(d.array_len(flex)):
            d.string(flex)
            for _ in range(d.array_len(flex)):
                _idx, err, base = d.i32(), d.i16(), d.i64()
                msg = None
                if version >= 2:
                    d.i64()
                if version >= 5:
                    d.i64()
                if version >= 8:
                    for _ in range(d.array_len(flex)):
                        d.i32()
                        d.string(flex)
                        if flex:
                            d.tags()
                    msg = d.string(flex)
                if flex:
                    d.tags()
                res = (err, base, msg)
            if flex:
                d.tags()
        return res

    def fetch(self, topic, partition, offset, max_bytes=1 << 20, version=4, max_wait_ms=100):
        """Returns (error_code, high_watermark, records_blob)."""
        e = Enc().i32(-1).i32(max_wait_ms).i32(1).i32(max_bytes).i8(0)
        e.array_len(1).string(topic).array_len(1).i32(partition).i64(offset)
        if version >= 5:
            e.i64(-1)
        e.i32(max_bytes)
        d = self.request(1, version, e.done())
        d.i32()  # throttle
        res = None
        for _ in range(d.array_len()):
            d.string()
            for _ in range(d.array_len()):
                _idx, err, hw = d.i32(), d.i16(), d.i64()
                d.i64()  # LSO
                if version >= 5:
                    d.i64()
                n = d.array_len()
                for _ in range(max(n, 0)):
                    d.i64()
                    d.i64()
                res = (err, hw, d.bytes_() or b"")
        return res


def record_batch(records, base_ts=None, codec=0, base_offset=0, corrupt_crc=False,
                 count_override=None, magic=2, producer_id=-1, producer_epoch=-1, base_sequence=-1):
    """records: list of (key bytes|None, value bytes|None, [(hk, hv)]). Uncompressed
    records; codec only sets the attribute bits (for negative tests). producer_id,
    producer_epoch, base_sequence: an idempotent producer's batch (InitProducerId)."""
    if base_ts is None:
        base_ts = int(time.time() * 1000)
    recs = bytearray()
    for i, (k, v, hdrs) in enumerate(records):
        r = bytearray()
        r += b"\x00"                      # attributes
        r += varint(0)                    # timestamp delta
        r += varint(i)                    # offset delta
        r += varint(-1) if k is None else varint(len(k)) + k
        r += varint(-1) if v is None else varint(len(v)) + v
        r += varint(len(hdrs))
        for hk, hv in hdrs:
            r += varint(len(hk)) + hk
            r += varint(-1) if hv is None else varint(len(hv)) + hv
        recs += varint(len(r)) + r
    count = len(records) if count_override is None else count_override
    after_crc = (struct.pack(">hiqqqhii", codec & 7, len(records) - 1, base_ts, base_ts, producer_id,
                             producer_epoch, base_sequence, count) + bytes(recs))
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    body = struct.pack(">ibI", -1, magic, crc) + after_crc
    return struct.pack(">qi", base_offset, len(body)) + body


def parse_batches(blob):
    """Yields dicts for each record batch in a fetch response's records blob
    (header fields only; a trailing partial batch is ignored)."""
    o = 0
    while o + 61 <= len(blob):
        base, length = struct.unpack_from(">qi", blob, o)
        if o + 12 + length > len(blob):
            break
        ple, magic, crc = struct.unpack_from(">ibI", blob, o + 12)
        attrs, lod, bts, mts, pid, epoch, seq, count = struct.unpack_from(">hiqqqhii", blob, o + 21)
        yield {
            "base_offset": base, "length": length, "magic": magic, "crc": crc,
            "crc_ok": crc32c(blob[o + 21:o + 12 + length]) == crc,
            "attributes": attrs, "codec": attrs & 7, "last_offset_delta": lod,
            "count": count, "producer_id": pid, "producer_epoch": epoch, "base_sequence": seq,
            "leader_epoch": ple, "raw": blob[o:o + 12 + length],
        }
        o += 12 + length


def decode_records(batch_raw):
    """Decodes the records of an uncompressed batch: [(offset, key, value, headers)]."""
    d = Dec(batch_raw)
    base = d.i64()
    d.i32(); d.i32(); d.i8(); d.u32()
    attrs = d.i16()
    if attrs & 7:
        raise ProtocolError("compressed batch")
    d.i32(); d.i64(); d.i64(); d.i64(); d.i16(); d.i32()
    n = d.i32()
    out = []
    for _ in range(n):
        d.vi()  # length
        d.i8()
        d.vi()
        od = d.vi()
        kl = d.vi()
        k = None if kl < 0 else d._take(kl)
        vl = d.vi()
        v = None if vl < 0 else d._take(vl)
        hdrs = []
        for _ in range(d.vi()):
            hk = d._take(d.vi())
            hl = d.vi()
            hdrs.append((hk, None if hl < 0 else d._take(hl)))
        out.append((base + od, k, v, hdrs))
    return out


CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


# ------------------------------------------------------------- consumer-group requests
# Bodies of the classic group protocol's requests (non-flexible versions) and
# decoders of their answers, for tests that act as many group members from one
# process. Strings may be str or bytes (bytes keep NULs as they are).

def join_group_body(group, member_id, session_ms=30000, rebalance_ms=60000, instance_id=None,
                    protocol_type="consumer", protocols=(("range", b""),)):
    """JoinGroup v5."""
    e = Enc().string(group).i32(session_ms).i32(rebalance_ms).string(member_id).string(instance_id)
    e.string(protocol_type).array_len(len(protocols))
    for name, meta in protocols:
        e.string(name).bytes_(meta)
    return e.done()


def join_group_decode(d):
    """JoinGroup v5 answer: dict with error, generation, protocol, leader,
    member_id (bytes) and members [(member_id bytes, metadata bytes)]."""
    d.i32()  # throttle
    r = {"error": d.i16(), "generation": d.i32(), "protocol": d.string_raw(), "leader": d.string_raw(),
         "member_id": d.string_raw(), "members": []}
    for _ in range(d.array_len()):
        mid = d.string_raw()
        d.string_raw()  # group instance id
        r["members"].append((mid, d.bytes_()))
    return r


def sync_group_body(group, generation, member_id, assignments=()):
    """SyncGroup v3; assignments: [(member_id, bytes)]."""
    e = Enc().string(group).i32(generation).string(member_id).string(None).array_len(len(assignments))
    for mid, a in assignments:
        e.string(mid).bytes_(a)
    return e.done()


def sync_group_decode(d):
    """SyncGroup v3 answer: (error, assignment bytes)."""
    d.i32()
    return d.i16(), d.bytes_()


def heartbeat_body(group, generation, member_id):
    """Heartbeat v3."""
    return Enc().string(group).i32(generation).string(member_id).string(None).done()


def offset_commit_body(group, topics, generation=-1, member_id=""):
    """OffsetCommit v7; topics: {name: [(partition, offset, metadata)]}."""
    e = Enc().string(group).i32(generation).string(member_id).string(None).array_len(len(topics))
    for name, parts in topics.items():
        e.string(name).array_len(len(parts))
        for p, off, meta in parts:
            e.i32(p).i64(off).i32(-1).string(meta)
    return e.done()


def offset_commit_decode(d):
    """OffsetCommit v7 answer: {(topic bytes, partition): error}."""
    d.i32()
    out = {}
    for _ in range(d.array_len()):
        name = d.string_raw()
        for _ in range(d.array_len()):
            p = d.i32()
            out[(name, p)] = d.i16()
    return out


def offset_fetch_body(group, topics):
    """OffsetFetch v5; topics: {name: [partition]} or None for all."""
    e = Enc().string(group)
    if topics is None:
        return e.array_len(-1).done()
    e.array_len(len(topics))
    for name, parts in topics.items():
        e.string(name).array_len(len(parts))
        for p in parts:
            e.i32(p)
    return e.done()


def offset_fetch_decode(d):
    """OffsetFetch v5 answer: ({(topic bytes, partition): (offset, metadata bytes, error)}, error)."""
    d.i32()
    out = {}
    for _ in range(d.array_len()):
        name = d.string_raw()
        for _ in range(d.array_len()):
            p, off = d.i32(), d.i64()
            d.i32()  # leader epoch
            meta = d.string_raw()
            out[(name, p)] = (off, meta, d.i16())
    return out, d.i16()


def offset_delete_body(group, topics):
    """OffsetDelete v0; topics: {name: [partition]}."""
    e = Enc().string(group).array_len(len(topics))
    for name, parts in topics.items():
        e.string(name).array_len(len(parts))
        for p in parts:
            e.i32(p)
    return e.done()


def offset_delete_decode(d):
    """OffsetDelete v0 answer: (error, {(topic bytes, partition): error})."""
    err = d.i16()
    d.i32()
    out = {}
    for _ in range(d.array_len()):
        name = d.string_raw()
        for _ in range(d.array_len()):
            p = d.i32()
            out[(name, p)] = d.i16()
    return err, out


def pipeline(conn, reqs, client_id="sluice-it"):
    """Sends every (api_key, version, body) on conn, then reads the answers in
    order; returns their Decs (after the v0 response header)."""
    first = conn.corr + 1
    out = bytearray()
    for k, v, body in reqs:
        conn.corr += 1
        out += frame(request_header(k, v, conn.corr, client_id) + body)
    conn.send(bytes(out))
    decs = []
    for i in range(len(reqs)):
        d = Dec(conn.recv_frame())
        got = d.i32()
        if got != first + i:
            raise ProtocolError(f"correlation id {got}, expected {first + i}")
        decs.append(d)
    return decs


def vm_kb(pid, field="VmRSS"):
    """A /proc/<pid>/status memory field in kB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise TestFailure(f"no {field} for pid {pid}")
