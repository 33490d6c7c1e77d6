//! Finding skills: in the base commit's tree (git objects, never the
//! working tree) and in the user config dir; see the module docs of
//! [`super`] for the order and what wins.

use super::{MAX_LISTED_FILES, MAX_SKILL_BYTES, REPO_DIRS, Skill, SkillDir, SkillFile, front};
use crate::git::{CommitId, GitError};
use git2::{ObjectType, Oid, Repository, Tree, TreeWalkMode, TreeWalkResult};
use std::path::Path;

/// A symlink's file mode in a git tree.
const SYMLINK_MODE: i32 = 0o120000;

/// Skills found so far (the first of a name wins) and what was skipped.
#[derive(Debug, Default)]
pub(super) struct Found {
    pub skills: Vec<Skill>,
    pub problems: Vec<String>,
}

impl Found {
    /// Takes `skill` unless a skill of its name was found before (then
    /// says which wins).
    fn offer(&mut self, skill: Skill) {
        if let Some(first) = self.skills.iter().find(|s| s.name() == skill.name()) {
            let same = if first.blob == skill.blob {
                " (the same content)"
            } else {
                ""
            };
            self.problems.push(format!(
                "{}: skill `{}` is also defined by {}{same}, which is used (a user's skill wins over the repository's; among the repository's, .agents before .claude before .github)",
                skill.path,
                skill.name(),
                first.path
            ));
            return;
        }
        if skill.front.user_only {
            self.problems.push(format!(
                "{}: skill `{}` has `disable-model-invocation: true`: only a user may start it, so orch's agents are not offered it",
                skill.path,
                skill.name()
            ));
            return;
        }
        self.skills.push(skill);
    }
}

/// The skills of `commit`'s [`REPO_DIRS`].
pub(super) fn repo_skills(
    common: &Path,
    commit: &CommitId,
    found: &mut Found,
) -> Result<(), GitError> {
    let handle = crate::git::Repo::at(common);
    let repo = handle.git2()?;
    let tree = crate::agent::instructions::commit_tree(repo, commit)?;
    for dir in REPO_DIRS {
        let Some(skills_tree) = subtree(repo, &tree, dir) else {
            continue;
        };
        for entry in skills_tree.iter() {
            let Ok(name) = entry.name() else {
                continue;
            };
            let skill_dir = format!("{dir}/{name}");
            // Files beside the skill directories (a README) are not skills.
            let Some(sub) = subtree(repo, &tree, &skill_dir) else {
                continue;
            };
            let path = format!("{skill_dir}/SKILL.md");
            let Some((blob, bytes)) = blob_at(repo, &tree, &path) else {
                found.problems.push(format!(
                    "{skill_dir}: no SKILL.md in this directory, so it is not a skill (skipped)"
                ));
                continue;
            };
            let Some(front) = checked(&path, name, &bytes, found) else {
                continue;
            };
            let (files, more_files) = tree_files(&sub);
            found.offer(Skill {
                front,
                path,
                blob: blob.to_string(),
                dir: SkillDir::Repo(skill_dir),
                files,
                more_files,
            });
        }
    }
    Ok(())
}

/// The skills of the user's `skills/` folder.
pub(super) fn user_skills(root: &Path, found: &mut Found) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut dirs: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else {
            continue;
        };
        let path = dir.join("SKILL.md");
        let shown = path.display().to_string();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) => {
                found.problems.push(format!(
                    "{}: no readable SKILL.md in this directory ({e}), so it is not a skill (skipped)",
                    dir.display()
                ));
                continue;
            }
        };
        let Some(front) = checked(&shown, &name, &bytes, found) else {
            continue;
        };
        let mut files = Vec::new();
        walk_user(&dir, "", &mut files);
        files.sort();
        let more_files = files.len().saturating_sub(MAX_LISTED_FILES);
        files.truncate(MAX_LISTED_FILES);
        found.offer(Skill {
            front,
            blob: blob_id(&bytes),
            path: shown,
            dir: SkillDir::User(dir),
            files: files
                .into_iter()
                .map(|rel| SkillFile { rel, blob: None })
                .collect(),
            more_files,
        });
    }
}

/// The git blob id of `bytes` (what `git hash-object` prints).
pub(super) fn blob_id(bytes: &[u8]) -> String {
    Oid::hash_object(ObjectType::Blob, bytes)
        .map(|o| o.to_string())
        .unwrap_or_default()
}

/// The checked front matter of the `SKILL.md` at `path` (in the directory
/// `name`), or `None` with the problem noted.
fn checked(path: &str, name: &str, bytes: &[u8], found: &mut Found) -> Option<front::Front> {
    if bytes.len() > MAX_SKILL_BYTES {
        found.problems.push(format!(
            "{path}: {} bytes, more than the {MAX_SKILL_BYTES}-byte limit of a SKILL.md (skipped)",
            bytes.len()
        ));
        return None;
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        found
            .problems
            .push(format!("{path}: not UTF-8 text (skipped)"));
        return None;
    };
    match front::parse(text, name, path) {
        Ok(f) => Some(f),
        Err(e) => {
            found.problems.push(format!("{e} (skipped)"));
            None
        }
    }
}

/// The other files of a skill's tree (not its top `SKILL.md`, not links),
/// sorted, at most [`MAX_LISTED_FILES`], and how many more there are.
fn tree_files(tree: &Tree<'_>) -> (Vec<SkillFile>, usize) {
    let mut files = Vec::new();
    let _ = tree.walk(TreeWalkMode::PreOrder, |root, entry| {
        if entry.kind() == Some(ObjectType::Blob)
            && entry.filemode() != SYMLINK_MODE
            && let Ok(name) = entry.name()
        {
            let rel = format!("{root}{name}");
            if rel != "SKILL.md" {
                files.push(SkillFile {
                    rel,
                    blob: Some(entry.id().to_string()),
                });
            }
        }
        TreeWalkResult::Ok
    });
    files.sort_by(|a, b| a.rel.cmp(&b.rel));
    let more = files.len().saturating_sub(MAX_LISTED_FILES);
    files.truncate(MAX_LISTED_FILES);
    (files, more)
}

/// Regular files under `dir` (links inside a skill are neither entered
/// nor listed), as paths relative to the skill's directory.
fn walk_user(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Some(name) = e.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        let rel = format!("{prefix}{name}");
        match e.file_type() {
            Ok(t) if t.is_dir() => walk_user(&e.path(), &format!("{rel}/"), out),
            // Only regular files: a link could point anywhere (a key).
            Ok(t) if t.is_file() && rel != "SKILL.md" => out.push(rel),
            _ => {}
        }
        if out.len() > MAX_LISTED_FILES * 10 {
            return;
        }
    }
}

/// The tree at `path`, a symlink on the way followed once (inside the tree).
fn subtree<'r>(repo: &'r Repository, tree: &Tree<'r>, path: &str) -> Option<Tree<'r>> {
    let entry = tree.get_path(Path::new(&resolve(repo, tree, path)?)).ok()?;
    repo.find_tree(entry.id()).ok()
}

/// The blob at `path` (a symlink followed once, inside the tree): its id
/// and bytes.
pub(super) fn blob_at(repo: &Repository, tree: &Tree<'_>, path: &str) -> Option<(Oid, Vec<u8>)> {
    let entry = tree.get_path(Path::new(&resolve(repo, tree, path)?)).ok()?;
    let blob = repo.find_blob(entry.id()).ok()?;
    Some((blob.id(), blob.content().to_vec()))
}

/// `path` with its symlinked components replaced by their targets (each
/// followed once; `None` when one leaves the tree or is missing).
fn resolve(repo: &Repository, tree: &Tree<'_>, path: &str) -> Option<String> {
    let mut done = String::new();
    for part in path.split('/') {
        let next = if done.is_empty() {
            part.to_owned()
        } else {
            format!("{done}/{part}")
        };
        let entry = tree.get_path(Path::new(&next)).ok()?;
        done = if entry.filemode() == SYMLINK_MODE {
            let target = repo.find_blob(entry.id()).ok()?;
            let target = String::from_utf8_lossy(target.content()).into_owned();
            let joined = if done.is_empty() {
                target
            } else {
                format!("{done}/{target}")
            };
            crate::agent::instructions::normalise(&joined)?
        } else {
            next
        };
    }
    Some(done)
}

#[cfg(test)]
mod tests {
    use super::super::discover as discover_all;
    use super::*;

    #[test]
    fn repository_and_user_skills_are_found_checked_and_the_user_wins_a_name() {
        let repo = crate::git::testutil::TestRepo::empty();
        let skill =
            |name: &str, d: &str| format!("---\nname: {name}\ndescription: {d}\n---\nDo {name}.\n");
        repo.write(
            ".claude/skills/notes/SKILL.md",
            &skill("notes", "repo notes"),
        );
        repo.write(".claude/skills/notes/tpl/a.md", "template\n");
        repo.write(".agents/skills/lint/SKILL.md", &skill("lint", "lint it"));
        repo.write(".github/skills/lint/SKILL.md", &skill("lint", "other lint"));
        repo.write(".claude/skills/Bad/SKILL.md", &skill("Bad", "x"));
        repo.write(".claude/skills/empty/README.md", "no skill\n");
        repo.write(".claude/skills/README.md", "about skills\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "c"]);
        let head = repo.rev("HEAD");
        let user = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(user.path().join("skills/notes")).unwrap();
        std::fs::write(
            user.path().join("skills/notes/SKILL.md"),
            skill("notes", "my notes"),
        )
        .unwrap();
        std::fs::write(user.path().join("secret"), "key\n").unwrap();
        std::os::unix::fs::symlink("../../secret", user.path().join("skills/notes/key")).unwrap();
        std::fs::write(user.path().join("skills/notes/ok.md"), "ok\n").unwrap();
        let c = discover_all(&repo.git_dir(), &head, Some(user.path())).unwrap();
        let names: Vec<&str> = c.skills.iter().map(Skill::name).collect();
        assert_eq!(names, ["lint", "notes"]);
        let notes = &c.skills[1];
        assert_eq!(notes.front.description, "my notes");
        assert_eq!(notes.source(), "user");
        // A link in a user's skill is not listed, so `load_skill` cannot read it.
        let files: Vec<&str> = notes.files.iter().map(|f| f.rel.as_str()).collect();
        assert_eq!(files, ["ok.md"]);
        let lint = &c.skills[0];
        assert_eq!(lint.path, ".agents/skills/lint/SKILL.md");
        assert_eq!(
            lint.blob,
            repo.rev("HEAD:.agents/skills/lint/SKILL.md").as_str()
        );
        let all = c.problems.join("\n");
        assert!(all.contains(".github/skills/lint/SKILL.md: skill `lint` is also defined by .agents/skills/lint/SKILL.md"), "{all}");
        assert!(
            all.contains(".claude/skills/notes/SKILL.md: skill `notes` is also defined by"),
            "{all}"
        );
        assert!(
            all.contains(".claude/skills/Bad/SKILL.md:2:7: `name` \"Bad\" is not valid"),
            "{all}"
        );
        assert!(all.contains(".claude/skills/empty: no SKILL.md"), "{all}");
        assert!(!all.contains("README"), "{all}");
        // A repository skill's files come with their blob ids.
        let repo_only = discover_all(&repo.git_dir(), &head, None).unwrap();
        let notes = repo_only
            .skills
            .iter()
            .find(|s| s.name() == "notes")
            .unwrap();
        assert_eq!(notes.files.len(), 1);
        assert_eq!(notes.files[0].rel, "tpl/a.md");
        assert_eq!(
            notes.files[0].blob.as_deref(),
            Some(repo.rev("HEAD:.claude/skills/notes/tpl/a.md").as_str())
        );
        assert_eq!(blob_id(b"template\n"), notes.files[0].blob.clone().unwrap());
    }

    #[test]
    fn a_symlinked_skills_directory_is_followed_inside_the_tree_and_read_once() {
        let repo = crate::git::testutil::TestRepo::empty();
        repo.write(
            ".agents/skills/notes/SKILL.md",
            "---\nname: notes\ndescription: d\n---\nBody.\n",
        );
        std::fs::create_dir_all(repo.path.join(".claude")).unwrap();
        std::os::unix::fs::symlink("../.agents/skills", repo.path.join(".claude/skills")).unwrap();
        // A link out of the tree is not followed.
        std::fs::create_dir_all(repo.path.join(".github")).unwrap();
        std::os::unix::fs::symlink("../../outside", repo.path.join(".github/skills")).unwrap();
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "c"]);
        let c = discover_all(&repo.git_dir(), &repo.rev("HEAD"), None).unwrap();
        assert_eq!(c.skills.len(), 1);
        assert_eq!(c.skills[0].path, ".agents/skills/notes/SKILL.md");
        assert_eq!(c.problems.len(), 1, "{:?}", c.problems);
        assert!(
            c.problems[0].starts_with(".claude/skills/notes/SKILL.md: skill `notes` is also defined by .agents/skills/notes/SKILL.md (the same content)"),
            "{:?}",
            c.problems
        );
    }
}
