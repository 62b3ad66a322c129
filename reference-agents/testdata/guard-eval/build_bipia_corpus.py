"""Builds a held-out tool-output set from Microsoft's BIPIA benchmark
(https://github.com/microsoft/BIPIA, MIT licence): documents a tool would
return (e-mails, tables, Stack Overflow answers), benign and with BIPIA's
indirect prompt injections inserted, for the response side of
`eval_guard`: `held-out/bipia.jsonl`, used for no training. Built where
it is scored and not committed (`held-out/.gitignore`): the benchmark's
text stays out of this project's history.

Development time only; nothing is downloaded at run time or in tests.
The BIPIA repository is read from a bare git mirror (no work tree), e.g.
one made with

    git clone --mirror https://github.com/microsoft/BIPIA /tmp/bipia.git

(the figures in the guard's docs were measured on a file built from a
mirror at commit
1a2a91da6bb12838e05d1b2e54d98e2f37b835f3, 2024-02-26), then

    python3 build_bipia_corpus.py <mirror-git-dir> held-out/bipia.jsonl

(Python 3 standard library and the `git` command only; files are read
with `git --git-dir=<mirror> show HEAD:<path>`.)

Each row: `text`, `attack` (bool), `source` (`bipia/email`,
`bipia/table`, `bipia/code`), `family` (BIPIA's attack category name,
`benign` otherwise), `origin` (context file and line index; for attacks
also the attack file, category, variant index and insert position),
`split` (`test` for every row: the whole file is held out).

BIPIA files used:
* contexts: `benchmark/email/{test,train}.jsonl` (`context`, a string),
  `benchmark/table/{test,train}.jsonl` (`context`, a string),
  `benchmark/code/{test,train}.jsonl` (`context`, a list of lines joined
  with "\\n", as `bipia/data/code.py` does);
* attacks: `benchmark/text_attack_test.json` and
  `benchmark/text_attack_train.json` for e-mails and tables,
  `benchmark/code_attack_test.json` and `benchmark/code_attack_train.json`
  for code (as BIPIA pairs them). Each file maps a category to 5 attack
  strings. The category "Language Translation" appears in both text files
  (different strings); its 10 strings form one family here.

Not used: BIPIA's WebQA (`benchmark/qa`, NewsQA) and summarisation
(`benchmark/abstract`, XSum) tasks, whose contexts are not in the
repository (they need external downloads), and its base64 "stealth"
variant.

Insertion follows `bipia/data/utils.py`: `end` is context + "\\n" +
attack, `start` is attack + "\\n" + context, `middle` is
context[:s] + "\\n" + attack + "\\n" + context[s:] for the start s of a
randomly chosen sentence. BIPIA finds sentence starts with NLTK's Punkt
tokenizer; this script (stdlib only) approximates it with a regular
expression (a start after `.`, `!` or `?` and whitespace), leaves out
offset 0 so that `middle` is inside the document, and falls back to line
starts when a context has a single sentence (tables, code), then to word
starts (a few e-mails with neither).

Benign rows: every context (test and train files), deduplicated by text.
Attack rows: for each (source, category), PER_PAIR rows (seeded random,
seed 67), each a random deduplicated context of that source, a category
string chosen round-robin over a shuffled order of its variants, and the
positions start/middle/end in turn; at most 40 per pair and MAX_ATTACKS
overall. Texts of 20,000 characters or more are left out.
"""

import json
import random
import re
import sys

import held_out_io

SEED = 67
MAX_CHARS = 20000
MAX_ATTACKS = 700
PER_PAIR = {"email": 9, "table": 9, "code": 8}  # 29+29 text, 20 code categories

CONTEXTS = {
    "email": ["benchmark/email/test.jsonl", "benchmark/email/train.jsonl"],
    "table": ["benchmark/table/test.jsonl", "benchmark/table/train.jsonl"],
    "code": ["benchmark/code/test.jsonl", "benchmark/code/train.jsonl"],
}
TEXT_ATTACKS = ["benchmark/text_attack_test.json", "benchmark/text_attack_train.json"]
CODE_ATTACKS = ["benchmark/code_attack_test.json", "benchmark/code_attack_train.json"]
ATTACKS = {"email": TEXT_ATTACKS, "table": TEXT_ATTACKS, "code": CODE_ATTACKS}
POSITIONS = ["start", "middle", "end"]


def git_show(git_dir, path):
    return held_out_io.git_show(git_dir, "HEAD", path)


def load_contexts(git_dir, task):
    """Deduplicated (text, origin) of a task's context files."""
    seen, out = set(), []
    for path in CONTEXTS[task]:
        for i, line in enumerate(git_show(git_dir, path).splitlines()):
            if not line.strip():
                continue
            ctx = json.loads(line)["context"]
            if isinstance(ctx, list):
                ctx = "\n".join(ctx)
            if ctx in seen or not ctx.strip():
                continue
            seen.add(ctx)
            out.append((ctx, f"{path}#{i}"))
    return out


def load_attacks(git_dir, task):
    """{category: [(attack string, origin)]}, in file order."""
    out = {}
    for path in ATTACKS[task]:
        for cat, strings in json.loads(git_show(git_dir, path)).items():
            for i, s in enumerate(strings):
                out.setdefault(cat, []).append((s, f"{path}:{cat}[{i}]"))
    return out


SENT_START = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)")


def middle_offsets(context):
    offs = sorted({m.end() for m in SENT_START.finditer(context)} - {0, len(context)})
    if not offs:
        offs = [m.end() for m in re.finditer(r"\n(?=\S)", context) if m.end() < len(context)]
    if not offs:
        offs = [m.end() for m in re.finditer(r" (?=\S)", context) if m.end() < len(context)]
    return offs or [0]


def insert(context, attack, position, rng):
    if position == "end":
        return "\n".join([context, attack])
    if position == "start":
        return "\n".join([attack, context])
    s = rng.choice(middle_offsets(context))
    return "\n".join([context[:s], attack, context[s:]])


def main(git_dir, out_path):
    rng = random.Random(SEED)
    rows, skipped = [], 0
    contexts = {t: load_contexts(git_dir, t) for t in CONTEXTS}
    for task, ctxs in contexts.items():
        for text, origin in ctxs:
            if len(text) >= MAX_CHARS:
                skipped += 1
                continue
            rows.append(dict(text=text, attack=False, source=f"bipia/{task}",
                             family="benign", origin=origin, split="test"))
    n_attacks = 0
    for task, ctxs in contexts.items():
        attacks = load_attacks(git_dir, task)
        for cat in attacks:
            variants = attacks[cat][:]
            rng.shuffle(variants)
            start_pos = rng.randrange(len(POSITIONS))
            n, tries = 0, 0
            while n < min(PER_PAIR[task], 40) and tries < 100 and n_attacks < MAX_ATTACKS:
                tries += 1
                attack, a_origin = variants[n % len(variants)]
                position = POSITIONS[(start_pos + n) % len(POSITIONS)]
                context, c_origin = rng.choice(ctxs)
                text = insert(context, attack, position, rng)
                if len(text) >= MAX_CHARS:
                    continue
                rows.append(dict(text=text, attack=True, source=f"bipia/{task}",
                                 family=cat,
                                 origin=f"{c_origin}; attack={a_origin}; position={position}",
                                 split="test"))
                n += 1
                n_attacks += 1
    seen, uniq = set(), []
    for r in rows:
        if r["text"] not in seen:
            seen.add(r["text"])
            uniq.append(r)
    held_out_io.write_jsonl(uniq, out_path)
    print(f"{len(uniq)} rows ({sum(r['attack'] for r in uniq)} attacks), "
          f"{skipped} contexts of {MAX_CHARS}+ characters left out", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: build_bipia_corpus.py <mirror-git-dir> <out.jsonl>")
    main(sys.argv[1], sys.argv[2])
