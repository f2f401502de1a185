//! Column values read as the ecosystem's types, each behind the feature tokio-postgres
//! gives it (`with-uuid-1`, `with-chrono-0_4`, `with-rust_decimal-1`,
//! `with-serde_json-1`), from text and from binary alike.
//!
//! A binary value is read through the text form PostgreSQL's output function writes
//! (this crate's conversions, checked against PostgreSQL 15 and 18), so each type has one
//! parser, exact either way. A column of another built-in type is refused; a type of the
//! database's own (a domain, by its OID) is read as its value allows.

use super::row::{Column, FromColumn, Problem, ValueError};

/// OIDs from here on are the database's own types (`FirstNormalObjectId`): a domain over
/// the type asked for is one of them.
const FIRST_NORMAL_OID: u32 = 16384;

/// The column's type is one of `oids`, or a type of the database's own.
fn of_type(column: &Column<'_>, oids: &[u32]) -> Result<(), ValueError> {
    let oid = column.type_oid().0;
    if oids.contains(&oid) || oid >= FIRST_NORMAL_OID {
        Ok(())
    } else {
        Err(column.error(Problem::Invalid))
    }
}

#[cfg(feature = "with-uuid-1")]
#[cfg_attr(docsrs, doc(cfg(feature = "with-uuid-1")))]
impl FromColumn for uuid::Uuid {
    /// `uuid`: 16 bytes in binary, `xxxxxxxx-xxxx-…` in text.
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        of_type(column, &[crate::values::UUID])?;
        if let Some(bytes) = column.fixed::<16>()? {
            return Ok(uuid::Uuid::from_bytes(bytes));
        }
        uuid::Uuid::parse_str(column.text()?.trim()).map_err(|_| column.error(Problem::Invalid))
    }
}

#[cfg(feature = "with-rust_decimal-1")]
#[cfg_attr(docsrs, doc(cfg(feature = "with-rust_decimal-1")))]
impl FromColumn for rust_decimal::Decimal {
    /// `numeric`, exactly, scale kept (`1.50` stays `1.50`). NaN, the infinities and a
    /// value beyond Decimal's 28 digits are refused, never rounded.
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        of_type(column, &[crate::values::NUMERIC])?;
        rust_decimal::Decimal::from_str_exact(column.text()?.trim())
            .map_err(|_| column.error(Problem::Invalid))
    }
}

#[cfg(feature = "with-serde_json-1")]
#[cfg_attr(docsrs, doc(cfg(feature = "with-serde_json-1")))]
impl FromColumn for serde_json::Value {
    /// `json` and `jsonb` (binary jsonb is its version byte and the text).
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        of_type(column, &[crate::values::JSON, crate::values::JSONB])?;
        serde_json::from_str(&column.text()?).map_err(|_| column.error(Problem::Invalid))
    }
}

#[cfg(feature = "with-chrono-0_4")]
mod chrono_types {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, Utc};

    use super::{of_type, Column, FromColumn, Problem, ValueError};
    use crate::values::{DATE, TIME, TIMESTAMP, TIMESTAMPTZ};
    use pgoutput_codec::PgTimestamp;

    /// PostgreSQL's epoch, 2000-01-01 00:00:00.
    fn epoch() -> NaiveDateTime {
        NaiveDate::from_ymd_opt(2000, 1, 1)
            .and_then(|date| date.and_hms_opt(0, 0, 0))
            .unwrap_or_default()
    }

    /// A timestamp's microseconds after the epoch; the infinities are refused.
    fn timestamp(column: &Column<'_>) -> Result<NaiveDateTime, ValueError> {
        let PgTimestamp(micros) = PgTimestamp::from_column(column)?;
        if micros == i64::MAX || micros == i64::MIN {
            return Err(column.error(Problem::Invalid));
        }
        epoch()
            .checked_add_signed(TimeDelta::microseconds(micros))
            .ok_or_else(|| column.error(Problem::Invalid))
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "with-chrono-0_4")))]
    impl FromColumn for NaiveDateTime {
        /// `timestamp` (without time zone); `infinity` is refused.
        fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
            of_type(column, &[TIMESTAMP])?;
            timestamp(column)
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "with-chrono-0_4")))]
    impl FromColumn for DateTime<Utc> {
        /// `timestamptz`, whatever the server's `TimeZone` printed it in; `infinity` is
        /// refused.
        fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
            of_type(column, &[TIMESTAMPTZ])?;
            timestamp(column).map(|at| at.and_utc())
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "with-chrono-0_4")))]
    impl FromColumn for NaiveDate {
        /// `date` (`2024-01-02`, `0044-03-15 BC`); `infinity` is refused.
        fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
            of_type(column, &[DATE])?;
            let text = column.text()?;
            let invalid = || column.error(Problem::Invalid);
            let (ymd, bc) = match text.trim().strip_suffix(" BC") {
                Some(ymd) => (ymd, true),
                None => (text.trim(), false),
            };
            let mut parts = ymd.splitn(3, '-').map(str::parse::<i32>);
            let mut next = || parts.next().and_then(Result::ok).ok_or_else(invalid);
            let (year, month, day) = (next()?, next()?, next()?);
            // 1 BC is year 0 in the proleptic Gregorian calendar chrono counts in.
            let year = if bc { 1 - year } else { year };
            let month = u32::try_from(month).map_err(|_| invalid())?;
            let day = u32::try_from(day).map_err(|_| invalid())?;
            NaiveDate::from_ymd_opt(year, month, day).ok_or_else(invalid)
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "with-chrono-0_4")))]
    impl FromColumn for NaiveTime {
        /// `time` (without time zone), to the microsecond; `24:00:00` is refused (chrono
        /// has no such time).
        fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
            of_type(column, &[TIME])?;
            NaiveTime::parse_from_str(column.text()?.trim(), "%H:%M:%S%.f")
                .map_err(|_| column.error(Problem::Invalid))
        }
    }
}
