//! Allocations big enough to fill the disk: `fallocate -l 50G`, `truncate
//! -s 50G`, `dd … bs=1G count=50`, `head -c 30G`, `xfs_mkfile`/`mkfile`,
//! and `dd` from an endless source into a file with no `count=`.
//!
//! A full disk stops every run on the machine and the user's own work, so
//! one allocation above [`MAX_ALLOCATION_BYTES`] is refused with the size;
//! smaller test images (`fallocate -l 1M`, `truncate -s 100M`) are not.
//! What grows without a size on the line (`yes > f`) is left to the stage's
//! disk quota.

use super::programs::basename;

/// The largest single allocation a command may ask for: 4 GiB.
pub(super) const MAX_ALLOCATION_BYTES: u64 = 4 << 30;

/// Bytes of a size such as `50G`, `1M`, `512k`, `2GiB`, `10MB`, `4096`
/// (binary units unless the suffix says `B` with a decimal letter: `MB`).
/// `dd`'s `c`, `w` and `b` suffixes and products (`2x1M`) are read too.
pub(super) fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    if let Some((a, b)) = t.split_once('x') {
        return parse_size(a)?.checked_mul(parse_size(b)?);
    }
    let digits = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let number: f64 = t[..digits].parse().ok()?;
    let suffix = t[digits..].to_ascii_lowercase();
    let unit: u64 = match suffix.as_str() {
        "" | "c" => 1,
        "w" => 2,
        "b" => 512,
        s => {
            let (letter, rest) = s.split_at(1);
            let power = "kmgtpe".find(letter)? as u32 + 1;
            match rest {
                "" | "ib" => 1024u64.checked_pow(power)?,
                "b" => 1000u64.checked_pow(power)?,
                _ => return None,
            }
        }
    };
    let bytes = number * unit as f64;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes.min(u64::MAX as f64) as u64)
}

/// The value of option `short`/`long` (`-l 5G`, `-l5G`, `--length 5G`,
/// `--length=5G`).
fn option_value<'a>(args: &'a [String], short: &str, long: &str) -> Option<&'a str> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == short || a == long {
            return it.next().map(String::as_str);
        }
        if let Some(v) = a.strip_prefix(&format!("{long}=")) {
            return Some(v);
        }
        if let Some(v) = a
            .strip_prefix(short)
            .filter(|v| !v.is_empty() && !a.starts_with("--"))
        {
            return Some(v);
        }
    }
    None
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// The rule for one command.
pub(super) fn allocation_rule(argv: &[String]) -> Option<String> {
    let prog = basename(argv.first()?);
    let args = &argv[1..];
    let spelled = |size: &str| match prog {
        "dd" => format!("`dd … {size}`"),
        _ => format!("`{prog} {size}`"),
    };
    let (size_text, bytes) = match prog {
        "fallocate" => {
            let v = option_value(args, "-l", "--length")?;
            (format!("-l {v}"), parse_size(v)?)
        }
        "truncate" => {
            let v = option_value(args, "-s", "--size")?;
            // `-s -5G` and `-s <5G` shrink; `+5G`, `>5G` (if smaller) and `5G` grow.
            let grow = v.trim_start_matches(['+', '>', '%', '/']);
            if v.starts_with(['-', '<']) {
                return None;
            }
            (format!("-s {v}"), parse_size(grow)?)
        }
        "head" => {
            let v = option_value(args, "-c", "--bytes")?;
            if v.starts_with('-') {
                return None;
            }
            (format!("-c {v}"), parse_size(v.trim_start_matches('+'))?)
        }
        "xfs_mkfile" | "mkfile" => {
            let v = args.iter().find(|a| !a.starts_with('-'))?;
            (v.clone(), parse_size(v)?)
        }
        "dd" => return dd_rule(args),
        _ => return None,
    };
    (bytes > MAX_ALLOCATION_BYTES).then(|| {
        format!(
            "{} allocates {} at once, more than the {} one command may take (a full disk stops every run and the user's own work); use a smaller size",
            spelled(&size_text),
            gib(bytes),
            gib(MAX_ALLOCATION_BYTES)
        )
    })
}

fn dd_rule(args: &[String]) -> Option<String> {
    let get = |k: &str| args.iter().find_map(|a| a.strip_prefix(&format!("{k}=")));
    let bs = get("bs")
        .or_else(|| get("obs"))
        .map_or(Some(512), parse_size)?;
    let count_bytes = get("iflag").is_some_and(|f| f.contains("count_bytes"));
    // Into a device (`/dev/null`) or a pipe nothing is allocated.
    let to_file = get("of").is_some_and(|o| !o.starts_with("/dev/"));
    match get("count") {
        Some(_) if !to_file => None,
        Some(c) => {
            let n = parse_size(c)?;
            let bytes = if count_bytes { n } else { n.saturating_mul(bs) };
            (bytes > MAX_ALLOCATION_BYTES).then(|| {
                format!(
                    "`dd … count={c}` writes {} at once, more than the {} one command may take (a full disk stops every run and the user's own work); use a smaller count",
                    gib(bytes),
                    gib(MAX_ALLOCATION_BYTES)
                )
            })
        }
        None => {
            let endless = get("if")
                .is_some_and(|i| ["/dev/zero", "/dev/urandom", "/dev/random"].contains(&i));
            (endless && to_file).then(|| {
                "`dd` from an endless source (`/dev/zero`, `/dev/urandom`) into a file with no `count=` writes until the disk is full; give a `count=`".to_owned()
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("50G"), Some(50 << 30));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("10MB"), Some(10_000_000));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("512k"), Some(512 << 10));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2x1M"), Some(2 << 20));
        assert_eq!(parse_size("1.5G"), Some(3 << 29));
        assert_eq!(parse_size("lots"), None);
    }
}
