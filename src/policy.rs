//! The YAML policy: its schema, its defaults and its validation.
//!
//! Validation happens while deserializing, so every error carries the line
//! and column of the offending value. The built-in default is
//! `config/policy.yaml`, compiled in, so the documented file and the default
//! cannot drift apart.
//!
//! - `schema.rs`: [`Policy`] and its sections, their serde attributes and
//!   defaults;
//! - `values.rs`: what one value may be ([`Age`], [`Schedule`], [`Pattern`],
//!   [`LabelRule`], …), and in `values/deserialize.rs` the helpers that check
//!   a scalar where it is read;
//! - `source.rs`: where the policy comes from ([`PolicySource`]) and how it
//!   is parsed and loaded ([`PolicyError`]);
//! - `read.rs`, `trust.rs`, `scan.rs`: reading the file, whether root may
//!   trust it, and the first pass over its YAML before serde;
//! - `kubelet.rs`: kubelet's image garbage collection, read from its
//!   configuration file for `images.disk.from_kubelet`.

mod crontab;
mod hints;
mod kubelet;
mod read;
mod scan;
mod schema;
mod source;
mod trust;
mod values;

pub use kubelet::{KUBELET_CONFIG_PATH, KubeletImageGc, MARGIN_POINTS, Setting};
pub use read::{MAX_POLICY_BYTES, read_policy_file};
pub use schema::{
    BuildCacheRules, ContainerRules, ContainerdConfig, DiskWatermarks, DockerConfig, ImageMode,
    ImageRules, MetricsConfig, NetworkRules, OnMaxDelay, Pace, Policy, Protect, ReportConfig,
    RuntimeChoice, RuntimeConfig, Safety, Timezone, VolumeRules,
};
pub use source::{DEFAULT_POLICY_YAML, PolicyError, PolicySource, SYSTEM_POLICY_PATH};
pub use values::{
    Age, Concurrency, KeepUnpullable, LabelRule, Listen, MAX_PATTERN_CHARS, Pattern, Schedule,
    Version, WorkloadsCgroup,
};

#[cfg(test)]
mod props;
#[cfg(test)]
mod tests;
