//! Checking and planning the stage graph.
//!
//! Checks run on the stages as written (ids, roles, `needs`, cycles, rework
//! targets), so errors point at the file. Planning then unrolls each rework
//! loop into `max_rounds` extra rounds and orders the result topologically,
//! breaking ties by file order (a round right after the review it answers).

use super::error::SpecError;
use super::replicas;
use super::spec::{BudgetSpec, CommandsSpec, PipelineSpec, StageSpec};
use super::types::{
    DEFAULT_VERIFY_ROUNDS, MAX_REWORK_ROUNDS, MAX_VERIFY_ROUNDS, Stage, is_valid_stage_id,
};
use crate::budget::Budget;
use crate::ids::StageId;
use petgraph::Direction;
use petgraph::algo::{has_path_connecting, tarjan_scc};
use petgraph::graph::{DiGraph, NodeIndex};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

/// A rework loop as checked: stage `review` sends work back to `target`.
struct Loop {
    /// File index of the stage carrying `rework`.
    review: usize,
    /// File index of the stage it sends work back to.
    target: usize,
    /// Extra rounds.
    rounds: u32,
    /// File indices of every stage on a path from `target` to `review`, both included.
    body: BTreeSet<usize>,
}

/// Checks the stages of `spec` and returns the planned stage list.
pub(super) fn plan(
    spec: &PipelineSpec,
    origin: &str,
    known_roles: &[String],
) -> Result<Vec<Stage>, SpecError> {
    let written = &spec.stages.value.0;
    let err = |location: &serde_saphyr::Location, message: String| {
        SpecError::at(origin, location, 0, message)
    };
    if written.is_empty() {
        return Err(err(
            &spec.stages.referenced,
            "a pipeline needs at least one stage under `stages:`".into(),
        ));
    }

    let index: HashMap<&str, usize> = written
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.value.as_str(), i))
        .collect();
    let all_ids = || {
        written
            .iter()
            .map(|(id, _)| id.value.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };

    let mut graph: DiGraph<usize, ()> = DiGraph::with_capacity(written.len(), written.len());
    let nodes: Vec<NodeIndex> = (0..written.len()).map(|i| graph.add_node(i)).collect();

    for (i, (id, stage)) in written.iter().enumerate() {
        if id.value.len() > MAX_STAGE_ID_BYTES {
            return Err(err(
                &id.referenced,
                format!(
                    "stage id \"{}\" is {} bytes long; the limit is {MAX_STAGE_ID_BYTES} bytes (a stage id names a branch component and a directory)",
                    id.value,
                    id.value.len()
                ),
            ));
        }
        if !is_valid_stage_id(&id.value) {
            return Err(err(
                &id.referenced,
                format!(
                    "invalid stage id \"{}\": expected lowercase letters, digits, `_` and `-`, starting with a letter or digit",
                    id.value
                ),
            ));
        }
        check_stage_fields(stage, known_roles, &err)?;
        for need in &stage.needs.0 {
            let Some(&j) = index.get(need.value.as_str()) else {
                return Err(err(
                    &need.referenced,
                    format!(
                        "unknown stage \"{}\" in needs (stages: {})",
                        need.value,
                        all_ids()
                    ),
                ));
            };
            if j == i {
                return Err(err(
                    &need.referenced,
                    format!("stage \"{}\" cannot need itself", id.value),
                ));
            }
            graph.update_edge(nodes[j], nodes[i], ());
        }
    }

    if let Some(cycle) = find_cycle(&graph) {
        // Point at the `needs` entry of the cycle's first stage that closes it.
        let first = cycle[0];
        let last = cycle[cycle.len() - 2];
        let (first_id, first_stage) = &written[first];
        let location = first_stage
            .needs
            .0
            .iter()
            .find(|need| need.value == written[last].0.value)
            .map_or(first_id.referenced, |need| need.referenced);
        let names: Vec<&str> = cycle.iter().map(|&i| written[i].0.value.as_str()).collect();
        return Err(err(
            &location,
            format!(
                "cycle among stages: {} (each stage needs the one before it)",
                names.join(" → ")
            ),
        ));
    }

    let loops = check_rework(written, &index, &graph, &nodes, &err)?;
    let mut replica_plans = HashMap::new();
    for (i, (id, stage)) in written.iter().enumerate() {
        let in_loop = loops.iter().any(|l| l.body.contains(&i));
        if let Some(plan) = replicas::check(&id.value, stage, known_roles, in_loop, &err)? {
            replica_plans.insert(id.value.clone(), plan);
        }
    }
    let default_verify = pipeline_verify(spec, &err)?;
    let stages = unroll(written, &loops, &default_verify);
    let ordered = topological_order(stages, written, &loops).ok_or_else(|| {
        err(
            &spec.stages.referenced,
            "internal: planned graph has a cycle".into(),
        )
    })?;
    Ok(replicas::expand(ordered, &replica_plans))
}

/// The pipeline's `verify:` and `verify_rounds:` (the default of every
/// stage that sets no `verify:` of its own), checked like a stage's.
fn pipeline_verify(
    spec: &PipelineSpec,
    err: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
) -> Result<(Vec<String>, u32), SpecError> {
    check_verify(spec.verify.as_ref(), spec.verify_rounds.as_ref(), err)?;
    Ok((
        spec.verify
            .as_ref()
            .map(|v| v.value.0.clone())
            .unwrap_or_default(),
        spec.verify_rounds
            .as_ref()
            .map_or(DEFAULT_VERIFY_ROUNDS, |r| r.value),
    ))
}

/// Checks `verify:` (no empty list, no empty command) and `verify_rounds:`
/// (needs a `verify:` beside it, at most [`MAX_VERIFY_ROUNDS`]).
fn check_verify(
    verify: Option<&serde_saphyr::Spanned<CommandsSpec>>,
    rounds: Option<&serde_saphyr::Spanned<u32>>,
    err: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
) -> Result<(), SpecError> {
    if let Some(verify) = verify {
        if verify.value.0.is_empty() {
            return Err(err(
                &verify.referenced,
                "verify is an empty list; give a command line or leave verify out".into(),
            ));
        }
        if let Some(i) = verify.value.0.iter().position(|c| c.trim().is_empty()) {
            return Err(err(
                &verify.referenced,
                format!("verify command {} is empty", i + 1),
            ));
        }
    }
    if let Some(rounds) = rounds {
        if verify.is_none() {
            return Err(err(
                &rounds.referenced,
                "verify_rounds needs a verify command beside it (on the same stage, or both at the top level)".into(),
            ));
        }
        if rounds.value > MAX_VERIFY_ROUNDS {
            return Err(err(
                &rounds.referenced,
                format!(
                    "verify_rounds must be at most {}, got {}",
                    MAX_VERIFY_ROUNDS, rounds.value
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a stage's role, turn limit and rework bounds (not its references).
fn check_stage_fields(
    stage: &StageSpec,
    known_roles: &[String],
    err: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
) -> Result<(), SpecError> {
    if !known_roles.contains(&stage.role.value) {
        let mut known: Vec<&str> = known_roles.iter().map(String::as_str).collect();
        known.sort_unstable();
        return Err(err(
            &stage.role.referenced,
            format!(
                "unknown role \"{}\" (known: {})",
                stage.role.value,
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ),
        ));
    }
    if let Some(turns) = &stage.max_turns
        && turns.value == 0
    {
        return Err(err(
            &turns.referenced,
            "max_turns must be at least 1".into(),
        ));
    }
    if let Some(budget) = &stage.budget {
        check_budget(&budget.value, err)?;
    }
    check_verify(stage.verify.as_ref(), stage.verify_rounds.as_ref(), err)?;
    if let Some(model) = &stage.model
        && model.value.trim().is_empty()
    {
        return Err(err(
            &model.referenced,
            "model is empty; give a model id or an orch.toml profile name, or leave model out"
                .into(),
        ));
    }
    if let Some(to) = &stage.escalate_to
        && to.value.trim().is_empty()
    {
        return Err(err(
            &to.referenced,
            "escalate_to is empty; give an orch.toml profile name, or leave escalate_to out".into(),
        ));
    }
    if let Some(rework) = &stage.rework {
        let rounds = &rework.value.max_rounds;
        if !(1..=MAX_REWORK_ROUNDS).contains(&rounds.value) {
            return Err(err(
                &rounds.referenced,
                format!(
                    "rework max_rounds must be between 1 and {MAX_REWORK_ROUNDS}, got {}",
                    rounds.value
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that every limit of a `budget:` is positive (and finite).
fn check_budget(
    b: &BudgetSpec,
    err: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
) -> Result<(), SpecError> {
    if let Some(t) = &b.tokens
        && t.value == 0
    {
        return Err(err(
            &t.referenced,
            "budget tokens must be at least 1".into(),
        ));
    }
    for (key, value) in [("time_secs", &b.time_secs), ("cost_usd", &b.cost_usd)] {
        if let Some(v) = value
            && !(v.value.is_finite() && v.value > 0.0)
        {
            return Err(err(
                &v.referenced,
                format!(
                    "budget {key} must be a number greater than 0, got {}",
                    v.value
                ),
            ));
        }
    }
    Ok(())
}

/// A cycle as file indices `[a, b, c, a]` where each stage needs the one
/// before it, starting at the earliest stage in file order; `None` if acyclic.
fn find_cycle(graph: &DiGraph<usize, ()>) -> Option<Vec<usize>> {
    let component = tarjan_scc(graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .min_by_key(|scc| scc.iter().map(|n| graph[*n]).min())?;
    let members: BTreeSet<NodeIndex> = component.iter().copied().collect();
    let start = *component.iter().min_by_key(|n| graph[**n])?;

    // Shortest way round: breadth-first from `start` inside the component,
    // visiting neighbours in file order so the answer is deterministic.
    let mut parent: HashMap<NodeIndex, NodeIndex> = HashMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        let mut next: Vec<NodeIndex> = graph
            .neighbors_directed(node, Direction::Outgoing)
            .filter(|n| members.contains(n))
            .collect();
        next.sort_by_key(|n| graph[*n]);
        for n in next {
            if n == start {
                // Walk back from the last stage to `start`, then turn it round.
                let mut path = Vec::new();
                let mut at = node;
                while at != start {
                    path.push(graph[at]);
                    at = *parent.get(&at)?;
                }
                path.push(graph[start]);
                path.reverse();
                path.push(graph[start]);
                return Some(path);
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = parent.entry(n) {
                slot.insert(node);
                queue.push_back(n);
            }
        }
    }
    None
}

/// Checks every `rework` (target exists and is upstream, loops disjoint).
fn check_rework(
    written: &[(serde_saphyr::Spanned<String>, StageSpec)],
    index: &HashMap<&str, usize>,
    graph: &DiGraph<usize, ()>,
    nodes: &[NodeIndex],
    err: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
) -> Result<Vec<Loop>, SpecError> {
    let mut loops: Vec<Loop> = Vec::new();
    for (review, (id, stage)) in written.iter().enumerate() {
        let Some(rework) = &stage.rework else {
            continue;
        };
        let target_name = &rework.value.stage;
        let Some(&target) = index.get(target_name.value.as_str()) else {
            return Err(err(
                &target_name.referenced,
                format!(
                    "unknown stage \"{}\" in rework (it must be a stage that \"{}\" needs)",
                    target_name.value, id.value
                ),
            ));
        };
        if target == review || !has_path_connecting(graph, nodes[target], nodes[review], None) {
            return Err(err(
                &target_name.referenced,
                format!(
                    "rework stage \"{}\" is not upstream of \"{}\": rework can only send work back to a stage that \"{}\" needs, directly or transitively",
                    target_name.value, id.value, id.value
                ),
            ));
        }
        let body: BTreeSet<usize> = (0..written.len())
            .filter(|&i| {
                has_path_connecting(graph, nodes[target], nodes[i], None)
                    && has_path_connecting(graph, nodes[i], nodes[review], None)
            })
            .collect();
        if let Some(other) = loops.iter().find(|l| !l.body.is_disjoint(&body)) {
            return Err(err(
                &rework.referenced,
                format!(
                    "the rework loop of \"{}\" overlaps the rework loop of \"{}\"; rework loops may not share stages",
                    id.value, written[other.review].0.value
                ),
            ));
        }
        loops.push(Loop {
            review,
            target,
            rounds: rework.value.max_rounds.value,
            body,
        });
    }
    Ok(loops)
}

/// The stages as written plus every rework round, with `needs` rewired so
/// that stages after a review wait for its last round.
/// `default_verify`: the pipeline's `verify:` and `verify_rounds:`, taken
/// by every stage that sets no `verify:` of its own.
fn unroll(
    written: &[(serde_saphyr::Spanned<String>, StageSpec)],
    loops: &[Loop],
    default_verify: &(Vec<String>, u32),
) -> Vec<Stage> {
    let stage_id = |i: usize| StageId(written[i].0.value.clone());
    let round_id = |i: usize, k: u32| StageId(format!("{}.r{k}", written[i].0.value));
    let positions = positions(written);

    let mut stages: Vec<Stage> = written
        .iter()
        .map(|(id, spec)| {
            let mut needs: Vec<StageId> = Vec::new();
            for need in &spec.needs.0 {
                let need = StageId(need.value.clone());
                if !needs.contains(&need) {
                    needs.push(need);
                }
            }
            Stage {
                id: StageId(id.value.clone()),
                role: spec.role.value.clone(),
                needs,
                task: spec.task.clone(),
                max_turns: spec.max_turns.as_ref().map(|t| t.value),
                budget: spec
                    .budget
                    .as_ref()
                    .map_or_else(Budget::default, |b| Budget::from(&b.value)),
                round: 1,
                base_id: StageId(id.value.clone()),
                run_if_changes_requested_by: None,
                on_failure: spec.on_failure,
                verify: spec
                    .verify
                    .as_ref()
                    .map_or_else(|| default_verify.0.clone(), |v| v.value.0.clone()),
                verify_rounds: match (&spec.verify, &spec.verify_rounds) {
                    (_, Some(r)) => r.value,
                    (Some(_), None) => DEFAULT_VERIFY_ROUNDS,
                    (None, None) => default_verify.1,
                },
                text_tool_calls: spec.text_tool_calls.unwrap_or(true),
                text_result: false,
                model: spec
                    .model
                    .as_ref()
                    .map(|m| m.value.trim().to_owned())
                    .filter(|m| !m.is_empty()),
                escalate_to: spec.escalate_to.as_ref().map(|m| m.value.trim().to_owned()),
                required: spec.required.unwrap_or(true),
                context_files: spec.context_files.is_none_or(|c| c.0),
                replica: None,
                select: None,
                sampling: crate::llm::Sampling::default(),
            }
        })
        .collect();

    for lp in loops {
        let review = stage_id(lp.review);
        let last_review = round_id(lp.review, lp.rounds + 1);
        // Outside the loop, whoever waited for the review waits for its last round.
        for stage in &mut stages {
            if lp.body.contains(&stage_index(&positions, &stage.base_id)) {
                continue;
            }
            for need in &mut stage.needs {
                if *need == review {
                    *need = last_review.clone();
                }
            }
        }
        let mut previous_review = review;
        for k in 2..=lp.rounds + 1 {
            for &i in &lp.body {
                let original = &stages[i];
                let needs = if i == lp.target {
                    vec![previous_review.clone()]
                } else {
                    original
                        .needs
                        .iter()
                        .map(|need| {
                            let j = stage_index(&positions, need);
                            if lp.body.contains(&j) {
                                round_id(j, k)
                            } else {
                                need.clone()
                            }
                        })
                        .collect()
                };
                stages.push(Stage {
                    id: round_id(i, k),
                    role: original.role.clone(),
                    needs,
                    task: original.task.clone(),
                    max_turns: original.max_turns,
                    budget: original.budget,
                    round: k,
                    base_id: original.base_id.clone(),
                    run_if_changes_requested_by: Some(previous_review.clone()),
                    on_failure: original.on_failure,
                    verify: original.verify.clone(),
                    verify_rounds: original.verify_rounds,
                    text_tool_calls: original.text_tool_calls,
                    text_result: original.text_result,
                    model: original.model.clone(),
                    escalate_to: original.escalate_to.clone(),
                    required: original.required,
                    context_files: original.context_files,
                    replica: None,
                    select: None,
                    sampling: original.sampling,
                });
            }
            previous_review = round_id(lp.review, k);
        }
    }
    stages
}

/// The longest stage id, in bytes: ids name a branch component
/// (`orch/<run>/<id>`, with `.rN` and `.vN` suffixes) and the directory of
/// the stage's record, both of which the file system caps at 255 bytes.
pub(crate) const MAX_STAGE_ID_BYTES: usize = 100;

/// The file index of a stage as written; `usize::MAX` for none (only reached
/// for ids that are not written stages, which no loop body contains).
fn stage_index(positions: &HashMap<&str, usize>, id: &StageId) -> usize {
    positions.get(id.0.as_str()).copied().unwrap_or(usize::MAX)
}

/// The file index of every stage as written, so finding one is O(1) (a
/// scan per stage made planning quadratic in the number of stages).
fn positions(written: &[(serde_saphyr::Spanned<String>, StageSpec)]) -> HashMap<&str, usize> {
    written
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.value.as_str(), i))
        .collect()
}

/// Tie-breaking key of a stage in the plan: (anchor file index, round, own file index).
type OrderKey = (usize, u32, usize);

/// Kahn's algorithm with ties broken by (file index of the stage, or of the
/// review a round answers; round; file index). `None` if the graph has a cycle.
fn topological_order(
    stages: Vec<Stage>,
    written: &[(serde_saphyr::Spanned<String>, StageSpec)],
    loops: &[Loop],
) -> Option<Vec<Stage>> {
    let positions = positions(written);
    let key = |stage: &Stage| -> OrderKey {
        let own = stage_index(&positions, &stage.base_id);
        if stage.round == 1 {
            return (own, 0, own);
        }
        let anchor = loops
            .iter()
            .find(|lp| lp.body.contains(&own))
            .map_or(own, |lp| lp.review);
        (anchor, stage.round, own)
    };
    let position: HashMap<&StageId, usize> =
        stages.iter().enumerate().map(|(i, s)| (&s.id, i)).collect();
    let mut graph: DiGraph<usize, ()> = DiGraph::new();
    let nodes: Vec<NodeIndex> = (0..stages.len()).map(|i| graph.add_node(i)).collect();
    for (i, stage) in stages.iter().enumerate() {
        for need in &stage.needs {
            graph.add_edge(nodes[*position.get(need)?], nodes[i], ());
        }
    }

    let mut missing: Vec<usize> = nodes
        .iter()
        .map(|n| graph.neighbors_directed(*n, Direction::Incoming).count())
        .collect();
    let mut ready: BinaryHeap<Reverse<(OrderKey, usize)>> = (0..stages.len())
        .filter(|&i| missing[i] == 0)
        .map(|i| Reverse((key(&stages[i]), i)))
        .collect();
    let mut order = Vec::with_capacity(stages.len());
    while let Some(Reverse((_, i))) = ready.pop() {
        order.push(i);
        for next in graph.neighbors_directed(nodes[i], Direction::Outgoing) {
            let j = graph[next];
            missing[j] -= 1;
            if missing[j] == 0 {
                ready.push(Reverse((key(&stages[j]), j)));
            }
        }
    }
    if order.len() != stages.len() {
        return None;
    }
    let mut slots: Vec<Option<Stage>> = stages.into_iter().map(Some).collect();
    order.into_iter().map(|i| slots[i].take()).collect()
}
