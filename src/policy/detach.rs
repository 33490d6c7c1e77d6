//! Processes meant to outlive the tool call: `nohup … &`, `setsid`,
//! `disown`, `screen -dm`, `tmux new -d`, `daemonize`, `start-stop-daemon
//! --background`, `at`/`batch`, `systemd-run`.
//!
//! orch stops every process a tool call started when the call ends (its
//! process group; `setsid` even leaves the group). A server the task needs
//! is started with `&`, used, and stopped with `kill $!` in the same call.

use super::programs::basename;
use super::unwrap::Unit;

const HOW: &str = "orch stops what a tool call started when the call ends, so start it with `&`, use it and stop it with `kill $!` in the same call, or run it in the foreground";

/// The rule for one simple command.
pub(super) fn detach_rule(u: &Unit) -> Option<String> {
    let prefix = u.raw.len().saturating_sub(u.argv.len());
    let wrappers: Vec<&str> = u.raw[..prefix].iter().map(|w| basename(w)).collect();
    if wrappers.contains(&"setsid") {
        return Some(format!(
            "`setsid` starts a process in a new session, outside this tool call's process group, so it would outlive the call; {HOW}"
        ));
    }
    if wrappers.contains(&"nohup") && u.background {
        return Some(format!(
            "`nohup … &` starts a process meant to outlive this tool call; {HOW}"
        ));
    }
    let prog = basename(u.argv.first()?);
    let args = &u.argv[1..];
    let has = |flags: &[&str]| args.iter().any(|a| flags.contains(&a.as_str()));
    let short = |c: char| {
        args.iter()
            .any(|a| a.starts_with('-') && !a.starts_with("--") && a.contains(c))
    };
    let detached = match prog {
        "disown" => true,
        "screen" => short('d') && short('m'),
        "tmux" => {
            args.iter()
                .any(|a| ["new", "new-session", "new-window", "neww"].contains(&a.as_str()))
                && short('d')
        }
        "daemonize" | "systemd-run" | "batch" => !has(&["--help", "--version", "-h"]),
        "at" => !has(&["-l", "-q", "-c", "--help", "-V"]) && !args.is_empty(),
        "start-stop-daemon" => has(&["--background", "-b"]),
        _ => false,
    };
    detached.then(|| format!("`{prog}` leaves a process running after this tool call; {HOW}"))
}
