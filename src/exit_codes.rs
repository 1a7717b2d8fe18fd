//! The exit codes of docs/contracts.md ("Exit codes"), as the one table that
//! the error mapping (`error::exit`) and the man page's EXIT STATUS
//! (written by build.rs) are both made from. Users' scripts branch on these.
//!
//! It imports nothing, not even of this crate, so that build.rs can include
//! it as a module of its own.

/// One exit code: its number, the name of its constant and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub code: u8,
    pub name: &'static str,
    /// One sentence; `code spans` in it name flags, keys and commands.
    pub meaning: &'static str,
}

/// Each code once: its constant, documented with its meaning, and its row
/// in [`ALL`], so the name, the number and the words cannot drift apart.
macro_rules! exit_codes {
    ($($name:ident = $code:literal: $meaning:literal,)+) => {
        $(
            #[doc = $meaning]
            pub const $name: u8 = $code;
        )+

        /// Every exit code, in order.
        pub const ALL: &[Entry] = &[$(Entry { code: $code, name: stringify!($name), meaning: $meaning },)+];
    };
}

exit_codes! {
    OK = 0: "Done, also when there was nothing to do, when a stop signal cut a run short, and when `run` asked on a terminal and was not told yes (nothing removed).",
    RUNTIME = 1: "The runtime is unreachable or failed, a file (`lock_file`, a report, the audit log, the metrics textfile) could not be opened or written, `check` found that this node cannot run the policy (its engine, a directory, or the stall safety.pace names), or the daemon could not set up its signals, its timer or its `metrics.listen` listener.",
    USAGE = 2: "Usage or policy error: nothing was contacted or removed. Also `run --plan` refusing its plan (another node, runtime, endpoint or policy, or too old): nothing removed.",
    REMOVALS_FAILED = 3: "The run finished, but some removals failed.",
    LOCKED = 4: "Another run holds the lock: nothing done.",
    OVER_LIMIT = 5: "The plan deletes more than `safety.max_deletions` (or `--max-deletions`): nothing removed; the refused plan is printed.",
    NOT_FOUND = 6: "`explain` found no object of that name (the engine was asked; nothing removed).",
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_counts_up_from_zero_with_one_sentence_each() {
        for (i, code) in ALL.iter().enumerate() {
            assert_eq!(usize::from(code.code), i, "{}", code.name);
            assert!(
                code.meaning.ends_with('.') && !code.meaning.contains('\n'),
                "{}: {}",
                code.name,
                code.meaning
            );
        }
    }
}
