"""Installs and locates the real Kafka clients the integration tests drive, each on
first use and idempotently, in a cache (SLUICE_CACHE, default ~/.cache/sluice):

  Apache Kafka Java client and tools  the jars tests/reference/kafka-ref.sh fetches
                                      from Maven Central (kafka-clients, kafka-tools,
                                      kafka_2.13 at KAFKA_VERSION, default 4.1.1) in
                                      <cache>/kafka-<ver>/lib; CLI tools run as classes
  SluiceJavaClient                    tests/clients/java/*.java compiled with javac
                                      into <cache>/java-client-<hash>/
  confluent-kafka, kafka-python       PyPI, pip-installed into the venv <cache>/venv
                                      (versions below, overridable by environment)
  franz-go                            Go module proxy; tests/clients/franzgo built with
                                      `go build` into <cache>/franzgo-<hash>/

Whatever cannot be installed makes the calling test skip (exit 77), which
tests/run-all.sh counts as a failure: a client that could not be installed is a check
that did not run. Standard
library only; a lock file serialises installs between concurrent test runs.
"""
import contextlib
import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys

import lib
from lib import log, skip

CACHE = os.environ.get("SLUICE_CACHE") or os.path.expanduser("~/.cache/sluice")
KAFKA_VERSION = os.environ.get("KAFKA_VERSION", "4.1.1")
CONFLUENT_KAFKA_VERSION = os.environ.get("SLUICE_CONFLUENT_KAFKA_VERSION", "2.16.1")
KAFKA_PYTHON_VERSION = os.environ.get("SLUICE_KAFKA_PYTHON_VERSION", "3.0.12")
CLIENTS_SRC = os.path.join(lib.ROOT, "tests", "clients")


@contextlib.contextmanager
def _locked(name):
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, f".{name}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _tree_hash(paths):
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(os.path.relpath(p, lib.ROOT).encode() + b"\0")
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


# --------------------------------------------------------------------- Java

TOOLS_LOG4J = """status = error
appender.console.type = Console
appender.console.name = STDERR
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.stderr.ref = STDERR
"""


class Java:
    """The Apache Kafka jars (clients, tools) and a `java` to run them with."""

    def __init__(self, version=None):
        """version: the Kafka release whose jars to run (default KAFKA_VERSION)."""
        version = version or KAFKA_VERSION
        self.java = shutil.which("java")
        if not self.java:
            skip("java not installed (tests/install-deps.sh)")
        self.lib = os.path.join(CACHE, f"kafka-{version}", "lib")
        if not os.path.exists(os.path.join(self.lib, ".complete")):
            if not shutil.which("mvn"):
                skip("Kafka jars not cached and mvn not installed (tests/install-deps.sh)")
            log(f"fetching Apache Kafka {version} jars from Maven Central (first use)")
            with _locked("kafka-jars"):
                r = subprocess.run([lib.kafka_ref_path(), "install"], capture_output=True, text=True,
                                   timeout=1200, env=dict(os.environ, KAFKA_VERSION=version,
                                                          SLUICE_CACHE=CACHE))
            if r.returncode != 0:
                skip(f"could not fetch the Kafka jars: {r.stderr.strip()[-500:]}")
        self.clients_jar = os.path.join(self.lib, f"kafka-clients-{version}.jar")
        if not os.path.exists(self.clients_jar):
            skip(f"{self.clients_jar} missing")
        self.log4j = os.path.join(CACHE, "tools-log4j2.properties")
        if not os.path.exists(self.log4j) or open(self.log4j).read() != TOOLS_LOG4J:
            with open(self.log4j + ".tmp", "w") as f:
                f.write(TOOLS_LOG4J)
            os.replace(self.log4j + ".tmp", self.log4j)
        self.version = version

    def cmd(self, cls, *args, classpath=(), heap="-Xmx512m"):
        """argv running class `cls` with the Kafka jars (plus classpath) on the class path.
        Small heap and C1-friendly flags: the machine has 2 cores."""
        cp = os.pathsep.join(list(classpath) + [os.path.join(self.lib, "*")])
        return [self.java, heap, "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                "-Djava.awt.headless=true", f"-Dlog4j2.configurationFile={self.log4j}",
                "-cp", cp, cls, *map(str, args)]

    def run(self, cls, *args, timeout=120, input=None, classpath=(), heap="-Xmx512m"):
        return lib.run(self.cmd(cls, *args, classpath=classpath, heap=heap), timeout=timeout,
                       input=input)

    def test_client(self):
        """Compiles tests/clients/java/*.java (once per source and Kafka version) and
        returns the directory of the classes."""
        src = sorted(glob.glob(os.path.join(CLIENTS_SRC, "java", "*.java")))
        javac = shutil.which("javac")
        if not javac:
            skip("javac not installed (a JDK is needed for the Java test client)")
        out = os.path.join(CACHE, f"java-client-{self.version}-{_tree_hash(src)}")
        if os.path.exists(os.path.join(out, ".complete")):
            return out
        with _locked("java-client"):
            if not os.path.exists(os.path.join(out, ".complete")):
                log(f"compiling {', '.join(os.path.basename(s) for s in src)} with javac")
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                r = lib.run([javac, "-nowarn", "-d", out, "-cp", self.clients_jar, *src], timeout=300)
                if r.returncode != 0:
                    raise lib.TestFailure(f"javac failed:\n{r.stdout}{r.stderr}")
                open(os.path.join(out, ".complete"), "w").close()
        return out


# --------------------------------------------------------------------- Python

def venv_python():
    """Python of <cache>/venv with confluent-kafka and kafka-python installed from PyPI
    at the pinned versions. Skips the test if that cannot be done."""
    venv = os.path.join(CACHE, "venv")
    py = os.path.join(venv, "bin", "python")
    want = f"confluent-kafka=={CONFLUENT_KAFKA_VERSION}\nkafka-python=={KAFKA_PYTHON_VERSION}\n"
    marker = os.path.join(venv, ".sluice-requirements")

    def ready():
        try:
            return os.access(py, os.X_OK) and open(marker).read() == want
        except OSError:
            return False

    if ready():
        return py
    with _locked("venv"):
        if ready():
            return py
        log(f"installing {want.strip().replace(chr(10), ', ')} from PyPI into {venv} (first use)")
        if not os.access(py, os.X_OK):
            r = lib.run([sys.executable, "-m", "venv", venv], timeout=300)
            if r.returncode != 0:
                shutil.rmtree(venv, ignore_errors=True)
                skip(f"cannot create a venv (python3-venv missing?): {r.stderr.strip()[-300:]}")
        req = os.path.join(venv, "requirements.txt")
        with open(req, "w") as f:
            f.write(want)
        r = lib.run([py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", req],
                    timeout=900)
        if r.returncode != 0:
            skip(f"pip install failed: {r.stderr.strip()[-500:]}")
        with open(marker, "w") as f:
            f.write(want)
    return py


def reexec_in_venv():
    """Re-executes the calling test script under the venv's Python (installing it on
    first use) unless it already runs there."""
    py = venv_python()
    if os.path.realpath(sys.prefix) == os.path.realpath(os.path.dirname(os.path.dirname(py))):
        return
    sys.stdout.flush()
    os.execv(py, [py, os.path.abspath(sys.argv[0]), *sys.argv[1:]])


# --------------------------------------------------------------------- Go

def franzgo():
    """Path of sluice-franzgo (tests/clients/franzgo) built against franz-go from the
    Go module proxy with a Go new enough for it (tests/install-go.sh finds or fetches
    one). Skips the test (which tests/run-all.sh counts as a failure) if no such Go
    can be had or the build fails."""
    r = lib.run([os.path.join(lib.ROOT, "tests", "install-go.sh")], timeout=900)
    go = r.stdout.strip().splitlines()[-1] if r.returncode == 0 and r.stdout.strip() else None
    if not go:
        skip(f"no Go >= 1.26 could be found or fetched: {r.stderr.strip()[-500:]}")
    srcdir = os.path.join(CLIENTS_SRC, "franzgo")
    src = glob.glob(os.path.join(srcdir, "*.go")) + [os.path.join(srcdir, "go.mod"),
                                                      os.path.join(srcdir, "go.sum")]
    out = os.path.join(CACHE, f"franzgo-{_tree_hash(src)}")
    exe = os.path.join(out, "sluice-franzgo")
    if os.access(exe, os.X_OK):
        return exe
    with _locked("franzgo"):
        if os.access(exe, os.X_OK):
            return exe
        log("building sluice-franzgo (franz-go from the Go module proxy, first use)")
        os.makedirs(out, exist_ok=True)
        env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=readonly", CGO_ENABLED="0")
        r = lib.run([go, "build", "-o", exe + ".tmp", "."], timeout=900, cwd=srcdir, env=env)
        if r.returncode != 0:
            skip(f"go build of sluice-franzgo failed (Go too old or module proxy unreachable?): "
                 f"{r.stderr.strip()[-800:]}")
        os.replace(exe + ".tmp", exe)
    return exe


def franzgo_versions():
    with open(os.path.join(CLIENTS_SRC, "franzgo", "go.mod")) as f:
        return {ln.split()[0]: ln.split()[1] for ln in f
                if ln.strip().startswith("github.com/twmb/franz-go")}
