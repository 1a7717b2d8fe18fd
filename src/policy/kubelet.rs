//! kubelet's image garbage collection as its configuration file sets it,
//! for `images.disk.from_kubelet`: safeprune's watermarks a margin under
//! kubelet's, so that safeprune's plan (explained, reviewed, re-checked)
//! frees the disk before kubelet's own collector has to.
//!
//! The file is kubelet's `--config`: a `KubeletConfiguration` of
//! `kubelet.config.k8s.io/v1beta1`, in YAML or JSON. Only three fields are
//! read; the rest of the file is kubelet's business and is not checked.
//! What kubelet does when a field is missing is what counts (its defaults,
//! kubernetes `pkg/kubelet/apis/config/v1beta1/defaults.go`): 85 and 80
//! percent, and `2m` for `imageMinimumGCAge` also when it is `0s`. Its
//! validation (`pkg/kubelet/apis/config/validation/validation.go`) is
//! repeated, so that a file kubelet would refuse is refused here too.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::PolicyError;
use super::read::read_policy_file;
use super::values::Age;

/// Where kubeadm (and most installers) write kubelet's configuration:
/// what `from_kubelet: true` reads.
pub const KUBELET_CONFIG_PATH: &str = "/var/lib/kubelet/config.yaml";

/// How many points under kubelet's thresholds safeprune's watermarks sit.
pub const MARGIN_POINTS: u8 = 5;

const API_VERSION: &str = "kubelet.config.k8s.io/v1beta1";
const KIND: &str = "KubeletConfiguration";

/// One of kubelet's settings: the value kubelet uses, and whether the file
/// wrote it or kubelet's default stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setting<T> {
    pub value: T,
    /// `false`: the file leaves it out (or, for `imageMinimumGCAge`, says
    /// `0s`), so kubelet's default applies.
    pub written: bool,
}

/// kubelet's image garbage collection as read from its configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletImageGc {
    /// The file read.
    pub path: PathBuf,
    /// `imageGCHighThresholdPercent`: kubelet collects images above it.
    pub high_threshold: Setting<u8>,
    /// `imageGCLowThresholdPercent`: down to this.
    pub low_threshold: Setting<u8>,
    /// `imageMinimumGCAge`: kubelet removes no image unused for less.
    pub minimum_gc_age: Setting<Age>,
}

/// The three fields read; everything else in the file is left alone, as
/// kubelet's own lenient v1beta1 decoding leaves unknown fields.
#[derive(Deserialize)]
struct Written {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(rename = "imageGCHighThresholdPercent")]
    high: Option<i64>,
    #[serde(rename = "imageGCLowThresholdPercent")]
    low: Option<i64>,
    #[serde(rename = "imageMinimumGCAge")]
    minimum_gc_age: Option<String>,
}

impl KubeletImageGc {
    /// Reads kubelet's configuration at `path`, with the bounds and (as
    /// root) the ownership checks of the policy file itself: whoever can
    /// write it moves what root deletes.
    ///
    /// # Errors
    /// The file cannot be read, or is not a configuration kubelet would
    /// accept; the error names the path.
    pub fn read(path: &Path) -> Result<Self, PolicyError> {
        let fault = |message: String| PolicyError::Kubelet {
            path: path.to_owned(),
            message,
        };
        let text = read_policy_file(path).map_err(|e| {
            fault(match e {
                PolicyError::Read { source, .. } => format!(
                    "{}: give the path of kubelet's --config file, or write \
                     images.disk.high_percent and low_percent instead",
                    match source.kind() {
                        std::io::ErrorKind::NotFound => "no such file".to_owned(),
                        std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
                        _ => source.to_string(),
                    }
                ),
                PolicyError::Invalid { message, .. } | PolicyError::Kubelet { message, .. } => {
                    message
                }
                PolicyError::Untrusted { why, .. } => {
                    format!("{why}; whoever can write it decides what root deletes")
                }
            })
        })?;
        Self::parse(&text, path).map_err(fault)
    }

    /// Parses the text of kubelet's configuration; `path` is where it came
    /// from.
    ///
    /// # Errors
    /// A message saying what is wrong and what to do.
    pub fn parse(text: &str, path: &Path) -> Result<Self, String> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        // kubelet takes JSON or YAML; JSON is read as JSON, so its errors
        // point where a JSON reader would.
        let written: Written = if text.trim_start().starts_with('{') {
            serde_json::from_str(text).map_err(|e| e.to_string())?
        } else {
            serde_yaml::from_str(text).map_err(|e| e.to_string())?
        };
        match (written.api_version.as_deref(), written.kind.as_deref()) {
            (Some(API_VERSION), Some(KIND)) => {}
            (api_version, kind) => {
                return Err(format!(
                    "it is not a kubelet configuration (apiVersion {}, kind {}; kubelet reads \
                     apiVersion {API_VERSION}, kind {KIND}): give the path of kubelet's \
                     --config file",
                    api_version.unwrap_or("missing"),
                    kind.unwrap_or("missing"),
                ));
            }
        }
        let percent = |name: &str, value: Option<i64>, default: u8| match value {
            None => Ok(Setting {
                value: default,
                written: false,
            }),
            Some(v) => u8::try_from(v)
                .ok()
                .filter(|p| *p <= 100)
                .map(|value| Setting {
                    value,
                    written: true,
                })
                .ok_or_else(|| {
                    format!(
                        "{name} {v} is out of range: kubelet takes 0 to 100 (it would not start)"
                    )
                }),
        };
        let high = percent("imageGCHighThresholdPercent", written.high, 85)?;
        let low = percent("imageGCLowThresholdPercent", written.low, 80)?;
        if low.value >= high.value {
            return Err(format!(
                "imageGCLowThresholdPercent {} is not under imageGCHighThresholdPercent {}: \
                 kubelet would not start with it",
                low.value, high.value
            ));
        }
        if high.value == 100 {
            return Err(
                "imageGCHighThresholdPercent is 100: kubelet's image garbage collection is off, \
                 so there is no threshold to act before; write images.disk.high_percent and \
                 low_percent instead"
                    .to_owned(),
            );
        }
        let minimum_gc_age = match written.minimum_gc_age.as_deref() {
            None => None,
            Some(text) => Some(go_duration(text).map_err(|why| {
                format!("imageMinimumGCAge {text:?} is not a duration kubelet reads: {why}")
            })?),
        };
        let minimum_gc_age = match minimum_gc_age {
            // kubelet: "If unset or 0, defaults to 2m".
            Some(age) if age != Age::zero() => Setting {
                value: age,
                written: true,
            },
            _ => Setting {
                value: Age::minutes(2),
                written: false,
            },
        };
        Ok(Self {
            path: path.to_owned(),
            high_threshold: high,
            low_threshold: low,
            minimum_gc_age,
        })
    }

    /// safeprune's `high_percent` and `low_percent`: [`MARGIN_POINTS`]
    /// under kubelet's, but `high_percent` at least 2 and `low_percent` at
    /// least 1 and under `high_percent`.
    #[must_use]
    pub fn watermarks(&self) -> (u8, u8) {
        let high = self
            .high_threshold
            .value
            .saturating_sub(MARGIN_POINTS)
            .max(2);
        let low = self
            .low_threshold
            .value
            .saturating_sub(MARGIN_POINTS)
            .max(1)
            .min(high - 1);
        (high, low)
    }
}

/// What was derived, and from where, as `check` and `plan` print it.
impl fmt::Display for KubeletImageGc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let default = |s: bool| if s { "" } else { ", kubelet's default" };
        let (high, low) = self.watermarks();
        write!(
            f,
            "images.disk from {}: high_percent {high}, low_percent {low} ({MARGIN_POINTS} under \
             imageGCHighThresholdPercent {}{} and imageGCLowThresholdPercent {}{}); no image \
             younger than imageMinimumGCAge {}{} is removed",
            self.path.display(),
            self.high_threshold.value,
            default(self.high_threshold.written),
            self.low_threshold.value,
            default(self.low_threshold.written),
            self.minimum_gc_age.value,
            default(self.minimum_gc_age.written),
        )
    }
}

/// A Go duration (`time.ParseDuration`, what kubelet's `metav1.Duration`
/// takes): `2m0s`, `1h30m`, `90s`, `1.5h`, `300ms`, `0`; rounded up to the
/// second, so a floor is never shortened.
fn go_duration(text: &str) -> Result<Age, String> {
    const UNITS: [(&str, u128); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("\u{b5}s", 1_000),
        ("\u{3bc}s", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];
    let bad = || "write it as kubelet does: 2m0s, 90s, 1h30m".to_owned();
    if text.starts_with('-') {
        return Err("it is negative: kubelet refuses it".to_owned());
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Age::zero());
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut nanos: f64 = 0.0;
    while !rest.is_empty() {
        let number_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let number = &rest[..number_end];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(bad());
        }
        let value: f64 = number.parse().map_err(|_| bad())?;
        rest = &rest[number_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_end];
        let (_, size) = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .ok_or_else(|| format!("unknown unit {unit:?}: use ns, us, ms, s, m or h"))?;
        #[expect(clippy::cast_precision_loss, reason = "a unit's size, at most 3.6e12")]
        let size = *size as f64;
        nanos += value * size;
        rest = &rest[unit_end..];
    }
    // Go's own limit: about 292 years in nanoseconds.
    #[expect(clippy::cast_precision_loss, reason = "a limit")]
    if nanos > i64::MAX as f64 {
        return Err("it is longer than kubelet can hold (about 292 years)".to_owned());
    }
    #[expect(
        clippy::cast_possible_truncation,
        reason = "checked above: under i64::MAX"
    )]
    let seconds = (nanos / 1e9).ceil() as i64;
    Ok(Age::seconds(seconds))
}

#[cfg(test)]
#[path = "kubelet_tests.rs"]
mod tests;
