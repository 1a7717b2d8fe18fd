//! `images.disk.from_kubelet` on a real private dockerd whose
//! data root is a small loop-mounted ext4: the plan prunes under the
//! watermarks derived from a kubelet configuration (5 points under
//! kubelet's thresholds), re-reads the file for each command, and keeps
//! an image younger than kubelet's `imageMinimumGCAge` with that reason,
//! though `images.min_age` is 0.

use crate::disk_pressure::percent;
use crate::util;

use util::docker::PrivateDockerd;
use util::node::{Cli, Runtime, decision};

/// A kubelet configuration as kubeadm lays it out, with the image garbage
/// collection fields an operator tunes.
fn kubelet_config(high: u8, low: u8, minimum_gc_age: &str) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    cacheTTL: 0s\n    \
         enabled: true\ncgroupDriver: systemd\nclusterDNS:\n- 10.96.0.10\n\
         evictionHard:\n  imagefs.available: 5%\n\
         imageGCHighThresholdPercent: {high}\nimageGCLowThresholdPercent: {low}\n\
         imageMinimumGCAge: {minimum_gc_age}\nstaticPodPath: /etc/kubernetes/manifests\n"
    )
}

/// How long kubelet's floor is here, and how long the older images wait
/// past it.
const FLOOR_SECONDS: u64 = 15;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_pressure_the_plan_follows_kubelets_thresholds_and_minimum_age() {
    let engine = PrivateDockerd::start_on_small_fs(256).await;
    let root = engine.data_root();
    let mut ids = Vec::new();
    for name in ["old:1", "old:2", "old:3"] {
        let extra = format!("{name}{}", "x".repeat(16 << 20));
        ids.push(engine.import_busybox_image(name, Some(&extra)).await);
    }
    tokio::time::sleep(std::time::Duration::from_secs(FLOOR_SECONDS + 1)).await;
    let fresh = engine
        .import_busybox_image("fresh:1", Some(&format!("fresh{}", "x".repeat(16 << 20))))
        .await;

    let runtime = Runtime::Docker(engine.endpoint());
    let cli = Cli::new(&runtime, "");
    let kubelet = cli.path("kubelet-config.yaml");
    cli.rewrite(
        &runtime,
        &format!(
            "schedule: \"0 0 1 1 *\"\ncontainers: {{ enabled: false }}\n\
             images: {{ min_age: \"0\", disk: {{ from_kubelet: {} }} }}\n\
             networks: {{ enabled: false }}\nbuild_cache: {{ enabled: false }}\n",
            kubelet.display()
        ),
    );
    let start = percent(&root);
    #[expect(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a percent of a small file system"
    )]
    let full = start as u8;
    assert!(full > 10, "{start:.1}% full: the images should fill more");
    let plan = |expect_high: u8, expect_low: u8| {
        let out = cli.run(&["plan", "--output", "json"]);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{err}");
        let said = format!(
            "safeprune: images.disk from {}: high_percent {expect_high}, low_percent {expect_low} (5 under",
            kubelet.display()
        );
        assert!(err.contains(&said), "{err}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };

    // kubelet's high threshold 3 points over the usage: safeprune's is 2
    // under it, so it prunes; its low, 1%, cannot be reached, so every
    // image old enough goes.
    std::fs::write(
        &kubelet,
        kubelet_config(full + 3, 6, &format!("{FLOOR_SECONDS}s")),
    )
    .unwrap();
    let report = plan(full - 2, 1);
    for id in &ids {
        let d = decision(&report, id);
        assert_eq!(d["rule"], "eligible", "{d}");
    }
    let kept = decision(&report, &fresh);
    assert_eq!(kept["rule"], "too_young", "{kept}");
    let detail = kept["detail"].as_str().unwrap();
    assert!(
        detail.ends_with(&format!(
            "younger than kubelet's imageMinimumGCAge {FLOOR_SECONDS}s"
        )),
        "{detail}"
    );

    // kubelet's threshold now 6 over the usage: safeprune's, 1 over it,
    // is not reached, and the file is read again for this plan.
    std::fs::write(
        &kubelet,
        kubelet_config(full + 6, 6, &format!("0m{FLOOR_SECONDS}s")),
    )
    .unwrap();
    let report = plan(full + 1, 1);
    for id in &ids {
        let d = decision(&report, id);
        assert_eq!(d["rule"], "disk_below_threshold", "{d}");
        let detail = d["detail"].as_str().unwrap();
        assert!(
            detail.ends_with(&format!("at or under high_percent {}", full + 1)),
            "{detail}"
        );
    }
    // Nothing was removed by a plan.
    for id in ids.iter().chain([&fresh]) {
        assert!(
            engine.docker().inspect_image(id).await.is_ok(),
            "{id} is gone"
        );
    }
}
