//! A row of a change, read through the relation cache: values by column name or index,
//! as Rust values whether the server sent them as text or binary.

use std::borrow::Cow;
use std::fmt;

use super::relations::{ColumnInfo, RelationInfo};
use pgoutput_codec::{ColumnValue, Oid, PgTimestamp, TupleData};

use crate::values::{BOOL, BYTEA, JSONB};

/// A row of an Insert, Update or Delete with its table's columns.
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    relation: &'a RelationInfo,
    tuple: &'a TupleData<'a>,
}

impl<'a> Row<'a> {
    pub(crate) fn new(relation: &'a RelationInfo, tuple: &'a TupleData<'a>) -> Row<'a> {
        Row { relation, tuple }
    }

    /// The table the row belongs to.
    #[must_use]
    pub fn relation(&self) -> &'a RelationInfo {
        self.relation
    }

    /// How many values the row has.
    #[must_use]
    pub fn len(&self) -> usize {
        self.tuple.columns.len()
    }

    /// Whether the row has no values.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `index`-th column (from 0).
    #[must_use]
    pub fn get(&self, index: usize) -> Option<Column<'a>> {
        Some(Column {
            info: self.relation.columns.get(index)?,
            value: self.tuple.columns.get(index)?,
        })
    }

    /// The column called `name`.
    #[must_use]
    pub fn column(&self, name: &str) -> Option<Column<'a>> {
        self.get(self.relation.position(name)?)
    }

    /// The value of the column called `name` as a `T`: `Option<T>` reads NULL as `None`.
    ///
    /// # Errors
    ///
    /// [`ValueError`] when there is no such column or its value is not a `T`.
    pub fn value<T: FromColumn>(&self, name: &str) -> Result<T, ValueError> {
        match self.column(name) {
            Some(column) => column.value(),
            None => Err(ValueError {
                column: name.to_owned(),
                type_oid: Oid(0),
                problem: Problem::NoSuchColumn,
            }),
        }
    }

    /// The replica identity's columns (the key), in order: of a Delete's old key, or the
    /// key of a full row.
    pub fn key(&self) -> impl Iterator<Item = Column<'a>> + 'a {
        self.iter().filter(|column| column.info.key)
    }

    /// Every column, in order.
    pub fn iter(&self) -> impl Iterator<Item = Column<'a>> + 'a {
        let columns = &self.relation.columns;
        columns
            .iter()
            .zip(self.tuple.columns.iter())
            .map(|(info, value)| Column { info, value })
    }
}

/// One value of a [`Row`] with its column's name and type.
#[derive(Debug, Clone)]
pub struct Column<'a> {
    info: &'a ColumnInfo,
    value: ColumnValue<'a>,
}

impl<'a> Column<'a> {
    /// The column's name.
    #[must_use]
    pub fn name(&self) -> &'a str {
        &self.info.name
    }

    /// The OID of the column's type.
    #[must_use]
    pub fn type_oid(&self) -> Oid {
        self.info.type_oid
    }

    /// The value as the server sent it.
    #[must_use]
    pub fn raw(&self) -> &ColumnValue<'a> {
        &self.value
    }

    /// Whether the value is NULL.
    #[must_use]
    pub fn is_null(&self) -> bool {
        matches!(self.value, ColumnValue::Null)
    }

    /// The value as a `T`.
    ///
    /// # Errors
    ///
    /// [`ValueError`] when it is NULL (read it as `Option<T>`), an unchanged TOAST value
    /// (not sent), or not a `T`.
    pub fn value<T: FromColumn>(&self) -> Result<T, ValueError> {
        T::from_column(self)
    }

    pub(super) fn error(&self, problem: Problem) -> ValueError {
        ValueError {
            column: self.info.name.clone(),
            type_oid: self.info.type_oid,
            problem,
        }
    }

    /// The value's bytes and whether they are binary; NULL and unchanged TOAST are errors.
    pub(super) fn sent(&self) -> Result<(&[u8], bool), ValueError> {
        match &self.value {
            ColumnValue::Text(bytes) => Ok((bytes.as_bytes(), false)),
            ColumnValue::Binary(bytes) => Ok((bytes.as_bytes(), true)),
            ColumnValue::Null => Err(self.error(Problem::Null)),
            ColumnValue::UnchangedToast => Err(self.error(Problem::UnchangedToast)),
        }
    }

    /// The value in its text form (what PostgreSQL's output function writes).
    pub(super) fn text(&self) -> Result<Cow<'_, str>, ValueError> {
        let (bytes, binary) = self.sent()?;
        let text: Cow<'_, [u8]> = if !binary {
            Cow::Borrowed(bytes)
        } else {
            match self.info.type_oid.0 {
                JSONB => match bytes.split_first() {
                    Some((1, json)) => Cow::Borrowed(json),
                    _ => return Err(self.error(Problem::Invalid)),
                },
                oid => Cow::Owned(
                    crate::values::binary_to_text(Oid(oid), bytes)
                        .ok_or_else(|| self.error(Problem::BinaryUnknown))?,
                ),
            }
        };
        match text {
            Cow::Borrowed(bytes) => std::str::from_utf8(bytes).map(Cow::Borrowed),
            Cow::Owned(bytes) => String::from_utf8(bytes)
                .map(Cow::Owned)
                .map_err(|e| e.utf8_error()),
        }
        .map_err(|_| self.error(Problem::NotUtf8))
    }

    /// The binary form, when that is what was sent and it is `N` bytes long.
    pub(super) fn fixed<const N: usize>(&self) -> Result<Option<[u8; N]>, ValueError> {
        match self.sent()? {
            (bytes, true) => bytes
                .try_into()
                .map(Some)
                .map_err(|_| self.error(Problem::Invalid)),
            (_, false) => Ok(None),
        }
    }

    pub(super) fn parse<T: std::str::FromStr>(&self) -> Result<T, ValueError> {
        self.text()?
            .trim()
            .parse()
            .map_err(|_| self.error(Problem::Invalid))
    }
}

/// A Rust type a column value can be read as, from its text or its binary form.
///
/// Implemented for `bool`, `i16`, `i32`, `i64`, `u32` (OIDs), `f32`, `f64`, `String` (the
/// value's text form, for every type whose binary form this crate knows: the text types,
/// numbers, bool, bytea, json, jsonb and uuid), `Vec<u8>` (bytea), [`PgTimestamp`]
/// (timestamp and timestamptz) and `Option<T>` of each (NULL is `None`); with the
/// `with-…` features, for the types tokio-postgres converts to: `uuid::Uuid`,
/// `rust_decimal::Decimal` (numeric, exact), `serde_json::Value` (json, jsonb) and
/// chrono's `NaiveDate`, `NaiveTime`, `NaiveDateTime` (timestamp) and `DateTime<Utc>`
/// (timestamptz).
pub trait FromColumn: Sized {
    /// Reads `column`'s value.
    ///
    /// # Errors
    ///
    /// [`ValueError`] saying why the value is not a `Self`.
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError>;
}

impl<T: FromColumn> FromColumn for Option<T> {
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        if column.is_null() {
            Ok(None)
        } else {
            T::from_column(column).map(Some)
        }
    }
}

impl FromColumn for bool {
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        if let Some([byte]) = column.fixed::<1>()? {
            return Ok(byte != 0);
        }
        match column.text()?.as_ref() {
            "t" if column.type_oid().0 == BOOL => Ok(true),
            "f" if column.type_oid().0 == BOOL => Ok(false),
            _ => Err(column.error(Problem::Invalid)),
        }
    }
}

macro_rules! from_number {
    ($($ty:ty),*) => {$(
        impl FromColumn for $ty {
            fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
                match column.fixed::<{ std::mem::size_of::<$ty>() }>() {
                    Ok(Some(bytes)) => Ok(<$ty>::from_be_bytes(bytes)),
                    Ok(None) => column.parse(),
                    // Binary of another width: another type, read through its text form.
                    Err(_) => column.parse(),
                }
            }
        }
    )*};
}

from_number!(i16, i32, i64, u32, f32, f64);

impl FromColumn for String {
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        column.text().map(Cow::into_owned)
    }
}

impl FromColumn for Vec<u8> {
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        if column.type_oid().0 != BYTEA {
            return Err(column.error(Problem::Invalid));
        }
        match column.sent()? {
            (bytes, true) => Ok(bytes.to_vec()),
            (_, false) => column
                .text()?
                .strip_prefix("\\x")
                .and_then(|digits| hex::decode(digits).ok())
                .ok_or_else(|| column.error(Problem::Invalid)),
        }
    }
}

impl FromColumn for PgTimestamp {
    /// Binary: microseconds since 2000-01-01. Text: `YYYY-MM-DD HH:MM:SS[.ffffff]`, with the
    /// UTC offset (`+01`, `-05:30`) timestamptz carries in the server's `TimeZone`.
    fn from_column(column: &Column<'_>) -> Result<Self, ValueError> {
        if let Some(bytes) = column.fixed::<8>()? {
            return Ok(PgTimestamp(i64::from_be_bytes(bytes)));
        }
        let text = column.text()?;
        let invalid = || column.error(Problem::Invalid);
        if matches!(text.as_ref(), "infinity" | "-infinity") {
            return text.parse().map_err(|_| invalid());
        }
        // The offset starts at the last sign after the time of day (byte 19 on).
        let (local, offset) = match text.get(19..).and_then(|tail| tail.rfind(['+', '-'])) {
            Some(at) => text.split_at(19 + at),
            None => (text.as_ref(), "+00"),
        };
        let local: PgTimestamp = format!("{local}+00").parse().map_err(|_| invalid())?;
        let sign = if offset.starts_with('-') { -1 } else { 1 };
        let mut parts = offset[1..].split(':').map(str::parse::<i64>);
        let hours = parts.next().and_then(Result::ok).ok_or_else(invalid)?;
        let minutes = parts
            .next()
            .transpose()
            .map_err(|_| invalid())?
            .unwrap_or(0);
        let seconds = parts
            .next()
            .transpose()
            .map_err(|_| invalid())?
            .unwrap_or(0);
        let micros = sign * ((hours * 60 + minutes) * 60 + seconds) * 1_000_000;
        local
            .0
            .checked_sub(micros)
            .map(PgTimestamp)
            .ok_or_else(invalid)
    }
}

/// Why a column value could not be read as the type asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueError {
    /// The column's name.
    pub column: String,
    /// The OID of its type (0 when there is no such column).
    pub type_oid: Oid,
    problem: Problem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Problem {
    NoSuchColumn,
    Null,
    UnchangedToast,
    BinaryUnknown,
    NotUtf8,
    Invalid,
}

impl ValueError {
    /// Whether the value is NULL (read the column as an `Option` to accept that).
    #[must_use]
    pub fn is_null(&self) -> bool {
        self.problem == Problem::Null
    }

    /// Whether the value is an unchanged TOAST value, which the server does not send.
    #[must_use]
    pub fn is_unchanged_toast(&self) -> bool {
        self.problem == Problem::UnchangedToast
    }
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let column = &self.column;
        let type_oid = self.type_oid.0;
        match self.problem {
            Problem::NoSuchColumn => write!(f, "no column {column:?}"),
            Problem::Null => write!(f, "column {column:?} is NULL"),
            Problem::UnchangedToast => {
                write!(f, "column {column:?} is an unchanged TOAST value, not sent")
            }
            Problem::BinaryUnknown => write!(
                f,
                "column {column:?}: the binary form of type {type_oid} is not known here"
            ),
            Problem::NotUtf8 => write!(f, "column {column:?}: the value is not UTF-8"),
            Problem::Invalid => write!(
                f,
                "column {column:?} (type {type_oid}): the value is not of the type asked for"
            ),
        }
    }
}

impl std::error::Error for ValueError {}
