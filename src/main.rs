//! The `orch` binary: parse flags, set up logging and the runtime, run the
//! command, map its error to an exit code. Everything else is in the library.

use clap::Parser;
use orch::cli::{Cli, Command, dispatch};
use orch::exit;
use orch::ui::{status_line, stderr_color};

fn main() {
    // First, while single-threaded: secret values out of the environment
    // block that /proc/<orch>/environ shows.
    // SAFETY: nothing else runs yet.
    let secrets = unsafe { orch::sandbox::take_secrets_from_environ() };
    // One malloc arena for the whole process. glibc gives threads arenas of
    // their own (up to eight per core), and memory freed in one is never
    // reused by another: the git steps of a run (status walk, lane checkout,
    // stage commit, diffs) run on different blocking threads, so each left
    // its peak behind in its own arena and the peaks added up (117 MB at
    // 100,000 files instead of 64 MB). orch's threads mostly wait on I/O, so
    // sharing one arena costs nothing measurable.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: still single-threaded; mallopt only changes malloc's tuning.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
    // SAFETY: still single-threaded; libgit2's global options are set once.
    if let Err(e) = unsafe { orch::git::limit_memory() } {
        // Only memory is at stake: say so and go on.
        status_line(&format!("orch: warning: failed to {e}"));
    }
    let cli = Cli::parse();
    let inherited = match &cli.command {
        // SAFETY: still single-threaded; called once.
        Command::Agent(a) => unsafe { a.take_inherited_secrets() },
        _ => Ok(Vec::new()),
    };
    let inherited = match inherited {
        Ok(v) => v,
        Err(e) => {
            status_line(&format!("error: {e}"));
            std::process::exit(exit::INTERNAL);
        }
    };
    // The variables that are orch's settings, read once for the library
    // (after the inherited secrets are set, so the read is of the final
    // environment).
    orch::environment::install(orch::cli::read_environment());
    // A token from `gh auth token` (none in the environment) is orch's
    // secret too: known before anything is recorded.
    let gh_token = orch::forge::startup_token(cli.command.needs_forge_token());
    let home = orch::environment::current().home();
    orch::secrets::register_secrets(
        secrets
            .redactable_values()
            .map(|v| v.to_string_lossy().into_owned())
            .chain(inherited)
            .chain(gh_token)
            .chain(
                home.map(|h| orch::sandbox::home_secrets(&h))
                    .unwrap_or_default(),
            ),
    );
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ORCH_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        // ANSI colour only on a terminal and without NO_COLOR: a log file or a
        // pipe gets plain text.
        .with_ansi(stderr_color())
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        // A stage's future nests deep (a review's verify gate runs the agent
        // again inside it): debug builds' poll frames outgrew tokio's 2 MiB
        // default there (finish_text's reviewer-with-verify tests). Only
        // touched pages count, so this costs no memory where it is not used.
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            status_line(&format!("error: failed to start the async runtime: {e}"));
            std::process::exit(exit::INTERNAL);
        }
    };
    let code = match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            status_line(&format!("error: {e}"));
            e.exit_code()
        }
    };
    // Tool processes were already reaped; don't wait for idle blocking threads.
    runtime.shutdown_background();
    log_peak_memory();
    std::process::exit(code);
}

/// Logs (target `orch::usage`, debug) the peak RSS of this process and of
/// the largest child it reaped (a `git status`, a tool), which `wait4` from
/// outside folds into one number: `ORCH_LOG=orch::usage=debug`.
fn log_peak_memory() {
    let peak = |who: libc::c_int| {
        // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `usage` is writable and outlives the call.
        (unsafe { libc::getrusage(who, &mut usage) } == 0).then_some(usage.ru_maxrss)
    };
    tracing::debug!(
        target: "orch::usage",
        peak_rss_kb = peak(libc::RUSAGE_SELF),
        children_peak_rss_kb = peak(libc::RUSAGE_CHILDREN),
        "peak memory"
    );
}
