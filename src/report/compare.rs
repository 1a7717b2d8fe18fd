//! `plan --compare COMMAND`: safeprune's plan beside what the
//! cron job it replaces would remove now, object by object, for the
//! operator who has to get the cron line replaced. JSON and a table.

use std::collections::HashMap;
use std::fmt::Write as _;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use super::fit::{self, Column};
use super::table::push_rows;
use super::{Filter, human_bytes, plural};
use crate::inventory::{ImageHolds, Inventory, Kind, RuntimeKind, short_id};
use crate::plan::prune_model::{self, Verdict};
use crate::plan::{Action, Plan, Rule};

/// The commands a plan can be compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// `docker system prune -a -f`.
    DockerPrune,
    /// `docker system prune -a -f --volumes`.
    DockerPruneVolumes,
    /// `nerdctl -n k8s.io system prune -a -f`.
    NerdctlPrune,
    /// `crictl rmi --prune`.
    CrictlPrune,
}

impl Command {
    /// The command line, as the operator's cron job has it.
    #[must_use]
    pub fn line(self) -> &'static str {
        match self {
            Self::DockerPrune => "docker system prune -a -f",
            Self::DockerPruneVolumes => "docker system prune -a -f --volumes",
            Self::NerdctlPrune => "nerdctl -n k8s.io system prune -a -f",
            Self::CrictlPrune => "crictl rmi --prune",
        }
    }

    /// The name `--compare` takes.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::DockerPrune => "docker-prune",
            Self::DockerPruneVolumes => "docker-prune-volumes",
            Self::NerdctlPrune => "nerdctl-prune",
            Self::CrictlPrune => "crictl-prune",
        }
    }

    /// The command's verdict on every object of `inventory`, by its model.
    #[must_use]
    pub fn verdicts(self, inventory: &Inventory) -> HashMap<(Kind, String), Verdict> {
        match self {
            Self::DockerPrune => prune_model::docker_system_prune(inventory, false),
            Self::DockerPruneVolumes => prune_model::docker_system_prune(inventory, true),
            Self::NerdctlPrune => prune_model::nerdctl_system_prune(inventory),
            Self::CrictlPrune => prune_model::crictl_rmi_prune(inventory),
        }
    }

    /// The runtimes the command acts on: Docker's commands on Docker;
    /// nerdctl on containerd; crictl on any CRI runtime, containerd's CRI
    /// plugin included.
    #[must_use]
    pub fn runtimes(self) -> &'static [RuntimeKind] {
        match self {
            Self::DockerPrune | Self::DockerPruneVolumes => &[RuntimeKind::Docker],
            Self::NerdctlPrune => &[RuntimeKind::Containerd],
            Self::CrictlPrune => &[RuntimeKind::Containerd, RuntimeKind::Cri],
        }
    }
}

/// One object on which safeprune and the command disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    pub kind: Kind,
    pub id: String,
    pub name: String,
    pub bytes: Option<u64>,
    /// safeprune's rule and why.
    pub rule: Rule,
    pub detail: String,
    /// What the command does with it, and why.
    pub command: String,
    /// An image's names no registry can give back, as the runtime's
    /// evidence says: once the command removes it, they are gone for good.
    /// Absent for other objects, and where every name can come back or
    /// the runtime cannot tell.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cannot_come_back: Option<Vec<String>>,
}

/// An image the command keeps but takes names off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Untagged {
    pub kind: Kind,
    pub id: String,
    pub name: String,
    /// The names it loses, as listed.
    pub names: Vec<String>,
    /// safeprune's rule for the image (safeprune takes no name off an
    /// image it keeps).
    pub rule: Rule,
    /// Why the command keeps the image.
    pub command: String,
}

/// Both sides' totals.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Totals {
    pub command_removes: usize,
    pub command_bytes: u64,
    pub safeprune_removes: usize,
    pub safeprune_bytes: u64,
    /// Removed by both.
    pub both: usize,
    /// Names the command takes off images it keeps.
    pub command_untags: usize,
    /// Images the command removes that no registry can give back (each
    /// marked `cannot_come_back`), and their bytes.
    pub command_unpullable: usize,
    pub command_unpullable_bytes: u64,
}

/// The comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comparison {
    pub compare: &'static str,
    pub command: &'static str,
    pub node: String,
    pub runtime: String,
    pub started_at: String,
    /// What `plan --only` and `--kind` listed, when they were given: the
    /// lists are then partial, the summary still whole.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filter: Option<Filter>,
    /// What the command removes and safeprune keeps.
    pub only_command: Vec<Difference>,
    /// What safeprune removes and the command keeps.
    pub only_safeprune: Vec<Difference>,
    /// What both remove.
    pub both: Vec<Difference>,
    /// Images the command keeps but takes names off: the names pods are
    /// started by (`docker system prune -a` untags a parent of an image in
    /// use, and the extra names of an image in use).
    pub untagged: Vec<Untagged>,
    pub summary: Totals,
}

impl Comparison {
    /// `plan` beside `verdicts`, the command's on the same inventory.
    #[must_use]
    pub fn new(
        command: Command,
        plan: &Plan,
        verdicts: &HashMap<(Kind, String), Verdict>,
        node: &str,
        runtime: &str,
        at: DateTime<Utc>,
    ) -> Self {
        let mut only_command = Vec::new();
        let mut only_safeprune = Vec::new();
        let mut both = Vec::new();
        let mut untagged = Vec::new();
        let mut summary = Totals::default();
        for d in &plan.decisions {
            let Some(v) = verdicts.get(&(d.kind, d.id.clone())) else {
                continue;
            };
            let ours = d.decision == Action::Delete;
            let bytes = d.bytes.unwrap_or(0);
            if v.removes {
                summary.command_removes += 1;
                summary.command_bytes += bytes;
            }
            if ours {
                summary.safeprune_removes += 1;
                summary.safeprune_bytes += bytes;
            }
            let difference = || Difference {
                kind: d.kind,
                id: d.id.clone(),
                name: d.name.clone(),
                bytes: d.bytes,
                rule: d.rule,
                detail: d.detail.clone(),
                command: v.why.clone(),
                cannot_come_back: None,
            };
            if !v.removes && !v.untags.is_empty() {
                summary.command_untags += v.untags.len();
                untagged.push(Untagged {
                    kind: d.kind,
                    id: d.id.clone(),
                    name: d.name.clone(),
                    names: v.untags.clone(),
                    rule: d.rule,
                    command: v.why.clone(),
                });
            }
            match (v.removes, ours) {
                (true, true) => {
                    summary.both += 1;
                    both.push(difference());
                }
                (true, false) => only_command.push(difference()),
                (false, true) => only_safeprune.push(difference()),
                (false, false) => {}
            }
        }
        Self {
            compare: command.name(),
            command: command.line(),
            node: node.to_owned(),
            runtime: runtime.to_owned(),
            started_at: at.to_rfc3339_opts(SecondsFormat::Secs, true),
            filter: None,
            only_command,
            only_safeprune,
            both,
            untagged,
            summary,
        }
    }

    /// Marks each image the command removes that has a name no registry
    /// can give back, as the images of `inventory` say, and counts them
    /// (whatever `images.keep_unpullable` says: the command removes them
    /// all the same).
    #[must_use]
    pub fn marking_unpullable(mut self, inventory: &Inventory) -> Self {
        let lost: HashMap<&str, Vec<String>> = inventory
            .images
            .iter()
            .map(|i| (i.id.as_str(), i.lost_names()))
            .filter(|(_, names)| !names.is_empty())
            .map(|(id, names)| (id, names.into_iter().map(str::to_owned).collect()))
            .collect();
        for d in self.only_command.iter_mut().chain(&mut self.both) {
            if d.kind != Kind::Image {
                continue;
            }
            if let Some(names) = lost.get(d.id.as_str()) {
                d.cannot_come_back = Some(names.clone());
                self.summary.command_unpullable += 1;
                self.summary.command_unpullable_bytes += d.bytes.unwrap_or(0);
            }
        }
        self
    }

    /// The summary's bytes counted through `holds`: each side's images
    /// free what only they hold, a resource two of them share once and one
    /// an image that stays holds not at all; an image `holds` does not
    /// itemize counts whole, as does every other object.
    #[must_use]
    pub fn counting_holds(mut self, holds: &ImageHolds) -> Self {
        if holds.0.is_empty() {
            return self;
        }
        let side = |entries: &[&Difference]| -> u64 {
            let whole: u64 = entries
                .iter()
                .filter(|d| !(d.kind == Kind::Image && holds.itemizes(&d.id)))
                .filter_map(|d| d.bytes)
                .sum();
            let images = entries
                .iter()
                .filter(|d| d.kind == Kind::Image)
                .map(|d| d.id.as_str());
            whole + holds.freed_by(images)
        };
        let command: Vec<&Difference> = self.only_command.iter().chain(&self.both).collect();
        let ours: Vec<&Difference> = self.only_safeprune.iter().chain(&self.both).collect();
        self.summary.command_bytes = side(&command);
        self.summary.safeprune_bytes = side(&ours);
        self
    }

    /// Lists only the objects `filter` lets through, by their kind and
    /// safeprune's decision (`--only keep`: what safeprune keeps, so what
    /// the command removes or untags beside it); the summary stays whole.
    /// Call it after [`Self::counting_holds`], which counts from the lists.
    #[must_use]
    pub fn listing_only(mut self, filter: Filter) -> Self {
        if filter.is_everything() {
            return self;
        }
        let shows = |kind: Kind, rule: Rule| filter.shows(kind, rule.action());
        self.only_command.retain(|d| shows(d.kind, d.rule));
        self.only_safeprune.retain(|d| shows(d.kind, d.rule));
        self.both.retain(|d| shows(d.kind, d.rule));
        self.untagged.retain(|u| shows(u.kind, u.rule));
        self.filter = Some(filter);
        self
    }

    /// One JSON document.
    ///
    /// # Panics
    /// Never: every field serializes.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut text = serde_json::to_string_pretty(self).expect("a comparison serializes");
        text.push('\n');
        text
    }

    /// The images the command keeps but takes names off, as a section of
    /// the table; nothing when there are none.
    fn untagged_table(&self, out: &mut String, width: Option<usize>) {
        if self.untagged.is_empty() {
            return;
        }
        let _ = writeln!(
            out,
            "{} NAMES `{}` TAKES OFF IMAGES IT KEEPS",
            self.summary.command_untags, self.command
        );
        let mut cells = vec![vec![
            "IMAGE".to_owned(),
            "ID".to_owned(),
            "NAMES LOST".to_owned(),
            "THE COMMAND KEEPS IT: WHY".to_owned(),
        ]];
        for u in &self.untagged {
            cells.push(vec![
                u.name.clone(),
                short_id(&u.id),
                u.names.join(", "),
                u.command.clone(),
            ]);
        }
        push_rows(
            out,
            &cells,
            &[Column::Text, Column::Id, Column::Text, Column::Text],
            width,
        );
        out.push('\n');
    }

    /// The table for people, at full width: for pipes, files and scripts.
    #[must_use]
    pub fn to_table(&self) -> String {
        self.render(None)
    }

    /// The table fitted to a terminal of `width` columns: no line is longer.
    #[must_use]
    pub fn to_table_fitted(&self, width: usize) -> String {
        fit::wrap(&self.render(Some(width)), width)
    }

    fn render(&self, width: Option<usize>) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "safeprune plan beside `{}` on {} ({}) at {}",
            self.command, self.node, self.runtime, self.started_at
        );
        if let Some(filter) = &self.filter {
            let _ = writeln!(out, "showing: {filter}; the summary counts the whole plan");
        }
        out.push('\n');
        let section = |out: &mut String,
                       title: String,
                       rows: &[Difference],
                       why: &str,
                       reason: fn(&Difference) -> &str| {
            let _ = writeln!(out, "{title}");
            if rows.is_empty() {
                out.push_str("  none\n\n");
                return;
            }
            let mut cells = vec![vec![
                "KIND".to_owned(),
                "NAME".to_owned(),
                "ID".to_owned(),
                "SIZE".to_owned(),
                "RULE".to_owned(),
                why.to_owned(),
            ]];
            for d in rows {
                cells.push(vec![
                    d.kind.as_str().to_owned(),
                    d.name.clone(),
                    short_id(&d.id),
                    d.bytes.map_or_else(|| "-".to_owned(), human_bytes),
                    d.rule.as_str().to_owned(),
                    reason(d).to_owned(),
                ]);
            }
            push_rows(
                out,
                &cells,
                &[
                    Column::Fixed,
                    Column::Text,
                    Column::Id,
                    Column::Fixed,
                    Column::Fixed,
                    Column::Text,
                ],
                width,
            );
            out.push('\n');
        };
        section(
            &mut out,
            format!(
                "{} REMOVED BY `{}`, KEPT BY SAFEPRUNE",
                self.only_command.len(),
                self.command
            ),
            &self.only_command,
            "SAFEPRUNE KEEPS IT: WHY",
            |d| &d.detail,
        );
        section(
            &mut out,
            format!(
                "{} REMOVED BY SAFEPRUNE, KEPT BY `{}`",
                self.only_safeprune.len(),
                self.command
            ),
            &self.only_safeprune,
            "THE COMMAND KEEPS IT: WHY",
            |d| &d.command,
        );
        self.untagged_table(&mut out, width);
        let s = &self.summary;
        let _ = write!(
            out,
            "SUMMARY\n  `{}` would remove {} objects ({}); safeprune removes {} ({}); both remove {}",
            self.command,
            s.command_removes,
            human_bytes(s.command_bytes),
            s.safeprune_removes,
            human_bytes(s.safeprune_bytes),
            s.both
        );
        if s.command_untags > 0 {
            let _ = write!(
                out,
                "; the command also takes {} names off images it keeps",
                s.command_untags
            );
        }
        out.push('\n');
        self.unpullable_line(&mut out);
        out
    }

    /// The summary's line on the command's removals that no registry can
    /// give back, when there are any.
    fn unpullable_line(&self, out: &mut String) {
        let s = &self.summary;
        if s.command_unpullable == 0 {
            return;
        }
        let names: Vec<&str> = self
            .only_command
            .iter()
            .chain(&self.both)
            .filter_map(|d| d.cannot_come_back.as_ref())
            .flatten()
            .map(String::as_str)
            .collect();
        let _ = writeln!(
            out,
            "  of what `{}` would remove, {} ({}) no registry can give back: {}",
            self.command,
            plural(Kind::Image, s.command_unpullable),
            human_bytes(s.command_unpullable_bytes),
            names.join(", ")
        );
    }
}

#[cfg(test)]
mod tests;
