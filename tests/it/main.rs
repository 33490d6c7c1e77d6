//! The one integration test binary: shared helpers in `support`, one module
//! per area, each tested end to end.

mod support;

mod budget;
mod cli;
mod config;
mod dag;
mod eval;
mod fuzz;
mod harness;
mod hostile;
mod llm_bounds;
mod llm_client;
mod llm_e2e;
mod llm_wire;
mod review_cmds;
mod run_e2e;
mod safety;
mod sse;
mod streams;
mod subagents;
