//! A run's directory (`<common>/orch/runs/<id>/`): creating and finding
//! it, writing its files atomically and its state durably, and the
//! [`StateSink`] told after every durable state write.

use super::error::{RecordError, io_err};
use super::state::RunState;
use crate::ids::RunId;
use std::io::Write;
use std::path::{Path, PathBuf};

/// How many fresh run ids [`RunDir::create_new`] tries. With 64 random bits
/// per id a second try is already a sign of trouble; the bound keeps a broken
/// random source from looping forever.
pub(crate) const CREATE_ATTEMPTS: usize = 16;

/// The directory holding all runs of a repository: `<common-git-dir>/orch/runs`.
pub(crate) fn runs_dir(common_dir: &Path) -> PathBuf {
    common_dir.join("orch").join("runs")
}

/// Paths of one run's record.
#[derive(Debug, Clone)]
pub(crate) struct RunDir {
    /// `<common-git-dir>/orch/runs/<run-id>`.
    pub root: PathBuf,
    /// Files replaced without an fsync since the last [`RunDir::write_state`]
    /// (shared by the clones of this handle).
    unsynced: std::sync::Arc<std::sync::Mutex<Vec<PathBuf>>>,
    /// Told after every durable state write: records the run on its run ref
    /// (shared by the clones of this handle); `None` when no sink is
    /// installed ([`install_state_sink`]).
    sink: Option<std::sync::Arc<dyn StateSink>>,
}

/// Told after every durable write of a run's state (every stage boundary):
/// the run-ref recorder of `distributed` commits the record on its git ref.
/// Defined here and implemented there, so the run record does not import
/// `distributed`; the entry (`cli::dispatch`) installs it before any record
/// is opened ([`install_state_sink`]).
pub(crate) trait StateSink: std::fmt::Debug + Send + Sync {
    /// The record at `root` was written with run status `status`.
    /// `changed`: the stages whose records changed, when known; `defer`:
    /// the work may be left to a background thread (a stage boundary of
    /// the scheduler), else it is done before this returns.
    fn state_written(
        &self,
        root: &Path,
        status: &str,
        changed: Option<&[&str]>,
        defer: bool,
    ) -> Result<(), String>;
}

/// Makes the [`StateSink`] of each record opened from now on (first call
/// wins).
static STATE_SINK: std::sync::OnceLock<fn() -> std::sync::Arc<dyn StateSink>> =
    std::sync::OnceLock::new();

/// Installs the factory of the [`StateSink`] every [`RunDir`] opened from
/// now on gets (first call wins; later calls are ignored).
pub(crate) fn install_state_sink(new: fn() -> std::sync::Arc<dyn StateSink>) {
    let _ = STATE_SINK.set(new);
}

/// A new [`StateSink`] from the installed factory; `None` when none is.
pub(crate) fn new_state_sink() -> Option<std::sync::Arc<dyn StateSink>> {
    STATE_SINK.get().map(|new| new())
}

impl RunDir {
    /// Creates the directory of a new run under a fresh [`RunId`]. The run
    /// root is made with `create_dir`, so it is never one that exists: should
    /// the id be taken, another is drawn (up to [`CREATE_ATTEMPTS`] in all).
    pub(crate) fn create_new(common_dir: &Path) -> Result<(RunId, RunDir), RecordError> {
        RunDir::create_unique(common_dir, RunId::new)
    }

    /// [`RunDir::create_new`] with the ids drawn from `next_id`.
    pub(crate) fn create_unique(
        common_dir: &Path,
        mut next_id: impl FnMut() -> RunId,
    ) -> Result<(RunId, RunDir), RecordError> {
        let runs = runs_dir(common_dir);
        std::fs::create_dir_all(&runs).map_err(io_err(&runs))?;
        let mut taken = Vec::new();
        for _ in 0..CREATE_ATTEMPTS {
            let id = next_id();
            match RunDir::create(common_dir, &id) {
                Ok(dir) => return Ok((id, dir)),
                Err(RecordError::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::AlreadyExists =>
                {
                    taken.push(id.into_string());
                }
                Err(e) => return Err(e),
            }
        }
        Err(RecordError::Io {
            path: runs,
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                format!(
                    "{CREATE_ATTEMPTS} fresh run ids were all taken ({})",
                    taken.join(", ")
                ),
            ),
        })
    }

    /// Creates the directory of the run `run_id` (and its `stages/`); fails
    /// with `AlreadyExists` when that run root exists.
    pub(crate) fn create(common_dir: &Path, run_id: &RunId) -> Result<RunDir, RecordError> {
        let runs = runs_dir(common_dir);
        std::fs::create_dir_all(&runs).map_err(io_err(&runs))?;
        let root = runs.join(run_id.as_str());
        std::fs::create_dir(&root).map_err(io_err(&root))?;
        let stages = root.join("stages");
        std::fs::create_dir(&stages).map_err(io_err(&stages))?;
        Ok(RunDir::at(root))
    }

    /// Opens an existing run's directory, or lists the runs that exist.
    pub(crate) fn open(common_dir: &Path, run_id: &str) -> Result<RunDir, RecordError> {
        let dir = runs_dir(common_dir);
        let root = dir.join(run_id);
        if run_id.is_empty() || run_id.contains(['/', '\\']) || !root.join("state.json").is_file() {
            let mut known = list_run_ids(common_dir);
            known.truncate(8);
            let known = if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            };
            return Err(RecordError::UnknownRun {
                run: run_id.to_owned(),
                dir,
                known,
            });
        }
        Ok(RunDir::at(root))
    }

    /// The record at `root`, as it is (nothing checked or created).
    pub(crate) fn at(root: PathBuf) -> RunDir {
        RunDir {
            root,
            unsynced: Default::default(),
            sink: new_state_sink(),
        }
    }

    fn unsynced(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.unsynced.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Before a durable write of the state: fsyncs every other file replaced
    /// without one (see the module docs; `state.json` itself is about to be
    /// replaced durably); a file that is gone since is skipped.
    fn sync_before_state_write(&self) -> Result<(), RecordError> {
        let state = self.state_path();
        let paths = std::mem::take(&mut *self.unsynced());
        for path in paths.into_iter().filter(|p| *p != state) {
            match std::fs::File::open(&path) {
                Ok(f) => f.sync_all().map_err(io_err(&path))?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&path)(e)),
            }
        }
        Ok(())
    }

    fn remember_unsynced(&self, path: PathBuf) {
        let mut paths = self.unsynced();
        if !paths.contains(&path) {
            paths.push(path);
        }
    }

    /// The state file.
    pub(crate) fn state_path(&self) -> PathBuf {
        self.root.join("state.json")
    }

    /// The directory of one stage's files (created on demand).
    pub(crate) fn stage_dir(&self, stage: &str) -> Result<PathBuf, RecordError> {
        let dir = self.root.join("stages").join(stage);
        std::fs::create_dir_all(&dir).map_err(io_err(&dir))?;
        Ok(dir)
    }

    /// Writes the run state atomically and durably, after making every file
    /// written without an fsync durable first.
    pub(crate) fn write_state(&self, state: &RunState) -> Result<(), RecordError> {
        self.sync_before_state_write()?;
        self.write_state_alone(state)?;
        self.state_written(state, None, false)
    }

    /// Writes the run state atomically and durably, leaving the files written
    /// without an fsync for the next [`RunDir::write_state`] (the one fsync
    /// at the start of a run). The run ref is left to the first stage
    /// boundary: nothing before the first request waits for it.
    pub(crate) fn write_state_alone(&self, state: &RunState) -> Result<(), RecordError> {
        let path = self.state_path();
        write_atomic(&path, &state_bytes(self, state)?)?;
        // The file now on disk is durable: no need to fsync it again.
        self.unsynced().retain(|p| *p != path);
        Ok(())
    }

    /// Writes the run state atomically, without an fsync (see the module docs).
    pub(crate) fn write_state_unsynced(&self, state: &RunState) -> Result<(), RecordError> {
        self.replace_unsynced(&self.state_path(), &state_bytes(self, state)?)
    }

    fn replace_unsynced(&self, path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
        replace(path, bytes, false)?;
        self.remember_unsynced(path.to_path_buf());
        Ok(())
    }

    /// After every durable state write (every stage boundary): the run's
    /// record is committed on its run ref `refs/orch/runs/<id>` (see
    /// [`StateSink`], implemented by `distributed::runref`). `changed`: the stages whose records
    /// changed, when known; `defer`: the commit is left to the recorder's
    /// background thread (a stage boundary of the scheduler), else it is
    /// made before this returns, after whatever was deferred.
    fn state_written(
        &self,
        state: &RunState,
        changed: Option<&[usize]>,
        defer: bool,
    ) -> Result<(), RecordError> {
        let ids: Option<Vec<&str>> = changed.map(|c| {
            c.iter()
                .filter_map(|&i| state.stages.get(i))
                .map(|r| r.id.as_str())
                .collect()
        });
        let status = state.status.as_str();
        let Some(sink) = &self.sink else {
            return Ok(());
        };
        sink.state_written(&self.root, status, ids.as_deref(), defer)
            .map_err(|e| RecordError::Io {
                path: self.root.clone(),
                source: std::io::Error::other(format!("record the run on its git ref: {e}")),
            })
    }

    /// Reads the run state.
    pub(crate) fn read_state(&self) -> Result<RunState, RecordError> {
        let path = self.state_path();
        let text = std::fs::read_to_string(&path).map_err(io_err(&path))?;
        serde_json::from_str(&text).map_err(|e| RecordError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })
    }

    /// Writes a whole file of the record atomically (issue text, PR text,
    /// transcripts, diffs).
    pub(crate) fn write_file(&self, rel: &str, bytes: &[u8]) -> Result<PathBuf, RecordError> {
        let path = self.file_path(rel)?;
        write_atomic(&path, bytes)?;
        Ok(path)
    }

    /// [`RunDir::write_file`] without an fsync: the next
    /// [`RunDir::write_state`] makes it durable.
    pub(crate) fn write_file_unsynced(
        &self,
        rel: &str,
        bytes: &[u8],
    ) -> Result<PathBuf, RecordError> {
        let path = self.file_path(rel)?;
        self.replace_unsynced(&path, bytes)?;
        Ok(path)
    }

    /// `rel` under the run root, its parent directories created.
    fn file_path(&self, rel: &str) -> Result<PathBuf, RecordError> {
        let path = self.root.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io_err(parent))?;
        }
        Ok(path)
    }
}

/// The pretty JSON of `state` with a final newline.
fn state_bytes(dir: &RunDir, state: &RunState) -> Result<Vec<u8>, RecordError> {
    let mut bytes = serde_json::to_vec_pretty(state).map_err(|e| RecordError::Corrupt {
        path: dir.state_path(),
        reason: e.to_string(),
    })?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Writes `state.json` for one scheduler, re-serialising only the stage
/// records that changed since its last write: a long pipeline's state is
/// mostly stages that are done or not started, and serialising all of them
/// at every stage boundary made each boundary cost O(stages). The bytes are
/// exactly those of [`RunDir::write_state`] (the same pretty JSON).
#[derive(Debug, Default)]
pub(crate) struct StateWriter {
    /// Each stage record's pretty JSON, indented for its place in the file.
    cache: Vec<Option<Vec<u8>>>,
    /// Stages changed by writes the run ref has not seen yet (unsynced
    /// writes leave the ref to the next durable one).
    ref_pending: std::collections::BTreeSet<usize>,
}

/// Where the header's empty stage list is, to splice the records into.
const EMPTY_STAGES: &[u8] = b"\n  \"stages\": []";

impl StateWriter {
    /// Writes `state` atomically and durably, like [`RunDir::write_state`];
    /// `dirty` are the indexes of the stage records changed since the last
    /// write (all of them the first time).
    pub(crate) fn write(
        &mut self,
        dir: &RunDir,
        state: &mut RunState,
        dirty: impl IntoIterator<Item = usize>,
    ) -> Result<(), RecordError> {
        dir.sync_before_state_write()?;
        let dirty: Vec<usize> = dirty.into_iter().collect();
        let bytes = self.bytes(dir, state, dirty.iter().copied())?;
        write_atomic(&dir.state_path(), &bytes)?;
        // The run ref gets every stage changed since it was last written.
        self.ref_pending.extend(dirty);
        let changed: Vec<usize> = std::mem::take(&mut self.ref_pending).into_iter().collect();
        dir.state_written(state, Some(&changed), true)
    }

    /// [`StateWriter::write`] without an fsync, like
    /// [`RunDir::write_state_unsynced`].
    pub(crate) fn write_unsynced(
        &mut self,
        dir: &RunDir,
        state: &mut RunState,
        dirty: impl IntoIterator<Item = usize>,
    ) -> Result<(), RecordError> {
        let dirty: Vec<usize> = dirty.into_iter().collect();
        let bytes = self.bytes(dir, state, dirty.iter().copied())?;
        self.ref_pending.extend(dirty);
        dir.replace_unsynced(&dir.state_path(), &bytes)
    }

    /// The bytes of [`RunDir::write_state`], re-serialising only `dirty`.
    fn bytes(
        &mut self,
        dir: &RunDir,
        state: &mut RunState,
        dirty: impl IntoIterator<Item = usize>,
    ) -> Result<Vec<u8>, RecordError> {
        let corrupt = |e: serde_json::Error| RecordError::Corrupt {
            path: dir.state_path(),
            reason: e.to_string(),
        };
        let dirty: Vec<usize> = dirty.into_iter().collect();
        if self.cache.len() != state.stages.len() {
            self.cache = vec![None; state.stages.len()];
        }
        for &i in &dirty {
            if let Some(slot) = self.cache.get_mut(i) {
                *slot = None;
            }
        }
        for (slot, rec) in self.cache.iter_mut().zip(&state.stages) {
            if slot.is_none() {
                let one = serde_json::to_vec_pretty(rec).map_err(corrupt)?;
                let mut indented = Vec::with_capacity(one.len() + one.len() / 8);
                for &b in &one {
                    indented.push(b);
                    // JSON strings hold no raw newlines: every one is layout.
                    if b == b'\n' {
                        indented.extend_from_slice(b"    ");
                    }
                }
                *slot = Some(indented);
            }
        }
        let stages = std::mem::take(&mut state.stages);
        let header = serde_json::to_vec_pretty(&*state);
        state.stages = stages;
        let header = header.map_err(corrupt)?;
        let Some(at) = header
            .windows(EMPTY_STAGES.len())
            .position(|w| w == EMPTY_STAGES)
        else {
            return state_bytes(dir, state);
        };
        let split = at + EMPTY_STAGES.len() - 1; // before the `]`
        let body: usize = self.cache.iter().flatten().map(|c| c.len() + 6).sum();
        let mut bytes = Vec::with_capacity(header.len() + body + 8);
        bytes.extend_from_slice(&header[..split]);
        for (i, rec) in self.cache.iter().flatten().enumerate() {
            bytes.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
            bytes.extend_from_slice(rec);
        }
        if !self.cache.is_empty() {
            bytes.extend_from_slice(b"\n  ");
        }
        bytes.extend_from_slice(&header[split..]);
        bytes.push(b'\n');
        Ok(bytes)
    }
}

/// The id of the run `run` names: the id itself, or else the one recorded
/// run whose id starts with it (as git takes a unique prefix of a commit
/// id). A prefix of several ids is [`RecordError::AmbiguousRun`], naming
/// them; no match is [`RecordError::UnknownRun`] (from [`RunDir::open`]).
pub(crate) fn find_run_id(common_dir: &Path, run: &str) -> Result<String, RecordError> {
    if !run.is_empty()
        && !run.contains(['/', '\\'])
        && runs_dir(common_dir).join(run).join("state.json").is_file()
    {
        return Ok(run.to_owned());
    }
    let mut candidates: Vec<String> = if run.is_empty() {
        Vec::new()
    } else {
        list_run_ids(common_dir)
            .into_iter()
            .filter(|id| id.starts_with(run))
            .collect()
    };
    match candidates.len() {
        0 => RunDir::open(common_dir, run).map(|_| run.to_owned()),
        1 => Ok(candidates.remove(0)),
        _ => Err(RecordError::AmbiguousRun {
            prefix: run.to_owned(),
            candidates,
        }),
    }
}

/// Ids of the runs recorded in a repository, newest first.
pub(crate) fn list_run_ids(common_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(runs_dir(common_dir))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().join("state.json").is_file())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

/// Writes `bytes` to `path` so that readers see either the old or the new
/// content: a temp file in the same directory, fsync, then rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RecordError> {
    replace(path, bytes, true)
}

/// A temp file in the same directory, fsync when `sync`, then rename.
fn replace(path: &Path, bytes: &[u8], sync: bool) -> Result<(), RecordError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io_err(dir))?;
    tmp.write_all(bytes).map_err(io_err(path))?;
    if sync {
        tmp.as_file().sync_all().map_err(io_err(path))?;
    }
    tmp.persist(path).map_err(|e| RecordError::Io {
        path: path.to_path_buf(),
        source: e.error,
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::{RUN_FORMAT, RunStatus, StageRecord, StageStatus};

    #[test]
    fn unsynced_files_are_whole_and_the_next_durable_state_write_syncs_them() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, dir) = RunDir::create_new(tmp.path()).unwrap();
        let shared = dir.clone();
        dir.write_file_unsynced("issue.md", b"the issue").unwrap();
        let state = RunState::new_for_test("r");
        shared.write_state_unsynced(&state).unwrap();
        assert_eq!(
            std::fs::read(dir.root.join("issue.md")).unwrap(),
            b"the issue"
        );
        assert_eq!(dir.read_state().unwrap().run_id, state.run_id);
        assert_eq!(dir.unsynced().len(), 2, "clones share what is pending");
        dir.write_state_alone(&state).unwrap();
        assert_eq!(
            dir.unsynced().as_slice(),
            [dir.root.join("issue.md")],
            "the start's one fsync leaves the other files pending"
        );
        shared.write_state(&state).unwrap();
        assert!(dir.unsynced().is_empty());
    }

    #[test]
    fn state_round_trips_and_unknown_run_lists_known_ones() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::create(tmp.path(), &"20260101-000000-abcd".parse().unwrap()).unwrap();
        let state = RunState::new_for_test("20260101-000000-abcd");
        dir.write_state(&state).unwrap();
        let back = dir.read_state().unwrap();
        assert_eq!(back.run_id, state.run_id);
        assert_eq!(back.format, RUN_FORMAT);

        let err = RunDir::open(tmp.path(), "nope").unwrap_err().to_string();
        assert!(err.contains("`nope`"), "{err}");
        assert!(err.contains("20260101-000000-abcd"), "{err}");
        assert!(RunDir::open(tmp.path(), "../x").is_err());
    }

    #[test]
    fn runs_created_at_once_never_share_a_directory() {
        let tmp = tempfile::tempdir().unwrap();
        // Eight threads creating runs at the same time.
        let per_thread = 50;
        let made: Vec<(RunId, RunDir)> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        (0..per_thread)
                            .map(|_| RunDir::create_new(tmp.path()).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect()
        });
        let ids: std::collections::HashSet<&RunId> = made.iter().map(|(id, _)| id).collect();
        let roots: std::collections::HashSet<&PathBuf> =
            made.iter().map(|(_, d)| &d.root).collect();
        assert_eq!(ids.len(), 8 * per_thread);
        assert_eq!(roots.len(), 8 * per_thread);
        let on_disk = std::fs::read_dir(runs_dir(tmp.path())).unwrap().count();
        assert_eq!(on_disk, 8 * per_thread);
        for (id, dir) in &made {
            assert_eq!(dir.root, runs_dir(tmp.path()).join(id.as_str()));
            assert!(dir.root.join("stages").is_dir());
        }
    }

    #[test]
    fn a_taken_run_id_is_never_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-30T16:05:12Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        let (first, dir) = RunDir::create_unique(tmp.path(), || RunId::at(t, 7)).unwrap();
        std::fs::write(dir.root.join("state.json"), "{}").unwrap();
        // The same id again (as two runs in the same second with the same
        // random part would draw): the next id is drawn instead.
        let mut draws = vec![RunId::at(t, 8), RunId::at(t, 7), RunId::at(t, 7)];
        let (second, other) = RunDir::create_unique(tmp.path(), || draws.pop().unwrap()).unwrap();
        assert_eq!(second, RunId::at(t, 8));
        assert_ne!(other.root, dir.root);
        assert_eq!(
            std::fs::read_to_string(dir.root.join("state.json")).unwrap(),
            "{}"
        );
        // Only taken ids: an error, and nothing is reused.
        let err = RunDir::create_unique(tmp.path(), || first.clone()).unwrap_err();
        assert!(err.to_string().contains("were all taken"), "{err}");
        assert!(RunDir::create(tmp.path(), &first).is_err());
        assert_eq!(std::fs::read_dir(runs_dir(tmp.path())).unwrap().count(), 2);
    }

    #[test]
    fn the_state_writer_writes_exactly_what_write_state_does() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = RunDir::create(tmp.path(), &"20260101-000000-abcd".parse().unwrap()).unwrap();
        let mut state = RunState::new_for_test("20260101-000000-abcd");
        let mut writer = StateWriter::default();
        let full = |state: &RunState| {
            let mut b = serde_json::to_vec_pretty(state).unwrap();
            b.push(b'\n');
            b
        };
        writer.write(&dir, &mut state, []).unwrap();
        assert_eq!(std::fs::read(dir.state_path()).unwrap(), full(&state));
        for i in 0..3 {
            state
                .stages
                .push(StageRecord::pending(&format!("s{i}"), "coder"));
        }
        state.stages[1].summary = Some("line one\nline \"two\"\n  \"stages\": []".into());
        writer.write(&dir, &mut state, []).unwrap();
        assert_eq!(std::fs::read(dir.state_path()).unwrap(), full(&state));
        // A change is written once its index is named dirty.
        state.stages[2].status = StageStatus::Succeeded;
        state.status = RunStatus::Succeeded;
        writer.write(&dir, &mut state, [2]).unwrap();
        assert_eq!(std::fs::read(dir.state_path()).unwrap(), full(&state));
        assert_eq!(
            dir.read_state().unwrap().stages[2].status,
            StageStatus::Succeeded
        );
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("f.json");
        write_atomic(&p, b"old content that is long").unwrap();
        write_atomic(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        // No temp files are left behind.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
