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
/// asserts both hold the same bytes and returns the lane's files.
fn lane_and_git_agree(repo: &TestRepo) -> Files {
    let head: orch::git::CommitId = repo.git(&["rev-parse", "HEAD"]).trim().parse().unwrap();
    let common = repo.path.join(".git");
    let lane = repo.dir.path().join("lanes/deep/lane-1");
    orch::git::Repo::at(&common)
        .create_worktree("lane-1", &lane, &head)
        .unwrap();
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
    // The lane is clean and detached at the base, as git leaves it.
    let status = repo.git(&["-C", lane.to_str().unwrap(), "status", "--porcelain"]);
    assert_eq!(status, "", "lane status");
    let at = repo.git(&["-C", lane.to_str().unwrap(), "rev-parse", "HEAD"]);
    assert_eq!(at.trim(), head);
    ours
}

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

    let files = lane_and_git_agree(&repo);
    assert_eq!(files["a.txt"].1, b"one\r\ntwo\r\n", "eol=crlf applied");
    assert_eq!(files["data.bin"].1, b"\x00\x01\n\x02\n", "-text kept as is");
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

    let files = lane_and_git_agree(&repo);
    assert!(files["run.sh"].2, "executable bit");
    assert_eq!(files["link"].0, "link");
    assert_eq!(files["crlf.txt"].1, b"kept\r\nas is\r\n");
}

#[test]
fn configured_autocrlf_keeps_filters_on() {
    let repo = TestRepo::with_commit(&[("a.txt", "one\ntwo\n")], "plain");
    repo.git(&["config", "core.autocrlf", "true"]);
    let files = lane_and_git_agree(&repo);
    assert_eq!(files["a.txt"].1, b"one\r\ntwo\r\n");
}

/// `git -C lane …`.
fn in_lane(repo: &TestRepo, lane: &Path, args: &[&str]) -> String {
    let mut all = vec!["-C", lane.to_str().unwrap()];
    all.extend_from_slice(args);
    repo.git(&all)
}

/// What git reads from the lane's index and finds in its tree agree with
/// the base commit: `ls-files -s` is `ls-tree -r` of HEAD, the index has no
/// difference to HEAD, the worktree none to the index, `fsck` (which checks
/// the index's checksum) is clean, and every entry's stat data is the
/// file's own, so later status walks trust it.
fn index_is_the_tree(repo: &TestRepo, lane: &Path) {
    let files = in_lane(repo, lane, &["ls-files", "-s", "-z"]);
    let tree: Vec<String> = in_lane(repo, lane, &["ls-tree", "-r", "-z", "HEAD"])
        .split_terminator('\0')
        .map(|l| {
            let (meta, path) = l.split_once('\t').unwrap();
            let mut f = meta.split(' ');
            let (mode, _kind, sha) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            format!("{mode} {sha} 0\t{path}")
        })
        .collect();
    let files: Vec<&str> = files.split_terminator('\0').collect();
    assert_eq!(files, tree, "ls-files -s vs ls-tree -r");
    assert_eq!(in_lane(repo, lane, &["diff-index", "--cached", "HEAD"]), "");
    // libgit2 verifies the index checksum on read; git only in fsck.
    let index = git2::Repository::open(lane).unwrap().index().unwrap();
    assert_eq!(index.len(), files.len());
    for e in index.iter() {
        use std::os::unix::fs::MetadataExt;
        let rel = String::from_utf8(e.path.clone()).unwrap();
        let meta = std::fs::symlink_metadata(lane.join(&rel)).unwrap();
        assert_eq!(e.ino, meta.ino() as u32, "{rel}: ino");
        assert_eq!(e.file_size, meta.size() as u32, "{rel}: size");
        assert_eq!(e.mtime.seconds(), meta.mtime() as i32, "{rel}: mtime");
        assert_eq!(
            e.mtime.nanoseconds(),
            meta.mtime_nsec() as u32,
            "{rel}: mtime ns"
        );
        assert_eq!(e.ctime.seconds(), meta.ctime() as i32, "{rel}: ctime");
    }
    repo.git(&["fsck", "--no-dangling", "--no-progress"]);
    assert_eq!(in_lane(repo, lane, &["status", "--porcelain"]), "");
}

#[test]
fn a_direct_checkout_writes_what_git_does_with_a_valid_index() {
    let repo = TestRepo::new();
    repo.write("a.txt", "one\ntwo\n");
    repo.write("empty", "");
    repo.write("a-b/x", "sorts before a/ as git sorts\n");
    repo.write("a/x", "x\n");
    repo.write("ab", "ab\n");
    repo.write("café/naïve – ünïcode.txt", "non-ASCII\n");
    repo.write("日本語.txt", "名前\n");
    repo.write(&"n".repeat(255), "a 255-byte name\n");
    let deep: String = (0..40).map(|i| format!("d{i}/")).collect();
    repo.write(&format!("{deep}leaf.txt"), "deep\n");
    repo.write("bin/run.sh", "#!/bin/sh\necho hi\n");
    let run = repo.path.join("bin/run.sh");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("a/x", repo.path.join("link")).unwrap();
    std::os::unix::fs::symlink("../nowhere", repo.path.join("a/dangling")).unwrap();
    repo.write(".gitignore", "*.o\n");
    // A submodule (gitlink): git checks out an empty directory for it.
    let head = repo.commit_all("base");
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("160000,{head},sub/module"),
    ]);
    repo.git(&["commit", "-q", "-m", "gitlink"]);

    let files = lane_and_git_agree(&repo);
    assert!(files["bin/run.sh"].2, "executable bit");
    assert!(!files["a.txt"].2);
    assert_eq!(files["link"], ("link", b"a/x".to_vec(), false));
    assert_eq!(files["sub/module"].0, "dir");
    let lane = repo.dir.path().join("lanes/deep/lane-1");
    index_is_the_tree(&repo, &lane);
    // Modes as git leaves them under the same umask.
    let mode = |root: &Path, rel: &str| {
        std::fs::symlink_metadata(root.join(rel))
            .unwrap()
            .permissions()
            .mode()
    };
    let by_git = repo.dir.path().join("by-git");
    for rel in ["a.txt", "bin/run.sh", "bin", "sub/module", "café"] {
        assert_eq!(mode(&lane, rel), mode(&by_git, rel), "{rel}: mode");
    }
    // Edits show up (the stat cache is not trusted blindly), and the
    // cache-tree the checkout wrote gives the trees git computes.
    let tree = repo.git(&["rev-parse", "HEAD^{tree}"]);
    assert_eq!(in_lane(&repo, &lane, &["write-tree"]), tree);
    for root in [&lane, &by_git] {
        std::fs::write(root.join("d0/d1/d2/x"), "new\n").unwrap();
        std::fs::write(root.join("a.txt"), "changed\n").unwrap();
    }
    assert_eq!(
        in_lane(&repo, &lane, &["status", "--porcelain"]),
        " M a.txt\n?? d0/d1/d2/x\n"
    );
    in_lane(&repo, &lane, &["add", "-A"]);
    in_lane(&repo, &by_git, &["add", "-A"]);
    assert_eq!(
        in_lane(&repo, &lane, &["write-tree"]),
        in_lane(&repo, &by_git, &["write-tree"])
    );
    // libgit2 (orch's commits) reads the same cache-tree.
    let wt = git2::Repository::open(&lane).unwrap();
    let mut index = wt.index().unwrap();
    index.read(true).unwrap();
    assert_eq!(
        index.write_tree().unwrap().to_string() + "\n",
        in_lane(&repo, &lane, &["write-tree"])
    );
}

#[test]
fn a_path_of_4095_bytes_gets_the_saturated_name_length_in_the_index() {
    let repo = TestRepo::new();
    // 16 directories of 250 bytes (+ `/`) and a 79-byte name: 0xFFF bytes,
    // the most a relative path can have (PATH_MAX counts the NUL).
    let dirs: String = (0..16).map(|i| format!("{i:0>250}/")).collect();
    let long = format!("{dirs}{}", "f".repeat(4095 - dirs.len()));
    assert_eq!(long.len(), 0xFFF);
    let mut cmd = repo.git_command();
    // Written relative to the repository: its absolute path is too long.
    let status = cmd
        .args(["hash-object", "-w", "--stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(b"long\n")?;
            c.wait_with_output()
        })
        .unwrap();
    let blob = String::from_utf8(status.stdout).unwrap().trim().to_owned();
    repo.write("short.txt", "short\n");
    repo.git(&["add", "short.txt"]);
    repo.git(&[
        "update-index",
        "--add",
        "--cacheinfo",
        &format!("100644,{blob},{long}"),
    ]);
    repo.git(&["commit", "-q", "-m", "long path"]);
    let head: orch::git::CommitId = repo.git(&["rev-parse", "HEAD"]).trim().parse().unwrap();

    let lane = repo.dir.path().join("lane");
    orch::git::Repo::at(repo.path.join(".git"))
        .create_worktree("lane", &lane, &head)
        .unwrap();
    // The index carries a cache-tree, so the first commit does not re-hash
    // every tree.
    let admin = repo.path.join(".git/worktrees/lane/index");
    let bytes = std::fs::read(admin).unwrap();
    assert!(bytes.windows(4).any(|w| w == b"TREE"), "a TREE extension");
    let files = in_lane(&repo, &lane, &["ls-files", "-s", "-z"]);
    assert!(files.contains(&long), "the long path is in the index");
    assert_eq!(
        in_lane(&repo, &lane, &["diff-index", "--cached", "HEAD"]),
        ""
    );
    assert_eq!(in_lane(&repo, &lane, &["status", "--porcelain"]), "");
    let index = git2::Repository::open(&lane).unwrap().index().unwrap();
    assert!(index.get_path(Path::new(&long), 0).is_some());
    assert_eq!(
        in_lane(&repo, &lane, &["cat-file", "-p", &format!(":{long}")]),
        "long\n"
    );
}

#[test]
fn an_empty_tree_checks_out_to_an_empty_index() {
    let repo = TestRepo::new();
    let empty = repo.git(&["hash-object", "-t", "tree", "-w", "/dev/null"]);
    let commit = repo.git(&["commit-tree", empty.trim(), "-m", "empty"]);
    let lane = repo.dir.path().join("lane");
    orch::git::Repo::at(repo.path.join(".git"))
        .create_worktree("lane", &lane, &commit.trim().parse().unwrap())
        .unwrap();
    let names: Vec<_> = std::fs::read_dir(&lane)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [".git"]);
    assert_eq!(in_lane(&repo, &lane, &["ls-files"]), "");
    assert_eq!(in_lane(&repo, &lane, &["status", "--porcelain"]), "");
    assert_eq!(
        git2::Repository::open(&lane)
            .unwrap()
            .index()
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn a_gitattributes_met_late_hands_the_checkout_to_libgit2_from_scratch() {
    let repo = TestRepo::new();
    repo.write("a.txt", "one\ntwo\n");
    repo.write("m/b.txt", "b\n");
    repo.write("z/.gitattributes", "*.txt text eol=crlf\n");
    repo.write("z/c.txt", "c\nd\n");
    repo.commit_all("late attributes");
    let files = lane_and_git_agree(&repo);
    assert_eq!(files["z/c.txt"].1, b"c\r\nd\r\n", "eol=crlf applied");
    assert_eq!(files["a.txt"].1, b"one\ntwo\n");
}

#[test]
fn core_symlinks_false_takes_libgit2s_checkout() {
    let repo = TestRepo::new();
    repo.write("a.txt", "a\n");
    std::os::unix::fs::symlink("a.txt", repo.path.join("link")).unwrap();
    repo.commit_all("link");
    repo.git(&["config", "core.symlinks", "false"]);
    let files = lane_and_git_agree(&repo);
    assert_eq!(files["link"], ("file", b"a.txt".to_vec(), false));
}
