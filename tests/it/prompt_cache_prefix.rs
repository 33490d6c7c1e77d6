//! The byte-prefix property (issue 29): providers cache a request's prefix
//! (OpenAI and llama.cpp automatically, Anthropic at its breakpoints), so
//! nothing earlier in a conversation may change between turns. For every
//! built-in role, over a 10-turn stage with project instructions and a
//! memory lesson present, turn k's system prompt, tools and messages are
//! byte for byte the start of turn k+1's, read from the raw bodies the fake
//! server received. A timestamp, a random id or a reordered map in the
//! prefix fails the checker (its own tests below). Compaction may break the
//! prefix, only on the turn it compacts (docs/model-client.md).

use crate::support::{FakeServer, Reply, Script, TestRepo, run_on_fake, write_pipeline};
use serde_json::json;

/// One top-level JSON value of a body: its key and the byte range of its value.
type Field = (String, std::ops::Range<usize>);

/// Byte ranges in a JSON text; `None` when it is not JSON this scanner reads.
struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn ws(&mut self) {
        while self.b.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&c)).then(|| self.i += 1)
    }

    fn string(&mut self) -> Option<std::ops::Range<usize>> {
        self.ws();
        let start = self.i;
        self.eat(b'"')?;
        loop {
            match *self.b.get(self.i)? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some(start..self.i);
                }
                _ => self.i += 1,
            }
        }
    }

    /// Skips one value; its byte range.
    fn value(&mut self) -> Option<std::ops::Range<usize>> {
        self.ws();
        let start = self.i;
        match *self.b.get(self.i)? {
            b'"' => {
                self.string()?;
            }
            b'{' => {
                self.members()?;
            }
            b'[' => {
                self.elements()?;
            }
            _ => {
                while self
                    .b
                    .get(self.i)
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']') && !c.is_ascii_whitespace())
                {
                    self.i += 1;
                }
            }
        }
        (self.i > start).then_some(start..self.i)
    }

    /// An object's members: keys (unquoted) and value ranges, in order.
    fn members(&mut self) -> Option<Vec<Field>> {
        self.eat(b'{')?;
        let mut out = Vec::new();
        if self.eat(b'}').is_some() {
            return Some(out);
        }
        loop {
            let k = self.string()?;
            let key = String::from_utf8_lossy(&self.b[k.start + 1..k.end - 1]).into_owned();
            self.eat(b':')?;
            out.push((key, self.value()?));
            if self.eat(b'}').is_some() {
                return Some(out);
            }
            self.eat(b',')?;
        }
    }

    /// An array's element ranges, in order.
    fn elements(&mut self) -> Option<Vec<std::ops::Range<usize>>> {
        self.eat(b'[')?;
        let mut out = Vec::new();
        if self.eat(b']').is_some() {
            return Some(out);
        }
        loop {
            out.push(self.value()?);
            if self.eat(b']').is_some() {
                return Some(out);
            }
            self.eat(b',')?;
        }
    }
}

/// The cached part of a Chat Completions body, as raw bytes: the model, the
/// tools and each message.
struct Prefix<'a> {
    model: Option<&'a [u8]>,
    tools: Option<&'a [u8]>,
    messages: Vec<&'a [u8]>,
}

fn prefix_of(body: &[u8]) -> Result<Prefix<'_>, String> {
    let fields = Scan { b: body, i: 0 }
        .members()
        .ok_or("the body is not a JSON object")?;
    let get = |k: &str| {
        fields
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, r)| &body[r.clone()])
    };
    let messages = get("messages").ok_or("the body has no messages")?;
    let ranges = Scan { b: messages, i: 0 }
        .elements()
        .ok_or("messages is not an array")?;
    Ok(Prefix {
        model: get("model"),
        tools: get("tools"),
        messages: ranges.into_iter().map(|r| &messages[r]).collect(),
    })
}

/// Why `later`'s cached part does not start with `earlier`'s, byte for byte
/// (`None`: it does).
fn prefix_violation(earlier: &[u8], later: &[u8]) -> Option<String> {
    let (e, l) = match (prefix_of(earlier), prefix_of(later)) {
        (Ok(e), Ok(l)) => (e, l),
        (Err(why), _) | (_, Err(why)) => return Some(why),
    };
    let show = |b: Option<&[u8]>| String::from_utf8_lossy(b.unwrap_or(b"<absent>")).into_owned();
    if e.model != l.model {
        return Some(format!(
            "the model changed: {} → {}",
            show(e.model),
            show(l.model)
        ));
    }
    if e.tools != l.tools {
        return Some(format!(
            "the tools changed at byte {}",
            first_difference(e.tools.unwrap_or(b""), l.tools.unwrap_or(b""))
        ));
    }
    if l.messages.len() < e.messages.len() {
        return Some(format!(
            "{} messages became {}",
            e.messages.len(),
            l.messages.len()
        ));
    }
    for (n, (a, b)) in e.messages.iter().zip(&l.messages).enumerate() {
        if a != b {
            let at = first_difference(a, b);
            let around = |m: &[u8]| {
                String::from_utf8_lossy(&m[at.saturating_sub(40)..(at + 40).min(m.len())])
                    .into_owned()
            };
            return Some(format!(
                "message {n} changed at byte {at}: …{}… → …{}…",
                around(a),
                around(b)
            ));
        }
    }
    None
}

fn first_difference(a: &[u8], b: &[u8]) -> usize {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()))
}

#[test]
fn the_checker_passes_an_appended_turn_and_fails_a_changed_earlier_byte() {
    let turn1 = br#"{"model":"m","messages":[{"role":"system","content":"You are a coder. Today is 2026-12-06."},{"role":"user","content":"fix"}],"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}],"stream":false}"#;
    let turn2 = br#"{"model":"m","messages":[{"role":"system","content":"You are a coder. Today is 2026-12-06."},{"role":"user","content":"fix"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a\"}"}}]},{"role":"tool","tool_call_id":"c1","content":"x"}],"tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}],"stream":false,"max_tokens":10}"#;
    assert_eq!(prefix_violation(turn1, turn2), None);
    let swap = |from: &str, to: &str| String::from_utf8_lossy(turn2).replacen(from, to, 1);

    // A timestamp in the system prompt.
    let later = swap("2026-12-06", "2026-12-07");
    let why = prefix_violation(turn1, later.as_bytes()).unwrap();
    assert!(why.starts_with("message 0 changed at byte "), "{why}");
    // A random id in an earlier message (turn 2 → turn 3).
    let turn3 = swap(
        r#""content":"x"}]"#,
        r#""content":"x"},{"role":"user","content":"go on"}]"#,
    );
    assert_eq!(prefix_violation(turn2, turn3.as_bytes()), None);
    let regenerated = turn3.replace("\"c1\"", "\"c9\"");
    let why = prefix_violation(turn2, regenerated.as_bytes()).unwrap();
    assert!(why.starts_with("message 2 changed"), "{why}");
    // A reordered map: the same keys and values in another order.
    let reordered = swap(
        r#"{"role":"user","content":"fix"}"#,
        r#"{"content":"fix","role":"user"}"#,
    );
    let why = prefix_violation(turn1, reordered.as_bytes()).unwrap();
    assert!(why.starts_with("message 1 changed"), "{why}");
    let reordered_tools = swap(
        r#""name":"read_file","parameters""#,
        r#""parameters":{},"name":"read_file","x""#,
    );
    let why = prefix_violation(turn1, reordered_tools.as_bytes()).unwrap();
    assert!(why.starts_with("the tools changed"), "{why}");
    // A dropped message, and another model.
    assert!(prefix_violation(turn2, turn1).is_some());
    let other = swap(r#""model":"m""#, r#""model":"n""#);
    assert!(prefix_violation(turn1, other.as_bytes()).is_some());
}

/// A repository with project instructions (`AGENTS.md`, `CLAUDE.md`) and a
/// checked-in memory lesson the task shares words with.
fn repo() -> TestRepo {
    TestRepo::with_commit(
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("README.md", "# calc\n\nAdds numbers.\n"),
            (
                "AGENTS.md",
                "# Agents\n\nRun `python3 -c 'import calc'` after each change to calc.py.\n",
            ),
            ("CLAUDE.md", "Keep calc.py functions to one line.\n"),
            (
                ".orch/memory/calc-style.md",
                "---\nid: \"calc-style\"\ntitle: \"calc style\"\nkind: convention\nsummary: \"calc.py functions keep one-line bodies\"\n---\nOur style.\n",
            ),
        ],
        "calc with instructions and a lesson",
    )
}

/// Nine different read-only calls, then `finish` (with a verdict for the
/// reviewer): a 10-turn stage.
fn ten_turns(verdict: Option<&str>) -> Vec<Reply> {
    let calls = [
        ("read_file", json!({"path": "calc.py"})),
        ("list_files", json!({})),
        ("grep", json!({"pattern": "add"})),
        ("read_file", json!({"path": "README.md"})),
        ("grep", json!({"pattern": "def"})),
        ("list_files", json!({"pattern": "*.py"})),
        ("read_file", json!({"path": "AGENTS.md"})),
        ("grep", json!({"pattern": "return"})),
        ("read_file", json!({"path": "calc.py", "offset": 2})),
    ];
    let mut replies: Vec<Reply> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (name, args))| Reply::tool_call(&format!("call_{i}"), name, args))
        .collect();
    replies.push(Reply::finish("call_9", "Looked at calc.py.", verdict));
    replies
}

#[test]
fn every_builtin_role_keeps_each_turns_request_a_byte_prefix_of_the_next() {
    // `distill` is no stage role: it is the memory distiller's single call
    // (no tools, one reply), so it has no turn k+1 to compare.
    for role in ["coder", "docs", "explore", "reviewer", "setup"] {
        let repo = repo();
        let verdict = (role == "reviewer").then_some("approve");
        let server = FakeServer::start(Script::new().agent("work", ten_turns(verdict)));
        let dir = tempfile::tempdir().unwrap();
        let pipeline = write_pipeline(
            dir.path(),
            "solo",
            &format!(
                "name: solo\nstages:\n  work:\n    role: {role}\n    max_turns: 10\n    task: \"Look at calc.py's add: {{{{ issue }}}}\"\n"
            ),
        );
        let (_, run_id) = run_on_fake(&repo, &pipeline, "# calc add\n\nadd subtracts.\n", &server);
        let requests = server.requests_for("work");
        assert_eq!(requests.len(), 10, "{role}: ten turns (run {run_id})");
        // Project instructions and the lesson are in the prefix.
        let first = String::from_utf8_lossy(&requests[0].raw).into_owned();
        assert!(
            first.contains("Keep calc.py functions to one line."),
            "{role}: {first}"
        );
        assert!(
            first.contains("[calc-style] calc.py functions keep one-line bodies"),
            "{role}: {first}"
        );
        for k in 1..requests.len() {
            if let Some(why) = prefix_violation(&requests[k - 1].raw, &requests[k].raw) {
                panic!(
                    "{role}: turn {k}'s request is not a prefix of turn {}'s: {why}",
                    k + 1
                );
            }
        }
    }
}
