//! Lane bootstrap: what a stage's lane gets before its agent starts, so a
//! fresh (or reused) worktree can run the project's tests. Called at stage
//! start, after the lane is ready, whether it was created or reused.
//!
//! 1. **`.worktreeinclude`** (gitignore syntax, at the root of the user's
//!    working tree): files that match it, with git's rules at any depth,
//!    *and* are ignored in the user's tree ([`mod@include`] selects them once
//!    per run) are copied into the lane at the same path, parent
//!    directories created (reflink when the filesystem can, else a plain
//!    copy; unchanged files — same size and mtime — are skipped). A file is
//!    copied only when the lane ignores it too, so the stage commit (which
//!    stages like `git add -A`) can never contain it.
//! 2. **A setup command** (`setup:` in the pipeline, else `[setup]` in the
//!    repository's `.orch/orch.toml`) run through the sandboxed tool shell,
//!    keyed by a hash of the command and the lockfiles it names; the key is
//!    kept in the lane's git admin dir (in no tree), so a warm lane skips it.
//!    A failing setup fails the stage before any model call. With neither,
//!    the setup `orch setup --lane` saved (`.orch/setup.sh`) is the command.
//!
//! The baseline run of the stage's `verify` commands, which follows, lives
//! with the gate in [`crate::agent::verify::run_baseline`].

mod include;

use super::ctx::Bootstrap;
use super::ctx::RunCtx;
use super::error::{RunError, blocking};
use crate::git::{self, GitError};
use crate::pipeline::{LaneSetup, Pipeline};
use crate::runlog::{ActionEvent, ActionLog, SetupRecord, event};
use crate::tools::ToolContext;
use include::{Include, included_files};
use std::path::Path;
use std::time::{Duration, Instant};

/// Lockfiles that key a setup command naming none.
pub(crate) const DEFAULT_LOCKFILES: &[&str] = &[
    "package-lock.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "uv.lock",
    "poetry.lock",
    "requirements*.txt",
    "Cargo.lock",
    "go.sum",
];
/// How long a setup command may run unless it says otherwise.
const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(600);
/// Output bytes of a setup run kept (head and tail) for `setup.log`.
const SETUP_OUTPUT_BYTES: usize = 64 * 1024;
/// The setup cache of a lane, in its git admin dir.
const SETUP_STATE_FILE: &str = "orch-setup.json";
/// Bumped when the key's recipe changes, so old keys never match.
const KEY_FORMAT: &str = "orch-setup-key/1";

impl Bootstrap {
    /// Reads `.worktreeinclude` and lists the files it includes, and picks
    /// the setup command (the pipeline's, else the repository's
    /// `orch.toml`). Blocking. The error names the file and line.
    pub(crate) fn load(workdir: &Path, pipeline: &Pipeline) -> Result<Bootstrap, String> {
        let setup = match &pipeline.setup {
            Some(s) => Some((s.clone(), format!("{} (setup:)", pipeline.origin))),
            None => match crate::config::lane_setup(workdir).map_err(|e| e.to_string())? {
                Some((s, at)) => Some((s, at.to_string())),
                None => crate::setup::saved_lane_setup(workdir)?,
            },
        };
        let include = match Include::read(workdir)? {
            Some(include) => included_files(workdir, &include).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        Ok(Bootstrap {
            workdir: workdir.to_path_buf(),
            include,
            setup,
        })
    }
}

/// What copying the included files into a lane did.
#[derive(Debug, Default)]
struct CopyReport {
    copied: Vec<String>,
    unchanged: usize,
    /// Included files the lane does not ignore (its `.gitignore` at the
    /// start commit differs from the user's tree): not copied, since the
    /// stage commit would contain them.
    not_ignored_in_lane: Vec<String>,
    /// Files gone from the user's tree, or not regular files any more.
    missing: Vec<String>,
    /// `reflink` when every copy was a clone, else `copy`.
    method: &'static str,
}

/// Copies `files` from `workdir` into `lane` (see [`CopyReport`]).
fn copy_includes(workdir: &Path, lane: &Path, files: &[String]) -> Result<CopyReport, String> {
    let ignored = git::ignored::ignored_in_lane(lane, files).map_err(|e| e.to_string())?;
    let mut report = CopyReport {
        method: "reflink",
        ..CopyReport::default()
    };
    let mut cloner = Cloner { reflink: true };
    for (rel, ignored) in files.iter().zip(ignored) {
        if !ignored {
            report.not_ignored_in_lane.push(rel.clone());
            continue;
        }
        match copy_one(&workdir.join(rel), lane, rel, &mut cloner)
            .map_err(|e| format!("copy {rel} into the lane: {e}"))?
        {
            Copied::Unchanged => report.unchanged += 1,
            Copied::Missing => report.missing.push(rel.clone()),
            Copied::Done(method) => {
                if method == "copy" {
                    report.method = "copy";
                }
                report.copied.push(rel.clone());
            }
        }
    }
    Ok(report)
}

enum Copied {
    Unchanged,
    Missing,
    Done(&'static str),
}

/// Copies one file into the lane atomically (temp file + rename), keeping
/// its mode and mtime (the next stage's "unchanged" test). Refuses to write
/// through a directory of the lane that leads outside it (a symlink).
fn copy_one(src: &Path, lane: &Path, rel: &str, cloner: &mut Cloner) -> std::io::Result<Copied> {
    let meta = match std::fs::symlink_metadata(src) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Ok(Copied::Missing),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Copied::Missing),
        Err(e) => return Err(e),
    };
    let dst = lane.join(rel);
    if let Ok(d) = std::fs::symlink_metadata(&dst)
        && d.is_file()
        && d.len() == meta.len()
        && d.modified().ok() == meta.modified().ok()
    {
        return Ok(Copied::Unchanged);
    }
    let parent = dst.parent().unwrap_or(lane);
    // Neither the directories made nor the file written may lead outside
    // the lane through a symlink in it: check the deepest existing
    // directory before creating any, and the result after.
    let mut existing = parent;
    while !existing.exists() {
        existing = existing.parent().unwrap_or(lane);
    }
    inside(existing, lane)?;
    std::fs::create_dir_all(parent)?;
    inside(parent, lane)?;
    let name = dst
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let tmp = parent.join(format!(".{name}.orch-copy"));
    // A leftover (or planted symlink) of that name is removed, not followed.
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let method = cloner.clone_file(src, &tmp)?;
    let file = std::fs::OpenOptions::new().write(true).open(&tmp)?;
    file.set_permissions(meta.permissions())?;
    file.set_modified(meta.modified()?)?;
    drop(file);
    std::fs::rename(&tmp, &dst)?;
    Ok(Copied::Done(method))
}

/// Fails unless `dir` resolves to a place inside `lane` (canonical).
fn inside(dir: &Path, lane: &Path) -> std::io::Result<()> {
    if dir.canonicalize()?.starts_with(lane) {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{} leads outside the lane",
            dir.display()
        )))
    }
}

/// Clones files with `ioctl(FICLONE)` until the filesystem says it cannot,
/// then copies them (`std::io::copy`, which is `copy_file_range` on Linux).
struct Cloner {
    reflink: bool,
}

impl Cloner {
    fn clone_file(&mut self, src: &Path, dst: &Path) -> std::io::Result<&'static str> {
        let mut from = std::fs::File::open(src)?;
        // `create_new`: never through a symlink, never into an existing file.
        let mut to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(dst)?;
        #[cfg(target_os = "linux")]
        if self.reflink {
            let Err(errno) = rustix::fs::ioctl_ficlone(&to, &from) else {
                return Ok("reflink");
            };
            // Not supported here (ext4, tmpfs, across filesystems): copy
            // from now on. Any other error is a real one.
            let err = std::io::Error::from(errno);
            match err.raw_os_error() {
                Some(
                    libc::EOPNOTSUPP | libc::EXDEV | libc::EINVAL | libc::ENOTTY | libc::ENOSYS,
                ) => self.reflink = false,
                _ => return Err(err),
            }
        }
        std::io::copy(&mut from, &mut to)?;
        Ok("copy")
    }
}

/// The setup cache kept in a lane's admin dir.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct SetupState {
    key: String,
    command: String,
    lockfiles: Vec<String>,
}

/// What preparing a lane found: the setup's record, and why the stage must
/// fail before its agent runs (`None`: go on).
pub(super) struct Prepared {
    pub setup: Option<SetupRecord>,
    pub failure: Option<String>,
}

/// Prepares the lane at `tool_ctx.root` for stage `stage_id`: copies the
/// included files, then runs the setup command unless the lane already ran
/// it with the same key. Everything is in the action log
/// (`worktree_include`, `lane_setup`) and the setup's output in
/// `stages/<id>/setup.log`.
pub(super) async fn prepare_lane(
    ctx: &RunCtx,
    stage_id: &str,
    tool_ctx: &ToolContext,
    watch: &super::lanes::WatchSlot,
    log: &mut ActionLog,
) -> Result<Prepared, RunError> {
    let boot = &ctx.bootstrap;
    let lane = tool_ctx.root.clone();
    if boot.include.is_empty() && boot.setup.is_none() {
        return Ok(Prepared {
            setup: None,
            failure: None,
        });
    }
    // Nothing is written into the lane before its watcher is up.
    watch.get().await;
    if !boot.include.is_empty() {
        let started = Instant::now();
        let (w, l, files) = (boot.workdir.clone(), lane.clone(), boot.include.clone());
        let copied = tokio::task::spawn_blocking(move || copy_includes(&w, &l, &files))
            .await
            .map_err(|e| RunError::Join(e.to_string()))?;
        match copied {
            Ok(r) => log.append(&ActionEvent::WorktreeInclude(event::WorktreeInclude {
                method: Some(
                    if r.copied.is_empty() {
                        "none"
                    } else {
                        r.method
                    }
                    .to_owned(),
                ),
                copied: Some(r.copied),
                unchanged: Some(r.unchanged),
                not_ignored_in_lane: Some(r.not_ignored_in_lane),
                missing: Some(r.missing),
                duration_us: Some(started.elapsed().as_micros() as u64),
                error: None,
            }))?,
            Err(why) => {
                log.append(&ActionEvent::WorktreeInclude(event::WorktreeInclude {
                    error: Some(why.clone()),
                    ..event::WorktreeInclude::default()
                }))?;
                return Ok(Prepared {
                    setup: None,
                    failure: Some(format!("lane bootstrap failed: {why}; no model was called")),
                });
            }
        }
    }
    let Some((setup, origin)) = &boot.setup else {
        return Ok(Prepared {
            setup: None,
            failure: None,
        });
    };
    run_setup(ctx, stage_id, setup, origin, tool_ctx, log).await
}

/// Runs the setup command in the lane unless its key is the lane's already.
async fn run_setup(
    ctx: &RunCtx,
    stage_id: &str,
    setup: &LaneSetup,
    origin: &str,
    tool_ctx: &ToolContext,
    log: &mut ActionLog,
) -> Result<Prepared, RunError> {
    let lane = tool_ctx.root.clone();
    let patterns: Vec<String> = match &setup.lockfiles {
        Some(l) => l.clone(),
        None => DEFAULT_LOCKFILES.iter().map(|s| (*s).to_owned()).collect(),
    };
    let (l, command) = (lane.clone(), setup.command.clone());
    let ((key, lockfiles), admin) = blocking(move || {
        Ok((
            setup_key(&l, &command, &patterns)?,
            git::ignored::lane_admin_dir(&l)?,
        ))
    })
    .await?;
    let state_path = admin.join(SETUP_STATE_FILE);
    let cached = std::fs::read(&state_path)
        .ok()
        .and_then(|b| serde_json::from_slice::<SetupState>(&b).ok())
        .is_some_and(|s| s.key == key);
    let mut record = SetupRecord {
        command: setup.command.clone(),
        key: key.clone(),
        lockfiles: lockfiles.clone(),
        ran: !cached,
        passed: true,
        ..SetupRecord::default()
    };
    if cached {
        log.append(&ActionEvent::LaneSetup(event::LaneSetup {
            command: setup.command.clone(),
            origin: origin.to_owned(),
            key: key.clone(),
            lockfiles: lockfiles.clone(),
            ran: false,
            outcome: event::SetupOutcome::Skipped {
                reason: "the lane already ran this setup with the same lockfiles".to_owned(),
            },
        }))?;
        return Ok(Prepared {
            setup: Some(record),
            failure: None,
        });
    }
    // A setup that fails half-way must not count as done.
    let _ = std::fs::remove_file(&state_path);
    let timeout = setup
        .timeout_secs
        .map_or(DEFAULT_SETUP_TIMEOUT, Duration::from_secs);
    crate::ui::status_line(&format!(
        "orch: stage {stage_id}: lane setup `{}`",
        crate::text::one_line(&setup.command, 60)
    ));
    let setup_ctx = setup_context(ctx, tool_ctx, timeout).map_err(|source| RunError::Tools {
        stage: stage_id.to_owned(),
        path: lane.clone(),
        source,
    })?;
    let ran = crate::tools::run_sandboxed(&setup_ctx, &setup.command, timeout).await;
    let redact = |t: &str| crate::secrets::redact(t, &ctx.session.secrets);
    let (output, why) = match ran {
        Err(fatal) => (String::new(), Some(fatal)),
        Ok((Err(e), _)) => (String::new(), Some(format!("could not start bash: {e}"))),
        Ok((Ok(r), sandbox)) => {
            // Tracked files a setup changed end up in the stage's commit: say so.
            let l = lane.clone();
            // git's own status: exact whatever the watcher saw.
            let changed = blocking(move || git::changed_paths(&l)).await?;
            record.exit_code = r.exit_code;
            record.timed_out = r.timed_out;
            record.duration_ms = r.duration.as_millis() as u64;
            let status = match (r.timed_out, r.exit_code) {
                (true, _) => Some(format!("timed out after {}s", timeout.as_secs())),
                (false, Some(0)) => None,
                (false, Some(c)) => Some(format!("exited {c}")),
                (false, None) => Some(format!("was killed by signal {}", r.signal.unwrap_or(0))),
            };
            log.append(&ActionEvent::LaneSetup(event::LaneSetup {
                command: setup.command.clone(),
                origin: origin.to_owned(),
                key: key.clone(),
                lockfiles: lockfiles.clone(),
                ran: true,
                outcome: event::SetupOutcome::Ran {
                    exit_code: r.exit_code,
                    timed_out: r.timed_out,
                    duration_ms: record.duration_ms,
                    sandbox,
                    passed: status.is_none(),
                    changed,
                    output: crate::text::head_tail_lines(&r.output, 4096),
                },
            }))?;
            (r.output, status)
        }
    };
    let rel = format!("stages/{stage_id}/setup.log");
    ctx.run_dir.write_file(
        &rel,
        redact(&format!("$ {}\n{output}", setup.command)).as_bytes(),
    )?;
    record.log = Some(rel.clone());
    record.passed = why.is_none();
    let failure = match why {
        None => {
            let state = SetupState {
                key,
                command: setup.command.clone(),
                lockfiles,
            };
            let bytes = serde_json::to_vec_pretty(&state).unwrap_or_default();
            std::fs::write(&state_path, bytes).map_err(|source| RunError::Tools {
                stage: stage_id.to_owned(),
                path: state_path.clone(),
                source,
            })?;
            None
        }
        Some(why) => {
            let tail = crate::text::tail_bytes(output.trim_end(), 2048);
            Some(redact(&format!(
                "lane setup failed: `{}` {why} (configured in {origin}); no model was called. Output ({rel} in the run record):\n{tail}",
                setup.command
            )))
        }
    };
    Ok(Prepared {
        setup: Some(record),
        failure,
    })
}

/// The tool context a setup command runs in: the stage's environment and
/// hook, a longer timeout and more output, and the sandbox of a *writing*
/// role from the repository's `[sandbox]` (a setup installs dependencies
/// whatever the stage's role may do).
fn setup_context(
    ctx: &RunCtx,
    stage: &ToolContext,
    timeout: Duration,
) -> std::io::Result<ToolContext> {
    let home = crate::environment::current().home();
    let settings = crate::sandbox::SandboxSettings::load(
        Some(&ctx.bootstrap.workdir),
        crate::dirs::user_config_dir().as_deref(),
        home.as_deref(),
    )
    .map_err(std::io::Error::other)?;
    let sandbox = crate::sandbox::ToolSandbox::new(settings.for_role(None, None, false))?;
    let mut out = ToolContext::new(&stage.root, &[], false, stage.policy.clone())?;
    out.env = stage.env.clone();
    out.pre_exec = stage.pre_exec.clone();
    out.limits.max_timeout = timeout;
    out.limits.max_output_bytes = SETUP_OUTPUT_BYTES;
    out.sandbox = Some(std::sync::Arc::new(sandbox));
    Ok(out)
}

/// The setup's cache key in `lane`: a hash of the command and of each
/// lockfile found (path and contents), and the lockfiles found, sorted.
fn setup_key(
    lane: &Path,
    command: &str,
    patterns: &[String],
) -> Result<(String, Vec<String>), GitError> {
    let mut found = Vec::new();
    for pattern in patterns {
        let (dir, name) = match pattern.rsplit_once('/') {
            Some((d, n)) => (d, n),
            None => ("", pattern.as_str()),
        };
        if !name.contains(['*', '?']) {
            if lane.join(pattern).is_file() {
                found.push(pattern.clone());
            }
            continue;
        }
        let Ok(entries) = std::fs::read_dir(lane.join(dir)) else {
            continue;
        };
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            if wildcard(name, &file) && entry.file_type().is_ok_and(|t| t.is_file()) {
                found.push(if dir.is_empty() {
                    file
                } else {
                    format!("{dir}/{file}")
                });
            }
        }
    }
    found.sort();
    found.dedup();
    let mut manifest = format!("{KEY_FORMAT}\ncommand\0{command}\n");
    for f in &found {
        let path = lane.join(f);
        let bytes = std::fs::read(&path).map_err(|source| GitError::Io {
            op: "read a setup lockfile",
            path,
            source,
        })?;
        manifest.push_str(&format!("{f}\0{}\n", git::ignored::blob_id(&bytes)?));
    }
    Ok((git::ignored::blob_id(manifest.as_bytes())?, found))
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and
/// `?` any one character.
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Reads the run's lane bootstrap (`.worktreeinclude`, the setup command)
/// off the async threads; a bad file is an input error.
pub(super) async fn load_bootstrap(
    workdir: &Path,
    pipeline: &Pipeline,
) -> Result<Bootstrap, RunError> {
    let (w, p) = (workdir.to_path_buf(), pipeline.clone());
    tokio::task::spawn_blocking(move || Bootstrap::load(&w, &p))
        .await
        .map_err(|e| RunError::Join(e.to_string()))?
        .map_err(RunError::Config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_like_a_shell() {
        assert!(wildcard("requirements*.txt", "requirements.txt"));
        assert!(wildcard("requirements*.txt", "requirements-dev.txt"));
        assert!(!wildcard("requirements*.txt", "requirements.txt.bak"));
        assert!(wildcard("go.su?", "go.sum"));
        assert!(!wildcard("go.su?", "go.su"));
        assert!(wildcard("*", ""));
    }

    #[test]
    fn copies_skip_unchanged_files_and_never_leave_the_lane() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().canonicalize().unwrap();
        let (user, lane, outside) = (root.join("user"), root.join("lane"), root.join("outside"));
        for d in [&user, &lane, &outside] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(user.join("config")).unwrap();
        std::fs::write(user.join(".env"), "A=1\n").unwrap();
        std::fs::write(user.join("config/a.yml"), "x: 1\n").unwrap();
        let mut c = Cloner { reflink: true };
        let copy = |rel: &str, c: &mut Cloner| copy_one(&user.join(rel), &lane, rel, c);
        assert!(matches!(copy(".env", &mut c).unwrap(), Copied::Done(_)));
        assert_eq!(std::fs::read_to_string(lane.join(".env")).unwrap(), "A=1\n");
        assert!(matches!(copy(".env", &mut c).unwrap(), Copied::Unchanged));
        // A planted symlink at the temp name is replaced, not followed.
        std::fs::write(lane.join(".env"), "edited by the agent\n").unwrap();
        std::os::unix::fs::symlink(outside.join("victim"), lane.join("..env.orch-copy")).unwrap();
        assert!(matches!(copy(".env", &mut c).unwrap(), Copied::Done(_)));
        assert_eq!(std::fs::read_to_string(lane.join(".env")).unwrap(), "A=1\n");
        assert!(!outside.join("victim").exists());
        // A lane directory that is a symlink out of the lane is refused.
        std::os::unix::fs::symlink(&outside, lane.join("config")).unwrap();
        let err = copy("config/a.yml", &mut c).err().unwrap();
        assert!(err.to_string().contains("leads outside the lane"), "{err}");
        assert!(!outside.join("a.yml").exists());
        assert!(matches!(copy("gone", &mut c).unwrap(), Copied::Missing));
    }

    #[test]
    fn the_key_follows_the_command_and_the_lockfiles() {
        let dir = tempfile::tempdir().unwrap();
        let p = |s: &[&str]| s.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        std::fs::write(dir.path().join("requirements.txt"), "a\n").unwrap();
        std::fs::write(dir.path().join("requirements-dev.txt"), "b\n").unwrap();
        let pats = p(&["requirements*.txt", "Cargo.lock"]);
        let (k1, found) = setup_key(dir.path(), "pip install", &pats).unwrap();
        assert_eq!(found, p(&["requirements-dev.txt", "requirements.txt"]));
        assert_eq!(setup_key(dir.path(), "pip install", &pats).unwrap().0, k1);
        assert_ne!(
            setup_key(dir.path(), "pip install -q", &pats).unwrap().0,
            k1
        );
        std::fs::write(dir.path().join("requirements.txt"), "a\nc\n").unwrap();
        assert_ne!(setup_key(dir.path(), "pip install", &pats).unwrap().0, k1);
    }
}
