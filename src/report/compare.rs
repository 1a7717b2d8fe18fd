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
mod tests {
    use super::*;
    use crate::plan::Decision;

    #[test]
    fn the_commands_removals_that_cannot_come_back_are_marked_and_counted() {
        use crate::inventory::Image;
        use crate::inventory::provenance::Provenance;
        let digest = "127.0.0.1:5000/acc/bb@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef".to_owned();
        let inventory = Inventory {
            runtime: "docker".into(),
            images: vec![
                Image {
                    id: "built".into(),
                    tags: vec!["app:1".into()],
                    provenance: Provenance::from_repo_digests(&[]),
                    ..Image::default()
                },
                Image {
                    id: "pulled".into(),
                    tags: vec!["127.0.0.1:5000/acc/bb:1".into()],
                    provenance: Provenance::from_repo_digests(std::slice::from_ref(&digest)),
                    digests: vec![digest],
                    ..Image::default()
                },
                Image {
                    id: "unknown".into(),
                    tags: vec!["x:1".into()],
                    ..Image::default()
                },
            ],
            ..Inventory::default()
        };
        let delete = |id: &str, bytes| {
            let mut d = Decision::saved(Kind::Image, id, id, None, Some(bytes));
            d.detail = "unused".into();
            d
        };
        let plan = Plan {
            decisions: vec![
                delete("built", 100),
                delete("pulled", 10),
                delete("unknown", 1),
            ],
            ..Plan::default()
        };
        let verdicts: HashMap<(Kind, String), Verdict> = ["built", "pulled", "unknown"]
            .into_iter()
            .map(|id| {
                let removes = Verdict {
                    removes: true,
                    why: "unused image".into(),
                    untags: Vec::new(),
                };
                ((Kind::Image, id.to_owned()), removes)
            })
            .collect();
        let c = Comparison::new(
            Command::DockerPrune,
            &plan,
            &verdicts,
            "n",
            "docker",
            Utc::now(),
        )
        .marking_unpullable(&inventory);
        let marks: Vec<(&str, Option<&Vec<String>>)> = c
            .both
            .iter()
            .map(|d| (d.id.as_str(), d.cannot_come_back.as_ref()))
            .collect();
        assert_eq!(
            marks,
            [
                ("built", Some(&vec!["app:1".to_owned()])),
                ("pulled", None),
                ("unknown", None)
            ]
        );
        assert_eq!(
            (
                c.summary.command_unpullable,
                c.summary.command_unpullable_bytes
            ),
            (1, 100)
        );
        let json: serde_json::Value = serde_json::from_str(&c.to_json()).unwrap();
        assert_eq!(
            json["both"][0]["cannot_come_back"],
            serde_json::json!(["app:1"])
        );
        assert!(json["both"][1].get("cannot_come_back").is_none());
        assert_eq!(json["summary"]["command_unpullable"], 1);
        let table = c.to_table();
        assert!(
            table.contains(
                "of what `docker system prune -a -f` would remove, 1 image (100B) no registry can give back: app:1"
            ),
            "{table}"
        );
    }

    #[test]
    fn each_side_lists_what_only_it_removes_and_both_totals_add_up() {
        let decision = |kind, id: &str, rule: Rule, bytes| {
            let mut d = Decision::saved(kind, id, id, None, Some(bytes));
            d.rule = rule;
            d.decision = rule.action();
            d.detail = format!("{} detail", rule.as_str());
            d
        };
        let plan = Plan {
            decisions: vec![
                decision(Kind::Container, "init", Rule::ProtectedLabel, 1),
                decision(Kind::Container, "done", Rule::Eligible, 10),
                decision(Kind::Image, "old", Rule::Eligible, 100),
                decision(Kind::Image, "web", Rule::InUse, 1000),
            ],
            ..Plan::default()
        };
        let verdict = |removes, why: &str| Verdict {
            removes,
            why: why.to_owned(),
            untags: Vec::new(),
        };
        let verdicts = HashMap::from([
            (
                (Kind::Container, "init".to_owned()),
                verdict(true, "exited container"),
            ),
            (
                (Kind::Container, "done".to_owned()),
                verdict(true, "exited container"),
            ),
            (
                (Kind::Image, "old".to_owned()),
                verdict(false, "used by running container x"),
            ),
            (
                (Kind::Image, "web".to_owned()),
                verdict(false, "used by running container web"),
            ),
        ]);
        let c = Comparison::new(
            Command::DockerPrune,
            &plan,
            &verdicts,
            "n",
            "docker",
            Utc::now(),
        );
        let ids = |l: &[Difference]| l.iter().map(|d| d.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&c.only_command), ["init"]);
        assert_eq!(ids(&c.only_safeprune), ["old"]);
        assert_eq!(ids(&c.both), ["done"]);
        assert_eq!(
            c.summary,
            Totals {
                command_removes: 2,
                command_bytes: 11,
                safeprune_removes: 2,
                safeprune_bytes: 110,
                both: 1,
                command_untags: 0,
                command_unpullable: 0,
                command_unpullable_bytes: 0,
            }
        );
        let table = c.to_table();
        assert!(
            table.contains("1 REMOVED BY `docker system prune -a -f`, KEPT BY SAFEPRUNE"),
            "{table}"
        );
        assert!(
            table.contains("protected_label  protected_label detail"),
            "{table}"
        );
        assert!(
            table.contains("eligible  used by running container x"),
            "{table}"
        );
        assert!(
            table.contains(
                "would remove 2 objects (11B); safeprune removes 2 (110B); both remove 1\n"
            ),
            "{table}"
        );
        assert!(!table.contains("TAKES OFF"), "{table}");
    }

    #[test]
    fn names_the_command_takes_off_images_it_keeps_are_listed_apart() {
        let mut web = Decision::saved(Kind::Image, "web", "web", None, Some(1000));
        web.rule = Rule::InUse;
        web.decision = Action::Keep;
        let plan = Plan {
            decisions: vec![web],
            ..Plan::default()
        };
        let mut untagging = HashMap::from([(
            (Kind::Image, "web".to_owned()),
            Verdict {
                removes: false,
                why: "used by running container web".to_owned(),
                untags: Vec::new(),
            },
        )]);
        untagging
            .get_mut(&(Kind::Image, "web".to_owned()))
            .unwrap()
            .untags = vec!["web:2".into(), "zed/web:1".into()];
        let c = Comparison::new(
            Command::DockerPrune,
            &plan,
            &untagging,
            "n",
            "docker",
            Utc::now(),
        );
        assert_eq!(c.untagged.len(), 1);
        assert_eq!(c.untagged[0].names, ["web:2", "zed/web:1"]);
        assert_eq!(c.untagged[0].rule, Rule::InUse);
        assert_eq!(c.summary.command_untags, 2);
        let table = c.to_table();
        assert!(
            table.contains("2 NAMES `docker system prune -a -f` TAKES OFF IMAGES IT KEEPS"),
            "{table}"
        );
        assert!(table.contains("web:2, zed/web:1"), "{table}");
        assert!(
            table.contains("; the command also takes 2 names off images it keeps\n"),
            "{table}"
        );
    }

    /// On a terminal the comparison fits, whatever its width; piped, it
    /// is unchanged; and a filter lists by safeprune's decision and kind.
    #[test]
    fn the_comparison_fits_the_terminal_and_lists_what_the_filter_names() {
        let mut plan = Plan::default();
        let mut verdicts = HashMap::new();
        for (id, rule, removes) in [
            ("kept-container", Rule::ProtectedLabel, true),
            ("deleted-container", Rule::Eligible, true),
            ("deleted-image", Rule::Eligible, false),
        ] {
            let kind = if id.ends_with("image") {
                Kind::Image
            } else {
                Kind::Container
            };
            let long = format!("{id}-with-a-name-long-enough-to-be-cut-on-a-terminal");
            let mut d = Decision::saved(kind, id, &long, None, Some(1));
            d.rule = rule;
            d.decision = rule.action();
            d.detail = format!("{} because of a reason that takes a line", rule.as_str());
            plan.decisions.push(d);
            let why = format!("the command's own reason for {id}, at some length");
            verdicts.insert(
                (kind, id.to_owned()),
                Verdict {
                    removes,
                    why,
                    untags: Vec::new(),
                },
            );
        }
        let c = Comparison::new(
            Command::DockerPrune,
            &plan,
            &verdicts,
            "n",
            "docker",
            Utc::now(),
        );
        assert_eq!(c.to_table(), c.render(None));
        assert!(c.to_table().lines().any(|l| l.chars().count() > 120));
        for width in [60, 80, 120] {
            let fitted = c.to_table_fitted(width);
            assert!(
                fitted.lines().all(|l| l.chars().count() <= width),
                "{fitted}"
            );
            assert!(fitted.contains('…'), "{fitted}");
        }
        let keep = c.clone().listing_only(Filter {
            only: Some(Action::Keep),
            kinds: None,
        });
        assert_eq!(keep.only_command.len(), 1);
        assert!(keep.only_safeprune.is_empty() && keep.both.is_empty());
        assert_eq!(keep.summary, c.summary);
        let images = c.listing_only(Filter {
            only: None,
            kinds: Some([Kind::Image].into()),
        });
        assert!(images.only_command.is_empty() && images.both.is_empty());
        assert_eq!(images.only_safeprune.len(), 1);
        assert!(images.to_table().contains("showing: kinds: image;"));
    }

    /// Two images the command removes share a layer, and a third it removes
    /// shares one with an image that stays (a committed image's parent):
    /// the shared layer is freed once, the kept one not at all, and an
    /// image not itemized counts whole.
    #[test]
    fn with_holds_a_shared_layer_counts_once_and_a_kept_one_not_at_all() {
        let delete = |id: &str, bytes: u64| {
            let mut d = Decision::saved(Kind::Image, id, id, None, Some(bytes));
            d.decision = Action::Delete;
            d.rule = Rule::Eligible;
            d
        };
        let mut child = Decision::saved(Kind::Image, "child", "child", None, Some(300));
        child.rule = Rule::InUse;
        child.decision = Action::Keep;
        let plan = Plan {
            decisions: vec![
                delete("a", 110),
                delete("b", 110),
                delete("parent", 105),
                delete("whole", 7),
                child,
            ],
            ..Plan::default()
        };
        let removes = |id: &str, removes: bool| {
            (
                (Kind::Image, id.to_owned()),
                Verdict {
                    removes,
                    why: String::new(),
                    untags: Vec::new(),
                },
            )
        };
        let verdicts = HashMap::from([
            removes("a", true),
            removes("b", true),
            removes("parent", true),
            removes("whole", true),
            removes("child", false),
        ]);
        let holds = ImageHolds(HashMap::from([
            (
                "a".to_owned(),
                vec![("layer L".to_owned(), 100), ("config a".to_owned(), 10)],
            ),
            (
                "b".to_owned(),
                vec![("layer L".to_owned(), 100), ("config b".to_owned(), 10)],
            ),
            (
                "parent".to_owned(),
                vec![("layer P".to_owned(), 100), ("config p".to_owned(), 5)],
            ),
            (
                "child".to_owned(),
                vec![("layer P".to_owned(), 100), ("layer C".to_owned(), 200)],
            ),
        ]));
        let c = Comparison::new(
            Command::DockerPrune,
            &plan,
            &verdicts,
            "n",
            "docker",
            Utc::now(),
        );
        // Counted whole, each image by itself: 110 + 110 + 105 + 7.
        assert_eq!(c.summary.command_bytes, 332);
        let c = c.counting_holds(&holds);
        // L once (100), both configs (20), parent's config alone (5), and
        // `whole` as it is (7).
        assert_eq!(c.summary.command_bytes, 132);
        assert_eq!(c.summary.safeprune_bytes, 132);
        // The objects keep their own sizes.
        assert_eq!(
            c.both.iter().find(|d| d.id == "a").unwrap().bytes,
            Some(110)
        );
        // Nothing itemized: nothing changes.
        let same = c.clone().counting_holds(&ImageHolds::default());
        assert_eq!(same, c);
    }
}
