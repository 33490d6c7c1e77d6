//! Finishing honestly with a small model (issue 28.6–7), end to end through
//! the real binary: a writing role's prose reply after it changed the lane
//! is its `finish` only when the stage's verify gate passes on that tree
//! (`finish_from_text`); without a gate the old rule holds (one nudge, then
//! the stage fails). A pipeline-wide `verify:` is every stage's default. A
//! reviewer is shown the verify result of the change it reviews and is told
//! once when it approves a change whose verify failed. A docs stage not
//! marked `required` that produces nothing ends `no_change`, and the run
//! keeps the coder's and reviewer's work.

use crate::support::{
    FakeServer, Reply, Script, TestRepo, fix_add, record_dir, stage_events, stage_record,
    state_json, user_text, write_pipeline,
};
use serde_json::Value;

const ISSUE: &str = "# add() subtracts\n\n`calc.add(2, 3)` returns -1; it should return 5.\n";
const CHECK: &str =
    "grep -q 'a + b' calc.py || { echo 'FAIL: add(2, 3) still returns -1'; exit 1; }";
/// A check no change of these scripts makes pass.
const NEVER: &str = "grep -q 'a [*] b' calc.py || { echo 'FAIL: wanted a product'; exit 1; }";
/// The exit code of a run whose optional stage produced nothing (README).
const OPTIONAL_NOT_DONE: i32 = 10;

fn buggy_repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n"),
        ],
        "calc 0.1",
    )
}

/// Runs the pipeline `yaml` (or a built-in by name) on `repo`: exit code, run id.
fn run(repo: &TestRepo, yaml: &str, server: &FakeServer) -> (i32, String) {
    let scratch = tempfile::tempdir().unwrap();
    if !yaml.contains('\n') {
        return crate::support::run_on_fake(repo, yaml, ISSUE, server);
    }
    let pipeline = write_pipeline(scratch.path(), "small", yaml);
    crate::support::run_on_fake(repo, &pipeline, ISSUE, server)
}

fn pr_md(repo: &TestRepo, run_id: &str) -> String {
    std::fs::read_to_string(record_dir(repo, run_id).join("pr.md")).unwrap()
}

#[test]
fn prose_after_a_passing_verify_finishes_the_stage_from_text() {
    let repo = buggy_repo();
    let prose = "I changed add() in calc.py so it returns a + b. Done.";
    let server =
        FakeServer::start(Script::new().agent("code", vec![fix_add("c1"), Reply::text(prose)]));
    let yaml = format!("stages:\n  code:\n    role: coder\n    verify: \"{CHECK}\"\n");
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 0);
    // No nudge: the prose was taken at once, and the gate passed.
    assert_eq!(server.requests_for("code").len(), 2);

    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "succeeded", "{stage}");
    assert_eq!(stage["finish_from_text"], true, "{stage}");
    assert_eq!(stage["summary"], prose);
    assert_eq!(stage["verify"]["passed"], true);

    let record = record_dir(&repo, &run_id);
    let taken = stage_events(&record, "code", "finish_from_text");
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0]["turn"], 2);
    let end = stage_events(&record, "code", "stage_end");
    assert_eq!(end[0]["finish_from_text"], true, "{end:?}");

    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/code")]);
    assert!(msg.contains("Orch-Verify: pass"), "{msg}");
    assert!(msg.contains("Orch-Finish: text (verify passed)"), "{msg}");
    assert!(pr_md(&repo, &run_id).contains("finished in prose"));
}

#[test]
fn prose_without_a_verify_gate_is_nudged_once_then_fails() {
    let repo = buggy_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            fix_add("c1"),
            Reply::text("add() is fixed."),
            Reply::text("Really, add() is fixed."),
        ],
    ));
    let (code, run_id) = run(&repo, "stages:\n  code:\n    role: coder\n", &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    assert!(user_text(&reqs[2]).contains("Call `finish` with a summary"));
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "failed");
    assert!(
        stage["reason"]
            .as_str()
            .unwrap()
            .contains("without calling `finish`"),
        "{stage}"
    );
    assert_ne!(stage["finish_from_text"], true);
}

#[test]
fn prose_with_a_failing_verify_gets_its_output_and_fails_when_it_never_passes() {
    let repo = buggy_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            fix_add("c1"),
            Reply::text("Done: add() adds."),
            Reply::text("Done, I am sure."),
        ],
    ));
    let yaml = format!(
        "stages:\n  code:\n    role: coder\n    verify: \"{NEVER}\"\n    verify_rounds: 1\n"
    );
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 1);
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    let told = user_text(&reqs[2]);
    assert!(told.contains("FAIL: wanted a product"), "{told}");
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "failed");
    let reason = stage["reason"].as_str().unwrap();
    assert!(reason.contains("verify failed"), "{reason}");
    assert_eq!(stage["verify"]["passed"], false);
    assert_ne!(stage["finish_from_text"], true);
    // The work is kept on the stage branch.
    let calc = repo.git(&["show", &format!("orch/{run_id}/code:calc.py")]);
    assert!(calc.contains("a + b"), "{calc}");
}

#[test]
fn a_pipeline_wide_verify_is_every_stage_default_and_reaches_the_reviewer() {
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![fix_add("c1"), Reply::text("add() now adds a + b.")],
            )
            .agent(
                "review",
                vec![Reply::finish("r1", "Correct.", Some("approve"))],
            ),
    );
    let yaml = format!(
        "verify: \"{CHECK}\"\nstages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n"
    );
    let (code, run_id) = run(&repo, &yaml, &server);
    assert_eq!(code, 0);
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["finish_from_text"], true, "{stage}");
    assert_eq!(stage["verify"]["commands"][0], CHECK);
    let review = user_text(&server.requests_for("review")[0]);
    assert!(
        review.contains(&format!("Verify: pass (`{CHECK}` exit 0; 1 round)")),
        "{review}"
    );
}

/// A coder that changes nothing useful.
fn unfixed_coder() -> Vec<Reply> {
    vec![
        Reply::tool_call(
            "c1",
            "write_file",
            serde_json::json!({"path": "NOTES.md", "content": "looked\n"}),
        ),
        Reply::finish("c2", "Looked at add().", None),
    ]
}

/// A coder, then a reviewer whose own verify runs the check on the change
/// it reviews (one rework round).
fn reviewed_with_verify() -> String {
    format!(
        "stages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n    verify: \"{CHECK}\"\n    rework: {{ stage: code, max_rounds: 1 }}\n"
    )
}

#[test]
fn a_reviewer_approving_a_change_whose_verify_failed_is_told_once() {
    let repo = buggy_repo();
    let server = FakeServer::start(Script::new().agent("code", unfixed_coder()).agent(
        "review",
        vec![
            Reply::finish("r1", "Looks fine.", Some("approve")),
            Reply::finish("r2", "Approving anyway.", Some("approve")),
        ],
    ));
    let (code, run_id) = run(&repo, &reviewed_with_verify(), &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("review");
    assert_eq!(reqs.len(), 2, "told once, then its second approve stands");
    let told = user_text(&reqs[1]);
    assert!(
        told.contains("The change you approve failed its verify"),
        "{told}"
    );
    assert!(told.contains("FAIL: add(2, 3) still returns -1"), "{told}");
    let state = state_json(&repo, &run_id);
    let review = stage_record(&state, "review");
    assert_eq!(review["status"], "succeeded", "{review}");
    assert_eq!(review["verdict"], "approve");
    assert_eq!(review["approved_despite_failed_verify"], true, "{review}");
    assert_eq!(review["verify"]["passed"], false);
    let pr = pr_md(&repo, &run_id);
    assert!(pr.contains("approved despite a failed verify"), "{pr}");
}

#[test]
fn a_reviewer_told_of_a_failed_verify_may_ask_for_changes_and_the_coder_sees_its_output() {
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent("code", unfixed_coder())
            .agent(
                "code.r2",
                vec![fix_add("c3"), Reply::finish("c4", "Fixed.", None)],
            )
            .agent(
                "review",
                vec![
                    Reply::finish("r1", "Looks fine.", Some("approve")),
                    Reply::finish("r2", "add() still subtracts.", Some("request_changes")),
                ],
            )
            .agent(
                "review.r2",
                vec![Reply::finish("r3", "Fixed now.", Some("approve"))],
            ),
    );
    let (code, run_id) = run(&repo, &reviewed_with_verify(), &server);
    assert_eq!(code, 0);
    let state = state_json(&repo, &run_id);
    let review = stage_record(&state, "review");
    assert_eq!(review["verdict"], "request_changes");
    assert_ne!(review["approved_despite_failed_verify"], true);
    // The coder's second round is shown the review's failed verify with its output.
    let told = user_text(&server.requests_for("code.r2")[0]);
    assert!(told.contains("Verify: fail"), "{told}");
    assert!(told.contains("FAIL: add(2, 3) still returns -1"), "{told}");
    let review2 = stage_record(&state, "review.r2");
    assert_eq!(review2["verify"]["passed"], true, "{review2}");
}

/// The built-in pipeline's coder fixes and finishes, its reviewer
/// approves, and its docs stage answers with `docs`.
fn fixed_and_approved_then_docs(docs: Vec<Reply>) -> FakeServer {
    FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![fix_add("c1"), Reply::finish("c2", "add() adds.", None)],
            )
            .agent(
                "review",
                vec![Reply::finish("r1", "Correct.", Some("approve"))],
            )
            .agent("docs", docs),
    )
}

/// Its docs stage answers in prose twice.
fn docs_in_prose() -> FakeServer {
    let prose = || Reply::text("Document the change made for this issue.");
    fixed_and_approved_then_docs(vec![prose(), prose()])
}

/// The pipeline of `issue-to-pr` with its docs stage required.
const DOCS_REQUIRED: &str = "stages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n  docs:\n    role: docs\n    needs: [review]\n    required: true\n";

#[test]
fn a_docs_stage_that_produces_nothing_ends_no_change_and_the_run_keeps_the_fix() {
    let repo = buggy_repo();
    let server = docs_in_prose();
    let (code, run_id) = run(&repo, "issue-to-pr", &server);
    assert_eq!(code, OPTIONAL_NOT_DONE);
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "succeeded", "{state}");
    assert_eq!(stage_record(&state, "code")["status"], "succeeded");
    assert_eq!(stage_record(&state, "review")["status"], "succeeded");
    let docs = stage_record(&state, "docs");
    assert_eq!(docs["status"], "no_change", "{docs}");
    assert!(
        docs["reason"]
            .as_str()
            .unwrap()
            .contains("without calling `finish`"),
        "{docs}"
    );
    // The final branch holds the coder's fix (the reviewed commit).
    let calc = repo.git(&["show", &format!("orch/{run_id}/pr:calc.py")]);
    assert!(calc.contains("a + b"), "{calc}");
    let review_commit = repo.git(&["rev-parse", &format!("orch/{run_id}/review")]);
    let final_commit = repo.git(&["rev-parse", &format!("orch/{run_id}/pr")]);
    assert_eq!(final_commit, review_commit);
    let pr = pr_md(&repo, &run_id);
    assert!(pr.contains("## Not done"), "{pr}");
    assert!(pr.contains("**docs** (docs) produced no change"), "{pr}");
    assert!(pr.contains("without calling `finish`"), "{pr}");
}

#[test]
fn a_required_docs_stage_that_produces_nothing_fails_the_run() {
    let repo = buggy_repo();
    let server = docs_in_prose();
    let (code, run_id) = run(&repo, DOCS_REQUIRED, &server);
    assert_eq!(code, 1);
    let state = state_json(&repo, &run_id);
    assert_eq!(state["status"], "failed");
    let docs: &Value = stage_record(&state, "docs");
    assert_eq!(docs["status"], "failed", "{docs}");
}

/// Its docs stage — a small model's: its first turn is prose where a
/// call was due, so it is switched to constrained calls — finishes without
/// changing anything, twice if asked.
fn docs_finishing_without_a_change() -> FakeServer {
    fixed_and_approved_then_docs(vec![
        Reply::text("I will document the change to calc.py."),
        Reply::finish(
            "d1",
            "Nothing user-facing to document: add() now adds.",
            None,
        ),
        Reply::finish("d2", "Still nothing to document.", None),
    ])
}

#[test]
fn an_optional_docs_stage_of_a_small_model_that_finishes_without_a_change_is_taken_at_its_word() {
    // Its task says "if users will notice it": no change is a fair answer,
    // so its finish is not refused and it is not asked for calc.py whole
    // (issue 28: the 1.5B docs stage spent 4 turns that way, then ended
    // with no result).
    let repo = buggy_repo();
    let server = docs_finishing_without_a_change();
    let (code, run_id) = run(&repo, "issue-to-pr", &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("docs");
    assert_eq!(reqs.len(), 2, "the prose's nudge, then the finish taken");
    let told = user_text(&reqs[1]);
    assert!(!told.contains("Nothing in the lane changed"), "{told}");
    let state = state_json(&repo, &run_id);
    let docs = stage_record(&state, "docs");
    assert_eq!(docs["status"], "succeeded", "{docs}");
    assert_eq!(
        docs["summary"],
        "Nothing user-facing to document: add() now adds."
    );
    let ends = stage_events(&record_dir(&repo, &run_id), "docs", "stage_end");
    assert_eq!(ends[0]["no_change"], true, "{}", ends[0]);
    let tools = stage_events(&record_dir(&repo, &run_id), "docs", "tool");
    assert!(tools.iter().all(|t| t["is_error"] == false), "{tools:?}");
}

#[test]
fn a_required_docs_stage_of_a_small_model_that_finishes_without_a_change_is_told_once() {
    let repo = buggy_repo();
    let server = docs_finishing_without_a_change();
    let (code, run_id) = run(&repo, DOCS_REQUIRED, &server);
    assert_eq!(code, 1);
    assert_eq!(server.requests_for("docs").len(), 3);
    let tools = stage_events(&record_dir(&repo, &run_id), "docs", "tool");
    assert!(
        tools[0]["result"]
            .as_str()
            .unwrap()
            .contains("the task asks for a change; nothing in the lane changed"),
        "{tools:?}"
    );
    let state = state_json(&repo, &run_id);
    assert_eq!(stage_record(&state, "docs")["status"], "failed");
}

#[test]
fn an_optional_docs_stage_that_breaks_the_reviewed_code_is_not_kept() {
    // The 1.5B model's docs stage on HumanEval/11 (2026-12-06) wrote three
    // lines of grep output over the reviewed `solution.py`; told once that
    // it does not parse, it finished again, and the run delivered it. Now
    // the stage ends `no_change` with why, and the run keeps the review.
    let repo = buggy_repo();
    let garbage = "    10\n    11\n";
    let server = fixed_and_approved_then_docs(vec![
        Reply::tool_call(
            "d1",
            "write_file",
            serde_json::json!({"path": "calc.py", "content": garbage}),
        ),
        Reply::finish("d2", "Documented add().", None),
        Reply::finish("d3", "Documented add().", None),
    ]);
    let (code, run_id) = run(&repo, "issue-to-pr", &server);
    assert_eq!(code, OPTIONAL_NOT_DONE);
    assert_eq!(server.requests_for("docs").len(), 3, "told once");
    let state = state_json(&repo, &run_id);
    let docs = stage_record(&state, "docs");
    assert_eq!(docs["status"], "no_change", "{docs}");
    let reason = docs["reason"].as_str().unwrap();
    assert!(
        reason.contains("the change is not kept")
            && reason.contains("calc.py:1:")
            && reason.contains("do not parse"),
        "{reason}"
    );
    let calc = repo.git(&["show", &format!("orch/{run_id}/pr:calc.py")]);
    assert_eq!(calc, "def add(a, b):\n    return a + b\n");
    let review_commit = repo.git(&["rev-parse", &format!("orch/{run_id}/review")]);
    let final_commit = repo.git(&["rev-parse", &format!("orch/{run_id}/pr")]);
    assert_eq!(final_commit, review_commit);
    assert!(pr_md(&repo, &run_id).contains("**docs** (docs) produced no change"));
}

#[test]
fn a_required_stage_whose_files_still_do_not_parse_is_taken_with_a_note() {
    // The counterpart: a required stage (the coder, reviewed after it) is
    // taken at its second `finish`, the summary saying the files do not
    // parse — the review and the gate judge it.
    let repo = buggy_repo();
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "c1",
                "write_file",
                serde_json::json!({"path": "calc.py", "content": "    10\n"}),
            ),
            Reply::finish("c2", "Fixed.", None),
            Reply::finish("c3", "Fixed.", None),
        ],
    ));
    let (code, run_id) = run(&repo, "stages:\n  code:\n    role: coder\n", &server);
    assert_eq!(code, 0);
    let state = state_json(&repo, &run_id);
    let stage = stage_record(&state, "code");
    assert_eq!(stage["status"], "succeeded", "{stage}");
    assert!(
        stage["summary"]
            .as_str()
            .unwrap()
            .contains("Note from orch: the changed files do not parse"),
        "{stage}"
    );
}

#[test]
fn a_small_models_rework_round_may_decline_the_reviews_findings() {
    // The 1.5B reviewer on HumanEval/22 asked for a `TypeError` the task
    // never named; the coder's rework round rightly changed nothing, was
    // refused, finished again and failed the run, losing its correct fix.
    // A rework round's `finish` without a change is its answer now, and
    // the next review judges it.
    let repo = buggy_repo();
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    // Prose where a call was due: a small model, switched.
                    Reply::text("I will fix add() now."),
                    fix_add("c1"),
                    Reply::finish("c2", "add() adds.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish(
                    "r1",
                    "add() must raise TypeError for strings.",
                    Some("request_changes"),
                )],
            )
            .agent(
                "code.r2",
                vec![Reply::finish(
                    "c3",
                    "Not needed: the issue asks for a sum, not a TypeError.",
                    None,
                )],
            )
            .agent(
                "review.r2",
                vec![Reply::finish("r2", "Right, it adds.", Some("approve"))],
            )
            .agent(
                "docs",
                vec![Reply::finish("d1", "Nothing user-facing.", None)],
            ),
    );
    let (code, run_id) = run(&repo, "issue-to-pr", &server);
    assert_eq!(code, 0);
    assert_eq!(server.requests_for("code.r2").len(), 1, "not refused");
    let state = state_json(&repo, &run_id);
    assert_eq!(stage_record(&state, "code.r2")["status"], "succeeded");
    let ends = stage_events(&record_dir(&repo, &run_id), "code.r2", "stage_end");
    assert_eq!(ends[0]["no_change"], true, "{}", ends[0]);
    let calc = repo.git(&["show", &format!("orch/{run_id}/pr:calc.py")]);
    assert!(calc.contains("a + b"), "{calc}");
}

#[test]
fn a_small_models_rework_round_is_still_asked_for_a_file_it_broke() {
    // Declining is allowed in a rework round, but a broken file is not a
    // decline: its refused `finish` still brings the whole-file ask.
    let repo = buggy_repo();
    let yaml = "stages:\n  code:\n    role: coder\n    task: \"Fix add() in calc.py.\"\n  review:\n    role: reviewer\n    needs: [code]\n    rework: { stage: code, max_rounds: 1 }\n";
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    Reply::text("I will fix add() now."),
                    fix_add("c1"),
                    Reply::finish("c2", "add() adds.", None),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish(
                    "r1",
                    "Add a comment.",
                    Some("request_changes"),
                )],
            )
            .agent(
                "code.r2",
                vec![
                    Reply::tool_call(
                        "c3",
                        "write_file",
                        serde_json::json!({"path": "calc.py", "content": "    10\n"}),
                    ),
                    Reply::finish("c4", "Done.", None),
                    Reply::text("```python\n# Adds.\ndef add(a, b):\n    return a + b\n```"),
                    Reply::finish("c5", "Commented.", None),
                ],
            )
            .agent(
                "review.r2",
                vec![Reply::finish("r2", "Good.", Some("approve"))],
            ),
    );
    let (code, run_id) = run(&repo, yaml, &server);
    assert_eq!(code, 0);
    let reqs = server.requests_for("code.r2");
    assert_eq!(reqs.len(), 4);
    let ask = user_text(&reqs[2]);
    assert!(
        ask.contains("The files you changed do not parse")
            && ask.contains("Reply with the complete new content of `calc.py`"),
        "{ask}"
    );
    let calc = repo.git(&["show", &format!("orch/{run_id}/code.r2:calc.py")]);
    assert_eq!(calc, "# Adds.\ndef add(a, b):\n    return a + b\n");
}
