//! Diffs between two commits: a unified patch under a byte budget, and the
//! numbers `git diff --stat` prints.
//!
//! Renames are detected, as `git diff` does by default. Binary files appear as
//! git's "Binary files … differ" line, never as content. A patch over budget is
//! cut at a file boundary, else a hunk boundary, else (only when not even one
//! hunk fits) a line boundary, and ends with a marker saying what was left out.

use std::fmt::Write as _;

use git2::{Delta, DiffFindOptions, DiffOptions, Patch};
use serde::{Deserialize, Serialize};

use super::error::{GitError, git_err};
use super::open::find_commit;
use super::repo::{CommitId, Repo};
use git2::Repository;

/// Lines changed in one file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileStat {
    /// Path in the new tree; `old => new` for a rename.
    pub path: String,
    pub insertions: usize,
    pub deletions: usize,
    /// A binary file's sizes in bytes, before and after (git's `Bin A -> B bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<(u64, u64)>,
}

/// What `git diff --stat` counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffStat {
    pub files_changed: usize,
    pub insertions: usize,
    pub deletions: usize,
    /// One entry per changed file, in git's path order.
    pub files: Vec<FileStat>,
}

/// A unified patch between two commits with its stat.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Diff {
    /// git-style unified patch (`diff --git` headers, 3 lines of context),
    /// possibly cut short; see [`Diff::truncated`].
    pub patch: String,
    /// The stat of the whole diff, also when the patch was cut.
    pub stat: DiffStat,
    /// Whether `patch` was cut to fit the budget (it then ends with a
    /// "[… patch truncated: … …]" line).
    pub truncated: bool,
}

/// Width `render` lays the stat out in, like git on an 80-column terminal.
const STAT_WIDTH: usize = 80;
/// Longest path `render` shows before eliding its start with `...`.
const STAT_NAME_MAX: usize = 50;

impl Repo {
    /// The diff from `from_sha` to `to_sha`, its patch capped at `max_patch_bytes`
    /// (the truncation marker included).
    ///
    /// The patch is made file by file and only what can still be shown is kept:
    /// past the budget, a file's patch is measured and dropped, so memory holds
    /// at most the budget plus one file's patch, whatever the size of the diff.
    pub fn diff(
        &self,
        from_sha: &CommitId,
        to_sha: &CommitId,
        max_patch_bytes: usize,
    ) -> Result<Diff, GitError> {
        let mut patch = PatchSoFar::default();
        let stat = each_file(self.for_diff()?, from_sha, to_sha, true, &mut |text| {
            patch.push(text, max_patch_bytes);
            Ok(())
        })?;
        let (patch, truncated) = fit_kept(&patch.kept, patch.total, patch.files, max_patch_bytes);
        Ok(Diff {
            patch,
            stat,
            truncated,
        })
    }

    /// Only the stat of the diff from `from_sha` to `to_sha` (what `pr.md`
    /// shows): no patch text is made at all.
    pub fn diff_stat(&self, from_sha: &CommitId, to_sha: &CommitId) -> Result<DiffStat, GitError> {
        each_file(self.for_diff()?, from_sha, to_sha, false, &mut |_| Ok(()))
    }

    /// Writes the whole unified patch from `from_sha` to `to_sha` to `out`, one
    /// file's patch at a time (each passed through `filter` first, e.g. to
    /// redact it), and returns the diff's stat. Memory holds one file's patch,
    /// never the whole patch: a stage's `diff.patch` is streamed to its file.
    pub(crate) fn write_patch(
        &self,
        from_sha: &CommitId,
        to_sha: &CommitId,
        out: &mut dyn std::io::Write,
        filter: &dyn Fn(&str) -> String,
    ) -> Result<DiffStat, GitError> {
        each_file(self.for_diff()?, from_sha, to_sha, true, &mut |text| {
            out.write_all(filter(&text).as_bytes())
                .map_err(|source| GitError::Io {
                    op: "write the patch",
                    path: std::path::PathBuf::new(),
                    source,
                })
        })
    }
}

/// The diff from `from_sha` to `to_sha`, file by file: each file's patch
/// text goes to `sink` when `text` is set (none is made otherwise); returns
/// the stat of all files. `repo` is a handle from [`Repo::for_diff`].
///
/// libgit2's tree-to-tree diff walks every entry of both trees (it does not
/// skip a subtree whose id is the same on both sides): 100,000 tracked files
/// cost ~100 ms for a one-file change. So the changed entries are found
/// first by a walk that skips identical subtrees ([`changed_entries`]), and
/// libgit2 diffs two sparse trees holding only those (written to the
/// handle's in-memory object store): renames, binary detection and the
/// patch text are libgit2's, the cost is what changed.
fn each_file(
    repo: &Repository,
    from_sha: &CommitId,
    to_sha: &CommitId,
    text: bool,
    sink: &mut dyn FnMut(String) -> Result<(), GitError>,
) -> Result<DiffStat, GitError> {
    let op = || format!("diff {from_sha}..{to_sha}");
    let from = find_commit(repo, from_sha)?.tree().map_err(git_err(op()))?;
    let to = find_commit(repo, to_sha)?.tree().map_err(git_err(op()))?;
    let (from, to) = sparse_trees(repo, &from, &to).map_err(git_err(op()))?;
    let mut opts = DiffOptions::new();
    opts.context_lines(3);
    let mut diff = repo
        .diff_tree_to_tree(Some(&from), Some(&to), Some(&mut opts))
        .map_err(git_err(op()))?;
    let mut find = DiffFindOptions::new();
    find.renames(true);
    diff.find_similar(Some(&mut find)).map_err(git_err(op()))?;
    // Blob sizes from the object headers: the content is not inflated for them.
    let odb = repo.odb().map_err(git_err(op()))?;
    let size = |id: git2::Oid| {
        if id.is_zero() {
            0
        } else {
            odb.read_header(id).map_or(0, |(size, _)| size as u64)
        }
    };

    let mut stat = DiffStat::default();
    for (idx, delta) in diff.deltas().enumerate() {
        let old = delta
            .old_file()
            .path()
            .map(|p| p.to_string_lossy().into_owned());
        let new = delta
            .new_file()
            .path()
            .map(|p| p.to_string_lossy().into_owned());
        let path = match (delta.status(), old, new) {
            (Delta::Renamed, Some(old), Some(new)) if old != new => format!("{old} => {new}"),
            (_, _, Some(new)) => new,
            (_, Some(old), None) => old,
            (_, None, None) => String::new(),
        };
        let sizes = || (size(delta.old_file().id()), size(delta.new_file().id()));
        let mut binary = delta.flags().is_binary().then(sizes);
        let (insertions, deletions, patch) =
            match Patch::from_diff(&diff, idx).map_err(git_err(op()))? {
                Some(mut one) => {
                    if one.delta().flags().is_binary() && binary.is_none() {
                        binary = Some(sizes());
                    }
                    let (_, ins, del) = one.line_stats().map_err(git_err(op()))?;
                    let patch = if text {
                        let buf = one.to_buf().map_err(git_err(op()))?;
                        String::from_utf8_lossy(&buf).into_owned()
                    } else {
                        String::new()
                    };
                    (ins, del, patch)
                }
                // libgit2 makes no patch for some binary deltas; say what git says.
                None => {
                    if binary.is_none() {
                        binary = Some(sizes());
                    }
                    (
                        0,
                        0,
                        format!("diff --git a/{path} b/{path}\nBinary files differ\n"),
                    )
                }
            };
        stat.insertions += insertions;
        stat.deletions += deletions;
        stat.files.push(FileStat {
            path,
            insertions,
            deletions,
            binary,
        });
        if text {
            sink(patch)?;
        }
    }
    stat.files_changed = stat.files.len();
    Ok(stat)
}

/// One side of a changed path: (path, object id, file mode).
pub(super) type Side = (Vec<u8>, git2::Oid, i32);

/// A tree entry's id and file mode.
type Entry = (git2::Oid, i32);

/// Trees holding only the entries that differ between `old` and `new`
/// (each with its own side's id and mode), written to `repo`'s object
/// store: their diff is the diff of `old` and `new`.
fn sparse_trees<'r>(
    repo: &'r Repository,
    old: &git2::Tree<'r>,
    new: &git2::Tree<'r>,
) -> Result<(git2::Tree<'r>, git2::Tree<'r>), git2::Error> {
    let (mut olds, mut news) = (Vec::new(), Vec::new());
    changed_entries(repo, Some(old), Some(new), b"", &mut olds, &mut news)?;
    let empty = repo.find_tree(repo.treebuilder(None)?.write()?)?;
    let build = |sides: Vec<Side>| -> Result<git2::Tree<'r>, git2::Error> {
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, id, mode) in sides {
            update.upsert(path, id, file_mode(mode));
        }
        repo.find_tree(update.create_updated(repo, &empty)?)
    };
    Ok((build(olds)?, build(news)?))
}

fn file_mode(mode: i32) -> git2::FileMode {
    match mode {
        0o100755 => git2::FileMode::BlobExecutable,
        0o100664 => git2::FileMode::BlobGroupWritable,
        0o120000 => git2::FileMode::Link,
        0o160000 => git2::FileMode::Commit,
        0o040000 => git2::FileMode::Tree,
        _ => git2::FileMode::Blob,
    }
}

/// Appends to `olds` and `news` every non-tree entry under `prefix` that is
/// not the same (id and mode) in `old` and `new`; a subtree with the same id
/// on both sides is skipped unread. A missing side (`None`) is empty.
pub(super) fn changed_entries(
    repo: &Repository,
    old: Option<&git2::Tree<'_>>,
    new: Option<&git2::Tree<'_>>,
    prefix: &[u8],
    olds: &mut Vec<Side>,
    news: &mut Vec<Side>,
) -> Result<(), git2::Error> {
    let is_tree = |mode: i32| mode == 0o040000;
    let mut by_name: std::collections::BTreeMap<Vec<u8>, (Option<Entry>, Option<Entry>)> =
        std::collections::BTreeMap::new();
    for e in old.into_iter().flat_map(|t| t.iter()) {
        by_name.entry(e.name_bytes().to_vec()).or_default().0 = Some((e.id(), e.filemode()));
    }
    for e in new.into_iter().flat_map(|t| t.iter()) {
        by_name.entry(e.name_bytes().to_vec()).or_default().1 = Some((e.id(), e.filemode()));
    }
    for (name, (o, n)) in by_name {
        if o == n {
            continue;
        }
        let mut path = prefix.to_vec();
        if !path.is_empty() {
            path.push(b'/');
        }
        path.extend_from_slice(&name);
        let subtree =
            |side: Option<(git2::Oid, i32)>| -> Result<Option<git2::Tree<'_>>, git2::Error> {
                match side {
                    Some((id, mode)) if is_tree(mode) => repo.find_tree(id).map(Some),
                    _ => Ok(None),
                }
            };
        let (ot, nt) = (subtree(o)?, subtree(n)?);
        if ot.is_some() || nt.is_some() {
            changed_entries(repo, ot.as_ref(), nt.as_ref(), &path, olds, news)?;
        }
        if let Some((id, mode)) = o.filter(|(_, m)| !is_tree(*m)) {
            olds.push((path.clone(), id, mode));
        }
        if let Some((id, mode)) = n.filter(|(_, m)| !is_tree(*m)) {
            news.push((path, id, mode));
        }
    }
    Ok(())
}

/// The per-file patches that a budget can still show, and the size of all.
#[derive(Default)]
struct PatchSoFar {
    /// The chunks that begin within the budget (the cut is always inside
    /// these: the budget left for text is at most `max`).
    kept: Vec<String>,
    /// Bytes of every chunk.
    total: usize,
    /// Number of chunks.
    files: usize,
}

impl PatchSoFar {
    fn push(&mut self, chunk: String, max: usize) {
        // `fit_kept` reaches a chunk only when all before it fit the budget.
        let starts_at = self.total;
        self.total += chunk.len();
        if starts_at <= max {
            self.kept.push(chunk);
        }
        self.files += 1;
    }
}

fn truncation_marker(bytes: usize, files: usize) -> String {
    let noun = if files == 1 { "file" } else { "files" };
    format!("[… patch truncated: {bytes} more bytes in {files} {noun} …]\n")
}

/// Joins per-file patches, cutting them to `max` bytes (marker included) when
/// they do not fit.
#[cfg(test)]
fn fit_patch(chunks: &[String], max: usize) -> (String, bool) {
    let total: usize = chunks.iter().map(String::len).sum();
    fit_kept(chunks, total, chunks.len(), max)
}

/// [`fit_patch`] of `files` per-file patches of `total` bytes in all, of
/// which only the leading ones are given (`kept`: at least those that begin
/// within `max` bytes).
fn fit_kept(kept: &[String], total: usize, files: usize, max: usize) -> (String, bool) {
    let chunks = kept;
    if total <= max {
        return (chunks.concat(), false);
    }
    // The marker's numbers only shrink from these, so this bounds its length.
    let budget = max.saturating_sub(truncation_marker(total, files).len());
    let mut out = String::new();
    let mut whole_files = 0;
    for chunk in chunks {
        if out.len() + chunk.len() <= budget {
            out.push_str(chunk);
            whole_files += 1;
        } else {
            let room = budget - out.len();
            out.push_str(cut_file_patch(chunk, room, out.is_empty()));
            break;
        }
    }
    if !out.is_empty() && !out.ends_with('\n') {
        // Only a mid-line cut gets here, and that cut left room for this byte
        // inside the marker's worst-case reserve.
        out.push('\n');
    }
    let shown = out.len();
    let marker = truncation_marker(total.saturating_sub(shown), files - whole_files);
    out.push_str(&marker);
    (out, true)
}

/// The longest prefix of one file's patch within `room` bytes that ends after
/// a whole hunk. When none fits and nothing precedes it (`alone`), falls back
/// to whole lines, then to a character boundary, so the patch is never empty
/// for want of a boundary.
fn cut_file_patch(chunk: &str, room: usize, alone: bool) -> &str {
    // Cutting just before hunk k keeps hunks 0..k, so the first hunk header
    // is no place to cut.
    let first_hunk = line_starts(chunk).find(|&at| chunk[at..].starts_with("@@ "));
    let by_hunk = line_starts(chunk)
        .filter(|&at| Some(at) > first_hunk && chunk[at..].starts_with("@@ "))
        .rfind(|&end| end <= room);
    if let Some(end) = by_hunk {
        return &chunk[..end];
    }
    if !alone {
        return "";
    }
    let by_line = line_starts(chunk).rfind(|&at| at > 0 && at <= room);
    if let Some(end) = by_line {
        return &chunk[..end];
    }
    let mut end = room.min(chunk.len());
    while !chunk.is_char_boundary(end) {
        end -= 1;
    }
    &chunk[..end]
}

/// Byte offsets where lines begin (0 and after every `\n` that is not last).
fn line_starts(text: &str) -> impl DoubleEndedIterator<Item = usize> + '_ {
    std::iter::once(0).chain(
        text.match_indices('\n')
            .map(|(at, _)| at + 1)
            .filter(move |&at| at < text.len()),
    )
}

impl DiffStat {
    /// The last line of `git diff --stat`, without a newline, e.g.
    /// `" 3 files changed, 10 insertions(+), 2 deletions(-)"`.
    pub fn summary(&self) -> String {
        if self.files_changed == 0 {
            return " 0 files changed".to_string();
        }
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut out = format!(
            " {}",
            plural(self.files_changed, "file changed", "files changed")
        );
        // git prints both counts when both are zero, and omits a zero beside a
        // non-zero one.
        if self.insertions > 0 || self.deletions == 0 {
            let _ = write!(
                out,
                ", {}",
                plural(self.insertions, "insertion(+)", "insertions(+)")
            );
        }
        if self.deletions > 0 || self.insertions == 0 {
            let _ = write!(
                out,
                ", {}",
                plural(self.deletions, "deletion(-)", "deletions(-)")
            );
        }
        out
    }

    /// `git diff --stat` as text: one ` path | N ++--` line per file, then
    /// [`DiffStat::summary`]; every line ends with a newline.
    pub fn render(&self) -> String {
        let names: Vec<String> = self.files.iter().map(|f| elide(&f.path)).collect();
        let name_width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let max_change = self
            .files
            .iter()
            .map(|f| f.insertions + f.deletions)
            .max()
            .unwrap_or(0);
        let count_width = max_change.to_string().len();
        // " name | count graph"
        let graph_width = STAT_WIDTH
            .saturating_sub(1 + name_width + 3 + count_width + 1)
            .max(1);
        let mut out = String::new();
        for (file, name) in self.files.iter().zip(&names) {
            let change = file.insertions + file.deletions;
            let (plus, minus) = if max_change > graph_width {
                // git's show_stats: scale the total, keep room for both signs,
                // and scale the smaller side so it does not vanish.
                let mut total = scale(change, graph_width, max_change);
                if total < 2 && file.insertions > 0 && file.deletions > 0 {
                    total = 2;
                }
                if file.insertions < file.deletions {
                    let plus = scale(file.insertions, graph_width, max_change);
                    (plus, total.saturating_sub(plus))
                } else {
                    let minus = scale(file.deletions, graph_width, max_change);
                    (total.saturating_sub(minus), minus)
                }
            } else {
                (file.insertions, file.deletions)
            };
            let graph = format!("{}{}", "+".repeat(plus), "-".repeat(minus));
            let pad = name_width - name.chars().count();
            if let Some((before, after)) = file.binary {
                let _ = writeln!(
                    out,
                    " {name}{} | Bin {before} -> {after} bytes",
                    " ".repeat(pad)
                );
                continue;
            }
            let _ = write!(out, " {name}{} | {change:>count_width$}", " ".repeat(pad));
            if !graph.is_empty() {
                let _ = write!(out, " {graph}");
            }
            out.push('\n');
        }
        out.push_str(&self.summary());
        out.push('\n');
        out
    }
}

/// git's `scale_linear`: at least one column for any change.
fn scale(it: usize, width: usize, max_change: usize) -> usize {
    if it == 0 {
        0
    } else {
        1 + it * (width - 1) / max_change
    }
}

/// Shortens a long path to its tail behind `...`, as `git diff --stat` does.
fn elide(path: &str) -> String {
    let len = path.chars().count();
    if len <= STAT_NAME_MAX {
        return path.to_string();
    }
    let tail: String = path.chars().skip(len - (STAT_NAME_MAX - 3)).collect();
    format!("...{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file_patch(name: &str, hunks: usize, lines_per_hunk: usize) -> String {
        let mut s = format!("diff --git a/{name} b/{name}\n--- a/{name}\n+++ b/{name}\n");
        for h in 0..hunks {
            let _ = writeln!(s, "@@ -{0},{1} +{0},{1} @@", h * 100 + 1, lines_per_hunk);
            for l in 0..lines_per_hunk {
                let _ = writeln!(s, "+line {h}.{l}");
            }
        }
        s
    }

    #[test]
    fn fit_patch_keeps_everything_within_budget() {
        let chunks = vec![file_patch("a", 1, 2), file_patch("b", 1, 2)];
        let total: usize = chunks.iter().map(String::len).sum();
        let (patch, truncated) = fit_patch(&chunks, total);
        assert!(!truncated);
        assert_eq!(patch, chunks.concat());
    }

    #[test]
    fn fit_patch_cuts_at_file_boundary() {
        let chunks = vec![
            file_patch("a", 1, 3),
            file_patch("b", 1, 40),
            file_patch("c", 1, 3),
        ];
        let max = chunks[0].len() + 100;
        let (patch, truncated) = fit_patch(&chunks, max);
        assert!(truncated);
        assert!(patch.len() <= max, "{} > {max}", patch.len());
        let rest = chunks[1].len() + chunks[2].len();
        assert_eq!(
            patch,
            format!(
                "{}[… patch truncated: {rest} more bytes in 2 files …]\n",
                chunks[0]
            )
        );
    }

    #[test]
    fn fit_patch_cuts_at_hunk_boundary_inside_a_file() {
        let chunks = vec![file_patch("big", 5, 10)];
        let hunk_len = chunks[0].len() / 5; // roughly one hunk
        let max = hunk_len * 3;
        let (patch, truncated) = fit_patch(&chunks, max);
        assert!(truncated);
        assert!(patch.len() <= max);
        let body = patch.split("[… patch truncated").next().unwrap_or_default();
        assert!(chunks[0].starts_with(body));
        // Ends right before a hunk header, i.e. after a whole hunk.
        assert!(chunks[0][body.len()..].starts_with("@@ "), "{body}");
        assert!(body.contains("+line 0.9\n"));
        assert!(patch.ends_with("more bytes in 1 file …]\n"));
    }

    #[test]
    fn fit_patch_falls_back_to_lines_when_no_hunk_fits() {
        let chunks = vec![file_patch("huge", 1, 500)];
        let (patch, truncated) = fit_patch(&chunks, 300);
        assert!(truncated);
        assert!(patch.len() <= 300);
        assert!(patch.starts_with("diff --git a/huge b/huge\n"));
        let body = patch.split("[… patch truncated").next().unwrap_or_default();
        assert!(body.ends_with('\n'));
        let omitted = chunks[0].len() - body.len();
        assert!(patch.contains(&format!("{omitted} more bytes in 1 file")));
    }

    #[test]
    fn fit_patch_with_zero_budget_is_just_the_marker() {
        let chunks = vec![file_patch("a", 1, 1)];
        let (patch, truncated) = fit_patch(&chunks, 0);
        assert!(truncated);
        assert_eq!(
            patch,
            format!(
                "[… patch truncated: {} more bytes in 1 file …]\n",
                chunks[0].len()
            )
        );
    }

    #[test]
    fn cut_never_splits_a_character() {
        let chunk = "ééééé";
        assert_eq!(cut_file_patch(chunk, 3, true), "é");
    }

    #[test]
    fn summary_matches_git_wording() {
        let stat = |files, insertions, deletions| DiffStat {
            files_changed: files,
            insertions,
            deletions,
            files: Vec::new(),
        };
        assert_eq!(stat(0, 0, 0).summary(), " 0 files changed");
        assert_eq!(
            stat(3, 10, 2).summary(),
            " 3 files changed, 10 insertions(+), 2 deletions(-)"
        );
        assert_eq!(stat(1, 1, 0).summary(), " 1 file changed, 1 insertion(+)");
        assert_eq!(stat(2, 0, 1).summary(), " 2 files changed, 1 deletion(-)");
        assert_eq!(
            stat(1, 0, 0).summary(),
            " 1 file changed, 0 insertions(+), 0 deletions(-)"
        );
    }

    #[test]
    fn render_aligns_and_scales_like_git() {
        let stat = DiffStat {
            files_changed: 3,
            insertions: 1003,
            deletions: 2,
            files: vec![
                FileStat {
                    path: "a.txt".into(),
                    insertions: 3,
                    deletions: 2,
                    binary: None,
                },
                FileStat {
                    path: "dir/long_name.rs".into(),
                    insertions: 1000,
                    deletions: 0,
                    binary: None,
                },
                FileStat {
                    path: "img.png".into(),
                    insertions: 0,
                    deletions: 0,
                    binary: None,
                },
            ],
        };
        let text = stat.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0], " a.txt            |    5 +-");
        assert!(lines[1].starts_with(" dir/long_name.rs | 1000 +++"));
        assert!(lines[1].len() <= STAT_WIDTH, "{}", lines[1]);
        assert_eq!(lines[2], " img.png          |    0");
        assert_eq!(
            lines[3],
            " 3 files changed, 1003 insertions(+), 2 deletions(-)"
        );
        assert!(text.ends_with('\n'));
    }

    /// A repository with a two-commit history: text, binary, rename, deletion.
    fn changed_repo() -> (crate::git::testutil::TestRepo, crate::git::CommitId) {
        let repo = crate::git::testutil::TestRepo::new();
        let base = repo.rev("HEAD");
        repo.write("src/lib.rs", "pub fn one() -> u32 {\n    11\n}\n");
        std::fs::write(repo.path.join("logo.png"), [0u8, 159, 146, 150, 0, 1]).unwrap();
        repo.write("notes.dat", "plain text data\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "change"]);
        (repo, base)
    }

    #[test]
    fn the_streamed_patch_is_the_whole_patch_and_the_same_stat() {
        let (repo, base) = changed_repo();
        let handle = Repo::at(repo.git_dir());
        let whole = handle.diff(&base, &repo.rev("HEAD"), usize::MAX).unwrap();
        let mut out = Vec::new();
        let stat = handle
            .write_patch(&base, &repo.rev("HEAD"), &mut out, &|t: &str| {
                t.replace("11", "[N]")
            })
            .unwrap();
        assert_eq!(stat, whole.stat);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            whole.patch.replace("11", "[N]")
        );
        assert!(whole.patch.contains("+    11\n"), "{}", whole.patch);
    }

    #[test]
    fn a_diff_between_commits_never_reads_the_index() {
        let (repo, base) = changed_repo();
        // An index libgit2 cannot parse: any attribute lookup that loaded
        // it would fail the diff.
        std::fs::write(repo.git_dir().join("index"), b"DIRC not an index").unwrap();
        let d = Repo::at(repo.git_dir())
            .diff(&base, &repo.rev("HEAD"), usize::MAX)
            .unwrap();
        assert_eq!(d.stat.files_changed, 3);
        let stat = Repo::at(repo.git_dir())
            .diff_stat(&base, &repo.rev("HEAD"))
            .unwrap();
        assert_eq!(stat, d.stat);
        let plain = crate::git::open::open_at(&repo.git_dir()).unwrap();
        assert!(
            each_file(&plain, &base, &repo.rev("HEAD"), false, &mut |_| Ok(())).is_err(),
            "the test's index must be one libgit2 refuses"
        );
    }

    #[test]
    fn working_tree_attributes_still_apply_to_the_diff() {
        let (repo, base) = changed_repo();
        repo.write(".gitattributes", "*.dat binary\n");
        let d = Repo::at(repo.git_dir())
            .diff(&base, &repo.rev("HEAD"), usize::MAX)
            .unwrap();
        let dat = d.stat.files.iter().find(|f| f.path == "notes.dat").unwrap();
        assert_eq!(dat.binary, Some((0, 16)), "{:?}", d.stat);
        assert!(!d.patch.contains("plain text data"), "{}", d.patch);
        let png = d.stat.files.iter().find(|f| f.path == "logo.png").unwrap();
        assert_eq!(png.binary, Some((0, 6)));
    }

    #[test]
    fn only_what_changed_is_diffed_and_the_patch_is_git_s() {
        let repo = crate::git::testutil::TestRepo::new();
        for d in 0..5 {
            for f in 0..5 {
                repo.write(&format!("d{d}/sub/f{f}.txt"), &format!("{d} {f}\n"));
            }
        }
        repo.write("tool.sh", "echo hi\n");
        repo.write("becomes_dir", "a file first\n");
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "tree"]);
        let base = repo.rev("HEAD");
        // A change deep in one directory, a whole directory gone, a mode
        // change, a file replaced by a directory, a symlink, a rename.
        repo.write("d1/sub/f3.txt", "1 3 changed\n");
        repo.git(&["rm", "-q", "-r", "d2"]);
        {
            use std::os::unix::fs::PermissionsExt;
            let exe = std::fs::Permissions::from_mode(0o755);
            std::fs::set_permissions(repo.path.join("tool.sh"), exe).unwrap();
        }
        repo.git(&["rm", "-q", "becomes_dir"]);
        repo.write("becomes_dir/inner.txt", "now a directory\n");
        std::os::unix::fs::symlink("d0/sub/f0.txt", repo.path.join("link")).unwrap();
        repo.git(&["mv", "d3/sub/f4.txt", "d4/moved.txt"]);
        repo.git(&["add", "-A"]);
        repo.git(&["commit", "-q", "-m", "changes"]);
        let d = Repo::at(repo.git_dir())
            .diff(&base, &repo.rev("HEAD"), usize::MAX)
            .unwrap();
        assert_eq!(
            d.patch,
            repo.git(&["diff", "-M", "--no-color", &base, "HEAD"])
        );
        let names: Vec<&str> = d.stat.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            names,
            [
                "becomes_dir",
                "becomes_dir/inner.txt",
                "d1/sub/f3.txt",
                "d2/sub/f0.txt",
                "d2/sub/f1.txt",
                "d2/sub/f2.txt",
                "d2/sub/f3.txt",
                "d2/sub/f4.txt",
                "d3/sub/f4.txt => d4/moved.txt",
                "link",
                "tool.sh",
            ]
        );
        // The handle kept its sparse trees in memory: nothing was written.
        let loose = std::fs::read_dir(repo.git_dir().join("objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().len() == 2)
            .flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten())
            .count();
        let before = loose;
        Repo::at(repo.git_dir())
            .diff(&base, &repo.rev("HEAD"), 100)
            .unwrap();
        let after = std::fs::read_dir(repo.git_dir().join("objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().len() == 2)
            .flat_map(|e| std::fs::read_dir(e.path()).unwrap().flatten())
            .count();
        assert_eq!(before, after);
    }

    #[test]
    fn long_paths_are_elided_from_the_front() {
        let long = format!("{}/file.rs", "d".repeat(80));
        let shown = elide(&long);
        assert_eq!(shown.chars().count(), STAT_NAME_MAX);
        assert!(shown.starts_with("...") && shown.ends_with("/file.rs"));
    }
}
