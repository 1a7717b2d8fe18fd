//! safeprune: pod-aware, policy-driven pruning for Docker and containerd nodes.
//!
//! The crate is a pure planner ([`plan`]) between a runtime-neutral snapshot
//! ([`inventory`]) and one executor that deletes; the binary in `main.rs` is a
//! thin shell over [`app`].

pub mod app;
pub mod cli;
pub mod cycle;
pub mod daemon;
pub mod error;
pub mod execute;
pub mod explain;
pub mod inventory;
pub mod output;
pub mod plan;
pub mod policy;
pub mod report;
pub mod runtime;
pub mod schedule;
