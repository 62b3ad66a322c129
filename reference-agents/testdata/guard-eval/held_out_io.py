"""What the held-out build scripts share: reading a file of a bare git
mirror at a revision, and writing rows as JSON lines."""

import json
import os
import subprocess


def git_show(git_dir, rev, path):
    """The text of `path` at `rev` in the bare mirror `git_dir`."""
    return subprocess.run(
        ["git", "--git-dir=" + git_dir, "show", rev + ":" + path],
        check=True, stdout=subprocess.PIPE).stdout.decode("utf-8")


def jsonl(text):
    """The objects of JSON-lines `text` (blank lines skipped)."""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def write_jsonl(rows, out):
    """Writes `rows` to `out`, one JSON object a line (UTF-8, not escaped)."""
    d = os.path.dirname(out)
    if d:
        os.makedirs(d, exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
