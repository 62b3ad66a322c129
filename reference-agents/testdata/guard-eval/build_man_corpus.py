"""Builds a benign tool-output set from the manual pages installed on this
machine (`/usr/share/man/man[1-8]/*.gz`): what a tool that reads
documentation returns, cut into 4 KiB chunks, for the response side of
`eval_guard`. Machine-specific and large (tens of thousands of chunks), so
it is not committed and not scored by default; score it with

    python3 build_man_corpus.py /tmp/man.jsonl
    GUARD_EVAL_TOOL_OUTPUT=/tmp/man.jsonl cargo run --release -p reference-agents \\
        --example eval_guard -- --response-only --split all --verbose

(Python 3 standard library only.) Roff requests are dropped, except the
text of the section, font and list macros; escapes for fonts, special
characters and hyphens are removed. Each row: `text`, `attack` (false),
`source` (`debian/man`), `family` (`benign`), `origin` (page file and
chunk offset), `split` (`test`).
"""

import glob
import gzip
import os
import re
import sys

from held_out_io import write_jsonl

CHUNK = 4096
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


def main(out):
    rows = []
    for f in sorted(glob.glob('/usr/share/man/man[1-8]/*.gz')):
        try:
            text = page_text(gzip.open(f, 'rt', errors='replace').read())
        except OSError:
            continue
        for at in range(0, len(text), CHUNK):
            chunk = text[at:at + CHUNK]
            if len(chunk) > 200:
                rows.append({"text": chunk, "attack": False,
                             "source": "debian/man", "family": "benign",
                             "origin": f"{os.path.basename(f)}#{at}",
                             "split": "test"})
    write_jsonl(rows, out)
    print(f"{len(rows)} chunks", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1])
