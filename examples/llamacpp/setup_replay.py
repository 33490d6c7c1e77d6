"""Turn an `orch setup` record into an `orch-replay/1` file.

Usage: setup_replay.py RECORD_DIR OUT.json [NOTE]

The replay holds the assistant turns of `transcript.json` (text and tool
calls, arguments verbatim) under the agent path `setup`, each with the
usage its `response` event in `log.jsonl` recorded, so
`orch setup --plan-only --replay OUT.json "<goal>"` replays the model's side
of the run through the real binary (the tools run again on this machine).
"""

import json
import pathlib
import sys


def main() -> int:
    rec, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    note = sys.argv[3] if len(sys.argv) > 3 else ""
    transcript = json.loads((rec / "transcript.json").read_text())
    events = [json.loads(l) for l in (rec / "log.jsonl").read_text().splitlines() if l.strip()]
    responses = [e for e in events if e.get("event") == "response"]
    turns = []
    for m in transcript:
        if m.get("role") != "assistant":
            continue
        turn = {}
        if m.get("content"):
            turn["content"] = m["content"]
        calls = []
        for c in m.get("tool_calls") or []:
            f = c.get("function", c)
            calls.append({"id": c.get("id"), "name": f["name"], "arguments": f.get("arguments", "")})
        if calls:
            turn["tool_calls"] = calls
        if len(turns) < len(responses):
            r = responses[len(turns)]
            turn["usage"] = {"prompt_tokens": r["prompt_tokens"], "completion_tokens": r["completion_tokens"]}
        turns.append(turn)
    replay = {"format": "orch-replay/1", "note": note, "agents": {"setup": turns}}
    out.write_text(json.dumps(replay, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {out}: {len(turns)} setup turns")
    return 0


if __name__ == "__main__":
    sys.exit(main())
