//! A scripted fake OpenAI-compatible Chat Completions server for tests.
//!
//! It listens on `127.0.0.1:0`, speaks plain HTTP/1.1 (one request per
//! connection, answered with `Content-Length` and `Connection: close`) and
//! serves replies per agent — by the `X-Orch-Agent` header — in script order.
//! An unknown agent, or one whose replies are used up, gets HTTP 500 with
//! `fake server: script exhausted for agent "X"`.
//!
//! Every request is recorded (before it is answered, so a client that got its
//! answer always finds its request in [`FakeServer::requests`]). Every request
//! is also checked the way real servers check it: each `role: tool` message
//! must answer a tool call of the latest assistant message, and every tool call
//! must be answered before the next non-tool message. A breach is recorded in
//! [`FakeServer::violations`] and answered with HTTP 400 without consuming a
//! reply. A breach the test never read through [`FakeServer::violations`]
//! fails the test when the server is dropped. A request to any other path is
//! recorded in [`FakeServer::side_requests`] and answered by its
//! [`Script::route`], or 404.
//!
//! Streaming: a request whose body has `"stream": true` gets a
//! [`Reply::Message`] as server-sent events (`Transfer-Encoding: chunked`,
//! one HTTP chunk per event, each flushed): a role delta, the content in
//! pieces of a few characters, each tool call as a first delta with id and
//! name followed by its arguments in several pieces, a finish chunk, a usage
//! chunk (only when the reply has usage) and `data: [DONE]`. See the SSE
//! variants of [`Reply`] for raw chunks, stalls and cut streams, and its
//! hostile variants (a keep-alive flood, a reply of any size, noise, silence)
//! for a client's bounds.
//!
//! [`Script::latency`] delays every answer (a server across a network), and
//! each [`Recorded`] says how many answers were written before it arrived,
//! so a test can tell requests sent in parallel from requests sent one
//! after another without timing anything.
//! Anthropic mode: a request to `…/v1/messages` is checked and answered as
//! the Anthropic Messages API would (see `anthropic.rs`).
//!
//! Responses mode: a request to `…/responses` is served from the same
//! script in the OpenAI Responses format (see `responses`).
//!
//! Threads: one accept thread plus one per connection. Drop stops the accept
//! loop (flag + a connection to itself) and joins every thread; connection
//! threads are bounded by a read timeout and their scripted delays.

mod anthropic;
mod checks;
mod hostile;
mod http;
mod responses;
mod script;
mod server;

pub use checks::tool_pairing_violations;
pub use hostile::{HOSTILE_LIMIT, noise};
pub use http::STALL_LIMIT;
pub use responses::{chat_messages, chat_view, incomplete_reply};
pub use script::{Reply, Script};
pub use server::{FakeServer, Recorded};
