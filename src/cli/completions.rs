//! `orch completions <shell>`: a completion script for bash, zsh, fish,
//! elvish or PowerShell on stdout, generated from the command line's own
//! definition (`clap_complete`), so it never falls behind a new flag.

use super::error::CliError;
use super::output::{Out, ignore_closed};
use crate::exit;
use clap_complete::Shell;

/// Arguments of `orch completions`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Install, e.g.:\n  orch completions bash > ~/.local/share/bash-completion/completions/orch\n  orch completions zsh > \"${fpath[1]}/_orch\"\n  orch completions fish > ~/.config/fish/completions/orch.fish"
)]
pub struct CompletionsArgs {
    /// The shell
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `orch completions`: the script for `command`, the command line's
/// definition (the caller passes it, so this file does not import it).
pub(super) fn cmd_completions(
    args: CompletionsArgs,
    mut command: clap::Command,
) -> Result<i32, CliError> {
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "orch", &mut script);
    let mut out = Out::stdout();
    let written = out.text(&String::from_utf8_lossy(&script));
    ignore_closed(written.and_then(|()| out.finish()))?;
    Ok(exit::OK)
}
