//! interval: microseconds, days and months kept apart (a day is not always 24 hours, nor a
//! month 30 days), written as `IntervalStyle = postgres` writes them (`1 year 2 mons 3
//! days 04:05:06.5`, `-1 days +02:00:00`).
//!
//! Text input follows `DecodeInterval`: numbers with units (`1 day`, `1.5 hours`, `2
//! mons`, `1 week ago`), a time `[+-]HH:MM[:SS[.f]]`, a bare number as seconds, `Y-M` for
//! years and months, and the fractional units' carry into smaller ones. ISO 8601 (`P1D`)
//! and the SQL-standard style are not read here. `infinity` and `-infinity` are PostgreSQL
//! 17's and later (all three fields at their maximum or minimum; 15 writes these values as
//! numbers and does not read the words), and so are the refusals of a unit without a
//! number (`1 day day`, which 15 reads as `1 day`) and of `ago` anywhere but at the end.

use super::datetime::{
    time_fields, USECS_PER_DAY, USECS_PER_HOUR, USECS_PER_MINUTE, USECS_PER_SEC,
};
use super::fields::{self, Field, Kind};

/// An interval as `interval_send` writes it: time, then days, then months.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Interval {
    micros: i64,
    days: i32,
    months: i32,
}

const INFINITY: Interval = Interval {
    micros: i64::MAX,
    days: i32::MAX,
    months: i32::MAX,
};
const NEGATIVE_INFINITY: Interval = Interval {
    micros: i64::MIN,
    days: i32::MIN,
    months: i32::MIN,
};

/// `interval_out` of `interval_send`'s form.
pub(super) fn binary_to_text(bytes: &[u8]) -> Option<String> {
    let bytes: &[u8; 16] = bytes.try_into().ok()?;
    let interval = Interval {
        micros: i64::from_be_bytes(bytes[..8].try_into().ok()?),
        days: i32::from_be_bytes(bytes[8..12].try_into().ok()?),
        months: i32::from_be_bytes(bytes[12..].try_into().ok()?),
    };
    Some(format(interval))
}

/// `interval_in`, then `interval_send`.
pub(super) fn text_to_binary(text: &str) -> Option<Vec<u8>> {
    let interval = parse(text)?;
    let mut out = interval.micros.to_be_bytes().to_vec();
    out.extend_from_slice(&interval.days.to_be_bytes());
    out.extend_from_slice(&interval.months.to_be_bytes());
    Some(out)
}

/// `EncodeInterval` for `IntervalStyle = postgres`: years, months and days where nonzero,
/// each signed `+` after a negative one; the time when nonzero or when nothing else is.
fn format(interval: Interval) -> String {
    if interval == INFINITY {
        return "infinity".into();
    }
    if interval == NEGATIVE_INFINITY {
        return "-infinity".into();
    }
    let mut out = String::new();
    let mut is_zero = true;
    let mut is_before = false;
    let mut part = |value: i64, unit: &str| {
        if value == 0 {
            return;
        }
        let space = if is_zero { "" } else { " " };
        let plus = if is_before && value > 0 { "+" } else { "" };
        let plural = if value != 1 { "s" } else { "" };
        out.push_str(&format!("{space}{plus}{value} {unit}{plural}"));
        is_before = value < 0;
        is_zero = false;
    };
    let months = i64::from(interval.months);
    part(months / 12, "year");
    part(months % 12, "mon");
    part(i64::from(interval.days), "day");
    let time = interval.micros;
    let (hour, minute) = (
        time / USECS_PER_HOUR,
        time % USECS_PER_HOUR / USECS_PER_MINUTE,
    );
    let (second, micros) = (
        time % USECS_PER_MINUTE / USECS_PER_SEC,
        time % USECS_PER_SEC,
    );
    if is_zero || time != 0 {
        let minus = hour < 0 || minute < 0 || second < 0 || micros < 0;
        out.push_str(&format!(
            "{}{}{:02}:{:02}:",
            if is_zero { "" } else { " " },
            if minus {
                "-"
            } else if is_before {
                "+"
            } else {
                ""
            },
            hour.unsigned_abs(),
            minute.unsigned_abs()
        ));
        super::datetime::push_seconds(&mut out, second.unsigned_abs(), micros.unsigned_abs());
    }
    out
}

/// The units `DecodeInterval` reads (PostgreSQL's `deltatktbl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Microsecond,
    Millisecond,
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
    Decade,
    Century,
    Millennium,
}

impl Unit {
    /// The unit a word names, compared on its first ten letters as PostgreSQL compares.
    fn named(word: &str) -> Option<Unit> {
        let word = word.get(..10).unwrap_or(word);
        Some(match word {
            "us" | "usec" | "usecs" | "useconds" | "microsecon" => Unit::Microsecond,
            "ms" | "msec" | "msecs" | "mseconds" | "millisecon" => Unit::Millisecond,
            "s" | "sec" | "secs" | "second" | "seconds" => Unit::Second,
            "m" | "min" | "mins" | "minute" | "minutes" => Unit::Minute,
            "h" | "hr" | "hrs" | "hour" | "hours" => Unit::Hour,
            "d" | "day" | "days" => Unit::Day,
            "w" | "week" | "weeks" => Unit::Week,
            "mon" | "mons" | "month" | "months" => Unit::Month,
            "y" | "yr" | "yrs" | "year" | "years" => Unit::Year,
            "dec" | "decs" | "decade" | "decades" => Unit::Decade,
            "c" | "cent" | "century" | "centuries" => Unit::Century,
            "mil" | "mils" | "millennium" | "millennia" => Unit::Millennium,
            _ => return None,
        })
    }

    /// The unit's bit among the fields already given (each may be given once).
    fn mask(self) -> u32 {
        1 << (self as u32)
    }
}

/// The bits of a time field `HH:MM:SS`: hours, minutes and all kinds of seconds.
const TIME_MASK: u32 = (1 << Unit::Hour as u32)
    | (1 << Unit::Minute as u32)
    | (1 << Unit::Second as u32)
    | (1 << Unit::Millisecond as u32)
    | (1 << Unit::Microsecond as u32);
/// The bits of fractional seconds (`1.5 s` counts as milli- and microseconds too).
const ALL_SECONDS_MASK: u32 =
    (1 << Unit::Second as u32) | (1 << Unit::Millisecond as u32) | (1 << Unit::Microsecond as u32);

/// `pg_itm_in`: the fields as they add up.
#[derive(Debug, Default)]
struct Sum {
    micros: i64,
    days: i32,
    months: i32,
    years: i32,
}

/// What a number without a unit of its own counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Nothing to its right: seconds.
    Unset,
    /// The unit named to its right, or days after a time or an hour count.
    Unit(Unit),
    /// Right after `ago`: no unit, which PostgreSQL refuses (but for `Y-M`, which is months).
    Ago,
}

/// `DecodeInterval`: the fields read right to left, so each unit applies to the number
/// before it.
fn parse(text: &str) -> Option<Interval> {
    let fields = fields::split(text)?;
    if let [Field { kind, text }] = fields.as_slice() {
        match (kind, text.as_str()) {
            (Kind::Word, "infinity") | (Kind::SignedWord, "+infinity") => return Some(INFINITY),
            (Kind::SignedWord, "-infinity") => return Some(NEGATIVE_INFINITY),
            _ => {}
        }
    }
    let mut sum = Sum::default();
    let mut next = Next::Unset;
    let mut seen: u32 = 0;
    let mut is_before = false;
    let mut unit_pending = false;
    let last = fields.len().checked_sub(1)?;
    for (i, field) in fields.iter().enumerate().rev() {
        // A time field, signed or not (a signed field that is not a time is a number).
        let time = match field.kind {
            Kind::Time => Some(time_micros(&field.text)?),
            Kind::Signed => signed_time(&field.text),
            _ => None,
        };
        let mask = match field.kind {
            _ if time.is_some() => {
                sum.micros = time?;
                next = Next::Unit(Unit::Day);
                unit_pending = false;
                TIME_MASK
            }
            // (A time field that did not read has returned above.)
            Kind::Time => return None,
            Kind::Signed | Kind::Date | Kind::Number => {
                let (unit, value, fraction) = number(&field.text, next)?;
                let mask = add(&mut sum, unit, value, fraction)?;
                // The unit stays for the numbers further left, an hour count's as days.
                next = Next::Unit(if unit == Unit::Hour { Unit::Day } else { unit });
                unit_pending = false;
                mask
            }
            Kind::Word | Kind::SignedWord => {
                if unit_pending {
                    return None;
                }
                if field.text == "ago" {
                    if i != last {
                        return None;
                    }
                    is_before = true;
                    next = Next::Ago;
                } else {
                    next = Next::Unit(Unit::named(&field.text)?);
                    unit_pending = true;
                }
                0
            }
        };
        if mask & seen != 0 {
            return None;
        }
        seen |= mask;
    }
    if seen == 0 || unit_pending {
        return None;
    }
    if is_before {
        sum.micros = sum.micros.checked_neg()?;
        sum.days = sum.days.checked_neg()?;
        sum.months = sum.months.checked_neg()?;
        sum.years = sum.years.checked_neg()?;
    }
    // itmin2interval (the largest values are infinity's bits, which PostgreSQL 18 then
    // reads as infinity).
    let months = i64::from(sum.years) * 12 + i64::from(sum.months);
    Some(Interval {
        micros: sum.micros,
        days: sum.days,
        months: i32::try_from(months).ok()?,
    })
}

/// `DecodeTimeForInterval`: a time field in microseconds.
fn time_micros(text: &str) -> Option<i64> {
    let (hour, minute, second, micros) = time_fields(text)?;
    hour.checked_mul(USECS_PER_HOUR)?
        .checked_add(minute * USECS_PER_MINUTE)?
        .checked_add(second * USECS_PER_SEC)?
        .checked_add(micros)
}

/// A time field after a sign, in microseconds.
fn signed_time(text: &str) -> Option<i64> {
    let body = text.get(1..).filter(|body| body.contains(':'))?;
    let micros = time_micros(body)?;
    if text.starts_with('-') {
        micros.checked_neg()
    } else {
        Some(micros)
    }
}

/// A number field: its unit, integer part and fraction (`strtoi64`, then `-M` for
/// `Y-M`, or `ParseFraction`).
fn number(text: &str, next: Next) -> Option<(Unit, i64, f64)> {
    let negative = text.starts_with('-');
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let end = unsigned
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(unsigned.len());
    let (digits, rest) = unsigned.split_at(end);
    // strtoi64: the sign applies before the range check, so i64::MIN reads.
    let magnitude = digits.bytes().try_fold(0i128, |value, digit| {
        let value = value * 10 + i128::from(digit - b'0');
        (value <= 1 << 63).then_some(value)
    })?;
    let value = i64::try_from(if negative { -magnitude } else { magnitude }).ok()?;
    let unit = match next {
        Next::Unset => Some(Unit::Second),
        Next::Unit(unit) => Some(unit),
        Next::Ago => None,
    };
    let (unit, value, fraction) = if let Some(months) = rest.strip_prefix('-') {
        // SQL's years-months: `1-2` is 14 months (`1-` is 12, as `strtoint` reads no
        // digits as 0).
        let (months, rest) = fields::leading_int(months)?;
        if months >= 12 || !rest.is_empty() {
            return None;
        }
        let months = if negative { -months } else { months };
        (
            Unit::Month,
            value.checked_mul(12)?.checked_add(months)?,
            0.0,
        )
    } else if rest.starts_with('.') {
        let fraction = fields::fraction(rest)?;
        (unit?, value, if negative { -fraction } else { fraction })
    } else if rest.is_empty() {
        (unit?, value, 0.0)
    } else {
        return None;
    };
    Some((unit, value, fraction))
}

/// One number of a unit added to the sum, as `DecodeInterval`'s `Adjust*` helpers add it;
/// returns the fields it fills.
fn add(sum: &mut Sum, unit: Unit, value: i64, fraction: f64) -> Option<u32> {
    let int = |value: i64| i32::try_from(value).ok();
    match unit {
        Unit::Microsecond => micros(sum, value, fraction, 1)?,
        Unit::Millisecond => micros(sum, value, fraction, 1000)?,
        Unit::Second => micros(sum, value, fraction, USECS_PER_SEC)?,
        Unit::Minute => micros(sum, value, fraction, USECS_PER_MINUTE)?,
        Unit::Hour => micros(sum, value, fraction, USECS_PER_HOUR)?,
        Unit::Day => {
            sum.days = sum.days.checked_add(int(value)?)?;
            fract_micros(sum, fraction, USECS_PER_DAY)?;
        }
        Unit::Week => {
            sum.days = sum.days.checked_add(int(value)?.checked_mul(7)?)?;
            fract_days(sum, fraction, 7)?;
        }
        Unit::Month => {
            sum.months = sum.months.checked_add(int(value)?)?;
            fract_days(sum, fraction, 30)?;
        }
        Unit::Year | Unit::Decade | Unit::Century | Unit::Millennium => {
            let scale = match unit {
                Unit::Year => 1,
                Unit::Decade => 10,
                Unit::Century => 100,
                _ => 1000,
            };
            sum.years = sum.years.checked_add(int(value)?.checked_mul(scale)?)?;
            // AdjustFractYears: whole months, rounded half to even (`rint`).
            let months = (fraction * f64::from(scale) * 12.0).round_ties_even();
            sum.months = sum.months.checked_add(months as i32)?;
        }
    }
    Some(match unit {
        Unit::Second if fraction != 0.0 => ALL_SECONDS_MASK,
        _ => unit.mask(),
    })
}

/// `AdjustMicroseconds`: value and fraction of a unit of `scale` microseconds.
fn micros(sum: &mut Sum, value: i64, fraction: f64, scale: i64) -> Option<()> {
    sum.micros = sum.micros.checked_add(value.checked_mul(scale)?)?;
    fract_micros(sum, fraction, scale)
}

/// `AdjustFractMicroseconds`: a fraction of a unit, to the nearest microsecond (halves
/// truncated, as PostgreSQL rounds only beyond one half).
fn fract_micros(sum: &mut Sum, fraction: f64, scale: i64) -> Option<()> {
    if fraction == 0.0 {
        return Some(());
    }
    let scaled = fraction * scale as f64;
    let mut micros = scaled as i64;
    let rest = scaled - micros as f64;
    if rest > 0.5 {
        micros += 1;
    } else if rest < -0.5 {
        micros -= 1;
    }
    sum.micros = sum.micros.checked_add(micros)?;
    Some(())
}

/// `AdjustFractDays`: a fraction of a unit of `scale` days, whole days first.
fn fract_days(sum: &mut Sum, fraction: f64, scale: i32) -> Option<()> {
    if fraction == 0.0 {
        return Some(());
    }
    let scaled = fraction * f64::from(scale);
    let days = scaled as i32;
    sum.days = sum.days.checked_add(days)?;
    fract_micros(sum, scaled - f64::from(days), USECS_PER_DAY)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SELECT x::text, encode(interval_send(x), 'hex') FROM (SELECT $1::interval AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    const INTERVALS: &[(&str, &str, &str)] = &[
        (
            "1 year 2 mons 3 days 04:05:06.5",
            "1 year 2 mons 3 days 04:05:06.5",
            "000000036c9361a0000000030000000e",
        ),
        (
            "-1 days +02:00:00",
            "-1 days +02:00:00",
            "00000001ad274800ffffffff00000000",
        ),
        ("00:00:00", "00:00:00", "00000000000000000000000000000000"),
        ("1 day", "1 day", "00000000000000000000000100000000"),
        ("2 hours", "02:00:00", "00000001ad2748000000000000000000"),
        ("01:02:03", "01:02:03", "00000000dde878c00000000000000000"),
        (
            "-1 years -2 mons +3 days -04:05:06",
            "-1 years -2 mons +3 days -04:05:06",
            "fffffffc93743f8000000003fffffff2",
        ),
        (
            "1.5 days",
            "1 day 12:00:00",
            "0000000a0eebb0000000000100000000",
        ),
        (
            "1.5 years",
            "1 year 6 mons",
            "00000000000000000000000000000012",
        ),
        (
            "1.5 months",
            "1 mon 15 days",
            "00000000000000000000000f00000001",
        ),
        (
            "1.5 weeks",
            "10 days 12:00:00",
            "0000000a0eebb0000000000a00000000",
        ),
        (
            "0.1 seconds",
            "00:00:00.1",
            "00000000000186a00000000000000000",
        ),
        (
            "01:00:00 1.5 days",
            "1 day 01:00:00",
            "00000000d693a4000000000100000000",
        ),
        (
            "1.5 days 01:00:00",
            "1 day 13:00:00",
            "0000000ae57f54000000000100000000",
        ),
        ("5", "00:00:05", "00000000004c4b400000000000000000"),
        (
            "1 01:00:00",
            "1 day 01:00:00",
            "00000000d693a4000000000100000000",
        ),
        ("@ 1 day ago", "-1 days", "0000000000000000ffffffff00000000"),
        ("1 day ago", "-1 days", "0000000000000000ffffffff00000000"),
        (
            "-00:00:01.5",
            "-00:00:01.5",
            "ffffffffffe91ca00000000000000000",
        ),
        ("1day", "1 day", "00000000000000000000000100000000"),
        (
            "2 hours 30 minutes",
            "02:30:00",
            "0000000218711a000000000000000000",
        ),
        ("1 mon", "1 mon", "00000000000000000000000000000001"),
        (
            "14 mons",
            "1 year 2 mons",
            "0000000000000000000000000000000e",
        ),
        (
            "-14 mons",
            "-1 years -2 mons",
            "000000000000000000000000fffffff2",
        ),
        (
            "2562047788:00:54.775807",
            "2562047788:00:54.775807",
            "7fffffffffffffff0000000000000000",
        ),
        (
            "-2562047788:00:54.775807",
            "-2562047788:00:54.775807",
            "80000000000000010000000000000000",
        ),
        ("1.5 hours", "01:30:00", "0000000141dd76000000000000000000"),
        (
            "0.5 ms",
            "00:00:00.0005",
            "00000000000001f40000000000000000",
        ),
        ("1 decade", "10 years", "00000000000000000000000000000078"),
        ("1 century", "100 years", "000000000000000000000000000004b0"),
        (
            "1 millennium",
            "1000 years",
            "00000000000000000000000000002ee0",
        ),
        (
            "10 microseconds",
            "00:00:00.00001",
            "000000000000000a0000000000000000",
        ),
        (
            "3 milliseconds",
            "00:00:00.003",
            "0000000000000bb80000000000000000",
        ),
        (
            "1 microseconds",
            "00:00:00.000001",
            "00000000000000010000000000000000",
        ),
        ("+1 days", "1 day", "00000000000000000000000100000000"),
        (
            "1 d 2 h 3 m 4 s",
            "1 day 02:03:04",
            "00000001b81ee6000000000100000000",
        ),
        ("1:2", "01:02:00", "00000000ddbab2000000000000000000"),
        ("1:2:3.5", "01:02:03.5", "00000000ddf019e00000000000000000"),
        (
            "1.999 us",
            "00:00:00.000002",
            "00000000000000020000000000000000",
        ),
        ("1-2", "1 year 2 mons", "0000000000000000000000000000000e"),
        (" 1 day ", "1 day", "00000000000000000000000100000000"),
        ("1 DAY", "1 day", "00000000000000000000000100000000"),
        (
            "100000000 days",
            "100000000 days",
            "000000000000000005f5e10000000000",
        ),
        ("01:02.5", "00:01:02.5", "0000000003b9aca00000000000000000"),
        ("1 week 1 day", "8 days", "00000000000000000000000800000000"),
        ("1d2h", "1 day 02:00:00", "00000001ad2748000000000100000000"),
        ("1y", "1 year", "0000000000000000000000000000000c"),
        (
            "1y2m",
            "1 year 00:02:00",
            "0000000007270e00000000000000000c",
        ),
        ("1 h 30 m", "01:30:00", "0000000141dd76000000000000000000"),
        (
            "1 day, 2 hours",
            "1 day 02:00:00",
            "00000001ad2748000000000100000000",
        ),
        ("- 1 day", "-1 days", "0000000000000000ffffffff00000000"),
        (
            "1 hour ago",
            "-01:00:00",
            "ffffffff296c5c000000000000000000",
        ),
        ("-1 day ago", "1 day", "00000000000000000000000100000000"),
        (
            "1.5 mons 2 days",
            "1 mon 17 days",
            "00000000000000000000001100000001",
        ),
        (
            "1 centuries",
            "100 years",
            "000000000000000000000000000004b0",
        ),
        ("1 mil", "1000 years", "00000000000000000000000000002ee0"),
        (
            "1 usecs",
            "00:00:00.000001",
            "00000000000000010000000000000000",
        ),
        (
            "1 microsecondsxyz",
            "00:00:00.000001",
            "00000000000000010000000000000000",
        ),
        ("10:00", "10:00:00", "0000000861c468000000000000000000"),
        ("1.5", "00:00:01.5", "000000000016e3600000000000000000"),
        (
            "1 +02:00",
            "1 day 02:00:00",
            "00000001ad2748000000000100000000",
        ),
        ("-01:00:00", "-01:00:00", "ffffffff296c5c000000000000000000"),
        ("+01:00:00", "01:00:00", "00000000d693a4000000000000000000"),
        (
            "1 day -01:00:00",
            "1 day -01:00:00",
            "ffffffff296c5c000000000100000000",
        ),
        (
            "2147483647 days",
            "2147483647 days",
            "00000000000000007fffffff00000000",
        ),
        (
            "-2147483648 days",
            "-2147483648 days",
            "00000000000000008000000000000000",
        ),
        (
            "178956970 years 7 mons",
            "178956970 years 7 mons",
            "0000000000000000000000007fffffff",
        ),
        (
            "9223372036854775807 us",
            "2562047788:00:54.775807",
            "7fffffffffffffff0000000000000000",
        ),
        (
            "-9223372036854775808 us",
            "-2562047788:00:54.775808",
            "80000000000000000000000000000000",
        ),
        (".5 day", "12:00:00", "0000000a0eebb0000000000000000000"),
        ("1. day", "1 day", "00000000000000000000000100000000"),
        (
            "1 day 01:02:03.4567894",
            "1 day 01:02:03.456789",
            "00000000ddef71150000000100000000",
        ),
        (
            "0.0000005 s",
            "00:00:00",
            "00000000000000000000000000000000",
        ),
        (
            "0.0000015 s",
            "00:00:00.000001",
            "00000000000000010000000000000000",
        ),
        (
            "1.0000005 s",
            "00:00:01",
            "00000000000f42400000000000000000",
        ),
        (
            "-0.0000005 s",
            "00:00:00",
            "00000000000000000000000000000000",
        ),
        ("0.5 us", "00:00:00", "00000000000000000000000000000000"),
        (
            "1.5 us",
            "00:00:00.000001",
            "00000000000000010000000000000000",
        ),
        (
            "2.5 us",
            "00:00:00.000002",
            "00000000000000020000000000000000",
        ),
        (
            "1 day 02:03",
            "1 day 02:03:00",
            "00000001b7e1dd000000000100000000",
        ),
        (
            "01:02:03.5 1 day",
            "1 day 01:02:03.5",
            "00000000ddf019e00000000100000000",
        ),
        (
            "-1.5 days",
            "-1 days -12:00:00",
            "fffffff5f1145000ffffffff00000000",
        ),
        (
            "-1.5 years",
            "-1 years -6 mons",
            "000000000000000000000000ffffffee",
        ),
        (
            "1 2 hours",
            "1 day 02:00:00",
            "00000001ad2748000000000100000000",
        ),
        ("1-", "1 year", "0000000000000000000000000000000c"),
        (
            "-1-2",
            "-1 years -2 mons",
            "000000000000000000000000fffffff2",
        ),
        ("0.3 years", "4 mons", "00000000000000000000000000000004"),
        (
            "1.3333 mons",
            "1 mon 9 days 23:58:33.6",
            "0000001418b104000000000900000001",
        ),
        (
            "-178956970 years -8 mons",
            "-178956970 years -8 mons",
            "00000000000000000000000080000000",
        ),
        ("-1 mons", "-1 mons", "000000000000000000000000ffffffff"),
        (
            "1 year -1 mons",
            "11 mons",
            "0000000000000000000000000000000b",
        ),
        (
            "-1 years 1 mon",
            "-11 mons",
            "000000000000000000000000fffffff5",
        ),
        ("1 years", "1 year", "0000000000000000000000000000000c"),
        (
            "-00:00:00.000001",
            "-00:00:00.000001",
            "ffffffffffffffff0000000000000000",
        ),
        (
            "3 days 00:00:00.000001",
            "3 days 00:00:00.000001",
            "00000000000000010000000300000000",
        ),
        (
            "1 day 1 hour 1 minute 1 second",
            "1 day 01:01:01",
            "00000000da366d400000000100000000",
        ),
        ("2 weeks", "14 days", "00000000000000000000000e00000000"),
        (
            "0.7 weeks",
            "4 days 21:36:00",
            "000000121adb70000000000400000000",
        ),
        (
            "1 mon 01:00:00",
            "1 mon 01:00:00",
            "00000000d693a4000000000000000001",
        ),
        (
            "-3 days -00:00:01",
            "-3 days -00:00:01",
            "fffffffffff0bdc0fffffffd00000000",
        ),
    ];
    /// Inputs the same query refuses for interval.
    const INTERVALS_REFUSED: &[&str] = &[
        "1 day 2 days",
        "1 hour 01:00:00",
        "10:70:00",
        "2 years 1 year",
        "1 week 2 weeks",
        "1 secondss",
        "2147483648 days",
        "178956971 years",
        "9223372036854775808 us",
        "-2562047788:00:54.775808",
        "ago",
        "@",
        "1 ago day",
        "1 mon 1.5 mons",
        "1 hour 1.5 hours",
        "5 ago",
        "day",
        "1-12",
        "1-2-3",
        "",
        "x",
        "1 quarter",
        "1 2 3",
        "1:2:3:4",
        "1 e3 s",
    ];

    /// `COPY t (x interval) FROM STDIN (FORMAT binary)` then `SELECT x::text`, on
    /// PostgreSQL 18.6 for the first two rows (15.18 writes them as numbers: `178956970
    /// years 7 mons 2147483647 days 2562047788:00:54.775807`), on 15.18 for the rest, which
    /// 18.6 writes the same; `None` where the server refused the value.
    const INTERVALS_RECEIVED: &[(&str, Option<&str>)] = &[
        ("7fffffffffffffff7fffffff7fffffff", Some("infinity")),
        ("80000000000000008000000080000000", Some("-infinity")),
        (
            "80000000000000000000000000000000",
            Some("-2562047788:00:54.775808"),
        ),
        (
            "8000000000000000ffffffff80000000",
            Some("-178956970 years -8 mons -1 days -2562047788:00:54.775808"),
        ),
        (
            "7fffffffffffffff7fffffff00000000",
            Some("2147483647 days 2562047788:00:54.775807"),
        ),
        ("000000000000000000000000", None),
        ("00000000000000000000000000000000ff", None),
    ];

    /// `SELECT x::text, encode(interval_send(x), 'hex') FROM (SELECT $1::interval AS x) v`
    /// on PostgreSQL 18.6 (15.18 refuses these inputs).
    const INTERVALS_18: &[(&str, &str, &str)] = &[
        ("infinity", "infinity", "7fffffffffffffff7fffffff7fffffff"),
        ("-infinity", "-infinity", "80000000000000008000000080000000"),
        ("+infinity", "infinity", "7fffffffffffffff7fffffff7fffffff"),
        (" INFINITY ", "infinity", "7fffffffffffffff7fffffff7fffffff"),
        (
            "178956970 years 7 mons 2147483647 days 2562047788:00:54.775807",
            "infinity",
            "7fffffffffffffff7fffffff7fffffff",
        ),
        ("@ infinity", "infinity", "7fffffffffffffff7fffffff7fffffff"),
    ];

    /// Inputs PostgreSQL 18.6 refuses that 15.18 reads.
    const INTERVALS_18_REFUSED: &[&str] = &[
        "1 day day",
        "1 day ago ago",
        "infinity ago",
        "day 1",
        "ago 1 day",
        "1 day ago 2 hours",
    ];

    #[test]
    fn matches_the_server() {
        for &(input, text, hex) in INTERVALS.iter().chain(INTERVALS_18) {
            let bytes = hex::decode(hex).unwrap();
            assert_eq!(
                text_to_binary(input),
                Some(bytes.clone()),
                "input {input:?}"
            );
            assert_eq!(
                binary_to_text(&bytes).as_deref(),
                Some(text),
                "output of {input:?}"
            );
            // The least time's text does not read back, in PostgreSQL either.
            if !INTERVALS_REFUSED.contains(&text) {
                assert_eq!(text_to_binary(text), Some(bytes), "round trip of {input:?}");
            }
        }
        for input in INTERVALS_REFUSED.iter().chain(INTERVALS_18_REFUSED) {
            assert_eq!(text_to_binary(input), None, "refused {input:?}");
        }
        for &(hex, text) in INTERVALS_RECEIVED {
            let bytes = hex::decode(hex).unwrap();
            assert_eq!(binary_to_text(&bytes).as_deref(), text, "received {hex}");
        }
    }
}
