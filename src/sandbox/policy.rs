//! What one sandboxed child may touch: the [`Profile`], the paths it may
//! write, the paths it may not read, and whether it has the network.

use std::path::{Path, PathBuf};

use super::error::SandboxError;
use crate::sandbox_profile::Profile;

/// The git layout of a lane that is a linked worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneGit {
    /// The lane's own admin dir, `<common>/worktrees/<name>` (its HEAD, index,
    /// logs): writable in [`Profile::WorkspaceWrite`] so `git status`, `git
    /// add`'s index update, `git restore` and `git checkout -- f` work.
    pub admin_dir: PathBuf,
    /// The user's common git dir (refs, objects, hooks, config): read-only.
    pub common_dir: PathBuf,
    /// The lane's shadow common dir ([`crate::git::shadow`]), when it has
    /// one: its symlinks are read-only, its own object store writable.
    pub shadow: Option<PathBuf>,
    /// The lane's branch (`refs/heads/orch…`) when its HEAD is on one of
    /// orch's own branches: then that ref's directory (and its reflog's) is
    /// writable, and new objects go to [`quarantine`](Self::quarantine), so
    /// `git add && git commit` work in the lane. A HEAD on any other branch
    /// (the model ran `git checkout main`) gets no ref write access.
    pub branch: Option<String>,
}

/// Ref prefixes of orch's own branches, the only ones a lane may move.
pub(crate) const ORCH_BRANCH_PREFIXES: &[&str] = &["refs/heads/orch/", "refs/heads/orch-lanes/"];

impl LaneGit {
    /// The lane's private object store: its shadow common dir's `objects/`
    /// (git in the lane writes there by itself), else (a linked worktree
    /// orch did not make) `<admin>/orch-objects`, which
    /// [`child_env`](Self::child_env) points git at. Never the user's
    /// store; [`super::migrate_objects`] moves them over after each call.
    pub fn quarantine(&self) -> PathBuf {
        match &self.shadow {
            Some(shadow) => crate::git::shadow::objects_dir(shadow),
            None => self.admin_dir.join("orch-objects"),
        }
    }

    /// The variables the child's environment needs so git writes objects to
    /// the quarantine and still reads the user's — only for a worktree
    /// without a shadow common dir (they reach every repository the child
    /// touches, which the shadow avoids): `GIT_OBJECT_DIRECTORY` and
    /// `GIT_ALTERNATE_OBJECT_DIRECTORIES`.
    pub fn child_env(&self) -> Vec<(String, String)> {
        if self.shadow.is_some() {
            return Vec::new();
        }
        vec![
            (
                "GIT_OBJECT_DIRECTORY".into(),
                self.quarantine().display().to_string(),
            ),
            (
                "GIT_ALTERNATE_OBJECT_DIRECTORIES".into(),
                self.common_dir.join("objects").display().to_string(),
            ),
        ]
    }
}

impl LaneGit {
    /// Reads the layout from `<lane>/.git` (a `gitdir: …` file) and the admin
    /// dir's `commondir`. `Ok(None)` when the lane has no `.git` entry at all
    /// (not a git checkout); a `.git` directory (a main worktree, not a lane)
    /// is also `Ok(None)`: its `.git` is then carved out of the writable lane.
    pub fn discover(lane: &Path) -> Result<Option<Self>, SandboxError> {
        let dot_git = lane.join(".git");
        let err = |detail: String| SandboxError::LaneGit {
            lane: lane.to_path_buf(),
            detail,
        };
        let meta = match std::fs::symlink_metadata(&dot_git) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(err(format!("{}: {e}", dot_git.display()))),
        };
        if meta.is_dir() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&dot_git)
            .map_err(|e| err(format!("{}: {e}", dot_git.display())))?;
        let admin = text
            .trim_end()
            .strip_prefix("gitdir: ")
            .ok_or_else(|| err(format!("{}: no `gitdir: ` line", dot_git.display())))?;
        let admin_dir = lane.join(admin);
        let commondir_file = admin_dir.join("commondir");
        let common = std::fs::read_to_string(&commondir_file)
            .map_err(|e| err(format!("{}: {e}", commondir_file.display())))?;
        let common_dir = admin_dir.join(common.trim_end());
        let canon = |p: &Path| {
            p.canonicalize()
                .map_err(|e| err(format!("{}: {e}", p.display())))
        };
        let admin_dir = canon(&admin_dir)?;
        let common_dir = canon(&common_dir)?;
        let (common_dir, shadow) = match crate::git::shadow::real_common_dir(&common_dir) {
            Some(real) => (canon(&real)?, Some(common_dir)),
            None => (common_dir, None),
        };
        let head = std::fs::read_to_string(admin_dir.join("HEAD")).unwrap_or_default();
        let branch = head
            .trim_end()
            .strip_prefix("ref: ")
            .filter(|r| {
                ORCH_BRANCH_PREFIXES.iter().any(|p| r.starts_with(p))
                    && !r.split('/').any(|c| c == ".." || c.is_empty())
            })
            .map(str::to_owned);
        Ok(Some(Self {
            admin_dir,
            common_dir,
            shadow,
            branch,
        }))
    }
}

/// Everything [`super::prepare`] needs to build one child's sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// The profile.
    pub profile: Profile,
    /// The stage's lane worktree (the child's working directory).
    pub lane: PathBuf,
    /// The lane's git layout, from [`LaneGit::discover`] by [`Policy::new`].
    pub git: Option<LaneGit>,
    /// The private temp dir of this call or stage; the caller creates it and
    /// sets `TMPDIR` to it. Writable in every profile but `Off`.
    pub tmp_dir: PathBuf,
    /// Extra writable roots (`sandbox.writable`: `~/.cache/pip`, …). Roots
    /// that do not exist are skipped.
    pub writable: Vec<PathBuf>,
    /// Paths whose contents must not be readable (files or whole trees);
    /// their names stay listable. Paths that do not exist are skipped.
    pub secret_paths: Vec<PathBuf>,
    /// Whether TCP connect/bind is allowed (Landlock ABI ≥ 4 to enforce `false`).
    pub network: bool,
}

impl Policy {
    /// A policy for `lane` with `profile`: git layout discovered, private temp
    /// dir `tmp_dir`, no extra roots, [`default_secret_paths`] of the current
    /// `$HOME` and orch config dir, network on.
    pub fn new(profile: Profile, lane: &Path, tmp_dir: &Path) -> Result<Self, SandboxError> {
        let home = crate::environment::current().home();
        let secret_paths =
            default_secret_paths(home.as_deref(), crate::dirs::user_config_dir().as_deref());
        Ok(Self {
            profile,
            lane: lane.to_path_buf(),
            git: LaneGit::discover(lane)?,
            tmp_dir: tmp_dir.to_path_buf(),
            writable: Vec::new(),
            secret_paths,
            network: true,
        })
    }
}

impl Policy {
    /// The policy for an `orch agent` child instead of a tool process: the
    /// network on (it talks to the model server), the run's `agents/` record
    /// dir writable (its own record and its children's), and orch's config
    /// dir readable (it loads roles and model settings). Its own tool
    /// processes build their own, stricter policy, and Landlock stacks: they
    /// can never get more than the subagent has.
    pub fn for_subagent(mut self, agents_dir: &Path, orch_config_dir: Option<&Path>) -> Self {
        self.network = true;
        self.writable.push(agents_dir.to_path_buf());
        if let Some(cfg) = orch_config_dir {
            self.secret_paths.retain(|p| p != cfg);
        }
        self
    }
}

/// The secret paths hidden by default: under `home`, `.ssh`, `.aws`,
/// `.netrc`, `.config/gh`, `.docker/config.json`, `.git-credentials`,
/// `.gnupg`, `.kube/config`, and orch's own config dir (API keys in
/// `models.toml`).
pub fn default_secret_paths(home: Option<&Path>, orch_config_dir: Option<&Path>) -> Vec<PathBuf> {
    const UNDER_HOME: &[&str] = &[
        ".ssh",
        ".aws",
        ".netrc",
        ".config/gh",
        ".docker/config.json",
        ".git-credentials",
        ".gnupg",
        ".kube/config",
    ];
    let mut out: Vec<PathBuf> = home
        .map(|h| UNDER_HOME.iter().map(|rel| h.join(rel)).collect())
        .unwrap_or_default();
    out.extend(orch_config_dir.map(Path::to_path_buf));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_round_trip_their_config_spelling() {
        for p in [Profile::WorkspaceWrite, Profile::ReadOnly, Profile::Off] {
            assert_eq!(Profile::parse(p.as_str()), Some(p));
        }
        assert_eq!(Profile::parse("workspace_write"), None);
    }

    #[test]
    fn default_secrets_cover_the_issue_list() {
        let s = default_secret_paths(Some(Path::new("/h")), Some(Path::new("/h/.config/orch")));
        for want in [
            "/h/.ssh",
            "/h/.aws",
            "/h/.netrc",
            "/h/.config/gh",
            "/h/.docker/config.json",
            "/h/.git-credentials",
            "/h/.config/orch",
        ] {
            assert!(
                s.contains(&PathBuf::from(want)),
                "{want} missing from {s:?}"
            );
        }
    }

    #[test]
    fn a_subagent_gets_the_network_its_record_and_the_config() {
        let t = tempfile::tempdir().unwrap();
        let cfg = t.path().join("cfg");
        let mut p = Policy::new(Profile::ReadOnly, t.path(), t.path()).unwrap();
        p.network = false;
        p.secret_paths = default_secret_paths(Some(t.path()), Some(&cfg));
        let p = p.for_subagent(&t.path().join("agents"), Some(&cfg));
        assert!(p.network);
        assert_eq!(p.writable, [t.path().join("agents")]);
        assert!(!p.secret_paths.contains(&cfg));
        assert!(p.secret_paths.contains(&t.path().join(".ssh")));
    }

    #[test]
    fn discover_reads_a_linked_worktree_and_ignores_a_plain_dir() {
        let t = tempfile::tempdir().unwrap();
        let common = t.path().join("repo/.git");
        let admin = common.join("worktrees/lane");
        std::fs::create_dir_all(&admin).unwrap();
        std::fs::write(admin.join("commondir"), "../..\n").unwrap();
        let lane = t.path().join("lane");
        std::fs::create_dir_all(&lane).unwrap();
        std::fs::write(lane.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
        let g = LaneGit::discover(&lane).unwrap().unwrap();
        assert_eq!(g.admin_dir, admin.canonicalize().unwrap());
        assert_eq!(g.common_dir, common.canonicalize().unwrap());
        assert_eq!(LaneGit::discover(t.path()).unwrap(), None);
        std::fs::write(lane.join(".git"), "nonsense").unwrap();
        let e = LaneGit::discover(&lane).unwrap_err().to_string();
        assert!(e.contains("no `gitdir: ` line"), "{e}");
    }
}
