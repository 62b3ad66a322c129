"""Turns target/chaos/results/*.json (written by tests/reliability.rs under
CHAOS_RESULTS) into the markdown table of RELIABILITY.md."""
import argparse
import json
import pathlib


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--command", default="make chaos")
    p.add_argument("--started", default="")
    p.add_argument("--only", default="")
    a = p.parse_args()
    files = sorted(pathlib.Path(a.dir).glob("*.json"))
    print(f"Command: `{a.command}`, started {a.started}\n")
    print("| test | version | time | result | figures | checks |")
    print("|---|---|---|---|---|---|")
    for f in files:
        r = json.loads(f.read_text())
        if a.only and r["test"] != a.only:
            continue
        if not a.only and r["test"] == "8_soak":
            continue
        figs = "<br>".join(f"**{k}**: {v}" for k, v in r["figures"] if k != "setup")
        checks = "<br>".join(f"{'PASS' if ok else 'FAIL'} {k}" for k, ok, _ in r["checks"])
        known = r.get("known_issues", [])
        if known:
            checks += "<br>" + "<br>".join(f"KNOWN ISSUE {k}: {d}" for k, d in known)
        result = ("PASS" if r["pass"] else "FAIL") + (f" ({len(known)} known issues)" if known else "")
        setup = dict(r["figures"]).get("setup", "")
        print(f"| {r['test']}<br><sub>{setup}</sub> | {r['version']} | {r['seconds']:.0f} s | {result} | {figs} | {checks} |")


if __name__ == "__main__":
    main()
