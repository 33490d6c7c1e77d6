//! A check orch can offer for a step whose own check verifies nothing.
//! When a plan goes back because a check already passes, a small model
//! keeps the check it had (the 1.5B model kept `pip list --outdated`
//! after being told why it shows nothing; docs/setup.md). So for the
//! installers whose result can be asked directly, the send-back names a
//! check built from the step's own command, run first (read-only, as
//! every check before its step) so the message can say what it does now:
//!
//! - `pip install NAME…` / `pip install -r FILE` (also `pip3`,
//!   `python3 -m pip`): `<the same pip> show NAME && …`, one `show` per
//!   package (given several names, `show` exits 0 when any one is
//!   installed), which exits 1 while any of them is missing and 0 once
//!   all are installed (with `--upgrade`
//!   too: it asks whether they are there, not how new). Not offered for
//!   `-e`, paths, URLs,
//!   `--target`/`--prefix`/`--root` (installed where `show` does not
//!   look), or a requirements file with options or lines it cannot name.
//!
//! Other steps get the generic advice only.

/// The check offered for `command` (run in `cwd`, where a requirements
/// file it names is read), with the packages it asks about; `None` when
/// none can be built from it.
pub(super) fn suggested_check(
    command: &str,
    cwd: &std::path::Path,
) -> Option<(String, Vec<String>)> {
    let units = crate::policy::simple_commands(command)?;
    let [unit] = units.as_slice() else {
        return None;
    };
    let argv = &unit.argv;
    let program = argv.first()?.rsplit('/').next()?;
    let (pip, rest): (Vec<&str>, &[String]) = if is_pip(program) {
        match argv.get(1).map(String::as_str) {
            Some("install") => (vec![argv[0].as_str()], &argv[2..]),
            _ => return None,
        }
    } else if is_python(program)
        && argv.get(1).map(String::as_str) == Some("-m")
        && argv.get(2).map(String::as_str) == Some("pip")
        && argv.get(3).map(String::as_str) == Some("install")
    {
        (vec![argv[0].as_str(), "-m", "pip"], &argv[4..])
    } else {
        return None;
    };
    let mut names = Vec::new();
    let mut args = rest.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-r" | "--requirement" => names.extend(requirement_names(&cwd.join(args.next()?))?),
            a if a.starts_with("--requirement=") => {
                names.extend(requirement_names(&cwd.join(&a["--requirement=".len()..]))?);
            }
            "-c" | "--constraint" | "-i" | "--index-url" | "--extra-index-url" | "-f"
            | "--find-links" | "--trusted-host" => {
                args.next()?;
            }
            "-e" | "--editable" | "-t" | "--target" | "--prefix" | "--root" => return None,
            a if a.starts_with("--target")
                || a.starts_with("--prefix")
                || a.starts_with("--root") =>
            {
                return None;
            }
            a if a.starts_with('-') => {}
            spec => names.push(package_name(spec)?),
        }
    }
    if names.is_empty() {
        return None;
    }
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.to_ascii_lowercase()));
    // One `show` per package: given several, pip's `show` exits 0 when
    // any one of them is installed (pip 23.2, measured).
    let show = |name: &String| {
        let mut words: Vec<String> = pip.iter().map(|w| (*w).to_owned()).collect();
        words.extend(["show".to_owned(), name.clone()]);
        shell_words(&words)
    };
    let check = names.iter().map(show).collect::<Vec<_>>().join(" && ");
    Some((check, names))
}

fn is_pip(program: &str) -> bool {
    is_versioned(program, "pip")
}

fn is_python(program: &str) -> bool {
    is_versioned(program, "python")
}

/// `program` is `base`, or `base` and a version (`pip3`, `python3.11`).
fn is_versioned(program: &str, base: &str) -> bool {
    program
        .strip_prefix(base)
        .is_some_and(|v| v.is_empty() || v.chars().all(|c| c.is_ascii_digit() || c == '.'))
}

/// The distribution name of a requirement (`requests>=2`, `pytest[cov]`,
/// `foo ; python_version < "3.12"`); `None` for a path, URL or archive.
fn package_name(spec: &str) -> Option<String> {
    let spec = spec.trim();
    let end = spec
        .find(['<', '>', '=', '!', '~', ';', '[', '@', ' '])
        .unwrap_or(spec.len());
    let name = spec[..end].trim();
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && !name.ends_with(".whl")
        && !name.ends_with(".zip")
        && !name.ends_with(".gz");
    plain.then(|| name.to_owned())
}

/// The names a requirements file asks for; `None` when a line is an
/// option (`-e`, `-r`, `--index-url`, …) or not a plain requirement.
fn requirement_names(file: &std::path::Path) -> Option<Vec<String>> {
    let text = std::fs::read_to_string(file).ok()?;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.split(" #").next().unwrap_or_default().trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if line.starts_with('-') {
            return None;
        }
        names.push(package_name(line)?);
    }
    Some(names)
}

/// `words` as one shell command line (quoted only where needed).
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '='))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pip_install_gets_pip_show_of_its_packages() {
        let dir = tempfile::tempdir().unwrap();
        let at = dir.path();
        let got = |c: &str| suggested_check(c, at).map(|(check, _)| check);
        assert_eq!(
            got("pip install requests pytest").as_deref(),
            Some("pip show requests && pip show pytest")
        );
        assert_eq!(
            got("python3 -m pip install 'requests>=2' pytest[cov]").as_deref(),
            Some("python3 -m pip show requests && python3 -m pip show pytest")
        );
        assert_eq!(
            got("pip3 install --no-cache-dir -i https://x/simple flask").as_deref(),
            Some("pip3 show flask")
        );
        assert_eq!(
            got("pip install --upgrade requests pytest").as_deref(),
            Some("pip show requests && pip show pytest")
        );
        std::fs::write(
            at.join("requirements.txt"),
            "# test deps\nrequests>=2\n\npytest>=7 # runner\n",
        )
        .unwrap();
        let (check, names) = suggested_check("pip install -r requirements.txt", at).unwrap();
        assert_eq!(check, "pip show requests && pip show pytest");
        assert_eq!(names, ["requests", "pytest"]);
        // What `show` cannot answer: no offer.
        for none in [
            "pip install -e .",
            "pip install ./dist/x-1.0.whl",
            "pip install --target vendor requests",
            "pip install -r missing.txt",
            "pip list --outdated",
            "npm install",
            "pip install requests && pip install pytest",
        ] {
            assert_eq!(got(none), None, "{none}");
        }
        std::fs::write(at.join("r2.txt"), "-e .\nrequests\n").unwrap();
        assert_eq!(got("pip install -r r2.txt"), None);
    }
}
