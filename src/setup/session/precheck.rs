//! Checks that verify something. A step's check is meant to fail before the
//! step and pass after it; one that passes before shows nothing. So the
//! checks of the steps that change something (`install`, `system`) also
//! run *before* their steps:
//!
//! - when the plan is made (also under `--plan-only`, before anything was
//!   confirmed): read-only, see [`steps::probe`]. A plan with a check that
//!   already passes goes back to the model, once per setup, with the steps
//!   and what a check is for; the next plan is taken as it is, its
//!   passing checks printed as warnings;
//! - right before the step: a check that was seen failing (at plan time or
//!   on an earlier try) and passes now means the step is already satisfied
//!   (an earlier step or the machine did it): it is not run. A check never
//!   seen failing that passes now cannot tell, so the step runs, and if the
//!   check passes after it too the step is `unverified`, not `verified`,
//!   in the record and the report.
//!
//! `read` steps change nothing: their checks are not run before.

use super::{RECON_TIMEOUT, Session, other};
use crate::setup::SetupError;
use crate::setup::event::{self, SetupEvent};
use crate::setup::plan::{Plan, Risk, Step};
use crate::setup::status::{CheckBefore, StepStatus};
use crate::setup::steps::{self, Sandboxing};

/// A check orch built from a step's own command, and what it did now.
struct Offer {
    check: String,
    /// The packages it asks about, joined.
    names: String,
    /// `is` or `are`, for `names`.
    are: &'static str,
    passes: bool,
    /// The exit code as said (`-` when killed).
    exit: String,
    exit_code: Option<i32>,
}

impl Offer {
    /// What the send-back says of it, for step `n`.
    fn sentence(&self, n: usize) -> String {
        let (check, names, are) = (&self.check, &self.names, self.are);
        if self.passes {
            format!(
                "for step {n}, `{check}` already passes: {names} {are} installed, so the step is done; leave it out of the plan"
            )
        } else {
            format!(
                "for step {n}, `{check}` fails now (exit {}) and passes once {names} {are} installed: use it as step {n}'s check",
                self.exit
            )
        }
    }
}

/// What the check said right before its step.
pub(super) enum BeforeStep {
    /// The step is already satisfied: not run.
    Satisfied,
    /// It passed, never having been seen failing: run the step; a pass
    /// after it too makes it `unverified`.
    PassedUnproven,
    /// It failed (or there is no check to run): run the step.
    Failed,
}

impl Session<'_> {
    /// Runs the checks of `plan`'s changing steps before any of them ran;
    /// `from` is the position of its first step in the whole plan.
    /// One entry per step (`None`: a read step, or no check).
    async fn checks_at_plan_time(
        &mut self,
        plan: &Plan,
        from: usize,
    ) -> Result<Vec<Option<CheckBefore>>, SetupError> {
        let mut found = Vec::with_capacity(plan.steps.len());
        for (k, step) in plan.steps.iter().enumerate() {
            let Some(check) = changing_check(step) else {
                found.push(None);
                continue;
            };
            self.console.say(&format!("check before $ {check}"));
            let probed = steps::probe(check, &self.opts.cwd, self.tmp.path(), RECON_TIMEOUT)
                .await
                .map_err(other)?;
            let (outcome, exit_code, output) = match probed {
                Ok(mut ran) => {
                    ran.output = steps::redact(&ran.output, &self.opts.secrets);
                    self.show(&ran, RECON_TIMEOUT);
                    let outcome = if ran.ok() {
                        CheckBefore::Passed
                    } else {
                        CheckBefore::Failed
                    };
                    (outcome, ran.exit_code, ran.output)
                }
                Err(why) => {
                    self.console.say(&format!("[{why}]"));
                    (CheckBefore::NotRun, None, why)
                }
            };
            self.record
                .log(&SetupEvent::CheckBefore(event::CheckRunBefore {
                    step: from + k + 1,
                    when: "plan".into(),
                    check: check.to_owned(),
                    exit_code,
                    output,
                    outcome,
                }));
            found.push(Some(outcome));
        }
        Ok(found)
    }

    /// A valid `plan` call's plan, checked before it is accepted: the
    /// text for the model and, unless it was sent back, the plan with what
    /// its checks said.
    pub(super) async fn review_plan(
        &mut self,
        mut plan: Plan,
        from: usize,
        accepted_text: String,
    ) -> Result<(String, Option<(Plan, Vec<Option<CheckBefore>>)>), SetupError> {
        let mut found = self.checks_at_plan_time(&plan, from).await?;
        let passing: Vec<(usize, String)> = plan
            .steps
            .iter()
            .zip(&found)
            .enumerate()
            .filter(|(_, (_, f))| **f == Some(CheckBefore::Passed))
            .filter_map(|(k, (s, _))| Some((from + k + 1, s.check.clone()?)))
            .collect();
        if passing.is_empty() {
            return Ok((accepted_text, Some((plan, found))));
        }
        let mut offers = Vec::new();
        for (n, _) in &passing {
            let k = n - from - 1;
            if let Some(offer) = self.offer_check(*n, &plan.steps[k].command).await? {
                offers.push((k, offer));
            }
        }
        if !self.state.sent_back.is_empty() {
            // Sent back once already, and the model kept a check that shows
            // nothing: where orch has a check of the step's own that fails
            // now, it takes that one, and says so.
            for (k, offer) in offers {
                if offer.passes {
                    continue;
                }
                let n = from + k + 1;
                let was = plan.steps[k].check.replace(offer.check.clone());
                self.note_replaced(
                    n,
                    was.unwrap_or_default(),
                    "passed before the step again",
                    &offer,
                );
                found[k] = Some(CheckBefore::Failed);
            }
            return Ok((accepted_text, Some((plan, found))));
        }
        let passing: Vec<(usize, &str)> = passing.iter().map(|(n, c)| (*n, c.as_str())).collect();
        let sentences: Vec<String> = offers
            .iter()
            .map(|(k, o)| o.sentence(from + k + 1))
            .collect();
        let message = send_back_message(&passing, &sentences);
        self.console.say(&message);
        self.state.sent_back = passing.iter().map(|(n, _)| *n).collect();
        self.save_state()?;
        self.record
            .log(&SetupEvent::PlanSentBack(event::PlanSentBack {
                steps: self.state.sent_back.clone(),
                message: message.clone(),
            }));
        Ok((format!("error: {message}"), None))
    }

    /// The `plan` call's arguments with each check that does not parse as
    /// a shell command (`bash -n`) replaced by orch's own check of its
    /// step ([`super::suggest`]) when that one fails now, said on the
    /// console and in the record (`check_replaced`). A check that cannot
    /// run verifies nothing, and the 1.5B model sent the same stray quote
    /// again after the refusal; one with no such replacement is left for
    /// [`crate::setup::plan::parse`] to refuse.
    pub(super) async fn replace_unparsable_checks(
        &self,
        args: &serde_json::Value,
    ) -> Result<serde_json::Value, SetupError> {
        let mut args = args.clone();
        let Some(steps) = args.get_mut("steps").and_then(|s| s.as_array_mut()) else {
            return Ok(args);
        };
        for (i, step) in steps.iter_mut().enumerate() {
            let text = |k: &str| step.get(k).and_then(|v| v.as_str()).map(str::to_owned);
            let (Some(command), Some(check)) = (text("command"), text("check")) else {
                continue;
            };
            let Some(error) = crate::setup::plan::shell_syntax_error(&check) else {
                continue;
            };
            let n = i + 1;
            let Some(offer) = self.offer_check(n, &command).await? else {
                continue;
            };
            if offer.passes {
                continue;
            }
            let why = format!("does not parse as a shell command (`bash -n`: {error})");
            self.note_replaced(n, check, &why, &offer);
            step["check"] = serde_json::Value::String(offer.check);
        }
        Ok(args)
    }

    /// Says on the console and in the record that step `n`'s check `was`
    /// (`why` it verifies nothing) is replaced by `offer`'s.
    fn note_replaced(&self, n: usize, was: String, why: &str, offer: &Offer) {
        self.console.say(&format!(
            "step {n}'s check `{was}` {why}; orch checks it with `{}` instead (it fails now, exit {}, and passes once the step installed {})",
            offer.check, offer.exit, offer.names
        ));
        self.record
            .log(&SetupEvent::CheckReplaced(event::CheckReplaced {
                step: n,
                was,
                now: offer.check.clone(),
                exit_code: offer.exit_code,
            }));
    }

    /// A check built from `command`, a step's own ([`super::suggest`]),
    /// run now (read-only) to see what it shows; `None` when none can be
    /// built or it could not run.
    async fn offer_check(&self, n: usize, command: &str) -> Result<Option<Offer>, SetupError> {
        let Some((check, names)) = super::suggest::suggested_check(command, &self.opts.cwd) else {
            return Ok(None);
        };
        self.console.say(&format!("offered check $ {check}"));
        let probed = steps::probe(&check, &self.opts.cwd, self.tmp.path(), RECON_TIMEOUT)
            .await
            .map_err(other)?;
        let Ok(mut ran) = probed else {
            return Ok(None);
        };
        ran.output = steps::redact(&ran.output, &self.opts.secrets);
        self.show(&ran, RECON_TIMEOUT);
        self.record
            .log(&SetupEvent::CheckBefore(event::CheckRunBefore {
                step: n,
                when: "offered".into(),
                check: check.clone(),
                exit_code: ran.exit_code,
                output: ran.output.clone(),
                outcome: if ran.ok() {
                    CheckBefore::Passed
                } else {
                    CheckBefore::Failed
                },
            }));
        Ok(Some(Offer {
            are: if names.len() == 1 { "is" } else { "are" },
            names: names.join(", "),
            check,
            passes: ran.ok(),
            exit: ran.exit_code.map_or("-".to_owned(), |c| c.to_string()),
            exit_code: ran.exit_code,
        }))
    }

    /// The warnings printed under an accepted plan whose checks already
    /// passed before their steps (after the one send-back).
    pub(super) fn warn_passing_checks(&self, plan: &Plan) {
        for (i, (step, st)) in plan.steps.iter().zip(&self.state.steps).enumerate() {
            if st.check_before != Some(CheckBefore::Passed) || st.status.done() {
                continue;
            }
            let Some(check) = &step.check else { continue };
            self.console.say(&format!(
                "warning: step {}'s check `{check}` already passes before the step: it verifies nothing unless the step is already done{}. orch runs the step and reports it as not verified if the check passes before it again",
                i + 1,
                if self.state.sent_back.is_empty() {
                    ""
                } else {
                    " (the plan was sent back once for such checks and the model kept it)"
                }
            ));
        }
    }

    /// Runs step `i`'s check right before the step (after it was
    /// confirmed; read-only as every check), records what it said and,
    /// when the step is already satisfied, marks it so.
    pub(super) async fn check_before_step(
        &mut self,
        i: usize,
        step: &Step,
    ) -> Result<BeforeStep, SetupError> {
        let Some(check) = changing_check(step) else {
            return Ok(BeforeStep::Failed);
        };
        let ran = self
            .run_shown("check before ", check, RECON_TIMEOUT, Sandboxing::ReadOnly)
            .await?;
        let seen_failing = self.state.steps[i].check_before == Some(CheckBefore::Failed);
        let outcome = if ran.ok() {
            CheckBefore::Passed
        } else {
            CheckBefore::Failed
        };
        self.record
            .log(&SetupEvent::CheckBefore(event::CheckRunBefore {
                step: i + 1,
                when: "step".into(),
                check: check.to_owned(),
                exit_code: ran.exit_code,
                output: ran.output.clone(),
                outcome,
            }));
        if !ran.ok() {
            self.state.steps[i].check_before = Some(CheckBefore::Failed);
            self.save_state()?;
            return Ok(BeforeStep::Failed);
        }
        if !seen_failing {
            return Ok(BeforeStep::PassedUnproven);
        }
        let st = &mut self.state.steps[i];
        st.status = StepStatus::Satisfied;
        st.check_exit_code = ran.exit_code;
        st.check_line = super::first_line(&ran.output);
        self.save_state()?;
        self.record
            .log(&SetupEvent::Step(event::StepEvent::Satisfied {
                step: i + 1,
                status: StepStatus::Satisfied,
                check: check.to_owned(),
                check_output: ran.output,
            }));
        self.console.say(&format!(
            "step {} already satisfied: its check `{check}` passed before the step ran; not run",
            i + 1
        ));
        Ok(BeforeStep::Satisfied)
    }
}

/// The check of a step that changes something.
fn changing_check(step: &Step) -> Option<&str> {
    (step.risk != Risk::Read)
        .then_some(step.check.as_deref())
        .flatten()
}

/// What the model is told when the plan goes back: which checks already
/// pass and what a check is for.
fn send_back_message(passing: &[(usize, &str)], offers: &[String]) -> String {
    let named: Vec<String> = passing
        .iter()
        .map(|(n, c)| format!("step {n} (`{c}`)"))
        .collect();
    let which = if named.len() == 1 {
        format!("the check of {} already passes", named[0])
    } else {
        format!("the checks of {} already pass", named.join(", "))
    };
    format!(
        "plan sent back: {which} before the step ran, so it cannot show that the step worked. \
         A check must fail now and pass only after its step: if a step is already done, leave it out of the plan; \
         otherwise give it a check that tests what the step does (e.g. `python3 -c 'import requests'` after \
         `pip install requests`, not `pip list`).{} Call `plan` again with the fix; this plan is sent back only once",
        offers
            .iter()
            .map(|o| format!(" Checked by orch: {o}."))
            .collect::<String>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_send_back_names_each_passing_check() {
        let one = send_back_message(&[(1, "true")], &[]);
        assert!(
            one.starts_with(
                "plan sent back: the check of step 1 (`true`) already passes before the step ran"
            ),
            "{one}"
        );
        let two = send_back_message(&[(1, "true"), (3, "pip list")], &[]);
        assert!(
            two.contains("the checks of step 1 (`true`), step 3 (`pip list`) already pass before"),
            "{two}"
        );
        let offered = send_back_message(&[(3, "pip list")], &["for step 3, `pip show x` fails now (exit 1) and passes once x is installed: use it as step 3's check".to_owned()]);
        assert!(
            offered.contains("not `pip list`). Checked by orch: for step 3, `pip show x` fails now (exit 1) and passes once x is installed: use it as step 3's check. Call `plan` again"),
            "{offered}"
        );
    }
}
