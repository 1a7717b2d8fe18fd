//! The man page safeprune(8) and the shell completions, made from the clap
//! definitions and the exit-code table themselves, so they cannot drift
//! from the binary. `safeprune man` and `safeprune completions` print them;
//! build.rs includes this file, as it is, to write the Debian package's
//! copies (Cargo.toml, `[package.metadata.deb]`): both are the same text.
//!
//! It imports only `cli` and `exit_codes`, which build.rs includes too.

use std::io::{self, Write};

use clap::CommandFactory;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, roman};

use crate::cli::{Cli, Shell};
use crate::exit_codes::ALL;

/// The name the completions complete.
const BIN: &str = "safeprune";

fn generator(shell: Shell) -> clap_complete::Shell {
    match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    }
}

/// The completion script for `shell`.
///
/// # Panics
/// Never: clap's scripts are UTF-8.
#[must_use]
pub fn completion(shell: Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(generator(shell), &mut Cli::command(), BIN, &mut script);
    String::from_utf8(script).expect("a completion script is UTF-8")
}

/// The file the shell's completion loader looks for: `safeprune.bash`,
/// `_safeprune`, `safeprune.fish`.
#[must_use]
pub fn completion_file(shell: Shell) -> String {
    clap_complete::Generator::file_name(&generator(shell), BIN)
}

/// safeprune(8), dated `date` (YYYY-MM-DD): `clap_mangen`'s NAME, SYNOPSIS, DESCRIPTION and OPTIONS,
/// then each command with its options, and the sections clap knows nothing
/// of.
#[must_use]
pub fn man_page(date: &str) -> String {
    let cmd = Cli::command()
        .subcommand_help_heading("COMMANDS")
        .subcommand_value_name("command");
    let man = Man::new(cmd.clone())
        .title("SAFEPRUNE")
        .section("8")
        .date(date)
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
    for code in ALL {
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
    (
        "NO_COLOR",
        "When set and not empty, text logs are not coloured on a terminal either, \
         unless `--color always` asks for it (https://no-color.org).",
    ),
];

const SEE_ALSO: &str = "systemctl(1), systemd.timer(5), systemd.exec(5), crontab(5), \
flock(1); the README and docs/design.md at https://github.com/safeprune/safeprune";
