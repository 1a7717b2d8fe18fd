//! The integration tests, built into one binary (as ripgrep's
//! `tests/integration/`): each file a module of the old test of the same
//! name, sharing one harness (`util`), compiled and linked once.
//!
//! Most start private engines of their own (`util`); those that need none
//! make the fast tier of `cargo nextest run --profile fast`
//! (`.config/nextest.toml`, CONTRIBUTING.md "Tests").

mod util;

mod alert_rules;
mod cli;
mod compare_prune;
mod containerd_adapter;
mod containerd_node;
mod containerd_v2;
mod cri_dockerd_node;
mod cri_on_containerd;
mod crio_harness;
mod crio_node;
mod daemon;
mod daemonset_pod;
mod disk_pressure;
mod docker28;
mod docker28_images;
mod docker_adapter;
mod docker_node;
mod docs;
mod engine_faults;
mod exit_codes;
mod hostile_policies;
mod image;
mod kubelet_gc;
mod layers;
mod metrics_promtool;
mod pace;
mod package;
mod plan_listing;
mod reviewed_plans;
mod run_terminal;
mod systemd_units;
mod unpullable;
