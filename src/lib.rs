//! orch: a command-line orchestrator for LLM coding agents.
//!
//! A pipeline file describes a DAG of stages; each stage runs one role agent
//! over a git worktree of the user's repository and is committed on its own
//! branch. See `README.md` and `docs/` for the user-facing picture.

#![warn(unreachable_pub)]

pub(crate) mod agent;
pub(crate) mod budget;
pub(crate) mod catalog;
pub mod cli;
pub mod config;
pub(crate) mod dirs;
pub(crate) mod distributed;
pub mod environment;
pub(crate) mod eval;
pub mod events;
pub(crate) mod exec;
pub mod exit;
pub mod forge;
pub mod git;
pub(crate) mod hooks;
pub mod ids;
pub mod killpoint;
pub mod llm;
pub mod mcp;
pub mod memory;
pub mod pipeline;
pub mod policy;
pub mod role;
pub(crate) mod runlog;
pub(crate) mod runner;
pub mod sandbox;
pub mod sandbox_profile;
pub mod secrets;
pub mod setup;
pub(crate) mod skills;
pub mod subagent;
pub(crate) mod text;
pub(crate) mod toolname;
pub mod tools;
pub mod ui;
pub(crate) mod webui;
