//! The catalog: where pipelines and roles are found.
//!
//! Lookup order, first match wins: `<repo>/.orch/{pipelines,roles}`, then
//! Claude Code's `<repo>/.claude/agents/` (roles only), then the user config
//! dir (`$ORCH_CONFIG_DIR`, else `$XDG_CONFIG_HOME/orch`, else
//! `$HOME/.config/orch`), then `$HOME/.claude/agents/`, then the built-ins
//! compiled into the binary from this repository's `pipelines/` and `roles/`.
//!
//! Every role file is parsed when the catalog loads, but a broken one is
//! kept as its error: it is reported by [`Catalog::validate_all`] and by any
//! command that uses that role, and breaks nothing else. Pipelines are parsed
//! on use, against the role names the catalog holds.

use crate::dirs::user_config_dir;
use crate::pipeline::{Pipeline, SpecError, parse_pipeline};
use crate::role::{Role, parse_role};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Files larger than this are refused: specs are small, and a huge file is a mistake.
pub(crate) const MAX_SPEC_FILE_BYTES: u64 = 1024 * 1024;

/// Pipelines compiled into the binary: (name, text).
const BUILTIN_PIPELINES: &[(&str, &str)] =
    &[("issue-to-pr", include_str!("../pipelines/issue-to-pr.yaml"))];

/// Roles compiled into the binary: (name, text).
const BUILTIN_ROLES: &[(&str, &str)] = &[
    ("coder", include_str!("../roles/coder.md")),
    ("docs", include_str!("../roles/docs.md")),
    ("explore", include_str!("../roles/explore.md")),
    ("reviewer", include_str!("../roles/reviewer.md")),
    ("setup", include_str!("../roles/setup.md")),
];

/// Why the catalog could not load or find something.
#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A pipeline or role file is invalid.
    #[error(transparent)]
    Spec(#[from] SpecError),
    /// A file or directory could not be read.
    #[error("failed to read {}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A file is larger than [`MAX_SPEC_FILE_BYTES`].
    #[error("{} is too large ({size} bytes; at most {max} bytes)", path.display(), max = MAX_SPEC_FILE_BYTES)]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size in bytes.
        size: u64,
    },
    /// A file is not UTF-8 text.
    #[error("{} is not UTF-8 text", path.display())]
    NotUtf8 {
        /// The file.
        path: PathBuf,
    },
    /// One directory holds both `<name>.yaml` and `<name>.yml`.
    #[error("both {} and {} define pipeline \"{name}\"; keep one", first.display(), second.display())]
    Ambiguous {
        /// The pipeline name.
        name: String,
        /// The first file.
        first: PathBuf,
        /// The second file.
        second: PathBuf,
    },
    /// No role has this name.
    #[error("unknown role \"{name}\"{} (known: {})", file_defines.as_ref().map(|id| format!(": the file {name}.md defines role \"{id}\" (a role is asked for by its `name:`)")).unwrap_or_default(), known.join(", "))]
    UnknownRole {
        /// The name asked for.
        name: String,
        /// Every role the catalog holds.
        known: Vec<String>,
        /// The role a file called `<name>.md` defines, when its `name:` differs.
        file_defines: Option<String>,
    },
    /// No pipeline has this name, and it is not a path to a file.
    #[error("unknown pipeline \"{name}\" (known: {}; or give a path to a .yaml file)", known.join(", "))]
    UnknownPipeline {
        /// The name asked for.
        name: String,
        /// Every pipeline the catalog holds.
        known: Vec<String>,
    },
}

/// A pipeline file the catalog knows, not parsed yet.
#[derive(Debug, Clone)]
struct PipelineSource {
    /// A path, or `built-in pipelines/<name>.yaml`.
    origin: String,
    text: String,
}

/// Every pipeline and role visible from one repository.
#[derive(Debug, Clone)]
pub(crate) struct Catalog {
    /// Each role by id, or why its file could not be used.
    roles: BTreeMap<String, Result<Role, SpecError>>,
    pipelines: BTreeMap<String, PipelineSource>,
    /// File stems whose file defines a role of another name (stem → id),
    /// to say so when the stem is asked for.
    file_names: BTreeMap<String, String>,
}

/// The files that define one role id, nearest place first.
#[derive(Default)]
struct RoleFile {
    /// (place in the lookup order, path, parsed role).
    files: Vec<(usize, PathBuf, Result<Role, SpecError>)>,
}

impl RoleFile {
    fn add(&mut self, place: usize, path: PathBuf, role: Result<Role, SpecError>) {
        self.files.push((place, path, role));
    }

    /// The nearest file's role; the others are named in its warnings. Two
    /// files of one directory defining the same role are an error: neither
    /// is nearer.
    fn into_role(mut self) -> Result<Role, SpecError> {
        self.files
            .sort_by_key(|(place, path, _)| (*place, path.clone()));
        let mut files = self.files.into_iter();
        let Some((place, path, role)) = files.next() else {
            unreachable!("a RoleFile is made with its first file");
        };
        let rest: Vec<(usize, PathBuf)> = files.map(|(p, path, _)| (p, path)).collect();
        if let Some((_, twin)) = rest.iter().find(|(p, _)| *p == place) {
            let name = role.as_ref().map_or("?", |r| r.name.as_str());
            return Err(SpecError::new(
                &path.display().to_string(),
                1,
                1,
                format!(
                    "role `{name}` is also defined by {} in the same directory; keep one",
                    twin.display()
                ),
            ));
        }
        let mut role = role?;
        for (_, other) in rest {
            role.warnings.push(format!(
                "{} also defines role `{}`; the nearer file ({}) is used",
                other.display(),
                role.name,
                path.display()
            ));
        }
        Ok(role)
    }
}

impl Catalog {
    /// Loads the catalog for `repo` (if any), with the user config dir and
    /// `$HOME/.claude/agents` from the environment.
    pub(crate) fn load(repo: Option<&Path>) -> Result<Catalog, CatalogError> {
        let user_dir = user_config_dir();
        let claude_user = crate::environment::current()
            .var_os(crate::environment::HOME)
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".claude").join("agents"));
        Self::load_from_places(repo, user_dir.as_deref(), claude_user.as_deref())
    }

    /// Loads the catalog from explicit places, without reading the environment.
    #[cfg(test)]
    pub(crate) fn load_from(
        repo: Option<&Path>,
        user_dir: Option<&Path>,
    ) -> Result<Catalog, CatalogError> {
        Self::load_from_places(repo, user_dir, None)
    }

    /// Loads the catalog from explicit places: the repo, the user config
    /// dir and the user's Claude Code agents dir.
    pub(crate) fn load_from_places(
        repo: Option<&Path>,
        user_dir: Option<&Path>,
        claude_user_agents: Option<&Path>,
    ) -> Result<Catalog, CatalogError> {
        // (config dir, its roles dir), in lookup order.
        let mut dirs: Vec<(Option<PathBuf>, PathBuf)> = Vec::new();
        if let Some(repo) = repo {
            dirs.push((Some(repo.join(".orch")), repo.join(".orch").join("roles")));
            dirs.push((None, repo.join(".claude").join("agents")));
        }
        if let Some(user_dir) = user_dir {
            dirs.push((Some(user_dir.to_path_buf()), user_dir.join("roles")));
        }
        if let Some(agents) = claude_user_agents {
            dirs.push((None, agents.to_path_buf()));
        }

        let mut catalog = Catalog {
            roles: BTreeMap::new(),
            pipelines: BTreeMap::new(),
            file_names: BTreeMap::new(),
        };
        // Roles by id (`name:`, else the file stem); where each was found.
        let mut found: BTreeMap<String, RoleFile> = BTreeMap::new();
        for (place, (dir, roles_dir)) in dirs.iter().enumerate() {
            for (_, path) in list_dir(roles_dir, &["md"])? {
                let origin = path.display().to_string();
                let role = read_spec_file(&path)
                    .map_err(|err| SpecError::new(&origin, 1, 1, file_problem(&err)))
                    .and_then(|text| parse_role(&text, &origin));
                let stem = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_owned();
                // A broken file has no trustworthy `name:`; its stem stands in.
                let id = role.as_ref().map_or(stem.clone(), |r| r.name.clone());
                if id != stem {
                    catalog.file_names.entry(stem).or_insert_with(|| id.clone());
                }
                found.entry(id).or_default().add(place, path, role);
            }
            let Some(dir) = dir else { continue };
            for (name, path) in list_dir(&dir.join("pipelines"), &["yaml", "yml"])? {
                if catalog.pipelines.contains_key(&name) {
                    continue;
                }
                let text = read_spec_file(&path)?;
                let origin = path.display().to_string();
                catalog
                    .pipelines
                    .insert(name, PipelineSource { origin, text });
            }
        }
        for (id, file) in found {
            catalog.roles.insert(id, file.into_role());
        }
        for (name, text) in BUILTIN_ROLES {
            if !catalog.roles.contains_key(*name) {
                let role = parse_role(text, &format!("built-in roles/{name}.md"))?;
                catalog.roles.insert((*name).to_owned(), Ok(role));
            }
        }
        for (name, text) in BUILTIN_PIPELINES {
            catalog
                .pipelines
                .entry((*name).to_owned())
                .or_insert_with(|| PipelineSource {
                    origin: format!("built-in pipelines/{name}.yaml"),
                    text: (*text).to_owned(),
                });
        }
        Ok(catalog)
    }

    /// The role called `name`; a broken file's error when it is broken.
    pub(crate) fn role(&self, name: &str) -> Result<&Role, CatalogError> {
        match self.roles.get(name) {
            Some(Ok(role)) => Ok(role),
            Some(Err(err)) => Err(CatalogError::Spec(err.clone())),
            None => Err(CatalogError::UnknownRole {
                name: name.to_owned(),
                known: self.role_names(),
                file_defines: self.file_names.get(name).cloned(),
            }),
        }
    }

    /// Every usable role's warnings (tools not offered, keys ignored), as
    /// (role name, origin, warning), in name order.
    pub(crate) fn role_warnings(&self) -> Vec<(String, String, String)> {
        self.roles
            .iter()
            .filter_map(|(name, role)| role.as_ref().ok().map(|r| (name, r)))
            .flat_map(|(name, role)| {
                role.warnings
                    .iter()
                    .map(|w| (name.clone(), role.origin.clone(), w.clone()))
            })
            .collect()
    }

    /// The pipeline called `name_or_path`, or read from that path when it
    /// names an existing `.yaml`/`.yml` file or contains a path separator.
    pub(crate) fn pipeline(&self, name_or_path: &str) -> Result<Pipeline, CatalogError> {
        let known_roles = self.role_names();
        if let Some(source) = self.pipelines.get(name_or_path) {
            return Ok(parse_pipeline(&source.text, &source.origin, &known_roles)?);
        }
        let path = Path::new(name_or_path);
        let looks_like_path = name_or_path.contains(std::path::MAIN_SEPARATOR)
            || name_or_path.contains('/')
            || path
                .extension()
                .is_some_and(|ext| ext == "yaml" || ext == "yml");
        if looks_like_path {
            let text = read_spec_file(path)?;
            return Ok(parse_pipeline(&text, name_or_path, &known_roles)?);
        }
        Err(CatalogError::UnknownPipeline {
            name: name_or_path.to_owned(),
            known: self.pipelines.keys().cloned().collect(),
        })
    }

    /// Every role name, sorted.
    pub(crate) fn role_names(&self) -> Vec<String> {
        self.roles.keys().cloned().collect()
    }

    /// Every pipeline name with where it comes from, sorted by name.
    pub(crate) fn pipeline_names(&self) -> Vec<(String, String)> {
        self.pipelines
            .iter()
            .map(|(name, source)| (name.clone(), source.origin.clone()))
            .collect()
    }

    /// Checks every visible role file and pipeline and returns every
    /// problem found: broken roles first, then pipelines, each in name order.
    pub(crate) fn validate_all(&self) -> Vec<SpecError> {
        let known_roles = self.role_names();
        let broken = self
            .roles
            .values()
            .filter_map(|r| r.as_ref().err().cloned());
        broken
            .chain(self.pipelines.values().filter_map(|source| {
                parse_pipeline(&source.text, &source.origin, &known_roles).err()
            }))
            .collect()
    }
}

/// The files in `dir` with one of `extensions`, as (stem, path) sorted by
/// stem; an absent directory holds nothing. Names that are not UTF-8 are
/// skipped, as no pipeline or role could be asked for by them.
fn list_dir(dir: &Path, extensions: &[&str]) -> Result<Vec<(String, PathBuf)>, CatalogError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(CatalogError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut found: BTreeMap<String, PathBuf> = BTreeMap::new();
    for entry in entries {
        let entry = entry.map_err(|source| CatalogError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        let Some(ext) = path.extension().and_then(|e| e.to_str()) else {
            continue;
        };
        if !extensions.contains(&ext) || path.is_dir() {
            continue;
        }
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if let Some(first) = found.get(stem) {
            return Err(CatalogError::Ambiguous {
                name: stem.to_owned(),
                first: first.clone(),
                second: path,
            });
        }
        found.insert(stem.to_owned(), path);
    }
    Ok(found.into_iter().collect())
}

/// A file that could not be read, as a spec problem's message (the path is
/// the problem's file).
fn file_problem(err: &CatalogError) -> String {
    match err {
        CatalogError::Io { source, .. } => format!("cannot be read: {source}"),
        CatalogError::TooLarge { size, .. } => {
            format!("is too large ({size} bytes; at most {MAX_SPEC_FILE_BYTES} bytes)")
        }
        CatalogError::NotUtf8 { .. } => "is not UTF-8 text".to_owned(),
        other => other.to_string(),
    }
}

/// Reads a spec file, refusing ones over [`MAX_SPEC_FILE_BYTES`] or not UTF-8.
fn read_spec_file(path: &Path) -> Result<String, CatalogError> {
    let io = |source| CatalogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut bytes = Vec::new();
    // Read one byte past the limit rather than trusting metadata, which a
    // growing file or a special file can get wrong.
    file.take(MAX_SPEC_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_SPEC_FILE_BYTES {
        let size = std::fs::metadata(path).map_or(bytes.len() as u64, |m| m.len());
        return Err(CatalogError::TooLarge {
            path: path.to_path_buf(),
            size,
        });
    }
    String::from_utf8(bytes).map_err(|_| CatalogError::NotUtf8 {
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn role_file(name: &str, description: &str) -> String {
        format!("---\nname: {name}\ndescription: {description}\n---\nPrompt.\n")
    }

    #[test]
    fn builtins_load_and_validate() {
        let catalog = Catalog::load_from(None, None).unwrap();
        assert_eq!(
            catalog.role_names(),
            ["coder", "docs", "explore", "reviewer", "setup"]
        );
        assert_eq!(
            catalog.pipeline_names(),
            [(
                "issue-to-pr".to_owned(),
                "built-in pipelines/issue-to-pr.yaml".to_owned()
            )]
        );
        assert_eq!(catalog.validate_all(), Vec::<SpecError>::new());
        let reviewer = catalog.role("reviewer").unwrap();
        assert!(reviewer.read_only);
        assert_eq!(
            reviewer.tools,
            ["bash", "read_file", "list_files", "grep", "finish"]
        );
        assert_eq!(reviewer.origin, "built-in roles/reviewer.md");
        let coder = catalog.role("coder").unwrap();
        assert_eq!(coder.tools, crate::role::KNOWN_TOOLS);
        // `setup` is not a pipeline role: its prompt is about plans, not worktrees.
        let setup = catalog.role("setup").unwrap();
        assert!(setup.prompt.len() < 1536 && setup.prompt.contains("`plan`"));
        for name in catalog.role_names().into_iter().filter(|n| n != "setup") {
            let role = catalog.role(&name).unwrap();
            assert!(
                role.prompt.len() < 1536,
                "{name} prompt is {} bytes",
                role.prompt.len()
            );
            assert!(
                role.prompt.contains("finish"),
                "{name} prompt must mention finish"
            );
            assert!(
                role.prompt.contains("worktree"),
                "{name} prompt must mention the worktree"
            );
        }
        let pipeline = catalog.pipeline("issue-to-pr").unwrap();
        assert_eq!(pipeline.stages.len(), 7);
    }

    #[test]
    fn repo_shadows_user_dir_shadows_builtin() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let user = tmp.path().join("user");
        write(
            &repo.join(".orch/roles/coder.md"),
            &role_file("coder", "from repo"),
        );
        write(
            &user.join("roles/coder.md"),
            &role_file("coder", "from user"),
        );
        write(&user.join("roles/docs.md"), &role_file("docs", "from user"));
        write(
            &user.join("roles/extra.md"),
            &role_file("extra", "user only"),
        );
        let pipeline =
            |desc: &str| format!("description: {desc}\nstages:\n  only:\n    role: extra\n");
        write(
            &repo.join(".orch/pipelines/issue-to-pr.yaml"),
            &pipeline("repo"),
        );
        write(&user.join("pipelines/issue-to-pr.yaml"), &pipeline("user"));
        write(&user.join("pipelines/mine.yml"), &pipeline("mine"));

        let catalog = Catalog::load_from(Some(&repo), Some(&user)).unwrap();
        assert_eq!(catalog.role("coder").unwrap().description, "from repo");
        assert_eq!(catalog.role("docs").unwrap().description, "from user");
        assert_eq!(
            catalog.role("reviewer").unwrap().origin,
            "built-in roles/reviewer.md"
        );
        assert_eq!(
            catalog.role_names(),
            ["coder", "docs", "explore", "extra", "reviewer", "setup"]
        );
        assert_eq!(catalog.pipeline("issue-to-pr").unwrap().description, "repo");
        assert_eq!(catalog.pipeline("mine").unwrap().description, "mine");
        let names: Vec<String> = catalog
            .pipeline_names()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(names, ["issue-to-pr", "mine"]);

        // Without the repo, the user dir wins; without both, the built-in.
        let catalog = Catalog::load_from(None, Some(&user)).unwrap();
        assert_eq!(catalog.role("coder").unwrap().description, "from user");
        assert_eq!(catalog.pipeline("issue-to-pr").unwrap().description, "user");
        let catalog = Catalog::load_from(Some(&repo.join("nowhere")), None).unwrap();
        assert!(
            catalog
                .role("coder")
                .unwrap()
                .origin
                .starts_with("built-in")
        );
    }

    #[test]
    fn pipeline_by_path_and_unknown_names() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("flow.yaml");
        write(&path, "stages:\n  a:\n    role: coder\n");
        let catalog = Catalog::load_from(None, None).unwrap();
        let pipeline = catalog.pipeline(path.to_str().unwrap()).unwrap();
        assert_eq!(pipeline.name, "flow");

        let err = catalog.pipeline("nope").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown pipeline \"nope\" (known: issue-to-pr; or give a path to a .yaml file)"
        );
        let err = catalog.role("codr").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown role \"codr\" (known: coder, docs, explore, reviewer, setup)"
        );
        assert!(matches!(
            catalog.pipeline("missing/file.yaml"),
            Err(CatalogError::Io { .. })
        ));
    }

    #[test]
    fn broken_role_in_repo_is_located_in_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".orch/roles/coder.md");
        write(&path, "---\nname: coder\nmax_turns: many\n---\nPrompt\n");
        // The catalog loads; the broken role is reported where it is used.
        let catalog = Catalog::load_from(Some(tmp.path()), None).unwrap();
        let err = catalog.role("coder").unwrap_err();
        let CatalogError::Spec(err) = err else {
            panic!("expected a spec error, got {err}");
        };
        assert_eq!(err.file, path.display().to_string());
        assert_eq!((err.line, err.column), (3, 12));
        assert_eq!(catalog.validate_all(), vec![err]);
        // Other roles and pipelines are unaffected.
        assert!(catalog.role("reviewer").is_ok());
        assert!(catalog.pipeline("issue-to-pr").is_ok());
    }

    #[test]
    fn claude_agents_dirs_come_after_orch_roles_and_user_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        let user = tmp.path().join("user");
        let home_agents = tmp.path().join("home/.claude/agents");
        write(&repo.join(".orch/roles/a.md"), &role_file("a", "orch"));
        write(&repo.join(".claude/agents/a.md"), &role_file("a", "claude"));
        write(&repo.join(".claude/agents/b.md"), &role_file("b", "claude"));
        write(&user.join("roles/b.md"), &role_file("b", "user"));
        write(&user.join("roles/c.md"), &role_file("c", "user"));
        write(&home_agents.join("c.md"), &role_file("c", "home"));
        write(
            &home_agents.join("d.md"),
            "---\nname: d\ntools: Read, WebFetch, mcp__x__y\npermissionMode: ask\n---\nP\n",
        );
        let catalog =
            Catalog::load_from_places(Some(&repo), Some(&user), Some(&home_agents)).unwrap();
        let desc = |n: &str| catalog.role(n).unwrap().description.clone();
        assert_eq!(
            [desc("a"), desc("b"), desc("c")],
            ["orch", "claude", "user"]
        );
        let d = catalog.role("d").unwrap();
        assert_eq!(d.tools, ["read_file", "finish"]);
        let warnings: Vec<String> = catalog
            .role_warnings()
            .into_iter()
            .map(|(_, _, w)| w)
            .collect();
        // The nearer file wins, and the farther one is named.
        assert_eq!(warnings.len(), 4, "{warnings:?}");
        assert!(
            warnings[0].contains(".claude/agents/a.md also defines role `a`"),
            "{warnings:?}"
        );
        assert!(warnings[1].contains("roles/b.md also defines role `b`"));
        assert!(warnings[2].contains("agents/c.md also defines role `c`"));
        assert!(warnings[3].contains("WebFetch not offered"), "{warnings:?}");
        assert_eq!(d.mcp.granted_servers(), ["x"]);
        // `permissionMode: ask` is mapped, not ignored.
        assert_eq!(d.bash.ask, ["*"]);
    }

    #[test]
    fn a_role_is_found_by_its_name_not_its_file_stem() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().join("repo");
        write(
            &repo.join(".claude/agents/software_engineer_python.md"),
            &role_file("software-engineer-python", "py"),
        );
        write(
            &repo.join(".claude/agents/twin.md"),
            &role_file("dup", "one"),
        );
        write(
            &repo.join(".claude/agents/twin2.md"),
            &role_file("dup", "two"),
        );
        let catalog = Catalog::load_from_places(Some(&repo), None, None).unwrap();
        assert_eq!(
            catalog
                .role("software-engineer-python")
                .unwrap()
                .description,
            "py"
        );
        let err = catalog.role("software_engineer_python").unwrap_err();
        assert!(
            err.to_string().contains(
                "the file software_engineer_python.md defines role \"software-engineer-python\""
            ),
            "{err}"
        );
        // Two files of one directory: neither is nearer.
        let err = catalog.role("dup").unwrap_err();
        assert!(
            err.to_string().contains("in the same directory; keep one"),
            "{err}"
        );
    }

    #[test]
    fn oversized_and_non_utf8_files_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let big = tmp.path().join(".orch/roles/big.md");
        write(&big, &"x".repeat(MAX_SPEC_FILE_BYTES as usize + 1));
        let catalog = Catalog::load_from(Some(tmp.path()), None).unwrap();
        let err = catalog.role("big").unwrap_err();
        assert!(
            err.to_string().ends_with(&format!(
                "big.md:1:1: is too large ({} bytes; at most {MAX_SPEC_FILE_BYTES} bytes)",
                MAX_SPEC_FILE_BYTES + 1
            )),
            "{err}"
        );

        let tmp = tempfile::tempdir().unwrap();
        let bad = tmp.path().join(".orch/pipelines/bad.yaml");
        fs::create_dir_all(bad.parent().unwrap()).unwrap();
        fs::write(&bad, b"name: \xff\xfe\n").unwrap();
        let err = Catalog::load_from(Some(tmp.path()), None).unwrap_err();
        assert!(
            err.to_string().ends_with("bad.yaml is not UTF-8 text"),
            "{err}"
        );
    }

    #[test]
    fn yaml_and_yml_of_one_name_are_ambiguous() {
        let tmp = tempfile::tempdir().unwrap();
        write(&tmp.path().join("pipelines/p.yaml"), "stages: {}\n");
        write(&tmp.path().join("pipelines/p.yml"), "stages: {}\n");
        let err = Catalog::load_from(None, Some(tmp.path())).unwrap_err();
        assert!(matches!(err, CatalogError::Ambiguous { ref name, .. } if name == "p"));
    }
}
