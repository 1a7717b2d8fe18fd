//! The policy's schema: [`Policy`] and its sections, with their serde
//! attributes and their defaults. What a single value may be (a duration, a
//! glob, a path) is `values.rs`; where the text comes from and how it is
//! parsed, `source.rs`.

use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize};

use super::kubelet::{KUBELET_CONFIG_PATH, KubeletImageGc};
use super::values::{
    Age, Concurrency, KeepUnpullable, LabelRule, Listen, Pattern, Schedule, Version,
    WorkloadsCgroup, absolute_path, added_percent, endpoint, keep_recent, kubelet_config_path,
    max_deletions, percent, report_path, texts, whole_percent, workloads_cgroup,
};

/// The whole policy, with every default filled in.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    #[serde(default)]
    pub version: Version,
    #[serde(default)]
    pub runtime: RuntimeConfig,
    #[serde(default = "default_schedule")]
    pub schedule: Schedule,
    /// Each daemon cycle starts at a random offset within this span after
    /// its scheduled time, so a fleet does not prune at the same second.
    #[serde(default = "Age::zero")]
    pub schedule_jitter: Age,
    #[serde(default)]
    pub timezone: Timezone,
    #[serde(default)]
    pub protect: Protect,
    #[serde(default)]
    pub containers: ContainerRules,
    #[serde(default)]
    pub images: ImageRules,
    #[serde(default)]
    pub volumes: VolumeRules,
    #[serde(default)]
    pub networks: NetworkRules,
    #[serde(default)]
    pub build_cache: BuildCacheRules,
    #[serde(default)]
    pub safety: Safety,
    #[serde(default)]
    pub report: ReportConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
    #[serde(default = "default_lock_file", deserialize_with = "absolute_path")]
    pub lock_file: PathBuf,
    /// Where safeprune keeps what it must remember between runs: the
    /// images' usage history.
    #[serde(default = "default_state_dir", deserialize_with = "absolute_path")]
    pub state_dir: PathBuf,
}

/// Which runtime to talk to, and where.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RuntimeConfig {
    pub kind: RuntimeChoice,
    pub docker: DockerConfig,
    pub containerd: ContainerdConfig,
    pub cri: CriConfig,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            kind: RuntimeChoice::Auto,
            docker: DockerConfig::default(),
            containerd: ContainerdConfig::default(),
            cri: CriConfig::default(),
        }
    }
}

/// `runtime.kind`: one runtime, or `auto` (whichever answers: Docker, then
/// containerd, then a CRI runtime at `runtime.cri.endpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeChoice {
    Auto,
    Docker,
    Containerd,
    /// Any CRI runtime (CRI-O) through CRI alone.
    Cri,
}

impl RuntimeChoice {
    /// The name as the policy writes it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Docker => "docker",
            Self::Containerd => "containerd",
            Self::Cri => "cri",
        }
    }

    /// The runtime the policy names; `None` for `auto`.
    #[must_use]
    pub fn only(self) -> Option<crate::inventory::RuntimeKind> {
        match self {
            Self::Auto => None,
            Self::Docker => Some(crate::inventory::RuntimeKind::Docker),
            Self::Containerd => Some(crate::inventory::RuntimeKind::Containerd),
            Self::Cri => Some(crate::inventory::RuntimeKind::Cri),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DockerConfig {
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
}

impl Default for DockerConfig {
    fn default() -> Self {
        Self {
            endpoint: "unix:///var/run/docker.sock".to_owned(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerdConfig {
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
    #[serde(deserialize_with = "texts")]
    pub namespaces: Vec<String>,
}

impl Default for ContainerdConfig {
    fn default() -> Self {
        Self {
            endpoint: "/run/containerd/containerd.sock".to_owned(),
            namespaces: vec!["k8s.io".to_owned()],
        }
    }
}

/// `runtime.cri`: a CRI runtime's socket (`runtime.kind: cri`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CriConfig {
    #[serde(deserialize_with = "endpoint")]
    pub endpoint: String,
}

impl Default for CriConfig {
    fn default() -> Self {
        Self {
            endpoint: "unix:///var/run/crio/crio.sock".to_owned(),
        }
    }
}

/// The time zone the schedule is read in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Timezone {
    #[default]
    #[serde(rename = "UTC")]
    Utc,
    #[serde(rename = "local")]
    Local,
}

/// What is never removed, whatever the per-kind rules say.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Protect {
    pub labels: Vec<LabelRule>,
    pub live_pod_sandboxes: bool,
    /// Always `true`: pod sandboxes are kubelet's on every runtime. `false`
    /// is refused when the policy is read (it deleted sandboxes on Docker
    /// and was refused by the containerd adapter). The key stays
    /// so that policies which spell out the default keep working.
    #[serde(deserialize_with = "always_true")]
    pub pod_sandboxes: bool,
}

/// `true`, the one value `protect.pod_sandboxes` takes.
fn always_true<'de, D: Deserializer<'de>>(de: D) -> Result<bool, D::Error> {
    if bool::deserialize(de)? {
        Ok(true)
    } else {
        Err(serde::de::Error::custom(
            "pod_sandboxes: false is not supported: pod sandboxes belong to kubelet, and \
             safeprune removes none on any runtime (removing one behind kubelet breaks its \
             pod's bookkeeping); remove the key, or write true",
        ))
    }
}

impl Default for Protect {
    fn default() -> Self {
        Self {
            labels: vec![
                LabelRule::from_str("io.kubernetes.container.name=istio-init")
                    .expect("the built-in label rule is valid"),
            ],
            live_pod_sandboxes: true,
            pod_sandboxes: true,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContainerRules {
    pub enabled: bool,
    pub min_age: Age,
}

impl Default for ContainerRules {
    fn default() -> Self {
        Self {
            enabled: true,
            min_age: Age::hours(1),
        }
    }
}

/// Which images `images` may remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageMode {
    /// Only images without a tag.
    Dangling,
    /// Any image no kept container uses.
    Unused,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImageRules {
    pub enabled: bool,
    pub mode: ImageMode,
    pub min_age: Age,
    pub keep: Vec<Pattern>,
    /// Keep the N most recently used images of each repository; 0: none.
    #[serde(deserialize_with = "keep_recent")]
    pub keep_recent: u32,
    /// Prune only under disk pressure, least recently used first; `None`:
    /// by the age rules alone.
    pub disk: Option<DiskWatermarks>,
    /// Keep an image with a name no registry can give back (`unpullable`).
    pub keep_unpullable: KeepUnpullable,
}

/// When images are pruned by disk pressure: while the image store's file
/// system is fuller than `high_percent`, until it is at `low_percent`.
/// Written as both percents (each with its default), or as
/// `from_kubelet`, which derives both from kubelet's image garbage
/// collection (and adds its `imageMinimumGCAge` to the image age rules).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskWatermarks {
    pub high_percent: u8,
    pub low_percent: u8,
    /// With `from_kubelet`: kubelet's configuration as read, which the
    /// percents above come from (boxed: every policy carries this field,
    /// and the daemon's future holds policies).
    pub kubelet: Option<Box<KubeletImageGc>>,
}

impl DiskWatermarks {
    /// Watermarks written as percents.
    #[must_use]
    pub fn percents(high_percent: u8, low_percent: u8) -> Self {
        Self {
            high_percent,
            low_percent,
            kubelet: None,
        }
    }

    /// Watermarks a margin under kubelet's thresholds
    /// ([`KubeletImageGc::watermarks`]).
    #[must_use]
    pub fn from_kubelet(kubelet: KubeletImageGc) -> Self {
        let (high_percent, low_percent) = kubelet.watermarks();
        Self {
            high_percent,
            low_percent,
            kubelet: Some(Box::new(kubelet)),
        }
    }
}

/// As `check` prints it, so that it reads back the same: the percents, or
/// `from_kubelet` with its path (what was read from it goes to stderr).
impl Serialize for DiskWatermarks {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        if let Some(kubelet) = &self.kubelet {
            map.serialize_entry("from_kubelet", &kubelet.path)?;
        } else {
            map.serialize_entry("high_percent", &self.high_percent)?;
            map.serialize_entry("low_percent", &self.low_percent)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for DiskWatermarks {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Written {
            #[serde(default, deserialize_with = "whole_percent")]
            high_percent: Option<u64>,
            #[serde(default, deserialize_with = "whole_percent")]
            low_percent: Option<u64>,
            #[serde(default, deserialize_with = "from_kubelet")]
            from_kubelet: Option<PathBuf>,
        }
        fn from_kubelet<'de, D: Deserializer<'de>>(de: D) -> Result<Option<PathBuf>, D::Error> {
            kubelet_config_path(de, KUBELET_CONFIG_PATH).map(Some)
        }
        let w = Written::deserialize(de)?;
        if let Some(path) = w.from_kubelet {
            if w.high_percent.is_some() || w.low_percent.is_some() {
                return Err(serde::de::Error::custom(
                    "from_kubelet sets high_percent and low_percent from kubelet's thresholds: \
                     write either from_kubelet or the percents, not both",
                ));
            }
            // Read now, so that `check` refuses what `run` would.
            return KubeletImageGc::read(&path)
                .map(Self::from_kubelet)
                .map_err(serde::de::Error::custom);
        }
        let high = w.high_percent.unwrap_or_else(default_high_percent);
        let low = w.low_percent.unwrap_or_else(default_low_percent);
        let percent = |v: u64| u8::try_from(v).ok().filter(|p| *p <= 100);
        match (percent(high), percent(low)) {
            (Some(high_percent), Some(low_percent)) if low_percent < high_percent => {
                Ok(Self::percents(high_percent, low_percent))
            }
            _ => Err(serde::de::Error::custom(format!(
                "disk watermarks high_percent {high} and low_percent {low} do not fit: write whole \
                 percents from 0 to 100, low_percent under high_percent (e.g. 85 and 70)"
            ))),
        }
    }
}

fn default_high_percent() -> u64 {
    85
}

fn default_low_percent() -> u64 {
    70
}

impl Default for ImageRules {
    fn default() -> Self {
        Self {
            enabled: true,
            mode: ImageMode::Unused,
            min_age: Age::hours(24),
            keep: ["registry.k8s.io/pause:*", "k8s.gcr.io/pause:*"]
                .into_iter()
                .map(|p| Pattern::from_str(p).expect("the built-in patterns are valid"))
                .collect(),
            keep_recent: 0,
            disk: None,
            keep_unpullable: KeepUnpullable::Auto,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct VolumeRules {
    pub enabled: bool,
    pub anonymous_only: bool,
    pub min_age: Age,
    pub keep_labels: Vec<LabelRule>,
}

impl Default for VolumeRules {
    fn default() -> Self {
        Self {
            enabled: false,
            anonymous_only: true,
            min_age: Age::hours(168),
            keep_labels: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkRules {
    pub enabled: bool,
    pub min_age: Age,
}

impl Default for NetworkRules {
    fn default() -> Self {
        Self {
            enabled: true,
            min_age: Age::hours(1),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BuildCacheRules {
    pub enabled: bool,
    pub min_age: Age,
}

impl Default for BuildCacheRules {
    fn default() -> Self {
        Self {
            enabled: true,
            min_age: Age::hours(24),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Safety {
    /// A plan with more deletions than this is refused whole.
    #[serde(deserialize_with = "max_deletions")]
    pub max_deletions: u64,
    /// Removals in flight at once.
    pub concurrency: Concurrency,
    /// `run --plan` refuses a plan older than this.
    pub max_plan_age: Age,
    /// Hold removals to the workloads' stall budget; `None`: never.
    pub pace: Option<Pace>,
}

impl Default for Safety {
    fn default() -> Self {
        Self {
            max_deletions: 1000,
            concurrency: Concurrency::Auto,
            max_plan_age: Age::hours(24),
            pace: Some(Pace::default()),
        }
    }
}

/// How removals yield to the workloads: the stall budget. The removals may
/// add at most `added_io_pressure_percent` of wall time to the time the
/// workloads' tasks wait (PSI `some` of their cgroup's `io.pressure`, with
/// its `cpu.pressure` beside it), above what they wait by themselves; no
/// removal starts while a window's I/O stall is above
/// `io_pressure_percent`, the ceiling; the waits come to at most
/// `max_delay` per run, and `on_max_delay` says what comes after.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pace {
    /// The share of wall time, percent, the removals may add to the
    /// workloads' stall above their baseline: the target.
    pub added_io_pressure_percent: f64,
    /// The ceiling: the share of a window stalled on I/O, percent, above
    /// which no removal starts, whatever the baseline.
    pub io_pressure_percent: f64,
    pub max_delay: Age,
    /// What the rest of a run does once `max_delay` is spent.
    pub on_max_delay: OnMaxDelay,
    /// Whose stall: kubelet's pods' cgroup where found, the node's, or a
    /// cgroup named.
    pub workloads_cgroup: WorkloadsCgroup,
    /// `io_pressure_percent` was written and `added_io_pressure_percent`
    /// was not: a policy written for the absolute threshold, which now
    /// means the ceiling with the budget at its default target (`check`
    /// and every run say so once).
    #[serde(skip)]
    pub ceiling_only: bool,
}

/// What a paced run does once its waits came to `max_delay`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnMaxDelay {
    /// The rest goes one removal at a time, without waiting.
    #[default]
    Continue,
    /// No more removals this run: the rest waits for the next.
    Stop,
}

impl OnMaxDelay {
    /// The word the policy and the report use.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Continue => "continue",
            Self::Stop => "stop",
        }
    }
}

impl Default for Pace {
    fn default() -> Self {
        Self {
            added_io_pressure_percent: 0.1,
            io_pressure_percent: 10.0,
            max_delay: Age::minutes(10),
            on_max_delay: OnMaxDelay::Continue,
            workloads_cgroup: WorkloadsCgroup::Auto,
            ceiling_only: false,
        }
    }
}

/// `pace <key> <value> is out of range`, unless `value` is above 0 and
/// under 100.
fn pace_percent(key: &str, value: f64, example: &str) -> Result<f64, String> {
    if value > 0.0 && value < 100.0 {
        Ok(value)
    } else {
        Err(format!(
            "pace {key} {value} is out of range: write a percent above 0 and under 100 (e.g. {example})"
        ))
    }
}

impl<'de> Deserialize<'de> for Pace {
    fn deserialize<D: Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Written {
            #[serde(default, deserialize_with = "added_percent")]
            added_io_pressure_percent: Option<f64>,
            #[serde(default, deserialize_with = "percent")]
            io_pressure_percent: Option<f64>,
            max_delay: Option<Age>,
            #[serde(default)]
            on_max_delay: OnMaxDelay,
            #[serde(default, deserialize_with = "workloads_cgroup")]
            workloads_cgroup: Option<WorkloadsCgroup>,
        }
        let w = Written::deserialize(de)?;
        let default = Self::default();
        let added_io_pressure_percent = pace_percent(
            "added_io_pressure_percent",
            w.added_io_pressure_percent
                .unwrap_or(default.added_io_pressure_percent),
            "0.1",
        )
        .map_err(serde::de::Error::custom)?;
        let io_pressure_percent = pace_percent(
            "io_pressure_percent",
            w.io_pressure_percent.unwrap_or(default.io_pressure_percent),
            "10",
        )
        .map_err(serde::de::Error::custom)?;
        Ok(Self {
            added_io_pressure_percent,
            io_pressure_percent,
            max_delay: w.max_delay.unwrap_or(default.max_delay),
            on_max_delay: w.on_max_delay,
            workloads_cgroup: w.workloads_cgroup.unwrap_or_default(),
            ceiling_only: w.io_pressure_percent.is_some() && w.added_io_pressure_percent.is_none(),
        })
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReportConfig {
    /// Write the last run's JSON report here; empty: do not.
    #[serde(deserialize_with = "report_path")]
    pub json_path: String,
    /// A `node_exporter` textfile collector path; empty: do not.
    #[serde(deserialize_with = "report_path")]
    pub metrics_textfile: String,
    /// JSON lines, one per removal attempt; empty: do not.
    #[serde(deserialize_with = "report_path")]
    pub audit_log: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Where the daemon serves `/metrics` and `/healthz`; off by default.
    pub listen: Listen,
}

fn default_schedule() -> Schedule {
    Schedule::from_str("0 5 * * 4").expect("the built-in schedule is valid")
}

fn default_state_dir() -> PathBuf {
    PathBuf::from("/var/lib/safeprune")
}

fn default_lock_file() -> PathBuf {
    PathBuf::from("/run/safeprune.lock")
}
