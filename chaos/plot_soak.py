"""Plots the soak samples (t_s,rss_bytes,open_fds,event CSV) as one PNG:
kernel RSS (MiB) and open fds over time, reloads and agent restarts marked."""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(src, dst, title):
    t, rss, fds, events = [], [], [], []
    with open(src) as f:
        for row in csv.DictReader(f):
            t.append(float(row["t_s"]) / 60)
            rss.append(int(row["rss_bytes"]) / 1048576)
            fds.append(int(row["open_fds"]))
            events.append(row["event"])
    fig, (a, b) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5))
    a.plot(t, rss, color="tab:blue", marker=".", linewidth=1)
    a.set_ylabel("kernel RSS (MiB)")
    b.plot(t, fds, color="tab:green", marker=".", linewidth=1, drawstyle="steps-post")
    b.set_ylabel("kernel open fds")
    b.set_xlabel("minutes")
    lo, hi = min(fds), max(fds)
    b.set_ylim(lo - 5, hi + 5)
    first = {"reload": True, "restart": True}
    for x, e in zip(t, events):
        for kind, style in (("reload", ":"), ("restart", "--")):
            if kind in e:
                for ax in (a, b):
                    ax.axvline(x, color="grey", linestyle=style, linewidth=0.8,
                               label=("SIGHUP reload" if kind == "reload" else "agent SIGKILL+restart")
                               if first[kind] and ax is a else None)
                first[kind] = False
    a.legend(loc="lower right", fontsize=8)
    a.set_title(title)
    a.grid(alpha=0.3)
    b.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(dst, dpi=90)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "soak")
