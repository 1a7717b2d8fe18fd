//! The comparison: each side's lists and totals, the marks of what cannot
//! come back, the bytes counted through holds, and the filtered listing.

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
        table.contains("would remove 2 objects (11B); safeprune removes 2 (110B); both remove 1\n"),
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
