//! Taking a lane: the lease on a free slot, then the slot readied at the
//! start commit (moved by git when whole, else made anew).

use super::handle::Pool;
use super::lease::Lease;
use crate::git::error::GitError;
use crate::git::repo::CommitId;
use crate::git::worktree::move_tracked;

/// How a taken lane was readied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readied {
    /// A pooled lane, moved to the start commit by its difference; its
    /// untracked and ignored files are not cleaned yet
    /// ([`crate::git::clean_moved`]).
    Warm,
    /// A new worktree (no free pooled lane, or the pooled one was refused).
    Created,
}

impl Pool<'_> {
    /// Takes a free slot (one already at `start` first, then the lowest
    /// number; a new one when every slot is taken: the run's hand-back trims
    /// the pool to its bound again, [`Pool::trim`]) and readies it at `start`,
    /// detached, its tracked files exactly as git checks `start` out. A
    /// [`Readied::Warm`] lane still holds what its last user left untracked:
    /// the caller runs [`crate::git::clean_moved`] before anything reads it (the
    /// runner does it beside the first model request, behind the lane's
    /// readiness barrier). Returns the lease, how
    /// the lane was readied and why a pooled lane there was not reused (empty
    /// when it was, or none was).
    pub fn take(&self, start: &CommitId) -> Result<(Lease, Readied, String), GitError> {
        let mut existing = self.slots();
        existing.sort_by_key(|&n| (self.slot_head(n).as_deref() != Some(start), n));
        let mut lease = None;
        for &n in &existing {
            if let Some(l) = self.try_lease(n)? {
                lease = Some(l);
                break;
            }
        }
        if lease.is_none() {
            for n in 1.. {
                if existing.contains(&n) {
                    continue;
                }
                if let Some(l) = self.try_lease(n)? {
                    lease = Some(l);
                    break;
                }
            }
        }
        let Some(lease) = lease else {
            unreachable!("the loop over slot numbers ends with a lease")
        };
        let (readied, note) = self.ready(&lease, start)?;
        Ok((lease, readied, note))
    }

    /// Readies the leased slot at `start`: moved by git if it is whole, else
    /// (or when the move fails) removed and created anew. The note says why a
    /// pooled lane was not reused, if one was there.
    fn ready(&self, lease: &Lease, start: &CommitId) -> Result<(Readied, String), GitError> {
        let common_dir = self.common_dir();
        let n = lease.slot;
        let mut note = String::new();
        if self.is_whole(n) {
            let admin = common_dir.join("worktrees").join(&lease.name);
            let moved = self
                .attach_shadow(&admin, &lease.name)
                .and_then(|_| move_tracked(&lease.path, start));
            match moved {
                Ok(()) => return Ok((Readied::Warm, note)),
                Err(e) => note = format!("failed to {e}"),
            }
        }
        self.clear_slot(n)?;
        self.create_worktree(&lease.name, &lease.path, start)?;
        Ok((Readied::Created, note))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::git::Repo;
    use crate::git::testutil::TestRepo;

    #[test]
    fn lanes_taken_side_by_side_are_distinct_slots_and_leave_no_branch() {
        // Eight takers at once, made and retired again: each gets a slot of
        // its own, and git's worktree adds under orch's names never collide.
        let repo = TestRepo::new();
        let common = repo.git_dir();
        let head = repo.rev("HEAD");
        for round in 0..10 {
            let takers: Vec<_> = (0..8)
                .map(|_| {
                    let (c, h) = (common.clone(), head.clone());
                    std::thread::spawn(move || Repo::at(&c).pool().take(&h))
                })
                .collect();
            let leases: Vec<Lease> = takers
                .into_iter()
                .map(|t| {
                    let (lease, _, _) = t
                        .join()
                        .unwrap()
                        .unwrap_or_else(|e| panic!("round {round}: {e}"));
                    lease
                })
                .collect();
            let mut slots: Vec<usize> = leases.iter().map(|l| l.slot).collect();
            slots.sort_unstable();
            slots.dedup();
            assert_eq!(slots.len(), 8, "round {round}: {slots:?}");
            for lease in leases {
                Repo::at(&common).pool().retire(lease).unwrap();
            }
        }
        assert_eq!(repo.git(&["for-each-ref", "refs/heads/orch-lanes/"]), "");
    }

    /// Waits (bounded) until slot `n`'s lease is free. A lease is an
    /// `flock`, and a child process another test thread forks holds a copy
    /// of the lock's descriptor until it execs (close-on-exec): a lease
    /// dropped in that window stays held for a moment, and a take then gets
    /// a new slot (harmless in a run; the pool trims) — a different test.
    fn wait_unlocked(common: &std::path::Path, n: usize) {
        let path = Repo::at(common).pool().lease_path(n);
        for _ in 0..1000 {
            if std::fs::File::open(&path).is_ok_and(|f| f.try_lock().is_ok()) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("lane {n}'s lease stayed held for 10 s");
    }

    #[test]
    fn a_lane_whose_dot_git_names_gits_gone_admin_dir_is_made_anew() {
        // A kill between renaming git's admin dir to orch's name and
        // rewriting the lane's `.git` leaves `.git` naming the old one.
        let repo = TestRepo::new();
        let common = repo.git_dir();
        let head = repo.rev("HEAD");
        let (lease, readied, _) = Repo::at(&common).pool().take(&head).unwrap();
        assert_eq!(readied, Readied::Created);
        let path = lease.path.clone();
        let slot = lease.slot;
        drop(lease); // handed back: the lane stays in the pool
        wait_unlocked(&common, slot);
        let (lease, readied, note) = Repo::at(&common).pool().take(&head).unwrap();
        assert_eq!(readied, Readied::Warm, "a whole lane is reused: {note}");
        let gone = common.join("worktrees").join("lane-gone");
        std::fs::write(path.join(".git"), format!("gitdir: {}\n", gone.display())).unwrap();
        drop(lease);
        wait_unlocked(&common, slot);
        let (lease, readied, _) = Repo::at(&common).pool().take(&head).unwrap();
        assert_eq!(lease.slot, slot, "the same slot");
        assert_eq!(readied, Readied::Created, "the broken lane is made anew");
        git2::Repository::open(&lease.path).expect("libgit2 opens the lane");
        Repo::at(&common).pool().retire(lease).unwrap();
    }
}
