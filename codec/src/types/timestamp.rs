//! PostgreSQL timestamps (`TimestampTz`): signed microseconds since 2000-01-01 00:00:00 UTC.

use core::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{Decode, Encode, IntoOwned};

/// Microseconds from the Unix epoch to PostgreSQL's epoch, 2000-01-01 00:00:00 UTC.
const POSTGRES_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

/// A `TimestampTz`: microseconds since 2000-01-01 00:00:00 UTC (Int64 on the wire).
///
/// Conversions never lose information silently: those that could fail (out of range, or a
/// `SystemTime` finer than a microsecond) return errors.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use pgoutput_codec::PgTimestamp;
///
/// let ts = PgTimestamp::from_unix_micros(1_700_000_000_123_456).unwrap();
/// assert_eq!(ts.to_string(), "2023-11-14 22:13:20.123456+00");
/// let time = SystemTime::try_from(ts)?;
/// assert_eq!(time, UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456));
/// assert_eq!(PgTimestamp::try_from(time)?, ts);
/// # Ok::<(), pgoutput_codec::TimestampError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Decode, IntoOwned, Encode)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct PgTimestamp(pub i64);

impl PgTimestamp {
    /// 2000-01-01 00:00:00 UTC.
    pub const POSTGRES_EPOCH: PgTimestamp = PgTimestamp(0);
    /// `'infinity'` (PostgreSQL's `DT_NOEND`).
    pub const INFINITY: PgTimestamp = PgTimestamp(i64::MAX);
    /// `'-infinity'` (PostgreSQL's `DT_NOBEGIN`).
    pub const NEG_INFINITY: PgTimestamp = PgTimestamp(i64::MIN);

    /// Microseconds since 2000-01-01 00:00:00 UTC, as on the wire.
    #[must_use]
    pub const fn micros_since_2000(self) -> i64 {
        self.0
    }

    /// From microseconds since the Unix epoch; `None` if that overflows the wire's range.
    #[must_use]
    pub const fn from_unix_micros(micros: i64) -> Option<Self> {
        match micros.checked_sub(POSTGRES_EPOCH_UNIX_MICROS) {
            Some(v) => Some(PgTimestamp(v)),
            None => None,
        }
    }

    /// Microseconds since the Unix epoch; `None` if that overflows an `i64`.
    #[must_use]
    pub const fn unix_micros(self) -> Option<i64> {
        self.0.checked_add(POSTGRES_EPOCH_UNIX_MICROS)
    }

    /// The current time, truncated to whole microseconds.
    #[must_use]
    pub fn now() -> Self {
        let since_unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let micros = i64::try_from(since_unix.as_micros()).unwrap_or(i64::MAX);
        Self::from_unix_micros(micros).unwrap_or(Self::INFINITY)
    }
}

/// Why a timestamp conversion could not be exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampError {
    /// The value does not fit the target type.
    OutOfRange,
    /// The `SystemTime` has a fraction of a microsecond, which the wire cannot carry.
    SubMicrosecond,
    /// The text is not a timestamp as `Display` prints it.
    Syntax,
}

impl fmt::Display for TimestampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TimestampError::OutOfRange => "timestamp out of range",
            TimestampError::SubMicrosecond => {
                "timestamp has sub-microsecond precision, which PostgreSQL cannot carry"
            }
            TimestampError::Syntax => {
                "invalid timestamp: expected YYYY-MM-DD HH:MM:SS[.ffffff]+00, infinity or -infinity"
            }
        })
    }
}

impl std::error::Error for TimestampError {}

impl TryFrom<SystemTime> for PgTimestamp {
    type Error = TimestampError;

    fn try_from(time: SystemTime) -> Result<Self, TimestampError> {
        let (duration, negative) = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => (after, false),
            Err(before) => (before.duration(), true),
        };
        if duration.subsec_nanos() % 1_000 != 0 {
            return Err(TimestampError::SubMicrosecond);
        }
        let micros = i64::try_from(duration.as_micros()).map_err(|_| TimestampError::OutOfRange)?;
        let unix = if negative { -micros } else { micros };
        Self::from_unix_micros(unix).ok_or(TimestampError::OutOfRange)
    }
}

impl TryFrom<PgTimestamp> for SystemTime {
    type Error = TimestampError;

    fn try_from(ts: PgTimestamp) -> Result<Self, TimestampError> {
        let unix = ts.unix_micros().ok_or(TimestampError::OutOfRange)?;
        let offset = Duration::from_micros(unix.unsigned_abs());
        let time = if unix >= 0 {
            UNIX_EPOCH.checked_add(offset)
        } else {
            UNIX_EPOCH.checked_sub(offset)
        };
        time.ok_or(TimestampError::OutOfRange)
    }
}

impl fmt::Display for PgTimestamp {
    /// ISO style in UTC, as PostgreSQL prints a `timestamptz` with `TimeZone = UTC`:
    /// `2023-11-14 22:13:20.123456+00`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::INFINITY => return f.write_str("infinity"),
            Self::NEG_INFINITY => return f.write_str("-infinity"),
            _ => {}
        }
        let micros = self.0;
        let days = micros.div_euclid(86_400_000_000);
        let of_day = micros.rem_euclid(86_400_000_000);
        let (year, month, day) = civil_from_days(days + 10_957); // 1970-01-01 to 2000-01-01
        let secs = of_day / 1_000_000;
        let frac = of_day % 1_000_000;
        write!(
            f,
            "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )?;
        if frac != 0 {
            let digits = format!("{frac:06}");
            write!(f, ".{}", digits.trim_end_matches('0'))?;
        }
        f.write_str("+00")
    }
}

impl fmt::Debug for PgTimestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PgTimestamp({self})")
    }
}

impl core::str::FromStr for PgTimestamp {
    type Err = TimestampError;

    /// Parses what `Display` prints: `2023-11-14 22:13:20.123456+00` (fraction optional,
    /// any year including negative ones), `infinity` and `-infinity`. Exact for every
    /// `i64`: `t.to_string().parse() == Ok(t)`.
    fn from_str(s: &str) -> Result<Self, TimestampError> {
        match s {
            "infinity" => return Ok(Self::INFINITY),
            "-infinity" => return Ok(Self::NEG_INFINITY),
            _ => {}
        }
        let bad = TimestampError::Syntax;
        let rest = s.strip_suffix("+00").ok_or(bad)?;
        let (date, time) = rest.split_once(' ').ok_or(bad)?;
        let (negative, date) = match date.strip_prefix('-') {
            Some(date) => (true, date),
            None => (false, date),
        };
        let mut date_parts = date.splitn(3, '-');
        let number = |part: Option<&str>, max_len: usize| -> Result<i64, TimestampError> {
            let part = part.ok_or(bad)?;
            if part.is_empty() || part.len() > max_len || !part.bytes().all(|b| b.is_ascii_digit())
            {
                return Err(bad);
            }
            part.parse().map_err(|_| bad)
        };
        let year = number(date_parts.next(), 18)?;
        let year = if negative { -year } else { year };
        let month = number(date_parts.next(), 2)?;
        let day = number(date_parts.next(), 2)?;
        let (clock, fraction) = match time.split_once('.') {
            Some((clock, fraction)) => (clock, Some(fraction)),
            None => (time, None),
        };
        let mut clock_parts = clock.splitn(3, ':');
        let hour = number(clock_parts.next(), 2)?;
        let minute = number(clock_parts.next(), 2)?;
        let second = number(clock_parts.next(), 2)?;
        let micros = match fraction {
            Some(f) if !f.is_empty() && f.len() <= 6 && f.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{f:0<6}").parse::<i64>().map_err(|_| bad)?
            }
            Some(_) => return Err(bad),
            None => 0,
        };
        if !(1..=12).contains(&month)
            || !(1..=31).contains(&day)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return Err(bad);
        }
        const DAY: i64 = 86_400_000_000;
        // Days since 2000 that an Int64 of microseconds can reach, with one day to spare on
        // each side for the time of day; anything beyond is out of range before any more
        // arithmetic can overflow.
        const MAX_DAYS: i64 = i64::MAX / DAY + 1;
        let days = days_from_civil(year, month, day)
            .and_then(|days| days.checked_sub(10_957))
            .filter(|days| (-MAX_DAYS..=MAX_DAYS).contains(days))
            .ok_or(TimestampError::OutOfRange)?;
        if civil_from_days(days + 10_957) != (year, month as u32, day as u32) {
            return Err(bad); // 31 February and the like
        }
        let of_day = (hour * 3600 + minute * 60 + second) * 1_000_000 + micros;
        // Before 2000 count back from the next midnight, so that values near i64::MIN do
        // not overflow on the way.
        let micros = if days < 0 {
            (days + 1)
                .checked_mul(DAY)
                .and_then(|v| v.checked_sub(DAY - of_day))
        } else {
            days.checked_mul(DAY).and_then(|v| v.checked_add(of_day))
        };
        micros.map(PgTimestamp).ok_or(TimestampError::OutOfRange)
    }
}

/// A proleptic Gregorian date to days since 1970-01-01 (Howard Hinnant's algorithm);
/// `None` on overflow.
fn days_from_civil(year: i64, month: i64, day: i64) -> Option<i64> {
    let y = year.checked_sub(i64::from(month <= 2))?;
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era.checked_mul(146_097)?.checked_add(doe - 719_468)
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
/// Total: computed in `i128`, so no `days` overflows (the year of any `i64` day count fits
/// an `i64`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = i128::from(days) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i128::from(month <= 2);
    (year as i64, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epoch_offsets() {
        assert_eq!(PgTimestamp(0).unix_micros(), Some(946_684_800_000_000));
        assert_eq!(PgTimestamp(0).to_string(), "2000-01-01 00:00:00+00");
        assert_eq!(PgTimestamp(-1).to_string(), "1999-12-31 23:59:59.999999+00");
        assert_eq!(
            PgTimestamp(1_500_000).to_string(),
            "2000-01-01 00:00:01.5+00"
        );
        assert_eq!(PgTimestamp::from_unix_micros(i64::MIN), None);
        assert_eq!(PgTimestamp(i64::MAX - 1).unix_micros(), None);
        assert_eq!(PgTimestamp::INFINITY.to_string(), "infinity");
    }

    #[test]
    fn system_time_round_trips_exactly() {
        for micros in [0, 1, -1, 1_700_000_000_123_456, -946_684_800_000_000] {
            let ts = PgTimestamp::from_unix_micros(micros).unwrap();
            let time = SystemTime::try_from(ts).unwrap();
            assert_eq!(PgTimestamp::try_from(time), Ok(ts), "{micros}");
        }
        let fine = UNIX_EPOCH + Duration::from_nanos(1_500);
        assert_eq!(
            PgTimestamp::try_from(fine),
            Err(TimestampError::SubMicrosecond)
        );
    }

    #[test]
    fn text_round_trips_for_every_value() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut values = vec![0, 1, -1, i64::MAX, i64::MIN, i64::MAX - 1, i64::MIN + 1];
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            values.push(x as i64);
            values.push((x as i64) >> (x % 64));
        }
        for v in values {
            let text = PgTimestamp(v).to_string();
            assert_eq!(
                text.parse::<PgTimestamp>(),
                Ok(PgTimestamp(v)),
                "{v}: {text}"
            );
        }
        for bad in [
            "",
            "2024-02-30 00:00:00+00",
            "2024-01-01 24:00:00+00",
            "2024-01-01 00:00:00",
            "2024-01-01T00:00:00+00",
            "2024-01-01 00:00:00.1234567+00",
        ] {
            assert!(bad.parse::<PgTimestamp>().is_err(), "{bad}");
        }
    }

    #[test]
    fn extreme_years_are_errors_not_overflows() {
        for text in [
            "-250000000000000000-01-01 00:00:00+00",
            // Lands 208 days above i64::MIN days: subtracting the 2000 epoch overflowed here.
            "-25252734927764584-01-01 00:00:00+00",
            "999999999999999999-12-31 23:59:59.999999+00",
            "-999999999999999999-01-01 00:00:00+00",
            "300000-01-01 00:00:00+00",
            "-300000-01-01 00:00:00+00",
        ] {
            assert_eq!(
                text.parse::<PgTimestamp>(),
                Err(TimestampError::OutOfRange),
                "{text}"
            );
        }
        // Every year around the edges of the range either parses exactly or is out of range.
        for year in (-290_400..-290_100).chain(294_100..294_400) {
            let text = format!("{year}-06-15 12:00:00+00");
            if let Ok(ts) = text.parse::<PgTimestamp>() {
                assert_eq!(ts.to_string().parse::<PgTimestamp>(), Ok(ts));
            }
        }
    }

    /// Both edges of every step of the conversion: the Int64 of microseconds, the day
    /// count's range check, and the era arithmetic of `days_from_civil` and
    /// `civil_from_days`, where years near 2.5e16 overflowed `days + 719_468`.
    #[test]
    fn every_boundary_of_the_conversion() {
        let parse = |text: &str| text.parse::<PgTimestamp>();
        // The last microseconds an Int64 holds, and one beyond, at both ends.
        let max = PgTimestamp(i64::MAX - 1).to_string();
        assert_eq!(max, "294277-01-09 04:00:54.775806+00");
        assert_eq!(parse(&max), Ok(PgTimestamp(i64::MAX - 1)));
        assert_eq!(
            parse("294277-01-09 04:00:54.775807+00"),
            Ok(PgTimestamp::INFINITY)
        );
        assert_eq!(
            parse("294277-01-09 04:00:54.775808+00"),
            Err(TimestampError::OutOfRange)
        );
        let min = PgTimestamp(i64::MIN + 1).to_string();
        assert_eq!(min, "-290278-12-22 19:59:05.224193+00");
        assert_eq!(parse(&min), Ok(PgTimestamp(i64::MIN + 1)));
        assert_eq!(
            parse("-290278-12-22 19:59:05.224192+00"),
            Ok(PgTimestamp::NEG_INFINITY)
        );
        assert_eq!(
            parse("-290278-12-22 19:59:05.224191+00"),
            Err(TimestampError::OutOfRange)
        );
        // The day range: the day after the last and before the first are out of range
        // whatever the time.
        for text in [
            "294277-01-10 00:00:00+00",
            "294278-01-01 00:00:00+00",
            "-290278-12-21 00:00:00+00",
            "-290279-01-01 00:00:00+00",
        ] {
            assert_eq!(parse(text), Err(TimestampError::OutOfRange), "{text}");
        }
        // days_from_civil: `era * 146_097` overflows from about year 2.5e16 on, and just
        // below that `days + 719_468` in civil_from_days did. Every year across both
        // edges, both signs, both sides of March (which shifts the year by one).
        let edge = i64::MAX / 146_097 * 400;
        for year in (edge - 400..edge + 400).chain(25_252_734_927_766_500..25_252_734_927_766_900) {
            for (sign, month) in [("", "01"), ("", "06"), ("-", "01"), ("-", "06")] {
                let text = format!("{sign}{year}-{month}-15 00:00:00+00");
                assert_eq!(parse(&text), Err(TimestampError::OutOfRange), "{text}");
            }
        }
        // The largest years the parser reads, and one digit more.
        assert_eq!(
            parse("999999999999999999-12-31 23:59:59+00"),
            Err(TimestampError::OutOfRange)
        );
        assert_eq!(
            parse("-999999999999999999-01-01 00:00:00+00"),
            Err(TimestampError::OutOfRange)
        );
        assert_eq!(
            parse("1000000000000000000-01-01 00:00:00+00"),
            Err(TimestampError::Syntax)
        );
        // civil_from_days is total: the extreme day counts give a date, no overflow.
        for days in [i64::MAX, i64::MIN, i64::MAX - 719_468, i64::MIN + 719_468] {
            let (_, month, day) = civil_from_days(days);
            assert!((1..=12).contains(&month) && (1..=31).contains(&day));
        }
    }

    #[test]
    fn calendar_dates() {
        // Stream Abort abort_time from a PostgreSQL 17 capture.
        assert_eq!(
            PgTimestamp(0x0003_0467_4534_E714).to_string(),
            "2026-11-29 11:21:59.369492+00"
        );
        assert_eq!(
            PgTimestamp(-1_000_000_000_000_000).to_string(),
            "1968-04-23 22:13:20+00"
        );
    }
}
