//! A crontab line read field by field before croner parses it, so that a
//! fault names its field, its value and what the field takes (`minute 61
//! is out of range (0-59)`), where croner would say only `Component error:
//! Number out of bounds.`; and a line that parses but names no date is
//! explained (`day-of-month 30 never occurs in February`).
//!
//! The grammar is croner's as `Schedule` configures it (no year, optional
//! seconds, strict steps): `*`, `*/n`, `a`, `a-b`, `a-b/n` and lists of
//! them, month and weekday names in their own fields, and croner's
//! extensions `L`, `W`, `#` and `?` in the day fields, which croner itself
//! then checks.

/// One field of the line: its name in messages, its bounds and its names.
struct Field {
    name: &'static str,
    min: u64,
    max: u64,
    /// Names for `min`, `min + 1`, … (`JAN` is 1, `SUN` is 0).
    names: &'static [&'static str],
}

const SECOND: Field = Field {
    name: "second",
    min: 0,
    max: 59,
    names: &[],
};
const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
};
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
};

const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

impl Field {
    /// What the field takes, as messages say it.
    fn takes(&self) -> String {
        match self.names {
            [] => format!("{}-{}", self.min, self.max),
            [first, .., last] => format!("{}-{} or {first}-{last}", self.min, self.max),
            [one] => format!("{}-{} or {one}", self.min, self.max),
        }
    }

    /// The value `token` stands for, or why it stands for none. `end`: it
    /// ends a range, where `SUN` is 7 (croner's reading of `MON-SUN`).
    fn value(&self, token: &str, end: bool) -> Result<u64, String> {
        if !token.is_empty() && token.bytes().all(|b| b.is_ascii_digit()) {
            return match token.parse::<u64>() {
                Ok(n) if (self.min..=self.max).contains(&n) => Ok(n),
                _ => Err(format!(
                    "{} {token} is out of range ({})",
                    self.name,
                    self.takes()
                )),
            };
        }
        let upper = token.to_ascii_uppercase();
        if let Some(i) = self.names.iter().position(|n| *n == upper) {
            let n = self.min + i as u64;
            return Ok(if end && n == 0 { 7 } else { n });
        }
        let what = match self.names.first() {
            Some(&"JAN") => "a month",
            Some(_) => "a day of the week",
            None => "a number",
        };
        // `THURSDAY`, `Sept`: the name it starts with.
        let close = self
            .names
            .iter()
            .find(|n| upper.len() > 3 && upper.starts_with(**n))
            .map(|n| format!("; did you mean {n}?"))
            .unwrap_or_default();
        Err(format!(
            "{} {token} is not {what} ({}{close})",
            self.name,
            self.takes()
        ))
    }

    /// Checks one entry of the field's list.
    fn entry(&self, entry: &str) -> Result<(), String> {
        let name = self.name;
        let (range, step) = match entry.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (entry, None),
        };
        if let Some(step) = step {
            if step.contains('/') {
                return Err(format!(
                    "{name} {entry} has more than one step (write e.g. */15)"
                ));
            }
            match step.parse::<u64>() {
                Ok(0) => {
                    return Err(format!(
                        "{name} {entry}: a step of 0 never moves on (write */1 or more)"
                    ));
                }
                Ok(_) => {}
                Err(_) => {
                    return Err(format!(
                        "{name} {entry}: the step {step:?} is not a whole number (write e.g. */15)"
                    ));
                }
            }
            if range.is_empty() {
                return Err(format!("{name} {entry} has no range (write */{step})"));
            }
            if range != "*" && !range.contains('-') {
                self.value(range, false)?;
                return Err(format!(
                    "{name} {entry}: a step needs a range (write */{step}, or {range}-{}/{step})",
                    self.max
                ));
            }
        }
        if range == "*" {
            return Ok(());
        }
        let bounds: Vec<&str> = range.split('-').collect();
        match bounds[..] {
            [single] => self.value(single, false).map(drop),
            [start, end] => {
                if start.is_empty() || end.is_empty() {
                    return Err(format!(
                        "{name} {range} is not a range (write start-end, e.g. {}-{})",
                        self.min,
                        self.min + 4
                    ));
                }
                let (a, b) = (self.value(start, false)?, self.value(end, true)?);
                if a > b {
                    // Sunday is 0 and 7: wrap at Saturday.
                    let top = if self.names.len() == 7 { 6 } else { self.max };
                    return Err(format!(
                        "{name} range {start}-{end} goes backwards (write {end}-{start}, or a list \
                         to wrap around: {start}-{top},{}-{end})",
                        self.min
                    ));
                }
                Ok(())
            }
            _ => Err(format!(
                "{name} {range} is not a range (write start-end, e.g. {}-{})",
                self.min,
                self.min + 4
            )),
        }
    }

    /// An entry in croner's extensions (`L`, `LW`, `15W`, `?` in the day of
    /// month; `5L`, `5#2`, `?` in the day of week), checked; `None` for any
    /// other entry.
    fn extension(&self, entry: &str) -> Option<Result<(), String>> {
        let upper = entry.to_ascii_uppercase();
        let name = self.name;
        match name {
            "day-of-month" if upper.contains(['L', 'W', '?']) => Some(
                match upper.as_str() {
                    "?" | "L" | "LW" => Some(Ok(())),
                    _ => upper
                        .strip_suffix('W')
                        .filter(|day| day.bytes().all(|b| b.is_ascii_digit()) && !day.is_empty())
                        .map(|day| self.value(day, false).map(drop)),
                }
                .unwrap_or_else(|| {
                    Err(format!(
                        "{name} {entry} is not a day of the month (1-31, L for the last day, or \
                         15W for the weekday nearest the 15th)"
                    ))
                }),
            ),
            "day-of-week" if upper.contains(['L', '#', '?']) => {
                Some(if upper == "?" || upper == "L" {
                    Ok(())
                } else if let Some((base, nth)) = entry.split_once('#') {
                    if matches!(nth, "1" | "2" | "3" | "4" | "5") {
                        self.entry(base)
                    } else {
                        Err(format!(
                            "{name} {entry}: #{nth} is not a week of the month (write #1 to #5)"
                        ))
                    }
                } else if let Some(day) = entry.strip_suffix(['L', 'l']).filter(|d| !d.is_empty()) {
                    self.value(day, false).map(drop)
                } else {
                    Err(format!(
                        "{name} {entry} is not a day of the week ({}, 5L for the last Friday, or 5#2 \
                     for the second)",
                        self.takes()
                    ))
                })
            }
            _ => None,
        }
    }

    /// Checks the whole field, a comma-separated list.
    fn check(&self, field: &str) -> Result<(), String> {
        // Croner's `+` on the day of week: both day fields must match.
        let field = if self.names.len() == 7 {
            field.strip_prefix('+').unwrap_or(field)
        } else {
            field
        };
        // croner reads `1,` as `1`: `1, 5 * * *` would run at 05:01 where
        // `1,5 * * * *` was meant.
        if field.split(',').any(str::is_empty) {
            return Err(format!(
                "{} {field} has an empty list entry (write a list with no spaces or stray \
                 commas, e.g. 1,5)",
                self.name
            ));
        }
        for entry in field.split(',') {
            self.extension(entry).unwrap_or_else(|| self.entry(entry))?;
        }
        Ok(())
    }
}

/// Checks each field of `fields` (a line already split), naming the first
/// fault: the field, its value and what the field takes.
pub(super) fn check_fields(fields: &[&str]) -> Result<(), String> {
    let layout: &[Field] = match fields.len() {
        5 => &[MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        6 => &[SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK],
        n => {
            return Err(format!(
                "write 5 fields (minute hour day-of-month month day-of-week), or 6 with seconds \
                 first; got {n}"
            ));
        }
    };
    for (field, text) in layout.iter().zip(fields) {
        field.check(text)?;
    }
    Ok(())
}

/// Why a line croner parsed names no date, as far as the day of month and
/// month say it: `day-of-month 30 never occurs in February`. `None` when
/// they do not explain it.
pub(super) fn never_fires(fields: &[&str], cron: &croner::Cron) -> Option<String> {
    let pattern = &cron.pattern;
    if pattern.days.has_modifiers() {
        return None;
    }
    let first_day = *pattern.days.values().first()?;
    let months = pattern.months.values();
    // Leap years included: 29 February comes.
    let longest = |month: u16| match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    if months.is_empty() || months.iter().any(|m| longest(*m) >= first_day) {
        return None;
    }
    let names: Vec<&str> = months
        .iter()
        .filter_map(|m| MONTH_NAMES.get(usize::from(*m).checked_sub(1)?).copied())
        .collect();
    let listed = match names.as_slice() {
        [] => return None,
        [one] => (*one).to_owned(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    };
    let day_field = fields[fields.len() - 3];
    Some(format!("day-of-month {day_field} never occurs in {listed}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(line: &str) -> String {
        let fields: Vec<&str> = line.split_ascii_whitespace().collect();
        check_fields(&fields).expect_err(line)
    }

    #[test]
    fn each_field_says_what_it_takes() {
        for (line, says) in [
            ("61 * * * *", "minute 61 is out of range (0-59)"),
            ("0 24 * * *", "hour 24 is out of range (0-23)"),
            ("0 0 0 * *", "day-of-month 0 is out of range (1-31)"),
            ("0 0 32 * *", "day-of-month 32 is out of range (1-31)"),
            ("0 0 * 13 *", "month 13 is out of range (1-12 or JAN-DEC)"),
            ("0 0 * 0 *", "month 0 is out of range (1-12 or JAN-DEC)"),
            (
                "0 0 * * 8",
                "day-of-week 8 is out of range (0-7 or SUN-SAT)",
            ),
            ("60 0 0 * * *", "second 60 is out of range (0-59)"),
            ("0 0 * FOO *", "month FOO is not a month (1-12 or JAN-DEC)"),
            (
                "0 0 * * THURSDAY",
                "day-of-week THURSDAY is not a day of the week (0-7 or SUN-SAT; did you mean THU?)",
            ),
            ("a * * * *", "minute a is not a number (0-59)"),
            ("0 0 32W * *", "day-of-month 32 is out of range (1-31)"),
            (
                "0 0 1L * *",
                "day-of-month 1L is not a day of the month (1-31, L for the last day, or 15W \
                 for the weekday nearest the 15th)",
            ),
            (
                "0 0 * * 8#2",
                "day-of-week 8 is out of range (0-7 or SUN-SAT)",
            ),
            (
                "0 0 * * 1#7",
                "day-of-week 1#7: #7 is not a week of the month (write #1 to #5)",
            ),
            (
                "0 0 * * L#2",
                "day-of-week L is not a day of the week (0-7 or SUN-SAT)",
            ),
            ("MON * * * *", "minute MON is not a number (0-59)"),
            (
                "0 99999999999999999999999 * * *",
                "hour 99999999999999999999999 is out of range (0-23)",
            ),
            ("0-61 * * * *", "minute 61 is out of range (0-59)"),
            (
                "50-10 * * * *",
                "minute range 50-10 goes backwards (write 10-50, or a list to wrap around: \
                 50-59,0-10)",
            ),
            (
                "0 0 * * FRI-MON",
                "day-of-week range FRI-MON goes backwards (write MON-FRI, or a list to wrap \
                 around: FRI-6,0-MON)",
            ),
            (
                "1-2-3 * * * *",
                "minute 1-2-3 is not a range (write start-end, e.g. 0-4)",
            ),
            (
                "0 -5 * * *",
                "hour -5 is not a range (write start-end, e.g. 0-4)",
            ),
            (
                "*/0 * * * *",
                "minute */0: a step of 0 never moves on (write */1 or more)",
            ),
            (
                "*/x * * * *",
                "minute */x: the step \"x\" is not a whole number (write e.g. */15)",
            ),
            (
                "5/10 * * * *",
                "minute 5/10: a step needs a range (write */10, or 5-59/10)",
            ),
            ("/10 * * * *", "minute /10 has no range (write */10)"),
            (
                "*/2/3 * * * *",
                "minute */2/3 has more than one step (write e.g. */15)",
            ),
            (
                "1, 5 * * *",
                "minute 1, has an empty list entry (write a list with no spaces or stray \
                 commas, e.g. 1,5)",
            ),
            (
                "0 5 * *",
                "write 5 fields (minute hour day-of-month month day-of-week), or 6 with \
                 seconds first; got 4",
            ),
            (
                "0 5 * * 4 2030 1",
                "write 5 fields (minute hour day-of-month month day-of-week), or 6 with \
                 seconds first; got 7",
            ),
        ] {
            assert_eq!(fault(line), says, "{line}");
        }
    }

    #[test]
    fn what_croner_reads_passes() {
        for line in [
            "0 5 * * 4",
            "*/15 * * * *",
            "0 5 * * MON-FRI",
            "0 5 * * mon-sun",
            "0 5 * * 7",
            "0 5 1 JAN-DEC *",
            "0 0 1-31/2 * *",
            "0 0 L * *",
            "0 0 LW * *",
            "0 0 15W * *",
            "0 0 ? * 5#2",
            "0 0 * * 5L",
            "0 0 * * +1",
            "0 */61 * * *",
            "*/5 * * * * *",
        ] {
            let fields: Vec<&str> = line.split_ascii_whitespace().collect();
            check_fields(&fields).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }
}

#[cfg(test)]
mod against_croner {
    use super::check_fields;

    const ENTRIES: &[&str] = &[
        "*", "*/5", "*/61", "0", "1", "5", "7", "12", "23", "31", "59", "60", "1-5", "5-1", "0-7",
        "1-7", "1-5/2", "5/2", "/2", "*/0", "*/x", "L", "LW", "15W", "W", "?", "5L", "1-5L", "5#2",
        "5#6", "5#", "#2", "MON", "mon", "JAN", "MON-FRI", "FRI-MON", "MON-SUN", "SUN-SAT",
        "JAN-MAR", "MON#2", "1,2", "1,,2", "x", "-1", "1-", "1-2-3", "*/2/3", "+1", "L-5",
    ];

    fn croner_reads(line: &str) -> bool {
        croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Optional)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(line)
            .is_ok()
    }

    /// What croner reads is not refused, but for what safeprune refuses
    /// on purpose: a name in another field than its own (croner reads
    /// `JAN` as 1 anywhere) and a list's empty entry.
    #[test]
    fn nothing_croner_reads_is_refused_but_on_purpose() {
        let months = ["JAN", "FEB", "MAR"];
        let days = ["MON", "FRI", "SUN", "SAT"];
        for field in 0..5 {
            for entry in ENTRIES {
                let mut fields = ["*"; 5];
                fields[field] = entry;
                let line = fields.join(" ");
                let upper = entry.to_ascii_uppercase();
                let foreign_name = (field != 3 && months.iter().any(|m| upper.contains(m)))
                    || (field != 4 && days.iter().any(|d| upper.contains(d)));
                if croner_reads(&line) && !foreign_name && !entry.contains(",,") {
                    check_fields(&fields).unwrap_or_else(|e| panic!("{line}: {e}"));
                }
            }
        }
    }
}
