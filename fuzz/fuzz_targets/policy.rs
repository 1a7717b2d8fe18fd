//! Fuzzes the policy reader: no input may panic, hang or use
//! unbounded memory. Run by hand (docs in RELIABILITY.md):
//!
//!     cargo +nightly fuzz run policy -- -max_total_time=600 -rss_limit_mb=200
//!
//! The seed corpus is `tests/hostile/` and `config/policy.yaml`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // As a file would be read: text first, then the policy.
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = safeprune::policy::Policy::from_yaml(text, "fuzz.yaml");
    }
});
