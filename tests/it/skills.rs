//! Agent Skills (issue 30, point 2) through the real binary against the
//! scripted server: a repository's `.claude/skills/` and `.agents/skills/`
//! (read from the base commit) and the user config dir's `skills/` are a
//! catalogue in the system prompt, byte-identical on every request;
//! `load_skill` returns the body and the skill's files, logged with the
//! blob id; a role's `skills:` selects (an unknown name fails the run
//! before anything exists); an invalid `SKILL.md` is named and skipped,
//! and what orch ignores in a valid one (`allowed-tools`) is said; a
//! Claude Code agent file's `skills:` is honoured; `--dry-run` shows the
//! skills and their bytes; a stage without skills sends what it sent
//! before.

use crate::support::{
    FakeServer, OrchRun, Reply, Script, TestRepo, offered_tools, only_run_id, record_dir,
    stage_events, stdout_json, tool_results, write_issue, write_pipeline,
};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Output;

const RELEASE_NOTES: &str = "---\nname: release-notes\ndescription: Write release notes for a change. Use when a task asks for release notes or a changelog entry.\nlicense: MIT\n---\n# Release notes\n\nRead `template.md` and fill it in for every user-visible change.\n";
const TEMPLATE: &str = "## Changes\n\n- <one line per change>\n";
const LINT_FIX: &str = "---\nname: lint-fix\ndescription: Fix lint warnings. Use when the task mentions lint.\n---\nRun the linter and fix each warning.\n";

/// A repository with two skills: `release-notes` (with a template) in
/// `.claude/skills/`, `lint-fix` in `.agents/skills/`, and `extra` files.
fn skills_repo(extra: &[(&str, &str)]) -> TestRepo {
    let mut files = vec![
        ("calc.py", "def add(a, b):\n    return a - b\n"),
        (".claude/skills/release-notes/SKILL.md", RELEASE_NOTES),
        (".claude/skills/release-notes/template.md", TEMPLATE),
        (".agents/skills/lint-fix/SKILL.md", LINT_FIX),
    ];
    files.extend_from_slice(extra);
    TestRepo::with_commit(&files, "base")
}

/// Runs one stage `code` of `role` on `repo`, the model answering
/// `replies`; `config` replaces the user config dir.
fn run(
    repo: &TestRepo,
    role: &str,
    replies: Vec<Reply>,
    config: Option<&Path>,
) -> (Output, FakeServer) {
    let server = FakeServer::start(Script::new().agent("code", replies));
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# notes\n\nWrite the release notes.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "one",
        &format!("stages:\n  code:\n    role: {role}\n    task: Write the release notes.\n"),
    );
    let mut cmd = OrchRun::new(&pipeline, repo)
        .issue(&issue)
        .model(&server.base_url, "m");
    if let Some(dir) = config {
        cmd = cmd.env("ORCH_CONFIG_DIR", dir);
    }
    let out = cmd.output();
    assert!(server.violations().is_empty(), "{:?}", server.violations());
    (out, server)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn system(req: &crate::support::Recorded) -> String {
    req.messages()[0]["content"].as_str().unwrap().to_owned()
}

/// The one event `kind` of stage `code`.
fn event(repo: &TestRepo, kind: &str) -> Vec<Value> {
    stage_events(&record_dir(repo, &only_run_id(&repo.path)), "code", kind)
}

#[test]
fn the_catalogue_is_in_every_request_and_load_skill_returns_the_body_logged_with_its_blob() {
    let repo = skills_repo(&[]);
    let (out, server) = run(
        &repo,
        "coder",
        vec![
            Reply::tool_call("l1", "load_skill", json!({"name": "release-notes"})),
            Reply::tool_call(
                "r1",
                "read_file",
                json!({"path": ".claude/skills/release-notes/template.md"}),
            ),
            Reply::finish("f", "Wrote the notes.", None),
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.requests_for("code");
    assert_eq!(reqs.len(), 3);
    let first = system(&reqs[0]);
    let catalogue = "# Skills\n\nSkills are instructions for particular kinds of work. When your task matches one, call `load_skill` with its name before you start, and follow it.\n\n- lint-fix: Fix lint warnings. Use when the task mentions lint.\n- release-notes: Write release notes for a change. Use when a task asks for release notes or a changelog entry.\n";
    // The last section of the system prompt (its final newline trimmed).
    assert!(first.ends_with(catalogue.trim_end()), "{first}");
    assert_eq!(
        offered_tools(&reqs[0]).last().map(String::as_str),
        Some("load_skill")
    );
    // Byte-stable: the same system prompt and tools on every request.
    for r in &reqs[1..] {
        assert_eq!(system(r), first);
        assert_eq!(r.body["tools"], reqs[0].body["tools"]);
    }
    let loaded = &tool_results(&reqs[1])[0];
    assert!(
        loaded.starts_with("# Skill `release-notes` (.claude/skills/release-notes/SKILL.md)\n\n# Release notes\n\nRead `template.md` and fill it in"),
        "{loaded}"
    );
    assert!(
        loaded.contains("Files of this skill (read them with read_file, or load_skill with `file`):\n- .claude/skills/release-notes/template.md\n"),
        "{loaded}"
    );
    assert!(tool_results(&reqs[2])[1].contains("<one line per change>"));
    let loads = event(&repo, "skill_load");
    assert_eq!(loads.len(), 1, "{loads:?}");
    assert_eq!(loads[0]["name"], "release-notes");
    assert_eq!(loads[0]["call_id"], "l1");
    assert_eq!(loads[0]["path"], ".claude/skills/release-notes/SKILL.md");
    assert_eq!(
        loads[0]["blob"],
        repo.git(&["rev-parse", "HEAD:.claude/skills/release-notes/SKILL.md"])
            .trim()
    );
    let skills = &event(&repo, "skills")[0];
    let offered: Vec<&str> = skills["offered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["lint-fix", "release-notes"]);
    assert_eq!(skills["prompt_bytes"], catalogue.len());
    assert_eq!(skills["skipped"], json!([]));
}

/// A stage of `role` (its file `text` at `path` in [`skills_repo`]) whose
/// model loads `release-notes`, then finishes.
fn load_release_notes_as(role: &str, path: &str, text: &str) -> (TestRepo, Output, FakeServer) {
    let repo = skills_repo(&[(path, text)]);
    let (out, server) = run(
        &repo,
        role,
        vec![
            Reply::tool_call("l1", "load_skill", json!({"name": "release-notes"})),
            Reply::finish("f", "Done.", None),
        ],
        None,
    );
    (repo, out, server)
}

#[test]
fn a_role_with_skills_other_does_not_see_release_notes_and_cannot_load_it() {
    let (repo, out, server) = load_release_notes_as(
        "linter",
        ".orch/roles/linter.md",
        "---\nname: linter\ntools: [read_file, finish]\nskills: [lint-fix]\n---\nYou fix lint.\n",
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let reqs = server.requests_for("code");
    let first = system(&reqs[0]);
    assert!(first.contains("- lint-fix: Fix lint warnings."), "{first}");
    assert!(!first.contains("release-notes"), "{first}");
    assert_eq!(
        tool_results(&reqs[1])[0],
        "error: load_skill: no skill `release-notes` is available to this role; available: lint-fix"
    );
    assert_eq!(event(&repo, "skills")[0]["selected"], json!(["lint-fix"]));
    assert!(event(&repo, "skill_load").is_empty());
}

#[test]
fn an_unknown_name_in_a_roles_skills_fails_the_run_naming_the_role_file_before_anything_exists() {
    let repo = skills_repo(&[(
        ".orch/roles/linter.md",
        "---\nname: linter\nskills: [lint-fix, nope]\n---\nYou fix lint.\n",
    )]);
    let (out, server) = run(&repo, "linter", vec![], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("failed to use role `linter` (")
            && err.contains(".orch/roles/linter.md): skills: `nope` is not a skill of this repository or the user config dir (found: lint-fix, release-notes)"),
        "{err}"
    );
    assert!(server.requests().is_empty());
    assert!(
        !repo.path.join(".git/orch/runs").exists()
            || std::fs::read_dir(repo.path.join(".git/orch/runs"))
                .unwrap()
                .next()
                .is_none()
    );
}

#[test]
fn an_invalid_skill_is_named_with_its_file_and_rule_and_skipped() {
    let repo = skills_repo(&[
        (
            ".claude/skills/Bad_Skill/SKILL.md",
            "---\nname: Bad_Skill\ndescription: Bad.\n---\nBody.\n",
        ),
        (
            ".github/skills/no-description/SKILL.md",
            "---\nname: no-description\n---\nBody.\n",
        ),
        (
            ".claude/skills/pushy/SKILL.md",
            "---\nname: pushy\ndescription: Push things.\nallowed-tools: Bash(git push:*)\n---\nPush.\n",
        ),
    ]);
    let (out, server) = run(
        &repo,
        "coder",
        vec![Reply::finish("f", "Done.", None)],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("orch: skill .claude/skills/Bad_Skill/SKILL.md:2:7: `name` \"Bad_Skill\" is not valid: expected 1-64 lowercase letters, digits and single hyphens, not starting or ending with a hyphen (skipped)"),
        "{err}"
    );
    assert!(
        err.contains("orch: skill .github/skills/no-description/SKILL.md:2:1: missing field `description` (skipped)"),
        "{err}"
    );
    // A valid skill's key orch does not honour is said, not dropped.
    assert!(
        err.contains("orch: skill .claude/skills/pushy/SKILL.md: `allowed-tools` is not honoured: it would widen what a role may do"),
        "{err}"
    );
    let first = system(&server.requests_for("code")[0]);
    assert!(
        !first.contains("Bad_Skill") && !first.contains("no-description"),
        "{first}"
    );
    assert!(first.contains("- pushy: Push things."), "{first}");
    assert!(first.contains("- release-notes: "), "{first}");
    let skipped = event(&repo, "skills")[0]["skipped"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(skipped, 2);
}

#[test]
fn a_claude_code_agent_files_skills_are_honoured() {
    let (_repo, out, server) = load_release_notes_as(
        "notes-writer",
        ".claude/agents/notes-writer.md",
        "---\nname: notes-writer\ndescription: Writes release notes.\ntools: Read, Skill\nskills: release-notes, python-style\n---\nYou write release notes.\n",
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("key `skills`") && !err.contains("Skill"),
        "{err}"
    );
    // A skill the user does not have: the public file still runs, said.
    assert!(
        err.contains("role `notes-writer`: skills: `python-style` not found, so not offered (a Claude Code agent file loads unchanged; found: lint-fix, release-notes)"),
        "{err}"
    );
    let reqs = server.requests_for("code");
    assert_eq!(
        offered_tools(&reqs[0]),
        ["read_file", "finish", "load_skill"]
    );
    let first = system(&reqs[0]);
    assert!(
        first.contains("- release-notes: Write release notes"),
        "{first}"
    );
    assert!(!first.contains("lint-fix"), "{first}");
    assert!(tool_results(&reqs[1])[0].contains("fill it in for every user-visible change"));
}

#[test]
fn the_users_skill_wins_a_name_with_a_note_and_its_files_load_through_load_skill() {
    let repo = skills_repo(&[]);
    let config = tempfile::tempdir().unwrap();
    let dir = config.path().join("skills/release-notes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: release-notes\ndescription: My own release notes.\n---\nUse checklist.md.\n",
    )
    .unwrap();
    std::fs::write(dir.join("checklist.md"), "- [ ] breaking changes named\n").unwrap();
    let (out, server) = run(
        &repo,
        "coder",
        vec![
            Reply::tool_call(
                "l1",
                "load_skill",
                json!({"name": "release-notes", "file": "checklist.md"}),
            ),
            Reply::finish("f", "Done.", None),
        ],
        Some(config.path()),
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "orch: skill .claude/skills/release-notes/SKILL.md: skill `release-notes` is also defined by {}, which is used",
            dir.join("SKILL.md").display()
        )),
        "{err}"
    );
    let reqs = server.requests_for("code");
    assert!(system(&reqs[0]).ends_with("- release-notes: My own release notes."));
    assert_eq!(tool_results(&reqs[1])[0], "- [ ] breaking changes named\n");
    let load = &event(&repo, "skill_load")[0];
    assert_eq!(load["path"], "checklist.md");
    assert_eq!(load["source"], "user");
    assert_eq!(
        load["blob"],
        repo.git(&["hash-object", dir.join("checklist.md").to_str().unwrap()])
            .trim()
    );
}

#[test]
fn without_skills_a_stage_is_offered_no_load_skill_and_no_catalogue() {
    let repo = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "base");
    let (out, server) = run(
        &repo,
        "coder",
        vec![Reply::finish("f", "Done.", None)],
        None,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let first = &server.requests_for("code")[0];
    assert!(!offered_tools(first).contains(&"load_skill".to_owned()));
    assert!(!system(first).contains("load_skill") && !system(first).contains("# Skills"));
    assert!(event(&repo, "skills").is_empty());
}

#[test]
fn dry_run_lists_the_skills_of_a_stage_and_the_bytes_they_add() {
    let repo = skills_repo(&[]);
    let scratch = tempfile::tempdir().unwrap();
    let issue = write_issue(scratch.path(), "# notes\n\nWrite the release notes.\n");
    let pipeline = write_pipeline(
        scratch.path(),
        "one",
        "stages:\n  code:\n    role: coder\n    task: Write the release notes.\n",
    );
    let dry = |json_out: bool| {
        let mut run = OrchRun::new(&pipeline, &repo)
            .issue(&issue)
            .model("http://127.0.0.1:9", "m")
            .args(["--dry-run"]);
        if json_out {
            run = run.json();
        }
        run.output()
    };
    let out = dry(true);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let plan = stdout_json(&out);
    let stage = &plan["stages"][0];
    let skills = &stage["skills"];
    assert_eq!(skills["offered"], json!(["lint-fix", "release-notes"]));
    let system = stage["system_prompt"].as_str().unwrap();
    assert!(
        system.contains("- release-notes: Write release notes"),
        "{system}"
    );
    // The bytes: the catalogue, its separator, `, load_skill` in the tools
    // line, and the tool's schema.
    let bytes = skills["first_request_bytes"].as_u64().unwrap();
    // What the skills really add: the first request of the same stage with
    // and without them, as the server received them.
    let length = |repo: &TestRepo| {
        let (out, server) = run(repo, "coder", vec![Reply::finish("f", "Done.", None)], None);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let first = &server.requests_for("code")[0];
        first
            .header("content-length")
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let plain = TestRepo::with_commit(&[("calc.py", "def add(a, b):\n    return a - b\n")], "base");
    let (with, without) = (length(&repo), length(&plain));
    println!("first coder request: {without} B without skills, {with} B with two");
    assert_eq!(with - without, bytes, "{skills}");
    assert!(
        stage["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("load_skill"))
    );
    let text = dry(false);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains(&format!(
            "skills: lint-fix, release-notes (+{bytes} bytes in the first request)"
        )),
        "{text}"
    );
}
