//! Snapshot tests of the review commands (`runs`, `show`, `review`, `diff`,
//! `log`), with SHAs, run ids, times and paths redacted.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, assert_exit, orch, run_text, stdout_json,
    write_issue, write_pipeline,
};
use serde_json::Value;

fn redact(text: &str, run_id: &str, repo: &std::path::Path) -> String {
    let mut s = text.replace(run_id, "RUN");
    s = s.replace(&repo.display().to_string(), "REPO");
    for (pattern, with) in [
        (r"\b[0-9a-f]{40}\b", "SHA40"),
        (r"\b[0-9a-f]{10}\b", "SHA10"),
        (r"index [0-9a-f]{7}\.\.[0-9a-f]{7}", "index X..Y"),
        (r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", "DATE"),
        (r"\d+\.\d+s\b", "T"),
        (r"in \d+ms", "in Nms"),
        (r"\(\d+\.\ds\)", "(T)"),
    ] {
        s = regex::Regex::new(pattern)
            .unwrap()
            .replace_all(&s, with)
            .into_owned();
    }
    s
}

fn stdout(args: &[&str], repo: &TestRepo) -> (Option<i32>, String, String) {
    run_text(orch().current_dir(&repo.path).args(args))
}

#[test]
fn show_review_log_diff_and_runs_read_the_record() {
    let repo = TestRepo::new();
    repo.write("calc.py", "def add(a, b):\n    return a - b\n");
    repo.commit_all("base");
    // A price for the fake model, in the repo's orch.toml (USD per 1M tokens).
    repo.write(
        ".orch/orch.toml",
        "[prices.\"m\"]\nprompt = 1000.0\ncompletion = 2000.0\n",
    );
    repo.commit_all("prices");
    let before = repo.snapshot();
    let tmp = tempfile::tempdir().unwrap();
    let pipeline = write_pipeline(
        tmp.path(),
        "p",
        "name: p\nstages:\n  code:\n    role: coder\n  review:\n    role: reviewer\n    needs: [code]\n",
    );
    let issue = write_issue(tmp.path(), "# add subtracts\n");
    let server = FakeServer::start(
        Script::new()
            .agent(
                "code",
                vec![
                    crate::support::fix_add("e").with_usage(100, 20),
                    Reply::finish("f", "add() adds now.", None).with_usage(150, 10),
                ],
            )
            .agent(
                "review",
                vec![Reply::finish("f", "Correct.", Some("approve")).with_usage(200, 5)],
            ),
    );
    let out = OrchRun::new(&pipeline, &repo)
        .issue(&issue)
        .model(&server.base_url, "m")
        .json()
        .output();
    assert_exit(&out, 0);
    let run_id = stdout_json(&out)["run_id"].as_str().unwrap().to_owned();
    let r = |t: &str| redact(t, &run_id, &repo.path);

    let (code, show, _) = stdout(&["show", &run_id], &repo);
    assert_eq!(code, Some(0));
    assert_eq!(
        r(&show),
        "run RUN (p): succeeded
created DATE  base SHA10  model m at BASE_URL
tokens 485 (prompt 450, completion 35), cost $0.5200
PR: add subtracts (orch/RUN/pr)

stage       status       role      verdict             time turns   tokens  commit     branch
code        succeeded    coder     -                   T     2      280  SHA10 orch/RUN/code
review      succeeded    reviewer  approve             T     1      205  SHA10 orch/RUN/review

record: REPO/.git/orch/runs/RUN
"
        .replace("BASE_URL", &server.base_url)
    );
    // `last` names the newest run.
    let (_, show_last, _) = stdout(&["show", "last"], &repo);
    assert_eq!(show_last, show);

    // The cost is in the stage commit's trailers too: 250 prompt + 30 completion tokens.
    let msg = repo.git(&["log", "-1", "--format=%B", &format!("orch/{run_id}/code")]);
    assert!(msg.contains("Orch-Cost: $0.3100"), "{msg}");
    let (code, review, _) = stdout(&["review", &run_id, "code"], &repo);
    assert_eq!(code, Some(0));
    assert_eq!(
        r(&review),
        "=== stage code (coder) — succeeded
commit SHA40 on orch/RUN/code
turns 2, tokens 280, T

summary:
  add() adds now.

actions:
  - edit_file calc.py (+1 −1)

 calc.py | 2 +-
 1 file changed, 1 insertion(+), 1 deletion(-)

diff --git a/calc.py b/calc.py
index X..Y 100644
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b

"
    );
    let (_, diff, _) = stdout(&["diff", &run_id, "code"], &repo);
    assert!(
        review.contains(&diff),
        "orch diff prints the patch review shows"
    );

    let (code, log, _) = stdout(&["log", &run_id, "code"], &repo);
    assert_eq!(code, Some(0));
    let log = r(&log);
    let lines: Vec<String> = log
        .lines()
        .map(|l| {
            regex::Regex::new(r"^ *T ")
                .unwrap()
                .replace(l, "T ")
                .into_owned()
        })
        .collect();
    assert_eq!(lines[0], "=== code (coder)");
    assert_eq!(lines[1], "T start code (coder) from SHA10");
    assert!(
        lines
            .iter()
            .any(|l| l == "T ← model turn 1 in Nms, 100+20 tokens calls: edit_file"),
        "{log}"
    );
    assert!(
        lines.iter().any(|l| l == "T   edit_file calc.py (+1 −1)"),
        "{log}"
    );
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with("T end: succeeded SHA10 (1 file, +1 -1)"),
        "{log}"
    );
    let (_, raw, _) = stdout(&["log", &run_id, "code", "--json"], &repo);
    assert!(
        raw.lines()
            .all(|l| serde_json::from_str::<Value>(l).is_ok())
    );

    let (code, runs, _) = stdout(&["runs", "--json"], &repo);
    assert_eq!(code, Some(0));
    let runs: Value = serde_json::from_str(&runs).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1);
    assert_eq!(runs[0]["run_id"], run_id.as_str());
    assert_eq!(runs[0]["pipeline"], "p");
    assert_eq!(runs[0]["status"], "succeeded");
    assert!(runs[0]["created"].as_str().unwrap().ends_with('Z'));
    let (_, table, _) = stdout(&["runs"], &repo);
    assert!(
        r(&table).contains("RUN   p              succeeded"),
        "{table}"
    );

    // Unknown names list what exists.
    let (code, _, err) = stdout(&["show", "nope"], &repo);
    assert_eq!(code, Some(2));
    assert!(err.contains(&run_id), "{err}");
    let (code, _, err) = stdout(&["review", &run_id, "nope"], &repo);
    assert_eq!(code, Some(2));
    assert!(err.contains("stages: code, review"), "{err}");
    assert_eq!(repo.snapshot(), before);
}
