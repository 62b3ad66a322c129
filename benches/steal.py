#!/usr/bin/env python3
"""Relates the slowest requests of fixed-rate runs to the hypervisor's steal
of the core under test.

  python3 benches/steal.py sample SECONDS OUT [CPU]
      samples /proc/stat's `steal` of core CPU (default 0) every 10 ms for
      SECONDS and writes "µs-since-epoch steal-ticks" lines to OUT. Run it on
      the load generator's core (taskset -c 1) beside ab.sh or run.sh.
  python3 benches/steal.py match OUT LOG...
      for each request log (pk-http's --log-file: start µs, status, latency
      µs), prints p50/p99, the steal during the run, and how many of the
      slowest 1% started between 0.1 s before and 0.3 s after a sample that
      saw steal (a request that arrives during a stall or while its backlog
      drains), against the share of the run's time those windows cover (what
      chance alone would give).

Example: taskset -c 1 python3 benches/steal.py sample 120 /tmp/steal.log &
         PK_AB_ENVOY=1 bash benches/ab.sh 3 k1=target/release/policy-kernel
         python3 benches/steal.py match /tmp/steal.log /tmp/pk-ab.*/run.*/http.log
"""
import bisect
import sys
import time

BEFORE_US, AFTER_US = 100_000, 300_000


def sample(seconds, out, cpu):
    end = time.time() + seconds
    name = "cpu%d" % cpu
    with open(out, "w") as f:
        while time.time() < end:
            with open("/proc/stat") as s:
                for line in s:
                    cols = line.split()
                    if cols[0] == name:
                        f.write("%d %s\n" % (time.time() * 1e6, cols[8]))
                        break
            time.sleep(0.01)


def match(steal_log, logs):
    steal = [tuple(map(int, line.split())) for line in open(steal_log) if line.strip()]
    ts = [s[0] for s in steal]
    for log in logs:
        rows = [line.split() for line in open(log) if line.strip()]
        if not rows:
            continue
        t0, t1 = int(rows[0][0]), int(rows[-1][0])
        i0, i1 = bisect.bisect(ts, t0), bisect.bisect(ts, t1)
        if i1 - i0 < 10:
            print("%s: not covered by the steal samples" % log)
            continue
        ticks = [ts[i] for i in range(i0 + 1, i1) if steal[i][1] > steal[i - 1][1]]
        lat = sorted(int(r[2]) for r in rows)
        p99 = lat[int(len(lat) * 0.99)]
        slow = [int(r[0]) for r in rows if int(r[2]) >= p99]
        near = sum(1 for s in slow if any(-BEFORE_US <= s - t <= AFTER_US for t in ticks))
        # Share of the run's time within those windows (union of intervals).
        covered, last = 0, t0
        for t in ticks:
            a, b = max(t - BEFORE_US, last), min(t + AFTER_US, t1)
            if b > a:
                covered += b - a
                last = b
        print("%s: p50 %.2f ms, p99 %.2f ms; steal %d ms, seen in %d samples; slowest 1%%: %d of %d near "
              "such a sample, where chance gives %.0f%%" % (log, lat[len(lat) // 2] / 1000, p99 / 1000,
                                                            10 * (steal[i1 - 1][1] - steal[i0][1]), len(ticks),
                                                            near, len(slow), 100 * covered / max(1, t1 - t0)))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "sample":
        sample(float(sys.argv[2]), sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    elif len(sys.argv) >= 4 and sys.argv[1] == "match":
        match(sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
