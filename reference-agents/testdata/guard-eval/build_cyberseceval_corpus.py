"""Builds a held-out tool-output set from the indirect prompt-injection
cases of Meta's CyberSecEval prompt-injection benchmark, for the response
side of `eval_guard` (blind evaluation; used for no training or tuning).
Built where it is scored and not committed (`held-out/.gitignore`): the
benchmark's text stays out of this project's history.

Source
------
* Repository: https://github.com/meta-llama/PurpleLlama (bare git mirror,
  HEAD 4be64c3a24442b51c76175e6ec67722cc3f5fe38).
* File: `CybersecurityBenchmarks/datasets/prompt_injection/prompt_injection.json`
  (last changed by commit ef5a7748472f17c39d37960de4fd3a63e368d362,
  2025-06-24; 251 entries: 196 `direct`, 55 `indirect`).
* Licence: `CybersecurityBenchmarks/LICENSE` is the MIT License,
  "Copyright (c) Meta Platforms, Inc. and affiliates." (the repository's
  top-level `LICENSE` is the Llama 3.2 Community License, which covers the
  Llama model materials, not CybersecurityBenchmarks).
* Not used: `prompt_injection_multilingual_machine_translated.json`
  (machine translations of the same cases; its request wording is
  translated too, so the cut below does not apply to it).

How rows are built
------------------
Each entry has `prompt_id`, `test_case_prompt` (the system prompt),
`user_input`, `judge_question`, `injection_variant`, `injection_type`,
`risk_category`, `speaking_language`. Only entries with
`injection_type == "indirect"` are taken (55, in file order).

In an indirect entry `user_input` is either
  (a) a user request ending in ": " followed by the data to be processed
      (code, a web page, an HTML table, a resume, a paper, a Wikipedia
      article, an e-mail, a bank transaction), the injection being inside
      that data; or
  (b) the data alone (two HTML pages; the request "Summarize this HTML
      page" is then the entry's `test_case_prompt`).
The row `text` is the DATA part only:
  (a) `user_input` starts with one of the fixed request prefixes in
      `REQUEST_PREFIXES` below (exact string match, each ending in ": ");
      the prefix is removed. If what is left both starts and ends with a
      single quote ('), those two enclosing quotes (quoting the document
      in the request) are removed too; nothing else is changed (no strip).
  (b) otherwise `user_input` must start with "<!DOCTYPE html>" and is
      taken whole.
Any other indirect entry makes the script fail (assertion), so a changed
dataset cannot be silently mis-cut. The system prompt, the request and the
judge question are never in `text`.

Row fields: `text`; `attack` true (every indirect entry carries an
injection; the benchmark has no benign documents); `source`
"cyberseceval/<injection_variant>"; `family` the entry's
`injection_variant`; `origin`
"prompt_injection.json#<index> (prompt_id <id>, cut a|b)"; `split`
"test". Rows are written in file order, JSON with ensure_ascii=False.

Regenerate (Python 3 standard library and `git` only; the file is read with
`git --git-dir=<mirror> show <rev>:<path>`):

    git clone --mirror https://github.com/meta-llama/PurpleLlama /tmp/purplellama.git
    python3 build_cyberseceval_corpus.py /tmp/purplellama.git held-out/cyberseceval.jsonl

Usage: `python3 build_cyberseceval_corpus.py <mirror-git-dir> <out.jsonl> [rev]`
(`rev` defaults to HEAD; the rows above were built at
4be64c3a24442b51c76175e6ec67722cc3f5fe38).
"""

import json
import os
import sys

import held_out_io

PATH = "CybersecurityBenchmarks/datasets/prompt_injection/prompt_injection.json"

REQUEST_PREFIXES = [
    "What is the output of this code: ",
    "Summarize this webpage: ",
    "What is the sum of all populations, given this table of populations: ",
    "Write a personalized outreach email based on this resume: ",
    "What are the main conclusions of this paper: ",
    "What is the capital of 'Zubrowka', given this Wikipedia article: ",
    "Create action items based on email: ",
    "The user recieved the following transaction, please categorize it "
    "based on it's description: ",
]


git_show = held_out_io.git_show


def cut(user_input):
    for p in REQUEST_PREFIXES:
        if user_input.startswith(p):
            data = user_input[len(p):]
            if len(data) >= 2 and data[0] == "'" and data[-1] == "'":
                data = data[1:-1]
            return data, "a"
    assert user_input.startswith("<!DOCTYPE html>"), user_input[:80]
    return user_input, "b"


def main(argv):
    if len(argv) not in (3, 4):
        sys.exit(__doc__)
    git_dir, out = argv[1], argv[2]
    rev = argv[3] if len(argv) == 4 else "HEAD"
    entries = json.loads(git_show(git_dir, rev, PATH))
    rows = []
    for i, e in enumerate(entries):
        if e["injection_type"] != "indirect":
            continue
        text, how = cut(e["user_input"])
        assert text.strip(), i
        rows.append({
            "text": text,
            "attack": True,
            "source": "cyberseceval/" + e["injection_variant"],
            "family": e["injection_variant"],
            "origin": "%s#%d (prompt_id %s, cut %s)"
                      % (os.path.basename(PATH), i, e["prompt_id"], how),
            "split": "test",
        })
    held_out_io.write_jsonl(rows, out)
    print("%d rows -> %s" % (len(rows), out), file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv)
