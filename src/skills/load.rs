//! What `load_skill` returns: a skill's body and the list of its files,
//! or one of those files; repository skills' files are read from the base
//! commit's objects (the same commit the catalogue came from), a user's
//! from the config dir, and only files the listing names.

use super::{Skill, SkillDir, SkillSet};
use serde::Serialize;

/// Bytes of one loaded text returned at most.
pub(crate) const MAX_LOAD_BYTES: usize = 64 * 1024;

/// One load, for the action log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Loaded {
    /// The skill.
    pub name: String,
    /// The file read: its `SKILL.md`, or the file asked for.
    pub path: String,
    /// The file's git blob id.
    pub blob: String,
    /// `repository` or `user`.
    pub source: String,
}

impl SkillSet {
    /// The skill `name`'s body and file list, or (with `file`) one of its
    /// files; `Err` is a message for the model.
    pub(crate) fn load(&self, name: &str, file: Option<&str>) -> Result<(String, Loaded), String> {
        let Some(skill) = self.get(name) else {
            let names: Vec<&str> = self.skills.iter().map(Skill::name).collect();
            return Err(format!(
                "no skill `{name}` is available to this role; available: {}",
                names.join(", ")
            ));
        };
        match file {
            None => Ok((
                body(skill),
                loaded(skill, skill.path.clone(), skill.blob.clone()),
            )),
            Some(f) => self.file(skill, f),
        }
    }

    /// One listed file of `skill`, named relative to its directory or by
    /// the path the listing shows.
    fn file(&self, skill: &Skill, asked: &str) -> Result<(String, Loaded), String> {
        let asked = asked.trim().trim_start_matches("./");
        let shown = |rel: &str| shown_path(skill, rel);
        let Some(f) = skill
            .files
            .iter()
            .find(|f| f.rel == asked || shown(&f.rel) == asked)
        else {
            return Err(format!(
                "`{asked}` is not a file of skill `{}`; its files: {}",
                skill.name(),
                listing(skill)
            ));
        };
        let (bytes, blob) = match (&skill.dir, &f.blob) {
            (SkillDir::Repo(_), Some(blob)) => {
                let handle = crate::git::Repo::at(&self.common);
                let read = handle
                    .git2()
                    .ok()
                    .and_then(|repo| {
                        let oid = git2::Oid::from_str(blob).ok()?;
                        repo.find_blob(oid).ok().map(|b| b.content().to_vec())
                    })
                    .ok_or_else(|| {
                        format!("could not read {} from the repository", shown(&f.rel))
                    })?;
                (read, blob.clone())
            }
            (SkillDir::User(dir), _) => {
                let bytes = std::fs::read(dir.join(&f.rel))
                    .map_err(|e| format!("could not read {}: {e}", shown(&f.rel)))?;
                let blob = super::discover::blob_id(&bytes);
                (bytes, blob)
            }
            (SkillDir::Repo(_), None) => return Err("the file has no blob id".to_owned()),
        };
        let Ok(text) = String::from_utf8(bytes) else {
            return Err(format!("{} is not UTF-8 text", shown(&f.rel)));
        };
        Ok((capped(text), loaded(skill, shown(&f.rel), blob)))
    }
}

fn loaded(skill: &Skill, path: String, blob: String) -> Loaded {
    Loaded {
        name: skill.name().to_owned(),
        path,
        blob,
        source: skill.source().to_owned(),
    }
}

/// How the listing shows a file: repository-relative for a repository
/// skill (`read_file` reads it), relative to the skill's directory for a
/// user's (only `load_skill` reads it: tools cannot see the config dir).
fn shown_path(skill: &Skill, rel: &str) -> String {
    match &skill.dir {
        SkillDir::Repo(dir) => format!("{dir}/{rel}"),
        SkillDir::User(_) => rel.to_owned(),
    }
}

/// The listed files, comma-separated.
fn listing(skill: &Skill) -> String {
    if skill.files.is_empty() {
        return "none".to_owned();
    }
    let files: Vec<String> = skill
        .files
        .iter()
        .map(|f| shown_path(skill, &f.rel))
        .collect();
    files.join(", ")
}

/// The `load_skill` text of `skill`: where it is from, its body, its files.
fn body(skill: &Skill) -> String {
    let mut out = format!("# Skill `{}` ({})\n\n", skill.name(), skill.path);
    out.push_str(&capped(skill.front.body.clone()));
    out.push('\n');
    if !skill.files.is_empty() {
        let how = match skill.dir {
            SkillDir::Repo(_) => "read them with read_file, or load_skill with `file`",
            SkillDir::User(_) => "read one with load_skill and `file`",
        };
        out.push_str(&format!("\nFiles of this skill ({how}):\n"));
        for f in &skill.files {
            out.push_str(&format!("- {}\n", shown_path(skill, &f.rel)));
        }
        if skill.more_files > 0 {
            out.push_str(&format!(
                "- [… {} more files not listed …]\n",
                skill.more_files
            ));
        }
    }
    out
}

/// `text` cut at [`MAX_LOAD_BYTES`] with a marker.
fn capped(mut text: String) -> String {
    if text.len() <= MAX_LOAD_BYTES {
        return text;
    }
    let total = text.len();
    let mut cut = MAX_LOAD_BYTES;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    text.push_str(&format!(
        "\n[… cut: {} of {total} bytes not shown …]",
        total - cut
    ));
    text
}
