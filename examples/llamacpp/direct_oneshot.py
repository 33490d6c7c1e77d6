#!/usr/bin/env python3
"""The model's direct one-shot answer on an `orch eval` task set made by
`orch eval import humaneval`: its ceiling, next to what orch makes of it.

For each task: one chat request (temperature 0) with the issue and the
text of repo/solution.py; the first ```python block of the reply (else the
whole reply) becomes solution.py in a scratch copy of repo/, and the task's
hidden check.sh runs there, as `orch eval` runs it (ORCH_EVAL_TASK_DIR).
Prints one line per task and a total; --json-out writes the rows.

usage: direct_oneshot.py --tasks DIR --base-url http://127.0.0.1:PORT/v1
                         [--model NAME] [--max-tokens N] [--json-out FILE]
Only the standard library; no API key is sent unless ORCH_API_KEY is set.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

PROMPT = (
    "{issue}\n\nThis is solution.py:\n```python\n{code}```\n\n"
    "Reply with the complete new solution.py in one ```python code block."
)


def ask(base_url, model, text, max_tokens, timeout):
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "temperature": 0,
        "max_tokens": max_tokens,
    }
    req = urllib.request.Request(
        base_url.rstrip("/") + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    key = os.environ.get("ORCH_API_KEY")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        resp = json.load(r)
    return resp["choices"][0]["message"].get("content") or "", resp.get("usage", {})


def code_of(reply):
    m = re.search(r"```(?:python|py)?\s*\n(.*?)```", reply, re.S)
    return m.group(1) if m else reply


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", default="local")
    ap.add_argument("--max-tokens", type=int, default=1024)
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--check-timeout", type=int, default=120)
    ap.add_argument("--json-out")
    a = ap.parse_args()
    tasks = sorted(
        d for d in os.listdir(a.tasks)
        if os.path.isfile(os.path.join(a.tasks, d, "check.sh"))
    )
    rows = []
    for name in tasks:
        task = os.path.abspath(os.path.join(a.tasks, name))
        issue = open(os.path.join(task, "issue.md")).read().strip()
        code = open(os.path.join(task, "repo", "solution.py")).read()
        started = time.time()
        try:
            reply, usage = ask(a.base_url, a.model, PROMPT.format(issue=issue, code=code),
                               a.max_tokens, a.timeout)
            error = None
        except Exception as e:  # the server failed: not solved, and said why
            reply, usage, error = "", {}, str(e)
        secs = time.time() - started
        solved = False
        tail = error or ""
        if error is None:
            work = tempfile.mkdtemp(prefix="direct-")
            try:
                shutil.copytree(os.path.join(task, "repo"), work, dirs_exist_ok=True)
                with open(os.path.join(work, "solution.py"), "w") as f:
                    f.write(code_of(reply))
                env = dict(os.environ, ORCH_EVAL_TASK_DIR=task, PYTHONDONTWRITEBYTECODE="1")
                try:
                    p = subprocess.run([os.path.join(task, "check.sh")], cwd=work, env=env,
                                       capture_output=True, text=True, timeout=a.check_timeout)
                    solved = p.returncode == 0
                    tail = (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]
                    tail = tail[0]
                except subprocess.TimeoutExpired:
                    tail = "check timed out"
            finally:
                shutil.rmtree(work, ignore_errors=True)
        row = {"task": name, "solved": solved, "secs": round(secs, 1),
               "completion_tokens": usage.get("completion_tokens"),
               "prompt_tokens": usage.get("prompt_tokens"), "check": tail}
        rows.append(row)
        print(f"direct  {name:16} {'solved' if solved else 'FAILED':7} {secs:7.1f}s  "
              f"{row['completion_tokens']} completion tokens  {tail[:100]}", flush=True)
    solved = sum(r["solved"] for r in rows)
    print(f"direct  total: {solved}/{len(rows)} solved", flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
