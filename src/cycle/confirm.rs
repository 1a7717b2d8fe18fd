//! The question `run` asks on a terminal before it removes anything, as
//! `docker system prune` does (docs/contracts.md, "stdout and stderr"): the
//! plan's summary and `Delete 3 objects (187.0MB)? [y/N] ` on stderr, one
//! line read from stdin. Only `y` or `yes` removes.

use crate::error::AppError;
use crate::inventory::Kind;
use crate::output::eprint_lossy;
use crate::plan::Plan;
use crate::report::{human_bytes, plural};
use crate::shutdown::Shutdown;

/// Asks on stderr whether to remove what `plan` deletes, and reads the
/// answer from stdin.
///
/// # Errors
/// [`AppError::NotConfirmed`] for any answer but yes, for the end of
/// stdin, and for a stop signal while it waits (the read is left to the
/// process's exit: a blocked read of a terminal cannot be taken back).
pub async fn ask(plan: &Plan, shutdown: &Shutdown) -> Result<(), AppError> {
    eprint_lossy(&format!("{}\n{}", summary(plan), question(plan)));
    let (answered, answer) = tokio::sync::oneshot::channel::<std::io::Result<String>>();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = answered.send(std::io::stdin().read_line(&mut line).map(|_| line));
    });
    let answer = tokio::select! {
        () = shutdown.wait() => {
            eprint_lossy("\n");
            return Err(AppError::NotConfirmed("stopped by a signal before an answer"));
        }
        answer = answer => answer,
    };
    match answer {
        Ok(Ok(line)) if is_yes(&line) => Ok(()),
        Ok(Ok(line)) if line.is_empty() => {
            // The end of stdin: the terminal's cursor is still after the
            // question.
            eprint_lossy("\n");
            Err(AppError::NotConfirmed("not confirmed"))
        }
        _ => Err(AppError::NotConfirmed("not confirmed")),
    }
}

/// Whether `answer`, a line as read, says yes: `y` or `yes` in any case,
/// spaces around it ignored. Anything else, the empty line included, is no.
#[must_use]
pub fn is_yes(answer: &str) -> bool {
    let answer = answer.trim();
    answer.eq_ignore_ascii_case("y") || answer.eq_ignore_ascii_case("yes")
}

/// What the run would do, per kind, on one line:
/// `safeprune: this run deletes 2 containers, 1 image (187.0MB) and keeps
/// 14 objects; `safeprune plan` lists every decision`.
#[must_use]
pub fn summary(plan: &Plan) -> String {
    let deletes: Vec<String> = Kind::REMOVAL_ORDER
        .iter()
        .map(|kind| (kind, plan.deletions().filter(|d| d.kind == *kind).count()))
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| plural(*kind, n))
        .collect();
    let kept = plan.decisions.len() - plan.deletion_count();
    format!(
        "safeprune: this run deletes {} ({}) and keeps {kept} {}; `safeprune plan` lists every decision",
        deletes.join(", "),
        human_bytes(plan.reclaimable_bytes()),
        if kept == 1 { "object" } else { "objects" },
    )
}

/// `Delete 3 objects (187.0MB)? [y/N] `, the cursor left after it.
#[must_use]
pub fn question(plan: &Plan) -> String {
    let n = plan.deletion_count();
    format!(
        "Delete {n} {} ({})? [y/N] ",
        if n == 1 { "object" } else { "objects" },
        human_bytes(plan.reclaimable_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Decision;

    #[test]
    fn only_y_or_yes_in_any_case_says_yes() {
        for yes in ["y\n", "Y\n", "yes\n", "YES\r\n", " Yes \n", "y"] {
            assert!(is_yes(yes), "{yes:?}");
        }
        for no in [
            "", "\n", "n\n", "no\n", "N", "yess\n", "y y\n", "ja\n", "1\n",
        ] {
            assert!(!is_yes(no), "{no:?}");
        }
    }

    #[test]
    fn the_question_counts_the_objects_and_their_bytes() {
        let delete = |kind, name: &str, bytes| Decision::saved(kind, name, name, None, bytes);
        let plan = Plan {
            decisions: vec![
                delete(Kind::Image, "nginx:1.25", Some(187_000_000)),
                delete(Kind::Container, "old-job", Some(12_000)),
                delete(Kind::Container, "older-job", None),
            ],
            ..Plan::default()
        };
        assert_eq!(question(&plan), "Delete 3 objects (187.0MB)? [y/N] ");
        assert_eq!(
            summary(&plan),
            "safeprune: this run deletes 2 containers, 1 image (187.0MB) and keeps 0 objects; \
             `safeprune plan` lists every decision"
        );
        let one = Plan {
            decisions: vec![delete(Kind::Volume, "data", Some(999))],
            ..Plan::default()
        };
        assert_eq!(question(&one), "Delete 1 object (999B)? [y/N] ");
    }
}
