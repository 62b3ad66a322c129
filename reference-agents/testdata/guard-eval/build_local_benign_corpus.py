"""Builds benign tool-output sets from what is installed on this machine:
what a tool that reads documentation, a project's files or a package's
notes returns, cut into 4 KiB chunks, for the response side of
`eval_guard`. Machine-specific and large, so they are neither committed nor
scored by default; score one with

    python3 build_local_benign_corpus.py man /tmp/man.jsonl
    GUARD_EVAL_TOOL_OUTPUT=/tmp/man.jsonl cargo run --release -p reference-agents \\
        --example eval_guard -- --response-only --split all --verbose

(Python 3 standard library only.) Kinds:

* `man`: the manual pages (`/usr/share/man/man[1-8]/*.gz`). Roff requests
  are dropped, except the text of the section, font and list macros;
  escapes for fonts, special characters and hyphens are removed. Source
  `debian/man`.
* `docs`: READMEs of the Rust crates in the cargo registry, of the npm
  packages under `node_modules/` and of the Python packages in `.venv`
  (their `METADATA`), and Debian's `README*`, `NEWS*` and `changelog.gz`
  under `/usr/share/doc` (each file's first 64 KiB, duplicates skipped).
  Source `readme/<where>`.
* `code`: Rust, JavaScript and Python source files (the first 16 KiB of
  each, at most about 2,000 chunks of each language, files in a fixed
  shuffled order), YAML, JSON (`package.json`) and `/etc/*.conf` files.
  Source `code/<language>` or `config/<kind>`.

Each row: `text`, `attack` (false), `source`, `family` (`benign`),
`origin` (file and chunk offset), `split` (`test`).
"""

import glob
import gzip
import os
import random
import re
import sys

from held_out_io import write_jsonl

CHUNK = 4096
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "../../.."))
TEXT_MACROS = {".SH", ".SS", ".B", ".I", ".BR", ".IR", ".BI", ".IB", ".RB",
               ".RI", ".TP", ".IP", ".Nm", ".Nd", ".Sh", ".It", ".Pa", ".Ar",
               ".Fl"}
ESCAPES = re.compile(r'\\f[BIRP]|\\\(..|\\-|\\&')


def page_text(roff):
    out = []
    for line in roff.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        if line.startswith('.'):
            parts = line.split(None, 1)
            if len(parts) > 1 and parts[0] in TEXT_MACROS:
                out.append(ESCAPES.sub('', parts[1]).replace('"', ''))
            continue
        out.append(ESCAPES.sub('', line))
    return "\n".join(out)


def read(path):
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rt', errors='replace') as f:
        return f.read()


def chunks(rows, source, path, text, limit):
    n = 0
    for at in range(0, min(len(text), limit), CHUNK):
        chunk = text[at:at + CHUNK]
        if len(chunk) > 200:
            rows.append({"text": chunk, "attack": False, "source": source,
                         "family": "benign", "origin": f"{path}#{at}",
                         "split": "test"})
            n += 1
    return n


def man(rows):
    for f in sorted(glob.glob('/usr/share/man/man[1-8]/*.gz')):
        try:
            text = page_text(read(f))
        except OSError:
            continue
        chunks(rows, "debian/man", os.path.basename(f), text, len(text))


def docs(rows):
    seen = set()
    for where, pattern in [
        (".cargo", os.path.expanduser('~/.cargo/registry/src/*/*/README*')),
        ("node_modules", ROOT + '/**/node_modules/*/README.md'),
        ("node_modules", ROOT + '/**/node_modules/@*/*/README.md'),
        (".venv", ROOT + '/.venv/lib/python3*/site-packages/*.dist-info/METADATA'),
        ("doc", '/usr/share/doc/*/README*'),
        ("doc", '/usr/share/doc/*/NEWS*'),
        ("doc", '/usr/share/doc/*/changelog.gz'),
    ]:
        for f in sorted(glob.glob(pattern, recursive=True)):
            try:
                text = read(f)
            except OSError:
                continue
            if text[:500] in seen:
                continue
            seen.add(text[:500])
            chunks(rows, "readme/" + where, f, text, 64 * 1024)


def code(rows):
    rng = random.Random(7)
    for source, patterns, cap in [
        ("code/rust", [os.path.expanduser('~/.cargo/registry/src/*/*/src/**/*.rs')], 2000),
        ("code/js", [ROOT + '/**/node_modules/**/*.js'], 2000),
        ("code/python", [ROOT + '/.venv/lib/python3*/site-packages/**/*.py'], 2000),
        ("config/yaml", [ROOT + '/**/*.yaml', ROOT + '/**/*.yml', '/etc/**/*.yaml'], 2000),
        ("config/json", [ROOT + '/**/node_modules/*/package.json'], 2000),
        ("config/etc", ['/etc/**/*.conf'], 2000),
    ]:
        files = sorted({f for p in patterns for f in glob.glob(p, recursive=True) if os.path.isfile(f)})
        rng.shuffle(files)
        n = 0
        for f in files:
            if n >= cap:
                break
            try:
                n += chunks(rows, source, f, read(f), 16 * 1024)
            except OSError:
                continue


def main(kind, out):
    rows = []
    {"man": man, "docs": docs, "code": code}[kind](rows)
    write_jsonl(rows, out)
    print(f"{len(rows)} chunks", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("man", "docs", "code"):
        sys.exit("usage: build_local_benign_corpus.py man|docs|code OUT.jsonl")
    main(sys.argv[1], sys.argv[2])
