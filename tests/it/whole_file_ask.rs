//! Asking a small model for the named file's whole content (issue 28's
//! solved gap), end to end through the real binary against the scripted
//! server in "small model" mode. The 1.5B model asked directly ("reply with
//! the complete new solution.py in one code block") solved 19 of 20
//! problems; inside orch it wrote the same file as a JSON `write_file` call
//! that did not parse (a raw `"""`), or copied the file unchanged, then
//! finished with nothing changed. Now a writing stage whose lane has no
//! change and whose task named a file shown whole is asked for that file's
//! complete new content once — instead of the "call `finish`" nudge after
//! prose, or after its `finish` was refused because nothing changed — in a
//! turn sent without tools (no `tools`, no schema); the reply's first fenced
//! block is written to that file (`recovered_from: asked_whole_file`), and
//! the tools come back for the turns after it.

use crate::support::{
    FakeServer, Recorded, Reply, Script, TestRepo, median_stub_repo, record_dir, run_median_stage,
    stage_events, tool_results, write_pipeline,
};
use serde_json::{Value, json};

const SOLVED: &str = "def median(xs):\n    s = sorted(xs)\n    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2\n";

/// The 1.5B model's first reply, as logged: a `write_file` call as JSON
/// text that does not parse (the raw `"""` of a docstring in a string).
const BROKEN_CALL: &str = "```json\n{\"name\": \"write_file\", \"arguments\": {\"path\": \"solution.py\", \"content\": \"def median(xs):\n    \"\"\" The median. \"\"\"\n    raise NotImplementedError\n\"}}\n```";

/// How a model answers when asked directly: prose, then the file.
fn the_file_in_a_block() -> Reply {
    Reply::text(&format!(
        "Here is the implementation:\n\n```python\n{SOLVED}```\n\nIt sorts the list first."
    ))
}

/// A call as a small model writes it under the schema: JSON text alone.
fn json_call(name: &str, arguments: Value) -> Reply {
    Reply::text(&json!({"name": name, "arguments": arguments}).to_string())
}

/// The 1.5B model's write on HumanEval/7: `[]` over the whole file.
fn brackets_over_the_file() -> Reply {
    json_call(
        "write_file",
        json!({"path": "solution.py", "content": "[]"}),
    )
}

/// `finish` as a small model writes it under the schema: JSON text alone.
fn json_finish() -> Reply {
    Reply::text(
        &json!({"name": "finish", "arguments": {"summary": "Implemented median."}}).to_string(),
    )
}

fn last_user_text(req: &Recorded) -> String {
    req.messages()
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Whether a request offers tools in any form: a `tools` array, or a
/// schema for one call.
fn offers_tools(req: &Recorded) -> bool {
    [
        "tools",
        "response_format",
        "json_schema",
        "structured_outputs",
    ]
    .iter()
    .any(|k| req.body.get(k).is_some())
}

fn committed(repo: &TestRepo, run_id: &str) -> String {
    repo.git(&["show", &format!("orch/{run_id}/code:solution.py")])
}

fn recovered(repo: &TestRepo, run_id: &str) -> Vec<Value> {
    stage_events(&record_dir(repo, run_id), "code", "tool_calls_recovered")
}

#[test]
fn a_call_that_does_not_parse_is_followed_by_an_ask_for_the_whole_file() {
    let repo = median_stub_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(BROKEN_CALL),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    assert!(offers_tools(&reqs[0]), "{}", reqs[0].body);
    // The asked turn: the file named, no tools in any form.
    let ask = last_user_text(&reqs[1]);
    assert!(
        ask.contains("complete new content of `solution.py`")
            && ask.contains("one fenced code block"),
        "{ask}"
    );
    assert!(
        !ask.contains("Call `finish`"),
        "not the finish nudge: {ask}"
    );
    assert!(!offers_tools(&reqs[1]), "{}", reqs[1].body);
    // Sent as the system prompt and the ask alone — the task, the file as
    // it is now in a plain fenced block, the instruction — as a user asking
    // the model directly would; the broken turn is left out of the request
    // (the record keeps it).
    let sent = reqs[1].messages();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0], reqs[0].messages()[0]);
    assert!(
        ask.contains("Fix it.")
            && ask.contains(
                "This is `solution.py`:\n```python\ndef median(xs):\n    raise NotImplementedError\n```\n"
            ),
        "{ask}"
    );
    // The block was written, the model saw the diff, the tools came back
    // (under a schema: `auto` switched after the text reply).
    let results = tool_results(&reqs[2]);
    assert!(results[0].starts_with("updated solution.py"), "{results:?}");
    assert!(
        results[0].ends_with(
            "If the change is complete, call `finish` with a short summary; otherwise continue."
        ),
        "{results:?}"
    );
    assert!(offers_tools(&reqs[2]), "{}", reqs[2].body);
    assert_eq!(committed(&repo, &run_id), SOLVED);
    let rec = recovered(&repo, &run_id);
    let asked: Vec<&Value> = rec
        .iter()
        .filter(|e| e["recovered_from"] == "asked_whole_file")
        .collect();
    assert_eq!(asked.len(), 1, "{rec:?}");
    assert_eq!(asked[0]["turn"], 2);
    assert_eq!(asked[0]["tool_calls"][0]["name"], "write_file");
    let nudges = stage_events(&record_dir(&repo, &run_id), "code", "nudge");
    assert_eq!(nudges.len(), 1, "the ask is the one nudge: {nudges:?}");
}

#[test]
fn a_finish_refused_for_no_change_is_followed_by_the_ask() {
    // A model set to constrained calls finishes at once with nothing done
    // (the 1.5B model's "Resolved the issue"): the refusal, then the ask.
    let repo = TestRepo::with_commit(
        &[
            (
                "solution.py",
                "def median(xs):\n    raise NotImplementedError\n",
            ),
            (
                ".orch/orch.toml",
                "default_profile = \"small\"\n\n[profiles.small]\ntool_calling = \"constrained\"\n",
            ),
        ],
        "stub",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![json_finish(), the_file_in_a_block(), json_finish()],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    let tools = stage_events(&record_dir(&repo, &run_id), "code", "tool");
    assert_eq!(
        tools[0]["summary"],
        "error: finish refused: nothing in the lane changed"
    );
    assert!(last_user_text(&reqs[1]).contains("complete new content of `solution.py`"));
    assert!(!offers_tools(&reqs[1]), "{}", reqs[1].body);
    assert!(offers_tools(&reqs[2]), "{}", reqs[2].body);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn the_ask_is_made_once_and_a_reply_without_a_block_still_fails() {
    let repo = median_stub_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("I will implement median now."),
            Reply::text("I implemented median; it sorts the list."),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    // The ask was its nudge: prose again is no result, never a success.
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 2, "asked once");
    let ends = stage_events(&record_dir(&repo, &run_id), "code", "stage_end");
    assert_eq!(ends[0]["status"], "failed", "{}", ends[0]);
    assert_eq!(
        repo.git(&["show", &format!("orch/{run_id}/code:solution.py")]),
        "def median(xs):\n    raise NotImplementedError\n"
    );
}

#[test]
fn no_ask_without_a_named_file_or_for_a_read_only_role() {
    // The task names no file: the usual nudge.
    let repo = median_stub_repo();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "solo",
        "stages:\n  code:\n    role: coder\n    task: Fix it.\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![Reply::text("I will look into it."), Reply::text("Done.")],
    ));
    let (code, _) =
        crate::support::run_on_fake(&repo, &pipeline, "# median\n\nMake median work.\n", &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert!(
        last_user_text(&reqs[1]).contains("Call `finish`"),
        "{}",
        last_user_text(&reqs[1])
    );
    // A read-only role is never asked for a file.
    let repo = median_stub_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("It raises NotImplementedError."),
            Reply::text("Done."),
        ],
    ));
    let _ = run_median_stage(&repo, &server, "explore");
    for req in server.requests_for("code") {
        assert!(
            !last_user_text(&req).contains("complete new content"),
            "{}",
            last_user_text(&req)
        );
    }
}

#[test]
fn a_finish_refused_because_the_change_does_not_parse_is_followed_by_the_ask() {
    // The 1.5B model wrote an example call as the file's content (HumanEval/11:
    // `string_xor('010', '110') -> '100'`), then finished: the refusal, then
    // the ask, showing the file as the task found it.
    let repo = median_stub_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // Calls written as text, as the small model writes them.
            Reply::text(
                &json!({"name": "write_file", "arguments": {"path": "solution.py", "content": "median([3, 1, 2]) -> 2\n"}})
                    .to_string(),
            ),
            json_finish(),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    let ask = last_user_text(&reqs[2]);
    assert!(
        ask.contains("The files you changed do not parse (solution.py:1:")
            && ask.contains("Reply with the complete new content of `solution.py`")
            && ask.contains("This is `solution.py`:\n```python\ndef median(xs):\n    raise NotImplementedError\n```"),
        "{ask}"
    );
    assert_eq!(reqs[2].messages().len(), 2);
    assert!(!offers_tools(&reqs[2]), "{}", reqs[2].body);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_small_model_whose_verify_failed_without_touching_the_named_file_is_asked_for_it() {
    // The lane changed elsewhere (the 1.5B model's own `python3 -m doctest`
    // left a `__pycache__`; here a notes file), so its `finish` was taken and
    // the gate judged it: the named file untouched, it is asked for.
    let repo = median_stub_repo();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "gated",
        "stages:\n  code:\n    role: coder\n    verify: python3 -c \"import solution; assert solution.median([3, 1, 2]) == 2\"\n    task: Fix it.\n",
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text(
                &json!({"name": "write_file", "arguments": {"path": "notes.txt", "content": "median: todo\n"}})
                    .to_string(),
            ),
            json_finish(),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) =
        crate::support::run_on_fake(&repo, &pipeline, crate::support::MEDIAN_ISSUE, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    let ask = last_user_text(&reqs[2]);
    assert!(
        ask.contains("NotImplementedError")
            && ask.contains("The files the task names are unchanged.")
            && ask.contains("Reply with the complete new content of `solution.py`"),
        "{ask}"
    );
    assert_eq!(reqs[2].messages().len(), 2);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_small_model_whose_changed_file_failed_verify_is_asked_again_with_the_file_as_it_is() {
    // As Aider sends a failing test's output back for a whole-file edit:
    // the 1.5B model's asked answers that failed their doctests were
    // followed by JSON edits that never fixed them (issue 28). Each failed
    // round now asks for the file whole again, showing it as it is now.
    let repo = median_stub_repo();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "gated",
        "stages:\n  code:\n    role: coder\n    verify: python3 -c \"import solution; assert solution.median([3, 1, 2]) == 2, 'median([3, 1, 2]) is not 2'\"\n    verify_rounds: 2\n    task: Fix it.\n",
    );
    const WRONG: &str = "def median(xs):\n    return xs[len(xs) // 2]\n";
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("I will implement it now."),
            Reply::text(&format!("```python\n{WRONG}```")),
            json_finish(),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) =
        crate::support::run_on_fake(&repo, &pipeline, crate::support::MEDIAN_ISSUE, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 5);
    // Turn 2 answered the first ask (no change); turn 4 answers the second.
    let again = last_user_text(&reqs[3]);
    assert!(
        again.contains("median([3, 1, 2]) is not 2")
            && again.contains("The files below are as you changed them")
            && again.contains(&format!("```python\n{WRONG}```"))
            && again.contains("Reply with the complete new content of `solution.py`"),
        "{again}"
    );
    assert_eq!(
        reqs[3].messages().len(),
        2,
        "sent alone after the system prompt"
    );
    assert!(!offers_tools(&reqs[3]), "{}", reqs[3].body);
    assert_eq!(recovered(&repo, &run_id).len(), 2);
    assert_eq!(committed(&repo, &run_id), SOLVED);
    let state = crate::support::state_json(&repo, &run_id);
    let code = crate::support::stage_record(&state, "code");
    assert_eq!(code["verify"]["passed"], true, "{code}");
}

#[test]
fn a_small_model_reading_the_shown_file_again_and_again_is_asked_for_it() {
    // The 1.5B model on HumanEval/1 (2026-12-06): `read_file solution.py`
    // three times in a row under the schema (the file was already in its
    // first message), then `finish` with nothing changed. The third
    // identical call — the one warned as a repeat — now brings the ask.
    let repo = median_stub_repo();
    let read = || json_call("read_file", json!({"path": "solution.py"}));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![read(), read(), read(), the_file_in_a_block(), json_finish()],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 5);
    let ask = last_user_text(&reqs[3]);
    assert!(
        ask.contains("You made the same `read_file` call again")
            && ask.contains("Reply with the complete new content of `solution.py`"),
        "{ask}"
    );
    assert_eq!(reqs[3].messages().len(), 2);
    assert!(!offers_tools(&reqs[3]), "{}", reqs[3].body);
    assert_eq!(
        recovered(&repo, &run_id).len(),
        2,
        "the first read, and the answer"
    );
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_small_model_repeating_a_call_while_its_changed_file_does_not_parse_is_asked_for_it_as_it_is() {
    // The 1.5B model on HumanEval/0 and /11 (2026-12-06): it wrote a
    // `solution.py` that does not parse, then went round reading it until
    // its `finish` was refused. The repeat now brings the ask, showing the
    // file as the model left it, with the error.
    let repo = median_stub_repo();
    let broken = "def median(xs):\n    return sorted(xs)[len(xs) // 2\n";
    let read = || json_call("read_file", json!({"path": "solution.py"}));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            json_call(
                "write_file",
                json!({"path": "solution.py", "content": broken}),
            ),
            read(),
            read(),
            read(),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 6);
    let ask = last_user_text(&reqs[4]);
    assert!(
        ask.contains("You made the same `read_file` call again, and the files you changed do not parse (solution.py:")
            && ask.contains(&format!("This is `solution.py`:\n```python\n{broken}```"))
            && ask.contains("Reply with the complete new content of `solution.py`"),
        "{ask}"
    );
    assert!(!offers_tools(&reqs[4]), "{}", reqs[4].body);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_small_model_that_gives_its_failing_file_back_unchanged_is_shown_the_file_as_the_task_found_it()
{
    // The 1.5B model on HumanEval/8 (2026-12-06, with the examples gate):
    // shown its failing file after each failed round, it gave the same
    // body back three times, and the stage failed. An answer that changed
    // nothing is not asked for again the same way: the next ask shows the
    // file as the task found it, with the gate's report.
    let repo = median_stub_repo();
    let dir = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        dir.path(),
        "gated",
        "stages:\n  code:\n    role: coder\n    verify: python3 -c \"import solution; assert solution.median([3, 1, 2]) == 2, 'median([3, 1, 2]) is not 2'\"\n    verify_rounds: 2\n    task: Fix it.\n",
    );
    const WRONG: &str = "def median(xs):\n    return xs[len(xs) // 2]\n";
    let wrong = || Reply::text(&format!("```python\n{WRONG}```"));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::text("I will implement it now."),
            wrong(),
            json_finish(),
            wrong(),
            json_finish(),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) =
        crate::support::run_on_fake(&repo, &pipeline, crate::support::MEDIAN_ISSUE, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 7);
    // Turn 4 answered the ask that showed the file as changed…
    let first = last_user_text(&reqs[3]);
    assert!(
        first.contains("The files below are as you changed them")
            && first.contains(&format!("```python\n{WRONG}```")),
        "{first}"
    );
    // …with the same body: turn 6's ask shows it as the task found it.
    let again = last_user_text(&reqs[5]);
    assert!(
        again.contains("median([3, 1, 2]) is not 2")
            && again.contains("Your last answer gave the files back as they were shown to you. The files below are as the task found them")
            && again.contains("```python\ndef median(xs):\n    raise NotImplementedError\n```")
            && !again.contains(WRONG),
        "{again}"
    );
    assert!(!offers_tools(&reqs[5]), "{}", reqs[5].body);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_repeat_over_a_broken_file_that_lost_the_named_function_shows_the_file_as_the_task_found_it() {
    // The 1.5B model on HumanEval/15 (2026-12-06, with the examples gate):
    // it wrote the docstring's expected output `0 1 2 3 4 5` over
    // `solution.py`, went round `list_files`, and — shown the file as it
    // had left it — answered three asks with the same line. A change that
    // removed what the task names leaves nothing of the task to show: the
    // ask shows the file as the task found it, and says why.
    let repo = median_stub_repo();
    let wreck = "0 1 2 3 4 5";
    let list = || json_call("list_files", json!({"path": "."}));
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            json_call(
                "write_file",
                json!({"path": "solution.py", "content": wreck}),
            ),
            list(),
            list(),
            list(),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 6);
    let ask = last_user_text(&reqs[4]);
    assert!(
        ask.contains("You made the same `list_files` call again, and the files you changed do not parse (solution.py:")
            && ask.contains("Your change also removed `median` from the file, and the task names it: the files below are as the task found them.")
            && ask.contains("This is `solution.py`:\n```python\ndef median(xs):\n    raise NotImplementedError\n```")
            && !ask.contains(wreck),
        "{ask}"
    );
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_small_models_change_that_removed_the_named_function_is_refused_once_and_asked_for() {
    // The 1.5B model on HumanEval/7 (2026-12-06): `write_file solution.py`
    // with the content `[]` (what its test command printed), then `finish`:
    // the file parses, so it was a success whose hidden check failed. The
    // task names `median`; the change removed it from solution.py: the
    // `finish` is refused once, and the model is asked for the file whole.
    let repo = median_stub_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            brackets_over_the_file(),
            json_call("finish", json!({"summary": "done"})),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    // The ask is sent alone; the refusal is in the record.
    let refused = stage_events(&record_dir(&repo, &run_id), "code", "tool")
        .iter()
        .find(|e| e["name"] == "finish")
        .map(|e| e["result"].to_string())
        .unwrap_or_default();
    assert!(
        refused.contains("not accepted yet: the task names `median` (was in `solution.py`), and the change removed it"),
        "{refused}"
    );
    let ask = last_user_text(&reqs[2]);
    assert!(
        ask.contains("Your change removed `median` from the file")
            && ask.contains("raise NotImplementedError")
            && ask.contains("Reply with the complete new content of `solution.py`"),
        "{ask}"
    );
    assert!(!offers_tools(&reqs[2]), "{}", reqs[2].body);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_second_finish_after_the_removal_was_told_is_taken_with_a_note() {
    // The refusal is once: the model that finishes again (after the ask's
    // answer removed the name again) is taken at its word, and its summary
    // says what orch saw.
    let repo = median_stub_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            brackets_over_the_file(),
            json_call("finish", json!({"summary": "done"})),
            Reply::text("```python\nprint(1)\n```"),
            json_call("finish", json!({"summary": "done again"})),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let state = crate::support::state_json(&repo, &run_id);
    let summary = crate::support::stage_record(&state, "code")["summary"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        summary.contains("done again")
            && summary.contains("Note from orch: the change removed what the task names: `median`"),
        "{summary}"
    );
}

/// A reply cut off at the output cap, streamed (`finish_reason: length`).
fn cut_off(text: &str) -> Reply {
    let delta = json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]});
    let end = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]});
    Reply::RawSse(vec![
        format!("data: {delta}\n\n"),
        format!("data: {end}\n\n"),
        "data: [DONE]\n\n".to_owned(),
    ])
}

#[test]
fn a_constrained_call_cut_off_at_its_cap_is_followed_by_the_ask() {
    // The 1.5B model on HumanEval/11 (2026-12-06): under the schema, one
    // `grep` call whose `pattern` was the docstring escaped over and over,
    // 4,096 tokens (14 minutes on this CPU), twice at temperature 0.
    // Constrained turns now carry a cap of their own (1024 by default),
    // and a call cut off there brings the ask for the named file, sent
    // without the schema and under the cap of every turn.
    let repo = median_stub_repo();
    let runaway = r#"{"name": "grep", "arguments": {"pattern": "\\\\\\\\\\\\\\\\"#;
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            // Turn 1 (native): a call as text switches the stage to the schema.
            json_call("list_files", json!({})),
            cut_off(runaway),
            the_file_in_a_block(),
            json_finish(),
        ],
    ));
    let (code, run_id) = run_median_stage(&repo, &server, "coder");
    assert_eq!(code, 0);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 4);
    // The native turn carries the cap of every turn; the constrained one
    // its own, and says so in the record.
    assert_eq!(reqs[0].body["max_tokens"], 4096, "{}", reqs[0].body);
    assert!(offers_tools(&reqs[1]));
    assert_eq!(reqs[1].body["max_tokens"], 1024, "{}", reqs[1].body);
    let requests = stage_events(&record_dir(&repo, &run_id), "code", "request");
    assert_eq!(requests[1]["tool_calls_constrained"], true);
    assert_eq!(requests[1]["max_tokens"], 1024);
    assert!(requests[0].get("max_tokens").is_none(), "{}", requests[0]);
    // The ask: the file as it is, without tools or schema, under 4096.
    let ask = last_user_text(&reqs[2]);
    assert!(
        ask.contains("Your tool call was cut off at 1024 tokens and did not run.")
            && ask.contains("raise NotImplementedError")
            && ask.contains("Reply with the complete new content of `solution.py`"),
        "{ask}"
    );
    assert!(!offers_tools(&reqs[2]), "{}", reqs[2].body);
    assert_eq!(reqs[2].body["max_tokens"], 4096);
    assert_eq!(committed(&repo, &run_id), SOLVED);
}

#[test]
fn a_cut_off_reply_without_a_named_file_is_nudged_then_fails() {
    // No named file to ask for (a read-only role): the nudge of every
    // cut-off reply, then no result — twice the cap, not twice 4096.
    let repo = median_stub_repo();
    let cut = || cut_off(r#"{"name": "grep", "arguments": {"pattern": "\\\\\\\\"#);
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![json_call("list_files", json!({})), cut(), cut()],
    ));
    let (code, _run_id) = run_median_stage(&repo, &server, "explore");
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    assert!(last_user_text(&reqs[2]).contains("cut off at the output token limit"));
    assert_eq!(reqs[2].body["max_tokens"], 1024);
}
