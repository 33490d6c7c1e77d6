//! `orch memory …`: review and manage lessons (`docs/memory.md`). Every
//! change is one commit on `refs/orch/memory`; checked-in and user-global
//! lessons are shown but never changed. Checked-in lessons are read from
//! the commit at `HEAD` (what a run started there reads), and every string
//! that came from a lesson is printed through [`crate::text::untrusted`].

use super::error::CliError;
use super::output::Out;
use crate::exit;
use crate::memory::{Evidence, Kind, Lesson, MemoryError, Origin, Scope, Status, store};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Arguments of `orch memory`.
#[derive(Debug, clap::Args)]
pub struct MemoryArgs {
    /// The repository whose memory to use
    #[arg(long, default_value = ".", global = true)]
    pub repo: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: MemoryCommand,
}

/// `orch memory` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum MemoryCommand {
    /// List lessons (default: every status but retired)
    List {
        /// proposed, accepted, rejected, retired, flagged or all
        #[arg(long)]
        status: Option<String>,
        /// One JSON array on stdout
        #[arg(long)]
        json: bool,
    },
    /// Print one lesson's file
    Show {
        /// The lesson id
        id: String,
    },
    /// Accept lessons: only accepted lessons are injected into runs
    Accept {
        /// Lesson ids
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Reject lessons (kept, never injected)
    Reject {
        /// Lesson ids
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Retire lessons (kept in the ref's history, never injected)
    Forget {
        /// Lesson ids
        #[arg(required = true)]
        ids: Vec<String>,
    },
    /// Edit a lesson in $EDITOR (VISUAL, EDITOR, else vi)
    Edit {
        /// The lesson id
        id: String,
    },
    /// The history of refs/orch/memory, newest first
    Log {
        /// One JSON array on stdout
        #[arg(long)]
        json: bool,
    },
    /// Add a lesson by hand (accepted at once: you wrote it)
    Add {
        /// The lesson: its first line is the summary
        text: String,
        /// Path globs it applies to (repeatable), e.g. `src/parser/**`
        #[arg(long)]
        scope: Vec<String>,
        /// Words or symbols it applies to (repeatable)
        #[arg(long)]
        tag: Vec<String>,
        /// pitfall, convention, environment, fix-pattern or decision
        #[arg(long, default_value = "convention")]
        kind: String,
    },
}

fn mem_err(e: MemoryError) -> CliError {
    match e {
        MemoryError::Git(g) => CliError::Git(g),
        other => CliError::Invalid(format!("failed to {other}")),
    }
}

/// `orch memory`.
pub(super) fn cmd_memory(args: MemoryArgs) -> Result<i32, CliError> {
    let info = crate::git::open_repo(&args.repo)?;
    let (common, workdir) = (info.common_dir.as_path(), info.workdir.as_path());
    match args.command {
        MemoryCommand::List { status, json } => list(common, workdir, status.as_deref(), json),
        MemoryCommand::Show { id } => {
            let l = find(common, workdir, &id)?;
            let mut out = Out::stdout();
            out.text(&crate::text::untrusted(&l.render()))?;
            out.finish()?;
            Ok(exit::OK)
        }
        MemoryCommand::Accept { ids } => set_status(common, workdir, &ids, Status::Accepted),
        MemoryCommand::Reject { ids } => set_status(common, workdir, &ids, Status::Rejected),
        MemoryCommand::Forget { ids } => set_status(common, workdir, &ids, Status::Retired),
        MemoryCommand::Edit { id } => edit(common, workdir, &id),
        MemoryCommand::Log { json } => log(common, json),
        MemoryCommand::Add {
            text,
            scope,
            tag,
            kind,
        } => add(common, &args.repo, &text, scope, tag, &kind),
    }
}

fn all(common: &Path, workdir: &Path) -> Result<Vec<Lesson>, CliError> {
    let repo = crate::git::Repo::at(common);
    let head = repo.resolve_commit("HEAD").ok();
    let (lessons, problems) =
        crate::memory::load::load_all_at(common, head.as_ref(), workdir).map_err(mem_err)?;
    for p in problems {
        warn(&format!("failed to {p}"));
    }
    for name in uncommitted_lessons(&repo, head.as_ref(), workdir) {
        warn(&format!(
            ".orch/memory/{name} is not in the commit at HEAD: runs read checked-in lessons from the commit they start at, so it is not used until it is committed"
        ));
    }
    Ok(lessons)
}

fn warn(text: &str) {
    crate::ui::status_line(&format!("orch: warning: {}", crate::text::untrusted(text)));
}

/// The names of `.md` files in the working tree's `.orch/memory/` that the
/// commit `head` does not hold (read as directory entries only: nothing is
/// opened, no link followed).
fn uncommitted_lessons(
    repo: &crate::git::Repo,
    head: Option<&crate::git::CommitId>,
    workdir: &Path,
) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(workdir.join(".orch").join("memory")) else {
        return Vec::new();
    };
    let repo = repo.git2().ok();
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .filter(|n| {
            let spec = head.map(|h| format!("{h}:.orch/memory/{n}"));
            spec.is_none_or(|s| repo.as_ref().is_none_or(|r| r.revparse_single(&s).is_err()))
        })
        .collect();
    names.sort();
    names
}

fn find(common: &Path, workdir: &Path, id: &str) -> Result<Lesson, CliError> {
    all(common, workdir)?
        .into_iter()
        .find(|l| l.id == id)
        .ok_or_else(|| mem_err(MemoryError::Unknown(id.to_owned())))
}

fn state_of(l: &Lesson, today: &str) -> String {
    let mut s = l.status.as_str().to_owned();
    if l.expired(today) {
        s.push_str(",expired");
    }
    if l.flagged() {
        s.push_str(",flagged");
    }
    s
}

fn list(common: &Path, workdir: &Path, status: Option<&str>, json: bool) -> Result<i32, CliError> {
    let today = crate::memory::today();
    let keep: Box<dyn Fn(&Lesson) -> bool> = match status {
        None => Box::new(|l| l.status != Status::Retired),
        Some("all") => Box::new(|_| true),
        Some("flagged") => Box::new(|l| l.flagged()),
        Some(s) => {
            let st = Status::parse(s).ok_or_else(|| {
                CliError::Invalid(format!(
                    "failed to read --status `{s}`: expected proposed, accepted, rejected, retired, flagged or all"
                ))
            })?;
            Box::new(move |l| l.status == st)
        }
    };
    let lessons: Vec<Lesson> = all(common, workdir)?
        .into_iter()
        .filter(|l| keep(l))
        .collect();
    let mut out = Out::stdout();
    if json {
        let arr: Vec<serde_json::Value> = lessons
            .iter()
            .map(|l| {
                serde_json::json!({
                    "id": l.id, "title": l.title, "status": l.status.as_str(),
                    "expired": l.expired(&today), "flagged": l.flagged(),
                    "summary": l.summary, "scope": l.scope, "evidence": l.evidence,
                    "uses": l.uses, "failed_uses": l.failed_uses, "created": l.created,
                    "expires": l.expires,
                    "origin": match &l.origin { Origin::Ref => "refs/orch/memory".to_owned(), Origin::File(p) => p.display().to_string() },
                })
            })
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(arr))?;
    } else if lessons.is_empty() {
        writeln!(out, "no lessons")?;
    } else {
        for l in &lessons {
            let from = l
                .evidence
                .as_ref()
                .map(|e| match (e.run.is_empty(), e.stage.is_empty()) {
                    (true, true) => format!(" ({})", e.event),
                    _ => format!(" ({} {}/{})", e.event, e.run, e.stage),
                })
                .unwrap_or_default();
            let untrusted = crate::text::untrusted;
            writeln!(
                out,
                "{:<32} {:<18} uses {:<3} {}{}",
                untrusted(&l.id),
                state_of(l, &today),
                l.uses,
                untrusted(&l.summary),
                untrusted(&from)
            )?;
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

fn set_status(
    common: &Path,
    workdir: &Path,
    ids: &[String],
    status: Status,
) -> Result<i32, CliError> {
    let known = all(common, workdir)?;
    for id in ids {
        match known.iter().find(|l| &l.id == id) {
            None => return Err(mem_err(MemoryError::Unknown(id.clone()))),
            Some(Lesson {
                origin: Origin::File(path),
                ..
            }) => {
                return Err(mem_err(MemoryError::ReadOnly {
                    id: id.clone(),
                    path: path.clone(),
                }));
            }
            Some(_) => {}
        }
    }
    let verb = match status {
        Status::Accepted => "accept",
        Status::Rejected => "reject",
        Status::Retired => "forget",
        Status::Proposed => "propose",
    };
    store::update(common, verb, "", |current| {
        Ok(current
            .iter()
            .filter(|l| ids.contains(&l.id))
            .map(|l| {
                let mut l = l.clone();
                l.status = status;
                if status == Status::Accepted {
                    // Accepting again clears a flag: the user has looked.
                    (l.uses, l.failed_uses) = (0, 0);
                }
                l
            })
            .collect())
    })
    .map_err(mem_err)?;
    let mut out = Out::stdout();
    writeln!(out, "{} {}: {}", status.as_str(), ids.len(), ids.join(", "))?;
    out.finish()?;
    Ok(exit::OK)
}

fn edit(common: &Path, workdir: &Path, id: &str) -> Result<i32, CliError> {
    let lesson = find(common, workdir, id)?;
    if let Origin::File(path) = &lesson.origin {
        return Err(mem_err(MemoryError::ReadOnly {
            id: id.to_owned(),
            path: path.clone(),
        }));
    }
    let io = |e: std::io::Error| CliError::Internal(format!("failed to edit lesson `{id}`: {e}"));
    let mut file = tempfile::Builder::new()
        .prefix(&format!("{id}-"))
        .suffix(".md")
        .tempfile()
        .map_err(io)?;
    file.write_all(lesson.render().as_bytes()).map_err(io)?;
    let editor = ["VISUAL", "EDITOR"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.trim().is_empty()))
        .unwrap_or_else(|| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(file.path())
        .status()
        .map_err(io)?;
    if !status.success() {
        return Err(CliError::Invalid(format!(
            "failed to edit lesson `{id}`: `{editor}` exited with {status}; nothing changed"
        )));
    }
    let text = std::fs::read_to_string(file.path()).map_err(io)?;
    let mut edited =
        Lesson::parse(&text, &file.path().display().to_string(), Origin::Ref).map_err(mem_err)?;
    if edited.id != id {
        return Err(CliError::Invalid(format!(
            "failed to edit lesson `{id}`: its id cannot change (it was changed to `{}`); nothing changed",
            edited.id
        )));
    }
    if edited == lesson {
        let mut out = Out::stdout();
        writeln!(out, "unchanged: {id}")?;
        out.finish()?;
        return Ok(exit::OK);
    }
    edited.sanitize(&[]);
    store::update(common, "edit", "", |_| Ok(vec![edited])).map_err(mem_err)?;
    let mut out = Out::stdout();
    writeln!(out, "edited: {id}")?;
    out.finish()?;
    Ok(exit::OK)
}

fn log(common: &Path, json: bool) -> Result<i32, CliError> {
    let entries = store::log(common).map_err(mem_err)?;
    let mut out = Out::stdout();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string(&entries).unwrap_or_default()
        )?;
    } else {
        for e in &entries {
            writeln!(
                out,
                "{} {} {} {}",
                &e.sha[..12],
                e.time,
                crate::text::untrusted(&e.author),
                crate::text::untrusted(&e.subject)
            )?;
        }
    }
    out.finish()?;
    Ok(exit::OK)
}

fn add(
    common: &Path,
    repo: &Path,
    text: &str,
    paths: Vec<String>,
    tags: Vec<String>,
    kind: &str,
) -> Result<i32, CliError> {
    let kind: Kind = serde_json::from_value(serde_json::Value::String(kind.to_owned()))
        .map_err(|_| {
            CliError::Invalid(format!(
                "failed to read --kind `{kind}`: expected pitfall, convention, environment, fix-pattern or decision"
            ))
        })?;
    let summary = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if summary.is_empty() {
        return Err(CliError::Invalid(
            "failed to add a lesson: its text is empty".to_owned(),
        ));
    }
    // The model's key too, when orch.toml names where it lives.
    let secrets: Vec<String> =
        super::model::resolve_config(&super::args::ModelArgs::default(), Some(repo))
            .ok()
            .and_then(|c| c.api_key.map(|k| k.value))
            .into_iter()
            .collect();
    let title = crate::text::one_line(summary, 72);
    let mut written = String::new();
    store::update(common, "add", "Orch-Event: manual\n", |current| {
        let taken = |id: &str| current.iter().any(|l| l.id == id);
        let mut l = Lesson {
            id: crate::memory::new_id(&title, &taken),
            title: title.clone(),
            kind,
            scope: Scope { paths, tags },
            evidence: Some(Evidence {
                event: "manual".to_owned(),
                ..Evidence::default()
            }),
            created: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            expires: None,
            status: Status::Accepted,
            uses: 0,
            failed_uses: 0,
            summary: summary.to_owned(),
            body: text.to_owned(),
            origin: Origin::Ref,
        };
        l.sanitize(&secrets);
        written = l.id.clone();
        Ok(vec![l])
    })
    .map_err(mem_err)?;
    let mut out = Out::stdout();
    writeln!(out, "added: {written}")?;
    out.finish()?;
    Ok(exit::OK)
}
