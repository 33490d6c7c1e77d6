//! The one integration test binary: shared helpers in `support`, one module
//! per area, each tested end to end.

mod support;

mod budget;
mod cli;
mod config;
mod dag;
mod fuzz;
mod harness;
mod llm_client;
mod review_cmds;
mod run_e2e;
mod safety;
mod sandbox;
mod sse;
mod subagents;
