//! The one integration test binary: shared helpers in `support`, one module
//! per area.

mod cli;
mod run_e2e;
mod support;
