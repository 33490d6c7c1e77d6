//! One setup from goal to report: the model conversation (reconnaissance
//! tools until a `plan`), the printed plan, confirmations, the steps and
//! their checks, one recovery per failing step, the report; and the same
//! from a record (`--resume`).

use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

mod precheck;
mod suggest;

use super::event::{self, SetupEvent};
use super::options::{Confirm, Console, KILL_STEP_VERIFIED, SetupOptions};
use super::plan::{self, Plan, Risk};
use super::record::{SetupRecord, SetupState, StepState};
use super::status::{CheckBefore, StepStatus};
use super::steps::{self, Ran, Sandboxing};
use super::{detect, readonly};
use crate::llm::{
    ChatMessage, ChatModel, ChatRequest, LlmError, Sampling, ToolCall, ToolChoice, ToolDef,
};
use crate::policy::{BashPolicy, Decision, secret_path_in};

/// The agent path of setup requests (`X-Orch-Agent`).
const AGENT_PATH: &str = "setup";
/// Default and largest time of a reconnaissance `run_command`.
const RECON_TIMEOUT: Duration = Duration::from_secs(120);
const RECON_MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Characters of a tool result logged in `log.jsonl`.
const LOGGED_RESULT_CHARS: usize = 2000;

/// How a setup ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SetupEnd {
    /// `--plan-only`: the plan is printed and saved; nothing ran.
    Planned,
    /// Every step ran and its check passed.
    Done,
    /// Steps were not confirmed (headless without `--yes`, or the user
    /// said no or quit); the text says which.
    NotConfirmed(String),
    /// A step failed after its one recovery, or the model made no usable plan.
    Failed(String),
}

/// A finished setup.
#[derive(Debug, Clone)]
pub(crate) struct SetupOutcome {
    /// The setup id (for `--resume`).
    pub(crate) id: String,
    /// The record directory.
    pub(crate) dir: std::path::PathBuf,
    /// How it ended.
    pub(crate) end: SetupEnd,
    /// The plan, when the model made one.
    pub(crate) plan: Option<Plan>,
    /// The command line that continues this setup (or, for `--lane`, runs
    /// it again) with the approvals it was given.
    pub(crate) resume_hint: String,
}

/// A setup that could not go on: the model server or the record failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetupError {
    /// The model server.
    #[error(transparent)]
    Model(#[from] LlmError),
    /// The setup record, the sandbox, or bad input (the message says which).
    #[error("{0}")]
    Other(String),
    /// A resume of a setup that cannot be resumed (the message says why).
    #[error("{0}")]
    Invalid(String),
}

/// Runs a new setup, or resumes `opts.resume`.
pub(crate) async fn run_setup(
    opts: SetupOptions,
    model: Arc<dyn ChatModel>,
    console: &dyn Console,
) -> Result<SetupOutcome, SetupError> {
    let tmp = tempfile::Builder::new()
        .prefix("orch-setup-")
        .tempdir()
        .map_err(|e| SetupError::Other(format!("failed to create a temp dir: {e}")))?;
    // The setup role's sampling keys reach every setup request (a backend
    // without such settings, the replay model, keeps its own).
    let model = if opts.sampling.is_empty() {
        model
    } else {
        model.with_sampling(&opts.sampling).unwrap_or(model)
    };
    let mut s = match &opts.resume {
        Some(id) => Session::resume(id, opts.clone(), model, console, tmp)?,
        None => Session::start(opts.clone(), model, console, tmp)?,
    };
    let end = match s.drive().await {
        Ok(end) => end,
        Err(e) => {
            // The record says how it ended even when the model server did it.
            s.state.status = "failed".into();
            let _ = s.save_state();
            s.record.log(&SetupEvent::End(event::End {
                status: "failed".into(),
                error: Some(e.to_string()),
            }));
            return Err(e);
        }
    };
    s.state.status = match &end {
        SetupEnd::Planned => "planned",
        SetupEnd::Done => "done",
        SetupEnd::NotConfirmed(_) => "not_confirmed",
        SetupEnd::Failed(_) => "failed",
    }
    .to_owned();
    s.save_state()?;
    s.record.log(&SetupEvent::End(event::End {
        status: s.state.status.clone(),
        error: None,
    }));
    let given = if s.opts.yes_system {
        " --yes-system"
    } else if s.opts.yes {
        " --yes"
    } else {
        ""
    };
    Ok(SetupOutcome {
        id: s.state.id.clone(),
        dir: s.record.dir().to_path_buf(),
        end,
        plan: s.plan.clone(),
        resume_hint: s.resume_hint(given),
    })
}

/// A plan the model made and what each step's check did before its step.
type NewSteps = (Plan, Vec<Option<CheckBefore>>);

struct Session<'a> {
    opts: SetupOptions,
    model: Arc<dyn ChatModel>,
    console: &'a dyn Console,
    record: SetupRecord,
    state: SetupState,
    plan: Option<Plan>,
    messages: Vec<ChatMessage>,
    tmp: tempfile::TempDir,
    confirm_all: bool,
    /// The model answered in prose where a tool call was needed: from the
    /// re-ask on, requests send `tool_choice: "required"` (unless the role
    /// set its own `tool_choice`).
    force_tool_call: bool,
    /// `model` sending `tool_choice: "required"`; `None` when the backend
    /// has no such setting (the replay model).
    required_model: Option<Arc<dyn ChatModel>>,
    /// How requests ask for calls (the profile's `tool_calling`): under
    /// `auto`, a call written as text or a prose answer switches the
    /// following requests to one call under a JSON schema, as an agent's
    /// turns do (src/agent/calling.rs).
    calling: crate::llm::constrained::CallState,
}

/// `model` with `tool_choice: "required"` (its other settings kept).
fn with_required(model: &Arc<dyn ChatModel>) -> Option<Arc<dyn ChatModel>> {
    model.with_sampling(&Sampling {
        tool_choice: Some(ToolChoice::Required),
        ..Sampling::default()
    })
}

fn other(e: String) -> SetupError {
    SetupError::Other(e)
}

impl<'a> Session<'a> {
    fn start(
        opts: SetupOptions,
        model: Arc<dyn ChatModel>,
        console: &'a dyn Console,
        tmp: tempfile::TempDir,
    ) -> Result<Self, SetupError> {
        let id = crate::ids::RunId::new().into_string();
        let record = SetupRecord::create(&id, opts.secrets.clone()).map_err(other)?;
        let state = SetupState {
            id: id.clone(),
            goal: opts.goal.clone(),
            cwd: opts.cwd.clone(),
            status: "planning".into(),
            rounds: 0,
            plan_version: 0,
            steps: Vec::new(),
            recovered: Vec::new(),
            sent_back: Vec::new(),
            model: opts.model.clone(),
            lane: opts.lane,
        };
        let found = manifests(&opts.cwd);
        let messages = first_messages(&opts, &found);
        console.say(&format!(
            "setup {id}: {}\nmodel: {}\nrecord: {}",
            opts.goal,
            model.label(),
            record.dir().display()
        ));
        for (name, why) in &found.not_shown {
            console.say(&format!("{name}: not shown to the model ({why})"));
        }
        record.log(&SetupEvent::Start(event::Start {
            goal: opts.goal.clone(),
            cwd: opts.cwd.clone(),
            plan_only: opts.plan_only,
            yes: opts.yes,
            yes_system: opts.yes_system,
            interactive: opts.interactive,
            house_rules: opts.house_rules.iter().map(|(p, _)| p.clone()).collect(),
            manifests: found.shown.into_iter().map(|(n, _)| n).collect(),
            manifests_not_shown: found
                .not_shown
                .into_iter()
                .map(|(n, why)| format!("{n}: {why}"))
                .collect(),
        }));
        let s = Self {
            opts,
            console,
            record,
            state,
            plan: None,
            messages,
            tmp,
            confirm_all: false,
            force_tool_call: false,
            required_model: with_required(&model),
            calling: crate::llm::constrained::CallState::new(model.tool_calling()),
            model,
        };
        s.save_state()?;
        Ok(s)
    }

    fn resume(
        id: &str,
        mut opts: SetupOptions,
        model: Arc<dyn ChatModel>,
        console: &'a dyn Console,
        tmp: tempfile::TempDir,
    ) -> Result<Self, SetupError> {
        let record = SetupRecord::open(id, opts.secrets.clone()).map_err(other)?;
        let mut state = record.read_state().map_err(other)?;
        if state.lane {
            return Err(SetupError::Invalid(format!(
                "setup {id} prepared a scratch lane, which is gone: a `--lane` setup is not resumed; run `orch setup --lane` again"
            )));
        }
        // The flags given now (merged with the recorded ones by the
        // command line) are what later resumes reuse.
        if opts.model.is_some() {
            state.model = opts.model.clone();
            record.write_state(&state).map_err(other)?;
        }
        let plan = record.read_plan().ok();
        if let Some(p) = &plan {
            state.steps.resize(p.steps.len(), StepState::default());
        }
        opts.goal = state.goal.clone();
        opts.cwd = state.cwd.clone();
        let mut messages = record.read_transcript();
        if messages.is_empty() {
            messages = first_messages(&opts, &manifests(&opts.cwd));
        }
        console.say(&format!(
            "resuming setup {id}: {}\nrecord: {}",
            state.goal,
            record.dir().display()
        ));
        record.log(&SetupEvent::Resume(event::Resume {
            status: state.status.clone(),
        }));
        Ok(Self {
            opts,
            console,
            record,
            state,
            plan,
            messages,
            tmp,
            confirm_all: false,
            force_tool_call: false,
            required_model: with_required(&model),
            calling: crate::llm::constrained::CallState::new(model.tool_calling()),
            model,
        })
    }

    fn save_state(&self) -> Result<(), SetupError> {
        self.record.write_state(&self.state).map_err(other)
    }

    async fn drive(&mut self) -> Result<SetupEnd, SetupError> {
        let plan = match self.plan.clone() {
            Some(p) => {
                self.console.say(plan::render(&p, "Plan").trim_end());
                p
            }
            None => match self.converse(0).await? {
                Ok((p, checks)) => {
                    self.adopt(p.clone(), &checks, 0, "Plan")?;
                    p
                }
                Err(why) => return Ok(SetupEnd::Failed(why)),
            },
        };
        if self.opts.plan_only {
            self.console.say(&format!(
                "plan only: nothing was changed. The plan is in {}",
                self.record.dir().join("plan.json").display()
            ));
            return Ok(SetupEnd::Planned);
        }
        self.plan = Some(plan);
        self.execute().await
    }

    /// Makes `new` the plan from step `from` on (earlier steps are kept),
    /// prints it and records it.
    /// `checks` says what each new step's check did before the step.
    fn adopt(
        &mut self,
        new: Plan,
        checks: &[Option<CheckBefore>],
        from: usize,
        title: &str,
    ) -> Result<(), SetupError> {
        let mut plan = self.plan.clone().unwrap_or_default();
        plan.steps.truncate(from);
        plan.steps.extend(new.steps);
        if !new.next.is_empty() || plan.next.is_empty() {
            plan.next = new.next;
        }
        self.state.steps.truncate(from);
        self.state
            .steps
            .resize(plan.steps.len(), StepState::default());
        for (st, c) in self.state.steps.iter_mut().skip(from).zip(checks) {
            st.check_before = *c;
        }
        self.state.plan_version += 1;
        self.state.status = "planned".into();
        self.record
            .write_plan(&plan, self.state.plan_version)
            .map_err(other)?;
        self.save_state()?;
        self.record.log(&SetupEvent::Plan(event::NewPlan {
            version: self.state.plan_version,
            from_step: from + 1,
            plan: plan.clone(),
        }));
        self.console.say(plan::render(&plan, title).trim_end());
        self.warn_passing_checks(&plan);
        self.plan = Some(plan);
        Ok(())
    }

    fn first_unverified(&self) -> usize {
        self.state
            .steps
            .iter()
            .position(|s| !s.status.done())
            .unwrap_or(self.state.steps.len())
    }

    /// Whether `step` may run without asking: read steps always; install
    /// steps with `--yes` (or `a` at a prompt); system steps only with
    /// `--yes-system` — `--yes` approves project-local steps only.
    fn approved(&self, step: &plan::Step) -> bool {
        if is_system(step) {
            self.opts.yes_system
        } else {
            step.risk == Risk::Read || self.opts.yes || self.opts.yes_system || self.confirm_all
        }
    }

    /// The flags that approve what `steps` need: `--yes`, `--yes-system`.
    fn approving_flags<'s>(&self, steps: impl Iterator<Item = &'s plan::Step>) -> String {
        let (mut install, mut system) = (false, false);
        for st in steps.filter(|st| !self.approved(st)) {
            if is_system(st) {
                system = true;
            } else {
                install = true;
            }
        }
        match (install, system) {
            (_, true) => " --yes-system".to_owned(),
            (true, false) => " --yes".to_owned(),
            (false, false) => String::new(),
        }
    }

    async fn execute(&mut self) -> Result<SetupEnd, SetupError> {
        let Some(plan) = self.plan.clone() else {
            return Ok(SetupEnd::Failed("no plan".into()));
        };
        if let Some(end) = self.headless_refusal(&plan, self.first_unverified()) {
            return Ok(end);
        }
        self.state.status = "running".into();
        self.save_state()?;
        let mut i = self.first_unverified();
        let mut skipped = Vec::new();
        while let Some(step) = self.plan.as_ref().and_then(|p| p.steps.get(i)).cloned() {
            let total = self.plan.as_ref().map_or(0, |p| p.steps.len());
            self.console.say(&format!(
                "\n[{}/{total}] {} step{}",
                i + 1,
                step.risk.as_str(),
                if step.why.is_empty() {
                    String::new()
                } else {
                    format!(": {}", step.why)
                }
            ));
            if !self.approved(&step) {
                // A system step is asked for on its own, always: `a` at an
                // install step does not cover it, and `a` here means `y`.
                let system = is_system(&step);
                let (what, choices) = if step.sudo {
                    (
                        " (a system step: it uses sudo and runs outside the sandbox)",
                        "[y/n/q]",
                    )
                } else if system {
                    (
                        " (a system step: it may write /usr, /etc, /var, …)",
                        "[y/n/q]",
                    )
                } else {
                    ("", "[y/n/a(ll)/q]")
                };
                match self.console.confirm(&format!(
                    "run step {} `{}`{what}? {choices}",
                    i + 1,
                    step.command
                )) {
                    Some(Confirm::Yes) => {}
                    Some(Confirm::All) if !system => self.confirm_all = true,
                    Some(Confirm::All) => {}
                    Some(Confirm::No) => {
                        self.console
                            .say(&format!("skipped step {} (not confirmed)", i + 1));
                        self.state.steps[i].status = StepStatus::Skipped;
                        self.save_state()?;
                        self.record
                            .log(&SetupEvent::Step(event::StepEvent::Skipped {
                                step: i + 1,
                                status: StepStatus::Skipped,
                            }));
                        skipped.push(i + 1);
                        i += 1;
                        continue;
                    }
                    Some(Confirm::Quit) => {
                        return Ok(SetupEnd::NotConfirmed(format!(
                            "stopped by the user at step {}",
                            i + 1
                        )));
                    }
                    None => {
                        return Ok(SetupEnd::NotConfirmed(format!(
                            "step {} needs confirmation and there is no terminal: run `{}`",
                            i + 1,
                            self.resume_hint(&self.approving_flags(std::iter::once(&step)))
                        )));
                    }
                }
            }
            let timeout = Duration::from_secs(step.timeout_secs);
            // The deny list again: a resumed plan may come from an edited file.
            if let Decision::Deny(reason) = BashPolicy::default().decide(&step.command) {
                return Ok(SetupEnd::Failed(format!(
                    "step {} is refused: {reason}",
                    i + 1
                )));
            }
            if let Some(why) = std::iter::once(&step.command)
                .chain(&step.check)
                .find_map(|c| secret_path_in(c))
            {
                return Ok(SetupEnd::Failed(format!(
                    "step {} is refused: {why}; setup steps never read or write keys, credentials or shell startup files",
                    i + 1
                )));
            }
            let sandboxing = if step.sudo {
                Sandboxing::Unsandboxed
            } else if self.opts.lane && step.risk == Risk::Install {
                Sandboxing::Lane
            } else {
                Sandboxing::Step(step.risk)
            };
            let passed_before = match self.check_before_step(i, &step).await? {
                precheck::BeforeStep::Satisfied => {
                    i += 1;
                    continue;
                }
                precheck::BeforeStep::PassedUnproven => true,
                precheck::BeforeStep::Failed => false,
            };
            let ran = self
                .run_shown("", &step.command, timeout, sandboxing)
                .await?;
            let mut check_ran = None;
            if ran.ok()
                && let Some(check) = &step.check
            {
                let c = self
                    .run_shown("check ", check, RECON_TIMEOUT, Sandboxing::ReadOnly)
                    .await?;
                check_ran = Some(c);
            }
            let passed = ran.ok() && check_ran.as_ref().is_none_or(Ran::ok);
            // A check that passed before the step too shows nothing.
            let verified = passed && !passed_before;
            let st = &mut self.state.steps[i];
            st.exit_code = ran.exit_code;
            st.check_exit_code = check_ran.as_ref().and_then(|c| c.exit_code);
            st.check_line = check_ran.as_ref().and_then(|c| first_line(&c.output));
            st.status = match (passed, passed_before) {
                (true, false) => StepStatus::Verified,
                (true, true) => StepStatus::Unverified,
                (false, _) => StepStatus::Failed,
            };
            self.save_state()?;
            self.record.log(&SetupEvent::Step(event::StepEvent::Ran {
                step: i + 1,
                command: step.command.clone(),
                risk: step.risk,
                exit_code: ran.exit_code,
                timed_out: ran.timed_out,
                sandbox: ran.sandbox.clone(),
                output: ran.output.clone(),
                check: step.check.clone(),
                check_exit_code: check_ran.as_ref().and_then(|c| c.exit_code),
                check_output: check_ran.as_ref().map(|c| c.output.clone()),
                verified,
                check_passed_before: passed && passed_before,
            }));
            if verified {
                self.console.say(&format!("step {} verified", i + 1));
                crate::killpoint::reached(KILL_STEP_VERIFIED);
                i += 1;
                continue;
            }
            if passed {
                self.console.say(&format!(
                    "step {} ran, but its check `{}` passed before the step too: it verifies nothing (not verified)",
                    i + 1,
                    step.check.as_deref().unwrap_or_default()
                ));
                i += 1;
                continue;
            }
            self.console.say(&format!("step {} failed", i + 1));
            if self.state.recovered.contains(&i) {
                return Ok(SetupEnd::Failed(format!(
                    "step {} failed again after its one retry or plan change: `{}`",
                    i + 1,
                    step.command
                )));
            }
            self.state.recovered.push(i);
            self.save_state()?;
            self.messages.push(ChatMessage::user(failure_message(
                i,
                &step,
                &ran,
                check_ran.as_ref(),
                timeout,
            )));
            let (new, checks) = match self.converse(i).await? {
                Ok(p) => p,
                Err(why) => {
                    return Ok(SetupEnd::Failed(format!("step {} failed and {why}", i + 1)));
                }
            };
            self.adopt(new, &checks, i, "Changed plan")?;
            let Some(plan) = self.plan.clone() else {
                return Ok(SetupEnd::Failed("no plan".into()));
            };
            if let Some(end) = self.headless_refusal(&plan, i) {
                return Ok(end);
            }
            let unapproved = plan.steps.iter().skip(i).any(|s| !self.approved(s));
            if unapproved {
                match self.console.confirm("run the changed plan? [y/n/a(ll)/q]") {
                    Some(Confirm::Yes) => {}
                    Some(Confirm::All) => self.confirm_all = true,
                    _ => {
                        return Ok(SetupEnd::NotConfirmed(
                            "the changed plan was not confirmed".into(),
                        ));
                    }
                }
            }
        }
        let report = self.report(&skipped);
        self.console.say(&report);
        self.record.write_report(&report).map_err(other)?;
        if skipped.is_empty() {
            Ok(SetupEnd::Done)
        } else {
            Ok(SetupEnd::NotConfirmed(format!(
                "step(s) {} were skipped",
                skipped
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    }

    /// Headless, a plan with steps from `from` on that no flag approves
    /// (install steps without `--yes`, system steps without
    /// `--yes-system`) runs nothing at all; the refusal names each such
    /// step and the flag it needs.
    fn headless_refusal(&self, plan: &Plan, from: usize) -> Option<SetupEnd> {
        if self.opts.interactive {
            return None;
        }
        let pending: Vec<(usize, &plan::Step)> = plan
            .steps
            .iter()
            .enumerate()
            .skip(from)
            .filter(|(_, s)| !self.approved(s))
            .collect();
        if pending.is_empty() {
            return None;
        }
        let numbers = |system: bool| -> Vec<String> {
            pending
                .iter()
                .filter(|(_, s)| is_system(s) == system)
                .map(|(n, _)| (n + 1).to_string())
                .collect()
        };
        let mut parts = Vec::new();
        let install = numbers(false);
        if !install.is_empty() {
            parts.push(format!(
                "step(s) {} change the system and need confirmation, and there is no terminal",
                install.join(", ")
            ));
        }
        let system = numbers(true);
        if !system.is_empty() {
            let commands: Vec<String> = pending
                .iter()
                .filter(|(_, s)| is_system(s))
                .map(|(n, s)| format!("{}. `{}`", n + 1, s.command))
                .collect();
            parts.push(format!(
                "step(s) {} are system steps ({}): --yes approves project-local steps only; system steps run with --yes-system, or on a terminal where each is confirmed on its own",
                system.join(", "),
                commands.join("; ")
            ));
        }
        let flags = self.approving_flags(pending.iter().map(|(_, s)| *s));
        let why = format!(
            "{}: nothing was run. Run `{}` to run them, or run it on a terminal",
            parts.join("; "),
            self.resume_hint(&flags)
        );
        self.console.say(&why);
        Some(SetupEnd::NotConfirmed(why))
    }

    /// The command line that resumes this setup with `flags` (the model
    /// settings come from the record).
    fn resume_hint(&self, flags: &str) -> String {
        match &self.opts.rerun {
            Some((before, after)) => format!("{before}{flags}{after}"),
            None => format!("orch setup --resume {}{flags}", self.state.id),
        }
    }

    /// Prints `{prefix}$ command`, runs it, prints its output and status.
    async fn run_shown(
        &self,
        prefix: &str,
        command: &str,
        timeout: Duration,
        sandboxing: Sandboxing,
    ) -> Result<Ran, SetupError> {
        self.console.say(&format!("{prefix}$ {command}"));
        let mut ran = steps::run(
            command,
            &self.opts.cwd,
            self.tmp.path(),
            timeout,
            sandboxing,
        )
        .await
        .map_err(other)?;
        // What a command prints goes to the user, the record and the model:
        // never a known secret or a private key.
        ran.output = steps::redact(&ran.output, &self.opts.secrets);
        self.show(&ran, timeout);
        Ok(ran)
    }

    fn show(&self, ran: &Ran, timeout: Duration) {
        let mut text = ran.output.clone();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[{}]", ran.status(timeout)));
        self.console.say(&text);
    }

    fn report(&self, skipped: &[usize]) -> String {
        let mut out = format!("\nReport: setup {}: {}\n", self.state.id, self.state.goal);
        let plan = self.plan.clone().unwrap_or_default();
        let changed: Vec<String> = plan
            .steps
            .iter()
            .zip(&self.state.steps)
            .enumerate()
            .filter(|(_, (s, st))| s.risk != Risk::Read && st.status == StepStatus::Verified)
            .map(|(i, (s, _))| format!("  {}. {}\n", i + 1, s.command))
            .collect();
        out.push_str("Changed:\n");
        if changed.is_empty() {
            out.push_str("  nothing\n");
        }
        out.extend(changed);
        out.push_str("Versions now:\n");
        let mut any = false;
        for (i, (s, st)) in plan.steps.iter().zip(&self.state.steps).enumerate() {
            if let (Some(check), Some(line)) = (&s.check, &st.check_line) {
                out.push_str(&format!("  {}. {line}   ({check})\n", i + 1));
                any = true;
            }
        }
        if !any {
            out.push_str("  (no checks printed a version)\n");
        }
        let with = |status: StepStatus| -> Vec<(usize, &plan::Step)> {
            plan.steps
                .iter()
                .zip(&self.state.steps)
                .enumerate()
                .filter(|(_, (_, st))| st.status == status)
                .map(|(i, (s, _))| (i + 1, s))
                .collect()
        };
        let satisfied = with(StepStatus::Satisfied);
        if !satisfied.is_empty() {
            out.push_str("Already satisfied (not run: the check passed before the step):\n");
            for (n, s) in satisfied {
                out.push_str(&format!("  {n}. {}\n", s.command));
            }
        }
        let unverified = with(StepStatus::Unverified);
        if !unverified.is_empty() {
            out.push_str(&format!(
                "Not verified (the check passed before the step too, so it shows nothing{}):\n",
                if self.state.sent_back.is_empty() {
                    ""
                } else {
                    "; the plan was sent back once for such checks"
                }
            ));
            for (n, s) in unverified {
                out.push_str(&format!(
                    "  {n}. {}   (check: {})\n",
                    s.command,
                    s.check.as_deref().unwrap_or_default()
                ));
            }
        }
        if !skipped.is_empty() {
            out.push_str(&format!(
                "Skipped (not confirmed): step(s) {}\n",
                skipped
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        out.push_str("Next:\n");
        if plan.next.is_empty() {
            out.push_str("  - open a new shell if a step changed PATH\n");
        }
        for n in &plan.next {
            out.push_str(&format!("  - {n}\n"));
        }
        out
    }

    /// Asks the model until it calls `plan` with a valid plan whose checks
    /// do not already pass (or, after the one send-back, any valid plan),
    /// for the steps from position `from` on. `Ok(Err(why))` when it will
    /// not (a text answer after a nudge, the round limit).
    async fn converse(&mut self, from: usize) -> Result<Result<NewSteps, String>, SetupError> {
        let tools = tool_defs();
        let mut nudged = false;
        loop {
            if self.state.rounds >= self.opts.max_rounds {
                return Ok(Err(format!(
                    "the model made no plan within {} model rounds",
                    self.opts.max_rounds
                )));
            }
            self.state.rounds += 1;
            self.save_state()?;
            let req = ChatRequest {
                messages: self.messages.clone(),
                tools: tools.clone(),
                agent_path: AGENT_PATH.into(),
                call_mode: self.calling.mode(),
            };
            let (model, tool_choice, why) = self.request_model();
            self.record.log(&SetupEvent::Request(event::Request {
                round: self.state.rounds,
                tool_choice,
                tool_choice_from: why.to_owned(),
                sampling: self.opts.sampling,
                messages: req.messages.len(),
                tool_calls: crate::agent::mode_name(req.call_mode).to_owned(),
            }));
            let started = std::time::Instant::now();
            let resp = match model.complete(&req).await {
                Err(LlmError::Rejected { status, body, .. })
                    if self.calling.schema_refused().is_some() =>
                {
                    // The switch was orch's: the server refused the schema,
                    // so the request goes again natively, for good.
                    self.record.log(&SetupEvent::ToolCallingSwitch(event::ToolCallingSwitch {
                        round: self.state.rounds,
                        from: "constrained".into(),
                        to: "native".into(),
                        reason: format!(
                            "the server refused the constrained request (HTTP {status}: {}); the request is sent again with native tools",
                            crate::text::cap_bytes(&body, 512)
                        ),
                    }));
                    self.state.rounds -= 1;
                    continue;
                }
                r => r?,
            };
            self.record.log(&SetupEvent::Response(event::Response {
                round: self.state.rounds,
                latency_ms: started.elapsed().as_millis() as u64,
                prompt_tokens: resp.usage.prompt_tokens,
                completion_tokens: resp.usage.completion_tokens,
                finish_reason: resp.finish_reason.clone(),
                tool_calls: resp.message.tool_calls.len(),
            }));
            let mut message = resp.message;
            let id_prefix = format!("text{}", self.state.rounds);
            if let Some((format, from)) =
                crate::llm::textcalls::recover_into(&mut message, &tools, &id_prefix)
            {
                self.record
                    .log(&SetupEvent::ToolCallsRecovered(event::ToolCallsRecovered {
                        recovered_from: from.into(),
                        format: format!("{format:?}"),
                    }));
                self.text_instead_of_call("the model wrote its call as text");
            }
            self.messages.push(message.clone());
            if message.tool_calls.is_empty() {
                let text = message.content.clone().unwrap_or_default();
                self.console.say(&format!("model: {}", text.trim()));
                self.record.log(&SetupEvent::ModelText(event::ModelText {
                    text: text.clone(),
                }));
                if nudged {
                    self.save_transcript()?;
                    return Ok(Err("the model answered without calling `plan`".into()));
                }
                nudged = true;
                // Under `auto` the next request asks for one call under a
                // JSON schema; otherwise a server that supports it
                // (llama.cpp with `--jinja`) constrains the next answer to
                // a tool call by `tool_choice: "required"`.
                self.text_instead_of_call("the model answered in text");
                self.force_tool_call = true;
                self.messages.push(ChatMessage::user(
                    "Call the `plan` tool with the ordered steps (an empty list if nothing is needed). \
                     Only `plan` steps can change the system.",
                ));
                self.save_transcript()?;
                continue;
            }
            let mut accepted = None;
            for call in &message.tool_calls {
                let (text, plan) = self.call_tool(call).await?;
                let (text, plan) = match plan {
                    Some(p) => self.review_plan(p, from, text).await?,
                    None => (text, None),
                };
                if plan.is_some() {
                    accepted = plan;
                }
                self.messages.push(ChatMessage::tool(call.id.clone(), text));
            }
            self.save_transcript()?;
            if let Some(p) = accepted {
                return Ok(Ok(p));
            }
        }
    }

    /// A request should have been answered with a call and was not (`why`):
    /// under `auto`, the following requests are constrained (logged).
    fn text_instead_of_call(&mut self, why: &str) {
        if self.calling.text_instead_of_call().is_some() {
            self.record
                .log(&SetupEvent::ToolCallingSwitch(event::ToolCallingSwitch {
                    round: self.state.rounds,
                    from: "native".into(),
                    to: "constrained".into(),
                    reason: format!(
                        "{why} instead of a native tool call; the following requests ask for one call under a JSON schema"
                    ),
                }));
        }
    }

    /// The model for the next request, the `tool_choice` it sends and why:
    /// the role's own `tool_choice` wins; after a prose answer `required`;
    /// else what the flags or the profile send (`auto` when none).
    fn request_model(&self) -> (Arc<dyn ChatModel>, ToolChoice, &'static str) {
        if let Some(c) = self.opts.sampling.tool_choice {
            return (self.model.clone(), c, "role");
        }
        // A constrained request sends no `tools`, so no `tool_choice`.
        if self.force_tool_call
            && self.calling.mode() == crate::llm::CallMode::Native
            && let Some(m) = &self.required_model
        {
            return (
                m.clone(),
                ToolChoice::Required,
                "re-ask after a prose answer",
            );
        }
        match self.opts.base_tool_choice {
            Some(c) => (self.model.clone(), c, "flags or profile"),
            None => (self.model.clone(), ToolChoice::Auto, "default"),
        }
    }

    fn save_transcript(&self) -> Result<(), SetupError> {
        self.record.write_transcript(&self.messages).map_err(other)
    }

    /// One tool call: the result text for the model, and the plan when it
    /// was a valid `plan` call.
    async fn call_tool(&self, call: &ToolCall) -> Result<(String, Option<Plan>), SetupError> {
        let name = call.function.name.as_str();
        let args: Value = match serde_json::from_str(if call.function.arguments.trim().is_empty() {
            "{}"
        } else {
            &call.function.arguments
        }) {
            Ok(v) => v,
            Err(e) => {
                let text = format!("error: the arguments of `{name}` are not valid JSON: {e}");
                self.log_tool(name, &Value::String(call.function.arguments.clone()), &text);
                return Ok((text, None));
            }
        };
        let str_arg = |k: &str| args.get(k).and_then(Value::as_str).map(str::to_owned);
        let (text, plan) = match name {
            "detect_system" => {
                let v = detect::detect_system(&self.opts.cwd).await;
                self.console.say(&detect::summary(&v));
                (serde_json::to_string_pretty(&v).unwrap_or_default(), None)
            }
            "check_command" => match str_arg("command") {
                None => (
                    "error: `command` (a command name such as `python3`) is required".into(),
                    None,
                ),
                Some(c) => {
                    self.console.say(&format!("check_command {c}"));
                    match detect::check_command(&c, &self.opts.cwd).await {
                        Ok(v) => (serde_json::to_string_pretty(&v).unwrap_or_default(), None),
                        Err(e) => (format!("error: {e}"), None),
                    }
                }
            },
            "run_command" => (self.recon_command(&args).await?, None),
            "ask_user" => match str_arg("question") {
                None => ("error: `question` is required".into(), None),
                Some(q) => (self.ask_user(&q), None),
            },
            "plan" => match plan::parse(&self.replace_unparsable_checks(&args).await?) {
                Ok(p) => (
                    format!(
                        "plan accepted ({} steps). orch shows it to the user{}.",
                        p.steps.len(),
                        if self.opts.plan_only {
                            "; this is --plan-only, nothing runs"
                        } else {
                            ", asks where needed and runs each step with its check"
                        }
                    ),
                    Some(p),
                ),
                Err(e) => {
                    self.console.say(&format!("plan refused: {e}"));
                    (
                        format!("error: the plan is refused: {e}. Call `plan` again with the fix."),
                        None,
                    )
                }
            },
            other => (
                format!(
                    "error: unknown tool `{other}`; call one of the offered tools by name, with its required arguments: {}",
                    crate::tools::with_required(&tool_defs())
                ),
                None,
            ),
        };
        self.log_tool(name, &args, &text);
        Ok((text, plan))
    }

    fn log_tool(&self, name: &str, args: &Value, text: &str) {
        self.record.log(&SetupEvent::Tool(event::Tool {
            tool: name.to_owned(),
            args: args.clone(),
            result: crate::text::cap_bytes(text, LOGGED_RESULT_CHARS).to_string(),
        }));
    }

    /// `run_command`: reconnaissance only (read-only commands, enforced).
    async fn recon_command(&self, args: &Value) -> Result<String, SetupError> {
        let Some(command) = args.get("command").and_then(Value::as_str).map(str::trim) else {
            return Ok("error: `command` is required".into());
        };
        if let Some(why) = readonly::not_read_only(command) {
            let mode = if self.opts.plan_only {
                "this is --plan-only: nothing may be changed, so only read-only reconnaissance commands run"
            } else {
                "commands that change the system are plan steps: put it in the `plan`; orch runs it after the user confirmed"
            };
            self.console
                .say(&format!("refused run_command `{command}`: not read-only"));
            return Ok(format!(
                "error: run_command refused `{command}`: it is not read-only ({why}); {mode}"
            ));
        }
        if let Decision::Deny(reason) = BashPolicy::default().decide(command) {
            return Ok(format!("error: run_command refused `{command}`: {reason}"));
        }
        if let Some(why) = secret_path_in(command) {
            self.console
                .say(&format!("refused run_command `{command}`: {why}"));
            return Ok(format!(
                "error: run_command refused `{command}`: {why}; setup never reads keys, credentials or shell startup files"
            ));
        }
        let timeout = args
            .get("timeout_secs")
            .and_then(Value::as_u64)
            .map_or(RECON_TIMEOUT, |s| {
                Duration::from_secs(s.max(1)).min(RECON_MAX_TIMEOUT)
            });
        let ran = self
            .run_shown("", command, timeout, Sandboxing::ReadOnly)
            .await?;
        let body = if ran.output.is_empty() {
            "(no output)\n".to_owned()
        } else {
            ran.output.clone()
        };
        Ok(format!("{body}\n[{}]", ran.status(timeout)))
    }

    /// `ask_user`: the terminal; headless, "no" unless `--yes`. Logged.
    fn ask_user(&self, question: &str) -> String {
        self.console.say(&format!("question: {question}"));
        let (answer, how) = match self
            .opts
            .interactive
            .then(|| self.console.ask(question))
            .flatten()
        {
            Some(a) => (a, "terminal"),
            None if self.opts.yes => ("yes".to_owned(), "headless, --yes"),
            None => ("no".to_owned(), "headless, no --yes"),
        };
        self.console.say(&format!("answer: {answer} ({how})"));
        self.record.log(&SetupEvent::AskUser(event::AskUser {
            question: question.to_owned(),
            answer: answer.clone(),
            how: how.to_owned(),
        }));
        format!("the user answered: {answer} ({how})")
    }
}

/// A step that changes the machine beyond the project: risk `system`, or
/// one that uses `sudo`.
fn is_system(step: &plan::Step) -> bool {
    step.risk == Risk::System || step.sudo
}

fn first_line(text: &str) -> Option<String> {
    text.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| crate::text::one_line(l, 200))
}

fn failure_message(
    i: usize,
    step: &plan::Step,
    ran: &Ran,
    check: Option<&Ran>,
    timeout: Duration,
) -> String {
    let n = i + 1;
    let mut m = format!(
        "Step {n} failed: `{}` → {}.\nOutput:\n{}\n",
        step.command,
        ran.status(timeout),
        if ran.output.is_empty() {
            "(no output)"
        } else {
            &ran.output
        }
    );
    if let (Some(c), Some(cmd)) = (check, &step.check) {
        m.push_str(&format!(
            "Its check `{cmd}` → {}.\nCheck output:\n{}\n",
            c.status(RECON_TIMEOUT),
            if c.output.is_empty() {
                "(no output)"
            } else {
                &c.output
            }
        ));
    }
    m.push_str(&format!(
        "Find the cause (detect_system, check_command, read-only run_command), then call `plan` with the steps \
         from step {n} on: the same step again is a retry, other steps are a plan change. Steps before {n} are done \
         and stay done. This is the only retry for step {n}."
    ));
    m
}

/// The system prompt and the goal: how every setup conversation starts.
/// The first messages of a setup, showing `found` ([`manifests`]).
fn first_messages(opts: &SetupOptions, found: &Manifests) -> Vec<ChatMessage> {
    let mut user = format!(
        "Goal: {}\nWorking directory: {}",
        opts.goal,
        opts.cwd.display()
    );
    for (name, text) in &found.shown {
        user.push_str(&format!(
            "\n\n`{name}` (in the working directory):\n{}",
            crate::text::fenced(text, "")
        ));
    }
    for (name, why) in &found.not_shown {
        user.push_str(&format!(
            "\n\n`{name}` is in the working directory but not shown here ({why})."
        ));
    }
    vec![
        ChatMessage::system(system_prompt(opts)),
        ChatMessage::user(user),
    ]
}

/// The dependency manifests a setup reads first, by name, in this order.
const MANIFESTS: &[&str] = &[
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "Pipfile",
    "environment.yml",
    "package.json",
    "Cargo.toml",
    "go.mod",
    "Gemfile",
    "pom.xml",
    "build.gradle",
    "composer.json",
];

/// Bytes of one manifest shown (cut with a marker), and of all of them.
const MANIFEST_CAP: usize = 4 * 1024;
const MANIFESTS_CAP: usize = 12 * 1024;

/// The dependency manifests at the top of `cwd`: what a person setting a
/// project up reads first, put in the first message as an agent's task
/// shows the files it names (the 1.5B model never read `requirements.txt`
/// and planned `pip` upgrades instead of installing it; docs/setup.md).
#[derive(Debug, Default)]
pub(crate) struct Manifests {
    /// Shown: regular UTF-8 files, each capped, within the total cap
    /// (name, text as shown).
    pub shown: Vec<(String, String)>,
    /// There but not shown, with why: a symlink (it may point anywhere,
    /// a key included), not a regular file, not UTF-8, or past the total
    /// cap. Named to the model and in the record, never dropped silently.
    pub not_shown: Vec<(String, &'static str)>,
}

pub(crate) fn manifests(cwd: &std::path::Path) -> Manifests {
    let mut out = Manifests::default();
    let mut total = 0;
    for name in MANIFESTS {
        let path = cwd.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let mut skip = |why| out.not_shown.push(((*name).to_owned(), why));
        if meta.file_type().is_symlink() {
            skip("a symlink, not followed");
            continue;
        }
        if !meta.is_file() {
            skip("not a regular file");
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else {
            skip("not UTF-8 text");
            continue;
        };
        let shown = if text.len() > MANIFEST_CAP {
            format!(
                "{}\n[… cut by orch: {} of {} bytes shown]\n",
                crate::text::cap_bytes(&text, MANIFEST_CAP),
                MANIFEST_CAP,
                text.len()
            )
        } else {
            text
        };
        if total + shown.len() > MANIFESTS_CAP {
            skip("past the 12 KB shown of all manifests");
            continue;
        }
        total += shown.len();
        out.shown.push(((*name).to_owned(), shown));
    }
    out
}

fn system_prompt(opts: &SetupOptions) -> String {
    let mut p = opts.prompt.trim().to_owned();
    p.push_str(if opts.plan_only {
        "\n\nMode: plan only. Nothing may be changed: investigate, then call `plan`; nothing will run."
    } else {
        "\n\nMode: run. After `plan`, orch shows the plan, asks the user where needed and runs the steps itself."
    });
    if opts.lane {
        p.push_str(
            "\n\nYou are in a fresh git worktree (a lane) of the project: detect its toolchain and install its dependencies inside this directory. Mark those steps `install`; only the working directory is writable to them. Their commands become the setup every later lane of this repository runs, so they must work when run again from the worktree's root.",
        );
    }
    for (file, text) in &opts.house_rules {
        p.push_str(&format!(
            "\n\nHouse rules of this team (from {}); follow them:\n{text}",
            file.display()
        ));
    }
    p
}

fn tool_defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "detect_system",
            description: "The machine as JSON: os, distro and version, kernel, arch, libc, shell, user/root, package managers, runtimes and version managers with versions, proxy variables, free disk.",
            parameters: json!({"type": "object", "properties": {}}),
        },
        ToolDef {
            name: "check_command",
            description: "Whether a command exists: its path and `--version` output.",
            parameters: json!({"type": "object", "properties": {"command": {"type": "string", "description": "a command name, e.g. python3"}}, "required": ["command"]}),
        },
        ToolDef {
            name: "run_command",
            description: "Run a read-only reconnaissance command (bash). Commands that change anything are refused: put them in the plan.",
            parameters: json!({"type": "object", "properties": {"command": {"type": "string"}, "timeout_secs": {"type": "integer"}}, "required": ["command"]}),
        },
        ToolDef {
            name: "ask_user",
            description: "Ask the user a yes/no or short question (headless: the answer is no unless --yes).",
            parameters: json!({"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]}),
        },
        ToolDef {
            name: "plan",
            description: "Submit the ordered plan; required before anything is changed. orch prints it, confirms and runs each step and its check.",
            parameters: plan::schema(),
        },
    ]
}
