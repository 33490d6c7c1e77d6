//! Property tests over everything that parses untrusted input: pipeline and
//! role files, tool-call arguments from the model, verdicts, replay files and
//! bash command lines (policy only; nothing is run).
//!
//! Inputs are seeds from `fixtures/fuzz/` (plus the repo's own pipelines and
//! roles) put through random byte- and token-level mutations, and wholly
//! random text. The property is always the same: no panic, no hang, and an
//! error is a clear message rather than a crash. 256 cases per property by
//! default; `PROPTEST_CASES=20000 cargo test --test it fuzz` runs more.
//!
//! Safety of the tool fuzzing itself: `bash` is never given a fuzzed command.
//! Its calls are fuzzed as JSON shape only, with `command` forced to a
//! harmless fixed value (or a non-string, which is refused before anything
//! runs). All other tools run in a temp dir whose sibling canary file must be
//! unchanged afterwards.

use orch::ids::Verdict;
use orch::llm::replay::ReplayModel;
use orch::pipeline::parse_pipeline;
use orch::policy::BashPolicy;
use orch::role::parse_role;
use orch::tools::{ALL_TOOLS, ToolContext, dispatch, fence};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::{Map, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Cases per property: `PROPTEST_CASES`, else 256.
fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        // Keep going through rejected inputs; there are none by design.
        max_global_rejects: cases.saturating_mul(4),
        // The runner is driven by hand (not the `proptest!` macro), so it has
        // no source file to store regressions beside; a failure prints the
        // minimal input instead, to be added to fixtures/fuzz/.
        failure_persistence: None,
        ..Config::default()
    }
}

fn corpus_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Every file (recursively) under `dir` whose name ends in one of `exts`.
fn files(dir: &Path, exts: &[&str]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            out.extend(files(&p, exts));
        } else if exts.iter().any(|x| p.to_string_lossy().ends_with(x)) {
            out.push(std::fs::read(&p).unwrap());
        }
    }
    out
}

fn seeds(kind: &str) -> Vec<Vec<u8>> {
    let root = corpus_root();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = match kind {
        "pipelines" => {
            let mut v = files(&root.join("fuzz/pipelines"), &[".yaml"]);
            v.extend(files(&root.join("pipelines"), &[".yaml"]));
            v.extend(files(&manifest.join("pipelines"), &[".yaml"]));
            v
        }
        "roles" => {
            let mut v = files(&root.join("fuzz/roles"), &[".md"]);
            v.extend(files(&root.join("roles"), &[".md"]));
            v.extend(files(&manifest.join("roles"), &[".md"]));
            v
        }
        "tool-args" => files(&root.join("fuzz/tool-args"), &[".json", ".bin"]),
        "replay" => {
            let mut v = files(&root.join("fuzz/replay"), &[".json"]);
            v.push(std::fs::read(root.join("demo/replay.json")).unwrap());
            v
        }
        _ => unreachable!("unknown corpus {kind}"),
    };
    assert!(out.len() >= 5, "corpus {kind} has {} seeds", out.len());
    out.dedup();
    out
}

/// Tokens worth splicing into YAML, Markdown and JSON inputs.
const TOKENS: &[&str] = &[
    ":",
    ": ",
    "- ",
    "\n",
    "\n  ",
    "\t",
    "{",
    "}",
    "[",
    "]",
    ",",
    "\"",
    "'",
    "\\",
    "#",
    "&a ",
    "*a",
    "<<: *a",
    "!!binary ",
    "!tag ",
    "---\n",
    "...\n",
    "~",
    "null",
    "true",
    "-1",
    "1e999",
    "18446744073709551616",
    "0x7f",
    "\u{feff}",
    "\u{0}",
    "\u{202e}",
    "é",
    "\r\n",
    "|\n",
    ">-\n",
    "? ",
    "%YAML 1.2\n",
    "needs: ",
    "role: ",
    "rework: ",
    "max_rounds: ",
    "stages:",
    "tools: ",
    "bash: ",
    "\\u0000",
    "\\ud800",
    "\"path\": ",
    "\"..\"",
    "\"/etc/\"",
    "{\"a\":",
    "[[[[",
    "]]]]",
];

/// One edit of a seed.
#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Token(usize, usize),
    Delete(usize, usize),
    Duplicate(usize, usize),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<usize>(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Token(i, t)),
        (any::<usize>(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<usize>(), 1usize..256).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in mutations {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
        match *m {
            Mutation::Flip(i, x) if !b.is_empty() => {
                let i = i % b.len();
                b[i] ^= x.max(1);
            }
            Mutation::Flip(..) => {}
            Mutation::Insert(i, x) => {
                let i = at(i, b.len());
                b.insert(i, x);
            }
            Mutation::Token(i, t) => {
                let i = at(i, b.len());
                b.splice(i..i, TOKENS[t].bytes());
            }
            Mutation::Delete(i, n) => {
                let i = at(i, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Duplicate(i, n) => {
                let i = at(i, b.len());
                let end = (i + n).min(b.len());
                let copy: Vec<u8> = b[i..end].to_vec();
                b.splice(i..i, copy);
            }
            Mutation::Truncate(i) => {
                let i = at(i, b.len());
                b.truncate(i);
            }
        }
    }
    b
}

/// Text derived from the corpus `kind`: a mutated seed, random bytes, or
/// random characters; decoded lossily (non-UTF-8 files are refused before
/// parsing, and the lossy text is still hostile).
fn input(kind: &str) -> impl Strategy<Value = String> {
    let seeds = seeds(kind);
    let n = seeds.len();
    prop_oneof![
        6 => (0..n, proptest::collection::vec(mutation(), 0..12))
            .prop_map(move |(i, ms)| String::from_utf8_lossy(&apply(&seeds[i], &ms)).into_owned()),
        1 => proptest::collection::vec(any::<u8>(), 0..512)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        1 => any::<String>(),
    ]
}

fn run<S: Strategy>(strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(config());
    if let Err(e) = runner.run(&strategy, test) {
        panic!("{e}");
    }
}

fn known_roles() -> Vec<String> {
    ["coder", "reviewer", "docs", "explore"]
        .map(String::from)
        .to_vec()
}

#[test]
fn fuzz_pipeline_parser_never_panics() {
    let roles = known_roles();
    run(input("pipelines"), |text| {
        for origin in ["fuzz.yaml", "pipeline"] {
            if let Err(e) = parse_pipeline(&text, origin, &roles) {
                let msg = e.to_string();
                prop_assert!(msg.starts_with(origin), "error names the file: {msg}");
            }
        }
        Ok(())
    });
}

#[test]
fn fuzz_role_parser_never_panics() {
    run(input("roles"), |text| {
        if let Err(e) = parse_role(&text, "fuzz.md") {
            let msg = e.to_string();
            prop_assert!(msg.starts_with("fuzz.md"), "error names the file: {msg}");
        }
        Ok(())
    });
}

#[test]
fn fuzz_replay_parser_never_panics() {
    run(input("replay"), |text| {
        if let Err(e) = ReplayModel::from_str(&text, "fuzz.json") {
            prop_assert!(e.to_string().contains("fuzz.json"), "{e}");
        }
        Ok(())
    });
}

#[test]
fn fuzz_verdict_parse_accepts_exactly_the_two_verdicts() {
    run(any::<String>(), |s| {
        match Verdict::parse(&s) {
            Some(v) => prop_assert_eq!(v.as_str(), s.trim()),
            None => prop_assert!(!["approve", "request_changes"].contains(&s.trim())),
        }
        Ok(())
    });
    for v in [Verdict::Approve, Verdict::RequestChanges] {
        assert_eq!(Verdict::parse(&format!(" {} \n", v.as_str())), Some(v));
    }
}

#[test]
fn fuzz_bash_policy_and_path_fence_never_panic() {
    let policy = BashPolicy {
        deny: vec!["git push".into()],
        ask: vec!["make *".into()],
        allowlist: vec!["rm -rf /tmp/x".into()],
        ..BashPolicy::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let shellish = prop_oneof![
        any::<String>(),
        proptest::collection::vec(
            prop_oneof![
                Just("rm -rf /"),
                Just("sudo"),
                Just("bash -c '"),
                Just("$("),
                Just(")"),
                Just("`"),
                Just("'"),
                Just("\""),
                Just("\\"),
                Just(";"),
                Just("&&"),
                Just("|"),
                Just("<<EOF\n"),
                Just("EOF\n"),
                Just("eval "),
                Just("xargs "),
                Just("find . -exec "),
                Just("{} \\;"),
                Just(" "),
                Just("\n"),
                Just("git push -f"),
                Just(":(){ :|:& };:"),
                Just("dd of=/dev/sda"),
                Just("env X=1 "),
                Just("<("),
                Just("${HOME}"),
                Just("#"),
                Just("x=/; "),
                Just("$x"),
                Just("alias a='"),
                Just("for v in / .; do "),
                Just("<<<"),
                Just(" | base64 -d | "),
                Just("python3 -c \"os.system('"),
                Just("curl -o f.sh u; sh f.sh"),
                Just("git -C "),
                Just("git update-ref "),
                Just("find / -delete"),
                Just("xargs -I{} "),
            ],
            0..40,
        )
        .prop_map(|parts| parts.concat()),
    ];
    run(shellish, |cmd| {
        let _ = policy.decide(&cmd);
        for access in [fence::Access::Read, fence::Access::Write] {
            if let Ok(f) = fence::resolve(&root, &cmd, access) {
                prop_assert!(f.abs.starts_with(&root), "{cmd:?} → {}", f.abs.display());
            }
        }
        Ok(())
    });
}

/// Argument names the tools know, so random objects hit real code paths.
const ARG_NAMES: &[&str] = &[
    "path",
    "content",
    "old_string",
    "new_string",
    "replace_all",
    "offset",
    "limit",
    "pattern",
    "glob",
    "summary",
    "verdict",
    "timeout_secs",
    "role",
    "task",
];

/// Strings that probe the fence and the decoders.
const NASTY: &[&str] = &[
    "",
    " ",
    ".",
    "..",
    "../x",
    "/",
    "/etc/passwd",
    "a/../../b",
    ".git/config",
    ".git",
    "link",
    "link/passwd",
    "bin.dat",
    "latin1.txt",
    "a.txt",
    "dir/",
    "~",
    "$HOME",
    "*",
    "**",
    "a\u{0}b",
    "\n",
    "é/ü.txt",
    "approve",
    "request_changes",
    "(",
    "[",
    "\\",
    "true",
    "-1",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        (0..NASTY.len()).prop_map(|i| Value::from(NASTY[i])),
        any::<String>().prop_map(Value::from),
        (1usize..20_000).prop_map(|n| Value::from("é".repeat(n))),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((0..ARG_NAMES.len(), inner), 0..6).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (ARG_NAMES[k].to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// An argument object whose values are mostly of the right kind.
fn tool_object() -> impl Strategy<Value = String> {
    proptest::collection::vec((0..ARG_NAMES.len(), json_value()), 0..6).prop_map(|kv| {
        Value::Object(
            kv.into_iter()
                .map(|(k, v)| (ARG_NAMES[k].to_owned(), v))
                .collect(),
        )
        .to_string()
    })
}

/// A tool call: a name (never `bash`; see the bash property) and its
/// arguments text.
fn tool_call() -> impl Strategy<Value = (String, String)> {
    let names: Vec<&'static str> = ALL_TOOLS.iter().copied().filter(|t| *t != "bash").collect();
    let name = prop_oneof![
        8 => (0..names.len()).prop_map(move |i| names[i].to_owned()),
        1 => "[a-zA-Z_]{0,12}".prop_filter("not bash", |n| n != "bash"),
    ];
    let args = prop_oneof![
        3 => tool_object(),
        3 => input("tool-args"),
        1 => json_value().prop_map(|v| v.to_string()),
    ];
    (name, args)
}

/// A temp worktree with hostile contents, inside a parent that holds a canary.
struct Sandbox {
    _outer: tempfile::TempDir,
    outer: PathBuf,
    ctx: ToolContext,
}

const CANARY: &str = "canary: must not change\n";

impl Sandbox {
    fn new() -> Sandbox {
        let outer_dir = tempfile::tempdir().unwrap();
        let outer = outer_dir.path().canonicalize().unwrap();
        let root = outer.join("root");
        std::fs::create_dir_all(root.join("dir")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]\n").unwrap();
        std::fs::write(root.join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(root.join("bin.dat"), [0u8, 1, 2, 255, 0, 7]).unwrap();
        std::fs::write(root.join("latin1.txt"), b"caf\xe9\n").unwrap();
        std::os::unix::fs::symlink("/etc", root.join("link")).unwrap();
        std::fs::write(outer.join("outside.txt"), CANARY).unwrap();
        let all: Vec<String> = ALL_TOOLS.iter().map(|s| s.to_string()).collect();
        let ctx = ToolContext::new(&root, &all, false, BashPolicy::default()).unwrap();
        Sandbox {
            _outer: outer_dir,
            outer,
            ctx,
        }
    }

    /// Nothing next to the worktree was created or changed.
    fn assert_outside_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.outer)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["outside.txt", "root"]);
        assert_eq!(
            std::fs::read_to_string(self.outer.join("outside.txt")).unwrap(),
            CANARY
        );
        assert!(!Path::new("/etc/orch-fuzz").exists());
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn fuzz_tool_arguments_never_panic_and_stay_in_the_worktree() {
    let sandbox = Sandbox::new();
    let rt = runtime();
    run(tool_call(), |(name, args)| {
        let out = rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(60),
                    dispatch(&sandbox.ctx, &name, &args),
                )
                .await
            })
            .map_err(|_| TestCaseError::fail(format!("{name} hung on {args:.200}")))?;
        if out.is_error {
            prop_assert!(
                out.content.starts_with("error: "),
                "{name}: {:.300}",
                out.content
            );
        }
        prop_assert!(out.summary.chars().count() <= 120, "{}", out.summary);
        prop_assert!(out.policy.is_none(), "only bash has a policy decision");
        Ok(())
    });
    sandbox.assert_outside_untouched();
}

/// `bash` arguments as JSON shape only: `command` is always the harmless
/// `true`, or a non-string (refused before anything runs).
#[test]
fn fuzz_bash_argument_shapes_never_panic() {
    let sandbox = Sandbox::new();
    let rt = runtime();
    let command = prop_oneof![
        3 => Just(Value::from("true")),
        1 => json_value().prop_filter("never a command string", |v| !v.is_string()),
        1 => Just(Value::Null),
    ];
    let shape = (
        command,
        proptest::collection::vec((0..ARG_NAMES.len(), json_value()), 0..4),
        any::<bool>(),
    );
    run(shape, |(command, extra, omit)| {
        let mut obj: Map<String, Value> = extra
            .into_iter()
            .map(|(k, v)| (ARG_NAMES[k].to_owned(), v))
            .collect();
        // Clamp the timeout so a fuzzed value cannot stall the test; the
        // command is `true` anyway.
        if let Some(t) = obj.get_mut("timeout_secs")
            && t.as_u64().is_some_and(|n| n > 5)
        {
            *t = Value::from(5);
        }
        obj.remove("command");
        if !omit {
            obj.insert("command".to_owned(), command.clone());
        }
        let args = Value::Object(obj).to_string();
        let out = rt
            .block_on(async {
                tokio::time::timeout(
                    Duration::from_secs(60),
                    dispatch(&sandbox.ctx, "bash", &args),
                )
                .await
            })
            .map_err(|_| TestCaseError::fail(format!("bash hung on {args:.200}")))?;
        let ran = !omit && command == "true";
        if ran && !out.is_error {
            prop_assert_eq!(out.exit_code, Some(0));
        } else if !ran {
            prop_assert!(out.is_error, "{}", out.content);
            prop_assert!(out.content.starts_with("error: bash: "), "{}", out.content);
            prop_assert_eq!(out.exit_code, None);
        }
        Ok(())
    });
    sandbox.assert_outside_untouched();
}
