#!/usr/bin/env python3
"""A tool-call tier from the Berkeley Function-Calling Leaderboard data (the
`bfcl-eval` PyPI package), sent through orch's own client: each question
goes to `orch eval call` (one request with the question's functions as
tools, orch's retries and its recovery of calls written as text), and the
calls it prints are scored.

Categories: simple (simple_python), multiple, parallel, irrelevance.
- simple/multiple: correct = exactly one call, of the right function, every
  argument among the answer's allowed values (an absent optional argument
  is allowed where the answer lists "");
- parallel: correct = as many calls as the answer has, matched one to one
  (in any order);
- irrelevance: correct = no call (a refusal): none of the functions fits.
- well-formed = every call names an offered function and its arguments are
  a JSON object (for irrelevance: not scored).
This is a simplified version of BFCL's AST checker (strings compared after
lower-casing and dropping spaces and punctuation, as BFCL does; numbers by
value; lists and dicts element-wise); the numbers are this script's, not
the leaderboard's.

usage: bfcl_tier.py --orch PATH [--data DIR] [--limit N] [--categories simple,multiple,parallel,irrelevance]
       [--json-out FILE] [-- extra orch flags, e.g. --base-url URL --model NAME --temperature 0]
Without --data, `pip download --no-deps bfcl-eval==2026.3.23` fetches the
package into ~/.cache/orch-bfcl and its data/ is used. The model comes from
the extra flags or ORCH_BASE_URL / ORCH_MODEL.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile

VERSION = "2026.3.23"
FILES = {
    "simple": "BFCL_v4_simple_python.json",
    "multiple": "BFCL_v4_multiple.json",
    "parallel": "BFCL_v4_parallel.json",
    "irrelevance": "BFCL_v4_irrelevance.json",
}
TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def fetch_data():
    cache = os.path.expanduser("~/.cache/orch-bfcl")
    data = os.path.join(cache, "bfcl_eval", "data")
    if os.path.isdir(data):
        return data
    os.makedirs(cache, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                    f"bfcl-eval=={VERSION}", "-d", cache], check=True)
    whl = glob.glob(os.path.join(cache, "bfcl_eval-*.whl"))[0]
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if n.startswith("bfcl_eval/data/") and not n.startswith("bfcl_eval/data/unused"):
                z.extract(n, cache)
    return data


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def schema(p):
    """BFCL's parameter types to JSON Schema (as BFCL does for OpenAI)."""
    if isinstance(p, dict):
        out = {}
        for k, v in p.items():
            if k == "type" and isinstance(v, str):
                t = TYPES.get(v, v)
                if t is not None:
                    out["type"] = t
            elif k == "optional":
                continue
            else:
                out[k] = schema(v)
        return out
    if isinstance(p, list):
        return [schema(x) for x in p]
    return p


def tool_name(name):
    # OpenAI-style tool names allow [a-zA-Z0-9_-] only (BFCL renames the same way).
    return re.sub(r"[^a-zA-Z0-9_-]", "_", name)


def norm(v):
    if isinstance(v, str):
        return re.sub(r"[\s,./\-_*^]", "", v.lower())
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, dict):
        return {k: norm(x) for k, x in v.items()}
    return v


def arg_ok(value, allowed):
    return any(norm(value) == norm(a) for a in allowed if a != "")


def call_ok(call, truth, functions):
    """Whether `call` ({name, arguments}) matches one ground-truth entry."""
    (fname, params), = truth.items()
    if call["name"] != tool_name(fname) or not isinstance(call["arguments"], dict):
        return False
    spec = next((f for f in functions if f["name"] == fname), None)
    known = set((spec or {}).get("parameters", {}).get("properties", {}))
    args = call["arguments"]
    if any(k not in known for k in args):
        return False
    for k, allowed in params.items():
        if k in args:
            if not arg_ok(args[k], allowed):
                return False
        elif "" not in allowed:
            return False
    return True


def matched(calls, truths, functions):
    if len(calls) != len(truths):
        return False
    left = list(truths)
    for c in calls:
        hit = next((t for t in left if call_ok(c, t, functions)), None)
        if hit is None:
            return False
        left.remove(hit)
    return True


def ask(orch, extra, question, functions):
    req = {
        "messages": [{"role": m["role"], "content": m["content"]} for m in question[0]],
        "tools": [{"name": tool_name(f["name"]), "description": f.get("description", ""),
                   "parameters": schema(f.get("parameters", {}))} for f in functions],
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
        path = f.name
    try:
        p = subprocess.run([orch, "eval", "call", "--request", path, *extra],
                           capture_output=True, text=True)
    finally:
        os.unlink(path)
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1:] or ["(no error text)"]
    return json.loads(p.stdout), None


def main():
    argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--orch", required=True)
    ap.add_argument("--data")
    ap.add_argument("--limit", type=int, default=0, help="questions per category (0: all)")
    ap.add_argument("--categories", default="simple,multiple,parallel,irrelevance")
    ap.add_argument("--json-out")
    a = ap.parse_args(argv)
    data = a.data or fetch_data()
    rows = []
    for cat in a.categories.split(","):
        questions = load(os.path.join(data, FILES[cat]))
        answers = {}
        if cat != "irrelevance":
            answers = {r["id"]: r["ground_truth"]
                       for r in load(os.path.join(data, "possible_answer", FILES[cat]))}
        if a.limit:
            questions = questions[: a.limit]
        for q in questions:
            started = time.time()
            out, err = ask(a.orch, extra, q["question"], q["function"])
            secs = time.time() - started
            row = {"category": cat, "id": q["id"], "secs": round(secs, 1), "error": err}
            if out is None:
                row.update(well_formed=False, correct=False, calls=[])
            else:
                calls = out["tool_calls"]
                names = {tool_name(f["name"]) for f in q["function"]}
                well = all(c["name"] in names and isinstance(c["arguments"], dict) for c in calls)
                if cat == "irrelevance":
                    correct = not calls
                else:
                    correct = well and matched(calls, answers[q["id"]], q["function"])
                row.update(well_formed=well and bool(calls) if cat != "irrelevance" else None,
                           correct=correct, calls=calls,
                           recovered_from=out.get("recovered_from"),
                           completion_tokens=out.get("completion_tokens"))
            rows.append(row)
            print(f"bfcl  {cat:11} {q['id']:20} {'correct' if row['correct'] else 'wrong':7} "
                  f"{secs:6.1f}s  {json.dumps(row['calls'])[:120] if not err else err}", flush=True)
    print("bfcl  category     n   well-formed calls   correct   (refusals for irrelevance)")
    for cat in a.categories.split(","):
        rs = [r for r in rows if r["category"] == cat]
        if not rs:
            continue
        wf = "-" if cat == "irrelevance" else f"{sum(bool(r['well_formed']) for r in rs)}/{len(rs)}"
        print(f"bfcl  {cat:11} {len(rs):3}   {wf:>17}   {sum(r['correct'] for r in rs)}/{len(rs)}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
