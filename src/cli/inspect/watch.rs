//! `orch watch`: a live run's stages — status, turns, tokens, cost and the
//! call each running stage is in — refreshed as its record changes, until
//! the run ends; exits with the run's exit code.
//!
//! On a terminal the table is redrawn in place (plain ANSI: cursor up,
//! clear below; every line cut to the terminal's width so the count of
//! lines to go back over is exact). Piped, one line is appended per stage
//! that changed, so a log of the output reads as a history; `--json`
//! prints the whole view as one JSON object per change.

use super::follow::{open_watch, pick_run};
use crate::cli::error::CliError;
use crate::cli::output::{Out, usd};
use crate::runlog::live::{POLL_INTERVAL, RunView, StageView};
use crate::text::plural;
use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::PathBuf;

/// Arguments of `orch watch`.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// The run id (`last` is the newest; left out: the newest running run,
    /// else the newest)
    pub run: Option<String>,
    /// The repository
    #[arg(long, default_value = ".")]
    pub repo: PathBuf,
    /// One JSON object (the run's view) per change, one per line
    #[arg(long)]
    pub json: bool,
}

/// Width assumed when the terminal does not say.
const DEFAULT_WIDTH: usize = 100;

/// `orch watch`.
pub(in crate::cli) fn cmd_watch(args: WatchArgs) -> Result<i32, CliError> {
    let root = pick_run(&args.repo, args.run.as_deref())?;
    let mut watch = open_watch(&root)?;
    let mut screen = if args.json {
        Screen::Json(String::new())
    } else if std::io::stdout().is_terminal() {
        Screen::Table(0)
    } else {
        Screen::Lines(HashMap::new())
    };
    loop {
        let changed = !watch.poll()?.is_empty();
        let view = watch.view();
        let ended = watch.ended();
        let mut out = Out::stdout();
        if changed || ended || screen.first() {
            screen.show(&mut out, &view)?;
        }
        if ended {
            let code = crate::runlog::live::exit_code(&view);
            if !matches!(screen, Screen::Json(_)) {
                out.untrusted(&format!(
                    "run {}: {} — {}, cost {} (exit {code})\n",
                    view.run_id,
                    view.status.as_str(),
                    plural(view.tokens.total(), "token", "tokens"),
                    cost(view.cost_usd)
                ))?;
            }
            out.finish()?;
            return Ok(code);
        }
        out.finish()?;
        std::thread::sleep(POLL_INTERVAL);
    }
}

/// How the view is shown, and what was shown last.
enum Screen {
    /// A table redrawn in place; the number of lines drawn last.
    Table(usize),
    /// Appended lines; the last line printed per stage (and the run's).
    Lines(HashMap<String, String>),
    /// JSON objects; the last one printed.
    Json(String),
}

impl Screen {
    /// Nothing shown yet.
    fn first(&self) -> bool {
        match self {
            Screen::Table(n) => *n == 0,
            Screen::Lines(seen) => seen.is_empty(),
            Screen::Json(last) => last.is_empty(),
        }
    }

    /// Shows `view` (what changed of it, when piped).
    fn show(&mut self, out: &mut Out, view: &RunView) -> Result<(), CliError> {
        match self {
            Screen::Table(drawn) => {
                let width = terminal_width().saturating_sub(1).max(20);
                let lines = table(view);
                if *drawn > 0 {
                    // Back to the table's first line, and clear below.
                    out.text(&format!("\x1b[{}A\r\x1b[J", *drawn))?;
                }
                for line in &lines {
                    let cut: String = line.chars().take(width).collect();
                    out.untrusted(&cut)?;
                    out.text("\n")?;
                }
                *drawn = lines.len();
            }
            Screen::Lines(seen) => {
                let head = run_line(view);
                if seen.get("").is_none_or(|l| *l != head) {
                    out.untrusted(&format!("{head}\n"))?;
                    seen.insert(String::new(), head);
                }
                for st in &view.stages {
                    let line = stage_line(st);
                    if seen.get(&st.id) != Some(&line) {
                        // A pending stage that never changed is not news.
                        if seen.contains_key(&st.id)
                            || st.turns > 0
                            || st.activity.is_some()
                            || st.status != crate::runlog::StageStatus::Pending
                        {
                            out.untrusted(&format!("{line}\n"))?;
                        }
                        seen.insert(st.id.clone(), line);
                    }
                }
            }
            Screen::Json(last) => {
                let json = serde_json::to_string(view).unwrap_or_default();
                if *last != json {
                    out.text(&format!("{json}\n"))?;
                    *last = json;
                }
            }
        }
        Ok(())
    }
}

/// `$0.0123`, or `unknown`.
fn cost(c: Option<f64>) -> String {
    c.map_or("unknown".to_owned(), usd)
}

/// `run <id> (<pipeline>): running`.
fn run_line(view: &RunView) -> String {
    format!(
        "run {} ({}): {}",
        view.run_id,
        view.pipeline,
        view.status.as_str()
    )
}

/// `code (coder): running, 1 turn, 120 tokens, cost $0.0001, now: bash {…}`.
fn stage_line(st: &StageView) -> String {
    let mut line = format!(
        "{} ({}): {}, {}, {}, cost {}",
        st.id,
        st.role,
        st.status.as_str(),
        plural(u64::from(st.turns), "turn", "turns"),
        plural(st.tokens.total(), "token", "tokens"),
        cost(st.cost_usd)
    );
    if let Some(a) = &st.activity {
        line.push_str(&format!(", now: {}", a.label()));
    }
    line
}

/// The terminal's table.
fn table(view: &RunView) -> Vec<String> {
    let mut lines = vec![
        format!(
            "{} — {}, cost {}",
            run_line(view),
            plural(view.tokens.total(), "token", "tokens"),
            cost(view.cost_usd)
        ),
        format!(
            "{:<12} {:<11} {:<10} {:>5} {:>9} {:>9}  now",
            "stage", "status", "role", "turns", "tokens", "cost"
        ),
    ];
    for st in &view.stages {
        lines.push(format!(
            "{:<12} {:<11} {:<10} {:>5} {:>9} {:>9}  {}",
            st.id,
            st.status.as_str(),
            st.role,
            st.turns,
            st.tokens.total(),
            cost(st.cost_usd),
            st.activity.as_ref().map(|a| a.label()).unwrap_or_default()
        ));
    }
    lines
}

/// The width of the terminal on stdout, or [`DEFAULT_WIDTH`].
fn terminal_width() -> usize {
    // SAFETY: `winsize` is a plain C struct; all-zero is a valid value.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: TIOCGWINSZ on stdout's descriptor writes one `winsize` into
    // the struct it is given, which lives for the call.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) };
    if rc == 0 && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        DEFAULT_WIDTH
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::live::Activity;
    use crate::runlog::{RunStatus, StageStatus, TokenCount};

    #[test]
    fn a_stage_line_says_status_counts_cost_and_the_current_call() {
        let st = StageView {
            id: "code".into(),
            role: "coder".into(),
            status: StageStatus::Running,
            turns: 1,
            tokens: TokenCount::new(100, 20),
            cost_usd: None,
            model: None,
            activity: Some(Activity::Model { turn: 2 }),
            agent_end: None,
        };
        assert_eq!(
            stage_line(&st),
            "code (coder): running, 1 turn, 120 tokens, cost unknown, now: model turn 2"
        );
        let view = RunView {
            run_id: "r1".into(),
            pipeline: "p".into(),
            status: RunStatus::Running,
            live: true,
            stages: vec![st],
            tokens: TokenCount::new(100, 20),
            cost_usd: Some(0.5),
        };
        let t = table(&view);
        assert_eq!(t[0], "run r1 (p): running — 120 tokens, cost $0.5000");
        assert!(
            t[2].starts_with("code ") && t[2].ends_with("  model turn 2"),
            "{t:?}"
        );
    }
}
