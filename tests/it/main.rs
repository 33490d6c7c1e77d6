//! The one integration test binary; each module tests one area end to end.

mod support;

mod harness;
mod llm_client;
