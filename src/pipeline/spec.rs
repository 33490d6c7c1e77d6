//! Raw pipeline file structs, as serde reads them from YAML.
//!
//! Every value a later check may complain about is wrapped in [`Spanned`] so
//! the error can name its line and column. Stages are kept in file order
//! (a `Vec`, not a map) so the plan's tie-breaking follows the file.

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;
use std::fmt;

/// A pipeline file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PipelineSpec {
    /// The pipeline name; defaults to the file stem and must equal it when given.
    #[serde(default)]
    pub name: Option<Spanned<String>>,
    /// One line saying what the pipeline does.
    #[serde(default)]
    pub description: String,
    /// The stages, in file order.
    pub stages: Spanned<StagesSpec>,
    /// Put the repository's AGENTS.md/CLAUDE.md into system prompts (default true).
    #[serde(default)]
    pub project_instructions: Option<bool>,
    /// The lane setup command (`setup: "npm ci"` or `setup: {command, lockfiles, timeout_secs}`).
    #[serde(default)]
    pub setup: Option<Spanned<SetupSpec>>,
    /// The default `verify:` of every stage that sets none (one or a list).
    #[serde(default)]
    pub verify: Option<Spanned<CommandsSpec>>,
    /// The default `verify_rounds:` of the stages that take the pipeline's `verify:`.
    #[serde(default)]
    pub verify_rounds: Option<Spanned<u32>>,
    /// How many rounds `orch react` may add to a run from its pull request (default 3).
    #[serde(default)]
    pub react_rounds: Option<Spanned<u32>>,
}

/// `setup:` as written: a command line, or a mapping with the command, the
/// lockfiles whose contents key its cache, and a timeout.
#[derive(Debug)]
pub(super) struct SetupSpec(pub super::types::LaneSetup);

impl<'de> Deserialize<'de> for SetupSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Full {
            command: String,
            #[serde(default)]
            lockfiles: Option<Vec<String>>,
            #[serde(default)]
            timeout_secs: Option<u64>,
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Inner {
            One(String),
            Full(Full),
        }
        let setup = match Inner::deserialize(deserializer).map_err(|_| {
            de::Error::custom(
                "setup must be a command line or a mapping with `command` and optional `lockfiles` (a list) and `timeout_secs`",
            )
        })? {
            Inner::One(command) => super::types::LaneSetup {
                command,
                lockfiles: None,
                timeout_secs: None,
            },
            Inner::Full(f) => super::types::LaneSetup {
                command: f.command,
                lockfiles: f.lockfiles,
                timeout_secs: f.timeout_secs,
            },
        };
        Ok(SetupSpec(setup))
    }
}

/// The `stages:` mapping, in file order.
#[derive(Debug, Default)]
pub(super) struct StagesSpec(pub Vec<(Spanned<String>, StageSpec)>);

/// One stage as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StageSpec {
    /// The role name.
    pub role: Spanned<String>,
    /// Upstream stage ids.
    #[serde(default)]
    pub needs: NeedsSpec,
    /// The task template.
    #[serde(default)]
    pub task: String,
    /// A per-stage turn limit overriding the role's.
    #[serde(default)]
    pub max_turns: Option<Spanned<u32>>,
    /// A bounded rework loop back to an upstream stage.
    #[serde(default)]
    pub rework: Option<Spanned<ReworkSpec>>,
    /// What a failure of this stage does to the run (`stop` by default).
    #[serde(default)]
    pub on_failure: super::types::OnFailure,
    /// Token, time and cost limits of the stage.
    #[serde(default)]
    pub budget: Option<Spanned<BudgetSpec>>,
    /// Commands that must pass after the agent finishes (one or a list).
    #[serde(default)]
    pub verify: Option<Spanned<CommandsSpec>>,
    /// Extra rounds the agent gets to make verify pass (default 2).
    #[serde(default)]
    pub verify_rounds: Option<Spanned<u32>>,
    /// Recover tool calls written as text (default true).
    #[serde(default)]
    pub text_tool_calls: Option<bool>,
    /// The stage's model: a model id, or the name of an `orch.toml` profile.
    #[serde(default)]
    pub model: Option<Spanned<String>>,
    /// The `orch.toml` profile a failed attempt is retried with, once.
    #[serde(default)]
    pub escalate_to: Option<Spanned<String>>,
    /// Whether the run fails when this stage produces no result (default
    /// true); `false`: it ends `no_change` and the run goes on without it.
    #[serde(default)]
    pub required: Option<bool>,
    /// Show the files the task names in the first message (default on).
    #[serde(default)]
    pub context_files: Option<ContextFilesSpec>,
    /// Best of N: run the stage this many times side by side (2–8).
    #[serde(default)]
    pub replicas: Option<Spanned<u32>>,
    /// One model per replica (or one for all).
    #[serde(default)]
    pub models: Option<Spanned<Vec<String>>>,
    /// One sampling seed per replica (or one for all).
    #[serde(default)]
    pub seeds: Option<Spanned<Vec<u64>>>,
    /// The sampling temperature: one number, or one per replica.
    #[serde(default)]
    pub temperature: Option<Spanned<NumbersSpec>>,
    /// How the winner among the replicas is chosen.
    #[serde(default)]
    pub select: Option<Spanned<SelectSpec>>,
}

/// `select: { strategy, command, role }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SelectSpec {
    /// `tests` (default), `reviewer` or `tests+reviewer`.
    #[serde(default)]
    pub strategy: Option<Spanned<String>>,
    /// The check run on each replica instead of the stage's `verify`.
    #[serde(default)]
    pub command: Option<Spanned<CommandsSpec>>,
    /// The reviewer's role (default `reviewer`).
    #[serde(default)]
    pub role: Option<Spanned<String>>,
}

/// A number or a list of numbers.
#[derive(Debug)]
pub(super) struct NumbersSpec(pub Vec<f64>);

impl<'de> Deserialize<'de> for NumbersSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Inner {
            One(f64),
            Many(Vec<f64>),
        }
        Ok(
            match Inner::deserialize(deserializer).map_err(|_| {
                de::Error::custom("temperature must be a number or a list of numbers")
            })? {
                Inner::One(c) => NumbersSpec(vec![c]),
                Inner::Many(cs) => NumbersSpec(cs),
            },
        )
    }
}

/// `context_files: on | off` as written (a YAML boolean too); anything else
/// is an error at its line naming the value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ContextFilesSpec(pub bool);

impl<'de> Deserialize<'de> for ContextFilesSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Inner {
            Bool(bool),
            Word(String),
        }
        let bad = |what: &str| {
            de::Error::custom(format!(
                "context_files: {what} is not a switch; use on or off"
            ))
        };
        match Inner::deserialize(deserializer).map_err(|_| bad("this value"))? {
            Inner::Bool(b) => Ok(ContextFilesSpec(b)),
            Inner::Word(w) => match w.trim() {
                "on" | "true" => Ok(ContextFilesSpec(true)),
                "off" | "false" => Ok(ContextFilesSpec(false)),
                other => Err(bad(&format!("{other:?}"))),
            },
        }
    }
}

/// `verify:` as written: one command line, or a list of them.
#[derive(Debug)]
pub(super) struct CommandsSpec(pub Vec<String>);

impl<'de> Deserialize<'de> for CommandsSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Inner {
            One(String),
            Many(Vec<String>),
        }
        Ok(
            match Inner::deserialize(deserializer).map_err(|_| {
                de::Error::custom("verify must be a command line or a list of command lines")
            })? {
                Inner::One(c) => CommandsSpec(vec![c]),
                Inner::Many(cs) => CommandsSpec(cs),
            },
        )
    }
}

/// `budget: { tokens, time_secs, cost_usd }` as written; every key optional.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetSpec {
    /// Prompt plus completion tokens of the stage.
    #[serde(default)]
    pub tokens: Option<Spanned<u64>>,
    /// Wall time of the stage in seconds.
    #[serde(default)]
    pub time_secs: Option<Spanned<f64>>,
    /// Cost of the stage in US dollars.
    #[serde(default)]
    pub cost_usd: Option<Spanned<f64>>,
    /// For a stage with `replicas:`: `per_replica` (default) or `shared`.
    #[serde(default)]
    pub replicas: Option<Spanned<String>>,
}

impl From<&BudgetSpec> for crate::budget::Budget {
    /// The limits of a `budget:` (checked by the DAG builder before use).
    fn from(b: &BudgetSpec) -> Self {
        crate::budget::Budget {
            tokens: b.tokens.as_ref().map(|t| t.value),
            time_secs: b.time_secs.as_ref().map(|t| t.value),
            cost_usd: b.cost_usd.as_ref().map(|t| t.value),
        }
    }
}

/// `rework: { stage, max_rounds }` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReworkSpec {
    /// The upstream stage to run again when this stage requests changes.
    pub stage: Spanned<String>,
    /// How many extra rounds at most (1..=5).
    pub max_rounds: Spanned<u32>,
}

/// `needs:` as written: a list of stage ids, or one id as a plain string
/// (GitHub Actions accepts both).
#[derive(Debug, Default)]
pub(super) struct NeedsSpec(pub Vec<Spanned<String>>);

impl<'de> Deserialize<'de> for StagesSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StagesVisitor;

        impl<'de> Visitor<'de> for StagesVisitor {
            type Value = StagesSpec;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping of stage ids to stages")
            }

            // `stages:` with nothing after it; reported as "no stages" later.
            fn visit_unit<E: de::Error>(self) -> Result<StagesSpec, E> {
                Ok(StagesSpec::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<StagesSpec, A::Error> {
                let mut stages = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    let stage = map.next_value::<StageSpec>()?;
                    stages.push((key, stage));
                }
                Ok(StagesSpec(stages))
            }
        }

        deserializer.deserialize_any(StagesVisitor)
    }
}

impl<'de> Deserialize<'de> for NeedsSpec {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = Spanned::<NeedsInner>::deserialize(deserializer)?;
        let items = match spanned.value {
            NeedsInner::One(id) => vec![Spanned::new(id, spanned.referenced, spanned.defined)],
            NeedsInner::Many(ids) => ids,
        };
        Ok(NeedsSpec(items))
    }
}

/// `needs:` before the single-string form gets its location.
enum NeedsInner {
    One(String),
    Many(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for NeedsInner {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NeedsVisitor;

        impl<'de> Visitor<'de> for NeedsVisitor {
            type Value = NeedsInner;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a stage id or a list of stage ids")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<NeedsInner, E> {
                Ok(NeedsInner::One(v.to_owned()))
            }

            fn visit_unit<E: de::Error>(self) -> Result<NeedsInner, E> {
                Ok(NeedsInner::Many(Vec::new()))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<NeedsInner, A::Error> {
                let mut ids = Vec::new();
                while let Some(id) = seq.next_element::<Spanned<String>>()? {
                    ids.push(id);
                }
                Ok(NeedsInner::Many(ids))
            }
        }

        deserializer.deserialize_any(NeedsVisitor)
    }
}
