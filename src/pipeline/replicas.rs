//! Best of N (`replicas:` on a stage): checking the keys and planning the
//! replicas.
//!
//! A stage `code` with `replicas: 3` is planned as three replica stages
//! `code#1`, `code#2`, `code#3` (same role, task and needs; each with its
//! own model, seed and temperature when the file gives them) and the stage
//! `code` itself, which needs the three and *selects* one of them
//! ([`Select`]). Downstream stages keep needing `code`, so they build on
//! the winner. Replicas are ordinary stages to the scheduler, the record and
//! resume: they run side by side (bounded by `--max-parallel`), each is
//! committed on `orch/<run>/code#k` (`#` is valid in a git ref name:
//! `git check-ref-format` accepts it), and a killed one is re-run alone.

use super::error::SpecError;
use super::spec::StageSpec;
use super::types::{BudgetSplit, REPLICAS_RANGE, Replica, Select, SelectStrategy, Stage};
use crate::ids::StageId;
use serde_saphyr::{Location, Spanned};
use std::collections::HashMap;

/// The replicas a written stage asks for, checked.
pub(super) struct ReplicaPlan {
    n: u32,
    models: Vec<String>,
    seeds: Vec<u64>,
    temperatures: Vec<f64>,
    strategy: SelectStrategy,
    commands: Vec<String>,
    reviewer: Option<String>,
    split: BudgetSplit,
}

/// The role a `reviewer` selection runs as when `select.role` is not given.
pub(super) const DEFAULT_SELECT_ROLE: &str = "reviewer";

/// The id of replica `k` of stage `id`.
pub fn replica_id(id: &str, k: u32) -> String {
    format!("{id}#{k}")
}

/// Checks the best-of-N keys of stage `id`; `None` when it has no replicas.
/// `in_loop`: the stage is part of a rework loop (not supported with replicas).
pub(super) fn check(
    id: &str,
    stage: &StageSpec,
    known_roles: &[String],
    in_loop: bool,
    err: &dyn Fn(&Location, String) -> SpecError,
) -> Result<Option<ReplicaPlan>, SpecError> {
    let n = match &stage.replicas {
        Some(r) if r.value == 1 => 1,
        Some(r) if !REPLICAS_RANGE.contains(&r.value) => {
            return Err(err(
                &r.referenced,
                format!(
                    "replicas must be between {} and {} (1 is a plain stage), got {}",
                    REPLICAS_RANGE.start(),
                    REPLICAS_RANGE.end(),
                    r.value
                ),
            ));
        }
        Some(r) => r.value,
        None => 1,
    };
    if n == 1 {
        // The per-replica keys mean nothing without replicas.
        let stray: [(&str, Option<&Location>); 5] = [
            ("models", stage.models.as_ref().map(|m| &m.referenced)),
            ("seeds", stage.seeds.as_ref().map(|m| &m.referenced)),
            (
                "temperature",
                stage.temperature.as_ref().map(|m| &m.referenced),
            ),
            ("select", stage.select.as_ref().map(|m| &m.referenced)),
            (
                "budget.replicas",
                stage
                    .budget
                    .as_ref()
                    .and_then(|b| b.value.replicas.as_ref())
                    .map(|m| &m.referenced),
            ),
        ];
        if let Some((key, at)) = stray.into_iter().find_map(|(k, at)| at.map(|a| (k, a))) {
            return Err(err(
                at,
                format!("{key} needs `replicas:` of 2 or more on stage \"{id}\""),
            ));
        }
        return Ok(None);
    }
    let at = stage
        .replicas
        .as_ref()
        .map_or(Location::UNKNOWN, |r| r.referenced);
    if in_loop {
        return Err(err(
            &at,
            format!(
                "replicas on stage \"{id}\", which is part of a rework loop, is not supported; run the replicas in a stage outside the loop"
            ),
        ));
    }
    if let (Some(_), Some(models)) = (&stage.model, &stage.models) {
        return Err(err(
            &models.referenced,
            "give either model (every replica) or models (one per replica), not both".into(),
        ));
    }
    let list_len = |key: &str, len: usize, at: &Location| -> Result<(), SpecError> {
        if len == 1 || len == n as usize {
            Ok(())
        } else {
            Err(err(
                at,
                format!("{key} must list 1 or {n} values (one per replica), got {len}"),
            ))
        }
    };
    let models = match &stage.models {
        Some(m) => {
            list_len("models", m.value.len(), &m.referenced)?;
            if let Some(i) = m.value.iter().position(|x| x.trim().is_empty()) {
                return Err(err(
                    &m.referenced,
                    format!("models entry {} is empty", i + 1),
                ));
            }
            m.value.iter().map(|x| x.trim().to_owned()).collect()
        }
        None => Vec::new(),
    };
    let seeds = match &stage.seeds {
        Some(s) => {
            list_len("seeds", s.value.len(), &s.referenced)?;
            s.value.clone()
        }
        None => Vec::new(),
    };
    let temperatures = match &stage.temperature {
        Some(t) => {
            list_len("temperature", t.value.0.len(), &t.referenced)?;
            if let Some(bad) = t.value.0.iter().find(|x| !(0.0..=2.0).contains(*x)) {
                return Err(err(
                    &t.referenced,
                    format!("temperature must be between 0 and 2, got {bad}"),
                ));
            }
            t.value.0.clone()
        }
        None => Vec::new(),
    };
    let split = match stage
        .budget
        .as_ref()
        .and_then(|b| b.value.replicas.as_ref())
    {
        None => BudgetSplit::PerReplica,
        Some(s) => match s.value.trim() {
            "per_replica" => BudgetSplit::PerReplica,
            "shared" => BudgetSplit::Shared,
            other => {
                return Err(err(
                    &s.referenced,
                    format!("budget replicas must be per_replica or shared, got {other:?}"),
                ));
            }
        },
    };
    let (strategy, command, role) = match &stage.select {
        Some(Spanned { value, .. }) => (
            value.strategy.as_ref(),
            value.command.as_ref(),
            value.role.as_ref(),
        ),
        None => (None, None, None),
    };
    let strategy = match strategy {
        None => SelectStrategy::Tests,
        Some(s) => SelectStrategy::parse(&s.value).ok_or_else(|| {
            err(
                &s.referenced,
                format!(
                    "select strategy must be tests, reviewer or tests+reviewer, got {:?}",
                    s.value
                ),
            )
        })?,
    };
    let commands = match command {
        Some(c) => {
            if c.value.0.is_empty() || c.value.0.iter().any(|x| x.trim().is_empty()) {
                return Err(err(&c.referenced, "select command is empty".into()));
            }
            c.value.0.clone()
        }
        None => stage
            .verify
            .as_ref()
            .map(|v| v.value.0.clone())
            .unwrap_or_default(),
    };
    if strategy.runs_tests() && commands.is_empty() {
        let at = stage.select.as_ref().map_or(at, |s| s.referenced);
        return Err(err(
            &at,
            format!(
                "select strategy {} on stage \"{id}\" needs a command to run on each replica: give select.command or the stage's verify",
                strategy.as_str()
            ),
        ));
    }
    let reviewer = if strategy.asks_reviewer() {
        let name = role.map_or(DEFAULT_SELECT_ROLE, |r| r.value.as_str());
        if !known_roles.iter().any(|r| r == name) {
            let at = role.map_or(at, |r| r.referenced);
            return Err(err(
                &at,
                format!("unknown role \"{name}\" for select (the reviewer that chooses)"),
            ));
        }
        Some(name.to_owned())
    } else {
        if let Some(r) = role {
            return Err(err(
                &r.referenced,
                "select role is the reviewer of the reviewer strategies; strategy tests has none"
                    .into(),
            ));
        }
        None
    };
    Ok(Some(ReplicaPlan {
        n,
        models,
        seeds,
        temperatures,
        strategy,
        commands,
        reviewer,
        split,
    }))
}

/// Replaces every stage with a [`ReplicaPlan`] by its replicas followed by
/// the selecting stage (which keeps the id, so downstream `needs` hold).
pub(super) fn expand(stages: Vec<Stage>, plans: &HashMap<String, ReplicaPlan>) -> Vec<Stage> {
    let mut out = Vec::with_capacity(stages.len());
    for stage in stages {
        let Some(plan) = plans.get(stage.id.as_str()) else {
            out.push(stage);
            continue;
        };
        let pick = |k: usize, len: usize| if len == 1 { 0 } else { k };
        let mut ids = Vec::new();
        for k in 0..plan.n as usize {
            let id = StageId(replica_id(stage.id.as_str(), k as u32 + 1));
            let mut r = stage.clone();
            r.id = id.clone();
            // A replica is a stage of its own: its model and escalation are
            // looked up by its id.
            r.base_id = id.clone();
            if !plan.models.is_empty() {
                r.model = Some(plan.models[pick(k, plan.models.len())].clone());
            }
            if !plan.seeds.is_empty() {
                r.sampling.seed = Some(plan.seeds[pick(k, plan.seeds.len())]);
            }
            if !plan.temperatures.is_empty() {
                r.sampling.temperature = Some(plan.temperatures[pick(k, plan.temperatures.len())]);
            }
            if plan.split == BudgetSplit::Shared {
                r.budget = split_budget(&stage.budget, plan.n);
            }
            r.replica = Some(Replica {
                of: stage.id.clone(),
                k: k as u32 + 1,
                n: plan.n,
                check: if plan.strategy.runs_tests() {
                    plan.commands.clone()
                } else {
                    Vec::new()
                },
            });
            ids.push(id);
            out.push(r);
        }
        let mut select = stage.clone();
        select.needs = ids.clone();
        select.select = Some(Select {
            strategy: plan.strategy,
            replicas: ids,
            commands: plan.commands.clone(),
            replica_role: stage.role.clone(),
            budget: plan.split,
        });
        if let Some(reviewer) = &plan.reviewer {
            select.role = reviewer.clone();
        }
        // The selection runs no verify gate of its own: the replicas did.
        select.verify = Vec::new();
        select.model = None;
        select.escalate_to = None;
        out.push(select);
    }
    out
}

/// One replica's share of a `shared` budget: each limit divided by `n`
/// (tokens rounded down, at least 1).
fn split_budget(b: &crate::budget::Budget, n: u32) -> crate::budget::Budget {
    crate::budget::Budget {
        tokens: b.tokens.map(|t| (t / u64::from(n)).max(1)),
        time_secs: b.time_secs.map(|t| t / f64::from(n)),
        cost_usd: b.cost_usd.map(|c| c / f64::from(n)),
    }
}

#[cfg(test)]
mod tests {
    use crate::pipeline::{BudgetSplit, SelectStrategy, parse_pipeline};

    fn roles() -> Vec<String> {
        vec!["coder".to_owned(), "reviewer".to_owned()]
    }

    #[test]
    fn replicas_are_planned_before_the_selecting_stage_with_their_own_sampling() {
        let p = parse_pipeline(
            "stages:\n  code:\n    role: coder\n    replicas: 3\n    models: [a, b, c]\n    seeds: [7]\n    temperature: [0.1, 0.5, 0.9]\n    budget: {tokens: 900, replicas: shared}\n    verify: make test\n  review:\n    role: reviewer\n    needs: [code]\n",
            "p.yaml",
            &roles(),
        )
        .unwrap();
        let ids: Vec<&str> = p.stages.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["code#1", "code#2", "code#3", "code", "review"]);
        let r2 = &p.stages[1];
        assert_eq!(r2.model.as_deref(), Some("b"));
        assert_eq!(r2.sampling.seed, Some(7));
        assert_eq!(r2.sampling.temperature, Some(0.5));
        assert_eq!(r2.budget.tokens, Some(300));
        assert_eq!(r2.base_id.as_str(), "code#2");
        let replica = r2.replica.as_ref().unwrap();
        assert_eq!((replica.k, replica.n, replica.of.as_str()), (2, 3, "code"));
        assert_eq!(replica.check, ["make test"]);
        let sel = p.stages[3].select.as_ref().unwrap();
        assert_eq!(sel.strategy, SelectStrategy::Tests);
        assert_eq!(sel.budget, BudgetSplit::Shared);
        assert_eq!(p.stages[3].needs.len(), 3);
        assert!(p.stages[3].verify.is_empty());
        assert_eq!(p.stages[4].needs[0].as_str(), "code");
        // The plan is serialized in the run record and read back on resume.
        let again: crate::pipeline::Pipeline =
            serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
        assert_eq!(again, p);
    }

    #[test]
    fn reviewer_selection_runs_as_the_reviewer_and_replicas_check_nothing() {
        let p = parse_pipeline(
            "stages:\n  code:\n    role: coder\n    replicas: 2\n    select: {strategy: reviewer}\n",
            "p.yaml",
            &roles(),
        )
        .unwrap();
        assert_eq!(p.stages[2].role, "reviewer");
        assert!(p.stages[0].replica.as_ref().unwrap().check.is_empty());
    }

    #[test]
    fn replicas_in_a_rework_loop_are_refused_at_the_key() {
        let err = parse_pipeline(
            "stages:\n  code:\n    role: coder\n    replicas: 2\n    verify: t\n  review:\n    role: reviewer\n    needs: [code]\n    rework: {stage: code, max_rounds: 1}\n",
            "p.yaml",
            &roles(),
        )
        .unwrap_err();
        assert_eq!((err.line, err.file.as_str()), (4, "p.yaml"));
        assert!(err.message.contains("rework loop"), "{err}");
    }
}
