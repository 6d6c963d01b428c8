#!/usr/bin/env python3
"""The systemd units and the .deb, checked as an operator's host would see them.

Proves:
- deploy/systemd/sluice-broker.service and sluice-controller.service pass
  `systemd-analyze verify` (every key known and well-formed, ExecStart executable,
  dependencies resolvable) in a root holding the host's own units and the built
  binaries at /usr/bin; a copy with an unknown key and a bad value is reported, so the
  check can fail; both carry the settings the deployment relies on (Type=notify,
  User=sluice, StateDirectory, LimitNOFILE, LimitMEMLOCK=infinity, the hardening) and
  `systemd-analyze security --offline` rates them below 4.0 exposure;
- deploy/build-deb.sh builds a .deb whose `dpkg-deb --info` names the package, version,
  architecture and a Depends that covers every shared library the three binaries load
  directly (ELF NEEDED, ldd and dpkg -S: each library's Debian package) and adduser; whose
  `dpkg-deb --contents` has the binaries, the units and the example configuration, all
  owned by root; whose conffiles are the two properties files and whose postinst creates
  the system user sluice;
- the package's own tree (dpkg-deb -x) passes `systemd-analyze verify` as shipped, and
  its binaries with its example configuration (ports and directories overridden) serve:
  the broker and the controller answer ApiVersions and stop cleanly on SIGTERM.
CI's PID 1 is not systemd: verify and security --offline read unit files, they need no
running systemd. Without systemd-analyze (Debian's systemd package: tests/install-deps.sh)
the test FAILS, it does not skip. Nothing is installed on this machine. ~1 min (a release
build of the three binaries the first time, in <build>/deb-build).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402
from lib import check, log  # noqa: E402

UNITS = ("sluice-broker.service", "sluice-controller.service")
BINARIES = ("sluice-broker", "sluice-controller", "sluice")
# What each unit must say (key: value, or a predicate on its values).
REQUIRED = {
    "Type": "notify",
    "User": "sluice",
    "Group": "sluice",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "Restart": "on-failure",
    "LimitMEMLOCK": "infinity",
    "LimitNOFILE": lambda v: v.isdigit() and int(v) >= 65536,
    "RestartSec": lambda v: v.isdigit() and 1 <= int(v) <= 60,
    "StateDirectory": lambda v: v.startswith("sluice/"),
}
EXPOSURE_MAX = 4.0


def tool(name):
    p = shutil.which(name)
    if not p:
        raise lib.TestFailure(f"{name} not found: install Debian's "
                              f"{'systemd' if name.startswith('systemd') else 'dpkg-dev'} (tests/install-deps.sh)")
    return p


def host_unit_dir():
    for d in ("/lib/systemd/system", "/usr/lib/systemd/system"):
        if os.path.isfile(os.path.join(d, "multi-user.target")):
            return d
    raise lib.TestFailure("no systemd unit directory with multi-user.target on this host (Debian's systemd package)")


def make_root(root, binaries, units):
    """A file-system root for systemd-analyze --root: the host's units (targets the ours
    depend on), and ours; binaries: {name: path} copied to /usr/bin."""
    unit_dir = os.path.join(root, "lib", "systemd", "system")
    os.makedirs(unit_dir, exist_ok=True)
    shutil.copytree(host_unit_dir(), unit_dir, symlinks=True, dirs_exist_ok=True)
    os.makedirs(os.path.join(root, "usr", "bin"), exist_ok=True)
    for name, path in binaries.items():
        shutil.copy2(path, os.path.join(root, "usr", "bin", name))
    for u in units:
        shutil.copy2(u, os.path.join(unit_dir, os.path.basename(u)))
    return unit_dir


def verify(root, unit_paths):
    r = lib.run([tool("systemd-analyze"), "verify", f"--root={root}"] + unit_paths, timeout=120)
    return r.returncode, (r.stdout + r.stderr).strip()


def verify_clean(root, unit_paths, what):
    rc, out = verify(root, unit_paths)
    check(rc == 0 and not out, f"{what}: systemd-analyze verify: exit {rc}:\n{out}")
    log(f"{what}: systemd-analyze verify: clean")


def unit_values(path):
    vals = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#;[":
                continue
            k, _, v = line.partition("=")
            vals.setdefault(k.strip(), []).append(v.strip())
    return vals


def check_settings(path):
    vals = unit_values(path)
    for k, want in REQUIRED.items():
        got = vals.get(k)
        check(got, f"{os.path.basename(path)}: no {k}=")
        v = got[-1]
        ok = want(v) if callable(want) else v == want
        check(ok, f"{os.path.basename(path)}: {k}={v} is not what the deployment needs")
    check("DynamicUser" not in vals or vals["DynamicUser"][-1] == "no",
          f"{os.path.basename(path)}: DynamicUser must be off (the user sluice owns the data)")


def exposure(root, unit):
    r = lib.run([tool("systemd-analyze"), "security", "--offline=true", f"--root={root}", "--no-pager", unit],
                timeout=120)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
    check(m, f"systemd-analyze security {unit}: no overall exposure level:\n{r.stdout}{r.stderr}")
    return float(m.group(1))


def source_units(tmp):
    """The units in the tree, with the binaries of this build at /usr/bin."""
    broker = lib.broker_path()
    controller = os.environ.get("SLUICE_CONTROLLER") or os.path.join(lib.ROOT, "build", "control", "sluice-controller")
    cli = os.environ.get("SLUICE_CLI") or os.path.join(lib.ROOT, "build", "tools", "sluice")
    for p in (broker, controller, cli):
        check(p and os.access(p, os.X_OK), f"binary not built: {p}")
    root = os.path.join(tmp, "src-root")
    srcs = [os.path.join(lib.ROOT, "deploy", "systemd", u) for u in UNITS]
    unit_dir = make_root(root, {"sluice-broker": broker, "sluice-controller": controller, "sluice": cli}, srcs)
    verify_clean(root, [os.path.join(unit_dir, u) for u in UNITS], "deploy/systemd units")
    for s in srcs:
        check_settings(s)
    log(f"units: {', '.join(REQUIRED)} as the deployment needs")
    for u in UNITS:
        e = exposure(root, u)
        check(e < EXPOSURE_MAX, f"{u}: systemd-analyze security exposure {e} (want < {EXPOSURE_MAX})")
        log(f"{u}: systemd-analyze security --offline exposure {e}")
    # The check can fail: a unit with an unknown key and a value systemd cannot parse.
    bad = os.path.join(unit_dir, "sluice-broken.service")
    with open(os.path.join(unit_dir, UNITS[0])) as f, open(bad, "w") as out:
        out.write(f.read().replace("NoNewPrivileges=yes", "NoNewPrivileges=yes\nNoSuchKey=1\nProtectSystem=bogus"))
    rc, out = verify(root, [bad])
    check("NoSuchKey" in out and "bogus" in out, f"systemd-analyze verify did not report a broken unit: exit {rc}:\n{out}")
    log("a broken copy is reported by systemd-analyze verify (unknown key, bad value)")


def build_deb(tmp):
    build_root = os.environ.get("SLUICE_BUILD_ROOT") or os.path.join(lib.ROOT, "build")
    out = os.path.join(tmp, "out")
    r = lib.run([os.path.join(lib.ROOT, "deploy", "build-deb.sh"), "--build-dir", os.path.join(build_root, "deb-build"),
                 "--out", out], timeout=1200)
    check(r.returncode == 0, f"deploy/build-deb.sh: exit {r.returncode}:\n{r.stderr[-3000:]}")
    deb = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    check(deb.startswith(out) and deb.endswith(".deb") and os.path.isfile(deb),
          f"deploy/build-deb.sh printed no .deb path: {r.stdout!r}")
    log(f"built {os.path.basename(deb)} ({os.path.getsize(deb)} bytes)")
    return deb


def control_fields(deb):
    r = lib.run(["dpkg-deb", "--field", deb], timeout=60)
    check(r.returncode == 0, f"dpkg-deb --field: {r.stderr}")
    fields, key = {}, None
    for line in r.stdout.splitlines():
        if line.startswith(" ") and key:
            fields[key] += "\n" + line
        else:
            key, _, v = line.partition(":")
            fields[key] = v.strip()
    return fields


def package_of(lib_path):
    """The Debian package holding a shared library (merged /usr: either spelling)."""
    cands = [lib_path, os.path.realpath(lib_path)]
    for c in list(cands):
        if c.startswith("/usr/"):
            cands.append(c[4:])
        elif c.startswith("/lib"):
            cands.append("/usr" + c)
    for c in cands:
        r = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
        if r.returncode == 0:
            return r.stdout.split(":")[0].strip()
    return None


def check_info(deb, root):
    r = lib.run(["dpkg-deb", "--info", deb], timeout=60)
    check(r.returncode == 0, f"dpkg-deb --info: {r.stderr}")
    f = control_fields(deb)
    check(f.get("Package") == "sluice", f"Package: {f.get('Package')}")
    arch = lib.run(["dpkg", "--print-architecture"], timeout=30).stdout.strip()
    check(f.get("Architecture") == arch, f"Architecture: {f.get('Architecture')} (want {arch})")
    check(re.match(r"^\d+\.\d+\.\d+", f.get("Version", "")), f"Version: {f.get('Version')}")
    for k in ("Maintainer", "Description", "Installed-Size"):
        check(f.get(k), f"no {k} field")
    depends = {d.strip().split(" ")[0] for d in f.get("Depends", "").split(",") if d.strip()}
    check("adduser" in depends, f"Depends lacks adduser (the postinst's): {sorted(depends)}")
    for name in ("liburing2", "libjemalloc2", "libraft2", "libuv1", "liblz4-1", "libzstd1", "libsnappy1v5",
                 "zlib1g", "libc6"):
        check(name in depends, f"Depends lacks {name}: {sorted(depends)}")
    # Every library a binary links directly (ELF NEEDED; ldd says where it is) comes from
    # a package in Depends; what those load in turn, their own packages depend on.
    for b in BINARIES:
        exe = os.path.join(root, "usr", "bin", b)
        r = lib.run(["ldd", exe], timeout=30)
        check(r.returncode == 0 and "not found" not in r.stdout, f"ldd {b}:\n{r.stdout}{r.stderr}")
        where = dict(re.findall(r"^\s*(\S+) => (/\S+)", r.stdout, re.M))
        # the dynamic loader appears as its path alone
        where.update((os.path.basename(m), m) for m in re.findall(r"^\s*(/\S+) \(0x", r.stdout, re.M))
        needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", lib.run(["readelf", "-d", exe], timeout=30).stdout)
        check(needed, f"readelf -d {b}: no NEEDED libraries")
        for soname in needed:
            check(soname in where, f"{b}: ldd does not resolve {soname}:\n{r.stdout}")
            pkg = package_of(where[soname])
            check(pkg, f"{b}: no Debian package holds {where[soname]}")
            pkg = pkg.split(":")[0]
            check(pkg in depends, f"{b} links {soname} from {pkg}, which Depends does not name: {sorted(depends)}")
    log(f"dpkg-deb --info: sluice {f['Version']} {arch}; Depends covers every library the binaries link: "
        f"{', '.join(sorted(depends))}")


def check_contents(deb):
    r = lib.run(["dpkg-deb", "--contents", deb], timeout=60)
    check(r.returncode == 0, f"dpkg-deb --contents: {r.stderr}")
    entries = {}
    for line in r.stdout.splitlines():
        parts = line.split()
        entries[parts[-1].lstrip(".")] = (parts[0], parts[1])
    want = [f"/usr/bin/{b}" for b in BINARIES] + [f"/lib/systemd/system/{u}" for u in UNITS] + \
        ["/etc/sluice/server.properties", "/etc/sluice/controller.properties", "/usr/share/doc/sluice/operations.md",
         "/usr/share/doc/sluice/copyright"]
    for p in want:
        check(p in entries, f"dpkg-deb --contents: no {p}:\n{r.stdout}")
    for b in BINARIES:
        check(entries[f"/usr/bin/{b}"][0] == "-rwxr-xr-x", f"/usr/bin/{b}: mode {entries[f'/usr/bin/{b}'][0]}")
    owners = {o for _, o in entries.values()}
    check(owners == {"root/root"}, f"files not all owned by root/root: {owners}")
    extra = [p for p in entries if p.startswith("/usr/bin/") and p.rstrip("/") != "/usr/bin" and p not in want]
    check(not extra, f"unexpected binaries in the package: {extra}")
    log(f"dpkg-deb --contents: {len(entries)} entries, the binaries, units and configuration, all root/root")


def check_scripts(deb, tmp):
    ctl = os.path.join(tmp, "DEBIAN")
    r = lib.run(["dpkg-deb", "--control", deb, ctl], timeout=60)
    check(r.returncode == 0, f"dpkg-deb --control: {r.stderr}")
    with open(os.path.join(ctl, "conffiles")) as f:
        conffiles = f.read().split()
    check(sorted(conffiles) == ["/etc/sluice/controller.properties", "/etc/sluice/server.properties"],
          f"conffiles: {conffiles}")
    with open(os.path.join(ctl, "postinst")) as f:
        postinst = f.read()
    check(re.search(r"adduser --system --group .*sluice", postinst), f"postinst does not create the user:\n{postinst}")
    for s in ("postinst", "prerm", "postrm"):
        p = os.path.join(ctl, s)
        check(os.access(p, os.X_OK), f"{s} not executable")
        r = lib.run(["sh", "-n", p], timeout=30)
        check(r.returncode == 0, f"{s}: sh -n: {r.stderr}")
    postinst_runs(os.path.join(ctl, "postinst"), tmp)
    log("conffiles: both properties files; postinst creates the system user sluice once; scripts parse")


def postinst_runs(postinst, tmp):
    """Runs the postinst with getent, adduser and systemctl replaced by stubs that record
    their arguments (nothing on this machine changes): `configure` creates the user when
    getent does not know it, and leaves it alone when it does."""
    stubs = os.path.join(tmp, "stubs")
    os.makedirs(stubs, exist_ok=True)
    calls = os.path.join(tmp, "calls")
    for name in ("adduser", "systemctl"):
        with open(os.path.join(stubs, name), "w") as f:
            f.write(f'#!/bin/sh\necho "{name} $*" >>"{calls}"\n')
    with open(os.path.join(stubs, "getent"), "w") as f:
        f.write(f'#!/bin/sh\necho "getent $*" >>"{calls}"\n[ -n "$SLUICE_USER_EXISTS" ]\n')
    for name in ("adduser", "systemctl", "getent"):
        os.chmod(os.path.join(stubs, name), 0o755)
    for exists in ("", "1"):
        if os.path.exists(calls):
            os.remove(calls)
        env = dict(os.environ, PATH=f"{stubs}:/usr/bin:/bin", SLUICE_USER_EXISTS=exists)
        r = lib.run(["sh", postinst, "configure", ""], timeout=30, env=env)
        check(r.returncode == 0, f"postinst configure: exit {r.returncode}: {r.stderr}")
        with open(calls) as f:
            made = [line.strip() for line in f if line.startswith("adduser")]
        if exists:
            check(not made, f"postinst ran adduser for a user that exists: {made}")
        else:
            check(made == ["adduser --system --group --home /var/lib/sluice --no-create-home --quiet sluice"],
                  f"postinst's adduser calls: {made}")


def serve(exe, args, port, logpath, what):
    with open(logpath, "ab") as out:
        p = subprocess.Popen([exe] + args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        check(lib.wait_port(port, 60, proc_alive=lambda: p.poll() is None),
              f"{what} did not listen on {port}: exit {p.poll()}")
        with lib.Conn(port, timeout=10) as c:
            c.api_versions()
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        check(rc == 0, f"{what}: exit {rc} after SIGTERM")
    except lib.TestFailure:
        with open(logpath, "rb") as f:
            log(f"{what} log:\n{f.read().decode(errors='replace')[-3000:]}")
        raise
    finally:
        if p.poll() is None:
            p.kill()
        p.wait()
    log(f"{what}: serves ApiVersions, stops cleanly")


def package_tree(deb, tmp):
    root = os.path.join(tmp, "pkg-root")
    r = lib.run(["dpkg-deb", "-x", deb, root], timeout=120)
    check(r.returncode == 0, f"dpkg-deb -x: {r.stderr}")
    unit_dir = make_root(root, {}, [])
    verify_clean(root, [os.path.join(unit_dir, u) for u in UNITS], "the package's units")
    check_info(deb, root)
    for b in BINARIES:
        r = lib.run([os.path.join(root, "usr", "bin", b), "--help"], timeout=30)
        check(r.returncode == 0, f"{b} --help from the package: exit {r.returncode}: {r.stderr[-500:]}")
    port, admin = lib.free_port(), lib.free_port()
    serve(os.path.join(root, "usr", "bin", "sluice-broker"),
          [os.path.join(root, "etc", "sluice", "server.properties"),
           "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"advertised.listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={os.path.join(tmp, 'broker-data')}",
           "--override", f"sluice.admin.listener=127.0.0.1:{admin}"],
          port, os.path.join(tmp, "broker.log"), "the package's broker with its server.properties")
    cport = lib.free_port_pair()
    serve(os.path.join(root, "usr", "bin", "sluice-controller"),
          [os.path.join(root, "etc", "sluice", "controller.properties"),
           "--override", f"listeners=CONTROLLER://127.0.0.1:{cport}",
           "--override", f"controller.quorum.voters=1001@127.0.0.1:{cport}",
           "--override", f"metadata.log.dir={os.path.join(tmp, 'controller-metadata')}"],
          cport, os.path.join(tmp, "controller.log"), "the package's controller with its controller.properties")


def test():
    if lib.TARGET != "sluice":
        lib.skip("Sluice's units and package")
    tool("systemd-analyze")
    for t in ("dpkg-deb", "dpkg-shlibdeps", "ldd", "readelf"):
        tool(t)
    tmp = tempfile.mkdtemp(prefix="sluice-it-deploy-")
    try:
        source_units(tmp)
        deb = build_deb(tmp)
        check_contents(deb)
        check_scripts(deb, tmp)
        package_tree(deb, tmp)
    finally:
        if not os.environ.get("SLUICE_TEST_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    lib.main(test)
