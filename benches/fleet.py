#!/usr/bin/env python3
"""Fleet mode (management.store.etcd) driver for benches/fleet.sh. Standard
library only. The etcd members and the example agent are fleet.sh's; the
kernels are started here, their pids listed in RUN/kernel.pids (which
fleet.sh's exit trap also ends) and stopped by pid before returning.

  fleet.py health ENDPOINT...
      Waits (30 s) until a put through etcd's JSON gateway succeeds: a
      leader is elected.

  fleet.py writes --bin DIR --run DIR --endpoints E1,E2,E3 --agent SOCK --writes N
      Three kernels on the prefix /bench/writes/, one per member (each
      lists all three). N sequential PUTs of /b0../b{N-1}, round-robin over
      the kernels' APIs, each at the version the previous answer gave.
      t0 = wall clock just before the PUT is sent; write-to-enforced = the
      latest of the three kernels' "configuration store change applied"
      log lines for that version (RFC 3339 timestamp, microseconds) minus
      t0. Prints one JSON line.

  fleet.py routes --bin DIR --run DIR --endpoints ... --agent SOCK --routes N [--puts 5]
      For N routes (and for 0): a fresh prefix loaded straight into etcd
      (transactions of 100 puts through the gateway, key <prefix>routes/NAME,
      value the route's JSON), then one kernel on it: its start (spawn until
      GET /v1/config answers 200 with N routes), VmRSS / VmHWM one second
      later, and PUTS sequential PUTs through its API (each answers once the
      kernel applied it): round trip, and send to the kernel's applied log
      line. Prints one JSON line per prefix.

  fleet.py table WRITES_JSON ROUTES_JSON
      The markdown table.
"""
import argparse
import base64
import hashlib
import http.client
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from datetime import datetime

TOKEN = "pk-fleet-bench-token"
APPLIED = "configuration store change applied"
ANSWERED = "configuration changed through the management API, in the fleet's store"
DISCOVERED = "agent discovered"


def die(msg):
    sys.exit("fleet.py: %s" % msg)


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def free_ports(n):
    """As lib.sh's free_ports: loopback ports free now, below the ephemeral range."""
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    pool = list(range(10000, low)) if low > 12000 else list(range(61000, 65000))
    random.shuffle(pool)
    found = []
    for port in pool:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == n:
            break
    return found


# ------------------------------------------------------------------ etcd


def b64(s):
    return base64.b64encode(s.encode()).decode()


def gateway(endpoint, path, body, timeout=10):
    req = urllib.request.Request(endpoint + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"{}")


def health(endpoints):
    deadline = time.time() + 30
    last = None
    while time.time() < deadline:
        for e in endpoints:
            try:
                gateway(e, "/v3/kv/put", {"key": b64("/bench-health"), "value": b64("1")}, timeout=2)
                return
            except Exception as ex:  # noqa: BLE001 (not up yet)
                last = ex
        time.sleep(0.1)
    die("etcd not healthy after 30 s: %s" % last)


def route(name, prefixes):
    return {"route_name": name,
            "request_policy_chain": [{"policy": "pathAllowList", "params": {"prefixes": prefixes}}]}


def load_routes(endpoint, prefix, n, batch=100):
    """n route keys under prefix, in transactions of at most `batch` puts."""
    t = time.perf_counter()
    for start in range(0, n, batch):
        ops = []
        for i in range(start, min(n, start + batch)):
            name = "/r%05d" % i
            ops.append({"requestPut": {"key": b64(prefix + "routes/" + name),
                                       "value": b64(json.dumps(route(name, [name])))}})
        out = gateway(endpoint, "/v3/kv/txn", {"success": ops})
        if not out.get("succeeded"):
            die("etcd txn failed: %s" % out)
    return time.perf_counter() - t


def count_keys(endpoint, prefix):
    end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    out = gateway(endpoint, "/v3/kv/range",
                  {"key": b64(prefix), "range_end": b64(end), "count_only": True})
    return int(out.get("count", 0))


# ------------------------------------------------------------------ kernels


class Kernel:
    """One kernel process on `prefix`, its management API on a free port."""

    def __init__(self, args, name, prefix):
        self.args, self.name, self.prefix = args, name, prefix
        self.port = free_ports(1)[0]
        self.log = os.path.join(args.run, name + ".log")
        self.cfg = os.path.join(args.run, name + ".yaml")
        self.proc = None
        self.conn = None
        endpoints = ", ".join(args.endpoints)
        with open(self.cfg, "w") as f:
            f.write("""policy_kernel:
  server: {port: 0, socket_path: "%(run)s/%(name)s.sock"}
  observability: {metrics_port: 0, log_level: info}
  agents:
    - {name: ex, socket_path: "%(agent)s"}
  route_policies: []
  management:
    listen: 127.0.0.1:%(port)d
    tokens_file: %(run)s/tokens
    state_path: %(run)s/%(name)s-cache.json
    history: 1000
    store:
      etcd:
        endpoints: [%(endpoints)s]
        prefix: %(prefix)s
""" % {"run": args.run, "name": name, "agent": args.agent, "port": self.port,
            "endpoints": endpoints, "prefix": prefix})

    def start(self):
        self.t_spawn = time.time()
        self.p_spawn = time.perf_counter()
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([os.path.join(self.args.bin, "policy-kernel"), "--config=" + self.cfg],
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        write_pids()
        return self

    def stop(self):
        if self.conn:
            self.conn.close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        write_pids()

    def alive(self):
        if self.proc.poll() is not None:
            die("kernel %s exited (%s); its log:\n%s" % (self.name, self.proc.returncode, self.tail()))

    def tail(self, n=30):
        try:
            return "".join(open(self.log, errors="replace").readlines()[-n:])
        except OSError:
            return ""

    def call(self, method, path, body=None, if_match=None, timeout=60):
        """(status, parsed JSON) over one kept-alive connection."""
        headers = {"Authorization": "Bearer " + TOKEN}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        if if_match is not None:
            headers["If-Match"] = str(if_match)
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, (json.loads(raw) if raw else None)
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
            except Exception:
                self.conn.close()
                self.conn = None
                raise

    def config(self):
        try:
            return self.call("GET", "/v1/config", timeout=30)
        except OSError:
            return None, None

    def until_ready(self, seconds=60, routes=None):
        """Polls GET /v1/config until 200, watching the store, the agent
        discovered (and `routes` routes when given); returns the answer and
        the seconds since spawn of the first 200 with `routes` routes."""
        deadline = time.time() + seconds
        started = complete = status = None
        while time.time() < deadline:
            self.alive()
            status, cfg = self.config()
            if status == 200:
                n = len(cfg.get("routes", []))
                if routes is not None and n == routes and started is None:
                    started = time.perf_counter() - self.p_spawn
                    complete = cfg
                agents_ok = all(a.get("discovered") for a in cfg.get("agents", []))
                if (cfg.get("store") or {}).get("watching") and agents_ok and (routes is None or started is not None):
                    return (complete if routes is not None else cfg), started
            time.sleep(0.01)
        die("kernel %s not ready after %d s (last /v1/config status %s); its log:\n%s"
            % (self.name, seconds, status, self.tail()))

    def rss_kib(self, field="VmRSS"):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def log_lines(self):
        """This kernel's log lines that are JSON objects, parsed."""
        with open(self.log, errors="replace") as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if isinstance(d, dict):
                    yield d

    def events(self):
        """[(wall-clock seconds, message, fields)] of this kernel's JSON log lines."""
        out = []
        for d in self.log_lines():
            if "timestamp" not in d:
                continue
            fields = d.get("fields", d)
            ts = datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp()
            out.append((ts, fields.get("message"), fields))
        return out

    def applied(self):
        """{version: wall-clock seconds} of this kernel's applied log lines."""
        out = {}
        for ts, msg, fields in self.events():
            if msg == APPLIED and "version" in fields:
                out.setdefault(int(fields["version"]), ts)
        return out

    def errors(self):
        """{"LEVEL message": count} of the kernel's error and warning lines."""
        seen = {}
        for d in self.log_lines():
            level = str(d.get("level", "")).upper()
            if level in ("ERROR", "WARN"):
                key = "%s %s" % (level, d.get("fields", d).get("message"))
                seen[key] = seen.get(key, 0) + 1
        return seen


KERNELS = []


def write_pids():
    """RUN/kernel.pids: the running kernels, for fleet.sh's exit trap."""
    if not KERNELS:
        return
    path = os.path.join(KERNELS[0].args.run, "kernel.pids")
    live = [str(k.proc.pid) for k in KERNELS if k.proc and k.proc.poll() is None]
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(live) + ("\n" if live else ""))
    os.replace(path + ".tmp", path)


def kernel(args, name, prefix):
    k = Kernel(args, name, prefix)
    KERNELS.append(k)
    return k


def stop_all():
    for k in KERNELS:
        k.stop()


def write_tokens(run):
    with open(os.path.join(run, "tokens"), "w") as f:
        f.write("bench write %s\n" % hashlib.sha256(TOKEN.encode()).hexdigest())


def until_applied(kernels, version, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if all(version in k.applied() for k in kernels):
            return True
        time.sleep(0.05)
    return False


def put(k, name, version, prefixes):
    """One PUT: (t0 wall clock, round trip s, new version)."""
    path = "/v1/routes/" + urllib.parse.quote(name, safe="")
    body = route(name, prefixes)
    t0 = time.time()
    p0 = time.perf_counter()
    status, ans = k.call("PUT", path, body=body, if_match=version)
    rtt = time.perf_counter() - p0
    if status != 200:
        die("PUT %s through %s at version %s: %s %s\n%s" % (name, k.name, version, status, ans, k.tail()))
    return t0, rtt, int(ans["version"])


# ------------------------------------------------------------------ writes


def writes(args):
    write_tokens(args.run)
    ks = [kernel(args, "k%d" % i, "/bench/writes/") for i in range(3)]
    # Each kernel lists the three members; the first one of its list differs
    # (its client balances over them anyway).
    for i, k in enumerate(ks):
        eps = args.endpoints[i:] + args.endpoints[:i]
        text = open(k.cfg).read().replace(", ".join(args.endpoints), ", ".join(eps))
        open(k.cfg, "w").write(text)
        k.start()
    for k in ks:
        k.until_ready()
    status, cfg = ks[0].config()
    version = int(cfg["version"])
    rows = []
    for i in range(args.writes):
        k = ks[i % 3]
        name = "/b%d" % i
        t0, rtt, version = put(k, name, version, [name])
        rows.append({"version": version, "t0": t0, "rtt": rtt, "via": k.name})
    if not until_applied(ks, version):
        die("the last version %d was not applied by every kernel within 30 s" % version)
    applied = [k.applied() for k in ks]
    enforced, missing = [], 0
    for r in rows:
        ts = [a.get(r["version"]) for a in applied]
        if None in ts:
            missing += 1
            continue
        r["per_kernel_ms"] = [(t - r["t0"]) * 1000 for t in ts]
        enforced.append(max(r["per_kernel_ms"]))
    if not enforced:
        die("no write was applied by all 3 kernels")
    # The kernel that took the write, and the other two.
    own = [r["per_kernel_ms"][int(r["via"][1:])] for r in rows if "per_kernel_ms" in r]
    others = [max(v for j, v in enumerate(r["per_kernel_ms"]) if j != int(r["via"][1:]))
              for r in rows if "per_kernel_ms" in r]
    rtts = [r["rtt"] * 1000 for r in rows]
    final = [k.config()[1] for k in ks]
    out = {
        "writes": len(rows), "missing": missing,
        "enforced_ms": {"p50": pct(enforced, 50), "p99": pct(enforced, 99), "max": max(enforced)},
        "own_applied_ms": {"p50": pct(own, 50), "p99": pct(own, 99), "max": max(own)},
        "others_applied_ms": {"p50": pct(others, 50), "p99": pct(others, 99), "max": max(others)},
        "rtt_ms": {"p50": pct(rtts, 50), "p99": pct(rtts, 99), "max": max(rtts)},
        "versions": [f["version"] for f in final],
        "routes": [len(f["routes"]) for f in final],
        "changes_applied": [f["store"]["changes_applied"] for f in final],
        "errors": {k.name: k.errors() for k in ks},
    }
    with open(os.path.join(args.run, "writes-rows.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    stop_all()
    print(json.dumps(out))


# ------------------------------------------------------------------ routes


def first(events, message, after=0.0, until=float("inf"), last=False, **match):
    """The timestamp of the first (or last) `message` line in [after, until]
    whose fields match."""
    hits = [ts for ts, m, f in events
            if m == message and after <= ts <= until and all(str(f.get(k)) == str(v) for k, v in match.items())]
    if not hits:
        return None
    return hits[-1] if last else hits[0]


def breakdown(events, puts):
    """Where each PUT's time went, from the kernel's log: sent -> applied
    (strict validation, the etcd transaction, the watch event, the snapshot
    built over every route) -> the write logged as done (the writer woken)
    -> the answer received. Medians of each step, ms."""
    steps = {"to_applied": [], "to_answered": [], "to_received": []}
    for t0, version, t_recv in puts:
        applied = first(events, APPLIED, t0, version=version)
        answered = first(events, ANSWERED, t0, version=version)
        if None in (applied, answered):
            continue
        steps["to_applied"].append((applied - t0) * 1000)
        steps["to_answered"].append((answered - applied) * 1000)
        steps["to_received"].append((t_recv - answered) * 1000)
    return {k: statistics.median(v) if v else None for k, v in steps.items()}


def one_prefix(args, n):
    prefix = "/bench/routes%d/" % n
    load_s = load_routes(args.endpoints[0], prefix, n) if n else 0.0
    keys = count_keys(args.endpoints[0], prefix + "routes/")
    if keys != n:
        die("%s holds %d route keys, not %d" % (prefix, keys, n))
    k = kernel(args, "r%d" % n, prefix).start()
    cfg, start_s = k.until_ready(routes=n, seconds=300)
    valid_at_start = sum(1 for r in cfg["routes"] if r.get("valid"))
    time.sleep(1)
    rss, hwm = k.rss_kib("VmRSS"), k.rss_kib("VmHWM")
    version = int(k.config()[1]["version"])
    rtts, applied, puts = [], [], []
    for i in range(args.puts):
        name = "/put%d" % i
        t0, rtt, version = put(k, name, version, [name])
        t_recv = time.time()
        if not until_applied([k], version, seconds=60):
            die("kernel %s did not log version %d applied" % (k.name, version))
        rtts.append(rtt * 1000)
        applied.append((k.applied()[version] - t0) * 1000)
        puts.append((t0, version, t_recv))
    rss_after = k.rss_kib("VmRSS")
    events = k.events()
    read, listening = first(events, "configuration store read"), first(events, "management API listening")
    out = {"routes": n, "load_s": load_s, "start_s": start_s, "valid_at_start": valid_at_start,
           "store_read_s": read - k.t_spawn if read else None,
           "api_listening_s": listening - k.t_spawn if listening else None,
           "rss_kib": rss, "hwm_kib": hwm, "rss_after_puts_kib": rss_after,
           "put_rtt_ms": rtts, "put_applied_ms": applied,
           "put_rtt_median_ms": statistics.median(rtts), "put_applied_median_ms": statistics.median(applied),
           "put_steps_ms": breakdown(events, puts),
           "rediscoveries": sum(1 for _, m, _ in events if m == DISCOVERED),
           "cache_bytes": os.path.getsize(os.path.join(args.run, k.name + "-cache.json")),
           "errors": k.errors()}
    k.stop()
    return out


def routes(args):
    write_tokens(args.run)
    for n in (args.routes, 0):
        print(json.dumps(one_prefix(args, n)), flush=True)


# ------------------------------------------------------------------ table


def table(args):
    w = json.loads(open(args.writes_json).read())
    rs = [json.loads(l) for l in open(args.routes_json) if l.strip()]
    big = next(r for r in rs if r["routes"] != 0)
    zero = next(r for r in rs if r["routes"] == 0)
    print("### Fleet mode: 3 kernels on a 3-member etcd (benches/fleet.sh)\n")
    print("%d sequential PUTs round-robin over the 3 kernels' management APIs, each at the version the previous "
          "answer gave. Write-to-enforced: from just before the PUT is sent to the last of the 3 kernels' "
          "`configuration store change applied` log lines for its version (its new snapshot in force). "
          "Binaries: `%s`. %s cores, load average %s.\n" % (w["writes"], args.bin, os.cpu_count(), args.load))
    print("| 3 kernels, %d writes | p50 ms | p99 ms | max ms |" % w["writes"])
    print("|---|---:|---:|---:|")
    for key, label in (("enforced_ms", "write to enforced on all 3 kernels"),
                       ("own_applied_ms", "write to applied on the kernel that took it"),
                       ("others_applied_ms", "write to applied on the later of the other two"),
                       ("rtt_ms", "PUT round trip")):
        d = w[key]
        print("| %s | %.2f | %.2f | %.2f |" % (label, d["p50"], d["p99"], d["max"]))
    if w["missing"]:
        print("\n**%d writes had no applied line on some kernel.**" % w["missing"])
    same = len(set(w["versions"])) == 1 and len(set(w["routes"])) == 1
    print("\n%s: versions %s, routes %s, store changes applied %s." % (
        "The 3 kernels ended in agreement" if same else "**The 3 kernels ended in disagreement**",
        "/".join(map(str, w["versions"])), "/".join(map(str, w["routes"])),
        "/".join(map(str, w["changes_applied"]))))
    print("\nOne kernel on a prefix loaded straight into etcd (route keys only, no write through the API yet); "
          "start: spawn until `GET /v1/config` answers 200 with every route; RSS one second later; "
          "PUT: median of %d sequential PUTs of a new route through its API (the answer comes once it applied "
          "the change).\n" % len(big["put_rtt_ms"]))
    print("| one kernel | %s routes | 0 routes |" % format(big["routes"], ","))
    print("|---|---:|---:|")

    def row(label, key, fmt, scale=1.0):
        cells = []
        for r in (big, zero):
            v = r
            for part in key.split("."):
                v = v.get(part) if isinstance(v, dict) else None
            cells.append("n/a" if v is None else fmt % (v * scale))
        print("| %s | %s | %s |" % (label, cells[0], cells[1]))
    row("start: spawn to the store read (log), s", "store_read_s", "%.2f")
    row("start: spawn to the management API listening (log), s", "api_listening_s", "%.2f")
    row("start: spawn to `GET /v1/config` 200 with every route, s", "start_s", "%.2f")
    row("VmRSS after start, MiB", "rss_kib", "%.1f", 1 / 1024)
    row("VmHWM (peak) after start, MiB", "hwm_kib", "%.1f", 1 / 1024)
    row("VmRSS after the PUTs, MiB", "rss_after_puts_kib", "%.1f", 1 / 1024)
    row("PUT round trip (answered once applied), median ms", "put_rtt_median_ms", "%.1f")
    row("step: sent to applied (validation, etcd txn, watch, snapshot built over every route)",
        "put_steps_ms.to_applied", "%.1f")
    row("step: applied to answered (writer woken)", "put_steps_ms.to_answered", "%.1f")
    row("step: answered (log) to answer received", "put_steps_ms.to_received", "%.1f")
    row("cache file (state_path), KiB", "cache_bytes", "%.0f", 1 / 1024)
    print("\nSteps: medians of each step over the PUTs, from the kernel's log timestamps (they need not add up to "
          "the median round trip). Loading the %s route keys into etcd took %.1f s." % (format(big["routes"], ","), big["load_s"]))
    notes = []
    if big["rediscoveries"] > len(big["put_rtt_ms"]):
        notes.append("each change applied re-discovers the agents first (`agent discovered`: %d lines on the "
                     "%s-route kernel for %d PUTs)" % (big["rediscoveries"], format(big["routes"], ","), len(big["put_rtt_ms"])))
    if big["valid_at_start"] != big["routes"]:
        notes.append("%d of the %d routes were valid in the first complete `/v1/config` answer (the agent not yet "
                     "discovered)" % (big["valid_at_start"], big["routes"]))
    errs = {}
    for name, e in list(w["errors"].items()) + [("r%d" % big["routes"], big["errors"]), ("r0", zero["errors"])]:
        for msg, c in e.items():
            errs.setdefault(msg, []).append("%s×%d" % (name, c))
    for msg, where in sorted(errs.items()):
        notes.append("kernel log: %s (%s)" % (msg, ", ".join(where)))
    if notes:
        print()
        for n in notes:
            print("- " + n)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("health")
    h.add_argument("endpoints", nargs="+")
    for name in ("writes", "routes"):
        s = sub.add_parser(name)
        s.add_argument("--bin", required=True)
        s.add_argument("--run", required=True)
        s.add_argument("--endpoints", required=True, type=lambda v: v.split(","))
        s.add_argument("--agent", required=True)
        if name == "writes":
            s.add_argument("--writes", type=int, default=100)
        else:
            s.add_argument("--routes", type=int, default=10000)
            s.add_argument("--puts", type=int, default=5)
    t = sub.add_parser("table")
    t.add_argument("writes_json")
    t.add_argument("routes_json")
    t.add_argument("--bin", default="")
    t.add_argument("--load", default="")
    args = p.parse_args()
    try:
        if args.cmd == "health":
            health(args.endpoints)
        elif args.cmd == "writes":
            writes(args)
        elif args.cmd == "routes":
            routes(args)
        else:
            table(args)
    finally:
        stop_all()


if __name__ == "__main__":
    main()
