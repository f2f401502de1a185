//! date, time, timetz, timestamp and timestamptz. The binary forms count days or
//! microseconds from 2000-01-01 (PostgreSQL's epoch); the text forms are `DateStyle = ISO`
//! with timestamptz written in UTC (`TimeZone = UTC`), years before 1 as ` BC`.
//!
//! Text input reads the ISO forms PostgreSQL's decoder reads: `YYYY-MM-DD`, a time
//! `HH:MM[:SS[.ffffff]]` after a space or `T`, a zone as `+HH`, `+HHMM`, `+HH:MM[:SS]` (or
//! `-`) or `Z`/`UTC`/`GMT`, an era `BC`/`AD`, and `infinity` (also `+infinity`, as
//! PostgreSQL 18 reads it), `-infinity` and `epoch`. A timestamptz or timetz without a zone
//! is read in UTC, as a server with `TimeZone = UTC` reads it; a zone given to timestamp,
//! time or date is ignored, as PostgreSQL ignores it. Forms that depend on DateStyle
//! (`01/02/2024`), month names, zone names and abbreviations other than UTC's, and
//! `now`/`today` are not read here.

use super::fields::{self, Field, Kind};

pub(super) const USECS_PER_SEC: i64 = 1_000_000;
pub(super) const USECS_PER_MINUTE: i64 = 60 * USECS_PER_SEC;
pub(super) const USECS_PER_HOUR: i64 = 60 * USECS_PER_MINUTE;
pub(super) const USECS_PER_DAY: i64 = 24 * USECS_PER_HOUR;
/// The Julian day of 2000-01-01.
const POSTGRES_EPOCH_JDATE: i64 = 2_451_545;
/// The Julian day past date's range (5874898-01-01).
const DATE_END_JULIAN: i64 = 2_147_483_494;
/// timestamp's range: 4714-11-24 00:00:00 BC (Julian day 0) up to 294277-01-01 00:00:00.
const MIN_TIMESTAMP: i64 = -POSTGRES_EPOCH_JDATE * USECS_PER_DAY;
const END_TIMESTAMP: i64 = (109_203_528 - POSTGRES_EPOCH_JDATE) * USECS_PER_DAY;
/// Zone offsets must stay within ±15:59:59 (`TZDISP_LIMIT`, `MAX_TZDISP_HOUR`).
const TZDISP_LIMIT: i64 = 16 * 3600;
/// 1970-01-01 in days from 2000-01-01.
const UNIX_EPOCH_DAYS: i64 = -10_957;

/// Zone abbreviations that mean UTC in PostgreSQL's default abbreviation set.
const UTC_NAMES: &[&str] = &["z", "zulu", "ut", "utc", "gmt"];

// Binary to text.

/// `date_out` of `date_send`'s i32 days.
pub(super) fn date_to_text(bytes: &[u8]) -> Option<String> {
    let days = i64::from(i32::from_be_bytes(bytes.try_into().ok()?));
    Some(match days {
        d if d == i64::from(i32::MIN) => "-infinity".into(),
        d if d == i64::from(i32::MAX) => "infinity".into(),
        d if valid_date(d) => {
            let (year, month, day) = j2date(d + POSTGRES_EPOCH_JDATE)?;
            let mut out = String::new();
            let bc = push_date(&mut out, year, month, day);
            if bc {
                out.push_str(" BC");
            }
            out
        }
        _ => return None,
    })
}

/// `time_out` of `time_send`'s i64 microseconds (24:00:00 included).
pub(super) fn time_to_text(bytes: &[u8]) -> Option<String> {
    let micros = i64::from_be_bytes(bytes.try_into().ok()?);
    if !(0..=USECS_PER_DAY).contains(&micros) {
        return None;
    }
    let mut out = String::new();
    push_time(&mut out, micros);
    Some(out)
}

/// `timetz_out` of `timetz_send`'s i64 microseconds and i32 zone (seconds west of UTC).
pub(super) fn timetz_to_text(bytes: &[u8]) -> Option<String> {
    let bytes: &[u8; 12] = bytes.try_into().ok()?;
    let (micros, zone) = bytes.split_at(8);
    let micros = i64::from_be_bytes(micros.try_into().ok()?);
    let west = i64::from(i32::from_be_bytes(zone.try_into().ok()?));
    if !(0..=USECS_PER_DAY).contains(&micros) || west.abs() >= TZDISP_LIMIT {
        return None;
    }
    let mut out = String::new();
    push_time(&mut out, micros);
    push_zone(&mut out, -west);
    Some(out)
}

/// `timestamp_out` of `timestamp_send`'s i64 microseconds.
pub(super) fn timestamp_to_text(bytes: &[u8]) -> Option<String> {
    timestamp_text(bytes, false)
}

/// `timestamptz_out` with `TimeZone = UTC`: the timestamp and `+00`.
pub(super) fn timestamptz_to_text(bytes: &[u8]) -> Option<String> {
    timestamp_text(bytes, true)
}

fn timestamp_text(bytes: &[u8], zone: bool) -> Option<String> {
    let micros = i64::from_be_bytes(bytes.try_into().ok()?);
    match micros {
        i64::MIN => return Some("-infinity".into()),
        i64::MAX => return Some("infinity".into()),
        t if !(MIN_TIMESTAMP..END_TIMESTAMP).contains(&t) => return None,
        _ => {}
    }
    let days = micros.div_euclid(USECS_PER_DAY);
    let (year, month, day) = j2date(days + POSTGRES_EPOCH_JDATE)?;
    let mut out = String::new();
    let bc = push_date(&mut out, year, month, day);
    out.push(' ');
    push_time(&mut out, micros.rem_euclid(USECS_PER_DAY));
    if zone {
        push_zone(&mut out, 0);
    }
    if bc {
        out.push_str(" BC");
    }
    Some(out)
}

/// `YYYY-MM-DD` (at least four year digits) with the year counted from 1 BC backwards
/// when it is not positive; true when ` BC` is to follow.
fn push_date(out: &mut String, year: i64, month: u32, day: u32) -> bool {
    let shown = if year > 0 { year } else { 1 - year };
    out.push_str(&format!("{shown:04}-{month:02}-{day:02}"));
    year <= 0
}

/// `HH:MM:SS` and the fraction without trailing zeros (`EncodeTimeOnly`).
fn push_time(out: &mut String, micros: i64) {
    let hour = micros / USECS_PER_HOUR;
    let minute = micros / USECS_PER_MINUTE % 60;
    out.push_str(&format!("{hour:02}:{minute:02}:"));
    push_seconds(
        out,
        (micros / USECS_PER_SEC % 60).unsigned_abs(),
        (micros % USECS_PER_SEC).unsigned_abs(),
    );
}

/// `AppendSeconds`: two second digits, then the microseconds if any, trailing zeros cut.
pub(super) fn push_seconds(out: &mut String, seconds: u64, micros: u64) {
    out.push_str(&format!("{seconds:02}"));
    if micros != 0 {
        let fraction = format!("{micros:06}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
}

/// `EncodeTimezone`: `+HH`, then `:MM` if minutes or seconds, then `:SS` if seconds.
fn push_zone(out: &mut String, east: i64) {
    let sign = if east >= 0 { '+' } else { '-' };
    let total = east.unsigned_abs();
    let (hour, minute, second) = (total / 3600, total / 60 % 60, total % 60);
    out.push_str(&format!("{sign}{hour:02}"));
    if second != 0 {
        out.push_str(&format!(":{minute:02}:{second:02}"));
    } else if minute != 0 {
        out.push_str(&format!(":{minute:02}"));
    }
}

// Text to binary.

/// `date_in`: a date (a time and zone after it are read and dropped), or a special value.
pub(super) fn date_to_binary(text: &str) -> Option<Vec<u8>> {
    let days = match decode(text)? {
        Decoded::Special(Special::Infinity) => i64::from(i32::MAX),
        Decoded::Special(Special::NegativeInfinity) => i64::from(i32::MIN),
        Decoded::Special(Special::Epoch) => UNIX_EPOCH_DAYS,
        Decoded::Special(Special::Allballs) => return None,
        Decoded::Fields { date, .. } => {
            let (year, month, day) = date?;
            if !valid_julian(year, month) {
                return None;
            }
            let days = date2j(year, month, day) - POSTGRES_EPOCH_JDATE;
            valid_date(days).then_some(days)?
        }
    };
    Some(i32::try_from(days).ok()?.to_be_bytes().to_vec())
}

/// `time_in`: a time (a date before it and a zone after it are dropped), or `allballs`.
pub(super) fn time_to_binary(text: &str) -> Option<Vec<u8>> {
    let micros = match decode(text)? {
        Decoded::Special(Special::Allballs) => 0,
        Decoded::Special(_) => return None,
        Decoded::Fields { time, .. } => time?,
    };
    Some(micros.to_be_bytes().to_vec())
}

/// `timetz_in`: a time and its zone (UTC when none is given).
pub(super) fn timetz_to_binary(text: &str) -> Option<Vec<u8>> {
    let (micros, east) = match decode(text)? {
        Decoded::Special(Special::Allballs) => (0, 0),
        Decoded::Special(_) => return None,
        Decoded::Fields { time, zone, .. } => (time?, zone.unwrap_or(0)),
    };
    let west = i32::try_from(-east).ok()?;
    let mut out = micros.to_be_bytes().to_vec();
    out.extend_from_slice(&west.to_be_bytes());
    Some(out)
}

/// `timestamp_in`: a date and an optional time; a zone is read and dropped.
pub(super) fn timestamp_to_binary(text: &str) -> Option<Vec<u8>> {
    timestamp_binary(text, false)
}

/// `timestamptz_in`: a date, an optional time and an optional zone, converted to UTC.
pub(super) fn timestamptz_to_binary(text: &str) -> Option<Vec<u8>> {
    timestamp_binary(text, true)
}

fn timestamp_binary(text: &str, zoned: bool) -> Option<Vec<u8>> {
    let micros = match decode(text)? {
        Decoded::Special(Special::Infinity) => i64::MAX,
        Decoded::Special(Special::NegativeInfinity) => i64::MIN,
        Decoded::Special(Special::Epoch) => UNIX_EPOCH_DAYS * USECS_PER_DAY,
        Decoded::Special(Special::Allballs) => return None,
        Decoded::Fields { date, time, zone } => {
            // tm2timestamp: the Julian-day guard, then the microseconds, the zone, and
            // the range.
            let (year, month, day) = date?;
            if !valid_julian(year, month) {
                return None;
            }
            let days = date2j(year, month, day) - POSTGRES_EPOCH_JDATE;
            let local = days
                .checked_mul(USECS_PER_DAY)?
                .checked_add(time.unwrap_or(0))?;
            let east = if zoned { zone.unwrap_or(0) } else { 0 };
            let utc = local.checked_sub(east.checked_mul(USECS_PER_SEC)?)?;
            (MIN_TIMESTAMP..END_TIMESTAMP)
                .contains(&utc)
                .then_some(utc)?
        }
    };
    Some(micros.to_be_bytes().to_vec())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    Infinity,
    NegativeInfinity,
    Epoch,
    Allballs,
}

/// What the text holds: the date (astronomical year, so 1 BC is 0), the time of day in
/// microseconds (at most 24:00:00), and the zone offset in seconds east of UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decoded {
    Special(Special),
    Fields {
        date: Option<(i64, u32, u32)>,
        time: Option<i64>,
        zone: Option<i64>,
    },
}

/// `DecodeDateTime` and `DecodeTimeOnly` for the ISO forms: each field at most once.
fn decode(text: &str) -> Option<Decoded> {
    let fields = fields::split(text)?;
    if let [Field { kind, text }] = fields.as_slice() {
        let special = match (kind, text.as_str()) {
            (Kind::Word, "infinity") => Some(Special::Infinity),
            // PostgreSQL 18 reads `+infinity` too; 15 does not.
            (Kind::SignedWord, "+infinity") => Some(Special::Infinity),
            (Kind::SignedWord, "-infinity") => Some(Special::NegativeInfinity),
            (Kind::Word, "epoch") => Some(Special::Epoch),
            (Kind::Word, "allballs") => Some(Special::Allballs),
            _ => None,
        };
        if let Some(special) = special {
            return Some(Decoded::Special(special));
        }
    }
    let mut ymd = None;
    let mut time = None;
    let mut zone = None;
    let mut era = None;
    let mut iter = fields.iter().peekable();
    while let Some(field) = iter.next() {
        match field.kind {
            Kind::Date => once(&mut ymd, iso_date(&field.text)?)?,
            Kind::Time => once(&mut time, time_of_day(&field.text)?)?,
            Kind::Signed => once(&mut zone, zone_offset(&field.text)?)?,
            // ISO 8601's `T` between date and time.
            Kind::Word if field.text == "t" => {
                iter.peek().filter(|next| next.kind == Kind::Time)?;
            }
            Kind::Word if field.text == "bc" => once(&mut era, true)?,
            Kind::Word if field.text == "ad" => once(&mut era, false)?,
            Kind::Word if UTC_NAMES.contains(&field.text.as_str()) => once(&mut zone, 0)?,
            _ => return None,
        }
    }
    // ValidateDate: years count from 1 (BC years too), days within their month.
    let date = match ymd {
        None => {
            era.is_none().then_some(())?;
            None
        }
        Some((year, month, day)) => {
            if year <= 0 {
                return None;
            }
            let year = if era == Some(true) { 1 - year } else { year };
            if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
                return None;
            }
            Some((year, u32::try_from(month).ok()?, u32::try_from(day).ok()?))
        }
    };
    Some(Decoded::Fields { date, time, zone })
}

/// Fills a field seen for the first time; `None` when it was there already.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    slot.replace(value).is_none().then_some(())
}

/// `YYYY-MM-DD` (or with `/`): a year of at least three digits (two-digit years follow
/// rules of their own, and a day or month first depends on DateStyle), a month and a day
/// of one or two.
fn iso_date(text: &str) -> Option<(i64, i64, i64)> {
    let delimiter = if text.contains('/') { '/' } else { '-' };
    let mut parts = text.split(delimiter);
    let mut part = |widths: std::ops::RangeInclusive<usize>| -> Option<i64> {
        let digits = parts.next()?;
        if !widths.contains(&digits.len()) || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        digits.parse().ok()
    };
    let date = (part(3..=9)?, part(1..=2)?, part(1..=2)?);
    parts.next().is_none().then_some(date)
}

/// A time field of a date/time value: `DecodeTime`, then `time_overflows` (24:00:00 is
/// the latest; a 60th second is allowed and carries over).
fn time_of_day(text: &str) -> Option<i64> {
    let (hour, minute, second, micros) = time_fields(text)?;
    if hour > 24 {
        return None;
    }
    let total = ((hour * 60 + minute) * 60 + second) * USECS_PER_SEC + micros;
    (total <= USECS_PER_DAY).then_some(total)
}

/// `DecodeTimeCommon`: `h:m`, `h:m:s[.f]` or `m:s.f`, as (hours, minutes, seconds,
/// microseconds) with minutes below 60, seconds at most 60 and the fraction rounded to
/// microseconds (at most a whole second).
pub(super) fn time_fields(text: &str) -> Option<(i64, i64, i64, i64)> {
    let int = |value: i64| (value <= i64::from(i32::MAX)).then_some(value);
    let (hour, rest) = fields::leading_int(text)?;
    let rest = rest.strip_prefix(':')?;
    let (minute, rest) = fields::leading_int(rest)?;
    let minute = int(minute)?;
    let (hour, minute, second, micros) = if rest.is_empty() {
        (hour, minute, 0, 0)
    } else if rest.starts_with('.') {
        (0, int(hour)?, minute, fractional_second(rest)?)
    } else {
        let (second, rest) = fields::leading_int(rest.strip_prefix(':')?)?;
        let micros = if rest.is_empty() {
            0
        } else {
            fractional_second(rest)?
        };
        (hour, minute, int(second)?, micros)
    };
    let valid = minute < 60 && second <= 60 && (0..=USECS_PER_SEC).contains(&micros);
    valid.then_some((hour, minute, second, micros))
}

/// `ParseFractionalSecond`: the fraction rounded to microseconds half to even (`rint`).
fn fractional_second(text: &str) -> Option<i64> {
    let micros = (fields::fraction(text)? * 1e6).round_ties_even();
    // The fraction is below 1, so this is at most 1000000.
    Some(micros as i64)
}

/// `DecodeTimezone`: `+h`, `+hh`, `+hhmm` (run together), `+h:m` or `+h:m:s`, at most
/// 15:59:59; seconds east of UTC.
fn zone_offset(text: &str) -> Option<i64> {
    let negative = text.starts_with('-');
    let body = text.get(1..)?;
    let (hour, rest) = fields::leading_int(body)?;
    let (hour, minute, second, rest) = if let Some(rest) = rest.strip_prefix(':') {
        let (minute, rest) = fields::leading_int(rest)?;
        match rest.strip_prefix(':') {
            Some(rest) => {
                let (second, rest) = fields::leading_int(rest)?;
                (hour, minute, second, rest)
            }
            None => (hour, minute, 0, rest),
        }
    } else if rest.is_empty() && text.len() > 3 {
        (hour / 100, hour % 100, 0, rest)
    } else {
        (hour, 0, 0, rest)
    };
    if hour > 15 || minute >= 60 || second >= 60 || !rest.is_empty() {
        return None;
    }
    let east = (hour * 60 + minute) * 60 + second;
    Some(if negative { -east } else { east })
}

fn is_leap(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// `IS_VALID_JULIAN`: from November 4714 BC up to, not including, June 5874898.
fn valid_julian(year: i64, month: u32) -> bool {
    (year > -4713 || (year == -4713 && month >= 11))
        && (year < 5_874_898 || (year == 5_874_898 && month < 6))
}

/// `IS_VALID_DATE`: days from 2000-01-01 within 4714-11-24 BC ..= 5874897-12-31.
fn valid_date(days: i64) -> bool {
    (-POSTGRES_EPOCH_JDATE..DATE_END_JULIAN - POSTGRES_EPOCH_JDATE).contains(&days)
}

/// PostgreSQL's `date2j`: the Julian day of a proleptic Gregorian date (astronomical
/// year), for years the range checks let through.
fn date2j(year: i64, month: u32, day: u32) -> i64 {
    let (month, day) = (i64::from(month), i64::from(day));
    let (y, m) = if month > 2 {
        (year + 4800, month + 1)
    } else {
        (year + 4799, month + 13)
    };
    let century = y / 100;
    y * 365 - 32167 + y / 4 - century + century / 4 + 7834 * m / 256 + day
}

/// PostgreSQL's `j2date`, for Julian days from 0.
fn j2date(jd: i64) -> Option<(i64, u32, u32)> {
    let mut julian = u64::try_from(jd).ok()? + 32044;
    let quad = julian / 146_097;
    let extra = (julian - quad * 146_097) * 4 + 3;
    julian += 60 + quad * 3 + extra / 146_097;
    let quad = julian / 1461;
    julian -= quad * 1461;
    let y = julian * 4 / 1461;
    julian = if y != 0 {
        (julian + 305) % 365
    } else {
        (julian + 306) % 366
    } + 123;
    let year = i64::try_from(y + quad * 4).ok()? - 4800;
    let quad = julian * 2141 / 65536;
    let day = julian - 7834 * quad / 256;
    let month = (quad + 10) % 12 + 1;
    Some((year, u32::try_from(month).ok()?, u32::try_from(day).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SELECT x::text, encode(date_send(x), 'hex') FROM (SELECT $1::date AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    const DATES: &[(&str, &str, &str)] = &[
        ("2000-01-01", "2000-01-01", "00000000"),
        ("1999-12-31", "1999-12-31", "ffffffff"),
        ("2000-01-02", "2000-01-02", "00000001"),
        ("2000-02-29", "2000-02-29", "0000003b"),
        ("2004-02-29", "2004-02-29", "000005f0"),
        ("1900-02-28", "1900-02-28", "ffff718e"),
        ("1900-03-01", "1900-03-01", "ffff718f"),
        ("2100-03-01", "2100-03-01", "00008ee8"),
        ("2024-01-02", "2024-01-02", "0000223f"),
        ("1970-01-01", "1970-01-01", "ffffd533"),
        ("0001-01-01", "0001-01-01", "fff4dbf9"),
        ("0001-01-01 BC", "0001-01-01 BC", "fff4da8b"),
        ("0001-12-31 BC", "0001-12-31 BC", "fff4dbf8"),
        ("0005-02-29 BC", "0005-02-29 BC", "fff4d511"),
        ("4714-11-24 BC", "4714-11-24 BC", "ffda97a7"),
        ("5874897-12-31", "5874897-12-31", "7fda970c"),
        ("10000-01-01", "10000-01-01", "002c95d4"),
        ("infinity", "infinity", "7fffffff"),
        ("-infinity", "-infinity", "80000000"),
        ("epoch", "1970-01-01", "ffffd533"),
        (" 2024-01-02 ", "2024-01-02", "0000223f"),
        ("2024-1-2", "2024-01-02", "0000223f"),
        ("2024-01-02 AD", "2024-01-02", "0000223f"),
        ("2024-01-02 bc", "2024-01-02 BC", "ffe99447"),
        ("2024-01-02 03:04:05", "2024-01-02", "0000223f"),
        ("2024-01-02T03:04:05", "2024-01-02", "0000223f"),
        ("2024-01-02 03:04:05+05", "2024-01-02", "0000223f"),
        ("024-01-02", "0024-01-02", "fff4fcca"),
        ("INFINITY", "infinity", "7fffffff"),
        ("2024/01/02", "2024-01-02", "0000223f"),
    ];
    /// Inputs the same query refuses for date.
    const DATES_REFUSED: &[&str] = &[
        "2001-02-29",
        "4714-11-23 BC",
        "5874898-01-01",
        "0000-01-01",
        "0000-01-01 BC",
        "2024-13-01",
        "2024-00-10",
        "2024-01-32",
        "2024-04-31",
        "24-01-02",
        "2024-01-02 25:00",
        "03:04:05",
        "",
        "2024-01-02 BC BC",
        "2024-01-02 2024-01-03",
        "allballs",
        "2024-01-02 x",
        "2024-01-02T",
        "0004-02-29 BC",
    ];
    /// `SELECT x::text, encode(timestamp_send(x), 'hex') FROM (SELECT $1::timestamp AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    const TIMESTAMPS: &[(&str, &str, &str)] = &[
        (
            "2000-01-01 00:00:00",
            "2000-01-01 00:00:00",
            "0000000000000000",
        ),
        (
            "1999-12-31 23:59:59.999999",
            "1999-12-31 23:59:59.999999",
            "ffffffffffffffff",
        ),
        (
            "2024-01-02 03:04:05.5",
            "2024-01-02 03:04:05.5",
            "0002b0ec851d9460",
        ),
        (
            "2024-01-02 03:04:05.123456789",
            "2024-01-02 03:04:05.123457",
            "0002b0ec8517d581",
        ),
        (
            "2024-01-02 03:04:05.0000005",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05.0000015",
            "2024-01-02 03:04:05.000002",
            "0002b0ec8515f342",
        ),
        (
            "2024-01-02 03:04:05.9999995",
            "2024-01-02 03:04:06",
            "0002b0ec85253580",
        ),
        (
            "2024-01-02 24:00:00",
            "2024-01-03 00:00:00",
            "0002b0fe10980000",
        ),
        (
            "2024-01-02 23:59:60",
            "2024-01-03 00:00:00",
            "0002b0fe10980000",
        ),
        (
            "2024-01-02 12:00:60.5",
            "2024-01-02 12:01:00.5",
            "0002b0f405477820",
        ),
        (
            "2024-01-02 03:04",
            "2024-01-02 03:04:00",
            "0002b0ec84c9a800",
        ),
        ("2024-01-02", "2024-01-02 00:00:00", "0002b0e9f2c0a000"),
        (
            "2024-01-02 3:4:5",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02T03:04:05",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05+05",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05 BC",
            "2024-01-02 03:04:05 BC",
            "fe3cf87dbc90f340",
        ),
        (
            "0001-01-01 00:00:00 BC",
            "0001-01-01 00:00:00 BC",
            "ff1fc63d1bb12000",
        ),
        (
            "4714-11-24 00:00:00 BC",
            "4714-11-24 00:00:00 BC",
            "fd0f7cc1411fa000",
        ),
        (
            "294276-12-31 23:59:59.999999",
            "294276-12-31 23:59:59.999999",
            "7fffff5bb3b29fff",
        ),
        ("infinity", "infinity", "7fffffffffffffff"),
        ("-infinity", "-infinity", "8000000000000000"),
        ("epoch", "1970-01-01 00:00:00", "fffca2fec4c82000"),
        (
            "2024-01-02 03:04:05.5 bc",
            "2024-01-02 03:04:05.5 BC",
            "fe3cf87dbc989460",
        ),
        (
            "2024-01-02  03:04:05",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05.",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05.5Z",
            "2024-01-02 03:04:05.5",
            "0002b0ec851d9460",
        ),
        (
            "2024-01-02 03:04.5",
            "2024-01-02 00:03:04.5",
            "0002b0e9fdbfdf20",
        ),
        (
            "2024-02-29 12:00:00",
            "2024-02-29 12:00:00",
            "0002b582c4781000",
        ),
        (
            "1900-01-01 00:00:00.000001",
            "1900-01-01 00:00:00.000001",
            "fff4c9ee7c0b8001",
        ),
        (
            "2024-01-02 t 03:04:05",
            "2024-01-02 03:04:05",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 BC 03:04:05",
            "2024-01-02 03:04:05 BC",
            "fe3cf87dbc90f340",
        ),
    ];
    /// Inputs the same query refuses for timestamp.
    const TIMESTAMPS_REFUSED: &[&str] = &[
        "2024-01-02 24:00:01",
        "2024-01-02 23:59:60.5",
        "2024-01-02 23:59:61",
        "4714-11-23 23:59:59 BC",
        "294277-01-01 00:00:00",
        "2024-01-02 12:60:00",
        "2024-01-02 25:00:00",
        "03:04:05",
        "2024-01-02 03:04:05 03:04:06",
        "2024-01-02 03:04:05+16",
        "2024-01-02T",
        "2024-01-02 03:04:05.5.5",
        "2024-01-02 1:2:3:4",
        "",
    ];
    /// `SELECT x::text, encode(timestamptz_send(x), 'hex') FROM (SELECT $1::timestamptz AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    const TIMESTAMPTZS: &[(&str, &str, &str)] = &[
        (
            "2024-01-02 03:04:05.5+00",
            "2024-01-02 03:04:05.5+00",
            "0002b0ec851d9460",
        ),
        (
            "2024-01-02 03:04:05.5 +05",
            "2024-01-01 22:04:05.5+00",
            "0002b0e8543b6060",
        ),
        (
            "2024-01-02 03:04:05-05:30",
            "2024-01-02 08:34:05+00",
            "0002b0f12141f940",
        ),
        (
            "2024-01-02 03:04:05+0530",
            "2024-01-01 21:34:05+00",
            "0002b0e7e8e9ed40",
        ),
        (
            "2024-01-02 03:04:05+530",
            "2024-01-01 21:34:05+00",
            "0002b0e7e8e9ed40",
        ),
        (
            "2024-01-02 03:04:05+05:30:15",
            "2024-01-01 21:33:50+00",
            "0002b0e7e8050b80",
        ),
        (
            "2024-01-02 03:04:05+15:59:59",
            "2024-01-01 11:04:06+00",
            "0002b0df1beaf580",
        ),
        (
            "2024-01-02 03:04:05-15:59:59",
            "2024-01-02 19:04:04+00",
            "0002b0f9ee40f100",
        ),
        (
            "2024-01-02 03:04:05Z",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05 UTC",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05 gmt",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05 zulu",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05 ut",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        (
            "2024-01-02 03:04:05+00 BC",
            "2024-01-02 03:04:05+00 BC",
            "fe3cf87dbc90f340",
        ),
        (
            "0001-01-01 00:30:00+01 BC",
            "0002-12-31 23:30:00+00 BC",
            "ff1fc63cb0674e00",
        ),
        (
            "2024-01-02 03:04:05 z",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        ("Infinity", "infinity", "7fffffffffffffff"),
        ("-infinity", "-infinity", "8000000000000000"),
        ("epoch", "1970-01-01 00:00:00+00", "fffca2fec4c82000"),
        (
            "2024-01-02 03:04:05+5",
            "2024-01-01 22:04:05+00",
            "0002b0e85433bf40",
        ),
        (
            "2024-01-02 03:04:05 +05:30",
            "2024-01-01 21:34:05+00",
            "0002b0e7e8e9ed40",
        ),
        (
            "2024-01-02 03:04:05+05:3",
            "2024-01-01 22:01:05+00",
            "0002b0e849792a40",
        ),
        (
            "4714-11-23 23:00:00-02 BC",
            "4714-11-24 01:00:00+00 BC",
            "fd0f7cc217b34400",
        ),
        (
            "294276-12-31 23:59:59.999999+00",
            "294276-12-31 23:59:59.999999+00",
            "7fffff5bb3b29fff",
        ),
        (
            "2024-01-02T03:04:05.5+05:30",
            "2024-01-01 21:34:05.5+00",
            "0002b0e7e8f18e60",
        ),
        (
            "2024-01-02 03:04:05",
            "2024-01-02 03:04:05+00",
            "0002b0ec8515f340",
        ),
        ("2024-01-02", "2024-01-02 00:00:00+00", "0002b0e9f2c0a000"),
        (
            "2024-01-02 +05",
            "2024-01-01 19:00:00+00",
            "0002b0e5c1de6c00",
        ),
        (
            "2000-01-01 00:00:00+00",
            "2000-01-01 00:00:00+00",
            "0000000000000000",
        ),
        (
            "1999-12-31 23:59:59.999999+00",
            "1999-12-31 23:59:59.999999+00",
            "ffffffffffffffff",
        ),
        (
            "2024-01-02 03:04:05 +05 BC",
            "2024-01-01 22:04:05+00 BC",
            "fe3cf8798baebf40",
        ),
        (
            "2024-01-02 03:04:05.123456-01",
            "2024-01-02 04:04:05.123456+00",
            "0002b0ed5bab7980",
        ),
        (
            "2024-01-01 23:00:00-01",
            "2024-01-02 00:00:00+00",
            "0002b0e9f2c0a000",
        ),
        (
            "1970-01-01 00:00:00+00",
            "1970-01-01 00:00:00+00",
            "fffca2fec4c82000",
        ),
    ];
    /// Inputs the same query refuses for timestamptz.
    const TIMESTAMPTZS_REFUSED: &[&str] = &[
        "2024-01-02 03:04:05+16",
        "294276-12-31 23:59:59-01",
        "2024-01-02 03:04:05+05:60",
        "2024-01-02 03:04:05+05:30:60",
        "2024-01-02 03:04:05+05+06",
        "2024-01-02 03:04:05 Z Z",
        "2024-01-02 03:04:05+05.5",
        "",
    ];
    /// `SELECT x::text, encode(time_send(x), 'hex') FROM (SELECT $1::time AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    const TIMES: &[(&str, &str, &str)] = &[
        ("00:00:00", "00:00:00", "0000000000000000"),
        ("23:59:59.999999", "23:59:59.999999", "000000141dd75fff"),
        ("24:00:00", "24:00:00", "000000141dd76000"),
        ("23:59:60", "24:00:00", "000000141dd76000"),
        ("12:00:60.5", "12:01:00.5", "0000000a1286d820"),
        ("03:04:05.5", "03:04:05.5", "00000002925cf460"),
        ("3:4", "03:04:00", "0000000292090800"),
        ("03:04:05.1234567", "03:04:05.123457", "0000000292573581"),
        ("allballs", "00:00:00", "0000000000000000"),
        (" 03:04:05 ", "03:04:05", "0000000292555340"),
        ("03:04:05+05", "03:04:05", "0000000292555340"),
        ("2024-01-02 03:04:05", "03:04:05", "0000000292555340"),
        ("03:04.5", "00:03:04.5", "000000000aff3f20"),
        ("12:34:56.000001", "12:34:56.000001", "0000000a8bda1c01"),
        ("00:00:00.0000005", "00:00:00", "0000000000000000"),
        ("23:59:59.9999999", "24:00:00", "000000141dd76000"),
    ];
    /// Inputs the same query refuses for time.
    const TIMES_REFUSED: &[&str] = &[
        "24:00:00.1",
        "23:59:60.5",
        "25:00",
        "12:60",
        "12:00:61",
        "",
        "infinity",
        "03:04:05:06",
        "2024-01-02",
        "x",
    ];
    /// `SELECT x::text, encode(timetz_send(x), 'hex') FROM (SELECT $1::timetz AS x) v` on
    /// PostgreSQL 15.18: (input, text, hex).
    const TIMETZS: &[(&str, &str, &str)] = &[
        ("00:00:00+00", "00:00:00+00", "000000000000000000000000"),
        ("03:04:05.5+05", "03:04:05.5+05", "00000002925cf460ffffb9b0"),
        (
            "03:04:05-05:30",
            "03:04:05-05:30",
            "000000029255534000004d58",
        ),
        (
            "03:04:05+05:30:15",
            "03:04:05+05:30:15",
            "0000000292555340ffffb299",
        ),
        (
            "24:00:00-15:59:59",
            "24:00:00-15:59:59",
            "000000141dd760000000e0ff",
        ),
        ("03:04:05", "03:04:05+00", "000000029255534000000000"),
        ("03:04:05Z", "03:04:05+00", "000000029255534000000000"),
        ("03:04:05 UTC", "03:04:05+00", "000000029255534000000000"),
        (
            "03:04:05+0530",
            "03:04:05+05:30",
            "0000000292555340ffffb2a8",
        ),
        (
            "2024-01-02 03:04:05+01",
            "03:04:05+01",
            "0000000292555340fffff1f0",
        ),
        ("allballs", "00:00:00+00", "000000000000000000000000"),
        (
            "23:59:59.999999+15:59:59",
            "23:59:59.999999+15:59:59",
            "000000141dd75fffffff1f01",
        ),
        (
            "12:00:00-00:00:01",
            "12:00:00-00:00:01",
            "0000000a0eebb00000000001",
        ),
        (
            "12:00:00+00:00:01",
            "12:00:00+00:00:01",
            "0000000a0eebb000ffffffff",
        ),
    ];
    /// Inputs the same query refuses for timetz.
    const TIMETZS_REFUSED: &[&str] = &[
        "03:04:05+16",
        "03:04:05-16",
        "24:00:00.5+00",
        "",
        "03:04:05+05+06",
        "infinity",
    ];

    /// `COPY t (x date) FROM STDIN (FORMAT binary)` then `SELECT x::text` on PostgreSQL
    /// 15.18: (binary, text), `None` where the server refused the value.
    const DATES_RECEIVED: &[(&str, Option<&str>)] = &[
        ("7fffffff", Some("infinity")),
        ("80000000", Some("-infinity")),
        ("7fda970c", Some("5874897-12-31")),
        ("7fda970d", None),
        ("ffda97a7", Some("4714-11-24 BC")),
        ("ffda97a6", None),
        ("0000", None),
        ("0000000000", None),
    ];
    /// `COPY t (x time) FROM STDIN (FORMAT binary)` then `SELECT x::text` on PostgreSQL
    /// 15.18: (binary, text), `None` where the server refused the value.
    const TIMES_RECEIVED: &[(&str, Option<&str>)] = &[
        ("0000000000000000", Some("00:00:00")),
        ("000000141dd76000", Some("24:00:00")),
        ("000000141dd76001", None),
        ("ffffffffffffffff", None),
        ("00000000000001", None),
    ];
    /// `COPY t (x timetz) FROM STDIN (FORMAT binary)` then `SELECT x::text` on PostgreSQL
    /// 15.18: (binary, text), `None` where the server refused the value.
    const TIMETZS_RECEIVED: &[(&str, Option<&str>)] = &[
        ("000000000000000000000000", Some("00:00:00+00")),
        ("00000000000000000000e0ff", Some("00:00:00-15:59:59")),
        ("00000000000000000000e100", None),
        ("0000000000000000ffff1f00", None),
        ("0000000000000000ffff1f01", Some("00:00:00+15:59:59")),
        ("000000141dd7600100000000", None),
        ("ffffffffffffffff00000000", None),
        ("0000000000000000", None),
    ];
    /// `COPY t (x timestamp) FROM STDIN (FORMAT binary)` then `SELECT x::text` on PostgreSQL
    /// 15.18: (binary, text), `None` where the server refused the value.
    const TIMESTAMPS_RECEIVED: &[(&str, Option<&str>)] = &[
        ("fd0f7cc1411fa000", Some("4714-11-24 00:00:00 BC")),
        ("fd0f7cc1411f9fff", None),
        ("7fffff5bb3b29fff", Some("294276-12-31 23:59:59.999999")),
        ("7fffff5bb3b2a000", None),
        ("7fffffffffffffff", Some("infinity")),
        ("8000000000000000", Some("-infinity")),
        ("7ffffffffffffffe", None),
        ("8000000000000001", None),
        ("00000000", None),
    ];
    /// `COPY t (x timestamptz) FROM STDIN (FORMAT binary)` then `SELECT x::text` on PostgreSQL
    /// 15.18: (binary, text), `None` where the server refused the value.
    const TIMESTAMPTZS_RECEIVED: &[(&str, Option<&str>)] = &[
        ("fd0f7cc1411fa000", Some("4714-11-24 00:00:00+00 BC")),
        ("fd0f7cc1411f9fff", None),
        ("7fffff5bb3b29fff", Some("294276-12-31 23:59:59.999999+00")),
        ("7fffff5bb3b2a000", None),
        ("7fffffffffffffff", Some("infinity")),
        ("8000000000000000", Some("-infinity")),
        ("0000000000000001", Some("2000-01-01 00:00:00.000001+00")),
    ];

    /// `SELECT x::text, encode(date_send(x), 'hex') FROM (SELECT '+infinity'::date AS x) v`
    /// on PostgreSQL 18.6 (15 refuses the input), and the same for timestamp and timestamptz.
    #[test]
    fn plus_infinity_as_postgresql_18_reads_it() {
        assert_eq!(
            hex::encode(date_to_binary("+infinity").unwrap()),
            "7fffffff"
        );
        assert_eq!(
            hex::encode(timestamp_to_binary("+infinity").unwrap()),
            "7fffffffffffffff"
        );
        assert_eq!(
            hex::encode(timestamptz_to_binary("+infinity").unwrap()),
            "7fffffffffffffff"
        );
    }

    type ToBinary = fn(&str) -> Option<Vec<u8>>;
    type ToText = fn(&[u8]) -> Option<String>;

    /// Each row's input and output read to the server's bytes, and the bytes write the
    /// server's text; refused inputs and received bytes as the server treated them.
    fn check(
        rows: &[(&str, &str, &str)],
        refused: &[&str],
        received: &[(&str, Option<&str>)],
        to_binary: ToBinary,
        to_text: ToText,
    ) {
        for &(input, text, hex) in rows {
            let bytes = hex::decode(hex).unwrap();
            assert_eq!(to_binary(input), Some(bytes.clone()), "input {input:?}");
            assert_eq!(
                to_text(&bytes).as_deref(),
                Some(text),
                "output of {input:?}"
            );
            assert_eq!(to_binary(text), Some(bytes), "round trip of {input:?}");
        }
        for input in refused {
            assert_eq!(to_binary(input), None, "refused {input:?}");
        }
        for &(hex, text) in received {
            assert_eq!(
                to_text(&hex::decode(hex).unwrap()).as_deref(),
                text,
                "received {hex}"
            );
        }
    }

    #[test]
    fn dates() {
        check(
            DATES,
            DATES_REFUSED,
            DATES_RECEIVED,
            date_to_binary,
            date_to_text,
        );
    }

    #[test]
    fn timestamps() {
        check(
            TIMESTAMPS,
            TIMESTAMPS_REFUSED,
            TIMESTAMPS_RECEIVED,
            timestamp_to_binary,
            timestamp_to_text,
        );
    }

    #[test]
    fn timestamptzs() {
        check(
            TIMESTAMPTZS,
            TIMESTAMPTZS_REFUSED,
            TIMESTAMPTZS_RECEIVED,
            timestamptz_to_binary,
            timestamptz_to_text,
        );
    }

    #[test]
    fn times() {
        check(
            TIMES,
            TIMES_REFUSED,
            TIMES_RECEIVED,
            time_to_binary,
            time_to_text,
        );
    }

    #[test]
    fn timetzs() {
        check(
            TIMETZS,
            TIMETZS_REFUSED,
            TIMETZS_RECEIVED,
            timetz_to_binary,
            timetz_to_text,
        );
    }

    /// Every day of the date range converts to the text that converts back to it, which
    /// checks `date2j` against `j2date` (their rows above against the server).
    #[test]
    fn calendar_round_trips() {
        let mut day = -POSTGRES_EPOCH_JDATE;
        while day < DATE_END_JULIAN - POSTGRES_EPOCH_JDATE {
            let binary = i32::try_from(day).unwrap().to_be_bytes();
            let text = date_to_text(&binary).unwrap();
            assert_eq!(date_to_binary(&text).unwrap(), binary, "{text}");
            day += 9973;
        }
    }
}
