//! The runtimes safeprune talks to, behind one interface.
//!
//! [`Engine`] is what the app and the executor need from a runtime: a
//! snapshot, fresh facts about one object just before its removal, and the
//! removal itself. [`Runtime`] dispatches to the real adapters; tests of the
//! planner and executor use an in-memory engine instead.
//!
//! The adapters (`docker`, `containerd`, `cri`) sit side by side on what
//! they share: the interface (`engine`), its errors (`error`) and gRPC over
//! a unix socket (`grpc`); `connect` sits above them and chooses one.

mod connect;
pub mod containerd;
pub mod cri;
pub mod docker;
mod engine;
mod error;
mod fs;
mod grpc;
#[cfg(test)]
pub mod memory;

pub use connect::{Chosen, Runtime};
pub use engine::{Engine, Removal, Target};
pub use error::{NoneAnswered, RuntimeError};
pub use fs::fs_usage;
