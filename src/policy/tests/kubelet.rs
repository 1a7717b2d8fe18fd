//! `images.disk.from_kubelet`: the watermarks derived from kubelet's own
//! configuration, read again by every run.

use std::path::PathBuf;

use super::*;

/// A kubelet configuration in a directory of its own.
fn kubelet_file(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

#[test]
fn from_kubelet_derives_the_watermarks_and_prints_back_as_written() {
    let (_dir, path) = kubelet_file(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
         imageGCHighThresholdPercent: 90\nimageMinimumGCAge: 10m\n",
    );
    let yaml = format!("images:\n  disk:\n    from_kubelet: {}\n", path.display());
    let p = parse(&yaml).unwrap();
    let disk = p.images.disk.as_ref().unwrap();
    assert_eq!((disk.high_percent, disk.low_percent), (85, 75));
    let kubelet = p.kubelet().unwrap();
    assert_eq!(kubelet.path, path);
    assert_eq!(kubelet.minimum_gc_age.value, Age::minutes(10));
    // `check` prints the key as written, which reads back the same.
    let printed = p.to_yaml();
    assert!(
        printed.contains(&format!("disk:\n    from_kubelet: {}\n", path.display())),
        "{printed}"
    );
    assert_eq!(parse(&printed).unwrap().images.disk, p.images.disk);
    // The summary says which floor applies.
    let summary = p.kubelet_summary().unwrap();
    assert!(
        summary.ends_with("(images.min_age 24h is the stricter, and applies)"),
        "{summary}"
    );
    let yaml = format!("{yaml}  min_age: 1m\n");
    assert!(
        !parse(&yaml)
            .unwrap()
            .kubelet_summary()
            .unwrap()
            .contains("stricter")
    );
}

#[test]
fn from_kubelet_true_reads_kubeadms_path() {
    match parse("images: {disk: {from_kubelet: true}}") {
        Ok(p) => assert_eq!(p.kubelet().unwrap().path, Path::new(KUBELET_CONFIG_PATH)),
        Err(e) => assert!(
            e.to_string()
                .contains("cannot use kubelet's configuration /var/lib/kubelet/config.yaml"),
            "{e}"
        ),
    }
}

#[test]
fn from_kubelet_refuses_what_it_cannot_use() {
    let e = err("images:\n  disk:\n    from_kubelet: /nonexistent/kubelet.yaml\n");
    assert!(
        e.starts_with(
            "invalid policy test.yaml: images: cannot use kubelet's configuration \
             /nonexistent/kubelet.yaml (images.disk.from_kubelet): no such file: give the path \
             of kubelet's --config file, or write images.disk.high_percent and low_percent \
             instead"
        ),
        "{e}"
    );
    assert!(e.ends_with(" at line 2 column 3"), "{e}");
    let (_dir, path) = kubelet_file("apiVersion: v1\nkind: ConfigMap\n");
    let e = err(&format!(
        "images: {{disk: {{from_kubelet: {}}}}}",
        path.display()
    ));
    assert!(e.contains("it is not a kubelet configuration"), "{e}");
    for (disk, says) in [
        (
            "{from_kubelet: /k.yaml, high_percent: 90}",
            "write either from_kubelet or the percents, not both",
        ),
        ("{from_kubelet: false}", "from_kubelet: false says nothing"),
        ("{from_kubelet: kubelet.yaml}", "is not absolute"),
        (
            "{from_kubelet: 5}",
            "5 is not a path (write the absolute path of kubelet's configuration, or true for \
             /var/lib/kubelet/config.yaml)",
        ),
    ] {
        let e = err(&format!("images: {{disk: {disk}}}"));
        assert!(e.contains(says), "{disk}: {e}");
    }
    let e = err("images:\n  disk:\n    from_kubelet:\n");
    assert!(e.contains("has no value"), "{e}");
}

#[test]
fn a_run_reads_kubelets_configuration_again() {
    let head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n";
    let (_dir, path) = kubelet_file(head);
    let p = parse(&format!(
        "images: {{disk: {{from_kubelet: {}}}}}",
        path.display()
    ))
    .unwrap();
    assert!(p.kubelet_reread().unwrap().is_none(), "nothing changed");
    // kubelet restarted with new thresholds: the watermarks follow.
    std::fs::write(&path, format!("{head}imageGCHighThresholdPercent: 95\n")).unwrap();
    let again = p.kubelet_reread().unwrap().expect("the thresholds changed");
    let disk = again.images.disk.as_ref().unwrap();
    assert_eq!((disk.high_percent, disk.low_percent), (90, 75));
    // Gone: the run fails, naming the file.
    std::fs::remove_file(&path).unwrap();
    let e = p.kubelet_reread().unwrap_err();
    assert!(matches!(e, PolicyError::Kubelet { .. }), "{e}");
    assert!(e.to_string().contains("no such file"), "{e}");
    // Without from_kubelet nothing is read.
    let plain = Policy::builtin();
    assert!(plain.kubelet_reread().unwrap().is_none());
}
