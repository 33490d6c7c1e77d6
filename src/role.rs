//! Roles: Markdown files with YAML front matter that say who an agent is.
//!
//! The format is compatible with Claude Code agent files (`name`,
//! `description`, `tools`, `model`, `color`) plus orch's own keys
//! (`read_only`, `max_turns`, `bash`, `result`) and sampling keys
//! (`temperature`, `seed`, `max_tokens`, `tool_choice`) and `tool_calling`
//! that override the profile for this role's stages. The body after the front matter is the
//! system prompt template, kept verbatim apart from surrounding blank lines.
//!
//! Claude Code files load unchanged: a tool orch does not have (`WebFetch`,
//! `WebSearch`, `TodoWrite`, `NotebookEdit`, …) is not offered and
//! `mcpServers:` with the `mcp__<server>__<tool>` entries of `tools:` say
//! which MCP servers and tools the role gets ([`mcp`], `crate::mcp`); a
//! front-matter key orch does not know (`memory`, …) is
//! ignored; each becomes one line in [`Role::warnings`], not an error. Keys
//! that narrow what the agent may do (`permissionMode`, `disallowedTools`,
//! `maxTurns`) are mapped onto orch's ([`claude`]), or the role does not
//! load: never silently wider. `hooks` are run as [`crate::hooks`] says (a
//! repository's only when the user trusts them).
//!
//! A role's id is its `name:` (Claude Code keys agents by it), else the
//! file stem.
//!
//! Invariants of a parsed [`Role`]: `tools` holds orch tool names only, in
//! [`KNOWN_TOOLS`] order, without duplicates, always including `finish`; a
//! read-only role never holds `write_file` or `edit_file`.

mod claude;
mod mcp;
mod tools;

pub use tools::{BashRules, KNOWN_TOOLS};
use tools::{ToolsSpec, orch_tool_name};

use crate::pipeline::SpecError;
use crate::toolname::ToolName;
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};
use serde_saphyr::Spanned;
use std::path::Path;

/// `model:` values that mean "the run's model" (Claude Code's aliases)
/// unless the profile maps them (`[models] aliases`).
pub const CLAUDE_MODEL_ALIASES: &[&str] = &["inherit", "sonnet", "opus", "haiku"];

/// Front-matter keys orch reads; any other key is ignored with a warning.
const KNOWN_KEYS: &[&str] = &[
    "name",
    "description",
    "tools",
    "model",
    "color",
    "read_only",
    "max_turns",
    "bash",
    "result",
    "temperature",
    "seed",
    "max_tokens",
    "tool_choice",
    "text_edits",
    "tool_calling",
    "prompt_cache",
    "context_files",
    "permissionMode",
    "disallowedTools",
    "maxTurns",
    "hooks",
    "escalate_to",
    "skills",
    "mcpServers",
];

/// The turn limit of a role that does not set `max_turns`.
pub const DEFAULT_MAX_TURNS: u32 = 30;

/// A validated role.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Role {
    /// The role's id: its `name:`, else the file stem.
    pub name: String,
    /// One line saying what the role is for.
    pub description: String,
    /// The orch tools the role may call, in [`KNOWN_TOOLS`] order; always has `finish`.
    pub tools: Vec<String>,
    /// The model the file names (`None` for none and for Claude Code's
    /// aliases); used only as [`resolve_model`] decides.
    pub model: Option<String>,
    /// A Claude Code alias the file names (`sonnet`, `opus`, `haiku`): the
    /// run's model unless `[models] aliases` maps it.
    #[serde(default)]
    pub model_alias: Option<String>,
    /// Why the role's stages use the model they use, when it is not the
    /// one the file names (set when the plan is made).
    #[serde(default)]
    pub model_note: Option<String>,
    /// Whether the role may not change the tree (no `write_file`/`edit_file`).
    pub read_only: bool,
    /// The turn limit of one agent run of this role.
    pub max_turns: u32,
    /// The role's shell policy.
    pub bash: BashRules,
    /// A text answer is the role's result (`result: text`); otherwise only
    /// `finish` ends its stage as a success.
    #[serde(default)]
    pub text_result: bool,
    /// Sampling settings that override the profile for this role's stages.
    #[serde(default)]
    pub sampling: crate::llm::Sampling,
    /// `text_edits:` as written: whether search/replace and whole-file
    /// blocks in the model's text are applied (`None`: the default, see
    /// [`crate::llm::textedits::text_edits_enabled`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_edits: Option<bool>,
    /// `tool_calling:` — how this role's stages ask for tool calls,
    /// overriding the profile's (`auto`, `native`, `constrained`, `text`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calling: Option<crate::llm::ToolCalling>,
    /// `prompt_cache:` — `on` or `off`: whether this role's stages mark
    /// their prompt for caching, when the profile says `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<crate::llm::PromptCache>,
    /// What was not taken from the file: tools orch does not have (not
    /// offered) and keys it does not know (ignored), one line each.
    #[serde(default)]
    pub warnings: Vec<String>,
    /// `sandbox:` — the kernel sandbox profile of its tool processes
    /// (default: `read-only` for read-only roles, else `workspace-write`).
    #[serde(default)]
    pub sandbox: Option<crate::sandbox_profile::Profile>,
    /// `network: on | off` — TCP for its tool processes (default: on for
    /// writing roles, off for read-only ones).
    #[serde(default)]
    pub network: Option<bool>,
    /// `escalate_to:` — the `orch.toml` profile that retries a failed stage
    /// of this role once (a stage's own `escalate_to:` wins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalate_to: Option<String>,
    /// `context_files: on | off` — the files its task names are shown in
    /// its stages' first message (default on; a stage can turn it off too).
    #[serde(default = "on")]
    pub context_files: bool,
    /// `skills:` — the Agent Skills its stages are offered, by name
    /// (`None`: every skill found; `[]`: none). Claude Code agent files'
    /// `skills:` is read the same way (docs/skills.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<String>>,
    /// `hooks:` — Claude Code hooks of the role's agents ([`crate::hooks`]);
    /// a repository's run only when the user trusts them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hooks: Vec<crate::hooks::Hook>,
    /// `mcpServers:`, the `mcp__…` entries of `tools:` and the rules on MCP
    /// tools: the MCP servers and tools its stages get (none unless named).
    #[serde(default, skip_serializing_if = "crate::mcp::RoleMcp::is_empty")]
    pub mcp: crate::mcp::RoleMcp,
    /// The system prompt template (the Markdown body).
    pub prompt: String,
    /// Where the role came from: a file path, or `built-in roles/<name>.md`.
    pub origin: String,
}

impl crate::sandbox::RoleAccess for Role {
    fn sandbox_profile(&self) -> Option<crate::sandbox_profile::Profile> {
        self.sandbox
    }

    fn network(&self) -> Option<bool> {
        self.network
    }

    fn read_only(&self) -> bool {
        self.read_only
    }
}

/// Which model a role's stages use, and why (for the record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelChoice {
    /// The model to ask for instead of the run's; `None` keeps the run's.
    pub model: Option<String>,
    /// Why, when the role names a model: one line for the record.
    pub note: Option<String>,
}

/// How a role's `model:` is resolved against the run.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelRouting<'a> {
    /// `[models] aliases` of the profile: role model name → served model.
    pub aliases: Option<&'a std::collections::BTreeMap<String, String>>,
    /// The models the server lists (the preflight's `GET /models`); `None`
    /// when unknown, which keeps the run's model unless an alias maps it.
    pub served: Option<&'a [String]>,
    /// `--model` was given on the command line: it overrides every role.
    pub cli_model: bool,
}

/// The model a role's stages use: an alias mapping wins, then a model the
/// server serves; otherwise (and always under `--model`) the run's model,
/// with a note saying so.
pub fn resolve_model(role: &Role, routing: ModelRouting<'_>) -> ModelChoice {
    let Some(wanted) = role.model.as_deref().or(role.model_alias.as_deref()) else {
        return ModelChoice {
            model: None,
            note: None,
        };
    };
    if routing.cli_model {
        return ModelChoice {
            model: None,
            note: Some(format!(
                "role `{}` names model `{wanted}`; --model overrides it",
                role.name
            )),
        };
    }
    if let Some(mapped) = routing.aliases.and_then(|a| a.get(wanted)) {
        return ModelChoice {
            model: Some(mapped.clone()),
            note: Some(format!(
                "role `{}` names model `{wanted}`; [models] aliases maps it to `{mapped}`",
                role.name
            )),
        };
    }
    if routing
        .served
        .is_some_and(|served| served.iter().any(|m| m == wanted))
    {
        return ModelChoice {
            model: Some(wanted.to_owned()),
            note: None,
        };
    }
    if role.model.is_none() {
        // An unmapped Claude alias: the run's model, as `inherit` would.
        return ModelChoice {
            model: None,
            note: None,
        };
    }
    let why = if routing.served.is_some() {
        "the server does not serve it"
    } else {
        "no [models] alias maps it and the server's models are unknown"
    };
    ModelChoice {
        model: None,
        note: Some(format!(
            "role `{}` names model `{wanted}`; {why}, so the run's model is used",
            role.name
        )),
    }
}

/// The front matter as written (keys outside [`KNOWN_KEYS`] are ignored).
#[derive(Debug, Deserialize)]
struct RoleSpec {
    #[serde(default)]
    name: Option<Spanned<String>>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tools: Option<ToolsSpec>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    escalate_to: Option<Spanned<String>>,
    /// Claude Code's display colour: accepted so its files load, not used.
    #[serde(default)]
    #[allow(dead_code)]
    color: Option<IgnoredAny>,
    #[serde(default)]
    read_only: bool,
    #[serde(default)]
    max_turns: Option<Spanned<u32>>,
    #[serde(default)]
    bash: BashRules,
    /// `result: finish` (the default) or `result: text`.
    #[serde(default)]
    result: ResultSpec,
    #[serde(default)]
    temperature: Option<Spanned<f64>>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    max_tokens: Option<Spanned<u64>>,
    #[serde(default)]
    tool_choice: Option<crate::llm::ToolChoice>,
    #[serde(default)]
    text_edits: Option<bool>,
    tool_calling: Option<crate::llm::ToolCalling>,
    #[serde(default)]
    prompt_cache: Option<Spanned<OnOff>>,
    #[serde(default)]
    sandbox: Option<Spanned<String>>,
    #[serde(default)]
    network: Option<Spanned<OnOff>>,
    #[serde(default)]
    context_files: Option<Spanned<OnOff>>,
    /// Claude Code's permission mode, mapped by [`claude::mode`].
    #[serde(default, rename = "permissionMode")]
    permission_mode: Option<Spanned<String>>,
    /// Claude Code's tool denylist (`Bash`, `Bash(git push:*)`, …).
    #[serde(default, rename = "disallowedTools")]
    disallowed_tools: Option<ToolsSpec>,
    /// Claude Code's turn limit.
    #[serde(default, rename = "maxTurns")]
    claude_max_turns: Option<Spanned<u32>>,
    /// Claude Code's MCP servers of this agent (names or inline definitions).
    #[serde(default, rename = "mcpServers")]
    mcp_servers: Option<Spanned<serde_json::Value>>,
    /// `skills:` — a list or a comma-separated string (Claude Code).
    #[serde(default)]
    skills: Option<ToolsSpec>,
    /// Claude Code's hooks, in its shape (`crate::hooks::parse`).
    #[serde(default)]
    hooks: Option<Spanned<serde_json::Value>>,
}

/// What ends a role's stage as a success.
#[derive(Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ResultSpec {
    /// Only a `finish` call.
    #[default]
    Finish,
    /// `finish`, or a non-empty text answer.
    Text,
}

fn on() -> bool {
    true
}

/// `network:` as written: `on`/`off` or a YAML boolean.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum OnOff {
    Bool(bool),
    Word(String),
}

/// Parses a role file. `origin` names the file in errors; the role's id is
/// its `name:`, else (when `origin` ends in `.md`) the file stem.
pub fn parse_role(text: &str, origin: &str) -> Result<Role, SpecError> {
    let (yaml, body) = split_front_matter(text, origin, "a role file")?;
    // The front matter starts on line 2, after the opening `---`.
    const LINE_OFFSET: u64 = 1;
    let mut warnings = Vec::new();
    let strict: Result<RoleSpec, _> = serde_saphyr::from_str(yaml);
    let requoted;
    let (spec, yaml) = match strict {
        Ok(spec) => (spec, yaml),
        Err(err) => {
            // Claude Code reads `description: … Context: …` (a plain value
            // holding `: `), which strict YAML refuses; so does orch, by
            // quoting such values, and says so.
            let strict_err = SpecError::from_yaml(origin, &err, LINE_OFFSET);
            let Some((text, lines)) = requote_plain_values(yaml) else {
                return Err(strict_err);
            };
            requoted = text;
            let spec = serde_saphyr::from_str(&requoted).map_err(|_| strict_err)?;
            let lines: Vec<String> = lines
                .iter()
                .map(|l| (l + LINE_OFFSET as usize).to_string())
                .collect();
            warnings.push(format!(
                "front matter is not strict YAML (line {}: an unquoted value holding `: `); read as plain text, as Claude Code does",
                lines.join(", ")
            ));
            (spec, requoted.as_str())
        }
    };
    // The keys as written, to name the ones orch ignores.
    let keys: std::collections::BTreeMap<String, IgnoredAny> =
        serde_saphyr::from_str(yaml).unwrap_or_default();
    for key in keys.keys().filter(|k| !KNOWN_KEYS.contains(&k.as_str())) {
        warnings.push(format!(
            "key `{key}` is not used by orch (ignored); remove it, or see docs/project-conventions.md for the keys orch reads"
        ));
    }
    let at = |location: &serde_saphyr::Location, message: String| {
        SpecError::at(origin, location, LINE_OFFSET, message)
    };

    let name = match (&spec.name, role_file_stem(origin)) {
        (Some(name), _) if name.value.trim().is_empty() => {
            return Err(at(&name.referenced, "role name is empty".into()));
        }
        (Some(name), _)
            if name
                .value
                .trim()
                .chars()
                .any(|c| c.is_control() || c == '/' || c == '\\') =>
        {
            return Err(at(
                &name.referenced,
                format!(
                    "role name {:?} may not hold `/`, `\\` or control characters",
                    name.value.trim()
                ),
            ));
        }
        (Some(name), _) => name.value.trim().to_owned(),
        (None, Some(stem)) => stem.to_owned(),
        (None, None) => return Err(SpecError::new(origin, 2, 1, "missing field `name`")),
    };

    // `hooks:` run as docs/hooks.md says (a repository's only when trusted).
    let hooks = match &spec.hooks {
        None => Vec::new(),
        Some(h) => crate::hooks::parse(&h.value, origin, &mut warnings)
            .map_err(|m| at(&h.referenced, format!("hooks: {m}")))?,
    };
    let mode = claude::mode(spec.permission_mode.as_ref(), &at)?;
    let narrowing = claude::narrowing(mode, spec.disallowed_tools.as_ref(), &at, &mut warnings)?;
    let read_only = spec.read_only || mode == claude::Mode::ReadOnly;
    let mut tools = match &spec.tools {
        Some(tools) => resolve_tools(&tools.0, spec.read_only, &at, &mut warnings)?,
        None => KNOWN_TOOLS
            .iter()
            .filter(|tool| !(read_only && ToolName::is_write_name(tool)))
            .map(|tool| (*tool).to_owned())
            .collect(),
    };
    let mut bash = spec.bash;
    let mcp = mcp::read(
        spec.mcp_servers.as_ref(),
        spec.tools.as_ref(),
        spec.disallowed_tools.as_ref(),
        &mut bash,
        &at,
    )?;
    claude::apply(&narrowing, mode, &mut tools, &mut bash, &mut warnings);

    let max_turns =
        claude::max_turns(spec.max_turns.as_ref(), spec.claude_max_turns.as_ref(), &at)?;
    let max_turns = match max_turns {
        Some(turns) if turns.value == 0 => {
            return Err(at(&turns.referenced, "max_turns must be at least 1".into()));
        }
        Some(turns) => turns.value,
        None => DEFAULT_MAX_TURNS,
    };

    // Claude Code's aliases name Anthropic models an OpenAI-compatible server
    // does not know; like `inherit`, they keep the run's model.
    let written = spec
        .model
        .map(|m| m.trim().to_owned())
        .filter(|m| !m.is_empty() && m != "inherit");
    let (model, model_alias) = match written {
        Some(m) if CLAUDE_MODEL_ALIASES.contains(&m.as_str()) => (None, Some(m)),
        other => (other, None),
    };
    if let Some(t) = &spec.temperature
        && !(t.value.is_finite() && (0.0..=2.0).contains(&t.value))
    {
        return Err(at(
            &t.referenced,
            format!("temperature {} is out of range: expected 0 to 2", t.value),
        ));
    }
    if let Some(m) = &spec.max_tokens
        && m.value == 0
    {
        return Err(at(&m.referenced, "max_tokens must be at least 1".into()));
    }
    let sampling = crate::llm::Sampling {
        temperature: spec.temperature.map(|t| t.value),
        seed: spec.seed,
        max_tokens: spec.max_tokens.map(|m| m.value),
        tool_choice: spec.tool_choice,
    };

    let sandbox = match &spec.sandbox {
        None => None,
        Some(p) => Some(
            crate::sandbox_profile::Profile::parse(p.value.trim()).ok_or_else(|| {
                at(
                    &p.referenced,
                    format!(
                        "sandbox: {:?} is not a profile; use workspace-write, read-only or off",
                        p.value
                    ),
                )
            })?,
        ),
    };
    let switch = |key: &str, n: &Spanned<OnOff>| match &n.value {
        OnOff::Bool(b) => Ok(*b),
        OnOff::Word(w) if w == "on" => Ok(true),
        OnOff::Word(w) if w == "off" => Ok(false),
        OnOff::Word(w) => Err(at(&n.referenced, format!("{key}: {w:?} must be on or off"))),
    };
    let network = spec
        .network
        .as_ref()
        .map(|n| switch("network", n))
        .transpose()?;
    let prompt_cache = spec
        .prompt_cache
        .as_ref()
        .map(|n| switch("prompt_cache", n))
        .transpose()?
        .map(|on| {
            if on {
                crate::llm::PromptCache::On
            } else {
                crate::llm::PromptCache::Off
            }
        });
    let context_files = spec
        .context_files
        .as_ref()
        .map(|n| switch("context_files", n))
        .transpose()?
        .unwrap_or(true);

    let escalate_to = match &spec.escalate_to {
        Some(to) if to.value.trim().is_empty() => {
            return Err(at(
                &to.referenced,
                "escalate_to is empty; give an orch.toml profile name, or leave escalate_to out"
                    .into(),
            ));
        }
        to => to.as_ref().map(|t| t.value.trim().to_owned()),
    };
    Ok(Role {
        name,
        description: spec.description.trim().to_owned(),
        tools,
        model,
        model_alias,
        model_note: None,
        read_only,
        max_turns,
        bash,
        text_result: spec.result == ResultSpec::Text,
        sampling,
        text_edits: spec.text_edits,
        tool_calling: spec.tool_calling,
        prompt_cache,
        warnings,
        sandbox,
        network,
        escalate_to,
        context_files,
        skills: spec.skills.map(|s| {
            let mut names: Vec<String> = s.0.iter().map(|n| n.value.trim().to_owned()).collect();
            names.dedup();
            names
        }),
        hooks,
        mcp,
        prompt: body.trim_start_matches(['\r', '\n']).trim_end().to_owned(),
        origin: origin.to_owned(),
    })
}

/// Maps written tool names to orch names, checks them against `read_only`,
/// and returns them in [`KNOWN_TOOLS`] order with `finish` added. A name
/// orch has no tool for is not offered; `warnings` says so.
fn resolve_tools(
    written: &[Spanned<String>],
    read_only: bool,
    at: &dyn Fn(&serde_saphyr::Location, String) -> SpecError,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, SpecError> {
    let mut granted = vec![false; KNOWN_TOOLS.len()];
    let mut missing: Vec<&str> = Vec::new();
    for item in written {
        // MCP tools are granted by [`mcp::read`].
        if item.value.trim().starts_with(crate::mcp::PREFIX) {
            continue;
        }
        let Some(tool) = orch_tool_name(item.value.trim()) else {
            let name = item.value.trim();
            // Claude Code's skill tool: orch's `load_skill` is offered to
            // every stage that has skills (`skills:` selects them).
            if name == "Skill" {
                continue;
            }
            // `Bash(git diff:*)`: an allow-list of some commands or paths,
            // which orch's rules cannot express (they refuse or ask; they
            // do not allow only): the tool is not offered at all.
            if let Some(scoped) = name
                .split_once('(')
                .and_then(|(t, _)| orch_tool_name(t.trim()))
            {
                warnings.push(format!(
                    "tools: {name:?}: orch cannot offer `{scoped}` for some commands or paths only, so it is not offered (list the tool without parentheses to offer it whole)"
                ));
                continue;
            }
            if !missing.contains(&name) {
                missing.push(name);
            }
            continue;
        };
        // Tools that change files directly; read-only roles may not hold them.
        if read_only && ToolName::is_write_name(tool) {
            return Err(at(
                &item.referenced,
                format!(
                    "a read_only role cannot have the tool \"{tool}\"; remove it or set read_only: false"
                ),
            ));
        }
        if let Some(index) = KNOWN_TOOLS.iter().position(|known| *known == tool) {
            granted[index] = true;
        }
    }
    if !missing.is_empty() {
        warnings.push(format!(
            "tool(s) {} not offered: orch has no such tool (it has: {})",
            missing.join(", "),
            KNOWN_TOOLS.join(", ")
        ));
    }
    // `finish` is how every agent ends its stage, so it is always granted.
    if let Some(last) = granted.last_mut() {
        *last = true;
    }
    Ok(KNOWN_TOOLS
        .iter()
        .zip(granted)
        .filter(|(_, on)| *on)
        .map(|(tool, _)| (*tool).to_owned())
        .collect())
}

/// Quotes the top-level `key: value` lines whose plain value holds `: ` (or
/// ` #`), as Claude Code's reader takes them; the value is kept byte for
/// byte (backslashes stay backslashes). Returns the new text and the
/// 1-based lines changed, or `None` when no line needed it.
pub(crate) fn requote_plain_values(yaml: &str) -> Option<(String, Vec<usize>)> {
    let mut out = String::with_capacity(yaml.len() + 64);
    let mut changed = Vec::new();
    for (n, line) in yaml.split_inclusive('\n').enumerate() {
        let body = line.trim_end_matches(['\r', '\n']);
        let ending = &line[body.len()..];
        let key_len = body.find(':').filter(|&i| {
            i > 0
                && body[..i]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        });
        let value = key_len.map(|i| body[i + 1..].trim());
        match (key_len, value) {
            (Some(i), Some(v))
                if !v.is_empty()
                    && !v.starts_with(['"', '\'', '[', '{', '|', '>', '&', '*', '!'])
                    && (v.contains(": ") || v.contains(" #")) =>
            {
                let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
                out.push_str(&format!("{}: \"{escaped}\"{ending}", &body[..i]));
                changed.push(n + 1);
            }
            _ => out.push_str(line),
        }
    }
    (!changed.is_empty()).then_some((out, changed))
}

/// The file stem of `origin` when it names a `.md` file.
fn role_file_stem(origin: &str) -> Option<&str> {
    let path = Path::new(origin.strip_prefix("built-in ").unwrap_or(origin));
    if path.extension()? != "md" {
        return None;
    }
    path.file_stem()?.to_str()
}

/// Splits `---\n<yaml>\n---\n<body>`; the YAML starts on the file's line 2.
/// `kind` names the file in the error for a missing opening line (`a role
/// file`, `a SKILL.md`).
pub(crate) fn split_front_matter<'a>(
    text: &'a str,
    origin: &str,
    kind: &str,
) -> Result<(&'a str, &'a str), SpecError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or("");
    if first.trim_end() != "---" {
        return Err(SpecError::new(
            origin,
            1,
            1,
            format!("expected YAML front matter: {kind} starts with a `---` line"),
        ));
    }
    let yaml_start = first.len();
    let mut offset = yaml_start;
    for line in lines {
        if line.trim_end() == "---" {
            let yaml = &text[yaml_start..offset];
            if yaml.trim().is_empty() {
                return Err(SpecError::new(
                    origin,
                    2,
                    1,
                    "front matter is empty: expected at least `name:`",
                ));
            }
            return Ok((yaml, &text[offset + line.len()..]));
        }
        offset += line.len();
    }
    Err(SpecError::new(
        origin,
        1,
        1,
        "front matter opened here is never closed: expected a `---` line after it",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comma_separated_claude_code_tools_map_to_orch_names() {
        let text = "---\nname: helper\ndescription: d\ntools: Read, Grep, Glob, Bash, MultiEdit, Edit\ncolor: blue\nmodel: inherit\n---\nYou help.\n";
        let role = parse_role(text, "x/helper.md").unwrap();
        assert_eq!(
            role.tools,
            [
                "bash",
                "read_file",
                "edit_file",
                "list_files",
                "grep",
                "finish"
            ]
        );
        assert_eq!(role.model, None);
        assert_eq!(role.prompt, "You help.");
        assert_eq!(role.max_turns, DEFAULT_MAX_TURNS);
    }

    #[test]
    fn list_tools_keep_known_order_and_finish_is_added() {
        let text = "---\nname: a\ntools: [grep, read_file, grep]\nmodel: gpt-5\nmax_turns: 7\nbash:\n  allow: [\"cargo test\"]\n  deny: [\"git push\"]\n---\nbody\n";
        let role = parse_role(text, "<test>").unwrap();
        assert_eq!(role.tools, ["read_file", "grep", "finish"]);
        assert_eq!(role.model.as_deref(), Some("gpt-5"));
        assert_eq!(role.max_turns, 7);
        assert_eq!(role.bash.allow, ["cargo test"]);
        assert!(role.bash.ask.is_empty());
        assert_eq!(role.bash.deny, ["git push"]);
    }

    #[test]
    fn missing_tools_means_all_but_write_tools_for_read_only() {
        let all = parse_role("---\nname: a\n---\n", "<test>").unwrap();
        assert_eq!(all.tools, KNOWN_TOOLS);
        let ro = parse_role("---\nname: a\nread_only: true\n---\n", "<test>").unwrap();
        assert!(ro.read_only);
        assert_eq!(
            ro.tools,
            [
                "bash",
                "read_file",
                "list_files",
                "grep",
                "spawn_agent",
                "finish"
            ]
        );
    }

    #[test]
    fn the_id_is_the_name_else_the_file_stem() {
        let role = parse_role("---\nname: coder\n---\n", "roles/docs.md").unwrap();
        assert_eq!(role.name, "coder");
        let role = parse_role("---\ndescription: d\n---\n", "roles/docs.md").unwrap();
        assert_eq!(role.name, "docs");
        let err = parse_role("---\ndescription: d\n---\n", "<t>").unwrap_err();
        assert!(err.message.contains("missing field `name`"), "{err}");
        let err = parse_role("---\nname: \"\"\n---\n", "roles/docs.md").unwrap_err();
        assert!(err.message.contains("empty"), "{err}");
        let err = parse_role("---\nname: ../up\n---\n", "roles/docs.md").unwrap_err();
        assert!(err.message.contains("may not hold `/`"), "{err}");
    }

    #[test]
    fn permission_modes_map_onto_orch_and_an_unknown_one_is_refused() {
        let role = |front: &str| parse_role(&format!("---\nname: r\n{front}---\nP\n"), "<t>");
        let plan =
            role("tools: Read, Write, Edit, Bash, Grep, Task\npermissionMode: plan\n").unwrap();
        assert!(plan.read_only);
        assert_eq!(plan.tools, ["read_file", "grep", "finish"]);
        assert!(
            plan.warnings
                .iter()
                .any(|w| w
                    .contains("read-only: bash, write_file, edit_file, spawn_agent not offered")),
            "{:?}",
            plan.warnings
        );
        let dont = role("permissionMode: dontAsk\n").unwrap();
        assert_eq!(dont.tools, ["read_file", "list_files", "grep", "finish"]);
        for normal in ["default", "acceptEdits", "bypassPermissions"] {
            let r = role(&format!("permissionMode: {normal}\n")).unwrap();
            assert_eq!(r.tools, KNOWN_TOOLS, "{normal}");
            assert!(!r.read_only && r.bash == BashRules::default(), "{normal}");
        }
        let ask = role("permissionMode: ask\n").unwrap();
        assert_eq!(ask.bash.ask, ["*"]);
        let err = role("permissionMode: auto\n").unwrap_err();
        assert_eq!((err.line, err.column), (3, 17));
        assert!(
            err.message
                .contains("permissionMode: \"auto\" has no orch equivalent"),
            "{err}"
        );
    }

    #[test]
    fn disallowed_tools_remove_tools_and_bash_patterns_become_deny_rules() {
        let text = "---\nname: r\ndisallowedTools: Write, Bash(git push:*), Bash(rm -rf), WebFetch, Edit(src/**)\n---\n";
        let role = parse_role(text, "<t>").unwrap();
        assert_eq!(
            role.tools,
            [
                "bash",
                "read_file",
                "list_files",
                "grep",
                "spawn_agent",
                "finish"
            ]
        );
        assert_eq!(role.bash.deny, ["git push", "rm -rf"]);
        assert!(
            role.warnings
                .iter()
                .any(|w| w.contains("`edit_file` for some paths only")),
            "{:?}",
            role.warnings
        );
        let list = parse_role(
            "---\nname: r\ndisallowedTools:\n  - Bash\n  - Task\n---\n",
            "<t>",
        )
        .unwrap();
        assert!(
            !list.tools.iter().any(|t| t == "bash" || t == "spawn_agent"),
            "{:?}",
            list.tools
        );
        let scoped =
            parse_role("---\nname: r\ntools: Read, Bash(git diff:*)\n---\n", "<t>").unwrap();
        assert_eq!(scoped.tools, ["read_file", "finish"]);
        assert!(
            scoped.warnings[0].contains("cannot offer `bash` for some commands or paths only"),
            "{:?}",
            scoped.warnings
        );
        let whole =
            parse_role("---\nname: r\ndisallowedTools: [\"Bash(*)\"]\n---\n", "<t>").unwrap();
        assert!(!whole.tools.iter().any(|t| t == "bash"));
        let err = parse_role(
            "---\nname: r\ndisallowedTools: [\"Bash(git push\"]\n---\n",
            "<t>",
        )
        .unwrap_err();
        assert!(
            err.message.contains("is not `Tool` or `Tool(pattern)`"),
            "{err}"
        );
    }

    #[test]
    fn max_turns_and_hooks() {
        let role = parse_role("---\nname: r\nmaxTurns: 32\n---\n", "<t>").unwrap();
        assert_eq!(role.max_turns, 32);
        let err = parse_role("---\nname: r\nmaxTurns: 32\nmax_turns: 5\n---\n", "<t>").unwrap_err();
        assert!(err.message.contains("disagree"), "{err}");
        let role = parse_role(
            "---\nname: r\nhooks:\n  PreToolUse:\n    - matcher: Bash\n      hooks:\n        - type: command\n          command: ./check.sh\n          timeout: 5\n---\n",
            "x/r.md",
        )
        .unwrap();
        assert_eq!(role.hooks.len(), 1);
        assert_eq!(role.hooks[0].command, "./check.sh");
        assert_eq!(role.hooks[0].timeout_secs, 5);
        assert_eq!(role.hooks[0].source, "x/r.md");
        let err = parse_role(
            "---\nname: r\nhooks:\n  PreToolUse:\n    - matcher: Bash\n---\n",
            "x/r.md",
        )
        .unwrap_err();
        assert!(
            err.message.contains("hooks: hooks.PreToolUse[0].hooks"),
            "{err}"
        );
        assert_eq!((err.file.as_str(), err.line), ("x/r.md", 4));
    }

    #[test]
    fn crlf_and_bom_are_accepted() {
        let text = "\u{feff}---\r\nname: a\r\ntools: Read\r\n---\r\n\r\nPrompt.\r\n";
        let role = parse_role(text, "<test>").unwrap();
        assert_eq!(role.tools, ["read_file", "finish"]);
        assert_eq!(role.prompt, "Prompt.");
    }

    #[test]
    fn no_front_matter_is_an_error_at_line_one() {
        let err = parse_role("You are a coder.\n", "a.md").unwrap_err();
        assert_eq!((err.line, err.column), (1, 1));
        assert!(err.message.contains("front matter"));
        let err = parse_role("---\n---\nbody", "a.md").unwrap_err();
        assert_eq!((err.line, err.column), (2, 1));
    }

    #[test]
    fn zero_max_turns_is_rejected() {
        let err = parse_role("---\nname: a\nmax_turns: 0\n---\n", "<t>").unwrap_err();
        assert_eq!((err.line, err.column), (3, 12));
        assert!(err.message.contains("at least 1"));
    }

    #[test]
    fn claude_code_extras_are_warnings_not_errors() {
        let text = "---\nname: web\ndescription: Use this agent when X.\\n\\nExamples:\\n<example>\\nuser: \"hi\"\\n</example>\ntools: Read, WebFetch, WebSearch, TodoWrite, mcp__github__get_issue\npermissionMode: ask\nmemory: project\ncolor: red\nmodel: claude-sonnet-4-5-20250929\ntemperature: 0.2\nseed: 3\nmax_tokens: 512\ntool_choice: required\n---\nBody\n";
        let role = parse_role(text, "x/web.md").unwrap();
        assert_eq!(role.tools, ["read_file", "finish"]);
        assert_eq!(role.model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert!(
            role.description.contains("user: \"hi\""),
            "{}",
            role.description
        );
        assert_eq!(role.warnings.len(), 3, "{:?}", role.warnings);
        assert!(
            role.warnings[0].contains("not strict YAML (line 3:"),
            "{:?}",
            role.warnings
        );
        assert!(role.warnings[1].contains("`memory`"));
        assert!(
            role.warnings[2].contains("WebFetch, WebSearch, TodoWrite not offered"),
            "{:?}",
            role.warnings
        );
        // An MCP tool is a grant of that server's tool, not a missing tool.
        assert_eq!(
            role.mcp.tools.as_deref(),
            Some(&["mcp__github__get_issue".to_owned()][..])
        );
        assert_eq!(role.mcp.granted_servers(), ["github"]);
        // `permissionMode: ask`: every command asks first.
        assert_eq!(role.bash.ask, ["*"]);
        assert_eq!(role.sampling.temperature, Some(0.2));
        assert_eq!(role.sampling.seed, Some(3));
        assert_eq!(role.sampling.max_tokens, Some(512));
        assert_eq!(
            role.sampling.tool_choice,
            Some(crate::llm::ToolChoice::Required)
        );
    }

    #[test]
    fn bad_sampling_values_are_located_errors() {
        let err = parse_role("---\nname: a\ntemperature: 3\n---\n", "<t>").unwrap_err();
        assert_eq!((err.line, err.column), (3, 14));
        assert!(err.message.contains("expected 0 to 2"), "{err}");
        assert!(parse_role("---\nname: a\ntool_choice: sometimes\n---\n", "<t>").is_err());
        let role = parse_role("---\nname: a\ntool_calling: constrained\n---\n", "<t>").unwrap();
        assert_eq!(
            role.tool_calling,
            Some(crate::llm::ToolCalling::Constrained)
        );
        assert!(role.warnings.is_empty(), "{:?}", role.warnings);
        let role = parse_role("---\nname: a\nprompt_cache: off\n---\n", "<t>").unwrap();
        assert_eq!(role.prompt_cache, Some(crate::llm::PromptCache::Off));
        let role = parse_role("---\nname: a\nprompt_cache: on\n---\n", "<t>").unwrap();
        assert_eq!(role.prompt_cache, Some(crate::llm::PromptCache::On));
        assert!(parse_role("---\nname: a\nprompt_cache: maybe\n---\n", "<t>").is_err());
        let err = parse_role("---\nname: a\ntool_calling: grammar\n---\n", "<t>").unwrap_err();
        assert!(err.to_string().contains(":3:"), "{err}");
    }

    #[test]
    fn context_files_is_a_switch_on_by_default() {
        let role = |v: &str| parse_role(&format!("---\nname: a\n{v}---\n"), "r.md");
        assert!(role("").unwrap().context_files);
        assert!(!role("context_files: off\n").unwrap().context_files);
        assert!(!role("context_files: false\n").unwrap().context_files);
        assert!(role("context_files: on\n").unwrap().warnings.is_empty());
        let err = role("context_files: maybe\n").unwrap_err();
        assert_eq!(err.line, 3);
        assert!(
            err.message
                .contains("context_files: \"maybe\" must be on or off"),
            "{err}"
        );
    }

    #[test]
    fn role_models_route_by_alias_then_served_list_and_cli_model_wins() {
        let role =
            |m: &str| parse_role(&format!("---\nname: r\nmodel: {m}\n---\n"), "<t>").unwrap();
        let aliases: std::collections::BTreeMap<String, String> =
            [("sonnet".to_owned(), "qwen".to_owned())].into();
        let served = ["gpt-x".to_owned()];
        let routing = ModelRouting {
            aliases: Some(&aliases),
            served: Some(&served),
            cli_model: false,
        };
        assert_eq!(
            resolve_model(&role("sonnet"), routing).model.as_deref(),
            Some("qwen")
        );
        assert_eq!(
            resolve_model(&role("gpt-x"), routing).model.as_deref(),
            Some("gpt-x")
        );
        let missing = resolve_model(&role("claude-opus-4"), routing);
        assert_eq!(missing.model, None);
        assert!(
            missing
                .note
                .unwrap()
                .contains("the server does not serve it")
        );
        let unknown = resolve_model(&role("gpt-x"), ModelRouting::default());
        assert_eq!(unknown.model, None);
        assert!(unknown.note.unwrap().contains("models are unknown"));
        assert_eq!(
            resolve_model(&role("haiku"), ModelRouting::default()),
            ModelChoice {
                model: None,
                note: None
            }
        );
        let cli = ModelRouting {
            cli_model: true,
            ..routing
        };
        assert_eq!(resolve_model(&role("sonnet"), cli).model, None);
    }
}
