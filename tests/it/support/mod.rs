//! Shared helpers for the integration tests: a scripted fake model server, a
//! hermetic test repository, a builder for the real `orch` binary, and
//! readers for what a run leaves behind.

// Each test module uses a different subset of the helpers.
#![allow(dead_code, unused_imports)]

pub mod cmd;
pub mod fake_server;
pub mod forge_pr;
pub mod forge_server;
pub mod inspect;
pub mod llm;
pub mod pytools;
pub mod repo;
pub mod run;
pub mod schema;

pub use cmd::{FAKE_API_KEY, orch, orch_shell, orch_with_model};
pub use fake_server::{FakeServer, Recorded, Reply, Script, tool_pairing_violations};
pub use inspect::{
    offered_tools, read_jsonl, record_dir, stage_events, stage_record, state_json, tool_results,
    user_text, walk,
};
pub use llm::{assert_one_identical_retry, exhausted};
pub use repo::{RepoSnapshot, TestRepo};
pub use run::{
    MEDIAN_ISSUE, OrchRun, assert_exit, median_stub_repo, output_logged, resume, resume_command,
    run_median_stage, run_on_fake, run_text, signal_reply, stdout_json, write_issue,
    write_pipeline,
};

/// A generous bound for any single await in a test: long enough for a loaded
/// 2-core machine, short enough that a hang fails instead of stalling CI.
pub const AWAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// The edit most scripts make: `calc.py`'s `add` subtracts (`a - b`), the
/// call makes it add.
pub fn fix_add(id: &str) -> Reply {
    Reply::tool_call(
        id,
        "edit_file",
        serde_json::json!({"path": "calc.py", "old_string": "a - b", "new_string": "a + b"}),
    )
}

/// The id of the only run recorded in the repository at `repo`.
pub fn only_run_id(repo: &std::path::Path) -> String {
    let mut ids: Vec<String> = std::fs::read_dir(repo.join(".git/orch/runs"))
        .expect("runs dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(ids.len(), 1, "exactly one run: {ids:?}");
    ids.pop().unwrap()
}
