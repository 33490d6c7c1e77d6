//! Agent Skills: `SKILL.md` directories a repository or the user keeps for
//! coding agents (the format 26+ tools read), offered to a stage as a
//! catalogue in its system prompt and a `load_skill` tool.
//!
//! Where they are read from ([`discover`]):
//! - the repository's `.agents/skills/<name>/`, `.claude/skills/<name>/`
//!   and `.github/skills/<name>/`, from the run's base commit (the tree orch
//!   works on, like project instructions): never the user's working tree,
//!   so uncommitted edits are not read and a stage cannot plant a skill for
//!   a later one; a symlinked directory or `SKILL.md` is followed once,
//!   inside the tree;
//! - the user config dir's `skills/<name>/` ([`crate::dirs`]).
//!
//! A name defined twice: the user's skill wins over the repository's (as in
//! Claude Code: a repository, perhaps an untrusted branch, must not replace
//! a skill the user relies on), and among the repository's directories the
//! first of `.agents`, `.claude`, `.github`; each shadowed file is named in
//! [`Catalogue::problems`]. An invalid `SKILL.md` ([`front`]) is skipped
//! and named there too, with the file, line and rule: never silently.
//!
//! What a stage gets ([`Catalogue::for_role`]): every skill, or those its
//! role's `skills:` names; the catalogue ([`SkillSet::section`]) lists
//! name and description in name order (byte-stable across turns and runs,
//! so a cached prompt prefix stays valid), cut at [`SKILLS_BUDGET`] bytes
//! with the cut said in the prompt and the record.

mod discover;
pub(crate) mod front;
mod load;

pub(crate) use load::Loaded;

use std::path::{Path, PathBuf};

/// Bytes of skill descriptions a stage's system prompt holds at most.
pub(crate) const SKILLS_BUDGET: usize = 4 * 1024;

/// The repository's skill directories, in precedence order.
pub(crate) const REPO_DIRS: [&str; 3] = [".agents/skills", ".claude/skills", ".github/skills"];

/// Largest `SKILL.md` read (a bigger one is skipped and named).
pub(crate) const MAX_SKILL_BYTES: usize = 256 * 1024;

/// Files of one skill listed by `load_skill` at most (the rest are counted).
pub(crate) const MAX_LISTED_FILES: usize = 100;

/// Bytes of skill names the catalogue's cut note names at most.
const CUT_NAMES_BUDGET: usize = 1024;

/// Where a skill lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SkillDir {
    /// A directory of the base commit's tree, repository-relative.
    Repo(String),
    /// A directory in the user config dir.
    User(PathBuf),
}

/// One other file of a skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkillFile {
    /// Its path relative to the skill's directory.
    pub rel: String,
    /// Its blob id in the base commit (repository skills only).
    pub blob: Option<String>,
}

/// One valid skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skill {
    /// Its checked front matter and body.
    pub front: front::Front,
    /// Its `SKILL.md`: repository-relative, or an absolute path.
    pub path: String,
    /// The git blob id of its `SKILL.md` (computed for a user's file).
    pub blob: String,
    /// Where its directory is.
    pub dir: SkillDir,
    /// Its other files, by path, at most [`MAX_LISTED_FILES`].
    pub files: Vec<SkillFile>,
    /// Files not listed beyond [`MAX_LISTED_FILES`].
    pub more_files: usize,
}

impl Skill {
    /// The skill's name.
    pub(crate) fn name(&self) -> &str {
        &self.front.name
    }

    /// `repository` or `user`.
    pub(crate) fn source(&self) -> &'static str {
        match self.dir {
            SkillDir::Repo(_) => "repository",
            SkillDir::User(_) => "user",
        }
    }
}

/// Every skill found for a run, and what was skipped.
#[derive(Debug, Clone, Default)]
pub(crate) struct Catalogue {
    /// Valid skills, by name.
    pub skills: Vec<Skill>,
    /// One line per file not taken (invalid, shadowed, not offered to
    /// agents), naming the file and why.
    pub problems: Vec<String>,
    /// The repository's common git dir (repository skills' files are read
    /// from its objects).
    pub common: PathBuf,
}

/// The skills of one stage.
#[derive(Debug, Clone, Default)]
pub(crate) struct SkillSet {
    /// The skills offered, by name.
    pub skills: Vec<Skill>,
    /// The repository's common git dir.
    pub common: PathBuf,
}

/// The catalogue section of a system prompt.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Section {
    /// The text (empty when there is no skill).
    pub text: String,
    /// Skills whose description is in it.
    pub listed: Vec<String>,
    /// Skills over the budget: named at most, not described.
    pub cut: Vec<String>,
}

/// Reads the skills of `commit` in the repository at `common`, and of the
/// user config dir `user` (its `skills/` folder).
pub(crate) fn discover(
    common: &Path,
    commit: &crate::git::CommitId,
    user: Option<&Path>,
) -> Result<Catalogue, crate::git::GitError> {
    let mut found = discover::Found::default();
    if let Some(user) = user {
        discover::user_skills(&user.join("skills"), &mut found);
    }
    discover::repo_skills(common, commit, &mut found)?;
    let discover::Found {
        mut skills,
        problems,
    } = found;
    skills.sort_by(|a, b| a.front.name.cmp(&b.front.name));
    Ok(Catalogue {
        skills,
        problems,
        common: common.to_path_buf(),
    })
}

impl Catalogue {
    /// The skills a role gets: all when `selected` is `None`, else those it
    /// names. `Err` lists the names that are no skill here.
    pub(crate) fn for_role(&self, selected: Option<&[String]>) -> Result<SkillSet, Vec<String>> {
        let skills = match selected {
            None => self.skills.clone(),
            Some(names) => {
                let unknown: Vec<String> = names
                    .iter()
                    .filter(|n| !self.skills.iter().any(|s| s.name() == n.as_str()))
                    .cloned()
                    .collect();
                if !unknown.is_empty() {
                    return Err(unknown);
                }
                self.skills
                    .iter()
                    .filter(|s| names.iter().any(|n| n == s.name()))
                    .cloned()
                    .collect()
            }
        };
        Ok(SkillSet {
            skills,
            common: self.common.clone(),
        })
    }

    /// What orch does not take from the skills it uses (keys it ignores,
    /// `allowed-tools`), one line each, naming the file.
    pub(crate) fn notes(&self) -> Vec<String> {
        self.skills
            .iter()
            .flat_map(|s| {
                s.front
                    .notes
                    .iter()
                    .map(move |n| format!("{}: {n}", s.path))
            })
            .collect()
    }

    /// The names of the skills found, comma-separated (`none` when empty).
    pub(crate) fn names(&self) -> String {
        if self.skills.is_empty() {
            return "none".to_owned();
        }
        let names: Vec<&str> = self.skills.iter().map(Skill::name).collect();
        names.join(", ")
    }
}

/// The skills of the role `name` read from `origin` whose `skills:` is
/// `selected`, and a note when some are missing. A name that is no skill
/// is an error for an orch role file; a Claude Code agent file (in a
/// `.claude/agents/` directory) loads unchanged, as public agent files
/// name skills a user may not have: it gets the skills that exist and the
/// note names the others. `Err` is the message (it reads after "failed to").
pub(crate) fn for_role_file(
    c: &Catalogue,
    origin: &str,
    name: &str,
    selected: Option<&[String]>,
) -> Result<(SkillSet, Option<String>), String> {
    match c.for_role(selected) {
        Ok(set) => Ok((set, None)),
        Err(unknown) if is_claude_agent_file(origin) => {
            let known: Vec<String> = selected
                .unwrap_or_default()
                .iter()
                .filter(|n| !unknown.contains(n))
                .cloned()
                .collect();
            let set = c.for_role(Some(&known)).unwrap_or_default();
            let note = format!(
                "{origin}: role `{name}`: skills: {} not found, so not offered (a Claude Code agent file loads unchanged; found: {})",
                crate::text::backticked(&unknown),
                c.names()
            );
            Ok((set, Some(note)))
        }
        Err(unknown) => Err(unknown_error(origin, name, &unknown, c)),
    }
}

/// True when `origin` is a file of a `.claude/agents/` directory.
fn is_claude_agent_file(origin: &str) -> bool {
    let mut dirs = Path::new(origin)
        .parent()
        .into_iter()
        .flat_map(Path::components)
        .rev();
    dirs.next().is_some_and(|d| d.as_os_str() == "agents")
        && dirs.next().is_some_and(|d| d.as_os_str() == ".claude")
}

/// The error for a role whose `skills:` names `unknown`, found in `origin`
/// (it reads after "failed to").
fn unknown_error(origin: &str, role: &str, unknown: &[String], c: &Catalogue) -> String {
    format!(
        "use role `{role}` ({origin}): skills: {} {} not a skill of this repository or the user config dir (found: {}{})",
        crate::text::backticked(unknown),
        if unknown.len() == 1 { "is" } else { "are" },
        c.names(),
        if c.problems.is_empty() {
            String::new()
        } else {
            format!("; skipped: {}", c.problems.join("; "))
        }
    )
}

impl SkillSet {
    /// True when the stage has no skill (no catalogue, no `load_skill`).
    pub(crate) fn is_empty(&self) -> bool {
        self.skills.is_empty()
    }

    /// The skill named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Skill> {
        self.skills.iter().find(|s| s.name() == name)
    }

    /// The system-prompt catalogue: one line per skill, by name, within
    /// [`SKILLS_BUDGET`] bytes; the skills over it are named (within a
    /// second, small budget) but not described.
    pub(crate) fn section(&self) -> Section {
        if self.skills.is_empty() {
            return Section::default();
        }
        let mut text = String::from(
            "# Skills\n\nSkills are instructions for particular kinds of work. When your task matches one, call `load_skill` with its name before you start, and follow it.\n\n",
        );
        let (mut listed, mut cut) = (Vec::new(), Vec::new());
        let mut used = 0;
        for s in &self.skills {
            let line = format!("- {}: {}\n", s.name(), s.front.description);
            if cut.is_empty() && used + line.len() <= SKILLS_BUDGET {
                used += line.len();
                text.push_str(&line);
                listed.push(s.name().to_owned());
            } else {
                cut.push(s.name().to_owned());
            }
        }
        if !cut.is_empty() {
            let mut names = Vec::new();
            let mut bytes = 0;
            for n in &cut {
                if bytes + n.len() + 2 > CUT_NAMES_BUDGET {
                    break;
                }
                bytes += n.len() + 2;
                names.push(n.as_str());
            }
            let more = cut.len() - names.len();
            text.push_str(&format!(
                "\n[… {} more skill(s) not described here (the skill list is limited to {SKILLS_BUDGET} bytes); load_skill loads them too: {}{} …]\n",
                cut.len(),
                names.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            ));
        }
        Section { text, listed, cut }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(name: &str, description: &str) -> Skill {
        Skill {
            front: front::Front {
                name: name.to_owned(),
                description: description.to_owned(),
                body: String::new(),
                notes: Vec::new(),
                user_only: false,
            },
            path: format!(".claude/skills/{name}/SKILL.md"),
            blob: String::new(),
            dir: SkillDir::Repo(format!(".claude/skills/{name}")),
            files: Vec::new(),
            more_files: 0,
        }
    }

    #[test]
    fn the_section_is_cut_at_the_budget_and_says_which_skills_are_not_described() {
        let set = SkillSet {
            skills: (0..40)
                .map(|i| skill(&format!("s{i:02}"), &"d".repeat(200)))
                .collect(),
            common: PathBuf::new(),
        };
        let s = set.section();
        assert!(!s.cut.is_empty());
        assert_eq!(s.listed.len() + s.cut.len(), 40);
        let described: usize = s.listed.len() * "- s00: \n".len() + s.listed.len() * 200;
        assert!(described <= SKILLS_BUDGET, "{described}");
        assert!(s.text.contains(&format!(
            "[… {} more skill(s) not described here (the skill list is limited to 4096 bytes); load_skill loads them too: {}",
            s.cut.len(),
            s.cut[0]
        )));
        // The same skills give the same bytes.
        assert_eq!(set.section(), s);
    }

    #[test]
    fn a_role_gets_what_it_names_and_an_unknown_name_is_an_error() {
        let c = Catalogue {
            skills: vec![skill("a", "x"), skill("b", "y")],
            problems: Vec::new(),
            common: PathBuf::new(),
        };
        assert_eq!(c.for_role(None).unwrap().skills.len(), 2);
        let only_b = c.for_role(Some(&["b".to_owned()])).unwrap();
        assert_eq!(only_b.skills.len(), 1);
        assert!(only_b.get("a").is_none());
        assert!(c.for_role(Some(&[])).unwrap().is_empty());
        let unknown = c.for_role(Some(&["c".to_owned()])).unwrap_err();
        let e = for_role_file(&c, "r.md", "w", Some(&["c".to_owned()])).unwrap_err();
        assert_eq!(
            e,
            "use role `w` (r.md): skills: `c` is not a skill of this repository or the user config dir (found: a, b)"
        );
        assert_eq!(unknown, ["c"]);
        // A Claude Code agent file gets what exists, with a note.
        let (set, note) = for_role_file(
            &c,
            "/r/.claude/agents/w.md",
            "w",
            Some(&["a".to_owned(), "c".to_owned()]),
        )
        .unwrap();
        assert_eq!(set.skills.len(), 1);
        assert_eq!(
            note.unwrap(),
            "/r/.claude/agents/w.md: role `w`: skills: `c` not found, so not offered (a Claude Code agent file loads unchanged; found: a, b)"
        );
        assert!(for_role_file(&c, "/r/.orch/agents/w.md", "w", Some(&["c".to_owned()])).is_err());
    }
}
