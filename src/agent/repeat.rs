//! Loop detection: the same call (name and arguments) made again and again
//! gets a tool result telling the model it is repeating itself; persisting
//! stops the stage as stuck. Successful calls count as much as failing ones
//! (`git log` three turns in a row is a loop too). The stricter rule for the
//! same *failing* call ([`MAX_IDENTICAL_FAILURES`]) lives here too, so both
//! rules compare calls the same way: by name and parsed JSON arguments.

/// After this many identical failing tool calls in a row the stage stops:
/// the model is stuck and further turns only burn tokens.
pub(crate) const MAX_IDENTICAL_FAILURES: u32 = 3;

/// The consecutive identical call that is answered with a warning.
pub(crate) const REPEAT_WARN_AT: u32 = 3;

/// What a call is, measured against the calls before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Repeat {
    /// Not a repeat worth mentioning: run it.
    Fresh,
    /// The same call already appeared earlier in this turn: not run again.
    SameTurn,
    /// The [`REPEAT_WARN_AT`]-th identical call in a row: run it, and tell
    /// the model it is repeating itself.
    Warn,
    /// Still the same call after the warning: the stage stops.
    Stuck(u32),
}

/// A call as the rules compare it: its name and canonical arguments.
type CallKey = (String, String);

/// The calls seen so far, in order.
#[derive(Debug, Default)]
pub(crate) struct RepeatGuard {
    last: Option<CallKey>,
    streak: u32,
    this_turn: Vec<CallKey>,
    last_failure: Option<CallKey>,
    identical_failures: u32,
}

impl RepeatGuard {
    /// A new model turn starts (in-turn duplicates are counted per turn).
    pub(crate) fn new_turn(&mut self) {
        self.this_turn.clear();
    }

    /// Records the next call and says what it is.
    pub(crate) fn observe(&mut self, name: &str, arguments: &str) -> Repeat {
        let key = key(name, arguments);
        if self.last.as_ref() == Some(&key) {
            self.streak += 1;
        } else {
            self.last = Some(key.clone());
            self.streak = 1;
        }
        let seen = self.this_turn.contains(&key);
        if !seen {
            self.this_turn.push(key);
        }
        if self.streak > REPEAT_WARN_AT {
            Repeat::Stuck(self.streak)
        } else if seen {
            Repeat::SameTurn
        } else if self.streak == REPEAT_WARN_AT {
            Repeat::Warn
        } else {
            Repeat::Fresh
        }
    }

    /// Records whether a call that ran failed; returns how many identical
    /// failing calls are now in a row (0 after a success).
    pub(crate) fn record_result(&mut self, name: &str, arguments: &str, failed: bool) -> u32 {
        if !failed {
            self.last_failure = None;
            self.identical_failures = 0;
            return 0;
        }
        let key = key(name, arguments);
        if self.last_failure.as_ref() == Some(&key) {
            self.identical_failures += 1;
        } else {
            self.last_failure = Some(key);
            self.identical_failures = 1;
        }
        self.identical_failures
    }
}

/// The key both rules compare calls by.
fn key(name: &str, arguments: &str) -> CallKey {
    (name.to_owned(), canonical(arguments))
}

/// The arguments with insignificant whitespace and key order removed, so
/// `{"a": 1}` and `{"a":1}` are the same call; unparsable text as written.
fn canonical(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments)
        .map_or_else(|_| arguments.trim().to_owned(), |v| v.to_string())
}

/// The note appended to the result of the warned call.
pub(crate) fn warning(name: &str) -> String {
    format!(
        "\n\n[orch: you have made this exact `{name}` call {REPEAT_WARN_AT} times in a row; you are repeating yourself and its result will not change. Do something different, or call `finish`. Repeating it again stops the stage.]"
    )
}

/// The result of a call already made earlier in the same turn.
pub(crate) fn same_turn(name: &str) -> String {
    format!(
        "error: not run: you are repeating yourself: this turn already made this exact `{name}` call, and its result is above"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_calls_warn_then_stick() {
        let mut g = RepeatGuard::default();
        let mut seen = Vec::new();
        for _ in 0..4 {
            g.new_turn();
            seen.push(g.observe("bash", r#"{"command": "git log"}"#));
        }
        assert_eq!(
            seen,
            [Repeat::Fresh, Repeat::Fresh, Repeat::Warn, Repeat::Stuck(4)]
        );
    }

    #[test]
    fn another_call_resets_the_streak_and_whitespace_does_not_matter() {
        let mut g = RepeatGuard::default();
        g.new_turn();
        assert_eq!(g.observe("grep", r#"{"pattern":"x"}"#), Repeat::Fresh);
        g.new_turn();
        assert_eq!(g.observe("grep", r#"{ "pattern": "x" }"#), Repeat::Fresh);
        g.new_turn();
        assert_eq!(g.observe("read_file", r#"{"path":"a"}"#), Repeat::Fresh);
        g.new_turn();
        assert_eq!(g.observe("grep", r#"{"pattern":"x"}"#), Repeat::Fresh);
    }

    #[test]
    fn identical_failures_compare_parsed_arguments() {
        let mut g = RepeatGuard::default();
        assert_eq!(g.record_result("bash", r#"{"command":"false"}"#, true), 1);
        assert_eq!(
            g.record_result("bash", r#"{ "command" : "false" }"#, true),
            2
        );
        assert_eq!(g.record_result("bash", r#"{"command":"true"}"#, true), 1);
        assert_eq!(g.record_result("bash", r#"{"command":"true"}"#, false), 0);
        assert_eq!(g.record_result("bash", r#"{"command":"true"}"#, true), 1);
    }

    #[test]
    fn duplicates_inside_one_turn_are_not_run() {
        let mut g = RepeatGuard::default();
        g.new_turn();
        assert_eq!(g.observe("grep", r#"{"pattern":"x"}"#), Repeat::Fresh);
        assert_eq!(g.observe("read_file", r#"{"path":"a"}"#), Repeat::Fresh);
        assert_eq!(g.observe("grep", r#"{"pattern":"x"}"#), Repeat::SameTurn);
        g.new_turn();
        assert_eq!(g.observe("grep", r#"{"pattern":"x"}"#), Repeat::Fresh);
    }
}
