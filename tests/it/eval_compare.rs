//! `orch eval --compare A B` through the real binary: two pipelines on the
//! same tasks, each column holding that pipeline's own numbers — the shipped
//! task set with the scripted models, a task set where the two pipelines
//! solve different tasks (checked against single-pipeline evals), a model
//! behind `--base-url` with exact token counts per side, and bad flags.

use crate::eval::{copy_dir, eval, eval_task_one_on_fake_model, fixtures, replies_of, rows};
use crate::support::{FakeServer, Script, assert_exit, output_logged, read_jsonl, stdout_json};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Where the table's columns start (label, A, B), in characters.
const COLUMNS: [usize; 3] = [2, 27, 44];

/// The A and B cells of the table row whose label (or task) is `label`.
fn cells(stdout: &str, label: &str) -> (String, String) {
    let line = stdout
        .lines()
        .find(|l| {
            l.get(COLUMNS[0]..COLUMNS[1])
                .is_some_and(|cell| cell.trim() == label)
        })
        .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"));
    let a = line
        .get(COLUMNS[1]..COLUMNS[2].min(line.len()))
        .unwrap_or("");
    let b = line.get(COLUMNS[2]..).unwrap_or("");
    (a.trim().to_owned(), b.trim().to_owned())
}

/// The `total` line of side `side` (`a` or `b`) in a results file.
fn total_of<'a>(lines: &'a [Value], side: &str) -> &'a Value {
    lines
        .iter()
        .find(|l| l["kind"] == "total" && l["eval_id"].as_str().unwrap().ends_with(side))
        .unwrap_or_else(|| panic!("no total of side {side}: {lines:#?}"))
}

/// The acceptance point: on the shipped task set with the scripted models,
/// the table shows both pipelines' columns, and each column is that
/// pipeline's own total (the built-in issue-to-pr also runs a reviewer and a
/// docs writer, so it spends more turns and tokens for the same 8/8).
#[test]
fn compare_on_the_shipped_set_prints_both_pipelines_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let one_stage = fixtures().join("eval.yaml");
    let run = output_logged(&mut eval(
        dir.path(),
        &fixtures(),
        &[
            "--scripted",
            "perfect",
            "--compare",
            one_stage.to_str().unwrap(),
            "issue-to-pr",
            "--out",
            out.to_str().unwrap(),
        ],
    ));
    assert_exit(&run, 0);
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(
        stdout.contains(&format!("  A: {}\n  B: issue-to-pr\n", one_stage.display())),
        "{stdout}"
    );
    let lines = read_jsonl(&out.join("evals.jsonl"));
    let (ta, tb) = (
        &total_of(&lines, "-a")["total"],
        &total_of(&lines, "-b")["total"],
    );
    let tasks = ta["tasks"].as_u64().unwrap();
    assert!(tasks >= 8, "{ta:#}");
    let solved = format!("{tasks}/{tasks} (100.0%)");
    assert_eq!(cells(&stdout, "solved"), (solved.clone(), solved));
    assert_eq!(cells(&stdout, "false successes"), ("0".into(), "0".into()));
    for (label, key) in [
        ("tokens", &ta["tokens"]["total"]),
        ("prompt", &ta["tokens"]["prompt"]),
        ("completion", &ta["tokens"]["completion"]),
        ("turns", &ta["turns"]),
    ] {
        assert_eq!(cells(&stdout, label).0, key.to_string(), "{label}");
    }
    assert_eq!(
        cells(&stdout, "tokens").1,
        tb["tokens"]["total"].to_string()
    );
    assert_eq!(cells(&stdout, "turns").1, tb["turns"].to_string());
    assert_eq!(cells(&stdout, "cost"), ("unknown".into(), "unknown".into()));
    // The columns differ where the pipelines do: B's reviewer and docs
    // writer cost turns and tokens.
    assert!(tb["turns"].as_u64() > ta["turns"].as_u64(), "{ta:#} {tb:#}");
    assert!(tb["tokens"]["total"].as_u64() > ta["tokens"]["total"].as_u64());
    // One row per task, solved on both sides, no side marked better.
    for task in ["01-py-one-line", "05-py-needs-test", "08-sh-feature"] {
        assert_eq!(cells(&stdout, task), ("yes".into(), "yes".into()), "{task}");
    }
    // Each side's runs used its own pipeline (B ran the review stage).
    let runs: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "run").collect();
    assert_eq!(runs.len() as u64, 2 * tasks);
    for r in &runs {
        let b = r["eval_id"].as_str().unwrap().ends_with("-b");
        let has_review = r["stages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == "review");
        assert_eq!(has_review, b, "{r:#}");
    }
}

/// A task set on which the two pipelines differ: a copy of two shipped
/// tasks whose scripted model (`replay.mixed.json`) plays the perfect coder
/// as stage `code` (pipeline A, the shipped eval.yaml) and, on the first
/// task, the broken coder as stage `fix` (pipeline B).
fn mixed_task_set(dir: &Path) -> (PathBuf, PathBuf) {
    let tasks = dir.join("tasks");
    for (task, fix) in [("01-py-one-line", "broken"), ("06-sh-rename", "perfect")] {
        let to = tasks.join(task);
        copy_dir(&fixtures().join(task), &to);
        let script = |name: &str| -> Value {
            let path = to.join(format!("replay.{name}.json"));
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
        };
        let mixed = json!({
            "format": "orch-replay/1",
            "agents": {
                "code": script("perfect")["agents"]["code"],
                "fix": script(fix)["agents"]["code"],
            }
        });
        std::fs::write(to.join("replay.mixed.json"), mixed.to_string()).unwrap();
    }
    let fix = dir.join("fix.yaml");
    std::fs::write(
        &fix,
        "name: fix\nstages:\n  fix:\n    role: coder\n    max_turns: 20\n    task: |\n      Resolve this issue:\n\n      {{ issue }}\n",
    )
    .unwrap();
    (tasks, fix)
}

/// Each column is the real measurement of its pipeline: the same numbers a
/// single `orch eval --pipeline X` of it gives, and different where the
/// pipelines differ (B's false success on the first task). `--fail-under`
/// holds for each side, so B's 50 % fails the comparison, naming B.
#[test]
fn compared_columns_hold_each_pipelines_own_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks, fix) = mixed_task_set(dir.path());
    let one_stage = fixtures().join("eval.yaml");
    let out = dir.path().join("results");
    let out_arg = out.to_str().unwrap();
    let run = output_logged(&mut eval(
        dir.path(),
        &tasks,
        &[
            "--scripted",
            "mixed",
            "--compare",
            one_stage.to_str().unwrap(),
            fix.to_str().unwrap(),
            "--fail-under",
            "75",
            "--json",
            "--out",
            out_arg,
        ],
    ));
    assert_exit(&run, 1);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        stderr.contains(&format!(
            "pipeline B ({}): 50.0% solved is under --fail-under 75",
            fix.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("pipeline A ("), "{stderr}");
    let c = stdout_json(&run);
    assert_eq!(c["format"], "orch-eval-compare/1");
    let id = c["compare_id"].as_str().unwrap();
    let (a, b) = (&c["a"], &c["b"]);
    assert_eq!(a["eval_id"], format!("{id}-a"));
    assert_eq!(b["eval_id"], format!("{id}-b"));
    assert_eq!(a["compare_id"], id);
    assert_eq!(a["format"], "orch-eval/1");
    assert_eq!(a["pipeline"], one_stage.display().to_string());
    assert_eq!(b["pipeline"], fix.display().to_string());
    assert_eq!(a["total"]["solved"], 2);
    assert_eq!(a["total"]["false_successes"], 0);
    assert_eq!(b["total"]["solved"], 1);
    assert_eq!(b["total"]["solved_pct"], 50.0);
    assert_eq!(b["total"]["false_successes"], 1);
    assert_eq!(
        c["tasks"],
        json!([
            {"task": "01-py-one-line", "a": {"runs": 1, "solved": 1}, "b": {"runs": 1, "solved": 0}},
            {"task": "06-sh-rename", "a": {"runs": 1, "solved": 1}, "b": {"runs": 1, "solved": 1}},
        ])
    );
    let b01 = &rows(b)[0];
    assert_eq!(b01["run_status"], "succeeded", "{b01:#}");
    assert_eq!(b01["reason"], "check.sh exited 1");
    assert_eq!(b01["stages"][0]["id"], "fix");
    assert_eq!(rows(a)[0]["stages"][0]["id"], "code");
    // The broken coder spends fewer turns and tokens than the perfect one.
    assert!(b["total"]["turns"].as_u64() < a["total"]["turns"].as_u64());
    assert!(b["total"]["tokens"]["total"].as_u64() < a["total"]["tokens"]["total"].as_u64());

    // The runs alternate — task 1 on A, then on B, then task 2 — and each
    // side closes with its own total line.
    let lines = read_jsonl(&out.join("evals.jsonl"));
    let order: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap().to_owned(),
                l["eval_id"].as_str().unwrap().replace(id, ""),
            )
        })
        .collect();
    let pair = |k: &str, s: &str| (k.to_owned(), s.to_owned());
    assert_eq!(
        order,
        [
            pair("run", "-a"),
            pair("run", "-b"),
            pair("run", "-a"),
            pair("run", "-b"),
            pair("total", "-a"),
            pair("total", "-b"),
        ]
    );

    // A single eval of each pipeline measures the same numbers as its column.
    for (pipeline, side) in [(&one_stage, a), (&fix, b)] {
        let single = output_logged(&mut eval(
            dir.path(),
            &tasks,
            &[
                "--scripted",
                "mixed",
                "--pipeline",
                pipeline.to_str().unwrap(),
                "--json",
                "--out",
                out_arg,
            ],
        ));
        assert_exit(&single, 0);
        let single = stdout_json(&single);
        for key in ["solved", "false_successes", "turns", "tokens", "runs"] {
            assert_eq!(
                single["total"][key], side["total"][key],
                "{key} of {pipeline:?}"
            );
        }
        assert_eq!(single["tasks"], side["tasks"]);
    }
}

/// A model behind `--base-url` (the fake server): both sides talk to the
/// same model with the same flags, and each column sums exactly the usage
/// the server reported to that side's agents.
#[test]
fn compare_with_a_model_behind_base_url_counts_each_sides_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let (tasks, fix) = mixed_task_set(dir.path());
    let script: Value = serde_json::from_str(
        &std::fs::read_to_string(tasks.join("01-py-one-line/replay.mixed.json")).unwrap(),
    )
    .unwrap();
    let code = replies_of(&script["agents"]["code"], (100, 10));
    let fix_replies = replies_of(&script["agents"]["fix"], (50, 5));
    let (code_turns, fix_turns) = (code.len() as u64, fix_replies.len() as u64);
    assert_ne!(code_turns, fix_turns);
    let server = FakeServer::start(Script::new().agent("code", code).agent("fix", fix_replies));
    let one_stage = fixtures().join("eval.yaml");
    let run = eval_task_one_on_fake_model(
        &server,
        dir.path(),
        &tasks,
        &["--ab", one_stage.to_str().unwrap(), fix.to_str().unwrap()],
    );
    let c = stdout_json(&run);
    let (a, b) = (&c["a"]["total"], &c["b"]["total"]);
    assert_eq!(
        a["tokens"],
        json!({"prompt": 100 * code_turns, "completion": 10 * code_turns, "total": 110 * code_turns})
    );
    assert_eq!(
        b["tokens"],
        json!({"prompt": 50 * fix_turns, "completion": 5 * fix_turns, "total": 55 * fix_turns})
    );
    assert_eq!(a["solved"], 1);
    assert_eq!(b["solved"], 0);
    assert_eq!(b["false_successes"], 1);
    for side in [&c["a"], &c["b"]] {
        assert!(
            rows(side)[0]["model"]
                .as_str()
                .unwrap()
                .contains("fake-model"),
            "{side:#}"
        );
    }
    assert_eq!(server.requests_for("code").len() as u64, code_turns);
    assert_eq!(server.requests_for("fix").len() as u64, fix_turns);
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}

/// `--compare` takes exactly two pipelines, not with `--pipeline`, and an
/// unknown one stops the eval before anything runs (exit 2, named).
#[test]
fn bad_compare_flags_stop_the_eval_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("results");
    let out_arg = out.to_str().unwrap();
    let task = fixtures().join("01-py-one-line");
    let task = task.to_str().unwrap();
    for args in [
        vec!["--compare", "issue-to-pr", "--out", out_arg],
        vec![
            "--compare",
            "issue-to-pr",
            "issue-to-pr",
            "--pipeline",
            "issue-to-pr",
        ],
        vec!["--ab", "issue-to-pr", "no-such-pipeline", "--out", out_arg],
    ] {
        let mut all = vec!["--scripted", "perfect"];
        all.extend(args.iter().copied());
        let run = output_logged(&mut eval(dir.path(), Path::new(task), &all));
        assert_exit(&run, 2);
        if args.contains(&"no-such-pipeline") {
            let stderr = String::from_utf8_lossy(&run.stderr);
            assert!(stderr.contains("no-such-pipeline"), "{stderr}");
        }
    }
    // Nothing ran: no results file.
    assert!(!out.join("evals.jsonl").exists());
}
