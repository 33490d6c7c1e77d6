//! The plan: the first-class object the model hands orch through the `plan`
//! tool — ordered steps, each a command, why, its risk and a check — with
//! the rules a plan must pass before orch shows it to anyone.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::readonly::not_read_only;
use crate::policy::{BashPolicy, Decision, secret_path_in};

/// Most steps in one plan.
pub(crate) const MAX_STEPS: usize = 30;
/// Longest a step may run when it sets no `timeout_secs`.
pub(crate) const DEFAULT_STEP_TIMEOUT_SECS: u64 = 600;
/// Largest `timeout_secs` a step may ask for.
pub(crate) const MAX_STEP_TIMEOUT_SECS: u64 = 3600;

/// How much a step may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Risk {
    /// Only reads (runs without asking).
    Read,
    /// Installs for the user or the project (confirmed).
    Install,
    /// Changes the system (`sudo`, system packages; confirmed).
    System,
}

impl Risk {
    fn parse(s: &str) -> Option<Risk> {
        match s {
            "read" => Some(Risk::Read),
            "install" => Some(Risk::Install),
            "system" => Some(Risk::System),
            _ => None,
        }
    }

    /// The spelling in the plan.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Risk::Read => "read",
            Risk::Install => "install",
            Risk::System => "system",
        }
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Step {
    /// The shell command (`bash -c`), run in the setup's directory.
    pub(crate) command: String,
    /// Why the step is needed, for the user.
    pub(crate) why: String,
    /// How much it changes.
    pub(crate) risk: Risk,
    /// A command whose exit 0 shows the step worked (its output is the
    /// "version now" of the report).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) check: Option<String>,
    /// The step's time limit.
    pub(crate) timeout_secs: u64,
    /// Whether the command uses `sudo` (only allowed for `system` steps).
    #[serde(default)]
    pub(crate) sudo: bool,
}

/// An ordered plan and what the user should do after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub(crate) struct Plan {
    /// The steps, in order.
    pub(crate) steps: Vec<Step>,
    /// What to do afterwards (e.g. "open a new shell for PATH").
    #[serde(default)]
    pub(crate) next: Vec<String>,
}

/// The `plan` tool's JSON Schema.
pub(crate) fn schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "steps": {
                "type": "array",
                "description": "Ordered steps from the detected state to the goal.",
                "items": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "string", "description": "bash command, run in the current directory"},
                        "why": {"type": "string"},
                        "risk": {"type": "string", "enum": ["read", "install", "system"]},
                        "check": {"type": "string", "description": "command that exits 0 when the step worked; print the version"},
                        "timeout_secs": {"type": "integer"}
                    },
                    "required": ["command", "why", "risk", "check"]
                }
            },
            "next": {"type": "array", "items": {"type": "string"}, "description": "what the user does afterwards"}
        },
        "required": ["steps"]
    })
}

/// Parses and checks the `plan` tool's arguments; the error names the step
/// and what to change, for the model.
pub(crate) fn parse(args: &Value) -> Result<Plan, String> {
    let steps = args
        .get("steps")
        .and_then(Value::as_array)
        .ok_or("`steps` must be an array of {command, why, risk, check}")?;
    if steps.len() > MAX_STEPS {
        return Err(format!("at most {MAX_STEPS} steps, got {}", steps.len()));
    }
    let deny = BashPolicy::default();
    let mut out = Vec::new();
    for (i, s) in steps.iter().enumerate() {
        let n = i + 1;
        let text = |key: &str| {
            s.get(key)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        let command = text("command").ok_or(format!("step {n}: `command` is missing or empty"))?;
        let why = text("why").unwrap_or_default();
        let risk_text = text("risk").unwrap_or_default();
        let risk = Risk::parse(&risk_text).ok_or(format!(
            "step {n}: `risk` must be read, install or system, not `{risk_text}`"
        ))?;
        let check = text("check");
        if risk != Risk::Read && check.is_none() {
            return Err(format!(
                "step {n}: an {} step needs a `check` command that shows it worked",
                risk.as_str()
            ));
        }
        let timeout_secs = match s.get("timeout_secs") {
            None | Some(Value::Null) => DEFAULT_STEP_TIMEOUT_SECS,
            Some(v) => v
                .as_u64()
                .filter(|t| (1..=MAX_STEP_TIMEOUT_SECS).contains(t))
                .ok_or(format!(
                    "step {n}: `timeout_secs` must be 1..={MAX_STEP_TIMEOUT_SECS}"
                ))?,
        };
        for (what, cmd) in [("command", Some(&command)), ("check", check.as_ref())] {
            let Some(cmd) = cmd else { continue };
            let which = if what == "command" {
                String::new()
            } else {
                format!(": its check `{cmd}`")
            };
            if let Some(error) = shell_syntax_error(cmd) {
                return Err(format!(
                    "step {n} `{command}`{which} does not parse as a shell command (`bash -n`: {error}); a command that cannot run can neither do nor check anything"
                ));
            }
            if let Decision::Deny(reason) = deny.decide(cmd) {
                return Err(format!("step {n} `{command}`{which} is refused: {reason}"));
            }
            if let Some(why) = secret_path_in(cmd) {
                return Err(format!(
                    "step {n} `{command}`{which} is refused: {why}; setup steps never read or write keys, credentials or shell startup files, sudo or not (put a change to a startup file in `next` for the user)"
                ));
            }
        }
        let sudo = uses_sudo(&command);
        if sudo && risk != Risk::System {
            return Err(format!(
                "step {n}: `{command}` uses sudo, so its risk must be `system` (the user confirms it)"
            ));
        }
        if risk == Risk::Read
            && let Some(why) = not_read_only(&command)
        {
            return Err(format!(
                "step {n} is marked `read` but is not read-only ({why}): mark it install or system"
            ));
        }
        out.push(Step {
            command,
            why,
            risk,
            check,
            timeout_secs,
            sudo,
        });
    }
    let next = args
        .get("next")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Ok(Plan { steps: out, next })
}

/// What `bash -n` (the shell the steps run in, reading without running)
/// says of `command` when it does not parse; `None` when it parses, or
/// when bash could not be asked (the step then fails as it would have).
pub(crate) fn shell_syntax_error(command: &str) -> Option<String> {
    let out = std::process::Command::new("bash")
        .args(["-n", "-c", command])
        .env_clear()
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    if out.status.success() {
        return None;
    }
    let said = String::from_utf8_lossy(&out.stderr);
    let said = said.trim().trim_start_matches("bash: -c: ");
    Some(crate::text::cap_bytes(said, 300))
}

/// Whether any simple command of `command` is run through `sudo`/`doas`.
fn uses_sudo(command: &str) -> bool {
    crate::policy::simple_commands(command).is_none_or(|units| {
        units.iter().any(|u| {
            u.raw
                .iter()
                .any(|w| matches!(w.rsplit('/').next(), Some("sudo" | "doas")))
        })
    })
}

/// The plan as the user sees it: a numbered list from `first` (1-based
/// numbers are the steps' positions).
pub(crate) fn render(plan: &Plan, title: &str) -> String {
    let mut out = format!(
        "{title} ({} step{}):\n",
        plan.steps.len(),
        if plan.steps.len() == 1 { "" } else { "s" }
    );
    for (i, s) in plan.steps.iter().enumerate() {
        out.push_str(&format!(
            "  {}. [{}] {}\n",
            i + 1,
            s.risk.as_str(),
            s.command
        ));
        if !s.why.is_empty() {
            out.push_str(&format!("     why: {}\n", s.why));
        }
        if let Some(c) = &s.check {
            out.push_str(&format!("     check: {c}\n"));
        }
    }
    if plan.steps.is_empty() {
        out.push_str("  (nothing to do)\n");
    }
    for n in &plan.next {
        out.push_str(&format!("  next: {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn step(command: &str, risk: &str) -> Value {
        json!({"command": command, "why": "w", "risk": risk, "check": "true"})
    }

    #[test]
    fn a_good_plan_parses() {
        let p = parse(&json!({"steps": [step("python3 --version", "read"), step("python3 -m venv v", "install")], "next": ["source v/bin/activate"]})).unwrap();
        assert_eq!(p.steps.len(), 2);
        assert_eq!(p.steps[1].risk, Risk::Install);
        assert_eq!(p.next, ["source v/bin/activate"]);
        assert!(render(&p, "Plan").contains("  2. [install] python3 -m venv v"));
    }

    #[test]
    fn bad_plans_are_refused_with_the_step() {
        for (args, want) in [
            (
                json!({"steps": [step("touch x", "read")]}),
                "step 1 is marked `read`",
            ),
            (
                json!({"steps": [step("sudo apt-get install -y x", "install")]}),
                "uses sudo",
            ),
            (json!({"steps": [step("rm -rf /", "system")]}), "refused"),
            (json!({"steps": [step("ls", "maybe")]}), "`risk` must be"),
            (
                json!({"steps": [{"command": "pip install x", "risk": "install"}]}),
                "needs a `check`",
            ),
            (json!({"step": []}), "`steps` must be"),
        ] {
            let e = parse(&args).unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        let p = parse(&json!({"steps": [step("sudo apt-get install -y x", "system")]})).unwrap();
        assert!(p.steps[0].sudo);
    }
    #[test]
    fn a_command_or_check_that_does_not_parse_is_refused_with_what_bash_said() {
        // The 1.5B model's check after its plan was sent back (docs/setup.md,
        // 2026-12-06): a stray quote, so it exits 2 before and after the
        // step alike and verifies nothing.
        let check = "python3 -c 'import requests' && pip list --format=freeze'";
        let e = parse(&json!({"steps": [{"command": "pip install -r requirements.txt", "why": "w", "risk": "install", "check": check}]}))
            .unwrap_err();
        assert!(
            e.starts_with("step 1 `pip install -r requirements.txt`: its check `python3 -c")
                && e.contains("does not parse as a shell command (`bash -n`: line 1: unexpected EOF while looking for matching")
                && !e.contains("bash: -c"),
            "{e}"
        );
        let e = parse(&json!({"steps": [step("echo $((1 +", "install")]})).unwrap_err();
        assert!(e.starts_with("step 1 `echo $((1 +` does not parse"), "{e}");
        // Parsing runs nothing.
        let dir = tempfile::tempdir().unwrap();
        let canary = dir.path().join("ran");
        let cmd = format!("touch {}", canary.display());
        parse(&json!({"steps": [{"command": cmd, "why": "w", "risk": "install", "check": cmd}]}))
            .unwrap();
        assert!(!canary.exists());
    }
}
