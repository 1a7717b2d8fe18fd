//! The command-line contract without an engine: policy errors, the built-in
//! default, the lock, and an unreachable runtime.

use crate::util;

use std::fs::File;

use util::node::{Cli, Runtime, command, run as safeprune};

/// A policy pointing at a socket in its own directory where nothing
/// listens, with a private lock.
fn unreachable_engine() -> Cli {
    let cli = Cli::with_yaml("");
    let endpoint = format!("unix://{}", cli.path("nothing.sock").display());
    cli.rewrite(&Runtime::Docker(&endpoint), "");
    cli
}

#[test]
fn check_prints_the_documented_default_policy() {
    let out = safeprune(&["--config", "config/policy.yaml", "check", "--offline"]);
    assert!(out.status.success());
    let from_file = String::from_utf8(out.stdout).unwrap();
    assert!(from_file.contains("io.kubernetes.container.name=istio-init"));
    assert!(from_file.contains("schedule: 0 5 * * 4"));
    // Which file it read goes to stderr: stdout stays the policy alone.
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err, "safeprune: policy from config/policy.yaml\n");
}

#[test]
fn check_says_when_it_read_no_file() {
    let out = safeprune(&["check", "--offline"]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    if std::path::Path::new("/etc/safeprune/policy.yaml").exists() {
        assert_eq!(err, "safeprune: policy from /etc/safeprune/policy.yaml\n");
    } else {
        assert!(
            err.starts_with("safeprune: policy from the built-in default"),
            "{err}"
        );
    }
    let quiet = safeprune(&["--config", "config/policy.yaml", "-q", "check", "--offline"]);
    assert!(quiet.stderr.is_empty(), "-q says nothing but errors");
}

#[test]
fn a_closed_stdout_is_no_panic() {
    // `safeprune check | head -1` once head has gone.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = command(&["--config", "config/policy.yaml", "check", "--offline"])
        .stdout(writer)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}

#[test]
fn bad_policy_exits_2_naming_file_line_and_column() {
    let cli = Cli::with_yaml("version: 1\nimages:\n  kep: []\n");
    let path = cli.policy_path().to_str().unwrap();
    for cmd in ["check", "plan", "run"] {
        let out = cli.run(&[cmd]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.contains(path), "{err}");
        assert!(err.contains("unknown field `kep`"), "{err}");
        // The close key, before the place.
        assert!(
            err.contains("(did you mean `keep`?) at line 3 column 3"),
            "{err}"
        );
        assert!(out.stdout.is_empty(), "nothing on stdout for {cmd}");
    }
}

#[test]
fn missing_policy_file_exits_2() {
    let out = safeprune(&["--config", "/nonexistent/policy.yaml", "check"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/policy.yaml"));
}

#[test]
fn config_comes_from_the_environment_when_no_flag_is_given() {
    let cli = Cli::with_yaml("safety:\n  max_deletions: 7\n");
    let out = command(&["check", "--offline"])
        .env("SAFEPRUNE_CONFIG", cli.policy_path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("max_deletions: 7"));
}

#[test]
fn unreachable_engine_exits_1_and_names_the_endpoint() {
    let cli = unreachable_engine();
    let socket = cli.path("nothing.sock");
    for args in [vec!["plan"], vec!["run"], vec!["explain", "x"]] {
        let out = cli.run(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        // What failed, why in a few words, and what to do: one short line.
        assert_eq!(
            err,
            format!(
                "safeprune: error: cannot reach Docker at {}: no such socket (is dockerd \
                 running, and is the socket path right?)\n",
                socket.display()
            ),
            "{args:?}"
        );
        // -v: the whole chain instead, each cause once (bollard's words).
        let mut verbose = vec!["-v"];
        verbose.extend(&args);
        let out = cli.run(&verbose);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        let line = err.lines().last().unwrap_or_default();
        assert!(
            line.starts_with("safeprune: error: cannot reach docker at unix://"),
            "{err}"
        );
        assert_eq!(line.matches("Socket not found").count(), 1, "{err}");
    }
}

/// A policy at a socket in its own directory where nothing listens, with
/// `extra` (see [`Cli::new`]); the directory and the policy readable by
/// all, for a run as nobody.
fn unreachable_engine_with(extra: &str) -> Cli {
    use std::os::unix::fs::PermissionsExt;
    let cli = Cli::with_yaml("");
    let endpoint = format!("unix://{}", cli.path("nothing.sock").display());
    cli.rewrite(&Runtime::Docker(&endpoint), extra);
    let dir = cli.policy_path().parent().unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(cli.policy_path(), std::fs::Permissions::from_mode(0o644)).unwrap();
    cli
}

/// The lines of `out`'s stderr, and its exit code.
fn said(out: &std::process::Output) -> (Option<i32>, Vec<String>) {
    let err = String::from_utf8_lossy(&out.stderr);
    (out.status.code(), err.lines().map(str::to_owned).collect())
}

#[test]
fn check_says_whether_safeprune_can_work_on_this_node() {
    let cli = unreachable_engine_with("");
    let dir = cli.policy_path().parent().unwrap().display().to_string();
    let offline = cli.run(&["check", "--offline"]);
    assert_eq!(
        said(&offline),
        (
            Some(0),
            vec![format!(
                "safeprune: policy from {}",
                cli.policy_path().display()
            )]
        )
    );
    let out = cli.run(&["check"]);
    // stdout is the policy, exactly as offline: scripts read it.
    assert_eq!(out.stdout, offline.stdout);
    let (code, lines) = said(&out);
    assert_eq!(code, Some(1), "the engine's exit code: {lines:#?}");
    assert_eq!(
        lines,
        [
            format!("safeprune: policy from {}", cli.policy_path().display()),
            format!(
                "safeprune: engine: cannot reach Docker at {dir}/nothing.sock: no such socket (is \
                 dockerd running, and is the socket path right?)"
            ),
            format!("safeprune: state_dir: ok: {dir}/state can be created"),
            format!("safeprune: report.json_path: ok: {dir} is writable"),
            format!("safeprune: report.metrics_textfile: ok: {dir} is writable"),
            format!("safeprune: report.audit_log: ok: {dir}/audit.jsonl can be created"),
            format!("safeprune: lock_file: ok: {dir}/safeprune.lock can be created"),
            "safeprune: error: this node is not ready for the policy: engine failed (see the lines \
             above)"
                .to_owned(),
        ]
    );
    // The check made nothing it leaves behind.
    for name in ["state", "safeprune.lock", "audit.jsonl"] {
        assert!(!cli.path(name).exists(), "{name}");
    }
    // -q: only what failed.
    let (code, lines) = said(&cli.run(&["-q", "check"]));
    assert_eq!(code, Some(1));
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with("safeprune: engine: cannot reach Docker"),
        "{lines:#?}"
    );

    // A state_dir that cannot be made, and a report directory that does
    // not exist.
    cli.rewrite(
        &Runtime::Docker(&format!("unix://{dir}/nothing.sock")),
        "state_dir: /proc/safeprune-check/state\n",
    );
    let yaml = std::fs::read_to_string(cli.policy_path()).unwrap().replace(
        &format!("{dir}/report.json"),
        "/nonexistent/safeprune/report.json",
    );
    cli.write(&yaml);
    let (code, lines) = said(&cli.run(&["check"]));
    assert_eq!(code, Some(1));
    assert!(
        lines
            .iter()
            .any(|l| l
                .starts_with("safeprune: state_dir: cannot create /proc/safeprune-check/state: ")),
        "{lines:#?}"
    );
    assert!(
        lines.contains(
            &"safeprune: report.json_path: cannot write in /nonexistent/safeprune: no such file \
              or directory (create the directory, or name another path in the policy)"
                .to_owned()
        ),
        "{lines:#?}"
    );
    assert_eq!(
        lines.last().unwrap(),
        "safeprune: error: this node is not ready for the policy: engine, state_dir, \
         report.json_path failed (see the lines above)"
    );
    assert!(!std::path::Path::new("/proc/safeprune-check").exists());
    // --offline: the policy alone, as before.
    let (code, lines) = said(&cli.run(&["check", "--offline"]));
    assert_eq!((code, lines.len()), (Some(0), 1), "{lines:#?}");
}

/// `safeprune --config <policy> args…` as nobody, with no group.
fn as_nobody(cli: &Cli, args: &[&str]) -> std::process::Output {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(env!("CARGO_BIN_EXE_safeprune"))
        .arg("--config")
        .arg(cli.policy_path())
        .args(args)
        .env_remove("SAFEPRUNE_CONFIG")
        .env_remove("RUST_LOG");
    cmd.output().expect("setpriv runs (util-linux)")
}

#[test]
fn a_socket_without_permission_says_so_and_what_to_do() {
    use std::os::unix::fs::PermissionsExt;
    let cli = unreachable_engine_with("");
    // root's socket, 0600: only root may connect.
    let socket = cli.path("nothing.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600)).unwrap();
    let denied = format!(
        "cannot reach Docker at {}: permission denied (run as root, or as a member of the \
         docker group)",
        socket.display()
    );
    let (code, lines) = said(&as_nobody(&cli, &["check"]));
    assert_eq!(code, Some(1), "{lines:#?}");
    assert!(
        lines.contains(&format!("safeprune: engine: {denied}")),
        "{lines:#?}"
    );
    // The other commands say it in one short line.
    for args in [&["plan"][..], &["run", "--dry-run"], &["explain", "x"]] {
        let (code, lines) = said(&as_nobody(&cli, args));
        assert_eq!(code, Some(1), "{args:?}");
        // (A dry run logs first that it cannot write the metrics textfile
        // in root's directory.)
        assert_eq!(
            lines.last(),
            Some(&format!("safeprune: error: {denied}")),
            "{args:?}: {lines:#?}"
        );
        assert_eq!(lines.iter().filter(|l| l.contains(&denied)).count(), 1);
    }
    // -v: the whole chain, with the system's own words.
    let (_, lines) = said(&as_nobody(&cli, &["-v", "plan"]));
    assert!(
        lines
            .last()
            .unwrap()
            .contains("Permission denied (os error 13)"),
        "{lines:#?}"
    );
    // --offline contacts nothing: the policy is fine.
    let (code, lines) = said(&as_nobody(&cli, &["check", "--offline"]));
    assert_eq!(code, Some(0), "{lines:#?}");
}

#[test]
fn under_json_logs_every_fatal_error_is_one_json_object() {
    let error = |out: &std::process::Output| {
        let err = String::from_utf8_lossy(&out.stderr);
        let values: Vec<serde_json::Value> = err
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect();
        assert_eq!(values.len(), 1, "{err}");
        let value = values.into_iter().next().unwrap();
        assert_eq!(value["level"], "ERROR", "{value}");
        assert_eq!(
            value["fields"]["exit_code"].as_i64(),
            out.status.code().map(i64::from),
            "{value}"
        );
        value
    };
    // A bad policy: before this, a plain line.
    let cli = Cli::with_yaml("version: 1\nimages:\n  kep: []\n");
    for cmd in ["check", "plan", "run"] {
        let out = cli.run(&["--log-format", "json", cmd]);
        assert_eq!(out.status.code(), Some(2));
        let value = error(&out);
        let message = value["fields"]["message"].as_str().unwrap();
        assert!(message.contains("unknown field `kep`"), "{value}");
        assert!(message.contains("line 3 column 3"), "{value}");
    }
    // The engine: the short line as the message, the chain as the error.
    let cli = unreachable_engine();
    let out = cli.run(&["--log-format", "json", "plan"]);
    assert_eq!(out.status.code(), Some(1));
    let value = error(&out);
    assert!(
        value["fields"]["message"].as_str().unwrap().ends_with(
            "nothing.sock: no such socket (is dockerd running, and is the socket path right?)"
        ),
        "{value}"
    );
    assert!(
        value["fields"]["error"]
            .as_str()
            .unwrap()
            .contains("Socket not found"),
        "{value}"
    );
    // A held lock, exit 4.
    let lock = File::create(cli.path("safeprune.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = cli.run(&["--log-format", "json", "run"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(
        error(&out)["fields"]["message"]
            .as_str()
            .unwrap()
            .contains("holds the lock")
    );
}

#[test]
fn a_dry_run_needs_no_lock_and_a_real_run_does() {
    let cli = Cli::with_yaml("");
    let dir = cli.policy_path().parent().unwrap().display().to_string();
    let endpoint = format!("unix://{dir}/nothing.sock");
    cli.rewrite(&Runtime::Docker(&endpoint), "");
    // A lock file that cannot be opened, as /run/safeprune.lock for a user.
    let yaml = std::fs::read_to_string(cli.policy_path())
        .unwrap()
        .replace("lock_file: ", "lock_file: /nonexistent/safeprune");
    cli.write(&yaml);
    let out = cli.run(&["run"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(&format!("safeprune: error: cannot use /nonexistent/safeprune{dir}/safeprune.lock: no such file or directory")),
        "{err}"
    );
    // The dry run goes on to the (absent) engine.
    let out = cli.run(&["run", "--dry-run"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("safeprune: error: cannot reach Docker at "),
        "{err}"
    );
    // A lock another run holds still stops it: nothing done.
    let cli = unreachable_engine();
    let lock = File::create(cli.path("safeprune.lock")).unwrap();
    lock.try_lock().unwrap();
    assert_eq!(cli.run(&["run", "--dry-run"]).status.code(), Some(4));
}

#[test]
fn held_lock_exits_4_before_contacting_anything() {
    let cli = unreachable_engine();
    let lock = File::create(cli.path("safeprune.lock")).unwrap();
    lock.try_lock().unwrap();
    let out = cli.run(&["run"]);
    assert_eq!(out.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&out.stderr).contains("holds the lock"));
    // plan takes no lock: it gets as far as the (absent) engine.
    let out = cli.run(&["plan"]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn unknown_command_and_flag_are_usage_errors() {
    assert_eq!(safeprune(&["prune"]).status.code(), Some(2));
    assert_eq!(
        safeprune(&["plan", "--output", "xml"]).status.code(),
        Some(2)
    );
}

/// A kubelet configuration of `tests/fixtures/kubelet/`, by its full path.
fn kubelet_fixture(name: &str) -> String {
    format!(
        "{}/tests/fixtures/kubelet/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

#[test]
fn check_and_plan_say_what_from_kubelet_derived_and_from_where() {
    for (name, derived) in [
        (
            "tuned.yaml",
            "high_percent 85, low_percent 65 (5 under imageGCHighThresholdPercent 90 and \
             imageGCLowThresholdPercent 70); no image younger than imageMinimumGCAge 1h30m is \
             removed",
        ),
        (
            "kubeadm.yaml",
            "high_percent 80, low_percent 75 (5 under imageGCHighThresholdPercent 85, kubelet's \
             default and imageGCLowThresholdPercent 80, kubelet's default); no image younger \
             than imageMinimumGCAge 2m, kubelet's default is removed (images.min_age 1h is the \
             stricter, and applies)",
        ),
    ] {
        let path = kubelet_fixture(name);
        let cli = unreachable_engine();
        let endpoint = format!("unix://{}", cli.path("nothing.sock").display());
        cli.rewrite(
            &Runtime::Docker(&endpoint),
            &format!("images:\n  min_age: 1h\n  disk:\n    from_kubelet: {path}\n"),
        );
        let line = format!("safeprune: images.disk from {path}: {derived}\n");
        let out = cli.run(&["check", "--offline"]);
        assert_eq!(out.status.code(), Some(0));
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.ends_with(&line), "{err}");
        // stdout is the policy as written: it reads back the same.
        let stdout = String::from_utf8(out.stdout).unwrap();
        assert!(
            stdout.contains(&format!("  disk:\n    from_kubelet: {path}\n")),
            "{stdout}"
        );
        // plan says it before it reaches the (absent) engine.
        let out = cli.run(&["plan", "--output", "json"]);
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(err.starts_with(&line), "{err}");
        let quiet = cli.run(&["-q", "check", "--offline"]);
        assert!(quiet.stderr.is_empty(), "-q says nothing but errors");
    }
}

#[test]
fn check_and_plan_say_whose_stall_a_run_would_be_paced_by() {
    let cli = unreachable_engine();
    let endpoint = format!("unix://{}", cli.path("nothing.sock").display());
    cli.rewrite(
        &Runtime::Docker(&endpoint),
        "safety:\n  pace: {added_io_pressure_percent: 0.2, io_pressure_percent: 99.5, \
         max_delay: 2m, workloads_cgroup: node}\n",
    );
    // The node's own PSI: this machine's, read by the test as safeprune
    // reads it (or its absence, said as such).
    let psi = std::fs::read_to_string("/proc/pressure/io").is_ok_and(|t| t.contains("total="));
    let said = if psi {
        "safeprune: safety.pace: by the node's I/O stall (PSI some, /proc/pressure/io): \
         removals may add +0.2% above its own, ceiling 99.5%"
    } else {
        "safeprune: safety.pace: this node shows no I/O pressure (PSI): removals would not be paced"
    };
    let out = cli.run(&["check", "--offline"]);
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8(out.stderr).unwrap();
    let line = err.lines().last().unwrap_or_default();
    assert!(line.starts_with(said), "{err}");
    if psi {
        assert!(
            line.ends_with(
                "; the node's stall counts the engines' own work on the removals too: a run \
                 goes slower than by the workloads'"
            ),
            "{err}"
        );
    }
    let out = cli.run(&["plan"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with(said),
        "said before the (absent) engine: {err}"
    );
    assert!(
        cli.run(&["-q", "check", "--offline"]).stderr.is_empty(),
        "-q says nothing but errors"
    );
    // A cgroup named that cannot be read: `check --offline` says a run
    // would remove nothing.
    cli.rewrite(
        &Runtime::Docker(&endpoint),
        "safety:\n  pace: {workloads_cgroup: /sys/fs/cgroup/sp-no-such.slice}\n",
    );
    let err = String::from_utf8(cli.run(&["check", "--offline"]).stderr).unwrap();
    assert!(
        err.contains(
            "safeprune: safety.pace.workloads_cgroup: cannot read the workloads' I/O pressure \
             (/sys/fs/cgroup/sp-no-such.slice/io.pressure: No such file or directory (os error \
             2)): a run would remove nothing; fix the path, or write auto to use kubelet's pods' \
             cgroup"
        ),
        "{err}"
    );
    // Off, nothing about it.
    cli.rewrite(&Runtime::Docker(&endpoint), "safety:\n  pace: null\n");
    let err = String::from_utf8(cli.run(&["check"]).stderr).unwrap();
    assert!(!err.contains("safety.pace"), "{err}");
}

#[test]
fn a_kubelet_configuration_it_cannot_use_exits_2_before_contacting_anything() {
    for (file, says) in [
        (
            "/nonexistent/kubelet/config.yaml".to_owned(),
            "cannot use kubelet's configuration /nonexistent/kubelet/config.yaml \
             (images.disk.from_kubelet): no such file: give the path of kubelet's --config file, \
             or write images.disk.high_percent and low_percent instead",
        ),
        (
            kubelet_fixture("wrong-kind.yaml"),
            "it is not a kubelet configuration (apiVersion kubeproxy.config.k8s.io/v1alpha1",
        ),
        (
            kubelet_fixture("gc-off.yaml"),
            "imageGCHighThresholdPercent is 100: kubelet's image garbage collection is off",
        ),
    ] {
        let cli = unreachable_engine();
        let endpoint = format!("unix://{}", cli.path("nothing.sock").display());
        cli.rewrite(
            &Runtime::Docker(&endpoint),
            &format!("images:\n  disk:\n    from_kubelet: {file}\n"),
        );
        // An engine reached would be exit 1: exit 2 says it was not.
        for cmd in ["check", "plan", "run"] {
            let out = cli.run(&[cmd]);
            let err = String::from_utf8(out.stderr).unwrap();
            assert_eq!(out.status.code(), Some(2), "{cmd}: {err}");
            assert!(
                err.starts_with("safeprune: error: invalid policy "),
                "{err}"
            );
            assert!(err.contains(says), "{cmd}: {err}");
            assert!(out.stdout.is_empty(), "nothing on stdout for {cmd}");
        }
    }
}

#[test]
fn output_has_a_short_form_on_every_command_that_reports() {
    let cli = unreachable_engine();
    // Exit 1, the engine's: the flag was taken, and the engine asked.
    for args in [
        &["plan", "-o", "json"][..],
        &["plan", "-o", "table"],
        &["run", "-o", "json"],
        &["explain", "-o", "json", "x"],
        &["explain", "--output", "json", "x"],
        &["explain", "x", "-o", "text"],
    ] {
        let out = cli.run(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("nothing.sock"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // explain prints text or JSON, no table; and no command but these three
    // takes the flag.
    for args in [
        &["explain", "-o", "table", "x"][..],
        &["explain", "-o", "xml", "x"],
        &["check", "-o", "json"],
        &["daemon", "-o", "json"],
    ] {
        let out = cli.run(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

/// Whether `text` holds an ANSI escape sequence (a colour).
fn coloured(text: &[u8]) -> bool {
    text.windows(2).any(|w| w == b"\x1b[")
}

#[test]
fn color_colours_text_logs_as_asked_and_never_json() {
    // `-vv check` logs the policy it loaded, at debug level.
    let cli = Cli::with_yaml("");
    let stderr = |args: &[&str], no_color: Option<&str>| {
        let mut cmd = cli.command(args);
        match no_color {
            Some(value) => cmd.env("NO_COLOR", value),
            None => cmd.env_remove("NO_COLOR"),
        };
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stderr.is_empty(), "{args:?} logs something");
        out.stderr
    };
    // Not a terminal: `auto` (the default) is plain.
    assert!(!coloured(&stderr(&["-vv", "check", "--offline"], None)));
    assert!(!coloured(&stderr(
        &["-vv", "--color", "auto", "check", "--offline"],
        None
    )));
    assert!(!coloured(&stderr(
        &["-vv", "--color", "never", "check", "--offline"],
        None
    )));
    assert!(coloured(&stderr(
        &["-vv", "--color", "always", "check", "--offline"],
        None
    )));
    // `always` is asked for: NO_COLOR does not undo it.
    assert!(coloured(&stderr(
        &["-vv", "--color", "always", "check", "--offline"],
        Some("1")
    )));
    // JSON logs are for collectors: never coloured.
    let json = stderr(
        &[
            "-vv",
            "--log-format",
            "json",
            "--color",
            "always",
            "check",
            "--offline",
        ],
        None,
    );
    assert!(!coloured(&json), "{}", String::from_utf8_lossy(&json));
    assert_eq!(
        cli.run(&["--color", "sometimes", "check", "--offline"])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn color_auto_colours_a_terminal_unless_no_color_is_set() {
    let cli = Cli::with_yaml("");
    // stdout and stderr on a terminal of script(1)'s, which copies what it
    // shows to its own stdout.
    let on_a_terminal = |flags: &str, no_color: Option<&str>| {
        let line = format!(
            "{} --config {} -vv {flags} check --offline",
            env!("CARGO_BIN_EXE_safeprune"),
            cli.policy_path().display()
        );
        let mut cmd = crate::util::pty::script(&line);
        match no_color {
            Some(value) => cmd.env("NO_COLOR", value),
            None => cmd.env_remove("NO_COLOR"),
        };
        let out = cmd
            .output()
            .expect("script runs (bsdutils; scripts/deps.sh installs it)");
        let shown = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(0), "{line}: {shown}");
        assert!(shown.contains("policy loaded"), "{line}: {shown}");
        coloured(shown.as_bytes())
    };
    assert!(on_a_terminal("", None), "auto colours a terminal");
    assert!(
        on_a_terminal("--color auto", Some("")),
        "NO_COLOR empty is unset"
    );
    assert!(!on_a_terminal("", Some("1")), "NO_COLOR=1");
    assert!(!on_a_terminal("--color auto", Some("yes")), "NO_COLOR=yes");
    assert!(!on_a_terminal("--color never", None));
    assert!(on_a_terminal("--color always", Some("1")));
}

/// `safeprune args…` run to its end successfully; its stdout.
fn stdout_of(args: &[&str]) -> String {
    let out = safeprune(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
    assert!(err.is_empty(), "{args:?}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

/// `target/<profile>/assets`, what build.rs wrote for the Debian package.
fn package_assets() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_BIN_EXE_safeprune"))
        .parent()
        .unwrap()
        .join("assets")
}

#[test]
fn completions_and_man_print_what_the_package_ships_and_need_no_policy() {
    for (shell, file) in [
        ("bash", "completions/safeprune.bash"),
        ("zsh", "completions/_safeprune"),
        ("fish", "completions/safeprune.fish"),
    ] {
        let printed = stdout_of(&["completions", shell]);
        let packaged = std::fs::read_to_string(package_assets().join(file)).unwrap();
        assert_eq!(printed, packaged, "{shell}: the package's {file}");
    }
    let page = stdout_of(&["man"]);
    let packaged = std::fs::read_to_string(package_assets().join("safeprune.8")).unwrap();
    assert_eq!(page, packaged, "the package's safeprune.8");
    // No policy is read: a missing or broken one is no error here.
    let broken = Cli::with_yaml("images: [\n");
    for args in [&["completions", "bash"][..], &["man"]] {
        let out = broken.run(args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty(), "{args:?}");
        let out = command(args)
            .env("SAFEPRUNE_CONFIG", "/nonexistent/policy.yaml")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}");
    }
    for args in [
        &["completions"][..],
        &["completions", "tcsh"],
        &["man", "x"],
    ] {
        assert_eq!(safeprune(args).status.code(), Some(2), "{args:?}");
    }
}

/// Runs `shell -c script` in a home of its own (fish writes its settings
/// there), with `$SAFEPRUNE` the binary under test; its stdout.
fn in_shell(shell: &str, script: &str) -> String {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(shell)
        .arg("-c")
        .arg(script)
        .current_dir(home.path())
        .env("SAFEPRUNE", env!("CARGO_BIN_EXE_safeprune"))
        .env("HOME", home.path())
        .env_remove("XDG_CONFIG_HOME")
        .env_remove("XDG_DATA_HOME")
        .env_remove("ZDOTDIR")
        .output()
        .unwrap_or_else(|e| panic!("{shell} runs (scripts/deps.sh installs it): {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{shell}: {script}: {err}");
    assert!(err.is_empty(), "{shell}: {script}: {err}");
    String::from_utf8(out.stdout).unwrap()
}

/// What fish offers for `line`, once `safeprune completions fish` is loaded.
fn fish_offers(line: &str) -> Vec<String> {
    let said = in_shell(
        "fish",
        &format!(r#""$SAFEPRUNE" completions fish | source; complete -C '{line}'"#),
    );
    said.lines()
        .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

#[test]
fn the_completions_load_in_bash_zsh_and_fish() {
    let said = in_shell(
        "bash",
        r#"source <("$SAFEPRUNE" completions bash) && complete -p safeprune"#,
    );
    assert!(said.contains(" -F _safeprune "), "{said}");
    assert!(said.trim_end().ends_with(" safeprune"), "{said}");
    // What it offers: bash calls the function with the command, the word
    // completed and the word before it.
    let offers = |words: &[&str]| {
        let script = format!(
            r#"source <("$SAFEPRUNE" completions bash) && COMP_WORDS=({} "") && COMP_CWORD={} && _safeprune safeprune "" {} && printf '%s\n' "${{COMPREPLY[@]}}""#,
            words.join(" "),
            words.len(),
            words.last().unwrap(),
        );
        in_shell("bash", &script)
    };
    assert!(
        offers(&["safeprune", "completions"]).ends_with("bash\nzsh\nfish\n"),
        "the shells"
    );
    assert_eq!(offers(&["safeprune", "explain", "-o"]), "text\njson\n");
    assert_eq!(offers(&["safeprune", "plan", "-o"]), "table\njson\n");
    // zsh: loaded after compinit, as a vendor completion is, it binds
    // itself to the command.
    let said = in_shell(
        "zsh",
        r#"autoload -Uz compinit && compinit -u -D && source <("$SAFEPRUNE" completions zsh) && print -r -- $_comps[safeprune]"#,
    );
    assert_eq!(said, "_safeprune\n");
    // fish: what it offers, from the loaded script.
    let commands = fish_offers("safeprune ");
    for command in [
        "plan",
        "run",
        "daemon",
        "check",
        "explain",
        "completions",
        "man",
    ] {
        assert!(
            commands.iter().any(|c| c == command),
            "fish offers no {command}: {commands:?}"
        );
    }
    assert_eq!(fish_offers("safeprune explain x -o "), ["json", "text"]);
    assert_eq!(
        fish_offers("safeprune --color="),
        ["--color=always", "--color=auto", "--color=never"]
    );
}

#[test]
fn the_man_page_renders_without_a_warning() {
    let page = stdout_of(&["man"]);
    assert!(
        page.lines().any(|l| l.starts_with(".TH SAFEPRUNE 8 ")),
        "{page}"
    );
    let mut groff = std::process::Command::new("groff")
        // Plain text: no bold nor underline by overstriking.
        .args(["-man", "-Tutf8", "-ww", "-P-cbou"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("groff runs (groff-base; scripts/deps.sh installs it)");
    {
        use std::io::Write as _;
        let mut stdin = groff.stdin.take().unwrap();
        stdin.write_all(page.as_bytes()).unwrap();
    }
    let out = groff.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.is_empty(), "groff warns: {err}");
    let text = String::from_utf8_lossy(&out.stdout);
    for heading in ["NAME", "SYNOPSIS", "COMMANDS", "EXIT STATUS"] {
        assert!(text.lines().any(|l| l == heading), "no {heading}: {text}");
    }
    for command in ["completions", "man"] {
        assert!(text.contains(&format!("safeprune {command}")), "{text}");
    }
}
