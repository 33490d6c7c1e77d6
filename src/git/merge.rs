//! Fan-in: the start commit of a stage with several upstream stages is a
//! merge of their commits, made in memory (no checkout, no worktree), so it
//! costs what the merge touches, not the repository's size.

use super::error::{GitError, git_err};
use super::open::{find_commit, signature};
use super::repo::{CommitId, Repo};
use git2::{MergeOptions, Oid};

/// The result of merging several stage commits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeOutcome {
    /// The merged commit (one of the inputs when the others are its ancestors).
    Merged(CommitId),
    /// The commits conflict; nothing was written.
    Conflict {
        /// The two commits (labels as given) whose merge conflicted.
        between: (String, String),
        /// Conflicting paths, sorted.
        paths: Vec<String>,
    },
}

impl Repo {
    /// Merges `commits` (label, sha) into one commit: duplicates and commits that
    /// are ancestors of another are dropped; one left is returned as is; several
    /// are merged pairwise in the given order, each merge a real two-parent
    /// commit with `message` (plus the labels merged).
    ///
    /// A single commit (a stage with one input, the run's first stage) needs
    /// no merge and does not open the repository: it is returned as given.
    pub fn merge_commits(
        &self,
        commits: &[(String, CommitId)],
        message: &str,
    ) -> Result<MergeOutcome, GitError> {
        if let [(_, sha)] = commits {
            return Ok(MergeOutcome::Merged(sha.clone()));
        }
        let repo = self.git2()?;
        let mut tips: Vec<(String, Oid)> = Vec::new();
        for (label, sha) in commits {
            let oid = find_commit(repo, sha)?.id();
            if tips.iter().any(|(_, t)| *t == oid) {
                continue;
            }
            tips.push((label.clone(), oid));
        }
        // Drop tips already contained in another tip.
        let all = tips.clone();
        tips.retain(|(_, oid)| {
            !all.iter().any(|(_, other)| {
                other != oid && repo.graph_descendant_of(*other, *oid).unwrap_or(false)
            })
        });
        let Some((first_label, first)) = tips.first().cloned() else {
            return Err(GitError::Git {
                op: "merge stage commits: none given".into(),
                source: git2::Error::from_str("empty input"),
            });
        };
        let sig = signature(repo)?;
        let (mut acc_label, mut acc) = (first_label, first);
        for (label, oid) in tips.into_iter().skip(1) {
            let ours = repo
                .find_commit(acc)
                .map_err(git_err("find a commit to merge"))?;
            let theirs = repo
                .find_commit(oid)
                .map_err(git_err("find a commit to merge"))?;
            let mut opts = MergeOptions::new();
            opts.fail_on_conflict(false);
            let mut index = repo
                .merge_commits(&ours, &theirs, Some(&opts))
                .map_err(git_err(format!("merge {acc_label} and {label}")))?;
            if index.has_conflicts() {
                let mut paths: Vec<String> = index
                    .conflicts()
                    .map_err(git_err("list merge conflicts"))?
                    .flatten()
                    .filter_map(|c| c.our.or(c.their).or(c.ancestor))
                    .map(|e| String::from_utf8_lossy(&e.path).into_owned())
                    .collect();
                paths.sort();
                paths.dedup();
                return Ok(MergeOutcome::Conflict {
                    between: (acc_label, label),
                    paths,
                });
            }
            let tree_id = index
                .write_tree_to(repo)
                .map_err(git_err("write the merged tree"))?;
            let tree = repo
                .find_tree(tree_id)
                .map_err(git_err("find the merged tree"))?;
            let msg = format!("{message}\n\nOrch-Merge: {acc_label}, {label}\n");
            acc = repo
                .commit(None, &sig, &sig, &msg, &tree, &[&ours, &theirs])
                .map_err(git_err("commit the merge"))?;
            acc_label = format!("{acc_label}+{label}");
        }
        Ok(MergeOutcome::Merged(CommitId::from_oid(acc)))
    }

    /// Renames `refs/heads/<from>` to `<to>` (refusing to overwrite `to`).
    pub fn rename_branch(&self, from: &str, to: &str) -> Result<(), GitError> {
        let _admin = self.admin_lock(true)?;
        let mut branch = self
            .git2()?
            .find_branch(from, git2::BranchType::Local)
            .map_err(git_err(format!("find branch `{from}`")))?;
        branch
            .rename(to, false)
            .map_err(git_err(format!("rename branch `{from}` to `{to}`")))?;
        Ok(())
    }

    /// Deletes `refs/heads/<branch>` if it exists.
    pub fn delete_branch(&self, branch: &str) -> Result<(), GitError> {
        let _admin = self.admin_lock(true)?;
        match self.git2()?.find_branch(branch, git2::BranchType::Local) {
            Ok(mut b) => b
                .delete()
                .map_err(git_err(format!("delete branch `{branch}`"))),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(()),
            Err(e) => Err(git_err(format!("find branch `{branch}`"))(e)),
        }
    }

    /// The tree id of a commit (equal trees mean equal content).
    pub fn tree_of(&self, sha: &CommitId) -> Result<String, GitError> {
        Ok(find_commit(self.git2()?, sha)?
            .tree()
            .map_err(git_err("read a commit's tree"))?
            .id()
            .to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn commit_file(dir: &Path, branch: &str, file: &str, text: &str) -> CommitId {
        git(dir, &["checkout", "-q", branch]);
        std::fs::write(dir.join(file), text).unwrap();
        git(dir, &["add", "-A"]);
        git(dir, &["commit", "-qm", file]);
        CommitId::parse(&git(dir, &["rev-parse", "HEAD"])).unwrap()
    }

    #[test]
    fn merges_disjoint_changes_and_reports_conflicts() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("shared.txt"), "one\ntwo\nthree\n").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-qm", "base"]);
        git(d, &["branch", "a"]);
        git(d, &["branch", "b"]);
        git(d, &["branch", "c"]);
        let a = commit_file(d, "a", "a.txt", "from a\n");
        let b = commit_file(d, "b", "b.txt", "from b\n");
        let c = commit_file(d, "c", "shared.txt", "one\nTWO by c\nthree\n");
        let a2 = commit_file(d, "a", "shared.txt", "one\ntwo by a\nthree\n");
        let gitdir = d.join(".git");

        let out = Repo::at(&gitdir)
            .merge_commits(
                &[("a".into(), a.clone()), ("b".into(), b.clone())],
                "orch: merge",
            )
            .unwrap();
        let MergeOutcome::Merged(m) = out else {
            panic!("{out:?}")
        };
        let files = git(d, &["ls-tree", "--name-only", &m]);
        assert!(
            files.contains("a.txt") && files.contains("b.txt"),
            "{files}"
        );
        let parents = git(d, &["rev-list", "--parents", "-n1", &m]);
        assert!(parents.contains(a.as_str()) && parents.contains(b.as_str()));

        // An ancestor is dropped: merging a with a2 (its descendant) is a2.
        let out = Repo::at(&gitdir)
            .merge_commits(&[("a".into(), a), ("a2".into(), a2.clone())], "m")
            .unwrap();
        assert_eq!(out, MergeOutcome::Merged(a2.clone()));

        let out = Repo::at(&gitdir)
            .merge_commits(&[("left".into(), a2), ("right".into(), c)], "m")
            .unwrap();
        assert_eq!(
            out,
            MergeOutcome::Conflict {
                between: ("left".into(), "right".into()),
                paths: vec!["shared.txt".into()]
            }
        );
    }

    #[test]
    fn rename_and_delete_branches() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        git(d, &["init", "-q", "-b", "main"]);
        std::fs::write(d.join("f"), "x").unwrap();
        git(d, &["add", "-A"]);
        git(d, &["commit", "-qm", "base"]);
        git(d, &["branch", "orch/r/code"]);
        let gitdir = d.join(".git");
        Repo::at(&gitdir)
            .rename_branch("orch/r/code", "orch/r/code.v1")
            .unwrap();
        assert_eq!(
            git(
                d,
                &["branch", "--list", "orch/*", "--format=%(refname:short)"]
            ),
            "orch/r/code.v1"
        );
        Repo::at(&gitdir).delete_branch("orch/r/code.v1").unwrap();
        Repo::at(&gitdir).delete_branch("orch/r/missing").unwrap();
        assert_eq!(git(d, &["branch", "--list", "orch/*"]), "");
    }
}
