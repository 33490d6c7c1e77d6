//! The one integration test binary: shared helpers in `support`, one module
//! per area, each tested end to end.

// Test and benchmark code: a failed unwrap is a failed run, and printing is its output.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr
)]

mod constrained;
mod support;

mod action_triggers;
mod agent_files;
mod anthropic;
mod best_of_n;
mod bootstrap;
mod budget;
mod claude_agent_all;
mod cli;
mod config;
mod context_files;
mod control;
mod conventions_a;
mod conventions_b;
mod dag;
mod distributed;
mod escalation;
mod eval;
mod eval_compare;
mod eval_import;
mod events;
mod faults;
mod finish_text;
mod first_token;
mod forge;
mod fuzz;
mod git_compat;
mod harness;
mod hooks;
mod hostile;
mod kills;
mod lane_checkout;
mod lane_pool;
mod lane_watch;
mod llm_bounds;
mod llm_client;
mod llm_e2e;
mod llm_wire;
mod logview;
mod mcp;
mod mcp_http;
mod memory;
mod memory_safety;
mod merge_conflicts;
mod outcomes;
mod preflight;
mod preflight_bench;
mod prompt_cache;
mod prompt_cache_prefix;
mod react;
mod react_merge;
mod reap;
mod request_size;
mod responses_api;
mod review_cmds;
mod run_e2e;
mod run_settings;
mod runs_cli;
mod runs_live;
mod safety;
mod sampling;
mod sandbox;
mod sandbox_e2e;
mod sandbox_holes;
mod setup;
mod setup_checks;
mod setup_lane;
mod skills;
mod small_fixes;
mod small_model;
mod sse;
mod stage_models;
mod streams;
mod subagents;
mod syntax_check;
mod text_edits;
mod tool_faults;
mod verify;
mod watch;
mod webui;
mod whole_file_ask;
