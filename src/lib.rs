//! orch: a command-line orchestrator for LLM coding agents.
//!
//! A pipeline file describes a DAG of stages; each stage runs one role agent
//! over a git worktree of the user's repository and is committed on its own
//! branch. See `README.md` and `docs/` for the user-facing picture.

pub mod agent;
pub mod catalog;
pub mod cli;
pub mod config;
pub mod exec;
pub mod git;
pub mod ids;
pub mod llm;
pub mod pipeline;
pub mod policy;
pub mod role;
pub mod runlog;
pub mod runner;
pub mod sandbox;
pub mod subagent;
pub mod tools;
pub mod ui;
