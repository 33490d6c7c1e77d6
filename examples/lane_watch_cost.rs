#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]
//! Costs of the lane watcher's steps on an existing linked worktree (one
//! file appended to), next to the walks it replaces:
//!
//! ```sh
//! target/release/examples/lane_watch_cost <lane> <common-git-dir>
//! ```

use std::path::Path;
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (lane, common) = (Path::new(&args[0]), Path::new(&args[1]));
    let head = orch::git::Repo::at(lane).resolve_commit("HEAD").unwrap();
    let t = Instant::now();
    let watch = orch::git::watch::LaneWatch::start(lane, common, &head).unwrap();
    println!("watch start: {:?}", t.elapsed());
    let file = lane.join("d00/e00/f000000.txt");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("changed\n");
    std::fs::write(&file, text).unwrap();
    let t = Instant::now();
    let marks = watch.changes().expect("complete");
    println!("changes: {:?} ({} paths)", t.elapsed(), marks.paths.len());
    let t = Instant::now();
    let (tree, how) = orch::git::stage_tree(lane, &head, Some(&marks)).unwrap();
    println!("git stages the marks: {:?} ({how:?}, {tree})", t.elapsed());
    let t = Instant::now();
    let repo = git2::Repository::open(lane).unwrap();
    let mut index = repo.index().unwrap();
    println!("index read: {:?} ({} entries)", t.elapsed(), index.len());
    let t = Instant::now();
    index.write().unwrap();
    println!("index write: {:?}", t.elapsed());
    let t = Instant::now();
    let changed = orch::git::changed_paths(lane).unwrap();
    println!("status walk: {:?} ({} paths)", t.elapsed(), changed.len());
    let t = Instant::now();
    let c = orch::git::Repo::of_lane(lane)
        .and_then(|repo| repo.commit_tree(lane, "from marks", &head, &tree))
        .unwrap();
    println!("commit_tree: {:?}", t.elapsed());
    let t = Instant::now();
    assert!(watch.restart(&c));
    println!("restart: {:?}", t.elapsed());
    let t = Instant::now();
    orch::git::reset_worktree(lane, &head).unwrap();
    println!("reset (walk): {:?}", t.elapsed());
    let t = Instant::now();
    std::fs::write(&file, "x\n").unwrap();
    let c2 = orch::git::commit_all(lane, "walked", &head).unwrap();
    println!("commit_all: {:?} ({c2})", t.elapsed());
    orch::git::reset_worktree(lane, &head).unwrap();
}
