//! A `SKILL.md`'s front matter, checked against the Agent Skills format
//! (agentskills.io/specification): `name` (1–64 lowercase letters, digits
//! and single hyphens, not at either end, equal to the skill's directory),
//! `description` (1–1024 characters), optional `license`, `compatibility`
//! (at most 500 characters), `metadata` (a mapping) and `allowed-tools`.
//!
//! A file that breaks one of these rules is not a skill: [`parse`] says
//! which rule, at which line. Keys orch does not use are notes, not errors:
//! Claude Code's own keys (`disable-model-invocation`, `argument-hint`, …)
//! and `allowed-tools`, which orch never honours because it would widen
//! what a role may do.

use crate::pipeline::SpecError;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// Longest `name` (characters).
pub(crate) const MAX_NAME_CHARS: usize = 64;
/// Longest `description` (characters).
pub(crate) const MAX_DESCRIPTION_CHARS: usize = 1024;
/// Longest `compatibility` (characters).
const MAX_COMPATIBILITY_CHARS: usize = 500;

/// Keys of the Agent Skills format that orch reads or accepts.
const SPEC_KEYS: &[&str] = &[
    "name",
    "description",
    "license",
    "compatibility",
    "metadata",
    "allowed-tools",
];

/// A skill's front matter, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Front {
    /// The skill's name (equal to its directory's).
    pub name: String,
    /// What it is for, on one line (whitespace runs collapsed).
    pub description: String,
    /// The Markdown body after the front matter, trimmed.
    pub body: String,
    /// What orch does not take from the file, one line each.
    pub notes: Vec<String>,
    /// `disable-model-invocation: true` (Claude Code): only a user may
    /// start it, so orch's agents are not offered it.
    pub user_only: bool,
}

/// The front matter as written.
#[derive(Debug, Deserialize)]
struct FrontSpec {
    #[serde(default)]
    name: Option<Spanned<String>>,
    #[serde(default)]
    description: Option<Spanned<String>>,
    #[serde(default)]
    #[allow(dead_code)]
    license: Option<String>,
    #[serde(default)]
    compatibility: Option<Spanned<String>>,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<BTreeMap<String, IgnoredAny>>,
    #[serde(default, rename = "allowed-tools")]
    allowed_tools: Option<IgnoredAny>,
    #[serde(default, rename = "disable-model-invocation")]
    disable_model_invocation: Option<bool>,
}

/// Parses the `SKILL.md` of the directory named `dir_name`; `origin` names
/// the file in errors.
pub(crate) fn parse(text: &str, dir_name: &str, origin: &str) -> Result<Front, SpecError> {
    let (yaml, body) = crate::role::split_front_matter(text, origin, "a SKILL.md")?;
    // The front matter starts on line 2, after the opening `---`.
    const LINE_OFFSET: u64 = 1;
    let mut notes = Vec::new();
    let requoted;
    let (spec, yaml) = match serde_saphyr::from_str::<FrontSpec>(yaml) {
        Ok(spec) => (spec, yaml),
        Err(err) => {
            // `description: Use when: …` is common in skills and read as
            // text by Claude Code; so by orch, with a note.
            let strict = SpecError::from_yaml(origin, &err, LINE_OFFSET);
            let Some((text, _)) = crate::role::requote_plain_values(yaml) else {
                return Err(strict);
            };
            requoted = text;
            let spec = serde_saphyr::from_str(&requoted).map_err(|_| strict)?;
            notes.push(
                "front matter is not strict YAML (an unquoted value holding `: `); read as text, as Claude Code does".to_owned(),
            );
            (spec, requoted.as_str())
        }
    };
    let at = |location: &serde_saphyr::Location, message: String| {
        SpecError::at(origin, location, LINE_OFFSET, message)
    };
    let Some(name) = &spec.name else {
        return Err(SpecError::new(origin, 2, 1, "missing field `name`"));
    };
    if let Err(why) = check_name(name.value.trim(), dir_name) {
        return Err(at(&name.referenced, why));
    }
    let description = match &spec.description {
        None => return Err(SpecError::new(origin, 2, 1, "missing field `description`")),
        Some(d) if d.value.trim().is_empty() => {
            return Err(at(&d.referenced, "`description` is empty".to_owned()));
        }
        Some(d) if d.value.trim().chars().count() > MAX_DESCRIPTION_CHARS => {
            return Err(at(
                &d.referenced,
                format!(
                    "`description` is {} characters; the Agent Skills format allows {MAX_DESCRIPTION_CHARS}",
                    d.value.trim().chars().count()
                ),
            ));
        }
        Some(d) => d.value.split_whitespace().collect::<Vec<_>>().join(" "),
    };
    if let Some(c) = &spec.compatibility
        && c.value.chars().count() > MAX_COMPATIBILITY_CHARS
    {
        return Err(at(
            &c.referenced,
            format!(
                "`compatibility` is {} characters; the Agent Skills format allows {MAX_COMPATIBILITY_CHARS}",
                c.value.chars().count()
            ),
        ));
    }
    if spec.allowed_tools.is_some() {
        notes.push(
            "`allowed-tools` is not honoured: it would widen what a role may do; the role's tools and bash rules apply".to_owned(),
        );
    }
    // The keys as written, to name the ones orch does not use.
    let keys: BTreeMap<String, IgnoredAny> = serde_saphyr::from_str(yaml).unwrap_or_default();
    for key in keys
        .keys()
        .filter(|k| !SPEC_KEYS.contains(&k.as_str()) && *k != "disable-model-invocation")
    {
        notes.push(format!("key `{key}` is not used by orch (ignored)"));
    }
    Ok(Front {
        name: name.value.trim().to_owned(),
        description,
        body: body.trim().to_owned(),
        notes,
        user_only: spec.disable_model_invocation == Some(true),
    })
}

/// The Agent Skills rules for `name`, in the directory `dir_name`.
fn check_name(name: &str, dir_name: &str) -> Result<(), String> {
    let rule =
        "1-64 lowercase letters, digits and single hyphens, not starting or ending with a hyphen";
    if name.is_empty() {
        return Err("`name` is empty".to_owned());
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(format!(
            "`name` is {} characters; expected {rule}",
            name.chars().count()
        ));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        || name.starts_with('-')
        || name.ends_with('-')
        || name.contains("--")
    {
        return Err(format!("`name` {name:?} is not valid: expected {rule}"));
    }
    if name != dir_name {
        return Err(format!(
            "`name` {name:?} differs from its directory {dir_name:?}; the Agent Skills format requires them to match"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front(yaml: &str, dir: &str) -> Result<Front, String> {
        parse(&format!("---\n{yaml}---\nBody.\n"), dir, "s/SKILL.md").map_err(|e| e.to_string())
    }

    #[test]
    fn a_valid_skill_reads_with_its_notes() {
        let f = front(
            "name: pdf-tools\ndescription: |\n  Fill PDF forms.\n  Use for PDFs.\nlicense: MIT\nmetadata:\n  author: x\nallowed-tools: Bash Read\nargument-hint: x\n",
            "pdf-tools",
        )
        .unwrap();
        assert_eq!(f.name, "pdf-tools");
        assert_eq!(f.description, "Fill PDF forms. Use for PDFs.");
        assert_eq!(f.body, "Body.");
        assert!(f.notes[0].contains("allowed-tools"), "{:?}", f.notes);
        assert!(f.notes[1].contains("key `argument-hint`"), "{:?}", f.notes);
        assert!(!f.user_only);
    }

    #[test]
    fn names_and_descriptions_are_checked_with_the_line() {
        let e = front("name: PDF_Tools\ndescription: d\n", "PDF_Tools").unwrap_err();
        assert!(
            e.starts_with("s/SKILL.md:2:") && e.contains("\"PDF_Tools\" is not valid"),
            "{e}"
        );
        let e = front("name: a--b\ndescription: d\n", "a--b").unwrap_err();
        assert!(e.contains("single hyphens"), "{e}");
        let e = front("name: other\ndescription: d\n", "pdf").unwrap_err();
        assert!(e.contains("differs from its directory \"pdf\""), "{e}");
        let e = front("name: pdf\n", "pdf").unwrap_err();
        assert!(e.contains("missing field `description`"), "{e}");
        let long = "x".repeat(1025);
        let e = front(&format!("name: pdf\ndescription: {long}\n"), "pdf").unwrap_err();
        assert!(e.contains("1025 characters"), "{e}");
        let e = parse("no front matter", "pdf", "s/SKILL.md").unwrap_err();
        assert!(e.to_string().contains("starts with a `---` line"), "{e}");
    }

    #[test]
    fn a_claude_style_plain_description_with_a_colon_reads_as_text() {
        let f = front(
            "name: notes\ndescription: Write notes. Use when: releasing\n",
            "notes",
        )
        .unwrap();
        assert_eq!(f.description, "Write notes. Use when: releasing");
        assert!(f.notes[0].contains("not strict YAML"));
        let f = front(
            "name: notes\ndescription: d\ndisable-model-invocation: true\n",
            "notes",
        )
        .unwrap();
        assert!(f.user_only);
    }
}
