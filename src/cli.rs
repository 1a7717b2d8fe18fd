//! The command line, as clap definitions only: docs/contracts.md fixes its shape.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Pod-aware pruning for Docker and containerd nodes: `docker system prune`
/// without deleting what kubelet still needs.
#[derive(Debug, Parser)]
#[command(name = "safeprune", version, about, max_term_width = 100)]
pub struct Cli {
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        help = "Policy file [default: $SAFEPRUNE_CONFIG, else /etc/safeprune/policy.yaml if it exists, else the built-in default]"
    )]
    pub config: Option<PathBuf>,

    /// Log format on stderr
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Colours in text logs on stderr: auto colours on a terminal unless `NO_COLOR` is set
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "WHEN",
        default_value_t = Color::Auto
    )]
    pub color: Color,

    /// More logs (-v info, -vv debug); `RUST_LOG` overrides
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,

    /// Only errors: no report on stdout for table output, no logs but errors
    #[arg(short, long, global = true)]
    pub quiet: bool,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Dry-run: decide and report, delete nothing
    Plan(PlanArgs),
    /// One cycle: decide, delete, report
    Run(RunArgs),
    /// Cycle on the policy's schedule until SIGTERM/SIGINT
    Daemon,
    /// Validate the policy and print it with defaults filled in, then check that this node can run it
    Check(CheckArgs),
    /// The decision for one object: its rule code and why
    Explain(ExplainArgs),
    /// Print the completion script for SHELL on stdout
    Completions {
        /// The shell that loads it
        #[arg(value_enum)]
        shell: Shell,
    },
    /// Print the man page safeprune(8) on stdout, as roff
    Man,
}

#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Report format on stdout
    #[arg(short, long, value_enum, default_value_t = Output::Table)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Validate the policy only: contact no engine, probe no directory
    #[arg(long)]
    pub offline: bool,
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A container id or name, image id or reference, volume name, network id or name
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub object: String,

    /// Format on stdout: text blocks, or one JSON document
    #[arg(short, long, value_enum, default_value_t = ExplainOutput::Text)]
    pub output: ExplainOutput,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub output: OutputArgs,

    #[arg(
        long,
        value_name = "FILE",
        help = "Also write the whole plan to FILE (whatever --only and --kind list), for `run --plan FILE` once it is reviewed"
    )]
    pub save: Option<PathBuf>,

    /// Show, instead of the plan, what this command would remove now beside what safeprune removes
    #[arg(long, value_enum, value_name = "COMMAND")]
    pub compare: Option<CompareWith>,

    /// List only the objects the plan deletes, or only those it keeps; the summary stays the whole plan's
    #[arg(long, value_enum, value_name = "DECISION")]
    pub only: Option<Only>,

    /// List only objects of these kinds (repeat it, or separate with commas); the summary stays the whole plan's
    #[arg(long, value_enum, value_name = "KIND", value_delimiter = ',')]
    pub kind: Vec<ObjectKind>,
}

/// The decision `plan --only` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Only {
    /// What the plan deletes
    Delete,
    /// What the plan keeps
    Keep,
}

/// The kinds of object `plan --kind` lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ObjectKind {
    Container,
    Image,
    Volume,
    Network,
    /// Build cache records (also `build_cache`, as the JSON spells it)
    #[value(alias = "build_cache")]
    BuildCache,
}

/// The commands `plan --compare` models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompareWith {
    /// `docker system prune -a -f`
    DockerPrune,
    /// `docker system prune -a -f --volumes`
    DockerPruneVolumes,
    /// `nerdctl -n k8s.io system prune -a -f`
    NerdctlPrune,
    /// `crictl rmi --prune`
    CrictlPrune,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub output: OutputArgs,

    #[arg(
        long,
        value_name = "FILE",
        help = "Delete only what the plan saved in FILE deletes and the rules still find eligible now"
    )]
    pub plan: Option<PathBuf>,

    /// Decide and report, but delete nothing
    #[arg(long)]
    pub dry_run: bool,

    /// Do not ask before removing; without it, a run on a terminal asks first
    #[arg(short = 'y', long, visible_short_alias = 'f', visible_alias = "force")]
    pub yes: bool,

    #[arg(
        long,
        value_name = "N",
        help = "Refuse the whole run if it would delete more than N objects [default: the policy's safety.max_deletions]"
    )]
    pub max_deletions: Option<u64>,

    /// Do not pace this run, whatever safety.pace says: for an emergency, a disk filling now
    #[arg(long)]
    pub no_pace: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExplainOutput {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// When text logs are coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Color {
    /// On a terminal, unless `NO_COLOR` is set and not empty
    Auto,
    /// Always, even with `NO_COLOR`
    Always,
    /// Never
    Never,
}

/// The shells `completions` writes for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    Bash,
    Zsh,
    Fish,
}
