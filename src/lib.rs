//! safeprune: pod-aware, policy-driven pruning for Docker and containerd nodes.
//!
//! The crate is a pure planner ([`plan`]) between a runtime-neutral snapshot
//! ([`inventory`]) and one executor that deletes ([`execute`]); the binary in
//! `main.rs` is a thin shell over [`app`]. Layers import one way, downwards
//! (docs/design.md, "Layers"; `tests/integration/layers.rs` checks it):
//!
//! - commands: [`app`] over [`daemon`] over [`cycle`], and [`explain`];
//! - [`report`] and [`error`], over the executor [`execute`];
//! - the adapters behind [`runtime`];
//! - the pure core: [`plan`] and [`schedule`] over [`policy`] over
//!   [`inventory`];
//! - [`cli`], [`exit_codes`], [`output`] and [`shutdown`] stand apart and
//!   import nothing of the crate: build.rs includes `cli.rs` and
//!   `exit_codes.rs` as they are;
//! - [`manual`], the man page and the shell completions, imports only
//!   [`cli`] and [`exit_codes`]: build.rs includes it too.

pub mod app;
pub mod cli;
pub mod cycle;
pub mod daemon;
pub mod error;
pub mod execute;
pub mod exit_codes;
pub mod explain;
pub mod history;
pub mod inventory;
pub mod manual;
pub mod output;
pub mod pace;
pub mod plan;
pub mod policy;
pub mod report;
pub mod reviewed;
pub mod runtime;
pub mod schedule;
pub mod shutdown;
