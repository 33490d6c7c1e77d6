//! Helpers for the tests of the model client against the fake server.

use super::fake_server::FakeServer;
use orch::llm::LlmError;

/// The attempts and last error of an [`LlmError::Exhausted`]; panics on any other error.
pub fn exhausted(err: &LlmError) -> (u32, &str) {
    match err {
        LlmError::Exhausted { attempts, last, .. } => (*attempts, last),
        other => panic!("{other:?}"),
    }
}

/// Asserts `server` got two requests with the same body: the first and its retry.
pub fn assert_one_identical_retry(server: &FakeServer) {
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].body, sent[1].body,
        "a retry resends the same request"
    );
}
