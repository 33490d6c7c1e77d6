//! Built-in rules for `git`: what rewrites history, refs or configuration
//! outside the run's own branches.
//!
//! A lane is a linked worktree, so its refs (except `HEAD`), stash, reflogs,
//! objects and `.git/config` are the user's repository's. The run's own
//! branches are `orch/…` and `orch-lanes/…`; everything else is the user's.
//! Each message says what was refused and what to do instead, because it
//! goes back to the model as the tool result.

use super::paths::stays_inside;
use super::unwrap::Unit;
use super::wrappers::is_assignment;

/// Variables that point git at another repository or worktree.
const GIT_PATH_VARS: &[&str] = &[
    "GIT_DIR",
    "GIT_EXEC_PATH",
    "GIT_WORK_TREE",
    "GIT_COMMON_DIR",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
];

/// `GIT_DIR=…` and friends, as a prefix assignment, through `env` or with
/// `export`, pointing outside the worktree.
pub(super) fn git_env_rule(u: &Unit) -> Option<String> {
    let prefix = u.raw.len().saturating_sub(u.argv.len());
    let mut assigned: Vec<&String> = u.raw[..prefix].iter().collect();
    if u.argv.first().is_some_and(|p| {
        ["export", "declare", "typeset", "local", "readonly"].contains(&p.as_str())
    }) || u.argv.is_empty()
    {
        assigned.extend(u.argv.iter().skip(1));
    }
    if let Some(why) = git_config_env_rule(&assigned) {
        return Some(why);
    }
    assigned.into_iter().find_map(|w| {
        let (name, value) = w.split_once('=')?;
        (is_assignment(w) && GIT_PATH_VARS.contains(&name) && !stays_inside(value)).then(|| {
            format!(
                "`{name}={value}` points git outside this worktree; run git in the worktree without setting {name}"
            )
        })
    })
}

/// Configuration keys whose value is a path git reads hooks, config or a
/// work tree from (or runs): pointed outside the worktree, they make a
/// `git commit` in the lane run or write what lies there.
fn is_path_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    [
        "core.hookspath",
        "core.worktree",
        "include.path",
        "init.templatedir",
        "core.fsmonitor",
    ]
    .contains(&k.as_str())
        || (k.starts_with("includeif.") && k.ends_with(".path"))
}

/// `git -c KEY=VALUE` / `--config-env=KEY=VAR` giving a path key a value
/// outside the worktree (for `--config-env` the value is an environment
/// variable, unknown here).
fn config_override_rule(opt: &str, pair: &str) -> Option<String> {
    let (key, value) = pair.split_once('=')?;
    if !is_path_key(key) {
        return None;
    }
    let boolean = ["true", "false", "yes", "no", "on", "off", "0", "1", ""]
        .contains(&value.to_ascii_lowercase().as_str());
    let outside =
        opt == "--config-env" || (!boolean && value != "/dev/null" && !stays_inside(value));
    outside.then(|| {
        format!(
            "`git {opt} {pair}` points git's `{key}` outside this worktree, so git would run or read what lies there; leave `{key}` as it is (a path inside the worktree is fine)"
        )
    })
}

/// `GIT_CONFIG_KEY_<n>`/`GIT_CONFIG_VALUE_<n>` pairs and
/// `GIT_CONFIG_PARAMETERS` (how `git -c` reaches a child git) setting a
/// path key outside the worktree.
fn git_config_env_rule(assigned: &[&String]) -> Option<String> {
    let get = |name: &str| {
        assigned
            .iter()
            .find_map(|w| w.strip_prefix(name).and_then(|v| v.strip_prefix('=')))
    };
    for w in assigned {
        if let Some((name, key)) = w.split_once('=')
            && let Some(n) = name.strip_prefix("GIT_CONFIG_KEY_")
            && let Some(value) = get(&format!("GIT_CONFIG_VALUE_{n}"))
            && let Some(why) = config_override_rule("-c", &format!("{key}={value}"))
        {
            return Some(format!("`{name}`/`GIT_CONFIG_VALUE_{n}` set what {why}"));
        }
    }
    let params = get("GIT_CONFIG_PARAMETERS")?;
    params.split_whitespace().find_map(|p| {
        let p = p.replace(['\'', '"'], "");
        config_override_rule("-c", &p).map(|why| format!("`GIT_CONFIG_PARAMETERS` sets what {why}"))
    })
}

/// `orch/…` or `orch-lanes/…`, with or without `refs/heads/`.
fn is_run_branch(name: &str) -> bool {
    let name = name.strip_prefix("refs/heads/").unwrap_or(name);
    name.starts_with("orch/") || name.starts_with("orch-lanes/")
}

/// Non-option words of `args`, skipping the arguments of `with_arg` options.
fn operands<'a>(args: &'a [String], with_arg: &[&str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut opts_done = false;
    while i < args.len() {
        let a = args[i].as_str();
        if opts_done || !a.starts_with('-') || a == "-" {
            out.push(a);
        } else if a == "--" {
            opts_done = true;
        } else if with_arg.contains(&a) {
            i += 1;
        }
        i += 1;
    }
    out
}

/// Short-option letters of `args` (bundles split) plus the long options.
fn has_flag(args: &[String], short: &str, long: &[&str]) -> bool {
    args.iter().take_while(|a| *a != "--").any(|a| {
        if let Some(l) = a.strip_prefix("--") {
            let name = l.split('=').next().unwrap_or(l);
            long.contains(&name)
        } else if let Some(s) = a.strip_prefix('-') {
            s.chars().any(|c| short.contains(c))
        } else {
            false
        }
    })
}

/// The rule for `git ARGS…` (ARGS without the program).
pub(super) fn git_rule(args: &[String]) -> Option<String> {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_str();
        let (opt, value) = match a.split_once('=') {
            Some((o, v)) if o.starts_with("--") => (o, Some(v)),
            _ => (a, None),
        };
        let takes_arg = [
            "-C",
            "-c",
            "--git-dir",
            "--work-tree",
            "--namespace",
            "--config-env",
        ]
        .contains(&opt);
        if takes_arg {
            let v = value.or_else(|| args.get(i + 1).map(String::as_str));
            if let Some(v) = v
                && (opt == "-c" || opt == "--config-env")
                && let Some(why) = config_override_rule(opt, v)
            {
                return Some(why);
            }
            if let Some(v) = v
                && ["-C", "--git-dir", "--work-tree"].contains(&opt)
                && !stays_inside(v)
            {
                let spelled = if value.is_some() {
                    format!("{opt}={v}")
                } else {
                    format!("{opt} {v}")
                };
                return Some(format!(
                    "`git {spelled}` points git outside this worktree (only `.` or a relative path inside it may be given); run git in the worktree itself"
                ));
            }
            i += if value.is_some() { 1 } else { 2 };
        } else if a.starts_with('-') {
            i += 1;
        } else {
            break;
        }
    }
    let sub = args.get(i)?.as_str();
    let rest = &args[i + 1..];
    match sub {
        "push" => push_rule(rest),
        "update-ref" => update_ref_rule(rest),
        "branch" => branch_rule(rest),
        "checkout" | "switch" => switch_rule(sub, rest),
        "tag" if has_flag(rest, "df", &["delete", "force"]) => Some(
            "`git tag -d`/`-f` deletes or moves a tag, and tags are shared with the user's repository; create a tag with a new name instead".to_owned(),
        ),
        "stash"
            if rest
                .first()
                .is_some_and(|a| a == "clear" || a == "drop") =>
        {
            Some(format!(
                "`git stash {}` deletes stashed work, and the stash is shared with the user's repository; leave existing stash entries alone",
                rest[0]
            ))
        }
        "reflog"
            if rest
                .first()
                .is_some_and(|a| a == "expire" || a == "delete") =>
        {
            Some(format!(
                "`git reflog {}` destroys the record git needs to recover lost commits in the user's repository; leave the reflog alone",
                rest[0]
            ))
        }
        "gc" if has_flag(rest, "", &["prune"]) => Some(
            "`git gc --prune` deletes unreachable objects from the object store shared with the user's repository; run plain `git gc` if it is needed at all".to_owned(),
        ),
        "prune" => Some(
            "`git prune` deletes objects from the object store shared with the user's repository; leave it to the user".to_owned(),
        ),
        "filter-branch" | "filter-repo" => Some(format!(
            "`git {sub}` rewrites the history of many refs at once, the user's included; rewrite only the current branch (e.g. `git rebase`)"
        )),
        "worktree"
            if rest
                .first()
                .is_some_and(|a| ["remove", "move", "prune"].contains(&a.as_str())) =>
        {
            Some(format!(
                "`git worktree {}` changes the worktrees orch manages; leave them alone",
                rest[0]
            ))
        }
        "remote"
            if rest.first().is_some_and(|a| {
                ["add", "remove", "rm", "rename", "set-url", "set-head", "set-branches", "prune"]
                    .contains(&a.as_str())
            }) =>
        {
            Some(format!(
                "`git remote {}` changes the remotes of the user's repository (its shared `.git/config`); use the remotes as they are",
                rest[0]
            ))
        }
        "config" => config_rule(rest),
        "fetch" | "pull" => fetch_rule(sub, rest),
        "symbolic-ref" => {
            let ops = operands(rest, &["-m"]);
            match ops.as_slice() {
                [_, target] if !is_run_branch(target) => Some(format!(
                    "`git symbolic-ref {} {target}` points a ref at a branch that is not one of this run's (`orch/…`, `orch-lanes/…`); stay on the current branch",
                    ops[0]
                )),
                _ => None,
            }
        }
        _ => None,
    }
}

fn push_rule(rest: &[String]) -> Option<String> {
    let forced = rest.iter().find(|a| {
        let a = a.as_str();
        a == "--force"
            || a.starts_with("--force-with-lease")
            || a == "--force-if-includes"
            || a == "--mirror"
            || (a.starts_with('-') && !a.starts_with("--") && a.contains('f'))
            || (a.starts_with('+') && a.len() > 1)
    });
    if let Some(forced) = forced {
        return Some(format!("force push (`git push {forced}`)"));
    }
    let ops = operands(
        rest,
        &["-o", "--push-option", "--repo", "--receive-pack", "--exec"],
    );
    let refspecs = ops.get(1..).unwrap_or_default();
    if has_flag(rest, "d", &["delete"]) {
        match refspecs.iter().find(|r| !is_run_branch(r)) {
            Some(r) => {
                return Some(format!(
                    "`git push --delete {r}` deletes a remote branch that is not one of this run's branches; push new commits instead"
                ));
            }
            None if refspecs.is_empty() => {
                return Some(
                    "`git push --delete` deletes remote branches; push new commits instead"
                        .to_owned(),
                );
            }
            None => {}
        }
    }
    if let Some(r) = refspecs.iter().find(|r| {
        r.strip_prefix(':')
            .is_some_and(|d| !d.is_empty() && !is_run_branch(d))
    }) {
        return Some(format!(
            "`git push {r}` deletes the remote branch `{}`; push new commits instead",
            &r[1..]
        ));
    }
    if has_flag(rest, "", &["prune"]) {
        return Some(
            "`git push --prune` deletes remote branches that have no local counterpart; push named branches instead".to_owned(),
        );
    }
    None
}

/// `git checkout -B NAME` / `git switch -C NAME` reset a branch; `git
/// switch NAME` moves this worktree onto it. Either is refused for branches
/// that are not the run's. (`git checkout NAME` is not checked: whether NAME
/// is a branch or a path is only known to the repository.)
fn switch_rule(sub: &str, rest: &[String]) -> Option<String> {
    if let Some(forced) = rest
        .iter()
        .position(|a| a == "-B" || a == "-C" || a == "--force-create")
    {
        let name = rest.get(forced + 1)?;
        return (!is_run_branch(name)).then(|| {
            format!(
                "`git {sub} {} {name}` resets the branch `{name}`, which is not one of this run's branches (`orch/…`, `orch-lanes/…`); create a new branch name with `-b`/`-c` instead",
                rest[forced]
            )
        });
    }
    if sub != "switch" {
        return None;
    }
    let creates = has_flag(rest, "cd", &["create", "detach", "orphan"]);
    let ops = operands(rest, &["--conflict"]);
    let name = ops.first()?;
    (!creates && *name != "-" && !is_run_branch(name)).then(|| {
        format!(
            "`git switch {name}` puts this worktree on the branch `{name}`, so commits would land on a branch that is not one of this run's (`orch/…`, `orch-lanes/…`); stay on the current branch, or create one with `git switch -c NAME`"
        )
    })
}

/// `git fetch origin main:main` writes the local branch `main`.
fn fetch_rule(sub: &str, rest: &[String]) -> Option<String> {
    let ops = operands(
        rest,
        &[
            "--depth",
            "--deepen",
            "--shallow-since",
            "--shallow-exclude",
            "-j",
            "--jobs",
            "--refmap",
            "-o",
            "--server-option",
            "--upload-pack",
        ],
    );
    ops.iter().skip(1).find_map(|spec| {
        let (_, dst) = spec.trim_start_matches('+').split_once(':')?;
        let branch = dst.starts_with("refs/heads/") || !dst.starts_with("refs/");
        (branch && !dst.is_empty() && !is_run_branch(dst)).then(|| {
            format!(
                "`git {sub} … {spec}` writes the local branch `{dst}`, which is not one of this run's (`orch/…`, `orch-lanes/…`); fetch without a destination (`git fetch origin`) and use `origin/…`"
            )
        })
    })
}

fn update_ref_rule(rest: &[String]) -> Option<String> {
    if rest.iter().any(|a| a == "--stdin") {
        return Some(
            "`git update-ref --stdin` moves refs read from its input; only refs under refs/heads/orch/ and refs/heads/orch-lanes/ may be moved, name one explicitly".to_owned(),
        );
    }
    let ops = operands(rest, &["-m"]);
    let name = ops.first()?;
    (!is_run_branch(name)).then(|| {
        format!(
            "`git update-ref {name}` moves or deletes a ref outside this run's branches (only refs under refs/heads/orch/ and refs/heads/orch-lanes/ may be moved); commit on the current branch instead"
        )
    })
}

fn branch_rule(rest: &[String]) -> Option<String> {
    let delete = has_flag(rest, "dD", &["delete"]);
    let moving = has_flag(rest, "mM", &["move"]);
    let force = has_flag(rest, "fDMC", &["force"]);
    let copy = has_flag(rest, "cC", &["copy"]);
    if !(delete || moving || force) {
        return None;
    }
    let ops = operands(
        rest,
        &[
            "-u",
            "--set-upstream-to",
            "--points-at",
            "--format",
            "--sort",
            "--contains",
            "--no-contains",
            "--merged",
            "--no-merged",
        ],
    );
    let remote = has_flag(rest, "r", &["remotes"]);
    let run_branch = |b: &str| {
        is_run_branch(b) || (remote && b.split_once('/').is_some_and(|(_, b)| is_run_branch(b)))
    };
    let checked: Vec<&str> = if delete || moving || (copy && force) {
        ops
    } else {
        // `git branch -f NAME [START]`: START is a commit, not a branch.
        ops.into_iter().take(1).collect()
    };
    let what = if delete {
        "deletes"
    } else if moving {
        "renames"
    } else {
        "resets"
    };
    checked.iter().find(|b| !run_branch(b)).map(|b| {
        format!(
            "`git branch` with {} {what} the branch `{b}`, which is not one of this run's branches (`orch/…`, `orch-lanes/…`); leave other branches alone and commit on the current one",
            flags_spelled(rest)
        )
    })
}

fn flags_spelled(args: &[String]) -> String {
    let flags: Vec<&str> = args
        .iter()
        .filter(|a| a.starts_with('-'))
        .map(String::as_str)
        .collect();
    format!("`{}`", flags.join(" "))
}

fn config_rule(rest: &[String]) -> Option<String> {
    const READS: &[&str] = &[
        "get",
        "get-all",
        "get-regexp",
        "get-urlmatch",
        "get-color",
        "get-colorbool",
        "list",
    ];
    const WRITES: &[&str] = &[
        "add",
        "unset",
        "unset-all",
        "replace-all",
        "rename-section",
        "remove-section",
        "edit",
    ];
    let with_arg = [
        "-f",
        "--file",
        "--blob",
        "--type",
        "--default",
        "--comment",
        "--value",
    ];
    let mut file = None;
    let mut read = false;
    let mut write = false;
    let mut scope = "";
    let mut i = 0;
    while i < rest.len() {
        let a = rest[i].as_str();
        let (name, value) = match a.strip_prefix("--").map(|l| l.split_once('=')) {
            Some(Some((n, v))) => (n, Some(v)),
            Some(None) => (&a[2..], None),
            None => ("", None),
        };
        match a {
            "-l" => read = true,
            "-e" => write = true,
            "-f" | "--file" => file = rest.get(i + 1).map(String::as_str),
            _ if name == "file" => file = value,
            _ => {}
        }
        if READS.contains(&name) || name == "show-origin" || name == "show-scope" {
            read = true;
        }
        if WRITES.contains(&name) {
            write = true;
        }
        if ["global", "system", "local", "worktree"].contains(&name) {
            scope = name;
        }
        if with_arg.contains(&a) {
            i += 1;
        }
        i += 1;
    }
    let ops = operands(rest, &with_arg);
    match ops.first().copied() {
        Some(s) if READS.contains(&s) => read = true,
        Some(s) if s == "set" || WRITES.contains(&s) => write = true,
        _ => {}
    }
    if !write && (read || ops.len() <= 1) {
        return None;
    }
    if scope == "worktree" {
        return None;
    }
    if let Some(f) = file {
        return (!stays_inside(f)).then(|| {
            format!("`git config --file {f}` writes a config file outside this worktree; write one inside it")
        });
    }
    let key = ops
        .iter()
        .find(|o| !READS.contains(o) && *o != &"set" && !WRITES.contains(o))
        .unwrap_or(&"");
    Some(match scope {
        "global" | "system" => format!(
            "`git config --{scope} {key}` writes the user's {scope} git configuration; use `git -c {key}=… <command>` for a single command instead"
        ),
        _ => format!(
            "`git config {key}` writes the repository's shared configuration (`.git/config`, which the user's checkout uses too); use `git -c {key}=… <command>` for one command instead (reading with `--get` or `--list` is fine, and so is `git config --worktree` where worktree config is enabled)"
        ),
    })
}
