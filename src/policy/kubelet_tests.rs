//! kubelet's configuration files of the shapes kubelet accepts
//! (`tests/fixtures/kubelet/`), and the ones it refuses.

use std::path::Path;

use super::*;

/// The fixture `name`, parsed as if read from its place.
fn fixture(name: &str) -> Result<KubeletImageGc, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kubelet")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("the fixture exists");
    KubeletImageGc::parse(&text, &path)
}

fn written<T>(value: T) -> Setting<T> {
    Setting {
        value,
        written: true,
    }
}

fn default<T>(value: T) -> Setting<T> {
    Setting {
        value,
        written: false,
    }
}

#[test]
fn what_kubeadm_writes_takes_kubelets_defaults() {
    // No thresholds, and `imageMinimumGCAge: 0s`, which kubelet reads as
    // its default 2m.
    for name in ["kubeadm.yaml", "minimal.yaml", "minimal.json"] {
        let gc = fixture(name).unwrap();
        assert_eq!(gc.high_threshold, default(85), "{name}");
        assert_eq!(gc.low_threshold, default(80), "{name}");
        assert_eq!(gc.minimum_gc_age, default(Age::minutes(2)), "{name}");
        assert_eq!(gc.watermarks(), (80, 75), "{name}");
    }
}

#[test]
fn tuned_files_in_yaml_and_json_give_their_own_thresholds() {
    let yaml = fixture("tuned.yaml").unwrap();
    assert_eq!(yaml.high_threshold, written(90));
    assert_eq!(yaml.low_threshold, written(70));
    assert_eq!(yaml.minimum_gc_age, written(Age::minutes(90)));
    assert_eq!(yaml.watermarks(), (85, 65));
    let json = fixture("tuned.json").unwrap();
    assert_eq!(json.high_threshold, written(80));
    assert_eq!(json.low_threshold, written(60));
    assert_eq!(json.minimum_gc_age, written(Age::minutes(5)));
    assert_eq!(json.watermarks(), (75, 55));
}

#[test]
fn the_summary_says_what_was_derived_and_from_where() {
    let gc = fixture("kubeadm.yaml").unwrap();
    let line = gc.to_string();
    assert!(
        line.ends_with(
            "tests/fixtures/kubelet/kubeadm.yaml: high_percent 80, low_percent 75 (5 under \
             imageGCHighThresholdPercent 85, kubelet's default and imageGCLowThresholdPercent \
             80, kubelet's default); no image younger than imageMinimumGCAge 2m, kubelet's \
             default is removed"
        ),
        "{line}"
    );
    let line = fixture("tuned.yaml").unwrap().to_string();
    assert!(
        line.contains(
            "high_percent 85, low_percent 65 (5 under imageGCHighThresholdPercent 90 and \
             imageGCLowThresholdPercent 70); no image younger than imageMinimumGCAge 1h30m is \
             removed"
        ),
        "{line}"
    );
}

#[test]
fn another_kind_or_version_is_refused_naming_what_it_is() {
    let e = fixture("wrong-kind.yaml").unwrap_err();
    assert!(
        e.starts_with(
            "it is not a kubelet configuration (apiVersion kubeproxy.config.k8s.io/v1alpha1, \
             kind KubeProxyConfiguration; kubelet reads apiVersion \
             kubelet.config.k8s.io/v1beta1, kind KubeletConfiguration)"
        ),
        "{e}"
    );
    let e = fixture("wrong-version.yaml").unwrap_err();
    assert!(e.contains("apiVersion kubelet.config.k8s.io/v1,"), "{e}");
    let e =
        KubeletImageGc::parse("imageGCHighThresholdPercent: 90\n", Path::new("/k")).unwrap_err();
    assert!(e.contains("apiVersion missing, kind missing"), "{e}");
}

#[test]
fn what_kubelet_would_refuse_is_refused() {
    let e = fixture("bad-duration.yaml").unwrap_err();
    assert!(
        e.starts_with("imageMinimumGCAge \"2 minutes\" is not a duration kubelet reads"),
        "{e}"
    );
    let e = fixture("out-of-range.yaml").unwrap_err();
    assert!(
        e.starts_with("imageGCHighThresholdPercent 101 is out of range: kubelet takes 0 to 100"),
        "{e}"
    );
    let e = fixture("low-not-under-high.json").unwrap_err();
    assert!(
        e.starts_with("imageGCLowThresholdPercent 70 is not under imageGCHighThresholdPercent 70"),
        "{e}"
    );
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    for (body, says) in [
        (
            "imageGCLowThresholdPercent: -1\n",
            "imageGCLowThresholdPercent -1 is out of range",
        ),
        ("imageMinimumGCAge: -2m\n", "it is negative"),
        // A number is not a Go duration: kubelet refuses `120` too.
        (
            "imageMinimumGCAge: 120\n",
            "imageMinimumGCAge \"120\" is not a duration",
        ),
        (
            "imageGCHighThresholdPercent: \"90\"\n",
            "invalid type: string",
        ),
        (
            "imageGCHighThresholdPercent: 90.5\n",
            "invalid type: floating point",
        ),
    ] {
        let e = KubeletImageGc::parse(&format!("{head}{body}"), Path::new("/k")).unwrap_err();
        assert!(e.contains(says), "{body}: {e}");
    }
}

#[test]
fn kubelets_gc_turned_off_is_refused_rather_than_guessed() {
    let e = fixture("gc-off.yaml").unwrap_err();
    assert!(
        e.starts_with(
            "imageGCHighThresholdPercent is 100: kubelet's image garbage collection is off"
        ),
        "{e}"
    );
}

#[test]
fn the_margin_keeps_both_watermarks_in_range_and_apart() {
    let gc = |high, low| KubeletImageGc {
        path: "/k".into(),
        high_threshold: written(high),
        low_threshold: written(low),
        minimum_gc_age: default(Age::minutes(2)),
    };
    assert_eq!(gc(85, 80).watermarks(), (80, 75));
    assert_eq!(gc(99, 0).watermarks(), (94, 1));
    assert_eq!(gc(6, 5).watermarks(), (2, 1));
    assert_eq!(gc(1, 0).watermarks(), (2, 1));
    for high in 1..100 {
        for low in 0..high {
            let (h, l) = gc(high, low).watermarks();
            assert!(1 <= l && l < h && h <= 95, "{high}/{low}: {h}/{l}");
        }
    }
}

#[test]
fn go_durations_read_as_kubelet_reads_them_rounded_up_to_the_second() {
    for (text, seconds) in [
        ("2m0s", 120),
        ("2m", 120),
        ("1h30m", 5400),
        ("90s", 90),
        ("1.5h", 5400),
        ("300ms", 1),
        ("1m0.5s", 61),
        ("0", 0),
        ("0s", 0),
        ("+5s", 5),
        ("1h1m1s1ms1us1ns", 3662),
        ("2\u{b5}s", 1),
    ] {
        assert_eq!(go_duration(text), Ok(Age::seconds(seconds)), "{text}");
    }
    for bad in ["", "2", "2 m", "2d", "m", ".s", "1..2s", "-1s", "3000000h"] {
        assert!(go_duration(bad).is_err(), "{bad}");
    }
}

#[test]
fn a_missing_file_is_an_error_naming_it_and_what_to_do() {
    let e = KubeletImageGc::read(Path::new("/nonexistent/kubelet/config.yaml"))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "cannot use kubelet's configuration /nonexistent/kubelet/config.yaml \
         (images.disk.from_kubelet): no such file: give the path of kubelet's --config \
         file, or write images.disk.high_percent and low_percent instead"
    );
}
