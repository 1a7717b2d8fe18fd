//! Pacing: how removals yield to the node's workloads (`safety.pace`).
//!
//! One law, the stall budget: the removals may add at most
//! `added_io_pressure_percent` of wall time to the time the workloads'
//! tasks wait (PSI `some` of their cgroup), above what they wait by
//! themselves; none starts while a window's I/O stall is above the ceiling
//! `io_pressure_percent`.
//!
//! - `signal.rs`: whose stall ([`Signal`]: kubelet's pods' cgroup, one the
//!   policy names, or the node's), found once for `run`, `check` and
//!   `plan`, and the stall read from it ([`Stall`]);
//! - `psi.rs`: reading a PSI file;
//! - `baseline.rs`: the workloads' own stall, measured before the first
//!   removal;
//! - `budget.rs`: the law, a pure account of allowance, stall and learned
//!   costs that takes every time as an argument;
//! - `pacer.rs`: the executor's side ([`Pacer`]): when a batch and a
//!   removal may go, the waits, `max_delay`;
//! - `adapt.rs`: `safety.concurrency: auto` for an unpaced run;
//! - `report.rs`: what pacing says in the report, the table, `check` and
//!   `plan`.

mod adapt;
mod baseline;
mod budget;
mod pacer;
mod psi;
mod report;
mod signal;

pub use budget::Weight;
pub use pacer::{Gate, Pacer, Slot};
pub use psi::some_avg10;
pub use report::{BudgetReport, PaceReport, StallCheck, ceiling_only_note};
pub use signal::{NoSignal, Signal};
