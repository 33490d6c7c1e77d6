//! Lane checkout without libgit2's per-file attribute lookups: when the tree
//! and the configuration have no attributes or filters, `create_worktree`
//! checks out with filters disabled; otherwise with them on. Either way the
//! files are exactly what `git worktree add` of the same commit writes.

use crate::support::TestRepo;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// Relative path → (kind, bytes or symlink target, executable bit).
type Files = BTreeMap<String, (&'static str, Vec<u8>, bool)>;

/// Every entry under `root` except `.git`: relative path → (kind, bytes or
/// symlink target, executable bit).
fn tree_bytes(root: &Path) -> Files {
    fn walk(root: &Path, dir: &Path, out: &mut Files) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if rel == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(
                    rel,
                    (
                        "link",
                        target.to_string_lossy().into_owned().into_bytes(),
                        false,
                    ),
                );
            } else if meta.is_dir() {
                out.insert(rel, ("dir", vec![], false));
                walk(root, &path, out);
            } else {
                let exec = meta.permissions().mode() & 0o111 != 0;
                out.insert(rel, ("file", std::fs::read(&path).unwrap(), exec));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// `create_worktree` of HEAD next to `git worktree add --detach` of HEAD;
/// asserts both hold the same bytes and returns the lane's files and the
/// lane branch's reflog.
fn lane_and_git_agree(repo: &TestRepo) -> (Files, String) {
    let head = repo.git(&["rev-parse", "HEAD"]).trim().to_owned();
    let common = repo.path.join(".git");
    let lane = repo.dir.path().join("lanes/deep/lane-1");
    orch::git::create_worktree(&common, "lane-1", &lane, "orch/r/lane-1", &head).unwrap();
    let by_git = repo.dir.path().join("by-git");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        "--detach",
        by_git.to_str().unwrap(),
        &head,
    ]);
    let ours = tree_bytes(&lane);
    assert_eq!(ours, tree_bytes(&by_git), "lane vs git worktree add");
    // The lane is clean and its branch at the base, as git leaves it.
    let status = repo.git(&["-C", lane.to_str().unwrap(), "status", "--porcelain"]);
    assert_eq!(status, "", "lane status");
    let at = repo.git(&["rev-parse", "orch/r/lane-1"]);
    assert_eq!(at.trim(), head);
    let reflog = repo.git(&["reflog", "show", "--format=%gs", "refs/heads/orch/r/lane-1"]);
    (ours, reflog)
}

const UNFILTERED: &str = "(unfiltered checkout)";

#[test]
fn a_lane_with_gitattributes_checks_out_as_git_worktree_add_does() {
    let repo = TestRepo::new();
    repo.write(
        ".gitattributes",
        "* text=auto eol=crlf\n*.x filter=custom\n*.bin -text\n",
    );
    repo.write("a.txt", "one\ntwo\n");
    repo.write("sub/deeper/c.md", "# c\n\nline\n");
    repo.write("raw.x", "custom\nfilter\n");
    repo.write("data.bin", b"\x00\x01\n\x02\n".as_slice());
    repo.commit_all("attributes");

    let (files, reflog) = lane_and_git_agree(&repo);
    assert_eq!(files["a.txt"].1, b"one\r\ntwo\r\n", "eol=crlf applied");
    assert_eq!(files["data.bin"].1, b"\x00\x01\n\x02\n", "-text kept as is");
    assert!(!reflog.contains(UNFILTERED), "filters stayed on: {reflog}");
}

#[test]
fn a_lane_without_attributes_checks_out_unfiltered_and_identically() {
    let repo = TestRepo::new();
    repo.write("a.txt", "one\ntwo\n");
    repo.write("crlf.txt", "kept\r\nas is\r\n");
    repo.write("sub/deeper/c.md", "# c\n");
    repo.write("run.sh", "#!/bin/sh\necho hi\n");
    let run = repo.path.join("run.sh");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("sub/deeper/c.md", repo.path.join("link")).unwrap();
    repo.commit_all("plain");

    let (files, reflog) = lane_and_git_agree(&repo);
    assert!(files["run.sh"].2, "executable bit");
    assert_eq!(files["link"].0, "link");
    assert_eq!(files["crlf.txt"].1, b"kept\r\nas is\r\n");
    assert!(reflog.contains(UNFILTERED), "the fast path ran: {reflog}");
}

#[test]
fn configured_autocrlf_keeps_filters_on() {
    let repo = TestRepo::with_commit(&[("a.txt", "one\ntwo\n")], "plain");
    repo.git(&["config", "core.autocrlf", "true"]);
    let (files, reflog) = lane_and_git_agree(&repo);
    assert_eq!(files["a.txt"].1, b"one\r\ntwo\r\n");
    assert!(!reflog.contains(UNFILTERED), "filters stayed on: {reflog}");
}
