//! TupleData: the column values of a row.

use crate::{PgBytes, Seq};

/// TupleData: an Int16 column count, then one value per published column, in the order of
/// the Relation message's columns.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, Default, crate::Decode, crate::IntoOwned, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(transparent))]
pub struct TupleData<'a> {
    /// One value per column: decoded, a view of the input (no allocation).
    #[codec(count = u16)]
    pub columns: Seq<'a, ColumnValue<'a>>,
}

impl<'a> TupleData<'a> {
    /// A tuple of these values.
    #[must_use]
    pub fn new(columns: Vec<ColumnValue<'a>>) -> Self {
        TupleData {
            columns: columns.into(),
        }
    }
}

/// One column of a TupleData. A row may mix text and binary values: the format is chosen
/// per column (a type without a binary send function stays text in binary mode).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum ColumnValue<'a> {
    /// `'n'`: NULL.
    #[codec(tag = b'n')]
    Null,
    /// `'u'`: an unchanged TOASTed value; its data is not sent.
    #[codec(tag = b'u')]
    UnchangedToast,
    /// `'t'`: the value in text format (the type's output function, in `client_encoding`).
    #[codec(tag = b't')]
    Text(#[codec(len = i32)] PgBytes<'a>),
    /// `'b'`: the value in binary format (the type's send function; protocol 1+,
    /// PostgreSQL 14, with the `binary` option).
    #[codec(tag = b'b')]
    Binary(#[codec(len = i32)] PgBytes<'a>),
}

impl ColumnValue<'_> {
    /// The value's bytes, for `'t'` and `'b'`.
    #[must_use]
    pub fn bytes(&self) -> Option<&[u8]> {
        match self {
            ColumnValue::Text(bytes) | ColumnValue::Binary(bytes) => Some(bytes),
            ColumnValue::Null | ColumnValue::UnchangedToast => None,
        }
    }

    /// The text value as UTF-8, for `'t'` values that are.
    #[must_use]
    pub fn as_text(&self) -> Option<&str> {
        match self {
            ColumnValue::Text(bytes) => core::str::from_utf8(bytes).ok(),
            _ => None,
        }
    }
}

/// The old row of an Update or Delete.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, crate::Decode, crate::IntoOwned, crate::Tagged, crate::Encode,
)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum OldTuple<'a> {
    /// `'K'`: the old replica identity key. It lists every published column, with NULL for
    /// those outside the key (REPLICA IDENTITY DEFAULT or USING INDEX).
    #[codec(tag = b'K')]
    Key(TupleData<'a>),
    /// `'O'`: the whole old row (REPLICA IDENTITY FULL).
    #[codec(tag = b'O')]
    Old(TupleData<'a>),
}

impl<'a> OldTuple<'a> {
    /// The tuple, whichever kind it is.
    #[must_use]
    pub fn tuple(&self) -> &TupleData<'a> {
        match self {
            OldTuple::Key(tuple) | OldTuple::Old(tuple) => tuple,
        }
    }
}

/// Text: the value in PostgreSQL's text form.
impl From<&str> for ColumnValue<'static> {
    fn from(text: &str) -> Self {
        ColumnValue::Text(PgBytes::from(text.as_bytes().to_vec()))
    }
}

/// Text: the value in PostgreSQL's text form.
impl From<String> for ColumnValue<'static> {
    fn from(text: String) -> Self {
        ColumnValue::Text(PgBytes::from(text.into_bytes()))
    }
}

/// `None` is NULL; `Some` a value in text form.
impl<T: Into<ColumnValue<'static>>> From<Option<T>> for ColumnValue<'static> {
    fn from(value: Option<T>) -> Self {
        value.map_or(ColumnValue::Null, Into::into)
    }
}
