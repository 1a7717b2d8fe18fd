//! When the daemon runs: the next time the policy's crontab line names, in
//! its time zone, plus a random jitter.
//!
//! Pure: the clock and the randomness are arguments, so the weekday
//! numbering, daylight-saving changes and jitter bounds are unit-tested
//! without sleeping. The daemon (`daemon/`) does the waiting.

use chrono::{DateTime, Duration, Local, TimeZone, Utc};
use croner::Cron;

use crate::policy::{Policy, Timezone};

/// The first time strictly after `after` that `cron` names, read in the
/// time zone of `after`. `None` when the line names no time ever again.
#[must_use]
pub fn next_in<Tz: TimeZone>(cron: &Cron, after: &DateTime<Tz>) -> Option<DateTime<Utc>> {
    cron.find_next_occurrence(after, false)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

/// The next scheduled time after `after`, in the policy's time zone.
#[must_use]
pub fn next_scheduled(policy: &Policy, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let cron = policy.schedule.cron();
    match policy.timezone {
        Timezone::Utc => next_in(cron, &after),
        Timezone::Local => next_in(cron, &after.with_timezone(&Local)),
    }
}

/// How many scheduled times [`longest_gap`] looks at.
const GAP_SAMPLES: usize = 16;

/// The schedule's period: the longest time between two of the next
/// [`GAP_SAMPLES`] scheduled times after `after` (a schedule of uneven
/// gaps, `0 5 * * 1,4`, gives its longest, 4 days), jitter left out;
/// `None` when it schedules fewer than two runs ahead.
#[must_use]
pub fn longest_gap(policy: &Policy, after: DateTime<Utc>) -> Option<std::time::Duration> {
    let mut previous = next_scheduled(policy, after)?;
    let mut longest: Option<std::time::Duration> = None;
    for _ in 1..GAP_SAMPLES {
        let Some(next) = next_scheduled(policy, previous) else {
            break;
        };
        let gap = (next - previous).to_std().ok()?;
        longest = Some(longest.map_or(gap, |l| l.max(gap)));
        previous = next;
    }
    longest
}

/// An offset in `[0, jitter)`, whole milliseconds, from a random number.
#[must_use]
pub fn jitter_offset(jitter: Duration, random: u64) -> Duration {
    let span = u64::try_from(jitter.num_milliseconds()).unwrap_or(0);
    if span == 0 {
        return Duration::zero();
    }
    Duration::milliseconds(i64::try_from(random % span).unwrap_or(0))
}

/// A random number, from the standard library's per-process hash keys: the
/// jitter needs spread across a fleet, not cryptographic strength.
#[must_use]
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// One planned cycle: the scheduled time and when it actually starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The time the crontab line names.
    pub scheduled: DateTime<Utc>,
    /// `scheduled` plus the jitter: when the cycle starts.
    pub start: DateTime<Utc>,
}

/// The next cycle after `after`: scheduled time and jittered start.
///
/// A daemon computes this from the time it finished its last cycle (or
/// started), never from a missed slot: after a sleep or a clock jump over
/// several slots, the first wake runs one catch-up cycle and the next slot
/// is counted from then, so missed slots never run in a burst.
#[must_use]
pub fn next_slot(policy: &Policy, after: DateTime<Utc>, random: u64) -> Option<Slot> {
    let scheduled = next_scheduled(policy, after)?;
    Some(Slot {
        scheduled,
        start: scheduled + jitter_offset(policy.schedule_jitter.as_duration(), random),
    })
}

#[cfg(test)]
mod tests {
    use chrono::{Datelike, Timelike, Weekday};
    use chrono_tz::Europe::Berlin;

    use super::*;
    use crate::policy::Schedule;

    fn cron(line: &str) -> Cron {
        line.parse::<Schedule>().unwrap().cron().clone()
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    #[test]
    fn weekday_4_is_thursday_and_0_and_7_are_sunday() {
        // 2026-11-22 is a Sunday.
        let after = utc(2026, 11, 22, 12, 0);
        let thursday = next_in(&cron("0 5 * * 4"), &after).unwrap();
        assert_eq!(thursday, utc(2026, 11, 26, 5, 0));
        assert_eq!(thursday.weekday(), Weekday::Thu);
        for sunday in ["0 5 * * 0", "0 5 * * 7", "0 5 * * SUN"] {
            let next = next_in(&cron(sunday), &after).unwrap();
            assert_eq!(next, utc(2026, 11, 29, 5, 0), "{sunday}");
        }
    }

    #[test]
    fn next_is_strictly_after() {
        let at = utc(2026, 11, 26, 5, 0);
        assert_eq!(
            next_in(&cron("0 5 * * 4"), &at).unwrap(),
            utc(2026, 12, 3, 5, 0)
        );
    }

    #[test]
    fn day_of_month_or_day_of_week_like_vixie_cron() {
        // "the 1st, or any Monday": Vixie cron ORs the two fields.
        let after = utc(2026, 11, 22, 12, 0);
        let next = next_in(&cron("0 5 1 * 1"), &after).unwrap();
        assert_eq!(next, utc(2026, 11, 23, 5, 0)); // a Monday before Dec 1st
    }

    #[test]
    fn a_seconds_field_allows_fine_schedules() {
        let after = Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 1).unwrap();
        let next = next_in(&cron("*/5 * * * * *"), &after).unwrap();
        assert_eq!(next, Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 5).unwrap());
    }

    #[test]
    fn local_time_follows_daylight_saving_changes() {
        // Berlin leaves summer time on 2026-10-25: 05:00 local is 03:00 UTC
        // the day before, 04:00 UTC the day after.
        let line = cron("0 5 * * *");
        let before = Berlin.with_ymd_and_hms(2026, 10, 24, 6, 0, 0).unwrap();
        assert_eq!(next_in(&line, &before).unwrap(), utc(2026, 10, 25, 4, 0));
        let summer = Berlin.with_ymd_and_hms(2026, 10, 23, 6, 0, 0).unwrap();
        assert_eq!(next_in(&line, &summer).unwrap(), utc(2026, 10, 24, 3, 0));
    }

    #[test]
    fn a_time_skipped_by_the_spring_change_still_runs_once_that_day() {
        // 02:30 does not exist in Berlin on 2026-03-29 (02:00 -> 03:00).
        let line = cron("30 2 * * *");
        let after = Berlin.with_ymd_and_hms(2026, 3, 28, 12, 0, 0).unwrap();
        let next = next_in(&line, &after).unwrap();
        assert_eq!(next.with_timezone(&Berlin).day(), 29, "{next}");
        let after_that = next_in(&line, &next.with_timezone(&Berlin)).unwrap();
        assert_eq!(after_that.with_timezone(&Berlin).day(), 30);
        assert_eq!(after_that.with_timezone(&Berlin).hour(), 2);
    }

    #[test]
    fn a_repeated_hour_in_autumn_runs_once() {
        // 02:30 happens twice in Berlin on 2026-10-25.
        let line = cron("30 2 * * *");
        let after = Berlin.with_ymd_and_hms(2026, 10, 25, 0, 0, 0).unwrap();
        let first = next_in(&line, &after).unwrap();
        let second = next_in(&line, &first.with_timezone(&Berlin)).unwrap();
        assert_eq!(
            second.with_timezone(&Berlin).day(),
            26,
            "{first} then {second}"
        );
    }

    #[test]
    fn jitter_stays_within_its_bounds() {
        let jitter = Duration::minutes(30);
        for random in [0, 1, 1_799_999, 1_800_000, u64::MAX, 12_345_678_901] {
            let offset = jitter_offset(jitter, random);
            assert!(
                offset >= Duration::zero() && offset < jitter,
                "{random}: {offset}"
            );
        }
        assert_eq!(jitter_offset(Duration::zero(), 42), Duration::zero());
    }

    #[test]
    fn random_numbers_differ() {
        assert_ne!(random_u64(), random_u64());
    }

    #[test]
    fn slots_carry_the_jitter_and_count_from_the_last_cycle() {
        let mut policy = Policy::builtin();
        policy.schedule_jitter = "10m".parse().unwrap();
        // The machine slept from Wednesday to Sunday over Thursday's slot:
        // one catch-up now, then next Thursday, not a burst.
        let woke = utc(2026, 11, 29, 9, 0);
        let slot = next_slot(&policy, woke, 60_000 * 7).unwrap();
        assert_eq!(slot.scheduled, utc(2026, 12, 3, 5, 0));
        assert_eq!(slot.start, utc(2026, 12, 3, 5, 7));
    }

    #[test]
    fn the_period_is_the_longest_gap_between_scheduled_runs() {
        let mut policy = Policy::builtin();
        let after = utc(2026, 11, 22, 12, 0);
        let day = std::time::Duration::from_secs(86_400);
        // The built-in schedule: Thursdays.
        assert_eq!(longest_gap(&policy, after), Some(7 * day));
        // Mondays and Thursdays: 3 days, then 4.
        policy.schedule = "0 5 * * 1,4".parse().unwrap();
        assert_eq!(longest_gap(&policy, after), Some(4 * day));
        policy.schedule = "*/15 * * * *".parse().unwrap();
        assert_eq!(
            longest_gap(&policy, after),
            Some(std::time::Duration::from_secs(900))
        );
        // The first of the month: the longest month ahead.
        policy.schedule = "0 5 1 * *".parse().unwrap();
        assert_eq!(longest_gap(&policy, after), Some(31 * day));
    }
}
