//! Tests of parsing, checking, unrolling and rendering pipelines, and of the
//! located errors for every bad fixture under `fixtures/`.

use super::*;
use crate::ids::StageId;
use crate::role::parse_role;

fn roles() -> Vec<String> {
    ["coder", "docs", "explore", "reviewer"]
        .iter()
        .map(|r| (*r).to_owned())
        .collect()
}

fn fixture(path: &str) -> (String, String) {
    let full = format!("{}/fixtures/{path}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"));
    (full, text)
}

/// (stage id, needs, round, run_if) of every planned stage, in order.
fn shape(pipeline: &Pipeline) -> Vec<(String, Vec<String>, u32, Option<String>)> {
    pipeline
        .stages
        .iter()
        .map(|s| {
            (
                s.id.0.clone(),
                s.needs.iter().map(|n| n.0.clone()).collect(),
                s.round,
                s.run_if_changes_requested_by.as_ref().map(|r| r.0.clone()),
            )
        })
        .collect()
}

fn row(
    id: &str,
    needs: &[&str],
    round: u32,
    run_if: Option<&str>,
) -> (String, Vec<String>, u32, Option<String>) {
    (
        id.to_owned(),
        needs.iter().map(|n| (*n).to_owned()).collect(),
        round,
        run_if.map(str::to_owned),
    )
}

#[test]
fn bad_pipelines_are_reported_at_the_right_place() {
    // (file, line, column, message fragment)
    let cases: &[(&str, u64, u64, &str)] = &[
        ("syntax.yaml", 5, 11, "mapping values are not allowed"),
        (
            "wrong-type.yaml",
            6,
            5,
            "expected a stage id or a list of stage ids",
        ),
        (
            "unknown-key.yaml",
            4,
            5,
            "unknown field `timeout`, expected one of role, needs",
        ),
        (
            "unknown-role.yaml",
            3,
            11,
            "unknown role \"codr\" (known: coder, docs, explore, reviewer)",
        ),
        (
            "unknown-needs.yaml",
            6,
            19,
            "unknown stage \"tests\" in needs (stages: code, review)",
        ),
        ("duplicate-stage.yaml", 7, 3, "duplicate key `code`"),
        (
            "self-dependency.yaml",
            4,
            13,
            "stage \"code\" cannot need itself",
        ),
        (
            "cycle.yaml",
            7,
            19,
            "cycle among stages: code → review → docs → code",
        ),
        ("bad-stage-id.yaml", 4, 3, "invalid stage id \"Review.1\""),
        (
            "rework-not-upstream.yaml",
            10,
            22,
            "rework stage \"docs\" is not upstream of \"review\"",
        ),
        (
            "max-rounds-zero.yaml",
            9,
            19,
            "rework max_rounds must be between 1 and 5, got 0",
        ),
    ];
    let dir = format!("{}/fixtures/pipelines/bad", env!("CARGO_MANIFEST_DIR"));
    let on_disk = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(on_disk, cases.len(), "every bad fixture has a case");
    for (file, line, column, fragment) in cases {
        let (path, text) = fixture(&format!("pipelines/bad/{file}"));
        let err = parse_pipeline(&text, &path, &roles())
            .expect_err(&format!("{file} should be rejected"));
        assert_eq!(err.file, path, "{file}");
        assert_eq!(
            (err.line, err.column),
            (*line, *column),
            "{file}: wrong location for: {err}"
        );
        assert!(
            err.message.contains(fragment),
            "{file}: message {:?} lacks {fragment:?}",
            err.message
        );
        assert!(
            err.to_string()
                .starts_with(&format!("{path}:{line}:{column}: "))
        );
    }
}

#[test]
fn bad_roles_are_reported_at_the_right_place() {
    let cases: &[(&str, u64, u64, &str)] = &[
        (
            "read-only-write.md",
            5,
            26,
            "a read_only role cannot have the tool \"write_file\"",
        ),
        ("unclosed.md", 1, 1, "never closed"),
        (
            "bad-max-turns.md",
            4,
            12,
            "invalid value: expected a whole number",
        ),
    ];
    let dir = format!("{}/fixtures/roles/bad", env!("CARGO_MANIFEST_DIR"));
    let on_disk = std::fs::read_dir(&dir).unwrap().count();
    assert_eq!(on_disk, cases.len(), "every bad fixture has a case");
    for (file, line, column, fragment) in cases {
        let (path, text) = fixture(&format!("roles/bad/{file}"));
        let err = parse_role(&text, &path).expect_err(&format!("{file} should be rejected"));
        assert_eq!(
            (err.line, err.column),
            (*line, *column),
            "{file}: wrong location for: {err}"
        );
        assert!(
            err.message.contains(fragment),
            "{file}: message {:?} lacks {fragment:?}",
            err.message
        );
    }
}

#[test]
fn an_unknown_tool_is_a_warning_and_not_offered() {
    // Was a bad fixture: Claude Code files name tools orch does not have.
    let (path, text) = fixture("roles/good/unknown-tool.md");
    let role = parse_role(&text, &path).unwrap();
    assert!(!role.tools.iter().any(|t| t == "WebFetch"));
    assert!(
        role.warnings
            .iter()
            .any(|w| w.contains("WebFetch") && w.contains("not offered")),
        "{:?}",
        role.warnings
    );
    // So is an unknown key (was a bad fixture too): ignored, said once.
    let (path, text) = fixture("roles/good/unknown-key.md");
    let role = parse_role(&text, &path).unwrap();
    assert_eq!(
        role.warnings,
        [
            "key `permissions` is not used by orch (ignored); remove it, or see docs/project-conventions.md for the keys orch reads"
        ]
    );
}

#[test]
fn claude_code_agent_file_loads() {
    let (path, text) = fixture("roles/good/claude-helper.md");
    let role = parse_role(&text, &path).unwrap();
    assert_eq!(role.name, "claude-helper");
    assert_eq!(
        role.tools,
        [
            "bash",
            "read_file",
            "write_file",
            "edit_file",
            "list_files",
            "grep",
            "spawn_agent",
            "finish"
        ]
    );
    // Claude Code's `sonnet` alias keeps the run's model (an
    // OpenAI-compatible server would not know it).
    assert_eq!(role.model, None);
    assert_eq!(role.prompt, "You are a helpful agent.");
}

fn builtin_issue_to_pr() -> Pipeline {
    let text = include_str!("../../pipelines/issue-to-pr.yaml");
    parse_pipeline(text, "built-in pipelines/issue-to-pr.yaml", &roles()).unwrap()
}

#[test]
fn issue_to_pr_unrolls_two_rework_rounds() {
    let pipeline = builtin_issue_to_pr();
    assert_eq!(pipeline.name, "issue-to-pr");
    assert_eq!(
        pipeline.description,
        "Fix an issue, review the fix, document it."
    );
    assert_eq!(
        shape(&pipeline),
        [
            row("code", &[], 1, None),
            row("review", &["code"], 1, None),
            row("code.r2", &["review"], 2, Some("review")),
            row("review.r2", &["code.r2"], 2, Some("review")),
            row("code.r3", &["review.r2"], 3, Some("review.r2")),
            row("review.r3", &["code.r3"], 3, Some("review.r2")),
            row("docs", &["review.r3"], 1, None),
        ]
    );
    let code_r3 = pipeline.stage("code.r3").unwrap();
    assert_eq!(code_r3.role, "coder");
    assert_eq!(code_r3.base_id.0, "code");
    assert_eq!(code_r3.task, pipeline.stage("code").unwrap().task);
    assert!(code_r3.task.contains("{{ issue }}"));
    assert_eq!(pipeline.stage("review.r2").unwrap().role, "reviewer");
    assert_eq!(pipeline.stage("docs").unwrap().max_turns, Some(20));
    assert_eq!(pipeline.stage("code").unwrap().max_turns, None);
    assert!(pipeline.stage("nope").is_none());
    let ids = |v: Vec<StageId>| v.into_iter().map(|s| s.0).collect::<Vec<_>>();
    assert_eq!(
        ids(pipeline.dependents(&StageId("review".into()))),
        ["code.r2"]
    );
    assert_eq!(
        ids(pipeline.dependents(&StageId("review.r3".into()))),
        ["docs"]
    );
    assert!(pipeline.dependents(&StageId("docs".into())).is_empty());
}

#[test]
fn issue_to_pr_mermaid() {
    let expected = "\
flowchart TD
    s0[\"code (coder)\"]
    s1[\"review (reviewer)\"]
    s2[\"code.r2 (coder)\"]
    s3[\"review.r2 (reviewer)\"]
    s4[\"code.r3 (coder)\"]
    s5[\"review.r3 (reviewer)\"]
    s6[\"docs (docs)\"]
    s0 --> s1
    s1 -. request_changes .-> s2
    s2 --> s3
    s3 -. request_changes .-> s4
    s4 --> s5
    s5 --> s6
";
    assert_eq!(builtin_issue_to_pr().to_mermaid(), expected);
}

#[test]
fn loop_body_between_coder_and_reviewer_is_repeated() {
    let (path, text) = fixture("pipelines/good/review-loop.yaml");
    let pipeline = parse_pipeline(&text, &path, &roles()).unwrap();
    assert_eq!(
        shape(&pipeline),
        [
            row("plan", &[], 1, None),
            row("code", &["plan"], 1, None),
            row("test", &["code"], 1, None),
            row("review", &["test", "plan"], 1, None),
            row("code.r2", &["review"], 2, Some("review")),
            row("test.r2", &["code.r2"], 2, Some("review")),
            row("review.r2", &["test.r2", "plan"], 2, Some("review")),
            row("lint", &["code"], 1, None),
            row("docs", &["review.r2", "lint"], 1, None),
        ]
    );
    assert_eq!(pipeline.stage("test.r2").unwrap().max_turns, Some(5));
}

#[test]
fn independent_stages_keep_file_order() {
    let text = "stages:\n  b:\n    role: coder\n  a:\n    role: coder\n  c:\n    role: docs\n    needs: [a, b, a]\n";
    let pipeline = parse_pipeline(text, "<test>.yaml", &roles()).unwrap();
    let ids: Vec<&str> = pipeline.stages.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["b", "a", "c"]);
    // A repeated `needs` entry counts once.
    assert_eq!(pipeline.stage("c").unwrap().needs.len(), 2);
}

#[test]
fn name_defaults_to_and_must_match_the_file_stem() {
    let text = "stages:\n  a:\n    role: coder\n";
    assert_eq!(
        parse_pipeline(text, "dir/flow.yml", &roles()).unwrap().name,
        "flow"
    );
    let err =
        parse_pipeline(&format!("name: other\n{text}"), "dir/flow.yml", &roles()).unwrap_err();
    assert_eq!((err.line, err.column), (1, 7));
    assert!(err.message.contains("must equal the file name \"flow\""));
    let err = parse_pipeline(text, "<stdin>", &roles()).unwrap_err();
    assert_eq!(err.message, "missing field `name`");
}

#[test]
fn empty_and_odd_pipelines_are_rejected_with_locations() {
    let err = parse_pipeline("name: x\nstages: {}\n", "<t>", &roles()).unwrap_err();
    assert_eq!((err.line, err.column), (2, 9));
    assert!(err.message.contains("at least one stage"));

    let err = parse_pipeline("name: x\nstages:\n", "<t>", &roles()).unwrap_err();
    assert!(err.message.contains("at least one stage"), "{err}");
    let err = parse_pipeline("name: x\nstages: [a, b]\n", "<t>", &roles()).unwrap_err();
    // serde-saphyr places type errors at the key.
    assert_eq!((err.line, err.column), (2, 1), "{err}");
    assert!(
        err.message
            .contains("expected a mapping of stage ids to stages"),
        "{err}"
    );

    let err = parse_pipeline("", "<t>", &roles()).unwrap_err();
    assert_eq!((err.line, err.column), (1, 1));

    let text = "name: x\nstages:\n  a:\n    role: coder\n    max_turns: 0\n";
    let err = parse_pipeline(text, "<t>", &roles()).unwrap_err();
    assert_eq!((err.line, err.column), (5, 16));

    let text = "name: x\nstages:\n  a:\n    role: coder\n  b:\n    role: reviewer\n    rework: {stage: b, max_rounds: 1}\n";
    let err = parse_pipeline(text, "<t>", &roles()).unwrap_err();
    assert_eq!((err.line, err.column), (7, 21));
    assert!(err.message.contains("not upstream"), "{err}");
}

#[test]
fn overlapping_rework_loops_are_rejected() {
    let text = "name: x\nstages:
  a:
    role: coder
  r1:
    role: reviewer
    needs: [a]
    rework: {stage: a, max_rounds: 1}
  r2:
    role: reviewer
    needs: [r1]
    rework: {stage: a, max_rounds: 1}
";
    let err = parse_pipeline(text, "<t>", &roles()).unwrap_err();
    assert_eq!((err.line, err.column), (12, 13));
    assert!(
        err.message.contains("overlaps the rework loop of \"r1\""),
        "{err}"
    );
}

#[test]
fn two_disjoint_rework_loops_unroll_in_sequence() {
    let text = "name: x\nstages:
  a:
    role: coder
  r1:
    role: reviewer
    needs: [a]
    rework: {stage: a, max_rounds: 1}
  b:
    role: coder
    needs: [r1]
  r2:
    role: reviewer
    needs: [b]
    rework: {stage: b, max_rounds: 1}
  end:
    role: docs
    needs: [r2]
";
    let pipeline = parse_pipeline(text, "<t>", &roles()).unwrap();
    assert_eq!(
        shape(&pipeline),
        [
            row("a", &[], 1, None),
            row("r1", &["a"], 1, None),
            row("a.r2", &["r1"], 2, Some("r1")),
            row("r1.r2", &["a.r2"], 2, Some("r1")),
            row("b", &["r1.r2"], 1, None),
            row("r2", &["b"], 1, None),
            row("b.r2", &["r2"], 2, Some("r2")),
            row("r2.r2", &["b.r2"], 2, Some("r2")),
            row("end", &["r2.r2"], 1, None),
        ]
    );
}

#[test]
fn stage_id_rule() {
    for good in ["a", "0", "code", "fix-1", "a_b"] {
        assert!(is_valid_stage_id(good), "{good}");
    }
    for bad in ["", "A", "-a", "_a", "a.b", "a b", "a/b", "é"] {
        assert!(!is_valid_stage_id(bad), "{bad}");
    }
}

#[test]
fn stage_budgets_parse_and_carry_into_rework_rounds() {
    let text = "name: x\nstages:\n  code:\n    role: coder\n    budget: {tokens: 20000, time_secs: 600, cost_usd: 0.5}\n  review:\n    role: reviewer\n    needs: code\n    budget:\n      tokens: 5000\n    rework: {stage: code, max_rounds: 1}\n";
    let p = parse_pipeline(text, "<t>", &roles()).unwrap();
    let code = p.stage("code").unwrap().budget;
    assert_eq!(code.tokens, Some(20000));
    assert_eq!(
        code.time_secs,
        Some(600.0),
        "a whole number is a number of seconds"
    );
    assert_eq!(code.cost_usd, Some(0.5));
    assert_eq!(
        p.stage("code.r2").unwrap().budget,
        code,
        "each round has the same budget"
    );
    let review = p.stage("review").unwrap().budget;
    assert_eq!(
        (review.tokens, review.time_secs, review.cost_usd),
        (Some(5000), None, None)
    );
    let none =
        parse_pipeline("name: x\nstages:\n  a:\n    role: coder\n", "<t>", &roles()).unwrap();
    assert!(none.stages[0].budget.is_unlimited());
}

#[test]
fn bad_stage_budgets_are_reported_at_the_right_place() {
    // (text of the budget line(s), line, column, message fragment)
    let cases: &[(&str, u64, u64, &str)] = &[
        (
            "    budget: {tokens: lots}\n",
            5,
            22,
            "expected a whole number, 0 or more",
        ),
        (
            "    budget: {time_secs: soon}\n",
            5,
            25,
            "expected a number",
        ),
        (
            "    budget:\n      tokens: 0\n",
            6,
            15,
            "budget tokens must be at least 1",
        ),
        (
            "    budget: {cost_usd: -1}\n",
            5,
            24,
            "budget cost_usd must be a number greater than 0, got -1",
        ),
        (
            "    budget: {time_secs: 0}\n",
            5,
            25,
            "budget time_secs must be a number greater than 0",
        ),
        (
            "    budget: {turns: 3}\n",
            5,
            14,
            "unknown field `turns`, expected one of tokens, time_secs, cost_usd",
        ),
        ("    budget: 100\n", 5, 13, "expected mapping"),
    ];
    for (lines, line, column, fragment) in cases {
        let text = format!("name: p\nstages:\n  a:\n    role: coder\n{lines}");
        let err = parse_pipeline(&text, "p.yaml", &roles()).unwrap_err();
        assert!(
            err.message.contains(fragment),
            "{lines}: {err} (wanted {fragment})"
        );
        assert_eq!((err.line, err.column), (*line, *column), "{lines}: {err}");
        assert!(
            err.to_string()
                .starts_with(&format!("p.yaml:{line}:{column}: "))
        );
    }
}

#[test]
fn verify_keys_parse_and_carry_into_rework_rounds() {
    let text = "name: x\nstages:\n  code:\n    role: coder\n    verify: cargo test\n    verify_rounds: 4\n  review:\n    role: reviewer\n    needs: code\n    verify: [\"make lint\", \"make test\"]\n    text_tool_calls: false\n    rework: {stage: code, max_rounds: 1}\n";
    let p = parse_pipeline(text, "<t>", &roles()).unwrap();
    let code = p.stage("code").unwrap();
    assert_eq!(code.verify, ["cargo test"]);
    assert_eq!(code.verify_rounds, 4);
    assert!(code.text_tool_calls);
    let review = p.stage("review").unwrap();
    assert_eq!(review.verify, ["make lint", "make test"]);
    assert_eq!(review.verify_rounds, 2, "the default");
    assert!(!review.text_tool_calls);
    let r2 = p.stage("code.r2").unwrap();
    assert_eq!(
        (r2.verify.clone(), r2.verify_rounds),
        (code.verify.clone(), 4)
    );
    let none =
        parse_pipeline("name: x\nstages:\n  a:\n    role: coder\n", "<t>", &roles()).unwrap();
    assert!(none.stages[0].verify.is_empty());
    assert!(none.stages[0].text_tool_calls);
}

#[test]
fn a_pipeline_wide_verify_is_the_default_of_stages_without_their_own() {
    let text = "name: x\nverify: make test\nverify_rounds: 3\nstages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: code\n    verify: make lint\n  docs:\n    role: docs\n    needs: review\n    required: false\n";
    let p = parse_pipeline(text, "<t>", &roles()).unwrap();
    let code = p.stage("code").unwrap();
    assert_eq!(
        (code.verify.clone(), code.verify_rounds),
        (vec!["make test".to_owned()], 3)
    );
    assert!(code.required, "required by default");
    let review = p.stage("review").unwrap();
    assert_eq!(review.verify, ["make lint"]);
    assert_eq!(
        review.verify_rounds, 2,
        "its own verify, the default rounds"
    );
    let docs = p.stage("docs").unwrap();
    assert_eq!(docs.verify, ["make test"]);
    assert!(!docs.required);
    let err = parse_pipeline(
        "name: p\nverify_rounds: 1\nstages:\n  a:\n    role: coder\n",
        "p.yaml",
        &roles(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("p.yaml:2:16: "), "{err}");
    assert!(
        err.contains("verify_rounds needs a verify command"),
        "{err}"
    );
}

#[test]
fn bad_verify_keys_are_reported_at_the_right_place() {
    // (the stage's extra lines, line, column, message fragment)
    let cases: &[(&str, u64, u64, &str)] = &[
        ("    verify: []\n", 5, 13, "verify is an empty list"),
        (
            "    verify: [\"make\", \" \"]\n",
            5,
            13,
            "verify command 2 is empty",
        ),
        (
            "    verify: {cmd: x}\n",
            5,
            13,
            "verify must be a command line or a list",
        ),
        (
            "    verify_rounds: 1\n",
            5,
            20,
            "verify_rounds needs a verify command",
        ),
        (
            "    verify: make\n    verify_rounds: 11\n",
            6,
            20,
            "verify_rounds must be at most 10, got 11",
        ),
    ];
    for (lines, line, column, fragment) in cases {
        let text = format!("name: p\nstages:\n  a:\n    role: coder\n{lines}");
        let err = parse_pipeline(&text, "p.yaml", &roles()).unwrap_err();
        assert!(
            err.message.contains(fragment),
            "{lines}: {err} (wanted {fragment})"
        );
        assert_eq!((err.line, err.column), (*line, *column), "{lines}: {err}");
    }
}

#[test]
fn a_role_says_whether_text_is_its_result() {
    let explore = parse_role(
        include_str!("../../roles/explore.md"),
        "built-in roles/explore.md",
    )
    .unwrap();
    assert!(explore.text_result);
    let coder = parse_role(
        include_str!("../../roles/coder.md"),
        "built-in roles/coder.md",
    )
    .unwrap();
    assert!(!coder.text_result);
    let bad = "---\nname: x\nresult: maybe\n---\nbody\n";
    let err = parse_role(bad, "x.md").unwrap_err();
    assert!(err.message.contains("unknown variant `maybe`"), "{err}");
}

#[test]
fn setup_is_a_command_line_or_a_mapping() {
    let one = parse_pipeline(
        "setup: npm ci\nstages:\n  code:\n    role: coder\n",
        "p.yaml",
        &roles(),
    )
    .unwrap();
    let s = one.setup.unwrap();
    assert_eq!(
        (s.command.as_str(), s.lockfiles, s.timeout_secs),
        ("npm ci", None, None)
    );
    let full = parse_pipeline(
        "setup:\n  command: uv sync\n  lockfiles: [uv.lock]\n  timeout_secs: 900\nstages:\n  code:\n    role: coder\n",
        "p.yaml",
        &roles(),
    )
    .unwrap();
    let s = full.setup.unwrap();
    assert_eq!(s.lockfiles, Some(vec!["uv.lock".to_owned()]));
    assert_eq!(s.timeout_secs, Some(900));
    let none = parse_pipeline("stages:\n  code:\n    role: coder\n", "p.yaml", &roles()).unwrap();
    assert!(none.setup.is_none());
}

#[test]
fn bad_setups_are_located() {
    let cases = [
        (
            "setup: \"  \"\nstages:\n  code:\n    role: coder\n",
            "setup command is empty",
        ),
        (
            "setup:\n  command: x\n  timeout_secs: 0\nstages:\n  code:\n    role: coder\n",
            "timeout_secs must be between 1",
        ),
        (
            "setup:\n  command: x\n  lockfiles: [../up.lock]\nstages:\n  code:\n    role: coder\n",
            "relative path inside the repository",
        ),
        (
            "setup:\n  command: x\n  lockfile: [a]\nstages:\n  code:\n    role: coder\n",
            "setup must be a command line or a mapping",
        ),
    ];
    for (text, want) in cases {
        let e = parse_pipeline(text, "p.yaml", &roles()).unwrap_err();
        assert!(e.message.contains(want), "{text:?}: {e}");
        assert_eq!(
            e.line,
            if want.starts_with("setup command") {
                1
            } else {
                2
            },
            "{text:?}: {e}"
        );
    }
}

#[test]
fn react_rounds_is_bounded_and_named_at_its_line() {
    let ok = "react_rounds: 2\nstages:\n  code:\n    role: coder\n";
    let p = parse_pipeline(ok, "p.yaml", &roles()).unwrap();
    assert_eq!(p.react_rounds, Some(2));
    let none = parse_pipeline("stages:\n  code:\n    role: coder\n", "p.yaml", &roles()).unwrap();
    assert_eq!(none.react_rounds, None);
    for bad in ["0", "11"] {
        let text = format!("stages:\n  code:\n    role: coder\nreact_rounds: {bad}\n");
        let err = parse_pipeline(&text, "p.yaml", &roles())
            .unwrap_err()
            .to_string();
        assert!(err.contains("p.yaml:4:"), "{err}");
        assert!(
            err.contains(&format!("react_rounds must be between 1 and 10, got {bad}")),
            "{err}"
        );
    }
}
