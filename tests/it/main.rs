//! The one integration test binary: shared helpers in `support`, one module
//! per area, each tested end to end.

mod support;

mod cli;
mod dag;
mod fuzz;
mod harness;
mod llm_client;
mod review_cmds;
mod run_e2e;
mod safety;
mod subagents;
