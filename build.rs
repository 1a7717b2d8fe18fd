//! Writes what the Debian package ships beside the binary (Cargo.toml,
//! `[package.metadata.deb]`): the man page safeprune(8), the bash, zsh and
//! fish completions, and the systemd units with the package's binary path.
//! The page and the completions come from the clap definitions and the
//! exit-code table themselves, so they cannot drift from the binary.
//!
//! Deterministic: no clock, no environment but cargo's.

#[path = "src/cli.rs"]
mod cli;
#[path = "src/exit_codes.rs"]
#[expect(
    dead_code,
    reason = "the page reads the table; the constants are the binary's"
)]
mod exit_codes;

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, roman};

/// The page's date is the package's: its latest changelog entry's.
const CHANGELOG: &str = "debian/changelog";

/// Where the repository's units run safeprune (a manual install), and where
/// the package puts it.
const MANUAL_BIN: &str = "/usr/local/bin/safeprune";
const PACKAGE_BIN: &str = "/usr/sbin/safeprune";

fn main() {
    let inputs = [
        "build.rs",
        "src/cli.rs",
        "src/exit_codes.rs",
        "systemd",
        CHANGELOG,
    ];
    for input in inputs {
        println!("cargo:rerun-if-changed={input}");
    }
    // cargo-deb finds built files only under `target/release/`, which it
    // maps to the profile's directory (target/<profile>/, also with
    // CARGO_TARGET_DIR or --target); OUT_DIR has a hash in its name. So the
    // assets go to the profile's directory, OUT_DIR's third ancestor
    // (target/<profile>/build/safeprune-<hash>/out), as target/release/assets/
    // in Cargo.toml.
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let assets = out_dir
        .ancestors()
        .nth(3)
        .expect("OUT_DIR is target/<profile>/build/<crate>-<hash>/out")
        .join("assets");
    let completions = assets.join("completions");
    let units = assets.join("systemd");
    for dir in [&assets, &completions, &units] {
        fs::create_dir_all(dir).unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    }

    // The page to read (`man -l`), and gzipped at the best level, without a
    // name or time, as Debian ships pages (`gzip -9n`): cargo-deb compresses
    // only the files it did not build.
    let page = man_page();
    write(&assets.join("safeprune.8"), page.as_bytes());
    let mut gz = flate2::GzBuilder::new().write(Vec::new(), flate2::Compression::best());
    gz.write_all(page.as_bytes())
        .and_then(|()| gz.try_finish())
        .expect("gzip in memory cannot fail");
    write(&assets.join("safeprune.8.gz"), gz.get_ref());
    let mut cmd = cli::Cli::command();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd, "safeprune", &completions)
            .unwrap_or_else(|e| panic!("cannot write the {shell} completion: {e}"));
    }
    package_units(Path::new("systemd"), &units);
}

fn write(path: &Path, contents: &[u8]) {
    fs::write(path, contents).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// The repository's units with the package's binary path. A service that
/// does not name `MANUAL_BIN` would run something else from the package,
/// so it fails the build; a timer names no binary and is copied as it is.
fn package_units(from: &Path, to: &Path) {
    let mut names: Vec<PathBuf> = fs::read_dir(from)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", from.display()))
        .map(|entry| entry.expect("a readable systemd/ entry").path())
        .collect();
    names.sort();
    for path in names {
        let text = fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let is_service = path.extension().is_some_and(|e| e == "service");
        assert!(
            !is_service || text.contains(MANUAL_BIN),
            "{} runs no {MANUAL_BIN}: the package's copy could not run {PACKAGE_BIN}; \
             fix the unit or build.rs",
            path.display()
        );
        let name = path.file_name().expect("a file name");
        write(
            &to.join(name),
            text.replace(MANUAL_BIN, PACKAGE_BIN).as_bytes(),
        );
    }
}

/// safeprune(8): `clap_mangen`'s NAME, SYNOPSIS, DESCRIPTION and OPTIONS,
/// then each command with its options, and the sections clap knows nothing
/// of.
fn man_page() -> String {
    let cmd = cli::Cli::command()
        .subcommand_help_heading("COMMANDS")
        .subcommand_value_name("command");
    let man = Man::new(cmd.clone())
        .title("SAFEPRUNE")
        .section("8")
        .date(release_date())
        .manual("System Administration");
    let mut page = Roff::new().render();
    page += &section(|w| man.render_title(w), false);
    page += &section(|w| man.render_name_section(w), false);
    page += &section(|w| man.render_synopsis_section(w), false);
    // clap's about is NAME's line already: the description is the page's own.
    page += &roff(Roff::new().control("SH", ["DESCRIPTION"]));
    page += &roff(&paragraphs(DESCRIPTION));
    page += &section(|w| man.render_options_section(w), false);

    page += &roff(Roff::new().control("SH", ["COMMANDS"]));
    for sub in cmd.get_subcommands() {
        let name = sub.get_name();
        // Unbuilt, a subcommand has only its own arguments, not the global
        // ones the OPTIONS above list; --help is left to clap.
        let sub = Man::new(
            sub.clone()
                .bin_name(format!("safeprune {name}"))
                .disable_help_flag(true),
        );
        page += &roff(Roff::new().control("SS", [name]));
        page += &section(|w| sub.render_synopsis_section(w), true);
        page += &roff(Roff::new().control("PP", []));
        page += &section(|w| sub.render_description_section(w), true);
        page += &section(|w| sub.render_options_section(w), true);
    }

    let mut tail = Roff::new();
    tail.control("SH", ["EXIT STATUS"]);
    for code in exit_codes::ALL {
        tail.control("TP", []);
        tail.text([bold(code.code.to_string())]);
        tail.text(spans(code.meaning));
    }
    for (heading, entries) in [("FILES", FILES), ("ENVIRONMENT", ENVIRONMENT)] {
        tail.control("SH", [heading]);
        for (name, text) in entries {
            tail.control("TP", []);
            tail.text([bold(*name)]);
            tail.text(spans(text));
        }
    }
    tail.control("SH", ["SEE ALSO"]);
    tail.text([roman(SEE_ALSO)]);
    page += &roff(&tail);
    page
}

/// The date of the changelog's latest entry, as YYYY-MM-DD: its trailer
/// line ends in an RFC 2822 date, ` -- Name <mail>  Mon, 23 Nov 2026 12:00:00 +0000`.
fn release_date() -> String {
    let changelog =
        fs::read_to_string(CHANGELOG).unwrap_or_else(|e| panic!("cannot read {CHANGELOG}: {e}"));
    let trailer = changelog
        .lines()
        .find(|line| line.starts_with(" -- "))
        .unwrap_or_else(|| panic!("{CHANGELOG} has no ` -- ` trailer line"));
    let date = trailer.rsplit("  ").next().unwrap_or_default();
    let fields: Vec<&str> = date.split_whitespace().collect();
    let months = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    match fields[..] {
        [_, day, month, year, ..] if months.contains(&month) => {
            let month = months.iter().position(|m| *m == month).unwrap_or_default() + 1;
            format!("{year}-{month:02}-{day:0>2}")
        }
        _ => panic!("{CHANGELOG}: no date in the trailer line {trailer:?}"),
    }
}

/// One of `clap_mangen`'s sections as roff, without the apostrophe preamble
/// each rendering starts with (the page has it once, at the top) and, for a
/// command's sections, without the `.SH` heading.
fn section(render: impl FnOnce(&mut dyn Write) -> io::Result<()>, headless: bool) -> String {
    let mut buf = Vec::new();
    render(&mut buf).expect("rendering to memory cannot fail");
    let text = String::from_utf8(buf).expect("roff from UTF-8 is UTF-8");
    let text = without_preamble(&text);
    match text.strip_prefix(".SH ") {
        Some(rest) if headless => rest
            .split_once('\n')
            .map_or("", |(_, body)| body)
            .to_owned(),
        _ => text.to_owned(),
    }
}

fn roff(roff: &Roff) -> String {
    without_preamble(&roff.render()).to_owned()
}

fn without_preamble(text: &str) -> &str {
    // An empty page is the preamble alone.
    let preamble = Roff::new().render();
    text.strip_prefix(preamble.as_str())
        .expect("roff output starts with its preamble")
}

/// Text paragraphs, separated by blank lines, as `.PP` blocks.
fn paragraphs(text: &str) -> Roff {
    let mut roff = Roff::new();
    for paragraph in text.split("\n\n") {
        roff.control("PP", []);
        roff.text(spans(&paragraph.replace('\n', " ")));
    }
    roff
}

/// Text with `code spans`, which the page sets in bold.
fn spans(text: &str) -> Vec<Inline> {
    text.split('`')
        .enumerate()
        .filter(|(_, part)| !part.is_empty())
        .map(|(i, part)| if i % 2 == 1 { bold(part) } else { roman(part) })
        .collect()
}

const DESCRIPTION: &str = "\
safeprune removes stopped containers, unused images, volumes, networks and build cache \
from a Kubernetes node, through Docker Engine or containerd (with CRI for what kubelet \
owns), each by its own rules from one YAML policy. Unlike `docker system prune`, it never \
removes a pod sandbox, an exited container whose pod sandbox still runs, or a container \
with a protected label (`istio-init` by default), so kubelet never runs an init container \
of a live pod again.

It decides everything first: `safeprune plan` shows each decision and its rule and deletes \
nothing. `safeprune run` then asks the engine again about each object just before removing \
it, and never forces a removal.

The policy comes from `--config`, else `$SAFEPRUNE_CONFIG`, else \
`/etc/safeprune/policy.yaml` if it exists, else the built-in default; every key is \
optional. Reports go to stdout, logs to stderr.";

const FILES: &[(&str, &str)] = &[
    (
        "/etc/safeprune/policy.yaml",
        "The policy, read when neither `--config` nor `$SAFEPRUNE_CONFIG` names one. \
         The package installs the built-in default here, as a configuration file of \
         the package: edit it, and `safeprune check` validates it.",
    ),
    (
        "the built-in default",
        "Without a policy file safeprune uses the default compiled into it, which is \
         the file the package installs, byte for byte. `safeprune --config /dev/null \
         check` prints it, as an empty policy is the default.",
    ),
    (
        "/run/safeprune.lock",
        "The default `lock_file`: `run` and each daemon cycle hold a `flock(2)` on it, \
         so two runs never overlap (exit 4).",
    ),
    (
        "/var/lib/safeprune",
        "State: the place for `report.json_path` (e.g. last-run.json); the units may \
         write here.",
    ),
    (
        "/var/log/safeprune",
        "Logs: the place for `report.audit_log` (e.g. audit.jsonl); the units may \
         write here.",
    ),
    (
        "/usr/lib/systemd/system/safeprune.service",
        "One run, `safeprune -q run`, in a sandbox: root without capabilities, Unix \
         sockets only, a read-only file system but for the paths above.",
    ),
    (
        "/usr/lib/systemd/system/safeprune.timer",
        "Starts safeprune.service weekly, Thursdays at 05:00 local time plus up to 30 \
         minutes. Not enabled by the package: `systemctl enable --now safeprune.timer`.",
    ),
    (
        "/usr/lib/systemd/system/safeprune-daemon.service",
        "`safeprune daemon`, on the policy's `schedule`; `systemctl reload` re-reads the \
         policy. Not enabled by the package. Enable the timer or the daemon, not both.",
    ),
];

const ENVIRONMENT: &[(&str, &str)] = &[
    (
        "SAFEPRUNE_CONFIG",
        "The policy file, when set and not empty and no `--config` is given.",
    ),
    (
        "SAFEPRUNE_NODE_NAME",
        "The node's name in reports, logs and the audit log, when set and not empty; else \
         the host name. The DaemonSet sets it from `spec.nodeName`.",
    ),
    (
        "RUST_LOG",
        "The log filter, over `-v` and `-q` (e.g. `safeprune=debug`).",
    ),
];

const SEE_ALSO: &str = "systemctl(1), systemd.timer(5), systemd.exec(5), crontab(5), \
flock(1); the README and docs/design.md at https://github.com/safeprune/safeprune";
